// The MoE layer's semantics on hand-made routing (the gradients are test_gradcheck's, the
// parallel layouts test_parallel's): the router's top-k and probs as Megatron's TopKRouter,
// the load-balancing loss as switch_load_balancing_loss_func, the permutation grouped by
// expert in token order and the combine weighted by the probs; and, through the trainer,
// the load statistics a step records (every routed token counted once, recompute or not)
// and written to the metrics by pretrain_gpt; the expert grid as --print-rank-layout prints it;
// data, pipeline, expert, tensor (with sequence) and expert tensor parallelism against the
// single rank; Megatron's sigmoid scores and sequence-level aux loss on hand values and under
// dp and ep, the sigmoid scores' aux loss under tensor (sequence) parallelism.
#include <jansson.h>
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/kernels.h"
#include "config.h"
#include "core/safetensors.h"
#include "tb_run_dir.h"
#include "tb_shell.h"
#include "tb_test.h"
#include "trainers.h"
#include "training.h"
#include "transformer/moe/router.h"
#include "transformer/moe/token_dispatcher.h"

#define PRETRAIN TB_BIN_DIR "/pretrain_gpt"

static tb_moe_dims dims(int E, int k, int pre_softmax) {
    tb_moe_dims m;
    memset(&m, 0, sizeof m);
    m.E = m.E_local = E, m.k = k, m.pre_softmax = pre_softmax, m.freq = 1, m.aux_loss = 1, m.aux_coeff = 1;
    return m;
}

// With the identity as the router's weight, each token's logits are its input.
TB_TEST(router_takes_the_top_k_largest_first_ties_to_the_lower_expert) {
    const float logits[2][4] = {{1, 3, 3, 0}, {0.5f, -1, 2, 1.5f}}, eye[16] = {1, 0, 0, 0, 0, 1, 0, 0,
                                                                             0, 0, 1, 0, 0, 0, 0, 1};
    float scratch[8], scores[8], probs[4];
    int32_t topk[4];
    for (int pre = 0; pre <= 1; pre++) {
        tb_moe_dims m = dims(4, 2, pre);
        router_forward(&m, 2, 4, &logits[0][0], eye, scratch, scores, topk, probs);
        TB_CHECK(topk[0] == 1 && topk[1] == 2, "token 0 routed to %d, %d (want 1, 2: the tie to the lower)", topk[0],
                 topk[1]);
        TB_CHECK(topk[2] == 2 && topk[3] == 3, "token 1 routed to %d, %d (want 2, 3)", topk[2], topk[3]);
        // scores: softmax over every expert
        const double z0 = exp(1) + 2 * exp(3) + exp(0);
        TB_CHECK(fabs(scores[1] - exp(3) / z0) < 1e-6, "score %g", scores[1]);
        if (pre) {  // the scores at the chosen experts
            TB_CHECK(fabs(probs[0] - exp(3) / z0) < 1e-6 && fabs(probs[1] - exp(3) / z0) < 1e-6, "pre-softmax probs %g %g",
                     probs[0], probs[1]);
        } else {  // softmax over the chosen logits: 2 and 1.5 for token 1
            TB_CHECK(probs[0] == 0.5f && probs[1] == 0.5f, "probs %g %g", probs[0], probs[1]);
            const double p = exp(2) / (exp(2) + exp(1.5));
            TB_CHECK(fabs(probs[2] - p) < 1e-6 && fabs(probs[3] - (1 - p)) < 1e-6, "probs %g %g", probs[2], probs[3]);
        }
    }
}

TB_TEST(load_balancing_loss_is_switch_transformers_and_one_when_balanced) {
    // E 2, k 1, N 2: E / (k N²) · Σ_e (Σ_n s) · f = 2 / 4 · (1.3 · 2 + 0.7 · 0) = 1.3
    const float scores[4] = {0.7f, 0.3f, 0.6f, 0.4f};
    const int32_t skewed[2] = {2, 0}, even[2] = {1, 1};
    tb_moe_dims m = dims(2, 1, 0);
    TB_CHECK(fabs(router_load_balancing_loss(&m, 2, scores, skewed) - 1.3) < 1e-6, "skewed %g",
             router_load_balancing_loss(&m, 2, scores, skewed));
    const float uniform[4] = {0.5f, 0.5f, 0.5f, 0.5f};
    TB_CHECK(fabs(router_load_balancing_loss(&m, 2, uniform, even) - 1.0) < 1e-12, "balanced %g",
             router_load_balancing_loss(&m, 2, uniform, even));
}

static double sigmoid(double x) { return 1 / (1 + exp(-x)); }

// Megatron's sigmoid scores: each expert's own sigmoid; the top k of them (ties to the lower),
// their probs normalised to sum 1 for k > 1 and the sigmoid itself for k = 1; the aux loss
// on the sigmoid normalised over every expert.
TB_TEST(sigmoid_router_takes_the_top_k_scores_and_normalises_their_probs) {
    const float logits[2][4] = {{1, 3, 3, 0}, {0.5f, -1, 2, 1.5f}}, eye[16] = {1, 0, 0, 0, 0, 1, 0, 0,
                                                                             0, 0, 1, 0, 0, 0, 0, 1};
    float scratch[8], scores[8], probs[4];
    int32_t topk[4];
    tb_moe_dims m = dims(4, 2, 0);
    m.sigmoid = 1;
    router_forward(&m, 2, 4, &logits[0][0], eye, scratch, scores, topk, probs);
    TB_CHECK(topk[0] == 1 && topk[1] == 2 && topk[2] == 2 && topk[3] == 3, "routed to %d %d, %d %d (want 1 2, 2 3)",
             topk[0], topk[1], topk[2], topk[3]);
    TB_CHECK(fabs(scores[0] - sigmoid(1)) < 1e-7 && fabs(scores[7] - sigmoid(1.5)) < 1e-7, "scores %g %g", scores[0],
             scores[7]);
    const double p = sigmoid(2) / (sigmoid(2) + sigmoid(1.5));
    TB_CHECK(fabs(probs[0] - 0.5) < 1e-7 && fabs(probs[2] - p) < 1e-7 && fabs(probs[3] - (1 - p)) < 1e-7,
             "probs %g %g %g (want 0.5, %g, %g)", probs[0], probs[2], probs[3], p, 1 - p);
    // the aux loss's scores: each row's sigmoids over their sum
    const int32_t counts[4] = {0, 1, 2, 1};
    double want = 0;
    for (int e = 0; e < 4; e++) {
        double col = 0;
        for (int n = 0; n < 2; n++) {
            double sum = 0;
            for (int f = 0; f < 4; f++) sum += sigmoid(logits[n][f]);
            col += sigmoid(logits[n][e]) / sum;
        }
        want += col * counts[e];
    }
    want *= 4.0 / (2 * 2 * 2);
    TB_CHECK(fabs(router_load_balancing_loss(&m, 2, scores, counts) - want) < 1e-6, "sigmoid aux loss %g, want %g",
             router_load_balancing_loss(&m, 2, scores, counts), want);
    // top-1: the prob is the sigmoid itself
    m = dims(4, 1, 0);
    m.sigmoid = 1;
    router_forward(&m, 2, 4, &logits[0][0], eye, scratch, scores, topk, probs);
    TB_CHECK(topk[0] == 1 && fabs(probs[0] - sigmoid(3)) < 1e-7 && topk[1] == 2 && fabs(probs[1] - sigmoid(2)) < 1e-7,
             "top-1: %d %g, %d %g", topk[0], probs[0], topk[1], probs[1]);
}

