// attention.c — self-attention: ColumnParallel qkv → (q/k norms) → core attention → RowParallel proj.
#include "backend/backend.h"
#include "runtime/ranges.h"
#include "tensor_parallel/layers.h"
#include "transformer/context_parallel.h"
#include "transformer/transformer_layer.h"

// --qk-layernorm: each head's queries (qkv's first CA columns) and keys (the next G·hs) normalized
// over the head size, in place, before the rotary embedding (Megatron's q_layernorm and
// k_layernorm, in get_query_key_value_tensors). One weight (and bias) of hs for every query head,
// one for every key head: whole on every tp rank, each rank applying them to its own heads, so
// their gradients are partial sums over tp (finalize_model_grads all-reduces them). A token's
// heads are normalized alone: no state crosses tokens, so context parallelism and pipeline
// stages need nothing more. The norms read contiguous rows: the block is gathered out of qkv
// (saved as q_pre, k_pre: what the backward reads), normalized into qk_out and scattered back.
// One of the two norms over `heads` heads a token, at column `at` of each qkv row: what it
// read saved in pre (its statistics in mean, rstd), its output written back into qkv.
static void head_norm_forward(const tb_norm_module *norm, const tb_layer_dims *d, float *qkv, float *pre, float *mean,
                              float *rstd, const float *w, const float *b, int heads, int at, float *staging) {
    const int width = heads * d->hs;
    tb_be()->rows_gather(pre, qkv, d->N, width, d->QKV, at);
    norm->forward(staging, mean, rstd, pre, w, b, d->N * heads, d->hs, d->eps);
    tb_be()->rows_scatter(qkv, staging, d->N, width, d->QKV, at);
}

// Its backward on d_qkv's block: the gradient at the norm's output → at its input, in place;
// the weight (and bias) gradients accumulated.
static void head_norm_backward(const tb_norm_module *norm, const tb_layer_dims *d, float *d_qkv, const float *pre,
                               const float *mean, const float *rstd, const float *w, float *dw, float *db, int heads,
                               int at, transformer_workspace *ws) {
    const int width = heads * d->hs;
    tb_be()->rows_gather(ws->qk_out, d_qkv, d->N, width, d->QKV, at);
    norm->backward(ws->qk_din, dw, db, ws->qk_out, pre, w, mean, rstd, d->N * heads, d->hs);
    tb_be()->rows_scatter(d_qkv, ws->qk_din, d->N, width, d->QKV, at);
}

static void qk_norm_forward(const transformer_layer_spec *spec, int layer, const tb_layer_dims *d,
                            const transformer_layer_params *p, transformer_layer_acts *a, transformer_workspace *ws) {
    TB_RANGE_PUSH("layer.%d.attention.q_layernorm", layer);
    head_norm_forward(spec->q_layernorm, d, a->qkv, a->q_pre, a->q_mean, a->q_rstd, p->q_norm_w, p->q_norm_b, d->NH,
                      0, ws->qk_out);
    TB_RANGE_POP();
    TB_RANGE_PUSH("layer.%d.attention.k_layernorm", layer);
    head_norm_forward(spec->k_layernorm, d, a->qkv, a->k_pre, a->k_mean, a->k_rstd, p->k_norm_w, p->k_norm_b, d->G,
                      d->CA, ws->qk_out);
    TB_RANGE_POP();
}

static void qk_norm_backward(const transformer_layer_spec *spec, int layer, const tb_layer_dims *d,
                             const transformer_layer_params *p, transformer_layer_params *g,
                             const transformer_layer_acts *a, transformer_workspace *ws) {
    TB_RANGE_PUSH("layer.%d.attention.k_layernorm.backward", layer);
    head_norm_backward(spec->k_layernorm, d, ws->d_qkv, a->k_pre, a->k_mean, a->k_rstd, p->k_norm_w, g->k_norm_w,
                       g->k_norm_b, d->G, d->CA, ws);
    TB_RANGE_POP();
    TB_RANGE_PUSH("layer.%d.attention.q_layernorm.backward", layer);
    head_norm_backward(spec->q_layernorm, d, ws->d_qkv, a->q_pre, a->q_mean, a->q_rstd, p->q_norm_w, g->q_norm_w,
                       g->q_norm_b, d->NH, 0, ws);
    TB_RANGE_POP();
}

