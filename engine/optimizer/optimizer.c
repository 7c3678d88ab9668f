#include "optimizer/optimizer.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "comm/comm.h"
#include "core/xalloc.h"
#include "comm/parallel_state.h"

void adamw_init(tb_adamw *opt, const tb_config *cfg, size_t padded_parameters, int dp_rank, int dp_size,
                const size_t *cuts, int ncuts, tb_allocator *mem) {
    adamw_init_expert_parallel(opt, cfg, padded_parameters, dp_rank, dp_size, padded_parameters, NULL, cuts, ncuts,
                               mem);
}

void adamw_init_expert_parallel(tb_adamw *opt, const tb_config *cfg, size_t padded_parameters, int dp_rank,
                                int dp_size, size_t experts_lo, struct tb_group *edp, const size_t *cuts, int ncuts,
                                tb_allocator *mem) {
    opt->edp = edp;
    opt->sharded = config_shards_optimizer(cfg) && (dp_size > 1 || (edp && edp->size > 1));
    opt->nbuckets = ncuts + 1;
    opt->buckets = tb_xcalloc((size_t)opt->nbuckets, sizeof *opt->buckets, "optimizer shard buckets");
    opt->shard_numel = 0;
    for (int b = 0; b < opt->nbuckets; b++) {
        tb_shard_bucket *k = &opt->buckets[b];
        k->lo = b ? cuts[b - 1] : 0;
        k->hi = b < ncuts ? cuts[b] : padded_parameters;
        k->expert = edp && k->lo >= experts_lo;
        const size_t d = !opt->sharded ? 1 : k->expert ? (size_t)edp->size : (size_t)dp_size;
        const size_t r = !opt->sharded ? 0 : k->expert ? (size_t)edp->index : (size_t)dp_rank;
        if ((k->hi - k->lo) % d) {  // the buffer's padding and the cuts make each a multiple of dp × cp
            fprintf(stderr, "adamw_init: bucket [%zu, %zu) does not split into %zu equal slices\n", k->lo, k->hi, d);
            abort();
        }
        const size_t slice = (k->hi - k->lo) / d;
        k->slice_lo = k->lo + r * slice;
        k->slice_hi = k->slice_lo + slice;
        k->at = opt->shard_numel;
        opt->shard_numel += slice;
    }
    const size_t shard = opt->shard_numel;
    opt->shard_grads = opt->sharded ? tb_alloc(mem, TB_MEM_GRADS, shard * sizeof(float), "reduce-scattered grads")
                                    : NULL;
    opt->mem = mem;
    opt->t = 0;
    opt->beta1 = (float)cfg->adam_beta1;
    opt->beta2 = (float)cfg->adam_beta2;
    opt->eps = (float)cfg->adam_eps;
    opt->weight_decay = (float)cfg->weight_decay;
    opt->m = tb_calloc(mem, TB_MEM_OPTIMIZER, shard * sizeof(float), "adam exp_avg");
    opt->v = tb_calloc(mem, TB_MEM_OPTIMIZER, shard * sizeof(float), "adam exp_avg_sq");
}

void adamw_free(tb_adamw *opt) {
    tb_free(opt->mem, opt->m);
    tb_free(opt->mem, opt->v);
    tb_free(opt->mem, opt->shard_grads);
    free(opt->buckets);
    opt->m = opt->v = opt->shard_grads = NULL;
    opt->buckets = NULL;
    opt->nbuckets = 0;
}

struct tb_group *adamw_bucket_group(const tb_adamw *opt, const tb_shard_bucket *k, struct tb_group *dp) {
    return k->expert ? opt->edp : dp;
}

void adamw_shard_all_gather_inplace(const tb_adamw *opt, struct tb_group *dp, float *buf) {
    for (int b = 0; b < opt->nbuckets; b++) {
        const tb_shard_bucket *k = &opt->buckets[b];
        tb_all_gather(adamw_bucket_group(opt, k, dp), buf + k->slice_lo, buf + k->lo, k->slice_hi - k->slice_lo);
    }
}

void adamw_shard_all_gather(const tb_adamw *opt, struct tb_group *dp, const float *shard, float *full) {
    for (int b = 0; b < opt->nbuckets; b++) {
        const tb_shard_bucket *k = &opt->buckets[b];
        tb_all_gather(adamw_bucket_group(opt, k, dp), shard + k->at, full + k->lo, k->slice_hi - k->slice_lo);
    }
}

void adamw_shard_extract(const tb_adamw *opt, const float *full, float *shard) {
    const tb_backend *be = tb_be();
    for (int b = 0; b < opt->nbuckets; b++) {
        const tb_shard_bucket *k = &opt->buckets[b];
        be->copy(shard + k->at, full + k->slice_lo, (k->slice_hi - k->slice_lo) * sizeof(float));
    }
}

