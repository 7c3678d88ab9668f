#include "transformer/transformer_layer.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/cpu/kernels.h"
#include "runtime/ranges.h"
#include "core/xalloc.h"
#include "core/shapes/saved_tensors.h"
#include "transformer/context_parallel.h"
#include "transformer/forward_hook.h"

tb_layer_dims tb_layer_dims_for(const tb_config *cfg, const transformer_layer_spec *spec, tb_group *tp_group) {
    const int fc1_factor = spec->activation->fc1_factor;
    tb_layer_dims d;
    const int tp = cfg->tensor_model_parallel_size;
    d.B = cfg->micro_batch_size;
    d.cp_size = cfg->context_parallel_size > 1 ? cfg->context_parallel_size : 1;
    d.T = cfg->seq_length / d.cp_size;  // this rank's tokens of each sample (context_parallel.h)
    d.cp = NULL;
    d.cp_ring = d.cp_size > 1 && cfg->cp_comm_type == TB_CP_P2P;
    d.qk_norm = spec->q_layernorm != NULL;
    d.N = d.B * d.T;
    d.Ns = cfg->sequence_parallel ? d.N / tp : d.N;
    d.C = cfg->hidden_size;
    d.hs = d.C / cfg->num_attention_heads;
    d.NH = cfg->num_attention_heads / tp;
    d.G = cfg->num_query_groups / tp;
    d.CA = d.NH * d.hs;
    d.QKV = (d.NH + 2 * d.G) * d.hs;
    d.F = cfg->ffn_hidden_size / tp;
    d.F1 = fc1_factor * d.F;
    d.eps = (float)cfg->norm_epsilon;
    d.tp = (tb_tp_region){tp_group, cfg->sequence_parallel, d.B, d.T, d.C, NULL, NULL, NULL};  // faults: set by training
    d.forward_hook = NULL;
    const int rope = cfg->position_embedding_type == TB_POS_ROPE;
    d.rope_dim = rope ? (int)lround(d.hs * cfg->rotary_percent) : 0;
    d.rope_interleaved = rope && cfg->rotary_interleaved;
    d.rope_base = cfg->rotary_base;
    d.rope_cos = d.rope_sin = NULL;
    d.attention = spec->core_attention;
    d.moe = tb_moe_dims_for(cfg, fc1_factor);
    d.moe.sp = cfg->sequence_parallel && tp > 1 ? tp_group : NULL;  // MoE: this rank's Ns tokens
    d.moe_loss_scale = 1.0f;
    d.moe_stats = NULL;
    return d;
}

// The saved tensors of one layer, in carve order: {pointer slot, floats}.
typedef struct acts_plan {
    void **slot[TB_LAYER_SAVED + TB_MOE_SAVED];
    size_t count[TB_LAYER_SAVED + TB_MOE_SAVED];
    int n;
} acts_plan;

// moe: a MoE layer (its router, dispatch and experts save instead of the MLP)
static acts_plan plan_for(transformer_layer_acts *a, const tb_layer_dims *d, int selective, int moe) {
    acts_plan p = {0};
    // the counts are the shared rule's (core/shapes/saved_tensors.h: the planner reads it too),
    // the core attention's by the spec's module kind
    const tb_layer_saved_shape shape = {.B = d->B, .T = d->T, .Ns = d->Ns, .C = d->C, .QKV = d->QKV, .CA = d->CA,
                                        .NH = d->NH, .G = d->G, .F = d->F, .F1 = d->F1, .flash = d->attention->flash,
                                        .selective = selective, .moe = moe, .qk_norm = d->qk_norm};
    int64_t floats[TB_LAYER_SAVED];
    tb_layer_saved_floats(&shape, floats);
    void **dense[TB_LAYER_SAVED] = {(void **)&a->ln1,  (void **)&a->ln1_mean, (void **)&a->ln1_rstd,
                                    (void **)&a->qkv,  (void **)&a->attn_saved, (void **)&a->atty,
                                    (void **)&a->mid,  (void **)&a->ln2,      (void **)&a->ln2_mean,
                                    (void **)&a->ln2_rstd, (void **)&a->fc1,  (void **)&a->act,
                                    (void **)&a->q_pre, (void **)&a->q_mean,  (void **)&a->q_rstd,
                                    (void **)&a->k_pre, (void **)&a->k_mean,  (void **)&a->k_rstd};
    for (int i = 0; i < TB_LAYER_SAVED; i++) p.slot[p.n] = dense[i], p.count[p.n++] = (size_t)floats[i];
    memset(&a->moe, 0, sizeof a->moe);
    if (moe) {
        void **slots[TB_MOE_SAVED];
        size_t counts[TB_MOE_SAVED];
        moe_layer_saved_slots(&a->moe, slots);
        moe_layer_saved_counts(&d->moe, d->Ns, d->C, counts);
        for (int i = 0; i < TB_MOE_SAVED; i++) p.slot[p.n] = slots[i], p.count[p.n++] = counts[i];
    }
    return p;
}

