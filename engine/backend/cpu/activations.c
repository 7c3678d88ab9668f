// activations.c — GELU, SwiGLU and the softmax cross-entropy, forward and backward, and the
// exponentials of the flash attention core's softmax (declared in kernels.h).
//
// This file alone is compiled with -ffast-math (CMakeLists.txt): that lets GCC call glibc's
// vector tanhf / expf (libmvec) and vectorise these loops, which otherwise cost more than
// the GEMMs around them. Every output row is computed by one thread from its own inputs, so
// results stay deterministic and independent of the thread count; they may differ from the
// scalar libm in the last bits, which the gradient checks bound. No code here relies on
// infinities or NaNs (fast-math assumes there are none).
#include <float.h>
#include <math.h>

#include "backend/cpu/kernels.h"

#define GELU_SCALE 0.7978845608028654f  // sqrt(2 / pi)

void cpu_gelu_forward(float *out, const float *inp, size_t n) {
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) {
        float x = inp[i];
        float cube = 0.044715f * x * x * x;
        out[i] = 0.5f * x * (1.0f + tanhf(GELU_SCALE * (x + cube)));
    }
}

void cpu_gelu_backward(float *dinp, const float *inp, const float *dout, size_t n) {
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) {
        float x = inp[i];
        float cube = 0.044715f * x * x * x;
        float tanh_out = tanhf(GELU_SCALE * (x + cube));
        float sech2 = 1.0f - tanh_out * tanh_out;
        float grad = 0.5f * (1.0f + tanh_out) +
                     x * 0.5f * sech2 * GELU_SCALE * (1.0f + 3.0f * 0.044715f * x * x);
        dinp[i] = grad * dout[i];
    }
}

void cpu_swiglu_forward(float *out, const float *inp, int N, int F) {
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float *gate = inp + (size_t)n * 2 * F, *up = gate + F;
        float *o = out + (size_t)n * F;
        for (int i = 0; i < F; i++) {
            float sig = 1.0f / (1.0f + expf(-gate[i]));
            o[i] = gate[i] * sig * up[i];
        }
    }
}

void cpu_swiglu_backward(float *dinp, const float *inp, const float *dout, int N, int F) {
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float *gate = inp + (size_t)n * 2 * F, *up = gate + F;
        const float *dy = dout + (size_t)n * F;
        float *dgate = dinp + (size_t)n * 2 * F, *dup = dgate + F;
        for (int i = 0; i < F; i++) {
            float g = gate[i];
            float sig = 1.0f / (1.0f + expf(-g));
            float silu = g * sig;
            dgate[i] = dy[i] * up[i] * sig * (1.0f + g * (1.0f - sig));
            dup[i] = dy[i] * silu;
        }
    }
}


// ---------------------------------------------------------------------------------------
// softmax cross-entropy over a vocabulary shard

// Real (unpadded) columns of this shard: [0, valid).
static int valid_columns(int Vl, int vocab_start, int V) {
    int valid = V - vocab_start;
    return valid < 0 ? 0 : valid > Vl ? Vl : valid;
}

void cpu_ce_row_max(const float *logits, float *rowmax, int N, int Vl, int vocab_start, int V) {
    const int valid = valid_columns(Vl, vocab_start, V);
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float *row = logits + (size_t)n * Vl;
        float m = -FLT_MAX;
        for (int i = 0; i < valid; i++) m = row[i] > m ? row[i] : m;
        rowmax[n] = m;
    }
}

void cpu_ce_target_logit(const float *logits, const float *max, float *target, const int32_t *targets, int N,
                         int Vl, int vocab_start) {
    for (int n = 0; n < N; n++) {
        int local = targets[n] - vocab_start;
        target[n] = local >= 0 && local < Vl ? logits[(size_t)n * Vl + local] - max[n] : 0.0f;
    }
}

void cpu_ce_exp_sum(float *logits, const float *max, float *sum, int N, int Vl, int vocab_start, int V) {
    const int valid = valid_columns(Vl, vocab_start, V);
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        float *row = logits + (size_t)n * Vl;
        const float m = max[n];
        float s = 0.0f;
        for (int i = 0; i < valid; i++) {
            row[i] = expf(row[i] - m);
            s += row[i];
        }
        for (int i = valid; i < Vl; i++) row[i] = 0.0f;
        sum[n] = s;
    }
}

void cpu_ce_normalize(float *probs, const float *sum, const float *target, float *losses, int N, int Vl) {
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        float *row = probs + (size_t)n * Vl;
        const float inv = 1.0f / sum[n];
        for (int i = 0; i < Vl; i++) row[i] *= inv;
        // -log softmax[target] = log Σ exp(x - max) - (x_target - max): finite for any logits
        losses[n] = logf(sum[n]) - target[n];
    }
}

void cpu_cross_entropy_backward(float *probs, const int32_t *targets, float dloss, int N, int Vl, int vocab_start) {
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        float *row = probs + (size_t)n * Vl;
        for (int i = 0; i < Vl; i++) row[i] *= dloss;  // padding columns hold 0 from forward
        int local = targets[n] - vocab_start;
        if (local >= 0 && local < Vl) row[local] -= dloss;
    }
}

float cpu_exp_shifted(float *x, int n, float shift) {
    float sum = 0.0f;
    for (int i = 0; i < n; i++) {
        x[i] = expf(x[i] - shift);
        sum += x[i];
    }
    return sum;
}
