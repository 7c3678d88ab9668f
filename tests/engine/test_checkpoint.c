// test_checkpoint.c — the model's weights as safetensors in Hugging Face GPT-2's names and
// shapes (checkpoint/gpt_checkpoint.h): a save/load round trip restores every bit; the file
// holds GPT-2's names, unpadded vocabulary and transposed Conv1D weights; a Hugging Face
// file ("transformer." prefix, attention-mask buffers, lm_head.weight) loads; every mismatch
// is refused with a message naming the tensor and both shapes; and pretrain_gpt's --save and
// --load carry the weights from one run into the next.
#include <stdint.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <jansson.h>

#include "backend/cpu/kernels.h"
#include "checkpoint/gpt_checkpoint.h"
#include "checkpoint/safetensors.h"
#include "config.h"
#include "core/memory.h"
#include "core/rng.h"
#include "datasets/gpt_dataset.h"
#include "models/gpt.h"
#include "tb_shell.h"
#include "tb_run_dir.h"
#include "tb_test.h"

#define TMP(name) TB_TEST_TMPDIR "/checkpoint." name
#define PRETRAIN TB_BIN_DIR "/pretrain_gpt"

// The tiny models: V = 50 padded to Vp = 64 (divisible by 16), so the file's unpadded
// vocabulary differs from the engine's buffer.
enum { V = 50, VP = 64, C = 32, L = 2, NH = 4, T = 16, B = 2 };

// GPT-2 style: LayerNorm, GELU, biases, tied output layer.
static void gpt2_config(tb_config *c) {
    config_defaults(c);
    c->num_layers = L, c->hidden_size = C, c->num_attention_heads = NH, c->seq_length = T;
    c->vocab_size = V, c->make_vocab_size_divisible_by = 16, c->micro_batch_size = B;
    c->num_threads = 2, c->train_iters = 1;
    config_resolve(c);
}

// Llama style: RMSNorm, SwiGLU, grouped-query attention (2 groups for 4 heads), no linear
// biases, untied output layer.
static void llama_config(tb_config *c) {
    gpt2_config(c);
    c->normalization = TB_NORM_RMSNORM, c->swiglu = 1, c->num_query_groups = 2;
    c->disable_bias_linear = 1, c->untie_embeddings_and_output_weights = 1;
    config_resolve(c);
}

// A model with its own config copy and allocator (the model keeps pointers to both).
typedef struct box {
    tb_config cfg;
    tb_allocator mem;
    gpt_model m;
} box;

static box *box_new(const tb_config *cfg, int64_t seed) {
    box *b = calloc(1, sizeof *b);
    b->cfg = *cfg;
    b->cfg.seed = seed;
    tb_allocator_init(&b->mem, 0, NULL, NULL);
    gpt_model_init(&b->m, &b->cfg, &b->mem, NULL);
    return b;
}

// Frees the model; returns the bytes still allocated (0 unless something leaked).
static size_t box_free(box *b) {
    if (!b) return 0;
    gpt_model_free(&b->m);
    size_t left = b->mem.stats.total_current;
    free(b);
    return left;
}

static int config_ok(const tb_config *c) {
    tb_error err = {{0}};
    if (config_validate(c, &err) == 0) return 1;
    printf("    invalid config: %s\n", err.msg);
    return 0;
}

// A fixed batch of B·T tokens.
static void fixed_batch(int32_t *inputs, int32_t *targets) {
    for (int i = 0; i < B * T; i++) inputs[i] = (i * 37 + 11) % V, targets[i] = (i * 13 + 5) % V;
}

// The model's mean loss on a batch (forward, then a backward of weight 0 that releases the
// activations, then the gradients cleared).
static float loss_of(gpt_model *m, const int32_t *inputs, const int32_t *targets) {
    float loss = gpt_forward(m, inputs, targets);
    gpt_backward(m, 0.0f);
    gpt_zero_grad(m);
    return loss;
}

// Sets every weight directly (not through the init): random values in each tensor's real
// rows, the padded vocabulary rows left 0.
static void set_weights(gpt_model *m, uint64_t seed) {
    tb_rng rng;
    tb_rng_init(&rng, seed);
    for (int i = 0; i < m->nparams; i++) {
        const gpt_param *p = &m->params[i];
        float *x = m->param_memory + p->offset;
        size_t real = (size_t)p->hf_rows * p->cols;
        int norm = strstr(p->name, "ln_") != NULL;
        for (size_t j = 0; j < real; j++)
            x[j] = p->ndim == 2 ? 0.05f * tb_rng_normal(&rng)
                               : (norm ? 1.0f : 0.0f) + 0.1f * tb_rng_normal(&rng);
    }
}

// ---------------------------------------------------------------------------------------
// A set of tensors to write as a file of our own making (Hugging Face's layout).

typedef struct owned {
    char name[96];
    int ndim;
    int64_t shape[TB_ST_MAX_DIMS];
    float *data;
} owned;

typedef struct tensor_set {
    owned *t;
    int n, cap;
} tensor_set;

static size_t shape_numel(int ndim, const int64_t *shape) {
    size_t n = 1;
    for (int d = 0; d < ndim; d++) n *= (size_t)shape[d];
    return n;
}

