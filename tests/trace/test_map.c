// test_map.c — `tracebook map` and `tracebook walk`: name patterns, range spans, chains and
// collectives, the nesting check and coverage on the mini program's hand-built index and
// hand-made traces (Chrome JSON and an Nsight Systems SQLite export of the same ranges);
// then end to end on a real pretrain_gpt run (2 ranks, TP 2) and this project's own index.
#include <jansson.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "map.h"
#include "map_chrome.h"
#include "map_events.h"
#include "map_match.h"
#include "map_report.h"
#include "index_query.h"
#include "tb_shell.h"
#include "tb_test.h"
#include "trace/fixtures/map/mini_db.h"
#include "trace_cli.h"

#define DB TB_TEST_TMPDIR "/map-mini.sqlite"
#define TRACE0 TB_TEST_TMPDIR "/map-mini.rank-00000.json"
#define TRACE1 TB_TEST_TMPDIR "/map-mini.rank-00001.json"

// --- hand-made traces ------------------------------------------------------------------

typedef struct ev {
    const char *name;
    double ts, dur;  // us
    int comm_count;  // > 0: a communicator range with these figures
} ev;

// One rank's step of the mini program: two layers, the optimizer, an all-reduce in each.
static const ev mini_step[] = {
    {"step", 0, 100, 0},
    {"layer.0", 1, 39, 0},
    {"layer.0.mlp", 2, 37, 0},
    {"layer.0.mlp.fc2", 3, 35, 0},
    {"comm.tp.all_reduce", 4, 6, 256},
    {"layer.1", 41, 39, 0},
    {"layer.1.mlp", 42, 37, 0},
    {"layer.1.mlp.fc2", 43, 35, 0},
    {"comm.tp.all_reduce", 44, 6, 256},
    {"optimizer", 81, 18, 0},
    {"optimizer.replicated", 82, 16, 0},
    {"comm.tp.all_reduce", 83, 3, 1},
};
#define MINI_NEV ((int)(sizeof mini_step / sizeof *mini_step))

static void write_chrome(const char *path, int rank, const ev *evs, int n, const char *backend) {
    json_t *events = json_array();
    json_array_append_new(events, json_pack("{s:s, s:s, s:i, s:i, s:{s:s}}", "name", "process_name", "ph", "M", "pid",
                                            rank, "tid", 0, "args", "name", "rank"));
    for (int i = 0; i < n; i++) {
        json_t *args = json_pack("{s:i}", "depth", 0);
        if (evs[i].comm_count)
            json_object_update_new(args, json_pack("{s:s, s:s, s:s, s:i, s:i, s:i, s:i}", "group", "tp", "op",
                                                   "all_reduce", "dtype", "float32", "group_size", 2, "group_index",
                                                   rank, "count", evs[i].comm_count, "bytes", 4 * evs[i].comm_count));
        // rank 1 runs later and twice as slow
        json_array_append_new(events, json_pack("{s:s, s:s, s:s, s:f, s:f, s:i, s:i, s:o}", "name", evs[i].name, "cat",
                                                "range", "ph", "X", "ts", 1000 * rank + evs[i].ts * (1 + rank), "dur",
                                                evs[i].dur * (1 + rank), "pid", rank, "tid", 0, "args", args));
    }
    json_t *root = json_pack("{s:o}", "traceEvents", events);
    if (backend)
        json_object_set_new(root, "distributedInfo",
                            json_pack("{s:s, s:i, s:i}", "backend", backend, "rank", rank, "world_size", 2));
    json_dump_file(root, path, JSON_INDENT(1));
    json_decref(root);
}

// The same ranges as an `nsys export --type sqlite` file: NVTX push/pop events (eventType 59),
// one thread per rank, names inline (text) or in StringIds (textId), plus noise to ignore.
static void write_nsys(const char *path) {
    unlink(path);
    sqlite3 *db;
    if (sqlite3_open(path, &db) != SQLITE_OK) abort();
    mini_exec(db, sqlite3_mprintf(
                      "CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT NOT NULL);"
                      "CREATE TABLE NVTX_EVENTS (start INT NOT NULL, end INT, eventType INT NOT NULL, rangeId INT,"
                      " category INT, color INT, text TEXT, globalTid INT, endGlobalTid INT, textId INT REFERENCES"
                      " StringIds(id), domainId INT, uint64Value INT, int64Value INT, doubleValue REAL,"
                      " uint32Value INT, int32Value INT, floatValue REAL, jsonTextId INT, jsonText TEXT);"
                      "BEGIN;"));
    const long long tids[2] = {0x2a0000001234LL, 0x2a0000001240LL};
    int next_id = 1;
    for (int rank = 0; rank < 2; rank++)
        for (int i = 0; i < MINI_NEV; i++) {
            long long start = (long long)((1000 * rank + mini_step[i].ts * (1 + rank)) * 1000);
            long long end = start + (long long)(mini_step[i].dur * (1 + rank) * 1000);
            if (i % 2) {  // through StringIds
                mini_exec(db, sqlite3_mprintf("INSERT INTO StringIds VALUES(%d, %Q)", next_id, mini_step[i].name));
                mini_exec(db, sqlite3_mprintf("INSERT INTO NVTX_EVENTS(start, end, eventType, text, globalTid, textId)"
                                              " VALUES(%lld, %lld, 59, NULL, %lld, %d)",
                                              start, end, tids[rank], next_id++));
            } else {
                mini_exec(db, sqlite3_mprintf("INSERT INTO NVTX_EVENTS(start, end, eventType, text, globalTid)"
                                              " VALUES(%lld, %lld, 59, %Q, %lld)",
                                              start, end, mini_step[i].name, tids[rank]));
            }
        }
    // a mark (34) and a start/end range (60) are not push/pop ranges; NCCL's own domain's
    // ranges are not the program's
    mini_exec(db, sqlite3_mprintf("INSERT INTO NVTX_EVENTS(start, end, eventType, text, globalTid)"
                                  " VALUES(5000, NULL, 34, 'a mark', %lld), (6000, 7000, 60, 'async', %lld);"
                                  "INSERT INTO NVTX_EVENTS(start, end, eventType, text, globalTid, domainId)"
                                  " VALUES(4100, 4200, 59, 'ncclAllReduce', %lld, 3);"
                                  "COMMIT;",
                                  tids[0], tids[0], tids[0]));
    sqlite3_close(db);
}

