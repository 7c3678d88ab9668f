// plan_cli.c — `tracebook plan` (plan_cli.h): every legal layout of a model on a cluster,
// ranked; --explain one; --verify against the engine (plan_verify.c).
// docs/ARCHITECTURE.md, "Planner".
#include "planner/plan_cli.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/fileio.h"
#include "core/options.h"
#include "core/xalloc.h"
#include "planner/plan.h"
#include "planner/plan_models.h"

typedef struct plan_args {
    int gpus, gpus_per_node;
    int64_t gpu_memory;
    double peak_tflops, compute_efficiency, intra, inter;
    int bf16, fp16, json, top, all, verify, max_mbs, max_vpp;
    const char *explain, *pretrain_gpt, *work_dir, *output, *model;
} plan_args;

static const tb_option plan_options[] = {
    TB_OPTION("--model", plan_args, model, TB_OPT_STRING, NULL, "NAME",
              "a preset model (experiments/planner/models/NAME.json, built in): the engine's flags of a published "
              "shape, which flags given here override; not with --config; 'list' lists the presets and their "
              "parameter counts"),
    TB_OPTION("--gpus", plan_args, gpus, TB_OPT_INT, "0", "N",
              "GPUs (ranks) in all: the world every layout fills (required; with --explain the layout's product)"),
    TB_OPTION("--gpus-per-node", plan_args, gpus_per_node, TB_OPT_INT, "8", "N",
              "GPUs per node: whether each tp and cp group stays inside one"),
    TB_OPTION("--gpu-memory", plan_args, gpu_memory, TB_OPT_BYTES, "80G", "BYTES", "memory per GPU (K/M/G suffixes)"),
    TB_OPTION("--peak-tflops", plan_args, peak_tflops, TB_OPT_FLOAT, "989", "X",
              "peak dense TFLOP/s per GPU at the training precision (989: H100 SXM bf16, an assumption)"),
    TB_OPTION("--compute-efficiency", plan_args, compute_efficiency, TB_OPT_FLOAT, "0.5", "FRACTION",
              "share of the peak the GEMMs reach in the step-time estimate"),
    TB_OPTION("--intra-node-bandwidth", plan_args, intra, TB_OPT_FLOAT, "450", "GB/S",
              "per-GPU bandwidth inside a node (NVLink) for the estimate"),
    TB_OPTION("--inter-node-bandwidth", plan_args, inter, TB_OPT_FLOAT, "50", "GB/S",
              "per-GPU bandwidth across nodes (InfiniBand) for the estimate"),
    TB_OPTION("--bf16", plan_args, bf16, TB_OPT_BOOL, NULL, NULL,
              "Megatron bf16 mixed precision (2-byte params, fp32 main grads and Adam; Korthikanti activations)"),
    TB_OPTION("--fp16", plan_args, fp16, TB_OPT_BOOL, NULL, NULL, "fp16 mixed precision (the same budget as --bf16)"),
    TB_OPTION("--explain", plan_args, explain, TB_OPT_STRING, NULL, "LAYOUT",
              "the whole derivation of one layout, e.g. tp4,pp4,dp4[,cp2,vpp2,mbs1] (--gpus defaults to the product)"),
    TB_OPTION("--json", plan_args, json, TB_OPT_BOOL, NULL, NULL, "print JSON"),
    TB_OPTION("--output", plan_args, output, TB_OPT_STRING, NULL, "FILE",
              "also write the JSON to FILE (whole, atomically; what exp:plan records)"),
    TB_OPTION("--top", plan_args, top, TB_OPT_INT, "10", "N", "candidates listed (0: every legal one)"),
    TB_OPTION("--all", plan_args, all, TB_OPT_BOOL, NULL, NULL, "also list the illegal layouts with the rule each breaks"),
    TB_OPTION("--max-micro-batch-size", plan_args, max_mbs, TB_OPT_INT, "8", "N",
              "micro batch sizes tried: powers of 2 up to N (--micro-batch-size fixes one)"),
    TB_OPTION("--max-virtual-stages", plan_args, max_vpp, TB_OPT_INT, "8", "N",
              "virtual pipeline sizes tried: 2..N (--virtual-pipeline-model-parallel-size fixes one)"),
    TB_OPTION("--verify", plan_args, verify, TB_OPT_BOOL, NULL, NULL,
              "run small shapes of each layout family with the engine and compare the plan with what it measures"),
    TB_OPTION("--pretrain-gpt", plan_args, pretrain_gpt, TB_OPT_STRING, NULL, "PATH",
              "--verify: the engine binary (default: pretrain_gpt beside this tracebook)"),
    TB_OPTION("--work-dir", plan_args, work_dir, TB_OPT_STRING, NULL, "DIR",
              "--verify: where the runs go, a new or empty directory (default: a new one under $TMPDIR)"),
    TB_OPTIONS_END};

