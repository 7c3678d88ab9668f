// Gradient checks: every module's backward against central finite differences of its
// forward. Each module is checked on the objective L = Σ out ⊙ R (R fixed and random), whose
// gradient at the output is R, so backward(R) must equal dL/dinput and dL/dparams.
// Kernels run in fp32; the objective is summed in double. Tolerance: |analytic − numeric|
// ≤ RTOL·max(|analytic|, |numeric|) + ATOL, tight enough that a wrong factor, sign, index or
// missing term fails.
#include <math.h>
#include <string.h>

#include "backend/cpu/kernels.h"
#include "config/config.h"
#include "runtime/memory.h"
#include "core/rng.h"
#include "models/gpt.h"
#include "tensor_parallel/cross_entropy.h"
#include "tb_test.h"
#include "transformer/moe/router.h"
#include "transformer/transformer_layer.h"

#define RTOL 2e-2
#define ATOL 2e-3

static tb_rng rng;

static float *randn(size_t n, float scale) {
    float *x = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) x[i] = scale * tb_rng_normal(&rng);
    return x;
}

static float *zeros(size_t n) { return calloc(n, sizeof(float)); }

static double dot(const float *a, const float *b, size_t n) {
    double s = 0;
    for (size_t i = 0; i < n; i++) s += (double)a[i] * b[i];
    return s;
}

typedef double (*objective)(void *ctx);

// Compares analytic[i] with the central difference of f around x[i] for `count` indices
// spread over [0, n). Returns the number of mismatches (printed).
static int check(const char *what, float *x, const float *analytic, size_t n, objective f, void *ctx,
                 float eps, int count) {
    int bad = 0;
    double worst = 0;
    size_t stride = n / (size_t)count > 0 ? n / (size_t)count : 1;
    for (size_t i = (size_t)(tb_rng_u64(&rng) % stride); i < n; i += stride) {
        float saved = x[i];
        x[i] = saved + eps;
        double fp = f(ctx);
        x[i] = saved - eps;
        double fm = f(ctx);
        x[i] = saved;
        double num = (fp - fm) / (2.0 * eps), ana = analytic[i];
        double err = fabs(num - ana), lim = RTOL * fmax(fabs(num), fabs(ana)) + ATOL;
        if (err / lim > worst) worst = err / lim;
        if (err > lim) {
            if (bad < 5) printf("    %s[%zu]: analytic %.6g numeric %.6g\n", what, i, ana, num);
            bad++;
        }
    }
    if (bad) printf("    %s: %d mismatches (worst %.2f x tolerance)\n", what, bad, worst);
    return bad;
}

// ---------------------------------------------------------------------------------------
// linear

typedef struct {
    int N, C, OC;
    float *inp, *w, *b, *out, *R;
} linear_case;

static double linear_objective(void *p) {
    linear_case *c = p;
    cpu_matmul_forward(c->out, c->inp, c->w, c->b, c->N, c->C, c->OC);
    return dot(c->out, c->R, (size_t)c->N * c->OC);
}

TB_TEST(linear_backward_matches_finite_differences) {
    linear_case c = {6, 16, 24, NULL, NULL, NULL, NULL, NULL};
    c.inp = randn((size_t)c.N * c.C, 1);
    c.w = randn((size_t)c.OC * c.C, 0.3f);
    c.b = randn((size_t)c.OC, 0.3f);
    c.out = zeros((size_t)c.N * c.OC);
    c.R = randn((size_t)c.N * c.OC, 1);
    float *dinp = zeros((size_t)c.N * c.C), *dw = zeros((size_t)c.OC * c.C), *db = zeros((size_t)c.OC);
    linear_objective(&c);
    cpu_matmul_backward(dinp, dw, db, c.R, c.inp, c.w, c.N, c.C, c.OC);
    TB_CHECK(check("dinp", c.inp, dinp, (size_t)c.N * c.C, linear_objective, &c, 1e-2f, 40) == 0, "dinp");
    TB_CHECK(check("dweight", c.w, dw, (size_t)c.OC * c.C, linear_objective, &c, 1e-2f, 40) == 0, "dweight");
    TB_CHECK(check("dbias", c.b, db, (size_t)c.OC, linear_objective, &c, 1e-2f, 24) == 0, "dbias");
    // parameter gradients accumulate: a second backward doubles them
    float *dw2 = malloc((size_t)c.OC * c.C * sizeof(float));
    memcpy(dw2, dw, (size_t)c.OC * c.C * sizeof(float));
    cpu_matmul_backward(dinp, dw, db, c.R, c.inp, c.w, c.N, c.C, c.OC);
    int doubled = 1;
    for (int i = 0; i < c.OC * c.C; i++) doubled &= fabsf(dw[i] - 2 * dw2[i]) <= 1e-5f * (1 + fabsf(dw[i]));
    TB_CHECK(doubled, "dweight accumulates across backward calls");
    free(c.inp), free(c.w), free(c.b), free(c.out), free(c.R), free(dinp), free(dw), free(db), free(dw2);
}

// ---------------------------------------------------------------------------------------
// norms

typedef struct {
    int N, C, rms;
    float *inp, *w, *b, *out, *mean, *rstd, *R;
} norm_case;

static double norm_objective(void *p) {
    norm_case *c = p;
    if (c->rms) cpu_rmsnorm_forward(c->out, c->rstd, c->inp, c->w, c->N, c->C, 1e-5f);
    else cpu_layernorm_forward(c->out, c->mean, c->rstd, c->inp, c->w, c->b, c->N, c->C, 1e-5f);
    return dot(c->out, c->R, (size_t)c->N * c->C);
}

