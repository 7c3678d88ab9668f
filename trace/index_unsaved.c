// index_unsaved.c — the in-memory files a unit is parsed with (index_unsaved.h).
#include "index_unsaved.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "strmap.h"

// Stand-in headers, as in-memory files under IX_STUB_DIR (last on the include path, so a
// real header wins):
//   texture_fetch_functions.h  clang 19's CUDA wrapper (__clang_cuda_runtime_wrapper.h)
//                              includes it; CUDA 13 removed it (texture references).
//   omp.h                      -fopenmp units when LLVM's libomp headers are not installed
//                              (GCC's omp.h uses GCC-only attributes, and putting GCC's include
//                              directory on the path would bring in its stdatomic.h): the
//                              OpenMP runtime API, declared.
#define STUB_TEXTURE_FETCH                                                                          \
    "// tracebook: CUDA 13 removed texture_fetch_functions.h (texture references); clang 19's CUDA\n" \
    "// wrapper still includes it. Texture objects (texture_indirect_functions.h) are unaffected.\n"
#define STUB_OMP                                                                                          \
    "// tracebook: the OpenMP runtime API, for indexing only.\n"                                              \
    "#ifndef TRACEBOOK_OMP_H\n#define TRACEBOOK_OMP_H\n#ifdef __cplusplus\nextern \"C\" {\n#endif\n"              \
    "typedef struct { unsigned char _x[8]; } omp_lock_t;\n"                                                 \
    "typedef struct { unsigned char _x[16]; } omp_nest_lock_t;\n"                                           \
    "typedef enum omp_sched_t { omp_sched_static = 1, omp_sched_dynamic = 2, omp_sched_guided = 3,\n"       \
    "  omp_sched_auto = 4 } omp_sched_t;\n"                                                                 \
    "typedef enum omp_proc_bind_t { omp_proc_bind_false, omp_proc_bind_true, omp_proc_bind_master,\n"       \
    "  omp_proc_bind_close, omp_proc_bind_spread } omp_proc_bind_t;\n"                                      \
    "void omp_set_num_threads(int); int omp_get_num_threads(void); int omp_get_max_threads(void);\n"      \
    "int omp_get_thread_num(void); int omp_get_num_procs(void); int omp_in_parallel(void);\n"             \
    "void omp_set_dynamic(int); int omp_get_dynamic(void); void omp_set_nested(int);\n"                   \
    "int omp_get_nested(void); void omp_set_schedule(omp_sched_t, int);\n"                                \
    "void omp_get_schedule(omp_sched_t *, int *); int omp_get_thread_limit(void);\n"                      \
    "void omp_set_max_active_levels(int); int omp_get_max_active_levels(void); int omp_get_level(void);\n" \
    "int omp_get_ancestor_thread_num(int); int omp_get_team_size(int); int omp_get_active_level(void);\n" \
    "int omp_in_final(void); omp_proc_bind_t omp_get_proc_bind(void); int omp_get_num_places(void);\n"    \
    "int omp_get_num_devices(void); int omp_get_device_num(void); int omp_get_num_teams(void);\n"         \
    "int omp_get_team_num(void); int omp_is_initial_device(void); int omp_get_initial_device(void);\n"    \
    "int omp_get_default_device(void); void omp_set_default_device(int);\n"                               \
    "void omp_init_lock(omp_lock_t *); void omp_destroy_lock(omp_lock_t *); void omp_set_lock(omp_lock_t *);\n" \
    "void omp_unset_lock(omp_lock_t *); int omp_test_lock(omp_lock_t *);\n"                               \
    "void omp_init_nest_lock(omp_nest_lock_t *); void omp_destroy_nest_lock(omp_nest_lock_t *);\n"        \
    "void omp_set_nest_lock(omp_nest_lock_t *); void omp_unset_nest_lock(omp_nest_lock_t *);\n"           \
    "int omp_test_nest_lock(omp_nest_lock_t *); double omp_get_wtime(void); double omp_get_wtick(void);\n" \
    "#ifdef __cplusplus\n}\n#endif\n#endif\n"
