// Pipeline schedule properties (engine/pipeline_parallel/schedules.c, the executor in
// training.c), checked against Megatron-Core:
//   - the 1F1B and interleaved 1F1B op orders, written out by hand for small cases from
//     Megatron's get_pp_rank_microbatches / get_schedule_table / get_model_chunk_id
//     (megatron/core/pipeline_parallel/schedules.py), and compared for many shapes with a
//     reference model that builds Megatron's schedule table literally and pops backward
//     microbatches first-in first-out per model chunk, as its input_tensors lists do;
//   - every (microbatch, chunk) runs forward once and backward once, backward after forward;
//   - the point-to-point messages of neighbouring stages match in order (activations and
//     gradients, rank p−1 chunk c feeding rank 0 chunk c+1), and an execution with eager
//     sends completes with every received message the one the receiving op expects;
//   - the theoretical bubble fraction;
//   - pretrain_gpt's traces show each rank running exactly its schedule.
// The pipeline rules of config.c are test_pipeline_rules.c's.
#include <dirent.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config/config.h"
#include "pipeline_parallel/schedules.h"
#include "tb_run_dir.h"
#include "tb_test.h"

#define MAX_OPS 4096

// ---------------------------------------------------------------------------------------
// Helpers

// "F0 F1 B0 ..." (with_chunk 0) or "F0.0 F1.0 B0.1 ..." (with_chunk 1).
static void format_ops(const pp_op *ops, int n, int with_chunk, char *buf, size_t len) {
    size_t used = 0;
    buf[0] = '\0';
    for (int i = 0; i < n && used < len; i++) {
        if (with_chunk)
            used += (size_t)snprintf(buf + used, len - used, "%s%c%d.%d", i ? " " : "", ops[i].kind,
                                     ops[i].microbatch, ops[i].chunk);
        else
            used += (size_t)snprintf(buf + used, len - used, "%s%c%d", i ? " " : "", ops[i].kind, ops[i].microbatch);
    }
}

// pipeline_schedule(p, r, m, v) formatted; returns the op count.
static int schedule_string(int p, int r, int m, int v, int with_chunk, char *buf, size_t len) {
    static pp_op ops[MAX_OPS];
    int n = pipeline_schedule(p, r, m, v, ops);
    format_ops(ops, n, with_chunk, buf, len);
    return n;
}

#define EXPECT_SCHEDULE(p, r, m, v, with_chunk, expected)                                              \
    do {                                                                                               \
        char got_[8192];                                                                               \
        schedule_string((p), (r), (m), (v), (with_chunk), got_, sizeof got_);                          \
        TB_CHECK(strcmp(got_, (expected)) == 0, "p=%d r=%d m=%d v=%d:\n      expected %s\n      got      %s", \
                 (p), (r), (m), (v), (expected), got_);                                                \
    } while (0)

// Megatron's schedule for rank r, built the way schedules.py builds it (microbatch group
// size g = p, Megatron's default microbatch_group_size_per_vp_stage):
//   pp = 1                      forward_backward_no_pipelining: F0 B0 F1 B1 ...
//   v = 1                       forward_backward_pipelining_without_interleaving
//   v > 1                       forward_backward_pipelining_with_interleaving
// Warm-up (get_pp_rank_microbatches): p−r−1, or (p−r−1)·2 + (v−1)·g; capped at m·v. Then
// forward k = warmup + i with backward i, then the remaining backwards. Forward k runs
// get_schedule_table()[k]; backward k runs chunk v−1−table[k].chunk (get_model_chunk_id with
// forward=False) on the oldest microbatch whose forward that chunk ran and whose backward
// has not (input_tensors[chunk].pop(0)).
static int megatron_reference(int p, int r, int m, int v, pp_op *ops) {
    int n = 0;
    if (p == 1) {
        for (int mb = 0; mb < m; mb++) {
            ops[n++] = (pp_op){'F', mb, 0};
            ops[n++] = (pp_op){'B', mb, 0};
        }
        return n;
    }
    const int g = p, total = m * v;
    int tmb[MAX_OPS], tchunk[MAX_OPS], t = 0;
    for (int lo = 0; lo < m; lo += g) {  // get_schedule_table
        int hi = lo + g >= m ? m : lo + g;
        for (int c = 0; c < v; c++)
            for (int mb = lo; mb < hi; mb++) tmb[t] = mb, tchunk[t] = c, t++;
    }
    int warmup = v == 1 ? p - r - 1 : (p - r - 1) * 2 + (v - 1) * g;
    if (warmup >= total) warmup = total;
    // per-chunk FIFO of forwarded microbatches awaiting backward
    int fifo[16][MAX_OPS / 2], head[16] = {0}, tail[16] = {0};
    int nf = 0, nb = 0;
#define REF_F()                                                      \
    do {                                                             \
        int c_ = tchunk[nf], mb_ = tmb[nf];                          \
        fifo[c_][tail[c_]++] = mb_;                                  \
        ops[n++] = (pp_op){'F', mb_, c_};                            \
        nf++;                                                        \
    } while (0)
#define REF_B()                                                      \
    do {                                                             \
        int c_ = v - 1 - tchunk[nb];                                 \
        ops[n++] = (pp_op){'B', fifo[c_][head[c_]++], c_};           \
        nb++;                                                        \
    } while (0)
    for (int k = 0; k < warmup; k++) REF_F();
    for (int i = 0; i < total - warmup; i++) {
        REF_F();
        REF_B();
    }
    while (nb < total) REF_B();
#undef REF_F
#undef REF_B
    return n;
}

