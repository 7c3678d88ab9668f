// test_drill_parsers.c — the claim parsers the drill runbooks use (experiments/prove/parsers.h):
// oom_figure, step_phase and collective_figure on run directories written here with known
// answers; hang_figure and first_divergence on tiny real runs (a stalled rank, an injected
// fault) whose answers the engine's drills fix; and which of them prove's stability gate
// judges as times.
#include <jansson.h>
#include <math.h>
#include <string.h>

#include "prove/parsers.h"
#include "tb_run_dir.h"
#include "tb_shell.h"
#include "tb_test.h"
#include "tb_trace_events.h"

#define PRETRAIN TB_BIN_DIR "/pretrain_gpt"
#define TINY " --num-layers 2 --hidden-size 32 --num-attention-heads 2 --seq-length 16 --vocab-size 64"

static tb_output sh;

// A record directory <TMP>/<name> with a run/ holding config.json {"world_size": world}, or,
// with world 0, an empty run/ for pretrain_gpt to fill (it takes no --run-dir holding files).
static const char *fresh_record(const char *name, int world, char *run, size_t size) {
    static char rec[1024];
    snprintf(rec, sizeof rec, "%s/drill_parsers/%s", TB_TEST_TMPDIR, name);
    snprintf(run, size, "%s/run", rec);
    tb_run(&sh, NULL, "rm -rf %s && mkdir -p %s", rec, run);
    char path[1200];
    snprintf(path, sizeof path, "%s/config.json", run);
    if (world > 0) tb_write_json(path, json_pack("{s:i}", "world_size", world));
    return rec;
}

// The claim's number over one record; NAN (and the error printed) when it fails.
static double derive(const char *parser, const char *args_json, const char *record, tb_error *err) {
    json_t *args = args_json ? json_loads(args_json, 0, NULL) : NULL;
    const char *dirs[1] = {record};
    double v = NAN;
    json_t *ev = NULL;
    if (tb_parse_claim(parser, args, dirs, 1, &v, &ev, err) != 0) {
        printf("    %s %s: %s\n", parser, args_json ? args_json : "", err->msg);
        v = NAN;
    }
    json_decref(ev);
    json_decref(args);
    return v;
}

static json_t *mem(int params, int activations, int workspace) {
    return json_pack("{s:i, s:i, s:i, s:i, s:i, s:i, s:i}", "params", params, "grads", params, "optimizer", 2 * params,
                     "activations", activations, "workspace", workspace, "comm", 0, "total",
                     4 * params + activations + workspace);
}

// Rank 0 ran out asking for 1000 bytes of activations in the forward; rank 1 asking for 64
// bytes of workspace in the backward; rank 2 did not.
static void oom_parts(const char *run) {
    char path[1200];
    tb_write_json(tb_rank_path(path, sizeof path, run, TB_RANK_OOM_PART, 0),
               json_pack("{s:s, s:i, s:s, s:i, s:i, s:s, s:s, s:i, s:s, s:i, s:o, s:o}", "kind", "out_of_memory",
                         "rank", 0, "rank_label", "rank 0 (tp0 cp0 dp0 pp0)", "step", 2, "microbatch", 1, "range_stack",
                         "train_step > forward", "requested_what", "layer.1 activations", "requested_bytes", 1000,
                         "requested_category", "activations", "cap_bytes", 5000, "current", mem(500, 1500, 100),
                         "peak", mem(500, 1700, 300)));
    tb_write_json(tb_rank_path(path, sizeof path, run, TB_RANK_OOM_PART, 1),
               json_pack("{s:s, s:i, s:s, s:i, s:i, s:s, s:s, s:i, s:s, s:i, s:o, s:o}", "kind", "out_of_memory",
                         "rank", 1, "rank_label", "rank 1 (tp1 cp0 dp0 pp0)", "step", 2, "microbatch", 3, "range_stack",
                         "train_step > backward > layer.0.backward", "requested_what", "grad staging",
                         "requested_bytes", 64, "requested_category", "workspace", "cap_bytes", 5000, "current",
                         mem(500, 2900, 40), "peak", mem(500, 3000, 90)));
}

