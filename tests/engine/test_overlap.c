// --overlap-grad-reduce (distributed/distributed_data_parallel.h) against the reduction at
// the step's end: per-step losses, gradient norms and every rank's final parameters must be
// the same bits with and without overlap — the buckets are summed over dp in the same order
// per element as the whole buffer — for dp 2, dp 2 with the distributed optimizer, tp 2 x dp 2
// (with sequence parallelism: sp all-reduces in backward), pp 2 x dp 2 (the tied embedding's
// deferred bucket) and interleaved pp 2 x v 2 x dp 2, under gradient accumulation (the
// buckets may only go with the last microbatch) and with small buckets so that there are many.
#include <float.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <sys/wait.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/kernels.h"
#include "comm/local_backend.h"
#include "config/config.h"
#include "core/safetensors.h"
#include "comm/parallel_state.h"
#include "tb_shell.h"
#include "tb_test.h"
#include "training.h"

#define STEPS 3
#define MAX_RANKS 8

typedef struct result {
    double loss[STEPS], grad_norm[STEPS];
    float *params[MAX_RANKS];  // every chunk's parameter buffer of each rank, back to back
    size_t nparams[MAX_RANKS];
    int buckets[MAX_RANKS];    // each rank's buckets (0 without overlap)
    int shard_buckets[MAX_RANKS];  // the buckets its optimizer shard is sliced from (every chunk's)
    double exposed_ms;         // rank 0's exposed communication over the steps
} result;

typedef struct job {
    const tb_config *cfg;
    result *out;
    int failed;
} job;

static void rank_fn(tb_rank *rk, void *arg) {
    job *j = arg;
    tb_allocator_init(rk->mem, 0, NULL, NULL);
    cpu_set_num_threads(1);
    tb_trainer tr;
    tb_error err;
    if (trainer_init(&tr, j->cfg, rk, &err) != 0) {
        printf("    %s: %s\n", rk->label, err.msg);
        j->failed = 1;
        return;
    }
    for (int s = 1; s <= STEPS; s++) {
        tb_step_result r = train_step(&tr, s);
        if (rk->rank == 0) {
            j->out->loss[s - 1] = r.loss;
            j->out->grad_norm[s - 1] = r.grad_norm;
            j->out->exposed_ms += r.time.exposed_comm_ms;
        }
    }
    size_t n = 0;
    for (int c = 0; c < tr.nchunks; c++) n += tr.models[c].padded_parameters;
    float *all = malloc(n * sizeof *all);
    n = 0;
    for (int c = 0; c < tr.nchunks; c++) {
        memcpy(all + n, tr.models[c].param_memory, tr.models[c].padded_parameters * sizeof *all);
        n += tr.models[c].padded_parameters;
    }
    j->out->params[rk->rank] = all;
    j->out->nparams[rk->rank] = n;
    // (Megatron-FSDP's buckets are the optimizer's: the units)
    j->out->buckets[rk->rank] = !ddp_active(&tr.ddp) ? 0 : tr.ddp.fsdp.active ? tr.opts[0].nbuckets : tr.ddp.nbuckets;
    for (int c = 0; c < tr.nchunks; c++) {
        const tb_adamw *o = &tr.opts[c];
        j->out->shard_buckets[rk->rank] += o->nbuckets;
        for (int b = 0; b < o->nbuckets; b++) {  // each bucket splits into dp equal slices
            const tb_shard_bucket *k = &o->buckets[b];
            const size_t dp = o->sharded ? (size_t)rk->groups[TB_GROUP_DP_CP].size : 1;
            if ((k->hi - k->lo) % dp || (k->slice_hi - k->slice_lo) * dp != k->hi - k->lo) j->failed = 1;
        }
    }
    trainer_free(&tr);
}

static int train(tb_config *cfg, result *out) {
    memset(out, 0, sizeof *out);
    config_resolve(cfg);
    tb_error err;
    if (config_validate(cfg, &err) != 0) {
        printf("    invalid config: %s\n", err.msg);
        return -1;
    }
    tb_world w;
    if (parallel_state_world_init(&w, cfg, &tb_local_backend, &err) != 0) {
        printf("    %s\n", err.msg);
        return -1;
    }
    job j = {cfg, out, 0};
    parallel_state_run_ranks(&w, rank_fn, &j);
    parallel_state_world_free(&w);
    return j.failed ? -1 : 0;
}

