// cublaslt_dl.h — cuBLASLt, loaded when the process makes its first device context
// (cuda_device.c), not when the engine starts. libcublasLt.so registers its kernels (over
// 500 MB of them in CUDA 13) as it loads: linked, it cost every engine process 0.3-0.4 s
// before main, CPU runs included. The functions the backend calls, as pointers of
// cublasLt.h's own types. Compiled always: without TB_HAVE_CUDA_BACKEND, only
// tb_cublaslt_loaded (0).
#ifndef TB_BACKEND_CUDA_CUBLASLT_DL_H
#define TB_BACKEND_CUDA_CUBLASLT_DL_H

#include "core/error.h"

#ifdef TB_HAVE_CUDA_BACKEND
#include <cublasLt.h>

typedef struct tb_cublaslt {
    __typeof__(cublasLtCreate) *Create;
    __typeof__(cublasLtDestroy) *Destroy;
    __typeof__(cublasLtGetStatusString) *GetStatusString;
    __typeof__(cublasLtMatmul) *Matmul;
    __typeof__(cublasLtMatmulAlgoGetHeuristic) *MatmulAlgoGetHeuristic;
    __typeof__(cublasLtMatmulDescCreate) *MatmulDescCreate;
    __typeof__(cublasLtMatmulDescDestroy) *MatmulDescDestroy;
    __typeof__(cublasLtMatmulDescSetAttribute) *MatmulDescSetAttribute;
    __typeof__(cublasLtMatmulPreferenceCreate) *MatmulPreferenceCreate;
    __typeof__(cublasLtMatmulPreferenceDestroy) *MatmulPreferenceDestroy;
    __typeof__(cublasLtMatmulPreferenceSetAttribute) *MatmulPreferenceSetAttribute;
    __typeof__(cublasLtMatrixLayoutCreate) *MatrixLayoutCreate;
    __typeof__(cublasLtMatrixLayoutDestroy) *MatrixLayoutDestroy;
} tb_cublaslt;

// Loads the library once per process (any thread; later calls return the same answer): the
// toolkit's soname (libcublasLt.so.<CUBLAS_VER_MAJOR>) through the loader's search, then the
// file CMake found (TB_CUBLASLT_PATH). NULL with err naming the library, the loader's reason
// or the missing symbol.
const tb_cublaslt *tb_cublaslt_load(tb_error *err);
// The same table, for the calls after a device context exists (tb_cuda_context_init loaded
// it); NULL when it cannot be loaded.
const tb_cublaslt *tb_cublaslt_get(void);
#endif

// 1 when libcublasLt is loaded in this process (asked of the loader, RTLD_NOLOAD).
int tb_cublaslt_loaded(void);

#endif