#define STUB_CUDA_DEFINES                                                                                  \
    "// tracebook: for indexing only, included after clang 19's CUDA wrapper (-include).\n"                   \
    "// nvcc gives __CUDACC__ a value; the wrapper leaves it defined empty, so `#if __CUDACC__` (NCCL's\n"     \
    "// nccl_device headers: utility.h, coop.h ...) is an error.\n"                                            \
    "#undef __CUDACC__\n#define __CUDACC__ 1\n"                                                                \
    "// The wrapper keeps CUDA's sm_32_intrinsics.h out and supplies __ldg only; the other cache-hinted\n"    \
    "// loads and stores (nccl_device's gin_proxy.h calls __stwt), declared for every type.\n"                 \
    "#ifdef __cplusplus\n"                                                                                      \
    "template <typename T> __device__ T __ldcg(const T *);\ntemplate <typename T> __device__ T __ldca(const T *);\n" \
    "template <typename T> __device__ T __ldcs(const T *);\ntemplate <typename T> __device__ T __ldlu(const T *);\n" \
    "template <typename T> __device__ T __ldcv(const T *);\ntemplate <typename T> __device__ void __stwb(T *, T);\n" \
    "template <typename T> __device__ void __stcg(T *, T);\ntemplate <typename T> __device__ void __stcs(T *, T);\n" \
    "template <typename T> __device__ void __stwt(T *, T);\n"                                                  \
    STUB_CUDA_HOST_MINMAX                                                                                      \
    "#endif\n"
// nvcc's crt/math_functions.hpp defines min and max for every integer and floating pair it
// lists as `static inline __host__ __device__`; clang's wrapper poisons __host__ while it
// includes that header and keeps only device-side ones (__clang_cuda_math.h), so host code
// nvcc compiles — min(m, 4), max(n, (size_t)m): nccl-tests' common.cu and util.cu — finds no
// overload. The host side of nvcc's set, declared (the bodies do not matter to the index).
#define STUB_CUDA_MINMAX_PAIR(R, A, B)                                                                     \
    "static inline __host__ " R " min(const " A " a, const " B " b) { return a < b ? a : b; }\n"           \
    "static inline __host__ " R " max(const " A " a, const " B " b) { return a > b ? a : b; }\n"
#define STUB_CUDA_HOST_MINMAX                                                                              \
    STUB_CUDA_MINMAX_PAIR("int", "int", "int")                                                             \
    STUB_CUDA_MINMAX_PAIR("unsigned int", "unsigned int", "unsigned int")                                  \
    STUB_CUDA_MINMAX_PAIR("unsigned int", "int", "unsigned int")                                           \
    STUB_CUDA_MINMAX_PAIR("unsigned int", "unsigned int", "int")                                           \
    STUB_CUDA_MINMAX_PAIR("long int", "long int", "long int")                                              \
    STUB_CUDA_MINMAX_PAIR("unsigned long int", "unsigned long int", "unsigned long int")                   \
    STUB_CUDA_MINMAX_PAIR("unsigned long int", "long int", "unsigned long int")                            \
    STUB_CUDA_MINMAX_PAIR("unsigned long int", "unsigned long int", "long int")                            \
    STUB_CUDA_MINMAX_PAIR("long long int", "long long int", "long long int")                               \
    STUB_CUDA_MINMAX_PAIR("unsigned long long int", "unsigned long long int", "unsigned long long int")    \
    STUB_CUDA_MINMAX_PAIR("unsigned long long int", "long long int", "unsigned long long int")             \
    STUB_CUDA_MINMAX_PAIR("unsigned long long int", "unsigned long long int", "long long int")             \
    STUB_CUDA_MINMAX_PAIR("float", "float", "float")                                                       \
    STUB_CUDA_MINMAX_PAIR("double", "double", "double")                                                    \
    STUB_CUDA_MINMAX_PAIR("double", "float", "double")                                                     \
    STUB_CUDA_MINMAX_PAIR("double", "double", "float")
