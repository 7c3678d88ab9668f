// test_prove.c — `tracebook prove` on engine records: proven when untouched; not proven,
// naming the claim, the file and the reason, when a file is altered or deleted or the value
// is wrong; and fast over a thousand records. (The claim parsers on known numbers:
// test_claim_parsers.c.)

#include <math.h>
#include <sqlite3.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "prove/prove.h"
#include "records/catalog.h"
#include "runs/catalog_cli.h"
#include "fixtures/record_fixture.h"
#include "prove/parsers.h"
#include "tb_run_dir.h"
#include "prove/prove_records.h"
#include "tb_test.h"

// ---------------------------------------------------------------------------------------
// prove on engine records

// px v1: r0..r2 (repetitions 1..3), r3 (hidden 64); claims tps, loss, act, speedup made
// with the parsers, as a runbook makes them. Returns the artifacts root (static).
static const char *prove_fixture(const char *name) {
    static char root[FX_PATH];
    snprintf(root, sizeof root, "%s", fx_fresh_dir(name));
    char rec[4][FX_PATH];
    for (int i = 0; i < 4; i++) {
        json_t *argv = NULL;
        char id[16];
        snprintf(id, sizeof id, "r%d", i);
        fx_path(rec[i], sizeof rec[i], "%s/px/v1/%s", root, id);
        if (fx_engine_run(rec[i], i == 3 ? "--hidden-size 64" : "", &argv) != 0) printf("  engine run failed\n");
        fx_steady_run(rec[i], i == 3 ? 20.0 : 10.0);  // these tests are about re-derivation, not the gate
        // r0..r2 repetitions of one sweep point, r3 another
        fx_write_manifest(rec[i], "px", 1, id,
                          json_pack("{s:o, s:i, s:o}", "argv", argv, "repetition", i < 3 ? i + 1 : 1, "sweep_point",
                                    i == 3 ? json_pack("{s:i}", "hidden_size", 64) : json_object()));
    }
    const char *reps[] = {rec[0], rec[1], rec[2], rec[3]};
    static const struct {
        const char *id, *parser, *args, *text;
        int nruns;
    } claims[] = {
        {"tps", "tokens_per_s", "{\"warmup_steps\": 1}", "the small GPT trains at {value} tok/s", 3},
        {"loss", "loss_at_step", "{}", "loss after 3 steps is {value}", 3},
        {"act", "peak_memory_bytes", "{\"category\": \"activations\"}", "activations peak at {value} bytes", 3},
        {"speedup", "ratio",
         "{\"numerator\": {\"parser\": \"tokens_per_s\", \"records\": [0, 1, 2]},"
         " \"denominator\": {\"parser\": \"tokens_per_s\", \"records\": [\"r3\"]}}",
         "hidden 32 is {value}x faster than hidden 64", 4},
    };
    json_t *list = json_array();
    for (size_t c = 0; c < sizeof claims / sizeof *claims; c++) {
        json_t *args = json_loads(claims[c].args, 0, NULL);
        double v;
        tb_error err;
        if (tb_parse_claim(claims[c].parser, args, reps, claims[c].nruns, &v, NULL, &err) != 0)
            printf("  fixture claim %s: %s\n", claims[c].id, err.msg);
        json_t *runs = json_array();
        for (int i = 0; i < claims[c].nruns; i++) json_array_append_new(runs, json_sprintf("r%d", i));
        json_array_append_new(list, fx_claim_short_runs(json_pack("{s:s, s:s, s:f, s:s, s:o, s:o, s:f}", "id",
                                                                  claims[c].id, "text", claims[c].text, "value", v,
                                                                  "parser", claims[c].parser, "args", args, "runs",
                                                                  runs, "relative_tolerance", 1e-9)));
    }
    json_t *file = json_pack("{s:s, s:i, s:o}", "experiment", "px", "version", 1, "claims", list);
    char path[FX_PATH];
    fx_write_claims(fx_path(path, sizeof path, "%s/px/v1/" TB_EXPERIMENT_CLAIMS, root), file);
    json_decref(file);
    return root;
}