static void norm_check(int rms) {
    norm_case c = {5, 48, rms, NULL, NULL, NULL, NULL, NULL, NULL, NULL};
    size_t n = (size_t)c.N * c.C;
    c.inp = randn(n, 1);
    for (size_t i = 0; i < n; i++) c.inp[i] += 0.5f;  // a non-zero mean to remove
    c.w = randn((size_t)c.C, 1), c.b = randn((size_t)c.C, 1);
    c.out = zeros(n), c.mean = zeros((size_t)c.N), c.rstd = zeros((size_t)c.N), c.R = randn(n, 1);
    float *dinp = zeros(n), *dw = zeros((size_t)c.C), *db = zeros((size_t)c.C);
    norm_objective(&c);
    if (rms) cpu_rmsnorm_backward(dinp, dw, c.R, c.inp, c.w, c.rstd, c.N, c.C);
    else cpu_layernorm_backward(dinp, dw, db, c.R, c.inp, c.w, c.mean, c.rstd, c.N, c.C);
    TB_CHECK(check("dinp", c.inp, dinp, n, norm_objective, &c, 1e-2f, 60) == 0, "dinp (rms=%d)", rms);
    TB_CHECK(check("dweight", c.w, dw, (size_t)c.C, norm_objective, &c, 1e-2f, 48) == 0, "dweight (rms=%d)", rms);
    if (!rms) TB_CHECK(check("dbias", c.b, db, (size_t)c.C, norm_objective, &c, 1e-2f, 48) == 0, "dbias");
    free(c.inp), free(c.w), free(c.b), free(c.out), free(c.mean), free(c.rstd), free(c.R);
    free(dinp), free(dw), free(db);
}

TB_TEST(layernorm_backward_matches_finite_differences) { norm_check(0); }
TB_TEST(rmsnorm_backward_matches_finite_differences) { norm_check(1); }

// ---------------------------------------------------------------------------------------
// activations

typedef struct {
    int N, F, swiglu;
    float *inp, *out, *R;
} act_case;

static double act_objective(void *p) {
    act_case *c = p;
    if (c->swiglu) cpu_swiglu_forward(c->out, c->inp, c->N, c->F);
    else cpu_gelu_forward(c->out, c->inp, (size_t)c->N * c->F);
    return dot(c->out, c->R, (size_t)c->N * c->F);
}

static void act_check(int swiglu) {
    act_case c = {4, 32, swiglu, NULL, NULL, NULL};
    size_t nin = (size_t)c.N * c.F * (swiglu ? 2 : 1), nout = (size_t)c.N * c.F;
    c.inp = randn(nin, 2), c.out = zeros(nout), c.R = randn(nout, 1);
    float *dinp = zeros(nin);
    act_objective(&c);
    if (swiglu) cpu_swiglu_backward(dinp, c.inp, c.R, c.N, c.F);
    else cpu_gelu_backward(dinp, c.inp, c.R, nout);
    TB_CHECK(check("dinp", c.inp, dinp, nin, act_objective, &c, 1e-2f, 80) == 0, "swiglu=%d", swiglu);
    free(c.inp), free(c.out), free(c.R), free(dinp);
}

TB_TEST(gelu_backward_matches_finite_differences) { act_check(0); }
TB_TEST(swiglu_backward_matches_finite_differences) { act_check(1); }

// ---------------------------------------------------------------------------------------
// attention core

typedef struct {
    int B, T, NH, G, hs;
    float *qkv, *out, *probs, *scratch, *R;
} attn_case;

static double attn_objective(void *p) {
    attn_case *c = p;
    cpu_attention_forward(c->out, c->probs, c->scratch, c->qkv, c->B, c->T, c->NH, c->G, c->hs);
    return dot(c->out, c->R, (size_t)c->B * c->T * c->NH * c->hs);
}

static void attention_check(int NH, int G) {
    attn_case c = {2, 7, NH, G, 8, NULL, NULL, NULL, NULL, NULL};
    size_t nqkv = (size_t)c.B * c.T * (NH + 2 * G) * c.hs, nout = (size_t)c.B * c.T * NH * c.hs;
    c.qkv = randn(nqkv, 1), c.out = zeros(nout), c.R = randn(nout, 1);
    c.probs = zeros((size_t)c.B * NH * c.T * c.T), c.scratch = zeros(2 * (size_t)c.T * c.T);
    float *dqkv = zeros(nqkv), *dqkv_recomputed = zeros(nqkv);
    attn_objective(&c);
    cpu_attention_backward(dqkv, c.scratch, c.R, c.qkv, c.probs, c.B, c.T, NH, G, c.hs);
    TB_CHECK(check("dqkv", c.qkv, dqkv, nqkv, attn_objective, &c, 1e-2f, 120) == 0, "NH %d G %d", NH, G);
    // the selective-recompute path (probabilities recomputed in backward) is bitwise equal
    cpu_attention_backward(dqkv_recomputed, c.scratch, c.R, c.qkv, NULL, c.B, c.T, NH, G, c.hs);
    TB_CHECK(memcmp(dqkv, dqkv_recomputed, nqkv * sizeof(float)) == 0,
             "recomputed-probability backward differs from the saved-probability one");
    // causality: the output at position 0 depends only on position 0
    float *out0 = malloc(nout * sizeof(float));
    memcpy(out0, c.out, nout * sizeof(float));
    size_t last = (size_t)(c.T - 1) * (NH + 2 * G) * c.hs;  // perturb the last position of batch 0
    for (int i = 0; i < (NH + 2 * G) * c.hs; i++) c.qkv[last + i] += 1.0f;
    attn_objective(&c);
    TB_CHECK(memcmp(out0, c.out, (size_t)NH * c.hs * sizeof(float)) == 0, "position 0 saw the future");
    free(c.qkv), free(c.out), free(c.R), free(c.probs), free(c.scratch), free(dqkv), free(dqkv_recomputed);
    free(out0);
}

TB_TEST(attention_backward_matches_finite_differences) { attention_check(4, 4); }
TB_TEST(grouped_query_attention_backward_matches_finite_differences) { attention_check(4, 2); }

// ---------------------------------------------------------------------------------------
// rotary position embedding

typedef struct {
    int B, T, row, heads, hs, dim, interleaved;
    float *x, *y, *cos_t, *sin_t, *R;
} rope_case;

static double rope_objective(void *p) {
    rope_case *c = p;
    size_t n = (size_t)c->B * c->T * c->row;
    memcpy(c->y, c->x, n * sizeof(float));
    cpu_rope_apply(c->y, c->cos_t, c->sin_t, c->B, c->T, c->row, c->heads, c->hs, c->dim, c->interleaved, 0);
    return dot(c->y, c->R, n);
}

