#include "backend/cpu/kernels.h"

#include <cblas.h>
#include <errno.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "backend/adamw_element.h"
#include "core/xalloc.h"

// OpenBLAS's own controls (declared in its cblas.h on Debian, repeated for clarity).
void openblas_set_num_threads(int num_threads);
char *openblas_get_corename(void);
char *openblas_get_config(void);

// Columns handled by one thread in the column-split reductions: a multiple of 16 floats so
// that threads never share a cache line of the output.
static void column_range(int C, int *c0, int *c1) {
    int nt = omp_get_num_threads(), t = omp_get_thread_num();
    int blocks = (C + 15) / 16;
    int per = (blocks + nt - 1) / nt;
    *c0 = t * per * 16;
    *c1 = (t + 1) * per * 16;
    if (*c0 > C) *c0 = C;
    if (*c1 > C) *c1 = C;
}

// ---------------------------------------------------------------------------------------
// linear

void cpu_matmul_forward(float *out, const float *inp, const float *weight, const float *bias, int N,
                        int C, int OC) {
    // (N,C) @ (OC,C)^T -> (N,OC)
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, OC, C, 1.0f, inp, C, weight, C, 0.0f, out, OC);
    if (bias) {
#pragma omp parallel for schedule(static)
        for (int n = 0; n < N; n++) {
            float *o = out + (size_t)n * OC;
            for (int j = 0; j < OC; j++) o[j] += bias[j];
        }
    }
}

void cpu_matmul_backward(float *dinp, float *dweight, float *dbias, const float *dout,
                         const float *inp, const float *weight, int N, int C, int OC) {
    // dinp (N,C) = dout (N,OC) @ weight (OC,C)
    if (dinp)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, C, OC, 1.0f, dout, OC, weight, C, 0.0f,
                    dinp, C);
    // dweight (OC,C) += dout^T (OC,N) @ inp (N,C)
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, OC, C, N, 1.0f, dout, OC, inp, C, 1.0f, dweight, C);
    if (dbias) {
#pragma omp parallel
        {
            int j0, j1;
            column_range(OC, &j0, &j1);
            for (int n = 0; n < N; n++) {
                const float *d = dout + (size_t)n * OC;
                for (int j = j0; j < j1; j++) dbias[j] += d[j];
            }
        }
    }
}

// The first row of each group (malloc'd).
static size_t *group_starts(const int32_t *rows, int G) {
    size_t *start = tb_xcalloc((size_t)G + 1, sizeof *start, "grouped GEMM row starts"), at = 0;
    for (int g = 0; g < G; g++) start[g] = at, at += (size_t)rows[g];
    return start;
}

void cpu_grouped_matmul_forward(float *out, const float *inp, const float *const *weight, const float *const *bias,
                                const int32_t *rows, int G, int C, int OC) {
    size_t *start = group_starts(rows, G);
#pragma omp parallel for schedule(dynamic, 1)
    for (int g = 0; g < G; g++) {
        const int n = rows[g];
        if (n == 0) continue;
        float *o = out + start[g] * OC;
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, OC, C, 1.0f, inp + start[g] * C, C, weight[g], C, 0.0f,
                    o, OC);
        if (bias && bias[g])
            for (int r = 0; r < n; r++)
                for (int j = 0; j < OC; j++) o[(size_t)r * OC + j] += bias[g][j];
    }
    free(start);
}

void cpu_grouped_matmul_backward(float *dinp, float *const *dweight, float *const *dbias, const float *dout,
                                 const float *inp, const float *const *weight, const int32_t *rows, int G, int C,
                                 int OC) {
    size_t *start = group_starts(rows, G);
#pragma omp parallel for schedule(dynamic, 1)
    for (int g = 0; g < G; g++) {
        const int n = rows[g];
        if (n == 0) continue;
        const float *d = dout + start[g] * OC, *x = inp + start[g] * C;
        if (dinp)
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, C, OC, 1.0f, d, OC, weight[g], C, 0.0f,
                        dinp + start[g] * C, C);
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, OC, C, n, 1.0f, d, OC, x, C, 1.0f, dweight[g], C);
        if (dbias && dbias[g])
            for (int r = 0; r < n; r++)
                for (int j = 0; j < OC; j++) dbias[g][j] += d[(size_t)r * OC + j];
    }
    free(start);
}

