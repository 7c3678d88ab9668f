// `tracebook index` incremental re-indexing: a copy of the basic fixture (tests/trace/fixtures/
// basic, copied into the test's temporary directory with a third unit that does not include
// fx.h; the repository's fixture files are never modified) is indexed, changed and indexed
// again. After every step the index must equal a --full index of the same sources (every
// table, compared row for row: tb_index_dump), and the summary must say which units were parsed.
#include <sqlite3.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/fileio.h"
#include "index_db.h"
#include "index_query.h"
#include "tb_shell.h"
#include "tb_test.h"

#define TRACEBOOK TB_BIN_DIR "/tracebook"
#define FIX TB_SOURCE_DIR "/tests/trace/fixtures/basic"
#define WORK TB_TEST_TMPDIR "/test_reindex"
#define SRC WORK "/src"
#define OUT WORK "/index.sqlite"
#define FULL WORK "/full.sqlite"

static int copy_file(const char *from, const char *to) {
    char *s = tb_slurp(from);
    if (!s) return -1;
    int rc = tb_write_text(to, s);
    free(s);
    return rc;
}

// Edits: the file with `cut` removed (first occurrence) and `add` appended. The pause lets the
// file system's clock move past the edit (an input modified within 20 ms of a run's start is
// taken as modified during it, so its units would be parsed once more next time).
static int edit(const char *path, const char *cut, const char *add) {
    char *s = tb_slurp(path);
    if (!s) return -1;
    if (cut) {
        char *hit = strstr(s, cut);
        if (!hit) {
            free(s);
            return -1;
        }
        memmove(hit, hit + strlen(cut), strlen(hit + strlen(cut)) + 1);
    }
    FILE *f = fopen(path, "w");
    if (!f) return -1;
    fputs(s, f);
    if (add) fputs(add, f);
    free(s);
    int rc = fclose(f);
    usleep(100 * 1000);
    return rc;
}

static tb_output sh;  // what the last command printed (stdout and stderr together)

// The units ("main util extra", in any order of entries) the database lists, the extra unit's flags.
static int write_compdb(const char *units, const char *extra_flags) {
    char buf[8192];
    size_t n = 0;
    n += (size_t)snprintf(buf + n, sizeof buf - n, "[\n");
    const char *names[] = {"main", "util", "extra"};
    int first = 1;
    for (int i = 0; i < 3; i++) {
        if (!strstr(units, names[i])) continue;
        n += (size_t)snprintf(buf + n, sizeof buf - n,
                              "%s {\"directory\": \"" SRC "\", \"command\": \"cc -std=c17 %s -c %s.c\", \"file\": \"%s.c\"}\n",
                              first ? "" : ",", i == 2 ? extra_flags : "", names[i], names[i]);
        first = 0;
    }
    snprintf(buf + n, sizeof buf - n, "]\n");
    return tb_write_text(SRC "/compile_commands.json", buf);
}

// "TUs parsed N, reused M" from the summary; -1 when missing.
static int parsed, reused;
static int index_run(const char *out, const char *extra) {
    int st = tb_run_merged(&sh, NULL, "'%s' index --compdb '%s' --output '%s' -j 2 %s", TRACEBOOK, SRC, out,
                           extra ? extra : "");
    parsed = reused = -1;
    const char *p = strstr(sh.out, "TUs parsed ");
    if (p) sscanf(p, "TUs parsed %d, reused %d", &parsed, &reused);
    return st;
}

static long q_long(const char *path, const char *fmt, ...) {
    sqlite3 *db = tb_index_open_ro(path);
    if (!db) return -1;
    va_list ap;
    va_start(ap, fmt);
    long v = tb_index_vq_long(db, fmt, ap);
    va_end(ap);
    sqlite3_close(db);
    return v;
}

// The incremental index equals a --full one of the same sources.
static int same_as_full(void) {
    unlink(FULL);
    return index_run(FULL, "--full") == 0 && tb_index_same("incremental", OUT, "full", FULL);
}

