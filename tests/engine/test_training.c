// Training-loop properties: a tiny model overfits one batch; runs are bitwise
// deterministic; recompute changes memory but not one bit of the losses or gradients;
// gradient accumulation matches the one-microbatch step; AdamW, clipping and the LR
// schedule do what Megatron and torch.optim.AdamW do.
#include <math.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "backend/cpu/kernels.h"
#include "config/config.h"
#include "optimizer/optimizer.h"
#include "trainers.h"
#include "tb_test.h"
#include "training.h"

static void tiny_config(tb_config *cfg) {
    config_defaults(cfg);
    cfg->num_layers = 4, cfg->hidden_size = 32, cfg->num_attention_heads = 4, cfg->seq_length = 32;
    cfg->micro_batch_size = 2, cfg->vocab_size = 64, cfg->train_iters = 4, cfg->lr = 1e-3;
    cfg->num_threads = 2;
}

// A trained run's observable results.
typedef struct run {
    double loss[8];
    float *grads, *params;  // after the last step
    size_t n;
    size_t activation_peak;
} run;

static int train(const tb_config *cfg_in, run *out) {
    static tb_config cfg;  // the trainer keeps a pointer
    memset(out, 0, sizeof *out);
    tb_single_rank rk;
    tb_trainer tr;
    if (single_rank_trainer(&cfg, cfg_in, &rk, &tr) != 0) return -1;
    for (int s = 1; s <= cfg.train_iters; s++) out->loss[s - 1] = train_step(&tr, s).loss;
    out->n = tr.models[0].num_parameters;
    out->grads = malloc(out->n * sizeof(float));
    out->params = malloc(out->n * sizeof(float));
    memcpy(out->grads, tr.models[0].grad_memory, out->n * sizeof(float));
    memcpy(out->params, tr.models[0].param_memory, out->n * sizeof(float));
    out->activation_peak = rk.mem.stats.peak[TB_MEM_ACTIVATIONS];
    trainer_free(&tr);
    return rk.mem.stats.total_current == 0 ? 0 : -2;
}

static void run_free(run *r) {
    free(r->grads);
    free(r->params);
}

TB_TEST(tiny_model_overfits_one_batch_below_0_05) {
    // Loss on one fixed batch must fall from ~ln(64) = 4.16 to below 0.05 in 300 AdamW steps.
    tb_config cfg;
    tiny_config(&cfg);
    cfg.num_layers = 2;
    config_resolve(&cfg);
    tb_allocator mem;
    tb_allocator_init(&mem, 0, NULL, NULL);
    gpt_model m;
    gpt_model_init(&m, &cfg, &mem, NULL);
    tb_adamw opt;
    cfg.weight_decay = 0;
    adamw_init(&opt, &cfg, m.padded_parameters, 0, 1, NULL, 0, &mem);
    int32_t inputs[64], targets[64];
    for (int i = 0; i < 64; i++) inputs[i] = (i * 37 + 11) % 64, targets[i] = (i * 13 + 5) % 64;
    float first = 0, loss = 0;
    for (int step = 1; step <= 300; step++) {
        gpt_zero_grad(&m);
        loss = gpt_forward(&m, inputs, targets);
        if (step == 1) first = loss;
        gpt_backward(&m, 1.0f);
        adamw_step(&opt, m.params, m.nparams, m.param_memory, m.grad_memory, 1.0f, 3e-3f);
    }
    printf("    loss %.4f -> %.5f\n", first, loss);
    TB_CHECK(first > 3.5f, "initial loss %.4f should be near ln(64)", first);
    TB_CHECK(loss < 0.05f, "loss after 300 steps is %.5f, not below 0.05", loss);
    adamw_free(&opt);
    gpt_model_free(&m);
}