// ---------------------------------------------------------------------------------------
// norms

void cpu_layernorm_forward(float *out, float *mean, float *rstd, const float *inp,
                           const float *weight, const float *bias, int N, int C, float eps) {
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float *x = inp + (size_t)n * C;
        float *o = out + (size_t)n * C;
        float m = 0.0f;
        for (int i = 0; i < C; i++) m += x[i];
        m /= (float)C;
        float v = 0.0f;
        for (int i = 0; i < C; i++) {
            float d = x[i] - m;
            v += d * d;
        }
        v /= (float)C;
        float s = 1.0f / sqrtf(v + eps);
        for (int i = 0; i < C; i++) o[i] = (x[i] - m) * s * weight[i] + bias[i];
        mean[n] = m;
        rstd[n] = s;
    }
}

void cpu_layernorm_backward(float *dinp, float *dweight, float *dbias, const float *dout,
                            const float *inp, const float *weight, const float *mean,
                            const float *rstd, int N, int C) {
#pragma omp parallel
    {
        // dinp, row by row
#pragma omp for schedule(static)
        for (int n = 0; n < N; n++) {
            const float *x = inp + (size_t)n * C, *dy = dout + (size_t)n * C;
            float *dx = dinp + (size_t)n * C;
            const float m = mean[n], s = rstd[n];
            float dnorm_mean = 0.0f, dnorm_xhat_mean = 0.0f;
            for (int i = 0; i < C; i++) {
                float dnorm = weight[i] * dy[i];
                dnorm_mean += dnorm;
                dnorm_xhat_mean += dnorm * (x[i] - m) * s;
            }
            dnorm_mean /= (float)C;
            dnorm_xhat_mean /= (float)C;
            for (int i = 0; i < C; i++) {
                float xhat = (x[i] - m) * s;
                dx[i] = (weight[i] * dy[i] - dnorm_mean - xhat * dnorm_xhat_mean) * s;
            }
        }
        // dweight, dbias: each thread sums its columns over all rows
        int c0, c1;
        column_range(C, &c0, &c1);
        for (int n = 0; n < N; n++) {
            const float *x = inp + (size_t)n * C, *dy = dout + (size_t)n * C;
            const float m = mean[n], s = rstd[n];
            for (int i = c0; i < c1; i++) {
                dweight[i] += (x[i] - m) * s * dy[i];
                dbias[i] += dy[i];
            }
        }
    }
}

void cpu_rmsnorm_forward(float *out, float *rstd, const float *inp, const float *weight, int N, int C,
                         float eps) {
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float *x = inp + (size_t)n * C;
        float *o = out + (size_t)n * C;
        float ms = 0.0f;
        for (int i = 0; i < C; i++) ms += x[i] * x[i];
        float s = 1.0f / sqrtf(ms / (float)C + eps);
        for (int i = 0; i < C; i++) o[i] = x[i] * s * weight[i];
        rstd[n] = s;
    }
}

void cpu_rmsnorm_backward(float *dinp, float *dweight, const float *dout, const float *inp,
                          const float *weight, const float *rstd, int N, int C) {
#pragma omp parallel
    {
#pragma omp for schedule(static)
        for (int n = 0; n < N; n++) {
            const float *x = inp + (size_t)n * C, *dy = dout + (size_t)n * C;
            float *dx = dinp + (size_t)n * C;
            const float s = rstd[n];
            float dnorm_xhat_mean = 0.0f;
            for (int i = 0; i < C; i++) dnorm_xhat_mean += weight[i] * dy[i] * x[i] * s;
            dnorm_xhat_mean /= (float)C;
            for (int i = 0; i < C; i++) dx[i] = (weight[i] * dy[i] - x[i] * s * dnorm_xhat_mean) * s;
        }
        int c0, c1;
        column_range(C, &c0, &c1);
        for (int n = 0; n < N; n++) {
            const float *x = inp + (size_t)n * C, *dy = dout + (size_t)n * C;
            const float s = rstd[n];
            for (int i = c0; i < c1; i++) dweight[i] += x[i] * s * dy[i];
        }
    }
}

