// bench_comm — all-reduce across processes, three ways on the same buffers in one run, in
// nccl-tests' convention:
//   engine   the MPI backend as pretrain_gpt runs it by default (--mpi-collectives native:
//            MPI_Allreduce on the group's communicator and the caller's buffer, comm/mpi_backend.h;
//            in pretrain_gpt its timeout is the watchdog's, which this bench does not start)
//   exact    --mpi-collectives exact: the local backend's reduce-scatter + all-gather over
//            point-to-point messages (group-order sums, the same bits as rank threads)
//   MPI      MPI_Allreduce(MPI_IN_PLACE) itself on MPI_COMM_WORLD: the reference
//
//   mpirun -np N build/bin/bench_comm [--min BYTES] [--max BYTES] [--reps R]
//   (default 8 B .. 64M by factors of 2 as nccl-tests' -f 2, R = 9; Open MPI as root:
//   --allow-run-as-root; more processes than cores: --oversubscribe --bind-to none;
//   scripts/bench-comm.sh runs it)
//
// One rank per process, one group (the world) spanning them all, so every engine call goes
// through the MPI backend, called on the backend directly (no flight recorder, no ranges:
// their cost is the engine's, not the transport's). Per size, for each path in turn: a
// warm-up call (its result checked: the sum of the processes' (p + 1)s, first and last
// element), then R timed batches of calls between barriers, each batch's time the slowest
// process's; the median batch is reported as nccl-tests does —
//   time   per call (the latency, at small sizes)
//   algbw  = bytes / time
//   busbw  = algbw x 2(n - 1)/n   (what each link carries in a ring all-reduce)
// — and the engine's busbw over MPI's (time: MPI's over the engine's), paired: the paths take
// turns batch by batch, and the ratio is the median over rounds of each round's engine batch
// against its MPI batch, so that the host's drift between rounds (a shared VM's memory system
// drifts by tens of percent over seconds: scripts/bench-host-drift.sh) cancels in each pair.
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef TB_HAVE_MPI

int main(void) {
    fprintf(stderr, "bench_comm: the MPI backend was not built (no MPI found at configure time, or TB_WITH_MPI=OFF)\n");
    return 2;
}

#else

#include <mpi.h>

#include "comm/local_backend.h"
#include "comm/mpi_backend.h"
#include "config/config.h"
#include "core/options.h"
#include "runtime/ranges.h"
#include "core/xalloc.h"
#include "initialize.h"
#include "comm/parallel_state.h"
#include "runtime/memory.h"

typedef struct bench {
    size_t min, max;
    int reps;
    int failed;
} bench;

enum { PATH_ENGINE, PATH_EXACT, PATH_MPI, NPATHS };
static const char *const path_names[NPATHS] = {"engine", "exact", "MPI"};

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

