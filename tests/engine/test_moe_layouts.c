// MoE layouts against the single rank (the semantics on hand-made routing: test_moe.c):
// data, pipeline, expert, tensor (with sequence) and expert tensor parallelism, per-step
// losses and gradient norms; the tensors dumped under ep and etp; a shared expert, capacity
// and padding; Megatron's sigmoid scores with the sequence-level aux loss under dp and ep,
// and under tensor (sequence) parallelism; the expert grid as --print-rank-layout prints it.
#include <jansson.h>
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/kernels.h"
#include "config/config.h"
#include "core/safetensors.h"
#include "tb_run_dir.h"
#include "tb_shell.h"
#include "tb_test.h"
#include "moe_cases.h"
#include "trainers.h"
#include "training.h"
#include "transformer/moe/router.h"
#include "transformer/moe/token_dispatcher.h"

#define PRETRAIN TB_BIN_DIR "/pretrain_gpt"

// ---------------------------------------------------------------------------------------
// Layouts against the single rank: per-step losses and gradient norms (the norm sums every
// gradient of every rank once: a misplaced or missing expert reduction changes it)

#define LAYOUT_STEPS 4

typedef struct layout_job {
    const tb_config *cfg;
    double loss[LAYOUT_STEPS], norm[LAYOUT_STEPS];
    size_t expert_floats;  // rank 0's expert parameters
    double flops;          // rank 0's FLOPs per token (its chunks)
    size_t shard_floats;   // rank 0's optimizer shard (its chunks)
    size_t dense_floats, buffer_floats;  // rank 0's buffer: the dense range [0, experts_offset), the whole
    double lb[4];          // rank 0's last step's load-balancing loss per layer (its first chunk)
    atomic_int failed;
} layout_job;

static void layout_rank(tb_rank *rk, void *arg) {
    layout_job *j = arg;
    tb_trainer tr;
    if (rank_trainer(rk, j->cfg, &tr) != 0) {
        j->failed = 1;
        return;
    }
    for (int s = 1; s <= LAYOUT_STEPS; s++) {
        tb_step_result r = train_step(&tr, s);
        if (rk->rank == 0) j->loss[s - 1] = r.loss, j->norm[s - 1] = r.grad_norm;
    }
    if (rk->rank == 0 && tr.models[0].block.moe_stats.num_layers >= 4)
        for (int l = 0; l < 4; l++) j->lb[l] = tr.models[0].block.moe_stats.load_balancing_loss[l];
    if (rk->rank == 0)
        for (int c = 0; c < tr.nchunks; c++)
            j->expert_floats += tr.models[c].expert_parameters, j->flops += gpt_chunk_flops_per_token(&tr.models[c]),
            j->shard_floats += tr.opts[c].shard_numel, j->dense_floats += tr.models[c].experts_offset,
            j->buffer_floats += tr.models[c].padded_parameters;
    trainer_free(&tr);
}

static int train_layout(tb_config *cfg, layout_job *j) {
    memset(j, 0, sizeof *j);
    j->cfg = cfg;
    return run_world(cfg, layout_rank, j) == 0 && !j->failed ? 0 : -1;
}

