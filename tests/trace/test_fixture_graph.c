// test_fixture_graph.c — the graph fixture (tests/trace/fixtures/graph/) end to end: the
// real `tracebook index` over a compile_commands.json and a hand-written CMake file-API reply
// (two executables, alpha and beta, each with its own main, both linking the library
// gx_common = common.c + ops.c), then the real `tracebook def | callers | callees | chain`.
//
// The call graph of the fixture is known, so the checks are exact: every call site a
// function makes (name, file:line:col, field, macro, resolved targets), and every hop of
// every chain. Lines and columns come from marker comments and call text in the fixture
// (line_of / col_of), never from hard-coded numbers.
#include <sqlite3.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/fileio.h"
#include "index_query.h"
#include "chain_output.h"
#include "tb_shell.h"
#include "tb_test.h"

#define TRACEBOOK TB_BIN_DIR "/tracebook"
#define GFIX TB_SOURCE_DIR "/tests/trace/fixtures/graph"
#define WORK TB_TEST_TMPDIR "/test_fixture_graph"
#define REPLY WORK "/.cmake/api/v1/reply"
#define INDEX WORK "/index.sqlite"

// ---------------------------------------------------------------------------------------
// Helpers


// `tracebook CMD ARGS --index INDEX`
static int tb(char **output, const char *args) {
    return tb_shell(output, "'%s' %s --index '%s'", TRACEBOOK, args, INDEX);
}

// Strings that live until the end of the run (expected texts built from fixture positions).
static char *keep(const char *fmt, ...) {
    static char ring[512][640];
    static int next;
    char *s = ring[next++ % 512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s, sizeof ring[0], fmt, ap);
    va_end(ap);
    return s;
}

// The 1-based line of the first line of fixture FILE containing marker (-1 if none); with
// needle, *col gets the 1-based column of needle on that line (-1 if not there).
static int locate(const char *file, const char *marker, const char *needle, int *col) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", GFIX, file);
    return tb_locate(path, marker, needle, col);
}

static int line_of(const char *file, const char *marker) { return locate(file, marker, NULL, NULL); }

// "name (file:L)": a function as query output names it, L the line of its definition text.
static const char *fn_at(const char *name, const char *file, const char *def_text) {
    return keep("%s (%s:%d)", name, file, line_of(file, def_text));
}

// "file:L:C" of a call site: L the marker's line, C the column of the call text.
static const char *at(const char *file, const char *marker, const char *call_text) {
    int col, line = locate(file, marker, call_text, &col);
    return keep("%s:%d:%d", file, line, col);
}

// "callee file:L:C" of a call site: L the marker's line, C the column of the call text.
static const char *site(const char *callee, const char *file, const char *marker, const char *call_text) {
    int col, line = locate(file, marker, call_text, &col);
    return keep("%s %s:%d:%d", callee, file, line, col);
}

// Collapses runs of spaces (query output pads names to a column).
static char *squeeze(const char *s) {
    char *o = malloc(strlen(s) + 1), *q = o;
    for (const char *p = s; *p; p++)
        if (!(*p == ' ' && q > o && q[-1] == ' ')) *q++ = *p;
    *q = 0;
    return o;
}

// Checks that the indented lines under the header line containing `header` in out are
// exactly want[0..n) (spaces squeezed, order free, no extra, no missing).
static void check_block(const char *out, const char *header, const char **want, int n) {
    const char *h = strstr(out, header);
    TB_CHECK(h != NULL, "no '%s' in:\n%s", header, out);
    if (!h) return;
    const char *p = strchr(h, '\n');
    int got = 0;
    char *used = calloc((size_t)n + 1, 1);
    while (p && p[1] == ' ' && p[2] == ' ') {
        const char *e = strchr(p + 1, '\n');
        char *raw = strndup(p + 3, e ? (size_t)(e - p - 3) : strlen(p + 3));
        char *line = squeeze(raw);
        int match = -1;
        for (int i = 0; i < n && match < 0; i++)
            if (!used[i] && !strcmp(line, want[i])) match = i;
        TB_CHECK(match >= 0, "under '%s': unexpected line '%s'", header, line);
        if (match >= 0) used[match] = 1;
        got++;
        free(raw);
        free(line);
        p = e;
    }
    for (int i = 0; i < n; i++) TB_CHECK(used[i], "under '%s': missing '%s'\n%s", header, want[i], out);
    TB_CHECK(got == n, "under '%s': %d lines, expected %d", header, got, n);
    free(used);
}

// Builds the exact text of one chain: "#k (N calls)\n    hop0\n  → hop1\n ...".
static char *chain_text(int k, int nhops, const char **hops) {
    size_t cap = 4096;
    char *s = malloc(cap);
    int calls = nhops - 1;
    int len = snprintf(s, cap, "#%d (%d call%s)\n", k, calls, calls == 1 ? "" : "s");
    for (int i = 0; i < nhops; i++) len += snprintf(s + len, cap - (size_t)len, "  %s%s\n", i ? "→ " : "  ", hops[i]);
    return s;
}

