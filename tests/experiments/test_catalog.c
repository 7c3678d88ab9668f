// test_catalog.c — the catalogue (experiments/records/catalog.h) and `tracebook ls | show | diff`,
// over records made by the real engine and over records with known numbers.
#include <signal.h>
#include <sqlite3.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>

#include "records/catalog.h"
#include "runs/catalog_cli.h"
#include "fixtures/record_fixture.h"
#include "prove/parsers.h"
#include "tb_run_dir.h"
#include "tb_test.h"

static long long query_int(sqlite3 *db, const char *sql) {
    sqlite3_stmt *st;
    long long v = -1;
    if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) == SQLITE_OK && sqlite3_step(st) == SQLITE_ROW)
        v = sqlite3_column_int64(st, 0);
    else printf("  query failed: %s: %s\n", sql, sqlite3_errmsg(db));
    sqlite3_finalize(st);
    return v;
}

static char *query_text(sqlite3 *db, const char *sql) {
    sqlite3_stmt *st;
    char *v = NULL;
    if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) == SQLITE_OK && sqlite3_step(st) == SQLITE_ROW)
        v = strdup(sqlite3_column_text(st, 0) ? (const char *)sqlite3_column_text(st, 0) : "(null)");
    sqlite3_finalize(st);
    return v ? v : strdup("(no row)");
}

// Two engine records of experiment "cat" v1: run-a (hidden 32, tp 2 over 2 ranks) and
// run-b (hidden 64, one rank, dirty tree). Returns the artifacts root (static).
static const char *engine_records(const char *name) {
    static char root[FX_PATH];
    snprintf(root, sizeof root, "%s", fx_fresh_dir(name));
    char rec[FX_PATH];
    json_t *argv = NULL;
    int rc = fx_engine_run(fx_path(rec, sizeof rec, "%s/cat/v1/run-a", root),
                           "--world-size 2 --tensor-model-parallel-size 2", &argv);
    if (rc != 0) printf("  engine run failed: %s\n", fx_read(fx_path(rec, sizeof rec, "%s/cat/v1/run-a/stderr.log", root)));
    fx_write_manifest(fx_path(rec, sizeof rec, "%s/cat/v1/run-a", root), "cat", 1, "run-a",
                      json_pack("{s:o, s:{s:i}, s:i}", "argv", argv, "sweep_point", "tensor_model_parallel_size", 2,
                                "repetition", 1));
    rc = fx_engine_run(fx_path(rec, sizeof rec, "%s/cat/v1/run-b", root), "--hidden-size 64", &argv);
    if (rc != 0) printf("  engine run failed\n");
    fx_write_manifest(fx_path(rec, sizeof rec, "%s/cat/v1/run-b", root), "cat", 1, "run-b",
                      json_pack("{s:o, s:{s:s, s:s, s:b, s:[s]}, s:s}", "argv", argv, "git", "commit",
                                "aaaabbbbccccddddeeeeffff0000111122223333", "branch", "exp", "dirty", 1, "changed",
                                "engine/training.c", "start", "2026-11-29T10:46:00Z"));
    return root;
}

TB_TEST(catalog_open_creates_the_schema_in_wal_mode) {
    const char *root = fx_fresh_dir("open");
    char sub[FX_PATH];
    fx_path(sub, sizeof sub, "%s/nested/artifacts", root);
    sqlite3 *db;
    tb_error err;
    TB_REQUIRE(tb_catalog_open(&db, sub, &err) == 0, "open: %s", err.msg);
    char *mode = query_text(db, "PRAGMA journal_mode");
    TB_CHECK(!strcmp(mode, "wal"), "journal_mode %s", mode);
    free(mode);
    TB_CHECK(query_int(db, "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name IN "
                           "('experiments', 'runs', 'metrics', 'claims', 'anchors', 'anchor_heads')") == 6,
             "the six tables exist");
    sqlite3_close(db);
    TB_REQUIRE(tb_catalog_open(&db, sub, &err) == 0, "reopen: %s", err.msg);
    sqlite3_exec(db, "UPDATE meta SET value = '99' WHERE key = 'schema_version'", NULL, NULL, NULL);
    sqlite3_close(db);
    // ... and not to be deleted: its anchors are not derived from the records
    TB_CHECK(tb_catalog_open(&db, sub, &err) != 0 && strstr(err.msg, "schema version 99") &&
                 strstr(err.msg, "use the tracebook that wrote it") && strstr(err.msg, "loses its anchors"),
             "a foreign schema version is refused, saying what to do: %s", err.msg);
}

