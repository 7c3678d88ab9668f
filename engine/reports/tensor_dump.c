// tensor_dump.c — the logical tensors of chosen steps (tensor_dump.h).
#include "reports/tensor_dump.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/host_stage.h"
#include "comm/comm.h"
#include "core/fileio.h"
#include "core/run_dir.h"
#include "core/safetensors.h"
#include "core/xalloc.h"
#include "models/gpt.h"
#include "optimizer/optimizer.h"
#include "comm/parallel_state.h"
#include "tensor_parallel/mappings.h"
#include "transformer/context_parallel.h"
#include "transformer/forward_hook.h"

// The kept tensors are host memory (backend/host_stage.h: on the CPU the rank's workspace, on a
// device malloc), copied from the backend's tensors as they are captured.
typedef struct dumped {
    char name[96];
    float *data;
    int rows, cols;
} dumped;

struct tb_tensor_dump {
    tb_rank *rk;
    tb_forward_hook hook;  // the model's module outputs (capture_output)
    int64_t steps[64];
    int nsteps;
    int64_t armed;  // the step being dumped, 0: none
    double lr;      // the step's learning rate (its AdamW scalars)
    dumped *t;
    int n, cap;
};

static int parse_steps(const char *text, int64_t *steps, int *n) {
    *n = 0;
    for (const char *p = text; *p;) {
        char *end;
        long long v = strtoll(p, &end, 10);
        if (end == p || v < 1 || *n == 64) return -1;
        steps[(*n)++] = v;
        p = *end == ',' ? end + 1 : end;
        if (*end && *end != ',') return -1;
    }
    return *n ? 0 : -1;
}

static void capture_output(void *ctx, const tb_tp_region *r, const float *x, int rows, int C, const char *module);

tb_tensor_dump *tensor_dump_create(tb_rank *rk) {
    if (!rk->cfg->dump_tensors[0]) return NULL;
    tb_tensor_dump *d = tb_xcalloc(1, sizeof *d, "tensor dump");
    d->rk = rk;
    if (parse_steps(rk->cfg->dump_tensors, d->steps, &d->nsteps) != 0) d->nsteps = 0;  // config_validate refused it
    d->hook = (tb_forward_hook){ .output = capture_output, .ctx = d };
    return d;
}

const tb_forward_hook *tensor_dump_hook(tb_tensor_dump *d) { return d ? &d->hook : NULL; }

static void drop_all(tb_tensor_dump *d) {
    for (int i = 0; i < d->n; i++) tb_host_buffer_free(d->rk->mem, d->t[i].data);
    d->n = 0;
}

void tensor_dump_free(tb_tensor_dump *d) {
    if (!d) return;
    drop_all(d);
    free(d->t);
    free(d);
}

int tensor_dump_wants(const tb_tensor_dump *d, int64_t step) {
    for (int i = 0; d && i < d->nsteps; i++)
        if (d->steps[i] == step) return 1;
    return 0;
}

void tensor_dump_arm(tb_tensor_dump *d, int64_t step) {
    if (d) d->armed = tensor_dump_wants(d, step) ? step : 0;
}

static float *keep(tb_tensor_dump *d, const char *name, int rows, int cols) {
    for (int i = 0; i < d->n; i++)
        if (!strcmp(d->t[i].name, name)) return NULL;  // once per name
    if (d->n == d->cap) d->t = tb_xreallocarray(d->t, (size_t)(d->cap = d->cap ? 2 * d->cap : 64), sizeof *d->t, "dump");
    dumped *t = &d->t[d->n++];
    snprintf(t->name, sizeof t->name, "%s", name);
    t->rows = rows, t->cols = cols;
    t->data = tb_host_buffer(d->rk->mem, (size_t)rows * cols * sizeof(float), "tensor dump");
    return t->data;
}

// The forward hook's output: module `module`'s output x, kept as fwd/<module> while armed.
static void capture_output(void *ctx, const tb_tp_region *r, const float *x, int rows, int C, const char *module) {
    tb_tensor_dump *d = ctx;
    if (!d->armed) return;
    char name[96];
    snprintf(name, sizeof name, "fwd/%s", module);
    const int sp = r && r->sp && tb_tp_size(r) > 1;
    // every tp (and cp) rank captures the same names in the same order: the gathers are
    // matched collectives
    for (int i = 0; i < d->n; i++)
        if (!strcmp(d->t[i].name, name)) return;
    const int local = sp ? rows * tb_tp_size(r) : rows;  // this cp rank's tokens, B x T/cp
    tb_group *cp = d->rk->world ? &d->rk->groups[TB_GROUP_CP] : NULL;
    tb_allocator *mem = d->rk->mem;
    const tb_backend *be = tb_be();
    const size_t bytes = (size_t)local * C * sizeof(float);
    if (!cp || cp->size < 2) {
        float *dst = keep(d, name, local, C);
        if (sp) {  // gathered on the backend (NCCL moves device buffers), then to the host
            float *g = be->host ? dst : tb_alloc(mem, TB_MEM_WORKSPACE, bytes, "tensor dump sp gather");
            gather_from_sequence_parallel_region(r, x, g);
            if (g != dst) be->copy_to_host(dst, g, bytes), tb_free(mem, g);
        } else {
            be->copy_to_host(dst, x, bytes);  // the CPU's: memcpy
        }
        return;
    }
    // context parallelism: every cp rank's tokens, each row put back at its global position
    // (the zig-zag chunks, context_parallel.h), so that the tensor is the single rank's
    const int T = d->rk->cfg->seq_length, Tl = T / cp->size, B = local / Tl;
    float *mine = tb_alloc(mem, TB_MEM_WORKSPACE, bytes, "tensor dump cp rows");
    float *gathered = tb_alloc(mem, TB_MEM_WORKSPACE, (size_t)cp->size * bytes, "tensor dump cp gather");
    if (sp) gather_from_sequence_parallel_region(r, x, mine);
    else be->copy(mine, x, bytes);
    tb_all_gather(cp, mine, gathered, (size_t)local * C);
    tb_host_stage stage = {0};
    const float *all = tb_host_read(&stage, gathered, (size_t)cp->size * bytes);
    float *dst = keep(d, name, local * cp->size, C);
    int32_t *pos = tb_xcalloc((size_t)Tl, sizeof *pos, "tensor dump cp positions");
    for (int k = 0; k < cp->size; k++) {
        cp_local_positions(T, cp->size, k, pos);
        for (int b = 0; b < B; b++)
            for (int t = 0; t < Tl; t++)
                memcpy(dst + ((size_t)b * T + (size_t)pos[t]) * C, all + ((size_t)k * local + (size_t)b * Tl + t) * C,
                       (size_t)C * sizeof(float));
    }
    free(pos);
    tb_host_stage_free(&stage);
    tb_free(mem, gathered);
    tb_free(mem, mine);
}

