// test_claim_parsers.c — the claim parsers (experiments/prove/parsers.h) on records of known
// numbers: each figure derived as its definition says, sub-claims combined, and a missing or
// malformed file named. (prove over engine records: test_prove.c.)

#include <math.h>
#include <sqlite3.h>
#include <string.h>
#include <time.h>

#include "records/catalog.h"
#include "fixtures/record_fixture.h"
#include "prove/parsers.h"
#include "tb_run_dir.h"
#include "prove/prove_records.h"
#include "tb_test.h"

// ---------------------------------------------------------------------------------------
// Parsers on known numbers

static char parser_root[FX_PATH];
static char p1[FX_PATH], p2[FX_PATH], p3[FX_PATH];

// p1: 2 ranks, 4 steps, 8 x 16 tokens; p2, p3: 1 rank, 3 steps, 4 x 16 tokens.
static void known_records(void) {
    snprintf(parser_root, sizeof parser_root, "%s", fx_fresh_dir("parsers"));
    fx_numbers a = {.world = 2, .nsteps = 4, .gbs = 8, .seq = 16,
                    .step_ms = {{10, 20, 30, 40}, {15, 5, 35, 50}},  // slowest: 15 20 35 50
                    .loss = {{4.0, 3.5, 3.0, 2.5}, {4.0, 3.5, 3.0, 2.5}},
                    .act = {{100, 200, 300, 250}, {150, 400, 100, 50}},  // peak 400: rank 1, step 2
                    .comm = {{100, 200, 300, 400}, {150, 250, 350, 500}}, .params = {1000, 1200},
                    .flops = {5e6, 6e6}, .bubble = 0.2, .imbalance = 1.5};
    fx_numbers b = {.world = 1, .nsteps = 3, .gbs = 4, .seq = 16, .step_ms = {{100, 8, 12}},
                    .loss = {{5.0, 4.5, 4.25}}, .act = {{50, 60, 70}}, .comm = {{10, 20, 30}}, .params = {3000},
                    .flops = {1e7}, .bubble = 0.1, .imbalance = 1.0};
    fx_numbers c = b;
    c.step_ms[0][0] = 5, c.step_ms[0][1] = 60, c.step_ms[0][2] = 70;
    c.comm[0][2] = 40;
    c.bubble = 0.3;
    fx_write_run(fx_path(p1, sizeof p1, "%s/k/v1/p1", parser_root), &a);
    fx_write_run(fx_path(p2, sizeof p2, "%s/k/v1/p2", parser_root), &b);
    fx_write_run(fx_path(p3, sizeof p3, "%s/k/v1/p3", parser_root), &c);
}

static double parse(const char *parser, const char *args_json, const char *const *dirs, int n, tb_error *err,
                    int *rc) {
    json_t *args = args_json ? json_loads(args_json, 0, NULL) : NULL;
    double v = NAN;
    json_t *ev = NULL;
    *rc = tb_parse_claim(parser, args, dirs, n, &v, &ev, err);
    json_decref(args);
    json_decref(ev);
    return v;
}

TB_TEST(step_ms_is_the_median_slowest_rank_step_after_warmup) {
    tb_error err;
    int rc;
    const char *one[] = {p1};
    double v = parse("step_ms", NULL, one, 1, &err, &rc);
    TB_CHECK(rc == 0 && v == 35.0, "p1: median of 20 35 50 = 35, got %g (%s)", v, rc ? err.msg : "");
    const char *three[] = {p1, p2, p3};
    v = parse("step_ms", NULL, three, 3, &err, &rc);
    TB_CHECK(rc == 0 && v == 35.0, "median over records of 35 10 65 = 35, got %g", v);
    const char *two[] = {p2, p3};
    v = parse("step_ms", NULL, two, 2, &err, &rc);
    TB_CHECK(rc == 0 && v == 37.5, "even count: mean of 10 and 65 = 37.5, got %g", v);
    v = parse("step_ms", "{\"warmup_steps\": 0}", one, 1, &err, &rc);
    TB_CHECK(rc == 0 && v == 27.5, "no warmup: median of 15 20 35 50 = 27.5, got %g", v);
    v = parse("step_ms", "{\"warmup_steps\": 1.0}", one, 1, &err, &rc);
    TB_CHECK(rc == 0 && v == 35.0, "an integral real (a Lua float) is an integer: %g", v);
    v = parse("step_ms", "{\"warmup_steps\": 1.5}", one, 1, &err, &rc);
    TB_CHECK(rc != 0 && strstr(err.msg, "args.warmup_steps must be an integer"), "1.5 is not: %s", err.msg);
    v = parse("step_ms", "{\"warmup_steps\": 4}", one, 1, &err, &rc);
    TB_CHECK(rc != 0 && strstr(err.msg, "no steps after warmup_steps 4"), "warmup eats every step: %s", err.msg);
}

