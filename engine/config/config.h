// config.h — the engine's whole configuration: model, parallel layout, training, data, I/O.
//
// Megatron-Core's TransformerConfig + the training arguments of pretrain_gpt.py, in one
// struct. Every field has one entry in a table (config.c) that gives its command-line flag
// (Megatron-LM's name where one exists), its JSON key (the flag with underscores, as in
// `--config FILE.json`), its type, default and help. Parsing, --help, the JSON config file
// and the resolved config.json written to the run directory are all driven by that table,
// so they cannot disagree.
//
// Life of a config: config_defaults → config_parse_args (which loads --config first, then
// applies the flags over it) → config_resolve (derives what was left 0: ffn size, query
// groups, world size, data-parallel size, microbatches, padded vocab) → config_validate
// (every rule, each violation named with its numbers; values the engine cannot run yet are
// refused as "not supported yet").
#ifndef TB_CONFIG_H
#define TB_CONFIG_H

#include <jansson.h>
#include <stdint.h>
#include <stdio.h>

#include "core/error.h"
#include "core/options.h"

#define TB_PATH_MAX 1024

enum tb_normalization { TB_NORM_LAYERNORM, TB_NORM_RMSNORM };
enum tb_position_embedding { TB_POS_LEARNED_ABSOLUTE, TB_POS_ROPE, TB_POS_NONE };
// auto (the default) runs flash wherever the blocked kernel supports the configuration, else
// local, as Megatron's auto picks a fused core over the unfused one: config_attention_core.
enum tb_attention_backend { TB_ATTENTION_LOCAL, TB_ATTENTION_FLASH, TB_ATTENTION_AUTO };
enum tb_cp_comm_type { TB_CP_ALL_GATHER, TB_CP_P2P };
// How a collective on a group that spans processes runs under mpirun (comm/mpi_backend.h):
// MPI's own (blocking) collective on the caller's buffers, or the local backend's algorithm
// over point-to-point messages (group-order sums: the same bits as rank threads).
enum tb_mpi_collectives { TB_MPI_COLLECTIVES_NATIVE, TB_MPI_COLLECTIVES_EXACT };
// Known bugs on purpose (--debug-inject-fault), each wrong only under tensor parallelism:
//   row_parallel_bias_per_rank  every tp rank adds the row-parallel bias before the reduction
//   skip_sp_grad_all_reduce     the sequence-parallel partial gradients are not all-reduced
//   vocab_ce_local_sum          the vocab-parallel cross-entropy's exp sums are not all-reduced
enum tb_debug_fault { TB_FAULT_NONE, TB_FAULT_ROW_PARALLEL_BIAS, TB_FAULT_SKIP_SP_GRAD, TB_FAULT_VOCAB_CE_SUM };
enum tb_lr_decay_style { TB_LR_COSINE, TB_LR_LINEAR, TB_LR_CONSTANT };
// --data-parallel-sharding-strategy (Megatron-FSDP): ZeRO-0 to ZeRO-3
enum tb_fsdp_strategy { TB_FSDP_NO_SHARD, TB_FSDP_OPTIM, TB_FSDP_OPTIM_GRADS, TB_FSDP_OPTIM_GRADS_PARAMS };
enum tb_recompute_granularity { TB_RECOMPUTE_NONE, TB_RECOMPUTE_SELECTIVE, TB_RECOMPUTE_FULL };
enum tb_recompute_method { TB_RECOMPUTE_METHOD_NONE, TB_RECOMPUTE_UNIFORM, TB_RECOMPUTE_BLOCK };
// Mixture of experts (transformer/moe/), Megatron-Core's choices; the ones not built yet are
// refused by config_validate as "not supported yet".
enum tb_moe_load_balancing { TB_MOE_LB_AUX_LOSS, TB_MOE_LB_SEQ_AUX_LOSS, TB_MOE_LB_GLOBAL_AUX_LOSS, TB_MOE_LB_SINKHORN,
                             TB_MOE_LB_NONE };
