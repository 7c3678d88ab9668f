// attention_tc.cu — flash attention on tensor cores: bf16 MMA (PTX mma.sync m16n8k16, fp32
// accumulation), FlashAttention-2's tiles as backend/flash_tiled.c writes them in C. That file
// is the algorithm and its test (tests/engine/test_flash_tiled.c); this one transcribes it, and
// each step's comment names the twin's. Read the twin first.
//
// Tiles: a block of 4 warps; forward and dQ take 64 query rows (16 a warp) and walk 64-row
// key/value tiles, staged fp32 → bf16 into shared memory by the whole block (16-byte loads
// where the rows allow); dK/dV take 64 keys (16 a warp) and walk every head of their group and
// every query block that sees them. A warp's scores, probabilities and gradients of a tile
// never leave its registers: mma.sync's fragment layouts are documented (PTX ISA, "Matrix
// Fragments for mma.m16n8k16"), so the softmax works on the accumulators in place (a row's
// values are spread over the 4 lanes of a quad: two shuffles reduce it) and an accumulator
// pair of n8 tiles is already the A operand of the next product (P V, dS K, Pᵀ dO, dSᵀ Q).
// The dK, dV, dQ and O accumulators stay in registers for the whole kernel: no atomics, each
// output element has one owning thread, which adds (dq, dkv) or writes (out) it once.
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

#include "backend/cuda/cuda_kernels.h"
#include "backend/cuda/warp.cuh"
#include "backend/flash_tiled.h"