TB_TEST(tokens_per_s_is_global_batch_tokens_over_the_slowest_step) {
    tb_error err;
    int rc;
    const char *one[] = {p1};
    double v = parse("tokens_per_s", NULL, one, 1, &err, &rc);
    TB_CHECK(rc == 0 && v == 128.0 / (35.0 / 1000.0), "p1: 8x16 tokens / 35 ms, got %.17g (%s)", v, rc ? err.msg : "");
    const char *p2only[] = {p2};
    v = parse("tokens_per_s", NULL, p2only, 1, &err, &rc);
    double want = 0.5 * (64.0 / (8.0 / 1000.0) + 64.0 / (12.0 / 1000.0));
    TB_CHECK(rc == 0 && v == want, "p2: median of per-step throughput, %.17g vs %.17g", v, want);
    const char *three[] = {p1, p2, p3};
    v = parse("tokens_per_s", NULL, three, 3, &err, &rc);
    TB_CHECK(rc == 0 && v == 128.0 / (35.0 / 1000.0), "median over records (3657, 6667, 985) = p1's, got %.17g", v);
    json_t *ev;
    double value;
    TB_REQUIRE(tb_parse_claim("tokens_per_s", NULL, one, 1, &value, &ev, &err) == 0, "%s", err.msg);
    json_t *rec = json_array_get(json_object_get(ev, "records"), 0);
    TB_CHECK(json_integer_value(json_object_get(json_object_get(rec, "steps_used"), "first")) == 2 &&
                 json_integer_value(json_object_get(json_object_get(rec, "steps_used"), "count")) == 3,
             "evidence: steps 2.. (3 steps)");
    TB_CHECK(json_real_value(json_object_get(json_object_get(rec, "per_step"), "max")) == 128.0 / (20.0 / 1000.0),
             "evidence: per-step max");
    TB_CHECK(json_array_size(json_object_get(rec, "files")) == 3, "evidence: config + 2 metrics files read");
    json_decref(ev);
    // a quantile: p1's per-step throughputs 2560, 3657.1, 6400 (128 tokens over 50, 35, 20 ms);
    // the 0.05-quantile sits at 0.1 between the first two
    const double slow = 128.0 / 0.05, mid = 128.0 / 0.035;
    v = parse("tokens_per_s", "{\"quantile\": 0.05}", one, 1, &err, &rc);
    TB_CHECK(rc == 0 && fabs(v - (slow + 0.1 * (mid - slow))) < 1e-9, "p5: %.17g (%s)", v, rc ? err.msg : "");
    v = parse("step_ms", "{\"quantile\": 0.95}", one, 1, &err, &rc);
    TB_CHECK(rc == 0 && fabs(v - (35 + 0.9 * 15)) < 1e-9, "step_ms p95 of 20 35 50: %.17g", v);
    v = parse("tokens_per_s", "{\"quantile\": 1}", one, 1, &err, &rc);
    TB_CHECK(rc != 0 && strstr(err.msg, "args.quantile must be a number between 0 and 1"), "q = 1: %s", err.msg);
}

TB_TEST(loss_at_step_reads_rank_0_and_checks_the_others) {
    tb_error err;
    int rc;
    const char *one[] = {p1};
    double v = parse("loss_at_step", NULL, one, 1, &err, &rc);
    TB_CHECK(rc == 0 && v == 2.5, "last step: %g", v);
    v = parse("loss_at_step", "{\"step\": 2}", one, 1, &err, &rc);
    TB_CHECK(rc == 0 && v == 3.5, "step 2: %g", v);
    v = parse("loss_at_step", "{\"step\": 9}", one, 1, &err, &rc);
    TB_CHECK(rc != 0 && strstr(err.msg, "no step 9"), "absent step: %s", err.msg);
    // rank 1 disagrees
    char dir[FX_PATH];
    fx_numbers a = {.world = 2, .nsteps = 2, .gbs = 1, .seq = 1, .step_ms = {{1, 1}, {1, 1}},
                    .loss = {{4.0, 3.0}, {4.0, 3.1}}};
    fx_write_run(fx_path(dir, sizeof dir, "%s/k/v1/disagree", parser_root), &a);
    const char *bad[] = {dir};
    v = parse("loss_at_step", NULL, bad, 1, &err, &rc);
    TB_CHECK(rc != 0 && strstr(err.msg, "metrics.rank-00001.jsonl:2: loss 3.1") && strstr(err.msg, "disagrees"),
             "disagreement names rank 1's file and line: %s", err.msg);
}

