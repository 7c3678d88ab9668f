// transformer_layer.h — one pre-norm GPT layer and its two submodules:
//
//   x ─► input_layernorm ─► self_attention (qkv ─► core ─► proj) ─► + ─► mid
//   mid ─► pre_mlp_layernorm ─► mlp (fc1 ─► activation ─► fc2) ─► + ─► out
//
// Forward and backward are explicit (no autograd); everything backward needs is in
// transformer_layer_acts, allocated through the rank's allocator as "activations", so the
// memory accounting and recompute are exact. What each submodule saves (N = B·T):
//   input_layernorm    ln1 (N,C), ln1_mean (N), ln1_rstd (N)     (+ the layer input x)
//   self_attention     qkv (N,QKV) (with --qk-layernorm: its queries and keys normalized, and
//                      q_pre (N·NH,hs), k_pre (N·G,hs) before, their means and rstds),
//                      the core's (transformer/spec.h: local's probabilities
//                      (B,NH,T,T), not under selective recompute; flash's log-sum-exps (B,NH,T)),
//                      atty (N,C)
//   residual           mid (N,C)
//   pre_mlp_layernorm  ln2 (N,C), ln2_mean (N), ln2_rstd (N)
//   mlp                fc1 (N,F1), act (N,F)                       F1 = fc1_factor · F
//                      or, in a MoE layer (--num-experts, --moe-layer-freq), the MoE layer's
//                      (transformer/moe/moe_layer.h) instead
// The layer input x is owned by the transformer block (it is the previous layer's output).
//
// Under tensor parallelism each rank holds NH/tp heads, G/tp query groups and F/tp MLP
// columns (the dims below are this rank's); under sequence parallelism the residual stream
// x, mid and the norm statistics hold this rank's Ns = N/tp sequence rows, while ln1 and ln2
// are kept gathered (N,C) for the column-parallel GEMMs' weight gradients.
#ifndef TB_TRANSFORMER_LAYER_H
#define TB_TRANSFORMER_LAYER_H

#include <stddef.h>

#include "runtime/memory.h"
#include "tensor_parallel/mappings.h"
#include "transformer/moe/moe_layer.h"
#include "transformer/spec.h"

typedef struct tb_layer_dims {
    int B, T, N;        // micro batch, sequence, N = B·T
    int Ns;             // rows of the sequence-parallel regions: N / tp under SP, else N
    int C, NH, G, hs;   // hidden; heads and query groups of this rank; head size
    int CA;             // attention width of this rank: NH · hs
    int QKV;            // (NH + 2G) · hs
    int F, F1;          // MLP hidden of this rank, fc1 output (F or 2F)
    float eps;
    tb_tp_region tp;    // the tensor-parallel group and sequence parallelism (tp.staging is set
                        // by transformer_workspace_alloc)
    // rotary position embedding: channels rotated per head (0: none), pairing, base; the
    // tables (T, rope_dim / 2) are set by transformer_workspace_alloc
    int rope_dim, rope_interleaved;
    double rope_base;
    const float *rope_cos, *rope_sin;
    const tb_core_attention_module *attention;  // the spec's: what it saves and needs as scratch
    const struct tb_forward_hook *forward_hook; // sees each module's output (forward_hook.h; NULL: none)
    int cp_size;        // context parallelism (context_parallel.h): T above is this rank's T / cp tokens
    tb_group *cp;       // the context-parallel group (set by transformer_layer_set_context_parallel)
    tb_moe_dims moe;    // mixture of experts: which layers are MoE layers, their experts (E 0: none)
    float moe_loss_scale;        // backward: the main loss's scale, for the load-balancing loss's gradient
    struct moe_stats *moe_stats; // forward: the step's load statistics (NULL: not recorded)
    int cp_ring;        // cp_comm_type p2p: K and V pass around a ring of the cp ranks; 0: all-gathered
    int qk_norm;        // the spec has q and k norms (--qk-layernorm)
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
    float *q_norm_w, *q_norm_b, *k_norm_w, *k_norm_b;  // (hs) each, --qk-layernorm's; else NULL
    moe_layer_params moe;    // a MoE layer's router and experts (the fc* above are then NULL)
} transformer_layer_params;

typedef struct transformer_layer_acts {
    void *memory;            // the one allocation the pointers below are carved from
    float *ln1, *ln1_mean, *ln1_rstd;   // (N,C) gathered, (Ns), (Ns)
    float *qkv;                         // (N,QKV)
    float *q_pre, *q_mean, *q_rstd;     // --qk-layernorm: the queries before their norm (N·NH,hs), (N·NH) each
    float *k_pre, *k_mean, *k_rstd;     // the keys' (N·G,hs), (N·G) each; all NULL without
    float *attn_saved;                  // the attention core's: local (B,NH,T,T) probabilities, NULL
                                        // under selective recompute; flash (B,NH,T) log-sum-exps
    float *atty;                        // (N,CA)
    float *mid;                         // (Ns,C)
    float *ln2, *ln2_mean, *ln2_rstd;   // (N,C) gathered, (Ns), (Ns)
    float *fc1, *act;                   // (N,F1), (N,F); NULL in a MoE layer
    moe_layer_acts moe;                 // a MoE layer's
} transformer_layer_acts;

