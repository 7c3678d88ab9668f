// test_openmp.c — calls inside OpenMP constructs (fixtures/openmp/omp.c: parallel, for,
// sections, single, master, masked, critical, task, taskgroup, taskloop, ordered, simd,
// atomic, target, teams, distribute, loop, combined forms, clauses, nested regions) are
// indexed once each with the function they are written in as their caller, in a unit
// compiled with -fopenmp (and code under #ifdef _OPENMP is seen): parsed once without
// -fopenmp when no clause may call (omp_once.c and its header), with and without it when one
// does (omp.c) or a macro may (omp_macro.c), in every unit that includes such a header
// (omp_shared.h); a unit for the libgomp runtime as clang compiles it, without OpenMP; and the
// scan that decides (index_openmp.h). The expected calls come from the fixtures' "C:<callee>"
// markers, not from a list here.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/fileio.h"
#include "index_openmp.h"
#include "index_query.h"
#include "tb_shell.h"
#include "tb_test.h"

#define TRACEBOOK TB_BIN_DIR "/tracebook"
#define OMP_C TB_SOURCE_DIR "/tests/trace/fixtures/openmp/omp.c"
#define WORK TB_TEST_TMPDIR "/test_openmp"
#define INDEX WORK "/index.sqlite"

#define ONCE_C TB_SOURCE_DIR "/tests/trace/fixtures/openmp/omp_once.c"
#define ONCE_H TB_SOURCE_DIR "/tests/trace/fixtures/openmp/omp_once.h"
#define MACRO_C TB_SOURCE_DIR "/tests/trace/fixtures/openmp/omp_macro.c"
#define TEAM_H TB_SOURCE_DIR "/tests/trace/fixtures/openmp/omp_team.h"
#define BOGUS_C WORK "/bogus.c"
#define SHARED_H TB_SOURCE_DIR "/tests/trace/fixtures/openmp/omp_shared.h"
#define SHARED_A_C WORK "/shared_a.c"
#define SHARED_B_C WORK "/shared_b.c"
#define GOMP_C WORK "/gomp.c"

static sqlite3 *db;
static char *ix_output;
static int ix_status;

// Every "C:<callee>" marker of a file is a call of `caller` to callee on that line, exactly
// once, and caller makes no other call in that file.
static void check_markers(const char *path, const char *caller, int at_least) {
    TB_CHECK(tb_index_q_long(db, "SELECT COUNT(*) FROM files WHERE path = %Q AND (is_tu = 0 OR status = 'ok')", path) ==
                 1,
             "%s indexed without errors:\n%s", path, ix_output);
    char *src = tb_slurp(path);
    TB_REQUIRE(src, "cannot read %s", path);
    int expected = 0, line = 1;
    for (const char *p = src; *p; p++) {
        if (*p == '\n') line++;
        if (strncmp(p, "C:", 2) || (p > src && p[-1] != ' ')) continue;
        char callee[64];
        size_t n = strspn(p + 2, "abcdefghijklmnopqrstuvwxyz_");
        if (n == 0 || n >= sizeof callee) continue;
        memcpy(callee, p + 2, n);
        callee[n] = '\0';
        expected++;
        long got = tb_index_q_long(db,
                                   "SELECT COUNT(*) FROM calls c JOIN functions f ON f.id = c.caller_id"
                                   " JOIN files fi ON fi.id = c.file_id"
                                   " WHERE f.name = %Q AND c.callee_name = %Q AND c.line = %d AND fi.path = %Q",
                                   caller, callee, line, path);
        TB_CHECK(got == 1, "%s → %s at %s:%d: %ld rows, expected 1", caller, callee, path, line, got);
    }
    free(src);
    TB_CHECK(expected >= at_least, "%s's markers: %d", path, expected);
    long all = tb_index_q_long(db,
                               "SELECT COUNT(*) FROM calls c JOIN functions f ON f.id = c.caller_id"
                               " JOIN files fi ON fi.id = c.file_id WHERE f.name = %Q AND fi.path = %Q",
                               caller, path);
    TB_CHECK(all == expected, "%s makes %ld calls in %s in the index, the file marks %d (none twice, none left out)",
             caller, all, path, expected);
}