static void result_free(result *r) {
    for (int i = 0; i < MAX_RANKS; i++) free(r->params[i]);
}

static void base_config(tb_config *c) {
    config_defaults(c);
    c->num_layers = 4, c->hidden_size = 32, c->num_attention_heads = 4, c->seq_length = 16;
    c->vocab_size = 100, c->micro_batch_size = 1, c->train_iters = STEPS;
    c->lr = 3e-3, c->lr_warmup_iters = 1, c->clip_grad = 1.0, c->weight_decay = 0.1;
    c->collective_timeout = 60;
    c->ddp_bucket_size = 3000;  // a layer is ~12.7k elements: a few buckets per layer
}

// The layout trained without and with overlap (gather: also --overlap-param-gather); world =
// tp x pp x 2 ranks; 2 microbatches.
static void compare_overlap(const char *name, void (*setup)(tb_config *), int gather) {
    tb_config a, b;
    base_config(&a);
    setup(&a);
    a.world_size = a.tensor_model_parallel_size * a.pipeline_model_parallel_size * a.context_parallel_size * 2;
    // 2 microbatches (4 under pp: the 1F1B steady state; the interleaved schedule wants m % pp == 0)
    a.global_batch_size = a.micro_batch_size * 2 * (a.pipeline_model_parallel_size > 1 ? 4 : 2);
    b = a;
    b.overlap_grad_reduce = 1;
    b.overlap_param_gather = gather;
    result ra, rb;
    TB_REQUIRE(train(&a, &ra) == 0, "%s: training without overlap failed", name);
    TB_REQUIRE(train(&b, &rb) == 0, "%s: training with --overlap-grad-reduce failed", name);
    for (int s = 0; s < STEPS; s++) {
        TB_CHECK(memcmp(&ra.loss[s], &rb.loss[s], sizeof(double)) == 0, "%s: step %d loss %.9g without vs %.9g with",
                 name, s + 1, ra.loss[s], rb.loss[s]);
        TB_CHECK(memcmp(&ra.grad_norm[s], &rb.grad_norm[s], sizeof(double)) == 0,
                 "%s: step %d gradient norm %.9g without vs %.9g with", name, s + 1, ra.grad_norm[s], rb.grad_norm[s]);
    }
    int differing = 0, min_buckets = 1 << 30;
    for (int r = 0; r < a.world_size; r++) {
        TB_REQUIRE(ra.nparams[r] == rb.nparams[r], "%s: rank %d buffer lengths differ", name, r);
        if (memcmp(ra.params[r], rb.params[r], ra.nparams[r] * sizeof(float)) != 0) differing++;
        if (rb.buckets[r] < min_buckets) min_buckets = rb.buckets[r];
        TB_CHECK(ra.buckets[r] == 0, "%s: rank %d has buckets without overlap", name, r);
    }
    TB_CHECK(differing == 0, "%s: %d rank(s)' final parameters differ with overlap", name, differing);
    TB_CHECK(min_buckets >= 3, "%s: only %d buckets on some rank (the test wants several)", name, min_buckets);
    if (a.use_distributed_optimizer)  // the shard is a slice of each of them, with or without overlap
        for (int r = 0; r < a.world_size; r++)
            TB_CHECK(ra.shard_buckets[r] == rb.buckets[r] && rb.shard_buckets[r] == rb.buckets[r],
                     "%s: rank %d: the optimizer's shard has %d / %d buckets, DDP %d", name, r, ra.shard_buckets[r],
                     rb.shard_buckets[r], rb.buckets[r]);
    printf("    %-26s losses %.6f .. %.6f bitwise equal; >= %d buckets/rank; exposed comm %.2f -> %.2f ms\n", name,
           rb.loss[0], rb.loss[STEPS - 1], min_buckets, ra.exposed_ms, rb.exposed_ms);
    result_free(&ra);
    result_free(&rb);
}

static void dp2(tb_config *c) { (void)c; }
static void dp2_distopt(tb_config *c) { c->use_distributed_optimizer = 1; }
static void tp2_sp_dp2(tb_config *c) {
    c->tensor_model_parallel_size = 2;
    c->sequence_parallel = 1;
}
static void pp2_dp2(tb_config *c) { c->pipeline_model_parallel_size = 2; }
static void pp2_vpp2_dp2_distopt(tb_config *c) {
    c->pipeline_model_parallel_size = 2;
    c->virtual_pipeline_model_parallel_size = 2;
    c->use_distributed_optimizer = 1;
}

