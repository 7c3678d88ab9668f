// test_cuda_kernels.c — every CUDA kernel and GEMM of the backend (backend/cuda/) against its
// CPU counterpart (backend/cpu/kernels.h, optimizer_update) on the same random inputs.
// Exit 77 (ctest: skipped) without the CUDA build or without a GPU, saying which.
//
// Tolerances, |gpu − cpu| ≤ atol + rtol·|cpu| elementwise:
//   fp32 elementwise, norms, embedding, RoPE, CE, AdamW: atol 1e-5, rtol 1e-4 (the same float
//     operations in another order; atomics in the row reductions);
//   fp32 GEMMs (cuBLASLt, CUBLAS_COMPUTE_32F: no TF32) and attention (also context
//     parallelism's, queries at positions): atol 1e-4, rtol 1e-3 (sums of K = 64..96 products
//     in another order);
//   context parallelism's data movement (copies, one add per element): exact (atol 0, rtol 0);
//   bf16 (bf16 in and out, fp32 math; the CPU runs fp32 on the same bf16-rounded inputs):
//     atol 1e-2, rtol 1.6e-2 (two bf16 roundings, 2^-8 each, and the order);
//   MoE (backend/kernel_table.h, "MoE"): the top-k choices exactly (the logits are spaced 0.5 apart,
//     so no expf rounding can reorder them), the row gather exactly, the rest at the fp32
//     elementwise tolerances (the CPU's float operations; fused multiply-adds, expf's ulp, the
//     probs' gradient a warp's sum in double) and the aux loss's column sums to 1e-9 relative.
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/kernels.h"
#include "backend/cuda/cuda_device.h"
#include "backend/cuda/cuda_kernels.h"
#include "backend/cuda/gemm.h"
#include "backend/flash_tiled.h"
#include "optimizer/optimizer.h"
#include "transformer/context_parallel.h"

#ifndef TB_HAVE_CUDA_BACKEND
int main(void) {
    printf("SKIP: the CUDA backend is not built (no nvcc / cuBLASLt at configure time)\n");
    return 77;
}
#else

#include <cuda_runtime.h>

#include "tb_test.h"

#define F32_ATOL 1e-5
#define F32_RTOL 1e-4
#define GEMM_ATOL 1e-4
#define GEMM_RTOL 1e-3
#define BF16_ATOL 1e-2
#define BF16_RTOL 1.6e-2

static tb_cuda_context ctx;
static uint64_t rng = 0x9e3779b97f4a7c15ull;

static float frand(void) {  // uniform in [-1, 1)
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (float)((rng >> 40) * (2.0 / 16777216.0) - 1.0);
}
static float *randv(size_t n, float scale) {
    float *x = malloc(n * sizeof *x);
    for (size_t i = 0; i < n; i++) x[i] = frand() * scale;
    return x;
}
static float *copyv(const float *x, size_t n) {
    float *y = malloc(n * sizeof *y);
    memcpy(y, x, n * sizeof *y);
    return y;
}
static void *up(const void *h, size_t bytes) {
    void *d = NULL;
    if (cudaMalloc(&d, bytes ? bytes : 1) != cudaSuccess) abort();
    if (h) cudaMemcpy(d, h, bytes, cudaMemcpyHostToDevice);
    else cudaMemset(d, 0, bytes);
    // the kernels run on ctx's non-blocking stream, which does not wait for the legacy default
    // stream that cudaMemcpy (its DMA from pageable memory) and cudaMemset use
    cudaDeviceSynchronize();
    return d;
}
static float *upf(const float *h, size_t n) { return up(h, n * sizeof(float)); }
static float *down(const void *d, size_t n) {
    float *h = malloc(n * sizeof *h);
    cudaStreamSynchronize((cudaStream_t)ctx.stream);
    cudaMemcpy(h, d, n * sizeof *h, cudaMemcpyDeviceToHost);
    return h;
}

// bf16 on the host: round to nearest even, as __float2bfloat16
static uint16_t to_bf16(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}
static float from_bf16(uint16_t b) {
    uint32_t u = (uint32_t)b << 16;
    float x;
    memcpy(&x, &u, 4);
    return x;
}
static void round_bf16(float *x, size_t n) {
    for (size_t i = 0; i < n; i++) x[i] = from_bf16(to_bf16(x[i]));
}
static uint16_t *upbf(const float *h, size_t n) {
    uint16_t *b = malloc(n * sizeof *b);
    for (size_t i = 0; i < n; i++) b[i] = to_bf16(h[i]);
    uint16_t *d = up(b, n * sizeof *b);
    free(b);
    return d;
}
static float *downbf(const uint16_t *d, size_t n) {
    uint16_t *b = malloc(n * sizeof *b);
    cudaStreamSynchronize((cudaStream_t)ctx.stream);
    cudaMemcpy(b, d, n * sizeof *b, cudaMemcpyDeviceToHost);
    float *h = malloc(n * sizeof *h);
    for (size_t i = 0; i < n; i++) h[i] = from_bf16(b[i]);
    free(b);
    return h;
}

// Compares and frees `gpu` (host copy of the device result).
#define CLOSE(gpu, cpu, n, atol, rtol, name) close_check((gpu), (cpu), (n), (atol), (rtol), (name), __LINE__)
static void close_check(float *gpu, const float *cpu, size_t n, double atol, double rtol, const char *name, int line) {
    size_t worst = 0;
    double worst_excess = -1.0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)gpu[i] - cpu[i]), lim = atol + rtol * fabs((double)cpu[i]);
        if (!(d <= lim) && d - lim > worst_excess) worst_excess = d - lim, worst = i;
    }
    if (worst_excess >= 0.0)
        printf("  line %d: ", line);
    TB_CHECK(worst_excess < 0.0, "%s: element %zu of %zu: gpu %.8g cpu %.8g (atol %g rtol %g)", name, worst, n,
             gpu[worst], cpu[worst], atol, rtol);
    free(gpu);
}

#define OK(call) TB_REQUIRE((call) == 0, "%s failed", #call)

enum { B = 2, T = 24, C = 96, N = B * T, F = 64, NH = 4, G = 2, HS = 24, V = 200, VL = 128 };