static json_t *report_for(char **traces, int n, const char *db, const char *entry) {
    tb_map m;
    tb_error err;
    if (tb_map_open(&m, db, entry, traces, n, &err) != 0) {
        printf("  tb_map_open: %s\n", err.msg);
        return NULL;
    }
    json_t *rep = tb_map_report(&m);
    tb_map_close(&m);
    return rep;
}

static json_t *range_named(json_t *rep, const char *name) {
    size_t i;
    json_t *r;
    json_array_foreach(json_object_get(rep, "ranges"), i, r) if (!strcmp(json_string_value(json_object_get(r, "name")), name)) return r;
    return NULL;
}

static const char *str(json_t *o, const char *key) {
    const char *s = json_string_value(json_object_get(o, key));
    return s ? s : "";
}

static json_t *nesting(json_t *rep, const char *parent, const char *child) {
    size_t i;
    json_t *x;
    json_array_foreach(json_object_get(rep, "nestings"), i, x) if (!strcmp(str(x, "parent"), parent) &&
                                                                   !strcmp(str(x, "child"), child)) return x;
    return NULL;
}

// --- tests -----------------------------------------------------------------------------

TB_TEST(patterns_match_whole_names) {
    TB_CHECK(tb_range_pattern_match("layer.%d.mlp", "layer.12.mlp"), "%%d: digits");
    TB_CHECK(tb_range_pattern_match("layer.%d", "layer.-3"), "%%d: a sign");
    TB_CHECK(!tb_range_pattern_match("layer.%d.mlp", "layer.1"), "no false match of a prefix");
    TB_CHECK(!tb_range_pattern_match("layer.%d", "layer.1.mlp"), "the whole name");
    TB_CHECK(!tb_range_pattern_match("layer.%d.mlp", "layer.x.mlp"), "%%d needs a digit");
    TB_CHECK(!tb_range_pattern_match("layer.%d.mlp", "layer..mlp"), "%%d needs at least one digit");
    TB_CHECK(tb_range_pattern_match("layer.%i.%u", "layer.4.7"), "%%i %%u");
    TB_CHECK(tb_range_pattern_match("step.%ld.mb.%lld", "step.10.mb.3"), "length modifiers");
    TB_CHECK(tb_range_pattern_match("chunk.%02d", "chunk.07"), "width and flags");
    TB_CHECK(tb_range_pattern_match("comm.%s.%s", "comm.tp.all_reduce"), "%%s: any text");
    TB_CHECK(tb_range_pattern_match("comm.%s.%s", "comm.dp_cp.reduce_scatter"), "%%s");
    TB_CHECK(!tb_range_pattern_match("comm.%s.%s", "comm.tp"), "two dots needed");
    TB_CHECK(tb_range_pattern_match("forward", "forward"), "a literal");
    TB_CHECK(!tb_range_pattern_match("forward", "forward.x"), "a literal matches itself only");
    TB_CHECK(!tb_range_pattern_match("forward", "forwar"), "a literal matches itself only");
    TB_CHECK(tb_range_pattern_match("100%% done", "100% done"), "%%%% is a percent sign");
    TB_CHECK(!tb_range_pattern_match("100%% done", "100%% done"), "%%%% is one percent sign");
    TB_CHECK(tb_range_pattern_match("x%cy", "x-y"), "%%c: one character");
    TB_CHECK(tb_range_pattern_match("recompute.layer.%d", "recompute.layer.3") &&
                 !tb_range_pattern_match("layer.%d", "recompute.layer.3"),
             "anchored at the start");
}

TB_TEST(the_most_specific_site_comes_first) {
    TB_CHECK(tb_range_pattern_literals("layer.%d.mlp") == 10 && tb_range_pattern_literals("%s") == 0 &&
                 tb_range_pattern_literals("100%% %02ld") == 5,
             "literal characters: %d %d %d", tb_range_pattern_literals("layer.%d.mlp"),
             tb_range_pattern_literals("%s"), tb_range_pattern_literals("100%% %02ld"));
    // a helper's catch-all "%s" ahead in index order, then two patterns of the name
    tb_grange ranges[] = {{.fn = 0, .name = "%s"}, {.fn = 0, .name = "layer.%d.%s"}, {.fn = 0, .name = "layer.%d.mlp"},
                          {.fn = 0, .is_pop = 1}, {.fn = 0, .name = "comm.%s"}};
    tb_graph g = {.ranges = ranges, .nranges = 5};
    char *names[] = {"layer.3.mlp"};
    tb_rt rt = {.names = names, .nnames = 1};
    int **sites, *nsites;
    tb_match_sites(&g, -1, &rt, &sites, &nsites);
    TB_CHECK(nsites[0] == 3 && sites[0][0] == 2 && sites[0][1] == 1 && sites[0][2] == 0,
             "sites of layer.3.mlp: %d: %d %d %d", nsites[0], nsites[0] > 0 ? sites[0][0] : -1,
             nsites[0] > 1 ? sites[0][1] : -1, nsites[0] > 2 ? sites[0][2] : -1);
    free(sites[0]);
    free(sites);
    free(nsites);
}

