// context_parallel.c — context parallelism's data movement on the host (kernels.h): the K/V
// rows out of qkv, their gradients back into dqkv, and the all-gathered rows between rank-major
// and position order. The CUDA twins: backend/cuda/context_parallel.cu.
#include <math.h>
#include <string.h>

#include "backend/cp_layout.h"
#include "backend/cpu/kernels.h"

void cpu_cp_pack_kv(float *kv, const float *qkv, int B, int Tq, int NH, int G, int hs) {
    const int QKV = (NH + 2 * G) * hs, KV = 2 * G * hs;
    for (size_t r = 0; r < (size_t)B * Tq; r++) memcpy(kv + r * KV, qkv + r * QKV + NH * hs, (size_t)KV * sizeof(float));
}

void cpu_cp_add_kv_grads(float *dqkv, const float *dkv, int B, int Tq, int NH, int G, int hs) {
    const int QKV = (NH + 2 * G) * hs, KV = 2 * G * hs;
    for (size_t r = 0; r < (size_t)B * Tq; r++) {
        float *d = dqkv + r * QKV + NH * hs;
        const float *m = dkv + r * KV;
        for (int e = 0; e < KV; e++) d[e] += m[e];
    }
}

// Gathered rank-major rows (cp, B, Tq, KV) ↔ the sequence in position order (B, T, KV).
static void rank_major_to_positions(float *seq, float *gathered, int cp_size, int B, int Tq, int KV,
                                    int to_positions) {
    const int T = Tq * cp_size;
    for (int r = 0; r < cp_size; r++)
        for (int b = 0; b < B; b++)
            for (int t = 0; t < Tq; t++) {
                float *s = seq + ((size_t)b * T + tb_cp_position(T, cp_size, r, t)) * KV;
                float *g = gathered + (((size_t)r * B + b) * Tq + t) * KV;
                if (to_positions) memcpy(s, g, (size_t)KV * sizeof(float));
                else memcpy(g, s, (size_t)KV * sizeof(float));
            }
}

void cpu_cp_rank_major_to_positions(float *seq, const float *gathered, int cp_size, int B, int Tq, int KV) {
    rank_major_to_positions(seq, (float *)gathered, cp_size, B, Tq, KV, 1);
}

void cpu_cp_positions_to_rank_major(float *gathered, const float *seq, int cp_size, int B, int Tq, int KV) {
    rank_major_to_positions((float *)seq, gathered, cp_size, B, Tq, KV, 0);
}

// Merges a block's partial attention (pout (B, rows, NH·hs), plse (B, NH, rows)) into out and
// lse (B, Tq rows, from row0) by the online-softmax rule: lse' = log(e^lse + e^plse), out' =
// out·e^(lse − lse') + pout·e^(plse − lse').
void cpu_cp_merge_partial(float *out, float *lse, const float *pout, const float *plse, int B, int NH, int Tq,
                          int row0, int rows, int hs) {
    const int C = NH * hs;
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int r = 0; r < rows; r++) {
                tb_cp_merge_row(out + ((size_t)b * Tq + row0 + r) * C + h * hs,
                                lse + ((size_t)b * NH + h) * Tq + row0 + r,
                                pout + ((size_t)b * rows + r) * C + h * hs, plse[((size_t)b * NH + h) * rows + r], hs);
            }
}
