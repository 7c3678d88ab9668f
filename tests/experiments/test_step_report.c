// test_step_report.c — `tracebook comm` and `tracebook steps` (experiments/inspect/step_report.h):
// enter spread, the last member and its context, wait vs transfer, on synthetic traces with
// known answers; then on a real tp 2 x dp 2 run, where every collective call is matched across
// its group's members.
#include <jansson.h>
#include <math.h>
#include <string.h>

#include "inspect/step_report.h"
#include "tb_run_dir.h"
#include "tb_shell.h"
#include "tb_test.h"
#include "tb_trace_events.h"

#define TRACEBOOK TB_BIN_DIR "/tracebook"

static tb_output sh;

static json_t *comm(double ts, double dur, int seq) {
    return tb_trace_range("comm.tp.all_reduce", ts, dur, 1,
                 json_pack("{s:s, s:s, s:i, s:i, s:i}", "group", "tp", "op", "all_reduce", "group_id", 0, "seq", seq,
                           "bytes", 4096));
}

// Two ranks, one step: rank 0 enters the all-reduce at 10 µs and leaves at 40; rank 1 is in
// layer.0.mlp until 25, enters at 25 and leaves at 40. Spread 15 µs; rank 1 is last, after
// layer.0.mlp, inside train_step; rank 0 waits 15 µs and transfers 15, rank 1 0 and 15. Each
// rank's communication thread (tid 1) also reduce-scatters 8192 bytes over dp in step 1, and
// the metrics say 0.25 ms of it was exposed.
static void synthetic_run(const char *dir) {
    tb_run(&sh, NULL, "rm -rf %s && mkdir -p %s", dir, dir);
    char path[1024];
    for (int r = 0; r < 2; r++) {
        json_t *events = json_array();
        json_array_append_new(events, tb_trace_range("train_step", 0, 100, 0, json_pack("{s:i}", "step", 1)));
        if (r == 1) json_array_append_new(events, tb_trace_range("layer.0.mlp", 5, 20, 1, NULL));
        json_array_append_new(events, comm(r == 0 ? 10 : 25, r == 0 ? 30 : 15, 1));
        json_t *bucket = tb_trace_range("fsdp.reduce_scatter_grads.0", 50, 20, 0, json_pack("{s:i}", "step", 1));
        json_t *rs = tb_trace_range("comm.dp.reduce_scatter", 52, 10, 1,
                                    json_pack("{s:s, s:s, s:i, s:i, s:i}", "group", "dp", "op", "reduce_scatter",
                                              "group_id", 1, "seq", 1, "bytes", 8192));
        json_object_set_new(bucket, "tid", json_integer(1));
        json_object_set_new(rs, "tid", json_integer(1));
        json_array_append_new(events, bucket);
        json_array_append_new(events, rs);
        tb_write_json(tb_rank_path(path, sizeof path, dir, TB_RANK_TRACE, r), json_pack("{s:o}", "traceEvents", events));
        tb_rank_path(path, sizeof path, dir, TB_RANK_METRICS, r);
        json_t *line = json_pack("{s:i, s:f, s:{s:f, s:f, s:f, s:f, s:f, s:f, s:f}}", "step", 1, "step_ms",
                                 r ? 0.1 : 0.09, "pipeline", "data_ms", 0.001, "forward_ms", 0.02, "backward_ms", 0.03,
                                 "optimizer_ms", 0.01, "p2p_wait_ms", 0.0, "idle_ms", 0.005, "exposed_comm_ms", 0.25);
        char *text = json_dumps(line, JSON_COMPACT);
        char with_nl[512];
        snprintf(with_nl, sizeof with_nl, "%s\n", text);
        tb_write_text(path, with_nl);
        free(text);
        json_decref(line);
    }
}