TB_TEST(add_run_catalogues_the_manifest_and_every_ranks_metrics) {
    const char *root = engine_records("add_run");
    sqlite3 *db;
    tb_error err;
    TB_REQUIRE(tb_catalog_open(&db, root, &err) == 0, "open: %s", err.msg);
    char rec[FX_PATH];
    TB_REQUIRE(tb_catalog_add_run(db, fx_path(rec, sizeof rec, "%s/cat/v1/run-a", root), &err) == 0, "add: %s",
               err.msg);
    TB_CHECK(query_int(db, "SELECT count(*) FROM metrics WHERE run_id = 'run-a'") == 6, "2 ranks x 3 steps");
    TB_CHECK(query_int(db, "SELECT count(DISTINCT rank) FROM metrics WHERE run_id = 'run-a'") == 2, "both ranks");
    TB_CHECK(query_int(db, "SELECT count(*) FROM metrics WHERE run_id = 'run-a' AND step_ms > 0 AND loss > 0 AND "
                           "mem_total_peak_bytes > 0 AND tokens_per_s > 0") == 6,
             "step_ms, loss, tokens_per_s and memory are read");
    char *status = query_text(db, "SELECT status || ' ' || experiment || ' v' || version || ' ' || \"commit\" || "
                                  "' ' || dirty || ' ' || sweep_point || ' ' || repetition FROM runs");
    TB_CHECK(!strcmp(status, "finished cat v1 4f3c2b1a0d9e8f7a6b5c4d3e2f1a0b9c8d7e6f5a 0 "
                             "{\"tensor_model_parallel_size\":2} 1"),
             "runs row: %s", status);
    free(status);
    TB_CHECK(query_int(db, "SELECT json_extract(config, '$.hidden_size') FROM runs WHERE run_id = 'run-a'") == 32,
             "config as JSON text");
    TB_CHECK(query_int(db, "SELECT count(*) FROM experiments WHERE name = 'cat' AND version = 1 AND "
                           "question = 'does the fixture hold?' AND runbook_path = 'runbooks/fixture.lua'") == 1,
             "experiments row");
    // idempotent
    TB_REQUIRE(tb_catalog_add_run(db, rec, &err) == 0, "add again: %s", err.msg);
    TB_CHECK(query_int(db, "SELECT count(*) FROM metrics") == 6 && query_int(db, "SELECT count(*) FROM runs") == 1,
             "adding twice changes nothing");
    sqlite3_close(db);
}

TB_TEST(add_run_reports_a_malformed_metrics_line_and_keeps_the_old_rows) {
    const char *root = engine_records("malformed");
    sqlite3 *db;
    tb_error err;
    TB_REQUIRE(tb_catalog_open(&db, root, &err) == 0, "open: %s", err.msg);
    char rec[FX_PATH], path[FX_PATH];
    fx_path(rec, sizeof rec, "%s/cat/v1/run-b", root);
    TB_REQUIRE(tb_catalog_add_run(db, rec, &err) == 0, "add: %s", err.msg);
    char *metrics = fx_read(tb_record_rank_path(path, sizeof path, rec, TB_RANK_METRICS, 0));
    char *second = strchr(metrics, '\n') + 1;
    second[5] = '#';  // line 2 no longer parses
    fx_write_text(path, metrics);
    free(metrics);
    TB_CHECK(tb_catalog_add_run(db, rec, &err) != 0 && strstr(err.msg, "metrics.rank-00000.jsonl:2:"),
             "the error names file and line: %s", err.msg);
    TB_CHECK(query_int(db, "SELECT count(*) FROM metrics WHERE run_id = 'run-b'") == 3,
             "the catalogued rows are untouched");
    sqlite3_close(db);
}