// Megatron's seq_aux_loss: the switch loss per sequence, with the sequence's own counts, over
// the sequences' mean. E 2, k 1, T 2, 2 sequences; choices 0 0 | 1 0:
//   sequence 0: 2 / 4 · (1.3 · 2) = 1.3; sequence 1: 2 / 4 · (1.1 · 1 + 0.9 · 1) = 1.0 -> 1.15
// where the global loss is 2 / 16 · (2.4 · 3 + 1.6 · 1) = 1.1.
TB_TEST(seq_aux_loss_is_the_switch_loss_per_sequence_averaged) {
    const float scores[8] = {0.7f, 0.3f, 0.6f, 0.4f, 0.2f, 0.8f, 0.9f, 0.1f};
    const int32_t topk[4] = {0, 0, 1, 0}, selected[2] = {3, 1};
    tb_moe_dims m = dims(2, 1, 0);
    TB_CHECK(fabs(router_aux_loss(&m, 4, scores, topk, selected) - 1.1) < 1e-6, "aux_loss %g",
             router_aux_loss(&m, 4, scores, topk, selected));
    m.seq_aux = 1, m.seq_length = 2;
    TB_CHECK(fabs(router_aux_loss(&m, 4, scores, topk, selected) - 1.15) < 1e-6, "seq_aux_loss %g",
             router_aux_loss(&m, 4, scores, topk, selected));
}

TB_TEST(permutation_groups_tokens_by_expert_in_token_order_and_combine_weights_by_probs) {
    // 3 tokens, top-2 of 4 experts: token 0 → 2, 0; token 1 → 0, 1; token 2 → 2, 1
    const int32_t topk[6] = {2, 0, 0, 1, 2, 1};
    int32_t counts[4], pos[6], token[6];
    moe_permute_map(topk, 3, 2, 4, counts, pos, token);
    const int32_t want_counts[4] = {2, 2, 2, 0}, want_pos[6] = {4, 0, 1, 2, 5, 3}, want_token[6] = {0, 1, 1, 2, 0, 2};
    TB_CHECK(!memcmp(counts, want_counts, sizeof counts), "tokens per expert %d %d %d %d", counts[0], counts[1],
             counts[2], counts[3]);
    TB_CHECK(!memcmp(pos, want_pos, sizeof pos), "rows %d %d %d %d %d %d", pos[0], pos[1], pos[2], pos[3], pos[4], pos[5]);
    TB_CHECK(!memcmp(token, want_token, sizeof token), "tokens %d %d %d %d %d %d", token[0], token[1], token[2],
             token[3], token[4], token[5]);
    // C 1: token n holds 10 n; the permuted rows are their tokens' values
    const float inp[3] = {0, 10, 20};
    float perm[6];
    moe_permute(perm, inp, token, 6, 1);
    const float want_perm[6] = {0, 10, 10, 20, 0, 20};
    TB_CHECK(!memcmp(perm, want_perm, sizeof perm), "permuted %g %g %g %g %g %g", perm[0], perm[1], perm[2], perm[3],
             perm[4], perm[5]);
    // experts' outputs by row; out[n] = Σ_j probs[n,j] · y[row of (n,j)]
    const float y[6] = {1, 2, 3, 4, 5, 6}, probs[6] = {0.75f, 0.25f, 0.5f, 0.5f, 0.125f, 0.875f};
    float out[3];
    moe_unpermute(out, y, pos, probs, 3, 2, 1);
    TB_CHECK(out[0] == 0.75f * 5 + 0.25f * 1 && out[1] == 0.5f * 2 + 0.5f * 3 && out[2] == 0.125f * 6 + 0.875f * 4,
             "combined %g %g %g", out[0], out[1], out[2]);
    // backward: each row gets its prob times the token's gradient; each prob the dot with its row
    const float dout[3] = {1, -2, 4};
    float dy[6], dprobs[6], dinp[3] = {0, 0, 0};
    moe_unpermute_backward(dy, dprobs, dout, y, pos, probs, 3, 2, 1);
    TB_CHECK(dy[4] == 0.75f && dy[0] == 0.25f && dy[1] == -1 && dy[5] == 0.5f, "row grads %g %g %g %g", dy[4], dy[0],
             dy[1], dy[5]);
    TB_CHECK(dprobs[0] == 5 && dprobs[1] == 1 && dprobs[2] == -4 && dprobs[5] == 16, "prob grads %g %g %g %g",
             dprobs[0], dprobs[1], dprobs[2], dprobs[5]);
    moe_permute_backward(dinp, dy, pos, 3, 2, 1);
    TB_CHECK(dinp[0] == 1 && dinp[1] == -2 && dinp[2] == 4, "token grads %g %g %g (the probs sum to 1)", dinp[0],
             dinp[1], dinp[2]);
}

// Megatron's topk_softmax_with_capacity on hand-made routing: capacity ceil(N·k / E · factor);
// over it, an expert keeps its highest probs (probs) or its earliest tokens (position); a
// dropped choice has no row, no share of the output and no gradient.
TB_TEST(capacity_drops_the_lowest_probs_or_the_last_positions) {
    // 4 tokens, top-1 of 2 experts, factor 1: capacity ceil(4 / 2 · 1) = 2; expert 0 gets 3
    tb_moe_dims m = dims(2, 1, 1);
    m.capacity_factor = 1.0;
    TB_CHECK(router_expert_capacity(&m, 4) == 2, "capacity %d", router_expert_capacity(&m, 4));
    m.capacity_factor = 1.1;  // ceil(2.2)
    TB_CHECK(router_expert_capacity(&m, 4) == 3, "capacity %d", router_expert_capacity(&m, 4));
    m.capacity_factor = 1.0;
    const int32_t topk[4] = {0, 0, 1, 0};
    const float probs[4] = {0.6f, 0.9f, 0.7f, 0.8f};
    int32_t route[4], selected[2];
    TB_CHECK(router_apply_capacity(&m, 4, topk, probs, route, selected) == 1, "one dropped");
    TB_CHECK(route[0] == -1 && route[1] == 0 && route[2] == 1 && route[3] == 0 && selected[0] == 3 && selected[1] == 1,
             "probs policy: route %d %d %d %d (token 0, the lowest prob of expert 0, dropped)", route[0], route[1],
             route[2], route[3]);
    m.drop_position = 1;
    TB_CHECK(router_apply_capacity(&m, 4, topk, probs, route, selected) == 1, "one dropped");
    TB_CHECK(route[0] == 0 && route[1] == 0 && route[2] == 1 && route[3] == -1, "position policy: route %d %d %d %d",
             route[0], route[1], route[2], route[3]);
    // ties of probs: the later token goes first
    const float tied[4] = {0.5f, 0.5f, 0.7f, 0.5f};
    m.drop_position = 0;
    router_apply_capacity(&m, 4, topk, tied, route, selected);
    TB_CHECK(route[0] == 0 && route[1] == 0 && route[3] == -1, "tie: route %d %d %d %d", route[0], route[1], route[2],
             route[3]);
    // without a factor nothing drops
    m.capacity_factor = 0;
    TB_CHECK(router_apply_capacity(&m, 4, topk, probs, route, selected) == 0 && route[0] == 0 && route[3] == 0,
             "no capacity");
    // the permutation leaves the dropped choice out; combine and its backward skip it
    const int32_t dropped_route[4] = {0, 0, 1, -1};
    int32_t counts[2], pos[4], token[4];
    moe_permute_map(dropped_route, 4, 1, 2, counts, pos, token);
    TB_CHECK(counts[0] == 2 && counts[1] == 1 && pos[0] == 0 && pos[1] == 1 && pos[2] == 2 && pos[3] == -1 &&
                 token[0] == 0 && token[1] == 1 && token[2] == 2,
             "permutation with a drop: counts %d %d, rows %d %d %d %d", counts[0], counts[1], pos[0], pos[1], pos[2],
             pos[3]);
    const float y[3] = {1, 2, 3}, dout[4] = {1, 1, 1, 5};
    float out[4], dy[3], dprobs[4] = {9, 9, 9, 9};
    moe_unpermute(out, y, pos, probs, 4, 1, 1);
    TB_CHECK(out[3] == 0 && out[1] == 0.9f * 2, "dropped token's output %g (want 0)", out[3]);
    moe_unpermute_backward(dy, dprobs, dout, y, pos, probs, 4, 1, 1);
    TB_CHECK(dprobs[3] == 0 && dprobs[2] == 3, "dropped token's prob gradient %g (want 0)", dprobs[3]);
}