TB_TEST(map_mini_traces) {
    char *traces[] = {TRACE0, TRACE1};
    json_t *rep = report_for(traces, 2, DB, "app");
    TB_REQUIRE(rep, "report");
    json_t *cov = json_object_get(rep, "coverage");
    TB_CHECK(json_real_value(json_object_get(cov, "percent")) == 100.0, "coverage %.1f%%",
             json_real_value(json_object_get(cov, "percent")));
    TB_CHECK(json_integer_value(json_object_get(cov, "events")) == 2 * MINI_NEV, "every event counted");
    TB_CHECK(json_integer_value(json_object_get(rep, "unexplained_nestings")) == 0, "no unexplained nesting");
    TB_CHECK(json_array_size(json_object_get(rep, "nestings")) == 11, "11 distinct pairs, got %zu",
             json_array_size(json_object_get(rep, "nestings")));
    json_t *x = nesting(rep, "step", "optimizer");
    TB_CHECK(x && json_is_true(json_object_get(x, "explained")) && tb_has(str(x, "how"), "inside the parent's span"),
             "a push after an early-return pop is still inside the range");
    x = nesting(rep, "layer.0.mlp", "layer.0.mlp.fc2");
    TB_CHECK(x && tb_has(str(x, "how"), "reachable"), "through the spec's field");
    json_t *rep_site = json_array_get(json_object_get(range_named(rep, "optimizer.replicated"), "sites"), 0);
    TB_CHECK(json_array_size(json_object_get(rep_site, "collectives")) == 2 &&
                 json_integer_value(json_object_get(rep_site, "end_line")) ==
                     mini_find("train.c", "TB_RANGE_POP()", 7).line,
             "a push in an else branch spans to the pop after the if");

    json_t *fc2 = range_named(rep, "layer.0.mlp.fc2");
    TB_REQUIRE(fc2, "layer.0.mlp.fc2 in the report");
    TB_CHECK(json_integer_value(json_object_get(fc2, "count")) == 2, "one per rank");
    TB_CHECK(json_array_size(json_object_get(fc2, "per_rank")) == 2, "two ranks");
    json_t *r1 = json_array_get(json_object_get(fc2, "per_rank"), 1);
    TB_CHECK(json_real_value(json_object_get(r1, "total_us")) == 70.0, "rank 1's time: %f",
             json_real_value(json_object_get(r1, "total_us")));
    json_t *site = json_array_get(json_object_get(fc2, "sites"), 0);
    TB_REQUIRE(site && json_array_size(json_object_get(fc2, "sites")) == 1, "one site");
    TB_CHECK(!strcmp(str(site, "function"), "mlp_forward") && !strcmp(str(site, "pattern"), "layer.%d.mlp.fc2") &&
                 !strcmp(str(site, "file"), "train.c"),
             "site %s in %s", str(site, "pattern"), str(site, "function"));
    json_t *chain = json_object_get(site, "chain");
    TB_REQUIRE(json_array_size(chain) == 5, "main → rank_main → train_step → layer_forward → mlp_forward");
    TB_CHECK(!strcmp(str(json_array_get(chain, 0), "function"), "main") &&
                 !strcmp(str(json_array_get(chain, 0), "passed_to"), "run_ranks") &&
                 !strcmp(str(json_array_get(chain, 3), "via"), "mini_spec.mlp") &&
                 !strcmp(str(json_array_get(chain, 4), "function"), "mlp_forward") &&
                 json_integer_value(json_object_get(json_array_get(chain, 4), "line")) ==
                     mini_find("train.c", "TB_RANGE_PUSH(\"layer.%d.mlp.fc2\"", 1).line,
             "the chain ends at the push");
    json_t *colls = json_object_get(site, "collectives");
    TB_REQUIRE(json_array_size(colls) == 2, "local and nccl backends, got %zu", json_array_size(colls));
    json_t *c0 = json_array_get(colls, 0), *c1 = json_array_get(colls, 1);
    TB_CHECK(!strcmp(str(c0, "end"), "local_all_reduce") && !strcmp(str(c0, "via"), "mini_backend.all_reduce") &&
                 !strcmp(str(c0, "collective"), "all_reduce") && json_integer_value(json_object_get(c0, "observed")) == 2,
             "the local backend, seen twice (once per rank): %s %s %s", str(c0, "end"), str(c0, "via"),
             str(c0, "collective"));
    TB_CHECK(!strcmp(str(c1, "end"), "ncclAllReduce") && json_integer_value(json_object_get(c1, "observed")) == 0,
             "the NCCL backend, not in traces of the local backend");
    json_t *hops = json_object_get(c0, "hops");
    TB_CHECK(json_array_size(hops) == 4 && !strcmp(str(json_array_get(hops, 1), "function"), "reduce_from_tp") &&
                 !strcmp(str(json_array_get(hops, 2), "function"), "all_reduce"),
             "mlp_forward → reduce_from_tp → all_reduce → local_all_reduce");

    json_t *comm = range_named(rep, "comm.tp.all_reduce");
    TB_REQUIRE(comm, "comm range");
    TB_CHECK(json_integer_value(json_object_get(json_object_get(comm, "comm"), "bytes_total")) == 2 * (1024 + 1024 + 4),
             "bytes from args");
    site = json_array_get(json_object_get(comm, "sites"), 0);
    TB_CHECK(!strcmp(str(site, "function"), "begin") && json_is_true(json_object_get(site, "continues_in_callers")),
             "pushed in begin, popped by the caller's end()");
    colls = json_object_get(site, "collectives");
    TB_CHECK(json_array_size(colls) == 2 && !strcmp(str(json_array_get(colls, 0), "end"), "local_all_reduce"),
             "the range continues in all_reduce, around the backend call");
    json_decref(rep);
}

TB_TEST(map_flags_unexplained_nesting_and_unmapped_names) {
    // optimizer inside layer.0.mlp.fc2: no static path from mlp_forward's span to train_step;
    // layer.0 inside a communicator range: nothing below all_reduce reaches layer_forward
    // optimizer.sharded is pushed in the if branch: the else branch's all_reduce is not in it
    const ev odd[] = {
        {"step", 0, 100, 0},           {"layer.0.mlp.fc2", 1, 20, 0},     {"optimizer", 2, 5, 0},
        {"comm.tp.all_reduce", 30, 10, 4}, {"layer.0", 31, 5, 0},         {"optimizer.sharded", 50, 10, 0},
        {"comm.tp.all_reduce", 51, 3, 4},  {"mystery.range", 200, 10, 0},
    };
    char path[] = TB_TEST_TMPDIR "/map-odd.json";
    write_chrome(path, 0, odd, (int)(sizeof odd / sizeof *odd), NULL);
    char *traces[] = {path};
    json_t *rep = report_for(traces, 1, DB, "app");
    TB_REQUIRE(rep, "report");
    json_t *x = nesting(rep, "layer.0.mlp.fc2", "optimizer");
    TB_CHECK(x && json_is_false(json_object_get(x, "explained")), "fc2 → optimizer flagged");
    x = nesting(rep, "comm.tp.all_reduce", "layer.0");
    TB_CHECK(x && json_is_false(json_object_get(x, "explained")), "comm → layer.0 flagged");
    x = nesting(rep, "step", "layer.0.mlp.fc2");
    TB_CHECK(x && json_is_true(json_object_get(x, "explained")), "step → fc2 is reachable (layers in between)");
    x = nesting(rep, "optimizer.sharded", "comm.tp.all_reduce");
    TB_CHECK(x && json_is_false(json_object_get(x, "explained")), "the else branch's collective is not inside the if's range");
    json_t *sh = json_array_get(json_object_get(range_named(rep, "optimizer.sharded"), "sites"), 0);
    TB_CHECK(sh && json_array_size(json_object_get(sh, "collectives")) == 0, "no collective below optimizer.sharded");
    TB_CHECK(json_integer_value(json_object_get(rep, "unexplained_nestings")) == 3, "three flagged");
    json_t *cov = json_object_get(rep, "coverage");
    TB_CHECK(json_integer_value(json_object_get(cov, "mapped_events")) == 7 &&
                 json_integer_value(json_object_get(cov, "events")) == 8,
             "the unknown name is not covered");
    TB_CHECK(json_array_size(json_object_get(rep, "unmapped")) == 1 &&
                 !strcmp(json_string_value(json_array_get(json_object_get(rep, "unmapped"), 0)), "mystery.range"),
             "and is listed");
    json_decref(rep);

    char *out;
    int rc = mini_run(tracebook_map_main, &out, "map", path, "--from", "app", "--index", DB, NULL);
    TB_CHECK(rc == 0 && tb_has(out, "UNEXPLAINED layer.0.mlp.fc2 → optimizer") &&
                 tb_has(out, "UNEXPLAINED comm.tp.all_reduce → layer.0") && tb_has(out, "7/8 range events (87.5%)") &&
                 tb_has(out, "unmapped: mystery.range") && tb_has(out, "site   NONE"),
             "the text says so:\n%s", out);
    free(out);
}

