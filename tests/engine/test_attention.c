// Attention cores (transformer/spec.h): the blocked flash kernel against a double-precision
// reference and against the local DotProductAttention kernel, values and gradients, causal
// and not, sequence lengths that are and are not multiples of the block, grouped queries;
// its result is independent of the thread count; its saved activations are linear in T.
// Context parallelism's kernel and both its exchanges (all-gather, the p2p ring) on cp rank
// threads against the whole sequence.
#include <math.h>
#include <string.h>

#include "backend/cpu/kernels.h"
#include "comm/local_backend.h"
#include "config/config.h"
#include "core/rng.h"
#include "comm/parallel_state.h"
#include "tb_test.h"
#include "transformer/context_parallel.h"
#include "transformer/spec.h"
#include "transformer/transformer_layer.h"

static tb_rng rng;

static float *randn(size_t n) {
    float *x = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) x[i] = tb_rng_normal(&rng);
    return x;
}

// out and dqkv of softmax(QKᵀ/√hs)V in double, from the definition (dout given).
static void reference(double *out, double *dqkv, const float *qkv, const float *dout, int B, int T, int NH, int G,
                      int hs, int causal) {
    const int QKV = (NH + 2 * G) * hs, C = NH * hs, per = NH / G;
    const double scale = 1.0 / sqrt((double)hs);
    double *P = malloc((size_t)T * T * sizeof(double)), *dP = malloc((size_t)T * T * sizeof(double));
    memset(dqkv, 0, (size_t)B * T * QKV * sizeof(double));
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
            const int g = h / per;
            const float *x = qkv + (size_t)b * T * QKV;
#define Q(t, e) x[(size_t)(t) * QKV + h * hs + (e)]
#define K(t, e) x[(size_t)(t) * QKV + (NH + g) * hs + (e)]
#define V(t, e) x[(size_t)(t) * QKV + (NH + G + g) * hs + (e)]
            for (int i = 0; i < T; i++) {
                double m = -INFINITY, sum = 0;
                for (int j = 0; j < T; j++) {
                    double s = 0;
                    for (int e = 0; e < hs; e++) s += (double)Q(i, e) * K(j, e);
                    P[(size_t)i * T + j] = causal && j > i ? -INFINITY : s * scale;
                    m = fmax(m, P[(size_t)i * T + j]);
                }
                for (int j = 0; j < T; j++) sum += P[(size_t)i * T + j] = exp(P[(size_t)i * T + j] - m);
                for (int j = 0; j < T; j++) P[(size_t)i * T + j] /= sum;
                for (int e = 0; e < hs; e++) {
                    double o = 0;
                    for (int j = 0; j < T; j++) o += P[(size_t)i * T + j] * V(j, e);
                    out[((size_t)b * T + i) * C + h * hs + e] = o;
                }
            }
            double *dx = dqkv + (size_t)b * T * QKV;
            const float *dO = dout + (size_t)b * T * C + h * hs;
            for (int i = 0; i < T; i++) {
                double dot = 0;
                for (int j = 0; j < T; j++) {
                    double d = 0;
                    for (int e = 0; e < hs; e++) d += (double)dO[(size_t)i * C + e] * V(j, e);
                    dP[(size_t)i * T + j] = d;
                    dot += d * P[(size_t)i * T + j];
                }
                for (int j = 0; j < T; j++) {
                    const double p = P[(size_t)i * T + j], ds = p * (dP[(size_t)i * T + j] - dot) * scale;
                    for (int e = 0; e < hs; e++) {
                        dx[(size_t)j * QKV + (NH + G + g) * hs + e] += p * dO[(size_t)i * C + e];
                        dx[(size_t)i * QKV + h * hs + e] += ds * K(j, e);
                        dx[(size_t)j * QKV + (NH + g) * hs + e] += ds * Q(i, e);
                    }
                }
            }
#undef Q
#undef K
#undef V
        }
    free(P);
    free(dP);
}

