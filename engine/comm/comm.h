// comm.h — the communicator: collectives and point-to-point on a group of ranks.
//
// One API over three backends, chosen per group:
//   local  the default: rank threads of one process exchange through shared memory. Every
//          reduction sums the members' contributions in group order, so results are the
//          same bits on every rank and in every run. Blocking, with a timeout.
//   mpi    under mpirun, a group whose members are in more than one process: one MPI
//          communicator per group; MPI's own collectives where the group has one member per
//          process (--mpi-collectives native), else the local backend's algorithms and
//          summation over point-to-point messages, the same bits as the local backend
//          (comm/mpi_backend.h).
//   nccl   one NCCL communicator per group (ncclCommInitRank, the unique id shared within
//          the process); buffers are device memory. Built when CUDA and NCCL are found.
//
// Every call is recorded (docs/ARCHITECTURE.md, "Observability"): a range "comm.<group>.<op>"
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

#include "comm/group.h"

// Collectives (count in floats). Peers and roots are indices within the group.
void tb_all_reduce(tb_group *g, float *buf, size_t count, tb_red_op op);
void tb_reduce_scatter(tb_group *g, const float *send, float *recv, size_t recvcount);  // send: size·recvcount
void tb_all_gather(tb_group *g, const float *send, float *recv, size_t sendcount);      // recv: size·sendcount
// Gathers `bytes` bytes (a multiple of 4) from every member, exactly: an all-gather moves
// bits and never computes on them, so 8-byte figures (int64 counts, doubles) travel intact
// as pairs of float32 words. recv: size·bytes. Recorded as an all_gather of bytes/4 floats.
void tb_all_gather_bytes(tb_group *g, const void *send, void *recv, size_t bytes);
void tb_all_to_all(tb_group *g, const float *send, const size_t *sendcounts, float *recv,
                   const size_t *recvcounts);
void tb_broadcast(tb_group *g, float *buf, size_t count, int root);
void tb_send(tb_group *g, const float *buf, size_t count, int peer);
void tb_recv(tb_group *g, float *buf, size_t count, int peer);
// A batch of n (1 .. TB_P2P_BATCH_MAX) sends and recvs, on one group or several, issued
// together; returns once all are done (PyTorch's batch_isend_irecv and the wait on its
// requests, as Megatron's p2p_communication._communicate does). List the sends first.
//   local       sends are eager: the ops run one by one in list order, each exactly a tb_send
//               or tb_recv (the same messages, bits, records and order as those calls).
//   MPI         sends posted on the caller's buffers (MPI_Isend), each receive matched as
//               its message arrives (MPI_Improbe, its size checked) and received into the
//               caller's buffer (MPI_Imrecv), all polled together, so a send that MPI completes
//               only once its receive is matched (its rendezvous protocol for large messages)
//               cannot deadlock two stages that send to each other; the messages are
//               tb_send's and tb_recv's.
//   NCCL        sends are rendezvous: one ncclGroupStart / ncclSend | ncclRecv ... /
//               ncclGroupEnd over the ops' communicators, each on its group's stream, so two
//               stages that send to each other and then receive do not deadlock.
// Each op is recorded as its single call would be (its range comm.<group>.send|recv with
// the peer and bytes, its flight-recorder entry — naming op.microbatch when that is not -1 —
// and its group's next sequence number); on
// NCCL the ranges nest in list order and every op's entry stays pending until the whole
// batch is done. A timeout is reported (hang report) on the last op's group.
void tb_batch_send_recv(const tb_p2p_op *ops, int n);
void tb_barrier(tb_group *g);

// A rank's second thread (DistributedDataParallel's communication thread, --overlap-grad-reduce)
// makes calls through the same API. Its calls are recorded on the rank's flight recorder
// (which has a mutex) and on the thread's own bound ranges, but a failed call cannot unwind
// the rank (rk->failure.unwind is the rank thread's): it calls fail, which must not return (the
// thread ends there and the rank thread fails with status and msg when it next waits for it).
// step and microbatch are what its calls record (the rank thread's own fields change under it).
// --inject-stall applies to the rank thread only. stream_ordered: the thread orders each call
// after the kernels that wrote its buffers itself (an event of the compute stream the group's
// stream waits for, distributed_data_parallel.c), so a device backend does not also wait for
// the rank's whole compute stream (comm/nccl_backend.h) — that would wait for later work too.
typedef struct tb_comm_thread {
    void (*fail)(struct tb_comm_thread *t, int status, const char *msg);
    int64_t step;
    int microbatch;
    int stream_ordered;
} tb_comm_thread;
// Binds t to the calling thread (NULL unbinds).
void tb_comm_thread_bind(tb_comm_thread *t);
// The calling thread's binding: NULL on a rank thread.
const tb_comm_thread *tb_comm_thread_current(void);

#endif