TB_TEST(oom_figure_counts_and_reads_the_ranks_that_ran_out) {
    char run[1100];
    const char *rec = fresh_record("oom", 3, run, sizeof run);
    tb_error err;
    TB_CHECK(derive("oom_figure", "{\"figure\": \"ranks\"}", rec, &err) == 0, "no part: no rank out of memory");
    TB_CHECK(isnan(derive("oom_figure", "{\"figure\": \"requested_bytes\"}", rec, &err)) &&
                 strstr(err.msg, "no rank ran out of memory"),
             "a figure of a rank that is not there is an error: %s", err.msg);
    oom_parts(run);
    TB_CHECK(derive("oom_figure", "{\"figure\": \"ranks\"}", rec, &err) == 2, "two of three ranks ran out");
    TB_CHECK(derive("oom_figure", "{\"figure\": \"ranks\", \"requested_category\": \"activations\"}", rec, &err) == 1,
             "one asked for activations");
    TB_CHECK(derive("oom_figure", "{\"figure\": \"ranks\", \"in\": \"backward\"}", rec, &err) == 1 &&
                 derive("oom_figure", "{\"figure\": \"ranks\", \"in\": \"layer.0.backward\"}", rec, &err) == 1 &&
                 derive("oom_figure", "{\"figure\": \"ranks\", \"in\": \"layer.0\"}", rec, &err) == 0,
             "in matches a whole range name of the stack, not a prefix");
    TB_CHECK(derive("oom_figure", "{\"figure\": \"rank\", \"requested_category\": \"workspace\"}", rec, &err) == 1,
             "the rank that asked for workspace is rank 1");
    TB_CHECK(derive("oom_figure", "{\"figure\": \"requested_bytes\"}", rec, &err) == 1000 &&
                 derive("oom_figure", "{\"figure\": \"microbatch\"}", rec, &err) == 1 &&
                 derive("oom_figure", "{\"figure\": \"step\"}", rec, &err) == 2 &&
                 derive("oom_figure", "{\"figure\": \"cap_bytes\"}", rec, &err) == 5000,
             "the figures of the lowest matching rank, rank 0");
    TB_CHECK(derive("oom_figure", "{\"figure\": \"in_use_bytes\", \"rank\": 1}", rec, &err) == 4 * 500 + 2900 + 40,
             "in_use_bytes: what rank 1 had allocated when it asked");
    TB_CHECK(derive("oom_figure", "{\"figure\": \"current_bytes\", \"category\": \"activations\", \"rank\": 1}", rec,
                    &err) == 2900 &&
                 derive("oom_figure", "{\"figure\": \"peak_bytes\", \"category\": \"workspace\"}", rec, &err) == 300,
             "current and peak bytes of a category");
    TB_CHECK(isnan(derive("oom_figure", "{\"figure\": \"ranks\", \"requested_category\": \"activation\"}", rec,
                          &err)) &&
                 strstr(err.msg, "args.requested_category 'activation' is not one of params, grads"),
             "a typo in a category is refused: %s", err.msg);
    TB_CHECK(isnan(derive("oom_figure", "{\"figure\": \"ranks\", \"category\": \"comm\"}", rec, &err)) &&
                 strstr(err.msg, "args.category is for the figures current_bytes and peak_bytes"),
             "category without a by-category figure is refused: %s", err.msg);
    // a part of a rank outside the world is another run's: refused
    char path[1200];
    tb_write_json(tb_rank_path(path, sizeof path, run, TB_RANK_OOM_PART, 3),
               json_pack("{s:i, s:s, s:s}", "rank", 3, "range_stack", "x", "requested_category", "comm"));
    TB_CHECK(isnan(derive("oom_figure", "{\"figure\": \"ranks\"}", rec, &err)) &&
                 strstr(err.msg, "oom.rank-00003.json, but") && strstr(err.msg, "world_size 3"),
             "a part beyond world_size: %s", err.msg);
}

// Two ranks, steps 1..3: step_ms rank 0 {10, 20, 30}, rank 1 {15, 12, 40}; backward_ms
// rank 0 {1, 2, 3}, rank 1 {4, 5, 6}; exposed_comm_ms rank 0 {7, 8, 9}, rank 1 {0.5, 0.25, 0}.
static void phase_metrics(const char *run) {
    static const double step_ms[2][3] = {{10, 20, 30}, {15, 12, 40}}, backward[2][3] = {{1, 2, 3}, {4, 5, 6}},
                        exposed[2][3] = {{7, 8, 9}, {0.5, 0.25, 0}};
    char path[1200], text[4096];
    for (int r = 0; r < 2; r++) {
        size_t used = 0;
        for (int s = 0; s < 3; s++) {
            json_t *line = json_pack("{s:i, s:f, s:{s:f, s:f, s:f, s:f, s:f, s:f, s:f}}", "step", s + 1, "step_ms",
                                     step_ms[r][s], "pipeline", "data_ms", 0.1, "forward_ms", 0.5, "backward_ms",
                                     backward[r][s], "optimizer_ms", 0.2, "p2p_wait_ms", 0.0, "idle_ms", 0.0,
                                     "exposed_comm_ms", exposed[r][s]);
            char *l = json_dumps(line, JSON_COMPACT);
            used += (size_t)snprintf(text + used, sizeof text - used, "%s\n", l);
            free(l);
            json_decref(line);
        }
        tb_write_text(tb_rank_path(path, sizeof path, run, TB_RANK_METRICS, r), text);
    }
}

