#include "transformer/moe/token_dispatcher.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "comm/comm.h"
#include "config/config.h"
#include "runtime/ranges.h"
#include "core/xalloc.h"
#include "transformer/moe/router.h"

int moe_dispatch_rows(const tb_moe_dims *m, int N) {
    const int NK = N * m->k, padded = m->pad_to_capacity ? m->E * router_expert_capacity(m, N) : 0;
    return padded > NK ? padded : NK;
}

void moe_permute_map_local(const int32_t *route, int N, int k, int first, int El, int32_t *tokens_per_expert,
                           int32_t *perm_pos, int32_t *perm_token) {
    memset(tokens_per_expert, 0, (size_t)El * sizeof *tokens_per_expert);
    for (size_t i = 0; i < (size_t)N * k; i++)
        if (route[i] >= first && route[i] < first + El) tokens_per_expert[route[i] - first]++;
    // each expert's first row, then its tokens in token order
    int32_t next[TB_MOE_MAX_EXPERTS];
    int32_t at = 0;
    for (int e = 0; e < El; e++) next[e] = at, at += tokens_per_expert[e];
    for (int n = 0; n < N; n++)
        for (int j = 0; j < k; j++) {
            const int32_t e = route[(size_t)n * k + j];
            if (e < first || e >= first + El) {  // dropped, or another rank's
                perm_pos[(size_t)n * k + j] = -1;
                continue;
            }
            const int32_t row = next[e - first]++;
            perm_pos[(size_t)n * k + j] = row;
            perm_token[row] = n;
        }
}

void moe_permute_map(const int32_t *route, int N, int k, int E, int32_t *tokens_per_expert, int32_t *perm_pos,
                     int32_t *perm_token) {
    moe_permute_map_local(route, N, k, 0, E, tokens_per_expert, perm_pos, perm_token);
}

void moe_permute(float *out, const float *inp, const int32_t *perm_token, int M, int C) {
    tb_be()->moe_permute(out, inp, perm_token, M, C);
}

void moe_pad_to_capacity(int32_t *tokens_per_expert, int32_t *perm_pos, int32_t *perm_token, int N, int k, int E,
                         int capacity) {
    int32_t start[TB_MOE_MAX_EXPERTS], at = 0;
    for (int e = 0; e < E; e++) start[e] = at, at += tokens_per_expert[e];
    // expert e's j-th row r = start[e] + j moves to e·capacity + j; the rows behind are padding
    for (size_t i = 0; i < (size_t)E * capacity; i++) perm_token[i] = -1;
    for (size_t i = 0; i < (size_t)N * k; i++) {
        if (perm_pos[i] < 0) continue;
        int e = 0;
        while (e + 1 < E && start[e + 1] <= perm_pos[i]) e++;
        perm_pos[i] = e * capacity + (perm_pos[i] - start[e]);
        perm_token[perm_pos[i]] = (int32_t)(i / (size_t)k);
    }
    for (int e = 0; e < E; e++) tokens_per_expert[e] = capacity;
}

void moe_permute_backward(float *dinp, const float *d_perm, const int32_t *perm_pos, int N, int k, int C) {
    tb_be()->moe_permute_backward(dinp, d_perm, perm_pos, N, k, C);
}

void moe_unpermute(float *out, const float *expert_out, const int32_t *perm_pos, const float *probs, int N, int k,
                   int C) {
    tb_be()->moe_unpermute(out, expert_out, perm_pos, probs, N, k, C);
}

void moe_unpermute_backward(float *d_expert_out, float *d_probs, const float *dout, const float *expert_out,
                            const int32_t *perm_pos, const float *probs, int N, int k, int C) {
    tb_be()->moe_unpermute_backward(d_expert_out, d_probs, dout, expert_out, perm_pos, probs, N, k, C);
}

// ---------------------------------------------------------------------------------------
// The all-to-all dispatcher

void moe_alltoall_counts(tb_group *ep, tb_group *etp, const int32_t *tokens_per_expert, int E, int32_t *all_counts) {
    const int P = ep ? ep->size : 1, Q = etp ? etp->size : 1;
    const size_t row = (size_t)E * sizeof(int32_t);
    int32_t *mine = all_counts;  // (P,E): this etp member's ep group, placed at the end, then gathered over etp
    if (Q > 1) mine = all_counts + (size_t)(Q - 1) * P * E;
    if (P > 1) tb_all_gather_bytes(ep, tokens_per_expert, mine, row);
    else memcpy(mine, tokens_per_expert, row);
    if (Q > 1) {
        int32_t staged[TB_MAX_GROUP * TB_MOE_MAX_EXPERTS];
        memcpy(staged, mine, (size_t)P * row);
        tb_all_gather_bytes(etp, staged, all_counts, (size_t)P * row);
    }
}

