// `tracebook index`: small fixture projects (tests/trace/fixtures/, indexed through a
// compile_commands.json written here with absolute paths) and the project's own build.
// Expected lines come from marker comments in the fixtures (line_of), so editing a fixture
// does not silently shift them.
#include <sqlite3.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/fileio.h"
#include "index_db.h"
#include "index_query.h"
#include "tb_shell.h"
#include "tb_test.h"

#define TRACEBOOK TB_BIN_DIR "/tracebook"
#define FIX TB_SOURCE_DIR "/tests/trace/fixtures"
#define WORK TB_TEST_TMPDIR "/test_index"

// ---------------------------------------------------------------------------------------
// Helpers


// The first column of the first row as text (malloc'd), or NULL.
static char *q_text(sqlite3 *db, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    char *sql = sqlite3_vmprintf(fmt, ap);
    va_end(ap);
    sqlite3_stmt *st = NULL;
    char *v = NULL;
    if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK)
        printf("  sql error: %s\n    %s\n", sqlite3_errmsg(db), sql);
    else if (sqlite3_step(st) == SQLITE_ROW && sqlite3_column_type(st, 0) != SQLITE_NULL)
        v = strdup((const char *)sqlite3_column_text(st, 0));
    sqlite3_finalize(st);
    sqlite3_free(sql);
    return v;
}

static int same(const char *a, const char *b) { return a && b && !strcmp(a, b); }

// ---------------------------------------------------------------------------------------
// The fixture index: basic/ (two units sharing fx.h), broken/ (a syntax error, a missing
// file), indexed once for the tests below.

#define MAIN_C FIX "/basic/main.c"
#define UTIL_C FIX "/basic/util.c"
#define FX_H FIX "/basic/fx.h"
#define BROKEN_C FIX "/broken/broken.c"

static sqlite3 *fx_db;
static int fx_status = -1;
static char *fx_output;

static sqlite3 *fixture_index(void) {
    if (fx_status >= 0) return fx_db;
    tb_error err;
    if (tb_mkdir_p(WORK "/basic", &err)) printf("  %s\n", err.msg);
    // "arguments" and "command" forms, relative and absolute files, flags the indexer drops.
    if (tb_write_text(WORK "/basic/compile_commands.json",
                   "[\n"
                   " {\"directory\": \"" FIX "/basic\", \"arguments\": [\"/usr/bin/cc\", \"-std=c17\", \"-O2\","
                   " \"-Wall\", \"-Werror\", \"-MD\", \"-MT\", \"main.o\", \"-MF\", \"main.o.d\", \"-c\", \"main.c\","
                   " \"-o\", \"main.o\"], \"file\": \"main.c\"},\n"
                   " {\"directory\": \"" FIX "/basic\", \"command\": \"/usr/bin/cc -std=c17 -O2 -o util.o -c " FIX
                   "/basic/util.c\", \"file\": \"" FIX "/basic/util.c\"},\n"
                   " {\"directory\": \"" FIX "/broken\", \"command\": \"cc -c broken.c -o broken.o\", \"file\":"
                   " \"broken.c\"},\n"
                   " {\"directory\": \"" FIX "/broken\", \"command\": \"cc -c missing.c\", \"file\": \"missing.c\"}\n"
                   "]\n"))
        printf("  cannot write the fixture database\n");
    unlink(WORK "/basic/index.sqlite");
    fx_status =
        tb_shell(&fx_output, "'%s' index --compdb '%s/basic' --output '%s/basic/index.sqlite'", TRACEBOOK, WORK, WORK);
    fx_db = tb_index_open_ro(WORK "/basic/index.sqlite");
    return fx_db;
}

#define MAIN_USR "c:" MAIN_C "@F@main"

TB_TEST(functions_and_calls_are_recorded_with_file_and_line) {
    sqlite3 *db = fixture_index();
    // missing.c is listed but not there: the index is written, the run exits 1
    TB_CHECK(fx_status == 1 && tb_has(fx_output, "1 of 4 units failed"), "exit status %d; output:\n%s", fx_status,
             fx_output);
    TB_REQUIRE(db, "no index written; output:\n%s", fx_output);
    char *v = q_text(db, "SELECT value FROM meta WHERE key = 'schema_version'");
    TB_CHECK(same(v, TB_INDEX_SCHEMA_VERSION), "schema_version %s", v ? v : "(none)");
    free(v);
    TB_CHECK(tb_index_q_long(db, "SELECT is_tu FROM files WHERE path = %Q AND status = 'ok'", MAIN_C) == 1,
             "main.c row");
    TB_CHECK(tb_index_q_long(db, "SELECT is_tu FROM files WHERE path = %Q", FX_H) == 0, "fx.h: a header row");

    int def_line = tb_line_of(UTIL_C, "int util_run(int x) {");
    TB_CHECK(tb_index_q_long(
                 db,
                 "SELECT COUNT(*) FROM functions fn JOIN files f ON f.id = fn.file_id WHERE fn.usr = 'c:@F@util_run'"
                 " AND fn.name = 'util_run' AND f.path = %Q AND fn.line = %d AND fn.col = 5 AND fn.is_definition = 1"
                 " AND fn.is_static = 0",
                 UTIL_C, def_line) == 1,
             "util_run: defined at util.c:%d:5 (declared first in fx.h)", def_line);
    // a declaration without a definition in the index
    TB_CHECK(tb_index_q_long(db, "SELECT is_definition FROM functions WHERE usr = 'c:@F@tb_range_push'") == 0,
             "tb_range_push: declared only");
    // ... its row from its first declaration, in the header; a declaration nothing refers to has none
    TB_CHECK(tb_index_q_long(db,
                             "SELECT COUNT(*) FROM functions fn JOIN files f ON f.id = fn.file_id WHERE fn.usr ="
                             " 'c:@F@tb_range_push' AND f.path = %Q AND fn.line = %d",
                             FX_H, tb_line_of(FX_H, "void tb_range_push(")) == 1,
             "tb_range_push: declared at fx.h:%d", tb_line_of(FX_H, "void tb_range_push("));
    TB_CHECK(tb_index_q_long(db, "SELECT COUNT(*) FROM functions WHERE name = 'fx_never_referred_to'") == 0,
             "fx_never_referred_to: no row");

    int call_line = tb_line_of(MAIN_C, "CALL_UTIL_RUN");
    TB_CHECK(
        tb_index_q_long(
            db,
            "SELECT COUNT(*) FROM calls c JOIN functions fn ON fn.id = c.caller_id JOIN files f ON f.id = c.file_id"
            " WHERE fn.usr = %Q AND c.callee_usr = 'c:@F@util_run' AND c.callee_name = 'util_run'"
            " AND c.field IS NULL AND c.in_macro IS NULL AND f.path = %Q AND c.line = %d AND c.col = 10",
            MAIN_USR, MAIN_C, call_line) == 1,
        "main -> util_run at main.c:%d:10", call_line);

    // fx_twice, a static inline function of fx.h, is in both units: one row, its calls once.
    TB_CHECK(tb_index_q_long(db, "SELECT COUNT(*) FROM functions WHERE name = 'fx_twice' AND is_static = 1") == 1,
             "fx_twice: one row");
    TB_CHECK(tb_index_q_long(db, "SELECT COUNT(*) FROM calls c JOIN functions fn ON fn.id = c.caller_id"
                                 " WHERE fn.name = 'fx_twice' AND c.callee_usr = 'c:@F@work'") == 2,
             "fx_twice's two calls of work, once each");
    TB_CHECK(tb_index_q_long(db, "SELECT COUNT(*) FROM calls WHERE callee_name = 'fx_twice' AND callee_usr ="
                                 " (SELECT usr FROM functions WHERE name = 'fx_twice')") == 2,
             "main and util_run both call the one fx_twice");
}

