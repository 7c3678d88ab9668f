// attention_tc.cu — flash attention on tensor cores: bf16 MMA (WMMA 16×16×16, fp32
// accumulation), FlashAttention-2's tiles as backend/flash_tiled.c writes them in C. That file
// is the algorithm and its test (tests/engine/test_flash_tiled.c); this one transcribes it, and
// each step's comment names the twin's. Read the twin first.
//
// Tiles: a block of 4 warps; forward and dQ take 64 query rows (16 a warp) and walk 64-row
// key/value tiles, staged fp32 → bf16 into shared memory by the whole block; dK/dV take 64
// keys (16 a warp) and walk every head of their group and every query block that sees them.
// Scores, probabilities and gradients of a tile live in a warp's shared rows (WMMA's fragment
// layout is opaque, so elementwise steps go through memory); the dK, dV and dQ accumulators
// stay in registers (fragments) for the whole kernel: no atomics, each output row has one
// owner. Results are added into dq and dkv through shared memory, row by row, so no operand
// needs more than the element's alignment and no row past the view is touched.
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <mma.h>

#include "backend/cuda/cuda_kernels.h"
#include "backend/cuda/warp.cuh"
#include "backend/flash_tiled.h"

using namespace nvcuda;

namespace {

constexpr int TQ = TB_FLASH_TILE_Q, TK = TB_FLASH_TILE_K, WR = TB_FLASH_WARP_ROWS;
constexpr int kWarps = TQ / WR, kThreads = 32 * kWarps;
static_assert(TQ == TK, "the dK/dV kernel's warps own TK / kWarps keys: the same 16 rows as a query warp");
constexpr int LDS = TK + 4;  // a warp's fp32 score rows (floats; WMMA: a multiple of 4)
constexpr int LDP = TK + 8;  // a warp's bf16 P / dS rows (elements; WMMA: a multiple of 8)

typedef __nv_bfloat16 bf16;
typedef wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major> FragA;
typedef wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::row_major> FragB;
typedef wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::col_major> FragBt;  // Xᵀ of a row-major X
typedef wmma::fragment<wmma::accumulator, 16, 16, 16, float> FragC;

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

// twin: stage — rows [0, rows) of an fp32 matrix (row stride `stride`) as bf16 rows of ldh
// elements; rows from `valid` on are zero. The whole block takes part.
template <int HS>
__device__ void stage(bf16 *dst, int ldh, const float *base, size_t stride, int rows, int valid) {
    for (int idx = threadIdx.x; idx < rows * HS; idx += blockDim.x) {
        const int r = idx / HS, d = idx % HS;
        dst[r * ldh + d] = __float2bfloat16(r < valid ? base[(size_t)r * stride + d] : 0.0f);
    }
}

// C (16 × 16·N_TILES, fp32, row-major at c, ldc) = A (16 × 16·K_TILES) · B, A row-major at a
// (lda), B at b (ldb): row-major (K × N) or, Bt, a row-major N × K matrix read as its transpose.
template <int N_TILES, int K_TILES, typename FragBType>
__device__ void mma_rows(float *c, int ldc, const bf16 *a, int lda, const bf16 *b, int ldb, bool bt) {
    for (int n = 0; n < N_TILES; n++) {
        FragC acc;
        wmma::fill_fragment(acc, 0.0f);
        for (int k = 0; k < K_TILES; k++) {
            FragA fa;
            FragBType fb;
            wmma::load_matrix_sync(fa, a + k * 16, lda);
            wmma::load_matrix_sync(fb, bt ? b + n * 16 * ldb + k * 16 : b + k * 16 * ldb + n * 16, ldb);
            wmma::mma_sync(acc, fa, fb, acc);
        }
        wmma::store_matrix_sync(c + n * 16, acc, ldc, wmma::mem_row_major);
    }
}

// acc[t] += A (16 × 16·K_TILES, row-major at a, lda) · B[:, 16t .. 16t + 16) (row-major at b, ldb)
template <int HT, int K_TILES>
__device__ void mma_accumulate(FragC (&acc)[HT], const bf16 *a, int lda, const bf16 *b, int ldb) {
    for (int k = 0; k < K_TILES; k++) {
        FragA fa;
        wmma::load_matrix_sync(fa, a + k * 16, lda);
        for (int t = 0; t < HT; t++) {
            FragB fb;
            wmma::load_matrix_sync(fb, b + k * 16 * ldb + t * 16, ldb);
            wmma::mma_sync(acc[t], fa, fb, acc[t]);
        }
    }
}

// A warp's accumulators added into 16 rows of global memory (row r at rows + r·stride, those
// from `valid` on skipped), through its shared staging area f (16 × (HS + 4) floats).
template <int HT>
__device__ void add_rows(float *rows, size_t stride, int valid, FragC (&acc)[HT], float *f) {
    constexpr int HS = 16 * HT, LDO = HS + 4;
    const int lane = threadIdx.x % 32;
    for (int t = 0; t < HT; t++) wmma::store_matrix_sync(f + t * 16, acc[t], LDO, wmma::mem_row_major);
    __syncwarp();
    for (int idx = lane; idx < WR * HS; idx += 32) {
        const int r = idx / HS, d = idx % HS;
        if (r < valid) rows[(size_t)r * stride + d] += f[r * LDO + d];
    }
    __syncwarp();
}

// Shared memory, in 128-byte aligned sections (WMMA wants 32-byte aligned tile pointers).
__host__ __device__ constexpr size_t up128(size_t b) { return (b + 127) / 128 * 128; }
template <int HT>
struct Layout {
    static constexpr int HS = 16 * HT, LDH = HS + 8, LDO = HS + 4;
    static constexpr size_t tile = up128((size_t)TQ * LDH * sizeof(bf16));        // 64 rows of bf16
    static constexpr size_t scores = up128((size_t)kWarps * 2 * WR * LDS * 4);   // per warp: two fp32 16 × 64
    static constexpr size_t probs = up128((size_t)kWarps * WR * LDP * sizeof(bf16));
    static constexpr size_t out = up128((size_t)kWarps * WR * LDO * 4);
    static constexpr size_t rows = up128((size_t)TQ * 4);
    // forward: Q, K, V; S (one half of scores); P; O; m, l, corr
    static constexpr size_t forward = 3 * tile + scores + probs + out + 3 * rows;
    // backward (dK/dV and dQ): Q, dO, K, V; S/P and dP; two bf16 (Pᵀ, dSᵀ; dS); L and D
    static constexpr size_t backward = 4 * tile + scores + 2 * probs + 2 * rows;
    static_assert(2 * LDS >= LDO, "the result's staging reuses a warp's two score rows");
};

// A key/value tile's K and V rows [j0, j0 + nc) of group g, staged as bf16 (rows past nc zero).
template <int HS>
__device__ void stage_kv(bf16 *Ks, bf16 *Vs, const tb_flash_view &v, int b, int j0, int nc, int g) {
    const float *kvb = v.kv + (size_t)b * v.kb + (size_t)j0 * v.ks + (size_t)g * HS;
    stage<HS>(Ks, HS + 8, kvb + v.k_off, (size_t)v.ks, TK, nc);
    stage<HS>(Vs, HS + 8, kvb + v.v_off, (size_t)v.ks, TK, nc);
}

// The backward kernels' shared memory (Layout::backward): the Q, dO, K and V tiles; per warp two
// fp32 rows of scores (S, then P; dP) and two of bf16 (Pᵀ and dSᵀ; dS); the query block's lse
// and D.
template <int HT>
struct BackwardSmem {
    bf16 *Q, *dO, *K, *V, *b0, *b1;
    float *F, *L, *D;
    __device__ explicit BackwardSmem(unsigned char *smem) {
        typedef Layout<HT> Ly;
        Q = (bf16 *)smem, dO = (bf16 *)(smem + Ly::tile), K = (bf16 *)(smem + 2 * Ly::tile);
        V = (bf16 *)(smem + 3 * Ly::tile);
        unsigned char *at = smem + 4 * Ly::tile;
        F = (float *)at, b0 = (bf16 *)(at + Ly::scores), b1 = (bf16 *)(at + Ly::scores + Ly::probs);
        L = (float *)(at + Ly::scores + 2 * Ly::probs), D = L + TQ;
    }
};

// --- forward (twin: tb_flash_tiled_forward) ----------------------------------------------
template <int HT>
__global__ void __launch_bounds__(kThreads) tc_forward_kernel(float *out, float *lse, tb_flash_view v, int NH, int G) {
    typedef Layout<HT> L;
    constexpr int HS = L::HS, LDH = L::LDH, LDO = L::LDO;
    extern __shared__ __align__(128) unsigned char smem[];
    bf16 *Qs = (bf16 *)smem, *Ks = (bf16 *)(smem + L::tile), *Vs = (bf16 *)(smem + 2 * L::tile);
    unsigned char *at = smem + 3 * L::tile;
    float *S = (float *)at;
    bf16 *P = (bf16 *)(at + L::scores);
    float *O = (float *)(at + L::scores + L::probs);
    float *stats = (float *)(at + L::scores + L::probs + L::out);
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int b = blockIdx.z, h = blockIdx.y, i0 = blockIdx.x * TQ, g = h / (NH / G);
    const int nr = min(TQ, v.Tq - i0), w0 = warp * WR;  // the warp's first row in the block
    const float scale = 1.0f / sqrtf((float)HS);
    float *Sw = S + warp * 2 * WR * LDS, *Ow = O + warp * WR * LDO;
    bf16 *Pw = P + warp * WR * LDP;
    float *m = stats, *l = stats + TQ, *corr = stats + 2 * TQ;  // per block row
    stage<HS>(Qs, LDH, v.q + (size_t)b * v.qb + (size_t)i0 * v.qs + (size_t)h * HS, (size_t)v.qs, TQ, nr);
    for (int idx = lane; idx < WR * LDO; idx += 32) Ow[idx] = 0.0f;
    if (lane < WR) m[w0 + lane] = -INFINITY, l[w0 + lane] = 0.0f;
    const int last = block_last_key(v, i0, nr);
    for (int j0 = 0; j0 <= last; j0 += TK) {  // key tiles in order
        const int nc = min(TK, v.Tk - j0);
        __syncthreads();  // the last tile's readers are done (the first time: Q is staged)
        stage_kv<HS>(Ks, Vs, v, b, j0, nc, g);
        __syncthreads();
        // S = Q Kᵀ for the warp's 16 rows (twin: s[c] = dot(q, k))
        mma_rows<TK / 16, HT, FragBt>(Sw, LDS, Qs + w0 * LDH, LDH, Ks, LDH, true);
        __syncwarp();
        {  // the online softmax, two lanes a row, 32 columns each (twin: mx, m_new, corr, P, rowsum)
            const int r = lane / 2, c0 = (lane % 2) * (TK / 2), i = i0 + w0 + r;
            float s[TK / 2], mx = -INFINITY;
            for (int c = 0; c < TK / 2; c++) {
                const bool vis = i < v.Tq && c0 + c < nc && visible(v, i, j0 + c0 + c);
                s[c] = vis ? Sw[r * LDS + c0 + c] * scale : -INFINITY;
                mx = fmaxf(mx, s[c]);
            }
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
            const float m_old = m[w0 + r], m_new = fmaxf(m_old, mx);
            float sum = 0.0f;
            for (int c = 0; c < TK / 2; c++) {
                const float p = s[c] == -INFINITY ? 0.0f : expf(s[c] - m_new);
                Pw[r * LDP + c0 + c] = __float2bfloat16(p);
                sum += p;
            }
            sum += __shfl_xor_sync(0xffffffffu, sum, 1);
            __syncwarp();  // both lanes of the row have read m before it changes
            if (lane % 2 == 0) {
                const float cr = m_new == -INFINITY ? 1.0f : expf(m_old - m_new);  // nothing visible yet: unchanged
                l[w0 + r] = l[w0 + r] * cr + sum;
                m[w0 + r] = m_new;
                corr[w0 + r] = cr;
            }
        }
        __syncwarp();
        // O = O·corr + P V (twin: o[d] = o[d]·corr + pv)
        for (int idx = lane; idx < WR * HS; idx += 32) Ow[(idx / HS) * LDO + idx % HS] *= corr[w0 + idx / HS];
        __syncwarp();
        for (int t = 0; t < HT; t++) {
            FragC acc;
            wmma::load_matrix_sync(acc, Ow + t * 16, LDO, wmma::mem_row_major);
            for (int k = 0; k < TK / 16; k++) {
                FragA fa;
                FragB fb;
                wmma::load_matrix_sync(fa, Pw + k * 16, LDP);
                wmma::load_matrix_sync(fb, Vs + k * 16 * LDH + t * 16, LDH);
                wmma::mma_sync(acc, fa, fb, acc);
            }
            wmma::store_matrix_sync(Ow + t * 16, acc, LDO, wmma::mem_row_major);
        }
        __syncwarp();
    }
    // out = O / l, lse = m + log l
    for (int idx = lane; idx < WR * HS; idx += 32) {
        const int r = idx / HS, d = idx % HS, i = i0 + w0 + r;
        if (i < v.Tq) out[((size_t)b * v.o_rows + i) * NH * HS + (size_t)h * HS + d] = Ow[r * LDO + d] / l[w0 + r];
    }
    if (lane < WR && i0 + w0 + lane < v.Tq)
        lse[((size_t)b * NH + h) * v.o_rows + i0 + w0 + lane] = m[w0 + lane] + logf(l[w0 + lane]);
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

// dK, dV per (sample, group, key tile): the warp's 16 keys' accumulators in registers
template <int HT>
__global__ void __launch_bounds__(kThreads)
    tc_dkdv_kernel(float *dkv, const float *dout, const float *lse, const float *D, tb_flash_view v, int NH, int G) {
    constexpr int HS = 16 * HT, LDH = HS + 8;
    extern __shared__ __align__(128) unsigned char smem[];
    const BackwardSmem<HT> sm(smem);
    bf16 *Qs = sm.Q, *dOs = sm.dO, *Ks = sm.K, *Vs = sm.V;
    float *Lr = sm.L, *Dr = sm.D;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, w0 = warp * WR;
    const int b = blockIdx.z, g = blockIdx.y, j0 = blockIdx.x * TK, nc = min(TK, v.Tk - j0), hpg = NH / G;
    const float scale = 1.0f / sqrtf((float)HS);
    const int C = NH * HS;
    float *Sw = sm.F + warp * 2 * WR * LDS, *dPw = Sw + WR * LDS;
    bf16 *Ptw = sm.b0 + warp * WR * LDP, *dStw = sm.b1 + warp * WR * LDP;
    stage_kv<HS>(Ks, Vs, v, b, j0, nc, g);
    FragC dK[HT], dV[HT];
    for (int t = 0; t < HT; t++) wmma::fill_fragment(dK[t], 0.0f), wmma::fill_fragment(dV[t], 0.0f);
    for (int h = g * hpg; h < (g + 1) * hpg; h++)
        for (int i0 = 0; i0 < v.Tq; i0 += TQ) {
            const int nr = min(TQ, v.Tq - i0);
            if (block_last_key(v, i0, nr) < j0) continue;  // no row of the block sees the tile
            __syncthreads();
            stage<HS>(Qs, LDH, v.q + (size_t)b * v.qb + (size_t)i0 * v.qs + (size_t)h * HS, (size_t)v.qs, TQ, nr);
            stage<HS>(dOs, LDH, dout + ((size_t)b * v.o_rows + i0) * C + (size_t)h * HS, (size_t)C, TQ, nr);
            stage_rows(Lr, Dr, lse, D, v, b, h, NH, i0, nr);
            __syncthreads();
            // Sᵀ = K Qᵀ and dPᵀ = V dOᵀ for the warp's 16 keys × the block's 64 queries
            mma_rows<TQ / 16, HT, FragBt>(Sw, LDS, Ks + w0 * LDH, LDH, Qs, LDH, true);
            mma_rows<TQ / 16, HT, FragBt>(dPw, LDS, Vs + w0 * LDH, LDH, dOs, LDH, true);
            __syncwarp();
            // Pᵀ and dSᵀ (twin: p = prob(...), pb, ds)
            for (int idx = lane; idx < WR * TQ; idx += 32) {
                const int c = idx / TQ, r = idx % TQ, j = j0 + w0 + c, i = i0 + r;
                const float p = r < nr && j < v.Tk && visible(v, i, j) ? expf(Sw[c * LDS + r] * scale - Lr[r]) : 0.0f;
                Ptw[c * LDP + r] = __float2bfloat16(p);
                dStw[c * LDP + r] = __float2bfloat16(p * (dPw[c * LDS + r] - Dr[r]) * scale);
            }
            __syncwarp();
            mma_accumulate<HT, TQ / 16>(dV, Ptw, LDP, dOs, LDH);  // dV += Pᵀ dO
            mma_accumulate<HT, TQ / 16>(dK, dStw, LDP, Qs, LDH);  // dK += dSᵀ Q
        }
    const int valid = min(WR, max(0, nc - w0));
    add_rows<HT>(dkv + (size_t)b * v.kb + (size_t)(j0 + w0) * v.ks + v.k_off + (size_t)g * HS, (size_t)v.ks, valid, dK,
                 Sw);
    add_rows<HT>(dkv + (size_t)b * v.kb + (size_t)(j0 + w0) * v.ks + v.v_off + (size_t)g * HS, (size_t)v.ks, valid, dV,
                 Sw);
}

// dQ per (sample, head, query block): the warp's 16 rows' accumulator in registers
template <int HT>
__global__ void __launch_bounds__(kThreads)
    tc_dq_kernel(float *dq_base, const float *dout, const float *lse, const float *D, tb_flash_view v, int NH, int G) {
    constexpr int HS = 16 * HT, LDH = HS + 8;
    extern __shared__ __align__(128) unsigned char smem[];
    const BackwardSmem<HT> sm(smem);
    bf16 *Qs = sm.Q, *dOs = sm.dO, *Ks = sm.K, *Vs = sm.V;
    float *Lr = sm.L, *Dr = sm.D;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, w0 = warp * WR;
    const int b = blockIdx.z, h = blockIdx.y, i0 = blockIdx.x * TQ, g = h / (NH / G), nr = min(TQ, v.Tq - i0);
    const float scale = 1.0f / sqrtf((float)HS);
    const int C = NH * HS;
    float *Sw = sm.F + warp * 2 * WR * LDS, *dPw = Sw + WR * LDS;
    bf16 *dSw = sm.b0 + warp * WR * LDP;
    stage<HS>(Qs, LDH, v.q + (size_t)b * v.qb + (size_t)i0 * v.qs + (size_t)h * HS, (size_t)v.qs, TQ, nr);
    stage<HS>(dOs, LDH, dout + ((size_t)b * v.o_rows + i0) * C + (size_t)h * HS, (size_t)C, TQ, nr);
    stage_rows(Lr, Dr, lse, D, v, b, h, NH, i0, nr);
    FragC dQ[HT];
    for (int t = 0; t < HT; t++) wmma::fill_fragment(dQ[t], 0.0f);
    const int last = block_last_key(v, i0, nr);
    for (int j0 = 0; j0 <= last; j0 += TK) {
        const int nc = min(TK, v.Tk - j0);
        __syncthreads();
        stage_kv<HS>(Ks, Vs, v, b, j0, nc, g);
        __syncthreads();
        // S = Q Kᵀ and dP = dO Vᵀ for the warp's 16 rows
        mma_rows<TK / 16, HT, FragBt>(Sw, LDS, Qs + w0 * LDH, LDH, Ks, LDH, true);
        mma_rows<TK / 16, HT, FragBt>(dPw, LDS, dOs + w0 * LDH, LDH, Vs, LDH, true);
        __syncwarp();
        // dS (twin: p, ds)
        for (int idx = lane; idx < WR * TK; idx += 32) {
            const int r = idx / TK, c = idx % TK, i = i0 + w0 + r, j = j0 + c;
            const float p = i < v.Tq && c < nc && visible(v, i, j) ? expf(Sw[r * LDS + c] * scale - Lr[w0 + r]) : 0.0f;
            dSw[r * LDP + c] = __float2bfloat16(p * (dPw[r * LDS + c] - Dr[w0 + r]) * scale);
        }
        __syncwarp();
        mma_accumulate<HT, TK / 16>(dQ, dSw, LDP, Ks, LDH);  // dQ += dS K
    }
    add_rows<HT>(dq_base + (size_t)b * v.qb + (size_t)(i0 + w0) * v.qs + (size_t)h * HS, (size_t)v.qs,
                 min(WR, max(0, nr - w0)), dQ, Sw);
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
