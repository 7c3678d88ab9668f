// p2p_communication.h — what pipeline stages send each other (Megatron-Core
// pipeline_parallel/p2p_communication.py): the activation of a microbatch forward to the
// next stage, its gradient backward to the previous one (the activation on the "pp" group,
// the gradient on "pp_grad", so a stage's forward and backward traffic never match each
// other's messages).
//
// p2p_communicate is Megatron's _communicate: the sends and recvs a schedule does between
// two of its ops, issued together as one batch (comm.h's tb_batch_send_recv) in the order
// send_next, send_prev, recv_prev, recv_next. On NCCL, whose sends are rendezvous, a stage's
// send then completes together with the recv that its peer is waiting for on the other
// stage's side; on the local backend, whose sends are eager, the batch is those sends then
// those recvs, one call each; on MPI all of them are posted and waited for together. The
// time it took — transfer plus waiting for the peers — is added to *wait_ms.
#ifndef TB_PIPELINE_PARALLEL_P2P_COMMUNICATION_H
#define TB_PIPELINE_PARALLEL_P2P_COMMUNICATION_H

#include <stddef.h>

#include "comm/group.h"

// The stage's neighbours on the pipeline group; count is the floats of one activation (Ns·C).
typedef struct p2p_peers {
    tb_group *pp, *pp_grad;
    int prev, next;  // group indices of the previous and next stage (wrapping around)
    size_t count;
} p2p_peers;

// The four directions of a stage's messages, in the order a batch issues them:
//   send_next  an activation to the next stage (pp)
//   send_prev  a gradient to the previous stage (pp_grad)
//   recv_prev  an activation from the previous stage (pp)
//   recv_next  a gradient from the next stage (pp_grad)
typedef enum pp_p2p_dir { PP_SEND_NEXT, PP_SEND_PREV, PP_RECV_PREV, PP_RECV_NEXT, PP_P2P_DIRS } pp_p2p_dir;

// One message: the activation or gradient of `microbatch` that the op of virtual stage
// `vstage` (the receiver's) consumes.
typedef struct pp_msg {
    int present;  // 0: nothing that way
    int microbatch, vstage;
} pp_msg;

// The present messages of msg (by direction), each moving count floats of buf[direction];
// each is recorded (flight recorder) with its own microbatch.
void p2p_communicate(const p2p_peers *p, const pp_msg msg[PP_P2P_DIRS], float *const buf[PP_P2P_DIRS],
                     double *wait_ms);

#endif
