// bench_cuda — the CUDA backend's pieces on GPT-2 124M's shapes (C 768, 12 layers, 12 heads
// of 64, padded vocabulary 50304), timed with CUDA events: each linear layer's GEMMs
// (cuBLASLt; forward in fp32 and with bf16 operands, backward in fp32) and the flash
// attention core forward + backward.
//
//   build/bin/bench_cuda [--batch B] [--seq T] [--peak-tflops P] [--reps N]
//   (default: B 16, T 1024 — llm.c's GPT-2 124M run — P 0: no % of peak, 10 repetitions)
//
// It prints each op's median time and TFLOP/s, and the time of one training step's GEMMs and
// attention alone (3× each forward GEMM's FLOPs at the measured rates: forward, dinp, dweight),
// with the tok/s that time would allow: an upper bound, not a training throughput —
// `--device cuda` training is not wired yet (docs/CUDA.md). Exit 77 without a GPU
// or without the CUDA build.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_device.h"

#ifndef TB_HAVE_CUDA_BACKEND
int main(void) {
    fprintf(stderr, "bench_cuda: this build has no CUDA backend (nvcc and cuBLASLt were not found at configure time)\n");
    return 77;
}
#else

#include <cuda_runtime.h>

#include "backend/cuda/cuda_kernels.h"
#include "backend/cuda/gemm.h"

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void *dev_zero(size_t bytes) {
    void *p = NULL;
    if (cudaMalloc(&p, bytes) != cudaSuccess) {
        fprintf(stderr, "bench_cuda: cudaMalloc of %zu bytes failed\n", bytes);
        exit(1);
    }
    cudaMemset(p, 0, bytes);
    cudaDeviceSynchronize();  // the timed work runs on a non-blocking stream
    return p;
}

typedef enum { OP_FWD_F32, OP_FWD_BF16, OP_BWD_F32, OP_ATTENTION } op_kind;

typedef struct {
    tb_cuda_context *ctx;
    op_kind kind;
    int N, C, OC;                 // linear
    int B, T, NH, hs;             // attention
    void *a, *b, *c, *d, *e, *f;  // buffers
} op;

static int run_op(op *o, tb_error *err) {
    switch (o->kind) {
    case OP_FWD_F32:
        return tb_cuda_matmul_forward(o->ctx, o->c, TB_CUDA_F32, o->a, o->b, TB_CUDA_F32, o->d, o->N, o->C, o->OC, err);
    case OP_FWD_BF16:
        return tb_cuda_matmul_forward(o->ctx, o->c, TB_CUDA_BF16, o->a, o->b, TB_CUDA_BF16, o->d, o->N, o->C, o->OC,
                                      err);
    case OP_BWD_F32:
        return tb_cuda_matmul_backward(o->ctx, o->e, o->f, o->d, o->c, o->a, o->b, o->N, o->C, o->OC, err);
    case OP_ATTENTION: {
        int st = cuda_flash_attention_forward(o->b, o->c, o->a, o->B, o->T, o->NH, o->NH, o->hs, o->ctx->stream);
        if (st == 0)
            st = cuda_flash_attention_backward(o->e, o->d, o->b, o->a, o->c, o->B, o->T, o->NH, o->NH, o->hs,
                                               o->ctx->stream);
        if (st) tb_fail(err, "flash attention: %s", cudaGetErrorString((cudaError_t)st));
        return st;
    }
    }
    return -1;
}

// median ms of reps runs (after one warm-up)
static double time_op(op *o, tb_cuda_timer *t, int reps) {
    tb_error err;
    if (run_op(o, &err) != 0) {
        fprintf(stderr, "bench_cuda: %s\n", err.msg);
        exit(1);
    }
    double ms[64];
    for (int r = 0; r < reps; r++) {
        if (tb_cuda_timer_start(t, o->ctx->stream) != 0) ms[r] = -1.0;
        run_op(o, &err);
        if (tb_cuda_timer_stop(t, o->ctx->stream) != 0) ms[r] = -1.0;
        else ms[r] = tb_cuda_timer_elapsed_ms(t);
        if (ms[r] < 0) {
            fprintf(stderr, "bench_cuda: op %d: the CUDA events could not time it\n", (int)o->kind);
            exit(1);
        }
    }
    qsort(ms, (size_t)reps, sizeof *ms, cmp_double);
    return ms[reps / 2];
}

