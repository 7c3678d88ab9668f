#include "transformer/moe/moe_layer.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "comm/comm.h"
#include "core/json_number.h"
#include "runtime/ranges.h"
#include "core/xalloc.h"
#include "tensor_parallel/layers.h"
#include "transformer/moe/experts.h"
#include "transformer/moe/router.h"
#include "transformer/moe/token_dispatcher.h"

// The shared expert's rows: every token of the microbatch (gathered under sequence parallelism).
static size_t shared_rows(const tb_moe_dims *m, int N) { return (size_t)N * (m->sp ? (size_t)m->sp->size : 1); }

void moe_layer_saved_counts(const tb_moe_dims *m, int N, int C, size_t counts[TB_MOE_SAVED]) {
    const tb_moe_saved_shape s = {.Ns = N, .C = C, .E = m->E, .k = m->k, .E_local = m->E_local,
                                  .ep = m->ep_size, .etp = m->etp_size, .M = moe_dispatch_rows(m, N),
                                  .shared_rows = (int64_t)shared_rows(m, N), .Fs1 = m->Fs1, .Fs = m->Fs};
    int64_t floats[TB_MOE_SAVED];
    tb_moe_saved_floats(&s, floats);
    for (int i = 0; i < TB_MOE_SAVED; i++) counts[i] = (size_t)floats[i];
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
    const size_t n = (size_t)N, M = (size_t)moe_dispatch_rows(m, N), f = sizeof(float);
    ws->logits = tb_alloc(mem, TB_MEM_WORKSPACE, n * m->E * f, "router logits");
    ws->d_logits = tb_alloc(mem, TB_MEM_WORKSPACE, n * m->E * f, "grad of router logits");
    ws->d_probs = tb_alloc(mem, TB_MEM_WORKSPACE, n * m->k * f, "grad of router probs");
    ws->d_expert_out = tb_alloc(mem, TB_MEM_WORKSPACE, M * C * f, "grad of expert outputs");
    ws->d_perm_in = tb_alloc(mem, TB_MEM_WORKSPACE, M * C * f, "grad of permuted tokens");
    if (m->ep_size > 1 || m->etp_size > 1) ws->send = tb_alloc(mem, TB_MEM_COMM, M * C * f, "permuted tokens to send over ep");
    if (m->Fs > 0) {
        const size_t ns = shared_rows(m, N);
        ws->shared_out = tb_alloc(mem, TB_MEM_WORKSPACE, n * C * f, "shared expert output");
        ws->d_shared_in = tb_alloc(mem, TB_MEM_WORKSPACE, n * C * f, "grad of shared expert input");
        ws->d_shared_act = tb_alloc(mem, TB_MEM_WORKSPACE, ns * m->Fs * f, "grad of shared expert activation");
        ws->d_shared_fc1 = tb_alloc(mem, TB_MEM_WORKSPACE, ns * m->Fs1 * f, "grad of shared expert fc1 output");
        if (m->sp) {
            ws->shared_in = tb_alloc(mem, TB_MEM_WORKSPACE, ns * C * f, "shared expert gathered input");
            ws->shared_partial = tb_alloc(mem, TB_MEM_WORKSPACE, ns * C * f, "shared expert partial sums");
        }
    }
}

void moe_workspace_free(moe_workspace *ws, tb_allocator *mem) {
    float **all[] = {&ws->logits,       &ws->d_logits,     &ws->d_probs,   &ws->d_expert_out,
                     &ws->d_perm_in,    &ws->send,         &ws->shared_out, &ws->d_shared_in,
                     &ws->d_shared_act, &ws->d_shared_fc1, &ws->shared_in,  &ws->shared_partial};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) {
        tb_free(mem, *all[i]);
        *all[i] = NULL;
    }
}

void moe_layer_release(moe_layer_acts *a, tb_allocator *mem) {
    tb_free(mem, a->expert_memory);
    tb_free(mem, a->gather_memory);
    free(a->host_memory);
    a->expert_memory = a->gather_memory = a->host_memory = NULL;
    a->expert_in = a->fc1 = a->act = a->gathered_probs = a->gathered_y = NULL;
    a->gathered_pos = a->gathered_token = NULL;
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
    s->expert_rows = tb_xcalloc((size_t)num_layers * (E > 0 ? E : 1), sizeof(int64_t), "MoE expert GEMM rows");
    s->expert_first = s->E_local = 0;
    memset(s->gemm, 0, sizeof s->gemm);
}