// Adds a tensor (data copied; NULL: zeros) and returns its buffer.
static float *set_add(tensor_set *s, const char *name, int ndim, const int64_t *shape, const float *data) {
    if (s->n == s->cap) {
        s->cap = s->cap ? 2 * s->cap : 32;
        s->t = realloc(s->t, (size_t)s->cap * sizeof *s->t);
    }
    owned *o = &s->t[s->n++];
    memset(o, 0, sizeof *o);
    snprintf(o->name, sizeof o->name, "%s", name);
    o->ndim = ndim;
    if (ndim) memcpy(o->shape, shape, (size_t)ndim * sizeof *shape);
    size_t n = shape_numel(ndim, shape);
    o->data = calloc(n ? n : 1, sizeof(float));
    if (data) memcpy(o->data, data, n * sizeof(float));
    return o->data;
}

static owned *set_find(tensor_set *s, const char *name) {
    for (int i = 0; i < s->n; i++)
        if (!strcmp(s->t[i].name, name)) return &s->t[i];
    return NULL;
}

static void set_remove(tensor_set *s, const char *name) {
    owned *o = set_find(s, name);
    if (!o) return;
    free(o->data);
    int i = (int)(o - s->t);
    memmove(&s->t[i], &s->t[i + 1], (size_t)(s->n - i - 1) * sizeof *s->t);
    s->n--;
}

// Every model tensor in Hugging Face GPT-2's layout, written independently of
// gpt_checkpoint.c: 1-D as [n]; Conv1D weights as [in, out] = the engine's (out, in)
// transposed; embeddings as their first hf_rows (unpadded) rows.
static void set_from_model(tensor_set *s, const gpt_model *m, const char *prefix) {
    char name[96];
    for (int i = 0; i < m->nparams; i++) {
        const gpt_param *p = &m->params[i];
        const float *src = m->param_memory + p->offset;
        snprintf(name, sizeof name, "%s%s", prefix, p->name);
        if (p->ndim == 1) {
            set_add(s, name, 1, (int64_t[]){p->cols}, src);
        } else if (p->hf_transposed) {
            float *dst = set_add(s, name, 2, (int64_t[]){p->cols, p->rows}, NULL);
            for (int r = 0; r < p->rows; r++)
                for (int c = 0; c < p->cols; c++) dst[(size_t)c * p->rows + r] = src[(size_t)r * p->cols + c];
        } else {
            set_add(s, name, 2, (int64_t[]){p->hf_rows, p->cols}, src);
        }
    }
}

static int set_write(const tensor_set *s, const char *path, tb_error *err) {
    tb_st_entry *e = calloc((size_t)s->n + 1, sizeof *e);
    for (int i = 0; i < s->n; i++) {
        e[i].name = s->t[i].name;
        e[i].ndim = s->t[i].ndim;
        memcpy(e[i].shape, s->t[i].shape, sizeof e[i].shape);
        e[i].data = s->t[i].data;
    }
    json_t *meta = json_pack("{s:s}", "format", "pt");
    int rc = tb_safetensors_write(path, e, s->n, meta, err);
    json_decref(meta);
    free(e);
    return rc;
}

static void set_free(tensor_set *s) {
    for (int i = 0; i < s->n; i++) free(s->t[i].data);
    free(s->t);
    memset(s, 0, sizeof *s);
}

// Saves a fresh model of cfg (seed) to path; returns 0 on success.
static int save_model_of(const tb_config *cfg, int64_t seed, const char *path) {
    box *b = box_new(cfg, seed);
    tb_error err = {{0}};
    int rc = gpt_save_safetensors(&b->m, path, 1, &err);
    if (rc != 0) printf("    save %s: %s\n", path, err.msg);
    if (box_free(b) != 0) rc = -1;
    return rc;
}

// ---------------------------------------------------------------------------------------
// 1. round trip

static void round_trip(const tb_config *cfg, const char *path) {
    TB_REQUIRE(config_ok(cfg), "config");
    box *a = box_new(cfg, 1), *b = box_new(cfg, 2);
    const size_t bytes = a->m.num_parameters * sizeof(float);
    TB_CHECK(memcmp(a->m.param_memory, b->m.param_memory, bytes) != 0, "seeds 1 and 2 gave the same weights");
    // garbage in b's padded vocabulary rows: loading must leave them 0, as in a
    const gpt_param *wte = gpt_find_param(&b->m, "wte.weight");
    for (size_t j = (size_t)V * C; j < wte->numel; j++) b->m.param_memory[wte->offset + j] = 7.0f;
    const size_t workspace = a->mem.stats.current[TB_MEM_WORKSPACE];

    tb_error err = {{0}};
    int rc = gpt_save_safetensors(&a->m, path, 1, &err);
    TB_CHECK(rc == 0, "save %s: %s", path, err.msg);
    TB_CHECK(a->mem.stats.current[TB_MEM_WORKSPACE] == workspace, "save left workspace allocated");
    rc = rc == 0 ? gpt_load_safetensors(&b->m, path, &err) : -1;
    TB_CHECK(rc == 0, "load %s: %s", path, err.msg);
    TB_CHECK(b->mem.stats.current[TB_MEM_WORKSPACE] == workspace, "load left workspace allocated");

    int equal = memcmp(a->m.param_memory, b->m.param_memory, bytes) == 0;
    TB_CHECK(equal, "weights after the round trip differ from the saved ones");
    for (int i = 0; !equal && i < a->m.nparams; i++) {
        const gpt_param *p = &a->m.params[i];
        if (memcmp(a->m.param_memory + p->offset, b->m.param_memory + p->offset, p->numel * sizeof(float)))
            printf("    differs: %s\n", p->name);
    }
    int32_t in[B * T], tg[B * T];
    fixed_batch(in, tg);
    float la = loss_of(&a->m, in, tg), lb = loss_of(&b->m, in, tg);
    TB_CHECK(memcmp(&la, &lb, sizeof la) == 0, "loss %.9g after loading, %.9g saved", lb, la);
    TB_CHECK(box_free(a) == 0 && box_free(b) == 0, "allocations left after freeing the models");
    unlink(path);
}