int main(int argc, char **argv) {
    int B = 16, T = 1024, reps = 10;
    double peak = 0.0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v) goto usage;
        if (!strcmp(a, "--batch")) B = atoi(v);
        else if (!strcmp(a, "--seq")) T = atoi(v);
        else if (!strcmp(a, "--reps")) reps = atoi(v);
        else if (!strcmp(a, "--peak-tflops")) peak = atof(v);
        else goto usage;
        i++;
    }
    if (B < 1 || T < 1 || reps < 1 || reps > 64 || peak < 0) goto usage;
    char why[256] = "";
    if (tb_cuda_device_count(why, sizeof why) <= 0) {
        fprintf(stderr, "bench_cuda: no GPU (%s)\n", why);
        return 77;
    }
    tb_cuda_context ctx;
    tb_cuda_timer timer;
    tb_error err;
    if (tb_cuda_context_init(&ctx, 0, 1, &err) != 0 || tb_cuda_timer_init(&timer, &err) != 0) {
        fprintf(stderr, "bench_cuda: %s\n", err.msg);
        return 1;
    }
    struct cudaDeviceProp prop;
    cudaGetDeviceProperties(&prop, 0);
    const int C = 768, L = 12, NH = 12, hs = 64, Vp = 50304, N = B * T;
    printf("bench_cuda: %s, GPT-2 124M shapes, B %d, T %d (N %d tokens), median of %d\n", prop.name, B, T, N, reps);
    struct { const char *name; int C, OC, per_step; } lin[] = {
        {"qkv", C, 3 * C, L}, {"attn proj", C, C, L}, {"fc", C, 4 * C, L}, {"fc proj", 4 * C, C, L}, {"lm head", C, Vp, 1},
    };
    double step_ms_f32 = 0.0, step_ms_bf16 = 0.0, step_flops = 0.0;
    printf("  %-10s %8s %8s %10s %10s %10s %10s\n", "gemm", "C", "OC", "fwd f32", "fwd bf16", "bwd f32", "bf16 TF/s");
    for (size_t i = 0; i < sizeof lin / sizeof *lin; i++) {
        const int c = lin[i].C, oc = lin[i].OC;
        op o = {.ctx = &ctx, .N = N, .C = c, .OC = oc};
        o.a = dev_zero((size_t)N * c * 4), o.b = dev_zero((size_t)oc * c * 4), o.c = dev_zero((size_t)N * oc * 4);
        o.d = dev_zero((size_t)oc * 4), o.e = dev_zero((size_t)N * c * 4), o.f = dev_zero((size_t)oc * c * 4);
        o.kind = OP_FWD_F32;
        double f32 = time_op(&o, &timer, reps);
        o.kind = OP_FWD_BF16;  // the fp32 buffers hold at least as many bf16 values (the bias: zeros either way)
        double bf16 = time_op(&o, &timer, reps);
        o.kind = OP_BWD_F32;
        double bwd = time_op(&o, &timer, reps);
        const double flops = 2.0 * N * c * oc;
        printf("  %-10s %8d %8d %8.3fms %8.3fms %8.3fms %10.1f\n", lin[i].name, c, oc, f32, bf16, bwd,
               flops / (bf16 * 1e-3) / 1e12);
        step_ms_f32 += lin[i].per_step * (f32 + bwd);
        step_ms_bf16 += lin[i].per_step * 3.0 * bf16;  // dinp and dweight at the forward's bf16 rate
        step_flops += lin[i].per_step * 3.0 * flops;
        cudaFree(o.a), cudaFree(o.b), cudaFree(o.c), cudaFree(o.d), cudaFree(o.e), cudaFree(o.f);
    }
    op at = {.ctx = &ctx, .kind = OP_ATTENTION, .B = B, .T = T, .NH = NH, .hs = hs};
    const size_t nqkv = (size_t)N * 3 * C, nout = (size_t)N * C;
    at.a = dev_zero(nqkv * 4), at.b = dev_zero(nout * 4), at.c = dev_zero((size_t)B * NH * T * 4);
    at.d = dev_zero(nout * 4), at.e = dev_zero(nqkv * 4);
    double att = time_op(&at, &timer, reps < 3 ? reps : 3);
    printf("  flash attention fwd+bwd (fp32, one warp per row): %.3f ms per layer\n", att);
    cudaFree(at.a), cudaFree(at.b), cudaFree(at.c), cudaFree(at.d), cudaFree(at.e);
    const double with_att_f32 = step_ms_f32 + L * att, with_att_bf16 = step_ms_bf16 + L * att;
    printf("  one step's GEMMs: fp32 %.2f ms, bf16 %.2f ms (%.1f TFLOP/s%s", step_ms_f32, step_ms_bf16,
           step_flops / (step_ms_bf16 * 1e-3) / 1e12, peak > 0 ? "" : ")\n");
    if (peak > 0) printf(", %.1f%% of %.1f bf16 peak)\n", 100.0 * step_flops / (step_ms_bf16 * 1e-3) / 1e12 / peak, peak);
    // llm.c's reference: its GPT-2 124M run (scripts/run_gpt2_124M.sh, llm.c discussion #481)
    // takes 524,288 tokens a step in ~300 ms on 8 A100 80GB SXM (bf16, cuDNN attention):
    // 524,288 / 0.3 s / 8 = ~218k tok/s per GPU.
    printf("  GEMMs + attention alone: fp32 %.2f ms, bf16 %.2f ms -> at most %.0f tok/s (bf16), %.0f tok/s (fp32): "
           "an upper bound, not training (llm.c trains it at ~218k tok/s per A100, bf16)\n",
           with_att_f32, with_att_bf16, N / (with_att_bf16 * 1e-3), N / (with_att_f32 * 1e-3));
    tb_cuda_timer_free(&timer);
    tb_cuda_context_free(&ctx);
    return 0;
usage:
    fprintf(stderr, "usage: bench_cuda [--batch B] [--seq T] [--peak-tflops P] [--reps N (1..64)]\n");
    return 2;
}
#endif