moe_a2a_plan moe_alltoall_plan(tb_group *ep, tb_group *etp, const int32_t *all_counts, int E, int C,
                               int32_t *local_counts) {
    moe_a2a_plan pl;
    memset(&pl, 0, sizeof pl);
    pl.ep = ep && ep->size > 1 ? ep : NULL;
    pl.etp = etp && etp->size > 1 ? etp : NULL;
    pl.P = pl.ep ? ep->size : 1, pl.Q = pl.etp ? etp->size : 1;
    pl.E = E, pl.El = E / pl.P, pl.C = C, pl.all_counts = all_counts;
    const int P = pl.P, El = pl.El, me = pl.ep ? ep->index : 0, qme = pl.etp ? etp->index : 0;
    pl.first = me * El;
    for (int e = 0; e < El; e++) local_counts[e] = 0;
    for (int q = 0; q < pl.Q; q++)
        for (int p = 0; p < P; p++) {
            const int32_t *src = all_counts + (size_t)(q * P + p) * E;  // source (q, p)
            size_t in = 0;
            for (int e = 0; e < El; e++) in += (size_t)src[pl.first + e], local_counts[e] += src[pl.first + e];
            pl.etp_rows[q] += in;
            pl.rows += in;
            if (q != qme) continue;
            const int32_t *mine = all_counts + (size_t)(qme * P + me) * E;
            size_t out = 0;
            for (int e = 0; e < El; e++) out += (size_t)mine[p * El + e];  // mine, for p's experts
            pl.send[p] = out * C;
            pl.recv[p] = in * C;  // p's, for mine
        }
    pl.rows_me = pl.etp_rows[qme];
    return pl;
}

void moe_sort_chunks(float *out, const float *in, const int32_t *all_counts, int S, int E, int first, int El, int C,
                     int to_expert_major) {
    // the row where chunk (source s, expert e) starts in each order
    size_t src_major = 0;
    for (int s = 0; s < S; s++)
        for (int e = 0; e < El; e++) {
            size_t exp_major = 0;  // rows of experts before e (all sources), then of sources before s
            for (int e2 = 0; e2 < e; e2++)
                for (int s2 = 0; s2 < S; s2++) exp_major += (size_t)all_counts[(size_t)s2 * E + first + e2];
            for (int s2 = 0; s2 < s; s2++) exp_major += (size_t)all_counts[(size_t)s2 * E + first + e];
            const size_t n = (size_t)all_counts[(size_t)s * E + first + e] * C;
            if (to_expert_major) tb_be()->copy(out + exp_major * C, in + src_major * C, n * sizeof(float));
            else tb_be()->copy(out + src_major * C, in + exp_major * C, n * sizeof(float));
            src_major += (size_t)all_counts[(size_t)s * E + first + e];
        }
}

void moe_all_gather_v(tb_group *g, tb_allocator *mem, const float *mine, const size_t *rows, int C, float *all) {
    const int Q = g->size;
    const size_t n = rows[g->index] * C;
    size_t sendc[TB_MAX_GROUP], recvc[TB_MAX_GROUP];
    float *send = tb_alloc(mem, TB_MEM_COMM, (size_t)Q * n * sizeof(float) + 1, "tokens all-gathered over etp");
    for (int q = 0; q < Q; q++) {  // the same rows to every member
        tb_be()->copy(send + (size_t)q * n, mine, n * sizeof(float));
        sendc[q] = n, recvc[q] = rows[q] * C;
    }
    TB_RANGE_PUSH("moe.%s.all_gather_v", g->name);
    tb_all_to_all(g, send, sendc, all, recvc);
    TB_RANGE_POP();
    tb_free(mem, send);
}

