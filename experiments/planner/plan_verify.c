// plan_verify.c — `tracebook plan --verify` (plan_cli.h): small shapes of each layout family
// run by the engine, each plan figure compared with what the engine measured.
// docs/ARCHITECTURE.md, "Planner".
//
// Exact: per rank, the parameters of its buffers (pipeline.json ranks[].parameters), the
// allocator's peak bytes of parameters, gradients and optimizer state (metrics
// mem_peak_bytes), the activation peak (the engine's saved tensors walked through its
// schedule), the theoretical bubble (pipeline.json), and the bytes per step of every group
// (the comm_bytes parser over the traces; under expert parallelism the all-to-all
// dispatcher's as the mean over a stage's ranks, which no routing changes). Reported only:
// Korthikanti's 16-bit formula against the measured fp32 activations, and the busiest rank's
// all-to-all bytes against the balanced router's, as ratios with their reason.
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <fcntl.h>

#include "core/error.h"
#include "core/fileio.h"
#include "core/run_dir.h"
#include "core/xalloc.h"
#include "prove/parsers.h"
#include "planner/plan.h"
#include "planner/plan_cli.h"
#include "records/recorder.h"

// The families: the dense baseline, tensor parallel with sequence parallelism, 1F1B,
// interleaved, data parallel with the distributed optimizer, context parallel, full and
// selective recompute, and a LLaMA-style shape (SwiGLU, RMSNorm, RoPE, grouped-query,
// untied, no biases) across tp x pp x dp.
typedef struct verify_case {
    const char *name;
    const char *flags;
} verify_case;

#define TINY_BASE "--num-layers 4 --hidden-size 64 --num-attention-heads 4 --num-query-groups 2 --seq-length 32 " \
                  "--vocab-size 256 --train-iters 2 --global-batch-size 8"
