#include "models/gpt.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/kernels.h"
#include "core/rng.h"
#include "core/trace.h"
#include "tensor_parallel/cross_entropy.h"
#include "tensor_parallel/layers.h"

// ---------------------------------------------------------------------------------------
// Parameter layout

typedef struct layout {
    gpt_param *params;
    int n, cap;
    size_t offset;
} layout;

static gpt_param *add_param(layout *lay, const char *name, int ndim, int rows, int cols) {
    if (lay->n == lay->cap) {
        lay->cap = lay->cap ? 2 * lay->cap : 64;
        lay->params = realloc(lay->params, (size_t)lay->cap * sizeof *lay->params);
        if (!lay->params) {
            fprintf(stderr, "gpt: out of host memory for the parameter table\n");
            exit(3);
        }
    }
    gpt_param *p = &lay->params[lay->n++];
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "%s", name);
    p->ndim = ndim;
    p->rows = rows;
    p->cols = cols;
    p->hf_rows = rows;
    p->numel = (size_t)rows * cols;
    // every tensor starts on a 64-byte boundary (16 floats)
    p->offset = lay->offset;
    lay->offset += (p->numel + 15) / 16 * 16;
    return p;
}

static gpt_param *add_matrix(layout *lay, const char *name, int rows, int cols, float std) {
    gpt_param *p = add_param(lay, name, 2, rows, cols);
    p->decay = 1;
    p->hf_transposed = 1;
    p->init_std = std;
    return p;
}

static void add_vector(layout *lay, const char *name, int n, float value) {
    gpt_param *p = add_param(lay, name, 1, 1, n);
    p->init_value = value;
}

static void build_layout(gpt_model *m, layout *lay) {
    const tb_config *c = m->cfg;
    const tb_layer_dims *d = &m->block.d;
    const float std = (float)c->init_method_std;
    const float out_std = std / sqrtf(2.0f * (float)c->num_layers);  // Megatron's scaled init
    const int bias = !c->disable_bias_linear, norm_bias = m->spec.input_layernorm->has_bias;
    char name[64];

    gpt_param *wte = add_param(lay, "wte.weight", 2, m->Vp, m->C);
    wte->decay = 1;
    wte->hf_rows = m->V;
    wte->init_std = std;
    gpt_param *wpe = add_param(lay, "wpe.weight", 2, m->maxT, m->C);
    wpe->decay = 1;
    wpe->init_std = std;
    for (int l = 0; l < c->num_layers; l++) {
#define NAME(suffix) (snprintf(name, sizeof name, "h.%d.%s", l, suffix), name)
        add_vector(lay, NAME("ln_1.weight"), d->C, 1.0f);
        if (norm_bias) add_vector(lay, NAME("ln_1.bias"), d->C, 0.0f);
        add_matrix(lay, NAME("attn.c_attn.weight"), d->QKV, d->C, std);
        if (bias) add_vector(lay, NAME("attn.c_attn.bias"), d->QKV, 0.0f);
        add_matrix(lay, NAME("attn.c_proj.weight"), d->C, d->C, out_std);
        if (bias) add_vector(lay, NAME("attn.c_proj.bias"), d->C, 0.0f);
        add_vector(lay, NAME("ln_2.weight"), d->C, 1.0f);
        if (norm_bias) add_vector(lay, NAME("ln_2.bias"), d->C, 0.0f);
        add_matrix(lay, NAME("mlp.c_fc.weight"), d->F1, d->C, std);
        if (bias) add_vector(lay, NAME("mlp.c_fc.bias"), d->F1, 0.0f);
        add_matrix(lay, NAME("mlp.c_proj.weight"), d->C, d->F, out_std);
        if (bias) add_vector(lay, NAME("mlp.c_proj.bias"), d->C, 0.0f);
#undef NAME
    }
    add_vector(lay, "ln_f.weight", m->C, 1.0f);
    if (norm_bias) add_vector(lay, "ln_f.bias", m->C, 0.0f);
    if (c->untie_embeddings_and_output_weights) {
        gpt_param *head = add_param(lay, "lm_head.weight", 2, m->Vp, m->C);
        head->decay = 1;
        head->hf_rows = m->V;
        head->init_std = std;
    }
}

