// test_cuda_training.c — training on --device cuda against the CPU backend, through
// pretrain_gpt (the whole path: the rank's GPU, its allocator on the device, the CUDA table,
// NCCL for several ranks). Exit 77 (ctest: skipped) without the CUDA build or without a GPU,
// saying which; the parts that need two GPUs say so and skip themselves on one.
//
// What is compared: the metrics of steps 1 and 2 (same seed, same data, same layout) of
// `--device cpu` and `--device cuda`. Step 1's loss is a forward of the initial weights;
// its gradient norm the whole backward; step 2's loss the forward after one AdamW update.
// Tolerances, |cuda − cpu| ≤ rtol·|cpu|:
//   fp32 (CUBLAS_COMPUTE_32F, no TF32; the kernels' sums in another order, atomics):
//     loss 1e-4, gradient norm 1e-3, step 2's loss 1e-3;
//   --bf16 on the GPU (bf16 GEMM operands, fp32 accumulation) against the fp32 CPU:
//     loss 2e-2, gradient norm 5e-2, step 2's loss 3e-2 (the bf16 roundings of every GEMM
//     operand, 2^-8 relative each, over 2 layers);
//   --fp16: step 1's loss 1e-2 (fp16 operands, 2^-11 each); its first steps overflow at
//     Megatron's initial scale 2^32 and are skipped while the scale backs off.
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "backend/cuda/cuda_device.h"
#include "tb_mpirun.h"
#include "tb_run_dir.h"
#include "tb_shell.h"
#include "tb_test.h"

#define PRETRAIN TB_BIN_DIR "/pretrain_gpt"
#define SMALL                                                                                                   \
    "--num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 32 --vocab-size 256 --micro-batch-size 2 " \
    "--train-iters 2 --attention-backend flash --lr 1e-3 --seed 7"

static tb_output sh;

typedef struct step_metrics {
    double loss[2], grad_norm[2];
} step_metrics;

// Steps 1 and 2 of rank 0's metrics; 0, or -1 having printed why.
static int read_metrics(const char *run_dir, step_metrics *m) {
    char path[1024], line[8192];
    tb_rank_path(path, sizeof path, run_dir, TB_RANK_METRICS, 0);
    FILE *f = fopen(path, "r");
    if (!f) {
        printf("    no metrics at %s\n", path);
        return -1;
    }
    int seen = 0;
    while (fgets(line, sizeof line, f)) {
        json_t *o = json_loads(line, 0, NULL);
        json_int_t step = json_integer_value(json_object_get(o, "step"));
        if (step == 1 || step == 2) {
            m->loss[step - 1] = json_number_value(json_object_get(o, "loss"));
            m->grad_norm[step - 1] = json_number_value(json_object_get(o, "grad_norm"));
            seen |= 1 << (step - 1);
        }
        json_decref(o);
    }
    fclose(f);
    if (seen != 3) printf("    %s lacks step 1 or 2\n", path);
    return seen == 3 ? 0 : -1;
}

// Trains SMALL with `flags` on `device`, started by `launcher` ("" or mpirun's command line);
// 0 with its metrics, or -1.
static int train_launched(const char *name, const char *launcher, const char *device, const char *flags,
                          step_metrics *m) {
    char run_dir[512];
    tb_tmp_path(run_dir, sizeof run_dir, name);
    tb_run(&sh, NULL, "rm -rf '%s'", run_dir);
    int rc = tb_run(&sh, TB_SOURCE_DIR, "%s '%s' " SMALL " %s --device %s --run-dir '%s'", launcher, PRETRAIN, flags,
                    device, run_dir);
    if (rc != 0) {
        printf("    %s (%s --device %s %s): exit %d\n%s\n", name, launcher, device, flags, rc, sh.err);
        return -1;
    }
    return read_metrics(run_dir, m);
}

static int train(const char *name, const char *device, const char *flags, step_metrics *m) {
    return train_launched(name, "", device, flags, m);
}

static int close_to(double got, double want, double rtol) { return isfinite(got) && fabs(got - want) <= rtol * fabs(want); }

