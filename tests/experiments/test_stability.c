// test_stability.c — the stability gate of `tracebook prove` (experiments/prove/stability.h): a
// claim derived from time is PROVEN only when its runs were measured validly (quiet
// conditions, enough repetitions and steps, a median whose interval fits the claim's
// tolerance); an exact claim over the same records is not gated.
#include <math.h>
#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "records/catalog.h"
#include "fixtures/record_fixture.h"
#include "prove/parsers.h"
#include "prove/prove.h"
#include "prove/stability.h"
#include "tb_run_dir.h"
#include "tb_test.h"

// A steady run: 1 rank, 6 steps of about 10 ms (spread 2%), 4 x 16 tokens a step.
static fx_numbers steady(void) {
    fx_numbers n = {.world = 1, .nsteps = 6, .gbs = 4, .seq = 16,
                    .step_ms = {{30, 10, 10.2, 9.9, 10.1, 10}},  // step 1 is the warmup
                    .loss = {{5, 4.5, 4.2, 4, 3.9, 3.8}}, .act = {{50, 60, 70, 70, 70, 70}},
                    .comm = {{4096, 4096, 4096, 4096, 4096, 4096}}, .params = {30080}, .flops = {6.1e6},
                    .bubble = 0.2, .imbalance = 1.1};
    return n;
}

// Records <root>/g/v1/<id> with the given numbers and their manifests.
static void write_record(const char *root, const char *id, const fx_numbers *n) {
    char rec[FX_PATH];
    fx_path(rec, sizeof rec, "%s/g/v1/%s", root, id);
    fx_write_run(rec, n);
    // the runs of one letter (r1, r2, r3) are repetitions 1, 2, 3 of one sweep point, as a
    // runbook's repeat_ records them; each letter its own point
    const size_t letters = strcspn(id, "0123456789");
    char point[32];
    snprintf(point, sizeof point, "%.*s", (int)letters, id);
    const int rep = id[letters] ? atoi(id + letters) : 1;
    fx_write_manifest(rec, "g", 1, id, json_pack("{s:{s:s}, s:i}", "sweep_point", "record", point, "repetition", rep));
}

// The claims of the condition tests below are about the conditions: one repetition of 5
// steps of ~10 ms is enough for them (the sampling rule's own tests set theirs, RULE_DEFAULT
// for the defaults of stability.h).
#define RULE_ONE_SHORT_RUN "{\"min_repetitions\": 1, \"min_window_s\": 0}"
#define RULE_DEFAULT "{}"

// Adds a claim over runs (a NULL-terminated list of ids) with the value its parser derives.
// extra: more claim fields as JSON (NULL: RULE_ONE_SHORT_RUN).
static void add_claim(json_t *claims, const char *root, const char *id, const char *parser, const char *args_json,
                      const char *const *runs, const char *extra) {
    char store[8][FX_PATH];
    const char *dirs[8];
    int n = 0;
    json_t *ids = json_array();
    for (; runs[n] && n < 8; n++) {
        dirs[n] = fx_path(store[n], sizeof store[n], "%s/g/v1/%s", root, runs[n]);
        json_array_append_new(ids, json_string(runs[n]));
    }
    json_t *args = args_json ? json_loads(args_json, 0, NULL) : json_object();
    double v = 0;
    tb_error err;
    if (tb_parse_claim(parser, args, dirs, n, &v, NULL, &err) != 0) printf("  claim %s: %s\n", id, err.msg);
    json_t *claim = json_pack("{s:s, s:f, s:s, s:o, s:o, s:f}", "id", id, "value", v, "parser", parser, "args", args,
                              "runs", ids, "relative_tolerance", 1e-9);
    json_t *rule = json_loads(RULE_ONE_SHORT_RUN, 0, NULL), *more = extra ? json_loads(extra, 0, NULL) : NULL;
    if (!extra) json_object_update(claim, rule);
    if (more) json_object_update(claim, more);
    json_decref(rule);
    json_decref(more);
    json_array_append_new(claims, claim);
}

static void write_claims(const char *root, json_t *claims) {
    json_t *file = json_pack("{s:s, s:i, s:o}", "experiment", "g", "version", 1, "claims", claims);
    char path[FX_PATH];
    fx_write_claims(fx_path(path, sizeof path, "%s/g/v1/" TB_EXPERIMENT_CLAIMS, root), file);
    json_decref(file);
}

static int prove(const char *root, const char *claim, char **out) {
    int rc = fx_capture(tracebook_prove_main, out, "prove", claim, "--artifacts", root, NULL);
    printf("%s", *out);
    return rc;
}

static const char *const only_q[] = {"q", NULL};
static const char *const *only_r1(void) {
    static const char *const ids[] = {"r1", NULL};
    return ids;
}

TB_TEST(a_timing_claim_over_quiet_steady_runs_is_proven_with_its_conditions) {
    const char *root = fx_fresh_dir("gate_quiet");
    fx_numbers n = steady();
    write_record(root, "q", &n);
    json_t *claims = json_array();
    add_claim(claims, root, "tps", "tokens_per_s", NULL, only_q, NULL);
    write_claims(root, claims);
    char *out;
    int rc = prove(root, "tps", &out);
    TB_CHECK(rc == 0 && strstr(out, "PROVEN  g/v1/tps\n"), "proven: exit %d", rc);
    TB_CHECK(strstr(out, "conditions: cpu share 97%, other processes 0% (threshold 10%), steal 0% (threshold 5%), "
                         "1 thread on 2 cores; 5 timed steps (warmup 1) over 0.0502 s, mean 10.04 ms, sd "),
             "the conditions and the timed steps in the evidence");
    TB_CHECK(strstr(out, "sampling: median step 10 ms, 95% interval [") && strstr(out, "5 steps over 1 repetition "),
             "the median's interval and the sample counts");
    free(out);
}