// A run that diverged writes NaN as "NaN" (core/json_number.h); the catalogue keeps it as
// NaN — not NULL, which would read as "absent" — and show prints it; no line is lost.
TB_TEST(a_diverged_run_is_catalogued_and_shown_with_its_nan_losses) {
    const char *root = fx_fresh_dir("nan");
    char rec[FX_PATH];
    json_t *argv = NULL;
    fx_path(rec, sizeof rec, "%s/cat/v1/run-nan", root);
    int rc = fx_engine_run(rec, "--lr 1e300 --no-check-for-nan-in-loss-and-grad", &argv);
    TB_REQUIRE(rc == 0, "engine run failed (exit %d)", rc);
    fx_write_manifest(rec, "cat", 1, "run-nan", json_pack("{s:o}", "argv", argv));
    sqlite3 *db;
    tb_error err;
    TB_REQUIRE(tb_catalog_open(&db, root, &err) == 0, "open: %s", err.msg);
    TB_REQUIRE(tb_catalog_add_run(db, rec, &err) == 0, "add: %s", err.msg);
    TB_CHECK(query_int(db, "SELECT count(*) FROM metrics WHERE run_id = 'run-nan'") == 3, "every step catalogued");
    TB_CHECK(query_int(db, "SELECT count(*) FROM metrics WHERE run_id = 'run-nan' AND loss = 'NaN'") >= 1,
             "a NaN loss kept as NaN");
    TB_CHECK(query_int(db, "SELECT count(*) FROM metrics WHERE run_id = 'run-nan' AND loss IS NULL") == 0,
             "no loss read as absent");
    sqlite3_close(db);
    char *out;
    rc = fx_capture(tracebook_show_main, &out, "show", "run-nan", "--artifacts", root, NULL);
    TB_CHECK(rc == 0 && strstr(out, "NaN"), "show prints the NaN loss (exit %d):\n%s", rc, out);
    free(out);
}

TB_TEST(add_run_skips_the_cut_last_line_of_a_killed_run) {
    const char *root = fx_fresh_dir("killed");
    char rec[FX_PATH], path[FX_PATH];
    fx_path(rec, sizeof rec, "%s/cat/v2/run-k", root);
    tb_mkdir_p(fx_path(path, sizeof path, "%s/" TB_RECORD_RUN_DIR, rec), NULL);
    fx_write_text(tb_record_rank_path(path, sizeof path, rec, TB_RANK_METRICS, 0),
                  "{\"step\":1,\"loss\":4.0,\"step_ms\":2.0}\n{\"step\":2,\"loss\":3.9,\"st");
    fx_write_manifest(rec, "cat", 2, "run-k", json_pack("{s:s, s:i}", "status", "failed", "exit_status", 137));
    sqlite3 *db;
    tb_error err;
    TB_REQUIRE(tb_catalog_open(&db, root, &err) == 0, "open: %s", err.msg);
    TB_CHECK(tb_catalog_add_run(db, rec, &err) == 0, "add: %s", err.msg);
    TB_CHECK(query_int(db, "SELECT count(*) FROM metrics WHERE run_id = 'run-k'") == 1, "the whole line is kept");
    TB_CHECK(query_int(db, "SELECT exit_status FROM runs WHERE run_id = 'run-k'") == 137, "exit status");
    sqlite3_close(db);
}