// The cases run the local core unless they name flash: Korthikanti's formula, the ratio's
// denominator, counts the T x T softmax probabilities the local core saves (auto, the engine's
// default, would pick flash).
#define TINY TINY_BASE " --attention-backend local --micro-batch-size 2"
#define TINY1 TINY_BASE " --attention-backend local --micro-batch-size 1"  // (a flag is given once)
#define TINY_FLASH TINY_BASE " --attention-backend flash --micro-batch-size 2"
#define TINY1_FLASH TINY_BASE " --attention-backend flash --micro-batch-size 1"
static const verify_case cases[] = {
    {"single rank", TINY},
    {"tp2 + sequence parallel", TINY " --tensor-model-parallel-size 2 --sequence-parallel"},
    {"pp2 1F1B", TINY1 " --pipeline-model-parallel-size 2"},
    {"pp2 interleaved v2", TINY1 " --pipeline-model-parallel-size 2 --virtual-pipeline-model-parallel-size 2"},
    {"dp2 distributed optimizer", TINY " --world-size 2 --use-distributed-optimizer"},
    {"cp2 (flash)", TINY_FLASH " --context-parallel-size 2"},
    {"full recompute, uniform 2", TINY " --recompute-granularity full --recompute-method uniform --recompute-num-layers 2"},
    {"selective recompute, tp2", TINY " --recompute-granularity selective --tensor-model-parallel-size 2"},
    {"cp2 x tp2 + sp, pp2, block recompute 1", TINY1_FLASH " --context-parallel-size 2 "
                                "--tensor-model-parallel-size 2 --sequence-parallel --pipeline-model-parallel-size 2 "
                                "--recompute-granularity full --recompute-method block "
                                "--recompute-num-layers 1"},
    {"LLaMA-style tp2 pp2 dp2", TINY1 " --swiglu --normalization RMSNorm --position-embedding-type rope "
                                "--untie-embeddings-and-output-weights --disable-bias-linear --ffn-hidden-size 96 "
                                "--tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 --world-size 8 "
                                "--use-distributed-optimizer --sequence-parallel"},
    // --qk-layernorm: the q and k norms' weights whole on every tp rank (their gradients all-reduced
    // over tp), the queries and keys before them and their statistics saved per layer
    {"qk-layernorm tp2 + sp, RMSNorm rope", TINY " --qk-layernorm --normalization RMSNorm "
                                "--position-embedding-type rope --tensor-model-parallel-size 2 --sequence-parallel"},
    // MoE: at ep 1 every figure is exact (no token dropped: R = N x k rows); under ep 2 the
    // rows reaching a rank's experts are the routing's, so its activations are a ratio
    {"MoE E4 top-2, ep1 dp2", TINY " --num-experts 4 --moe-router-topk 2 --world-size 2"},
    {"MoE E4 top-2 + shared, ep2 alltoall dp2", TINY " --num-experts 4 --moe-router-topk 2 --moe-ffn-hidden-size 32 "
                                "--moe-shared-expert-intermediate-size 48 --world-size 2 --expert-model-parallel-size 2 "
                                "--moe-token-dispatcher-type alltoall"},
    {"MoE E4 top-2, ep2 x expert-dp2 x pp2", TINY1 " --num-experts 4 --moe-router-topk 2 --moe-ffn-hidden-size 32 "
                                "--world-size 8 --pipeline-model-parallel-size 2 --expert-model-parallel-size 2 "
                                "--moe-token-dispatcher-type alltoall"},
    // MoE under tensor + sequence parallelism: the router and dispatcher on each tp rank's
    // shard; at etp 2 each expert split over the etp group (its fc2 bias whole), the rows
    // all-gathered and reduce-scattered over etp; at etp 1 the experts whole on every tp rank
    // Megatron-FSDP: each unit's gradients reduce-scattered every microbatch (two here), its
    // parameters gathered before its forward and backward (a recomputed layer's forward too)
    {"dp2 fsdp optim_grads", TINY " --world-size 2 --use-distributed-optimizer --use-megatron-fsdp "
                                "--data-parallel-sharding-strategy optim_grads"},
    {"dp2 fsdp optim_grads_params, full recompute", TINY " --world-size 2 --use-distributed-optimizer "
                                "--use-megatron-fsdp --data-parallel-sharding-strategy optim_grads_params "
                                "--recompute-granularity full --recompute-method uniform --recompute-num-layers 2"},
    {"tp2 sp x dp2 fsdp optim_grads_params, untied", TINY " --world-size 4 --tensor-model-parallel-size 2 "
                                "--sequence-parallel --untie-embeddings-and-output-weights --use-distributed-optimizer "
                                "--use-megatron-fsdp --data-parallel-sharding-strategy optim_grads_params"},
    {"MoE tp2 sp x etp2 x ep2, dist-opt", TINY " --num-experts 4 --moe-router-topk 2 --moe-ffn-hidden-size 32 "
                                "--tensor-model-parallel-size 2 --sequence-parallel --expert-model-parallel-size 2 "
                                "--expert-tensor-parallel-size 2 --world-size 4 --moe-token-dispatcher-type alltoall "
                                "--use-distributed-optimizer"},
    {"MoE + shared, tp2 sp x etp1 x ep2", TINY " --num-experts 4 --moe-router-topk 2 --moe-ffn-hidden-size 32 "
                                "--moe-shared-expert-intermediate-size 48 --tensor-model-parallel-size 2 "
                                "--sequence-parallel --expert-model-parallel-size 2 --expert-tensor-parallel-size 1 "
                                "--world-size 4 --moe-token-dispatcher-type alltoall"},
    {"MoE tp2 sp x etp2 x ep2, allgather", TINY " --num-experts 4 --moe-router-topk 2 --moe-ffn-hidden-size 32 "
                                "--tensor-model-parallel-size 2 --sequence-parallel --expert-model-parallel-size 2 "
                                "--expert-tensor-parallel-size 2 --world-size 4 --moe-token-dispatcher-type allgather"},
};

static int split_words(const char *text, char ***out) {
    char *copy = tb_xstrdup(text, "verify flags");
    int n = 0, cap = 8;
    char **v = tb_xcalloc((size_t)cap, sizeof *v, "verify flags");
    for (char *tok = strtok(copy, " "); tok; tok = strtok(NULL, " ")) {
        if (n + 2 >= cap) v = tb_xreallocarray(v, (size_t)(cap *= 2), sizeof *v, "verify flags");
        v[n++] = tb_xstrdup(tok, "verify flag");
    }
    free(copy);
    *out = v;
    return n;
}

static void free_words(char **v, int n) {
    for (int i = 0; i < n; i++) free(v[i]);
    free(v);
}