void moe_reduce_scatter_v(tb_group *g, tb_allocator *mem, const float *all, const size_t *rows, int C, float *mine) {
    const int Q = g->size;
    const size_t n = rows[g->index] * C;
    size_t sendc[TB_MAX_GROUP], recvc[TB_MAX_GROUP];
    float *recv = tb_alloc(mem, TB_MEM_COMM, (size_t)Q * n * sizeof(float) + 1, "partial sums reduced over etp");
    for (int q = 0; q < Q; q++) sendc[q] = rows[q] * C, recvc[q] = n;  // segment q to member q
    TB_RANGE_PUSH("moe.%s.reduce_scatter_v", g->name);
    tb_all_to_all(g, all, sendc, recv, recvc);
    TB_RANGE_POP();
    tb_be()->copy(mine, recv, n * sizeof(float));
    for (int q = 1; q < Q; q++) tb_be()->add_inplace(mine, recv + (size_t)q * n, n);
    tb_free(mem, recv);
}

void moe_alltoall_dispatch(const moe_a2a_plan *pl, tb_allocator *mem, const float *send, float *expert_in) {
    const size_t f = sizeof(float), C = (size_t)pl->C;
    const float *recv = send;  // (R_me,C) in (ep source, local expert) order
    float *got = NULL, *all = NULL;
    if (pl->ep) {
        got = tb_alloc(mem, TB_MEM_COMM, pl->rows_me * C * f + 1, "tokens received over ep");
        tb_all_to_all(pl->ep, send, pl->send, got, pl->recv);
        recv = got;
    }
    const float *gathered = recv;  // (R,C) in (etp source, ep source, local expert) order
    if (pl->etp) {
        all = tb_alloc(mem, TB_MEM_COMM, pl->rows * C * f + 1, "tokens gathered over etp");
        moe_all_gather_v(pl->etp, mem, recv, pl->etp_rows, pl->C, all);
        gathered = all;
    }
    moe_sort_chunks(expert_in, gathered, pl->all_counts, pl->Q * pl->P, pl->E, pl->first, pl->El, pl->C, 1);
    tb_free(mem, all);
    tb_free(mem, got);
}

void moe_alltoall_combine(const moe_a2a_plan *pl, tb_allocator *mem, const float *expert_out, float *out) {
    const size_t f = sizeof(float), C = (size_t)pl->C;
    // sorted back to source order: straight into out when neither etp nor ep moves it
    float *sorted = pl->ep || pl->etp ? tb_alloc(mem, TB_MEM_COMM, pl->rows * C * f + 1, "expert outputs to send")
                                      : out;
    moe_sort_chunks(sorted, expert_out, pl->all_counts, pl->Q * pl->P, pl->E, pl->first, pl->El, pl->C, 0);
    float *mine = sorted, *reduced = NULL;  // (R_me,C)
    if (pl->etp) {
        reduced = pl->ep ? tb_alloc(mem, TB_MEM_COMM, pl->rows_me * C * f + 1, "expert outputs reduced over etp")
                         : out;
        moe_reduce_scatter_v(pl->etp, mem, sorted, pl->etp_rows, pl->C, reduced);
        mine = reduced;
    }
    if (pl->ep) tb_all_to_all(pl->ep, mine, pl->recv, out, pl->send);  // the reverse of the dispatch's
    if (reduced != out) tb_free(mem, reduced);
    if (sorted != out) tb_free(mem, sorted);
}

// ---------------------------------------------------------------------------------------
// The all-gather dispatcher

void moe_allgather_tokens(tb_group *ep, tb_group *etp, tb_allocator *mem, const float *x, size_t floats, float *all) {
    const size_t P = ep ? (size_t)ep->size : 1;
    if (!etp) {
        tb_all_gather(ep, x, all, floats);
        return;
    }
    float *mid = (float *)x;  // (P · floats): this etp member's ep group
    if (ep) {
        mid = tb_alloc(mem, TB_MEM_COMM, P * floats * sizeof(float) + 1, "tokens gathered over ep");
        tb_all_gather(ep, x, mid, floats);
    }
    tb_all_gather(etp, mid, all, P * floats);
    if (ep) tb_free(mem, mid);
}

void moe_reduce_scatter_tokens(tb_group *ep, tb_group *etp, tb_allocator *mem, const float *all, size_t floats,
                               float *x) {
    const size_t P = ep ? (size_t)ep->size : 1;
    if (!etp) {
        tb_reduce_scatter(ep, all, x, floats);
        return;
    }
    float *mid = ep ? tb_alloc(mem, TB_MEM_COMM, P * floats * sizeof(float) + 1, "outputs reduced over etp") : x;
    tb_reduce_scatter(etp, all, mid, P * floats);  // the etp index is the outer one
    if (ep) {
        tb_reduce_scatter(ep, mid, x, floats);
        tb_free(mem, mid);
    }
}