// The rotation's gradient is its transpose (inverse = 1), checked against finite
// differences; channels outside the rotated ones pass through untouched.
static void rope_check(int interleaved, int dim) {
    rope_case c = {2, 5, 3 * 8 + 8, 3, 8, dim, interleaved, NULL, NULL, NULL, NULL, NULL};  // 3 heads + a V part
    size_t n = (size_t)c.B * c.T * c.row, table = (size_t)c.T * (dim / 2);
    c.x = randn(n, 1), c.y = zeros(n), c.R = randn(n, 1), c.cos_t = zeros(table), c.sin_t = zeros(table);
    cpu_rope_tables(c.cos_t, c.sin_t, c.T, dim, 10000.0);
    float *dx = malloc(n * sizeof(float));
    memcpy(dx, c.R, n * sizeof(float));
    cpu_rope_apply(dx, c.cos_t, c.sin_t, c.B, c.T, c.row, c.heads, c.hs, dim, interleaved, 1);
    TB_CHECK(check("rope dx", c.x, dx, n, rope_objective, &c, 1e-2f, 80) == 0, "interleaved %d dim %d", interleaved,
             dim);
    rope_objective(&c);
    int untouched = 1;
    for (int r = 0; r < c.B * c.T; r++)
        for (int j = 0; j < c.row; j++) {
            int head = j / c.hs, ch = j % c.hs;
            int rotated = head < c.heads && ch < dim;  // both pairings rotate channels [0, dim)
            size_t i = (size_t)r * c.row + j;
            if (!rotated && c.y[i] != c.x[i]) untouched = 0;
        }
    TB_CHECK(untouched, "channels beyond the rotary dim %d and the V part are untouched", dim);
    free(c.x), free(c.y), free(c.R), free(c.cos_t), free(c.sin_t), free(dx);
}

TB_TEST(rope_backward_matches_finite_differences) {
    rope_check(0, 8);
    rope_check(1, 8);
    rope_check(0, 4);  // rotary_percent 0.5
    rope_check(1, 4);
}

// Megatron's rotation on known numbers: position 3, dim 4, base 10000, angles 3 and 0.03;
// rotate_half pairs channels (0, 2) and (1, 3), interleaved (0, 1) and (2, 3).
TB_TEST(rope_rotates_as_megatron_and_depends_only_on_relative_position) {
    enum { T = 8 };
    float cos_t[T * 2], sin_t[T * 2];
    cpu_rope_tables(cos_t, sin_t, T, 4, 10000.0);
    const double a0 = 3, a1 = 0.03;
    for (int interleaved = 0; interleaved < 2; interleaved++) {
        float x[T * 4] = {0};
        for (int i = 0; i < 4; i++) x[3 * 4 + i] = (float)(i + 1);  // position 3: (1, 2, 3, 4)
        cpu_rope_apply(x, cos_t, sin_t, 1, T, 4, 1, 4, 4, interleaved, 0);
        const float *y = x + 3 * 4;
        double want[4];
        if (!interleaved) {
            want[0] = 1 * cos(a0) - 3 * sin(a0), want[2] = 3 * cos(a0) + 1 * sin(a0);
            want[1] = 2 * cos(a1) - 4 * sin(a1), want[3] = 4 * cos(a1) + 2 * sin(a1);
        } else {
            want[0] = 1 * cos(a0) - 2 * sin(a0), want[1] = 2 * cos(a0) + 1 * sin(a0);
            want[2] = 3 * cos(a1) - 4 * sin(a1), want[3] = 4 * cos(a1) + 3 * sin(a1);
        }
        for (int i = 0; i < 4; i++)
            TB_CHECK(fabs(y[i] - want[i]) < 1e-6, "interleaved %d: channel %d is %.8g, want %.8g", interleaved, i,
                     y[i], want[i]);
    }
    // the same q at every position and the same k: <R_m q, R_n k> depends only on m - n
    enum { HS = 8 };
    float cos8[T * HS / 2], sin8[T * HS / 2], qk[T * 2 * HS];
    cpu_rope_tables(cos8, sin8, T, HS, 10000.0);
    float q[HS], k[HS];
    for (int i = 0; i < HS; i++) q[i] = tb_rng_normal(&rng), k[i] = tb_rng_normal(&rng);
    for (int t = 0; t < T; t++) memcpy(qk + t * 2 * HS, q, sizeof q), memcpy(qk + t * 2 * HS + HS, k, sizeof k);
    cpu_rope_apply(qk, cos8, sin8, 1, T, 2 * HS, 2, HS, HS, 0, 0);
    double near = dot(qk + 1 * 2 * HS, qk + 0 * 2 * HS + HS, HS), far = dot(qk + 6 * 2 * HS, qk + 5 * 2 * HS + HS, HS);
    double other = dot(qk + 6 * 2 * HS, qk + 2 * 2 * HS + HS, HS);
    TB_CHECK(fabs(near - far) < 1e-5 * fmax(1, fabs(near)), "<q1,k0> %.9g vs <q6,k5> %.9g", near, far);
    TB_CHECK(fabs(near - other) > 1e-3, "a different distance gives a different score (%.6g vs %.6g)", near, other);
}

// ---------------------------------------------------------------------------------------
// embedding and loss

typedef struct {
    int B, T, C, V;
    int32_t *tokens;
    float *wte, *wpe, *out, *R;
} emb_case;

static double emb_objective(void *p) {
    emb_case *c = p;
    cpu_embedding_forward(c->out, c->tokens, c->wte, 0, c->V, c->wpe, NULL, c->B, c->T, c->C);
    return dot(c->out, c->R, (size_t)c->B * c->T * c->C);
}

