// bench_gpt — whole-step training throughput next to OpenBLAS sgemm on the same GEMMs,
// both measured in this run on this machine.
//
//   build/bin/bench_gpt                       GPT-2 124M shapes, micro batch 4 x seq 64
//   build/bin/bench_gpt --seq-length 256      (any pretrain_gpt flag is accepted)
//
// 1. Trains --train-iters steps (synthetic data) and takes the median step time of all
//    but the first (warm-up): tokens/s and the model FLOP rate, llm.c's estimate of
//    6·N + 12·L·C·T FLOPs per token.
// 2. Times cblas_sgemm alone on every GEMM shape one step issues (forward, dinp and dweight
//    of qkv, proj, fc1, fc2 and the output layer; the per-head attention GEMMs), each with
//    the engine's transposes and thread count, and sums them weighted by how often a step
//    issues them: the sgemm rate is those FLOPs over that time — the rate a step would
//    reach if it were nothing but its GEMMs.
// The ratio of the two says how much of the GEMM rate the whole step keeps.
#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/kernels.h"
#include "config/config.h"
#include "runtime/ranges.h"
#include "core/xalloc.h"
#include "training.h"

typedef struct gemm {
    const char *what;
    int ta, tb;          // transposed A / B (row-major), as the engine calls it
    int M, N, K;
    double per_step;     // calls per training step
    double seconds;      // measured, per call
} gemm;

