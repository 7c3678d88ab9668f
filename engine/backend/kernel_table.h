// kernel_table.h — every kernel of the dispatch, written once (docs/ARCHITECTURE.md, "Adding a
// kernel"). One line per kernel:
//
//     X(CUDA_SIDE, return type, name, (parameters), (arguments))
//
// and from the list, by macros, never by hand:
//   backend.h               the kernel's field of tb_backend, `ret (*name)(parameters)`
//   backend/cpu/kernels.h   the CPU kernel's declaration, `ret cpu_<name>(parameters)`
//                           (its definition is in backend/cpu/: kernels.c, activations.c, ...)
//   cpu_backend.c           the CPU table's entry, `.name = cpu_<name>`
//   backend/cuda/           CUDA_SIDE says what the CUDA table's entry is:
//     LAUNCH  the launcher `int cuda_<name>(parameters, tb_cuda_stream)` of a .cu file,
//             declared in cuda_kernels.h from this line; cuda_backend.c enqueues it on the
//             thread's stream and fails the rank on its error — nothing written there;
//     OWN     cuda_backend.c's own `cu_<name>`, declared from this line (the GEMMs through
//             cuBLASLt, kernels that take workspace or read a result back).
// The arguments are the parameters' names, in order (what a LAUNCH entry passes on).
//
// Shapes use llm.c's letters: N = B·T rows (tokens), C channels, OC output channels, F MLP
// hidden, NH heads, G query groups (key/value heads), hs head size, V vocab, Vl a vocab
// shard; MoE: E experts, k choices per token. Gradients of parameters ACCUMULATE (+=);
// gradients of activations are WRITTEN (=). Every pointer is a tensor of the backend unless
// said otherwise.
#ifndef TB_BACKEND_KERNEL_TABLE_H
#define TB_BACKEND_KERNEL_TABLE_H

#include <stddef.h>
#include <stdint.h>

struct cpu_flash_block;  // backend/cpu/kernels.h: one block of the context-parallel ring

