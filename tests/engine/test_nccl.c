// test_nccl.c — the NCCL backend against the local one.
//
// Every rank thread runs the same calls twice on the groups world, tp and dp: first on the
// local backend with host buffers, then on NCCL with device buffers; the results must agree
// (bitwise for data movement and max, within 1e-6 relative for sums, which NCCL reduces in
// its own order). Among the calls: a ring of sends and recvs ordered by parity, and a batch
// (batch_send_recv) in which every member sends both ways first, over two communicators. The
// world has one rank per GPU (at most 8; tp 2 when the count is even),
// so one GPU checks the size-1 paths. With two GPUs or more, a call one member never joins
// must time out, abort the communicator and say so.
//
// Exit status 77 (ctest: skipped) when the backend is not built or no GPU is present; the
// NCCL version is checked and printed before that whenever the backend is built.
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "comm/local_backend.h"
#include "comm/nccl_backend.h"
#include "comm/parallel_state.h"
#include "tb_test.h"
#include "runtime/memory.h"

#define SKIP 77

#ifdef TB_HAVE_NCCL
#include <cuda_runtime.h>
#include <nccl.h>

static const tb_group_kind tested[] = {TB_GROUP_WORLD, TB_GROUP_TP, TB_GROUP_DP};
#define NTESTED 3

enum { R_SUM, R_MAX, R_SUM_BIG, R_RS, R_AG, R_A2A, R_BCAST, R_RING, R_BATCH, R_NRES };
static const char *const res_names[R_NRES] = {"all_reduce sum", "all_reduce max", "all_reduce sum (4 MiB)",
                                              "reduce_scatter", "all_gather",     "all_to_all",
                                              "broadcast",      "send/recv ring", "batched send/recv both ways"};
static const int res_is_sum[R_NRES] = {1, 0, 1, 1, 0, 0, 0, 0, 0};

typedef struct outputs {
    float *r[NTESTED][R_NRES];
    size_t n[NTESTED][R_NRES];
} outputs;

typedef struct job {
    tb_rank *rk;
    const tb_nccl_ids *ids;
    pthread_barrier_t *bar;  // timeout test
    tb_world *w;             // timeout test
    outputs local, nccl;
    char fail[2200];         // the first failure, empty if none
    int on_nccl;             // every group on the NCCL backend after init
    int back_on_local;       // every group back on the local backend after destroy
    int host_rc;             // all_reduce of a host buffer
    char host_msg[2048];
    int self_rc;             // send to oneself
    char self_msg[2048];
    int to_rc, to_timed_out, after_rc;  // timeout test
    char to_msg[2048], after_msg[2048];
} job;

// Records the first failure of a rank ("what where: message"); returns -1.
static int failf(job *j, const char *what, const char *where, const char *msg) {
    if (!j->fail[0]) snprintf(j->fail, sizeof j->fail, "%s %s: %s", what, where, msg);
    return -1;
}

// Deterministic inputs in [0.5, 1.5): positive, so sums have no cancellation.
static float val(int rank, int salt, size_t i) {
    uint32_t h = (uint32_t)rank * 2654435761u ^ (uint32_t)salt * 40503u ^ (uint32_t)i * 2246822519u;
    h ^= h >> 15;
    h *= 2246822519u;
    h ^= h >> 13;
    h *= 3266489917u;
    h ^= h >> 16;
    return 0.5f + (float)(h & 0xffffff) / (float)0x1000000;
}

// Number of elements member src sends to member dst in all_to_all (some pairs send none).
static size_t a2a_count(int src, int dst) {
    return (src * 3 + dst * 5) % 4 == 3 ? 0 : (size_t)(1 + (src * 7 + dst * 3) % 13);
}

// Buffers on the host (local phase) or on the rank's device (NCCL phase).
static float *put(int dev, const float *host, size_t n) {
    size_t bytes = (n ? n : 1) * sizeof(float);
    if (!dev) {
        float *p = malloc(bytes);
        if (p && n) memcpy(p, host, n * sizeof(float));
        return p;
    }
    void *p = NULL;
    if (cudaMalloc(&p, bytes) != cudaSuccess) return NULL;
    if (n && cudaMemcpy(p, host, n * sizeof(float), cudaMemcpyHostToDevice) != cudaSuccess) {
        cudaFree(p);
        return NULL;
    }
    return p;
}

