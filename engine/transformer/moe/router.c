#include "transformer/moe/router.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

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

// Megatron's guard in the sigmoid normalisations
#define SIGMOID_EPS 1e-20

void router_forward(const tb_moe_dims *m, int N, int C, const float *inp, const float *w, float *logits, float *scores,
                    int32_t *topk, float *probs) {
    const int E = m->E, k = m->k;
    cpu_matmul_forward(logits, inp, w, NULL, N, C, E);  // (N,C) -> (N,E)
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float *l = logits + (size_t)n * E;
        float *s = scores + (size_t)n * E, *p = probs + (size_t)n * k;
        int32_t *idx = topk + (size_t)n * k;
        if (m->sigmoid) {  // the top k of sigmoid(logits); with k > 1 their probs sum to 1
            for (int e = 0; e < E; e++) s[e] = 1.0f / (1.0f + expf(-l[e]));
            top_k(idx, s, E, k);
            double sum = 0;
            for (int j = 0; j < k; j++) sum += s[idx[j]];
            for (int j = 0; j < k; j++) p[j] = k > 1 ? (float)(s[idx[j]] / (sum + SIGMOID_EPS)) : s[idx[j]];
            continue;
        }
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

// The aux loss's score of token n at expert e: the softmax score, or under sigmoid (k > 1) the
// sigmoid normalised over every expert (Megatron's compute_routing_scores_for_aux_loss).
static double sigmoid_row_sum(const float *s, int E) {
    double sum = 0;
    for (int e = 0; e < E; e++) sum += s[e];
    return sum + SIGMOID_EPS;
}

static double aux_score(const tb_moe_dims *m, const float *row, int e) {
    return m->sigmoid && m->k > 1 ? row[e] / sigmoid_row_sum(row, m->E) : row[e];
}

void router_aux_score_sums(const tb_moe_dims *m, int first, int T, const float *scores, double *col) {
    const int E = m->E;
    for (int e = 0; e < E; e++) {
        col[e] = 0;
        for (int n = first; n < first + T; n++) col[e] += aux_score(m, scores + (size_t)n * E, e);
    }
}

// E / (k · T²) · Σ_e (Σ_{n in tokens [first, first + T)} a[n,e]) · counts[e]
static double switch_loss(const tb_moe_dims *m, int first, int T, const float *scores, const int32_t *counts) {
    double col[TB_MOE_MAX_EXPERTS], sum = 0;
    router_aux_score_sums(m, first, T, scores, col);
    for (int e = 0; e < m->E; e++) sum += col[e] * counts[e];
    return sum * m->E / ((double)m->k * T * T);
}

double router_load_balancing_loss(const tb_moe_dims *m, int N, const float *scores, const int32_t *tokens_per_expert) {
    return switch_loss(m, 0, N, scores, tokens_per_expert);
}

// Each sequence's choices per expert (top-k, before any drop): counts (N / T, E).
static void sequence_counts(const tb_moe_dims *m, int N, const int32_t *topk, int32_t *counts) {
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
    sequence_counts(m, N, topk, counts);
    double loss = 0;
    for (int b = 0; b < S; b++) loss += switch_loss(m, b * T, T, scores, counts + (size_t)b * m->E);
    free(counts);
    return loss / S;
}

void router_backward(const tb_moe_dims *m, int N, int C, const float *inp, const float *w, const float *scores,
                     const int32_t *topk, const float *probs, const int32_t *tokens_per_expert, const float *d_probs,
                     float aux_scale, float *d_logits, float *dw, float *dinp) {
    const int E = m->E, k = m->k;
    // ∂aux/∂score[n,e] = coeff · E / (k · N²) · tokens_per_expert[e], the same for every token;
    // per sequence (seq_aux_loss): coeff · E / (k · T² · S) · counts[seq(n), e]
    const int T = m->seq_aux ? m->seq_length : N, S = N / T;
    const double aux = m->aux_loss ? (double)aux_scale * m->aux_coeff * E / ((double)k * T * T * S) : 0.0;
    int32_t *seq_counts = NULL;
    if (m->aux_loss && m->seq_aux) {
        seq_counts = tb_xcalloc((size_t)S * E, sizeof *seq_counts, "sequence expert counts");
        sequence_counts(m, N, topk, seq_counts);
    }
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float *s = scores + (size_t)n * E, *p = probs + (size_t)n * k, *dp = d_probs + (size_t)n * k;
        const int32_t *idx = topk + (size_t)n * k;
        const int32_t *counts = seq_counts ? seq_counts + (size_t)(n / T) * E : tokens_per_expert;
        float *dl = d_logits + (size_t)n * E;
        float ds[TB_MOE_MAX_EXPERTS];  // the gradient at the (aux loss's) scores
        for (int e = 0; e < E; e++) ds[e] = (float)(aux * counts[e]);
        if (m->sigmoid) {
            // σ = s; the aux scores a = σ / Σσ (k > 1): dσ_f = (ds_f − ⟨ds, a⟩) / Σσ
            double dsig[TB_MOE_MAX_EXPERTS];
            if (k > 1) {
                const double sum = sigmoid_row_sum(s, E);
                double da = 0;
                for (int e = 0; e < E; e++) da += (double)ds[e] * s[e] / sum;
                for (int e = 0; e < E; e++) dsig[e] = (ds[e] - da) / sum;
                // probs p_j = σ_j / Σ_chosen σ: dσ_j += (dp_j − ⟨dp, p⟩) / Σ_chosen σ
                double chosen = 0, pdp = 0;
                for (int j = 0; j < k; j++) chosen += s[idx[j]], pdp += (double)p[j] * dp[j];
                chosen += SIGMOID_EPS;
                for (int j = 0; j < k; j++) dsig[idx[j]] += (dp[j] - pdp) / chosen;
            } else {
                for (int e = 0; e < E; e++) dsig[e] = ds[e];
                dsig[idx[0]] += dp[0];
            }
            for (int e = 0; e < E; e++) dl[e] = (float)(dsig[e] * s[e] * (1.0 - s[e]));  // σ' = σ(1 − σ)
            continue;
        }
        // the probs' gradient at the scores under pre-softmax
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
    free(seq_counts);
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