TB_TEST(save_then_load_restores_every_parameter_bitwise_gpt2_layernorm_gelu_biases_tied) {
    tb_config cfg;
    gpt2_config(&cfg);
    round_trip(&cfg, TMP("roundtrip-gpt2.safetensors"));
}

TB_TEST(save_then_load_restores_every_parameter_bitwise_rmsnorm_swiglu_gqa_no_bias_untied) {
    tb_config cfg;
    llama_config(&cfg);
    round_trip(&cfg, TMP("roundtrip-llama.safetensors"));
}

// ---------------------------------------------------------------------------------------
// 2. the file's names and shapes

typedef struct want_tensor {
    const char *name;
    int ndim;
    int64_t d0, d1;
} want_tensor;

// Checks the file holds exactly the listed tensors (h.N. entries for every layer), each F32
// with the listed shape.
static void check_names_and_shapes(const tb_safetensors *st, const want_tensor *per_layer, int nlayer,
                                   const want_tensor *global, int nglobal) {
    TB_CHECK(st->ntensors == nglobal + L * nlayer, "%d tensors in the file, expected %d", st->ntensors,
             nglobal + L * nlayer);
    char name[96];
    for (int i = 0; i < nglobal + L * nlayer; i++) {
        const want_tensor *w = i < nglobal ? &global[i] : &per_layer[(i - nglobal) % nlayer];
        if (i < nglobal) snprintf(name, sizeof name, "%s", w->name);
        else snprintf(name, sizeof name, "h.%d.%s", (i - nglobal) / nlayer, w->name);
        const tb_st_tensor *t = tb_safetensors_find(st, name);
        TB_CHECK(t != NULL, "no tensor %s in the file", name);
        if (!t) continue;
        TB_CHECK(!strcmp(t->dtype, "F32"), "%s: dtype %s", name, t->dtype);
        int same = t->ndim == w->ndim && t->shape[0] == w->d0 && (w->ndim == 1 || t->shape[1] == w->d1);
        TB_CHECK(same, "%s: shape [%lld%s%lld] (ndim %d), expected [%lld, %lld] (ndim %d)", name,
                 (long long)t->shape[0], t->ndim > 1 ? ", " : " ", t->ndim > 1 ? (long long)t->shape[1] : 0LL,
                 t->ndim, (long long)w->d0, (long long)w->d1, w->ndim);
    }
    for (int i = 0; i < st->ntensors; i++)
        TB_CHECK(strncmp(st->tensors[i].name, "transformer.", 12) != 0, "%s: saved with a prefix",
                 st->tensors[i].name);
}

// Reads tensor `name` and checks it holds the engine tensor by value: a Conv1D weight
// transposed (file[i][j] == engine[j][i]), an embedding's first hf_rows rows, a vector as is.
static void check_values(const tb_safetensors *st, const gpt_model *m, const char *name) {
    const tb_st_tensor *t = tb_safetensors_find(st, name);
    const gpt_param *p = gpt_find_param(m, name);
    TB_REQUIRE(t && p, "%s: in the file %d, in the model %d", name, t != NULL, p != NULL);
    float *f = malloc((size_t)tb_st_tensor_numel(t) * sizeof(float));
    tb_error err = {{0}};
    int rc = tb_safetensors_read_f32(st, t, f, &err);
    TB_CHECK(rc == 0, "read %s: %s", name, err.msg);
    const float *e = m->param_memory + p->offset;
    int bad = 0;
    if (rc == 0 && p->hf_transposed) {
        // file (in = cols, out = rows), engine (out = rows, in = cols)
        TB_CHECK(t->shape[0] == p->cols && t->shape[1] == p->rows, "%s: not the engine's shape transposed", name);
        for (int i = 0; i < p->cols; i++)
            for (int j = 0; j < p->rows; j++) bad += f[(size_t)i * p->rows + j] != e[(size_t)j * p->cols + i];
    } else if (rc == 0) {
        size_t n = (size_t)p->hf_rows * p->cols;
        TB_CHECK((size_t)tb_st_tensor_numel(t) == n, "%s: %lld elements, expected %zu", name,
                 (long long)tb_st_tensor_numel(t), n);
        bad = memcmp(f, e, n * sizeof(float)) != 0;
    }
    TB_CHECK(bad == 0, "%s: the file's values are not the engine's (%s)", name,
             p->hf_transposed ? "transposed" : "as is");
    free(f);
}

