#include "config/config.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <float.h>
#include <limits.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/fileio.h"

// ---------------------------------------------------------------------------------------
// The option table

#define OPT(flag, key, type, dflt, choices, group, help) \
    {flag, #key, type, offsetof(tb_config, key), sizeof(((tb_config *)0)->key), dflt, choices, group, NULL, help}

const tb_option tb_config_options[] = {
    // model
    OPT("--num-layers", num_layers, TB_OPT_INT, "4", NULL, "model", "number of transformer layers"),
    OPT("--hidden-size", hidden_size, TB_OPT_INT, "256", NULL, "model", "hidden size C"),
    OPT("--ffn-hidden-size", ffn_hidden_size, TB_OPT_INT, "0", NULL, "model",
        "MLP hidden size F (0: 4 x hidden size)"),
    OPT("--num-attention-heads", num_attention_heads, TB_OPT_INT, "4", NULL, "model",
        "attention heads NH"),
    OPT("--num-query-groups", num_query_groups, TB_OPT_INT, "0", NULL, "model",
        "key/value groups for grouped-query attention (0: one per head)"),
    OPT("--seq-length", seq_length, TB_OPT_INT, "128", NULL, "model", "sequence length T"),
    OPT("--max-position-embeddings", max_position_embeddings, TB_OPT_INT, "0", NULL, "model",
        "rows of the position-embedding table (0: seq length; 1024 for GPT-2 weights)"),
    OPT("--vocab-size", vocab_size, TB_OPT_INT, "50257", NULL, "model",
        "tokenizer vocabulary (256 for preprocess_data's byte-level files)"),
    OPT("--make-vocab-size-divisible-by", make_vocab_size_divisible_by, TB_OPT_INT, "128", NULL,
        "model", "pad the vocabulary to a multiple of this x tensor-parallel size"),
    OPT("--normalization", normalization, TB_OPT_CHOICE, "LayerNorm", "LayerNorm|RMSNorm", "model",
        "norm layer"),
    OPT("--norm-epsilon", norm_epsilon, TB_OPT_FLOAT, "1e-5", NULL, "model", "epsilon of the norms"),
    OPT("--swiglu", swiglu, TB_OPT_BOOL, "false", NULL, "model",
        "SwiGLU MLP (gated SiLU) instead of GELU"),
    OPT("--qk-layernorm", qk_layernorm, TB_OPT_BOOL, "false", NULL, "model",
        "normalize each head's queries and keys (LayerNorm or RMSNorm, as --normalization; one weight of head "
        "size for the queries, one for the keys) after the qkv projection, before rotary embedding"),
    OPT("--disable-bias-linear", disable_bias_linear, TB_OPT_BOOL, "false", NULL, "model",
        "no biases in the linear layers"),
    OPT("--untie-embeddings-and-output-weights", untie_embeddings_and_output_weights, TB_OPT_BOOL,
        "false", NULL, "model", "separate output-layer weight instead of the tied word embedding"),
    OPT("--position-embedding-type", position_embedding_type, TB_OPT_CHOICE, "learned_absolute",
        "learned_absolute|rope|none", "model", "position embedding"),
    OPT("--rotary-percent", rotary_percent, TB_OPT_FLOAT, "1.0", NULL, "model",
        "rope: share of each head's channels rotated (rotary dim = head size x this, even)"),
    OPT("--rotary-base", rotary_base, TB_OPT_INT, "10000", NULL, "model", "rope: base of the rotation frequencies"),
    OPT("--rotary-interleaved", rotary_interleaved, TB_OPT_BOOL, "false", NULL, "model",
        "rope: rotate channel pairs (2i, 2i+1) instead of (i, i + dim/2)"),
    OPT("--attention-backend", attention_backend, TB_OPT_CHOICE, "auto", "local|flash|auto", "model",
        "attention core: local (DotProductAttention, saves the T x T probabilities), flash (blocked, "
        "online softmax, memory linear in T) or auto: flash wherever it supports the configuration (head size "
        "up to 1024 on --device cuda), else local; the run header and config.json's derived attention_core say "
        "which"),
    OPT("--cp-comm-type", cp_comm_type, TB_OPT_CHOICE, "all_gather", "all_gather|p2p", "parallel",
        "context parallelism's K/V exchange: all_gather (every rank gathers the sequence's K and V) or p2p (a ring)"),
    OPT("--init-method-std", init_method_std, TB_OPT_FLOAT, "0.02", NULL, "model",
        "std of the normal weight init (output projections: std / sqrt(2 x layers))"),
    OPT("--hidden-dropout", hidden_dropout, TB_OPT_FLOAT, "0", NULL, "model",
        "dropout after projections (not supported yet: 0 only)"),
    OPT("--attention-dropout", attention_dropout, TB_OPT_FLOAT, "0", NULL, "model",
        "dropout on attention probabilities (not supported yet: 0 only)"),
    OPT("--num-experts", num_experts, TB_OPT_INT, "0", NULL, "model", "MoE experts per layer (0: dense)"),
    OPT("--moe-router-topk", moe_router_topk, TB_OPT_INT, "2", NULL, "moe", "experts each token is routed to (k)"),
    OPT("--moe-router-load-balancing-type", moe_router_load_balancing_type, TB_OPT_CHOICE, "aux_loss",
        "aux_loss|seq_aux_loss|global_aux_loss|sinkhorn|none", "moe",
        "load balancing: aux_loss (Switch/GShard loss per microbatch) or none"),
    OPT("--moe-aux-loss-coeff", moe_aux_loss_coeff, TB_OPT_FLOAT, "0", NULL, "moe",
        "coefficient of the load-balancing loss (0: the loss is reported, not trained on)"),
    OPT("--moe-router-pre-softmax", moe_router_pre_softmax, TB_OPT_BOOL, "false", NULL, "moe",
        "softmax over all experts before the top-k (else softmax over the k chosen logits)"),
    OPT("--moe-router-score-function", moe_router_score_function, TB_OPT_CHOICE, "softmax", "softmax|sigmoid", "moe",
        "router score function"),
    OPT("--moe-ffn-hidden-size", moe_ffn_hidden_size, TB_OPT_INT, "0", NULL, "moe",
        "each expert's MLP hidden size (0: ffn hidden size)"),
    OPT("--moe-layer-freq", moe_layer_freq, TB_OPT_INT, "1", NULL, "moe",
        "a MoE layer every N layers (layer l is MoE when l mod N = 0), the others dense"),
    OPT("--moe-token-dispatcher-type", moe_token_dispatcher_type, TB_OPT_CHOICE, "allgather", "allgather|alltoall|flex",
        "moe", "how tokens reach their experts across expert-parallel ranks"),
    OPT("--moe-expert-capacity-factor", moe_expert_capacity_factor, TB_OPT_FLOAT, "0", NULL, "moe",
        "tokens an expert takes, as a multiple of its even share (0: no capacity, no token dropped)"),
    OPT("--moe-token-drop-policy", moe_token_drop_policy, TB_OPT_CHOICE, "probs", "probs|position", "moe",
        "which tokens over capacity are dropped: the lowest probabilities, or the last positions"),
    OPT("--moe-pad-expert-input-to-capacity", moe_pad_expert_input_to_capacity, TB_OPT_BOOL, "false", NULL, "moe",
        "pad every expert's input to its capacity"),
    OPT("--moe-shared-expert-intermediate-size", moe_shared_expert_intermediate_size, TB_OPT_INT, "0", NULL, "moe",
        "hidden size of the shared experts every token goes through (0: none)"),
    OPT("--moe-grouped-gemm", moe_grouped_gemm, TB_OPT_BOOL, "false", NULL, "moe",
        "the experts' GEMMs as one grouped GEMM"),
    // parallel
    OPT("--world-size", world_size, TB_OPT_INT, "0", NULL, "parallel",
        "number of ranks (0: tp x cp x pp; under mpirun: processes x ranks per process); data-parallel size = "
        "world / (tp x cp x pp)"),
    OPT("--tensor-model-parallel-size", tensor_model_parallel_size, TB_OPT_INT, "1", NULL, "parallel",
        "tensor-parallel size tp"),
    OPT("--pipeline-model-parallel-size", pipeline_model_parallel_size, TB_OPT_INT, "1", NULL,
        "parallel", "pipeline-parallel size pp"),
    OPT("--virtual-pipeline-model-parallel-size", virtual_pipeline_model_parallel_size, TB_OPT_INT, "0",
        NULL, "parallel", "model chunks per pipeline rank (0: no interleaving)"),
    OPT("--num-layers-per-virtual-pipeline-stage", num_layers_per_virtual_pipeline_stage, TB_OPT_INT, "0", NULL,
        "parallel", "layers per virtual stage (sets the virtual pipeline size; 0: unused)"),
    OPT("--pipeline-layout", pipeline_layout, TB_OPT_STRING, "", NULL, "parallel",
        "layers per pipeline stage (per virtual stage, in model order, when interleaved), e.g. 3,5,2,2"),
    OPT("--account-for-embedding-in-pipeline-split", account_for_embedding_in_pipeline_split, TB_OPT_BOOL,
        "false", NULL, "parallel", "count the embedding as a layer of the first stage when splitting"),
    OPT("--account-for-loss-in-pipeline-split", account_for_loss_in_pipeline_split, TB_OPT_BOOL, "false", NULL,
        "parallel", "count the output layer and loss as a layer of the last stage when splitting"),
    OPT("--context-parallel-size", context_parallel_size, TB_OPT_INT, "1", NULL, "parallel",
        "context-parallel size cp"),
    OPT("--expert-model-parallel-size", expert_model_parallel_size, TB_OPT_INT, "1", NULL, "parallel",
        "expert-parallel size ep"),
    OPT("--expert-tensor-parallel-size", expert_tensor_parallel_size, TB_OPT_INT, "0", NULL, "parallel",
        "tensor-parallel size of the experts etp (0: tensor-parallel size)"),
    OPT("--sequence-parallel", sequence_parallel, TB_OPT_BOOL, "false", NULL, "parallel",
        "shard norm regions along the sequence across the tensor-parallel group"),
    OPT("--use-distributed-optimizer", use_distributed_optimizer, TB_OPT_BOOL, "false", NULL, "parallel",
        "shard optimizer state and master weights across data-parallel ranks"),
    OPT("--overlap-grad-reduce", overlap_grad_reduce, TB_OPT_BOOL, "false", NULL, "parallel",
        "reduce data-parallel gradients in buckets on a communication thread, each as soon as its last gradient "
        "is final, overlapped with the rest of the backward"),
    OPT("--overlap-param-gather", overlap_param_gather, TB_OPT_BOOL, "false", NULL, "parallel",
        "all-gather the distributed optimizer's updated parameters bucket by bucket on the communication thread, "
        "each waited for by the next forward where it first reads them"),
    OPT("--ddp-bucket-size", ddp_bucket_size, TB_OPT_INT, "1000000", NULL, "parallel",
        "gradient elements per bucket (at least; cut at parameter boundaries, with the distributed optimizer at "
        "multiples of dp: its shard is a slice of every bucket)"),
    OPT("--use-megatron-fsdp", use_megatron_fsdp, TB_OPT_BOOL, "false", NULL, "parallel",
        "Megatron-FSDP: the data-parallel state sharded per FSDP unit (the embedding, each transformer layer, the "
        "output layer) as --data-parallel-sharding-strategy says"),
    OPT("--data-parallel-sharding-strategy", data_parallel_sharding_strategy, TB_OPT_CHOICE, "no_shard",
        "no_shard|optim|optim_grads|optim_grads_params", "parallel",
        "with --use-megatron-fsdp: shard nothing (DDP), the optimizer state (ZeRO-1), it and the gradients (ZeRO-2: "
        "reduce-scattered each microbatch), or also the parameters (ZeRO-3: all-gathered per unit before its forward "
        "and its backward, freed after)"),
    OPT("--ranks-per-process", ranks_per_process, TB_OPT_INT, "0", NULL, "parallel",
        "under mpirun: rank threads per process, ranks p*K .. p*K+K-1 in process p (0: 1 under mpirun; "
        "without mpirun the one process holds every rank)"),
    OPT("--mpi-collectives", mpi_collectives, TB_OPT_CHOICE, "native", "native|exact", "parallel",
        "under mpirun, a collective on a group that spans processes: native (MPI's own collective on the caller's "
        "buffers, its timeout the watchdog's; groups with one member per process) or exact (the local backend's algorithm over "
        "point-to-point messages: the same bits as rank threads)"),
    OPT("--collective-timeout", collective_timeout, TB_OPT_FLOAT, "300", NULL, "parallel",
        "seconds a communicator call may take before the run ends with a hang report"),
    OPT("--inject-stall", inject_stall, TB_OPT_STRING, "", NULL, "parallel",
        "RANK:STEP: that rank stops before its next collective at that step (fault drill)"),
    OPT("--debug-slow-data", debug_slow_data, TB_OPT_STRING, "", NULL, "parallel",
        "RANK:MS: that rank's data loading takes MS ms longer every step, so its peers wait for it in the next "
        "collective (the slow-peer drill)"),
    OPT("--debug-slow-link", debug_slow_link, TB_OPT_STRING, "", NULL, "parallel",
        "GROUP:MS: every call on that group kind (tp, cp, dp, dp_cp, pp, mp, embedding, world, pp_grad) takes MS ms "
        "longer once its members are in, on every member (the slow-link drill)"),
    OPT("--print-rank-layout", print_rank_layout, TB_OPT_BOOL, "false", NULL, "parallel",
        "print rank -> coordinates -> members of each group, then exit without training"),
    // training
    OPT("--micro-batch-size", micro_batch_size, TB_OPT_INT, "4", NULL, "training", "micro batch size B"),
    OPT("--global-batch-size", global_batch_size, TB_OPT_INT, "0", NULL, "training",
        "samples per step (0: micro batch x dp); microbatches = global / (micro x dp)"),
    OPT("--train-iters", train_iters, TB_OPT_INT, "20", NULL, "training", "optimizer steps"),
    OPT("--lr", lr, TB_OPT_FLOAT, "3e-4", NULL, "training", "peak learning rate"),
    OPT("--min-lr", min_lr, TB_OPT_FLOAT, "0", NULL, "training", "learning rate at the end of decay"),
    OPT("--lr-warmup-iters", lr_warmup_iters, TB_OPT_INT, "0", NULL, "training", "linear warm-up steps"),
    OPT("--lr-decay-iters", lr_decay_iters, TB_OPT_INT, "0", NULL, "training",
        "steps over which the lr decays (0: train iters)"),
    OPT("--lr-decay-style", lr_decay_style, TB_OPT_CHOICE, "cosine", "cosine|linear|constant", "training",
        "decay after warm-up"),
    OPT("--weight-decay", weight_decay, TB_OPT_FLOAT, "0.01", NULL, "training",
        "AdamW weight decay (not applied to norms and biases)"),
    OPT("--adam-beta1", adam_beta1, TB_OPT_FLOAT, "0.9", NULL, "training", "AdamW beta1"),
    OPT("--adam-beta2", adam_beta2, TB_OPT_FLOAT, "0.999", NULL, "training", "AdamW beta2"),
    OPT("--adam-eps", adam_eps, TB_OPT_FLOAT, "1e-8", NULL, "training", "AdamW epsilon"),
    OPT("--clip-grad", clip_grad, TB_OPT_FLOAT, "1.0", NULL, "training",
        "clip the global gradient norm to this (0: off)"),
    OPT("--check-for-nan-in-loss-and-grad", check_for_nan_in_loss_and_grad, TB_OPT_BOOL, "true", NULL, "training",
        "stop at a NaN or Inf loss or gradient norm, naming the step, microbatch and rank (as Megatron; "
        "--no-check-for-nan-in-loss-and-grad trains on)"),
    OPT("--seed", seed, TB_OPT_INT64, "1234", NULL, "training", "random seed (init, synthetic data)"),
    OPT("--device", device, TB_OPT_CHOICE, "cpu", "cpu|cuda", "training",
        "where each rank's tensors live: cpu, or cuda (rank r on GPU r mod the visible count; needs the CUDA "
        "build and a GPU; docs/ARCHITECTURE.md, \"CUDA backend\", says what runs there)"),
    OPT("--bf16", bf16, TB_OPT_BOOL, "false", NULL, "training",
        "bf16 mixed precision (Megatron's --bf16): the GEMMs on bf16 copies of their operands with fp32 "
        "accumulation; master weights, main_grad and Adam state fp32 (--device cuda only)"),
    OPT("--fp16", fp16, TB_OPT_BOOL, "false", NULL, "training",
        "fp16 mixed precision as --bf16 with fp16 GEMM operands, and Megatron's dynamic loss scaling (initial "
        "2^32, window 1000, hysteresis 2, min 1; a step whose gradients overflow is skipped) (--device cuda only)"),
    OPT("--recompute-granularity", recompute_granularity, TB_OPT_CHOICE, "none", "none|selective|full",
        "training", "activation recompute: selective = attention core, full = whole layers"),
    OPT("--recompute-method", recompute_method, TB_OPT_CHOICE, "none", "none|uniform|block", "training",
        "full recompute: uniform chunks of N layers, or the first N layers (block)"),
    OPT("--recompute-num-layers", recompute_num_layers, TB_OPT_INT, "0", NULL, "training",
        "N of --recompute-method"),
    // data
    OPT("--data-path", data_path, TB_OPT_STRING, "", NULL, "data",
        "llm.c token file (make one with preprocess_data); empty: synthetic tokens"),
    OPT("--mock-data", mock_data, TB_OPT_BOOL, "false", NULL, "data",
        "seeded synthetic token stream (the default when --data-path is empty)"),
    // I/O and instrumentation
    OPT("--save", save, TB_OPT_STRING, "", NULL, "io",
        "checkpoint directory: the sharded model and optimizer state, every --save-interval steps and at the end"),
    OPT("--save-interval", save_interval, TB_OPT_INT, "0", NULL, "io",
        "steps between checkpoints (0: only at the end of training)"),
    OPT("--exit-interval", exit_interval, TB_OPT_INT, "0", NULL, "io",
        "stop after the first step divisible by N, saving a checkpoint first when --save is set (0: run to "
        "--train-iters)"),
    OPT("--async-save", async_save, TB_OPT_BOOL, "false", NULL, "io",
        "copy the state out, then write the checkpoint in the background while training goes on"),
    OPT("--save-optim", save_optim, TB_OPT_BOOL, "true", NULL, "io",
        "checkpoints hold the optimizer state (--no-save-optim: the model only)"),
    OPT("--load-optim", load_optim, TB_OPT_BOOL, "true", NULL, "io",
        "--load restores the optimizer state (--no-load-optim: starts a fresh optimizer)"),
    OPT("--debug-slow-write", debug_slow_write, TB_OPT_STRING, "", NULL, "io",
        "RANK:MS: that rank's checkpoint writes take MS ms longer (the slow-writer drill)"),
    OPT("--dump-tensors", dump_tensors, TB_OPT_STRING, "", NULL, "io",
        "STEPS (e.g. 1 or 1,3): write those steps' logical tensors (module outputs, gradients, parameters) to "
        "tensors/ in the run directory, for tracebook bisect"),
    OPT("--debug-inject-fault", debug_inject_fault, TB_OPT_CHOICE, "none",
        "none|row_parallel_bias_per_rank|skip_sp_grad_all_reduce|vocab_ce_local_sum", "io",
        "a known tensor-parallel bug on purpose, for bisect's drill"),
    OPT("--save-hf", save_hf, TB_OPT_STRING, "", NULL, "io",
        "write the final weights to this safetensors file (Hugging Face GPT-2 names)"),
    OPT("--load", load, TB_OPT_STRING, "", NULL, "io",
        "resume from a checkpoint directory (any layout), or initialise weights from a safetensors file"),
    OPT("--run-dir", run_dir, TB_OPT_STRING, "", NULL, "io",
        "run directory, new or empty (none given: artifacts/adhoc/<timestamp>)"),
    OPT("--log-interval", log_interval, TB_OPT_INT, "1", NULL, "io", "print a table row every N steps"),
    OPT("--memory-cap", memory_cap, TB_OPT_BYTES, "0", NULL, "io",
        "per-rank memory cap in bytes (K/M/G suffixes); over it → OOM report (0: none)"),
    OPT("--peak-tflops", peak_tflops, TB_OPT_FLOAT, "0", NULL, "io",
        "per-rank peak TFLOP/s that MFU is measured against (0: MFU not reported)"),
    OPT("--num-threads", num_threads, TB_OPT_INT, "0", NULL, "io",
        "CPU threads for BLAS and kernels (0: all cores)"),
    TB_OPTIONS_END,
};

static const tb_option *find_by_flag(const char *flag, size_t len) {
    return tb_options_find_flag(tb_config_options, flag, len);
}

static const tb_option *find_by_key(const char *key) { return tb_options_find_key(tb_config_options, key); }

const char *config_choice_name(const char *key, int value) {
    // a ring of buffers, so several names can appear in one printf
    static _Thread_local char ring[8][64];
    static _Thread_local unsigned next;
    char *buf = ring[next++ % 8];
    const tb_option *o = find_by_key(key);
    return o && o->type == TB_OPT_CHOICE ? tb_choice_at(o->choices, value, buf, sizeof ring[0]) : "?";
}

void config_defaults(tb_config *cfg) {
    memset(cfg, 0, sizeof *cfg);
    tb_error err;
    if (tb_options_defaults(cfg, tb_config_options, &err) != 0) {
        // a bad default in the table is a bug of this file, caught by any test that runs
        fprintf(stderr, "%s\n", err.msg);
        abort();
    }
}

int config_load_json(tb_config *cfg, const char *path, tb_error *err) {
    // a FIFO or a device would block or never end: refused by what it is before any read
    int fd = tb_open_regular(path, "a JSON config file is expected", NULL, err);
    if (fd < 0) return -1;
    json_error_t jerr;
    json_t *root = json_loadfd(fd, JSON_REJECT_DUPLICATES, &jerr);  // a key twice: which one was meant?
    close(fd);
    if (!root) {
        if (jerr.line < 0) return tb_fail(err, "%s: %s", path, jerr.text);
        return tb_fail(err, "%s:%d:%d: %s", path, jerr.line, jerr.column, jerr.text);
    }
    const int rc = config_apply_json(cfg, root, path, err);
    json_decref(root);
    return rc;
}

int config_apply_json(tb_config *cfg, json_t *root, const char *source, tb_error *err) {
    if (!json_is_object(root)) return tb_fail(err, "%s: expected a JSON object of config keys", source);
    const char *key;
    json_t *v;
    json_object_foreach(root, key, v) {
        if (!strcmp(key, "derived")) continue;  // written by config_to_json; recomputed on load
        const tb_option *o = find_by_key(key);
        char where[TB_PATH_MAX + 128];
        snprintf(where, sizeof where, "%s: key '%s'", source, key);
        if (!o) return tb_fail(err, "%s: unknown config key (see pretrain_gpt --help)", where);
        if (tb_option_set_json(cfg, o, v, where, err) != 0) return -1;
    }
    return 0;
}

// The flags a command line gave so far, to refuse one given twice (config_parse_args).
typedef struct given_flags {
    int *at;               // [option] the argument that gave it (1-based), 0: not given
    const char **value;    // [option] the value it gave
} given_flags;

// Notes option o given by argument i with value v; -1 with err naming both values when it was
// given before: which one was meant cannot be told (argparse would keep the last silently).
static int note_given(given_flags *g, const tb_option *o, int i, const char *v, tb_error *err) {
    const size_t k = (size_t)(o - tb_config_options);
    if (g->at[k])
        return tb_fail(err, "flag %s given twice: '%s' (argument %d) and '%s' (argument %d); give it once", o->flag,
                       g->value[k], g->at[k], v, i);
    g->at[k] = i, g->value[k] = v;
    return 0;
}

static int parse_flags(tb_config *cfg, int argc, char **argv, int *help_requested, given_flags *given,
                       tb_error *err);

int config_parse_args(tb_config *cfg, int argc, char **argv, int *help_requested, tb_error *err) {
    size_t n = 0;
    while (tb_config_options[n].flag) n++;
    given_flags given = {calloc(n + 1, sizeof *given.at), calloc(n + 1, sizeof *given.value)};
    if (!given.at || !given.value) {
        free(given.at), free(given.value);
        return tb_fail(err, "cannot allocate the table of %zu flags", n);
    }
    const int rc = parse_flags(cfg, argc, argv, help_requested, &given, err);
    free(given.at), free(given.value);
    return rc;
}

static int parse_flags(tb_config *cfg, int argc, char **argv, int *help_requested, given_flags *given,
                       tb_error *err) {
    *help_requested = 0;
    // --config first, wherever it is, so the flags override the file. (Values of other
    // flags are skipped: `--save --config` saves to a file named --config.)
    const char *first = NULL;  // one --config: a second silently overrode the first, key by key
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *file = NULL;
        if (!strcmp(a, "--config")) {
            if (i + 1 >= argc) return tb_fail(err, "flag --config: missing value (a JSON file)");
            file = argv[++i];
        } else if (!strncmp(a, "--config=", 9)) {
            file = a + 9;
        } else if (!strncmp(a, "--", 2) && !strchr(a, '=')) {
            const tb_option *o = find_by_flag(a, strlen(a));
            if (o && o->type != TB_OPT_BOOL) i++;  // (an unknown --no-FLAG takes no value either)
        }
        if (file && first)
            return tb_fail(err, "flag --config given twice ('%s', then '%s'): give one file (flags override it)",
                           first, file);
        if (file) first = file;
        if (file && config_load_json(cfg, file, err) != 0) return tb_fail_prefix(err, "flag --config");
    }
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            *help_requested = 1;
            continue;
        }
        if (!strcmp(a, "--config")) {
            i++;
            continue;
        }
        if (!strncmp(a, "--config=", 9)) continue;
        if (strncmp(a, "--", 2) != 0)
            return tb_fail(err, "argument %d: '%s' is not a flag (flags start with --; see --help)", i, a);
        const char *eq = strchr(a, '=');
        size_t len = eq ? (size_t)(eq - a) : strlen(a);
        const tb_option *o = find_by_flag(a, len);
        const int flag_at = i;  // (i moves to the value's argument)
        // --no-FLAG clears a boolean FLAG, as Megatron-LM's argparse flags do
        char positive[128];
        if (!o && !eq && !strncmp(a, "--no-", 5) && snprintf(positive, sizeof positive, "--%s", a + 5) < (int)sizeof positive) {
            const tb_option *p = find_by_flag(positive, strlen(positive));
            if (p && p->type == TB_OPT_BOOL) {
                char where[160];
                snprintf(where, sizeof where, "flag %s", a);
                if (note_given(given, p, flag_at, "false", err) != 0) return -1;
                if (tb_option_set(cfg, p, "false", where, err) != 0) return -1;
                continue;
            }
        }
        if (!o) return tb_fail(err, "unknown flag '%.*s' (see pretrain_gpt --help)", (int)len, a);
        char where[128];
        snprintf(where, sizeof where, "flag %s", o->flag);
        const char *value;
        if (eq) value = eq + 1;
        else if (o->type == TB_OPT_BOOL) value = "true";
        else if (i + 1 < argc) value = argv[++i];
        else return tb_fail(err, "%s: missing value", where);
        if (note_given(given, o, flag_at, value, err) != 0 || tb_option_set(cfg, o, value, where, err) != 0) return -1;
    }
    return 0;
}

