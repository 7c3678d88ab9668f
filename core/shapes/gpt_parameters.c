// gpt_parameters.c — see gpt_parameters.h.
#include "core/shapes/gpt_parameters.h"

#include <stdio.h>
#include <string.h>

typedef struct emitter {
    void (*each)(void *arg, const tb_gpt_tensor *t);
    void *arg;
    tb_param_place place;
    int layer;
} emitter;

static tb_gpt_tensor tensor(const emitter *e, int ndim, int rows, int cols, tb_param_init init, const char *what) {
    tb_gpt_tensor t;
    memset(&t, 0, sizeof t);
    t.what = what;
    t.place = e->place;
    t.layer = e->layer;
    t.ndim = ndim;
    t.rows = t.hf_rows = rows;
    t.cols = cols;
    t.init = init;
    return t;
}

// A weight matrix (rows, cols): decayed, Conv1D-transposed in Hugging Face's files.
static tb_gpt_tensor matrix(const emitter *e, int rows, int cols, tb_param_init init, const char *name) {
    tb_gpt_tensor t = tensor(e, 2, rows, cols, init, name);
    t.decay = t.hf_transposed = 1;
    return t;
}

// A vector of n: a norm's weight or bias, a linear's bias.
static tb_gpt_tensor vector(const emitter *e, int n, tb_param_init init, const char *name) {
    return tensor(e, 1, 1, n, init, name);
}

static tb_gpt_tensor split(tb_gpt_tensor t, tb_param_split how, int axis, int nseg, int s0, int s1, int s2) {
    t.split = how;
    t.axis = axis;
    t.nseg = nseg;
    t.seg[0] = s0, t.seg[1] = s1, t.seg[2] = s2;
    return t;
}

static tb_gpt_tensor sp_partial(tb_gpt_tensor t) {
    t.sp_partial = 1;
    return t;
}

static tb_gpt_tensor tp_partial(tb_gpt_tensor t) {
    t.tp_partial = 1;
    return t;
}

static void emit(const emitter *e, tb_gpt_tensor t) { e->each(e->arg, &t); }

// A MoE layer's MLP (transformer/moe/moe_layer.h): the router (E, C), replicated over tp
// (under sequence parallelism each tp rank routes its own tokens: its gradient a partial sum,
// like a norm's); per expert e an MLP of the dense one's kind, h.L.mlp.experts.e.*, split
// over the etp group (fc1 column-parallel, fc2 row-parallel, its bias whole on every etp
// rank); the shared expert h.L.mlp.shared_experts.*, split over tp as the dense MLP.
static void moe_layer(const emitter *e, const tb_gpt_dims *d) {
    const int C = d->C, Fe = d->Fe, Fe1 = d->fc1_factor * Fe, nseg = d->fc1_factor;
    emit(e, sp_partial(matrix(e, d->E, C, TB_INIT_STD, "mlp.router.weight")));
    for (int x = 0; x < d->E; x++) {  // named h.L.mlp.experts.x.<what>
        tb_gpt_tensor t = split(matrix(e, Fe1, C, TB_INIT_STD, "c_fc.weight"), TB_SPLIT_ETP, 0, nseg, Fe, Fe, 0);
        t.expert = 1 + x;
        emit(e, t);
        if (d->bias) {
            t = split(vector(e, Fe1, TB_INIT_ZEROS, "c_fc.bias"), TB_SPLIT_ETP, 1, nseg, Fe, Fe, 0);
            t.expert = 1 + x;
            emit(e, t);
        }
        t = split(matrix(e, C, Fe, TB_INIT_OUT_STD, "c_proj.weight"), TB_SPLIT_ETP, 1, 1, Fe, 0, 0);
        t.expert = 1 + x;
        emit(e, t);
        if (d->bias) {
            t = vector(e, C, TB_INIT_ZEROS, "c_proj.bias");
            t.expert = 1 + x;
            t.etp_replicated = 1;
            emit(e, t);
        }
    }
    if (d->Fs > 0) {  // dense: every ep rank holds it
        const int Fs = d->Fs, Fs1 = d->fc1_factor * Fs;
        emit(e, split(matrix(e, Fs1, C, TB_INIT_STD, "mlp.shared_experts.c_fc.weight"), TB_SPLIT_TP, 0, nseg, Fs, Fs,
                      0));
        if (d->bias)
            emit(e, split(vector(e, Fs1, TB_INIT_ZEROS, "mlp.shared_experts.c_fc.bias"), TB_SPLIT_TP, 1, nseg, Fs, Fs,
                          0));
        emit(e, split(matrix(e, C, Fs, TB_INIT_OUT_STD, "mlp.shared_experts.c_proj.weight"), TB_SPLIT_TP, 1, 1, Fs, 0,
                      0));
        if (d->bias) emit(e, sp_partial(vector(e, C, TB_INIT_ZEROS, "mlp.shared_experts.c_proj.bias")));
    }
}

