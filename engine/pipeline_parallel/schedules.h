// schedules.h — the order in which a pipeline rank runs the forward and backward passes of
// its microbatches (Megatron-Core pipeline_parallel/schedules.py), as a list of ops, and
// the executor that walks it (Megatron's forward_backward_func). p = pipeline size, r = this rank's stage, m = microbatches,
// v = model chunks per rank (virtual pipeline; 1 = not interleaved).
//
//   no pipelining (p = 1)   F0 B0 F1 B1 ...: gradient accumulation
//   1F1B                    warm-up min(p − r − 1, m) forwards, then one forward + one
//                           backward in the steady state, then the cool-down backwards
//   interleaved 1F1B        over m·v virtual microbatches: warm-up (p − r − 1)·2 + (v − 1)·p
//                           (at most m·v); virtual microbatch k runs chunk (k mod p·v) / p of
//                           microbatch (k / p·v)·p + k mod p — microbatch groups of size p,
//                           chunk-major inside a group; backward chunks count down
//
// Bubble fraction of an ideal pipeline: (p − 1)/(m + p − 1), interleaved (p − 1)/(v·m + p − 1).
#ifndef TB_PIPELINE_PARALLEL_SCHEDULES_H
#define TB_PIPELINE_PARALLEL_SCHEDULES_H

#include <stdint.h>

#include "config/config.h"
#include "models/gpt.h"
#include "pipeline_parallel/p2p_communication.h"

struct tb_rank;

typedef struct pp_op {
    char kind;       // 'F' forward, 'B' backward
    int microbatch;
    int chunk;       // model chunk of this rank (0 .. v-1)
} pp_op;

// Writes the 2·m·v ops of rank r into ops; returns their count.
int pipeline_schedule(int p, int r, int m, int v, pp_op *ops);
// Warm-up forwards of rank r.
int pipeline_warmup(int p, int r, int m, int v);
double pipeline_theoretical_bubble(int p, int m, int v);

// ---------------------------------------------------------------------------------------
// The point-to-point program: what a rank sends and receives between the ops of its
// schedule, as the calls of p2p_communicate the executor makes. An op receives its input
// before it runs (a forward the activation from the previous stage unless its virtual stage
// is the first, a backward the gradient from the next unless its virtual stage is the last)
// and sends its output after it (the forward's activation unless last, the backward's
// gradient unless first). Batched (what the executor runs), each call holds the sends of the
// ops since the previous call and the recvs of the ops up to the next one, Megatron's
// _communicate pairs:
//   1F1B (and no pipelining)  one op between calls: send_forward_recv_backward after a
//                             forward, send_backward_recv_forward after a backward, the
//                             warm-up's send_forward_recv_forward, the cool-down's
//                             send_backward_recv_backward;
//   interleaved               the same in warm-up and cool-down, but the steady state's
//                             forward and backward run back to back between two calls of
//                             send_forward_backward_recv_forward_backward (with one op
//                             between calls, an interleaved pipeline deadlocks on
//                             rendezvous sends, e.g. p 2, m 4, v 2).
// Separate is the executor before batching: every send and every recv a call of its own, in
// the same order (a deadlock on rendezvous sends already at p 2, m 2).

typedef enum pp_p2p_mode { PP_P2P_SEPARATE, PP_P2P_BATCHED } pp_p2p_mode;

typedef struct pp_p2p_call {
    int before;               // runs before op `before` of the schedule (the op count: after the last)
    pp_msg msg[PP_P2P_DIRS];  // by direction; p2p_communicate issues them in this order
} pp_p2p_call;

// The calls of rank r for its schedule ops (nops of them, pipeline_schedule(p, r, m, v)) in
// order, written into calls (room for 2·nops + 1); returns their count.
int pipeline_p2p_program(int p, int r, int m, int v, pp_p2p_mode mode, const pp_op *ops, int nops,
                         pp_p2p_call *calls);

// ---------------------------------------------------------------------------------------
// The executor. Megatron has three functions (forward_backward_no_pipelining,
// _pipelining_without_interleaving, _with_interleaving); here the three schedules are op
// lists from pipeline_schedule and one executor walks whichever the layout gives.

// Where one step's time went on this rank (the per-stage timeline).
typedef struct tb_step_timeline {
    double data_ms;                  // get_batch: the step's microbatches read (train_step)
    double forward_ms, backward_ms;  // compute of the forward and backward passes
    double p2p_ms;                   // pipeline sends and waits for receives
    double optimizer_ms;             // finalize grads, clip, AdamW, parameter all-gather (train_step)
    double exposed_comm_ms;          // gradient reduction not hidden under compute (train_step): the whole
                                     // of finalize_model_grads (with --overlap-grad-reduce: the wait for the
                                     // communication thread's buckets after backward) plus the rank's own
                                     // sequence-parallel all-reduces during backward
    double pipeline_ms;              // the whole forward/backward schedule (train_step)
} tb_step_timeline;

// One rank's pipeline: its model chunks, its schedule, and the buffers of what crosses
// stage boundaries. Chunk c is virtual stage c·pp + pp_rank.
typedef struct tb_pipeline {
    struct tb_rank *rk;
    gpt_model *models;                   // (nchunks), owned by the trainer
    int nchunks;
    int micro_batch_size, seq_length, num_microbatches;
    pp_op *ops;                          // (2·M·nchunks) this rank's schedule
    int nops;
    pp_p2p_call *calls;                  // its point-to-point program (batched)
    int ncalls;
    p2p_peers peers;
    float *x_in, *x_out;                 // (Ns,C) activations received from / sent to the neighbouring stages
    float *d_in, *d_out;                 // (Ns,C) gradients sent to / received from them; all NULL when pp = 1
    float grad_scale;                    // the backward's seed is grad_scale / M (--fp16's loss scale; else 1)
    int nonfinite_microbatch;            // of the last step: the first microbatch whose loss was NaN or Inf
                                         // on this (last) stage, -1 when none
} tb_pipeline;

// The schedule of rank rk for cfg, and (pp > 1) its p2p buffers from rk's allocator.
void pipeline_init(tb_pipeline *pl, const tb_config *cfg, struct tb_rank *rk, gpt_model *models, int nchunks);
void pipeline_free(tb_pipeline *pl);

// Runs this rank's schedule for one step: every (microbatch, chunk) forward and backward,
// activations and gradients exchanged with the neighbouring stages by the calls of its
// point-to-point program (p2p_communicate, their time in time->p2p_ms), each microbatch's loss
// scaled by 1 / num_microbatches. inputs, targets: (M,B,T), the step's microbatches.
// Adds forward, backward and p2p time to *time. Returns the sum of the last stage's
// microbatch losses (0 on other stages).
double forward_backward_func(tb_pipeline *pl, const int32_t *inputs, const int32_t *targets, tb_step_timeline *time);

#endif
