#include "transformer/transformer_block.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "runtime/ranges.h"
#include "core/xalloc.h"

void transformer_block_init(transformer_block *b, const tb_config *cfg, const transformer_layer_spec *spec,
                            tb_allocator *mem, tb_group *tp_group, int first, int L, int nslots) {
    memset(b, 0, sizeof *b);
    b->L = L;
    b->first = first;
    b->d = tb_layer_dims_for(cfg, spec, tp_group);
    b->spec = spec;
    b->mem = mem;
    // Small bookkeeping arrays of pointers and ints: host memory, not model memory.
    b->params = tb_xcalloc((size_t)b->L, sizeof *b->params, "layer parameter views");
    b->grads = tb_xcalloc((size_t)b->L, sizeof *b->grads, "layer gradient views");
    b->nslots = nslots;
    b->slots = tb_xcalloc((size_t)nslots, sizeof *b->slots, "microbatch slots");
    for (int s = 0; s < nslots; s++) {
        b->slots[s].acts = tb_xcalloc((size_t)(b->L > 0 ? b->L : 1), sizeof *b->slots[s].acts, "saved activations per layer");
        b->slots[s].x = tb_xcalloc((size_t)b->L + 1, sizeof *b->slots[s].x, "layer inputs");
    }
    b->chunk_start = tb_xcalloc((size_t)b->L, sizeof(int), "recompute chunk starts");
    b->chunk_len = tb_xcalloc((size_t)b->L, sizeof(int), "recompute chunk lengths");
    b->recompute = tb_xcalloc((size_t)b->L, sizeof(int), "recompute flags");
    b->selective = cfg->recompute_granularity == TB_RECOMPUTE_SELECTIVE;

    int full = cfg->recompute_granularity == TB_RECOMPUTE_FULL, n = cfg->recompute_num_layers;
    for (int l = 0; l < b->L; l++) {
        if (full && cfg->recompute_method == TB_RECOMPUTE_UNIFORM) {
            b->chunk_start[l] = l / n * n;
            b->chunk_len[l] = n < b->L - b->chunk_start[l] ? n : b->L - b->chunk_start[l];
            b->recompute[l] = 1;
        } else {
            b->chunk_start[l] = l;
            b->chunk_len[l] = 1;
            b->recompute[l] = full && cfg->recompute_method == TB_RECOMPUTE_BLOCK && l < n;
        }
    }

    transformer_workspace_alloc(&b->ws, mem, &b->d);
    if (b->d.moe.E > 0) {
        moe_stats_init(&b->moe_stats, cfg->num_layers, b->d.moe.E);
        b->d.moe_stats = &b->moe_stats;
    }
    size_t nc = (size_t)b->d.Ns * b->d.C * sizeof(float);
    b->d_ping = tb_alloc(mem, TB_MEM_WORKSPACE, nc, "grad of residual stream (ping)");
    b->d_pong = tb_alloc(mem, TB_MEM_WORKSPACE, nc, "grad of residual stream (pong)");
    b->recompute_out = tb_alloc(mem, TB_MEM_WORKSPACE, nc, "recompute output");
}

void transformer_block_release(transformer_block *b, int slot) {
    if (!b->slots) return;  // a block whose construction stopped before its slots
    transformer_block_state *st = &b->slots[slot];
    for (int l = 0; l <= b->L; l++) {
        tb_free(b->mem, st->x[l]);
        st->x[l] = NULL;
    }
    for (int l = 0; l < b->L; l++)
        if (st->acts[l].memory) transformer_layer_acts_free(&st->acts[l], b->mem);
}

void transformer_block_free(transformer_block *b) {
    for (int s = 0; s < b->nslots; s++) {
        transformer_block_release(b, s);
        free(b->slots[s].acts);
        free(b->slots[s].x);
    }
    free(b->slots);
    transformer_workspace_free(&b->ws, b->mem);
    if (b->moe_stats.num_layers) moe_stats_free(&b->moe_stats);
    tb_free(b->mem, b->d_ping);
    tb_free(b->mem, b->d_pong);
    tb_free(b->mem, b->recompute_out);
    free(b->params);
    free(b->grads);
    free(b->chunk_start);
    free(b->chunk_len);
    free(b->recompute);
}

