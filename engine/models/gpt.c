#include "models/gpt.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/host_stage.h"
#include "runtime/ranges.h"
#include "core/rng.h"
#include "core/shapes/gpt_parameters.h"
#include "core/xalloc.h"
#include "tensor_parallel/cross_entropy.h"
#include "tensor_parallel/layers.h"
#include "transformer/forward_hook.h"

// ---------------------------------------------------------------------------------------
// Parameter layout

// The table being built: the rule's tensors (core/shapes/gpt_parameters.h) as this rank's
// parameters, each beside the tensor it came from.
typedef struct layout {
    gpt_param *params;
    tb_gpt_tensor *tensors;
    int n, cap;
    size_t offset;
    int tp, etp;     // the groups the tensors are split over
    float std, out_std;  // TB_INIT_STD's and TB_INIT_OUT_STD's
} layout;

// Offsets in the buffer, once every shape is final: each tensor starts on a 64-byte boundary;
// the experts' tensors (MoE) after every dense one, so that each kind is one range of the
// buffer (their gradients are reduced over different groups: finalize_model_grads).
static void place(layout *lay) {
    for (int experts = 0; experts <= 1; experts++)
        for (int i = 0; i < lay->n; i++) {
            gpt_param *p = &lay->params[i];
            if ((p->expert != 0) != experts) continue;
            p->numel = (size_t)p->rows * p->cols;
            p->offset = lay->offset;
            lay->offset += (p->numel + 15) / 16 * 16;
        }
}

// One tensor of the rule as this rank's parameter: its shard of the whole (rows, cols) when
// split over tp — or over etp when that is more than one rank — else whole (tp_duplicate).
static void add_tensor(void *arg, const tb_gpt_tensor *t) {
    layout *lay = arg;
    if (lay->n == lay->cap) {
        lay->cap = lay->cap ? 2 * lay->cap : 64;
        lay->params = tb_xreallocarray(lay->params, (size_t)lay->cap, sizeof *lay->params, "parameter table");
        lay->tensors = tb_xreallocarray(lay->tensors, (size_t)lay->cap, sizeof *lay->tensors, "parameter tensors");
    }
    lay->tensors[lay->n] = *t;
    gpt_param *p = &lay->params[lay->n++];
    memset(p, 0, sizeof *p);
    tb_gpt_tensor_name(t, p->name, sizeof p->name);
    p->ndim = t->ndim;
    p->rows = p->full_rows = t->rows;
    p->cols = p->full_cols = t->cols;
    p->hf_rows = t->hf_rows;
    p->decay = t->decay;
    p->hf_transposed = t->hf_transposed;
    p->init_std = t->init == TB_INIT_STD ? lay->std : t->init == TB_INIT_OUT_STD ? lay->out_std : 0.0f;
    p->init_value = t->init == TB_INIT_ONES ? 1.0f : 0.0f;
    p->sp_partial = t->sp_partial;
    p->tp_partial = t->tp_partial;
    p->expert = t->expert;
    p->split_axis = -1;
    p->tp_duplicate = 1;
    const int ranks = t->split == TB_SPLIT_TP ? lay->tp : t->split == TB_SPLIT_ETP && lay->etp > 1 ? lay->etp : 0;
    if (ranks) {
        p->split_axis = t->axis;
        p->nseg = t->nseg;
        memcpy(p->seg, t->seg, sizeof p->seg);
        p->tp_duplicate = 0;
        if (t->axis == 0) p->rows = p->full_rows / ranks;
        else p->cols = p->full_cols / ranks;
    }
}

// The rule's dimensions of the model (core/shapes/gpt_parameters.h).
static tb_gpt_dims dims_of(const gpt_model *m) {
    const tb_config *c = m->cfg;
    return (tb_gpt_dims){.C = m->C,
                         .NH = c->num_attention_heads,
                         .G = c->num_query_groups,
                         .hs = m->C / c->num_attention_heads,
                         .F = c->ffn_hidden_size,
                         .fc1_factor = m->spec.activation->fc1_factor,
                         .Vp = m->Vp,
                         .V = m->V,
                         .maxT = m->maxT,
                         .L = c->num_layers,
                         .bias = !c->disable_bias_linear,
                         .norm_bias = m->spec.input_layernorm->has_bias,
                         .learned_pos = c->position_embedding_type == TB_POS_LEARNED_ABSOLUTE,
                         .tied = !c->untie_embeddings_and_output_weights,
                         .qk_norm = c->qk_layernorm,
                         .E = c->num_experts,
                         .freq = c->moe_layer_freq > 0 ? c->moe_layer_freq : 1,
                         .Fe = c->moe_ffn_hidden_size,
                         .Fs = c->moe_shared_expert_intermediate_size};
}

