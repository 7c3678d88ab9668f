// test_index_equal.c — an index built the fast way equals one built the plain way, table for
// table (tb_index_dump: every table, the tu_* ones too, ids replaced by paths and USRs). The
// fast way: parallel parses (-j 2) and re-indexes that update the previous index file in place
// by the difference of the parsed unit's facts (index_update.c) or, where that does not apply,
// merge every unit again (index_write.c); the libraries table computed from the units' facts
// in memory (unit by unit as a new index writes them, a function a later unit defines taken
// back at the end, an archive's answer kept for the end; or after every unit), or per function
// touched. The plain way: --full -j 1 into a new file. The sources are written into the test's
// temporary directory: two units of one executable (a hand-written CMake file-API reply whose
// link line has -lm, so sqrtf and strlen get libraries rows, and an archive of the project's
// own, libown.a), a header with an inline function both include and one only b.c includes, a
// call of a collective declared in a system header, range sites, a function-pointer field.
// One re-index goes through the full merge: a.c dropping the header whose inline function's
// body it wrote (the body passes to b.c, which was not parsed).
// Without a reply (a Makefile project's database), the link units inferred from the units'
// symbols stand through an update in place while no parsed unit changes what they are
// inferred from; a unit that does goes through the full merge, which infers them again.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/fileio.h"
#include "index_query.h"
#include "tb_shell.h"
#include "tb_test.h"

#define TRACEBOOK TB_BIN_DIR "/tracebook"
#define XFIX TB_SOURCE_DIR "/tests/trace/fixtures/external"
#define WORK TB_TEST_TMPDIR "/test_index_equal"
#define SRC WORK "/src"
#define REPLY SRC "/.cmake/api/v1/reply"
#define FAST WORK "/fast.sqlite"
#define PLAIN WORK "/plain.sqlite"

static tb_output sh;  // what the last index printed (stdout and stderr together)
static const char *src = SRC;  // the database's directory

static int write_compdb(int with_b) {
    const char *unit = "{\"directory\": \"" SRC "\", \"arguments\": [\"cc\", \"-std=c17\", \"-isystem\", \"" XFIX
                       "/sysinc\", \"-c\", \"%s.c\"], \"file\": \"%s.c\"}";
    char a[1024], b[1024], all[2200];
    snprintf(a, sizeof a, unit, "a", "a");
    snprintf(b, sizeof b, unit, "b", "b");
    snprintf(all, sizeof all, "[%s%s%s]\n", a, with_b ? ", " : "", with_b ? b : "");
    return tb_write_text(SRC "/compile_commands.json", all);
}

static const char a_source[] = "#include \"common.h\"\n"
                               "static int run_one(int x) { return helper(x) + twice(x); }\n"
                               "static struct ops the_ops = {.run = run_one};\n"
                               "int main(void) {\n  tb_range_push(\"step\");\n"
                               "  int r = the_ops.run(3) + (int)strlen(\"ab\") + own_only(1);\n"
                               "  r += ncclAllReduce(0, 0, 1, 7, 0, 0, 0);\n  tb_range_pop();\n  return r;\n}\n";

// a.c: its first version and what follows it.
static int write_a(const char *more) {
    size_t n = sizeof a_source + strlen(more);
    char *t = malloc(n);
    snprintf(t, n, "%s%s", a_source, more);
    int rc = tb_write_text(SRC "/a.c", t);
    free(t);
    return rc;
}