TB_TEST(saved_file_has_hugging_face_gpt2_names_and_shapes) {
    tb_config cfg;
    gpt2_config(&cfg);
    TB_REQUIRE(config_ok(&cfg), "config");
    TB_REQUIRE(cfg.padded_vocab_size == VP, "padded vocab %d", cfg.padded_vocab_size);
    const char *path = TMP("names-gpt2.safetensors");
    box *b = box_new(&cfg, 3);
    tb_error err = {{0}};
    int rc = gpt_save_safetensors(&b->m, path, 1, &err);
    TB_CHECK(rc == 0, "save: %s", err.msg);
    tb_safetensors st;
    rc = rc == 0 ? tb_safetensors_open(&st, path, &err) : -1;
    TB_CHECK(rc == 0, "open: %s", err.msg);
    if (rc == 0) {
        const want_tensor global[] = {
            {"wte.weight", 2, V, C}, {"wpe.weight", 2, T, C}, {"ln_f.weight", 1, C, 0}, {"ln_f.bias", 1, C, 0}};
        const want_tensor layer[] = {
            {"ln_1.weight", 1, C, 0},           {"ln_1.bias", 1, C, 0},
            {"attn.c_attn.weight", 2, C, 3 * C}, {"attn.c_attn.bias", 1, 3 * C, 0},
            {"attn.c_proj.weight", 2, C, C},     {"attn.c_proj.bias", 1, C, 0},
            {"ln_2.weight", 1, C, 0},           {"ln_2.bias", 1, C, 0},
            {"mlp.c_fc.weight", 2, C, 4 * C},    {"mlp.c_fc.bias", 1, 4 * C, 0},
            {"mlp.c_proj.weight", 2, 4 * C, C},  {"mlp.c_proj.bias", 1, C, 0}};
        check_names_and_shapes(&st, layer, 12, global, 4);
        TB_CHECK(tb_safetensors_find(&st, "lm_head.weight") == NULL, "a tied model saved lm_head.weight");
        const char *by_value[] = {"wte.weight",          "wpe.weight",        "h.0.attn.c_attn.weight",
                                  "h.1.attn.c_proj.weight", "h.0.mlp.c_fc.weight", "h.1.mlp.c_proj.weight",
                                  "h.0.attn.c_attn.bias", "ln_f.weight"};
        for (size_t i = 0; i < sizeof by_value / sizeof *by_value; i++) check_values(&st, &b->m, by_value[i]);

        json_t *fmt = st.metadata ? json_object_get(st.metadata, "format") : NULL;
        TB_CHECK(json_is_string(fmt) && !strcmp(json_string_value(fmt), "pt"), "metadata format is not \"pt\"");
        json_t *conf = st.metadata ? json_object_get(st.metadata, "tracebook_config") : NULL;
        json_t *parsed = json_is_string(conf) ? json_loads(json_string_value(conf), 0, NULL) : NULL;
        json_t *hidden = parsed ? json_object_get(parsed, "hidden_size") : NULL;
        TB_CHECK(json_is_integer(hidden) && json_integer_value(hidden) == C,
                 "metadata tracebook_config does not hold hidden_size %d", C);
        json_decref(parsed);
        tb_safetensors_close(&st);
    }
    TB_CHECK(box_free(b) == 0, "allocations left");
    unlink(path);
}

TB_TEST(saved_file_of_rmsnorm_swiglu_gqa_untied_model_has_gqa_and_gated_shapes_and_lm_head) {
    tb_config cfg;
    llama_config(&cfg);
    TB_REQUIRE(config_ok(&cfg), "config");
    const int hs = C / NH, G = 2, QKV = (NH + 2 * G) * hs, F = 4 * C;
    const char *path = TMP("names-llama.safetensors");
    box *b = box_new(&cfg, 4);
    tb_error err = {{0}};
    int rc = gpt_save_safetensors(&b->m, path, 1, &err);
    TB_CHECK(rc == 0, "save: %s", err.msg);
    tb_safetensors st;
    rc = rc == 0 ? tb_safetensors_open(&st, path, &err) : -1;
    TB_CHECK(rc == 0, "open: %s", err.msg);
    if (rc == 0) {
        const want_tensor global[] = {{"wte.weight", 2, V, C},
                                      {"wpe.weight", 2, T, C},
                                      {"ln_f.weight", 1, C, 0},
                                      {"lm_head.weight", 2, V, C}};
        const want_tensor layer[] = {{"ln_1.weight", 1, C, 0},         {"attn.c_attn.weight", 2, C, QKV},
                                     {"attn.c_proj.weight", 2, C, C},  {"ln_2.weight", 1, C, 0},
                                     {"mlp.c_fc.weight", 2, C, 2 * F}, {"mlp.c_proj.weight", 2, F, C}};
        check_names_and_shapes(&st, layer, 6, global, 4);
        const char *by_value[] = {"h.0.attn.c_attn.weight", "h.1.mlp.c_fc.weight", "h.0.mlp.c_proj.weight",
                                  "lm_head.weight", "wte.weight"};
        for (size_t i = 0; i < sizeof by_value / sizeof *by_value; i++) check_values(&st, &b->m, by_value[i]);
        tb_safetensors_close(&st);
    }
    TB_CHECK(box_free(b) == 0, "allocations left");
    unlink(path);
}

// ---------------------------------------------------------------------------------------
// 3. a Hugging Face file