static const tb_command plan_command = {
    "tracebook plan", NULL,
    "Every legal TP/CP/PP/VPP/DP/micro-batch layout of a model on a cluster, with its per-rank parameters,\n"
    "gradients, optimizer state and activations, communication per step, bubble and an estimated step time,\n"
    "ranked (fits in memory first, then the estimated step time). The model, the global batch, recompute and\n"
    "the distributed optimizer are the engine's own flags with its defaults (pretrain_gpt --help: --num-layers\n"
    "--hidden-size --num-attention-heads --num-query-groups --ffn-hidden-size --vocab-size --seq-length\n"
    "--swiglu ... --global-batch-size --use-distributed-optimizer --sequence-parallel --recompute-granularity,\n"
    "or --config FILE.json, or --model NAME: a preset of a published shape, built in; --model list names and\n"
    "counts them); flags override the file's or the preset's values.\n"
    "A parallel flag among them (--tensor-model-parallel-size ...) fixes that size. The rules are the\n"
    "engine's config rules (one implementation). Without --bf16/--fp16 the budget is the engine's own fp32\n"
    "accounting. The listing opens with the model's parameter count, exact and with the vocabulary padded\n"
    "at the first layout's tp; the example's preset is, as flags: --num-layers 80 --hidden-size 8192\n"
    "--num-attention-heads 64 --num-query-groups 8 --ffn-hidden-size 28672 --vocab-size 32000 --seq-length 4096\n"
    "--swiglu --normalization RMSNorm --position-embedding-type rope --untie-embeddings-and-output-weights\n"
    "--disable-bias-linear (--attention-backend flash: the blocked core, also auto's choice, saves no s x s\n"
    "tensors). (vocab sizes above 65536 are this engine's token-file limit, skipped for planning: say --vocab-size\n"
    "128256 freely).",
    plan_options, 0, 0,
    "tracebook plan --model llama2-70b --gpus 64 --bf16 --global-batch-size 512 --use-distributed-optimizer \\\n"
    "    --sequence-parallel --attention-backend flash --top 5\n"
    "tracebook plan --model list",
    "no legal layout, none fits in --gpu-memory, or --verify found the plan and the engine apart"};

static int is_flag(const char *a, const char *flag) {
    size_t n = strlen(flag);
    return !strncmp(a, flag, n) && (a[n] == '\0' || a[n] == '=');
}

// Splits argv into the planner's flags and the engine's (the model): each flag goes where
// its table knows it; an engine flag's value goes with it.
static void split_args(int argc, char **argv, int *pn, char **pv, int *en, char **ev) {
    *pn = *en = 0;
    pv[(*pn)++] = argv[0];
    ev[(*en)++] = argv[0];
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *eq = strchr(a, '=');
        size_t len = eq ? (size_t)(eq - a) : strlen(a);
        const tb_option *po = tb_options_find_flag(plan_options, a, len);
        if (po || !strcmp(a, "--help") || !strcmp(a, "-h")) {
            pv[(*pn)++] = argv[i];
            if (po && po->type != TB_OPT_BOOL && !eq && i + 1 < argc) pv[(*pn)++] = argv[++i];
            continue;
        }
        ev[(*en)++] = argv[i];
        const tb_option *eo = tb_options_find_flag(tb_config_options, a, len);
        int takes_value = (eo && eo->type != TB_OPT_BOOL) || !strcmp(a, "--config");
        if (takes_value && !eq && i + 1 < argc) ev[(*en)++] = argv[++i];
    }
}

// The engine option argument v[i] names (--no-X: X's, *negated set) or NULL, and whether
// v[i + 1] is its value (*value: a non-boolean without "=VALUE").
static const tb_option *engine_flag(int n, char **v, int i, int *negated, int *value) {
    const size_t len = strcspn(v[i], "=");
    const tb_option *o = tb_options_find_flag(tb_config_options, v[i], len);
    *negated = !o && !strncmp(v[i], "--no-", 5);
    if (*negated) {
        char positive[128];
        snprintf(positive, sizeof positive, "--%.*s", (int)(len - 5), v[i] + 5);
        o = tb_options_find_flag(tb_config_options, positive, strlen(positive));
    }
    *value = o && o->type != TB_OPT_BOOL && !*negated && !v[i][len] && i + 1 < n;
    return o;
}

static int listed(const char *const *keys, const char *key) {
    for (; *keys; keys++)
        if (!strcmp(*keys, key)) return 1;
    return 0;
}

