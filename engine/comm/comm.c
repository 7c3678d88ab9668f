// comm.c — the communicator's front door: every call is recorded (range + flight
// recorder), checked for injected faults, dispatched to the group's backend, and a timeout
// turns into a hang report.
#include "comm/comm.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "comm/watchdog.h"
#include "runtime/ranges.h"
#include "comm/parallel_state.h"
#include "comm/flight_recorder.h"

// The calling thread's binding when it is a rank's communication thread (comm.h).
static _Thread_local tb_comm_thread *comm_thread;

void tb_comm_thread_bind(tb_comm_thread *t) { comm_thread = t; }
const tb_comm_thread *tb_comm_thread_current(void) { return comm_thread; }

// The bookkeeping around one call.
typedef struct call {
    tb_group *g;
    uint64_t slot;
    int timed_out;
    tb_error err;
} call;

// Ends the rank's part in the run: from the rank thread by unwinding it, from its
// communication thread through the thread's fail (which does not return either).
__attribute__((noreturn, format(printf, 3, 4))) static void fail_rank(tb_rank *rk, int status, const char *fmt, ...) {
    char msg[sizeof(((tb_error *)0)->msg)];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (comm_thread) {
        comm_thread->fail(comm_thread, status, msg);
        abort();  // fail does not return
    }
    parallel_state_rank_fail(rk, status, "%s", msg);
}

// --inject-stall RANK:STEP: that rank stops before its next call at that step (on whichever
// of its threads makes it first), until the run is aborted; its peers time out and report the hang.
static void maybe_stall(tb_rank *rk) {
    tb_world *w = rk->world;
    const int64_t step = comm_thread ? comm_thread->step : rk->step;
    if (!w || !tb_drills_stalls(&w->drills, rk->rank, step)) return;
    fprintf(stderr, "%s: --inject-stall: stopping before its next collective at step %lld\n", rk->label,
            (long long)step);
    if (w->processes > 1) {
        // peers in other processes time out without aborting this process's world: after
        // twice their timeout the stalled rank stops too, so that no process waits forever
        const double bound = 2 * (w->comm.collective_timeout_s > 0 ? w->comm.collective_timeout_s : 300.0);
        if (!parallel_state_wait_for_abort_timed(w, bound)) {
            char what[256];
            snprintf(what, sizeof what, "stalled by --inject-stall at step %lld for %.0f s (twice the collective "
                     "timeout; its peers in other processes have timed out)", (long long)rk->step, bound);
            tb_watchdog_report_stall(rk, what);
            parallel_state_rank_fail(rk, TB_EXIT_HANG, "%s", what);
        }
    } else {
        parallel_state_wait_for_abort(w);
    }
    fail_rank(rk, w->abort_status, "stalled by --inject-stall at step %lld until the run was aborted",
              (long long)step);
}

// microbatch: what the flight-recorder entry names (-1: the calling thread's current one).
static void begin_as(call *c, tb_group *g, tb_comm_op op, size_t count, int peer, int microbatch) {
    tb_rank *rk = g->rk;
    c->g = g;
    c->timed_out = 0;
    maybe_stall(rk);
    g->seq++;
    TB_RANGE_PUSH("comm.%s.%s", g->name, tb_comm_op_name(op));
    tb_range_comm_args args = {g->name, tb_comm_op_name(op), "float32", g->id, g->size, g->index, g->seq,
                               count,   count * sizeof(float), peer, -1};
    tb_range_annotate_comm(&args);
    tb_flight_entry e = {g->name, g->id, g->size, g->seq, op, count, count * sizeof(float), peer,
                         tb_now_ns(), 0, comm_thread ? comm_thread->step : rk->step,
                         microbatch >= 0 ? microbatch : comm_thread ? comm_thread->microbatch : rk->microbatch};
    c->slot = tb_flight_recorder_enter(rk->fr, &e);
}

static void begin(call *c, tb_group *g, tb_comm_op op, size_t count, int peer) { begin_as(c, g, op, count, peer, -1); }

// A call that failed ends the rank's part in the run (like an NCCL error in Megatron): a
// timeout after its hang report, a call stopped by a peer's failure as that failure's
// consequence, any other error as a communicator failure of its own.
static void end(call *c, int rc) {
    if (rc != 0 && comm_thread) {
        // the hang report is the same; the rank thread fails with it when it next waits
        if (c->timed_out) tb_watchdog_report_hang(c->g, c->err.msg);
        tb_rank *rk = c->g->rk;
        int status = c->timed_out || !rk->world || parallel_state_aborted_by(rk->world) < 0 ? TB_EXIT_HANG
                                                                                          : rk->world->abort_status;
        char msg[sizeof c->err.msg + 32];
        snprintf(msg, sizeof msg, "%s%s", c->timed_out ? "HANG: " : "", c->err.msg);
        comm_thread->fail(comm_thread, status, msg);
    }
    if (rc != 0) {
        tb_rank *rk = c->g->rk;
        if (c->timed_out) {
            tb_watchdog_report_hang(c->g, c->err.msg);
            parallel_state_rank_fail(rk, TB_EXIT_HANG, "HANG: %s", c->err.msg);
        }
        if (rk->world && parallel_state_aborted_by(rk->world) >= 0)
            parallel_state_rank_fail(rk, rk->world->abort_status, "%s", c->err.msg);
        parallel_state_rank_fail(rk, TB_EXIT_HANG, "communicator error: %s", c->err.msg);
    }
    // --debug-slow-link GROUP:MS: the call takes MS ms longer on every member, after all of
    // them are in (the transfer, not the wait for a peer, grows)
    const tb_world *w = c->g->rk->world;
    if (w) tb_drills_slow_link(&w->drills, c->g->name);
    tb_flight_recorder_exit(c->g->rk->fr, c->slot, tb_now_ns());
    TB_RANGE_POP();
}

