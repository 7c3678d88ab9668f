// cuda_device.c — see cuda_device.h.
#include "backend/cuda/cuda_device.h"

#include <stdio.h>
#include <string.h>

#include "config/config.h"

#ifdef TB_HAVE_CUDA_BACKEND
#include <cuda_runtime.h>

#include "backend/cuda/cublaslt_dl.h"

// A release that fails (a sticky error from an earlier fault, a driver going away) cannot fail
// the run any more; it is said on stderr rather than lost.
static void teardown_check(int rc, const char *what) {
    if (rc != 0) fprintf(stderr, "CUDA backend: teardown: %s: %s\n", what, cudaGetErrorString((cudaError_t)rc));
}
#endif

#define NOT_BUILT "this build has no CUDA backend (nvcc and cuBLASLt were not found at configure time; " \
                  "configure with the CUDA toolkit and -DTB_CUDA=ON)"

#ifdef TB_HAVE_CUDA_BACKEND

int tb_cuda_built(void) { return 1; }

int tb_cuda_device_count(char *why, size_t why_len) {
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        snprintf(why, why_len, "cudaGetDeviceCount: %s", cudaGetErrorString(e));
        (void)cudaGetLastError();
        return 0;
    }
    if (n == 0) snprintf(why, why_len, "cudaGetDeviceCount: 0 devices");
    return n;
}

int tb_cuda_check_device_flag(const tb_config *cfg, int ranks_on_host, tb_error *err) {
    char why[256] = "";
    const int n = tb_cuda_device_count(why, sizeof why);
    if (n <= 0) return tb_fail(err, "--device cuda: no GPU is visible (%s)", why);
    // NCCL takes one rank per GPU (a communicator refuses two members on one device)
    if (cfg->world_size > 1 && ranks_on_host > n) {
        if (ranks_on_host == cfg->world_size)
            return tb_fail(err, "--device cuda with --world-size %d: needs %d GPUs (one rank per GPU), %d visible",
                           cfg->world_size, cfg->world_size, n);
        return tb_fail(err, "--device cuda with --world-size %d: %d of its ranks are on this host, which needs as "
                       "many GPUs (one rank per GPU), %d visible", cfg->world_size, ranks_on_host, n);
    }
    return 0;
}

int tb_cuda_context_init(tb_cuda_context *ctx, int device, int own_workspace, tb_error *err) {
    memset(ctx, 0, sizeof *ctx);
    ctx->device = device;
    cudaError_t e = cudaSetDevice(device);
    if (e == cudaSuccess) e = cudaStreamCreateWithFlags((cudaStream_t *)&ctx->stream, cudaStreamNonBlocking);
    if (e != cudaSuccess) return tb_fail(err, "device %d: %s", device, cudaGetErrorString(e));
    const tb_cublaslt *lt = tb_cublaslt_load(err);
    if (!lt) {
        tb_cuda_context_free(ctx);
        return tb_fail_prefix(err, "device %d", device);
    }
    cublasStatus_t st = lt->Create((cublasLtHandle_t *)&ctx->lt);
    if (st != CUBLAS_STATUS_SUCCESS) {
        tb_cuda_context_free(ctx);
        return tb_fail(err, "device %d: cublasLtCreate: %s", device, lt->GetStatusString(st));
    }
    if (!own_workspace) return 0;
    e = cudaMalloc(&ctx->workspace, TB_CUDA_WORKSPACE_BYTES);
    if (e != cudaSuccess) {
        tb_cuda_context_free(ctx);
        return tb_fail(err, "device %d: cuBLASLt workspace of %zu bytes: %s", device, TB_CUDA_WORKSPACE_BYTES,
                       cudaGetErrorString(e));
    }
    ctx->workspace_bytes = TB_CUDA_WORKSPACE_BYTES;
    ctx->owns_workspace = 1;
    return 0;
}

