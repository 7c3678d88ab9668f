// fsdp.h — Megatron-FSDP's sharded gradients and parameters (Megatron-Core distributed/fsdp/:
// --use-megatron-fsdp --data-parallel-sharding-strategy optim_grads | optim_grads_params), on
// the rank's thread.
//
// FSDP units: the embedding, each transformer layer, the final norm and output layer — the
// sites of the backward (distributed_data_parallel.h). The model's flat buffer is cut at every
// unit boundary (moved down to a multiple of dp × cp, so a unit's first elements may sit in the
// bucket before it), and the distributed optimizer's shard is this rank's slice of every such
// bucket: a unit's parameters, gradients and optimizer state split evenly over dp × cp, as
// Megatron-FSDP's per-unit buffers are. A MoE layer's experts (in the experts' range of the
// buffer) are a bucket of their own, split over expert-dp. Under pp a stage's one chunk is
// sharded; a word embedding tied across stages is its own bucket on both (fsdp_unit_cuts).
//
// Memory: the parameter and gradient buffers of a sharded model are reservations
// (runtime/memory.h): pointers into the whole buffer stay valid, and only the ranges this module
// commits hold memory.
//   - optim_grads (ZeRO-2): a bucket's gradient range is committed when the backward of a unit
//     that writes it starts, and given back once its gradients of the microbatch are final and
//     reduce-scattered: each rank adds its slice of the sum into its shard (the optimizer's
//     shard_grads, fp32). No whole gradient lives past a unit's backward, with or without
//     gradient accumulation — the reduce-scatter runs every microbatch, as Megatron-FSDP's and
//     PyTorch FSDP's do. After the last microbatch the shard, averaged over dp × cp, is written
//     to the rank's slices of the gradient buffer (committed until the next step) where the
//     optimizer and the gradient norm read it.
//   - optim_grads_params (ZeRO-3): also the parameters. A rank holds its slice of every bucket
//     (category params); before a unit's forward and before its backward the buckets holding the
//     unit's parameters are all-gathered in place (the other ranks' slices committed in category
//     "gathered"), and every bucket the unit does not need is given back first — so the peak
//     holds one unit's parameters (and the neighbouring bucket's few elements), not the model's.
//     After the optimizer step nothing is gathered; a read of the whole model (a checkpoint, a
//     tensor dump, the end of training) gathers every bucket first (fsdp_gather_all).
//     fsdp_init draws the initial values tensor by tensor and keeps what falls in the rank's
//     slices, so the whole model is never held — except for a --load, which writes it whole
//     (committed as gathered: gpt_params_whole) before fsdp_init keeps the slices.
// A given-back range reads as zeros: a read of parameters the module did not gather is wrong
// loudly, not stale quietly.
//
// Numerics: each microbatch's gradient is summed over dp × cp in group order (comm/reduce.h) and
// the microbatches' sums added in order, where the replicated paths sum a rank's microbatches
// first: the same terms in another order, so a layout's losses match the single rank's within
// float rounding, not bitwise (tests/engine/test_fsdp.c).
//
// Time: without overlap the all-gathers and reduce-scatters run between the units' compute on
// the rank's thread, all of it exposed (tb_step_time.exposed_comm_ms). With --overlap-grad-reduce
// every dp call of the step runs on the rank's communication thread (distributed_data_parallel.c)
// in the order the rank thread posts it — the same on every rank of the group — through
// tb_fsdp_comm: a bucket's reduce-scatter is posted when its gradients are final and waited for
// only when the bucket's range is written again (the next microbatch's backward of its unit), or
// when more than two units' gradients would be live (Megatron-FSDP's drain: the unit being
// written and the one being reduced); a gather is posted when its unit needs it. With
// --overlap-param-gather (optim_grads_params) the next unit's gather is also posted before this
// unit computes (prefetch): the units' order is the first step's, recorded, as PyTorch FSDP's
// forward and backward prefetch use (a static schedule; pp's interleaving and recompute's forward
// inside the backward included); a rank holds at most two units' parameters then. What the rank
// thread waits for is exposed: ranges fsdp.wait_param_gather and fsdp.wait_reduce_scatter on its
// track, the calls themselves in ranges fsdp.all_gather_params.B and fsdp.reduce_scatter_grads.B
// on the communication thread's (their bytes in the communicator's records, `tracebook comm`).
// The same collectives in the same order sum the same terms: losses are the same bits with and
// without overlap (tests/engine/test_overlap.c).
#ifndef TB_DISTRIBUTED_FSDP_H
#define TB_DISTRIBUTED_FSDP_H