// ---------------------------------------------------------------------------------------
// Derived values and rules

// Megatron's derivation of the virtual pipeline size from --num-layers-per-virtual-pipeline-stage:
// (layers per stage, counting the embedding and the loss when asked) / layers per virtual stage.
int config_virtual_stages_from_layers(const tb_config *c) {
    int64_t total = (int64_t)c->num_layers + c->account_for_embedding_in_pipeline_split +
                    c->account_for_loss_in_pipeline_split;
    return (int)(total / c->pipeline_model_parallel_size / c->num_layers_per_virtual_pipeline_stage);
}

// Products of user-given ints, computed in 64 bits and saturated to INT_MAX so that absurd
// inputs never overflow here; config_validate then refuses them by their size limits.
static int sat(int64_t v) { return v > INT_MAX ? INT_MAX : v < INT_MIN ? INT_MIN : (int)v; }

int config_attention_core(const tb_config *c) {
    if (c->attention_backend != TB_ATTENTION_AUTO) return c->attention_backend;
    int head = c->num_attention_heads > 0 ? c->hidden_size / c->num_attention_heads : 0;
    return c->device == TB_DEVICE_CUDA && head > 1024 ? TB_ATTENTION_LOCAL : TB_ATTENTION_FLASH;
}

void config_resolve(tb_config *c) {
    if (c->ffn_hidden_size == 0) c->ffn_hidden_size = sat(4 * (int64_t)c->hidden_size);
    if (c->num_query_groups == 0) c->num_query_groups = c->num_attention_heads;
    if (c->num_experts > 0 && c->moe_ffn_hidden_size == 0) c->moe_ffn_hidden_size = c->ffn_hidden_size;
    if (c->expert_tensor_parallel_size == 0) c->expert_tensor_parallel_size = c->tensor_model_parallel_size;
    if (c->max_position_embeddings == 0) c->max_position_embeddings = c->seq_length;
    if (c->lr_decay_iters == 0) c->lr_decay_iters = c->train_iters;
    if (c->num_layers_per_virtual_pipeline_stage > 0 && c->pipeline_model_parallel_size > 0 &&
        c->virtual_pipeline_model_parallel_size == 0)
        c->virtual_pipeline_model_parallel_size = config_virtual_stages_from_layers(c);
    int64_t model_parallel = (int64_t)c->tensor_model_parallel_size * c->context_parallel_size *
                             c->pipeline_model_parallel_size;
    if (c->world_size == 0) c->world_size = sat(model_parallel);
    c->data_parallel_size = model_parallel > 0 ? sat(c->world_size / model_parallel) : 0;
    if (c->global_batch_size == 0) c->global_batch_size = sat((int64_t)c->micro_batch_size * c->data_parallel_size);
    int64_t per_microbatch = (int64_t)c->micro_batch_size * c->data_parallel_size;
    c->num_microbatches = per_microbatch > 0 ? sat(c->global_batch_size / per_microbatch) : 0;
    int64_t multiple = (int64_t)c->make_vocab_size_divisible_by * c->tensor_model_parallel_size;
    c->padded_vocab_size =
        multiple > 0 ? sat((c->vocab_size + multiple - 1) / multiple * multiple) : c->vocab_size;
}