TB_TEST(step_phase_reads_each_steps_slowest_rank_or_the_one_named) {
    char run[1100];
    const char *rec = fresh_record("phase", 2, run, sizeof run);
    phase_metrics(run);
    tb_error err;
    // steps 2, 3 (after the warm-up): slowest rank 0 (20 > 12), then rank 1 (40 > 30)
    TB_CHECK(derive("step_phase", "{\"phase\": \"backward\"}", rec, &err) == (2 + 6) / 2.0,
             "the median over steps 2 and 3 of the slowest rank's backward: 4");
    TB_CHECK(derive("step_phase", "{\"phase\": \"exposed_comm\"}", rec, &err) == (8 + 0) / 2.0,
             "exposed communication of the slowest rank: 8 at step 2 (rank 0), 0 at step 3 (rank 1)");
    TB_CHECK(derive("step_phase", "{\"phase\": \"backward\", \"warmup_steps\": 0}", rec, &err) == 4,
             "with no warm-up, steps 1 (rank 1: 4), 2 (rank 0: 2), 3 (rank 1: 6): median 4");
    TB_CHECK(derive("step_phase", "{\"phase\": \"backward\", \"rank\": 1}", rec, &err) == 5.5,
             "rank 1's own backward over steps 2 and 3");
    TB_CHECK(isnan(derive("step_phase", "{\"phase\": \"backward\", \"rank\": 2}", rec, &err)) &&
                 strstr(err.msg, "args.rank 2 is not below world_size 2"),
             "a rank outside the world: %s", err.msg);
    TB_CHECK(isnan(derive("step_phase", "{\"phase\": \"bubble\"}", rec, &err)) &&
                 strstr(err.msg, "args.phase 'bubble' is not one of data, forward"),
             "an unknown phase: %s", err.msg);
}

// Two ranks, steps 1..3 of 1000 µs each; in each step a dp gradient all-reduce (inside
// "grads") and a loss all-reduce (inside "loss_average"). Rank 1 enters the gradient one
// late by 100, 300 and 500 µs at steps 1, 2, 3; both leave 50 µs after the last enters. The
// loss all-reduce: both enter together, rank 0 last by 1 µs, 20 µs of transfer.
static void collective_traces(const char *run) {
    char path[1200];
    for (int r = 0; r < 2; r++) {
        json_t *events = json_array();
        for (int s = 0; s < 3; s++) {
            const double t0 = 1000.0 * s, late = 100 + 200 * s, enter = t0 + 100 + (r ? late : 0);
            const double leave = t0 + 100 + late + 50;
            json_array_append_new(events, tb_trace_range("train_step", t0, 999, 0, json_pack("{s:i}", "step", s + 1)));
            json_array_append_new(events, tb_trace_range("grads", t0 + 50, 800, 1, NULL));
            json_t *grad_args = json_pack("{s:s, s:s, s:i, s:i, s:i}", "group", "dp", "op", "all_reduce", "group_id",
                                          3, "seq", 2 * s + 1, "bytes", 4096);
            json_array_append_new(events, tb_trace_range("comm.dp.all_reduce", enter, leave - enter, 2, grad_args));
            json_array_append_new(events, tb_trace_range("loss_average", t0 + 900, 90, 1, NULL));
            const double lenter = t0 + 910 + (r ? 0 : 1);
            json_array_append_new(events, tb_trace_range("comm.dp.all_reduce", lenter, t0 + 931 - lenter, 2,
                                                json_pack("{s:s, s:s, s:i, s:i, s:i}", "group", "dp", "op",
                                                          "all_reduce", "group_id", 3, "seq", 2 * s + 2, "bytes", 4)));
        }
        tb_write_json(tb_rank_path(path, sizeof path, run, TB_RANK_TRACE, r), json_pack("{s:o}", "traceEvents", events));
    }
}

static int near(double a, double b) { return fabs(a - b) < 1e-9; }