void moe_stats_free(moe_stats *s) {
    free(s->tokens_per_expert);
    free(s->load_balancing_loss);
    free(s->microbatches);
    free(s->dropped_tokens);
    free(s->a2a_bytes);
    free(s->expert_rows);
    memset(s, 0, sizeof *s);
}

void moe_stats_reset(moe_stats *s) {
    memset(s->tokens_per_expert, 0, (size_t)s->num_layers * s->E * sizeof(int64_t));
    memset(s->load_balancing_loss, 0, (size_t)s->num_layers * sizeof(double));
    memset(s->microbatches, 0, (size_t)s->num_layers * sizeof(int));
    memset(s->dropped_tokens, 0, (size_t)s->num_layers * sizeof(int64_t));
    memset(s->a2a_bytes, 0, (size_t)s->num_layers * sizeof(int64_t));
    memset(s->expert_rows, 0, (size_t)s->num_layers * s->E * sizeof(int64_t));
}

void moe_stats_add(moe_stats *a, const moe_stats *b) {
    for (int l = 0; l < a->num_layers && l < b->num_layers; l++) {
        for (int e = 0; e < a->E; e++) a->tokens_per_expert[(size_t)l * a->E + e] += b->tokens_per_expert[(size_t)l * b->E + e];
        a->load_balancing_loss[l] += b->load_balancing_loss[l];
        a->microbatches[l] += b->microbatches[l];
        a->dropped_tokens[l] += b->dropped_tokens[l];
        a->a2a_bytes[l] += b->a2a_bytes[l];
        for (int e = 0; e < a->E; e++) a->expert_rows[(size_t)l * a->E + e] += b->expert_rows[(size_t)l * b->E + e];
    }
    if (!a->E_local && b->E_local) {  // every chunk of a rank holds the same experts' shapes
        a->expert_first = b->expert_first, a->E_local = b->E_local;
        memcpy(a->gemm, b->gemm, sizeof a->gemm);
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
        // what this rank's expert GEMMs ran over: M per local expert, N and K of its shard
        json_t *rows = json_array();
        for (int e = s->expert_first; e < s->expert_first + s->E_local; e++)
            json_array_append_new(rows, json_integer((json_int_t)s->expert_rows[(size_t)l * s->E + e]));
        json_object_set_new(o, "microbatches", json_integer(s->microbatches[l]));
        json_object_set_new(o, "local_experts", json_pack("[i, i]", s->expert_first, s->E_local));
        json_object_set_new(o, "expert_rows", rows);
        json_object_set_new(o, "expert_gemm", json_pack("{s:[i, i], s:[i, i]}", "fc1", s->gemm[0], s->gemm[1], "fc2",
                                                        s->gemm[2], s->gemm[3]));
        json_array_append_new(layers, o);
    }
    return layers;
}

// ---------------------------------------------------------------------------------------
// Forward and backward

// Under sequence parallelism the load-balancing loss counts over the microbatch, every tp rank's
// shard (Megatron's switch_load_balancing_loss_func with its sequence_partition_group): the
// choices per expert summed over the group (selected_per_expert becomes the microbatch's) and,
// for the statistics, the scores' column sums too. Returns the microbatch's loss (without the
// coefficient); the gradient then uses N·sp tokens (moe_layer_backward).
static double sequence_parallel_aux_loss(const tb_moe_dims *m, tb_allocator *mem, int N, const float *scores,
                                         int32_t *selected) {
    const int E = m->E, sp = m->sp->size;
    float buf[2 * TB_MOE_MAX_EXPERTS];
    double col[TB_MOE_MAX_EXPERTS];
    router_aux_score_sums_tensor(m, mem, 1, N, scores, col);  // the aux loss's scores (sigmoid: normalised)
    for (int e = 0; e < E; e++) buf[e] = (float)selected[e], buf[E + e] = (float)col[e];
    tb_all_reduce(m->sp, buf, (size_t)2 * E, TB_RED_SUM);  // (a host buffer: NCCL stages it)
    double sum = 0;
    for (int e = 0; e < E; e++) {
        selected[e] = (int32_t)lrintf(buf[e]);
        sum += (double)buf[E + e] * selected[e];
    }
    const double NT = (double)N * sp;
    return sum * E / ((double)m->k * NT * NT);
}

