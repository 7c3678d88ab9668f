// gemm.c — see gemm.h. Row-major X (rows, cols) is column-major Xᵀ, so every product is
// computed transposed: out (N,OC) row-major = (W (OC,C) · inpᵀ)ᵀ, i.e. column-major
// D (OC,N) = op(A) B with A = weight as column-major (C,OC) transposed and B = inp as
// column-major (C,N).
#include "backend/cuda/gemm.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef TB_HAVE_CUDA_BACKEND

#include <cuda_runtime.h>

#include "backend/cuda/cublaslt_dl.h"
#include "backend/cuda/cuda_kernels.h"
#include "core/xalloc.h"

static cudaDataType_t data_type(tb_cuda_dtype t) {
    return t == TB_CUDA_BF16 ? CUDA_R_16BF : t == TB_CUDA_F16 ? CUDA_R_16F : CUDA_R_32F;
}

#define LT(call)                                                                                   \
    do {                                                                                           \
        cublasStatus_t st_ = (call);                                                               \
        if (st_ != CUBLAS_STATUS_SUCCESS) {                                                        \
            status = (int)st_;                                                                     \
            tb_fail(err, "%s: %s", #call, lt->GetStatusString(st_));                                 \
            goto done;                                                                             \
        }                                                                                          \
    } while (0)

// The largest power of two up to 256 that divides the address (the operand's alignment).
static uint32_t alignment(const void *p) {
    uint32_t a = 256;
    while (a > 1 && (uintptr_t)p % a != 0) a >>= 1;
    return a;
}

// One cuBLASLt plan per GEMM shape: the operation and layout descriptors and the heuristic's
// algorithm, made on the shape's first call and kept in the context (a training step repeats a
// few dozen shapes; building them and asking the heuristic cost more than a small GEMM). The
// key is everything the descriptors and the heuristic read: transposes, types, sizes, leading
// dimensions, the bias epilogue and the operands' alignment.
typedef struct lt_key {
    int transa, transb, m, n, k, lda, ldb, ldd, bias;
    tb_cuda_dtype ab, d;
    uint32_t align_a, align_b, align_d;
} lt_key;

typedef struct lt_plan {
    lt_key key;
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t la, lb, ld;
    cublasLtMatmulAlgo_t algo;
} lt_plan;

typedef struct lt_plans {
    lt_plan *v;
    int n, cap;
} lt_plans;

static void plan_destroy(lt_plan *p) {
    const tb_cublaslt *lt = tb_cublaslt_get();  // loaded: a plan exists only on a context
    if (p->ld) lt->MatrixLayoutDestroy(p->ld);
    if (p->lb) lt->MatrixLayoutDestroy(p->lb);
    if (p->la) lt->MatrixLayoutDestroy(p->la);
    if (p->op) lt->MatmulDescDestroy(p->op);
}

void tb_cuda_gemm_plans_free(tb_cuda_context *ctx) {
    lt_plans *ps = ctx->gemm_plans;
    if (!ps) return;
    for (int i = 0; i < ps->n; i++) plan_destroy(&ps->v[i]);
    free(ps->v);
    free(ps);
    ctx->gemm_plans = NULL;
}

// The plan of key k: found, or made (descriptors, heuristic) and added. NULL with err set
// (and *status) when cuBLASLt refuses or has no algorithm.
static const lt_plan *plan_for(tb_cuda_context *ctx, const lt_key *k, int *status_out, tb_error *err) {
    lt_plans *ps = ctx->gemm_plans;
    if (!ps) {
        ps = ctx->gemm_plans = tb_xcalloc(1, sizeof *ps, "cuBLASLt plans");
        ctx->gemm_plans_free = tb_cuda_gemm_plans_free;
    }
    for (int i = 0; i < ps->n; i++)
        if (!memcmp(&ps->v[i].key, k, sizeof *k)) return &ps->v[i];
    const tb_cublaslt *lt = tb_cublaslt_get();
    int status = 0;
    lt_plan p = {.key = *k};
    cublasLtMatmulPreference_t pref = NULL;
    const cublasOperation_t ta = k->transa ? CUBLAS_OP_T : CUBLAS_OP_N, tb = k->transb ? CUBLAS_OP_T : CUBLAS_OP_N;
    const cudaDataType_t tab = data_type(k->ab), td = data_type(k->d);
    LT(lt->MatmulDescCreate(&p.op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    LT(lt->MatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
    LT(lt->MatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
    if (k->bias) {
        // The bias vector is of D's type (cublasLt.h, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE: the
        // exceptions are integer and fp8 kernels), said explicitly.
        const cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_BIAS;
        const int32_t bias_type = (int32_t)td;
        LT(lt->MatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi));
        LT(lt->MatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type, sizeof bias_type));
    }
    LT(lt->MatrixLayoutCreate(&p.la, tab, k->transa ? k->k : k->m, k->transa ? k->m : k->k, k->lda));
    LT(lt->MatrixLayoutCreate(&p.lb, tab, k->transb ? k->n : k->k, k->transb ? k->k : k->n, k->ldb));
    LT(lt->MatrixLayoutCreate(&p.ld, td, k->m, k->n, k->ldd));
    LT(lt->MatmulPreferenceCreate(&pref));
    LT(lt->MatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ctx->workspace_bytes,
                                            sizeof ctx->workspace_bytes));
    // The heuristic assumes 256-byte aligned operands unless told otherwise; a tensor inside a
    // block (a parameter of the flat buffer, a microbatch's rows) may be aligned to as little
    // as its element, and an algorithm that needs more would fault on it.
    LT(lt->MatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &k->align_a,
                                            sizeof k->align_a));
    LT(lt->MatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &k->align_b,
                                            sizeof k->align_b));
    LT(lt->MatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &k->align_d,
                                            sizeof k->align_d));
    LT(lt->MatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &k->align_d,
                                            sizeof k->align_d));
    cublasLtMatmulHeuristicResult_t heur;
    int found = 0;
    LT(lt->MatmulAlgoGetHeuristic((cublasLtHandle_t)ctx->lt, p.op, p.la, p.lb, p.ld, p.ld, pref, 1, &heur,
                                      &found));
    if (found == 0) {
        status = (int)CUBLAS_STATUS_NOT_SUPPORTED;
        tb_fail(err, "cuBLASLt: no algorithm for m=%d n=%d k=%d (transa %d, transb %d%s)", k->m, k->n, k->k,
                k->transa, k->transb, k->bias ? ", bias epilogue" : "");
        goto done;
    }
    p.algo = heur.algo;
