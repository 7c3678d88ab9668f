// gemm.h — the linear layer's GEMMs on cuBLASLt (llm.c's matmul_cublaslt), row-major
// shapes as backend/cpu/kernels.h's cpu_matmul_*. Host logic in C; the bias gradient is a
// kernel (cuda_bias_backward) because the parameter gradients accumulate (+=) and
// cuBLASLt's BGRAD epilogues write.
#ifndef TB_BACKEND_CUDA_GEMM_H
#define TB_BACKEND_CUDA_GEMM_H

#include "backend/cuda/cuda_device.h"
#include "backend/cuda/cuda_kernels.h"

typedef enum tb_cuda_dtype { TB_CUDA_F32, TB_CUDA_BF16, TB_CUDA_F16 } tb_cuda_dtype;

// out (N,OC) = inp (N,C) @ weight (OC,C)^T (+ bias (OC) by the BIAS epilogue, of out's type
// as cuBLASLt requires: fp32 for an fp32 out, bf16 for a bf16 one) — inp and weight of type
// `in`, out of type `out_type`; fp32 accumulation either way (bf16 in, fp32 or bf16 out:
// Megatron's bf16 compute). Returns 0 or a cuBLAS status, message in err. The descriptors and
// algorithm of each shape are made once and kept in ctx (tb_cuda_gemm_plans_free).
int tb_cuda_matmul_forward(tb_cuda_context *ctx, void *out, tb_cuda_dtype out_type, const void *inp,
                           const void *weight, tb_cuda_dtype in, const void *bias, int N, int C, int OC,
                           tb_error *err);
// fp32: dinp (N,C) = dout @ weight written (if not NULL); dweight (OC,C) += dout^T @ inp;
// dbias (OC) += column sums of dout (if not NULL)
int tb_cuda_matmul_backward(tb_cuda_context *ctx, float *dinp, float *dweight, float *dbias, const float *dout,
                            const float *inp, const float *weight, int N, int C, int OC, tb_error *err);

// 16-bit operands of type `in` (TB_CUDA_BF16 or TB_CUDA_F16: the compute copies of --bf16 /
// --fp16), fp32 results: dinp (N,C) written (if not NULL), dweight (OC,C) += doutᵀ @ inp
// accumulated in fp32 (main_grad). The bias gradient is the caller's (cuda_bias_backward on
// the fp32 dout).
int tb_cuda_matmul_backward_16(tb_cuda_context *ctx, float *dinp, float *dweight, const uint16_t *dout,
                               const uint16_t *inp, const uint16_t *weight, tb_cuda_dtype in, int N, int C, int OC,
                               tb_error *err);

// Frees the cuBLASLt plans ctx keeps (tb_cuda_context_free calls it through ctx->gemm_plans_free).
void tb_cuda_gemm_plans_free(tb_cuda_context *ctx);

#endif
