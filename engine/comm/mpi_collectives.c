// mpi_collectives.c — the MPI backend's collectives on MPI's own (--mpi-collectives native,
// the default; comm/mpi_backend.h): tb_mpi_backend. The exact algorithm, point-to-point and the
// groups' communicators are mpi_backend.c's; the two share comm/mpi_internal.h.
#ifdef TB_HAVE_MPI

#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "comm/mpi_backend.h"
#include "comm/mpi_internal.h"
#include "runtime/ranges.h"
#include "core/xalloc.h"
#include "comm/parallel_state.h"

// A group with one member per process (its communicator rank is the member's group index)
// runs each collective as MPI's own blocking collective on the caller's buffers: no transport
// copy, the algorithm MPI's tuned component picks for the size and the process count, as
// PyTorch's ProcessGroupMPI calls them. Measured against the non-blocking ones on Open MPI
// 4.1 (scripts/bench-comm.sh): MPI_Iallreduce, completed by polling MPI_Test, ran at 0.41-0.51
// of MPI_Allreduce's bus bandwidth from 8 B to 64 MiB across 2 processes (its libnbc schedules).
// A blocking call cannot time out in the thread that waits in it, so its timeout is the
// watchdog's, as an NCCL call's is in PyTorch (comm/watchdog.h: a call pending past the
// collective timeout is reported as a hang and ends the process, status 4). A group with two
// members in one process, or --mpi-collectives exact, takes the exact algorithm
// (tb_mpi_exact_backend, mpi_backend.c). A staging copy, where the caller's buffers alias, is
// plain host memory freed when the call returns: a blocking call that returned is done with it.

static int mpi_count(tb_group *g, const char *what, size_t count, int *out, tb_error *err) {
    if (count > (size_t)INT_MAX)
        return tb_fail(err, "%s on group %s: %zu elements exceed MPI's int count (%d)", what, g->name, count, INT_MAX);
    *out = (int)count;
    return 0;
}

// A call about to block: refused when the world is already aborted (its peers may never come);
// else marked as blocked from now on, for the watchdog (tb_mpi_blocked_since). native_end
// takes the MPI call's status, so the call has returned when it clears the mark.
static int native_begin(tb_group *g, const char *what, tb_error *err) {
    if (tb_comm_world_aborted(g)) return tb_comm_fail_aborted(g, what, err);
    atomic_store(&mpi_state(g)->blocked, g);
    atomic_store(&mpi_state(g)->blocked_since_ns, (long long)tb_now_ns());
    return 0;
}

static int native_end(tb_group *g, const char *what, int rc, tb_error *err) {
    atomic_store(&mpi_state(g)->blocked_since_ns, 0);
    return rc == MPI_SUCCESS ? 0 : tb_mpi_fail(err, what, g, rc);
}

int64_t tb_mpi_blocked_since(const tb_world *w, tb_group **group) {
    int64_t oldest = 0;
    for (int id = 0; w->mpi_groups && id < w->size * TB_NGROUP_KINDS; id++) {
        mpi_group *s = w->mpi_groups[id];
        const int64_t t = s ? atomic_load(&s->blocked_since_ns) : 0;
        if (t && (!oldest || t < oldest)) oldest = t, *group = atomic_load(&s->blocked);
    }
    return oldest;
}

// Whether [a, a + an) and [b, b + bn) share a byte: MPI forbids aliased send and receive buffers.
static int overlap(const void *a, size_t an, const void *b, size_t bn) {
    const char *x = a, *y = b;
    return x < y + bn && y < x + an;
}

static int native_all_reduce(tb_group *g, float *buf, size_t count, tb_red_op op, int *timed_out, tb_error *err) {
    if (!mpi_state(g)->native) return tb_mpi_exact_backend.all_reduce(g, buf, count, op, timed_out, err);
    if (g->size == 1) return 0;
    int n = 0;
    if (mpi_count(g, "all_reduce", count, &n, err) || native_begin(g, "all_reduce", err)) return -1;
    return native_end(g, "all_reduce",
                      MPI_Allreduce(MPI_IN_PLACE, buf, n, MPI_FLOAT, op == TB_RED_MAX ? MPI_MAX : MPI_SUM,
                                    mpi_state(g)->comm),
                      err);
}

