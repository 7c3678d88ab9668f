// mpi_backend.c — the communicator on MPI (see mpi_backend.h): the groups' communicators, the
// exact algorithm (tb_mpi_exact_backend) and point-to-point; the collectives on MPI's own are
// mpi_collectives.c's. Compiled always: the real backend with TB_HAVE_MPI, a stub that says it
// was not built otherwise.
#include "comm/mpi_backend.h"

#include <stdio.h>
#include <string.h>

#include "comm/parallel_state.h"

#define TB_MPI_NOT_BUILT "MPI backend not built (no MPI found at configure time, or TB_WITH_MPI=OFF)"

#ifdef TB_HAVE_MPI

#include <limits.h>
#include <mpi.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>

#include "comm/mpi_internal.h"
#include "comm/reduce.h"
#include "core/xalloc.h"

// Tags: class · 4096 + source index · 64 + destination index (TB_MAX_GROUP = 64).
enum { TAG_COLLECTIVE = 0, TAG_P2P = 1, TAG_LARGEST = 2 * 4096 - 1 };
_Static_assert(TB_MAX_GROUP <= 64, "tags give 6 bits to a member index");

static int tag_of(int cls, int src, int dst) { return cls * 4096 + src * 64 + dst; }

int tb_mpi_fail(tb_error *err, const char *what, const tb_group *g, int code) {
    char text[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(code, text, &len) != MPI_SUCCESS) snprintf(text, sizeof text, "error code %d", code);
    return tb_fail(err, "%s on group %s: MPI: %s", what, g ? g->name : "?", text);
}

// Gives up on requests still pending: receives are cancelled, every request is freed (MPI
// completes a freed send by itself). Their buffers must outlive this (see transport).
static void drop_requests(int n, MPI_Request *req) {
    for (int i = 0; i < n; i++) {
        if (req[i] == MPI_REQUEST_NULL) continue;
        MPI_Cancel(&req[i]);
        MPI_Request_free(&req[i]);
    }
}

// A buffer MPI may still touch, kept to disconnect (the group's abandoned list).
static void abandon(mpi_group *s, void *buf) {
    transport *t = tb_xcalloc(1, sizeof *t, "MPI transport record");
    t->req = MPI_REQUEST_NULL;
    t->buf = buf;
    pthread_mutex_lock(&s->mu);
    t->next = s->abandoned;
    s->abandoned = t;
    pthread_mutex_unlock(&s->mu);
}

// ---------------------------------------------------------------------------------------
// Receives matched before they are received
//
// A receive whose size is checked is matched with MPI_Improbe first, so that the size it
// checks is the message's own (its envelope's), and then received with MPI_Imrecv: straight
// into the caller's buffer when the size is the one expected, into transport memory otherwise
// (taken off its channel whole, then refused). A posted MPI_Irecv cannot tell a longer message:
// Open MPI 4.1.4 now and then completes one whose send came from another thread of the same
// process with MPI_SUCCESS and the receive's own size, no MPI_ERR_TRUNCATE (3 to 266 of 20,000
// sends of 16 bytes to a 12-byte receive, measured), so the refusal was lost with the
// message's tail. Matching by probe waits for nothing a posted receive would not: a
// rendezvous-sized send is matched by its envelope, before its data moves.

typedef struct probed {
    mpi_group *s;   // the channel (communicator, source process, tag): its messages match in
    int source;     // the order they were sent
    int tag;
    int recv;       // a receive (the other entries are sends, never probed)
    int pending;    // not matched yet
    void *buf;      // the caller's buffer, `bytes` long
    size_t bytes;
    size_t got;     // the message's size, once matched
    void *spare;    // where a message of another size went
} probed;

static probed probed_recv(mpi_group *s, int source, int tag, void *buf, size_t bytes) {
    return (probed){.s = s, .source = source, .tag = tag, .recv = 1, .pending = 1, .buf = buf, .bytes = bytes};
}