// Largest |a − b| relative to the largest |b|.
static double rel_error(const float *a, const double *b, size_t n) {
    double worst = 0, scale = 1e-30;
    for (size_t i = 0; i < n; i++) scale = fmax(scale, fabs(b[i]));
    for (size_t i = 0; i < n; i++) worst = fmax(worst, fabs(a[i] - b[i]));
    return worst / scale;
}

typedef struct {
    float *out, *lse, *dqkv, *scratch;
} flash_result;

static void flash_run(flash_result *r, const float *qkv, const float *dout, int threads, int B, int T, int NH, int G,
                      int hs, int causal) {
    const size_t nout = (size_t)B * T * NH * hs, nqkv = (size_t)B * T * (NH + 2 * G) * hs;
    r->out = calloc(nout, sizeof(float));
    r->lse = calloc((size_t)B * NH * T, sizeof(float));
    r->dqkv = calloc(nqkv, sizeof(float));
    r->scratch = calloc(cpu_flash_attention_scratch_floats(T, hs, threads), sizeof(float));
    cpu_flash_attention_forward_masked(r->out, r->lse, r->scratch, threads, qkv, B, T, NH, G, hs, causal);
    cpu_flash_attention_backward_masked(r->dqkv, r->scratch, threads, dout, r->out, qkv, r->lse, B, T, NH, G, hs,
                                        causal);
}

static void flash_free(flash_result *r) {
    free(r->out), free(r->lse), free(r->dqkv), free(r->scratch);
}

// T 7 and 150 are not multiples of the 64-row block, 128 is; G < NH groups queries.
TB_TEST(flash_attention_matches_the_definition_causal_and_not) {
    static const struct {
        int B, T, NH, G, hs;
    } shapes[] = {{2, 7, 4, 2, 8}, {1, 128, 2, 2, 16}, {2, 150, 4, 1, 8}};
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++)
        for (int causal = 0; causal < 2; causal++) {
            const int B = shapes[s].B, T = shapes[s].T, NH = shapes[s].NH, G = shapes[s].G, hs = shapes[s].hs;
            const size_t nout = (size_t)B * T * NH * hs, nqkv = (size_t)B * T * (NH + 2 * G) * hs;
            float *qkv = randn(nqkv), *dout = randn(nout);
            double *ref_out = malloc(nout * sizeof(double)), *ref_dqkv = malloc(nqkv * sizeof(double));
            reference(ref_out, ref_dqkv, qkv, dout, B, T, NH, G, hs, causal);
            flash_result r;
            flash_run(&r, qkv, dout, 2, B, T, NH, G, hs, causal);
            double eo = rel_error(r.out, ref_out, nout), eg = rel_error(r.dqkv, ref_dqkv, nqkv);
            printf("    B %d T %3d NH %d G %d hs %2d causal %d: out %.1e, dqkv %.1e of their scale\n", B, T, NH, G,
                   hs, causal, eo, eg);
            TB_CHECK(eo < 1e-5 && eg < 1e-5, "T %d causal %d: out %.2e, dqkv %.2e", T, causal, eo, eg);
            flash_free(&r);
            free(qkv), free(dout), free(ref_out), free(ref_dqkv);
        }
}

// The engine's two cores agree on what they compute (float reordering only), and the
// local core's saved probabilities are what flash never materialises.
TB_TEST(flash_attention_matches_the_local_core) {
    const int B = 2, T = 200, NH = 4, G = 2, hs = 16;
    const size_t nout = (size_t)B * T * NH * hs, nqkv = (size_t)B * T * (NH + 2 * G) * hs;
    float *qkv = randn(nqkv), *dout = randn(nout);
    float *out = calloc(nout, sizeof(float)), *dqkv = calloc(nqkv, sizeof(float));
    float *probs = calloc((size_t)B * NH * T * T, sizeof(float)), *scratch = calloc(2 * (size_t)T * T, sizeof(float));
    cpu_attention_forward(out, probs, scratch, qkv, B, T, NH, G, hs);
    cpu_attention_backward(dqkv, scratch, dout, qkv, probs, B, T, NH, G, hs);
    flash_result r;
    flash_run(&r, qkv, dout, 2, B, T, NH, G, hs, 1);
    double *as_double = malloc(nqkv * sizeof(double));
    for (size_t i = 0; i < nout; i++) as_double[i] = out[i];
    double eo = rel_error(r.out, as_double, nout);
    for (size_t i = 0; i < nqkv; i++) as_double[i] = dqkv[i];
    double eg = rel_error(r.dqkv, as_double, nqkv);
    TB_CHECK(eo < 1e-5 && eg < 1e-5, "flash vs local: out %.2e, dqkv %.2e of their scale", eo, eg);
    flash_free(&r);
    free(qkv), free(dout), free(out), free(dqkv), free(probs), free(scratch), free(as_double);
}

