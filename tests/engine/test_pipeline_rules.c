// The pipeline rules of config.c, checked against Megatron-Core: config_validate refuses what
// Megatron refuses (too few or uneven microbatches, layers that do not divide over the stages,
// malformed layouts) with exactly its message, and config_pipeline_split splits the layers
// (uniformly, by a layout, counting the embedding and the loss) as Megatron does. The
// schedules themselves are test_schedules.c's.
#include <stdio.h>
#include <string.h>

#include "config/config.h"
#include "tb_test.h"

// ---------------------------------------------------------------------------------------
// Rule refusals and the layer split

static void base_config(tb_config *c) {
    config_defaults(c);
    c->num_layers = 4, c->hidden_size = 64, c->num_attention_heads = 4, c->seq_length = 32, c->vocab_size = 256;
    c->micro_batch_size = 2, c->global_batch_size = 16, c->pipeline_model_parallel_size = 2;
}

static int resolve_and_validate(const tb_config *cfg, tb_error *err) {
    tb_config c = *cfg;
    config_resolve(&c);
    memset(err, 0, sizeof *err);
    return config_validate(&c, err);
}

#define EXPECT_ONLY(cfgp, text)                                                                       \
    do {                                                                                              \
        tb_error e_;                                                                                  \
        int rc_ = resolve_and_validate((cfgp), &e_);                                                  \
        TB_CHECK(rc_ != 0 && strcmp(e_.msg, (text)) == 0, "expected exactly \"%s\"; got rc %d and "   \
                 "\"%s\"", (text), rc_, e_.msg);                                                      \
    } while (0)

#define EXPECT_VALID(cfgp)                                                                            \
    do {                                                                                              \
        tb_error e_;                                                                                  \
        int rc_ = resolve_and_validate((cfgp), &e_);                                                  \
        TB_CHECK(rc_ == 0, "expected a valid config; got \"%s\"", e_.msg);                             \
    } while (0)

// config_pipeline_split of the resolved config gives exactly `expected` (n stages).
static void expect_split(const tb_config *cfg, const int *expected, int n, const char *what) {
    tb_config c = *cfg;
    config_resolve(&c);
    int layers[TB_MAX_PIPELINE_STAGES];
    tb_error err;
    memset(&err, 0, sizeof err);
    int got = config_pipeline_split(&c, layers, &err);
    TB_CHECK(got == n, "%s: %d stages, expected %d (%s)", what, got, n, err.msg);
    if (got != n) return;
    char a[256] = "", b[256] = "";
    size_t ua = 0, ub = 0;
    int same = 1;
    for (int k = 0; k < n; k++) {
        ua += (size_t)snprintf(a + ua, sizeof a - ua, "%s%d", k ? "," : "", layers[k]);
        ub += (size_t)snprintf(b + ub, sizeof b - ub, "%s%d", k ? "," : "", expected[k]);
        same &= layers[k] == expected[k];
    }
    TB_CHECK(same, "%s: split {%s}, expected {%s}", what, a, b);
}

TB_TEST(too_few_microbatches_and_uneven_interleaved_microbatches_are_refused) {
    tb_config c;
    base_config(&c);
    c.pipeline_model_parallel_size = 4, c.global_batch_size = 4;  // 2 microbatches on 4 stages
    EXPECT_ONLY(&c, "num_microbatches (2) must be at least pipeline_model_parallel_size (4)");
    c.global_batch_size = 8;  // 4 microbatches: fine
    EXPECT_VALID(&c);

    base_config(&c);
    c.virtual_pipeline_model_parallel_size = 2, c.global_batch_size = 6;  // 3 microbatches, pp 2
    EXPECT_ONLY(&c, "num_microbatches (3) must be divisible by pipeline_model_parallel_size (2) with an "
                    "interleaved schedule");
    c.virtual_pipeline_model_parallel_size = 0;  // 1F1B takes 3 microbatches on 2 stages
    EXPECT_VALID(&c);

    base_config(&c);
    c.num_layers = 8, c.pipeline_model_parallel_size = 4, c.virtual_pipeline_model_parallel_size = 2;
    c.global_batch_size = 12;  // 6 microbatches: at least pp, not a multiple of it
    EXPECT_ONLY(&c, "num_microbatches (6) must be divisible by pipeline_model_parallel_size (4) with an "
                    "interleaved schedule");
    c.global_batch_size = 16;
    EXPECT_VALID(&c);
}