// Buffers reused by every layer (category "workspace"): outputs of the projections before
// the residual add, gradients flowing through a layer, the attention scratch.
typedef struct transformer_workspace {
    float *branch;           // (Ns,C) proj / fc2 output (reduced, with bias) before the residual add
    float *full;             // (N,C) row-parallel partial sums / gathered gradients (SP)
    float *norm_out;         // (Ns,C) a norm's output before it is gathered (SP)
    float *d_norm_out;       // (Ns,C) gradient at a norm's output
    float *d_mid;            // (Ns,C) gradient at mid
    float *d_qkv;            // (N,QKV)
    float *d_atty;           // (N,CA)
    float *d_fc1;            // (N,F1)
    float *d_act;            // (N,F)
    float *qk_out, *qk_din;  // (N,CA) each, --qk-layernorm: a norm's contiguous output / input gradient
    float *attn_scratch;     // the attention core's scratch_floats
    int attn_threads;        // the OpenMP threads attn_scratch is sized for
    float *rope_cos, *rope_sin;  // (T, rope_dim / 2) each: rope's rotation; NULL without rope
    int32_t *cp_pos;         // (T) context parallelism: the local tokens' global positions (a tensor of the
                             // backend: the kernels read it); else NULL
    int32_t *cp_pos_host;    // the same positions in host memory (the batch's tokens are cut on the host)
    float *cp_kv;            // context parallelism's K/V exchange (cp_attention_workspace_floats); else NULL
    float *staging;          // (N,C) rank-major staging of the sequence-parallel mappings
    moe_workspace moe;       // the MoE layers' (nothing without experts)
} transformer_workspace;

// This rank's dims for cfg (tp from the config); tp_group: the rank's tensor-parallel group
// (NULL with one rank).
tb_layer_dims tb_layer_dims_for(const tb_config *cfg, const transformer_layer_spec *spec, tb_group *tp_group);

// Bytes of one dense layer's saved activations (selective: without the attention probabilities).
size_t transformer_layer_acts_bytes(const tb_layer_dims *d, int selective_recompute);
void transformer_layer_acts_alloc(transformer_layer_acts *a, tb_allocator *mem, const tb_layer_dims *d,
                                  int selective_recompute, int layer);
void transformer_layer_acts_free(transformer_layer_acts *a, tb_allocator *mem);

// Also points d->tp.staging at the workspace's staging buffer.
void transformer_workspace_alloc(transformer_workspace *ws, tb_allocator *mem, tb_layer_dims *d);
void transformer_workspace_free(transformer_workspace *ws, tb_allocator *mem);
// Context parallelism: the cp group and this rank's place in it (its tokens' positions; RoPE
// at those positions). Nothing without context parallelism.
void transformer_layer_set_context_parallel(tb_layer_dims *d, transformer_workspace *ws, tb_group *cp, int cp_rank);

// inp (Ns,C) → out (Ns,C); fills a.
void transformer_layer_forward(const transformer_layer_spec *spec, int layer, const tb_layer_dims *d,
                               const transformer_layer_params *p, transformer_layer_acts *a,
                               transformer_workspace *ws, const float *inp, float *out);
// dout (Ns,C) → dinp (Ns,C) written (must not alias dout); parameter grads g accumulated.
void transformer_layer_backward(const transformer_layer_spec *spec, int layer, const tb_layer_dims *d,
                                const transformer_layer_params *p, transformer_layer_params *g,
                                const transformer_layer_acts *a, transformer_workspace *ws,
                                const float *inp, const float *dout, float *dinp);

// The submodules, for tests and for the layer above.
// ln1 (N,C) → out (Ns,C) (projection output with bias, before the residual add)
void self_attention_forward(const transformer_layer_spec *spec, int layer, const tb_layer_dims *d,
                            const transformer_layer_params *p, transformer_layer_acts *a,
                            transformer_workspace *ws, float *out);
// dout (Ns,C) → dln1 (Ns,C) written, summed over tp
void self_attention_backward(const transformer_layer_spec *spec, int layer, const tb_layer_dims *d,
                             const transformer_layer_params *p, transformer_layer_params *g,
                             const transformer_layer_acts *a, transformer_workspace *ws, const float *dout,
                             float *dln1);
// ln2 (N,C) → out (Ns,C) (fc2 output with bias, before the residual add)
void mlp_forward(const transformer_layer_spec *spec, int layer, const tb_layer_dims *d,
                 const transformer_layer_params *p, transformer_layer_acts *a, transformer_workspace *ws,
                 float *out);
void mlp_backward(const transformer_layer_spec *spec, int layer, const tb_layer_dims *d,
                  const transformer_layer_params *p, transformer_layer_params *g,
                  const transformer_layer_acts *a, transformer_workspace *ws, const float *dout,
                  float *dln2);

#endif