// The shared expert (Megatron's SharedExpertMLP): (N,C) -> (N,Fs1) -> (N,Fs) -> ws->shared_out
// (N,C). Under tensor parallelism the dense MLP's pair over the sequence-parallel region: the
// tokens gathered, fc1 column-parallel, fc2 row-parallel (reduce-scattered back to this rank's).
static void shared_expert_forward(const tb_moe_dims *m, const tb_activation_module *act, int N, int C,
                                  const moe_layer_params *p, moe_layer_acts *a, moe_workspace *ws, const float *inp) {
    const int NS = (int)shared_rows(m, N);
    const float *x = inp;
    if (m->sp) {
        gather_from_sequence_parallel_region(m->tp, inp, ws->shared_in);
        x = ws->shared_in;
    }
    column_parallel_linear_forward(a->shared_fc1, x, p->shared_fc1_w, p->shared_fc1_b, NS, C, m->Fs1);
    act->forward(a->shared_act, a->shared_fc1, NS, m->Fs);
    if (m->sp)
        row_parallel_linear_forward(m->tp, ws->shared_out, ws->shared_partial, a->shared_act, p->shared_fc2_w,
                                    p->shared_fc2_b, NS, m->Fs, C);
    else
        tb_be()->matmul_forward(ws->shared_out, a->shared_act, p->shared_fc2_w, p->shared_fc2_b, N, m->Fs, C);
}

// Its backward: dout (N,C) -> ws->d_shared_in (N,C), the gradients accumulated (under tensor
// parallelism the input gathered again, as Megatron's sequence-parallel linears do).
static void shared_expert_backward(const tb_moe_dims *m, const tb_activation_module *act, int N, int C,
                                   const moe_layer_params *p, moe_layer_params *g, const moe_layer_acts *a,
                                   moe_workspace *ws, const float *inp, const float *dout) {
    const int NS = (int)shared_rows(m, N);
    if (!m->sp) {
        tb_be()->matmul_backward(ws->d_shared_act, g->shared_fc2_w, g->shared_fc2_b, dout, a->shared_act,
                                 p->shared_fc2_w, N, m->Fs, C);
        act->backward(ws->d_shared_fc1, a->shared_fc1, ws->d_shared_act, N, m->Fs);
        tb_be()->matmul_backward(ws->d_shared_in, g->shared_fc1_w, g->shared_fc1_b, ws->d_shared_fc1, inp,
                                 p->shared_fc1_w, N, C, m->Fs1);
        return;
    }
    row_parallel_linear_backward(m->tp, ws->d_shared_act, ws->shared_partial, g->shared_fc2_w, g->shared_fc2_b, dout,
                                 a->shared_act, p->shared_fc2_w, NS, m->Fs, C);
    act->backward(ws->d_shared_fc1, a->shared_fc1, ws->d_shared_act, NS, m->Fs);
    gather_from_sequence_parallel_region(m->tp, inp, ws->shared_in);
    column_parallel_linear_backward(m->tp, ws->d_shared_in, ws->shared_partial, g->shared_fc1_w, g->shared_fc1_b,
                                    ws->d_shared_fc1, ws->shared_in, p->shared_fc1_w, NS, C, m->Fs1);
}

// The routing's int arrays the host reads (moe_layer_acts.h_*): the tensors themselves on a host
// backend, else host copies.
static void host_views(const tb_moe_dims *m, int N, moe_layer_acts *a) {
    if (tb_be()->host) {
        a->h_topk = a->topk, a->h_route = a->route, a->h_selected = a->selected_per_expert;
        a->h_tokens_per_expert = a->tokens_per_expert, a->h_perm_pos = a->perm_pos, a->h_perm_token = a->perm_token;
        a->h_all_counts = a->all_counts, a->h_local_counts = a->local_counts, a->h_probs = a->probs;
        return;
    }
    const size_t NK = (size_t)N * m->k, E = (size_t)m->E, M = (size_t)moe_dispatch_rows(m, N);
    const size_t all = (size_t)m->etp_size * m->ep_size * E;
    int32_t *h = tb_xcalloc(4 * NK + 3 * E + M + all, sizeof(int32_t), "moe routing (host copies)");
    a->host_memory = h;
    a->h_topk = h, a->h_route = h + NK, a->h_perm_pos = h + 2 * NK, a->h_probs = (float *)(h + 3 * NK);
    a->h_selected = h + 4 * NK, a->h_tokens_per_expert = a->h_selected + E, a->h_local_counts = a->h_selected + 2 * E;
    a->h_perm_token = a->h_selected + 3 * E, a->h_all_counts = a->h_perm_token + M;
}

