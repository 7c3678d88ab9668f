// Configuration properties: every rule of config_validate refuses its violation and names
// the rule with its numbers; several violations are all listed, one per line; what the
// engine cannot run yet is refused as "not supported yet", never silently accepted;
// config_resolve derives what was left 0. (Flags, the JSON config file and the binary:
// test_config_flags.c; the MoE rules: test_config_moe.c.)
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include "config/config.h"
#include "config_cases.h"
#include "tb_shell.h"
#include "tb_test.h"

// ---------------------------------------------------------------------------------------
// config_resolve and the defaults

TB_TEST(default_config_is_valid) {
    tb_config c;
    config_defaults(&c);
    EXPECT_VALID(&c);
    config_resolve(&c);
    TB_CHECK(config_validate(&c, NULL) == 0, "a valid config validates without an error buffer too");
}

TB_TEST(resolve_derives_sizes_left_zero_from_the_others) {
    tb_config c;
    config_defaults(&c);
    config_resolve(&c);
    TB_CHECK(c.ffn_hidden_size == 4 * c.hidden_size, "ffn %d, hidden %d", c.ffn_hidden_size, c.hidden_size);
    TB_CHECK(c.ffn_hidden_size == 1024, "ffn %d", c.ffn_hidden_size);
    TB_CHECK(c.num_query_groups == c.num_attention_heads, "groups %d, heads %d", c.num_query_groups,
             c.num_attention_heads);
    TB_CHECK(c.max_position_embeddings == c.seq_length, "max positions %d, seq %d",
             c.max_position_embeddings, c.seq_length);
    TB_CHECK(c.lr_decay_iters == c.train_iters, "lr decay iters %d, train iters %d", c.lr_decay_iters,
             c.train_iters);
    TB_CHECK(c.world_size == 1 && c.data_parallel_size == 1, "world %d, dp %d", c.world_size,
             c.data_parallel_size);
    TB_CHECK(c.global_batch_size == c.micro_batch_size, "global %d, micro %d", c.global_batch_size,
             c.micro_batch_size);
    TB_CHECK(c.num_microbatches == 1, "microbatches %d", c.num_microbatches);

    // Values that were given are kept.
    config_defaults(&c);
    c.ffn_hidden_size = 700, c.num_attention_heads = 8, c.num_query_groups = 2, c.max_position_embeddings = 1024;
    c.lr_decay_iters = 7;
    config_resolve(&c);
    TB_CHECK(c.ffn_hidden_size == 700 && c.num_query_groups == 2 && c.max_position_embeddings == 1024 &&
                 c.lr_decay_iters == 7,
             "given values overwritten: ffn %d, groups %d, max positions %d, decay %d", c.ffn_hidden_size,
             c.num_query_groups, c.max_position_embeddings, c.lr_decay_iters);
}

TB_TEST(resolve_derives_world_dp_global_batch_and_microbatches_from_the_layout) {
    tb_config c;
    config_defaults(&c);
    c.tensor_model_parallel_size = 2, c.context_parallel_size = 3, c.pipeline_model_parallel_size = 5;
    config_resolve(&c);
    TB_CHECK(c.world_size == 30, "world = tp x cp x pp = 30, got %d", c.world_size);
    TB_CHECK(c.data_parallel_size == 1, "dp %d", c.data_parallel_size);

    config_defaults(&c);
    c.tensor_model_parallel_size = 2, c.pipeline_model_parallel_size = 2, c.world_size = 16;
    c.micro_batch_size = 3;
    config_resolve(&c);
    TB_CHECK(c.data_parallel_size == 4, "dp = 16 / (2 x 1 x 2) = 4, got %d", c.data_parallel_size);
    TB_CHECK(c.global_batch_size == 12, "global = micro x dp = 12, got %d", c.global_batch_size);
    TB_CHECK(c.num_microbatches == 1, "microbatches %d", c.num_microbatches);

    c.global_batch_size = 48;
    config_resolve(&c);
    TB_CHECK(c.global_batch_size == 48, "a given global batch is kept, got %d", c.global_batch_size);
    TB_CHECK(c.num_microbatches == 4, "microbatches = 48 / (3 x 4) = 4, got %d", c.num_microbatches);
}

TB_TEST(padded_vocab_rounds_up_to_divisor_times_tp) {
    static const struct {
        int vocab, divisor, tp, padded;
    } cases[] = {
        {50257, 128, 1, 50304}, {256, 128, 1, 256}, {257, 128, 1, 384}, {1, 128, 1, 128},
        {128, 128, 1, 128},     {50257, 128, 2, 50432}, {256, 128, 4, 512}, {100, 1, 1, 100},
        {65536, 128, 1, 65536},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        tb_config c;
        config_defaults(&c);
        c.vocab_size = cases[i].vocab, c.make_vocab_size_divisible_by = cases[i].divisor;
        c.tensor_model_parallel_size = cases[i].tp;
        config_resolve(&c);
        TB_CHECK(c.padded_vocab_size == cases[i].padded, "vocab %d, divisor %d, tp %d: padded %d, want %d",
                 cases[i].vocab, cases[i].divisor, cases[i].tp, c.padded_vocab_size, cases[i].padded);
    }
}

// ---------------------------------------------------------------------------------------
// config_validate: one rule at a time

TB_TEST(every_size_that_must_be_positive_is_refused_at_zero_with_its_name) {
    CHECK_CASES(REFUSED("num_layers=0", "num_layers (0) must be at least 1"),
                REFUSED("hidden_size=0", "hidden_size (0) must be at least 1"),
                REFUSED("ffn_hidden_size=-8", "ffn_hidden_size (-8) must be at least 1"),
                REFUSED("num_attention_heads=0", "num_attention_heads (0) must be at least 1"),
                REFUSED("num_query_groups=-1", "num_query_groups (-1) must be at least 1"),
                REFUSED("seq_length=0", "seq_length (0) must be at least 1"),
                REFUSED("vocab_size=0", "vocab_size (0) must be at least 1"),
                REFUSED("make_vocab_size_divisible_by=0", "make_vocab_size_divisible_by (0) must be at least 1"),
                REFUSED("micro_batch_size=0", "micro_batch_size (0) must be at least 1"),
                REFUSED("global_batch_size=-4", "global_batch_size (-4) must be at least 1"),
                REFUSED("train_iters=0", "train_iters (0) must be at least 1"),
                REFUSED("log_interval=0", "log_interval (0) must be at least 1"),
                REFUSED("tensor_model_parallel_size=0", "tensor_model_parallel_size (0) must be at least 1"),
                REFUSED("pipeline_model_parallel_size=0", "pipeline_model_parallel_size (0) must be at least 1"),
                REFUSED("context_parallel_size=0", "context_parallel_size (0) must be at least 1"),
                REFUSED("expert_model_parallel_size=0", "expert_model_parallel_size (0) must be at least 1"),
                REFUSED("world_size=-2", "world_size (-2) must be at least 1"));
}

