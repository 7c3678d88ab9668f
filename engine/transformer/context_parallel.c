// context_parallel.c — the zig-zag positions and attention over the whole sequence's K and V,
// all-gathered or passed around the ring (context_parallel.h).
#include "transformer/context_parallel.h"

#include <math.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/cp_layout.h"
#include "backend/cpu/kernels.h"
#include "comm/comm.h"
#include "runtime/ranges.h"

void cp_local_positions(int T, int cp, int rank, int32_t *pos) {
    for (int t = 0; t < T / cp; t++) pos[t] = tb_cp_position(T, cp, rank, t);
}

// The all-gather exchange runs on the rank's backend (tb_be(): every buffer a tensor of it).
static const float *gather_kv(tb_group *cp, float *kv_scratch, const float *qkv, int B, int Tq, int NH, int G,
                              int hs) {
    const tb_backend *be = tb_be();
    const size_t KV = 2 * (size_t)G * hs, local = (size_t)B * Tq * KV, whole = local * cp->size;
    float *mine = kv_scratch, *gathered = kv_scratch + whole, *seq = kv_scratch + 2 * whole;
    be->cp_pack_kv(mine, qkv, B, Tq, NH, G, hs);
    TB_RANGE_PUSH("cp.all_gather_kv");
    tb_all_gather(cp, mine, gathered, local);
    TB_RANGE_POP();
    be->cp_rank_major_to_positions(seq, gathered, cp->size, B, Tq, (int)KV);
    return seq;
}

void cp_attention_forward(tb_group *cp, const int32_t *pos, float *out, float *lse, float *scratch, int threads,
                          float *kv_scratch, const float *qkv, int B, int Tq, int NH, int G, int hs) {
    const float *kv = gather_kv(cp, kv_scratch, qkv, B, Tq, NH, G, hs);
    tb_be()->flash_attention_cp_forward(out, lse, scratch, threads, qkv, pos, kv, B, Tq, Tq * cp->size, NH, G, hs);
}

void cp_attention_backward(tb_group *cp, const int32_t *pos, float *dqkv, float *scratch, int threads,
                           float *kv_scratch, const float *dout, const float *out, const float *qkv, const float *lse,
                           int B, int Tq, int NH, int G, int hs) {
    const tb_backend *be = tb_be();
    const int T = Tq * cp->size, KV = 2 * G * hs;
    const size_t local = (size_t)B * Tq * KV, whole = local * cp->size;
    // the sequence's K and V again (not kept from the forward: memory stays ∝ T/cp)
    const float *kv = gather_kv(cp, kv_scratch, qkv, B, Tq, NH, G, hs);
    // dkv over the sequence goes where the forward's gathered rows were, then rank-major, then
    // reduce-scattered: this rank's rows summed over every rank's queries
    float *dkv_seq = kv_scratch, *rank_major = kv_scratch + whole;
    float *mine = kv_scratch + 2 * whole;  // (kv itself lies here: read before it is overwritten)
    be->flash_attention_cp_backward(dqkv, dkv_seq, scratch, threads, dout, out, qkv, pos, kv, lse, B, Tq, T, NH, G,
                                    hs);
    be->cp_positions_to_rank_major(rank_major, dkv_seq, cp->size, B, Tq, KV);
    TB_RANGE_PUSH("cp.reduce_scatter_dkv");
    tb_reduce_scatter(cp, rank_major, mine, local);
    TB_RANGE_POP();
    be->cp_add_kv_grads(dqkv, mine, B, Tq, NH, G, hs);
}

// --- the ring (cp_comm_type p2p) ---------------------------------------------------------
// Through the backend's table like the all-gather exchange; each step's messages are one batch
// (tb_batch_send_recv: a send to the next rank and a recv from the previous, Megatron's
// ring send_recv), so that the ring also runs where sends are rendezvous (NCCL): a rank's
// send completes only once its peer receives, and every rank sending first would wait on the
// whole ring.

size_t cp_attention_workspace_floats(int ring, int B, int Tq, int cp_size, int NH, int G, int hs) {
    const size_t local = (size_t)B * Tq * 2 * G * hs;
    if (!ring) return 3 * local * cp_size;  // this rank's K/V, the gathered rows, the sequence
    // K/V held and arriving, their gradients held and arriving; one block's out and lse
    return 4 * local + (size_t)B * Tq * NH * hs + (size_t)B * NH * Tq;
}

// What this rank's queries (both chunks: local rows 0..S-1 at chunk `me`, S..2S-1 at chunk
// 2·cp−1−me) attend to in the K/V chunk pair of cp rank `owner` (chunks owner and
// 2·cp−1−owner), Megatron-Core's rule per chunk pair:
//   owner == me  every pair on or below the diagonal: causal by local row, all 2S rows each
//   owner <  me  both query chunks see the owner's first chunk whole (it lies before both);
//                the owner's second chunk lies after them both (skipped)
//   owner >  me  the second query chunk sees both of the owner's chunks whole; the first
//                query chunk lies before them both (skipped)
// q_row0: the first local query row of the block.
typedef struct ring_block {
    cpu_flash_block blk;
    int q_row0;
} ring_block;