#define MAIN_USR "c:" SRC "/main.c@F@main"

TB_TEST(reindexing_parses_exactly_the_units_whose_inputs_changed) {
    tb_error err;
    TB_REQUIRE(tb_mkdir_p(SRC, &err) == 0, "%s", err.msg);
    TB_REQUIRE(copy_file(FIX "/main.c", SRC "/main.c") == 0 && copy_file(FIX "/util.c", SRC "/util.c") == 0 &&
                   copy_file(FIX "/fx.h", SRC "/fx.h") == 0,
               "cannot copy the fixture");
    TB_REQUIRE(tb_write_text(SRC "/extra.c",
                          "int extra_leaf(int x) { return x; }\n"
                          "#ifdef X\nint extra_x(void) { return extra_leaf(1); }\n#endif\n"
                          "int extra_run(int x) { return extra_leaf(x) + 1; }\n") == 0,
               "cannot write extra.c");
    TB_REQUIRE(write_compdb("main util extra", "") == 0, "cannot write the database");
    usleep(100 * 1000);
    unlink(OUT);

    // A first index: everything parsed.
    TB_REQUIRE(index_run(OUT, NULL) == 0, "index failed:\n%s", sh.out);
    TB_CHECK(parsed == 3 && reused == 0, "first run: parsed %d reused %d\n%s", parsed, reused, sh.out);
    TB_CHECK(strstr(sh.out, "files/s") && strstr(sh.out, "lines/s") && strstr(sh.out, "wall"), "the figures line:\n%s",
             sh.out);
    char *before = tb_index_dump(OUT);

    // Nothing changed: nothing parsed, the same index.
    TB_REQUIRE(index_run(OUT, NULL) == 0, "re-index failed:\n%s", sh.out);
    TB_CHECK(parsed == 0 && reused == 3, "unchanged: parsed %d reused %d\n%s", parsed, reused, sh.out);
    char *after = tb_index_dump(OUT);
    TB_CHECK(before && after && !strcmp(before, after), "an unchanged re-index changed the index");
    free(before);
    free(after);
    TB_CHECK(same_as_full(), "unchanged: differs from a full index");

    // main.c changed (it contributed the body of fx.h's fx_twice, which util.c also defines):
    // only main.c is parsed; the removed call is gone, the new function is there, fx_twice and
    // its calls are still there once.
    TB_REQUIRE(edit(SRC "/main.c", "    v += util_run(v);  // CALL_UTIL_RUN\n",
                    "int main_added(int x) { return run_a(x); }\n") == 0,
               "cannot edit main.c");
    TB_REQUIRE(index_run(OUT, NULL) == 0, "re-index failed:\n%s", sh.out);
    TB_CHECK(parsed == 1 && reused == 2, "main.c changed: parsed %d reused %d\n%s", parsed, reused, sh.out);
    TB_CHECK(q_long(OUT, "SELECT COUNT(*) FROM functions WHERE name = 'main_added' AND is_definition = 1") == 1,
             "the new function");
    TB_CHECK(q_long(OUT,
                    "SELECT COUNT(*) FROM calls c JOIN functions f ON f.id = c.caller_id WHERE f.usr = %Q"
                    " AND c.callee_name = 'util_run'",
                    MAIN_USR) == 0,
             "the removed call main -> util_run is gone");
    TB_CHECK(q_long(OUT,
                    "SELECT COUNT(*) FROM calls c JOIN functions f ON f.id = c.caller_id WHERE f.usr = %Q"
                    " AND c.callee_name = 'fx_twice'",
                    MAIN_USR) == 1,
             "main's other calls are there");
    TB_CHECK(q_long(OUT, "SELECT COUNT(*) FROM functions WHERE name = 'fx_twice'") == 1, "fx_twice: one row");
    TB_CHECK(q_long(OUT,
                    "SELECT COUNT(*) FROM calls c JOIN functions f ON f.id = c.caller_id WHERE f.name = 'fx_twice'") ==
                 2,
             "fx_twice's two calls of work, once");
    TB_CHECK(same_as_full(), "main.c changed: differs from a full index");

    // The header changed: the two units that include it, not extra.c.
    TB_REQUIRE(edit(SRC "/fx.h", NULL, "static inline int fx_added(void) { return 7; }\n") == 0, "cannot edit fx.h");
    TB_REQUIRE(index_run(OUT, NULL) == 0, "re-index failed:\n%s", sh.out);
    TB_CHECK(parsed == 2 && reused == 1, "fx.h changed: parsed %d reused %d\n%s", parsed, reused, sh.out);
    TB_CHECK(q_long(OUT, "SELECT COUNT(*) FROM functions WHERE name = 'fx_added'") == 1, "fx.h's new function");
    TB_CHECK(same_as_full(), "fx.h changed: differs from a full index");

    // One unit's flags changed (-DX): that unit only.
    TB_REQUIRE(write_compdb("main util extra", "-DX") == 0, "cannot write the database");
    usleep(100 * 1000);
    TB_REQUIRE(index_run(OUT, NULL) == 0, "re-index failed:\n%s", sh.out);
    TB_CHECK(parsed == 1 && reused == 2, "-DX: parsed %d reused %d\n%s", parsed, reused, sh.out);
    TB_CHECK(q_long(OUT, "SELECT COUNT(*) FROM functions WHERE name = 'extra_x'") == 1, "extra_x under -DX");
    TB_CHECK(same_as_full(), "-DX: differs from a full index");

    // A unit removed from the database: its rows are gone.
    TB_REQUIRE(write_compdb("main extra", "-DX") == 0, "cannot write the database");
    usleep(100 * 1000);
    TB_REQUIRE(index_run(OUT, NULL) == 0, "re-index failed:\n%s", sh.out);
    TB_CHECK(parsed == 0 && reused == 2, "util.c removed: parsed %d reused %d\n%s", parsed, reused, sh.out);
    TB_CHECK(q_long(OUT, "SELECT COUNT(*) FROM files WHERE path = %Q", SRC "/util.c") == 0, "util.c's file row");
    TB_CHECK(q_long(OUT, "SELECT COUNT(*) FROM functions WHERE is_definition = 1 AND"
                    " name IN ('run_b', 'util_run', 'launch_ranks')") == 0,
             "util.c's functions");
    TB_CHECK(q_long(OUT, "SELECT COUNT(*) FROM functions WHERE name = 'work' AND is_definition = 1") == 0,
             "work is only declared now");
    TB_CHECK(q_long(OUT, "SELECT COUNT(*) FROM tu_inputs") == 2 && tb_index_stray_unit_rows(OUT) == 0,
             "util.c's unit rows: %ld units' inputs, %ld rows of no unit",
             q_long(OUT, "SELECT COUNT(*) FROM tu_inputs"), tb_index_stray_unit_rows(OUT));
    TB_CHECK(same_as_full(), "util.c removed: differs from a full index");

    // A new unit (util.c again) is parsed, the rest reused.
    TB_REQUIRE(write_compdb("main util extra", "-DX") == 0, "cannot write the database");
    usleep(100 * 1000);
    TB_REQUIRE(index_run(OUT, NULL) == 0, "re-index failed:\n%s", sh.out);
    TB_CHECK(parsed == 1 && reused == 2, "util.c added: parsed %d reused %d\n%s", parsed, reused, sh.out);
    TB_CHECK(same_as_full(), "util.c added: differs from a full index");

    // --full parses everything.
    TB_REQUIRE(index_run(OUT, "--full") == 0, "full re-index failed:\n%s", sh.out);
    TB_CHECK(parsed == 3 && reused == 0, "--full: parsed %d reused %d\n%s", parsed, reused, sh.out);
}