static float *alloc_stream(transformer_block *b, int l) {
    char what[48];
    snprintf(what, sizeof what, "residual stream x[%d]", b->first + l);
    return tb_alloc(b->mem, TB_MEM_ACTIVATIONS, (size_t)b->d.Ns * b->d.C * sizeof(float), what);
}

float *transformer_block_input(transformer_block *b, int slot) {
    transformer_block_release(b, slot);
    b->slots[slot].x[0] = alloc_stream(b, 0);
    return b->slots[slot].x[0];
}

const float *transformer_block_output(const transformer_block *b, int slot) { return b->slots[slot].x[b->L]; }

const float *transformer_block_forward(transformer_block *b, int slot) {
    transformer_block_state *st = &b->slots[slot];
    for (int l = 0; l < b->L; l++) {
        if (b->layer_params_needed) b->layer_params_needed(b->hooks_ctx, b->first + l);
        transformer_layer_acts_alloc(&st->acts[l], b->mem, &b->d, b->selective, b->first + l);
        st->x[l + 1] = alloc_stream(b, l + 1);
        transformer_layer_forward(b->spec, b->first + l, &b->d, &b->params[l], &st->acts[l], &b->ws, st->x[l],
                                  st->x[l + 1]);
        if (b->recompute[l]) {
            // keep only the chunk's input: this layer's activations and its input (unless it
            // is the chunk's first layer) are recomputed in backward
            transformer_layer_acts_free(&st->acts[l], b->mem);
            if (l > b->chunk_start[l]) {
                tb_free(b->mem, st->x[l]);
                st->x[l] = NULL;
            }
        }
    }
    return st->x[b->L];
}

// Re-runs the forward of the chunk [s, s + n): activations and inner inputs come back;
// the last layer writes a scratch buffer since its output x[s + n] was kept.
static void recompute_chunk(transformer_block *b, transformer_block_state *st, int s, int n) {
    TB_RANGE_PUSH("recompute.layer.%d", b->first + s);
    struct moe_stats *stats = b->d.moe_stats;
    b->d.moe_stats = NULL;  // counted by the first forward
    for (int l = s; l < s + n; l++) {
        if (b->layer_params_needed) b->layer_params_needed(b->hooks_ctx, b->first + l);  // (a forward's)
        transformer_layer_acts_alloc(&st->acts[l], b->mem, &b->d, b->selective, b->first + l);
        float *out = b->recompute_out;
        if (l + 1 < s + n) out = st->x[l + 1] = alloc_stream(b, l + 1);
        transformer_layer_forward(b->spec, b->first + l, &b->d, &b->params[l], &st->acts[l], &b->ws, st->x[l], out);
    }
    b->d.moe_stats = stats;
    TB_RANGE_POP();
}

const float *transformer_block_backward(transformer_block *b, int slot, const float *dout) {
    transformer_block_state *st = &b->slots[slot];
    const float *dcur = dout;
    float *dnext = b->d_ping;
    for (int l = b->L - 1; l >= 0; l--) {
        if (b->recompute[l] && l == b->chunk_start[l] + b->chunk_len[l] - 1)
            recompute_chunk(b, st, b->chunk_start[l], b->chunk_len[l]);
        if (b->layer_backward_needs) b->layer_backward_needs(b->hooks_ctx, b->first + l);
        transformer_layer_backward(b->spec, b->first + l, &b->d, &b->params[l], &b->grads[l], &st->acts[l], &b->ws,
                                   st->x[l], dcur, dnext);
        transformer_layer_acts_free(&st->acts[l], b->mem);
        if (b->layer_grads_done) b->layer_grads_done(b->hooks_ctx, b->first + l);
        tb_free(b->mem, st->x[l + 1]);
        st->x[l + 1] = NULL;
        dcur = dnext;
        dnext = dnext == b->d_ping ? b->d_pong : b->d_ping;
    }
    if (b->L == 0) {
        // an empty block passes the gradient through
        tb_be()->copy(b->d_ping, dout, (size_t)b->d.Ns * b->d.C * sizeof(float));
        dcur = b->d_ping;
    }
    tb_free(b->mem, st->x[0]);
    st->x[0] = NULL;
    return dcur;
}
