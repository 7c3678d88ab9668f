// test_plan.c — the parallel-configuration planner (experiments/planner/plan.h, `tracebook plan`):
// exact parameter counts (GPT-2 124M as the engine counts them, LLaMA-2-70B), per-rank
// counts summing to the model over tp x pp, the rules identical to the engine's config
// validation over random shapes, Korthikanti's formula in its closed form, every plan
// figure of the small layouts equal to what the engine measures (--verify), bad input; MoE:
// expert counts per ep rank summing to the model, the MoE rules identical to the engine's, ep
// enumerated, the all-to-all and expert-dp bytes of the stated model.
#include <jansson.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/config.h"
#include "planner/plan.h"
#include "tb_shell.h"
#include "tb_test.h"

#if defined(__SANITIZE_ADDRESS__)
#define TB_UNDER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TB_UNDER_ASAN 1
#endif
#endif

#define TRACEBOOK TB_BIN_DIR "/tracebook"
#define LLAMA70B                                                                                                 \
    "--num-layers 80 --hidden-size 8192 --num-attention-heads 64 --num-query-groups 8 --ffn-hidden-size 28672 " \
    "--vocab-size 32000 --seq-length 4096 --swiglu --normalization RMSNorm --position-embedding-type rope "      \
    "--untie-embeddings-and-output-weights --disable-bias-linear"
#define GPT2_124M                                                                                              \
    "--num-layers 12 --hidden-size 768 --num-attention-heads 12 --seq-length 16 --max-position-embeddings 1024 " \
    "--vocab-size 50257"

// A config from a flag line, as pretrain_gpt parses it.
static int config_from(tb_config *c, const char *flags, tb_error *err) {
    char *copy = strdup(flags), *argv[128];
    int argc = 0;
    argv[argc++] = "pretrain_gpt";
    for (char *t = strtok(copy, " "); t && argc < 127; t = strtok(NULL, " ")) argv[argc++] = t;
    config_defaults(c);
    int help = 0, rc = config_parse_args(c, argc, argv, &help, err);
    free(copy);
    if (rc == 0) config_resolve(c);
    return rc;
}

static tb_plan_cluster fp32_cluster(int gpus) {
    tb_plan_cluster cl = {gpus, 8, INT64_MAX, 989, 0.5, 450, 50, TB_PLAN_FP32};
    return cl;
}

TB_TEST(gpt2_124m_parameters_as_the_engine_counts_them) {
    tb_config c;
    tb_error err;
    TB_REQUIRE(config_from(&c, GPT2_124M, &err) == 0, "%s", err.msg);
    // 124,475,904: llm.c's count of GPT-2 124M with the vocabulary padded to 50,304
    TB_CHECK(plan_model_parameters(&c) == 124475904, "N = %lld", (long long)plan_model_parameters(&c));
    tb_plan_cluster cl = fp32_cluster(1);
    tb_plan p;
    TB_REQUIRE(plan_evaluate(&p, &c, &cl, 1, 1, 1, 1, 1, &err) == 0 && p.runs_here, "%s", p.rule);
    TB_CHECK(p.stages[0].params_held == 124475904 && p.stages[0].params_aligned == 124475904,
             "held %lld aligned %lld", (long long)p.stages[0].params_held, (long long)p.stages[0].params_aligned);
    TB_CHECK(p.stages[0].param_bytes == 4LL * 124475904 && p.stages[0].optimizer_bytes == 8LL * 124475904,
             "params %lld optimizer %lld bytes", (long long)p.stages[0].param_bytes, (long long)p.stages[0].optimizer_bytes);
#ifndef TB_UNDER_ASAN
    // the engine's own count: one step of GPT-2 124M (seq 16), its pipeline.json and memory peaks
    char dir[512];
    tb_tmp_path(dir, sizeof dir, "plan-gpt2-%ld", (long)getpid());
    tb_output o = {0};
    int rc = tb_run(&o, NULL, "'%s/pretrain_gpt' " GPT2_124M " --train-iters 1 --micro-batch-size 1 --run-dir '%s'",
                    TB_BIN_DIR, dir);
    TB_CHECK(rc == 0, "pretrain_gpt exited %d: %s", rc, o.err);
    char path[600];
    snprintf(path, sizeof path, "%s/pipeline.json", dir);
    json_t *pipe = tb_load_json(path);
    TB_CHECK(pipe && json_integer_value(json_object_get(json_array_get(json_object_get(pipe, "ranks"), 0),
                                                        "parameters")) == p.stages[0].params_aligned,
             "the engine's pipeline.json ranks[0].parameters differs from the plan's %lld",
             (long long)p.stages[0].params_aligned);
    json_decref(pipe);
    tb_output_free(&o);
    tb_shell(NULL, "rm -rf '%s'", dir);
#else
    printf("  (the GPT-2 124M engine run is skipped under AddressSanitizer: too slow; --verify covers the same code)\n");
#endif
    plan_free(&p);
}

TB_TEST(llama2_70b_parameters_and_per_rank_counts_sum_to_the_model) {
    tb_config c;
    tb_error err;
    TB_REQUIRE(config_from(&c, LLAMA70B " --global-batch-size 1024 --use-distributed-optimizer", &err) == 0, "%s", err.msg);
    // 68,976,648,192: LLaMA-2-70B's published count (vocab 32,000 is a multiple of 128)
    TB_CHECK(plan_model_parameters(&c) == 68976648192LL, "N = %lld", (long long)plan_model_parameters(&c));
    int checked = 0;
    const int tps[] = {1, 2, 4, 8}, pps[] = {1, 2, 4, 5, 8, 10, 16}, vpps[] = {1, 2, 4};
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 7; j++)
            for (int k = 0; k < 3; k++) {
                const int gpus = tps[i] * pps[j] * 2;
                tb_plan_cluster cl = fp32_cluster(gpus);
                cl.precision = TB_PLAN_BF16;
                tb_plan p;
                TB_REQUIRE(plan_evaluate(&p, &c, &cl, tps[i], 1, pps[j], vpps[k], 1, &err) == 0, "%s", err.msg);
                if (!p.legal) {
                    plan_free(&p);
                    continue;
                }
                // the vocabulary is padded to a multiple of 128 x tp (32,256 at tp 4, 32,768 at tp 8),
                // in the embedding and the untied output layer
                const int64_t unit = 128LL * tps[i], vp = (32000 + unit - 1) / unit * unit;
                const int64_t n = 68976648192LL + 2 * (vp - 32000) * 8192;
                int64_t sum = 0, layers = 0;
                for (int s = 0; s < p.nstages; s++) {
                    sum += p.stages[s].params_counted + (int64_t)(tps[i] - 1) * p.stages[s].params_counted_other_tp;
                    layers += p.stages[s].layers;
                }
                TB_CHECK(p.model_parameters == n && sum == n && layers == 80,
                         "tp %d pp %d vpp %d: N %lld, per-rank sum %lld, expected %lld; %lld layers", tps[i], pps[j],
                         vpps[k], (long long)p.model_parameters, (long long)sum, (long long)n, (long long)layers);
                checked++;
                plan_free(&p);
            }
    TB_CHECK(checked >= 40, "only %d legal layouts checked", checked);
}

