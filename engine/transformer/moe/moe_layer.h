// moe_layer.h — Megatron-Core's MoELayer (transformer/moe/moe_layer.py), in place of a
// layer's dense MLP (docs/ARCHITECTURE.md, "Mixture of experts"; on a device backend its
// tensors are device memory, the routing's host decisions on host copies: "CUDA backend"):
//
//   ln2 (N,C) ─► router (router.h): scores, top-k experts and probs per token, the aux loss
//             ─► dispatch (token_dispatcher.h): permute the routed tokens, grouped by expert
//             ─► experts (experts.h): each expert's tokens through its own MLP
//             ─► combine: unpermute, each token's k outputs weighted by its router probs
//             (+ the shared expert's output, an MLP every token goes through) ─► (N,C)
//
// N: this rank's tokens (under sequence parallelism its shard of the microbatch). M = N·k
// routed tokens, less those dropped over capacity (--moe-expert-capacity-factor: each expert
// takes at most ceil(N·k / E · factor) of a microbatch's tokens, as Megatron's
// topk_softmax_with_capacity; the others are dropped, their share of the output zero; with
// --moe-pad-expert-input-to-capacity each expert's rows padded to the capacity). Under expert
// (ep ranks, each holding E/ep consecutive experts) or expert tensor parallelism the dispatch
// is one of Megatron's dispatchers (token_dispatcher.h): all-to-all — the counts all-gathered
// over ep and etp, the permuted tokens all-to-all'd to the ranks of their experts and
// all-gathered over etp, sorted from (source rank, expert) to (expert, source rank) order so
// that each local expert's R_e rows are consecutive, and the reverse after the experts — or
// all-gather — every rank's tokens gathered, this rank's experts' picked, the partial outputs
// reduce-scattered; R = Σ_e R_e rows reach this rank's experts (R = M on one rank). What
// backward needs is saved in moe_layer_acts: carved from the layer's one activation
// allocation (transformer_layer.c)
//   router      scores (N,E) (softmax over every expert, or sigmoid), topk (N,k) int32, probs (N,k),
//               route (N,k) int32 (topk, -1 where dropped), selected_per_expert (E) int32
//               (under sequence parallelism summed over the tp group: the microbatch's)
//   dispatch    tokens_per_expert (E), perm_pos (N,k), perm_token (M), all_counts (etp·ep,E),
//               local_counts (E_local), all int32; expert_out (M,C) (the experts' outputs
//               back in this rank's permuted order)
// and allocated by the forward at the size the routing gives (freed with the layer's):
//   experts     expert_in (R,C), fc1 (R,F1), act (R,F) (and the all-gather dispatcher's
//               gathered routing and outputs, moe_layer_acts.gathered_*)
#ifndef TB_TRANSFORMER_MOE_MOE_LAYER_H
#define TB_TRANSFORMER_MOE_MOE_LAYER_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "comm/group.h"
#include "config/config.h"
#include "runtime/memory.h"
#include "core/shapes/saved_tensors.h"
#include "transformer/moe/moe_types.h"
#include "transformer/spec.h"

// Floats (4-byte words) of each carved tensor, in moe_layer_acts order, for the layer's plan
// (shapes/saved_tensors.h: tb_moe_saved_floats, TB_MOE_SAVED).
void moe_layer_saved_counts(const tb_moe_dims *m, int N, int C, size_t counts[TB_MOE_SAVED]);
// The slots of a's tensors in the same order.
void moe_layer_saved_slots(moe_layer_acts *a, void **slots[TB_MOE_SAVED]);

void moe_workspace_alloc(moe_workspace *ws, tb_allocator *mem, const tb_moe_dims *m, int N, int C);
void moe_workspace_free(moe_workspace *ws, tb_allocator *mem);

// Per-layer load statistics of a step, summed over its microbatches (the metrics' "moe").
typedef struct moe_stats {
    int num_layers, E;
    int64_t *tokens_per_expert;             // (num_layers, E) routed tokens of this rank's microbatches
    double *load_balancing_loss;            // (num_layers) summed over microbatches (without the coefficient)
    int64_t *dropped_tokens;                // (num_layers) choices dropped over capacity
    int64_t *a2a_bytes;                     // (num_layers) bytes this rank's all-to-alls sent (ep > 1): the
                                            // forward's dispatch and combine and the backward's two, 2·(M+R)·C·4
                                            // per microbatch, its own share included (what tb_all_to_all records)
    int *microbatches;                      // (num_layers) forwards recorded; 0: not a MoE layer of this rank
    int64_t *expert_rows;                   // (num_layers, E) rows each of this rank's experts' GEMMs ran over
                                            // (the tokens of every rank that reach it, padding included)
    int expert_first, E_local;              // this rank's experts (set by the first record)
    int gemm[4];                            // each local expert's GEMMs, per row: fc1 N, K; fc2 N, K
} moe_stats;
void moe_stats_init(moe_stats *s, int num_layers, int E);
void moe_stats_free(moe_stats *s);
void moe_stats_reset(moe_stats *s);
// Adds b's records into a (chunks of one rank hold different layers).
void moe_stats_add(moe_stats *a, const moe_stats *b);
// [{"layer", "tokens_per_expert": [...], "routed_tokens", "dropped_tokens", "max_over_mean",
// "a2a_bytes", "load_balancing_loss" (mean over the step's microbatches; null without the aux
// loss), "microbatches", "local_experts": [first, count], "expert_rows": [...] (per local
// expert: the M of its GEMMs summed over the microbatches), "expert_gemm": {"fc1": [N, K],
// "fc2": [N, K]} (this rank's shard: N or K divided by etp)}] for every layer with a record.
json_t *moe_stats_json(const moe_stats *s, int aux_loss);

// inp (N,C) → out (N,C) written. stats: the step's record (NULL: not recorded, e.g. a recompute).
void moe_layer_forward(const tb_moe_dims *m, const tb_activation_module *act, int layer, int N, int C,
                       const moe_layer_params *p, moe_layer_acts *a, moe_workspace *ws, const float *inp, float *out,
                       moe_stats *stats);
// Frees what the forward allocated for the experts.
void moe_layer_release(moe_layer_acts *a, tb_allocator *mem);
// dout (N,C) → dinp (N,C) written (inp: forward's input); parameter gradients accumulated. loss_scale scales the
// load-balancing loss's gradient as the main loss's (1 / microbatches; Megatron's
// MoEAuxLossAutoScaler).
void moe_layer_backward(const tb_moe_dims *m, const tb_activation_module *act, int layer, int N, int C,
                        const moe_layer_params *p, moe_layer_params *g, const moe_layer_acts *a, moe_workspace *ws,
                        float loss_scale, const float *inp, const float *dout, float *dinp);

#endif