TB_TEST(a_contended_run_does_not_prove_its_timing_but_proves_its_byte_count) {
    const char *root = fx_fresh_dir("gate_contended");
    fx_numbers n = steady();
    n.cond.other_share = 0.66;
    write_record(root, "q", &n);
    json_t *claims = json_array();
    add_claim(claims, root, "tps", "tokens_per_s", NULL, only_q, NULL);
    add_claim(claims, root, "mem", "peak_memory_bytes", NULL, only_q, NULL);
    add_claim(claims, root, "theory", "pipeline_bubble", "{\"kind\": \"theoretical\"}", only_q, NULL);
    add_claim(claims, root, "bubble", "pipeline_bubble", NULL, only_q, NULL);
    add_claim(claims, root, "bytes", "comm_bytes", "{\"group\": \"tp\", \"op\": \"all_reduce\"}", only_q, NULL);
    add_claim(claims, root, "params", "rank_figure", "{\"figure\": \"parameters\"}", only_q, NULL);
    add_claim(claims, root, "flops", "stage_figure", "{\"figure\": \"flops_per_step\"}", only_q, NULL);
    // an exact ratio stays exact; one with a timed part is gated
    add_claim(claims, root, "bytes_per_flop", "ratio",
              "{\"numerator\": {\"parser\": \"comm_bytes\", \"args\": {\"group\": \"tp\"}},"
              " \"denominator\": {\"parser\": \"stage_figure\", \"args\": {\"figure\": \"flops_per_step\"}}}",
              only_q, NULL);
    add_claim(claims, root, "bytes_per_ms", "ratio",
              "{\"numerator\": {\"parser\": \"comm_bytes\", \"args\": {\"group\": \"tp\"}},"
              " \"denominator\": {\"parser\": \"step_ms\"}}",
              only_q, NULL);
    // a comparison reads its timed sides through a and b too
    add_claim(claims, root, "diff", "relative_difference",
              "{\"a\": {\"parser\": \"tokens_per_s\"}, \"b\": {\"parser\": \"tokens_per_s\"}}", only_q, NULL);
    write_claims(root, claims);
    char *out;
    int rc = fx_capture(tracebook_prove_main, &out, "prove", "--all", "--artifacts", root, NULL);
    printf("%s", out);
    TB_CHECK(rc == 1, "exit %d", rc);
    TB_CHECK(strstr(out, "PROVEN  g/v1/bytes\n") && strstr(out, "PROVEN  g/v1/params\n") &&
                 strstr(out, "PROVEN  g/v1/flops\n") && strstr(out, "PROVEN  g/v1/bytes_per_flop\n"),
             "the bytes per step, parameters and FLOPs of the contended run prove");
    TB_CHECK(strstr(out, "NOT PROVEN  g/v1/bytes_per_ms (contended: "), "bytes over time is timing-derived");
    TB_CHECK(strstr(out, "NOT PROVEN  g/v1/tps (contended: other processes took 66% of the cores during run q "
                         "(threshold 10%))"),
             "the verdict names the figure and the threshold");
    TB_CHECK(strstr(out, "NOT PROVEN  g/v1/bubble (contended: "), "a measured bubble is timing-derived");
    TB_CHECK(strstr(out, "NOT PROVEN  g/v1/diff (contended: "), "a relative_difference of timings is gated");
    TB_CHECK(strstr(out, "PROVEN  g/v1/mem\n") && strstr(out, "PROVEN  g/v1/theory\n"),
             "the exact claims over the same record prove");
    TB_CHECK(strstr(out, "tracebook prove: claim g/v1/tps: contended: other processes took 66%"), "stderr names it");
    free(out);
}

// /proc/stat counts in ticks of 10 ms per CPU: a run that timed 13 ms on 2 CPUs cannot say
// whether the host was quiet (its "0% other processes" is a tick's rounding), so its timing
// is not verifiable, naming the window that would be (200 ms: a tick per CPU within 5% of the
// window's core time); its exact figures still prove, and a run of 250 ms proves its timing.
TB_TEST(a_window_too_short_for_proc_stat_is_not_verifiable) {
    const char *root = fx_fresh_dir("gate_short_window");
    fx_numbers n = steady();
    n.cond.wall_s = 0.013;
    write_record(root, "q", &n);
    n.cond.wall_s = 0.25;
    write_record(root, "r1", &n);
    json_t *claims = json_array();
    add_claim(claims, root, "tps", "tokens_per_s", NULL, only_q, NULL);
    add_claim(claims, root, "bytes", "comm_bytes", "{\"group\": \"tp\", \"op\": \"all_reduce\"}", only_q, NULL);
    add_claim(claims, root, "tps_250ms", "tokens_per_s", NULL, only_r1(), NULL);
    write_claims(root, claims);
    char *out;
    int rc = fx_capture(tracebook_prove_main, &out, "prove", "--all", "--artifacts", root, NULL);
    printf("%s", out);
    TB_CHECK(rc == 1 && strstr(out, "NOT PROVEN  g/v1/tps (not verifiable: run q timed 13 ms, too short for /proc/stat "
                                    "to tell contention: its counters tick every 10 ms on each of 2 CPUs, +-77% of "
                                    "the window's core time against the 5% threshold (a window of at least 200 ms "
                                    "resolves it))"),
             "the 13 ms run's timing is not verifiable, naming the window it needs (exit %d)", rc);
    TB_CHECK(strstr(out, "PROVEN  g/v1/bytes\n") && strstr(out, "PROVEN  g/v1/tps_250ms\n"),
             "its byte count proves, and a run of 250 ms proves its timing");
    free(out);
}