static void tp2_sp_dp2_distopt(tb_config *c) {
    tp2_sp_dp2(c);
    c->use_distributed_optimizer = 1;
}

TB_TEST(overlap_grad_reduce_dp2_bitwise) { compare_overlap("dp2", dp2, 0); }
TB_TEST(overlap_grad_reduce_dp2_distributed_optimizer_bitwise) { compare_overlap("dp2 distopt", dp2_distopt, 0); }
TB_TEST(overlap_grad_reduce_tp2_sp_dp2_bitwise) { compare_overlap("tp2 sp x dp2", tp2_sp_dp2, 0); }
TB_TEST(overlap_grad_reduce_pp2_dp2_bitwise) { compare_overlap("pp2 x dp2", pp2_dp2, 0); }
TB_TEST(overlap_grad_reduce_pp2_vpp2_dp2_distributed_optimizer_bitwise) {
    compare_overlap("pp2 v2 x dp2 distopt", pp2_vpp2_dp2_distopt, 0);
}
// --overlap-param-gather: each bucket's all-gather waited for by the next forward, the
// same bits (the tied embedding's bucket under pp: waited for by the embedding and the head)
TB_TEST(overlap_param_gather_dp2_bitwise) { compare_overlap("dp2 distopt gather", dp2_distopt, 1); }
TB_TEST(overlap_param_gather_tp2_sp_dp2_bitwise) { compare_overlap("tp2 sp x dp2 gather", tp2_sp_dp2_distopt, 1); }
TB_TEST(overlap_param_gather_pp2_vpp2_dp2_bitwise) {
    compare_overlap("pp2 v2 x dp2 gather", pp2_vpp2_dp2_distopt, 1);
}

// Megatron-FSDP with overlap (distributed/fsdp.h, "Time"): every dp call of the step on the
// communication thread, in the rank thread's order — the reduce-scatters waited for only when
// their range is written again or drained, the gathers (optim_grads_params) posted one unit
// ahead with --overlap-param-gather, from the first step's recorded schedule — the same bits as
// without: under gradient accumulation (2 microbatches: a unit's range written again while its
// reduce-scatter may be in flight), tp 2 + sp (the tp sums before the post), pp 2 (the tied
// embedding's bucket on both stages; 1F1B interleaves the forward and backward of microbatches,
// which the schedule records), full recompute (a layer's forward inside the backward) and cp 2.
#define FSDP_SETUP(name, strategy, ...)                                                             \
    static void name(tb_config *c) {                                                              \
        c->use_distributed_optimizer = 1, c->use_megatron_fsdp = 1;                               \
        c->data_parallel_sharding_strategy = TB_FSDP_##strategy;                                  \
        __VA_ARGS__;                                                                              \
    }
FSDP_SETUP(fsdp_optim, OPTIM, (void)0)
FSDP_SETUP(fsdp_optim_grads, OPTIM_GRADS, (void)0)
FSDP_SETUP(fsdp_zero3, OPTIM_GRADS_PARAMS, (void)0)
FSDP_SETUP(fsdp_zero3_tp2_sp, OPTIM_GRADS_PARAMS, tp2_sp_dp2(c))
FSDP_SETUP(fsdp_zero3_pp2, OPTIM_GRADS_PARAMS, c->pipeline_model_parallel_size = 2)
FSDP_SETUP(fsdp_optim_grads_pp2, OPTIM_GRADS, c->pipeline_model_parallel_size = 2)
FSDP_SETUP(fsdp_zero3_recompute, OPTIM_GRADS_PARAMS,
           (c->recompute_granularity = TB_RECOMPUTE_FULL, c->recompute_method = TB_RECOMPUTE_UNIFORM,
            c->recompute_num_layers = 2))
FSDP_SETUP(fsdp_zero3_cp2, OPTIM_GRADS_PARAMS,
           (c->context_parallel_size = 2, c->attention_backend = TB_ATTENTION_FLASH))
