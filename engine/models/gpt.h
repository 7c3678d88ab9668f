// gpt.h — the GPT model (Megatron-Core models/gpt/gpt_model.py): embedding (word +
// learned position), the transformer block, the final norm, the output layer (tied to the
// word embedding unless --untie-embeddings-and-output-weights), and the loss.
//
// All parameters live in one buffer and all gradients in another of the same layout
// (llm.c's habit), described by a table of gpt_param entries in Hugging Face GPT-2 order
// and names, so the optimizer, gradient clipping and checkpoints walk one array.
//
//   forward : tokens (B,T) → x (B,T,C) → block → ln_f → logits (B,T,Vp) → loss
//   backward: the same in reverse; parameter gradients accumulate, so microbatches sum.
#ifndef TB_MODELS_GPT_H
#define TB_MODELS_GPT_H

#include <stddef.h>
#include <stdint.h>

#include "config/config.h"
#include "core/error.h"
#include "runtime/memory.h"
#include "transformer/transformer_block.h"

typedef struct gpt_param {
    char name[64];        // Hugging Face GPT-2 name, e.g. "h.3.attn.c_attn.weight"
    int ndim;             // 1 or 2
    int rows, cols;       // engine shape (rows, cols); 1-D tensors have rows = 1
    size_t offset;        // in floats from the start of the parameter buffer
    size_t numel;
    int decay;            // AdamW weight decay applies (weights of linears and embeddings)
    int hf_transposed;    // stored as (cols, rows) in GPT-2 files (Conv1D weights)
    int hf_rows;          // rows held in files (the unpadded vocab for embeddings)
    float init_std;       // normal(0, init_std) for the first hf_rows rows; 0: constant
    float init_value;
    // Tensor parallelism: this rank holds a shard of the whole (full_rows, full_cols) tensor.
    int full_rows, full_cols;
    int split_axis;       // -1: replicated over tp; 0: rows split (column-parallel outputs,
                          // vocabulary); 1: columns split (row-parallel inputs; 1-D biases of
                          // column-parallel layers)
    int nseg, seg[3];     // along the split axis, the whole tensor is nseg segments (e.g. Q, K, V
                          // or gate, up), each split evenly over the tp ranks
    int tp_duplicate;     // replicated over tp: counted once in the global gradient norm
    int pp_duplicate;     // the last pipeline stage's copy of the tied word embedding: counted
                          // once (on the first stage) in the gradient norm
    int global_index;     // position in the whole model's table (seeds the tensor's init)
    int sp_partial;       // under sequence parallelism its gradient is a per-rank partial sum
                          // (norms, row-parallel biases): all-reduced over tp at the step's end
    int tp_partial;       // its gradient is a per-rank partial sum over tp always (the q/k norms:
                          // each rank normalizes its own heads): all-reduced over tp likewise
    int expert;           // 1 + the global expert index of an expert's parameter (MoE), else 0:
                          // a token computes with k of a layer's E experts
} gpt_param;

// Pointers into the parameter (or gradient) buffer.
typedef struct gpt_weights {
    float *wte;           // (Vp, C) word embedding
    float *wpe;           // (maxT, C) position embedding
    float *lnf_w, *lnf_b; // (C); lnf_b NULL for RMSNorm
    float *lm_head;       // (Vp, C): == wte when tied
} gpt_weights;

// What one in-flight microbatch holds at the model's ends.
typedef struct gpt_slot {
    const int32_t *inputs, *targets;       // (B,T), owned by the caller until backward
    float *lnf, *lnf_mean, *lnf_rstd;      // (N,C) gathered, (Ns), (Ns)
    float *logits;                         // (N,Vl): logits → probs → dlogits, in place
    float *losses;                         // (N)
    int32_t *tokens_dev;                   // (2N) inputs | targets on a device backend (NULL on the CPU)
} gpt_slot;

// A model chunk: the whole model, or one pipeline stage's (virtual stage's) slice of it —
// layers [first_layer, first_layer + num_layers), with the embedding if it is the first
// chunk and the final norm, output layer and loss if it is the last.
typedef struct gpt_chunk_spec {
    int first_layer, num_layers;
    int has_embedding, has_head;
    int nslots;                            // microbatches that may be in flight at once
    tb_group *ep;                          // MoE: the expert-parallel group, whose member i holds the
                                           // experts [i·E/ep, (i+1)·E/ep) (NULL: every expert)
    tb_group *etp;                         // MoE: the expert-tensor-parallel group, whose members split
                                           // each of those experts (NULL: whole)
} gpt_chunk_spec;