static void drop_keys(json_t *j, const char *const *keys, int nkeys) {
    if (json_is_object(j)) {
        for (int i = 0; i < nkeys; i++) json_object_del(j, keys[i]);
        const char *k;
        json_t *v;
        json_object_foreach(j, k, v) drop_keys(v, keys, nkeys);
    } else if (json_is_array(j)) {
        size_t i;
        json_t *v;
        json_array_foreach(j, i, v) drop_keys(v, keys, nkeys);
    }
}

// Reports a and b are equal but for keys (dropped from both, at any depth); frees both.
static void check_same_reports(json_t *a, json_t *b, const char *const *keys, int nkeys, const char *what) {
    drop_keys(a, keys, nkeys);
    drop_keys(b, keys, nkeys);
    char *sa = json_dumps(a, JSON_SORT_KEYS | JSON_INDENT(1)), *sb = json_dumps(b, JSON_SORT_KEYS | JSON_INDENT(1));
    TB_CHECK(json_equal(a, b), "%s: not the same report\n%.1500s\nvs\n%.1500s", what, sa, sb);
    free(sa);
    free(sb);
    json_decref(a);
    json_decref(b);
}

TB_TEST(nsight_sqlite_maps_as_the_chrome_trace) {
    char c0[] = TB_TEST_TMPDIR "/map-eq.rank-00000.json", c1[] = TB_TEST_TMPDIR "/map-eq.rank-00001.json";
    char nsys[] = TB_TEST_TMPDIR "/map-eq.nsys.sqlite";
    write_chrome(c0, 0, mini_step, MINI_NEV, NULL);
    write_chrome(c1, 1, mini_step, MINI_NEV, NULL);
    write_nsys(nsys);
    char *chrome_traces[] = {c0, c1}, *nsys_traces[] = {nsys};
    json_t *a = report_for(chrome_traces, 2, DB, "app"), *b = report_for(nsys_traces, 1, DB, "app");
    TB_REQUIRE(a && b, "both reports");
    TB_CHECK(json_integer_value(json_object_get(b, "events")) == 2 * MINI_NEV, "marks, start/end ranges and other domains ignored");
    TB_CHECK(!strcmp(str(json_array_get(json_object_get(b, "traces"), 0), "format"), "nsys-sqlite"), "detected");
    // the same, but for what only the Chrome trace carries (args) and where they came from
    static const char *const keys[] = {"traces", "index", "comm"};
    check_same_reports(a, b, keys, 3, "chrome and nsys");
}

TB_TEST(map_cli_text_and_json) {
    char json_path[] = TB_TEST_TMPDIR "/map-mini.report.json";
    unlink(json_path);
    char *out;
    int rc = mini_run(tracebook_map_main, &out, "map", TRACE0, TRACE1, "--from", "app", "--output", json_path,
                      "--index", DB, NULL);
    TB_CHECK(rc == 0, "rc %d:\n%s", rc, out);
    TB_CHECK(tb_has(out, "layer.0.mlp.fc2  2×") &&
                 tb_has(out, "site   \"layer.%d.mlp.fc2\" in mlp_forward (train.c:") &&
                 tb_has(out, "chain  main (main.c:13, a callback passed to run_ranks) → rank_main") &&
                 tb_has(out, "local_all_reduce (comm.c:") && tb_has(out, "[traces: 2× all_reduce inside]") &&
                 tb_has(out, "group tp (size 2) all_reduce float32: 4× 256 elements, 1024 bytes") &&
                 tb_has(out, "0 unexplained") && tb_has(out, "24/24 range events (100.0%)"),
             "text:\n%s", out);
    free(out);
    json_error_t je;
    json_t *j = json_load_file(json_path, 0, &je);
    TB_CHECK(j && range_named(j, "layer.1.mlp.fc2"), "--json wrote the report: %s", je.text);
    json_decref(j);
    rc = mini_run(tracebook_map_main, &out, "map", TRACE0, "--index", DB, NULL);
    TB_CHECK(rc == 1 && tb_has(out, "entry 'pretrain_gpt'"), "the default entry is not in the mini index:\n%s", out);
    free(out);
    rc = mini_run(tracebook_map_main, &out, "map", TRACE0, "--from", "main", "--index", DB, NULL);
    TB_CHECK(rc == 1 && tb_has(out, "ambiguous") && tb_has(out, "[app]") && tb_has(out, "[tool]"), "two mains:\n%s",
             out);
    free(out);
    rc = mini_run(tracebook_map_main, &out, "map", TB_TEST_TMPDIR "/no-such-trace.json", "--from", "app", "--index",
                  DB, NULL);
    TB_CHECK(rc == 1 && tb_has(out, "no-such-trace.json"), "a missing trace is named:\n%s", out);
    free(out);
}

// --- bad input: named, counted, never 100% -------------------------------------------

// A trace with only metadata and instant events: no range to map.
TB_TEST(a_trace_without_range_events_is_refused) {
    const char *path = TB_TEST_TMPDIR "/map-no-ranges.json";
    tb_write_text(path, "{\"traceEvents\": [{\"name\": \"process_name\", \"ph\": \"M\", \"pid\": 0},"
                        " {\"name\": \"mark\", \"ph\": \"i\", \"ts\": 5, \"pid\": 0}]}\n");
    char *out;
    int rc = mini_run(tracebook_map_main, &out, "map", path, "--from", "app", "--index", DB, NULL);
    char want[512];
    snprintf(want, sizeof want, "no range events in the trace: %s", path);
    TB_CHECK(rc == 1 && tb_has(out, want) && !tb_has(out, "coverage"), "rc %d:\n%s", rc, out);
    free(out);
    rc = mini_run(tracebook_walk_main, &out, "walk", "layer.0.mlp.fc2", "--trace", path, "--from", "app", "--index",
                  DB, NULL);
    TB_CHECK(rc == 1 && tb_has(out, want), "walk: rc %d:\n%s", rc, out);
    free(out);
}

