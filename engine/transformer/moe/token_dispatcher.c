#include "transformer/moe/token_dispatcher.h"

#include <stddef.h>
#include <string.h>

#include "comm/comm.h"
#include "core/ranges.h"
#include "config.h"

void moe_permute_map(const int32_t *route, int N, int k, int E, int32_t *tokens_per_expert, int32_t *perm_pos,
                     int32_t *perm_token) {
    memset(tokens_per_expert, 0, (size_t)E * sizeof *tokens_per_expert);
    for (int i = 0; i < N * k; i++)
        if (route[i] >= 0) tokens_per_expert[route[i]]++;
    // each expert's first row, then its tokens in token order
    int32_t next[TB_MOE_MAX_EXPERTS];
    int32_t at = 0;
    for (int e = 0; e < E; e++) next[e] = at, at += tokens_per_expert[e];
    for (int n = 0; n < N; n++)
        for (int j = 0; j < k; j++) {
            const int32_t e = route[(size_t)n * k + j];
            if (e < 0) {
                perm_pos[(size_t)n * k + j] = -1;
                continue;
            }
            const int32_t row = next[e]++;
            perm_pos[(size_t)n * k + j] = row;
            perm_token[row] = n;
        }
}

void moe_permute(float *out, const float *inp, const int32_t *perm_token, int M, int C) {
#pragma omp parallel for schedule(static)
    for (int r = 0; r < M; r++) memcpy(out + (size_t)r * C, inp + (size_t)perm_token[r] * C, (size_t)C * sizeof(float));
}

void moe_permute_backward(float *dinp, const float *d_perm, const int32_t *perm_pos, int N, int k, int C) {
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        float *d = dinp + (size_t)n * C;
        for (int j = 0; j < k; j++) {
            if (perm_pos[(size_t)n * k + j] < 0) continue;
            const float *src = d_perm + (size_t)perm_pos[(size_t)n * k + j] * C;
            for (int c = 0; c < C; c++) d[c] += src[c];
        }
    }
}

void moe_unpermute(float *out, const float *expert_out, const int32_t *perm_pos, const float *probs, int N, int k,
                   int C) {
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        float *o = out + (size_t)n * C;
        memset(o, 0, (size_t)C * sizeof(float));
        for (int j = 0; j < k; j++) {
            if (perm_pos[(size_t)n * k + j] < 0) continue;  // dropped: no share of the output
            const float p = probs[(size_t)n * k + j], *y = expert_out + (size_t)perm_pos[(size_t)n * k + j] * C;
            for (int c = 0; c < C; c++) o[c] += p * y[c];
        }
    }
}

void moe_unpermute_backward(float *d_expert_out, float *d_probs, const float *dout, const float *expert_out,
                            const int32_t *perm_pos, const float *probs, int N, int k, int C) {
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float *d = dout + (size_t)n * C;
        for (int j = 0; j < k; j++) {
            if (perm_pos[(size_t)n * k + j] < 0) {
                d_probs[(size_t)n * k + j] = 0;
                continue;
            }
            const size_t row = (size_t)perm_pos[(size_t)n * k + j];
            const float p = probs[(size_t)n * k + j], *y = expert_out + row * C;
            float *dy = d_expert_out + row * C;
            double dp = 0;
            for (int c = 0; c < C; c++) {
                dy[c] = p * d[c];
                dp += (double)d[c] * y[c];
            }
            d_probs[(size_t)n * k + j] = (float)dp;
        }
    }
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
            if (to_expert_major) memcpy(out + exp_major * C, in + src_major * C, n * sizeof(float));
            else memcpy(out + src_major * C, in + exp_major * C, n * sizeof(float));
            src_major += (size_t)all_counts[(size_t)s * E + first + e];
        }
}

void moe_all_gather_v(tb_group *g, tb_allocator *mem, const float *mine, const size_t *rows, int C, float *all) {
    const int Q = g->size;
    const size_t n = rows[g->index] * C;
    size_t sendc[TB_MAX_GROUP], recvc[TB_MAX_GROUP];
    float *send = tb_alloc(mem, TB_MEM_COMM, (size_t)Q * n * sizeof(float) + 1, "tokens all-gathered over etp");
    for (int q = 0; q < Q; q++) {  // the same rows to every member
        memcpy(send + (size_t)q * n, mine, n * sizeof(float));
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
    memcpy(mine, recv, n * sizeof(float));
    for (int q = 1; q < Q; q++) {
        const float *x = recv + (size_t)q * n;
        for (size_t i = 0; i < n; i++) mine[i] += x[i];
    }
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
