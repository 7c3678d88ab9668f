// test_cuda_make.c — a Makefile-built CUDA codebase (fixtures/cudamake/, shaped like
// nccl-tests: common.cu with main, all_reduce.cu and all_gather.cu each defining the global
// ncclTestEngine; <cuda_runtime.h>, <nccl.h> and CUDA 13's NCCL device API: nccl_device.h,
// nccl_device/utility.h, coop.h) through a compile_commands.json of nvcc commands as bear
// writes for `make`: every unit parses with no error diagnostic from the toolkit's headers
// (a GIN barrier session too, through the indexer's in-memory patch of utility.h),
// the binaries are told apart without CMake, main → ncclAllReduce is one chain, in
// all_reduce's binary only, and `tracebook walk` goes from main through the NVTX range
// TimeTest opens down to ncclAllReduce.
//
// Needs a CUDA toolkit with NCCL's device headers ($CUDA_PATH, $CUDA_HOME or
// /usr/local/cuda, as the indexer looks): without one the test says what is missing and
// exits 77, which ctest reports as skipped.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chain_output.h"
#include "core/fileio.h"
#include "index_query.h"
#include "tb_shell.h"
#include "tb_test.h"

#define TRACEBOOK TB_BIN_DIR "/tracebook"
#define CFIX TB_SOURCE_DIR "/tests/trace/fixtures/cudamake"
#define WORK TB_TEST_TMPDIR "/test_cuda_make"
#define INDEX WORK "/index.sqlite"

static const char *cuda_dir(void) {
    const char *env[] = {getenv("CUDA_PATH"), getenv("CUDA_HOME")};
    for (int i = 0; i < 2; i++) {
        struct stat st;
        if (env[i] && stat(env[i], &st) == 0 && S_ISDIR(st.st_mode)) return env[i];
    }
    return "/usr/local/cuda";
}

static sqlite3 *db;
static char *ix_output;
static int ix_status;  // of `tracebook index`

static int line_of(const char *file, const char *marker) {
    char path[1024];
    snprintf(path, sizeof path, CFIX "/%s", file);
    return tb_line_of(path, marker);
}

TB_TEST(every_unit_parses_without_an_error_from_the_toolkit_headers) {
    TB_REQUIRE(ix_status == 0 && db, "index failed (%d):\n%s", ix_status, ix_output);
    TB_CHECK(tb_index_q_long(db, "SELECT COUNT(*) FROM files WHERE is_tu = 1 AND status = 'ok' AND errors = 0") == 3,
             "3 units ok:\n%s", ix_output);
    TB_CHECK(tb_index_q_long(db, "SELECT value FROM meta WHERE key = 'error_count'") == 0 &&
                 tb_index_q_long(db, "SELECT COUNT(*) FROM file_errors") == 0,
             "no error diagnostics at all:\n%s", ix_output);
    TB_CHECK(!tb_has(ix_output, "expected value in expression") && !tb_has(ix_output, "nccl_device"),
             "nothing from nccl_device's headers:\n%s", ix_output);
    // nccl_device/utility.h's Optional, constructed by a GIN barrier session, parses (the
    // indexer's in-memory patch) and the kernel's call into the session is indexed
    TB_CHECK(tb_index_q_long(db,
                             "SELECT COUNT(*) FROM calls c JOIN functions f ON f.id = c.caller_id WHERE"
                             " f.name = 'GinBarrierKernel' AND c.callee_name = 'sync' AND c.line = %d",
                             line_of("all_gather.cu", "CALL_GIN_SYNC")) == 1,
             "GinBarrierKernel's bar.sync at line %d:\n%s", line_of("all_gather.cu", "CALL_GIN_SYNC"), ix_output);
    // device code is indexed too: a __device__ function's call into nccl_device/utility.h
    TB_CHECK(tb_index_q_long(db,
                             "SELECT COUNT(*) FROM calls c JOIN functions f ON f.id = c.caller_id WHERE f.name = 'chunk'"
                             " AND c.callee_name = 'divUp' AND c.line = %d",
                             line_of("all_gather.cu", "CALL_DIVUP")) == 1,
             "chunk → nccl::utility::divUp");
}