// Whether a plan depends on an engine flag: the model and its experts (config.c's groups model
// and moe), the layout (parallel, but how a run is launched and watched), the batch, the
// precision and recompute. The optimizer's and the schedule's values, checkpoints, logging,
// the data and the device change no budget.
static int planned(const tb_option *o) {
    static const char *const runtime[] = {"ranks_per_process", "mpi_collectives", "collective_timeout",
                                          "inject_stall",      "debug_slow_data", "debug_slow_link",
                                          "print_rank_layout", NULL};
    // (--bf16 and --fp16 are the planner's own flags: an engine --no-bf16 is not used; --device
    // picks --attention-backend auto's core, --save-hf is refused at some layouts)
    static const char *const planned_others[] = {"micro_batch_size", "global_batch_size", "recompute_granularity",
                                                 "recompute_method", "recompute_num_layers", "device", "save_hf",
                                                 NULL};
    const char *g = o->group ? o->group : "";
    if (!strcmp(g, "parallel")) return !listed(runtime, o->key);
    return !strcmp(g, "model") || !strcmp(g, "moe") || listed(planned_others, o->key);
}

// Every engine field no plan depends on back to its default, so that a value given for one
// (named as not used) cannot make a layout illegal through a rule either (--exit-interval past
// --train-iters, --debug-slow-link on a group of one rank).
static void reset_not_planned(tb_config *base) {
    tb_config defaults;
    config_defaults(&defaults);
    for (const tb_option *o = tb_config_options; o->flag; o++) {
        if (planned(o)) continue;
        json_t *v = tb_option_to_json(&defaults, o);
        tb_error ignored;
        if (o->type == TB_OPT_STRING && o->size == 0)  // a pointer: the default's (static) string
            *(const char **)((char *)base + o->offset) = *(const char *const *)((const char *)&defaults + o->offset);
        else
            tb_option_set_json(base, o, v, o->flag, &ignored);
        json_decref(v);
    }
}

// The engine flags given on the command line that no plan depends on (with their values), said
// rather than dropped without a word: a Megatron command line can be given whole.
static json_t *flags_not_planned(int n, char **v) {
    json_t *out = json_array();
    for (int i = 1; i < n; i++) {
        int negated, value;
        const tb_option *o = engine_flag(n, v, i, &negated, &value);
        if (o && !planned(o)) {
            char text[512];
            snprintf(text, sizeof text, "%s%s%s", v[i], value ? " " : "", value ? v[i + 1] : "");
            json_array_append_new(out, json_string(text));
        }
        i += value;
    }
    return out;
}

static int given(int n, char **v, const char *flag) {
    for (int i = 1; i < n; i++)
        if (is_flag(v[i], flag)) return 1;
    return 0;
}

// What the listing's first line names the model: the preset with the flags that override its
// values ("llama2-7b with --num-layers 16"), the --config file, or the flags.
static void model_name(const plan_args *a, int n, char **v, char *buf, size_t len) {
    snprintf(buf, len, "%s", a->model ? a->model : "given by the flags");
    for (int i = 1; i < n && !a->model; i++)
        if (is_flag(v[i], "--config"))
            snprintf(buf, len, "%s", v[i][8] == '=' ? v[i] + 9 : i + 1 < n ? v[i + 1] : "?");
    size_t at = strlen(buf);
    for (int i = 1; i < n && a->model && at < len; i++) {
        int negated, value;  // (--no-swiglu: a boolean's negation)
        const tb_option *o = engine_flag(n, v, i, &negated, &value);
        if (o && plan_model_sets(a->model, o->key)) {
            int w = snprintf(buf + at, len - at, "%s %s%s%s", at == strlen(a->model) ? " with" : "", v[i],
                             value ? " " : "", value ? v[i + 1] : "");
            if (w > 0) at += (size_t)w;
        }
        i += value;
    }
}

// "tp4,pp4,dp4,cp2,vpp2,mbs1"
typedef struct layout_spec {
    int tp, cp, pp, vpp, dp, mbs, ep, etp;
} layout_spec;

