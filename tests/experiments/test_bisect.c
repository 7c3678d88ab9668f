// test_bisect.c — `tracebook bisect` on runs that dumped their tensors (--dump-tensors,
// engine/reports/tensor_dump.h): from the same checkpoint, inputs and seeds, tp 2 + sp, tp 4 and
// pp 2 (two stages' files merged) against the single rank show no divergence beyond the
// bound, and so do cp 2 and cp 2 x tp 2 + sp (the cp ranks' rows put back in sequence order)
// against the single rank with the same attention core, and tp 2 from a fresh init at steps 1
// to 3; each injected tensor-parallel bug is found at the tensor it breaks first, and an
// optimizer that differs at its step.
#include <string.h>

#include "tb_shell.h"
#include "tb_test.h"

#define PRETRAIN TB_BIN_DIR "/pretrain_gpt"
#define TRACEBOOK TB_BIN_DIR "/tracebook"
#define DIR TB_TEST_TMPDIR "/bisect"
#define MODEL                                                                                          \
    " --num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 32 --vocab-size 200"       \
    " --micro-batch-size 2 --global-batch-size 4 --lr-decay-iters 10"
// (the cosine schedule decays to 0 at lr_decay_iters, train_iters by default: at 10 the dumped
// step 3 still moves the parameters, so the optimizer's phase is compared at work)
// fixed weights and optimizer state (a checkpoint after 2 steps, so the biases are not
// zero), then one dumped step, at any layout
#define DUMP MODEL " --train-iters 3 --dump-tensors 3 --load " DIR "/checkpoint"

// every module output, gradient and parameter after the step (64), and AdamW's moments of
// the 28 parameters and its 3 scalars
#define COMPARED "123 tensors compared"

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
                   {"pp2", "--world-size 2 --pipeline-model-parallel-size 2"},
                   // Megatron-FSDP: the dumps gather the shard's gradients and every unit's parameters
                   {"fsdp", "--world-size 2 --use-distributed-optimizer --use-megatron-fsdp "
                            "--data-parallel-sharding-strategy optim_grads_params"}};
    for (size_t i = 0; i < sizeof layouts / sizeof *layouts; i++) {
        TB_REQUIRE(dumped_run(layouts[i].name, layouts[i].layout) == 0, "%s: %s", layouts[i].name, sh.err);
        int rc = bisect("tp1", layouts[i].name);
        TB_CHECK(rc == 0 && strstr(sh.out, "no divergence beyond the bound") && strstr(sh.out, COMPARED),
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
        TB_CHECK(rc == 0 && strstr(sh.out, "no divergence beyond the bound") && strstr(sh.out, COMPARED),
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

// From a fresh init (the biases start at 0) the optimizer's first steps move an element whose
// gradient is float noise by an lr-sized amount either way: the parameters' bound follows
// AdamW's arithmetic from the dumped moments and the difference each step started from, so tp 2
// is a correct layout at steps 1, 2 and 3 (bisect used to call step 1's c_attn.bias divergent:
// 1.9e-05 of its scale against a bound of 1e-05).
TB_TEST(a_correct_layout_from_a_fresh_init_never_diverges_at_steps_1_to_3) {
    static const char *const fresh = MODEL " --train-iters 3 --dump-tensors 1,2,3 --seed 7";
    TB_REQUIRE(tb_run(&sh, NULL, "rm -rf " DIR "/fresh1 " DIR "/fresh2 && '%s' %s --run-dir " DIR "/fresh1 > /dev/null && "
                      "'%s' %s --world-size 2 --tensor-model-parallel-size 2 --run-dir " DIR "/fresh2 > /dev/null",
                      PRETRAIN, fresh, PRETRAIN, fresh) == 0,
               "%s", sh.err);
    for (int step = 1; step <= 3; step++) {
        int rc = tb_run(&sh, NULL, "'%s' bisect " DIR "/fresh1 " DIR "/fresh2 --step %d", TRACEBOOK, step);
        TB_CHECK(rc == 0 && strstr(sh.out, "no divergence beyond the bound") && strstr(sh.out, COMPARED),
                 "step %d: exit %d\n%s", step, rc, sh.out);
        // step 1 starts from the same weights; steps 2 and 3 from what step 1's AdamW noise
        // left apart, which the bound of their forward and backward carries (9e-06 of
        // c_proj's gradient at step 2 on OpenBLAS's Haswell kernel, 1.04e-05 in a Debug build)
        TB_CHECK(step == 1 ? strstr(sh.out, "<= (1e-05) x max |b|") != NULL
                           : strstr(sh.out, "of their scale apart, at ") != NULL,
                 "step %d: the bound carries the difference the step started from, none at step 1:\n%s", step,
                 sh.out);
    }
}

// The optimizer's own faults are found where they enter: another learning rate at the step's
// scalars, another weight decay (not in the update from the moments) at the first decayed
// parameter (the position embedding: wpe and wte share the model's first place, by name), with the bound's parts in the verdict.
static int fresh_run(const char *name, const char *flags) {
    return tb_run(&sh, NULL, "rm -rf " DIR "/%s && '%s'" MODEL " --train-iters 3 --dump-tensors 1 --seed 7 %s --run-dir "
                  DIR "/%s > /dev/null", name, PRETRAIN, flags, name);
}

TB_TEST(an_optimizer_that_differs_is_found_at_the_step) {
    TB_REQUIRE(fresh_run("fresh1", "") == 0 && fresh_run("lr", "--lr 6e-4") == 0, "%s", sh.err);
    int rc = bisect("fresh1", "lr");
    TB_CHECK(rc == 1 && strstr(sh.out, "first divergence: adam.hyper/step_size (optimizer)"), "lr: exit %d\n%s", rc,
             sh.out);
    TB_REQUIRE(fresh_run("wd", "--weight-decay 0.5") == 0, "%s", sh.err);
    rc = tb_run(&sh, NULL, "'%s' bisect " DIR "/fresh1 " DIR "/wd --json", TRACEBOOK);
    TB_CHECK(rc == 1 && strstr(sh.out, "\"tensor\": \"param/wpe.weight\"") &&
                 strstr(sh.out, "\"bound_kind\": \"adamw: ") && strstr(sh.out, "\"ratio_to_bound\""),
             "weight decay: exit %d\n%s", rc, sh.out);
}

int main(void) {
    TB_RUN(layouts_without_a_fault_do_not_diverge);
    TB_RUN(a_correct_layout_from_a_fresh_init_never_diverges_at_steps_1_to_3);
    TB_RUN(an_optimizer_that_differs_is_found_at_the_step);
    TB_RUN(each_injected_fault_is_found_at_the_tensor_it_breaks);
    return tb_test_summary();
}