done:
    if (pref) lt->MatmulPreferenceDestroy(pref);
    if (status) {
        plan_destroy(&p);
        *status_out = status;
        return NULL;
    }
    if (ps->n == ps->cap) {
        ps->cap = ps->cap ? 2 * ps->cap : 32;
        ps->v = tb_xreallocarray(ps->v, (size_t)ps->cap, sizeof *ps->v, "cuBLASLt plans");
    }
    ps->v[ps->n] = p;
    return &ps->v[ps->n++];
}

// Column-major D (m,n) = op(A) op(B) + beta · D, with an optional bias epilogue (a vector of
// m elements of D's type added to every column of D).
static int lt_matmul(tb_cuda_context *ctx, void *D, tb_cuda_dtype dtype_d, const void *A, int transa, const void *B,
                     int transb, tb_cuda_dtype dtype_ab, int m, int n, int k, int lda, int ldb, int ldd, float beta,
                     const void *bias, tb_error *err) {
    lt_key key;
    memset(&key, 0, sizeof key);  // compared with memcmp: no stray padding bytes
    key.transa = transa, key.transb = transb, key.m = m, key.n = n, key.k = k;
    key.lda = lda, key.ldb = ldb, key.ldd = ldd, key.bias = bias != NULL, key.ab = dtype_ab, key.d = dtype_d;
    key.align_a = alignment(A), key.align_b = alignment(B), key.align_d = alignment(D);
    int status = 0;
    const lt_plan *p = plan_for(ctx, &key, &status, err);
    if (!p) return status;
    const tb_cublaslt *lt = tb_cublaslt_get();
    if (bias) LT(lt->MatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias));
    const float alpha = 1.0f;
    LT(lt->Matmul((cublasLtHandle_t)ctx->lt, p->op, &alpha, A, p->la, B, p->lb, &beta, D, p->ld, D, p->ld, &p->algo,
                  ctx->workspace, ctx->workspace_bytes, (cudaStream_t)ctx->stream));
done:
    return status;
}

int tb_cuda_matmul_forward(tb_cuda_context *ctx, void *out, tb_cuda_dtype out_type, const void *inp,
                           const void *weight, tb_cuda_dtype in, const void *bias, int N, int C, int OC,
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

void tb_cuda_gemm_plans_free(tb_cuda_context *ctx) { (void)ctx; }

int tb_cuda_matmul_forward(tb_cuda_context *ctx, void *out, tb_cuda_dtype out_type, const void *inp,
                           const void *weight, tb_cuda_dtype in, const void *bias, int N, int C, int OC,
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
