#include "comm/parallel_state.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "comm/flight_recorder.h"
#include "core/failure_report.h"
#include "core/xalloc.h"
#include "runtime/memory.h"
#include "runtime/ranges.h"

static const char *const kind_names[TB_NGROUP_KINDS] = {"tp",      "cp", "dp",  "dp_cp",    "pp", "mp", "embedding",
                                                        "world",   "pp_grad", "ep", "etp", "expert_dp"};

const char *tb_group_kind_name(tb_group_kind k) {
    return (unsigned)k < TB_NGROUP_KINDS ? kind_names[k] : "?";
}

tb_coords parallel_state_coords(const tb_config *cfg, int rank) {
    tb_coords c;
    int tp = cfg->tensor_model_parallel_size, cp = cfg->context_parallel_size;
    int dp = cfg->data_parallel_size;
    c.tp = rank % tp;
    rank /= tp;
    c.cp = rank % cp;
    rank /= cp;
    c.dp = rank % dp;
    c.pp = rank / dp;
    return c;
}

tb_expert_coords parallel_state_expert_coords(const tb_config *cfg, int rank) {
    tb_expert_coords c = {0, 0, 0, 0};
    // the expert grid, etp-ep-edp-pp (a dense model's: etp = tp, ep 1, so edp = dp x cp)
    const int moe = cfg->num_experts > 0;
    const int etp = moe && cfg->expert_tensor_parallel_size > 0 ? cfg->expert_tensor_parallel_size
                                                                : cfg->tensor_model_parallel_size;
    const int ep = moe ? cfg->expert_model_parallel_size : 1, pp = cfg->pipeline_model_parallel_size;
    const int edp = cfg->world_size / (etp * ep * pp);
    c.etp = rank % etp;
    rank /= etp;
    c.ep = rank % ep;
    rank /= ep;
    c.edp = edp > 0 ? rank % edp : 0;
    c.pp = edp > 0 ? rank / edp : 0;
    return c;
}

void parallel_state_label(char *buf, size_t len, int rank, tb_coords c) {
    tb_rank_label_format(buf, len, rank, c.tp, c.cp, c.dp, c.pp);
}

// Does coordinate set b agree with a outside the group's own axes?
static int same_group(const tb_config *cfg, tb_group_kind k, tb_coords a, tb_coords b) {
    const int last = cfg->pipeline_model_parallel_size - 1;
    switch (k) {
    case TB_GROUP_TP: return a.cp == b.cp && a.dp == b.dp && a.pp == b.pp;
    case TB_GROUP_CP: return a.tp == b.tp && a.dp == b.dp && a.pp == b.pp;
    case TB_GROUP_DP: return a.tp == b.tp && a.cp == b.cp && a.pp == b.pp;
    case TB_GROUP_DP_CP: return a.tp == b.tp && a.pp == b.pp;
    case TB_GROUP_PP:
    case TB_GROUP_PP_GRAD: return a.tp == b.tp && a.cp == b.cp && a.dp == b.dp;
    case TB_GROUP_MP: return a.cp == b.cp && a.dp == b.dp;
    case TB_GROUP_EMBEDDING:
        return a.tp == b.tp && a.cp == b.cp && a.dp == b.dp && (b.pp == 0 || b.pp == last);
    case TB_GROUP_WORLD: return 1;
    default: return 0;
    }
}

static int is_expert_kind(tb_group_kind k) { return k == TB_GROUP_EP || k == TB_GROUP_ETP || k == TB_GROUP_EXPERT_DP; }

// The same in the expert grid.
static int same_expert_group(tb_group_kind k, tb_expert_coords a, tb_expert_coords b) {
    switch (k) {
    case TB_GROUP_EP: return a.etp == b.etp && a.edp == b.edp && a.pp == b.pp;
    case TB_GROUP_ETP: return a.ep == b.ep && a.edp == b.edp && a.pp == b.pp;
    case TB_GROUP_EXPERT_DP: return a.etp == b.etp && a.ep == b.ep && a.pp == b.pp;
    default: return 0;
    }
}

