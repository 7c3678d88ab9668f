// router.h — Megatron-Core's TopKRouter (transformer/moe/router.py) with softmax or sigmoid
// scores (--moe-router-score-function).
//
//   logits (N,E) = inp (N,C) @ Wᵀ (no bias)
//   softmax:
//   scores (N,E) = softmax(logits) over every expert
//   topk   (N,k) = the k largest (largest first; ties to the lower expert index), of the scores
//                  under --moe-router-pre-softmax, else of the logits (the same order)
//   probs  (N,k) = scores at the top-k (pre-softmax), else softmax over the k chosen logits
//   sigmoid (Megatron's topk_softmax_with_capacity, score_function "sigmoid"):
//   scores (N,E) = sigmoid(logits), each expert on its own
//   topk   (N,k) = the k largest scores (ties to the lower expert index)
//   probs  (N,k) = the k chosen scores over their sum (+1e-20) when k > 1; the score when k = 1
//
// The load-balancing loss is switch_load_balancing_loss_func's (Switch Transformer / GShard):
//   aux = coeff · E / (k · N²) · Σ_e (Σ_n a[n,e]) · tokens_per_expert[e]
// with tokens_per_expert a count (no gradient), 1·coeff when the load is balanced, and a the
// aux loss's scores (compute_routing_scores_for_aux_loss): the softmax scores, or the sigmoid
// scores normalised over every expert, a[n,e] = σ[n,e] / (Σ_e' σ[n,e'] + 1e-20), when k > 1
// (σ itself at k = 1). seq_aux_loss (Megatron's sequence-level loss) is the same per sequence
// of T = --seq-length tokens, with each sequence's own top-k counts, averaged over the S = N / T
// sequences: coeff / S · Σ_s E / (k · T²) · Σ_e (Σ_{n in s} a[n,e]) · counts[s,e].
#ifndef TB_TRANSFORMER_MOE_ROUTER_H
#define TB_TRANSFORMER_MOE_ROUTER_H

#include <stdint.h>

#include "runtime/memory.h"
#include "transformer/moe/moe_types.h"

// logits (N,E) is scratch; scores, topk, probs are written.
void router_forward(const tb_moe_dims *m, int N, int C, const float *inp, const float *w, float *logits, float *scores,
                    int32_t *topk, float *probs);
// Megatron's get_capacity: ceil(N·k / E · factor), the most tokens an expert takes.
int router_expert_capacity(const tb_moe_dims *m, int N);
// topk (N,k) → route (N,k): each expert keeps at most its capacity of the choices routed to
// it — the highest probs (ties to the earlier token; Megatron's "probs"), or the earliest
// tokens ("position") — and the others become -1; without a capacity factor route = topk.
// selected (E): the choices per expert before the drop. Returns the choices dropped.
int router_apply_capacity(const tb_moe_dims *m, int N, const int32_t *topk, const float *probs, int32_t *route,
                          int32_t *selected);
// col (E): Σ over the tokens [first, first + T) of the aux loss's scores a[n,e] (above), on
// host scores (the CPU's loop).
void router_aux_score_sums(const tb_moe_dims *m, int first, int T, const float *scores, double *col);
// col (S,E) on the host: each sequence of T tokens' sums, from scores (N,E) a tensor of the
// thread's backend (its moe_aux_score_sums; a device's result copied back, staged from mem).
void router_aux_score_sums_tensor(const tb_moe_dims *m, tb_allocator *mem, int S, int T, const float *scores,
                                  double *col);
// From the column sums col (S,E) and counts (S,E): the mean over the S sequences of
// E / (k · T²) · Σ_e col[s,e] · counts[s,e] (S = 1, T = N: the whole batch's).
double router_aux_loss_from_sums(const tb_moe_dims *m, int S, int T, const double *col, const int32_t *counts);
// The loss without its coefficient: E / (k · N²) · Σ_e (Σ_n a[n,e]) · tokens_per_expert[e].
double router_load_balancing_loss(const tb_moe_dims *m, int N, const float *scores, const int32_t *tokens_per_expert);
// Each sequence's (T = seq_length tokens) choices per expert from topk (N,k), before any drop:
// counts (N / T, E), host arrays.
void router_sequence_counts(const tb_moe_dims *m, int N, const int32_t *topk, int32_t *counts);
// The layer's load-balancing loss without its coefficient: router_load_balancing_loss over the
// choices before any drop (selected_per_expert), or per sequence from topk (seq_aux_loss).
// Host arrays (the CPU's loops).
double router_aux_loss(const tb_moe_dims *m, int N, const float *scores, const int32_t *topk,
                       const int32_t *selected_per_expert);
// The factor of the load-balancing loss's gradient at the scores, per count: aux_scale · coeff ·
// E / (k · T² · S) (T = N, S = 1 without seq_aux_loss); 0 without the aux loss.
double router_aux_loss_factor(const tb_moe_dims *m, int N, float aux_scale);
// d_probs (N,k) → dinp (N,C) written, dw (E,C) accumulated; adds the load-balancing loss's
// gradient aux_scale · coeff · ∂(loss)/∂logits when m->aux_loss. counts (S,E) int32, a tensor:
// the choices per expert before any drop (S = 1), or per sequence (seq_aux_loss,
// router_sequence_counts). d_logits (N,E) is scratch. Every pointer a tensor of the backend.
void router_backward(const tb_moe_dims *m, int N, int C, const float *inp, const float *w, const float *scores,
                     const int32_t *topk, const float *probs, const int32_t *counts, const float *d_probs,
                     float aux_scale, float *d_logits, float *dw, float *dinp);

#endif