TB_TEST(prove_proves_untouched_records_and_prints_the_evidence) {
    const char *root = prove_fixture("prove_ok");
    char *out;
    int rc = fx_capture(tracebook_prove_main, &out, "prove", "--all", "--artifacts", root, NULL);
    printf("%s", out);
    TB_CHECK(rc == 0, "exit %d", rc);
    TB_CHECK(strstr(out, "PROVEN  px/v1/tps") && strstr(out, "PROVEN  px/v1/loss") && strstr(out, "PROVEN  px/v1/act") &&
                 strstr(out, "PROVEN  px/v1/speedup"),
             "four claims proven");
    TB_CHECK(strstr(out, "\"the small GPT trains at ") && strstr(out, " tok/s\""), "the claim text with its value");
    TB_CHECK(strstr(out, "global batch 4 = micro batch 4 x microbatches 1 x dp 1 (64 tokens per step)"),
             "the global batch formula");
    TB_CHECK(strstr(out, "command: ") && strstr(out, "pretrain_gpt --num-layers 2 --hidden-size 32"), "the command");
    TB_CHECK(strstr(out, "parser tokens_per_s {\"warmup_steps\":1}") && strstr(out, "definition: per record"),
             "parser and definition");
    TB_CHECK(strstr(out, "3 records (repetitions): min "), "repetitions with min/median/max");
    TB_CHECK(strstr(out, "/px/v1/r1/run/metrics.rank-00000.jsonl"), "raw file paths");
    TB_CHECK(strstr(out, "commit 4f3c2b1a0d9e8f7a6b5c4d3e2f1a0b9c8d7e6f5a (branch main, clean)"), "commit and dirty flag");
    TB_CHECK(strstr(out, "prove: 4 claims, 4 proven, 0 not proven; 4 records verified"), "summary line");
    free(out);
    sqlite3 *db;
    tb_error err;
    TB_REQUIRE(tb_catalog_open(&db, root, &err) == 0, "%s", err.msg);
    sqlite3_stmt *st;
    sqlite3_prepare_v2(db,
                       "SELECT count(*) FROM claims WHERE proven_at IS NOT NULL"
                       " AND abs(proven_value - value) <= 1e-9 * abs(value)",
                       -1, &st, NULL);
    sqlite3_step(st);
    TB_CHECK(sqlite3_column_int(st, 0) == 4, "proven_at / proven_value recorded: %d", sqlite3_column_int(st, 0));
    sqlite3_finalize(st);
    sqlite3_close(db);

    rc = fx_capture(tracebook_prove_main, &out, "prove", "loss", "--quiet", "--artifacts", root, NULL);
    TB_CHECK(rc == 0 && strstr(out, "PROVEN  px/v1/loss") && !strstr(out, "px/v1/tps"), "one claim by id: %s", out);
    free(out);
    rc = fx_capture(tracebook_prove_main, &out, "prove", "nope", "--artifacts", root, NULL);
    TB_CHECK(rc == 1 && strstr(out, "claim 'nope' not found"), "an unknown claim: %s", out);
    free(out);
    rc = fx_capture(tracebook_prove_main, &out, "prove", "--artifacts", root, NULL);
    TB_CHECK(rc == 2, "no claim and no --all is a usage error");
    free(out);
    // the claim as the verdicts name it, and --version
    const char *names[] = {"px/v1/loss", "px/loss"};
    for (int i = 0; i < 2; i++) {
        rc = fx_capture(tracebook_prove_main, &out, "prove", names[i], "--quiet", "--artifacts", root, NULL);
        TB_CHECK(rc == 0 && strstr(out, "PROVEN  px/v1/loss") && strstr(out, "1 claim, 1 proven"), "%s: %s", names[i],
                 out);
        free(out);
    }
    rc = fx_capture(tracebook_prove_main, &out, "prove", "--all", "--version", "1", "--quiet", "--artifacts", root,
                    NULL);
    TB_CHECK(rc == 0 && strstr(out, "4 claims, 4 proven"), "--version 1: %s", out);
    free(out);
    rc = fx_capture(tracebook_prove_main, &out, "prove", "px/v2/loss", "--artifacts", root, NULL);
    TB_CHECK(rc == 1 && strstr(out, "no version v2 of px in "), "a version that is not there: %s", out);
    free(out);
    const struct {
        const char *arg, *want;
    } bad[] = {{"px/2/loss", "'2' is not a version (vN, N from 1)"},
               {"px/v0/loss", "'v0' is not a version"},
               {"px/v1/loss/x", "more than EXPERIMENT/vN/ID"},
               {"/loss", "EXPERIMENT/ID with both named"},
               {"px/", "EXPERIMENT/ID with both named"}};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        rc = fx_capture(tracebook_prove_main, &out, "prove", bad[i].arg, "--artifacts", root, NULL);
        TB_CHECK(rc == 2 && strstr(out, bad[i].want), "%s: exit %d, want '%s': %s", bad[i].arg, rc, bad[i].want, out);
        free(out);
    }
    rc = fx_capture(tracebook_prove_main, &out, "prove", "px/v1/loss", "--experiment", "qx", "--artifacts", root, NULL);
    TB_CHECK(rc == 2 && strstr(out, "CLAIM 'px/v1/loss' names experiment px, --experiment qx"), "a conflict: %s", out);
    free(out);
    rc = fx_capture(tracebook_prove_main, &out, "prove", "px/v1/loss", "--version", "2", "--artifacts", root, NULL);
    TB_CHECK(rc == 2 && strstr(out, "CLAIM 'px/v1/loss' names version 1, --version 2"), "a conflict: %s", out);
    free(out);
}

// The evidence names each record's repetition 1..N; a record of manifest_version 1 (0-based
// on disk) is printed 1-based too.
TB_TEST(prove_evidence_numbers_repetitions_from_one) {
    const char *root = prove_fixture("prove_reps");
    char *out;
    int rc = fx_capture(tracebook_prove_main, &out, "prove", "tps", "--artifacts", root, NULL);
    TB_CHECK(rc == 0 && strstr(out, "run r0  repetition 1  value ") && strstr(out, "run r1  repetition 2  value ") &&
                 strstr(out, "run r2  repetition 3  value ") && !strstr(out, "repetition 0"),
             "repetitions 1, 2, 3:\n%s", out);
    free(out);
    // r2 as a version-1 tracebook wrote it: repetition 2 counted from 0 is the third
    char rec[FX_PATH];
    json_t *argv = NULL;
    fx_path(rec, sizeof rec, "%s/px/v1/r2", root);
    json_t *old = json_load_file(fx_path((char[FX_PATH]){0}, FX_PATH, "%s/" TB_RECORD_MANIFEST, rec), 0, NULL);
    argv = json_incref(json_object_get(old, "argv"));
    json_decref(old);
    fx_write_manifest(rec, "px", 1, "r2", json_pack("{s:o, s:i, s:i}", "argv", argv, "manifest_version", 1,
                                                    "repetition", 2));
    rc = fx_capture(tracebook_prove_main, &out, "prove", "tps", "--artifacts", root, NULL);
    TB_CHECK(rc == 0 && strstr(out, "run r2  repetition 3  value "), "a version-1 record, 1-based:\n%s", out);
    free(out);
}