// More threads than cores, but the scheduler measured how long they waited for one: a run
// whose extra thread rarely ran (a communication thread asleep between buckets) is accepted
// and says so; one whose threads waited is refused with the figure, oversubscribed or not.
TB_TEST(a_measured_wait_for_a_core_decides_an_oversubscribed_run_and_gates_any_run) {
    const char *root = fx_fresh_dir("gate_run_queue");
    static const struct {
        const char *id;
        int threads, measured;
        double share;
        const char *expect;
    } cases[] = {
        {"rare", 4, 1, 0.01, "PROVEN  g/v1/tps_rare (accepted: 4 threads on 2 cores, but no rank's threads waited "
                             "for a core more than 1% of run rare (threshold 5%, measured by the scheduler's run_delay))"},
        {"waited", 4, 1, 0.30, "NOT PROVEN  g/v1/tps_waited (oversubscribed: in run waited a rank's threads waited "
                               "for a core 30% of the run (4 threads on 2 usable cores; threshold 5%) (a claim may "
                               "declare accept_oversubscribed))"},
        {"unmeasured", 4, 0, 0, "NOT PROVEN  g/v1/tps_unmeasured (oversubscribed: run unmeasured ran 4 threads on 2 "
                                "usable cores, so its threads waited for each other, by how much not measured"},
        {"busy", 2, 1, 0.20, "NOT PROVEN  g/v1/tps_busy (contended: in run busy a rank's threads waited for a core "
                             "20% of the run (2 threads on 2 usable cores; threshold 5%))"},
        {"quiet", 2, 1, 0.04, "PROVEN  g/v1/tps_quiet\n"},
    };
    json_t *claims = json_array();
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        fx_numbers n = steady();
        n.cond.threads = cases[i].threads;
        n.cond.queue_measured = cases[i].measured;
        n.cond.queue_share = cases[i].share;
        write_record(root, cases[i].id, &n);
        char id[32];
        snprintf(id, sizeof id, "tps_%s", cases[i].id);
        const char *runs[] = {cases[i].id, NULL};
        add_claim(claims, root, id, "tokens_per_s", NULL, runs, NULL);
    }
    write_claims(root, claims);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char id[32], *out;
        snprintf(id, sizeof id, "tps_%s", cases[i].id);
        int rc = prove(root, id, &out);
        TB_CHECK(rc == (cases[i].expect[0] == 'P' ? 0 : 1) && strstr(out, cases[i].expect), "%s: exit %d",
                 cases[i].id, rc);
        if (cases[i].measured)
            TB_CHECK(strstr(out, "waited for a core ") != NULL, "%s: the measured wait in the evidence", cases[i].id);
        free(out);
    }
}

TB_TEST(an_oversubscribed_run_proves_only_when_the_claim_accepts_it) {
    const char *root = fx_fresh_dir("gate_over");
    fx_numbers n = steady();
    n.cond.threads = 8;
    write_record(root, "q", &n);
    json_t *claims = json_array();
    add_claim(claims, root, "tps", "tokens_per_s", NULL, only_q, NULL);
    add_claim(claims, root, "tps_ok", "tokens_per_s", NULL, only_q,
              "{\"accept_oversubscribed\": true, \"min_repetitions\": 1, \"min_window_s\": 0}");
    add_claim(claims, root, "bytes", "comm_bytes", "{\"group\": \"tp\"}", only_q, NULL);
    write_claims(root, claims);
    char *out;
    int rc = prove(root, "tps", &out);
    TB_CHECK(rc == 1 && strstr(out, "NOT PROVEN  g/v1/tps (oversubscribed: run q ran 8 threads on 2 usable cores"),
             "not proven: exit %d", rc);
    free(out);
    rc = prove(root, "bytes", &out);
    TB_CHECK(rc == 0 && strstr(out, "PROVEN  g/v1/bytes\n") && !strstr(out, "accepted"),
             "the same run's bytes per step prove without accepting anything: exit %d", rc);
    free(out);
    rc = prove(root, "tps_ok", &out);
    TB_CHECK(rc == 0 && strstr(out, "PROVEN  g/v1/tps_ok (accepted: oversubscribed, 8 threads on 2 cores (run q))"),
             "proven, printed with the accepted condition: exit %d", rc);
    TB_CHECK(strstr(out, "8 threads on 2 cores (oversubscribed)"), "and in the record's conditions");
    free(out);
}

// A repetition measured again (exp:run's rerun_contended_): the new record's manifest names
// the measurement it replaces, and prove accepts that only when the replaced one was measured
// contended, is the same repetition, and its conditions are as recorded.
static void write_remeasure(const char *root, const char *id, const char *replaces) {
    char rec[FX_PATH];
    fx_numbers n = steady();
    fx_write_run(fx_path(rec, sizeof rec, "%s/g/v1/%s", root, id), &n);
    fx_write_manifest(rec, "g", 1, id,
                      // the sweep point of the run it measures again
                      json_pack("{s:[{s:s, s:s}], s:{s:s}}", "supersedes", "run_id", replaces, "reason",
                                "contended: fixture", "sweep_point", "record", replaces));
}

