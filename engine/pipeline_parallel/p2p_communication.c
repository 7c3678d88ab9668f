#include "pipeline_parallel/p2p_communication.h"

#include "comm/comm.h"
#include "core/ranges.h"

static double ms_since(int64_t t0) { return (double)(tb_now_ns() - t0) / 1e6; }

void recv_forward(const p2p_peers *p, float *x_in, double *wait_ms) {
    int64_t t0 = tb_now_ns();
    tb_recv(p->pp, x_in, p->count, p->prev);
    *wait_ms += ms_since(t0);
}

void send_forward(const p2p_peers *p, const float *x_out, double *wait_ms) {
    int64_t t0 = tb_now_ns();
    tb_send(p->pp, x_out, p->count, p->next);
    *wait_ms += ms_since(t0);
}

void recv_backward(const p2p_peers *p, float *d_out, double *wait_ms) {
    int64_t t0 = tb_now_ns();
    tb_recv(p->pp_grad, d_out, p->count, p->next);
    *wait_ms += ms_since(t0);
}

void send_backward(const p2p_peers *p, const float *d_in, double *wait_ms) {
    int64_t t0 = tb_now_ns();
    tb_send(p->pp_grad, d_in, p->count, p->prev);
    *wait_ms += ms_since(t0);
}