TB_TEST(layers_not_divisible_by_stages_are_refused_without_a_layout) {
    tb_config c;
    base_config(&c);
    c.num_layers = 5;
    EXPECT_ONLY(&c, "num_layers (5) must be divisible by pipeline_model_parallel_size (2)");
    c.num_layers = 6, c.virtual_pipeline_model_parallel_size = 2;
    EXPECT_ONLY(&c, "num_layers (6) must be divisible by pipeline_model_parallel_size x "
                    "virtual_pipeline_model_parallel_size (4)");
    // a layout makes an uneven model fine
    snprintf(c.pipeline_layout, sizeof c.pipeline_layout, "1,2,2,1");
    EXPECT_VALID(&c);
    expect_split(&c, (const int[]){1, 2, 2, 1}, 4, "6 layers, layout 1,2,2,1 (pp 2 x vpp 2)");
    c.num_layers = 5, c.virtual_pipeline_model_parallel_size = 0;
    snprintf(c.pipeline_layout, sizeof c.pipeline_layout, "3,2");
    EXPECT_VALID(&c);
    expect_split(&c, (const int[]){3, 2}, 2, "5 layers, layout 3,2");
    // uniform splits, in virtual stage order k = chunk·pp + rank
    base_config(&c);
    c.num_layers = 8, c.virtual_pipeline_model_parallel_size = 2;
    expect_split(&c, (const int[]){2, 2, 2, 2}, 4, "8 layers, pp 2 x vpp 2");
}

TB_TEST(malformed_pipeline_layouts_are_refused) {
    // each layout and exactly the message it is refused with; interleaved: pp × vpp entries
    static const struct {
        int vpp;
        const char *layout, *message;
    } cases[] = {
        {0, "1,1,2", "pipeline_layout '1,1,2' has more than 2 entries (pipeline_model_parallel_size 2 x virtual "
                     "stages 1)"},
        {0, "4", "pipeline_layout '4' has 1 entries, needs 2 (pipeline_model_parallel_size 2 x virtual stages 1)"},
        {0, "1,2", "pipeline_layout '1,2' sums to 3 layers, num_layers is 4"},
        {0, "2,x", "pipeline_layout '2,x': entry 2 is not a layer count"},
        {0, "2,,2", "pipeline_layout '2,,2': entry 2 is not a layer count"},
        {0, "-1,5", "pipeline_layout '-1,5': entry 1 is not a layer count"},
        {0, "2;2", "pipeline_layout '2;2': entry 1 is not a layer count"},
        {0, "1.5,2.5", "pipeline_layout '1.5,2.5': entry 1 is not a layer count"},
        {2, "2,2", "pipeline_layout '2,2' has 2 entries, needs 4 (pipeline_model_parallel_size 2 x virtual stages 2)"},
    };
    tb_config c;
    base_config(&c);  // 4 layers, pp 2
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        c.virtual_pipeline_model_parallel_size = cases[i].vpp;
        snprintf(c.pipeline_layout, sizeof c.pipeline_layout, "%s", cases[i].layout);
        EXPECT_ONLY(&c, cases[i].message);
    }
    c.virtual_pipeline_model_parallel_size = 2;
    snprintf(c.pipeline_layout, sizeof c.pipeline_layout, "1,1,1,1");
    EXPECT_VALID(&c);
    expect_split(&c, (const int[]){1, 1, 1, 1}, 4, "layout 1,1,1,1");
}

TB_TEST(account_for_embedding_and_loss_split_as_megatron) {
    // Megatron (get_num_layers_to_build): layers + embedding + loss split evenly over the
    // stages, the first (virtual) stage gives one to the embedding, the last to the loss.
    tb_config c;
    base_config(&c);  // 4 layers, pp 2: (4 + 2) / 2 = 3 per stage → [2 + embedding, 2 + loss]
    c.account_for_embedding_in_pipeline_split = 1, c.account_for_loss_in_pipeline_split = 1;
    EXPECT_VALID(&c);
    expect_split(&c, (const int[]){2, 2}, 2, "4 layers, pp 2, embedding and loss");
    c.num_layers = 6;  // (6 + 2) / 2 = 4 per stage → [3 + embedding, 3 + loss]
    EXPECT_VALID(&c);
    expect_split(&c, (const int[]){3, 3}, 2, "6 layers, pp 2, embedding and loss");
    c.virtual_pipeline_model_parallel_size = 2;  // 8 / 4 = 2 per virtual stage
    EXPECT_VALID(&c);
    expect_split(&c, (const int[]){1, 2, 2, 1}, 4, "6 layers, pp 2 x vpp 2, embedding and loss");

    base_config(&c);
    c.num_layers = 5, c.account_for_embedding_in_pipeline_split = 1;  // (5 + 1) / 2 = 3
    EXPECT_VALID(&c);
    expect_split(&c, (const int[]){2, 3}, 2, "5 layers, pp 2, embedding");
    c.account_for_embedding_in_pipeline_split = 0, c.account_for_loss_in_pipeline_split = 1;
    expect_split(&c, (const int[]){3, 2}, 2, "5 layers, pp 2, loss");

    base_config(&c);
    c.num_layers = 6, c.account_for_embedding_in_pipeline_split = 1;  // 7 does not split over 2
    EXPECT_ONLY(&c, "num_layers (6) + embedding (1) + loss (0) must be divisible by pipeline stages (2)");
    c.account_for_loss_in_pipeline_split = 1, c.num_layers = 5;  // 7 again
    EXPECT_ONLY(&c, "num_layers (5) + embedding (1) + loss (1) must be divisible by pipeline stages (2)");

    // a layout with either flag is refused
    base_config(&c);
    snprintf(c.pipeline_layout, sizeof c.pipeline_layout, "2,2");
    c.account_for_embedding_in_pipeline_split = 1;
    EXPECT_ONLY(&c, "pipeline_layout '2,2' and account_for_*_in_pipeline_split are exclusive");
    c.account_for_embedding_in_pipeline_split = 0, c.account_for_loss_in_pipeline_split = 1;
    EXPECT_ONLY(&c, "pipeline_layout '2,2' and account_for_*_in_pipeline_split are exclusive");
}

