// distributed_data_parallel.h — the data-parallel gradient reduction and (distributed
// optimizer) parameter all-gather in buckets, overlapped with the backward and the next
// forward (Megatron-Core distributed/distributed_data_parallel.py, param_and_grad_buffer.py):
// --overlap-grad-reduce and --overlap-param-gather.
//
// Buckets (ddp_bucket_cuts): each model chunk's flat buffer is cut into contiguous ranges in
// reverse parameter order (backward produces the last layers' gradients first), each of at
// least --ddp-bucket-size elements except the last (the buffer's start), cut at parameter
// boundaries. The tied word embedding, when the first and last pipeline stages share it, is
// a bucket of its own, as in Megatron: its gradient is final only after finalize's embedding
// all-reduce, so it must not hold back the parameters around it. With the distributed
// optimizer every cut is moved to a multiple of dp (down; the tied embedding's upper cut up),
// so that each bucket splits into dp equal slices — the optimizer's shard is this rank's slice
// of every bucket (optimizer/optimizer.h), Megatron's layout — and a bucket may then hold the
// first or last elements of a neighbouring parameter: it waits for that parameter too. The
// distributed optimizer's shard follows the buckets with or without overlap (Megatron uses
// one bucket without overlap): the same layout either way, so overlap on and off give the
// same bits. With the default bucket size a small model is one bucket.
//
// Readiness: the pipeline marks a chunk's last backward (the step's last microbatch of that
// chunk: under gradient accumulation only its gradients are final), and the backward reports
// each site whose parameter gradients are then final (the output layer and final norm, each
// transformer layer, the embedding). A bucket whose parameters are all final is queued.
// Under sequence parallelism the rank thread first all-reduces a final sp_partial gradient
// over tp, as finalize_model_grads does without overlap, so every element is summed over tp
// before dp in both paths.
//
// The communication thread: one per rank, it takes the queued work in queue order — a
// bucket's gradient all-reduce over dp × cp then its average, or with the distributed
// optimizer its reduce-scatter (this rank's slice summed, then averaged) — and, with
// --overlap-param-gather, after the optimizer step each bucket's all-gather of the updated
// slices, queued in forward order (a chunk's buffer from its start); the next forward waits,
// before each site's first use of its parameters (the embedding, each layer, the output
// layer), for the buckets that hold them (Megatron's forward pre-hook, finish_param_sync).
// Every dp rank of a stage runs the same schedule, so each queues the same work in the same
// order: the dp group's sequence numbers stay consistent across ranks. The rank thread makes
// no dp call while the window is open: from the first backward (or the end of the previous
// step, when gathers are queued) until ddp_finish_grad_sync, or ddp_finish_param_gather.
//
// On a device (--device cuda; the table's streams and events, backend/backend.h) the thread
// binds the rank's device (bind_side_thread) and puts a bucket's work on its group's NCCL
// stream (set_stream), never on the compute stream, ordered exactly: where the rank thread
// marks a bucket ready (in its program order, the backward's kernels that wrote the bucket
// enqueued before, the later ones after) it records the bucket's ready event on the compute
// stream; the thread has the group's stream wait for it (event_wait), runs the collective (the
// NCCL backend then does not also wait for the whole compute stream: tb_comm_thread's
// stream_ordered), the average after it on the same stream, and records the bucket's done
// event; ddp_finish_grad_sync has the compute stream wait for every bucket's done event, so the
// optimizer runs after every bucket's reduction. The gathers the same way round: the ready
// event recorded after the optimizer step, the forward's compute stream waiting for a bucket's
// done event before its first use of the bucket's parameters (ddp_params_needed), or at
// ddp_finish_param_gather. The host waits (the queue, the done counts) stay as on the CPU:
// they also make sure an event was recorded before anything waits for it. On the CPU the
// entries are NULL and none of this runs.
//
// Bitwise: the local backend and the MPI backend's exact path sum each element over the
// group's members in group order (comm/reduce.h), whatever range a call covers, so a bucket's
// reduction gives the same bits as the whole buffer's; the average is the same multiply per
// element, and the gathers copy. Losses with and without overlap are the same bits
// (tests/engine/test_overlap.c). MPI's own collectives (--mpi-collectives native) sum two
// members alike (a + b = b + a); more in MPI's order, which may depend on the call's size, so
// with three or more processes in the group a bucket's bits may differ from the whole buffer's.
#ifndef TB_DISTRIBUTED_DISTRIBUTED_DATA_PARALLEL_H
#define TB_DISTRIBUTED_DISTRIBUTED_DATA_PARALLEL_H

