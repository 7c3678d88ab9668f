// test_mpi.c — pretrain_gpt under mpirun against the same layouts on rank threads and the
// single rank.
//
// Every layout trains the same tiny model for 3 steps: one rank; rank threads of one process
// (the local backend); processes under mpirun (2 or 4 on this host, one rank per process or
// two rank threads per process, the groups that span processes on the MPI backend), once on
// each path of --mpi-collectives. exact reduces with the local backend's algorithm and
// summation code, so the per-step losses under mpirun must be the same bits as on threads.
// native runs MPI's own collectives on groups with one member per process: a sum of two
// members is the same bits either way (a + b = b + a), so the layouts whose spanning groups
// have two members must match threads bitwise on it too; a group of more (dp 4 across 4
// processes) sums in MPI's order: within 1e-5 of threads, and the same bits from run to run.
// Against the single rank every run agrees within the layout tests' tolerance (1e-5
// relative: the layouts sum in another order; context parallelism's layouts, both exchanges,
// against the single rank with the same flash core). Each run directory must hold every rank's files, config.json, and a
// launch.json that says how it ran; pipeline.json's per-stage figures, gathered across
// processes, must equal the threads run's. Bad launches (a world that is not processes x
// ranks per process, a model-parallel group larger than the world the processes make) must
// end every process with status 2 and one message naming the numbers, within a timeout. A
// worker mode (--worker K, started under mpirun by this test) runs every call of the MPI
// backend on spanning, in-process and mixed groups against the group-order bits, on both
// paths, a ring of sends and one of batches, a recv of the wrong size (single, and batched
// 20,001 times), an all-to-all whose counts disagree, and a call one member skips (which
// must time out as on the local backend; on MPI's own blocking collective only the watchdog
// of pretrain_gpt can end it, which the stall drills check).
// The failures across processes (a stall, the hang drills, a killed process, OOM) are
// test_mpi_failures.c's.
//
// Exit status 77 (ctest: skipped) when MPI was not built or no mpirun was found.
#include <jansson.h>
#include <limits.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "comm/local_backend.h"
#include "comm/mpi_backend.h"
#include "comm/reduce.h"
#include "config/config.h"
#include "core/run_dir.h"
#include "initialize.h"
#include "comm/parallel_state.h"

#define SKIP 77
#define STEPS 3

#ifdef TB_MPIEXEC

#include "tb_mpirun.h"
#include "tb_run_dir.h"
#include "tb_shell.h"
#include "tb_test.h"
#include "runtime/memory.h"

typedef struct layout {
    const char *name;
    int processes, ranks_per_process;
    const char *flags;
    int wide;  // a group of more than two members with one per process: native sums in MPI's order
} layout;

// The two paths of --mpi-collectives.
static const char *const algorithms[] = TB_MPI_ALGORITHMS;

static const layout layouts[] = {
    {"tp 2", 2, 1, "--tensor-model-parallel-size 2", 0},
    {"tp 2 + sp", 2, 1, "--tensor-model-parallel-size 2 --sequence-parallel", 0},
    {"dp 2", 2, 1, "--world-size 2", 0},
    {"dp 2 + distributed optimizer", 2, 1, "--world-size 2 --use-distributed-optimizer", 0},
    // the communication thread's bucketed reduce-scatters and parameter all-gathers beside the
    // rank thread's calls (MPI_THREAD_MULTIPLE)
    {"dp 2 + dist-opt, both overlaps", 2, 1,
     "--world-size 2 --use-distributed-optimizer --ddp-bucket-size 3000 --overlap-grad-reduce --overlap-param-gather", 0},
    {"pp 2 (1F1B)", 2, 1, "--pipeline-model-parallel-size 2", 0},
    {"pp 2 x vpp 2 (interleaved)", 2, 1, "--pipeline-model-parallel-size 2 --virtual-pipeline-model-parallel-size 2", 0},
    {"tp 2 + sp x dp 2 + dist-opt", 4, 1,
     "--world-size 4 --tensor-model-parallel-size 2 --sequence-parallel --use-distributed-optimizer", 0},
    {"pp 2 x tp 2", 4, 1, "--world-size 4 --pipeline-model-parallel-size 2 --tensor-model-parallel-size 2", 0},
    {"pp 4 (1F1B)", 4, 1, "--pipeline-model-parallel-size 4", 0},
    // two rank threads per process: tp inside a process, dp across
    {"K 2: tp 2 x dp 2 + dist-opt", 2, 2, "--world-size 4 --tensor-model-parallel-size 2 --use-distributed-optimizer", 0},
    // two members of one spanning group in each process
    {"K 2: dp 4", 2, 2, "--world-size 4", 0},
    {"K 2: pp 2 x dp 2", 2, 2, "--world-size 4 --pipeline-model-parallel-size 2", 0},
    // a data-parallel group of four processes: MPI's own all-reduce of four members
    {"dp 4 + distributed optimizer", 4, 1, "--world-size 4 --use-distributed-optimizer", 1},
    // Megatron-FSDP: each unit's all-gathers and each microbatch's reduce-scatters across processes
    {"dp 2 + fsdp optim_grads_params", 2, 1,
     "--world-size 2 --use-distributed-optimizer --use-megatron-fsdp --data-parallel-sharding-strategy "
     "optim_grads_params", 0},
    {"K 2: tp 2 + sp x dp 2 + fsdp optim_grads", 2, 2,
     "--world-size 4 --tensor-model-parallel-size 2 --sequence-parallel --use-distributed-optimizer "
     "--use-megatron-fsdp --data-parallel-sharding-strategy optim_grads", 0},
    // with both overlaps: every dp call on the communication thread, the next unit's gather prefetched
    {"dp 2 + fsdp optim_grads_params, overlap", 2, 1,
     "--world-size 2 --use-distributed-optimizer --use-megatron-fsdp --data-parallel-sharding-strategy "
     "optim_grads_params --overlap-grad-reduce --overlap-param-gather", 0},
    // and under pp, the tied word embedding's slices summed over the first and last stage
    {"K 2: pp 2 x dp 2 + fsdp optim_grads_params", 2, 2,
     "--world-size 4 --pipeline-model-parallel-size 2 --use-distributed-optimizer --use-megatron-fsdp "
     "--data-parallel-sharding-strategy optim_grads_params", 0},
};
#define NLAYOUTS (int)(sizeof layouts / sizeof *layouts)