// Points the weight views (and each layer's) into a buffer laid out by the table.
static void bind_views(gpt_model *m, float *base, gpt_weights *w, transformer_layer_params *layers) {
    memset(w, 0, sizeof *w);
    for (int i = 0; i < m->nparams; i++) {
        const gpt_param *p = &m->params[i];
        float *ptr = base + p->offset;
        int l;
        char rest[48];
        if (sscanf(p->name, "h.%d.%47s", &l, rest) == 2) {
            transformer_layer_params *lp = &layers[l];
            if (!strcmp(rest, "ln_1.weight")) lp->ln1_w = ptr;
            else if (!strcmp(rest, "ln_1.bias")) lp->ln1_b = ptr;
            else if (!strcmp(rest, "attn.c_attn.weight")) lp->qkv_w = ptr;
            else if (!strcmp(rest, "attn.c_attn.bias")) lp->qkv_b = ptr;
            else if (!strcmp(rest, "attn.c_proj.weight")) lp->proj_w = ptr;
            else if (!strcmp(rest, "attn.c_proj.bias")) lp->proj_b = ptr;
            else if (!strcmp(rest, "ln_2.weight")) lp->ln2_w = ptr;
            else if (!strcmp(rest, "ln_2.bias")) lp->ln2_b = ptr;
            else if (!strcmp(rest, "mlp.c_fc.weight")) lp->fc1_w = ptr;
            else if (!strcmp(rest, "mlp.c_fc.bias")) lp->fc1_b = ptr;
            else if (!strcmp(rest, "mlp.c_proj.weight")) lp->fc2_w = ptr;
            else if (!strcmp(rest, "mlp.c_proj.bias")) lp->fc2_b = ptr;
        } else if (!strcmp(p->name, "wte.weight")) w->wte = ptr;
        else if (!strcmp(p->name, "wpe.weight")) w->wpe = ptr;
        else if (!strcmp(p->name, "ln_f.weight")) w->lnf_w = ptr;
        else if (!strcmp(p->name, "ln_f.bias")) w->lnf_b = ptr;
        else if (!strcmp(p->name, "lm_head.weight")) w->lm_head = ptr;
    }
    if (!w->lm_head) w->lm_head = w->wte;  // tied output layer
}

static void init_weights(gpt_model *m) {
    for (int i = 0; i < m->nparams; i++) {
        const gpt_param *p = &m->params[i];
        float *x = m->param_memory + p->offset;
        if (p->init_std > 0) {
            tb_rng rng;
            tb_rng_init(&rng, tb_seed_mix((uint64_t)m->cfg->seed, tb_seed_mix(0x706172616d73ull, (uint64_t)i)));
            size_t real = (size_t)p->hf_rows * p->cols;  // padded vocab rows stay 0
            for (size_t j = 0; j < real; j++) x[j] = p->init_std * tb_rng_normal(&rng);
        } else {
            for (size_t j = 0; j < p->numel; j++) x[j] = p->init_value;
        }
    }
}

void gpt_model_init(gpt_model *m, const tb_config *cfg, tb_allocator *mem) {
    memset(m, 0, sizeof *m);
    m->cfg = cfg;
    m->mem = mem;
    transformer_layer_spec_for(cfg, &m->spec);
    m->B = cfg->micro_batch_size;
    m->T = cfg->seq_length;
    m->C = cfg->hidden_size;
    m->V = cfg->vocab_size;
    m->Vp = cfg->padded_vocab_size;
    m->maxT = cfg->max_position_embeddings;
    transformer_block_init(&m->block, cfg, &m->spec, mem);

    layout lay = {0};
    build_layout(m, &lay);
    m->params = lay.params;
    m->nparams = lay.n;
    m->num_parameters = lay.offset;

    m->param_memory = tb_calloc(mem, TB_MEM_PARAMS, m->num_parameters * sizeof(float), "parameters");
    m->grad_memory = tb_calloc(mem, TB_MEM_GRADS, m->num_parameters * sizeof(float), "gradients");
    bind_views(m, m->param_memory, &m->w, m->block.params);
    bind_views(m, m->grad_memory, &m->g, m->block.grads);
    init_weights(m);

    const size_t N = (size_t)m->B * m->T, f = sizeof(float);
    m->d_lnf = tb_alloc(mem, TB_MEM_WORKSPACE, N * m->C * f, "grad at final norm output");
    m->d_x = tb_alloc(mem, TB_MEM_WORKSPACE, N * m->C * f, "grad at block output");
}

void gpt_model_free(gpt_model *m) {
    transformer_block_free(&m->block);
    tb_free(m->mem, m->lnf);
    tb_free(m->mem, m->logits);
    tb_free(m->mem, m->d_lnf);
    tb_free(m->mem, m->d_x);
    tb_free(m->mem, m->param_memory);
    tb_free(m->mem, m->grad_memory);
    free(m->params);
    memset(m, 0, sizeof *m);
}