// Matches every pending receive whose message has arrived, in order (one waits for an
// earlier pending receive on its channel), and starts receiving it into req[i]. Returns how
// many are still pending, or -1 with *code set to MPI's error.
static int match_probed(int n, probed *p, MPI_Request *req, int *code) {
    int pending = 0;
    for (int i = 0; i < n; i++) {
        if (!p[i].pending) continue;
        int earlier = 0;
        for (int j = 0; j < i && !earlier; j++)
            earlier = p[j].pending && p[j].s == p[i].s && p[j].source == p[i].source && p[j].tag == p[i].tag;
        int found = 0;
        MPI_Message msg = MPI_MESSAGE_NULL;
        MPI_Status st;
        if (!earlier && (*code = MPI_Improbe(p[i].source, p[i].tag, p[i].s->comm, &found, &msg, &st)) != MPI_SUCCESS)
            return -1;
        if (!found) {
            pending++;
            continue;
        }
        int bytes = 0;
        if ((*code = MPI_Get_count(&st, MPI_BYTE, &bytes)) != MPI_SUCCESS || bytes < 0) {
            if (*code == MPI_SUCCESS) *code = MPI_ERR_COUNT;  // MPI_UNDEFINED: not a whole number of bytes
            return -1;
        }
        p[i].pending = 0;
        p[i].got = (size_t)bytes;
        void *into = p[i].buf;
        if (p[i].got != p[i].bytes) into = p[i].spare = tb_xmalloc(p[i].got ? p[i].got : 1, "MPI transport buffer");
        if ((*code = MPI_Imrecv(into, bytes, MPI_BYTE, &msg, &req[i])) != MPI_SUCCESS) return -1;
    }
    return pending;
}

// The first matched receive whose message had another size, -1: none.
static int first_mismatch(int n, const probed *p) {
    for (int i = 0; i < n; i++)
        if (p[i].recv && !p[i].pending && p[i].got != p[i].bytes) return i;
    return -1;
}

// The spares freed once their receives are done (rc 0), else kept to the end (MPI may
// still write a receive it matched).
static void release_spares(int n, probed *p, int rc) {
    for (int i = 0; i < n; i++) {
        if (!p[i].spare) continue;
        if (rc == 0) free(p[i].spare);
        else abandon(p[i].s, p[i].spare);
        p[i].spare = NULL;
    }
}

// ---------------------------------------------------------------------------------------
// One call's requests and transport buffers

typedef struct xfer {
    tb_group *g;
    mpi_group *s;
    const char *what;
    int n;
    MPI_Request req[2 * TB_MAX_GROUP];
    int member[2 * TB_MAX_GROUP];     // the peer of each request
    int is_recv[2 * TB_MAX_GROUP];
    MPI_Status st[2 * TB_MAX_GROUP];
    int probes;                       // some receives are probed (pr): their sizes are checked
    probed pr[2 * TB_MAX_GROUP];
    void *bufs[3];
    int nbufs;
} xfer;

static void xfer_begin(xfer *x, tb_group *g, const char *what) {
    x->g = g;
    x->s = mpi_state(g);
    x->what = what;
    x->n = 0;
    x->probes = 0;
    x->nbufs = 0;
}

static void *xfer_buf(xfer *x, size_t bytes) {
    void *p = tb_xmalloc(bytes ? bytes : 1, "MPI transport buffer");
    x->bufs[x->nbufs++] = p;
    return p;
}

// The call is over: buffers freed. After a failure its requests are dropped and its buffers
// kept to the end (MPI may still write a receive that was matched, or read a send).
static int xfer_end(xfer *x, int rc) {
    if (x->probes) release_spares(x->n, x->pr, rc);
    if (rc == 0) {
        for (int i = 0; i < x->nbufs; i++) free(x->bufs[i]);
        return 0;
    }
    drop_requests(x->n, x->req);
    for (int i = 0; i < x->nbufs; i++) abandon(x->s, x->bufs[i]);
    return rc;
}

// A message of `bytes` bytes: MPI counts in int.
static int check_size(xfer *x, size_t bytes, tb_error *err) {
    if (bytes <= (size_t)INT_MAX) return 0;
    return tb_fail(err, "%s on group %s: a message of %zu bytes exceeds MPI's int count (%d)", x->what, x->g->name,
                   bytes, INT_MAX);
}

static int post(xfer *x, int recv, void *buf, size_t bytes, int peer, tb_error *err) {
    if (check_size(x, bytes, err)) return -1;
    const int me = x->g->index, i = x->n++;
    x->member[i] = peer;
    x->is_recv[i] = recv;
    x->pr[i] = (probed){0};
    int rc = recv ? MPI_Irecv(buf, (int)bytes, MPI_BYTE, x->s->proc[peer], tag_of(TAG_COLLECTIVE, peer, me),
                              x->s->comm, &x->req[i])
                  : MPI_Isend(buf, (int)bytes, MPI_BYTE, x->s->proc[peer], tag_of(TAG_COLLECTIVE, me, peer),
                              x->s->comm, &x->req[i]);
    if (rc != MPI_SUCCESS) {
        x->req[i] = MPI_REQUEST_NULL;
        return tb_mpi_fail(err, x->what, x->g, rc);
    }
    return 0;
}