static tb_output sh;
static double single[STEPS];
static double mpi_seconds;  // wall time of every mpirun in this test

// Rank 0's per-step losses of a run directory; how many steps it holds.
static int read_losses(const char *dir, double *loss) {
    char path[1024];
    tb_rank_path(path, sizeof path, dir, TB_RANK_METRICS, 0);
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    char line[16384];
    int n = 0;
    while (n < STEPS && fgets(line, sizeof line, f)) {
        json_t *m = json_loads(line, 0, NULL);
        loss[n++] = json_number_value(json_object_get(m, "loss"));
        json_decref(m);
    }
    fclose(f);
    return n;
}

static const char *run_dir(char *buf, size_t len, const char *kind, int i) { return tb_mpi_run_dir(buf, len, kind, i); }

static int mpirun(int processes, const char *fmt_args, ...) __attribute__((format(printf, 2, 3)));
static int mpirun(int processes, const char *fmt_args, ...) {
    va_list ap;
    va_start(ap, fmt_args);
    int rc = tb_mpirun_engine_v(&sh, &mpi_seconds, processes, fmt_args, ap);
    va_end(ap);
    return rc;
}

// Every rank's files, config.json and launch.json in an mpirun's run directory.
static void check_run_dir(const layout *l, const char *dir) {
    const int world = l->processes * l->ranks_per_process;
    char path[1024];
    for (int r = 0; r < world; r++)
        for (int k = 0; k < TB_RANK_NFILES; k++)
            TB_CHECK(tb_exists(tb_rank_path(path, sizeof path, dir, (tb_rank_file)k, r)), "%s: no %s", l->name, path);
    snprintf(path, sizeof path, "%s/%s", dir, TB_RUN_CONFIG);
    json_t *cfg = tb_load_json(path);
    TB_CHECK(cfg && json_integer_value(json_object_get(cfg, "world_size")) == world &&
                 json_integer_value(json_object_get(cfg, "ranks_per_process")) == l->ranks_per_process,
             "%s: config.json world_size / ranks_per_process", l->name);
    json_decref(cfg);
    snprintf(path, sizeof path, "%s/%s", dir, TB_RUN_LAUNCH);
    json_t *launch = tb_load_json(path);
    TB_REQUIRE(launch, "%s: %s", l->name, path);
    json_t *procs = json_object_get(launch, "per_process");
    TB_CHECK(!strcmp(json_string_value(json_object_get(launch, "launcher")), "mpirun") &&
                 json_integer_value(json_object_get(launch, "processes")) == l->processes &&
                 json_integer_value(json_object_get(launch, "ranks_per_process")) == l->ranks_per_process &&
                 (int)json_array_size(procs) == l->processes,
             "%s: launch.json says how it ran", l->name);
    int hosted = 0;
    for (int p = 0; p < (int)json_array_size(procs); p++) {
        json_t *ranks = json_object_get(json_array_get(procs, (size_t)p), "ranks");
        TB_CHECK((int)json_array_size(ranks) == l->ranks_per_process &&
                     json_integer_value(json_array_get(ranks, 0)) == p * l->ranks_per_process,
                 "%s: process %d holds ranks %d ..", l->name, p, p * l->ranks_per_process);
        TB_CHECK(json_string_value(json_object_get(json_array_get(procs, (size_t)p), "host")), "%s: host of process %d",
                 l->name, p);
    }
    const char *key;
    json_t *n;
    json_object_foreach(json_object_get(launch, "ranks_per_host"), key, n) hosted += (int)json_integer_value(n);
    TB_CHECK(hosted == world, "%s: ranks per host add up to %d, not the world's %d", l->name, hosted, world);
    json_decref(launch);
}

// pipeline.json's per-stage parameters and FLOPs (gathered across processes) as on threads.
static void check_pipeline(const layout *l, const char *mpi_dir, const char *threads_dir) {
    char a[1024], b[1024];
    snprintf(a, sizeof a, "%s/%s", mpi_dir, TB_RUN_PIPELINE);
    snprintf(b, sizeof b, "%s/%s", threads_dir, TB_RUN_PIPELINE);
    json_t *m = tb_load_json(a), *t = tb_load_json(b);
    TB_REQUIRE(m && t, "%s: pipeline.json of both runs", l->name);
    json_t *ms = json_object_get(m, "stages"), *ts = json_object_get(t, "stages");
    TB_CHECK(json_array_size(ms) == json_array_size(ts) && json_array_size(ms) > 0, "%s: stages", l->name);
    for (size_t s = 0; s < json_array_size(ms) && s < json_array_size(ts); s++) {
        json_t *x = json_array_get(ms, s), *y = json_array_get(ts, s);
        TB_CHECK(json_integer_value(json_object_get(x, "parameters")) ==
                         json_integer_value(json_object_get(y, "parameters")) &&
                     json_real_value(json_object_get(x, "flops_per_step")) ==
                         json_real_value(json_object_get(y, "flops_per_step")) &&
                     json_integer_value(json_object_get(x, "peak_activation_bytes")) ==
                         json_integer_value(json_object_get(y, "peak_activation_bytes")),
                 "%s: stage %zu figures differ from the threads run's", l->name, s);
    }
    json_decref(m);
    json_decref(t);
}