void tb_gpt_tensor_name(const tb_gpt_tensor *t, char *buf, size_t size) {
    if (t->place != TB_PLACE_LAYER) snprintf(buf, size, "%s", t->what);
    else if (t->expert) snprintf(buf, size, "h.%d.mlp.experts.%d.%s", t->layer, t->expert - 1, t->what);
    else snprintf(buf, size, "h.%d.%s", t->layer, t->what);
}

void tb_gpt_tensors(const tb_gpt_dims *d, void (*each)(void *arg, const tb_gpt_tensor *t), void *arg) {
    const int C = d->C, F = d->F, F1 = d->fc1_factor * F, QKV = (d->NH + 2 * d->G) * d->hs;
    const int q = d->NH * d->hs, kv = d->G * d->hs, gates = d->fc1_factor;
    emitter e = {each, arg, TB_PLACE_EMBEDDING, -1};

    tb_gpt_tensor wte = split(tensor(&e, 2, d->Vp, C, TB_INIT_STD, "wte.weight"), TB_SPLIT_TP, 0, 1, d->Vp, 0, 0);
    wte.decay = 1;
    wte.hf_rows = d->V;
    emit(&e, wte);  // VocabParallelEmbedding
    if (d->learned_pos) {  // rope rotates q and k instead; none: NoPE
        e.place = TB_PLACE_POSITION;
        tb_gpt_tensor wpe = tensor(&e, 2, d->maxT, C, TB_INIT_STD, "wpe.weight");
        wpe.decay = 1;
        emit(&e, wpe);
    }
    e.place = TB_PLACE_LAYER;
    for (int l = 0; l < d->L; l++) {
        e.layer = l;  // named h.L.<what>
        emit(&e, sp_partial(vector(&e, C, TB_INIT_ONES, "ln_1.weight")));
        if (d->norm_bias) emit(&e, sp_partial(vector(&e, C, TB_INIT_ZEROS, "ln_1.bias")));
        emit(&e, split(matrix(&e, QKV, C, TB_INIT_STD, "attn.c_attn.weight"), TB_SPLIT_TP, 0, 3, q, kv, kv));
        if (d->bias) emit(&e, split(vector(&e, QKV, TB_INIT_ZEROS, "attn.c_attn.bias"), TB_SPLIT_TP, 1, 3, q, kv, kv));
        if (d->qk_norm) {  // over the head size, shared by the heads: whole on every tp rank
            emit(&e, tp_partial(vector(&e, d->hs, TB_INIT_ONES, "attn.q_norm.weight")));
            if (d->norm_bias) emit(&e, tp_partial(vector(&e, d->hs, TB_INIT_ZEROS, "attn.q_norm.bias")));
            emit(&e, tp_partial(vector(&e, d->hs, TB_INIT_ONES, "attn.k_norm.weight")));
            if (d->norm_bias) emit(&e, tp_partial(vector(&e, d->hs, TB_INIT_ZEROS, "attn.k_norm.bias")));
        }
        emit(&e, split(matrix(&e, C, C, TB_INIT_OUT_STD, "attn.c_proj.weight"), TB_SPLIT_TP, 1, 1, C, 0, 0));
        if (d->bias) emit(&e, sp_partial(vector(&e, C, TB_INIT_ZEROS, "attn.c_proj.bias")));
        emit(&e, sp_partial(vector(&e, C, TB_INIT_ONES, "ln_2.weight")));
        if (d->norm_bias) emit(&e, sp_partial(vector(&e, C, TB_INIT_ZEROS, "ln_2.bias")));
        if (d->E > 0 && l % d->freq == 0) {
            moe_layer(&e, d);
            continue;
        }
        emit(&e, split(matrix(&e, F1, C, TB_INIT_STD, "mlp.c_fc.weight"), TB_SPLIT_TP, 0, gates, F, F, 0));
        if (d->bias) emit(&e, split(vector(&e, F1, TB_INIT_ZEROS, "mlp.c_fc.bias"), TB_SPLIT_TP, 1, gates, F, F, 0));
        emit(&e, split(matrix(&e, C, F, TB_INIT_OUT_STD, "mlp.c_proj.weight"), TB_SPLIT_TP, 1, 1, F, 0, 0));
        if (d->bias) emit(&e, sp_partial(vector(&e, C, TB_INIT_ZEROS, "mlp.c_proj.bias")));
    }
    e.place = TB_PLACE_HEAD;
    e.layer = -1;
    emit(&e, sp_partial(vector(&e, C, TB_INIT_ONES, "ln_f.weight")));
    if (d->norm_bias) emit(&e, sp_partial(vector(&e, C, TB_INIT_ZEROS, "ln_f.bias")));
    if (!d->tied) {  // ColumnParallelLinear over the vocabulary
        tb_gpt_tensor head =
            split(tensor(&e, 2, d->Vp, C, TB_INIT_STD, "lm_head.weight"), TB_SPLIT_TP, 0, 1, d->Vp, 0, 0);
        head.decay = 1;
        head.hf_rows = d->V;
        emit(&e, head);
    }
}