TB_TEST(collective_figure_matches_calls_across_ranks_and_separates_wait_from_transfer) {
    char run[1100];
    const char *rec = fresh_record("collective", 2, run, sizeof run);
    collective_traces(run);
    tb_error err;
    // steps 2 and 3, the gradient all-reduce: spreads 0.3 and 0.5 ms, rank 1 last in both
    const char *g = "\"group\": \"dp\", \"in\": \"grads\"";
    char args[256];
    snprintf(args, sizeof args, "{%s}", g);
    TB_CHECK(near(derive("collective_figure", args, rec, &err), 0.4), "the median enter spread of 0.3 and 0.5 ms");
    snprintf(args, sizeof args, "{%s, \"figure\": \"max_enter_spread_ms\"}", g);
    TB_CHECK(near(derive("collective_figure", args, rec, &err), 0.5), "the largest spread");
    snprintf(args, sizeof args, "{%s, \"figure\": \"last_rank\"}", g);
    TB_CHECK(derive("collective_figure", args, rec, &err) == 1, "rank 1 entered last");
    snprintf(args, sizeof args, "{%s, \"figure\": \"last_rank_share\"}", g);
    TB_CHECK(derive("collective_figure", args, rec, &err) == 1, "in every call");
    snprintf(args, sizeof args, "{%s, \"figure\": \"transfer_ms\"}", g);
    TB_CHECK(near(derive("collective_figure", args, rec, &err), 0.05), "50 us of transfer once both are in");
    snprintf(args, sizeof args, "{%s, \"warmup_steps\": 0}", g);
    TB_CHECK(near(derive("collective_figure", args, rec, &err), 0.3), "with step 1: the median of 0.1, 0.3, 0.5");
    // the loss all-reduce: no wait, 20 us of transfer, rank 0 last
    TB_CHECK(near(derive("collective_figure", "{\"group\": \"dp\", \"in\": \"loss_average\"}", rec, &err), 0.001) &&
                 derive("collective_figure", "{\"group\": \"dp\", \"in\": \"loss_average\", \"figure\": \"last_rank\"}",
                        rec, &err) == 0 &&
                 near(derive("collective_figure",
                             "{\"group\": \"dp\", \"in\": \"loss_average\", \"figure\": \"transfer_ms\"}", rec, &err),
                      0.02),
             "the loss all-reduce's spread, last rank and transfer");
    // both kinds of call: the spreads 0.001, 0.001, 0.3, 0.5, median 0.1505
    TB_CHECK(near(derive("collective_figure", "{\"group\": \"dp\", \"op\": \"all_reduce\"}", rec, &err), 0.1505),
             "every all-reduce of steps 2 and 3");
    TB_CHECK(isnan(derive("collective_figure", "{\"group\": \"tp\"}", rec, &err)) &&
                 strstr(err.msg, "no collective calls on group tp"),
             "a group without calls is an error, not a spread of 0: %s", err.msg);
    TB_CHECK(isnan(derive("collective_figure", "{\"group\": \"pp\"}", rec, &err)) &&
                 strstr(err.msg, "args.group 'pp' is not one of"),
             "pp (P2P only) is refused: %s", err.msg);
    // a missing rank's trace: no spread can be computed
    char path[1200];
    remove(tb_rank_path(path, sizeof path, run, TB_RANK_TRACE, 1));
    TB_CHECK(isnan(derive("collective_figure", "{\"group\": \"dp\"}", rec, &err)) && strstr(err.msg, "missing (rank 1"),
             "every rank's trace is needed: %s", err.msg);
}

TB_TEST(hang_figure_blames_the_stalled_rank_from_the_per_rank_parts) {
    char run[1100];
    const char *rec = fresh_record("hang", 2, run, sizeof run);
    tb_error err;
    TB_CHECK(isnan(derive("hang_figure", "{\"figure\": \"blamed_rank\"}", rec, &err)) &&
                 strstr(err.msg, "no hang.rank-NNNNN.json part (the run did not hang)"),
             "a run without a hang: %s", err.msg);
    int rc = tb_run(&sh, NULL,
                    "rm %s/config.json && '%s'" TINY " --train-iters 3 --world-size 4 --tensor-model-parallel-size 2 "
                    "--pipeline-model-parallel-size 2 --global-batch-size 2 --micro-batch-size 1 --inject-stall 1:2 "
                    "--collective-timeout 1 --run-dir %s > /dev/null 2>&1",
                    run, PRETRAIN, run);
    TB_REQUIRE(rc == 4, "the stalled run ends with the hang exit status 4 (got %d)", rc);
    TB_CHECK(derive("hang_figure", "{\"figure\": \"blamed_rank\"}", rec, &err) == 1,
             "tp2 x pp2, rank 1 stalled: the root cause is rank 1, not a victim whose watchdog fired first");
    TB_CHECK(derive("hang_figure", "{\"figure\": \"blamed_ranks\"}", rec, &err) == 1, "one rank blamed");
    TB_CHECK(derive("hang_figure", "{\"figure\": \"stuck_ranks\"}", rec, &err) == 3, "the three others are stuck");
    TB_CHECK(derive("hang_figure", "{\"figure\": \"absent_ranks\"}", rec, &err) == 0, "every rank wrote its part");
    // the parts, not hang.json, are the evidence: a part taken away changes the merge
    char path[1200];
    remove(tb_rank_path(path, sizeof path, run, TB_RANK_HANG_PART, 1));
    TB_CHECK(derive("hang_figure", "{\"figure\": \"absent_ranks\"}", rec, &err) == 1,
             "without rank 1's part, rank 1 is absent from the merge");
}