// ---------------------------------------------------------------------------------------
// residual

void cpu_add(float *out, const float *a, const float *b, size_t n) {
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) out[i] = a[i] + b[i];
}

void cpu_add_inplace(float *acc, const float *b, size_t n) {
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) acc[i] += b[i];
}

void cpu_scale(float *out, const float *inp, float s, size_t n) {
    for (size_t i = 0; i < n; i++) out[i] = inp[i] * s;
}

void cpu_rows_gather(float *dst, const float *src, int rows, int width, int stride, int offset) {
    for (int r = 0; r < rows; r++)
        memcpy(dst + (size_t)r * width, src + (size_t)r * stride + offset, (size_t)width * sizeof(float));
}

void cpu_rows_scatter(float *dst, const float *src, int rows, int width, int stride, int offset) {
    for (int r = 0; r < rows; r++)
        memcpy(dst + (size_t)r * stride + offset, src + (size_t)r * width, (size_t)width * sizeof(float));
}

// (row-parallel linear's bias, tensor_parallel/layers.c, as it was)
void cpu_add_bias(float *out, const float *bias, int rows, int OC) {
#pragma omp parallel for schedule(static)
    for (int n = 0; n < rows; n++) {
        float *o = out + (size_t)n * OC;
        for (int j = 0; j < OC; j++) o[j] += bias[j];
    }
}

void cpu_bias_backward(float *dbias, const float *dout, int rows, int OC) {
    for (int n = 0; n < rows; n++) {
        const float *g = dout + (size_t)n * OC;
        for (int j = 0; j < OC; j++) dbias[j] += g[j];
    }
}

// ---------------------------------------------------------------------------------------
// attention core

// P (T,T) = causal_softmax(scale · Q Kᵀ) for one (batch, head). Q and K rows are `ld`
// floats apart inside the fused qkv. Entries above the diagonal are 0. Forward and the
// recompute in backward both call this, so recomputed probabilities are bitwise equal.
static void attention_probs(float *P, const float *q, const float *k, int T, int hs, int ld) {
    const float scale = 1.0f / sqrtf((float)hs);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, T, hs, scale, q, ld, k, ld, 0.0f, P, T);
    for (int i = 0; i < T; i++) {
        float *row = P + (size_t)i * T;
        float maxv = -INFINITY;
        for (int j = 0; j <= i; j++) maxv = row[j] > maxv ? row[j] : maxv;
        float sum = 0.0f;
        for (int j = 0; j <= i; j++) {
            row[j] = expf(row[j] - maxv);
            sum += row[j];
        }
        float inv = 1.0f / sum;
        for (int j = 0; j <= i; j++) row[j] *= inv;
        for (int j = i + 1; j < T; j++) row[j] = 0.0f;
    }
}

void cpu_attention_forward(float *out, float *probs, float *scratch, const float *qkv, int B, int T,
                           int NH, int G, int hs) {
    const int QKV = (NH + 2 * G) * hs, C = NH * hs, heads_per_group = NH / G;
    for (int b = 0; b < B; b++) {
        const float *base = qkv + (size_t)b * T * QKV;
        for (int h = 0; h < NH; h++) {
            int g = h / heads_per_group;
            const float *q = base + h * hs;
            const float *k = base + (NH + g) * hs;
            const float *v = base + (NH + G + g) * hs;
            float *P = probs ? probs + ((size_t)b * NH + h) * T * T : scratch;
            attention_probs(P, q, k, T, hs, QKV);
            // out_h (T,hs) = P (T,T) @ V (T,hs)
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, hs, T, 1.0f, P, T, v, QKV, 0.0f,
                        out + (size_t)b * T * C + h * hs, C);
        }
    }
}

