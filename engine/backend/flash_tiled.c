// flash_tiled.c — see flash_tiled.h. One thread, loops in the kernels' order; each comment
// names the kernel step it stands for (backend/cuda/attention_tc.cu).
#include "backend/flash_tiled.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/xalloc.h"

float tb_round_bf16(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return x;  // NaN
    u += 0x7fffu + ((u >> 16) & 1u);
    u &= 0xffff0000u;
    memcpy(&x, &u, 4);
    return x;
}

enum { TQ = TB_FLASH_TILE_Q, TK = TB_FLASH_TILE_K };

typedef float (*rounding)(float);
static float exact(float x) { return x; }

static int qpos_of(const tb_flash_view *v, int i) { return v->qpos ? v->qpos[i] : i; }
static int visible(const tb_flash_view *v, int i, int j) { return !v->causal || j <= qpos_of(v, i); }

// The last key a query block [i0, i0 + nr) sees: the largest position among its rows (causal).
static int block_last_key(const tb_flash_view *v, int i0, int nr) {
    if (!v->causal) return v->Tk - 1;
    int last = -1;
    for (int r = 0; r < nr; r++) last = qpos_of(v, i0 + r) > last ? qpos_of(v, i0 + r) : last;
    return last < v->Tk - 1 ? last : v->Tk - 1;
}

static const float *q_row(const tb_flash_view *v, int b, int i, int h, int hs) {
    return v->q + (size_t)b * v->qb + (size_t)i * v->qs + (size_t)h * hs;
}
static size_t k_at(const tb_flash_view *v, int b, int j, int g, int hs) {
    return (size_t)b * v->kb + (size_t)j * v->ks + v->k_off + (size_t)g * hs;
}
static size_t v_at(const tb_flash_view *v, int b, int j, int g, int hs) {
    return (size_t)b * v->kb + (size_t)j * v->ks + v->v_off + (size_t)g * hs;
}

// A tile's rows rounded to bf16 into shared memory (the kernels' fp32 → bf16 staging).
static void stage(float *dst, const float *base, size_t first, size_t stride, int rows, int hs, rounding rnd) {
    for (int r = 0; r < rows; r++)
        for (int d = 0; d < hs; d++) dst[(size_t)r * hs + d] = rnd(base[first + (size_t)r * stride + d]);
}

// An MMA's dot product: bf16 operands (already rounded), fp32 accumulation.
static float dot(const float *a, const float *b, int hs) {
    float s = 0.0f;
    for (int d = 0; d < hs; d++) s += a[d] * b[d];
    return s;
}