TB_TEST(static_functions_with_the_same_name_stay_distinct) {
    sqlite3 *db = fixture_index();
    TB_REQUIRE(db, "no index; output:\n%s", fx_output);
    TB_CHECK(tb_index_q_long(db, "SELECT COUNT(DISTINCT usr) FROM functions WHERE name = 'helper' AND is_static = 1") ==
                 2,
             "two static helpers, two USRs");
    char *main_helper = q_text(db,
                               "SELECT fn.usr FROM functions fn JOIN files f ON f.id = fn.file_id"
                               " WHERE fn.name = 'helper' AND f.path = %Q AND fn.line = %d",
                               MAIN_C, tb_line_of(MAIN_C, "HELPER_MAIN"));
    char *util_helper = q_text(db,
                               "SELECT fn.usr FROM functions fn JOIN files f ON f.id = fn.file_id"
                               " WHERE fn.name = 'helper' AND f.path = %Q AND fn.line = %d",
                               UTIL_C, tb_line_of(UTIL_C, "HELPER_UTIL"));
    TB_REQUIRE(main_helper && util_helper, "helper rows: main.c %s, util.c %s", main_helper ? main_helper : "(none)",
               util_helper ? util_helper : "(none)");
    TB_CHECK(strcmp(main_helper, util_helper) != 0, "same USR %s", main_helper);
    char *from_main = q_text(db,
                             "SELECT c.callee_usr FROM calls c JOIN functions fn ON fn.id = c.caller_id"
                             " WHERE fn.usr = %Q AND c.callee_name = 'helper'",
                             MAIN_USR);
    char *from_util = q_text(db,
                             "SELECT c.callee_usr FROM calls c JOIN functions fn ON fn.id = c.caller_id"
                             " WHERE fn.name = 'util_run' AND c.callee_name = 'helper'");
    TB_CHECK(same(from_main, main_helper), "main calls %s, expected main.c's %s", from_main ? from_main : "(none)",
             main_helper);
    TB_CHECK(same(from_util, util_helper), "util_run calls %s, expected util.c's %s", from_util ? from_util : "(none)",
             util_helper);
    free(main_helper);
    free(util_helper);
    free(from_main);
    free(from_util);
}

TB_TEST(calls_inside_macros_belong_to_the_function_using_the_macro) {
    sqlite3 *db = fixture_index();
    TB_REQUIRE(db, "no index; output:\n%s", fx_output);
    int use = tb_line_of(MAIN_C, "MACRO_USE");
    TB_CHECK(
        tb_index_q_long(
            db,
            "SELECT COUNT(*) FROM calls c JOIN functions fn ON fn.id = c.caller_id JOIN files f ON f.id = c.file_id"
            " WHERE fn.usr = %Q AND c.callee_usr = 'c:@F@work' AND c.in_macro = 'CALL_WORK'"
            " AND f.path = %Q AND c.line = %d AND c.col = 10",
            MAIN_USR, MAIN_C, use) == 1,
        "CALL_WORK(v) at main.c:%d:10: a call of work in main, in_macro CALL_WORK", use);
    int push = tb_line_of(MAIN_C, "RANGE_PATTERN");
    TB_CHECK(tb_index_q_long(db,
                             "SELECT COUNT(*) FROM calls c JOIN functions fn ON fn.id = c.caller_id"
                             " WHERE fn.usr = %Q AND c.callee_name = 'tb_range_push' AND c.in_macro = 'TB_RANGE_PUSH'"
                             " AND c.line = %d",
                             MAIN_USR, push) == 1,
             "TB_RANGE_PUSH at main.c:%d: tb_range_push in main", push);
    TB_CHECK(tb_index_q_long(db, "SELECT COUNT(*) FROM calls c JOIN files f ON f.id = c.file_id WHERE f.path = %Q",
                             FX_H) == 2,
             "no call is placed at the macro's definition in fx.h (only fx_twice's own two)");
}