// A schedule shape: pipeline size p, microbatches m, chunks v.
typedef struct shape {
    int p, m, v;
} shape;

// The shapes checked exhaustively: p ∈ {1,2,4,8}, v ∈ {1,2,3} (v > 1 only with p > 1, as
// config_validate requires), m a multiple of p up to 32; plus, without interleaving, every m
// from 1 to 12 (including m < p, which the config refuses but the schedule must survive).
static int all_shapes(shape *out) {
    static const int ps[] = {1, 2, 4, 8};
    int n = 0;
    for (int i = 0; i < 4; i++) {
        int p = ps[i];
        for (int v = 1; v <= 3; v++) {
            if (v > 1 && p == 1) continue;
            for (int m = p; m <= 32; m += p) out[n++] = (shape){p, m, v};
        }
        for (int m = 1; m <= 12; m++)
            if (m % p != 0) out[n++] = (shape){p, m, 1};
    }
    return n;
}

// Virtual stage of chunk c on rank r: k = c·p + r (stage 0 holds the embedding, stage p·v−1
// the loss).
static int vstage(int p, int r, int c) { return c * p + r; }

// ---------------------------------------------------------------------------------------
// 1. 1F1B order written out

TB_TEST(one_f_one_b_order_matches_megatron_written_out) {
    // p = 4, m = 8: warm-up p−r−1 forwards, then one forward + one backward, then cool-down.
    EXPECT_SCHEDULE(4, 0, 8, 1, 0, "F0 F1 F2 F3 B0 F4 B1 F5 B2 F6 B3 F7 B4 B5 B6 B7");
    EXPECT_SCHEDULE(4, 1, 8, 1, 0, "F0 F1 F2 B0 F3 B1 F4 B2 F5 B3 F6 B4 F7 B5 B6 B7");
    EXPECT_SCHEDULE(4, 2, 8, 1, 0, "F0 F1 B0 F2 B1 F3 B2 F4 B3 F5 B4 F6 B5 F7 B6 B7");
    EXPECT_SCHEDULE(4, 3, 8, 1, 0, "F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 F5 B5 F6 B6 F7 B7");
    // p = 2, m = 2
    EXPECT_SCHEDULE(2, 0, 2, 1, 0, "F0 F1 B0 B1");
    EXPECT_SCHEDULE(2, 1, 2, 1, 0, "F0 B0 F1 B1");
    // m < p − r − 1: warm-up capped at m (config refuses m < p, the schedule still holds)
    EXPECT_SCHEDULE(4, 0, 2, 1, 0, "F0 F1 B0 B1");
    EXPECT_SCHEDULE(4, 1, 2, 1, 0, "F0 F1 B0 B1");
    EXPECT_SCHEDULE(4, 2, 2, 1, 0, "F0 F1 B0 B1");
    EXPECT_SCHEDULE(4, 3, 2, 1, 0, "F0 B0 F1 B1");
    EXPECT_SCHEDULE(8, 0, 1, 1, 0, "F0 B0");
    EXPECT_SCHEDULE(8, 7, 1, 1, 0, "F0 B0");
    EXPECT_SCHEDULE(4, 0, 3, 1, 0, "F0 F1 F2 B0 B1 B2");
    EXPECT_SCHEDULE(4, 1, 3, 1, 0, "F0 F1 F2 B0 B1 B2");
    // no pipelining: gradient accumulation
    EXPECT_SCHEDULE(1, 0, 3, 1, 0, "F0 B0 F1 B1 F2 B2");
    // every op of a non-interleaved schedule is chunk 0
    EXPECT_SCHEDULE(2, 0, 2, 1, 1, "F0.0 F1.0 B0.0 B1.0");

    // the warm-up counts: min(p − r − 1, m); none without pipelining
    const int w8[4] = {3, 2, 1, 0};
    for (int r = 0; r < 4; r++)
        TB_CHECK(pipeline_warmup(4, r, 8, 1) == w8[r], "pipeline_warmup(4, %d, 8, 1) = %d, expected %d", r,
                 pipeline_warmup(4, r, 8, 1), w8[r]);
    TB_CHECK(pipeline_warmup(4, 0, 2, 1) == 2, "pipeline_warmup(4, 0, 2, 1) = %d, expected 2 (capped at m)",
             pipeline_warmup(4, 0, 2, 1));
    TB_CHECK(pipeline_warmup(1, 0, 5, 1) == 0, "pipeline_warmup(1, 0, 5, 1) = %d, expected 0",
             pipeline_warmup(1, 0, 5, 1));
}

