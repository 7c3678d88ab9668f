// distributed_data_parallel.h — --overlap-grad-reduce: the data-parallel gradient reduction
// in buckets, overlapped with the backward pass (Megatron-Core distributed/
// distributed_data_parallel.py and param_and_grad_buffer.py).
//
// Buckets: each model chunk's flat gradient buffer is cut into contiguous ranges in reverse
// parameter order (backward produces the last layers' gradients first), each of at least
// --ddp-bucket-size elements except the last (the buffer's start), cut only at parameter
// boundaries. The tied word embedding, when the first and last pipeline stages share it, is
// a bucket of its own, as in Megatron: its gradient is final only after finalize's
// embedding all-reduce, so it must not hold back the parameters around it.
//
// Readiness: the pipeline marks a chunk's last backward (the step's last microbatch of that
// chunk: under gradient accumulation only its gradients are final), and the backward reports
// each site whose parameter gradients are then final (the output layer and final norm, each
// transformer layer, the embedding). A bucket whose parameters are all final is queued.
// Under sequence parallelism the rank thread first all-reduces a final sp_partial gradient
// over tp, as finalize_model_grads does without overlap, so every element is summed over tp
// before dp in both paths.
//
// The communication thread: one per rank, it takes the queued buckets in queue order and
// all-reduces each over dp × cp, then averages it. Every dp rank of a stage runs the same
// schedule and backward, so each queues the same buckets in the same order: the dp group's
// sequence numbers stay consistent across ranks, and the rank thread itself makes no dp call
// while buckets are in flight (between the first backward and ddp_finish_grad_sync).
//
// Bitwise: the local and MPI backends sum each element over the group's members in group
// order (comm/reduce.h), whatever range a call covers, so a bucket's all-reduce gives the
// same bits as the whole buffer's; the average is the same multiply per element. With the
// distributed optimizer each bucket is all-reduced too (not reduce-scattered: a rank's
// shard is one contiguous range of the whole buffer, not a slice of every bucket as in
// Megatron) and the rank keeps its [lo, hi): the same sums as the reduce-scatter's, at twice
// its traffic.
#ifndef TB_DISTRIBUTED_DISTRIBUTED_DATA_PARALLEL_H
#define TB_DISTRIBUTED_DISTRIBUTED_DATA_PARALLEL_H

#include <pthread.h>

#include "comm/comm.h"
#include "core/ranges.h"
#include "models/gpt.h"
#include "optimizer/optimizer.h"
#include "parallel_state.h"

// The backward sites whose parameter gradients become final together (gpt_backward_chunk).
#define TB_DDP_SITE_HEAD (-1)       // output layer (untied) and final norm
#define TB_DDP_SITE_EMBEDDING (-2)  // word and position embeddings
#define TB_DDP_SITE_DEFERRED (-3)   // the tied embedding shared by two stages: at finalize
// (a transformer layer's site is its global layer index)

typedef struct ddp_bucket {
    int chunk;
    size_t lo, hi;  // [lo, hi) of the chunk's flat gradient buffer
    int pending;    // parameters whose gradient is not final yet this step
    int nparams;
} ddp_bucket;

typedef struct tb_ddp {
    tb_rank *rk;
    tb_group *dp, *tp;
    gpt_model *models;
    int nchunks;
    int sp_reduce;           // sequence parallelism over tp > 1: sp_partial grads all-reduced over tp when final
    int **site;              // [chunk][param] its site
    int **bucket_of;         // [chunk][param] its bucket
    ddp_bucket *buckets;
    int nbuckets;
    double rank_reduce_ms;   // this step: the rank thread's own gradient reductions during backward (tp, sp)

    pthread_t thread;
    int started;
    tb_ranges ranges;        // the thread's track (tid 1 of the rank's trace)
    tb_comm_thread ct;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int *queue;              // bucket indices, in the order they became ready
    int queued, taken, done; // this step
    int stop;
    int failed, fail_status;
    char fail_msg[sizeof(((tb_error *)0)->msg) + 32];
} tb_ddp;

// Lays out the buckets of every chunk and starts the communication thread (only when
// --overlap-grad-reduce and dp × cp > 1; otherwise leaves d inactive: ddp_active is 0).
void ddp_init(tb_ddp *d, const tb_config *cfg, tb_rank *rk, gpt_model *models, int nchunks);
int ddp_active(const tb_ddp *d);
// Joins the thread (a failed rank's too) and frees.
void ddp_free(tb_ddp *d);
// Before the step's first backward: every bucket pending again.
void ddp_start_step(tb_ddp *d, int64_t step);
// From the backward of a chunk's last microbatch: the parameters of `site` are final.
void ddp_site_ready(tb_ddp *d, int chunk, int site);
// finalize_model_grads with overlap: the deferred tied embedding is final, then wait for every
// bucket's reduction (a failure of the communication thread fails the rank here).
void ddp_finish_grad_sync(tb_ddp *d);

#endif