static int write_sources(void) {
    tb_error err;
    int bad = tb_mkdir_p(REPLY, &err);
    bad |= tb_write_text(SRC "/common.h",
                         "#include <math.h>\n#include <string.h>\n#include <nccl.h>\n"
                         "struct ops { int (*run)(int); };\n"
                         "static inline int twice(int x) { return (int)sqrtf((float)(x * x)) * 2; }\n"
                         "int helper(int x);\nint own_only(int x);\nvoid tb_range_push(const char *name);\n"
                         "void tb_range_pop(void);\n");
    bad |= write_a("");
    bad |= tb_write_text(SRC "/b_only.h", "static inline int b_only(int x) { return x - 1; }\n");
    bad |= tb_write_text(SRC "/b.c", "#include \"common.h\"\n#include \"b_only.h\"\n"
                                     "int helper(int x) { return twice(x) + b_only(x); }\n");
    bad |= write_compdb(1);
    // the project's own archive, as CMake links one: it defines helper, which b.c defines too
    const char *own[] = {"helper", "own_only"};
    bad |= tb_write_symbol_archive(SRC "/libown.a", own, 2);
    bad |= tb_write_app_reply(REPLY, SRC, SRC,
                              "{\"path\": \"a.c\", \"compileGroupIndex\": 0}, {\"path\": \"b.c\", \"compileGroupIndex\": 0}",
                              "{\"fragment\": \"-lm\", \"role\": \"libraries\"},"
                              " {\"fragment\": \"libown.a\", \"role\": \"libraries\"}");
    return bad ? -1 : 0;
}

// Appends text to a source; the pause lets the file system's clock move past the edit (an
// input modified within 20 ms of a run's start counts as modified during it).
static int append(const char *path, const char *text) {
    char *s = tb_slurp(path);
    if (!s) return -1;
    size_t n = strlen(s) + strlen(text) + 1;
    char *t = malloc(n);
    snprintf(t, n, "%s%s", s, text);
    int rc = tb_write_text(path, t);
    free(s);
    free(t);
    usleep(100 * 1000);
    return rc;
}

static int parsed, reused;

// The last run's summary counts: its line "  functions N (M defined), calls ..." and its line
// "  functions without a definition here N (M found in a library ...)".
static char counts[1024];

static int index_run(const char *out, const char *flags) {
    int st =
        tb_run_merged(&sh, NULL, "'%s' index --compdb '%s' --output '%s' --verbose %s", TRACEBOOK, src, out, flags);
    parsed = reused = -1;
    const char *p = strstr(sh.out, "TUs parsed ");
    if (p) sscanf(p, "TUs parsed %d, reused %d", &parsed, &reused);
    const char *c = strstr(sh.out, "  functions "), *l = strstr(sh.out, "  functions without a definition here ");
    snprintf(counts, sizeof counts, "%.*s | %.*s", c ? (int)strcspn(c, "\n") : 0, c ? c : "",
             l ? (int)strcspn(l, "\n") : 0, l ? l : "");
    return st;
}

// The fast index equals a plain one of the same sources, and its run printed the same counts
// (an update in place counts the calls by its triggers); prints both when not.
static int same_as_plain(void) {
    char fast_counts[sizeof counts];
    snprintf(fast_counts, sizeof fast_counts, "%s", counts);
    unlink(PLAIN);
    if (index_run(PLAIN, "--full -j 1") != 0 || !tb_index_same("fast", FAST, "plain", PLAIN)) return 0;
    if (!strstr(counts, "found in a library") || strcmp(fast_counts, counts)) {
        printf("  the summary's counts differ:\n  fast: %s\n  plain: %s\n", fast_counts, counts);
        return 0;
    }
    return 1;
}

// A re-index (-j 2) that parses and reuses what is expected, says `says` (NULL: anything), and
// equals a plain index after it.
static int reindexed(const char *what, int want_parsed, int want_reused, const char *says) {
    if (index_run(FAST, "-j 2") != 0) {
        printf("  %s: re-index failed:\n%s\n", what, sh.out);
        return 0;
    }
    if (parsed != want_parsed || reused != want_reused) {
        printf("  %s: parsed %d reused %d, expected %d and %d\n", what, parsed, reused, want_parsed, want_reused);
        return 0;
    }
    if (says && !tb_has(sh.out, says)) {
        printf("  %s: the output does not say '%s':\n%s\n", what, says, sh.out);
        return 0;
    }
    return same_as_plain();
}

static long q_long(const char *path, const char *sql) {
    sqlite3 *db = tb_index_open_ro(path);
    if (!db) return -1;
    long v = tb_index_q_long(db, "%s", sql);
    sqlite3_close(db);
    return v;
}