TB_TEST(positivity_failures_are_reported_before_and_instead_of_the_other_rules) {
    // hidden 250 is not divisible by 4 heads: not reported while a size is not positive
    CHECK_CASES(ONLY("num_layers=0 hidden_size=250 lr=-1", "num_layers (0) must be at least 1"));
}

TB_TEST(hidden_not_divisible_by_heads_is_refused_with_both_numbers) {
    CHECK_CASES(ONLY("hidden_size=250", "hidden_size (250) must be divisible by num_attention_heads (4)"));
}

TB_TEST(heads_not_divisible_by_query_groups_is_refused_with_both_numbers) {
    CHECK_CASES(ONLY("num_query_groups=3", "num_attention_heads (4) must be divisible by num_query_groups (3)"),
                // more groups than heads
                ONLY("num_query_groups=8", "num_attention_heads (4) must be divisible by num_query_groups (8)"));
}

TB_TEST(heads_not_divisible_by_tp_is_refused_with_both_numbers) {
    CHECK_CASES(REFUSED("hidden_size=768 num_attention_heads=12 tensor_model_parallel_size=8",
                        "num_attention_heads (12) must be divisible by tensor_model_parallel_size (8)"));
}

TB_TEST(query_groups_not_divisible_by_tp_is_refused_with_both_numbers) {
    CHECK_CASES(ONLY("num_attention_heads=8 num_query_groups=2 tensor_model_parallel_size=4",
                     "num_query_groups (2) must be divisible by tensor_model_parallel_size (4)"));
}

TB_TEST(ffn_not_divisible_by_tp_is_refused_with_both_numbers) {
    CHECK_CASES(ONLY("ffn_hidden_size=1001 tensor_model_parallel_size=2",
                     "ffn_hidden_size (1001) must be divisible by tensor_model_parallel_size (2)"));
}

TB_TEST(seq_length_over_max_position_embeddings_is_refused_with_both_numbers) {
    CHECK_CASES(ONLY("seq_length=256 max_position_embeddings=128",
                     "seq_length (256) must be at most max_position_embeddings (128)"),
                IS_VALID("seq_length=256 max_position_embeddings=256"));
}

TB_TEST(vocab_over_65536_is_refused_because_token_ids_are_uint16) {
    CHECK_CASES(ONLY("vocab_size=65537", "vocab_size (65537) must be at most 65536 (token files hold uint16 ids)"),
                IS_VALID("vocab_size=65536"));
}

TB_TEST(norm_epsilon_and_init_std_out_of_range_are_refused) {
    CHECK_CASES(ONLY("norm_epsilon=0", "norm_epsilon (0) must be positive"),
                ONLY("init_method_std=-0.5", "init_method_std (-0.5) must be non-negative"));
}

TB_TEST(world_not_divisible_by_tp_cp_pp_is_refused_with_the_product) {
    CHECK_CASES(ONLY("world_size=3 tensor_model_parallel_size=2",
                     "world_size (3) must be divisible by tensor_model_parallel_size x context_parallel_size x "
                     "pipeline_model_parallel_size (2 x 1 x 1 = 2)"),
                REFUSED("world_size=12 tensor_model_parallel_size=2 context_parallel_size=2 "
                        "pipeline_model_parallel_size=2",
                        "world_size (12) must be divisible by tensor_model_parallel_size x context_parallel_size x "
                        "pipeline_model_parallel_size (2 x 2 x 2 = 8)"));
}

TB_TEST(virtual_pipeline_without_pipeline_parallelism_is_refused) {
    CHECK_CASES(ONLY("virtual_pipeline_model_parallel_size=2",
                     "virtual_pipeline_model_parallel_size (2) needs pipeline_model_parallel_size > 1 (is 1)"),
                ONLY("virtual_pipeline_model_parallel_size=-1",
                     "virtual_pipeline_model_parallel_size (-1) must be non-negative"));
}

TB_TEST(layers_not_divisible_by_pipeline_stages_times_chunks_is_refused) {
    CHECK_CASES(ONLY("pipeline_model_parallel_size=2 global_batch_size=8 num_layers=5",
                     "num_layers (5) must be divisible by pipeline_model_parallel_size (2)"),
                ONLY("pipeline_model_parallel_size=2 global_batch_size=8 num_layers=6 "
                     "virtual_pipeline_model_parallel_size=2",
                     "num_layers (6) must be divisible by pipeline_model_parallel_size x "
                     "virtual_pipeline_model_parallel_size (4)"));
}

TB_TEST(seq_not_divisible_by_tp_with_sequence_parallel_is_refused) {
    // Without sequence parallelism an odd sequence is fine for tp 2: only the norm regions
    // of sequence parallelism split the sequence.
    CHECK_CASES(IS_VALID("tensor_model_parallel_size=2 seq_length=127"),
                ONLY("tensor_model_parallel_size=2 seq_length=127 sequence_parallel=1",
                     "seq_length (127) must be divisible by tensor_model_parallel_size (2)"),
                IS_VALID("tensor_model_parallel_size=2 seq_length=128 sequence_parallel=1"),
                // divisible by 2, not by 4
                ONLY("tensor_model_parallel_size=4 seq_length=130 sequence_parallel=1",
                     "seq_length (130) must be divisible by tensor_model_parallel_size (4)"));
}

TB_TEST(seq_not_divisible_by_twice_cp_is_refused) {
    CHECK_CASES(ONLY("context_parallel_size=2 seq_length=126",
                     "seq_length (126) must be divisible by 2 x context_parallel_size (4)"));
}

TB_TEST(experts_not_divisible_by_ep_is_refused) {
    CHECK_CASES(ONLY("world_size=2 expert_model_parallel_size=2 num_experts=3",
                     "num_experts (3) must be divisible by expert_model_parallel_size (2)"));
}

TB_TEST(expert_parallelism_without_experts_is_refused) {
    CHECK_CASES(
        ONLY("world_size=2 expert_model_parallel_size=2", "expert_model_parallel_size (2) needs num_experts > 0"));
}

TB_TEST(expert_and_context_parallelism_together_are_refused) {
    CHECK_CASES(ONLY("num_experts=2 expert_model_parallel_size=2 context_parallel_size=2",
                     "expert_model_parallel_size (2) and context_parallel_size (2) cannot both exceed 1"));
}