// recv may be this member's slice of send (the distributed optimizer's shard of a bucket):
// then MPI's result goes to a transport buffer of recvcount floats first.
static int native_reduce_scatter(tb_group *g, const float *send, float *recv, size_t recvcount, int *timed_out,
                                 tb_error *err) {
    if (!mpi_state(g)->native) return tb_mpi_exact_backend.reduce_scatter(g, send, recv, recvcount, timed_out, err);
    const size_t total = (size_t)g->size * recvcount;
    int n = 0, k = 0;
    if (mpi_count(g, "reduce_scatter", total, &k, err) || mpi_count(g, "reduce_scatter", recvcount, &n, err) ||
        native_begin(g, "reduce_scatter", err))
        return -1;
    float *stage = overlap(send, total * sizeof(float), recv, recvcount * sizeof(float))
                       ? tb_xmalloc(recvcount * sizeof(float) + 1, "MPI transport buffer")
                       : NULL;
    float *out = stage ? stage : recv;
    int rc = native_end(g, "reduce_scatter",
                        MPI_Reduce_scatter_block(send, out, n, MPI_FLOAT, MPI_SUM, mpi_state(g)->comm), err);
    if (rc == 0 && stage) memcpy(recv, stage, recvcount * sizeof(float));
    free(stage);
    return rc;
}

// send may be this member's slot of recv (the distributed optimizer's gather of its shard):
// MPI_IN_PLACE; any other overlap goes through a transport copy of send.
static int native_all_gather(tb_group *g, const float *send, float *recv, size_t sendcount, int *timed_out,
                             tb_error *err) {
    if (!mpi_state(g)->native) return tb_mpi_exact_backend.all_gather(g, send, recv, sendcount, timed_out, err);
    int n = 0, k = 0;
    if (mpi_count(g, "all_gather", sendcount, &n, err) ||
        mpi_count(g, "all_gather", (size_t)g->size * sendcount, &k, err) || native_begin(g, "all_gather", err))
        return -1;
    const size_t bytes = sendcount * sizeof(float);
    const void *in = send;
    void *stage = NULL;
    if (send == recv + (size_t)g->index * sendcount) {
        in = MPI_IN_PLACE;
    } else if (overlap(send, bytes, recv, (size_t)g->size * bytes)) {
        in = stage = memcpy(tb_xmalloc(bytes + 1, "MPI transport buffer"), send, bytes);
    }
    int rc = native_end(g, "all_gather", MPI_Allgather(in, n, MPI_FLOAT, recv, n, MPI_FLOAT, mpi_state(g)->comm), err);
    free(stage);
    return rc;
}