// Data parallelism (each replica routes its own microbatches; the aux loss is per microbatch,
// as on one rank running them), the distributed optimizer, the pipeline, and expert
// parallelism with the all-to-all dispatcher: each ep rank holds E / ep experts and runs the
// tokens every rank routes to them; expert gradients sum every dp rank's tokens, averaged
// over dp × cp and reduced over expert-dp where ep < dp.
// Tensor and sequence parallelism (Megatron: MoE under tp runs sequence parallel): each tp
// rank routes its own shard of the sequence, the router replicated over tp (its gradient a
// partial sum reduced over tp, like a norm's) and the load-balancing loss counting tokens
// over the tp group (switch_load_balancing_loss_func's sequence_partition_group); at etp 1
// the experts are whole on every tp rank and their gradients reduced over expert-dp (which
// holds the tp ranks); at etp > 1 each expert is split (fc1 column-, fc2 row-parallel) and the
// all-to-all dispatcher all-gathers the tokens over etp after the all-to-all over ep and
// reduce-scatters the partial sums before the all-to-all back. Biases on: fc1's split over
// etp, fc2's added once (etp rank 0). The all-gather dispatcher (Megatron's
// MoEAllGatherTokenDispatcher): every rank of the ep x etp grid gathers every rank's tokens and
// routing, runs its experts on those routed to them, and the partial outputs are
// reduce-scattered back.
TB_TEST(moe_layouts_match_the_single_rank) {
    tb_config base;
    moe_config(&base);
    base.global_batch_size = 8, base.micro_batch_size = 1, base.lr = 3e-3, base.collective_timeout = 60;
    base.num_experts = 8, base.moe_token_dispatcher_type = TB_MOE_DISPATCHER_ALLTOALL;
    layout_job single, j;
    tb_config one = base;
    TB_REQUIRE(train_layout(&one, &single) == 0, "single rank");
    static const struct {
        const char *name;
        int world, ep, pp, distopt, tp, etp, allgather;
    } layouts[] = {{"dp 2", 2, 1, 1, 0, 1, 1, 0},
                   {"dp 2 + dist-opt", 2, 1, 1, 1, 1, 1, 0},
                   {"pp 2 x dp 2", 4, 1, 2, 0, 1, 1, 0},
                   {"ep 2", 2, 2, 1, 0, 1, 1, 0},
                   {"ep 4", 4, 4, 1, 0, 1, 1, 0},
                   {"ep 2 x expert-dp 2", 4, 2, 1, 0, 1, 1, 0},
                   {"ep 2 x pp 2", 4, 2, 2, 0, 1, 1, 0},
                   {"ep 8", 8, 8, 1, 0, 1, 1, 0},
                   {"tp 2 sp, etp 1", 2, 1, 1, 0, 2, 1, 0},
                   {"tp 2 sp, etp 2", 2, 1, 1, 0, 2, 2, 0},
                   {"tp 2 sp, etp 1 x ep 2", 4, 2, 1, 0, 2, 1, 0},
                   {"tp 2 sp, etp 2 x ep 2", 4, 2, 1, 0, 2, 2, 0},
                   {"tp 2 sp, etp 1 x ep 4", 4, 4, 1, 0, 2, 1, 0},
                   {"dp 2, etp 2", 2, 1, 1, 0, 1, 2, 0},
                   {"dp 4, etp 2 x ep 2", 4, 2, 1, 0, 1, 2, 0},
                   {"tp 2 sp x pp 2, etp 2", 4, 1, 2, 0, 2, 2, 0},
                   {"allgather: ep 2", 2, 2, 1, 0, 1, 1, 1},
                   {"allgather: ep 4", 4, 4, 1, 0, 1, 1, 1},
                   {"allgather: ep 2 x edp 2", 4, 2, 1, 0, 1, 1, 1},
                   {"allgather: dp 2, etp 2", 2, 1, 1, 0, 1, 2, 1},
                   {"allgather: tp 2 sp, etp 2 x ep 2", 4, 2, 1, 0, 2, 2, 1},
                   {"allgather: tp 2 sp, etp 1", 2, 1, 1, 0, 2, 1, 1},
                   // the distributed optimizer: the experts' state sharded over expert-dp (2: buckets of 5000)
                   {"ep 2 + dist-opt", 2, 2, 1, 1, 1, 1, 0},
                   {"ep 2 x edp 2 + dist-opt", 4, 2, 1, 1, 1, 1, 0},
                   {"ep 2 x edp 2 + dist-opt, buckets", 4, 2, 1, 2, 1, 1, 0},
                   {"tp 2 sp, etp 1 + dist-opt", 2, 1, 1, 1, 2, 1, 0},
                   {"allgather: dp 4, etp 2 x ep 2 + dist-opt", 4, 2, 1, 2, 1, 2, 1},
                   // --overlap-grad-reduce (3; 4: with the distributed optimizer and --overlap-param-gather,
                   // buckets of 5000): the experts' buckets reduced over expert-dp by the comm thread
                   {"ep 2 x edp 2 + overlap", 4, 2, 1, 3, 1, 1, 0},
                   {"ep 2 x edp 2 + overlap, dist-opt", 4, 2, 1, 4, 1, 1, 0},
                   {"tp 2 sp, etp 1 x ep 2 + overlap, dist-opt", 4, 2, 1, 4, 2, 1, 0},
                   // Megatron-FSDP (5: optim_grads, 6: optim_grads_params): each layer's dense tensors
                   // a unit sharded over dp, its experts a unit sharded over expert-dp
                   {"dp 2 + fsdp optim_grads", 2, 1, 1, 5, 1, 1, 0},
                   {"dp 2 + fsdp optim_grads_params", 2, 1, 1, 6, 1, 1, 0},
                   {"ep 2 + fsdp optim_grads_params", 2, 2, 1, 6, 1, 1, 0},
                   {"ep 2 x edp 2 + fsdp optim_grads", 4, 2, 1, 5, 1, 1, 0},
                   {"ep 2 x edp 2 + fsdp optim_grads_params", 4, 2, 1, 6, 1, 1, 0},
                   {"tp 2 sp, etp 1 x ep 2 + fsdp optim_grads_params", 4, 2, 1, 6, 2, 1, 0},
                   {"ep 2 x pp 2 + fsdp optim_grads_params", 4, 2, 2, 6, 1, 1, 0},
                   // (7: optim_grads_params with both overlaps: the experts' gathers and reduce-scatters
                   // over expert-dp on the communication thread, the next unit's prefetched)
                   {"ep 2 x edp 2 + fsdp optim_grads_params, overlap", 4, 2, 1, 7, 1, 1, 0}};
    for (size_t i = 0; i < sizeof layouts / sizeof *layouts; i++) {
        tb_config c = base;
        c.world_size = layouts[i].world, c.expert_model_parallel_size = layouts[i].ep;
        const int distopt = layouts[i].distopt;
        c.pipeline_model_parallel_size = layouts[i].pp;
        c.use_distributed_optimizer = distopt == 1 || distopt == 2 || distopt >= 4;
        c.overlap_grad_reduce = c.overlap_param_gather = distopt == 4 || distopt == 7;
        c.overlap_grad_reduce |= distopt == 3;
        if (distopt >= 5)
            c.use_megatron_fsdp = 1,
            c.data_parallel_sharding_strategy = distopt == 5 ? TB_FSDP_OPTIM_GRADS : TB_FSDP_OPTIM_GRADS_PARAMS;
        if (distopt >= 2 && distopt <= 4) c.ddp_bucket_size = 5000;
        c.tensor_model_parallel_size = layouts[i].tp, c.sequence_parallel = layouts[i].tp > 1;
        c.expert_tensor_parallel_size = layouts[i].etp;
        if (layouts[i].allgather) c.moe_token_dispatcher_type = TB_MOE_DISPATCHER_ALLGATHER;
        if (train_layout(&c, &j) != 0) {
            TB_CHECK(0, "%s: training failed", layouts[i].name);
            continue;
        }
        double worst = 0;
        for (int s = 0; s < LAYOUT_STEPS; s++) {
            const double rl = fabs(j.loss[s] - single.loss[s]) / fabs(single.loss[s]);
            const double rn = fabs(j.norm[s] - single.norm[s]) / fabs(single.norm[s]);
            worst = fmax(worst, fmax(rl, rn));
            TB_CHECK(rl <= 1e-5 && rn <= 1e-5, "%s: step %d loss %.9g grad norm %.9g vs single rank %.9g %.9g",
                     layouts[i].name, s + 1, j.loss[s], j.norm[s], single.loss[s], single.norm[s]);
        }
        // rank 0 holds its ep share of the experts (of its stage's MoE layers under pp), each
        // split over etp but for its fc2 bias (C floats per expert of the 2 MoE layers)
        const size_t ep = (size_t)layouts[i].ep, etp = (size_t)layouts[i].etp, pp = (size_t)layouts[i].pp;
        const size_t fc2_bias = 2 * (size_t)base.num_experts * (size_t)base.hidden_size;
        const size_t want = (single.expert_floats - fc2_bias) / ep / etp / pp + fc2_bias / ep / pp;
        TB_CHECK(j.expert_floats == want, "%s: rank 0 holds %zu expert floats, want %zu", layouts[i].name,
                 j.expert_floats, want);
        // the distributed optimizer's shard: the dense range's 1/dp, the experts' 1/expert-dp
        if (c.use_distributed_optimizer) {
            const size_t dp = (size_t)(layouts[i].world / layouts[i].tp / layouts[i].pp);
            const size_t edp = (size_t)layouts[i].world / etp / ep / pp;
            const size_t shard = j.dense_floats / dp + (j.buffer_floats - j.dense_floats) / edp;
            TB_CHECK(j.shard_floats == shard, "%s: rank 0's optimizer shard %zu floats, want %zu (dp %zu, edp %zu)",
                     layouts[i].name, j.shard_floats, shard, dp, edp);
        }
        // without pp, tp and etp a rank computes, per token, what the single rank does: its
        // experts run the tokens of all ep ranks
        if (layouts[i].pp == 1 && layouts[i].tp == 1 && layouts[i].etp == 1)
            TB_CHECK(j.flops == single.flops, "%s: rank 0's FLOPs per token %.17g, single rank %.17g", layouts[i].name,
                     j.flops, single.flops);
        printf("    %-40s loss and grad norm within %.1e of the single rank; rank 0: %zu of %zu expert floats\n",
               layouts[i].name, worst, j.expert_floats, single.expert_floats);
    }
}