// Each tensor starts on a 64-byte boundary (the shared rule's layout).
static size_t padded(size_t floats) { return (size_t)tb_saved_bytes((int64_t)floats); }

size_t transformer_layer_acts_bytes(const tb_layer_dims *d, int selective_recompute) {
    transformer_layer_acts dummy;
    acts_plan p = plan_for(&dummy, d, selective_recompute, 0);
    size_t bytes = 0;
    for (int i = 0; i < p.n; i++) bytes += padded(p.count[i]);
    return bytes;
}

void transformer_layer_acts_alloc(transformer_layer_acts *a, tb_allocator *mem, const tb_layer_dims *d,
                                  int selective_recompute, int layer) {
    acts_plan p = plan_for(a, d, selective_recompute, tb_moe_is_layer(&d->moe, layer));
    size_t bytes = 0;
    for (int i = 0; i < p.n; i++) bytes += padded(p.count[i]);
    char what[64];
    snprintf(what, sizeof what, "layer.%d activations", layer);
    char *base = tb_alloc(mem, TB_MEM_ACTIVATIONS, bytes, what);
    a->memory = base;
    for (int i = 0; i < p.n; i++) {
        *p.slot[i] = p.count[i] ? (void *)base : NULL;
        base += padded(p.count[i]);
    }
}

void transformer_layer_acts_free(transformer_layer_acts *a, tb_allocator *mem) {
    moe_layer_release(&a->moe, mem);  // what a MoE layer's forward allocated for its experts
    tb_free(mem, a->memory);
    a->memory = NULL;
}

// The rotary tables at the local tokens' positions (pos: a host array; NULL: 0..T-1), computed
// on the host and written to the backend's tensors.
static void rope_tables(transformer_workspace *ws, const tb_layer_dims *d, const int32_t *pos) {
    const tb_backend *be = tb_be();
    if (be->host) {
        cpu_rope_tables_at(ws->rope_cos, ws->rope_sin, pos, d->T, d->rope_dim, d->rope_base);
        return;
    }
    const size_t n = (size_t)d->T * (d->rope_dim / 2);
    float *cos_t = tb_xmalloc(2 * n * sizeof(float), "rope tables (host)"), *sin_t = cos_t + n;
    cpu_rope_tables_at(cos_t, sin_t, pos, d->T, d->rope_dim, d->rope_base);
    be->copy_from_host(ws->rope_cos, cos_t, n * sizeof(float));
    be->copy_from_host(ws->rope_sin, sin_t, n * sizeof(float));
    free(cos_t);
}

// Context parallelism: the local tokens' positions (cp_pos_host) copied into the backend's tensor.
static void set_positions(transformer_workspace *ws, const tb_layer_dims *d) {
    tb_be()->copy_from_host(ws->cp_pos, ws->cp_pos_host, (size_t)d->T * sizeof(int32_t));
}

