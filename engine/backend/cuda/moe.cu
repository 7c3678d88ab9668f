// moe.cu — the CUDA backend's MoE kernels (declared in cuda_kernels.h, "MoE"), the twins of
// backend/cpu/moe_kernels.c. The router's per-token arithmetic is backend/moe_row.h, shared
// with the CPU: one thread per token (E ≤ 256 experts, the row's scratch in registers / local
// memory), so its choices (top-k, ties to the lower expert) are the CPU's whenever the scores
// are; expf and fused multiply-adds may move a score by an ulp. The row gather and the
// scatters are elementwise over (row, column), each output summed in the CPU's order over its
// k choices; the probs' gradient (a dot product over C) is one warp per choice, in double.
#include <cuda_runtime.h>

#include "backend/cuda/cuda_kernels.h"
#include "backend/moe_row.h"

namespace {

constexpr int kThreads = 256;

unsigned blocks_for(size_t n) {
    size_t b = (n + kThreads - 1) / kThreads;
    return (unsigned)(b < 65535u * 32u ? (b ? b : 1) : 65535u * 32u);
}

int launched() { return (int)cudaGetLastError(); }

#define GRID_STRIDE(i, n) \
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < (n); i += (size_t)gridDim.x * blockDim.x)

__global__ void router_forward_kernel(const float *logits, float *scores, int32_t *topk, float *probs, int N, int E,
                                      int k, int sigmoid, int pre_softmax) {
    GRID_STRIDE(n, (size_t)N) {
        moe_router_row_forward(logits + n * E, scores + n * E, topk + n * k, probs + n * k, E, k, sigmoid,
                               pre_softmax);
    }
}

__global__ void router_backward_kernel(float *d_logits, const float *scores, const int32_t *topk, const float *probs,
                                       const float *d_probs, const int32_t *counts, int T, double aux, int N, int E,
                                       int k, int sigmoid, int pre_softmax) {
    GRID_STRIDE(n, (size_t)N) {
        moe_router_row_backward(d_logits + n * E, scores + n * E, topk + n * k, probs + n * k, d_probs + n * k,
                                counts + (n / T) * E, aux, E, k, sigmoid, pre_softmax);
    }
}

// one thread per (sequence, expert), its T tokens in order (the CPU's sum)
__global__ void aux_score_sums_kernel(double *col, const float *scores, int S, int T, int E, int normalise) {
    GRID_STRIDE(i, (size_t)S * E) {
        const size_t b = i / E;
        const int e = (int)(i % E);
        double c = 0;
        for (size_t n = b * T; n < (b + 1) * T; n++) c += moe_aux_score(scores + n * E, e, E, normalise);
        col[i] = c;
    }
}

__global__ void permute_kernel(float *out, const float *inp, const int32_t *idx, int M, int C) {
    GRID_STRIDE(i, (size_t)M * C) {
        const size_t r = i / C, c = i % C;
        out[i] = idx[r] < 0 ? 0.0f : inp[(size_t)idx[r] * C + c];
    }
}

__global__ void permute_backward_kernel(float *dinp, const float *d_perm, const int32_t *pos, int N, int k, int C) {
    GRID_STRIDE(i, (size_t)N * C) {
        const size_t n = i / C, c = i % C;
        float d = dinp[i];
        for (int j = 0; j < k; j++) {
            const int32_t r = pos[n * k + j];
            if (r >= 0) d += d_perm[(size_t)r * C + c];
        }
        dinp[i] = d;
    }
}

__global__ void unpermute_kernel(float *out, const float *y, const int32_t *pos, const float *probs, int N, int k,
                                 int C) {
    GRID_STRIDE(i, (size_t)N * C) {
        const size_t n = i / C, c = i % C;
        float o = 0.0f;
        for (int j = 0; j < k; j++) {
            const int32_t r = pos[n * k + j];
            if (r >= 0) o += probs[n * k + j] * y[(size_t)r * C + c];
        }
        out[i] = o;
    }
}

