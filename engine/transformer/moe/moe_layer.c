#include "transformer/moe/moe_layer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/kernels.h"
#include "core/json_number.h"
#include "core/ranges.h"
#include "core/xalloc.h"
#include "transformer/moe/experts.h"
#include "transformer/moe/router.h"
#include "transformer/moe/token_dispatcher.h"

tb_moe_dims tb_moe_dims_for(const tb_config *cfg, int fc1_factor) {
    tb_moe_dims m;
    memset(&m, 0, sizeof m);
    m.freq = 1;
    if (cfg->num_experts <= 0) return m;
    m.E = cfg->num_experts;
    m.expert_first = 0;
    m.k = cfg->moe_router_topk;
    m.F = cfg->moe_ffn_hidden_size;
    m.F1 = fc1_factor * m.F;
    m.Fs = cfg->moe_shared_expert_intermediate_size > 0 ? cfg->moe_shared_expert_intermediate_size : 0;
    m.Fs1 = fc1_factor * m.Fs;
    m.freq = cfg->moe_layer_freq > 0 ? cfg->moe_layer_freq : 1;
    m.pre_softmax = cfg->moe_router_pre_softmax;
    m.sigmoid = cfg->moe_router_score_function == TB_MOE_SCORE_SIGMOID;
    m.aux_loss = cfg->moe_router_load_balancing_type == TB_MOE_LB_AUX_LOSS ||
                 cfg->moe_router_load_balancing_type == TB_MOE_LB_SEQ_AUX_LOSS;
    m.seq_aux = cfg->moe_router_load_balancing_type == TB_MOE_LB_SEQ_AUX_LOSS;
    m.seq_length = cfg->seq_length;
    m.aux_coeff = cfg->moe_aux_loss_coeff;
    m.capacity_factor = cfg->moe_expert_capacity_factor;
    m.drop_position = cfg->moe_token_drop_policy == TB_MOE_DROP_POSITION;
    m.ep_size = cfg->expert_model_parallel_size > 1 ? cfg->expert_model_parallel_size : 1;
    m.E_local = m.E / m.ep_size;  // expert_first and the group: set by the model
    m.ep = NULL;
    return m;
}

void moe_layer_saved_counts(const tb_moe_dims *m, int N, int C, size_t counts[TB_MOE_SAVED]) {
    const size_t n = (size_t)N, M = n * m->k;
    const size_t c[TB_MOE_SAVED] = {n * m->E, n * m->k, n * m->k, n * m->k, (size_t)m->E, (size_t)m->E, n * m->k,
                                    M,        (size_t)m->ep_size * m->E, (size_t)m->E_local, M * C,
                                    n * m->Fs1, n * m->Fs};
    memcpy(counts, c, sizeof c);
}

void moe_layer_saved_slots(moe_layer_acts *a, void **slots[TB_MOE_SAVED]) {
    void **s[TB_MOE_SAVED] = {(void **)&a->scores,   (void **)&a->probs,        (void **)&a->topk,
                              (void **)&a->route,    (void **)&a->selected_per_expert,
                              (void **)&a->tokens_per_expert, (void **)&a->perm_pos, (void **)&a->perm_token,
                              (void **)&a->all_counts, (void **)&a->local_counts, (void **)&a->expert_out,
                              (void **)&a->shared_fc1, (void **)&a->shared_act};
    memcpy(slots, s, sizeof s);
}

void moe_workspace_alloc(moe_workspace *ws, tb_allocator *mem, const tb_moe_dims *m, int N, int C) {
    memset(ws, 0, sizeof *ws);
    ws->mem = mem;
    if (m->E == 0) return;
    const size_t n = (size_t)N, M = n * m->k, f = sizeof(float);
    ws->logits = tb_alloc(mem, TB_MEM_WORKSPACE, n * m->E * f, "router logits");
    ws->d_logits = tb_alloc(mem, TB_MEM_WORKSPACE, n * m->E * f, "grad of router logits");
    ws->d_probs = tb_alloc(mem, TB_MEM_WORKSPACE, n * m->k * f, "grad of router probs");
    ws->d_expert_out = tb_alloc(mem, TB_MEM_WORKSPACE, M * C * f, "grad of expert outputs");
    ws->d_perm_in = tb_alloc(mem, TB_MEM_WORKSPACE, M * C * f, "grad of permuted tokens");
    if (m->ep_size > 1) ws->send = tb_alloc(mem, TB_MEM_COMM, M * C * f, "permuted tokens to send over ep");
    if (m->Fs > 0) {
        ws->shared_out = tb_alloc(mem, TB_MEM_WORKSPACE, n * C * f, "shared expert output");
        ws->d_shared_in = tb_alloc(mem, TB_MEM_WORKSPACE, n * C * f, "grad of shared expert input");
        ws->d_shared_act = tb_alloc(mem, TB_MEM_WORKSPACE, n * m->Fs * f, "grad of shared expert activation");
        ws->d_shared_fc1 = tb_alloc(mem, TB_MEM_WORKSPACE, n * m->Fs1 * f, "grad of shared expert fc1 output");
    }
}