// The CUDA run of `flags` (started by `launcher`) against the CPU's (rank threads).
static void compare_launched(const char *name, const char *launcher, const char *flags, const char *cuda_flags,
                             double rtol_loss, double rtol_norm, double rtol_step2) {
    step_metrics cpu, gpu;
    char cpu_name[128], gpu_name[128], both[512];
    snprintf(cpu_name, sizeof cpu_name, "%s-cpu", name);
    snprintf(gpu_name, sizeof gpu_name, "%s-cuda", name);
    snprintf(both, sizeof both, "%s %s", flags, cuda_flags);
    TB_REQUIRE(train(cpu_name, "cpu", flags, &cpu) == 0, "%s: the CPU run", name);
    TB_REQUIRE(train_launched(gpu_name, launcher, "cuda", both, &gpu) == 0, "%s: the CUDA run", name);
    printf("    %s: loss %.7f / %.7f, grad norm %.6f / %.6f, step 2 loss %.7f / %.7f (cpu / cuda)\n", name, cpu.loss[0],
           gpu.loss[0], cpu.grad_norm[0], gpu.grad_norm[0], cpu.loss[1], gpu.loss[1]);
    TB_CHECK(close_to(gpu.loss[0], cpu.loss[0], rtol_loss), "%s: step 1 loss %.7f vs CPU %.7f (rtol %g)", name,
             gpu.loss[0], cpu.loss[0], rtol_loss);
    TB_CHECK(close_to(gpu.grad_norm[0], cpu.grad_norm[0], rtol_norm), "%s: grad norm %.6f vs CPU %.6f (rtol %g)", name,
             gpu.grad_norm[0], cpu.grad_norm[0], rtol_norm);
    TB_CHECK(close_to(gpu.loss[1], cpu.loss[1], rtol_step2), "%s: step 2 loss %.7f vs CPU %.7f (rtol %g)", name,
             gpu.loss[1], cpu.loss[1], rtol_step2);
}

static void compare(const char *name, const char *flags, const char *cuda_flags, double rtol_loss, double rtol_norm,
                    double rtol_step2) {
    compare_launched(name, "", flags, cuda_flags, rtol_loss, rtol_norm, rtol_step2);
}

TB_TEST(one_step_fp32_matches_the_cpu) {
    compare("gpt2-fp32", "", "", 1e-4, 1e-3, 1e-3);
    // the other kernels: RMSNorm, SwiGLU, RoPE, grouped-query attention, untied output layer
    compare("llama-fp32",
            "--normalization RMSNorm --swiglu --position-embedding-type rope --num-query-groups 2 "
            "--untie-embeddings-and-output-weights",
            "", 1e-4, 1e-3, 1e-3);
}

TB_TEST(one_step_bf16_matches_the_cpu) { compare("gpt2-bf16", "", "--bf16", 2e-2, 5e-2, 3e-2); }

// One number of step `step` of rank 0's metrics (NAN when absent; booleans as 0 / 1).
static double metric(const char *run_dir, int step, const char *key) {
    char path[1024], line[8192];
    tb_rank_path(path, sizeof path, run_dir, TB_RANK_METRICS, 0);
    FILE *f = fopen(path, "r");
    double v = NAN;
    while (f && fgets(line, sizeof line, f)) {
        json_t *o = json_loads(line, 0, NULL);
        json_t *x = json_object_get(o, key);
        if (json_integer_value(json_object_get(o, "step")) == step && x)
            v = json_is_boolean(x) ? (double)json_is_true(x) : json_number_value(x);
        json_decref(o);
    }
    if (f) fclose(f);
    return v;
}