static int parse_layout(const char *text, layout_spec *l, tb_error *err) {
    *l = (layout_spec){1, 1, 1, 1, 0, 0, 0, 0};
    const char *p = text;
    while (*p) {
        char key[8];
        int k = 0;
        while (*p >= 'a' && *p <= 'z' && k < 7) key[k++] = *p++;
        key[k] = '\0';
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p || v < 1 || v > INT_MAX || (*end && *end != ','))
            return tb_fail(err, "flag --explain '%s': '%s' must be a name and a positive count, e.g. tp4,pp4,dp4",
                           text, key);
        if (!strcmp(key, "tp")) l->tp = (int)v;
        else if (!strcmp(key, "cp")) l->cp = (int)v;
        else if (!strcmp(key, "pp")) l->pp = (int)v;
        else if (!strcmp(key, "vpp")) l->vpp = (int)v;
        else if (!strcmp(key, "dp")) l->dp = (int)v;
        else if (!strcmp(key, "mbs")) l->mbs = (int)v;
        else if (!strcmp(key, "ep")) l->ep = (int)v;
        else if (!strcmp(key, "etp")) l->etp = (int)v;
        else
            return tb_fail(err, "flag --explain '%s': unknown size '%s' (tp, cp, pp, vpp, dp, mbs, ep, etp)", text, key);
        p = *end ? end + 1 : end;
    }
    return 0;
}

static int cmp_plans(const void *a, const void *b) {
    const tb_plan *x = a, *y = b;
    if (x->fits != y->fits) return y->fits - x->fits;
    if (x->fits) {
        if (x->step_seconds != y->step_seconds) return x->step_seconds < y->step_seconds ? -1 : 1;
    }
    if (x->peak_bytes != y->peak_bytes) return x->peak_bytes < y->peak_bytes ? -1 : 1;
    return 0;
}

static double gib(int64_t b) { return (double)b / (1024.0 * 1024.0 * 1024.0); }

static void print_table(FILE *out, const tb_plan *plans, int n, const tb_plan_cluster *cl) {
    const int moe = n > 0 && plans[0].cfg.num_experts > 0;  // the ep column (the all-to-all estimate)
    const int w = moe ? 31 : 28;  // the layout names grow by ",epN"
    fprintf(out, "%-4s %-*s %4s %10s %8s %8s %8s %5s %7s %9s %9s %s%8s %6s\n", "#", w, "layout", "m", "layers/st",
            "w+opt", "acts", "peak", "fits", "bubble", "tp GB", "dp GB", moe ? "   ep GB* " : "", "step s*", "MFU*");
    for (int i = 0; i < n; i++) {
        const tb_plan *p = &plans[i];
        char name[96], layers[32];
        plan_layout_name(p, name, sizeof name);
        const tb_plan_stage *st = &p->stages[p->peak_stage];
        snprintf(layers, sizeof layers, "%d", p->stages[0].layers);
        for (int s = 1; s < p->nstages; s++)
            if (p->stages[s].layers != p->stages[0].layers) {
                snprintf(layers, sizeof layers, "%d..", p->stages[0].layers);
                break;
            }
        char ep[32] = "";
        if (moe) snprintf(ep, sizeof ep, "%9.2f ", p->comm.ep / 1e9);
        fprintf(out, "%-4d %-*s %4d %10s %7.1fG %7.1fG %7.1fG %5s %7.3f %9.2f %9.2f %s%8.3f %5.1f%%%s\n", i + 1, w, name,
                p->microbatches, layers, gib(st->param_bytes + st->grad_bytes + st->optimizer_bytes + st->gathered_bytes),
                gib(st->activation_bytes), gib(p->peak_bytes), p->fits ? "yes" : "no", p->bubble, p->comm.tp / 1e9,
                (p->comm.dp_cp + p->comm.expert_dp) / 1e9, ep, p->step_seconds, 100 * p->mfu,
                p->runs_here ? "" : "  (not on this engine)");
    }
    fprintf(out, "(* an estimate: FLOPs at %.0f TFLOP/s x %.2f, bubble, un-overlapped communication at %.0f / %.0f GB/s; "
                 "w+opt, acts and peak are the peak stage's per-rank GiB; tp/dp GB: bytes per rank per step%s)\n",
            cl->peak_tflops, cl->compute_efficiency, cl->intra_node_gbps, cl->inter_node_gbps,
            moe ? "; dp: dp x cp + expert-dp; ep*: the all-to-all dispatcher's, a balanced-router estimate" : "");
}

static json_t *model_json(const tb_config *c, const char *preset) {
    json_t *o = json_pack("{s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:b, s:s, s:s}", "num_layers", c->num_layers,
                     "hidden_size", c->hidden_size, "num_attention_heads", c->num_attention_heads, "num_query_groups",
                     c->num_query_groups, "ffn_hidden_size", c->ffn_hidden_size, "vocab_size", c->vocab_size,
                     "seq_length", c->seq_length, "global_batch_size", c->global_batch_size, "swiglu", c->swiglu,
                     "normalization", config_choice_name("normalization", c->normalization), "recompute_granularity",
                     config_choice_name("recompute_granularity", c->recompute_granularity));
    if (o && c->num_experts > 0)
        json_object_set_new(o, "moe", json_pack("{s:i, s:i, s:i, s:i, s:i}", "num_experts", c->num_experts,
                                                "moe_router_topk", c->moe_router_topk, "moe_ffn_hidden_size",
                                                c->moe_ffn_hidden_size, "moe_layer_freq", c->moe_layer_freq,
                                                "moe_shared_expert_intermediate_size",
                                                c->moe_shared_expert_intermediate_size));
    if (o) json_object_set_new(o, "preset", preset ? json_string(preset) : json_null());
    return o;
}