TB_TEST(add_claims_upserts_prunes_and_keeps_proof_of_unchanged_claims) {
    const char *root = fx_fresh_dir("claims");
    char path[FX_PATH];
    tb_mkdir_p(fx_path(path, sizeof path, "%s/cat/v1", root), NULL);
    fx_path(path, sizeof path, "%s/cat/v1/" TB_EXPERIMENT_CLAIMS, root);
    fx_write_text(path, "{\"experiment\":\"cat\",\"version\":1,\"claims\":["
                        "{\"id\":\"a\",\"text\":\"A is {value}\",\"value\":1.5,\"parser\":\"step_ms\",\"args\":{},"
                        "\"runs\":[\"r1\"],\"relative_tolerance\":1e-9},"
                        "{\"id\":\"b\",\"value\":2,\"parser\":\"step_ms\",\"runs\":[\"r1\",\"r2\"]}]}");
    sqlite3 *db;
    tb_error err;
    TB_REQUIRE(tb_catalog_open(&db, root, &err) == 0, "open: %s", err.msg);
    TB_REQUIRE(tb_catalog_add_claims(db, path, &err) == 0, "add: %s", err.msg);
    TB_CHECK(query_int(db, "SELECT count(*) FROM claims") == 2, "two claims");
    char *runs = query_text(db, "SELECT runs FROM claims WHERE id = 'b'");
    TB_CHECK(!strcmp(runs, "[\"r1\",\"r2\"]"), "runs as JSON: %s", runs);
    free(runs);
    sqlite3_exec(db, "UPDATE claims SET proven_at = 'then', proven_value = 1.5", NULL, NULL, NULL);
    // a changes its value, b is dropped, c is new
    fx_write_text(path, "{\"experiment\":\"cat\",\"version\":1,\"claims\":["
                        "{\"id\":\"a\",\"text\":\"A is {value}\",\"value\":1.75,\"parser\":\"step_ms\",\"args\":{},"
                        "\"runs\":[\"r1\"],\"relative_tolerance\":1e-9},"
                        "{\"id\":\"c\",\"value\":3,\"parser\":\"step_ms\",\"runs\":[\"r1\"]}]}");
    TB_REQUIRE(tb_catalog_add_claims(db, path, &err) == 0, "add again: %s", err.msg);
    TB_CHECK(query_int(db, "SELECT count(*) FROM claims WHERE id IN ('a', 'c')") == 2 &&
                 query_int(db, "SELECT count(*) FROM claims") == 2,
             "b is gone, c is in");
    TB_CHECK(query_int(db, "SELECT count(*) FROM claims WHERE id = 'a' AND proven_at IS NULL AND value = 1.75") == 1,
             "a changed claim is no longer proven");
    sqlite3_exec(db, "UPDATE claims SET proven_at = 'then'", NULL, NULL, NULL);
    TB_REQUIRE(tb_catalog_add_claims(db, path, &err) == 0, "add unchanged: %s", err.msg);
    TB_CHECK(query_int(db, "SELECT count(*) FROM claims WHERE proven_at = 'then'") == 2,
             "unchanged claims keep their proof");
    fx_write_text(path, "{\"experiment\":\"cat\",\"version\":1,\"claims\":[{\"id\":\"x\"}]}");
    TB_CHECK(tb_catalog_add_claims(db, path, &err) != 0 && strstr(err.msg, "claims[0]") && strstr(err.msg, "value"),
             "a malformed claim is named: %s", err.msg);
    // claims.json naming another experiment, or another version, than where it lies: refused,
    // nothing catalogued under the name it gives
    static const char *const misnamed[] = {"\"experiment\":\"other\",\"version\":1",
                                           "\"experiment\":\"cat\",\"version\":2"};
    for (int k = 0; k < 2; k++) {
        char text[512];
        snprintf(text, sizeof text,
                 "{%s,\"claims\":[{\"id\":\"m\",\"value\":1,\"parser\":\"step_ms\",\"runs\":[\"r1\"]}]}", misnamed[k]);
        fx_write_text(path, text);
        TB_CHECK(tb_catalog_add_claims(db, path, &err) != 0 && strstr(err.msg, "not the directory it lies in (cat/v1)"),
                 "misnamed claims.json %d refused: %s", k, err.msg);
        TB_CHECK(query_int(db, "SELECT count(*) FROM claims WHERE id = 'm'") == 0, "nothing catalogued (%d)", k);
    }
    sqlite3_close(db);
}

// A claim that bounds its number keeps its bound in the catalogue (no value dropped), and a
// changed bound is no longer proven. A schema-2 catalogue, which had no column for it, gains
// one on open.
TB_TEST(a_bounded_claim_keeps_its_at_most_and_schema_2_catalogues_gain_it) {
    const char *root = fx_fresh_dir("claims_at_most");
    char path[FX_PATH];
    tb_mkdir_p(fx_path(path, sizeof path, "%s/cat/v1", root), NULL);
    fx_path(path, sizeof path, "%s/cat/v1/" TB_EXPERIMENT_CLAIMS, root);
    static const char *const bounded = "{\"experiment\":\"cat\",\"version\":1,\"claims\":["
                                       "{\"id\":\"same\",\"at_most\":%s,\"parser\":\"relative_difference\","
                                       "\"runs\":[\"r1\",\"r2\"]}]}";
    char text[512];
    snprintf(text, sizeof text, bounded, "1e-6");
    fx_write_text(path, text);
    sqlite3 *db;
    tb_error err;
    TB_REQUIRE(tb_catalog_open(&db, root, &err) == 0, "open: %s", err.msg);
    TB_REQUIRE(tb_catalog_add_claims(db, path, &err) == 0, "add: %s", err.msg);
    TB_CHECK(query_int(db, "SELECT count(*) FROM claims WHERE id = 'same' AND value IS NULL AND at_most = 1e-6") == 1,
             "the bound is stored, the value is NULL");
    sqlite3_exec(db, "UPDATE claims SET proven_at = 'then', proven_value = 0", NULL, NULL, NULL);
    snprintf(text, sizeof text, bounded, "0.5");
    fx_write_text(path, text);
    TB_REQUIRE(tb_catalog_add_claims(db, path, &err) == 0, "add again: %s", err.msg);
    TB_CHECK(query_int(db, "SELECT count(*) FROM claims WHERE at_most = 0.5 AND proven_at IS NULL") == 1,
             "a changed bound is no longer proven");
    // what a tracebook of schema 2 left: no at_most column
    TB_REQUIRE(sqlite3_exec(db, "ALTER TABLE claims DROP COLUMN at_most;"
                                "UPDATE meta SET value = '2' WHERE key = 'schema_version'",
                            NULL, NULL, NULL) == SQLITE_OK,
               "%s", sqlite3_errmsg(db));
    sqlite3_close(db);
    TB_REQUIRE(tb_catalog_open(&db, root, &err) == 0, "reopen a schema-2 catalogue: %s", err.msg);
    TB_REQUIRE(tb_catalog_add_claims(db, path, &err) == 0, "add after the upgrade: %s", err.msg);
    TB_CHECK(query_int(db, "SELECT count(*) FROM claims WHERE at_most = 0.5") == 1, "the bound is back");
    char *v = query_text(db, "SELECT value FROM meta WHERE key = 'schema_version'");
    TB_CHECK(!strcmp(v, TB_CATALOG_SCHEMA_VERSION), "schema version now %s", v);
    free(v);
    sqlite3_close(db);
}