TB_TEST(main_reaches_ncclAllReduce_in_all_reduces_binary_only) {
    TB_REQUIRE(ix_status == 0 && db, "index failed:\n%s", ix_output);
    char *out;
    int rc = tb_shell(&out, "'%s' chain --from main --to ncclAllReduce --index '%s'", TRACEBOOK, INDEX);
    char *ar = tb_chain_section(out, "common+all_reduce"), *ag = tb_chain_section(out, "common+all_gather");
    char *c1 = tb_chain_n(ar, 1), want[256];
    snprintf(want, sizeof want, "  → AllReduceRunColl (" CFIX "/all_reduce.cu:%d)\n  → ncclAllReduce (declared at ",
             line_of("all_reduce.cu", "CALL_NCCL_AR"));
    TB_CHECK(rc == 0 && tb_has(ar, "to ncclAllReduce: 1\n") && tb_has(c1, want) &&
                 tb_has(c1, "→ AllReduceRunTest (") && tb_has(c1, "/nccl.h:"),
             "rc %d, expected\n%s\nin:\n%s", rc, want, out);
    TB_CHECK(tb_has(ag, "to ncclAllReduce: 0\n") && !tb_has(out, "AllGather"), "none through all_gather.cu:\n%s", out);
    TB_CHECK(!tb_has(out, "partial parse"), "no unit is partial:\n%s", out);
    free(c1);
    free(ar);
    free(ag);
    free(out);
}

// `tracebook walk` on the Makefile-built codebase: the range its NVTX push opens (TimeTest's
// nvtxRangePushA), from main through the engine's function-pointer field, down through the
// collective's field to ncclAllReduce with the stream it is enqueued on; with a trace, the
// range's count and times and the NCCL call's shape inside it.
TB_TEST(walk_from_main_to_ncclAllReduce_on_the_makefile_codebase) {
    TB_REQUIRE(ix_status == 0 && db, "index failed:\n%s", ix_output);
    const char *trace = WORK "/trace.rank-00000.json";
    TB_REQUIRE(tb_write_text(trace,
                             "{\"traceEvents\": [\n"
                             " {\"name\": \"timeTest\", \"ph\": \"X\", \"ts\": 10, \"dur\": 120, \"pid\": 0, \"tid\": 1},\n"
                             " {\"name\": \"ncclAllReduce\", \"ph\": \"X\", \"ts\": 20, \"dur\": 80, \"pid\": 0, \"tid\": 1,"
                             " \"args\": {\"op\": \"all_reduce\", \"dtype\": \"float32\", \"count\": 1024, \"bytes\": 4096}},\n"
                             " {\"name\": \"timeTest\", \"ph\": \"X\", \"ts\": 200, \"dur\": 110, \"pid\": 0, \"tid\": 1}\n"
                             "]}\n") == 0,
               "cannot write %s", trace);
    char *out, want[3][512];
    int rc = tb_shell(&out, "'%s' walk timeTest --trace '%s' --from common+all_reduce --index '%s'", TRACEBOOK, trace,
                      INDEX);
    snprintf(want[0], sizeof want[0],
             "1. `main` — " CFIX "/common.cu:%d, through the function-pointer field `testEngine.runTest`",
             line_of("common.cu", "CALL_RUN_TEST"));
    snprintf(want[1], sizeof want[1], "3. `TimeTest` — " CFIX "/common.cu:%d — the range opens here",
             line_of("common.cu", "RANGE_PUSH"));
    snprintf(want[2], sizeof want[2],
             "**Stream/device:** `ncclAllReduce` is enqueued on `args->stream` (" CFIX "/all_reduce.cu:%d)",
             line_of("all_reduce.cu", "CALL_NCCL_AR"));
    TB_CHECK(rc == 0 && tb_has(out, "# Walkthrough: `timeTest`") && tb_has(out, "From `main` of `common+all_reduce`") &&
                 tb_has(out, want[0]) && tb_has(out, want[1]) && tb_has(out, "nvtxRangePushA(\"timeTest\");"),
             "rc %d: from main to the range (%s; %s):\n%s", rc, want[0], want[1], out);
    TB_CHECK(tb_has(out, "through the function-pointer field `testColl.runColl`") &&
                 tb_has(out, "`AllReduceRunColl` — " CFIX "/all_reduce.cu:") &&
                 tb_has(out, "`ncclAllReduce` — the NCCL call, declared at ") && tb_has(out, "/nccl.h:") &&
                 tb_has(out, want[2]),
             "from the range to ncclAllReduce and its stream (%s):\n%s", want[2], out);
    // the NCCL call in the trace (op all_reduce) confirms the chain that ends in ncclAllReduce
    TB_CHECK(tb_has(out, "Seen at runtime: 1× `all_reduce` inside `timeTest` in these traces."),
             "ncclAllReduce seen at runtime:\n%s", out);
    TB_CHECK(tb_has(out, "| 0 | 2 | 230.0 us | 115.0 us | 110.0 us | 120.0 us |") &&
                 tb_has(out, "| ncclAllReduce | 0 | 1 |  | 0 | all_reduce | float32 | 1024 | 4096 | 80.0 us | 80.0 us |"),
             "the runtime evidence:\n%s", out);
    TB_CHECK(!tb_has(out, "partial parse"), "no unit is partial:\n%s", out);
    free(out);
    // all_gather's binary opens the same range, and never reaches ncclAllReduce
    rc = tb_shell(&out, "'%s' walk timeTest --from common+all_gather --index '%s'", TRACEBOOK, INDEX);
    TB_CHECK(rc == 0 && tb_has(out, "# Walkthrough: `timeTest`") && tb_has(out, "the range opens here") &&
                 !tb_has(out, "ncclAllReduce") && !tb_has(out, "AllReduceRunColl"),
             "rc %d: all_gather's walk:\n%s", rc, out);
    free(out);
}

