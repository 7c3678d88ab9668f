// test_cuda_training.c — training on --device cuda against the CPU backend, through
// pretrain_gpt (the whole path: the rank's GPU, its allocator on the device, the CUDA table,
// NCCL for several ranks). Exit 77 (ctest: skipped) without the CUDA build or without a GPU,
// saying which; the parts that need two GPUs say so and skip themselves on one.
//
// What is compared: the metrics of steps 1 and 2 (same seed, same data, same layout) of
// `--device cpu` and `--device cuda`. Step 1's loss is a forward of the initial weights;
// its gradient norm the whole backward; step 2's loss the forward after one AdamW update.
// Layouts: one GPU; with two GPUs tp 2 (and sp), dp 2 (and the distributed optimizer), pp 2
// and pp 2 interleaved, each against the same layout on the CPU.
// Tolerances, |cuda − cpu| ≤ rtol·|cpu|:
//   fp32 (CUBLAS_COMPUTE_32F, no TF32; the kernels' sums in another order, atomics):
//     loss 1e-4, gradient norm 1e-3, step 2's loss 1e-3;
//   --bf16 on the GPU (bf16 GEMM operands, fp32 accumulation) against the fp32 CPU:
//     loss 2e-2, gradient norm 5e-2, step 2's loss 3e-2 (the bf16 roundings of every GEMM
//     operand, 2^-8 relative each, over 2 layers);
//   --fp16: step 1's loss 1e-2 (fp16 operands, 2^-11 each); its first steps overflow at
//     Megatron's initial scale 2^32 and are skipped while the scale backs off.
// Checkpoints across the backends (fp32): saved after step 2 on one (--save, --async-save),
// resumed on the other for step 3: its loss within 1e-3 (step 2's tolerance: the state saved
// is two steps old) of the uninterrupted CPU run's step 3; on two GPUs the same for tp 2 and
// for dp 2 with the distributed optimizer. --save-hf and --dump-tensors at --lr 0 (one step
// that leaves the weights as drawn on the host): the export's tensors and the dump's param/
// tensors bit for bit the CPU's; the dump's fwd/ tensors within 1e-3 and grad/ within 1e-2 of
// the CPU's, each ‖cuda − cpu‖ ≤ rtol·‖cpu‖ over the tensor.
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "backend/cuda/cuda_device.h"
#include "core/safetensors.h"
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
    tb_tmp_path(run_dir, sizeof run_dir, "%s", name);
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

// The CUDA run of `flags` and `cuda_flags`, started by `launcher` ("" or mpirun's command
// line), against the reference run of `flags` on `ref_device` (cpu, or cuda: then the
// reference run lacks cuda_flags) in rank threads.
static void compare_to_launched(const char *name, const char *ref_device, const char *launcher, const char *flags,
                                const char *cuda_flags, double rtol_loss, double rtol_norm, double rtol_step2) {
    step_metrics ref, gpu;
    char ref_name[128], gpu_name[128], both[512];
    snprintf(ref_name, sizeof ref_name, "%s-%s", name, ref_device);
    const int on_cuda = !strcmp(ref_device, "cuda");
    snprintf(gpu_name, sizeof gpu_name, "%s-cuda%s", name, on_cuda ? "-with" : "");
    snprintf(both, sizeof both, "%s %s", flags, cuda_flags);
    TB_REQUIRE(train(ref_name, ref_device, flags, &ref) == 0, "%s: the %s run", name, ref_device);
    TB_REQUIRE(train_launched(gpu_name, launcher, "cuda", both, &gpu) == 0, "%s: the CUDA run", name);
    printf("    %s: loss %.7f / %.7f, grad norm %.6f / %.6f, step 2 loss %.7f / %.7f (%s / cuda%s%s)\n", name,
           ref.loss[0], gpu.loss[0], ref.grad_norm[0], gpu.grad_norm[0], ref.loss[1], gpu.loss[1], ref_device,
           on_cuda ? " " : "", on_cuda ? cuda_flags : "");
    TB_CHECK(close_to(gpu.loss[0], ref.loss[0], rtol_loss), "%s: step 1 loss %.7f vs %s %.7f (rtol %g)", name,
             gpu.loss[0], ref_device, ref.loss[0], rtol_loss);
    TB_CHECK(close_to(gpu.grad_norm[0], ref.grad_norm[0], rtol_norm), "%s: grad norm %.6f vs %s %.6f (rtol %g)", name,
             gpu.grad_norm[0], ref_device, ref.grad_norm[0], rtol_norm);
    TB_CHECK(close_to(gpu.loss[1], ref.loss[1], rtol_step2), "%s: step 2 loss %.7f vs %s %.7f (rtol %g)", name,
             gpu.loss[1], ref_device, ref.loss[1], rtol_step2);
}