// base at world ranks of dp (ep 1), then of ep `ep`, against the single rank: per-step losses
// and gradient norms within 1e-5.
static void dp_and_ep_match_the_single_rank(const tb_config *base, int world, int ep) {
    layout_job single, j;
    tb_config one = *base;
    TB_REQUIRE(train_layout(&one, &single) == 0, "single rank");
    const int eps[2] = {1, ep};
    for (int i = 0; i < 2; i++) {
        tb_config c = *base;
        c.world_size = world, c.expert_model_parallel_size = eps[i];
        TB_REQUIRE(train_layout(&c, &j) == 0, "dp %d, ep %d", world, eps[i]);
        for (int s = 0; s < LAYOUT_STEPS; s++)
            TB_CHECK(fabs(j.loss[s] - single.loss[s]) <= 1e-5 * fabs(single.loss[s]) &&
                         fabs(j.norm[s] - single.norm[s]) <= 1e-5 * fabs(single.norm[s]),
                     "dp %d, ep %d: step %d loss %.9g grad norm %.9g vs single rank %.9g %.9g", world, eps[i], s + 1,
                     j.loss[s], j.norm[s], single.loss[s], single.norm[s]);
    }
}

// With a capacity each rank drops over its own microbatch's capacity, as the single rank
// does microbatch by microbatch: data and expert parallelism keep the same drops. A shared
// expert is a dense module: every ep rank holds it, its gradients reduced over dp.
TB_TEST(moe_with_capacity_and_a_shared_expert_under_dp_and_ep_matches_the_single_rank) {
    tb_config base;
    moe_config(&base);
    base.global_batch_size = 4, base.micro_batch_size = 1, base.lr = 3e-3, base.collective_timeout = 60;
    base.moe_token_dispatcher_type = TB_MOE_DISPATCHER_ALLTOALL, base.moe_expert_capacity_factor = 1.0;
    base.moe_shared_expert_intermediate_size = 16;
    dp_and_ep_match_the_single_rank(&base, 4, 4);
    // and tokens were dropped (top-2 of 4 at factor 1: an expert takes 8 of a microbatch's 32 choices)
    moe_run r;
    tb_config c = base;
    TB_REQUIRE(train_moe(&c, &r) == 0, "train");
    TB_CHECK(r.dropped[0] > 0 && r.dropped[0] + r.tokens[0][0] + r.tokens[0][1] + r.tokens[0][2] + r.tokens[0][3] == 4 * 32,
             "layer 0: %lld dropped of 128", (long long)r.dropped[0]);
    for (int e = 0; e < 4; e++) TB_CHECK(r.tokens[0][e] <= 4 * 8, "expert %d took %lld > capacity", e, (long long)r.tokens[0][e]);
}