// A real tp 2 run: the bytes each rank all-reduces over tp per step are what Megatron's
// tensor parallelism must move for this model — per microbatch, forward: the embedding's
// and, per layer, the attention's and the MLP's row-parallel outputs; backward: per layer
// the two column-parallel inputs' gradients and the output layer's; each B x T x C floats;
// and the vocab-parallel cross-entropy's max, sum and target logit, B x T floats each.
// Editing that trace unproves the claim, naming the file.
TB_TEST(prove_comm_bytes_and_rank_figures_of_an_engine_record) {
    const char *root = fx_fresh_dir("prove_comm");
    char rec[FX_PATH];
    json_t *argv = NULL;
    fx_path(rec, sizeof rec, "%s/cx/v1/tp2", root);
    TB_REQUIRE(fx_engine_run(rec, "--world-size 2 --tensor-model-parallel-size 2 --micro-batch-size 2 "
                                  "--global-batch-size 4", &argv) == 0,
               "engine run");
    fx_write_manifest(rec, "cx", 1, "tp2", json_pack("{s:o}", "argv", argv));
    const long long L = 2, B = 2, T = 16, C = 32, M = 2;  // fx_engine_run's model, M = 4 / 2 microbatches
    const double want = (double)M * (B * T * C * 4 * (1 + 2 * L + 2 * L + 1) + 3 * B * T * 4);
    const char *dirs[] = {rec};
    json_t *args = json_loads("{\"group\": \"tp\", \"op\": \"all_reduce\"}", 0, NULL);
    double bytes = 0, params = 0;
    tb_error err;
    TB_REQUIRE(tb_parse_claim("comm_bytes", args, dirs, 1, &bytes, NULL, &err) == 0, "%s", err.msg);
    TB_CHECK(bytes == want, "tp all-reduce bytes per rank per step %.0f, want %.0f", bytes, want);
    json_t *figure = json_loads("{\"figure\": \"parameters\"}", 0, NULL);
    TB_REQUIRE(tb_parse_claim("rank_figure", figure, dirs, 1, &params, NULL, &err) == 0, "%s", err.msg);
    TB_CHECK(params > 0, "parameters per rank %.0f", params);
    json_t *claims = json_pack("[{s:s, s:s, s:f, s:s, s:O, s:[s]}, {s:s, s:s, s:f, s:s, s:O, s:[s]}]", "id", "bytes",
                               "text", "tp all-reduce bytes per rank per step", "value", bytes, "parser", "comm_bytes",
                               "args", args, "runs", "tp2", "id", "params", "text", "parameters per rank", "value",
                               params, "parser", "rank_figure", "args", figure, "runs", "tp2");
    json_t *file = json_pack("{s:s, s:i, s:o}", "experiment", "cx", "version", 1, "claims", claims);
    char path[FX_PATH];
    fx_write_claims(fx_path(path, sizeof path, "%s/cx/v1/" TB_EXPERIMENT_CLAIMS, root), file);
    json_decref(file);
    char *out;
    int rc = fx_capture(tracebook_prove_main, &out, "prove", "--all", "--artifacts", root, NULL);
    printf("%s", out);
    TB_CHECK(rc == 0 && strstr(out, "PROVEN  cx/v1/bytes\n") && strstr(out, "PROVEN  cx/v1/params\n"),
             "both exact claims prove (no conditions asked): exit %d", rc);
    TB_CHECK(strstr(out, "comm.tp.all_reduce calls inside train_step: the busiest of 2 ranks") &&
                 strstr(out, "run/trace.rank-00001.json"),
             "the evidence says where the bytes were read");
    free(out);

    // one call of rank 1's last step, edited: the parser follows the file, and prove refuses it
    char *text = fx_read(tb_record_rank_path(path, sizeof path, rec, TB_RANK_TRACE, 1));
    json_t *trace = json_loads(text, 0, NULL);
    free(text);
    json_t *events = json_object_get(trace, "traceEvents"), *last = NULL;
    size_t i;
    json_t *e;
    json_array_foreach(events, i, e) {
        const char *g = json_string_value(json_object_get(json_object_get(e, "args"), "group"));
        if (g && !strcmp(g, "tp")) last = e;
    }
    TB_REQUIRE(last, "a tp call in rank 1's trace");
    json_t *a = json_object_get(last, "args");
    json_object_set_new(a, "bytes", json_integer(json_integer_value(json_object_get(a, "bytes")) + 4096));
    tb_write_json_atomic(path, trace, NULL);
    json_decref(trace);
    double edited = 0;
    TB_CHECK(tb_parse_claim("comm_bytes", args, dirs, 1, &edited, NULL, &err) == 0 && edited == want + 4096,
             "the edited trace gives %.0f, want %.0f", edited, want + 4096);
    rc = fx_capture(tracebook_prove_main, &out, "prove", "bytes", "--artifacts", root, NULL);
    printf("%s", out);
    TB_CHECK(rc == 1 && strstr(out, "NOT PROVEN  cx/v1/bytes") && strstr(out, "file altered: ") &&
                 strstr(out, "trace.rank-00001.json"),
             "the altered trace is named: exit %d", rc);
    free(out);
    json_decref(args);
    json_decref(figure);
}

TB_TEST(prove_fails_naming_the_file_when_a_metric_line_is_edited) {
    const char *root = prove_fixture("prove_edit");
    char path[FX_PATH];
    char rec[FX_PATH];
    tb_record_rank_path(path, sizeof path, fx_path(rec, sizeof rec, "%s/px/v1/r1", root), TB_RANK_METRICS, 0);
    char hex[65];
    tb_sha256_file(path, hex, NULL);
    char *text = fx_read(path);
    char *ms = strstr(strchr(text, '\n'), "\"step_ms\":") + 10;  // line 2's step time
    *ms = *ms == '9' ? '1' : (char)(*ms + 1);
    fx_write_text(path, text);
    free(text);
    char now[65];
    tb_sha256_file(path, now, NULL);
    char *out;
    int rc = fx_capture(tracebook_prove_main, &out, "prove", "--all", "--artifacts", root, NULL);
    printf("%s", out);
    TB_CHECK(rc == 1, "exit %d", rc);
    char want[FX_PATH * 2];
    snprintf(want, sizeof want, "tracebook prove: claim px/v1/tps: file altered: %s: sha256 expected %s, actual %s", path,
             hex, now);
    TB_CHECK(strstr(out, want), "names claim, file, expected and actual hash: want '%s'", want);
    TB_CHECK(strstr(out, "NOT PROVEN  px/v1/speedup"), "every claim using r1 fails");
    TB_CHECK(strstr(out, "0 proven, 4 not proven"), "summary");
    // what a claim rests on, though no parser read it: its text and its runs' records
    TB_CHECK(strstr(out, "\"the small GPT trains at ") && strstr(out, "not derived") &&
                 strstr(out, "runs (records):") && strstr(out, "/px/v1/r1\n"),
             "the failed claims' text and records");
    free(out);
}

TB_TEST(prove_fails_naming_a_deleted_file) {
    const char *root = prove_fixture("prove_delete");
    char path[FX_PATH];
    remove(fx_path(path, sizeof path, "%s/px/v1/r2/" TB_RECORD_RUN_DIR "/" TB_RUN_PIPELINE, root));
    char *out;
    int rc = fx_capture(tracebook_prove_main, &out, "prove", "act", "--artifacts", root, NULL);
    printf("%s", out);
    char want[FX_PATH * 2];
    snprintf(want, sizeof want, "tracebook prove: claim px/v1/act: file missing: %s (manifest sha256 ", path);
    TB_CHECK(rc == 1 && strstr(out, want), "exit %d; want '%s'", rc, want);
    free(out);
    remove(fx_path(path, sizeof path, "%s/px/v1/r0/" TB_RECORD_MANIFEST, root));
    rc = fx_capture(tracebook_prove_main, &out, "prove", "loss", "--artifacts", root, NULL);
    TB_CHECK(rc == 1 && strstr(out, "record incomplete: ") && strstr(out, "/px/v1/r0/manifest.json missing"),
             "a record without manifest: %s", out);
    free(out);
}