TB_TEST(peak_memory_is_the_max_over_steps_and_ranks) {
    tb_error err;
    int rc;
    const char *one[] = {p1};
    double v = parse("peak_memory_bytes", "{\"category\": \"activations\"}", one, 1, &err, &rc);
    TB_CHECK(rc == 0 && v == 400, "activations: %g", v);
    v = parse("peak_memory_bytes", NULL, one, 1, &err, &rc);
    TB_CHECK(rc == 0 && v == 1400, "total (default): %g", v);
    v = parse("peak_memory_bytes", "{\"category\": \"total_peak\"}", one, 1, &err, &rc);
    TB_CHECK(rc == 0 && v == 1300, "total_peak: %g", v);
    v = parse("peak_memory_bytes", "{\"category\": \"kv\"}", one, 1, &err, &rc);
    TB_CHECK(rc != 0 && strstr(err.msg, "'kv'"), "unknown category: %s", err.msg);
    v = parse("peak_memory_bytes", "{\"category\": \"grads\"}", one, 1, &err, &rc);
    TB_CHECK(rc != 0 && strstr(err.msg, "metrics.rank-00000.jsonl:1: no numeric 'mem_peak_bytes.grads'"),
             "a category the file lacks names file and line: %s", err.msg);
}

TB_TEST(pipeline_parsers_read_pipeline_json) {
    tb_error err;
    int rc;
    const char *three[] = {p1, p2, p3};
    double v = parse("pipeline_bubble", NULL, three, 3, &err, &rc);
    TB_CHECK(rc == 0 && v == 0.2, "median of 0.2 0.1 0.3: %g", v);
    v = parse("pipeline_bubble", "{\"kind\": \"theoretical\"}", three, 3, &err, &rc);
    TB_CHECK(rc == 0 && v == 0.25, "theoretical: %g", v);
    v = parse("stage_imbalance", NULL, three, 3, &err, &rc);
    TB_CHECK(rc == 0 && v == 1.0, "median of 1.5 1 1: %g", v);
}