TB_TEST(num_layers_per_virtual_pipeline_stage_derives_vpp) {
    tb_config c;
    base_config(&c);
    c.num_layers = 8, c.num_layers_per_virtual_pipeline_stage = 2;  // 8 / 2 / 2 = 2 chunks
    tb_config r = c;
    config_resolve(&r);
    TB_CHECK(r.virtual_pipeline_model_parallel_size == 2, "vpp %d, expected 2",
             r.virtual_pipeline_model_parallel_size);
    EXPECT_VALID(&c);
    expect_split(&c, (const int[]){2, 2, 2, 2}, 4, "8 layers, pp 2, 2 layers per virtual stage");
    c.num_layers_per_virtual_pipeline_stage = 1;  // 4 chunks of one layer
    r = c;
    config_resolve(&r);
    TB_CHECK(r.virtual_pipeline_model_parallel_size == 4, "vpp %d, expected 4",
             r.virtual_pipeline_model_parallel_size);
    EXPECT_VALID(&c);
    c.num_layers_per_virtual_pipeline_stage = 3;  // 4 layers per stage do not split in 3s
    EXPECT_ONLY(&c, "num_layers (8) must be divisible by pipeline_model_parallel_size x "
                    "num_layers_per_virtual_pipeline_stage (2 x 3)");
    c.num_layers_per_virtual_pipeline_stage = -1;
    EXPECT_ONLY(&c, "num_layers_per_virtual_pipeline_stage (-1) must be non-negative");
}

// Megatron (training/arguments.py) counts the embedding and the loss when it derives the
// virtual pipeline size from --num-layers-per-virtual-pipeline-stage:
//   num_layers (+1 embedding) (+1 loss) must divide by pp; per stage / nlpvs = vpp.
// 6 layers + embedding + loss = 8, pp 2: 4 per stage, 2 per virtual stage → vpp 2, split
// [1, 2, 2, 1].
TB_TEST(num_layers_per_virtual_stage_counts_embedding_and_loss_as_megatron) {
    tb_config c;
    base_config(&c);
    c.num_layers = 6, c.num_layers_per_virtual_pipeline_stage = 2;
    c.account_for_embedding_in_pipeline_split = 1, c.account_for_loss_in_pipeline_split = 1;
    tb_config r = c;
    config_resolve(&r);
    TB_CHECK(r.virtual_pipeline_model_parallel_size == 2, "vpp %d, expected 2 ((6 + 2) / 2 / 2)",
             r.virtual_pipeline_model_parallel_size);
    EXPECT_VALID(&c);
    expect_split(&c, (const int[]){1, 2, 2, 1}, 4, "6 layers + embedding + loss, pp 2, 2 per virtual stage");
}

int main(void) {
    TB_RUN(too_few_microbatches_and_uneven_interleaved_microbatches_are_refused);
    TB_RUN(layers_not_divisible_by_stages_are_refused_without_a_layout);
    TB_RUN(malformed_pipeline_layouts_are_refused);
    TB_RUN(account_for_embedding_and_loss_split_as_megatron);
    TB_RUN(num_layers_per_virtual_pipeline_stage_derives_vpp);
    TB_RUN(num_layers_per_virtual_stage_counts_embedding_and_loss_as_megatron);
    return tb_test_summary();
}