// Megatron's expert grid (parallel folding): etp x ep x expert-dp x pp = world, etp
// defaulting to tp, so ep may span the tp ranks when etp is 1.
TB_TEST(expert_grid_not_dividing_the_world_is_refused) {
    CHECK_CASES(ONLY("num_experts=4 expert_model_parallel_size=2",  // world 1
                     "world_size (1) must be divisible by expert_tensor_parallel_size x expert_model_parallel_size x "
                     "pipeline_model_parallel_size (1 x 2 x 1 = 2): the expert grid"),
                // tp 2 (etp 2 by default) x ep 2 does not divide a world of 2; etp 1 x ep 2 does
                ONLY("num_experts=4 tensor_model_parallel_size=2 sequence_parallel=1 expert_model_parallel_size=2 "
                     "world_size=2",
                     "world_size (2) must be divisible by expert_tensor_parallel_size x expert_model_parallel_size x "
                     "pipeline_model_parallel_size (2 x 2 x 1 = 4): the expert grid"),
                IS_VALID("num_experts=4 tensor_model_parallel_size=2 sequence_parallel=1 expert_model_parallel_size=2 "
                         "expert_tensor_parallel_size=1 world_size=2"),
                ONLY("num_experts=4 pipeline_model_parallel_size=2 expert_model_parallel_size=2 world_size=2 "
                     "global_batch_size=8",
                     "world_size (2) must be divisible by expert_tensor_parallel_size x expert_model_parallel_size x "
                     "pipeline_model_parallel_size (1 x 2 x 2 = 4): the expert grid"),
                IS_VALID("num_experts=4 expert_tensor_parallel_size=0 tensor_model_parallel_size=1"),  // 0: tp
                ONLY("num_experts=4 expert_tensor_parallel_size=-1",
                     "expert_tensor_parallel_size (-1) must be at least 1"));
}

TB_TEST(global_batch_not_divisible_by_micro_times_dp_is_refused) {
    CHECK_CASES(ONLY("global_batch_size=6",
                     "global_batch_size (6) must be divisible by micro_batch_size x data_parallel_size (4 x 1 = 4)"),
                ONLY("world_size=2 micro_batch_size=2 global_batch_size=6",
                     "global_batch_size (6) must be divisible by micro_batch_size x data_parallel_size (2 x 2 = 4)"));
}

TB_TEST(fewer_microbatches_than_pipeline_stages_is_refused) {
    CHECK_CASES(ONLY("pipeline_model_parallel_size=2",  // global batch 4 = one microbatch of 4
                     "num_microbatches (1) must be at least pipeline_model_parallel_size (2)"));
}

TB_TEST(microbatches_not_divisible_by_pp_with_interleaving_is_refused) {
    CHECK_CASES(ONLY("pipeline_model_parallel_size=2 virtual_pipeline_model_parallel_size=2 global_batch_size=12",
                     "num_microbatches (3) must be divisible by pipeline_model_parallel_size (2) with an "
                     "interleaved schedule"),
                // Without interleaving (0, or one chunk per rank) three microbatches on two stages are fine.
                IS_VALID("pipeline_model_parallel_size=2 virtual_pipeline_model_parallel_size=0 global_batch_size=12"),
                IS_VALID("pipeline_model_parallel_size=2 virtual_pipeline_model_parallel_size=1 global_batch_size=12"));
}

TB_TEST(lr_and_min_lr_out_of_order_are_refused) {
    CHECK_CASES(ONLY("lr=3e-4 min_lr=1e-3", "min_lr (0.001) must be between 0 and lr (0.0003)"),
                ONLY("lr=3e-4 min_lr=-1e-5", "min_lr (-1e-05) must be between 0 and lr (0.0003)"),
                REFUSED("lr=-1 min_lr=0", "lr (-1) must be non-negative"), IS_VALID("lr=1e-4 min_lr=1e-4"));
}

TB_TEST(negative_warmup_and_decay_iters_below_one_are_refused) {
    CHECK_CASES(ONLY("lr_warmup_iters=-1", "lr_warmup_iters (-1) must be non-negative"),
                ONLY("lr_decay_iters=-3", "lr_decay_iters (-3) must be at least 1"));
}

// Megatron's OptimizerParamScheduler asserts lr_warmup_steps < lr_decay_steps, the decay
// defaulting to the train iters.
TB_TEST(warmup_not_shorter_than_the_decay_is_refused_as_megatron_does) {
#define WARMUP_RULE(w, d) "lr_warmup_iters (" #w ") must be less than lr_decay_iters (" #d
    CHECK_CASES(ONLY("lr_warmup_iters=5 train_iters=3", WARMUP_RULE(5, 3) " = train_iters)"),
                ONLY("lr_warmup_iters=3 train_iters=3", WARMUP_RULE(3, 3) " = train_iters)"),
                ONLY("lr_warmup_iters=10 lr_decay_iters=10 train_iters=20", WARMUP_RULE(10, 10) ")"),
                ONLY("lr_warmup_iters=1 train_iters=1", WARMUP_RULE(1, 1) " = train_iters)"),
                IS_VALID("lr_warmup_iters=2 train_iters=3"), IS_VALID("lr_warmup_iters=0 train_iters=1"),
                // a short run of a longer schedule ends in its warm-up, as Megatron allows
                IS_VALID("lr_warmup_iters=5 lr_decay_iters=10 train_iters=3"));
#undef WARMUP_RULE
}

TB_TEST(adam_betas_outside_zero_one_are_refused) {
    CHECK_CASES(ONLY("adam_beta1=1", "adam_beta1 (1) must be in [0, 1)"),
                ONLY("adam_beta1=-0.1", "adam_beta1 (-0.1) must be in [0, 1)"),
                ONLY("adam_beta2=1.5", "adam_beta2 (1.5) must be in [0, 1)"), IS_VALID("adam_beta2=0"));
}

TB_TEST(adam_eps_weight_decay_and_clip_grad_out_of_range_are_refused) {
    CHECK_CASES(ONLY("adam_eps=0", "adam_eps (0) must be positive"),
                ONLY("weight_decay=-0.01", "weight_decay (-0.01) must be non-negative"),
                ONLY("clip_grad=-1", "clip_grad (-1) must be non-negative"),
                IS_VALID("clip_grad=0 weight_decay=0"));  // both 0 mean "off"
}

TB_TEST(full_recompute_without_method_is_refused) {
    CHECK_CASES(ONLY("recompute_granularity=full recompute_num_layers=1",
                     "recompute_granularity full needs recompute_method uniform or block"));
}

#define FULL_UNIFORM "recompute_granularity=full recompute_method=uniform "
#define FULL_BLOCK "recompute_granularity=full recompute_method=block "

TB_TEST(recompute_num_layers_out_of_range_is_refused_for_uniform_and_block) {
    CHECK_CASES(
        ONLY(FULL_UNIFORM "recompute_num_layers=0", "recompute_num_layers (0) must be between 1 and num_layers (4)"),
        ONLY(FULL_UNIFORM "recompute_num_layers=5", "recompute_num_layers (5) must be between 1 and num_layers (4)"),
        IS_VALID(FULL_UNIFORM "recompute_num_layers=4"),
        ONLY(FULL_BLOCK "recompute_num_layers=5", "recompute_num_layers (5) must be between 0 and num_layers (4)"),
        ONLY(FULL_BLOCK "recompute_num_layers=-1", "recompute_num_layers (-1) must be between 0 and num_layers (4)"),
        IS_VALID(FULL_BLOCK "recompute_num_layers=0"));  // block over 0 layers is allowed
}

