// mpi_backend.h — the communicator's MPI backend: the groups whose members live in more than
// one process (mpirun -np N pretrain_gpt ...), over one MPI communicator per group.
//
// Setting up, in every process, on the main thread, after MPI_Init_thread and
// parallel_state_world_init_process, before any rank thread starts:
//
//   tb_mpi_world_connect(&world, &err);      // collective over the processes of each group
//   parallel_state_run_ranks(...)            // the rank threads call tb_all_reduce etc.
//   tb_mpi_world_disconnect(&world);         // after they all returned
//
// Groups and communicators (docs/ARCHITECTURE.md, "Beyond one process"). A group whose
// members are all ranks of this process stays on the local backend. For every group that
// spans processes, the processes holding its members create one communicator with
// MPI_Comm_create_group, its ranks the processes in the order of their first member's
// position in the group (Megatron's order: with one rank per process, communicator rank =
// group index). MPI_Comm_split cannot express the general case: it puts a process in one
// communicator per call, while with --ranks-per-process K > 1 a process may hold members of
// several groups of one kind (K = 4, tp 2: ranks 0..3 are in dp groups [0, 4, ..] and [1, 5,
// ..]) or several members of one group (K = 2, dp 4: ranks 0 and 1 of [0, 1, 2, 3]).
// MPI_Comm_create_group is collective over the group's processes only; every process calls
// it for the groups it holds in increasing group id, a total order, so no two processes wait
// on each other in opposite orders.
//
// The calls (--mpi-collectives). native, the default: a group with one member per process
// (communicator rank = group index) runs each collective on MPI's own blocking collective on
// the caller's buffers (MPI_Allreduce, MPI_Reduce_scatter_block, MPI_Allgather, MPI_Alltoallv,
// MPI_Bcast, MPI_Barrier), as PyTorch's ProcessGroupMPI does; its timeout is the watchdog
// thread's (comm/watchdog.h), since a blocking MPI call cannot give up. A sum over two members
// is the same bits as the local backend's (a + b = b + a); over more it is MPI's order,
// reproducible at a fixed process count. A communicator's rank is a process, not a rank
// thread, so MPI's own collectives cannot serve a group with two members in one process:
// such a group, and every group under exact, runs the exact algorithm, built from
// non-blocking point-to-point messages between members: tag =
// class · 4096 + source index · 64 + destination index (class 0 collectives, 1 send/recv), so
// each member thread receives only what is addressed to it, and MPI's non-overtaking rule
// keeps successive calls of one pair in order. The algorithms are the local backend's:
// all_reduce is a reduce-scatter (member i sums share i of every member's buffer, in group
// order, with the local backend's own summation code, comm/reduce.h) then an all-gather of
// the shares; reduce_scatter the first half of that. So a sum is the same bits as on the
// local backend, and a run under mpirun the same bits as the same layout on rank threads.
// Data moves as bytes (MPI_BYTE): no conversion, homogeneous hosts assumed.
//
// Waiting (the exact algorithm and point-to-point). Every call posts its requests (a receive
// whose size is checked once its message has arrived: mpi_backend.c, "probed") and polls them
// with MPI_Testall (spinning, then sched_yield() between polls: never a sleep, since the
// transfer moves only while someone polls) until done, until the world's collective timeout
// (then *timed_out is set and the message is the local backend's: "<op> on group <g> (<n>
// ranks) not complete after <s> s", so comm.c writes the hang report as for threads), or
// until the world is aborted by a rank of this process. Requests of a call that gives up
// are cancelled (receives) or left to complete (sends) and their buffers kept to the end:
// every buffer the collectives give MPI is the backend's own transport memory (plain host
// memory outside the ranks' accounting, as the local backend's messages and NCCL's buffers
// are), never the caller's; point-to-point, on the caller's buffers (below), settles its
// receives before it gives up, so no call leaves anything of the caller's in MPI's hands.
//
// Point-to-point: a single send is eager as on the local backend (the message is copied and
// send returns; the copy is freed once MPI has sent it); a single recv is a batch of one. A
// batch (tb_batch_send_recv: the pipeline's and the CP ring's exchanges) posts its sends on
// the caller's buffers (MPI_Isend) and matches each receive's message as it arrives
// (MPI_Improbe: its size is the envelope's, checked with the local backend's message), then
// receives it into the caller's buffer (MPI_Imrecv), all polled together, so that no copy is
// made and no rendezvous send waits on its own batch. A posted MPI_Irecv is not used for a
// receive whose size is checked: Open MPI 4.1 can complete one of a longer message, sent by
// another thread of the same process, as if it fitted (mpi_backend.c, "probed").
//
// Without MPI at configure time (TB_HAVE_MPI undefined) these functions are stubs that fail
// with "MPI backend not built (...)".
#ifndef TB_COMM_MPI_BACKEND_H
#define TB_COMM_MPI_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "comm/group.h"
#include "core/error.h"

struct tb_world;

// 1 when the real backend was compiled in (TB_HAVE_MPI), else 0.
int tb_mpi_built(void);

// Creates the communicator of every group that spans processes and has a member here, and
// puts those groups of this process's ranks on tb_mpi_backend. Every process must call it
// (it is collective over each group's processes). On failure nothing is left connected.
int tb_mpi_world_connect(struct tb_world *w, tb_error *err);
// Undoes tb_mpi_world_connect once the rank threads have returned: waits (up to the
// collective timeout) for eager sends still in flight, frees the communicators and the
// transport buffers. Safe on a world never connected.
void tb_mpi_world_disconnect(struct tb_world *w);

// Broadcasts `bytes` bytes of buf from the process holding the first member of group
// `group_id` to the group's other processes (the NCCL unique id of the group, for one).
// Nothing to do for a group inside this process. Main thread, every process holding a member,
// in increasing group id (like tb_mpi_world_connect). Returns 0, or -1 with err set.
int tb_mpi_group_bcast_from_first(struct tb_world *w, int group_id, void *buf, size_t bytes, tb_error *err);

// --mpi-collectives native (the default): a group with one member per process runs each
// collective on MPI's own; exact: every group on the local backend's algorithm (above).
extern const tb_comm_backend tb_mpi_backend;
extern const tb_comm_backend tb_mpi_exact_backend;

// For the watchdog (comm/watchdog.h): when the longest-waiting member of this process entered
// MPI's own blocking collective (tb_now_ns), with the calling thread's view of its group in
// *group (a communication thread's copy has its own sequence numbers); 0 when none is in one.
// Safe from any thread while the world is connected.
int64_t tb_mpi_blocked_since(const struct tb_world *w, tb_group **group);

#endif