#include <stddef.h>
#include <stdint.h>

#include "comm/parallel_state.h"
#include "models/gpt.h"
#include "optimizer/optimizer.h"

// What of a bucket's gradient range is committed.
typedef enum fsdp_grads_held {
    FSDP_GRADS_NONE,        // nothing: given back
    FSDP_GRADS_MICROBATCH,  // the whole range: a unit's backward writes the microbatch's gradients
    FSDP_GRADS_REDUCING,    // the whole range, its reduce-scatter posted to the communication thread
    FSDP_GRADS_SLICE,       // this rank's slice: the step's averaged shard, read by the optimizer
    FSDP_GRADS_WHOLE,       // the slice and the others' (all-gathered for a tensor dump)
} fsdp_grads_held;

// The communication thread's queue, as the rank thread sees it (distributed_data_parallel.c):
// post returns the work's ticket, in posting order; the thread runs the work in that order
// (fsdp_comm_run); wait returns once the work of `ticket` is done (a failed thread fails the
// rank there); done says whether it is, without waiting. Tickets count from 0 at each step's
// start (the window of distributed_data_parallel.h opens there).
typedef struct tb_fsdp_comm {
    void *ctx;
    int (*post)(void *ctx, int bucket, int gather);
    void (*wait)(void *ctx, int ticket);
    int (*done)(void *ctx, int ticket);
} tb_fsdp_comm;

// A unit's use of its parameters, in the order of the step (the prefetch's schedule).
typedef struct fsdp_use {
    int site, backward;
} fsdp_use;

typedef struct tb_fsdp {
    int active;               // gradients sharded: optim_grads or optim_grads_params over dp × cp > 1
    int shard_params;         // optim_grads_params
    tb_group *dp, *tp;        // the shard's group (dp × cp) and tp (partial gradients)
    tb_group *emb;            // the first and last stage, when they share the word embedding; else NULL
    int wte;                  // its parameter (the first bucket, fsdp_unit_cuts), -1 none
    gpt_model *m;             // the rank's one model chunk (its stage's, under pp)
    tb_adamw *opt;            // its buckets are the units' (fsdp_unit_cuts)
    int sp_reduce;            // sequence parallelism over tp > 1: sp_partial gradients summed over tp
    int *site;                // [param] the unit whose backward makes its gradient final
    int *blo, *bhi;           // [param] the buckets it has an element in
    // the sites (units), indexed site - GPT_SITE_EMBEDDING: the embedding, the head, each layer
    int nsites;
    unsigned char *needs;     // [site * nbuckets + bucket] the unit's forward and backward read the bucket
    int *site_first;          // [site + 1] its parameters in site_params[site_first[s] .. site_first[s + 1]),
    int *site_params;         //   last first (the order their buckets fill in)
    int *pending;             // [bucket] its parameters whose gradient of this microbatch is still to come
    int *nparams;             // [bucket]
    unsigned char *gathered;  // [bucket] the other ranks' slices of its parameters are here
    unsigned char *grads_held;  // [bucket] an fsdp_grads_held
    float *reduced;           // the largest slice: a reduce-scatter's destination
    // overlap (comm.post set): the communication thread's work, its tickets, and the schedule
    tb_fsdp_comm comm;
    int prefetch;             // --overlap-param-gather under optim_grads_params
    int *gather_ticket;       // [bucket] its all-gather's ticket while not waited for, else -1
    int *reduce_ticket;       // [bucket] its reduce-scatter's (FSDP_GRADS_REDUCING), else -1
    int posted;               // tickets posted this step (the next one's number)
    int drain_before;         // the first ticket the last fsdp_site_done posted: older reduce-scatters drain
    fsdp_use *order;          // the units' uses of the first step with overlap, in order (norder)
    int norder, order_cap, recorded;  // recorded: the first step is over, the schedule known
    int at;                   // this step's uses so far
    int off_schedule;         // a use this step that the schedule did not have: no prefetch until the next step
    double gather_ms, reduce_ms;  // this step's all-gathers, and reduce-scatters (with the tp sums)
    // (their bytes are the communicator's: each call's range in the trace, `tracebook comm`)
} tb_fsdp;