void cpu_attention_backward(float *dqkv, float *scratch, const float *dout, const float *qkv,
                            const float *probs, int B, int T, int NH, int G, int hs) {
    const int QKV = (NH + 2 * G) * hs, C = NH * hs, heads_per_group = NH / G;
    const float scale = 1.0f / sqrtf((float)hs);
    // K and V gradients accumulate over the heads of a group.
    memset(dqkv, 0, (size_t)B * T * QKV * sizeof(float));
    float *dP = scratch + (size_t)T * T;
    for (int b = 0; b < B; b++) {
        const float *base = qkv + (size_t)b * T * QKV;
        float *dbase = dqkv + (size_t)b * T * QKV;
        for (int h = 0; h < NH; h++) {
            int g = h / heads_per_group;
            const float *q = base + h * hs, *k = base + (NH + g) * hs, *v = base + (NH + G + g) * hs;
            float *dq = dbase + h * hs, *dk = dbase + (NH + g) * hs, *dv = dbase + (NH + G + g) * hs;
            const float *dO = dout + (size_t)b * T * C + h * hs;
            const float *P;
            if (probs) {
                P = probs + ((size_t)b * NH + h) * T * T;
            } else {
                attention_probs(scratch, q, k, T, hs, QKV);
                P = scratch;
            }
            // dP (T,T) = dO (T,hs) @ V^T
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, T, hs, 1.0f, dO, C, v, QKV, 0.0f, dP, T);
            // dV (T,hs) += P^T @ dO
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, T, hs, T, 1.0f, P, T, dO, C, 1.0f, dv, QKV);
            // dS = P ⊙ (dP − rowsum(dP ⊙ P)), causal part only; written over dP
            for (int i = 0; i < T; i++) {
                const float *p = P + (size_t)i * T;
                float *ds = dP + (size_t)i * T;
                float dot = 0.0f;
                for (int j = 0; j <= i; j++) dot += ds[j] * p[j];
                for (int j = 0; j <= i; j++) ds[j] = p[j] * (ds[j] - dot);
                for (int j = i + 1; j < T; j++) ds[j] = 0.0f;
            }
            // dQ (T,hs) = scale · dS @ K ; dK (T,hs) += scale · dS^T @ Q
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, hs, T, scale, dP, T, k, QKV, 0.0f, dq,
                        QKV);
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, T, hs, T, scale, dP, T, q, QKV, 1.0f, dk,
                        QKV);
        }
    }
}

// ---------------------------------------------------------------------------------------
// rotary position embedding

void cpu_rope_tables(float *cos_t, float *sin_t, int T, int dim, double base) {
    cpu_rope_tables_at(cos_t, sin_t, NULL, T, dim, base);
}

void cpu_rope_tables_at(float *cos_t, float *sin_t, const int32_t *pos, int T, int dim, double base) {
    const int half = dim / 2;
    for (int t = 0; t < T; t++)
        for (int i = 0; i < half; i++) {
            double angle = (double)(pos ? pos[t] : t) * pow(base, -2.0 * i / dim);
            cos_t[(size_t)t * half + i] = (float)cos(angle);
            sin_t[(size_t)t * half + i] = (float)sin(angle);
        }
}

