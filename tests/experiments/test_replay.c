// tracebook replay: a recorded run re-executed at its recorded revision, rebuilt as it was
// built, reproduces its losses bit for bit; a replay says what differs when it cannot; a
// timing outside its tolerance fails unless waived; a record that was altered, whose commit
// is missing or whose patch no longer applies is refused with a clear error.
#include <jansson.h>
#include <stdarg.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "records/provenance.h"
#include "tb_shell.h"
#include "tb_run_dir.h"
#include "tb_test.h"

#define TRACEBOOK TB_BIN_DIR "/tracebook"
#define ART TB_TEST_TMPDIR "/replay_artifacts"

static tb_output sh;  // what the last command printed
static char first_replay[1 << 14];  // what the first replay printed
// The second replay (of the record said to be from another CPU, with a zero timing tolerance
// and no waiver): what it printed and its exit status. Two tests read it: each replay is a
// whole engine build.
static char second_replay[1 << 14];
static int second_status = -1;
static char replay_id[1024];         // the first replay's record

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
    // timing on a shared 2-core machine is not this test's point: a zero tolerance makes the
    // timing OUTSIDE for sure, and --ignore-timing waives it
    int status = tb_run(&sh, TB_SOURCE_DIR, "%s replay %s --artifacts %s --timing-tolerance 0 --ignore-timing",
                        TRACEBOOK, record_id, ART);
    TB_CHECK(status == 0, "replay exit status %d:\n%s\n%s", status, sh.out, sh.err);
    TB_CHECK(strstr(sh.out, "OUTSIDE (ignored: --ignore-timing)"), "the waived timing verdict:\n%s", sh.out);
    TB_CHECK(strstr(sh.out, "bitwise identical: 4 steps x 2 ranks") && strstr(sh.out, "MATCH"), "loss verdict:\n%s",
             sh.out);
    TB_CHECK(strstr(sh.out, "step time") && strstr(sh.out, "tolerance"), "timing verdict with its tolerance");
    snprintf(first_replay, sizeof first_replay, "%s", sh.out);
    const char *at = strstr(sh.out, "replay recorded as ");
    TB_REQUIRE(at, "replay record named");
    char dir[1024];
    snprintf(dir, sizeof dir, "%s", at + 19);
    dir[strcspn(dir, " ")] = '\0';
    snprintf(replay_id, sizeof replay_id, "%s", strrchr(dir, '/') ? strrchr(dir, '/') + 1 : dir);
    char path[1100];
    snprintf(path, sizeof path, "%s/" TB_RECORD_MANIFEST, dir);
    json_t *m = json_load_file(path, 0, NULL);
    TB_CHECK(m && !strcmp(json_string_value(json_object_get(m, "replay_of")) ?: "", record_id),
             "the replay record links to the original");
    json_decref(m);
}

static json_t *record_manifest(void) {
    char path[1024];
    snprintf(path, sizeof path, ART "/replayed/v1/%s/" TB_RECORD_MANIFEST, record_id);
    return json_load_file(path, 0, NULL);
}

static const char *build_field(const json_t *m, const char *a, const char *b) {
    const json_t *v = json_object_get(json_object_get(m, "engine_build"), a);
    return json_string_value(b ? json_object_get(v, b) : v);
}