// p1's traces: rank 0 all-reduces 100..400 bytes over tp in steps 1..4, rank 1 150..500;
// each step also all-gathers 4 bytes over tp and all-reduces 8 over dp, and after each
// step all-reduces 1 MiB over tp outside train_step (fx_write_trace).
TB_TEST(comm_bytes_sums_one_groups_calls_inside_the_step) {
    tb_error err;
    int rc;
    const char *one[] = {p1};
    double v = parse("comm_bytes", "{\"group\": \"tp\", \"op\": \"all_reduce\"}", one, 1, &err, &rc);
    TB_CHECK(rc == 0 && v == 500, "last step, the busiest rank (rank 1): %g (%s)", v, rc ? err.msg : "");
    v = parse("comm_bytes", "{\"group\": \"tp\"}", one, 1, &err, &rc);
    TB_CHECK(rc == 0 && v == 504, "every op of the group: 500 + 4, got %g", v);
    v = parse("comm_bytes", "{\"group\": \"tp\", \"op\": \"all_reduce\", \"step\": 2}", one, 1, &err, &rc);
    TB_CHECK(rc == 0 && v == 250, "step 2: %g", v);
    v = parse("comm_bytes", "{\"group\": \"dp\"}", one, 1, &err, &rc);
    TB_CHECK(rc == 0 && v == 8, "another group's calls only: %g", v);
    v = parse("comm_bytes", "{\"group\": \"world\"}", one, 1, &err, &rc);
    TB_CHECK(rc == 0 && v == 0, "a group without calls moves 0 bytes: %g", v);
    const char *three[] = {p1, p2, p3};
    v = parse("comm_bytes", "{\"group\": \"tp\", \"op\": \"all_reduce\"}", three, 3, &err, &rc);
    TB_CHECK(rc == 0 && v == 40, "median over records of 500 30 40: %g", v);

    json_t *args = json_loads("{\"group\": \"tp\", \"op\": \"all_reduce\"}", 0, NULL), *ev = NULL;
    TB_REQUIRE(tb_parse_claim("comm_bytes", args, one, 1, &v, &ev, &err) == 0, "%s", err.msg);
    json_t *rec = json_array_get(json_object_get(ev, "records"), 0), *per = json_object_get(rec, "per_rank");
    TB_CHECK(json_array_size(per) == 2 && json_number_value(json_object_get(json_array_get(per, 0), "bytes")) == 400 &&
                 json_integer_value(json_object_get(json_array_get(per, 1), "calls")) == 1 &&
                 json_integer_value(json_object_get(rec, "step")) == 4,
             "evidence: each rank's bytes and calls at step 4");
    TB_CHECK(json_array_size(json_object_get(rec, "files")) == 3, "config + 2 traces read");
    json_decref(ev);

    // the number comes from rank 1's trace: rewritten with another step-4 all-reduce, it follows
    char dir[FX_PATH];
    fx_numbers a = {.world = 2, .nsteps = 4, .gbs = 1, .seq = 1, .comm = {{100, 200, 300, 400}, {150, 250, 350, 500}}};
    fx_write_run(fx_path(dir, sizeof dir, "%s/k/v1/comm_edit", parser_root), &a);
    a.comm[1][3] = 999;
    fx_write_trace(dir, &a, 1);
    const char *edited[] = {dir};
    TB_CHECK(tb_parse_claim("comm_bytes", args, edited, 1, &v, NULL, &err) == 0 && v == 999,
             "the edited trace's bytes: %g", v);
    json_decref(args);

    parse("comm_bytes", "{\"group\": \"tpp\"}", one, 1, &err, &rc);
    TB_CHECK(rc != 0 && strstr(err.msg, "args.group 'tpp' is not one of tp, cp, dp"), "a mistyped group: %s",
             err.msg);
    parse("comm_bytes", NULL, one, 1, &err, &rc);
    TB_CHECK(rc != 0 && strstr(err.msg, "args.group must be a string"), "the group is required: %s", err.msg);
    parse("comm_bytes", "{\"group\": \"tp\", \"op\": \"allreduce\"}", one, 1, &err, &rc);
    TB_CHECK(rc != 0 && strstr(err.msg, "args.op 'allreduce' is not one of all_reduce"), "a mistyped op: %s",
             err.msg);
    parse("comm_bytes", "{\"group\": \"tp\", \"step\": 9}", one, 1, &err, &rc);
    TB_CHECK(rc != 0 && strstr(err.msg, "trace.rank-00000.json: no train_step range with args.step 9"),
             "an absent step names the trace: %s", err.msg);
    char path[FX_PATH];
    remove(tb_record_rank_path(path, sizeof path, dir, TB_RANK_TRACE, 1));
    parse("comm_bytes", "{\"group\": \"tp\"}", edited, 1, &err, &rc);
    TB_CHECK(rc != 0 && strstr(err.msg, path) && strstr(err.msg, "rank 1 of world_size 2"),
             "a missing trace is named: %s", err.msg);
}