// Korthikanti Table 2 / Megatron: tensor + sequence parallel + selective recompute keeps
// s·b·h·34/t per layer (18 + 4·ffn/h with ffn = 4h); the stage also holds its input stream
// (2sbh/t) and the fp32 logits (4·s·b·V/t).
TB_TEST(korthikanti_closed_form_for_sequence_parallel_selective) {
    tb_config c;
    tb_error err;
    TB_REQUIRE(config_from(&c, "--num-layers 8 --hidden-size 1024 --num-attention-heads 16 --seq-length 2048 "
                               "--vocab-size 32000 --global-batch-size 8 --sequence-parallel "
                               "--recompute-granularity selective", &err) == 0, "%s", err.msg);
    tb_plan_cluster cl = fp32_cluster(4);
    cl.precision = TB_PLAN_BF16;
    tb_plan p;
    TB_REQUIRE(plan_evaluate(&p, &c, &cl, 4, 1, 1, 1, 2, &err) == 0 && p.legal, "%s", p.rule);
    const double sbh = 2048.0 * 2 * 1024, t = 4;
    const double want = 8 * sbh * 34 / t + 2 * sbh / t + 4.0 * 2048 * 2 * p.cfg.padded_vocab_size / t;
    TB_CHECK(p.stages[0].activation_bytes == (int64_t)want, "activations %lld, Korthikanti %.0f",
             (long long)p.stages[0].activation_bytes, want);
    // 6 + 12/d bytes per parameter with the distributed optimizer is Megatron's; 18 without
    TB_CHECK(p.stages[0].param_bytes + p.stages[0].grad_bytes + p.stages[0].optimizer_bytes ==
                 18 * p.stages[0].params_held,
             "%lld bytes for %lld parameters", (long long)(p.stages[0].param_bytes + p.stages[0].grad_bytes +
                                                           p.stages[0].optimizer_bytes),
             (long long)p.stages[0].params_held);
    plan_free(&p);
}

// A small deterministic generator (the property test must be reproducible).
static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static int pick(int n) {
    rng_state ^= rng_state << 13, rng_state ^= rng_state >> 7, rng_state ^= rng_state << 17;
    return (int)(rng_state % (uint64_t)n);
}

// For random shapes and layouts, the engine's verdict on the command line a user would run
// (config_parse_args → config_resolve → config_validate) and the planner's on the same
// layout agree, with the same first rule.
TB_TEST(rules_identical_to_config_validation) {
    int legal = 0, refused = 0, disagree = 0;
    for (int trial = 0; trial < 400; trial++) {
        // mostly shapes that divide (so both verdicts are common), sometimes any
        const int tp = 1 << pick(3), cp = 1 + pick(3), pp = 1 + pick(4), nice = pick(4) != 0;
        const int heads = nice ? tp * (1 + pick(2)) : 1 + pick(8), hs = 4 * (1 + pick(4));
        const int groups = nice ? (heads % 2 == 0 && pick(2) ? heads / 2 : heads) : 1 + pick(heads);
        const int hidden = pick(8) ? heads * hs : heads * hs + 4, layers = nice ? pp * (1 + pick(3)) * 2 : 1 + pick(12);
        const int ffn = 8 * (1 + pick(16)), seq = 8 * (1 + pick(8));
        const int vpp = pick(3) ? 1 : 2 + pick(2), dp = 1 + pick(3), mbs = 1 + pick(3), gbs = mbs * dp * (1 + pick(8));
        const int world = tp * cp * pp * dp;
        if (world > 64) continue;
        const int sp = pick(2), distopt = pick(2), flash = pick(4) != 0, rec = pick(4);
        char model[1024], layout[1400];
        snprintf(model, sizeof model,
                 "--num-layers %d --hidden-size %d --num-attention-heads %d --num-query-groups %d --ffn-hidden-size %d "
                 "--seq-length %d --vocab-size 256 --global-batch-size %d%s%s%s%s",
                 layers, hidden, heads, groups, ffn, seq, gbs, sp && tp > 1 ? " --sequence-parallel" : "",
                 distopt ? " --use-distributed-optimizer" : "", flash ? " --attention-backend flash" : "",
                 rec == 1 ? " --recompute-granularity selective"
                 : rec == 2 ? " --recompute-granularity full --recompute-method uniform --recompute-num-layers 1"
                            : "");
        snprintf(layout, sizeof layout,
                 "%s --tensor-model-parallel-size %d --context-parallel-size %d --pipeline-model-parallel-size %d "
                 "--world-size %d --micro-batch-size %d%s",
                 model, tp, cp, pp, world, mbs, "");
        if (vpp > 1) snprintf(layout + strlen(layout), sizeof layout - strlen(layout),
                              " --virtual-pipeline-model-parallel-size %d", vpp);
        tb_config engine, base;
        tb_error err, rule;
        if (config_from(&engine, layout, &err) != 0 || config_from(&base, model, &err) != 0) {
            TB_CHECK(0, "flags refused: %s (%s)", err.msg, layout);
            continue;
        }
        const int ok = config_validate(&engine, &rule) == 0;
        if (!ok) {
            char *nl = strchr(rule.msg, '\n');
            if (nl) *nl = '\0';
        }
        tb_plan_cluster cl = fp32_cluster(world);
        tb_plan p;
        if (plan_evaluate(&p, &base, &cl, tp, cp, pp, vpp, mbs, &err) != 0) {
            TB_CHECK(0, "plan_evaluate failed: %s (%s)", err.msg, layout);
            continue;
        }
        const int same = p.runs_here == ok && (ok || !strcmp(p.rule, rule.msg));
        if (!same && disagree++ < 5)
            TB_CHECK(0, "%s\n    engine: %s; plan: %s (legal %d)", layout, ok ? "runs" : rule.msg,
                     p.runs_here ? "runs" : p.rule, p.legal);
        legal += ok;
        refused += !ok;
        plan_free(&p);
    }
    printf("  %d layouts the engine runs, %d it refuses, %d disagreements\n", legal, refused, disagree);
    TB_CHECK(legal >= 20 && refused >= 20, "the random shapes must cover both verdicts (%d, %d)", legal, refused);
}