int config_pipeline_split(const tb_config *c, int *layers, tb_error *err) {
    const int pp = c->pipeline_model_parallel_size, v = c->virtual_pipeline_model_parallel_size > 1
                                                               ? c->virtual_pipeline_model_parallel_size
                                                               : 1;
    const int64_t stages64 = (int64_t)pp * v;
    if (stages64 < 1 || stages64 > TB_MAX_PIPELINE_STAGES)
        return tb_fail(err, "pipeline stages (%lld) must be between 1 and %d", (long long)stages64,
                       TB_MAX_PIPELINE_STAGES);
    const int stages = (int)stages64;
    if (c->pipeline_layout[0]) {
        if (c->account_for_embedding_in_pipeline_split || c->account_for_loss_in_pipeline_split)
            return tb_fail(err, "pipeline_layout '%s' and account_for_*_in_pipeline_split are exclusive",
                           c->pipeline_layout);
        int n = 0, sum = 0;
        const char *p = c->pipeline_layout;
        while (*p) {
            char *end;
            long v_ = *p >= '0' && *p <= '9' ? strtol(p, &end, 10) : -1;  // digits only
            if (v_ < 0 || v_ > c->num_layers || (*end && *end != ',') || (*end == ',' && !end[1]))
                return tb_fail(err, "pipeline_layout '%s': entry %d is not a layer count", c->pipeline_layout, n + 1);
            if (n == stages)
                return tb_fail(err, "pipeline_layout '%s' has more than %d entries (pipeline_model_parallel_size %d "
                                    "x virtual stages %d)", c->pipeline_layout, stages, pp, v);
            layers[n++] = (int)v_;
            sum += (int)v_;
            p = *end ? end + 1 : end;
        }
        if (n != stages)
            return tb_fail(err, "pipeline_layout '%s' has %d entries, needs %d (pipeline_model_parallel_size %d x "
                                "virtual stages %d)", c->pipeline_layout, n, stages, pp, v);
        if (sum != c->num_layers)
            return tb_fail(err, "pipeline_layout '%s' sums to %d layers, num_layers is %d", c->pipeline_layout, sum,
                           c->num_layers);
        return stages;
    }
    const int emb = c->account_for_embedding_in_pipeline_split, loss = c->account_for_loss_in_pipeline_split;
    const int total = c->num_layers + emb + loss;
    if (total % stages != 0) {
        if (emb || loss)
            return tb_fail(err, "num_layers (%d) + embedding (%d) + loss (%d) must be divisible by pipeline stages (%d)",
                           c->num_layers, emb, loss, stages);
        return tb_fail(err, "num_layers (%d) must be divisible by %s (%d)", c->num_layers,
                       v > 1 ? "pipeline_model_parallel_size x virtual_pipeline_model_parallel_size"
                             : "pipeline_model_parallel_size",
                       stages);
    }
    for (int k = 0; k < stages; k++) layers[k] = total / stages;
    layers[0] -= emb;
    layers[stages - 1] -= loss;
    if (layers[0] < 0 || layers[stages - 1] < 0)
        return tb_fail(err, "accounting for the embedding and loss leaves a stage with no layers to give (%d per stage)",
                       total / stages);
    return stages;
}