TB_TEST(recompute_method_without_full_granularity_is_refused) {
    CHECK_CASES(REFUSED("recompute_method=uniform recompute_num_layers=1",
                        "recompute_method uniform needs recompute_granularity full (is none)"),
                REFUSED("recompute_granularity=selective recompute_method=block recompute_num_layers=1",
                        "recompute_method block needs recompute_granularity full (is selective)"));
}

TB_TEST(negative_memory_cap_peak_tflops_and_threads_are_refused) {
    CHECK_CASES(ONLY("memory_cap=-1", "memory_cap (-1) must be non-negative"),
                ONLY("peak_tflops=-989", "peak_tflops (-989) must be non-negative"),
                ONLY("num_threads=-2", "num_threads (-2) must be non-negative"));
}

TB_TEST(mock_data_with_a_data_path_is_refused) {
    CHECK_CASES(
        ONLY("mock_data=1 data_path=/data/tokens.bin", "mock_data and data_path '/data/tokens.bin' are exclusive"));
}

#define OVER_64 ", the largest world (and group) this build supports"

TB_TEST(world_over_64_ranks_is_refused_because_ranks_are_threads) {
    CHECK_CASES(ONLY("world_size=65", "world_size (65) exceeds 64" OVER_64),
                // refused before the layout rules
                ONLY("tensor_model_parallel_size=2 world_size=128", "world_size (128) exceeds 64" OVER_64),
                IS_VALID("world_size=64"));
}

TB_TEST(collective_timeout_must_be_positive) {
    tb_config c;
    config_defaults(&c);
    TB_CHECK(c.collective_timeout == 300, "default %g s", c.collective_timeout);
    CHECK_CASES(ONLY("collective_timeout=0", "collective_timeout (0) must be positive"),
                ONLY("collective_timeout=-5", "collective_timeout (-5) must be positive"),
                // NaN > 0 is false: refused, not taken as "no timeout"
                REFUSED("collective_timeout=nan", "must be positive"),
                REFUSED("collective_timeout=nan", "collective_timeout ("), IS_VALID("collective_timeout=0.25"));

    // Through the flag: 0 parses and is refused by the rule, NaN does not parse.
    tb_error e;
    int help;
    char *argv[] = {"pretrain_gpt", "--collective-timeout", "0"};
    TB_REQUIRE(parse(&c, ARGC(argv), argv, &help, &e) == 0, "\"%s\"", e.msg);
    EXPECT_ONLY(&c, "collective_timeout (0) must be positive");
    CHECK_PARSE_REFUSALS(
        {{"--collective-timeout=nan"}, "flag --collective-timeout: 'nan' is not a finite number in double range"});
}

#define SLOW_FORM " (decimal integers within int range)"
#define LINK_FORM " (MS a decimal integer within int range)"
#define SLOW_RANGE "': rank must be in [0, 2) and MS in [0, 60000]"
#define SLOW_GROUP "': the group must be one of tp, cp, dp, dp_cp, pp, mp, embedding, world, pp_grad and MS in [0, 60000]"

TB_TEST(slow_data_and_slow_link_drills_are_refused_unless_well_formed) {
    CHECK_CASES(ONLY("world_size=2 debug_slow_data=x", "debug_slow_data 'x' must be RANK:MS" SLOW_FORM),
                ONLY("world_size=2 debug_slow_data=1:", "debug_slow_data '1:' must be RANK:MS" SLOW_FORM),
                ONLY("world_size=2 debug_slow_data=1:5x", "debug_slow_data '1:5x' must be RANK:MS" SLOW_FORM),
                ONLY("world_size=2 debug_slow_data=2:100", "debug_slow_data '2:100" SLOW_RANGE),
                ONLY("world_size=2 debug_slow_data=0:-1", "debug_slow_data '0:-1" SLOW_RANGE),
                ONLY("world_size=2 debug_slow_data=0:60001", "debug_slow_data '0:60001" SLOW_RANGE),
                IS_VALID("world_size=2 debug_slow_data=1:400"),
                ONLY("world_size=2 debug_slow_link=dp", "debug_slow_link 'dp' must be GROUP:MS" LINK_FORM),
                ONLY("world_size=2 debug_slow_link=dp:1:2", "debug_slow_link 'dp:1:2' must be GROUP:MS" LINK_FORM),
                ONLY("world_size=2 debug_slow_link=nvlink:100", "debug_slow_link 'nvlink:100" SLOW_GROUP),
                ONLY("world_size=2 debug_slow_link=dp:-5", "debug_slow_link 'dp:-5" SLOW_GROUP),
                IS_VALID("world_size=2 debug_slow_link=dp_cp:400"));
}

// Values the engine once accepted that the runbook API (or Megatron) refuses: a negative seed,
// a negative recompute_num_layers without full recompute.
TB_TEST(negative_seed_and_recompute_layers_are_refused) {
    CHECK_CASES(ONLY("seed=-1", "seed (-1) must be non-negative"),
                ONLY("recompute_num_layers=-1", "recompute_num_layers (-1) must be non-negative"), IS_VALID("seed=0"),
                IS_VALID("recompute_num_layers=0"));
}

#define STALL_FORM "' must be RANK:STEP (decimal integers)"
#define STALL_RANGE(world) "': rank must be in [0, " #world ") and step at least 1"

TB_TEST(inject_stall_must_be_rank_colon_step_within_the_world) {
    CHECK_CASES(ONLY("world_size=4 inject_stall=x", "inject_stall 'x" STALL_FORM),
                ONLY("world_size=4 inject_stall=1", "inject_stall '1" STALL_FORM),
                ONLY("world_size=4 inject_stall=1:", "inject_stall '1:" STALL_FORM),
                ONLY("world_size=4 inject_stall=:2", "inject_stall ':2" STALL_FORM),
                ONLY("world_size=4 inject_stall=1:2x", "inject_stall '1:2x" STALL_FORM),
                ONLY("world_size=4 inject_stall=1:2:3", "inject_stall '1:2:3" STALL_FORM),
                ONLY("world_size=4 inject_stall=5:1", "inject_stall '5:1" STALL_RANGE(4)),
                ONLY("world_size=4 inject_stall=4:1", "inject_stall '4:1" STALL_RANGE(4)),
                ONLY("world_size=4 inject_stall=-1:1", "inject_stall '-1:1" STALL_RANGE(4)),
                ONLY("world_size=4 inject_stall=0:0", "inject_stall '0:0" STALL_RANGE(4)),
                ONLY("world_size=4 inject_stall=0:-3", "inject_stall '0:-3" STALL_RANGE(4)),
                ONLY("world_size=1 inject_stall=1:2", "inject_stall '1:2" STALL_RANGE(1)),
                IS_VALID("world_size=4 inject_stall=1:2"), IS_VALID("world_size=4 inject_stall=3:1"),
                IS_VALID("world_size=2 inject_stall=0:20"),
                // a world of one has no peer left waiting: the drill would never fire
                ONLY("world_size=1 inject_stall=0:20", "inject_stall '0:20' needs world_size at least 2 (is 1): with no "
                                                        "peer to wait for the stalled rank, the drill would never fire"));

    // The flag sets it; a value longer than the field is refused when parsed.
    tb_config c;
    tb_error e;
    int help;
    char *argv[] = {"pretrain_gpt", "--world-size", "4", "--inject-stall", "1:2"};
    TB_REQUIRE(parse(&c, ARGC(argv), argv, &help, &e) == 0, "\"%s\"", e.msg);
    TB_CHECK(!strcmp(c.inject_stall, "1:2"), "inject_stall '%s'", c.inject_stall);
    EXPECT_VALID(&c);
    char longv[80];
    memset(longv, '1', 64);
    longv[64] = '\0';
    char *argv2[] = {"pretrain_gpt", "--inject-stall", longv};
    TB_CHECK(parse(&c, ARGC(argv2), argv2, &help, &e) != 0 &&
                 strstr(e.msg, "flag --inject-stall: value is 64 characters, at most 63 allowed"),
             "\"%s\"", e.msg);
}