void tb_flash_tiled_forward(float *out, float *lse, const tb_flash_view *v, int B, int NH, int G, int hs,
                            int bf16) {
    const rounding rnd = bf16 ? tb_round_bf16 : exact;
    const int hpg = NH / G, C = NH * hs;
    const float scale = 1.0f / sqrtf((float)hs);
    float *qs = tb_xmalloc((size_t)TQ * hs * sizeof(float), "tiled flash: Q tile");
    float *ks = tb_xmalloc((size_t)TK * hs * sizeof(float), "tiled flash: K tile");
    float *vs = tb_xmalloc((size_t)TK * hs * sizeof(float), "tiled flash: V tile");
    float *O = tb_xmalloc((size_t)TQ * hs * sizeof(float), "tiled flash: O accumulator");
    float m[TQ], l[TQ], s[TK];
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int i0 = 0; i0 < v->Tq; i0 += TQ) {
                const int g = h / hpg, nr = v->Tq - i0 < TQ ? v->Tq - i0 : TQ;
                for (int r = 0; r < nr; r++) {  // the block's Q rows, its statistics and O
                    const float *q = q_row(v, b, i0 + r, h, hs);
                    for (int d = 0; d < hs; d++) qs[(size_t)r * hs + d] = rnd(q[d]);
                    m[r] = -INFINITY, l[r] = 0.0f;
                }
                memset(O, 0, (size_t)nr * hs * sizeof(float));
                const int last = block_last_key(v, i0, nr);
                for (int j0 = 0; j0 <= last; j0 += TK) {  // key tiles in order
                    const int nc = v->Tk - j0 < TK ? v->Tk - j0 : TK;
                    stage(ks, v->kv, k_at(v, b, j0, g, hs), (size_t)v->ks, nc, hs, rnd);
                    stage(vs, v->kv, v_at(v, b, j0, g, hs), (size_t)v->ks, nc, hs, rnd);
                    for (int r = 0; r < nr; r++) {  // a warp's 16 rows each (S = Q Kᵀ, then the row's softmax)
                        float mx = -INFINITY;
                        for (int c = 0; c < nc; c++) {
                            s[c] = visible(v, i0 + r, j0 + c) ? dot(qs + (size_t)r * hs, ks + (size_t)c * hs, hs) * scale
                                                              : -INFINITY;
                            mx = s[c] > mx ? s[c] : mx;
                        }
                        const float m_new = m[r] > mx ? m[r] : mx;
                        if (m_new == -INFINITY) continue;  // nothing visible yet: m, l, O unchanged
                        const float corr = expf(m[r] - m_new);
                        float rowsum = 0.0f;
                        for (int c = 0; c < nc; c++) {
                            s[c] = s[c] == -INFINITY ? 0.0f : expf(s[c] - m_new);  // P, fp32
                            rowsum += s[c];
                        }
                        l[r] = l[r] * corr + rowsum;
                        float *o = O + (size_t)r * hs;  // O = O·corr + P V (P rounded to bf16 for the MMA)
                        for (int d = 0; d < hs; d++) {
                            float pv = 0.0f;
                            for (int c = 0; c < nc; c++) pv += rnd(s[c]) * vs[(size_t)c * hs + d];
                            o[d] = o[d] * corr + pv;
                        }
                        m[r] = m_new;
                    }
                }
                for (int r = 0; r < nr; r++) {
                    float *o = out + ((size_t)b * v->o_rows + i0 + r) * C + (size_t)h * hs;
                    for (int d = 0; d < hs; d++) o[d] = O[(size_t)r * hs + d] / l[r];
                    lse[((size_t)b * NH + h) * v->o_rows + i0 + r] = m[r] + logf(l[r]);
                }
            }
    free(qs), free(ks), free(vs), free(O);
}

// The recomputed probability of query row i (its bf16 Q row qr) for key c of a staged tile:
// exp(scale · q·k − lse_i), 0 where the key is not visible.
static float prob(const tb_flash_view *v, int i, int j, const float *qr, const float *kr, int hs, float scale,
                  float lse_i) {
    return visible(v, i, j) ? expf(dot(qr, kr, hs) * scale - lse_i) : 0.0f;
}

