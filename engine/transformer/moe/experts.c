#include "transformer/moe/experts.h"

#include "backend/backend.h"
#include "comm/group.h"

// Under etp fc2 is row-parallel: its outputs are partial sums, reduced over etp by the
// dispatcher, so its bias is added once, by etp rank 0.
static int adds_fc2_bias(const tb_moe_dims *m) { return !m->etp || m->etp->index == 0; }

// --moe-grouped-gemm (Megatron's GroupedMLP): each linear one grouped GEMM over every local
// expert's rows, the activation one call over all R rows (it is per row).
static void grouped_forward(const tb_moe_dims *m, const tb_activation_module *act, int C, const int32_t *counts,
                            const moe_layer_params *p, const float *inp, float *fc1, float *actv, float *out) {
    const float *b2[TB_MOE_MAX_EXPERTS];
    int R = 0;
    for (int e = 0; e < m->E_local; e++) b2[e] = adds_fc2_bias(m) ? p->fc2_b[e] : NULL, R += counts[e];
    tb_be()->grouped_matmul_forward(fc1, inp, (const float *const *)p->fc1_w, (const float *const *)p->fc1_b, counts,
                               m->E_local, C, m->F1);
    act->forward(actv, fc1, R, m->F);
    tb_be()->grouped_matmul_forward(out, actv, (const float *const *)p->fc2_w, b2, counts, m->E_local, m->F, C);
}

static void grouped_backward(const tb_moe_dims *m, const tb_activation_module *act, int C, const int32_t *counts,
                             const moe_layer_params *p, moe_layer_params *g, const float *inp, const float *fc1,
                             const float *actv, const float *dout, float *d_act, float *d_fc1, float *dinp) {
    int R = 0;
    for (int e = 0; e < m->E_local; e++) R += counts[e];
    tb_be()->grouped_matmul_backward(d_act, g->fc2_w, g->fc2_b, dout, actv, (const float *const *)p->fc2_w, counts,
                                m->E_local, m->F, C);
    act->backward(d_fc1, fc1, d_act, R, m->F);
    tb_be()->grouped_matmul_backward(dinp, g->fc1_w, g->fc1_b, d_fc1, inp, (const float *const *)p->fc1_w, counts,
                                m->E_local, C, m->F1);
}

void experts_forward(const tb_moe_dims *m, const tb_activation_module *act, int C, const int32_t *counts,
                     const moe_layer_params *p, const float *inp, float *fc1, float *actv, float *out) {
    if (m->grouped_gemm) {
        grouped_forward(m, act, C, counts, p, inp, fc1, actv, out);
        return;
    }
    const int F = m->F, F1 = m->F1;
    const int add_fc2_bias = adds_fc2_bias(m);
    size_t row = 0;
    for (int e = 0; e < m->E_local; e++) {
        const int n = counts[e];
        if (n == 0) continue;
        // (n,C) -> (n,F1) -> (n,F) -> (n,C)
        tb_be()->matmul_forward(fc1 + row * F1, inp + row * C, p->fc1_w[e], p->fc1_b[e], n, C, F1);
        act->forward(actv + row * F, fc1 + row * F1, n, F);
        tb_be()->matmul_forward(out + row * C, actv + row * F, p->fc2_w[e], add_fc2_bias ? p->fc2_b[e] : NULL, n, F, C);
        row += (size_t)n;
    }
}

void experts_backward(const tb_moe_dims *m, const tb_activation_module *act, int C, const int32_t *counts,
                      const moe_layer_params *p, moe_layer_params *g, const float *inp, const float *fc1,
                      const float *actv, const float *dout, float *d_act, float *d_fc1, float *dinp) {
    if (m->grouped_gemm) {
        grouped_backward(m, act, C, counts, p, g, inp, fc1, actv, dout, d_act, d_fc1, dinp);
        return;
    }
    const int F = m->F, F1 = m->F1;
    size_t row = 0;
    for (int e = 0; e < m->E_local; e++) {
        const int n = counts[e];
        if (n == 0) continue;
        tb_be()->matmul_backward(d_act + row * F, g->fc2_w[e], g->fc2_b[e], dout + row * C, actv + row * F, p->fc2_w[e], n,
                            F, C);
        act->backward(d_fc1 + row * F1, fc1 + row * F1, d_act + row * F, n, F);
        tb_be()->matmul_backward(dinp + row * C, g->fc1_w[e], g->fc1_b[e], d_fc1 + row * F1, inp + row * C, p->fc1_w[e], n,
                            C, F1);
        row += (size_t)n;
    }
}