TB_TEST(prove_fails_when_the_claimed_value_is_wrong) {
    const char *root = prove_fixture("prove_value");
    char path[FX_PATH];
    fx_path(path, sizeof path, "%s/px/v1/" TB_EXPERIMENT_CLAIMS, root);
    json_t *file = json_load_file(path, 0, NULL);
    json_t *claim = json_array_get(json_object_get(file, "claims"), 0);  // tps
    json_object_set_new(claim, "value", json_real(json_real_value(json_object_get(claim, "value")) * 1.01));
    fx_write_claims(path, file);
    json_decref(file);
    file = json_load_file(path, 0, NULL);  // the claimed value as written (12 digits)
    double claimed = json_real_value(json_object_get(json_array_get(json_object_get(file, "claims"), 0), "value"));
    json_decref(file);
    char dirs_store[3][FX_PATH];
    const char *dirs[3];
    for (int i = 0; i < 3; i++) dirs[i] = fx_path(dirs_store[i], sizeof dirs_store[i], "%s/px/v1/r%d", root, i);
    double truth;
    tb_error perr;
    TB_REQUIRE(tb_parse_claim("tokens_per_s", NULL, dirs, 3, &truth, NULL, &perr) == 0, "%s", perr.msg);
    char *out;
    int rc = fx_capture(tracebook_prove_main, &out, "prove", "--all", "--artifacts", root, NULL);
    printf("%s", out);
    char want[512];
    snprintf(want, sizeof want, "claim px/v1/tps: value does not re-derive: claimed %.17g, derived %.17g", claimed,
             truth);
    TB_CHECK(rc == 1 && strstr(out, want), "exit %d; want '%s'", rc, want);
    TB_CHECK(strstr(out, "PROVEN  px/v1/loss") && strstr(out, "3 proven, 1 not proven"), "the others still prove");
    // the evidence of the claim that did not prove, as a proven one prints it
    const char *failed = strstr(out, "NOT PROVEN  px/v1/tps");
    TB_CHECK(failed && strstr(failed, "relative difference") && strstr(failed, "command: ") &&
                 strstr(failed, "parser tokens_per_s") && strstr(failed, "/px/v1/r1/run/metrics.rank-00000.jsonl"),
             "NOT PROVEN prints the figures, the command, the parser and the files");
    free(out);
    sqlite3 *db;
    tb_error err;
    TB_REQUIRE(tb_catalog_open(&db, root, &err) == 0, "%s", err.msg);
    sqlite3_stmt *st;
    sqlite3_prepare_v2(db, "SELECT proven_at IS NULL, proven_value FROM claims WHERE id = 'tps'", -1, &st, NULL);
    TB_CHECK(sqlite3_step(st) == SQLITE_ROW && sqlite3_column_int(st, 0) == 1 && sqlite3_column_double(st, 1) == truth,
             "the catalogue: not proven, with the derived value");
    sqlite3_finalize(st);
    sqlite3_close(db);
}

// prove reads only what the manifest vouches for (the adversarial drill's forgeries): a file
// in a record its manifest does not list is a failure, not a warning; a manifest that lists
// nothing proves nothing, even with its claim edited to the forged number; a file a parser
// reads must be listed.
static void manifest_files_edit(const char *root, const char *id, const char *drop, int clear) {
    char path[FX_PATH];
    fx_path(path, sizeof path, "%s/px/v1/%s/" TB_RECORD_MANIFEST, root, id);
    json_t *m = json_load_file(path, 0, NULL);
    json_t *files = json_object_get(m, "files");
    if (clear) json_object_clear(files);
    if (drop) json_object_del(files, drop);
    tb_write_json_atomic(path, m, NULL);
    json_decref(m);
}

TB_TEST(prove_reads_only_what_the_manifest_vouches_for) {
    const char *root = prove_fixture("prove_unlisted");
    char path[FX_PATH], want[FX_PATH + 128];
    char *out;
    // an extra file in run/: an extra rank's metrics, say
    fx_write_text(fx_path(path, sizeof path, "%s/px/v1/r0/" TB_RECORD_RUN_DIR "/metrics.rank-00001.jsonl", root),
                  "{\"step\": 1, \"loss\": 1.5}\n");
    int rc = fx_capture(tracebook_prove_main, &out, "prove", "act", "--artifacts", root, NULL);
    snprintf(want, sizeof want, "unlisted file (not in the manifest, so nothing vouches for it): %s", path);
    TB_CHECK(rc == 1 && strstr(out, "NOT PROVEN  px/v1/act") && strstr(out, want), "an unlisted file: exit %d\n%s", rc,
             out);
    free(out);
    remove(path);
    // the drill's forgery: files emptied, one loss edited and the claim with it
    manifest_files_edit(root, "r1", NULL, 1);
    rc = fx_capture(tracebook_prove_main, &out, "prove", "loss", "--artifacts", root, NULL);
    snprintf(want, sizeof want, "manifest lists no files: %s/px/v1/r1/" TB_RECORD_MANIFEST, root);
    TB_CHECK(rc == 1 && strstr(out, "NOT PROVEN  px/v1/loss") && strstr(out, want), "an empty manifest: exit %d\n%s", rc,
             out);
    free(out);
    // one listed file dropped from the manifest: the parser would read it unvouched
    manifest_files_edit(root, "r2", "run/metrics.rank-00000.jsonl", 0);
    rc = fx_capture(tracebook_prove_main, &out, "prove", "tps", "--artifacts", root, NULL);
    snprintf(want, sizeof want, "%s/px/v1/r2/" TB_RECORD_RUN_DIR "/metrics.rank-00000.jsonl", root);
    TB_CHECK(rc == 1 && strstr(out, "NOT PROVEN  px/v1/tps") && strstr(out, "unlisted file") && strstr(out, want),
             "a file dropped from the manifest: exit %d\n%s", rc, out);
    free(out);
    // and every claim over that record, a ratio's part among them
    rc = fx_capture(tracebook_prove_main, &out, "prove", "speedup", "--artifacts", root, NULL);
    TB_CHECK(rc == 1 && strstr(out, "NOT PROVEN  px/v1/speedup"), "a ratio over it: exit %d", rc);
    free(out);
}

TB_TEST(a_parser_that_reads_an_unlisted_file_does_not_prove) {
    json_t *ev = json_pack("{s:s, s:[{s:s, s:[s, s]}]}", "parser", "x", "records", "record_dir", "/nonexistent/rec",
                           "files", "/nonexistent/rec/run/config.json", "/elsewhere/config.json");
    check_table t = {0};
    strbuf failures = {0};
    check_read_files(&t, ev, &failures, 0);
    TB_CHECK(failures.s && strstr(failures.s, "record missing: /nonexistent/rec") &&
                 strstr(failures.s, "read but not in the manifest: /nonexistent/rec/run/config.json") &&
                 strstr(failures.s, "read outside its record: /elsewhere/config.json"),
             "%s", failures.s ? failures.s : "(nothing)");
    free(failures.s);
    check_table_free(&t);
    json_decref(ev);
}