int tb_gpt_tensor_kept(const tb_gpt_dims *d, const tb_gpt_chunk *c, const tb_gpt_tensor *t) {
    int keep;
    switch (t->place) {
    case TB_PLACE_EMBEDDING: keep = c->has_embedding || (c->has_head && d->tied); break;
    case TB_PLACE_POSITION: keep = c->has_embedding; break;
    case TB_PLACE_LAYER: keep = t->layer >= c->first_layer && t->layer < c->first_layer + c->num_layers; break;
    default: keep = c->has_head; break;
    }
    if (t->expert) keep = keep && t->expert - 1 >= c->expert_first && t->expert - 1 < c->expert_first + c->experts;
    return keep;
}

int tb_gpt_tensor_counted(const tb_gpt_chunk *c, const tb_gpt_tensor *t) {
    return t->place != TB_PLACE_EMBEDDING || c->has_embedding;
}

static int64_t gcd64(int64_t a, int64_t b) { return b ? gcd64(b, a % b) : a; }
static int64_t round_up(int64_t v, int64_t unit) { return (v + unit - 1) / unit * unit; }

tb_gpt_buffer tb_gpt_buffer_layout(int64_t dense, int64_t experts, int64_t dp_cp, int64_t expert_dp, int apart) {
    if (dp_cp < 1) dp_cp = 1;
    if (expert_dp < 1) expert_dp = 1;
    tb_gpt_buffer b;
    b.unit = 16 * (apart ? dp_cp / gcd64(dp_cp, expert_dp) * expert_dp : dp_cp);
    b.experts_offset = apart ? round_up(dense, b.unit) : dense;
    b.padded = round_up(b.experts_offset + experts, b.unit);
    return b;
}

int64_t tb_gpt_tensor_numel(const tb_gpt_tensor *t, int tp, int etp) {
    const int64_t n = t->split == TB_SPLIT_TP ? tp : t->split == TB_SPLIT_ETP ? etp : 1;
    return t->axis == 0 ? (int64_t)t->rows / n * t->cols : (int64_t)t->rows * (t->cols / n);
}
