// cuda_kernels.h — the CUDA backend's kernels: thin extern "C" launchers over the .cu files
// of this directory (kernels.cu, attention.cu), one per kernel of backend/cpu/kernels.h used
// by the dense GPT path, with the same arguments, shapes (llm.c's letters) and conventions:
// parameter gradients ACCUMULATE, activation gradients are WRITTEN. Every pointer is device
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

#ifdef __cplusplus
extern "C" {
#endif

// cudaStream_t without cuda_runtime.h (it is `struct CUstream_st *`); NULL: the default stream
typedef struct CUstream_st *tb_cuda_stream;
typedef uint16_t tb_bf16;  // storage of one bfloat16
typedef uint16_t tb_f16;   // storage of one IEEE half (fp16)

// --- norms ----------------------------------------------------------------------------
int cuda_layernorm_forward(float *out, float *mean, float *rstd, const float *inp, const float *weight,
                           const float *bias, int N, int C, float eps, tb_cuda_stream s);
int cuda_layernorm_forward_bf16(tb_bf16 *out, float *mean, float *rstd, const tb_bf16 *inp, const float *weight,
                                const float *bias, int N, int C, float eps, tb_cuda_stream s);
int cuda_layernorm_backward(float *dinp, float *dweight, float *dbias, const float *dout, const float *inp,
                            const float *weight, const float *mean, const float *rstd, int N, int C,
                            tb_cuda_stream s);
int cuda_rmsnorm_forward(float *out, float *rstd, const float *inp, const float *weight, int N, int C, float eps,
                         tb_cuda_stream s);
int cuda_rmsnorm_forward_bf16(tb_bf16 *out, float *rstd, const tb_bf16 *inp, const float *weight, int N, int C,
                              float eps, tb_cuda_stream s);
int cuda_rmsnorm_backward(float *dinp, float *dweight, const float *dout, const float *inp, const float *weight,
                          const float *rstd, int N, int C, tb_cuda_stream s);

// --- activations ----------------------------------------------------------------------
int cuda_gelu_forward(float *out, const float *inp, size_t n, tb_cuda_stream s);
int cuda_gelu_forward_bf16(tb_bf16 *out, const tb_bf16 *inp, size_t n, tb_cuda_stream s);
int cuda_gelu_backward(float *dinp, const float *inp, const float *dout, size_t n, tb_cuda_stream s);
int cuda_swiglu_forward(float *out, const float *inp, int N, int F, tb_cuda_stream s);
int cuda_swiglu_backward(float *dinp, const float *inp, const float *dout, int N, int F, tb_cuda_stream s);

// --- residual, bias, scaling ------------------------------------------------------------
// out (rows, OC) += bias (OC) on every row
int cuda_add_bias(float *out, const float *bias, int rows, int OC, tb_cuda_stream s);
// out = inp · scale (out may be inp)
int cuda_scale(float *out, const float *inp, float scale, size_t n, tb_cuda_stream s);
int cuda_add(float *out, const float *a, const float *b, size_t n, tb_cuda_stream s);
int cuda_add_bf16(tb_bf16 *out, const tb_bf16 *a, const tb_bf16 *b, size_t n, tb_cuda_stream s);
int cuda_add_inplace(float *acc, const float *b, size_t n, tb_cuda_stream s);

// --- precision ------------------------------------------------------------------------
// bf16 compute copies of fp32 master tensors (round to nearest even), and back
int cuda_cast_f32_to_bf16(tb_bf16 *out, const float *inp, size_t n, tb_cuda_stream s);
// fp16 compute copies (--fp16; round to nearest even, overflow to ±inf: the loss scaler sees it)
int cuda_cast_f32_to_f16(tb_f16 *out, const float *inp, size_t n, tb_cuda_stream s);
int cuda_cast_bf16_to_f32(float *out, const tb_bf16 *inp, size_t n, tb_cuda_stream s);

// --- linear: what cuBLASLt does not (the GEMMs are backend/cuda/gemm.h) -----------------
// dbias (OC) += column sums of dout (N,OC)
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
// The data movement, as cpu_cp_* (exact: copies, one add per element; kernels.cu)
int cuda_cp_pack_kv(float *kv, const float *qkv, int B, int Tq, int NH, int G, int hs, tb_cuda_stream s);
int cuda_cp_add_kv_grads(float *dqkv, const float *dkv, int B, int Tq, int NH, int G, int hs, tb_cuda_stream s);
int cuda_cp_rank_major_to_positions(float *seq, const float *gathered, int cp, int B, int Tq, int KV,
                                    tb_cuda_stream s);
int cuda_cp_positions_to_rank_major(float *gathered, const float *seq, int cp, int B, int Tq, int KV,
                                    tb_cuda_stream s);
// cp_comm_type p2p (the ring), as cpu_flash_attention_block_forward / _backward: Tq query rows
// of q (qkv rows; q_batch_stride floats between samples) against Tk rows of kv (2·G·hs-float
// rows, kv_batch_stride between samples), causal by row index or every key visible; out and
// lse with out_rows rows per sample. Forward writes the block's out and lse; backward adds
// into dq (q's layout) and dkv (kv's), nothing zeroed. The merge as cpu_cp_merge_partial
// (kernels.cu: one thread per (sample, head, row)).
int cuda_flash_attention_block_forward(float *out, float *lse, const float *q, size_t q_batch_stride, const float *kv,
                                       size_t kv_batch_stride, int Tq, int Tk, int out_rows, int causal, int B, int NH,
                                       int G, int hs, tb_cuda_stream s);
int cuda_flash_attention_block_backward(float *dq, float *dkv, const float *dout, const float *out, const float *lse,
                                        const float *q, size_t q_batch_stride, const float *kv, size_t kv_batch_stride,
                                        int Tq, int Tk, int out_rows, int causal, int B, int NH, int G, int hs,
                                        tb_cuda_stream s);
int cuda_cp_merge_partial(float *out, float *lse, const float *pout, const float *plse, int B, int NH, int Tq,
                          int row0, int rows, int hs, tb_cuda_stream s);

// --- rotary position embedding --------------------------------------------------------
// as cpu_rope_apply; cos_t, sin_t (T, dim/2) from cpu_rope_tables, copied to the device
int cuda_rope_apply(float *qkv, const float *cos_t, const float *sin_t, int B, int T, int row, int heads, int hs,
                    int dim, int interleaved, int inverse, tb_cuda_stream s);

// --- embedding ------------------------------------------------------------------------
int cuda_embedding_forward(float *out, const int32_t *tokens, const float *wte, int vocab_start, int vocab_local,
                           const float *wpe, const int32_t *pos, int B, int T, int C, tb_cuda_stream s);
int cuda_embedding_backward(float *dwte, float *dwpe, const float *dout, const int32_t *tokens, int vocab_start,
                            int vocab_local, const int32_t *pos, int B, int T, int C, tb_cuda_stream s);

// out (B,T,C) += wpe[t] (wpe[pos[t]] when pos is not NULL), as cpu_add_positions
int cuda_add_positions(float *out, const float *wpe, const int32_t *pos, int B, int T, int C, tb_cuda_stream s);

// --- vocab-parallel softmax cross-entropy: the stages of cpu_ce_* -----------------------
int cuda_ce_row_max(const float *logits, float *rowmax, int N, int Vl, int vocab_start, int V, tb_cuda_stream s);
int cuda_ce_target_logit(const float *logits, const float *max, float *target, const int32_t *targets, int N,
                         int Vl, int vocab_start, tb_cuda_stream s);
int cuda_ce_exp_sum(float *logits, const float *max, float *sum, int N, int Vl, int vocab_start, int V,
                    tb_cuda_stream s);
int cuda_ce_normalize(float *probs, const float *sum, const float *target, float *losses, int N, int Vl,
                      tb_cuda_stream s);
int cuda_cross_entropy_backward(float *probs_to_dlogits, const int32_t *targets, float dloss, int N, int Vl,
                                int vocab_start, tb_cuda_stream s);

// --- optimizer ------------------------------------------------------------------------
// AdamW on n fp32 master values, as adamw_update (optimizer/optimizer.h): m, v updated,
// p = p·keep − step·m / (sqrt(v)·inv_sqrt_bc2 + eps) with g scaled by grad_scale first.
int cuda_adamw_update(float *p, float *m, float *v, const float *g, size_t n, float grad_scale, float b1, float b2,
                      float eps, float keep, float step, float inv_sqrt_bc2, tb_cuda_stream s);

// --- reductions -----------------------------------------------------------------------
// *out (one double on the device) += Σ x² (double accumulation; order not fixed)
int cuda_sum_squares(double *out, const float *x, size_t n, tb_cuda_stream s);

// --- MoE --- (moe.cu): the twins of backend/cpu/moe_kernels.h, same arguments and shapes
int cuda_moe_router_forward(const float *logits, float *scores, int32_t *topk, float *probs, int N, int E, int k,
                            int sigmoid, int pre_softmax, tb_cuda_stream s);
int cuda_moe_router_backward(float *d_logits, const float *scores, const int32_t *topk, const float *probs,
                             const float *d_probs, const int32_t *counts, int T, double aux, int N, int E, int k,
                             int sigmoid, int pre_softmax, tb_cuda_stream s);
int cuda_moe_aux_score_sums(double *col, const float *scores, int S, int T, int E, int normalise, tb_cuda_stream s);
int cuda_moe_permute(float *out, const float *inp, const int32_t *idx, int M, int C, tb_cuda_stream s);
int cuda_moe_permute_backward(float *dinp, const float *d_perm, const int32_t *pos, int N, int k, int C,
                              tb_cuda_stream s);
int cuda_moe_unpermute(float *out, const float *y, const int32_t *pos, const float *probs, int N, int k, int C,
                       tb_cuda_stream s);
int cuda_moe_unpermute_backward(float *dy, float *d_probs, const float *dout, const float *y, const int32_t *pos,
                                const float *probs, int N, int k, int C, tb_cuda_stream s);

#ifdef __cplusplus
}
#endif

#endif