namespace {

constexpr int TQ = TB_FLASH_TILE_Q, TK = TB_FLASH_TILE_K, WR = TB_FLASH_WARP_ROWS;
constexpr int kWarps = TQ / WR, kThreads = 32 * kWarps;
static_assert(TQ == TK, "the dK/dV kernel's warps own TK / kWarps keys: the same 16 rows as a query warp");
static_assert(WR == 16, "a warp's rows are one m16 MMA tile");
constexpr int NT = TK / 8;  // n8 tiles across a 64-wide tile of scores

typedef __nv_bfloat16 bf16;

// --- mma.sync m16n8k16 (bf16 × bf16 → fp32) and its fragments ----------------------------
// A lane's place in a fragment: fr = lane / 4 (its rows fr and fr + 8), fc = lane % 4 (its
// columns 2fc, 2fc + 1, and 2fc + 8, 2fc + 9 where the fragment is 16 wide).
//   A (16 × 16, row-major): a[0] = (fr, 2fc..+1), a[1] = (fr + 8, 2fc..), a[2] = (fr, 2fc + 8..),
//                           a[3] = (fr + 8, 2fc + 8..)
//   B (16 × 8, k × n):      b[0] = (k 2fc..+1, n fr), b[1] = (k 2fc + 8..+9, n fr)
//   C (16 × 8, fp32):       c[0], c[1] = (fr, 2fc..+1), c[2], c[3] = (fr + 8, 2fc..+1)
// A 32-bit register holds two bf16, the lower-indexed element in its low half.
__device__ __forceinline__ void mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
__device__ __forceinline__ uint32_t ld_pair(const bf16 *p) { return *reinterpret_cast<const uint32_t *>(p); }
__device__ __forceinline__ uint32_t pack(bf16 lo, bf16 hi) {
    return (uint32_t)__bfloat16_as_ushort(lo) | ((uint32_t)__bfloat16_as_ushort(hi) << 16);
}
__device__ __forceinline__ uint32_t pack(float lo, float hi) {  // rounded to nearest even, as __float2bfloat16
    return pack(__float2bfloat16(lo), __float2bfloat16(hi));
}
// A from a row-major bf16 matrix X (ld elements a row): rows 0..15 of X, columns k0..k0 + 15
__device__ __forceinline__ void load_a(uint32_t (&a)[4], const bf16 *X, int ld, int k0) {
    const int fr = threadIdx.x % 32 / 4, fc = threadIdx.x % 4;
    const bf16 *p = X + fr * ld + k0 + 2 * fc;
    a[0] = ld_pair(p), a[1] = ld_pair(p + 8 * ld), a[2] = ld_pair(p + 8), a[3] = ld_pair(p + 8 * ld + 8);
}
// B = Yᵀ for a row-major Y (n rows): B's column n is Y's row n0 + n, its k rows Y's columns k0..
__device__ __forceinline__ void load_bt(uint32_t &b0, uint32_t &b1, const bf16 *Y, int ld, int n0, int k0) {
    const int fr = threadIdx.x % 32 / 4, fc = threadIdx.x % 4;
    const bf16 *p = Y + (n0 + fr) * ld + k0 + 2 * fc;
    b0 = ld_pair(p), b1 = ld_pair(p + 8);
}
// B = Y for a row-major Y (k rows, in shared memory): B's k rows are Y's rows k0.., its column
// n Y's column n0 + n. A lane's pair (rows k0 + 2fc, + 1 of column n0 + fr) spans two rows:
// ldmatrix .trans gathers it (lanes 0-7 give the addresses of rows k0..k0 + 7, 8 elements from
// n0 each: b0; lanes 8-15 rows k0 + 8..: b1; each row 16-byte aligned), one instruction where
// 16-bit loads took four.
__device__ __forceinline__ void load_b(uint32_t &b0, uint32_t &b1, const bf16 *Y, int ld, int k0, int n0) {
    const bf16 *p = Y + (k0 + threadIdx.x % 16) * ld + n0;
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0, %1}, [%2];\n"
                 : "=r"(b0), "=r"(b1)
                 : "r"((unsigned)__cvta_generic_to_shared(p)));
}
// The A operand (16 rows × keys 16kc..16kc + 15) from a 16 × 64 accumulator's n8 tiles 2kc, 2kc + 1
__device__ __forceinline__ void acc_to_a(uint32_t (&a)[4], const float (&x)[NT][4], int kc) {
    a[0] = pack(x[2 * kc][0], x[2 * kc][1]), a[1] = pack(x[2 * kc][2], x[2 * kc][3]);
    a[2] = pack(x[2 * kc + 1][0], x[2 * kc + 1][1]), a[3] = pack(x[2 * kc + 1][2], x[2 * kc + 1][3]);
}
// X (16 × 64 = 8 n8 tiles) = A (the warp's 16 rows of Q, dO, K or V, HS wide) · Yᵀ (Y: 64 rows, HS wide)
template <int HT>
__device__ __forceinline__ void scores(float (&x)[NT][4], const bf16 *A, const bf16 *Y, int ld) {
#pragma unroll
    for (int n = 0; n < NT; n++) x[n][0] = x[n][1] = x[n][2] = x[n][3] = 0.0f;
#pragma unroll
    for (int kc = 0; kc < HT; kc++) {
        uint32_t a[4];
        load_a(a, A, ld, 16 * kc);
#pragma unroll
        for (int n = 0; n < NT; n++) {
            uint32_t b0, b1;
            load_bt(b0, b1, Y, ld, 8 * n, 16 * kc);
            mma(x[n], a, b0, b1);
        }
    }
}
// acc (16 × HS = 2HT n8 tiles) += X (16 × 64, an accumulator rounded to bf16) · Y (64 × HS)
template <int HT>
__device__ __forceinline__ void accumulate(float (&acc)[2 * HT][4], const float (&x)[NT][4], const bf16 *Y, int ld) {
#pragma unroll
    for (int kc = 0; kc < NT / 2; kc++) {
        uint32_t a[4];
        acc_to_a(a, x, kc);
#pragma unroll
        for (int n = 0; n < 2 * HT; n++) {
            uint32_t b0, b1;
            load_b(b0, b1, Y, ld, 16 * kc, 8 * n);
            mma(acc[n], a, b0, b1);
        }
    }
}
// The 4 lanes of a quad hold one row's values
__device__ __forceinline__ float quad_max(float x) {
    x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
    return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}
__device__ __forceinline__ float quad_sum(float x) {
    x += __shfl_xor_sync(0xffffffffu, x, 1);
    return x + __shfl_xor_sync(0xffffffffu, x, 2);
}
// A 16 × HS accumulator's element (row fr + 8·(e / 2), column 8n + 2fc + e % 2) added into the
// row-major fp32 rows at base (row r at base + r·stride), rows from `valid` on skipped
template <int HT>
__device__ __forceinline__ void add_out(float *base, size_t stride, int valid, const float (&acc)[2 * HT][4]) {
    const int fr = threadIdx.x % 32 / 4, fc = threadIdx.x % 4;
#pragma unroll
    for (int half = 0; half < 2; half++) {
        const int r = fr + 8 * half;
        if (r >= valid) continue;
        float *row = base + (size_t)r * stride + 2 * fc;
#pragma unroll
        for (int n = 0; n < 2 * HT; n++) row[8 * n] += acc[n][2 * half], row[8 * n + 1] += acc[n][2 * half + 1];
    }
}