// The grouped GEMM (--moe-grouped-gemm) gives the bits of one cpu_matmul per group, forward and
// backward, with a group of no rows among them (two OpenMP threads: the groups run in parallel,
// each sgemm single-threaded, against the per-group sgemm threaded).
TB_TEST(grouped_gemm_is_bitwise_the_per_expert_gemms) {
    enum { G = 3, C = 24, OC = 40, N = 5 + 0 + 9 };
    const int32_t rows[G] = {5, 0, 9};
    static float inp[N * C], w[G][OC * C], b[G][OC], dout[N * OC];
    static float out_a[N * OC], out_b[N * OC], din_a[N * C], din_b[N * C];
    static float dw_a[G][OC * C], dw_b[G][OC * C], db_a[G][OC], db_b[G][OC];
    uint32_t s = 12345;
#define RND() ((s = s * 1664525u + 1013904223u), (float)(s >> 8) / (float)(1u << 24) - 0.5f)
    for (int i = 0; i < N * C; i++) inp[i] = RND();
    for (int i = 0; i < N * OC; i++) dout[i] = RND();
    for (int g = 0; g < G; g++) {
        for (int i = 0; i < OC * C; i++) w[g][i] = RND(), dw_a[g][i] = dw_b[g][i] = RND();
        for (int i = 0; i < OC; i++) b[g][i] = RND(), db_a[g][i] = db_b[g][i] = RND();
    }
#undef RND
    const float *wp[G] = {w[0], w[1], w[2]}, *bp[G] = {b[0], b[1], b[2]};
    float *dwp[G] = {dw_b[0], dw_b[1], dw_b[2]}, *dbp[G] = {db_b[0], db_b[1], db_b[2]};
    size_t at = 0;
    for (int g = 0; g < G; g++) {
        if (rows[g]) {
            cpu_matmul_forward(out_a + at * OC, inp + at * C, w[g], b[g], rows[g], C, OC);
            cpu_matmul_backward(din_a + at * C, dw_a[g], db_a[g], dout + at * OC, inp + at * C, w[g], rows[g], C, OC);
        }
        at += (size_t)rows[g];
    }
    cpu_grouped_matmul_forward(out_b, inp, wp, bp, rows, G, C, OC);
    cpu_grouped_matmul_backward(din_b, dwp, dbp, dout, inp, wp, rows, G, C, OC);
    TB_CHECK(!memcmp(out_a, out_b, sizeof out_a), "forward outputs differ");
    TB_CHECK(!memcmp(din_a, din_b, sizeof din_a), "input gradients differ");
    TB_CHECK(!memcmp(dw_a, dw_b, sizeof dw_a) && !memcmp(db_a, db_b, sizeof db_a), "weight / bias gradients differ");
}

// A tiny MoE model: experts in layers 0 and 2 of 4 (freq 2), top-2 of 4.
static void moe_config(tb_config *c) {
    config_defaults(c);
    c->num_layers = 4, c->hidden_size = 32, c->num_attention_heads = 4, c->seq_length = 16;
    c->micro_batch_size = 2, c->global_batch_size = 4, c->vocab_size = 64, c->train_iters = 3, c->lr = 1e-3;
    c->num_threads = 2;
    c->num_experts = 4, c->moe_router_topk = 2, c->moe_layer_freq = 2, c->moe_ffn_hidden_size = 24;
    c->moe_aux_loss_coeff = 0.01;
}

typedef struct moe_run {
    double loss[3];
    int64_t tokens[4][4];  // the last step's tokens per expert per layer
    int microbatches[4];
    double lb[4];
    int64_t dropped[4];
    size_t peak_activations;  // the rank's peak of activation bytes
} moe_run;

static int train_moe(const tb_config *in, moe_run *out) {
    static tb_config cfg;  // the trainer keeps a pointer
    tb_rank rk;
    tb_trainer tr;
    if (single_rank_trainer(&cfg, in, &rk, &tr) != 0) return -1;
    for (int s = 1; s <= cfg.train_iters; s++) out->loss[s - 1] = train_step(&tr, s).loss;
    const moe_stats *st = &tr.models[0].block.moe_stats;
    for (int l = 0; l < 4; l++) {
        for (int e = 0; e < 4; e++) out->tokens[l][e] = st->tokens_per_expert[l * 4 + e];
        out->microbatches[l] = st->microbatches[l];
        out->lb[l] = st->load_balancing_loss[l];
        out->dropped[l] = st->dropped_tokens[l];
    }
    out->peak_activations = rk.mem.stats.peak[TB_MEM_ACTIVATIONS];
    trainer_free(&tr);
    return rk.mem.stats.total_current == 0 ? 0 : -2;
}

TB_TEST(a_step_counts_every_routed_token_once_with_or_without_recompute) {
    tb_config c;
    moe_config(&c);
    moe_run plain, full;
    TB_REQUIRE(train_moe(&c, &plain) == 0, "train");
    c.recompute_granularity = TB_RECOMPUTE_FULL, c.recompute_method = TB_RECOMPUTE_UNIFORM, c.recompute_num_layers = 2;
    TB_REQUIRE(train_moe(&c, &full) == 0, "train with full recompute");
    // 2 microbatches of 2 x 16 tokens, each routed to 2 experts: 128 per MoE layer
    for (int l = 0; l < 4; l++) {
        int64_t sum = 0;
        for (int e = 0; e < 4; e++) sum += plain.tokens[l][e];
        const int moe = l % 2 == 0;
        TB_CHECK(sum == (moe ? 128 : 0) && plain.microbatches[l] == (moe ? 2 : 0), "layer %d: %lld routed, %d records",
                 l, (long long)sum, plain.microbatches[l]);
        TB_CHECK(!memcmp(plain.tokens[l], full.tokens[l], sizeof plain.tokens[l]) &&
                     plain.microbatches[l] == full.microbatches[l] && plain.lb[l] == full.lb[l],
                 "layer %d: recompute changed the statistics (records %d vs %d)", l, full.microbatches[l],
                 plain.microbatches[l]);
        if (moe) TB_CHECK(plain.lb[l] > 0 && isfinite(plain.lb[l]), "layer %d load-balancing loss %g", l, plain.lb[l]);
    }
    for (int s = 0; s < 3; s++)
        TB_CHECK(plain.loss[s] == full.loss[s], "step %d: loss %.9g, with recompute %.9g", s + 1, plain.loss[s],
                 full.loss[s]);
}

