// experts.h — Megatron-Core's SequentialMLP (transformer/moe/experts.py): each local expert
// is an MLP of the dense layer's kind (fc1 → the spec's activation, GELU or SwiGLU → fc2, with
// biases unless --disable-bias-linear) applied to its consecutive rows of the permuted tokens:
// one GEMM per linear per expert over its whole batch of tokens (never per token); an expert
// that got no token is skipped.
#ifndef TB_TRANSFORMER_MOE_EXPERTS_H
#define TB_TRANSFORMER_MOE_EXPERTS_H

#include <stdint.h>

#include "transformer/moe/moe_types.h"
#include "transformer/spec.h"

// inp (M,C) → out (M,C); fc1 (M,F1) and act (M,F) saved. counts: (E_local) rows per local expert.
void experts_forward(const tb_moe_dims *m, const tb_activation_module *act, int C, const int32_t *counts,
                     const moe_layer_params *p, const float *inp, float *fc1, float *actv, float *out);
// dout (M,C) → dinp (M,C) written; gradients accumulated. d_act (M,F), d_fc1 (M,F1) scratch.
void experts_backward(const tb_moe_dims *m, const tb_activation_module *act, int C, const int32_t *counts,
                      const moe_layer_params *p, moe_layer_params *g, const float *inp, const float *fc1,
                      const float *actv, const float *dout, float *d_act, float *d_fc1, float *dinp);

#endif