static void build_layout(gpt_model *m, layout *lay) {
    const tb_config *c = m->cfg;
    lay->tp = m->tp_size;
    lay->etp = c->expert_tensor_parallel_size > 1 ? c->expert_tensor_parallel_size : 1;
    lay->std = (float)c->init_method_std;
    lay->out_std = lay->std / sqrtf(2.0f * (float)c->num_layers);  // Megatron's scaled init
    const tb_gpt_dims d = dims_of(m);
    tb_gpt_tensors(&d, add_tensor, lay);
    place(lay);
}

void gpt_param_shard_copy(const gpt_param *p, int tp, int rank, float *full, float *shard, int to_shard) {
    const int R = p->full_rows, Cf = p->full_cols;
    if (p->split_axis < 0 || tp == 1) {
        if (to_shard) memcpy(shard, full, (size_t)R * Cf * sizeof(float));
        else memcpy(full, shard, (size_t)R * Cf * sizeof(float));
        return;
    }
    // Each segment of the split axis contributes its rank-th part, in segment order.
    if (p->split_axis == 0) {
        size_t at = 0, from = 0;
        for (int s = 0; s < p->nseg; s++) {
            size_t part = (size_t)p->seg[s] / tp;
            float *f = full + (from + (size_t)rank * part) * Cf, *sh = shard + at * Cf;
            if (to_shard) memcpy(sh, f, part * Cf * sizeof(float));
            else memcpy(f, sh, part * Cf * sizeof(float));
            at += part;
            from += (size_t)p->seg[s];
        }
    } else {
        const int cols = p->cols;
        for (int r = 0; r < R; r++) {
            size_t at = 0, from = 0;
            for (int s = 0; s < p->nseg; s++) {
                size_t part = (size_t)p->seg[s] / tp;
                float *f = full + (size_t)r * Cf + from + (size_t)rank * part, *sh = shard + (size_t)r * cols + at;
                if (to_shard) memcpy(sh, f, part * sizeof(float));
                else memcpy(f, sh, part * sizeof(float));
                at += part;
                from += (size_t)p->seg[s];
            }
        }
    }
}

size_t gpt_lcm(size_t a, size_t b) {
    size_t x = a, y = b;
    while (y) {
        const size_t t = x % y;
        x = y, y = t;
    }
    return a / x * b;
}

int gpt_expert_dp_size(const tb_config *cfg) {
    const int etp = cfg->expert_tensor_parallel_size > 0 ? cfg->expert_tensor_parallel_size : 1;
    const int ep = cfg->expert_model_parallel_size > 0 ? cfg->expert_model_parallel_size : 1;
    return cfg->world_size / (etp * ep * cfg->pipeline_model_parallel_size);
}

tb_group *gpt_param_split_group(const gpt_model *m, const gpt_param *p, int *size, int *rank) {
    tb_group *g = p->expert ? m->block.d.moe.etp : m->block.d.tp.tp;  // an expert's: the etp group
    *size = p->expert ? m->block.d.moe.etp_size : m->tp_size;
    *rank = p->expert ? (g ? g->index : 0) : m->tp_rank;
    return g;
}

void gpt_gather_param(gpt_model *m, int i, int grads, float *full) {
    gpt_gather_param_from(m, i, grads ? m->grad_memory : m->param_memory, full);
}