// ---------------------------------------------------------------------------------------
// 2. Interleaved order written out

TB_TEST(interleaved_order_matches_megatron_written_out) {
    // p = 2, v = 2, m = 4. Schedule table (groups of p = 2 microbatches, chunk-major):
    //   k        0 1 2 3 4 5 6 7
    //   mb       0 1 0 1 2 3 2 3
    //   chunk    0 0 1 1 0 0 1 1   (backward: 1 1 0 0 1 1 0 0)
    // rank 0 warm-up (2−0−1)·2 + (2−1)·2 = 4; rank 1 warm-up 0 + 2 = 2.
    EXPECT_SCHEDULE(2, 0, 4, 2, 1, "F0.0 F1.0 F0.1 F1.1 F2.0 B0.1 F3.0 B1.1 F2.1 B0.0 F3.1 B1.0 B2.1 B3.1 B2.0 B3.0");
    EXPECT_SCHEDULE(2, 1, 4, 2, 1, "F0.0 F1.0 F0.1 B0.1 F1.1 B1.1 F2.0 B0.0 F3.0 B1.0 F2.1 B2.1 F3.1 B3.1 B2.0 B3.0");
    // p = 4, v = 2, m = 8: table k 0-3 (0-3, c0), 4-7 (0-3, c1), 8-11 (4-7, c0), 12-15 (4-7, c1).
    // rank 0 warm-up 3·2 + 4 = 10, rank 3 warm-up 0 + 4 = 4.
    EXPECT_SCHEDULE(4, 0, 8, 2, 1,
                    "F0.0 F1.0 F2.0 F3.0 F0.1 F1.1 F2.1 F3.1 F4.0 F5.0 "
                    "F6.0 B0.1 F7.0 B1.1 F4.1 B2.1 F5.1 B3.1 F6.1 B0.0 F7.1 B1.0 "
                    "B2.0 B3.0 B4.1 B5.1 B6.1 B7.1 B4.0 B5.0 B6.0 B7.0");
    EXPECT_SCHEDULE(4, 3, 8, 2, 1,
                    "F0.0 F1.0 F2.0 F3.0 "
                    "F0.1 B0.1 F1.1 B1.1 F2.1 B2.1 F3.1 B3.1 F4.0 B0.0 F5.0 B1.0 F6.0 B2.0 F7.0 B3.0 "
                    "F4.1 B4.1 F5.1 B5.1 F6.1 B6.1 F7.1 B7.1 "
                    "B4.0 B5.0 B6.0 B7.0");
    // rank 1: warm-up 2·2 + 4 = 8
    EXPECT_SCHEDULE(4, 1, 8, 2, 1,
                    "F0.0 F1.0 F2.0 F3.0 F0.1 F1.1 F2.1 F3.1 "
                    "F4.0 B0.1 F5.0 B1.1 F6.0 B2.1 F7.0 B3.1 F4.1 B0.0 F5.1 B1.0 F6.1 B2.0 F7.1 B3.0 "
                    "B4.1 B5.1 B6.1 B7.1 B4.0 B5.0 B6.0 B7.0");
    // p = 2, v = 3, m = 2: one group; table mb 0 1 0 1 0 1, chunk 0 0 1 1 2 2.
    // rank 0 warm-up 2 + 2·2 = 6 = all: every forward, then every backward.
    EXPECT_SCHEDULE(2, 0, 2, 3, 1, "F0.0 F1.0 F0.1 F1.1 F0.2 F1.2 B0.2 B1.2 B0.1 B1.1 B0.0 B1.0");
    EXPECT_SCHEDULE(2, 1, 2, 3, 1, "F0.0 F1.0 F0.1 F1.1 F0.2 B0.2 F1.2 B1.2 B0.1 B1.1 B0.0 B1.0");

    // docs/ARCHITECTURE.md, "Engine" (the interleaved schedule): p=4, v=2, m=8, g=4: rank 0
    // warm-up 10 of 16, rank 3 warm-up 4.
    const int w[4] = {10, 8, 6, 4};
    for (int r = 0; r < 4; r++)
        TB_CHECK(pipeline_warmup(4, r, 8, 2) == w[r], "pipeline_warmup(4, %d, 8, 2) = %d, expected %d", r,
                 pipeline_warmup(4, r, 8, 2), w[r]);
    // capped at m·v: p = 8, v = 2, m = 8 rank 0 would warm up 14 + 8 = 22 > 16
    TB_CHECK(pipeline_warmup(8, 0, 8, 2) == 16, "pipeline_warmup(8, 0, 8, 2) = %d, expected 16 (capped at m·v)",
             pipeline_warmup(8, 0, 8, 2));
    TB_CHECK(pipeline_warmup(2, 0, 4, 2) == 4 && pipeline_warmup(2, 1, 4, 2) == 2,
             "pipeline_warmup p=2 v=2 m=4: %d %d, expected 4 2", pipeline_warmup(2, 0, 4, 2),
             pipeline_warmup(2, 1, 4, 2));
}