TB_TEST(same_seed_and_config_give_bitwise_identical_runs) {
    tb_config cfg;
    tiny_config(&cfg);
    run a, b, c;
    TB_REQUIRE(train(&cfg, &a) == 0, "run a");
    TB_REQUIRE(train(&cfg, &b) == 0, "run b");
    TB_CHECK(memcmp(a.loss, b.loss, sizeof a.loss) == 0, "losses differ: %.9g vs %.9g", a.loss[3], b.loss[3]);
    TB_CHECK(memcmp(a.params, b.params, a.n * sizeof(float)) == 0, "final weights differ");
    cfg.seed = 99;  // the comparison can fail: another seed gives another run
    TB_REQUIRE(train(&cfg, &c) == 0, "run c");
    TB_CHECK(a.loss[0] != c.loss[0], "a different seed gave the same loss");
    run_free(&a), run_free(&b), run_free(&c);
}

TB_TEST(result_does_not_depend_on_thread_count) {
    tb_config cfg;
    tiny_config(&cfg);
    run a, b;
    TB_REQUIRE(train(&cfg, &a) == 0, "2 threads");
    cfg.num_threads = 1;
    cpu_set_num_threads(1);
    TB_REQUIRE(train(&cfg, &b) == 0, "1 thread");
    cpu_set_num_threads(2);
    TB_CHECK(memcmp(a.loss, b.loss, sizeof a.loss) == 0, "losses differ between 1 and 2 threads");
    TB_CHECK(memcmp(a.params, b.params, a.n * sizeof(float)) == 0, "weights differ between 1 and 2 threads");
    run_free(&a), run_free(&b);
}

static void recompute_case(int granularity, int method, int n, run *base, size_t *peak) {
    tb_config cfg;
    tiny_config(&cfg);
    cfg.attention_backend = TB_ATTENTION_LOCAL;  // as the baseline (below)
    cfg.recompute_granularity = granularity, cfg.recompute_method = method, cfg.recompute_num_layers = n;
    run r;
    TB_REQUIRE(train(&cfg, &r) == 0, "recompute run %d/%d/%d", granularity, method, n);
    const char *what = config_choice_name("recompute_granularity", granularity);
    TB_CHECK(memcmp(base->loss, r.loss, sizeof r.loss) == 0, "%s %d/%d: losses differ", what, method, n);
    TB_CHECK(memcmp(base->grads, r.grads, r.n * sizeof(float)) == 0, "%s %d/%d: gradients differ", what, method, n);
    TB_CHECK(memcmp(base->params, r.params, r.n * sizeof(float)) == 0, "%s %d/%d: weights differ", what, method, n);
    *peak = r.activation_peak;
    run_free(&r);
}

TB_TEST(recompute_keeps_losses_and_gradients_bitwise_and_lowers_activation_memory) {
    tb_config cfg;
    tiny_config(&cfg);
    // the local core: selective recompute drops the T x T probabilities it saves (the blocked
    // core that auto picks saves none, so selective has nothing to drop there)
    cfg.attention_backend = TB_ATTENTION_LOCAL;
    run base;
    TB_REQUIRE(train(&cfg, &base) == 0, "baseline");
    size_t selective, uniform1, uniform2, block1, block4;
    recompute_case(TB_RECOMPUTE_SELECTIVE, TB_RECOMPUTE_METHOD_NONE, 0, &base, &selective);
    recompute_case(TB_RECOMPUTE_FULL, TB_RECOMPUTE_UNIFORM, 1, &base, &uniform1);
    recompute_case(TB_RECOMPUTE_FULL, TB_RECOMPUTE_UNIFORM, 2, &base, &uniform2);
    recompute_case(TB_RECOMPUTE_FULL, TB_RECOMPUTE_BLOCK, 1, &base, &block1);
    recompute_case(TB_RECOMPUTE_FULL, TB_RECOMPUTE_BLOCK, 4, &base, &block4);
    printf("    activation peak bytes: none %zu, selective %zu, uniform/1 %zu, uniform/2 %zu, block/1 %zu, "
           "block/4 %zu\n", base.activation_peak, selective, uniform1, uniform2, block1, block4);
    TB_CHECK(selective < base.activation_peak, "selective does not lower the activation peak");
    TB_CHECK(uniform1 < selective, "full uniform/1 should keep less than selective");
    TB_CHECK(uniform1 < uniform2 && uniform2 < base.activation_peak, "uniform/1 < uniform/2 < none");
    TB_CHECK(block4 < block1 && block1 < base.activation_peak, "block/4 < block/1 < none");
    run_free(&base);
}