// ---------------------------------------------------------------------------------------
// Every call of the MPI backend, in a worker this test starts under mpirun (argv: --worker K)

static const tb_group_kind tested[] = {TB_GROUP_WORLD, TB_GROUP_DP, TB_GROUP_TP};
#define NTESTED 3
#define LONGER_TRIES 20000

typedef struct worker_rank {
    char fail[2048];  // the first failure, empty if none
} worker_rank;

static void wfail(worker_rank *me, const tb_rank *rk, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void wfail(worker_rank *me, const tb_rank *rk, const char *fmt, ...) {
    if (me->fail[0]) return;
    int n = snprintf(me->fail, sizeof me->fail, "%s: ", rk->label);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(me->fail + n, sizeof me->fail - (size_t)n, fmt, ap);
    va_end(ap);
}

// Deterministic inputs in [0.5, 1.5) of a rank.
static float val(int rank, int salt, size_t i) {
    uint32_t h = (uint32_t)rank * 2654435761u ^ (uint32_t)salt * 40503u ^ (uint32_t)i * 2246822519u;
    h ^= h >> 15;
    h *= 2246822519u;
    h ^= h >> 13;
    return 0.5f + (float)(h & 0xffffff) / (float)0x1000000;
}

static void fill(float *x, size_t n, int rank, int salt) {
    for (size_t i = 0; i < n; i++) x[i] = val(rank, salt, i);
}

// Elements member src sends member dst in all_to_all (some pairs none).
static size_t a2a_count(int src, int dst) { return (src * 3 + dst * 5) % 4 == 3 ? 0 : (size_t)(1 + (src * 7 + dst * 3) % 13); }

// The backend's own call (not comm.c's, which ends the rank on failure): rc and message.
#define CALL(op, ...) (timed_out = 0, g->backend->op(g, __VA_ARGS__, &timed_out, &err))

// The sums every member must get: the members' inputs reduced in group order by the one
// summation (comm/reduce.h), so the MPI backend's result must be these bits.
static void expected_reduce(const tb_group *g, int salt, size_t count, size_t lo, size_t hi, tb_red_op op, float *out) {
    const float *src[TB_MAX_GROUP];
    float *in = malloc((size_t)g->size * count * sizeof(float));
    for (int j = 0; j < g->size; j++) {
        fill(in + (size_t)j * count, count, g->ranks[j], salt);
        src[j] = in + (size_t)j * count;
    }
    tb_reduce_into(out, src, g->size, lo, hi, op);
    free(in);
}

static void worker_rank_fn(tb_rank *rk, void *arg) {
    worker_rank *me = (worker_rank *)arg + rk->rank;
    tb_error err;
    int timed_out = 0;
    const size_t N = 1001;  // shares of uneven size
    float *a = malloc(64 * N * sizeof(float)), *b = malloc(64 * N * sizeof(float)), *e = malloc(64 * N * sizeof(float));
    for (int t = 0; t < NTESTED; t++) {
        tb_group *g = &rk->groups[tested[t]];
        const int n = g->size, i = g->index, salt = 10 * t;
        const char *on = g->backend == &tb_mpi_backend         ? "mpi native"
                         : g->backend == &tb_mpi_exact_backend ? "mpi exact"
                         : g->backend                          ? g->backend->name
                                                               : "none";
        for (int opi = 0; opi < 2; opi++) {
            tb_red_op op = opi ? TB_RED_MAX : TB_RED_SUM;
            fill(a, N, rk->rank, salt + opi);
            if (CALL(all_reduce, a, N, op)) wfail(me, rk, "all_reduce on %s (%s): %s", g->name, on, err.msg);
            expected_reduce(g, salt + opi, N, 0, N, op, e);
            if (memcmp(a, e, N * sizeof(float))) wfail(me, rk, "all_reduce %d on %s (%s): not the group-order bits", opi, g->name, on);
        }
        fill(a, (size_t)n * N, rk->rank, salt + 2);
        if (CALL(reduce_scatter, a, b, N)) wfail(me, rk, "reduce_scatter on %s: %s", g->name, err.msg);
        expected_reduce(g, salt + 2, (size_t)n * N, (size_t)i * N, (size_t)(i + 1) * N, TB_RED_SUM, e);
        if (memcmp(b, e, N * sizeof(float))) wfail(me, rk, "reduce_scatter on %s (%s): wrong bits", g->name, on);
        fill(a, N, rk->rank, salt + 3);
        if (CALL(all_gather, a, b, N)) wfail(me, rk, "all_gather on %s: %s", g->name, err.msg);
        for (int j = 0; j < n; j++) {
            fill(e, N, g->ranks[j], salt + 3);
            if (memcmp(b + (size_t)j * N, e, N * sizeof(float))) wfail(me, rk, "all_gather on %s (%s): member %d's part", g->name, on, j);
        }
        size_t sc[TB_MAX_GROUP], rc[TB_MAX_GROUP], at = 0;
        for (int j = 0; j < n; j++) sc[j] = a2a_count(i, j), rc[j] = a2a_count(j, i);
        fill(a, 64 * 13, rk->rank, salt + 4);
        if (CALL(all_to_all, a, sc, b, rc)) wfail(me, rk, "all_to_all on %s: %s", g->name, err.msg);
        for (int j = 0; j < n; j++) {
            size_t from = 0;
            for (int k = 0; k < i; k++) from += a2a_count(j, k);
            for (size_t x = 0; x < rc[j]; x++)
                if (b[at + x] != val(g->ranks[j], salt + 4, from + x)) wfail(me, rk, "all_to_all on %s (%s): from member %d", g->name, on, j);
            at += rc[j];
        }
        fill(a, N, rk->rank, salt + 5);
        if (CALL(broadcast, a, N, n - 1)) wfail(me, rk, "broadcast on %s: %s", g->name, err.msg);
        fill(e, N, g->ranks[n - 1], salt + 5);
        if (memcmp(a, e, N * sizeof(float))) wfail(me, rk, "broadcast on %s (%s): not the root's", g->name, on);
        // a ring: everyone sends first (eager), then receives
        fill(a, N, rk->rank, salt + 6);
        if (CALL(send, a, N, (i + 1) % n)) wfail(me, rk, "send on %s: %s", g->name, err.msg);
        if (CALL(recv, b, N, (i + n - 1) % n)) wfail(me, rk, "recv on %s: %s", g->name, err.msg);
        fill(e, N, g->ranks[(i + n - 1) % n], salt + 6);
        if (memcmp(b, e, N * sizeof(float))) wfail(me, rk, "send/recv ring on %s (%s)", g->name, on);
        // the same ring as one batch on the caller's buffers (Megatron's batch_isend_irecv), with
        // a message beyond MPI's eager size (64 KiB: a rendezvous completes a send only once its
        // receive is matched, so the batch matches receives while its own sends wait)
        const size_t big = 16 * N;
        fill(a, big, rk->rank, salt + 7);
        tb_p2p_op ring[2] = {{TB_COMM_SEND, g, a, big, (i + 1) % n, -1}, {TB_COMM_RECV, g, b, big, (i + n - 1) % n, -1}};
        timed_out = 0;
        if (n > 1 && g->backend->batch_send_recv && g->backend->batch_send_recv(ring, 2, &timed_out, &err))
            wfail(me, rk, "batch send/recv on %s: %s", g->name, err.msg);
        fill(e, big, g->ranks[(i + n - 1) % n], salt + 7);
        if (n > 1 && g->backend->batch_send_recv && memcmp(b, e, big * sizeof(float)))
            wfail(me, rk, "batch send/recv ring on %s (%s)", g->name, on);
        timed_out = 0;
        if (g->backend->barrier(g, &timed_out, &err)) wfail(me, rk, "barrier on %s: %s", g->name, err.msg);
    }
    // refusals and a timeout on the world group (spanning processes)
    tb_group *g = &rk->groups[TB_GROUP_WORLD];
    if (g->index == 0 && CALL(send, a, 4, 1)) wfail(me, rk, "send of 4: %s", err.msg);
    if (g->index == 1) {
        int r = CALL(recv, b, 5, 0);
        if (r == 0 || !strstr(err.msg, "recv on group world from member 0: message of 4 elements, expected 5"))
            wfail(me, rk, "a recv of the wrong size: rc %d, '%s'", r, r ? err.msg : "");
    }
    // an all-to-all whose counts disagree (member 0 sends 3 elements to member 1, which expects
    // 2): on MPI's own collectives every member refuses it together, the receiver naming it; on
    // exact the receiver refuses it (its receive probed: see the batch's refusals below), and
    // the others' calls complete
    const int exact = g->backend == &tb_mpi_exact_backend;
    if (exact || (g->backend == &tb_mpi_backend && rk->world->local_count == 1 && g->size == 2)) {
        size_t sc[TB_MAX_GROUP], rc[TB_MAX_GROUP];
        for (int j = 0; j < g->size; j++) sc[j] = rc[j] = 1;
        if (g->index == 0) sc[1] = 3;
        if (g->index == 1) rc[0] = 2;
        int r = CALL(all_to_all, a, sc, b, rc);
        const char *want = g->index == 1 ? "all_to_all on group world: member 0 sends 3 elements to member 1, which "
                                           "expects 2"
                                         : "refused by every member";
        if (exact && g->index != 1 ? r != 0 : r == 0 || !strstr(err.msg, want))
            wfail(me, rk, "an all-to-all whose counts disagree: rc %d, '%s' (want %s)", r, r ? err.msg : "",
                  exact && g->index != 1 ? "success" : want);
    }
    // the same refusals in a batch on the caller's buffers, members 0 and 1 coming out of the
    // all-to-all together (so that the two run side by side; the others go on to a call that
    // times out whenever they come): a shorter message, then a longer one LONGER_TRIES times.
    // Open MPI 4.1.4 completed a posted receive of a longer message sent by another thread of
    // the same process, now and then, as if it fitted (3 to 266 of 20,000; the engine's
    // receives are probed now). A failure ends the loop on its side: the sender's eager sends
    // complete alone, the receiver times out once.
    tb_p2p_op one = {g->index == 0 ? TB_COMM_SEND : TB_COMM_RECV, g, g->index == 0 ? a : b, 4, g->index == 0 ? 1 : 0, -1};
    for (int k = 0; k <= LONGER_TRIES && g->backend->batch_send_recv && g->index <= 1 && !me->fail[0]; k++) {
        if (g->index == 1) one.count = k == 0 ? 5 : 3;
        timed_out = 0;
        int r = g->backend->batch_send_recv(&one, 1, &timed_out, &err);
        const char *want = k == 0 ? "recv on group world from member 0: message of 4 elements, expected 5"
                                  : "recv on group world from member 0: message of 4 elements, expected 3";
        if (g->index == 0 && r != 0) wfail(me, rk, "a batch send of 4: %s", err.msg);
        if (g->index == 1 && (r == 0 || !strstr(err.msg, want)))
            wfail(me, rk, "a batch recv of the wrong size, try %d: rc %d, '%s' (want '%s')", k, r, r ? err.msg : "",
                  want);
    }
    // member 0 never joins: the others time out as on the local backend; on MPI's own blocking
    // collective (native, one member per process) only the watchdog can end that wait, and a
    // worker has none: the stall drills below check it under pretrain_gpt
    if (g->index != 0 && (g->backend == &tb_mpi_exact_backend || rk->world->local_count > 1)) {
        int r = CALL(all_reduce, a, N, TB_RED_SUM);
        if (r == 0 || !timed_out || !strstr(err.msg, "all_reduce on group world") || !strstr(err.msg, "not complete after 2.0 s"))
            wfail(me, rk, "an all_reduce one member skips: rc %d, timed out %d, '%s'", r, timed_out, r ? err.msg : "");
    }
    free(a), free(b), free(e);
}
#undef CALL

static int worker(int k, const char *algorithm) {
    tb_launch l;
    tb_error err;
    if (tb_initialize(&l, 0, NULL, &err) != 0 || !l.mpi) {
        printf("WORKER FAIL: %s\n", l.mpi ? err.msg : "not under mpirun");
        return 1;
    }
    tb_config cfg;
    config_defaults(&cfg);
    cfg.world_size = l.processes * k;
    cfg.tensor_model_parallel_size = k;  // tp inside a process, dp and world across
    cfg.mpi_collectives = !strcmp(algorithm, "exact") ? TB_MPI_COLLECTIVES_EXACT : TB_MPI_COLLECTIVES_NATIVE;
    config_resolve(&cfg);
    tb_world w;
    int status = 0;
    if (parallel_state_world_init_process(&w, &cfg, l.process, l.processes, &tb_local_backend, &err) != 0 ||
        tb_mpi_world_connect(&w, &err) != 0) {
        printf("WORKER FAIL process %d: %s\n", l.process, err.msg);
        tb_finalize(&l, 0);
        return 1;
    }
    w.comm.collective_timeout_s = 2;
    for (int r = w.local_first; r < w.local_first + w.local_count; r++) tb_allocator_init(w.ranks[r].mem, 0, NULL, NULL);
    worker_rank *ranks = calloc((size_t)w.size, sizeof *ranks);
    parallel_state_run_ranks(&w, worker_rank_fn, ranks);
    for (int r = w.local_first; r < w.local_first + w.local_count; r++) {
        if (ranks[r].fail[0]) printf("WORKER FAIL %s\n", ranks[r].fail), status = 1;
        tb_allocator_release_cache(w.ranks[r].mem);
    }
    tb_mpi_world_disconnect(&w);
    parallel_state_world_free(&w);
    free(ranks);
    if (status == 0) printf("WORKER OK process %d\n", l.process);
    tb_finalize(&l, 0);
    return status;
}

static char self_path[1024];

static int occurrences(const char *text, const char *needle) {
    int n = 0;
    for (const char *p = text; (p = strstr(p, needle)); p++) n++;
    return n;
}

// Both paths: a spanning group here has two members, whose sums are the group-order bits on
// MPI's own collectives too (a + b = b + a).
TB_TEST(every_call_of_the_mpi_backend_gives_the_local_backends_bits) {
    for (int a = 0; a < 2; a++)
        for (int k = 1; k <= 2; k++) {
            int rc = tb_run_merged(&sh, NULL, MPIRUN " -np 2 %s --worker %d %s", self_path, k, algorithms[a]);
            mpi_seconds += sh.seconds;
            TB_CHECK(rc == 0 && occurrences(sh.out, "WORKER OK") == 2, "2 processes x %d, %s: exit %d\n%s", k,
                     algorithms[a], rc, sh.out);
            printf("    every call, -np 2 x %d, %s: %s (%.1f s)\n", k, algorithms[a], rc == 0 ? "ok" : "FAILED",
                   sh.seconds);
        }
}

TB_TEST(single_rank_reference) {
    char dir[512];
    run_dir(dir, sizeof dir, "single", 0);
    TB_REQUIRE(tb_run_merged(&sh, NULL, TB_MPI_ENGINE TB_MPI_MODEL " --run-dir %s", dir) == 0, "single rank:\n%s", sh.out);
    TB_REQUIRE(read_losses(dir, single) == STEPS, "single rank: %d steps", STEPS);
    // a threads run says so in its launch.json
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, TB_RUN_LAUNCH);
    json_t *launch = tb_load_json(path);
    TB_REQUIRE(launch, "%s", path);
    TB_CHECK(!strcmp(json_string_value(json_object_get(launch, "launcher")), "threads") &&
                 json_integer_value(json_object_get(launch, "processes")) == 1 &&
                 json_array_size(json_object_get(launch, "argv")) > 1,
             "launch.json of a threads run");
    json_decref(launch);
}

