// test_plan_models.c — `tracebook plan --model NAME` (experiments/planner/plan_models.h): the
// presets built into the binary are the repository's files, each loads through the engine's
// config loader and passes its rules, and plans on a plausible cluster; their parameter counts
// (the engine's accounting) against the published ones; flags override a preset; an unknown
// preset, --model with --config, and --gpus missing or below 1 are refused.
#include <dirent.h>
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/config.h"
#include "planner/plan.h"
#include "planner/plan_models.h"
#include "tb_shell.h"
#include "tb_test.h"

#define TRACEBOOK TB_BIN_DIR "/tracebook"
#define MODELS_DIR TB_SOURCE_DIR "/experiments/planner/models"

static int starts(const char *text, const char *prefix) { return text && !strncmp(text, prefix, strlen(prefix)); }

// The preset's config as the planner loads it (before the flags), resolved at tp 1.
static int preset(tb_config *c, const char *name, tb_error *err) {
    config_defaults(c);
    if (plan_model_load(c, name, err) != 0) return -1;
    config_resolve(c);
    return 0;
}

// The presets built in are exactly experiments/planner/models/*.json, byte for byte, and each
// file loads through the engine's own --config loader to the config the embedded copy gives.
TB_TEST(built_in_presets_are_the_repository_files) {
    int n = 0;
    const tb_plan_model *m = plan_models(&n);
    TB_REQUIRE(n >= 5, "%d presets", n);
    int files = 0;
    DIR *d = opendir(MODELS_DIR);
    TB_REQUIRE(d, "cannot open %s", MODELS_DIR);
    for (struct dirent *e; (e = readdir(d));) {
        const size_t len = strlen(e->d_name);
        if (len > 5 && !strcmp(e->d_name + len - 5, ".json")) files++;
    }
    closedir(d);
    TB_CHECK(files == n, "%d files in %s, %d built in (rebuild after adding or removing one)", files, MODELS_DIR, n);
    for (int i = 0; i < n; i++) {
        char path[1024];
        snprintf(path, sizeof path, "%s/%s.json", MODELS_DIR, m[i].name);
        char *text = tb_slurp(path);
        TB_CHECK(text && !strcmp(text, m[i].json), "%s: the built-in copy differs from the file (rebuild)", path);
        free(text);
        tb_config from_file, built_in;
        tb_error err;
        config_defaults(&from_file);
        TB_CHECK(config_load_json(&from_file, path, &err) == 0, "%s", err.msg);
        config_resolve(&from_file);
        TB_REQUIRE(preset(&built_in, m[i].name, &err) == 0, "%s", err.msg);
        json_t *a = config_to_json(&from_file), *b = config_to_json(&built_in);
        TB_CHECK(json_equal(a, b), "%s: --model and --config give different configs", m[i].name);
        json_decref(a), json_decref(b);
        // Megatron's rules at one rank (this build's capacity, the vocabulary's uint16 limit, skipped)
        TB_CHECK(config_validate_rules(&built_in, TB_RULES_SKIP_BUILD_LIMITS | TB_RULES_SKIP_NOT_SUPPORTED, &err) == 0,
                 "%s: %s", m[i].name, err.msg);
        if (i > 0) TB_CHECK(strcmp(m[i - 1].name, m[i].name) < 0, "not sorted: %s, %s", m[i - 1].name, m[i].name);
    }
}

