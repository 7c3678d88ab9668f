// test_link_units.c — link units without CMake (fixtures/linkunits/, the shape of
// nccl-tests): common.c has main and runs the global ncclTestEngine, which all_reduce.c and
// all_gather.c each define; probe.c is another program with its own main; timer.c is linked
// by all. The database is a plain compile_commands.json, as bear writes for a Makefile
// project (no CMake file API reply). The indexer must infer that all_reduce.c and
// all_gather.c are in different binaries (both define ncclTestEngine), so no chain runs
// main → AllGatherRunTest → TimeTest → startColl → AllReduceRunColl, which the shared
// common.c would allow over the whole index; and a --targets file names the binaries.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "chain_output.h"
#include "core/fileio.h"
#include "index_query.h"
#include "tb_shell.h"
#include "tb_test.h"

#define TRACEBOOK TB_BIN_DIR "/tracebook"
#define LFIX TB_SOURCE_DIR "/tests/trace/fixtures/linkunits"
#define WORK TB_TEST_TMPDIR "/test_link_units"
#define SRC WORK "/src"
#define INDEX WORK "/index.sqlite"
#define MAPPED WORK "/mapped.sqlite"

static const char *const sources[] = {"common.c", "all_reduce.c", "all_gather.c", "timer.c", "probe.c"};
#define NSOURCES (sizeof sources / sizeof *sources)

static int ix_status = -1;
static char *ix_output;

// The fixture copied under WORK (so a --targets file can name it by relative paths), and
// the database bear would write for `make` there.
static int write_inputs(void) {
    tb_error err;
    if (tb_mkdir_p(SRC, &err)) return -1;
    char db[4096] = "[";
    const char *all[NSOURCES + 1];
    memcpy(all, sources, sizeof sources);
    all[NSOURCES] = "common.h";
    for (size_t i = 0; i <= NSOURCES; i++) {
        char from[1024], to[1024];
        snprintf(from, sizeof from, LFIX "/%s", all[i]);
        snprintf(to, sizeof to, SRC "/%s", all[i]);
        char *text = tb_slurp(from);
        int bad = !text || tb_write_text(to, text);
        free(text);
        if (bad) return -1;
    }
    for (size_t i = 0; i < NSOURCES; i++) {
        size_t n = strlen(db);
        snprintf(db + n, sizeof db - n,
                 "%s{\"directory\": \"" SRC "\", \"arguments\": [\"cc\", \"-O2\", \"-c\", \"-o\", \"%.*s.o\", \"%s\"],"
                 " \"file\": \"%s\"}",
                 i ? ",\n " : "", (int)(strlen(sources[i]) - 2), sources[i], sources[i], sources[i]);
    }
    strcat(db, "]\n");
    int rc = tb_write_text(WORK "/compile_commands.json", db);
    // The pause lets the file system's clock move past the writes: an input modified within
    // 20 ms of an index run's start is taken as modified during it and recorded unhashed ('~'),
    // so a re-index would parse its units again (a_reindex_keeps_the_inferred_units).
    usleep(100 * 1000);
    return rc;
}

static int indexed(void) {
    return tb_index_fixture(&ix_status, &ix_output, ix_status >= 0 || write_inputs() == 0, TRACEBOOK, WORK, INDEX);
}

static int tb(char **out, const char *index, const char *args) {
    return tb_shell(out, "'%s' %s --index '%s'", TRACEBOOK, args, index);
}

// The sources of binary `target` in the index, sorted, as "a.c b.c" (malloc'd).
static char *units_of(const char *index, const char *target) {
    char buf[1024] = "";
    sqlite3 *db = tb_index_open_ro(index);
    sqlite3_stmt *st = NULL;
    if (db && sqlite3_prepare_v2(db,
                                 "SELECT substr(f.path, length(?) + 2) AS p FROM targets t JOIN files f ON"
                                 " f.id = t.file_id WHERE t.target = ? ORDER BY p",
                                 -1, &st, NULL) == SQLITE_OK) {
        sqlite3_bind_text(st, 1, SRC, -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 2, target, -1, SQLITE_STATIC);
        while (sqlite3_step(st) == SQLITE_ROW) {
            size_t n = strlen(buf);
            snprintf(buf + n, sizeof buf - n, "%s%s", n ? " " : "", (const char *)sqlite3_column_text(st, 0));
        }
    }
    sqlite3_finalize(st);
    sqlite3_close(db);
    return strdup(buf);
}