TB_TEST(an_index_of_another_schema_is_not_reused) {
    // An old index (schema 2; this indexer writes TB_INDEX_SCHEMA_VERSION) at --out: a full index over it, with a note.
    unlink(OUT);
    sqlite3 *db = NULL;
    TB_REQUIRE(sqlite3_open(OUT, &db) == SQLITE_OK, "cannot create %s", OUT);
    sqlite3_exec(db, "CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT); INSERT INTO meta VALUES('schema_version','2');"
                     " CREATE TABLE functions(id INTEGER); CREATE TABLE calls(caller INTEGER);",
                 NULL, NULL, NULL);
    sqlite3_close(db);
    TB_REQUIRE(index_run(OUT, NULL) == 0, "index failed:\n%s", sh.out);
    TB_CHECK(parsed == 3 && reused == 0, "parsed %d reused %d\n%s", parsed, reused, sh.out);
    TB_CHECK(strstr(sh.out, "another schema version") != NULL, "the note:\n%s", sh.out);
    TB_CHECK(q_long(OUT, "SELECT COUNT(*) FROM meta WHERE key = 'schema_version' AND value = '" TB_INDEX_SCHEMA_VERSION
                         "'") == 1,
             "schema " TB_INDEX_SCHEMA_VERSION);
}

// A unit's packed record that does not unpack (index_unit_rows.h) is not trusted: a re-index
// that merges every unit again parses that unit instead of reusing its facts, and the index
// equals a full one.
TB_TEST(a_malformed_unit_record_has_its_unit_parsed_again) {
    TB_REQUIRE(write_compdb("main util extra", "") == 0, "cannot write the database");
    usleep(100 * 1000);
    TB_REQUIRE(index_run(OUT, "--collective tb_nothing") == 0, "index failed:\n%s", sh.out);
    sqlite3 *db = NULL;
    TB_REQUIRE(sqlite3_open(OUT, &db) == SQLITE_OK, "cannot open %s", OUT);
    char *sql = sqlite3_mprintf("UPDATE tu_calls SET rows = x'05' WHERE tu_id = (SELECT id FROM files WHERE path = %Q)",
                                SRC "/util.c");
    int rc = sqlite3_exec(db, sql, NULL, NULL, NULL);
    int changed = sqlite3_changes(db);
    sqlite3_free(sql);
    sqlite3_close(db);
    TB_REQUIRE(rc == SQLITE_OK && changed == 1, "cannot damage util.c's record");
    // a changed --collective list: every unit merged again, the unchanged ones' facts read back
    TB_REQUIRE(index_run(OUT, NULL) == 0, "re-index failed:\n%s", sh.out);
    TB_CHECK(parsed == 1 && reused == 2, "util.c parsed again: parsed %d reused %d\n%s", parsed, reused, sh.out);
    TB_CHECK(same_as_full(), "after a damaged record: differs from a full index");
}

