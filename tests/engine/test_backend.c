// test_backend.c — the kernel dispatch (backend/backend.h) and the device paths of training,
// without a GPU. A stand-in "device" table has the CPU's kernels but says its tensors are not
// host memory (host = 0), with counting copies; the rank's allocator draws its blocks from a
// stand-in device source (tb_mem_device over malloc). Training through them takes every path
// --device cuda takes — the weights drawn on the host and copied over, the tokens copied into
// each slot's device buffer, the losses and the RoPE tables through the copies, the blocks
// freed by pointer — so each must give the CPU run's bits: same kernels, same order.
// Asserted: losses, gradient norms and final weights bitwise equal, one rank and tp 2 with
// sequence parallelism (rank threads), and that the device paths did run (copies counted).
//
// Also --fp16's step logic (the loss scaler, optimizer/grad_scaler.h), with the CPU kernels:
// the config refuses fp16 on --device cpu, so these runs set it after validation. The scaler
// multiplies the backward's seed by a power of two and divides it out of the norm and the
// update, which is exact in fp32 short of overflow: the same bits as without it. A scale that
// overflows the gradients skips the steps (weights unchanged) and backs off as Megatron's
// DynamicGradScaler does; the scaler's own rules are checked step by step.
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/cuda/cuda_backend.h"
#include "optimizer/grad_scaler.h"
#include "tb_test.h"
#include "trainers.h"

#define STEPS 2

// --- the stand-in device ---------------------------------------------------------------

static _Atomic long to_host, from_host, device_blocks;
static tb_backend standin;

static void count_to_host(void *dst, const void *src, size_t bytes) {
    to_host++;
    memcpy(dst, src, bytes);
}
static void count_from_host(void *dst, const void *src, size_t bytes) {
    from_host++;
    memcpy(dst, src, bytes);
}

static int block_alloc(void *ctx, void **p, size_t bytes, char *why, size_t why_len) {
    *p = aligned_alloc(64, (bytes + 63) / 64 * 64);
    if (!*p) return snprintf(why, why_len, "malloc failed"), -1;
    device_blocks++;
    return 0;
}
static void block_release(void *ctx, void *p) { free(p); }
static void block_zero(void *ctx, void *p, size_t bytes) { memset(p, 0, bytes); }
static const tb_mem_device standin_memory = {"stand-in", block_alloc, block_release, block_zero, NULL};

// --- training with one table or the other ----------------------------------------------

typedef struct run {
    const tb_config *cfg;
    int device;                 // 1: the stand-in table and memory
    int fp16;                   // set cfg->fp16 (after validation)
    float initial_scale;        // with fp16: the scaler's first scale (0: Megatron's 2^32)
    tb_grad_scaler scaler;      // with fp16: after the steps
    int skipped[STEPS];
    float *initial;             // rank 0's parameters after init (copied to the host)
    double loss[STEPS], norm[STEPS];
    float *weights;             // rank 0's final parameter buffer (copied to the host)
    size_t nweights;
    int failed;
} run;

static void train_rank(tb_rank *rk, run *r) {
    tb_allocator_init(&rk->mem, 0, NULL, NULL);
    if (r->device) {
        tb_allocator_set_device(&rk->mem, &standin_memory);
        tb_backend_bind(&standin);
    }
    cpu_set_num_threads(1);
    tb_trainer tr;
    tb_error err;
    if (trainer_init(&tr, r->cfg, rk, &err) != 0) {
        printf("    %s: %s\n", rk->label, err.msg);
        r->failed = 1;
        tb_backend_bind(NULL);
        return;
    }
    const gpt_model *m = &tr.models[0];
    if (r->fp16 && r->initial_scale > 0) tr.scaler.scale = r->initial_scale;
    if (rk->rank == 0) {
        r->initial = malloc(m->padded_parameters * sizeof(float));
        tb_be()->copy_to_host(r->initial, m->param_memory, m->padded_parameters * sizeof(float));
    }
    for (int s = 1; s <= STEPS; s++) {
        tb_step_result res = train_step(&tr, s);
        if (rk->rank == 0) r->loss[s - 1] = res.loss, r->norm[s - 1] = res.grad_norm, r->skipped[s - 1] = res.skipped;
    }
    if (rk->rank == 0) {
        r->scaler = tr.scaler;
        r->nweights = m->padded_parameters;
        r->weights = malloc(r->nweights * sizeof(float));
        tb_be()->copy_to_host(r->weights, m->param_memory, r->nweights * sizeof(float));
    }
    trainer_free(&tr);
    tb_allocator_free_all(&rk->mem);
    tb_backend_bind(NULL);
}