// From one checkpoint (after 2 steps, so the biases are not zero), TP1 against TP2 with their
// next step dumped: no divergence without a fault; with the row-parallel bias added on every
// rank, at fwd/layer.0.attention, position 2 (after fwd/embedding).
TB_TEST(first_divergence_is_the_position_of_the_tensor_bisect_finds) {
    char tp1_run[1100], tp2_run[1100], bad_run[1100], ckpt_run[1100];
    char tp1[1024], tp2[1024], bad[1024];
    fresh_record("div_ckpt", 0, ckpt_run, sizeof ckpt_run);
    TB_REQUIRE(tb_run(&sh, NULL, "'%s'" TINY " --train-iters 3 --exit-interval 2 --save %s/checkpoints --run-dir %s > "
                      "/dev/null", PRETRAIN, ckpt_run, ckpt_run) == 0,
               "the checkpoint: %s", sh.err);
    snprintf(tp1, sizeof tp1, "%s", fresh_record("div_tp1", 0, tp1_run, sizeof tp1_run));
    snprintf(tp2, sizeof tp2, "%s", fresh_record("div_tp2", 0, tp2_run, sizeof tp2_run));
    snprintf(bad, sizeof bad, "%s", fresh_record("div_bad", 0, bad_run, sizeof bad_run));
    const char *layouts[3] = {"", "--world-size 2 --tensor-model-parallel-size 2",
                              "--world-size 2 --tensor-model-parallel-size 2 --debug-inject-fault "
                              "row_parallel_bias_per_rank"};
    const char *runs[3] = {tp1_run, tp2_run, bad_run};
    for (int i = 0; i < 3; i++)
        TB_REQUIRE(tb_run(&sh, NULL, "'%s'" TINY " --train-iters 3 --dump-tensors 3 --load %s/checkpoints %s --run-dir "
                          "%s > /dev/null", PRETRAIN, ckpt_run, layouts[i], runs[i]) == 0,
                   "run %d: %s", i, sh.err);
    tb_error err;
    const char *clean[2] = {tp1, tp2}, *faulty[2] = {tp1, bad};
    double v = NAN;
    json_t *ev = NULL;
    TB_CHECK(tb_parse_claim("first_divergence", NULL, clean, 2, &v, &ev, &err) == 0 && v == 0,
             "TP2 against TP1: no divergence (%g) %s", v, err.msg);
    json_decref(ev);
    TB_CHECK(tb_parse_claim("first_divergence", NULL, faulty, 2, &v, &ev, &err) == 0 && v == 2,
             "the fault is found at position 2 (%g) %s", v, err.msg);
    json_t *fd = json_object_get(json_object_get(ev, "bisect"), "first_divergence");
    const char *tensor = json_string_value(json_object_get(fd, "tensor"));
    TB_CHECK(tensor && !strcmp(tensor, "fwd/layer.0.attention"), "the tensor is fwd/layer.0.attention (%s)",
             tensor ? tensor : "none");
    json_decref(ev);
    json_t *args = json_pack("{s:i, s:i}", "a", 1, "b", 1);
    TB_CHECK(tb_parse_claim("first_divergence", args, faulty, 2, &v, NULL, &err) != 0 &&
                 strstr(err.msg, "args.a and args.b are the same record"),
             "a record against itself is refused: %s", err.msg);
    json_decref(args);
    // a run that dumped other tensors (another model) is no comparison at all
    char other_run[1100], other[1024];
    snprintf(other, sizeof other, "%s", fresh_record("div_other", 0, other_run, sizeof other_run));
    TB_REQUIRE(tb_run(&sh, NULL, "'%s' --num-layers 1 --hidden-size 32 --num-attention-heads 2 --seq-length 16 "
                      "--vocab-size 64 --train-iters 3 --dump-tensors 3 --run-dir %s > /dev/null", PRETRAIN,
                      other_run) == 0,
               "%s", sh.err);
    const char *partial[2] = {tp1, other};
    TB_CHECK(tb_parse_claim("first_divergence", NULL, partial, 2, &v, NULL, &err) != 0 &&
                 strstr(err.msg, "in one only (the runs must dump the same tensors"),
             "tensors in one run only are refused, never 'no divergence': %s", err.msg);
    const char *one[1] = {tp1};
    TB_CHECK(tb_parse_claim("first_divergence", NULL, one, 1, &v, NULL, &err) != 0 &&
                 strstr(err.msg, "args.b defaults to index 1"),
             "one record is not two: %s", err.msg);
}