// ---------------------------------------------------------------------------------------
// 2b. Many shapes against the Megatron reference model

TB_TEST(schedule_matches_megatron_reference_model_for_many_shapes) {
    static shape shapes[512];
    static pp_op ours[MAX_OPS], ref[MAX_OPS];
    int ns = all_shapes(shapes), reported = 0, compared = 0;
    for (int s = 0; s < ns; s++) {
        shape sh = shapes[s];
        for (int r = 0; r < sh.p; r++) {
            int n = pipeline_schedule(sh.p, r, sh.m, sh.v, ours);
            int nr = megatron_reference(sh.p, r, sh.m, sh.v, ref);
            int same = n == nr;
            for (int i = 0; same && i < n; i++)
                same = ours[i].kind == ref[i].kind && ours[i].microbatch == ref[i].microbatch &&
                       ours[i].chunk == ref[i].chunk;
            compared++;
            if (!same && reported++ < 5) {
                char a[8192], b[8192];
                format_ops(ours, n, 1, a, sizeof a);
                format_ops(ref, nr, 1, b, sizeof b);
                TB_CHECK(same, "p=%d r=%d m=%d v=%d:\n      megatron %s\n      ours     %s", sh.p, r, sh.m, sh.v,
                         b, a);
            }
        }
    }
    TB_CHECK(reported == 0, "%d of %d (shape, rank) schedules differ from Megatron's", reported, compared);
}

// ---------------------------------------------------------------------------------------
// 3. Each (microbatch, chunk) forward once and backward once, backward after forward

TB_TEST(every_microbatch_chunk_runs_forward_once_then_backward_once) {
    static shape shapes[512];
    static pp_op ops[MAX_OPS];
    int ns = all_shapes(shapes), bad = 0;
    for (int s = 0; s < ns && bad < 5; s++) {
        shape sh = shapes[s];
        for (int r = 0; r < sh.p && bad < 5; r++) {
            int n = pipeline_schedule(sh.p, r, sh.m, sh.v, ops);
            if (n != 2 * sh.m * sh.v) {
                TB_CHECK(0, "p=%d r=%d m=%d v=%d: %d ops, expected %d", sh.p, r, sh.m, sh.v, n, 2 * sh.m * sh.v);
                bad++;
                continue;
            }
            int fwd_at[32][3], bwd_at[32][3];
            for (int mb = 0; mb < sh.m; mb++)
                for (int c = 0; c < sh.v; c++) fwd_at[mb][c] = bwd_at[mb][c] = -1;
            for (int i = 0; i < n && bad < 5; i++) {
                pp_op o = ops[i];
                if ((o.kind != 'F' && o.kind != 'B') || o.microbatch < 0 || o.microbatch >= sh.m || o.chunk < 0 ||
                    o.chunk >= sh.v) {
                    TB_CHECK(0, "p=%d r=%d m=%d v=%d: op %d is %c%d.%d, out of range", sh.p, r, sh.m, sh.v, i, o.kind,
                             o.microbatch, o.chunk);
                    bad++;
                    break;
                }
                int *at = o.kind == 'F' ? &fwd_at[o.microbatch][o.chunk] : &bwd_at[o.microbatch][o.chunk];
                if (*at >= 0) {
                    TB_CHECK(0, "p=%d r=%d m=%d v=%d: %c%d.%d runs twice (ops %d and %d)", sh.p, r, sh.m, sh.v, o.kind,
                             o.microbatch, o.chunk, *at, i);
                    bad++;
                }
                *at = i;
                if (o.kind == 'B' && fwd_at[o.microbatch][o.chunk] < 0) {
                    TB_CHECK(0, "p=%d r=%d m=%d v=%d: B%d.%d (op %d) before its forward", sh.p, r, sh.m, sh.v,
                             o.microbatch, o.chunk, i);
                    bad++;
                }
            }
            for (int mb = 0; mb < sh.m && bad < 5; mb++)
                for (int c = 0; c < sh.v && bad < 5; c++)
                    if (fwd_at[mb][c] < 0 || bwd_at[mb][c] < 0) {
                        TB_CHECK(0, "p=%d r=%d m=%d v=%d: microbatch %d chunk %d: forward at %d, backward at %d", sh.p,
                                 r, sh.m, sh.v, mb, c, fwd_at[mb][c], bwd_at[mb][c]);
                        bad++;
                    }
        }
    }
}