TB_TEST(field_calls_resolve_through_designated_positional_and_assigned_targets) {
    sqlite3 *db = fixture_index();
    TB_REQUIRE(db, "no index; output:\n%s", fx_output);
    int call = tb_line_of(UTIL_C, "FIELD_CALL_RUN");
    TB_CHECK(tb_index_q_long(db,
                             "SELECT COUNT(*) FROM calls c JOIN functions fn ON fn.id = c.caller_id"
                             " WHERE fn.name = 'use_ops' AND c.callee_usr IS NULL AND c.callee_name = 'run'"
                             " AND c.field = 'fx_ops.run' AND c.line = %d",
                             call) == 1,
             "ops->run(1) at util.c:%d: a call through fx_ops.run", call);
    struct {
        const char *record, *field, *fn, *file, *marker;
    } want[] = {
        {"fx_ops", "run", "c:@F@run_a", MAIN_C, "DESIGNATED"},         // .run = run_a
        {"fx_ops", "run", "c:@F@run_b", UTIL_C, "POSITIONAL"},         // {"positional", run_b, ...}
        {"fx_ops", "done", "c:@F@done_b", UTIL_C, "POSITIONAL"},       // third positional value
        {"fx_ops", "run", "c:@F@run_c", MAIN_C, "ASSIGN_DOT"},         // h.ops.run = run_c
        {"fx_ops", "done", "c:@F@done_c", UTIL_C, "ASSIGN_ADDR"},      // copy.done = &done_c
        {"fx_anon_ops", "fwd", "c:@F@fwd_a", MAIN_C, "ANON_POSITIONAL"},  // anonymous struct: the typedef
        {"tb_comm_backend", "all_reduce", "c:@F@fx_all_reduce", UTIL_C, "BACKEND"},
    };
    for (size_t i = 0; i < sizeof want / sizeof *want; i++) {
        int line = tb_line_of(want[i].file, want[i].marker);
        TB_CHECK(
            tb_index_q_long(db,
                            "SELECT COUNT(*) FROM field_targets t JOIN files f ON f.id = t.file_id WHERE t.record = %Q"
                            " AND t.field = %Q AND t.function_usr = %Q AND f.path = %Q AND t.line = %d",
                            want[i].record, want[i].field, want[i].fn, want[i].file, line) == 1,
            "field target %s.%s = %s at %s:%d", want[i].record, want[i].field, want[i].fn, want[i].file, line);
    }
    TB_CHECK(tb_index_q_long(db, "SELECT COUNT(*) FROM field_targets") == (long)(sizeof want / sizeof *want),
             "%ld field targets, expected exactly the %zu above (h.self = &designated assigns a struct)",
             tb_index_q_long(db, "SELECT COUNT(*) FROM field_targets"), sizeof want / sizeof *want);
    // The resolution a query makes: the call's field → the functions assigned to it.
    TB_CHECK(tb_index_q_long(db,
                             "SELECT COUNT(*) FROM calls c JOIN field_targets t ON c.field = t.record || '.' || t.field"
                             " WHERE c.line = %d AND t.function_usr IN ('c:@F@run_a', 'c:@F@run_b', 'c:@F@run_c')",
                             call) == 3,
             "ops->run resolves to run_a, run_b and run_c");
    TB_CHECK(tb_index_q_long(db, "SELECT COUNT(*) FROM calls WHERE field = 'fx_anon_ops.fwd'") == 1, "anon->fwd(2)");
    int deref = tb_line_of(UTIL_C, "FIELD_CALL_DEREF");
    TB_CHECK(tb_index_q_long(db, "SELECT COUNT(*) FROM calls WHERE field = 'fx_ops.run' AND line = %d", deref) == 1,
             "(*ops->run)(5) at util.c:%d: a call through fx_ops.run too", deref);
}

TB_TEST(range_sites_carry_literal_and_printf_pattern_names) {
    sqlite3 *db = fixture_index();
    TB_REQUIRE(db, "no index; output:\n%s", fx_output);
    const char *q = "SELECT COUNT(*) FROM range_sites r JOIN functions fn ON fn.id = r.function_id"
                    " JOIN files f ON f.id = r.file_id WHERE fn.usr = %Q AND f.path = %Q AND r.kind = %Q"
                    " AND r.name IS %Q AND r.line = %d";
    int lit = tb_line_of(MAIN_C, "RANGE_LITERAL"), pat = tb_line_of(MAIN_C, "RANGE_PATTERN"),
        pop = tb_line_of(MAIN_C, "RANGE_POP");
    TB_CHECK(tb_index_q_long(db, q, MAIN_USR, MAIN_C, "push", "fixture.step", lit) == 1,
             "push \"fixture.step\" at line %d", lit);
    TB_CHECK(tb_index_q_long(db, q, MAIN_USR, MAIN_C, "push", "layer.%d.fc2", pat) == 1,
             "push \"layer.%%d.fc2\" at line %d", pat);
    TB_CHECK(tb_index_q_long(db, q, MAIN_USR, MAIN_C, "pop", NULL, pop) == 1, "pop (no name) at line %d", pop);
    TB_CHECK(tb_index_q_long(db, "SELECT COUNT(*) FROM range_sites WHERE kind = 'push'") == 2, "two pushes");
    TB_CHECK(tb_index_q_long(db, "SELECT COUNT(*) FROM range_sites WHERE kind = 'pop'") == 2, "two pops");
}