__device__ __forceinline__ int qpos_of(const tb_flash_view &v, int i) { return v.qpos ? v.qpos[i] : i; }
__device__ __forceinline__ bool visible(const tb_flash_view &v, int i, int j) {
    return !v.causal || j <= qpos_of(v, i);
}
// twin: block_last_key (every thread computes it: the loops' bounds are the block's)
__device__ int block_last_key(const tb_flash_view &v, int i0, int nr) {
    if (!v.causal) return v.Tk - 1;
    int last = -1;
    for (int r = 0; r < nr; r++) last = max(last, qpos_of(v, i0 + r));
    return min(last, v.Tk - 1);
}

// twin: stage — 64 rows of an fp32 matrix (row stride `stride`) as bf16 rows of ldh elements;
// rows from `valid` on are zero. The whole block takes part; 16-byte loads when every row
// starts 16-byte aligned.
template <int HS>
__device__ void stage(bf16 *dst, int ldh, const float *base, size_t stride, int valid) {
    constexpr int V = HS / 4;  // float4s a row
    if (((reinterpret_cast<uintptr_t>(base) | (stride * sizeof(float))) & 15) == 0) {
#pragma unroll 4
        for (int idx = threadIdx.x; idx < TK * V; idx += kThreads) {
            const int r = idx / V, d = idx % V * 4;
            const float4 x = r < valid ? *reinterpret_cast<const float4 *>(base + (size_t)r * stride + d)
                                       : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            __nv_bfloat162 *o = reinterpret_cast<__nv_bfloat162 *>(dst + r * ldh + d);
            o[0] = __floats2bfloat162_rn(x.x, x.y), o[1] = __floats2bfloat162_rn(x.z, x.w);
        }
        return;
    }
    for (int idx = threadIdx.x; idx < TK * HS; idx += kThreads) {
        const int r = idx / HS, d = idx % HS;
        dst[r * ldh + d] = __float2bfloat16(r < valid ? base[(size_t)r * stride + d] : 0.0f);
    }
}

// Shared memory: 64-row bf16 tiles of HS + 8 elements a row (16-byte aligned rows; a quad's
// 32-bit fragment loads fall in distinct banks), in 128-byte aligned sections.
__host__ __device__ constexpr size_t up128(size_t b) { return (b + 127) / 128 * 128; }
template <int HT>
struct Layout {
    static constexpr int HS = 16 * HT, LDH = HS + 8;
    static constexpr size_t tile = up128((size_t)TQ * LDH * sizeof(bf16));
    static constexpr size_t rows = up128((size_t)TQ * sizeof(float));
    static constexpr size_t forward = 3 * tile;             // Q, K, V
    static constexpr size_t backward = 4 * tile + 2 * rows;  // Q, dO, K, V; the query block's lse and D
};

// A key/value tile's K and V rows [j0, j0 + nc) of group g, staged as bf16 (rows past nc zero).
template <int HS>
__device__ void stage_kv(bf16 *Ks, bf16 *Vs, const tb_flash_view &v, int b, int j0, int nc, int g) {
    const float *kvb = v.kv + (size_t)b * v.kb + (size_t)j0 * v.ks + (size_t)g * HS;
    stage<HS>(Ks, HS + 8, kvb + v.k_off, (size_t)v.ks, nc);
    stage<HS>(Vs, HS + 8, kvb + v.v_off, (size_t)v.ks, nc);
}

