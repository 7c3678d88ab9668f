// test_walk_group.c — `tracebook walk` names where a collective's group comes from, on a
// fixture indexed by the real indexer (fixtures/groups/: a parallel_state with the group kinds
// and the getter of the tensor-parallel group, an MLP that fills a region record with the
// getter's group and all-reduces through it): the group argument at the call that hands it
// over, the record field and the parameter it reads, the compound literal that fills the
// record (the getter's call), the lines naming the group kind (the getter's own body), and
// from the traces' args the group's members and the coordinates they differ and agree in.
//
// The fixture is copied into the test's directory and indexed there, so its files are the
// project's own files for the walk (it searches the project's sources, not tests/).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/fileio.h"
#include "index_query.h"
#include "tb_shell.h"
#include "tb_test.h"

#define TRACEBOOK TB_BIN_DIR "/tracebook"
#define GFIX TB_SOURCE_DIR "/tests/trace/fixtures/groups"
#define WORK TB_TEST_TMPDIR "/test_walk_group"
#define SRC WORK "/src"
#define INDEX WORK "/index.sqlite"

static char *ix_output;
static int ix_status = -1;

static int line_of(const char *file, const char *marker) {
    char path[1024];
    snprintf(path, sizeof path, GFIX "/%s", file);
    return tb_line_of(path, marker);
}

// Rank r's trace: the MLP's range and, inside it, the all-reduce over tp with the args the
// engine's communicator records (group, its id, size and the rank's index in it, the rank
// with its coordinates).
static int write_trace(const char *path, int r) {
    char text[2048];
    snprintf(text, sizeof text,
             "{\"traceEvents\": [\n"
             " {\"name\": \"process_name\", \"ph\": \"M\", \"pid\": %d, \"tid\": 0, \"args\": {\"name\": \"rank\"}},\n"
             " {\"name\": \"layer.0.mlp.fc2\", \"cat\": \"range\", \"ph\": \"X\", \"ts\": 10, \"dur\": 50, \"pid\": %d,"
             " \"tid\": 1, \"args\": {\"depth\": 0}},\n"
             " {\"name\": \"comm.tp.all_reduce\", \"cat\": \"range\", \"ph\": \"X\", \"ts\": 20, \"dur\": 10, \"pid\": %d,"
             " \"tid\": 1, \"args\": {\"depth\": 1, \"group\": \"tp\", \"group_id\": 0, \"group_size\": 2,"
             " \"group_index\": %d, \"rank\": \"rank %d (tp%d dp0)\", \"op\": \"all_reduce\", \"dtype\": \"float32\","
             " \"count\": 4, \"bytes\": 16}}\n"
             "]}\n",
             r, r, r, r, r, r);
    return tb_write_text(path, text);
}

TB_TEST(walk_names_the_groups_origin_and_coordinates) {
    TB_REQUIRE(ix_status == 0, "index failed (%d):\n%s", ix_status, ix_output);
    TB_REQUIRE(write_trace(WORK "/trace.rank-00000.json", 0) == 0 && write_trace(WORK "/trace.rank-00001.json", 1) == 0,
               "cannot write the traces");
    char *out, want[4][512];
    int rc = tb_shell(&out, "'%s' walk layer.0.mlp.fc2 --trace '%s' '%s' --from main --index '%s'", TRACEBOOK,
                      WORK "/trace.rank-00000.json", WORK "/trace.rank-00001.json", INDEX);
    TB_CHECK(rc == 0 && tb_has(out, "# Walkthrough: `layer.0.mlp.fc2`") &&
                 tb_has(out, "`reduce_from_tp` — src/mlp.c:") && tb_has(out, "`tb_all_reduce` — src/parallel_state.c:"),
             "rc %d: the chain from the range to the collective:\n%s", rc, out);
    // the call that hands over the group, the field and parameter it reads
    snprintf(want[0], sizeof want[0],
             "**Group:** `tb_all_reduce` gets the group `r->tp` at src/mlp.c:%d: the field `tp_region.tp` of the parameter "
             "`r`.",
             line_of("mlp.c", "CALL_ALL_REDUCE"));
    // the compound literal that fills the record: the getter's call
    snprintf(want[1], sizeof want[1],
             "`tp_region` is filled at:\n- src/mlp.c:%d (in `mlp_forward`): `tp_region region = "
             "(tp_region){ps_get_tensor_model_parallel_group(rk)};  // REGION`",
             line_of("mlp.c", "REGION"));
    // the group kind the traces name, and the getter in parallel_state that reads it
    snprintf(want[2], sizeof want[2],
             "The group kind (the traces' group arg): `TB_GROUP_TP`, parallel_state's `rk->groups[TB_GROUP_TP]`, named "
             "at:");
    snprintf(want[3], sizeof want[3],
             "- src/parallel_state.c:%d (in `ps_get_tensor_model_parallel_group`): `return &rk->groups[TB_GROUP_TP];  // "
             "GETTER`",
             line_of("parallel_state.c", "GETTER"));
    for (int i = 0; i < 4; i++) TB_CHECK(tb_has(out, want[i]), "expected\n%s\nin:\n%s", want[i], out);
    TB_CHECK(tb_has(out, "- src/parallel_state.h:") && tb_has(out, "`enum { TB_GROUP_TP, TB_GROUP_DP, TB_GROUP_COUNT };`"),
             "the kind's declaration:\n%s", out);
    // the coordinates: the members differ in tp and share dp
    TB_CHECK(tb_has(out, "group `tp` id 0 (2 members): rank 0 (tp0 dp0) as member 0, rank 1 (tp1 dp0) as member 1 — "
                         "its members differ in tp and share dp."),
             "the group's members and coordinates:\n%s", out);
    free(out);
    // without traces the kind is guessed from the argument's name, and said to be
    rc = tb_shell(&out, "'%s' walk layer.0.mlp.fc2 --from main --index '%s'", TRACEBOOK, INDEX);
    TB_CHECK(rc == 0 && tb_has(out, want[0]) &&
                 tb_has(out, "The group kind (guessed from the argument's name; static only): `TB_GROUP_TP`") &&
                 tb_has(out, want[3]) && !tb_has(out, "members differ"),
             "rc %d: the static walk:\n%s", rc, out);
    free(out);
}

int main(void) {
    tb_error err;
    if (tb_mkdir_p(SRC, &err)) printf("  %s\n", err.msg);
    const char *files[] = {"parallel_state.h", "parallel_state.c", "mlp.c"};
    int ok = 1;
    for (int i = 0; i < 3; i++) {
        char from[1024], to[1024];
        snprintf(from, sizeof from, GFIX "/%s", files[i]);
        snprintf(to, sizeof to, SRC "/%s", files[i]);
        char *text = tb_slurp(from);
        ok &= text && tb_write_text(to, text) == 0;
        free(text);
    }
    ok &= tb_write_text(WORK "/compile_commands.json",
                        "[{\"directory\": \"" SRC "\", \"arguments\": [\"cc\", \"-c\", \"parallel_state.c\"],"
                        " \"file\": \"parallel_state.c\"},\n"
                        " {\"directory\": \"" SRC "\", \"arguments\": [\"cc\", \"-c\", \"mlp.c\"], \"file\": \"mlp.c\"}]\n") == 0;
    tb_index_fixture(&ix_status, &ix_output, ok, TRACEBOOK, WORK, INDEX);
    TB_RUN(walk_names_the_groups_origin_and_coordinates);
    free(ix_output);
    return tb_test_summary();
}
