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
static const char *opened;  // the name dlopen took (load's)
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

// The library by the toolkit's soname, then by the file CMake found; `mode` RTLD_NOW or, to ask
// whether it is loaded, RTLD_NOW | RTLD_NOLOAD; *name the one it took. NULL with why the loader
// said (why may be NULL).
static void *open_library(int mode, const char **name, char *why, size_t len) {
    *name = SONAME;
    void *lib = dlopen(SONAME, mode | RTLD_LOCAL);
    if (lib) return lib;
    if (why) snprintf(why, len, "%s", dlerror());
#ifdef TB_CUBLASLT_PATH
    *name = TB_CUBLASLT_PATH;
    lib = dlopen(TB_CUBLASLT_PATH, mode | RTLD_LOCAL);
    if (!lib && why) {
        size_t n = strlen(why);
        snprintf(why + n, len - n, "; %s", dlerror());
    }
#endif
    return lib;
}

static void load(void) {
    char why[900];
    void *lib = open_library(RTLD_NOW, &opened, why, sizeof why);
    if (!lib) {
        snprintf(failure, sizeof failure, "cannot load cuBLASLt: %s", why);
        return;
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
    const char *name;
    void *lib = open_library(RTLD_NOW | RTLD_NOLOAD, &name, NULL, 0);
    if (!lib) return 0;
    dlclose(lib);  // NOLOAD took a reference
    return 1;
#else
    return 0;
#endif
}