// Appends a claim (JSON text) to px/v1/claims.json of a prove fixture.
static void add_claim(const char *root, const char *claim_json) {
    char path[FX_PATH];
    fx_path(path, sizeof path, "%s/px/v1/" TB_EXPERIMENT_CLAIMS, root);
    json_t *file = json_load_file(path, 0, NULL);
    json_array_append_new(json_object_get(file, "claims"), fx_claim_short_runs(json_loads(claim_json, 0, NULL)));
    fx_write_claims(path, file);
    json_decref(file);
}

// r1 (treatment) and r0 (baseline) run the same config: the same losses, bit for bit.
#define SAME_LOSS_CLAIM                                                                                        \
    "{\"id\": \"same_loss\", \"text\": \"r1 trains as r0\", \"parser\": \"relative_difference\", \"at_most\": 0," \
    " \"args\": {\"a\": {\"parser\": \"loss_at_step\", \"records\": [\"r1\"]},"                                 \
    " \"b\": {\"parser\": \"loss_at_step\", \"records\": [\"r0\"]}}, \"runs\": [\"r0\", \"r1\"]}"

// The baseline of a comparison is read from its record at prove time, not taken from the
// claim: editing the baseline's metrics file (and nothing else) unproves the claim.
TB_TEST(prove_relative_difference_reads_the_baseline_from_its_record) {
    const char *root = prove_fixture("prove_compare");
    add_claim(root, SAME_LOSS_CLAIM);
    char *out;
    int rc = fx_capture(tracebook_prove_main, &out, "prove", "same_loss", "--artifacts", root, NULL);
    printf("%s", out);
    TB_CHECK(rc == 0 && strstr(out, "PROVEN  px/v1/same_loss") && strstr(out, "derived 0 <= bound 0 (at_most)") &&
                 strstr(out, "a: parser loss_at_step") && strstr(out, "b: parser loss_at_step") &&
                 strstr(out, "/px/v1/r0/run/metrics.rank-00000.jsonl"),
             "proven, with both parts' evidence: exit %d", rc);
    free(out);
    // the baseline's last loss, edited
    char rec[FX_PATH], path[FX_PATH];
    tb_record_rank_path(path, sizeof path, fx_path(rec, sizeof rec, "%s/px/v1/r0", root), TB_RANK_METRICS, 0);
    char *text = fx_read(path);
    size_t len = strlen(text);
    char *last = text + (len > 1 ? len - 2 : 0);  // the last line starts after the newline before it
    while (last > text && last[-1] != '\n') last--;
    char *loss = strstr(last, "\"loss\":");
    TB_REQUIRE(loss, "a loss on the last line of %s", path);
    loss += 7;
    *loss = *loss == '9' ? '1' : (char)(*loss + 1);
    fx_write_text(path, text);
    free(text);
    rc = fx_capture(tracebook_prove_main, &out, "prove", "same_loss", "--artifacts", root, NULL);
    char want[FX_PATH + 128];
    snprintf(want, sizeof want, "tracebook prove: claim px/v1/same_loss: file altered: %s: sha256 expected ", path);
    TB_CHECK(rc == 1 && strstr(out, "NOT PROVEN  px/v1/same_loss") && strstr(out, want), "exit %d; want '%s':\n%s",
             rc, want, out);
    free(out);
    // with the manifest rewritten to the edited file, the hashes hold: the number does not
    json_t *m = json_load_file(fx_path(path, sizeof path, "%s/" TB_RECORD_MANIFEST, rec), 0, NULL);
    json_t *argv = json_incref(json_object_get(m, "argv"));
    json_decref(m);
    fx_write_manifest(rec, "px", 1, "r0", json_pack("{s:o, s:i}", "argv", argv, "repetition", 1));
    rc = fx_capture(tracebook_prove_main, &out, "prove", "same_loss", "--artifacts", root, NULL);
    TB_CHECK(rc == 1 && strstr(out, "NOT PROVEN  px/v1/same_loss") && strstr(out, " > bound 0 (at_most)") &&
                 !strstr(out, "file altered"),
             "the rehashed baseline derives a non-zero difference: exit %d\n%s", rc, out);
    free(out);
}

// A run listed twice in a claim (or in one part of it) is one run, not two repetitions: the
// claim fails naming it, where the same claim over two distinct runs proves.
TB_TEST(prove_refuses_a_run_listed_twice) {
    const char *root = prove_fixture("prove_twice");
    add_claim(root, "{\"id\": \"twice\", \"parser\": \"loss_at_step\", \"at_most\": 1e9, \"args\": {},"
                    " \"runs\": [\"r0\", \"r0\"]}");
    add_claim(root, "{\"id\": \"distinct\", \"parser\": \"loss_at_step\", \"at_most\": 1e9, \"args\": {},"
                    " \"runs\": [\"r0\", \"r1\"]}");
    add_claim(root, "{\"id\": \"part_twice\", \"parser\": \"ratio\", \"at_most\": 1e9, \"runs\": [\"r0\", \"r3\"],"
                    " \"args\": {\"numerator\": {\"parser\": \"tokens_per_s\", \"records\": [\"r0\", \"r0\"]},"
                    " \"denominator\": {\"parser\": \"tokens_per_s\", \"records\": [\"r3\"]}}}");
    char *out;
    int rc = fx_capture(tracebook_prove_main, &out, "prove", "--experiment", "px", "--artifacts", root, NULL);
    TB_CHECK(rc == 1 && strstr(out, "PROVEN  px/v1/distinct") && strstr(out, "NOT PROVEN  px/v1/twice") &&
                 strstr(out, "NOT PROVEN  px/v1/part_twice") && strstr(out, "/px/v1/r0 (records 1 and 2 of one part"),
             "exit %d:\n%s", rc, out);
    free(out);
}