// The layer's load-balancing loss (without its coefficient) from the scores' column sums (the
// backend's) and the host's counts.
static double layer_aux_loss(const tb_moe_dims *m, int N, const moe_layer_acts *a, moe_workspace *ws) {
    const int T = m->seq_aux ? m->seq_length : N, S = N / T;
    double *col = tb_xcalloc((size_t)S * m->E, sizeof *col, "moe aux-loss score sums");
    int32_t *counts = m->seq_aux ? tb_xcalloc((size_t)S * m->E, sizeof *counts, "sequence expert counts") : NULL;
    if (counts) router_sequence_counts(m, N, a->h_topk, counts);
    router_aux_score_sums_tensor(m, ws->mem, S, T, a->scores, col);
    const double loss = router_aux_loss_from_sums(m, S, T, col, counts ? counts : a->h_selected);
    free(counts);
    free(col);
    return loss;
}

// The counts the router's backward reads (a tensor): the choices per expert before any drop, or
// under seq_aux_loss each sequence's (from the host's topk: a host array on a host backend,
// else copied to a tensor from ws->mem).
static int32_t *aux_counts(const tb_moe_dims *m, int N, const moe_layer_acts *a, moe_workspace *ws) {
    if (!m->aux_loss || !m->seq_aux) return a->selected_per_expert;
    const tb_backend *be = tb_be();
    const size_t n = (size_t)(N / m->seq_length) * m->E, bytes = n * sizeof(int32_t);
    int32_t *h = tb_xcalloc(n, sizeof *h, "sequence expert counts");
    router_sequence_counts(m, N, a->h_topk, h);
    if (be->host) return h;
    int32_t *counts = tb_alloc(ws->mem, TB_MEM_WORKSPACE, bytes, "sequence expert counts (device)");
    be->copy_from_host(counts, h, bytes);
    free(h);
    return counts;
}

void moe_layer_forward(const tb_moe_dims *m, const tb_activation_module *act, int layer, int N, int C,
                       const moe_layer_params *p, moe_layer_acts *a, moe_workspace *ws, const float *inp, float *out,
                       moe_stats *stats) {
    TB_RANGE_PUSH("layer.%d.moe", layer);

    const tb_backend *be = tb_be();
    moe_layer_release(a, ws->mem);  // the previous forward's expert rows
    host_views(m, N, a);

    TB_RANGE_PUSH("layer.%d.moe.router", layer);
    // (N,C) -> scores (N,E), topk and probs (N,k); the routing's host decisions from topk, probs
    router_forward(m, N, C, inp, p->router_w, ws->logits, a->scores, a->topk, a->probs);
    if (!be->host) {
        be->copy_to_host(a->h_topk, a->topk, (size_t)N * m->k * sizeof(int32_t));
        be->copy_to_host(a->h_probs, a->probs, (size_t)N * m->k * sizeof(float));
    }
    const int dropped = router_apply_capacity(m, N, a->h_topk, a->h_probs, a->h_route, a->h_selected);
    double aux = 0;
    if (m->aux_loss && m->sp) aux = sequence_parallel_aux_loss(m, ws->mem, N, a->scores, a->h_selected);
    else if (m->aux_loss) aux = layer_aux_loss(m, N, a, ws);
    if (!be->host)  // the aux loss's counts, read by the router's backward
        be->copy_from_host(a->selected_per_expert, a->h_selected, (size_t)m->E * sizeof(int32_t));
    TB_RANGE_POP();

    TB_RANGE_PUSH("layer.%d.moe.dispatch", layer);
    // (N,C) -> (M,C) grouped by expert, then to the experts' ranks -> (R,C) (token_dispatcher.h)
    float *y = moe_token_dispatch(m, layer, N, C, a, ws, inp);
    TB_RANGE_POP();

    TB_RANGE_PUSH("layer.%d.moe.experts", layer);
    experts_forward(m, act, C, a->h_local_counts, p, a->expert_in, a->fc1, a->act, y);
    TB_RANGE_POP();

    TB_RANGE_PUSH("layer.%d.moe.combine", layer);
    // (R,C) -> (N,C), weighted by the router's probs
    moe_token_combine(m, N, C, a, ws, y, out);
    TB_RANGE_POP();

    if (m->Fs > 0) {
        TB_RANGE_PUSH("layer.%d.moe.shared_experts", layer);
        shared_expert_forward(m, act, N, C, p, a, ws, inp);
        tb_be()->add_inplace(out, ws->shared_out, (size_t)N * C);  // added to the routed experts' output
        TB_RANGE_POP();
    }

    if (stats && layer < stats->num_layers) {
        int64_t *t = stats->tokens_per_expert + (size_t)layer * stats->E;
        for (int e = 0; e < m->E; e++) t[e] += a->h_tokens_per_expert[e];
        stats->load_balancing_loss[layer] += aux;
        stats->dropped_tokens[layer] += dropped;
        stats->a2a_bytes[layer] += moe_alltoall_bytes(m, C, a);
        int64_t *rows = stats->expert_rows + (size_t)layer * stats->E + m->expert_first;
        for (int e = 0; e < m->E_local; e++) rows[e] += a->h_local_counts[e];
        stats->expert_first = m->expert_first, stats->E_local = m->E_local;
        // fc1 (M, C) → (M, F1): N = F1, K = C; fc2 (M, F) → (M, C): N = C, K = F (this rank's etp shard)
        stats->gemm[0] = m->F1, stats->gemm[1] = C, stats->gemm[2] = C, stats->gemm[3] = m->F;
        stats->microbatches[layer]++;
    }
    TB_RANGE_POP();
}

