#include "comm/group.h"

#include <sched.h>
#include <time.h>

static const char *const op_names[] = {"all_reduce", "reduce_scatter", "all_gather", "all_to_all",
                                       "broadcast",  "send",           "recv",       "barrier"};

const char *tb_comm_op_name(tb_comm_op op) { return (unsigned)op < sizeof op_names / sizeof *op_names ? op_names[op] : "?"; }

double tb_comm_timeout_s(const tb_group *g) {
    return g->world && g->world->collective_timeout_s > 0 ? g->world->collective_timeout_s : 300.0;
}

int tb_comm_world_aborted(const tb_group *g) { return g->world && atomic_load(&g->world->aborted); }

int tb_comm_fail_aborted(tb_group *g, const char *what, tb_error *err) {
    return tb_fail(err, "%s on group %s stopped: the run was aborted by the failure of %s", what, g->name,
                   g->world->aborted_by);
}

int tb_comm_fail_timed_out(tb_group *g, const char *what, int *timed_out, tb_error *err) {
    *timed_out = 1;
    return tb_fail(err, "%s on group %s (%d ranks) not complete after %.1f s", what, g->name, g->size,
                   tb_comm_timeout_s(g));
}

double tb_comm_now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void tb_comm_backoff(unsigned *polls) {
    unsigned n = (*polls)++;
    if (n < 200) return;
    long ns = 10000L << ((n - 200) / 50 < 7 ? (n - 200) / 50 : 7);
    if (ns > 1000000L) ns = 1000000L;
    struct timespec ts = {0, ns};
    nanosleep(&ts, NULL);
}

void tb_comm_poll_pause(unsigned *polls) {
    if ((*polls)++ < 2000) return;
    sched_yield();
}