TB_TEST(inject_stall_step_beyond_train_iters_is_refused_because_the_drill_would_never_fire) {
    CHECK_CASES(ONLY("world_size=2 train_iters=3 inject_stall=1:99",
                     "inject_stall '1:99': step 99 is beyond train_iters (3), so the stall would never happen"),
                ONLY("world_size=2 train_iters=3 inject_stall=0:4",
                     "inject_stall '0:4': step 4 is beyond train_iters (3), so the stall would never happen"),
                // a rank beyond the world is named by the range rule, whatever the step
                ONLY("world_size=2 train_iters=3 inject_stall=2:99", "inject_stall '2:99" STALL_RANGE(2)),
                IS_VALID("world_size=2 train_iters=3 inject_stall=1:3"));
}

TB_TEST(negative_expert_count_is_refused_and_zero_means_dense) {
    CHECK_CASES(ONLY("num_experts=-3", "num_experts (-3) must be non-negative (0: dense)"),
                ONLY("num_experts=-1 expert_model_parallel_size=2 world_size=2",
                     "num_experts (-1) must be non-negative (0: dense)"),
                IS_VALID("num_experts=0"),
                IS_VALID("num_experts=2"));  // a MoE layer in every layer
}

// ---------------------------------------------------------------------------------------
// config_validate: several rules, and what is not supported yet

TB_TEST(several_violations_are_all_listed_one_per_line) {
    tb_config c = config_with("hidden_size=250 lr=-1 adam_eps=0 clip_grad=-1 memory_cap=-1");
    static const char *const expected[] = {
        "hidden_size (250) must be divisible by num_attention_heads (4)",
        "lr (-1) must be non-negative",
        "min_lr (0) must be between 0 and lr (-1)",
        "adam_eps (0) must be positive",
        "clip_grad (-1) must be non-negative",
        "memory_cap (-1) must be non-negative",
    };
    const int n = (int)(sizeof expected / sizeof expected[0]);
    tb_error e;
    TB_REQUIRE(resolve_and_validate(&c, &e) != 0, "refused");
    TB_CHECK(tb_count_lines(e.msg) == n, "%d lines, want %d: \"%s\"", tb_count_lines(e.msg), n, e.msg);
    // Each line is exactly one of the expected rules, and each rule has its line.
    int seen[6] = {0};
    char copy[sizeof e.msg];
    memcpy(copy, e.msg, sizeof copy);
    for (char *line = copy, *next; line; line = next) {
        next = strchr(line, '\n');
        if (next) *next++ = '\0';
        int match = -1;
        for (int i = 0; i < n; i++)
            if (!strcmp(line, expected[i])) match = i;
        TB_CHECK(match >= 0, "unexpected line \"%s\"", line);
        if (match >= 0) seen[match]++;
    }
    for (int i = 0; i < n; i++) TB_CHECK(seen[i] == 1, "\"%s\" listed %d times", expected[i], seen[i]);

    // Several positivity failures are all listed too.
    c = config_with("num_layers=0 micro_batch_size=0");
    TB_REQUIRE(resolve_and_validate(&c, &e) != 0, "refused");
    TB_CHECK(strstr(e.msg, "num_layers (0) must be at least 1\n") == e.msg, "first line: \"%s\"", e.msg);
    TB_CHECK(strstr(e.msg, "\nmicro_batch_size (0) must be at least 1") != NULL, "\"%s\"", e.msg);
    TB_CHECK(strstr(e.msg, "\nglobal_batch_size (0) must be at least 1") != NULL,
             "the derived global batch (micro x dp = 0) is named too: \"%s\"", e.msg);
    TB_CHECK(tb_count_lines(e.msg) == 3, "\"%s\"", e.msg);

    TB_CHECK(config_validate(&c, NULL) != 0, "an invalid config is refused without an error buffer too");
}

TB_TEST(multi_rank_tp_dp_layouts_are_valid) {
    CHECK_CASES(IS_VALID("world_size=2"),  // dp 2
                IS_VALID("tensor_model_parallel_size=2"),  // world 2 = tp 2
                IS_VALID("tensor_model_parallel_size=2 world_size=8"),  // dp 4
                // dp 2, two microbatches
                IS_VALID("tensor_model_parallel_size=4 world_size=8 sequence_parallel=1 use_distributed_optimizer=1 "
                         "micro_batch_size=2 global_batch_size=8"),
                // the largest world: tp 2 x dp 32
                IS_VALID("num_attention_heads=8 num_query_groups=2 tensor_model_parallel_size=2 world_size=64 "
                         "sequence_parallel=1 use_distributed_optimizer=1"));
    tb_config r = config_with("tensor_model_parallel_size=2 world_size=8");
    config_resolve(&r);
    TB_CHECK(r.data_parallel_size == 4 && r.global_batch_size == 16 && r.num_microbatches == 1,
             "dp %d, global %d, microbatches %d", r.data_parallel_size, r.global_batch_size, r.num_microbatches);
}

TB_TEST(distributed_optimizer_is_valid_with_any_data_parallel_size) {
    CHECK_CASES(IS_VALID("use_distributed_optimizer=1"),  // one rank: the shard is the whole state
                IS_VALID("use_distributed_optimizer=1 world_size=4"),
                // a dp that divides no power of two
                IS_VALID("use_distributed_optimizer=1 world_size=3 micro_batch_size=1"));
}

TB_TEST(sequence_parallel_with_tp_1_is_refused) {
    CHECK_CASES(
        ONLY("sequence_parallel=1", "sequence_parallel needs tensor_model_parallel_size > 1 (is 1)"),
        // data parallelism does not make it meaningful
        ONLY("sequence_parallel=1 world_size=4", "sequence_parallel needs tensor_model_parallel_size > 1 (is 1)"),
        IS_VALID("sequence_parallel=1 world_size=4 tensor_model_parallel_size=2"));
}