// ---------------------------------------------------------------------------------------
// Output

json_t *config_to_json(const tb_config *cfg) {
    json_t *root = json_object();
    for (const tb_option *o = tb_config_options; o->flag; o++)
        json_object_set_new(root, o->key, tb_option_to_json(cfg, o));
    json_object_set_new(root, "derived",
                        json_pack("{s:i, s:i, s:i, s:s, s:s}", "data_parallel_size", cfg->data_parallel_size,
                                  "num_microbatches", cfg->num_microbatches, "padded_vocab_size",
                                  cfg->padded_vocab_size, "global_batch_formula",
                                  "global_batch_size = micro_batch_size x num_microbatches x "
                                  "data_parallel_size",
                                  "attention_core", config_choice_name("attention_backend",
                                                                       config_attention_core(cfg))));
    return root;
}

// The choices Megatron names that this engine refuses as "not supported yet" in every layout
// (the rules that refuse them: config_moe.c): --help marks them, and test_config checks both
// ways against the rules.
static const struct {
    const char *key, *choice;
} not_supported_choices[] = {
    {"moe_router_load_balancing_type", "global_aux_loss"},
    {"moe_router_load_balancing_type", "sinkhorn"},
    {"moe_token_dispatcher_type", "flex"},
};

int config_choice_not_supported(const char *key, const char *choice) {
    for (size_t i = 0; i < sizeof not_supported_choices / sizeof *not_supported_choices; i++)
        if (!strcmp(not_supported_choices[i].key, key) && !strcmp(not_supported_choices[i].choice, choice)) return 1;
    return 0;
}

