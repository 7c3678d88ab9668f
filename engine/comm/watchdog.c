#include "comm/watchdog.h"

#include <errno.h>
#include <jansson.h>
#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "comm/mpi_backend.h"
#include "core/failure_report.h"
#include "core/fileio.h"
#include "runtime/ranges.h"
#include "core/run_dir.h"
#include "comm/parallel_state.h"
#include "comm/flight_recorder.h"

#define TAIL 8

typedef struct rank_view {
    tb_flight_entry tail[TAIL];
    int ntail;
    const tb_flight_entry *pending;    // the newest entry still open, or NULL
    const tb_flight_entry *completed;  // the newest closed entry, or NULL
} rank_view;

static void view_rank(tb_rank *rk, rank_view *v) {
    v->ntail = tb_flight_recorder_tail(rk->fr, v->tail, TAIL);
    v->pending = v->completed = NULL;
    for (int i = v->ntail - 1; i >= 0; i--) {
        if (!v->pending && v->tail[i].exit_ns == 0 && !v->completed) v->pending = &v->tail[i];
        if (!v->completed && v->tail[i].exit_ns != 0) v->completed = &v->tail[i];
    }
}

static json_t *entry_json(const tb_flight_entry *e, int64_t now) {
    if (!e) return json_null();
    json_t *o = json_pack("{s:s, s:i, s:i, s:I, s:s, s:I, s:I, s:I, s:i}", "group", e->group, "group_id", e->group_id,
                          "group_size", e->group_size, "seq", (json_int_t)e->seq, "op", tb_comm_op_name(e->op), "count",
                          (json_int_t)e->count, "bytes", (json_int_t)e->bytes, "step", (json_int_t)e->step,
                          "microbatch", e->microbatch);
    if (e->peer >= 0) json_object_set_new(o, "peer", json_integer(e->peer));
    if (e->exit_ns) json_object_set_new(o, "duration_ms", json_real((double)(e->exit_ns - e->enter_ns) / 1e6));
    else json_object_set_new(o, "pending_for_s", json_real((double)(now - e->enter_ns) / 1e9));
    return o;
}

static json_t *members_json(const tb_group *g) {
    json_t *members = json_array();
    for (int i = 0; i < g->size; i++) json_array_append_new(members, json_integer(g->ranks[i]));
    return members;
}

static double wall_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

// One rank's part (core/failure_report.h): what the merge needs to name every rank, find the
// stuck ones and their smallest common group, and see what an absent rank last took part in.
static json_t *part_json(tb_world *w, tb_rank *rk, const rank_view *v, int64_t now, const char *reason,
                         const char *message, const json_t *timed_out, const tb_rank *detector, const char *host) {
    json_t *tail = json_array(), *groups = json_object();
    for (int i = 0; i < v->ntail; i++) json_array_append_new(tail, entry_json(&v->tail[i], now));
    for (int k = 0; k < TB_NGROUP_KINDS; k++) {
        const tb_group *g = &rk->groups[k];
        if (g->id >= 0 && g->size > 0)
            json_object_set_new(groups, g->name, json_pack("{s:i, s:o}", "group_id", g->id, "members", members_json(g)));
    }
    const tb_config *c = w->cfg;
    json_t *part = json_pack(
        "{s:s, s:i, s:s, s:{s:i, s:i, s:i, s:i}, s:I, s:i, s:o, s:o, s:o, s:o, s:i, s:i, s:s, s:I,"
        " s:{s:i, s:i, s:i, s:i, s:i, s:i}, s:f, s:s, s:s, s:O, s:o, s:o, s:f}",
        "kind", "hang_part", "rank", rk->rank, "rank_label", rk->label, "coordinates", "tp", rk->coords.tp, "cp",
        rk->coords.cp, "dp", rk->coords.dp, "pp", rk->coords.pp, "step", (json_int_t)rk->step, "microbatch",
        (int)rk->microbatch, "pending", entry_json(v->pending, now), "last_completed", entry_json(v->completed, now),
        "flight_recorder_tail", tail, "groups", groups, "process", w->process, "processes", w->processes, "host",
        host, "pid", (json_int_t)getpid(), "world", "size", w->size, "tp", c->tensor_model_parallel_size, "cp",
        c->context_parallel_size, "dp", c->data_parallel_size, "pp", c->pipeline_model_parallel_size,
        "ranks_per_process", w->local_count, "collective_timeout_s", w->comm.collective_timeout_s, "reason", reason,
        "message", message, "timed_out", timed_out ? timed_out : json_null(), "detected_by",
        detector ? json_integer(detector->rank) : json_null(), "detected_by_label",
        detector ? json_string(detector->label) : json_null(), "written_at", wall_s());
    // where the rank is: its open ranges, read from the reporting thread (a rank stalled or
    // computing does not move them meanwhile; one still running may, and the text is a hint)
    char phase[512];
    tb_ranges_stack_string(rk->ranges, phase, sizeof phase);
    json_object_set_new(part, "phase", json_string(phase));
    return part;
}

