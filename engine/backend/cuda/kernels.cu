// kernels.cu — the CUDA backend's elementwise, norm, embedding, RoPE, cross-entropy, AdamW
// and reduction kernels (declared in cuda_kernels.h). Each mirrors its backend/cpu
// counterpart's arithmetic in fp32; bf16 variants load and store bf16 around fp32 math.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <float.h>

#include "backend/adamw_element.h"
#include "backend/cp_layout.h"
#include "backend/cuda/cuda_kernels.h"
#include "backend/cuda/warp.cuh"

#define GELU_SCALE 0.7978845608028654f  // sqrt(2 / pi), as backend/cpu/activations.c

namespace {

constexpr int kThreads = 256;

__device__ __forceinline__ float load(const float *p, size_t i) { return p[i]; }
__device__ __forceinline__ float load(const __nv_bfloat16 *p, size_t i) { return __bfloat162float(p[i]); }
__device__ __forceinline__ void store(float *p, size_t i, float x) { p[i] = x; }
__device__ __forceinline__ void store(__nv_bfloat16 *p, size_t i, float x) { p[i] = __float2bfloat16(x); }
__device__ __forceinline__ void store(__half *p, size_t i, float x) { p[i] = __float2half_rn(x); }


struct SumOp {
    __device__ float warp(float x) const { return warp_sum(x); }
};
struct MaxOp {
    __device__ float warp(float x) const { return warp_max(x); }
};

// A reduction over a block of kThreads threads; every thread gets the result.
template <typename Op>
__device__ float block_reduce(float x, float identity, Op op) {
    __shared__ float part[kThreads / 32];
    __shared__ float total;
    x = op.warp(x);
    if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = x;
    __syncthreads();
    if (threadIdx.x < 32) {
        float y = op.warp(threadIdx.x < kThreads / 32 ? part[threadIdx.x] : identity);
        if (threadIdx.x == 0) total = y;
    }
    __syncthreads();
    float r = total;
    __syncthreads();
    return r;
}
__device__ float block_sum(float x) { return block_reduce(x, 0.0f, SumOp()); }
__device__ float block_max(float x) { return block_reduce(x, -FLT_MAX, MaxOp()); }

unsigned blocks_for(size_t n) {
    size_t b = (n + kThreads - 1) / kThreads;
    return (unsigned)(b < 65535u * 32u ? (b ? b : 1) : 65535u * 32u);
}

int launched() { return (int)cudaGetLastError(); }

#define GRID_STRIDE(i, n) for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < (n); i += (size_t)gridDim.x * blockDim.x)

// ---------------------------------------------------------------------------------------
// norms: one block per row

template <typename T>
__global__ void layernorm_forward_kernel(T *out, float *mean, float *rstd, const T *inp, const float *w,
                                         const float *b, int C, float eps) {
    const size_t row = blockIdx.x;
    const T *x = inp + row * C;
    float s = 0.0f;
    for (int i = threadIdx.x; i < C; i += blockDim.x) s += load(x, i);
    const float m = block_sum(s) / (float)C;
    float v = 0.0f;
    for (int i = threadIdx.x; i < C; i += blockDim.x) {
        float d = load(x, i) - m;
        v += d * d;
    }
    const float r = 1.0f / sqrtf(block_sum(v) / (float)C + eps);
    for (int i = threadIdx.x; i < C; i += blockDim.x) store(out + row * C, i, (load(x, i) - m) * r * w[i] + b[i]);
    if (threadIdx.x == 0) mean[row] = m, rstd[row] = r;
}

// dinp only: the weight and bias gradients are column sums (column_sums_kernel, launched first)
__global__ void layernorm_backward_kernel(float *dinp, const float *dout, const float *inp, const float *w,
                                          const float *mean, const float *rstd, int C) {
    const size_t row = blockIdx.x;
    const float *x = inp + row * C, *dy = dout + row * C;
    const float m = mean[row], r = rstd[row];
    float a = 0.0f, c = 0.0f;
    for (int i = threadIdx.x; i < C; i += blockDim.x) {
        float dn = w[i] * dy[i];
        a += dn;
        c += dn * (x[i] - m) * r;
    }
    const float dnorm_mean = block_sum(a) / (float)C, dnorm_xhat_mean = block_sum(c) / (float)C;
    for (int i = threadIdx.x; i < C; i += blockDim.x) {
        float xhat = (x[i] - m) * r;
        dinp[row * C + i] = (w[i] * dy[i] - dnorm_mean - xhat * dnorm_xhat_mean) * r;
    }
}

template <typename T>
__global__ void rmsnorm_forward_kernel(T *out, float *rstd, const T *inp, const float *w, int C, float eps) {
    const size_t row = blockIdx.x;
    const T *x = inp + row * C;
    float s = 0.0f;
    for (int i = threadIdx.x; i < C; i += blockDim.x) s += load(x, i) * load(x, i);
    const float r = 1.0f / sqrtf(block_sum(s) / (float)C + eps);
    for (int i = threadIdx.x; i < C; i += blockDim.x) store(out + row * C, i, load(x, i) * r * w[i]);
    if (threadIdx.x == 0) rstd[row] = r;
}

__global__ void rmsnorm_backward_kernel(float *dinp, const float *dout, const float *inp, const float *w,
                                        const float *rstd, int C) {
    const size_t row = blockIdx.x;
    const float *x = inp + row * C, *dy = dout + row * C;
    const float r = rstd[row];
    float c = 0.0f;
    for (int i = threadIdx.x; i < C; i += blockDim.x) c += w[i] * dy[i] * x[i] * r;
    const float dnorm_xhat_mean = block_sum(c) / (float)C;
    for (int i = threadIdx.x; i < C; i += blockDim.x) {
        dinp[row * C + i] = (w[i] * dy[i] - x[i] * r * dnorm_xhat_mean) * r;
    }
}

// ---------------------------------------------------------------------------------------
// elementwise

template <typename T>
__global__ void gelu_forward_kernel(T *out, const T *inp, size_t n) {
    GRID_STRIDE(i, n) {
        float x = load(inp, i);
        float cube = 0.044715f * x * x * x;
        store(out, i, 0.5f * x * (1.0f + tanhf(GELU_SCALE * (x + cube))));
    }
}

__global__ void gelu_backward_kernel(float *dinp, const float *inp, const float *dout, size_t n) {
    GRID_STRIDE(i, n) {
        float x = inp[i];
        float cube = 0.044715f * x * x * x;
        float t = tanhf(GELU_SCALE * (x + cube));
        float sech2 = 1.0f - t * t;
        float grad = 0.5f * (1.0f + t) + x * 0.5f * sech2 * GELU_SCALE * (1.0f + 3.0f * 0.044715f * x * x);
        dinp[i] = grad * dout[i];
    }
}

__global__ void swiglu_forward_kernel(float *out, const float *inp, int N, int F) {
    GRID_STRIDE(i, (size_t)N * F) {
        size_t n = i / F, f = i % F;
        float g = inp[n * 2 * F + f], u = inp[n * 2 * F + F + f];
        out[i] = g / (1.0f + expf(-g)) * u;
    }
}

__global__ void swiglu_backward_kernel(float *dinp, const float *inp, const float *dout, int N, int F) {
    GRID_STRIDE(i, (size_t)N * F) {
        size_t n = i / F, f = i % F;
        float g = inp[n * 2 * F + f], u = inp[n * 2 * F + F + f];
        float sig = 1.0f / (1.0f + expf(-g));
        dinp[n * 2 * F + f] = dout[i] * u * sig * (1.0f + g * (1.0f - sig));
        dinp[n * 2 * F + F + f] = dout[i] * g * sig;
    }
}

template <typename T>
__global__ void add_kernel(T *out, const T *a, const T *b, size_t n) {
    GRID_STRIDE(i, n) store(out, i, load(a, i) + load(b, i));
}

__global__ void add_inplace_kernel(float *acc, const float *b, size_t n) {
    GRID_STRIDE(i, n) acc[i] += b[i];
}

// a column block of a (rows, stride) matrix: element i of the (rows, width) block; scatter: back in
__global__ void rows_gather_kernel(float *dst, const float *src, int width, int stride, int offset, size_t n) {
    GRID_STRIDE(i, n) dst[i] = src[(i / width) * stride + offset + i % width];
}
__global__ void rows_scatter_kernel(float *dst, const float *src, int width, int stride, int offset, size_t n) {
    GRID_STRIDE(i, n) dst[(i / width) * stride + offset + i % width] = src[i];
}

template <typename O, typename I>
__global__ void cast_kernel(O *out, const I *inp, size_t n) {
    GRID_STRIDE(i, n) store(out, i, load(inp, i));
}
// fp32 → 16-bit four elements a thread (one 16-byte load, one 8-byte store: the scalar cast
// moved ~2 of the H200's ~4 TB/s), rounded as store() rounds; the last n % 4 by the first threads
__device__ __forceinline__ uint32_t pack16(__nv_bfloat162 x) { return *reinterpret_cast<uint32_t *>(&x); }
__device__ __forceinline__ uint32_t pack16(__half2 x) { return *reinterpret_cast<uint32_t *>(&x); }
__device__ __forceinline__ uint2 cast4(__nv_bfloat16 *, float4 x) {
    return make_uint2(pack16(__floats2bfloat162_rn(x.x, x.y)), pack16(__floats2bfloat162_rn(x.z, x.w)));
}
__device__ __forceinline__ uint2 cast4(__half *, float4 x) {
    return make_uint2(pack16(__floats2half2_rn(x.x, x.y)), pack16(__floats2half2_rn(x.z, x.w)));
}
template <typename O>
__global__ void cast4_kernel(O *out, const float *inp, size_t n) {
    const size_t n4 = n / 4, first = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    GRID_STRIDE(i, n4) reinterpret_cast<uint2 *>(out)[i] = cast4(out, reinterpret_cast<const float4 *>(inp)[i]);
    if (first < n - 4 * n4) store(out, 4 * n4 + first, inp[4 * n4 + first]);
}
// out[i] = (O)inp[i]: vectorised where out is 8-byte and inp 16-byte aligned
template <typename O>
int cast_f32(O *out, const float *inp, size_t n, cudaStream_t s) {
    if ((reinterpret_cast<uintptr_t>(out) & 7) == 0 && (reinterpret_cast<uintptr_t>(inp) & 15) == 0 && n >= 4)
        cast4_kernel<<<blocks_for(n / 4), kThreads, 0, s>>>(out, inp, n);
    else
        cast_kernel<<<blocks_for(n), kThreads, 0, s>>>(out, inp, n);
    return (int)cudaGetLastError();
}

// Column sums over N rows, without atomics: one block per kColTile columns, kColTile ×
// kColRows threads; thread (ty, tx) adds the terms of rows ty, ty + kColRows, ... of column
// blockIdx.x·kColTile + tx (a warp reads one row's kColTile consecutive floats), then a
// column's kColRows partials are added in shared memory by a fixed tree, so a run's bits do not
// depend on scheduling; out_k[c] += the k-th sum (parameter gradients accumulate). Term(n, c,
// s) adds row n's K terms of column c into s[0..K-1]. The bias gradient (K 1), LayerNorm's
// weight and bias gradients (K 2) and RMSNorm's weight gradient (K 1).
constexpr int kColTile = 32, kColRows = 32;

template <int K, typename Term>
__global__ void column_sums_kernel(float *out0, float *out1, int N, int OC, Term term) {
    __shared__ float part[K][kColRows][kColTile + 1];
    const int tx = threadIdx.x, ty = threadIdx.y, col = blockIdx.x * kColTile + tx;
    float s[K];
    for (int k = 0; k < K; k++) s[k] = 0.0f;
    if (col < OC)
        for (int n = ty; n < N; n += kColRows) term(n, col, s);
    for (int k = 0; k < K; k++) part[k][ty][tx] = s[k];
    __syncthreads();
    for (int half = kColRows / 2; half > 0; half >>= 1) {
        if (ty < half)
            for (int k = 0; k < K; k++) part[k][ty][tx] += part[k][ty + half][tx];
        __syncthreads();
    }
    if (ty == 0 && col < OC) {
        out0[col] += part[0][0][tx];
        if (K > 1) out1[col] += part[K - 1][0][tx];
    }
}

struct BiasTerm {  // dbias[c] += Σ_n dout[n, c]
    const float *dout;
    int OC;
    __device__ void operator()(int n, int c, float *s) const { s[0] += dout[(size_t)n * OC + c]; }
};
struct LayerNormTerms {  // dw[c] += Σ_n x̂[n, c]·dy[n, c], db[c] += Σ_n dy[n, c]
    const float *dout, *inp, *mean, *rstd;
    int C;
    __device__ void operator()(int n, int c, float *s) const {
        const size_t at = (size_t)n * C + c;
        const float dy = dout[at];
        s[0] += (inp[at] - mean[n]) * rstd[n] * dy;
        s[1] += dy;
    }
};
struct RmsNormTerm {  // dw[c] += Σ_n x[n, c]·rstd[n]·dy[n, c]
    const float *dout, *inp, *rstd;
    int C;
    __device__ void operator()(int n, int c, float *s) const {
        const size_t at = (size_t)n * C + c;
        s[0] += inp[at] * rstd[n] * dout[at];
    }
};

template <int K, typename Term>
void column_sums(float *out0, float *out1, int N, int OC, Term term, cudaStream_t s) {
    column_sums_kernel<K><<<(OC + kColTile - 1) / kColTile, dim3(kColTile, kColRows), 0, s>>>(out0, out1, N, OC, term);
}

// out (rows, OC) += bias on every row (the row-parallel linear's bias, added after the reduce)
__global__ void add_bias_kernel(float *out, const float *bias, size_t n, int OC) {
    GRID_STRIDE(i, n) out[i] += bias[i % OC];
}

// out = inp · s
__global__ void scale_kernel(float *out, const float *inp, float s, size_t n) {
    GRID_STRIDE(i, n) out[i] = inp[i] * s;
}

// out (B,T,C) += wpe[t] (or wpe[pos[t]])
__global__ void add_positions_kernel(float *out, const float *wpe, const int32_t *pos, int BT, int T, int C) {
    GRID_STRIDE(idx, (size_t)BT * C) {
        size_t bt = idx / C;
        int c = (int)(idx % C);
        out[idx] += wpe[(size_t)(pos ? pos[bt % T] : (int)(bt % T)) * C + c];
    }
}

// ---------------------------------------------------------------------------------------
// RoPE: one thread per (row, head, pair)

__global__ void rope_kernel(float *qkv, const float *cos_t, const float *sin_t, int BT, int T, int row, int heads,
                            int hs, int dim, int interleaved, float sign) {
    const int half = dim / 2;
    GRID_STRIDE(idx, (size_t)BT * heads * half) {
        int i = (int)(idx % half);
        size_t hb = idx / half;
        int h = (int)(hb % heads);
        size_t bt = hb / heads;
        int t = (int)(bt % T);
        float *x = qkv + bt * row + (size_t)h * hs;
        float *a = x + (interleaved ? 2 * i : i), *b = a + (interleaved ? 1 : half);
        const float c = cos_t[(size_t)t * half + i], si = sign * sin_t[(size_t)t * half + i];
        const float xa = *a, xb = *b;
        *a = xa * c - xb * si;
        *b = xb * c + xa * si;
    }
}

// ---------------------------------------------------------------------------------------
// embedding

__global__ void embedding_forward_kernel(float *out, const int32_t *tokens, const float *wte, int vocab_start,
                                         int vocab_local, const float *wpe, const int32_t *pos, int BT, int T,
                                         int C) {
    GRID_STRIDE(idx, (size_t)BT * C) {
        size_t bt = idx / C;
        int c = (int)(idx % C);
        int local = tokens[bt] - vocab_start;
        float x = local >= 0 && local < vocab_local ? wte[(size_t)local * C + c] : 0.0f;
        if (wpe) x += wpe[(size_t)(pos ? pos[bt % T] : (int)(bt % T)) * C + c];
        out[idx] = x;
    }
}

__global__ void embedding_backward_kernel(float *dwte, float *dwpe, const float *dout, const int32_t *tokens,
                                          int vocab_start, int vocab_local, const int32_t *pos, int BT, int T,
                                          int C) {
    GRID_STRIDE(idx, (size_t)BT * C) {
        size_t bt = idx / C;
        int c = (int)(idx % C);
        int local = tokens[bt] - vocab_start;
        if (local >= 0 && local < vocab_local) atomicAdd(&dwte[(size_t)local * C + c], dout[idx]);
        if (dwpe) atomicAdd(&dwpe[(size_t)(pos ? pos[bt % T] : (int)(bt % T)) * C + c], dout[idx]);
    }
}

// ---------------------------------------------------------------------------------------
// cross-entropy: one block per row

__device__ int valid_columns(int Vl, int vocab_start, int V) {
    int valid = V - vocab_start;
    return valid < 0 ? 0 : valid > Vl ? Vl : valid;
}

__global__ void ce_row_max_kernel(const float *logits, float *rowmax, int Vl, int vocab_start, int V) {
    const float *row = logits + (size_t)blockIdx.x * Vl;
    const int valid = valid_columns(Vl, vocab_start, V);
    float m = -FLT_MAX;
    for (int i = threadIdx.x; i < valid; i += blockDim.x) m = fmaxf(m, row[i]);
    m = block_max(m);
    if (threadIdx.x == 0) rowmax[blockIdx.x] = m;
}

__global__ void ce_target_logit_kernel(const float *logits, const float *max, float *target, const int32_t *targets,
                                       int N, int Vl, int vocab_start) {
    int n = blockIdx.x * blockDim.x + threadIdx.x;
    if (n >= N) return;
    int local = targets[n] - vocab_start;
    target[n] = local >= 0 && local < Vl ? logits[(size_t)n * Vl + local] - max[n] : 0.0f;
}

__global__ void ce_exp_sum_kernel(float *logits, const float *max, float *sum, int Vl, int vocab_start, int V) {
    float *row = logits + (size_t)blockIdx.x * Vl;
    const int valid = valid_columns(Vl, vocab_start, V);
    const float m = max[blockIdx.x];
    float s = 0.0f;
    for (int i = threadIdx.x; i < Vl; i += blockDim.x) {
        float e = i < valid ? expf(row[i] - m) : 0.0f;
        row[i] = e;
        s += e;
    }
    s = block_sum(s);
    if (threadIdx.x == 0) sum[blockIdx.x] = s;
}

__global__ void ce_normalize_kernel(float *probs, const float *sum, const float *target, float *losses, int Vl) {
    float *row = probs + (size_t)blockIdx.x * Vl;
    const float inv = 1.0f / sum[blockIdx.x];
    for (int i = threadIdx.x; i < Vl; i += blockDim.x) row[i] *= inv;
    if (threadIdx.x == 0) losses[blockIdx.x] = logf(sum[blockIdx.x]) - target[blockIdx.x];
}

__global__ void ce_backward_kernel(float *probs, const int32_t *targets, float dloss, int Vl, int vocab_start) {
    float *row = probs + (size_t)blockIdx.x * Vl;
    const int local = targets[blockIdx.x] - vocab_start;
    for (int i = threadIdx.x; i < Vl; i += blockDim.x) row[i] = row[i] * dloss - (i == local ? dloss : 0.0f);
}

// ---------------------------------------------------------------------------------------
// AdamW and the gradient norm

__global__ void adamw_kernel(float *p, float *m, float *v, const float *g, size_t n, float grad_scale, float b1,
                             float b2, float eps, float keep, float step, float inv_sqrt_bc2) {
    GRID_STRIDE(j, n) adamw_element(p + j, m + j, v + j, g[j], grad_scale, b1, b2, eps, keep, step, inv_sqrt_bc2);
}

__global__ void sum_squares_kernel(double *out, const float *x, size_t n) {
    double s = 0.0;
    GRID_STRIDE(i, n) s += (double)x[i] * x[i];
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    if ((threadIdx.x & 31) == 0) atomicAdd(out, s);
}

// Σ x² over many segments in one launch: blockIdx.y the segment, the x blocks striding over it;
// one atomic add per warp into *out.
__global__ void sum_squares_segments_kernel(double *out, const tb_cuda_segment *segs) {
    const tb_cuda_segment g = segs[blockIdx.y];
    double s = 0.0;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < g.n; i += (size_t)gridDim.x * blockDim.x)
        s += (double)g.x[i] * g.x[i];
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    if ((threadIdx.x & 31) == 0 && s != 0.0) atomicAdd(out, s);
}

