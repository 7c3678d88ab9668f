// test_backend.c — the kernel dispatch (backend/backend.h) and the device paths of training,
// without a GPU. A stand-in "device" table has the CPU's kernels but says its tensors are not
// host memory (host = 0), with counting copies; the rank's allocator draws its blocks from a
// stand-in device source (tb_mem_device over malloc). Training through them takes every path
// --device cuda takes — the weights drawn on the host and copied over, the tokens copied into
// each slot's device buffer, the losses and the RoPE tables through the copies, the blocks
// freed by pointer — so each must give the CPU run's bits: same kernels, same order.
// Asserted: losses, gradient norms and final weights bitwise equal, one rank, tp 2 with
// sequence parallelism, cp 2 (all_gather; also with tp 2 and RoPE), pp 2 and pp 2
// interleaved (v 2) on rank threads (rank 0's weights and the last rank's, every chunk), and
// that the device paths did run (copies counted; the cp attention calls through the table
// counted).
//
// --overlap-grad-reduce (and the distributed optimizer's --overlap-param-gather) through the
// stand-in device, dp 2: the bits of the CPU run without overlap, and the stand-in's stream and
// event entries (counting no-ops that log each call) show the communication thread bound to
// the rank's device and each bucket's events used once per step in the order the CUDA backend
// needs: the rank thread records the bucket's ready event while the backward is still running
// (at the point it queued the bucket), the communication thread waits for it, averages the
// bucket and records its done event, and the rank thread waits for that (before the optimizer;
// for a gather, before the forward's first use of the bucket).
//
// Also --fp16's step logic (the loss scaler, optimizer/grad_scaler.h), with the CPU kernels:
// the config refuses fp16 on --device cpu, so these runs set it after validation. The scaler
// multiplies the backward's seed by a power of two and divides it out of the norm and the
// update, which is exact in fp32 short of overflow: the same bits as without it. A scale that
// overflows the gradients skips the steps (weights unchanged) and backs off as Megatron's
// DynamicGradScaler does; the scaler's own rules are checked step by step.
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/cuda/cuda_backend.h"
#include "distributed/distributed_data_parallel.h"
#include "optimizer/grad_scaler.h"
#include "standin_device.h"
#include "tb_test.h"
#include "trainers.h"

#define STEPS 2

// context parallelism's attention through the table (the CPU's kernel, counted)
static _Atomic long cp_attention_calls;
// the unfused core through the table (the CPU's kernel, counted; probs NULL: recomputed)
static _Atomic long local_attention_calls, local_attention_recomputed;
static void count_attention_forward(float *out, float *probs, float *scratch, const float *qkv, int B, int T, int NH,
                                    int G, int hs) {
    local_attention_calls++;
    if (!probs) local_attention_recomputed++;
    tb_backend_cpu()->attention_forward(out, probs, scratch, qkv, B, T, NH, G, hs);
}

// the ring's blocks through the table (the CPU's kernel, counted)
static _Atomic long ring_block_calls;
static void count_block_forward(float *out, float *lse, float *scratch, int threads, const cpu_flash_block *blk,
                                int B, int NH, int G, int hs) {
    ring_block_calls++;
    tb_backend_cpu()->flash_attention_block_forward(out, lse, scratch, threads, blk, B, NH, G, hs);
}
static void count_cp_forward(float *out, float *lse, float *scratch, int threads, const float *qkv,
                             const int32_t *qpos, const float *kv, int B, int Tq, int Tk, int NH, int G, int hs) {
    cp_attention_calls++;
    tb_backend_cpu()->flash_attention_cp_forward(out, lse, scratch, threads, qkv, qpos, kv, B, Tq, Tk, NH, G, hs);
}