// ---------------------------------------------------------------------------------------
// 4. Cross-rank consistency: the messages of neighbouring stages match in order

// What rank r's ops send / receive on the channel to / from its neighbour, in op order,
// each as (microbatch, chunk of the receiving side). dir 'A': activations (forward ops:
// sender r → r+1 mod p, the receiver's chunk is c + 1 when r = p−1); 'G': gradients
// (backward ops: sender r → r−1 mod p, the receiver's chunk is c − 1 when r = 0).
static int channel_list(const pp_op *ops, int n, int p, int r, int v, char dir, int sending, int *mb, int *chunk) {
    const int last = p * v - 1;
    int k = 0;
    for (int i = 0; i < n; i++) {
        const pp_op *o = &ops[i];
        int vs = vstage(p, r, o->chunk);
        if (dir == 'A' && o->kind == 'F') {
            if (sending && vs < last) mb[k] = o->microbatch, chunk[k++] = o->chunk + (r == p - 1);
            if (!sending && vs > 0) mb[k] = o->microbatch, chunk[k++] = o->chunk;
        } else if (dir == 'G' && o->kind == 'B') {
            if (sending && vs > 0) mb[k] = o->microbatch, chunk[k++] = o->chunk - (r == 0);
            if (!sending && vs < last) mb[k] = o->microbatch, chunk[k++] = o->chunk;
        }
    }
    return k;
}

TB_TEST(neighbouring_stages_send_and_receive_in_the_same_order) {
    static shape shapes[512];
    static pp_op ops[8][MAX_OPS];
    static int smb[MAX_OPS], sch[MAX_OPS], rmb[MAX_OPS], rch[MAX_OPS];
    int ns = all_shapes(shapes), bad = 0;
    for (int s = 0; s < ns && bad < 5; s++) {
        shape sh = shapes[s];
        if (sh.p == 1) continue;
        int n[8];
        for (int r = 0; r < sh.p; r++) n[r] = pipeline_schedule(sh.p, r, sh.m, sh.v, ops[r]);
        for (int src = 0; src < sh.p && bad < 5; src++) {
            for (int d = 0; d < 2; d++) {
                char dir = d ? 'G' : 'A';
                int dst = dir == 'A' ? (src + 1) % sh.p : (src - 1 + sh.p) % sh.p;
                int ks = channel_list(ops[src], n[src], sh.p, src, sh.v, dir, 1, smb, sch);
                int kr = channel_list(ops[dst], n[dst], sh.p, dst, sh.v, dir, 0, rmb, rch);
                int first = -1;
                for (int i = 0; i < (ks < kr ? ks : kr) && first < 0; i++)
                    if (smb[i] != rmb[i] || sch[i] != rch[i]) first = i;
                if (ks != kr || first >= 0) {
                    bad++;
                    TB_CHECK(0, "p=%d m=%d v=%d, %s %d -> %d: %d sent, %d received; first mismatch at message %d "
                                "(sent mb %d chunk %d, receiver expects mb %d chunk %d)",
                             sh.p, sh.m, sh.v, dir == 'A' ? "activations" : "gradients", src, dst, ks, kr, first,
                             first >= 0 ? smb[first] : -1, first >= 0 ? sch[first] : -1,
                             first >= 0 ? rmb[first] : -1, first >= 0 ? rch[first] : -1);
                }
                // every virtual stage boundary carries m messages per chunk crossing it
                int expected = dir == 'A' ? sh.m * (sh.v - (src == sh.p - 1)) : sh.m * (sh.v - (src == 0));
                if (ks != expected && bad < 5) {
                    bad++;
                    TB_CHECK(0, "p=%d m=%d v=%d, %s %d -> %d: %d messages, expected %d", sh.p, sh.m, sh.v,
                             dir == 'A' ? "activations" : "gradients", src, dst, ks, expected);
                }
            }
        }
    }
}