// The aux loss trained on moves the weights (its gradient reaches the router), and without
// a load-balancing loss there is none to report.
// Training with --moe-grouped-gemm: the per-expert path's bits, step by step (SwiGLU experts
// with biases, so both linears and the gated activation run grouped).
TB_TEST(grouped_gemm_trains_to_the_per_expert_bits) {
    tb_config c;
    moe_config(&c);
    c.swiglu = 1;
    moe_run plain, grouped;
    TB_REQUIRE(train_moe(&c, &plain) == 0, "train");
    c.moe_grouped_gemm = 1;
    TB_REQUIRE(train_moe(&c, &grouped) == 0, "train with the grouped GEMM");
    for (int s = 0; s < 3; s++)
        TB_CHECK(plain.loss[s] == grouped.loss[s], "step %d: loss %.9g, grouped %.9g", s + 1, plain.loss[s],
                 grouped.loss[s]);
}

TB_TEST(aux_loss_coefficient_changes_training_and_none_reports_no_loss) {
    tb_config c;
    moe_config(&c);
    moe_run with, without, none;
    TB_REQUIRE(train_moe(&c, &with) == 0, "train");
    c.moe_aux_loss_coeff = 0;
    TB_REQUIRE(train_moe(&c, &without) == 0, "train without the coefficient");
    c.moe_router_load_balancing_type = TB_MOE_LB_NONE;
    TB_REQUIRE(train_moe(&c, &none) == 0, "train without load balancing");
    TB_CHECK(with.loss[0] == without.loss[0], "step 1 precedes any update: %.9g vs %.9g", with.loss[0], without.loss[0]);
    TB_CHECK(with.loss[2] != without.loss[2], "the aux loss's gradient changed nothing: %.9g", with.loss[2]);
    TB_CHECK(without.loss[2] == none.loss[2], "coefficient 0 and none train alike: %.9g vs %.9g", without.loss[2],
             none.loss[2]);
    TB_CHECK(without.lb[0] > 0 && none.lb[0] == 0, "reported %g (coefficient 0), %g (none)", without.lb[0], none.lb[0]);
}

TB_TEST(pretrain_gpt_writes_the_load_statistics_of_each_moe_layer) {
    char dir[512], path[1024];
    tb_tmp_path(dir, sizeof dir, "moe_metrics");
    tb_output sh = {0};
    int status = tb_run(&sh, NULL,
                        "rm -rf '%s' && '%s' --num-layers 2 --hidden-size 32 --num-attention-heads 2 --seq-length 16 "
                        "--vocab-size 64 --micro-batch-size 2 --train-iters 2 --num-experts 4 --moe-router-topk 2 "
                        "--moe-aux-loss-coeff 0.01 --moe-ffn-hidden-size 24 --moe-layer-freq 2 --num-threads 2 "
                        "--run-dir '%s'",
                        dir, PRETRAIN, dir);
    TB_REQUIRE(status == 0, "pretrain_gpt exit %d: %s", status, sh.err);
    tb_rank_path(path, sizeof path, dir, TB_RANK_METRICS, 0);
    char *text = tb_slurp(path);
    TB_REQUIRE(text, "%s", path);
    json_error_t jerr;
    json_t *step = json_loads(strtok(text, "\n"), 0, &jerr);
    TB_REQUIRE(step, "metrics line: %s", jerr.text);
    json_t *moe = json_object_get(step, "moe");
    TB_REQUIRE(json_is_array(moe) && json_array_size(moe) == 1, "one MoE layer (layer 0 of 2 at freq 2)");
    json_t *l0 = json_array_get(moe, 0), *counts = json_object_get(l0, "tokens_per_expert");
    json_int_t sum = 0, max = 0;
    for (size_t e = 0; e < json_array_size(counts); e++) {
        json_int_t n = json_integer_value(json_array_get(counts, e));
        sum += n, max = n > max ? n : max;
    }
    TB_CHECK(json_integer_value(json_object_get(l0, "layer")) == 0 && json_array_size(counts) == 4 && sum == 64 &&
                 json_integer_value(json_object_get(l0, "routed_tokens")) == 64,
             "layer 0: %zu experts, %lld tokens (want 4 and 2 x 16 x 2 = 64)", json_array_size(counts), (long long)sum);
    TB_CHECK(fabs(json_real_value(json_object_get(l0, "max_over_mean")) - max / 16.0) < 1e-12, "max over mean");
    TB_CHECK(json_is_integer(json_object_get(l0, "dropped_tokens")) &&
                 json_integer_value(json_object_get(l0, "dropped_tokens")) == 0,
             "no capacity: no token dropped");
    TB_CHECK(json_real_value(json_object_get(l0, "load_balancing_loss")) > 0, "load-balancing loss");
    json_decref(step);
    free(text);
    tb_output_free(&sh);
}

// ---------------------------------------------------------------------------------------
// Layouts against the single rank: per-step losses and gradient norms (the norm sums every
// gradient of every rank once: a misplaced or missing expert reduction changes it)

#define LAYOUT_STEPS 4

typedef struct layout_job {
    const tb_config *cfg;
    double loss[LAYOUT_STEPS], norm[LAYOUT_STEPS];
    size_t expert_floats;  // rank 0's expert parameters
    double flops;          // rank 0's FLOPs per token (its chunks)
    size_t shard_floats;   // rank 0's optimizer shard (its chunks)
    size_t dense_floats, buffer_floats;  // rank 0's buffer: the dense range [0, experts_offset), the whole
    double lb[4];          // rank 0's last step's load-balancing loss per layer (its first chunk)
    atomic_int failed;
} layout_job;

static void layout_rank(tb_rank *rk, void *arg) {
    layout_job *j = arg;
    tb_trainer tr;
    if (rank_trainer(rk, j->cfg, &tr) != 0) {
        j->failed = 1;
        return;
    }
    for (int s = 1; s <= LAYOUT_STEPS; s++) {
        tb_step_result r = train_step(&tr, s);
        if (rk->rank == 0) j->loss[s - 1] = r.loss, j->norm[s - 1] = r.grad_norm;
    }
    if (rk->rank == 0 && tr.models[0].block.moe_stats.num_layers >= 4)
        for (int l = 0; l < 4; l++) j->lb[l] = tr.models[0].block.moe_stats.load_balancing_loss[l];
    if (rk->rank == 0)
        for (int c = 0; c < tr.nchunks; c++)
            j->expert_floats += tr.models[c].expert_parameters, j->flops += gpt_chunk_flops_per_token(&tr.models[c]),
            j->shard_floats += tr.opts[c].shard_numel, j->dense_floats += tr.models[c].experts_offset,
            j->buffer_floats += tr.models[c].padded_parameters;
    trainer_free(&tr);
}