// ---------------------------------------------------------------------------------------
// The dispatchers in the layer

// The experts' buffers for R rows (and, gathered, their outputs).
static void alloc_expert_rows(const tb_moe_dims *m, int layer, int C, int R, int gathered, moe_layer_acts *a,
                              tb_allocator *mem) {
    char what[64];
    snprintf(what, sizeof what, "layer.%d moe expert activations", layer);
    a->rows = R;
    const size_t r = (size_t)R;
    float *base = tb_alloc(mem, TB_MEM_ACTIVATIONS, r * (C + m->F1 + m->F + (gathered ? C : 0)) * sizeof(float) + 1,
                           what);
    a->expert_memory = base;
    a->expert_in = base, a->fc1 = base + r * C, a->act = a->fc1 + r * m->F1;
    if (gathered) a->gathered_y = a->act + r * m->F;
}

static int rows_of(const tb_moe_dims *m, const int32_t *local_counts) {
    int R = 0;
    for (int e = 0; e < m->E_local; e++) R += local_counts[e];
    return R;
}

static tb_group *ep_of(const tb_moe_dims *m) { return m->ep_size > 1 ? m->ep : NULL; }
static tb_group *etp_of(const tb_moe_dims *m) { return m->etp_size > 1 ? m->etp : NULL; }
static int gathered(const tb_moe_dims *m) { return m->allgather && moe_tokens_moved(m); }

// The all-gather dispatcher: every rank's tokens, routes (int32: an all-gather moves bits) and
// probs gathered; this rank's experts' rows picked from them. The routes go as a tensor and
// the map is the host's (on a device: the gathered routes copied back, the map copied over).
static void allgather_dispatch(const tb_moe_dims *m, int layer, int N, int C, moe_layer_acts *a, moe_workspace *ws,
                               const float *inp) {
    const tb_backend *be = tb_be();
    tb_group *ep = ep_of(m), *etp = etp_of(m);
    const size_t NT = (size_t)m->ep_size * m->etp_size * N, NK = (size_t)N * m->k, f = sizeof(float);
    a->gather_memory = tb_alloc(ws->mem, TB_MEM_ACTIVATIONS, NT * m->k * 3 * 4 + 1, "moe gathered routing");
    a->gathered_probs = a->gather_memory;
    a->gathered_pos = (int32_t *)(a->gathered_probs + NT * m->k);
    a->gathered_token = a->gathered_pos + NT * m->k;
    int32_t *routes = tb_alloc(ws->mem, TB_MEM_COMM, NT * m->k * 4 + 1, "moe gathered routes");
    float *tokens = tb_alloc(ws->mem, TB_MEM_COMM, NT * C * f + 1, "moe gathered tokens");
    if (!be->host) be->copy_from_host(a->route, a->h_route, NK * sizeof(int32_t));
    moe_allgather_tokens(ep, etp, ws->mem, inp, (size_t)N * C, tokens);
    moe_allgather_tokens(ep, etp, ws->mem, (const float *)a->route, NK, (float *)routes);
    moe_allgather_tokens(ep, etp, ws->mem, a->probs, NK, a->gathered_probs);
    int32_t *h_routes = routes, *h_pos = a->gathered_pos, *h_token = a->gathered_token;
    if (!be->host) {
        h_routes = tb_xcalloc(3 * NT * m->k, sizeof(int32_t), "moe gathered routing (host)");
        h_pos = h_routes + NT * m->k, h_token = h_pos + NT * m->k;
        be->copy_to_host(h_routes, routes, NT * m->k * sizeof(int32_t));
    }
    moe_permute_map_local(h_routes, (int)NT, m->k, m->expert_first, m->E_local, a->h_local_counts, h_pos, h_token);
    const int R = rows_of(m, a->h_local_counts);
    if (!be->host) {
        be->copy_from_host(a->gathered_pos, h_pos, NT * m->k * sizeof(int32_t));
        be->copy_from_host(a->gathered_token, h_token, (size_t)R * sizeof(int32_t));
        free(h_routes);
    }
    tb_free(ws->mem, routes);
    alloc_expert_rows(m, layer, C, R, 1, a, ws->mem);
    moe_permute(a->expert_in, tokens, a->gathered_token, a->rows, C);
    tb_free(ws->mem, tokens);
}