static int get(int dev, float *host, const float *buf, size_t n) {
    if (!n) return 0;
    if (!dev) {
        memcpy(host, buf, n * sizeof(float));
        return 0;
    }
    return cudaMemcpy(host, buf, n * sizeof(float), cudaMemcpyDeviceToHost) == cudaSuccess ? 0 : -1;
}

// An uninitialized buffer of n floats (at least one).
static float *space(int dev, size_t n) {
    size_t bytes = (n ? n : 1) * sizeof(float);
    if (!dev) return malloc(bytes);
    void *p = NULL;
    return cudaMalloc(&p, bytes) == cudaSuccess ? p : NULL;
}

static void drop(int dev, float *buf) {
    if (dev) cudaFree(buf);
    else free(buf);
}

static float *input(int rank, int salt, size_t n) {
    float *p = malloc((n ? n : 1) * sizeof(float));
    for (size_t i = 0; p && i < n; i++) p[i] = val(rank, salt, i);
    return p;
}

// Keeps `n` floats of result r for group slot t (fetched from buf).
static int keep(job *j, outputs *o, int dev, int t, int r, const float *buf, size_t n) {
    o->r[t][r] = malloc((n ? n : 1) * sizeof(float));
    o->n[t][r] = n;
    if (!o->r[t][r] || get(dev, o->r[t][r], buf, n)) {
        failf(j, res_names[r], "copy", "could not fetch the result");
        return -1;
    }
    return 0;
}

#define CALL(expr, what)                                                          \
    do {                                                                          \
        int to_ = 0;                                                              \
        tb_error e_ = {{0}};                                                      \
        int rc_ = (expr);                                                         \
        if (rc_ != 0 || to_) {                                                    \
            failf(j, what, g->name, e_.msg[0] ? e_.msg : "failed, no message");   \
            ok = 0;                                                               \
        }                                                                         \
    } while (0)