TB_TEST(embedding_backward_matches_finite_differences) {
    emb_case c = {2, 5, 16, 11, NULL, NULL, NULL, NULL, NULL};
    c.tokens = malloc(10 * sizeof(int32_t));
    for (int i = 0; i < 10; i++) c.tokens[i] = (int32_t)(i * 7 % 4);  // repeated ids accumulate
    c.wte = randn((size_t)c.V * c.C, 1), c.wpe = randn((size_t)c.T * c.C, 1);
    c.out = zeros((size_t)10 * c.C), c.R = randn((size_t)10 * c.C, 1);
    float *dwte = zeros((size_t)c.V * c.C), *dwpe = zeros((size_t)c.T * c.C);
    emb_objective(&c);
    cpu_embedding_backward(dwte, dwpe, c.R, c.tokens, 0, c.V, NULL, c.B, c.T, c.C);
    TB_CHECK(check("dwte", c.wte, dwte, (size_t)c.V * c.C, emb_objective, &c, 1e-2f, 80) == 0, "dwte");
    TB_CHECK(check("dwpe", c.wpe, dwpe, (size_t)c.T * c.C, emb_objective, &c, 1e-2f, 40) == 0, "dwpe");
    free(c.tokens), free(c.wte), free(c.wpe), free(c.out), free(c.R), free(dwte), free(dwpe);
}

typedef struct {
    int N, V, Vp;
    int32_t *targets;
    float *logits, *work, *losses;
} ce_case;

static double ce_objective(void *p) {
    ce_case *c = p;
    memcpy(c->work, c->logits, (size_t)c->N * c->Vp * sizeof(float));
    float scratch[3 * 64];
    vocab_parallel_cross_entropy_forward(NULL, c->work, c->losses, scratch, c->targets, c->N, c->Vp, 0, c->V, NULL);
    double s = 0;
    for (int i = 0; i < c->N; i++) s += c->losses[i];
    return s / c->N;
}

TB_TEST(cross_entropy_backward_matches_finite_differences_and_ignores_padding) {
    ce_case c = {6, 13, 16, NULL, NULL, NULL, NULL};
    c.targets = malloc((size_t)c.N * sizeof(int32_t));
    for (int i = 0; i < c.N; i++) c.targets[i] = (int32_t)(tb_rng_u64(&rng) % (uint64_t)c.V);
    c.logits = randn((size_t)c.N * c.Vp, 2), c.work = zeros((size_t)c.N * c.Vp), c.losses = zeros((size_t)c.N);
    double loss = ce_objective(&c);
    vocab_parallel_cross_entropy_backward(c.work, c.targets, 1.0f / c.N, c.N, c.Vp, 0);
    float *dlogits = malloc((size_t)c.N * c.Vp * sizeof(float));
    memcpy(dlogits, c.work, (size_t)c.N * c.Vp * sizeof(float));
    TB_CHECK(check("dlogits", c.logits, dlogits, (size_t)c.N * c.Vp, ce_objective, &c, 1e-2f, 96) == 0, "dlogits");
    int padding_zero = 1;
    for (int n = 0; n < c.N; n++)
        for (int v = c.V; v < c.Vp; v++) padding_zero &= dlogits[(size_t)n * c.Vp + v] == 0.0f;
    TB_CHECK(padding_zero, "padded vocabulary columns must get zero gradient");
    // the padded logits take no part in the loss
    for (int n = 0; n < c.N; n++) c.logits[(size_t)n * c.Vp + c.V] = 100.0f;
    TB_CHECK(ce_objective(&c) == loss, "padded logits changed the loss");
    free(c.targets), free(c.logits), free(c.work), free(c.losses), free(dlogits);
}

// ---------------------------------------------------------------------------------------
// a whole transformer layer, through its spec

typedef struct {
    transformer_layer_spec spec;
    tb_layer_dims d;
    transformer_layer_params p;
    transformer_layer_acts a;
    transformer_workspace ws;
    float *inp, *out, *R;
} layer_case;

static double layer_objective(void *ctx) {
    layer_case *c = ctx;
    transformer_layer_forward(&c->spec, 0, &c->d, &c->p, &c->a, &c->ws, c->inp, c->out);
    return dot(c->out, c->R, (size_t)c->d.N * c->d.C);
}

// qk: --qk-layernorm (the q and k norms, of the layer's norm kind)
static void layer_check(int rms, int swiglu, int G, int selective, int rope, int flash, int qk) {
    tb_config cfg;
    config_defaults(&cfg);
    cfg.micro_batch_size = 2, cfg.seq_length = 5, cfg.hidden_size = 16, cfg.num_attention_heads = 4;
    cfg.num_query_groups = G, cfg.ffn_hidden_size = 24, cfg.normalization = rms, cfg.swiglu = swiglu;
    if (rope) cfg.position_embedding_type = TB_POS_ROPE, cfg.rotary_percent = 0.5;  // head size 4: 2 rotated
    if (flash) cfg.attention_backend = TB_ATTENTION_FLASH;
    cfg.qk_layernorm = qk;
    config_resolve(&cfg);
    layer_case c;
    memset(&c, 0, sizeof c);
    transformer_layer_spec_for(&cfg, &c.spec);
    c.d = tb_layer_dims_for(&cfg, &c.spec, NULL);
    tb_allocator mem;
    tb_allocator_init(&mem, 0, NULL, NULL);
    const tb_layer_dims *d = &c.d;
    const size_t hs = qk ? (size_t)d->hs : 0;  // the q/k norms' (none without)
    size_t sizes[16] = {(size_t)d->C, (size_t)d->C, (size_t)d->QKV * d->C, (size_t)d->QKV,
                        (size_t)d->C * d->C, (size_t)d->C, (size_t)d->C, (size_t)d->C,
                        (size_t)d->F1 * d->C, (size_t)d->F1, (size_t)d->C * d->F, (size_t)d->C,
                        hs, rms ? 0 : hs, hs, rms ? 0 : hs};
    const char *names[16] = {"ln1_w", "ln1_b", "qkv_w", "qkv_b", "proj_w", "proj_b", "ln2_w", "ln2_b",
                             "fc1_w", "fc1_b", "fc2_w", "fc2_b", "q_norm_w", "q_norm_b", "k_norm_w", "k_norm_b"};
    float **pp = &c.p.ln1_w;  // the struct begins with 16 float pointers in this order
    transformer_layer_params g;
    memset(&g, 0, sizeof g);
    float **gp = &g.ln1_w;
    for (int i = 0; i < 16; i++) {
        if (!sizes[i]) continue;  // (stays NULL: no such tensor)
        pp[i] = randn(sizes[i], 0.3f);
        if (i == 0 || i == 6 || i == 12 || i == 14) for (size_t j = 0; j < sizes[i]; j++) pp[i][j] += 1.0f;
        gp[i] = zeros(sizes[i]);
    }
    transformer_layer_acts_alloc(&c.a, &mem, d, selective, 0);
    transformer_workspace_alloc(&c.ws, &mem, &c.d);
    c.inp = randn((size_t)d->N * d->C, 1), c.out = zeros((size_t)d->N * d->C), c.R = randn((size_t)d->N * d->C, 1);
    float *dinp = zeros((size_t)d->N * d->C);
    layer_objective(&c);
    transformer_layer_backward(&c.spec, 0, d, &c.p, &g, &c.a, &c.ws, c.inp, c.R, dinp);
    TB_CHECK(check("dinp", c.inp, dinp, (size_t)d->N * d->C, layer_objective, &c, 1e-2f, 60) == 0,
             "layer dinp (rms %d swiglu %d G %d selective %d)", rms, swiglu, G, selective);
    for (int i = 0; i < 16; i++) {
        if (!sizes[i] || (rms && (i == 1 || i == 7))) continue;  // RMSNorm has no bias
        TB_CHECK(check(names[i], pp[i], gp[i], sizes[i], layer_objective, &c, 1e-2f, 24) == 0,
                 "layer %s (rms %d swiglu %d G %d qk %d)", names[i], rms, swiglu, G, qk);
    }
    for (int i = 0; i < 16; i++) free(pp[i]), free(gp[i]);
    transformer_layer_acts_free(&c.a, &mem);
    transformer_workspace_free(&c.ws, &mem);
    free(c.inp), free(c.out), free(c.R), free(dinp);
    TB_CHECK(mem.stats.total_current == 0, "layer buffers leaked: %zu bytes", mem.stats.total_current);
}