TB_TEST(norms) {
    float *x = randv(N * C, 2.0f), *w = randv(C, 1.0f), *b = randv(C, 0.5f), *dy = randv(N * C, 1.0f);
    float *out = malloc(N * C * 4), *mean = malloc(N * 4), *rstd = malloc(N * 4), *dx = malloc(N * C * 4);
    float *dw = randv(C, 0.1f), *db = randv(C, 0.1f), *dw0 = copyv(dw, C), *db0 = copyv(db, C);
    float *d_x = upf(x, N * C), *d_w = upf(w, C), *d_b = upf(b, C), *d_dy = upf(dy, N * C);
    float *d_out = upf(NULL, N * C), *d_mean = upf(NULL, N), *d_rstd = upf(NULL, N), *d_dx = upf(NULL, N * C);
    float *d_dw = upf(dw, C), *d_db = upf(db, C);
    cudaStream_t s = ctx.stream;
    cpu_layernorm_forward(out, mean, rstd, x, w, b, N, C, 1e-5f);
    OK(cuda_layernorm_forward(d_out, d_mean, d_rstd, d_x, d_w, d_b, N, C, 1e-5f, s));
    CLOSE(down(d_out, N * C), out, N * C, F32_ATOL, F32_RTOL, "layernorm out");
    CLOSE(down(d_mean, N), mean, N, F32_ATOL, F32_RTOL, "layernorm mean");
    CLOSE(down(d_rstd, N), rstd, N, F32_ATOL, F32_RTOL, "layernorm rstd");
    cpu_layernorm_backward(dx, dw, db, dy, x, w, mean, rstd, N, C);
    OK(cuda_layernorm_backward(d_dx, d_dw, d_db, d_dy, d_x, d_w, d_mean, d_rstd, N, C, s));
    CLOSE(down(d_dx, N * C), dx, N * C, F32_ATOL, F32_RTOL, "layernorm dinp");
    CLOSE(down(d_dw, C), dw, C, F32_ATOL, F32_RTOL, "layernorm dweight (accumulated)");
    CLOSE(down(d_db, C), db, C, F32_ATOL, F32_RTOL, "layernorm dbias (accumulated)");
    // RMSNorm
    memcpy(dw, dw0, C * 4);
    cudaMemcpy(d_dw, dw0, C * 4, cudaMemcpyHostToDevice);
    cudaDeviceSynchronize();
    cpu_rmsnorm_forward(out, rstd, x, w, N, C, 1e-5f);
    OK(cuda_rmsnorm_forward(d_out, d_rstd, d_x, d_w, N, C, 1e-5f, s));
    CLOSE(down(d_out, N * C), out, N * C, F32_ATOL, F32_RTOL, "rmsnorm out");
    CLOSE(down(d_rstd, N), rstd, N, F32_ATOL, F32_RTOL, "rmsnorm rstd");
    cpu_rmsnorm_backward(dx, dw, dy, x, w, rstd, N, C);
    OK(cuda_rmsnorm_backward(d_dx, d_dw, d_dy, d_x, d_w, d_rstd, N, C, s));
    CLOSE(down(d_dx, N * C), dx, N * C, F32_ATOL, F32_RTOL, "rmsnorm dinp");
    CLOSE(down(d_dw, C), dw, C, F32_ATOL, F32_RTOL, "rmsnorm dweight");
    // bf16 forwards: the CPU on the bf16-rounded input
    round_bf16(x, N * C);
    uint16_t *b_x = upbf(x, N * C), *b_out = up(NULL, N * C * 2);
    cpu_layernorm_forward(out, mean, rstd, x, w, b, N, C, 1e-5f);
    OK(cuda_layernorm_forward_bf16(b_out, d_mean, d_rstd, b_x, d_w, d_b, N, C, 1e-5f, s));
    CLOSE(downbf(b_out, N * C), out, N * C, BF16_ATOL, BF16_RTOL, "layernorm bf16 out");
    CLOSE(down(d_rstd, N), rstd, N, F32_ATOL, F32_RTOL, "layernorm bf16 rstd (fp32)");
    cpu_rmsnorm_forward(out, rstd, x, w, N, C, 1e-5f);
    OK(cuda_rmsnorm_forward_bf16(b_out, d_rstd, b_x, d_w, N, C, 1e-5f, s));
    CLOSE(downbf(b_out, N * C), out, N * C, BF16_ATOL, BF16_RTOL, "rmsnorm bf16 out");
    void *frees[] = {d_x, d_w, d_b, d_dy, d_out, d_mean, d_rstd, d_dx, d_dw, d_db, b_x, b_out};
    for (size_t i = 0; i < sizeof frees / sizeof *frees; i++) cudaFree(frees[i]);
    free(x), free(w), free(b), free(dy), free(out), free(mean), free(rstd), free(dx), free(dw), free(db), free(dw0),
        free(db0);
}

TB_TEST(activations_and_residual) {
    const size_t n = (size_t)N * 2 * F;
    float *x = randv(n, 3.0f), *y = randv(n, 1.0f), *out = malloc(n * 4), *dx = malloc(n * 4);
    float *d_x = upf(x, n), *d_y = upf(y, n), *d_out = upf(NULL, n), *d_dx = upf(NULL, n);
    cudaStream_t s = ctx.stream;
    cpu_gelu_forward(out, x, n);
    OK(cuda_gelu_forward(d_out, d_x, n, s));
    CLOSE(down(d_out, n), out, n, F32_ATOL, F32_RTOL, "gelu");
    cpu_gelu_backward(dx, x, y, n);
    OK(cuda_gelu_backward(d_dx, d_x, d_y, n, s));
    CLOSE(down(d_dx, n), dx, n, F32_ATOL, F32_RTOL, "gelu backward");
    cpu_swiglu_forward(out, x, N, F);
    OK(cuda_swiglu_forward(d_out, d_x, N, F, s));
    CLOSE(down(d_out, (size_t)N * F), out, (size_t)N * F, F32_ATOL, F32_RTOL, "swiglu");
    cpu_swiglu_backward(dx, x, y, N, F);
    OK(cuda_swiglu_backward(d_dx, d_x, d_y, N, F, s));
    CLOSE(down(d_dx, n), dx, n, F32_ATOL, F32_RTOL, "swiglu backward");
    cpu_add(out, x, y, n);
    OK(cuda_add(d_out, d_x, d_y, n, s));
    CLOSE(down(d_out, n), out, n, F32_ATOL, F32_RTOL, "add");
    cpu_add_inplace(out, y, n);
    OK(cuda_add_inplace(d_out, d_y, n, s));
    CLOSE(down(d_out, n), out, n, F32_ATOL, F32_RTOL, "add_inplace");
    // a column block of x seen as (N, 2F) rows (--qk-layernorm's q and k blocks of qkv): out
    // and back in, exact copies
    const int width = F / 2, offset = F + 3;
    float *blk = malloc((size_t)N * width * 4), *d_blk = upf(NULL, (size_t)N * width);
    cpu_rows_gather(blk, x, N, width, 2 * F, offset);
    OK(cuda_rows_gather(d_blk, d_x, N, width, 2 * F, offset, s));
    CLOSE(down(d_blk, (size_t)N * width), blk, (size_t)N * width, 0.0, 0.0, "rows_gather");
    memcpy(out, y, n * 4);
    OK(cudaMemcpy(d_out, d_y, n * 4, cudaMemcpyDeviceToDevice));
    cpu_rows_scatter(out, blk, N, width, 2 * F, offset);
    OK(cuda_rows_scatter(d_out, d_blk, N, width, 2 * F, offset, s));
    CLOSE(down(d_out, n), out, n, 0.0, 0.0, "rows_scatter");
    cudaFree(d_blk);
    free(blk);
    // sum of squares (double; order differs)
    double *d_ss = up(NULL, sizeof(double)), ss = 0.0;
    OK(cuda_sum_squares(d_ss, d_x, n, s));
    cudaStreamSynchronize(s);
    cudaMemcpy(&ss, d_ss, sizeof ss, cudaMemcpyDeviceToHost);
    double ref = cpu_sum_squares(x, n);
    TB_CHECK(fabs(ss - ref) <= 1e-9 * ref, "sum_squares gpu %.17g cpu %.17g", ss, ref);
    // the same over three slices of x (one of them empty) in one launch: their sums added
    const tb_cuda_segment segs[3] = {{d_x, n / 3}, {d_x + n / 2, 0}, {d_x + n / 2, n - n / 2}};
    tb_cuda_segment *d_segs = up(segs, sizeof segs);
    OK(cudaMemset(d_ss, 0, sizeof(double)));
    OK(cuda_sum_squares_segments(d_ss, d_segs, 3, n - n / 2, s));
    cudaStreamSynchronize(s);
    cudaMemcpy(&ss, d_ss, sizeof ss, cudaMemcpyDeviceToHost);
    ref = cpu_sum_squares(x, n / 3) + cpu_sum_squares(x + n / 2, n - n / 2);
    TB_CHECK(fabs(ss - ref) <= 1e-9 * ref, "sum_squares_segments gpu %.17g cpu %.17g", ss, ref);
    cudaFree(d_segs);
    // bf16: casts, gelu, add
    round_bf16(x, n), round_bf16(y, n);
    uint16_t *b_x = upbf(x, n), *b_y = upbf(y, n), *b_out = up(NULL, n * 2);
    float *back = upf(NULL, n);
    OK(cuda_cast_f32_to_bf16(b_out, d_x, n, s));  // d_x holds the unrounded x: rounds like to_bf16
    OK(cuda_cast_bf16_to_f32(back, b_out, n, s));
    CLOSE(down(back, n), x, n, 0.0, 0.0, "fp32 -> bf16 -> fp32 (round to nearest even, exact)");
    // the four-a-thread cast's tail (a length of 3 mod 4) and an unaligned source (the scalar
    // kernel): the same bits
    const size_t tail_n = n / 4 * 4 - 1;
    OK(cudaMemset(b_out, 0xff, n * 2));
    OK(cuda_cast_f32_to_bf16(b_out, d_x, tail_n, s));
    OK(cuda_cast_bf16_to_f32(back, b_out, tail_n, s));
    CLOSE(down(back, tail_n), x, tail_n, 0.0, 0.0, "fp32 -> bf16, n % 4 == 3");
    OK(cuda_cast_f32_to_bf16(b_out, d_x + 1, n - 2, s));
    OK(cuda_cast_bf16_to_f32(back, b_out, n - 2, s));
    CLOSE(down(back, n - 2), x + 1, n - 2, 0.0, 0.0, "fp32 -> bf16 from an unaligned source");
    cpu_gelu_forward(out, x, n);
    OK(cuda_gelu_forward_bf16(b_out, b_x, n, s));
    CLOSE(downbf(b_out, n), out, n, BF16_ATOL, BF16_RTOL, "gelu bf16");
    cpu_add(out, x, y, n);
    OK(cuda_add_bf16(b_out, b_x, b_y, n, s));
    CLOSE(downbf(b_out, n), out, n, BF16_ATOL, BF16_RTOL, "add bf16");
    void *frees[] = {d_x, d_y, d_out, d_dx, d_ss, b_x, b_y, b_out, back};
    for (size_t i = 0; i < sizeof frees / sizeof *frees; i++) cudaFree(frees[i]);
    free(x), free(y), free(out), free(dx);
}