TB_TEST(rebuild_follows_the_artifacts_and_reports_incomplete_records) {
    const char *root = engine_records("rebuild");
    char rec[FX_PATH], path[FX_PATH];
    // a record without a manifest, one whose runner died, one that cannot be read
    tb_mkdir_p(fx_path(rec, sizeof rec, "%s/cat/v1/run-c", root), NULL);
    fx_path(rec, sizeof rec, "%s/cat/v1/run-d", root);
    tb_mkdir_p(rec, NULL);
    fx_write_text(fx_path(path, sizeof path, "%s/" TB_RECORD_STDOUT, rec), "pretrain_gpt: ...\n");
    fx_write_manifest(rec, "cat", 1, "run-d", json_pack("{s:s}", "status", "running"));
    fx_path(rec, sizeof rec, "%s/cat/v1/run-e", root);
    tb_mkdir_p(fx_path(path, sizeof path, "%s/" TB_RECORD_RUN_DIR, rec), NULL);
    fx_write_text(tb_record_rank_path(path, sizeof path, rec, TB_RANK_METRICS, 0), "{\"step\":1}\nnot json\n");
    fx_write_manifest(rec, "cat", 1, "run-e", NULL);
    sqlite3 *db;
    tb_error err;
    TB_REQUIRE(tb_catalog_open(&db, root, &err) == 0, "open: %s", err.msg);
    TB_REQUIRE(tb_catalog_rebuild(db, root, &err) == 0, "rebuild: %s", err.msg);
    TB_CHECK(query_int(db, "SELECT count(*) FROM runs") == 5, "five records");
    TB_CHECK(query_int(db, "SELECT count(*) FROM runs WHERE status = 'finished'") == 2, "two finished");
    TB_CHECK(query_int(db, "SELECT count(*) FROM runs WHERE run_id IN ('run-c', 'run-d') AND status = "
                           "'incomplete'") == 2,
             "no manifest, or running without a heartbeat: incomplete");
    char *problem = query_text(db, "SELECT status || ': ' || problem FROM runs WHERE run_id = 'run-e'");
    TB_CHECK(strstr(problem, "unreadable: ") && strstr(problem, "metrics.rank-00000.jsonl:2:"),
             "unreadable, with the reason: %s", problem);
    free(problem);
    char *out;  // show prints what it could read of it, and fails naming the reason
    int rc = fx_capture(tracebook_show_main, &out, "show", "run-e", "--artifacts", root, NULL);
    TB_CHECK(rc == 1 && strstr(out, "status       unreadable") &&
                 strstr(out, "tracebook show: run-e: the record is unreadable: ") &&
                 strstr(out, "metrics.rank-00000.jsonl:2:"),
             "show of the unreadable record: exit %d:\n%s", rc, out);
    free(out);
    TB_CHECK(query_int(db, "SELECT count(*) FROM metrics WHERE run_id = 'run-b'") == 3, "metrics of run-b");

    // a manifest that changes is read again; a record that goes is dropped
    fx_write_manifest(fx_path(rec, sizeof rec, "%s/cat/v1/run-b", root), "cat", 1, "run-b",
                      json_pack("{s:s}", "status", "failed"));
    fx_rm_rf(fx_path(rec, sizeof rec, "%s/cat/v1/run-e", root));
    TB_REQUIRE(tb_catalog_rebuild(db, root, &err) == 0, "rebuild: %s", err.msg);
    TB_CHECK(query_int(db, "SELECT count(*) FROM runs WHERE run_id = 'run-b' AND status = 'failed'") == 1,
             "the new manifest is read");
    TB_CHECK(query_int(db, "SELECT count(*) FROM runs WHERE run_id = 'run-e'") == 0, "the deleted record is dropped");
    sqlite3_close(db);
}