// --dump-tensors under expert (and expert tensor) parallelism: every expert of each layer
// gathered over ep (and etp) under its global name, so the file holds the single rank's
// tensors: the same names and shapes, in the same order, the values within the layouts'
// tolerance (the forward's outputs, gradients and parameters after the step).
static int dump_names(tb_safetensors *st, const char *dir) {
    char path[1024];
    snprintf(path, sizeof path, "%s/tensors/step-0000002.rank-00000.safetensors", dir);
    tb_error err;
    return tb_safetensors_open(st, path, &err);
}

TB_TEST(dump_tensors_under_ep_and_etp_holds_the_single_ranks_tensors) {
    static const char *const runs[] = {"single", "ep2", "etp2_ep2"};
    static const char *const flags[] = {"", "--world-size 2 --expert-model-parallel-size 2",
                                        "--world-size 4 --expert-model-parallel-size 2 --expert-tensor-parallel-size 2 "
                                        "--use-distributed-optimizer"};
    char root[512], dir[3][768];
    tb_tmp_path(root, sizeof root, "moe_dump");
    tb_output sh = {0};
    for (int r = 0; r < 3; r++) {
        snprintf(dir[r], sizeof dir[r], "%s/%s", root, runs[r]);
        int status = tb_run(&sh, NULL,
                            "rm -rf '%s' && '%s' --num-layers 2 --hidden-size 32 --num-attention-heads 2 "
                            "--seq-length 16 --vocab-size 64 --micro-batch-size 1 --global-batch-size 4 --train-iters 2 "
                            "--num-experts 4 --moe-router-topk 2 --moe-ffn-hidden-size 24 --moe-aux-loss-coeff 0.01 "
                            "--moe-token-dispatcher-type alltoall --num-threads 1 --dump-tensors 2 %s --run-dir '%s'",
                            dir[r], PRETRAIN, flags[r], dir[r]);
        TB_REQUIRE(status == 0, "%s: exit %d: %s", runs[r], status, sh.err);
    }
    tb_safetensors one;
    TB_REQUIRE(dump_names(&one, dir[0]) == 0, "the single rank's dump");
    for (int r = 1; r < 3; r++) {
        tb_safetensors st;
        TB_REQUIRE(dump_names(&st, dir[r]) == 0, "%s's dump", runs[r]);
        TB_CHECK(st.ntensors == one.ntensors, "%s: %d tensors, the single rank %d", runs[r], st.ntensors,
                 one.ntensors);
        int experts = 0, worst = -1;
        double worst_rel = 0;
        for (int i = 0; i < one.ntensors; i++) {
            const tb_st_tensor *a = &one.tensors[i], *b = tb_safetensors_find(&st, a->name);
            if (!b || b->ndim != a->ndim || b->shape[0] != a->shape[0] || b->shape[1] != a->shape[1]) {
                TB_CHECK(0, "%s: %s missing or of another shape", runs[r], a->name);
                continue;
            }
            // the same place in the file (tensors in data order: the order they were kept)
            TB_CHECK(i < st.ntensors && !strcmp(st.tensors[i].name, a->name), "%s: tensor %d is %s, the single rank's %s",
                     runs[r], i, i < st.ntensors ? st.tensors[i].name : "-", a->name);
            experts += strstr(a->name, ".mlp.experts.") != NULL;
            // values: the forward's, every gradient and moment, and the MoE parameters before and
            // after the step (a dense parameter whose gradient is rounding noise, the key bias's,
            // moves by Adam's normalisation of that noise: not a property of the layouts, and
            // tracebook bisect bounds it by the update, experiments/inspect/bisect.c)
            if ((!strncmp(a->name, "param/", 6) || !strncmp(a->name, "param.before/", 13)) && !strstr(a->name, ".mlp."))
                continue;
            const int64_t n = tb_st_tensor_numel(a);
            float *x = malloc((size_t)n * sizeof *x), *y = malloc((size_t)n * sizeof *y);
            tb_error err;
            TB_REQUIRE(tb_safetensors_read_f32(&one, a, x, &err) == 0 && tb_safetensors_read_f32(&st, b, y, &err) == 0,
                       "read %s", a->name);
            double num = 0, den = 0;
            for (int64_t k = 0; k < n; k++) num += (double)(x[k] - y[k]) * (x[k] - y[k]), den += (double)x[k] * x[k];
            const double rel = den > 0 ? sqrt(num / den) : sqrt(num);
            if (rel > worst_rel) worst_rel = rel, worst = i;
            free(x);
            free(y);
        }
        TB_CHECK(worst_rel <= 1e-5, "%s: %s differs from the single rank's by %.2e (relative L2)", runs[r],
                 worst >= 0 ? one.tensors[worst].name : "", worst_rel);
        // 2 MoE layers x 4 experts x 4 tensors, as gradients, parameters before and after the
        // step, and both AdamW moments
        TB_CHECK(experts == 2 * 4 * 4 * 5, "%s: %d expert tensors", runs[r], experts);
        printf("    %-10s %d tensors (%d of experts) as the single rank's, within %.1e\n", runs[r], st.ntensors, experts,
               worst_rel);
        tb_safetensors_close(&st);
    }
    tb_safetensors_close(&one);
    tb_output_free(&sh);
}