// The record says how the engine binary that ran was built — asked of the binary — and the
// replay rebuilds with those CMake options: a record made by this (Release or ASan Debug)
// build is replayed by the same kind of build, so its losses can be bitwise equal.
TB_TEST(the_record_holds_how_its_engine_was_built_and_replay_rebuilds_that) {
    TB_REQUIRE(record_id[0], "needs the recorded run");
    json_t *m = record_manifest();
    TB_REQUIRE(m && json_is_object(json_object_get(m, "engine_build")), "engine_build in the manifest");
#ifdef NDEBUG
    const char *build_type = "Release";
#else
    const char *build_type = "Debug";
#endif
#ifdef __SANITIZE_ADDRESS__
    const int sanitized = 1;
#else
    const int sanitized = 0;
#endif
    const char *bt = build_field(m, "cmake", "CMAKE_BUILD_TYPE"), *san = build_field(m, "cmake", "TB_SANITIZE");
    TB_CHECK(bt && !strcmp(bt, build_type), "CMAKE_BUILD_TYPE %s, this build is %s", bt ? bt : "(none)", build_type);
    TB_CHECK(san && (sanitized ? strstr(san, "address") != NULL : san[0] == '\0'), "TB_SANITIZE '%s' (sanitized: %d)",
             san ? san : "(none)", sanitized);
    const char *flags = build_field(m, "codegen_flags", NULL);
    TB_CHECK(flags && (!sanitized || strstr(flags, "-fsanitize=")), "codegen flags '%s'", flags ? flags : "(none)");
    // a sanitized Debug build is compiled at -O1 (CMakeLists.txt; at the level CFLAGS names, if
    // any), and its record says so
    TB_CHECK(!sanitized || strcmp(build_type, "Debug") || (flags && strstr(flags, "-O")),
             "a sanitized Debug build's codegen flags hold its optimisation level: '%s'", flags ? flags : "(none)");
    const char *kernel = build_field(m, "blas", "kernel"), *level = build_field(m, "cpu", "isa_level");
    TB_CHECK(kernel && kernel[0], "the BLAS kernel it selected");
    TB_CHECK(level && !strncmp(level, "x86-64", 6), "the CPU's ISA level: %s", level ? level : "(none)");
    char hex[65];
    tb_error err;
    TB_REQUIRE(tb_sha256_file(TB_BIN_DIR "/pretrain_gpt", hex, &err) == 0, "%s", err.msg);
    const char *sha = build_field(m, "sha256", NULL);
    TB_CHECK(sha && !strcmp(sha, hex), "the engine binary's sha256 %s, recorded %s", hex, sha ? sha : "(none)");
    char want[256];
    snprintf(want, sizeof want, "with -DCMAKE_BUILD_TYPE='%s' -DTB_SANITIZE='%s'", build_type, san ? san : "");
    TB_CHECK(strstr(first_replay, want), "the replay builds %s:\n%s", want, first_replay);
    // the parts this build has (CMakeLists.txt: ON with the CUDA backend, OFF without the
    // toolkit), recorded and passed back: the sanitized build has no CUDA backend, and its
    // replay compiles none
    const char *cuda = build_field(m, "cmake", "TB_CUDA");
    TB_CHECK(cuda && !strcmp(cuda, TB_TEST_CUDA), "TB_CUDA recorded %s, this build's %s", cuda ? cuda : "(none)",
             TB_TEST_CUDA);
    snprintf(want, sizeof want, " -DTB_CUDA='%s'", TB_TEST_CUDA);
    TB_CHECK(strstr(first_replay, want), "the replay builds %s:\n%s", want, first_replay);
    TB_CHECK(strstr(first_replay, "BLAS kernel pinned to the recorded"), "the kernel pinned:\n%s", first_replay);
    TB_CHECK(strstr(first_replay, "kept for a later replay of this revision"), "the build kept:\n%s", first_replay);
    json_decref(m);
}

// A record from a CPU of another ISA level: no kernel is pinned (it might not run here), and
// the replay names the difference that makes bitwise equality not to be expected.
TB_TEST(a_replay_on_a_cpu_unlike_the_recording_says_what_differs) {
    TB_REQUIRE(record_id[0], "needs the recorded run");
    char path[1024];
    snprintf(path, sizeof path, ART "/replayed/v1/%s/" TB_RECORD_MANIFEST, record_id);
    json_t *m = record_manifest();
    TB_REQUIRE(m, "manifest");
    const char *level = build_field(m, "cpu", "isa_level");
    char recorded_level[64];
    snprintf(recorded_level, sizeof recorded_level, "%s", level ? level : "?");
    json_object_set_new(json_object_get(json_object_get(m, "engine_build"), "cpu"), "isa_level",
                        json_string("x86-64-v9"));
    json_dump_file(m, path, JSON_INDENT(1));
    json_decref(m);
    int status = second_status =
        tb_run(&sh, TB_SOURCE_DIR, "%s replay %s --artifacts %s --timing-tolerance 0", TRACEBOOK, record_id, ART);
    snprintf(second_replay, sizeof second_replay, "%s", sh.out);
    char want[160];
    snprintf(want, sizeof want, "this build differs from the recorded one: CPU ISA level x86-64-v9 vs %s",
             recorded_level);
    TB_CHECK(strstr(sh.out, want), "status %d, want '%s' in:\n%s\n%s", status, want, sh.out, sh.err);
    TB_CHECK(!strstr(sh.out, "pinned"), "no kernel pinned for another CPU:\n%s", sh.out);
    // the same revision and options as the first replay: its kept build runs, nothing is built
    TB_CHECK(strstr(sh.out, "the build an earlier replay kept") && !strstr(sh.out, "building pretrain_gpt"),
             "the first replay's build reused:\n%s", sh.out);
}

// A timing OUTSIDE its tolerance fails the replay (a waiver is a flag, not the default): the
// second replay's, whose tolerance was zero. Its losses still MATCH: the other CPU is only the
// manifest's word, and this host computes as the recording did.
TB_TEST(a_step_time_outside_the_tolerance_fails_the_replay) {
    TB_REQUIRE(second_replay[0], "needs the second replay");
    TB_CHECK(second_status != 0, "exit status %d with the timing OUTSIDE:\n%s", second_status, second_replay);
    TB_CHECK(strstr(second_replay, "MATCH") && strstr(second_replay, "OUTSIDE") && !strstr(second_replay, "ignored"),
             "losses MATCH, timing OUTSIDE:\n%s", second_replay);
}

