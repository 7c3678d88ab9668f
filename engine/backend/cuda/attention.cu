// attention.cu — flash-style causal grouped-query attention (FlashAttention-2's online
// softmax: nothing of size T×T is stored; forward saves each row's log-sum-exp, backward
// recomputes the probabilities from it), causal by row index (the plain core) or by each
// query's position (context parallelism's all-gather variant: the local queries against the
// whole sequence's K and V). One warp per (batch, head, query row); each lane
// holds hs/32 (rounded up) channels of q, the output accumulator and, in backward, dq.
// Simple and exact rather than fast: no tensor cores, no shared-memory tiling of K and V.
#include <cuda_runtime.h>
#include <math.h>

#include "backend/cuda/cuda_kernels.h"
#include "backend/cuda/warp.cuh"
#include "backend/flash_view.h"

namespace {

// Each lane holds P = ceil(hs / 32) channels (rounded up to 8, 16 or 32: one kernel
// instance each), so head sizes up to 32·32 = 1024; registers grow with P (the backward's three
// per-lane arrays spill beyond hs 512, slower but exact).
constexpr int kMaxHeadSize = 1024;
constexpr int kWarpsPerBlock = 4;


// The kernels read a tb_flash_view (backend/flash_view.h, the CPU kernel's layouts): the plain
// flash attention is the fused view, context parallelism's the cp view (its queries at their
// positions, K and V the sequence's own tensor). out, dout (B, Tq, NH·hs), lse (B, NH, Tq).
typedef tb_flash_view View;

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

// The last key row t attends to.
__device__ __forceinline__ int last_key(const View &v, int t) {
    return !v.causal ? v.Tk - 1 : v.qpos ? v.qpos[t] : t;
}

template <int P>
__global__ void flash_forward_kernel(float *out, float *lse, View v, int B, int NH, int G, int hs) {
    Row r;
    if (!row_of_warp(&r, B, v.Tq, NH, G)) return;
    const int lane = threadIdx.x & 31, T = v.o_rows;  // out and lse rows per sample
    const float scale = 1.0f / sqrtf((float)hs);
    const float *q = v.q + (size_t)r.b * v.qb + (size_t)r.t * v.qs + r.h * hs;
    const float *kvb = v.kv + (size_t)r.b * v.kb;
    float qr[P], acc[P];
    for (int k = 0; k < P; k++) {
        int d = lane + 32 * k;
        qr[k] = d < hs ? q[d] : 0.0f;
        acc[k] = 0.0f;
    }
    float m = -INFINITY, l = 0.0f;
    const int last = last_key(v, r.t);
    for (int j = 0; j <= last; j++) {
        const float *kj = kvb + (size_t)j * v.ks + v.k_off + r.g * hs, *vj = kvb + (size_t)j * v.ks + v.v_off + r.g * hs;
        float part = 0.0f;
        for (int k = 0; k < P; k++) {
            int d = lane + 32 * k;
            if (d < hs) part += qr[k] * kj[d];
        }
        const float s = warp_sum(part) * scale;
        const float m_new = fmaxf(m, s), corr = expf(m - m_new), p = expf(s - m_new);
        l = l * corr + p;
        for (int k = 0; k < P; k++) {
            int d = lane + 32 * k;
            if (d < hs) acc[k] = acc[k] * corr + p * vj[d];
        }
        m = m_new;
    }
    float *o = out + ((size_t)r.b * T + r.t) * NH * hs + r.h * hs;
    for (int k = 0; k < P; k++) {
        int d = lane + 32 * k;
        if (d < hs) o[d] = acc[k] / l;
    }
    if (lane == 0) lse[((size_t)r.b * NH + r.h) * T + r.t] = m + logf(l);
}

// dS_ij = P_ij (dP_ij − D_i), D_i = dO_i · O_i; dQ_i = scale Σ_j dS_ij K_j written,
// dK_j += scale dS_ij Q_i and dV_j += P_ij dO_i by atomics (the heads of a group and the rows
// of a column all add into one K, V row). dq is laid out as v's q rows, dkv as its kv rows
// (the same tensor for the fused view).
template <int P>
__global__ void flash_backward_kernel(float *dq_base, float *dkv, const float *dout, const float *out,
                                      const float *lse, View v, int B, int NH, int G, int hs) {
    Row r;
    if (!row_of_warp(&r, B, v.Tq, NH, G)) return;
    const int lane = threadIdx.x & 31, T = v.o_rows, C = NH * hs;
    const float scale = 1.0f / sqrtf((float)hs);
    const size_t qrow = (size_t)r.b * v.qb + (size_t)r.t * v.qs + r.h * hs;
    const float *q = v.q + qrow, *kvb = v.kv + (size_t)r.b * v.kb;
    float *dkvb = dkv + (size_t)r.b * v.kb;
    const float *dO = dout + ((size_t)r.b * T + r.t) * C + r.h * hs, *O = out + ((size_t)r.b * T + r.t) * C + r.h * hs;
    float qr[P], dor[P], dq[P];
    float Dpart = 0.0f;
    for (int k = 0; k < P; k++) {
        int d = lane + 32 * k;
        qr[k] = d < hs ? q[d] : 0.0f;
        dor[k] = d < hs ? dO[d] : 0.0f;
        dq[k] = 0.0f;
        if (d < hs) Dpart += dor[k] * O[d];
    }
    const float D = warp_sum(Dpart), L = lse[((size_t)r.b * NH + r.h) * T + r.t];
    const int last = last_key(v, r.t);
    for (int j = 0; j <= last; j++) {
        const size_t k_at = (size_t)j * v.ks + v.k_off + r.g * hs, v_at = (size_t)j * v.ks + v.v_off + r.g * hs;
        const float *kj = kvb + k_at, *vj = kvb + v_at;
        float *dkj = dkvb + k_at, *dvj = dkvb + v_at;
        float sp = 0.0f, dpp = 0.0f;
        for (int k = 0; k < P; k++) {
            int d = lane + 32 * k;
            if (d < hs) sp += qr[k] * kj[d], dpp += dor[k] * vj[d];
        }
        const float p = expf(warp_sum(sp) * scale - L), dp = warp_sum(dpp);
        const float ds = p * (dp - D) * scale;
        for (int k = 0; k < P; k++) {
            int d = lane + 32 * k;
            if (d < hs) {
                dq[k] += ds * kj[d];
                atomicAdd(&dkj[d], ds * qr[k]);
                atomicAdd(&dvj[d], p * dor[k]);
            }
        }
    }
    float *dqi = dq_base + qrow;  // added: zeroed first by the plain and cp launchers, the ring's blocks accumulate
    for (int k = 0; k < P; k++) {
        int d = lane + 32 * k;
        if (d < hs) dqi[d] += dq[k];
    }
}

unsigned blocks_for_rows(int B, int T, int NH) {
    size_t rows = (size_t)B * NH * T;
    return (unsigned)((rows + kWarpsPerBlock - 1) / kWarpsPerBlock);
}

bool bad_shape(int NH, int G, int hs) { return hs <= 0 || hs > kMaxHeadSize || G <= 0 || NH % G != 0; }

int forward(float *out, float *lse, const View &v, int B, int NH, int G, int hs, cudaStream_t s) {
    if (bad_shape(NH, G, hs)) return (int)cudaErrorInvalidValue;
    const unsigned grid = blocks_for_rows(B, v.Tq, NH), threads = 32 * kWarpsPerBlock;
    if (hs <= 256) flash_forward_kernel<8><<<grid, threads, 0, s>>>(out, lse, v, B, NH, G, hs);
    else if (hs <= 512) flash_forward_kernel<16><<<grid, threads, 0, s>>>(out, lse, v, B, NH, G, hs);
    else flash_forward_kernel<32><<<grid, threads, 0, s>>>(out, lse, v, B, NH, G, hs);
    return (int)cudaGetLastError();
}

// With `zero`, dq_base's q rows (B·Tq·QKV floats, the K/V parts too) and dkv (dkv_floats)
// zeroed first (dkv == dq_base for the fused view); then the kernel, which adds into both.
int backward(float *dq_base, float *dkv, size_t dkv_floats, int zero, const float *dout, const float *out,
             const float *lse, const View &v, int B, int NH, int G, int hs, cudaStream_t s) {
    if (bad_shape(NH, G, hs)) return (int)cudaErrorInvalidValue;
    cudaError_t e = zero ? cudaMemsetAsync(dq_base, 0, (size_t)B * v.qb * sizeof(float), s) : cudaSuccess;
    if (e == cudaSuccess && zero && dkv != dq_base) e = cudaMemsetAsync(dkv, 0, dkv_floats * sizeof(float), s);
    if (e != cudaSuccess) return (int)e;
    const unsigned grid = blocks_for_rows(B, v.Tq, NH), threads = 32 * kWarpsPerBlock;
    if (hs <= 256) flash_backward_kernel<8><<<grid, threads, 0, s>>>(dq_base, dkv, dout, out, lse, v, B, NH, G, hs);
    else if (hs <= 512) flash_backward_kernel<16><<<grid, threads, 0, s>>>(dq_base, dkv, dout, out, lse, v, B, NH, G, hs);
    else flash_backward_kernel<32><<<grid, threads, 0, s>>>(dq_base, dkv, dout, out, lse, v, B, NH, G, hs);
    return (int)cudaGetLastError();
}

}  // namespace