static int run_engine(const char *engine, char **flags, int nflags, const char *run_dir, const char *log, tb_error *err) {
    char **argv = tb_xcalloc((size_t)nflags + 4, sizeof *argv, "engine argv");
    argv[0] = (char *)engine;
    for (int i = 0; i < nflags; i++) argv[i + 1] = flags[i];
    argv[nflags + 1] = "--run-dir";
    argv[nflags + 2] = (char *)run_dir;
    pid_t pid = fork();
    if (pid < 0) {
        free(argv);
        return tb_fail(err, "%s: fork: %s", engine, strerror(errno));
    }
    if (pid == 0) {
        int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
        }
        execv(engine, argv);
        _exit(127);
    }
    free(argv);
    int status;
    while (waitpid(pid, &status, 0) < 0)
        if (errno != EINTR) return tb_fail(err, "%s: waitpid: %s", engine, strerror(errno));
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        return tb_fail(err, "%s exited with status %d (see %s)", engine, WIFEXITED(status) ? WEXITSTATUS(status) : -1,
                       log);
    return 0;
}

// The last line of a rank's metrics file.
// A rank's metrics line of step 1 (the runs train 2 steps: the last one's end gathers what
// training's end reads, under Megatron-FSDP — not a step of the steady state the plan models).
static json_t *step1_metrics(const char *run_dir, int rank, tb_error *err) {
    char path[PATH_MAX];
    if (tb_rank_file_path(path, sizeof path, run_dir, TB_RANK_METRICS, rank, err) != 0) return NULL;
    FILE *f = fopen(path, "r");
    if (!f) {
        tb_fail(err, "%s: %s", path, strerror(errno));
        return NULL;
    }
    char line[65536];
    json_t *o = NULL;
    int bad = 0;
    while (!o && !bad && fgets(line, sizeof line, f)) {
        if (line[0] != '{') continue;
        json_error_t je;
        o = json_loads(line, 0, &je);
        if (!o) bad = tb_fail(err, "%s: %s", path, je.text);
        else if (json_integer_value(json_object_get(o, "step")) != 1) json_decref(o), o = NULL;
    }
    fclose(f);
    if (!o && !bad) tb_fail(err, "%s: no metrics line of step 1", path);
    return o;
}

typedef struct check_log {
    json_t *checks;
    int exact_total, exact_failed;
    double ratio_min, ratio_max;  // measured / Korthikanti over the case's stages
    FILE *out;
} check_log;

static void check_exact(check_log *log, const char *what, int where, double predicted, double measured) {
    const int ok = predicted == measured;
    log->exact_total++;
    log->exact_failed += !ok;
    json_array_append_new(log->checks, json_pack("{s:s, s:i, s:f, s:f, s:b}", "quantity", what, "rank_or_stage", where,
                                                 "predicted", predicted, "measured", measured, "exact", ok));
    if (log->out)
        fprintf(log->out, "    %-34s %4d %16.0f %16.0f  %s\n", what, where, predicted, measured, ok ? "exact" : "DIFFERS");
}

// korthikanti: the ratio is Korthikanti's formula's (the summary's column), else another estimate's
static void report_ratio(check_log *log, const char *what, int where, double predicted, double measured,
                         int korthikanti) {
    const double ratio = predicted > 0 ? measured / predicted : 0.0;
    if (korthikanti && ratio < log->ratio_min) log->ratio_min = ratio;
    if (korthikanti && ratio > log->ratio_max) log->ratio_max = ratio;
    json_array_append_new(log->checks, json_pack("{s:s, s:i, s:f, s:f, s:f}", "quantity", what, "rank_or_stage", where,
                                                 "predicted", predicted, "measured", measured, "measured_over_predicted",
                                                 predicted > 0 ? measured / predicted : 0.0));
    if (log->out)
        fprintf(log->out, "    %-34s %4d %16.0f %16.0f  ratio %.3f\n", what, where, predicted, measured,
                predicted > 0 ? measured / predicted : 0.0);
}