static int train_layout(tb_config *cfg, layout_job *j) {
    memset(j, 0, sizeof *j);
    j->cfg = cfg;
    return run_world(cfg, layout_rank, j) == 0 && !j->failed ? 0 : -1;
}

// Data parallelism (each replica routes its own microbatches; the aux loss is per microbatch,
// as on one rank running them), the distributed optimizer, the pipeline, and expert
// parallelism with the all-to-all dispatcher: each ep rank holds E / ep experts and runs the
// tokens every rank routes to them; expert gradients sum every dp rank's tokens, averaged
// over dp × cp and reduced over expert-dp where ep < dp.
// Tensor and sequence parallelism (Megatron: MoE under tp runs sequence parallel): each tp
// rank routes its own shard of the sequence, the router replicated over tp (its gradient a
// partial sum reduced over tp, like a norm's) and the load-balancing loss counting tokens
// over the tp group (switch_load_balancing_loss_func's sequence_partition_group); at etp 1
// the experts are whole on every tp rank and their gradients reduced over expert-dp (which
// holds the tp ranks); at etp > 1 each expert is split (fc1 column-, fc2 row-parallel) and the
// all-to-all dispatcher all-gathers the tokens over etp after the all-to-all over ep and
// reduce-scatters the partial sums before the all-to-all back. Biases on: fc1's split over
// etp, fc2's added once (etp rank 0). The all-gather dispatcher (Megatron's
// MoEAllGatherTokenDispatcher): every rank of the ep x etp grid gathers every rank's tokens and
// routing, runs its experts on those routed to them, and the partial outputs are
// reduce-scattered back.
TB_TEST(moe_layouts_match_the_single_rank) {
    tb_config base;
    moe_config(&base);
    base.global_batch_size = 8, base.micro_batch_size = 1, base.lr = 3e-3, base.collective_timeout = 60;
    base.num_experts = 8, base.moe_token_dispatcher_type = TB_MOE_DISPATCHER_ALLTOALL;
    layout_job single, j;
    tb_config one = base;
    TB_REQUIRE(train_layout(&one, &single) == 0, "single rank");
    static const struct {
        const char *name;
        int world, ep, pp, distopt, tp, etp, allgather;
    } layouts[] = {{"dp 2", 2, 1, 1, 0, 1, 1, 0},
                   {"dp 2 + dist-opt", 2, 1, 1, 1, 1, 1, 0},
                   {"pp 2 x dp 2", 4, 1, 2, 0, 1, 1, 0},
                   {"ep 2", 2, 2, 1, 0, 1, 1, 0},
                   {"ep 4", 4, 4, 1, 0, 1, 1, 0},
                   {"ep 2 x expert-dp 2", 4, 2, 1, 0, 1, 1, 0},
                   {"ep 2 x pp 2", 4, 2, 2, 0, 1, 1, 0},
                   {"ep 8", 8, 8, 1, 0, 1, 1, 0},
                   {"tp 2 sp, etp 1", 2, 1, 1, 0, 2, 1, 0},
                   {"tp 2 sp, etp 2", 2, 1, 1, 0, 2, 2, 0},
                   {"tp 2 sp, etp 1 x ep 2", 4, 2, 1, 0, 2, 1, 0},
                   {"tp 2 sp, etp 2 x ep 2", 4, 2, 1, 0, 2, 2, 0},
                   {"tp 2 sp, etp 1 x ep 4", 4, 4, 1, 0, 2, 1, 0},
                   {"dp 2, etp 2", 2, 1, 1, 0, 1, 2, 0},
                   {"dp 4, etp 2 x ep 2", 4, 2, 1, 0, 1, 2, 0},
                   {"tp 2 sp x pp 2, etp 2", 4, 1, 2, 0, 2, 2, 0},
                   {"allgather: ep 2", 2, 2, 1, 0, 1, 1, 1},
                   {"allgather: ep 4", 4, 4, 1, 0, 1, 1, 1},
                   {"allgather: ep 2 x edp 2", 4, 2, 1, 0, 1, 1, 1},
                   {"allgather: dp 2, etp 2", 2, 1, 1, 0, 1, 2, 1},
                   {"allgather: tp 2 sp, etp 2 x ep 2", 4, 2, 1, 0, 2, 2, 1},
                   {"allgather: tp 2 sp, etp 1", 2, 1, 1, 0, 2, 1, 1},
                   // the distributed optimizer: the experts' state sharded over expert-dp (2: buckets of 5000)
                   {"ep 2 + dist-opt", 2, 2, 1, 1, 1, 1, 0},
                   {"ep 2 x edp 2 + dist-opt", 4, 2, 1, 1, 1, 1, 0},
                   {"ep 2 x edp 2 + dist-opt, buckets", 4, 2, 1, 2, 1, 1, 0},
                   {"tp 2 sp, etp 1 + dist-opt", 2, 1, 1, 1, 2, 1, 0},
                   {"allgather: dp 4, etp 2 x ep 2 + dist-opt", 4, 2, 1, 2, 1, 2, 1},
                   // --overlap-grad-reduce (3; 4: with the distributed optimizer and --overlap-param-gather,
                   // buckets of 5000): the experts' buckets reduced over expert-dp by the comm thread
                   {"ep 2 x edp 2 + overlap", 4, 2, 1, 3, 1, 1, 0},
                   {"ep 2 x edp 2 + overlap, dist-opt", 4, 2, 1, 4, 1, 1, 0},
                   {"tp 2 sp, etp 1 x ep 2 + overlap, dist-opt", 4, 2, 1, 4, 2, 1, 0}};
    for (size_t i = 0; i < sizeof layouts / sizeof *layouts; i++) {
        tb_config c = base;
        c.world_size = layouts[i].world, c.expert_model_parallel_size = layouts[i].ep;
        const int distopt = layouts[i].distopt;
        c.pipeline_model_parallel_size = layouts[i].pp;
        c.use_distributed_optimizer = distopt == 1 || distopt == 2 || distopt == 4;
        c.overlap_grad_reduce = distopt >= 3, c.overlap_param_gather = distopt == 4;
        if (distopt >= 2) c.ddp_bucket_size = 5000;
        c.tensor_model_parallel_size = layouts[i].tp, c.sequence_parallel = layouts[i].tp > 1;
        c.expert_tensor_parallel_size = layouts[i].etp;
        if (layouts[i].allgather) c.moe_token_dispatcher_type = TB_MOE_DISPATCHER_ALLGATHER;
        if (train_layout(&c, &j) != 0) {
            TB_CHECK(0, "%s: training failed", layouts[i].name);
            continue;
        }
        double worst = 0;
        for (int s = 0; s < LAYOUT_STEPS; s++) {
            const double rl = fabs(j.loss[s] - single.loss[s]) / fabs(single.loss[s]);
            const double rn = fabs(j.norm[s] - single.norm[s]) / fabs(single.norm[s]);
            worst = fmax(worst, fmax(rl, rn));
            TB_CHECK(rl <= 1e-5 && rn <= 1e-5, "%s: step %d loss %.9g grad norm %.9g vs single rank %.9g %.9g",
                     layouts[i].name, s + 1, j.loss[s], j.norm[s], single.loss[s], single.norm[s]);
        }
        // rank 0 holds its ep share of the experts (of its stage's MoE layers under pp), each
        // split over etp but for its fc2 bias (C floats per expert of the 2 MoE layers)
        const size_t ep = (size_t)layouts[i].ep, etp = (size_t)layouts[i].etp, pp = (size_t)layouts[i].pp;
        const size_t fc2_bias = 2 * (size_t)base.num_experts * (size_t)base.hidden_size;
        const size_t want = (single.expert_floats - fc2_bias) / ep / etp / pp + fc2_bias / ep / pp;
        TB_CHECK(j.expert_floats == want, "%s: rank 0 holds %zu expert floats, want %zu", layouts[i].name,
                 j.expert_floats, want);
        // the distributed optimizer's shard: the dense range's 1/dp, the experts' 1/expert-dp
        if (c.use_distributed_optimizer) {
            const size_t dp = (size_t)(layouts[i].world / layouts[i].tp / layouts[i].pp);
            const size_t edp = (size_t)layouts[i].world / etp / ep / pp;
            const size_t shard = j.dense_floats / dp + (j.buffer_floats - j.dense_floats) / edp;
            TB_CHECK(j.shard_floats == shard, "%s: rank 0's optimizer shard %zu floats, want %zu (dp %zu, edp %zu)",
                     layouts[i].name, j.shard_floats, shard, dp, edp);
        }
        // without pp, tp and etp a rank computes, per token, what the single rank does: its
        // experts run the tokens of all ep ranks
        if (layouts[i].pp == 1 && layouts[i].tp == 1 && layouts[i].etp == 1)
            TB_CHECK(j.flops == single.flops, "%s: rank 0's FLOPs per token %.17g, single rank %.17g", layouts[i].name,
                     j.flops, single.flops);
        printf("    %-40s loss and grad norm within %.1e of the single rank; rank 0: %zu of %zu expert floats\n",
               layouts[i].name, worst, j.expert_floats, single.expert_floats);
    }
}