// The stand-in's second thread, streams and events: no-ops that count and log. A rank's
// "context" is contexts[rank]; each log entry carries the rank, whether a side thread made the
// call, and the rank's kernel counts at that moment (backward GEMMs, embedding forwards, AdamW
// updates: where in the rank thread's program the call falls).
#define MAX_RANKS 2  // the ranks whose events are checked (dp 2)
#define MAX_WORLD 4  // the widest world this file trains (cp 2 x tp 2): the per-rank counters
#define MAX_LOG 4096
enum { EV_RECORD, EV_WAIT };
typedef struct ev_entry {
    int rank, side, op, event;
    long backward, embedding, adamw;
} ev_entry;
static pthread_mutex_t log_mu = PTHREAD_MUTEX_INITIALIZER;
static ev_entry ev_log[MAX_LOG];
static int ev_logged;
static int contexts[MAX_WORLD];
static _Thread_local int my_rank, on_side;
static _Atomic long side_binds, side_unbinds, streams_set, events_live, next_event;
static _Atomic long backward_calls[MAX_WORLD], embedding_calls[MAX_WORLD], adamw_calls[MAX_WORLD];

static void *standin_thread_context(void) { return &contexts[my_rank]; }
static void standin_bind_side_thread(void *ctx, void (*fail)(void *, const char *), void *arg) {
    (void)fail, (void)arg;
    if (!ctx) {
        side_unbinds++;
        on_side = 0;
        return;
    }
    side_binds++;
    my_rank = (int)((int *)ctx - contexts);
    on_side = 1;
}
static void standin_set_stream(void *stream) { (void)stream, streams_set++; }
static void *standin_event_create(void) {
    int *e = malloc(sizeof *e);
    *e = (int)++next_event;
    events_live++;
    return e;
}
static void standin_event_destroy(void *e) {
    events_live--;
    free(e);
}
static void log_event(int op, void *e) {
    pthread_mutex_lock(&log_mu);
    if (ev_logged < MAX_LOG)
        ev_log[ev_logged++] = (ev_entry){my_rank, on_side, op, *(int *)e, backward_calls[my_rank],
                                         embedding_calls[my_rank], adamw_calls[my_rank]};
    pthread_mutex_unlock(&log_mu);
}
static void standin_event_record(void *e) { log_event(EV_RECORD, e); }
static void standin_event_wait(void *e) { log_event(EV_WAIT, e); }

static void count_matmul_backward(float *dinp, float *dweight, float *dbias, const float *dout, const float *inp,
                                  const float *weight, int N, int C, int OC) {
    backward_calls[my_rank]++;
    tb_backend_cpu()->matmul_backward(dinp, dweight, dbias, dout, inp, weight, N, C, OC);
}
static void count_embedding_forward(float *out, const int32_t *tokens, const float *wte, int vocab_start,
                                    int vocab_local, const float *wpe, const int32_t *pos, int B, int T, int C) {
    embedding_calls[my_rank]++;
    tb_backend_cpu()->embedding_forward(out, tokens, wte, vocab_start, vocab_local, wpe, pos, B, T, C);
}
static void count_adamw_update(float *p, float *m, float *v, const float *g, size_t n, float grad_scale, float b1,
                               float b2, float eps, float keep, float step, float inv_sqrt_bc2) {
    adamw_calls[my_rank]++;
    tb_backend_cpu()->adamw_update(p, m, v, g, n, grad_scale, b1, b2, eps, keep, step, inv_sqrt_bc2);
}

// --- training with one table or the other (the stand-in device: standin_device.h) -----

typedef struct run {
    const tb_config *cfg;
    int device;                 // 1: the stand-in table and memory
    int fp16;                   // set cfg->fp16 (after validation)
    float initial_scale;        // with fp16: the scaler's first scale (0: Megatron's 2^32)
    tb_grad_scaler scaler;      // with fp16: after the steps
    int skipped[STEPS];
    float *initial;             // rank 0's parameters after init, every chunk's (copied to the host)
    double loss[STEPS], norm[STEPS];
    float *weights;             // rank 0's final parameter buffers, every chunk's (copied to the host)
    size_t nweights;
    int nbuckets[MAX_RANKS];    // with overlap on the stand-in: each rank's buckets and the ids
    int *events[MAX_RANKS][4];  // of their events: grad ready, grad done, gather ready, gather done
    float *last_weights;        // the same of the last rank (another pipeline stage under pp), or NULL
    size_t nlast;
    int failed;
} run;

