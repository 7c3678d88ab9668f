// tensor_dump.c — the logical tensors of chosen steps (tensor_dump.h).
#include "reports/tensor_dump.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/cp_layout.h"
#include "backend/host_stage.h"
#include "comm/comm.h"
#include "core/fileio.h"
#include "core/run_dir.h"
#include "core/safetensors.h"
#include "core/xalloc.h"
#include "comm/parallel_state.h"
#include "tensor_parallel/mappings.h"
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
    for (int k = 0; k < cp->size; k++)
        for (int b = 0; b < B; b++)
            for (int t = 0; t < Tl; t++)
                memcpy(dst + ((size_t)b * T + (size_t)tb_cp_position(T, cp->size, k, t)) * C,
                       all + ((size_t)k * local + (size_t)b * Tl + t) * C, (size_t)C * sizeof(float));
    tb_host_stage_free(&stage);
    tb_free(mem, gathered);
    tb_free(mem, mine);
}

float *tensor_dump_keep(tb_tensor_dump *d, const char *name, int rows, int cols) {
    return d && d->armed ? keep(d, name, rows, cols) : NULL;
}

int tensor_dump_armed(const tb_tensor_dump *d) { return d && d->armed; }

tb_rank *tensor_dump_rank(const tb_tensor_dump *d) { return d->rk; }

int tensor_dump_write(tb_tensor_dump *d, tb_error *err) {
    if (!d || !d->armed) return 0;
    tb_rank *rk = d->rk;
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