extern "C" {

int cuda_flash_attention_forward(float *out, float *lse, const float *qkv, int B, int T, int NH, int G, int hs,
                                 tb_cuda_stream s) {
    return forward(out, lse, tb_flash_view_fused(qkv, T, NH, G, hs, 1), B, NH, G, hs, s);
}

int cuda_flash_attention_backward(float *dqkv, const float *dout, const float *out, const float *qkv,
                                  const float *lse, int B, int T, int NH, int G, int hs, tb_cuda_stream s) {
    return backward(dqkv, dqkv, 0, 1, dout, out, lse, tb_flash_view_fused(qkv, T, NH, G, hs, 1), B, NH, G, hs, s);
}

int cuda_flash_attention_cp_forward(float *out, float *lse, const float *qkv, const int32_t *qpos, const float *kv,
                                    int B, int Tq, int Tk, int NH, int G, int hs, tb_cuda_stream s) {
    return forward(out, lse, tb_flash_view_cp(qkv, qpos, kv, Tq, Tk, NH, G, hs), B, NH, G, hs, s);
}

int cuda_flash_attention_cp_backward(float *dqkv, float *dkv, const float *dout, const float *out, const float *qkv,
                                     const int32_t *qpos, const float *kv, const float *lse, int B, int Tq, int Tk,
                                     int NH, int G, int hs, tb_cuda_stream s) {
    return backward(dqkv, dkv, (size_t)B * Tk * 2 * G * hs, 1, dout, out, lse,
                    tb_flash_view_cp(qkv, qpos, kv, Tq, Tk, NH, G, hs), B, NH, G, hs, s);
}

int cuda_flash_attention_block_forward(float *out, float *lse, const float *q, size_t q_batch_stride, const float *kv,
                                       size_t kv_batch_stride, int Tq, int Tk, int out_rows, int causal, int B, int NH,
                                       int G, int hs, tb_cuda_stream s) {
    return forward(out, lse, tb_flash_view_block(q, q_batch_stride, kv, kv_batch_stride, Tq, Tk, out_rows, causal, NH, G, hs),
                   B, NH, G, hs, s);
}

int cuda_flash_attention_block_backward(float *dq, float *dkv, const float *dout, const float *out, const float *lse,
                                        const float *q, size_t q_batch_stride, const float *kv, size_t kv_batch_stride,
                                        int Tq, int Tk, int out_rows, int causal, int B, int NH, int G, int hs,
                                        tb_cuda_stream s) {
    return backward(dq, dkv, 0, 0, dout, out, lse,
                    tb_flash_view_block(q, q_batch_stride, kv, kv_batch_stride, Tq, Tk, out_rows, causal, NH, G, hs), B,
                    NH, G, hs, s);
}

}  // extern "C"
