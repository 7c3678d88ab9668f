// cuda_kernels.h — the CUDA backend's kernels: thin extern "C" launchers over the .cu files
// of this directory (kernels.cu, attention.cu, attention_local.cu, moe.cu): one per LAUNCH
// kernel of backend/kernel_table.h and the pieces of its OWN ones, with the table's
// arguments, shapes (llm.c's letters) and conventions: parameter gradients ACCUMULATE, activation gradients are WRITTEN. Every pointer is device
// memory; each launcher enqueues on `stream` and returns cudaGetLastError() as an int (0: ok).
//
// Precision: fp32 in and out unless the name ends in _bf16, whose tensors are bf16 (uint16_t
// storage, __nv_bfloat16 on the device) with fp32 arithmetic inside; norms' saved statistics
// (mean, rstd) and attention's lse stay fp32 (docs/ARCHITECTURE.md, "CUDA backend").
//
// Reductions across rows (norm-weight, bias, embedding gradients; attention's dK, dV) use
// atomicAdd, so those gradients are not bitwise reproducible run to run; tests compare them
// to the CPU kernels to a stated tolerance.
#ifndef TB_BACKEND_CUDA_KERNELS_H
#define TB_BACKEND_CUDA_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include "backend/flash_view.h"
#include "backend/kernel_table.h"