TB_TEST(rope_and_embedding) {
    const int row = (NH + 2 * G) * HS, dim = HS, half = dim / 2;
    float *cos_t = malloc((size_t)T * half * 4), *sin_t = malloc((size_t)T * half * 4);
    cpu_rope_tables(cos_t, sin_t, T, dim, 10000.0);
    float *q = randv((size_t)N * row, 1.0f);
    float *d_q = upf(q, (size_t)N * row), *d_cos = upf(cos_t, (size_t)T * half), *d_sin = upf(sin_t, (size_t)T * half);
    cudaStream_t s = ctx.stream;
    for (int interleaved = 0; interleaved <= 1; interleaved++)
        for (int inverse = 0; inverse <= 1; inverse++) {
            cpu_rope_apply(q, cos_t, sin_t, B, T, row, NH + G, HS, dim, interleaved, inverse);
            OK(cuda_rope_apply(d_q, d_cos, d_sin, B, T, row, NH + G, HS, dim, interleaved, inverse, s));
            CLOSE(down(d_q, (size_t)N * row), q, (size_t)N * row, F32_ATOL, F32_RTOL, "rope");
        }
    // embedding of a vocabulary shard [64, 64 + VL) with positions
    int32_t tokens[N];
    for (int i = 0; i < N; i++) tokens[i] = (int32_t)((i * 37 + 5) % V);
    float *wte = randv((size_t)VL * C, 1.0f), *wpe = randv((size_t)T * C, 1.0f), *out = malloc((size_t)N * C * 4);
    float *dy = randv((size_t)N * C, 1.0f), *dwte = randv((size_t)VL * C, 0.1f), *dwpe = randv((size_t)T * C, 0.1f);
    int32_t *d_tok = up(tokens, sizeof tokens);
    float *d_wte = upf(wte, (size_t)VL * C), *d_wpe = upf(wpe, (size_t)T * C), *d_out = upf(NULL, (size_t)N * C);
    float *d_dy = upf(dy, (size_t)N * C), *d_dwte = upf(dwte, (size_t)VL * C), *d_dwpe = upf(dwpe, (size_t)T * C);
    cpu_embedding_forward(out, tokens, wte, 64, VL, wpe, NULL, B, T, C);
    OK(cuda_embedding_forward(d_out, d_tok, d_wte, 64, VL, d_wpe, NULL, B, T, C, s));
    CLOSE(down(d_out, (size_t)N * C), out, (size_t)N * C, F32_ATOL, F32_RTOL, "embedding forward");
    cpu_embedding_backward(dwte, dwpe, dy, tokens, 64, VL, NULL, B, T, C);
    OK(cuda_embedding_backward(d_dwte, d_dwpe, d_dy, d_tok, 64, VL, NULL, B, T, C, s));
    CLOSE(down(d_dwte, (size_t)VL * C), dwte, (size_t)VL * C, F32_ATOL, F32_RTOL, "embedding dwte");
    CLOSE(down(d_dwpe, (size_t)T * C), dwpe, (size_t)T * C, F32_ATOL, F32_RTOL, "embedding dwpe");
    void *frees[] = {d_q, d_cos, d_sin, d_tok, d_wte, d_wpe, d_out, d_dy, d_dwte, d_dwpe};
    for (size_t i = 0; i < sizeof frees / sizeof *frees; i++) cudaFree(frees[i]);
    free(cos_t), free(sin_t), free(q), free(wte), free(wpe), free(out), free(dy), free(dwte), free(dwpe);
}

TB_TEST(vocab_parallel_cross_entropy) {
    // the second shard of V = 200 in shards of VL = 128: 72 real columns, 56 of padding
    const int vs = 128;
    int32_t targets[N];
    for (int i = 0; i < N; i++) targets[i] = (int32_t)((i * 53 + 11) % V);
    float *logits = randv((size_t)N * VL, 4.0f), *mx = malloc(N * 4), *tg = malloc(N * 4), *sum = malloc(N * 4);
    float *loss = malloc(N * 4);
    float *d_l = upf(logits, (size_t)N * VL), *d_mx = upf(NULL, N), *d_tg = upf(NULL, N), *d_sum = upf(NULL, N);
    float *d_loss = upf(NULL, N);
    int32_t *d_t = up(targets, sizeof targets);
    cudaStream_t s = ctx.stream;
    cpu_ce_row_max(logits, mx, N, VL, vs, V);
    OK(cuda_ce_row_max(d_l, d_mx, N, VL, vs, V, s));
    CLOSE(down(d_mx, N), mx, N, 0.0, 0.0, "ce row max (exact)");
    cpu_ce_target_logit(logits, mx, tg, targets, N, VL, vs);
    OK(cuda_ce_target_logit(d_l, d_mx, d_tg, d_t, N, VL, vs, s));
    CLOSE(down(d_tg, N), tg, N, 0.0, 0.0, "ce target logit (exact)");
    cpu_ce_exp_sum(logits, mx, sum, N, VL, vs, V);
    OK(cuda_ce_exp_sum(d_l, d_mx, d_sum, N, VL, vs, V, s));
    CLOSE(down(d_l, (size_t)N * VL), logits, (size_t)N * VL, F32_ATOL, F32_RTOL, "ce exp");
    CLOSE(down(d_sum, N), sum, N, F32_ATOL, F32_RTOL, "ce exp sum");
    cpu_ce_normalize(logits, sum, tg, loss, N, VL);
    OK(cuda_ce_normalize(d_l, d_sum, d_tg, d_loss, N, VL, s));
    CLOSE(down(d_l, (size_t)N * VL), logits, (size_t)N * VL, F32_ATOL, F32_RTOL, "ce probs");
    CLOSE(down(d_loss, N), loss, N, F32_ATOL, F32_RTOL, "ce losses");
    cpu_cross_entropy_backward(logits, targets, 1.0f / N, N, VL, vs);
    OK(cuda_cross_entropy_backward(d_l, d_t, 1.0f / N, N, VL, vs, s));
    CLOSE(down(d_l, (size_t)N * VL), logits, (size_t)N * VL, F32_ATOL, F32_RTOL, "ce dlogits");
    void *frees[] = {d_l, d_mx, d_tg, d_sum, d_loss, d_t};
    for (size_t i = 0; i < sizeof frees / sizeof *frees; i++) cudaFree(frees[i]);
    free(logits), free(mx), free(tg), free(sum), free(loss);
}

