// test_replay_build.c — the builds a replay keeps (experiments/runs/replay_build.h): a kept
// build is run only when its build.json names the same key and its binary still has the sha256
// recorded there; --rebuild never reuses one; every part of the key moves the entry. The
// requests name a commit the repository does not have, so a request that goes on to build fails
// at the checkout, before any compiler runs: each case takes milliseconds. test_replay.c checks
// the whole path (the second replay of a record runs the build the first one kept).
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/fileio.h"
#include "records/provenance.h"
#include "runs/replay_build.h"
#include "tb_shell.h"
#include "tb_test.h"

#define ART TB_TEST_TMPDIR "/replay_build_artifacts"
#define MISSING_COMMIT "0123456789abcdef0123456789abcdef01234567"

static char said[8192];  // what the last request printed on its `say` stream

static tb_replay_build request(int rebuild) {
    return (tb_replay_build){ART,           TB_SOURCE_DIR, "20261206T000000-test", MISSING_COMMIT, NULL, 0, NULL,
                             "-DCMAKE_BUILD_TYPE='Release'", 1, rebuild, NULL};
}

// Runs the request; its say stream is captured in said, the temporary tree removed.
static int run(tb_replay_build b, char *engine, size_t len) {
    char *text = NULL, wt[512];
    size_t n = 0;
    FILE *say = open_memstream(&text, &n);
    b.say = say;
    int keep = 0;
    int rc = tb_replay_build_engine(&b, engine, len, wt, sizeof wt, &keep);
    fclose(say);
    snprintf(said, sizeof said, "%s", text ? text : "");
    free(text);
    if (wt[0]) {
        char rm[600];
        snprintf(rm, sizeof rm, "rm -rf '%s'", wt);
        if (system(rm) != 0) printf("  could not remove %s\n", wt);
    }
    return rc;
}

static void write_file(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    if (f) {
        fputs(text, f);
        fclose(f);
    }
}

// A kept build for request(0): an executable with its sha256 and key in build.json. entry gets
// its directory.
static int keep_one(char *entry, size_t len) {
    tb_error err;
    json_t *key = NULL;
    tb_replay_build b = request(0);
    if (system("rm -rf '" ART "'") != 0 || tb_replay_build_entry(&b, entry, len, &key, &err) != 0 ||
        tb_mkdir_p(entry, &err) != 0)
        return -1;
    char path[1024], hex[65];
    snprintf(path, sizeof path, "%s/pretrain_gpt", entry);
    write_file(path, "#!/bin/sh\necho kept\n");
    snprintf(path, sizeof path, "%s/pretrain_gpt", entry);
    if (tb_sha256_file(path, hex, &err) != 0) return -1;
    json_t *doc = json_pack("{s:o, s:s}", "key", key, "sha256", hex);
    snprintf(path, sizeof path, "%s/build.json", entry);
    int rc = tb_write_json_atomic(path, doc, &err);
    json_decref(doc);
    return rc;
}

TB_TEST(a_kept_build_with_its_key_and_sha256_is_run_instead_of_building) {
    char entry[1024], engine[1024], want[1100];
    TB_REQUIRE(keep_one(entry, sizeof entry) == 0, "a kept build made");
    TB_CHECK(strstr(entry, ART "/.replay-builds/") != NULL, "kept under the artifacts root: %s", entry);
    int rc = run(request(0), engine, sizeof engine);
    snprintf(want, sizeof want, "%s/pretrain_gpt", entry);
    TB_CHECK(rc == 0 && !strcmp(engine, want), "status %d, engine %s, want %s:\n%s", rc, engine, want, said);
    TB_CHECK(strstr(said, "the build an earlier replay kept") && strstr(said, "sha256 checked"), "said:\n%s", said);
    TB_CHECK(!strstr(said, "building"), "nothing built:\n%s", said);
}

