// nccl_backend.h — the communicator's NCCL backend: one NCCL communicator per group,
// buffers in device memory (float32).
//
// Setting up, for a world whose rank threads share one process:
//
//   main thread   tb_nccl_ids *ids;  tb_nccl_ids_create(&world, &ids, &err);
//                 (one ncclUniqueId per distinct group id of the world; the caller owns
//                  the object and frees it with tb_nccl_ids_free once every rank is set up)
//   each rank     tb_nccl_rank_init(rk, ids, &err);      // in that rank's own thread
//     thread      ... tb_all_reduce(&rk->groups[k], device_buf, n, TB_RED_SUM) ...
//                 tb_nccl_rank_destroy(rk);
//
// tb_nccl_rank_init makes the thread's current device rank % cudaGetDeviceCount(), then
// creates, for every group of the rank, a non-blocking communicator of g->size ranks in
// which the rank is g->index (ncclCommInitRankConfig with the group's unique id), a CUDA
// stream and a one-float scratch buffer; it waits (up to the world's collective timeout)
// until every communicator is ready and switches each group to tb_nccl_backend, its
// backend_state to the group's NCCL state (tb_nccl_group_comm/stream read it). All ranks
// of a group must call it; ranks of one communicator must be on distinct devices (NCCL
// refuses a duplicate GPU), so a world needs at least as many GPUs as its largest group
// has members. tb_nccl_rank_destroy finalizes and destroys the communicators (aborting
// those that cannot finalize within the timeout) and puts the groups back on the local
// backend (the MPI backend for a group that spans processes).
//
// Every call enqueues on the group's stream and waits for it: it polls cudaStreamQuery and
// ncclCommGetAsyncError until the operation is done, and when the world's collective
// timeout passes it aborts the communicator (ncclCommAbort), sets *timed_out and fails
// naming the op, group and seconds. After an abort or an asynchronous NCCL error the
// group's communicator is gone and further calls on it fail at once. The communicators are
// non-blocking (ncclConfig_t.blocking = 0) so that no NCCL call, lazy connection setup
// included, can block past the timeout; the price is that NCCL enqueues each call from a
// helper thread (tens of µs), and the wait spins briefly, then sleeps up to 1 ms per poll.
//
// Differences from the local backend:
// - buffers must be device memory of the rank's device (checked: a host pointer is an
//   error, not a crash);
// - the group's stream is created with default flags, so it is ordered after work on the
//   legacy default stream; work on other streams must be synchronized by the caller;
// - send is a rendezvous, not eager: it completes only once the peer posts the matching
//   recv, so two ranks that both send first deadlock (order pairs by parity, use all_to_all,
//   or batch the sends with their recvs: batch_send_recv issues a batch's ncclSend and
//   ncclRecv calls, on their groups' communicators and streams, in one ncclGroupStart /
//   ncclGroupEnd and waits for all of them, aborting every one of those communicators on a
//   failure or timeout); a send to oneself is refused;
// - all_to_all does not check that the counts agree across ranks (mismatched counts hang
//   until the timeout);
// - sums are reduced in NCCL's order (ring/tree), not group order: the same on every rank
//   of a group but not bitwise equal to the local backend's.
//
// Without CUDA/NCCL at configure time (TB_HAVE_NCCL undefined) this file's functions are
// stubs: the create/init functions fail with "NCCL backend not built (...)".
#ifndef TB_COMM_NCCL_BACKEND_H
#define TB_COMM_NCCL_BACKEND_H

#include <stddef.h>

#include "comm/group.h"
#include "core/error.h"

struct tb_world;
struct tb_rank;

typedef struct tb_nccl_ids tb_nccl_ids;

// 1 when the real backend was compiled in (TB_HAVE_NCCL), else 0.
int tb_nccl_built(void);

// "2.28.9": the version of the linked NCCL library (ncclGetVersion; needs no GPU).
// Returns 0, or -1 with a reason in buf.
int tb_nccl_version(char *buf, size_t len);

// Main thread, after parallel_state_world_init: one unique id per distinct group id.
int tb_nccl_ids_create(const struct tb_world *w, tb_nccl_ids **out, tb_error *err);
// The same under mpirun (llm.c's multi_gpu_config_init, per group): main thread of every
// process, after tb_mpi_world_connect; one id per group holding a rank of this process. For a
// group that spans processes, the process of its first member draws the id
// (ncclGetUniqueId) and broadcasts it over the group's MPI communicator
// (tb_mpi_group_bcast_from_first), every process going through the groups in increasing id.
// Each rank thread then calls tb_nccl_rank_init as above (ncclCommInitRankConfig with the
// group's size and the rank's index). A rank's device is rank % the devices its process
// sees, so processes of one host must see their own devices or ranks per host = devices.
int tb_nccl_ids_create_mpi(struct tb_world *w, tb_nccl_ids **out, tb_error *err);
void tb_nccl_ids_free(tb_nccl_ids *ids);

// The rank's thread: communicators for all its groups (see above). On failure nothing of
// this rank is left on NCCL (its groups stay on the local backend).
int tb_nccl_rank_init(struct tb_rank *rk, const tb_nccl_ids *ids, tb_error *err);
// The rank's thread: undoes tb_nccl_rank_init (groups not on NCCL are left alone).
void tb_nccl_rank_destroy(struct tb_rank *rk);

// Training (--device cuda): the rank's compute stream. Every call of the rank's NCCL groups
// then first orders the group's stream after the work enqueued on it so far (the kernels that
// wrote its buffers: an event recorded on the compute stream, which the group's stream waits
// for) — except a call of a communication thread that orders its calls itself
// (tb_comm_thread.stream_ordered, comm.h: DistributedDataParallel's bucket events) — and a
// host buffer given to all_reduce, all_gather or broadcast (the loss, the gradient norm, report
// figures) is staged through a device buffer of the group instead of being refused. Without
// it (NULL, the default) host buffers are refused as above.
void tb_nccl_rank_set_compute_stream(struct tb_rank *rk, void *stream);

// A group on the NCCL backend: its ncclComm_t (NULL once aborted), its cudaStream_t and
// device. NULL / -1 for a group on another backend.
void *tb_nccl_group_comm(const tb_group *g);
void *tb_nccl_group_stream(const tb_group *g);
int tb_nccl_group_device(const tb_group *g);

extern const tb_comm_backend tb_nccl_backend;

#endif