float *moe_token_dispatch(const tb_moe_dims *m, int layer, int N, int C, moe_layer_acts *a, moe_workspace *ws,
                          const float *inp) {
    const tb_backend *be = tb_be();
    moe_permute_map(a->h_route, N, m->k, m->E, a->h_tokens_per_expert, a->h_perm_pos, a->h_perm_token);
    if (gathered(m)) {
        allgather_dispatch(m, layer, N, C, a, ws, inp);
        return a->gathered_y;
    }
    // the rows dispatched per expert: its tokens (a->tokens_per_expert, the statistics'), or its capacity
    int32_t counts[TB_MOE_MAX_EXPERTS];
    memcpy(counts, a->h_tokens_per_expert, (size_t)m->E * sizeof(int32_t));
    if (m->pad_to_capacity)
        moe_pad_to_capacity(counts, a->h_perm_pos, a->h_perm_token, N, m->k, m->E, router_expert_capacity(m, N));
    int M = 0;
    for (int e = 0; e < m->E; e++) M += counts[e];
    if (!be->host) {  // the maps the kernels read
        be->copy_from_host(a->perm_pos, a->h_perm_pos, (size_t)N * m->k * sizeof(int32_t));
        be->copy_from_host(a->perm_token, a->h_perm_token, (size_t)M * sizeof(int32_t));
    }
    if (!moe_tokens_moved(m)) {
        memcpy(a->h_all_counts, counts, (size_t)m->E * sizeof(int32_t));
        memcpy(a->h_local_counts, counts, (size_t)m->E * sizeof(int32_t));
        alloc_expert_rows(m, layer, C, M, 0, a, ws->mem);
        moe_permute(a->expert_in, inp, a->perm_token, M, C);
        return a->expert_out;
    }
    moe_alltoall_counts(m->ep, m->etp, counts, m->E, a->h_all_counts);
    moe_a2a_plan pl = moe_alltoall_plan(m->ep, m->etp, a->h_all_counts, m->E, C, a->h_local_counts);
    alloc_expert_rows(m, layer, C, (int)pl.rows, 0, a, ws->mem);
    moe_permute(ws->send, inp, a->perm_token, M, C);
    moe_alltoall_dispatch(&pl, ws->mem, ws->send, a->expert_in);
    return tb_alloc(ws->mem, TB_MEM_WORKSPACE, pl.rows * C * sizeof(float) + 1, "expert outputs");
}

void moe_token_combine(const tb_moe_dims *m, int N, int C, moe_layer_acts *a, moe_workspace *ws, float *y,
                       float *out) {
    if (gathered(m)) {
        // (R,C) -> (S·N,C) weighted by the probs (zero where no choice is here) -> this rank's (N,C)
        const size_t NT = (size_t)m->ep_size * m->etp_size * N;
        float *all = tb_alloc(ws->mem, TB_MEM_COMM, NT * C * sizeof(float) + 1, "moe outputs to reduce-scatter");
        moe_unpermute(all, y, a->gathered_pos, a->gathered_probs, (int)NT, m->k, C);
        moe_reduce_scatter_tokens(ep_of(m), etp_of(m), ws->mem, all, (size_t)N * C, out);
        tb_free(ws->mem, all);
        return;
    }
    if (moe_tokens_moved(m)) {  // (R,C) back to the tokens' ranks -> (M,C)
        int32_t local[TB_MOE_MAX_EXPERTS];
        moe_a2a_plan pl = moe_alltoall_plan(m->ep, m->etp, a->h_all_counts, m->E, C, local);
        moe_alltoall_combine(&pl, ws->mem, y, a->expert_out);
        tb_free(ws->mem, y);
    }
    moe_unpermute(out, a->expert_out, a->perm_pos, a->probs, N, m->k, C);
}