// One all-reduce of buf on the path.
static int all_reduce(int path, tb_group *g, float *buf, size_t count, int *timed_out, tb_error *err) {
    switch (path) {
    case PATH_ENGINE: return tb_mpi_backend.all_reduce(g, buf, count, TB_RED_SUM, timed_out, err);
    case PATH_EXACT: return tb_mpi_exact_backend.all_reduce(g, buf, count, TB_RED_SUM, timed_out, err);
    default: {
        int rc = MPI_Allreduce(MPI_IN_PLACE, buf, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        return rc == MPI_SUCCESS ? 0 : tb_fail(err, "MPI_Allreduce: error %d", rc);
    }
    }
}

// A batch of `calls` all-reduces on the path between barriers; the slowest process's seconds.
static int timed_batch(int path, tb_group *g, float *buf, size_t count, int calls, double *secs, tb_error *err) {
    int timed_out = 0;
    int rc = tb_mpi_backend.barrier(g, &timed_out, err);
    const double t0 = now_s();
    for (int c = 0; c < calls && rc == 0; c++) rc = all_reduce(path, g, buf, count, &timed_out, err);
    double t = now_s() - t0;
    if (rc == 0 && MPI_Allreduce(MPI_IN_PLACE, &t, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD) != MPI_SUCCESS)
        rc = tb_fail(err, "MPI_Allreduce of the batch times failed");
    *secs = t;
    return rc;
}

static void bench_rank(tb_rank *rk, void *arg) {
    bench *b = arg;
    tb_group *g = &rk->groups[TB_GROUP_WORLD];
    const int n = g->size, lead = g->index == 0;
    tb_error err;
    int timed_out = 0;
    float *buf = tb_xmalloc(b->max, "all_reduce buffer");
    if (lead) {
        printf("all_reduce across %d processes, one rank each: the engine's default path (MPI's own, on the group), "
               "the exact path, MPI_Allreduce; median of %d batches each, taking turns\n",
               n, b->reps);
        printf("busbw = algbw x 2(n-1)/n = algbw x %.3f (nccl-tests)\n\n", 2.0 * (n - 1) / n);
        printf("%12s %6s | %10s %9s | %10s %9s | %10s %9s | %25s\n", "", "", "engine", "", "exact", "", "MPI",
               "", "engine/MPI, paired");
        printf("%12s %6s | %10s %9s | %10s %9s | %10s %9s | %12s %12s\n", "bytes", "calls", "time us", "busbw GB/s",
               "time us", "busbw GB/s", "time us", "busbw GB/s", "busbw", "time");
    }
    for (size_t bytes = b->min; bytes <= b->max && !b->failed; bytes *= 2) {
        const size_t count = bytes / sizeof(float);
        const int calls = calls_for(bytes);
        const int reps = b->reps;
        double t[NPATHS][64];
        for (int p = 0; p < NPATHS && !b->failed; p++) {
            // the warm-up call is checked; the timed ones sum zeros, which stay finite
            for (size_t i = 0; i < count; i++) buf[i] = (float)(g->index + 1);
            int rc = all_reduce(p, g, buf, count, &timed_out, &err);
            const float want = (float)n * (float)(n + 1) / 2.0f;
            if (rc == 0 && count && (buf[0] != want || buf[count - 1] != want)) {
                fprintf(stderr, "bench_comm: %s, %zu bytes: the sum is %g, expected %g\n", path_names[p], bytes,
                        buf[0], want);
                b->failed = 1;
            } else if (rc != 0) {
                fprintf(stderr, "bench_comm: %s: %s: %s\n", rk->label, path_names[p], err.msg);
                b->failed = 1;
            }
        }
        memset(buf, 0, bytes);
        for (int r = 0; r < reps && !b->failed; r++)
            for (int p = 0; p < NPATHS && !b->failed; p++) {
                if (timed_batch(p, g, buf, count, calls, &t[p][r], &err) != 0) {
                    fprintf(stderr, "bench_comm: %s: %s: %s\n", rk->label, path_names[p], err.msg);
                    b->failed = 1;
                }
                t[p][r] /= calls;
            }
        if (b->failed || !lead) continue;
        // the paired ratio: each round's engine batch against the MPI batch next to it in time,
        // the median over rounds (the host's drift between rounds cancels in a pair)
        double pair[64];
        for (int r = 0; r < reps; r++) pair[r] = t[PATH_MPI][r] / t[PATH_ENGINE][r];
        qsort(pair, (size_t)reps, sizeof *pair, cmp_double);
        const double paired = reps % 2 ? pair[reps / 2] : (pair[reps / 2 - 1] + pair[reps / 2]) / 2;
        double median[NPATHS], busbw[NPATHS];
        for (int p = 0; p < NPATHS; p++) {
            qsort(t[p], (size_t)reps, sizeof **t, cmp_double);
            median[p] = reps % 2 ? t[p][reps / 2] : (t[p][reps / 2 - 1] + t[p][reps / 2]) / 2;
            busbw[p] = (double)bytes / median[p] / 1e9 * 2.0 * (n - 1) / n;
        }
        printf("%12zu %6d | %10.1f %9.3f | %10.1f %9.3f | %10.1f %9.3f | %11.2fx %11.2fx\n", bytes, calls,
               median[PATH_ENGINE] * 1e6, busbw[PATH_ENGINE], median[PATH_EXACT] * 1e6, busbw[PATH_EXACT],
               median[PATH_MPI] * 1e6, busbw[PATH_MPI], paired, 1 / paired);
        fflush(stdout);
    }
    free(buf);
}

static int parse_size(const char *flag, const char *text, size_t *out) {
    int64_t v;
    if (tb_parse_bytes(text, &v) != 0 || v < 4 || v > ((int64_t)1 << 30) || v % 4 != 0) {
        fprintf(stderr, "bench_comm: %s '%s': want a byte count from 4 to 1G, a multiple of 4 (e.g. 8, 1K, 64M)\n",
                flag, text);
        return -1;
    }
    *out = (size_t)v;
    return 0;
}

int main(int argc, char **argv) {
    bench b = {8, (size_t)64 << 20, 9, 0};
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
    if (parallel_state_world_init_process(&w, &cfg, l.process, l.processes, &tb_local_backend, &err) != 0 ||
        tb_mpi_world_connect(&w, &err) != 0) {
        fprintf(stderr, "bench_comm: process %d: %s\n", l.process, err.msg);
        tb_finalize(&l, 1);
        return 1;
    }
    w.comm.collective_timeout_s = 120;
    for (int r = w.local_first; r < w.local_first + w.local_count; r++) tb_allocator_init(w.ranks[r].mem, 0, NULL, NULL);
    parallel_state_run_ranks(&w, bench_rank, &b);
    for (int r = w.local_first; r < w.local_first + w.local_count; r++) tb_allocator_release_cache(w.ranks[r].mem);
    tb_mpi_world_disconnect(&w);
    parallel_state_world_free(&w);
    tb_finalize(&l, b.failed);
    return b.failed ? 1 : 0;
}

#endif  // TB_HAVE_MPI
