// training.h — the training loop of pretrain_gpt (Megatron's training.py: pretrain →
// train → train_step), for a world of one rank today.
//
// One step: zero grads → for each microbatch: fetch, forward, backward (gradients sum,
// each microbatch's loss scaled by 1 / num_microbatches) → global grad norm and clip →
// AdamW at the step's learning rate → metrics. Global batch = micro batch × microbatches
// × dp, printed at start.
//
// The run directory gets config.json (resolved), metrics.rank-NNNNN.jsonl (one line per
// step, flushed as written), trace.rank-NNNNN.json (Chrome trace), memory.rank-NNNNN.json
// (the memory snapshot at peak) and, when one happens, oom.json.
#ifndef TB_TRAINING_H
#define TB_TRAINING_H

#include "config.h"
#include "core/error.h"
#include "datasets/gpt_dataset.h"
#include "models/gpt.h"
#include "optimizer/optimizer.h"
#include "parallel_state.h"

// The state of training on one rank: its model, optimizer and data (Megatron's
// model + optimizer + data iterator).
// With pipeline parallelism a rank holds one model chunk per virtual stage: chunk c is
// virtual stage c·pp + pp_rank, and the pipeline schedule runs their microbatches.
typedef struct tb_trainer {
    tb_rank *rk;
    const tb_config *cfg;
    int nchunks;                // model chunks on this rank (virtual pipeline size, or 1)
    gpt_model *models;          // (nchunks)
    tb_adamw *opts;             // (nchunks)
    tb_gpt_dataset data;
    int32_t *inputs, *targets;  // (M,B,T) the step's microbatches
    float *x_in, *x_out;        // (Ns,C) activations received from / sent to the neighbouring stages
    float *d_in, *d_out;        // (Ns,C) gradients sent to / received from them
    struct pp_op *ops;          // (2·M·nchunks) this rank's schedule
    int nops;
} tb_trainer;

// Where one step's time went on this rank (the per-stage timeline).
typedef struct tb_step_timeline {
    double forward_ms, backward_ms;  // compute of the forward and backward passes
    double p2p_ms;                   // pipeline sends and waits for receives
    double optimizer_ms;             // finalize grads, clip, AdamW, parameter all-gather
    double pipeline_ms;              // the whole forward/backward schedule
} tb_step_timeline;

typedef struct tb_step_result {
    double loss;        // mean over the global batch
    double grad_norm;   // before clipping
    double lr;
    tb_step_timeline time;
} tb_step_result;

// Opens the data, builds the model (loading --load if set) and the optimizer, all through
// rk's allocator. rk must be initialised (allocator, trace bound to this thread).
int trainer_init(tb_trainer *tr, const tb_config *cfg, tb_rank *rk, tb_error *err);
void trainer_free(tb_trainer *tr);
// One optimizer step (1-based): every microbatch's forward and backward, clipping, AdamW.
tb_step_result train_step(tb_trainer *tr, int64_t step);

// A world-of-one rank context for cfg (coordinates all 0); allocator and trace untouched.
void rank_init_single(tb_rank *rk, const tb_config *cfg);

// Runs a validated, resolved config to the end. Returns 0, or -1 with err set. An OOM
// under --memory-cap does not return: it writes its report and exits with status 3.
int pretrain(const tb_config *cfg, tb_error *err);

#endif
