// test_mpi.c — pretrain_gpt under mpirun against the same layouts on rank threads and the
// single rank.
//
// Every layout trains the same tiny model for 3 steps three ways: one rank; rank threads of
// one process (the local backend); processes under mpirun (2 or 4 on this host, one rank per
// process or two rank threads per process, the groups that span processes on the MPI
// backend). The MPI backend reduces with the local backend's algorithm and summation code,
// so the per-step losses under mpirun must be the same bits as on threads; against the
// single rank they agree within the layout tests' tolerance (1e-5 relative: the layouts sum
// in another order). Each run directory must hold every rank's files, config.json, and a
// launch.json that says how it ran; pipeline.json's per-stage figures, gathered across
// processes, must equal the threads run's. Bad launches (a world that is not processes x
// ranks per process, a model-parallel group larger than the world the processes make) must
// end every process with status 2 and one message naming the numbers, within a timeout.
//
// Exit status 77 (ctest: skipped) when MPI was not built or no mpirun was found.
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "comm/mpi_backend.h"
#include "core/run_dir.h"
#include "tb_run_dir.h"
#include "tb_shell.h"
#include "tb_test.h"

#define SKIP 77
#define STEPS 3

#ifdef TB_MPIEXEC

// A container runs as root on few cores: mpirun needs leave for both; shared memory and self
// transports only; no binding, so that oversubscribed processes are not pinned to one core.
// `timeout` turns a hang into a failed check, never a stuck suite.
#define MPIRUN "timeout 300 " TB_MPIEXEC " --allow-run-as-root --oversubscribe --bind-to none --mca btl self,vader"
#define ENGINE TB_BIN_DIR "/pretrain_gpt"
#define MODEL                                                                                                    \
    " --num-layers 4 --hidden-size 32 --num-attention-heads 4 --seq-length 16 --vocab-size 128"                  \
    " --micro-batch-size 2 --global-batch-size 8 --train-iters 3 --lr 3e-3 --collective-timeout 60"

typedef struct layout {
    const char *name;
    int processes, ranks_per_process;
    const char *flags;
} layout;