// The --verbose line of a unit says how its OpenMP directives were parsed.
static int verbose_says(const char *unit, const char *how) {
    char want[512];
    snprintf(want, sizeof want, "tracebook index: %s: ", unit);
    const char *at = strstr(ix_output, want);
    const char *eol = at ? strchr(at, '\n') : NULL;
    const char *found = at ? strstr(at, how) : NULL;
    return found && (!eol || found < eol);
}

TB_TEST(every_call_in_an_openmp_construct_is_indexed_once_with_its_caller) {
    TB_REQUIRE(ix_status == 0 && db, "index failed (%d):\n%s", ix_status, ix_output);
    check_markers(OMP_C, "kernel", 25);
    // Its clauses call functions: parsed with -fopenmp for them, without it for the regions.
    TB_CHECK(verbose_says(OMP_C, "(OpenMP directives: parsed with and without -fopenmp: " OMP_C ":"),
             "omp.c's line:\n%s", ix_output);
}

TB_TEST(a_c_unit_whose_clauses_call_nothing_is_parsed_once_without_openmp) {
    TB_REQUIRE(ix_status == 0 && db, "index failed (%d):\n%s", ix_status, ix_output);
    TB_CHECK(verbose_says(ONCE_C, "(OpenMP directives: one parse, without -fopenmp)"), "omp_once.c's line:\n%s",
             ix_output);
    check_markers(ONCE_C, "once_kernel", 11);
    check_markers(ONCE_H, "header_scale", 1);
}

TB_TEST(a_macro_in_a_clause_makes_the_unit_parsed_with_openmp_too) {
    TB_REQUIRE(ix_status == 0 && db, "index failed (%d):\n%s", ix_status, ix_output);
    TB_CHECK(verbose_says(MACRO_C, "parsed with and without -fopenmp: " TEAM_H ":3: a macro named in an OpenMP "
                                   "directive (TEAM)"),
             "omp_macro.c's line:\n%s", ix_output);
    check_markers(MACRO_C, "macro_kernel", 2);
}

static int why_of(const char *text, const char *cmdline_define, const char **why) {
    ix_omp_scan s = {0};
    ix_omp_scan_directives(&s, "f.c", text, strlen(text));
    ix_omp_scan_macros(&s, "f.c", text, strlen(text));
    const char *args[] = {"-std=c17", "-D", cmdline_define ? cmdline_define : "X"};
    ix_omp_scan_command_line(&s, args, 3);
    static char kept[512];
    snprintf(kept, sizeof kept, "%s", s.why ? s.why : "");
    *why = s.why ? kept : NULL;
    int n = s.directives;
    ix_omp_scan_free(&s);
    return n;
}

// A unit whose parse with -fopenmp is needed (a call in a clause) and rejected (-fopenmp=bogus):
// the parse without it stands alone, the calls inside the directive kept; the unit is partial
// and says which calls are missing.
TB_TEST(a_needed_parse_with_openmp_that_fails_leaves_the_unit_partial_with_a_note) {
    TB_REQUIRE(ix_status == 0 && db, "index failed (%d):\n%s", ix_status, ix_output);
    TB_CHECK(tb_index_q_long(db,
                             "SELECT COUNT(*) FROM files WHERE path = %Q AND status = 'partial' AND diagnostics LIKE"
                             " '%%the parse with -fopenmp for the calls in OpenMP directives'' clauses failed%%'",
                             BOGUS_C) == 1,
             "bogus.c partial with the note:\n%s", ix_output);
    TB_CHECK(tb_index_q_long(db, "SELECT COUNT(*) FROM calls c JOIN functions f ON f.id = c.caller_id"
                                 " WHERE f.name = 'bogus_kernel' AND c.callee_name = 'in_region'") == 1,
             "the call inside the directive kept");
    TB_CHECK(verbose_says(BOGUS_C, "(OpenMP directives: one parse, without -fopenmp (the parse with it failed))"),
             "bogus.c's line:\n%s", ix_output);
}

