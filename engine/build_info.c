#include "build_info.h"

#include <stdio.h>
#include <string.h>

#include "backend/cpu/kernels.h"

// Set by CMakeLists.txt for this file; a build by other means says so.
#ifndef TB_BUILD_TYPE
#define TB_BUILD_TYPE "unknown"
#define TB_BUILD_SANITIZE ""
#define TB_BUILD_NATIVE "unknown"
#define TB_BUILD_C_FLAGS ""
#define TB_BUILD_CODEGEN_FLAGS "unknown"
#define TB_BUILD_CUDA "AUTO"
#define TB_BUILD_CUDA_ARCHITECTURES ""
#define TB_BUILD_WITH_MPI "ON"
#endif

static json_t *compiler(void) {
#if defined(__clang__)
    return json_sprintf("clang %d.%d.%d", __clang_major__, __clang_minor__, __clang_patchlevel__);
#elif defined(__GNUC__)
    return json_sprintf("gcc %s", __VERSION__);
#else
    return json_string("unknown");
#endif
}

// The CPU's model name from /proc/cpuinfo, or NULL.
static json_t *cpu_model(void) {
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return json_null();
    char line[512];
    json_t *model = json_null();
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, "model name", 10) != 0) continue;
        const char *colon = strchr(line, ':');
        if (!colon) break;
        colon++;
        while (*colon == ' ' || *colon == '\t') colon++;
        line[strcspn(line, "\n")] = '\0';
        json_decref(model);
        model = json_string(colon);
        break;
    }
    fclose(f);
    return model ? model : json_null();
}

static json_t *cpu_json(void) {
    json_t *features = json_array();
    const char *level = "unknown";
#if defined(__x86_64__) && defined(__GNUC__)
    __builtin_cpu_init();
    // __builtin_cpu_supports takes a literal: one table row per feature
#define FEATURE(name) {name, __builtin_cpu_supports(name) != 0}
    const struct {
        const char *name;
        int have;
    } f[] = {FEATURE("sse4.2"),  FEATURE("popcnt"),   FEATURE("avx"),      FEATURE("avx2"),
             FEATURE("fma"),     FEATURE("bmi2"),     FEATURE("avx512f"),  FEATURE("avx512bw"),
             FEATURE("avx512cd"), FEATURE("avx512dq"), FEATURE("avx512vl")};
#undef FEATURE
    enum { SSE42, POPCNT, AVX, AVX2, FMA, BMI2, AVX512F, AVX512BW, AVX512CD, AVX512DQ, AVX512VL, NFEATURES };
    _Static_assert(sizeof f / sizeof *f == NFEATURES, "one row per feature");
    for (int i = 0; i < NFEATURES; i++)
        if (f[i].have) json_array_append_new(features, json_string(f[i].name));
    int v2 = f[SSE42].have && f[POPCNT].have;
    int v3 = v2 && f[AVX].have && f[AVX2].have && f[FMA].have && f[BMI2].have;
    int v4 = v3 && f[AVX512F].have && f[AVX512BW].have && f[AVX512CD].have && f[AVX512DQ].have && f[AVX512VL].have;
    level = v4 ? "x86-64-v4" : v3 ? "x86-64-v3" : v2 ? "x86-64-v2" : "x86-64";
#endif
    return json_pack("{s:o, s:s, s:o}", "model", cpu_model(), "isa_level", level, "features", features);
}

// The CMake options a replay passes back (build_info.h). CMake hands the CUDA architectures
// over space-separated: the record holds them as the CMake list they were.
static json_t *cmake_json(void) {
    char architectures[] = TB_BUILD_CUDA_ARCHITECTURES;
    for (char *c = architectures; *c; c++)
        if (*c == ' ') *c = ';';
    return json_pack("{s:s, s:s, s:s, s:s, s:s, s:s, s:s}", "CMAKE_BUILD_TYPE", TB_BUILD_TYPE, "TB_SANITIZE",
                     TB_BUILD_SANITIZE, "TB_NATIVE", TB_BUILD_NATIVE, "CMAKE_C_FLAGS", TB_BUILD_C_FLAGS, "TB_CUDA",
                     TB_BUILD_CUDA, "CMAKE_CUDA_ARCHITECTURES", architectures, "TB_WITH_MPI", TB_BUILD_WITH_MPI);
}

json_t *build_info_json(void) {
    return json_pack("{s:o, s:o, s:s, s:{s:s, s:s}, s:o}", "compiler", compiler(), "cmake", cmake_json(),
                     "codegen_flags", TB_BUILD_CODEGEN_FLAGS, "blas", "library", cpu_blas_config(), "kernel",
                     cpu_blas_corename(), "cpu", cpu_json());
}