static const char *hop(char *buf, size_t len, const char *fmt, const char *file, const char *marker) {
    char path[1024];
    snprintf(path, sizeof path, LFIX "/%s", file);
    snprintf(buf, len, fmt, tb_line_of(path, marker));
    return buf;
}

TB_TEST(inferred_link_units_never_hold_two_definitions_of_one_symbol_or_two_mains) {
    TB_REQUIRE(indexed(), "index failed (%d):\n%s", ix_status, ix_output);
    TB_CHECK(tb_has(ix_output, "3 link units inferred from the units' symbols"), "the note:\n%s", ix_output);
    const char *want[][2] = {{"common+all_reduce", "all_reduce.c common.c timer.c"},
                             {"common+all_gather", "all_gather.c common.c timer.c"},
                             {"probe", "probe.c timer.c"}};
    for (int i = 0; i < 3; i++) {
        char *got = units_of(INDEX, want[i][0]);
        TB_CHECK(!strcmp(got, want[i][1]), "binary %s: '%s', expected '%s'", want[i][0], got, want[i][1]);
        free(got);
    }
    sqlite3 *db = tb_index_open_ro(INDEX);
    TB_REQUIRE(db, "cannot open %s", INDEX);
    TB_CHECK(tb_index_q_long(db, "SELECT COUNT(DISTINCT target) FROM targets") == 3, "3 binaries");
    TB_CHECK(tb_index_q_long(db, "SELECT COUNT(*) FROM meta WHERE key = 'targets_source' AND value = 'inferred'") == 1,
             "meta targets_source = inferred");
    TB_CHECK(tb_index_q_long(db, "SELECT COUNT(*) FROM targets WHERE type = 'EXECUTABLE (inferred)'") == 8,
             "each row says it was inferred");
    sqlite3_close(db);
}