void cpu_rope_apply(float *qkv, const float *cos_t, const float *sin_t, int B, int T, int row, int heads, int hs,
                    int dim, int interleaved, int inverse) {
    const int half = dim / 2;
    // pair i is channels (a, b) = (i, i + half), or (2i, 2i + 1) interleaved
    const int step_a = interleaved ? 2 : 1, off_b = interleaved ? 1 : half;
    const float sign = inverse ? -1.0f : 1.0f;
#pragma omp parallel for schedule(static)
    for (int bt = 0; bt < B * T; bt++) {
        const float *c = cos_t + (size_t)(bt % T) * half, *s = sin_t + (size_t)(bt % T) * half;
        for (int h = 0; h < heads; h++) {
            float *x = qkv + (size_t)bt * row + (size_t)h * hs;
            for (int i = 0; i < half; i++) {
                float *a = x + i * step_a, *b = a + off_b;
                const float xa = *a, xb = *b, si = sign * s[i];
                *a = xa * c[i] - xb * si;
                *b = xb * c[i] + xa * si;
            }
        }
    }
}

// ---------------------------------------------------------------------------------------
// embedding

void cpu_embedding_forward(float *out, const int32_t *tokens, const float *wte, int vocab_start, int vocab_local,
                           const float *wpe, const int32_t *pos, int B, int T, int C) {
#pragma omp parallel for schedule(static)
    for (int bt = 0; bt < B * T; bt++) {
        float *o = out + (size_t)bt * C;
        int local = tokens[bt] - vocab_start;
        if (local >= 0 && local < vocab_local) memcpy(o, wte + (size_t)local * C, (size_t)C * sizeof(float));
        else memset(o, 0, (size_t)C * sizeof(float));
        if (wpe) {
            const float *p = wpe + (size_t)(pos ? pos[bt % T] : bt % T) * C;
            for (int i = 0; i < C; i++) o[i] += p[i];
        }
    }
}

void cpu_add_positions(float *out, const float *wpe, const int32_t *pos, int B, int T, int C) {
    if (!wpe) return;  // rope or no position embedding
#pragma omp parallel for schedule(static)
    for (int bt = 0; bt < B * T; bt++) {
        float *o = out + (size_t)bt * C;
        const float *p = wpe + (size_t)(pos ? pos[bt % T] : bt % T) * C;
        for (int i = 0; i < C; i++) o[i] += p[i];
    }
}

void cpu_embedding_backward(float *dwte, float *dwpe, const float *dout, const int32_t *tokens, int vocab_start,
                            int vocab_local, const int32_t *pos, int B, int T, int C) {
#pragma omp parallel
    {
        int c0, c1;
        column_range(C, &c0, &c1);
        for (int bt = 0; bt < B * T; bt++) {
            const float *d = dout + (size_t)bt * C;
            int local = tokens[bt] - vocab_start;
            if (local >= 0 && local < vocab_local) {
                float *we = dwte + (size_t)local * C;
                for (int i = c0; i < c1; i++) we[i] += d[i];
            }
            if (dwpe) {
                float *pe = dwpe + (size_t)(pos ? pos[bt % T] : bt % T) * C;
                for (int i = c0; i < c1; i++) pe[i] += d[i];
            }
        }
    }
}

// ---------------------------------------------------------------------------------------
// reductions

#define SUMSQ_BLOCK 65536

double cpu_sum_squares(const float *x, size_t n) {
    size_t nblocks = (n + SUMSQ_BLOCK - 1) / SUMSQ_BLOCK;
    double total = 0.0;
    // Blocks are summed in parallel, then added in block order: the same bits for any
    // thread count.
    enum { MAX_LOCAL = 4096 };
    double partial[MAX_LOCAL];
    for (size_t first = 0; first < nblocks; first += MAX_LOCAL) {
        size_t count = nblocks - first < MAX_LOCAL ? nblocks - first : MAX_LOCAL;
#pragma omp parallel for schedule(static)
        for (size_t b = 0; b < count; b++) {
            size_t lo = (first + b) * SUMSQ_BLOCK, hi = lo + SUMSQ_BLOCK < n ? lo + SUMSQ_BLOCK : n;
            // eight independent accumulators keep the adder pipeline full
            double s[8] = {0};
            size_t i = lo;
            for (; i + 8 <= hi; i += 8)
                for (int l = 0; l < 8; l++) s[l] += (double)x[i + l] * x[i + l];
            for (; i < hi; i++) s[0] += (double)x[i] * x[i];
            partial[b] = ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
        }
        for (size_t b = 0; b < count; b++) total += partial[b];
    }
    return total;
}

