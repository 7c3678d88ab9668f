// test_library_calls.c — functions a program only declares through a library's header
// (fixtures/external/: nccl.h and mpi.h stand-ins on the -isystem path) are nodes of the
// call graph: `def` says where each is declared and which library of the binary's link
// defines it, `callers` and `chain --to` end at it, and its calls are collective sites.
// The link comes from a hand-written CMake file-API reply: an archive given by path
// (libfakenccl.a, its symbol index written here) and -lfakempi, a GNU ld script (as
// Debian's libc.so is) naming another archive. Lines come from marker comments.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chain_output.h"
#include "core/fileio.h"
#include "index_query.h"
#include "tb_shell.h"
#include "tb_test.h"

#define TRACEBOOK TB_BIN_DIR "/tracebook"
#define XFIX TB_SOURCE_DIR "/tests/trace/fixtures/external"
#define WORK TB_TEST_TMPDIR "/test_library_calls"
#define REPLY WORK "/.cmake/api/v1/reply"
#define INDEX WORK "/index.sqlite"
#define APP_C XFIX "/app.c"
#define NCCL_H XFIX "/sysinc/nccl.h"
#define MPI_H XFIX "/sysinc/mpi.h"

static int tb(char **out, const char *args) { return tb_shell(out, "'%s' %s --index '%s'", TRACEBOOK, args, INDEX); }

// An ar archive with only its symbol index (the "/" member GNU ar writes): enough for the
// indexer, which reads no member.
static int write_archive(const char *path, const char *const *names, int n) {
    unsigned char body[1024];
    size_t len = 4 + 4 * (size_t)n;
    body[0] = body[1] = body[2] = 0;
    body[3] = (unsigned char)n;
    memset(body + 4, 0, 4 * (size_t)n);
    for (int i = 0; i < n; i++) {
        size_t k = strlen(names[i]) + 1;
        memcpy(body + len, names[i], k);
        len += k;
    }
    if (len % 2) body[len++] = '\n';
    char file[2048];
    int h = snprintf(file, sizeof file, "!<arch>\n%-16s%-12s%-6s%-6s%-8s%-10zu`\n", "/", "0", "0", "0", "0", len);
    memcpy(file + h, body, len);
    return tb_write_bytes(path, file, (size_t)h + len);
}

static int ix_status = -1;
static char *ix_output;

static int write_inputs(void) {
    tb_error err;
    int bad = tb_mkdir_p(REPLY, &err);
    const char *nccl[] = {"ncclAllReduce", "ncclCommInitRank"}, *mpi[] = {"MPI_Allreduce"};
    bad |= write_archive(WORK "/libfakenccl.a", nccl, 2);
    bad |= write_archive(WORK "/libfakempi_real.a", mpi, 1);
    bad |= tb_write_text(WORK "/libfakempi.so", "/* GNU ld script */\nGROUP ( " WORK "/libfakempi_real.a )\n");
    bad |= tb_write_text(WORK "/compile_commands.json",
                         "[{\"directory\": \"" WORK "\", \"arguments\": [\"cc\", \"-std=c17\", \"-isystem\", \"" XFIX
                         "/sysinc\", \"-c\", \"" APP_C "\"], \"file\": \"" APP_C "\"}]\n");
    bad |= tb_write_app_reply(REPLY, XFIX, WORK, "{\"path\": \"app.c\", \"compileGroupIndex\": 0}",
                              "{\"fragment\": \"-L" WORK "\", \"role\": \"libraryPath\"},"
                              "{\"fragment\": \"-Wl,-rpath," WORK "\", \"role\": \"libraries\"},"
                              "{\"fragment\": \"libfakenccl.a\", \"role\": \"libraries\"},"
                              "{\"fragment\": \"-lfakempi\", \"role\": \"libraries\"}");
    return bad ? -1 : 0;
}

static int indexed(void) {
    return tb_index_fixture(&ix_status, &ix_output, ix_status >= 0 || write_inputs() == 0, TRACEBOOK, WORK, INDEX);
}

TB_TEST(def_names_the_header_and_the_library_of_the_link) {
    TB_REQUIRE(indexed(), "index failed (%d):\n%s", ix_status, ix_output);
    char *out, want[1024];
    int rc = tb(&out, "def ncclAllReduce");
    snprintf(want, sizeof want, "ncclAllReduce  sysinc/nccl.h:%d  external declaration  c:@F@ncclAllReduce\n"
                                "  defined in " WORK "/libfakenccl.a, linked by app\n",
             tb_line_of(NCCL_H, "DECL_NCCL_ALL_REDUCE"));
    TB_CHECK(rc == 0 && !strcmp(out, want), "rc %d, expected:\n%s\ngot:\n%s", rc, want, out);
    free(out);

    // -lfakempi is a linker script: the library the link names, whose input defines it
    rc = tb(&out, "def MPI_Allreduce");
    snprintf(want, sizeof want, "  defined in " WORK "/libfakempi.so, linked by app\n");
    TB_CHECK(rc == 0 && tb_has(out, want) && tb_has(out, "sysinc/mpi.h:"), "rc %d:\n%s", rc, out);
    free(out);

    // called, declared, but in none of the libraries: said so
    rc = tb(&out, "def ncclGetErrorString");
    TB_CHECK(rc == 0 && tb_has(out, "no definition in the index or in the libraries its binaries link"), "rc %d:\n%s",
             rc, out);
    free(out);

    // declared in the header but never called or named: not a node
    rc = tb(&out, "def ncclBcast");
    TB_CHECK(rc == 1 && tb_has(out, "no function 'ncclBcast'"), "rc %d:\n%s", rc, out);
    free(out);
}