TB_TEST(rebuild_never_reuses_a_kept_build) {
    char entry[1024], engine[1024];
    TB_REQUIRE(keep_one(entry, sizeof entry) == 0, "a kept build made");
    int rc = run(request(1), engine, sizeof engine);
    // it went on to check the commit out (which this repository does not have)
    TB_CHECK(rc != 0 && !strstr(said, "earlier replay kept") && strstr(said, "into /tmp/tracebook-replay-"),
             "status %d:\n%s", rc, said);
}

TB_TEST(a_kept_binary_that_changed_is_not_run) {
    char entry[1024], engine[1024], path[1100];
    TB_REQUIRE(keep_one(entry, sizeof entry) == 0, "a kept build made");
    snprintf(path, sizeof path, "%s/pretrain_gpt", entry);
    FILE *f = fopen(path, "a");
    TB_REQUIRE(f, "open %s", path);
    fputs("# altered\n", f);
    fclose(f);
    int rc = run(request(0), engine, sizeof engine);
    TB_CHECK(rc != 0 && strstr(said, "no longer has the sha256") && strstr(said, "building again") &&
                 strstr(said, "into /tmp/tracebook-replay-"),
             "status %d:\n%s", rc, said);
}

TB_TEST(a_kept_build_of_another_key_is_not_run) {
    char entry[1024], engine[1024], path[1100];
    TB_REQUIRE(keep_one(entry, sizeof entry) == 0, "a kept build made");
    snprintf(path, sizeof path, "%s/build.json", entry);
    json_error_t jerr;
    json_t *doc = json_load_file(path, 0, &jerr);
    TB_REQUIRE(doc, "%s: %s", path, jerr.text);
    json_object_set_new(json_object_get(doc, "key"), "cmake_args", json_string("-DCMAKE_BUILD_TYPE='Debug'"));
    tb_error err;
    TB_REQUIRE(tb_write_json_atomic(path, doc, &err) == 0, "%s", err.msg);
    json_decref(doc);
    int rc = run(request(0), engine, sizeof engine);
    TB_CHECK(rc != 0 && strstr(said, "is not this one") && strstr(said, "into /tmp/tracebook-replay-"),
             "status %d:\n%s", rc, said);
}

TB_TEST(each_part_of_the_key_moves_the_entry) {
    tb_error err;
    char base[1024], other[1024];
    tb_replay_build b = request(0);
    TB_REQUIRE(tb_replay_build_entry(&b, base, sizeof base, NULL, &err) == 0, "%s", err.msg);
    b.commit = "1123456789abcdef0123456789abcdef01234567";
    TB_CHECK(tb_replay_build_entry(&b, other, sizeof other, NULL, &err) == 0 && strcmp(base, other), "commit: %s",
             other);
    b = request(0);
    b.patch_sha256 = "aa";
    TB_CHECK(tb_replay_build_entry(&b, other, sizeof other, NULL, &err) == 0 && strcmp(base, other), "patch: %s",
             other);
    b = request(0);
    b.cmake_args = "-DCMAKE_BUILD_TYPE='Debug'";
    TB_CHECK(tb_replay_build_entry(&b, other, sizeof other, NULL, &err) == 0 && strcmp(base, other), "options: %s",
             other);
    b = request(0);
    const char *cc = getenv("CC");
    char saved[512] = "";
    if (cc) snprintf(saved, sizeof saved, "%s", cc);
    setenv("CC", "/nonexistent/cc", 1);
    TB_CHECK(tb_replay_build_entry(&b, other, sizeof other, NULL, &err) == 0 && strcmp(base, other), "CC: %s", other);
    if (cc) setenv("CC", saved, 1);
    else unsetenv("CC");
    TB_CHECK(tb_replay_build_entry(&b, other, sizeof other, NULL, &err) == 0 && !strcmp(base, other),
             "the same request, the same entry: %s vs %s", base, other);
}

int main(void) {
    TB_RUN(a_kept_build_with_its_key_and_sha256_is_run_instead_of_building);
    TB_RUN(rebuild_never_reuses_a_kept_build);
    TB_RUN(a_kept_binary_that_changed_is_not_run);
    TB_RUN(a_kept_build_of_another_key_is_not_run);
    TB_RUN(each_part_of_the_key_moves_the_entry);
    return tb_test_summary();
}
