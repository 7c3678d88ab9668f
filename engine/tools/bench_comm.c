// bench_comm — all-reduce over the MPI backend (comm/mpi_backend.h) across processes, in
// nccl-tests' bus-bandwidth convention, next to memcpy measured in the same run.
//
//   mpirun -np N build/bin/bench_comm [--min BYTES] [--max BYTES] [--reps R]
//   (default 1K .. 64M by factors of 4, R = 5; Open MPI as root: --allow-run-as-root; more
//   processes than cores: --oversubscribe --bind-to none; scripts/bench-comm.sh runs it)
//
// One rank per process, one group (the world) spanning them all, so every call goes through
// the MPI backend: the engine's own all_reduce (the local backend's reduce-scatter + all-gather
// over point-to-point messages), called on the backend directly (no flight recorder, no
// ranges: their cost is the engine's, not the transport's). Per size: a warm-up call, then R
// timed batches of calls between barriers, each batch's time the slowest process's; the
// median batch is reported as nccl-tests does —
//   time   per call
//   algbw  = bytes / time
//   busbw  = algbw × 2(n − 1)/n   (what each link carries in a ring all-reduce)
// — and beside it the memcpy bandwidth of process 0 on the same size (bytes copied / time),
// the bound a shared-memory transport's copies live under. The warm-up call's result is
// checked (the sum of the processes' (p + 1)s, first and last element); timed calls sum zeros.
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/mpi_backend.h"
#include "config.h"
#include "core/options.h"
#include "core/ranges.h"
#include "core/xalloc.h"
#include "initialize.h"
#include "parallel_state.h"

typedef struct bench {
    size_t min, max;
    int reps;
    int failed;
} bench;

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double now_s(void) { return (double)tb_now_ns() / 1e9; }

// Calls per timed batch: about 64 MiB moved, at least 2, at most 200.
static int calls_for(size_t bytes) {
    size_t n = ((size_t)64 << 20) / (bytes ? bytes : 1);
    return n < 2 ? 2 : n > 200 ? 200 : (int)n;
}

static void bench_rank(tb_rank *rk, void *arg) {
    bench *b = arg;
    tb_group *g = &rk->groups[TB_GROUP_WORLD];
    const int n = g->size, lead = g->index == 0;
    tb_error err;
    int timed_out = 0;
    float *buf = tb_xmalloc(b->max, "all_reduce buffer"), *copy = lead ? tb_xmalloc(b->max, "memcpy target") : NULL;
    if (lead) {
        printf("all_reduce over the MPI backend: %d processes, one rank each; median of %d batches\n", n, b->reps);
        printf("busbw = algbw x 2(n-1)/n = algbw x %.3f (nccl-tests); memcpy: process 0, same size, same run\n\n",
               2.0 * (n - 1) / n);
        printf("%12s %8s %12s %12s %12s %14s %10s\n", "bytes", "calls", "time us", "algbw GB/s", "busbw GB/s",
               "memcpy GB/s", "busbw/memcpy");
    }
    for (size_t bytes = b->min; bytes <= b->max && !b->failed; bytes *= 4) {
        const size_t count = bytes / sizeof(float);
        const int calls = calls_for(bytes);
        double t[64];
        for (int r = -1; r < b->reps && r < 64; r++) {  // r = -1: warm-up, not timed
            // the warm-up's one call is checked; the timed ones sum zeros, which stay finite
            for (size_t i = 0; i < count; i++) buf[i] = r == -1 ? (float)(g->index + 1) : 0.0f;
            int rc = g->backend->barrier(g, &timed_out, &err);
            const double t0 = now_s();
            for (int c = 0; c < (r == -1 ? 1 : calls) && rc == 0; c++)
                rc = g->backend->all_reduce(g, buf, count, TB_RED_SUM, &timed_out, &err);
            float secs = (float)(now_s() - t0);
            if (rc == 0) rc = g->backend->all_reduce(g, &secs, 1, TB_RED_MAX, &timed_out, &err);  // the slowest's
            if (rc != 0) {
                fprintf(stderr, "bench_comm: %s: %s\n", rk->label, err.msg);
                b->failed = 1;
                break;
            }
            if (r == -1) {
                // every element is the sum of the processes' (index + 1)s: n(n+1)/2
                const float want = (float)n * (float)(n + 1) / 2.0f;
                if (count && (buf[0] != want || buf[count - 1] != want)) {
                    fprintf(stderr, "bench_comm: %zu bytes: the sum is %g, expected %g\n", bytes, buf[0], want);
                    b->failed = 1;
                    break;
                }
                continue;
            }
            t[r] = (double)secs / calls;
        }
        if (b->failed) break;
        const int reps = b->reps < 64 ? b->reps : 64;
        qsort(t, (size_t)reps, sizeof *t, cmp_double);
        const double time = t[reps / 2];
        if (!lead) continue;
        double m[64];
        for (int r = 0; r < reps; r++) {
            const double t0 = now_s();
            for (int c = 0; c < calls; c++) {
                memcpy(copy, buf, bytes);
                __asm__ volatile("" : : "r"(copy) : "memory");  // the copy is not optimized away
            }
            m[r] = (now_s() - t0) / calls;
        }
        qsort(m, (size_t)reps, sizeof *m, cmp_double);
        const double algbw = (double)bytes / time / 1e9, busbw = algbw * 2.0 * (n - 1) / n;
        const double mem = (double)bytes / m[reps / 2] / 1e9;
        printf("%12zu %8d %12.1f %12.3f %12.3f %14.3f %10.3f\n", bytes, calls, time * 1e6, algbw, busbw, mem,
               busbw / mem);
        fflush(stdout);
    }
    free(buf);
    free(copy);
}