// claims.json names the experiment and version it lies in: one that names another (the
// file anchored as it is) fails as a whole, and its claims are not printed under that name.
TB_TEST(prove_refuses_a_claims_file_naming_another_experiment) {
    const char *root = prove_fixture("prove_misnamed");
    char path[FX_PATH];
    fx_path(path, sizeof path, "%s/px/v1/" TB_EXPERIMENT_CLAIMS, root);
    json_t *file = json_load_file(path, 0, NULL);
    json_object_set_new(file, "experiment", json_string("tp_scaling"));
    fx_write_claims(path, file);
    json_decref(file);
    char *out;
    int rc = fx_capture(tracebook_prove_main, &out, "prove", "--all", "--artifacts", root, NULL);
    TB_CHECK(rc == 1 && strstr(out, "NOT PROVEN  px/v1 (claims.json)") &&
                 strstr(out, "names experiment \"tp_scaling\" version 1, but lies in px/v1") &&
                 !strstr(out, "tp_scaling/v1"),
             "exit %d:\n%s", rc, out);
    free(out);
}

// A FIFO can serve the hash one copy and the parser another: prove reads only regular files,
// refusing a FIFO by name (and without blocking on it), in a record and as claims.json.
TB_TEST(prove_refuses_a_fifo_in_place_of_a_record_file_or_claims_json) {
    const char *root = prove_fixture("prove_fifo");
    char path[FX_PATH];
    fx_path(path, sizeof path, "%s/px/v1/r0/" TB_RECORD_RUN_DIR "/" TB_RUN_CONDITIONS, root);
    TB_REQUIRE(unlink(path) == 0 && mkfifo(path, 0644) == 0, "a FIFO at %s", path);
    char *out;
    int rc = fx_capture(tracebook_prove_main, &out, "prove", "loss", "--artifacts", root, NULL);
    char want[FX_PATH + 64];
    snprintf(want, sizeof want, "%s: is a FIFO (named pipe), not a regular file", path);
    TB_CHECK(rc == 1 && strstr(out, "NOT PROVEN  px/v1/loss") && strstr(out, want), "exit %d; want '%s':\n%s", rc,
             want, out);
    free(out);
    fx_path(path, sizeof path, "%s/px/v1/" TB_EXPERIMENT_CLAIMS, root);
    TB_REQUIRE(unlink(path) == 0 && mkfifo(path, 0644) == 0, "a FIFO at %s", path);
    rc = fx_capture(tracebook_prove_main, &out, "prove", "--all", "--artifacts", root, NULL);
    snprintf(want, sizeof want, "%s: is a FIFO (named pipe), not a regular file", path);
    TB_CHECK(rc == 1 && strstr(out, want) && !strstr(out, "PROVEN  px/v1/"), "exit %d; want '%s':\n%s", rc, want,
             out);
    free(out);
}

// A file's stamp (record_verify.h) changes with any rewrite, the same bytes written again
// included, and with a rename over it: what prove compares after reading what it hashed.
TB_TEST(a_file_stamp_changes_with_any_rewrite_or_rename) {
    const char *dir = fx_fresh_dir("stamps");
    char a[FX_PATH], b[FX_PATH], hex[65];
    fx_path(a, sizeof a, "%s/a.json", dir);
    fx_path(b, sizeof b, "%s/b.json", dir);
    fx_write_text(a, "{\"x\": 1}\n");
    fx_write_text(b, "{\"x\": 1}\n");
    tb_file_stamp st;
    tb_error err;
    TB_REQUIRE(tb_sha256_regular(a, hex, &st, &err) == 0, "%s", err.msg);
    TB_CHECK(tb_file_unchanged(a, &st, &err) == 0, "untouched: %s", err.msg);
    const struct timespec tick = {0, 50 * 1000 * 1000};  // beyond the kernel's coarse clock tick
    nanosleep(&tick, NULL);
    fx_write_text(a, "{\"x\": 1}\n");  // the same bytes again
    TB_CHECK(tb_file_unchanged(a, &st, &err) != 0 && strstr(err.msg, "changed while it was read"),
             "rewritten with the same bytes: %s", err.msg);
    TB_REQUIRE(tb_sha256_regular(a, hex, &st, &err) == 0, "%s", err.msg);
    TB_REQUIRE(rename(b, a) == 0, "rename");
    TB_CHECK(tb_file_unchanged(a, &st, &err) != 0 && strstr(err.msg, "another file is at its path"),
             "replaced by a rename: %s", err.msg);
}

// check_unchanged: a file of a verified record rewritten after its hash was taken (the same
// bytes again, after the kernel's clock ticked) is named, as a parser may have read other bytes.
TB_TEST(a_record_file_rewritten_after_its_hash_fails_the_claim) {
    const char *root = prove_fixture("prove_unchanged");
    char dir[FX_PATH], path[FX_PATH];
    fx_path(dir, sizeof dir, "%s/px/v1/r0", root);
    check_table t = {0};
    record_check *c = verify_record(&t, dir);
    TB_REQUIRE(c && c->nstamps > 2, "files stamped: %zu", c ? c->nstamps : 0);
    char *const dirs[] = {dir};
    strbuf failures = {0};
    check_unchanged(&t, dirs, 1, NULL, &failures);
    TB_CHECK(failures.len == 0, "untouched: %s", failures.s ? failures.s : "");
    const struct timespec tick = {0, 50 * 1000 * 1000};
    nanosleep(&tick, NULL);
    fx_path(path, sizeof path, "%s/" TB_RECORD_RUN_DIR "/" TB_RUN_CONDITIONS, dir);
    char *text = fx_read(path);
    fx_write_text(path, text);
    free(text);
    check_unchanged(&t, dirs, 1, NULL, &failures);
    char want[FX_PATH + 64];
    snprintf(want, sizeof want, "%s: changed while it was read", path);
    TB_CHECK(failures.s && strstr(failures.s, want), "want '%s', got: %s", want, failures.s ? failures.s : "(nothing)");
    free(failures.s);
    check_table_free(&t);
}