static void event_ids(run *r, int rank, const tb_ddp *d) {
    void **const ev[4] = {d->grad_ready, d->grad_done, d->gather_ready, d->gather_done};
    r->nbuckets[rank] = d->nbuckets;
    for (int k = 0; k < 4; k++) {
        if (!ev[k]) continue;
        r->events[rank][k] = calloc((size_t)d->nbuckets, sizeof(int));
        for (int b = 0; b < d->nbuckets; b++) r->events[rank][k][b] = *(int *)ev[k][b];
    }
}

// The parameter buffers of every chunk of the trainer, one after the other, copied to the host.
static float *all_weights(const tb_trainer *tr, size_t *n) {
    *n = 0;
    for (int c = 0; c < tr->nchunks; c++) *n += tr->models[c].padded_parameters;
    float *w = malloc(*n * sizeof(float)), *at = w;
    for (int c = 0; c < tr->nchunks; c++) {
        const gpt_model *m = &tr->models[c];
        tb_be()->copy_to_host(at, m->param_memory, m->padded_parameters * sizeof(float));
        at += m->padded_parameters;
    }
    return w;
}

static void train_rank(tb_rank *rk, run *r) {
    if (rk->rank >= MAX_WORLD) {  // the per-rank counters would be written out of bounds
        printf("    %s: rank %d, but MAX_WORLD is %d\n", rk->label, rk->rank, MAX_WORLD);
        abort();
    }
    my_rank = rk->rank;
    tb_allocator_init(rk->mem, 0, NULL, NULL);
    if (r->device) standin_bind(rk->mem);
    cpu_set_num_threads(1);
    tb_trainer tr;
    tb_error err;
    if (trainer_init(&tr, r->cfg, rk, &err) != 0) {
        printf("    %s: %s\n", rk->label, err.msg);
        r->failed = 1;
        tb_backend_bind(NULL);
        return;
    }
    if (r->fp16 && r->initial_scale > 0) tr.scaler.scale = r->initial_scale;
    size_t n;
    if (rk->rank == 0) r->initial = all_weights(&tr, &n);
    for (int s = 1; s <= STEPS; s++) {
        tb_step_result res = train_step(&tr, s);
        if (rk->rank == 0) r->loss[s - 1] = res.loss, r->norm[s - 1] = res.grad_norm, r->skipped[s - 1] = res.skipped;
    }
    if (rk->rank == 0) {
        r->scaler = tr.scaler;
        r->weights = all_weights(&tr, &r->nweights);
    }
    if (r->device && ddp_active(&tr.ddp) && rk->rank < MAX_RANKS) event_ids(r, rk->rank, &tr.ddp);
    if (rk->rank > 0 && rk->rank == rk->world_size - 1) r->last_weights = all_weights(&tr, &r->nlast);
    trainer_free(&tr);
    tb_allocator_free_all(rk->mem);
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
    ev_logged = 0;
    if (cfg->world_size > 1) return run_world(cfg, rank_fn, r) != 0 || r->failed ? -1 : 0;
    config_resolve(cfg);
    tb_error err;
    if (config_validate(cfg, &err) != 0) {
        printf("    invalid config: %s\n", err.msg);
        return -1;
    }
    cfg->fp16 = r->fp16;  // (refused by the config on the CPU: the step logic is what is checked)
    tb_single_rank single;
    train_rank(rank_init_single(&single, cfg), r);
    return r->failed ? -1 : 0;
}

static void free_run(run *r) {
    free(r->weights);
    free(r->initial);
    for (int i = 0; i < MAX_RANKS; i++)
        for (int k = 0; k < 4; k++) free(r->events[i][k]);
    free(r->last_weights);
}

