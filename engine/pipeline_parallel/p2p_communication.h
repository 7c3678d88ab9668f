// p2p_communication.h — what pipeline stages send each other (Megatron-Core
// pipeline_parallel/p2p_communication.py): the activation of a microbatch forward to the
// next stage, its gradient backward to the previous one. Each call is one send or recv on
// the pipeline groups (the activation on "pp", the gradient on "pp_grad", so a stage's
// forward and backward traffic never match each other's messages), and adds the time it
// took — transfer plus waiting for the peer — to *wait_ms.
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

void recv_forward(const p2p_peers *p, float *x_in, double *wait_ms);         // from prev, on pp
void send_forward(const p2p_peers *p, const float *x_out, double *wait_ms);  // to next, on pp
void recv_backward(const p2p_peers *p, float *d_out, double *wait_ms);       // from next, on pp_grad
void send_backward(const p2p_peers *p, const float *d_in, double *wait_ms);  // to prev, on pp_grad

#endif