#include <pthread.h>

#include "backend/backend.h"
#include "comm/comm.h"
#include "runtime/ranges.h"
#include "models/gpt.h"
#include "optimizer/optimizer.h"
#include "comm/parallel_state.h"
#include "distributed/fsdp.h"

// The backward sites whose parameter gradients become final together (models/gpt.h).
#define TB_DDP_SITE_HEAD GPT_SITE_HEAD
#define TB_DDP_SITE_EMBEDDING GPT_SITE_EMBEDDING
#define TB_DDP_SITE_DEFERRED GPT_SITE_DEFERRED

typedef struct ddp_bucket {
    int chunk;
    size_t lo, hi;  // [lo, hi) of the chunk's flat buffer
    int shard;      // its index in the chunk's optimizer buckets (distributed optimizer), else -1
    int expert;     // of the experts' range, reduced over expert-dp (tb_ddp.edp)
    int pending;    // parameters whose gradient is not final yet this step
    int nparams;    // parameters with an element in it
    int gathered;   // --overlap-param-gather: its updated parameters are all here
    int gather_unwaited;  // its gather is queued and the rank thread has not waited for it yet
} ddp_bucket;

// A unit of the communication thread's work.
typedef struct ddp_work {
    int bucket;
    int gather;     // 1: the parameter all-gather, 0: the gradient reduction
    int64_t step;   // the step it belongs to (the flight recorder's)
} ddp_work;

typedef struct tb_ddp {
    tb_rank *rk;
    tb_group *dp, *tp;
    tb_group *edp;           // the experts' buckets' group (expert-dp) when apart from dp (gpt_experts_apart), else NULL
    gpt_model *models;
    tb_adamw *opts;
    int nchunks;
    int sp_reduce;           // sequence parallelism over tp > 1: sp_partial grads all-reduced over tp when final
    int param_gather;        // --overlap-param-gather
    int **site;              // [chunk][param] its site
    int **bucket_lo, **bucket_hi;  // [chunk][param] its buckets: [lo, hi] (global bucket indices)
    ddp_bucket *buckets;
    int nbuckets;
    double rank_reduce_ms;   // this step: the rank thread's own gradient reductions during backward (tp, sp)
    double param_wait_ms;    // this step: the rank thread's waits for parameter gathers

    // the rank thread's table and (on a device) its context, for the thread; each bucket's
    // events (on a device; else NULL): its reduction's ready (compute stream) and done (the
    // group's stream), its gather's ready and done
    const tb_backend *be;
    void *be_context;
    void **grad_ready, **grad_done, **gather_ready, **gather_done;
    int gathers_unwaited;    // buckets with gather_unwaited set
    int *to_wait;            // (nbuckets) the rank thread's scratch: buckets to record or wait for

    pthread_t thread;
    int started;
    double run_delay_s;      // the thread's wait for a core so far (tb_thread_run_delay_s; -1 unknown)
    tb_ranges ranges;        // the thread's track (tid 1 of the rank's trace)
    size_t track_events;     // its events held, as of the last call done (under mu: ddp_trace_spill)
    tb_comm_thread ct;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    ddp_work *queue;         // this window's work, in the order it became ready
    int cap, queued, taken, done;
    int reduced, gathers_left;  // this step's reduced buckets; gathers not done yet
    int window;              // the comm thread owns the dp group's sequence (the module comment)
    int stop;
    int failed, fail_status;
    char fail_msg[sizeof(((tb_error *)0)->msg) + 32];

    // Megatron-FSDP's sharded gradients and parameters (distributed/fsdp.h): when active, the
    // hooks below drive it instead (the config refuses overlap with it: no thread runs)
    tb_fsdp fsdp;
} tb_ddp;