TB_TEST(hugging_face_file_with_prefix_mask_buffers_and_lm_head_loads_into_tied_model) {
    tb_config cfg;
    gpt2_config(&cfg);
    TB_REQUIRE(config_ok(&cfg), "config");
    const char *path = TMP("hf.safetensors");
    // the reference: weights set directly
    box *ref = box_new(&cfg, 5);
    set_weights(&ref->m, 0xC0FFEE);
    // the file: every tensor as transformer.<name>, plus GPT-2's buffers and an lm_head
    tensor_set s = {0};
    set_from_model(&s, &ref->m, "transformer.");
    char name[96];
    for (int l = 0; l < L; l++) {
        snprintf(name, sizeof name, "transformer.h.%d.attn.bias", l);
        float *mask = set_add(&s, name, 4, (int64_t[]){1, 1, T, T}, NULL);
        for (int i = 0; i < T; i++)
            for (int j = 0; j <= i; j++) mask[i * T + j] = 1.0f;
        snprintf(name, sizeof name, "transformer.h.%d.attn.masked_bias", l);
        set_add(&s, name, 0, NULL, (float[]){-1e4f});
    }
    // lm_head.weight (never prefixed in GPT2LMHeadModel) with values unlike wte: a tied
    // model that used them would compute another loss
    float *head = set_add(&s, "lm_head.weight", 2, (int64_t[]){V, C}, NULL);
    for (int i = 0; i < V * C; i++) head[i] = (float)(i % 7) - 3.0f;
    tb_error err = {{0}};
    int rc = set_write(&s, path, &err);
    set_free(&s);
    TB_REQUIRE(rc == 0, "write %s: %s", path, err.msg);

    box *b = box_new(&cfg, 6);
    rc = gpt_load_safetensors(&b->m, path, &err);
    TB_CHECK(rc == 0, "load: %s", err.msg);
    TB_CHECK(memcmp(ref->m.param_memory, b->m.param_memory, ref->m.num_parameters * sizeof(float)) == 0,
             "loaded weights differ from the ones in the file");
    int32_t in[B * T], tg[B * T];
    fixed_batch(in, tg);
    float lref = loss_of(&ref->m, in, tg), lb = loss_of(&b->m, in, tg);
    TB_CHECK(memcmp(&lref, &lb, sizeof lref) == 0, "loss %.9g after loading, %.9g with the weights set directly",
             lb, lref);
    TB_CHECK(lref > 1.0f && lref < 10.0f, "implausible loss %g", lref);
    TB_CHECK(box_free(ref) == 0 && box_free(b) == 0, "allocations left");
    unlink(path);
}

TB_TEST(hugging_face_file_with_prefix_loads_into_untied_rmsnorm_model) {
    tb_config cfg;
    llama_config(&cfg);
    TB_REQUIRE(config_ok(&cfg), "config");
    const char *path = TMP("hf-llama.safetensors");
    box *ref = box_new(&cfg, 5);
    set_weights(&ref->m, 0xBEEF);
    tensor_set s = {0};
    set_from_model(&s, &ref->m, "transformer.");
    // lm_head is outside the transformer in Hugging Face models: keep it unprefixed
    owned *head = set_find(&s, "transformer.lm_head.weight");
    if (head) snprintf(head->name, sizeof head->name, "lm_head.weight");
    tb_error err = {{0}};
    int rc = set_write(&s, path, &err);
    set_free(&s);
    TB_REQUIRE(rc == 0, "write %s: %s", path, err.msg);
    box *b = box_new(&cfg, 6);
    rc = gpt_load_safetensors(&b->m, path, &err);
    TB_CHECK(rc == 0, "load: %s", err.msg);
    TB_CHECK(memcmp(ref->m.param_memory, b->m.param_memory, ref->m.num_parameters * sizeof(float)) == 0,
             "loaded weights differ from the ones in the file");
    int32_t in[B * T], tg[B * T];
    fixed_batch(in, tg);
    float lref = loss_of(&ref->m, in, tg), lb = loss_of(&b->m, in, tg);
    TB_CHECK(memcmp(&lref, &lb, sizeof lref) == 0, "loss %.9g vs %.9g", lb, lref);
    TB_CHECK(box_free(ref) == 0 && box_free(b) == 0, "allocations left");
    unlink(path);
}

// ---------------------------------------------------------------------------------------
// 4. mismatches

// Loads path into a fresh model of cfg; returns the rc, the message in err, and checks the
// failure released its staging memory.
static int load_into(const tb_config *cfg, const char *path, tb_error *err) {
    box *b = box_new(cfg, 9);
    size_t workspace = b->mem.stats.current[TB_MEM_WORKSPACE];
    memset(err, 0, sizeof *err);
    int rc = gpt_load_safetensors(&b->m, path, err);
    TB_CHECK(b->mem.stats.current[TB_MEM_WORKSPACE] == workspace, "load of %s left workspace allocated", path);
    TB_CHECK(box_free(b) == 0, "allocations left");
    return rc;
}