// base at world ranks of dp (ep 1), then of ep `ep`, against the single rank: per-step losses
// and gradient norms within 1e-5.
static void dp_and_ep_match_the_single_rank(const tb_config *base, int world, int ep) {
    layout_job single, j;
    tb_config one = *base;
    TB_REQUIRE(train_layout(&one, &single) == 0, "single rank");
    const int eps[2] = {1, ep};
    for (int i = 0; i < 2; i++) {
        tb_config c = *base;
        c.world_size = world, c.expert_model_parallel_size = eps[i];
        TB_REQUIRE(train_layout(&c, &j) == 0, "dp %d, ep %d", world, eps[i]);
        for (int s = 0; s < LAYOUT_STEPS; s++)
            TB_CHECK(fabs(j.loss[s] - single.loss[s]) <= 1e-5 * fabs(single.loss[s]) &&
                         fabs(j.norm[s] - single.norm[s]) <= 1e-5 * fabs(single.norm[s]),
                     "dp %d, ep %d: step %d loss %.9g grad norm %.9g vs single rank %.9g %.9g", world, eps[i], s + 1,
                     j.loss[s], j.norm[s], single.loss[s], single.norm[s]);
    }
}

// With a capacity each rank drops over its own microbatch's capacity, as the single rank
// does microbatch by microbatch: data and expert parallelism keep the same drops. A shared
// expert is a dense module: every ep rank holds it, its gradients reduced over dp.
TB_TEST(moe_with_capacity_and_a_shared_expert_under_dp_and_ep_matches_the_single_rank) {
    tb_config base;
    moe_config(&base);
    base.global_batch_size = 4, base.micro_batch_size = 1, base.lr = 3e-3, base.collective_timeout = 60;
    base.moe_token_dispatcher_type = TB_MOE_DISPATCHER_ALLTOALL, base.moe_expert_capacity_factor = 1.0;
    base.moe_shared_expert_intermediate_size = 16;
    dp_and_ep_match_the_single_rank(&base, 4, 4);
    // and tokens were dropped (top-2 of 4 at factor 1: an expert takes 8 of a microbatch's 32 choices)
    moe_run r;
    tb_config c = base;
    TB_REQUIRE(train_moe(&c, &r) == 0, "train");
    TB_CHECK(r.dropped[0] > 0 && r.dropped[0] + r.tokens[0][0] + r.tokens[0][1] + r.tokens[0][2] + r.tokens[0][3] == 4 * 32,
             "layer 0: %lld dropped of 128", (long long)r.dropped[0]);
    for (int e = 0; e < 4; e++) TB_CHECK(r.tokens[0][e] <= 4 * 8, "expert %d took %lld > capacity", e, (long long)r.tokens[0][e]);
}

// --dump-tensors under expert (and expert tensor) parallelism: every expert of each layer
// gathered over ep (and etp) under its global name, so the file holds the single rank's
// tensors: the same names and shapes, in the same order, the values within the layouts'
// tolerance (the forward's outputs, gradients and parameters after the step).
static int dump_names(tb_safetensors *st, const char *dir) {
    char path[1024];
    snprintf(path, sizeof path, "%s/tensors/step-0000002.rank-00000.safetensors", dir);
    tb_error err;
    return tb_safetensors_open(st, path, &err);
}