static json_t *cluster_json(const tb_plan_cluster *cl) {
    return json_pack("{s:i, s:i, s:I, s:f, s:f, s:f, s:f, s:s}", "gpus", cl->gpus, "gpus_per_node", cl->gpus_per_node,
                     "gpu_memory", (json_int_t)cl->gpu_memory, "peak_tflops", cl->peak_tflops, "compute_efficiency",
                     cl->compute_efficiency, "intra_node_gbps", cl->intra_node_gbps, "inter_node_gbps",
                     cl->inter_node_gbps, "precision",
                     cl->precision == TB_PLAN_BF16 ? "bf16" : cl->precision == TB_PLAN_FP16 ? "fp16" : "fp32");
}

// Prints the JSON (with --json) and writes it to --output; 0, or -1 with the error printed.
static int emit_json(const plan_args *a, json_t *o) {
    if (a->json) {
        char *s = json_dumps(o, JSON_INDENT(2));
        if (s) puts(s);
        free(s);
    }
    tb_error err;
    if (a->output && tb_write_json_atomic(a->output, o, &err) != 0) {
        fprintf(stderr, "tracebook plan: --output: %s\n", err.msg);
        return -1;
    }
    return 0;
}

// A rule histogram entry: how many layouts broke it first.
typedef struct rule_count {
    char rule[sizeof(tb_error)];
    int count;
} rule_count;

static void count_rule(rule_count **rules, int *n, int *cap, const char *rule) {
    for (int i = 0; i < *n; i++)
        if (!strcmp((*rules)[i].rule, rule)) {
            (*rules)[i].count++;
            return;
        }
    if (*n == *cap) {
        *cap = *cap ? 2 * *cap : 16;
        *rules = tb_xreallocarray(*rules, (size_t)*cap, sizeof **rules, "plan rules");
    }
    snprintf((*rules)[*n].rule, sizeof (*rules)[*n].rule, "%s", rule);
    (*rules)[(*n)++].count = 1;
}

static int cmp_rules(const void *a, const void *b) {
    return ((const rule_count *)b)->count - ((const rule_count *)a)->count;
}