// The engine's counts (plan_parameters: plan_model_parameters over core/shapes/gpt_parameters.h)
// against the published ones.
TB_TEST(parameter_counts_against_the_published_ones) {
    static const struct {
        const char *name;
        int64_t exact;
        int tp, padded_vocab;
        int64_t padded;
    } want[] = {
        // GPT-2 small: 124,439,808 (tied embedding, vocab 50,257, 1,024 learned positions, biases, LayerNorm);
        // padded to 50,304 (llm.c's count, 124,475,904): 47 more rows of 768, once (tied)
        {"gpt2-124m", 124439808LL, 1, 50304, 124439808LL + 47 * 768},
        // LLaMA-2-7B: 6,738,415,616 (Hugging Face's Llama-2-7b-hf); 32,000 a multiple of 128: no padding at tp 1,
        // at tp 8 768 more rows of 4,096 in the embedding and the untied output layer
        {"llama2-7b", 6738415616LL, 1, 32000, 6738415616LL},
        {"llama2-7b", 6738415616LL, 8, 32768, 6738415616LL + 2 * 768 * 4096},
        // LLaMA-2-70B: 68,976,648,192
        {"llama2-70b", 68976648192LL, 8, 32768, 68976648192LL + 2 * 768 * 8192},
        // LLaMA-3.1-405B: 405,853,388,800 (128,256 = 1,002 x 128; at tp 8 padded to 129,024)
        {"llama3-405b", 405853388800LL, 1, 128256, 405853388800LL},
        {"llama3-405b", 405853388800LL, 8, 129024, 405853388800LL + 2 * 768 * 16384},
        // DeepSeekMoE-16B with every layer a MoE layer (the engine's --moe-layer-freq cannot make layer 0
        // alone dense, as DeepSeek's first_k_dense_replace 1 does): the published shape's 16,375,728,128
        // (embedding and output 2 x 102,400 x 2,048; 28 attention layers of 4 x 2,048^2 + 2 norms; layer 0's
        // dense SwiGLU MLP 3 x 2,048 x 10,944; 27 MoE layers of 64 experts of 3 x 2,048 x 1,408, the shared
        // 3 x 2,048 x 2,816 and the router 64 x 2,048; the final norm; "16.4B" in the DeepSeekMoE paper)
        // with layer 0's MLP replaced by a MoE layer's: + 571,080,704 - 67,239,936
        {"deepseek-moe-16b", 16375728128LL + 571080704LL - 67239936LL, 1, 102400,
         16375728128LL + 571080704LL - 67239936LL},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        tb_config c;
        tb_error err;
        TB_REQUIRE(preset(&c, want[i].name, &err) == 0, "%s", err.msg);
        const tb_plan_parameters p = plan_parameters(&c, want[i].tp);
        TB_CHECK(p.countable && p.exact == want[i].exact && p.padded == want[i].padded &&
                     p.padded_vocab_size == want[i].padded_vocab && p.tp == want[i].tp,
                 "%s at tp %d: exact %lld (want %lld), padded %lld at %d (want %lld at %d)", want[i].name, want[i].tp,
                 (long long)p.exact, (long long)want[i].exact, (long long)p.padded, p.padded_vocab_size,
                 (long long)want[i].padded, want[i].padded_vocab);
        // the padded count is what the planner budgets a layout at that tp with
        tb_plan_cluster cl = {want[i].tp, 8, INT64_MAX, 989, 0.5, 450, 50, TB_PLAN_BF16};
        tb_plan plan;
        c.sequence_parallel = c.num_experts > 0;  // (MoE under tp needs it)
        TB_REQUIRE(plan_evaluate(&plan, &c, &cl, want[i].tp, 1, 1, 1, 1, &err) == 0, "%s", err.msg);
        TB_CHECK(plan.legal && plan.model_parameters == p.padded && plan.cfg.padded_vocab_size == p.padded_vocab_size,
                 "%s at tp %d: the plan's N %lld (vocab %d), the count's %lld (%d): %s", want[i].name, want[i].tp,
                 (long long)plan.model_parameters, plan.cfg.padded_vocab_size, (long long)p.padded,
                 p.padded_vocab_size, plan.rule);
        plan_free(&plan);
    }
    // DeepSeekMoE's active parameters: the engine's gpt_active_parameters, 6 of 64 experts a token
    tb_config c;
    tb_error err;
    TB_REQUIRE(preset(&c, "deepseek-moe-16b", &err) == 0, "%s", err.msg);
    const tb_plan_parameters p = plan_parameters(&c, 1);
    const int64_t experts = 28LL * 64 * 3 * 2048 * 1408;
    TB_CHECK(p.active == p.exact - experts + experts * 6 / 64 && p.active == 2830747648LL, "active %lld",
             (long long)p.active);
}