static void rank_fn(tb_rank *rk, void *arg) { train_rank(rk, arg); }

static int train(tb_config *cfg, int device, run *r) {
    const int fp16 = r->fp16;
    const float initial_scale = r->initial_scale;
    memset(r, 0, sizeof *r);
    r->cfg = cfg;
    r->device = device;
    r->fp16 = fp16;
    r->initial_scale = initial_scale;
    if (cfg->world_size > 1) return run_world(cfg, rank_fn, r) != 0 || r->failed ? -1 : 0;
    config_resolve(cfg);
    tb_error err;
    if (config_validate(cfg, &err) != 0) {
        printf("    invalid config: %s\n", err.msg);
        return -1;
    }
    cfg->fp16 = r->fp16;  // (refused by the config on the CPU: the step logic is what is checked)
    tb_rank rk;
    rank_init_single(&rk, cfg);
    train_rank(&rk, r);
    return r->failed ? -1 : 0;
}

static void free_run(run *r) {
    free(r->weights);
    free(r->initial);
}

static void small(tb_config *c) {
    config_defaults(c);
    c->num_layers = 2, c->hidden_size = 32, c->num_attention_heads = 4, c->seq_length = 16;
    c->vocab_size = 96, c->micro_batch_size = 2, c->global_batch_size = 4, c->train_iters = STEPS;
    c->attention_backend = TB_ATTENTION_FLASH, c->lr = 3e-3, c->collective_timeout = 60;
}

// The same training on the CPU table and on the stand-in device: bit for bit.
static void same_bits(const char *name, tb_config *a, tb_config *b) {
    run cpu = {0}, dev = {0};
    TB_REQUIRE(train(a, 0, &cpu) == 0, "%s: the CPU run", name);
    long before_to = to_host, before_from = from_host, before_blocks = device_blocks;
    TB_REQUIRE(train(b, 1, &dev) == 0, "%s: the stand-in device run", name);
    TB_CHECK(from_host - before_from > 0 && to_host - before_to > 0 && device_blocks - before_blocks > 0,
             "%s: the device paths ran (%ld copies from the host, %ld to it, %ld device blocks)", name,
             from_host - before_from, to_host - before_to, device_blocks - before_blocks);
    for (int s = 0; s < STEPS; s++)
        TB_CHECK(cpu.loss[s] == dev.loss[s] && cpu.norm[s] == dev.norm[s],
                 "%s step %d: loss %.9g vs %.9g, grad norm %.9g vs %.9g", name, s + 1, cpu.loss[s], dev.loss[s],
                 cpu.norm[s], dev.norm[s]);
    TB_CHECK(cpu.nweights == dev.nweights && cpu.weights && dev.weights &&
                 memcmp(cpu.weights, dev.weights, cpu.nweights * sizeof(float)) == 0,
             "%s: the final weights differ", name);
    free_run(&cpu);
    free_run(&dev);
}

TB_TEST(unbound_threads_get_the_cpu_table) {
    TB_CHECK(tb_be() == tb_backend_cpu() && tb_be()->host && !strcmp(tb_be()->name, "cpu"), "unbound: %s",
             tb_be()->name);
    tb_backend_bind(&standin);
    TB_CHECK(tb_be() == &standin, "bound: the thread's table");
    tb_backend_bind(NULL);
    TB_CHECK(tb_be() == tb_backend_cpu(), "unbound again: the CPU's");
    // the loss's host sum through a device table: the same double, in index order
    float x[5] = {0.1f, 2.5f, -1.25f, 3e-7f, 7.0f};
    double cpu = tb_be_sum_to_host(x, 5);
    tb_backend_bind(&standin);
    long before = to_host;
    double dev = tb_be_sum_to_host(x, 5);
    tb_backend_bind(NULL);
    TB_CHECK(cpu == dev && to_host == before + 1, "sum %.17g vs %.17g (copies %ld)", cpu, dev, to_host - before);
}