TB_TEST(the_directive_scan_answers_no_to_every_clause_that_may_call) {
    static const struct {
        const char *text, *define, *why;  // why: NULL when the parse without -fopenmp suffices
        int directives;
    } cases[] = {
        {"#pragma omp parallel for schedule(static)\n", NULL, NULL, 1},
        {"#pragma omp parallel for schedule(dynamic, 1) collapse(2) num_threads((int)n) if (n > 1e+3)\n", NULL, NULL,
         1},
        {"  #  pragma   omp parallel num_threads(t) reduction(+ : s) // don't (f(x))\n", NULL, NULL, 1},
        {"#pragma once\n#pragma GCC diagnostic push\nint ompx;\n", NULL, NULL, 0},
        {"#pragma omp declare simd notinbranch\n#pragma omp declare target\n", NULL, NULL, 2},
        {"#pragma omp parallel num_threads(f())\n", NULL, "f.c:1: a call in an OpenMP clause (f)", 1},
        {"int x;\n#pragma omp parallel \\\n  if (g(x))\n", NULL, "f.c:3: a call in an OpenMP clause (g)", 1},
        {"#pragma omp parallel ?\?/\n num_threads(h(1))\n", NULL, "a call in an OpenMP clause (h)", 1},
        {"#pragma omp parallel num_threads((*fp)(1))\n", NULL, "a call in an OpenMP clause", 1},
        {"#pragma omp parallel num_threads(tab[0](1))\n", NULL, "a call in an OpenMP clause", 1},
        {"_Pragma(\"omp parallel num_threads(f(2))\") int y;\n", NULL, "a call in an OpenMP clause (f)", 1},
        {"__pragma(omp parallel if(ok(3)))\n", NULL, "a call in an OpenMP clause (ok)", 1},
        {"_Pragma(\"GCC diagnostic push\") int z;\n", NULL, NULL, 0},
        {"#define DO_PRAGMA(x) _Pragma(#x)\nDO_PRAGMA(omp parallel num_threads(f()))\n", NULL,
         "f.c:2: omp as a macro's argument: the directive its _Pragma may make (DO_PRAGMA)", 0},
        {"#define DO_PRAGMA(x) _Pragma(#x)\n#define OMP(x) DO_PRAGMA( omp x)\n", NULL,
         "f.c:2: omp as a macro's argument: the directive its _Pragma may make (DO_PRAGMA)", 0},
        {"# define warn1(message) _Pragma (#message)\n# define warn(m) warn1 (GCC warning m)\n"
         "int compute(int omp_x);\nint omp = 0;\n",
         NULL, NULL, 0},
        {"#pragma omp error message(\"see //x\") num_threads(f())\n", NULL, "a string in an OpenMP directive", 1},
        {"#define PRAGMA(x) _Pragma(x)\nPRAGMA(\"omp parallel num_threads(f())\")\n", NULL,
         "f.c:2: a call in an OpenMP clause (f)", 1},
        {"_Pragma(L\"omp parallel num_threads(g())\")\n", NULL, "a call in an OpenMP clause (g)", 1},
        {"_Pragma(\"omp parallel num_threads(n) if(\\\"\")\n", NULL, "an escape in an OpenMP directive's string", 1},
        {"#pragma /* c */ omp parallel num_threads(f())\n", NULL, "a comment before omp", 0},
        {"#pragma omp parallel num_threads(N\\\nT)\n", NULL, "a line splice inside a word", 0},
        {"#define P2(a, b) _Pragma(#b)\nP2(0, omp parallel num_threads(f()))\n", NULL,
         "f.c:2: omp as a macro's argument", 0},
        {"#pragma omp parallel if (x))\n", NULL, "unbalanced parentheses in an OpenMP directive", 1},
        {"#pragma omp parallel num_threads(my$fn(1))\n", NULL, "a call in an OpenMP clause (my$fn)", 1},
        {"#pragma omp parallel num_threads(t<:0:>(1))\n", NULL, "a call in an OpenMP clause", 1},
        {"// pragma omp num_threads(f())\n", NULL, "a call in an OpenMP clause (f)", 1},  // a comment counts
        {"#pragma omp parallel /*\n */ num_threads(f())\n", NULL, "a comment inside an OpenMP directive", 1},
        {"#pragma omp parallel if (c == ')')\n", NULL, "a character literal in an OpenMP directive", 1},
        {"#pragma omp declare reduction(m : int : omp_out += omp_in)\n", NULL,
         "an OpenMP declare directive other than simd or target (reduction)", 1},
        {"#pragma omp declare variant(fast) match(device = {kind(cpu)})\n", NULL,
         "an OpenMP declare directive other than simd or target (variant)", 1},
        {"#pragma omp begin declare target\n", NULL,
         "an OpenMP directive the parse without -fopenmp may not match (begin)", 1},
        {"#pragma omp metadirective when(user = {condition(c)} : parallel)\n", NULL,
         "an OpenMP directive the parse without -fopenmp may not match (metadirective)", 1},
        {"#define NT get_threads()\n#pragma omp parallel num_threads(NT)\n", NULL,
         "f.c:1: a macro named in an OpenMP directive (NT)", 1},
        {"#  define  \\\n  SCHED static\n#pragma omp for schedule(SCHED)\n", NULL,
         "a macro named in an OpenMP directive (SCHED)", 1},
        {"#pragma omp parallel num_threads(nt)\n", "nt=f()",
         "the command line defines nt, named in an OpenMP directive", 1},
        {"#pragma omp parallel num_threads(nt)\n", "ntx=1", NULL, 1},
        {"#pragma omp parallel num_threads(nt)\nint undefined_nt;\n", NULL, NULL, 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        const char *why = NULL;
        int n = why_of(cases[i].text, cases[i].define, &why);
        TB_CHECK(n == cases[i].directives, "case %zu: %d directives, expected %d", i, n, cases[i].directives);
        if (!cases[i].why)
            TB_CHECK(!why, "case %zu (%s): refused: %s", i, cases[i].text, why);
        else
            TB_CHECK(why && strstr(why, cases[i].why), "case %zu (%s): %s, expected %s", i, cases[i].text,
                     why ? why : "accepted", cases[i].why);
    }
    // the arguments of the parse without -fopenmp: -Xclang goes with the -fopenmp it carried
    const char *given[] = {"-Xclang", "-fopenmp", "-O2", "-fopenmp-version=50"};
    tb_pool pool = {0};
    tb_vec plain;
    tb_vec_init(&plain, sizeof(const char *), "arguments");
    TB_CHECK(ix_openmp_plain_args(&pool, given, 4, &plain) == 1 && plain.len == 2 &&
                 !strcmp(TB_VEC_AT(&plain, const char *, 0), "-O2") &&
                 !strcmp(TB_VEC_AT(&plain, const char *, 1), "-D_OPENMP=201811"),
             "-Xclang -fopenmp -O2 -fopenmp-version=50 → %zu arguments", plain.len);
    plain.len = 0;
    const char *undone[] = {"-fopenmp", "-fno-openmp"};
    TB_CHECK(ix_openmp_plain_args(&pool, undone, 2, &plain) == 0, "-fopenmp -fno-openmp: no OpenMP");
    // clang's driver passes no -fopenmp to its front end for the runtime libgomp (the last
    // -fopenmp=RUNTIME names it, whatever -fopenmp follows); -Xpreprocessor -fopenmp is the front end's
    const char *gomp[] = {"-fopenmp=libgomp", "-fopenmp"}, *omp[] = {"-fopenmp=libgomp", "-fopenmp=libomp"},
               *pre[] = {"-Xpreprocessor", "-fopenmp"};
    TB_CHECK(!ix_openmp_on(gomp, 2) && !ix_openmp_on(gomp, 1), "-fopenmp=libgomp: no OpenMP");
    TB_CHECK(ix_openmp_on(omp, 2) && ix_openmp_on(omp + 1, 1) && ix_openmp_on(gomp + 1, 1), "libomp: OpenMP");
    TB_CHECK(ix_openmp_on(pre, 2), "-Xpreprocessor -fopenmp: OpenMP");
    tb_vec_free(&plain);
    tb_pool_free(&pool);
    const char *args[] = {"-c", "@more.rsp"};
    ix_omp_scan s = {0};
    ix_omp_scan_directives(&s, "f.c", "#pragma omp parallel num_threads(n)\n", 36);
    ix_omp_scan_command_line(&s, args, 2);
    TB_CHECK(s.why && strstr(s.why, "@more.rsp"), "a response file: %s", s.why ? s.why : "accepted");
    ix_omp_scan_free(&s);
    const char *wp[] = {"-c", "-Wp,-Dn=team_size()"};
    ix_omp_scan_directives(&s, "f.c", "#pragma omp parallel num_threads(n)\n", 36);
    ix_omp_scan_command_line(&s, wp, 2);
    TB_CHECK(s.why && strstr(s.why, "-Wp,-Dn"), "the preprocessor's -D through -Wp,: %s", s.why ? s.why : "accepted");
    ix_omp_scan_free(&s);
}

// Two units include one header whose directive calls in a clause: the header is scanned once a
// run, and its doubt reaches both (each parsed with and without -fopenmp, the calls indexed).
TB_TEST(a_headers_doubt_reaches_every_unit_that_includes_it) {
    TB_REQUIRE(ix_status == 0 && db, "index failed (%d):\n%s", ix_status, ix_output);
    const char *units[] = {SHARED_A_C, SHARED_B_C};
    for (int i = 0; i < 2; i++) {
        char how[512];
        snprintf(how, sizeof how, "parsed with and without -fopenmp: %s:%d: ", SHARED_H,
                 tb_line_of(SHARED_H, "C:shared_threads"));
        TB_CHECK(verbose_says(units[i], how), "%s's line (expected \"%s\"):\n%s", units[i], how, ix_output);
    }
    check_markers(SHARED_H, "shared_sum", 2);
}

// -fopenmp=libgomp: clang compiles the unit without OpenMP (the pragmas ignored, no _OPENMP), and
// so it is parsed: once, as given, the calls in the directive's statement kept, its clause's not
// (that code is not compiled).
TB_TEST(a_unit_for_the_libgomp_runtime_is_parsed_as_clang_compiles_it) {
    TB_REQUIRE(ix_status == 0 && db, "index failed (%d):\n%s", ix_status, ix_output);
    TB_CHECK(tb_index_q_long(db, "SELECT COUNT(*) FROM files WHERE path = %Q AND status = 'ok'", GOMP_C) == 1,
             "gomp.c parsed without errors:\n%s", ix_output);
    TB_CHECK(!verbose_says(GOMP_C, "OpenMP directives"), "gomp.c's line says no OpenMP:\n%s", ix_output);
    TB_CHECK(tb_index_q_long(db, "SELECT COUNT(*) FROM functions WHERE name = 'gomp_openmp_only'") == 0,
             "_OPENMP is not defined for it");
    // the clause is not compiled: its call is not made; the statement's is
    const char *q = "SELECT COUNT(*) FROM calls c JOIN functions f ON f.id = c.caller_id"
                    " WHERE f.name = 'gomp_kernel' AND c.callee_name = %Q";
    TB_CHECK(tb_index_q_long(db, q, "in_gomp") == 1 && tb_index_q_long(db, q, "gomp_threads") == 0,
             "gomp_kernel calls in_gomp, and not gomp_threads (its pragma is ignored)");
}

TB_TEST(a_call_in_a_region_is_a_chain_hop) {
    TB_REQUIRE(ix_status == 0 && db, "index failed:\n%s", ix_output);
    char *out;
    int rc = tb_shell(&out, "'%s' chain --from kernel --to in_nested_task --index '%s'", TRACEBOOK, INDEX);
    char want[256];
    snprintf(want, sizeof want, "omp.c:%d)\n  → in_nested_task (", tb_line_of(OMP_C, "C:in_nested_task"));
    TB_CHECK(rc == 0 && tb_has(out, want), "rc %d, expected\n%s\ngot:\n%s", rc, want, out);
    free(out);
}

static void add_unit(tb_buf *b, const char *file, const char *openmp) {
    tb_buf_printf(b,
                  "%s{\"directory\": \"" WORK "\", \"arguments\": [\"cc\", \"-std=c17\", \"%s\","
                  " \"-I" TB_SOURCE_DIR "/tests/trace/fixtures/openmp\", \"-c\", \"%s\"], \"file\": \"%s\"}",
                  b->len > 1 ? ",\n" : "", openmp, file, file);
}

static void write_unit(tb_buf *units, const char *path, const char *openmp, const char *text) {
    if (tb_write_text(path, text)) printf("  cannot write %s\n", path);
    add_unit(units, path, openmp);
}

int main(void) {
    tb_error err;
    if (tb_mkdir_p(WORK, &err)) printf("  %s\n", err.msg);
    tb_buf units = {0};
    tb_buf_printf(&units, "[");
    add_unit(&units, OMP_C, "-fopenmp");
    add_unit(&units, ONCE_C, "-fopenmp");
    add_unit(&units, MACRO_C, "-fopenmp");
    write_unit(&units, BOGUS_C, "-fopenmp=bogus",
               "int threads(void), in_region(int);\n"
               "int bogus_kernel(int n) {\n"
               "    int s = 0;\n"
               "#pragma omp parallel num_threads(threads())\n"
               "    s += in_region(n);\n"
               "    return s;\n"
               "}\n");
    write_unit(&units, SHARED_A_C, "-fopenmp", "#include \"omp_shared.h\"\nint a(void) { return shared_sum(1); }\n");
    write_unit(&units, SHARED_B_C, "-fopenmp", "#include \"omp_shared.h\"\nint b(void) { return shared_sum(2); }\n");
    write_unit(&units, GOMP_C, "-fopenmp=libgomp",
               "int gomp_threads(void), in_gomp(int);\n"
               "#ifdef _OPENMP\n"
               "int gomp_openmp_only(void) { return 1; }\n"
               "#endif\n"
               "int gomp_kernel(int n) {\n"
               "    int s = 0;\n"
               "#pragma omp parallel num_threads(gomp_threads())\n"
               "    s += in_gomp(n);\n"
               "    return s;\n"
               "}\n");
    tb_buf_printf(&units, "]\n");
    if (tb_write_text(WORK "/compile_commands.json", units.s)) printf("  cannot write the compilation database\n");
    tb_buf_free(&units);
    unlink(INDEX);
    ix_status = tb_shell(&ix_output, "'%s' index --verbose --compdb '%s' --output '%s' 2>&1", TRACEBOOK, WORK, INDEX);
    db = tb_index_open_ro(INDEX);
    TB_RUN(every_call_in_an_openmp_construct_is_indexed_once_with_its_caller);
    TB_RUN(a_c_unit_whose_clauses_call_nothing_is_parsed_once_without_openmp);
    TB_RUN(a_macro_in_a_clause_makes_the_unit_parsed_with_openmp_too);
    TB_RUN(a_needed_parse_with_openmp_that_fails_leaves_the_unit_partial_with_a_note);
    TB_RUN(the_directive_scan_answers_no_to_every_clause_that_may_call);
    TB_RUN(a_headers_doubt_reaches_every_unit_that_includes_it);
    TB_RUN(a_unit_for_the_libgomp_runtime_is_parsed_as_clang_compiles_it);
    TB_RUN(a_call_in_a_region_is_a_chain_hop);
    sqlite3_close(db);
    free(ix_output);
    return tb_test_summary();
}