// Every plan figure of the small layouts equals what the engine measured, and Korthikanti's
// 16-bit formula is 1.5-2.2x below the engine's fp32 activations (the stated band).
TB_TEST(verify_matches_the_engine) {
    char dir[512];
    tb_tmp_path(dir, sizeof dir, "plan-verify-%ld", (long)getpid());
    tb_output o = {0};
    int rc = tb_run(&o, NULL, "'%s' plan --verify --json --work-dir '%s'", TRACEBOOK, dir);
    TB_CHECK(rc == 0, "plan --verify exited %d: %s", rc, o.err);
    json_t *v = json_loads(o.out, 0, NULL);
    // the runs it keeps are not written over: a second verify into the same directory is refused
    tb_output again = {0};
    rc = tb_run(&again, NULL, "'%s' plan --verify --work-dir '%s'", TRACEBOOK, dir);
    TB_CHECK(rc == 2 && strstr(again.err, "--work-dir") && strstr(again.err, "not empty"),
             "a second verify: exit %d: %s", rc, again.err);
    tb_output_free(&again);
    TB_REQUIRE(v, "not JSON: %.300s", o.out);
    const json_int_t checks = json_integer_value(json_object_get(v, "exact_checks"));
    TB_CHECK(checks >= 200 && json_integer_value(json_object_get(v, "exact_failed")) == 0 &&
                 json_integer_value(json_object_get(v, "failed_runs")) == 0,
             "%lld exact checks, %lld differ, %lld runs failed", (long long)checks,
             (long long)json_integer_value(json_object_get(v, "exact_failed")),
             (long long)json_integer_value(json_object_get(v, "failed_runs")));
    size_t i;
    json_t *c;
    int ep_checked = 0;
    json_array_foreach(json_object_get(v, "cases"), i, c) {
        // the all-to-all dispatcher's bytes (a stage's mean) and the experts' expert-dp
        // reduction, each checked against the traces, not zero
        if (!strcmp(json_string_value(json_object_get(c, "name")), "MoE E4 top-2, ep2 x expert-dp2 x pp2")) {
            size_t k;
            json_t *chk;
            json_array_foreach(json_object_get(c, "checks"), k, chk) {
                const char *q = json_string_value(json_object_get(chk, "quantity"));
                if (strcmp(q, "comm bytes/step, ep (stage mean)") && strcmp(q, "comm bytes/step, group expert_dp")) continue;
                ep_checked++;
                TB_CHECK(json_is_true(json_object_get(chk, "exact")) &&
                             json_number_value(json_object_get(chk, "predicted")) > 0,
                         "%s: predicted %.0f, measured %.0f", q, json_number_value(json_object_get(chk, "predicted")),
                         json_number_value(json_object_get(chk, "measured")));
            }
        }
        json_t *r = json_object_get(c, "activations_over_korthikanti");
        double lo = json_real_value(json_object_get(r, "min")), hi = json_real_value(json_object_get(r, "max"));
        TB_CHECK(lo >= 1.5 && hi <= 2.2, "%s: measured / Korthikanti %.3f-%.3f",
                 json_string_value(json_object_get(c, "name")), lo, hi);
    }
    TB_CHECK(ep_checked == 2, "the ep x expert-dp x pp case checks its ep and expert_dp bytes (%d checks)", ep_checked);
    // MoE under tp 2 + sequence parallelism (both dispatchers): each rank's parameters exactly
    // the engine's (pipeline.json), the etp (at etp 2) and ep bytes' stage means the traces', and
    // the activations (the routing's rows) within 2% of the balanced router's estimate
    const char *tp_cases[] = {"MoE tp2 sp x etp2 x ep2, dist-opt", "MoE + shared, tp2 sp x etp1 x ep2",
                              "MoE tp2 sp x etp2 x ep2, allgather"};
    for (int t = 0; t < 3; t++) {
        int params = 0, etp = 0, ep = 0, acts = 0, found = 0;
        json_array_foreach(json_object_get(v, "cases"), i, c) {
            if (strcmp(json_string_value(json_object_get(c, "name")), tp_cases[t])) continue;
            found = 1;
            size_t k;
            json_t *chk;
            json_array_foreach(json_object_get(c, "checks"), k, chk) {
                const char *q = json_string_value(json_object_get(chk, "quantity"));
                const double pr = json_number_value(json_object_get(chk, "predicted")),
                             me = json_number_value(json_object_get(chk, "measured"));
                const int exact = json_is_true(json_object_get(chk, "exact"));
                if (!strcmp(q, "parameters (buffer, aligned)")) params += exact && pr > 0;
                if (!strcmp(q, "comm bytes/step, etp (stage mean)")) etp += exact && pr > 0;
                if (!strcmp(q, "comm bytes/step, ep (stage mean)")) ep += exact && pr > 0;
                if (!strcmp(q, "activation bytes (MoE ep, estimate)")) acts += fabs(me / pr - 1) <= 0.02;
            }
        }
        TB_CHECK(found && params == 4 && etp == (t != 1) && ep == 1 && acts == 4,
                 "%s: %d ranks' parameters exact, etp %d, ep %d exact, %d ranks' activations within 2%%", tp_cases[t],
                 params, etp, ep, acts);
    }
    json_decref(v);
    tb_output_free(&o);
    tb_shell(NULL, "rm -rf '%s'", dir);
}

TB_TEST(ranked_fitting_first_then_step_time) {
    tb_output o = {0};
    int rc = tb_run(&o, NULL, "'%s' plan --gpus 64 --bf16 " LLAMA70B " --global-batch-size 512 --use-distributed-optimizer "
                    "--sequence-parallel --recompute-granularity selective --json --top 0", TRACEBOOK);
    TB_REQUIRE(rc == 0, "exit %d: %s", rc, o.err);
    json_t *v = json_loads(o.out, 0, NULL);
    TB_REQUIRE(v, "not JSON");
    json_t *cands = json_object_get(v, "candidates");
    TB_CHECK(json_array_size(cands) == (size_t)json_integer_value(json_object_get(v, "legal")) &&
                 json_array_size(cands) > 100,
             "%zu candidates", json_array_size(cands));
    int seen_unfit = 0, ordered = 1;
    double last = 0;
    size_t i;
    json_t *c;
    json_array_foreach(cands, i, c) {
        const int fits = json_is_true(json_object_get(json_object_get(c, "peak"), "fits"));
        const double step = json_real_value(json_object_get(json_object_get(c, "estimate"), "step_s"));
        if (fits && seen_unfit) ordered = 0;
        if (fits && step < last) ordered = 0;
        if (fits) last = step;
        seen_unfit |= !fits;
        // every legal layout fills the 64 GPUs and the global batch
        const json_int_t tp = json_integer_value(json_object_get(c, "tp")), cp = json_integer_value(json_object_get(c, "cp"));
        const json_int_t pp = json_integer_value(json_object_get(c, "pp")), dp = json_integer_value(json_object_get(c, "dp"));
        const json_int_t mbs = json_integer_value(json_object_get(c, "micro_batch_size"));
        const json_int_t m = json_integer_value(json_object_get(c, "num_microbatches"));
        if (tp * cp * pp * dp != 64 || mbs * m * dp != 512) ordered = 0;
    }
    TB_CHECK(ordered && seen_unfit, "not ranked fits-first then by step time, or a layout not filling the cluster");
    json_decref(v);
    tb_output_free(&o);
}