TB_TEST(rank_and_stage_figures_read_pipeline_json) {
    tb_error err;
    int rc;
    const char *one[] = {p1};
    double v = parse("rank_figure", "{\"figure\": \"parameters\"}", one, 1, &err, &rc);
    TB_CHECK(rc == 0 && v == 1200, "the max over ranks by default: %g (%s)", v, rc ? err.msg : "");
    v = parse("rank_figure", "{\"figure\": \"parameters\", \"rank\": 0}", one, 1, &err, &rc);
    TB_CHECK(rc == 0 && v == 1000, "rank 0: %g", v);
    v = parse("rank_figure", "{\"figure\": \"parameters\", \"of\": \"min\"}", one, 1, &err, &rc);
    TB_CHECK(rc == 0 && v == 1000, "min: %g", v);
    v = parse("rank_figure", "{\"figure\": \"parameters\", \"of\": \"sum\"}", one, 1, &err, &rc);
    TB_CHECK(rc == 0 && v == 2200, "sum: %g", v);
    v = parse("rank_figure", "{\"figure\": \"flops_per_step\", \"rank\": 1}", one, 1, &err, &rc);
    TB_CHECK(rc == 0 && v == 6e6, "rank 1's FLOPs: %g", v);
    v = parse("rank_figure", "{\"figure\": \"peak_activation_bytes\", \"rank\": 1}", one, 1, &err, &rc);
    TB_CHECK(rc == 0 && v == 400, "rank 1's activation peak: %g", v);
    v = parse("stage_figure", "{\"figure\": \"parameters\"}", one, 1, &err, &rc);
    TB_CHECK(rc == 0 && v == 1000, "one stage: rank 0's: %g", v);
    const char *three[] = {p1, p2, p3};
    v = parse("rank_figure", "{\"figure\": \"parameters\"}", three, 3, &err, &rc);
    TB_CHECK(rc == 0 && v == 3000, "median over records of 1200 3000 3000: %g", v);

    // pp 2 x tp 2: the stages are the tp-0 ranks 0 and 2
    char dir[FX_PATH], path[FX_PATH];
    fx_numbers pp = {.world = 4, .pp = 2, .nsteps = 2, .gbs = 1, .seq = 1, .params = {10, 11, 20, 21},
                     .flops = {1, 2, 3, 4}};
    fx_write_run(fx_path(dir, sizeof dir, "%s/k/v1/pp2", parser_root), &pp);
    const char *pp2[] = {dir};
    v = parse("stage_figure", "{\"figure\": \"parameters\"}", pp2, 1, &err, &rc);
    TB_CHECK(rc == 0 && v == 20, "the max over stages: %g (%s)", v, rc ? err.msg : "");
    v = parse("stage_figure", "{\"figure\": \"parameters\", \"of\": \"min\"}", pp2, 1, &err, &rc);
    TB_CHECK(rc == 0 && v == 10, "the min over stages: %g", v);
    v = parse("stage_figure", "{\"figure\": \"flops_per_step\", \"stage\": 1}", pp2, 1, &err, &rc);
    TB_CHECK(rc == 0 && v == 3, "stage 1's FLOPs (rank 2's): %g", v);
    v = parse("rank_figure", "{\"figure\": \"parameters\", \"of\": \"sum\"}", pp2, 1, &err, &rc);
    TB_CHECK(rc == 0 && v == 62, "every rank's: %g", v);

    parse("rank_figure", "{\"figure\": \"params\"}", one, 1, &err, &rc);
    TB_CHECK(rc != 0 && strstr(err.msg, "args.figure 'params' is not one of parameters, layers"),
             "a mistyped figure: %s", err.msg);
    parse("rank_figure", "{\"figure\": \"parameters\", \"rank\": 2}", one, 1, &err, &rc);
    TB_CHECK(rc != 0 && strstr(err.msg, "args.rank 2 is not below the record's 2 ranks"), "no rank 2: %s", err.msg);
    parse("stage_figure", "{\"figure\": \"parameters\", \"stage\": 0, \"of\": \"max\"}", pp2, 1, &err, &rc);
    TB_CHECK(rc != 0 && strstr(err.msg, "args.stage and args.of exclude each other"), "both: %s", err.msg);
    parse("stage_figure", "{\"figure\": \"parameters\", \"of\": \"mean\"}", pp2, 1, &err, &rc);
    TB_CHECK(rc != 0 && strstr(err.msg, "args.of 'mean' is not one of max, min, sum"), "a mistyped of: %s",
             err.msg);
    // another run's pipeline.json (one rank where config.json says 4) is refused, as is one
    // written before pipeline.json listed the ranks
    fx_path(path, sizeof path, "%s/" TB_RECORD_RUN_DIR "/" TB_RUN_PIPELINE, dir);
    json_t *doc = json_load_file(path, 0, NULL);
    json_array_remove(json_object_get(doc, "ranks"), 3);
    json_array_remove(json_object_get(doc, "ranks"), 2);
    json_array_remove(json_object_get(doc, "ranks"), 1);
    tb_write_json_atomic(path, doc, NULL);
    parse("rank_figure", "{\"figure\": \"parameters\"}", pp2, 1, &err, &rc);
    TB_CHECK(rc != 0 && strstr(err.msg, "pipeline.json: 1 ranks, but") && strstr(err.msg, "world_size 4"),
             "a count that disagrees with the config: %s", err.msg);
    json_object_del(doc, "ranks");
    tb_write_json_atomic(path, doc, NULL);
    json_decref(doc);
    parse("rank_figure", "{\"figure\": \"parameters\"}", pp2, 1, &err, &rc);
    TB_CHECK(rc != 0 && strstr(err.msg, "no 'ranks' array"), "no ranks: %s", err.msg);
}