void adamw_step(tb_adamw *opt, const gpt_param *table, int nparams, float *params, const float *grads,
                float grad_scale, float lr) {
    opt->t++;
    const float b1 = opt->beta1, b2 = opt->beta2, eps = opt->eps;
    const float bc1 = 1.0f - powf(b1, (float)opt->t), bc2 = 1.0f - powf(b2, (float)opt->t);
    // lr / bc1 and 1 / sqrt(bc2) folded once: p -= step · m / (sqrt(v)·inv_sqrt_bc2 + eps)
    const float step = lr / bc1, inv_sqrt_bc2 = 1.0f / sqrtf(bc2);
    const tb_backend *be = tb_be();
    for (int b = 0; b < opt->nbuckets; b++) {
        const tb_shard_bucket *k = &opt->buckets[b];
        for (int i = 0; i < nparams; i++) {
            const gpt_param *e = &table[i];
            // the part of this tensor inside the rank's slice of the bucket
            size_t lo = e->offset > k->slice_lo ? e->offset : k->slice_lo;
            size_t hi = e->offset + e->numel < k->slice_hi ? e->offset + e->numel : k->slice_hi;
            if (lo >= hi) continue;
            const float keep = e->decay ? 1.0f - lr * opt->weight_decay : 1.0f;
            float *p = params + lo, *m = opt->m + k->at + (lo - k->slice_lo), *v = opt->v + k->at + (lo - k->slice_lo);
            be->adamw_update(p, m, v, grads + lo, hi - lo, grad_scale, b1, b2, eps, keep, step, inv_sqrt_bc2);
        }
    }
}

double clip_grads_global_norm(const float *grads, size_t n) {
    tb_be()->sum_squares_add(grads, n);
    return sqrt(tb_be()->sum_squares_take());
}

double clip_grads_global_norm_parallel(const gpt_model *models, const tb_adamw *opts, int nchunks,
                                       struct tb_rank *rk) {
    const int tp_rank = rk && rk->world ? rk->coords.tp : 0;
    const int etp_rank = rk && rk->world ? rk->groups[TB_GROUP_ETP].index : 0;
    const int dp_rank = rk && rk->world ? rk->groups[TB_GROUP_DP_CP].index : 0;
    // an expert's gradient is one replica per expert-dp group (under expert parallelism the
    // dp ranks hold different experts)
    const int edp_rank = rk && rk->world && rk->groups[TB_GROUP_EXPERT_DP].size > 0
                             ? rk->groups[TB_GROUP_EXPERT_DP].index : dp_rank;
    // every slice's Σ g² added on the backend, read back once (one copy per step on a device)
    for (int c = 0; c < nchunks; c++) {
        const gpt_model *m = &models[c];
        const tb_adamw *opt = &opts[c];
        for (int i = 0; i < m->nparams; i++) {
            const gpt_param *p = &m->params[i];
            if (!gpt_param_tp_counted(p, tp_rank, etp_rank)) continue;
            if (!opt->sharded && (p->expert ? edp_rank : dp_rank) != 0) continue;
            for (int b = 0; b < opt->nbuckets; b++) {
                const tb_shard_bucket *k = &opt->buckets[b];
                size_t lo = p->offset > k->slice_lo ? p->offset : k->slice_lo;
                size_t hi = p->offset + p->numel < k->slice_hi ? p->offset + p->numel : k->slice_hi;
                if (lo < hi) tb_be()->sum_squares_add(m->grad_memory + lo, hi - lo);
            }
        }
    }
    double sum = tb_be()->sum_squares_take();
    if (rk && rk->world && rk->world_size > 1) {
        float total = (float)sum;
        tb_all_reduce(&rk->groups[TB_GROUP_WORLD], &total, 1, TB_RED_SUM);
        sum = total;
    }
    return sqrt(sum);
}

float clip_grads_coefficient(double norm, double max_norm) {
    if (max_norm <= 0) return 1.0f;
    double coeff = max_norm / (norm + 1e-6);
    return coeff < 1.0 ? (float)coeff : 1.0f;
}

double lr_at_step(const tb_config *cfg, int64_t step) {
    const double max_lr = cfg->lr, min_lr = cfg->min_lr;
    const int64_t warmup = cfg->lr_warmup_iters, decay = cfg->lr_decay_iters;
    if (warmup > 0 && step <= warmup) return max_lr * (double)step / (double)warmup;
    if (cfg->lr_decay_style == TB_LR_CONSTANT) return max_lr;
    if (step > decay) return min_lr;
    double ratio = decay > warmup ? (double)(step - warmup) / (double)(decay - warmup) : 1.0;
    double coeff = cfg->lr_decay_style == TB_LR_COSINE ? 0.5 * (cos(M_PI * ratio) + 1.0) : 1.0 - ratio;
    return min_lr + coeff * (max_lr - min_lr);
}