int main(void) {
    const char *cuda = cuda_dir();
    char need[2][1024];
    snprintf(need[0], sizeof need[0], "%s/include/cuda_runtime.h", cuda);
    snprintf(need[1], sizeof need[1], "%s/include/nccl_device.h", cuda);
    for (int i = 0; i < 2; i++)
        if (!tb_exists(need[i])) {
            printf("skipped: %s is missing (a CUDA 13 toolkit with NCCL's device headers is needed)\n", need[i]);
            return 77;
        }
    tb_error err;
    if (tb_mkdir_p(WORK, &err)) printf("  %s\n", err.msg);
    // nvcc commands as nccl-tests' Makefile gives them (bear's "command" form)
    char compdb[8192] = "[";
    const char *units[] = {"common.cu", "all_reduce.cu", "all_gather.cu"};
    for (int i = 0; i < 3; i++) {
        size_t n = strlen(compdb);
        snprintf(compdb + n, sizeof compdb - n,
                 "%s{\"directory\": \"" CFIX "\", \"command\": \"%s/bin/nvcc -O3 -gencode=arch=compute_90,code=sm_90"
                 " -gencode=arch=compute_100,code=sm_100 -std=c++17 -Xcompiler -fPIC,-Wall -I%s/include -c %s -o " WORK
                 "/%.*s.o\", \"file\": \"%s\"}",
                 i ? ",\n " : "", cuda, cuda, units[i], (int)strlen(units[i]) - 3, units[i], units[i]);
    }
    strcat(compdb, "]\n");
    ix_status = -1;
    if (tb_index_fixture(&ix_status, &ix_output, tb_write_text(WORK "/compile_commands.json", compdb) == 0, TRACEBOOK,
                         WORK, INDEX))
        db = tb_index_open_ro(INDEX);
    TB_RUN(every_unit_parses_without_an_error_from_the_toolkit_headers);
    TB_RUN(main_reaches_ncclAllReduce_in_all_reduces_binary_only);
    TB_RUN(walk_from_main_to_ncclAllReduce_on_the_makefile_codebase);
    sqlite3_close(db);
    free(ix_output);
    return tb_test_summary();
}
