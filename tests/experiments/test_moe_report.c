// test_moe_report.c — `tracebook moe` (experiments/inspect/moe_report.h): the load imbalance over
// steps, tokens per expert, drops, aux loss and the all-to-all bytes and wait vs transfer of a
// synthetic run directory with known answers; then real expert-parallel runs (rank threads
// and mpirun processes), whose every routed token and every all-to-all byte is accounted for.
#include <jansson.h>
#include <math.h>
#include <string.h>

#include "inspect/moe_report.h"
#include "tb_mpirun.h"
#include "tb_run_dir.h"
#include "tb_shell.h"
#include "tb_test.h"
#include "tb_trace_events.h"

#define TRACEBOOK TB_BIN_DIR "/tracebook"
#define PRETRAIN TB_BIN_DIR "/pretrain_gpt"

static tb_output sh;

static json_t *ep_call(const char *op, int seq, double ts, double dur, int depth, int bytes) {
    char name[64];
    snprintf(name, sizeof name, "comm.ep.%s", op);
    return tb_trace_range(name, ts, dur, depth,
                 json_pack("{s:s, s:s, s:i, s:i, s:i}", "group", "ep", "op", op, "group_id", 7, "seq", seq, "bytes",
                           bytes));
}

// World 2, ep 2, 4 experts (ep rank 0 holds experts 0 and 1), layer 0 of 2 a MoE layer, 3 steps:
//   step  rank 0 tokens   rank 1 tokens   sum           max/mean  ep ranks  ep max/mean
//   1     4 2 1 1         2 2 3 1         6 4 4 2       1.5       10 6      1.25
//   2     2 2 2 2         2 2 2 2         4 4 4 4       1         8 8       1
//   3     5 1 1 1         3 1 1 3         8 2 2 4       2         10 6      1.25
// imbalance min 1, median 1.5, max 2; ep 1, 1.25, 1.25; tokens 18 10 10 10 (48); rank 0 drops 2
// at step 3; aux loss per step the ranks' mean: 1.1, 1.0, 1.5 (mean 1.2); a2a_bytes 100 and 200
// per step. Trace: step 1's dispatch all-to-all, rank 0 in at 10 µs, rank 1 at 16, both out at
// 30: rank 0 waits 6 µs and transfers 14, rank 1 transfers 14; the combine backward's, rank 0
// in at 60, rank 1 at 65, out at 70: 5 and 5, 0 and 5; bytes 150 + 150 and 300 + 300. Not the
// layer's: an all-gather in its dispatch, an all-to-all outside any MoE range.
static void synthetic_run(const char *dir) {
    tb_run(&sh, NULL, "rm -rf %s && mkdir -p %s", dir, dir);
    char path[1024];
    snprintf(path, sizeof path, "%s/config.json", dir);
    tb_write_json(path, json_pack("{s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:b}", "num_layers", 2, "num_experts", 4,
                               "moe_router_topk", 1, "world_size", 2, "tensor_model_parallel_size", 1,
                               "expert_model_parallel_size", 2, "expert_tensor_parallel_size", 1, "sequence_parallel", 0));
    static const int tokens[3][2][4] = {{{4, 2, 1, 1}, {2, 2, 3, 1}}, {{2, 2, 2, 2}, {2, 2, 2, 2}},
                                        {{5, 1, 1, 1}, {3, 1, 1, 3}}};
    static const double aux[3][2] = {{1.2, 1.0}, {1.0, 1.0}, {1.4, 1.6}};
    for (int r = 0; r < 2; r++) {
        char text[4096] = "";
        for (int s = 0; s < 3; s++) {
            json_t *line = json_pack(
                "{s:i, s:f, s:[{s:i, s:[i,i,i,i], s:i, s:i, s:f}]}", "step", s + 1, "step_ms", 1.0, "moe", "layer", 0,
                "tokens_per_expert", tokens[s][r][0], tokens[s][r][1], tokens[s][r][2], tokens[s][r][3],
                "dropped_tokens", r == 0 && s == 2 ? 2 : 0, "a2a_bytes", 100 * (r + 1), "load_balancing_loss", aux[s][r]);
            char *one = json_dumps(line, JSON_COMPACT);
            strcat(text, one), strcat(text, "\n");
            free(one);
            json_decref(line);
        }
        tb_write_text(tb_rank_path(path, sizeof path, dir, TB_RANK_METRICS, r), text);
        json_t *ev = json_array();
        json_array_append_new(ev, tb_trace_range("train_step", 0, 200, 0, json_pack("{s:i}", "step", 1)));
        json_array_append_new(ev, tb_trace_range("layer.0.moe.dispatch", 0, 50, 1, NULL));
        json_array_append_new(ev, ep_call("all_gather", 1, 2, 3, 2, 32));
        json_array_append_new(ev, ep_call("all_to_all", 2, r ? 16 : 10, r ? 14 : 20, 2, 150 * (r + 1)));
        json_array_append_new(ev, tb_trace_range("layer.0.moe.combine.backward", 55, 20, 1, NULL));
        json_array_append_new(ev, ep_call("all_to_all", 3, r ? 65 : 60, r ? 5 : 10, 2, 150 * (r + 1)));
        json_array_append_new(ev, ep_call("all_to_all", 4, 100, 10, 1, 999));  // in train_step, no MoE range
        tb_write_json(tb_rank_path(path, sizeof path, dir, TB_RANK_TRACE, r), json_pack("{s:o}", "traceEvents", ev));
    }
}

