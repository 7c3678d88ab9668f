#include "comm/local_backend.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "comm/reduce.h"
#include "runtime/memory.h"
#include "core/xalloc.h"

// An in-flight point-to-point message. Transport buffers like these (NCCL's are the
// same) are plain host memory, outside the ranks' accounting: a message is allocated by
// its sender and freed by its receiver, two different ranks.
typedef struct message {
    struct message *next;
    size_t count;
    float data[];
} message;

struct tb_local_group {
    int size;
    pthread_mutex_t mu;
    pthread_cond_t cv;            // CLOCK_MONOTONIC
    uint64_t generation;          // barrier rounds completed
    int arrived;
    const float *send[TB_MAX_GROUP];
    float *chunk[TB_MAX_GROUP];   // all-reduce: each member's reduced share
    const size_t *counts[TB_MAX_GROUP];
    message **head, **tail;       // mailboxes, [src * size + dst]
};

tb_local_group *tb_local_group_create(int size) {
    tb_local_group *g = tb_xcalloc(1, sizeof *g, "local group");
    g->size = size;
    g->head = tb_xcalloc((size_t)size * size, sizeof *g->head, "local group mailboxes");
    g->tail = tb_xcalloc((size_t)size * size, sizeof *g->tail, "local group mailboxes");
    pthread_mutex_init(&g->mu, NULL);
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(&g->cv, &attr);
    pthread_condattr_destroy(&attr);
    return g;
}

void tb_local_group_destroy(tb_local_group *g) {
    for (int i = 0; i < g->size * g->size; i++)
        for (message *m = g->head[i], *next; m; m = next) {
            next = m->next;
            free(m);
        }
    free(g->head);
    free(g->tail);
    pthread_mutex_destroy(&g->mu);
    pthread_cond_destroy(&g->cv);
    free(g);
}

void tb_local_group_wake(tb_local_group *g) {
    pthread_mutex_lock(&g->mu);
    pthread_cond_broadcast(&g->cv);
    pthread_mutex_unlock(&g->mu);
}

static tb_local_group *shared(tb_group *g) { return g->backend_state; }

// A timeout as large as the flag allows (--collective-timeout 1e19, 3e11 years) means "wait
// that long", as a huge NCCL or torch.distributed timeout does: the deadline saturates at
// the largest time_t rather than wrap into the past and report a hang at once. (A double
// below the double nearest to the headroom is below the headroom itself, so the sum and the
// carry from tv_nsec fit.)
static struct timespec deadline_after(double seconds) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    const time_t latest = (time_t)(((uintmax_t)1 << (sizeof(time_t) * CHAR_BIT - 1)) - 1);
    double whole = floor(seconds);
    if (!(whole < (double)(latest - ts.tv_sec - 1))) {
        ts.tv_sec = latest;
        ts.tv_nsec = 999999999L;
        return ts;
    }
    ts.tv_sec += (time_t)whole;
    ts.tv_nsec += (long)((seconds - whole) * 1e9);
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    return ts;
}

// All members meet; the last to arrive releases the others.
static int barrier(tb_group *g, const char *what, int *timed_out, tb_error *err) {
    tb_local_group *s = shared(g);
    if (s->size == 1) return 0;
    pthread_mutex_lock(&s->mu);
    uint64_t gen = s->generation;
    if (++s->arrived == s->size) {
        s->arrived = 0;
        s->generation++;
        pthread_cond_broadcast(&s->cv);
        pthread_mutex_unlock(&s->mu);
        return 0;
    }
    struct timespec deadline = deadline_after(tb_comm_timeout_s(g));
    while (s->generation == gen) {
        if (tb_comm_world_aborted(g)) {
            pthread_mutex_unlock(&s->mu);
            return tb_comm_fail_aborted(g, what, err);
        }
        if (pthread_cond_timedwait(&s->cv, &s->mu, &deadline) == ETIMEDOUT && s->generation == gen) {
            pthread_mutex_unlock(&s->mu);
            return tb_comm_fail_timed_out(g, what, timed_out, err);
        }
    }
    pthread_mutex_unlock(&s->mu);
    return 0;
}

static int local_all_reduce(tb_group *g, float *buf, size_t count, tb_red_op op, int *timed_out, tb_error *err) {
    tb_local_group *s = shared(g);
    if (s->size == 1) return 0;
    size_t lo, hi;
    tb_reduce_share(count, g->index, s->size, &lo, &hi);
    float *mine = tb_alloc(g->mem, TB_MEM_COMM, (hi - lo) * sizeof(float), "all-reduce share");
    s->send[g->index] = buf;
    int rc = barrier(g, "all_reduce", timed_out, err);
    if (rc == 0) {
        tb_reduce_into(mine, s->send, s->size, lo, hi, op);
        s->chunk[g->index] = mine;
        rc = barrier(g, "all_reduce", timed_out, err);  // every share reduced; inputs no longer read
    }
    if (rc == 0) {
        for (int j = 0; j < s->size; j++) {
            size_t jlo, jhi;
            tb_reduce_share(count, j, s->size, &jlo, &jhi);
            memcpy(buf + jlo, s->chunk[j], (jhi - jlo) * sizeof(float));
        }
        rc = barrier(g, "all_reduce", timed_out, err);  // every share copied
    }
    tb_free(g->mem, mine);
    return rc;
}