TB_TEST(enter_spread_wait_and_transfer_of_a_known_call) {
    const char *dir = TB_TEST_TMPDIR "/step_report_synthetic";
    synthetic_run(dir);
    tb_error err;
    json_t *calls = tb_collective_calls(dir, &err);
    TB_REQUIRE(calls, "%s", err.msg);
    TB_REQUIRE(json_array_size(calls) == 2, "two matched calls (%zu)", json_array_size(calls));
    json_t *c = json_array_get(calls, 0);  // (the largest enter spread first)
    TB_CHECK(fabs(json_number_value(json_object_get(c, "enter_spread_ms")) - 0.015) < 1e-12, "spread 15 us");
    TB_CHECK(json_integer_value(json_object_get(c, "last_rank")) == 1 &&
                 !strcmp(json_string_value(json_object_get(c, "last_in")), "train_step") &&
                 !strcmp(json_string_value(json_object_get(c, "last_after")), "layer.0.mlp"),
             "rank 1 is last, in train_step, after layer.0.mlp");
    json_t *m0 = json_array_get(json_object_get(c, "members"), 0), *m1 = json_array_get(json_object_get(c, "members"), 1);
    TB_CHECK(fabs(json_number_value(json_object_get(m0, "wait_ms")) - 0.015) < 1e-12 &&
                 fabs(json_number_value(json_object_get(m0, "transfer_ms")) - 0.015) < 1e-12,
             "rank 0 waits 15 us for rank 1, then 15 us of transfer");
    TB_CHECK(json_number_value(json_object_get(m1, "wait_ms")) == 0 &&
                 fabs(json_number_value(json_object_get(m1, "transfer_ms")) - 0.015) < 1e-12,
             "rank 1 does not wait");
    TB_CHECK(json_integer_value(json_object_get(c, "step")) == 1, "the call is step 1's");
    json_decref(calls);

    int rc = tb_run(&sh, NULL, "'%s' steps '%s'", TRACEBOOK, dir);
    TB_CHECK(rc == 0 && strstr(sh.out, "* 1 ") && strstr(sh.out, "tp 0.01 / 0.01 (4096 B)") &&
                 strstr(sh.out, "tp 0.00 / 0.01 (4096 B)"),
             "steps marks rank 1 slowest and splits tp into wait / transfer: exit %d\n%s", rc, sh.out);
    TB_CHECK(strstr(sh.out, "dp 0.00 / 0.01 (8192 B; 1 of 1 calls)") && strstr(sh.out, "     0.25   tp"),
             "steps gives the dp bytes, the calls on the communication thread and the exposed time:\n%s", sh.out);
    json_t *steps = tb_step_decomposition(dir, 0, &err);
    TB_REQUIRE(steps, "%s", err.msg);
    json_t *r0 = json_array_get(json_object_get(json_array_get(steps, 0), "ranks"), 0);
    json_t *dp = json_object_get(json_object_get(r0, "collectives"), "dp");
    TB_CHECK(json_integer_value(json_object_get(dp, "bytes")) == 8192 &&
                 json_integer_value(json_object_get(dp, "comm_thread_calls")) == 1 &&
                 fabs(json_number_value(json_object_get(r0, "exposed_comm_ms")) - 0.25) < 1e-12,
             "steps --json: dp's bytes, its call on the communication thread, 0.25 ms exposed");
    json_decref(steps);
    rc = tb_run(&sh, NULL, "'%s' comm '%s'", TRACEBOOK, dir);
    TB_CHECK(rc == 0 && strstr(sh.out, "rank 1 (in train_step; after layer.0.mlp)"), "comm: exit %d\n%s", rc, sh.out);
    rc = tb_run(&sh, NULL, "'%s' steps '%s' --step 9", TRACEBOOK, dir);
    TB_CHECK(rc == 1 && strstr(sh.err, "no step 9 in rank 0's metrics (1 steps)"), "a step not run is named: %s",
             sh.err);
    rc = tb_run(&sh, NULL, "'%s' steps '%s' --step -2", TRACEBOOK, dir);
    TB_CHECK(rc == 2 && strstr(sh.err, "--step: -2 is negative"), "a negative --step is refused: %s", sh.err);
    rc = tb_run(&sh, NULL, "'%s' comm '%s' --top -1", TRACEBOOK, dir);
    TB_CHECK(rc == 2 && strstr(sh.err, "--top: -1 is negative"), "a negative --top is refused: %s", sh.err);
    rc = tb_run(&sh, NULL, "'%s' comm /nonexistent-run", TRACEBOOK);
    TB_CHECK(rc == 1 && strstr(sh.err, "/nonexistent-run"), "a missing run directory is named: %s", sh.err);
}