TB_TEST(ratio_and_saved_fraction_combine_two_sub_claims) {
    tb_error err;
    int rc;
    const char *three[] = {p1, p2, p3};
    double v = parse("ratio",
                     "{\"numerator\": {\"parser\": \"step_ms\", \"records\": [2]},"
                     " \"denominator\": {\"parser\": \"step_ms\", \"records\": [\"p2\"]}}",
                     three, 3, &err, &rc);
    TB_CHECK(rc == 0 && v == 6.5, "65 / 10: %g (%s)", v, rc ? err.msg : "");
    v = parse("saved_fraction",
              "{\"treatment\": {\"parser\": \"peak_memory_bytes\", \"args\": {\"category\": \"activations\"},"
              " \"records\": [1]}, \"baseline\": {\"parser\": \"peak_memory_bytes\","
              " \"args\": {\"category\": \"activations\"}, \"records\": [0]}}",
              three, 3, &err, &rc);
    TB_CHECK(rc == 0 && v == 1.0 - 70.0 / 400.0, "1 - 70/400: %g (%s)", v, rc ? err.msg : "");
    v = parse("ratio", "{\"numerator\": {\"parser\": \"step_ms\", \"records\": [\"zz\"]}, \"denominator\": "
                       "{\"parser\": \"step_ms\"}}",
              three, 3, &err, &rc);
    TB_CHECK(rc != 0 && strstr(err.msg, "\"zz\""), "an unknown run id is named: %s", err.msg);
}

TB_TEST(relative_difference_derives_both_parts_from_their_records) {
    tb_error err;
    int rc;
    const char *three[] = {p1, p2, p3};
    // last losses: p1 2.5, p2 4.25
    double v = parse("relative_difference",
                     "{\"a\": {\"parser\": \"loss_at_step\", \"records\": [0]},"
                     " \"b\": {\"parser\": \"loss_at_step\", \"records\": [\"p2\"]}}",
                     three, 3, &err, &rc);
    TB_CHECK(rc == 0 && v == fabs(2.5 - 4.25) / 4.25, "|2.5 - 4.25| / 4.25: %.17g (%s)", v, rc ? err.msg : "");
    v = parse("relative_difference",
              "{\"a\": {\"parser\": \"loss_at_step\", \"records\": [1]},"
              " \"b\": {\"parser\": \"loss_at_step\", \"records\": [2]}}",
              three, 3, &err, &rc);
    TB_CHECK(rc == 0 && v == 0, "equal losses: 0, got %.17g", v);
    // b = 0: the absolute difference
    char zero[FX_PATH];
    fx_numbers z = {.world = 1, .nsteps = 2, .gbs = 1, .seq = 1, .step_ms = {{1, 1}}, .loss = {{1.0, 0.0}}};
    fx_write_run(fx_path(zero, sizeof zero, "%s/k/v1/zero_loss", parser_root), &z);
    const char *with_zero[] = {p1, zero};
    v = parse("relative_difference",
              "{\"a\": {\"parser\": \"loss_at_step\", \"records\": [0]},"
              " \"b\": {\"parser\": \"loss_at_step\", \"records\": [1]}}",
              with_zero, 2, &err, &rc);
    TB_CHECK(rc == 0 && v == 2.5, "b = 0: |2.5 - 0| = 2.5, got %.17g (%s)", v, rc ? err.msg : "");
    json_t *args = json_loads("{\"a\": {\"parser\": \"loss_at_step\", \"records\": [0]},"
                              " \"b\": {\"parser\": \"loss_at_step\", \"records\": [1]}}",
                              0, NULL);
    json_t *ev = NULL;
    TB_REQUIRE(tb_parse_claim("relative_difference", args, three, 3, &v, &ev, &err) == 0, "%s", err.msg);
    json_t *ea = json_object_get(ev, "a"), *eb = json_object_get(ev, "b");
    TB_CHECK(json_real_value(json_object_get(ev, "a_value")) == 2.5 && json_real_value(json_object_get(ev, "b_value")) ==
                 4.25 && ea && eb &&
                 !strcmp(json_string_value(json_object_get(json_array_get(json_object_get(eb, "records"), 0),
                                                           "record_dir")), p2),
             "evidence holds both parts, b's record is p2");
    json_decref(ev);
    json_decref(args);
    parse("relative_difference", "{\"a\": {\"parser\": \"loss_at_step\"}}", three, 3, &err, &rc);
    TB_CHECK(rc != 0 && strstr(err.msg, "needs args.a and args.b"), "b missing: %s", err.msg);
    parse("relative_difference", "{\"a\": {\"parser\": \"loss_at_step\"}, \"b\": {\"parser\": \"loss\"}}",
          three, 3, &err, &rc);
    TB_CHECK(rc != 0 && strstr(err.msg, "unknown parser 'loss'") && strstr(err.msg, "relative_difference b"),
             "a bad part is named: %s", err.msg);
    TB_CHECK(tb_parser_definition("relative_difference") &&
                 strstr(tb_parser_definition("relative_difference"), "|a - b| / |b|"),
             "the definition is published");
}