TB_TEST(adamw) {
    const size_t n = 10007;
    float *p = randv(n, 1.0f), *m = randv(n, 0.01f), *v = randv(n, 0.01f), *g = randv(n, 1.0f);
    for (size_t i = 0; i < n; i++) v[i] = fabsf(v[i]);
    float *d_p = upf(p, n), *d_m = upf(m, n), *d_v = upf(v, n), *d_g = upf(g, n);
    const float lr = 3e-4f, b1 = 0.9f, b2 = 0.95f, bc1 = 1.0f - powf(b1, 3.0f), bc2 = 1.0f - powf(b2, 3.0f);
    cpu_adamw_update(p, m, v, g, n, 0.7f, b1, b2, 1e-8f, 1.0f - lr * 0.1f, lr / bc1, 1.0f / sqrtf(bc2));
    OK(cuda_adamw_update(d_p, d_m, d_v, d_g, n, 0.7f, b1, b2, 1e-8f, 1.0f - lr * 0.1f, lr / bc1, 1.0f / sqrtf(bc2),
                         ctx.stream));
    CLOSE(down(d_p, n), p, n, F32_ATOL, F32_RTOL, "adamw params");
    CLOSE(down(d_m, n), m, n, F32_ATOL, F32_RTOL, "adamw m");
    CLOSE(down(d_v, n), v, n, F32_ATOL, F32_RTOL, "adamw v");
    cudaFree(d_p), cudaFree(d_m), cudaFree(d_v), cudaFree(d_g);
    free(p), free(m), free(v), free(g);
}

TB_TEST(matmul_cublaslt) {
    const int OC = 80;
    float *x = randv((size_t)N * C, 1.0f), *w = randv((size_t)OC * C, 0.2f), *bias = randv(OC, 1.0f);
    float *out = malloc((size_t)N * OC * 4), *dy = randv((size_t)N * OC, 1.0f), *dx = malloc((size_t)N * C * 4);
    float *dw = randv((size_t)OC * C, 0.1f), *db = randv(OC, 0.1f);
    float *d_x = upf(x, (size_t)N * C), *d_w = upf(w, (size_t)OC * C), *d_b = upf(bias, OC);
    float *d_out = upf(NULL, (size_t)N * OC), *d_dy = upf(dy, (size_t)N * OC), *d_dx = upf(NULL, (size_t)N * C);
    float *d_dw = upf(dw, (size_t)OC * C), *d_db = upf(db, OC);
    tb_error err;
    cpu_matmul_forward(out, x, w, bias, N, C, OC);
    TB_REQUIRE(tb_cuda_matmul_forward(&ctx, d_out, TB_CUDA_F32, d_x, d_w, TB_CUDA_F32, d_b, N, C, OC, &err) == 0,
               "%s", err.msg);
    CLOSE(down(d_out, (size_t)N * OC), out, (size_t)N * OC, GEMM_ATOL, GEMM_RTOL, "matmul forward + bias epilogue");
    cpu_matmul_forward(out, x, w, NULL, N, C, OC);
    TB_REQUIRE(tb_cuda_matmul_forward(&ctx, d_out, TB_CUDA_F32, d_x, d_w, TB_CUDA_F32, NULL, N, C, OC, &err) == 0,
               "%s", err.msg);
    CLOSE(down(d_out, (size_t)N * OC), out, (size_t)N * OC, GEMM_ATOL, GEMM_RTOL, "matmul forward, no bias");
    cpu_matmul_backward(dx, dw, db, dy, x, w, N, C, OC);
    TB_REQUIRE(tb_cuda_matmul_backward(&ctx, d_dx, d_dw, d_db, d_dy, d_x, d_w, N, C, OC, &err) == 0, "%s", err.msg);
    CLOSE(down(d_dx, (size_t)N * C), dx, (size_t)N * C, GEMM_ATOL, GEMM_RTOL, "matmul dinp");
    CLOSE(down(d_dw, (size_t)OC * C), dw, (size_t)OC * C, GEMM_ATOL, GEMM_RTOL, "matmul dweight (accumulated)");
    CLOSE(down(d_db, OC), db, OC, GEMM_ATOL, GEMM_RTOL, "matmul dbias (accumulated)");
    // bf16 in, fp32 out (bias fp32): the CPU on the bf16-rounded operands
    round_bf16(x, (size_t)N * C), round_bf16(w, (size_t)OC * C);
    uint16_t *b_x = upbf(x, (size_t)N * C), *b_w = upbf(w, (size_t)OC * C), *b_out = up(NULL, (size_t)N * OC * 2);
    cpu_matmul_forward(out, x, w, bias, N, C, OC);
    TB_REQUIRE(tb_cuda_matmul_forward(&ctx, d_out, TB_CUDA_F32, b_x, b_w, TB_CUDA_BF16, d_b, N, C, OC, &err) == 0,
               "%s", err.msg);
    CLOSE(down(d_out, (size_t)N * OC), out, (size_t)N * OC, GEMM_ATOL, GEMM_RTOL, "matmul bf16 in, fp32 out");
    // bf16 out: the bias of D's type (cuBLASLt's rule), so bf16-rounded on the CPU side too
    round_bf16(bias, OC);
    uint16_t *b_b = upbf(bias, OC);
    cpu_matmul_forward(out, x, w, bias, N, C, OC);
    TB_REQUIRE(tb_cuda_matmul_forward(&ctx, b_out, TB_CUDA_BF16, b_x, b_w, TB_CUDA_BF16, b_b, N, C, OC, &err) == 0,
               "%s", err.msg);
    CLOSE(downbf(b_out, (size_t)N * OC), out, (size_t)N * OC, BF16_ATOL, BF16_RTOL, "matmul bf16 in, bf16 out + bf16 bias");
    // a shape seen before runs on its kept plan: the same call again gives the same bits
    float *first = down(d_out, (size_t)N * OC);
    TB_REQUIRE(tb_cuda_matmul_forward(&ctx, d_out, TB_CUDA_F32, b_x, b_w, TB_CUDA_BF16, d_b, N, C, OC, &err) == 0,
               "%s", err.msg);
    float *again = down(d_out, (size_t)N * OC);
    TB_CHECK(!memcmp(first, again, (size_t)N * OC * 4), "the kept cuBLASLt plan gave other bits on the same inputs");
    free(first), free(again);
    void *frees[] = {d_x, d_w, d_b, d_out, d_dy, d_dx, d_dw, d_db, b_x, b_w, b_out, b_b};
    for (size_t i = 0; i < sizeof frees / sizeof *frees; i++) cudaFree(frees[i]);
    free(x), free(w), free(bias), free(out), free(dy), free(dx), free(dw), free(db);
}