// The mini step, then complete events the map cannot read: a non-string name (3), a string
// ts (2), a negative dur (1). Counted per reason with the first one's index, the coverage
// counts them as unmapped and the status is partial (exit 1).
TB_TEST(malformed_and_negative_duration_events_are_counted_and_named) {
    const char *path = TB_TEST_TMPDIR "/map-malformed.json";
    write_chrome(path, 0, mini_step, MINI_NEV, "local");
    json_error_t je;
    json_t *root = json_load_file(path, 0, &je);
    TB_REQUIRE(root, "%s: %s", path, je.text);
    json_t *events = json_object_get(root, "traceEvents");
    size_t first = json_array_size(events);  // the index of the first bad one
    for (int i = 0; i < 3; i++)
        json_array_append_new(events, json_pack("{s:i, s:s, s:f, s:f, s:i, s:i}", "name", 7, "ph", "X", "ts", 1.0,
                                                "dur", 2.0, "pid", 0, "tid", 0));
    for (int i = 0; i < 2; i++)
        json_array_append_new(events, json_pack("{s:s, s:s, s:s, s:f, s:i, s:i}", "name", "step", "ph", "X", "ts",
                                                "12.5", "dur", 2.0, "pid", 0, "tid", 0));
    json_array_append_new(events, json_pack("{s:s, s:s, s:f, s:f, s:i, s:i}", "name", "step", "ph", "X", "ts", 3.0,
                                            "dur", -4.0, "pid", 0, "tid", 0));
    json_dump_file(root, path, 0);
    json_decref(root);
    char *out, want[1024], json_path[] = TB_TEST_TMPDIR "/map-malformed.report.json";
    int rc = mini_run(tracebook_map_main, &out, "map", path, "--from", "app", "--output", json_path, "--index", DB,
                      NULL);
    snprintf(want, sizeof want,
             "tracebook map: %s: dropped 6 malformed events: 3 with a non-string name (first: event %zu), 2 with a "
             "string ts (first: event %zu), 1 with a negative dur (first: event %zu)\n",
             path, first, first + 3, first + 5);
    char cov[128];
    snprintf(cov, sizeof cov, "coverage: %d/%d range events (%.1f%%)", MINI_NEV, MINI_NEV + 6,
             100.0 * MINI_NEV / (MINI_NEV + 6));
    TB_CHECK(rc == 1 && tb_has(out, want) && tb_has(out, cov) && tb_has(out, "PARTIAL: 6 malformed events dropped") &&
                 !tb_has(out, "(100.0%)"),
             "rc %d, expected\n%s%s\ngot:\n%s", rc, want, cov, out);
    free(out);
    json_t *rep = json_load_file(json_path, 0, &je);
    TB_CHECK(rep && !strcmp(str(rep, "status"), "partial") &&
                 json_integer_value(json_object_get(json_object_get(rep, "coverage"), "dropped_events")) == 6 &&
                 json_array_size(json_object_get(rep, "dropped")) == 3,
             "the JSON report says partial, with the drops");
    json_decref(rep);
    rc = mini_run(tracebook_walk_main, &out, "walk", "layer.0.mlp.fc2", "--trace", path, "--from", "app", "--index",
                  DB, NULL);
    TB_CHECK(rc == 1 && tb_has(out, "**Partial:** 6 malformed range events") && tb_has(out, "dropped 6 malformed"),
             "walk: rc %d:\n%s", rc, out);
    free(out);
}

// A Chrome trace of the same ranges as begin/end pairs: each X becomes a B at its ts and an E
// at ts + dur (the Es first, in reverse order: pairing is by timestamp, not file order),
// the comm figures split between the B's args and the E's.
static void chrome_as_begin_end(const char *from, const char *to) {
    json_error_t je;
    json_t *root = json_load_file(from, 0, &je), *events = json_object_get(root, "traceEvents"), *out = json_array();
    size_t i;
    json_t *e;
    json_array_foreach(events, i, e) {
        if (strcmp(json_string_value(json_object_get(e, "ph")), "X")) continue;
        json_t *end = json_pack("{s:s, s:f, s:O, s:O}", "ph", "E", "ts",
                                json_number_value(json_object_get(e, "ts")) + json_number_value(json_object_get(e, "dur")),
                                "pid", json_object_get(e, "pid"), "tid", json_object_get(e, "tid"));
        json_t *args = json_object_get(e, "args");
        if (json_object_get(args, "bytes")) {
            json_object_set_new(end, "args", json_pack("{s:O, s:O}", "count", json_object_get(args, "count"), "bytes",
                                                         json_object_get(args, "bytes")));
            json_object_del(args, "count");
            json_object_del(args, "bytes");
        }
        json_array_insert_new(out, 0, end);
    }
    json_array_foreach(events, i, e) {
        if (!strcmp(json_string_value(json_object_get(e, "ph")), "X")) {
            json_object_set_new(e, "ph", json_string("B"));
            json_object_del(e, "dur");
        }
        json_array_append(out, e);
    }
    json_object_set_new(root, "traceEvents", out);
    json_dump_file(root, to, 0);
    json_decref(root);
}