// at_most: PROVEN iff the re-derived number is <= the bound; above it, both numbers are named.
// A claim has exactly one of value and at_most, and a bound >= 0.
TB_TEST(prove_at_most_bounds_the_derived_number) {
    const char *root = prove_fixture("prove_at_most");
    char dirs_store[4][FX_PATH];
    const char *dirs[4];
    for (int i = 0; i < 4; i++) dirs[i] = fx_path(dirs_store[i], sizeof dirs_store[i], "%s/px/v1/r%d", root, i);
    // step 1's loss against step 3's of the same record: a difference well above 0
    const char *args_text = "{\"a\": {\"parser\": \"loss_at_step\", \"args\": {\"step\": 1}},"
                            " \"b\": {\"parser\": \"loss_at_step\", \"args\": {\"step\": 3}}}";
    json_t *args = json_loads(args_text, 0, NULL);
    double truth;
    tb_error err;
    TB_REQUIRE(tb_parse_claim("relative_difference", args, dirs, 1, &truth, NULL, &err) == 0, "%s", err.msg);
    TB_REQUIRE(truth > 1e-3, "step 1 and step 3 losses differ: %g", truth);
    json_decref(args);
    char claim[2048];
    snprintf(claim, sizeof claim,
             "{\"id\": \"above\", \"text\": \"t\", \"parser\": \"relative_difference\", \"at_most\": %.17g,"
             " \"args\": %s, \"runs\": [\"r0\"]}",
             truth / 2, args_text);
    add_claim(root, claim);
    snprintf(claim, sizeof claim,
             "{\"id\": \"within\", \"text\": \"t\", \"parser\": \"relative_difference\", \"at_most\": %.17g,"
             " \"args\": %s, \"runs\": [\"r0\"]}",
             truth, args_text);
    add_claim(root, claim);
    add_claim(root, "{\"id\": \"both\", \"text\": \"t\", \"parser\": \"loss_at_step\", \"value\": 1,"
                    " \"at_most\": 1, \"runs\": [\"r0\"]}");
    add_claim(root, "{\"id\": \"negative\", \"text\": \"t\", \"parser\": \"loss_at_step\", \"at_most\": -1,"
                    " \"runs\": [\"r0\"]}");
    add_claim(root, "{\"id\": \"text_bound\", \"text\": \"t\", \"parser\": \"loss_at_step\","
                    " \"at_most\": \"1\", \"runs\": [\"r0\"]}");
    add_claim(root, "{\"id\": \"neither\", \"text\": \"t\", \"parser\": \"loss_at_step\", \"runs\": [\"r0\"]}");
    char *out;
    int rc = fx_capture(tracebook_prove_main, &out, "prove", "--all", "--artifacts", root, NULL);
    printf("%s", out);
    char want[512];
    snprintf(want, sizeof want, "claim px/v1/above: derived %.17g > bound %.17g (at_most) with parser relative_difference",
             truth, truth / 2);
    TB_CHECK(rc == 1 && strstr(out, want), "above the bound, naming both numbers: want '%s'", want);
    snprintf(want, sizeof want, "derived %.10g <= bound %.10g (at_most)", truth, truth);
    TB_CHECK(strstr(out, "PROVEN  px/v1/within") && strstr(out, want), "at the bound: proven ('%s')", want);
    TB_CHECK(strstr(out, "claim px/v1/both: claims[6] is malformed: has both value and at_most"), "both");
    TB_CHECK(strstr(out, "claim px/v1/negative: claims[7] is malformed: at_most must be a number >= 0 (got -1)"),
             "a negative bound");
    TB_CHECK(strstr(out, "claim px/v1/text_bound: claims[8] is malformed: at_most must be a number >= 0 (got \"1\")"),
             "a bound that is no number");
    TB_CHECK(strstr(out, "claim px/v1/neither: claims[9] is malformed: needs value (number) or at_most"), "neither");
    TB_CHECK(strstr(out, "10 claims, 5 proven, 5 not proven"), "the others still prove");
    free(out);
}

// ---------------------------------------------------------------------------------------
// A thousand records

static double seconds_since(const struct timespec *t0) {
    struct timespec t1;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    return (double)(t1.tv_sec - t0->tv_sec) + (double)(t1.tv_nsec - t0->tv_nsec) / 1e9;
}