// The bucket boundaries of chunk m's buffer (the module comment): *cuts (malloc'd, ascending,
// each strictly inside (0, padded_parameters) and a multiple of align) and their count.
// shared_embedding: the tied word embedding is shared by the first and last stage.
int ddp_bucket_cuts(const gpt_model *m, size_t bucket_size, size_t align, int shared_embedding, size_t **cuts);
// The bucket boundaries of chunk m as the distributed optimizer (sharded) and the buckets
// share them: ddp_bucket_cuts at a multiple of dp × cp (and of expert-dp when the experts'
// replicas are apart; unsharded: any), and the experts' range's start when apart.
int ddp_chunk_cuts(const gpt_model *m, const tb_config *cfg, const tb_rank *rk, int sharded, size_t **cuts);
// cuts (ncuts of them, malloc'd or NULL) with `at` added where it is not yet a cut and lies
// strictly inside the buffer (the experts' range's start, sharded over its own group); the count.
int ddp_add_cut(size_t **cuts, int ncuts, size_t at, size_t padded_parameters);
// Whether rank rk's tied word embedding is shared with another stage (its own bucket).
int ddp_shared_embedding(const tb_config *cfg, const tb_rank *rk);
// Lays out the buckets of every chunk and starts the communication thread (only when
// --overlap-grad-reduce and dp × cp > 1; otherwise leaves d inactive: ddp_active is 0). With
// Megatron-FSDP's sharded gradients it takes the one chunk over instead (fsdp_init) and sets the
// models' backward hook.
// opts: the chunks' optimizers (their buckets are these with the distributed optimizer).
void ddp_init(tb_ddp *d, const tb_config *cfg, tb_rank *rk, gpt_model *models, tb_adamw *opts, int nchunks);
int ddp_active(const tb_ddp *d);
// Between steps, after the rank's own track (runtime/ranges.h): the communication thread's
// track out to its spill once it holds spill_events. The thread is idle then (every queued call
// done, and only the rank thread queues): a step's queued gathers (--overlap-param-gather) are
// waited for here, outside the timed step, so once per spill the next step finds them done.
// 0, or -1 with err set (the spill's failure).
int ddp_trace_spill(tb_ddp *d, tb_error *err);
// Joins the thread (a failed rank's too) and frees.
void ddp_free(tb_ddp *d);
// The communication thread's wait for a core so far, in seconds: 0 without the thread, -1
// when the kernel does not report it (conditions.h, "scheduler").
double ddp_thread_run_delay_s(tb_ddp *d);
// Whether the data-parallel reduction of the gradients is made here, during the backward and
// at ddp_finish_grad_sync (the communication thread's buckets, or Megatron-FSDP's), rather than
// by finalize_model_grads.
int ddp_reduces_grads(const tb_ddp *d);
// Before the step's first backward: every bucket pending again.
void ddp_start_step(tb_ddp *d);
// From the backward of a chunk's last microbatch: the parameters of `site` are final.
void ddp_site_ready(tb_ddp *d, int chunk, int site);
// finalize_model_grads with overlap: the deferred tied embedding is final, then wait for every
// bucket's reduction (a failure of the communication thread fails the rank here).
void ddp_finish_grad_sync(tb_ddp *d);
// --overlap-param-gather, after the optimizer step (and the step's last dp call): queue every
// bucket's all-gather of the updated slices, in forward order. A no-op otherwise.
void ddp_start_param_gather(tb_ddp *d, int64_t step);
// Before the forward uses the parameters of `site` of a chunk: waits for their buckets.
void ddp_params_needed(tb_ddp *d, int chunk, int site);
// Waits for every queued gather and closes the window: before anything else reads the
// parameters or calls the dp group (a checkpoint, a tensor dump, the end of training). Under
// Megatron-FSDP's optim_grads_params: every unit's parameters gathered.
void ddp_finish_param_gather(tb_ddp *d);

#endif
