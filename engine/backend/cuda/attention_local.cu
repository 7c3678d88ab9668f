// attention_local.cu — the unfused ("local") causal grouped-query attention, as
// cpu_attention_forward / _backward (backend/cpu/kernels.c): the probabilities (B, NH, T, T)
// materialised, softmax(scale · Q Kᵀ) over the causal part with the zeros above the diagonal,
// out = P V; backward dP = dO Vᵀ, dS = P ⊙ (dP − rowsum(dP ⊙ P)), dQ = scale · dS K written,
// dK = scale · dSᵀ Q and dV = Pᵀ dO summed over the heads of a group. One warp per row
// (a query row forward and for dS, dQ; a key row of a group for dK, dV, so no atomics:
// deterministic). Simple and exact rather than fast, as the CPU's reference path it mirrors.
#include <cuda_runtime.h>
#include <math.h>

#include "backend/cuda/cuda_kernels.h"
#include "backend/cuda/warp.cuh"

namespace {

constexpr int kWarpsPerBlock = 4;


// The warp's row among `rows` (false for the warps past the end: the whole warp returns).
__device__ __forceinline__ bool warp_row(size_t *w, size_t rows) {
    *w = (blockIdx.x * (size_t)blockDim.x + threadIdx.x) / 32;
    return *w < rows;
}

unsigned blocks_for_rows(size_t rows) { return (unsigned)((rows + kWarpsPerBlock - 1) / kWarpsPerBlock); }

// P row i of head h of sample b: the scaled scores of keys j ≤ i, their softmax, zeros after.
__global__ void probs_kernel(float *probs, const float *qkv, int B, int T, int NH, int G, int hs) {
    size_t w;
    if (!warp_row(&w, (size_t)B * NH * T)) return;
    const int lane = threadIdx.x & 31, i = (int)(w % T), h = (int)(w / T % NH), b = (int)(w / T / NH);
    const int QKV = (NH + 2 * G) * hs, g = h / (NH / G);
    const float scale = 1.0f / sqrtf((float)hs);
    const float *base = qkv + (size_t)b * T * QKV, *q = base + (size_t)i * QKV + h * hs;
    float *row = probs + w * T;
    float m = -INFINITY;
    for (int j = lane; j <= i; j += 32) {
        const float *k = base + (size_t)j * QKV + (NH + g) * hs;
        float s = 0.0f;
        for (int d = 0; d < hs; d++) s += q[d] * k[d];
        row[j] = s * scale;
        m = fmaxf(m, row[j]);
    }
    m = warp_max(m);
    float sum = 0.0f;
    for (int j = lane; j <= i; j += 32) {
        row[j] = expf(row[j] - m);
        sum += row[j];
    }
    const float inv = 1.0f / warp_sum(sum);
    for (int j = lane; j <= i; j += 32) row[j] *= inv;
    for (int j = i + 1 + lane; j < T; j += 32) row[j] = 0.0f;
}

// out row i of head h: Σ_{j ≤ i} P_ij V_j, each lane its channels.
__global__ void out_kernel(float *out, const float *probs, const float *qkv, int B, int T, int NH, int G, int hs) {
    size_t w;
    if (!warp_row(&w, (size_t)B * NH * T)) return;
    const int lane = threadIdx.x & 31, i = (int)(w % T), h = (int)(w / T % NH), b = (int)(w / T / NH);
    const int QKV = (NH + 2 * G) * hs, g = h / (NH / G);
    const float *base = qkv + (size_t)b * T * QKV, *p = probs + w * T;
    float *o = out + ((size_t)b * T + i) * NH * hs + h * hs;
    for (int d = lane; d < hs; d += 32) {
        float acc = 0.0f;
        for (int j = 0; j <= i; j++) acc += p[j] * base[(size_t)j * QKV + (NH + G + g) * hs + d];
        o[d] = acc;
    }
}

// dS row i of head h (into ds): dP_ij = dO_i · V_j, then P_ij (dP_ij − Σ_j dP_ij P_ij); zeros after i.
__global__ void ds_kernel(float *ds, const float *probs, const float *dout, const float *qkv, int B, int T, int NH,
                          int G, int hs) {
    size_t w;
    if (!warp_row(&w, (size_t)B * NH * T)) return;
    const int lane = threadIdx.x & 31, i = (int)(w % T), h = (int)(w / T % NH), b = (int)(w / T / NH);
    const int QKV = (NH + 2 * G) * hs, g = h / (NH / G);
    const float *base = qkv + (size_t)b * T * QKV, *p = probs + w * T;
    const float *dO = dout + ((size_t)b * T + i) * NH * hs + h * hs;
    float *row = ds + w * T;
    float dot = 0.0f;
    for (int j = lane; j <= i; j += 32) {
        const float *v = base + (size_t)j * QKV + (NH + G + g) * hs;
        float dp = 0.0f;
        for (int d = 0; d < hs; d++) dp += dO[d] * v[d];
        row[j] = dp;
        dot += dp * p[j];
    }
    dot = warp_sum(dot);
    for (int j = lane; j <= i; j += 32) row[j] = p[j] * (row[j] - dot);
    for (int j = i + 1 + lane; j < T; j += 32) row[j] = 0.0f;
}

// dQ row i of head h = scale Σ_{j ≤ i} dS_ij K_j (written).
__global__ void dq_kernel(float *dqkv, const float *ds, const float *qkv, int B, int T, int NH, int G, int hs) {
    size_t w;
    if (!warp_row(&w, (size_t)B * NH * T)) return;
    const int lane = threadIdx.x & 31, i = (int)(w % T), h = (int)(w / T % NH), b = (int)(w / T / NH);
    const int QKV = (NH + 2 * G) * hs, g = h / (NH / G);
    const float scale = 1.0f / sqrtf((float)hs);
    const float *base = qkv + (size_t)b * T * QKV, *s = ds + w * T;
    float *dq = dqkv + ((size_t)b * T + i) * QKV + h * hs;
    for (int d = lane; d < hs; d += 32) {
        float acc = 0.0f;
        for (int j = 0; j <= i; j++) acc += s[j] * base[(size_t)j * QKV + (NH + g) * hs + d];
        dq[d] = scale * acc;
    }
}

// dK, dV row j of group g: over the group's heads and the rows i ≥ j that see key j,
// dK_j = scale Σ dS_ij Q_i, dV_j = Σ P_ij dO_i (written: the only writer of the row).
__global__ void dkv_kernel(float *dqkv, const float *ds, const float *probs, const float *dout, const float *qkv,
                           int B, int T, int NH, int G, int hs) {
    size_t w;
    if (!warp_row(&w, (size_t)B * G * T)) return;
    const int lane = threadIdx.x & 31, j = (int)(w % T), g = (int)(w / T % G), b = (int)(w / T / G);
    const int QKV = (NH + 2 * G) * hs, per = NH / G, C = NH * hs;
    const float scale = 1.0f / sqrtf((float)hs);
    const float *base = qkv + (size_t)b * T * QKV;
    float *dk = dqkv + ((size_t)b * T + j) * QKV + (NH + g) * hs, *dv = dk + G * hs;
    for (int d = lane; d < hs; d += 32) {
        float ak = 0.0f, av = 0.0f;
        for (int h = g * per; h < (g + 1) * per; h++) {
            const size_t head_rows = ((size_t)b * NH + h) * T;
            for (int i = j; i < T; i++) {
                const size_t at = (head_rows + i) * T + j;
                ak += ds[at] * base[(size_t)i * QKV + h * hs + d];
                av += probs[at] * dout[((size_t)b * T + i) * C + h * hs + d];
            }
        }
        dk[d] = scale * ak;
        dv[d] = av;
    }
}

bool bad_shape(int NH, int G, int hs) { return hs <= 0 || G <= 0 || NH % G != 0; }

}  // namespace

