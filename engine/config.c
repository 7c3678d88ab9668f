#include "config.h"

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

#include "config_rules.h"
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
    OPT("--attention-backend", attention_backend, TB_OPT_CHOICE, "local", "local|flash", "model",
        "attention core: local (DotProductAttention, saves the T x T probabilities) or flash (blocked, "
        "online softmax, memory linear in T)"),
    OPT("--cp-comm-type", cp_comm_type, TB_OPT_CHOICE, "all_gather", "all_gather|p2p", "parallel",
        "context parallelism's K/V exchange: all_gather (every rank gathers the sequence's K and V) or p2p (a ring)"),
    OPT("--init-method-std", init_method_std, TB_OPT_FLOAT, "0.02", NULL, "model",
        "std of the normal weight init (output projections: std / sqrt(2 x layers))"),
    OPT("--hidden-dropout", hidden_dropout, TB_OPT_FLOAT, "0", NULL, "model", "dropout after projections"),
    OPT("--attention-dropout", attention_dropout, TB_OPT_FLOAT, "0", NULL, "model",
        "dropout on attention probabilities"),
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
        "run directory (empty: artifacts/adhoc/<timestamp>)"),
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
    json_t *root = json_loadfd(fd, 0, &jerr);
    close(fd);
    if (!root) {
        if (jerr.line < 0) return tb_fail(err, "%s: %s", path, jerr.text);
        return tb_fail(err, "%s:%d:%d: %s", path, jerr.line, jerr.column, jerr.text);
    }
    if (!json_is_object(root)) {
        json_decref(root);
        return tb_fail(err, "%s: expected a JSON object of config keys", path);
    }
    const char *key;
    json_t *v;
    json_object_foreach(root, key, v) {
        if (!strcmp(key, "derived")) continue;  // written by config_to_json; recomputed on load
        const tb_option *o = find_by_key(key);
        char where[TB_PATH_MAX + 128];
        snprintf(where, sizeof where, "%s: key '%s'", path, key);
        if (!o) {
            json_decref(root);
            return tb_fail(err, "%s: unknown config key (see pretrain_gpt --help)", where);
        }
        if (tb_option_set_json(cfg, o, v, where, err) != 0) {
            json_decref(root);
            return -1;
        }
    }
    json_decref(root);
    return 0;
}