// The shared expert under tensor parallelism is the dense MLP's pair (Megatron's
// SharedExpertMLP): the tokens gathered over the sequence-parallel region, fc1 column- and fc2
// row-parallel (its bias a partial sum reduced over tp), beside the routed experts.
TB_TEST(a_shared_expert_under_tensor_parallelism_matches_the_single_rank) {
    tb_config base;
    moe_config(&base);
    base.global_batch_size = 4, base.micro_batch_size = 1, base.lr = 3e-3, base.collective_timeout = 60;
    base.moe_token_dispatcher_type = TB_MOE_DISPATCHER_ALLTOALL, base.moe_shared_expert_intermediate_size = 16;
    layout_job single, j;
    tb_config one = base;
    TB_REQUIRE(train_layout(&one, &single) == 0, "single rank");
    static const struct {
        const char *name;
        int world, tp, etp, ep;
    } layouts[] = {{"tp 2 sp, etp 2", 2, 2, 2, 1}, {"tp 2 sp, etp 1 x ep 2", 4, 2, 1, 2}};
    for (int i = 0; i < 2; i++) {
        tb_config c = base;
        c.world_size = layouts[i].world, c.tensor_model_parallel_size = layouts[i].tp, c.sequence_parallel = 1;
        c.expert_tensor_parallel_size = layouts[i].etp, c.expert_model_parallel_size = layouts[i].ep;
        TB_REQUIRE(train_layout(&c, &j) == 0, "%s", layouts[i].name);
        for (int s = 0; s < LAYOUT_STEPS; s++)
            TB_CHECK(fabs(j.loss[s] - single.loss[s]) <= 1e-5 * fabs(single.loss[s]) &&
                         fabs(j.norm[s] - single.norm[s]) <= 1e-5 * fabs(single.norm[s]),
                     "%s: step %d loss %.9g grad norm %.9g vs single rank %.9g %.9g", layouts[i].name, s + 1, j.loss[s],
                     j.norm[s], single.loss[s], single.norm[s]);
    }
}