static int post_recv(xfer *x, void *buf, size_t bytes, int peer, tb_error *err) { return post(x, 1, buf, bytes, peer, err); }

static int post_send(xfer *x, const void *buf, size_t bytes, int peer, tb_error *err) {
    return post(x, 0, (void *)buf, bytes, peer, err);
}

// A receive whose size is checked: matched once its message arrives (see probed); its size
// is x->pr[i].got after the wait.
static int post_probed_recv(xfer *x, void *buf, size_t bytes, int peer, tb_error *err) {
    if (check_size(x, bytes, err)) return -1;
    const int me = x->g->index, i = x->n++;
    x->member[i] = peer;
    x->is_recv[i] = 1;
    x->req[i] = MPI_REQUEST_NULL;
    x->pr[i] = probed_recv(x->s, x->s->proc[peer], tag_of(TAG_COLLECTIVE, peer, me), buf, bytes);
    x->probes = 1;
    return 0;
}

// Polls the requests until all are done, the world is aborted, or the collective timeout
// passes. Returns 0 when all are done. Receives in `p` (NULL: none) are matched as their
// messages arrive, their req[i] null till then.
static int poll_requests(tb_group *g, const char *what, int n, MPI_Request *req, MPI_Status *st, probed *p,
                         int *timed_out, tb_error *err) {
    const double deadline = tb_comm_now_s() + tb_comm_timeout_s(g);
    unsigned polls = 0;
    for (;;) {
        int probe_code = MPI_SUCCESS, pending = p ? match_probed(n, p, req, &probe_code) : 0;
        if (pending < 0) return tb_mpi_fail(err, what, g, probe_code);
        int done = 0;
        int rc = MPI_Testall(n, req, &done, st);
        if (rc != MPI_SUCCESS) {
            int code = rc;
            if (rc == MPI_ERR_IN_STATUS)
                for (int i = 0; i < n; i++)
                    if (st[i].MPI_ERROR != MPI_SUCCESS && st[i].MPI_ERROR != MPI_ERR_PENDING) {
                        code = st[i].MPI_ERROR;
                        break;
                    }
            return tb_mpi_fail(err, what, g, code);
        }
        if (done && !pending) return 0;
        if (tb_comm_world_aborted(g)) return tb_comm_fail_aborted(g, what, err);
        if (tb_comm_now_s() > deadline) return tb_comm_fail_timed_out(g, what, timed_out, err);
        tb_comm_poll_pause(&polls);
    }
}

// A phase's requests waited for; x->n reset for the next phase when all are done.
static int xfer_wait(xfer *x, int *timed_out, tb_error *err) {
    int rc = poll_requests(x->g, x->what, x->n, x->req, x->st, x->probes ? x->pr : NULL, timed_out, err);
    if (rc == 0 && x->probes) release_spares(x->n, x->pr, 0);
    if (rc == 0) x->n = 0;
    return rc;
}

// Frees the member's eager sends that MPI has finished with.
static void reap_sends(mpi_group *s, int member) {
    for (transport **p = &s->sends[member]; *p;) {
        transport *t = *p;
        int done = 0;
        if (t->req != MPI_REQUEST_NULL) MPI_Test(&t->req, &done, MPI_STATUS_IGNORE);
        else done = 1;
        if (!done) {
            p = &t->next;
            continue;
        }
        *p = t->next;
        free(t->buf);
        free(t);
    }
}

// ---------------------------------------------------------------------------------------
// The calls

// Every member i reduces share i of all members' buffers in group order (the local
// backend's algorithm and summation, comm/reduce.h), then the shares are gathered.
static int exact_all_reduce(tb_group *g, float *buf, size_t count, tb_red_op op, int *timed_out, tb_error *err) {
    const int n = g->size, me = g->index;
    if (n == 1) return 0;
    xfer x;
    xfer_begin(&x, g, "all_reduce");
    reap_sends(x.s, me);
    size_t lo, hi;
    tb_reduce_share(count, me, n, &lo, &hi);
    const size_t len = hi - lo;
    float *copy = xfer_buf(&x, count * sizeof(float));
    float *got = xfer_buf(&x, (size_t)n * len * sizeof(float));  // slot j: member j's values of my share
    memcpy(copy, buf, count * sizeof(float));
    int rc = 0;
    for (int j = 0; j < n && rc == 0; j++)
        if (j != me) rc = post_recv(&x, got + (size_t)j * len, len * sizeof(float), j, err);
    for (int j = 0; j < n && rc == 0; j++) {
        size_t jlo, jhi;
        tb_reduce_share(count, j, n, &jlo, &jhi);
        if (j != me) rc = post_send(&x, copy + jlo, (jhi - jlo) * sizeof(float), j, err);
    }
    if (rc == 0) rc = xfer_wait(&x, timed_out, err);
    float *mine = got + (size_t)me * len;
    if (rc == 0) {
        const float *src[TB_MAX_GROUP];
        for (int j = 0; j < n; j++) src[j] = j == me ? copy + lo : got + (size_t)j * len;
        tb_reduce_into(mine, src, n, 0, len, op);
        // the shares, gathered into copy (its sends are done)
        for (int j = 0; j < n && rc == 0; j++) {
            size_t jlo, jhi;
            tb_reduce_share(count, j, n, &jlo, &jhi);
            if (j != me) rc = post_recv(&x, copy + jlo, (jhi - jlo) * sizeof(float), j, err);
        }
        for (int j = 0; j < n && rc == 0; j++)
            if (j != me) rc = post_send(&x, mine, len * sizeof(float), j, err);
        if (rc == 0) rc = xfer_wait(&x, timed_out, err);
    }
    if (rc == 0) {
        memcpy(copy + lo, mine, len * sizeof(float));
        memcpy(buf, copy, count * sizeof(float));
    }
    return xfer_end(&x, rc);
}

