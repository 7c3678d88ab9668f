// test_mpi_failures.c — failures across processes under mpirun, on both paths of
// --mpi-collectives (comm/mpi_backend.h): a rank stalled in one process ends the run with a
// hang report, not a wait forever (on MPI's own blocking collectives the watchdog's, on the
// exact path the call's own timeout); the hang drills name the stalled rank as the root cause
// every time (the default path TB_HANG_REPEATS times, the exact path once); a rank process
// killed by SIGKILL is named absent in the merged report by every survivor, each exiting 4
// within the collective timeout + 5 s; out of memory in two processes keeps both in oom.json.
// The layouts' equivalence across processes is test_mpi.c's.
//
// Exit status 77 (ctest: skipped) when MPI was not built or no mpirun was found.
#include <jansson.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "comm/mpi_backend.h"
#include "core/run_dir.h"

#define SKIP 77

#ifdef TB_MPIEXEC

#include "tb_mpirun.h"
#include "tb_run_dir.h"
#include "tb_shell.h"
#include "tb_test.h"

static const char *const algorithms[] = TB_MPI_ALGORITHMS;
static tb_output sh;
static double mpi_seconds;  // wall time of every mpirun in this test

static const char *run_dir(char *buf, size_t len, const char *kind, int i) { return tb_mpi_run_dir(buf, len, kind, i); }

static int mpirun(int processes, const char *fmt_args, ...) __attribute__((format(printf, 2, 3)));
static int mpirun(int processes, const char *fmt_args, ...) {
    va_list ap;
    va_start(ap, fmt_args);
    int rc = tb_mpirun_engine_v(&sh, &mpi_seconds, processes, fmt_args, ap);
    va_end(ap);
    return rc;
}

// A rank that stops (--inject-stall) leaves its peer in another process waiting: the peer
// times out with its part of the hang report and exits 4 without MPI_Finalize (which would
// wait for the stalled process); mpirun then terminates the stalled process (SIGTERM a second
// later), which writes its own part on SIGTERM. The merged hang.json holds both ranks: the one that timed out pending
// in the call, the stalled one with none.
TB_TEST(a_stall_across_processes_times_out_with_a_hang_report) {
  for (int a = 0; a < 2; a++) {
    char dir[512];
    run_dir(dir, sizeof dir, algorithms[a], 0);
    int rc = mpirun(2,
                    TB_MPI_MODEL_UNTIMED " --world-size 2 --mpi-collectives %s --inject-stall 1:2 "
                                         "--collective-timeout 2 --run-dir %s",
                    algorithms[a], dir);
    TB_CHECK(rc == 4, "exit %d, expected 4 (124: it hung)\n%s", rc, sh.out);
    TB_CHECK(tb_has(sh.out, "HANG: all_reduce on group dp_cp (2 ranks) not complete after 2.0 s") &&
                 tb_has(sh.out, "detected by rank 0 (tp0 cp0 dp0 pp0) in all_reduce"),
             "the hang as process 0 saw it:\n%s", sh.out);
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, TB_RUN_HANG_REPORT);
    json_t *hang = tb_load_json(path);
    TB_REQUIRE(hang, "%s", path);
    json_t *ranks = json_object_get(hang, "ranks");
    TB_CHECK(json_integer_value(json_object_get(hang, "reported_ranks")) == 2 && json_array_size(ranks) == 2,
             "both processes' parts merged (%lld):\n%s", (long long)json_integer_value(json_object_get(hang, "reported_ranks")),
             sh.out);
    TB_CHECK(json_is_object(json_object_get(json_array_get(ranks, 0), "pending")) &&
                 json_is_null(json_object_get(json_array_get(ranks, 1), "pending")),
             "rank 0 pending in the call, the stalled rank 1 in none");
    // mpirun's SIGTERM comes a second after process 0 exits (Open MPI's odls_base_sigkill_timeout),
    // before the stalled rank gives up by itself at twice the timeout, on a machine not too loaded
    const char *why = json_string_value(json_object_get(json_array_get(ranks, 1), "reason")) ?: "";
    TB_CHECK(!strcmp(why, "terminated") || !strcmp(why, "stalled"),
             "the stalled process reported when mpirun terminated it (or when it gave up): '%s'", why);
    json_t *peer = json_array_get(json_object_get(hang, "absent_peers"), 0);
    TB_CHECK(json_integer_value(json_object_get(peer, "rank")) == 1 &&
                 json_is_true(json_object_get(peer, "reported")) &&
                 json_is_object(json_object_get(peer, "last_completed")),
             "rank 1 is the absent peer, with its own last completed call");
    json_decref(hang);
    printf("    stall across processes, %s: ended in %.1f s\n", algorithms[a], sh.seconds);
  }
}