// A writer killed in the middle of a big record leaves all of the record or none of it.
TB_TEST(a_writer_killed_mid_record_leaves_the_catalogue_consistent) {
    const char *root = fx_fresh_dir("kill");
    char rec[FX_PATH], path[FX_PATH];
    fx_path(rec, sizeof rec, "%s/cat/v1/run-big", root);
    tb_mkdir_p(fx_path(path, sizeof path, "%s/" TB_RECORD_RUN_DIR, rec), NULL);
    FILE *f = fopen(tb_record_rank_path(path, sizeof path, rec, TB_RANK_METRICS, 0), "w");
    const int steps = 60000;
    for (int s = 1; s <= steps; s++) fprintf(f, "{\"step\":%d,\"loss\":%.6f,\"step_ms\":1.5}\n", s, 5.0 / s);
    fclose(f);
    fx_write_manifest(rec, "cat", 1, "run-big", NULL);
    sqlite3 *db;
    tb_error err;
    TB_REQUIRE(tb_catalog_open(&db, root, &err) == 0, "open: %s", err.msg);
    sqlite3_close(db);
    int outcomes[2] = {0, 0};
    for (int attempt = 0; attempt < 3; attempt++) {
        pid_t pid = fork();
        if (pid == 0) {
            sqlite3 *child;
            if (tb_catalog_open(&child, root, NULL) != 0) _exit(2);
            for (;;) tb_catalog_add_run(child, rec, NULL);
        }
        struct timespec nap = {0, 150000000L + 70000000L * attempt};
        nanosleep(&nap, NULL);
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        TB_REQUIRE(tb_catalog_open(&db, root, &err) == 0, "open after kill: %s", err.msg);
        long long runs = query_int(db, "SELECT count(*) FROM runs"), rows = query_int(db, "SELECT count(*) FROM metrics");
        char *ok = query_text(db, "PRAGMA integrity_check");
        TB_CHECK(!strcmp(ok, "ok"), "integrity: %s", ok);
        free(ok);
        TB_CHECK((runs == 0 && rows == 0) || (runs == 1 && rows == steps), "all or nothing: %lld runs, %lld rows",
                 runs, rows);
        outcomes[runs == 1]++;
        sqlite3_close(db);
    }
    printf("  killed writer: %d times before the first commit, %d after\n", outcomes[0], outcomes[1]);
}

TB_TEST(ls_lists_experiments_then_runs_with_median_throughput) {
    const char *root = engine_records("ls");
    char rec[FX_PATH];
    tb_mkdir_p(fx_path(rec, sizeof rec, "%s/cat/v1/run-c", root), NULL);  // incomplete
    char *out;
    int rc = fx_capture(tracebook_ls_main, &out, "ls", "--artifacts", root, NULL);
    printf("%s", out);
    TB_CHECK(rc == 0, "exit %d", rc);
    TB_CHECK(strstr(out, "experiment") && strstr(out, "finished") && strstr(out, "incomplete"), "header");
    TB_CHECK(strstr(out, "cat ") && strstr(out, "      v1     3         2       0        0           1"),
             "cat v1: 3 runs, 2 finished, 1 incomplete");
    free(out);
    rc = fx_capture(tracebook_ls_main, &out, "ls", "--experiment", "cat", "--artifacts", root, NULL);
    printf("%s", out);
    TB_CHECK(rc == 0, "exit %d", rc);
    TB_CHECK(strstr(out, "cat v1: does the fixture hold?"), "version header with the question");
    TB_CHECK(strstr(out, "run-a") && strstr(out, "4f3c2b1a0d9e ") && strstr(out, "{\"tensor_model_parallel_size\":2}"),
             "run-a: commit, sweep point");
    TB_CHECK(strstr(out, "aaaabbbbcccc+dirty"), "run-b: dirty commit");
    TB_CHECK(strstr(out, "run-c") && strstr(out, "incomplete"), "the incomplete record is listed");
    // run-a's tok/s is the tokens_per_s parser's number (64 tokens per step, steps 2..3)
    const char *dirs[1] = {fx_path(rec, sizeof rec, "%s/cat/v1/run-a", root)};
    double tps;
    tb_error err;
    TB_REQUIRE(tb_parse_claim("tokens_per_s", NULL, dirs, 1, &tps, NULL, &err) == 0, "%s", err.msg);
    char want[64];
    snprintf(want, sizeof want, " %.1f  {\"tensor_model_parallel_size\":2}", tps);
    TB_CHECK(strstr(out, want), "run-a's tok/s '%s'", want);
    free(out);
    rc = fx_capture(tracebook_ls_main, &out, "ls", "--experiment", "nope", "--artifacts", root, NULL);
    TB_CHECK(rc == 1 && strstr(out, "no experiment 'nope'"), "unknown experiment: %d %s", rc, out);
    free(out);
}

