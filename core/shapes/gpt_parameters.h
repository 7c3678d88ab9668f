// gpt_parameters.h — what a rank holds of a GPT model's parameters: every tensor of the model
// in the engine's order, its whole shape and how tensor parallelism (or expert tensor
// parallelism) splits it, and which of them a pipeline chunk on an expert-parallel rank keeps.
// The one rule the engine's parameter table (engine/models/gpt.c) and the planner's per-rank
// counts (experiments/planner/plan.c) both read, so the planned parameter, gradient and
// optimizer bytes cannot drift from the engine's. No engine dependency: tb_core carries it.
#ifndef TB_SHAPES_GPT_PARAMETERS_H
#define TB_SHAPES_GPT_PARAMETERS_H

#include <stddef.h>
#include <stdint.h>

// The model's dimensions (the config's, resolved).
typedef struct tb_gpt_dims {
    int C, NH, G, hs;   // hidden, heads, query groups, head size
    int F, fc1_factor;  // the MLP's hidden; fc1's output is fc1_factor·F (2: gated, SwiGLU)
    int Vp, V;          // padded and real vocabulary
    int maxT;           // learned position embeddings' rows
    int L;              // layers
    int bias, norm_bias, learned_pos, tied;
    int qk_norm;        // each layer's q and k norms (--qk-layernorm): a weight (and bias) of hs each
    // MoE: experts per MoE layer (0: none), layer l is one when l % freq == 0, each expert's
    // hidden, the shared expert's (0: none)
    int E, freq, Fe, Fs;
} tb_gpt_dims;

typedef enum tb_param_split {
    TB_SPLIT_NONE,  // whole on every rank of the tensor-parallel group
    TB_SPLIT_TP,    // split over the tensor-parallel group
    TB_SPLIT_ETP,   // an expert's, split over the expert-tensor-parallel group (whole when it is 1)
} tb_param_split;

typedef enum tb_param_init {
    TB_INIT_STD,      // normal(0, init_method_std)
    TB_INIT_OUT_STD,  // normal(0, init_method_std / sqrt(2·layers)): Megatron's scaled init of output layers
    TB_INIT_ONES,
    TB_INIT_ZEROS,
} tb_param_init;

typedef enum tb_param_place {
    TB_PLACE_EMBEDDING,  // wte.weight: the first stage's, and the last's too when tied
    TB_PLACE_POSITION,   // wpe.weight: the first stage's
    TB_PLACE_LAYER,      // h.L.*: the stage holding layer L
    TB_PLACE_HEAD,       // ln_f.*, lm_head.weight: the last stage's
} tb_param_place;

typedef struct tb_gpt_tensor {
    const char *what;  // the name's last part ("attn.c_attn.weight"; tb_gpt_tensor_name makes the name)
    tb_param_place place;
    int layer;         // TB_PLACE_LAYER's
    int ndim;          // 1 or 2
    int rows, cols;    // whole (a vector: 1 row)
    tb_param_split split;
    int axis;          // the split's: 0 rows, 1 columns
    int nseg, seg[3];  // the whole extent along axis as segments, each split alike (qkv: Q | K | V)
    int sp_partial;    // replicated over tp, its gradient a partial sum under sequence parallelism
    int tp_partial;    // replicated over tp, its gradient a partial sum always: each tp rank applies
                       // it to its own heads (the q/k norms)
    int expert;        // 0: dense; 1 + e: expert e's (placed after every dense tensor)
    int etp_replicated;  // an expert's, whole on every etp rank (fc2's bias)
    int decay;         // weight decay applies
    int hf_transposed; // stored transposed in Hugging Face's GPT-2 (Conv1D)
    int hf_rows;       // rows in Hugging Face's file (the real vocabulary's for wte and lm_head)
    tb_param_init init;
} tb_gpt_tensor;

// The tensor's name, Hugging Face GPT-2's ("wte.weight", "h.3.attn.c_attn.weight"); the MoE
// layer's are this engine's ("h.3.mlp.router.weight", "h.3.mlp.experts.7.c_fc.weight",
// "h.3.mlp.shared_experts.c_fc.weight"). Formatted on demand: the planner never asks.
void tb_gpt_tensor_name(const tb_gpt_tensor *t, char *buf, size_t size);

// Calls each(arg, t) for every tensor of the model, in the engine's order: wte, wpe, each
// layer's (ln_1, attention, ln_2, then the MLP or the MoE layer's router, experts and shared
// expert), ln_f, lm_head.
void tb_gpt_tensors(const tb_gpt_dims *d, void (*each)(void *arg, const tb_gpt_tensor *t), void *arg);

// Which tensors a pipeline chunk of an expert-parallel rank keeps: its layers, the embedding
// on the first stage (and the tied one again on the last), the head on the last, and of the
// experts its own.
typedef struct tb_gpt_chunk {
    int first_layer, num_layers;
    int has_embedding, has_head;
    int expert_first, experts;  // this rank's experts: [expert_first, expert_first + experts)
} tb_gpt_chunk;
int tb_gpt_tensor_kept(const tb_gpt_dims *d, const tb_gpt_chunk *c, const tb_gpt_tensor *t);
// Whether a kept tensor counts toward the model's parameters on this chunk: all but the last
// stage's copy of the tied embedding (counted once, on the first stage).
int tb_gpt_tensor_counted(const tb_gpt_chunk *c, const tb_gpt_tensor *t);
// The tensor's elements on one rank, split over tp (or etp for an expert's) ranks.
int64_t tb_gpt_tensor_numel(const tb_gpt_tensor *t, int tp, int etp);

// A chunk's flat parameter (and gradient) buffer: its dense tensors, then its experts', each
// tensor on a 64-byte boundary (16 floats), the whole padded so that the distributed
// optimizer splits it (each range of it) into equal slices over its group: the dense range
// over dp × cp and, with the experts apart (their gradients reduced over expert-dp), the
// experts' range over expert-dp; both ranges then start and end on a multiple of
// 16 · lcm(dp × cp, expert-dp), the experts moved up to theirs. Otherwise one range on a
// multiple of 16 · dp × cp.
typedef struct tb_gpt_buffer {
    int64_t unit;            // every range starts and ends on a multiple of it (floats)
    int64_t experts_offset;  // where the experts' tensors start
    int64_t padded;          // the buffer's floats
} tb_gpt_buffer;
// dense, experts: the chunk's aligned floats of each kind; apart: the experts' range split
// over expert-dp (the distributed optimizer with the experts apart, and experts held).
tb_gpt_buffer tb_gpt_buffer_layout(int64_t dense, int64_t experts, int64_t dp_cp, int64_t expert_dp, int apart);

#endif