// A MoE layer's experts' tensors [i, i + n) of the table (El local experts, n / El tensors
// each, expert-major), whole over etp, gathered over ep and kept in the whole layer's order
// under their global names: experts [r·El, (r+1)·El) are ep rank r's.
static void keep_experts(tb_tensor_dump *d, gpt_model *m, int i, int n, const float *base, const char *prefix) {
    tb_allocator *mem = d->rk->mem;
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
            float *dst = keep(d, name, p->full_rows, p->full_cols);
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
                while (i + n < m->nparams && m->params[i + n].expert && sscanf(m->params[i + n].name, "h.%d.", &next) == 1 &&
                       next == layer)
                    n++;
                keep_experts(d, m, i, n, base, prefix);
                i += n - 1;
                continue;
            }
            float *full = tb_host_buffer(d->rk->mem, (size_t)p->full_rows * p->full_cols * sizeof(float),
                                         "tensor dump gather");
            gpt_gather_param_from(m, i, base, full);
            char name[96];
            snprintf(name, sizeof name, "%s/%s", prefix, p->name);
            float *dst = keep(d, name, p->hf_rows, p->full_cols);
            if (dst) memcpy(dst, full, (size_t)p->hf_rows * p->full_cols * sizeof(float));
            tb_host_buffer_free(d->rk->mem, full);
        }
    }
}

void tensor_dump_grads(tb_tensor_dump *d, gpt_model *models, tb_adamw *opts, int nchunks) {
    if (!d || !d->armed) return;
    tb_rank *rk = d->rk;
    for (int c = 0; c < nchunks; c++)
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
static void keep_moments(tb_tensor_dump *d, gpt_model *models, tb_adamw *opts, int nchunks) {
    tb_rank *rk = d->rk;
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
    float *h = keep(d, "adam.hyper/step_size", 1, 1);
    if (h) h[0] = (float)(d->lr / bc1);
    if ((h = keep(d, "adam.hyper/inv_sqrt_bc2", 1, 1))) h[0] = 1.0f / sqrtf(bc2);
    if ((h = keep(d, "adam.hyper/eps", 1, 1))) h[0] = o->eps;
}

int tensor_dump_finish(tb_tensor_dump *d, gpt_model *models, tb_adamw *opts, int nchunks, double lr, double loss,
                       tb_error *err) {
    if (!d || !d->armed) return 0;
    tb_rank *rk = d->rk;
    float **bases = tb_xcalloc((size_t)nchunks, sizeof *bases, "tensor dump chunks");
    for (int c = 0; c < nchunks; c++) bases[c] = models[c].param_memory;
    keep_params(d, models, nchunks, bases, "param");
    free(bases);
    d->lr = lr;
    keep_moments(d, models, opts, nchunks);
    int has_head = 0;
    for (int c = 0; c < nchunks; c++) has_head |= models[c].chunk.has_head;
    if (has_head) {
        float *l = keep(d, "fwd/loss", 1, 1);
        if (l) l[0] = (float)loss;
    }
    const int writer = !rk->world || (rk->coords.tp == 0 && rk->coords.cp == 0 && rk->coords.dp == 0);
    int rc = 0;
    if (writer) {
        char dir[TB_PATH_MAX + 16], path[TB_PATH_MAX + 64];
        snprintf(dir, sizeof dir, "%s/tensors", rk->run_dir);
        snprintf(path, sizeof path, "%s/step-%07lld.rank-%05d.safetensors", dir, (long long)d->armed, rk->rank);
        tb_st_entry *e = tb_xcalloc((size_t)d->n + 1, sizeof *e, "tensor dump entries");
        for (int i = 0; i < d->n; i++) {
            e[i].name = d->t[i].name;
            e[i].ndim = 2;
            e[i].shape[0] = d->t[i].rows, e[i].shape[1] = d->t[i].cols;
            e[i].data = d->t[i].data;
        }
        rc = tb_mkdir_p(dir, err);
        if (rc == 0) rc = tb_safetensors_write(path, e, d->n, NULL, err);
        free(e);
    }
    drop_all(d);
    d->armed = 0;
    return rc;
}