void gpt_gather_param_from(gpt_model *m, int i, const float *base, float *full) {
    const gpt_param *p = &m->params[i];
    const float *local = base + p->offset;
    int parts, part;
    tb_group *tp = gpt_param_split_group(m, p, &parts, &part);
    if (p->split_axis < 0 || parts == 1) {
        tb_be()->copy_to_host(full, local, p->numel * sizeof(float));  // the CPU's: memcpy
        return;
    }
    // the shards gathered on the backend (NCCL moves device buffers), read on the host
    const size_t bytes = p->numel * (size_t)parts * sizeof(float);
    float *shards = tb_alloc(m->mem, TB_MEM_COMM, bytes, "gather staging");
    tb_all_gather(tp, local, shards, p->numel);
    tb_host_stage stage = {0};
    float *host = (float *)tb_host_read(&stage, shards, bytes);
    for (int r = 0; r < parts; r++) gpt_param_shard_copy(p, parts, r, full, host + (size_t)r * p->numel, 0);
    tb_host_stage_free(&stage);
    tb_free(m->mem, shards);
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
            transformer_layer_params *lp = &layers[l - m->chunk.first_layer];
            if (!strcmp(rest, "ln_1.weight")) lp->ln1_w = ptr;
            else if (!strcmp(rest, "ln_1.bias")) lp->ln1_b = ptr;
            else if (!strcmp(rest, "attn.c_attn.weight")) lp->qkv_w = ptr;
            else if (!strcmp(rest, "attn.c_attn.bias")) lp->qkv_b = ptr;
            else if (!strcmp(rest, "attn.q_norm.weight")) lp->q_norm_w = ptr;
            else if (!strcmp(rest, "attn.q_norm.bias")) lp->q_norm_b = ptr;
            else if (!strcmp(rest, "attn.k_norm.weight")) lp->k_norm_w = ptr;
            else if (!strcmp(rest, "attn.k_norm.bias")) lp->k_norm_b = ptr;
            else if (!strcmp(rest, "attn.c_proj.weight")) lp->proj_w = ptr;
            else if (!strcmp(rest, "attn.c_proj.bias")) lp->proj_b = ptr;
            else if (!strcmp(rest, "ln_2.weight")) lp->ln2_w = ptr;
            else if (!strcmp(rest, "ln_2.bias")) lp->ln2_b = ptr;
            else if (!strcmp(rest, "mlp.c_fc.weight")) lp->fc1_w = ptr;
            else if (!strcmp(rest, "mlp.c_fc.bias")) lp->fc1_b = ptr;
            else if (!strcmp(rest, "mlp.c_proj.weight")) lp->fc2_w = ptr;
            else if (!strcmp(rest, "mlp.c_proj.bias")) lp->fc2_b = ptr;
            else if (!strcmp(rest, "mlp.router.weight")) lp->moe.router_w = ptr;
            else if (!strcmp(rest, "mlp.shared_experts.c_fc.weight")) lp->moe.shared_fc1_w = ptr;
            else if (!strcmp(rest, "mlp.shared_experts.c_fc.bias")) lp->moe.shared_fc1_b = ptr;
            else if (!strcmp(rest, "mlp.shared_experts.c_proj.weight")) lp->moe.shared_fc2_w = ptr;
            else if (!strcmp(rest, "mlp.shared_experts.c_proj.bias")) lp->moe.shared_fc2_b = ptr;
            else if (p->expert) {  // mlp.experts.E.*: the local expert's slot
                const int e = p->expert - 1 - m->block.d.moe.expert_first;
                if (strstr(rest, ".c_fc.weight")) lp->moe.fc1_w[e] = ptr;
                else if (strstr(rest, ".c_fc.bias")) lp->moe.fc1_b[e] = ptr;
                else if (strstr(rest, ".c_proj.weight")) lp->moe.fc2_w[e] = ptr;
                else if (strstr(rest, ".c_proj.bias")) lp->moe.fc2_b[e] = ptr;
            }
        } else if (!strcmp(p->name, "wte.weight")) w->wte = ptr;
        else if (!strcmp(p->name, "wpe.weight")) w->wpe = ptr;
        else if (!strcmp(p->name, "ln_f.weight")) w->lnf_w = ptr;
        else if (!strcmp(p->name, "ln_f.bias")) w->lnf_b = ptr;
        else if (!strcmp(p->name, "lm_head.weight")) w->lm_head = ptr;
    }
    if (!w->lm_head) w->lm_head = w->wte;  // tied output layer
}