// The same sequence of calls on every rank: each collective on world, tp and dp.
static int run_ops(job *j, int dev, outputs *o) {
    tb_rank *rk = j->rk;
    int ok = 1;
    for (int t = 0; t < NTESTED && ok; t++) {
        tb_group *g = &rk->groups[tested[t]];
        const int n = g->size, me = g->index;
        const size_t N1 = 1031, NB = ((size_t)1 << 20) + 3, RC = 257, SC = 129, NR = 515;

        // all_reduce sum, max, and a large sum (past NCCL's small-message protocols)
        const size_t counts[3] = {N1, N1, NB};
        const int slots[3] = {R_SUM, R_MAX, R_SUM_BIG};
        for (int k = 0; k < 3 && ok; k++) {
            float *in = input(rk->rank, 10 + k, counts[k]);
            float *b = in ? put(dev, in, counts[k]) : NULL;
            if (!b) {
                failf(j, res_names[slots[k]], "alloc", "out of memory");
                free(in);
                return -1;
            }
            CALL(g->backend->all_reduce(g, b, counts[k], k == 1 ? TB_RED_MAX : TB_RED_SUM, &to_, &e_), "all_reduce");
            if (ok && keep(j, o, dev, t, slots[k], b, counts[k])) ok = 0;
            drop(dev, b);
            free(in);
        }

        // reduce_scatter: send n·RC, receive RC
        if (ok) {
            float *in = input(rk->rank, 20, (size_t)n * RC);
            float *s = put(dev, in, (size_t)n * RC), *r = space(dev, RC);
            if (!s || !r) return failf(j, "reduce_scatter", "alloc", "out of memory");
            CALL(g->backend->reduce_scatter(g, s, r, RC, &to_, &e_), "reduce_scatter");
            if (ok && keep(j, o, dev, t, R_RS, r, RC)) ok = 0;
            drop(dev, s);
            drop(dev, r);
            free(in);
        }

        // all_gather: send SC, receive n·SC
        if (ok) {
            float *in = input(rk->rank, 30, SC);
            float *s = put(dev, in, SC), *r = space(dev, (size_t)n * SC);
            if (!s || !r) return failf(j, "all_gather", "alloc", "out of memory");
            CALL(g->backend->all_gather(g, s, r, SC, &to_, &e_), "all_gather");
            if (ok && keep(j, o, dev, t, R_AG, r, (size_t)n * SC)) ok = 0;
            drop(dev, s);
            drop(dev, r);
            free(in);
        }

        // all_to_all with uneven counts, some zero
        if (ok) {
            size_t sc[TB_MAX_GROUP], rcnt[TB_MAX_GROUP], ns = 0, nr = 0;
            for (int p = 0; p < n; p++) {
                sc[p] = a2a_count(me, p);
                rcnt[p] = a2a_count(p, me);
                ns += sc[p];
                nr += rcnt[p];
            }
            float *in = input(rk->rank, 40, ns);
            float *s = put(dev, in, ns), *r = space(dev, nr);
            if (!s || !r) return failf(j, "all_to_all", "alloc", "out of memory");
            CALL(g->backend->all_to_all(g, s, sc, r, rcnt, &to_, &e_), "all_to_all");
            if (ok && keep(j, o, dev, t, R_A2A, r, nr)) ok = 0;
            drop(dev, s);
            drop(dev, r);
            free(in);
        }

        // broadcast from the last member (a non-zero root when the group has two or more)
        if (ok) {
            float *in = input(rk->rank, 50, N1);
            float *b = put(dev, in, N1);
            if (!b) return failf(j, "broadcast", "alloc", "out of memory");
            CALL(g->backend->broadcast(g, b, N1, n - 1, &to_, &e_), "broadcast");
            if (ok && keep(j, o, dev, t, R_BCAST, b, N1)) ok = 0;
            drop(dev, b);
            free(in);
        }

        // send/recv around the ring; even members send first, odd ones receive first, so a
        // rendezvous send (NCCL) cannot deadlock
        if (ok && n >= 2) {
            int next = (me + 1) % n, prev = (me + n - 1) % n;
            float *in = input(rk->rank, 60, NR);
            float *s = put(dev, in, NR), *r = space(dev, NR);
            if (!s || !r) return failf(j, "ring", "alloc", "out of memory");
            for (int step = 0; step < 2 && ok; step++) {
                if ((me % 2 == 0) == (step == 0)) CALL(g->backend->send(g, s, NR, next, &to_, &e_), "send");
                else CALL(g->backend->recv(g, r, NR, prev, &to_, &e_), "recv");
            }
            if (ok && keep(j, o, dev, t, R_RING, r, NR)) ok = 0;
            drop(dev, s);
            drop(dev, r);
            free(in);
        }

        // a batch both ways, over two communicators (the pipeline's
        // send_forward_backward_recv_forward_backward): every member sends first — to its next
        // member on this group and to its previous one on world — then receives from both. As
        // separate calls on rendezvous sends that deadlocks; on NCCL it is one group call
        // (batch_send_recv), on the local backend (eager sends) the four calls in order.
        if (ok && n >= 2) {
            tb_group *wg = &rk->groups[TB_GROUP_WORLD];
            const int wn = wg->size, wnext = (wg->index + 1) % wn, wprev = (wg->index + wn - 1) % wn;
            const int next = (me + 1) % n, prev = (me + n - 1) % n;
            float *in = input(rk->rank, 70, 2 * NR);
            float *s = put(dev, in, 2 * NR), *r = space(dev, 2 * NR);
            if (!s || !r) return failf(j, "batch", "alloc", "out of memory");
            const tb_p2p_op ops[4] = {{TB_COMM_SEND, g, s, NR, next, -1},
                                      {TB_COMM_SEND, wg, s + NR, NR, wprev, -1},
                                      {TB_COMM_RECV, g, r, NR, prev, -1},
                                      {TB_COMM_RECV, wg, r + NR, NR, wnext, -1}};
            if (dev) {
                CALL(g->backend->batch_send_recv(ops, 4, &to_, &e_), "batch_send_recv");
            } else {
                for (int k = 0; k < 4 && ok; k++)
                    CALL(ops[k].op == TB_COMM_SEND
                             ? ops[k].g->backend->send(ops[k].g, ops[k].buf, NR, ops[k].peer, &to_, &e_)
                             : ops[k].g->backend->recv(ops[k].g, ops[k].buf, NR, ops[k].peer, &to_, &e_),
                         "batch (local)");
            }
            if (ok && keep(j, o, dev, t, R_BATCH, r, 2 * NR)) ok = 0;
            drop(dev, s);
            drop(dev, r);
            free(in);
        }

        if (ok) CALL(g->backend->barrier(g, &to_, &e_), "barrier");
    }
    return ok ? 0 : -1;
}