void moe_workspace_free(moe_workspace *ws, tb_allocator *mem) {
    float **all[] = {&ws->logits, &ws->d_logits,     &ws->d_probs,     &ws->d_expert_out, &ws->d_perm_in,
                     &ws->send,   &ws->shared_out, &ws->d_shared_in, &ws->d_shared_act, &ws->d_shared_fc1};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) {
        tb_free(mem, *all[i]);
        *all[i] = NULL;
    }
}

void moe_layer_release(moe_layer_acts *a, tb_allocator *mem) {
    tb_free(mem, a->expert_memory);
    a->expert_memory = NULL;
    a->expert_in = a->fc1 = a->act = NULL;
}

// ---------------------------------------------------------------------------------------
// Load statistics

void moe_stats_init(moe_stats *s, int num_layers, int E) {
    s->num_layers = num_layers;
    s->E = E;
    s->tokens_per_expert = tb_xcalloc((size_t)num_layers * (E > 0 ? E : 1), sizeof(int64_t), "MoE token counts");
    s->load_balancing_loss = tb_xcalloc((size_t)num_layers, sizeof(double), "MoE load-balancing losses");
    s->microbatches = tb_xcalloc((size_t)num_layers, sizeof(int), "MoE record counts");
    s->dropped_tokens = tb_xcalloc((size_t)num_layers, sizeof(int64_t), "MoE dropped tokens");
    s->a2a_bytes = tb_xcalloc((size_t)num_layers, sizeof(int64_t), "MoE all-to-all bytes");
}

void moe_stats_free(moe_stats *s) {
    free(s->tokens_per_expert);
    free(s->load_balancing_loss);
    free(s->microbatches);
    free(s->dropped_tokens);
    free(s->a2a_bytes);
    memset(s, 0, sizeof *s);
}

void moe_stats_reset(moe_stats *s) {
    memset(s->tokens_per_expert, 0, (size_t)s->num_layers * s->E * sizeof(int64_t));
    memset(s->load_balancing_loss, 0, (size_t)s->num_layers * sizeof(double));
    memset(s->microbatches, 0, (size_t)s->num_layers * sizeof(int));
    memset(s->dropped_tokens, 0, (size_t)s->num_layers * sizeof(int64_t));
    memset(s->a2a_bytes, 0, (size_t)s->num_layers * sizeof(int64_t));
}

void moe_stats_add(moe_stats *a, const moe_stats *b) {
    for (int l = 0; l < a->num_layers && l < b->num_layers; l++) {
        for (int e = 0; e < a->E; e++) a->tokens_per_expert[(size_t)l * a->E + e] += b->tokens_per_expert[(size_t)l * b->E + e];
        a->load_balancing_loss[l] += b->load_balancing_loss[l];
        a->microbatches[l] += b->microbatches[l];
        a->dropped_tokens[l] += b->dropped_tokens[l];
        a->a2a_bytes[l] += b->a2a_bytes[l];
    }
}

json_t *moe_stats_json(const moe_stats *s, int aux_loss) {
    json_t *layers = json_array();
    for (int l = 0; l < s->num_layers; l++) {
        if (s->microbatches[l] == 0) continue;
        const int64_t *t = s->tokens_per_expert + (size_t)l * s->E;
        json_t *counts = json_array();
        int64_t total = 0, max = 0;
        for (int e = 0; e < s->E; e++) {
            json_array_append_new(counts, json_integer((json_int_t)t[e]));
            total += t[e];
            max = t[e] > max ? t[e] : max;
        }
        // the load imbalance: the busiest expert's tokens over the mean (1 = balanced)
        const double mean = (double)total / s->E;
        json_t *o = json_pack("{s:i, s:o, s:I, s:I, s:o}", "layer", l, "tokens_per_expert", counts, "routed_tokens",
                              (json_int_t)total, "dropped_tokens", (json_int_t)s->dropped_tokens[l], "max_over_mean",
                              tb_json_number(mean > 0 ? (double)max / mean : 0));
        json_object_set_new(o, "a2a_bytes", json_integer((json_int_t)s->a2a_bytes[l]));
        json_object_set_new(o, "load_balancing_loss",
                            aux_loss ? tb_json_number(s->load_balancing_loss[l] / s->microbatches[l]) : json_null());
        json_array_append_new(layers, o);
    }
    return layers;
}

