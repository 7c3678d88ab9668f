// test_replay_build.c — the builds a replay keeps (experiments/runs/replay_build.h): a kept
// build is run (as a private link in the replay's own directory) only when its build.json names
// the same key and its binary still has the sha256 recorded there; --rebuild never reuses one;
// a fresh build is kept in place of what was there, and not keeping it is no failure; every
// part of the key moves the entry; keeping one removes the least recently used beyond
// TB_REPLAY_KEPT_MAX and what dead replays left. The
// requests name a commit the repository does not have, so a request that goes on to build fails
// at the checkout, before any compiler runs: each case takes milliseconds. test_replay.c checks
// the whole path (the second replay of a record runs the build the first one kept).
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "core/fileio.h"
#include "records/provenance.h"
#include "runs/replay_build.h"
#include "tb_shell.h"
#include "tb_test.h"

#define ART TB_TEST_TMPDIR "/replay_build_artifacts"
#define MISSING_COMMIT "0123456789abcdef0123456789abcdef01234567"

static char said[8192];         // what the last request printed on its `say` stream
static char engine_text[256];   // the start of the engine it chose, read before its directory went

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
    engine_text[0] = '\0';
    FILE *e = rc == 0 ? fopen(engine, "r") : NULL;
    if (e) {
        size_t got = fread(engine_text, 1, sizeof engine_text - 1, e);
        engine_text[got] = '\0';
        fclose(e);
    }
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
    char entry[1024], engine[1024];
    TB_REQUIRE(keep_one(entry, sizeof entry) == 0, "a kept build made");
    TB_CHECK(strstr(entry, ART "/.replay-builds/") != NULL, "kept under the artifacts root: %s", entry);
    int rc = run(request(0), engine, sizeof engine);
    size_t n = strlen(engine);
    TB_CHECK(rc == 0 && !strncmp(engine, "/tmp/tracebook-replay-", 22) && n > 13 &&
                 !strcmp(engine + n - 13, "/pretrain_gpt"),
             "status %d, engine %s (the replay's own link to it):\n%s", rc, engine, said);
    TB_CHECK(!strcmp(engine_text, "#!/bin/sh\necho kept\n"), "the kept binary's bytes: '%s'", engine_text);
    TB_CHECK(strstr(said, "the build an earlier replay kept") && strstr(said, "sha256 checked"), "said:\n%s", said);
    TB_CHECK(!strstr(said, "building"), "nothing built:\n%s", said);
}

// A fresh build of `binary` (a script's text, at ART/fake) kept at entry by b; what keeping said
// in *text (the caller frees it).
static int keep_fake(tb_replay_build b, const char *entry, const json_t *key, const char *binary, char **text) {
    size_t n = 0;
    *text = NULL;
    if (system("mkdir -p '" ART "/fake'") != 0) return -1;
    write_file(ART "/fake/pretrain_gpt", binary);
    write_file(ART "/fake/build.log", "the log\n");
    b.say = open_memstream(text, &n);
    int rc = tb_replay_build_keep(&b, ART "/fake/build.log", ART "/fake/pretrain_gpt", entry, key);
    fclose(b.say);
    return rc;
}