// This process's part of the report — one file per rank it runs — then the merge of every
// part in the run directory, and its summary on stderr.
#define PEER_PARTS_WAIT_S 2.0
static void report(tb_world *w, const char *reason, const char *what, const tb_group *g, const tb_rank *detector) {
    const int64_t now = tb_now_ns();
    const char *dir = w->run_dir[0] ? w->run_dir : ".";
    char host[256] = "?";
    if (gethostname(host, sizeof host - 1) != 0) snprintf(host, sizeof host, "?");
    json_t *timed_out = NULL;
    if (g) {
        rank_view mine;
        view_rank(g->rk, &mine);
        timed_out = json_pack("{s:s, s:i, s:I, s:s, s:o}", "group", g->name, "group_id", g->id, "seq",
                              (json_int_t)g->seq, "op", mine.pending ? tb_comm_op_name(mine.pending->op) : "?",
                              "members", members_json(g));
    }
    tb_error err = {""};
    int wrote = 1;
    for (int r = w->local_first; r < w->local_first + w->local_count; r++) {
        rank_view v;
        view_rank(&w->ranks[r], &v);
        json_t *part = part_json(w, &w->ranks[r], &v, now, reason, what, timed_out, detector, host);
        char path[TB_PATH_MAX + 64];
        if (tb_rank_file_path(path, sizeof path, dir, TB_RANK_HANG_PART, r, &err) != 0 ||
            tb_write_json_atomic(path, part, &err) != 0)
            wrote = 0;
        json_decref(part);
    }
    json_decref(timed_out);
    json_t *merged = NULL;
    char path[TB_PATH_MAX + 32];
    tb_error merge_err;
    if (tb_run_path(path, sizeof path, dir, TB_RUN_HANG_REPORT, &merge_err) != 0 ||
        tb_report_merge_write(dir, TB_RANK_HANG_PART, &merged, &merge_err) != 0)
        wrote = 0, err = merge_err;
    // Under mpirun, this process's end makes mpirun terminate the others at once, and a peer
    // killed before it wrote its part is absent from the report. A peer blocked in MPI's own
    // collective reports 0.5 s after its timeout (the watchdog's grace, below), a call that
    // times out in its own thread at its timeout: tp x pp, 4 processes under ASan on 2 cores,
    // a pipeline rank's recv timed out first, the tp rank waiting for the stalled one was
    // killed before its report, and the merge named it a root cause beside the stalled rank.
    // So the detector waits up to PEER_PARTS_WAIT_S for the parts of every rank (peers whose
    // own timeouts fire meanwhile write theirs) and merges again; a stalled rank's process
    // writes its part only when terminated, hence the bound. Not when terminated itself.
    if (w->processes > 1 && strcmp(reason, "terminated")) {
        const int64_t until = tb_now_ns() + (int64_t)(PEER_PARTS_WAIT_S * 1e9);
        while (tb_report_parts_count(dir, TB_RANK_HANG_PART) < w->size && tb_now_ns() < until) {
            const struct timespec pause = {0, 100 * 1000 * 1000};
            nanosleep(&pause, NULL);
        }
        json_decref(merged);
        merged = NULL;
        if (tb_report_merge_write(dir, TB_RANK_HANG_PART, &merged, &merge_err) != 0) wrote = 0, err = merge_err;
    }
    // the summary in one write: under mpirun the processes' stderr lines interleave
    char *text = NULL;
    size_t len = 0;
    FILE *out = open_memstream(&text, &len);
    if (!out) out = stderr;
    if (merged) tb_hang_report_print(out, merged, wrote ? path : NULL);
    else fprintf(out, "\nHANG: %s\n", what);
    if (!wrote) fprintf(out, "  report not written: %s\n", err.msg);
    if (out != stderr) {
        fclose(out);
        fputs(text, stderr);
        free(text);
    }
    json_decref(merged);
    fflush(NULL);
}

