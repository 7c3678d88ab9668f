// cublaslt_dl.c — see cublaslt_dl.h.
#include "backend/cuda/cublaslt_dl.h"

#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#ifdef TB_HAVE_CUDA_BACKEND
#include <pthread.h>

#define STR_(x) #x
#define STR(x) STR_(x)
#define SONAME "libcublasLt.so." STR(CUBLAS_VER_MAJOR)

static tb_cublaslt table;
static const char *opened;  // the name dlopen took
static int loaded;
static char failure[1024];
static pthread_once_t once = PTHREAD_ONCE_INIT;

// dlsym's object pointer into a function pointer field (POSIX: dlsym's result may be so used)
static int symbol(void *lib, const char *name, void *field) {
    void *p = dlsym(lib, name);
    if (!p) {
        snprintf(failure, sizeof failure, "cuBLASLt (%s) has no %s", opened, name);
        return -1;
    }
    memcpy(field, &p, sizeof p);
    return 0;
}

static void load(void) {
    opened = SONAME;
    void *lib = dlopen(SONAME, RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        char first[512];
        snprintf(first, sizeof first, "%s", dlerror());
#ifdef TB_CUBLASLT_PATH
        opened = TB_CUBLASLT_PATH;
        lib = dlopen(TB_CUBLASLT_PATH, RTLD_NOW | RTLD_LOCAL);
        if (!lib)
            snprintf(failure, sizeof failure, "cannot load cuBLASLt: %s; %s", first, dlerror());
#else
        snprintf(failure, sizeof failure, "cannot load cuBLASLt: %s", first);
#endif
        if (!lib) return;
    }
#define SYM(field) symbol(lib, "cublasLt" #field, &table.field)
    if (SYM(Create) || SYM(Destroy) || SYM(GetStatusString) || SYM(Matmul) || SYM(MatmulAlgoGetHeuristic) ||
        SYM(MatmulDescCreate) || SYM(MatmulDescDestroy) || SYM(MatmulDescSetAttribute) ||
        SYM(MatmulPreferenceCreate) || SYM(MatmulPreferenceDestroy) || SYM(MatmulPreferenceSetAttribute) ||
        SYM(MatrixLayoutCreate) || SYM(MatrixLayoutDestroy))
        return;  // the library stays loaded: a process does not unload what it may have half used
#undef SYM
    loaded = 1;
}

const tb_cublaslt *tb_cublaslt_load(tb_error *err) {
    pthread_once(&once, load);
    if (!loaded) {
        tb_fail(err, "%s", failure);
        return NULL;
    }
    return &table;
}

const tb_cublaslt *tb_cublaslt_get(void) {
    pthread_once(&once, load);
    return loaded ? &table : NULL;
}
#endif

int tb_cublaslt_loaded(void) {
#ifdef TB_HAVE_CUDA_BACKEND
    void *lib = dlopen(SONAME, RTLD_NOW | RTLD_NOLOAD);
#ifdef TB_CUBLASLT_PATH
    if (!lib) lib = dlopen(TB_CUBLASLT_PATH, RTLD_NOW | RTLD_NOLOAD);
#endif
    if (!lib) return 0;
    dlclose(lib);  // NOLOAD took a reference
    return 1;
#else
    return 0;
#endif
}
