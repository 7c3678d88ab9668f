// cuda_backend.h — the CUDA table of the kernel dispatch (backend/backend.h): the cuda_*
// launchers of cuda_kernels.h and the cuBLASLt GEMMs of gemm.h, on the device context the
// calling thread bound (a rank's: its GPU, compute stream, cuBLASLt handle). Compiled always:
// without TB_HAVE_CUDA_BACKEND there is no table (tb_backend_cuda returns NULL).
//
// Precision (docs/ARCHITECTURE.md, "CUDA backend"): fp32 everywhere, or with bf16 (fp16) the
// GEMMs read bf16 (fp16) copies of their operands (weights, activations, gradients; round to
// nearest even) and accumulate and write fp32: master weights, main_grad, Adam state and every
// stored activation stay fp32. Under fp16 an operand beyond fp16's range becomes ±inf, which
// the loss scaler (optimizer/grad_scaler.h) sees in the gradient norm.
//
// A launch or cuBLASLt call that fails cannot be returned through the model's void kernels:
// it calls the bound fail function (which must not return: the engine's unwinds the rank,
// parallel_state_rank_fail) with the call's name and the CUDA error.
#ifndef TB_BACKEND_CUDA_BACKEND_H
#define TB_BACKEND_CUDA_BACKEND_H

#include "backend/backend.h"
#include "backend/cuda/cuda_device.h"
#include "runtime/memory.h"

typedef void (*tb_cuda_fail_fn)(void *arg, const char *msg);

// The CUDA table, or NULL when this build has no CUDA backend.
const tb_backend *tb_backend_cuda(void);

typedef enum tb_cuda_precision { TB_CUDA_FP32, TB_CUDA_BF16_GEMMS, TB_CUDA_FP16_GEMMS } tb_cuda_precision;

// Binds the calling thread's device context: the table's work goes on ctx's stream; the 16-bit
// copies of the GEMMs' operands come from `mem` (category workspace). NULL ctx unbinds. A second
// thread of the rank (DDP's communication thread) binds the same context through the table's
// bind_side_thread (backend.h): the rank's device current, no allocator (elementwise kernels
// only), its work on the stream set_stream names, and its failures to its own fail function.
void tb_cuda_backend_bind(tb_cuda_context *ctx, tb_allocator *mem, tb_cuda_precision precision, tb_cuda_fail_fn fail,
                          void *fail_arg);

// cudaMalloc / cudaFree / cudaMemsetAsync on ctx's device and stream, for the tagged
// allocator (runtime/memory.h, tb_allocator_set_device). ctx must outlive the allocator's blocks.
void tb_cuda_mem_device(tb_mem_device *d, tb_cuda_context *ctx);

#endif