TB_TEST(one_rank_on_a_device_table_gives_the_cpu_bits) {
    tb_config a, b;
    small(&a), small(&b);
    same_bits("gpt2", &a, &b);
    small(&a), small(&b);
    a.normalization = b.normalization = TB_NORM_RMSNORM;
    a.swiglu = b.swiglu = 1;
    a.position_embedding_type = b.position_embedding_type = TB_POS_ROPE;
    a.num_query_groups = b.num_query_groups = 2;
    same_bits("llama", &a, &b);
}

TB_TEST(tp2_sequence_parallel_on_a_device_table_gives_the_cpu_bits) {
    tb_config a, b;
    small(&a), small(&b);
    a.world_size = b.world_size = 2;
    a.tensor_model_parallel_size = b.tensor_model_parallel_size = 2;
    a.sequence_parallel = b.sequence_parallel = 1;
    same_bits("tp2-sp", &a, &b);
}

// MoE (transformer/moe/) through the device table: the router, the permutations and the
// statistics take the backend's entries and the host copies of the routing (tokens per expert,
// capacity, the all-to-all's split sizes); the MoE entries are counted to show they ran.
static _Atomic long moe_calls;
static void count_router(const float *logits, float *scores, int32_t *topk, float *probs, int N, int E, int k,
                         int sigmoid, int pre_softmax) {
    moe_calls++;
    tb_backend_cpu()->moe_router_forward(logits, scores, topk, probs, N, E, k, sigmoid, pre_softmax);
}

static void moe_small(tb_config *c) {
    small(c);
    c->num_experts = 4, c->moe_router_topk = 2, c->moe_ffn_hidden_size = 16;
    c->moe_token_dispatcher_type = TB_MOE_DISPATCHER_ALLTOALL, c->moe_aux_loss_coeff = 0.01;
}

static void moe_same_bits(const char *name, tb_config *a, tb_config *b) {
    const long before = moe_calls;
    same_bits(name, a, b);
    TB_CHECK(moe_calls > before, "%s: the device table's MoE router ran (%ld calls)", name, moe_calls - before);
}

TB_TEST(moe_on_a_device_table_gives_the_cpu_bits) {
    tb_config a, b;
    moe_small(&a), moe_small(&b);
    moe_same_bits("moe top-2 of 4, alltoall, aux loss", &a, &b);
    moe_small(&a), moe_small(&b);
    a.world_size = b.world_size = 2;
    a.expert_model_parallel_size = b.expert_model_parallel_size = 2;
    moe_same_bits("moe ep 2", &a, &b);
    moe_small(&a), moe_small(&b);  // every host decision: capacity (drop by probs), padding, per-sequence counts
    a.moe_router_score_function = b.moe_router_score_function = TB_MOE_SCORE_SIGMOID;
    a.moe_router_load_balancing_type = b.moe_router_load_balancing_type = TB_MOE_LB_SEQ_AUX_LOSS;
    a.moe_expert_capacity_factor = b.moe_expert_capacity_factor = 1.0;
    a.moe_pad_expert_input_to_capacity = b.moe_pad_expert_input_to_capacity = 1;
    a.moe_shared_expert_intermediate_size = b.moe_shared_expert_intermediate_size = 16;
    a.moe_grouped_gemm = b.moe_grouped_gemm = 1;
    moe_same_bits("moe sigmoid, seq aux loss, capacity 1 padded, shared expert, grouped GEMM", &a, &b);
    moe_small(&a), moe_small(&b);
    a.world_size = b.world_size = 2;
    a.tensor_model_parallel_size = b.tensor_model_parallel_size = 2;
    a.sequence_parallel = b.sequence_parallel = 1;
    a.expert_tensor_parallel_size = b.expert_tensor_parallel_size = 2;
    a.moe_shared_expert_intermediate_size = b.moe_shared_expert_intermediate_size = 16;
    moe_same_bits("moe tp 2 sp, etp 2, shared expert", &a, &b);
    a.moe_token_dispatcher_type = b.moe_token_dispatcher_type = TB_MOE_DISPATCHER_ALLGATHER;
    moe_same_bits("moe allgather, tp 2 sp, etp 2, shared expert", &a, &b);
    moe_small(&a), moe_small(&b);
    a.world_size = b.world_size = 2;
    a.expert_model_parallel_size = b.expert_model_parallel_size = 2;
    a.moe_token_dispatcher_type = b.moe_token_dispatcher_type = TB_MOE_DISPATCHER_ALLGATHER;
    moe_same_bits("moe allgather, ep 2", &a, &b);
}