TB_TEST(hidden_size_mismatch_is_refused_naming_the_tensor_and_both_shapes) {
    tb_config c32, c48;
    gpt2_config(&c32);
    gpt2_config(&c48);
    c48.hidden_size = 48;
    config_resolve(&c48);
    TB_REQUIRE(config_ok(&c48), "config");
    const char *path = TMP("hidden32.safetensors");
    TB_REQUIRE(save_model_of(&c32, 1, path) == 0, "save");
    tb_error err;
    char want[2048];
    // the whole file: the first tensor checked (wte) is the first named
    int rc = load_into(&c48, path, &err);
    snprintf(want, sizeof want, "%s: tensor 'wte.weight' has shape [50, 32], the model needs [50, 48]", path);
    TB_CHECK(rc != 0 && !strcmp(err.msg, want), "rc %d, message:\n      %s\n    expected:\n      %s", rc,
             err.msg, want);

    // a hidden-48 file whose c_attn alone is from hidden 32
    box *m48 = box_new(&c48, 1);
    tensor_set s = {0};
    set_from_model(&s, &m48->m, "");
    TB_CHECK(box_free(m48) == 0, "allocations left");
    owned *qkv = set_find(&s, "h.0.attn.c_attn.weight");
    TB_REQUIRE(qkv && qkv->shape[0] == 48 && qkv->shape[1] == 144, "h.0.attn.c_attn.weight of hidden 48");
    free(qkv->data);
    qkv->shape[0] = 32, qkv->shape[1] = 96;
    qkv->data = calloc(32 * 96, sizeof(float));
    const char *mixed = TMP("hidden-mixed.safetensors");
    rc = set_write(&s, mixed, &err);
    TB_REQUIRE(rc == 0, "write: %s", err.msg);
    rc = load_into(&c48, mixed, &err);
    snprintf(want, sizeof want,
             "%s: tensor 'h.0.attn.c_attn.weight' has shape [32, 96], the model needs [48, 144]", mixed);
    TB_CHECK(rc != 0 && !strcmp(err.msg, want), "rc %d, message:\n      %s\n    expected:\n      %s", rc,
             err.msg, want);

    // the engine's own (out, in) layout instead of Conv1D's (in, out) is refused too
    qkv = set_find(&s, "h.0.attn.c_attn.weight");
    qkv->shape[0] = 144, qkv->shape[1] = 48;
    free(qkv->data);
    qkv->data = calloc(144 * 48, sizeof(float));
    rc = set_write(&s, mixed, &err);
    TB_REQUIRE(rc == 0, "write: %s", err.msg);
    rc = load_into(&c48, mixed, &err);
    TB_CHECK(rc != 0 && strstr(err.msg, "'h.0.attn.c_attn.weight' has shape [144, 48], the model needs [48, 144]"),
             "rc %d: %s", rc, err.msg);
    // a padded vocabulary ([Vp, C]) is not the file layout
    set_free(&s);
    box *m32 = box_new(&c32, 1);
    set_from_model(&s, &m32->m, "");
    TB_CHECK(box_free(m32) == 0, "allocations left");
    owned *wte = set_find(&s, "wte.weight");
    free(wte->data);
    wte->shape[0] = VP;
    wte->data = calloc((size_t)VP * C, sizeof(float));
    rc = set_write(&s, mixed, &err);
    set_free(&s);
    TB_REQUIRE(rc == 0, "write: %s", err.msg);
    rc = load_into(&c32, mixed, &err);
    TB_CHECK(rc != 0 && strstr(err.msg, "'wte.weight' has shape [64, 32], the model needs [50, 32]"), "rc %d: %s",
             rc, err.msg);
    unlink(path);
    unlink(mixed);
}

TB_TEST(missing_tensor_is_refused_naming_it_and_its_shape) {
    tb_config cfg;
    gpt2_config(&cfg);
    box *m = box_new(&cfg, 1);
    tensor_set s = {0};
    set_from_model(&s, &m->m, "");
    TB_CHECK(box_free(m) == 0, "allocations left");
    set_remove(&s, "h.1.mlp.c_fc.bias");
    const char *path = TMP("missing.safetensors");
    tb_error err = {{0}};
    int rc = set_write(&s, path, &err);
    set_free(&s);
    TB_REQUIRE(rc == 0, "write: %s", err.msg);
    rc = load_into(&cfg, path, &err);
    char want[2048];
    snprintf(want, sizeof want, "%s: tensor 'h.1.mlp.c_fc.bias' [128] is missing", path);
    TB_CHECK(rc != 0 && !strcmp(err.msg, want), "rc %d, message:\n      %s\n    expected:\n      %s", rc,
             err.msg, want);
    // a file of fewer layers than the model: the first tensor of the missing layer
    tb_config c3 = cfg;
    c3.num_layers = 3;
    config_resolve(&c3);
    const char *two = TMP("two-layers.safetensors");
    TB_REQUIRE(save_model_of(&cfg, 1, two) == 0, "save");
    rc = load_into(&c3, two, &err);
    snprintf(want, sizeof want, "%s: tensor 'h.2.ln_1.weight' [32] is missing", two);
    TB_CHECK(rc != 0 && !strcmp(err.msg, want), "rc %d, message:\n      %s\n    expected:\n      %s", rc,
             err.msg, want);
    unlink(path);
    unlink(two);
}

TB_TEST(extra_layer_in_the_file_is_refused_as_having_no_place) {
    tb_config c2, c3;
    gpt2_config(&c2);
    c3 = c2;
    c3.num_layers = 3;
    config_resolve(&c3);
    const char *path = TMP("three-layers.safetensors");
    TB_REQUIRE(save_model_of(&c3, 1, path) == 0, "save");
    tb_error err;
    int rc = load_into(&c2, path, &err);
    char want[2048];
    snprintf(want, sizeof want, "%s: tensor 'h.2.ln_1.weight' has no place in this model (2 layers, LayerNorm)",
             path);
    TB_CHECK(rc != 0 && !strcmp(err.msg, want), "rc %d, message:\n      %s\n    expected:\n      %s", rc,
             err.msg, want);
    // a LayerNorm file (norm biases) into an RMSNorm model (none): the bias has no place
    tb_config rms = c2;
    rms.normalization = TB_NORM_RMSNORM;
    const char *ln = TMP("layernorm.safetensors");
    TB_REQUIRE(save_model_of(&c2, 1, ln) == 0, "save");
    rc = load_into(&rms, ln, &err);
    TB_CHECK(rc != 0 && strstr(err.msg, "'h.0.ln_1.bias' has no place in this model (2 layers, RMSNorm)"),
             "rc %d: %s", rc, err.msg);
    unlink(path);
    unlink(ln);
}