TB_TEST(a_chain_never_combines_functions_of_two_programs) {
    TB_REQUIRE(indexed(), "index failed:\n%s", ix_output);
    char *out;
    int rc = tb(&out, INDEX, "chain --from main --to AllReduceRunColl --top 100");
    char *ar = tb_chain_section(out, "common+all_reduce"), *ag = tb_chain_section(out, "common+all_gather"), *pr = tb_chain_section(out, "probe");
    char h[5][256];
    char want[2048];
    snprintf(want, sizeof want, "#1 (5 calls)\n    %s\n  → %s\n  → %s\n  → %s\n  → %s\n  → AllReduceRunColl (src/all_reduce.c:3)\n",
             hop(h[0], 256, "main (src/common.c:%d)", "common.c", "CALL_FROM_MAIN"),
             hop(h[1], 256, "run (src/common.c:%d, via testEngine.runTest)", "common.c", "CALL_RUN_TEST"),
             hop(h[2], 256, "AllReduceRunTest (src/all_reduce.c:%d)", "all_reduce.c", "CALL_AR_TIME"),
             hop(h[3], 256, "TimeTest (src/common.c:%d)", "common.c", "CALL_START_COLL"),
             hop(h[4], 256, "startColl (src/common.c:%d, via testColl.runColl)", "common.c", "CALL_RUN_COLL"));
    char *got = tb_chain_n(ar, 1);
    TB_CHECK(rc == 0 && tb_has(ar, "to AllReduceRunColl: 1\n") && !strcmp(got, want),
             "all_reduce's binary, rc %d, expected:\n%s\ngot:\n%s", rc, want, out);
    TB_CHECK(tb_has(ag, "to AllReduceRunColl: 0\n") && tb_has(pr, "to AllReduceRunColl: 0\n"),
             "all_gather's binary and probe reach no AllReduceRunColl:\n%s", out);
    TB_CHECK(!tb_has(out, "AllGather"), "no chain through AllGatherRunTest to AllReduceRunColl:\n%s", out);
    free(got);
    free(ar);
    free(ag);
    free(pr);
    free(out);

    // the other way round, and by the binary's name
    rc = tb(&out, INDEX, "chain --from common+all_gather --to AllGatherRunColl");
    TB_CHECK(rc == 0 && tb_has(out, "[common+all_gather] chains from main (src/common.c:") &&
                 tb_has(out, "to AllGatherRunColl: 1\n") && tb_has(out, "→ AllGatherRunTest (") && !tb_has(out, "AllReduce"),
             "rc %d:\n%s", rc, out);
    free(out);
    rc = tb(&out, INDEX, "chain --from common+all_gather --to AllReduceRunColl");
    TB_CHECK(rc == 1 && tb_has(out, "to AllReduceRunColl: 0\n"), "rc %d:\n%s", rc, out);
    free(out);

    // a function of the shared file: one search per group of binaries that see different units
    rc = tb(&out, INDEX, "chain --from TimeTest --to transport_send");
    TB_CHECK(rc == 0 && tb_has(out, "[common+all_gather] chains from TimeTest") &&
                 tb_has(out, "[common+all_reduce] chains from TimeTest") && !tb_has(out, "[probe]"),
             "rc %d:\n%s", rc, out);
    char *s1 = tb_chain_section(out, "common+all_gather");
    TB_CHECK(tb_has(s1, "AllGatherRunColl") && !tb_has(s1, "AllReduceRunColl"), "all_gather's:\n%s", s1);
    free(s1);
    free(out);
    // ... and one when they all see the same: timer.c's functions reach nothing else
    rc = tb(&out, INDEX, "chain --from timer_now --to timer_now");
    TB_CHECK(rc == 0 && tb_has(out, "[common+all_gather, common+all_reduce, probe] chains from timer_now"),
             "rc %d:\n%s", rc, out);
    free(out);
    // map and walk need one binary: main is ambiguous and says where
    rc = tb(&out, INDEX, "map " WORK "/no-trace.json --from main");
    TB_CHECK(rc != 0 && tb_has(out, "entry 'main' is ambiguous") && tb_has(out, "[common+all_reduce]") &&
                 tb_has(out, "[probe]"),
             "rc %d:\n%s", rc, out);
    free(out);
}

TB_TEST(a_reindex_keeps_the_inferred_units) {
    TB_REQUIRE(indexed(), "index failed:\n%s", ix_output);
    char *before = units_of(INDEX, "common+all_reduce"), *out;
    int rc = tb_shell(&out, "'%s' index --compdb '%s' --output '%s'", TRACEBOOK, WORK, INDEX);
    char *after = units_of(INDEX, "common+all_reduce");
    TB_CHECK(rc == 0 && tb_has(out, "TUs parsed 0, reused 5") && !strcmp(before, after) && *after,
             "rc %d, before '%s', after '%s':\n%s", rc, before, after, out);
    free(before);
    free(after);
    free(out);
}