TB_TEST(dump_tensors_under_ep_and_etp_holds_the_single_ranks_tensors) {
    static const char *const runs[] = {"single", "ep2", "etp2_ep2"};
    static const char *const flags[] = {"", "--world-size 2 --expert-model-parallel-size 2",
                                        "--world-size 4 --expert-model-parallel-size 2 --expert-tensor-parallel-size 2 "
                                        "--use-distributed-optimizer"};
    char root[512], dir[3][768];
    tb_tmp_path(root, sizeof root, "moe_dump");
    tb_output sh = {0};
    for (int r = 0; r < 3; r++) {
        snprintf(dir[r], sizeof dir[r], "%s/%s", root, runs[r]);
        int status = tb_run(&sh, NULL,
                            "rm -rf '%s' && '%s' --num-layers 2 --hidden-size 32 --num-attention-heads 2 "
                            "--seq-length 16 --vocab-size 64 --micro-batch-size 1 --global-batch-size 4 --train-iters 2 "
                            "--num-experts 4 --moe-router-topk 2 --moe-ffn-hidden-size 24 --moe-aux-loss-coeff 0.01 "
                            "--moe-token-dispatcher-type alltoall --num-threads 1 --dump-tensors 2 %s --run-dir '%s'",
                            dir[r], PRETRAIN, flags[r], dir[r]);
        TB_REQUIRE(status == 0, "%s: exit %d: %s", runs[r], status, sh.err);
    }
    tb_safetensors one;
    TB_REQUIRE(dump_names(&one, dir[0]) == 0, "the single rank's dump");
    for (int r = 1; r < 3; r++) {
        tb_safetensors st;
        TB_REQUIRE(dump_names(&st, dir[r]) == 0, "%s's dump", runs[r]);
        TB_CHECK(st.ntensors == one.ntensors, "%s: %d tensors, the single rank %d", runs[r], st.ntensors,
                 one.ntensors);
        int experts = 0, worst = -1;
        double worst_rel = 0;
        for (int i = 0; i < one.ntensors; i++) {
            const tb_st_tensor *a = &one.tensors[i], *b = tb_safetensors_find(&st, a->name);
            if (!b || b->ndim != a->ndim || b->shape[0] != a->shape[0] || b->shape[1] != a->shape[1]) {
                TB_CHECK(0, "%s: %s missing or of another shape", runs[r], a->name);
                continue;
            }
            // the same place in the file (tensors in data order: the order they were kept)
            TB_CHECK(i < st.ntensors && !strcmp(st.tensors[i].name, a->name), "%s: tensor %d is %s, the single rank's %s",
                     runs[r], i, i < st.ntensors ? st.tensors[i].name : "-", a->name);
            experts += strstr(a->name, ".mlp.experts.") != NULL;
            // values: the forward's, every gradient and moment, and the MoE parameters before and
            // after the step (a dense parameter whose gradient is rounding noise, the key bias's,
            // moves by Adam's normalisation of that noise: not a property of the layouts, and
            // tracebook bisect bounds it by the update, experiments/bisect.c)
            if ((!strncmp(a->name, "param/", 6) || !strncmp(a->name, "param.before/", 13)) && !strstr(a->name, ".mlp."))
                continue;
            const int64_t n = tb_st_tensor_numel(a);
            float *x = malloc((size_t)n * sizeof *x), *y = malloc((size_t)n * sizeof *y);
            tb_error err;
            TB_REQUIRE(tb_safetensors_read_f32(&one, a, x, &err) == 0 && tb_safetensors_read_f32(&st, b, y, &err) == 0,
                       "read %s", a->name);
            double num = 0, den = 0;
            for (int64_t k = 0; k < n; k++) num += (double)(x[k] - y[k]) * (x[k] - y[k]), den += (double)x[k] * x[k];
            const double rel = den > 0 ? sqrt(num / den) : sqrt(num);
            if (rel > worst_rel) worst_rel = rel, worst = i;
            free(x);
            free(y);
        }
        TB_CHECK(worst_rel <= 1e-5, "%s: %s differs from the single rank's by %.2e (relative L2)", runs[r],
                 worst >= 0 ? one.tensors[worst].name : "", worst_rel);
        // 2 MoE layers x 4 experts x 4 tensors, as gradients, parameters before and after the
        // step, and both AdamW moments
        TB_CHECK(experts == 2 * 4 * 4 * 5, "%s: %d expert tensors", runs[r], experts);
        printf("    %-10s %d tensors (%d of experts) as the single rank's, within %.1e\n", runs[r], st.ntensors, experts,
               worst_rel);
        tb_safetensors_close(&st);
    }
    tb_safetensors_close(&one);
    tb_output_free(&sh);
}

// The shared expert under tensor parallelism is the dense MLP's pair (Megatron's
// SharedExpertMLP): the tokens gathered over the sequence-parallel region, fc1 column- and fc2
// row-parallel (its bias a partial sum reduced over tp), beside the routed experts.
TB_TEST(a_shared_expert_under_tensor_parallelism_matches_the_single_rank) {
    tb_config base;
    moe_config(&base);
    base.global_batch_size = 4, base.micro_batch_size = 1, base.lr = 3e-3, base.collective_timeout = 60;
    base.moe_token_dispatcher_type = TB_MOE_DISPATCHER_ALLTOALL, base.moe_shared_expert_intermediate_size = 16;
    layout_job single, j;
    tb_config one = base;
    TB_REQUIRE(train_layout(&one, &single) == 0, "single rank");
    static const struct {
        const char *name;
        int world, tp, etp, ep;
    } layouts[] = {{"tp 2 sp, etp 2", 2, 2, 2, 1}, {"tp 2 sp, etp 1 x ep 2", 4, 2, 1, 2}};
    for (int i = 0; i < 2; i++) {
        tb_config c = base;
        c.world_size = layouts[i].world, c.tensor_model_parallel_size = layouts[i].tp, c.sequence_parallel = 1;
        c.expert_tensor_parallel_size = layouts[i].etp, c.expert_model_parallel_size = layouts[i].ep;
        TB_REQUIRE(train_layout(&c, &j) == 0, "%s", layouts[i].name);
        for (int s = 0; s < LAYOUT_STEPS; s++)
            TB_CHECK(fabs(j.loss[s] - single.loss[s]) <= 1e-5 * fabs(single.loss[s]) &&
                         fabs(j.norm[s] - single.norm[s]) <= 1e-5 * fabs(single.norm[s]),
                     "%s: step %d loss %.9g grad norm %.9g vs single rank %.9g %.9g", layouts[i].name, s + 1, j.loss[s],
                     j.norm[s], single.loss[s], single.norm[s]);
    }
}

// --moe-pad-expert-input-to-capacity (Megatron's): each expert's input padded with zero rows
// to its capacity; the padding's outputs are read by no token and its gradients are zero, so
// training is the unpadded run's (within rounding: the experts' GEMMs sum over more rows) and
// the statistics count the routed tokens only; under ep the padded rows travel in the A2A.
TB_TEST(padding_expert_inputs_to_capacity_trains_as_unpadded) {
    const double factors[2] = {1.0, 2.0};
    for (int f = 0; f < 2; f++) {
        tb_config c;
        moe_config(&c);
        c.moe_token_dispatcher_type = TB_MOE_DISPATCHER_ALLTOALL, c.moe_expert_capacity_factor = factors[f];
        moe_run plain, padded;
        TB_REQUIRE(train_moe(&c, &plain) == 0, "train at capacity factor %g", factors[f]);
        c.moe_pad_expert_input_to_capacity = 1;
        TB_REQUIRE(train_moe(&c, &padded) == 0, "train padded at capacity factor %g", factors[f]);
        for (int s = 0; s < 3; s++)
            TB_CHECK(fabs(plain.loss[s] - padded.loss[s]) <= 1e-6 * fabs(plain.loss[s]),
                     "factor %g, step %d: loss %.9g, padded %.9g", factors[f], s + 1, plain.loss[s], padded.loss[s]);
        TB_CHECK(!memcmp(plain.tokens, padded.tokens, sizeof plain.tokens) &&
                     !memcmp(plain.dropped, padded.dropped, sizeof plain.dropped),
                 "factor %g: the padding counted in the statistics", factors[f]);
        // and the experts ran the padded rows: capacity 16 (factor 1, with drops) or 32 rows per
        // expert of a microbatch's 64 choices
        TB_CHECK(padded.peak_activations > plain.peak_activations, "factor %g: peak activations %zu padded, %zu not",
                 factors[f], padded.peak_activations, plain.peak_activations);
    }
    // ep 4 x dp 4 padded against the single rank unpadded
    tb_config base;
    moe_config(&base);
    base.global_batch_size = 4, base.micro_batch_size = 1, base.lr = 3e-3, base.collective_timeout = 60;
    base.moe_token_dispatcher_type = TB_MOE_DISPATCHER_ALLTOALL, base.moe_expert_capacity_factor = 1.0;
    layout_job single, j;
    tb_config one = base, c = base;
    TB_REQUIRE(train_layout(&one, &single) == 0, "single rank");
    c.world_size = 4, c.expert_model_parallel_size = 4, c.moe_pad_expert_input_to_capacity = 1;
    TB_REQUIRE(train_layout(&c, &j) == 0, "ep 4, padded");
    for (int s = 0; s < LAYOUT_STEPS; s++)
        TB_CHECK(fabs(j.loss[s] - single.loss[s]) <= 1e-5 * fabs(single.loss[s]) &&
                     fabs(j.norm[s] - single.norm[s]) <= 1e-5 * fabs(single.norm[s]),
                 "ep 4 padded: step %d loss %.9g grad norm %.9g vs single rank %.9g %.9g", s + 1, j.loss[s], j.norm[s],
                 single.loss[s], single.norm[s]);
}

