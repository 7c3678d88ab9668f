#include "transformer/moe/token_dispatcher.h"

#include <stddef.h>
#include <string.h>

#include "comm/comm.h"
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

void moe_alltoall_counts(tb_group *ep, const int32_t *tokens_per_expert, int E, int32_t *all_counts) {
    tb_all_gather_bytes(ep, tokens_per_expert, all_counts, (size_t)E * sizeof(int32_t));
}

void moe_alltoall_splits(const int32_t *all_counts, int me, int P, int E, int C, size_t *send, size_t *recv,
                         int32_t *local_counts) {
    const int El = E / P;
    for (int e = 0; e < El; e++) local_counts[e] = 0;
    for (int r = 0; r < P; r++) {
        size_t out = 0, in = 0;
        for (int e = 0; e < El; e++) {
            out += (size_t)all_counts[(size_t)me * E + r * El + e];  // mine, for r's experts
            in += (size_t)all_counts[(size_t)r * E + me * El + e];   // r's, for mine
            local_counts[e] += all_counts[(size_t)r * E + me * El + e];
        }
        send[r] = out * C;
        recv[r] = in * C;
    }
}

void moe_sort_chunks(float *out, const float *in, const int32_t *all_counts, int P, int E, int first, int El, int C,
                     int to_expert_major) {
    // the row where chunk (source s, expert e) starts in each order
    size_t src_major = 0;
    for (int s = 0; s < P; s++)
        for (int e = 0; e < El; e++) {
            size_t exp_major = 0;  // rows of experts before e (all sources), then of sources before s
            for (int e2 = 0; e2 < e; e2++)
                for (int s2 = 0; s2 < P; s2++) exp_major += (size_t)all_counts[(size_t)s2 * E + first + e2];
            for (int s2 = 0; s2 < s; s2++) exp_major += (size_t)all_counts[(size_t)s2 * E + first + e];
            const size_t n = (size_t)all_counts[(size_t)s * E + first + e] * C;
            if (to_expert_major) memcpy(out + exp_major * C, in + src_major * C, n * sizeof(float));
            else memcpy(out + src_major * C, in + exp_major * C, n * sizeof(float));
            src_major += (size_t)all_counts[(size_t)s * E + first + e];
        }
}

void moe_alltoall_dispatch(tb_group *ep, const float *send, const int32_t *all_counts, int E, int C, float *recv,
                           float *expert_in) {
    const int P = ep->size, me = ep->index, El = E / P;
    size_t sendcounts[TB_MAX_GROUP], recvcounts[TB_MAX_GROUP];
    int32_t local[TB_MOE_MAX_EXPERTS];
    moe_alltoall_splits(all_counts, me, P, E, C, sendcounts, recvcounts, local);
    tb_all_to_all(ep, send, sendcounts, recv, recvcounts);
    moe_sort_chunks(expert_in, recv, all_counts, P, E, me * El, El, C, 1);
}

void moe_alltoall_combine(tb_group *ep, const float *expert_out, const int32_t *all_counts, int E, int C,
                          float *scratch, float *out) {
    const int P = ep->size, me = ep->index, El = E / P;
    size_t sendcounts[TB_MAX_GROUP], recvcounts[TB_MAX_GROUP];
    int32_t local[TB_MOE_MAX_EXPERTS];
    moe_alltoall_splits(all_counts, me, P, E, C, sendcounts, recvcounts, local);
    moe_sort_chunks(scratch, expert_out, all_counts, P, E, me * El, El, C, 0);
    tb_all_to_all(ep, scratch, recvcounts, out, sendcounts);  // the reverse of the dispatch's
}