typedef struct gpt_model {
    const tb_config *cfg;
    transformer_layer_spec spec;
    tb_allocator *mem;
    gpt_chunk_spec chunk;
    int B, T, C, V, Vp, maxT;
    int tp_size, tp_rank;
    int vocab_start, Vl;     // this rank's rows of the padded vocabulary: [vocab_start, +Vl)

    gpt_param *params;
    int nparams;
    size_t num_parameters;   // floats in the parameter buffer
    size_t expert_parameters;  // of them, the experts' tensors' elements (MoE), placed after every
    size_t experts_offset;     // dense one: the buffer's [experts_offset, padded_parameters)
    size_t padded_parameters;  // its allocated length: a multiple of 16 x dp x cp (the distributed optimizer's group)
    float *param_memory;     // category params
    float *grad_memory;      // category grads
    // Megatron-FSDP over dp × cp > 1 (distributed/fsdp.h): the gradient buffer (optim_grads) and
    // the parameter buffer (optim_grads_params) are reservations, holding memory only where the
    // FSDP module commits it; a reserved parameter buffer is not initialised here (fsdp_init
    // draws the rank's slices) unless a load asks for it whole first (gpt_params_whole)
    int grads_reserved, params_reserved;
    int params_whole;        // reserved, committed whole (category gathered) for a load
    gpt_weights w, g;
    transformer_block block;

    gpt_slot *slots;                       // (chunk.nslots)
    float *d_lnf;                          // (Ns,C) workspace
    float *d_x;                            // (Ns,C) workspace
    float *full;                           // (N,C) workspace (tp > 1): embedding sums, partial grads
    float *ce_scratch;                     // (3N) workspace

    // Gradient-ready hook (DistributedDataParallel, --overlap-grad-reduce): during a backward
    // with grads_final (the step's last microbatch of this chunk) or grads_each_microbatch set, grads_ready(ctx,
    // chunk_index, site) is called once the gradients of a site are final: -1 the output
    // layer and final norm, a layer's global index, -2 the embeddings (distributed/
    // distributed_data_parallel.h names them).
    void (*grads_ready)(void *ctx, int chunk, int site);
    void *grads_ready_ctx;
    // Parameter-needed hook (--overlap-param-gather), on the same ctx: the forward calls
    // params_needed(ctx, chunk_index, site) before it first reads a site's parameters.
    void (*params_needed)(void *ctx, int chunk, int site);
    // Before a site's backward, when set (Megatron-FSDP: its parameters gathered, its gradients'
    // memory committed), on the same ctx. (A recomputed layer's forward calls params_needed.)
    void (*params_needed_backward)(void *ctx, int chunk, int site);
    int chunk_index;
    int grads_final;
    int grads_each_microbatch;  // grads_ready after every microbatch's backward, not only the last's (FSDP)
} gpt_model;

// Lays out and allocates parameters and gradients (zeroed) and initialises the weights
// from cfg->seed: each tensor from its own stream, so a tensor's values do not depend on
// which other tensors exist, and a tensor-parallel rank's shard is exactly that slice of the
// single-rank tensor. tp_group: the rank's tensor-parallel group (NULL with one rank).
void gpt_model_init(gpt_model *m, const tb_config *cfg, tb_allocator *mem, tb_group *tp_group);
// The same for one chunk of the model.
void gpt_model_init_chunk(gpt_model *m, const tb_config *cfg, tb_allocator *mem, tb_group *tp_group,
                          gpt_chunk_spec chunk);

// Copies between a whole tensor (full_rows × full_cols) and tensor-parallel rank `rank`'s
// shard of it. to_shard: full → shard; else shard → full (that rank's part only).
void gpt_param_shard_copy(const gpt_param *p, int tp, int rank, float *full, float *shard, int to_shard);
// Whether the experts' replicas (expert-dp) are another group than the dense ones' (dp × cp):
// under expert parallelism, or expert tensor parallelism other than tp (parallel_state.h).
static inline int gpt_experts_apart(const tb_config *cfg) {
    return cfg->num_experts > 0 &&
           (cfg->expert_model_parallel_size > 1 || cfg->expert_tensor_parallel_size != cfg->tensor_model_parallel_size);
}
// The expert grid's expert-dp size, world / (etp × ep × pp); and the least common multiple.
int gpt_expert_dp_size(const tb_config *cfg);
size_t gpt_lcm(size_t a, size_t b);
// Whether this rank's copy of p counts (gradient norm, parameter counts) along the tensor
// split: a dense tensor replicated over tp on tp rank 0 only (and the tied embedding's
// last-stage copy never); an expert's, split over etp rather than tp, on etp rank 0 only when
// replicated over etp. Replicas over dp (expert-dp for an expert's) are the caller's to skip.
static inline int gpt_param_tp_counted(const gpt_param *p, int tp_rank, int etp_rank) {
    if (p->expert) return !p->tp_duplicate || etp_rank == 0;
    return (!p->tp_duplicate || tp_rank == 0) && !p->pp_duplicate;
}
// The group a parameter is split over (an expert's: etp; the others': tp; NULL: size 1), its
// size and this rank's index in it.
tb_group *gpt_param_split_group(const gpt_model *m, const gpt_param *p, int *size, int *rank);
// The whole tensor of parameter i (or its gradient, grads != 0), assembled over its split group
// (gpt_param_split_group): a collective every member must call. full is host memory of
// full_rows × full_cols floats: on a device the tensor (or the gathered shards) is copied to
// the host first (backend/host_stage.h).
void gpt_gather_param(gpt_model *m, int i, int grads, float *full);
// The same from another buffer laid out as the parameters (an optimizer moment made whole).
void gpt_gather_param_from(gpt_model *m, int i, const float *base, float *full);
void gpt_model_free(gpt_model *m);
// Draws parameter i's initial values (this rank's shard of the tensor, numel floats) into x,
// host memory: each tensor from its own stream (seed, tensor index).
void gpt_init_param(gpt_model *m, int i, float *x);
// A reserved parameter buffer (Megatron-FSDP's optim_grads_params) committed whole, category
// gathered, for a load that writes every tensor; fsdp_init then keeps the rank's slices. A no-op
// otherwise.
void gpt_params_whole(gpt_model *m);