// --moe-pad-expert-input-to-capacity (Megatron's): each expert's input padded with zero rows
// to its capacity; the padding's outputs are read by no token and its gradients are zero, so
// training is the unpadded run's (within rounding: the experts' GEMMs sum over more rows) and
// the statistics count the routed tokens only; under ep the padded rows travel in the A2A.
TB_TEST(padding_expert_inputs_to_capacity_trains_as_unpadded) {
    const double factors[2] = {1.0, 2.0};
    for (int f = 0; f < 2; f++) {
        tb_config c;
        moe_config(&c);
        c.moe_token_dispatcher_type = TB_MOE_DISPATCHER_ALLTOALL, c.moe_expert_capacity_factor = factors[f];
        moe_run plain, padded;
        TB_REQUIRE(train_moe(&c, &plain) == 0, "train at capacity factor %g", factors[f]);
        c.moe_pad_expert_input_to_capacity = 1;
        TB_REQUIRE(train_moe(&c, &padded) == 0, "train padded at capacity factor %g", factors[f]);
        for (int s = 0; s < 3; s++)
            TB_CHECK(fabs(plain.loss[s] - padded.loss[s]) <= 1e-6 * fabs(plain.loss[s]),
                     "factor %g, step %d: loss %.9g, padded %.9g", factors[f], s + 1, plain.loss[s], padded.loss[s]);
        TB_CHECK(!memcmp(plain.tokens, padded.tokens, sizeof plain.tokens) &&
                     !memcmp(plain.dropped, padded.dropped, sizeof plain.dropped),
                 "factor %g: the padding counted in the statistics", factors[f]);
        // and the experts ran the padded rows: capacity 16 (factor 1, with drops) or 32 rows per
        // expert of a microbatch's 64 choices
        TB_CHECK(padded.peak_activations > plain.peak_activations, "factor %g: peak activations %zu padded, %zu not",
                 factors[f], padded.peak_activations, plain.peak_activations);
    }
    // ep 4 x dp 4 padded against the single rank unpadded
    tb_config base;
    moe_config(&base);
    base.global_batch_size = 4, base.micro_batch_size = 1, base.lr = 3e-3, base.collective_timeout = 60;
    base.moe_token_dispatcher_type = TB_MOE_DISPATCHER_ALLTOALL, base.moe_expert_capacity_factor = 1.0;
    layout_job single, j;
    tb_config one = base, c = base;
    TB_REQUIRE(train_layout(&one, &single) == 0, "single rank");
    c.world_size = 4, c.expert_model_parallel_size = 4, c.moe_pad_expert_input_to_capacity = 1;
    TB_REQUIRE(train_layout(&c, &j) == 0, "ep 4, padded");
    for (int s = 0; s < LAYOUT_STEPS; s++)
        TB_CHECK(fabs(j.loss[s] - single.loss[s]) <= 1e-5 * fabs(single.loss[s]) &&
                     fabs(j.norm[s] - single.norm[s]) <= 1e-5 * fabs(single.norm[s]),
                 "ep 4 padded: step %d loss %.9g grad norm %.9g vs single rank %.9g %.9g", s + 1, j.loss[s], j.norm[s],
                 single.loss[s], single.norm[s]);
}