TB_TEST(transformer_layer_layernorm_gelu_backward_matches_finite_differences) { layer_check(0, 0, 4, 0, 0, 0, 0); }
TB_TEST(transformer_layer_rmsnorm_swiglu_gqa_backward_matches_finite_differences) { layer_check(1, 1, 2, 0, 0, 0, 0); }
TB_TEST(transformer_layer_selective_recompute_backward_matches_finite_differences) { layer_check(0, 0, 2, 1, 0, 0, 0); }
// --qk-layernorm: the q and k norms' weights (and LayerNorm's biases) and everything before them;
// LayerNorm with multi-head attention, RMSNorm with grouped-query attention and RoPE after the
// norms, the flash core, selective recompute
TB_TEST(transformer_layer_qk_layernorm_backward_matches_finite_differences) {
    layer_check(0, 0, 4, 0, 0, 0, 1);
    layer_check(1, 1, 2, 0, 1, 0, 1);
    layer_check(1, 1, 2, 1, 1, 1, 1);
}
// a LLaMA-style layer: RMSNorm, SwiGLU, grouped-query attention and RoPE, also recomputed,
// with either attention core
TB_TEST(transformer_layer_llama_style_rope_backward_matches_finite_differences) {
    layer_check(1, 1, 2, 0, 1, 0, 0);
    layer_check(1, 1, 2, 1, 1, 0, 0);
    layer_check(1, 1, 2, 0, 1, 1, 0);
    layer_check(0, 0, 4, 1, 0, 1, 0);
}

// ---------------------------------------------------------------------------------------
// the MoE layer (router, dispatch, experts, combine) on the objective Σ out ⊙ R + aux loss

typedef struct {
    tb_moe_dims m;
    const tb_activation_module *act;
    int N, C;
    moe_layer_params p;
    moe_layer_acts a;
    moe_workspace ws;
    float *inp, *out, *R;
} moe_case;

static double moe_objective(void *ctx) {
    moe_case *c = ctx;
    moe_layer_forward(&c->m, c->act, 0, c->N, c->C, &c->p, &c->a, &c->ws, c->inp, c->out, NULL);
    double aux = c->m.aux_loss ? c->m.aux_coeff * router_aux_loss(&c->m, c->N, c->a.scores, c->a.topk,
                                                                  c->a.selected_per_expert)
                               : 0.0;
    return dot(c->out, c->R, (size_t)c->N * c->C) + aux;
}

// The smallest gap between a token's k-th and (k+1)-th router logit: a perturbation smaller
// than it leaves the routing as it is (finite differences across a re-routing are meaningless).
static float routing_margin(const moe_case *c) {
    float margin = INFINITY;
    for (int n = 0; n < c->N; n++) {
        const float *l = c->ws.logits + (size_t)n * c->m.E;
        const int32_t *idx = c->a.topk + (size_t)n * c->m.k;
        float kth = l[idx[c->m.k - 1]], next = -INFINITY;
        for (int e = 0; e < c->m.E; e++) {
            int chosen = 0;
            for (int j = 0; j < c->m.k; j++) chosen |= idx[j] == e;
            if (!chosen && l[e] > next) next = l[e];
        }
        if (kth - next < margin) margin = kth - next;
    }
    return margin;
}

// The router's score function and load-balancing type of the next moe_check (softmax and
// aux_loss unless a test sets them).
static struct {
    int score_function, load_balancing;
} router_variant = {TB_MOE_SCORE_SOFTMAX, TB_MOE_LB_AUX_LOSS};