// The rank's running sum (one per rank thread): each tensor's sum added in call order, so a
// gradient norm has the bits of Σ over tensors of cpu_sum_squares, whatever the backend table.
static _Thread_local double sum_squares_running;

void cpu_sum_squares_add(const float *x, size_t n) { sum_squares_running += cpu_sum_squares(x, n); }

// The CPU's GEMMs read the fp32 parameters themselves: no copy to make stale.
void cpu_params_changed(const float *params, size_t n) { (void)params, (void)n; }

double cpu_sum_squares_take(void) {
    const double s = sum_squares_running;
    sum_squares_running = 0.0;
    return s;
}

void cpu_set_num_threads(int n) {
    if (n <= 0) n = omp_get_num_procs();
    omp_set_num_threads(n);
    openblas_set_num_threads(n);
}

int cpu_max_num_threads(void) {
    const int was = openblas_get_num_threads();
    openblas_set_num_threads(1 << 20);  // OpenBLAS clamps to the most its build runs
    const int most = openblas_get_num_threads();
    openblas_set_num_threads(was);
    return most;
}

int cpu_threads_per_rank(int requested, int ranks_in_process, int ranks_on_host) {
    if (requested > 0) return requested;
    if (ranks_in_process > 1) return 1;
    int cores = omp_get_num_procs();  // the affinity mask's CPUs
    int share = cores / (ranks_on_host > 0 ? ranks_on_host : 1);
    return share > 0 ? share : 1;
}

// Set by cpu_runtime_select before it re-executes the program, so that the new image knows
// the policy is the engine's default and not the user's; its value says why it was chosen.
#define TB_WAIT_POLICY_MARK "TB_OMP_WAIT_POLICY_SET_BY"

const char *cpu_openmp_wait_policy(const char **source) {
    const char *policy = getenv("OMP_WAIT_POLICY"), *spin = getenv("GOMP_SPINCOUNT");
    static _Thread_local char described[96];
    *source = getenv(TB_WAIT_POLICY_MARK) ? "engine default" : policy || spin ? "environment" : "libgomp default";
    if (!policy && !spin) return "unset";  // libgomp: spin about 300000 rounds, then sleep
    snprintf(described, sizeof described, "%s%s%s", policy ? policy : "", policy && spin ? ", " : "",
             spin ? "GOMP_SPINCOUNT=" : "");
    if (spin) snprintf(described + strlen(described), sizeof described - strlen(described), "%s", spin);
    return described;
}

const char *cpu_openmp_wait_policy_reason(void) {
    const char *why = getenv(TB_WAIT_POLICY_MARK);
    return why ? why : "";
}

// The tasks runnable on the host besides the caller: the least of a few readings of the
// kernel's count of runnable tasks (/proc/loadavg's fourth field, "running/total", which
// counts the reader too), so that a task that ran for a moment (a shell, a daemon's tick) is
// not counted and one that keeps a core busy is. -1 when /proc/loadavg cannot be read.
static int other_runnable_tasks(int readings, long apart_us) {
    int least = -1;
    for (int i = 0; i < readings; i++) {
        if (i) usleep((useconds_t)apart_us);
        FILE *f = fopen("/proc/loadavg", "r");
        int running = -1;
        if (f) {
            if (fscanf(f, "%*s %*s %*s %d/", &running) != 1) running = -1;
            fclose(f);
        }
        if (running < 1) return -1;
        if (least < 0 || running - 1 < least) least = running - 1;
    }
    return least;
}

