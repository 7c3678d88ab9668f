// tracebook replay: a recorded run re-executed at its recorded revision reproduces its
// losses bit for bit; a record whose commit is missing or whose patch no longer applies is
// refused with a clear error.
#include <jansson.h>
#include <stdarg.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "provenance.h"
#include "tb_shell.h"
#include "tb_run_dir.h"
#include "tb_test.h"

#define TRACEBOOK TB_BIN_DIR "/tracebook"
#define ART TB_TEST_TMPDIR "/replay_artifacts"

static tb_output sh;  // what the last command printed

static char record_id[256];

// One tiny recorded run to replay.
static int make_record(void) {
    FILE *f = fopen(TB_TEST_TMPDIR "/replay.lua", "w");
    fputs("local exp = tb.experiment{ name = 'replayed', version = 1, question = 'q' }\n"
          "local r = exp:run{ num_layers = 2, hidden_size = 32, num_attention_heads = 2, seq_length = 16,"
          " vocab_size = 64, train_iters = 4, world_size = 2, tensor_model_parallel_size = 2 }\n"
          "print('RECORD ' .. r.runs[1].run_id)\n",
          f);
    fclose(f);
    if (tb_run(&sh, TB_SOURCE_DIR, "rm -rf %s && %s run %s/replay.lua --artifacts %s", ART, TRACEBOOK, TB_TEST_TMPDIR,
               ART) != 0)
        return -1;
    const char *at = strstr(sh.out, "RECORD ");
    if (!at) return -1;
    snprintf(record_id, sizeof record_id, "%s", at + 7);
    record_id[strcspn(record_id, "\n")] = '\0';
    return 0;
}

TB_TEST(replay_at_the_recorded_revision_reproduces_losses_bitwise) {
    TB_REQUIRE(make_record() == 0, "recording the run failed:\n%s\n%s", sh.out, sh.err);
    int status = tb_run(&sh, TB_SOURCE_DIR, "%s replay %s --artifacts %s", TRACEBOOK, record_id, ART);
    TB_CHECK(status == 0, "replay exit status %d:\n%s\n%s", status, sh.out, sh.err);
    TB_CHECK(strstr(sh.out, "bitwise identical: 4 steps x 2 ranks") && strstr(sh.out, "MATCH"), "loss verdict:\n%s",
             sh.out);
    TB_CHECK(strstr(sh.out, "step time") && strstr(sh.out, "tolerance"), "timing verdict with its tolerance");
    const char *at = strstr(sh.out, "replay recorded as ");
    TB_REQUIRE(at, "replay record named");
    char dir[1024];
    snprintf(dir, sizeof dir, "%s", at + 19);
    dir[strcspn(dir, " ")] = '\0';
    char path[1100];
    snprintf(path, sizeof path, "%s/" TB_RECORD_MANIFEST, dir);
    json_t *m = json_load_file(path, 0, NULL);
    TB_CHECK(m && !strcmp(json_string_value(json_object_get(m, "replay_of")) ?: "", record_id),
             "the replay record links to the original");
    json_decref(m);
}

// Rewrites a field of the record's manifest (the test's way to make a broken record).
static void edit_manifest(const char *field_path, json_t *value, const char *patch_text) {
    char path[1024];
    snprintf(path, sizeof path, ART "/replayed/v1/%s/" TB_RECORD_MANIFEST, record_id);
    json_t *m = json_load_file(path, 0, NULL);
    json_t *git = json_object_get(m, "git");
    json_object_set_new(git, field_path, value);
    if (patch_text) {
        char patch_path[1100], hex[65];
        snprintf(patch_path, sizeof patch_path, ART "/replayed/v1/%s/git.patch", record_id);
        FILE *f = fopen(patch_path, "w");
        fputs(patch_text, f);
        fclose(f);
        tb_sha256_hex(patch_text, strlen(patch_text), hex);
        json_object_set_new(git, "dirty", json_true());
        json_object_set_new(git, "patch_sha256", json_string(hex));
    }
    json_dump_file(m, path, JSON_INDENT(1));
    json_decref(m);
}

TB_TEST(replay_of_a_commit_missing_from_the_repository_is_refused) {
    TB_REQUIRE(record_id[0], "needs the recorded run");
    edit_manifest("commit", json_string("0123456789abcdef0123456789abcdef01234567"), NULL);
    int status = tb_run(&sh, TB_SOURCE_DIR, "%s replay %s --artifacts %s", TRACEBOOK, record_id, ART);
    TB_CHECK(status != 0 && strstr(sh.err, "0123456789abcdef0123456789abcdef01234567"),
             "missing commit named: status %d, stderr %s", status, sh.err);
}

TB_TEST(replay_whose_saved_patch_no_longer_applies_is_refused) {
    TB_REQUIRE(record_id[0], "needs the recorded run");
    // back to the real commit, with a patch against content the tree does not have
    tb_git_state g;
    tb_error err;
    TB_REQUIRE(tb_git_describe(TB_SOURCE_DIR, &g, &err) == 0, "%s", err.msg);
    char commit[41];
    snprintf(commit, sizeof commit, "%s", g.commit);
    tb_git_state_free(&g);
    edit_manifest("commit", json_string(commit),
                  "diff --git a/README.md b/README.md\n--- a/README.md\n+++ b/README.md\n@@ -1,3 +1,3 @@\n"
                  "-this line is not in the README\n+replacement\n context that is not there\n more absent context\n");
    int status = tb_run(&sh, TB_SOURCE_DIR, "%s replay %s --artifacts %s", TRACEBOOK, record_id, ART);
    TB_CHECK(status != 0 && strstr(sh.err, "no longer applies"), "status %d, stderr %s", status, sh.err);
    // a patch altered after recording is caught by its sha256
    char patch_path[1100];
    snprintf(patch_path, sizeof patch_path, ART "/replayed/v1/%s/git.patch", record_id);
    FILE *f = fopen(patch_path, "a");
    fputs("tampered\n", f);
    fclose(f);
    status = tb_run(&sh, TB_SOURCE_DIR, "%s replay %s --artifacts %s", TRACEBOOK, record_id, ART);
    TB_CHECK(status != 0 && strstr(sh.err, "sha256"), "tampered patch: status %d, stderr %s", status, sh.err);
}

int main(void) {
    TB_RUN(replay_at_the_recorded_revision_reproduces_losses_bitwise);
    TB_RUN(replay_of_a_commit_missing_from_the_repository_is_refused);
    TB_RUN(replay_whose_saved_patch_no_longer_applies_is_refused);
    return tb_test_summary();
}