TB_TEST(parsers_name_the_missing_or_malformed_file) {
    tb_error err;
    int rc;
    char dir[FX_PATH], path[FX_PATH];
    fx_numbers a = {.world = 2, .nsteps = 3, .gbs = 1, .seq = 1, .step_ms = {{1, 2, 3}, {1, 2, 3}}};
    fx_write_run(fx_path(dir, sizeof dir, "%s/k/v1/broken", parser_root), &a);
    const char *one[] = {dir};
    remove(tb_record_rank_path(path, sizeof path, dir, TB_RANK_METRICS, 1));
    parse("step_ms", NULL, one, 1, &err, &rc);
    TB_CHECK(rc != 0 && strstr(err.msg, path) && strstr(err.msg, "rank 1 of world_size 2"),
             "a missing rank file is named: %s", err.msg);
    char *text = fx_read(tb_record_rank_path(path, sizeof path, dir, TB_RANK_METRICS, 0));
    char *third = strchr(strchr(text, '\n') + 1, '\n') + 1;
    memcpy(third, "{\"step\":3,", 10);
    third[10] = '}';
    third[11] = '}';
    fx_write_text(path, text);
    free(text);
    parse("step_ms", NULL, one, 1, &err, &rc);
    TB_CHECK(rc != 0 && strstr(err.msg, "metrics.rank-00000.jsonl:3:"), "a malformed line is named: %s", err.msg);
    remove(fx_path(path, sizeof path, "%s/" TB_RECORD_RUN_DIR "/" TB_RUN_PIPELINE, dir));
    parse("pipeline_bubble", NULL, one, 1, &err, &rc);
    TB_CHECK(rc != 0 && strstr(err.msg, path) && strstr(err.msg, "missing"), "missing pipeline.json: %s", err.msg);
    parse("nope", NULL, one, 1, &err, &rc);
    TB_CHECK(rc != 0 && strstr(err.msg, "unknown parser 'nope'") && strstr(err.msg, "tokens_per_s"),
             "unknown parser, listing the known ones: %s", err.msg);
    parse("step_ms", "{\"warmup\": 1}", one, 1, &err, &rc);
    TB_CHECK(rc != 0 && strstr(err.msg, "unknown args.warmup") && strstr(err.msg, "warmup_steps"),
             "a mistyped arg: %s", err.msg);
    TB_CHECK(tb_parser_definition("tokens_per_s") && strstr(tb_parser_definition("tokens_per_s"), "slowest"),
             "definitions are published");
}

int main(void) {
    known_records();
    TB_RUN(step_ms_is_the_median_slowest_rank_step_after_warmup);
    TB_RUN(tokens_per_s_is_global_batch_tokens_over_the_slowest_step);
    TB_RUN(loss_at_step_reads_rank_0_and_checks_the_others);
    TB_RUN(peak_memory_is_the_max_over_steps_and_ranks);
    TB_RUN(pipeline_parsers_read_pipeline_json);
    TB_RUN(comm_bytes_sums_one_groups_calls_inside_the_step);
    TB_RUN(rank_and_stage_figures_read_pipeline_json);
    TB_RUN(ratio_and_saved_fraction_combine_two_sub_claims);
    TB_RUN(relative_difference_derives_both_parts_from_their_records);
    TB_RUN(parsers_name_the_missing_or_malformed_file);
    return tb_test_summary();
}