TB_TEST(fast_and_plain_indexes_are_equal_table_for_table) {
    TB_REQUIRE(write_sources() == 0, "cannot write the sources");
    usleep(100 * 1000);
    unlink(FAST);

    // A first index (no previous one), parsed in parallel.
    TB_CHECK(reindexed("first index", 2, 0, NULL), "a parallel index differs from a plain one");
    // what the comparison covers is there: the libraries of the link, the collective, the range
    TB_CHECK(q_long(FAST, "SELECT COUNT(*) FROM libraries l JOIN functions f ON f.id = l.function_id WHERE"
                          " f.name IN ('sqrtf', 'strlen')") == 2,
             "sqrtf and strlen have their libraries rows");
    // a.c names helper before b.c defines it, and libown.a defines it too: no row (the archive's
    // answer waits for the end); own_only, which only the archive defines, has its row
    TB_CHECK(q_long(FAST, "SELECT COUNT(*) FROM libraries l JOIN functions f ON f.id = l.function_id WHERE"
                          " f.name = 'helper'") == 0,
             "helper, defined by a later unit and by libown.a, has no libraries row");
    TB_CHECK(q_long(FAST, "SELECT COUNT(*) FROM libraries l JOIN functions f ON f.id = l.function_id WHERE"
                          " f.name = 'own_only' AND l.library = '" SRC "/libown.a'") == 1,
             "own_only, defined only by libown.a, has its libraries row");
    TB_CHECK(q_long(FAST, "SELECT COUNT(*) FROM collective_sites WHERE callee_name = 'ncclAllReduce'") == 1,
             "the collective site");
    TB_CHECK(q_long(FAST, "SELECT COUNT(*) FROM range_sites") == 2, "the range sites");

    // b.c changed: only b.c parsed, the index file updated in place by the difference of b.c's
    // facts (index_update.c; a new function, a new call of a library function).
    TB_REQUIRE(append(SRC "/b.c", "int helper2(int x) { return helper(x) + (int)strlen(\"c\"); }\n") == 0,
               "cannot edit b.c");
    TB_CHECK(reindexed("b.c changed", 1, 1, "updated in place"), "an index updated in place differs from a plain one");
    // a.c calls a function it only declares, then b.c defines it: the merged row is upgraded in
    // place to the definition (the summary's defined count follows it: the update's triggers).
    TB_REQUIRE(append(SRC "/a.c", "int later(int x);\nint use_later(void) { return later(1); }\n") == 0,
               "cannot edit a.c");
    TB_CHECK(reindexed("a.c declares later", 1, 1, "updated in place"), "an updated index differs from a plain one");
    TB_REQUIRE(append(SRC "/b.c", "int later(int x) { return x; }\n") == 0, "cannot edit b.c");
    TB_CHECK(reindexed("b.c defines later", 1, 1, "updated in place"), "an updated index differs from a plain one");
    // a.c calls a library function, then b.c, after it in the database, defines it: no
    // libraries row for it (a new index writes a.c's rows as a.c comes, while cbrtf has no
    // definition, and takes them back at the end).
    TB_REQUIRE(append(SRC "/a.c", "int use_cbrt(void) { return (int)cbrtf(8.0f); }\n") == 0, "cannot edit a.c");
    TB_CHECK(reindexed("a.c calls cbrtf", 1, 1, "updated in place"), "an updated index differs from a plain one");
    TB_CHECK(q_long(PLAIN, "SELECT COUNT(*) FROM libraries l JOIN functions f ON f.id = l.function_id WHERE"
                           " f.name = 'cbrtf' AND l.library LIKE '%libm%'") == 1,
             "cbrtf, declared only, has its libraries row (-lm)");
    TB_REQUIRE(append(SRC "/b.c", "float cbrtf(float x) { return x; }\n") == 0, "cannot edit b.c");
    TB_CHECK(reindexed("b.c defines cbrtf", 1, 1, "updated in place"), "an updated index differs from a plain one");
    TB_CHECK(q_long(PLAIN, "SELECT COUNT(*) FROM libraries l JOIN functions f ON f.id = l.function_id WHERE"
                           " f.name = 'cbrtf'") == 0,
             "cbrtf, defined by a later unit, has no libraries row");

    // a.c now includes a new header (a new file, an inline function whose body a.c writes).
    TB_REQUIRE(tb_write_text(SRC "/extra.h", "static inline int extra(int x) { return twice(x); }\n") == 0 &&
                   append(SRC "/a.c", "#include \"extra.h\"\nint use_extra(void) { return extra(2); }\n") == 0,
               "cannot edit a.c");
    TB_CHECK(reindexed("a.c includes extra.h", 1, 1, "updated in place"), "an updated index differs from a plain one");
    // b.c includes it too: a.c, first in the database, still writes extra's body.
    TB_REQUIRE(append(SRC "/b.c", "#include \"extra.h\"\nint b_extra(void) { return extra(3); }\n") == 0,
               "cannot edit b.c");
    TB_CHECK(reindexed("b.c includes extra.h", 1, 1, "updated in place"), "an updated index differs from a plain one");
    // a.c drops it: extra's body passes to b.c, which the update leaves to the full merge.
    TB_REQUIRE(write_a("int use_extra(void) { return 2; }\n") == 0, "cannot edit a.c");
    usleep(100 * 1000);
    TB_CHECK(reindexed("a.c drops extra.h", 1, 1, "not updated in place (a function body passes to a unit that was not parsed)"),
             "a re-merged index differs from a plain one");
    // ... and back: a.c writes the body again, taking it from b.c in place.
    TB_REQUIRE(write_a("#include \"extra.h\"\nint use_extra(void) { return extra(2); }\n") == 0, "cannot edit a.c");
    usleep(100 * 1000);
    TB_CHECK(reindexed("a.c takes extra's body back", 1, 1, "updated in place"),
             "an updated index differs from a plain one");

    // extra.h gains an inline function and loses it again: both units parsed, merged together
    // (its body a.c's, then nobody's).
    TB_REQUIRE(append(SRC "/extra.h", "static inline int extra_more(int x) { return extra(x) + 1; }\n") == 0,
               "cannot edit extra.h");
    TB_CHECK(reindexed("extra.h gains a function", 2, 0, "updated in place"), "an updated index differs from a plain one");
    TB_REQUIRE(tb_write_text(SRC "/extra.h", "static inline int extra(int x) { return twice(x); }\n") == 0,
               "cannot edit extra.h");
    usleep(100 * 1000);
    TB_CHECK(reindexed("extra.h loses it", 2, 0, "updated in place"), "an updated index differs from a plain one");

    // A file named only by calls: a body written in an included file (body.inc, inside a
    // function of each unit). a.c drops its copy: b.c's calls still name body.inc, so its files
    // row stays (the calls rows are packed records: index_unit_rows.h).
    TB_REQUIRE(tb_write_text(SRC "/body.inc", "  return twice(x) + 1;\n") == 0 &&
                   append(SRC "/a.c", "int a_body(int x) {\n#include \"body.inc\"\n}\n") == 0 &&
                   append(SRC "/b.c", "int b_body(int x) {\n#include \"body.inc\"\n}\n") == 0,
               "cannot write body.inc");
    TB_CHECK(reindexed("both include body.inc", 2, 0, "updated in place"), "an updated index differs from a plain one");
    TB_REQUIRE(write_a("#include \"extra.h\"\nint use_extra(void) { return extra(2); }\n") == 0, "cannot edit a.c");
    usleep(100 * 1000);
    TB_CHECK(reindexed("a.c drops body.inc", 1, 1, "updated in place"), "an updated index differs from a plain one");
    TB_CHECK(q_long(FAST, "SELECT COUNT(*) FROM calls c JOIN files f ON f.id = c.file_id WHERE f.path LIKE"
                          " '%/body.inc'") == 1,
             "b.c's call in body.inc keeps its file");

    // Nothing changed: in place, the same content.
    TB_CHECK(reindexed("unchanged", 0, 2, "updated in place"), "an unchanged re-index differs from a plain one");

    // The link line changes (CMake regenerated its reply without -lm): the reply is read again,
    // and its digest tells the update it does not apply.
    TB_REQUIRE(tb_write_app_reply(REPLY, SRC, SRC,
                                  "{\"path\": \"a.c\", \"compileGroupIndex\": 0}, {\"path\": \"b.c\", \"compileGroupIndex\": 0}",
                                  "{\"fragment\": \"-lc\", \"role\": \"libraries\"}") == 0,
               "cannot write the reply");
    usleep(100 * 1000);
    TB_CHECK(reindexed("link line changed", 0, 2, "not updated in place (the targets or their link lines changed)"),
             "a re-index after the reply changed differs from a plain one");
    TB_CHECK(q_long(FAST, "SELECT COUNT(*) FROM libraries l JOIN functions f ON f.id = l.function_id WHERE"
                          " f.name = 'sqrtf'") == 0,
             "sqrtf has no library without -lm");

    // b.c leaves the database: its rows leave the index.
    TB_REQUIRE(write_compdb(0) == 0, "cannot write the database");
    usleep(100 * 1000);
    TB_CHECK(reindexed("b.c removed", 0, 1, NULL), "a re-index without b.c differs from a plain one");
    TB_CHECK(q_long(FAST, "SELECT COUNT(*) FROM tu_inputs") == 1 && tb_index_stray_unit_rows(FAST) == 0,
             "b.c's own facts are gone: %ld units' inputs, %ld rows of no unit", q_long(FAST, "SELECT COUNT(*) FROM"
             " tu_inputs"), tb_index_stray_unit_rows(FAST));
}