// The bucket boundaries of Megatron-FSDP: one bucket a unit (a MoE layer's experts another),
// each cut at the unit's first parameter moved down to a multiple of align; with the word
// embedding shared with another pipeline stage (shared_align > 0, a multiple of align that both
// stages compute alike), its own bucket from the buffer's start to its end rounded up to a
// multiple of shared_align. *cuts malloc'd (NULL when none); their count.
int fsdp_unit_cuts(const gpt_model *m, size_t align, size_t shared_align, size_t **cuts);

// Takes over model m (its buffers reserved by gpt_model_init_chunk) and its optimizer: with
// optim_grads_params initialises (or, loaded whole, keeps) the rank's slices of the parameters,
// and makes the backward report every microbatch. Inactive (f->active 0)
// when the config shards no gradients or dp × cp is 1.
void fsdp_init(tb_fsdp *f, const tb_config *cfg, tb_rank *rk, gpt_model *m, tb_adamw *opt);
void fsdp_free(tb_fsdp *f);
// Before the step's first forward: the previous step's gradient slices given back, the shard zeroed.
void fsdp_start_step(tb_fsdp *f);
// Before the forward (backward 0) or the backward (1) of a unit (a site of gpt.h's hooks): its
// parameters gathered and every other bucket's given back (optim_grads_params); before a
// backward, the gradient ranges it writes committed.
void fsdp_acquire(tb_fsdp *f, int site, int backward);
// After a unit's backward, every microbatch: its gradients of the microbatch are final; each
// bucket whose every parameter's are is reduce-scattered into the shard and given back.
void fsdp_site_done(tb_fsdp *f, int site);
// After the last microbatch: the shard averaged into the rank's slices of the gradient buffer
// (a shared word embedding's slice first summed over the first and last stage, as
// finalize_model_grads sums its whole gradient).
void fsdp_finish_grad_sync(tb_fsdp *f);
// Every bucket's parameters gathered (optim_grads_params): before a read of the whole model.
void fsdp_gather_all(tb_fsdp *f);
// After the optimizer step: the gathered copies are stale, every bucket's given back.
void fsdp_release_all(tb_fsdp *f);
// Every bucket's gradients whole on every rank (the slices all-gathered): a tensor dump's read.
void fsdp_gather_grads(tb_fsdp *f);

// Overlap: posts the step's dp calls to a communication thread from now on (fsdp_init first).
void fsdp_overlap(tb_fsdp *f, const tb_fsdp_comm *comm, int prefetch);
// On the communication thread: the work of a ticket — bucket b's all-gather (gather 1) or
// reduce-scatter into the shard (0) — over the thread's own copies of the groups (dp: dp × cp;
// edp: expert-dp, for the experts' buckets when apart, else NULL).
void fsdp_comm_run(tb_fsdp *f, int b, int gather, int64_t step, tb_group *dp, tb_group *edp);
// Once every posted ticket is done (the window closed): the reduced buckets given back, the
// gathers' tickets forgotten; the first step's schedule kept.
void fsdp_comm_settle(tb_fsdp *f);

#endif