// Each output row and each key/value group's gradient is summed in a fixed order by one
// thread, whichever runs it: 1 and 2 threads give the same bits.
TB_TEST(flash_attention_is_bitwise_independent_of_the_thread_count) {
    const int B = 2, T = 130, NH = 4, G = 2, hs = 8;
    const size_t nout = (size_t)B * T * NH * hs, nqkv = (size_t)B * T * (NH + 2 * G) * hs;
    float *qkv = randn(nqkv), *dout = randn(nout);
    flash_result one, two;
    flash_run(&one, qkv, dout, 1, B, T, NH, G, hs, 1);
    flash_run(&two, qkv, dout, 2, B, T, NH, G, hs, 1);
    TB_CHECK(memcmp(one.out, two.out, nout * sizeof(float)) == 0, "out differs between 1 and 2 threads");
    TB_CHECK(memcmp(one.lse, two.lse, (size_t)B * NH * T * sizeof(float)) == 0, "lse differs");
    TB_CHECK(memcmp(one.dqkv, two.dqkv, nqkv * sizeof(float)) == 0, "dqkv differs between 1 and 2 threads");
    flash_free(&one), flash_free(&two);
    free(qkv), free(dout);
}

// What a layer saves: with flash, linear in T (doubling T doubles it); with the local core
// the probabilities add B·NH·T² floats.
TB_TEST(flash_attention_saves_activations_linear_in_the_sequence) {
    size_t bytes[2][2];  // [flash][T 1024, 2048]
    for (int flash = 0; flash < 2; flash++)
        for (int i = 0; i < 2; i++) {
            tb_config cfg;
            config_defaults(&cfg);
            cfg.micro_batch_size = 1, cfg.seq_length = 1024 << i, cfg.hidden_size = 64, cfg.num_attention_heads = 4;
            cfg.attention_backend = flash ? TB_ATTENTION_FLASH : TB_ATTENTION_LOCAL;
            config_resolve(&cfg);
            transformer_layer_spec spec;
            transformer_layer_spec_for(&cfg, &spec);
            tb_layer_dims d = tb_layer_dims_for(&cfg, &spec, NULL);
            bytes[flash][i] = transformer_layer_acts_bytes(&d, 0);
        }
    printf("    per-layer saved activations, T 1024 → 2048: local %zu → %zu B, flash %zu → %zu B\n", bytes[0][0],
           bytes[0][1], bytes[1][0], bytes[1][1]);
    TB_CHECK(bytes[1][1] == 2 * bytes[1][0], "flash: %zu B at T 2048 is not twice %zu B at 1024", bytes[1][1],
             bytes[1][0]);
    const size_t probs = (size_t)4 * 1024 * 1024 * sizeof(float);  // NH · T² at T 1024
    TB_CHECK(bytes[0][0] == bytes[1][0] - (size_t)4 * 1024 * sizeof(float) + probs,
             "local saves the probabilities instead of the log-sum-exps: %zu vs %zu B", bytes[0][0], bytes[1][0]);
}