// The same met by an update in place: a parsed unit touches a function, so the update reads every
// unit's tu_functions record (its second pass), or every unit's tu_symbols record (whether the
// link units inferred from them stand: this fixture has no CMake reply), and finds util.c's
// damaged; or it reads the parsed unit's own tu_deps record (main.c's, damaged) to replace it; or
// fx.h changed and its input_units record (the units that read it) is damaged: every unit's
// inputs are compared instead, and the update does not apply, so that the full merge writes that
// table anew. Each time the update says why it does not apply and asks for no --full, the damaged
// unit is parsed again, and the index equals a full one.
TB_TEST(a_malformed_record_met_by_an_update_in_place_falls_back_to_the_full_merge) {
    static const struct {
        const char *damage;  // SQL, %Q: the path it names
        const char *of, *edit, *says;
        int parsed;
    } cases[] = {
        {"UPDATE tu_functions SET rows = x'05' WHERE tu_id = (SELECT id FROM files WHERE path = %Q)", SRC "/util.c",
         SRC "/main.c", "a unit's tu_functions record is malformed: its unit is parsed again", 2},
        {"UPDATE tu_symbols SET rows = x'05' WHERE tu_id = (SELECT id FROM files WHERE path = %Q)", SRC "/util.c",
         SRC "/main.c", "a unit's tu_symbols record is malformed: its unit is parsed again", 2},
        {"UPDATE tu_deps SET rows = x'05' WHERE tu_id = (SELECT id FROM files WHERE path = %Q)", SRC "/main.c",
         SRC "/main.c", "a unit's tu_deps record is malformed: its unit is parsed again", 1},
        {"UPDATE input_units SET units = x'0100' WHERE path = %Q", SRC "/fx.h", SRC "/fx.h",
         "a file's input_units record is malformed: the full merge writes it anew", 2},
    };
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
        TB_REQUIRE(write_compdb("main util extra", "") == 0, "cannot write the database");
        usleep(100 * 1000);
        TB_REQUIRE(index_run(OUT, NULL) == 0, "index failed:\n%s", sh.out);
        sqlite3 *db = NULL;
        TB_REQUIRE(sqlite3_open(OUT, &db) == SQLITE_OK, "cannot open %s", OUT);
        char *sql = sqlite3_mprintf(cases[k].damage, cases[k].of);
        int rc = sqlite3_exec(db, sql, NULL, NULL, NULL);
        int changed = sqlite3_changes(db);
        sqlite3_free(sql);
        sqlite3_close(db);
        TB_REQUIRE(rc == SQLITE_OK && changed == 1, "case %zu: cannot damage the record of %s", k, cases[k].of);
        char add[96], says[200];
        snprintf(add, sizeof add, "int main_again%zu(int x) { return x; }\n", k);
        TB_REQUIRE(edit(cases[k].edit, NULL, add) == 0, "cannot edit %s", cases[k].edit);
        TB_REQUIRE(index_run(OUT, "--verbose") == 0, "re-index failed:\n%s", sh.out);
        TB_CHECK(parsed == cases[k].parsed && reused == 3 - cases[k].parsed, "case %zu: parsed %d reused %d\n%s", k,
                 parsed, reused, sh.out);
        snprintf(says, sizeof says, "not updated in place (%s): every unit merged again", cases[k].says);
        TB_CHECK(tb_has(sh.out, says), "case %zu: the update says why it does not apply:\n%s", k, sh.out);
        TB_CHECK(!tb_has(sh.out, "--full"), "case %zu: nothing asks for --full:\n%s", k, sh.out);
        TB_CHECK(same_as_full(), "case %zu: after a damaged record met by an update: differs from a full index", k);
    }
}