TB_TEST(collective_sites_cover_nccl_tb_all_reduce_and_backend_entry_points) {
    sqlite3 *db = fixture_index();
    TB_REQUIRE(db, "no index; output:\n%s", fx_output);
    const char *q = "SELECT COUNT(*) FROM collective_sites s JOIN functions fn ON fn.id = s.function_id"
                    " JOIN files f ON f.id = s.file_id WHERE fn.name = %Q AND s.callee_name = %Q AND f.path = %Q"
                    " AND s.line = %d";
    struct {
        const char *fn, *callee, *file, *marker;
    } want[] = {
        {"main", "ncclAllReduce", MAIN_C, "CALL_NCCL"},                       // an NCCL communication call
        {"main", "tb_all_reduce", MAIN_C, "CALL_TB_ALL_REDUCE"},              // by name
        {"use_ops", "fx_all_reduce", UTIL_C, "CALL_BACKEND_ENTRY"},           // assigned to tb_comm_backend
        {"use_ops", "tb_comm_backend.all_reduce", UTIL_C, "FIELD_CALL_BACKEND"},  // through its field
    };
    for (size_t i = 0; i < sizeof want / sizeof *want; i++) {
        int line = tb_line_of(want[i].file, want[i].marker);
        TB_CHECK(tb_index_q_long(db, q, want[i].fn, want[i].callee, want[i].file, line) == 1, "%s in %s at %s:%d",
                 want[i].callee, want[i].fn, want[i].file, line);
    }
    TB_CHECK(tb_index_q_long(db, "SELECT COUNT(*) FROM collective_sites") == (long)(sizeof want / sizeof *want),
             "%ld collective sites, expected the %zu above",
             tb_index_q_long(db, "SELECT COUNT(*) FROM collective_sites"), sizeof want / sizeof *want);
    TB_CHECK(
        tb_index_q_long(db, "SELECT COUNT(*) FROM calls WHERE callee_name = 'ncclGetErrorString'") == 1 &&
            tb_index_q_long(db, "SELECT COUNT(*) FROM collective_sites WHERE callee_name = 'ncclGetErrorString'") == 0,
        "ncclGetErrorString is a call, not a collective site");
    // call_id: the calls row of the same site (same function, place and callee)
    TB_CHECK(tb_index_q_long(db, "SELECT COUNT(*) FROM collective_sites WHERE call_id IS NULL") == 0,
             "every site has call_id");
    TB_CHECK(tb_index_q_long(db, "SELECT COUNT(*) FROM collective_sites s JOIN calls c ON c.id = s.call_id"
                                 " WHERE c.caller_id = s.function_id AND c.file_id = s.file_id AND c.line = s.line"
                                 " AND c.col = s.col AND (c.callee_name = s.callee_name OR c.field = s.callee_name)") ==
                 (long)(sizeof want / sizeof *want),
             "each call_id is its site's calls row");

    // --no-default-collectives --collective GLOB replaces the list.
    char *out = NULL;
    int st = tb_shell(&out,
                      "'%s' index --quiet --compdb '%s/basic/compile_commands.json' --output '%s/basic/custom.sqlite'"
                      " --no-default-collectives --collective 'wor?'",
                      TRACEBOOK, WORK, WORK);
    TB_CHECK(st == 1, "exit status %d (missing.c fails the run):\n%s", st, out);
    sqlite3 *db2 = tb_index_open_ro(WORK "/basic/custom.sqlite");
    TB_REQUIRE(db2, "no custom index:\n%s", out);
    TB_CHECK(tb_index_q_long(db2, "SELECT COUNT(*) FROM collective_sites WHERE callee_name = 'work'") == 3 &&
                 tb_index_q_long(db2, "SELECT COUNT(*) FROM collective_sites WHERE callee_name != 'work'") == 0,
             "only work's three call sites (main's CALL_WORK and fx_twice's two)");
    sqlite3_close(db2);
    free(out);
}

TB_TEST(functions_end_at_their_closing_brace) {
    sqlite3 *db = fixture_index();
    TB_REQUIRE(db, "no index; output:\n%s", fx_output);
    int end = tb_line_of(UTIL_C, "FOR_EACH_RANK_END");
    TB_CHECK(tb_index_q_long(db, "SELECT end_line FROM functions WHERE usr = 'c:@F@for_each_rank'") == end &&
                 tb_index_q_long(db, "SELECT end_col FROM functions WHERE usr = 'c:@F@for_each_rank'") == 1,
             "for_each_rank ends at util.c:%d:1, got %ld:%ld", end,
             tb_index_q_long(db, "SELECT end_line FROM functions WHERE usr = 'c:@F@for_each_rank'"),
             tb_index_q_long(db, "SELECT end_col FROM functions WHERE usr = 'c:@F@for_each_rank'"));
    int leaf = tb_line_of(UTIL_C, "RANK_LEAF");
    TB_CHECK(tb_index_q_long(db, "SELECT end_line FROM functions WHERE usr = 'c:@F@rank_leaf'") == leaf &&
                 tb_index_q_long(db, "SELECT end_col FROM functions WHERE usr = 'c:@F@rank_leaf'") == 42,
             "rank_leaf's one-line body ends at util.c:%d:42", leaf);
    TB_CHECK(tb_index_q_long(db, "SELECT COUNT(*) FROM functions WHERE is_definition = 1 AND (end_line IS NULL"
                                 " OR end_line < line)") == 0,
             "every definition has an end after its start");
    TB_CHECK(tb_index_q_long(db, "SELECT COUNT(*) FROM functions WHERE is_definition = 0 AND end_line IS NOT NULL") ==
                 0,
             "declarations have no end");
}