static int near(double a, double b) { return fabs(a - b) < 1e-9; }

static double at(const json_t *o, const char *a, const char *b) {
    return json_number_value(json_object_get(b ? json_object_get(o, a) : o, b ? b : a));
}

TB_TEST(imbalance_tokens_aux_loss_and_all_to_all_of_a_known_run) {
    const char *dir = TB_TEST_TMPDIR "/moe_report_synthetic";
    synthetic_run(dir);
    tb_error err;
    json_t *rep = tb_moe_report(dir, &err);
    TB_REQUIRE(rep, "%s", err.msg);
    json_t *layers = json_object_get(rep, "layers");
    TB_REQUIRE(json_array_size(layers) == 1, "one MoE layer (%zu)", json_array_size(layers));
    json_t *l = json_array_get(layers, 0);
    TB_CHECK(json_integer_value(json_object_get(l, "layer")) == 0 && json_integer_value(json_object_get(l, "steps")) == 3,
             "layer 0 over 3 steps");
    TB_CHECK(near(at(l, "imbalance", "min"), 1) && near(at(l, "imbalance", "median"), 1.5) &&
                 near(at(l, "imbalance", "max"), 2),
             "imbalance %g %g %g, want 1 1.5 2", at(l, "imbalance", "min"), at(l, "imbalance", "median"),
             at(l, "imbalance", "max"));
    TB_CHECK(near(at(l, "ep_imbalance", "min"), 1) && near(at(l, "ep_imbalance", "median"), 1.25) &&
                 near(at(l, "ep_imbalance", "max"), 1.25),
             "ep imbalance %g %g %g, want 1 1.25 1.25", at(l, "ep_imbalance", "min"), at(l, "ep_imbalance", "median"),
             at(l, "ep_imbalance", "max"));
    json_t *t = json_object_get(l, "tokens_per_expert");
    TB_CHECK(json_integer_value(json_array_get(t, 0)) == 18 && json_integer_value(json_array_get(t, 1)) == 10 &&
                 json_integer_value(json_array_get(t, 3)) == 10 && at(l, "routed_tokens", NULL) == 48 &&
                 at(l, "dropped_tokens", NULL) == 2,
             "tokens 18 10 10 10 (48), 2 dropped");
    TB_CHECK(near(at(l, "load_balancing_loss", "first"), 1.1) && near(at(l, "load_balancing_loss", "last"), 1.5) &&
                 near(at(l, "load_balancing_loss", "mean"), 1.2),
             "aux loss first %g last %g mean %g", at(l, "load_balancing_loss", "first"),
             at(l, "load_balancing_loss", "last"), at(l, "load_balancing_loss", "mean"));
    json_t *a2a = json_object_get(l, "a2a"), *r0 = json_array_get(json_object_get(a2a, "ranks"), 0),
           *r1 = json_array_get(json_object_get(a2a, "ranks"), 1);
    TB_CHECK(at(a2a, "calls", NULL) == 4 && at(a2a, "bytes", NULL) == 900 && at(a2a, "metrics_bytes", NULL) == 900,
             "a2a: %g calls, %g bytes (metrics %g): want 4 (the layer's only), 900, 900", at(a2a, "calls", NULL),
             at(a2a, "bytes", NULL), at(a2a, "metrics_bytes", NULL));
    TB_CHECK(near(at(r0, "wait_ms", NULL), 0.011) && near(at(r0, "transfer_ms", NULL), 0.019) &&
                 at(r1, "wait_ms", NULL) == 0 && near(at(r1, "transfer_ms", NULL), 0.019) && at(r0, "bytes", NULL) == 300,
             "rank 0 waits 11 us and transfers 19, rank 1 0 and 19: %g %g, %g %g", at(r0, "wait_ms", NULL),
             at(r0, "transfer_ms", NULL), at(r1, "wait_ms", NULL), at(r1, "transfer_ms", NULL));
    json_decref(rep);

    int rc = tb_run(&sh, NULL, "'%s' moe '%s'", TRACEBOOK, dir);
    TB_CHECK(rc == 0 && strstr(sh.out, "1.000 1.500 2.000") && strstr(sh.out, "1.1000 -> 1.5000 (1.2000)") &&
                 strstr(sh.out, "tokens per expert over the run: 18 10 10 10") &&
                 strstr(sh.out, "4 calls, 0.9 KB sent (the metrics: 0.9 KB, equal)"),
             "the text report: exit %d\n%s", rc, sh.out);
    rc = tb_run(&sh, NULL, "'%s' moe '%s' --json", TRACEBOOK, dir);
    json_t *j = rc == 0 ? json_loads(sh.out, 0, NULL) : NULL;
    TB_CHECK(j && json_array_size(json_object_get(j, "layers")) == 1, "--json: exit %d", rc);
    json_decref(j);
    // not a MoE run; no run directory
    char path[1024];
    snprintf(path, sizeof path, "%s/config.json", dir);
    tb_write_json(path, json_pack("{s:i, s:i}", "num_layers", 2, "num_experts", 0));
    rc = tb_run(&sh, NULL, "'%s' moe '%s'", TRACEBOOK, dir);
    TB_CHECK(rc == 1 && strstr(sh.err, "num_experts is 0: not a MoE run"), "a dense run is named: %s", sh.err);
    rc = tb_run(&sh, NULL, "'%s' moe /nonexistent-run", TRACEBOOK);
    TB_CHECK(rc == 1 && strstr(sh.err, "/nonexistent-run"), "a missing run directory is named: %s", sh.err);
}