// The units a re-index will parse again (an input file changed) start parsing from the command
// line the previous index recorded, before the compilation database is read
// (trace/index_speculate.h): such a parse stands only when the database gives its unit the same
// command line; else it is dropped and the unit parsed with the new one. A unit whose record does
// not unpack is not parsed early, and its record is written whole again. Each time the index
// equals a full one; the order of the database's units changed (the full merge, each unit
// written as it comes) takes such parses too.
static int speculated(const char *out, int n, int taken) {
    char says[256];
    snprintf(says, sizeof says, "%d unit%s parsed from the command line%s the previous index recorded, before the "
                                "compilation database was read: %d taken (the database gives the same), %d dropped",
             n, n == 1 ? "" : "s", n == 1 ? "" : "s", taken, n - taken);
    return tb_has(out, says);
}

TB_TEST(a_speculative_parse_stands_only_for_the_same_command_line) {
    TB_REQUIRE(write_compdb("main util extra", "") == 0, "cannot write the database");
    usleep(100 * 1000);
    TB_REQUIRE(index_run(OUT, "--full") == 0, "index failed:\n%s", sh.out);

    // extra.c changed: parsed from its recorded command line, which the database still gives
    TB_REQUIRE(edit(SRC "/extra.c", NULL, "int extra_more(void) { return extra_leaf(2); }\n") == 0, "cannot edit");
    TB_REQUIRE(index_run(OUT, "--verbose") == 0, "re-index failed:\n%s", sh.out);
    TB_CHECK(parsed == 1 && reused == 2 && speculated(sh.out, 1, 1), "extra.c changed: parsed %d reused %d\n%s",
             parsed, reused, sh.out);
    TB_CHECK(q_long(OUT, "SELECT COUNT(*) FROM functions WHERE name = 'extra_more'") == 1, "extra_more");
    TB_CHECK(same_as_full(), "extra.c changed: differs from a full index");

    // fx.h changed: its two units, both early (-j 2)
    TB_REQUIRE(edit(SRC "/fx.h", NULL, "static inline int fx_more(void) { return 8; }\n") == 0, "cannot edit fx.h");
    TB_REQUIRE(index_run(OUT, "--verbose") == 0, "re-index failed:\n%s", sh.out);
    TB_CHECK(parsed == 2 && reused == 1 && speculated(sh.out, 2, 2), "fx.h changed: parsed %d reused %d\n%s", parsed,
             reused, sh.out);
    TB_CHECK(same_as_full(), "fx.h changed: differs from a full index");

    // extra.c changed and its command line too (-DX): the early parse (without X) is dropped
    TB_REQUIRE(edit(SRC "/extra.c", NULL, "int extra_most(void) { return extra_leaf(3); }\n") == 0, "cannot edit");
    TB_REQUIRE(write_compdb("main util extra", "-DX") == 0, "cannot write the database");
    usleep(100 * 1000);
    TB_REQUIRE(index_run(OUT, "--verbose") == 0, "re-index failed:\n%s", sh.out);
    TB_CHECK(parsed == 1 && reused == 2 && speculated(sh.out, 1, 0), "-DX: parsed %d reused %d\n%s", parsed, reused,
             sh.out);
    TB_CHECK(q_long(OUT, "SELECT COUNT(*) FROM functions WHERE name IN ('extra_x', 'extra_most')") == 2,
             "extra_x (under -DX) and extra_most");
    TB_CHECK(same_as_full(), "-DX: differs from a full index");

    // extra.c's command record damaged, then extra.c changed: not parsed early, its row whole again
    sqlite3 *db = NULL;
    TB_REQUIRE(sqlite3_open(OUT, &db) == SQLITE_OK, "cannot open %s", OUT);
    char *sql = sqlite3_mprintf("UPDATE tu_inputs SET command = x'05' WHERE tu_id = (SELECT id FROM files WHERE path"
                                " = %Q)", SRC "/extra.c");
    int rc = sqlite3_exec(db, sql, NULL, NULL, NULL);
    int changed = sqlite3_changes(db);
    sqlite3_free(sql);
    sqlite3_close(db);
    TB_REQUIRE(rc == SQLITE_OK && changed == 1, "cannot damage extra.c's command record");
    TB_REQUIRE(edit(SRC "/extra.c", NULL, "int extra_last(void) { return 4; }\n") == 0, "cannot edit extra.c");
    TB_REQUIRE(index_run(OUT, "--verbose") == 0, "re-index failed:\n%s", sh.out);
    TB_CHECK(parsed == 1 && reused == 2 && !tb_has(sh.out, "parsed from the command line"),
             "damaged record: parsed %d reused %d\n%s", parsed, reused, sh.out);
    TB_CHECK(same_as_full(), "damaged command record: differs from a full index");

    // two units, then the other order and fx.h changed: every unit parsed, no update in place
    TB_REQUIRE(write_compdb("main util", "") == 0, "cannot write the database");
    usleep(100 * 1000);
    TB_REQUIRE(index_run(OUT, NULL) == 0, "index failed:\n%s", sh.out);
    TB_REQUIRE(tb_write_text(SRC "/compile_commands.json",
                             "[{\"directory\": \"" SRC "\", \"command\": \"cc -std=c17  -c util.c\","
                             " \"file\": \"util.c\"},\n {\"directory\": \"" SRC "\","
                             " \"command\": \"cc -std=c17  -c main.c\", \"file\": \"main.c\"}]\n") == 0,
               "cannot write the database");
    TB_REQUIRE(edit(SRC "/fx.h", NULL, "static inline int fx_again(void) { return 9; }\n") == 0, "cannot edit fx.h");
    TB_REQUIRE(index_run(OUT, "--verbose") == 0, "re-index failed:\n%s", sh.out);
    TB_CHECK(parsed == 2 && reused == 0 && speculated(sh.out, 2, 2) && tb_has(sh.out, "in another order"),
             "reordered: parsed %d reused %d\n%s", parsed, reused, sh.out);
    TB_CHECK(same_as_full(), "reordered: differs from a full index");
    TB_REQUIRE(write_compdb("main util extra", "") == 0, "cannot write the database");  // (as the next test expects)
    usleep(100 * 1000);
}