// Starts sh -c cmd in the background; its pid.
static pid_t start_background(const char *cmd) {
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        setpgid(0, 0);  // its own process group, so that a stuck run can be ended whole
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    return pid;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

// Each process under mpirun in a shell that prints its exit status (mpirun's own status is
// the first failing process's, or 0 under --enable-recovery in Open MPI 4.1) and dies as it
// died; the shell ignores SIGTERM, which the engine handles itself.
#define REPORTING_SHELL                                                                                         \
    " sh -c 'trap \"\" TERM; \"$0\" \"$@\"; s=$?; echo \"TB_PROCESS $OMPI_COMM_WORLD_RANK EXIT $s\";"                  \
    " [ $s -gt 128 ] && kill -$((s - 128)) $$; exit $s' "

// A rank process killed by SIGKILL while its peers wait for it (stalled at step 2, so that
// the kill lands mid-run): every survivor reports it absent in the merged hang.json and
// exits with status 4 within the collective timeout + 5 s, whether mpirun terminates them
// (its default: SIGTERM, on which they write their parts) or leaves them to time out
// (--enable-recovery: each times out, writes its part and merges).
static void killed_process(int processes, const char *mpirun_flags, const char *how, const char *algorithm) {
    static int nth;
    char dir[512], log[600], cmd[8192];
    run_dir(dir, sizeof dir, "killed", nth++);
    snprintf(log, sizeof log, "%s.log", dir);
    const double timeout = 2;
    snprintf(cmd, sizeof cmd,
             "rm -rf %s; " MPIRUN " %s -np %d" REPORTING_SHELL TB_MPI_ENGINE TB_MPI_MODEL_UNTIMED
             " --world-size %d --mpi-collectives %s --inject-stall 1:2 --collective-timeout %g --run-dir %s > %s 2>&1",
             dir, mpirun_flags, processes, processes, algorithm, timeout, dir, log);
    unlink(log);
    pid_t pid = start_background(cmd);
    TB_REQUIRE(pid > 0, "fork");
    // the stall is announced once rank 1 waits; its pid is in launch.json
    char *text = NULL;
    for (double t0 = now_s(); now_s() - t0 < 120; usleep(20000)) {
        free(text);
        text = tb_slurp(log);
        if (tb_has(text, "--inject-stall: stopping")) break;
    }
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, TB_RUN_LAUNCH);
    json_t *launch = tb_has(text, "--inject-stall: stopping") ? tb_load_json(path) : NULL;
    free(text);
    json_int_t victim = json_integer_value(
        json_object_get(json_array_get(json_object_get(launch, "per_process"), 1), "pid"));
    json_decref(launch);
    if (victim <= 0) {
        kill(-pid, SIGKILL);
        waitpid(pid, NULL, 0);
        char *out = tb_slurp(log);
        TB_CHECK(0, "%s: no stall announced, or no pid of process 1 in launch.json:\n%s", how, out ? out : "");
        free(out);
        return;
    }
    TB_REQUIRE(kill((pid_t)victim, SIGKILL) == 0, "kill -9 %lld", (long long)victim);
    const double killed = now_s();
    int status = 0, done = 0;
    while (!done && now_s() - killed < 60) {
        if (waitpid(pid, &status, WNOHANG) == pid) done = 1;
        else usleep(20000);
    }
    const double secs = now_s() - killed;
    if (!done) {
        kill(-pid, SIGKILL);
        waitpid(pid, &status, 0);
    }
    mpi_seconds += secs;
    char *out = tb_slurp(log);
    TB_CHECK(done, "%s: the survivors were still running 60 s after the kill:\n%s", how, out ? out : "");
    TB_CHECK(secs <= timeout + 5, "%s: the run ended %.1f s after the kill; the bound is the collective timeout + 5 s",
             how, secs);
    for (int p = 0; p < processes; p++) {
        char want[64];
        snprintf(want, sizeof want, "TB_PROCESS %d EXIT %d", p, p == 1 ? 128 + SIGKILL : 4);
        TB_CHECK(tb_has(out, want), "%s: no '%s' in:\n%s", how, want, out ? out : "");
    }
    snprintf(path, sizeof path, "%s/%s", dir, TB_RUN_HANG_REPORT);
    json_t *hang = tb_load_json(path);
    json_t *absent = json_object_get(hang, "absent_ranks"), *a = json_array_get(absent, 0);
    TB_CHECK(hang && json_array_size(absent) == 1 && json_integer_value(json_object_get(a, "rank")) == 1 &&
                 !strcmp(json_string_value(json_object_get(a, "rank_label")) ?: "", "rank 1 (tp0 cp0 dp1 pp0)") &&
                 json_integer_value(json_object_get(a, "process")) == 1,
             "%s: hang.json names rank 1 (process 1) as the one absent rank:\n%s", how, out ? out : "");
    json_t *seen = json_object_get(a, "last_completed");
    TB_CHECK(json_is_object(seen) && !strcmp(json_string_value(json_object_get(seen, "known_from")) ?: "", "peers") &&
                 json_integer_value(json_object_get(seen, "step")) == 1,
             "%s: the absent rank's last call, as its peers saw it: a call of step 1", how);
    TB_CHECK(json_integer_value(json_object_get(hang, "reported_ranks")) == processes - 1,
             "%s: every survivor's part merged (%lld of %d)", how,
             (long long)json_integer_value(json_object_get(hang, "reported_ranks")), processes - 1);
    json_decref(hang);
    // tracebook hang merges the same parts and names the absent rank
    int rc = tb_run_merged(&sh, NULL, "%s/tracebook hang %s", TB_BIN_DIR, dir);
    TB_CHECK(rc == 0 && tb_has(sh.out, "reports from ") && tb_has(sh.out, "absent (no part written") &&
                 tb_has(sh.out, "rank 1 (tp0 cp0 dp1 pp0)"),
             "%s: tracebook hang: exit %d\n%s", how, rc, sh.out);
    free(out);
    printf("    SIGKILLed process, -np %d, %s, %s: survivors exited 4 in %.1f s after the kill\n", processes, how,
           algorithm, secs);
}