TB_TEST(a_targets_file_names_the_binaries) {
    TB_REQUIRE(indexed(), "index failed:\n%s", ix_output);
    TB_REQUIRE(tb_write_text(WORK "/targets.json",
                             "{\"all_reduce_perf\": [\"src/common.c\", \"src/all_reduce.c\", \"src/timer.c\"],\n"
                             " \"all_gather_perf\": [\"src/common.c\", \"" SRC "/all_gather.c\", \"src/timer.c\"]}\n") == 0,
               "cannot write the targets file");
    char *out;
    int rc = tb_shell(&out, "'%s' index --compdb '%s' --output '%s' --targets '%s'", TRACEBOOK, WORK, MAPPED,
                      WORK "/targets.json");
    TB_REQUIRE(rc == 0, "rc %d:\n%s", rc, out);
    TB_CHECK(!tb_has(out, "inferred") && !tb_has(out, "warning"), "no inference, no warning:\n%s", out);
    free(out);
    char *units = units_of(MAPPED, "all_gather_perf");
    TB_CHECK(!strcmp(units, "all_gather.c common.c timer.c"), "all_gather_perf: '%s'", units);
    free(units);
    rc = tb(&out, MAPPED, "chain --from main --to AllReduceRunColl");
    TB_CHECK(rc == 0 && tb_has(out, "[all_reduce_perf] chains from main (src/common.c:") &&
                 tb_has(out, "[all_gather_perf] chains from main (src/common.c:") && !tb_has(out, "AllGather"),
             "rc %d:\n%s", rc, out);
    free(out);
    sqlite3 *db = tb_index_open_ro(MAPPED);
    TB_REQUIRE(db, "cannot open %s", MAPPED);
    TB_CHECK(tb_index_q_long(db, "SELECT COUNT(*) FROM meta WHERE key = 'targets_source' AND value = 'targets-file'") ==
                 1,
             "meta targets_source = targets-file");
    sqlite3_close(db);
}

