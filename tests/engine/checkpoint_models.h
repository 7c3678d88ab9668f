// checkpoint_models.h — what the checkpoint tests share: the tiny GPT-2 and Llama style
// models (each in a box with its own config and allocator), their weights set directly and
// their loss on a fixed batch, and sets of tensors written as a safetensors file of our own
// making in Hugging Face's layout.
#ifndef TB_TESTS_ENGINE_CHECKPOINT_MODELS_H
#define TB_TESTS_ENGINE_CHECKPOINT_MODELS_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "checkpoint/gpt_checkpoint.h"
#include "config/config.h"
#include "runtime/memory.h"
#include "core/rng.h"
#include "core/safetensors.h"
#include "models/gpt.h"
#include "tb_shell.h"

// This test process's scratch path for `name`, "<TB_TEST_TMPDIR>/<pid>-checkpoint.<name>"
// (tb_tmp_path), the same pointer for each call with that name: a second run of the test
// beside the first (<test>.haswell, CMakeLists.txt) names other files.
static inline const char *checkpoint_tmp(const char *name) {
    static struct {
        char name[64], path[512];
    } paths[32];
    static size_t used;
    for (size_t i = 0; i < used; i++)
        if (!strcmp(paths[i].name, name)) return paths[i].path;
    if (used == sizeof paths / sizeof *paths || strlen(name) >= sizeof paths[0].name) {
        fprintf(stderr, "checkpoint_tmp: no room for the scratch path '%s' (%zu named)\n", name, used);
        abort();
    }
    snprintf(paths[used].name, sizeof paths[used].name, "%s", name);
    tb_tmp_path(paths[used].path, sizeof paths[used].path, "checkpoint.%s", name);
    return paths[used++].path;
}
#define TMP(name) checkpoint_tmp(name)


// The tiny models: V = 50 padded to Vp = 64 (divisible by 16), so the file's unpadded
// vocabulary differs from the engine's buffer.
enum { V = 50, VP = 64, C = 32, L = 2, NH = 4, T = 16, B = 2 };

// GPT-2 style: LayerNorm, GELU, biases, tied output layer.
static inline void gpt2_config(tb_config *c) {
    config_defaults(c);
    c->num_layers = L, c->hidden_size = C, c->num_attention_heads = NH, c->seq_length = T;
    c->vocab_size = V, c->make_vocab_size_divisible_by = 16, c->micro_batch_size = B;
    c->num_threads = 2, c->train_iters = 1;
    config_resolve(c);
}

// Llama style: RMSNorm, SwiGLU, grouped-query attention (2 groups for 4 heads), no linear
// biases, untied output layer.
static inline void llama_config(tb_config *c) {
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

static inline box *box_new(const tb_config *cfg, int64_t seed) {
    box *b = calloc(1, sizeof *b);
    b->cfg = *cfg;
    b->cfg.seed = seed;
    tb_allocator_init(&b->mem, 0, NULL, NULL);
    gpt_model_init(&b->m, &b->cfg, &b->mem, NULL);
    return b;
}

// Frees the model; returns the bytes still allocated (0 unless something leaked).
static inline size_t box_free(box *b) {
    if (!b) return 0;
    gpt_model_free(&b->m);
    size_t left = b->mem.stats.total_current;
    free(b);
    return left;
}

static inline int config_ok(const tb_config *c) {
    tb_error err = {{0}};
    if (config_validate(c, &err) == 0) return 1;
    printf("    invalid config: %s\n", err.msg);
    return 0;
}

// A fixed batch of B·T tokens.
static inline void fixed_batch(int32_t *inputs, int32_t *targets) {
    for (int i = 0; i < B * T; i++) inputs[i] = (i * 37 + 11) % V, targets[i] = (i * 13 + 5) % V;
}

// The model's mean loss on a batch (forward, then a backward of weight 0 that releases the
// activations, then the gradients cleared).
static inline float loss_of(gpt_model *m, const int32_t *inputs, const int32_t *targets) {
    float loss = gpt_forward(m, inputs, targets);
    gpt_backward(m, 0.0f);
    gpt_zero_grad(m);
    return loss;
}

// Sets every weight directly (not through the init): random values in each tensor's real
// rows, the padded vocabulary rows left 0.
static inline void set_weights(gpt_model *m, uint64_t seed) {
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

static inline size_t shape_numel(int ndim, const int64_t *shape) {
    size_t n = 1;
    for (int d = 0; d < ndim; d++) n *= (size_t)shape[d];
    return n;
}

// Adds a tensor (data copied; NULL: zeros) and returns its buffer.
static inline float *set_add(tensor_set *s, const char *name, int ndim, const int64_t *shape, const float *data) {
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

static inline owned *set_find(tensor_set *s, const char *name) {
    for (int i = 0; i < s->n; i++)
        if (!strcmp(s->t[i].name, name)) return &s->t[i];
    return NULL;
}

static inline void set_remove(tensor_set *s, const char *name) {
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
static inline void set_from_model(tensor_set *s, const gpt_model *m, const char *prefix) {
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

static inline int set_write(const tensor_set *s, const char *path, tb_error *err) {
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

static inline void set_free(tensor_set *s) {
    for (int i = 0; i < s->n; i++) free(s->t[i].data);
    free(s->t);
    memset(s, 0, sizeof *s);
}

// Saves a fresh model of cfg (seed) to path; returns 0 on success.
static inline int save_model_of(const tb_config *cfg, int64_t seed, const char *path) {
    box *b = box_new(cfg, seed);
    tb_error err = {{0}};
    int rc = gpt_save_safetensors(&b->m, path, 1, &err);
    if (rc != 0) printf("    save %s: %s\n", path, err.msg);
    if (box_free(b) != 0) rc = -1;
    return rc;
}

#endif