TB_TEST(a_sigkilled_process_is_reported_absent_by_every_survivor) {
    for (int a = 0; a < 2; a++) {
        killed_process(2, "", "mpirun terminates the survivors", algorithms[a]);
        killed_process(4, "--enable-recovery", "survivors time out (--enable-recovery)", algorithms[a]);
    }
}

// Both processes run out of memory (at model construction): each writes its rank's part and
// merges, so oom.json lists both ranks whichever process merged last.
TB_TEST(out_of_memory_in_two_processes_keeps_both_in_oom_json) {
  for (int a = 0; a < 2; a++) {
    char dir[512], path[1024];
    run_dir(dir, sizeof dir, "oom", a);
    int rc = mpirun(2, TB_MPI_MODEL " --world-size 2 --mpi-collectives %s --memory-cap 1K --run-dir %s", algorithms[a], dir);
    TB_CHECK(rc == 3, "exit %d, expected 3\n%s", rc, sh.out);
    snprintf(path, sizeof path, "%s/%s", dir, TB_RUN_OOM_REPORT);
    json_t *m = tb_load_json(path);
    json_t *all = json_object_get(m, "out_of_memory_ranks");
    TB_CHECK(m && json_array_size(all) == 2 && json_integer_value(json_object_get(json_array_get(all, 1), "process")) == 1,
             "oom.json lists both ranks, rank 1 from process 1 (%s):\n%s", algorithms[a], sh.out);
    json_decref(m);
  }
}

