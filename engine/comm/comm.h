// comm.h — the communicator: collectives and point-to-point on a group of ranks.
//
// One API over two backends, chosen per world:
//   local  the default: rank threads of one process exchange through shared memory. Every
//          reduction sums the members' contributions in group order, so results are the
//          same bits on every rank and in every run. Blocking, with a timeout.
//   nccl   one NCCL communicator per group (ncclCommInitRank, the unique id shared within
//          the process); buffers are device memory. Built when CUDA and NCCL are found.
//
// Every call is recorded (DESIGN.md, observability contract): a range "comm.<group>.<op>"
// nested under the caller's range, whose args carry the group, the caller's coordinates,
// the per-group sequence number, op, dtype, count, bytes and peer; and an entry in the
// rank's flight recorder (the last TB_FLIGHT_RECORDER_LEN calls, with enter and exit times)
// that a hang report dumps. A call that does not complete within the world's collective
// timeout ends the run with a hang report (comm/watchdog.h); calls therefore return
// nothing: like an NCCL error in Megatron, a failed collective is fatal.
#ifndef TB_COMM_COMM_H
#define TB_COMM_COMM_H

#include <stddef.h>
#include <stdint.h>

#include "core/error.h"

typedef enum tb_red_op { TB_RED_SUM, TB_RED_MAX } tb_red_op;

typedef enum tb_comm_op {
    TB_COMM_ALL_REDUCE,
    TB_COMM_REDUCE_SCATTER,
    TB_COMM_ALL_GATHER,
    TB_COMM_ALL_TO_ALL,
    TB_COMM_BROADCAST,
    TB_COMM_SEND,
    TB_COMM_RECV,
    TB_COMM_BARRIER,
} tb_comm_op;

const char *tb_comm_op_name(tb_comm_op op);

struct tb_rank;
typedef struct tb_group tb_group;

// A backend: the implementation of each call for one group. Returns 0, or -1 with err set
// (a timeout says so in err and sets *timed_out).
typedef struct tb_comm_backend {
    const char *name;
    int (*all_reduce)(tb_group *g, float *buf, size_t count, tb_red_op op, int *timed_out, tb_error *err);
    int (*reduce_scatter)(tb_group *g, const float *send, float *recv, size_t recvcount, int *timed_out,
                          tb_error *err);
    int (*all_gather)(tb_group *g, const float *send, float *recv, size_t sendcount, int *timed_out,
                      tb_error *err);
    int (*all_to_all)(tb_group *g, const float *send, const size_t *sendcounts, float *recv,
                      const size_t *recvcounts, int *timed_out, tb_error *err);
    int (*broadcast)(tb_group *g, float *buf, size_t count, int root, int *timed_out, tb_error *err);
    int (*send)(tb_group *g, const float *buf, size_t count, int peer, int *timed_out, tb_error *err);
    int (*recv)(tb_group *g, float *buf, size_t count, int peer, int *timed_out, tb_error *err);
    int (*barrier)(tb_group *g, int *timed_out, tb_error *err);
} tb_comm_backend;

// A group as one member rank sees it.
struct tb_group {
    const char *name;           // "tp", "cp", "dp", "dp_cp", "pp", "mp", "embedding", "world"
    int size;                   // members
    int index;                  // this rank's position among them
    int ranks[64];              // global ranks of the members, in group order (see TB_MAX_GROUP)
    int id;                     // unique in the world
    uint64_t seq;               // calls this rank has made on the group
    const tb_comm_backend *backend;
    void *backend_state;        // local: the shared group object; nccl: its comm, stream and device
    struct tb_rank *rk;         // the owning rank (for records and reports)
};

#define TB_MAX_GROUP 64

// Collectives (count in floats). Peers and roots are indices within the group.
void tb_all_reduce(tb_group *g, float *buf, size_t count, tb_red_op op);
void tb_reduce_scatter(tb_group *g, const float *send, float *recv, size_t recvcount);  // send: size·recvcount
void tb_all_gather(tb_group *g, const float *send, float *recv, size_t sendcount);      // recv: size·sendcount
void tb_all_to_all(tb_group *g, const float *send, const size_t *sendcounts, float *recv,
                   const size_t *recvcounts);
void tb_broadcast(tb_group *g, float *buf, size_t count, int root);
void tb_send(tb_group *g, const float *buf, size_t count, int peer);
void tb_recv(tb_group *g, float *buf, size_t count, int peer);
void tb_barrier(tb_group *g);

#endif