// The unfused ("local") core: the probabilities, the output and the backward against
// cpu_attention_* (the GEMM and attention tolerances; the probabilities' zeros above the
// diagonal exact).
TB_TEST(local_attention_gqa) {
    const int QKV = (NH + 2 * G) * HS, CO = NH * HS;
    const size_t nqkv = (size_t)N * QKV, nout = (size_t)N * CO, np = (size_t)B * NH * T * T;
    float *qkv = randv(nqkv, 1.0f), *dy = randv(nout, 1.0f), *out = malloc(nout * 4), *probs = malloc(np * 4);
    float *dqkv = malloc(nqkv * 4), *scratch = malloc((size_t)2 * T * T * 4);
    float *d_qkv = upf(qkv, nqkv), *d_dy = upf(dy, nout), *d_out = upf(NULL, nout), *d_p = upf(NULL, np);
    float *d_ds = upf(NULL, np), *d_dqkv = upf(NULL, nqkv);
    cpu_attention_forward(out, probs, scratch, qkv, B, T, NH, G, HS);
    OK(cuda_attention_probs(d_p, d_qkv, B, T, NH, G, HS, ctx.stream));
    OK(cuda_attention_forward(d_out, d_p, d_qkv, B, T, NH, G, HS, ctx.stream));
    CLOSE(down(d_p, np), probs, np, GEMM_ATOL, GEMM_RTOL, "local attention probabilities");
    CLOSE(down(d_out, nout), out, nout, GEMM_ATOL, GEMM_RTOL, "local attention out");
    cpu_attention_backward(dqkv, scratch, dy, qkv, probs, B, T, NH, G, HS);
    OK(cuda_attention_backward(d_dqkv, d_ds, d_dy, d_qkv, d_p, B, T, NH, G, HS, ctx.stream));
    CLOSE(down(d_dqkv, nqkv), dqkv, nqkv, GEMM_ATOL, GEMM_RTOL, "local attention dqkv");
    cudaFree(d_qkv), cudaFree(d_dy), cudaFree(d_out), cudaFree(d_p), cudaFree(d_ds), cudaFree(d_dqkv);
    free(qkv), free(dy), free(out), free(probs), free(dqkv), free(scratch);
}

// One head size: the kernel instance with ceil(hs / 32) channels per lane rounded up to 8, 16
// or 32 (hs 24, 320, 1000: each instance, hs not a multiple of 32 included).
static void flash_attention_at(int hs) {
    const int QKV = (NH + 2 * G) * hs, CO = NH * hs;
    const size_t nqkv = (size_t)N * QKV, nout = (size_t)N * CO, nlse = (size_t)B * NH * T;
    float *qkv = randv(nqkv, 1.0f), *out = malloc(nout * 4), *lse = malloc(nlse * 4), *dy = randv(nout, 1.0f);
    float *dqkv = malloc(nqkv * 4);
    float *scratch = malloc(cpu_flash_attention_scratch_floats(T, hs, 1) * 4);
    float *d_qkv = upf(qkv, nqkv), *d_out = upf(NULL, nout), *d_lse = upf(NULL, nlse), *d_dy = upf(dy, nout);
    float *d_dqkv = upf(NULL, nqkv);
    char what[64];
    cpu_flash_attention_forward(out, lse, scratch, 1, qkv, B, T, NH, G, hs);
    OK(cuda_flash_attention_forward(d_out, d_lse, d_qkv, B, T, NH, G, hs, ctx.stream));
    snprintf(what, sizeof what, "attention out (hs %d)", hs);
    CLOSE(down(d_out, nout), out, nout, GEMM_ATOL, GEMM_RTOL, what);
    snprintf(what, sizeof what, "attention lse (hs %d)", hs);
    CLOSE(down(d_lse, nlse), lse, nlse, GEMM_ATOL, GEMM_RTOL, what);
    cpu_flash_attention_backward(dqkv, scratch, 1, dy, out, qkv, lse, B, T, NH, G, hs);
    OK(cuda_flash_attention_backward(d_dqkv, d_dy, d_out, d_qkv, d_lse, B, T, NH, G, hs, ctx.stream));
    snprintf(what, sizeof what, "attention dqkv (hs %d)", hs);
    CLOSE(down(d_dqkv, nqkv), dqkv, nqkv, GEMM_ATOL, GEMM_RTOL, what);
    cudaFree(d_qkv), cudaFree(d_out), cudaFree(d_lse), cudaFree(d_dy), cudaFree(d_dqkv);
    free(qkv), free(out), free(lse), free(dy), free(dqkv), free(scratch);
}

TB_TEST(flash_attention_gqa) {
    flash_attention_at(HS);
    flash_attention_at(320);
    flash_attention_at(1000);
    // beyond 1024 the launcher refuses (the config refuses it first: test_cuda_device)
    TB_CHECK(cuda_flash_attention_forward(NULL, NULL, NULL, B, T, NH, G, 1056, ctx.stream) ==
                 (int)cudaErrorInvalidValue,
             "hs 1056 refused by the launcher");
}

// The tensor-core kernels (attention_tc.cu) against their C twin (backend/flash_tiled.c with
// bf16 operands: the same tiles and roundings; test_flash_tiled checks the twin against the
// exact kernels): the fused causal core (grouped queries, a partial last tile), context
// parallelism's zig-zag view (cp rank 1 of 2) and a ring block (every key visible, out rows
// beyond the block's), head sizes 16, 64 and 128. The backward runs from the twin's out and lse.
typedef enum { TC_FUSED, TC_CP, TC_BLOCK } tc_kind;
static tb_flash_view tc_view(tc_kind k, const float *qkv, const int32_t *qpos, const float *kv, int Tq, int Tk,
                             int out_rows, int hs) {
    if (k == TC_FUSED) return tb_flash_view_fused(qkv, Tq, NH, G, hs, 1);
    if (k == TC_CP) return tb_flash_view_cp(qkv, qpos, kv, Tq, Tk, NH, G, hs);
    return tb_flash_view_block(qkv, (size_t)Tq * (NH + 2 * G) * hs, kv, (size_t)Tk * 2 * G * hs, Tq, Tk, out_rows, 0,
                               NH, G, hs);
}
static void tensor_core_case(tc_kind k, int Tq, int Tk, int out_rows, int hs, const char *name) {
    const int QKV = (NH + 2 * G) * hs, KV = 2 * G * hs, CO = NH * hs;
    const size_t nqkv = (size_t)B * Tq * QKV, nkv = k == TC_FUSED ? 0 : (size_t)B * Tk * KV;
    const size_t nout = (size_t)B * out_rows * CO, nlse = (size_t)B * NH * out_rows, nd = (size_t)B * NH * Tq;
    float *qkv = randv(nqkv, 1.0f), *kv = nkv ? randv(nkv, 1.0f) : NULL, *dy = randv(nout, 1.0f);
    int32_t *qpos = malloc((size_t)Tq * sizeof *qpos);
    for (int i = 0; i < Tq; i++) qpos[i] = Tq / 2 + i;  // cp rank 1 of 2: chunks 1 and 2 of 4, consecutive
    float *d_qkv = upf(qkv, nqkv), *d_kv = nkv ? upf(kv, nkv) : NULL, *d_dy = upf(dy, nout);
    int32_t *d_qpos = up(qpos, (size_t)Tq * sizeof *qpos);
    const tb_flash_view hv = tc_view(k, qkv, qpos, kv, Tq, Tk, out_rows, hs);
    const tb_flash_view dv = tc_view(k, d_qkv, d_qpos, d_kv, Tq, Tk, out_rows, hs);
    float *out = calloc(nout, 4), *lse = calloc(nlse, 4), *dq = calloc(nqkv, 4), *dkv = nkv ? calloc(nkv, 4) : dq;
    float *D = calloc(nd, 4);
    tb_flash_tiled_forward(out, lse, &hv, B, NH, G, hs, 1);
    tb_flash_tiled_backward(dq, dkv, D, dy, out, lse, &hv, B, NH, G, hs, 1);
    float *d_out = upf(NULL, nout), *d_lse = upf(NULL, nlse), *d_dq = upf(NULL, nqkv), *d_D = upf(NULL, nd);
    float *d_dkv = nkv ? upf(NULL, nkv) : d_dq;
    char what[96];
    OK(cuda_flash_attention_tc_forward(d_out, d_lse, &dv, B, NH, G, hs, ctx.stream));
    snprintf(what, sizeof what, "%s hs %d: out", name, hs);
    CLOSE(down(d_out, nout), out, nout, BF16_ATOL, BF16_RTOL, what);
    snprintf(what, sizeof what, "%s hs %d: lse", name, hs);
    CLOSE(down(d_lse, nlse), lse, nlse, BF16_ATOL, BF16_RTOL, what);
    cudaMemcpy(d_out, out, nout * 4, cudaMemcpyHostToDevice);  // the backward from the twin's forward
    cudaMemcpy(d_lse, lse, nlse * 4, cudaMemcpyHostToDevice);
    OK(cuda_flash_attention_tc_backward(d_dq, d_dkv, d_D, d_dy, d_out, d_lse, &dv, B, NH, G, hs, ctx.stream));
    snprintf(what, sizeof what, "%s hs %d: dq (dqkv when fused)", name, hs);
    CLOSE(down(d_dq, nqkv), dq, nqkv, BF16_ATOL, 2 * BF16_RTOL, what);
    if (nkv) {
        snprintf(what, sizeof what, "%s hs %d: dkv", name, hs);
        CLOSE(down(d_dkv, nkv), dkv, nkv, BF16_ATOL, 2 * BF16_RTOL, what);
    }
    void *frees[] = {d_qkv, d_kv, d_dy, d_qpos, d_out, d_lse, d_dq, d_D, nkv ? d_dkv : NULL};
    for (size_t i = 0; i < sizeof frees / sizeof *frees; i++) cudaFree(frees[i]);
    free(qkv), free(kv), free(dy), free(qpos), free(out), free(lse), free(dq), free(D);
    if (nkv) free(dkv);
}