// A record whose files changed after recording is named as altered and not replayed.
TB_TEST(a_record_with_an_altered_file_is_named_as_altered_and_not_replayed) {
    TB_REQUIRE(record_id[0], "needs the recorded run");
    char record[1024], metrics[1100];
    snprintf(record, sizeof record, ART "/replayed/v1/%s", record_id);
    TB_REQUIRE(tb_record_rank_path(metrics, sizeof metrics, record, TB_RANK_METRICS, 0), "metrics path");
    FILE *f = fopen(metrics, "a");
    TB_REQUIRE(f, "%s", metrics);
    fputs("{\"step\": 99, \"loss\": 0.5}\n", f);
    fclose(f);
    int status = tb_run(&sh, TB_SOURCE_DIR, "%s replay %s --artifacts %s", TRACEBOOK, record_id, ART);
    char want[sizeof metrics + 64];
    snprintf(want, sizeof want, "file altered: %s: sha256 expected", metrics);
    TB_CHECK(status != 0 && strstr(sh.err, want), "status %d, want '%s' in:\n%s", status, want, sh.err);
    TB_CHECK(!strstr(sh.out, "building"), "nothing built for an altered record:\n%s", sh.out);
}

// A replay record is never reused as a repetition of its experiment: with the original no
// longer a finished run, running the runbook again runs the engine, not the replay's record.
TB_TEST(a_replay_is_never_reused_as_a_repetition_of_the_experiment) {
    TB_REQUIRE(record_id[0] && replay_id[0], "needs the recorded run and its replay");
    char path[1024];
    snprintf(path, sizeof path, ART "/replayed/v1/%s/" TB_RECORD_MANIFEST, record_id);
    json_t *m = json_load_file(path, 0, NULL);
    TB_REQUIRE(m, "%s", path);
    json_object_set_new(m, "status", json_string("failed"));
    json_dump_file(m, path, JSON_INDENT(1));
    json_decref(m);
    int status = tb_run(&sh, TB_SOURCE_DIR, "%s run %s/replay.lua --artifacts %s", TRACEBOOK, TB_TEST_TMPDIR, ART);
    TB_CHECK(status == 0, "runbook: %d\n%s\n%s", status, sh.out, sh.err);
    TB_CHECK(!strstr(sh.out, replay_id), "the replay %s is not reused:\n%s", replay_id, sh.out);
    TB_CHECK(strstr(sh.out, "run 1:") && !strstr(sh.out, "already finished"), "a new engine run:\n%s", sh.out);
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
        // as a record made with that patch: its file list holds it too
        json_object_set_new(json_object_get(m, "files"), TB_RECORD_PATCH, json_string(hex));
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

// A record whose run saw an untracked source: the engine's build globbed it in, the saved
// patch cannot hold it, so the replay is refused naming it (and not the untracked notes).
TB_TEST(a_record_with_an_untracked_source_is_not_replayed) {
    TB_REQUIRE(record_id[0], "needs the recorded run");
    char path[1024];
    snprintf(path, sizeof path, ART "/replayed/v1/%s/" TB_RECORD_MANIFEST, record_id);
    json_t *m = json_load_file(path, 0, NULL);
    TB_REQUIRE(m, "%s", path);
    json_t *was = json_incref(json_object_get(json_object_get(m, "git"), "untracked"));
    json_decref(m);
    edit_manifest("untracked", json_pack("[s,s]", "engine/backend/cpu/extra_kernel.c", "notes.txt"), NULL);
    int status = tb_run(&sh, TB_SOURCE_DIR, "%s replay %s --artifacts %s", TRACEBOOK, record_id, ART);
    TB_CHECK(status != 0 && strstr(sh.err, "1 untracked source file (engine/backend/cpu/extra_kernel.c)") &&
                 strstr(sh.err, "not replayed") && !strstr(sh.err, "notes.txt"),
             "status %d, stderr:\n%s", status, sh.err);
    TB_CHECK(!strstr(sh.out, "building"), "nothing built:\n%s", sh.out);
    edit_manifest("untracked", was ? was : json_array(), NULL);  // as recorded
}

int main(void) {
    TB_RUN(replay_at_the_recorded_revision_reproduces_losses_bitwise);
    TB_RUN(the_record_holds_how_its_engine_was_built_and_replay_rebuilds_that);
    TB_RUN(a_replay_on_a_cpu_unlike_the_recording_says_what_differs);
    TB_RUN(a_step_time_outside_the_tolerance_fails_the_replay);
    TB_RUN(a_record_with_an_untracked_source_is_not_replayed);
    TB_RUN(replay_of_a_commit_missing_from_the_repository_is_refused);
    TB_RUN(replay_whose_saved_patch_no_longer_applies_is_refused);
    TB_RUN(a_record_with_an_altered_file_is_named_as_altered_and_not_replayed);
    TB_RUN(a_replay_is_never_reused_as_a_repetition_of_the_experiment);
    return tb_test_summary();
}
