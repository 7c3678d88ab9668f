#include "transformer/moe/router.h"

#include <math.h>
#include <stdlib.h>

#include "backend/cpu/kernels.h"
#include "core/xalloc.h"

// out = softmax(x) over n entries, the sum in double
static void softmax_row(float *out, const float *x, int n) {
    float max = x[0];
    for (int i = 1; i < n; i++) max = x[i] > max ? x[i] : max;
    double sum = 0;
    for (int i = 0; i < n; i++) sum += out[i] = expf(x[i] - max);
    const float inv = (float)(1.0 / sum);
    for (int i = 0; i < n; i++) out[i] *= inv;
}

// The k largest of v (E), largest first, ties to the lower index.
static void top_k(int32_t *idx, const float *v, int E, int k) {
    for (int j = 0; j < k; j++) {
        int best = -1;
        for (int e = 0; e < E; e++) {
            int taken = 0;
            for (int i = 0; i < j && !taken; i++) taken = idx[i] == e;
            if (!taken && (best < 0 || v[e] > v[best])) best = e;
        }
        idx[j] = best;
    }
}

void router_forward(const tb_moe_dims *m, int N, int C, const float *inp, const float *w, float *logits, float *scores,
                    int32_t *topk, float *probs) {
    const int E = m->E, k = m->k;
    cpu_matmul_forward(logits, inp, w, NULL, N, C, E);  // (N,C) -> (N,E)
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float *l = logits + (size_t)n * E;
        float *s = scores + (size_t)n * E, *p = probs + (size_t)n * k;
        int32_t *idx = topk + (size_t)n * k;
        softmax_row(s, l, E);
        top_k(idx, m->pre_softmax ? s : l, E, k);
        if (m->pre_softmax) {
            for (int j = 0; j < k; j++) p[j] = s[idx[j]];
        } else {
            float chosen[TB_MOE_MAX_EXPERTS];
            for (int j = 0; j < k; j++) chosen[j] = l[idx[j]];
            softmax_row(p, chosen, k);
        }
    }
}

double router_load_balancing_loss(const tb_moe_dims *m, int N, const float *scores, const int32_t *tokens_per_expert) {
    const int E = m->E;
    double sum = 0;
    for (int e = 0; e < E; e++) {
        double col = 0;  // Σ_n scores[n,e]
        for (int n = 0; n < N; n++) col += scores[(size_t)n * E + e];
        sum += col * tokens_per_expert[e];
    }
    return sum * E / ((double)m->k * N * N);
}

void router_backward(const tb_moe_dims *m, int N, int C, const float *inp, const float *w, const float *scores,
                     const int32_t *topk, const float *probs, const int32_t *tokens_per_expert, const float *d_probs,
                     float aux_scale, float *d_logits, float *dw, float *dinp) {
    const int E = m->E, k = m->k;
    // ∂aux/∂scores[n,e] = coeff · E / (k · N²) · tokens_per_expert[e], the same for every token
    const double aux = m->aux_loss ? (double)aux_scale * m->aux_coeff * E / ((double)k * N * N) : 0.0;
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float *s = scores + (size_t)n * E, *p = probs + (size_t)n * k, *dp = d_probs + (size_t)n * k;
        const int32_t *idx = topk + (size_t)n * k;
        float *dl = d_logits + (size_t)n * E;
        // the gradient at the scores: the aux loss's, plus the probs' under pre-softmax
        float ds[TB_MOE_MAX_EXPERTS];
        for (int e = 0; e < E; e++) ds[e] = (float)(aux * tokens_per_expert[e]);
        if (m->pre_softmax)
            for (int j = 0; j < k; j++) ds[idx[j]] += dp[j];
        // softmax backward over every expert: dl = s ⊙ (ds − ⟨s, ds⟩)
        double dot = 0;
        for (int e = 0; e < E; e++) dot += (double)s[e] * ds[e];
        for (int e = 0; e < E; e++) dl[e] = s[e] * (ds[e] - (float)dot);
        if (!m->pre_softmax) {
            // probs = softmax of the k chosen logits: dl[idx j] += p_j (dp_j − ⟨p, dp⟩)
            double pdp = 0;
            for (int j = 0; j < k; j++) pdp += (double)p[j] * dp[j];
            for (int j = 0; j < k; j++) dl[idx[j]] += p[j] * (dp[j] - (float)pdp);
        }
    }
    cpu_matmul_backward(dinp, dw, NULL, d_logits, inp, w, N, C, E);  // (N,E) -> (N,C), dW (E,C)
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