TB_TEST(tensor_core_attention_matches_its_c_twin) {
    tensor_core_case(TC_FUSED, 150, 150, 150, 16, "fused causal");
    tensor_core_case(TC_FUSED, 130, 130, 130, 64, "fused causal");
    tensor_core_case(TC_FUSED, 70, 70, 70, 128, "fused causal");
    tensor_core_case(TC_CP, 80, 160, 80, 64, "cp view");
    tensor_core_case(TC_BLOCK, 70, 100, 90, 64, "ring block");
    const tb_flash_view v = tb_flash_view_fused(NULL, T, NH, G, 72, 1);
    TB_CHECK(cuda_flash_attention_tc_forward(NULL, NULL, &v, B, NH, G, 72, ctx.stream) == (int)cudaErrorInvalidValue,
             "hs 72 (not a multiple of 16) refused by the tensor-core launcher");
}

// Context parallelism's all-gather variant: cp rank 1 of 2's local queries (the zig-zag
// positions) against a whole sequence's K and V, and the data movement around it (exact).
TB_TEST(context_parallel_attention_and_data_movement) {
    enum { CP = 2, TQ = T / CP };
    const int QKV = (NH + 2 * G) * HS, KV = 2 * G * HS, CO = NH * HS;
    const size_t nqkv = (size_t)B * TQ * QKV, nkv = (size_t)B * T * KV, nlocal = (size_t)B * TQ * KV;
    const size_t nout = (size_t)B * TQ * CO, nlse = (size_t)B * NH * TQ;
    int32_t pos[TQ];
    cp_local_positions(T, CP, 1, pos);
    float *qkv = randv(nqkv, 1.0f), *kv = randv(nkv, 1.0f), *dy = randv(nout, 1.0f);
    float *out = malloc(nout * 4), *lse = malloc(nlse * 4), *dqkv = malloc(nqkv * 4), *dkv = malloc(nkv * 4);
    float *scratch = malloc(cpu_flash_attention_scratch_floats(T, HS, 1) * 4);
    float *d_qkv = upf(qkv, nqkv), *d_kv = upf(kv, nkv), *d_dy = upf(dy, nout), *d_out = upf(NULL, nout);
    float *d_lse = upf(NULL, nlse), *d_dqkv = upf(NULL, nqkv), *d_dkv = upf(NULL, nkv);
    int32_t *d_pos = up(pos, sizeof pos);
    cpu_flash_attention_cp_forward(out, lse, scratch, 1, qkv, pos, kv, B, TQ, T, NH, G, HS);
    OK(cuda_flash_attention_cp_forward(d_out, d_lse, d_qkv, d_pos, d_kv, B, TQ, T, NH, G, HS, ctx.stream));
    CLOSE(down(d_out, nout), out, nout, GEMM_ATOL, GEMM_RTOL, "cp attention out");
    CLOSE(down(d_lse, nlse), lse, nlse, GEMM_ATOL, GEMM_RTOL, "cp attention lse");
    cpu_flash_attention_cp_backward(dqkv, dkv, scratch, 1, dy, out, qkv, pos, kv, lse, B, TQ, T, NH, G, HS);
    OK(cuda_flash_attention_cp_backward(d_dqkv, d_dkv, d_dy, d_out, d_qkv, d_pos, d_kv, d_lse, B, TQ, T, NH, G, HS,
                                        ctx.stream));
    CLOSE(down(d_dqkv, nqkv), dqkv, nqkv, GEMM_ATOL, GEMM_RTOL, "cp attention dqkv (Q part; K, V zero)");
    CLOSE(down(d_dkv, nkv), dkv, nkv, GEMM_ATOL, GEMM_RTOL, "cp attention dkv");
    // the data movement: copies and one add per element, the CPU's bits (atol 0, rtol 0)
    float *packed = malloc(nlocal * 4), *d_packed = upf(NULL, nlocal);
    cpu_cp_pack_kv(packed, qkv, B, TQ, NH, G, HS);
    OK(cuda_cp_pack_kv(d_packed, d_qkv, B, TQ, NH, G, HS, ctx.stream));
    CLOSE(down(d_packed, nlocal), packed, nlocal, 0.0, 0.0, "cp pack_kv");
    float *grads = randv(nqkv, 1.0f), *d_grads = upf(grads, nqkv);  // dqkv += the K/V rows of `packed`
    cpu_cp_add_kv_grads(grads, packed, B, TQ, NH, G, HS);
    OK(cuda_cp_add_kv_grads(d_grads, d_packed, B, TQ, NH, G, HS, ctx.stream));
    CLOSE(down(d_grads, nqkv), grads, nqkv, 0.0, 0.0, "cp add_kv_grads");
    float *gathered = randv(nkv, 1.0f), *seq = malloc(nkv * 4), *back = malloc(nkv * 4);
    float *d_gathered = upf(gathered, nkv), *d_seq = upf(NULL, nkv), *d_back = upf(NULL, nkv);
    cpu_cp_rank_major_to_positions(seq, gathered, CP, B, TQ, KV);
    OK(cuda_cp_rank_major_to_positions(d_seq, d_gathered, CP, B, TQ, KV, ctx.stream));
    CLOSE(down(d_seq, nkv), seq, nkv, 0.0, 0.0, "cp rank-major to positions");
    cpu_cp_positions_to_rank_major(back, kv, CP, B, TQ, KV);
    OK(cuda_cp_positions_to_rank_major(d_back, d_kv, CP, B, TQ, KV, ctx.stream));
    CLOSE(down(d_back, nkv), back, nkv, 0.0, 0.0, "cp positions to rank-major");
    void *frees[] = {d_qkv, d_kv, d_dy, d_out, d_lse, d_dqkv, d_dkv, d_pos, d_packed, d_grads, d_gathered, d_seq, d_back};
    for (size_t i = 0; i < sizeof frees / sizeof *frees; i++) cudaFree(frees[i]);
    free(qkv), free(kv), free(dy), free(out), free(lse), free(dqkv), free(dkv), free(scratch), free(packed);
    free(grads), free(gathered), free(seq), free(back);
}