#define MK WORK "/make"  // a database with no reply beside it

static int write_make_sources(void) {
    tb_error err;
    int bad = tb_mkdir_p(MK, &err);
    bad |= tb_write_text(MK "/lib.c", "int shared_count = 1;\nint lib_fn(int x) { return x; }\n");
    bad |= tb_write_text(MK "/main1.c", "int lib_fn(int x);\nint main(void) { return lib_fn(1); }\n");
    bad |= tb_write_text(MK "/main2.c", "int lib_fn(int x);\nextern int shared_count;\n"
                                        "int main(void) { return lib_fn(2) + shared_count; }\n");
    char all[1024] = "[", unit[300];
    const char *units[] = {"lib", "main1", "main2"};
    for (int i = 0; i < 3; i++) {
        snprintf(unit, sizeof unit, "%s{\"directory\": \"" MK "\", \"arguments\": [\"cc\", \"-c\", \"%s.c\"],"
                 " \"file\": \"%s.c\"}", i ? ", " : "", units[i], units[i]);
        strcat(all, unit);
    }
    strcat(all, "]\n");
    bad |= tb_write_text(MK "/compile_commands.json", all);
    return bad ? -1 : 0;
}

TB_TEST(link_units_inferred_without_a_reply_stand_while_the_units_symbols_do) {
    src = MK;
    TB_REQUIRE(write_make_sources() == 0, "cannot write the sources");
    usleep(100 * 1000);
    unlink(FAST);
    TB_CHECK(reindexed("first index", 3, 0, "2 link units inferred"), "a parallel index differs from a plain one");
    TB_CHECK(q_long(FAST, "SELECT COUNT(DISTINCT target) FROM targets") == 2, "main1+lib and main2+lib");
    const char *stand = "the link units inferred before stand";
    TB_REQUIRE(tb_write_text(MK "/lib.c", "int shared_count = 1;\nint lib_fn(int x) { return x + 1; }\n") == 0,
               "lib.c");
    usleep(100 * 1000);
    TB_CHECK(reindexed("a body changed", 1, 2, stand),
             "an update that keeps the inferred link units differs from a plain index");
    // a call of a function no unit defines pulls in nothing; a function no other unit knows of
    // neither
    TB_REQUIRE(append(MK "/main2.c", "int lib_extra(void);\nstatic int more(void) { return lib_extra(); }\n") == 0,
               "main2.c");
    TB_CHECK(reindexed("a call of a function no unit defines", 1, 2, stand),
             "an update with a new outside call differs");
    TB_REQUIRE(append(MK "/lib.c", "int lib_more(void) { return 2; }\n") == 0, "lib.c");
    TB_CHECK(reindexed("a new function nothing calls", 1, 2, stand), "an update with a new function differs");
    // what the inference reads changes: the full merge infers the link units again
    TB_REQUIRE(append(MK "/main1.c", "extern int shared_count;\nstatic int count(void) { return shared_count; }\n") ==
                   0,
               "main1.c");
    TB_CHECK(reindexed("a use of another unit's variable", 1, 2, "not updated in place (the link units are inferred, "
                       "and a parsed unit uses other symbols of other units, or in another order)"),
             "a re-merged index differs from a plain one");
    TB_REQUIRE(append(MK "/lib.c", "int lib_extra(void) { return 3; }\n") == 0, "lib.c");
    TB_CHECK(reindexed("a definition of what another unit calls", 1, 2,
                       "a parsed unit defines, or no longer defines, a symbol another unit defines or uses"),
             "a re-merged index differs from a plain one");
    // two units parsed at once: both bodies changed, the link units stand; then lib.c calls a
    // function main1.c starts defining: only the other parsed unit's new facts tell
    TB_REQUIRE(append(MK "/lib.c", "static int quiet(void) { return 4; }\n") == 0 &&
                   append(MK "/main1.c", "static int calm(void) { return 5; }\n") == 0,
               "lib.c and main1.c");
    TB_CHECK(reindexed("two bodies changed", 2, 1, stand), "an update of two units differs from a plain index");
    TB_REQUIRE(append(MK "/lib.c", "int from_main1(void);\nstatic int use_it(void) { return from_main1(); }\n") == 0 &&
                   append(MK "/main1.c", "int from_main1(void) { return 6; }\n") == 0,
               "lib.c and main1.c");
    TB_CHECK(reindexed("lib.c calls what main1.c now defines", 2, 1, "a parsed unit uses other symbols of other units"),
             "a re-merged index differs from a plain one");
    TB_REQUIRE(tb_write_text(MK "/main2.c", "int lib_fn(int x);\nint entry(void) { return lib_fn(2); }\n") == 0,
               "main2.c");
    usleep(100 * 1000);
    TB_CHECK(reindexed("main2.c no longer defines main", 1, 2, "now defines main or no longer does"),
             "a re-merged index differs from a plain one");
    TB_CHECK(q_long(FAST, "SELECT COUNT(DISTINCT target) FROM targets") == 1, "one binary left: main1's");
    src = SRC;
}