TB_TEST(fsdp_optim_overlap_bitwise) {  // the distributed optimizer on the units' buckets: DDP's thread
    compare_overlap("fsdp optim", fsdp_optim, 0);
    compare_overlap("fsdp optim gather", fsdp_optim, 1);
}
TB_TEST(fsdp_optim_grads_overlap_grad_reduce_bitwise) {
    compare_overlap("fsdp optim_grads", fsdp_optim_grads, 0);
    compare_overlap("fsdp optim_grads pp2", fsdp_optim_grads_pp2, 0);
}
TB_TEST(fsdp_optim_grads_params_overlap_bitwise) {
    compare_overlap("fsdp zero3", fsdp_zero3, 0);
    compare_overlap("fsdp zero3 prefetch", fsdp_zero3, 1);
}
TB_TEST(fsdp_optim_grads_params_prefetch_tp2_sp_pp2_bitwise) {
    compare_overlap("fsdp zero3 tp2 sp prefetch", fsdp_zero3_tp2_sp, 1);
    compare_overlap("fsdp zero3 pp2 prefetch", fsdp_zero3_pp2, 1);
}
TB_TEST(fsdp_optim_grads_params_prefetch_recompute_cp2_bitwise) {
    compare_overlap("fsdp zero3 recompute prefetch", fsdp_zero3_recompute, 1);
    compare_overlap("fsdp zero3 cp2 prefetch", fsdp_zero3_cp2, 1);
}

// The distributed optimizer's group is dp × cp: the buffer is padded so that each bucket splits
// into dp × cp equal slices. At cp 3 with 25,952 parameters (not a multiple of 48) the buffer
// was padded for dp alone and the last slice's elements were never updated (the losses still
// agreed): every parameter after two steps must match the single rank's (the first step's lr is 0).
static float *dumped_param(const char *dir, const char *run, const char *name, int64_t *n) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s/tensors/step-0000002.rank-00000.safetensors", dir, run);
    tb_safetensors st;
    tb_error err;
    if (tb_safetensors_open(&st, path, &err) != 0) return NULL;
    const tb_st_tensor *t = tb_safetensors_find(&st, name);
    float *v = t ? malloc((size_t)tb_st_tensor_numel(t) * sizeof *v) : NULL;
    if (v && tb_safetensors_read_f32(&st, t, v, &err) != 0) {
        free(v);
        v = NULL;
    }
    *n = t ? tb_st_tensor_numel(t) : 0;
    tb_safetensors_close(&st);
    return v;
}

TB_TEST(distributed_optimizer_over_dp_x_cp_updates_every_parameter) {
    static const char *const model = TB_BIN_DIR "/pretrain_gpt --num-layers 1 --hidden-size 40 --num-attention-heads 2 "
                                     "--seq-length 24 --vocab-size 60 --micro-batch-size 1 --global-batch-size 2 "
                                     "--train-iters 2 --dump-tensors 2 --attention-backend flash";
    char cmd[4096], dir[512];
    tb_tmp_path(dir, sizeof dir, "overlap_cp3");
    snprintf(cmd, sizeof cmd, "rm -rf %s && %s --run-dir %s/one > /dev/null 2>&1 && %s --world-size 3 "
             "--context-parallel-size 3 --use-distributed-optimizer --run-dir %s/cp3 > /dev/null 2>&1",
             dir, model, dir, model, dir);
    TB_REQUIRE(system(cmd) == 0, "training at one rank and at cp 3 with the distributed optimizer: %s", cmd);
    int64_t na, nb;
    float *a = dumped_param(dir, "one", "param/ln_f.bias", &na), *b = dumped_param(dir, "cp3", "param/ln_f.bias", &nb);
    TB_REQUIRE(a && b && na == nb && na == 40, "param/ln_f.bias dumped by both runs (%lld, %lld elements)",
               (long long)na, (long long)nb);
    int bad = -1;
    for (int64_t i = 0; i < na && bad < 0; i++)
        if (!(fabsf(a[i] - b[i]) <= 1e-5f * fabsf(a[i]) + 1e-7f) || a[i] == 0.0f) bad = (int)i;
    TB_CHECK(bad < 0, "ln_f.bias[%d] after step 2: %.9g at cp 3, %.9g on one rank", bad, bad < 0 ? 0 : b[bad],
             bad < 0 ? 0 : a[bad]);
    free(a);
    free(b);
}

