// flash_attention.c — causal attention without the T×T matrix (FlashAttention-2's
// algorithm on the CPU): the forward walks key blocks with an online softmax (running row
// maximum and sum) and saves only each row's log-sum-exp; the backward recomputes each
// block's probabilities from it. Blocks above the diagonal are skipped, so the work is about
// half of the dense kernel's and the memory linear in T.
#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <string.h>

#include "backend/cpu/kernels.h"

// Rows of Q and of K/V per block: the S tile (BR × BC floats, 16 KiB) stays in L1/L2.
#define BR 64
#define BC 64

// Per thread: S and dP tiles, then the forward's O accumulator (BR × hs) and row maximum and
// sum (2 × BR), or the backward's D = rowsum(dO ⊙ O) over the whole sequence (T).
size_t cpu_flash_attention_scratch_floats(int T, int hs, int threads) {
    size_t tail = (size_t)BR * hs + 2 * BR;
    if ((size_t)T > tail) tail = (size_t)T;
    return (size_t)threads * (2 * (size_t)BR * BC + tail);
}

// S (nr × nc) = scale · Q[i0..] K[j0..]ᵀ.
static void scores(float *S, const float *q, const float *k, int i0, int nr, int j0, int nc, int hs, int ld,
                   float scale) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, nr, nc, hs, scale, q + (size_t)i0 * ld, ld,
                k + (size_t)j0 * ld, ld, 0.0f, S, BC);
}

// The columns of a block's row at position i that it may attend to: the first ones, up to
// the diagonal when causal (none when the whole row lies above it).
static int visible(int i, int j0, int nc, int causal) {
    if (!causal || i >= j0 + nc - 1) return nc;
    return i >= j0 ? i - j0 + 1 : 0;
}

void cpu_flash_attention_forward(float *out, float *lse, float *scratch, int threads, const float *qkv, int B, int T,
                                 int NH, int G, int hs, int causal) {
    const int QKV = (NH + 2 * G) * hs, C = NH * hs, heads_per_group = NH / G, nblocks = (T + BR - 1) / BR;
    const float scale = 1.0f / sqrtf((float)hs);
    const size_t per_thread = cpu_flash_attention_scratch_floats(T, hs, 1);
#pragma omp parallel for collapse(3) schedule(dynamic) num_threads(threads)
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int ib = 0; ib < nblocks; ib++) {
                const int g = h / heads_per_group, i0 = ib * BR, nr = T - i0 < BR ? T - i0 : BR;
                const float *base = qkv + (size_t)b * T * QKV;
                const float *q = base + h * hs, *k = base + (NH + g) * hs, *v = base + (NH + G + g) * hs;
                float *S = scratch + (size_t)omp_get_thread_num() * per_thread, *O = S + 2 * BR * BC;
                float *m = O + (size_t)BR * hs, *l = m + BR;
                memset(O, 0, (size_t)nr * hs * sizeof(float));
                for (int r = 0; r < nr; r++) m[r] = -INFINITY, l[r] = 0.0f;
                const int last = causal ? i0 + nr - 1 : T - 1;  // causal: key blocks at or below the diagonal
                for (int j0 = 0; j0 <= last; j0 += BC) {
                    const int nc = T - j0 < BC ? T - j0 : BC;
                    scores(S, q, k, i0, nr, j0, nc, hs, QKV, scale);
                    for (int r = 0; r < nr; r++) {
                        float *s = S + (size_t)r * BC, mnew = m[r];
                        const int n = visible(i0 + r, j0, nc, causal);
                        for (int c = 0; c < n; c++) mnew = s[c] > mnew ? s[c] : mnew;
                        for (int c = n; c < nc; c++) s[c] = 0.0f;  // above the diagonal: no weight
                        if (n == 0) continue;                      // (m, l and O unchanged)
                        // rescale what the earlier blocks summed to the new maximum (the first
                        // block a row sees always holds its position 0: m is finite after it)
                        const float alpha = m[r] == -INFINITY ? 0.0f : expf(m[r] - mnew);
                        const float sum = cpu_exp_shifted(s, n, mnew);
                        l[r] = alpha * l[r] + sum;
                        m[r] = mnew;
                        float *o = O + (size_t)r * hs;
                        for (int e = 0; e < hs; e++) o[e] *= alpha;
                    }
                    // O += P V[j0..]
                    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, nr, hs, nc, 1.0f, S, BC,
                                v + (size_t)j0 * QKV, QKV, 1.0f, O, hs);
                }
                // every row sees at least its own position: l > 0
                float *L = lse + ((size_t)b * NH + h) * T + i0;
                for (int r = 0; r < nr; r++) {
                    const float inv = 1.0f / l[r];
                    float *dst = out + ((size_t)b * T + i0 + r) * C + h * hs;
                    for (int e = 0; e < hs; e++) dst[e] = O[(size_t)r * hs + e] * inv;
                    L[r] = m[r] + logf(l[r]);
                }
            }
}