// A small MoE model of sigmoid scores, its aux loss trained on, for the layouts.
static void sigmoid_config(tb_config *base) {
    moe_config(base);
    base->global_batch_size = 4, base->micro_batch_size = 1, base->lr = 3e-3, base->collective_timeout = 60;
    base->moe_token_dispatcher_type = TB_MOE_DISPATCHER_ALLTOALL, base->moe_aux_loss_coeff = 0.1;
    base->moe_router_score_function = TB_MOE_SCORE_SIGMOID;
}

// Sigmoid scores with the sequence-level aux loss trained on: dp 2 and ep 2 as the single rank
// (each rank's microbatches are whole sequences), and a loss reported.
TB_TEST(sigmoid_router_with_seq_aux_loss_under_dp_and_ep_matches_the_single_rank) {
    tb_config base;
    sigmoid_config(&base);
    base.moe_router_load_balancing_type = TB_MOE_LB_SEQ_AUX_LOSS;
    dp_and_ep_match_the_single_rank(&base, 2, 2);
    // the loss is trained on: the coefficient changes step 3; and it is reported
    moe_run with, without;
    tb_config c = base;
    TB_REQUIRE(train_moe(&c, &with) == 0, "train");
    c.moe_aux_loss_coeff = 0;
    TB_REQUIRE(train_moe(&c, &without) == 0, "train without the coefficient");
    TB_CHECK(with.loss[2] != without.loss[2] && with.lb[0] > 0, "seq_aux_loss trained on (%.9g vs %.9g), reported %g",
             with.loss[2], without.loss[2], with.lb[0]);
}