// Each tensor is drawn whole from its own stream (seed, tensor index) and this rank keeps
// its shard, so every layout initialises to the same model as the single rank.
void gpt_init_param(gpt_model *m, int i, float *x) {
    const gpt_param *p = &m->params[i];
    const tb_backend *be = tb_be();
    if (p->init_std <= 0) {
        for (size_t j = 0; j < p->numel; j++) x[j] = p->init_value;
        return;
    }
    int parts, part;
    gpt_param_split_group(m, p, &parts, &part);
    const int sharded = p->split_axis >= 0 && parts > 1;
    size_t whole = (size_t)p->full_rows * p->full_cols;
    float *full = !sharded ? x
                  : be->host ? tb_alloc(m->mem, TB_MEM_WORKSPACE, whole * sizeof(float), "init staging")
                             : tb_xmalloc(whole * sizeof(float), "init staging (host)");
    tb_rng rng;
    tb_rng_init(&rng, tb_seed_mix((uint64_t)m->cfg->seed, tb_seed_mix(0x706172616d73ull, (uint64_t)p->global_index)));
    size_t real = (size_t)p->hf_rows * p->full_cols;  // padded vocab rows stay 0
    for (size_t j = 0; j < real; j++) full[j] = p->init_std * tb_rng_normal(&rng);
    memset(full + real, 0, (whole - real) * sizeof(float));
    if (sharded) {
        gpt_param_shard_copy(p, parts, part, full, x, 1);
        if (be->host) tb_free(m->mem, full);
        else free(full);
    }
}

static void init_weights(gpt_model *m) {
    const tb_backend *be = tb_be();
    for (int i = 0; i < m->nparams; i++) {
        const gpt_param *p = &m->params[i];
        float *dst = m->param_memory + p->offset;
        // on a device the values are drawn on the host, then copied over
        float *x = be->host ? dst : tb_xmalloc(p->numel * sizeof(float) + 1, "initial weights (host)");
        gpt_init_param(m, i, x);
        if (!be->host) {
            be->copy_from_host(dst, x, p->numel * sizeof(float));
            free(x);
        }
    }
}

void gpt_params_whole(gpt_model *m) {
    if (!m->params_reserved || m->params_whole) return;
    tb_commit(m->mem, TB_MEM_GATHERED, m->param_memory, m->padded_parameters * sizeof(float),
              "parameters gathered whole for a load");
    m->params_whole = 1;
}

// Keeps the entries of the whole model's table that belong to this chunk.
// The chunk's tensors of the whole model's table (the rule's tb_gpt_tensor_kept), placed again.
static void select_chunk(gpt_model *m, layout *lay) {
    const gpt_chunk_spec *c = &m->chunk;
    const tb_moe_dims *moe = &m->block.d.moe;
    const tb_gpt_dims d = dims_of(m);
    const tb_gpt_chunk chunk = {.first_layer = c->first_layer,
                                .num_layers = c->num_layers,
                                .has_embedding = c->has_embedding,
                                .has_head = c->has_head,
                                .expert_first = moe->expert_first,
                                .experts = moe->E_local};
    int kept = 0;
    for (int i = 0; i < lay->n; i++) {
        if (!tb_gpt_tensor_kept(&d, &chunk, &lay->tensors[i])) continue;
        gpt_param p = lay->params[i];
        p.global_index = i;
        // the last stage's copy of the tied embedding: counted once, on the first stage
        p.pp_duplicate = !tb_gpt_tensor_counted(&chunk, &lay->tensors[i]);
        lay->params[kept++] = p;
    }
    lay->n = kept;
    lay->offset = 0;
    free(lay->tensors);
    lay->tensors = NULL;
    place(lay);
}