TB_TEST(show_prints_the_manifest_config_and_steps) {
    const char *root = engine_records("show");
    char *out;
    int rc = fx_capture(tracebook_show_main, &out, "show", "run-a", "--artifacts", root, NULL);
    printf("%s", out);
    TB_CHECK(rc == 0, "exit %d", rc);
    TB_CHECK(strstr(out, "run run-a") && strstr(out, "cat v1: does the fixture hold?"), "identity");
    TB_CHECK(strstr(out, "pretrain_gpt --num-layers 2 --hidden-size 32"), "the command");
    TB_CHECK(strstr(out, "tensor_model_parallel_size") && strstr(out, "derived.num_microbatches"),
             "config keys, nested ones dotted");
    TB_CHECK(strstr(out, "steps (2 ranks") && strstr(out, "\n       1  ") && strstr(out, "\n       3  "),
             "the per-step table");
    free(out);
    rc = fx_capture(tracebook_show_main, &out, "show", "run-", "--artifacts", root, NULL);
    TB_CHECK(rc == 1 && strstr(out, "names 2 runs"), "an ambiguous prefix: %s", out);
    free(out);
    rc = fx_capture(tracebook_show_main, &out, "show", "run-b", "--artifacts", root, NULL);
    TB_CHECK(rc == 0 && strstr(out, "DIRTY") && strstr(out, "branch exp"), "dirty flag shown");
    free(out);
}

// A record of manifest_version 1 counted repetitions from 0; the catalogue reads it 1-based,
// like every newer record, so ls and show print one numbering. A catalogue of schema 1 (which
// stored what the manifests said) is brought up to date on open, its claims kept.
TB_TEST(version_1_records_and_schema_1_catalogues_read_repetitions_from_one) {
    const char *root = engine_records("old_reps");
    char rec[FX_PATH];
    json_t *argv = NULL;
    if (fx_engine_run(fx_path(rec, sizeof rec, "%s/cat/v1/run-old", root), "", &argv) != 0) printf("  engine run failed\n");
    fx_write_manifest(rec, "cat", 1, "run-old",
                      json_pack("{s:o, s:i, s:i}", "argv", argv, "manifest_version", 1, "repetition", 2));
    sqlite3 *db;
    tb_error err;
    TB_REQUIRE(tb_catalog_open(&db, root, &err) == 0 && tb_catalog_rebuild(db, root, &err) == 0, "%s", err.msg);
    TB_CHECK(query_int(db, "SELECT repetition FROM runs WHERE run_id = 'run-old'") == 3,
             "a version-1 repetition 2 (the third) is catalogued as 3");
    TB_CHECK(query_int(db, "SELECT repetition FROM runs WHERE run_id = 'run-a'") == 1, "a version-2 repetition as is");
    // what a tracebook of catalogue schema 1 left: the manifest's 0-based number
    TB_REQUIRE(sqlite3_exec(db, "UPDATE runs SET repetition = 2 WHERE run_id = 'run-old';"
                                "UPDATE meta SET value = '1' WHERE key = 'schema_version'",
                            NULL, NULL, NULL) == SQLITE_OK,
               "%s", sqlite3_errmsg(db));
    sqlite3_close(db);
    char *out;
    int rc = fx_capture(tracebook_ls_main, &out, "ls", "--experiment", "cat", "--artifacts", root, NULL);
    printf("%s", out);
    char id[64], status[32], commit[64], rep[16];
    const char *line = strstr(out, "\n  run-old ");
    TB_CHECK(rc == 0 && line && sscanf(line, " %63s %31s %63s %15s", id, status, commit, rep) == 4 &&
                 !strcmp(rep, "3"),
             "ls prints run-old as repetition 3 after opening a schema-1 catalogue: %s", line ? line : out);
    free(out);
    rc = fx_capture(tracebook_show_main, &out, "show", "run-old", "--artifacts", root, NULL);
    TB_CHECK(rc == 0 && strstr(out, "identity     repetition 3, seed "), "show: %s", out);
    free(out);
    TB_REQUIRE(tb_catalog_open(&db, root, &err) == 0, "%s", err.msg);
    char *v = query_text(db, "SELECT value FROM meta WHERE key = 'schema_version'");
    TB_CHECK(!strcmp(v, TB_CATALOG_SCHEMA_VERSION), "schema version now %s", v);
    free(v);
    sqlite3_close(db);
}