TB_TEST(begin_end_pairs_map_as_complete_events) {
    char x0[] = TB_TEST_TMPDIR "/map-be.x.rank-00000.json", x1[] = TB_TEST_TMPDIR "/map-be.x.rank-00001.json";
    char b0[] = TB_TEST_TMPDIR "/map-be.rank-00000.json", b1[] = TB_TEST_TMPDIR "/map-be.rank-00001.json";
    write_chrome(x0, 0, mini_step, MINI_NEV, "local");
    write_chrome(x1, 1, mini_step, MINI_NEV, "local");
    chrome_as_begin_end(x0, b0);
    chrome_as_begin_end(x1, b1);
    char *xs[] = {x0, x1}, *bs[] = {b0, b1};
    json_t *a = report_for(xs, 2, DB, "app"), *b = report_for(bs, 2, DB, "app");
    TB_REQUIRE(a && b, "both reports");
    TB_CHECK(json_integer_value(json_object_get(json_object_get(b, "coverage"), "events")) == 2 * MINI_NEV &&
                 !strcmp(str(b, "status"), "complete"),
             "every pair is a range, nothing dropped");
    static const char *const keys[] = {"traces"};
    check_same_reports(a, b, keys, 1, "X and B/E (comm args merged from B and E)");

    // what cannot be a range: an E with nothing open on its thread, a B never closed, an X
    // without a dur; counted and named, partial
    json_error_t je;
    json_t *root = json_load_file(b0, 0, &je), *events = json_object_get(root, "traceEvents");
    TB_REQUIRE(root, "%s: %s", b0, je.text);
    size_t first = json_array_size(events);
    json_array_append_new(events, json_pack("{s:s, s:s, s:f, s:i, s:i}", "name", "step", "ph", "E", "ts", 500.0,
                                            "pid", 0, "tid", 5));
    json_array_append_new(events, json_pack("{s:s, s:s, s:f, s:i, s:i}", "name", "step", "ph", "B", "ts", 600.0,
                                            "pid", 0, "tid", 6));
    json_array_append_new(events, json_pack("{s:s, s:s, s:f, s:i, s:i}", "name", "step", "ph", "X", "ts", 700.0,
                                            "pid", 0, "tid", 0));
    json_dump_file(root, b0, 0);
    json_decref(root);
    char *out, want[1024];
    int rc = mini_run(tracebook_map_main, &out, "map", b0, "--from", "app", "--index", DB, NULL);
    snprintf(want, sizeof want,
             "tracebook map: %s: dropped 3 malformed events: 1 \"X\" without a dur (first: event %zu), 1 \"E\" with "
             "no open \"B\" on its thread (first: event %zu), 1 \"B\" never closed by an \"E\" (first: event %zu)\n",
             b0, first + 2, first, first + 1);
    TB_CHECK(rc == 1 && tb_has(out, want) && tb_has(out, "PARTIAL: 3 malformed events dropped") &&
                 !tb_has(out, "(100.0%)"),
             "rc %d, expected\n%s\ngot:\n%s", rc, want, out);
    free(out);
}

// A trace is read one event at a time (core/trace_events.h): what the map keeps of an event's
// args is a communicator call's (op, bytes, or a group with its members: another tool's trace
// may name the op in the range's name only), not every range's depth.
TB_TEST(the_map_keeps_the_args_of_communicator_ranges) {
    const char *path = TB_TEST_TMPDIR "/map-args.json";
    FILE *f = fopen(path, "w");
    TB_REQUIRE(f, "%s", path);
    fputs("[{\"name\":\"layer\",\"ph\":\"X\",\"ts\":0,\"dur\":9,\"args\":{\"depth\":1}},\n"
          " {\"name\":\"comm.tp.all_reduce\",\"ph\":\"X\",\"ts\":1,\"dur\":2,"
          "\"args\":{\"group\":\"tp\",\"group_id\":3,\"group_size\":2}},\n"
          " {\"name\":\"ar\",\"ph\":\"X\",\"ts\":4,\"dur\":2,\"args\":{\"op\":\"all_reduce\",\"bytes\":64}}]\n",
          f);
    fclose(f);
    tb_rt rt;
    tb_rt_init(&rt);
    tb_error err;
    TB_REQUIRE(tb_rt_load_chrome(&rt, path, &err) == 0, "%s", err.msg);
    TB_REQUIRE(rt.nev == 3, "3 ranges, %d read", rt.nev);
    TB_CHECK(!rt.ev[0].args, "a range's depth is not kept");
    TB_CHECK(rt.ev[1].args && json_integer_value(json_object_get(rt.ev[1].args, "group_id")) == 3,
             "a range naming only its group keeps its args");
    TB_CHECK(rt.ev[2].args && json_integer_value(json_object_get(rt.ev[2].args, "bytes")) == 64,
             "a communicator call's args are kept");
    tb_rt_free(&rt);
}

// An index whose file is damaged (bytes of a page overwritten) is refused by every command.
TB_TEST(a_damaged_index_is_refused) {
    const char *bad = TB_TEST_TMPDIR "/map-damaged.sqlite";
    sqlite3 *db = tb_index_open_ro(DB);
    long root = db ? tb_index_q_long(db, "SELECT rootpage FROM sqlite_master WHERE name = 'calls'") : -1;
    sqlite3_close(db);
    size_t len = 0;
    char *bytes = tb_slurp_len(DB, &len);
    TB_REQUIRE(bytes && root > 1, "%s: %zu bytes, calls at page %ld", DB, len, root);
    // the calls table's root page gets an invalid b-tree page type (meta and the schema are intact)
    size_t page = (size_t)((unsigned char)bytes[16] << 8 | (unsigned char)bytes[17]);
    if (page == 1) page = 65536;
    TB_REQUIRE((size_t)root * page <= len, "page %ld of %zu bytes", root, len);
    bytes[(size_t)(root - 1) * page] = 0x7f;
    tb_write_bytes(bad, bytes, len);
    free(bytes);
    char *out;
    int rc = mini_run(tracebook_map_main, &out, "map", TRACE0, "--from", "app", "--index", bad, NULL);
    TB_CHECK(rc == 1 && tb_has(out, bad) && tb_has(out, "the index is damaged (SQLite's quick_check:") &&
                 !tb_has(out, "coverage"),
             "map: rc %d:\n%s", rc, out);
    free(out);
    rc = mini_run(tracebook_chain_main, &out, "chain", "--from", "app", "--to", "all_reduce", "--index", bad, NULL);
    TB_CHECK(rc == 1 && tb_has(out, "the index is damaged"), "chain: rc %d:\n%s", rc, out);
    free(out);
}

