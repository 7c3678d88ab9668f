// cuda_device.h — the CUDA backend's host side: whether it was built, the GPUs this process
// sees, the `--device` flag's check, a rank's device context (its device, compute stream,
// cuBLASLt handle and workspace) and CUDA-event timing. Compiled always: without
// TB_HAVE_CUDA_BACKEND every call reports that the backend was not built.
#ifndef TB_BACKEND_CUDA_DEVICE_H
#define TB_BACKEND_CUDA_DEVICE_H

#include <stddef.h>

#include "core/error.h"

struct tb_config;

// 1 when this build has the CUDA backend (nvcc and cuBLASLt found at configure time)
int tb_cuda_built(void);
// The GPUs visible to this process (0 with `why` set when none or not built).
int tb_cuda_device_count(char *why, size_t why_len);

// `--device cuda`: 0 when training can run on the GPUs of this machine, ranks_on_host of the
// run's ranks being on it (the whole world without mpirun); otherwise a message that names
// the flag and why (not built, no GPU, fewer GPUs than the host's ranks), non-zero. What the
// CUDA backend does not run yet is refused by config_validate (config.c).
int tb_cuda_check_device_flag(const struct tb_config *cfg, int ranks_on_host, tb_error *err);

// One rank's device: what every kernel launch and GEMM of the rank runs on.
typedef struct tb_cuda_context {
    int device;
    void *stream;          // cudaStream_t (compute)
    void *lt;              // cublasLtHandle_t
    void *workspace;       // cuBLASLt workspace (device), TB_CUDA_WORKSPACE_BYTES
    size_t workspace_bytes;
    int owns_workspace;    // 1: cudaMalloc'd by tb_cuda_context_init (freed by _free)
    void *gemm_plans;      // cuBLASLt descriptors and algorithm per GEMM shape (gemm.c)
    void (*gemm_plans_free)(struct tb_cuda_context *ctx);  // set by gemm.c with its first plan
} tb_cuda_context;

#define TB_CUDA_WORKSPACE_BYTES ((size_t)32 << 20)  // llm.c's cuBLASLt workspace

// The device current for the calling thread, its compute stream and cuBLASLt handle. With
// own_workspace the cuBLASLt workspace is cudaMalloc'd here (tools, tests); without, the
// caller gives it one (training: a block of the rank's allocator, category workspace, so the
// memory report, the cap and the OOM report count it) in workspace/workspace_bytes before
// the first GEMM, and frees it.
int tb_cuda_context_init(tb_cuda_context *ctx, int device, int own_workspace, tb_error *err);
void tb_cuda_context_free(tb_cuda_context *ctx);

// CUDA-event timing of work on a stream: start → stop, elapsed in ms after a sync.
typedef struct tb_cuda_timer {
    void *start, *stop;    // cudaEvent_t
} tb_cuda_timer;
int tb_cuda_timer_init(tb_cuda_timer *t, tb_error *err);
// record the start / stop event on the stream: 0 or the cudaError_t
int tb_cuda_timer_start(tb_cuda_timer *t, void *stream);
int tb_cuda_timer_stop(tb_cuda_timer *t, void *stream);
// waits for stop; returns the milliseconds between the two events (negative on error)
double tb_cuda_timer_elapsed_ms(tb_cuda_timer *t);
void tb_cuda_timer_free(tb_cuda_timer *t);

#endif