// A real run: every routed token counted (steps × global batch × T × k per layer), every rank
// in 4 all-to-alls per microbatch per layer, and the trace's bytes the metrics' a2a_bytes.
static void check_real(const char *label, const char *dir, int steps, int microbatches_per_rank, int nranks) {
    tb_error err;
    json_t *rep = tb_moe_report(dir, &err);
    TB_REQUIRE(rep, "%s: %s", label, err.msg);
    TB_CHECK(json_is_true(json_object_get(rep, "traces")), "%s: traces read", label);
    size_t i;
    json_t *l;
    TB_CHECK(json_array_size(json_object_get(rep, "layers")) == 2, "%s: 2 MoE layers", label);
    json_array_foreach(json_object_get(rep, "layers"), i, l) {
        TB_CHECK(at(l, "routed_tokens", NULL) == steps * 8 * 16 * 2, "%s layer %zu: %g routed, want %d", label, i,
                 at(l, "routed_tokens", NULL), steps * 8 * 16 * 2);
        TB_CHECK(at(l, "imbalance", "min") >= 1 && at(l, "imbalance", "max") <= 4, "%s: imbalance in [1, E]", label);
        json_t *a2a = json_object_get(l, "a2a");
        TB_CHECK(json_array_size(json_object_get(a2a, "ranks")) == (size_t)nranks, "%s: every rank's all-to-alls", label);
        size_t r;
        json_t *rk;
        json_array_foreach(json_object_get(a2a, "ranks"), r, rk) {
            TB_CHECK(at(rk, "calls", NULL) == steps * microbatches_per_rank * 4, "%s layer %zu rank %zu: %g calls", label,
                     i, r, at(rk, "calls", NULL));
            TB_CHECK(at(rk, "bytes", NULL) == at(rk, "metrics_bytes", NULL) && at(rk, "bytes", NULL) > 0,
                     "%s layer %zu rank %zu: trace %g bytes, metrics %g", label, i, r, at(rk, "bytes", NULL),
                     at(rk, "metrics_bytes", NULL));
            TB_CHECK(at(rk, "wait_ms", NULL) >= 0 && at(rk, "transfer_ms", NULL) >= 0, "%s: times not negative", label);
        }
    }
    json_decref(rep);
}