// One layout on rank threads and under mpirun on each path of --mpi-collectives (run
// directories numbered i): the losses the same bits (a wide layout on native: within 1e-5
// of threads and the same bits as a second native run), within 1e-5 of the single rank's
// (ref), the run directory complete and saying which path ran.
static void check_layout(const layout *l, int i, const double *ref) {
    char tdir[512], mdir[512];
    run_dir(tdir, sizeof tdir, "threads", i);
    if (tb_run_merged(&sh, NULL, TB_MPI_ENGINE TB_MPI_MODEL " %s --run-dir %s", l->flags, tdir) != 0) {
        TB_CHECK(0, "%s on threads:\n%s", l->name, sh.out);
        return;
    }
    double t[STEPS];
    TB_CHECK(read_losses(tdir, t) == STEPS, "%s: %d steps on threads", l->name, STEPS);
    for (int a = 0; a < 2; a++) {
        const int exact = a == 1, runs = l->wide && !exact ? 2 : 1;
        double m[2][STEPS], secs = 0;
        for (int k = 0; k < runs; k++) {
            tb_tmp_path(mdir, sizeof mdir, "mpi-procs-%s-%d-%d", algorithms[a], i, k);
            int rc = mpirun(l->processes, TB_MPI_MODEL " %s --mpi-collectives %s --ranks-per-process %d --run-dir %s",
                            l->flags, algorithms[a], l->ranks_per_process, mdir);
            secs += sh.seconds;
            if (rc != 0) {
                TB_CHECK(0, "%s under mpirun -np %d, %s: exit %d\n%s", l->name, l->processes, algorithms[a], rc,
                         sh.out);
                return;
            }
            TB_CHECK(read_losses(mdir, m[k]) == STEPS, "%s, %s: %d steps", l->name, algorithms[a], STEPS);
        }
        double worst = 0, apart = 0;
        for (int s = 0; s < STEPS; s++) {
            double rel = fabs(m[0][s] - ref[s]) / fabs(ref[s]);
            worst = fmax(worst, rel);
            apart = fmax(apart, fabs(m[0][s] - t[s]) / fabs(t[s]));
            TB_CHECK(rel <= 1e-5, "%s, %s: step %d loss %.9g vs single rank %.9g (rel %.2e)", l->name, algorithms[a],
                     s + 1, m[0][s], ref[s], rel);
        }
        if (runs == 2) {
            TB_CHECK(apart <= 1e-5, "%s, %s: losses %.2e from the threads run's (bound 1e-5)", l->name, algorithms[a],
                     apart);
            TB_CHECK(memcmp(m[0], m[1], sizeof m[0]) == 0,
                     "%s, %s: two runs differ: %.17g %.17g %.17g and %.17g %.17g %.17g", l->name, algorithms[a],
                     m[0][0], m[0][1], m[0][2], m[1][0], m[1][1], m[1][2]);
        } else {
            TB_CHECK(memcmp(t, m[0], sizeof t) == 0,
                     "%s, %s: losses under mpirun %.17g %.17g %.17g, on threads %.17g %.17g %.17g", l->name,
                     algorithms[a], m[0][0], m[0][1], m[0][2], t[0], t[1], t[2]);
        }
        check_run_dir(l, mdir);
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", mdir, TB_RUN_CONFIG);
        json_t *cfg = tb_load_json(path);
        snprintf(path, sizeof path, "%s/%s", mdir, TB_RUN_LAUNCH);
        json_t *launch = tb_load_json(path);
        snprintf(path, sizeof path, "%s/%s", mdir, TB_RUN_CONDITIONS);
        json_t *cond = tb_load_json(path);
        TB_CHECK(!strcmp(json_string_value(json_object_get(cfg, "mpi_collectives")) ?: "", algorithms[a]) &&
                     !strcmp(json_string_value(json_object_get(launch, "mpi_collectives")) ?: "", algorithms[a]) &&
                     !strcmp(json_string_value(json_object_get(cond, "mpi_collectives")) ?: "", algorithms[a]),
                 "%s: config.json, launch.json and conditions.json say mpi_collectives %s", l->name, algorithms[a]);
        json_decref(cfg);
        json_decref(launch);
        json_decref(cond);
        if (strstr(l->flags, "pipeline")) check_pipeline(l, mdir, tdir);
        if (runs == 2)
            printf("    %-30s -np %d x %d, %s: %.1e from threads, the same bits twice, vs single rank %.1e (%.1f s)\n",
                   l->name, l->processes, l->ranks_per_process, algorithms[a], apart, worst, secs);
        else
            printf("    %-30s -np %d x %d, %s: bitwise as threads, vs single rank %.1e (%.1f s)\n", l->name,
                   l->processes, l->ranks_per_process, algorithms[a], worst, secs);
    }
}