enum tb_moe_score_function { TB_MOE_SCORE_SOFTMAX, TB_MOE_SCORE_SIGMOID };
enum tb_moe_dispatcher { TB_MOE_DISPATCHER_ALLGATHER, TB_MOE_DISPATCHER_ALLTOALL, TB_MOE_DISPATCHER_FLEX };
enum tb_moe_drop_policy { TB_MOE_DROP_PROBS, TB_MOE_DROP_POSITION };
#define TB_MOE_MAX_EXPERTS 256
// --device: where a rank's tensors live (backend/cpu, backend/cuda)
enum tb_device { TB_DEVICE_CPU, TB_DEVICE_CUDA };

typedef struct tb_config {
    // --- model (TransformerConfig) ---
    int num_layers;
    int hidden_size;
    int ffn_hidden_size;          // 0 → 4 × hidden_size
    int num_attention_heads;
    int num_query_groups;         // 0 → num_attention_heads (multi-head attention)
    int seq_length;
    int max_position_embeddings;  // 0 → seq_length
    int vocab_size;               // tokenizer vocabulary
    int make_vocab_size_divisible_by;
    int normalization;            // enum tb_normalization
    double norm_epsilon;
    int swiglu;
    int qk_layernorm;             // a norm (--normalization's kind) on each head's queries and keys
    int disable_bias_linear;
    int untie_embeddings_and_output_weights;
    int position_embedding_type;  // enum tb_position_embedding
    double rotary_percent;        // rope: the share of each head's channels rotated
    int rotary_base;              // rope: θ_i = position · base^(−2i / rotary dim)
    int rotary_interleaved;       // rope: rotate channel pairs (2i, 2i+1), not (i, i + dim/2)
    int attention_backend;        // enum tb_attention_backend
    int cp_comm_type;             // enum tb_cp_comm_type: how context parallelism exchanges K and V
    double init_method_std;
    double hidden_dropout;
    double attention_dropout;
    int num_experts;              // 0 = dense MLP
    // --- mixture of experts (transformer/moe/; Megatron-Core's TransformerConfig moe_*) ---
    int moe_router_topk;          // experts per token k
    int moe_router_load_balancing_type;  // enum tb_moe_load_balancing
    double moe_aux_loss_coeff;    // scale of the Switch/GShard load-balancing loss (0: none)
    int moe_router_pre_softmax;   // softmax over all experts, then top-k (else top-k logits, then softmax)
    int moe_router_score_function;       // enum tb_moe_score_function
    int moe_ffn_hidden_size;      // each expert's MLP hidden size (0 → ffn_hidden_size)
    int moe_layer_freq;           // layer l is a MoE layer when l % freq == 0
    int moe_token_dispatcher_type;       // enum tb_moe_dispatcher
    double moe_expert_capacity_factor;   // 0: no capacity (no token dropped)
    int moe_token_drop_policy;    // enum tb_moe_drop_policy
    int moe_pad_expert_input_to_capacity;
    int moe_shared_expert_intermediate_size;  // 0: no shared expert
    int moe_grouped_gemm;

    // --- parallel layout ---
    int world_size;               // 0 → tp × cp × pp (dp = 1)
    int tensor_model_parallel_size;
    int pipeline_model_parallel_size;
    int virtual_pipeline_model_parallel_size;  // 0 or 1 = not interleaved
    int num_layers_per_virtual_pipeline_stage; // 0 = use the size above; else derives it
    char pipeline_layout[TB_PATH_MAX];         // "3,5,2,2": layers per (virtual) stage; empty = uniform
    int account_for_embedding_in_pipeline_split;
    int account_for_loss_in_pipeline_split;
    int context_parallel_size;
    int expert_model_parallel_size;
    int expert_tensor_parallel_size;  // 0 → tensor_model_parallel_size (Megatron's default)
    int sequence_parallel;
    int use_distributed_optimizer;
    int overlap_grad_reduce;      // DistributedDataParallel: dp gradient reduction in buckets, overlapped with backward
    int overlap_param_gather;     // the distributed optimizer's parameter all-gather overlapped with the next forward
    int ddp_bucket_size;          // elements per gradient bucket (at least; cut at parameter boundaries)
    int use_megatron_fsdp;        // Megatron-FSDP: the data-parallel state sharded per FSDP unit (distributed/fsdp.h)
    int data_parallel_sharding_strategy;  // enum tb_fsdp_strategy: what Megatron-FSDP shards
    int ranks_per_process;        // rank threads per process under mpirun (0: 1 under mpirun, all without)
    double collective_timeout;    // seconds before a communicator call becomes a hang report
    int mpi_collectives;          // enum tb_mpi_collectives: MPI's own collectives or the exact algorithm
    char inject_stall[64];        // "RANK:STEP": that rank stops before its next collective
    char debug_slow_data[64];     // "RANK:MS": that rank's data loading takes MS ms longer each step (drill)
    char debug_slow_link[64];     // "GROUP:MS": every call on that group kind takes MS ms longer once in (drill)
    int print_rank_layout;

    // --- training ---
    int micro_batch_size;
    int global_batch_size;        // 0 → micro_batch_size × dp
    int train_iters;
    double lr;
    double min_lr;
    int lr_warmup_iters;
    int lr_decay_iters;           // 0 → train_iters
    int lr_decay_style;           // enum tb_lr_decay_style
    double weight_decay;
    double adam_beta1;
    double adam_beta2;
    double adam_eps;
    double clip_grad;             // 0 = no clipping
    int check_for_nan_in_loss_and_grad;  // stop at a non-finite loss or gradient norm
    int64_t seed;
    int device;                   // enum tb_device
    int bf16;                     // --bf16: bf16 GEMM compute, fp32 master weights and main_grad (--device cuda)
    int fp16;                     // --fp16: as bf16 with fp16 GEMM operands and dynamic loss scaling (--device cuda)
    int recompute_granularity;    // enum tb_recompute_granularity
    int recompute_method;         // enum tb_recompute_method
    int recompute_num_layers;

    // --- data ---
    char data_path[TB_PATH_MAX];  // llm.c token file; empty → synthetic
    int mock_data;

    // --- checkpoints, run directory, instrumentation ---
    char save[TB_PATH_MAX];       // checkpoint directory (checkpoint/dist_checkpoint.h); empty: none
    int save_interval;            // checkpoint every N steps (0: only at the end of training)
    int exit_interval;            // stop after a step divisible by N (0: run to train_iters), Megatron's
    int async_save;               // write checkpoints in the background while training goes on
    int save_optim;               // checkpoints hold the optimizer state (Megatron's --no-save-optim: 0)
    int load_optim;               // --load restores it (--no-load-optim: a fresh optimizer)
    char debug_slow_write[64];    // "RANK:MS": that rank's checkpoint writes take MS ms longer (drill)
    char dump_tensors[256];       // "1,3": the steps whose logical tensors go to tensors/ (reports/tensor_dump.h)
    int debug_inject_fault;       // enum tb_debug_fault: a known bug, for bisect's drill
    char save_hf[TB_PATH_MAX];    // the whole model as one Hugging Face GPT-2 safetensors file
    char load[TB_PATH_MAX];       // a checkpoint directory (resumes) or a safetensors file (weights)
    char run_dir[TB_PATH_MAX];    // empty → artifacts/adhoc/<timestamp>
    int log_interval;
    int64_t memory_cap;           // bytes; 0 = no cap
    double peak_tflops;           // per rank, for MFU; 0 = not set (MFU not reported)
    int num_threads;              // 0 = all cores (one rank)

    // --- derived by config_resolve ---
    int data_parallel_size;
    int num_microbatches;
    int padded_vocab_size;
} tb_config;