// Every all-to-all range of every rank's trace carries its split sizes (elements per member of
// its group, sent and received): they add up to the call's count, and what rank i receives from
// member j of the same call (group id, seq) is what j sends to i.
static void check_splits(const char *label, const char *dir, int nranks) {
    typedef struct {
        long long group, seq, index, size;
        json_t *send, *recv;
    } a2a;
    a2a *calls = NULL;
    size_t n = 0, cap = 0;
    json_t *traces[8] = {0};
    for (int r = 0; r < nranks && r < 8; r++) {
        char path[1200];
        snprintf(path, sizeof path, "%s/trace.rank-%05d.json", dir, r);
        traces[r] = json_load_file(path, 0, NULL);
        TB_REQUIRE(traces[r], "%s: %s", label, path);
        size_t i;
        json_t *e;
        json_array_foreach(json_object_get(traces[r], "traceEvents"), i, e) {
            json_t *args = json_object_get(e, "args");
            const char *op = json_string_value(json_object_get(args, "op"));
            if (!op || strcmp(op, "all_to_all")) continue;
            json_t *send = json_object_get(args, "send_splits"), *recv = json_object_get(args, "recv_splits");
            long long size = json_integer_value(json_object_get(args, "group_size"));
            TB_REQUIRE(json_is_array(send) && json_is_array(recv) && (long long)json_array_size(send) == size &&
                           (long long)json_array_size(recv) == size,
                       "%s rank %d: an all-to-all without its split sizes", label, r);
            long long total = 0;
            for (long long j = 0; j < size; j++) total += json_integer_value(json_array_get(send, (size_t)j));
            TB_CHECK(total == json_integer_value(json_object_get(args, "count")),
                     "%s rank %d: send_splits add up to %lld, count %lld", label, r, total,
                     (long long)json_integer_value(json_object_get(args, "count")));
            if (n == cap) calls = realloc(calls, (cap = cap ? 2 * cap : 256) * sizeof *calls);
            calls[n++] = (a2a){json_integer_value(json_object_get(args, "group_id")),
                               json_integer_value(json_object_get(args, "seq")),
                               json_integer_value(json_object_get(args, "group_index")), size, send, recv};
        }
    }
    size_t pairs = 0, wrong = 0;
    for (size_t a = 0; a < n; a++)
        for (size_t b = 0; b < n; b++) {
            if (a == b || calls[a].group != calls[b].group || calls[a].seq != calls[b].seq) continue;
            pairs++;
            wrong += json_integer_value(json_array_get(calls[a].recv, (size_t)calls[b].index)) !=
                     json_integer_value(json_array_get(calls[b].send, (size_t)calls[a].index));
        }
    TB_CHECK(n > 0 && pairs > 0 && wrong == 0, "%s: %zu all-to-alls, %zu member pairs, %zu receive what the peer "
                                               "did not send", label, n, pairs, wrong);
    free(calls);
    for (int r = 0; r < nranks && r < 8; r++) json_decref(traces[r]);
}

#define MOE_RUN                                                                                              \
    " --num-layers 2 --hidden-size 32 --num-attention-heads 2 --seq-length 16 --vocab-size 64"               \
    " --micro-batch-size 1 --global-batch-size 8 --train-iters 2 --num-experts 4 --moe-router-topk 2"        \
    " --moe-token-dispatcher-type alltoall --moe-aux-loss-coeff 0.01 --num-threads 1"

// pretrain_gpt MOE_RUN at world 4, ep 2 and `flags` (rank threads) into run dir `dir`.
static int run_threads(const char *dir, const char *flags) {
    char all[2048];  // (flags replace MOE_RUN's: a flag is given once)
    tb_flags_merge(all, sizeof all, MOE_RUN " --world-size 4 --expert-model-parallel-size 2", flags);
    return tb_run(&sh, NULL, "rm -rf %s && '%s' %s --run-dir %s > /dev/null", dir, PRETRAIN, all, dir);
}