TB_TEST(layouts_under_mpirun_match_threads_on_both_paths_and_the_single_rank) {
    for (int i = 0; i < NLAYOUTS; i++) check_layout(&layouts[i], i, single);
}

// Context parallelism with each exchange (the K/V all-gather; the ring's sends and receives on
// the cp group) across processes, against the single rank with the same flash core: cp 2 over
// two processes, and the ring with tp 2 inside each process and cp across.
#define FLASH " --attention-backend flash"
static const layout cp_layouts[] = {
    {"cp 2 all_gather", 2, 1, FLASH " --context-parallel-size 2 --cp-comm-type all_gather", 0},
    {"cp 2 p2p", 2, 1, FLASH " --context-parallel-size 2 --cp-comm-type p2p", 0},
    {"K 2: tp 2 x cp 2 p2p", 2, 2,
     FLASH " --world-size 4 --tensor-model-parallel-size 2 --context-parallel-size 2 --cp-comm-type p2p", 0},
};

// Layouts of a model other than TB_MPI_MODEL's (its flags added to every run), against that
// model's own single rank (run directory "single-<tag>"); their run directories numbered from first.
static void check_against_own_single_rank(const char *flags, const char *tag, const layout *ls, int n, int first) {
    char dir[512];
    run_dir(dir, sizeof dir, tag, 0);
    double single_losses[STEPS];
    TB_REQUIRE(tb_run_merged(&sh, NULL, TB_MPI_ENGINE TB_MPI_MODEL "%s --run-dir %s", flags, dir) == 0,
               "%s: single rank:\n%s", tag, sh.out);
    TB_REQUIRE(read_losses(dir, single_losses) == STEPS, "%s: single rank: %d steps", tag, STEPS);
    for (int i = 0; i < n; i++) check_layout(&ls[i], first + i, single_losses);
}

