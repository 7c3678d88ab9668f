// moe_row.h — the MoE router's per-token arithmetic (transformer/moe/router.h), shared by the
// CPU loops (backend/cpu/moe_kernels.c) and the CUDA kernels (backend/cuda/moe.cu), so both
// do the same float operations in the same order (as adamw_element.h).
//
//   moe_router_row_forward   one token: scores (E) from its logits (softmax over every expert,
//                            or sigmoid), its top-k experts (largest first, ties to the lower
//                            expert index) and their probs (k)
//   moe_router_row_backward  one token: d_logits (E) from d_probs (k) and the load-balancing
//                            loss's gradient aux · counts[e] at the aux loss's scores
//   moe_aux_score            the aux loss's score a[n,e] (sigmoid with k > 1: normalised)
#ifndef TB_BACKEND_MOE_ROW_H
#define TB_BACKEND_MOE_ROW_H

#include <math.h>
#include <stdint.h>

#ifdef __CUDACC__
#define TB_MOE_ROW __host__ __device__ __forceinline__
#else
#define TB_MOE_ROW static inline
#endif

#define TB_MOE_ROW_MAX_EXPERTS 256  // config.h's TB_MOE_MAX_EXPERTS (asserted in router.c)
#define TB_MOE_SIGMOID_EPS 1e-20    // Megatron's guard in the sigmoid normalisations

// out = softmax(x) over n entries, the sum in double
TB_MOE_ROW void moe_softmax_row(float *out, const float *x, int n) {
    float max = x[0];
    for (int i = 1; i < n; i++) max = x[i] > max ? x[i] : max;
    double sum = 0;
    for (int i = 0; i < n; i++) sum += out[i] = expf(x[i] - max);
    const float inv = (float)(1.0 / sum);
    for (int i = 0; i < n; i++) out[i] *= inv;
}

// The k largest of v (E), largest first, ties to the lower index.
TB_MOE_ROW void moe_top_k(int32_t *idx, const float *v, int E, int k) {
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

// l: the token's logits (E); s (E), idx (k), p (k) written
TB_MOE_ROW void moe_router_row_forward(const float *l, float *s, int32_t *idx, float *p, int E, int k, int sigmoid,
                                       int pre_softmax) {
    if (sigmoid) {  // the top k of sigmoid(logits); with k > 1 their probs sum to 1
        for (int e = 0; e < E; e++) s[e] = 1.0f / (1.0f + expf(-l[e]));
        moe_top_k(idx, s, E, k);
        double sum = 0;
        for (int j = 0; j < k; j++) sum += s[idx[j]];
        for (int j = 0; j < k; j++) p[j] = k > 1 ? (float)(s[idx[j]] / (sum + TB_MOE_SIGMOID_EPS)) : s[idx[j]];
        return;
    }
    moe_softmax_row(s, l, E);
    moe_top_k(idx, pre_softmax ? s : l, E, k);
    if (pre_softmax) {
        for (int j = 0; j < k; j++) p[j] = s[idx[j]];
    } else {
        float chosen[TB_MOE_ROW_MAX_EXPERTS];
        for (int j = 0; j < k; j++) chosen[j] = l[idx[j]];
        moe_softmax_row(p, chosen, k);
    }
}

TB_MOE_ROW double moe_sigmoid_row_sum(const float *s, int E) {
    double sum = 0;
    for (int e = 0; e < E; e++) sum += s[e];
    return sum + TB_MOE_SIGMOID_EPS;
}

// The aux loss's score of a token (row: its scores) at expert e; normalise: sigmoid with k > 1
// (Megatron's compute_routing_scores_for_aux_loss)
TB_MOE_ROW double moe_aux_score(const float *row, int e, int E, int normalise) {
    return normalise ? row[e] / moe_sigmoid_row_sum(row, E) : row[e];
}

// One token: s (E) its scores, idx, p, dp (k); counts (E) the choices per expert its aux loss
// counts, aux the loss's factor (0: none); dl (E) written.
TB_MOE_ROW void moe_router_row_backward(float *dl, const float *s, const int32_t *idx, const float *p, const float *dp,
                                        const int32_t *counts, double aux, int E, int k, int sigmoid,
                                        int pre_softmax) {
    float ds[TB_MOE_ROW_MAX_EXPERTS];  // the gradient at the (aux loss's) scores
    for (int e = 0; e < E; e++) ds[e] = (float)(aux * counts[e]);
    if (sigmoid) {
        // σ = s; the aux scores a = σ / Σσ (k > 1): dσ_f = (ds_f − ⟨ds, a⟩) / Σσ
        double dsig[TB_MOE_ROW_MAX_EXPERTS];
        if (k > 1) {
            const double sum = moe_sigmoid_row_sum(s, E);
            double da = 0;
            for (int e = 0; e < E; e++) da += (double)ds[e] * s[e] / sum;
            for (int e = 0; e < E; e++) dsig[e] = (ds[e] - da) / sum;
            // probs p_j = σ_j / Σ_chosen σ: dσ_j += (dp_j − ⟨dp, p⟩) / Σ_chosen σ
            double chosen = 0, pdp = 0;
            for (int j = 0; j < k; j++) chosen += s[idx[j]], pdp += (double)p[j] * dp[j];
            chosen += TB_MOE_SIGMOID_EPS;
            for (int j = 0; j < k; j++) dsig[idx[j]] += (dp[j] - pdp) / chosen;
        } else {
            for (int e = 0; e < E; e++) dsig[e] = ds[e];
            dsig[idx[0]] += dp[0];
        }
        for (int e = 0; e < E; e++) dl[e] = (float)(dsig[e] * s[e] * (1.0 - s[e]));  // σ' = σ(1 − σ)
        return;
    }
    // the probs' gradient at the scores under pre-softmax
    if (pre_softmax)
        for (int j = 0; j < k; j++) ds[idx[j]] += dp[j];
    // softmax backward over every expert: dl = s ⊙ (ds − ⟨s, ds⟩)
    double dot = 0;
    for (int e = 0; e < E; e++) dot += (double)s[e] * ds[e];
    for (int e = 0; e < E; e++) dl[e] = s[e] * (ds[e] - (float)dot);
    if (!pre_softmax) {
        // probs = softmax of the k chosen logits: dl[idx j] += p_j (dp_j − ⟨p, dp⟩)
        double pdp = 0;
        for (int j = 0; j < k; j++) pdp += (double)p[j] * dp[j];
        for (int j = 0; j < k; j++) dl[idx[j]] += p[j] * (dp[j] - (float)pdp);
    }
}

#endif