// The ring's pieces (cp_comm_type p2p): a diagonal block (causal by row) and a block of the
// second half of the queries against a whole chunk pair (every key), forward and backward —
// the backward adding into dq and dkv that already hold values, as the ring's steps do — and
// the merge of a partial out and lse into running ones.
TB_TEST(context_parallel_ring_blocks_and_merge) {
    enum { TQ = T / 2, S = TQ / 2 };
    const int QKV = (NH + 2 * G) * HS, KV = 2 * G * HS, CO = NH * HS;
    const size_t nqkv = (size_t)B * TQ * QKV, nkv = (size_t)B * TQ * KV, nout = (size_t)B * TQ * CO;
    const size_t nlse = (size_t)B * NH * TQ;
    float *qkv = randv(nqkv, 1.0f), *kv = randv(nkv, 1.0f), *dy = randv(nout, 1.0f);
    float *d_qkv = upf(qkv, nqkv), *d_kv = upf(kv, nkv), *d_dy = upf(dy, nout);
    float *scratch = malloc(cpu_flash_attention_scratch_floats(TQ, HS, 1) * 4);
    for (int causal = 1; causal >= 0; causal--) {
        // causal: all TQ rows against the chunk pair; otherwise the second half of the rows (from S)
        const int rows = causal ? TQ : S, row0 = causal ? 0 : S;
        cpu_flash_block blk = {qkv + (size_t)row0 * QKV, (size_t)TQ * QKV, kv, (size_t)TQ * KV, rows, TQ, rows, causal};
        const size_t no = (size_t)B * rows * CO, nl = (size_t)B * NH * rows;
        float *out = malloc(no * 4), *lse = malloc(nl * 4), *d_out = upf(NULL, no), *d_lse = upf(NULL, nl);
        char what[64];
        cpu_flash_attention_block_forward(out, lse, scratch, 1, &blk, B, NH, G, HS);
        OK(cuda_flash_attention_block_forward(d_out, d_lse, d_qkv + (size_t)row0 * QKV, blk.q_batch_stride, d_kv,
                                              blk.kv_batch_stride, rows, TQ, rows, causal, B, NH, G, HS, ctx.stream));
        snprintf(what, sizeof what, "ring block out (causal %d)", causal);
        CLOSE(down(d_out, no), out, no, GEMM_ATOL, GEMM_RTOL, what);
        snprintf(what, sizeof what, "ring block lse (causal %d)", causal);
        CLOSE(down(d_lse, nl), lse, nl, GEMM_ATOL, GEMM_RTOL, what);
        float *dq = randv(nqkv, 1.0f), *dkv = randv(nkv, 1.0f);  // the running sums the block adds to
        float *d_dq = upf(dq, nqkv), *d_dkv = upf(dkv, nkv), *d_dyb = d_dy + (size_t)row0 * CO;
        cpu_flash_attention_block_backward(dq + (size_t)row0 * QKV, dkv, scratch, 1, dy + (size_t)row0 * CO, out, lse,
                                           &blk, B, NH, G, HS);
        OK(cuda_flash_attention_block_backward(d_dq + (size_t)row0 * QKV, d_dkv, d_dyb, d_out, d_lse,
                                               d_qkv + (size_t)row0 * QKV, blk.q_batch_stride, d_kv,
                                               blk.kv_batch_stride, rows, TQ, rows, causal, B, NH, G, HS, ctx.stream));
        snprintf(what, sizeof what, "ring block dq, accumulated (causal %d)", causal);
        CLOSE(down(d_dq, nqkv), dq, nqkv, GEMM_ATOL, GEMM_RTOL, what);
        snprintf(what, sizeof what, "ring block dkv, accumulated (causal %d)", causal);
        CLOSE(down(d_dkv, nkv), dkv, nkv, GEMM_ATOL, GEMM_RTOL, what);
        cudaFree(d_out), cudaFree(d_lse), cudaFree(d_dq), cudaFree(d_dkv);
        free(out), free(lse), free(dq), free(dkv);
    }
    // the merge: rows S.. of a running out/lse with a partial block's
    float *out = randv(nout, 1.0f), *lse = randv(nlse, 2.0f), *pout = randv((size_t)B * S * CO, 1.0f);
    float *plse = randv((size_t)B * NH * S, 2.0f);
    float *d_o = upf(out, nout), *d_l = upf(lse, nlse), *d_po = upf(pout, (size_t)B * S * CO);
    float *d_pl = upf(plse, (size_t)B * NH * S);
    cpu_cp_merge_partial(out, lse, pout, plse, B, NH, TQ, S, S, HS);
    OK(cuda_cp_merge_partial(d_o, d_l, d_po, d_pl, B, NH, TQ, S, S, HS, ctx.stream));
    CLOSE(down(d_o, nout), out, nout, F32_ATOL, F32_RTOL, "ring merge out");
    CLOSE(down(d_l, nlse), lse, nlse, F32_ATOL, F32_RTOL, "ring merge lse");
    cudaFree(d_o), cudaFree(d_l), cudaFree(d_po), cudaFree(d_pl), cudaFree(d_qkv), cudaFree(d_kv), cudaFree(d_dy);
    free(out), free(lse), free(pout), free(plse), free(qkv), free(kv), free(dy), free(scratch);
}

