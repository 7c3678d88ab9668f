#include "transformer/moe/router.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/cpu/kernels.h"
#include "backend/moe_row.h"
#include "runtime/memory.h"
#include "core/xalloc.h"

_Static_assert(TB_MOE_ROW_MAX_EXPERTS == TB_MOE_MAX_EXPERTS, "backend/moe_row.h's bound is config.h's");

void router_forward(const tb_moe_dims *m, int N, int C, const float *inp, const float *w, float *logits, float *scores,
                    int32_t *topk, float *probs) {
    const tb_backend *be = tb_be();
    be->matmul_forward(logits, inp, w, NULL, N, C, m->E);  // (N,C) -> (N,E)
    be->moe_router_forward(logits, scores, topk, probs, N, m->E, m->k, m->sigmoid, m->pre_softmax);
}

static int normalised(const tb_moe_dims *m) { return m->sigmoid && m->k > 1; }

void router_aux_score_sums(const tb_moe_dims *m, int first, int T, const float *scores, double *col) {
    cpu_moe_aux_score_sums(col, scores + (size_t)first * m->E, 1, T, m->E, normalised(m));
}

void router_aux_score_sums_tensor(const tb_moe_dims *m, tb_allocator *mem, int S, int T, const float *scores,
                                  double *col) {
    const tb_backend *be = tb_be();
    const size_t bytes = (size_t)S * m->E * sizeof(double);
    if (be->host) {
        be->moe_aux_score_sums(col, scores, S, T, m->E, normalised(m));
        return;
    }
    double *dev = tb_alloc(mem, TB_MEM_WORKSPACE, bytes, "moe aux-loss score sums");
    be->moe_aux_score_sums(dev, scores, S, T, m->E, normalised(m));
    be->copy_to_host(col, dev, bytes);
    tb_free(mem, dev);
}

double router_aux_loss_from_sums(const tb_moe_dims *m, int S, int T, const double *col, const int32_t *counts) {
    double loss = 0;
    for (int b = 0; b < S; b++) {  // E / (k · T²) · Σ_e (Σ_{n in sequence b} a[n,e]) · counts[b,e]
        double sum = 0;
        for (int e = 0; e < m->E; e++) sum += col[(size_t)b * m->E + e] * counts[(size_t)b * m->E + e];
        loss += sum * m->E / ((double)m->k * T * T);
    }
    return S > 1 ? loss / S : loss;
}

double router_load_balancing_loss(const tb_moe_dims *m, int N, const float *scores, const int32_t *tokens_per_expert) {
    double col[TB_MOE_MAX_EXPERTS];
    router_aux_score_sums(m, 0, N, scores, col);
    return router_aux_loss_from_sums(m, 1, N, col, tokens_per_expert);
}

void router_sequence_counts(const tb_moe_dims *m, int N, const int32_t *topk, int32_t *counts) {
    const int T = m->seq_length, S = N / T;
    memset(counts, 0, (size_t)S * m->E * sizeof *counts);
    for (int n = 0; n < N; n++)
        for (int j = 0; j < m->k; j++) counts[(size_t)(n / T) * m->E + topk[(size_t)n * m->k + j]]++;
}

double router_aux_loss(const tb_moe_dims *m, int N, const float *scores, const int32_t *topk,
                       const int32_t *selected_per_expert) {
    if (!m->seq_aux) return router_load_balancing_loss(m, N, scores, selected_per_expert);
    const int T = m->seq_length, S = N / T;
    int32_t *counts = tb_xcalloc((size_t)S * m->E, sizeof *counts, "sequence expert counts");
    double *col = tb_xcalloc((size_t)S * m->E, sizeof *col, "sequence aux-loss score sums");
    router_sequence_counts(m, N, topk, counts);
    cpu_moe_aux_score_sums(col, scores, S, T, m->E, normalised(m));
    const double loss = router_aux_loss_from_sums(m, S, T, col, counts);
    free(col);
    free(counts);
    return loss;
}

double router_aux_loss_factor(const tb_moe_dims *m, int N, float aux_scale) {
    // ∂aux/∂score[n,e] = coeff · E / (k · N²) · tokens_per_expert[e], the same for every token;
    // per sequence (seq_aux_loss): coeff · E / (k · T² · S) · counts[seq(n), e]
    const int T = m->seq_aux ? m->seq_length : N, S = N / T;
    return m->aux_loss ? (double)aux_scale * m->aux_coeff * m->E / ((double)m->k * T * T * S) : 0.0;
}

void router_backward(const tb_moe_dims *m, int N, int C, const float *inp, const float *w, const float *scores,
                     const int32_t *topk, const float *probs, const int32_t *counts, const float *d_probs,
                     float aux_scale, float *d_logits, float *dw, float *dinp) {
    const tb_backend *be = tb_be();
    const int T = m->seq_aux ? m->seq_length : N;
    be->moe_router_backward(d_logits, scores, topk, probs, d_probs, counts, T, router_aux_loss_factor(m, N, aux_scale),
                            N, m->E, m->k, m->sigmoid, m->pre_softmax);
    be->matmul_backward(dinp, dw, NULL, d_logits, inp, w, N, C, m->E);  // (N,E) -> (N,C), dW (E,C)
}

int router_expert_capacity(const tb_moe_dims *m, int N) {
    return (int)ceil((double)N * m->k / m->E * m->capacity_factor);
}

typedef struct choice {
    float prob;
    int index;  // in (N,k)
} choice;

// Higher prob first; on ties the earlier token.
static int by_prob(const void *pa, const void *pb) {
    const choice *a = pa, *b = pb;
    if (a->prob != b->prob) return a->prob > b->prob ? -1 : 1;
    return a->index - b->index;
}

int router_apply_capacity(const tb_moe_dims *m, int N, const int32_t *topk, const float *probs, int32_t *route,
                          int32_t *selected) {
    const int E = m->E, k = m->k, NK = N * k;
    for (int e = 0; e < E; e++) selected[e] = 0;
    for (int i = 0; i < NK; i++) selected[topk[i]]++, route[i] = topk[i];
    if (m->capacity_factor <= 0) return 0;
    const int capacity = router_expert_capacity(m, N);
    int dropped = 0;
    if (m->drop_position) {  // each expert keeps its earliest tokens
        int kept[TB_MOE_MAX_EXPERTS] = {0};
        for (int i = 0; i < NK; i++)
            if (kept[topk[i]]++ >= capacity) route[i] = -1, dropped++;
        return dropped;
    }
    choice *c = tb_xcalloc((size_t)NK, sizeof *c, "router choices over capacity");
    for (int e = 0; e < E; e++) {
        if (selected[e] <= capacity) continue;
        int n = 0;
        for (int i = 0; i < NK; i++)
            if (topk[i] == e) c[n++] = (choice){probs[i], i};
        qsort(c, (size_t)n, sizeof *c, by_prob);
        for (int j = capacity; j < n; j++) route[c[j].index] = -1, dropped++;
    }
    free(c);
    return dropped;
}
