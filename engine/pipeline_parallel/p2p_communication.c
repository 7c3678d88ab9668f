#include "pipeline_parallel/p2p_communication.h"

#include "comm/comm.h"
#include "runtime/ranges.h"

void p2p_communicate(const p2p_peers *p, const pp_msg msg[PP_P2P_DIRS], float *const buf[PP_P2P_DIRS],
                     double *wait_ms) {
    static const tb_comm_op op[PP_P2P_DIRS] = {TB_COMM_SEND, TB_COMM_SEND, TB_COMM_RECV, TB_COMM_RECV};
    tb_group *const g[PP_P2P_DIRS] = {p->pp, p->pp_grad, p->pp, p->pp_grad};
    const int peer[PP_P2P_DIRS] = {p->next, p->prev, p->prev, p->next};
    tb_p2p_op ops[PP_P2P_DIRS];
    int n = 0;
    for (int d = 0; d < PP_P2P_DIRS; d++)
        if (msg[d].present) ops[n++] = (tb_p2p_op){op[d], g[d], buf[d], p->count, peer[d], msg[d].microbatch};
    if (n == 0) return;
    const int64_t t0 = tb_now_ns();
    tb_batch_send_recv(ops, n);
    *wait_ms += (double)(tb_now_ns() - t0) / 1e6;
}