void tb_cuda_context_free(tb_cuda_context *ctx) {
    if (ctx->gemm_plans_free) ctx->gemm_plans_free(ctx);
    if (ctx->workspace && ctx->owns_workspace) teardown_check((int)cudaFree(ctx->workspace), "cudaFree (cuBLASLt workspace)");
    if (ctx->lt) {  // a handle exists: the library was loaded
        const tb_cublaslt *lt = tb_cublaslt_get();
        cublasStatus_t st = lt->Destroy((cublasLtHandle_t)ctx->lt);
        if (st != CUBLAS_STATUS_SUCCESS)
            fprintf(stderr, "CUDA backend: teardown: cublasLtDestroy: %s (device %d)\n", lt->GetStatusString(st),
                    ctx->device);
    }
    if (ctx->stream) teardown_check((int)cudaStreamDestroy((cudaStream_t)ctx->stream), "cudaStreamDestroy");
    memset(ctx, 0, sizeof *ctx);
}

int tb_cuda_timer_init(tb_cuda_timer *t, tb_error *err) {
    memset(t, 0, sizeof *t);
    cudaError_t e = cudaEventCreate((cudaEvent_t *)&t->start);
    if (e == cudaSuccess) e = cudaEventCreate((cudaEvent_t *)&t->stop);
    if (e != cudaSuccess) {
        tb_cuda_timer_free(t);
        return tb_fail(err, "cudaEventCreate: %s", cudaGetErrorString(e));
    }
    return 0;
}
int tb_cuda_timer_start(tb_cuda_timer *t, void *stream) {
    return (int)cudaEventRecord((cudaEvent_t)t->start, (cudaStream_t)stream);
}
int tb_cuda_timer_stop(tb_cuda_timer *t, void *stream) {
    return (int)cudaEventRecord((cudaEvent_t)t->stop, (cudaStream_t)stream);
}
double tb_cuda_timer_elapsed_ms(tb_cuda_timer *t) {
    float ms = 0.0f;
    if (cudaEventSynchronize((cudaEvent_t)t->stop) != cudaSuccess) return -1.0;
    if (cudaEventElapsedTime(&ms, (cudaEvent_t)t->start, (cudaEvent_t)t->stop) != cudaSuccess) return -1.0;
    return ms;
}
void tb_cuda_timer_free(tb_cuda_timer *t) {
    if (t->start) teardown_check((int)cudaEventDestroy((cudaEvent_t)t->start), "cudaEventDestroy (timer start)");
    if (t->stop) teardown_check((int)cudaEventDestroy((cudaEvent_t)t->stop), "cudaEventDestroy (timer stop)");
    memset(t, 0, sizeof *t);
}

#else  // not built

int tb_cuda_built(void) { return 0; }
int tb_cuda_device_count(char *why, size_t why_len) {
    snprintf(why, why_len, "%s", NOT_BUILT);
    return 0;
}
int tb_cuda_check_device_flag(const tb_config *cfg, int ranks_on_host, tb_error *err) {
    (void)cfg, (void)ranks_on_host;
    return tb_fail(err, "--device cuda: %s", NOT_BUILT);
}
int tb_cuda_context_init(tb_cuda_context *ctx, int device, int own_workspace, tb_error *err) {
    (void)own_workspace;
    memset(ctx, 0, sizeof *ctx);
    ctx->device = device;
    return tb_fail(err, "%s", NOT_BUILT);
}
void tb_cuda_context_free(tb_cuda_context *ctx) { memset(ctx, 0, sizeof *ctx); }
int tb_cuda_timer_init(tb_cuda_timer *t, tb_error *err) {
    memset(t, 0, sizeof *t);
    return tb_fail(err, "%s", NOT_BUILT);
}
int tb_cuda_timer_start(tb_cuda_timer *t, void *stream) { return (void)t, (void)stream, -1; }
int tb_cuda_timer_stop(tb_cuda_timer *t, void *stream) { return (void)t, (void)stream, -1; }
double tb_cuda_timer_elapsed_ms(tb_cuda_timer *t) { return (void)t, -1.0; }
void tb_cuda_timer_free(tb_cuda_timer *t) { memset(t, 0, sizeof *t); }

#endif
