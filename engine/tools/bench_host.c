// bench_host — how steady this host's cores and memory system are over time: the precision a
// timing claim can have here. An ALU loop (registers only) and a memory stream (a 256 MiB
// buffer read at a 64-byte stride: every load a cache miss) are each timed in chunks of about
// 100 ms, one after the other, for a while; the figures are each chunk's time against the
// median chunk of its kind. On a dedicated machine both are flat within a few percent; on a
// VM whose memory system other tenants share the stream drifts (the engine's steps, which move
// their activations through memory, drift with it) while the ALU loop stays flat.
//
//   bench_host [SECONDS = 20]
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int cmp(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

// A multiply-add chain the compiler cannot fold: iters rounds on one register.
static uint64_t alu(uint64_t x, long iters) {
    for (long i = 0; i < iters; i++) x = x * 6364136223846793005ULL + 1442695040888963407ULL;
    return x;
}

// One pass over the buffer touching one float per 64-byte line.
static float stream(const float *a, size_t n) {
    float s = 0;
    for (size_t i = 0; i < n; i += 16) s += a[i];
    return s;
}

// min, median, max and the sample deviation of n chunk times, each relative to the median.
static void report(const char *what, double *t, int n) {
    double mean = 0, ss = 0;
    for (int i = 0; i < n; i++) mean += t[i] / n;
    for (int i = 0; i < n; i++) ss += (t[i] - mean) * (t[i] - mean);
    qsort(t, (size_t)n, sizeof *t, cmp);
    const double med = n % 2 ? t[n / 2] : (t[n / 2 - 1] + t[n / 2]) / 2;
    printf("  %-38s %4d chunks  median %7.2f ms  min %+6.1f%%  max %+6.1f%%  sd %5.1f%%\n", what, n, 1e3 * med,
           100 * (t[0] / med - 1), 100 * (t[n - 1] / med - 1), 100 * sqrt(ss / (n > 1 ? n - 1 : 1)) / mean);
}

int main(int argc, char **argv) {
    double seconds = 20;
    if (argc > 2 || (argc == 2 && (sscanf(argv[1], "%lf", &seconds) != 1 || !(seconds >= 1 && seconds <= 3600)))) {
        fprintf(stderr, "usage: bench_host [SECONDS in 1..3600] (got '%s')\n", argc > 1 ? argv[1] : "");
        return 2;
    }
    const size_t n = (size_t)64 << 20;  // 256 MiB of floats
    float *a = malloc(n * sizeof *a);
    if (!a) {
        fprintf(stderr, "bench_host: out of memory for a %zu MiB buffer\n", n * sizeof *a >> 20);
        return 1;
    }
    for (size_t i = 0; i < n; i++) a[i] = (float)(i & 1023);
    // size each kind's chunk to ~100 ms from one trial
    double t0 = now_s();
    volatile uint64_t sink = alu(1, 20000000);
    const long alu_iters = (long)(20000000 * 0.1 / (now_s() - t0));
    t0 = now_s();
    volatile float fsink = stream(a, n);
    const int passes = (int)fmax(1, round(0.1 / (now_s() - t0)));
    const int max_chunks = (int)(seconds / 0.2) + 2;
    double *ta = calloc((size_t)max_chunks, sizeof *ta), *tm = calloc((size_t)max_chunks, sizeof *tm);
    int k = 0;
    const double end = now_s() + seconds;
    while (k < max_chunks && now_s() < end) {
        t0 = now_s();
        sink = alu(sink, alu_iters);
        ta[k] = now_s() - t0;
        t0 = now_s();
        for (int p = 0; p < passes; p++) fsink += stream(a, n);
        tm[k++] = now_s() - t0;
    }
    printf("bench_host: %d chunks of each over %.0f s, interleaved (alu, stream, alu, ...)\n", k, seconds);
    report("alu loop (registers only)", ta, k);
    report("memory stream (256 MiB, 64 B stride)", tm, k);
    (void)fsink;
    free(a);
    free(ta);
    free(tm);
    return 0;
}