TB_TEST(a_bad_targets_file_is_refused_naming_what_is_wrong) {
    TB_REQUIRE(indexed(), "index failed:\n%s", ix_output);
    const struct {
        const char *text, *says;
    } bad[] = {
        {"{\"a\": [\"src/common.c\", \"src/nope.c\"]}", "binary 'a': 'src/nope.c' (" SRC "/nope.c) is not a unit of the compilation database"},
        {"{\"a\": [\"src/common.c\",\n ]}", "targets.json:2:"},
        {"[\"src/common.c\"]", "expected an object of binaries to their sources"},
        {"{\"a\": \"src/common.c\"}", "binary 'a': expected a non-empty array of source paths"},
        {"{\"a\": [\"src/common.c\", 3]}", "binary 'a': source 2 is not a path"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        TB_REQUIRE(tb_write_text(WORK "/targets.json", bad[i].text) == 0, "cannot write the targets file");
        unlink(WORK "/bad.sqlite");
        char *out;
        int rc = tb_shell(&out, "'%s' index --compdb '%s' --output '%s' --targets '%s'", TRACEBOOK, WORK,
                          WORK "/bad.sqlite", WORK "/targets.json");
        TB_CHECK(rc == 1 && tb_has(out, bad[i].says) && !tb_exists(WORK "/bad.sqlite"),
                 "%s: rc %d, expected '%s':\n%s", bad[i].text, rc, bad[i].says, out);
        free(out);
    }
    char *out;
    int rc = tb_shell(&out, "'%s' index --compdb '%s' --output '%s' --targets '%s'", TRACEBOOK, WORK, WORK "/bad.sqlite",
                      WORK "/missing.json");
    TB_CHECK(rc == 1 && tb_has(out, "--targets " WORK "/missing.json: cannot read it"), "rc %d:\n%s", rc, out);
    free(out);
    // a binary no linker could build: used as given, with a warning naming the symbol
    TB_REQUIRE(tb_write_text(WORK "/targets.json",
                             "{\"both\": [\"src/common.c\", \"src/all_reduce.c\", \"src/all_gather.c\", \"src/timer.c\"]}") ==
                   0,
               "cannot write the targets file");
    rc = tb_shell(&out, "'%s' index --compdb '%s' --output '%s' --targets '%s'", TRACEBOOK, WORK, WORK "/bad.sqlite",
                  WORK "/targets.json");
    TB_CHECK(rc == 0 && tb_has(out, "warning: binary 'both' holds " SRC "/all_reduce.c and " SRC
                                    "/all_gather.c, which both define ncclTestEngine"),
             "rc %d:\n%s", rc, out);
    free(out);
}

// A program whose main calls a() and b(), each defined by 9 units that conflict with each
// other: 81 ways to link it, more than the 64 choices a seed keeps. The warning says some
// binaries may be missing; a re-index that keeps the inferred link units (main.c changed,
// none of its symbols) says it again, since the index it leaves is still cut the same way.
#define CAPPED WORK "/capped"
TB_TEST(more_ways_to_link_than_kept_is_warned_about_by_every_index_that_keeps_them) {
    tb_error err;
    TB_REQUIRE(tb_mkdir_p(CAPPED, &err) == 0, "%s", err.msg);
    char db[8192] = "[", path[1024], text[256];
    char names[19][16];
    for (int i = 0; i < 19; i++) {
        if (i == 0) snprintf(names[i], sizeof names[i], "main.c");
        else snprintf(names[i], sizeof names[i], "%c%d.c", i <= 9 ? 'a' : 'b', (i - 1) % 9 + 1);
        if (i == 0) snprintf(text, sizeof text, "int a(void);\nint b(void);\nint main(void) { return a() + b(); }\n");
        else snprintf(text, sizeof text, "int %c(void) { return %d; }\n", names[i][0], i);
        snprintf(path, sizeof path, CAPPED "/%s", names[i]);
        TB_REQUIRE(tb_write_text(path, text) == 0, "cannot write %s", path);
        size_t n = strlen(db);
        snprintf(db + n, sizeof db - n,
                 "%s{\"directory\": \"" CAPPED "\", \"arguments\": [\"cc\", \"-c\", \"%s\"], \"file\": \"%s\"}",
                 i ? ",\n " : "", names[i], names[i]);
    }
    strcat(db, "]\n");
    TB_REQUIRE(tb_write_text(CAPPED "/compile_commands.json", db) == 0, "cannot write the database");
    usleep(100 * 1000);  // past the index's "modified while indexed" window (write_inputs)
    const char *warning = "warning: 1 unit could link with more choices of units than are kept (64 per unit)";
    char *out;
    unlink(CAPPED "/index.sqlite");
    int rc = tb_shell(&out, "'%s' index --compdb '%s' --output '%s'", TRACEBOOK, CAPPED, CAPPED "/index.sqlite");
    TB_CHECK(rc == 0 && tb_has(out, warning) && tb_has(out, "TUs parsed 19"), "rc %d:\n%s", rc, out);
    free(out);
    TB_REQUIRE(tb_write_text(CAPPED "/main.c", "int a(void);\nint b(void);\nint main(void) { return a() + b(); }\n"
                                               "// changed: no symbol\n") == 0,
               "cannot change main.c");
    usleep(100 * 1000);
    rc = tb_shell(&out, "'%s' index --compdb '%s' --output '%s'", TRACEBOOK, CAPPED, CAPPED "/index.sqlite");
    TB_CHECK(rc == 0 && tb_has(out, "TUs parsed 1, reused 18") && tb_has(out, "the link units inferred before stand") &&
                 tb_has(out, warning),
             "the re-index keeping the inferred units: rc %d:\n%s", rc, out);
    free(out);
    sqlite3 *ix = tb_index_open_ro(CAPPED "/index.sqlite");
    TB_REQUIRE(ix, "cannot open the index");
    TB_CHECK(tb_index_q_long(ix, "SELECT COUNT(*) FROM meta WHERE key = 'link_units_capped' AND value = '1'") == 1,
             "the updated index still says 1 unit was capped (meta link_units_capped)");
    sqlite3_close(ix);
}

int main(void) {
    TB_RUN(inferred_link_units_never_hold_two_definitions_of_one_symbol_or_two_mains);
    TB_RUN(a_chain_never_combines_functions_of_two_programs);
    TB_RUN(a_reindex_keeps_the_inferred_units);
    TB_RUN(a_targets_file_names_the_binaries);
    TB_RUN(a_bad_targets_file_is_refused_naming_what_is_wrong);
    TB_RUN(more_ways_to_link_than_kept_is_warned_about_by_every_index_that_keeps_them);
    free(ix_output);
    return tb_test_summary();
}
