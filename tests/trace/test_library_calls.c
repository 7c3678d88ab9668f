// test_library_calls.c — functions a program only declares through a library's header
// (fixtures/external/: nccl.h and mpi.h stand-ins on the -isystem path) are nodes of the
// call graph: `def` says where each is declared and which library of the binary's link
// defines it, `callers` and `chain --to` end at it, and its calls are collective sites.
// The link comes from a hand-written CMake file-API reply: an archive given by path
// (libfakenccl.a, its symbol index written here) and -lfakempi, a GNU ld script (as
// Debian's libc.so is) naming another archive. Lines come from marker comments. Shared
// objects: two built here with cc -shared, one with only a GNU hash table (looked up
// through it) and one with only a SysV one (its dynamic symbols read whole).
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

static int ix_status = -1;
static char *ix_output;

static int write_inputs(void) {
    tb_error err;
    int bad = tb_mkdir_p(REPLY, &err);
    const char *nccl[] = {"ncclAllReduce", "ncclCommInitRank"}, *mpi[] = {"MPI_Allreduce"};
    bad |= tb_write_symbol_archive(WORK "/libfakenccl.a", nccl, 2);
    bad |= tb_write_symbol_archive(WORK "/libfakempi_real.a", mpi, 1);
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

// The same program linked with two shared objects, built here: libfakegnu.so (only a GNU hash
// table: --hash-style=gnu) defines ncclAllReduce_v2 and MPI_Allreduce, not ncclAllReduce;
// libfakesysv.so (only a SysV one) defines ncclAllReduce and, weak, ncclGetErrorString.
#define WORK2 WORK "/shared"
#define INDEX2 WORK2 "/index.sqlite"

static int so_status = -1;
static char *so_output;

static int build_shared(const char *name, const char *style, const char *code) {
    char src[1024], *out = NULL;
    snprintf(src, sizeof src, WORK2 "/%s.c", name);
    if (tb_write_text(src, code)) return -1;
    int rc = tb_shell(&out, "cc -shared -fPIC -Wl,--hash-style=%s -o '" WORK2 "/lib%s.so' '%s'", style, name, src);
    if (rc) fprintf(stderr, "cc -shared %s: %s\n", name, out ? out : "");
    free(out);
    return rc ? -1 : 0;
}

static int write_shared_inputs(void) {
    tb_error err;
    if (tb_mkdir_p(WORK2 "/.cmake/api/v1/reply", &err)) return -1;
    int bad = build_shared("fakegnu", "gnu",
                           "int ncclAllReduce_v2(void) { return 0; }\nint MPI_Allreduce(void) { return 0; }\n");
    bad |= build_shared("fakesysv", "sysv",
                        "int ncclAllReduce(void) { return 0; }\n"
                        "__attribute__((weak)) const char *ncclGetErrorString(int r) { return r ? \"e\" : \"\"; }\n");
    bad |= tb_write_text(WORK2 "/compile_commands.json",
                         "[{\"directory\": \"" WORK2 "\", \"arguments\": [\"cc\", \"-std=c17\", \"-isystem\", \"" XFIX
                         "/sysinc\", \"-c\", \"" APP_C "\"], \"file\": \"" APP_C "\"}]\n");
    bad |= tb_write_app_reply(WORK2 "/.cmake/api/v1/reply", XFIX, WORK2,
                              "{\"path\": \"app.c\", \"compileGroupIndex\": 0}",
                              "{\"fragment\": \"-L" WORK2 "\", \"role\": \"libraryPath\"},"
                              "{\"fragment\": \"-lfakegnu\", \"role\": \"libraries\"},"
                              "{\"fragment\": \"" WORK2 "/libfakesysv.so\", \"role\": \"libraries\"}");
    return bad ? -1 : 0;
}

// What the linker wrote: which hash tables the object has ("GNU_HASH", "HASH" section types).
static int has_section_type(const char *lib, const char *type) {
    char *out = NULL;
    int rc = tb_shell(&out, "readelf -SW '" WORK2 "/%s' | awk '{ for (i = 1; i <= NF; i++) if ($i == \"%s\") n++ }"
                            " END { print n + 0 }'",
                      lib, type);
    int n = rc == 0 && out ? atoi(out) : -1;
    free(out);
    return n;
}

TB_TEST(shared_objects_are_read_through_either_hash_table) {
    int built = so_status >= 0 || write_shared_inputs() == 0;
    TB_REQUIRE(tb_index_fixture(&so_status, &so_output, built, TRACEBOOK, WORK2, INDEX2), "index failed (%d):\n%s",
               so_status, so_output);
    TB_REQUIRE(has_section_type("libfakegnu.so", "GNU_HASH") == 1 && has_section_type("libfakegnu.so", "HASH") == 0,
               "libfakegnu.so has a GNU hash table only");
    TB_REQUIRE(has_section_type("libfakesysv.so", "GNU_HASH") == 0 && has_section_type("libfakesysv.so", "HASH") == 1,
               "libfakesysv.so has a SysV hash table only");
    char *out;
    int rc = tb_shell(&out, "'%s' def MPI_Allreduce --index '%s'", TRACEBOOK, INDEX2);
    TB_CHECK(rc == 0 && tb_has(out, "  defined in " WORK2 "/libfakegnu.so, linked by app\n"), "rc %d:\n%s", rc, out);
    free(out);
    // libfakegnu.so defines ncclAllReduce_v2, not ncclAllReduce:
    // the SysV object's symbol is found after it on the link line
    rc = tb_shell(&out, "'%s' def ncclAllReduce --index '%s'", TRACEBOOK, INDEX2);
    TB_CHECK(rc == 0 && tb_has(out, "  defined in " WORK2 "/libfakesysv.so, linked by app\n"), "rc %d:\n%s", rc, out);
    free(out);
    rc = tb_shell(&out, "'%s' def ncclGetErrorString --index '%s'", TRACEBOOK, INDEX2);
    TB_CHECK(rc == 0 && tb_has(out, "  defined in " WORK2 "/libfakesysv.so, linked by app\n"),
             "a weak definition: rc %d:\n%s", rc, out);
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
    TB_RUN(shared_objects_are_read_through_either_hash_table);
    free(ix_output);
    free(so_output);
    return tb_test_summary();
}