TB_TEST(walk_mini_markdown) {
    char *out;
    int rc = mini_run(tracebook_walk_main, &out, "walk", "layer.0.mlp.fc2", "--trace", TRACE0, TRACE1, "--from",
                      "app", "--index", DB, NULL);
    TB_CHECK(rc == 0, "rc %d:\n%s", rc, out);
    TB_CHECK(tb_has(out, "# Walkthrough: `layer.0.mlp.fc2`"), "title");
    TB_CHECK(tb_has(out, "1. `main` — main.c:13, passing `rank_main` to `run_ranks`") &&
                 tb_has(out, "run_ranks(rank_main);"),
             "the first hop with its source line:\n%s", out);
    TB_CHECK(tb_has(out, "`layer_forward` — train.c:") &&
                 tb_has(out, "through the function-pointer field `mini_spec.mlp`") && tb_has(out, "spec.mlp(layer);"),
             "the spec's field call:\n%s", out);
    TB_CHECK(tb_has(out, "`mlp_forward` — train.c:") && tb_has(out, "the range opens here") &&
                 tb_has(out, "TB_RANGE_PUSH(\"layer.%d.mlp.fc2\", layer);"),
             "the push:\n%s", out);
    TB_CHECK(tb_has(out, "reduce_from_tp(layer);") && tb_has(out, "end(backend->all_reduce(n));") &&
                 tb_has(out, "`local_all_reduce` — comm.c:") && tb_has(out, "static int local_all_reduce(int n) {"),
             "down to the backend:\n%s", out);
    TB_CHECK(tb_has(out, "Seen at runtime: 2× `all_reduce`"), "runtime-confirmed path:\n%s", out);
    TB_CHECK(tb_has(out, "| comm.tp.all_reduce | 0 | 1 | tp | 2 | all_reduce | float32 | 256 | 1024 |") &&
                 tb_has(out, "| comm.tp.all_reduce | 1 | 1 | tp | 2 | all_reduce | float32 | 256 | 1024 |"),
             "the collective's runtime shapes:\n%s", out);
    TB_CHECK(tb_has(out, "| 1 | 1 | 70.0 us |"), "per-rank times:\n%s", out);
    // the local chain (seen) comes before the NCCL one (not seen)
    const char *local = strstr(out, "→ `local_all_reduce`"), *nccl = strstr(out, "→ `ncclAllReduce`");
    TB_CHECK(local && nccl && local < nccl, "seen first");
    // the leg the traces did not run is static only and says what it would call; the run's
    // leg runs on the host
    TB_CHECK(tb_has(out, "**Static only** (the same collective on the backends these traces did not run): "
                         "`nccl_all_reduce` → `ncclAllReduce`.") &&
                 tb_has(out, "would call `ncclAllReduce` via `nccl_all_reduce`") &&
                 tb_has(out, "**Stream/device:** host — `local_all_reduce` runs on the CPU"),
             "static-only leg and the host:\n%s", out);
    TB_CHECK(!tb_has(out, "would call `local_all_reduce`"), "the executed leg is not static only:\n%s", out);
    free(out);
    rc = mini_run(tracebook_walk_main, &out, "walk", "layer.%d.mlp.fc2", "--from", "app", "--index", DB, NULL);
    TB_CHECK(rc == 0 && tb_has(out, "static walk only") && tb_has(out, "`local_all_reduce`"),
             "a pattern, no traces:\n%s", out);
    free(out);
    rc = mini_run(tracebook_walk_main, &out, "walk", "nothing.here", "--trace", TRACE0, "--from", "app", "--index",
                  DB, NULL);
    TB_CHECK(rc == 1 && tb_has(out, "no range site"), "unknown range:\n%s", out);
    free(out);
    // --json: the same walk's facts (the site, its chain from the entry point, the collective
    // the traces show inside it, the runtime figures), one document
    rc = mini_run(tracebook_walk_main, &out, "walk", "layer.0.mlp.fc2", "--trace", TRACE0, "--from", "app", "--index",
                  DB, "--json", NULL);
    json_t *doc = rc == 0 ? json_loads(out, 0, NULL) : NULL;
    json_t *site = json_array_get(json_object_get(doc, "sites"), 0), *coll = NULL, *c;
    size_t i;
    json_array_foreach(json_object_get(site, "collectives"), i, c) if (json_integer_value(json_object_get(c, "observed")) > 0)
        coll = c;
    TB_CHECK(doc && !strcmp(json_string_value(json_object_get(doc, "status")) ?: "", "complete") &&
                 json_array_size(json_object_get(site, "chain")) >= 2 && coll &&
                 json_integer_value(json_object_get(json_array_get(json_object_get(doc, "runtime"), 0), "count")) > 0,
             "walk --json: exit %d\n%s", rc, out);
    json_decref(doc);
    free(out);
}

// --- end to end ------------------------------------------------------------------------

#define RUN_DIR TB_TEST_TMPDIR "/map-e2e-run"
#define E2E_INDEX TB_TEST_TMPDIR "/map-project.sqlite"
#define E2E_TRACES RUN_DIR "/trace.rank-00000.json", RUN_DIR "/trace.rank-00001.json"