// The table; terminated by an entry with flag == NULL.
extern const tb_option tb_config_options[];

void config_defaults(tb_config *cfg);
// argv[0] is skipped. `--config FILE.json` anywhere on the line is applied first; flags
// then override it. Non-option words, unknown flags, missing and malformed values are
// errors naming the flag and the value. Recognises --help (sets *help_requested).
int config_parse_args(tb_config *cfg, int argc, char **argv, int *help_requested, tb_error *err);
int config_load_json(tb_config *cfg, const char *path, tb_error *err);
// A parsed --config file's object applied over cfg, key by key (what config_load_json does after
// parsing); source names it in the errors. The planner's embedded presets (experiments/planner/
// plan_models.h) load through it.
int config_apply_json(tb_config *cfg, json_t *root, const char *source, tb_error *err);
void config_resolve(tb_config *cfg);
// Megatron's virtual pipeline size from --num-layers-per-virtual-pipeline-stage: (layers per
// stage, counting the embedding and the loss when asked) / layers per virtual stage.
int config_virtual_stages_from_layers(const tb_config *cfg);
// Checks every rule (config_rules.c); on failure err lists each violated rule on its own line.
int config_validate(const tb_config *cfg, tb_error *err);
// The same rules, less those `skip` names: TB_RULES_SKIP_BUILD_LIMITS, this build's capacity
// (world_size <= 64, vocab_size <= 65536 for uint16 token files), and TB_RULES_SKIP_NOT_SUPPORTED,
// what the engine cannot run yet. The planner (experiments/planner/plan.h) asks both ways: the layout
// rules Megatron has (skip both), and whether this engine runs it (skip none), so the planner
// and the engine never disagree on a rule. config_validate(c, err) = config_validate_rules(c, 0, err).
#define TB_RULES_SKIP_BUILD_LIMITS 1u
#define TB_RULES_SKIP_NOT_SUPPORTED 2u
int config_validate_rules(const tb_config *cfg, unsigned skip, tb_error *err);
// The resolved config as written to config.json: every key of the table plus "derived".
json_t *config_to_json(const tb_config *cfg);
// --help text: every flag, its default and help, grouped.
void config_print_help(FILE *out, const char *program);
// Layers of each virtual pipeline stage k = chunk · pp + pp_rank (pp × max(vpp, 1) of them):
// the custom --pipeline-layout, or a uniform split (counting the embedding and the loss as
// layers when asked, as Megatron does). Returns the number of stages, or -1 with err set.
#define TB_MAX_PIPELINE_STAGES 256
int config_pipeline_split(const tb_config *cfg, int *layers, tb_error *err);