static double time_gemm(const gemm *g) {
    int lda = g->ta ? g->M : g->K, ldb = g->tb ? g->K : g->N;
    size_t a = (size_t)g->M * g->K, b = (size_t)g->K * g->N, c = (size_t)g->M * g->N;
    float *A = tb_xmalloc(a * sizeof(float), "A"), *B = tb_xmalloc(b * sizeof(float), "B"),
          *C = tb_xcalloc(c, sizeof(float), "C");
    for (size_t i = 0; i < a; i++) A[i] = (float)(i % 13) * 0.01f;
    for (size_t i = 0; i < b; i++) B[i] = (float)(i % 7) * 0.01f;
    double flops = 2.0 * g->M * g->N * g->K;
    int reps = (int)fmax(3.0, fmin(200.0, 2e9 / flops));  // ~a few ms of work per timing
    double best = INFINITY;
    for (int trial = 0; trial < 5; trial++) {
        int64_t t0 = tb_now_ns();
        for (int r = 0; r < reps; r++)
            cblas_sgemm(CblasRowMajor, g->ta ? CblasTrans : CblasNoTrans, g->tb ? CblasTrans : CblasNoTrans, g->M,
                        g->N, g->K, 1.0f, A, lda, B, ldb, 0.0f, C, g->N);
        double dt = (double)(tb_now_ns() - t0) / 1e9 / reps;
        best = dt < best ? dt : best;
    }
    free(A), free(B), free(C);
    return best;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
    cpu_runtime_select(argv);
    tb_config cfg;
    tb_error err;
    int help = 0;
    config_defaults(&cfg);
    // GPT-2 124M shapes, llm.c's CPU batch
    cfg.num_layers = 12, cfg.hidden_size = 768, cfg.num_attention_heads = 12, cfg.vocab_size = 50257;
    cfg.seq_length = 64, cfg.micro_batch_size = 4, cfg.train_iters = 6;
    if (config_parse_args(&cfg, argc, argv, &help, &err) != 0) {
        fprintf(stderr, "bench_gpt: %s\n", err.msg);
        return 2;
    }
    if (help) {
        printf("bench_gpt: pretrain_gpt's flags; defaults are GPT-2 124M, micro batch 4, seq 64, 6 steps\n\n");
        config_print_help(stdout, "bench_gpt");
        return 0;
    }
    config_resolve(&cfg);
    if (config_validate(&cfg, &err) != 0) {
        fprintf(stderr, "bench_gpt: invalid configuration:\n%s\n", err.msg);
        return 2;
    }
    if (cfg.device == TB_DEVICE_CUDA) {  // its in-process trainer and sgemm timings are the CPU's
        fprintf(stderr, "bench_gpt: --device cuda: not supported yet (bench_gpt times the CPU backend and "
                        "OpenBLAS; on a GPU run pretrain_gpt --device cuda --peak-tflops P, whose metrics give "
                        "tok/s and MFU, and bench_cuda for the GEMMs and attention alone)\n");
        return 2;
    }
    if (cfg.train_iters < 2) {
        fprintf(stderr, "bench_gpt: --train-iters must be at least 2 (the first step is warm-up)\n");
        return 2;
    }
    cpu_set_num_threads(cfg.num_threads);

    printf("bench_gpt:");
    for (int i = 0; i < argc; i++) printf(" %s", argv[i]);
    printf("\nBLAS: %s, %d threads\n", cpu_blas_name(), cpu_get_num_threads());

    // 1. the whole training step
    tb_single_rank single;
    tb_rank *rk = rank_init_single(&single, &cfg);
    tb_allocator_init(rk->mem, 0, NULL, NULL);
    tb_allocator_set_caching(rk->mem, 1);
    tb_trainer tr;
    if (trainer_init(&tr, &cfg, rk, &err) != 0) {
        fprintf(stderr, "bench_gpt: %s\n", err.msg);
        return 1;
    }
    const double tokens = (double)cfg.global_batch_size * cfg.seq_length;
    const double flops_per_token =
        gpt_flops_per_token((int64_t)tr.models[0].num_parameters, cfg.num_layers, cfg.hidden_size, cfg.seq_length);
    double *ms = tb_xcalloc((size_t)cfg.train_iters, sizeof(double), "step times");
    for (int s = 1; s <= cfg.train_iters; s++) {
        int64_t t0 = tb_now_ns();
        tb_step_result r = train_step(&tr, s);
        ms[s - 1] = (double)(tb_now_ns() - t0) / 1e6;
        printf("  step %d: loss %.4f, %.1f ms%s\n", s, r.loss, ms[s - 1], s == 1 ? " (warm-up, not counted)" : "");
    }
    qsort(ms + 1, (size_t)cfg.train_iters - 1, sizeof(double), cmp_double);
    double step_ms = ms[cfg.train_iters / 2];  // median of steps 2..n
    const int L = cfg.num_layers, N = cfg.micro_batch_size * cfg.seq_length, T = cfg.seq_length;
    const tb_layer_dims d = tr.models[0].block.d;
    const int Vp = cfg.padded_vocab_size, BH = cfg.micro_batch_size * cfg.num_attention_heads;
    const int selective = cfg.recompute_granularity == TB_RECOMPUTE_SELECTIVE;
    const double M = cfg.num_microbatches;
    const double num_parameters = (double)tr.models[0].num_parameters;
    trainer_free(&tr);
    tb_allocator_release_cache(rk->mem);

    // 2. sgemm alone on the step's GEMM shapes
    gemm gemms[] = {
        {"qkv forward", 0, 1, N, d.QKV, d.C, L * M, 0},
        {"qkv dinp", 0, 0, N, d.C, d.QKV, L * M, 0},
        {"qkv dweight", 1, 0, d.QKV, d.C, N, L * M, 0},
        {"proj forward", 0, 1, N, d.C, d.C, L * M, 0},
        {"proj dinp", 0, 0, N, d.C, d.C, L * M, 0},
        {"proj dweight", 1, 0, d.C, d.C, N, L * M, 0},
        {"fc1 forward", 0, 1, N, d.F1, d.C, L * M, 0},
        {"fc1 dinp", 0, 0, N, d.C, d.F1, L * M, 0},
        {"fc1 dweight", 1, 0, d.F1, d.C, N, L * M, 0},
        {"fc2 forward", 0, 1, N, d.C, d.F, L * M, 0},
        {"fc2 dinp", 0, 0, N, d.F, d.C, L * M, 0},
        {"fc2 dweight", 1, 0, d.C, d.F, N, L * M, 0},
        {"output layer forward", 0, 1, N, Vp, d.C, M, 0},
        {"output layer dinp", 0, 0, N, d.C, Vp, M, 0},
        {"output layer dweight", 1, 0, Vp, d.C, N, M, 0},
        {"attention QK^T (per head)", 0, 1, T, T, d.hs, (double)L * M * BH * (2 + selective), 0},
        {"attention PV, dQ (per head)", 0, 0, T, d.hs, T, (double)L * M * BH * 2, 0},
        {"attention dV, dK (per head)", 1, 0, T, d.hs, T, (double)L * M * BH * 2, 0},
    };
    const int ngemms = (int)(sizeof gemms / sizeof *gemms);
    double gemm_flops = 0, gemm_seconds = 0;
    printf("\nsgemm alone on the step's shapes (M x N x K, row-major, as the engine calls them):\n");
    printf("  %-28s %5s %5s %6s %6s %6s %9s %10s\n", "gemm", "transA", "transB", "M", "N", "K", "per step", "GFLOP/s");
    for (int i = 0; i < ngemms; i++) {
        gemm *g = &gemms[i];
        g->seconds = time_gemm(g);
        double f = 2.0 * g->M * g->N * g->K;
        gemm_flops += f * g->per_step;
        gemm_seconds += g->seconds * g->per_step;
        printf("  %-28s %5s %5s %6d %6d %6d %9.0f %10.1f\n", g->what, g->ta ? "T" : "N", g->tb ? "T" : "N", g->M,
               g->N, g->K, g->per_step, f / g->seconds / 1e9);
    }
    double sgemm_rate = gemm_flops / gemm_seconds / 1e9;
    double model_rate = flops_per_token * tokens / (step_ms / 1e3) / 1e9;

    printf("\nGPT %d layers, hidden %d, heads %d, vocab %d (padded %d), %.1fM parameters; micro batch %d x seq %d, "
           "%d microbatch(es)\n",
           L, cfg.hidden_size, cfg.num_attention_heads, cfg.vocab_size, Vp, num_parameters / 1e6,
           cfg.micro_batch_size, T, cfg.num_microbatches);
    printf("  whole training step (median of %d): %.1f ms, %.1f tokens/s\n", cfg.train_iters - 1, step_ms,
           tokens / (step_ms / 1e3));
    printf("  model FLOP rate (6N + 12LCT per token): %.1f GFLOP/s\n", model_rate);
    printf("  sgemm on the same GEMMs, same run:      %.1f GFLOP/s (%.1f ms of pure GEMM per step)\n", sgemm_rate,
           gemm_seconds * 1e3);
    printf("  whole step / sgemm: %.0f%%\n", 100.0 * model_rate / sgemm_rate);
    free(ms);
    return 0;
}