// ---------------------------------------------------------------------------------------
// Forward and backward

void moe_layer_forward(const tb_moe_dims *m, const tb_activation_module *act, int layer, int N, int C,
                       const moe_layer_params *p, moe_layer_acts *a, moe_workspace *ws, const float *inp, float *out,
                       moe_stats *stats) {
    const int ep = m->ep_size > 1;
    const size_t f = sizeof(float);
    TB_RANGE_PUSH("layer.%d.moe", layer);

    TB_RANGE_PUSH("layer.%d.moe.router", layer);
    // (N,C) -> scores (N,E), topk and probs (N,k)
    router_forward(m, N, C, inp, p->router_w, ws->logits, a->scores, a->topk, a->probs);
    const int dropped = router_apply_capacity(m, N, a->topk, a->probs, a->route, a->selected_per_expert);
    const int M = N * m->k - dropped;
    TB_RANGE_POP();

    TB_RANGE_PUSH("layer.%d.moe.dispatch", layer);
    // (N,C) -> (M,C) grouped by expert; under ep, to the experts' ranks -> (R,C)
    moe_permute_map(a->route, N, m->k, m->E, a->tokens_per_expert, a->perm_pos, a->perm_token);
    if (ep) {
        size_t sendc[TB_MAX_GROUP], recvc[TB_MAX_GROUP];
        moe_alltoall_counts(m->ep, a->tokens_per_expert, m->E, a->all_counts);
        moe_alltoall_splits(a->all_counts, m->ep->index, m->ep_size, m->E, C, sendc, recvc, a->local_counts);
    } else {
        memcpy(a->all_counts, a->tokens_per_expert, (size_t)m->E * sizeof(int32_t));
        memcpy(a->local_counts, a->tokens_per_expert, (size_t)m->E * sizeof(int32_t));
    }
    int R = 0;
    for (int e = 0; e < m->E_local; e++) R += a->local_counts[e];
    moe_layer_release(a, ws->mem);
    char what[64];
    snprintf(what, sizeof what, "layer.%d moe expert activations", layer);
    a->rows = R;
    float *base = tb_alloc(ws->mem, TB_MEM_ACTIVATIONS, (size_t)R * (C + m->F1 + m->F) * f + 1, what);
    a->expert_memory = base;
    a->expert_in = base, a->fc1 = base + (size_t)R * C, a->act = a->fc1 + (size_t)R * m->F1;
    float *recv = NULL, *y = a->expert_out;
    if (ep) {
        moe_permute(ws->send, inp, a->perm_token, M, C);
        recv = tb_alloc(ws->mem, TB_MEM_COMM, (size_t)R * C * f + 1, "tokens received over ep");
        moe_alltoall_dispatch(m->ep, ws->send, a->all_counts, m->E, C, recv, a->expert_in);
        y = tb_alloc(ws->mem, TB_MEM_WORKSPACE, (size_t)R * C * f + 1, "expert outputs");
    } else {
        moe_permute(a->expert_in, inp, a->perm_token, M, C);
    }
    TB_RANGE_POP();

    TB_RANGE_PUSH("layer.%d.moe.experts", layer);
    experts_forward(m, act, C, a->local_counts, p, a->expert_in, a->fc1, a->act, y);
    TB_RANGE_POP();

    TB_RANGE_PUSH("layer.%d.moe.combine", layer);
    if (ep) {  // (R,C) back to the tokens' ranks -> (M,C)
        moe_alltoall_combine(m->ep, y, a->all_counts, m->E, C, recv, a->expert_out);
        tb_free(ws->mem, y);
        tb_free(ws->mem, recv);
    }
    // (M,C) -> (N,C), weighted by the router's probs
    moe_unpermute(out, a->expert_out, a->perm_pos, a->probs, N, m->k, C);
    TB_RANGE_POP();

    if (m->Fs > 0) {
        TB_RANGE_PUSH("layer.%d.moe.shared_experts", layer);
        // (N,C) -> (N,Fs1) -> (N,Fs) -> (N,C), added to the routed experts' output
        cpu_matmul_forward(a->shared_fc1, inp, p->shared_fc1_w, p->shared_fc1_b, N, C, m->Fs1);
        act->forward(a->shared_act, a->shared_fc1, N, m->Fs);
        cpu_matmul_forward(ws->shared_out, a->shared_act, p->shared_fc2_w, p->shared_fc2_b, N, m->Fs, C);
        cpu_add_inplace(out, ws->shared_out, (size_t)N * C);
        TB_RANGE_POP();
    }

    if (stats && layer < stats->num_layers) {
        int64_t *t = stats->tokens_per_expert + (size_t)layer * stats->E;
        for (int e = 0; e < m->E; e++) t[e] += a->tokens_per_expert[e];
        if (m->aux_loss)
            stats->load_balancing_loss[layer] += router_aux_loss(m, N, a->scores, a->topk, a->selected_per_expert);
        stats->dropped_tokens[layer] += dropped;
        // this rank's all-to-all sends of the microbatch: its M tokens out and the R rows back,
        // forward and again in backward (the gradients take the same ways), its own share included
        if (ep) stats->a2a_bytes[layer] += 2 * ((int64_t)M + R) * C * (int64_t)f;
        stats->microbatches[layer]++;
    }
    TB_RANGE_POP();
}