// Runs the p ranks' schedules op by op with eager (buffered) sends, the local backend's
// semantics — a model of the schedule's messages, not of the executor's calls (those are
// pipeline_p2p_program's, which test_pipeline_p2p runs): a forward whose virtual stage is not
// the first receives (blocking) from the previous rank, then sends unless it is the last
// virtual stage; a backward receives from the next rank unless it is the last virtual stage,
// then sends unless it is the first. Each message carries (microbatch, receiver chunk): the receiving op must be
// exactly that one. Returns 0, or -1 with a description of the deadlock or mismatch.
// *max_live gets each rank's largest count of forwards awaiting their backward.
static int simulate_eager(int p, int m, int v, int *max_live, char *why, size_t len) {
    static pp_op ops[8][MAX_OPS];
    static int act_mb[8][MAX_OPS], act_ch[8][MAX_OPS], grad_mb[8][MAX_OPS], grad_ch[8][MAX_OPS];
    int n[8], pc[8], ahead[8], atail[8], ghead[8], gtail[8], live[8];
    const int last = p * v - 1;
    for (int r = 0; r < p; r++) {
        n[r] = pipeline_schedule(p, r, m, v, ops[r]);
        pc[r] = ahead[r] = atail[r] = ghead[r] = gtail[r] = live[r] = max_live[r] = 0;
    }
    for (;;) {
        int progress = 0, done = 1;
        for (int r = 0; r < p; r++) {
            while (pc[r] < n[r]) {
                const pp_op *o = &ops[r][pc[r]];
                int vs = vstage(p, r, o->chunk), prev = (r - 1 + p) % p, next = (r + 1) % p;
                if (o->kind == 'F') {
                    if (vs > 0) {  // recv_forward from prev (channel owned by the sender)
                        if (ahead[prev] == atail[prev]) break;
                        int mb = act_mb[prev][ahead[prev]], ch = act_ch[prev][ahead[prev]];
                        ahead[prev]++;
                        if (mb != o->microbatch || ch != o->chunk) {
                            snprintf(why, len, "rank %d op %d F%d.%d received activation of mb %d chunk %d", r, pc[r],
                                     o->microbatch, o->chunk, mb, ch);
                            return -1;
                        }
                    }
                    if (vs < last) {  // send_forward to next
                        act_mb[r][atail[r]] = o->microbatch;
                        act_ch[r][atail[r]++] = o->chunk + (r == p - 1);
                    }
                    if (++live[r] > max_live[r]) max_live[r] = live[r];
                } else {
                    if (vs < last) {  // recv_backward from next
                        if (ghead[next] == gtail[next]) break;
                        int mb = grad_mb[next][ghead[next]], ch = grad_ch[next][ghead[next]];
                        ghead[next]++;
                        if (mb != o->microbatch || ch != o->chunk) {
                            snprintf(why, len, "rank %d op %d B%d.%d received gradient of mb %d chunk %d", r, pc[r],
                                     o->microbatch, o->chunk, mb, ch);
                            return -1;
                        }
                    }
                    if (vs > 0) {  // send_backward to prev
                        grad_mb[r][gtail[r]] = o->microbatch;
                        grad_ch[r][gtail[r]++] = o->chunk - (r == 0);
                    }
                    live[r]--;
                }
                pc[r]++;
                progress = 1;
            }
            if (pc[r] < n[r]) done = 0;
        }
        if (done) break;
        if (!progress) {
            size_t used = (size_t)snprintf(why, len, "deadlock:");
            for (int r = 0; r < p && used < len; r++)
                used += (size_t)snprintf(why + used, len - used, " rank %d at op %d/%d %c%d.%d;", r, pc[r], n[r],
                                         pc[r] < n[r] ? ops[r][pc[r]].kind : '-',
                                         pc[r] < n[r] ? ops[r][pc[r]].microbatch : -1,
                                         pc[r] < n[r] ? ops[r][pc[r]].chunk : -1);
            return -1;
        }
    }
    for (int r = 0; r < p; r++)
        if (ahead[r] != atail[r] || ghead[r] != gtail[r]) {
            snprintf(why, len, "rank %d left %d activation(s) and %d gradient(s) unreceived", r, atail[r] - ahead[r],
                     gtail[r] - ghead[r]);
            return -1;
        }
    return 0;
}