void gpt_model_init_chunk(gpt_model *m, const tb_config *cfg, tb_allocator *mem, tb_group *tp_group,
                          gpt_chunk_spec chunk) {
    memset(m, 0, sizeof *m);
    m->cfg = cfg;
    m->mem = mem;
    m->chunk = chunk;
    transformer_layer_spec_for(cfg, &m->spec);
    m->B = cfg->micro_batch_size;
    m->T = cfg->seq_length / (cfg->context_parallel_size > 1 ? cfg->context_parallel_size : 1);  // this rank's tokens
    m->C = cfg->hidden_size;
    m->V = cfg->vocab_size;
    m->Vp = cfg->padded_vocab_size;
    m->maxT = cfg->max_position_embeddings;
    m->tp_size = tp_group ? tp_group->size : 1;
    m->tp_rank = tp_group ? tp_group->index : 0;
    m->Vl = m->Vp / m->tp_size;
    m->vocab_start = m->tp_rank * m->Vl;
    transformer_block_init(&m->block, cfg, &m->spec, mem, tp_group, chunk.first_layer, chunk.num_layers,
                           chunk.nslots);
    if (chunk.ep && chunk.ep->size > 1) {  // this rank's experts
        m->block.d.moe.ep = chunk.ep;
        m->block.d.moe.expert_first = chunk.ep->index * m->block.d.moe.E_local;
    }
    if (chunk.etp && chunk.etp->size > 1) m->block.d.moe.etp = chunk.etp;  // and its shard of them
    m->slots = tb_xcalloc((size_t)chunk.nslots, sizeof *m->slots, "microbatch slots");

    layout lay = {0};
    build_layout(m, &lay);
    select_chunk(m, &lay);
    m->params = lay.params;
    m->nparams = lay.n;
    m->num_parameters = lay.offset;
    m->experts_offset = m->num_parameters;
    for (int i = 0; i < m->nparams; i++)
        if (m->params[i].expert) {
            m->expert_parameters += m->params[i].numel;
            if (m->params[i].offset < m->experts_offset) m->experts_offset = m->params[i].offset;
        }

    // the distributed optimizer's slices of the flat buffer (the shared rule,
    // core/shapes/gpt_parameters.h): the experts moved up to their range's start, the end padded
    const int64_t dp = cfg->data_parallel_size, cp = cfg->context_parallel_size > 0 ? cfg->context_parallel_size : 1;
    const int apart = cfg->use_distributed_optimizer && gpt_experts_apart(cfg) && m->expert_parameters > 0;
    const tb_gpt_buffer buf =
        tb_gpt_buffer_layout((int64_t)m->experts_offset, (int64_t)(m->num_parameters - m->experts_offset),
                             (dp > 0 ? dp : 1) * cp, gpt_expert_dp_size(cfg), apart);
    const size_t shift = (size_t)buf.experts_offset - m->experts_offset;
    for (int i = 0; i < m->nparams; i++)
        if (m->params[i].expert) m->params[i].offset += shift;
    m->experts_offset = (size_t)buf.experts_offset;
    m->num_parameters += shift;
    m->padded_parameters = (size_t)buf.padded;
    const size_t bytes = m->padded_parameters * sizeof(float);
    m->grads_reserved = config_shards_grads(cfg) && (dp > 0 ? dp : 1) * cp > 1;
    m->params_reserved = m->grads_reserved && config_shards_params(cfg);
    if (m->params_reserved) {  // nothing held: fsdp_init draws this rank's slices (or a load the whole)
        m->param_memory = tb_reserve(mem, bytes, "parameters (reservation)");
    } else {
        m->param_memory = tb_calloc(mem, TB_MEM_PARAMS, bytes, "parameters");
    }
    m->grad_memory = m->grads_reserved ? tb_reserve(mem, bytes, "gradients (reservation)")
                                       : tb_calloc(mem, TB_MEM_GRADS, bytes, "gradients");
    bind_views(m, m->param_memory, &m->w, m->block.params);
    bind_views(m, m->grad_memory, &m->g, m->block.grads);
    if (!m->params_reserved) init_weights(m);

    const size_t N = (size_t)m->B * m->T, Ns = (size_t)m->block.d.Ns, f = sizeof(float);
    m->d_lnf = tb_alloc(mem, TB_MEM_WORKSPACE, Ns * m->C * f, "grad at final norm output");
    m->d_x = tb_alloc(mem, TB_MEM_WORKSPACE, Ns * m->C * f, "grad at block output");
    m->full = m->tp_size > 1 ? tb_alloc(mem, TB_MEM_WORKSPACE, N * m->C * f, "embedding / output-layer staging")
                             : NULL;
    m->ce_scratch = tb_alloc(mem, TB_MEM_WORKSPACE, 3 * N * f, "cross-entropy statistics");
    for (int s = 0; s < chunk.nslots && !tb_be()->host; s++)
        m->slots[s].tokens_dev = tb_alloc(mem, TB_MEM_WORKSPACE, 2 * N * sizeof(int32_t), "microbatch tokens");
}