static void small(tb_config *c) {
    config_defaults(c);
    c->num_layers = 2, c->hidden_size = 32, c->num_attention_heads = 4, c->seq_length = 16;
    c->vocab_size = 96, c->micro_batch_size = 2, c->global_batch_size = 4, c->train_iters = STEPS;
    c->attention_backend = TB_ATTENTION_FLASH, c->lr = 3e-3, c->collective_timeout = 60;
}

// The same training on the CPU table and on the stand-in device: bit for bit; then `check`
// (if any) on the stand-in run.
static void same_bits_then(const char *name, tb_config *a, tb_config *b, void (*check)(const char *, const run *)) {
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
    TB_CHECK(cpu.nlast == dev.nlast && (cpu.nlast == 0 || (cpu.last_weights && dev.last_weights &&
                                                            memcmp(cpu.last_weights, dev.last_weights,
                                                                   cpu.nlast * sizeof(float)) == 0)),
             "%s: the last rank's final weights differ", name);
    if (check) check(name, &dev);
    free_run(&cpu);
    free_run(&dev);
}

static void same_bits(const char *name, tb_config *a, tb_config *b) { same_bits_then(name, a, b, NULL); }

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

// Context parallelism (all_gather): the K/V packing, the gather's reordering, the attention
// with positions and the K/V gradients' way back all through the table, the positions and
// RoPE's tables at them copied to the device; learned positions (the embedding reads the
// positions) and, with tp 2 and RoPE, GQA.
TB_TEST(cp2_all_gather_on_a_device_table_gives_the_cpu_bits) {
    tb_config a, b;
    small(&a), small(&b);
    a.world_size = b.world_size = 2;
    a.context_parallel_size = b.context_parallel_size = 2;
    long before = cp_attention_calls;
    same_bits("cp2", &a, &b);
    TB_CHECK(cp_attention_calls - before == 2L * 2 * STEPS * 2,
             "cp2: the attention ran through the table %ld times (2 ranks x 2 layers x %d steps x 2 microbatches)",
             cp_attention_calls - before, STEPS);
    small(&a), small(&b);
    a.world_size = b.world_size = 4;
    a.context_parallel_size = b.context_parallel_size = 2;
    a.tensor_model_parallel_size = b.tensor_model_parallel_size = 2;
    a.normalization = b.normalization = TB_NORM_RMSNORM;
    a.swiglu = b.swiglu = 1;
    a.position_embedding_type = b.position_embedding_type = TB_POS_ROPE;
    a.num_query_groups = b.num_query_groups = 2;
    same_bits("cp2-tp2-llama", &a, &b);
}

// The unfused ("local") core through the table: its probabilities kept, and under selective
// recompute not kept (recomputed in backward), one rank and tp 2 with SP.
TB_TEST(local_attention_on_a_device_table_gives_the_cpu_bits) {
    for (int selective = 0; selective < 2; selective++)
        for (int tp = 1; tp <= 2; tp++) {
            tb_config a, b;
            small(&a), small(&b);
            a.attention_backend = b.attention_backend = TB_ATTENTION_LOCAL;
            if (selective) a.recompute_granularity = b.recompute_granularity = TB_RECOMPUTE_SELECTIVE;
            if (tp == 2) {
                a.world_size = b.world_size = 2;
                a.tensor_model_parallel_size = b.tensor_model_parallel_size = 2;
                a.sequence_parallel = b.sequence_parallel = 1;
            }
            char name[48];
            snprintf(name, sizeof name, "local tp%d%s", tp, selective ? " selective" : "");
            long calls = local_attention_calls, recomputed = local_attention_recomputed;
            same_bits(name, &a, &b);
            TB_CHECK(local_attention_calls - calls == (long)tp * 2 * STEPS * 2,
                     "%s: %ld forward calls through the table (ranks x 2 layers x %d steps x 2 microbatches)", name,
                     local_attention_calls - calls, STEPS);
            TB_CHECK((local_attention_recomputed - recomputed > 0) == selective,
                     "%s: %ld forwards without kept probabilities", name, local_attention_recomputed - recomputed);
        }
}