// A divergence to NaN is a divergence: from the same init, vocab_ce_local_sum at tp 2 (trained
// on past the NaN check) leaves the step's loss as TP1's but its gradients NaN, first at
// grad/ln_f.bias, position 2 + 3 x 2 + 1 = 9. (JSON holds no NaN: the verdict's figures are
// kept as text, and the verdict is not lost.)
TB_TEST(first_divergence_finds_a_gradient_gone_nan) {
    char a_run[1100], b_run[1100], a[1024], b[1024];
    snprintf(a, sizeof a, "%s", fresh_record("nan_tp1", 0, a_run, sizeof a_run));
    snprintf(b, sizeof b, "%s", fresh_record("nan_tp2", 0, b_run, sizeof b_run));
    TB_REQUIRE(tb_run(&sh, NULL, "'%s'" TINY " --train-iters 1 --dump-tensors 1 --run-dir %s > /dev/null", PRETRAIN,
                      a_run) == 0 &&
                   tb_run(&sh, NULL, "'%s'" TINY " --train-iters 1 --dump-tensors 1 --world-size 2 "
                          "--tensor-model-parallel-size 2 --debug-inject-fault vocab_ce_local_sum "
                          "--no-check-for-nan-in-loss-and-grad --run-dir %s > /dev/null 2>&1", PRETRAIN, b_run) == 0,
               "the two runs: %s", sh.err);
    const char *dirs[2] = {a, b};
    double v = NAN;
    json_t *ev = NULL;
    tb_error err;
    TB_CHECK(tb_parse_claim("first_divergence", NULL, dirs, 2, &v, &ev, &err) == 0 && v == 9,
             "the NaN gradient is the first divergence, position 9 (%g) %s", v, err.msg);
    json_t *fd = json_object_get(json_object_get(ev, "bisect"), "first_divergence");
    TB_CHECK(json_is_string(json_object_get(fd, "max_abs_difference")) &&
                 !strcmp(json_string_value(json_object_get(fd, "max_abs_difference")), "inf") &&
                 !strcmp(json_string_value(json_object_get(fd, "b")), "nan"),
             "its figures as text: max |a - b| inf, b nan");
    json_decref(ev);
    TB_CHECK(tb_run(&sh, NULL, "'%s/tracebook' bisect %s %s", TB_BIN_DIR, a_run, b_run) == 1 &&
                 strstr(sh.out, "first divergence: grad/ln_f.bias (backward): max |a - b| inf"),
             "tracebook bisect says so too (exit 1):\n%s", sh.out);
}