#define TB_KERNEL_TABLE(X)                                                                                            \
    /* --- linear: out = inp @ weight^T + bias ---                                                                    \
       inp (N,C), weight (OC,C), bias (OC) or NULL → out (N,OC); backward: dinp (N,C) written (unless NULL),          \
       dweight and dbias (NULL: none) accumulated. GEMMs: OpenBLAS sgemm on cpu, cuBLASLt on cuda */                   \
    X(OWN, void, matmul_forward,                                                                                      \
      (float *out, const float *inp, const float *weight, const float *bias, int N, int C, int OC),                    \
      (out, inp, weight, bias, N, C, OC))                                                                             \
    X(OWN, void, matmul_backward,                                                                                     \
      (float *dinp, float *dweight, float *dbias, const float *dout, const float *inp, const float *weight, int N,    \
       int C, int OC),                                                                                                 \
      (dinp, dweight, dbias, dout, inp, weight, N, C, OC))                                                            \
    /* out (rows, OC) += bias (OC) on every row; dbias (OC) += column sums of dout's first rows rows */               \
    X(LAUNCH, void, add_bias, (float *out, const float *bias, int rows, int OC), (out, bias, rows, OC))              \
    X(OWN, void, bias_backward, (float *dbias, const float *dout, int rows, int OC), (dbias, dout, rows, OC))        \
    /* --- norms ---                                                                                                  \
       LayerNorm: out = (inp − mean)·rstd·weight + bias, saves mean (N) and rstd (N);                                 \
       RMSNorm: out = inp·rstd·weight, rstd = 1 / sqrt(mean(inp²) + eps), saves rstd (N) */                          \
    X(LAUNCH, void, layernorm_forward,                                                                                \
      (float *out, float *mean, float *rstd, const float *inp, const float *weight, const float *bias, int N, int C,  \
       float eps),                                                                                                     \
      (out, mean, rstd, inp, weight, bias, N, C, eps))                                                                \
    X(LAUNCH, void, layernorm_backward,                                                                               \
      (float *dinp, float *dweight, float *dbias, const float *dout, const float *inp, const float *weight,           \
       const float *mean, const float *rstd, int N, int C),                                                            \
      (dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C))                                                    \
    X(LAUNCH, void, rmsnorm_forward,                                                                                  \
      (float *out, float *rstd, const float *inp, const float *weight, int N, int C, float eps),                      \
      (out, rstd, inp, weight, N, C, eps))                                                                            \
    X(LAUNCH, void, rmsnorm_backward,                                                                                 \
      (float *dinp, float *dweight, const float *dout, const float *inp, const float *weight, const float *rstd,      \
       int N, int C),                                                                                                  \
      (dinp, dweight, dout, inp, weight, rstd, N, C))                                                                 \
    /* --- activations: GELU (tanh approximation) over n values; SwiGLU: inp (N, 2F) = [gate | up] →                 \
       out (N, F) = silu(gate)·up --- */                                                                               \
    X(LAUNCH, void, gelu_forward, (float *out, const float *inp, size_t n), (out, inp, n))                            \
    X(LAUNCH, void, gelu_backward, (float *dinp, const float *inp, const float *dout, size_t n), (dinp, inp, dout, n)) \
    X(LAUNCH, void, swiglu_forward, (float *out, const float *inp, int N, int F), (out, inp, N, F))                  \
    X(LAUNCH, void, swiglu_backward, (float *dinp, const float *inp, const float *dout, int N, int F),                \
      (dinp, inp, dout, N, F))                                                                                         \
    /* --- residual: out = a + b; acc += b; out = inp·s (out may be inp) --- */                                       \
    X(LAUNCH, void, add, (float *out, const float *a, const float *b, size_t n), (out, a, b, n))                      \
    X(LAUNCH, void, add_inplace, (float *acc, const float *b, size_t n), (acc, b, n))                                 \
    X(LAUNCH, void, scale, (float *out, const float *inp, float s, size_t n), (out, inp, s, n))                       \
    /* --- a column block of a (rows, stride) matrix as a tensor of its own (rows, width): columns                    \
       [offset, offset + width) of each row; rows_gather copies them out, rows_scatter back in --- */                  \
    X(LAUNCH, void, rows_gather, (float *dst, const float *src, int rows, int width, int stride, int offset),         \
      (dst, src, rows, width, stride, offset))                                                                        \
    X(LAUNCH, void, rows_scatter, (float *dst, const float *src, int rows, int width, int stride, int offset),        \
      (dst, src, rows, width, stride, offset))                                                                        \
    /* --- attention core, unfused ("local") ---                                                                      \
       Causal grouped-query attention over a fused qkv (B,T,(NH+2G)·hs) laid out [Q heads | K groups | V groups];    \
       head h reads key/value group h / (NH/G); out (B,T,NH·hs). probs (B,NH,T,T) saved for backward, or NULL: the    \
       probabilities live in scratch (T·T floats on cpu; 2·T·T in backward) and backward recomputes them bit for bit  \
       (selective recompute). Backward writes dqkv (B,T,(NH+2G)·hs). */                                               \
    X(OWN, void, attention_forward,                                                                                   \
      (float *out, float *probs, float *scratch, const float *qkv, int B, int T, int NH, int G, int hs),              \
      (out, probs, scratch, qkv, B, T, NH, G, hs))                                                                    \
    X(OWN, void, attention_backward,                                                                                  \
      (float *dqkv, float *scratch, const float *dout, const float *qkv, const float *probs, int B, int T, int NH,    \
       int G, int hs),                                                                                                 \
      (dqkv, scratch, dout, qkv, probs, B, T, NH, G, hs))                                                             \
    /* --- attention core, flash (FlashAttention-2's online softmax; causal) ---                                      \
       out (B,T,NH·hs) and lse (B,NH,T), each row's log-sum-exp of its scaled scores: all it saves. Backward          \
       recomputes each block's probabilities from lse and reads forward's out; dqkv written. scratch:                 \
       cpu_flash_attention_scratch_floats(T, hs, threads) floats; at most `threads` OpenMP threads (the CUDA kernels  \
       ignore both). Results do not depend on the thread count. */                                                     \
    X(OWN, void, flash_attention_forward,                                                                             \
      (float *out, float *lse, float *scratch, int threads, const float *qkv, int B, int T, int NH, int G, int hs),   \
      (out, lse, scratch, threads, qkv, B, T, NH, G, hs))                                                             \
    X(OWN, void, flash_attention_backward,                                                                            \
      (float *dqkv, float *scratch, int threads, const float *dout, const float *out, const float *qkv,               \
       const float *lse, int B, int T, int NH, int G, int hs),                                                         \
      (dqkv, scratch, threads, dout, out, qkv, lse, B, T, NH, G, hs))                                                 \
    /* Rotates the first `dim` channels of each of the first `heads` heads of every row of a fused qkv (B·T rows of    \
       `row` floats; heads hs wide from the row's start: the Q heads, then the K groups), row b·T + t by position t;  \
       tables cos_t, sin_t (T, dim/2) from cpu_rope_tables. Pairs (i, i + dim/2), Megatron's rotate_half, or          \
       (2i, 2i+1) when interleaved; inverse rotates by −angle (the transpose: a gradient back to unrotated q, k). */    \
    X(LAUNCH, void, rope_apply,                                                                                       \
      (float *qkv, const float *cos_t, const float *sin_t, int B, int T, int row, int heads, int hs, int dim,         \
       int interleaved, int inverse),                                                                                  \
      (qkv, cos_t, sin_t, B, T, row, heads, hs, dim, interleaved, inverse))                                           \
    /* --- context parallelism, cp_comm_type all_gather (transformer/context_parallel.h) ---                          \
       This rank's queries — Tq rows of qkv at global positions qpos (Tq, a tensor) — against the whole sequence's    \
       keys and values kv (B, Tk, 2·G·hs: [K groups | V groups]) in position order, causal by position. out          \
       (B,Tq,NH·hs), lse (B,NH,Tq); backward writes dqkv's Q part (its K and V parts zero) and dkv (B, Tk, 2·G·hs),    \
       the gradient at every key and value from this rank's queries (the caller sums it over the ranks). scratch:     \
       cpu_flash_attention_scratch_floats(Tk, hs, threads) floats. */                                                  \
    X(OWN, void, flash_attention_cp_forward,                                                                          \
      (float *out, float *lse, float *scratch, int threads, const float *qkv, const int32_t *qpos, const float *kv,  \
       int B, int Tq, int Tk, int NH, int G, int hs),                                                                  \
      (out, lse, scratch, threads, qkv, qpos, kv, B, Tq, Tk, NH, G, hs))                                              \
    X(OWN, void, flash_attention_cp_backward,                                                                         \
      (float *dqkv, float *dkv, float *scratch, int threads, const float *dout, const float *out, const float *qkv,   \
       const int32_t *qpos, const float *kv, const float *lse, int B, int Tq, int Tk, int NH, int G, int hs),         \
      (dqkv, dkv, scratch, threads, dout, out, qkv, qpos, kv, lse, B, Tq, Tk, NH, G, hs))                             \
    /* Its data movement (exact: copies, one add per element), kv rows 2·G·hs floats, qkv rows (NH+2G)·hs:            \
         cp_pack_kv                   kv (B, Tq, KV) = the K and V parts of qkv (B, Tq, QKV)                          \
         cp_add_kv_grads              dqkv's K and V parts += dkv (B, Tq, KV)                                         \
         cp_rank_major_to_positions   the all-gathered rows (cp, B, Tq, KV), rank-major, into the sequence in         \
                                      position order seq (B, cp·Tq, KV) (backend/cp_layout.h)                         \
         cp_positions_to_rank_major   the reverse (for the reduce-scatter of dK/dV) */                                \
    X(LAUNCH, void, cp_pack_kv, (float *kv, const float *qkv, int B, int Tq, int NH, int G, int hs),                  \
      (kv, qkv, B, Tq, NH, G, hs))                                                                                    \
    X(LAUNCH, void, cp_add_kv_grads, (float *dqkv, const float *dkv, int B, int Tq, int NH, int G, int hs),           \
      (dqkv, dkv, B, Tq, NH, G, hs))                                                                                  \
    X(LAUNCH, void, cp_rank_major_to_positions,                                                                       \
      (float *seq, const float *gathered, int cp_size, int B, int Tq, int KV), (seq, gathered, cp_size, B, Tq, KV))  \
    X(LAUNCH, void, cp_positions_to_rank_major,                                                                       \
      (float *gathered, const float *seq, int cp_size, int B, int Tq, int KV), (gathered, seq, cp_size, B, Tq, KV))  \
    /* cp_comm_type p2p (the ring): one block of queries against one K/V chunk pair (struct cpu_flash_block,         \
       backend/cpu/kernels.h); forward writes the block's out and lse, backward adds into dq and dkv; the merge of a  \
       block's partial out pout (B, rows, NH·hs) and plse (B, NH, rows) into out and lse (B, Tq rows, from row0) by   \
       the online-softmax rule */                                                                                      \
    X(OWN, void, flash_attention_block_forward,                                                                       \
      (float *out, float *lse, float *scratch, int threads, const struct cpu_flash_block *blk, int B, int NH, int G, \
       int hs),                                                                                                        \
      (out, lse, scratch, threads, blk, B, NH, G, hs))                                                                \
    X(OWN, void, flash_attention_block_backward,                                                                      \
      (float *dq, float *dkv, float *scratch, int threads, const float *dout, const float *out, const float *lse,     \
       const struct cpu_flash_block *blk, int B, int NH, int G, int hs),                                               \
      (dq, dkv, scratch, threads, dout, out, lse, blk, B, NH, G, hs))                                                 \
    X(LAUNCH, void, cp_merge_partial,                                                                                 \
      (float *out, float *lse, const float *pout, const float *plse, int B, int NH, int Tq, int row0, int rows,       \
       int hs),                                                                                                        \
      (out, lse, pout, plse, B, NH, Tq, row0, rows, hs))                                                              \
    /* --- embedding ---                                                                                              \
       out (B,T,C) = wte[token − vocab_start] (0 for tokens outside [vocab_start, vocab_start + vocab_local):         \
       another tensor-parallel rank's rows) + wpe[t] if wpe is not NULL, t the row's position in its sample, or       \
       pos[t] when pos is not NULL (context parallelism). Backward accumulates dwte (this rank's vocabulary rows) and \
       dwpe (unless NULL). add_positions: out (B,T,C) += wpe[t] (wpe[pos[t]]). */                                     \
    X(LAUNCH, void, embedding_forward,                                                                                \
      (float *out, const int32_t *tokens, const float *wte, int vocab_start, int vocab_local, const float *wpe,      \
       const int32_t *pos, int B, int T, int C),                                                                       \
      (out, tokens, wte, vocab_start, vocab_local, wpe, pos, B, T, C))                                                \
    X(LAUNCH, void, embedding_backward,                                                                               \
      (float *dwte, float *dwpe, const float *dout, const int32_t *tokens, int vocab_start, int vocab_local,          \
       const int32_t *pos, int B, int T, int C),                                                                       \
      (dwte, dwpe, dout, tokens, vocab_start, vocab_local, pos, B, T, C))                                             \
    X(LAUNCH, void, add_positions, (float *out, const float *wpe, const int32_t *pos, int B, int T, int C),           \
      (out, wpe, pos, B, T, C))                                                                                       \
    /* --- loss: softmax cross-entropy over a vocabulary shard, in stages that tensor parallelism all-reduces          \
       between (tensor_parallel/cross_entropy.c) ---                                                                   \
       logits (N,Vl) hold columns [vocab_start, vocab_start + Vl) of the padded vocabulary; only global columns < V   \
       are real.                                                                                                       \
         ce_row_max       rowmax (N) = max over this shard's real columns (-FLT_MAX if it has none)                   \
         ce_target_logit  target (N) = logit[target] − max where the target column is in this shard, else 0          \
         ce_exp_sum       logits → exp(logit − max) in place over real columns (padding → 0); sum (N) over the shard  \
         ce_normalize     exp → probabilities (÷ sum); losses (N) = log(sum) − target                                 \
         cross_entropy_backward  probs (N,Vl) → dlogits in place: (p − onehot(target))·dloss */                       \
    X(LAUNCH, void, ce_row_max, (const float *logits, float *rowmax, int N, int Vl, int vocab_start, int V),          \
      (logits, rowmax, N, Vl, vocab_start, V))                                                                        \
    X(LAUNCH, void, ce_target_logit,                                                                                  \
      (const float *logits, const float *max, float *target, const int32_t *targets, int N, int Vl, int vocab_start), \
      (logits, max, target, targets, N, Vl, vocab_start))                                                             \
    X(LAUNCH, void, ce_exp_sum, (float *logits, const float *max, float *sum, int N, int Vl, int vocab_start, int V), \
      (logits, max, sum, N, Vl, vocab_start, V))                                                                      \
    X(LAUNCH, void, ce_normalize,                                                                                     \
      (float *probs, const float *sum, const float *target, float *losses, int N, int Vl),                            \
      (probs, sum, target, losses, N, Vl))                                                                            \
    X(LAUNCH, void, cross_entropy_backward,                                                                           \
      (float *probs_to_dlogits, const int32_t *targets, float dloss, int N, int Vl, int vocab_start),                 \
      (probs_to_dlogits, targets, dloss, N, Vl, vocab_start))                                                         \
    /* --- optimizer, reductions ---                                                                                  \
       AdamW on n contiguous fp32 values (optimizer.c's adamw_step calls it per slice of a tensor; both backends       \
       through backend/adamw_element.h): g·grad_scale into m and v, then p = p·keep − step·m / (sqrt(v)·inv_sqrt_bc2  \
       + eps); keep = 1 − lr·weight_decay for decayed tensors (else 1), step = lr / (1 − β1^t),                        \
       inv_sqrt_bc2 = 1 / sqrt(1 − β2^t). sum_squares_add: Σ x² in double added to the rank's running sum (on cpu in \
       fixed blocks, independent of the thread count, added in call order); sum_squares_take: that sum, read back to  \
       the host once (cuda: one copy and one sync for a step's gradient norm), and the running sum zeroed. */          \
    X(LAUNCH, void, adamw_update,                                                                                     \
      (float *p, float *m, float *v, const float *g, size_t n, float grad_scale, float b1, float b2, float eps,       \
       float keep, float step, float inv_sqrt_bc2),                                                                    \
      (p, m, v, g, n, grad_scale, b1, b2, eps, keep, step, inv_sqrt_bc2))                                             \
    X(OWN, void, sum_squares_add, (const float *x, size_t n), (x, n))                                                 \
    X(OWN, double, sum_squares_take, (void), ())                                                                      \
    /* params_changed: the parameters in [params, params + n) may have been written (an optimizer step, its           \
       all-gather, a load): copies made from them before are stale (cuda: the 16-bit weight copies its GEMMs keep,     \
       made once after each change; cpu: nothing kept) */                                                             \
    X(OWN, void, params_changed, (const float *params, size_t n), (params, n))                                        \
    /* --- MoE (transformer/moe/: router.h, token_dispatcher.h; the router's per-token arithmetic is                  \
       backend/moe_row.h on both backends) ---                                                                         \
         moe_router_forward      logits (N,E) → scores (N,E), topk (N,k), probs (N,k)                                 \
         moe_router_backward     → d_logits (N,E) written; counts (S,E): token n's aux-loss counts are row n / T      \
         moe_aux_score_sums      col (S,E) = Σ over the T tokens of sequence s of the aux loss's scores (double, in    \
                                 token order)                                                                          \
         moe_permute             out (M,C): row r = inp row idx[r], or zeros where idx[r] < 0                         \
         moe_permute_backward    dinp (N,C) += Σ_j d_perm row pos[n,j] (pos (N,k); -1 skipped)                        \
         moe_unpermute           out (N,C) = Σ_j probs[n,j]·y row pos[n,j]                                            \
         moe_unpermute_backward  dy row pos[n,j] = probs[n,j]·dout row n; d_probs[n,j] = ⟨dout row n, y row          \
                                 pos[n,j]⟩ (double); 0 where dropped */                                                \
    X(LAUNCH, void, moe_router_forward,                                                                               \
      (const float *logits, float *scores, int32_t *topk, float *probs, int N, int E, int k, int sigmoid,             \
       int pre_softmax),                                                                                               \
      (logits, scores, topk, probs, N, E, k, sigmoid, pre_softmax))                                                   \
    X(LAUNCH, void, moe_router_backward,                                                                              \
      (float *d_logits, const float *scores, const int32_t *topk, const float *probs, const float *d_probs,           \
       const int32_t *counts, int T, double aux, int N, int E, int k, int sigmoid, int pre_softmax),                   \
      (d_logits, scores, topk, probs, d_probs, counts, T, aux, N, E, k, sigmoid, pre_softmax))                        \
    X(LAUNCH, void, moe_aux_score_sums, (double *col, const float *scores, int S, int T, int E, int normalise),       \
      (col, scores, S, T, E, normalise))                                                                              \
    X(LAUNCH, void, moe_permute, (float *out, const float *inp, const int32_t *idx, int M, int C),                    \
      (out, inp, idx, M, C))                                                                                          \
    X(LAUNCH, void, moe_permute_backward, (float *dinp, const float *d_perm, const int32_t *pos, int N, int k, int C), \
      (dinp, d_perm, pos, N, k, C))                                                                                   \
    X(LAUNCH, void, moe_unpermute,                                                                                    \
      (float *out, const float *y, const int32_t *pos, const float *probs, int N, int k, int C),                      \
      (out, y, pos, probs, N, k, C))                                                                                  \
    X(LAUNCH, void, moe_unpermute_backward,                                                                           \
      (float *dy, float *d_probs, const float *dout, const float *y, const int32_t *pos, const float *probs, int N,   \
       int k, int C),                                                                                                  \
      (dy, d_probs, dout, y, pos, probs, N, k, C))                                                                    \
    /* --moe-grouped-gemm (Megatron's GroupedMLP): G independent linears over consecutive row blocks, rows[g] (a host \
       array) rows of inp / out for group g with its own weight (OC,C) and bias (NULL: none); backward: dinp (NULL:   \
       not wanted) written, dweight[g] and dbias[g] (NULL: none) accumulated. A group of no rows is skipped. On cpu   \
       parallel over the groups, each the single-threaded sgemm of matmul_forward (the same bits as G calls of it);  \
       on cuda one cuBLASLt GEMM per group, back to back. */                                                           \
    X(OWN, void, grouped_matmul_forward,                                                                              \
      (float *out, const float *inp, const float *const *weight, const float *const *bias, const int32_t *rows,      \
       int G, int C, int OC),                                                                                          \
      (out, inp, weight, bias, rows, G, C, OC))                                                                       \
    X(OWN, void, grouped_matmul_backward,                                                                             \
      (float *dinp, float *const *dweight, float *const *dbias, const float *dout, const float *inp,                  \
       const float *const *weight, const int32_t *rows, int G, int C, int OC),                                         \
      (dinp, dweight, dbias, dout, inp, weight, rows, G, C, OC))

// The kernel's field of tb_backend.
#define TB_KERNEL_FIELD(side, ret, name, params, args) ret(*name) params;

#endif