// No function name appears twice among the hops of one chain text.
static int hops_distinct(const char *chain) {
    char names[64][128];
    int n = 0;
    for (const char *p = strchr(chain, '\n'); p && n < 64; p = strchr(p + 1, '\n')) {
        const char *q = p + 1;
        while (*q == ' ') q++;
        if (!strncmp(q, "→ ", strlen("→ "))) q += strlen("→ ");
        const char *sp = strchr(q, ' ');
        if (!sp || sp == q) continue;
        snprintf(names[n], sizeof names[n], "%.*s", (int)(sp - q), q);
        for (int i = 0; i < n; i++)
            if (!strcmp(names[i], names[n])) return 0;
        n++;
    }
    return 1;
}

// ---------------------------------------------------------------------------------------
// The index: compile_commands.json and the CMake file-API reply written here with
// absolute paths, then `tracebook index`.

static int ix_status = -1;
static char *ix_output;

static int write_inputs(void) {
    tb_error err;
    if (tb_mkdir_p(REPLY, &err)) {
        printf("  %s\n", err.msg);
        return -1;
    }
    const char *units[] = {"alpha.c", "beta.c", "common.c", "ops.c", "broken.c"};
    char json[8192];
    int len = snprintf(json, sizeof json, "[\n");
    for (size_t i = 0; i < sizeof units / sizeof *units; i++)
        len += snprintf(json + len, sizeof json - (size_t)len,
                        " {\"directory\": \"%s\", \"arguments\": [\"/usr/bin/cc\", \"-std=c17\", \"-I%s\", \"-c\","
                        " \"%s/%s\", \"-o\", \"%s.o\"], \"file\": \"%s/%s\"}%s\n",
                        WORK, GFIX, GFIX, units[i], units[i], GFIX, units[i],
                        i + 1 < sizeof units / sizeof *units ? "," : "");
    snprintf(json + len, sizeof json - (size_t)len, "]\n");
    int bad = tb_write_text(WORK "/compile_commands.json", json);
    // index → codemodel-v2 → one json per target (only the fields index_targets.c reads)
    bad |= tb_write_text(REPLY "/index-2000-01-01T00-00-00-0000.json",
                      "{\"reply\": {\"codemodel-v2\": {\"kind\": \"codemodel\", \"version\": {\"major\": 2,"
                      " \"minor\": 0}, \"jsonFile\": \"codemodel-v2-gx.json\"}}}\n");
    bad |= tb_write_text(REPLY "/codemodel-v2-gx.json",
                      "{\"kind\": \"codemodel\", \"paths\": {\"source\": \"" GFIX "\", \"build\": \"" WORK "\"},\n"
                      " \"configurations\": [{\"name\": \"\", \"targets\": [\n"
                      "  {\"id\": \"alpha::@gx\", \"name\": \"alpha\", \"jsonFile\": \"target-alpha.json\"},\n"
                      "  {\"id\": \"beta::@gx\", \"name\": \"beta\", \"jsonFile\": \"target-beta.json\"},\n"
                      "  {\"id\": \"gx_common::@gx\", \"name\": \"gx_common\", \"jsonFile\": \"target-gx_common.json\"}\n"
                      " ]}]}\n");
    bad |= tb_write_text(REPLY "/target-alpha.json",
                      "{\"name\": \"alpha\", \"type\": \"EXECUTABLE\", \"sources\": [{\"path\": \"alpha.c\","
                      " \"compileGroupIndex\": 0}], \"dependencies\": [{\"id\": \"gx_common::@gx\"}]}\n");
    bad |= tb_write_text(REPLY "/target-beta.json",
                      "{\"name\": \"beta\", \"type\": \"EXECUTABLE\", \"sources\": [{\"path\": \"beta.c\","
                      " \"compileGroupIndex\": 0}], \"dependencies\": [{\"id\": \"gx_common::@gx\"}]}\n");
    bad |= tb_write_text(REPLY "/target-gx_common.json",
                      "{\"name\": \"gx_common\", \"type\": \"STATIC_LIBRARY\", \"sources\": [\n"
                      "  {\"path\": \"common.c\", \"compileGroupIndex\": 0},\n"
                      "  {\"path\": \"ops.c\", \"compileGroupIndex\": 0},\n"
                      "  {\"path\": \"gx.h\"}]}\n");
    return bad ? -1 : 0;
}

static int indexed(void) {
    return tb_index_fixture(&ix_status, &ix_output, ix_status >= 0 || write_inputs() == 0, TRACEBOOK, WORK, INDEX);
}

static sqlite3 *open_db(void) { return tb_index_open_ro(INDEX); }

// ---------------------------------------------------------------------------------------
// Definitions of the fixture's functions, as query output names them.