// --- forward (twin: tb_flash_tiled_forward) ----------------------------------------------
template <int HT>
__global__ void __launch_bounds__(kThreads) tc_forward_kernel(float *out, float *lse, tb_flash_view v, int NH, int G) {
    typedef Layout<HT> L;
    constexpr int HS = L::HS, LDH = L::LDH;
    extern __shared__ __align__(128) unsigned char smem[];
    bf16 *Qs = (bf16 *)smem, *Ks = (bf16 *)(smem + L::tile), *Vs = (bf16 *)(smem + 2 * L::tile);
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, fr = lane / 4, fc = lane % 4;
    const int b = blockIdx.z, h = blockIdx.y, i0 = blockIdx.x * TQ, g = h / (NH / G);
    const int nr = min(TQ, v.Tq - i0), w0 = warp * WR;  // the warp's first row in the block
    const int row[2] = {i0 + w0 + fr, i0 + w0 + fr + 8};  // this lane's two rows
    const float scale = 1.0f / sqrtf((float)HS);
    stage<HS>(Qs, LDH, v.q + (size_t)b * v.qb + (size_t)i0 * v.qs + (size_t)h * HS, (size_t)v.qs, nr);
    float o[2 * HT][4], s[NT][4], m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
    for (int n = 0; n < 2 * HT; n++) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
    const int last = block_last_key(v, i0, nr);
    for (int j0 = 0; j0 <= last; j0 += TK) {  // key tiles in order
        const int nc = min(TK, v.Tk - j0);
        __syncthreads();  // the last tile's readers are done (the first time: Q is staged)
        stage_kv<HS>(Ks, Vs, v, b, j0, nc, g);
        __syncthreads();
        scores<HT>(s, Qs + w0 * LDH, Ks, LDH);  // S = Q Kᵀ (twin: s[c] = dot(q, k))
        // the online softmax (twin: mx, m_new, corr, P, rowsum), rows fr and fr + 8
        float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
        for (int n = 0; n < NT; n++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int r = e / 2, c = 8 * n + 2 * fc + e % 2;
                const bool vis = row[r] < v.Tq && c < nc && visible(v, row[r], j0 + c);
                s[n][e] = vis ? s[n][e] * scale : -INFINITY;
                mx[r] = fmaxf(mx[r], s[n][e]);
            }
        float m_new[2], sum[2] = {0.0f, 0.0f};
#pragma unroll
        for (int r = 0; r < 2; r++) m_new[r] = fmaxf(m[r], quad_max(mx[r]));
#pragma unroll
        for (int n = 0; n < NT; n++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int r = e / 2;
                s[n][e] = s[n][e] == -INFINITY ? 0.0f : expf(s[n][e] - m_new[r]);  // P, fp32
                sum[r] += s[n][e];
            }
#pragma unroll
        for (int r = 0; r < 2; r++) {
            const float corr = m_new[r] == -INFINITY ? 1.0f : expf(m[r] - m_new[r]);  // nothing visible yet: unchanged
            l[r] = l[r] * corr + quad_sum(sum[r]);
            m[r] = m_new[r];
#pragma unroll
            for (int n = 0; n < 2 * HT; n++) o[n][2 * r] *= corr, o[n][2 * r + 1] *= corr;
        }
        accumulate<HT>(o, s, Vs, LDH);  // O = O·corr + P V (P rounded to bf16)
    }
    // out = O / l, lse = m + log l
#pragma unroll
    for (int r = 0; r < 2; r++) {
        if (row[r] >= v.Tq) continue;
        float *dst = out + ((size_t)b * v.o_rows + row[r]) * NH * HS + (size_t)h * HS + 2 * fc;
#pragma unroll
        for (int n = 0; n < 2 * HT; n++) dst[8 * n] = o[n][2 * r] / l[r], dst[8 * n + 1] = o[n][2 * r + 1] / l[r];
        if (fc == 0) lse[((size_t)b * NH + h) * v.o_rows + row[r]] = m[r] + logf(l[r]);
    }
}

// --- backward (twin: tb_flash_tiled_backward) ---------------------------------------------

// D_i = dO_i · O_i, one warp a row; D (B, NH, Tq)
__global__ void tc_dot_kernel(float *D, const float *dout, const float *out, tb_flash_view v, int B, int NH, int hs) {
    const size_t w = (blockIdx.x * (size_t)blockDim.x + threadIdx.x) / 32;
    const int lane = threadIdx.x % 32;
    if (w >= (size_t)B * NH * v.Tq) return;
    const int i = (int)(w % v.Tq), h = (int)(w / v.Tq % NH), b = (int)(w / v.Tq / NH);
    const size_t at = ((size_t)b * v.o_rows + i) * NH * hs + (size_t)h * hs;
    float s = 0.0f;
    for (int d = lane; d < hs; d += 32) s += dout[at + d] * out[at + d];
    s = warp_sum(s);
    if (lane == 0) D[w] = s;
}

