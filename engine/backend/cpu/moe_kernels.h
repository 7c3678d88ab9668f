// moe_kernels.h — the CPU backend's MoE kernels (transformer/moe/: router.h,
// token_dispatcher.h), the host loops the MoE layer ran before the dispatch (backend.h)
// moved here unchanged. Shapes: N tokens, E experts, k choices per token, C columns.
#ifndef TB_BACKEND_CPU_MOE_KERNELS_H
#define TB_BACKEND_CPU_MOE_KERNELS_H

#include <stdint.h>

// logits (N,E) → scores (N,E), topk (N,k), probs (N,k) (backend/moe_row.h, per token)
void cpu_moe_router_forward(const float *logits, float *scores, int32_t *topk, float *probs, int N, int E, int k,
                            int sigmoid, int pre_softmax);
// → d_logits (N,E) written; counts (S,E): token n's aux-loss counts are row n / T
void cpu_moe_router_backward(float *d_logits, const float *scores, const int32_t *topk, const float *probs,
                             const float *d_probs, const int32_t *counts, int T, double aux, int N, int E, int k,
                             int sigmoid, int pre_softmax);
// col (S,E) = Σ over the T tokens of sequence s of the aux loss's scores (double, in token order)
void cpu_moe_aux_score_sums(double *col, const float *scores, int S, int T, int E, int normalise);
// out (M,C): row r = inp row idx[r], or zeros where idx[r] < 0 (a row gather by index)
void cpu_moe_permute(float *out, const float *inp, const int32_t *idx, int M, int C);
// dinp (N,C) += Σ_j d_perm row pos[n,j] (pos (N,k); -1 skipped)
void cpu_moe_permute_backward(float *dinp, const float *d_perm, const int32_t *pos, int N, int k, int C);
// out (N,C) = Σ_j probs[n,j] · y row pos[n,j] (a scatter back weighted by the probs)
void cpu_moe_unpermute(float *out, const float *y, const int32_t *pos, const float *probs, int N, int k, int C);
// dy row pos[n,j] = probs[n,j] · dout row n; d_probs[n,j] = ⟨dout row n, y row pos[n,j]⟩ (double); 0 where dropped
void cpu_moe_unpermute_backward(float *dy, float *d_probs, const float *dout, const float *y, const int32_t *pos,
                                const float *probs, int N, int k, int C);

#endif