static int exact_reduce_scatter(tb_group *g, const float *send, float *recv, size_t recvcount, int *timed_out,
                              tb_error *err) {
    const int n = g->size, me = g->index;
    if (n == 1) {
        if (recv != send) memmove(recv, send, recvcount * sizeof(float));
        return 0;
    }
    xfer x;
    xfer_begin(&x, g, "reduce_scatter");
    reap_sends(x.s, me);
    const size_t total = (size_t)n * recvcount;
    float *copy = xfer_buf(&x, total * sizeof(float));  // recv may be this member's slice of send
    float *got = xfer_buf(&x, total * sizeof(float));
    memcpy(copy, send, total * sizeof(float));
    int rc = 0;
    for (int j = 0; j < n && rc == 0; j++)
        if (j != me) rc = post_recv(&x, got + (size_t)j * recvcount, recvcount * sizeof(float), j, err);
    for (int j = 0; j < n && rc == 0; j++)
        if (j != me) rc = post_send(&x, copy + (size_t)j * recvcount, recvcount * sizeof(float), j, err);
    if (rc == 0) rc = xfer_wait(&x, timed_out, err);
    if (rc == 0) {
        const float *src[TB_MAX_GROUP];
        for (int j = 0; j < n; j++) src[j] = (j == me ? copy : got) + (size_t)j * recvcount;
        tb_reduce_into(recv, src, n, 0, recvcount, TB_RED_SUM);
    }
    return xfer_end(&x, rc);
}

static int exact_all_gather(tb_group *g, const float *send, float *recv, size_t sendcount, int *timed_out,
                          tb_error *err) {
    const int n = g->size, me = g->index;
    if (n == 1) {
        if (recv != send) memmove(recv, send, sendcount * sizeof(float));
        return 0;
    }
    xfer x;
    xfer_begin(&x, g, "all_gather");
    reap_sends(x.s, me);
    const size_t bytes = sendcount * sizeof(float);
    float *copy = xfer_buf(&x, bytes);  // send may lie inside recv (the distributed optimizer's gather)
    float *got = xfer_buf(&x, (size_t)n * bytes);
    memcpy(copy, send, bytes);
    int rc = 0;
    for (int j = 0; j < n && rc == 0; j++)
        if (j != me) rc = post_recv(&x, got + (size_t)j * sendcount, bytes, j, err);
    for (int j = 0; j < n && rc == 0; j++)
        if (j != me) rc = post_send(&x, copy, bytes, j, err);
    if (rc == 0) rc = xfer_wait(&x, timed_out, err);
    if (rc == 0) {
        memcpy(got + (size_t)me * sendcount, copy, bytes);
        memcpy(recv, got, (size_t)n * bytes);
    }
    return xfer_end(&x, rc);
}

int tb_mpi_count_mismatch(tb_group *g, int src, size_t sent, size_t expected, tb_error *err) {
    return tb_fail(err, "all_to_all on group %s: member %d sends %zu elements to member %d, which expects %zu", g->name,
                   src, sent, g->index, expected);
}