// The per-row inputs of a query block: its rows' lse and D (0 past the view's rows).
__device__ void stage_rows(float *Lr, float *Dr, const float *lse, const float *D, const tb_flash_view &v, int b, int h,
                           int NH, int i0, int nr) {
    for (int r = threadIdx.x; r < TQ; r += blockDim.x) {
        Lr[r] = r < nr ? lse[((size_t)b * NH + h) * v.o_rows + i0 + r] : 0.0f;
        Dr[r] = r < nr ? D[((size_t)b * NH + h) * v.Tq + i0 + r] : 0.0f;
    }
}

// The backward kernels' shared memory (Layout::backward)
template <int HT>
struct BackwardSmem {
    bf16 *Q, *dO, *K, *V;
    float *L, *D;
    __device__ explicit BackwardSmem(unsigned char *smem) {
        typedef Layout<HT> Ly;
        Q = (bf16 *)smem, dO = (bf16 *)(smem + Ly::tile), K = (bf16 *)(smem + 2 * Ly::tile);
        V = (bf16 *)(smem + 3 * Ly::tile);
        L = (float *)(smem + 4 * Ly::tile), D = (float *)(smem + 4 * Ly::tile + Ly::rows);
    }
};

// dK, dV per (sample, group, key tile): the warp's 16 keys' accumulators in registers
template <int HT>
__global__ void __launch_bounds__(kThreads)
    tc_dkdv_kernel(float *dkv, const float *dout, const float *lse, const float *D, tb_flash_view v, int NH, int G) {
    constexpr int HS = 16 * HT, LDH = HS + 8;
    extern __shared__ __align__(128) unsigned char smem[];
    const BackwardSmem<HT> sm(smem);
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, fr = lane / 4, fc = lane % 4, w0 = warp * WR;
    const int b = blockIdx.z, g = blockIdx.y, j0 = blockIdx.x * TK, nc = min(TK, v.Tk - j0), hpg = NH / G;
    const int key[2] = {j0 + w0 + fr, j0 + w0 + fr + 8};  // this lane's two keys
    const float scale = 1.0f / sqrtf((float)HS);
    const int C = NH * HS;
    stage_kv<HS>(sm.K, sm.V, v, b, j0, nc, g);
    float dK[2 * HT][4], dV[2 * HT][4], st[NT][4], dpt[NT][4];
    for (int n = 0; n < 2 * HT; n++)
        for (int e = 0; e < 4; e++) dK[n][e] = dV[n][e] = 0.0f;
    for (int h = g * hpg; h < (g + 1) * hpg; h++)
        for (int i0 = 0; i0 < v.Tq; i0 += TQ) {
            const int nr = min(TQ, v.Tq - i0);
            if (block_last_key(v, i0, nr) < j0) continue;  // no row of the block sees the tile
            __syncthreads();
            stage<HS>(sm.Q, LDH, v.q + (size_t)b * v.qb + (size_t)i0 * v.qs + (size_t)h * HS, (size_t)v.qs, nr);
            stage<HS>(sm.dO, LDH, dout + ((size_t)b * v.o_rows + i0) * C + (size_t)h * HS, (size_t)C, nr);
            stage_rows(sm.L, sm.D, lse, D, v, b, h, NH, i0, nr);
            __syncthreads();
            // Sᵀ = K Qᵀ and dPᵀ = V dOᵀ for the warp's 16 keys × the block's 64 queries
            scores<HT>(st, sm.K + w0 * LDH, sm.Q, LDH);
            scores<HT>(dpt, sm.V + w0 * LDH, sm.dO, LDH);
            // Pᵀ and dSᵀ (twin: p = prob(...), pb, ds), in place
#pragma unroll
            for (int n = 0; n < NT; n++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const int c = 8 * n + 2 * fc + e % 2, j = key[e / 2], i = i0 + c;
                    const float p =
                        c < nr && j < v.Tk && visible(v, i, j) ? expf(st[n][e] * scale - sm.L[c]) : 0.0f;
                    st[n][e] = p;
                    dpt[n][e] = p * (dpt[n][e] - sm.D[c]) * scale;
                }
            accumulate<HT>(dV, st, sm.dO, LDH);  // dV += Pᵀ dO
            accumulate<HT>(dK, dpt, sm.Q, LDH);  // dK += dSᵀ Q
        }
    const int valid = min(WR, max(0, nc - w0));
    float *rows = dkv + (size_t)b * v.kb + (size_t)(j0 + w0) * v.ks + (size_t)g * HS;
    add_out<HT>(rows + v.k_off, (size_t)v.ks, valid, dK);
    add_out<HT>(rows + v.v_off, (size_t)v.ks, valid, dV);
}