void transformer_workspace_alloc(transformer_workspace *ws, tb_allocator *mem, tb_layer_dims *d) {
    const size_t N = (size_t)d->N, Ns = (size_t)d->Ns, f = sizeof(float);
    const int sp = d->tp.sp && tb_tp_size(&d->tp) > 1;
    ws->branch = tb_alloc(mem, TB_MEM_WORKSPACE, Ns * d->C * f, "layer branch output");
    ws->full = sp ? tb_alloc(mem, TB_MEM_WORKSPACE, N * d->C * f, "row-parallel partial sums") : NULL;
    ws->norm_out = sp ? tb_alloc(mem, TB_MEM_WORKSPACE, Ns * d->C * f, "norm output shard") : NULL;
    ws->d_norm_out = tb_alloc(mem, TB_MEM_WORKSPACE, Ns * d->C * f, "grad at norm output");
    ws->d_mid = tb_alloc(mem, TB_MEM_WORKSPACE, Ns * d->C * f, "grad at mid residual");
    ws->d_qkv = tb_alloc(mem, TB_MEM_WORKSPACE, N * d->QKV * f, "grad of qkv");
    ws->d_atty = tb_alloc(mem, TB_MEM_WORKSPACE, N * d->CA * f, "grad of attention output");
    ws->d_fc1 = tb_alloc(mem, TB_MEM_WORKSPACE, N * d->F1 * f, "grad of fc1 output");
    ws->d_act = tb_alloc(mem, TB_MEM_WORKSPACE, N * d->F * f, "grad of activation output");
    ws->qk_out = d->qk_norm ? tb_alloc(mem, TB_MEM_WORKSPACE, N * d->CA * f, "q/k norm output") : NULL;
    ws->qk_din = d->qk_norm ? tb_alloc(mem, TB_MEM_WORKSPACE, N * d->CA * f, "grad at q/k norm input") : NULL;
    ws->attn_threads = cpu_get_num_threads();
    ws->attn_scratch = tb_alloc(mem, TB_MEM_WORKSPACE, d->attention->scratch_floats(d->cp_ring ? d->T : d->T * d->cp_size, d->hs, ws->attn_threads) * f,
                                "attention scratch");
    ws->staging = sp ? tb_alloc(mem, TB_MEM_COMM, N * d->C * f, "sequence-parallel staging") : NULL;
    d->tp.staging = ws->staging;
    d->moe.tp = &d->tp;  // the shared expert's tensor-parallel region
    ws->rope_cos = ws->rope_sin = NULL;
    if (d->rope_dim) {
        const size_t table = (size_t)d->T * (d->rope_dim / 2) * f;
        ws->rope_cos = tb_alloc(mem, TB_MEM_WORKSPACE, table, "rope cos table");
        ws->rope_sin = tb_alloc(mem, TB_MEM_WORKSPACE, table, "rope sin table");
        rope_tables(ws, d, NULL);
    }
    d->rope_cos = ws->rope_cos;
    d->rope_sin = ws->rope_sin;
    // context parallelism: the local tokens' positions, the sequence's K and V
    ws->cp_pos = ws->cp_pos_host = NULL, ws->cp_kv = NULL;
    if (d->cp_size > 1) {
        ws->cp_pos = tb_alloc(mem, TB_MEM_WORKSPACE, (size_t)d->T * sizeof(int32_t), "context-parallel positions");
        ws->cp_pos_host = tb_xmalloc((size_t)d->T * sizeof(int32_t), "context-parallel positions (host)");
        for (int t = 0; t < d->T; t++) ws->cp_pos_host[t] = t;  // until transformer_layer_set_context_parallel
        set_positions(ws, d);
        ws->cp_kv = tb_alloc(mem, TB_MEM_WORKSPACE,
                             cp_attention_workspace_floats(d->cp_ring, d->B, d->T, d->cp_size, d->NH, d->G, d->hs) * f,
                             "context-parallel K and V");
    }
    d->tp.pos = ws->cp_pos;
    moe_workspace_alloc(&ws->moe, mem, &d->moe, d->Ns, d->C);
}

void transformer_layer_set_context_parallel(tb_layer_dims *d, transformer_workspace *ws, tb_group *cp, int cp_rank) {
    if (d->cp_size <= 1) return;
    d->cp = cp;
    cp_local_positions(d->T * d->cp_size, d->cp_size, cp_rank, ws->cp_pos_host);
    set_positions(ws, d);
    if (d->rope_dim) rope_tables(ws, d, ws->cp_pos_host);
}

void transformer_workspace_free(transformer_workspace *ws, tb_allocator *mem) {
    tb_free(mem, ws->cp_pos);
    free(ws->cp_pos_host);
    ws->cp_pos = ws->cp_pos_host = NULL;
    moe_workspace_free(&ws->moe, mem);
    float **all[] = {&ws->branch, &ws->full,  &ws->norm_out, &ws->d_norm_out,   &ws->d_mid,  &ws->d_qkv,
                     &ws->d_atty, &ws->d_fc1, &ws->d_act,    &ws->attn_scratch, &ws->staging,
                     &ws->rope_cos, &ws->rope_sin, &ws->cp_kv, &ws->qk_out, &ws->qk_din};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) {
        tb_free(mem, *all[i]);
        *all[i] = NULL;
    }
}

// A norm over this rank's rows; under sequence parallelism its output is then gathered
// into the full (N,C) activation the column-parallel GEMM reads.
static void norm_forward(const tb_norm_module *norm, const tb_layer_dims *d, transformer_workspace *ws,
                         float *gathered, float *mean, float *rstd, const float *inp, const float *w,
                         const float *b) {
    const int sp = d->tp.sp && tb_tp_size(&d->tp) > 1;
    norm->forward(sp ? ws->norm_out : gathered, mean, rstd, inp, w, b, d->Ns, d->C, d->eps);
    if (sp) gather_from_sequence_parallel_region(&d->tp, ws->norm_out, gathered);
}