TB_TEST(gradient_accumulation_matches_one_large_microbatch) {
    // global batch 4: micro 4 × 1 microbatch vs micro 2 × 2 microbatches vs micro 1 × 4
    tb_config cfg;
    tiny_config(&cfg);
    cfg.train_iters = 3, cfg.global_batch_size = 4;
    run r[3];
    int micro[3] = {4, 2, 1};
    for (int i = 0; i < 3; i++) {
        cfg.micro_batch_size = micro[i];
        TB_REQUIRE(train(&cfg, &r[i]) == 0, "micro %d", micro[i]);
    }
    for (int i = 1; i < 3; i++) {
        for (int s = 0; s < 3; s++)
            TB_CHECK(fabs(r[i].loss[s] - r[0].loss[s]) <= 1e-6 * fabs(r[0].loss[s]),
                     "step %d loss with micro %d: %.9g vs %.9g", s + 1, micro[i], r[i].loss[s], r[0].loss[s]);
        double worst = 0;
        for (size_t j = 0; j < r[0].n; j++) {
            double d = fabs(r[i].params[j] - r[0].params[j]);
            worst = d > worst ? d : worst;
        }
        TB_CHECK(worst < 1e-5, "weights after 3 steps differ by %.3g with micro %d", worst, micro[i]);
    }
    for (int i = 0; i < 3; i++) run_free(&r[i]);
}

TB_TEST(adamw_decays_matrices_but_not_norms_or_biases) {
    tb_config cfg;
    tiny_config(&cfg);
    cfg.weight_decay = 0.1;
    config_resolve(&cfg);
    tb_allocator mem;
    tb_allocator_init(&mem, 0, NULL, NULL);
    gpt_model m;
    gpt_model_init(&m, &cfg, &mem, NULL);
    tb_adamw opt;
    adamw_init(&opt, &cfg, m.padded_parameters, 0, 1, NULL, 0, &mem);
    float *before = malloc(m.num_parameters * sizeof(float));
    memcpy(before, m.param_memory, m.num_parameters * sizeof(float));
    gpt_zero_grad(&m);  // zero gradients: only the decay moves a weight
    adamw_step(&opt, m.params, m.nparams, m.param_memory, m.grad_memory, 1.0f, 0.5f);
    for (int i = 0; i < m.nparams; i++) {
        const gpt_param *p = &m.params[i];
        float want = p->decay ? 1.0f - 0.5f * 0.1f : 1.0f;
        size_t j = p->numel / 2;
        float got = m.param_memory[p->offset + j], was = before[p->offset + j];
        TB_CHECK(got == was * want, "%s: %g -> %g, expected factor %g", p->name, was, got, want);
        int is_norm_or_bias = strstr(p->name, "ln_") || strstr(p->name, ".bias");
        TB_CHECK(p->decay == !is_norm_or_bias, "%s: decay flag %d", p->name, p->decay);
    }
    // one step with gradient g from zero state moves each weight by lr·g/(|g|+eps) ≈ lr·sign(g)
    memcpy(m.param_memory, before, m.num_parameters * sizeof(float));
    adamw_free(&opt);
    cfg.weight_decay = 0;
    adamw_init(&opt, &cfg, m.padded_parameters, 0, 1, NULL, 0, &mem);
    const gpt_param *w = gpt_find_param(&m, "h.0.attn.c_attn.weight");
    m.grad_memory[w->offset] = 0.25f;
    m.grad_memory[w->offset + 1] = -4.0f;
    adamw_step(&opt, m.params, m.nparams, m.param_memory, m.grad_memory, 1.0f, 0.01f);
    TB_CHECK(fabsf(m.param_memory[w->offset] - (before[w->offset] - 0.01f)) < 1e-6f, "first Adam step +g");
    TB_CHECK(fabsf(m.param_memory[w->offset + 1] - (before[w->offset + 1] + 0.01f)) < 1e-6f, "first Adam step -g");
    free(before);
    adamw_free(&opt);
    gpt_model_free(&m);
}