static void moe_check_shared(int swiglu, int pre_softmax, int k, int bias, double coeff, double capacity, int shared) {
    tb_config cfg;
    config_defaults(&cfg);
    cfg.moe_router_score_function = router_variant.score_function;
    cfg.moe_router_load_balancing_type = router_variant.load_balancing;
    cfg.seq_length = 5;  // the 10 tokens are 2 sequences (seq_aux_loss)
    cfg.hidden_size = 16, cfg.num_experts = 4, cfg.moe_router_topk = k, cfg.moe_ffn_hidden_size = 12;
    cfg.moe_router_pre_softmax = pre_softmax, cfg.moe_aux_loss_coeff = coeff, cfg.swiglu = swiglu;
    // the position policy: which choices drop depends on the routing alone (kept by the margin below)
    cfg.moe_expert_capacity_factor = capacity, cfg.moe_token_drop_policy = TB_MOE_DROP_POSITION;
    cfg.moe_shared_expert_intermediate_size = shared;
    config_resolve(&cfg);
    transformer_layer_spec spec;
    transformer_layer_spec_for(&cfg, &spec);
    moe_case c;
    memset(&c, 0, sizeof c);
    c.m = tb_moe_dims_for(&cfg, spec.activation->fc1_factor);
    c.act = spec.activation;
    c.N = 10, c.C = cfg.hidden_size;
    const int E = c.m.E, C = c.C, F = c.m.F, F1 = c.m.F1;
    tb_allocator mem;
    tb_allocator_init(&mem, 0, NULL, NULL);
    moe_workspace_alloc(&c.ws, &mem, &c.m, c.N, C);
    size_t counts[TB_MOE_SAVED];
    void **slots[TB_MOE_SAVED];
    moe_layer_saved_counts(&c.m, c.N, C, counts);
    moe_layer_saved_slots(&c.a, slots);
    for (int i = 0; i < TB_MOE_SAVED; i++) *slots[i] = zeros(counts[i]);
    moe_layer_params g;
    memset(&g, 0, sizeof g);
    // parameters (and tokens) drawn until every token's routing has a clear margin
    float margin = 0;
    for (int attempt = 0; attempt < 200 && margin < 0.1f; attempt++) {
        free(c.p.router_w), free(c.inp);
        c.p.router_w = randn((size_t)E * C, 0.4f);
        c.inp = randn((size_t)c.N * C, 1);
        router_forward(&c.m, c.N, C, c.inp, c.p.router_w, c.ws.logits, c.a.scores, c.a.topk, c.a.probs);
        margin = routing_margin(&c);
    }
    TB_REQUIRE(margin >= 0.1f, "no draw with a routing margin of 0.1");
    g.router_w = zeros((size_t)E * C);
    for (int e = 0; e < E; e++) {
        c.p.fc1_w[e] = randn((size_t)F1 * C, 0.3f), g.fc1_w[e] = zeros((size_t)F1 * C);
        c.p.fc2_w[e] = randn((size_t)C * F, 0.3f), g.fc2_w[e] = zeros((size_t)C * F);
        if (bias) {
            c.p.fc1_b[e] = randn((size_t)F1, 0.3f), g.fc1_b[e] = zeros((size_t)F1);
            c.p.fc2_b[e] = randn((size_t)C, 0.3f), g.fc2_b[e] = zeros((size_t)C);
        }
    }
    const int Fs = c.m.Fs, Fs1 = c.m.Fs1;
    if (shared) {
        c.p.shared_fc1_w = randn((size_t)Fs1 * C, 0.3f), g.shared_fc1_w = zeros((size_t)Fs1 * C);
        c.p.shared_fc2_w = randn((size_t)C * Fs, 0.3f), g.shared_fc2_w = zeros((size_t)C * Fs);
        c.p.shared_fc1_b = randn((size_t)Fs1, 0.3f), g.shared_fc1_b = zeros((size_t)Fs1);
        c.p.shared_fc2_b = randn((size_t)C, 0.3f), g.shared_fc2_b = zeros((size_t)C);
    }
    c.out = zeros((size_t)c.N * C), c.R = randn((size_t)c.N * C, 1);
    float *dinp = zeros((size_t)c.N * C);
    moe_objective(&c);
    int used = 0, kept = 0;
    for (int e = 0; e < E; e++) used += c.a.tokens_per_expert[e] > 0, kept += c.a.tokens_per_expert[e];
    TB_CHECK(used >= 2, "the draw routes to %d experts only", used);
    if (capacity > 0) TB_CHECK(kept < c.N * k, "capacity %g dropped nothing", capacity);
    moe_layer_backward(&c.m, c.act, 0, c.N, C, &c.p, &g, &c.a, &c.ws, 1.0f, c.inp, c.R, dinp);
    const char *what = swiglu ? "swiglu" : "gelu";
    TB_CHECK(check("dinp", c.inp, dinp, (size_t)c.N * C, moe_objective, &c, 1e-2f, 60) == 0,
             "moe dinp (%s, pre_softmax %d, k %d)", what, pre_softmax, k);
    TB_CHECK(check("router_w", c.p.router_w, g.router_w, (size_t)E * C, moe_objective, &c, 1e-2f, 40) == 0,
             "moe router (%s, pre_softmax %d, k %d, coeff %g)", what, pre_softmax, k, coeff);
    for (int e = 0; e < E; e++) {
        if (c.a.tokens_per_expert[e] == 0) continue;  // no token: no gradient (checked below)
        TB_CHECK(check("fc1_w", c.p.fc1_w[e], g.fc1_w[e], (size_t)F1 * C, moe_objective, &c, 1e-2f, 16) == 0,
                 "expert %d fc1 (%s, k %d)", e, what, k);
        TB_CHECK(check("fc2_w", c.p.fc2_w[e], g.fc2_w[e], (size_t)C * F, moe_objective, &c, 1e-2f, 16) == 0,
                 "expert %d fc2 (%s, k %d)", e, what, k);
        if (bias) {
            TB_CHECK(check("fc1_b", c.p.fc1_b[e], g.fc1_b[e], (size_t)F1, moe_objective, &c, 1e-2f, 8) == 0,
                     "expert %d fc1 bias", e);
            TB_CHECK(check("fc2_b", c.p.fc2_b[e], g.fc2_b[e], (size_t)C, moe_objective, &c, 1e-2f, 8) == 0,
                     "expert %d fc2 bias", e);
        }
    }
    if (shared) {
        TB_CHECK(check("shared_fc1_w", c.p.shared_fc1_w, g.shared_fc1_w, (size_t)Fs1 * C, moe_objective, &c, 1e-2f,
                       16) == 0 &&
                     check("shared_fc2_w", c.p.shared_fc2_w, g.shared_fc2_w, (size_t)C * Fs, moe_objective, &c, 1e-2f,
                           16) == 0 &&
                     check("shared_fc1_b", c.p.shared_fc1_b, g.shared_fc1_b, (size_t)Fs1, moe_objective, &c, 1e-2f, 8) == 0 &&
                     check("shared_fc2_b", c.p.shared_fc2_b, g.shared_fc2_b, (size_t)C, moe_objective, &c, 1e-2f, 8) == 0,
                 "shared expert (%s)", what);
        float **sp[] = {&c.p.shared_fc1_w, &c.p.shared_fc2_w, &c.p.shared_fc1_b, &c.p.shared_fc2_b,
                        &g.shared_fc1_w,   &g.shared_fc2_w,   &g.shared_fc1_b,   &g.shared_fc2_b};
        for (int i = 0; i < 8; i++) free(*sp[i]);
    }
    for (int e = 0; e < E; e++) {
        free(c.p.fc1_w[e]), free(c.p.fc2_w[e]), free(c.p.fc1_b[e]), free(c.p.fc2_b[e]);
        free(g.fc1_w[e]), free(g.fc2_w[e]), free(g.fc1_b[e]), free(g.fc2_b[e]);
    }
    for (int i = 0; i < TB_MOE_SAVED; i++) free(*slots[i]);
    moe_layer_release(&c.a, &mem);
    free(c.p.router_w), free(g.router_w), free(c.inp), free(c.out), free(c.R), free(dinp);
    moe_workspace_free(&c.ws, &mem);
    TB_CHECK(mem.stats.total_current == 0, "moe workspace leaked: %zu bytes", mem.stats.total_current);
}

