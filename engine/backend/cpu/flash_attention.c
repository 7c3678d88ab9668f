// flash_attention.c — causal attention without the T×T matrix (FlashAttention-2's
// algorithm on the CPU): the forward walks key blocks with an online softmax (running row
// maximum and sum) and saves only each row's log-sum-exp; the backward recomputes each
// block's probabilities from it. Blocks above the diagonal are skipped, so the work is about
// half of the dense kernel's and the memory linear in T.
#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <string.h>

#include "backend/cpu/kernels.h"
#include "backend/flash_view.h"

// Rows of Q and of K/V per block: the S tile (BR × BC floats, 16 KiB) stays in L1/L2.
#define BR 64
#define BC 64

// Per thread: S and dP tiles, then the forward's O accumulator (BR × hs) and row maximum and
// sum (2 × BR), or the backward's D = rowsum(dO ⊙ O) over the whole sequence (T).
size_t cpu_flash_attention_scratch_floats(int T, int hs, int threads) {
    size_t tail = (size_t)BR * hs + 2 * BR;
    if ((size_t)T > tail) tail = (size_t)T;
    return (size_t)threads * (2 * (size_t)BR * BC + tail);
}

// S (nr × nc) = scale · Q[i0..] K[j0..]ᵀ.
static void scores(float *S, const float *q, int qs, const float *k, int ks, int i0, int nr, int j0, int nc, int hs,
                   float scale) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, nr, nc, hs, scale, q + (size_t)i0 * qs, qs,
                k + (size_t)j0 * ks, ks, 0.0f, S, BC);
}

// Where the queries, keys and values are (backend/flash_view.h).
typedef tb_flash_view flash_io;

static int qpos_of(const flash_io *io, int i) { return io->qpos ? io->qpos[i] : i; }

// The columns of a block's row at position `pos` that it may attend to: the first ones, up to
// the diagonal when causal (none when the whole row lies above it).
static int visible(int pos, int j0, int nc, int causal) {
    if (!causal || pos >= j0 + nc - 1) return nc;
    return pos >= j0 ? pos - j0 + 1 : 0;
}

// The furthest key a block of query rows may see: its largest position when causal.
static int last_key(const flash_io *io, int i0, int nr) {
    if (!io->causal) return io->Tk - 1;
    int last = 0;
    for (int r = 0; r < nr; r++) last = qpos_of(io, i0 + r) > last ? qpos_of(io, i0 + r) : last;
    return last;
}

static void flash_forward(const flash_io *io, float *out, float *lse, float *scratch, int threads, int B, int NH,
                          int G, int hs) {
    const int C = NH * hs, heads_per_group = NH / G, Tq = io->Tq, Tk = io->Tk, nblocks = (Tq + BR - 1) / BR;
    const float scale = 1.0f / sqrtf((float)hs);
    const size_t per_thread = cpu_flash_attention_scratch_floats(Tq > Tk ? Tq : Tk, hs, 1);  // D: Tq floats
#pragma omp parallel for collapse(3) schedule(dynamic) num_threads(threads)
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int ib = 0; ib < nblocks; ib++) {
                const int g = h / heads_per_group, i0 = ib * BR, nr = Tq - i0 < BR ? Tq - i0 : BR;
                const float *q = io->q + (size_t)b * io->qb + h * hs;
                const float *kvb = io->kv + (size_t)b * io->kb;
                const float *k = kvb + io->k_off + g * hs, *v = kvb + io->v_off + g * hs;
                float *S = scratch + (size_t)omp_get_thread_num() * per_thread, *O = S + 2 * BR * BC;
                float *m = O + (size_t)BR * hs, *l = m + BR;
                memset(O, 0, (size_t)nr * hs * sizeof(float));
                for (int r = 0; r < nr; r++) m[r] = -INFINITY, l[r] = 0.0f;
                const int last = last_key(io, i0, nr);  // causal: key blocks at or below the diagonal
                for (int j0 = 0; j0 <= last; j0 += BC) {
                    const int nc = Tk - j0 < BC ? Tk - j0 : BC;
                    scores(S, q, io->qs, k, io->ks, i0, nr, j0, nc, hs, scale);
                    for (int r = 0; r < nr; r++) {
                        float *s = S + (size_t)r * BC, mnew = m[r];
                        const int n = visible(qpos_of(io, i0 + r), j0, nc, io->causal);
                        for (int c = 0; c < n; c++) mnew = s[c] > mnew ? s[c] : mnew;
                        for (int c = n; c < nc; c++) s[c] = 0.0f;  // above the diagonal: no weight
                        if (n == 0) continue;                      // (m, l and O unchanged)
                        // rescale what the earlier blocks summed to the new maximum (the first
                        // block a row sees always holds its position 0: m is finite after it)
                        const float alpha = m[r] == -INFINITY ? 0.0f : expf(m[r] - mnew);
                        const float sum = cpu_exp_shifted(s, n, mnew);
                        l[r] = alpha * l[r] + sum;
                        m[r] = mnew;
                        float *o = O + (size_t)r * hs;
                        for (int e = 0; e < hs; e++) o[e] *= alpha;
                    }
                    // O += P V[j0..]
                    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, nr, hs, nc, 1.0f, S, BC,
                                v + (size_t)j0 * io->ks, io->ks, 1.0f, O, hs);
                }
                // every row sees at least its own position: l > 0
                float *L = lse + ((size_t)b * NH + h) * io->o_rows + i0;
                for (int r = 0; r < nr; r++) {
                    const float inv = 1.0f / l[r];
                    float *dst = out + ((size_t)b * io->o_rows + i0 + r) * C + h * hs;
                    for (int e = 0; e < hs; e++) dst[e] = O[(size_t)r * hs + e] * inv;
                    L[r] = m[r] + logf(l[r]);
                }
            }
}