// Real runs: every collective call of every group is matched across all its members — tp
// groups of 2, dp groups of 2 and the world of 4 under tp 2; under pp 4 the pp group of 4
// (the loss average), whose middle stages send and receive on it where the first only sends
// (their sequence numbers differ; the calls' places among the collectives do not), and the
// embedding group of the first and last stages — and no member's wait or transfer is negative.
TB_TEST(every_collective_of_a_real_run_is_matched_across_its_members) {
    static const struct {
        const char *name, *flags, *sizes;  // sizes: "group=N,..." (others: 2)
    } layouts[] = {
        {"tp2", "--world-size 4 --tensor-model-parallel-size 2", "world=4"},
        {"pp4", "--world-size 4 --pipeline-model-parallel-size 4", "world=4,pp=4,pp_grad=4"},
    };
    for (size_t l = 0; l < sizeof layouts / sizeof *layouts; l++) {
        char dir[512];
        snprintf(dir, sizeof dir, TB_TEST_TMPDIR "/step_report_real_%s", layouts[l].name);
        int rc = tb_run(&sh, NULL,
                        "rm -rf %s && %s/pretrain_gpt --num-layers 4 --hidden-size 32 --num-attention-heads 2 "
                        "--seq-length 16 --vocab-size 64 --micro-batch-size 2 --global-batch-size 8 --train-iters 2 "
                        "%s --run-dir %s > /dev/null",
                        dir, TB_BIN_DIR, layouts[l].flags, dir);
        TB_REQUIRE(rc == 0, "pretrain_gpt %s: %s", layouts[l].name, sh.err);
        tb_error err;
        json_t *calls = tb_collective_calls(dir, &err);
        TB_REQUIRE(calls && json_array_size(calls) > 0, "%s", calls ? "no calls" : err.msg);
        size_t i, bad = 0, tp = 0, pp = 0;
        json_t *c;
        json_array_foreach(calls, i, c) {
            const char *g = json_string_value(json_object_get(c, "group"));
            char key[32];
            snprintf(key, sizeof key, "%s=", g);
            const char *at = strstr(layouts[l].sizes, key);
            size_t want = at && (at == layouts[l].sizes || at[-1] == ',') ? strtoul(at + strlen(key), NULL, 10) : 2;
            size_t have = json_array_size(json_object_get(c, "members"));
            tp += !strcmp(g, "tp");
            pp += !strcmp(g, "pp");
            size_t k;
            json_t *m;
            int negative = 0;
            json_array_foreach(json_object_get(c, "members"), k, m) negative |=
                json_number_value(json_object_get(m, "wait_ms")) < 0 ||
                json_number_value(json_object_get(m, "transfer_ms")) < 0;
            if (have != want || negative) {
                if (bad++ < 3)
                    printf("    %s: %s call %lld: %zu members (want %zu)%s\n", layouts[l].name, g,
                           (long long)json_integer_value(json_object_get(c, "call")), have, want,
                           negative ? ", a negative wait or transfer" : "");
            }
        }
        TB_CHECK(bad == 0, "%s: %zu calls not matched across their whole group", layouts[l].name, bad);
        TB_CHECK(l == 0 ? tp > 0 : pp > 0, "%s: the %s collectives are among them", layouts[l].name,
                 l == 0 ? "tensor-parallel" : "pipeline group's");
        json_decref(calls);
    }
}

// Two runs of 5 steps whose backward differs (10 ms against 20, each within 0.2 ms of itself)
// and whose forward moves only within its own spread: diff --phases names backward first.
static void phase_run(const char *dir, double backward, double forward_jitter) {
    tb_run(&sh, NULL, "rm -rf %s && mkdir -p %s", dir, dir);
    char path[1024];
    json_t *events = json_array();
    FILE *m = fopen(tb_rank_path(path, sizeof path, dir, TB_RANK_METRICS, 0), "w");
    for (int step = 1; step <= 5; step++) {
        json_array_append_new(events, tb_trace_range("train_step", step * 1000.0, 900, 0, json_pack("{s:i}", "step", step)));
        json_t *line = json_pack("{s:i, s:f, s:{s:f, s:f, s:f, s:f, s:f, s:f}}", "step", step, "step_ms", 40.0,
                                 "pipeline", "data_ms", 0.1, "forward_ms", 5 + forward_jitter * (step % 2),
                                 "backward_ms", backward + 0.05 * (step % 3), "optimizer_ms", 3.0, "p2p_wait_ms", 0.0,
                                 "idle_ms", 1.0);
        char *text = json_dumps(line, JSON_COMPACT);
        fprintf(m, "%s\n", text);
        free(text);
        json_decref(line);
    }
    fclose(m);
    tb_write_json(tb_rank_path(path, sizeof path, dir, TB_RANK_TRACE, 0), json_pack("{s:o}", "traceEvents", events));
}

TB_TEST(diff_phases_names_the_first_phase_that_changed_beyond_the_spread) {
    const char *a = TB_TEST_TMPDIR "/phases_a", *b = TB_TEST_TMPDIR "/phases_b";
    phase_run(a, 10, 2);
    phase_run(b, 20, 2.5);
    char out_path[1024];
    snprintf(out_path, sizeof out_path, "%s/phases.out", TB_TEST_TMPDIR);
    FILE *f = fopen(out_path, "w");
    tb_error err;
    int rc = f ? tb_phase_diff(f, a, b, &err) : -1;
    if (f) fclose(f);
    char *out = tb_slurp(out_path);
    printf("%s", out ? out : "");
    TB_CHECK(rc == 0 && out && strstr(out, "first changed phase: backward_ms (+10.000 ms per step"),
             "backward changed first: %s", rc == 0 ? "" : err.msg);
    TB_CHECK(out && !strstr(strstr(out, "forward_ms"), "changed\n  backward"), "forward stays within its spread");
    free(out);
}