void self_attention_forward(const transformer_layer_spec *spec, int layer, const tb_layer_dims *d,
                            const transformer_layer_params *p, transformer_layer_acts *a,
                            transformer_workspace *ws, float *out) {
    TB_RANGE_PUSH("layer.%d.attention", layer);

    TB_RANGE_PUSH("layer.%d.attention.qkv", layer);
    // (N,C) -> (N,QKV): this rank's heads
    column_parallel_linear_forward(a->qkv, a->ln1, p->qkv_w, p->qkv_b, d->N, d->C, d->QKV);
    TB_RANGE_POP();

    if (d->qk_norm) qk_norm_forward(spec, layer, d, p, a, ws);

    if (d->rope_dim) {
        // q and k rotated in place: the saved qkv is what the attention core reads
        TB_RANGE_PUSH("layer.%d.attention.rotary_pos_emb", layer);
        tb_be()->rope_apply(a->qkv, d->rope_cos, d->rope_sin, d->B, d->T, d->QKV, d->NH + d->G, d->hs, d->rope_dim,
                       d->rope_interleaved, 0);
        TB_RANGE_POP();
    }

    TB_RANGE_PUSH("layer.%d.attention.core", layer);
    // (N,QKV) -> (N,CA); what the core saves: transformer/spec.h
    if (d->cp && d->cp_ring)  // the local queries against each cp rank's K and V in turn (context_parallel.h)
        cp_ring_attention_forward(d->cp, a->atty, a->attn_saved, ws->attn_scratch, ws->attn_threads, ws->cp_kv,
                                  a->qkv, d->B, d->T, d->NH, d->G, d->hs);
    else if (d->cp)  // the local queries against the whole sequence's K and V (context_parallel.h)
        cp_attention_forward(d->cp, ws->cp_pos, a->atty, a->attn_saved, ws->attn_scratch, ws->attn_threads, ws->cp_kv,
                             a->qkv, d->B, d->T, d->NH, d->G, d->hs);
    else
        spec->core_attention->forward(a->atty, a->attn_saved, ws->attn_scratch, ws->attn_threads, a->qkv, d->B,
                                      d->T, d->NH, d->G, d->hs);
    TB_RANGE_POP();

    TB_RANGE_PUSH("layer.%d.attention.proj", layer);
    // (N,CA) -> (Ns,C), summed over tp
    row_parallel_linear_forward(&d->tp, out, ws->full, a->atty, p->proj_w, p->proj_b, d->N, d->CA, d->C);
    TB_RANGE_POP();

    TB_RANGE_POP();
}

void self_attention_backward(const transformer_layer_spec *spec, int layer, const tb_layer_dims *d,
                             const transformer_layer_params *p, transformer_layer_params *g,
                             const transformer_layer_acts *a, transformer_workspace *ws, const float *dout,
                             float *dln1) {
    TB_RANGE_PUSH("layer.%d.attention.backward", layer);

    TB_RANGE_PUSH("layer.%d.attention.proj.backward", layer);
    row_parallel_linear_backward(&d->tp, ws->d_atty, ws->full, g->proj_w, g->proj_b, dout, a->atty, p->proj_w,
                                 d->N, d->CA, d->C);
    TB_RANGE_POP();

    TB_RANGE_PUSH("layer.%d.attention.core.backward", layer);
    // local without saved probabilities (selective recompute): recomputed from qkv, bit for bit
    if (d->cp && d->cp_ring)
        cp_ring_attention_backward(d->cp, ws->d_qkv, ws->attn_scratch, ws->attn_threads, ws->cp_kv, ws->d_atty,
                                   a->atty, a->qkv, a->attn_saved, d->B, d->T, d->NH, d->G, d->hs);
    else if (d->cp)
        cp_attention_backward(d->cp, ws->cp_pos, ws->d_qkv, ws->attn_scratch, ws->attn_threads, ws->cp_kv,
                              ws->d_atty, a->atty, a->qkv, a->attn_saved, d->B, d->T, d->NH, d->G, d->hs);
    else
        spec->core_attention->backward(ws->d_qkv, ws->attn_scratch, ws->attn_threads, ws->d_atty, a->atty, a->qkv,
                                       a->attn_saved, d->B, d->T, d->NH, d->G, d->hs);
    TB_RANGE_POP();

    if (d->rope_dim) {
        // the gradient at the rotated q, k, rotated back: that at the qkv GEMM's output
        TB_RANGE_PUSH("layer.%d.attention.rotary_pos_emb.backward", layer);
        tb_be()->rope_apply(ws->d_qkv, d->rope_cos, d->rope_sin, d->B, d->T, d->QKV, d->NH + d->G, d->hs, d->rope_dim,
                       d->rope_interleaved, 1);
        TB_RANGE_POP();
    }

    if (d->qk_norm) qk_norm_backward(spec, layer, d, p, g, a, ws);

    TB_RANGE_PUSH("layer.%d.attention.qkv.backward", layer);
    column_parallel_linear_backward(&d->tp, dln1, ws->full, g->qkv_w, g->qkv_b, ws->d_qkv, a->ln1, p->qkv_w,
                                    d->N, d->C, d->QKV);
    TB_RANGE_POP();

    TB_RANGE_POP();
}