static void moe_check_capacity(int swiglu, int pre_softmax, int k, int bias, double coeff, double capacity) {
    moe_check_shared(swiglu, pre_softmax, k, bias, coeff, capacity, 0);
}

static void moe_check(int swiglu, int pre_softmax, int k, int bias, double coeff) {
    moe_check_capacity(swiglu, pre_softmax, k, bias, coeff, 0);
}

// top-2, softmax over the chosen logits, GELU experts with biases, the aux loss trained on
TB_TEST(moe_layer_gelu_top2_backward_matches_finite_differences) { moe_check(0, 0, 2, 1, 0.1); }
// Megatron's pre-softmax routing, SwiGLU experts without biases
TB_TEST(moe_layer_pre_softmax_swiglu_backward_matches_finite_differences) { moe_check(1, 1, 2, 0, 0.1); }
// top-1: without pre-softmax the one prob is 1 and the router learns from the aux loss alone
TB_TEST(moe_layer_top1_router_gradient_matches_finite_differences) {
    moe_check(0, 0, 1, 1, 0.5);
    moe_check(0, 1, 1, 1, 0.0);
}
// a shared expert (hidden 8) every token goes through, its output added to the routed experts'
TB_TEST(moe_layer_with_a_shared_expert_backward_matches_finite_differences) {
    moe_check_shared(0, 0, 2, 1, 0.1, 0, 8);
    moe_check_shared(1, 1, 2, 1, 0.1, 0, 8);
}

// Megatron's sigmoid scores: top-2 probs normalised over the chosen (and the aux loss's scores
// over every expert), top-1 the sigmoid itself, and with dropped tokens (pre-softmax applies to
// softmax only: the config refuses it with sigmoid)
TB_TEST(moe_layer_sigmoid_router_backward_matches_finite_differences) {
    router_variant.score_function = TB_MOE_SCORE_SIGMOID;
    moe_check(0, 0, 2, 1, 0.1);
    moe_check(1, 0, 1, 0, 0.5);
    moe_check_capacity(0, 0, 2, 1, 0.1, 0.8);
    router_variant.score_function = TB_MOE_SCORE_SOFTMAX;
}

// Megatron's sequence-level aux loss: per sequence of 5 tokens with its own counts, averaged
// over the 2 sequences; with softmax and with sigmoid scores
TB_TEST(moe_layer_seq_aux_loss_backward_matches_finite_differences) {
    router_variant.load_balancing = TB_MOE_LB_SEQ_AUX_LOSS;
    moe_check(0, 0, 2, 1, 0.5);
    moe_check(0, 1, 1, 1, 0.5);
    router_variant.score_function = TB_MOE_SCORE_SIGMOID;
    moe_check(0, 0, 2, 1, 0.5);
    router_variant.score_function = TB_MOE_SCORE_SOFTMAX;
    router_variant.load_balancing = TB_MOE_LB_AUX_LOSS;
}

// capacity 0.8 of the even share: dropped choices take no part in the output or the gradients
TB_TEST(moe_layer_with_dropped_tokens_backward_matches_finite_differences) {
    moe_check_capacity(0, 0, 2, 1, 0.1, 0.8);
    moe_check_capacity(1, 1, 2, 0, 0.1, 0.8);
}

// ---------------------------------------------------------------------------------------
// the whole model: loss → every parameter tensor

typedef struct {
    gpt_model *m;
    int32_t *inputs, *targets;
    // MoE: layer 0's routing at the unperturbed parameters, and the perturbations that changed
    // it (a finite difference across a re-routing measures the jump, not the gradient)
    int32_t *routing;
    int rerouted, probes;
} model_case;

static double model_objective(void *ctx) {
    model_case *c = ctx;
    moe_stats *stats = c->m->block.d.moe_stats;
    if (stats) moe_stats_reset(stats);
    double loss = gpt_forward(c->m, c->inputs, c->targets);
    // MoE: the objective backward differentiates is the loss plus each layer's coeff · aux loss
    for (int l = 0; stats && l < stats->num_layers; l++)
        loss += c->m->cfg->moe_aux_loss_coeff * stats->load_balancing_loss[l];
    if (c->routing) {
        const moe_layer_acts *a = &c->m->block.slots[0].acts[0].moe;
        const size_t n = (size_t)c->m->B * c->m->T * c->m->cfg->moe_router_topk;
        c->probes++;
        if (memcmp(a->topk, c->routing, n * sizeof(int32_t)) != 0) {
            c->rerouted++;
            loss = NAN;  // not compared (check counts no mismatch for it); counted and bounded below
        }
    }
    // release the activations the forward kept (a backward into scratch gradients would
    // disturb the analytic ones, so free directly)
    gpt_backward(c->m, 0.0f);
    return loss;
}

