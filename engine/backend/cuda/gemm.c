// gemm.c — see gemm.h. Row-major X (rows, cols) is column-major Xᵀ, so every product is
// computed transposed: out (N,OC) row-major = (W (OC,C) · inpᵀ)ᵀ, i.e. column-major
// D (OC,N) = op(A) B with A = weight as column-major (C,OC) transposed and B = inp as
// column-major (C,N).
#include "backend/cuda/gemm.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#ifdef TB_HAVE_CUDA_BACKEND

#include <cublasLt.h>
#include <cuda_runtime.h>

#include "backend/cuda/cuda_kernels.h"

static cudaDataType_t data_type(tb_cuda_dtype t) {
    return t == TB_CUDA_BF16 ? CUDA_R_16BF : t == TB_CUDA_F16 ? CUDA_R_16F : CUDA_R_32F;
}

#define LT(call)                                                                                   \
    do {                                                                                           \
        cublasStatus_t st_ = (call);                                                               \
        if (st_ != CUBLAS_STATUS_SUCCESS) {                                                        \
            status = (int)st_;                                                                     \
            tb_fail(err, "%s: %s", #call, cublasLtGetStatusString(st_));                           \
            goto done;                                                                             \
        }                                                                                          \
    } while (0)

// The largest power of two up to 256 that divides the address (the operand's alignment).
static uint32_t alignment(const void *p) {
    uint32_t a = 256;
    while (a > 1 && (uintptr_t)p % a != 0) a >>= 1;
    return a;
}

// Column-major D (m,n) = alpha · op(A) op(B) + beta · D, with an optional bias epilogue
// (a vector of m added to every column of D).
static int lt_matmul(tb_cuda_context *ctx, void *D, tb_cuda_dtype dtype_d, const void *A, int transa, const void *B,
                     int transb, tb_cuda_dtype dtype_ab, int m, int n, int k, int lda, int ldb, int ldd, float beta,
                     const float *bias, tb_error *err) {
    int status = 0;
    cublasLtMatmulDesc_t op = NULL;
    cublasLtMatrixLayout_t la = NULL, lb = NULL, ld = NULL;
    cublasLtMatmulPreference_t pref = NULL;
    const cublasOperation_t ta = transa ? CUBLAS_OP_T : CUBLAS_OP_N, tb = transb ? CUBLAS_OP_T : CUBLAS_OP_N;
    const cudaDataType_t tab = data_type(dtype_ab), td = data_type(dtype_d);
    LT(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    LT(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
    LT(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
    if (bias) {
        const cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_BIAS;
        const cudaDataType_t bias_type = CUDA_R_32F;
        LT(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi));
        LT(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias));
        if (td != CUDA_R_32F)
            LT(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type, sizeof bias_type));
    }
    LT(cublasLtMatrixLayoutCreate(&la, tab, transa ? k : m, transa ? m : k, lda));
    LT(cublasLtMatrixLayoutCreate(&lb, tab, transb ? n : k, transb ? k : n, ldb));
    LT(cublasLtMatrixLayoutCreate(&ld, td, m, n, ldd));
    LT(cublasLtMatmulPreferenceCreate(&pref));
    LT(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ctx->workspace_bytes,
                                            sizeof ctx->workspace_bytes));
    // The heuristic assumes 256-byte aligned operands unless told otherwise; a tensor inside a
    // block (a parameter of the flat buffer, a microbatch's rows) may be aligned to as little
    // as its element, and an algorithm that needs more would fault on it.
    const uint32_t align_a = alignment(A), align_b = alignment(B), align_d = alignment(D);
    LT(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &align_a, sizeof align_a));
    LT(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &align_b, sizeof align_b));
    LT(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &align_d, sizeof align_d));
    LT(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &align_d, sizeof align_d));
    cublasLtMatmulHeuristicResult_t heur;
    int found = 0;
    LT(cublasLtMatmulAlgoGetHeuristic((cublasLtHandle_t)ctx->lt, op, la, lb, ld, ld, pref, 1, &heur, &found));
    if (found == 0) {
        status = (int)CUBLAS_STATUS_NOT_SUPPORTED;
        tb_fail(err, "cuBLASLt: no algorithm for m=%d n=%d k=%d (transa %d, transb %d%s)", m, n, k, transa, transb,
                bias ? ", bias epilogue" : "");
        goto done;
    }
    const float alpha = 1.0f;
    LT(cublasLtMatmul((cublasLtHandle_t)ctx->lt, op, &alpha, A, la, B, lb, &beta, D, ld, D, ld, &heur.algo,
                      ctx->workspace, ctx->workspace_bytes, (cudaStream_t)ctx->stream));