// Context parallelism's kernel: each rank's zig-zag rows at their global positions against the
// whole sequence's K and V give the full kernel's output rows and Q gradients, and the ranks'
// K/V gradients sum to the full kernel's. T 160 over cp 2: chunks of 40, so key blocks of 64
// straddle the chunks.
TB_TEST(context_parallel_attention_matches_the_whole_sequence) {
    const int B = 2, T = 160, NH = 4, G = 2, hs = 8, cp = 2, Tq = T / cp, QKV = (NH + 2 * G) * hs, KV = 2 * G * hs;
    const size_t nqkv = (size_t)B * T * QKV, nout = (size_t)B * T * NH * hs;
    float *qkv = randn(nqkv), *dout = randn(nout);
    flash_result full;
    flash_run(&full, qkv, dout, 2, B, T, NH, G, hs, 1);
    float *kv = malloc((size_t)B * T * KV * sizeof(float)), *dkv_sum = calloc((size_t)B * T * KV, sizeof(float));
    for (size_t r = 0; r < (size_t)B * T; r++) memcpy(kv + r * KV, qkv + r * QKV + NH * hs, (size_t)KV * sizeof(float));
    double worst_out = 0, worst_dq = 0, scale_out = 1e-30, scale_dq = 1e-30;
    for (int rank = 0; rank < cp; rank++) {
        int32_t pos[80];
        cp_local_positions(T, cp, rank, pos);
        float *lq = malloc((size_t)B * Tq * QKV * sizeof(float)), *ld = malloc((size_t)B * Tq * NH * hs * sizeof(float));
        for (int b = 0; b < B; b++)
            for (int t = 0; t < Tq; t++) {
                memcpy(lq + ((size_t)b * Tq + t) * QKV, qkv + ((size_t)b * T + pos[t]) * QKV, (size_t)QKV * sizeof(float));
                memcpy(ld + ((size_t)b * Tq + t) * NH * hs, dout + ((size_t)b * T + pos[t]) * NH * hs,
                       (size_t)NH * hs * sizeof(float));
            }
        float *out = calloc((size_t)B * Tq * NH * hs, sizeof(float)), *lse = calloc((size_t)B * NH * Tq, sizeof(float));
        float *dq = calloc((size_t)B * Tq * QKV, sizeof(float)), *dkv = calloc((size_t)B * T * KV, sizeof(float));
        float *scratch = calloc(cpu_flash_attention_scratch_floats(T, hs, 2), sizeof(float));
        cpu_flash_attention_cp_forward(out, lse, scratch, 2, lq, pos, kv, B, Tq, T, NH, G, hs);
        cpu_flash_attention_cp_backward(dq, dkv, scratch, 2, ld, out, lq, pos, kv, lse, B, Tq, T, NH, G, hs);
        for (int b = 0; b < B; b++)
            for (int t = 0; t < Tq; t++) {
                for (int e = 0; e < NH * hs; e++) {
                    double want = full.out[((size_t)b * T + pos[t]) * NH * hs + e];
                    worst_out = fmax(worst_out, fabs(out[((size_t)b * Tq + t) * NH * hs + e] - want));
                    scale_out = fmax(scale_out, fabs(want));
                    double wq = full.dqkv[((size_t)b * T + pos[t]) * QKV + e];
                    worst_dq = fmax(worst_dq, fabs(dq[((size_t)b * Tq + t) * QKV + e] - wq));
                    scale_dq = fmax(scale_dq, fabs(wq));
                }
            }
        for (size_t i = 0; i < (size_t)B * T * KV; i++) dkv_sum[i] += dkv[i];
        free(lq), free(ld), free(out), free(lse), free(dq), free(dkv), free(scratch);
    }
    double worst_dkv = 0, scale_dkv = 1e-30;
    for (size_t r = 0; r < (size_t)B * T; r++)
        for (int e = 0; e < KV; e++) {
            double want = full.dqkv[r * QKV + NH * hs + e];
            worst_dkv = fmax(worst_dkv, fabs(dkv_sum[r * KV + e] - want));
            scale_dkv = fmax(scale_dkv, fabs(want));
        }
    printf("    cp 2, T 160: out %.1e, dq %.1e, summed dk/dv %.1e of their scale\n", worst_out / scale_out,
           worst_dq / scale_dq, worst_dkv / scale_dkv);
    TB_CHECK(worst_out / scale_out < 1e-6 && worst_dq / scale_dq < 1e-6 && worst_dkv / scale_dkv < 1e-6,
             "cp kernel against the whole sequence: out %.2e, dq %.2e, dkv %.2e", worst_out / scale_out,
             worst_dq / scale_dq, worst_dkv / scale_dkv);
    flash_free(&full);
    free(qkv), free(dout), free(kv), free(dkv_sum);
}