// Each preset plans on a plausible cluster from any directory (the presets are in the binary):
// legal layouts that fit, the first line its count at the first layout's tp, the JSON the same.
TB_TEST(every_preset_plans) {
    static const struct {
        const char *name, *flags;
    } runs[] = {
        {"gpt2-124m", "--gpus 8 --global-batch-size 512"},
        {"llama2-7b", "--gpus 8 --bf16 --global-batch-size 1024 --use-distributed-optimizer"},
        {"llama2-70b", "--gpus 64 --bf16 --global-batch-size 512 --use-distributed-optimizer --sequence-parallel"},
        {"llama3-405b", "--gpus 1024 --bf16 --global-batch-size 2048 --use-distributed-optimizer --sequence-parallel "
                        "--attention-backend flash --account-for-embedding-in-pipeline-split "
                        "--account-for-loss-in-pipeline-split"},
        {"deepseek-moe-16b", "--gpus 64 --bf16 --global-batch-size 1024 --use-distributed-optimizer"},
    };
    int n = 0;
    plan_models(&n);
    TB_CHECK(n == (int)(sizeof runs / sizeof runs[0]), "%d presets, %zu planned here", n, sizeof runs / sizeof runs[0]);
    tb_output o = {0};
    for (size_t i = 0; i < sizeof runs / sizeof runs[0]; i++) {
        int rc = tb_run(&o, "/", "'%s' plan --model %s %s --json --top 1", TRACEBOOK, runs[i].name, runs[i].flags);
        TB_REQUIRE(rc == 0, "%s: exit %d: %s", runs[i].name, rc, o.err);
        json_t *v = json_loads(o.out, 0, NULL);
        TB_REQUIRE(v, "%s: not JSON", runs[i].name);
        json_t *best = json_array_get(json_object_get(v, "candidates"), 0), *np = json_object_get(v, "parameters");
        tb_config c;
        tb_error err;
        TB_REQUIRE(preset(&c, runs[i].name, &err) == 0, "%s", err.msg);
        const json_int_t tp = json_integer_value(json_object_get(best, "tp"));
        const tb_plan_parameters p = plan_parameters(&c, (int)tp);
        TB_CHECK(json_integer_value(json_object_get(v, "legal")) > 0 &&
                     json_integer_value(json_object_get(v, "fit")) > 0 &&
                     json_is_true(json_object_get(json_object_get(best, "peak"), "fits")),
                 "%s: %lld legal, %lld fit", runs[i].name, json_integer_value(json_object_get(v, "legal")),
                 json_integer_value(json_object_get(v, "fit")));
        TB_CHECK(!strcmp(json_string_value(json_object_get(json_object_get(v, "model"), "preset")), runs[i].name) &&
                     json_integer_value(json_object_get(json_object_get(v, "model"), "num_layers")) == c.num_layers,
                 "%s: the model's JSON", runs[i].name);
        TB_CHECK(json_integer_value(json_object_get(np, "exact")) == p.exact &&
                     json_integer_value(json_object_get(np, "padded")) == p.padded &&
                     json_integer_value(json_object_get(np, "padded")) ==
                         json_integer_value(json_object_get(best, "model_parameters")) &&
                     json_integer_value(json_object_get(np, "padded_vocab_size")) ==
                         json_integer_value(json_object_get(best, "padded_vocab_size")) &&
                     json_integer_value(json_object_get(np, "tp")) == tp,
                 "%s: parameters %s", runs[i].name, json_dumps(np, JSON_COMPACT));
        json_decref(v);
        // the text listing's first line
        rc = tb_run(&o, "/", "'%s' plan --model %s %s --top 1", TRACEBOOK, runs[i].name, runs[i].flags);
        char exact[32], padded[32], vp[32], line[256];
        plan_format_count(p.exact, exact, sizeof exact);
        plan_format_count(p.padded, padded, sizeof padded);
        plan_format_count(p.padded_vocab_size, vp, sizeof vp);
        snprintf(line, sizeof line, ", %s parameters (%s with the vocabulary padded to %s at tp %lld)", exact, padded,
                 vp, (long long)tp);
        const char *nl = strchr(o.out, '\n');
        TB_CHECK(rc == 0 && !strncmp(o.out, "model: ", 7) && tb_has(o.out, line) && nl && strstr(o.out, line) < nl,
                 "%s: rc %d, the first line is not '...%s':\n%s", runs[i].name, rc, line, o.out);
    }
    tb_output_free(&o);
}