TB_TEST(clipping_scales_gradients_to_the_max_norm) {
    float g[1000];
    for (int i = 0; i < 1000; i++) g[i] = (float)((i % 7) - 3);
    double norm = clip_grads_global_norm(g, 1000);
    double want = 0;
    for (int i = 0; i < 1000; i++) want += (double)g[i] * g[i];
    TB_CHECK(fabs(norm - sqrt(want)) < 1e-9 * sqrt(want), "norm %.9g vs %.9g", norm, sqrt(want));
    float coeff = clip_grads_coefficient(norm, 1.0);
    for (int i = 0; i < 1000; i++) g[i] *= coeff;
    TB_CHECK(fabs(clip_grads_global_norm(g, 1000) - 1.0) < 1e-5, "clipped norm %.7f", clip_grads_global_norm(g, 1000));
    TB_CHECK(clip_grads_coefficient(0.5, 1.0) == 1.0f, "a norm under the max is left alone");
    TB_CHECK(clip_grads_coefficient(50.0, 0.0) == 1.0f, "max norm 0 turns clipping off");
}

TB_TEST(adamw_applies_the_clip_coefficient_to_every_gradient) {
    // AdamW with the gradients scaled by c equals AdamW on gradients pre-multiplied by c.
    tb_config cfg;
    tiny_config(&cfg);
    config_resolve(&cfg);
    tb_allocator mem;
    tb_allocator_init(&mem, 0, NULL, NULL);
    gpt_model m;
    gpt_model_init(&m, &cfg, &mem, NULL);
    size_t n = m.num_parameters;
    float *p0 = malloc(n * sizeof(float)), *g = malloc(n * sizeof(float)), *scaled = malloc(n * sizeof(float));
    memcpy(p0, m.param_memory, n * sizeof(float));
    for (size_t i = 0; i < n; i++) g[i] = (float)((int)(i % 11) - 5) * 0.1f, scaled[i] = g[i] * 0.37f;
    tb_adamw a, b;
    adamw_init(&a, &cfg, m.padded_parameters, 0, 1, NULL, 0, &mem);
    adamw_init(&b, &cfg, m.padded_parameters, 0, 1, NULL, 0, &mem);
    for (int step = 0; step < 3; step++) adamw_step(&a, m.params, m.nparams, m.param_memory, g, 0.37f, 1e-2f);
    float *pa = malloc(n * sizeof(float));
    memcpy(pa, m.param_memory, n * sizeof(float));
    memcpy(m.param_memory, p0, n * sizeof(float));
    for (int step = 0; step < 3; step++) adamw_step(&b, m.params, m.nparams, m.param_memory, scaled, 1.0f, 1e-2f);
    TB_CHECK(memcmp(pa, m.param_memory, n * sizeof(float)) == 0, "scaled-in-update differs from pre-scaled");
    TB_CHECK(memcmp(pa, p0, n * sizeof(float)) != 0, "the update moved nothing");
    adamw_free(&a), adamw_free(&b), gpt_model_free(&m);
    free(p0), free(g), free(scaled), free(pa);
}