// A small MoE model of sigmoid scores, its aux loss trained on, for the layouts.
static void sigmoid_config(tb_config *base) {
    moe_config(base);
    base->global_batch_size = 4, base->micro_batch_size = 1, base->lr = 3e-3, base->collective_timeout = 60;
    base->moe_token_dispatcher_type = TB_MOE_DISPATCHER_ALLTOALL, base->moe_aux_loss_coeff = 0.1;
    base->moe_router_score_function = TB_MOE_SCORE_SIGMOID;
}

// Sigmoid scores with the sequence-level aux loss trained on: dp 2 and ep 2 as the single rank
// (each rank's microbatches are whole sequences), and a loss reported.
TB_TEST(sigmoid_router_with_seq_aux_loss_under_dp_and_ep_matches_the_single_rank) {
    tb_config base;
    sigmoid_config(&base);
    base.moe_router_load_balancing_type = TB_MOE_LB_SEQ_AUX_LOSS;
    dp_and_ep_match_the_single_rank(&base, 2, 2);
    // the loss is trained on: the coefficient changes step 3; and it is reported
    moe_run with, without;
    tb_config c = base;
    TB_REQUIRE(train_moe(&c, &with) == 0, "train");
    c.moe_aux_loss_coeff = 0;
    TB_REQUIRE(train_moe(&c, &without) == 0, "train without the coefficient");
    TB_CHECK(with.loss[2] != without.loss[2] && with.lb[0] > 0, "seq_aux_loss trained on (%.9g vs %.9g), reported %g",
             with.loss[2], without.loss[2], with.lb[0]);
}

// Sigmoid scores under tensor (sequence) parallelism: each tp rank routes its shard and the
// load-balancing loss sums the sigmoid scores normalised over every expert across the tp group
// (sequence_parallel_aux_loss, as router_aux_loss on one rank): the losses, gradient norms and
// the reported aux loss of each MoE layer are the single rank's, at etp 1 and etp 2.
TB_TEST(sigmoid_router_under_tensor_parallelism_matches_the_single_rank) {
    tb_config base;
    sigmoid_config(&base);
    layout_job single, j;
    tb_config one = base;
    TB_REQUIRE(train_layout(&one, &single) == 0, "single rank");
    TB_CHECK(single.lb[0] > 0 && single.lb[2] > 0, "the single rank reports aux losses %g %g", single.lb[0],
             single.lb[2]);
    const int etps[2] = {1, 2};
    for (int i = 0; i < 2; i++) {
        tb_config c = base;
        c.world_size = 2, c.tensor_model_parallel_size = 2, c.sequence_parallel = 1;
        c.expert_tensor_parallel_size = etps[i];
        TB_REQUIRE(train_layout(&c, &j) == 0, "tp 2 sp, etp %d", etps[i]);
        for (int s = 0; s < LAYOUT_STEPS; s++)
            TB_CHECK(fabs(j.loss[s] - single.loss[s]) <= 1e-5 * fabs(single.loss[s]) &&
                         fabs(j.norm[s] - single.norm[s]) <= 1e-5 * fabs(single.norm[s]),
                     "tp 2 sp, etp %d: step %d loss %.9g grad norm %.9g vs single rank %.9g %.9g", etps[i], s + 1,
                     j.loss[s], j.norm[s], single.loss[s], single.norm[s]);
        for (int l = 0; l < 4; l += 2)
            TB_CHECK(fabs(j.lb[l] - single.lb[l]) <= 1e-5 * fabs(single.lb[l]),
                     "tp 2 sp, etp %d: layer %d aux loss %.9g, the single rank %.9g", etps[i], l, j.lb[l],
                     single.lb[l]);
    }
}

// The expert grid beside the dense one, as --print-rank-layout shows it (world 4, ep 2:
// expert-dp 2).
TB_TEST(print_rank_layout_shows_the_expert_grid_and_its_groups) {
    tb_output sh = {0};
    int status = tb_run(&sh, NULL,
                        "'%s' --print-rank-layout --world-size 4 --num-experts 8 --expert-model-parallel-size 2 "
                        "--moe-token-dispatcher-type alltoall",
                        PRETRAIN);
    TB_REQUIRE(status == 0, "exit %d: %s", status, sh.err);
    static const char *const want[] = {
        "experts: world 4 = etp 1 x ep 2 x expert-dp 2 x pp 1 (order etp-ep-edp-pp)\n",
        "rank 1 (tp0 cp0 dp1 pp0) experts (etp0 ep1 edp0 pp0)\n",
        "rank 2 (tp0 cp0 dp2 pp0) experts (etp0 ep0 edp1 pp0)\n",
        "  world     [0, 1, 2, 3]\n  pp_grad   [1]\n  ep        [0, 1]\n  etp       [1]\n  expert_dp [1, 3]\n",
        "  ep        [2, 3]\n  etp       [2]\n  expert_dp [0, 2]\n",
    };
    for (size_t i = 0; i < sizeof want / sizeof *want; i++)
        TB_CHECK(strstr(sh.out, want[i]), "no \"%s\" in:\n%s", want[i], sh.out);
    tb_output_free(&sh);
}

int main(void) {
    cpu_set_num_threads(2);
    TB_RUN(router_takes_the_top_k_largest_first_ties_to_the_lower_expert);
    TB_RUN(load_balancing_loss_is_switch_transformers_and_one_when_balanced);
    TB_RUN(sigmoid_router_takes_the_top_k_scores_and_normalises_their_probs);
    TB_RUN(seq_aux_loss_is_the_switch_loss_per_sequence_averaged);
    TB_RUN(permutation_groups_tokens_by_expert_in_token_order_and_combine_weights_by_probs);
    TB_RUN(capacity_drops_the_lowest_probs_or_the_last_positions);
    TB_RUN(grouped_gemm_is_bitwise_the_per_expert_gemms);
    TB_RUN(a_step_counts_every_routed_token_once_with_or_without_recompute);
    TB_RUN(grouped_gemm_trains_to_the_per_expert_bits);
    TB_RUN(aux_loss_coefficient_changes_training_and_none_reports_no_loss);
    TB_RUN(pretrain_gpt_writes_the_load_statistics_of_each_moe_layer);
    TB_RUN(print_rank_layout_shows_the_expert_grid_and_its_groups);
    TB_RUN(moe_layouts_match_the_single_rank);
    TB_RUN(dump_tensors_under_ep_and_etp_holds_the_single_ranks_tensors);
    TB_RUN(moe_with_capacity_and_a_shared_expert_under_dp_and_ep_matches_the_single_rank);
    TB_RUN(a_shared_expert_under_tensor_parallelism_matches_the_single_rank);
    TB_RUN(padding_expert_inputs_to_capacity_trains_as_unpadded);
    TB_RUN(sigmoid_router_with_seq_aux_loss_under_dp_and_ep_matches_the_single_rank);
    TB_RUN(sigmoid_router_under_tensor_parallelism_matches_the_single_rank);
    return tb_test_summary();
}