static int exact_all_to_all(tb_group *g, const float *send, const size_t *sendcounts, float *recv,
                          const size_t *recvcounts, int *timed_out, tb_error *err) {
    const int n = g->size, me = g->index;
    size_t soff[TB_MAX_GROUP + 1] = {0}, roff[TB_MAX_GROUP + 1] = {0};
    for (int j = 0; j < n; j++) {
        soff[j + 1] = soff[j] + sendcounts[j];
        roff[j + 1] = roff[j] + recvcounts[j];
    }
    if (sendcounts[me] != recvcounts[me]) return tb_mpi_count_mismatch(g, me, sendcounts[me], recvcounts[me], err);
    xfer x;
    xfer_begin(&x, g, "all_to_all");
    reap_sends(x.s, me);
    float *copy = xfer_buf(&x, soff[n] * sizeof(float));
    float *got = xfer_buf(&x, roff[n] * sizeof(float));
    memcpy(copy, send, soff[n] * sizeof(float));
    int rc = 0;
    for (int j = 0; j < n && rc == 0; j++)
        if (j != me) rc = post_probed_recv(&x, got + roff[j], recvcounts[j] * sizeof(float), j, err);
    for (int j = 0; j < n && rc == 0; j++)
        if (j != me) rc = post_send(&x, copy + soff[j], sendcounts[j] * sizeof(float), j, err);
    const int posted = x.n;
    if (rc == 0) rc = xfer_wait(&x, timed_out, err);
    const int bad = rc == 0 ? first_mismatch(posted, x.pr) : -1;
    if (bad >= 0) {
        const int j = x.member[bad];
        rc = tb_mpi_count_mismatch(g, j, x.pr[bad].got / sizeof(float), recvcounts[j], err);
    }
    if (rc == 0) {
        memcpy(got + roff[me], copy + soff[me], sendcounts[me] * sizeof(float));
        memcpy(recv, got, roff[n] * sizeof(float));
    }
    return xfer_end(&x, rc);
}

static int exact_broadcast(tb_group *g, float *buf, size_t count, int root, int *timed_out, tb_error *err) {
    const int n = g->size, me = g->index;
    if (root < 0 || root >= n)
        return tb_fail(err, "broadcast on group %s: root %d outside the group's %d members", g->name, root, n);
    if (n == 1) return 0;
    xfer x;
    xfer_begin(&x, g, "broadcast");
    reap_sends(x.s, me);
    const size_t bytes = count * sizeof(float);
    float *copy = xfer_buf(&x, bytes);
    int rc = 0;
    if (me == root) {
        memcpy(copy, buf, bytes);
        for (int j = 0; j < n && rc == 0; j++)
            if (j != me) rc = post_send(&x, copy, bytes, j, err);
    } else {
        rc = post_recv(&x, copy, bytes, root, err);
    }
    if (rc == 0) rc = xfer_wait(&x, timed_out, err);
    if (rc == 0 && me != root) memcpy(buf, copy, bytes);
    return xfer_end(&x, rc);
}

static int check_peer(tb_group *g, const char *op, int peer, tb_error *err) {
    if (peer < 0 || peer >= g->size)
        return tb_fail(err, "%s on group %s: peer %d outside the group's %d members", op, g->name, peer, g->size);
    return 0;
}

// Eager, as on the local backend: the message is copied, sent in the background and freed
// once MPI is done with it (reap_sends), so two members that both send first never deadlock.
int tb_mpi_send(tb_group *g, const float *buf, size_t count, int peer, int *timed_out, tb_error *err) {
    if (check_peer(g, "send", peer, err)) return -1;
    mpi_group *s = mpi_state(g);
    const int me = g->index;
    reap_sends(s, me);
    const size_t bytes = count * sizeof(float);
    if (bytes > (size_t)INT_MAX)
        return tb_fail(err, "send on group %s: a message of %zu bytes exceeds MPI's int count (%d)", g->name, bytes,
                       INT_MAX);
    transport *t = tb_xcalloc(1, sizeof *t, "MPI eager send");
    t->buf = tb_xmalloc(bytes ? bytes : 1, "MPI eager send");
    memcpy(t->buf, buf, bytes);
    int rc = MPI_Isend(t->buf, (int)bytes, MPI_BYTE, s->proc[peer], tag_of(TAG_P2P, me, peer), s->comm, &t->req);
    if (rc != MPI_SUCCESS) {
        free(t->buf);
        free(t);
        return tb_mpi_fail(err, "send", g, rc);
    }
    t->next = s->sends[me];
    s->sends[me] = t;
    return 0;
}