int tracebook_plan_main(int argc, char **argv) {
    char **pv = tb_xcalloc((size_t)argc + 1, sizeof *pv, "plan arguments"), **ev = tb_xcalloc((size_t)argc + 1, sizeof *ev, "plan arguments");
    json_t *unplanned = NULL;  // the engine flags no plan depends on (flags_not_planned)
    int pn, en, rc = TB_EXIT_FAILURE;
    split_args(argc, argv, &pn, pv, &en, ev);
    plan_args a = {0};
    tb_positional pos = {0};
    tb_error err;
    int parsed = tb_command_parse(&plan_command, &a, pn, pv, &pos, &err);
    tb_positional_free(&pos);
    if (parsed != 0) {
        if (parsed > 0) printf("\nmodel and training flags: the engine's own (build/bin/pretrain_gpt --help)\n");
        rc = parsed > 0 ? 0 : tb_command_usage_error(&plan_command, &err);
        goto done;
    }
    if (a.verify) {
        rc = plan_verify_main(a.pretrain_gpt, a.work_dir, a.json, argv[0]);
        goto done;
    }
    if (a.model && !strcmp(a.model, "list")) {
        rc = plan_models_list(stdout, a.json, &err) == 0 ? 0 : TB_EXIT_FAILURE;
        if (rc) fprintf(stderr, "tracebook plan: %s\n", err.msg);
        goto done;
    }
    if (given(pn, pv, "--gpus") && a.gpus < 1) {
        fprintf(stderr, "tracebook plan: --gpus %d: the number of GPUs every layout fills must be at least 1\n",
                a.gpus);
        rc = TB_EXIT_USAGE;
        goto done;
    }
    if (!a.explain && a.gpus < 1) {
        fprintf(stderr, "tracebook plan: --gpus N is required (the number of GPUs every layout fills)\n");
        rc = TB_EXIT_USAGE;
        goto done;
    }
    tb_plan_cluster cl = {a.gpus, a.gpus_per_node, a.gpu_memory, a.peak_tflops, a.compute_efficiency, a.intra, a.inter,
                          a.bf16 ? TB_PLAN_BF16 : a.fp16 ? TB_PLAN_FP16 : TB_PLAN_FP32};
    if (a.bf16 && a.fp16) {
        fprintf(stderr, "tracebook plan: --bf16 and --fp16 are exclusive\n");
        rc = TB_EXIT_USAGE;
        goto done;
    }
    if (given(en, ev, "--world-size")) {
        fprintf(stderr, "tracebook plan: --world-size: give the cluster as --gpus N (the world every layout fills)\n");
        rc = TB_EXIT_USAGE;
        goto done;
    }
    tb_config base;
    config_defaults(&base);
    if (a.model && given(en, ev, "--config")) {
        fprintf(stderr, "tracebook plan: --model %s and --config both give the model: give one (flags on the command "
                        "line override either's values)\n", a.model);
        rc = TB_EXIT_USAGE;
        goto done;
    }
    if (a.model && plan_model_load(&base, a.model, &err) != 0) {  // then the flags over it, as over --config's
        fprintf(stderr, "tracebook plan: %s\n", err.msg);
        rc = TB_EXIT_USAGE;
        goto done;
    }
    char label[256];
    model_name(&a, en, ev, label, sizeof label);
    int help = 0;
    if (config_parse_args(&base, en, ev, &help, &err) != 0) {
        fprintf(stderr, "tracebook plan: %s\n", err.msg);
        rc = TB_EXIT_USAGE;
        goto done;
    }
    unplanned = flags_not_planned(en, ev);
    reset_not_planned(&base);
    if (json_array_size(unplanned)) {
        fprintf(stderr, "tracebook plan: not used, no plan depends on them (the optimizer's, the schedule's, data, "
                        "checkpoint, logging and device flags):");
        size_t i;
        json_t *f;
        json_array_foreach(unplanned, i, f) fprintf(stderr, "%s %s", i ? "," : "", json_string_value(f));
        fputc('\n', stderr);
    }
    const int have_gbs = base.global_batch_size > 0;  // a flag or --config's global_batch_size (default 0)
    if (!have_gbs && !a.explain) {
        fprintf(stderr, "tracebook plan: --global-batch-size is required (the planner fills dp and the microbatches "
                        "from it)\n");
        rc = TB_EXIT_USAGE;
        goto done;
    }
    if (a.gpus_per_node < 1 || a.gpu_memory < 1 || a.peak_tflops < 0 || !(a.compute_efficiency > 0 && a.compute_efficiency <= 1) ||
        !(a.intra > 0) || !(a.inter > 0) || a.max_mbs < 1 || a.max_vpp < 1 || a.top < 0 || a.max_mbs > 65536 ||
        a.max_vpp > 1024) {
        fprintf(stderr, "tracebook plan: --gpus-per-node (%d), --gpu-memory (%lld), --max-micro-batch-size (%d), "
                        "--max-virtual-stages (%d) must be positive (at most 65536 and 1024), --compute-efficiency "
                        "(%g) in (0, 1], the "
                        "bandwidths (%g, %g) positive, --top (%d) non-negative\n",
                a.gpus_per_node, (long long)a.gpu_memory, a.max_mbs, a.max_vpp, a.compute_efficiency, a.intra,
                a.inter, a.top);
        rc = TB_EXIT_USAGE;
        goto done;
    }

    if (a.explain) {
        layout_spec l;
        if (parse_layout(a.explain, &l, &err) != 0) {
            fprintf(stderr, "tracebook plan: %s\n", err.msg);
            rc = TB_EXIT_USAGE;
            goto done;
        }
        int64_t mp = (int64_t)l.tp * l.cp * l.pp;
        if (l.dp == 0) l.dp = cl.gpus > 0 && cl.gpus % mp == 0 ? (int)(cl.gpus / mp) : 1;
        if (cl.gpus == 0) cl.gpus = (int)(mp * l.dp);
        if ((int64_t)cl.gpus != mp * l.dp) {
            fprintf(stderr, "tracebook plan: --explain %s: tp x cp x pp x dp = %lld, --gpus is %d\n", a.explain,
                    (long long)(mp * l.dp), cl.gpus);
            rc = TB_EXIT_USAGE;
            goto done;
        }
        if (l.mbs == 0) l.mbs = given(en, ev, "--micro-batch-size") ? base.micro_batch_size : 1;
        if (!have_gbs) base.global_batch_size = l.mbs * l.dp * (l.pp > 1 ? l.pp : 1);  // m = pp: the fewest legal
        if (l.ep) base.expert_model_parallel_size = l.ep;
        if (l.etp) base.expert_tensor_parallel_size = l.etp;
        else if (!given(en, ev, "--expert-tensor-parallel-size")) base.expert_tensor_parallel_size = l.tp;  // Megatron's default
        tb_plan p;
        if (plan_evaluate(&p, &base, &cl, l.tp, l.cp, l.pp, l.vpp, l.mbs, &err) != 0) {
            fprintf(stderr, "tracebook plan: %s\n", err.msg);
            goto done;
        }
        const tb_plan_parameters np = plan_parameters(&base, l.tp);
        json_t *o = json_pack("{s:o, s:o, s:o, s:o, s:O}", "model", model_json(&p.cfg, a.model), "parameters",
                              plan_parameters_json(&np), "cluster", cluster_json(&cl), "plan", plan_to_json(&p, &cl),
                              "flags_not_planned", unplanned);
        const int written = emit_json(&a, o);
        json_decref(o);
        if (!a.json) plan_parameters_print(stdout, label, &np);
        if (!a.json) plan_explain(stdout, &p, &cl);
        rc = written != 0 ? TB_EXIT_FAILURE : p.legal ? 0 : TB_EXIT_FAILURE;
        if (!p.legal && a.json) fprintf(stderr, "tracebook plan: %s is not legal: %s\n", a.explain, p.rule);
        plan_free(&p);
        goto done;
    }

    const int fixed_tp = given(en, ev, "--tensor-model-parallel-size"), fixed_pp = given(en, ev, "--pipeline-model-parallel-size");
    const int fixed_cp = given(en, ev, "--context-parallel-size"), fixed_mbs = given(en, ev, "--micro-batch-size");
    const int fixed_vpp = given(en, ev, "--virtual-pipeline-model-parallel-size");
    const int vpp_from_layers = base.num_layers_per_virtual_pipeline_stage > 0;
    if (fixed_mbs && base.micro_batch_size < 1) {  // the search below doubles it: 0 never ends
        fprintf(stderr, "tracebook plan: --micro-batch-size (%d) must be at least 1\n", base.micro_batch_size);
        rc = TB_EXIT_USAGE;
        goto done;
    }
    const int fixed_ep = given(en, ev, "--expert-model-parallel-size");
    const int fixed_etp = given(en, ev, "--expert-tensor-parallel-size");
    int nplans = 0, cap = 0, nillegal = 0;
    tb_plan *plans = NULL;
    json_t *illegal = a.all ? json_array() : NULL;
    rule_count *rules = NULL;
    int nrules = 0, rules_cap = 0;
    for (int tp = 1; tp <= cl.gpus; tp++) {
        if (cl.gpus % tp || (fixed_tp && tp != base.tensor_model_parallel_size)) continue;
        for (int cp = 1; cp <= cl.gpus / tp; cp++) {
            if ((cl.gpus / tp) % cp || (fixed_cp && cp != base.context_parallel_size)) continue;
            for (int pp = 1; pp <= cl.gpus / tp / cp; pp++) {
                if ((cl.gpus / tp / cp) % pp || (fixed_pp && pp != base.pipeline_model_parallel_size)) continue;
                // --num-layers-per-virtual-pipeline-stage (a flag or --config's): each pp's virtual
                // size derived from it, as the engine derives it (plan_evaluate), not searched
                for (int v = 1; v <= (pp > 1 && (fixed_vpp || !vpp_from_layers) ? a.max_vpp : 1); v++) {
                    if (fixed_vpp && v != (base.virtual_pipeline_model_parallel_size > 1 ? base.virtual_pipeline_model_parallel_size : 1))
                        continue;
                    // ep: the divisors of num_experts (1 for a dense model); the rules decide the rest
                    for (int ep = 1; ep <= (base.num_experts > 0 ? base.num_experts : 1); ep++) {
                    if ((base.num_experts > 0 && base.num_experts % ep) || (fixed_ep && ep != base.expert_model_parallel_size))
                        continue;
                    // etp: Megatron's default (tp) and whole experts (1), or the one given
                    for (int ei = 0; ei < (base.num_experts > 0 && !fixed_etp && tp > 1 ? 2 : 1); ei++) {
                    tb_config cand = base;
                    cand.expert_model_parallel_size = ep;
                    if (base.num_experts > 0 && !fixed_etp) cand.expert_tensor_parallel_size = ei == 0 ? tp : 1;
                    for (int mbs = fixed_mbs ? base.micro_batch_size : 1; mbs <= (fixed_mbs ? base.micro_batch_size : a.max_mbs);
                         mbs *= 2) {
                        if (nplans == cap) {
                            cap = cap ? 2 * cap : 256;
                            plans = tb_xreallocarray(plans, (size_t)cap, sizeof *plans, "plans");
                        }
                        tb_plan *p = &plans[nplans];
                        if (plan_evaluate(p, &cand, &cl, tp, cp, pp, v, mbs, &err) != 0) {
                            fprintf(stderr, "tracebook plan: %s\n", err.msg);
                            goto done;
                        }
                        if (p->legal) {
                            nplans++;
                            continue;
                        }
                        nillegal++;
                        count_rule(&rules, &nrules, &rules_cap, p->rule);
                        if (illegal) {
                            char name[96];
                            plan_layout_name(p, name, sizeof name);
                            json_array_append_new(illegal, json_pack("{s:s, s:s}", "layout", name, "rule", p->rule));
                        }
                        plan_free(p);
                    }
                    }
                    }
                }
            }
        }
    }
    if (nplans) qsort(plans, (size_t)nplans, sizeof *plans, cmp_plans);  // (NULL when empty: qsort's
    if (nrules) qsort(rules, (size_t)nrules, sizeof *rules, cmp_rules);  // argument must not be)
    int fitting = 0;
    for (int i = 0; i < nplans; i++) fitting += plans[i].fits;
    const int shown = a.top == 0 || a.top > nplans ? nplans : a.top;
    int written = 0;
    // the padded count at the first layout's tp (the vocabulary's padding is tp's)
    const int count_tp = nplans ? plans[0].tp : fixed_tp ? base.tensor_model_parallel_size : 1;
    const tb_plan_parameters np = plan_parameters(&base, count_tp);
    {
        json_t *cands = json_array(), *by_rule = json_array();
        for (int i = 0; i < shown; i++) json_array_append_new(cands, plan_to_json(&plans[i], &cl));
        for (int i = 0; i < nrules; i++)
            json_array_append_new(by_rule, json_pack("{s:s, s:i}", "rule", rules[i].rule, "layouts", rules[i].count));
        json_t *o = json_pack("{s:o, s:o, s:o, s:i, s:i, s:i, s:o, s:o}", "model", model_json(&base, a.model),
                              "parameters", plan_parameters_json(&np), "cluster", cluster_json(&cl), "legal", nplans,
                              "fit", fitting, "illegal", nillegal, "illegal_by_rule", by_rule, "candidates", cands);
        if (illegal) json_object_set_new(o, "illegal_layouts", json_incref(illegal));
        json_object_set(o, "flags_not_planned", unplanned);
        written = emit_json(&a, o);
        json_decref(o);
    }
    if (!a.json) {
        plan_parameters_print(stdout, label, &np);
        printf("tracebook plan: %d GPUs (%d per node, %.0f GiB each), %s; %d legal layouts, %d fit, %d illegal\n",
               cl.gpus, cl.gpus_per_node, gib(cl.gpu_memory),
               cl.precision == TB_PLAN_BF16 ? "bf16" : cl.precision == TB_PLAN_FP16 ? "fp16" : "fp32 (the engine's)",
               nplans, fitting, nillegal);
        if (nplans) print_table(stdout, plans, shown, &cl);
        if (nrules) {
            printf("illegal layouts by the first rule they break (the engine's config rules):\n");
            for (int i = 0; i < nrules && i < 5; i++) printf("  %5d  %s\n", rules[i].count, rules[i].rule);
        }
        if (illegal) {
            size_t i;
            json_t *e;
            json_array_foreach(illegal, i, e) printf("  illegal %-28s %s\n", json_string_value(json_object_get(e, "layout")),
                                                     json_string_value(json_object_get(e, "rule")));
        }
    }
    json_decref(illegal);
    rc = written != 0 ? TB_EXIT_FAILURE : 0;
    if (nplans == 0) {
        fprintf(stderr, "tracebook plan: no legal layout of this model on %d GPUs%s%s\n", cl.gpus,
                nrules ? "; the most common rule broken: " : "", nrules ? rules[0].rule : "");
        rc = TB_EXIT_FAILURE;
    } else if (fitting == 0) {
        char name[96];
        plan_layout_name(&plans[0], name, sizeof name);
        fprintf(stderr, "tracebook plan: no legal layout fits in %.2f GiB per GPU: the smallest peak is %.2f GiB (%s, "
                        "stage %d)\n", gib(cl.gpu_memory), gib(plans[0].peak_bytes), name, plans[0].peak_stage);
        rc = TB_EXIT_FAILURE;
    }
    for (int i = 0; i < nplans; i++) plan_free(&plans[i]);
    free(plans);
    free(rules);
done:
    json_decref(unplanned);
    free(pv);
    free(ev);
    return rc;
}