extern "C" {

int cuda_attention_probs(float *probs, const float *qkv, int B, int T, int NH, int G, int hs, tb_cuda_stream s) {
    if (bad_shape(NH, G, hs)) return (int)cudaErrorInvalidValue;
    const size_t rows = (size_t)B * NH * T;
    if (rows == 0) return 0;
    probs_kernel<<<blocks_for_rows(rows), 32 * kWarpsPerBlock, 0, s>>>(probs, qkv, B, T, NH, G, hs);
    return (int)cudaGetLastError();
}

int cuda_attention_forward(float *out, const float *probs, const float *qkv, int B, int T, int NH, int G, int hs,
                           tb_cuda_stream s) {
    if (bad_shape(NH, G, hs)) return (int)cudaErrorInvalidValue;
    const size_t rows = (size_t)B * NH * T;
    if (rows == 0) return 0;
    out_kernel<<<blocks_for_rows(rows), 32 * kWarpsPerBlock, 0, s>>>(out, probs, qkv, B, T, NH, G, hs);
    return (int)cudaGetLastError();
}

int cuda_attention_backward(float *dqkv, float *ds, const float *dout, const float *qkv, const float *probs, int B,
                            int T, int NH, int G, int hs, tb_cuda_stream s) {
    if (bad_shape(NH, G, hs)) return (int)cudaErrorInvalidValue;
    const size_t rows = (size_t)B * NH * T, kv_rows = (size_t)B * G * T;
    if (rows == 0) return 0;
    const unsigned threads = 32 * kWarpsPerBlock;
    ds_kernel<<<blocks_for_rows(rows), threads, 0, s>>>(ds, probs, dout, qkv, B, T, NH, G, hs);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return (int)e;
    dq_kernel<<<blocks_for_rows(rows), threads, 0, s>>>(dqkv, ds, qkv, B, T, NH, G, hs);
    if ((e = cudaGetLastError()) != cudaSuccess) return (int)e;
    dkv_kernel<<<blocks_for_rows(kv_rows), threads, 0, s>>>(dqkv, ds, probs, dout, qkv, B, T, NH, G, hs);
    return (int)cudaGetLastError();
}

}  // extern "C"