// --output names a file that is not an index (the compilation database, a source, another
// program's SQLite database, a directory): refused before anything is parsed, the file as it
// was; an empty file is replaced.
TB_TEST(an_output_that_is_not_an_index_is_refused_and_kept) {
    static const char *const kinds[] = {"text", "compdb", "sqlite", "dir"};
    char path[256];
    for (int k = 0; k < 4; k++) {
        snprintf(path, sizeof path, k == 1 ? SRC "/compile_commands.json" : WORK "/not-an-index.%s", kinds[k]);
        if (k == 0) tb_write_text(path, "notes\n");
        if (k == 2) {
            sqlite3 *db = NULL;
            unlink(path);
            TB_REQUIRE(sqlite3_open(path, &db) == SQLITE_OK, "cannot create %s", path);
            sqlite3_exec(db, "CREATE TABLE meta(key TEXT, value TEXT); INSERT INTO meta VALUES('schema_version','4');"
                             " CREATE TABLE runs(run_id TEXT);",
                         NULL, NULL, NULL);
            sqlite3_close(db);
        }
        if (k == 3) tb_mkdir_p(path, NULL);
        size_t before_len = 0, after_len = 0;
        char *before = k == 3 ? NULL : tb_slurp_len(path, &before_len);
        int st = index_run(path, NULL);
        char *after = k == 3 ? NULL : tb_slurp_len(path, &after_len);
        char want[512];
        snprintf(want, sizeof want, "tracebook index: --output %s ", path);
        TB_CHECK(st == 1 && strstr(sh.out, want) && strstr(sh.out, "not replaced") && parsed == -1,
                 "%s: exit %d:\n%s", kinds[k], st, sh.out);
        TB_CHECK(before_len == after_len && (!before || !memcmp(before, after, before_len)), "%s: kept as it was",
                 kinds[k]);
        free(before);
        free(after);
    }
    snprintf(path, sizeof path, WORK "/empty.sqlite");
    tb_write_text(path, "");
    TB_CHECK(index_run(path, NULL) == 0 && parsed == 3, "an empty file is replaced:\n%s", sh.out);
    TB_REQUIRE(write_compdb("main util extra", "") == 0, "compdb written back");
}

int main(void) {
    tb_error err;
    if (tb_mkdir_p(WORK, &err)) {
        printf("%s\n", err.msg);
        return 1;
    }
    TB_RUN(reindexing_parses_exactly_the_units_whose_inputs_changed);
    TB_RUN(an_index_of_another_schema_is_not_reused);
    TB_RUN(a_malformed_unit_record_has_its_unit_parsed_again);
    TB_RUN(a_malformed_record_met_by_an_update_in_place_falls_back_to_the_full_merge);
    TB_RUN(a_speculative_parse_stands_only_for_the_same_command_line);
    TB_RUN(an_output_that_is_not_an_index_is_refused_and_kept);
    tb_output_free(&sh);
    return tb_test_summary();
}