TB_TEST(lr_warms_up_linearly_then_follows_cosine_to_min_lr) {
    tb_config cfg;
    config_defaults(&cfg);
    cfg.lr = 1e-3, cfg.min_lr = 1e-4, cfg.lr_warmup_iters = 10, cfg.lr_decay_iters = 110, cfg.train_iters = 200;
    TB_CHECK(fabs(lr_at_step(&cfg, 1) - 1e-4) < 1e-12, "step 1 of warm-up: %g", lr_at_step(&cfg, 1));
    TB_CHECK(fabs(lr_at_step(&cfg, 5) - 5e-4) < 1e-12, "step 5 of warm-up: %g", lr_at_step(&cfg, 5));
    TB_CHECK(fabs(lr_at_step(&cfg, 10) - 1e-3) < 1e-12, "end of warm-up: %g", lr_at_step(&cfg, 10));
    TB_CHECK(fabs(lr_at_step(&cfg, 60) - 5.5e-4) < 1e-12, "half-way cosine: %g", lr_at_step(&cfg, 60));
    TB_CHECK(fabs(lr_at_step(&cfg, 110) - 1e-4) < 1e-12, "end of decay: %g", lr_at_step(&cfg, 110));
    TB_CHECK(lr_at_step(&cfg, 150) == 1e-4, "after decay: %g", lr_at_step(&cfg, 150));
    cfg.lr_decay_style = TB_LR_LINEAR;
    TB_CHECK(fabs(lr_at_step(&cfg, 60) - 5.5e-4) < 1e-12, "half-way linear: %g", lr_at_step(&cfg, 60));
    TB_CHECK(fabs(lr_at_step(&cfg, 35) - 7.75e-4) < 1e-12, "quarter-way linear: %g", lr_at_step(&cfg, 35));
    cfg.lr_decay_style = TB_LR_CONSTANT;
    TB_CHECK(lr_at_step(&cfg, 150) == 1e-3, "constant: %g", lr_at_step(&cfg, 150));
}

// The caching allocator (runtime/memory.h): a freed block is kept, counted as cached under the
// category it held, and reserved (in use + cached) stays what the process holds; reusing it
// moves its bytes back to in use, under the new owner's category; releasing the cache returns it.
TB_TEST(caching_allocator_counts_reserved_and_cached_bytes_by_category) {
    tb_allocator a;
    tb_allocator_init(&a, 0, NULL, NULL);
    tb_allocator_set_caching(&a, 1);
    void *x = tb_alloc(&a, TB_MEM_ACTIVATIONS, 4096, "x");
    void *y = tb_alloc(&a, TB_MEM_WORKSPACE, 1024, "y");
    TB_CHECK(a.stats.reserved == 5120 && a.stats.cached[TB_MEM_ACTIVATIONS] == 0, "reserved %zu", a.stats.reserved);
    tb_free(&a, x);
    TB_CHECK(a.stats.current[TB_MEM_ACTIVATIONS] == 0 && a.stats.cached[TB_MEM_ACTIVATIONS] == 4096 &&
                 a.stats.reserved == 5120,
             "freed: in use %zu, cached %zu, reserved %zu", a.stats.current[TB_MEM_ACTIVATIONS],
             a.stats.cached[TB_MEM_ACTIVATIONS], a.stats.reserved);
    void *z = tb_alloc(&a, TB_MEM_GRADS, 4096, "z");  // the cached block, now grads
    TB_CHECK(z == x && a.stats.cached[TB_MEM_ACTIVATIONS] == 0 && a.stats.current[TB_MEM_GRADS] == 4096 &&
                 a.stats.reserved == 5120,
             "reused: cached %zu, grads %zu, reserved %zu", a.stats.cached[TB_MEM_ACTIVATIONS],
             a.stats.current[TB_MEM_GRADS], a.stats.reserved);
    tb_free(&a, z);
    tb_free(&a, y);
    TB_CHECK(a.stats.cached[TB_MEM_GRADS] == 4096 && a.stats.cached[TB_MEM_WORKSPACE] == 1024 &&
                 a.stats.total_current == 0 && a.stats.reserved == 5120,
             "both cached: grads %zu, workspace %zu", a.stats.cached[TB_MEM_GRADS], a.stats.cached[TB_MEM_WORKSPACE]);
    tb_allocator_release_cache(&a);
    size_t cached = 0;
    for (int c = 0; c < TB_MEM_NCATEGORIES; c++) cached += a.stats.cached[c];
    TB_CHECK(cached == 0 && a.stats.reserved == 0, "released: cached %zu, reserved %zu", cached, a.stats.reserved);
}