float *moe_token_combine_backward(const tb_moe_dims *m, int N, int C, const moe_layer_acts *a, moe_workspace *ws,
                                  const float *dout) {
    const size_t R = (size_t)a->rows, f = sizeof(float);
    if (gathered(m)) {
        tb_group *ep = ep_of(m), *etp = etp_of(m);
        const size_t NT = (size_t)m->ep_size * m->etp_size * N;
        float *d_out = tb_alloc(ws->mem, TB_MEM_COMM, NT * C * f + 1, "moe gathered output gradients");
        float *d_probs = tb_alloc(ws->mem, TB_MEM_COMM, NT * m->k * f + 1, "moe gathered prob gradients");
        float *d_y = tb_alloc(ws->mem, TB_MEM_WORKSPACE, R * C * f + 1, "grad of expert outputs");
        moe_allgather_tokens(ep, etp, ws->mem, dout, (size_t)N * C, d_out);
        moe_unpermute_backward(d_y, d_probs, d_out, a->gathered_y, a->gathered_pos, a->gathered_probs, (int)NT, m->k,
                               C);
        // each choice's gradient from its expert's rank (under etp the partial dot products summed)
        moe_reduce_scatter_tokens(ep, etp, ws->mem, d_probs, (size_t)N * m->k, ws->d_probs);
        tb_free(ws->mem, d_probs);
        tb_free(ws->mem, d_out);
        return d_y;
    }
    if (m->pad_to_capacity)  // the padding rows' gradients are zero (no token reads their outputs)
        tb_be()->zero(ws->d_expert_out, (size_t)moe_dispatch_rows(m, N) * C * f);
    moe_unpermute_backward(ws->d_expert_out, ws->d_probs, dout, a->expert_out, a->perm_pos, a->probs, N, m->k, C);
    if (!moe_tokens_moved(m)) return ws->d_expert_out;
    // under ep from every rank; under etp gathered: the reverse of the combine's reduce-scatter
    int32_t local[TB_MOE_MAX_EXPERTS];
    moe_a2a_plan pl = moe_alltoall_plan(m->ep, m->etp, a->h_all_counts, m->E, C, local);
    float *d_y = tb_alloc(ws->mem, TB_MEM_WORKSPACE, R * C * f + 1, "grad of expert outputs (received)");
    moe_alltoall_dispatch(&pl, ws->mem, ws->d_expert_out, d_y);
    return d_y;
}

void moe_token_dispatch_backward(const tb_moe_dims *m, int N, int C, const moe_layer_acts *a, moe_workspace *ws,
                                 float *d_y, float *d_in, float *dinp) {
    if (gathered(m)) {  // each gathered token's rows summed, then reduce-scattered to its rank
        const size_t NT = (size_t)m->ep_size * m->etp_size * N;
        float *all = tb_calloc(ws->mem, TB_MEM_COMM, NT * C * sizeof(float) + 1, "moe gathered token gradients");
        moe_permute_backward(all, d_in, a->gathered_pos, (int)NT, m->k, C);
        moe_reduce_scatter_tokens(ep_of(m), etp_of(m), ws->mem, all, (size_t)N * C, ws->d_perm_in);
        tb_free(ws->mem, all);
        tb_be()->add_inplace(dinp, ws->d_perm_in, (size_t)N * C);
    } else {
        if (moe_tokens_moved(m)) {  // back to the tokens' ranks (summed over etp: fc1's partial sums)
            int32_t local[TB_MOE_MAX_EXPERTS];
            moe_a2a_plan pl = moe_alltoall_plan(m->ep, m->etp, a->h_all_counts, m->E, C, local);
            moe_alltoall_combine(&pl, ws->mem, d_in, ws->d_perm_in);
        }
        moe_permute_backward(dinp, ws->d_perm_in, a->perm_pos, N, m->k, C);
    }
    if (d_in != ws->d_perm_in) tb_free(ws->mem, d_in);
    if (d_y != ws->d_expert_out) tb_free(ws->mem, d_y);
}

int64_t moe_alltoall_bytes(const tb_moe_dims *m, int C, const moe_layer_acts *a) {
    if (m->allgather || m->ep_size <= 1) return 0;  // no all-to-all over ep
    int32_t local[TB_MOE_MAX_EXPERTS];
    const moe_a2a_plan pl = moe_alltoall_plan(m->ep, m->etp, a->h_all_counts, m->E, C, local);
    size_t floats = 0;  // the dispatch sends pl.send to each ep member, the combine pl.recv back
    for (int p = 0; p < pl.P; p++) floats += pl.send[p] + pl.recv[p];
    return 2 * (int64_t)floats * (int64_t)sizeof(float);  // forward, and the gradients in backward
}
