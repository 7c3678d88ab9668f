// training_dump.c — see training_dump.h.
#include "training_dump.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/host_stage.h"
#include "comm/comm.h"
#include "comm/parallel_state.h"
#include "core/xalloc.h"
#include "distributed/distributed_data_parallel.h"
#include "models/gpt.h"
#include "optimizer/optimizer.h"
#include "reports/tensor_dump.h"
#include "runtime/memory.h"

// A MoE layer's experts' tensors [i, i + n) of the table (El local experts, n / El tensors
// each, expert-major), whole over etp, gathered over ep and kept in the whole layer's order
// under their global names: experts [r·El, (r+1)·El) are ep rank r's.
static void keep_experts(tb_tensor_dump *d, gpt_model *m, int i, int n, const float *base, const char *prefix) {
    tb_allocator *mem = tensor_dump_rank(d)->mem;
    const tb_moe_dims *moe = &m->block.d.moe;
    const int El = moe->E_local, P = moe->ep_size, K = n / El;
    float **all = tb_xcalloc((size_t)n, sizeof *all, "tensor dump experts");
    for (int t = 0; t < n; t++) {  // every rank's tensor t of its local experts
        const gpt_param *p = &m->params[i + t];
        const size_t numel = (size_t)p->full_rows * p->full_cols;
        float *full = tb_host_buffer(mem, numel * sizeof(float), "tensor dump gather");
        all[t] = tb_host_buffer(mem, numel * P * sizeof(float), "tensor dump experts over ep");
        gpt_gather_param_from(m, i + t, base, full);  // host memory, as all[t] (NCCL stages host buffers)
        tb_all_gather(moe->ep, full, all[t], numel);
        tb_host_buffer_free(mem, full);
    }
    for (int r = 0; r < P; r++)
        for (int t = 0; t < n; t++) {
            const gpt_param *p = &m->params[i + t];
            int layer, e;
            char kind[48], name[96];
            if (sscanf(p->name, "h.%d.mlp.experts.%d.%47s", &layer, &e, kind) != 3) continue;
            snprintf(name, sizeof name, "%s/h.%d.mlp.experts.%d.%s", prefix, layer, r * El + t / K, kind);
            const size_t numel = (size_t)p->full_rows * p->full_cols;
            float *dst = tensor_dump_keep(d, name, p->full_rows, p->full_cols);
            if (dst) memcpy(dst, all[t] + (size_t)r * numel, numel * sizeof(float));
        }
    for (int t = 0; t < n; t++) tb_host_buffer_free(mem, all[t]);
    free(all);
}

// Every parameter of the chunks, whole, its real rows only (the vocabulary's padding differs
// between tp sizes), read from bases[c] (a buffer laid out as chunk c's parameters: the
// parameters, the gradients, a moment) and kept as "<prefix>/<name>"; under expert
// parallelism every expert of each layer.
static void keep_params(tb_tensor_dump *d, gpt_model *models, int nchunks, float *const *bases, const char *prefix) {
    for (int c = 0; c < nchunks; c++) {
        gpt_model *m = &models[c];
        const float *base = bases[c];
        for (int i = 0; i < m->nparams; i++) {
            const gpt_param *p = &m->params[i];
            if (p->pp_duplicate) continue;  // the first stage's copy of the tied embedding
            if (p->expert && m->block.d.moe.ep_size > 1) {  // the layer's run of expert tensors
                int n = 1, layer, next;
                sscanf(p->name, "h.%d.", &layer);
                while (i + n < m->nparams && m->params[i + n].expert &&
                       sscanf(m->params[i + n].name, "h.%d.", &next) == 1 && next == layer)
                    n++;
                keep_experts(d, m, i, n, base, prefix);
                i += n - 1;
                continue;
            }
            float *full = tb_host_buffer(tensor_dump_rank(d)->mem, (size_t)p->full_rows * p->full_cols * sizeof(float),
                                         "tensor dump gather");
            gpt_gather_param_from(m, i, base, full);
            char name[96];
            snprintf(name, sizeof name, "%s/%s", prefix, p->name);
            float *dst = tensor_dump_keep(d, name, p->hf_rows, p->full_cols);
            if (dst) memcpy(dst, full, (size_t)p->hf_rows * p->full_cols * sizeof(float));
            tb_host_buffer_free(tensor_dump_rank(d)->mem, full);
        }
    }
}