// A MoE dispatcher's group (ep, etp): what one rank sends and receives depends on the routing,
// but every row sent is received (over etp every row received over ep gathered to each
// member, the outputs reduce-scattered the same), so the mean over a stage's ranks is the
// balanced router's figure exactly (no capacity: no token dropped); the busiest rank a ratio.
static int moe_dispatch_check(check_log *log, const char **record, const tb_plan *p, const char *group,
                              double predicted, int per_stage, tb_error *err) {
    double v;
    json_t *args = json_pack("{s:s, s:i}", "group", group, "step", 1), *ev = NULL;
    int prc = tb_parse_claim("comm_bytes", args, record, 1, &v, &ev, err);
    json_decref(args);
    if (prc != 0) return -1;
    json_t *per_rank = json_object_get(json_array_get(json_object_get(ev, "records"), 0), "per_rank");
    double busiest_stage = 0;
    for (int st = 0; st < p->nstages; st++) {
        double sum = 0;
        for (int r = st * per_stage; r < (st + 1) * per_stage; r++)
            sum += json_number_value(json_object_get(json_array_get(per_rank, (size_t)r), "bytes"));
        if (sum / per_stage > busiest_stage) busiest_stage = sum / per_stage;
    }
    json_decref(ev);
    char what[64];
    snprintf(what, sizeof what, "comm bytes/step, %s (stage mean)", group);
    check_exact(log, what, 0, predicted, busiest_stage);
    snprintf(what, sizeof what, "comm bytes/step, %s (busiest rank)", group);
    report_ratio(log, what, 0, predicted, v, 0);
    return 0;
}