TB_TEST(a_repetition_measured_again_replaces_only_a_contended_measurement_of_itself) {
    const char *root = fx_fresh_dir("gate_remeasure");
    fx_numbers stolen = steady(), quiet = steady(), other = steady();
    stolen.cond.steal_s = 0.2;  // 10% of 1 s on 2 cores (threshold 5%)
    other.cond.steal_s = 0.2;
    write_record(root, "stolen", &stolen);
    write_record(root, "quiet", &quiet);
    char rec[FX_PATH];
    fx_write_run(fx_path(rec, sizeof rec, "%s/g/v1/other", root), &other);
    fx_write_manifest(rec, "g", 1, "other",
                      json_pack("{s:i, s:{s:s}}", "repetition", 2, "sweep_point", "record", "other"));
    write_remeasure(root, "again", "stolen");
    write_remeasure(root, "cherry", "quiet");
    write_remeasure(root, "elsewhere", "other");
    write_remeasure(root, "nowhere", "gone");
    json_t *claims = json_array();
    static const char *const again[] = {"again", NULL}, *const cherry[] = {"cherry", NULL},
                             *const elsewhere[] = {"elsewhere", NULL}, *const nowhere[] = {"nowhere", NULL};
    add_claim(claims, root, "again", "tokens_per_s", NULL, again, NULL);
    add_claim(claims, root, "cherry", "tokens_per_s", NULL, cherry, NULL);
    add_claim(claims, root, "elsewhere", "tokens_per_s", NULL, elsewhere, NULL);
    add_claim(claims, root, "nowhere", "tokens_per_s", NULL, nowhere, NULL);
    add_claim(claims, root, "bytes", "comm_bytes", "{\"group\": \"tp\"}", cherry, NULL);
    write_claims(root, claims);
    char *out;
    int rc = prove(root, "again", &out);
    TB_CHECK(rc == 0 && strstr(out, "PROVEN  g/v1/again (accepted: run again measured its repetition again, "
                                    "replacing run stolen: contended: the hypervisor stole 10% of the cores during "
                                    "run stolen (steal 0.2 s; threshold 5%))"),
             "a measurement replaced for its steal: proven, the replaced run named: exit %d", rc);
    free(out);
    rc = prove(root, "cherry", &out);
    TB_CHECK(rc == 1 && strstr(out, "NOT PROVEN  g/v1/cherry (selected: run cherry replaces an earlier measurement "
                                    "of its repetition as contended, but the run it replaces, quiet, was not "
                                    "measured contended (within every threshold)"),
             "a quiet measurement left out is a chosen sample: exit %d", rc);
    free(out);
    rc = prove(root, "bytes", &out);
    TB_CHECK(rc == 0 && strstr(out, "PROVEN  g/v1/bytes\n"), "the same record's exact figure is not gated: exit %d",
             rc);
    free(out);
    rc = prove(root, "elsewhere", &out);
    TB_CHECK(rc == 1 && strstr(out, "(selected: run elsewhere replaces an earlier measurement of its repetition as "
                                    "contended, but the run it replaces, other, is another repetition or sweep point"),
             "a contended run of another repetition is not this one's: exit %d", rc);
    free(out);
    rc = prove(root, "nowhere", &out);
    TB_CHECK(rc == 1 && strstr(out, "(selected: run nowhere replaces an earlier measurement of its repetition as "
                                    "contended, but the record it replaces, ") &&
                 strstr(out, "/g/v1/gone, has no readable manifest"),
             "a replaced record that is gone: exit %d", rc);
    free(out);
    // the replaced run's conditions rewritten to show contention after the fact are no evidence
    fx_write_conditions(fx_path(rec, sizeof rec, "%s/g/v1/quiet", root), &(fx_conditions){.steal_s = 0.4});
    rc = prove(root, "cherry", &out);
    TB_CHECK(rc == 1 && strstr(out, "the conditions of the run it replaces, quiet, are not as recorded: file altered: "),
             "conditions altered after the run: exit %d", rc);
    free(out);
    // the replaced record is verified like every record prove reads: its manifest as anchored
    char path[FX_PATH];
    json_t *m = json_load_file(fx_path(path, sizeof path, "%s/g/v1/stolen/" TB_RECORD_MANIFEST, root), 0, NULL);
    json_object_set_new(m, "seed", json_integer(4321));
    tb_write_json_atomic(path, m, NULL);
    json_decref(m);
    rc = prove(root, "again", &out);
    TB_CHECK(rc == 1 && strstr(out, "NOT PROVEN  g/v1/again\n") &&
                 strstr(out, "the manifest of record stolen altered since it was anchored"),
             "a replaced record whose manifest changed after it was anchored: exit %d", rc);
    free(out);
}

// One step of five three times the others: a resample draws it three times or more in
// about 6% of draws, so the median's interval reaches it: too few steps to say. The warm-up
// is the claim's: with warmup_steps 4 the spike is left out.
// A repetition measured: its seed and number. A timing claim over some of a sweep point's
// repetitions (the fastest picked, say) is a selection and fails naming the one left out; over
// all it proves. A repetition measured again later (a rerun with --force) is taken at its
// latest; runs differing in seed alone are repetitions of one config, each to be claimed; runs
// of two configs in one claim are mixed. An exact claim (bytes) over some is no selection.
static void write_repetition(const char *root, const char *id, const char *point, int seed, int rep,
                             const char *start) {
    char rec[FX_PATH];
    fx_numbers n = steady();
    fx_write_run(fx_path(rec, sizeof rec, "%s/g/v1/%s", root, id), &n);
    fx_write_manifest(rec, "g", 1, id, json_pack("{s:i, s:{s:s, s:i}, s:s}", "repetition", rep, "sweep_point", "point",
                                                 point, "seed", seed, "start", start));
}