// --fp16 at Megatron's initial loss scale 2^32: the scaled gradients overflow fp16, so the
// first steps are skipped (hysteresis 2, then halving); the forward is fp16's.
TB_TEST(fp16_skips_overflowing_steps_while_the_scale_backs_off) {
    step_metrics cpu;
    TB_REQUIRE(train("fp16-cpu", "cpu", "", &cpu) == 0, "the CPU run");
    char run_dir[512];
    tb_tmp_path(run_dir, sizeof run_dir, "fp16-cuda");
    tb_run(&sh, NULL, "rm -rf '%s'", run_dir);
    int rc = tb_run(&sh, TB_SOURCE_DIR, "'%s' " SMALL " --train-iters 3 --device cuda --fp16 --run-dir '%s'", PRETRAIN,
                    run_dir);
    TB_REQUIRE(rc == 0, "--fp16: exit %d\n%s", rc, sh.err);
    const double loss = metric(run_dir, 1, "loss");
    printf("    fp16: step 1 loss %.7f (cpu %.7f); loss scale %g, %g, %g; skipped %g %g %g\n", loss, cpu.loss[0],
           metric(run_dir, 1, "loss_scale"), metric(run_dir, 2, "loss_scale"), metric(run_dir, 3, "loss_scale"),
           metric(run_dir, 1, "skipped"), metric(run_dir, 2, "skipped"), metric(run_dir, 3, "skipped"));
    TB_CHECK(close_to(loss, cpu.loss[0], 1e-2), "step 1 loss %.7f vs CPU %.7f (rtol 1e-2)", loss, cpu.loss[0]);
    TB_CHECK(metric(run_dir, 1, "loss_scale") == 4294967296.0 && metric(run_dir, 1, "skipped") == 1 &&
                 metric(run_dir, 2, "loss_scale") == 4294967296.0 && metric(run_dir, 2, "skipped") == 1 &&
                 metric(run_dir, 3, "loss_scale") == 2147483648.0,
             "steps 1, 2 skipped at 2^32 (the hysteresis), step 3 at 2^31");
}

static int two_gpus(const char *what) {
    char why[256] = "";
    int n = tb_cuda_device_count(why, sizeof why);
    if (n >= 2) return 1;
    printf("  SKIP %s: %d GPU(s) visible, needs 2\n", what, n);
    return 0;
}

// NCCL: tensor parallelism (with sequence parallelism) and data parallelism, against the same
// layout on the CPU's local backend (itself checked against one rank by test_parallel).
TB_TEST(tp2_and_dp2_over_nccl_match_the_cpu) {
    if (!two_gpus("tp2_and_dp2_over_nccl_match_the_cpu")) return;
    compare("tp2", "--world-size 2 --tensor-model-parallel-size 2", "", 1e-4, 1e-3, 1e-3);
    compare("tp2-sp", "--world-size 2 --tensor-model-parallel-size 2 --sequence-parallel", "", 1e-4, 1e-3, 1e-3);
    compare("dp2", "--world-size 2", "", 1e-4, 1e-3, 1e-3);
    compare("dp2-distopt", "--world-size 2 --use-distributed-optimizer", "", 1e-4, 1e-3, 1e-3);
}

// Under mpirun: one process per GPU (its rank's device: its local rank on the host), the NCCL
// unique ids broadcast over MPI; the same figures as the CPU's rank threads.
TB_TEST(tp2_and_dp2_under_mpirun_over_nccl_match_the_cpu) {
#ifdef TB_MPIEXEC
    if (!two_gpus("tp2_and_dp2_under_mpirun_over_nccl_match_the_cpu")) return;
    compare_launched("mpi-tp2", MPIRUN " -np 2", "--world-size 2 --tensor-model-parallel-size 2", "", 1e-4, 1e-3, 1e-3);
    compare_launched("mpi-dp2", MPIRUN " -np 2", "--world-size 2", "", 1e-4, 1e-3, 1e-3);
#else
    printf("  SKIP tp2_and_dp2_under_mpirun_over_nccl_match_the_cpu: built without MPI (no mpiexec at configure time)\n");
#endif
}

// MoE (transformer/moe/): the router, the permutations and the aux loss's statistics on the
// device, the routing's host decisions (capacity, the all-to-all's split sizes) on copies, the
// experts' GEMMs on cuBLASLt; over NCCL the ep all-to-all (and under etp the all-gather and
// reduce-scatter), or the all-gather dispatcher's gathers and reduce-scatters. The fp32 tolerances: a routing choice differs only where two of a token's
// logits (or, over capacity, two probs) are within the GEMMs' rounding of each other, which
// these random initial weights make improbable (a differing choice shows as a loss difference
// far beyond them).
#define MOE                                                                                                  \
    "--num-experts 4 --moe-router-topk 2 --moe-ffn-hidden-size 64 --moe-token-dispatcher-type alltoall " \
    "--moe-aux-loss-coeff 0.01"