int parallel_state_group_members(const tb_config *cfg, tb_group_kind k, int rank, int *members) {
    tb_coords me = parallel_state_coords(cfg, rank);
    int n = 0;
    // middle pipeline stages belong to no embedding group (Megatron's is_rank_in_embedding_group)
    if (k == TB_GROUP_EMBEDDING && me.pp != 0 && me.pp != cfg->pipeline_model_parallel_size - 1) return 0;
    if (is_expert_kind(k)) {
        const tb_expert_coords e = parallel_state_expert_coords(cfg, rank);
        for (int r = 0; r < cfg->world_size; r++)
            if (same_expert_group(k, e, parallel_state_expert_coords(cfg, r))) members[n++] = r;
        return n;
    }
    for (int r = 0; r < cfg->world_size; r++)
        if (same_group(cfg, k, me, parallel_state_coords(cfg, r))) members[n++] = r;
    return n;
}

// The objects a world's rank owns (tb_rank's pointers), one block per rank.
typedef struct tb_rank_objects {
    tb_allocator mem;
    tb_ranges ranges;
    tb_flight_recorder fr;
} tb_rank_objects;

int parallel_state_rank_is_local(const tb_world *w, int rank) {
    return rank >= w->local_first && rank < w->local_first + w->local_count;
}

int parallel_state_process_of(const tb_world *w, int rank) { return w->local_count > 0 ? rank / w->local_count : 0; }

int parallel_state_rank_on_host(const tb_rank *rk) {
    const tb_world *w = rk->world;
    if (!w || w->processes <= 1) return rk->rank;
    int local_process = w->process;
    const char *s = getenv("OMPI_COMM_WORLD_LOCAL_RANK");
    char *end = NULL;
    long v = s ? strtol(s, &end, 10) : -1;
    if (s && end != s && *end == '\0' && v >= 0 && v < w->processes) local_process = (int)v;
    return local_process * w->local_count + (rk->rank - w->local_first);
}

// Whether every member of the group is a rank of this process.
static int group_is_local(const tb_world *w, const int *members, int n) {
    for (int i = 0; i < n; i++)
        if (!parallel_state_rank_is_local(w, members[i])) return 0;
    return 1;
}

int parallel_state_world_init(tb_world *w, const tb_config *cfg, const tb_comm_backend *in_process, tb_error *err) {
    return parallel_state_world_init_process(w, cfg, 0, 1, in_process, err);
}