static void model_check_moe(int untied, int rms, int rope, int experts) {
    tb_config cfg;
    config_defaults(&cfg);
    cfg.num_layers = 2, cfg.hidden_size = 16, cfg.num_attention_heads = 2, cfg.seq_length = 6;
    cfg.micro_batch_size = 2, cfg.vocab_size = 37, cfg.make_vocab_size_divisible_by = 8;
    cfg.untie_embeddings_and_output_weights = untied, cfg.normalization = rms, cfg.init_method_std = 0.2;
    if (rope) cfg.position_embedding_type = TB_POS_ROPE, cfg.rotary_interleaved = 1;
    // MoE in layer 0 (freq 2), layer 1 dense
    if (experts) cfg.num_experts = experts, cfg.moe_layer_freq = 2, cfg.moe_ffn_hidden_size = 8, cfg.moe_aux_loss_coeff = 0.05;
    if (experts) cfg.moe_shared_expert_intermediate_size = 8;
    config_resolve(&cfg);
    tb_allocator mem;
    tb_allocator_init(&mem, 0, NULL, NULL);
    gpt_model m;
    gpt_model_init(&m, &cfg, &mem, NULL);
    model_case c = {&m, malloc(12 * sizeof(int32_t)), malloc(12 * sizeof(int32_t)), NULL, 0, 0};
    for (int i = 0; i < 12; i++) {
        c.inputs[i] = (int32_t)(tb_rng_u64(&rng) % 37);
        c.targets[i] = (int32_t)(tb_rng_u64(&rng) % 37);
    }
    // randomise the norm weights too, so their gradients are not trivially symmetric
    for (int i = 0; i < m.nparams; i++)
        if (m.params[i].ndim == 1)
            for (size_t j = 0; j < m.params[i].numel; j++)
                m.param_memory[m.params[i].offset + j] += 0.2f * tb_rng_normal(&rng);
    float *grads = malloc(m.num_parameters * sizeof(float));
    gpt_zero_grad(&m);
    gpt_forward(&m, c.inputs, c.targets);
    if (experts) {
        const size_t n = 12 * (size_t)cfg.moe_router_topk;
        c.routing = malloc(n * sizeof(int32_t));
        memcpy(c.routing, m.block.slots[0].acts[0].moe.topk, n * sizeof(int32_t));
    }
    gpt_backward(&m, 1.0f);
    memcpy(grads, m.grad_memory, m.num_parameters * sizeof(float));
    for (int i = 0; i < m.nparams; i++) {
        const gpt_param *p = &m.params[i];
        size_t real = (size_t)p->hf_rows * p->cols;  // padded vocabulary rows: checked below
        TB_CHECK(check(p->name, m.param_memory + p->offset, grads + p->offset, real, model_objective, &c,
                       1e-2f, 12) == 0,
                 "%s (untied %d, rms %d)", p->name, untied, rms);
        for (size_t j = real; j < p->numel; j++)
            TB_CHECK(grads[p->offset + j] == 0.0f, "%s: padded row gradient non-zero", p->name);
    }
    if (experts) {
        printf("    %d of %d perturbations re-routed a token (not compared)\n", c.rerouted, c.probes);
        TB_CHECK(c.rerouted * 20 <= c.probes, "%d of %d perturbations re-routed a token", c.rerouted, c.probes);
    }
    free(grads), free(c.inputs), free(c.targets), free(c.routing);
    gpt_model_free(&m);
    TB_CHECK(mem.stats.total_current == 0, "model buffers leaked: %zu bytes", mem.stats.total_current);
}

static void model_check(int untied, int rms, int rope) { model_check_moe(untied, rms, rope, 0); }

TB_TEST(gpt_tied_layernorm_gradients_match_finite_differences) { model_check(0, 0, 0); }
TB_TEST(gpt_untied_rmsnorm_gradients_match_finite_differences) { model_check(1, 1, 0); }
// no wpe.weight: positions enter through the rotation of q and k only
TB_TEST(gpt_rope_gradients_match_finite_differences) { model_check(1, 1, 1); }
// a MoE layer (with a shared expert) and a dense one: the router, every expert, the shared
// expert and the rest, through the whole model
TB_TEST(gpt_moe_gradients_match_finite_differences) { model_check_moe(0, 0, 0, 4); }

int main(void) {
    tb_rng_init(&rng, 42);
    cpu_set_num_threads(2);
    TB_RUN(linear_backward_matches_finite_differences);
    TB_RUN(layernorm_backward_matches_finite_differences);
    TB_RUN(rmsnorm_backward_matches_finite_differences);
    TB_RUN(gelu_backward_matches_finite_differences);
    TB_RUN(swiglu_backward_matches_finite_differences);
    TB_RUN(attention_backward_matches_finite_differences);
    TB_RUN(grouped_query_attention_backward_matches_finite_differences);
    TB_RUN(rope_backward_matches_finite_differences);
    TB_RUN(rope_rotates_as_megatron_and_depends_only_on_relative_position);
    TB_RUN(embedding_backward_matches_finite_differences);
    TB_RUN(cross_entropy_backward_matches_finite_differences_and_ignores_padding);
    TB_RUN(transformer_layer_layernorm_gelu_backward_matches_finite_differences);
    TB_RUN(transformer_layer_rmsnorm_swiglu_gqa_backward_matches_finite_differences);
    TB_RUN(transformer_layer_llama_style_rope_backward_matches_finite_differences);
    TB_RUN(transformer_layer_selective_recompute_backward_matches_finite_differences);
    TB_RUN(transformer_layer_qk_layernorm_backward_matches_finite_differences);
    TB_RUN(moe_layer_gelu_top2_backward_matches_finite_differences);
    TB_RUN(moe_layer_pre_softmax_swiglu_backward_matches_finite_differences);
    TB_RUN(moe_layer_top1_router_gradient_matches_finite_differences);
    TB_RUN(moe_layer_with_dropped_tokens_backward_matches_finite_differences);
    TB_RUN(moe_layer_with_a_shared_expert_backward_matches_finite_differences);
    TB_RUN(moe_layer_sigmoid_router_backward_matches_finite_differences);
    TB_RUN(moe_layer_seq_aux_loss_backward_matches_finite_differences);
    TB_RUN(gpt_tied_layernorm_gradients_match_finite_differences);
    TB_RUN(gpt_untied_rmsnorm_gradients_match_finite_differences);
    TB_RUN(gpt_rope_gradients_match_finite_differences);
    TB_RUN(gpt_moe_gradients_match_finite_differences);
    return tb_test_summary();
}
