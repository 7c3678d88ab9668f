// mpi_internal.h — what the MPI backend's two files share (comm/mpi_backend.h is the
// backend's interface): the group as this process holds it, and the calls the collectives on
// MPI's own (mpi_collectives.c) take from the exact algorithm's file (mpi_backend.c). Only
// those two include it, and only with TB_HAVE_MPI.
#ifndef TB_COMM_MPI_INTERNAL_H
#define TB_COMM_MPI_INTERNAL_H

#include <mpi.h>
#include <pthread.h>
#include <stdatomic.h>

#include "comm/group.h"
#include "core/error.h"

// Transport memory MPI may still touch after the call that posted it gave up, or an eager
// send in flight: freed once its request completes, or at disconnect.
typedef struct transport {
    struct transport *next;
    MPI_Request req;  // MPI_REQUEST_NULL once done or freed
    void *buf;
} transport;

// One group that spans processes, as this process holds it (shared by its local members,
// as the local backend's group object is).
typedef struct mpi_group {
    MPI_Comm comm;
    int id;
    int size;
    int native;                       // collectives on MPI's own (one member per process, --mpi-collectives native)
    atomic_llong blocked_since_ns;    // when its member entered MPI's own blocking collective; 0: not in one
    _Atomic(tb_group *) blocked;      // the calling thread's view of the group then (a communication thread's copy)
    int proc[TB_MAX_GROUP];           // communicator rank of the process of member i
    transport *sends[TB_MAX_GROUP];   // member i's eager sends in flight (only its thread touches them)
    pthread_mutex_t mu;               // guards abandoned
    transport *abandoned;             // buffers of calls that gave up
} mpi_group;

static inline mpi_group *mpi_state(const tb_group *g) { return g->backend_state; }

// "<what> on group <g>: MPI: <MPI's text for code>"; returns -1.
int tb_mpi_fail(tb_error *err, const char *what, const tb_group *g, int code);
// The local backend's message for an all-to-all count that does not match; returns -1.
int tb_mpi_count_mismatch(tb_group *g, int src, size_t sent, size_t expected, tb_error *err);

// Point-to-point, alike on both paths (mpi_backend.c).
int tb_mpi_send(tb_group *g, const float *buf, size_t count, int peer, int *timed_out, tb_error *err);
int tb_mpi_recv(tb_group *g, float *buf, size_t count, int peer, int *timed_out, tb_error *err);
int tb_mpi_batch_send_recv(const tb_p2p_op *ops, int n, int *timed_out, tb_error *err);

#endif