static const layout layouts[] = {
    {"tp 2", 2, 1, "--tensor-model-parallel-size 2"},
    {"tp 2 + sp", 2, 1, "--tensor-model-parallel-size 2 --sequence-parallel"},
    {"dp 2", 2, 1, "--world-size 2"},
    {"dp 2 + distributed optimizer", 2, 1, "--world-size 2 --use-distributed-optimizer"},
    {"pp 2 (1F1B)", 2, 1, "--pipeline-model-parallel-size 2"},
    {"pp 2 x vpp 2 (interleaved)", 2, 1, "--pipeline-model-parallel-size 2 --virtual-pipeline-model-parallel-size 2"},
    {"tp 2 + sp x dp 2 + dist-opt", 4, 1,
     "--world-size 4 --tensor-model-parallel-size 2 --sequence-parallel --use-distributed-optimizer"},
    {"pp 2 x tp 2", 4, 1, "--world-size 4 --pipeline-model-parallel-size 2 --tensor-model-parallel-size 2"},
    {"pp 4 (1F1B)", 4, 1, "--pipeline-model-parallel-size 4"},
    // two rank threads per process: tp inside a process, dp across
    {"K 2: tp 2 x dp 2 + dist-opt", 2, 2, "--world-size 4 --tensor-model-parallel-size 2 --use-distributed-optimizer"},
    // two members of one spanning group in each process
    {"K 2: dp 4", 2, 2, "--world-size 4"},
    {"K 2: pp 2 x dp 2", 2, 2, "--world-size 4 --pipeline-model-parallel-size 2"},
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

static const char *run_dir(char *buf, size_t len, const char *kind, int i) {
    snprintf(buf, len, "%s/mpi-%s-%d", TB_TEST_TMPDIR, kind, i);
    return buf;
}

static int mpirun(int processes, const char *fmt_args, ...) __attribute__((format(printf, 2, 3)));
static int mpirun(int processes, const char *fmt_args, ...) {
    char args[4096];
    va_list ap;
    va_start(ap, fmt_args);
    vsnprintf(args, sizeof args, fmt_args, ap);
    va_end(ap);
    int rc = tb_run_merged(&sh, NULL, MPIRUN " -np %d " ENGINE " %s", processes, args);
    mpi_seconds += sh.seconds;
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

TB_TEST(single_rank_reference) {
    char dir[512];
    run_dir(dir, sizeof dir, "single", 0);
    TB_REQUIRE(tb_run_merged(&sh, NULL, ENGINE MODEL " --run-dir %s", dir) == 0, "single rank:\n%s", sh.out);
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

TB_TEST(layouts_under_mpirun_match_threads_bitwise_and_the_single_rank) {
    for (int i = 0; i < NLAYOUTS; i++) {
        const layout *l = &layouts[i];
        char tdir[512], mdir[512];
        run_dir(tdir, sizeof tdir, "threads", i);
        run_dir(mdir, sizeof mdir, "procs", i);
        if (tb_run_merged(&sh, NULL, ENGINE MODEL " %s --run-dir %s", l->flags, tdir) != 0) {
            TB_CHECK(0, "%s on threads:\n%s", l->name, sh.out);
            continue;
        }
        int rc = mpirun(l->processes, MODEL " %s --ranks-per-process %d --run-dir %s", l->flags, l->ranks_per_process,
                        mdir);
        double secs = sh.seconds;
        if (rc != 0) {
            TB_CHECK(0, "%s under mpirun -np %d: exit %d\n%s", l->name, l->processes, rc, sh.out);
            continue;
        }
        double t[STEPS], m[STEPS];
        TB_CHECK(read_losses(tdir, t) == STEPS && read_losses(mdir, m) == STEPS, "%s: %d steps each", l->name, STEPS);
        TB_CHECK(memcmp(t, m, sizeof t) == 0, "%s: losses under mpirun %.17g %.17g %.17g, on threads %.17g %.17g %.17g",
                 l->name, m[0], m[1], m[2], t[0], t[1], t[2]);
        double worst = 0;
        for (int s = 0; s < STEPS; s++) {
            double rel = fabs(m[s] - single[s]) / fabs(single[s]);
            worst = fmax(worst, rel);
            TB_CHECK(rel <= 1e-5, "%s: step %d loss %.9g vs single rank %.9g (rel %.2e)", l->name, s + 1, m[s],
                     single[s], rel);
        }
        check_run_dir(l, mdir);
        if (strstr(l->flags, "pipeline")) check_pipeline(l, mdir, tdir);
        printf("    %-30s -np %d x %d: bitwise as threads, vs single rank %.1e (%.1f s)\n", l->name, l->processes,
               l->ranks_per_process, worst, secs);
    }
}

// A bad launch: exit status 2 (not the timeout's 124), the message once, naming the numbers,
// and no run directory.
static void refused(const char *what, int processes, const char *args, const char *expected) {
    static int nth;
    char dir[512];
    run_dir(dir, sizeof dir, "refused", nth++);
    int rc = mpirun(processes, MODEL " %s --run-dir %s", args, dir);
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
    int rc = tb_run_merged(&sh, NULL, ENGINE MODEL " --world-size 4 --ranks-per-process 2");
    TB_CHECK(rc == 2 && tb_has(sh.out, "ranks_per_process (2) needs mpirun"), "exit %d:\n%s", rc, sh.out);
}

int main(void) {
    if (!tb_mpi_built()) {
        printf("SKIP: MPI backend not built\n");
        return SKIP;
    }
    TB_RUN(single_rank_reference);
    TB_RUN(layouts_under_mpirun_match_threads_bitwise_and_the_single_rank);
    TB_RUN(a_world_that_is_not_processes_times_ranks_per_process_is_refused_by_every_process);
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
