// test_engine_build.c — tb_engine_build_info (experiments/records/engine_build.h) asks an
// engine binary once per binary and environment: the same binary (by sha256) under the same
// environment is answered from the last answer, a changed environment or a changed binary asks
// again, and every answer carries the binary's sha256. A fake engine, a shell script, counts
// how often it is asked. tb_engine_build_cmake_args passes a record's CMake options back: the
// parts as the build resolved them, and a record from before they were recorded is told so.
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "records/engine_build.h"
#include "tb_shell.h"
#include "tb_test.h"

static char engine[512], counter[512];

static void write_engine(const char *compiler) {
    char text[1024];
    snprintf(text, sizeof text, "#!/bin/sh\necho asked >> '%s'\necho '{\"compiler\": \"%s\"}'\n", counter, compiler);
    TB_REQUIRE(tb_write_text(engine, text) == 0 && chmod(engine, 0755) == 0, "cannot write %s", engine);
}

static int times_asked(void) {
    char *text = tb_slurp(counter);  // one "asked\n" a question
    int n = 0;
    for (const char *c = text; c && *c; c++) n += *c == '\n';
    free(text);
    return n;
}

// The answer's compiler, and whether it names a sha256 of 64 hex digits.
static const char *answer(json_t **info) {
    tb_error err;
    *info = tb_engine_build_info(engine, &err);
    TB_CHECK(*info, "tb_engine_build_info: %s", err.msg);
    if (!*info) return NULL;
    const char *sha = json_string_value(json_object_get(*info, "sha256"));
    TB_CHECK(sha && strlen(sha) == 64, "no sha256 in the answer");
    return json_string_value(json_object_get(*info, "compiler"));
}

TB_TEST(the_engine_is_asked_once_per_binary_and_environment) {
    tb_tmp_path(engine, sizeof engine, "engine_build_fake_engine.sh");
    tb_tmp_path(counter, sizeof counter, "engine_build_counter.txt");
    remove(counter);
    write_engine("fake 1");
    json_t *a, *b, *c, *d;
    TB_CHECK(!strcmp(answer(&a) ?: "", "fake 1") && times_asked() == 1, "first: asked %d", times_asked());
    TB_CHECK(!strcmp(answer(&b) ?: "", "fake 1") && times_asked() == 1, "same binary and environment: asked %d",
             times_asked());
    TB_CHECK(json_equal(a, b), "the kept answer is the answer");
    setenv("TB_TEST_ENGINE_BUILD", "changed", 1);
    TB_CHECK(!strcmp(answer(&c) ?: "", "fake 1") && times_asked() == 2, "a changed environment: asked %d",
             times_asked());
    write_engine("fake 2");
    TB_CHECK(!strcmp(answer(&d) ?: "", "fake 2") && times_asked() == 3, "a changed binary: asked %d", times_asked());
    TB_CHECK(strcmp(json_string_value(json_object_get(c, "sha256")), json_string_value(json_object_get(d, "sha256"))),
             "a changed binary has another sha256");
    unsetenv("TB_TEST_ENGINE_BUILD");
    json_decref(a);
    json_decref(b);
    json_decref(c);
    json_decref(d);
    remove(engine);
    remove(counter);
}

static const char *const older = "{\"cmake\": {\"CMAKE_BUILD_TYPE\": \"Debug\", \"TB_SANITIZE\": \"address\","
                                 " \"TB_NATIVE\": \"ON\", \"CMAKE_C_FLAGS\": \"\"";

static int cmake_args(const char *build_text, char *args, size_t len, char *unrecorded, tb_error *err) {
    json_t *build = json_loads(build_text, 0, NULL);
    TB_CHECK(build, "fixture JSON: %s", build_text);
    if (!build) return tb_fail(err, "fixture JSON");
    int rc = tb_engine_build_cmake_args(build, args, len, unrecorded, 256, err);
    json_decref(build);
    return rc;
}

TB_TEST(a_replay_builds_the_parts_the_recorded_build_had) {
    char text[1024], args[2048], unrecorded[256];
    tb_error err;
    snprintf(text, sizeof text,
             "%s, \"TB_CUDA\": \"OFF\", \"CMAKE_CUDA_ARCHITECTURES\": \"\", \"TB_WITH_MPI\": \"ON\"}}", older);
    TB_REQUIRE(cmake_args(text, args, sizeof args, unrecorded, &err) == 0, "%s", err.msg);
    TB_CHECK(!strcmp(args, "-DCMAKE_BUILD_TYPE='Debug' -DTB_SANITIZE='address' -DTB_NATIVE='ON' -DCMAKE_C_FLAGS='' "
                           "-DTB_CUDA='OFF' -DTB_WITH_MPI='ON'"),
             "no CUDA backend, no (empty) architectures: %s", args);
    TB_CHECK(!unrecorded[0], "nothing unrecorded: '%s'", unrecorded);
    snprintf(text, sizeof text, "%s, \"TB_CUDA\": \"ON\", \"CMAKE_CUDA_ARCHITECTURES\": \"80-real;90\", "
             "\"TB_WITH_MPI\": \"OFF\"}}", older);
    TB_REQUIRE(cmake_args(text, args, sizeof args, unrecorded, &err) == 0, "%s", err.msg);
    TB_CHECK(strstr(args, " -DTB_CUDA='ON' -DCMAKE_CUDA_ARCHITECTURES='80-real;90' -DTB_WITH_MPI='OFF'"),
             "the backend with its architectures: %s", args);
    snprintf(text, sizeof text, "%s}}", older);
    TB_REQUIRE(cmake_args(text, args, sizeof args, unrecorded, &err) == 0, "%s", err.msg);
    TB_CHECK(!strstr(args, "TB_CUDA") && !strcmp(unrecorded, "TB_CUDA, CMAKE_CUDA_ARCHITECTURES, TB_WITH_MPI"),
             "an older record: CMake's defaults, named: '%s' / '%s'", args, unrecorded);
    snprintf(text, sizeof text, "%s, \"TB_CUDA\": 1}}", older);
    TB_CHECK(cmake_args(text, args, sizeof args, unrecorded, &err) != 0 &&
                 strstr(err.msg, "engine_build.cmake.TB_CUDA: missing or not a string"),
             "a recorded option that is not a string: %s", err.msg);
    snprintf(text, sizeof text, "{\"cmake\": {\"CMAKE_BUILD_TYPE\": \"Debug\"}}");
    TB_CHECK(cmake_args(text, args, sizeof args, unrecorded, &err) != 0 &&
                 strstr(err.msg, "engine_build.cmake.TB_SANITIZE: missing"),
             "an option every record has, missing: %s", err.msg);
}

int main(void) {
    TB_RUN(the_engine_is_asked_once_per_binary_and_environment);
    TB_RUN(a_replay_builds_the_parts_the_recorded_build_had);
    return tb_test_summary();
}