// An option's choices as --help lists them: "a|b (not supported yet)|c".
static void choices_text(const tb_option *o, char *buf, size_t len) {
    size_t at = 0;
    buf[0] = '\0';
    char one[64];
    int count = 1;
    for (const char *c = o->choices; *c; c++) count += *c == '|';
    for (int i = 0; i < count; i++) {
        tb_choice_at(o->choices, i, one, sizeof one);
        const int n = snprintf(buf + at, len - at, "%s%s%s", i ? "|" : "", one,
                               config_choice_not_supported(o->key, one) ? " (not supported yet)" : "");
        if (n < 0 || (size_t)n >= len - at) break;
        at += (size_t)n;
    }
}

// One section of --help: the flags of `group`, in table order.
static void print_section(FILE *out, const char *group) {
    int header = 0;
    for (const tb_option *o = tb_config_options; o->flag; o++) {
        if (strcmp(o->group, group)) continue;
        if (!header++) fprintf(out, "\n%s:\n", group);
        char lhs[256];  // a flag with its choices, whole
        if (o->type == TB_OPT_BOOL) snprintf(lhs, sizeof lhs, "%s", o->flag);
        else if (o->type == TB_OPT_CHOICE) {
            char choices[192];
            choices_text(o, choices, sizeof choices);
            snprintf(lhs, sizeof lhs, "%s {%s}", o->flag, choices);
        }
        else snprintf(lhs, sizeof lhs, "%s VALUE", o->flag);
        fprintf(out, "  %-44s %s (default: %s)\n", lhs, o->help, o->default_value[0] ? o->default_value : "\"\"");
    }
}