// ---------------------------------------------------------------------------------------
// Context parallelism's data movement (cpu_cp_* of backend/cpu/context_parallel.c): copies
// and one add per element, the CPU's bits. One thread per element of the K/V rows.

// kv (rows, KV) = the K and V parts (from float `off` of each row) of qkv (rows, QKV)
__global__ void cp_pack_kv_kernel(float *kv, const float *qkv, size_t rows, int QKV, int off, int KV) {
    GRID_STRIDE(i, rows * KV) kv[i] = qkv[i / KV * QKV + off + i % KV];
}

__global__ void cp_add_kv_grads_kernel(float *dqkv, const float *dkv, size_t rows, int QKV, int off, int KV) {
    GRID_STRIDE(i, rows * KV) dqkv[i / KV * QKV + off + i % KV] += dkv[i];
}

// gathered (cp, B, Tq, KV) rank-major ↔ seq (B, cp·Tq, KV) in position order (backend/cp_layout.h)
__global__ void cp_reorder_kernel(float *seq, float *gathered, int cp, int B, int Tq, int KV, int to_positions) {
    const int T = Tq * cp;
    GRID_STRIDE(i, (size_t)cp * B * Tq * KV) {
        const size_t row = i / KV;
        const int t = (int)(row % Tq), b = (int)(row / Tq % B), r = (int)(row / Tq / B);
        const size_t at = ((size_t)b * T + tb_cp_position(T, cp, r, t)) * KV + i % KV;
        if (to_positions) seq[at] = gathered[i];
        else gathered[i] = seq[at];
    }
}

