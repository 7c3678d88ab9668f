// moe_kernels.c — the CPU backend's MoE kernels (backend/kernel_table.h, "MoE"): the host
// loops the MoE layer ran before the dispatch, moved here unchanged.
#include "backend/cpu/kernels.h"

#include <string.h>

#include "backend/moe_row.h"

void cpu_moe_router_forward(const float *logits, float *scores, int32_t *topk, float *probs, int N, int E, int k,
                            int sigmoid, int pre_softmax) {
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++)
        moe_router_row_forward(logits + (size_t)n * E, scores + (size_t)n * E, topk + (size_t)n * k,
                               probs + (size_t)n * k, E, k, sigmoid, pre_softmax);
}

void cpu_moe_router_backward(float *d_logits, const float *scores, const int32_t *topk, const float *probs,
                             const float *d_probs, const int32_t *counts, int T, double aux, int N, int E, int k,
                             int sigmoid, int pre_softmax) {
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++)
        moe_router_row_backward(d_logits + (size_t)n * E, scores + (size_t)n * E, topk + (size_t)n * k,
                                probs + (size_t)n * k, d_probs + (size_t)n * k, counts + (size_t)(n / T) * E, aux,
                                E, k, sigmoid, pre_softmax);
}

void cpu_moe_aux_score_sums(double *col, const float *scores, int S, int T, int E, int normalise) {
    for (int b = 0; b < S; b++)
        for (int e = 0; e < E; e++) {
            double *c = col + (size_t)b * E + e;
            *c = 0;
            for (int n = b * T; n < (b + 1) * T; n++) *c += moe_aux_score(scores + (size_t)n * E, e, E, normalise);
        }
}

void cpu_moe_permute(float *out, const float *inp, const int32_t *idx, int M, int C) {
#pragma omp parallel for schedule(static)
    for (int r = 0; r < M; r++) {
        if (idx[r] < 0) memset(out + (size_t)r * C, 0, (size_t)C * sizeof(float));  // padding
        else memcpy(out + (size_t)r * C, inp + (size_t)idx[r] * C, (size_t)C * sizeof(float));
    }
}

void cpu_moe_permute_backward(float *dinp, const float *d_perm, const int32_t *pos, int N, int k, int C) {
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        float *d = dinp + (size_t)n * C;
        for (int j = 0; j < k; j++) {
            if (pos[(size_t)n * k + j] < 0) continue;
            const float *src = d_perm + (size_t)pos[(size_t)n * k + j] * C;
            for (int c = 0; c < C; c++) d[c] += src[c];
        }
    }
}

void cpu_moe_unpermute(float *out, const float *y, const int32_t *pos, const float *probs, int N, int k, int C) {
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        float *o = out + (size_t)n * C;
        memset(o, 0, (size_t)C * sizeof(float));
        for (int j = 0; j < k; j++) {
            if (pos[(size_t)n * k + j] < 0) continue;  // dropped: no share of the output
            const float p = probs[(size_t)n * k + j], *yr = y + (size_t)pos[(size_t)n * k + j] * C;
            for (int c = 0; c < C; c++) o[c] += p * yr[c];
        }
    }
}

void cpu_moe_unpermute_backward(float *dy, float *d_probs, const float *dout, const float *y, const int32_t *pos,
                                const float *probs, int N, int k, int C) {
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float *d = dout + (size_t)n * C;
        for (int j = 0; j < k; j++) {
            if (pos[(size_t)n * k + j] < 0) {
                d_probs[(size_t)n * k + j] = 0;
                continue;
            }
            const size_t row = (size_t)pos[(size_t)n * k + j];
            const float p = probs[(size_t)n * k + j], *yr = y + row * C;
            float *dyr = dy + row * C;
            double dp = 0;
            for (int c = 0; c < C; c++) {
                dyr[c] = p * d[c];
                dp += (double)d[c] * yr[c];
            }
            d_probs[(size_t)n * k + j] = (float)dp;
        }
    }
}