void tb_watchdog_report_hang(tb_group *g, const char *what) {
    tb_rank *me = g->rk;
    tb_world *w = me->world;
    if (!w) {
        fprintf(stderr, "%s: HANG: %s\n", me->label, what);
        fflush(NULL);
        return;
    }
    if (atomic_exchange(&w->hang_reported, 1)) {
        // another rank (or the SIGTERM watcher) is writing the report; the world is aborted
        // when it is whole
        parallel_state_wait_for_abort(w);
        return;
    }
    report(w, "timeout", what, g, me);
}

void tb_watchdog_report_stall(tb_rank *rk, const char *what) {
    tb_world *w = rk->world;
    if (!w || atomic_exchange(&w->hang_reported, 1)) return;
    report(w, "stalled", what, NULL, rk);
}

// ---------------------------------------------------------------------------------------
// SIGTERM under mpirun

static sem_t term_sem;
static pthread_t term_thread;
static atomic_int term_armed;
static struct sigaction term_previous;

static void on_sigterm(int sig) {
    (void)sig;
    sem_post(&term_sem);  // async-signal-safe; the watcher does the rest outside the handler
}

static void *term_watch(void *arg) {
    tb_world *w = arg;
    while (sem_wait(&term_sem) != 0 && errno == EINTR) {
    }
    if (!atomic_load(&term_armed)) return NULL;  // tb_watchdog_stop
    // a rank of this process is writing its own report: the process ends after it
    if (atomic_exchange(&w->hang_reported, 1)) return NULL;
    char what[256];
    snprintf(what, sizeof what, "process %d of %d terminated by SIGTERM (mpirun ends every process of a job when "
             "one of them fails)", w->process, w->processes);
    report(w, "terminated", what, NULL, NULL);
    _exit(TB_EXIT_HANG);  // the rank threads are still in their calls: no orderly return
}

// ---------------------------------------------------------------------------------------
// The watchdog thread under mpirun

static pthread_t monitor_thread;
static pthread_mutex_t monitor_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t monitor_cv;
static int monitor_stop, monitor_running;

// A call blocked in MPI past the collective timeout on group g (the calling thread's view):
// this process's parts of the hang report, named as the call's own timeout would name it, by
// the group's member in this process, and the process's end, since that thread cannot return.
// Nothing when a report is already being written: its writer ends the process, or the abort
// rule below does.
static void fire(tb_world *w, tb_group *g) {
    if (!g || atomic_exchange(&w->hang_reported, 1)) return;
    tb_rank *rk = g->rk;
    rank_view v;
    view_rank(rk, &v);
    char what[256];
    snprintf(what, sizeof what, "%s on group %s (%d ranks) not complete after %.1f s",
             v.pending ? tb_comm_op_name(v.pending->op) : "a collective", g->name, g->size, tb_comm_timeout_s(g));
    report(w, "timeout", what, g, rk);
    fprintf(stderr, "%s: HANG: %s (seen by the watchdog: the call waits in MPI, which cannot time out)\n", rk->label,
            what);
    fflush(NULL);
    _exit(TB_EXIT_HANG);
}