// Four steps of two ranks, one tp all-reduce each; step s's call carries 1000 s bytes but
// step 2's, which carries none, and step 4's names no group. Each step's figures hold its own
// call only, and the calls without bytes or group are still matched (null there), not left out.
TB_TEST(each_step_holds_its_own_calls_and_a_call_without_bytes_is_matched) {
    const char *dir = TB_TEST_TMPDIR "/step_report_steps";
    tb_run(&sh, NULL, "rm -rf %s && mkdir -p %s", dir, dir);
    char path[1024];
    for (int r = 0; r < 2; r++) {
        json_t *events = json_array();
        FILE *m = fopen(tb_rank_path(path, sizeof path, dir, TB_RANK_METRICS, r), "w");
        TB_REQUIRE(m, "%s", path);
        for (int step = 1; step <= 4; step++) {
            const double t0 = 100.0 * step;
            json_array_append_new(events, tb_trace_range("train_step", t0, 90, 0, json_pack("{s:i}", "step", step)));
            json_t *args = json_pack("{s:s, s:s, s:i, s:i}", "group", "tp", "op", "all_reduce", "group_id", 0, "seq",
                                     step);
            if (step != 2) json_object_set_new(args, "bytes", json_integer(1000 * step));
            if (step == 4) json_object_del(args, "group");
            json_array_append_new(events, tb_trace_range("comm.tp.all_reduce", t0 + 10 + 5 * r, 20 - 5 * r, 1, args));
            fprintf(m, "{\"step\":%d,\"step_ms\":0.09,\"pipeline\":{\"forward_ms\":0.05}}\n", step);
        }
        fclose(m);
        tb_rank_path(path, sizeof path, dir, TB_RANK_TRACE, r);
        tb_write_json(path, json_pack("{s:o}", "traceEvents", events));
    }
    tb_error err;
    json_t *calls = tb_collective_calls(dir, &err);
    TB_REQUIRE(calls, "%s", err.msg);
    TB_CHECK(json_array_size(calls) == 4, "four matched calls (%zu)", json_array_size(calls));
    size_t i;
    json_t *c;
    json_array_foreach(calls, i, c) {
        const json_int_t step = json_integer_value(json_object_get(c, "step"));
        json_t *bytes = json_object_get(c, "bytes");
        char *got = json_dumps(bytes, JSON_ENCODE_ANY);
        TB_CHECK(step == 2 ? json_is_null(bytes) : json_integer_value(bytes) == 1000 * step,
                 "step %lld's call: bytes %s (expected %s)", (long long)step, got ? got : "(none)",
                 step == 2 ? "null" : "1000 per step");
        free(got);
        TB_CHECK(json_array_size(json_object_get(c, "members")) == 2, "step %lld's call: both ranks", (long long)step);
        TB_CHECK(step == 4 ? json_is_null(json_object_get(c, "group"))
                           : !strcmp(json_string_value(json_object_get(c, "group")) ?: "", "tp"),
                 "step %lld's call: group %s", (long long)step, step == 4 ? "null" : "tp");
    }
    json_decref(calls);
    json_t *steps = tb_step_decomposition(dir, 0, &err);
    TB_REQUIRE(steps, "%s", err.msg);
    TB_CHECK(json_array_size(steps) == 4, "four steps (%zu)", json_array_size(steps));
    json_t *st;
    json_array_foreach(steps, i, st) {
        const json_int_t step = json_integer_value(json_object_get(st, "step"));
        for (int r = 0; r < 2; r++) {
            json_t *rank = json_array_get(json_object_get(st, "ranks"), (size_t)r);
            json_t *tp = json_object_get(json_object_get(rank, "collectives"), step == 4 ? "(no group)" : "tp");
            const long long ncalls = json_integer_value(json_object_get(tp, "calls"));
            const long long bytes = json_integer_value(json_object_get(tp, "bytes"));
            const long long want = step == 2 ? 0 : 1000 * step;
            TB_CHECK(ncalls == 1 && bytes == want, "step %lld rank %d: one tp call of %lld bytes (%lld calls of %lld)",
                     (long long)step, r, want, ncalls, bytes);
        }
    }
    json_decref(steps);
}

int main(void) {
    TB_RUN(enter_spread_wait_and_transfer_of_a_known_call);
    TB_RUN(every_collective_of_a_real_run_is_matched_across_its_members);
    TB_RUN(diff_phases_names_the_first_phase_that_changed_beyond_the_spread);
    TB_RUN(each_step_holds_its_own_calls_and_a_call_without_bytes_is_matched);
    return tb_test_summary();
}