int cpu_wait_policy_choose(int others, const char **env_name, const char **env_value, char *why, size_t size) {
    if (others == 0) {
        *env_name = "GOMP_SPINCOUNT", *env_value = TB_SPIN_ROUNDS;
        snprintf(why, size, "quiet host: no other task runnable in %d readings of /proc/loadavg over %d ms at start, "
                 "so waiting threads spin " TB_SPIN_ROUNDS " rounds (libgomp's own bound) before they sleep",
                 TB_WAIT_PROBE_READINGS, TB_WAIT_PROBE_READINGS * TB_WAIT_PROBE_APART_US / 1000);
    } else {
        *env_name = "OMP_WAIT_POLICY", *env_value = "PASSIVE";
        if (others > 0)
            snprintf(why, size, "busy host: %d other task%s runnable in each of %d readings of /proc/loadavg at start, "
                     "so waiting threads sleep (a spinning team waits for its member that shares a core)",
                     others, others == 1 ? "" : "s", TB_WAIT_PROBE_READINGS);
        else
            snprintf(why, size, "/proc/loadavg unreadable, so whether the host is quiet is unknown: waiting threads "
                     "sleep");
    }
    return others == 0;
}

int cpu_get_num_threads(void) { return omp_get_max_threads(); }
int cpu_get_blas_num_threads(void) { return openblas_get_num_threads(); }

const char *cpu_blas_config(void) { return openblas_get_config(); }
const char *cpu_blas_corename(void) { return openblas_get_corename(); }

const char *cpu_blas_name(void) {
    static _Thread_local char name[160];
    snprintf(name, sizeof name, "%s (%s)", openblas_get_config(), openblas_get_corename());
    return name;
}

// The faster kernels OpenBLAS should have chosen, or NULL when its choice stands.
static const char *better_blas_core(void) {
    if (getenv("OPENBLAS_CORETYPE")) return NULL;
    const char *core = openblas_get_corename();
    if (strcasecmp(core, "prescott") != 0 && strcasecmp(core, "core2") != 0 && strcasecmp(core, "nehalem") != 0)
        return NULL;
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f")                                  ? "SkylakeX"
           : __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") ? "Haswell"
                                                                              : NULL;
}

void cpu_runtime_select(char **argv) {
    const char *core = better_blas_core();
    const int wait_policy = !getenv("OMP_WAIT_POLICY") && !getenv("GOMP_SPINCOUNT");
    if (!core && !wait_policy) return;
    if (core) setenv("OPENBLAS_CORETYPE", core, 1);
    const char *name = NULL, *value = NULL;
    if (wait_policy) {
        char why[512];
        cpu_wait_policy_choose(other_runnable_tasks(TB_WAIT_PROBE_READINGS, TB_WAIT_PROBE_APART_US), &name, &value,
                               why, sizeof why);
        setenv(name, value, 1);
        setenv(TB_WAIT_POLICY_MARK, why, 1);
    }
    execv("/proc/self/exe", argv);
    // exec failed: the libraries keep what they chose when they loaded; say so, and leave
    // the environment as they read it, so that the record tells the truth
    int e = errno;
    if (core) unsetenv("OPENBLAS_CORETYPE");
    if (wait_policy) {
        unsetenv(name);
        unsetenv(TB_WAIT_POLICY_MARK);
    }
    fprintf(stderr, "note: re-exec with%s%s%s%s%s%s failed (%s): OpenBLAS keeps its '%s' kernels and OpenMP its "
                    "default wait policy\n",
            core ? " OPENBLAS_CORETYPE=" : "", core ? core : "", wait_policy ? " " : "", wait_policy ? name : "",
            wait_policy ? "=" : "", wait_policy ? value : "", strerror(e), openblas_get_corename());
}

// --- optimizer ---------------------------------------------------------------------

void cpu_adamw_update(float *p, float *m, float *v, const float *g, size_t n, float grad_scale, float b1, float b2,
                      float eps, float keep, float step, float inv_sqrt_bc2) {
#pragma omp parallel for schedule(static)
    for (size_t j = 0; j < n; j++)
        adamw_element(p + j, m + j, v + j, g[j], grad_scale, b1, b2, eps, keep, step, inv_sqrt_bc2);
}