// A reservation (Megatron-FSDP's buffers): committed ranges count in their category and are
// listed live; a decommitted range reads as zeros — its whole pages back with the kernel (not
// resident), its edges, which share a page with a neighbour, cleared — and the neighbour keeps
// its values; unreserving decommits what is left.
TB_TEST(reservation_commits_count_and_decommitted_ranges_read_as_zeros) {
    tb_allocator a;
    tb_allocator_init(&a, 0, NULL, NULL);
    const size_t page = (size_t)sysconf(_SC_PAGESIZE), n = 8 * page / sizeof(float);
    float *buf = tb_reserve(&a, n * sizeof(float), "reservation");
    TB_CHECK(a.stats.total_current == 0, "a reservation counts nothing: %zu", a.stats.total_current);
    // [0, k) mine, [k, n) gathered: k not on a page boundary
    const size_t k = page / sizeof(float) + 100;
    tb_commit(&a, TB_MEM_PARAMS, buf, k * sizeof(float), "mine");
    tb_commit(&a, TB_MEM_GATHERED, buf + k, (n - k) * sizeof(float), "theirs");
    TB_CHECK(a.stats.current[TB_MEM_PARAMS] == k * sizeof(float) &&
                 a.stats.current[TB_MEM_GATHERED] == (n - k) * sizeof(float) && a.stats.reserved == n * sizeof(float),
             "committed: params %zu, gathered %zu, reserved %zu", a.stats.current[TB_MEM_PARAMS],
             a.stats.current[TB_MEM_GATHERED], a.stats.reserved);
    for (size_t i = 0; i < n; i++) buf[i] = (float)(i + 1);
    tb_decommit(&a, buf + k);
    size_t nonzero = 0, kept = 0;
    for (size_t i = k; i < n; i++) nonzero += buf[i] != 0.0f;
    for (size_t i = 0; i < k; i++) kept += buf[i] == (float)(i + 1);
    TB_CHECK(nonzero == 0 && kept == k, "after decommit: %zu nonzero of theirs, %zu of %zu of mine kept", nonzero, kept,
             k);
    // (read above: the released pages came back as zero pages; released again, then asked)
    tb_commit(&a, TB_MEM_GATHERED, buf + k, (n - k) * sizeof(float), "theirs again");
    tb_decommit(&a, buf + k);
    unsigned char resident[8];
    TB_REQUIRE(mincore(buf, n * sizeof(float), resident) == 0, "mincore");
    int pages_resident = 0;
    for (int i = 2; i < 8; i++) pages_resident += resident[i] & 1;  // pages 2..7 lie wholly in [k, n)
    TB_CHECK(pages_resident == 0, "%d of the 6 pages given back are still resident", pages_resident);
    TB_CHECK(a.stats.current[TB_MEM_GATHERED] == 0 && a.stats.peak[TB_MEM_GATHERED] == (n - k) * sizeof(float),
             "gathered now %zu, peak %zu", a.stats.current[TB_MEM_GATHERED], a.stats.peak[TB_MEM_GATHERED]);
    tb_unreserve(&a, buf, n * sizeof(float));
    TB_CHECK(a.stats.total_current == 0 && a.stats.reserved == 0 && a.live == NULL,
             "unreserved: %zu in use, %zu reserved", a.stats.total_current, a.stats.reserved);
}

int main(void) {
    TB_RUN(caching_allocator_counts_reserved_and_cached_bytes_by_category);
    TB_RUN(reservation_commits_count_and_decommitted_ranges_read_as_zeros);
    cpu_set_num_threads(2);
    TB_RUN(tiny_model_overfits_one_batch_below_0_05);
    TB_RUN(same_seed_and_config_give_bitwise_identical_runs);
    TB_RUN(result_does_not_depend_on_thread_count);
    TB_RUN(recompute_keeps_losses_and_gradients_bitwise_and_lowers_activation_memory);
    TB_RUN(gradient_accumulation_matches_one_large_microbatch);
    TB_RUN(adamw_decays_matrices_but_not_norms_or_biases);
    TB_RUN(clipping_scales_gradients_to_the_max_norm);
    TB_RUN(adamw_applies_the_clip_coefficient_to_every_gradient);
    TB_RUN(lr_warms_up_linearly_then_follows_cosine_to_min_lr);
    return tb_test_summary();
}