// Every entry of both tables is filled (a NULL in the CUDA table would crash the first GPU run
// that reaches it; this build compiles the CUDA table when it has the backend).
TB_TEST(every_entry_of_each_table_is_filled) {
    const tb_backend *tables[] = {tb_backend_cpu(), tb_backend_cuda()};
    for (int t = 0; t < 2; t++) {
        const tb_backend *be = tables[t];
        if (!be) {
            printf("  (no CUDA table: this build has no CUDA backend)\n");
            continue;
        }
#define FILLED(f) TB_CHECK(be->f != NULL, "%s table: %s is NULL", be->name, #f)
        FILLED(copy); FILLED(zero); FILLED(copy_to_host); FILLED(copy_from_host); FILLED(synchronize);
        FILLED(matmul_forward); FILLED(matmul_backward); FILLED(add_bias); FILLED(bias_backward);
        FILLED(layernorm_forward); FILLED(layernorm_backward); FILLED(rmsnorm_forward); FILLED(rmsnorm_backward);
        FILLED(gelu_forward); FILLED(gelu_backward); FILLED(swiglu_forward); FILLED(swiglu_backward);
        FILLED(add); FILLED(add_inplace); FILLED(scale);
        FILLED(flash_attention_forward); FILLED(flash_attention_backward); FILLED(rope_apply);
        FILLED(embedding_forward); FILLED(embedding_backward); FILLED(add_positions);
        FILLED(ce_row_max); FILLED(ce_target_logit); FILLED(ce_exp_sum); FILLED(ce_normalize);
        FILLED(cross_entropy_backward); FILLED(adamw_update); FILLED(sum_squares);
        FILLED(moe_router_forward); FILLED(moe_router_backward); FILLED(moe_aux_score_sums); FILLED(moe_permute);
        FILLED(moe_permute_backward); FILLED(moe_unpermute); FILLED(moe_unpermute_backward);
        FILLED(grouped_matmul_forward); FILLED(grouped_matmul_backward);
#undef FILLED
        // the phase timer: CUDA events on a device, the host clock (NULL) on the CPU
        TB_CHECK(be->host ? !be->phase_begin && !be->phase_end_ms : be->phase_begin && be->phase_end_ms,
                 "%s table: phase timer", be->name);
        TB_CHECK(be->host == (t == 0), "%s table: host %d", be->name, be->host);
    }
}