// The attention core a config runs: TB_ATTENTION_LOCAL or TB_ATTENTION_FLASH (auto's choice:
// flash, but local on --device cuda with head sizes over 1024, which the CUDA kernel does not
// take). The run header and config.json's derived "attention_core" name it.
int config_attention_core(const tb_config *cfg);

// Name of a choice value, e.g. config_choice_name("normalization", TB_NORM_RMSNORM).
const char *config_choice_name(const char *key, int value);
// Whether a choice Megatron names is refused as "not supported yet" in every layout (--help
// marks it), e.g. config_choice_not_supported("moe_token_dispatcher_type", "flex").
int config_choice_not_supported(const char *key, const char *choice);

// What the data-parallel group (dp x cp) shards: the optimizer state with the distributed
// optimizer (ZeRO-1) unless Megatron-FSDP's strategy is no_shard; the gradients and the
// parameters only as Megatron-FSDP's optim_grads (ZeRO-2) and optim_grads_params (ZeRO-3) say.
static inline int config_shards_optimizer(const tb_config *c) {
    return c->use_distributed_optimizer &&
           !(c->use_megatron_fsdp && c->data_parallel_sharding_strategy == TB_FSDP_NO_SHARD);
}
static inline int config_shards_grads(const tb_config *c) {
    return c->use_megatron_fsdp && c->data_parallel_sharding_strategy >= TB_FSDP_OPTIM_GRADS;
}
static inline int config_shards_params(const tb_config *c) {
    return c->use_megatron_fsdp && c->data_parallel_sharding_strategy == TB_FSDP_OPTIM_GRADS_PARAMS;
}

#endif