// The ring's merge (cpu_cp_merge_partial): one thread per (sample, head, row) of the block,
// the same float operations as the CPU's.
__global__ void cp_merge_partial_kernel(float *out, float *lse, const float *pout, const float *plse, int B, int NH,
                                        int Tq, int row0, int rows, int hs) {
    const int C = NH * hs;
    GRID_STRIDE(i, (size_t)B * NH * rows) {
        const int r = (int)(i % rows), h = (int)(i / rows % NH), b = (int)(i / rows / NH);
        tb_cp_merge_row(out + ((size_t)b * Tq + row0 + r) * C + h * hs,
                        lse + ((size_t)b * NH + h) * Tq + row0 + r,
                        pout + ((size_t)b * rows + r) * C + h * hs, plse[((size_t)b * NH + h) * rows + r], hs);
    }
}

}  // namespace

// ---------------------------------------------------------------------------------------
// launchers (each returns 0 at once when there is nothing to do: a grid of 0 blocks is a
// launch error, and the CPU twins do nothing there)

#define BF(p) reinterpret_cast<__nv_bfloat16 *>(p)
#define CBF(p) reinterpret_cast<const __nv_bfloat16 *>(p)

extern "C" {

int cuda_layernorm_forward(float *out, float *mean, float *rstd, const float *inp, const float *weight,
                           const float *bias, int N, int C, float eps, tb_cuda_stream s) {
    if (N <= 0) return 0;
    layernorm_forward_kernel<<<N, kThreads, 0, s>>>(out, mean, rstd, inp, weight, bias, C, eps);
    return launched();
}
int cuda_layernorm_forward_bf16(tb_bf16 *out, float *mean, float *rstd, const tb_bf16 *inp, const float *weight,
                                const float *bias, int N, int C, float eps, tb_cuda_stream s) {
    if (N <= 0) return 0;
    layernorm_forward_kernel<<<N, kThreads, 0, s>>>(BF(out), mean, rstd, CBF(inp), weight, bias, C, eps);
    return launched();
}
int cuda_layernorm_backward(float *dinp, float *dweight, float *dbias, const float *dout, const float *inp,
                            const float *weight, const float *mean, const float *rstd, int N, int C,
                            tb_cuda_stream s) {
    if (N <= 0) return 0;
    // the column sums first: they read dout, which dinp may overwrite (in place)
    column_sums<2>(dweight, dbias, N, C, LayerNormTerms{dout, inp, mean, rstd, C}, s);
    int e = launched();
    if (e != 0) return e;
    layernorm_backward_kernel<<<N, kThreads, 0, s>>>(dinp, dout, inp, weight, mean, rstd, C);
    return launched();
}
int cuda_rmsnorm_forward(float *out, float *rstd, const float *inp, const float *weight, int N, int C, float eps,
                         tb_cuda_stream s) {
    if (N <= 0) return 0;
    rmsnorm_forward_kernel<<<N, kThreads, 0, s>>>(out, rstd, inp, weight, C, eps);
    return launched();
}
int cuda_rmsnorm_forward_bf16(tb_bf16 *out, float *rstd, const tb_bf16 *inp, const float *weight, int N, int C,
                              float eps, tb_cuda_stream s) {
    if (N <= 0) return 0;
    rmsnorm_forward_kernel<<<N, kThreads, 0, s>>>(BF(out), rstd, CBF(inp), weight, C, eps);
    return launched();
}
int cuda_rmsnorm_backward(float *dinp, float *dweight, const float *dout, const float *inp, const float *weight,
                          const float *rstd, int N, int C, tb_cuda_stream s) {
    if (N <= 0) return 0;
    column_sums<1>(dweight, dweight, N, C, RmsNormTerm{dout, inp, rstd, C}, s);  // before dinp (in place)
    int e = launched();
    if (e != 0) return e;
    rmsnorm_backward_kernel<<<N, kThreads, 0, s>>>(dinp, dout, inp, weight, rstd, C);
    return launched();
}

int cuda_gelu_forward(float *out, const float *inp, size_t n, tb_cuda_stream s) {
    if (n == 0) return 0;
    gelu_forward_kernel<<<blocks_for(n), kThreads, 0, s>>>(out, inp, n);
    return launched();
}
int cuda_gelu_forward_bf16(tb_bf16 *out, const tb_bf16 *inp, size_t n, tb_cuda_stream s) {
    if (n == 0) return 0;
    gelu_forward_kernel<<<blocks_for(n), kThreads, 0, s>>>(BF(out), CBF(inp), n);
    return launched();
}
int cuda_gelu_backward(float *dinp, const float *inp, const float *dout, size_t n, tb_cuda_stream s) {
    if (n == 0) return 0;
    gelu_backward_kernel<<<blocks_for(n), kThreads, 0, s>>>(dinp, inp, dout, n);
    return launched();
}
int cuda_swiglu_forward(float *out, const float *inp, int N, int F, tb_cuda_stream s) {
    if ((size_t)N * F == 0) return 0;
    swiglu_forward_kernel<<<blocks_for((size_t)N * F), kThreads, 0, s>>>(out, inp, N, F);
    return launched();
}
int cuda_swiglu_backward(float *dinp, const float *inp, const float *dout, int N, int F, tb_cuda_stream s) {
    if ((size_t)N * F == 0) return 0;
    swiglu_backward_kernel<<<blocks_for((size_t)N * F), kThreads, 0, s>>>(dinp, inp, dout, N, F);
    return launched();
}

int cuda_add(float *out, const float *a, const float *b, size_t n, tb_cuda_stream s) {
    if (n == 0) return 0;
    add_kernel<<<blocks_for(n), kThreads, 0, s>>>(out, a, b, n);
    return launched();
}
int cuda_add_bf16(tb_bf16 *out, const tb_bf16 *a, const tb_bf16 *b, size_t n, tb_cuda_stream s) {
    if (n == 0) return 0;
    add_kernel<<<blocks_for(n), kThreads, 0, s>>>(BF(out), CBF(a), CBF(b), n);
    return launched();
}
int cuda_add_inplace(float *acc, const float *b, size_t n, tb_cuda_stream s) {
    if (n == 0) return 0;
    add_inplace_kernel<<<blocks_for(n), kThreads, 0, s>>>(acc, b, n);
    return launched();
}
int cuda_rows_gather(float *dst, const float *src, int rows, int width, int stride, int offset, tb_cuda_stream s) {
    const size_t n = (size_t)rows * width;
    if (n == 0) return 0;
    rows_gather_kernel<<<blocks_for(n), kThreads, 0, s>>>(dst, src, width, stride, offset, n);
    return launched();
}
int cuda_rows_scatter(float *dst, const float *src, int rows, int width, int stride, int offset, tb_cuda_stream s) {
    const size_t n = (size_t)rows * width;
    if (n == 0) return 0;
    rows_scatter_kernel<<<blocks_for(n), kThreads, 0, s>>>(dst, src, width, stride, offset, n);
    return launched();
}
int cuda_cast_f32_to_bf16(tb_bf16 *out, const float *inp, size_t n, tb_cuda_stream s) {
    if (n == 0) return 0;
    return cast_f32(BF(out), inp, n, s);
}
int cuda_cast_f32_to_f16(tb_f16 *out, const float *inp, size_t n, tb_cuda_stream s) {
    if (n == 0) return 0;
    return cast_f32(reinterpret_cast<__half *>(out), inp, n, s);
}
int cuda_cast_bf16_to_f32(float *out, const tb_bf16 *inp, size_t n, tb_cuda_stream s) {
    if (n == 0) return 0;
    cast_kernel<<<blocks_for(n), kThreads, 0, s>>>(out, CBF(inp), n);
    return launched();
}
int cuda_bias_backward(float *dbias, const float *dout, int N, int OC, tb_cuda_stream s) {
    if (OC <= 0 || N <= 0) return 0;
    column_sums<1>(dbias, dbias, N, OC, BiasTerm{dout, OC}, s);
    return launched();
}

int cuda_rope_apply(float *qkv, const float *cos_t, const float *sin_t, int B, int T, int row, int heads, int hs,
                    int dim, int interleaved, int inverse, tb_cuda_stream s) {
    if ((size_t)B * T * heads * (dim / 2) == 0) return 0;
    rope_kernel<<<blocks_for((size_t)B * T * heads * (dim / 2)), kThreads, 0, s>>>(
        qkv, cos_t, sin_t, B * T, T, row, heads, hs, dim, interleaved, inverse ? -1.0f : 1.0f);
    return launched();
}

int cuda_embedding_forward(float *out, const int32_t *tokens, const float *wte, int vocab_start, int vocab_local,
                           const float *wpe, const int32_t *pos, int B, int T, int C, tb_cuda_stream s) {
    if ((size_t)B * T * C == 0) return 0;
    embedding_forward_kernel<<<blocks_for((size_t)B * T * C), kThreads, 0, s>>>(out, tokens, wte, vocab_start,
                                                                                vocab_local, wpe, pos, B * T, T, C);
    return launched();
}
int cuda_embedding_backward(float *dwte, float *dwpe, const float *dout, const int32_t *tokens, int vocab_start,
                            int vocab_local, const int32_t *pos, int B, int T, int C, tb_cuda_stream s) {
    if ((size_t)B * T * C == 0) return 0;
    embedding_backward_kernel<<<blocks_for((size_t)B * T * C), kThreads, 0, s>>>(
        dwte, dwpe, dout, tokens, vocab_start, vocab_local, pos, B * T, T, C);
    return launched();
}

int cuda_ce_row_max(const float *logits, float *rowmax, int N, int Vl, int vocab_start, int V, tb_cuda_stream s) {
    if (N <= 0) return 0;
    ce_row_max_kernel<<<N, kThreads, 0, s>>>(logits, rowmax, Vl, vocab_start, V);
    return launched();
}
int cuda_ce_target_logit(const float *logits, const float *max, float *target, const int32_t *targets, int N,
                         int Vl, int vocab_start, tb_cuda_stream s) {
    if (N <= 0) return 0;
    ce_target_logit_kernel<<<(N + kThreads - 1) / kThreads, kThreads, 0, s>>>(logits, max, target, targets, N, Vl,
                                                                               vocab_start);
    return launched();
}
int cuda_ce_exp_sum(float *logits, const float *max, float *sum, int N, int Vl, int vocab_start, int V,
                    tb_cuda_stream s) {
    if (N <= 0) return 0;
    ce_exp_sum_kernel<<<N, kThreads, 0, s>>>(logits, max, sum, Vl, vocab_start, V);
    return launched();
}
int cuda_ce_normalize(float *probs, const float *sum, const float *target, float *losses, int N, int Vl,
                      tb_cuda_stream s) {
    if (N <= 0) return 0;
    ce_normalize_kernel<<<N, kThreads, 0, s>>>(probs, sum, target, losses, Vl);
    return launched();
}
int cuda_cross_entropy_backward(float *probs_to_dlogits, const int32_t *targets, float dloss, int N, int Vl,
                                int vocab_start, tb_cuda_stream s) {
    if (N <= 0) return 0;
    ce_backward_kernel<<<N, kThreads, 0, s>>>(probs_to_dlogits, targets, dloss, Vl, vocab_start);
    return launched();
}

int cuda_adamw_update(float *p, float *m, float *v, const float *g, size_t n, float grad_scale, float b1, float b2,
                      float eps, float keep, float step, float inv_sqrt_bc2, tb_cuda_stream s) {
    if (n == 0) return 0;
    adamw_kernel<<<blocks_for(n), kThreads, 0, s>>>(p, m, v, g, n, grad_scale, b1, b2, eps, keep, step,
                                                    inv_sqrt_bc2);
    return launched();
}

int cuda_add_bias(float *out, const float *bias, int rows, int OC, tb_cuda_stream s) {
    const size_t n = (size_t)rows * OC;
    if (n == 0) return 0;
    add_bias_kernel<<<blocks_for(n), kThreads, 0, s>>>(out, bias, n, OC);
    return launched();
}
int cuda_scale(float *out, const float *inp, float scale, size_t n, tb_cuda_stream s) {
    if (n == 0) return 0;
    scale_kernel<<<blocks_for(n), kThreads, 0, s>>>(out, inp, scale, n);
    return launched();
}
int cuda_add_positions(float *out, const float *wpe, const int32_t *pos, int B, int T, int C, tb_cuda_stream s) {
    const size_t n = (size_t)B * T * C;
    if (n == 0 || !wpe) return 0;  // no learned positions (RoPE, none): nothing to add, as on the CPU
    add_positions_kernel<<<blocks_for(n), kThreads, 0, s>>>(out, wpe, pos, B * T, T, C);
    return launched();
}

int cuda_cp_pack_kv(float *kv, const float *qkv, int B, int Tq, int NH, int G, int hs, tb_cuda_stream s) {
    const size_t rows = (size_t)B * Tq;
    cp_pack_kv_kernel<<<blocks_for(rows * 2 * G * hs), kThreads, 0, s>>>(kv, qkv, rows, (NH + 2 * G) * hs, NH * hs,
                                                                          2 * G * hs);
    return (int)cudaGetLastError();
}

int cuda_cp_add_kv_grads(float *dqkv, const float *dkv, int B, int Tq, int NH, int G, int hs, tb_cuda_stream s) {
    const size_t rows = (size_t)B * Tq;
    cp_add_kv_grads_kernel<<<blocks_for(rows * 2 * G * hs), kThreads, 0, s>>>(dqkv, dkv, rows, (NH + 2 * G) * hs,
                                                                               NH * hs, 2 * G * hs);
    return (int)cudaGetLastError();
}

int cuda_cp_rank_major_to_positions(float *seq, const float *gathered, int cp, int B, int Tq, int KV,
                                    tb_cuda_stream s) {
    cp_reorder_kernel<<<blocks_for((size_t)cp * B * Tq * KV), kThreads, 0, s>>>(seq, (float *)gathered, cp, B, Tq, KV,
                                                                                 1);
    return (int)cudaGetLastError();
}

int cuda_cp_positions_to_rank_major(float *gathered, const float *seq, int cp, int B, int Tq, int KV,
                                    tb_cuda_stream s) {
    cp_reorder_kernel<<<blocks_for((size_t)cp * B * Tq * KV), kThreads, 0, s>>>((float *)seq, gathered, cp, B, Tq, KV,
                                                                                 0);
    return (int)cudaGetLastError();
}

int cuda_cp_merge_partial(float *out, float *lse, const float *pout, const float *plse, int B, int NH, int Tq,
                          int row0, int rows, int hs, tb_cuda_stream s) {
    const size_t n = (size_t)B * NH * rows;
    if (n == 0) return 0;
    cp_merge_partial_kernel<<<blocks_for(n), kThreads, 0, s>>>(out, lse, pout, plse, B, NH, Tq, row0, rows, hs);
    return (int)cudaGetLastError();
}

int cuda_sum_squares(double *out, const float *x, size_t n, tb_cuda_stream s) {
    if (n == 0) return 0;
    unsigned blocks = blocks_for(n);
    if (blocks > 1024) blocks = 1024;
    sum_squares_kernel<<<blocks, kThreads, 0, s>>>(out, x, n);
    return launched();
}
int cuda_sum_squares_segments(double *out, const tb_cuda_segment *segs, int nsegs, size_t longest, tb_cuda_stream s) {
    if (nsegs <= 0 || longest == 0) return 0;
    if (nsegs > 65535) return (int)cudaErrorInvalidValue;  // gridDim.y
    unsigned blocks = blocks_for(longest);
    if (blocks > 256) blocks = 256;
    sum_squares_segments_kernel<<<dim3(blocks, (unsigned)nsegs), kThreads, 0, s>>>(out, segs);
    return launched();
}

}  // extern "C"