TB_TEST(context_parallel_under_mpirun_matches_threads_bitwise_and_the_single_rank) {
    check_against_own_single_rank(FLASH, "single-flash", cp_layouts, (int)(sizeof cp_layouts / sizeof *cp_layouts),
                                  NLAYOUTS);
}

// --qk-layernorm across processes: the q and k norms' gradients, partial sums over tp, all-reduced
// over the tp group of two processes (and of two rank threads in one process, dp across), against
// the single rank with the same norms.
#define QK " --qk-layernorm"
static const layout qk_layouts[] = {
    {"qk-layernorm tp 2 + sp", 2, 1, QK " --tensor-model-parallel-size 2 --sequence-parallel", 0},
    {"qk-layernorm K 2: tp 2 x dp 2 + dist-opt", 2, 2,
     QK " --world-size 4 --tensor-model-parallel-size 2 --use-distributed-optimizer", 0},
};

TB_TEST(qk_layernorm_under_mpirun_matches_threads_bitwise_and_the_single_rank) {
    check_against_own_single_rank(QK, "single-qk", qk_layouts, (int)(sizeof qk_layouts / sizeof *qk_layouts),
                                  NLAYOUTS + 8);
}

// Expert parallelism across processes: the all-to-all dispatcher's exchange (and the counts'
// all-gather; under etp, the tokens' all-gather and reduce-scatter over etp) over the MPI
// backend gives the bits of the rank threads, and the single rank's
// losses within the tolerance. Its own single-rank reference: a MoE model.
#define MOE " --num-experts 4 --moe-router-topk 2 --moe-ffn-hidden-size 24 --moe-layer-freq 2" \
            " --moe-aux-loss-coeff 0.01 --moe-token-dispatcher-type alltoall"