const gpt_param *gpt_find_param(const gpt_model *m, const char *name) {
    for (int i = 0; i < m->nparams; i++)
        if (!strcmp(m->params[i].name, name)) return &m->params[i];
    return NULL;
}

void gpt_release_activations(gpt_model *m) {
    transformer_block_release(&m->block);
    tb_free(m->mem, m->lnf);
    tb_free(m->mem, m->logits);
    m->lnf = m->logits = NULL;
}

void gpt_zero_grad(gpt_model *m) { memset(m->grad_memory, 0, m->num_parameters * sizeof(float)); }

double gpt_flops_per_token(const gpt_model *m) {
    const tb_config *c = m->cfg;
    return 6.0 * (double)m->num_parameters +
           12.0 * c->num_layers * (double)c->hidden_size * (double)c->seq_length;
}

// ---------------------------------------------------------------------------------------
// Forward and backward

float gpt_forward(gpt_model *m, const int32_t *inputs, const int32_t *targets) {
    const int B = m->B, T = m->T, C = m->C, N = B * T;
    const transformer_layer_spec *spec = &m->spec;
    gpt_release_activations(m);
    m->inputs = inputs;
    m->targets = targets;

    TB_RANGE_PUSH("forward");

    TB_RANGE_PUSH("embedding");
    float *x0 = transformer_block_input(&m->block);
    vocab_parallel_embedding_forward(x0, inputs, m->w.wte, m->w.wpe, B, T, C);  // (B,T) -> (B,T,C)
    TB_RANGE_POP();

    const float *x = transformer_block_forward(&m->block);

    TB_RANGE_PUSH("final_layernorm");
    // ln_f out (N,C), mean (N), rstd (N) in one activation allocation
    m->lnf = tb_alloc(m->mem, TB_MEM_ACTIVATIONS, ((size_t)N * C + 2 * (size_t)N) * sizeof(float),
                      "final layernorm");
    m->lnf_mean = m->lnf + (size_t)N * C;
    m->lnf_rstd = m->lnf_mean + N;
    spec->final_layernorm->forward(m->lnf, m->lnf_mean, m->lnf_rstd, x, m->w.lnf_w, m->w.lnf_b, N, C,
                                   (float)m->cfg->norm_epsilon);
    TB_RANGE_POP();

    TB_RANGE_PUSH("output_layer");
    // logits (N,Vp) and per-token losses (N)
    m->logits = tb_alloc(m->mem, TB_MEM_ACTIVATIONS, ((size_t)N * m->Vp + (size_t)N) * sizeof(float),
                         "logits");
    m->losses = m->logits + (size_t)N * m->Vp;
    column_parallel_linear_forward(m->logits, m->lnf, m->w.lm_head, NULL, N, C, m->Vp);
    TB_RANGE_POP();

    TB_RANGE_PUSH("loss");
    vocab_parallel_cross_entropy_forward(m->logits, m->losses, targets, N, m->V, m->Vp);
    double sum = 0.0;
    for (int i = 0; i < N; i++) sum += m->losses[i];
    TB_RANGE_POP();

    TB_RANGE_POP();
    return (float)(sum / N);
}

void gpt_backward(gpt_model *m, float loss_scale) {
    const int B = m->B, T = m->T, C = m->C, N = B * T;
    const transformer_layer_spec *spec = &m->spec;

    TB_RANGE_PUSH("backward");

    TB_RANGE_PUSH("loss.backward");
    vocab_parallel_cross_entropy_backward(m->logits, m->targets, loss_scale / (float)N, N, m->V, m->Vp);
    TB_RANGE_POP();

    TB_RANGE_PUSH("output_layer.backward");
    column_parallel_linear_backward(m->d_lnf, m->g.lm_head, NULL, m->logits, m->lnf, m->w.lm_head, N, C,
                                    m->Vp);
    tb_free(m->mem, m->logits);
    m->logits = NULL;
    TB_RANGE_POP();

    TB_RANGE_PUSH("final_layernorm.backward");
    spec->final_layernorm->backward(m->d_x, m->g.lnf_w, m->g.lnf_b, m->d_lnf, m->block.x[m->block.L],
                                    m->w.lnf_w, m->lnf_mean, m->lnf_rstd, N, C);
    tb_free(m->mem, m->lnf);
    m->lnf = NULL;
    TB_RANGE_POP();

    const float *dx0 = transformer_block_backward(&m->block, m->d_x);

    TB_RANGE_PUSH("embedding.backward");
    vocab_parallel_embedding_backward(m->g.wte, m->g.wpe, dx0, m->inputs, B, T, C);
    TB_RANGE_POP();

    TB_RANGE_POP();
}