// Every member first learns what each sends it (MPI_Alltoall of the counts) and then whether
// any member found a count it does not expect, or a total beyond MPI's int (MPI_Allreduce of
// a flag), so that a mismatch is refused by every member together, the one that sees it with
// the local backend's message, instead of truncating, or of leaving the others blocked in
// MPI_Alltoallv until the watchdog.
static int native_all_to_all(tb_group *g, const float *send, const size_t *sendcounts, float *recv,
                             const size_t *recvcounts, int *timed_out, tb_error *err) {
    if (!mpi_state(g)->native) return tb_mpi_exact_backend.all_to_all(g, send, sendcounts, recv, recvcounts, timed_out, err);
    const int n = g->size;
    int scount[TB_MAX_GROUP], rcount[TB_MAX_GROUP], sdispl[TB_MAX_GROUP], rdispl[TB_MAX_GROUP], told[TB_MAX_GROUP];
    size_t stotal = 0, rtotal = 0;
    int bad = 0;  // 1: a total beyond MPI's int here; 2: a count here that its sender does not send
    for (int j = 0; j < n; j++) {  // counts and displacements are ints in MPI
        if (stotal + sendcounts[j] > (size_t)INT_MAX || rtotal + recvcounts[j] > (size_t)INT_MAX) bad = 1;
        sdispl[j] = bad ? 0 : (int)stotal;
        rdispl[j] = bad ? 0 : (int)rtotal;
        scount[j] = bad ? -1 : (int)sendcounts[j];
        rcount[j] = bad ? -1 : (int)recvcounts[j];
        stotal += sendcounts[j];
        rtotal += recvcounts[j];
    }
    if (native_begin(g, "all_to_all", err)) return -1;
    int rc = native_end(g, "all_to_all", MPI_Alltoall(scount, 1, MPI_INT, told, 1, MPI_INT, mpi_state(g)->comm), err);
    int first = -1;
    for (int j = 0; j < n && rc == 0 && !bad; j++)
        if (told[j] != rcount[j]) bad = 2, first = j;
    int any = bad;
    if (rc == 0 && native_begin(g, "all_to_all", err) == 0)
        rc = native_end(g, "all_to_all", MPI_Allreduce(&bad, &any, 1, MPI_INT, MPI_MAX, mpi_state(g)->comm), err);
    else if (rc == 0)
        rc = -1;
    if (rc != 0) return rc;
    if (bad == 1)
        return tb_fail(err, "all_to_all on group %s: more than MPI's int count (%d) of elements", g->name, INT_MAX);
    if (bad == 2) return tb_mpi_count_mismatch(g, first, (size_t)told[first], recvcounts[first], err);
    if (any)
        return tb_fail(err, "all_to_all on group %s: another member's counts do not match what its peers send to it "
                            "(that member names them); refused by every member",
                       g->name);
    const float *in = send;
    float *stage = NULL;
    if (overlap(send, stotal * sizeof(float), recv, rtotal * sizeof(float)))
        in = stage = memcpy(tb_xmalloc(stotal * sizeof(float) + 1, "MPI transport buffer"), send, stotal * sizeof(float));
    rc = native_begin(g, "all_to_all", err);
    if (rc == 0)
        rc = native_end(g, "all_to_all",
                        MPI_Alltoallv(in, scount, sdispl, MPI_FLOAT, recv, rcount, rdispl, MPI_FLOAT, mpi_state(g)->comm),
                        err);
    free(stage);
    return rc;
}

static int native_broadcast(tb_group *g, float *buf, size_t count, int root, int *timed_out, tb_error *err) {
    if (!mpi_state(g)->native || root < 0 || root >= g->size) return tb_mpi_exact_backend.broadcast(g, buf, count, root, timed_out, err);
    int n = 0;
    if (mpi_count(g, "broadcast", count, &n, err) || native_begin(g, "broadcast", err)) return -1;
    return native_end(g, "broadcast", MPI_Bcast(buf, n, MPI_FLOAT, root, mpi_state(g)->comm), err);
}

static int native_barrier(tb_group *g, int *timed_out, tb_error *err) {
    if (!mpi_state(g)->native) return tb_mpi_exact_backend.barrier(g, timed_out, err);
    if (native_begin(g, "barrier", err)) return -1;
    return native_end(g, "barrier", MPI_Barrier(mpi_state(g)->comm), err);
}

// --mpi-collectives native: MPI's own collectives where the group allows (above), the exact
// algorithm (tb_mpi_exact_backend) otherwise; point-to-point alike on either path (single sends eager, a batch on
// the caller's buffers).
const tb_comm_backend tb_mpi_backend = {
    .name = "mpi",
    .all_reduce = native_all_reduce,
    .reduce_scatter = native_reduce_scatter,
    .all_gather = native_all_gather,
    .all_to_all = native_all_to_all,
    .broadcast = native_broadcast,
    .send = tb_mpi_send,
    .recv = tb_mpi_recv,
    .barrier = native_barrier,
    .batch_send_recv = tb_mpi_batch_send_recv,
};

#endif  // TB_HAVE_MPI