TB_TEST(callbacks_are_recorded_and_chains_go_through_them) {
    sqlite3 *db = fixture_index();
    TB_REQUIRE(db, "no index; output:\n%s", fx_output);
    const char *q = "SELECT COUNT(*) FROM callbacks b JOIN functions fn ON fn.id = b.function_id"
                    " JOIN files f ON f.id = b.file_id WHERE fn.name = %Q AND b.target_usr = %Q"
                    " AND b.passed_to IS %Q AND f.path = %Q AND b.line = %d";
    int pass = tb_line_of(UTIL_C, "PASS_CALLBACK"), store = tb_line_of(UTIL_C, "STORE_CALLBACK"),
        cast = tb_line_of(UTIL_C, "PASS_CAST");
    char static_usr[1024];
    snprintf(static_usr, sizeof static_usr, "c:%s@F@rank_body", UTIL_C);
    TB_CHECK(tb_index_q_long(db, q, "launch_ranks", static_usr, "for_each_rank", UTIL_C, pass) == 1,
             "for_each_rank(rank_body, n) at util.c:%d: rank_body passed to for_each_rank", pass);
    TB_CHECK(tb_index_q_long(db, "SELECT col FROM callbacks WHERE line = %d", pass) == 19, "at rank_body's column");
    TB_CHECK(tb_index_q_long(db, q, "launch_ranks", "c:@F@rank_leaf", NULL, UTIL_C, store) == 1,
             "&rank_leaf stored in a variable at util.c:%d: passed_to NULL", store);
    TB_CHECK(tb_index_q_long(db, q, "launch_ranks", "c:@F@rank_leaf", "for_each_rank", UTIL_C, cast) == 1,
             "a cast function passed at util.c:%d", cast);
    int address = tb_line_of(UTIL_C, "PASS_ADDRESS"), paren = tb_line_of(UTIL_C, "PAREN_CALLEE");
    TB_CHECK(tb_index_q_long(db, q, "launch_ranks", "c:@F@rank_leaf", "for_each_rank", UTIL_C, address) == 1,
             "&rank_leaf passed at util.c:%d", address);
    TB_CHECK(tb_index_q_long(db, "SELECT COUNT(*) FROM callbacks WHERE line = %d", paren) == 0 &&
                 tb_index_q_long(db, "SELECT COUNT(*) FROM calls WHERE callee_name = 'rank_noop' AND line = %d", paren) == 1,
             "(rank_noop)(n) at util.c:%d: a call, its callee in parentheses no callback", paren);
    TB_CHECK(tb_index_q_long(db, "SELECT COUNT(*) FROM callbacks") == 4,
             "%ld callbacks, expected the 4 above (callees, field targets and static initializers are not)",
             tb_index_q_long(db, "SELECT COUNT(*) FROM callbacks"));

    char *out = NULL;
    int st = tb_shell(&out, "'%s' chain --from launch_ranks --to rank_leaf --index '%s/basic/index.sqlite'", TRACEBOOK,
                      WORK);
    char hop[256];
    snprintf(hop, sizeof hop, "util.c:%d, passes rank_body to for_each_rank)\n  → rank_body (", pass);
    TB_CHECK(st == 0 && strstr(out, "launch_ranks (") && strstr(out, hop) && strstr(out, "→ rank_leaf ("),
             "chain through the callback (%s):\n%s", hop, out);
    free(out);
}

TB_TEST(a_syntax_error_gives_partial_status_with_diagnostics_and_keeps_what_parsed) {
    sqlite3 *db = fixture_index();
    TB_REQUIRE(db, "no index; output:\n%s", fx_output);
    TB_CHECK(fx_status == 1, "missing.c failed the run: exit status %d", fx_status);
    char *status = q_text(db, "SELECT status FROM files WHERE path = %Q", BROKEN_C);
    TB_CHECK(same(status, "partial") || same(status, "failed"), "broken.c status %s", status ? status : "(none)");
    free(status);
    TB_CHECK(tb_index_q_long(db, "SELECT errors FROM files WHERE path = %Q", BROKEN_C) >= 1, "an error counted");
    char where[512];
    snprintf(where, sizeof where, "%s:%d:", BROKEN_C, tb_line_of(BROKEN_C, "SYNTAX_ERROR"));
    char *diag = q_text(db, "SELECT diagnostics FROM files WHERE path = %Q", BROKEN_C);
    TB_CHECK(diag && strstr(diag, where), "diagnostics name %s: %s", where, diag ? diag : "(none)");
    free(diag);
    TB_CHECK(strstr(fx_output, where) && strstr(fx_output, "partial"), "stderr reports %s:\n%s", where, fx_output);
    TB_CHECK(tb_index_q_long(db, "SELECT COUNT(*) FROM functions WHERE name IN ('good_before', 'good_after') AND"
                                 " is_definition = 1") == 2,
             "the functions around the error are indexed");
    TB_CHECK(tb_index_q_long(
                 db,
                 "SELECT COUNT(*) FROM calls c JOIN functions fn ON fn.id = c.caller_id WHERE fn.name = 'good_after'"
                 " AND c.callee_name = 'good_before' AND c.line = %d",
                 tb_line_of(BROKEN_C, "GOOD_AFTER")) == 1,
             "good_after -> good_before");
    // the errors counted per file they are in, and every answer relying on the unit says so
    TB_CHECK(tb_index_q_long(db,
                             "SELECT e.errors FROM file_errors e JOIN files u ON u.id = e.unit_id JOIN files f ON"
                             " f.id = e.file_id WHERE u.path = %Q AND f.path = %Q",
                             BROKEN_C, BROKEN_C) == tb_index_q_long(db, "SELECT errors FROM files WHERE path = %Q", BROKEN_C),
             "broken.c's errors are in file_errors, on broken.c");
    char *out;
    const char *asks[] = {"def good_after", "callees good_after", "callers good_before",
                          "chain --from good_after --to good_before"};
    for (int i = 0; i < 4; i++) {
        int rc = tb_shell(&out, "'%s' %s --index '%s/basic/index.sqlite'", TRACEBOOK, asks[i], WORK);
        TB_CHECK(rc == 0 && tb_has(out, "partial parse: " BROKEN_C ": 1 error (first: ") &&
                     tb_has(out, ": what its functions call may be missing\n"),
                 "%s flags the partial parse, rc %d:\n%s", asks[i], rc, out);
        if (i == 3) TB_CHECK(tb_has(out, "good_after (" BROKEN_C ":") && tb_has(out, ") [partial parse]\n"),
                             "each hop from the unit is marked:\n%s", out);
        free(out);
    }
    int rc = tb_shell(&out, "'%s' def rank_leaf --index '%s/basic/index.sqlite'", TRACEBOOK, WORK);
    TB_CHECK(rc == 0 && !tb_has(out, "partial"), "an answer relying on other units only is not flagged:\n%s", out);
    free(out);
    // A listed file that is not there: failed, and everything else still indexed.
    char *missing = q_text(db, "SELECT status FROM files WHERE path = %Q", FIX "/broken/missing.c");
    TB_CHECK(same(missing, "failed"), "missing.c status %s", missing ? missing : "(none)");
    free(missing);
    TB_CHECK(tb_index_q_long(db, "SELECT value FROM meta WHERE key = 'tu_count'") == 4, "4 units in meta");
}