TB_TEST(explain_the_70b_candidate) {
    tb_output o = {0};
    int rc = tb_run(&o, NULL, "'%s' plan --explain tp4,pp4,cp2,dp2 --bf16 " LLAMA70B " --global-batch-size 512 "
                    "--use-distributed-optimizer --sequence-parallel", TRACEBOOK);
    TB_REQUIRE(rc == 0, "exit %d: %s", rc, o.err);
    TB_CHECK(tb_has(o.out, "heads per tp rank 64 / 4 = 16, query groups 8 / 4 = 2"), "%s", o.out);
    TB_CHECK(tb_has(o.out, "global batch 512 = micro batch 1 x microbatches 256 x dp 2"), "%s", o.out);
    TB_CHECK(tb_has(o.out, "layers per stage: 20 20 20 20"), "%s", o.out);
    TB_CHECK(tb_has(o.out, "(4 - 1)/(1 x 256 + 4 - 1) = 0.0116"), "%s", o.out);
    TB_CHECK(tb_has(o.out, "tp group: 4 consecutive ranks, inside a node"), "%s", o.out);
    TB_CHECK(tb_has(o.out, "acceptance metrics"), "%s", o.out);
    tb_output_free(&o);
}

TB_TEST(bad_input_is_named) {
    tb_output o = {0};
    int rc = tb_run(&o, NULL, "'%s' plan --gpus 8 --num-layers 4 --hidden-size 64 --num-attention-heads 7 "
                    "--global-batch-size 8", TRACEBOOK);
    TB_CHECK(rc == 1 && tb_has(o.err, "no legal layout") &&
                 tb_has(o.err, "hidden_size (64) must be divisible by num_attention_heads (7)"),
             "rc %d: %s", rc, o.err);
    rc = tb_run(&o, NULL, "'%s' plan --gpus 8 --gpu-memory 1M " LLAMA70B " --global-batch-size 64 --bf16", TRACEBOOK);
    TB_CHECK(rc == 1 && tb_has(o.err, "no legal layout fits in 0.00 GiB per GPU: the smallest peak is"), "rc %d: %s",
             rc, o.err);
    rc = tb_run(&o, NULL, "'%s' plan " LLAMA70B " --global-batch-size 64", TRACEBOOK);
    TB_CHECK(rc == 2 && tb_has(o.err, "--gpus N is required"), "rc %d: %s", rc, o.err);
    rc = tb_run(&o, NULL, "'%s' plan --gpus 8 " LLAMA70B, TRACEBOOK);
    TB_CHECK(rc == 2 && tb_has(o.err, "--global-batch-size is required"), "rc %d: %s", rc, o.err);
    // MoE under context parallelism: legal for Megatron, not modeled (the engine runs MoE at cp 1)
    rc = tb_run(&o, NULL, "'%s' plan --explain tp1,cp2,ep1,dp4 --gpus 8 --num-experts 8 --attention-backend flash " LLAMA70B,
                TRACEBOOK);
    TB_CHECK(rc == 1 && tb_has(o.out, "the planner: num_experts 8 with context_parallel_size 2") &&
                 tb_has(o.out, "not supported yet"), "rc %d: %s", rc, o.out);
    // Megatron-FSDP's sharded gradients of a MoE model: legal, its expert units not modeled
    rc = tb_run(&o, NULL,
                "'%s' plan --explain tp1,ep2,dp8 --gpus 8 --num-experts 8 --use-distributed-optimizer "
                "--use-megatron-fsdp --data-parallel-sharding-strategy optim_grads_params " LLAMA70B, TRACEBOOK);
    TB_CHECK(rc == 1 && tb_has(o.out, "the planner: num_experts 8 with data_parallel_sharding_strategy "
                                      "optim_grads_params: not supported yet"), "rc %d: %s", rc, o.out);
    // under tensor parallelism without sequence parallelism: Megatron's rule, the engine's message
    rc = tb_run(&o, NULL, "'%s' plan --explain tp4,ep2,dp2 --gpus 8 --num-experts 8 " LLAMA70B, TRACEBOOK);
    TB_CHECK(rc == 1 && tb_has(o.out, "not legal: num_experts (8) with tensor_model_parallel_size 4 needs sequence_parallel"),
             "rc %d: %s", rc, o.out);
    rc = tb_run(&o, NULL, "'%s' plan --gpus 64 --explain tp4,pp4,dp2 " LLAMA70B, TRACEBOOK);
    TB_CHECK(rc == 2 && tb_has(o.err, "tp x cp x pp x dp = 32, --gpus is 64"), "rc %d: %s", rc, o.err);
    rc = tb_run(&o, NULL, "'%s' plan --explain tp4,ep2,dp1 --gpus 4 " LLAMA70B, TRACEBOOK);
    TB_CHECK(rc == 1 && tb_has(o.out, "not legal: expert_model_parallel_size (2) needs num_experts > 0"), "rc %d: %s",
             rc, o.out);
    rc = tb_run(&o, NULL, "'%s' plan --explain tp3,dp1 " LLAMA70B, TRACEBOOK);
    TB_CHECK(rc == 1 && tb_has(o.out, "not legal: num_attention_heads (64) must be divisible by tensor_model_parallel_size (3)"),
             "rc %d: %s", rc, o.out);
    rc = tb_run(&o, NULL, "'%s' plan --gpus 8 --compute-efficiency 2 " LLAMA70B " --global-batch-size 64", TRACEBOOK);
    TB_CHECK(rc == 2 && tb_has(o.err, "--compute-efficiency (2) in (0, 1]"), "rc %d: %s", rc, o.err);
    // a micro batch of 0 (the search doubles it) and search bounds near INT_MAX looped for ever
    rc = tb_run(&o, NULL, "timeout 20 '%s' plan --gpus 8 --micro-batch-size 0 " LLAMA70B " --global-batch-size 64",
                TRACEBOOK);
    TB_CHECK(rc == 2 && tb_has(o.err, "--micro-batch-size (0) must be at least 1"), "rc %d: %s", rc, o.err);
    rc = tb_run(&o, NULL, "timeout 20 '%s' plan --gpus 8 --max-micro-batch-size 2147483647 " LLAMA70B
                " --global-batch-size 64", TRACEBOOK);
    TB_CHECK(rc == 2 && tb_has(o.err, "--max-micro-batch-size (2147483647)") && tb_has(o.err, "at most 65536 and 1024"),
             "rc %d: %s", rc, o.err);
    rc = tb_run(&o, NULL, "timeout 20 '%s' plan --gpus 8 --max-virtual-stages 2147483647 " LLAMA70B
                " --global-batch-size 64", TRACEBOOK);
    TB_CHECK(rc == 2 && tb_has(o.err, "--max-virtual-stages (2147483647)"), "rc %d: %s", rc, o.err);
    tb_output_free(&o);
}

// A fresh directory dir (TB_TEST_TMPDIR, name and this process's id) for a runbook test:
// book, the runbook's path there (file); art, its artifacts.
static void runbook_sandbox(const char *name, const char *file, char dir[512], char book[600], char art[600]) {
    tb_tmp_path(dir, 512, "%s-%ld", name, (long)getpid());
    snprintf(book, 600, "%s/%s", dir, file);
    snprintf(art, 600, "%s/artifacts", dir);
    tb_shell(NULL, "rm -rf '%s' && mkdir -p '%s'", dir, dir);
}