void config_print_help(FILE *out, const char *program) {
    fprintf(out,
            "usage: %s [--config FILE.json] [--FLAG VALUE ...]\n\n"
            "Trains a GPT with Megatron-Core's concepts. Flags follow Megatron-LM's names; a JSON\n"
            "config file uses the same keys with underscores, and flags override it.\n",
            program);
    // each section once, in the order of Megatron-LM's arguments.py (network size, training,
    // checkpointing, distributed, data, MoE); a section not named there after them, in table order
    static const char *const sections[] = {"model", "training", "io", "parallel", "data", "moe"};
    const size_t nsections = sizeof sections / sizeof *sections;
    for (size_t k = 0; k < nsections; k++) print_section(out, sections[k]);
    for (const tb_option *o = tb_config_options; o->flag; o++) {
        size_t k = 0;
        while (k < nsections && strcmp(sections[k], o->group)) k++;
        const tb_option *first = tb_config_options;
        while (strcmp(first->group, o->group)) first++;
        if (k == nsections && first == o) print_section(out, o->group);  // (one not in the list)
    }
    fprintf(out, "\nother:\n  %-44s %s\n  %-44s %s\n  %-44s %s\n  %-44s %s\n", "--config FILE.json",
            "load settings from a JSON file (keys with underscores)", "--build-info",
            "print this binary's build (compiler, codegen flags, BLAS kernel, CPU ISA) as JSON; alone", "--version",
            "print the version and the git commit this binary was built from; alone", "--help", "this text");
}