// The two exchanges of context parallelism on cp rank threads, each rank's zig-zag rows
// gathered back into position order: the ring (p2p: a chunk pair per step, the diagonal,
// whole or skipped block per chunk pair, partials merged by log-sum-exp, dK/dV passed around
// the ring back to their owners) and the all-gather both give the whole sequence's out, lse
// and dqkv (Q, K and V parts). cp 2, 3 (an odd ring) and 4; T 192: chunks of 48, 32 and 24 rows
// (at cp 2 a rank's 96 query rows span two 64-row blocks).
typedef struct cp_case {
    int cp, B, T, NH, G, hs;
    const float *qkv, *dout;
    float *out[2], *lse[2], *dqkv[2];  // by exchange (0 all_gather, 1 ring), in position order
} cp_case;

static void cp_exchange_rank(tb_rank *rk, void *arg) {
    cp_case *c = arg;
    tb_group *cp = &rk->groups[TB_GROUP_CP];
    const int B = c->B, T = c->T, NH = c->NH, G = c->G, hs = c->hs, Tq = T / c->cp;
    const int QKV = (NH + 2 * G) * hs, C = NH * hs;
    int32_t *pos = malloc((size_t)Tq * sizeof *pos);
    cp_local_positions(T, c->cp, cp->index, pos);
    float *lq = malloc((size_t)B * Tq * QKV * sizeof(float)), *ld = malloc((size_t)B * Tq * C * sizeof(float));
    for (int b = 0; b < B; b++)
        for (int t = 0; t < Tq; t++) {
            memcpy(lq + ((size_t)b * Tq + t) * QKV, c->qkv + ((size_t)b * T + pos[t]) * QKV, (size_t)QKV * sizeof(float));
            memcpy(ld + ((size_t)b * Tq + t) * C, c->dout + ((size_t)b * T + pos[t]) * C, (size_t)C * sizeof(float));
        }
    float *out = malloc((size_t)B * Tq * C * sizeof(float)), *lse = malloc((size_t)B * NH * Tq * sizeof(float));
    float *dq = malloc((size_t)B * Tq * QKV * sizeof(float));
    float *scratch = malloc(cpu_flash_attention_scratch_floats(T, hs, 1) * sizeof(float));
    for (int ring = 0; ring < 2; ring++) {
        float *ws = malloc(cp_attention_workspace_floats(ring, B, Tq, c->cp, NH, G, hs) * sizeof(float));
        if (ring) {
            cp_ring_attention_forward(cp, out, lse, scratch, 1, ws, lq, B, Tq, NH, G, hs);
            cp_ring_attention_backward(cp, dq, scratch, 1, ws, ld, out, lq, lse, B, Tq, NH, G, hs);
        } else {
            cp_attention_forward(cp, pos, out, lse, scratch, 1, ws, lq, B, Tq, NH, G, hs);
            cp_attention_backward(cp, pos, dq, scratch, 1, ws, ld, out, lq, lse, B, Tq, NH, G, hs);
        }
        for (int b = 0; b < B; b++)
            for (int t = 0; t < Tq; t++) {
                const size_t g = (size_t)b * T + pos[t], l = (size_t)b * Tq + t;
                memcpy(c->out[ring] + g * C, out + l * C, (size_t)C * sizeof(float));
                memcpy(c->dqkv[ring] + g * QKV, dq + l * QKV, (size_t)QKV * sizeof(float));
                for (int h = 0; h < NH; h++)
                    c->lse[ring][((size_t)b * NH + h) * T + pos[t]] = lse[((size_t)b * NH + h) * Tq + t];
            }
        free(ws);
    }
    free(pos), free(lq), free(ld), free(out), free(lse), free(dq), free(scratch);
}