// moe_figure on a real etp 2 x ep 2 run of 4 ranks (8 experts of ffn 32, top-2, hidden 32):
// a rank holds 8 / ep experts, each GEMM its etp shard (N or K = 32 / 2), and every routed
// token reaches one expert's GEMM on each of the etp ranks it is gathered to, so the rows
// over every rank and expert are etp times the routed tokens.
TB_TEST(moe_figure_reads_the_expert_gemms_each_rank_ran) {
    char run[1024];
    const char *rec = fresh_record("moe_figure", 0, run, sizeof run);
    int status = tb_run(&sh, NULL,
                        "%s" TINY " --micro-batch-size 2 --global-batch-size 16 --train-iters 1 --world-size 4"
                        " --num-experts 8 --moe-router-topk 2 --moe-ffn-hidden-size 32 --expert-model-parallel-size 2"
                        " --expert-tensor-parallel-size 2 --moe-token-dispatcher-type alltoall --run-dir %s",
                        PRETRAIN, run);
    TB_REQUIRE(status == 0, "pretrain_gpt etp 2 x ep 2: %s", sh.err);
    tb_error err;
    TB_CHECK(derive("moe_figure", "{\"figure\": \"local_experts\", \"rank\": 3}", rec, &err) == 4,
             "rank 3 holds 8 / ep 2 experts");
    static const struct {
        const char *figure;
        double want;
    } dims[] = {{"fc1_n", 16}, {"fc1_k", 32}, {"fc2_n", 32}, {"fc2_k", 16}};
    for (size_t i = 0; i < sizeof dims / sizeof dims[0]; i++) {
        char args[96];
        snprintf(args, sizeof args, "{\"figure\": \"%s\", \"of\": \"min\"}", dims[i].figure);
        double v = derive("moe_figure", args, rec, &err);
        TB_CHECK(v == dims[i].want, "%s: %g (want %g)", dims[i].figure, v, dims[i].want);
    }
    // 16 / (2 x dp 4) = 2 microbatches; every rank's means summed, times 4 experts and 2 microbatches
    const double rows = derive("moe_figure", "{\"figure\": \"expert_rows_mean\", \"of\": \"sum\"}", rec, &err);
    const double routed = derive("moe_figure", "{\"figure\": \"routed_tokens\", \"of\": \"sum\"}", rec, &err);
    TB_CHECK(routed == 4 * 2 * 2 * 16 * 2 && rows * 4 * 2 == 2 * routed,
             "rows over every rank's experts %g = etp 2 x the %g routed tokens (4 ranks x 2 microbatches x 2 "
             "sequences x 16 tokens, top-2)", rows * 4 * 2, routed);
    const double busiest = derive("moe_figure", "{\"figure\": \"expert_rows_max\"}", rec, &err);
    TB_CHECK(busiest >= rows / 4, "the busiest expert's rows %g are at least a rank's mean", busiest);
    TB_CHECK(isnan(derive("moe_figure", "{\"figure\": \"flops\"}", rec, &err)) && strstr(err.msg, "figure") &&
                 strstr(err.msg, "flops"),
             "an unknown figure is refused by name: %s", err.msg);
    TB_CHECK(isnan(derive("moe_figure", "{\"figure\": \"fc1_n\", \"rank\": 4}", rec, &err)) &&
                 strstr(err.msg, "world_size 4"),
             "a rank beyond the world is refused: %s", err.msg);
    TB_CHECK(isnan(derive("moe_figure", "{\"figure\": \"fc1_n\", \"layer\": 7}", rec, &err)) &&
                 strstr(err.msg, "layer 7"),
             "a layer no rank holds is refused: %s", err.msg);
}

TB_TEST(the_stability_gate_judges_the_drill_parsers_that_read_time) {
    json_t *none = json_object();
    json_t *bytes = json_pack("{s:s}", "figure", "written_bytes"), *wait = json_pack("{s:s}", "figure", "last_arriver");
    json_t *theory = json_pack("{s:s}", "kind", "theoretical");
    TB_CHECK(tb_parser_timed("step_phase", none) && tb_parser_timed("collective_figure", none),
             "step_phase and collective_figure are times (last_rank too: an order in time)");
    TB_CHECK(!tb_parser_timed("oom_figure", none) && !tb_parser_timed("hang_figure", none) &&
                 !tb_parser_timed("first_divergence", none),
             "oom, hang and divergence verdicts are exact");
    TB_CHECK(tb_parser_timed("tokens_per_s", none) && tb_parser_timed("step_ms", none) &&
                 tb_parser_timed("stage_imbalance", none) && tb_parser_timed("pipeline_bubble", none) &&
                 !tb_parser_timed("pipeline_bubble", theory) && tb_parser_timed("checkpoint_figure", wait) &&
                 !tb_parser_timed("checkpoint_figure", bytes),
             "the existing parsers keep their judgement");
    TB_CHECK(!tb_parser_timed("peak_memory_bytes", none) && !tb_parser_timed("comm_bytes", none) &&
                 !tb_parser_timed("ratio", none) && !tb_parser_timed("no_such_parser", none),
             "counts and combinations (judged by their parts) are not");
    json_decref(none);
    json_decref(bytes);
    json_decref(wait);
    json_decref(theory);
}

