// spec.h — the transformer layer spec (Megatron-Core's ModuleSpec, gpt_layer_specs.py):
// which implementation fills each slot of a layer. A spec is a struct of function
// pointers, chosen once from the config; the layer code calls through it and never tests
// the config again.
#ifndef TB_TRANSFORMER_SPEC_H
#define TB_TRANSFORMER_SPEC_H

#include "config.h"

// A norm: LayerNorm uses mean, rstd and bias; RMSNorm only rstd (mean and bias unused).
typedef struct tb_norm_module {
    const char *name;
    int has_bias;
    void (*forward)(float *out, float *mean, float *rstd, const float *inp, const float *weight,
                    const float *bias, int N, int C, float eps);
    void (*backward)(float *dinp, float *dweight, float *dbias, const float *dout, const float *inp,
                     const float *weight, const float *mean, const float *rstd, int N, int C);
} tb_norm_module;

// The MLP's activation between fc1 and fc2. fc1 produces fc1_factor × F columns
// (2 for gated units: [gate | up]); the activation maps them to F.
typedef struct tb_activation_module {
    const char *name;
    int fc1_factor;
    void (*forward)(float *out, const float *inp, int N, int F);
    void (*backward)(float *dinp, const float *inp, const float *dout, int N, int F);
} tb_activation_module;

// The attention core (Megatron's core_attention / DotProductAttention): softmax(QKᵀ)V on
// a fused qkv, see backend/cpu/kernels.h for the layout and the scratch contract.
typedef struct tb_core_attention_module {
    const char *name;
    void (*forward)(float *out, float *probs, float *scratch, const float *qkv, int B, int T, int NH,
                    int G, int hs);
    void (*backward)(float *dqkv, float *scratch, const float *dout, const float *qkv,
                     const float *probs, int B, int T, int NH, int G, int hs);
} tb_core_attention_module;

typedef struct transformer_layer_spec {
    const tb_norm_module *input_layernorm;
    const tb_core_attention_module *core_attention;
    const tb_norm_module *pre_mlp_layernorm;
    const tb_activation_module *activation;
    const tb_norm_module *final_layernorm;  // the model's final norm, same kind as the layers'
} transformer_layer_spec;

// The spec for a config: norm from --normalization, activation from --swiglu.
void transformer_layer_spec_for(const tb_config *cfg, transformer_layer_spec *spec);

#endif