// exp:plan records a plan; prove re-derives its claims from the recorded plan.json and
// refuses once the file is altered; replay refuses a plan record.
TB_TEST(runbook_plan_claims_prove_from_the_recorded_json) {
    char dir[512], book[600], art[600];
    runbook_sandbox("plan-runbook", "tiny_plan.lua", dir, book, art);
    TB_REQUIRE(tb_write_text(book,
                             "local exp = tb.experiment{ name = 'tiny_plan', version = 1, question = 'q' }\n"
                             "local p = exp:plan{ gpus = 8, num_layers = 4, hidden_size = 64, num_attention_heads = 4,\n"
                             "                    vocab_size = 256, seq_length = 32, global_batch_size = 16, top = 3 }\n"
                             "tb.assert(p.plan.legal > 0 and #p.plan.candidates == 3, 'three candidates')\n"
                             // wte 256 x 64 + wpe 32 x 64 + 4 x 49,984 per layer + ln_f 128
                             "exp:claim{ id = 'n', parser = 'plan_figure', runs = p, args = { figure = 'model_parameters' },\n"
                             "           value = 218496, text = 'parameters' }\n"
                             "exp:claim{ id = 'peak', parser = 'plan_figure', runs = p, args = { figure = 'peak_bytes' },\n"
                             "           text = 'per-rank peak of the top candidate' }\n") == 0,
               "cannot write %s", book);
    tb_output o = {0};
    int rc = tb_run(&o, NULL, "'%s' run '%s' --artifacts '%s'", TRACEBOOK, book, art);
    TB_REQUIRE(rc == 0, "run exited %d: %s%s", rc, o.out, o.err);
    TB_CHECK(tb_has(o.out, "claim n: parameters = 218496"), "%s", o.out);
    rc = tb_run(&o, NULL, "'%s' prove --all --artifacts '%s'", TRACEBOOK, art);
    TB_CHECK(rc == 0 && tb_has(o.out, "2 claims, 2 proven"), "prove exited %d: %s", rc, o.out);
    // the recorded plan altered: its sha256 no longer matches, nothing is proven from it
    rc = tb_run(&o, NULL, "f=$(ls '%s'/tiny_plan/v1/*/run/plan.json) && sed -i 's/\"model_parameters\": 218496/\"model_parameters\": 1/' \"$f\" && "
                "grep -c '\"model_parameters\": 1,' \"$f\"", art);
    TB_CHECK(rc == 0, "could not alter plan.json: %s", o.out);
    rc = tb_run(&o, NULL, "'%s' prove --all --artifacts '%s'", TRACEBOOK, art);
    TB_CHECK(rc != 0 && tb_has(o.out, "0 proven"), "prove of an altered plan exited %d: %s", rc, o.out);
    rc = tb_run(&o, NULL, "'%s' replay $(basename $(dirname $(dirname $(ls '%s'/tiny_plan/v1/*/run/plan.json)))) "
                "--artifacts '%s'", TRACEBOOK, art, art);
    TB_CHECK(rc != 0 && tb_has(o.err, "replaying a plan is not supported yet"), "replay exited %d: %s", rc, o.err);
    tb_output_free(&o);
    tb_shell(NULL, "rm -rf '%s'", dir);
}

// exp:plan takes a preset by name (tracebook plan's --model), its claims proving from the
// recorded plan.json like any plan's; a key the planner does not take is refused by name.
TB_TEST(runbook_plan_takes_a_preset_by_name) {
    char dir[512], book[600], art[600];
    runbook_sandbox("plan-preset", "preset.lua", dir, book, art);
    TB_REQUIRE(tb_write_text(book, "local exp = tb.experiment{ name = 'preset_plan', version = 1, question = 'q' }\n"
                                   "local p = exp:plan{ model = 'gpt2-124m', gpus = 8, global_batch_size = 64,\n"
                                   "                    top = 2, all = true }\n"
                                   "exp:claim{ id = 'n', parser = 'plan_figure', runs = p,\n"
                                   "           args = { figure = 'model_parameters' }, value = 124475904,\n"
                                   "           text = 'GPT-2 small parameters, vocabulary padded' }\n") == 0,
               "cannot write %s", book);
    tb_output o = {0};
    int rc = tb_run(&o, NULL, "'%s' run '%s' --artifacts '%s'", TRACEBOOK, book, art);
    TB_REQUIRE(rc == 0, "run exited %d: %s%s", rc, o.out, o.err);
    TB_CHECK(tb_has(o.out, "model: gpt2-124m") && tb_has(o.out, "illegal layouts by the first rule"),
             "the preset and --all reached the planner:\n%s", o.out);
    rc = tb_run(&o, NULL, "'%s' prove --all --artifacts '%s'", TRACEBOOK, art);
    TB_CHECK(rc == 0 && tb_has(o.out, "1 claim, 1 proven, 0 not proven"),
             "prove exited %d: %s", rc, o.out);
    const struct {
        const char *keys, *err;
    } bad[] = {{"model = 'nope'", "exp:plan: model 'nope' is not a preset (the presets: deepseek-moe-16b, gpt2-124m"},
               {"model = 5", "exp:plan: model must be a preset's name (tracebook plan --model list) (got 5)"},
               {"model = 'gpt2-124m', all = 'yes'", "exp:plan: all must be true or false (got 'yes')"},
               {"modle = 'gpt2-124m'", "exp:plan: unknown key 'modle' (keys are the planner's: model, gpus"},
               {"model = 'gpt2-124m', expect_failure = 'oom'", "exp:plan: expect_failure does not apply to a plan"},
               {"hiden_size = 64", "exp:plan: unknown key 'hiden_size' (did you mean 'hidden_size'? keys are"}};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        char text[512];
        snprintf(text, sizeof text,
                 "local exp = tb.experiment{ name = 'preset_plan', version = 2, question = 'q' }\n"
                 "exp:plan{ gpus = 8, %s }\n", bad[i].keys);
        TB_REQUIRE(tb_write_text(book, text) == 0, "cannot write %s", book);
        rc = tb_run(&o, NULL, "'%s' run '%s' --dry-run --artifacts '%s'", TRACEBOOK, book, art);
        TB_CHECK(rc == 1 && tb_has(o.err, "preset.lua:2: ") && tb_has(o.err, bad[i].err), "%s: exited %d: %s",
                 bad[i].keys, rc, o.err);
    }
    tb_output_free(&o);
    tb_shell(NULL, "rm -rf '%s'", dir);
}