TB_TEST(moe_matches_the_cpu) {
    compare("moe", MOE, "", 1e-4, 1e-3, 1e-3);
    compare("moe-sigmoid-capacity",
            MOE " --moe-router-score-function sigmoid --moe-router-load-balancing-type seq_aux_loss "
                "--moe-expert-capacity-factor 1.0 --moe-pad-expert-input-to-capacity "
                "--moe-shared-expert-intermediate-size 32 --moe-grouped-gemm",
            "", 1e-4, 1e-3, 1e-3);
    if (!two_gpus("moe_matches_the_cpu (ep 2, tp 2 with etp 2)")) return;
    compare("moe-ep2", "--world-size 2 --expert-model-parallel-size 2 " MOE, "", 1e-4, 1e-3, 1e-3);
    compare("moe-tp2-etp2", "--world-size 2 --tensor-model-parallel-size 2 --sequence-parallel " MOE, "", 1e-4, 1e-3,
            1e-3);
    compare("moe-ep2-allgather", "--world-size 2 --expert-model-parallel-size 2 " MOE
            " --moe-token-dispatcher-type allgather", "", 1e-4, 1e-3, 1e-3);
}

// Under --memory-cap the rank's device allocations stop at the cap with the OOM report, exit 3.
// The cap leaves room for the cuBLASLt workspace (a block of the rank's allocator, category
// workspace) and 200000 bytes more, which the model's tensors exceed.
TB_TEST(oom_under_a_cap_on_the_device) {
    char run_dir[512], path[1024], cap[64];
    tb_tmp_path(run_dir, sizeof run_dir, "cuda-oom");
    tb_run(&sh, NULL, "rm -rf '%s'", run_dir);
    snprintf(cap, sizeof cap, "%zu", TB_CUDA_WORKSPACE_BYTES + 200000);
    int rc = tb_run(&sh, TB_SOURCE_DIR, "'%s' " SMALL " --device cuda --memory-cap %s --run-dir '%s'", PRETRAIN, cap,
                    run_dir);
    TB_CHECK(rc == TB_EXIT_OUT_OF_MEMORY, "exit %d (expected %d)\n%s", rc, TB_EXIT_OUT_OF_MEMORY, sh.err);
    char capped[96];
    snprintf(capped, sizeof capped, "cap %s bytes", cap);
    TB_CHECK(strstr(sh.err, "OUT OF MEMORY") && strstr(sh.err, capped), "the report:\n%s", sh.err);
    snprintf(path, sizeof path, "%s/%s", run_dir, TB_RUN_OOM_REPORT);
    char *oom = tb_slurp(path);
    TB_CHECK(oom && strstr(oom, "\"cudaMalloc\""), "oom.json names the device memory: %s", oom ? oom : "(missing)");
    TB_CHECK(oom && strstr(oom, "cuBLASLt workspace"), "oom.json lists the workspace among the live blocks: %s",
             oom ? oom : "(missing)");
    free(oom);
}

int main(void) {
    if (!tb_cuda_built()) {
        printf("SKIP test_cuda_training: the CUDA backend is not built (no nvcc / cuBLASLt at configure time)\n");
        return 77;
    }
    char why[256] = "";
    if (tb_cuda_device_count(why, sizeof why) <= 0) {
        printf("SKIP test_cuda_training: no GPU is visible (%s)\n", why);
        return 77;
    }
    TB_RUN(one_step_fp32_matches_the_cpu);
    TB_RUN(one_step_bf16_matches_the_cpu);
    TB_RUN(fp16_skips_overflowing_steps_while_the_scale_backs_off);
    TB_RUN(tp2_and_dp2_over_nccl_match_the_cpu);
    TB_RUN(tp2_and_dp2_under_mpirun_over_nccl_match_the_cpu);
    TB_RUN(moe_matches_the_cpu);
    TB_RUN(oom_under_a_cap_on_the_device);
    tb_output_free(&sh);
    return tb_test_summary();
}