static int local_reduce_scatter(tb_group *g, const float *send, float *recv, size_t recvcount, int *timed_out,
                                tb_error *err) {
    tb_local_group *s = shared(g);
    if (s->size == 1) {
        if (recv != send) memmove(recv, send, recvcount * sizeof(float));
        return 0;
    }
    s->send[g->index] = send;
    // reduced into a share of our own first: recv may be this member's slice of send
    float *mine = tb_alloc(g->mem, TB_MEM_COMM, recvcount * sizeof(float), "reduce-scatter share");
    int rc = barrier(g, "reduce_scatter", timed_out, err);
    if (rc == 0) {
        size_t lo = recvcount * (size_t)g->index;
        const float *src[TB_MAX_GROUP] = {0};
        for (int j = 0; j < s->size; j++) src[j] = s->send[j] + lo;
        tb_reduce_into(mine, src, s->size, 0, recvcount, TB_RED_SUM);
        rc = barrier(g, "reduce_scatter", timed_out, err);  // every member has read every input
    }
    if (rc == 0) memcpy(recv, mine, recvcount * sizeof(float));
    tb_free(g->mem, mine);
    return rc;
}

static int local_all_gather(tb_group *g, const float *send, float *recv, size_t sendcount, int *timed_out,
                            tb_error *err) {
    tb_local_group *s = shared(g);
    if (s->size == 1) {
        if (recv != send) memmove(recv, send, sendcount * sizeof(float));
        return 0;
    }
    s->send[g->index] = send;
    int rc = barrier(g, "all_gather", timed_out, err);
    if (rc == 0) {
        for (int j = 0; j < s->size; j++)
            if (recv + (size_t)j * sendcount != s->send[j])
                memcpy(recv + (size_t)j * sendcount, s->send[j], sendcount * sizeof(float));
        rc = barrier(g, "all_gather", timed_out, err);
    }
    return rc;
}

static int local_all_to_all(tb_group *g, const float *send, const size_t *sendcounts, float *recv,
                            const size_t *recvcounts, int *timed_out, tb_error *err) {
    tb_local_group *s = shared(g);
    s->send[g->index] = send;
    s->counts[g->index] = sendcounts;
    int rc = barrier(g, "all_to_all", timed_out, err);
    if (rc == 0) {
        size_t at = 0;
        for (int j = 0; j < s->size && rc == 0; j++) {
            size_t from = 0;
            for (int k = 0; k < g->index; k++) from += s->counts[j][k];
            size_t n = s->counts[j][g->index];
            if (n != recvcounts[j])
                rc = tb_fail(err, "all_to_all on group %s: member %d sends %zu elements to member %d, which expects %zu",
                             g->name, j, n, g->index, recvcounts[j]);
            else
                memcpy(recv + at, s->send[j] + from, n * sizeof(float));
            at += recvcounts[j];
        }
        int rc2 = barrier(g, "all_to_all", timed_out, err);
        if (rc == 0) rc = rc2;
    }
    return rc;
}

static int local_broadcast(tb_group *g, float *buf, size_t count, int root, int *timed_out, tb_error *err) {
    tb_local_group *s = shared(g);
    if (s->size == 1) return 0;
    if (g->index == root) s->send[root] = buf;
    int rc = barrier(g, "broadcast", timed_out, err);
    if (rc == 0) {
        if (g->index != root) memcpy(buf, s->send[root], count * sizeof(float));
        rc = barrier(g, "broadcast", timed_out, err);
    }
    return rc;
}

static int local_send(tb_group *g, const float *buf, size_t count, int peer, int *timed_out, tb_error *err) {
    tb_local_group *s = shared(g);
    message *m = tb_xmalloc(sizeof *m + count * sizeof(float), "point-to-point message");
    m->next = NULL;
    m->count = count;
    memcpy(m->data, buf, count * sizeof(float));
    int box = g->index * s->size + peer;
    pthread_mutex_lock(&s->mu);
    if (s->tail[box]) s->tail[box]->next = m;
    else s->head[box] = m;
    s->tail[box] = m;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    return 0;
}

static int local_recv(tb_group *g, float *buf, size_t count, int peer, int *timed_out, tb_error *err) {
    tb_local_group *s = shared(g);
    int box = peer * s->size + g->index;
    pthread_mutex_lock(&s->mu);
    struct timespec deadline = deadline_after(tb_comm_timeout_s(g));
    while (!s->head[box]) {
        if (tb_comm_world_aborted(g)) {
            pthread_mutex_unlock(&s->mu);
            return tb_comm_fail_aborted(g, "recv", err);
        }
        if (pthread_cond_timedwait(&s->cv, &s->mu, &deadline) == ETIMEDOUT && !s->head[box]) {
            pthread_mutex_unlock(&s->mu);
            return tb_comm_fail_timed_out(g, "recv", timed_out, err);
        }
    }
    message *m = s->head[box];
    s->head[box] = m->next;
    if (!s->head[box]) s->tail[box] = NULL;
    pthread_mutex_unlock(&s->mu);
    int rc = 0;
    if (m->count != count)
        rc = tb_fail(err, "recv on group %s from member %d: message of %zu elements, expected %zu", g->name, peer,
                     m->count, count);
    else
        memcpy(buf, m->data, count * sizeof(float));
    free(m);
    return rc;
}

static int local_barrier(tb_group *g, int *timed_out, tb_error *err) { return barrier(g, "barrier", timed_out, err); }

static void *local_group_create(int size) { return tb_local_group_create(size); }
static void local_group_wake(void *state) { tb_local_group_wake(state); }
static void local_group_destroy(void *state) { tb_local_group_destroy(state); }

const tb_comm_backend tb_local_backend = {
    .name = "local",
    .all_reduce = local_all_reduce,
    .reduce_scatter = local_reduce_scatter,
    .all_gather = local_all_gather,
    .all_to_all = local_all_to_all,
    .broadcast = local_broadcast,
    .send = local_send,
    .recv = local_recv,
    .barrier = local_barrier,
    .batch_send_recv = NULL,  // sends are eager: a batch runs op by op (comm.c)
    .group_create = local_group_create,
    .group_wake = local_group_wake,
    .group_destroy = local_group_destroy,
};