// runbooks/planner_check.lua (the plan against engine runs, claim by claim) and two questions of
// runbooks/plans/ (a dense model, a MoE of many small experts) run, and prove re-derives every
// claim (the MoE question's 12: its expert and active parameters, experts per ep rank, all-to-all
// and expert-dp bytes besides the dense questions' 7; the 70B question's Megatron-FSDP answer 4
// more: its peak, parameter, gathered and dp x cp bytes).
TB_TEST(planner_runbooks_prove) {
    char art[512];
    tb_tmp_path(art, sizeof art, "plan-runbooks-%ld", (long)getpid());
    tb_output o = {0};
    int rc = tb_run(&o, TB_SOURCE_DIR, "rm -rf '%s' && '%s' run runbooks/planner_check.lua --artifacts '%s' && "
                    "'%s' run runbooks/plans/llama2_70b_64_gpus.lua --artifacts '%s' && "
                    "'%s' run runbooks/plans/deepseek_moe_64_experts.lua --artifacts '%s'",
                    art, TRACEBOOK, art, TRACEBOOK, art, TRACEBOOK, art);
    TB_REQUIRE(rc == 0, "runbooks exited %d: %s%s", rc, o.out, o.err);
    rc = tb_run(&o, TB_SOURCE_DIR, "'%s' prove --all --artifacts '%s'", TRACEBOOK, art);
    TB_CHECK(rc == 0 && tb_has(o.out, "46 claims, 46 proven, 0 not proven") &&
                 tb_has(o.out, "PROVEN  plan_llama2_70b_64_gpus/v2/fsdp_gathered_bytes"),
             "prove exited %d: %s", rc, o.out);
    tb_output_free(&o);
    tb_shell(NULL, "rm -rf '%s'", art);
}

// A small MoE: 4 experts (ffn 32) top-2 every second layer, a shared expert (ffn 48), GELU and
// biases, so layers 0 and 2 are MoE layers.
#define TINY_MOE_MODEL "--num-layers 4 --hidden-size 64 --num-attention-heads 4 --seq-length 32 --vocab-size 256 "
#define TINY_MOE TINY_MOE_MODEL "--num-experts 4 --moe-router-topk 2 --moe-ffn-hidden-size 32 " \
                 "--moe-shared-expert-intermediate-size 48 --moe-layer-freq 2 --moe-token-dispatcher-type alltoall"

// The experts' counts in closed form (router E x C, each expert fc1 + fc2 with biases, the
// shared expert), per ep rank E/ep experts, the per-rank counts summing to the model over
// pp x ep (the dense part once per ep rank), the active parameters as the engine's
// gpt_active_parameters, and the dispatcher's all-to-all bytes in the stated balanced model.
TB_TEST(moe_parameters_per_expert_rank_sum_to_the_model) {
    tb_config dense, c;
    tb_error err;
    TB_REQUIRE(config_from(&dense, TINY_MOE_MODEL "--global-batch-size 8", &err) == 0, "%s", err.msg);
    TB_REQUIRE(config_from(&c, TINY_MOE " --global-batch-size 8", &err) == 0, "%s", err.msg);
    const int64_t mlp = 256 * 64 + 256 + 64 * 256 + 64, router = 4 * 64, expert = 32 * 64 + 32 + 64 * 32 + 64;
    const int64_t shared = 48 * 64 + 48 + 64 * 48 + 64;
    const int64_t n = plan_model_parameters(&dense) - 2 * mlp + 2 * (router + 4 * expert + shared);
    TB_CHECK(plan_model_parameters(&c) == n && plan_model_expert_parameters(&c) == 2 * 4 * expert,
             "N %lld (expected %lld), experts %lld (expected %lld)", (long long)plan_model_parameters(&c), (long long)n,
             (long long)plan_model_expert_parameters(&c), (long long)(8 * expert));
    TB_CHECK(plan_active_parameters(&c) == n - 8 * expert + 8 * expert * 2 / 4, "active %lld",
             (long long)plan_active_parameters(&c));
    int checked = 0;
    const int eps[] = {1, 2, 4}, pps[] = {1, 2};
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 2; j++) {
            tb_config b = c;
            b.expert_model_parallel_size = eps[i];
            tb_plan_cluster cl = fp32_cluster(4 * pps[j]);
            tb_plan p;
            TB_REQUIRE(plan_evaluate(&p, &b, &cl, 1, 1, pps[j], 1, 1, &err) == 0, "%s", err.msg);
            TB_REQUIRE(p.legal && p.runs_here, "ep %d pp %d: %s", eps[i], pps[j], p.rule);
            int64_t sum = 0, experts = 0;
            for (int s = 0; s < p.nstages; s++) {
                sum += p.stages[s].params_counted - p.stages[s].params_expert + eps[i] * p.stages[s].params_expert;
                experts += p.stages[s].params_expert;
            }
            TB_CHECK(sum == n && experts * eps[i] == 8 * expert && p.experts_per_rank == 4 / eps[i] &&
                         p.edp == 4 / eps[i] && p.model_parameters == n,
                     "ep %d pp %d: per-rank sum %lld (N %lld), experts per rank %lld, edp %d", eps[i], pps[j],
                     (long long)sum, (long long)n, (long long)experts, p.edp);
            // per MoE layer and microbatch: 4 all-to-alls of N x k tokens x C floats (forward
            // dispatch + combine, backward both again) and the E counts all-gathered over ep
            const double N = 1.0 * 32, per = 4 * N * 2 * 64 * 4 + 4.0 * eps[i] * 4;
            const double want = eps[i] > 1 ? per * p.microbatches * (pps[j] == 1 ? 2 : 1) : 0.0;
            TB_CHECK(p.comm.ep == want, "ep %d pp %d: all-to-all bytes %.0f, expected %.0f", eps[i], pps[j], p.comm.ep,
                     want);
            checked++;
            plan_free(&p);
        }
    TB_CHECK(checked == 6, "%d layouts", checked);
    // bf16 with the distributed optimizer at ep 2 on 4 GPUs (dp 4, expert-dp 2): the dense
    // state sharded over dp, the experts' over expert-dp (Megatron's, and the engine's)
    tb_config b = c;
    b.expert_model_parallel_size = 2;
    b.use_distributed_optimizer = 1;
    tb_plan_cluster cl = fp32_cluster(4);
    cl.precision = TB_PLAN_BF16;
    tb_plan p;
    TB_REQUIRE(plan_evaluate(&p, &b, &cl, 1, 1, 1, 1, 1, &err) == 0 && p.legal && p.runs_here, "%s", p.rule);
    const int64_t held = p.stages[0].params_held, ex = p.stages[0].params_expert;
    TB_CHECK(ex == 4 * expert && p.edp == 2 &&
                 p.stages[0].optimizer_bytes == (held - ex) * 12 / 4 + ex * 12 / 2 && p.comm.expert_dp == 6.0 * ex,
             "held %lld experts %lld optimizer %lld expert-dp bytes %.0f", (long long)held, (long long)ex,
             (long long)p.stages[0].optimizer_bytes, p.comm.expert_dp);
    plan_free(&p);
}