// The bucket layout cuts the distributed optimizer's shards, and the gradient norm is each
// rank's shard sum of squares (double), rounded to float and all-reduced: another layout adds
// the same squares in other groups. The gradients keep their bits (the kernels see the same
// shapes whatever the buckets); the norm may move by the rounding of that float sum, no more.
// Which way it rounds depends on the gradients' last bits, so on the BLAS kernel: a bitwise
// comparison across layouts passes with one OpenBLAS kernel and fails with another.
static double first_grad_norm(const char *dir, const char *run) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s/metrics.rank-00000.jsonl", dir, run);
    char *text = tb_slurp(path);
    const char *at = text ? strstr(text, "\"grad_norm\":") : NULL;
    double norm = at ? strtod(at + strlen("\"grad_norm\":"), NULL) : NAN;
    free(text);
    return norm;
}
TB_TEST(bucket_layout_moves_only_the_norms_rounding) {
    static const char *const model = TB_BIN_DIR "/pretrain_gpt --num-layers 2 --hidden-size 32 "
                                     "--num-attention-heads 4 --seq-length 16 --vocab-size 96 --micro-batch-size 2 "
                                     "--global-batch-size 4 --train-iters 1 --dump-tensors 1 --world-size 2 "
                                     "--use-distributed-optimizer --attention-backend flash --log-interval 1000";
    char cmd[4096], dir[512], path[1024];
    tb_tmp_path(dir, sizeof dir, "overlap_layout");
    snprintf(cmd, sizeof cmd, "rm -rf %s && %s --run-dir %s/big > /dev/null 2>&1 && "
             "%s --ddp-bucket-size 3000 --run-dir %s/small > /dev/null 2>&1", dir, model, dir, model, dir);
    TB_REQUIRE(system(cmd) == 0, "training dp 2 with the distributed optimizer at two bucket sizes: %s", cmd);
    tb_safetensors a, b;
    tb_error err;
    snprintf(path, sizeof path, "%s/big/tensors/step-0000001.rank-00000.safetensors", dir);
    TB_REQUIRE(tb_safetensors_open(&a, path, &err) == 0, "%s", err.msg);
    snprintf(path, sizeof path, "%s/small/tensors/step-0000001.rank-00000.safetensors", dir);
    TB_REQUIRE(tb_safetensors_open(&b, path, &err) == 0, "%s", err.msg);
    int grads = 0, differing = 0;
    for (int i = 0; i < a.ntensors; i++) {
        const tb_st_tensor *ta = &a.tensors[i], *tb = tb_safetensors_find(&b, ta->name);
        if (strncmp(ta->name, "grad/", 5) != 0) continue;
        grads++;
        const int64_t n = tb_st_tensor_numel(ta);
        TB_CHECK(tb && tb_st_tensor_numel(tb) == n, "%s: missing or reshaped in the small-bucket run", ta->name);
        if (!tb || tb_st_tensor_numel(tb) != n) continue;
        float *va = malloc((size_t)n * sizeof *va), *vb = malloc((size_t)n * sizeof *vb);
        TB_CHECK(tb_safetensors_read_f32(&a, ta, va, &err) == 0 && tb_safetensors_read_f32(&b, tb, vb, &err) == 0,
                 "%s: %s", ta->name, err.msg);
        if (memcmp(va, vb, (size_t)n * sizeof *va) != 0) {
            differing++;
            printf("    %s differs between the bucket layouts\n", ta->name);
        }
        free(va);
        free(vb);
    }
    tb_safetensors_close(&a);
    tb_safetensors_close(&b);
    TB_CHECK(grads > 10 && differing == 0, "%d of %d gradients differ between the layouts", differing, grads);
    // the norm is sqrt(total): an ulp of the float total moves it by half an ulp, relatively
    const double na = first_grad_norm(dir, "big"), nb = first_grad_norm(dir, "small");
    TB_CHECK(isfinite(na) && isfinite(nb) && fabs(na - nb) <= FLT_EPSILON * na,
             "step 1 gradient norm %.17g (one bucket) vs %.17g (3000-element buckets): more than the float "
             "rounding of the shards' sum", na, nb);
    printf("    the same gradients; norm %.17g vs %.17g\n", na, nb);
}