int parallel_state_world_init_process(tb_world *w, const tb_config *cfg, int process, int processes,
                                      const tb_comm_backend *in_process, tb_error *err) {
    memset(w, 0, sizeof *w);
    if (processes < 1 || process < 0 || process >= processes || cfg->world_size % processes != 0)
        return tb_fail(err, "process %d of %d cannot hold an equal share of a world of %d ranks", process, processes,
                       cfg->world_size);
    w->cfg = cfg;
    w->in_process = in_process;
    w->size = cfg->world_size;
    w->process = process;
    w->processes = processes;
    w->local_count = w->size / processes;
    w->local_first = process * w->local_count;
    w->comm.collective_timeout_s = cfg->collective_timeout;
    w->comm.mpi_exact = cfg->mpi_collectives == TB_MPI_COLLECTIVES_EXACT;
    if (tb_drills_init(&w->drills, cfg, err) != 0) return -1;
    w->ranks = tb_xcalloc((size_t)w->size, sizeof *w->ranks, "ranks of the world");
    w->objects = tb_xcalloc((size_t)w->size, sizeof *w->objects, "the ranks' own objects");
    w->local_groups = tb_xcalloc((size_t)w->size * TB_NGROUP_KINDS, sizeof *w->local_groups, "local groups");
    w->mpi_groups = tb_xcalloc((size_t)w->size * TB_NGROUP_KINDS, sizeof *w->mpi_groups, "MPI groups");
    int *members = tb_xcalloc((size_t)w->size, sizeof(int), "group members");
    pthread_mutex_init(&w->abort_mu, NULL);
    pthread_cond_init(&w->abort_cv, NULL);
    for (int r = 0; r < w->size; r++) {
        tb_rank *rk = &w->ranks[r];
        rk->rank = r;
        rk->world_size = w->size;
        rk->cfg = cfg;
        rk->world = w;
        rk->coords = parallel_state_coords(cfg, r);
        parallel_state_label(rk->label, sizeof rk->label, r, rk->coords);
        rk->microbatch = -1;
        rk->mem = &w->objects[r].mem;
        rk->ranges = &w->objects[r].ranges;
        rk->fr = &w->objects[r].fr;
        tb_flight_recorder_init(rk->fr);
        for (int k = 0; k < TB_NGROUP_KINDS; k++) {
            int n = parallel_state_group_members(cfg, (tb_group_kind)k, r, members);
            if (n > TB_MAX_GROUP) {
                free(members);
                parallel_state_world_free(w);
                return tb_fail(err, "group %s of %d ranks: at most %d supported", kind_names[k], n, TB_MAX_GROUP);
            }
            tb_group *g = &rk->groups[k];
            g->name = kind_names[k];
            g->size = n;
            g->rk = rk;
            g->mem = rk->mem;
            g->world = &w->comm;
            g->backend = in_process;
            if (n == 0) {  // not a member (a middle stage's embedding group)
                g->index = -1;
                g->id = -1;
                continue;
            }
            memcpy(g->ranks, members, (size_t)n * sizeof(int));
            for (int i = 0; i < n; i++)
                if (members[i] == r) g->index = i;
            g->id = k * w->size + members[0];
            if (!parallel_state_rank_is_local(w, r)) continue;  // another process's rank: membership only
            if (!group_is_local(w, members, n)) {
                g->backend = NULL;  // spans processes: tb_mpi_world_connect gives it the MPI backend
                continue;
            }
            void **shared = &w->local_groups[g->id];
            if (!*shared) *shared = in_process->group_create(n);
            g->backend_state = *shared;
        }
    }
    free(members);
    return 0;
}

void parallel_state_world_free(tb_world *w) {
    for (int i = 0; w->local_groups && i < w->size * TB_NGROUP_KINDS; i++)
        if (w->local_groups[i]) w->in_process->group_destroy(w->local_groups[i]);
    for (int r = 0; w->ranks && r < w->size; r++)
        if (w->ranks[r].world) tb_flight_recorder_destroy(w->ranks[r].fr);
    if (w->ranks) {
        pthread_mutex_destroy(&w->abort_mu);
        pthread_cond_destroy(&w->abort_cv);
    }
    free(w->local_groups);
    free(w->mpi_groups);
    free(w->ranks);
    free(w->objects);
    memset(w, 0, sizeof *w);
}

void parallel_state_print_layout(FILE *out, const tb_config *c) {
    fprintf(out, "world %d = tp %d x cp %d x dp %d x pp %d (order tp-cp-ep-dp-pp, tp fastest)\n", c->world_size,
            c->tensor_model_parallel_size, c->context_parallel_size, c->data_parallel_size,
            c->pipeline_model_parallel_size);
    const int experts = c->num_experts > 0;
    if (experts) {
        const int etp = c->expert_tensor_parallel_size, ep = c->expert_model_parallel_size;
        fprintf(out, "experts: world %d = etp %d x ep %d x expert-dp %d x pp %d (order etp-ep-edp-pp)\n", c->world_size,
                etp, ep, c->world_size / (etp * ep * c->pipeline_model_parallel_size), c->pipeline_model_parallel_size);
    }
    int *members = tb_xcalloc((size_t)c->world_size, sizeof(int), "group members");
    for (int r = 0; r < c->world_size; r++) {
        char label[96];
        parallel_state_label(label, sizeof label, r, parallel_state_coords(c, r));
        const tb_expert_coords at = parallel_state_expert_coords(c, r);
        if (experts) fprintf(out, "%s experts (etp%d ep%d edp%d pp%d)\n", label, at.etp, at.ep, at.edp, at.pp);
        else fprintf(out, "%s\n", label);
        for (int k = 0; k < TB_NGROUP_KINDS; k++) {
            if (!experts && is_expert_kind((tb_group_kind)k)) continue;
            int n = parallel_state_group_members(c, (tb_group_kind)k, r, members);
            fprintf(out, "  %-9s [", kind_names[k]);
            for (int i = 0; i < n; i++) fprintf(out, "%s%d", i ? ", " : "", members[i]);
            fprintf(out, "]\n");
        }
    }
    free(members);
}

