// bench_host — how steady this host's cores and memory system are over time: the precision a
// timing claim can have here. An ALU loop (registers only) and a memory stream (a 256 MiB
// buffer read at a 64-byte stride: every load a cache miss) are each timed in chunks of about
// 100 ms, one after the other, for a while; the figures are each chunk's time against the
// median chunk of its kind. On a dedicated machine both are flat within a few percent; on a
// VM whose memory system other tenants share the stream drifts (the engine's steps, which move
// their activations through memory, drift with it) while the ALU loop stays flat. A third
// measure, a cache line passed back and forth between two threads pinned to the first two
// usable CPUs, times the core-to-core round trip: what every barrier of a multi-threaded
// step pays. On a VM it changes when the hypervisor moves the vCPUs (the two on one core
// complex sharing a cache, or on two), in phases of seconds: a timing taken with two
// cooperating threads is then a mixture of two machines.
//
//   bench_host [SECONDS = 20]
#define _GNU_SOURCE
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
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

// The round trip: the main thread makes the counter odd, the peer makes it even again.
struct pingpong {
    _Alignas(64) atomic_long turn;
    int cpu;
    long rounds;
};

static int pin(int cpu) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    return pthread_setaffinity_np(pthread_self(), sizeof set, &set);
}

static void *pong(void *arg) {
    struct pingpong *p = arg;
    if (pin(p->cpu) != 0) return NULL;
    for (long r = 0; r < p->rounds; r++) {
        while ((atomic_load_explicit(&p->turn, memory_order_acquire) & 1) == 0) {
        }
        atomic_fetch_add_explicit(&p->turn, 1, memory_order_release);
    }
    return NULL;
}

// Seconds for `rounds` round trips between the calling thread (pinned to cpu a) and a peer
// pinned to cpu b; -1 when either cannot be pinned.
static double pingpong(int a, int b, long rounds) {
    struct pingpong p = { .cpu = b, .rounds = rounds };
    atomic_init(&p.turn, 0);
    if (pin(a) != 0) return -1;
    pthread_t peer;
    if (pthread_create(&peer, NULL, pong, &p) != 0) return -1;
    const double t0 = now_s();
    for (long r = 0; r < rounds; r++) {
        atomic_fetch_add_explicit(&p.turn, 1, memory_order_release);
        while (atomic_load_explicit(&p.turn, memory_order_acquire) & 1) {
        }
    }
    const double t = now_s() - t0;
    pthread_join(peer, NULL);
    return t;
}

// The first two CPUs this process may run on (cpu[1] = -1 when there is one).
static void two_cpus(int cpu[2]) {
    cpu_set_t set;
    cpu[0] = cpu[1] = -1;
    if (sched_getaffinity(0, sizeof set, &set) != 0) return;
    for (int c = 0, k = 0; c < CPU_SETSIZE && k < 2; c++)
        if (CPU_ISSET(c, &set)) cpu[k++] = c;
}

// min, median, max and the sample deviation of n chunk times, each relative to the median; the
// median printed in `unit`, `scale` of them to a second.
static void report(const char *what, double *t, int n, double scale, const char *unit) {
    double mean = 0, ss = 0;
    for (int i = 0; i < n; i++) mean += t[i] / n;
    for (int i = 0; i < n; i++) ss += (t[i] - mean) * (t[i] - mean);
    qsort(t, (size_t)n, sizeof *t, cmp);
    const double med = n % 2 ? t[n / 2] : (t[n / 2 - 1] + t[n / 2]) / 2;
    printf("  %-42s %4d chunks  median %7.2f %s  min %+6.1f%%  max %+6.1f%%  sd %5.1f%%\n", what, n, scale * med, unit,
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
    int cpu[2];
    two_cpus(cpu);
    const long trial_rounds = 100000;
    const double trial = cpu[1] >= 0 ? pingpong(cpu[0], cpu[1], trial_rounds) : -1;
    const long rounds = trial > 0 ? (long)fmax(1000, trial_rounds * 0.1 / trial) : 0;
    const int max_chunks = (int)(seconds / 0.3) + 2;
    double *ta = calloc((size_t)max_chunks, sizeof *ta), *tm = calloc((size_t)max_chunks, sizeof *tm);
    double *tp = calloc((size_t)max_chunks, sizeof *tp);
    if (!ta || !tm || !tp) {
        fprintf(stderr, "bench_host: out of memory for %d chunk times\n", max_chunks);
        return 1;
    }
    int k = 0;
    const double end = now_s() + seconds;
    while (k < max_chunks && now_s() < end) {
        t0 = now_s();
        sink = alu(sink, alu_iters);
        ta[k] = now_s() - t0;
        t0 = now_s();
        for (int p = 0; p < passes; p++) fsink += stream(a, n);
        tm[k] = now_s() - t0;
        if (rounds) tp[k] = pingpong(cpu[0], cpu[1], rounds) / (double)rounds;
        k++;
    }
    printf("bench_host: %d chunks of each over %.0f s, interleaved (alu, stream%s, alu, ...)\n", k, seconds,
           rounds ? ", round trip" : "");
    report("alu loop (registers only)", ta, k, 1e3, "ms");
    report("memory stream (256 MiB, 64 B stride)", tm, k, 1e3, "ms");
    if (rounds) {
        char what[64];
        snprintf(what, sizeof what, "core-to-core round trip (cpu %d and %d)", cpu[0], cpu[1]);
        report(what, tp, k, 1e9, "ns");
    } else {
        printf("  core-to-core round trip: not measured (%s)\n",
               cpu[1] < 0 ? "one usable CPU" : "a thread could not be pinned to a CPU");
    }
    (void)fsink;
    free(a);
    free(ta);
    free(tm);
    free(tp);
    return 0;
}
