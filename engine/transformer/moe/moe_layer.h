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
#include "config.h"
#include "core/memory.h"
#include "transformer/spec.h"

// The MoE shape of a rank's layers (all zero without experts).
typedef struct tb_moe_dims {
    int E;                      // experts per MoE layer
    int E_local, expert_first;  // this rank's experts: [expert_first, expert_first + E_local)
    int k;                      // experts per token (--moe-router-topk)
    int F, F1;                  // each expert's hidden size and fc1 output (F, or 2F gated)
    int Fs, Fs1;                // the shared expert's (--moe-shared-expert-intermediate-size / tp; 0: none)
    int freq;                   // layer l is a MoE layer when l % freq == 0
    int pre_softmax;            // softmax over every expert, then top-k (else top-k logits, then softmax)
    int sigmoid;                // --moe-router-score-function sigmoid (else softmax)
    int aux_loss;               // the Switch/GShard load-balancing loss is computed
    int seq_aux;                // per sequence of seq_length tokens (seq_aux_loss)
    int seq_length;
    double aux_coeff;           // and trained on with this coefficient
    double capacity_factor;     // --moe-expert-capacity-factor (0: no capacity, no token dropped)
    int drop_position;          // over capacity, drop the last positions (else the lowest probs)
    int ep_size;                // expert-parallel ranks (E_local = E / ep_size)
    tb_group *ep;               // their group (set with expert_first by the model; NULL: ep 1)
    int etp_size;               // expert-tensor-parallel ranks: each expert's fc1 column-parallel and fc2
                                // row-parallel over them (F, F1 above are this rank's: F = ffn / etp)
    tb_group *etp;              // their group (set by the model; NULL: etp 1)
    int pad_to_capacity;        // --moe-pad-expert-input-to-capacity: each expert's input padded to its
                                // capacity with zero rows (its outputs unused, its gradients zero)
    int grouped_gemm;           // --moe-grouped-gemm: each expert linear one grouped GEMM over the local experts
    int allgather;              // the all-gather dispatcher (else all-to-all); it moves tokens under ep or etp
    const struct tb_tp_region *tp;  // the layer's tensor-parallel region (set with its workspace): the shared
                                // expert under tp is the dense MLP's column- / row-parallel pair
    tb_group *sp;               // sequence parallelism (tp > 1): the tp ranks whose token shards make the
                                // microbatch; the layer runs on this rank's shard, the load-balancing loss
                                // counts tokens over the group (Megatron's sequence_partition_group). NULL: none
} tb_moe_dims;

tb_moe_dims tb_moe_dims_for(const tb_config *cfg, int fc1_factor);
// The rows a rank's N tokens dispatch: N·k, or under --moe-pad-expert-input-to-capacity
// E · capacity when more (the permuted buffers' size, M below).
int moe_dispatch_rows(const tb_moe_dims *m, int N);
static inline int tb_moe_is_layer(const tb_moe_dims *m, int layer) { return m->E > 0 && layer % m->freq == 0; }
// Whether the dispatcher moves tokens between ranks (ep or etp > 1).
static inline int moe_tokens_moved(const tb_moe_dims *m) { return m->ep_size > 1 || m->etp_size > 1; }

// A MoE layer's parameters (or their gradients): views into the model's buffers.
typedef struct moe_layer_params {
    float *router_w;                        // (E,C) the gate (TopKRouter.weight), no bias
    float *fc1_w[TB_MOE_MAX_EXPERTS];       // per local expert: (F1,C)
    float *fc1_b[TB_MOE_MAX_EXPERTS];       // (F1), NULL without biases
    float *fc2_w[TB_MOE_MAX_EXPERTS];       // (C,F)
    float *fc2_b[TB_MOE_MAX_EXPERTS];       // (C), NULL without biases
    // the shared expert (Megatron's SharedExpertMLP), every token through it: NULL without one
    float *shared_fc1_w, *shared_fc1_b;     // (Fs1,C), (Fs1)
    float *shared_fc2_w, *shared_fc2_b;     // (C,Fs), (C)
} moe_layer_params;

typedef struct moe_layer_acts {
    float *scores, *probs;                  // (N,E), (N,k)
    int32_t *topk;                          // (N,k) expert of each of a token's k choices
    int32_t *route;                         // (N,k) the same, or -1 where the choice was dropped (capacity)
    int32_t *selected_per_expert;           // (E) choices per expert before any drop (the aux loss's counts)
    int32_t *tokens_per_expert;             // (E) this rank's routed tokens per expert (this microbatch)
    int32_t *perm_pos, *perm_token;         // (N,k) row of each choice in the permuted buffer; (M) its token
    int32_t *all_counts;                    // (ep,E) every ep rank's tokens_per_expert
    int32_t *local_counts;                  // (E_local) rows reaching each local expert, from all ranks
    float *expert_out;                      // (M,C) the experts' outputs in this rank's permuted order
    float *shared_fc1, *shared_act;         // (N·tp,Fs1), (N·tp,Fs): the shared expert's, on the gathered tokens
                                            // under sequence parallelism (NULL without one)
    // allocated by the forward (moe_layer_release frees them)
    void *expert_memory;
    int rows;                               // R
    float *expert_in, *fc1, *act;           // (R,C), (R,F1), (R,F)
    // the all-gather dispatcher under ep / etp (S ranks' N tokens gathered; allocated with them)
    void *gather_memory;
    float *gathered_probs;                  // (S·N,k) every rank's probs
    int32_t *gathered_pos;                  // (S·N,k) row of each choice among this rank's experts' (-1: not here)
    int32_t *gathered_token;                // (R) the gathered token of each row
    float *gathered_y;                      // (R,C) the experts' outputs (partial sums under etp)
    // The routing's small int arrays as the host reads them (its decisions: capacity, the
    // permutation maps, the all-to-all's split sizes, the experts' row counts, as Megatron's
    // tokens_per_expert.cpu()): on a host backend the tensors above; on a device host copies
    // (host_memory, allocated by the forward, freed by moe_layer_release), of which perm_pos,
    // perm_token and selected_per_expert (and for the all-gather dispatcher route, and its
    // gathered maps) are copied to the tensors the kernels and collectives read.
    void *host_memory;
    int32_t *h_topk, *h_route, *h_selected, *h_tokens_per_expert, *h_perm_pos, *h_perm_token;
    int32_t *h_all_counts, *h_local_counts;
    float *h_probs;
} moe_layer_acts;

// Floats (4-byte words) of each carved tensor, in moe_layer_acts order, for the layer's plan.
#define TB_MOE_SAVED 13
void moe_layer_saved_counts(const tb_moe_dims *m, int N, int C, size_t counts[TB_MOE_SAVED]);
// The slots of a's tensors in the same order.
void moe_layer_saved_slots(moe_layer_acts *a, void **slots[TB_MOE_SAVED]);

// Buffers reused by every MoE layer (category "workspace").
// Buffers of the R rows are allocated per call from mem (their size depends on the routing).
typedef struct moe_workspace {
    tb_allocator *mem;
    float *logits, *d_logits;               // (N,E)
    float *d_probs;                         // (N,k)
    float *d_expert_out, *d_perm_in;        // (M,C)
    float *send;                            // (M,C) the permuted tokens (expert parallelism)
    float *shared_out, *d_shared_in;        // (N,C) the shared expert's output, its input gradient
    float *shared_in, *shared_partial;      // (N·tp,C) under sequence parallelism: its gathered input, scratch
    float *d_shared_act, *d_shared_fc1;     // (N·tp,Fs), (N·tp,Fs1)
} moe_workspace;
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