// Megatron's DynamicGradScaler, update by update.
TB_TEST(grad_scaler_backs_off_after_the_hysteresis_and_grows_after_the_window) {
    tb_grad_scaler s;
    tb_grad_scaler_init(&s);
    TB_CHECK(s.scale == 4294967296.0f && s.hysteresis_tracker == 2, "initial 2^32, hysteresis 2: %g %d", s.scale,
             s.hysteresis_tracker);
    tb_grad_scaler_update(&s, 1);
    TB_CHECK(s.scale == 4294967296.0f, "the first overflow spends the hysteresis only: %g", s.scale);
    tb_grad_scaler_update(&s, 1);
    TB_CHECK(s.scale == 2147483648.0f, "the second halves: %g", s.scale);
    tb_grad_scaler_update(&s, 1);
    TB_CHECK(s.scale == 1073741824.0f, "then every one halves: %g", s.scale);
    for (int i = 0; i < 999; i++) tb_grad_scaler_update(&s, 0);
    TB_CHECK(s.scale == 1073741824.0f && s.growth_tracker == 999, "999 good steps: unchanged (%g)", s.scale);
    tb_grad_scaler_update(&s, 0);
    TB_CHECK(s.scale == 2147483648.0f && s.growth_tracker == 0 && s.hysteresis_tracker == 2,
             "the 1000th doubles it and restores the hysteresis: %g %d", s.scale, s.hysteresis_tracker);
    tb_grad_scaler_update(&s, 1);
    TB_CHECK(s.scale == 2147483648.0f && s.growth_tracker == 0, "an overflow resets the window: %d", s.growth_tracker);
    for (int i = 0; i < 100; i++) tb_grad_scaler_update(&s, 1);
    TB_CHECK(s.scale == 1.0f, "never below min_scale 1: %g", s.scale);
}

TB_TEST(fp16_loss_scaling_is_exact_and_overflow_skips_the_step) {
    tb_config a, b;
    small(&a), small(&b);
    run plain = {0}, scaled = {.fp16 = 1};
    TB_REQUIRE(train(&a, 1, &plain) == 0 && train(&b, 1, &scaled) == 0, "the runs");
    for (int s = 0; s < STEPS; s++)
        TB_CHECK(plain.loss[s] == scaled.loss[s] && plain.norm[s] == scaled.norm[s] && !scaled.skipped[s],
                 "step %d: loss %.9g vs %.9g, grad norm %.9g vs %.9g (scaled by 2^32, unscaled)", s + 1, plain.loss[s],
                 scaled.loss[s], plain.norm[s], scaled.norm[s]);
    TB_CHECK(memcmp(plain.weights, scaled.weights, plain.nweights * sizeof(float)) == 0, "the weights differ");
    TB_CHECK(scaled.scaler.scale == 4294967296.0f && scaled.scaler.growth_tracker == STEPS, "scaler: %g, %d good steps",
             scaled.scaler.scale, scaled.scaler.growth_tracker);
    // a scale that overflows the gradients (Inf: fp32 has no other overflow to rely on here):
    // both steps skipped, the weights as initialised, the hysteresis spent, the window reset
    small(&b);
    run over = {.fp16 = 1, .initial_scale = INFINITY};
    TB_REQUIRE(train(&b, 1, &over) == 0, "the overflowing run");
    TB_CHECK(over.skipped[0] && over.skipped[1] && !isfinite(over.norm[0]) && isfinite(over.loss[0]),
             "skipped %d %d, norm %g, loss %g", over.skipped[0], over.skipped[1], over.norm[0], over.loss[0]);
    TB_CHECK(memcmp(over.initial, over.weights, over.nweights * sizeof(float)) == 0, "a skipped step changed the weights");
    TB_CHECK(over.scaler.hysteresis_tracker == 0 && over.scaler.growth_tracker == 0, "scaler: hysteresis %d, window %d",
             over.scaler.hysteresis_tracker, over.scaler.growth_tracker);
    free_run(&plain);
    free_run(&scaled);
    free_run(&over);
}

int main(void) {
    standin = *tb_backend_cpu();
    standin.name = "stand-in device";
    standin.host = 0;
    standin.copy_to_host = count_to_host;
    standin.copy_from_host = count_from_host;
    standin.moe_router_forward = count_router;
    TB_RUN(unbound_threads_get_the_cpu_table);
    TB_RUN(every_entry_of_each_table_is_filled);
    TB_RUN(one_rank_on_a_device_table_gives_the_cpu_bits);
    TB_RUN(tp2_sequence_parallel_on_a_device_table_gives_the_cpu_bits);
    TB_RUN(moe_on_a_device_table_gives_the_cpu_bits);
    TB_RUN(grad_scaler_backs_off_after_the_hysteresis_and_grows_after_the_window);
    TB_RUN(fp16_loss_scaling_is_exact_and_overflow_skips_the_step);
    return tb_test_summary();
}