// dQ per (sample, head, query block): the warp's 16 rows' accumulator in registers
template <int HT>
__global__ void __launch_bounds__(kThreads)
    tc_dq_kernel(float *dq_base, const float *dout, const float *lse, const float *D, tb_flash_view v, int NH, int G) {
    constexpr int HS = 16 * HT, LDH = HS + 8;
    extern __shared__ __align__(128) unsigned char smem[];
    const BackwardSmem<HT> sm(smem);
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, fr = lane / 4, fc = lane % 4, w0 = warp * WR;
    const int b = blockIdx.z, h = blockIdx.y, i0 = blockIdx.x * TQ, g = h / (NH / G), nr = min(TQ, v.Tq - i0);
    const int rloc[2] = {w0 + fr, w0 + fr + 8};  // this lane's two rows in the block
    const float scale = 1.0f / sqrtf((float)HS);
    const int C = NH * HS;
    stage<HS>(sm.Q, LDH, v.q + (size_t)b * v.qb + (size_t)i0 * v.qs + (size_t)h * HS, (size_t)v.qs, nr);
    stage<HS>(sm.dO, LDH, dout + ((size_t)b * v.o_rows + i0) * C + (size_t)h * HS, (size_t)C, nr);
    stage_rows(sm.L, sm.D, lse, D, v, b, h, NH, i0, nr);
    float dQ[2 * HT][4], s[NT][4], dp[NT][4];
    for (int n = 0; n < 2 * HT; n++) dQ[n][0] = dQ[n][1] = dQ[n][2] = dQ[n][3] = 0.0f;
    const int last = block_last_key(v, i0, nr);
    for (int j0 = 0; j0 <= last; j0 += TK) {
        const int nc = min(TK, v.Tk - j0);
        __syncthreads();
        stage_kv<HS>(sm.K, sm.V, v, b, j0, nc, g);
        __syncthreads();
        // S = Q Kᵀ and dP = dO Vᵀ for the warp's 16 rows
        scores<HT>(s, sm.Q + w0 * LDH, sm.K, LDH);
        scores<HT>(dp, sm.dO + w0 * LDH, sm.V, LDH);
        // dS (twin: p, ds), in place
#pragma unroll
        for (int n = 0; n < NT; n++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int r = rloc[e / 2], i = i0 + r, c = 8 * n + 2 * fc + e % 2, j = j0 + c;
                const float p = i < v.Tq && c < nc && visible(v, i, j) ? expf(s[n][e] * scale - sm.L[r]) : 0.0f;
                dp[n][e] = p * (dp[n][e] - sm.D[r]) * scale;
            }
        accumulate<HT>(dQ, dp, sm.K, LDH);  // dQ += dS K
    }
    add_out<HT>(dq_base + (size_t)b * v.qb + (size_t)(i0 + w0) * v.qs + (size_t)h * HS, (size_t)v.qs,
                min(WR, max(0, nr - w0)), dQ);
}

// --- launchers -------------------------------------------------------------------------

bool bad(int NH, int G, int hs) { return !tb_flash_tiled_supported(hs) || G <= 0 || NH % G != 0; }

template <int HT>
int forward_ht(float *out, float *lse, const tb_flash_view &v, int B, int NH, int G, cudaStream_t s) {
    const size_t bytes = Layout<HT>::forward;
    cudaError_t e = cudaFuncSetAttribute(tc_forward_kernel<HT>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes);
    if (e != cudaSuccess) return (int)e;
    const dim3 grid((unsigned)((v.Tq + TQ - 1) / TQ), (unsigned)NH, (unsigned)B);
    tc_forward_kernel<HT><<<grid, kThreads, bytes, s>>>(out, lse, v, NH, G);
    return (int)cudaGetLastError();
}