void training_dump_grads(tb_tensor_dump *d, gpt_model *models, tb_adamw *opts, int nchunks, tb_ddp *ddp) {
    if (!tensor_dump_armed(d)) return;
    tb_rank *rk = tensor_dump_rank(d);
    if (ddp->fsdp.active) {  // its sharded gradients (and parameters) gathered where it holds them
        fsdp_gather_grads(&ddp->fsdp);
        fsdp_gather_all(&ddp->fsdp);
    }
    for (int c = 0; c < nchunks && !ddp->fsdp.active; c++)
        if (opts[c].sharded && rk->world)  // each dp rank holds its range reduced: the whole, everywhere
            adamw_shard_all_gather_inplace(&opts[c], &rk->groups[TB_GROUP_DP_CP], models[c].grad_memory);
    float **bases = tb_xcalloc((size_t)nchunks, sizeof *bases, "tensor dump chunks");
    for (int c = 0; c < nchunks; c++) bases[c] = models[c].grad_memory;
    keep_params(d, models, nchunks, bases, "grad");
    // the parameters the step starts from: what bisect carries into the optimizer's bound
    for (int c = 0; c < nchunks; c++) bases[c] = models[c].param_memory;
    keep_params(d, models, nchunks, bases, "param.before");
    free(bases);
}

// Each chunk's AdamW moments (m, v after the step), made whole in the parameters' layout: the
// distributed optimizer's slices gathered over their groups, else its buckets copied.
static void keep_moments(tb_tensor_dump *d, gpt_model *models, tb_adamw *opts, int nchunks, double lr) {
    tb_rank *rk = tensor_dump_rank(d);
    float **bases = tb_xcalloc((size_t)nchunks, sizeof *bases, "tensor dump chunks");
    for (int which = 0; which < 2; which++) {
        for (int c = 0; c < nchunks; c++) {
            const tb_adamw *o = &opts[c];
            const float *shard = which ? o->v : o->m;
            bases[c] = tb_alloc(rk->mem, TB_MEM_WORKSPACE, models[c].padded_parameters * sizeof(float),
                                "tensor dump moment");
            tb_be()->zero(bases[c], models[c].padded_parameters * sizeof(float));
            if (o->sharded && rk->world)
                adamw_shard_all_gather(o, &rk->groups[TB_GROUP_DP_CP], shard, bases[c]);
            else
                for (int b = 0; b < o->nbuckets; b++)
                    tb_be()->copy(bases[c] + o->buckets[b].slice_lo, shard + o->buckets[b].at,
                                  (o->buckets[b].slice_hi - o->buckets[b].slice_lo) * sizeof(float));
        }
        keep_params(d, models, nchunks, bases, which ? "adam.v" : "adam.m");
        for (int c = 0; c < nchunks; c++) tb_free(rk->mem, bases[c]);
    }
    free(bases);
    // the step's own scalars (adamw_step): p = p·keep − step_size·m / (sqrt(v)·inv_sqrt_bc2 + eps)
    const tb_adamw *o = &opts[0];
    const float bc1 = 1.0f - powf(o->beta1, (float)o->t), bc2 = 1.0f - powf(o->beta2, (float)o->t);
    float *h = tensor_dump_keep(d, "adam.hyper/step_size", 1, 1);
    if (h) h[0] = (float)(lr / bc1);
    if ((h = tensor_dump_keep(d, "adam.hyper/inv_sqrt_bc2", 1, 1))) h[0] = 1.0f / sqrtf(bc2);
    if ((h = tensor_dump_keep(d, "adam.hyper/eps", 1, 1))) h[0] = o->eps;
}

int training_dump_finish(tb_tensor_dump *d, gpt_model *models, tb_adamw *opts, int nchunks, double lr, double loss,
                         tb_error *err) {
    if (!tensor_dump_armed(d)) return 0;
    float **bases = tb_xcalloc((size_t)nchunks, sizeof *bases, "tensor dump chunks");
    for (int c = 0; c < nchunks; c++) bases[c] = models[c].param_memory;
    keep_params(d, models, nchunks, bases, "param");
    free(bases);
    keep_moments(d, models, opts, nchunks, lr);
    int has_head = 0;
    for (int c = 0; c < nchunks; c++) has_head |= models[c].chunk.has_head;
    if (has_head) {
        float *l = tensor_dump_keep(d, "fwd/loss", 1, 1);
        if (l) l[0] = (float)loss;
    }
    return tensor_dump_write(d, err);
}