TB_TEST(a_timing_claim_over_some_repetitions_of_its_sweep_point_is_a_selection) {
    const char *root = fx_fresh_dir("gate_selection");
    static const char *const then = "2026-11-29T10:45:12Z", *const later = "2026-11-29T10:46:00Z";
    write_repetition(root, "r1", "a", 7, 1, then);
    write_repetition(root, "r2", "a", 7, 2, then);
    write_repetition(root, "r3", "a", 7, 3, then);
    write_repetition(root, "s1", "b", 1, 1, then);  // seeds 1, 2, 3: repetition 1 each
    write_repetition(root, "s2", "b", 2, 1, then);
    write_repetition(root, "s3", "b", 3, 1, then);
    write_repetition(root, "c1", "c", 7, 1, then);
    json_t *claims = json_array();
    static const char *const two[] = {"r1", "r2", NULL}, *const three[] = {"r1", "r2", "r3", NULL},
                             *const seeds_two[] = {"s1", "s2", NULL}, *const seeds[] = {"s1", "s2", "s3", NULL},
                             *const mixed[] = {"r1", "c1", NULL}, *const forced[] = {"r1", "r2", "x3", NULL};
    add_claim(claims, root, "picked", "tokens_per_s", NULL, two, NULL);
    add_claim(claims, root, "all", "tokens_per_s", NULL, three, NULL);
    add_claim(claims, root, "bytes", "comm_bytes", "{\"group\": \"tp\"}", two, NULL);
    add_claim(claims, root, "seeds_two", "tokens_per_s", NULL, seeds_two, NULL);
    add_claim(claims, root, "seeds", "tokens_per_s", NULL, seeds, NULL);
    add_claim(claims, root, "mixed", "tokens_per_s", NULL, mixed, NULL);
    write_claims(root, claims);
    static const struct {
        const char *id, *expect, *what;
    } cases[] = {
        {"picked", "NOT PROVEN  g/v1/picked (selected: the repetitions of tokens_per_s leave out run r3, the latest "
                   "measurement of repetition 3 of seed 7 of their sweep point (done, not superseded)",
         "two of three repetitions"},
        {"all", "PROVEN  g/v1/all", "every repetition"},
        {"bytes", "PROVEN  g/v1/bytes", "an exact claim over two"},
        {"seeds_two", "NOT PROVEN  g/v1/seeds_two (selected: the repetitions of tokens_per_s leave out run s3, the "
                      "latest measurement of repetition 1 of seed 3", "two of three seeds"},
        {"seeds", "PROVEN  g/v1/seeds", "every seed"},
        {"mixed", "NOT PROVEN  g/v1/mixed (mixed: the repetitions of tokens_per_s measure different configs: runs r1 "
                  "and c1 differ in point)", "two configs"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char *out;
        int rc = prove(root, cases[i].id, &out);
        TB_CHECK(rc == (cases[i].expect[0] == 'P' ? 0 : 1) && strstr(out, cases[i].expect), "%s: exit %d",
                 cases[i].what, rc);
        free(out);
    }
    // repetition 3 measured again later (tracebook run --force): the claim takes the new record
    write_repetition(root, "x3", "a", 7, 3, later);
    json_t *again = json_array();  // (write_claims took the first list)
    add_claim(again, root, "all", "tokens_per_s", NULL, three, NULL);
    add_claim(again, root, "forced", "tokens_per_s", NULL, forced, NULL);
    write_claims(root, again);
    char *out;
    int rc = prove(root, "forced", &out);
    TB_CHECK(rc == 0 && strstr(out, "PROVEN  g/v1/forced"), "the rerun's records: exit %d", rc);
    free(out);
    rc = prove(root, "all", &out);
    TB_CHECK(rc == 1 && strstr(out, "leave out run x3, the latest measurement of repetition 3 of seed 7") &&
                 strstr(out, "selected: run r3 is an earlier measurement of repetition 3 of seed 7, measured again as "
                             "run x3"),
             "the older record of a repetition measured again: exit %d", rc);
    free(out);
}

TB_TEST(a_step_three_times_the_others_is_unstable) {
    const char *root = fx_fresh_dir("gate_spike");
    fx_numbers n = steady();
    n.step_ms[0][3] = 30;  // steps 2..6: 10 10.2 30 10.1 10
    write_record(root, "q", &n);
    json_t *claims = json_array();
    add_claim(claims, root, "ms", "step_ms", NULL, only_q, NULL);
    add_claim(claims, root, "ms_after", "step_ms", "{\"warmup_steps\": 4}", only_q,
              "{\"min_repetitions\": 1, \"min_window_s\": 0, \"min_steps\": 2}");
    write_claims(root, claims);
    char *out;
    int rc = prove(root, "ms", &out);
    TB_CHECK(rc == 1 && strstr(out, "NOT PROVEN  g/v1/ms (unstable: the median step time's 95% interval over 1 "
                                    "repetition and 5 steps of step_ms is [10, 30] ms, -1.0%/+197.0% of the median "
                                    "10.1 ms, wider than the claim's timing_tolerance +-5.0%)"),
             "unstable, naming the interval: exit %d", rc);
    free(out);
    rc = prove(root, "ms_after", &out);
    TB_CHECK(rc == 0 && strstr(out, "PROVEN  g/v1/ms_after"), "after the spike: exit %d", rc);
    free(out);
}

// A quantile claim is judged on its own quantile's interval: one slow step in seven leaves the
// median throughput and the fast tail (p95: the step time's p5) steady, but not the slow tail
// (p5: the step time's p95), whose interval spans the slow step.
TB_TEST(a_quantile_is_judged_on_its_own_interval) {
    const char *root = fx_fresh_dir("gate_quantile");
    fx_numbers n = steady();
    n.nsteps = 8;
    const double ms[8] = {30, 10, 10, 10, 10, 10, 10, 30};  // step 1 the warm-up
    for (int s = 0; s < 8; s++) n.step_ms[0][s] = ms[s], n.loss[0][s] = 5 - 0.1 * s, n.act[0][s] = 70;
    write_record(root, "q", &n);
    json_t *claims = json_array();
    add_claim(claims, root, "p50", "tokens_per_s", NULL, only_q, NULL);
    add_claim(claims, root, "p95", "tokens_per_s", "{\"quantile\": 0.95}", only_q, NULL);
    add_claim(claims, root, "p5", "tokens_per_s", "{\"quantile\": 0.05}", only_q, NULL);
    write_claims(root, claims);
    char *out;
    int rc = prove(root, "p50", &out);
    TB_CHECK(rc == 0 && strstr(out, "PROVEN  g/v1/p50"), "the median is steady: exit %d", rc);
    free(out);
    rc = prove(root, "p95", &out);
    TB_CHECK(rc == 0 && strstr(out, "PROVEN  g/v1/p95") && strstr(out, "sampling: p5 step 10 ms"),
             "the fast tail is the step time's p5, steady: exit %d", rc);
    free(out);
    rc = prove(root, "p5", &out);
    TB_CHECK(rc == 1 && strstr(out, "NOT PROVEN  g/v1/p5 (unstable: the p95 step time's 95% interval over 1 "
                                    "repetition and 7 steps of tokens_per_s is [10, 30] ms"),
             "the slow tail spans the slow step: exit %d", rc);
    free(out);
}

// Three steady repetitions of 250 ms steps, one of which runs a third slower: the median's
// interval spans the slow repetition (repetitions are drawn first), wider than 5%.
static fx_numbers long_steps(double ms) {
    fx_numbers n = steady();
    for (int s = 1; s < n.nsteps; s++) n.step_ms[0][s] = ms * (1 + 0.004 * (s % 3));
    return n;
}
TB_TEST(repetitions_a_third_apart_are_unstable) {
    const char *root = fx_fresh_dir("gate_reps");
    static const char *const ids[] = {"r1", "r2", "r3", NULL};
    for (int i = 0; i < 3; i++) {
        fx_numbers n = long_steps(i == 2 ? 1000.0 / 3 : 250);
        write_record(root, ids[i], &n);
    }
    json_t *claims = json_array();
    add_claim(claims, root, "tps", "tokens_per_s", NULL, ids, RULE_DEFAULT);
    add_claim(claims, root, "tps_loose", "tokens_per_s", NULL, ids, "{\"timing_tolerance\": 0.5}");
    write_claims(root, claims);
    char *out;
    int rc = prove(root, "tps", &out);
    TB_CHECK(rc == 1 && strstr(out, "NOT PROVEN  g/v1/tps (unstable: the median step time's 95% interval over 3 "
                                    "repetitions and 15 steps of tokens_per_s is [") &&
                 strstr(out, "wider than the claim's timing_tolerance +-5.0%)"),
             "exit %d", rc);
    free(out);
    rc = prove(root, "tps_loose", &out);
    TB_CHECK(rc == 0 && strstr(out, "PROVEN  g/v1/tps_loose\n") && strstr(out, "timing_tolerance +-50.0%"),
             "the claim's own tolerance: exit %d", rc);
    TB_CHECK(strstr(out, "% of the mean") == NULL && strstr(out, "%: above 10%, pyperf would warn)"),
             "a proven claim's spread above 10%% of the mean is printed with pyperf's warning");
    free(out);
}

// The default rule (stability.h): 3 repetitions, each at least 5 steps over at least 1 s.
TB_TEST(a_timing_claim_needs_three_repetitions_of_a_second_each) {
    const char *root = fx_fresh_dir("gate_samples");
    static const char *const ids[] = {"r1", "r2", "r3", NULL}, *const two[] = {"r1", "r2", NULL};
    static const char *const shorts[] = {"s1", "s2", "s3", NULL};
    for (int i = 0; i < 3; i++) {
        fx_numbers n = long_steps(250);  // 5 timed steps of ~250 ms: 1.25 s
        write_record(root, ids[i], &n);
        fx_numbers m = steady();  // 5 timed steps of ~10 ms: 0.05 s
        write_record(root, shorts[i], &m);
    }
    json_t *claims = json_array();
    add_claim(claims, root, "tps", "tokens_per_s", NULL, ids, RULE_DEFAULT);
    add_claim(claims, root, "tps_two", "tokens_per_s", NULL, two, RULE_DEFAULT);
    add_claim(claims, root, "tps_short", "tokens_per_s", NULL, shorts, RULE_DEFAULT);
    add_claim(claims, root, "tps_six", "tokens_per_s", NULL, ids, "{\"min_steps\": 6}");
    add_claim(claims, root, "tps_bad", "tokens_per_s", NULL, ids, "{\"min_repetitions\": 2.5}");
    add_claim(claims, root, "mem", "peak_memory_bytes", NULL, only_r1(), RULE_DEFAULT);
    write_claims(root, claims);
    static const struct {
        const char *id, *expect, *what;
    } cases[] = {
        {"tps", "PROVEN  g/v1/tps\n", "three repetitions of 1.25 s"},
        {"tps_two", "NOT PROVEN  g/v1/tps_two (undersampled: 2 repetitions of tokens_per_s; a timing claim needs at "
                    "least 3, each a separate process (the claim's min_repetitions))", "two repetitions"},
        {"tps_short", "NOT PROVEN  g/v1/tps_short (undersampled: run s1 timed 5 steps over 0.0502 s after the warm-up "
                      "(a repetition must time at least 5 steps over at least 1 s", "windows of 50 ms"},
        {"tps_six", "(undersampled: run r1 timed 5 steps over 1.26 s after the warm-up (a repetition must time at "
                    "least 6 steps", "the claim's min_steps"},
        {"tps_bad", "min_repetitions must be an integer in [1, 1000] (got 2.5)", "a malformed rule, named with its value"},
        {"mem", "PROVEN  g/v1/mem\n", "an exact claim needs no samples"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char *out;
        int rc = prove(root, cases[i].id, &out);
        TB_CHECK(rc == (cases[i].expect[0] == 'P' ? 0 : 1) && strstr(out, cases[i].expect), "%s: exit %d",
                 cases[i].what, rc);
        if (!strcmp(cases[i].id, "tps"))
            TB_CHECK(strstr(out, "15 steps over 3 repetitions"), "the sample counts in the evidence");
        free(out);
    }
}

// Sets a record's manifest start and end (ISO 8601 UTC) to minute 0, seconds [from, to).
static void set_window(const char *root, const char *id, int from, int to) {
    char path[FX_PATH], start[32], end[32];
    fx_path(path, sizeof path, "%s/g/v1/%s/" TB_RECORD_MANIFEST, root, id);
    json_t *m = json_load_file(path, 0, NULL);
    snprintf(start, sizeof start, "2026-11-29T10:00:%02dZ", from);
    snprintf(end, sizeof end, "2026-11-29T10:00:%02dZ", to);
    json_object_set_new(m, "start", json_string(start));
    json_object_set_new(m, "end", json_string(end));
    tb_write_json_atomic(path, m, NULL);
    json_decref(m);
    fx_anchor_record(fx_path(path, sizeof path, "%s/g/v1/%s", root, id));  // as the recorder wrote them
}

// Two configurations whose every process ran at the host's speed of the moment: repetition i
// of both is k_i times as slow (k = 1, 1.4, 0.7, a drift of the host), b always twice a's
// steps. Each side's interval holds that drift (unstable at +-5%); run in pairs, one right
// after the other, the ratio of each pair is 2, and the paired interval of step times holds only
// the steps' own 0.4% jitter: [0.498, 0.502]. Run one configuration's three, then the other's, no pair shares
// its drift and the sides are judged each on its own.
TB_TEST(a_ratio_of_paired_repetitions_is_judged_over_the_pairs) {
    const char *root = fx_fresh_dir("gate_pairs");
    static const char *const as[] = {"a1", "a2", "a3", NULL}, *const bs[] = {"b1", "b2", "b3", NULL};
    static const char *const all[] = {"a1", "a2", "a3", "b1", "b2", "b3", NULL};
    const double k[3] = {1, 1.4, 0.7};
    for (int i = 0; i < 3; i++) {
        fx_numbers a = long_steps(300 * k[i]), b = long_steps(600 * k[i]);
        write_record(root, as[i], &a);
        write_record(root, bs[i], &b);
    }
    const char *ratio = "{\"numerator\": {\"parser\": \"tokens_per_s\", \"records\": [\"a1\", \"a2\", \"a3\"]}, "
                        "\"denominator\": {\"parser\": \"tokens_per_s\", \"records\": [\"b1\", \"b2\", \"b3\"]}}";
    json_t *claims = json_array();
    add_claim(claims, root, "speedup", "ratio", ratio, all, RULE_DEFAULT);
    write_claims(root, claims);
    // a1 b1 a2 b2 a3 b3, two seconds each
    for (int i = 0; i < 3; i++) {
        set_window(root, as[i], 4 * i, 4 * i + 2);
        set_window(root, bs[i], 4 * i + 2, 4 * i + 4);
    }
    char *out;
    int rc = prove(root, "speedup", &out);
    TB_CHECK(rc == 0 && strstr(out, "PROVEN  g/v1/speedup") &&
                 strstr(out, "sampling: paired: 3 pairs of repetitions run one after the other; numerator / "
                             "denominator median step time 0.5, 95% interval [0.498, 0.502] (-0.4%/+0.4%"),
             "interleaved: exit %d", rc);
    TB_CHECK(strstr(out, "unstable") == NULL, "the sides' own intervals are not the verdict");
    free(out);
    // a1 a2 a3 b1 b2 b3
    for (int i = 0; i < 3; i++) {
        set_window(root, as[i], 2 * i, 2 * i + 2);
        set_window(root, bs[i], 6 + 2 * i, 8 + 2 * i);
    }
    rc = prove(root, "speedup", &out);
    TB_CHECK(rc == 1 && strstr(out, "NOT PROVEN  g/v1/speedup (unstable: the median step time's 95% interval over 3 "
                                    "repetitions") && !strstr(out, "paired:"),
             "one configuration after the other: exit %d", rc);
    free(out);
}

TB_TEST(a_record_without_conditions_is_not_verifiable) {
    const char *root = fx_fresh_dir("gate_none");
    fx_numbers n = steady();
    n.no_conditions = 1;
    write_record(root, "q", &n);
    json_t *claims = json_array();
    add_claim(claims, root, "tps", "tokens_per_s", NULL, only_q, NULL);
    add_claim(claims, root, "mem", "peak_memory_bytes", NULL, only_q, NULL);
    // a ratio is gated by its timed parts
    add_claim(claims, root, "ratio", "ratio",
              "{\"numerator\": {\"parser\": \"peak_memory_bytes\"}, \"denominator\": {\"parser\": \"step_ms\"}}",
              only_q, NULL);
    write_claims(root, claims);
    char *out;
    int rc = fx_capture(tracebook_prove_main, &out, "prove", "--all", "--artifacts", root, NULL);
    printf("%s", out);
    char want[FX_PATH + 256];
    snprintf(want, sizeof want,
             "NOT PROVEN  g/v1/tps (not verifiable: %s/g/v1/q has no conditions.json, so whether its timings were "
             "contended is unknown)",
             root);
    TB_CHECK(rc == 1 && strstr(out, want), "want '%s'", want);
    TB_CHECK(strstr(out, "NOT PROVEN  g/v1/ratio (not verifiable: "), "the ratio's step_ms part is gated");
    TB_CHECK(strstr(out, "PROVEN  g/v1/mem\n"), "the byte count proves");
    free(out);

    // a conditions.json added after the manifest is no evidence: a file the manifest does not
    // list fails the record before the gate would read it
    char rec[FX_PATH];
    fx_write_conditions(fx_path(rec, sizeof rec, "%s/g/v1/q", root), &(fx_conditions){0});
    rc = prove(root, "tps", &out);
    TB_CHECK(rc == 1 && strstr(out, "NOT PROVEN  g/v1/tps\n") &&
                 strstr(out, "unlisted file (not in the manifest, so nothing vouches for it): ") &&
                 strstr(out, "/g/v1/q/run/conditions.json"),
             "unlisted conditions: exit %d", rc);
    free(out);
}

// Timings compared across runs must come from runs that occupied the same number of cores:
// one thread against two on a 2-core host measures the thread counts, not the layouts.
TB_TEST(a_ratio_of_runs_on_unequal_thread_counts_is_not_proven) {
    const char *root = fx_fresh_dir("gate_unequal");
    fx_numbers one = steady(), two = steady(), eight = steady();
    one.cond.threads = 1;
    two.cond.threads = 2;
    eight.cond.threads = 8;  // 8 threads on 2 cores occupy both, like two
    write_record(root, "one", &one);
    write_record(root, "two", &two);
    write_record(root, "eight", &eight);
    static const char *const runs[] = {"one", "two", "eight", NULL};
    json_t *claims = json_array();
    add_claim(claims, root, "unequal", "ratio",
              "{\"numerator\": {\"parser\": \"tokens_per_s\", \"records\": [\"two\"]},"
              " \"denominator\": {\"parser\": \"tokens_per_s\", \"records\": [\"one\"]}}",
              runs, NULL);
    add_claim(claims, root, "equal", "ratio",
              "{\"numerator\": {\"parser\": \"tokens_per_s\", \"records\": [\"eight\"]},"
              " \"denominator\": {\"parser\": \"tokens_per_s\", \"records\": [\"two\"]}}",
              runs, "{\"accept_oversubscribed\": true, \"min_repetitions\": 1, \"min_window_s\": 0}");
    write_claims(root, claims);
    char *out;
    int rc = prove(root, "unequal", &out);
    TB_CHECK(rc == 1 && strstr(out, "NOT PROVEN  g/v1/unequal (unequal threads: run one ran its 1 thread on 1 of 2 "
                                    "usable cores, run two on 2"),
             "unequal thread counts: exit %d", rc);
    free(out);
    rc = prove(root, "equal", &out);
    TB_CHECK(rc == 0 && strstr(out, "PROVEN  g/v1/equal"), "8 and 2 threads both occupy the 2 cores: exit %d", rc);
    free(out);
}

// A real tp 2 run beside two busy loops (bounded: each ends itself after 20 s).
TB_TEST(a_real_run_beside_busy_loops_proves_its_bytes_but_not_its_speed) {
    const char *root = fx_fresh_dir("gate_e2e");
    char rec[FX_PATH];
    fx_path(rec, sizeof rec, "%s/g/v1/busy", root);
    pid_t busy[2];
    for (int i = 0; i < 2; i++) {
        busy[i] = fork();
        if (busy[i] == 0) {
            alarm(20);
            for (volatile unsigned long x = 0;; x++) {
            }
        }
    }
    usleep(500 * 1000);
    json_t *argv = NULL;
    int status = fx_engine_run(rec, "--train-iters 40 --world-size 2 --tensor-model-parallel-size 2", &argv);
    for (int i = 0; i < 2; i++)
        if (busy[i] > 0) {
            kill(busy[i], SIGKILL);
            waitpid(busy[i], NULL, 0);
        }
    TB_REQUIRE(status == 0, "engine run beside busy loops: %d", status);
    fx_write_manifest(rec, "g", 1, "busy", json_pack("{s:o}", "argv", argv));
    static const char *const ids[] = {"busy", NULL};
    json_t *claims = json_array();
    add_claim(claims, root, "tps", "tokens_per_s", NULL, ids, NULL);
    add_claim(claims, root, "mem", "peak_memory_bytes", NULL, ids, NULL);
    add_claim(claims, root, "bytes", "comm_bytes", "{\"group\": \"tp\", \"op\": \"all_reduce\"}", ids, NULL);
    write_claims(root, claims);
    char *out;
    int rc = fx_capture(tracebook_prove_main, &out, "prove", "--all", "--artifacts", root, NULL);
    printf("%s", out);
    TB_CHECK(rc == 1 && strstr(out, "NOT PROVEN  g/v1/tps (") && strstr(out, "contended: other processes took "),
             "the contended run's speed is not proven: exit %d", rc);
    TB_CHECK(strstr(out, "PROVEN  g/v1/mem\n"), "its byte count is");
    TB_CHECK(strstr(out, "PROVEN  g/v1/bytes\n") && strstr(out, "comm.tp.all_reduce calls inside train_step") &&
                 !strstr(out, "with 0 calls"),
             "and so are the bytes its tp ranks all-reduce per step");
    free(out);
}

int main(void) {
    TB_RUN(a_timing_claim_over_quiet_steady_runs_is_proven_with_its_conditions);
    TB_RUN(a_contended_run_does_not_prove_its_timing_but_proves_its_byte_count);
    TB_RUN(a_window_too_short_for_proc_stat_is_not_verifiable);
    TB_RUN(an_oversubscribed_run_proves_only_when_the_claim_accepts_it);
    TB_RUN(a_repetition_measured_again_replaces_only_a_contended_measurement_of_itself);
    TB_RUN(a_measured_wait_for_a_core_decides_an_oversubscribed_run_and_gates_any_run);
    TB_RUN(a_timing_claim_over_some_repetitions_of_its_sweep_point_is_a_selection);
    TB_RUN(a_step_three_times_the_others_is_unstable);
    TB_RUN(a_quantile_is_judged_on_its_own_interval);
    TB_RUN(repetitions_a_third_apart_are_unstable);
    TB_RUN(a_timing_claim_needs_three_repetitions_of_a_second_each);
    TB_RUN(a_ratio_of_paired_repetitions_is_judged_over_the_pairs);
    TB_RUN(a_record_without_conditions_is_not_verifiable);
    TB_RUN(a_ratio_of_runs_on_unequal_thread_counts_is_not_proven);
    TB_RUN(a_real_run_beside_busy_loops_proves_its_bytes_but_not_its_speed);
    return tb_test_summary();
}