void gpt_model_init(gpt_model *m, const tb_config *cfg, tb_allocator *mem, tb_group *tp_group) {
    gpt_chunk_spec whole = {0, cfg->num_layers, 1, 1, 1, NULL, NULL};
    gpt_model_init_chunk(m, cfg, mem, tp_group, whole);
}

// Also frees a model whose construction stopped part way (an OOM under --memory-cap
// unwinds the rank): every field is set once it is allocated, NULL before.
void gpt_model_free(gpt_model *m) {
    for (int i = 0; m->slots && i < m->chunk.nslots; i++) {
        gpt_release_activations(m, i);
        tb_free(m->mem, m->slots[i].tokens_dev);
    }
    free(m->slots);
    transformer_block_free(&m->block);
    tb_free(m->mem, m->d_lnf);
    tb_free(m->mem, m->d_x);
    tb_free(m->mem, m->full);
    tb_free(m->mem, m->ce_scratch);
    if (m->params_reserved) tb_unreserve(m->mem, m->param_memory, m->padded_parameters * sizeof(float));
    else tb_free(m->mem, m->param_memory);
    if (m->grads_reserved) tb_unreserve(m->mem, m->grad_memory, m->padded_parameters * sizeof(float));
    else tb_free(m->mem, m->grad_memory);
    free(m->params);
    memset(m, 0, sizeof *m);
}

int gpt_param_site(const gpt_model *m, const gpt_param *p, int shared_embedding) {
    int l;
    char rest[64];
    if (sscanf(p->name, "h.%d.%63s", &l, rest) == 2) return l;
    if (!strcmp(p->name, "wte.weight")) {
        if (shared_embedding) return GPT_SITE_DEFERRED;
        return m->chunk.has_embedding ? GPT_SITE_EMBEDDING : GPT_SITE_HEAD;
    }
    if (!strcmp(p->name, "wpe.weight")) return GPT_SITE_EMBEDDING;
    return GPT_SITE_HEAD;  // ln_f.*, lm_head.weight
}

const gpt_param *gpt_find_param(const gpt_model *m, const char *name) {
    for (int i = 0; i < m->nparams; i++)
        if (!strcmp(m->params[i].name, name)) return &m->params[i];
    return NULL;
}

void gpt_release_activations(gpt_model *m, int slot) {
    gpt_slot *st = &m->slots[slot];
    transformer_block_release(&m->block, slot);
    tb_free(m->mem, st->lnf);
    tb_free(m->mem, st->logits);
    st->lnf = st->logits = NULL;
}

// (a reserved gradient buffer reads as zeros wherever the FSDP module gave it back: fsdp_start_step)
void gpt_zero_grad(gpt_model *m) {
    if (!m->grads_reserved) tb_be()->zero(m->grad_memory, m->padded_parameters * sizeof(float));
}

double gpt_flops_per_token(int64_t parameters, int layers, int hidden_size, int seq_length) {
    return 6.0 * (double)parameters + 12.0 * (double)layers * (double)hidden_size * (double)seq_length;
}

int64_t gpt_active_parameters(int64_t dense, int64_t expert, const tb_config *cfg) {
    return cfg->num_experts > 0 ? dense + expert * cfg->moe_router_topk / cfg->num_experts : dense + expert;
}

double gpt_chunk_flops_per_token(const gpt_model *m) {
    // under expert parallelism this rank's experts run the tokens of all ep ranks: ep times its
    // own, so they count as the whole layer's experts would (balanced routing, in expectation);
    // their etp shards run the tokens of all etp ranks, each holding 1/tp of a microbatch's
    const int ep = m->block.d.moe.ep_size > 1 ? m->block.d.moe.ep_size : 1;
    const int etp = m->block.d.moe.etp_size > 1 ? m->block.d.moe.etp_size : 1;
    const int64_t expert = (int64_t)m->expert_parameters, dense = (int64_t)m->experts_offset;  // (as padded)
    return gpt_flops_per_token(gpt_active_parameters(dense, expert * ep * etp / m->tp_size, m->cfg), m->chunk.num_layers,
                               m->C / m->tp_size, m->T);
}

// ---------------------------------------------------------------------------------------
// Forward and backward