void moe_layer_backward(const tb_moe_dims *m, const tb_activation_module *act, int layer, int N, int C,
                        const moe_layer_params *p, moe_layer_params *g, const moe_layer_acts *a, moe_workspace *ws,
                        float loss_scale, const float *inp, const float *dout, float *dinp) {
    const size_t R = (size_t)a->rows, f = sizeof(float);
    TB_RANGE_PUSH("layer.%d.moe.backward", layer);

    TB_RANGE_PUSH("layer.%d.moe.combine.backward", layer);
    // d_y (R,C): the gradients at this rank's experts' outputs; ws->d_probs (N,k)
    float *d_y = moe_token_combine_backward(m, N, C, a, ws, dout);
    TB_RANGE_POP();

    TB_RANGE_PUSH("layer.%d.moe.router.backward", layer);
    // the router's share of dinp (written), with the load-balancing loss's gradient; under
    // sequence parallelism its counts are the microbatch's (selected_per_expert, summed over
    // the group) over N·sp tokens: E / (k·(N·sp)²) = E / (k·N²) / sp²
    const float sp = m->sp ? (float)m->sp->size : 1.0f;
    int32_t *counts = aux_counts(m, N, a, ws);
    router_backward(m, N, C, inp, p->router_w, a->scores, a->topk, a->probs, counts, ws->d_probs,
                    loss_scale / (sp * sp), ws->d_logits, g->router_w, dinp);
    if (counts != a->selected_per_expert && tb_be()->host) free(counts);
    else if (counts != a->selected_per_expert) tb_free(ws->mem, counts);
    TB_RANGE_POP();

    TB_RANGE_PUSH("layer.%d.moe.experts.backward", layer);
    float *d_act = tb_alloc(ws->mem, TB_MEM_WORKSPACE, R * m->F * f + 1, "grad of expert activations");
    float *d_fc1 = tb_alloc(ws->mem, TB_MEM_WORKSPACE, R * m->F1 * f + 1, "grad of expert fc1 outputs");
    float *d_in = moe_tokens_moved(m) ? tb_alloc(ws->mem, TB_MEM_WORKSPACE, R * C * f + 1, "grad of expert inputs")
                                      : ws->d_perm_in;
    experts_backward(m, act, C, a->h_local_counts, p, g, a->expert_in, a->fc1, a->act, d_y, d_act, d_fc1, d_in);
    tb_free(ws->mem, d_act);
    tb_free(ws->mem, d_fc1);
    TB_RANGE_POP();

    TB_RANGE_PUSH("layer.%d.moe.dispatch.backward", layer);
    moe_token_dispatch_backward(m, N, C, a, ws, d_y, d_in, dinp);  // the experts' share, added
    TB_RANGE_POP();

    if (m->Fs > 0) {
        TB_RANGE_PUSH("layer.%d.moe.shared_experts.backward", layer);
        shared_expert_backward(m, act, N, C, p, g, a, ws, inp, dout);
        tb_be()->add_inplace(dinp, ws->d_shared_in, (size_t)N * C);  // the shared expert's share
        TB_RANGE_POP();
    }

    TB_RANGE_POP();
}