void tb_flash_tiled_backward(float *dq_base, float *dkv, float *D, const float *dout, const float *out,
                             const float *lse, const tb_flash_view *v, int B, int NH, int G, int hs, int bf16) {
    const rounding rnd = bf16 ? tb_round_bf16 : exact;
    const int hpg = NH / G, C = NH * hs, Tq = v->Tq, Tk = v->Tk;
    const float scale = 1.0f / sqrtf((float)hs);
    // D_i = dO_i · O_i (the preprocessing kernel), fp32
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int i = 0; i < Tq; i++) {
                const size_t at = ((size_t)b * v->o_rows + i) * C + (size_t)h * hs;
                D[((size_t)b * NH + h) * Tq + i] = dot(dout + at, out + at, hs);
            }
    float *qs = tb_xmalloc((size_t)TQ * hs * sizeof(float), "tiled flash: Q tile");
    float *dos = tb_xmalloc((size_t)TQ * hs * sizeof(float), "tiled flash: dO tile");
    float *ks = tb_xmalloc((size_t)TK * hs * sizeof(float), "tiled flash: K tile");
    float *vs = tb_xmalloc((size_t)TK * hs * sizeof(float), "tiled flash: V tile");
    float *acc = tb_xmalloc((size_t)2 * TK * hs * sizeof(float), "tiled flash: dK, dV / dQ accumulators");
    // dK, dV per (sample, group, key tile): the tile's accumulators, every head of the group
    // and every query block that sees the tile
    for (int b = 0; b < B; b++)
        for (int g = 0; g < G; g++)
            for (int j0 = 0; j0 < Tk; j0 += TK) {
                const int nc = Tk - j0 < TK ? Tk - j0 : TK;
                float *dK = acc, *dV = acc + (size_t)TK * hs;
                memset(acc, 0, (size_t)2 * TK * hs * sizeof(float));
                stage(ks, v->kv, k_at(v, b, j0, g, hs), (size_t)v->ks, nc, hs, rnd);
                stage(vs, v->kv, v_at(v, b, j0, g, hs), (size_t)v->ks, nc, hs, rnd);
                for (int h = g * hpg; h < (g + 1) * hpg; h++)
                    for (int i0 = 0; i0 < Tq; i0 += TQ) {
                        const int nr = Tq - i0 < TQ ? Tq - i0 : TQ;
                        if (block_last_key(v, i0, nr) < j0) continue;  // no row of the block sees the tile
                        for (int r = 0; r < nr; r++) {
                            stage(qs + (size_t)r * hs, q_row(v, b, i0 + r, h, hs), 0, 0, 1, hs, rnd);
                            stage(dos + (size_t)r * hs, dout, ((size_t)b * v->o_rows + i0 + r) * C + (size_t)h * hs, 0,
                                  1, hs, rnd);
                        }
                        const float *L = lse + ((size_t)b * NH + h) * v->o_rows + i0;
                        const float *Di = D + ((size_t)b * NH + h) * Tq + i0;
                        for (int c = 0; c < nc; c++)  // a warp's 16 keys each: rows of Pᵀ and dSᵀ
                            for (int r = 0; r < nr; r++) {
                                const float *qr = qs + (size_t)r * hs, *dor = dos + (size_t)r * hs;
                                const float p = prob(v, i0 + r, j0 + c, qr, ks + (size_t)c * hs, hs, scale, L[r]);
                                if (p == 0.0f) continue;
                                const float pb = rnd(p);
                                const float ds = rnd(p * (dot(vs + (size_t)c * hs, dor, hs) - Di[r]) * scale);
                                for (int d = 0; d < hs; d++) {
                                    dV[(size_t)c * hs + d] += pb * dor[d];
                                    dK[(size_t)c * hs + d] += ds * qr[d];
                                }
                            }
                    }
                for (int c = 0; c < nc; c++)
                    for (int d = 0; d < hs; d++) {
                        dkv[k_at(v, b, j0 + c, g, hs) + d] += dK[(size_t)c * hs + d];
                        dkv[v_at(v, b, j0 + c, g, hs) + d] += dV[(size_t)c * hs + d];
                    }
            }
    // dQ per (sample, head, query block): key tiles in order, the block's accumulator
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int i0 = 0; i0 < Tq; i0 += TQ) {
                const int g = h / hpg, nr = Tq - i0 < TQ ? Tq - i0 : TQ;
                float *dQ = acc;
                memset(dQ, 0, (size_t)TQ * hs * sizeof(float));
                for (int r = 0; r < nr; r++) {
                    stage(qs + (size_t)r * hs, q_row(v, b, i0 + r, h, hs), 0, 0, 1, hs, rnd);
                    stage(dos + (size_t)r * hs, dout, ((size_t)b * v->o_rows + i0 + r) * C + (size_t)h * hs, 0, 1, hs, rnd);
                }
                const float *L = lse + ((size_t)b * NH + h) * v->o_rows + i0;
                const float *Di = D + ((size_t)b * NH + h) * Tq + i0;
                const int last = block_last_key(v, i0, nr);
                for (int j0 = 0; j0 <= last; j0 += TK) {
                    const int nc = Tk - j0 < TK ? Tk - j0 : TK;
                    stage(ks, v->kv, k_at(v, b, j0, g, hs), (size_t)v->ks, nc, hs, rnd);
                    stage(vs, v->kv, v_at(v, b, j0, g, hs), (size_t)v->ks, nc, hs, rnd);
                    for (int r = 0; r < nr; r++) {  // a warp's 16 rows each: dS, then dQ += dS K
                        const float *qr = qs + (size_t)r * hs, *dor = dos + (size_t)r * hs;
                        for (int c = 0; c < nc; c++) {
                            const float p = prob(v, i0 + r, j0 + c, qr, ks + (size_t)c * hs, hs, scale, L[r]);
                            if (p == 0.0f) continue;
                            const float ds = rnd(p * (dot(dor, vs + (size_t)c * hs, hs) - Di[r]) * scale);
                            for (int d = 0; d < hs; d++) dQ[(size_t)r * hs + d] += ds * ks[(size_t)c * hs + d];
                        }
                    }
                }
                for (int r = 0; r < nr; r++) {
                    float *dq = dq_base + (size_t)b * v->qb + (size_t)(i0 + r) * v->qs + (size_t)h * hs;
                    for (int d = 0; d < hs; d++) dq[d] += dQ[(size_t)r * hs + d];
                }
            }
    free(qs), free(dos), free(ks), free(vs), free(acc);
}