static void *rank_main(void *arg) {
    job *j = arg;
    tb_rank *rk = j->rk;
    if (run_ops(j, 0, &j->local) != 0) return NULL;
    tb_error err = {{0}};
    if (tb_nccl_rank_init(rk, j->ids, &err) != 0) {
        failf(j, "tb_nccl_rank_init", rk->label, err.msg);
        return NULL;
    }
    j->on_nccl = 1;
    for (int k = 0; k < TB_NGROUP_KINDS; k++)
        if (rk->groups[k].backend != &tb_nccl_backend || !tb_nccl_group_comm(&rk->groups[k]) ||
            !tb_nccl_group_stream(&rk->groups[k]) || tb_nccl_group_device(&rk->groups[k]) < 0)
            j->on_nccl = 0;

    // Refused without communicating: a host buffer, a send to oneself.
    tb_group *w = &rk->groups[TB_GROUP_WORLD];
    float host[4] = {1, 2, 3, 4};
    int to = 0;
    tb_error e = {{0}};
    j->host_rc = w->backend->all_reduce(w, host, 4, TB_RED_SUM, &to, &e);
    snprintf(j->host_msg, sizeof j->host_msg, "%s", e.msg);
    e.msg[0] = 0;
    j->self_rc = w->backend->send(w, host, 4, w->index, &to, &e);
    snprintf(j->self_msg, sizeof j->self_msg, "%s", e.msg);

    run_ops(j, 1, &j->nccl);
    tb_nccl_rank_destroy(rk);
    j->back_on_local = 1;
    for (int k = 0; k < TB_NGROUP_KINDS; k++)
        if (rk->groups[k].backend != &tb_local_backend ||
            rk->groups[k].backend_state != rk->world->local_groups[rk->groups[k].id])
            j->back_on_local = 0;
    return NULL;
}

static int near(float a, float b) { return fabsf(a - b) <= 1e-6f * fabsf(b); }

static void free_outputs(outputs *o) {
    for (int t = 0; t < NTESTED; t++)
        for (int r = 0; r < R_NRES; r++) free(o->r[t][r]);
}

static int device_count;

TB_TEST(version_reported) {
    char v[128];
    int rc = tb_nccl_version(v, sizeof v);
    TB_CHECK(rc == 0, "tb_nccl_version failed: %s", v);
    int major = 0, minor = -1, patch = -1;
    TB_CHECK(sscanf(v, "%d.%d.%d", &major, &minor, &patch) == 3 && major == 2 && minor >= 0 && patch >= 0,
             "version '%s' is not 2.x.y", v);
    TB_CHECK(tb_nccl_built() == 1, "tb_nccl_built() = %d with TB_HAVE_NCCL", tb_nccl_built());
    printf("  NCCL %s (headers %d.%d.%d)\n", v, NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH);
}

static int make_world(tb_world *w, tb_config *cfg, int n, int tp, double timeout) {
    config_defaults(cfg);
    cfg->world_size = n;
    cfg->tensor_model_parallel_size = tp;
    cfg->collective_timeout = timeout;
    config_resolve(cfg);
    tb_error err;
    if (parallel_state_world_init(w, cfg, &tb_local_backend, &err) != 0) {
        printf("  parallel_state_world_init: %s\n", err.msg);
        return -1;
    }
    for (int r = 0; r < n; r++) tb_allocator_init(w->ranks[r].mem, 0, NULL, NULL);
    return 0;
}