// Exit statuses: a source that is not there fails the run (exit 1, the index written with
// the rest); a unit with syntax errors alone does not (partial: what parsed is there).
TB_TEST(a_missing_source_fails_the_run_and_a_partial_unit_does_not) {
    tb_error err;
    tb_mkdir_p(WORK "/exit", &err);
    char *out = NULL;
    tb_write_text(WORK "/exit/compile_commands.json",
                  "[{\"directory\": \"" FIX "/broken\", \"command\": \"cc -c broken.c\", \"file\": \"broken.c\"}]\n");
    int st = tb_shell(&out, "'%s' index --compdb '%s/exit' --output '%s/exit/index.sqlite'", TRACEBOOK, WORK, WORK);
    TB_CHECK(st == 0 && tb_has(out, "1 TUs (1 with errors, 0 failed)"), "partial only: exit %d:\n%s", st, out);
    free(out);
    tb_write_text(WORK "/exit/compile_commands.json",
                  "[{\"directory\": \"" FIX "/basic\", \"command\": \"cc -c util.c\", \"file\": \"util.c\"},\n"
                  " {\"directory\": \"" FIX "/broken\", \"command\": \"cc -c missing.c\", \"file\": \"missing.c\"}]\n");
    st = tb_shell(&out, "'%s' index --compdb '%s/exit' --output '%s/exit/index.sqlite'", TRACEBOOK, WORK, WORK);
    char what[600];
    snprintf(what, sizeof what, "%s/broken/missing.c: cannot read the source file", FIX);
    TB_CHECK(st == 1 && tb_has(out, what) && tb_has(out, "1 of 2 units failed") &&
                 tb_has(out, "2 TUs (1 with errors, 1 failed)"),
             "a missing source: exit %d:\n%s", st, out);
    free(out);
    sqlite3 *db = tb_index_open_ro(WORK "/exit/index.sqlite");
    TB_CHECK(db && tb_index_q_long(db, "SELECT COUNT(*) FROM functions WHERE name = 'util_run' AND is_definition = 1") == 1,
             "the other unit is indexed");
    sqlite3_close(db);
}

// --parse-only, the benchmark's reference (scripts/bench-index.sh): every unit parsed, none
// visited, no index written; a unit libclang cannot build is named, counted and fails the run;
// --verbose adds the parses' CPU time, which the index's --verbose line sets beside its own.
TB_TEST(parse_only_parses_every_unit_and_writes_no_index) {
    tb_error err;
    tb_mkdir_p(WORK "/parse_only", &err);
    char *out = NULL;
    tb_write_text(WORK "/parse_only/compile_commands.json",
                  "[{\"directory\": \"" FIX "/basic\", \"command\": \"cc -c main.c\", \"file\": \"main.c\"},\n"
                  " {\"directory\": \"" FIX "/basic\", \"command\": \"cc -c util.c\", \"file\": \"util.c\"}]\n");
    unlink(WORK "/parse_only/index.sqlite");
    int st = tb_shell(&out, "'%s' index --parse-only --verbose -j 2 --compdb '%s/parse_only' --output "
                      "'%s/parse_only/index.sqlite'", TRACEBOOK, WORK, WORK);
    const char *cpu = strstr(out, "CPU in libclang's parses ");
    double parse_cpu = cpu ? strtod(cpu + strlen("CPU in libclang's parses "), NULL) : 0;
    TB_CHECK(st == 0 && tb_has(out, "2 TUs parsed (0 failed) with -j 2") && parse_cpu > 0,
             "two units: exit %d, parses' CPU %g s:\n%s", st, parse_cpu, out);
    TB_CHECK(access(WORK "/parse_only/index.sqlite", F_OK) != 0, "--parse-only wrote an index");
    free(out);
    tb_write_text(WORK "/parse_only/compile_commands.json",
                  "[{\"directory\": \"" FIX "/basic\", \"command\": \"cc -c util.c\", \"file\": \"util.c\"},\n"
                  " {\"directory\": \"" FIX "/broken\", \"command\": \"cc -c missing.c\", \"file\": \"missing.c\"}]\n");
    st = tb_shell(&out, "'%s' index --parse-only --compdb '%s/parse_only'", TRACEBOOK, WORK);
    TB_CHECK(st == 1 && tb_has(out, "2 TUs parsed (1 failed)") &&
                 tb_has(out, FIX "/broken/missing.c: libclang could not create the translation unit"),
             "a missing source, named: exit %d:\n%s", st, out);
    free(out);
}