// The planner's verdict on MoE layouts is the engine's (config_validate) with the same first
// rule: ep dividing the experts and the expert grid (etp x ep x expert-dp x pp) dividing the
// world, the distributed optimizer under ep judged as the engine judges it, at tp 1 and at
// tp 2 with sequence parallelism, etp 1 and 2; cp > 1 with MoE, which neither the engine nor
// the planner models, is refused by name.
TB_TEST(moe_rules_identical_to_config_validation) {
    int runs = 0, refused = 0, disagree = 0, runs_tp = 0;
    const int eps[] = {1, 2, 3, 4, 8}, pps[] = {1, 2}, dps[] = {1, 2, 4, 6};
    for (int i = 0; i < 5; i++)
        for (int j = 0; j < 2; j++)
            for (int k = 0; k < 4; k++)
                for (int distopt = 0; distopt < 2; distopt++)
                    for (int tp = 1; tp <= 2; tp++)
                        for (int etp = 1; etp <= 2; etp++) {
                    const int world = tp * pps[j] * dps[k];
                    char model[700], layout[900];
                    snprintf(model, sizeof model,
                             TINY_MOE " --global-batch-size %d --expert-model-parallel-size %d "
                                      "--expert-tensor-parallel-size %d%s%s",
                             dps[k] * 2, eps[i], etp, distopt ? " --use-distributed-optimizer" : "",
                             tp > 1 ? " --sequence-parallel" : "");
                    snprintf(layout, sizeof layout,
                             "%s --tensor-model-parallel-size %d --pipeline-model-parallel-size %d --world-size %d "
                             "--micro-batch-size 1",
                             model, tp, pps[j], world);
                    tb_config engine, base;
                    tb_error err, rule;
                    TB_REQUIRE(config_from(&engine, layout, &err) == 0 && config_from(&base, model, &err) == 0, "%s",
                               err.msg);
                    const int ok = config_validate(&engine, &rule) == 0;
                    char *nl = strchr(rule.msg, '\n');
                    if (nl) *nl = '\0';
                    tb_plan_cluster cl = fp32_cluster(world);
                    tb_plan p;
                    TB_REQUIRE(plan_evaluate(&p, &base, &cl, tp, 1, pps[j], 1, 1, &err) == 0, "%s", err.msg);
                    runs_tp += ok && tp > 1;
                    if ((p.runs_here != ok || (!ok && strcmp(p.rule, rule.msg))) && disagree++ < 5)
                        TB_CHECK(0, "%s\n    engine: %s; plan: %s", layout, ok ? "runs" : rule.msg,
                                 p.runs_here ? "runs" : p.rule);
                    runs += ok, refused += !ok;
                    plan_free(&p);
                }
    printf("  %d MoE layouts the engine runs (%d at tp 2), %d it refuses, %d disagreements\n", runs, runs_tp, refused,
           disagree);
    TB_CHECK(runs >= 10 && runs_tp >= 10 && refused >= 10, "both verdicts must be covered (%d, %d at tp 2, %d)", runs,
             runs_tp, refused);
    tb_config c;
    tb_error err;
    TB_REQUIRE(config_from(&c, TINY_MOE " --global-batch-size 8 --sequence-parallel --attention-backend flash", &err) == 0,
               "%s", err.msg);
    tb_plan_cluster cl = fp32_cluster(2);
    tb_plan p;
    TB_REQUIRE(plan_evaluate(&p, &c, &cl, 1, 2, 1, 1, 1, &err) == 0, "%s", err.msg);
    TB_CHECK(!p.legal && strstr(p.rule, "context_parallel_size 2") && strstr(p.rule, "not supported yet"), "%s",
             p.rule);
    plan_free(&p);
}

// MoE under tp 2 + sequence parallelism, etp 1 and 2, ep 1 and 2, pp 1 and 2: each rank's
// experts in closed form (E/ep experts, fc1 and fc2 split over etp, fc2's bias whole), the
// router whole; the per-rank counts (the shared expert split over tp) summing to the model
// over tp x pp (dense, the tp-replicated tensors once) and etp x ep (experts, fc2's bias
// once per ep rank); the etp bytes of the balanced all-to-all dispatcher in closed form.
TB_TEST(moe_tp_etp_parameters_per_rank_sum_to_the_model) {
    tb_config c;
    tb_error err;
    TB_REQUIRE(config_from(&c, TINY_MOE " --global-batch-size 8 --sequence-parallel", &err) == 0, "%s", err.msg);
    const int64_t n = plan_model_parameters(&c), C = 64, Fe = 32;
    int checked = 0;
    for (int etp = 1; etp <= 2; etp++)
        for (int ep = 1; ep <= 2; ep++)
            for (int pp = 1; pp <= 2; pp++) {
                tb_config b = c;
                b.expert_model_parallel_size = ep;
                b.expert_tensor_parallel_size = etp;
                tb_plan_cluster cl = fp32_cluster(2 * pp * 2);  // tp 2 x pp x dp 2
                tb_plan p;
                TB_REQUIRE(plan_evaluate(&p, &b, &cl, 2, 1, pp, 1, 1, &err) == 0, "%s", err.msg);
                TB_REQUIRE(p.legal && p.runs_here, "etp %d ep %d pp %d: %s", etp, ep, pp, p.rule);
                // the model's N is the model's, whatever splits it
                TB_CHECK(plan_model_parameters(&b) == n, "etp %d ep %d pp %d: N %lld, at the base layout %lld", etp,
                         ep, pp, (long long)plan_model_parameters(&b), (long long)n);
                const int64_t expert_rank = (4 / ep) * (Fe * C / etp + Fe / etp + C * Fe / etp + C);  // per MoE layer
                int64_t sum = 0, experts = 0;
                int ok = 1;
                for (int s = 0; s < p.nstages; s++) {
                    const tb_plan_stage *st = &p.stages[s];
                    const int moe_layers = pp == 1 ? 2 : 1;  // layers 0 and 2 (one per stage at pp 2)
                    ok &= st->params_expert == moe_layers * expert_rank &&
                          st->params_expert_replicated == moe_layers * (4 / ep) * C;
                    const int64_t dense0 = st->params_counted - st->params_expert, dense1 = st->params_counted_other_tp;
                    sum += dense0 + dense1 +
                           ep * (etp * (st->params_expert - st->params_expert_replicated) + st->params_expert_replicated);
                    experts += st->params_expert;
                }
                const double Ns = 32.0 / 2, rows = Ns * 2, per = 4 * etp * rows * C * 4 + (double)ep * 4 * 4 * etp;
                const double want = etp > 1 ? per * p.microbatches * (pp == 1 ? 2 : 1) : 0.0;
                TB_CHECK(ok && sum == n && p.etp == etp && p.edp == 4 * pp / (etp * ep * pp) && p.comm.etp == want,
                         "etp %d ep %d pp %d: per-rank sum %lld (N %lld), experts %lld, edp %d, etp bytes %.0f "
                         "(expected %.0f)",
                         etp, ep, pp, (long long)sum, (long long)n, (long long)experts, p.edp, p.comm.etp, want);
                checked++;
                plan_free(&p);
            }
    TB_CHECK(checked == 8, "%d layouts", checked);
}

