// test_bisect.c — `tracebook bisect` on runs that dumped their tensors (--dump-tensors,
// engine/reports/tensor_dump.h): from the same checkpoint, inputs and seeds, tp 2 + sp, tp 4 and
// pp 2 (two stages' files merged) against the single rank show no divergence beyond the
// bound, and so do cp 2 and cp 2 x tp 2 + sp (the cp ranks' rows put back in sequence order)
// against the single rank with the same attention core; each injected tensor-parallel bug is
// found at the tensor it breaks first.
#include <string.h>

#include "tb_shell.h"
#include "tb_test.h"

#define PRETRAIN TB_BIN_DIR "/pretrain_gpt"
#define TRACEBOOK TB_BIN_DIR "/tracebook"
#define DIR TB_TEST_TMPDIR "/bisect"
#define MODEL                                                                                          \
    " --num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 32 --vocab-size 200"       \
    " --micro-batch-size 2 --global-batch-size 4"
// fixed weights and optimizer state (a checkpoint after 2 steps, so the biases are not
// zero), then one dumped step, at any layout
#define DUMP MODEL " --train-iters 3 --dump-tensors 3 --load " DIR "/checkpoint"

static tb_output sh;

static int dumped_run(const char *name, const char *layout) {
    return tb_run(&sh, NULL, "rm -rf " DIR "/%s && '%s'" DUMP " %s --run-dir " DIR "/%s > /dev/null", name, PRETRAIN,
                  layout, name);
}

static int bisect(const char *a, const char *b) {
    int rc = tb_run(&sh, NULL, "'%s' bisect " DIR "/%s " DIR "/%s", TRACEBOOK, a, b);
    printf("    %s vs %s: exit %d: %s", a, b, rc, strstr(sh.out, "\n") ? strstr(sh.out, "\n") + 1 : sh.out);
    return rc;
}

TB_TEST(layouts_without_a_fault_do_not_diverge) {
    TB_REQUIRE(tb_run(&sh, NULL, "rm -rf " DIR " && mkdir -p " DIR " && '%s'" MODEL
                      " --train-iters 3 --exit-interval 2 --save " DIR "/checkpoint --run-dir " DIR "/w > /dev/null",
                      PRETRAIN) == 0,
               "%s", sh.err);
    TB_REQUIRE(dumped_run("tp1", "") == 0, "%s", sh.err);
    static const struct {
        const char *name, *layout;
    } layouts[] = {{"tp2sp", "--world-size 2 --tensor-model-parallel-size 2 --sequence-parallel"},
                   {"tp4", "--world-size 4 --tensor-model-parallel-size 4"},
                   {"pp2", "--world-size 2 --pipeline-model-parallel-size 2"}};
    for (size_t i = 0; i < sizeof layouts / sizeof *layouts; i++) {
        TB_REQUIRE(dumped_run(layouts[i].name, layouts[i].layout) == 0, "%s: %s", layouts[i].name, sh.err);
        int rc = bisect("tp1", layouts[i].name);
        TB_CHECK(rc == 0 && strstr(sh.out, "no divergence beyond the bound") && strstr(sh.out, "64 tensors compared"),
                 "%s: exit %d\n%s", layouts[i].name, rc, sh.out);
    }
    // context parallelism (the flash core, which cp needs, on both sides): each cp rank's
    // zig-zag rows gathered back into the global sequence order
    TB_REQUIRE(dumped_run("flash", "--attention-backend flash") == 0, "%s", sh.err);
    static const struct {
        const char *name, *layout;
    } cp_layouts[] = {{"cp2", "--world-size 2 --context-parallel-size 2 --attention-backend flash"},
                      {"cp2tp2sp", "--world-size 4 --context-parallel-size 2 --tensor-model-parallel-size 2 "
                                   "--sequence-parallel --use-distributed-optimizer --attention-backend flash"}};
    for (size_t i = 0; i < sizeof cp_layouts / sizeof *cp_layouts; i++) {
        TB_REQUIRE(dumped_run(cp_layouts[i].name, cp_layouts[i].layout) == 0, "%s: %s", cp_layouts[i].name, sh.err);
        int rc = bisect("flash", cp_layouts[i].name);
        TB_CHECK(rc == 0 && strstr(sh.out, "no divergence beyond the bound") && strstr(sh.out, "64 tensors compared"),
                 "%s: exit %d\n%s", cp_layouts[i].name, rc, sh.out);
    }
}

TB_TEST(each_injected_fault_is_found_at_the_tensor_it_breaks) {
    static const struct {
        const char *fault, *layout, *first;
    } faults[] = {
        {"row_parallel_bias_per_rank", "", "first divergence: fwd/layer.0.attention (forward)"},
        {"skip_sp_grad_all_reduce", "--sequence-parallel", "first divergence: grad/ln_f.bias (backward)"},
        {"vocab_ce_local_sum", "", "first divergence: fwd/loss (forward)"},
    };
    for (size_t i = 0; i < sizeof faults / sizeof *faults; i++) {
        char layout[256];
        snprintf(layout, sizeof layout, "--world-size 2 --tensor-model-parallel-size 2 %s --debug-inject-fault %s",
                 faults[i].layout, faults[i].fault);
        TB_REQUIRE(dumped_run(faults[i].fault, layout) == 0, "%s: %s", faults[i].fault, sh.err);
        int rc = bisect("tp1", faults[i].fault);
        TB_CHECK(rc == 1 && strstr(sh.out, faults[i].first), "%s: want '%s', exit %d\n%s", faults[i].fault,
                 faults[i].first, rc, sh.out);
    }
    int rc = tb_run(&sh, NULL, "'%s' bisect " DIR "/tp1 " DIR "/w", TRACEBOOK);
    TB_CHECK(rc == 2 && strstr(sh.err, "no tensors (run it with --dump-tensors STEPS)"),
             "a run without dumped tensors is named: exit %d\n%s", rc, sh.err);
}

int main(void) {
    TB_RUN(layouts_without_a_fault_do_not_diverge);
    TB_RUN(each_injected_fault_is_found_at_the_tensor_it_breaks);
    return tb_test_summary();
}