TB_TEST(pipeline_layouts_with_and_without_interleaving_are_valid) {
    CHECK_CASES(IS_VALID("pipeline_model_parallel_size=2 global_batch_size=8"),  // two microbatches, 4 layers
                IS_VALID("tensor_model_parallel_size=2 pipeline_model_parallel_size=2 world_size=8 "
                         "global_batch_size=16"),  // dp 2
                IS_VALID("pipeline_model_parallel_size=2 virtual_pipeline_model_parallel_size=2 global_batch_size=8"),
                IS_VALID("num_layers=8 pipeline_model_parallel_size=4 world_size=8 tensor_model_parallel_size=2 "
                         "sequence_parallel=1 use_distributed_optimizer=1 micro_batch_size=1 global_batch_size=4"));
}

// Megatron-FSDP: the strategy only with --use-megatron-fsdp, which runs with the distributed
// optimizer (Megatron's rule); what its engine module cannot run yet refused by name.
#define FSDP_ON "world_size=2 use_distributed_optimizer=1 use_megatron_fsdp=1 "
TB_TEST(megatron_fsdp_rules_and_the_layouts_not_supported_yet) {
    CHECK_CASES(IS_VALID(FSDP_ON "data_parallel_sharding_strategy=optim_grads_params"),
                IS_VALID(FSDP_ON "data_parallel_sharding_strategy=no_shard"),
                IS_VALID("world_size=4 tensor_model_parallel_size=2 sequence_parallel=1 use_distributed_optimizer=1 "
                         "use_megatron_fsdp=1 data_parallel_sharding_strategy=optim_grads"),
                ONLY("data_parallel_sharding_strategy=optim_grads",
                     "data_parallel_sharding_strategy optim_grads needs use_megatron_fsdp"),
                ONLY("world_size=2 use_megatron_fsdp=1", "use_megatron_fsdp needs use_distributed_optimizer"),
                IS_VALID("world_size=4 use_distributed_optimizer=1 use_megatron_fsdp=1 pipeline_model_parallel_size=2 "
                         "micro_batch_size=1 global_batch_size=4"),
                IS_VALID("world_size=4 use_distributed_optimizer=1 use_megatron_fsdp=1 pipeline_model_parallel_size=2 "
                         "untie_embeddings_and_output_weights=1 micro_batch_size=1 global_batch_size=4"),
                REFUSED("world_size=4 use_distributed_optimizer=1 use_megatron_fsdp=1 pipeline_model_parallel_size=2 "
                        "untie_embeddings_and_output_weights=1 virtual_pipeline_model_parallel_size=2 num_layers=4 "
                        "micro_batch_size=1 global_batch_size=4",
                        "use_megatron_fsdp with virtual_pipeline_model_parallel_size 2: not supported yet"),
                IS_VALID(FSDP_ON "num_experts=4 data_parallel_sharding_strategy=optim_grads_params"),
                IS_VALID(FSDP_ON "num_experts=4 expert_model_parallel_size=2 moe_token_dispatcher_type=alltoall "
                         "data_parallel_sharding_strategy=optim_grads"),
                IS_VALID(FSDP_ON "overlap_grad_reduce=1 data_parallel_sharding_strategy=optim_grads"),
                IS_VALID(FSDP_ON "overlap_grad_reduce=1 overlap_param_gather=1 "
                         "data_parallel_sharding_strategy=optim_grads_params"),
                IS_VALID(FSDP_ON "overlap_grad_reduce=1 overlap_param_gather=1 data_parallel_sharding_strategy=optim"),
                ONLY(FSDP_ON "overlap_grad_reduce=1 overlap_param_gather=1",
                     "overlap_param_gather with data_parallel_sharding_strategy no_shard: nothing to gather (no_shard "
                     "keeps every parameter on every rank)"),
                REFUSED(FSDP_ON "overlap_grad_reduce=1 overlap_param_gather=1 "
                                "data_parallel_sharding_strategy=optim_grads",
                        "use_megatron_fsdp optim_grads with overlap_param_gather: not supported yet"),
                REFUSED(FSDP_ON "device=cuda data_parallel_sharding_strategy=optim_grads",
                        "data_parallel_sharding_strategy optim_grads with device cuda: not supported yet"),
                IS_VALID(FSDP_ON "device=cuda data_parallel_sharding_strategy=optim"));
}

// Context parallelism runs with the flash attention core and either exchange (all_gather or
// the p2p ring); the local core is refused by name.
TB_TEST(context_parallelism_needs_flash_attention) {
    CHECK_CASES(IS_VALID("context_parallel_size=2 attention_backend=flash"),
                // dp 2, two microbatches
                IS_VALID("tensor_model_parallel_size=2 context_parallel_size=2 pipeline_model_parallel_size=2 "
                         "world_size=16 global_batch_size=16 attention_backend=flash"),
                ONLY("context_parallel_size=2 attention_backend=local",
                     "context_parallel_size 2 needs attention_backend flash (the blocked kernel takes the sequence's K "
                     "and V with each local query's position; is local)"),
                // auto, the default, runs the blocked core
                IS_VALID("context_parallel_size=2"),
                IS_VALID("context_parallel_size=2 attention_backend=flash cp_comm_type=p2p"),
                IS_VALID("context_parallel_size=4 world_size=4 attention_backend=flash cp_comm_type=p2p"),
                ONLY("context_parallel_size=2 attention_backend=flash seq_length=126",
                     "seq_length (126) must be divisible by 2 x context_parallel_size (4)"),
                // the ring's chunks are the same zig-zag halves
                ONLY("context_parallel_size=4 world_size=4 attention_backend=flash cp_comm_type=p2p seq_length=1020",
                     "seq_length (1020) must be divisible by 2 x context_parallel_size (8)"));
}