static int verify_case_run(const char *engine, const char *dir, int index, check_log *log, json_t *jcase, tb_error *err) {
    const verify_case *vc = &cases[index];
    char **words;
    const int n = split_words(vc->flags, &words);
    int rc = -1;
    char case_dir[PATH_MAX], run_dir[PATH_MAX], logf[PATH_MAX];
    if (tb_path_format(case_dir, sizeof case_dir, err, "%s/case-%d", dir, index) != 0 ||
        tb_path_format(run_dir, sizeof run_dir, err, "%s/" TB_RECORD_RUN_DIR, case_dir) != 0 ||
        tb_path_format(logf, sizeof logf, err, "%s/" TB_RECORD_STDOUT, case_dir) != 0)
        goto out;
    if (mkdir(case_dir, 0755) != 0 && errno != EEXIST) {
        tb_fail(err, "%s: %s", case_dir, strerror(errno));
        goto out;
    }
    // the plan, from the same flags the engine gets
    char **argv = tb_xcalloc((size_t)n + 2, sizeof *argv, "plan argv");
    argv[0] = "pretrain_gpt";
    for (int i = 0; i < n; i++) argv[i + 1] = words[i];
    tb_config cfg;
    config_defaults(&cfg);
    int help = 0;
    int parsed = config_parse_args(&cfg, n + 1, argv, &help, err);
    free(argv);
    if (parsed != 0) goto out;
    config_resolve(&cfg);
    tb_plan_cluster cl = {cfg.world_size, cfg.world_size, INT64_MAX, 0, 1, 1, 1, TB_PLAN_FP32};
    tb_plan p;
    if (plan_evaluate(&p, &cfg, &cl, cfg.tensor_model_parallel_size, cfg.context_parallel_size,
                      cfg.pipeline_model_parallel_size, cfg.virtual_pipeline_model_parallel_size, cfg.micro_batch_size,
                      err) != 0)
        goto out;
    if (!p.runs_here) {
        tb_fail(err, "case '%s': the plan says the engine cannot run it: %s", vc->name, p.rule);
        plan_free(&p);
        goto out;
    }
    char name[96];
    plan_layout_name(&p, name, sizeof name);
    if (log->out)
        fprintf(log->out, "  %s (%s, m %d): %s\n", vc->name, name, p.microbatches, vc->flags + strlen(TINY_BASE) + 1);
    if (run_engine(engine, words, n, run_dir, logf, err) != 0) {
        plan_free(&p);
        goto out;
    }
    json_object_set_new(jcase, "name", json_string(vc->name));
    json_object_set_new(jcase, "layout", json_string(name));
    json_object_set_new(jcase, "flags", json_string(vc->flags));
    json_object_set_new(jcase, "run_dir", json_string(run_dir));

    char path[PATH_MAX];
    json_error_t je;
    if (tb_run_path(path, sizeof path, run_dir, TB_RUN_PIPELINE, err) != 0) goto plan_out;
    json_t *pipe = json_load_file(path, 0, &je);
    if (!pipe) {
        tb_fail(err, "%s: %s", path, je.text);
        goto plan_out;
    }
    check_exact(log, "theoretical bubble", 0, p.bubble,
                json_real_value(json_object_get(pipe, "theoretical_bubble_fraction")));
    const int per_stage = p.tp * p.cp * p.dp;
    json_t *ranks = json_object_get(pipe, "ranks");
    for (int r = 0; r < cfg.world_size; r++) {
        const tb_plan_stage *st = &p.stages[r / per_stage];
        json_t *m = step1_metrics(run_dir, r, err);
        if (!m) {
            json_decref(pipe);
            goto plan_out;
        }
        json_t *peak = json_object_get(m, "mem_peak_bytes");
        json_t *pr = json_array_get(ranks, (size_t)r);
        check_exact(log, "parameters (buffer, aligned)", r, (double)st->params_aligned,
                    (double)json_integer_value(json_object_get(pr, "parameters")));
        check_exact(log, "param bytes", r, (double)st->param_bytes, (double)json_integer_value(json_object_get(peak, "params")));
        check_exact(log, "grad bytes", r, (double)st->grad_bytes, (double)json_integer_value(json_object_get(peak, "grads")));
        check_exact(log, "optimizer bytes", r, (double)st->optimizer_bytes,
                    (double)json_integer_value(json_object_get(peak, "optimizer")));
        check_exact(log, "gathered bytes (Megatron-FSDP)", r, (double)st->gathered_bytes,
                    (double)json_integer_value(json_object_get(peak, "gathered")));
        const double act = (double)json_integer_value(json_object_get(peak, "activations"));
        if (p.ep > 1)  // the rows reaching this rank's experts depend on the routing: a balanced router's estimate
            report_ratio(log, "activation bytes (MoE ep, estimate)", r, (double)st->activation_bytes_engine, act, 0);
        else
            check_exact(log, "activation bytes (engine model)", r, (double)st->activation_bytes_engine, act);
        if (r % per_stage == 0) report_ratio(log, "activations vs Korthikanti (16-bit)", r, (double)st->activation_bytes_korthikanti, act, 1);
        json_decref(m);
    }
    json_decref(pipe);
    // communication per group: the comm_bytes parser over the traces (the busiest rank)
    const char *record = case_dir;
    const struct {
        const char *group;
        double predicted;
    } groups[] = {{"tp", p.comm.tp}, {"cp", p.comm.cp}, {"pp", p.comm.pp}, {"pp_grad", p.comm.pp_grad},
                  {"dp_cp", p.comm.dp_cp}, {"embedding", p.comm.embedding}};
    for (size_t g = 0; g < sizeof groups / sizeof *groups; g++) {
        double v;
        json_t *args = json_pack("{s:s, s:i}", "group", groups[g].group, "step", 1);
        int prc = tb_parse_claim("comm_bytes", args, &record, 1, &v, NULL, err);
        json_decref(args);
        if (prc != 0) goto plan_out;
        char what[64];
        snprintf(what, sizeof what, "comm bytes/step, group %s", groups[g].group);
        check_exact(log, what, 0, groups[g].predicted, v);
    }
    if (p.ep > 1 || p.comm.expert_dp > 0) {
        // the experts' gradients over expert-dp: the same on every rank of a stage, exact
        double v;
        json_t *args = json_pack("{s:s, s:i}", "group", "expert_dp", "step", 1);
        int prc = tb_parse_claim("comm_bytes", args, &record, 1, &v, NULL, err);
        json_decref(args);
        if (prc != 0) goto plan_out;
        check_exact(log, "comm bytes/step, group expert_dp", 0, p.comm.expert_dp, v);
    }
    if (p.ep > 1 && moe_dispatch_check(log, &record, &p, "ep", p.comm.ep, per_stage, err) != 0) goto plan_out;
    if (p.etp > 1 && moe_dispatch_check(log, &record, &p, "etp", p.comm.etp, per_stage, err) != 0) goto plan_out;
    rc = 0;
plan_out:
    plan_free(&p);
out:
    free_words(words, n);
    return rc;
}

static int engine_path(const char *given_path, const char *argv0, char *out, size_t len, tb_error *err) {
    if (given_path) return tb_path_format(out, len, err, "%s", given_path);
    char self[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0) snprintf(self, sizeof self, "%s", argv0);
    else self[n] = '\0';
    char *slash = strrchr(self, '/');
    if (slash) *slash = '\0';
    else snprintf(self, sizeof self, ".");
    return tb_path_format(out, len, err, "%s/pretrain_gpt", self);
}