// checkpoint.json of three saves: the pause training waited for each (max_stall_ms 40, 90, 10 ms),
// the rank last at the barrier and the bytes each rank wrote.
static void three_saves(const char *run) {
    json_t *saves = json_array();
    const double stall[3] = {40, 90, 10}, total[3] = {100, 120, 50};
    for (int k = 0; k < 3; k++) {
        json_t *ranks = json_array();
        for (int r = 0; r < 2; r++)
            json_array_append_new(ranks, json_pack("{s:[{s:s, s:i}, {s:s, s:i}]}", "phases", "phase", "materialize",
                                                   "bytes", 1000 + r, "phase", "write", "bytes", 2000 + 10 * k));
        json_array_append_new(saves, json_pack("{s:f, s:f, s:{s:i, s:f}, s:o}", "max_stall_ms", stall[k], "total_ms",
                                               total[k], "last_arriver", "rank", k % 2, "waited_for_ms", 5.0 * k,
                                               "ranks", ranks));
    }
    char path[1200];
    snprintf(path, sizeof path, "%s/" TB_RUN_CHECKPOINT, run);
    tb_write_json(path, json_pack("{s:o}", "saves", saves));
}

TB_TEST(checkpoint_figure_reads_one_save_or_a_figure_over_every_save) {
    char run[1100];
    const char *rec = fresh_record("checkpoint", 2, run, sizeof run);
    three_saves(run);
    tb_error err;
    TB_CHECK(derive("checkpoint_figure", "{\"figure\": \"max_stall_ms\"}", rec, &err) == 10, "the last save's pause");
    TB_CHECK(derive("checkpoint_figure", "{\"figure\": \"max_stall_ms\", \"save\": 2}", rec, &err) == 90,
             "the second save's pause");
    TB_CHECK(derive("checkpoint_figure", "{\"figure\": \"max_stall_ms\", \"of\": \"max\"}", rec, &err) == 90,
             "the longest pause of every save");
    TB_CHECK(derive("checkpoint_figure", "{\"figure\": \"max_stall_ms\", \"of\": \"min\"}", rec, &err) == 10,
             "the shortest");
    TB_CHECK(derive("checkpoint_figure", "{\"figure\": \"max_stall_ms\", \"of\": \"median\"}", rec, &err) == 40,
             "the median");
    TB_CHECK(fabs(derive("checkpoint_figure", "{\"figure\": \"stall_fraction\", \"of\": \"max\"}", rec, &err) -
                  0.75) < 1e-12,
             "the largest share of a save's time training waited (90 / 120)");
    TB_CHECK(derive("checkpoint_figure", "{\"figure\": \"written_bytes\", \"of\": \"max\"}", rec, &err) == 4040,
             "the most bytes a save wrote (2 ranks x 2020)");
    // the evidence lists every save's value
    json_t *args = json_loads("{\"figure\": \"max_stall_ms\", \"of\": \"max\"}", 0, NULL), *ev = NULL;
    const char *dirs[1] = {rec};
    double v;
    TB_REQUIRE(tb_parse_claim("checkpoint_figure", args, dirs, 1, &v, &ev, &err) == 0, "%s", err.msg);
    char *text = json_dumps(ev, JSON_COMPACT);
    TB_CHECK(text && strstr(text, "\"per_save\":[40.0,90.0,10.0]") != NULL, "each save's pause in the evidence: %s",
             text);
    free(text);
    json_decref(ev);
    json_decref(args);
    // refused: of with save; of last_arriver (a rank); an unknown of
    TB_CHECK(isnan(derive("checkpoint_figure", "{\"figure\": \"max_stall_ms\", \"of\": \"max\", \"save\": 1}",
                          rec, &err)) &&
                 strstr(err.msg, "not both"),
             "%s", err.msg);
    TB_CHECK(isnan(derive("checkpoint_figure", "{\"figure\": \"last_arriver\", \"of\": \"max\"}", rec, &err)) &&
                 strstr(err.msg, "a rank, not a quantity"),
             "%s", err.msg);
    TB_CHECK(isnan(derive("checkpoint_figure", "{\"figure\": \"max_stall_ms\", \"of\": \"p99\"}", rec, &err)) &&
                 strstr(err.msg, "p99"),
             "%s", err.msg);
}

int main(void) {
    TB_RUN(oom_figure_counts_and_reads_the_ranks_that_ran_out);
    TB_RUN(step_phase_reads_each_steps_slowest_rank_or_the_one_named);
    TB_RUN(collective_figure_matches_calls_across_ranks_and_separates_wait_from_transfer);
    TB_RUN(hang_figure_blames_the_stalled_rank_from_the_per_rank_parts);
    TB_RUN(first_divergence_is_the_position_of_the_tensor_bisect_finds);
    TB_RUN(first_divergence_finds_a_gradient_gone_nan);
    TB_RUN(moe_figure_reads_the_expert_gemms_each_rank_ran);
    TB_RUN(checkpoint_figure_reads_one_save_or_a_figure_over_every_save);
    TB_RUN(the_stability_gate_judges_the_drill_parsers_that_read_time);
    return tb_test_summary();
}