TB_TEST(missing_or_malformed_compdb_fails_naming_the_path) {
    tb_error err;
    tb_mkdir_p(WORK "/bad", &err);
    char *out = NULL;
    const char *missing = WORK "/bad/nowhere/compile_commands.json";
    unlink(WORK "/bad/index.sqlite");
    int st = tb_shell(&out, "'%s' index --compdb '%s' --output '%s/bad/index.sqlite'", TRACEBOOK, missing, WORK);
    TB_CHECK(st != 0 && strstr(out, missing), "missing database: exit %d, output:\n%s", st, out);
    TB_CHECK(!tb_exists(WORK "/bad/index.sqlite"), "no index written");
    free(out);

    const char *malformed = WORK "/bad/compile_commands.json";
    tb_write_text(malformed, "[\n {\"directory\": \"/tmp\", \"file\": \"a.c\",\n");
    st = tb_shell(&out, "'%s' index --compdb '%s/bad' --output '%s/bad/index.sqlite'", TRACEBOOK, WORK, WORK);
    TB_CHECK(st != 0 && strstr(out, malformed) && strstr(out, "malformed"), "malformed JSON: exit %d, output:\n%s",
             st, out);
    char pos[600];
    snprintf(pos, sizeof pos, "%s:3:", malformed);  // jansson's line of the error
    TB_CHECK(strstr(out, pos) != NULL, "the JSON error's position (%s) in:\n%s", pos, out);
    free(out);

    tb_write_text(malformed, "[{\"directory\": \"/tmp\", \"command\": \"cc -c a.c\"}]\n");
    st = tb_shell(&out, "'%s' index --compdb '%s' --output '%s/bad/index.sqlite'", TRACEBOOK, malformed, WORK);
    TB_CHECK(st != 0 && strstr(out, malformed) && strstr(out, "entry 0"), "entry without file: exit %d:\n%s", st,
             out);
    TB_CHECK(!tb_exists(WORK "/bad/index.sqlite"), "no index written");
    free(out);

    // a database that cannot be read (here a directory by that name: the tests may run as root)
    tb_mkdir_p(WORK "/bad/dir/compile_commands.json", &err);
    st = tb_shell(&out, "'%s' index --compdb '%s/bad/dir' --output '%s/bad/index.sqlite'", TRACEBOOK, WORK, WORK);
    TB_CHECK(st == 1 && tb_has(out, WORK "/bad/dir/compile_commands.json: cannot read the compilation database: it is a"
                                    " directory"),
             "unreadable database: exit %d:\n%s", st, out);
    TB_CHECK(!tb_exists(WORK "/bad/index.sqlite"), "no index written");
    free(out);
}

TB_TEST(nvcc_cuda_file_parses_as_host_code) {
    if (!tb_exists("/usr/local/cuda/include/cuda_runtime.h")) {
        printf("  skipped: no CUDA toolkit at /usr/local/cuda\n");
        return;
    }
    tb_error err;
    tb_mkdir_p(WORK "/cuda", &err);
    tb_write_text(WORK "/cuda/compile_commands.json",
               "[{\"directory\": \"" FIX "/cuda\", \"command\": \"/usr/local/cuda/bin/nvcc -gencode"
               " arch=compute_90,code=sm_90 -arch=sm_90 -ccbin /usr/bin/g++ --extended-lambda"
               " --expt-relaxed-constexpr -Xcompiler -fPIC,-Wall --use_fast_math -rdc=true -Xptxas -v -lineinfo"
               " --diag-suppress 177 -O3 --std c++17 -I" FIX "/cuda -c kernels.cu -o kernels.o\","
               " \"file\": \"kernels.cu\"}]\n");
    char *out = NULL;
    int st = tb_shell(&out, "'%s' index --compdb '%s/cuda' --output '%s/cuda/index.sqlite'", TRACEBOOK, WORK, WORK);
    TB_CHECK(st == 0, "exit status %d:\n%s", st, out);
    sqlite3 *db = tb_index_open_ro(WORK "/cuda/index.sqlite");
    TB_REQUIRE(db, "no index:\n%s", out);
    const char *cu = FIX "/cuda/kernels.cu";
    char *status = q_text(db, "SELECT status FROM files WHERE path = %Q", cu);
    char *diag = q_text(db, "SELECT diagnostics FROM files WHERE path = %Q", cu);
    TB_CHECK(same(status, "ok"), "kernels.cu status %s: %s", status ? status : "(none)", diag ? diag : "");
    free(status);
    free(diag);
    TB_CHECK(tb_index_q_long(
                 db, "SELECT COUNT(*) FROM functions WHERE usr = 'c:@F@launch_scale' AND is_definition = 1") == 1,
             "the extern \"C\" launcher (a C USR)");
    TB_CHECK(tb_index_q_long(db, "SELECT COUNT(*) FROM functions WHERE name = 'scale_kernel' AND is_definition = 1") ==
                 1,
             "the kernel");
    TB_CHECK(tb_index_q_long(
                 db, "SELECT COUNT(*) FROM functions WHERE name = 'blocks' AND usr LIKE 'c:@N@fx@S@Launcher@%%'") == 1,
             "a C++ method");
    char *tmpl = q_text(db, "SELECT usr FROM functions WHERE name = 'host_max' AND line = %d",
                        tb_line_of(cu, "TEMPLATE_HOST_MAX"));
    TB_CHECK(tmpl && !strncmp(tmpl, "c:@FT@", 6), "host_max: a function template row, USR %s", tmpl ? tmpl : "(none)");
    const char *q = "SELECT COUNT(*) FROM calls c JOIN functions fn ON fn.id = c.caller_id"
                    " WHERE fn.usr = 'c:@F@launch_scale' AND c.callee_usr = %Q AND c.line = %d";
    TB_CHECK(tmpl && tb_index_q_long(db, q, tmpl, tb_line_of(cu, "CALL_HOST_MAX")) == 1,
             "the template call -> the template");
    TB_CHECK(tb_index_q_long(db, q, "c:@F@ncclAllReduce", tb_line_of(cu, "CALL_NCCL_CU")) == 1,
             "the extern \"C\" NCCL call");
    TB_CHECK(tb_index_q_long(db,
                             "SELECT COUNT(*) FROM calls c JOIN functions fn ON fn.id = c.caller_id"
                             " WHERE fn.usr = 'c:@F@launch_scale' AND c.callee_name = 'scale_kernel' AND c.line = %d",
                             tb_line_of(cu, "KERNEL_LAUNCH")) == 1,
             "the kernel launch");
    TB_CHECK(tb_index_q_long(db, "SELECT COUNT(*) FROM collective_sites s JOIN functions fn ON fn.id = s.function_id"
                                 " WHERE fn.usr = 'c:@F@launch_scale' AND s.callee_name = 'ncclAllReduce'") == 1,
             "ncclAllReduce is a collective site");
    free(tmpl);
    sqlite3_close(db);
    free(out);
}

// ---------------------------------------------------------------------------------------
// The project's own build (the tests run after it, so its compile_commands.json exists).