TB_TEST(eager_point_to_point_execution_completes_with_matching_messages) {
    static shape shapes[512];
    int ns = all_shapes(shapes), bad = 0;
    for (int s = 0; s < ns && bad < 5; s++) {
        shape sh = shapes[s];
        int max_live[8];
        char why[1024];
        if (simulate_eager(sh.p, sh.m, sh.v, max_live, why, sizeof why) != 0) {
            bad++;
            TB_CHECK(0, "p=%d m=%d v=%d: %s", sh.p, sh.m, sh.v, why);
            continue;
        }
        // Activation memory: a rank holds at most warm-up + 1 microbatch-chunks awaiting
        // backward (Megatron's max_outstanding_backprops), all of them when everything is
        // warm-up, one without pipelining.
        for (int r = 0; r < sh.p; r++) {
            int w = pipeline_warmup(sh.p, r, sh.m, sh.v), total = sh.m * sh.v;
            int bound = w + 1 < total ? w + 1 : total;
            if (max_live[r] != bound && bad < 5) {
                bad++;
                TB_CHECK(0, "p=%d m=%d v=%d rank %d: %d forwards in flight at most, expected %d", sh.p, sh.m, sh.v, r,
                         max_live[r], bound);
            }
        }
    }
}

// ---------------------------------------------------------------------------------------
// 5. Theoretical bubble

TB_TEST(theoretical_bubble_fraction) {
    struct {
        int p, m, v;
        double expected;
    } cases[] = {
        {1, 8, 1, 0.0},                     // no pipeline, no bubble
        {2, 8, 1, 1.0 / 9.0},               // (p−1)/(m+p−1)
        {4, 8, 1, 3.0 / 11.0},
        {8, 32, 1, 7.0 / 39.0},
        {4, 4, 1, 3.0 / 7.0},
        {2, 8, 2, 1.0 / 17.0},              // (p−1)/(v·m+p−1)
        {4, 8, 2, 3.0 / 19.0},
        {4, 8, 3, 3.0 / 27.0},
        {2, 8, 0, 1.0 / 9.0},               // v = 0 (not interleaved) counts as 1
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        double got = pipeline_theoretical_bubble(cases[i].p, cases[i].m, cases[i].v);
        TB_CHECK(fabs(got - cases[i].expected) < 1e-12, "p=%d m=%d v=%d: bubble %.15g, expected %.15g", cases[i].p,
                 cases[i].m, cases[i].v, got, cases[i].expected);
    }
    // interleaving by v divides the bubble time (p−1) relative to the ideal time v·m chunks
    double b1 = pipeline_theoretical_bubble(4, 8, 1), b2 = pipeline_theoretical_bubble(4, 8, 2);
    TB_CHECK(b2 < b1, "interleaving does not shrink the bubble: %g vs %g", b2, b1);
}

// ---------------------------------------------------------------------------------------
// 6. The executor follows the schedule (pretrain_gpt traces)

static void remove_dir(const char *path) {
    DIR *d = opendir(path);
    if (!d) return;
    struct dirent *e;
    char p[2048];
    while ((e = readdir(d)) != NULL) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        snprintf(p, sizeof p, "%s/%s", path, e->d_name);
        unlink(p);
    }
    closedir(d);
    rmdir(path);
}

// The (kind, microbatch, chunk) of every "forward" / "backward" range of a trace in time
// order; the chunk comes from the first layer range nested inside ("layer.N" in forward,
// "layer.N.backward" in backward): layer N belongs to virtual stage N / per_stage, chunk
// (N / per_stage) / p, which must be on this rank. Returns the count, -1 on a bad trace.
static int trace_ops(const char *path, int p, int rank, int per_stage, pp_op *out, int cap, char *why, size_t len) {
    json_error_t jerr;
    json_t *root = json_load_file(path, 0, &jerr);
    if (!root) {
        snprintf(why, len, "%s: %s", path, jerr.text);
        return -1;
    }
    json_t *events = json_object_get(root, "traceEvents");
    size_t nev = json_array_size(events);
    int n = 0, rc = 0;
    double open_end = -1, last_ts = -1;
    for (size_t i = 0; i < nev && rc == 0; i++) {
        json_t *ev = json_array_get(events, i);
        const char *ph = json_string_value(json_object_get(ev, "ph"));
        const char *name = json_string_value(json_object_get(ev, "name"));
        if (!ph || strcmp(ph, "X") != 0 || !name) continue;
        double ts = json_number_value(json_object_get(ev, "ts")), dur = json_number_value(json_object_get(ev, "dur"));
        if (!strcmp(name, "forward") || !strcmp(name, "backward")) {
            json_t *mb = json_object_get(json_object_get(ev, "args"), "microbatch");
            if (!json_is_integer(mb) || n == cap || ts < last_ts) {
                snprintf(why, len, "%s: event %zu (%s at %.3f us): no args.microbatch, out of order or too many", path,
                         i, name, ts);
                rc = -1;
                break;
            }
            out[n++] = (pp_op){name[0] == 'f' ? 'F' : 'B', (int)json_integer_value(mb), -1};
            open_end = ts + dur;
            last_ts = ts;
            continue;
        }
        int layer, used = 0;
        if (n > 0 && out[n - 1].chunk < 0 && ts <= open_end && sscanf(name, "layer.%d%n", &layer, &used) == 1 &&
            (name[used] == '\0' || !strcmp(name + used, ".backward"))) {
            int want_backward = out[n - 1].kind == 'B', is_backward = name[used] != '\0';
            if (want_backward != is_backward) continue;
            int k = layer / per_stage;
            if (k % p != rank) {
                snprintf(why, len, "%s: %c%d runs layer %d of virtual stage %d, not on rank %d", path, out[n - 1].kind,
                         out[n - 1].microbatch, layer, k, rank);
                rc = -1;
                break;
            }
            out[n - 1].chunk = k / p;
        }
    }
    json_decref(root);
    for (int i = 0; rc == 0 && i < n; i++)
        if (out[i].chunk < 0) {
            snprintf(why, len, "%s: op %d (%c%d) has no layer range inside", path, i, out[i].kind, out[i].microbatch);
            rc = -1;
        }
    return rc < 0 ? -1 : n;
}