static void layer_params_needed(void *ctx, int layer) {
    gpt_model *m = ctx;
    m->params_needed(m->grads_ready_ctx, m->chunk_index, layer);
}

float gpt_forward_chunk(gpt_model *m, int slot, const int32_t *inputs, const int32_t *targets, const float *x_in,
                        float *x_out) {
    const int C = m->C, N = m->B * m->T, Ns = m->block.d.Ns;
    const transformer_layer_spec *spec = &m->spec;
    const tb_tp_region *region = &m->block.d.tp;
    const int sp = region->sp && m->tp_size > 1;
    gpt_slot *st = &m->slots[slot];
    gpt_release_activations(m, slot);
    if (st->tokens_dev) {  // a device backend: the step's tokens copied to the slot's device buffer
        if (inputs) tb_be()->copy_from_host(st->tokens_dev, inputs, (size_t)N * sizeof(int32_t));
        if (targets) tb_be()->copy_from_host(st->tokens_dev + N, targets, (size_t)N * sizeof(int32_t));
        inputs = inputs ? st->tokens_dev : NULL;
        targets = targets ? st->tokens_dev + N : NULL;
    }
    st->inputs = inputs;
    st->targets = targets;

    TB_RANGE_PUSH("forward");
    tb_range_annotate(-1, slot);

    float *x0 = transformer_block_input(&m->block, slot);
    m->block.layer_params_needed = m->params_needed ? layer_params_needed : NULL;
    m->block.hooks_ctx = m;
    if (m->chunk.has_embedding) {
        if (m->params_needed) m->params_needed(m->grads_ready_ctx, m->chunk_index, GPT_SITE_EMBEDDING);
        TB_RANGE_PUSH("embedding");
        // (B,T) -> (Ns,C)
        vocab_parallel_embedding_forward(region, x0, m->full, inputs, m->w.wte, m->vocab_start, m->Vl, m->w.wpe);
        TB_RANGE_POP();
        tb_forward_hook_call(m->block.d.forward_hook, region, x0, Ns, C, "embedding");
    } else if (x_in) {
        tb_be()->copy(x0, x_in, (size_t)Ns * C * sizeof(float));
    }

    const float *x = transformer_block_forward(&m->block, slot);
    if (!m->chunk.has_head) {
        if (x_out) tb_be()->copy(x_out, x, (size_t)Ns * C * sizeof(float));
        TB_RANGE_POP();
        return 0.0f;
    }

    if (m->params_needed) m->params_needed(m->grads_ready_ctx, m->chunk_index, GPT_SITE_HEAD);
    TB_RANGE_PUSH("final_layernorm");
    // ln_f out (N,C) gathered, mean (Ns), rstd (Ns) in one activation allocation
    st->lnf = tb_alloc(m->mem, TB_MEM_ACTIVATIONS, ((size_t)N * C + 2 * (size_t)Ns) * sizeof(float),
                       "final layernorm");
    st->lnf_mean = st->lnf + (size_t)N * C;
    st->lnf_rstd = st->lnf_mean + Ns;
    float *norm_out = sp ? m->block.ws.norm_out : st->lnf;
    spec->final_layernorm->forward(norm_out, st->lnf_mean, st->lnf_rstd, x, m->w.lnf_w, m->w.lnf_b, Ns, C,
                                   (float)m->cfg->norm_epsilon);
    if (sp) gather_from_sequence_parallel_region(region, norm_out, st->lnf);
    TB_RANGE_POP();

    TB_RANGE_PUSH("output_layer");
    // logits (N,Vl) of this rank's vocabulary shard, and per-token losses (N)
    st->logits = tb_alloc(m->mem, TB_MEM_ACTIVATIONS, ((size_t)N * m->Vl + (size_t)N) * sizeof(float), "logits");
    st->losses = st->logits + (size_t)N * m->Vl;
    column_parallel_linear_forward(st->logits, st->lnf, m->w.lm_head, NULL, N, C, m->Vl);
    TB_RANGE_POP();

    TB_RANGE_PUSH("loss");
    vocab_parallel_cross_entropy_forward(region->tp, st->logits, st->losses, m->ce_scratch, targets, N, m->Vl,
                                         m->vocab_start, m->V, region->faults);
    const double sum = tb_be_sum_to_host(st->losses, (size_t)N);
    TB_RANGE_POP();

    TB_RANGE_POP();
    return (float)(sum / N);
}

