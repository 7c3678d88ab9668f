// training.h — the training loop of pretrain_gpt (Megatron's training.py: pretrain → train
// → train_step), for every rank of the world.
//
// One step: zero grads → the pipeline schedule runs every microbatch's forward and backward
// (forward_backward_func; gradients sum, each microbatch's loss scaled by 1 /
// num_microbatches) → finalize grads (data-parallel reduction, tied embedding) → global grad
// norm and clip → AdamW at the step's learning rate (→ parameter all-gather under the
// distributed optimizer) → the global batch's loss. Global batch = micro batch ×
// microbatches × dp, printed at start.
//
// What a run leaves in its run directory is written by engine/reports/ under the names of
// core/run_dir.h (docs/ARCHITECTURE.md, "The run directory and the record").
#ifndef TB_TRAINING_H
#define TB_TRAINING_H

#include "distributed/distributed_data_parallel.h"
#include "checkpoint/dist_checkpoint.h"
#include "config/config.h"
#include "core/error.h"
#include "datasets/gpt_dataset.h"
#include "initialize.h"
#include "models/gpt.h"
#include "optimizer/grad_scaler.h"
#include "optimizer/optimizer.h"
#include "comm/parallel_state.h"
#include "comm/single_rank.h"
#include "pipeline_parallel/schedules.h"

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
    tb_pipeline pipeline;       // the schedule and the p2p buffers
    int64_t start_iteration;    // the checkpoint's iteration when resumed (--load DIR), else 0
    dist_ckpt_writer ckpt;      // --save: the save in flight and checkpoint.json's record
    struct tb_tensor_dump *dump;  // --dump-tensors, or NULL
    tb_ddp ddp;                 // --overlap-grad-reduce: the buckets and the communication thread
    tb_allocator *host;         // the data's and the batch's: rk->mem, or host_mem when rk->mem is a device's
    tb_allocator host_mem;
    tb_grad_scaler scaler;      // --fp16: the dynamic loss scale
} tb_trainer;

typedef struct tb_step_result {
    double loss;        // mean over the global batch
    double grad_norm;   // before clipping
    double lr;
    int nonfinite_microbatch;  // the first microbatch whose loss was NaN or Inf on this rank, -1: none
    double loss_scale;  // --fp16: the scale this step's backward ran with (0 without --fp16)
    int skipped;        // --fp16: the gradients overflowed, no update (the loss scaler backs off)
    tb_step_timeline time;
} tb_step_result;

// Opens the data, builds the model (loading --load if set) and the optimizer, all through
// rk's allocator. rk must be initialised (allocator, ranges bound to this thread).
int trainer_init(tb_trainer *tr, const tb_config *cfg, tb_rank *rk, tb_error *err);
void trainer_free(tb_trainer *tr);
// One optimizer step (1-based): every microbatch's forward and backward, clipping, AdamW.
tb_step_result train_step(tb_trainer *tr, int64_t step);


// Runs a validated, resolved config to the end: creates the run directory, config.json and
// launch.json, starts this process's rank threads (every rank's without mpirun: launch NULL
// means threads), trains. Under mpirun every process calls it; process 0 creates the run
// directory and the others wait for it, and the groups that span processes go over MPI. Returns 0, or the exit status of the run's
// failure with err set: TB_EXIT_OUT_OF_MEMORY (over --memory-cap: oom.json written),
// TB_EXIT_HANG (a communicator call timed out — hang.json written — or failed),
// TB_EXIT_FAILURE (anything else). A rank that fails aborts the world: its peers stop at
// their next communicator call, and the reported error is that first rank's.
int pretrain(const tb_config *cfg, const tb_launch *launch, tb_error *err);

#endif