done:
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    if (ld) cublasLtMatrixLayoutDestroy(ld);
    if (lb) cublasLtMatrixLayoutDestroy(lb);
    if (la) cublasLtMatrixLayoutDestroy(la);
    if (op) cublasLtMatmulDescDestroy(op);
    return status;
}

int tb_cuda_matmul_forward(tb_cuda_context *ctx, void *out, tb_cuda_dtype out_type, const void *inp,
                           const void *weight, tb_cuda_dtype in, const float *bias, int N, int C, int OC,
                           tb_error *err) {
    // D (OC,N) = weightᵀ-view (C,OC)ᵀ · inp-view (C,N)
    return lt_matmul(ctx, out, out_type, weight, 1, inp, 0, in, OC, N, C, C, C, OC, 0.0f, bias, err);
}

int tb_cuda_matmul_backward(tb_cuda_context *ctx, float *dinp, float *dweight, float *dbias, const float *dout,
                            const float *inp, const float *weight, int N, int C, int OC, tb_error *err) {
    int st;
    // dinpᵀ (C,N) = weight-view (C,OC) · doutᵀ-view (OC,N)
    if (dinp && (st = lt_matmul(ctx, dinp, TB_CUDA_F32, weight, 0, dout, 0, TB_CUDA_F32, C, N, OC, C, OC, C, 0.0f,
                                NULL, err)) != 0)
        return st;
    // dweightᵀ (C,OC) += inp-view (C,N) · (dout-view (OC,N))ᵀ
    if ((st = lt_matmul(ctx, dweight, TB_CUDA_F32, inp, 0, dout, 1, TB_CUDA_F32, C, OC, N, C, OC, C, 1.0f, NULL,
                        err)) != 0)
        return st;
    if (dbias && (st = cuda_bias_backward(dbias, dout, N, OC, (tb_cuda_stream)ctx->stream)) != 0)
        return tb_fail(err, "cuda_bias_backward: %s", cudaGetErrorString((cudaError_t)st)), st;
    return 0;
}

int tb_cuda_matmul_backward_16(tb_cuda_context *ctx, float *dinp, float *dweight, const uint16_t *dout,
                               const uint16_t *inp, const uint16_t *weight, tb_cuda_dtype in, int N, int C, int OC,
                               tb_error *err) {
    int st;
    // as tb_cuda_matmul_backward, on 16-bit operands with fp32 outputs (dweight accumulated in fp32)
    if (dinp && (st = lt_matmul(ctx, dinp, TB_CUDA_F32, weight, 0, dout, 0, in, C, N, OC, C, OC, C, 0.0f, NULL,
                                err)) != 0)
        return st;
    return lt_matmul(ctx, dweight, TB_CUDA_F32, inp, 0, dout, 1, in, C, OC, N, C, OC, C, 1.0f, NULL, err);
}

#else  // not built

int tb_cuda_matmul_forward(tb_cuda_context *ctx, void *out, tb_cuda_dtype out_type, const void *inp,
                           const void *weight, tb_cuda_dtype in, const float *bias, int N, int C, int OC,
                           tb_error *err) {
    (void)ctx, (void)out, (void)out_type, (void)inp, (void)weight, (void)in, (void)bias, (void)N, (void)C, (void)OC;
    return tb_fail(err, "tb_cuda_matmul_forward: the CUDA backend is not built"), -1;
}
int tb_cuda_matmul_backward(tb_cuda_context *ctx, float *dinp, float *dweight, float *dbias, const float *dout,
                            const float *inp, const float *weight, int N, int C, int OC, tb_error *err) {
    (void)ctx, (void)dinp, (void)dweight, (void)dbias, (void)dout, (void)inp, (void)weight, (void)N, (void)C, (void)OC;
    return tb_fail(err, "tb_cuda_matmul_backward: the CUDA backend is not built"), -1;
}

int tb_cuda_matmul_backward_16(tb_cuda_context *ctx, float *dinp, float *dweight, const uint16_t *dout,
                               const uint16_t *inp, const uint16_t *weight, tb_cuda_dtype in, int N, int C, int OC,
                               tb_error *err) {
    (void)ctx, (void)dinp, (void)dweight, (void)dout, (void)inp, (void)weight, (void)in, (void)N, (void)C, (void)OC;
    return tb_fail(err, "tb_cuda_matmul_backward_16: the CUDA backend is not built"), -1;
}

#endif