TB_TEST(expert_parallel_layouts_under_mpirun_match_threads_bitwise_and_the_single_rank) {
    static const layout ep[] = {
        {"moe ep 2", 2, 1, "--world-size 2 --expert-model-parallel-size 2", 0},
        {"K 2: moe ep 4", 2, 2, "--world-size 4 --expert-model-parallel-size 4", 0},  // the ep group spans processes
        // the tp group and the etp group (etp = tp = 2) across processes: the etp all-gather and
        // reduce-scatter of the tokens over MPI
        {"moe tp 2 sp, etp 2", 2, 1, "--world-size 2 --tensor-model-parallel-size 2 --sequence-parallel", 0},
        // tp inside each process, experts whole (etp 1), ep 2 and expert-dp across processes
        {"K 2: moe tp 2 sp, etp 1 x ep 2", 2, 2,
         "--world-size 4 --tensor-model-parallel-size 2 --sequence-parallel --expert-tensor-parallel-size 1 "
         "--expert-model-parallel-size 2", 0},
        // the all-gather dispatcher: the tokens gathered over etp inside each process, over ep across
        {"K 2: moe allgather tp 2 sp, etp 2 x ep 2", 2, 2,
         "--world-size 4 --tensor-model-parallel-size 2 --sequence-parallel --expert-model-parallel-size 2 "
         "--moe-token-dispatcher-type allgather", 0},
    };
    char dir[512];
    double moe_single[STEPS];
    run_dir(dir, sizeof dir, "moe-single", 0);
    TB_REQUIRE(tb_run_merged(&sh, NULL, TB_MPI_ENGINE TB_MPI_MODEL MOE " --run-dir %s", dir) == 0, "single rank:\n%s", sh.out);
    TB_REQUIRE(read_losses(dir, moe_single) == STEPS, "single rank: %d steps", STEPS);
    for (int i = 0; i < (int)(sizeof ep / sizeof *ep); i++) {
        const layout *l = &ep[i];
        char tdir[512], mdir[512], flags[1024];
        tb_flags_merge(flags, sizeof flags, MOE, l->flags);  // (the layout's dispatcher replaces MOE's)
        run_dir(tdir, sizeof tdir, "moe-threads", i);
        if (tb_run_merged(&sh, NULL, TB_MPI_ENGINE TB_MPI_MODEL " %s --run-dir %s", flags, tdir) != 0) {
            TB_CHECK(0, "%s on threads:\n%s", l->name, sh.out);
            continue;
        }
      for (int a = 0; a < 2; a++) {
        tb_tmp_path(mdir, sizeof mdir, "mpi-moe-procs-%s-%d", algorithms[a], i);
        int rc = mpirun(l->processes, TB_MPI_MODEL " %s --mpi-collectives %s --ranks-per-process %d --run-dir %s",
                        flags, algorithms[a], l->ranks_per_process, mdir);
        if (rc != 0) {
            TB_CHECK(0, "%s under mpirun -np %d, %s: exit %d\n%s", l->name, l->processes, algorithms[a], rc, sh.out);
            continue;
        }
        double t[STEPS], m[STEPS], worst = 0;
        TB_CHECK(read_losses(tdir, t) == STEPS && read_losses(mdir, m) == STEPS, "%s: %d steps each", l->name, STEPS);
        TB_CHECK(memcmp(t, m, sizeof t) == 0,
                 "%s, %s: losses under mpirun %.17g %.17g %.17g, on threads %.17g %.17g %.17g", l->name, algorithms[a],
                 m[0], m[1], m[2], t[0], t[1], t[2]);
        for (int st = 0; st < STEPS; st++) {
            double rel = fabs(m[st] - moe_single[st]) / fabs(moe_single[st]);
            worst = fmax(worst, rel);
            TB_CHECK(rel <= 1e-5, "%s: step %d loss %.9g vs single rank %.9g (rel %.2e)", l->name, st + 1, m[st],
                     moe_single[st], rel);
        }
        printf("    %-40s -np %d x %d, %s: bitwise as threads, vs single rank %.1e\n", l->name, l->processes,
               l->ranks_per_process, algorithms[a], worst);
      }
    }
}