static ring_block ring_step_block(const float *qkv, const float *kv, int owner, int me, int Tq, int QKV, int KV) {
    const int S = Tq / 2;
    ring_block r = {{qkv, (size_t)Tq * QKV, kv, (size_t)Tq * KV, Tq, Tq, Tq, 1}, 0};
    if (owner < me) {
        r.blk.Tk = S, r.blk.causal = 0;
    } else if (owner > me) {
        r.blk.qkv = qkv + (size_t)S * QKV, r.blk.Tq = S, r.blk.causal = 0;
        r.q_row0 = S;
    }
    return r;
}

// One step's exchange on the cp group, under its range: `give` to the next rank, the previous
// rank's into `arriving`, as one batch.
static void ring_exchange(tb_group *cp, const char *range, float *give, float *arriving, size_t count, int next,
                          int prev) {
    TB_RANGE_PUSH("%s", range);
    const tb_p2p_op ops[2] = {{TB_COMM_SEND, cp, give, count, next, -1}, {TB_COMM_RECV, cp, arriving, count, prev, -1}};
    tb_batch_send_recv(ops, 2);
    TB_RANGE_POP();
}

static void swap_buffers(float **a, float **b) {
    float *t = *a;
    *a = *b, *b = t;
}

void cp_ring_attention_forward(tb_group *cp, float *out, float *lse, float *scratch, int threads, float *ws,
                               const float *qkv, int B, int Tq, int NH, int G, int hs) {
    const tb_backend *be = tb_be();
    const int P = cp->size, me = cp->index, next = (me + 1) % P, prev = (me + P - 1) % P;
    const int QKV = (NH + 2 * G) * hs, KV = 2 * G * hs;
    const size_t local = (size_t)B * Tq * KV;
    float *held = ws, *arriving = ws + local, *pout = ws + 4 * local, *plse = pout + (size_t)B * Tq * NH * hs;
    be->cp_pack_kv(held, qkv, B, Tq, NH, G, hs);
    for (int s = 0; s < P; s++) {
        const int owner = (me - s + P) % P;
        // the held chunk pair on to the next rank, the previous rank's in (for the next step)
        if (s + 1 < P) ring_exchange(cp, "cp.ring.exchange_kv", held, arriving, local, next, prev);
        ring_block r = ring_step_block(qkv, held, owner, me, Tq, QKV, KV);
        if (s == 0) {  // the diagonal block starts out and lse
            be->flash_attention_block_forward(out, lse, scratch, threads, &r.blk, B, NH, G, hs);
        } else {
            r.blk.out_rows = r.blk.Tq;
            be->flash_attention_block_forward(pout, plse, scratch, threads, &r.blk, B, NH, G, hs);
            be->cp_merge_partial(out, lse, pout, plse, B, NH, Tq, r.q_row0, r.blk.Tq, hs);
        }
        if (s + 1 < P) swap_buffers(&held, &arriving);
    }
}

void cp_ring_attention_backward(tb_group *cp, float *dqkv, float *scratch, int threads, float *ws, const float *dout,
                                const float *out, const float *qkv, const float *lse, int B, int Tq, int NH, int G,
                                int hs) {
    const tb_backend *be = tb_be();
    const int P = cp->size, me = cp->index, next = (me + 1) % P, prev = (me + P - 1) % P;
    const int QKV = (NH + 2 * G) * hs, KV = 2 * G * hs, C = NH * hs;
    const size_t local = (size_t)B * Tq * KV;
    float *held = ws, *arriving = ws + local, *dheld = ws + 2 * local, *darriving = ws + 3 * local;
    be->zero(dqkv, (size_t)B * Tq * QKV * sizeof(float));
    be->cp_pack_kv(held, qkv, B, Tq, NH, G, hs);  // the forward's chunks again (not kept: memory stays ∝ T/cp)
    be->zero(dheld, local * sizeof(float));
    for (int s = 0; s < P; s++) {
        const int owner = (me - s + P) % P;
        if (s + 1 < P) ring_exchange(cp, "cp.ring.exchange_kv", held, arriving, local, next, prev);
        // with the merged out and lse, this block's share of dq (into dqkv's Q part) and of
        // the owner's dK/dV (into the gradients that travel with its chunks)
        ring_block r = ring_step_block(qkv, held, owner, me, Tq, QKV, KV);
        const size_t q0 = (size_t)r.q_row0;
        be->flash_attention_block_backward(dqkv + q0 * QKV, dheld, scratch, threads, dout + q0 * C, out + q0 * C,
                                           lse + q0, &r.blk, B, NH, G, hs);
        // the owner's dK/dV, summed over the ranks it has passed, go on with it; after the
        // last step they reach the owner itself
        ring_exchange(cp, "cp.ring.exchange_dkv", dheld, darriving, local, next, prev);
        if (s + 1 < P) swap_buffers(&held, &arriving);
        swap_buffers(&dheld, &darriving);
    }
    // dheld: every cp rank's queries' gradients at this rank's keys and values
    be->cp_add_kv_grads(dqkv, dheld, B, Tq, NH, G, hs);
}