// The ring (cp_comm_type p2p): each step's K/V exchange one batch, the blocks, the merge and the
// gradients' way round through the table; cp 2 and cp 4 (every kind of block: the diagonal,
// an earlier rank's chunk pair, a later one's), the blocks counted (cp·layers·steps·micro ·cp).
TB_TEST(cp_ring_on_a_device_table_gives_the_cpu_bits) {
    static const int sizes[] = {2, 4};
    for (int i = 0; i < 2; i++) {
        const int cp = sizes[i];
        tb_config a, b;
        small(&a), small(&b);
        a.world_size = b.world_size = cp;
        a.context_parallel_size = b.context_parallel_size = cp;
        a.cp_comm_type = b.cp_comm_type = TB_CP_P2P;
        char name[32];
        snprintf(name, sizeof name, "cp%d-ring", cp);
        long before = ring_block_calls;
        same_bits(name, &a, &b);
        TB_CHECK(ring_block_calls - before == (long)cp * 2 * STEPS * 2 * cp,
                 "%s: %ld forward blocks through the table (cp x 2 layers x %d steps x 2 microbatches x cp steps)",
                 name, ring_block_calls - before, STEPS);
    }
}

// Pipeline parallelism: the activations and gradients sent between stages from the device
// buffers, the tied word embedding's gradient all-reduced over the embedding group, the loss
// from the last stage (both stages' weights compared). Then interleaved: two chunks per rank.
TB_TEST(pp2_and_interleaved_pp2_on_a_device_table_give_the_cpu_bits) {
    tb_config a, b;
    small(&a), small(&b);
    a.world_size = b.world_size = 2;
    a.pipeline_model_parallel_size = b.pipeline_model_parallel_size = 2;
    same_bits("pp2", &a, &b);
    small(&a), small(&b);
    a.world_size = b.world_size = 2;
    a.pipeline_model_parallel_size = b.pipeline_model_parallel_size = 2;
    a.virtual_pipeline_model_parallel_size = b.virtual_pipeline_model_parallel_size = 2;
    a.num_layers = b.num_layers = 4;
    a.global_batch_size = b.global_batch_size = 8;  // 4 microbatches: a steady state
    same_bits("pp2-vpp2", &a, &b);
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
// One bucket's two events on one rank (ready: `ready`, done: `done`), in log order: each step
// (STEPS of them) the rank thread records ready, the side thread waits for it and records
// done, the rank thread waits for done. 0 when so; the entries of each step in *steps.
static int bucket_events_in_order(const char *name, int rank, const char *what, int b, int ready, int done,
                                  const ev_entry *steps[STEPS][4]) {
    static const struct {
        int ev, op, side;
    } pattern[4] = {{0, EV_RECORD, 0}, {0, EV_WAIT, 1}, {1, EV_RECORD, 1}, {1, EV_WAIT, 0}};
    int n = 0;
    for (int i = 0; i < ev_logged; i++) {
        const ev_entry *e = &ev_log[i];
        if (e->rank != rank || (e->event != ready && e->event != done)) continue;
        const int k = n % 4, s = n / 4;
        if (s >= STEPS || (e->event == done) != pattern[k].ev || e->op != pattern[k].op || e->side != pattern[k].side) {
            TB_CHECK(0, "%s rank %d %s bucket %d: call %d is %s of its %s event on the %s thread (expected %s of %s "
                     "on the %s thread)", name, rank, what, b, n, e->op == EV_RECORD ? "a record" : "a wait",
                     e->event == done ? "done" : "ready", e->side ? "side" : "rank",
                     pattern[k].op == EV_RECORD ? "a record" : "a wait", pattern[k].ev ? "done" : "ready",
                     pattern[k].side ? "side" : "rank");
            return -1;
        }
        steps[s][k] = e;
        n++;
    }
    TB_CHECK(n == 4 * STEPS, "%s rank %d %s bucket %d: %d event calls, expected %d (4 a step)", name, rank, what, b, n,
             4 * STEPS);
    return n == 4 * STEPS ? 0 : -1;
}

// The overlap runs' events (the test comment at the top of the file).
static void overlap_events_in_order(const char *name, const run *r) {
    TB_CHECK(ev_logged < MAX_LOG, "%s: the event log is full (%d)", name, ev_logged);
    const int gathers = r->events[0][2] != NULL;
    for (int rank = 0; rank < MAX_RANKS; rank++) {
        const int nb = r->nbuckets[rank];
        TB_REQUIRE(nb > 2 && r->events[rank][0] && r->events[rank][1], "%s rank %d: %d buckets with events", name,
                   rank, nb);
        for (int b = 0; b < nb; b++) {
            const ev_entry *g[STEPS][4], *p[STEPS][4];
            if (bucket_events_in_order(name, rank, "reduction", b, r->events[rank][0][b], r->events[rank][1][b], g))
                continue;
            for (int s = 0; s < STEPS && b == nb - 1; s++)  // the first bucket ready: the buffer's end
                TB_CHECK(g[s][0]->backward < g[s][3]->backward,
                         "%s rank %d step %d: the first bucket's ready event was recorded after %ld backward GEMMs, "
                         "not before the backward's last (%ld by the optimizer's wait)", name, rank, s + 1,
                         g[s][0]->backward, g[s][3]->backward);
            if (!gathers ||
                bucket_events_in_order(name, rank, "gather", b, r->events[rank][2][b], r->events[rank][3][b], p))
                continue;
            for (int s = 0; s < STEPS; s++) {
                TB_CHECK(p[s][0]->adamw > g[s][3]->adamw, "%s rank %d step %d bucket %d: the gather's ready event "
                         "before the optimizer step (AdamW updates %ld, %ld)", name, rank, s + 1, b,
                         p[s][0]->adamw, g[s][3]->adamw);
                if (b == 0)  // the embedding's bucket: waited for before the next forward's embedding
                    TB_CHECK(p[s][3]->embedding == p[s][0]->embedding, "%s rank %d step %d: the embedding ran "
                             "before the wait for its bucket's gather", name, rank, s + 1);
            }
        }
    }
}

TB_TEST(dp2_overlap_on_a_device_table_gives_the_cpu_bits_with_events_in_order) {
    tb_config a, b;
    const long binds = side_binds, unbinds = side_unbinds, streams = streams_set;
    small(&a), small(&b);
    a.world_size = b.world_size = 2;
    // the same buckets in both runs (a layer is ~12.7k elements: several buckets): the overlap
    // is what differs. The bucket layout is not free to differ: it cuts the distributed
    // optimizer's shards, and the gradient norm is each rank's shard sum of squares rounded to
    // float and all-reduced, so another layout can move the norm by an ulp (the gradients
    // themselves keep their bits: test_overlap's bucket_layout_moves_only_the_norms_rounding).
    a.ddp_bucket_size = b.ddp_bucket_size = 3000;
    b.overlap_grad_reduce = 1;
    same_bits_then("dp2-overlap", &a, &b, overlap_events_in_order);
    TB_CHECK(side_binds - binds == 2 && side_unbinds - unbinds == 2 && streams_set > streams && events_live == 0,
             "each rank's communication thread bound once (%ld), unbound (%ld), set its stream (%ld); events left %ld",
             side_binds - binds, side_unbinds - unbinds, streams_set - streams, (long)events_live);
    small(&a), small(&b);
    a.world_size = b.world_size = 2;
    a.use_distributed_optimizer = b.use_distributed_optimizer = 1;
    a.ddp_bucket_size = b.ddp_bucket_size = 3000;
    b.overlap_grad_reduce = b.overlap_param_gather = 1;
    same_bits_then("dp2-distopt-overlap-param-gather", &a, &b, overlap_events_in_order);
    TB_CHECK(events_live == 0, "events left %ld", (long)events_live);
    // and --device cuda takes it (the config's refusal is lifted)
    small(&b);
    b.world_size = 2, b.device = TB_DEVICE_CUDA, b.overlap_grad_reduce = 1;
    b.use_distributed_optimizer = b.overlap_param_gather = 1;
    config_resolve(&b);
    tb_error err;
    TB_CHECK(config_validate(&b, &err) == 0, "device cuda with overlap: %s", err.msg);
}

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
        FILLED(flash_attention_cp_forward); FILLED(flash_attention_cp_backward); FILLED(cp_pack_kv);
        FILLED(cp_add_kv_grads); FILLED(cp_rank_major_to_positions); FILLED(cp_positions_to_rank_major);
        FILLED(embedding_forward); FILLED(embedding_backward); FILLED(add_positions);
        FILLED(ce_row_max); FILLED(ce_target_logit); FILLED(ce_exp_sum); FILLED(ce_normalize);
        FILLED(cross_entropy_backward); FILLED(adamw_update); FILLED(sum_squares_add); FILLED(sum_squares_take);
        FILLED(params_changed);
        FILLED(moe_router_forward); FILLED(moe_router_backward); FILLED(moe_aux_score_sums); FILLED(moe_permute);
        FILLED(moe_permute_backward); FILLED(moe_unpermute); FILLED(moe_unpermute_backward);
        FILLED(grouped_matmul_forward); FILLED(grouped_matmul_backward);
#undef FILLED
        // the phase timer: CUDA events on a device, the host clock (NULL) on the CPU
        TB_CHECK(be->host ? !be->phase_begin && !be->phase_end_ms : be->phase_begin && be->phase_end_ms,
                 "%s table: phase timer", be->name);
        // a second thread, streams and events: a device's, none on the CPU
        const int side = !!be->thread_context + !!be->bind_side_thread + !!be->set_stream + !!be->event_create +
                         !!be->event_destroy + !!be->event_record + !!be->event_wait;
        TB_CHECK(side == (be->host ? 0 : 7), "%s table: %d of the 7 stream and event entries", be->name, side);
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
    standin_init();
    standin.flash_attention_cp_forward = count_cp_forward;
    standin.flash_attention_block_forward = count_block_forward;
    standin.attention_forward = count_attention_forward;
    standin.thread_context = standin_thread_context;
    standin.bind_side_thread = standin_bind_side_thread;
    standin.set_stream = standin_set_stream;
    standin.event_create = standin_event_create;
    standin.event_destroy = standin_event_destroy;
    standin.event_record = standin_event_record;
    standin.event_wait = standin_event_wait;
    standin.matmul_backward = count_matmul_backward;
    standin.embedding_forward = count_embedding_forward;
    standin.adamw_update = count_adamw_update;
    standin.moe_router_forward = count_router;
    TB_RUN(unbound_threads_get_the_cpu_table);
    TB_RUN(every_entry_of_each_table_is_filled);
    TB_RUN(one_rank_on_a_device_table_gives_the_cpu_bits);
    TB_RUN(tp2_sequence_parallel_on_a_device_table_gives_the_cpu_bits);
    TB_RUN(cp2_all_gather_on_a_device_table_gives_the_cpu_bits);
    TB_RUN(cp_ring_on_a_device_table_gives_the_cpu_bits);
    TB_RUN(local_attention_on_a_device_table_gives_the_cpu_bits);
    TB_RUN(dp2_overlap_on_a_device_table_gives_the_cpu_bits_with_events_in_order);
    TB_RUN(pp2_and_interleaved_pp2_on_a_device_table_give_the_cpu_bits);
    TB_RUN(moe_on_a_device_table_gives_the_cpu_bits);
    TB_RUN(grad_scaler_backs_off_after_the_hysteresis_and_grows_after_the_window);
    TB_RUN(fp16_loss_scaling_is_exact_and_overflow_skips_the_step);
    return tb_test_summary();
}
