// optimizer.h — AdamW with fp32 state, global gradient-norm clipping and the learning-rate
// schedule (Megatron-Core optimizer/, clip_grads.py, optimizer_param_scheduler.py).
//
// The optimizer walks the model's parameter table: weight decay applies only to entries
// marked `decay` (linear and embedding weights), never to norms and biases, as Megatron's
// default param groups do. Updates follow torch.optim.AdamW:
//   p ← p · (1 − lr·wd);  m ← β1·m + (1−β1)·g;  v ← β2·v + (1−β2)·g²
//   p ← p − lr · (m / (1−β1ᵗ)) / (sqrt(v / (1−β2ᵗ)) + ε)
#ifndef TB_OPTIMIZER_H
#define TB_OPTIMIZER_H

#include <stddef.h>
#include <stdint.h>

#include "config/config.h"
#include "runtime/memory.h"
#include "models/gpt.h"

// With the distributed optimizer (Megatron's DistributedOptimizer, ZeRO-1) a data-parallel
// rank owns a contiguous slice of every bucket of the flat parameter buffer, as Megatron's
// "Range" of each bucket (distributed/distributed_data_parallel.h lays the buckets out: one
// bucket, the whole buffer, unless --ddp-bucket-size cuts it; each bucket a multiple of dp
// long): its gradients arrive there by a reduce-scatter per bucket, Adam's state exists for
// those slices only (so optimizer memory falls by 1/dp), it updates them, and each bucket's
// updated slices are all-gathered. The fp32 parameters are the master weights themselves
// (Megatron's fp32/fp32 case). Without sharding the one bucket's slice is the whole buffer.
struct tb_group;
typedef struct tb_shard_bucket {
    size_t lo, hi;              // the bucket, [lo, hi) of the flat buffer
    size_t slice_lo, slice_hi;  // this rank's slice of it
    size_t at;                  // where the slice starts in the shard (m, v, shard_grads)
    int expert;                 // a bucket of the experts' range, sliced over expert-dp (tb_adamw.edp)
} tb_shard_bucket;

typedef struct tb_adamw {
    float *m, *v;               // shard_numel each, category optimizer
    tb_shard_bucket *buckets;   // ascending in the buffer
    int nbuckets;
    size_t shard_numel;         // the slices' total
    int sharded;
    float *shard_grads;         // shard_numel: reduce-scatter destination, category grads (sharded only)
    struct tb_group *edp;       // the experts' buckets' group (expert-dp) when not dp's; NULL: none
    int64_t t;                  // updates taken
    float beta1, beta2, eps, weight_decay;
    tb_allocator *mem;
} tb_adamw;

// padded_parameters: the flat buffer's length (a multiple of dp). dp_rank / dp_size: this
// rank's place in the data-parallel group; sharded only with --use-distributed-optimizer.
// cuts: the ncuts bucket boundaries inside the buffer, ascending, each a multiple of dp
// (ddp_bucket_cuts); NULL / 0: one bucket.
void adamw_init(tb_adamw *opt, const tb_config *cfg, size_t padded_parameters, int dp_rank, int dp_size,
                const size_t *cuts, int ncuts, tb_allocator *mem);
// The same with the experts' range [experts_lo, padded_parameters) (a cut, every cut above it a
// multiple of edp's size) sharded over expert-dp instead (Megatron's expert-parallel buffers:
// expert parameters' state sharded over the ranks holding the same experts); edp NULL: as adamw_init.
void adamw_init_expert_parallel(tb_adamw *opt, const tb_config *cfg, size_t padded_parameters, int dp_rank,
                                int dp_size, size_t experts_lo, struct tb_group *edp, const size_t *cuts, int ncuts,
                                tb_allocator *mem);
void adamw_free(tb_adamw *opt);
// One update of every parameter in the table with learning rate lr, on the gradients
// scaled by grad_scale (the clipping coefficient: folded into the update's read of each
// gradient rather than a separate pass over the gradient buffer; the product g·grad_scale
// is the same float either way).
void adamw_step(tb_adamw *opt, const gpt_param *table, int nparams, float *params, const float *grads,
                float grad_scale, float lr);

// The shard's collectives over the data-parallel group dp (an expert bucket's over opt->edp;
// sharded only), bucket by bucket:
// every rank's slices of buf, in place, become the whole buffer (the updated parameters, or
// the reduced gradients); shard (m, v: this rank's slices, packed) all-gathered into full.
// The group bucket k is sharded over: dp, or opt->edp for an expert bucket.
struct tb_group *adamw_bucket_group(const tb_adamw *opt, const tb_shard_bucket *k, struct tb_group *dp);
void adamw_shard_all_gather_inplace(const tb_adamw *opt, struct tb_group *dp, float *buf);
void adamw_shard_all_gather(const tb_adamw *opt, struct tb_group *dp, const float *shard, float *full);
// This rank's slices of full, packed into shard (a checkpoint's moments, loaded); both are
// tensors of the thread's backend (its copy).
void adamw_shard_extract(const tb_adamw *opt, const float *full, float *shard);

// Global L2 norm of the gradients (the whole buffer: padding holds zeros).
double clip_grads_global_norm(const float *grads, size_t n);
// The exact global gradient norm of a model split over ranks: each element counted once —
// parameters replicated over tp only by tp rank 0, and (without the distributed optimizer)
// only by dp rank 0; with it, each rank counts its own range. The sum of squares is
// all-reduced over the world. rk may be NULL (one rank).
struct tb_rank;
// models/opts: this rank's model chunks (pipeline stages hold different parameters; the
// last stage's copy of the tied embedding is not counted).
double clip_grads_global_norm_parallel(const gpt_model *models, const tb_adamw *opts, int nchunks,
                                       struct tb_rank *rk);
// Megatron's clip_grad_by_total_norm_fp32 coefficient: max_norm / (norm + 1e-6) when that
// is below 1, else 1 (also 1 when max_norm is 0: clipping off).
float clip_grads_coefficient(double norm, double max_norm);

// Learning rate at 1-based step: linear warm-up to --lr over --lr-warmup-iters, then
// cosine / linear decay to --min-lr at --lr-decay-iters (constant after), or constant.
double lr_at_step(const tb_config *cfg, int64_t step);

#endif