// `tracebook plan` enumerates ep over the divisors of num_experts: ep 1, 2 and 4 of 4 experts
// on 4 GPUs appear, each at tp 1 and cp 1, with the expert grid in the JSON.
TB_TEST(moe_enumerates_expert_parallel_layouts) {
    tb_output o = {0};
    int rc = tb_run(&o, NULL, "'%s' plan --gpus 4 " TINY_MOE " --global-batch-size 8 --json --top 0", TRACEBOOK);
    TB_REQUIRE(rc == 0, "exit %d: %s", rc, o.err);
    json_t *v = json_loads(o.out, 0, NULL);
    TB_REQUIRE(v, "not JSON");
    int seen[5] = {0}, bad = 0;
    size_t i;
    json_t *cand;
    json_array_foreach(json_object_get(v, "candidates"), i, cand) {
        json_t *moe = json_object_get(cand, "moe");
        const json_int_t ep = json_integer_value(json_object_get(moe, "ep"));
        if (ep >= 1 && ep <= 4) seen[ep]++;
        if (json_integer_value(json_object_get(cand, "tp")) != 1 || json_integer_value(json_object_get(cand, "cp")) != 1 ||
            json_integer_value(json_object_get(moe, "experts_per_ep_rank")) * ep != 4)
            bad++;
    }
    TB_CHECK(seen[1] && seen[2] && seen[4] && !seen[3] && !bad, "ep 1 %d, 2 %d, 3 %d, 4 %d; %d wrong", seen[1],
             seen[2], seen[3], seen[4], bad);
    json_decref(v);
    tb_output_free(&o);
}

// Megatron-FSDP with overlap (plan_fsdp.h): the prefetch holds the next unit's parameters
// beside this one's, which the engine holds from its second step on (its first records the
// schedule) — the same bytes; the drain holds a unit's gradient buckets while their
// reduce-scatter is in flight, a bound the engine's peak never exceeds (it gives a bucket back
// as soon as its reduce-scatter is done, which on an idle host may be before the bound's point).
#define FSDP_MODEL                                                                                           \
    "--num-layers 4 --hidden-size 64 --num-attention-heads 4 --num-query-groups 2 --seq-length 32 "        \
    "--vocab-size 256 --global-batch-size 8 --micro-batch-size 2 --use-distributed-optimizer "              \
    "--use-megatron-fsdp --data-parallel-sharding-strategy optim_grads_params"
#define FSDP_OVERLAP " --overlap-grad-reduce --overlap-param-gather"

static json_t *planned_stage(const char *extra) {
    tb_output o = {0};
    int rc = tb_run(&o, NULL, "'%s' plan --explain tp1,cp1,pp1,dp2,mbs2 --gpus 2 " FSDP_MODEL "%s --json", TRACEBOOK,
                    extra);
    json_t *doc = rc == 0 ? json_loads(o.out, 0, NULL) : NULL;
    json_t *st = json_incref(json_array_get(json_object_get(json_object_get(doc, "plan"), "stages"), 0));
    if (!st) printf("    plan exited %d: %s%s\n", rc, o.err, o.out);
    json_decref(doc);
    tb_output_free(&o);
    return st;
}

// Rank 0's memory peaks (metrics mem_peak_bytes) at the engine's steps 1 and 2 (of 3: the last one
// gathers what the end of training reads).
static int measured_peaks(const char *extra, json_t *peaks[2]) {
    char dir[512];
    tb_tmp_path(dir, sizeof dir, "plan-fsdp-overlap-%ld", (long)getpid());
    tb_output o = {0};
    int rc = tb_run(&o, NULL, "rm -rf '%s' && '%s' " FSDP_MODEL "%s --world-size 2 --train-iters 3 --run-dir '%s'",
                    dir, TB_BIN_DIR "/pretrain_gpt", extra, dir);
    if (rc != 0) printf("    pretrain_gpt exited %d: %s\n", rc, o.err);
    tb_output_free(&o);
    char path[640];
    snprintf(path, sizeof path, "%s/metrics.rank-00000.jsonl", dir);
    char *text = rc == 0 ? tb_slurp(path) : NULL;
    int n = 0;
    for (char *line = text ? strtok(text, "\n") : NULL; line && n < 2; line = strtok(NULL, "\n")) {
        json_t *m = json_loads(line, 0, NULL);
        peaks[n++] = json_incref(json_object_get(m, "mem_peak_bytes"));
        json_decref(m);
    }
    free(text);
    tb_shell(NULL, "rm -rf '%s'", dir);
    return n == 2 && peaks[0] && peaks[1] ? 0 : -1;
}

static json_int_t field(json_t *o, const char *key) { return json_integer_value(json_object_get(o, key)); }

TB_TEST(fsdp_overlap_holds_what_the_engine_holds) {
    json_t *plain = planned_stage(""), *overlap = planned_stage(FSDP_OVERLAP), *peaks[2] = {NULL, NULL};
    TB_REQUIRE(plain && overlap, "the plans");
    TB_REQUIRE(measured_peaks(FSDP_OVERLAP, peaks) == 0, "the engine's run with overlap");
    const json_int_t g0 = field(plain, "gathered_bytes"), g = field(overlap, "gathered_bytes");
    const json_int_t d0 = field(plain, "grad_bytes"), d = field(overlap, "grad_bytes");
    printf("    gathered: planned %lld without overlap, %lld with; the engine %lld at step 1 (recording), %lld at "
           "step 2\n    grads: planned %lld without, bound %lld with; the engine %lld, %lld\n",
           (long long)g0, (long long)g, (long long)field(peaks[0], "gathered"), (long long)field(peaks[1], "gathered"),
           (long long)d0, (long long)d, (long long)field(peaks[0], "grads"), (long long)field(peaks[1], "grads"));
    TB_CHECK(g > g0 && g == field(peaks[1], "gathered"), "gathered: planned %lld, the engine's step 2 %lld",
             (long long)g, (long long)field(peaks[1], "gathered"));
    TB_CHECK(field(peaks[0], "gathered") == g0, "the engine's first step holds one unit: %lld, planned %lld",
             (long long)field(peaks[0], "gathered"), (long long)g0);
    TB_CHECK(d > d0 && field(peaks[1], "grads") <= d && field(peaks[0], "grads") <= d,
             "grads: the bound %lld (without overlap %lld), the engine %lld, %lld", (long long)d, (long long)d0,
             (long long)field(peaks[0], "grads"), (long long)field(peaks[1], "grads"));
    json_decref(plain), json_decref(overlap), json_decref(peaks[0]), json_decref(peaks[1]);
}

int main(void) {
    TB_RUN(gpt2_124m_parameters_as_the_engine_counts_them);
    TB_RUN(llama2_70b_parameters_and_per_rank_counts_sum_to_the_model);
    TB_RUN(korthikanti_closed_form_for_sequence_parallel_selective);
    TB_RUN(rules_identical_to_config_validation);
    TB_RUN(verify_matches_the_engine);
    TB_RUN(ranked_fitting_first_then_step_time);
    TB_RUN(explain_the_70b_candidate);
    TB_RUN(bad_input_is_named);
    TB_RUN(runbook_plan_claims_prove_from_the_recorded_json);
    TB_RUN(runbook_plan_takes_a_preset_by_name);
    TB_RUN(planner_runbooks_prove);
    TB_RUN(moe_parameters_per_expert_rank_sum_to_the_model);
    TB_RUN(moe_rules_identical_to_config_validation);
    TB_RUN(moe_tp_etp_parameters_per_rank_sum_to_the_model);
    TB_RUN(moe_enumerates_expert_parallel_layouts);
    TB_RUN(fsdp_overlap_holds_what_the_engine_holds);
    return tb_test_summary();
}