static void compare_to(const char *name, const char *ref_device, const char *flags, const char *cuda_flags,
                       double rtol_loss, double rtol_norm, double rtol_step2) {
    compare_to_launched(name, ref_device, "", flags, cuda_flags, rtol_loss, rtol_norm, rtol_step2);
}

// The CUDA run of `flags` (started by `launcher`) against the CPU's.
static void compare_launched(const char *name, const char *launcher, const char *flags, const char *cuda_flags,
                             double rtol_loss, double rtol_norm, double rtol_step2) {
    compare_to_launched(name, "cpu", launcher, flags, cuda_flags, rtol_loss, rtol_norm, rtol_step2);
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

// The unfused core (--attention-backend local, the default): its probabilities kept, and
// recomputed under selective recompute.
TB_TEST(local_attention_matches_the_cpu) {
    compare("local-fp32", "--attention-backend local", "", 1e-4, 1e-3, 1e-3);
    compare("local-selective", "--attention-backend local --recompute-granularity selective", "", 1e-4, 1e-3, 1e-3);
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

// Pipeline parallelism over NCCL: each stage on its own GPU, activations and gradients sent
// from device buffers in batched sends and recvs (p2p_communicate), the tied embedding's
// gradient all-reduced between the first and last stage; then interleaved (two chunks per
// rank, 4 microbatches: a steady state whose calls send and receive both ways). Against the
// same layouts on the CPU (themselves checked against one rank by test_parallel and
// test_schedules); each stage's kernels are the single GPU's, so the fp32 tolerances hold.
TB_TEST(pp2_and_interleaved_pp2_over_nccl_match_the_cpu) {
    if (!two_gpus("pp2_and_interleaved_pp2_over_nccl_match_the_cpu")) return;
    compare("pp2", "--world-size 2 --pipeline-model-parallel-size 2 --global-batch-size 4", "", 1e-4, 1e-3, 1e-3);
    compare("pp2-vpp2",
            "--world-size 2 --pipeline-model-parallel-size 2 --virtual-pipeline-model-parallel-size 2 --num-layers 4 "
            "--global-batch-size 8",
            "", 1e-4, 1e-3, 1e-3);
}

// Context parallelism (--cp-comm-type all_gather, the default) over NCCL: the K/V all-gather,
// the attention with the zig-zag positions (the embedding's and RoPE's too) and the K/V
// gradients' reduce-scatter on the GPUs, against the same layout on the CPU.
TB_TEST(cp2_all_gather_over_nccl_matches_the_cpu) {
    if (!two_gpus("cp2_all_gather_over_nccl_matches_the_cpu")) return;
    compare("cp2", "--world-size 2 --context-parallel-size 2", "", 1e-4, 1e-3, 1e-3);
    compare("cp2-llama",
            "--world-size 2 --context-parallel-size 2 --normalization RMSNorm --swiglu --position-embedding-type rope "
            "--num-query-groups 2",
            "", 1e-4, 1e-3, 1e-3);
    // the ring: each step's K/V (and, backward, dK/dV) exchange one batch on NCCL
    compare("cp2-ring", "--world-size 2 --context-parallel-size 2 --cp-comm-type p2p", "", 1e-4, 1e-3, 1e-3);
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

// --- checkpoints, the export and the dump across the backends ---------------------------

// Runs SMALL with `flags` on `device` into run dir `name` (its path in run_dir); the exit status.
static int run_in(const char *name, const char *device, const char *flags, char run_dir[512]) {
    tb_tmp_path(run_dir, 512, "%s", name);
    tb_run(&sh, NULL, "rm -rf '%s'", run_dir);
    int rc = tb_run(&sh, TB_SOURCE_DIR, "'%s' " SMALL " %s --device %s --run-dir '%s'", PRETRAIN, flags, device, run_dir);
    if (rc != 0) printf("    %s (--device %s %s): exit %d\n%s\n", name, device, flags, rc, sh.err);
    return rc;
}

// Saved after step 2 on `saver` (with saver_flags), resumed for step 3 on `loader`: step 3's
// loss against the uninterrupted CPU run's (ref_loss).
static void resume_across(const char *name, const char *layout, const char *saver, const char *saver_flags,
                          const char *loader, double ref_loss) {
    char dir[512], ck[512], flags[2048];
    tb_tmp_path(ck, sizeof ck, "%s-ckpt", name);
    tb_run(&sh, NULL, "rm -rf '%s'", ck);
    snprintf(flags, sizeof flags, "%s --train-iters 3 --exit-interval 2 --save '%s' %s", layout, ck, saver_flags);
    TB_REQUIRE(run_in(name, saver, flags, dir) == 0, "%s: the save on --device %s", name, saver);
    snprintf(flags, sizeof flags, "%s --train-iters 3 --load '%s'", layout, ck);
    char loaded[512];
    TB_REQUIRE(run_in(name, loader, flags, loaded) == 0, "%s: the load on --device %s", name, loader);
    const double loss = metric(loaded, 3, "loss");
    printf("    %s: step 3 loss %.7f resumed on %s, %.7f uninterrupted on the cpu\n", name, loss, loader, ref_loss);
    TB_CHECK(close_to(loss, ref_loss, 1e-3), "%s: step 3 loss %.7f vs the CPU's %.7f (rtol 1e-3)", name, loss,
             ref_loss);
    TB_CHECK(isnan(metric(loaded, 2, "loss")), "%s: the resumed run starts at step 3", name);
}

static double uninterrupted_step3(const char *name, const char *layout) {
    char dir[512], flags[512];
    snprintf(flags, sizeof flags, "%s --train-iters 3", layout);
    if (run_in(name, "cpu", flags, dir) != 0) return NAN;
    return metric(dir, 3, "loss");
}

TB_TEST(checkpoints_move_between_cuda_and_the_cpu) {
    const double ref = uninterrupted_step3("ckpt-ref", "");
    TB_REQUIRE(isfinite(ref), "the uninterrupted CPU run");
    resume_across("ckpt-cuda-to-cpu", "", "cuda", "", "cpu", ref);
    resume_across("ckpt-cpu-to-cuda", "", "cpu", "", "cuda", ref);
    resume_across("ckpt-cuda-async-to-cpu", "", "cuda", "--async-save", "cpu", ref);
    if (!two_gpus("checkpoints_move_between_cuda_and_the_cpu (tp 2, dp 2 dist-opt)")) return;
    static const char *const layouts[] = {"--world-size 2 --tensor-model-parallel-size 2 --sequence-parallel",
                                          "--world-size 2 --use-distributed-optimizer"};
    for (int l = 0; l < 2; l++) {
        char name[64];
        const double ref2 = uninterrupted_step3(l ? "ckpt-ref-dp2" : "ckpt-ref-tp2", layouts[l]);
        TB_REQUIRE(isfinite(ref2), "the uninterrupted CPU run at %s", layouts[l]);
        snprintf(name, sizeof name, "ckpt-%s-cuda-to-cpu", l ? "dp2" : "tp2");
        resume_across(name, layouts[l], "cuda", "", "cpu", ref2);
        snprintf(name, sizeof name, "ckpt-%s-cpu-to-cuda", l ? "dp2" : "tp2");
        resume_across(name, layouts[l], "cpu", "", "cuda", ref2);
    }
}

// ‖a − b‖ / ‖b‖ over n floats (0 when both are zero).
static double rel_norm(const float *a, const float *b, size_t n) {
    double d = 0, r = 0;
    for (size_t i = 0; i < n; i++) d += ((double)a[i] - b[i]) * ((double)a[i] - b[i]), r += (double)b[i] * b[i];
    return r > 0 ? sqrt(d / r) : sqrt(d);
}

// Every tensor of file `got` against the same tensor of `want`: bitwise where `prefix_bitwise`
// starts its name (NULL: every tensor), else within rtol (fwd/: rtol_fwd, others: rtol_other).
static void same_tensors(const char *what, const char *got, const char *want, const char *prefix_bitwise,
                         double rtol_fwd, double rtol_other) {
    tb_safetensors g, w;
    tb_error err;
    TB_REQUIRE(tb_safetensors_open(&w, want, &err) == 0, "%s: %s", what, err.msg);
    if (tb_safetensors_open(&g, got, &err) != 0) {
        tb_safetensors_close(&w);
        TB_REQUIRE(0, "%s: %s", what, err.msg);
    }
    TB_CHECK(g.ntensors == w.ntensors && w.ntensors > 0, "%s: %d tensors, the CPU's %d", what, g.ntensors, w.ntensors);
    int bitwise = 0, close = 0;
    double worst_fwd = 0, worst_other = 0;
    for (int i = 0; i < w.ntensors; i++) {
        const tb_st_tensor *tw = &w.tensors[i], *tg = tb_safetensors_find(&g, tw->name);
        const size_t n = (size_t)tb_st_tensor_numel(tw);
        if (!tg || (size_t)tb_st_tensor_numel(tg) != n) {
            TB_CHECK(0, "%s: tensor %s missing or of another size", what, tw->name);
            continue;
        }
        float *a = malloc(n * sizeof(float) + 4), *b = malloc(n * sizeof(float) + 4);
        if (tb_safetensors_read_f32(&g, tg, a, &err) == 0 && tb_safetensors_read_f32(&w, tw, b, &err) == 0) {
            if (!prefix_bitwise || !strncmp(tw->name, prefix_bitwise, strlen(prefix_bitwise))) {
                TB_CHECK(memcmp(a, b, n * sizeof(float)) == 0, "%s: tensor %s differs from the CPU's (want bitwise)",
                         what, tw->name);
                bitwise++;
            } else {
                const int fwd = !strncmp(tw->name, "fwd/", 4);
                const double e = rel_norm(a, b, n), tol = fwd ? rtol_fwd : rtol_other;
                if (fwd) worst_fwd = fmax(worst_fwd, e);
                else worst_other = fmax(worst_other, e);
                TB_CHECK(e <= tol, "%s: tensor %s rel err %.2e (rtol %g)", what, tw->name, e, tol);
                close++;
            }
        } else {
            TB_CHECK(0, "%s: %s", what, err.msg);
        }
        free(a), free(b);
    }
    printf("    %s: %d tensors bitwise, %d close (worst fwd %.1e, others %.1e)\n", what, bitwise, close, worst_fwd,
           worst_other);
    tb_safetensors_close(&g);
    tb_safetensors_close(&w);
}

TB_TEST(save_hf_and_dump_tensors_on_cuda_are_the_cpus) {
    char cpu_dir[512], gpu_dir[512], flags[1200], a[1100], b[1100];
    const char *base = "--train-iters 1 --lr 0 --min-lr 0 --dump-tensors 1";
    snprintf(flags, sizeof flags, "%s --save-hf '%s/hf-cpu.safetensors'", base, TB_TEST_TMPDIR);
    TB_REQUIRE(run_in("export-cpu", "cpu", flags, cpu_dir) == 0, "the CPU run");
    snprintf(flags, sizeof flags, "%s --save-hf '%s/hf-cuda.safetensors'", base, TB_TEST_TMPDIR);
    TB_REQUIRE(run_in("export-cuda", "cuda", flags, gpu_dir) == 0, "the CUDA run");
    snprintf(a, sizeof a, "%s/hf-cuda.safetensors", TB_TEST_TMPDIR);
    snprintf(b, sizeof b, "%s/hf-cpu.safetensors", TB_TEST_TMPDIR);
    same_tensors("--save-hf", a, b, NULL, 0, 0);
    snprintf(a, sizeof a, "%s/tensors/step-0000001.rank-00000.safetensors", gpu_dir);
    snprintf(b, sizeof b, "%s/tensors/step-0000001.rank-00000.safetensors", cpu_dir);
    same_tensors("--dump-tensors", a, b, "param/", 1e-3, 1e-2);
}

// --overlap-grad-reduce over NCCL: each bucket's reduction on the dp group's NCCL stream while
// the backward runs, ordered by the bucket's events (distributed/distributed_data_parallel.h),
// and with the distributed optimizer --overlap-param-gather's all-gathers under the next
// forward. Small buckets (SMALL's layer is ~50k elements) so that there are several; SMALL's
// two steps, so that step 2's forward waits for step 1's gathers. Against the same CUDA run
// without overlap (itself checked against the CPU above) at the fp32 tolerances: NCCL sums a
// bucket in its own ring order, not the whole buffer's. A missing wait (the optimizer before a
// bucket's reduction, the forward before a gather) would read stale or half-reduced gradients
// or parameters when it loses the race; the event order itself is checked without a GPU
// (test_backend's stand-in device).
TB_TEST(dp2_overlap_over_nccl_matches_without) {
    if (!two_gpus("dp2_overlap_over_nccl_matches_without")) return;
    const char *dp2 = "--world-size 2 --ddp-bucket-size 20000";
    const char *dp2_distopt = "--world-size 2 --ddp-bucket-size 20000 --use-distributed-optimizer";
    compare_to("dp2-overlap", "cuda", dp2, "--overlap-grad-reduce", 1e-4, 1e-3, 1e-3);
    compare_to("dp2-distopt-overlap", "cuda", dp2_distopt, "--overlap-grad-reduce --overlap-param-gather", 1e-4, 1e-3,
               1e-3);
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
    TB_RUN(local_attention_matches_the_cpu);
    TB_RUN(one_step_bf16_matches_the_cpu);
    TB_RUN(fp16_skips_overflowing_steps_while_the_scale_backs_off);
    TB_RUN(tp2_and_dp2_over_nccl_match_the_cpu);
    TB_RUN(cp2_all_gather_over_nccl_matches_the_cpu);
    TB_RUN(tp2_and_dp2_under_mpirun_over_nccl_match_the_cpu);
    TB_RUN(checkpoints_move_between_cuda_and_the_cpu);
    TB_RUN(save_hf_and_dump_tensors_on_cuda_are_the_cpus);
    TB_RUN(dp2_overlap_over_nccl_matches_without);
    TB_RUN(pp2_and_interleaved_pp2_over_nccl_match_the_cpu);
    TB_RUN(moe_matches_the_cpu);
    TB_RUN(oom_under_a_cap_on_the_device);
    tb_output_free(&sh);
    return tb_test_summary();
}
