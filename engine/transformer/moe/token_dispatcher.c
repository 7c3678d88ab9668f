#include "transformer/moe/token_dispatcher.h"

#include <stddef.h>
#include <string.h>

#include "config.h"

void moe_permute_map(const int32_t *topk, int N, int k, int E, int32_t *tokens_per_expert, int32_t *perm_pos,
                     int32_t *perm_token) {
    memset(tokens_per_expert, 0, (size_t)E * sizeof *tokens_per_expert);
    for (int i = 0; i < N * k; i++) tokens_per_expert[topk[i]]++;
    // each expert's first row, then its tokens in token order
    int32_t next[TB_MOE_MAX_EXPERTS];
    int32_t at = 0;
    for (int e = 0; e < E; e++) next[e] = at, at += tokens_per_expert[e];
    for (int n = 0; n < N; n++)
        for (int j = 0; j < k; j++) {
            const int32_t row = next[topk[(size_t)n * k + j]]++;
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