// Receives into the caller's buffers that a call gives up on (a timeout, the world's abort):
// each is cancelled (one already matched, as a probed receive always is, cannot be: its data
// is on the way) and waited for up to SETTLE_S, until it is cancelled or done, so that MPI
// writes none of the caller's memory once the call returns and the failing rank's teardown
// frees it (a probed receive not yet matched has no request: MPI holds nothing of it). One
// that does not settle by then (a transfer stalled half-way) is said on stderr. Sends are only
// read from, and are left to MPI (Open MPI does not cancel a started send): a late read of
// freed memory sends garbage to a peer of a failing run, and writes nothing here.
#define SETTLE_S 2.0
static void settle_receives(tb_group *g, const char *what, int n, MPI_Request *req) {
    for (int i = 0; i < n; i++)
        if (req[i] != MPI_REQUEST_NULL) MPI_Cancel(&req[i]);
    const double deadline = tb_comm_now_s() + SETTLE_S;
    unsigned polls = 0;
    int done = 0;
    while (!done && tb_comm_now_s() < deadline) {
        if (MPI_Testall(n, req, &done, MPI_STATUSES_IGNORE) != MPI_SUCCESS) break;
        if (!done) tb_comm_poll_pause(&polls);
    }
    if (!done) {
        fprintf(stderr, "%s: %s on group %s gave up with a receive into its caller's buffer still in MPI's hands "
                "after %.0f s\n", g->rk ? g->rk->label : "?", what, g->name, SETTLE_S);
        drop_requests(n, req);
    }
}

// The peer's next message, matched (see probed) and received into the caller's buffer: a
// batch of one.
int tb_mpi_recv(tb_group *g, float *buf, size_t count, int peer, int *timed_out, tb_error *err) {
    return tb_mpi_batch_send_recv(&(tb_p2p_op){TB_COMM_RECV, g, buf, count, peer, -1}, 1, timed_out, err);
}

// Megatron's batch_isend_irecv on MPI, on the caller's buffers: every send posted at once
// (MPI_Isend), every receive matched as its message arrives (see probed) and received
// straight into its buffer, all polled together, so two stages that send to each other and
// then receive never wait on each other, whatever MPI's protocol for the size (eager, or a
// rendezvous that completes a send only once its receive is matched). Every op is checked
// before any is posted. A message of another size is refused with the local backend's
// message. The messages are the tb_send / tb_recv ones (tag class 1): a batch's send matches
// a peer's single recv, and the reverse. A batch that gives up settles its receives (above)
// before it returns.
int tb_mpi_batch_send_recv(const tb_p2p_op *ops, int n, int *timed_out, tb_error *err) {
    MPI_Request req[TB_P2P_BATCH_MAX];
    MPI_Status st[TB_P2P_BATCH_MAX];
    probed pr[TB_P2P_BATCH_MAX];
    for (int i = 0; i < n; i++) {
        const tb_p2p_op *o = &ops[i];
        const char *op = o->op == TB_COMM_SEND ? "send" : "recv";
        if (check_peer(o->g, op, o->peer, err)) return -1;
        if (o->count * sizeof(float) > (size_t)INT_MAX)
            return tb_fail(err, "%s on group %s: a message of %zu bytes exceeds MPI's int count (%d)", op, o->g->name,
                           o->count * sizeof(float), INT_MAX);
    }
    int rc = 0, posted = 0;
    for (int i = 0; i < n && rc == 0; i++) {
        const tb_p2p_op *o = &ops[i];
        mpi_group *s = mpi_state(o->g);
        const int me = o->g->index;
        reap_sends(s, me);
        req[i] = MPI_REQUEST_NULL;
        pr[i] = (probed){0};
        posted = i + 1;
        if (o->op == TB_COMM_RECV) {
            pr[i] = probed_recv(s, s->proc[o->peer], tag_of(TAG_P2P, o->peer, me), o->buf, o->count * sizeof(float));
            continue;
        }
        int e = MPI_Isend(o->buf, (int)(o->count * sizeof(float)), MPI_BYTE, s->proc[o->peer],
                          tag_of(TAG_P2P, me, o->peer), s->comm, &req[i]);
        if (e != MPI_SUCCESS) rc = tb_mpi_fail(err, "send", o->g, e);
    }
    // a batch of one op is named as that op (tb_mpi_recv's)
    const char *what = n > 1 ? "batch_send_recv" : ops[0].op == TB_COMM_SEND ? "send" : "recv";
    if (rc == 0) rc = poll_requests(ops[n - 1].g, what, n, req, st, pr, timed_out, err);
    const int done = rc == 0, bad = done ? first_mismatch(n, pr) : -1;
    if (bad >= 0)
        rc = tb_fail(err, "recv on group %s from member %d: message of %zu elements, expected %zu", ops[bad].g->name,
                     ops[bad].peer, pr[bad].got / sizeof(float), ops[bad].count);
    if (rc != 0) {
        MPI_Request recvs[TB_P2P_BATCH_MAX];
        int nrecv = 0;
        for (int i = 0; i < posted; i++) {
            if (ops[i].op == TB_COMM_RECV && !pr[i].spare) recvs[nrecv++] = req[i];
            else if (req[i] != MPI_REQUEST_NULL) MPI_Request_free(&req[i]);
        }
        settle_receives(ops[n - 1].g, what, nrecv, recvs);
    }
    release_spares(posted, pr, done ? 0 : rc);
    return rc;
}