void tb_all_reduce(tb_group *g, float *buf, size_t count, tb_red_op op) {
    call c;
    begin(&c, g, TB_COMM_ALL_REDUCE, count, -1);
    end(&c, g->backend->all_reduce(g, buf, count, op, &c.timed_out, &c.err));
}

void tb_reduce_scatter(tb_group *g, const float *send, float *recv, size_t recvcount) {
    call c;
    begin(&c, g, TB_COMM_REDUCE_SCATTER, recvcount * (size_t)g->size, -1);
    end(&c, g->backend->reduce_scatter(g, send, recv, recvcount, &c.timed_out, &c.err));
}

void tb_all_gather(tb_group *g, const float *send, float *recv, size_t sendcount) {
    call c;
    begin(&c, g, TB_COMM_ALL_GATHER, sendcount * (size_t)g->size, -1);
    end(&c, g->backend->all_gather(g, send, recv, sendcount, &c.timed_out, &c.err));
}

void tb_all_gather_bytes(tb_group *g, const void *send, void *recv, size_t bytes) {
    tb_all_gather(g, (const float *)send, (float *)recv, bytes / sizeof(float));
}

void tb_all_to_all(tb_group *g, const float *send, const size_t *sendcounts, float *recv,
                   const size_t *recvcounts) {
    size_t total = 0;
    for (int i = 0; i < g->size; i++) total += sendcounts[i];
    call c;
    begin(&c, g, TB_COMM_ALL_TO_ALL, total, -1);
    tb_range_annotate_splits(sendcounts, recvcounts, g->size);
    end(&c, g->backend->all_to_all(g, send, sendcounts, recv, recvcounts, &c.timed_out, &c.err));
}

void tb_broadcast(tb_group *g, float *buf, size_t count, int root) {
    call c;
    begin(&c, g, TB_COMM_BROADCAST, count, root);
    end(&c, g->backend->broadcast(g, buf, count, root, &c.timed_out, &c.err));
}

// One send or recv on its own.
static void p2p(const tb_p2p_op *o) {
    tb_group *g = o->g;
    call c;
    begin_as(&c, g, o->op, o->count, o->peer, o->microbatch);
    end(&c, o->op == TB_COMM_SEND ? g->backend->send(g, o->buf, o->count, o->peer, &c.timed_out, &c.err)
                                  : g->backend->recv(g, o->buf, o->count, o->peer, &c.timed_out, &c.err));
}

void tb_send(tb_group *g, const float *buf, size_t count, int peer) {
    p2p(&(tb_p2p_op){TB_COMM_SEND, g, (float *)buf, count, peer, -1});
}

void tb_recv(tb_group *g, float *buf, size_t count, int peer) { p2p(&(tb_p2p_op){TB_COMM_RECV, g, buf, count, peer, -1}); }

void tb_batch_send_recv(const tb_p2p_op *ops, int n) {
    if (n <= 0) return;
    tb_rank *rk = ops[0].g->rk;
    if (n > TB_P2P_BATCH_MAX)
        fail_rank(rk, TB_EXIT_FAILURE, "communicator error: a batch of %d sends and recvs (at most %d)", n,
                  TB_P2P_BATCH_MAX);
    const tb_comm_backend *be = ops[0].g->backend;
    int together = be->batch_send_recv != NULL;
    for (int i = 0; i < n; i++) {
        if (ops[i].op != TB_COMM_SEND && ops[i].op != TB_COMM_RECV)
            fail_rank(rk, TB_EXIT_FAILURE, "communicator error: op %d of a batch on group %s is %s, not a send or recv",
                      i, ops[i].g->name, tb_comm_op_name(ops[i].op));
        together &= ops[i].g->backend == be;
    }
    if (!together) {  // eager sends: one call after the other
        for (int i = 0; i < n; i++) p2p(&ops[i]);
        return;
    }
    call c[TB_P2P_BATCH_MAX];
    for (int i = 0; i < n; i++) begin_as(&c[i], ops[i].g, ops[i].op, ops[i].count, ops[i].peer, ops[i].microbatch);
    // a failure is the last op's (the newest pending entry, as the hang report reads it)
    call *last = &c[n - 1];
    const int rc = be->batch_send_recv(ops, n, &last->timed_out, &last->err);
    end(last, rc);
    for (int i = n - 2; i >= 0; i--) end(&c[i], 0);  // the innermost range first
}

void tb_barrier(tb_group *g) {
    call c;
    begin(&c, g, TB_COMM_BARRIER, 0, -1);
    end(&c, g->backend->barrier(g, &c.timed_out, &c.err));
}