const gpt_param *gpt_find_param(const gpt_model *m, const char *name);

// The backward's sites, the hooks' `site` (gpt_model): a transformer layer's global index, or
#define GPT_SITE_HEAD (-1)       // the final norm and the output layer (untied)
#define GPT_SITE_EMBEDDING (-2)  // the word and position embeddings
#define GPT_SITE_DEFERRED (-3)   // the tied embedding shared by the first and last stage: final at finalize
// The site whose backward makes parameter p's gradient final (shared_embedding: the tied
// word embedding is on two pipeline stages, its gradient summed over both at finalize).
int gpt_param_site(const gpt_model *m, const gpt_param *p, int shared_embedding);

// Forward of one microbatch through a whole model; returns the mean loss over its B·T
// tokens and keeps what backward needs (a forward not followed by backward first releases
// what the previous one kept, so forward-only evaluation does not accumulate memory).
float gpt_forward(gpt_model *m, const int32_t *inputs, const int32_t *targets);
// Backward of the microbatch in flight for the objective loss_scale · mean loss
// (loss_scale = 1 / num_microbatches under gradient accumulation). Gradients accumulate.
void gpt_backward(gpt_model *m, float loss_scale);

// The same for a chunk, with the microbatch in slot `slot`: the first chunk starts from
// the tokens, the others from x_in (Ns,C), the activation received from the previous
// stage; the last chunk returns the mean loss, the others write their output to x_out
// (Ns,C) and return 0. Backward: the last chunk starts from the loss (loss_scale), the
// others from d_out (Ns,C), the gradient received from the next stage; every chunk but the
// first writes the gradient at its input to d_in (Ns,C).
float gpt_forward_chunk(gpt_model *m, int slot, const int32_t *inputs, const int32_t *targets, const float *x_in,
                        float *x_out);
void gpt_backward_chunk(gpt_model *m, int slot, float loss_scale, const float *d_out, float *d_in);

void gpt_zero_grad(gpt_model *m);
// Frees the activations a forward kept, without a backward.
void gpt_release_activations(gpt_model *m, int slot);

// Model FLOPs per token of a training step (forward + backward), llm.c's and PaLM's
// estimate: 6·N + 12·L·C·T — 6 per parameter (2 forward, 4 backward) for the matmuls with
// the weights, plus attention's scores and values (2·2·C·T per layer forward, ×3 with
// backward). One function for every use: the whole model (N and L of the model), one
// pipeline stage (its parameters and layers), one layer (L = 1). The one place the formula
// is written; a count in double, exact to 2^53.
double gpt_flops_per_token(int64_t parameters, int layers, int hidden_size, int seq_length);
// The same formula for what one rank computes with one chunk: N = the chunk's parameters on
// this rank (its tensor-parallel shards and the tensors it holds whole: norms, row-parallel
// biases, the position embedding, the last stage's copy of the tied embedding), L = the
// chunk's layers, and attention over this rank's heads only (C / tp: Megatron splits the
// heads over tensor-parallel ranks); a MoE rank's experts count ep times (they run the tokens
// of every expert-parallel rank), k / E of them active per token.
double gpt_chunk_flops_per_token(const gpt_model *m);
// The parameters a token computes with (N of the formula above): every dense one, and k / E of
// the experts' (a MoE layer routes each token to k of its E experts, all of one size): exact
// when every expert of each layer is counted (the whole model, or a chunk holding them all).
int64_t gpt_active_parameters(int64_t dense, int64_t expert, const tb_config *cfg);

#endif