static double cpu_seconds(void) {
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

TB_TEST(prove_all_over_a_thousand_records_scales_linearly) {
    enum { EXPERIMENTS = 10, RUNS = 100, PER_CLAIM = 10 };
    const char *root = fx_fresh_dir("prove_1000");
    // one real engine run, copied into every record
    char src[FX_PATH], path[FX_PATH];
    fx_path(src, sizeof src, "%s/source", root);
    TB_REQUIRE(fx_engine_run(src, NULL, NULL) == 0, "engine run");
    fx_steady_run(src, 10.0);  // the timing claims (step_ms, tokens_per_s) must pass the stability gate
    enum { NFILES = 8 };
    char files[NFILES][64] = {TB_RECORD_RUN_DIR "/" TB_RUN_CONFIG, "", TB_RECORD_RUN_DIR "/" TB_RUN_PIPELINE, "", "",
                              TB_RECORD_STDOUT, TB_RECORD_STDERR, TB_RECORD_RUN_DIR "/" TB_RUN_CONDITIONS};
    tb_rank_path(files[1], sizeof files[1], TB_RECORD_RUN_DIR, TB_RANK_METRICS, 0);
    tb_rank_path(files[3], sizeof files[3], TB_RECORD_RUN_DIR, TB_RANK_MEMORY, 0);
    tb_rank_path(files[4], sizeof files[4], TB_RECORD_RUN_DIR, TB_RANK_TRACE, 0);
    char *content[NFILES];
    for (int f = 0; f < NFILES; f++) content[f] = fx_read(fx_path(path, sizeof path, "%s/%s", src, files[f]));
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int e = 0; e < EXPERIMENTS; e++) {
        json_t *claims = json_array();
        for (int r = 0; r < RUNS; r++) {
            char rec[FX_PATH], id[32];
            snprintf(id, sizeof id, "20261129T1045%02d-%08x", r % 60, (unsigned)(e * RUNS + r));
            fx_path(rec, sizeof rec, "%s/bulk%02d/v1/%s", root, e, id);
            tb_mkdir_p(fx_path(path, sizeof path, "%s/" TB_RECORD_RUN_DIR, rec), NULL);
            for (int f = 0; f < NFILES; f++) fx_write_text(fx_path(path, sizeof path, "%s/%s", rec, files[f]), content[f]);
            fx_write_manifest(rec, fx_path(path, sizeof path, "bulk%02d", e), 1, id,
                              json_pack("{s:i, s:{s:i}}", "repetition", r % PER_CLAIM + 1, "sweep_point", "claim",
                                        r / PER_CLAIM));  // each claim's ten runs: one point
        }
        // a claim over each ten runs, the parsers in turn
        static const char *const parsers[] = {"tokens_per_s", "step_ms", "loss_at_step", "peak_memory_bytes"};
        char version_dir[FX_PATH];
        fx_path(version_dir, sizeof version_dir, "%s/bulk%02d/v1", root, e);
        for (int c = 0; c < RUNS / PER_CLAIM; c++) {
            const char *dirs[PER_CLAIM];
            char dir_store[PER_CLAIM][FX_PATH];
            json_t *runs = json_array();
            for (int k = 0; k < PER_CLAIM; k++) {
                int r = c * PER_CLAIM + k;
                char id[32];
                snprintf(id, sizeof id, "20261129T1045%02d-%08x", r % 60, (unsigned)(e * RUNS + r));
                json_array_append_new(runs, json_string(id));
                dirs[k] = fx_path(dir_store[k], sizeof dir_store[k], "%s/%s", version_dir, id);
            }
            const char *parser = parsers[c % 4];
            double v = 0;
            tb_error err;
            if (tb_parse_claim(parser, NULL, dirs, PER_CLAIM, &v, NULL, &err) != 0) printf("  %s\n", err.msg);
            char id[16];
            snprintf(id, sizeof id, "c%d", c);
            json_array_append_new(claims, fx_claim_short_runs(json_pack("{s:s, s:f, s:s, s:o, s:f}", "id", id,
                                                                        "value", v, "parser", parser, "runs", runs,
                                                                        "relative_tolerance", 1e-9)));
        }
        json_t *file = json_pack("{s:s, s:i, s:o}", "experiment", fx_path(path, sizeof path, "bulk%02d", e),
                                 "version", 1, "claims", claims);
        fx_write_claims(fx_path(path, sizeof path, "%s/" TB_EXPERIMENT_CLAIMS, version_dir), file);
        json_decref(file);
    }
    for (int f = 0; f < NFILES; f++) free(content[f]);
    fx_rm_rf(src);
    printf("  generated %d records in %.2f s\n", EXPERIMENTS * RUNS, seconds_since(&t0));

    // The cost is judged as CPU time (this process's; the machine's load does not stretch it
    // as it stretches wall time) and as a ratio: 1000 records cost about ten times 100
    // records (one experiment of the ten), not a hundred times (re-reading records or files
    // per claim). Best of two runs each; the ratio's bound, 40, is generous and still fails
    // a quadratic prove. No absolute bound: wall figures are printed, not asserted.
    char *out;
    int rc = 0;
    double one_cpu = 1e30, all_cpu = 1e30, quiet = 0;
    for (int rep = 0; rep < 2; rep++) {
        double c0 = cpu_seconds();
        rc = fx_capture(tracebook_prove_main, &out, "prove", "--experiment", "bulk00", "--quiet", "--artifacts", root,
                        NULL);
        double c = cpu_seconds() - c0;
        one_cpu = c < one_cpu ? c : one_cpu;
        TB_CHECK(rc == 0 && strstr(out, "prove: 10 claims, 10 proven, 0 not proven; 100 records verified"),
                 "one experiment: exit %d: %s", rc, out);
        free(out);
        clock_gettime(CLOCK_MONOTONIC, &t0);
        c0 = cpu_seconds();
        rc = fx_capture(tracebook_prove_main, &out, "prove", "--all", "--quiet", "--artifacts", root, NULL);
        c = cpu_seconds() - c0;
        quiet = seconds_since(&t0);
        all_cpu = c < all_cpu ? c : all_cpu;
        char *summary = strstr(out, "prove: ");
        TB_CHECK(rc == 0 && summary &&
                     strstr(summary, "prove: 100 claims, 100 proven, 0 not proven; 1000 records verified"),
                 "exit %d: %s", rc, summary ? summary : out);
        free(out);
    }
    clock_gettime(CLOCK_MONOTONIC, &t0);
    rc = fx_capture(tracebook_prove_main, &out, "prove", "--all", "--artifacts", root, NULL);
    double full = seconds_since(&t0);
    TB_CHECK(rc == 0, "exit %d (with evidence)", rc);
    size_t bytes = strlen(out);
    free(out);
    clock_gettime(CLOCK_MONOTONIC, &t0);
    rc = fx_capture(tracebook_ls_main, &out, "ls", "--artifacts", root, NULL);
    double ls_first = seconds_since(&t0);
    TB_CHECK(rc == 0 && strstr(out, "bulk09") && strstr(out, "   100       100"), "ls: %s", out);
    free(out);
    clock_gettime(CLOCK_MONOTONIC, &t0);
    rc = fx_capture(tracebook_ls_main, &out, "ls", "--experiment", "bulk03", "--artifacts", root, NULL);
    double ls_again = seconds_since(&t0);
    free(out);
    printf("  prove --all over 1000 records, 100 claims: %.3f s quiet, %.3f s with evidence (%zu bytes), wall\n", quiet,
           full, bytes);
    printf("  CPU: %.3f s for 100 records (--experiment bulk00), %.3f s for 1000 (--all): x%.1f\n", one_cpu, all_cpu,
           all_cpu / (one_cpu > 1e-4 ? one_cpu : 1e-4));
    printf("  ls: %.3f s cataloguing 1000 records, %.3f s when they are catalogued\n", ls_first, ls_again);
    TB_CHECK(all_cpu < 40 * (one_cpu > 0.005 ? one_cpu : 0.005),
             "prove's cost grows about linearly with the records: 1000 records took %.3f s of CPU, 100 took %.3f s "
             "(x%.1f; bound x40)",
             all_cpu, one_cpu, all_cpu / (one_cpu > 1e-4 ? one_cpu : 1e-4));
}

int main(void) {
    TB_RUN(prove_proves_untouched_records_and_prints_the_evidence);
    TB_RUN(prove_evidence_numbers_repetitions_from_one);
    TB_RUN(prove_comm_bytes_and_rank_figures_of_an_engine_record);
    TB_RUN(prove_fails_naming_the_file_when_a_metric_line_is_edited);
    TB_RUN(prove_fails_naming_a_deleted_file);
    TB_RUN(prove_fails_when_the_claimed_value_is_wrong);
    TB_RUN(prove_reads_only_what_the_manifest_vouches_for);
    TB_RUN(a_parser_that_reads_an_unlisted_file_does_not_prove);
    TB_RUN(prove_relative_difference_reads_the_baseline_from_its_record);
    TB_RUN(prove_refuses_a_run_listed_twice);
    TB_RUN(prove_refuses_a_claims_file_naming_another_experiment);
    TB_RUN(prove_refuses_a_fifo_in_place_of_a_record_file_or_claims_json);
    TB_RUN(a_file_stamp_changes_with_any_rewrite_or_rename);
    TB_RUN(a_record_file_rewritten_after_its_hash_fails_the_claim);
    TB_RUN(prove_at_most_bounds_the_derived_number);
    TB_RUN(prove_all_over_a_thousand_records_scales_linearly);
    return tb_test_summary();
}