// The hang drills under processes (the threads' are test_comm_records'): a rank stalled at
// step 2, whichever process's watchdog fires first, the merged report's root cause is the
// stalled rank every time — tp, dp, pp, tp x pp and tp x dp x pp (two rank threads per
// process). TB_HANG_REPEATS sets the repeats (default 2). The collective timeout is 2 s, 4 s
// for the 8 ranks: on a loaded 2-core host a healthy rank of 8 once lagged more than 2 s
// behind the others, so that it had not yet reached the call they were waiting in when the
// dumps were taken and the report named it too (2 root causes); the timeout is what a rank
// may lag, and the drill is about the stalled rank, not about a host that slow.
TB_TEST(the_root_cause_of_each_hang_drill_under_mpirun_is_the_stalled_rank_every_time) {
    static const struct {
        const char *layout;
        int processes, ranks_per_process, stalled, timeout_s;
    } drills[] = {
        {"--world-size 2 --tensor-model-parallel-size 2", 2, 1, 1, 2},
        {"--world-size 2", 2, 1, 0, 2},
        {"--world-size 2 --pipeline-model-parallel-size 2", 2, 1, 1, 2},
        {"--world-size 4 --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2", 4, 1, 1, 2},
        {"--world-size 8 --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2", 4, 2, 5, 4},
    };
    const char *env = getenv("TB_HANG_REPEATS");
    const int native_repeats = env && atoi(env) > 0 ? atoi(env) : 2;
    for (int a = 0; a < 2; a++)
    for (size_t d = 0; d < sizeof drills / sizeof *drills; d++) {
        const int repeats = a == 0 ? native_repeats : 1;  // the default path repeated, the exact one once
        int right = 0;
        char last_wrong[256] = "", dir[512], path[1024];
        run_dir(dir, sizeof dir, "drill", (int)d);
        for (int k = 0; k < repeats; k++) {
            tb_run(&sh, NULL, "rm -rf %s", dir);
            int rc = mpirun(drills[d].processes,
                            " --num-layers 2 --hidden-size 32 --num-attention-heads 2 --seq-length 16 --vocab-size 64"
                            " --micro-batch-size 1 --global-batch-size 8 --train-iters 3 --collective-timeout %d"
                            " --inject-stall %d:2 %s --mpi-collectives %s --ranks-per-process %d --run-dir %s",
                            drills[d].timeout_s, drills[d].stalled, drills[d].layout, algorithms[a],
                            drills[d].ranks_per_process, dir);
            snprintf(path, sizeof path, "%s/%s", dir, TB_RUN_HANG_REPORT);
            json_t *h = rc == 4 ? tb_load_json(path) : NULL;
            json_t *root = json_object_get(h, "root_cause");
            long long who = json_array_size(root) == 1
                                ? (long long)json_integer_value(json_object_get(json_array_get(root, 0), "rank"))
                                : -1;
            if (who == drills[d].stalled) right++;
            else snprintf(last_wrong, sizeof last_wrong, "exit %d, %zu root causes, first rank %lld", rc,
                          json_array_size(root), who);
            json_decref(h);
        }
        printf("    %-72s -np %d x %d, %s, stalled rank %d: named %d of %d times\n", drills[d].layout,
               drills[d].processes, drills[d].ranks_per_process, algorithms[a], drills[d].stalled, right, repeats);
        TB_CHECK(right == repeats,
                 "%s under mpirun, %s: the root cause was rank %d in %d of %d repeats (last other: %s)",
                 drills[d].layout, algorithms[a], drills[d].stalled, right, repeats, last_wrong);
    }
}

int main(void) {
    if (!tb_mpi_built()) {
        printf("SKIP: MPI backend not built\n");
        return SKIP;
    }
    TB_RUN(a_stall_across_processes_times_out_with_a_hang_report);
    TB_RUN(the_root_cause_of_each_hang_drill_under_mpirun_is_the_stalled_rank_every_time);
    TB_RUN(a_sigkilled_process_is_reported_absent_by_every_survivor);
    TB_RUN(out_of_memory_in_two_processes_keeps_both_in_oom_json);
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
