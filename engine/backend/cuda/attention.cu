// attention.cu — flash-style causal grouped-query attention (FlashAttention-2's online
// softmax: nothing of size T×T is stored; forward saves each row's log-sum-exp, backward
// recomputes the probabilities from it). One warp per (batch, head, query row); each lane
// holds hs/32 (rounded up) channels of q, the output accumulator and, in backward, dq.
// Simple and exact rather than fast: no tensor cores, no shared-memory tiling of K and V.
#include <cuda_runtime.h>
#include <math.h>

#include "backend/cuda/cuda_kernels.h"

namespace {

constexpr int kMaxPerLane = 8;  // hs ≤ 256
constexpr int kWarpsPerBlock = 4;

__device__ __forceinline__ float warp_sum(float x) {
    for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
    return x;
}

struct Row {
    int b, h, t, g;
};

__device__ bool row_of_warp(Row *r, int B, int T, int NH, int G) {
    size_t w = (blockIdx.x * (size_t)blockDim.x + threadIdx.x) / 32;
    if (w >= (size_t)B * NH * T) return false;
    r->t = (int)(w % T);
    r->h = (int)(w / T % NH);
    r->b = (int)(w / T / NH);
    r->g = r->h / (NH / G);
    return true;
}

__global__ void flash_forward_kernel(float *out, float *lse, const float *qkv, int B, int T, int NH, int G,
                                     int hs) {
    Row r;
    if (!row_of_warp(&r, B, T, NH, G)) return;
    const int lane = threadIdx.x & 31, QKV = (NH + 2 * G) * hs;
    const float scale = 1.0f / sqrtf((float)hs);
    const float *base = qkv + (size_t)r.b * T * QKV;
    const float *q = base + (size_t)r.t * QKV + r.h * hs;
    float qr[kMaxPerLane], acc[kMaxPerLane];
    for (int k = 0; k < kMaxPerLane; k++) {
        int d = lane + 32 * k;
        qr[k] = d < hs ? q[d] : 0.0f;
        acc[k] = 0.0f;
    }
    float m = -INFINITY, l = 0.0f;
    for (int j = 0; j <= r.t; j++) {
        const float *kj = base + (size_t)j * QKV + (NH + r.g) * hs, *vj = base + (size_t)j * QKV + (NH + G + r.g) * hs;
        float part = 0.0f;
        for (int k = 0; k < kMaxPerLane; k++) {
            int d = lane + 32 * k;
            if (d < hs) part += qr[k] * kj[d];
        }
        const float s = warp_sum(part) * scale;
        const float m_new = fmaxf(m, s), corr = expf(m - m_new), p = expf(s - m_new);
        l = l * corr + p;
        for (int k = 0; k < kMaxPerLane; k++) {
            int d = lane + 32 * k;
            if (d < hs) acc[k] = acc[k] * corr + p * vj[d];
        }
        m = m_new;
    }
    float *o = out + ((size_t)r.b * T + r.t) * NH * hs + r.h * hs;
    for (int k = 0; k < kMaxPerLane; k++) {
        int d = lane + 32 * k;
        if (d < hs) o[d] = acc[k] / l;
    }
    if (lane == 0) lse[((size_t)r.b * NH + r.h) * T + r.t] = m + logf(l);
}

// dS_ij = P_ij (dP_ij − D_i), D_i = dO_i · O_i; dQ_i = scale Σ_j dS_ij K_j written,
// dK_j += scale dS_ij Q_i and dV_j += P_ij dO_i by atomics (the heads of a group and the rows
// of a column all add into one K, V row).
__global__ void flash_backward_kernel(float *dqkv, const float *dout, const float *out, const float *qkv,
                                      const float *lse, int B, int T, int NH, int G, int hs) {
    Row r;
    if (!row_of_warp(&r, B, T, NH, G)) return;
    const int lane = threadIdx.x & 31, QKV = (NH + 2 * G) * hs, C = NH * hs;
    const float scale = 1.0f / sqrtf((float)hs);
    const float *base = qkv + (size_t)r.b * T * QKV;
    float *dbase = dqkv + (size_t)r.b * T * QKV;
    const float *q = base + (size_t)r.t * QKV + r.h * hs;
    const float *dO = dout + ((size_t)r.b * T + r.t) * C + r.h * hs, *O = out + ((size_t)r.b * T + r.t) * C + r.h * hs;
    float qr[kMaxPerLane], dor[kMaxPerLane], dq[kMaxPerLane];
    float Dpart = 0.0f;
    for (int k = 0; k < kMaxPerLane; k++) {
        int d = lane + 32 * k;
        qr[k] = d < hs ? q[d] : 0.0f;
        dor[k] = d < hs ? dO[d] : 0.0f;
        dq[k] = 0.0f;
        if (d < hs) Dpart += dor[k] * O[d];
    }
    const float D = warp_sum(Dpart), L = lse[((size_t)r.b * NH + r.h) * T + r.t];
    for (int j = 0; j <= r.t; j++) {
        const float *kj = base + (size_t)j * QKV + (NH + r.g) * hs, *vj = base + (size_t)j * QKV + (NH + G + r.g) * hs;
        float *dkj = dbase + (size_t)j * QKV + (NH + r.g) * hs, *dvj = dbase + (size_t)j * QKV + (NH + G + r.g) * hs;
        float sp = 0.0f, dpp = 0.0f;
        for (int k = 0; k < kMaxPerLane; k++) {
            int d = lane + 32 * k;
            if (d < hs) sp += qr[k] * kj[d], dpp += dor[k] * vj[d];
        }
        const float p = expf(warp_sum(sp) * scale - L), dp = warp_sum(dpp);
        const float ds = p * (dp - D) * scale;
        for (int k = 0; k < kMaxPerLane; k++) {
            int d = lane + 32 * k;
            if (d < hs) {
                dq[k] += ds * kj[d];
                atomicAdd(&dkj[d], ds * qr[k]);
                atomicAdd(&dvj[d], p * dor[k]);
            }
        }
    }
    float *dqi = dbase + (size_t)r.t * QKV + r.h * hs;
    for (int k = 0; k < kMaxPerLane; k++) {
        int d = lane + 32 * k;
        if (d < hs) dqi[d] = dq[k];
    }
}

unsigned blocks_for_rows(int B, int T, int NH) {
    size_t rows = (size_t)B * NH * T;
    return (unsigned)((rows + kWarpsPerBlock - 1) / kWarpsPerBlock);
}

}  // namespace