// No main and no symbol defined twice: nothing to infer ("none", one scope), which stands as
// inferred link units do, until a unit defines main.
TB_TEST(one_scope_without_a_reply_stands_until_a_unit_defines_main) {
    src = MK "1";
    tb_error err;
    TB_REQUIRE(tb_mkdir_p(src, &err) == 0 && tb_write_text(MK "1/a.c", "int f(int x) { return x; }\n") == 0 &&
                   tb_write_text(MK "1/b.c", "int f(int x);\nint g(void) { return f(1); }\n") == 0 &&
                   tb_write_text(MK "1/compile_commands.json",
                                 "[{\"directory\": \"" MK "1\", \"arguments\": [\"cc\", \"-c\", \"a.c\"],"
                                 " \"file\": \"a.c\"}, {\"directory\": \"" MK "1\", \"arguments\": [\"cc\", \"-c\","
                                 " \"b.c\"], \"file\": \"b.c\"}]\n") == 0,
               "cannot write the sources");
    usleep(100 * 1000);
    unlink(FAST);
    TB_CHECK(reindexed("first index", 2, 0, "and nothing to tell binaries apart by"), "a first index differs");
    TB_REQUIRE(append(MK "1/b.c", "static int h(void) { return f(2); }\n") == 0, "b.c");
    TB_CHECK(reindexed("a body changed", 1, 1, "still nothing to tell binaries apart by"),
             "an update that keeps one scope differs from a plain index");
    TB_REQUIRE(append(MK "1/a.c", "int main(void) { return f(3); }\n") == 0, "a.c");
    TB_CHECK(reindexed("a.c defines main", 1, 1, "now defines main or no longer does"),
             "a re-merged index differs from a plain one");
    TB_CHECK(q_long(FAST, "SELECT COUNT(DISTINCT target) FROM targets") == 1, "a.c's binary");
    src = SRC;
}

int main(void) {
    TB_RUN(fast_and_plain_indexes_are_equal_table_for_table);
    TB_RUN(link_units_inferred_without_a_reply_stand_while_the_units_symbols_do);
    TB_RUN(one_scope_without_a_reply_stands_until_a_unit_defines_main);
    tb_output_free(&sh);
    return tb_test_summary();
}
