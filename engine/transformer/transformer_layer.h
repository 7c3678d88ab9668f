// transformer_layer.h — one pre-norm GPT layer and its two submodules:
//
//   x ─► input_layernorm ─► self_attention (qkv ─► core ─► proj) ─► + ─► mid
//   mid ─► pre_mlp_layernorm ─► mlp (fc1 ─► activation ─► fc2) ─► + ─► out
//
// Forward and backward are explicit (no autograd); everything backward needs is in
// transformer_layer_acts, allocated through the rank's allocator as "activations", so the
// memory accounting and recompute are exact. What each submodule saves (N = B·T):
//   input_layernorm    ln1 (N,C), ln1_mean (N), ln1_rstd (N)     (+ the layer input x)
//   self_attention     qkv (N,QKV), probs (B,NH,T,T), atty (N,C)  — probs are not saved under
//                      selective recompute: backward recomputes them from qkv
//   residual           mid (N,C)
//   pre_mlp_layernorm  ln2 (N,C), ln2_mean (N), ln2_rstd (N)
//   mlp                fc1 (N,F1), act (N,F)                       F1 = fc1_factor · F
// The layer input x is owned by the transformer block (it is the previous layer's output).
#ifndef TB_TRANSFORMER_LAYER_H
#define TB_TRANSFORMER_LAYER_H

#include <stddef.h>

#include "core/memory.h"
#include "transformer/spec.h"

typedef struct tb_layer_dims {
    int B, T, N;        // micro batch, sequence, N = B·T
    int C, NH, G, hs;   // hidden, heads, query groups, head size
    int QKV;            // (NH + 2G) · hs
    int F, F1;          // MLP hidden, fc1 output (F or 2F)
    float eps;
} tb_layer_dims;

// Parameters (or their gradients: same struct, same layout). Biases are NULL without
// biases; ln*_b are NULL for RMSNorm.
typedef struct transformer_layer_params {
    float *ln1_w, *ln1_b;    // (C)
    float *qkv_w, *qkv_b;    // (QKV, C), (QKV)
    float *proj_w, *proj_b;  // (C, C), (C)
    float *ln2_w, *ln2_b;    // (C)
    float *fc1_w, *fc1_b;    // (F1, C), (F1)
    float *fc2_w, *fc2_b;    // (C, F), (C)
} transformer_layer_params;

typedef struct transformer_layer_acts {
    void *memory;            // the one allocation the pointers below are carved from
    float *ln1, *ln1_mean, *ln1_rstd;
    float *qkv;
    float *probs;            // NULL under selective recompute
    float *atty;
    float *mid;
    float *ln2, *ln2_mean, *ln2_rstd;
    float *fc1, *act;
} transformer_layer_acts;

// Buffers reused by every layer (category "workspace"): outputs of the projections before
// the residual add, gradients flowing through a layer, the attention scratch.
typedef struct transformer_workspace {
    float *branch;           // (N,C) proj / fc2 output before the residual add
    float *d_norm_out;       // (N,C) gradient at a norm's output
    float *d_mid;            // (N,C) gradient at mid
    float *d_qkv;            // (N,QKV)
    float *d_atty;           // (N,C)
    float *d_fc1;            // (N,F1)
    float *d_act;            // (N,F)
    float *attn_scratch;     // (2,T,T)
} transformer_workspace;

tb_layer_dims tb_layer_dims_for(const tb_config *cfg, int fc1_factor);

// Bytes of one layer's saved activations (selective: without the attention probabilities).
size_t transformer_layer_acts_bytes(const tb_layer_dims *d, int selective_recompute);
void transformer_layer_acts_alloc(transformer_layer_acts *a, tb_allocator *mem, const tb_layer_dims *d,
                                  int selective_recompute, int layer);
void transformer_layer_acts_free(transformer_layer_acts *a, tb_allocator *mem);

void transformer_workspace_alloc(transformer_workspace *ws, tb_allocator *mem, const tb_layer_dims *d);
void transformer_workspace_free(transformer_workspace *ws, tb_allocator *mem);

// inp (N,C) → out (N,C); fills a.
void transformer_layer_forward(const transformer_layer_spec *spec, int layer, const tb_layer_dims *d,
                               const transformer_layer_params *p, transformer_layer_acts *a,
                               transformer_workspace *ws, const float *inp, float *out);
// dout (N,C) → dinp (N,C) written (must not alias dout); parameter grads g accumulated.
void transformer_layer_backward(const transformer_layer_spec *spec, int layer, const tb_layer_dims *d,
                                const transformer_layer_params *p, transformer_layer_params *g,
                                const transformer_layer_acts *a, transformer_workspace *ws,
                                const float *inp, const float *dout, float *dinp);

// The submodules, for tests and for the layer above.
// ln1 (N,C) → out (N,C) (projection output, before the residual add)
void self_attention_forward(const transformer_layer_spec *spec, int layer, const tb_layer_dims *d,
                            const transformer_layer_params *p, transformer_layer_acts *a,
                            transformer_workspace *ws, float *out);
// dout (N,C) → dln1 (N,C) written
void self_attention_backward(const transformer_layer_spec *spec, int layer, const tb_layer_dims *d,
                             const transformer_layer_params *p, transformer_layer_params *g,
                             const transformer_layer_acts *a, transformer_workspace *ws, const float *dout,
                             float *dln1);
// ln2 (N,C) → out (N,C) (fc2 output, before the residual add)
void mlp_forward(const transformer_layer_spec *spec, int layer, const tb_layer_dims *d,
                 const transformer_layer_params *p, transformer_layer_acts *a, float *out);
void mlp_backward(const transformer_layer_spec *spec, int layer, const tb_layer_dims *d,
                  const transformer_layer_params *p, transformer_layer_params *g,
                  const transformer_layer_acts *a, transformer_workspace *ws, const float *dout,
                  float *dln2);

#endif