int config_parse_args(tb_config *cfg, int argc, char **argv, int *help_requested, tb_error *err) {
    *help_requested = 0;
    // --config first, wherever it is, so the flags override the file. (Values of other
    // flags are skipped: `--save --config` saves to a file named --config.)
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
        // --no-FLAG clears a boolean FLAG, as Megatron-LM's argparse flags do
        char positive[128];
        if (!o && !eq && !strncmp(a, "--no-", 5) && snprintf(positive, sizeof positive, "--%s", a + 5) < (int)sizeof positive) {
            const tb_option *p = find_by_flag(positive, strlen(positive));
            if (p && p->type == TB_OPT_BOOL) {
                char where[160];
                snprintf(where, sizeof where, "flag %s", a);
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
        if (tb_option_set(cfg, o, value, where, err) != 0) return -1;
    }
    return 0;
}

// ---------------------------------------------------------------------------------------
// Derived values and rules

// Megatron's derivation of the virtual pipeline size from --num-layers-per-virtual-pipeline-stage:
// (layers per stage, counting the embedding and the loss when asked) / layers per virtual stage.
static int virtual_stages_from_layers(const tb_config *c) {
    int64_t total = (int64_t)c->num_layers + c->account_for_embedding_in_pipeline_split +
                    c->account_for_loss_in_pipeline_split;
    return (int)(total / c->pipeline_model_parallel_size / c->num_layers_per_virtual_pipeline_stage);
}

// Products of user-given ints, computed in 64 bits and saturated to INT_MAX so that absurd
// inputs never overflow here; config_validate then refuses them by their size limits.
static int sat(int64_t v) { return v > INT_MAX ? INT_MAX : v < INT_MIN ? INT_MIN : (int)v; }

void config_resolve(tb_config *c) {
    if (c->ffn_hidden_size == 0) c->ffn_hidden_size = sat(4 * (int64_t)c->hidden_size);
    if (c->num_query_groups == 0) c->num_query_groups = c->num_attention_heads;
    if (c->num_experts > 0 && c->moe_ffn_hidden_size == 0) c->moe_ffn_hidden_size = c->ffn_hidden_size;
    if (c->expert_tensor_parallel_size == 0) c->expert_tensor_parallel_size = c->tensor_model_parallel_size;
    if (c->max_position_embeddings == 0) c->max_position_embeddings = c->seq_length;
    if (c->lr_decay_iters == 0) c->lr_decay_iters = c->train_iters;
    if (c->num_layers_per_virtual_pipeline_stage > 0 && c->pipeline_model_parallel_size > 0 &&
        c->virtual_pipeline_model_parallel_size == 0)
        c->virtual_pipeline_model_parallel_size = virtual_stages_from_layers(c);
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

void violated(rules *r, const char *fmt, ...) {
    r->count++;
    if (!r->err) return;
    size_t cap = sizeof r->err->msg;
    if (r->used + 2 >= cap) return;
    if (r->count > 1) r->err->msg[r->used++] = '\n';
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(r->err->msg + r->used, cap - r->used, fmt, ap);
    va_end(ap);
    if (n > 0) r->used += (size_t)n < cap - r->used ? (size_t)n : cap - r->used - 1;
}

// Precision and --device cuda: what the CUDA backend runs (backend/cuda/cuda_backend.h) and
// what it does not yet. Whether this build has the backend and a GPU is visible is checked
// where a run starts (tb_cuda_check_device_flag), not here: the planner and runbooks validate
// GPU configurations on any machine.
static void device_not_supported_yet(rules *r, const tb_config *c) {
    if (c->bf16 && c->fp16) violated(r, "bf16 and fp16 are exclusive (both given)");
    if (c->device != TB_DEVICE_CUDA) {
        if (c->bf16 || c->fp16)
            violated(r, "%s with device cpu: not supported yet on --device cpu (the CPU backend is the fp32 "
                        "reference the CUDA backend is checked against; %s runs on --device cuda)",
                     c->bf16 ? "bf16" : "fp16", c->bf16 ? "bf16" : "fp16");
        return;
    }
#define CUDA_REFUSED(cond, ...) \
    if (cond) violated(r, __VA_ARGS__)
    CUDA_REFUSED(c->attention_backend == TB_ATTENTION_FLASH && c->num_attention_heads > 0 &&
                     c->hidden_size / c->num_attention_heads > 1024,
                 "device cuda with head size %d: not supported yet (the CUDA flash attention kernel takes head sizes "
                 "up to 1024; --attention-backend local takes any)", c->hidden_size / c->num_attention_heads);
#undef CUDA_REFUSED
}

int config_validate(const tb_config *c, tb_error *err) { return config_validate_rules(c, 0, err); }

int config_validate_rules(const tb_config *c, unsigned skip, tb_error *err) {
    rules r = {err, 0, 0};
    const int build_limits = !(skip & TB_RULES_SKIP_BUILD_LIMITS);
    if (err) err->msg[0] = '\0';
    const int tp = c->tensor_model_parallel_size, pp = c->pipeline_model_parallel_size;
    const int cp = c->context_parallel_size, ep = c->expert_model_parallel_size;
    const int vpp = c->virtual_pipeline_model_parallel_size;

    POSITIVE(&r, c, num_layers);
    POSITIVE(&r, c, hidden_size);
    POSITIVE(&r, c, ffn_hidden_size);
    POSITIVE(&r, c, num_attention_heads);
    POSITIVE(&r, c, num_query_groups);
    POSITIVE(&r, c, seq_length);
    POSITIVE(&r, c, vocab_size);
    POSITIVE(&r, c, make_vocab_size_divisible_by);
    POSITIVE(&r, c, micro_batch_size);
    if (c->data_parallel_size > 0) POSITIVE(&r, c, global_batch_size);  // else derived from dp 0: said below
    POSITIVE(&r, c, train_iters);
    POSITIVE(&r, c, log_interval);
    POSITIVE(&r, c, tensor_model_parallel_size);
    POSITIVE(&r, c, pipeline_model_parallel_size);
    POSITIVE(&r, c, context_parallel_size);
    POSITIVE(&r, c, expert_model_parallel_size);
    POSITIVE(&r, c, world_size);
    // Size limits keep every derived size and buffer length far from overflow.
#define AT_MOST(field, limit)                                                                   \
    if ((int64_t)c->field > (int64_t)(limit))                                                   \
    violated(&r, #field " (%lld) exceeds the largest supported value %lld", (long long)c->field, \
             (long long)(limit))
    AT_MOST(num_layers, 1 << 16);
    AT_MOST(hidden_size, 1 << 20);
    AT_MOST(ffn_hidden_size, 1 << 22);
    AT_MOST(num_attention_heads, 1 << 16);
    AT_MOST(seq_length, 1 << 20);
    AT_MOST(max_position_embeddings, 1 << 20);
    AT_MOST(make_vocab_size_divisible_by, 1 << 16);
    AT_MOST(padded_vocab_size, 1 << 20);
    AT_MOST(micro_batch_size, 1 << 20);
    AT_MOST(global_batch_size, 1 << 30);
    if (build_limits && c->world_size > 64)
        violated(&r, "world_size (%d) exceeds 64, the largest world (and group) this build supports", c->world_size);
    AT_MOST(tensor_model_parallel_size, 1 << 16);
    AT_MOST(pipeline_model_parallel_size, 1 << 16);
    AT_MOST(context_parallel_size, 1 << 16);
    AT_MOST(expert_model_parallel_size, 1 << 16);
    AT_MOST(virtual_pipeline_model_parallel_size, TB_MAX_PIPELINE_STAGES);
    AT_MOST(num_layers_per_virtual_pipeline_stage, 1 << 16);
#undef AT_MOST
    if (c->mock_data && c->data_path[0])
        violated(&r, "mock_data and data_path '%s' are exclusive", c->data_path);
    // (a world smaller than one model-parallel replica, e.g. tp 3 over mpirun -np 2, makes
    // dp 0 and so a derived global batch of 0: this rule says why)
    const int64_t model_parallel = (int64_t)tp * cp * pp;
    if (tp >= 1 && cp >= 1 && pp >= 1 && c->world_size >= 1 && c->world_size % model_parallel != 0)
        violated(&r,
                 "world_size (%d) must be divisible by tensor_model_parallel_size x "
                 "context_parallel_size x pipeline_model_parallel_size (%d x %d x %d = %lld)",
                 c->world_size, tp, cp, pp, (long long)model_parallel);
    if (r.count) return -1;  // the rules below divide by these

    // Shapes
    DIVISIBLE(&r, c->hidden_size, "hidden_size", c->num_attention_heads, "num_attention_heads");
    DIVISIBLE(&r, c->num_attention_heads, "num_attention_heads", c->num_query_groups, "num_query_groups");
    DIVISIBLE(&r, c->num_attention_heads, "num_attention_heads", tp, "tensor_model_parallel_size");
    DIVISIBLE(&r, c->num_query_groups, "num_query_groups", tp, "tensor_model_parallel_size");
    DIVISIBLE(&r, c->ffn_hidden_size, "ffn_hidden_size", tp, "tensor_model_parallel_size");
    if (c->max_position_embeddings < c->seq_length)
        violated(&r, "seq_length (%d) must be at most max_position_embeddings (%d)", c->seq_length,
                 c->max_position_embeddings);
    if (build_limits && c->vocab_size > 65536)
        violated(&r, "vocab_size (%d) must be at most 65536 (token files hold uint16 ids)", c->vocab_size);
    if (c->norm_epsilon <= 0) violated(&r, "norm_epsilon (%g) must be positive", c->norm_epsilon);
    if (c->init_method_std < 0) violated(&r, "init_method_std (%g) must be non-negative", c->init_method_std);
    if (c->position_embedding_type == TB_POS_ROPE) {
        const int hs = c->hidden_size / c->num_attention_heads;
        const double rot = hs * c->rotary_percent;
        if (!(c->rotary_percent > 0 && c->rotary_percent <= 1))
            violated(&r, "rotary_percent (%g) must be in (0, 1]", c->rotary_percent);
        else if (rot != floor(rot) || (long)rot % 2 != 0)
            violated(&r, "the rotary dimension, head size %d x rotary_percent %g = %g, must be an even integer", hs,
                     c->rotary_percent, rot);
        if (c->rotary_base <= 0) violated(&r, "rotary_base (%d) must be positive", c->rotary_base);
    } else {
        // rope's settings without rope would be silently ignored
        const char *pos = config_choice_name("position_embedding_type", c->position_embedding_type);
        if (c->rotary_percent != 1.0)
            violated(&r, "rotary_percent (%g) applies only with position_embedding_type rope (is %s)",
                     c->rotary_percent, pos);
        if (c->rotary_base != 10000)
            violated(&r, "rotary_base (%d) applies only with position_embedding_type rope (is %s)", c->rotary_base,
                     pos);
        if (c->rotary_interleaved)
            violated(&r, "rotary_interleaved applies only with position_embedding_type rope (is %s)", pos);
    }

    // Parallel layout (world_size divisible by tp x cp x pp: checked above)
    const int dp = c->data_parallel_size;
    if (vpp < 0) violated(&r, "virtual_pipeline_model_parallel_size (%d) must be non-negative", vpp);
    if (vpp > 0 && pp < 2)
        violated(&r, "virtual_pipeline_model_parallel_size (%d) needs pipeline_model_parallel_size > 1 (is %d)",
                 vpp, pp);
    if (c->num_layers_per_virtual_pipeline_stage < 0)
        violated(&r, "num_layers_per_virtual_pipeline_stage (%d) must be non-negative",
                 c->num_layers_per_virtual_pipeline_stage);
    else if (c->num_layers_per_virtual_pipeline_stage > 0) {
        const int n = c->num_layers_per_virtual_pipeline_stage;
        const int64_t total = (int64_t)c->num_layers + c->account_for_embedding_in_pipeline_split +
                              c->account_for_loss_in_pipeline_split;
        if (total % ((int64_t)pp * n) != 0) {
            if (total == c->num_layers)
                violated(&r, "num_layers (%d) must be divisible by pipeline_model_parallel_size x "
                             "num_layers_per_virtual_pipeline_stage (%d x %d)", c->num_layers, pp, n);
            else
                violated(&r, "num_layers (%d) + embedding (%d) + loss (%d) must be divisible by "
                             "pipeline_model_parallel_size x num_layers_per_virtual_pipeline_stage (%d x %d)",
                         c->num_layers, c->account_for_embedding_in_pipeline_split,
                         c->account_for_loss_in_pipeline_split, pp, n);
        }
        else if (vpp != virtual_stages_from_layers(c))
            violated(&r, "virtual_pipeline_model_parallel_size (%d) and num_layers_per_virtual_pipeline_stage (%d) "
                         "disagree (%d per virtual stage makes %d virtual stages); give one of them",
                     vpp, n, n, virtual_stages_from_layers(c));
    }
    if ((int64_t)pp * (vpp > 1 ? vpp : 1) > TB_MAX_PIPELINE_STAGES)
        violated(&r, "pipeline stages (%d x %d) exceed %d", pp, vpp, TB_MAX_PIPELINE_STAGES);
    else {
        int layers[TB_MAX_PIPELINE_STAGES];
        tb_error split_err;
        split_err.msg[0] = '\0';
        if (config_pipeline_split(c, layers, &split_err) < 0) violated(&r, "%s", split_err.msg);
    }
    if (c->sequence_parallel) DIVISIBLE(&r, c->seq_length, "seq_length", tp, "tensor_model_parallel_size");
    if (cp > 1) DIVISIBLE(&r, c->seq_length, "seq_length", 2 * cp, "2 x context_parallel_size");
    if (ep > 1 && cp > 1)
        violated(&r, "expert_model_parallel_size (%d) and context_parallel_size (%d) cannot both exceed 1",
                 ep, cp);
    config_moe_rules(&r, c);

    // Batch
    if (dp > 0) {
        int per = c->micro_batch_size * dp;
        if (c->global_batch_size % per != 0)
            violated(&r,
                     "global_batch_size (%d) must be divisible by micro_batch_size x data_parallel_size "
                     "(%d x %d = %d)", c->global_batch_size, c->micro_batch_size, dp, per);
        else {
            int m = c->global_batch_size / per;
            if (m < pp)
                violated(&r, "num_microbatches (%d) must be at least pipeline_model_parallel_size (%d)", m, pp);
            if (vpp > 1 && m % pp != 0)
                violated(&r, "num_microbatches (%d) must be divisible by pipeline_model_parallel_size (%d) "
                             "with an interleaved schedule", m, pp);
        }
    }

    // Optimizer and schedule
    if (c->lr < 0) violated(&r, "lr (%g) must be non-negative", c->lr);
    if (c->min_lr < 0 || c->min_lr > c->lr)
        violated(&r, "min_lr (%g) must be between 0 and lr (%g)", c->min_lr, c->lr);
    if (c->lr_warmup_iters < 0) violated(&r, "lr_warmup_iters (%d) must be non-negative", c->lr_warmup_iters);
    if (c->lr_decay_iters < 1) violated(&r, "lr_decay_iters (%d) must be at least 1", c->lr_decay_iters);
    // Megatron's rule (OptimizerParamScheduler: lr_warmup_steps < lr_decay_steps): a warm-up
    // that does not end before the decay does leaves no decay, and one past the last step
    // never reaches the peak lr.
    else if (c->lr_warmup_iters >= c->lr_decay_iters)
        violated(&r, "lr_warmup_iters (%d) must be less than lr_decay_iters (%d%s)", c->lr_warmup_iters,
                 c->lr_decay_iters, c->lr_decay_iters == c->train_iters ? " = train_iters" : "");
    if (c->adam_beta1 < 0 || c->adam_beta1 >= 1) violated(&r, "adam_beta1 (%g) must be in [0, 1)", c->adam_beta1);
    if (c->adam_beta2 < 0 || c->adam_beta2 >= 1) violated(&r, "adam_beta2 (%g) must be in [0, 1)", c->adam_beta2);
    if (c->adam_eps <= 0) violated(&r, "adam_eps (%g) must be positive", c->adam_eps);
    if (c->weight_decay < 0) violated(&r, "weight_decay (%g) must be non-negative", c->weight_decay);
    if (c->clip_grad < 0) violated(&r, "clip_grad (%g) must be non-negative", c->clip_grad);

    // DistributedDataParallel
    if (c->ddp_bucket_size < 1) violated(&r, "ddp_bucket_size (%d) must be at least 1", c->ddp_bucket_size);
    // Megatron's rule: the parameter all-gather to overlap is the distributed optimizer's
    // (and, as Megatron's arguments.py, it runs on the gradient reduction's buckets and thread)
    if (c->overlap_param_gather && !c->use_distributed_optimizer)
        violated(&r, "overlap_param_gather needs use_distributed_optimizer");
    if (c->overlap_param_gather && !c->overlap_grad_reduce)
        violated(&r, "overlap_param_gather needs overlap_grad_reduce");

    // Recompute
    if (c->recompute_granularity == TB_RECOMPUTE_FULL) {
        if (c->recompute_method == TB_RECOMPUTE_METHOD_NONE)
            violated(&r, "recompute_granularity full needs recompute_method uniform or block");
        int lo = c->recompute_method == TB_RECOMPUTE_BLOCK ? 0 : 1;
        if (c->recompute_num_layers < lo || c->recompute_num_layers > c->num_layers)
            violated(&r, "recompute_num_layers (%d) must be between %d and num_layers (%d)",
                     c->recompute_num_layers, lo, c->num_layers);
    } else if (c->recompute_num_layers < 0) {
        violated(&r, "recompute_num_layers (%d) must be non-negative", c->recompute_num_layers);
    } else if (c->recompute_method != TB_RECOMPUTE_METHOD_NONE) {
        violated(&r, "recompute_method %s needs recompute_granularity full (is %s)",
                 config_choice_name("recompute_method", c->recompute_method),
                 config_choice_name("recompute_granularity", c->recompute_granularity));
    }

    // Instrumentation
    if (c->memory_cap < 0) violated(&r, "memory_cap (%lld) must be non-negative", (long long)c->memory_cap);
    if (c->peak_tflops < 0) violated(&r, "peak_tflops (%g) must be non-negative", c->peak_tflops);
    if (c->num_threads < 0) violated(&r, "num_threads (%d) must be non-negative", c->num_threads);
    if (c->seed < 0) violated(&r, "seed (%lld) must be non-negative", (long long)c->seed);
    if (c->save_interval < 0) violated(&r, "save_interval (%d) must be non-negative", c->save_interval);
    if (c->exit_interval < 0) violated(&r, "exit_interval (%d) must be non-negative", c->exit_interval);
    if (c->save_interval > 0 && !c->save[0])
        violated(&r, "save_interval %d needs save (a checkpoint directory)", c->save_interval);
    const size_t save_len = strlen(c->save);
    if (save_len >= 12 && !strcmp(c->save + save_len - 12, ".safetensors"))
        violated(&r, "save '%s' names a checkpoint directory; a Hugging Face safetensors file is save_hf's",
                 c->save);
    if (c->ranks_per_process < 0) violated(&r, "ranks_per_process (%d) must be non-negative", c->ranks_per_process);
    if (!(c->collective_timeout > 0))
        violated(&r, "collective_timeout (%g) must be positive", c->collective_timeout);
    if (c->debug_slow_write[0]) {
        int rank, ms, n = 0;
        if (sscanf(c->debug_slow_write, "%d:%d%n", &rank, &ms, &n) != 2 || c->debug_slow_write[n] != '\0')
            violated(&r, "debug_slow_write '%s' must be RANK:MS", c->debug_slow_write);
        else if (rank < 0 || rank >= c->world_size || ms < 0)
            violated(&r, "debug_slow_write '%s': rank must be in [0, %d) and MS at least 0", c->debug_slow_write,
                     c->world_size);
        else if (!c->save[0])
            violated(&r, "debug_slow_write '%s' needs save (a checkpoint directory), or the drill never runs",
                     c->debug_slow_write);
    }
    if (c->async_save && !c->save[0]) violated(&r, "async_save needs save (a checkpoint directory)");
    if (c->dump_tensors[0]) {
        const char *p = c->dump_tensors;
        int n = 0;
        while (*p) {
            char *end;
            long long step = strtoll(p, &end, 10);
            if (end == p || (*end && *end != ',') || step < 1 || step > c->train_iters || ++n > 64) {
                violated(&r, "dump_tensors '%s' must be up to 64 steps in [1, train_iters %d], comma-separated",
                         c->dump_tensors, c->train_iters);
                break;
            }
            p = *end ? end + 1 : end;
        }
    }
    if (c->inject_stall[0]) {
        int rank, n = 0;
        long long step;
        if (sscanf(c->inject_stall, "%d:%lld%n", &rank, &step, &n) != 2 || c->inject_stall[n] != '\0')
            violated(&r, "inject_stall '%s' must be RANK:STEP", c->inject_stall);
        else if (rank < 0 || rank >= c->world_size || step < 1)
            violated(&r, "inject_stall '%s': rank must be in [0, %d) and step at least 1", c->inject_stall,
                     c->world_size);
        else if (c->world_size < 2)  // a stall is found by the peers left waiting in a collective
            violated(&r, "inject_stall '%s' needs world_size at least 2 (is %d): with no peer to wait for the "
                         "stalled rank, the drill would never fire", c->inject_stall, c->world_size);
        else if (step > c->train_iters)  // a drill that never fires would pass for one that found no hang
            violated(&r, "inject_stall '%s': step %lld is beyond train_iters (%d), so the stall would never happen",
                     c->inject_stall, step, c->train_iters);
    }

    if (c->debug_slow_data[0]) {
        int rank, ms, n = 0;
        if (sscanf(c->debug_slow_data, "%d:%d%n", &rank, &ms, &n) != 2 || c->debug_slow_data[n] != '\0')
            violated(&r, "debug_slow_data '%s' must be RANK:MS", c->debug_slow_data);
        else if (rank < 0 || rank >= c->world_size || ms < 0 || ms > 60000)
            violated(&r, "debug_slow_data '%s': rank must be in [0, %d) and MS in [0, 60000]", c->debug_slow_data,
                     c->world_size);
    }
    if (c->debug_slow_link[0]) {
        static const char *const kinds[] = {"tp", "cp", "dp", "dp_cp", "pp", "mp", "embedding", "world", "pp_grad"};
        char kind[32];
        int ms, n = 0, known = 0;
        if (sscanf(c->debug_slow_link, "%31[a-z_]:%d%n", kind, &ms, &n) != 2 || c->debug_slow_link[n] != '\0') {
            violated(&r, "debug_slow_link '%s' must be GROUP:MS", c->debug_slow_link);
        } else {
            for (size_t i = 0; i < sizeof kinds / sizeof *kinds; i++) known |= !strcmp(kind, kinds[i]);
            if (!known || ms < 0 || ms > 60000)
                violated(&r, "debug_slow_link '%s': the group must be one of tp, cp, dp, dp_cp, pp, mp, embedding, "
                             "world, pp_grad and MS in [0, 60000]", c->debug_slow_link);
        }
    }

    if (r.count || (skip & TB_RULES_SKIP_NOT_SUPPORTED)) return r.count ? -1 : 0;

    // What the engine cannot run yet: refused, never ignored.
    if (cp > 1 && c->attention_backend != TB_ATTENTION_FLASH)
        violated(&r, "context_parallel_size %d needs attention_backend flash (the blocked kernel takes the "
                     "sequence's K and V with each local query's position; is %s)",
                 cp, config_choice_name("attention_backend", c->attention_backend));
    if (c->sequence_parallel && tp == 1)
        violated(&r, "sequence_parallel needs tensor_model_parallel_size > 1 (is 1)");
    config_moe_not_supported_yet(&r, c);
    device_not_supported_yet(&r, c);
    if (c->save_hf[0] && pp > 1)
        violated(&r, "save_hf with pipeline_model_parallel_size %d: not supported yet (save a checkpoint with save, "
                     "load it at pp 1, then save_hf)", pp);
    if (c->hidden_dropout != 0) violated(&r, "hidden_dropout %g: dropout is not supported yet", c->hidden_dropout);
    if (c->attention_dropout != 0)
        violated(&r, "attention_dropout %g: dropout is not supported yet", c->attention_dropout);
    return r.count ? -1 : 0;
}

// ---------------------------------------------------------------------------------------
// Output

json_t *config_to_json(const tb_config *cfg) {
    json_t *root = json_object();
    for (const tb_option *o = tb_config_options; o->flag; o++)
        json_object_set_new(root, o->key, tb_option_to_json(cfg, o));
    json_object_set_new(root, "derived",
                        json_pack("{s:i, s:i, s:i, s:s}", "data_parallel_size", cfg->data_parallel_size,
                                  "num_microbatches", cfg->num_microbatches, "padded_vocab_size",
                                  cfg->padded_vocab_size, "global_batch_formula",
                                  "global_batch_size = micro_batch_size x num_microbatches x "
                                  "data_parallel_size"));
    return root;
}

void config_print_help(FILE *out, const char *program) {
    fprintf(out,
            "usage: %s [--config FILE.json] [--FLAG VALUE ...]\n\n"
            "Trains a GPT with Megatron-Core's concepts. Flags follow Megatron-LM's names; a JSON\n"
            "config file uses the same keys with underscores, and flags override it.\n",
            program);
    const char *group = "";
    for (const tb_option *o = tb_config_options; o->flag; o++) {
        if (strcmp(group, o->group) != 0) {
            group = o->group;
            fprintf(out, "\n%s:\n", group);
        }
        char lhs[256];  // a flag with its choices, whole
        if (o->type == TB_OPT_BOOL) snprintf(lhs, sizeof lhs, "%s", o->flag);
        else if (o->type == TB_OPT_CHOICE) snprintf(lhs, sizeof lhs, "%s {%s}", o->flag, o->choices);
        else snprintf(lhs, sizeof lhs, "%s VALUE", o->flag);
        fprintf(out, "  %-44s %s (default: %s)\n", lhs, o->help,
                o->default_value[0] ? o->default_value : "\"\"");
    }
    fprintf(out, "\nother:\n  %-44s %s\n  %-44s %s\n  %-44s %s\n", "--config FILE.json",
            "load settings from a JSON file (keys with underscores)", "--build-info",
            "print this binary's build (compiler, codegen flags, BLAS kernel, CPU ISA) as JSON; alone",
            "--help", "this text");
}