// dq: the gradient at q, laid out as q (zeroed by the caller); dkv: at k and v, laid out as kv
// (zeroed by the caller; the same buffer as dq when kv is q's).
static void flash_backward(const flash_io *io, float *dq_base, float *dkv, float *scratch, int threads,
                           const float *dout, const float *out, const float *lse, int B, int NH, int G, int hs) {
    const int C = NH * hs, heads_per_group = NH / G, Tq = io->Tq, Tk = io->Tk;
    const float scale = 1.0f / sqrtf((float)hs);
    const size_t per_thread = cpu_flash_attention_scratch_floats(Tq > Tk ? Tq : Tk, hs, 1);  // D: Tq floats
    // one task per (batch, key/value group): the group's dK and dV accumulate over its heads
    // in a fixed order, so the result does not depend on the thread count
#pragma omp parallel for collapse(2) schedule(dynamic) num_threads(threads)
    for (int b = 0; b < B; b++)
        for (int g = 0; g < G; g++) {
            float *S = scratch + (size_t)omp_get_thread_num() * per_thread, *dP = S + BR * BC, *D = dP + BR * BC;
            const float *kvb = io->kv + (size_t)b * io->kb;
            const float *k = kvb + io->k_off + g * hs, *v = kvb + io->v_off + g * hs;
            float *dkvb = dkv + (size_t)b * io->kb;
            float *dk = dkvb + io->k_off + g * hs, *dv = dkvb + io->v_off + g * hs;
            for (int h = g * heads_per_group; h < (g + 1) * heads_per_group; h++) {
                const size_t ob = (size_t)io->o_rows * C;
                const float *q = io->q + (size_t)b * io->qb + h * hs, *dO = dout + (size_t)b * ob + h * hs;
                const float *O = out + (size_t)b * ob + h * hs, *L = lse + ((size_t)b * NH + h) * io->o_rows;
                float *dq = dq_base + (size_t)b * io->qb + h * hs;
                for (int t = 0; t < Tq; t++) {  // D = rowsum(dO ⊙ O): the softmax's Σ_j P dP
                    float d = 0.0f;
                    for (int e = 0; e < hs; e++) d += dO[(size_t)t * C + e] * O[(size_t)t * C + e];
                    D[t] = d;
                }
                for (int j0 = 0; j0 < Tk; j0 += BC) {
                    const int nc = Tk - j0 < BC ? Tk - j0 : BC;
                    for (int i0 = 0; i0 < Tq; i0 += BR) {
                        const int nr = Tq - i0 < BR ? Tq - i0 : BR;
                        if (last_key(io, i0, nr) < j0) continue;  // causal: every row above this key block
                        scores(S, q, io->qs, k, io->ks, i0, nr, j0, nc, hs, scale);
                        for (int r = 0; r < nr; r++) {  // P = exp(S − lse), recomputed
                            float *s = S + (size_t)r * BC;
                            const int n = visible(qpos_of(io, i0 + r), j0, nc, io->causal);
                            cpu_exp_shifted(s, n, L[i0 + r]);
                            for (int c = n; c < nc; c++) s[c] = 0.0f;
                        }
                        // dV[j0..] += Pᵀ dO[i0..]
                        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, nc, hs, nr, 1.0f, S, BC,
                                    dO + (size_t)i0 * C, C, 1.0f, dv + (size_t)j0 * io->ks, io->ks);
                        // dP = dO[i0..] V[j0..]ᵀ; dS = P ⊙ (dP − D), written over dP
                        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, nr, nc, hs, 1.0f, dO + (size_t)i0 * C, C,
                                    v + (size_t)j0 * io->ks, io->ks, 0.0f, dP, BC);
                        for (int r = 0; r < nr; r++)
                            for (int c = 0; c < nc; c++) {
                                float *ds = dP + (size_t)r * BC + c;
                                *ds = S[(size_t)r * BC + c] * (*ds - D[i0 + r]);
                            }
                        // dQ[i0..] += scale · dS K[j0..]; dK[j0..] += scale · dSᵀ Q[i0..]
                        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, nr, hs, nc, scale, dP, BC,
                                    k + (size_t)j0 * io->ks, io->ks, 1.0f, dq + (size_t)i0 * io->qs, io->qs);
                        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, nc, hs, nr, scale, dP, BC,
                                    q + (size_t)i0 * io->qs, io->qs, 1.0f, dk + (size_t)j0 * io->ks, io->ks);
                    }
                }
            }
        }
}

