// test_plan_flags.c — the engine's flags on `tracebook plan`'s command line: the layout flags
// shape the search (--num-layers-per-virtual-pipeline-stage derives each pipeline's virtual
// size, as the engine does), and the flags no plan depends on (the optimizer's, the schedule's,
// checkpoints, data) are named as not used, never dropped without a word.
#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include "tb_shell.h"
#include "tb_test.h"

#define TRACEBOOK TB_BIN_DIR "/tracebook"
#define MODEL                                                                                                 \
    "--num-layers 8 --hidden-size 64 --num-attention-heads 4 --seq-length 32 --vocab-size 256 --gpus 8 " \
    "--global-batch-size 16 --top 0 --json"

static tb_output sh;

static json_t *plan(const char *flags) {
    if (tb_run(&sh, NULL, "%s plan " MODEL " %s", TRACEBOOK, flags) != 0) return NULL;
    return json_loads(sh.out, 0, NULL);
}

// With 1 layer per virtual stage every pipeline of pp > 1 stages runs 8 / pp virtual stages
// (pp 1 is refused by the engine's rule); without it the search tries other virtual sizes too.
TB_TEST(the_virtual_size_follows_num_layers_per_virtual_pipeline_stage) {
    json_t *doc = plan("--num-layers-per-virtual-pipeline-stage 1");
    TB_REQUIRE(doc, "tracebook plan: %s", sh.err);
    size_t i, n = 0;
    json_t *c;
    json_array_foreach(json_object_get(doc, "candidates"), i, c) {
        const long long pp = json_integer_value(json_object_get(c, "pp"));
        const long long vpp = json_integer_value(json_object_get(c, "vpp"));
        TB_CHECK(pp > 1 && vpp == 8 / pp, "candidate %zu: pp %lld with %lld virtual stages (8 layers, 1 per stage)", i,
                 pp, vpp);
        n++;
    }
    TB_CHECK(n > 0, "legal layouts: %zu", n);
    json_t *seen = json_object();  // each layout once (the search does not try it per virtual size)
    json_array_foreach(json_object_get(doc, "candidates"), i, c) {
        char name[128];
        snprintf(name, sizeof name, "tp%lld pp%lld cp%lld mbs%lld", json_integer_value(json_object_get(c, "tp")),
                 json_integer_value(json_object_get(c, "pp")), json_integer_value(json_object_get(c, "cp")),
                 json_integer_value(json_object_get(c, "micro_batch_size")));
        TB_CHECK(!json_object_get(seen, name), "%s listed twice", name);
        json_object_set_new(seen, name, json_true());
    }
    json_decref(seen);
    json_decref(doc);
    // a virtual size of 1 given with it: as the engine, the two must agree (8 layers / pp / 1 = 1:
    // pp 8 only), not the size given replaced by the derived one
    doc = plan("--num-layers-per-virtual-pipeline-stage 1 --virtual-pipeline-model-parallel-size 1");
    TB_REQUIRE(doc, "tracebook plan: %s", sh.err);
    n = 0;
    json_array_foreach(json_object_get(doc, "candidates"), i, c) {
        TB_CHECK(json_integer_value(json_object_get(c, "pp")) == 8 &&
                     json_integer_value(json_object_get(c, "vpp")) == 1,
                 "candidate %zu: pp %lld, vpp %lld (only pp 8 agrees with 1 layer per virtual stage)", i,
                 (long long)json_integer_value(json_object_get(c, "pp")),
                 (long long)json_integer_value(json_object_get(c, "vpp")));
        n++;
    }
    TB_CHECK(n > 0, "pp 8 is legal");
    json_decref(doc);
    doc = plan("");
    TB_REQUIRE(doc, "tracebook plan: %s", sh.err);
    int other = 0;
    json_array_foreach(json_object_get(doc, "candidates"), i, c) {
        const long long pp = json_integer_value(json_object_get(c, "pp"));
        other |= pp > 1 && json_integer_value(json_object_get(c, "vpp")) != 8 / pp;
    }
    TB_CHECK(other, "without the flag, the search tries other virtual sizes");
    json_decref(doc);
}

TB_TEST(flags_no_plan_depends_on_are_named_not_dropped) {
    json_t *bare = plan("--swiglu");
    TB_REQUIRE(bare, "tracebook plan: %s", sh.err);
    json_t *doc = plan("--lr 0.5 --save /tmp/nowhere --train-iters 10 --swiglu --check-for-nan-in-loss-and-grad "
                       "--exit-interval 50");
    TB_REQUIRE(doc, "tracebook plan: %s", sh.err);
    TB_CHECK(strstr(sh.err, "not used, no plan depends on them") &&
                 strstr(sh.err,
                        ": --lr 0.5, --save /tmp/nowhere, --train-iters 10, --check-for-nan-in-loss-and-grad, "
                        "--exit-interval 50\n"),
             "stderr names each unused flag with its value, and no planned one:\n%s", sh.err);
    json_t *named = json_object_get(doc, "flags_not_planned");
    TB_CHECK(json_array_size(named) == 5 && !strcmp(json_string_value(json_array_get(named, 1)), "--save /tmp/nowhere"),
             "the JSON lists them: %s", json_dumps(named, 0));
    TB_CHECK(json_equal(json_object_get(doc, "candidates"), json_object_get(bare, "candidates")),
             "the candidates are those of the plan without them (--swiglu in both: a flag the plan models; "
             "--exit-interval past --train-iters, which the engine refuses, makes no layout illegal here)");
    TB_CHECK(json_array_size(json_object_get(bare, "flags_not_planned")) == 0, "none without them");
    json_decref(doc);
    json_decref(bare);
}

int main(void) {
    TB_RUN(the_virtual_size_follows_num_layers_per_virtual_pipeline_stage);
    TB_RUN(flags_no_plan_depends_on_are_named_not_dropped);
    tb_output_free(&sh);
    return tb_test_summary();
}