TB_TEST(diff_shows_differing_config_and_metrics_side_by_side) {
    const char *root = engine_records("diff");
    char *out;
    int rc = fx_capture(tracebook_diff_main, &out, "diff", "run-a", "run-b", "--artifacts", root, NULL);
    printf("%s", out);
    TB_CHECK(rc == 0, "exit %d", rc);
    TB_CHECK(strstr(out, "hidden_size") && strstr(out, "32 ") && strstr(out, "64"), "hidden_size 32 vs 64");
    TB_CHECK(strstr(out, "tensor_model_parallel_size") && strstr(out, "world_size"), "the parallel layout differs");
    TB_CHECK(!strstr(out, "\n  num_layers "), "equal keys are not listed");
    TB_CHECK(strstr(out, "median step ms") && strstr(out, "tok/s") && strstr(out, "final loss") &&
                 strstr(out, "peak memory"),
             "metric summaries");
    free(out);
}

// ls, show and diff read records: an artifacts root that does not exist is said (exit 1),
// and not made, catalogue and all.
TB_TEST(ls_and_show_refuse_a_missing_artifacts_root_and_make_nothing) {
    char root[FX_PATH], *out;
    fx_path(root, sizeof root, "%s/no-such-root", fx_fresh_dir("missing_root"));
    int rc = fx_capture(tracebook_ls_main, &out, "ls", "--artifacts", root, NULL);
    TB_CHECK(rc == 1 && strstr(out, "tracebook ls: no artifacts directory ") && strstr(out, "no-such-root"),
             "ls: exit %d: %s", rc, out);
    free(out);
    rc = fx_capture(tracebook_show_main, &out, "show", "run-a", "--artifacts", root, NULL);
    TB_CHECK(rc == 1 && strstr(out, "tracebook show: no artifacts directory "), "show: exit %d: %s", rc, out);
    free(out);
    struct stat st;
    TB_CHECK(stat(root, &st) != 0, "%s not made", root);
}

int main(void) {
    TB_RUN(catalog_open_creates_the_schema_in_wal_mode);
    TB_RUN(ls_and_show_refuse_a_missing_artifacts_root_and_make_nothing);
    TB_RUN(add_run_catalogues_the_manifest_and_every_ranks_metrics);
    TB_RUN(add_run_reports_a_malformed_metrics_line_and_keeps_the_old_rows);
    TB_RUN(a_diverged_run_is_catalogued_and_shown_with_its_nan_losses);
    TB_RUN(add_run_skips_the_cut_last_line_of_a_killed_run);
    TB_RUN(add_claims_upserts_prunes_and_keeps_proof_of_unchanged_claims);
    TB_RUN(a_bounded_claim_keeps_its_at_most_and_schema_2_catalogues_gain_it);
    TB_RUN(rebuild_follows_the_artifacts_and_reports_incomplete_records);
    TB_RUN(a_writer_killed_mid_record_leaves_the_catalogue_consistent);
    TB_RUN(ls_lists_experiments_then_runs_with_median_throughput);
    TB_RUN(show_prints_the_manifest_config_and_steps);
    TB_RUN(diff_shows_differing_config_and_metrics_side_by_side);
    TB_RUN(version_1_records_and_schema_1_catalogues_read_repetitions_from_one);
    return tb_test_summary();
}