// Sigmoid scores under tensor (sequence) parallelism: each tp rank routes its shard and the
// load-balancing loss sums the sigmoid scores normalised over every expert across the tp group
// (sequence_parallel_aux_loss, as router_aux_loss on one rank): the losses, gradient norms and
// the reported aux loss of each MoE layer are the single rank's, at etp 1 and etp 2.
TB_TEST(sigmoid_router_under_tensor_parallelism_matches_the_single_rank) {
    tb_config base;
    sigmoid_config(&base);
    layout_job single, j;
    tb_config one = base;
    TB_REQUIRE(train_layout(&one, &single) == 0, "single rank");
    TB_CHECK(single.lb[0] > 0 && single.lb[2] > 0, "the single rank reports aux losses %g %g", single.lb[0],
             single.lb[2]);
    const int etps[2] = {1, 2};
    for (int i = 0; i < 2; i++) {
        tb_config c = base;
        c.world_size = 2, c.tensor_model_parallel_size = 2, c.sequence_parallel = 1;
        c.expert_tensor_parallel_size = etps[i];
        TB_REQUIRE(train_layout(&c, &j) == 0, "tp 2 sp, etp %d", etps[i]);
        for (int s = 0; s < LAYOUT_STEPS; s++)
            TB_CHECK(fabs(j.loss[s] - single.loss[s]) <= 1e-5 * fabs(single.loss[s]) &&
                         fabs(j.norm[s] - single.norm[s]) <= 1e-5 * fabs(single.norm[s]),
                     "tp 2 sp, etp %d: step %d loss %.9g grad norm %.9g vs single rank %.9g %.9g", etps[i], s + 1,
                     j.loss[s], j.norm[s], single.loss[s], single.norm[s]);
        for (int l = 0; l < 4; l += 2)
            TB_CHECK(fabs(j.lb[l] - single.lb[l]) <= 1e-5 * fabs(single.lb[l]),
                     "tp 2 sp, etp %d: layer %d aux loss %.9g, the single rank %.9g", etps[i], l, j.lb[l],
                     single.lb[l]);
    }
}

// The expert grid beside the dense one, as --print-rank-layout shows it (world 4, ep 2:
// expert-dp 2).
TB_TEST(print_rank_layout_shows_the_expert_grid_and_its_groups) {
    tb_output sh = {0};
    int status = tb_run(&sh, NULL,
                        "'%s' --print-rank-layout --world-size 4 --num-experts 8 --expert-model-parallel-size 2 "
                        "--moe-token-dispatcher-type alltoall",
                        PRETRAIN);
    TB_REQUIRE(status == 0, "exit %d: %s", status, sh.err);
    static const char *const want[] = {
        "experts: world 4 = etp 1 x ep 2 x expert-dp 2 x pp 1 (order etp-ep-edp-pp)\n",
        "rank 1 (tp0 cp0 dp1 pp0) experts (etp0 ep1 edp0 pp0)\n",
        "rank 2 (tp0 cp0 dp2 pp0) experts (etp0 ep0 edp1 pp0)\n",
        "  world     [0, 1, 2, 3]\n  pp_grad   [1]\n  ep        [0, 1]\n  etp       [1]\n  expert_dp [1, 3]\n",
        "  ep        [2, 3]\n  etp       [2]\n  expert_dp [0, 2]\n",
    };
    for (size_t i = 0; i < sizeof want / sizeof *want; i++)
        TB_CHECK(strstr(sh.out, want[i]), "no \"%s\" in:\n%s", want[i], sh.out);
    tb_output_free(&sh);
}

int main(void) {
    cpu_set_num_threads(2);
    TB_RUN(moe_layouts_match_the_single_rank);
    TB_RUN(moe_with_capacity_and_a_shared_expert_under_dp_and_ep_matches_the_single_rank);
    TB_RUN(dump_tensors_under_ep_and_etp_holds_the_single_ranks_tensors);
    TB_RUN(a_shared_expert_under_tensor_parallelism_matches_the_single_rank);
    TB_RUN(padding_expert_inputs_to_capacity_trains_as_unpadded);
    TB_RUN(sigmoid_router_with_seq_aux_loss_under_dp_and_ep_matches_the_single_rank);
    TB_RUN(sigmoid_router_under_tensor_parallelism_matches_the_single_rank);
    TB_RUN(print_rank_layout_shows_the_expert_grid_and_its_groups);
    return tb_test_summary();
}