// Every member sends an empty message to every other and waits for theirs.
static int exact_barrier(tb_group *g, int *timed_out, tb_error *err) {
    const int n = g->size, me = g->index;
    if (n == 1) return 0;
    xfer x;
    xfer_begin(&x, g, "barrier");
    reap_sends(x.s, me);
    char *none = xfer_buf(&x, 0);
    int rc = 0;
    for (int j = 0; j < n && rc == 0; j++)
        if (j != me) rc = post_recv(&x, none, 0, j, err);
    for (int j = 0; j < n && rc == 0; j++)
        if (j != me) rc = post_send(&x, none, 0, j, err);
    if (rc == 0) rc = xfer_wait(&x, timed_out, err);
    return xfer_end(&x, rc);
}

// --mpi-collectives exact: the local backend's algorithm on every group.
const tb_comm_backend tb_mpi_exact_backend = {
    .name = "mpi",
    .all_reduce = exact_all_reduce,
    .reduce_scatter = exact_reduce_scatter,
    .all_gather = exact_all_gather,
    .all_to_all = exact_all_to_all,
    .broadcast = exact_broadcast,
    .send = tb_mpi_send,
    .recv = tb_mpi_recv,
    .barrier = exact_barrier,
    .batch_send_recv = tb_mpi_batch_send_recv,
};

// ---------------------------------------------------------------------------------------
// Connecting and disconnecting a world

int tb_mpi_built(void) { return 1; }

static void free_group(tb_world *w, mpi_group *s) {
    // eager sends still in flight: a healthy run's peers receive them shortly; after an
    // abort they may never be, so they are dropped at once
    const int aborted = atomic_load(&w->comm.aborted) != 0;
    const double deadline = tb_comm_now_s() + (w->comm.collective_timeout_s > 0 ? w->comm.collective_timeout_s : 300.0);
    unsigned polls = 0;
    for (int i = 0; i < s->size; i++) {
        while (s->sends[i]) {
            reap_sends(s, i);
            if (!s->sends[i]) break;
            if (aborted || tb_comm_now_s() > deadline) {
                for (transport *t = s->sends[i]; t; t = t->next) drop_requests(1, &t->req);
                reap_sends(s, i);
                break;
            }
            tb_comm_poll_pause(&polls);
        }
    }
    for (transport *t = s->abandoned, *next; t; t = next) {
        next = t->next;
        free(t->buf);
        free(t);
    }
    MPI_Comm_free(&s->comm);
    pthread_mutex_destroy(&s->mu);
    free(s);
}

void tb_mpi_world_disconnect(tb_world *w) {
    if (!w->mpi_groups) return;
    for (int r = w->local_first; r < w->local_first + w->local_count; r++)
        for (int k = 0; k < TB_NGROUP_KINDS; k++) {
            tb_group *g = &w->ranks[r].groups[k];
            if (g->backend == &tb_mpi_backend || g->backend == &tb_mpi_exact_backend) {
                g->backend = NULL;
                g->backend_state = NULL;
            }
        }
    for (int id = 0; id < w->size * TB_NGROUP_KINDS; id++)
        if (w->mpi_groups[id]) {
            free_group(w, w->mpi_groups[id]);
            w->mpi_groups[id] = NULL;
        }
}