TB_TEST(pipeline_split_is_uniform_accounts_for_embedding_and_loss_or_follows_the_layout) {
    static const struct {
        int num_layers, pp, vpp, emb, loss;
        const char *layout;
        int stages, layers[8];
    } cases[] = {
        {8, 4, 0, 0, 0, "", 4, {2, 2, 2, 2}},
        {8, 2, 2, 0, 0, "", 4, {2, 2, 2, 2}},      // virtual stage k = chunk x pp + pp rank
        {6, 4, 0, 1, 1, "", 4, {1, 2, 2, 1}},      // 6 + 2 accounted = 8: 2 per stage
        {7, 4, 0, 1, 0, "", 4, {1, 2, 2, 2}},
        {12, 4, 0, 0, 0, "3,5,2,2", 4, {3, 5, 2, 2}},
        {4, 2, 2, 0, 0, "0,2,1,1", 4, {0, 2, 1, 1}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        tb_config c;
        config_defaults(&c);
        c.num_layers = cases[i].num_layers, c.pipeline_model_parallel_size = cases[i].pp;
        c.virtual_pipeline_model_parallel_size = cases[i].vpp;
        c.account_for_embedding_in_pipeline_split = cases[i].emb, c.account_for_loss_in_pipeline_split = cases[i].loss;
        snprintf(c.pipeline_layout, sizeof c.pipeline_layout, "%s", cases[i].layout);
        c.global_batch_size = 4 * cases[i].pp;
        config_resolve(&c);
        int layers[TB_MAX_PIPELINE_STAGES];
        tb_error e;
        memset(&e, 0, sizeof e);
        int n = config_pipeline_split(&c, layers, &e);
        TB_CHECK(n == cases[i].stages, "case %zu: %d stages, want %d (\"%s\")", i, n, cases[i].stages, e.msg);
        for (int k = 0; k < n && k < cases[i].stages; k++)
            TB_CHECK(layers[k] == cases[i].layers[k], "case %zu: stage %d has %d layers, want %d", i, k, layers[k],
                     cases[i].layers[k]);
        EXPECT_VALID(&c);
    }
}

#define PP4_12 "pipeline_model_parallel_size=4 num_layers=12 global_batch_size=16 "
#define PP4_ENTRIES "(pipeline_model_parallel_size 4 x virtual stages 1)"
#define PP2_8 "num_layers=8 pipeline_model_parallel_size=2 global_batch_size=8 "

TB_TEST(pipeline_split_violations_are_refused_naming_the_layout) {
    CHECK_CASES(
        ONLY(PP4_12 "pipeline_layout=3,5", "pipeline_layout '3,5' has 2 entries, needs 4 " PP4_ENTRIES),
        ONLY(PP4_12 "pipeline_layout=3,5,2,2,0", "pipeline_layout '3,5,2,2,0' has more than 4 entries " PP4_ENTRIES),
        ONLY(PP4_12 "pipeline_layout=3,5,2,1", "pipeline_layout '3,5,2,1' sums to 11 layers, num_layers is 12"),
        ONLY(PP4_12 "pipeline_layout=3,x,2,2", "pipeline_layout '3,x,2,2': entry 2 is not a layer count"),
        ONLY(PP4_12 "pipeline_layout=3,5,-2,6", "pipeline_layout '3,5,-2,6': entry 3 is not a layer count"),
        ONLY(PP4_12 "pipeline_layout=3,5,2,2 account_for_loss_in_pipeline_split=1",
             "pipeline_layout '3,5,2,2' and account_for_*_in_pipeline_split are exclusive"),
        ONLY("pipeline_model_parallel_size=2 global_batch_size=8 account_for_embedding_in_pipeline_split=1",
             "num_layers (4) + embedding (1) + loss (0) must be divisible by pipeline stages (2)"),
        ONLY("pipeline_model_parallel_size=2 global_batch_size=8 virtual_pipeline_model_parallel_size=200",
             "pipeline stages (2 x 200) exceed 256"));

    // 2 layers per virtual stage derives 8 / 2 / 2 = 2 chunks per rank
    tb_config r = config_with(PP2_8 "num_layers_per_virtual_pipeline_stage=2");
    config_resolve(&r);
    TB_CHECK(r.virtual_pipeline_model_parallel_size == 2, "derived vpp %d", r.virtual_pipeline_model_parallel_size);
    CHECK_CASES(IS_VALID(PP2_8 "num_layers_per_virtual_pipeline_stage=2"),
                ONLY(PP2_8 "num_layers_per_virtual_pipeline_stage=3",
                     "num_layers (8) must be divisible by pipeline_model_parallel_size x "
                     "num_layers_per_virtual_pipeline_stage (2 x 3)"),
                ONLY(PP2_8 "num_layers_per_virtual_pipeline_stage=-1",
                     "num_layers_per_virtual_pipeline_stage (-1) must be non-negative"));
}

// RoPE as Megatron: the rotary dimension is head size x rotary_percent, an even integer;
// rope's settings without rope are refused rather than ignored.
TB_TEST(rope_settings_follow_megatron_and_are_refused_without_rope) {
    CHECK_CASES(IS_VALID("position_embedding_type=rope"),
                IS_VALID("position_embedding_type=none"),
                IS_VALID("position_embedding_type=rope rotary_percent=0.5 rotary_base=500000 rotary_interleaved=1"),
                ONLY("position_embedding_type=rope rotary_percent=0",
                     "rotary_percent (0) must be in (0, 1]"),
                ONLY("position_embedding_type=rope rotary_percent=1.5", "rotary_percent (1.5) must be in (0, 1]"),
                // hidden 64 / 4 heads: head size 16
                ONLY("position_embedding_type=rope hidden_size=64 num_attention_heads=4 rotary_percent=0.3",
                     "the rotary dimension, head size 16 x rotary_percent 0.3 = 4.8, must be an even integer"),
                ONLY("position_embedding_type=rope hidden_size=64 num_attention_heads=4 rotary_percent=0.5625",
                     "the rotary dimension, head size 16 x rotary_percent 0.5625 = 9, must be an even integer"),
                ONLY("position_embedding_type=rope rotary_base=0", "rotary_base (0) must be positive"),
                ONLY("rotary_percent=0.5",
                     "rotary_percent (0.5) applies only with position_embedding_type rope (is learned_absolute)"),
                ONLY("position_embedding_type=none rotary_base=500",
                     "rotary_base (500) applies only with position_embedding_type rope (is none)"),
                ONLY("rotary_interleaved=1",
                     "rotary_interleaved applies only with position_embedding_type rope (is learned_absolute)"));
}

TB_TEST(dropout_above_zero_is_refused_as_not_supported_yet) {
    CHECK_CASES(ONLY("hidden_dropout=0.1", "hidden_dropout 0.1: dropout is not supported yet"),
                ONLY("attention_dropout=0.25", "attention_dropout 0.25: dropout is not supported yet"));
}

TB_TEST(unsupported_values_are_named_only_once_every_rule_passes) {
    CHECK_CASES(ONLY("num_experts=2 moe_token_dispatcher_type=flex lr=1e-4 min_lr=1e-3",
                     "min_lr (0.001) must be between 0 and lr (0.0001)"),
                ONLY("num_experts=2 moe_token_dispatcher_type=flex lr=1e-4 min_lr=0",
                     "moe_token_dispatcher_type flex: not supported yet (allgather and alltoall are)"),
                // sequence parallelism without tp is checked with the unsupported values, after the rules
                ONLY("sequence_parallel=1 collective_timeout=0", "collective_timeout (0) must be positive"));
}

TB_TEST(all_unsupported_values_together_are_all_listed) {
    // world 4, dp 1: two microbatches, a multiple of pp
    tb_config c = config_with("pipeline_model_parallel_size=2 virtual_pipeline_model_parallel_size=2 "
                              "context_parallel_size=2 global_batch_size=8 num_experts=4 sequence_parallel=1 "
                              "hidden_dropout=0.1 attention_dropout=0.1 cp_comm_type=p2p attention_backend=flash");
    static const char *const expected[] = {
        "sequence_parallel needs tensor_model_parallel_size > 1 (is 1)",
        "num_experts 4 with context_parallel_size 2: not supported yet (MoE runs at cp 1)",
        "hidden_dropout 0.1: dropout is not supported yet",
        "attention_dropout 0.1: dropout is not supported yet",
    };
    char want[1024] = "";
    for (size_t i = 0; i < sizeof expected / sizeof expected[0]; i++)
        snprintf(want + strlen(want), sizeof want - strlen(want), "%s%s", i ? "\n" : "", expected[i]);
    EXPECT_ONLY(&c, want);  // pipeline and interleaving are supported: not listed
    tb_error e;
    TB_REQUIRE(resolve_and_validate(&c, &e) != 0, "refused");
    const char *p = e.msg;
    int n = 0;
    while ((p = strstr(p, "not supported yet")) != NULL) n++, p++;
    TB_CHECK(n == 3, "%d lines say \"not supported yet\": \"%s\"", n, e.msg);

    // Expert parallelism cannot join context parallelism (a rule, not a refusal); with
    // pipeline and data parallelism it runs.
    CHECK_CASES(IS_VALID("pipeline_model_parallel_size=2 expert_model_parallel_size=2 num_experts=2 world_size=4 "
                         "micro_batch_size=1 global_batch_size=4 moe_token_dispatcher_type=alltoall"));
}

TB_TEST(supported_variations_pass_validation) {
    CHECK_CASES(IS_VALID("normalization=RMSNorm swiglu=1 disable_bias_linear=1 untie_embeddings_and_output_weights=1"),
                IS_VALID("num_attention_heads=8 num_query_groups=2 ffn_hidden_size=700"),  // GQA, odd ffn
                IS_VALID("micro_batch_size=2 global_batch_size=8"),  // four microbatches
                IS_VALID("recompute_granularity=selective"),
                IS_VALID("recompute_granularity=full recompute_method=uniform recompute_num_layers=2"),
                IS_VALID("memory_cap=1073741824 peak_tflops=1.5 num_threads=3 vocab_size=256 "
                         "max_position_embeddings=1024 lr_warmup_iters=5 lr_decay_style=constant mock_data=1"),
                IS_VALID("data_path=/data/tokens.bin"));
}

int main(void) {
    TB_RUN(default_config_is_valid);
    TB_RUN(resolve_derives_sizes_left_zero_from_the_others);
    TB_RUN(resolve_derives_world_dp_global_batch_and_microbatches_from_the_layout);
    TB_RUN(padded_vocab_rounds_up_to_divisor_times_tp);

    TB_RUN(every_size_that_must_be_positive_is_refused_at_zero_with_its_name);
    TB_RUN(positivity_failures_are_reported_before_and_instead_of_the_other_rules);
    TB_RUN(hidden_not_divisible_by_heads_is_refused_with_both_numbers);
    TB_RUN(heads_not_divisible_by_query_groups_is_refused_with_both_numbers);
    TB_RUN(heads_not_divisible_by_tp_is_refused_with_both_numbers);
    TB_RUN(query_groups_not_divisible_by_tp_is_refused_with_both_numbers);
    TB_RUN(ffn_not_divisible_by_tp_is_refused_with_both_numbers);
    TB_RUN(seq_length_over_max_position_embeddings_is_refused_with_both_numbers);
    TB_RUN(vocab_over_65536_is_refused_because_token_ids_are_uint16);
    TB_RUN(norm_epsilon_and_init_std_out_of_range_are_refused);
    TB_RUN(world_not_divisible_by_tp_cp_pp_is_refused_with_the_product);
    TB_RUN(virtual_pipeline_without_pipeline_parallelism_is_refused);
    TB_RUN(layers_not_divisible_by_pipeline_stages_times_chunks_is_refused);
    TB_RUN(seq_not_divisible_by_tp_with_sequence_parallel_is_refused);
    TB_RUN(seq_not_divisible_by_twice_cp_is_refused);
    TB_RUN(experts_not_divisible_by_ep_is_refused);
    TB_RUN(expert_parallelism_without_experts_is_refused);
    TB_RUN(expert_and_context_parallelism_together_are_refused);
    TB_RUN(megatron_fsdp_rules_and_the_layouts_not_supported_yet);
    TB_RUN(expert_grid_not_dividing_the_world_is_refused);
    TB_RUN(global_batch_not_divisible_by_micro_times_dp_is_refused);
    TB_RUN(fewer_microbatches_than_pipeline_stages_is_refused);
    TB_RUN(microbatches_not_divisible_by_pp_with_interleaving_is_refused);
    TB_RUN(lr_and_min_lr_out_of_order_are_refused);
    TB_RUN(negative_warmup_and_decay_iters_below_one_are_refused);
    TB_RUN(warmup_not_shorter_than_the_decay_is_refused_as_megatron_does);
    TB_RUN(adam_betas_outside_zero_one_are_refused);
    TB_RUN(adam_eps_weight_decay_and_clip_grad_out_of_range_are_refused);
    TB_RUN(full_recompute_without_method_is_refused);
    TB_RUN(recompute_num_layers_out_of_range_is_refused_for_uniform_and_block);
    TB_RUN(recompute_method_without_full_granularity_is_refused);
    TB_RUN(negative_memory_cap_peak_tflops_and_threads_are_refused);
    TB_RUN(mock_data_with_a_data_path_is_refused);
    TB_RUN(world_over_64_ranks_is_refused_because_ranks_are_threads);
    TB_RUN(collective_timeout_must_be_positive);
    TB_RUN(inject_stall_must_be_rank_colon_step_within_the_world);
    TB_RUN(negative_seed_and_recompute_layers_are_refused);
    TB_RUN(slow_data_and_slow_link_drills_are_refused_unless_well_formed);
    TB_RUN(inject_stall_step_beyond_train_iters_is_refused_because_the_drill_would_never_fire);
    TB_RUN(negative_expert_count_is_refused_and_zero_means_dense);

    TB_RUN(several_violations_are_all_listed_one_per_line);
    TB_RUN(multi_rank_tp_dp_layouts_are_valid);
    TB_RUN(distributed_optimizer_is_valid_with_any_data_parallel_size);
    TB_RUN(sequence_parallel_with_tp_1_is_refused);
    TB_RUN(pipeline_layouts_with_and_without_interleaving_are_valid);
    TB_RUN(context_parallelism_needs_flash_attention);
    TB_RUN(pipeline_split_is_uniform_accounts_for_embedding_and_loss_or_follows_the_layout);
    TB_RUN(pipeline_split_violations_are_refused_naming_the_layout);
    TB_RUN(rope_settings_follow_megatron_and_are_refused_without_rope);
    TB_RUN(dropout_above_zero_is_refused_as_not_supported_yet);
    TB_RUN(unsupported_values_are_named_only_once_every_rule_passes);
    TB_RUN(all_unsupported_values_together_are_all_listed);
    TB_RUN(supported_variations_pass_validation);

    return tb_test_summary();
}