int plan_verify_main(const char *pretrain_gpt, const char *work_dir, int json, const char *argv0) {
    tb_error err;
    char engine[PATH_MAX], dir[PATH_MAX];
    if (engine_path(pretrain_gpt, argv0, engine, sizeof engine, &err) != 0 || access(engine, X_OK) != 0) {
        fprintf(stderr, "tracebook plan --verify: the engine %s is not executable (--pretrain-gpt PATH)\n", engine);
        return TB_EXIT_USAGE;
    }
    if (work_dir) {
        snprintf(dir, sizeof dir, "%s", work_dir);
        if (tb_run_dir_check_unused("--work-dir", dir, &err) != 0) {  // (each case's run/ must be new)
            fprintf(stderr, "tracebook plan --verify: %s\n", err.msg);
            return TB_EXIT_USAGE;
        }
        if (mkdir(dir, 0755) != 0 && errno != EEXIST) {
            fprintf(stderr, "tracebook plan --verify: --work-dir %s: %s\n", dir, strerror(errno));
            return TB_EXIT_USAGE;
        }
    } else {
        const char *tmp = getenv("TMPDIR");
        snprintf(dir, sizeof dir, "%s/tracebook-plan-verify.XXXXXX", tmp && *tmp ? tmp : "/tmp");
        if (!mkdtemp(dir)) {
            fprintf(stderr, "tracebook plan --verify: %s: %s\n", dir, strerror(errno));
            return TB_EXIT_FAILURE;
        }
    }
    check_log log = {json_array(), 0, 0, 0, 0, json ? NULL : stdout};
    char summary[sizeof cases / sizeof *cases][256];
    json_t *jcases = json_array();
    if (!json)
        printf("tracebook plan --verify: the plan (fp32, the engine's accounting) against the engine, %zu layouts, in %s\n"
               "    %-34s %4s %16s %16s\n",
               sizeof cases / sizeof *cases, dir, "quantity", "rank", "predicted", "measured");
    int failed_runs = 0;
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        json_t *jc = json_object();
        json_t *before = log.checks;
        const int before_total = log.exact_total, before_failed = log.exact_failed;
        log.checks = json_array();
        log.ratio_min = 1e300, log.ratio_max = 0;
        if (verify_case_run(engine, dir, (int)i, &log, jc, &err) != 0) {
            fprintf(stderr, "tracebook plan --verify: case '%s': %s\n", cases[i].name, err.msg);
            json_object_set_new(jc, "error", json_string(err.msg));
            failed_runs++;
        }
        json_object_set_new(jc, "checks", log.checks);
        json_object_set_new(jc, "activations_over_korthikanti",
                            json_pack("{s:f, s:f}", "min", log.ratio_min, "max", log.ratio_max));
        snprintf(summary[i], sizeof summary[i], "  %-40s %6d %6d   %.2f-%.2f", cases[i].name,
                 log.exact_total - before_total, (log.exact_total - before_total) - (log.exact_failed - before_failed),
                 log.ratio_min, log.ratio_max);
        json_array_append_new(jcases, jc);
        log.checks = before;
    }
    json_decref(log.checks);
    if (json) {
        json_t *o = json_pack("{s:s, s:s, s:o, s:i, s:i, s:i, s:s}", "engine", engine, "work_dir", dir, "cases", jcases,
                              "exact_checks", log.exact_total, "exact_failed", log.exact_failed, "failed_runs",
                              failed_runs, "korthikanti_note",
                              "Korthikanti's Table 2 counts 16-bit activations with 1-byte dropout masks and shards "
                              "every saved tensor under sequence parallelism; the engine saves fp32, has no dropout, "
                              "keeps the gathered norm outputs (the column-parallel GEMM inputs) whole under sequence "
                              "parallelism, the flash core's log-sum-exp, and aligns each tensor to 64 bytes");
        char *s = json_dumps(o, JSON_INDENT(2));
        puts(s);
        free(s);
        json_decref(o);
    } else {
        json_decref(jcases);
        printf("\n  %-40s %6s %6s   %s\n", "layout family", "checks", "exact", "activations measured / Korthikanti");
        for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) printf("%s\n", summary[i]);
        printf("%d exact checks, %d differ; %d runs failed. Korthikanti ratios: the engine saves fp32 (2x the 16-bit "
               "formula), no dropout masks, whole gathered norm outputs under sequence parallelism\n",
               log.exact_total, log.exact_failed, failed_runs);
    }
    return log.exact_failed || failed_runs ? TB_EXIT_FAILURE : 0;
}