static void check_executor(int p, int v, int num_layers, int global_batch) {
    char dir[1024], cmd[4096], path[1200], why[2048];
    snprintf(dir, sizeof dir, "%s/test_schedules_%ld_p%d_v%d", TB_TEST_TMPDIR, (long)getpid(), p, v);
    remove_dir(dir);
    char vflag[64] = "";
    if (v > 1) snprintf(vflag, sizeof vflag, " --virtual-pipeline-model-parallel-size %d", v);
    snprintf(cmd, sizeof cmd,
             "'%s/pretrain_gpt' --num-layers %d --hidden-size 64 --num-attention-heads 4 --seq-length 32 "
             "--vocab-size 256 --micro-batch-size 2 --global-batch-size %d --train-iters 1 "
             "--pipeline-model-parallel-size %d%s --run-dir '%s' >/dev/null 2>&1",
             TB_BIN_DIR, num_layers, global_batch, p, vflag, dir);
    int status = system(cmd);
    TB_CHECK(status == 0, "p=%d v=%d: pretrain_gpt exited with status %d: %s", p, v, status, cmd);
    if (status != 0) {
        remove_dir(dir);
        return;
    }
    const int m = global_batch / 2, vv = v > 1 ? v : 1, per_stage = num_layers / (p * vv);
    static pp_op got[MAX_OPS], want[MAX_OPS];
    for (int r = 0; r < p; r++) {
        tb_rank_path(path, sizeof path, dir, TB_RANK_TRACE, r);
        int n = trace_ops(path, p, r, per_stage, got, MAX_OPS, why, sizeof why);
        TB_CHECK(n >= 0, "p=%d v=%d rank %d: %s", p, v, r, why);
        if (n < 0) continue;
        int nw = pipeline_schedule(p, r, m, vv, want);
        int same = n == nw;
        for (int i = 0; same && i < n; i++)
            same = got[i].kind == want[i].kind && got[i].microbatch == want[i].microbatch &&
                   got[i].chunk == want[i].chunk;
        char a[8192], b[8192];
        format_ops(got, n, 1, a, sizeof a);
        format_ops(want, nw, 1, b, sizeof b);
        TB_CHECK(same, "p=%d v=%d m=%d rank %d:\n      schedule %s\n      trace    %s", p, v, m, r, b, a);
    }
    remove_dir(dir);
}

TB_TEST(executor_runs_each_ranks_schedule_in_order) {
    check_executor(2, 1, 4, 16);  // 1F1B, 8 microbatches
    check_executor(4, 1, 4, 16);  // 1F1B, 8 microbatches on 4 stages
    check_executor(2, 2, 4, 16);  // interleaved, one layer per virtual stage
    check_executor(2, 2, 8, 8);   // interleaved, two layers per virtual stage, 4 microbatches
}

int main(void) {
    TB_RUN(one_f_one_b_order_matches_megatron_written_out);
    TB_RUN(interleaved_order_matches_megatron_written_out);
    TB_RUN(schedule_matches_megatron_reference_model_for_many_shapes);
    TB_RUN(every_microbatch_chunk_runs_forward_once_then_backward_once);
    TB_RUN(neighbouring_stages_send_and_receive_in_the_same_order);
    TB_RUN(eager_point_to_point_execution_completes_with_matching_messages);
    TB_RUN(theoretical_bubble_fraction);
    TB_RUN(executor_runs_each_ranks_schedule_in_order);
    return tb_test_summary();
}