TB_TEST(project_map_and_walk_of_a_tp2_run) {
    if (tb_run(NULL, NULL,
               "rm -rf " RUN_DIR " && OMP_NUM_THREADS=1 " TB_BIN_DIR "/pretrain_gpt --num-layers 2 --hidden-size 64"
               " --num-attention-heads 4 --seq-length 32 --vocab-size 256 --micro-batch-size 2 --global-batch-size 4"
               " --train-iters 2 --world-size 2 --tensor-model-parallel-size 2 --run-dir " RUN_DIR " > " TB_TEST_TMPDIR
               "/map-e2e-run.log 2>&1") != 0) {
        TB_CHECK(0, "pretrain_gpt failed: see %s/map-e2e-run.log", TB_TEST_TMPDIR);
        return;
    }
    if (tb_run(NULL, NULL,
               TB_BIN_DIR "/tracebook index --compdb " TB_BIN_DIR "/../compile_commands.json --output " E2E_INDEX
                          " --quiet > " TB_TEST_TMPDIR "/map-index.log 2>&1") != 0) {
        printf("  SKIP: `tracebook index` failed on this build (see %s/map-index.log)\n", TB_TEST_TMPDIR);
        return;
    }
    char json_path[] = TB_TEST_TMPDIR "/map-e2e.report.json";
    char *out;
    int rc = mini_run(tracebook_map_main, &out, "map", E2E_TRACES, "--index", E2E_INDEX, "--output", json_path, NULL);
    TB_CHECK(rc == 0 && tb_has(out, "(100.0%)") && tb_has(out, "0 unexplained"), "rc %d:\n%.4000s", rc, out);
    free(out);
    json_error_t je;
    json_t *rep = json_load_file(json_path, 0, &je);
    TB_REQUIRE(rep, "report: %s", je.text);
    TB_CHECK(json_real_value(json_object_get(json_object_get(rep, "coverage"), "percent")) == 100.0,
             "coverage 100%% on the engine's own traces");
    TB_CHECK(json_integer_value(json_object_get(rep, "unexplained_nestings")) == 0, "every nesting explained");
    size_t i;
    json_t *x;
    json_array_foreach(json_object_get(rep, "nestings"), i, x) if (!json_is_true(json_object_get(x, "explained")))
        printf("    unexplained: %s → %s\n", str(x, "parent"), str(x, "child"));
    json_t *fc2 = range_named(rep, "layer.0.mlp.fc2");
    TB_REQUIRE(fc2, "layer.0.mlp.fc2 in the report");
    json_t *site = json_array_get(json_object_get(fc2, "sites"), 0);
    TB_CHECK(!strcmp(str(site, "function"), "mlp_forward") && !strcmp(str(site, "file"), "engine/transformer/mlp.c"),
             "site: %s in %s", str(site, "function"), str(site, "file"));
    json_t *chain = json_object_get(site, "chain");
    TB_CHECK(json_array_size(chain) > 3 && !strcmp(str(json_array_get(chain, 0), "function"), "main") &&
                 !strcmp(str(json_array_get(chain, 0), "file"), "engine/pretrain_gpt.c"),
             "the chain starts at pretrain_gpt's main");
    int found = 0;
    json_array_foreach(json_object_get(site, "collectives"), i, x) {
        if (strcmp(str(x, "end"), "local_all_reduce") || strcmp(str(x, "via"), "tb_comm_backend.all_reduce")) continue;
        json_t *hops = json_object_get(x, "hops");
        json_t *last = json_array_get(hops, json_array_size(hops) - 1);
        found = !strcmp(str(last, "file"), "engine/comm/local_backend.c") &&
                json_integer_value(json_object_get(x, "observed")) > 0;
        for (size_t k = 0; k < json_array_size(hops); k++)
            found &= k != 1 || !strcmp(str(json_array_get(hops, k), "function"), "row_parallel_linear_forward");
    }
    TB_CHECK(found, "mlp_forward → row_parallel_linear_forward → ... → local_all_reduce via tb_comm_backend.all_reduce");
    // the NCCL backend's leg (static only on a CPU run) ends at the library's function
    int nccl = !tb_project_nccl_built();
    json_array_foreach(json_object_get(site, "collectives"), i, x) {
        json_t *hops = json_object_get(x, "hops");
        json_t *last = json_array_get(hops, json_array_size(hops) - 1);
        nccl |= !strcmp(str(x, "end"), "ncclAllReduce") && tb_has(str(last, "declared_at"), "nccl.h:") &&
                tb_has(str(last, "library"), "libnccl") && json_integer_value(json_object_get(x, "observed")) == 0;
    }
    TB_CHECK(nccl, "mlp_forward → ... → nccl_all_reduce → ncclAllReduce (declared in nccl.h, defined in libnccl)");
    json_decref(rep);

    rc = mini_run(tracebook_chain_main, &out, "chain", "--from", "pretrain_gpt", "--to", "local_all_reduce", "--index",
                  E2E_INDEX, NULL);
    TB_CHECK(rc == 0 && tb_has(out, "#1 (") && tb_has(out, "local_all_reduce (engine/comm/local_backend.c:"),
             "chain:\n%s", out);
    free(out);

    rc = mini_run(tracebook_walk_main, &out, "walk", "layer.0.mlp.fc2", "--trace", E2E_TRACES, "--index", E2E_INDEX,
                  NULL);
    // (B, T, C) = (2, 32, 64) floats all-reduced over tp after fc2: 2 * 32 * 64 * 4 bytes
    char row[160];
    snprintf(row, sizeof row, "| comm.tp.all_reduce | 0 | 4 | tp | 2 | all_reduce | float32 | %d | %d |", 2 * 32 * 64,
             2 * 32 * 64 * 4);
    TB_CHECK(rc == 0 && tb_has(out, "# Walkthrough: `layer.0.mlp.fc2`") &&
                 tb_has(out, "`main` — engine/pretrain_gpt.c:") &&
                 tb_has(out, "`mlp_forward` — engine/transformer/mlp.c:") &&
                 tb_has(out, "TB_RANGE_PUSH(\"layer.%d.mlp.fc2\", layer);") &&
                 tb_has(out, "`local_all_reduce` — engine/comm/local_backend.c:") && tb_has(out, row) &&
                 (!tb_project_nccl_built() || tb_has(out, "`ncclAllReduce` — the NCCL call, declared at ")),
             "walk (%s):\n%.6000s", row, out);
    // the group: from the call's argument through the record field to the compound literal
    // that fills it and the lines naming the parallel_state kind; its members from the args
    TB_CHECK(tb_has(out, "**Group:** `tb_all_reduce` gets the group `r->tp` at engine/tensor_parallel/mappings.c:") &&
                 tb_has(out, "the field `tb_tp_region.tp` of the parameter `r`") &&
                 tb_has(out, "- engine/transformer/transformer_layer.c:") && tb_has(out, "(tb_tp_region){tp_group,") &&
                 tb_has(out, "`TB_GROUP_TP`, parallel_state's `rk->groups[TB_GROUP_TP]`") &&
                 tb_has(out, "group(rk, TB_GROUP_TP)"),
             "the group's origin:\n%.8000s", out);
    TB_CHECK(tb_has(out, "group `tp` id 0 (2 members): rank 0 (tp0 cp0 dp0 pp0) as member 0, rank 1 (tp1 cp0 dp0 pp0) "
                         "as member 1 — its members differ in tp and share cp, dp, pp."),
             "the coordinates the group spans:\n%.8000s", out);
    TB_CHECK(tb_has(out, "**Stream/device:** host — `local_all_reduce` runs on the CPU") &&
                 (!tb_project_nccl_built() ||
                  (tb_has(out, "`ncclAllReduce` is enqueued on `s->stream` (engine/comm/nccl_backend.c:") &&
                   tb_has(out, "created by `cudaStreamCreate`") &&
                   tb_has(out, "would call `ncclAllReduce` via `nccl_all_reduce`"))),
             "streams and the static-only NCCL leg:\n%.8000s", out);
    free(out);
}

int main(void) {
    mini_db_create(DB, 1);
    write_chrome(TRACE0, 0, mini_step, MINI_NEV, "local");
    write_chrome(TRACE1, 1, mini_step, MINI_NEV, "local");
    TB_RUN(patterns_match_whole_names);
    TB_RUN(the_most_specific_site_comes_first);
    TB_RUN(map_mini_traces);
    TB_RUN(map_flags_unexplained_nesting_and_unmapped_names);
    TB_RUN(nsight_sqlite_maps_as_the_chrome_trace);
    TB_RUN(map_cli_text_and_json);
    TB_RUN(a_trace_without_range_events_is_refused);
    TB_RUN(malformed_and_negative_duration_events_are_counted_and_named);
    TB_RUN(begin_end_pairs_map_as_complete_events);
    TB_RUN(the_map_keeps_the_args_of_communicator_ranges);
    TB_RUN(a_damaged_index_is_refused);
    TB_RUN(walk_mini_markdown);
    TB_RUN(project_map_and_walk_of_a_tp2_run);
    return tb_test_summary();
}
