// spec.h — the transformer layer spec (Megatron-Core's ModuleSpec, gpt_layer_specs.py):
// which implementation fills each slot of a layer. A spec is a struct of function
// pointers, chosen once from the config; the layer code calls through it and never tests
// the config again.
#ifndef TB_TRANSFORMER_SPEC_H
#define TB_TRANSFORMER_SPEC_H

#include "config/config.h"

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

// The attention core (Megatron's core_attention, chosen by --attention-backend): causal
// softmax(QKᵀ/√hs)V on a fused qkv, see backend/cpu/kernels.h for the layout.
//   local: DotProductAttention; saves the probabilities (B,NH,T,T), or nothing under
//          selective recompute (backward recomputes them);
//   flash: blocked, online softmax; saves one log-sum-exp per row (B,NH,T), recompute or not.
// `saved` holds what the shared rule says the core saves (core/shapes/saved_tensors.h,
// tb_attention_saved_floats: the probabilities, or a log-sum-exp per row when flash), `scratch`
// scratch_floats for `threads` OpenMP threads.
typedef struct tb_core_attention_module {
    const char *name;
    int flash;  // saves a log-sum-exp per row (else the probabilities, unless selective recompute)
    size_t (*scratch_floats)(int T, int hs, int threads);
    void (*forward)(float *out, float *saved, float *scratch, int threads, const float *qkv, int B, int T, int NH,
                    int G, int hs);
    // out: forward's output (flash reads it; local does not)
    void (*backward)(float *dqkv, float *scratch, int threads, const float *dout, const float *out, const float *qkv,
                     const float *saved, int B, int T, int NH, int G, int hs);
} tb_core_attention_module;

typedef struct transformer_layer_spec {
    const tb_norm_module *input_layernorm;
    // each head's queries and keys normalized over the head size (--qk-layernorm); NULL: none
    // (Megatron's IdentityOp in the q_layernorm and k_layernorm slots)
    const tb_norm_module *q_layernorm, *k_layernorm;
    const tb_core_attention_module *core_attention;
    const tb_norm_module *pre_mlp_layernorm;
    const tb_activation_module *activation;
    const tb_norm_module *final_layernorm;  // the model's final norm, same kind as the layers'
} transformer_layer_spec;

// The spec for a config: norm from --normalization, activation from --swiglu, the attention
// core from --attention-backend, the q/k norms (of --normalization's kind) from --qk-layernorm.
void transformer_layer_spec_for(const tb_config *cfg, transformer_layer_spec *spec);

#endif