// A bad launch: exit status 2 (not the timeout's 124), the message once, naming the numbers,
// and no run directory.
static void refused(const char *what, int processes, const char *args, const char *expected) {
    static int nth;
    char dir[512];
    run_dir(dir, sizeof dir, "refused", nth++);
    int rc = mpirun(processes, TB_MPI_MODEL " %s --run-dir %s", args, dir);
    TB_CHECK(rc == 2, "%s: exit %d, expected 2 (124: it hung)\n%s", what, rc, sh.out);
    const char *hit = strstr(sh.out, expected);
    TB_CHECK(hit, "%s: no '%s' in:\n%s", what, expected, sh.out);
    TB_CHECK(!hit || !strstr(hit + 1, expected), "%s: the message is printed more than once:\n%s", what, sh.out);
    TB_CHECK(!tb_exists(dir), "%s: %s was created", what, dir);
}

TB_TEST(a_world_that_is_not_processes_times_ranks_per_process_is_refused_by_every_process) {
    refused("-np 2 --world-size 4", 2, "--world-size 4",
            "world_size (4) must equal processes (2) x ranks_per_process (1) = 2 under mpirun");
    refused("-np 2 --world-size 2 --ranks-per-process 2", 2, "--world-size 2 --ranks-per-process 2",
            "world_size (2) must equal processes (2) x ranks_per_process (2) = 4 under mpirun");
    refused("-np 2 tp 4", 2, "--tensor-model-parallel-size 4",
            "world_size (2) must be divisible by tensor_model_parallel_size x context_parallel_size x "
            "pipeline_model_parallel_size (4 x 1 x 1 = 4)");
    // without mpirun, ranks per process has nothing to divide
    int rc = tb_run_merged(&sh, NULL, TB_MPI_ENGINE TB_MPI_MODEL " --world-size 4 --ranks-per-process 2");
    TB_CHECK(rc == 2 && tb_has(sh.out, "ranks_per_process (2) needs mpirun"), "exit %d:\n%s", rc, sh.out);
}

// A --run-dir that holds files is refused under mpirun as on threads (every process checks its
// own view of it, then they agree), before process 0 writes anything there.
TB_TEST(a_run_directory_holding_files_is_refused_under_mpirun_before_anything_is_written) {
    char dir[512], stale[600], config[600];
    run_dir(dir, sizeof dir, "held", 0);
    snprintf(stale, sizeof stale, "%s/metrics.rank-00003.jsonl", dir);
    snprintf(config, sizeof config, "%s/config.json", dir);
    tb_run(&sh, NULL, "rm -rf '%s' && mkdir -p '%s' && echo stale > '%s'", dir, dir, stale);
    int rc = mpirun(2, TB_MPI_MODEL " --run-dir %s", dir);
    TB_CHECK(rc != 0 && rc != 124 && tb_has(sh.out, "not empty (it holds metrics.rank-00003.jsonl)"),
             "exit %d (124: it hung)\n%s", rc, sh.out);
    TB_CHECK(tb_exists(stale) && !tb_exists(config), "the stale file is left alone and no config.json is written");
}

int main(int argc, char **argv) {
    if (!tb_mpi_built()) {
        printf("SKIP: MPI backend not built\n");
        return SKIP;
    }
    if (argc == 4 && !strcmp(argv[1], "--worker")) return worker(atoi(argv[2]), argv[3]);
    if (!realpath(argv[0], self_path)) snprintf(self_path, sizeof self_path, "%s", argv[0]);
    TB_RUN(every_call_of_the_mpi_backend_gives_the_local_backends_bits);
    TB_RUN(single_rank_reference);
    TB_RUN(layouts_under_mpirun_match_threads_on_both_paths_and_the_single_rank);
    TB_RUN(expert_parallel_layouts_under_mpirun_match_threads_bitwise_and_the_single_rank);
    TB_RUN(context_parallel_under_mpirun_matches_threads_bitwise_and_the_single_rank);
    TB_RUN(qk_layernorm_under_mpirun_matches_threads_bitwise_and_the_single_rank);
    TB_RUN(a_world_that_is_not_processes_times_ranks_per_process_is_refused_by_every_process);
    TB_RUN(a_run_directory_holding_files_is_refused_under_mpirun_before_anything_is_written);
    printf("    mpirun wall time in all: %.1f s\n", mpi_seconds);
    tb_output_free(&sh);
    return tb_test_summary();
}

#else

int main(void) {
    printf("SKIP: %s\n", tb_mpi_built() ? "no mpirun found at configure time" : "MPI backend not built");
    return SKIP;
}

#endif