TB_TEST(collectives_match_local) {
    int n = device_count < 8 ? device_count : 8;
    int tp = n % 2 == 0 ? 2 : 1;
    tb_config cfg;
    tb_world w;
    TB_REQUIRE(make_world(&w, &cfg, n, tp, 60.0) == 0, "world of %d", n);
    printf("  world of %d rank(s), one per GPU: tp %d, dp %d\n", n, tp, cfg.data_parallel_size);
    tb_nccl_ids *ids = NULL;
    tb_error err;
    int rc = tb_nccl_ids_create(&w, &ids, &err);
    TB_CHECK(rc == 0, "tb_nccl_ids_create: %s", err.msg);
    if (rc != 0) {
        parallel_state_world_free(&w);
        return;
    }
    job *jobs = calloc((size_t)n, sizeof *jobs);
    pthread_t *th = calloc((size_t)n, sizeof *th);
    for (int r = 0; r < n; r++) {
        jobs[r].rk = &w.ranks[r];
        jobs[r].ids = ids;
        pthread_create(&th[r], NULL, rank_main, &jobs[r]);
    }
    for (int r = 0; r < n; r++) pthread_join(th[r], NULL);
    tb_nccl_ids_free(ids);

    for (int r = 0; r < n; r++) {
        job *j = &jobs[r];
        TB_CHECK(!j->fail[0], "rank %d: %s", r, j->fail);
        if (j->fail[0]) continue;
        TB_CHECK(j->on_nccl, "rank %d: after tb_nccl_rank_init not every group is on NCCL", r);
        TB_CHECK(j->back_on_local, "rank %d: after tb_nccl_rank_destroy not every group is back on local", r);
        TB_CHECK(j->host_rc == -1 && strstr(j->host_msg, "not device memory"),
                 "rank %d: all_reduce of a host buffer: rc %d, '%s'", r, j->host_rc, j->host_msg);
        TB_CHECK(j->self_rc == -1 && strstr(j->self_msg, "itself"), "rank %d: send to oneself: rc %d, '%s'", r,
                 j->self_rc, j->self_msg);
        for (int t = 0; t < NTESTED; t++)
            for (int k = 0; k < R_NRES; k++) {
                const float *a = j->nccl.r[t][k], *b = j->local.r[t][k];
                size_t na = j->nccl.n[t][k], nb = j->local.n[t][k];
                if (!a && !b) continue;  // not run (ring on a group of one)
                TB_CHECK(a && b && na == nb, "rank %d group %s %s: %zu elements on NCCL, %zu on local", r,
                         w.ranks[r].groups[tested[t]].name, res_names[k], na, nb);
                if (!a || !b || na != nb) continue;
                size_t bad = na;
                for (size_t i = 0; i < na && bad == na; i++)
                    if (res_is_sum[k] ? !near(a[i], b[i]) : memcmp(&a[i], &b[i], sizeof(float)) != 0) bad = i;
                TB_CHECK(bad == na, "rank %d group %s %s: element %zu is %.9g on NCCL, %.9g on local (%s)", r,
                         w.ranks[r].groups[tested[t]].name, res_names[k], bad, bad < na ? a[bad] : 0.0,
                         bad < na ? b[bad] : 0.0, res_is_sum[k] ? "within 1e-6 relative" : "bitwise");
            }
    }
    for (int r = 0; r < n; r++) {
        free_outputs(&jobs[r].local);
        free_outputs(&jobs[r].nccl);
    }
    free(jobs);
    free(th);
    parallel_state_world_free(&w);
}

// Rank 0 calls all_reduce on world; rank 1 never does.
static void *timeout_rank(void *arg) {
    job *j = arg;
    tb_rank *rk = j->rk;
    tb_error err = {{0}};
    int rc = tb_nccl_rank_init(rk, j->ids, &err);
    if (rc != 0) failf(j, "tb_nccl_rank_init", rk->label, err.msg);
    const int inited = rc == 0;
    tb_group *g = &rk->groups[TB_GROUP_WORLD];
    float *b = NULL;
    if (rc == 0 && (cudaMalloc((void **)&b, 64 * sizeof(float)) != cudaSuccess ||
                    cudaMemset(b, 0, 64 * sizeof(float)) != cudaSuccess))
        rc = failf(j, "cudaMalloc", rk->label, "failed");
    // One call both join, so the communicator is connected: the hang below is a kernel
    // waiting for its peer, the case a stalled rank leaves behind.
    int warm = -1;
    pthread_barrier_wait(j->bar);
    if (rc == 0) {
        int to = 0;
        tb_error e = {{0}};
        warm = g->backend->all_reduce(g, b, 64, TB_RED_SUM, &to, &e);
        if (warm != 0) failf(j, "warm-up all_reduce", rk->label, e.msg);
    }
    pthread_barrier_wait(j->bar);
    if (rk->rank == 0) j->w->comm.collective_timeout_s = 2.0;  // the others wait at the barrier
    pthread_barrier_wait(j->bar);
    if (rc == 0 && warm == 0 && rk->rank == 0) {
        int to = 0;
        tb_error e = {{0}};
        j->to_rc = g->backend->all_reduce(g, b, 64, TB_RED_SUM, &to, &e);
        j->to_timed_out = to;
        snprintf(j->to_msg, sizeof j->to_msg, "%s", e.msg);
        to = 0;
        e.msg[0] = 0;
        j->after_rc = g->backend->all_reduce(g, b, 64, TB_RED_SUM, &to, &e);
        snprintf(j->after_msg, sizeof j->after_msg, "%s", e.msg);
    }
    pthread_barrier_wait(j->bar);  // rank 1 stays out of the call until rank 0 gave up
    if (inited) tb_nccl_rank_destroy(rk);
    if (b) cudaFree(b);
    return NULL;
}

