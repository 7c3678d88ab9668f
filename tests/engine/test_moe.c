// The MoE layer's semantics on hand-made routing (the gradients are test_gradcheck's, the
// parallel layouts test_parallel's): the router's top-k and probs as Megatron's TopKRouter,
// the load-balancing loss as switch_load_balancing_loss_func, the permutation grouped by
// expert in token order and the combine weighted by the probs; and, through the trainer,
// the load statistics a step records (every routed token counted once, recompute or not)
// and written to the metrics by pretrain_gpt; Megatron's sigmoid scores and sequence-level
// aux loss on hand values. (The layouts against the single rank: test_moe_layouts.c.)
#include <jansson.h>
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/kernels.h"
#include "config/config.h"
#include "core/safetensors.h"
#include "tb_run_dir.h"
#include "tb_shell.h"
#include "tb_test.h"
#include "moe_cases.h"
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
    return tb_test_summary();
}