// Toolkit headers that clang 19 rejects where nvcc's front end accepts them, patched in memory
// for CUDA units: the real file is read and the fix applied only where its text is found, so
// another version of the header is parsed as it is. Each is looked for under the unit's -I and
// -isystem directories and its --cuda-path's include directory.
//   nccl_device/utility.h (CUDA 13.0's NCCL 2.28): Optional's delegating constructor names
//   IntSeqUpTo<...>::Type, a dependent type, without `typename`; nvcc (EDG) infers it, clang
//   errors where a Present<...> constructs an Optional (ncclBarrierSession over a GIN
//   context: nccl-tests' alltoall.cu), and what that unit calls may go missing.
typedef struct header_fix {
    const char *rel, *find, *replace;
} header_fix;
static const header_fix header_fixes[] = {
    {"nccl_device/utility.h", "Optional(args, IntSeqUpTo<sizeof...(Arg), 0>::Type())",
     "Optional(args, typename IntSeqUpTo<sizeof...(Arg), 0>::Type())"},
};
#define NFIXES (sizeof header_fixes / sizeof *header_fixes)

// The patched headers, read once per process (any thread): path -> contents, NULL when the
// file is absent or its text is not the one fixed.
static pthread_mutex_t fixed_lock = PTHREAD_MUTEX_INITIALIZER;
static tb_strmap fixed_map;  // path -> index in fixed_texts
static tb_vec fixed_texts;   // of char * (malloc'd, process lifetime)

static const char *fixed_header(const char *path, const header_fix *fix) {
    pthread_mutex_lock(&fixed_lock);
    if (!fixed_texts.what) tb_vec_init(&fixed_texts, sizeof(char *), "patched headers");
    int *i = tb_strmap_get(&fixed_map, path);
    if (i) {
        const char *t = TB_VEC_AT(&fixed_texts, char *, *i);
        pthread_mutex_unlock(&fixed_lock);
        return t;
    }
    char *text = NULL;
    FILE *f = fopen(path, "rb");
    if (f) {
        tb_buf b = {0};
        char buf[1 << 14];
        size_t n;
        while ((n = fread(buf, 1, sizeof buf, f)) > 0) tb_buf_add(&b, buf, n);
        fclose(f);
        const char *at = b.s ? strstr(b.s, fix->find) : NULL;
        if (at) {
            tb_buf out = {0};
            tb_buf_add(&out, b.s, (size_t)(at - b.s));
            tb_buf_printf(&out, "%s%s", fix->replace, at + strlen(fix->find));
            text = out.s;
        }
        tb_buf_free(&b);
    }
    *(char **)tb_vec_push(&fixed_texts) = text;
    tb_strmap_put(&fixed_map, path, (int)fixed_texts.len - 1);
    pthread_mutex_unlock(&fixed_lock);
    return text;
}

static struct CXUnsavedFile stubs[] = {
    {IX_STUB_DIR "/tracebook_cuda.h", STUB_CUDA_DEFINES, sizeof STUB_CUDA_DEFINES - 1},
    {IX_STUB_DIR "/texture_fetch_functions.h", STUB_TEXTURE_FETCH, sizeof STUB_TEXTURE_FETCH - 1},
    {IX_STUB_DIR "/omp.h", STUB_OMP, sizeof STUB_OMP - 1},
};
#define NSTUBS (sizeof stubs / sizeof *stubs)

unsigned ix_unit_unsaved(const ix_tu *tu, struct CXUnsavedFile *out, tb_pool *p) {
    _Static_assert(NSTUBS + NFIXES <= IX_UNSAVED_MAX, "IX_UNSAVED_MAX holds every in-memory file");
    memcpy(out, stubs, sizeof stubs);
    unsigned n = (unsigned)NSTUBS;
    if (!tu->cuda) return n;
    for (size_t k = 0; k < NFIXES; k++) {
        const header_fix *fix = &header_fixes[k];
        for (int i = 0; i < tu->nargs; i++) {
            const char *a = tu->args[i], *dir = NULL;
            if (!strncmp(a, "-I", 2)) dir = a[2] ? a + 2 : (i + 1 < tu->nargs ? tu->args[i + 1] : NULL);
            else if (!strcmp(a, "-isystem")) dir = i + 1 < tu->nargs ? tu->args[i + 1] : NULL;
            else if (!strncmp(a, "--cuda-path=", 12)) dir = tb_pool_printf(p, "%s/include", a + 12);
            if (!dir || !*dir) continue;
            const char *path = tb_pool_printf(p, "%s/%s", dir, fix->rel);
            if (access(path, R_OK) != 0) continue;
            const char *text = fixed_header(path, fix);
            if (text) out[n++] = (struct CXUnsavedFile){path, text, strlen(text)};
            break;  // the first on the path is the one the unit includes
        }
    }
    return n;
}