extern "C" {

int cuda_flash_attention_forward(float *out, float *lse, const float *qkv, int B, int T, int NH, int G, int hs,
                                 tb_cuda_stream s) {
    if (hs > 32 * kMaxPerLane || G <= 0 || NH % G != 0) return (int)cudaErrorInvalidValue;
    flash_forward_kernel<<<blocks_for_rows(B, T, NH), 32 * kWarpsPerBlock, 0, s>>>(out, lse, qkv, B, T, NH, G, hs);
    return (int)cudaGetLastError();
}

int cuda_flash_attention_backward(float *dqkv, const float *dout, const float *out, const float *qkv,
                                  const float *lse, int B, int T, int NH, int G, int hs, tb_cuda_stream s) {
    if (hs > 32 * kMaxPerLane || G <= 0 || NH % G != 0) return (int)cudaErrorInvalidValue;
    cudaError_t e = cudaMemsetAsync(dqkv, 0, (size_t)B * T * (NH + 2 * G) * hs * sizeof(float), s);
    if (e != cudaSuccess) return (int)e;
    flash_backward_kernel<<<blocks_for_rows(B, T, NH), 32 * kWarpsPerBlock, 0, s>>>(dqkv, dout, out, qkv, lse, B, T,
                                                                                    NH, G, hs);
    return (int)cudaGetLastError();
}

}  // extern "C"