// The example of the README and of plan --help, its first line exact (tp fixed at 8).
TB_TEST(first_line_of_the_70b_listing) {
    // (flags over none of the preset's keys: the preset's name alone)
    tb_output o = {0};
    int rc = tb_run(&o, NULL, "'%s' plan --model llama2-70b --gpus 64 --bf16 --global-batch-size 512 "
                    "--use-distributed-optimizer --sequence-parallel --attention-backend flash "
                    "--tensor-model-parallel-size 8 --top 1",
                    TRACEBOOK);
    TB_CHECK(rc == 0 && starts(o.out, "model: llama2-70b, 68,976,648,192 parameters (68,989,231,104 with the "
                                      "vocabulary padded to 32,768 at tp 8)\n"),
             "rc %d:\n%s%s", rc, o.out, o.err);
    rc = tb_run(&o, NULL, "'%s' plan --model llama2-70b --explain tp4,pp4,dp4 --bf16 --global-batch-size 512",
                TRACEBOOK);
    TB_CHECK(rc == 0 && starts(o.out, "model: llama2-70b, 68,976,648,192 parameters (68,980,842,496 with the "
                                      "vocabulary padded to 32,256 at tp 4)\n"),
             "rc %d:\n%s%s", rc, o.out, o.err);
    // without a preset: named by the flags
    rc = tb_run(&o, NULL, "'%s' plan --gpus 1 --num-layers 12 --hidden-size 768 --num-attention-heads 12 "
                    "--seq-length 1024 --global-batch-size 8", TRACEBOOK);
    TB_CHECK(rc == 0 && starts(o.out, "model: given by the flags, 124,439,808 parameters (124,475,904 with the "
                                      "vocabulary padded to 50,304 at tp 1)\n"),
             "rc %d:\n%s%s", rc, o.out, o.err);
    tb_output_free(&o);
}

// A flag on the command line overrides the preset's value, as it does a --config file's.
TB_TEST(flags_override_the_preset) {
    tb_output o = {0};
    int rc = tb_run(&o, NULL, "'%s' plan --model llama2-7b --num-layers 16 --seq-length 2048 --gpus 8 "
                    "--global-batch-size 64 --json --top 1", TRACEBOOK);
    TB_REQUIRE(rc == 0, "exit %d: %s", rc, o.err);
    json_t *v = json_loads(o.out, 0, NULL);
    TB_REQUIRE(v, "not JSON");
    json_t *model = json_object_get(v, "model");
    // 16 of LLaMA-2-7B's 32 layers of 202,383,360 (4 x 4,096^2 + 3 x 4,096 x 11,008 + 2 x 4,096)
    TB_CHECK(json_integer_value(json_object_get(model, "num_layers")) == 16 &&
                 json_integer_value(json_object_get(model, "seq_length")) == 2048 &&
                 json_integer_value(json_object_get(model, "ffn_hidden_size")) == 11008 &&
                 json_integer_value(json_object_get(json_object_get(v, "parameters"), "exact")) ==
                     6738415616LL - 16 * 202383360LL,
             "%s", o.out);
    json_decref(v);
    rc = tb_run(&o, NULL, "'%s' plan --model gpt2-124m --num-layers 6 --gpus 2 --global-batch-size 8 --top 1",
                TRACEBOOK);
    // GPT-2 small's 12 layers of 7,087,872, 6 of them
    TB_CHECK(rc == 0 && starts(o.out, "model: gpt2-124m with --num-layers 6, 81,912,576 parameters ("),
             "rc %d:\n%s%s", rc, o.out, o.err);
    // the first line names the flags over the preset's values: --qk-layernorm (the preset says false) adds
    // a weight of head size 128 for the queries and one for the keys to each of the 32 layers
    rc = tb_run(&o, NULL, "'%s' plan --model llama2-7b --qk-layernorm --attention-backend flash --gpus 8 "
                "--global-batch-size 64 --top 1", TRACEBOOK);
    TB_CHECK(rc == 0 && starts(o.out, "model: llama2-7b with --qk-layernorm, 6,738,423,808 parameters ("),
             "rc %d:\n%s%s", rc, o.out, o.err);
    tb_output_free(&o);
}