void transformer_layer_forward(const transformer_layer_spec *spec, int layer, const tb_layer_dims *d,
                               const transformer_layer_params *p, transformer_layer_acts *a,
                               transformer_workspace *ws, const float *inp, float *out) {
    const size_t NsC = (size_t)d->Ns * d->C;
    TB_RANGE_PUSH("layer.%d", layer);

    TB_RANGE_PUSH("layer.%d.input_layernorm", layer);
    norm_forward(spec->input_layernorm, d, ws, a->ln1, a->ln1_mean, a->ln1_rstd, inp, p->ln1_w, p->ln1_b);
    TB_RANGE_POP();

    self_attention_forward(spec, layer, d, p, a, ws, ws->branch);
    tb_forward_hook_call(d->forward_hook, &d->tp, ws->branch, d->Ns, d->C, "layer.%d.attention", layer);
    tb_be()->add(a->mid, inp, ws->branch, NsC);  // residual

    // a MoE layer reads this rank's tokens (under sequence parallelism its shard, not gathered)
    const int moe = tb_moe_is_layer(&d->moe, layer);
    TB_RANGE_PUSH("layer.%d.pre_mlp_layernorm", layer);
    if (moe)
        spec->pre_mlp_layernorm->forward(a->ln2, a->ln2_mean, a->ln2_rstd, a->mid, p->ln2_w, p->ln2_b, d->Ns, d->C,
                                         d->eps);
    else
        norm_forward(spec->pre_mlp_layernorm, d, ws, a->ln2, a->ln2_mean, a->ln2_rstd, a->mid, p->ln2_w, p->ln2_b);
    TB_RANGE_POP();

    if (moe)
        moe_layer_forward(&d->moe, spec->activation, layer, d->Ns, d->C, &p->moe, &a->moe, &ws->moe, a->ln2,
                          ws->branch, d->moe_stats);
    else
        mlp_forward(spec, layer, d, p, a, ws, ws->branch);
    tb_forward_hook_call(d->forward_hook, &d->tp, ws->branch, d->Ns, d->C, "layer.%d.mlp", layer);
    tb_be()->add(out, a->mid, ws->branch, NsC);  // residual
    tb_forward_hook_call(d->forward_hook, &d->tp, out, d->Ns, d->C, "layer.%d", layer);

    TB_RANGE_POP();
}

void transformer_layer_backward(const transformer_layer_spec *spec, int layer, const tb_layer_dims *d,
                                const transformer_layer_params *p, transformer_layer_params *g,
                                const transformer_layer_acts *a, transformer_workspace *ws,
                                const float *inp, const float *dout, float *dinp) {
    const size_t NsC = (size_t)d->Ns * d->C;
    TB_RANGE_PUSH("layer.%d.backward", layer);

    // out = mid + mlp(ln2(mid)): dmid = dout + ln2ᵀ(mlpᵀ(dout))
    if (tb_moe_is_layer(&d->moe, layer))
        moe_layer_backward(&d->moe, spec->activation, layer, d->Ns, d->C, &p->moe, &g->moe, &a->moe, &ws->moe,
                           d->moe_loss_scale, a->ln2, dout, ws->d_norm_out);
    else
        mlp_backward(spec, layer, d, p, g, a, ws, dout, ws->d_norm_out);
    TB_RANGE_PUSH("layer.%d.pre_mlp_layernorm.backward", layer);
    spec->pre_mlp_layernorm->backward(ws->d_mid, g->ln2_w, g->ln2_b, ws->d_norm_out, a->mid, p->ln2_w,
                                      a->ln2_mean, a->ln2_rstd, d->Ns, d->C);
    TB_RANGE_POP();
    tb_be()->add_inplace(ws->d_mid, dout, NsC);

    // mid = inp + attn(ln1(inp)): dinp = dmid + ln1ᵀ(attnᵀ(dmid))
    self_attention_backward(spec, layer, d, p, g, a, ws, ws->d_mid, ws->d_norm_out);
    TB_RANGE_PUSH("layer.%d.input_layernorm.backward", layer);
    spec->input_layernorm->backward(dinp, g->ln1_w, g->ln1_b, ws->d_norm_out, inp, p->ln1_w, a->ln1_mean,
                                    a->ln1_rstd, d->Ns, d->C);
    TB_RANGE_POP();
    tb_be()->add_inplace(dinp, ws->d_mid, NsC);

    TB_RANGE_POP();
}