typedef struct rank_job {
    tb_rank *rk;
    void (*fn)(tb_rank *, void *);
    void *arg;
} rank_job;

static void *run_job(void *p) {
    rank_job *j = p;
    j->fn(j->rk, j->arg);
    return NULL;
}

void parallel_state_run_ranks(tb_world *w, void (*fn)(tb_rank *rk, void *arg), void *arg) {
    const int n = w->local_count, first = w->local_first;
    if (n == 1) {
        fn(&w->ranks[first], arg);
        return;
    }
    rank_job *jobs = tb_xcalloc((size_t)n, sizeof *jobs, "rank threads");
    pthread_t *threads = tb_xcalloc((size_t)n, sizeof *threads, "rank threads");
    for (int i = 0; i < n; i++) {
        jobs[i] = (rank_job){&w->ranks[first + i], fn, arg};
        pthread_create(&threads[i], NULL, run_job, &jobs[i]);
    }
    for (int i = 0; i < n; i++) pthread_join(threads[i], NULL);
    free(jobs);
    free(threads);
}

// ---------------------------------------------------------------------------------------
// Failing a rank, aborting the world

int parallel_state_aborted_by(tb_world *w) { return atomic_load(&w->comm.aborted) - 1; }

void parallel_state_wait_for_abort(tb_world *w) {
    pthread_mutex_lock(&w->abort_mu);
    while (!atomic_load(&w->comm.aborted)) pthread_cond_wait(&w->abort_cv, &w->abort_mu);
    pthread_mutex_unlock(&w->abort_mu);
}

int parallel_state_wait_for_abort_timed(tb_world *w, double seconds) {
    struct timespec deadline;
    clock_gettime(CLOCK_REALTIME, &deadline);  // abort_cv's clock
    double whole = floor(seconds);
    deadline.tv_sec += (time_t)whole;
    deadline.tv_nsec += (long)((seconds - whole) * 1e9);
    if (deadline.tv_nsec >= 1000000000L) deadline.tv_sec++, deadline.tv_nsec -= 1000000000L;
    pthread_mutex_lock(&w->abort_mu);
    int rc = 0;
    while (!atomic_load(&w->comm.aborted) && rc != ETIMEDOUT)
        rc = pthread_cond_timedwait(&w->abort_cv, &w->abort_mu, &deadline);
    int aborted = atomic_load(&w->comm.aborted) != 0;
    pthread_mutex_unlock(&w->abort_mu);
    return aborted;
}

void parallel_state_abort(tb_world *w, const tb_rank *rk, int status) {
    pthread_mutex_lock(&w->abort_mu);
    if (!atomic_load(&w->comm.aborted)) {
        snprintf(w->comm.aborted_by, sizeof w->comm.aborted_by, "%s", rk->label);
        w->abort_status = status;
        atomic_store(&w->comm.aborted, rk->rank + 1);
    }
    pthread_cond_broadcast(&w->abort_cv);
    pthread_mutex_unlock(&w->abort_mu);
    for (int i = 0; i < w->size * TB_NGROUP_KINDS; i++)
        if (w->local_groups[i]) w->in_process->group_wake(w->local_groups[i]);
}

void parallel_state_rank_fail(tb_rank *rk, int status, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(rk->failure.err.msg, sizeof rk->failure.err.msg, fmt, ap);
    va_end(ap);
    rk->failure.status = status;
    if (rk->world) parallel_state_abort(rk->world, rk, status);
    if (rk->failure.unwind) longjmp(*rk->failure.unwind, 1);
    fprintf(stderr, "%s: %s\n", rk->label, rk->failure.err.msg);
    fflush(NULL);
    _exit(status);
}