int tb_mpi_world_connect(tb_world *w, tb_error *err) {
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (!initialized) return tb_fail(err, "MPI backend: MPI is not initialized (the process was not launched by mpirun)");
    int *tag_ub = NULL, have = 0;
    MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &tag_ub, &have);
    if (have && *tag_ub < TAG_LARGEST)
        return tb_fail(err, "MPI backend: this MPI's largest tag (MPI_TAG_UB %d) is below the %d it needs", *tag_ub,
                       TAG_LARGEST);
    MPI_Group everyone;
    MPI_Comm_group(MPI_COMM_WORLD, &everyone);
    int rc = 0;
    // every group id in increasing order: the same order in every process (see the header)
    for (int id = 0; id < w->size * TB_NGROUP_KINDS && rc == 0; id++) {
        const tb_group *g0 = &w->ranks[id % w->size].groups[id / w->size];  // its first member's view
        if (g0->id != id) continue;  // no group has this id
        int procs[TB_MAX_GROUP], np = 0, here = 0, member_proc[TB_MAX_GROUP];
        for (int i = 0; i < g0->size; i++) {
            // ranks increase along a group and processes hold consecutive ranks: processes increase too
            int p = parallel_state_process_of(w, g0->ranks[i]);
            if (np == 0 || procs[np - 1] != p) procs[np++] = p;
            member_proc[i] = np - 1;
            here |= p == w->process;
        }
        if (np == 1 || !here) continue;  // inside one process (the local backend), or none of ours
        MPI_Group members;
        MPI_Comm comm = MPI_COMM_NULL;
        int e = MPI_Group_incl(everyone, np, procs, &members);
        if (e == MPI_SUCCESS) {
            e = MPI_Comm_create_group(MPI_COMM_WORLD, members, id, &comm);
            MPI_Group_free(&members);
        }
        if (e != MPI_SUCCESS) {
            char text[MPI_MAX_ERROR_STRING];
            int len = 0;
            MPI_Error_string(e, text, &len);
            rc = tb_fail(err, "MPI_Comm_create_group for group %s (id %d, %d ranks over %d processes): %s", g0->name,
                         id, g0->size, np, text);
            break;
        }
        MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
        mpi_group *s = tb_xcalloc(1, sizeof *s, "MPI group");
        s->comm = comm;
        s->id = id;
        s->size = g0->size;
        s->native = np == g0->size;  // one member per process: communicator rank = group index
        memcpy(s->proc, member_proc, (size_t)g0->size * sizeof(int));
        pthread_mutex_init(&s->mu, NULL);
        w->mpi_groups[id] = s;
    }
    MPI_Group_free(&everyone);
    if (rc != 0) {
        tb_mpi_world_disconnect(w);
        return -1;
    }
    for (int r = w->local_first; r < w->local_first + w->local_count; r++)
        for (int k = 0; k < TB_NGROUP_KINDS; k++) {
            tb_group *g = &w->ranks[r].groups[k];
            if (g->id < 0 || !w->mpi_groups[g->id]) continue;
            g->backend = w->comm.mpi_exact ? &tb_mpi_exact_backend : &tb_mpi_backend;
            g->backend_state = w->mpi_groups[g->id];
        }
    return 0;
}

int tb_mpi_group_bcast_from_first(tb_world *w, int group_id, void *buf, size_t bytes, tb_error *err) {
    mpi_group *s = group_id >= 0 && group_id < w->size * TB_NGROUP_KINDS ? w->mpi_groups[group_id] : NULL;
    if (!s) return 0;  // inside this process: nothing to share
    tb_group *g = NULL;  // a local member's view, for the wait's timeout, abort and messages
    for (int r = w->local_first; r < w->local_first + w->local_count && !g; r++)
        for (int k = 0; k < TB_NGROUP_KINDS && !g; k++)
            if (w->ranks[r].groups[k].id == group_id) g = &w->ranks[r].groups[k];
    if (!g) return tb_fail(err, "broadcast on group id %d: no member in this process", group_id);
    if (bytes > (size_t)INT_MAX)
        return tb_fail(err, "broadcast on group %s: %zu bytes exceed MPI's int count (%d)", g->name, bytes, INT_MAX);
    MPI_Request req = MPI_REQUEST_NULL;
    MPI_Status st;
    int rc = MPI_Ibcast(buf, (int)bytes, MPI_BYTE, 0, s->comm, &req);  // rank 0: the first member's process
    if (rc != MPI_SUCCESS) return tb_mpi_fail(err, "broadcast", g, rc);
    int timed_out = 0;
    rc = poll_requests(g, "broadcast", 1, &req, &st, NULL, &timed_out, err);
    if (rc != 0) drop_requests(1, &req);
    return rc;
}

#else  // !TB_HAVE_MPI: the stub

int tb_mpi_built(void) { return 0; }

int tb_mpi_world_connect(tb_world *w, tb_error *err) { return tb_fail(err, "%s", TB_MPI_NOT_BUILT); }

void tb_mpi_world_disconnect(tb_world *w) { (void)w; }

int tb_mpi_group_bcast_from_first(tb_world *w, int group_id, void *buf, size_t bytes, tb_error *err) {
    return tb_fail(err, "%s", TB_MPI_NOT_BUILT);
}

int64_t tb_mpi_blocked_since(const tb_world *w, tb_group **group) {
    (void)w, (void)group;
    return 0;
}

// Never attached to a group: tb_mpi_world_connect fails first.
const tb_comm_backend tb_mpi_backend = {.name = "mpi"};
const tb_comm_backend tb_mpi_exact_backend = {.name = "mpi"};

#endif