// one warp per choice (n, j)
__global__ void unpermute_backward_kernel(float *dy, float *d_probs, const float *dout, const float *y,
                                          const int32_t *pos, const float *probs, int N, int k, int C) {
    const size_t w = (blockIdx.x * (size_t)blockDim.x + threadIdx.x) / 32;
    const int lane = threadIdx.x & 31;
    if (w >= (size_t)N * k) return;
    const int32_t r = pos[w];
    if (r < 0) {
        if (lane == 0) d_probs[w] = 0.0f;
        return;
    }
    const float p = probs[w], *d = dout + (w / k) * C, *yr = y + (size_t)r * C;
    float *dyr = dy + (size_t)r * C;
    double dp = 0;
    for (int c = lane; c < C; c += 32) {
        dyr[c] = p * d[c];
        dp += (double)d[c] * yr[c];
    }
    for (int o = 16; o > 0; o >>= 1) dp += __shfl_xor_sync(0xffffffffu, dp, o);
    if (lane == 0) d_probs[w] = (float)dp;
}

}  // namespace

extern "C" {

int cuda_moe_router_forward(const float *logits, float *scores, int32_t *topk, float *probs, int N, int E, int k,
                            int sigmoid, int pre_softmax, tb_cuda_stream s) {
    if (N <= 0) return 0;
    router_forward_kernel<<<blocks_for((size_t)N), kThreads, 0, s>>>(logits, scores, topk, probs, N, E, k, sigmoid,
                                                                       pre_softmax);
    return launched();
}

int cuda_moe_router_backward(float *d_logits, const float *scores, const int32_t *topk, const float *probs,
                             const float *d_probs, const int32_t *counts, int T, double aux, int N, int E, int k,
                             int sigmoid, int pre_softmax, tb_cuda_stream s) {
    if (N <= 0) return 0;
    router_backward_kernel<<<blocks_for((size_t)N), kThreads, 0, s>>>(d_logits, scores, topk, probs, d_probs, counts,
                                                                        T, aux, N, E, k, sigmoid, pre_softmax);
    return launched();
}

int cuda_moe_aux_score_sums(double *col, const float *scores, int S, int T, int E, int normalise, tb_cuda_stream s) {
    if (S <= 0) return 0;
    aux_score_sums_kernel<<<blocks_for((size_t)S * E), kThreads, 0, s>>>(col, scores, S, T, E, normalise);
    return launched();
}

int cuda_moe_permute(float *out, const float *inp, const int32_t *idx, int M, int C, tb_cuda_stream s) {
    if (M <= 0) return 0;
    permute_kernel<<<blocks_for((size_t)M * C), kThreads, 0, s>>>(out, inp, idx, M, C);
    return launched();
}

int cuda_moe_permute_backward(float *dinp, const float *d_perm, const int32_t *pos, int N, int k, int C,
                              tb_cuda_stream s) {
    if (N <= 0) return 0;
    permute_backward_kernel<<<blocks_for((size_t)N * C), kThreads, 0, s>>>(dinp, d_perm, pos, N, k, C);
    return launched();
}

int cuda_moe_unpermute(float *out, const float *y, const int32_t *pos, const float *probs, int N, int k, int C,
                       tb_cuda_stream s) {
    if (N <= 0) return 0;
    unpermute_kernel<<<blocks_for((size_t)N * C), kThreads, 0, s>>>(out, y, pos, probs, N, k, C);
    return launched();
}

int cuda_moe_unpermute_backward(float *dy, float *d_probs, const float *dout, const float *y, const int32_t *pos,
                                const float *probs, int N, int k, int C, tb_cuda_stream s) {
    if (N <= 0) return 0;
    unpermute_backward_kernel<<<blocks_for((size_t)N * k * 32), kThreads, 0, s>>>(dy, d_probs, dout, y, pos, probs,
                                                                                    N, k, C);
    return launched();
}

}  // extern "C"
