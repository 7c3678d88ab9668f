#include "records/engine_build.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/xalloc.h"
#include "records/provenance.h"

extern char **environ;

// FNV-1a over every environment string: the build info reads the environment (the BLAS kernel
// follows OPENBLAS_CORETYPE), so a changed one asks the engine again.
static uint64_t environment_digest(void) {
    uint64_t h = 1469598103934665603ull;
    for (char **e = environ; e && *e; e++)
        for (const unsigned char *c = (const unsigned char *)*e;; c++) {
            h = (h ^ *c) * 1099511628211ull;
            if (!*c) break;
        }
    return h;
}

// The last answer, for the binary with that sha256 under that environment: a runbook records
// many runs of one engine, and asking it costs a process start that loads every library it
// links (0.05 s on the 2-core hosts; cuBLASLt is not among them, cublaslt_dl.h). One entry; the
// recorder and replay call this from their main thread only.
static struct {
    char sha256[65];
    uint64_t environment;
    json_t *info;  // without "sha256"
} last;

static json_t *ask_engine(const char *engine, tb_error *err) {
    int fds[2];
    if (pipe(fds) != 0) {
        tb_fail(err, "%s --build-info: pipe: %s", engine, strerror(errno));
        return NULL;
    }
    pid_t pid = fork();
    if (pid < 0) {
        tb_fail(err, "%s --build-info: fork: %s", engine, strerror(errno));
        close(fds[0]);
        close(fds[1]);
        return NULL;
    }
    if (pid == 0) {
        close(fds[0]);
        if (dup2(fds[1], 1) < 0) _exit(126);
        execl(engine, engine, "--build-info", (char *)NULL);
        _exit(127);
    }
    close(fds[1]);
    size_t len = 0, cap = 4096;
    char *text = tb_xmalloc(cap, "engine build info");
    ssize_t n;
    while ((n = read(fds[0], text + len, cap - len - 1)) > 0 || (n < 0 && errno == EINTR)) {
        if (n < 0) continue;
        len += (size_t)n;
        if (cap - len < 2) text = tb_xrealloc(text, cap *= 2, "engine build info");
    }
    close(fds[0]);
    text[len] = '\0';
    int status;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        tb_fail(err, "%s --build-info: exit status %d", engine,
                WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
        free(text);
        return NULL;
    }
    json_t *info = json_loads(text, 0, NULL);
    free(text);
    if (!json_is_object(info)) {
        tb_fail(err, "%s --build-info: not a JSON object", engine);
        json_decref(info);
        return NULL;
    }
    return info;
}

json_t *tb_engine_build_info(const char *engine, tb_error *err) {
    char hex[65];
    if (tb_sha256_file(engine, hex, err) != 0) return NULL;
    const uint64_t env = environment_digest();
    if (!last.info || strcmp(last.sha256, hex) != 0 || last.environment != env) {
        json_t *info = ask_engine(engine, err);
        if (!info) return NULL;
        json_decref(last.info);
        last.info = info;
        snprintf(last.sha256, sizeof last.sha256, "%s", hex);
        last.environment = env;
    }
    json_t *info = json_deep_copy(last.info);
    json_object_set_new(info, "sha256", json_string(hex));
    return info;
}

// The options a replay passes back, in this order. Those after the first four were recorded
// later: a record without them replays with CMake's defaults for them, and is told so. An empty
// CMAKE_CUDA_ARCHITECTURES (no CUDA backend) is not passed: CMake refuses an empty list.
static const struct {
    const char *name;
    int later;  // absent from records made before it was recorded
} cmake_options[] = {{"CMAKE_BUILD_TYPE", 0}, {"TB_SANITIZE", 0}, {"TB_NATIVE", 0}, {"CMAKE_C_FLAGS", 0},
                     {"TB_CUDA", 1},          {"CMAKE_CUDA_ARCHITECTURES", 1}, {"TB_WITH_MPI", 1}};

int tb_engine_build_cmake_args(const json_t *build, char *buf, size_t len, char *unrecorded, size_t unrecorded_len,
                               tb_error *err) {
    const json_t *cmake = json_object_get(build, "cmake");
    size_t used = 0, missing = 0;
    buf[0] = unrecorded[0] = '\0';
    for (size_t i = 0; i < sizeof cmake_options / sizeof *cmake_options; i++) {
        const char *name = cmake_options[i].name;
        const json_t *value = json_object_get(cmake, name);
        if (!value && cmake_options[i].later) {
            int n = snprintf(unrecorded + missing, unrecorded_len - missing, "%s%s", missing ? ", " : "", name);
            if (n > 0 && (size_t)n < unrecorded_len - missing) missing += (size_t)n;
            continue;
        }
        const char *v = json_string_value(value);
        if (!v) return tb_fail(err, "engine_build.cmake.%s: missing or not a string", name);
        if (strchr(v, '\''))
            return tb_fail(err, "engine_build.cmake.%s: '%s' holds a quote; not passed to a shell", name, v);
        if (!v[0] && !strcmp(name, "CMAKE_CUDA_ARCHITECTURES")) continue;
        int n = snprintf(buf + used, len - used, "%s-D%s='%s'", used ? " " : "", name, v);
        if (n < 0 || (size_t)n >= len - used) return tb_fail(err, "engine_build.cmake: options too long");
        used += (size_t)n;
    }
    return 0;
}

static const char *string_at(const json_t *o, const char *a, const char *b) {
    const json_t *v = json_object_get(o, a);
    if (b) v = json_object_get(v, b);
    return json_is_string(v) ? json_string_value(v) : "(unknown)";
}

void tb_engine_build_differences(const json_t *recorded, const json_t *replayed, char *buf, size_t len) {
    static const struct {
        const char *what, *a, *b;
    } fields[] = {
        {"compiler", "compiler", NULL},
        {"codegen flags", "codegen_flags", NULL},
        {"CPU ISA level", "cpu", "isa_level"},
        {"BLAS kernel", "blas", "kernel"},
        {"BLAS library", "blas", "library"},
    };
    size_t used = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < sizeof fields / sizeof *fields; i++) {
        const char *x = string_at(recorded, fields[i].a, fields[i].b), *y = string_at(replayed, fields[i].a, fields[i].b);
        if (!strcmp(x, y) || used >= len) continue;
        int n = snprintf(buf + used, len - used, "%s%s %s vs %s", used ? "; " : "", fields[i].what, x, y);
        if (n > 0) used += (size_t)n;
    }
}