// Every WATCHDOG_PERIOD_S: a member of this process blocked in MPI's own collective
// (tb_mpi_blocked_since) longer than the collective timeout + WATCHDOG_GRACE_S is a hang
// (fire); a world aborted by a failure of this process while a member is still blocked in MPI
// ABORT_GRACE_S later ends the process with the failure's status, since that member cannot
// see the abort. Calls that time out in their own thread (the local backend, the exact
// algorithm, point-to-point) never block in MPI and are left to report themselves.
#define WATCHDOG_PERIOD_S 0.1
#define WATCHDOG_GRACE_S 0.5
#define ABORT_GRACE_S 2.0
static void *monitor(void *arg) {
    tb_world *w = arg;
    const double timeout = w->comm.collective_timeout_s > 0 ? w->comm.collective_timeout_s : 300.0;
    const int64_t limit_ns = (int64_t)((timeout + WATCHDOG_GRACE_S) * 1e9);
    int64_t aborted_at = 0;
    pthread_mutex_lock(&monitor_mu);
    while (!monitor_stop) {
        struct timespec at;
        clock_gettime(CLOCK_MONOTONIC, &at);
        at.tv_nsec += (long)(WATCHDOG_PERIOD_S * 1e9);
        if (at.tv_nsec >= 1000000000L) at.tv_sec++, at.tv_nsec -= 1000000000L;
        pthread_cond_timedwait(&monitor_cv, &monitor_mu, &at);
        if (monitor_stop) break;
        pthread_mutex_unlock(&monitor_mu);
        tb_group *blocked = NULL;
        const int64_t since = tb_mpi_blocked_since(w, &blocked), now = tb_now_ns();
        if (since && now - since > limit_ns) fire(w, blocked);
        if (since && atomic_load(&w->comm.aborted)) {
            if (!aborted_at) aborted_at = now;
            else if (now - aborted_at > (int64_t)(ABORT_GRACE_S * 1e9)) {
                const int by = atomic_load(&w->comm.aborted) - 1;
                fprintf(stderr, "pretrain_gpt: process %d: the run was aborted by the failure of %s (%s), and a call "
                        "still waits in MPI %.0f s later: ending the process\n", w->process, w->comm.aborted_by,
                        by >= 0 && by < w->size ? w->ranks[by].failure.err.msg : "?", ABORT_GRACE_S);
                fflush(NULL);
                _exit(w->abort_status ? w->abort_status : TB_EXIT_FAILURE);
            }
        } else {
            aborted_at = 0;
        }
        pthread_mutex_lock(&monitor_mu);
    }
    pthread_mutex_unlock(&monitor_mu);
    return NULL;
}

int tb_watchdog_start(tb_world *w, tb_error *err) {
    if (w->processes <= 1) return 0;
    if (sem_init(&term_sem, 0, 0) != 0) return tb_fail(err, "SIGTERM watcher: sem_init: %s", strerror(errno));
    atomic_store(&term_armed, 1);
    if (pthread_create(&term_thread, NULL, term_watch, w) != 0) {
        sem_destroy(&term_sem);
        return tb_fail(err, "SIGTERM watcher: cannot start its thread");
    }
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(&monitor_cv, &attr);
    pthread_condattr_destroy(&attr);
    monitor_stop = 0;
    monitor_running = pthread_create(&monitor_thread, NULL, monitor, w) == 0;
    if (!monitor_running) fprintf(stderr, "pretrain_gpt: the watchdog thread did not start: a call that waits in MPI "
                                          "cannot time out\n");
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigterm;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, &term_previous);
    return 0;
}

void tb_watchdog_stop(tb_world *w) {
    if (w->processes <= 1 || !atomic_load(&term_armed)) return;
    if (monitor_running) {
        pthread_mutex_lock(&monitor_mu);
        monitor_stop = 1;
        pthread_cond_signal(&monitor_cv);
        pthread_mutex_unlock(&monitor_mu);
        pthread_join(monitor_thread, NULL);
        pthread_cond_destroy(&monitor_cv);
        monitor_running = 0;
    }
    sigaction(SIGTERM, &term_previous, NULL);
    atomic_store(&term_armed, 0);
    sem_post(&term_sem);
    pthread_join(term_thread, NULL);
    sem_destroy(&term_sem);
}