TB_TEST(tied_model_ignores_lm_head_and_untied_model_demands_it) {
    tb_config tied, untied;
    gpt2_config(&tied);
    untied = tied;
    untied.untie_embeddings_and_output_weights = 1;
    const char *upath = TMP("untied.safetensors"), *tpath = TMP("tied.safetensors");
    // untied file → tied model: loads; wte comes from wte.weight, lm_head.weight is unused
    box *u = box_new(&untied, 1);
    tb_error err = {{0}};
    int rc = gpt_save_safetensors(&u->m, upath, 1, &err);
    TB_REQUIRE(rc == 0, "save: %s", err.msg);
    const gpt_param *uhead = gpt_find_param(&u->m, "lm_head.weight"), *uwte = gpt_find_param(&u->m, "wte.weight");
    TB_REQUIRE(uhead && uwte, "untied model tensors");
    TB_CHECK(memcmp(u->m.param_memory + uhead->offset, u->m.param_memory + uwte->offset,
                    uwte->numel * sizeof(float)) != 0,
             "lm_head equals wte: the test could not tell them apart");
    box *t = box_new(&tied, 2);
    rc = gpt_load_safetensors(&t->m, upath, &err);
    TB_CHECK(rc == 0, "untied file into tied model: %s", err.msg);
    int same = 1;
    for (int i = 0; i < t->m.nparams; i++) {
        const gpt_param *p = &t->m.params[i], *q = gpt_find_param(&u->m, p->name);
        same &= q && !memcmp(t->m.param_memory + p->offset, u->m.param_memory + q->offset, p->numel * sizeof(float));
    }
    TB_CHECK(same, "the tied model's weights are not the file's (lm_head.weight must not replace wte)");
    TB_CHECK(t->m.w.lm_head == t->m.w.wte, "the tied model's output layer is no longer wte");

    // tied file → untied model: lm_head.weight is demanded
    rc = gpt_save_safetensors(&t->m, tpath, 1, &err);
    TB_REQUIRE(rc == 0, "save: %s", err.msg);
    rc = load_into(&untied, tpath, &err);
    char want[2048];
    snprintf(want, sizeof want, "%s: tensor 'lm_head.weight' [50, 32] is missing", tpath);
    TB_CHECK(rc != 0 && !strcmp(err.msg, want), "rc %d, message:\n      %s\n    expected:\n      %s", rc,
             err.msg, want);
    TB_CHECK(box_free(u) == 0 && box_free(t) == 0, "allocations left");
    unlink(upath);
    unlink(tpath);
}

TB_TEST(corrupt_or_absent_file_is_refused_naming_the_path) {
    tb_config cfg;
    gpt2_config(&cfg);
    const char *path = TMP("corrupt.safetensors");
    FILE *f = fopen(path, "wb");
    TB_REQUIRE(f != NULL, "create %s", path);
    fputs("this is not a safetensors file, just some text\n", f);
    fclose(f);
    tb_error err;
    int rc = load_into(&cfg, path, &err);
    TB_CHECK(rc != 0 && strstr(err.msg, path), "rc %d: %s", rc, err.msg);
    const char *absent = TMP("no-such-file.safetensors");
    unlink(absent);
    rc = load_into(&cfg, absent, &err);
    TB_CHECK(rc != 0 && strstr(err.msg, absent), "rc %d: %s", rc, err.msg);
    // a save into a directory that does not exist fails naming the path
    box *b = box_new(&cfg, 1);
    const char *bad = TMP("no-such-dir/weights.safetensors");
    memset(&err, 0, sizeof err);
    size_t workspace = b->mem.stats.current[TB_MEM_WORKSPACE];
    rc = gpt_save_safetensors(&b->m, bad, 1, &err);
    TB_CHECK(rc != 0 && strstr(err.msg, "no-such-dir"), "rc %d: %s", rc, err.msg);
    TB_CHECK(b->mem.stats.current[TB_MEM_WORKSPACE] == workspace, "failed save left workspace allocated");
    TB_CHECK(box_free(b) == 0, "allocations left");
    unlink(path);
}

// ---------------------------------------------------------------------------------------
// 5. through pretrain_gpt

#define FLAGS                                                                                        \
    "--num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 16 --vocab-size 50 "       \
    "--make-vocab-size-divisible-by 16 --micro-batch-size 2 --num-threads 2"

static tb_output sh;  // what the last command printed

// Every tensor of a and b: same names, shapes and bytes. Returns the count that differ.
static int compare_files(const char *a, const char *b) {
    tb_safetensors x, y;
    tb_error err = {{0}};
    if (tb_safetensors_open(&x, a, &err) != 0) return printf("    %s\n", err.msg), 1;
    if (tb_safetensors_open(&y, b, &err) != 0) return tb_safetensors_close(&x), printf("    %s\n", err.msg), 1;
    int bad = x.ntensors != y.ntensors;
    for (int i = 0; i < x.ntensors; i++) {
        const tb_st_tensor *s = &x.tensors[i], *t = tb_safetensors_find(&y, s->name);
        int same = t && t->ndim == s->ndim && !memcmp(t->shape, s->shape, (size_t)s->ndim * sizeof *s->shape);
        if (same) {
            size_t n = (size_t)tb_st_tensor_numel(s);
            float *p = malloc(n * sizeof(float)), *q = malloc(n * sizeof(float));
            same = tb_safetensors_read_f32(&x, s, p, &err) == 0 && tb_safetensors_read_f32(&y, t, q, &err) == 0 &&
                   !memcmp(p, q, n * sizeof(float));
            free(p), free(q);
        }
        if (!same) printf("    %s differs between %s and %s\n", s->name, a, b);
        bad += !same;
    }
    tb_safetensors_close(&x), tb_safetensors_close(&y);
    return bad;
}

// The loss of step `step` in a run directory's metrics, or -1.
static double metrics_loss(const char *run_dir, int step) {
    char path[1024], line[4096];
    tb_rank_path(path, sizeof path, run_dir, TB_RANK_METRICS, 0);
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    double loss = -1;
    while (loss < 0 && fgets(line, sizeof line, f)) {
        json_t *o = json_loads(line, 0, NULL);
        if (json_integer_value(json_object_get(o, "step")) == step && json_is_real(json_object_get(o, "loss")))
            loss = json_real_value(json_object_get(o, "loss"));
        json_decref(o);
    }
    fclose(f);
    return loss;
}