// A fresh build kept: its binary, log and build.json; a second one in place of the first, with
// nothing left beside it; a kept build then run; and a root where nothing can be kept.
TB_TEST(a_fresh_build_is_kept_in_place_of_the_last_and_not_keeping_is_no_failure) {
    char entry[1024], engine[1024], path[1100];
    tb_error err;
    json_t *key = NULL;
    tb_replay_build b = request(0);
    TB_REQUIRE(system("rm -rf '" ART "'") == 0, "a clean root");
    TB_REQUIRE(tb_replay_build_entry(&b, entry, sizeof entry, &key, &err) == 0, "%s", err.msg);
    char *text = NULL, *text2 = NULL;
    int first = keep_fake(b, entry, key, "#!/bin/sh\necho first\n", &text);
    int second = keep_fake(b, entry, key, "#!/bin/sh\necho second\n", &text2);
    TB_CHECK(first == 0 && second == 0, "kept: %d %d:\n%s%s", first, second, text ?: "", text2 ?: "");
    free(text);
    free(text2);
    snprintf(path, sizeof path, "%s/build.json", entry);
    json_error_t jerr;
    json_t *doc = json_load_file(path, 0, &jerr);
    char hex[65];
    snprintf(path, sizeof path, "%s/pretrain_gpt", entry);
    TB_CHECK(doc && json_equal(json_object_get(doc, "key"), key) && tb_sha256_file(path, hex, &err) == 0 &&
                 !strcmp(hex, json_string_value(json_object_get(doc, "sha256")) ?: ""),
             "build.json names the key and the binary's sha256");
    json_decref(doc);
    snprintf(path, sizeof path, "%s/build.log", entry);
    TB_CHECK(access(path, R_OK) == 0, "the log kept: %s", path);
    tb_output ls = {0};
    int listed = tb_run(&ls, NULL, "ls -A '" ART "/.replay-builds'"), lines = 0;
    for (const char *c = ls.out; c && *c; c++) lines += *c == '\n';
    TB_CHECK(listed == 0 && lines == 1 && !strstr(ls.out, ".tmp.") && !strstr(ls.out, ".old."),
             "one entry, nothing beside it:\n%s", ls.out);
    tb_output_free(&ls);
    int rc = run(request(0), engine, sizeof engine);
    TB_CHECK(rc == 0 && !strcmp(engine_text, "#!/bin/sh\necho second\n"), "the second one runs: %d '%s'\n%s", rc,
             engine_text, said);
    // .replay-builds is a file: nothing can be kept, and that is said, not failed
    TB_REQUIRE(system("rm -rf '" ART "/.replay-builds' && touch '" ART "/.replay-builds'") == 0, "a file in the way");
    int kept = keep_fake(b, entry, key, "#!/bin/sh\necho third\n", &text);
    TB_CHECK(kept != 0 && text && strstr(text, "not kept for a later replay"), "%d:\n%s", kept, text ? text : "");
    free(text);
    json_decref(key);
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
    TB_CHECK(rc != 0 && strstr(said, "its pretrain_gpt has sha256") && strstr(said, "its build.json records") &&
                 !strstr(said, "names other inputs") && strstr(said, "building again") &&
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
    TB_CHECK(rc != 0 && strstr(said, "its build.json names other inputs") && !strstr(said, "has sha256") &&
                 strstr(said, "into /tmp/tracebook-replay-"),
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
    char path[4096];
    snprintf(path, sizeof path, "%s", getenv("PATH") ?: "");
    setenv("PATH", "/nonexistent/bin:/usr/bin:/bin", 1);
    TB_CHECK(tb_replay_build_entry(&b, other, sizeof other, NULL, &err) == 0 && strcmp(base, other), "PATH: %s",
             other);
    setenv("PATH", path, 1);
    TB_CHECK(tb_replay_build_entry(&b, other, sizeof other, NULL, &err) == 0 && !strcmp(base, other),
             "the same request, the same entry: %s vs %s", base, other);
}

// A directory under .replay-builds, its build.json (when `json`) and its own time set `age` s back.
static int make_aged(const char *name, int json, long age) {
    char path[1024];
    tb_error err;
    snprintf(path, sizeof path, ART "/.replay-builds/%s", name);
    if (tb_mkdir_p(path, &err) != 0) return -1;
    struct timespec t[2];
    clock_gettime(CLOCK_REALTIME, &t[0]);
    t[0].tv_sec -= age;
    t[1] = t[0];
    if (json) {
        char file[1100];
        snprintf(file, sizeof file, "%s/build.json", path);
        write_file(file, "{}\n");
        if (utimensat(AT_FDCWD, file, t, 0) != 0) return -1;
    }
    return utimensat(AT_FDCWD, path, t, 0);
}

static int exists(const char *name) {
    char path[1024];
    snprintf(path, sizeof path, ART "/.replay-builds/%s", name);
    return access(path, F_OK) == 0;
}

// .replay-builds holds the kept build of request(0), run an hour after it was kept (so the most
// recent but one), TB_REPLAY_KEPT_MAX others kept 1..N minutes ago (the oldest without a
// build.json: timed by its directory), a dead replay's temporary entries, a live one's, and a
// young one of a dead pid; a new build is kept. Left: the new one, the one run and the N-2 most
// recent others; the live replay's entry and the young one; each removal said.
TB_TEST(keeping_a_build_removes_the_least_recently_used_beyond_the_most_and_dead_replays_leftovers) {
    char entry[1024], engine[1024], other[1024], name[64];
    TB_REQUIRE(keep_one(entry, sizeof entry) == 0, "a kept build made");
    const char *used = strrchr(entry, '/') + 1;
    char json[1100];
    snprintf(json, sizeof json, "%s/build.json", entry);
    struct timespec hour_ago[2];
    clock_gettime(CLOCK_REALTIME, &hour_ago[0]);
    hour_ago[0].tv_sec -= 3600;
    hour_ago[1] = hour_ago[0];
    TB_REQUIRE(utimensat(AT_FDCWD, json, hour_ago, 0) == 0, "aged %s", json);
    TB_REQUIRE(run(request(0), engine, sizeof engine) == 0 && strstr(said, "earlier replay kept"), "run:\n%s", said);
    for (int i = 0; i < TB_REPLAY_KEPT_MAX; i++) {
        snprintf(name, sizeof name, "00000000000000%02x", i);
        TB_REQUIRE(make_aged(name, i < TB_REPLAY_KEPT_MAX - 1, 60L * (i + 1)) == 0, "made %s", name);
    }
    pid_t child = fork();
    if (child == 0) _exit(0);
    TB_REQUIRE(child > 0 && waitpid(child, NULL, 0) == child, "a pid with no process");
    // leftovers 11 minutes old of a dead pid and a live one, and a dead pid's made just now
    // (another host's replay, say, whose pid this one cannot see)
    char dead_tmp[64], dead_old[64], live_tmp[64], young_tmp[64];
    snprintf(dead_tmp, sizeof dead_tmp, "00000000000000ff.tmp.%ld", (long)child);
    snprintf(dead_old, sizeof dead_old, "00000000000000ff.old.%ld", (long)child);
    snprintf(live_tmp, sizeof live_tmp, "00000000000000fe.tmp.%ld", (long)getppid());
    snprintf(young_tmp, sizeof young_tmp, "00000000000000fd.tmp.%ld", (long)child);
    TB_REQUIRE(make_aged(dead_tmp, 0, 660) == 0 && make_aged(dead_old, 1, 660) == 0 &&
                   make_aged(live_tmp, 0, 660) == 0 && make_aged(young_tmp, 0, 0) == 0,
               "leftovers made");

    tb_replay_build b = request(0);
    b.commit = "2223456789abcdef0123456789abcdef01234567";
    json_t *key = NULL;
    tb_error err;
    TB_REQUIRE(tb_replay_build_entry(&b, other, sizeof other, &key, &err) == 0, "%s", err.msg);
    char *text = NULL;
    int kept = keep_fake(b, other, key, "#!/bin/sh\necho new\n", &text);
    json_decref(key);
    TB_CHECK(kept == 0, "kept:\n%s", text ?: "");
    TB_CHECK(exists(strrchr(other, '/') + 1) && exists(used), "the new build and the one just run stay");
    int left = 0;
    for (int i = 0; i < TB_REPLAY_KEPT_MAX; i++) {
        snprintf(name, sizeof name, "00000000000000%02x", i);
        const int should = i < TB_REPLAY_KEPT_MAX - 2;
        left += exists(name);
        TB_CHECK(exists(name) == should, "%s, kept %d minutes ago: %s", name, i + 1, should ? "stays" : "removed");
        TB_CHECK(!should == (strstr(text ?: "", name) != NULL), "its removal said iff removed:\n%s", text ?: "");
    }
    TB_CHECK(left == TB_REPLAY_KEPT_MAX - 2, "%d of the others left", left);
    TB_CHECK(!exists(dead_tmp) && !exists(dead_old) && exists(live_tmp) && exists(young_tmp),
             "the dead replay's old leftovers removed (%d %d), the live one's and the young one kept (%d %d)",
             exists(dead_tmp), exists(dead_old), exists(live_tmp), exists(young_tmp));
    TB_CHECK(strstr(text ?: "", "which no longer runs") && strstr(text ?: "", "the least recently used"), "said:\n%s",
             text ?: "");
    free(text);
}

int main(void) {
    TB_RUN(a_kept_build_with_its_key_and_sha256_is_run_instead_of_building);
    TB_RUN(a_fresh_build_is_kept_in_place_of_the_last_and_not_keeping_is_no_failure);
    TB_RUN(rebuild_never_reuses_a_kept_build);
    TB_RUN(a_kept_binary_that_changed_is_not_run);
    TB_RUN(a_kept_build_of_another_key_is_not_run);
    TB_RUN(each_part_of_the_key_moves_the_entry);
    TB_RUN(keeping_a_build_removes_the_least_recently_used_beyond_the_most_and_dead_replays_leftovers);
    return tb_test_summary();
}
