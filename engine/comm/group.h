// group.h — a communicator group as one member rank sees it, and the backend interface
// that implements its calls (comm.h is the API the engine calls; comm/local_backend and
// comm/nccl_backend implement tb_comm_backend). Types only: the flight recorder, the
// watchdog and parallel_state need them without the calls, so that nothing below comm.c
// depends back on it.
#ifndef TB_COMM_GROUP_H
#define TB_COMM_GROUP_H

#include <stdatomic.h>
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
struct tb_allocator;
typedef struct tb_group tb_group;

// One half of a batched point-to-point exchange (PyTorch's P2POp, comm.h's
// tb_batch_send_recv): a send of count floats of buf to member peer of g, or a recv of them
// into buf from it. A batch holds at most TB_P2P_BATCH_MAX of them (Megatron's _communicate:
// a send and a recv each way).
typedef struct tb_p2p_op {
    tb_comm_op op;  // TB_COMM_SEND or TB_COMM_RECV
    tb_group *g;
    float *buf;     // a send only reads it
    size_t count;
    int peer;       // group index
    int microbatch; // what its flight-recorder entry names (-1: the caller's current microbatch)
} tb_p2p_op;

#define TB_P2P_BATCH_MAX 4

// The world a group's calls run in, as a backend sees it. parallel_state's tb_world holds
// it, so that the backends need not know parallel_state (which creates their groups).
typedef struct tb_comm_world {
    double collective_timeout_s;  // a call not complete after this long is a hang; <= 0: 300 s
    int mpi_exact;                // --mpi-collectives exact: the MPI backend's groups on the exact algorithm
    atomic_int aborted;           // 0, or 1 + the rank whose failure aborted the world
    char aborted_by[96];          // that rank's label, written before aborted is set
} tb_comm_world;

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
    // The ops of a batch issued together, returning once all are done (every op's group is on
    // this backend). NULL for a backend whose sends are eager and in one process (local):
    // comm.c then runs the ops one by one, in list order, as single sends and recvs.
    int (*batch_send_recv)(const tb_p2p_op *ops, int n, int *timed_out, tb_error *err);
    // A backend whose groups live in one process (local): the shared object a group's members
    // meet in (tb_group.backend_state), made by the world once per group (parallel_state.c),
    // woken when the world aborts (its waits then read the abort flag), destroyed with the
    // world. NULL for a backend connected after the world is made (MPI, NCCL).
    void *(*group_create)(int size);
    void (*group_wake)(void *state);
    void (*group_destroy)(void *state);
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
    struct tb_allocator *mem;   // the owning rank's allocator (a backend's transfer buffers: comm)
    tb_comm_world *world;       // the world it runs in
};

#define TB_MAX_GROUP 64

// What every backend's wait shares, so that a call that gives up reads the same on each:
// the world's collective timeout (300 s for a group without a world or a timeout set),
// whether the world was aborted, and the two failures — "<what> on group <g> stopped: the
// run was aborted by the failure of <rank>" and "<what> on group <g> (<n> ranks) not complete
// after <s> s" (which also sets *timed_out, for comm.c's hang report).
double tb_comm_timeout_s(const tb_group *g);
// The polling backends' clock, CLOCK_MONOTONIC seconds, and NCCL's pause: a wait that spins
// briefly, then sleeps 10 µs, 20 µs, ... up to 1 ms between polls of a device's completion
// (the GPU moves the data meanwhile), so that a wait that lasts costs little CPU.
double tb_comm_now_s(void);
void tb_comm_backoff(unsigned *polls);
// The MPI backend's pause between two polls of its requests (each poll drives MPI's progress
// engine, as MPI_Wait's own loop does): none for the first polls (a bounded spin, some tens of
// µs), then sched_yield(), which hands the core to any runnable thread (a peer process on an
// oversubscribed host) and returns at once when there is none. Never a sleep: the transfer
// moves only while someone polls.
void tb_comm_poll_pause(unsigned *polls);
int tb_comm_world_aborted(const tb_group *g);
int tb_comm_fail_aborted(tb_group *g, const char *what, tb_error *err);
int tb_comm_fail_timed_out(tb_group *g, const char *what, int *timed_out, tb_error *err);

#endif
