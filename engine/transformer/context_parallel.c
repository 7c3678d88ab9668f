// context_parallel.c — the zig-zag positions and attention over the whole sequence's K and V
// (context_parallel.h).
#include "transformer/context_parallel.h"

#include <stdlib.h>
#include <string.h>

#include "backend/cpu/kernels.h"
#include "comm/comm.h"
#include "core/ranges.h"
#include "core/xalloc.h"

void cp_local_positions(int T, int cp, int rank, int32_t *pos) {
    const int S = T / (2 * cp);  // the chunk
    for (int t = 0; t < S; t++) {
        pos[t] = rank * S + t;
        pos[S + t] = (2 * cp - 1 - rank) * S + t;
    }
}

// The K and V rows of the local qkv, (B, Tq, 2·G·hs).
static void pack_kv(float *kv, const float *qkv, int B, int Tq, int NH, int G, int hs) {
    const int QKV = (NH + 2 * G) * hs, KV = 2 * G * hs;
    for (size_t r = 0; r < (size_t)B * Tq; r++) memcpy(kv + r * KV, qkv + r * QKV + NH * hs, (size_t)KV * sizeof(float));
}

// Gathered rank-major rows (cp, B, Tq, KV) ↔ the sequence in position order (B, T, KV).
static void rank_major_to_positions(float *seq, const float *gathered, int cp_size, int B, int Tq, int KV,
                                    int to_positions) {
    const int T = Tq * cp_size;
    int32_t *pos = tb_xcalloc((size_t)Tq, sizeof *pos, "context-parallel positions");
    for (int r = 0; r < cp_size; r++) {
        cp_local_positions(T, cp_size, r, pos);
        for (int b = 0; b < B; b++)
            for (int t = 0; t < Tq; t++) {
                float *s = seq + ((size_t)b * T + pos[t]) * KV;
                float *g = (float *)gathered + (((size_t)r * B + b) * Tq + t) * KV;
                if (to_positions) memcpy(s, g, (size_t)KV * sizeof(float));
                else memcpy(g, s, (size_t)KV * sizeof(float));
            }
    }
    free(pos);
}

static const float *gather_kv(tb_group *cp, float *kv_scratch, const float *qkv, int B, int Tq, int NH, int G,
                              int hs) {
    const size_t KV = 2 * (size_t)G * hs, local = (size_t)B * Tq * KV, whole = local * cp->size;
    float *mine = kv_scratch, *gathered = kv_scratch + whole, *seq = kv_scratch + 2 * whole;
    pack_kv(mine, qkv, B, Tq, NH, G, hs);
    TB_RANGE_PUSH("cp.all_gather_kv");
    tb_all_gather(cp, mine, gathered, local);
    TB_RANGE_POP();
    rank_major_to_positions(seq, gathered, cp->size, B, Tq, (int)KV, 1);
    return seq;
}

void cp_attention_forward(tb_group *cp, const int32_t *pos, float *out, float *lse, float *scratch, int threads,
                          float *kv_scratch, const float *qkv, int B, int Tq, int NH, int G, int hs) {
    const float *kv = gather_kv(cp, kv_scratch, qkv, B, Tq, NH, G, hs);
    cpu_flash_attention_cp_forward(out, lse, scratch, threads, qkv, pos, kv, B, Tq, Tq * cp->size, NH, G, hs);
}

void cp_attention_backward(tb_group *cp, const int32_t *pos, float *dqkv, float *scratch, int threads,
                           float *kv_scratch, const float *dout, const float *out, const float *qkv, const float *lse,
                           int B, int Tq, int NH, int G, int hs) {
    const int T = Tq * cp->size, QKV = (NH + 2 * G) * hs, KV = 2 * G * hs;
    const size_t local = (size_t)B * Tq * KV, whole = local * cp->size;
    // the sequence's K and V again (not kept from the forward: memory stays ∝ T/cp)
    const float *kv = gather_kv(cp, kv_scratch, qkv, B, Tq, NH, G, hs);
    // dkv over the sequence goes where the forward's gathered rows were, then rank-major, then
    // reduce-scattered: this rank's rows summed over every rank's queries
    float *dkv_seq = kv_scratch, *rank_major = kv_scratch + whole;
    float *mine = kv_scratch + 2 * whole;  // (kv itself lies here: read before it is overwritten)
    cpu_flash_attention_cp_backward(dqkv, dkv_seq, scratch, threads, dout, out, qkv, pos, kv, lse, B, Tq, T, NH, G,
                                    hs);
    rank_major_to_positions(dkv_seq, rank_major, cp->size, B, Tq, KV, 0);
    TB_RANGE_PUSH("cp.reduce_scatter_dkv");
    tb_reduce_scatter(cp, rank_major, mine, local);
    TB_RANGE_POP();
    for (size_t r = 0; r < (size_t)B * Tq; r++) {
        float *d = dqkv + r * QKV + NH * hs;
        const float *m = mine + r * KV;
        for (int e = 0; e < KV; e++) d[e] += m[e];
    }
}