static double rel_error_f(const float *a, const float *b, size_t n) {
    double worst = 0, scale = 1e-30;
    for (size_t i = 0; i < n; i++) scale = fmax(scale, fabs(b[i]));
    for (size_t i = 0; i < n; i++) worst = fmax(worst, fabs((double)a[i] - b[i]));
    return worst / scale;
}

TB_TEST(context_parallel_ring_and_all_gather_match_the_whole_sequence) {
    const int B = 2, T = 192, NH = 4, G = 2, hs = 8, QKV = (NH + 2 * G) * hs;
    const size_t nqkv = (size_t)B * T * QKV, nout = (size_t)B * T * NH * hs, nlse = (size_t)B * NH * T;
    float *qkv = randn(nqkv), *dout = randn(nout);
    flash_result full;
    flash_run(&full, qkv, dout, 1, B, T, NH, G, hs, 1);
    static const int cps[] = {2, 3, 4};
    for (size_t k = 0; k < sizeof cps / sizeof *cps; k++) {
        cp_case c = {cps[k], B, T, NH, G, hs, qkv, dout, {NULL}, {NULL}, {NULL}};
        for (int m = 0; m < 2; m++) {
            c.out[m] = calloc(nout, sizeof(float)), c.lse[m] = calloc(nlse, sizeof(float));
            c.dqkv[m] = calloc(nqkv, sizeof(float));
        }
        tb_config cfg;
        config_defaults(&cfg);
        cfg.world_size = cfg.context_parallel_size = c.cp, cfg.seq_length = T;
        cfg.attention_backend = TB_ATTENTION_FLASH, cfg.collective_timeout = 60;
        config_resolve(&cfg);
        tb_world w;
        tb_error err;
        TB_REQUIRE(parallel_state_world_init(&w, &cfg, &tb_local_backend, &err) == 0, "cp %d world: %s", c.cp, err.msg);
        w.comm.collective_timeout_s = 60;
        for (int r = 0; r < w.size; r++) tb_allocator_init(w.ranks[r].mem, 0, NULL, NULL);
        parallel_state_run_ranks(&w, cp_exchange_rank, &c);
        for (int r = 0; r < w.size; r++) tb_allocator_release_cache(w.ranks[r].mem);
        parallel_state_world_free(&w);
        for (int m = 0; m < 2; m++) {
            double eo = rel_error_f(c.out[m], full.out, nout), el = rel_error_f(c.lse[m], full.lse, nlse);
            double eg = rel_error_f(c.dqkv[m], full.dqkv, nqkv);
            printf("    cp %d %-10s: out %.1e, lse %.1e, dqkv %.1e of their scale\n", c.cp,
                   m ? "p2p" : "all_gather", eo, el, eg);
            TB_CHECK(eo < 1e-5 && el < 1e-5 && eg < 1e-5, "cp %d %s against the whole sequence: out %.2e, lse %.2e, "
                     "dqkv %.2e", c.cp, m ? "p2p" : "all_gather", eo, el, eg);
            free(c.out[m]), free(c.lse[m]), free(c.dqkv[m]);
        }
    }
    flash_free(&full);
    free(qkv), free(dout);
}

int main(void) {
    tb_rng_init(&rng, 7);
    cpu_set_num_threads(2);
    TB_RUN(flash_attention_matches_the_definition_causal_and_not);
    TB_RUN(flash_attention_matches_the_local_core);
    TB_RUN(flash_attention_is_bitwise_independent_of_the_thread_count);
    TB_RUN(flash_attention_saves_activations_linear_in_the_sequence);
    TB_RUN(context_parallel_attention_matches_the_whole_sequence);
    TB_RUN(context_parallel_ring_and_all_gather_match_the_whole_sequence);
    return tb_test_summary();
}