void cpu_flash_attention_forward_masked(float *out, float *lse, float *scratch, int threads, const float *qkv, int B,
                                        int T, int NH, int G, int hs, int causal) {
    flash_io io = tb_flash_view_fused(qkv, T, NH, G, hs, causal);
    flash_forward(&io, out, lse, scratch, threads, B, NH, G, hs);
}

void cpu_flash_attention_backward_masked(float *dqkv, float *scratch, int threads, const float *dout,
                                         const float *out, const float *qkv, const float *lse, int B, int T, int NH,
                                         int G, int hs, int causal) {
    memset(dqkv, 0, (size_t)B * T * (NH + 2 * G) * hs * sizeof(float));
    flash_io io = tb_flash_view_fused(qkv, T, NH, G, hs, causal);
    flash_backward(&io, dqkv, dqkv, scratch, threads, dout, out, lse, B, NH, G, hs);
}

// The dispatch's (causal) flash attention.
void cpu_flash_attention_forward(float *out, float *lse, float *scratch, int threads, const float *qkv, int B, int T,
                                 int NH, int G, int hs) {
    cpu_flash_attention_forward_masked(out, lse, scratch, threads, qkv, B, T, NH, G, hs, 1);
}

void cpu_flash_attention_backward(float *dqkv, float *scratch, int threads, const float *dout, const float *out,
                                  const float *qkv, const float *lse, int B, int T, int NH, int G, int hs) {
    cpu_flash_attention_backward_masked(dqkv, scratch, threads, dout, out, qkv, lse, B, T, NH, G, hs, 1);
}

void cpu_flash_attention_cp_forward(float *out, float *lse, float *scratch, int threads, const float *qkv,
                                    const int32_t *qpos, const float *kv, int B, int Tq, int Tk, int NH, int G,
                                    int hs) {
    flash_io io = tb_flash_view_cp(qkv, qpos, kv, Tq, Tk, NH, G, hs);
    flash_forward(&io, out, lse, scratch, threads, B, NH, G, hs);
}

void cpu_flash_attention_cp_backward(float *dqkv, float *dkv, float *scratch, int threads, const float *dout,
                                     const float *out, const float *qkv, const int32_t *qpos, const float *kv,
                                     const float *lse, int B, int Tq, int Tk, int NH, int G, int hs) {
    memset(dqkv, 0, (size_t)B * Tq * (NH + 2 * G) * hs * sizeof(float));
    memset(dkv, 0, (size_t)B * Tk * 2 * G * hs * sizeof(float));
    flash_io io = tb_flash_view_cp(qkv, qpos, kv, Tq, Tk, NH, G, hs);
    flash_backward(&io, dqkv, dkv, scratch, threads, dout, out, lse, B, NH, G, hs);
}

static flash_io block(const cpu_flash_block *blk, int NH, int G, int hs) {
    return tb_flash_view_block(blk->qkv, blk->q_batch_stride, blk->kv, blk->kv_batch_stride, blk->Tq, blk->Tk,
                               blk->out_rows, blk->causal, NH, G, hs);
}

void cpu_flash_attention_block_forward(float *out, float *lse, float *scratch, int threads, const cpu_flash_block *blk,
                                       int B, int NH, int G, int hs) {
    flash_io io = block(blk, NH, G, hs);
    flash_forward(&io, out, lse, scratch, threads, B, NH, G, hs);
}

void cpu_flash_attention_block_backward(float *dq, float *dkv, float *scratch, int threads, const float *dout,
                                        const float *out, const float *lse, const cpu_flash_block *blk, int B, int NH,
                                        int G, int hs) {
    flash_io io = block(blk, NH, G, hs);
    flash_backward(&io, dq, dkv, scratch, threads, dout, out, lse, B, NH, G, hs);
}
