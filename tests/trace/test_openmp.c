// test_openmp.c — calls inside OpenMP constructs (fixtures/openmp/omp.c: parallel, for,
// sections, single, master, masked, critical, task, taskgroup, taskloop, ordered, simd,
// atomic, target, teams, distribute, loop, combined forms, clauses, nested regions) are
// indexed once each with the function they are written in as their caller, in a unit
// compiled with -fopenmp (and code under #ifdef _OPENMP is seen). The expected calls come
// from the fixture's "C:<callee>" markers, not from a list here.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/fileio.h"
#include "index_query.h"
#include "tb_shell.h"
#include "tb_test.h"

#define TRACEBOOK TB_BIN_DIR "/tracebook"
#define OMP_C TB_SOURCE_DIR "/tests/trace/fixtures/openmp/omp.c"
#define WORK TB_TEST_TMPDIR "/test_openmp"
#define INDEX WORK "/index.sqlite"

static sqlite3 *db;
static char *ix_output;
static int ix_status;

TB_TEST(every_call_in_an_openmp_construct_is_indexed_once_with_its_caller) {
    TB_REQUIRE(ix_status == 0 && db, "index failed (%d):\n%s", ix_status, ix_output);
    TB_CHECK(tb_index_q_long(db, "SELECT COUNT(*) FROM files WHERE path = %Q AND status = 'ok'", OMP_C) == 1,
             "omp.c parsed without errors:\n%s", ix_output);
    char *src = tb_slurp(OMP_C);
    TB_REQUIRE(src, "cannot read %s", OMP_C);
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
                                   " WHERE f.name = 'kernel' AND c.callee_name = %Q AND c.line = %d",
                                   callee, line);
        TB_CHECK(got == 1, "kernel → %s at omp.c:%d: %ld rows, expected 1", callee, line, got);
    }
    free(src);
    TB_CHECK(expected >= 25, "the fixture's markers: %d", expected);
    long all = tb_index_q_long(db, "SELECT COUNT(*) FROM calls c JOIN functions f ON f.id = c.caller_id"
                                   " WHERE f.name = 'kernel'");
    TB_CHECK(all == expected, "kernel makes %ld calls in the index, the fixture marks %d (none twice, none left out)",
             all, expected);
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

int main(void) {
    tb_error err;
    if (tb_mkdir_p(WORK, &err)) printf("  %s\n", err.msg);
    if (tb_write_text(WORK "/compile_commands.json",
                      "[{\"directory\": \"" WORK "\", \"arguments\": [\"cc\", \"-std=c17\", \"-fopenmp\", \"-c\", \"" OMP_C
                      "\"], \"file\": \"" OMP_C "\"}]\n"))
        printf("  cannot write the compilation database\n");
    unlink(INDEX);
    ix_status = tb_shell(&ix_output, "'%s' index --compdb '%s' --output '%s'", TRACEBOOK, WORK, INDEX);
    db = tb_index_open_ro(INDEX);
    TB_RUN(every_call_in_an_openmp_construct_is_indexed_once_with_its_caller);
    TB_RUN(a_call_in_a_region_is_a_chain_hop);
    sqlite3_close(db);
    free(ix_output);
    return tb_test_summary();
}