// Each refusal names the flag and the value.
static void expect_refusal(void (*setup)(tb_config *), const char *words) {
    tb_config c;
    base_config(&c);
    c.world_size = 2;
    setup(&c);
    config_resolve(&c);
    tb_error err;
    TB_REQUIRE(config_validate(&c, &err) != 0, "accepted (wanted: %s)", words);
    TB_CHECK(strstr(err.msg, words) != NULL, "message '%s' lacks '%s'", err.msg, words);
}
static void bucket_zero(tb_config *c) { c->ddp_bucket_size = 0; }
static void gather_without_distopt(tb_config *c) { c->overlap_param_gather = 1; }
static void gather_without_grad_overlap(tb_config *c) {
    c->overlap_param_gather = 1;
    c->use_distributed_optimizer = 1;
}

TB_TEST(ddp_config_rules) {
    expect_refusal(bucket_zero, "ddp_bucket_size (0) must be at least 1");
    expect_refusal(gather_without_distopt, "overlap_param_gather needs use_distributed_optimizer");
    expect_refusal(gather_without_grad_overlap, "overlap_param_gather needs overlap_grad_reduce");
}

// A communication-thread call that times out fails its rank with the hang report, as a rank
// thread's does: dp 2 with rank 1 stalled at step 2 (its communication thread stops before its
// first bucket); rank 0's communication thread is the one that waits, in that bucket's all-reduce.
TB_TEST(communication_thread_timeout_fails_the_rank_with_a_hang_report) {
    char dir[512], cmd[2048], path[1024];
    tb_tmp_path(dir, sizeof dir, "overlap_hang");
    snprintf(cmd, sizeof cmd, "rm -rf %s && mkdir -p %s", dir, dir);
    TB_REQUIRE(system(cmd) == 0, "mkdir: %s", cmd);
    snprintf(cmd, sizeof cmd,
             "timeout 120 " TB_BIN_DIR "/pretrain_gpt --num-layers 2 --hidden-size 32 "
             "--num-attention-heads 4 --seq-length 16 --vocab-size 100 --micro-batch-size 1 --world-size 2 "
             "--train-iters 3 --overlap-grad-reduce "
             "--ddp-bucket-size 3000 --inject-stall 1:2 --collective-timeout 2 --run-dir %s/run"
             " > %s/out.txt 2> %s/stderr.txt",
             dir, dir, dir);
    int status = system(cmd);
    TB_CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 4, "the process ends with status 4 (status %d)", status);
    char err_text[8192] = "";
    snprintf(path, sizeof path, "%s/stderr.txt", dir);
    tb_slurp_into(path, err_text, sizeof err_text);
    TB_CHECK(strstr(err_text, "rank 0 (tp0 cp0 dp0 pp0): HANG: all_reduce on group dp_cp") != NULL,
             "rank 0's communication thread reports its dp all-reduce: %s", err_text);
    snprintf(path, sizeof path, "%s/run/hang.json", dir);
    char *hang = tb_slurp(path);
    TB_CHECK(hang != NULL, "hang.json written");
    free(hang);
}

int main(void) {
    TB_RUN(ddp_config_rules);
    TB_RUN(overlap_grad_reduce_dp2_bitwise);
    TB_RUN(overlap_grad_reduce_dp2_distributed_optimizer_bitwise);
    TB_RUN(overlap_grad_reduce_tp2_sp_dp2_bitwise);
    TB_RUN(overlap_grad_reduce_pp2_dp2_bitwise);
    TB_RUN(overlap_grad_reduce_pp2_vpp2_dp2_distributed_optimizer_bitwise);
    TB_RUN(overlap_param_gather_dp2_bitwise);
    TB_RUN(overlap_param_gather_tp2_sp_dp2_bitwise);
    TB_RUN(overlap_param_gather_pp2_vpp2_dp2_bitwise);
    TB_RUN(fsdp_optim_overlap_bitwise);
    TB_RUN(fsdp_optim_grads_overlap_grad_reduce_bitwise);
    TB_RUN(fsdp_optim_grads_params_overlap_bitwise);
    TB_RUN(fsdp_optim_grads_params_prefetch_tp2_sp_pp2_bitwise);
    TB_RUN(fsdp_optim_grads_params_prefetch_recompute_cp2_bitwise);
    TB_RUN(communication_thread_timeout_fails_the_rank_with_a_hang_report);
    TB_RUN(distributed_optimizer_over_dp_x_cp_updates_every_parameter);
    TB_RUN(bucket_layout_moves_only_the_norms_rounding);
    return tb_test_summary();
}