TB_TEST(refusals_are_named) {
    tb_output o = {0};
    int n = 0;
    const tb_plan_model *m = plan_models(&n);
    int rc = tb_run(&o, NULL, "'%s' plan --model llama9-1t --gpus 8 --global-batch-size 8", TRACEBOOK);
    TB_CHECK(rc == 2 && tb_has(o.err, "--model 'llama9-1t': no such preset; the presets: "), "rc %d: %s", rc, o.err);
    for (int i = 0; i < n; i++) TB_CHECK(tb_has(o.err, m[i].name), "%s not listed: %s", m[i].name, o.err);
    rc = tb_run(&o, NULL, "'%s' plan --model llama2-7b --config x.json --gpus 8 --global-batch-size 8", TRACEBOOK);
    TB_CHECK(rc == 2 && tb_has(o.err, "--model llama2-7b and --config both give the model: give one"), "rc %d: %s", rc,
             o.err);
    rc = tb_run(&o, NULL, "'%s' plan --model llama2-7b --global-batch-size 8", TRACEBOOK);
    TB_CHECK(rc == 2 && tb_has(o.err, "--gpus N is required"), "rc %d: %s", rc, o.err);
    rc = tb_run(&o, NULL, "'%s' plan --model llama2-7b --gpus 0 --global-batch-size 8", TRACEBOOK);
    TB_CHECK(rc == 2 && tb_has(o.err, "--gpus 0: the number of GPUs every layout fills must be at least 1"),
             "rc %d: %s", rc, o.err);
    rc = tb_run(&o, NULL, "'%s' plan --model llama2-7b --gpus -8 --explain tp1,dp1", TRACEBOOK);
    TB_CHECK(rc == 2 && tb_has(o.err, "--gpus -8: the number of GPUs every layout fills must be at least 1"),
             "rc %d: %s", rc, o.err);
    tb_output_free(&o);
}

// --model list: every preset with its exact count, as text and as JSON, from any directory.
TB_TEST(model_list) {
    tb_output o = {0};
    int n = 0;
    const tb_plan_model *m = plan_models(&n);
    int rc = tb_run(&o, "/", "'%s' plan --model list", TRACEBOOK);
    TB_REQUIRE(rc == 0, "exit %d: %s", rc, o.err);
    for (int i = 0; i < n; i++) {
        tb_config c;
        tb_error err;
        TB_REQUIRE(preset(&c, m[i].name, &err) == 0, "%s", err.msg);
        char count[32], want[128];
        plan_format_count(plan_parameters(&c, 1).exact, count, sizeof count);
        snprintf(want, sizeof want, " %s parameters: %d layers", count, c.num_layers);
        const char *at = strstr(o.out, m[i].name);
        TB_CHECK(at && tb_has(at, want), "%s: no '%s' in\n%s", m[i].name, want, o.out);
    }
    TB_CHECK(tb_has(o.out, "124,439,808 parameters") && tb_has(o.out, "6,738,415,616 parameters"), "%s", o.out);
    rc = tb_run(&o, NULL, "'%s' plan --model list --json", TRACEBOOK);
    json_t *v = json_loads(o.out, 0, NULL), *models = json_object_get(v, "models");
    TB_CHECK(rc == 0 && json_array_size(models) == (size_t)n, "rc %d: %s", rc, o.out);
    for (size_t i = 0; i < json_array_size(models); i++) {
        json_t *e = json_array_get(models, i);
        TB_CHECK(!strcmp(json_string_value(json_object_get(e, "name")), m[i].name) &&
                     json_integer_value(json_object_get(json_object_get(e, "config"), "num_layers")) > 0 &&
                     json_integer_value(json_object_get(json_object_get(e, "parameters"), "exact")) > 0,
                 "entry %zu", i);
    }
    json_decref(v);
    tb_output_free(&o);
}

int main(void) {
    TB_RUN(built_in_presets_are_the_repository_files);
    TB_RUN(parameter_counts_against_the_published_ones);
    TB_RUN(every_preset_plans);
    TB_RUN(first_line_of_the_70b_listing);
    TB_RUN(flags_override_the_preset);
    TB_RUN(refusals_are_named);
    TB_RUN(model_list);
    return tb_test_summary();
}