TB_TEST(project_index_end_to_end) {
    const char *build = TB_BIN_DIR "/..";
    if (!tb_exists(TB_BIN_DIR "/../compile_commands.json")) {
        TB_CHECK(0, "no %s/compile_commands.json: configure with CMake first", build);
        return;
    }
    char *out = NULL;
    // (no timing here: the index's speed is scripts/bench-index.sh's, next to libclang's parses)
    int st = tb_shell(&out, "'%s' index --compdb '%s' --output '%s/project.sqlite'", TRACEBOOK, build, WORK);
    TB_CHECK(st == 0, "exit status %d:\n%s", st, out);
    sqlite3 *db = tb_index_open_ro(WORK "/project.sqlite");
    TB_REQUIRE(db, "no index:\n%s", out);

    long engine =
        tb_index_q_long(db, "SELECT COUNT(*) FROM files WHERE is_tu = 1 AND path LIKE %Q", TB_SOURCE_DIR "/engine/%");
    long bad = tb_index_q_long(db, "SELECT COUNT(*) FROM files WHERE is_tu = 1 AND path LIKE %Q AND status != 'ok'",
                               TB_SOURCE_DIR "/engine/%");
    char *first_bad = q_text(db, "SELECT path || ': ' || IFNULL(diagnostics, '') FROM files WHERE is_tu = 1 AND"
                                 " path LIKE %Q AND status != 'ok'",
                             TB_SOURCE_DIR "/engine/%");
    TB_CHECK(engine >= 20 && bad == 0, "%ld engine units, %ld not ok; first: %s", engine, bad,
             first_bad ? first_bad : "-");
    free(first_bad);

    TB_CHECK(
        tb_index_q_long(
            db, "SELECT COUNT(*) FROM field_targets t JOIN functions fn ON fn.usr = t.function_usr"
                " WHERE t.record = 'tb_comm_backend' AND t.field = 'all_reduce' AND fn.name = 'local_all_reduce'") == 1,
        "local_all_reduce is tb_comm_backend.all_reduce (positional initializer of tb_local_backend)");
    TB_CHECK(tb_index_q_long(
                 db,
                 "SELECT COUNT(*) FROM field_targets t JOIN functions fn ON fn.usr = t.function_usr"
                 " WHERE t.record = 'tb_norm_module' AND t.field = 'forward' AND fn.name = 'layernorm_forward'") == 1,
             "layernorm_forward is tb_norm_module.forward (spec.c)");
    TB_CHECK(
        tb_index_q_long(db, "SELECT COUNT(*) FROM range_sites r JOIN functions fn ON fn.id = r.function_id"
                            " WHERE r.kind = 'push' AND r.name = 'layer.%%d.mlp.fc2' AND fn.name = 'mlp_forward'") == 1,
        "range site layer.%%d.mlp.fc2 in mlp_forward");
    TB_CHECK(tb_index_q_long(db, "SELECT COUNT(*) FROM collective_sites WHERE callee_name = 'tb_all_reduce'") > 0,
             "tb_all_reduce call sites are collective sites");

    const char *in_target = "SELECT COUNT(*) FROM targets t JOIN files f ON f.id = t.file_id"
                            " WHERE t.target = %Q AND f.path = %Q";
    TB_CHECK(tb_index_q_long(db, in_target, "pretrain_gpt", TB_SOURCE_DIR "/engine/pretrain_gpt.c") == 1,
             "pretrain_gpt.c links into pretrain_gpt");
    TB_CHECK(tb_index_q_long(db, in_target, "pretrain_gpt", TB_SOURCE_DIR "/engine/comm/local_backend.c") == 1,
             "local_backend.c (tb_engine) links into pretrain_gpt");
    TB_CHECK(tb_index_q_long(db, in_target, "pretrain_gpt", TB_SOURCE_DIR "/tests/engine/test_comm.c") == 0,
             "test_comm.c does not link into pretrain_gpt");
    TB_CHECK(tb_index_q_long(db, in_target, "test_comm", TB_SOURCE_DIR "/tests/engine/test_comm.c") == 1,
             "test_comm.c links into test_comm");
    TB_CHECK(tb_index_q_long(db, "SELECT COUNT(DISTINCT usr) FROM functions WHERE name = 'main'") ==
                     tb_index_q_long(db, "SELECT COUNT(*) FROM functions WHERE name = 'main'") &&
                 tb_index_q_long(db, "SELECT COUNT(*) FROM functions WHERE name = 'main'") > 2,
             "every binary's main is its own row");
    sqlite3_close(db);
    free(out);
}

int main(void) {
    tb_error err;
    if (tb_mkdir_p(WORK, &err)) {
        printf("%s\n", err.msg);
        return 1;
    }
    TB_RUN(functions_and_calls_are_recorded_with_file_and_line);
    TB_RUN(static_functions_with_the_same_name_stay_distinct);
    TB_RUN(calls_inside_macros_belong_to_the_function_using_the_macro);
    TB_RUN(field_calls_resolve_through_designated_positional_and_assigned_targets);
    TB_RUN(range_sites_carry_literal_and_printf_pattern_names);
    TB_RUN(collective_sites_cover_nccl_tb_all_reduce_and_backend_entry_points);
    TB_RUN(functions_end_at_their_closing_brace);
    TB_RUN(callbacks_are_recorded_and_chains_go_through_them);
    TB_RUN(a_syntax_error_gives_partial_status_with_diagnostics_and_keeps_what_parsed);
    TB_RUN(a_missing_source_fails_the_run_and_a_partial_unit_does_not);
    TB_RUN(parse_only_parses_every_unit_and_writes_no_index);
    TB_RUN(missing_or_malformed_compdb_fails_naming_the_path);
    TB_RUN(nvcc_cuda_file_parses_as_host_code);
    TB_RUN(project_index_end_to_end);
    sqlite3_close(fx_db);
    free(fx_output);
    return tb_test_summary();
}