void moe_layer_backward(const tb_moe_dims *m, const tb_activation_module *act, int layer, int N, int C,
                        const moe_layer_params *p, moe_layer_params *g, const moe_layer_acts *a, moe_workspace *ws,
                        float loss_scale, const float *inp, const float *dout, float *dinp) {
    const int ep = m->ep_size > 1;
    const size_t R = (size_t)a->rows, f = sizeof(float);
    TB_RANGE_PUSH("layer.%d.moe.backward", layer);

    TB_RANGE_PUSH("layer.%d.moe.combine.backward", layer);
    moe_unpermute_backward(ws->d_expert_out, ws->d_probs, dout, a->expert_out, a->perm_pos, a->probs, N, m->k, C);
    // d_y (R,C): the gradients at this rank's experts' outputs (under ep, from every rank)
    float *d_y = ws->d_expert_out, *scratch = NULL;
    if (ep) {
        scratch = tb_alloc(ws->mem, TB_MEM_COMM, R * C * f + 1, "expert gradients over ep");
        d_y = tb_alloc(ws->mem, TB_MEM_WORKSPACE, R * C * f + 1, "grad of expert outputs (received)");
        moe_alltoall_dispatch(m->ep, ws->d_expert_out, a->all_counts, m->E, C, scratch, d_y);
    }
    TB_RANGE_POP();

    TB_RANGE_PUSH("layer.%d.moe.experts.backward", layer);
    float *d_act = tb_alloc(ws->mem, TB_MEM_WORKSPACE, R * m->F * f + 1, "grad of expert activations");
    float *d_fc1 = tb_alloc(ws->mem, TB_MEM_WORKSPACE, R * m->F1 * f + 1, "grad of expert fc1 outputs");
    float *d_in = ep ? tb_alloc(ws->mem, TB_MEM_WORKSPACE, R * C * f + 1, "grad of expert inputs") : ws->d_perm_in;
    experts_backward(m, act, C, a->local_counts, p, g, a->expert_in, a->fc1, a->act, d_y, d_act, d_fc1, d_in);
    tb_free(ws->mem, d_act);
    tb_free(ws->mem, d_fc1);
    TB_RANGE_POP();

    TB_RANGE_PUSH("layer.%d.moe.router.backward", layer);
    // the router's share of dinp (written), with the load-balancing loss's gradient
    router_backward(m, N, C, inp, p->router_w, a->scores, a->topk, a->probs, a->selected_per_expert, ws->d_probs,
                    loss_scale, ws->d_logits, g->router_w, dinp);
    TB_RANGE_POP();

    TB_RANGE_PUSH("layer.%d.moe.dispatch.backward", layer);
    if (ep) {  // the input gradients back to the tokens' ranks
        moe_alltoall_combine(m->ep, d_in, a->all_counts, m->E, C, scratch, ws->d_perm_in);
        tb_free(ws->mem, d_in);
        tb_free(ws->mem, d_y);
        tb_free(ws->mem, scratch);
    }
    moe_permute_backward(dinp, ws->d_perm_in, a->perm_pos, N, m->k, C);  // the experts' share, added
    TB_RANGE_POP();

    if (m->Fs > 0) {
        TB_RANGE_PUSH("layer.%d.moe.shared_experts.backward", layer);
        cpu_matmul_backward(ws->d_shared_act, g->shared_fc2_w, g->shared_fc2_b, dout, a->shared_act, p->shared_fc2_w, N,
                            m->Fs, C);
        act->backward(ws->d_shared_fc1, a->shared_fc1, ws->d_shared_act, N, m->Fs);
        cpu_matmul_backward(ws->d_shared_in, g->shared_fc1_w, g->shared_fc1_b, ws->d_shared_fc1, inp, p->shared_fc1_w,
                            N, C, m->Fs1);
        cpu_add_inplace(dinp, ws->d_shared_in, (size_t)N * C);  // the shared expert's share
        TB_RANGE_POP();
    }

    TB_RANGE_POP();
}