TB_TEST(moe_router_and_permutations) {
    enum { E = 8, K = 2, S = 2, TS = N / S, NK = N * K };
    cudaStream_t s = ctx.stream;
    float *logits = malloc((size_t)N * E * 4), *scores = malloc((size_t)N * E * 4), *probs = malloc(NK * 4);
    int32_t *topk = malloc(NK * 4), *gpu_topk = malloc(NK * 4);
    for (int n = 0; n < N; n++)  // distinct, 0.5 apart: no ties, no reordering by an ulp
        for (int e = 0; e < E; e++) logits[n * E + e] = (float)((n * 5 + e * 3) % E) * 0.5f - 1.5f + 0.01f * frand();
    float *d_logits = upf(logits, (size_t)N * E), *d_scores = upf(NULL, (size_t)N * E), *d_probs = upf(NULL, NK);
    int32_t *d_topk = up(NULL, NK * 4);
    static const struct {
        int k, sigmoid, pre_softmax;
        const char *name;
    } modes[] = {{K, 0, 0, "softmax"}, {K, 0, 1, "pre-softmax"}, {K, 1, 0, "sigmoid top-2"}, {1, 1, 0, "sigmoid top-1"}};
    for (size_t m = 0; m < sizeof modes / sizeof *modes; m++) {
        const int k = modes[m].k;
        cpu_moe_router_forward(logits, scores, topk, probs, N, E, k, modes[m].sigmoid, modes[m].pre_softmax);
        OK(cuda_moe_router_forward(d_logits, d_scores, d_topk, d_probs, N, E, k, modes[m].sigmoid, modes[m].pre_softmax,
                                   s));
        cudaStreamSynchronize(s);
        cudaMemcpy(gpu_topk, d_topk, (size_t)N * k * 4, cudaMemcpyDeviceToHost);
        TB_CHECK(memcmp(gpu_topk, topk, (size_t)N * k * 4) == 0, "%s: the top-k choices differ", modes[m].name);
        CLOSE(down(d_scores, (size_t)N * E), scores, (size_t)N * E, F32_ATOL, F32_RTOL, modes[m].name);
        CLOSE(down(d_probs, (size_t)N * k), probs, (size_t)N * k, F32_ATOL, F32_RTOL, modes[m].name);
        // backward from the same forward (its saved scores, topk, probs), with the aux loss's counts
        int32_t counts[S * E];
        for (int i = 0; i < S * E; i++) counts[i] = (i * 7) % 11;
        float *dp = randv((size_t)N * k, 1.0f), *dl = malloc((size_t)N * E * 4);
        int32_t *d_counts = up(counts, sizeof counts);
        float *d_dp = upf(dp, (size_t)N * k), *d_dl = upf(NULL, (size_t)N * E);
        cpu_moe_router_backward(dl, scores, topk, probs, dp, counts, TS, 3e-3, N, E, k, modes[m].sigmoid,
                                modes[m].pre_softmax);
        OK(cuda_moe_router_backward(d_dl, d_scores, d_topk, d_probs, d_dp, d_counts, TS, 3e-3, N, E, k,
                                    modes[m].sigmoid, modes[m].pre_softmax, s));
        CLOSE(down(d_dl, (size_t)N * E), dl, (size_t)N * E, F32_ATOL, F32_RTOL, modes[m].name);
        // the aux loss's column sums per sequence (sigmoid with k > 1: normalised scores), both
        // over the GPU's scores: the sums in double agree to rounding only on equal inputs (the
        // scores themselves differ from the CPU's by an ulp of expf, ~1e-8 relative in a sum)
        const int normalise = modes[m].sigmoid && k > 1;
        double col[S * E], gcol[S * E], *d_col = up(NULL, sizeof col);
        float *gpu_scores = down(d_scores, (size_t)N * E);
        cpu_moe_aux_score_sums(col, gpu_scores, S, TS, E, normalise);
        free(gpu_scores);
        OK(cuda_moe_aux_score_sums(d_col, d_scores, S, TS, E, normalise, s));
        cudaStreamSynchronize(s);
        cudaMemcpy(gcol, d_col, sizeof gcol, cudaMemcpyDeviceToHost);
        double worst = 0;
        for (int i = 0; i < S * E; i++) worst = fmax(worst, fabs(gcol[i] - col[i]) / (fabs(col[i]) + 1e-30));
        TB_CHECK(worst < 1e-9, "%s: aux score sums off by %g relative", modes[m].name, worst);
        cudaFree(d_counts), cudaFree(d_dp), cudaFree(d_dl), cudaFree(d_col);
        free(dp), free(dl);
    }
    // the permutations: rows gathered by index (-1: a zero padding row), scattered back
    // weighted by probs (-1: a dropped choice)
    int32_t idx[NK], pos[NK];
    for (int r = 0; r < NK; r++) idx[r] = r % 3 == 2 ? -1 : (r * 11) % N;
    for (int i = 0; i < NK; i++) pos[i] = i % 5 == 3 ? -1 : (i * 7) % NK;
    float *x = randv((size_t)N * C, 1.0f), *y = randv((size_t)NK * C, 1.0f), *pr = randv(NK, 1.0f);
    float *dout = randv((size_t)N * C, 1.0f), *dinp = randv((size_t)N * C, 1.0f);
    float *out = malloc((size_t)NK * C * 4), *comb = malloc((size_t)N * C * 4), *dy = calloc((size_t)NK * C, 4);
    float *dpr = malloc(NK * 4);
    int32_t *d_idx = up(idx, sizeof idx), *d_pos = up(pos, sizeof pos);
    float *d_x = upf(x, (size_t)N * C), *d_y = upf(y, (size_t)NK * C), *d_pr = upf(pr, NK), *d_out = upf(NULL, (size_t)NK * C);
    float *d_comb = upf(NULL, (size_t)N * C), *d_dout = upf(dout, (size_t)N * C), *d_dinp = upf(dinp, (size_t)N * C);
    float *d_dy = upf(NULL, (size_t)NK * C), *d_dpr = upf(NULL, NK);
    cpu_moe_permute(out, x, idx, NK, C);
    OK(cuda_moe_permute(d_out, d_x, d_idx, NK, C, s));
    CLOSE(down(d_out, (size_t)NK * C), out, (size_t)NK * C, 0.0, 0.0, "moe permute");
    cpu_moe_permute_backward(dinp, y, pos, N, K, C);
    OK(cuda_moe_permute_backward(d_dinp, d_y, d_pos, N, K, C, s));
    CLOSE(down(d_dinp, (size_t)N * C), dinp, (size_t)N * C, F32_ATOL, F32_RTOL, "moe permute backward");
    cpu_moe_unpermute(comb, y, pos, pr, N, K, C);
    OK(cuda_moe_unpermute(d_comb, d_y, d_pos, d_pr, N, K, C, s));
    CLOSE(down(d_comb, (size_t)N * C), comb, (size_t)N * C, F32_ATOL, F32_RTOL, "moe unpermute");
    cpu_moe_unpermute_backward(dy, dpr, dout, y, pos, pr, N, K, C);
    OK(cuda_moe_unpermute_backward(d_dy, d_dpr, d_dout, d_y, d_pos, d_pr, N, K, C, s));
    CLOSE(down(d_dy, (size_t)NK * C), dy, (size_t)NK * C, F32_ATOL, F32_RTOL, "moe unpermute backward: d_y");
    CLOSE(down(d_dpr, NK), dpr, NK, F32_ATOL, F32_RTOL, "moe unpermute backward: d_probs");
    void *frees[] = {d_logits, d_scores, d_probs, d_topk, d_idx, d_pos, d_x, d_y, d_pr, d_out, d_comb, d_dout, d_dinp,
                     d_dy, d_dpr};
    for (size_t i = 0; i < sizeof frees / sizeof *frees; i++) cudaFree(frees[i]);
    free(logits), free(scores), free(probs), free(topk), free(gpu_topk), free(x), free(y), free(pr), free(dout);
    free(dinp), free(out), free(comb), free(dy), free(dpr);
}

TB_TEST(event_timing) {
    tb_cuda_timer t;
    tb_error err;
    TB_REQUIRE(tb_cuda_timer_init(&t, &err) == 0, "%s", err.msg);
    const size_t n = (size_t)1 << 22;
    float *d = upf(NULL, n);
    TB_REQUIRE(tb_cuda_timer_start(&t, ctx.stream) == 0, "recording the start event");
    for (int i = 0; i < 10; i++) TB_REQUIRE(cuda_gelu_forward(d, d, n, ctx.stream) == 0, "gelu launch");
    TB_REQUIRE(tb_cuda_timer_stop(&t, ctx.stream) == 0, "recording the stop event");
    double ms = tb_cuda_timer_elapsed_ms(&t);
    TB_CHECK(ms > 0.0 && ms < 10000.0, "10 GELUs over 4M floats timed %g ms", ms);
    printf("  10 x gelu over %zu floats: %.3f ms (CUDA events)\n", n, ms);
    cudaFree(d);
    tb_cuda_timer_free(&t);
}

int main(void) {
    char why[256] = "";
    int n = tb_cuda_device_count(why, sizeof why);
    if (n <= 0) {
        printf("SKIP: no GPU (%s)\n", why);
        return 77;
    }
    tb_error err;
    if (tb_cuda_context_init(&ctx, 0, 1, &err) != 0) {
        printf("FAIL: %s\n", err.msg);
        return 1;
    }
    struct cudaDeviceProp prop;
    cudaGetDeviceProperties(&prop, 0);
    printf("device 0 of %d: %s (sm_%d%d)\n", n, prop.name, prop.major, prop.minor);
    TB_RUN(norms);
    TB_RUN(activations_and_residual);
    TB_RUN(rope_and_embedding);
    TB_RUN(vocab_parallel_cross_entropy);
    TB_RUN(adamw);
    TB_RUN(matmul_cublaslt);
    TB_RUN(flash_attention_gqa);
    TB_RUN(tensor_core_attention_matches_its_c_twin);
    TB_RUN(local_attention_gqa);
    TB_RUN(context_parallel_attention_and_data_movement);
    TB_RUN(context_parallel_ring_blocks_and_merge);
    TB_RUN(moe_router_and_permutations);
    TB_RUN(event_timing);
    tb_cuda_context_free(&ctx);
    return tb_test_summary();
}
#endif