#ifdef __cplusplus
extern "C" {
#endif

// cudaStream_t without cuda_runtime.h (it is `struct CUstream_st *`); NULL: the default stream
typedef struct CUstream_st *tb_cuda_stream;
typedef uint16_t tb_bf16;  // storage of one bfloat16
typedef uint16_t tb_f16;   // storage of one IEEE half (fp16)

// --- the dispatch's kernels (backend/kernel_table.h) ----------------------------------------
// Every LAUNCH line of the table has its launcher here, declared from the line: the table's
// parameters and the stream, `int cuda_<name>(parameters, tb_cuda_stream stream)`, as the CPU
// kernel cpu_<name> computes (kernels.cu, moe.cu; the MoE router's per-token arithmetic is
// backend/moe_row.h's). Notes on the CUDA side of some:
//   rope_apply         cos_t, sin_t (T, dim/2) from cpu_rope_tables, copied to the device
//   cp_* data movement exact (copies, one add per element; kernels.cu)
//   cp_merge_partial   one thread per (sample, head, row)
//   adamw_update       through backend/adamw_element.h, as the CPU's
#define TB_CUDA_WITH_STREAM(...) (__VA_ARGS__, tb_cuda_stream stream)
#define TB_CUDA_LAUNCHER_LAUNCH(ret, name, params) int cuda_##name TB_CUDA_WITH_STREAM params;
#define TB_CUDA_LAUNCHER_OWN(ret, name, params)
#define TB_CUDA_LAUNCHER(side, ret, name, params, args) TB_CUDA_LAUNCHER_##side(ret, name, params)
TB_KERNEL_TABLE(TB_CUDA_LAUNCHER)
#undef TB_CUDA_LAUNCHER
#undef TB_CUDA_LAUNCHER_OWN
#undef TB_CUDA_LAUNCHER_LAUNCH
#undef TB_CUDA_WITH_STREAM

// --- bf16 variants of the norms, activations and residual -----------------------------
int cuda_layernorm_forward_bf16(tb_bf16 *out, float *mean, float *rstd, const tb_bf16 *inp, const float *weight,
                                const float *bias, int N, int C, float eps, tb_cuda_stream s);
int cuda_rmsnorm_forward_bf16(tb_bf16 *out, float *rstd, const tb_bf16 *inp, const float *weight, int N, int C,
                              float eps, tb_cuda_stream s);
int cuda_gelu_forward_bf16(tb_bf16 *out, const tb_bf16 *inp, size_t n, tb_cuda_stream s);
int cuda_add_bf16(tb_bf16 *out, const tb_bf16 *a, const tb_bf16 *b, size_t n, tb_cuda_stream s);

// --- precision ------------------------------------------------------------------------
// bf16 compute copies of fp32 master tensors (round to nearest even), and back
int cuda_cast_f32_to_bf16(tb_bf16 *out, const float *inp, size_t n, tb_cuda_stream s);
// fp16 compute copies (--fp16; round to nearest even, overflow to ±inf: the loss scaler sees it)
int cuda_cast_f32_to_f16(tb_f16 *out, const float *inp, size_t n, tb_cuda_stream s);
int cuda_cast_bf16_to_f32(float *out, const tb_bf16 *inp, size_t n, tb_cuda_stream s);

// --- the OWN kernels' pieces (cuda_backend.c) ----------------------------------------------
// dbias (OC) += column sums of dout (N,OC); what cuBLASLt does not (the GEMMs are gemm.h).
// One block per 32 columns, no atomics: the same bits every run.
int cuda_bias_backward(float *dbias, const float *dout, int N, int OC, tb_cuda_stream s);

// --- attention core: flash-style causal GQA (FlashAttention-2's online softmax) ---------
// qkv (B,T,(NH+2G)·hs) [Q heads | K groups | V groups] → out (B,T,NH·hs), lse (B,NH,T)
// as cpu_flash_attention_forward (causal by row index); hs ≤ 1024. One warp per query row.
int cuda_flash_attention_forward(float *out, float *lse, const float *qkv, int B, int T, int NH, int G, int hs,
                                 tb_cuda_stream s);
// dqkv written (zeroed first on `s`); recomputes the probabilities from lse
int cuda_flash_attention_backward(float *dqkv, const float *dout, const float *out, const float *qkv,
                                  const float *lse, int B, int T, int NH, int G, int hs, tb_cuda_stream s);

// --- the unfused ("local") core, as cpu_attention_forward / _backward (attention_local.cu) ---
// probs (B, NH, T, T): the causal softmax of scale · Q Kᵀ, zeros above the diagonal; out
// (B, T, NH·hs) = P V. Backward writes all of dqkv (B, T, (NH+2G)·hs) from dout, qkv and the
// probabilities, using ds (B, NH, T, T) for dS.
int cuda_attention_probs(float *probs, const float *qkv, int B, int T, int NH, int G, int hs, tb_cuda_stream s);
int cuda_attention_forward(float *out, const float *probs, const float *qkv, int B, int T, int NH, int G, int hs,
                           tb_cuda_stream s);
int cuda_attention_backward(float *dqkv, float *ds, const float *dout, const float *qkv, const float *probs, int B,
                            int T, int NH, int G, int hs, tb_cuda_stream s);

// --- context parallelism, cp_comm_type all_gather (transformer/context_parallel.h) -------
// As cpu_flash_attention_cp_forward / _backward: Tq queries of qkv at positions qpos (Tq,
// device) against the whole sequence's keys and values kv (B, Tk, 2·G·hs) in position order,
// causal by position (key j visible to query t iff j ≤ qpos[t]). The plain flash kernels' code
// with another view of K and V (attention.cu). Backward writes dqkv's Q part (its K and V parts
// zero) and dkv (B, Tk, 2·G·hs), both zeroed first on `s`; dK/dV by atomics.
int cuda_flash_attention_cp_forward(float *out, float *lse, const float *qkv, const int32_t *qpos, const float *kv,
                                    int B, int Tq, int Tk, int NH, int G, int hs, tb_cuda_stream s);
int cuda_flash_attention_cp_backward(float *dqkv, float *dkv, const float *dout, const float *out, const float *qkv,
                                     const int32_t *qpos, const float *kv, const float *lse, int B, int Tq, int Tk,
                                     int NH, int G, int hs, tb_cuda_stream s);
// cp_comm_type p2p (the ring), as cpu_flash_attention_block_forward / _backward: Tq query rows
// of q (qkv rows; q_batch_stride floats between samples) against Tk rows of kv (2·G·hs-float
// rows, kv_batch_stride between samples), causal by row index or every key visible; out and
// lse with out_rows rows per sample. Forward writes the block's out and lse; backward adds
// into dq (q's layout) and dkv (kv's), nothing zeroed.
int cuda_flash_attention_block_forward(float *out, float *lse, const float *q, size_t q_batch_stride, const float *kv,
                                       size_t kv_batch_stride, int Tq, int Tk, int out_rows, int causal, int B, int NH,
                                       int G, int hs, tb_cuda_stream s);
int cuda_flash_attention_block_backward(float *dq, float *dkv, const float *dout, const float *out, const float *lse,
                                        const float *q, size_t q_batch_stride, const float *kv, size_t kv_batch_stride,
                                        int Tq, int Tk, int out_rows, int causal, int B, int NH, int G, int hs,
                                        tb_cuda_stream s);

// --- attention on tensor cores (attention_tc.cu; its algorithm in C: backend/flash_tiled.h) ---
// FlashAttention-2's tiles with bf16 MMA and fp32 accumulation, on any view of
// backend/flash_view.h; head sizes tb_flash_tiled_supported (multiples of 16 up to 128).
// Forward writes the view's out and lse rows; backward ADDS into dq (the view's q rows, from
// dq_base) and dkv (its kv rows), nothing zeroed, using D (B·NH·Tq floats) as scratch; dK/dV
// and dQ by two kernels, each output row with one owner: no atomics.
int cuda_flash_attention_tc_forward(float *out, float *lse, const tb_flash_view *v, int B, int NH, int G, int hs,
                                    tb_cuda_stream s);
int cuda_flash_attention_tc_backward(float *dq_base, float *dkv, float *D, const float *dout, const float *out,
                                     const float *lse, const tb_flash_view *v, int B, int NH, int G, int hs,
                                     tb_cuda_stream s);

// *out (one double on the device) += Σ x² (double accumulation; order not fixed)
int cuda_sum_squares(double *out, const float *x, size_t n, tb_cuda_stream s);
// The same over nsegs segments (a device array; longest: the largest n) in one launch: a step's
// gradient norm over every tensor slice it counts.
typedef struct tb_cuda_segment {
    const float *x;
    size_t n;
} tb_cuda_segment;
int cuda_sum_squares_segments(double *out, const tb_cuda_segment *segs, int nsegs, size_t longest, tb_cuda_stream s);

#ifdef __cplusplus
}
#endif

#endif
