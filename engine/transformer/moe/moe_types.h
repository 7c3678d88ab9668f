// moe_types.h — what every part of a MoE layer shares (docs/ARCHITECTURE.md, "Mixture of
// experts"): the rank's MoE shape from the config, the layer's parameter views, its saved
// tensors and its workspace. The router (router.h), the experts (experts.h) and the token
// dispatcher (token_dispatcher.h) take these; the layer (moe_layer.h) composes them, as
// Megatron-Core's MoELayer imports its router, experts and dispatcher and none of them
// imports the layer. What the fields hold and when: moe_layer.h's header comment.
#ifndef TB_TRANSFORMER_MOE_MOE_TYPES_H
#define TB_TRANSFORMER_MOE_MOE_TYPES_H

#include <stdint.h>

#include "comm/group.h"
#include "config/config.h"
#include "runtime/memory.h"

struct tb_tp_region;

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

// Buffers reused by every MoE layer (category "workspace"; moe_workspace_alloc in moe_layer.h).
// Buffers of the R rows are allocated per call from mem (their size depends on the routing).
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
#endif