TB_TEST(timeout_aborts) {
    tb_config cfg;
    tb_world w;
    TB_REQUIRE(make_world(&w, &cfg, 2, 2, 60.0) == 0, "world of 2");
    tb_nccl_ids *ids = NULL;
    tb_error err;
    int rc = tb_nccl_ids_create(&w, &ids, &err);
    TB_CHECK(rc == 0, "tb_nccl_ids_create: %s", err.msg);
    if (rc != 0) {
        parallel_state_world_free(&w);
        return;
    }
    pthread_barrier_t bar;
    pthread_barrier_init(&bar, NULL, 2);
    job jobs[2];
    memset(jobs, 0, sizeof jobs);
    pthread_t th[2];
    for (int r = 0; r < 2; r++) {
        jobs[r].rk = &w.ranks[r];
        jobs[r].ids = ids;
        jobs[r].bar = &bar;
        jobs[r].w = &w;
        pthread_create(&th[r], NULL, timeout_rank, &jobs[r]);
    }
    for (int r = 0; r < 2; r++) pthread_join(th[r], NULL);
    pthread_barrier_destroy(&bar);
    tb_nccl_ids_free(ids);
    TB_CHECK(!jobs[0].fail[0] && !jobs[1].fail[0], "%s %s", jobs[0].fail, jobs[1].fail);
    if (!jobs[0].fail[0] && !jobs[1].fail[0]) {
        printf("  %s\n", jobs[0].to_msg);
        TB_CHECK(jobs[0].to_rc == -1 && jobs[0].to_timed_out == 1, "rc %d, timed_out %d", jobs[0].to_rc,
                 jobs[0].to_timed_out);
        TB_CHECK(strstr(jobs[0].to_msg, "all_reduce") && strstr(jobs[0].to_msg, "group world") &&
                     strstr(jobs[0].to_msg, "2.0 s") && strstr(jobs[0].to_msg, "aborted"),
                 "message: '%s'", jobs[0].to_msg);
        TB_CHECK(jobs[0].after_rc == -1 && strstr(jobs[0].after_msg, "aborted"),
                 "a call after the abort: rc %d, '%s'", jobs[0].after_rc, jobs[0].after_msg);
    }
    parallel_state_world_free(&w);
}

int main(void) {
    TB_RUN(version_reported);
    cudaError_t ce = cudaGetDeviceCount(&device_count);
    if (ce != cudaSuccess || device_count == 0) {
        printf("SKIP: no GPU (cudaGetDeviceCount: %s)\n", ce != cudaSuccess ? cudaGetErrorString(ce) : "0 devices");
        return tb_test_failed ? tb_test_summary() : SKIP;
    }
    printf("  %d GPU(s)\n", device_count);
    TB_RUN(collectives_match_local);
    if (device_count >= 2) TB_RUN(timeout_aborts);
    else printf("  (timeout_aborts needs two GPUs: skipped)\n");
    return tb_test_summary();
}

#else  // !TB_HAVE_NCCL

// The stub must say why it cannot run.
TB_TEST(stub_reports_not_built) {
    char v[128] = "";
    tb_nccl_ids *ids = (tb_nccl_ids *)&v;
    tb_error err = {{0}};
    TB_CHECK(tb_nccl_built() == 0, "tb_nccl_built() = %d without TB_HAVE_NCCL", tb_nccl_built());
    TB_CHECK(tb_nccl_version(v, sizeof v) == -1 && strstr(v, "not built"), "tb_nccl_version: '%s'", v);
    TB_CHECK(tb_nccl_ids_create(NULL, &ids, &err) == -1 && ids == NULL && strstr(err.msg, "NCCL backend not built"),
             "tb_nccl_ids_create: '%s'", err.msg);
}

int main(void) {
    TB_RUN(stub_reports_not_built);
    if (tb_test_failed) return tb_test_summary();
    printf("SKIP: NCCL backend not built\n");
    return SKIP;
}

#endif