#define F_MAIN_A fn_at("main", "alpha.c", "int main(int argc")
#define F_MAIN_B fn_at("main", "beta.c", "int main(void)")
#define F_ALPHA_ONLY fn_at("alpha_only", "alpha.c", "static int alpha_only(")
#define F_BETA_ONLY fn_at("beta_only", "beta.c", "int beta_only(")
#define F_WORK fn_at("common_work", "common.c", "int common_work(")
#define F_DISPATCH fn_at("gx_dispatch", "common.c", "int gx_dispatch(")
#define F_FINISH fn_at("gx_finish", "common.c", "int gx_finish(")
#define F_TABLE fn_at("gx_run_table", "common.c", "int gx_run_table(")
#define F_ONE fn_at("entry_one", "common.c", "int entry_one(")
#define F_TWO fn_at("entry_two", "common.c", "int entry_two(")
#define F_THREE fn_at("entry_three", "common.c", "int entry_three(")
#define F_FACT fn_at("gx_fact", "common.c", "int gx_fact(")
#define F_FACT_LEAF fn_at("gx_fact_leaf", "common.c", "int gx_fact_leaf(")
#define F_EVEN fn_at("gx_is_even", "common.c", "int gx_is_even(")
#define F_ODD fn_at("gx_is_odd", "common.c", "int gx_is_odd(")
#define F_REC_LEAF fn_at("gx_rec_leaf", "common.c", "int gx_rec_leaf(")
#define F_COMMON_ENTRY fn_at("gx_common_entry", "common.c", "int gx_common_entry(")
#define F_HELPER_COMMON fn_at("helper", "common.c", "HELPER_COMMON")
#define F_HELPER_OPS fn_at("helper", "ops.c", "HELPER_OPS")
#define F_OPS_ENTRY fn_at("gx_ops_entry", "ops.c", "int gx_ops_entry(")
#define F_OPS_SETUP fn_at("gx_ops_setup", "ops.c", "void gx_ops_setup(")
#define F_PLAIN fn_at("op_plain_run", "ops.c", "int op_plain_run(")
#define F_POS fn_at("op_pos_run", "ops.c", "int op_pos_run(")
#define F_ASSIGNED fn_at("op_assigned_run", "ops.c", "int op_assigned_run(")
#define F_COLLECTIVE fn_at("op_collective_run", "ops.c", "int op_collective_run(")
#define F_OP_FINISH fn_at("op_finish", "ops.c", "int op_finish(")
#define F_NCCL fn_at("ncclAllReduce", "gx.h", "int ncclAllReduce(")
// a chain's last hop at a function declared only (no definition; no library known: no link lines here)
#define F_NCCL_HOP keep("ncclAllReduce (declared at gx.h:%d)", line_of("gx.h", "int ncclAllReduce("))

// The four functions assigned to gx_ops.run, in definition order (designated, positional,
// assigned, designated).
#define RUN_TARGETS keep("%s, %s, %s, %s", F_PLAIN, F_POS, F_ASSIGNED, F_COLLECTIVE)

// ---------------------------------------------------------------------------------------
// Tests

TB_TEST(index_runs_and_keeps_what_parsed_around_a_syntax_error) {
    int ok = indexed();
    TB_REQUIRE(ok, "index exit status %d:\n%s", ix_status, ix_output);
    TB_CHECK(tb_has(ix_output, "5 TUs (1 with errors, 0 failed)"), "summary:\n%s", ix_output);
    TB_CHECK(tb_has(ix_output, "targets 3"), "three targets from the file-API reply:\n%s", ix_output);
    char where[600];
    snprintf(where, sizeof where, "%s/broken.c:%d:", GFIX, line_of("broken.c", "GXB_SYNTAX_ERROR"));
    TB_CHECK(tb_has(ix_output, where) && tb_has(ix_output, "partial"), "the error at %s reported:\n%s", where,
             ix_output);
    sqlite3 *db = open_db();
    TB_REQUIRE(db, "cannot open %s", INDEX);
    TB_CHECK(
        tb_index_q_long(db, "SELECT COUNT(*) FROM files WHERE is_tu = 1 AND status = 'ok' AND path IN (%Q, %Q, %Q, %Q)",
                        GFIX "/alpha.c", GFIX "/beta.c", GFIX "/common.c", GFIX "/ops.c") == 4,
        "the four good units are ok");
    TB_CHECK(
        tb_index_q_long(db, "SELECT COUNT(*) FROM files WHERE path = %Q AND status = 'partial'", GFIX "/broken.c") == 1,
        "broken.c is partial");
    sqlite3_close(db);
    char *out;
    int rc = tb(&out, "callees gxb_after");
    const char *want[] = {keep("gxb_before %s:%d:12 → %s", "broken.c", line_of("broken.c", "GXB_CALL_BEFORE"),
                               fn_at("gxb_before", "broken.c", "int gxb_before("))};
    TB_CHECK(rc == 0, "rc %d:\n%s", rc, out);
    check_block(out, "calls made by gxb_after (", want, 1);
    free(out);
}