TB_TEST(pretrain_gpt_save_then_load_carries_the_weights_bitwise) {
    const char *a = TMP("run-a.safetensors"), *b = TMP("run-b.safetensors");
    unlink(a), unlink(b);
    int rc = tb_run(&sh, NULL, "'%s' " FLAGS " --train-iters 2 --save '%s' --run-dir '%s'", PRETRAIN, a, TMP("run-a"));
    TB_REQUIRE(rc == 0, "run a: exit %d: %s", rc, sh.err);
    rc = tb_run(&sh, NULL, "'%s' " FLAGS " --train-iters 1 --lr 0 --load '%s' --save '%s' --run-dir '%s'", PRETRAIN, a,
                b, TMP("run-b"));
    TB_REQUIRE(rc == 0, "run b: exit %d: %s", rc, sh.err);
    TB_CHECK(compare_files(a, b) == 0, "a step at lr 0 from --load A did not save A's weights back");

    // in process: the saved weights differ from the init (the save came after training), and
    // run b's step-1 loss is their loss on step 1's batch
    tb_config cfg;
    gpt2_config(&cfg);  // FLAGS, and pretrain_gpt's default seed
    box *init = box_new(&cfg, cfg.seed), *loaded = box_new(&cfg, cfg.seed);
    tb_error err = {{0}};
    rc = gpt_load_safetensors(&loaded->m, a, &err);
    TB_CHECK(rc == 0, "load %s: %s", a, err.msg);
    TB_CHECK(memcmp(init->m.param_memory, loaded->m.param_memory, init->m.num_parameters * sizeof(float)) != 0,
             "run a saved its initial weights, not the trained ones");
    tb_gpt_dataset ds;
    rc = tb_gpt_dataset_open_synthetic(&ds, (uint64_t)cfg.seed, T, V, &loaded->mem, &err);
    TB_CHECK(rc == 0, "dataset: %s", err.msg);
    if (rc == 0) {
        int32_t in[B * T], tg[B * T];
        for (int i = 0; i < B; i++) tb_gpt_dataset_get_sample(&ds, (uint64_t)i, in + i * T, tg + i * T);
        tb_gpt_dataset_close(&ds, &loaded->mem);
        double want = loss_of(&loaded->m, in, tg), fresh = loss_of(&init->m, in, tg);
        double got = metrics_loss(TMP("run-b"), 1);
        TB_CHECK(got == want, "run b step-1 loss %.17g, the saved weights' loss %.17g (initial weights %.17g)",
                 got, want, fresh);
        TB_CHECK(got != fresh, "run b's loss is the initial weights' loss: --load had no effect");
        TB_CHECK(metrics_loss(TMP("run-a"), 1) == fresh, "run a step-1 loss %.17g, initial weights' loss %.17g",
                 metrics_loss(TMP("run-a"), 1), fresh);
    }
    TB_CHECK(box_free(init) == 0 && box_free(loaded) == 0, "allocations left");
    unlink(b);

    // --load of a missing file
    const char *absent = TMP("run-absent.safetensors");
    unlink(absent);
    rc = tb_run(&sh, NULL, "'%s' " FLAGS " --train-iters 1 --load '%s' --run-dir '%s'", PRETRAIN, absent,
                TMP("run-absent"));
    TB_CHECK(rc != 0 && strstr(sh.err, absent) && strstr(sh.err, "--load"), "missing file: exit %d, stderr: %s", rc,
             sh.err);
    // --load of a file with other shapes
    rc = tb_run(&sh, NULL, "'%s' " FLAGS " --hidden-size 48 --train-iters 1 --load '%s' --run-dir '%s'", PRETRAIN, a,
                TMP("run-wrong"));
    TB_CHECK(rc != 0 && strstr(sh.err, "'wte.weight' has shape [50, 32], the model needs [50, 48]"),
             "wrong shape: exit %d, stderr: %s", rc, sh.err);
    unlink(a);
}

int main(int argc, char **argv) {
    (void)argc;
    // the BLAS kernels pretrain_gpt runs with, so in-process losses match its bitwise
    cpu_blas_select_kernels(argv);
    cpu_set_num_threads(2);
    TB_RUN(save_then_load_restores_every_parameter_bitwise_gpt2_layernorm_gelu_biases_tied);
    TB_RUN(save_then_load_restores_every_parameter_bitwise_rmsnorm_swiglu_gqa_no_bias_untied);
    TB_RUN(saved_file_has_hugging_face_gpt2_names_and_shapes);
    TB_RUN(saved_file_of_rmsnorm_swiglu_gqa_untied_model_has_gqa_and_gated_shapes_and_lm_head);
    TB_RUN(hugging_face_file_with_prefix_mask_buffers_and_lm_head_loads_into_tied_model);
    TB_RUN(hugging_face_file_with_prefix_loads_into_untied_rmsnorm_model);
    TB_RUN(hidden_size_mismatch_is_refused_naming_the_tensor_and_both_shapes);
    TB_RUN(missing_tensor_is_refused_naming_it_and_its_shape);
    TB_RUN(extra_layer_in_the_file_is_refused_as_having_no_place);
    TB_RUN(tied_model_ignores_lm_head_and_untied_model_demands_it);
    TB_RUN(corrupt_or_absent_file_is_refused_naming_the_path);
    TB_RUN(pretrain_gpt_save_then_load_carries_the_weights_bitwise);
    return tb_test_summary();
}