static void layer_grads_done(void *ctx, int layer) {
    gpt_model *m = ctx;
    m->grads_ready(m->grads_ready_ctx, m->chunk_index, layer);
}

static void layer_backward_needs(void *ctx, int layer) {
    gpt_model *m = ctx;
    m->params_needed_backward(m->grads_ready_ctx, m->chunk_index, layer);
}

// The backward's hooks at a site: before it (params_needed_backward), after it (grads_ready).
static void backward_needs(gpt_model *m, int site) {
    if (m->params_needed_backward) m->params_needed_backward(m->grads_ready_ctx, m->chunk_index, site);
}

static void grads_done(gpt_model *m, int site) {
    if ((m->grads_final || m->grads_each_microbatch) && m->grads_ready)
        m->grads_ready(m->grads_ready_ctx, m->chunk_index, site);
}

void gpt_backward_chunk(gpt_model *m, int slot, float loss_scale, const float *d_out, float *d_in) {
    const int C = m->C, N = m->B * m->T, Ns = m->block.d.Ns;
    const transformer_layer_spec *spec = &m->spec;
    const tb_tp_region *region = &m->block.d.tp;
    gpt_slot *st = &m->slots[slot];

    TB_RANGE_PUSH("backward");
    tb_range_annotate(-1, slot);

    const float *dx = d_out;
    if (m->chunk.has_head) {
        backward_needs(m, GPT_SITE_HEAD);
        TB_RANGE_PUSH("loss.backward");
        vocab_parallel_cross_entropy_backward(st->logits, st->targets, loss_scale / (float)N, N, m->Vl,
                                              m->vocab_start);
        TB_RANGE_POP();

        TB_RANGE_PUSH("output_layer.backward");
        // dlogits (N,Vl) -> d ln_f (Ns,C), summed over tp
        column_parallel_linear_backward(region, m->d_lnf, m->full, m->g.lm_head, NULL, st->logits, st->lnf,
                                        m->w.lm_head, N, C, m->Vl);
        tb_free(m->mem, st->logits);
        st->logits = NULL;
        TB_RANGE_POP();

        TB_RANGE_PUSH("final_layernorm.backward");
        spec->final_layernorm->backward(m->d_x, m->g.lnf_w, m->g.lnf_b, m->d_lnf,
                                        transformer_block_output(&m->block, slot), m->w.lnf_w, st->lnf_mean,
                                        st->lnf_rstd, Ns, C);
        tb_free(m->mem, st->lnf);
        st->lnf = NULL;
        TB_RANGE_POP();
        dx = m->d_x;
        grads_done(m, GPT_SITE_HEAD);
    }

    m->block.d.moe_loss_scale = loss_scale;  // the load-balancing loss's gradient scales as the main loss's
    const int report = (m->grads_final || m->grads_each_microbatch) && m->grads_ready;
    m->block.layer_grads_done = report ? layer_grads_done : NULL;
    m->block.layer_backward_needs = m->params_needed_backward ? layer_backward_needs : NULL;
    m->block.hooks_ctx = m;
    const float *dx0 = transformer_block_backward(&m->block, slot, dx);
    m->block.layer_grads_done = NULL;

    if (m->chunk.has_embedding) {
        backward_needs(m, GPT_SITE_EMBEDDING);
        TB_RANGE_PUSH("embedding.backward");
        vocab_parallel_embedding_backward(region, m->g.wte, m->g.wpe, m->full, dx0, st->inputs, m->vocab_start,
                                          m->Vl);
        TB_RANGE_POP();
        grads_done(m, GPT_SITE_EMBEDDING);
    } else if (d_in) {
        tb_be()->copy(d_in, dx0, (size_t)Ns * C * sizeof(float));
    }

    TB_RANGE_POP();
}

float gpt_forward(gpt_model *m, const int32_t *inputs, const int32_t *targets) {
    return gpt_forward_chunk(m, 0, inputs, targets, NULL, NULL);
}

void gpt_backward(gpt_model *m, float loss_scale) { gpt_backward_chunk(m, 0, loss_scale, NULL, NULL); }