TB_TEST(callees_list_exactly_the_known_call_sites) {
    TB_REQUIRE(indexed(), "no index:\n%s", ix_output);
    struct {
        const char *symbol, *header;
        const char *want[10];
    } cases[] = {
        {"alpha.c:main",
         "calls made by main (alpha.c:",
         {keep("%s → %s", site("gx_dispatch", "alpha.c", "ALPHA_CALL_DISPATCH", "gx_dispatch("), F_DISPATCH),
          keep("%s [GX_WORK] → %s", site("common_work", "alpha.c", "ALPHA_CALL_MACRO", "GX_WORK("), F_WORK),
          keep("%s → %s", site("gx_run_table", "alpha.c", "ALPHA_CALL_TABLE", "gx_run_table("), F_TABLE),
          keep("%s → %s", site("gx_is_odd", "alpha.c", "ALPHA_CALL_ODD", "gx_is_odd("), F_ODD),
          keep("%s → %s", site("gx_fact", "alpha.c", "ALPHA_CALL_FACT", "gx_fact("), F_FACT),
          keep("%s → %s", site("gx_common_entry", "alpha.c", "ALPHA_CALL_COMMON_ENTRY", "gx_common_entry("),
               F_COMMON_ENTRY),
          keep("%s → %s", site("gx_ops_entry", "alpha.c", "ALPHA_CALL_OPS_ENTRY", "gx_ops_entry("), F_OPS_ENTRY),
          keep("%s → %s", site("alpha_only", "alpha.c", "ALPHA_CALL_ALPHA_ONLY", "alpha_only("), F_ALPHA_ONLY)}},
        {"beta.c:main",
         "calls made by main (beta.c:",
         {keep("%s → %s", site("gx_ops_setup", "beta.c", "BETA_CALL_SETUP", "gx_ops_setup("), F_OPS_SETUP),
          keep("%s via gx_ops.run [GX_RUN_OPS] → %s", site("run", "beta.c", "BETA_CALL_MACRO_OPS", "GX_RUN_OPS("),
               RUN_TARGETS),
          keep("%s → %s", site("beta_only", "beta.c", "BETA_CALL_BETA_ONLY", "beta_only("), F_BETA_ONLY),
          keep("%s → %s", site("gx_fact", "beta.c", "BETA_CALL_FACT", "gx_fact("), F_FACT)}},
        {"gx_dispatch",
         "calls made by gx_dispatch (",
         {keep("%s via gx_ops.run → %s", site("run", "common.c", "CALL_ARGS_OPS_RUN", "args->ops->run("), RUN_TARGETS),
          keep("%s → %s", site("gx_finish", "common.c", "CALL_GX_FINISH", "gx_finish("), F_FINISH)}},
        {"gx_finish",
         "calls made by gx_finish (",
         {keep("%s via gx_ops.finish → %s", site("finish", "common.c", "CALL_OPS_FINISH", "ops->finish("),
               F_OP_FINISH)}},
        {"gx_run_table",
         "calls made by gx_run_table (",
         {keep("%s via gx_entry.fn → %s, %s, %s", site("fn", "common.c", "CALL_TABLE_FN", "table[i].fn("), F_ONE, F_TWO,
               F_THREE)}},
        {"entry_one",
         "calls made by entry_one (",
         {keep("%s → %s", site("common_work", "common.c", "CALL_ENTRY_ONE_WORK", "common_work("), F_WORK)}},
        {"gx_fact",
         "calls made by gx_fact (",
         {keep("%s → %s", site("gx_fact_leaf", "common.c", "CALL_FACT_LEAF", "gx_fact_leaf("), F_FACT_LEAF),
          keep("%s → %s", site("gx_fact", "common.c", "CALL_FACT_SELF", "gx_fact("), F_FACT)}},
        {"gx_is_even",
         "calls made by gx_is_even (",
         {keep("%s → %s", site("gx_rec_leaf", "common.c", "CALL_REC_LEAF", "gx_rec_leaf("), F_REC_LEAF),
          keep("%s → %s", site("gx_is_odd", "common.c", "CALL_EVEN_ODD", "gx_is_odd("), F_ODD)}},
        {"gx_is_odd",
         "calls made by gx_is_odd (",
         {keep("%s → %s", site("gx_is_even", "common.c", "CALL_ODD_EVEN", "gx_is_even("), F_EVEN)}},
        {"gx_common_entry",
         "calls made by gx_common_entry (",
         {keep("%s → %s", site("helper", "common.c", "CALL_HELPER_COMMON", "helper("), F_HELPER_COMMON)}},
        {"gx_ops_entry",
         "calls made by gx_ops_entry (",
         {keep("%s → %s", site("helper", "ops.c", "CALL_HELPER_OPS", "helper("), F_HELPER_OPS)}},
        {"op_collective_run",
         "calls made by op_collective_run (",
         {keep("%s → %s", site("ncclAllReduce", "ops.c", "CALL_NCCL", "ncclAllReduce("), F_NCCL)}},
        {"alpha_only",
         "calls made by alpha_only (",
         {keep("%s → %s", site("common_work", "alpha.c", "CALL_ALPHA_ONLY_WORK", "common_work("), F_WORK)}},
        {"beta_only",
         "calls made by beta_only (",
         {keep("%s → %s", site("common_work", "beta.c", "CALL_BETA_ONLY_WORK", "common_work("), F_WORK)}},
        {"gx_ops_setup", "calls made by gx_ops_setup (", {"(no calls)"}},  // assignments are not calls
        {"op_plain_run", "calls made by op_plain_run (", {"(no calls)"}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        int n = 0;
        while (n < 10 && cases[i].want[n]) n++;
        char *out;
        int rc = tb(&out, keep("callees '%s'", cases[i].symbol));
        TB_CHECK(rc == 0, "callees %s: rc %d:\n%s", cases[i].symbol, rc, out);
        TB_CHECK(!tb_has(out, "calls made by") || !strstr(strstr(out, "calls made by") + 1, "calls made by"),
                 "callees %s: one function:\n%s", cases[i].symbol, out);
        check_block(out, cases[i].header, cases[i].want, n);
        free(out);
    }
}

TB_TEST(static_functions_of_the_same_name_stay_distinct) {
    TB_REQUIRE(indexed(), "no index:\n%s", ix_output);
    char *out;
    int rc = tb(&out, "def helper");
    TB_CHECK(rc == 0, "rc %d:\n%s", rc, out);
    const char *want[] = {
        keep("helper common.c:%d static definition c:%s/common.c@F@helper", line_of("common.c", "HELPER_COMMON"),
             GFIX),
        keep("helper ops.c:%d static definition c:%s/ops.c@F@helper", line_of("ops.c", "HELPER_OPS"), GFIX),
    };
    // def prints one unindented line per definition; indent it for check_block
    char *block = malloc(strlen(out) * 2 + 16), *q = block;
    q += sprintf(q, "defs:\n");
    for (const char *p = out; *p;) {
        const char *e = strchr(p, '\n');
        size_t n = e ? (size_t)(e - p) : strlen(p);
        q += sprintf(q, "  %.*s\n", (int)n, p);
        p = e ? e + 1 : p + n;
    }
    check_block(block, "defs:", want, 2);
    free(block);
    free(out);

    // each file's caller resolves to its own helper, and only to it
    rc = tb(&out, "callers common.c:helper");
    const char *want_c[] = {keep("gx_common_entry common.c:%d:12", line_of("common.c", "CALL_HELPER_COMMON"))};
    TB_CHECK(rc == 0, "rc %d:\n%s", rc, out);
    check_block(out, "callers of helper (common.c:", want_c, 1);
    TB_CHECK(!tb_has(out, "ops.c"), "common.c's helper has no caller in ops.c:\n%s", out);
    free(out);
    rc = tb(&out, "callers ops.c:helper");
    const char *want_o[] = {keep("gx_ops_entry ops.c:%d:12", line_of("ops.c", "CALL_HELPER_OPS"))};
    TB_CHECK(rc == 0, "rc %d:\n%s", rc, out);
    check_block(out, "callers of helper (ops.c:", want_o, 1);
    TB_CHECK(!tb_has(out, "common.c"), "ops.c's helper has no caller in common.c:\n%s", out);
    free(out);
}

TB_TEST(callers_of_a_function_assigned_to_a_field_include_the_field_call_sites) {
    TB_REQUIRE(indexed(), "no index:\n%s", ix_output);
    // designated, positional, assigned and designated-in-a-partial-initializer: the same two sites
    const char *run_sites[] = {
        keep("gx_dispatch %s via gx_ops.run", at("common.c", "CALL_ARGS_OPS_RUN", "args->ops->run(")),
        keep("main %s via gx_ops.run [GX_RUN_OPS]",
             at("beta.c", "BETA_CALL_MACRO_OPS", "GX_RUN_OPS(")),
    };
    const char *fns[] = {"op_plain_run", "op_pos_run", "op_assigned_run", "op_collective_run"};
    for (size_t i = 0; i < 4; i++) {
        char *out;
        int rc = tb(&out, keep("callers %s", fns[i]));
        TB_CHECK(rc == 0, "callers %s: rc %d:\n%s", fns[i], rc, out);
        check_block(out, keep("callers of %s (ops.c:", fns[i]), run_sites, 2);
        free(out);
    }
    char *out;
    int rc = tb(&out, "callers op_finish");
    const char *fin[] = {keep("gx_finish %s via gx_ops.finish",
                              at("common.c", "CALL_OPS_FINISH", "ops->finish("))};
    TB_CHECK(rc == 0, "rc %d:\n%s", rc, out);
    check_block(out, "callers of op_finish (ops.c:", fin, 1);
    free(out);
    // the field itself: what is assigned to it, and where it is called
    rc = tb(&out, "callers gx_ops.run");
    const char *field_sites[] = {
        keep("gx_dispatch %s", at("common.c", "CALL_ARGS_OPS_RUN", "args->ops->run(")),
        keep("main %s", at("beta.c", "BETA_CALL_MACRO_OPS", "GX_RUN_OPS(")),
    };
    TB_CHECK(rc == 0, "rc %d:\n%s", rc, out);
    check_block(out, keep("calls through gx_ops.run (assigned: %s):", RUN_TARGETS), field_sites, 2);
    free(out);
}

TB_TEST(array_of_structs_call_resolves_to_every_function_in_the_array) {
    TB_REQUIRE(indexed(), "no index:\n%s", ix_output);
    const char *fns[] = {"entry_one", "entry_two", "entry_three"};
    const char *call = keep("gx_run_table %s via gx_entry.fn",
                            at("common.c", "CALL_TABLE_FN", "table[i].fn("));
    for (size_t i = 0; i < 3; i++) {
        char *out;
        int rc = tb(&out, keep("callers %s", fns[i]));
        TB_CHECK(rc == 0, "callers %s: rc %d:\n%s", fns[i], rc, out);
        check_block(out, keep("callers of %s (common.c:", fns[i]), &call, 1);
        free(out);
    }
    // positional, designated and index-designated elements all count
    char *out;
    int rc = tb(&out, "chain --from alpha --to entry_three");
    const char *hops[] = {keep("main (alpha.c:%d)", line_of("alpha.c", "ALPHA_CALL_TABLE")),
                          keep("gx_run_table (common.c:%d, via gx_entry.fn)", line_of("common.c", "CALL_TABLE_FN")),
                          F_THREE};
    char *want = chain_text(1, 3, hops), *c1 = tb_chain_n(out, 1);
    TB_CHECK(rc == 0 && tb_has(out, keep("[alpha] chains from %s to entry_three: 1\n", F_MAIN_A)) && !strcmp(c1, want),
             "expected:\n%s\ngot:\n%s", want, out);
    free(want);
    free(c1);
    free(out);
}

TB_TEST(chain_from_a_binary_lists_exact_hops_shortest_first) {
    TB_REQUIRE(indexed(), "no index:\n%s", ix_output);
    char *out;
    int rc = tb(&out, "chain --from alpha --to common_work");
    TB_CHECK(rc == 0, "rc %d:\n%s", rc, out);
    TB_CHECK(tb_has(out, keep("[alpha] chains from %s to common_work: 3\n", F_MAIN_A)) && !tb_has(out, "#4"),
             "exactly three chains:\n%s", out);
    const char *h1[] = {keep("main (alpha.c:%d)", line_of("alpha.c", "ALPHA_CALL_MACRO")), F_WORK};
    const char *h2[] = {keep("main (alpha.c:%d)", line_of("alpha.c", "ALPHA_CALL_ALPHA_ONLY")),
                        keep("alpha_only (alpha.c:%d)", line_of("alpha.c", "CALL_ALPHA_ONLY_WORK")), F_WORK};
    const char *h3[] = {keep("main (alpha.c:%d)", line_of("alpha.c", "ALPHA_CALL_TABLE")),
                        keep("gx_run_table (common.c:%d, via gx_entry.fn)", line_of("common.c", "CALL_TABLE_FN")),
                        keep("entry_one (common.c:%d)", line_of("common.c", "CALL_ENTRY_ONE_WORK")), F_WORK};
    const char **hops[] = {h1, h2, h3};
    int nh[] = {2, 3, 4};
    for (int k = 0; k < 3; k++) {
        char *want = chain_text(k + 1, nh[k], hops[k]), *got = tb_chain_n(out, k + 1);
        TB_CHECK(!strcmp(want, got), "chain #%d: expected:\n%s\ngot:\n%s", k + 1, want, got);
        free(want);
        free(got);
    }
    free(out);
    rc = tb(&out, "chain --from alpha --to common_work --top 2");
    TB_CHECK(rc == 0 && tb_has(out, "#2 (2 calls)") && !tb_has(out, "#3"), "--top 2 keeps the two shortest:\n%s", out);
    free(out);
}

TB_TEST(collective_call_is_reached_through_the_ops_table) {
    TB_REQUIRE(indexed(), "no index:\n%s", ix_output);
    sqlite3 *db = open_db();
    TB_REQUIRE(db, "cannot open %s", INDEX);
    TB_CHECK(tb_index_q_long(db,
                             "SELECT COUNT(*) FROM collective_sites s JOIN functions fn ON fn.id = s.function_id"
                             " JOIN files f ON f.id = s.file_id WHERE fn.name = 'op_collective_run'"
                             " AND s.callee_name = 'ncclAllReduce' AND f.path = %Q AND s.line = %d",
                             GFIX "/ops.c", line_of("ops.c", "CALL_NCCL")) == 1,
             "ncclAllReduce in op_collective_run is a collective site");
    TB_CHECK(tb_index_q_long(db, "SELECT COUNT(*) FROM collective_sites") == 1, "%ld collective sites, expected 1",
             tb_index_q_long(db, "SELECT COUNT(*) FROM collective_sites"));
    sqlite3_close(db);
    char *out;
    int rc = tb(&out, "chain --from alpha --to ncclAllReduce");
    const char *hops[] = {keep("main (alpha.c:%d)", line_of("alpha.c", "ALPHA_CALL_DISPATCH")),
                          keep("gx_dispatch (common.c:%d, via gx_ops.run)", line_of("common.c", "CALL_ARGS_OPS_RUN")),
                          keep("op_collective_run (ops.c:%d)", line_of("ops.c", "CALL_NCCL")), F_NCCL_HOP};
    char *want = chain_text(1, 4, hops), *got = tb_chain_n(out, 1);
    TB_CHECK(rc == 0 && tb_has(out, keep("[alpha] chains from %s to ncclAllReduce: 1\n", F_MAIN_A)) &&
                 !strcmp(want, got),
             "expected:\n%s\ngot:\n%s", want, out);
    free(want);
    free(got);
    free(out);
}

TB_TEST(each_main_is_labelled_and_scoped_to_its_own_binary) {
    TB_REQUIRE(indexed(), "no index:\n%s", ix_output);
    char *out;
    int rc = tb(&out, "def main");
    char *sq = squeeze(out);
    TB_CHECK(rc == 0 && tb_has(sq, keep("main alpha.c:%d external definition ", line_of("alpha.c", "ALPHA_MAIN"))) &&
                 tb_has(sq, keep("main beta.c:%d external definition ", line_of("beta.c", "BETA_MAIN"))),
             "both mains:\n%s", out);
    TB_CHECK(tb_has(sq, "alpha.c@F@main [alpha]\n") && tb_has(sq, "beta.c@F@main [beta]\n"), "labelled by binary:\n%s",
             out);
    free(sq);
    free(out);

    // --from main: one labelled section per binary, each with its own chains
    rc = tb(&out, "chain --from main --to ncclAllReduce");
    TB_CHECK(rc == 0, "rc %d:\n%s", rc, out);
    char *a = tb_chain_section(out, "alpha"), *b = tb_chain_section(out, "beta");
    TB_CHECK(tb_has(a, keep("[alpha] chains from %s to ncclAllReduce: 1\n", F_MAIN_A)) && !tb_has(a, "beta.c"),
             "alpha's section:\n%s", a);
    const char *hb[] = {keep("main (beta.c:%d, via gx_ops.run)", line_of("beta.c", "BETA_CALL_MACRO_OPS")),
                        keep("op_collective_run (ops.c:%d)", line_of("ops.c", "CALL_NCCL")), F_NCCL_HOP};
    char *want = chain_text(1, 3, hb), *got = tb_chain_n(b, 1);
    TB_CHECK(tb_has(b, keep("[beta] chains from %s to ncclAllReduce: 1\n", F_MAIN_B)) && !strcmp(want, got) &&
                 !tb_has(b, "alpha.c"),
             "beta's section (its macro field call), expected:\n%s\ngot:\n%s", want, b);
    free(want);
    free(got);
    free(a);
    free(b);
    free(out);

    // a function only in beta is not reachable from alpha's main, and the other way round
    rc = tb(&out, "chain --from alpha --to beta_only");
    TB_CHECK(rc == 1 && tb_has(out, keep("[alpha] chains from %s to beta_only: 0\n", F_MAIN_A)) &&
                 tb_has(out, "(none") && !tb_has(out, "[beta]"),
             "alpha does not reach beta_only, rc %d:\n%s", rc, out);
    free(out);
    rc = tb(&out, "chain --from alpha.c:main --to beta_only");
    TB_CHECK(rc == 1 && tb_has(out, "[alpha] ") && tb_has(out, "(none"), "FILE:main form, rc %d:\n%s", rc, out);
    free(out);
    rc = tb(&out, "chain --from beta --to alpha_only");
    TB_CHECK(rc == 1 && tb_has(out, "[beta] ") && tb_has(out, "(none"), "beta does not reach alpha_only, rc %d:\n%s",
             rc, out);
    free(out);
    rc = tb(&out, "chain --from main --to beta_only");
    const char *hbo[] = {keep("main (beta.c:%d)", line_of("beta.c", "BETA_CALL_BETA_ONLY")), F_BETA_ONLY};
    want = chain_text(1, 2, hbo);
    a = tb_chain_section(out, "alpha");
    b = tb_chain_section(out, "beta");
    got = tb_chain_n(b, 1);
    TB_CHECK(rc == 0 && tb_has(a, "to beta_only: 0\n") && tb_has(b, "to beta_only: 1\n") && !strcmp(want, got),
             "only beta's main reaches beta_only, expected:\n%s\ngot:\n%s", want, out);
    free(want);
    free(got);
    free(a);
    free(b);
    free(out);
}

TB_TEST(recursion_terminates_with_bounded_chains_without_repeats) {
    TB_REQUIRE(indexed(), "no index:\n%s", ix_output);
    char *out;
    // mutual recursion: main → is_odd → is_even → rec_leaf, once
    int rc = tb(&out, "chain --from alpha --to gx_rec_leaf");
    const char *hm[] = {keep("main (alpha.c:%d)", line_of("alpha.c", "ALPHA_CALL_ODD")),
                        keep("gx_is_odd (common.c:%d)", line_of("common.c", "CALL_ODD_EVEN")),
                        keep("gx_is_even (common.c:%d)", line_of("common.c", "CALL_REC_LEAF")), F_REC_LEAF};
    char *want = chain_text(1, 4, hm), *got = tb_chain_n(out, 1);
    TB_CHECK(rc == 0 && tb_has(out, "to gx_rec_leaf: 1\n") && !strcmp(want, got) && hops_distinct(got),
             "expected exactly:\n%s\ngot:\n%s", want, out);
    free(want);
    free(got);
    free(out);
    // direct recursion: main → fact → fact_leaf, once (not through fact → fact)
    rc = tb(&out, "chain --from alpha --to gx_fact_leaf");
    const char *hd[] = {keep("main (alpha.c:%d)", line_of("alpha.c", "ALPHA_CALL_FACT")),
                        keep("gx_fact (common.c:%d)", line_of("common.c", "CALL_FACT_LEAF")), F_FACT_LEAF};
    want = chain_text(1, 3, hd);
    got = tb_chain_n(out, 1);
    TB_CHECK(rc == 0 && tb_has(out, "to gx_fact_leaf: 1\n") && !strcmp(want, got), "expected exactly:\n%s\ngot:\n%s",
             want, out);
    free(want);
    free(got);
    free(out);
    // from inside the cycle, to a target the cycle never reaches: none, and it returns
    rc = tb(&out, "chain --from gx_is_even --to gx_fact_leaf");
    TB_CHECK(rc == 1 && tb_has(out, "to gx_fact_leaf: 0\n") && tb_has(out, "(none"), "rc %d:\n%s", rc, out);
    free(out);
    // inside the cycle: is_even → is_odd, one chain, with --max large
    rc = tb(&out, "chain --from gx_is_even --to gx_is_odd --top 50");
    const char *hc[] = {keep("gx_is_even (common.c:%d)", line_of("common.c", "CALL_EVEN_ODD")), F_ODD};
    want = chain_text(1, 2, hc);
    got = tb_chain_n(out, 1);
    TB_CHECK(rc == 0 && tb_has(out, "to gx_is_odd: 1\n") && !strcmp(want, got), "expected exactly:\n%s\ngot:\n%s", want,
             out);
    free(want);
    free(got);
    free(out);
    // callers of a recursive function include itself
    rc = tb(&out, "callers gx_fact");
    const char *cf[] = {keep("gx_fact common.c:%d:16", line_of("common.c", "CALL_FACT_SELF")),
                        keep("main %s", at("alpha.c", "ALPHA_CALL_FACT", "gx_fact(")),
                        keep("main %s", at("beta.c", "BETA_CALL_FACT", "gx_fact("))};
    TB_CHECK(rc == 0, "rc %d:\n%s", rc, out);
    check_block(out, "callers of gx_fact (common.c:", cf, 3);
    free(out);
    // every chain of every search above ends: a wide search over the whole graph
    rc = tb(&out, "chain --from main --to common_work --top 100");
    int ok = 1;
    for (int k = 1; k <= 100; k++) {
        char *c = tb_chain_n(out, k);
        if (!*c) {
            free(c);
            break;
        }
        ok &= hops_distinct(c);
        free(c);
    }
    TB_CHECK(rc == 0 && ok && !tb_has(out, "search stopped"), "no chain repeats a function:\n%s", out);
    free(out);
}

TB_TEST(calls_inside_macros_are_attributed_to_the_using_function) {
    TB_REQUIRE(indexed(), "no index:\n%s", ix_output);
    char *out;
    int rc = tb(&out, "callers common_work");
    const char *want[] = {
        keep("main %s [GX_WORK]", at("alpha.c", "ALPHA_CALL_MACRO", "GX_WORK(")),
        keep("alpha_only %s", at("alpha.c", "CALL_ALPHA_ONLY_WORK", "common_work(")),
        keep("entry_one %s", at("common.c", "CALL_ENTRY_ONE_WORK", "common_work(")),
        keep("beta_only %s", at("beta.c", "CALL_BETA_ONLY_WORK", "common_work(")),
    };
    TB_CHECK(rc == 0, "rc %d:\n%s", rc, out);
    check_block(out, "callers of common_work (common.c:", want, 4);
    TB_CHECK(!tb_has(out, "gx.h:"), "no call placed at the macro's definition:\n%s", out);
    free(out);
}

int main(void) {
    tb_error err;
    if (tb_mkdir_p(WORK, &err)) {
        printf("%s\n", err.msg);
        return 1;
    }
    TB_RUN(index_runs_and_keeps_what_parsed_around_a_syntax_error);
    TB_RUN(callees_list_exactly_the_known_call_sites);
    TB_RUN(static_functions_of_the_same_name_stay_distinct);
    TB_RUN(callers_of_a_function_assigned_to_a_field_include_the_field_call_sites);
    TB_RUN(array_of_structs_call_resolves_to_every_function_in_the_array);
    TB_RUN(chain_from_a_binary_lists_exact_hops_shortest_first);
    TB_RUN(collective_call_is_reached_through_the_ops_table);
    TB_RUN(each_main_is_labelled_and_scoped_to_its_own_binary);
    TB_RUN(recursion_terminates_with_bounded_chains_without_repeats);
    TB_RUN(calls_inside_macros_are_attributed_to_the_using_function);
    free(ix_output);
    return tb_test_summary();
}
