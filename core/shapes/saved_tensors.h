// saved_tensors.h — what a transformer layer saves for its backward, tensor by tensor, in
// floats, and how it is laid out (each tensor on a 64-byte boundary of one allocation): the
// one rule the engine's allocation plan (transformer/transformer_layer.c, moe_layer.c) and
// the planner (experiments/planner/plan.c) both read, so the planned activation memory cannot drift
// from the engine's. No engine dependency: tb_core carries it.
#ifndef TB_SHAPES_SAVED_TENSORS_H
#define TB_SHAPES_SAVED_TENSORS_H

#include <stdint.h>

// One layer on one rank: N = B·T tokens (T: this rank's share of the sequence under context
// parallelism), Ns of them in the residual stream (N / tp under sequence parallelism), and
// this rank's widths (its tensor-parallel shard of each).
typedef struct tb_layer_saved_shape {
    int64_t B, T, Ns;
    int64_t C;        // hidden
    int64_t QKV, CA;  // the qkv projection's output and the attention's (heads · head size)
    int64_t NH, G;    // attention heads, query groups (key/value heads)
    int64_t F, F1;    // the MLP's hidden and fc1's output (F, or 2F gated)
    int flash;        // the flash core (a log-sum-exp per row), else the local core (probabilities)
    int selective;    // selective recompute: the local core's probabilities are not saved
    int moe;          // a MoE layer: no dense fc1 / activation (its own: tb_moe_saved_floats)
    int qk_norm;      // --qk-layernorm: the queries and keys before their norms, and their statistics
} tb_layer_saved_shape;

// The dense layer's saved tensors, in carve order: ln1, ln1_mean, ln1_rstd, qkv, the core
// attention's, atty, mid, ln2, ln2_mean, ln2_rstd, fc1, act, then with qk_norm (else 0 floats)
// q_pre (N·NH rows of the head size CA / NH), q_mean, q_rstd (N·NH), k_pre (N·G rows), k_mean,
// k_rstd (N·G): a mean is kept for RMSNorm too, as ln1_mean and ln2_mean are.
#define TB_LAYER_SAVED 18
void tb_layer_saved_floats(const tb_layer_saved_shape *s, int64_t floats[TB_LAYER_SAVED]);
// The core attention's: B·NH·T log-sum-exps (flash), or B·NH·T·T probabilities (local; 0
// under selective recompute, which recomputes them).
int64_t tb_attention_saved_floats(int flash, int64_t B, int64_t T, int64_t NH, int selective);

// A MoE layer's router and dispatcher tensors over the rank's Ns tokens, and its shared
// expert's over its shared_rows tokens (gathered over tp under sequence parallelism).
typedef struct tb_moe_saved_shape {
    int64_t Ns, C;
    int64_t E, k;          // experts, experts per token
    int64_t E_local;       // this rank's experts
    int64_t ep, etp;       // expert-parallel and expert-tensor-parallel sizes
    int64_t M;             // the permuted rows of the rank's tokens (Ns·k, or padded to capacity)
    int64_t shared_rows;   // the shared expert's rows
    int64_t Fs1, Fs;       // the shared expert's fc1 output and hidden on this rank (0: none)
} tb_moe_saved_shape;

// In moe_layer_acts order: scores (Ns,E), probs, topk, route (Ns,k), selected_per_expert,
// tokens_per_expert (E), perm_pos (Ns,k), perm_token (M), all_counts (etp·ep,E),
// local_counts (E_local), expert_out (M,C), shared_fc1, shared_act.
#define TB_MOE_SAVED 13
void tb_moe_saved_floats(const tb_moe_saved_shape *s, int64_t floats[TB_MOE_SAVED]);

// The bytes a saved tensor of `floats` takes in the layer's allocation: 4 each, rounded up to
// 64 (each tensor starts on a 64-byte boundary).
static inline int64_t tb_saved_bytes(int64_t floats) { return (floats * 4 + 63) / 64 * 64; }

#endif