template <int HT>
int backward_ht(float *dq_base, float *dkv, const float *D, const float *dout, const float *lse, const tb_flash_view &v,
                int B, int NH, int G, cudaStream_t s) {
    const size_t bytes = Layout<HT>::backward;
    cudaError_t e = cudaFuncSetAttribute(tc_dkdv_kernel<HT>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes);
    if (e == cudaSuccess)
        e = cudaFuncSetAttribute(tc_dq_kernel<HT>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes);
    if (e != cudaSuccess) return (int)e;
    tc_dkdv_kernel<HT><<<dim3((unsigned)((v.Tk + TK - 1) / TK), (unsigned)G, (unsigned)B), kThreads, bytes, s>>>(
        dkv, dout, lse, D, v, NH, G);
    if ((e = cudaGetLastError()) != cudaSuccess) return (int)e;
    tc_dq_kernel<HT><<<dim3((unsigned)((v.Tq + TQ - 1) / TQ), (unsigned)NH, (unsigned)B), kThreads, bytes, s>>>(
        dq_base, dout, lse, D, v, NH, G);
    return (int)cudaGetLastError();
}

}  // namespace

extern "C" {

int cuda_flash_attention_tc_forward(float *out, float *lse, const tb_flash_view *v, int B, int NH, int G, int hs,
                                    tb_cuda_stream s) {
    if (bad(NH, G, hs)) return (int)cudaErrorInvalidValue;
    if (B <= 0 || v->Tq <= 0) return 0;
    cudaStream_t st = (cudaStream_t)s;
    switch (hs / 16) {
    case 1: return forward_ht<1>(out, lse, *v, B, NH, G, st);
    case 2: return forward_ht<2>(out, lse, *v, B, NH, G, st);
    case 3: return forward_ht<3>(out, lse, *v, B, NH, G, st);
    case 4: return forward_ht<4>(out, lse, *v, B, NH, G, st);
    case 5: return forward_ht<5>(out, lse, *v, B, NH, G, st);
    case 6: return forward_ht<6>(out, lse, *v, B, NH, G, st);
    case 7: return forward_ht<7>(out, lse, *v, B, NH, G, st);
    default: return forward_ht<8>(out, lse, *v, B, NH, G, st);
    }
}

int cuda_flash_attention_tc_backward(float *dq_base, float *dkv, float *D, const float *dout, const float *out,
                                     const float *lse, const tb_flash_view *v, int B, int NH, int G, int hs,
                                     tb_cuda_stream s) {
    if (bad(NH, G, hs)) return (int)cudaErrorInvalidValue;
    if (B <= 0 || v->Tq <= 0 || v->Tk <= 0) return 0;
    cudaStream_t st = (cudaStream_t)s;
    const size_t rows = (size_t)B * NH * v->Tq;
    tc_dot_kernel<<<(unsigned)((rows * 32 + kThreads - 1) / kThreads), kThreads, 0, st>>>(D, dout, out, *v, B, NH, hs);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return (int)e;
    switch (hs / 16) {
    case 1: return backward_ht<1>(dq_base, dkv, D, dout, lse, *v, B, NH, G, st);
    case 2: return backward_ht<2>(dq_base, dkv, D, dout, lse, *v, B, NH, G, st);
    case 3: return backward_ht<3>(dq_base, dkv, D, dout, lse, *v, B, NH, G, st);
    case 4: return backward_ht<4>(dq_base, dkv, D, dout, lse, *v, B, NH, G, st);
    case 5: return backward_ht<5>(dq_base, dkv, D, dout, lse, *v, B, NH, G, st);
    case 6: return backward_ht<6>(dq_base, dkv, D, dout, lse, *v, B, NH, G, st);
    case 7: return backward_ht<7>(dq_base, dkv, D, dout, lse, *v, B, NH, G, st);
    default: return backward_ht<8>(dq_base, dkv, D, dout, lse, *v, B, NH, G, st);
    }
}

}  // extern "C"