void cpu_flash_attention_backward(float *dqkv, float *scratch, int threads, const float *dout, const float *out,
                                  const float *qkv, const float *lse, int B, int T, int NH, int G, int hs,
                                  int causal) {
    const int QKV = (NH + 2 * G) * hs, C = NH * hs, heads_per_group = NH / G;
    const float scale = 1.0f / sqrtf((float)hs);
    const size_t per_thread = cpu_flash_attention_scratch_floats(T, hs, 1);
    memset(dqkv, 0, (size_t)B * T * QKV * sizeof(float));
    // one task per (batch, key/value group): the group's dK and dV accumulate over its heads
    // in a fixed order, so the result does not depend on the thread count
#pragma omp parallel for collapse(2) schedule(dynamic) num_threads(threads)
    for (int b = 0; b < B; b++)
        for (int g = 0; g < G; g++) {
            float *S = scratch + (size_t)omp_get_thread_num() * per_thread, *dP = S + BR * BC, *D = dP + BR * BC;
            const float *base = qkv + (size_t)b * T * QKV;
            float *dbase = dqkv + (size_t)b * T * QKV;
            const float *k = base + (NH + g) * hs, *v = base + (NH + G + g) * hs;
            float *dk = dbase + (NH + g) * hs, *dv = dbase + (NH + G + g) * hs;
            for (int h = g * heads_per_group; h < (g + 1) * heads_per_group; h++) {
                const float *q = base + h * hs, *dO = dout + (size_t)b * T * C + h * hs;
                const float *O = out + (size_t)b * T * C + h * hs, *L = lse + ((size_t)b * NH + h) * T;
                float *dq = dbase + h * hs;
                for (int t = 0; t < T; t++) {  // D = rowsum(dO ⊙ O): the softmax's Σ_j P dP
                    float d = 0.0f;
                    for (int e = 0; e < hs; e++) d += dO[(size_t)t * C + e] * O[(size_t)t * C + e];
                    D[t] = d;
                }
                for (int j0 = 0; j0 < T; j0 += BC) {
                    const int nc = T - j0 < BC ? T - j0 : BC;
                    // causal: the query blocks at or below the diagonal
                    for (int i0 = causal ? j0 / BR * BR : 0; i0 < T; i0 += BR) {
                        const int nr = T - i0 < BR ? T - i0 : BR;
                        if (causal && i0 + nr - 1 < j0) continue;
                        scores(S, q, k, i0, nr, j0, nc, hs, QKV, scale);
                        for (int r = 0; r < nr; r++) {  // P = exp(S − lse), recomputed
                            float *s = S + (size_t)r * BC;
                            const int n = visible(i0 + r, j0, nc, causal);
                            cpu_exp_shifted(s, n, L[i0 + r]);
                            for (int c = n; c < nc; c++) s[c] = 0.0f;
                        }
                        // dV[j0..] += Pᵀ dO[i0..]
                        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, nc, hs, nr, 1.0f, S, BC,
                                    dO + (size_t)i0 * C, C, 1.0f, dv + (size_t)j0 * QKV, QKV);
                        // dP = dO[i0..] V[j0..]ᵀ; dS = P ⊙ (dP − D), written over dP
                        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, nr, nc, hs, 1.0f, dO + (size_t)i0 * C, C,
                                    v + (size_t)j0 * QKV, QKV, 0.0f, dP, BC);
                        for (int r = 0; r < nr; r++)
                            for (int c = 0; c < nc; c++) {
                                float *ds = dP + (size_t)r * BC + c;
                                *ds = S[(size_t)r * BC + c] * (*ds - D[i0 + r]);
                            }
                        // dQ[i0..] += scale · dS K[j0..]; dK[j0..] += scale · dSᵀ Q[i0..]
                        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, nr, hs, nc, scale, dP, BC,
                                    k + (size_t)j0 * QKV, QKV, 1.0f, dq + (size_t)i0 * QKV, QKV);
                        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, nc, hs, nr, scale, dP, BC,
                                    q + (size_t)i0 * QKV, QKV, 1.0f, dk + (size_t)j0 * QKV, QKV);
                    }
                }
            }
        }
}