TB_TEST(a_real_expert_parallel_run_accounts_for_every_token_and_byte) {
    const char *dir = TB_TEST_TMPDIR "/moe_report_threads";
    int rc = run_threads(dir, "");
    TB_REQUIRE(rc == 0, "pretrain_gpt: %s", sh.err);
    check_real("threads, ep 2 x expert-dp 2", dir, 2, 2, 4);
    check_splits("threads, ep 2 x expert-dp 2", dir, 4);
    // etp 2 x ep 2 with each expert's input padded to its capacity: the metrics count the ep
    // all-to-all's rows as sent, padding included (the etp all-gather is not an all-to-all of
    // the dispatch); and the all-gather dispatcher has none: 0 bytes, 0 calls, said so
    const char *edir = TB_TEST_TMPDIR "/moe_report_etp";
    rc = run_threads(edir, "--expert-tensor-parallel-size 2 --moe-expert-capacity-factor 4 "
                           "--moe-pad-expert-input-to-capacity");
    TB_REQUIRE(rc == 0, "pretrain_gpt at etp 2: %s", sh.err);
    check_real("threads, etp 2 x ep 2, padded", edir, 2, 2, 4);
    check_splits("threads, etp 2 x ep 2, padded", edir, 4);
    const char *gdir = TB_TEST_TMPDIR "/moe_report_allgather";
    rc = run_threads(gdir, "--moe-token-dispatcher-type allgather");
    TB_REQUIRE(rc == 0, "pretrain_gpt with the all-gather dispatcher: %s", sh.err);
    tb_error err;
    json_t *rep = tb_moe_report(gdir, &err);
    TB_REQUIRE(rep, "allgather: %s", err.msg);
    size_t i;
    json_t *l;
    json_array_foreach(json_object_get(rep, "layers"), i, l) {
        json_t *a2a = json_object_get(l, "a2a");
        TB_CHECK(json_is_object(a2a) && at(l, "routed_tokens", NULL) == 2 * 8 * 16 * 2 && at(a2a, "calls", NULL) == 0 &&
                     at(a2a, "bytes", NULL) == 0 && at(a2a, "metrics_bytes", NULL) == 0,
                 "allgather layer %zu: %g routed, %g all-to-all calls, %g bytes, metrics %g", i,
                 at(l, "routed_tokens", NULL), at(a2a, "calls", NULL), at(a2a, "bytes", NULL),
                 at(a2a, "metrics_bytes", NULL));
    }
    json_decref(rep);
    rc = tb_run(&sh, NULL, "'%s' moe '%s'", TRACEBOOK, gdir);
    TB_CHECK(rc == 0 && strstr(sh.out, "the all-gather dispatcher: no all-to-all"), "exit %d\n%s", rc, sh.out);
    rc = tb_run(&sh, NULL, "'%s' moe '%s'", TRACEBOOK, dir);
    TB_CHECK(rc == 0 && strstr(sh.out, "4 experts, top-2, ep 2; 2 steps, 4 ranks") && strstr(sh.out, "wait for peers"),
             "exit %d\n%s", rc, sh.out);
#ifdef TB_MPIEXEC
    const char *mdir = TB_TEST_TMPDIR "/moe_report_mpi";
    rc = tb_run(&sh, NULL,
                "rm -rf %s && " MPIRUN " -np 2 '%s'" MOE_RUN " --world-size 2 --expert-model-parallel-size 2 "
                "--run-dir %s > /dev/null",
                mdir, PRETRAIN, mdir);
    TB_REQUIRE(rc == 0, "mpirun pretrain_gpt: %s", sh.err);
    check_real("mpirun, ep 2", mdir, 2, 4, 2);
#else
    printf("    mpirun part skipped: this build has no MPI (TB_MPIEXEC undefined)\n");
#endif
}

int main(void) {
    TB_RUN(imbalance_tokens_aux_loss_and_all_to_all_of_a_known_run);
    TB_RUN(a_real_expert_parallel_run_accounts_for_every_token_and_byte);
    return tb_test_summary();
}
