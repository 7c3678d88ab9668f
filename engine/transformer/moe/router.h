// router.h — Megatron-Core's TopKRouter (transformer/moe/router.py) with softmax scores.
//
//   logits (N,E) = inp (N,C) @ Wᵀ (no bias)
//   scores (N,E) = softmax(logits) over every expert
//   topk   (N,k) = the k largest (largest first; ties to the lower expert index), of the scores
//                  under --moe-router-pre-softmax, else of the logits (the same order)
//   probs  (N,k) = scores at the top-k (pre-softmax), else softmax over the k chosen logits
//
// The load-balancing loss is switch_load_balancing_loss_func's (Switch Transformer / GShard):
//   aux = coeff · E / (k · N²) · Σ_e (Σ_n scores[n,e]) · tokens_per_expert[e]
// with tokens_per_expert a count (no gradient); it is 1·coeff when the load is balanced.
#ifndef TB_TRANSFORMER_MOE_ROUTER_H
#define TB_TRANSFORMER_MOE_ROUTER_H

#include <stdint.h>

#include "transformer/moe/moe_layer.h"

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
// The loss without its coefficient: E / (k · N²) · Σ_e (Σ_n scores[n,e]) · tokens_per_expert[e].
double router_load_balancing_loss(const tb_moe_dims *m, int N, const float *scores, const int32_t *tokens_per_expert);
// d_probs (N,k) → dinp (N,C) written, dw (E,C) accumulated; adds the load-balancing loss's
// gradient aux_scale · coeff · ∂(loss)/∂logits when m->aux_loss. d_logits (N,E) is scratch.
void router_backward(const tb_moe_dims *m, int N, int C, const float *inp, const float *w, const float *scores,
                     const int32_t *topk, const float *probs, const int32_t *tokens_per_expert, const float *d_probs,
                     float aux_scale, float *d_logits, float *dw, float *dinp);

#endif