TB_TEST(callers_and_chain_end_at_the_library_function) {
    TB_REQUIRE(indexed(), "index failed:\n%s", ix_output);
    char *out, want[2048];
    int col, line = tb_locate(APP_C, "CALL_NCCL", "ncclAllReduce(", &col);
    int rc = tb(&out, "callers ncclAllReduce");
    snprintf(want, sizeof want,
             "callers of ncclAllReduce (sysinc/nccl.h:%d, external):\n"
             "  comm_all_reduce                      app.c:%d:%d\n",
             tb_line_of(NCCL_H, "DECL_NCCL_ALL_REDUCE"), line, col);
    TB_CHECK(rc == 0 && !strcmp(out, want), "rc %d, expected\n%s\ngot:\n%s", rc, want, out);
    free(out);

    rc = tb(&out, "chain --from app --to ncclAllReduce");
    snprintf(want, sizeof want,
             "#1 (4 calls)\n"
             "    main (app.c:%d)\n"
             "  → step (app.c:%d)\n"
             "  → row_linear (app.c:%d)\n"
             "  → comm_all_reduce (app.c:%d)\n"
             "  → ncclAllReduce (declared at sysinc/nccl.h:%d; defined in " WORK "/libfakenccl.a)\n",
             tb_line_of(APP_C, "CALL_STEP"), tb_line_of(APP_C, "CALL_ROW"), tb_line_of(APP_C, "CALL_COMM"), line,
             tb_line_of(NCCL_H, "DECL_NCCL_ALL_REDUCE"));
    char *got = tb_chain_n(out, 1);
    TB_CHECK(rc == 0 && tb_has(out, "[app] chains from main") && !strcmp(got, want), "rc %d, expected:\n%s\ngot:\n%s",
             rc, want, out);
    free(got);
    free(out);

    // --via: only chains through the named function
    rc = tb(&out, "chain --from app --via row_linear --to MPI_Allreduce");
    TB_CHECK(rc == 0 && tb_has(out, "via row_linear to MPI_Allreduce: 1\n") && tb_has(out, "→ row_linear (app.c:") &&
                 tb_has(out, "→ MPI_Allreduce (declared at sysinc/mpi.h:"),
             "rc %d:\n%s", rc, out);
    free(out);
    rc = tb(&out, "chain --from app --via ncclGetErrorString --to MPI_Allreduce");
    TB_CHECK(rc == 1 && tb_has(out, "via ncclGetErrorString to MPI_Allreduce: 0\n"), "rc %d:\n%s", rc, out);
    free(out);
}

TB_TEST(nccl_and_mpi_calls_are_collective_sites) {
    TB_REQUIRE(indexed(), "index failed:\n%s", ix_output);
    sqlite3 *db = tb_index_open_ro(INDEX);
    TB_REQUIRE(db, "cannot open %s", INDEX);
    const char *names[] = {"ncclAllReduce", "MPI_Allreduce"}, *markers[] = {"CALL_NCCL", "CALL_MPI"};
    for (int i = 0; i < 2; i++)
        TB_CHECK(tb_index_q_long(db,
                                 "SELECT COUNT(*) FROM collective_sites s JOIN functions f ON f.id = s.function_id"
                                 " WHERE f.name = 'comm_all_reduce' AND s.callee_name = %Q AND s.line = %d",
                                 names[i], tb_line_of(APP_C, markers[i])) == 1,
                 "%s at app.c:%d is a collective site", names[i], tb_line_of(APP_C, markers[i]));
    TB_CHECK(tb_index_q_long(db, "SELECT COUNT(*) FROM collective_sites WHERE callee_name = 'ncclGetErrorString'") == 0,
             "ncclGetErrorString moves no data: not a collective site");
    sqlite3_close(db);
}

int main(void) {
    TB_RUN(def_names_the_header_and_the_library_of_the_link);
    TB_RUN(callers_and_chain_end_at_the_library_function);
    TB_RUN(nccl_and_mpi_calls_are_collective_sites);
    free(ix_output);
    return tb_test_summary();
}
