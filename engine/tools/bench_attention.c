// bench_attention — the two attention cores (transformer/spec.h) on the same inputs in the
// same run: local DotProductAttention (T×T probabilities, BLAS over the whole sequence)
// and flash (blocked, online softmax), forward + backward, causal, at each sequence length,
// with what each saves for backward.
//
//   build/bin/bench_attention [--batch B] [--heads NH] [--head-size HS] [--reps N] T...
//   (default: batch 2, 12 heads of 64 — GPT-2 124M's — 5 repetitions, T 64 128 256 512 1024)
//
// Prints the median forward+backward time of each core, their ratio, and the bytes each
// saves (local: B·NH·T² probabilities; flash: B·NH·T log-sum-exps).
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/kernels.h"
#include "runtime/ranges.h"
#include "core/xalloc.h"

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static int parse_int(const char *flag, const char *text, int lo, int hi, int *out) {
    char *end;
    errno = 0;
    long v = strtol(text, &end, 10);
    if (errno || end == text || *end || v < lo || v > hi) {
        fprintf(stderr, "bench_attention: %s '%s': want an integer in [%d, %d]\n", flag, text, lo, hi);
        return -1;
    }
    *out = (int)v;
    return 0;
}

int main(int argc, char **argv) {
    cpu_runtime_select(argv);
    int B = 2, NH = 12, hs = 64, reps = 5, Ts[32], nT = 0;
    for (int i = 1; i < argc; i++) {
        int *target = !strcmp(argv[i], "--batch") ? &B : !strcmp(argv[i], "--heads") ? &NH
                      : !strcmp(argv[i], "--head-size") ? &hs : !strcmp(argv[i], "--reps") ? &reps : NULL;
        if (target) {
            if (i + 1 >= argc) return fprintf(stderr, "bench_attention: %s needs a value\n", argv[i]), 2;
            if (parse_int(argv[i], argv[i + 1], 1, 1 << 16, target) != 0) return 2;
            i++;
        } else if (argv[i][0] == '-') {
            return fprintf(stderr, "bench_attention: unknown option '%s'\n", argv[i]), 2;
        } else {
            if (nT == 32) return fprintf(stderr, "bench_attention: at most 32 sequence lengths\n"), 2;
            if (parse_int("T", argv[i], 1, 1 << 16, &Ts[nT]) != 0) return 2;
            nT++;
        }
    }
    if (nT == 0) {
        static const int dflt[] = {64, 128, 256, 512, 1024};
        for (nT = 0; nT < 5; nT++) Ts[nT] = dflt[nT];
    }
    cpu_set_num_threads(0);
    const int threads = cpu_get_num_threads(), G = NH;
    printf("attention cores, forward + backward, causal: batch %d, %d heads of %d, %d threads, BLAS %s; median of %d\n\n",
           B, NH, hs, threads, cpu_blas_name(), reps);
    printf("%6s %12s %12s %8s %16s %16s\n", "T", "local ms", "flash ms", "flash/local", "local saves", "flash saves");
    for (int t = 0; t < nT; t++) {
        const int T = Ts[t], QKV = (NH + 2 * G) * hs;
        const size_t nqkv = (size_t)B * T * QKV, nout = (size_t)B * T * NH * hs, nprobs = (size_t)B * NH * T * T;
        float *qkv = tb_xmalloc(nqkv * sizeof(float), "qkv"), *dout = tb_xmalloc(nout * sizeof(float), "dout");
        for (size_t i = 0; i < nqkv; i++) qkv[i] = (float)((i * 2654435761u) % 1000) / 1000.0f - 0.5f;
        for (size_t i = 0; i < nout; i++) dout[i] = (float)((i * 40503u) % 1000) / 1000.0f - 0.5f;
        float *out = tb_xmalloc(nout * sizeof(float), "out"), *dqkv = tb_xmalloc(nqkv * sizeof(float), "dqkv");
        float *probs = tb_xmalloc(nprobs * sizeof(float), "probs");
        float *scratch = tb_xmalloc(2 * (size_t)T * T * sizeof(float), "local scratch");
        float *lse = tb_xmalloc((size_t)B * NH * T * sizeof(float), "lse");
        float *fscratch = tb_xmalloc(cpu_flash_attention_scratch_floats(T, hs, threads) * sizeof(float), "scratch");
        double local[64], flash[64];
        const int n = reps < 64 ? reps : 64;
        for (int r = -1; r < n; r++) {  // r = -1: warm-up, not timed
            int64_t t0 = tb_now_ns();
            cpu_attention_forward(out, probs, scratch, qkv, B, T, NH, G, hs);
            cpu_attention_backward(dqkv, scratch, dout, qkv, probs, B, T, NH, G, hs);
            int64_t t1 = tb_now_ns();
            cpu_flash_attention_forward(out, lse, fscratch, threads, qkv, B, T, NH, G, hs);
            cpu_flash_attention_backward(dqkv, fscratch, threads, dout, out, qkv, lse, B, T, NH, G, hs);
            int64_t t2 = tb_now_ns();
            if (r >= 0) local[r] = (double)(t1 - t0) / 1e6, flash[r] = (double)(t2 - t1) / 1e6;
        }
        qsort(local, (size_t)n, sizeof *local, cmp_double);
        qsort(flash, (size_t)n, sizeof *flash, cmp_double);
        const double lm = local[n / 2], fm = flash[n / 2];
        char lb[32], fb[32];
        snprintf(lb, sizeof lb, "%.1f MiB", (double)nprobs * sizeof(float) / (1 << 20));
        snprintf(fb, sizeof fb, "%.1f KiB", (double)B * NH * T * sizeof(float) / 1024);
        printf("%6d %12.2f %12.2f %8.2fx %16s %16s\n", T, lm, fm, fm / lm, lb, fb);
        free(qkv), free(dout), free(out), free(dqkv), free(probs), free(scratch), free(lse), free(fscratch);
    }
    return 0;
}