static int parse_size(const char *flag, const char *text, size_t *out) {
    int64_t v;
    if (tb_parse_bytes(text, &v) != 0 || v < 4 || v > ((int64_t)1 << 30) || v % 4 != 0) {
        fprintf(stderr, "bench_comm: %s '%s': want a byte count from 4 to 1G, a multiple of 4 (e.g. 1K, 64M)\n",
                flag, text);
        return -1;
    }
    *out = (size_t)v;
    return 0;
}

int main(int argc, char **argv) {
    bench b = {1024, (size_t)64 << 20, 5, 0};
    for (int i = 1; i < argc; i++) {
        if (i + 1 >= argc && argv[i][0] == '-') return fprintf(stderr, "bench_comm: %s needs a value\n", argv[i]), 2;
        if (!strcmp(argv[i], "--min")) {
            if (parse_size("--min", argv[++i], &b.min) != 0) return 2;
        } else if (!strcmp(argv[i], "--max")) {
            if (parse_size("--max", argv[++i], &b.max) != 0) return 2;
        } else if (!strcmp(argv[i], "--reps")) {
            char *end;
            errno = 0;
            long v = strtol(argv[++i], &end, 10);
            if (errno || *end || v < 1 || v > 64)
                return fprintf(stderr, "bench_comm: --reps '%s': want an integer from 1 to 64\n", argv[i]), 2;
            b.reps = (int)v;
        } else {
            return fprintf(stderr, "bench_comm: unknown argument '%s' (--min BYTES --max BYTES --reps R)\n", argv[i]), 2;
        }
    }
    if (b.min > b.max) return fprintf(stderr, "bench_comm: --min %zu is above --max %zu\n", b.min, b.max), 2;
    tb_launch l;
    tb_error err;
    if (tb_initialize(&l, argc, argv, &err) != 0) return fprintf(stderr, "bench_comm: %s\n", err.msg), 1;
    if (!l.mpi || l.processes < 2) {
        fprintf(stderr, "bench_comm: run it under mpirun with 2 or more processes (mpirun -np 2 %s); it measures "
                "the MPI backend across processes\n", argv[0]);
        tb_finalize(&l, 0);
        return 2;
    }
    tb_config cfg;
    config_defaults(&cfg);
    cfg.world_size = l.processes;
    cfg.ranks_per_process = 1;
    config_resolve(&cfg);
    tb_world w;
    if (parallel_state_world_init_process(&w, &cfg, l.process, l.processes, &err) != 0 ||
        tb_mpi_world_connect(&w, &err) != 0) {
        fprintf(stderr, "bench_comm: process %d: %s\n", l.process, err.msg);
        tb_finalize(&l, 1);
        return 1;
    }
    w.comm.collective_timeout_s = 120;
    for (int r = w.local_first; r < w.local_first + w.local_count; r++) tb_allocator_init(&w.ranks[r].mem, 0, NULL, NULL);
    parallel_state_run_ranks(&w, bench_rank, &b);
    for (int r = w.local_first; r < w.local_first + w.local_count; r++) tb_allocator_release_cache(&w.ranks[r].mem);
    tb_mpi_world_disconnect(&w);
    parallel_state_world_free(&w);
    tb_finalize(&l, b.failed);
    return b.failed ? 1 : 0;
}
