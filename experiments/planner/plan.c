// plan.c — one layout's budget (plan.h): rules, parameters, bytes, activations, communication,
// bubble and the step-time estimate. docs/ARCHITECTURE.md, "Planner".
#include "planner/plan.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/xalloc.h"
#include "core/shapes/gpt_parameters.h"
#include "core/shapes/saved_tensors.h"
#include "planner/plan_fsdp.h"

static int64_t round_up(int64_t v, int64_t unit) { return (v + unit - 1) / unit * unit; }

// ---------------------------------------------------------------------------------------
// Parameters, as engine/models/gpt.c lays them out (build_layout, select_chunk)

typedef struct shape {
    int C, NH, G, hs, F, F1, QKV, tp, bias, norm_bias, learned_pos, tied;
    int64_t Vp, maxT;
    // MoE (engine/transformer/moe/): experts per layer, top-k, each expert's F and fc1 output,
    // the shared expert's, layer l is MoE when l % freq == 0, expert-parallel ranks, expert
    // tensor-parallel ranks (each expert split over them; Megatron's default: tp)
    int E, k, Fe, Fe1, Fs, Fs1, freq, ep, etp;
    tb_gpt_dims dims;  // the parameters' rule's (core/shapes/gpt_parameters.h)
} shape;

static shape shape_of(const tb_config *c) {
    shape s;
    s.C = c->hidden_size;
    s.NH = c->num_attention_heads;
    s.G = c->num_query_groups;
    s.hs = s.C / s.NH;
    s.F = c->ffn_hidden_size;
    s.F1 = c->swiglu ? 2 * s.F : s.F;  // SwiGLU's fc1 holds the gate and the up projection
    s.QKV = (s.NH + 2 * s.G) * s.hs;
    s.tp = c->tensor_model_parallel_size;
    s.bias = !c->disable_bias_linear;
    s.norm_bias = c->normalization == TB_NORM_LAYERNORM;  // RMSNorm has no bias
    s.learned_pos = c->position_embedding_type == TB_POS_LEARNED_ABSOLUTE;
    s.tied = !c->untie_embeddings_and_output_weights;
    s.Vp = c->padded_vocab_size;
    s.maxT = c->max_position_embeddings;
    const int gate = c->swiglu ? 2 : 1;
    s.E = c->num_experts;
    s.k = s.E > 0 ? c->moe_router_topk : 0;
    s.Fe = s.E > 0 ? c->moe_ffn_hidden_size : 0;
    s.Fe1 = gate * s.Fe;
    s.Fs = s.E > 0 ? c->moe_shared_expert_intermediate_size : 0;
    s.Fs1 = gate * s.Fs;
    s.freq = c->moe_layer_freq > 0 ? c->moe_layer_freq : 1;
    s.ep = c->expert_model_parallel_size > 0 ? c->expert_model_parallel_size : 1;
    s.etp = s.E > 0 && c->expert_tensor_parallel_size > 0 ? c->expert_tensor_parallel_size : 1;
    s.dims = (tb_gpt_dims){.C = s.C, .NH = s.NH, .G = s.G, .hs = s.hs, .F = s.F, .fc1_factor = gate,
                           .Vp = (int)s.Vp, .V = c->vocab_size, .maxT = (int)s.maxT, .L = c->num_layers,
                           .bias = s.bias, .norm_bias = s.norm_bias, .learned_pos = s.learned_pos, .tied = s.tied,
                           .qk_norm = c->qk_layernorm,
                           .E = s.E, .freq = s.freq, .Fe = s.Fe, .Fs = s.Fs};
    return s;
}

static int is_moe_layer(const shape *s, int layer) { return s->E > 0 && layer % s->freq == 0; }

// One model chunk's figures on one rank.
typedef struct chunk_params {
    int64_t held, counted, replicated_counted, aligned, sp_partial, tp_partial, wte;
    int64_t expert, expert_aligned;  // of held / aligned: the rank's E/ep experts' tensors
    int64_t expert_replicated;       // of expert: replicated over etp (fc2's bias), counted on etp rank 0
} chunk_params;

// What a rank holds is the engine's rule (core/shapes/gpt_parameters.h): its tensors, summed.
typedef struct rank_sum {
    const tb_gpt_dims *d;
    tb_gpt_chunk chunk;
    int tp, etp;
    chunk_params p;
} rank_sum;

static void add_kept(void *arg, const tb_gpt_tensor *t) {
    rank_sum *r = arg;
    if (!tb_gpt_tensor_kept(r->d, &r->chunk, t)) return;
    chunk_params *p = &r->p;
    const int64_t n = tb_gpt_tensor_numel(t, r->tp, r->etp), aligned = round_up(n, 16);  // place(): 64-byte boundaries
    const int counted = tb_gpt_tensor_counted(&r->chunk, t);
    p->held += n;
    p->aligned += aligned;
    if (counted) p->counted += n;
    if (counted && t->split != TB_SPLIT_TP) p->replicated_counted += n;  // an expert's split is etp's: counted once
    if (t->sp_partial) p->sp_partial += n;
    if (t->tp_partial) p->tp_partial += n;
    if (t->place == TB_PLACE_EMBEDDING) p->wte = n;
    if (t->expert) {
        p->expert += n;
        p->expert_aligned += aligned;  // placed after every dense tensor, 16-aligned the same
        if (t->etp_replicated) p->expert_replicated += n;
    }
}

// The rule's tensors of one part, on one rank: a layer (MoE or dense) alone, or the chunk's
// ends (the embedding, the head).
static chunk_params part_parameters(const shape *s, int layer_kind, int has_embedding, int has_head, int ep,
                                    int etp) {
    tb_gpt_dims d = s->dims;
    if (layer_kind < 0) {
        d.L = 0;
    } else {
        d.L = 1;
        if (!layer_kind) d.E = 0;  // a dense layer
        d.freq = 1;
    }
    rank_sum r = {.d = &d,
                  .chunk = {.first_layer = 0, .num_layers = d.L, .has_embedding = has_embedding, .has_head = has_head,
                            .expert_first = 0, .experts = s->E / ep},
                  .tp = s->tp,
                  .etp = etp};
    tb_gpt_tensors(&d, add_kept, &r);
    return r.p;
}

static void add_params(chunk_params *to, const chunk_params *p, int64_t times) {
    to->held += times * p->held;
    to->counted += times * p->counted;
    to->replicated_counted += times * p->replicated_counted;
    to->aligned += times * p->aligned;
    to->sp_partial += times * p->sp_partial;
    to->tp_partial += times * p->tp_partial;
    to->expert += times * p->expert;
    to->expert_aligned += times * p->expert_aligned;
    to->expert_replicated += times * p->expert_replicated;
}

// The rule's figures of each part at one (ep, etp), asked once each: a dense and a MoE layer,
// and the chunk ends by (has_embedding, has_head).
typedef struct param_parts {
    int ep, etp;
    chunk_params layer[2], ends[2][2];
    int have_layer[2], have_ends[2][2];
} param_parts;

static const chunk_params *layer_part(const shape *s, param_parts *c, int moe) {
    if (!c->have_layer[moe]) c->layer[moe] = part_parameters(s, moe, 0, 0, c->ep, c->etp), c->have_layer[moe] = 1;
    return &c->layer[moe];
}

// first_layer: the chunk's first layer in the whole model (which layers are MoE); the parts'
// ep, etp: the expert-parallel ranks the experts are spread over and the ranks each is split
// over (1, 1: the whole model's experts). Every layer of a kind holds the same.
static chunk_params chunk_parameters(const shape *s, param_parts *parts, int first_layer, int layers,
                                     int has_embedding, int has_head) {
    if (!parts->have_ends[has_embedding][has_head]) {
        parts->ends[has_embedding][has_head] = part_parameters(s, -1, has_embedding, has_head, parts->ep, parts->etp);
        parts->have_ends[has_embedding][has_head] = 1;
    }
    chunk_params p = parts->ends[has_embedding][has_head];
    int moe_layers = 0;
    for (int l = 0; l < layers; l++) moe_layers += is_moe_layer(s, first_layer + l);
    if (layers > moe_layers) add_params(&p, layer_part(s, parts, 0), layers - moe_layers);
    if (moe_layers) add_params(&p, layer_part(s, parts, 1), moe_layers);
    return p;
}

// The model's N from one tp rank's chunk: the sharded tensors tp times, the replicated once.
static int64_t whole_of(const chunk_params *p, int tp) {
    return (p->counted - p->replicated_counted) * tp + p->replicated_counted;
}

int64_t plan_model_parameters(const tb_config *cfg) {
    shape s = shape_of(cfg);
    param_parts parts = {.ep = 1, .etp = 1};
    chunk_params whole = chunk_parameters(&s, &parts, 0, cfg->num_layers, 1, 1);
    return whole_of(&whole, s.tp);
}

int64_t plan_model_expert_parameters(const tb_config *cfg) {
    shape s = shape_of(cfg);
    param_parts parts = {.ep = 1, .etp = 1};
    chunk_params whole = chunk_parameters(&s, &parts, 0, cfg->num_layers, 1, 1);
    return whole.expert;
}

// The engine's gpt_active_parameters: dense + experts x k / E (integer division, as it does).
int64_t plan_active_parameters(const tb_config *cfg) {
    const int64_t all = plan_model_parameters(cfg), expert = plan_model_expert_parameters(cfg);
    return cfg->num_experts > 0 ? all - expert + expert * cfg->moe_router_topk / cfg->num_experts : all;
}

// ---------------------------------------------------------------------------------------
// Activations: the bytes a chunk holds per microbatch, walked through the schedule

// One chunk's allocations (bytes) in the order the engine makes them (transformer_block.c,
// models/gpt.c): per layer its saved tensors A and its output stream S, the block input S,
// on the head's chunk the final norm H1 and the logits H2; recompute flags per layer.
typedef struct chunk_acts {
    int L;
    int64_t A, S, H1, H2;
    int has_head;
    int full_recompute, method_block, n;  // recompute_granularity full, its method and layers
    int64_t A_moe;                        // A of a MoE layer (its MLP's saved tensors are the MoE layer's)
    int first, E, freq;                   // the chunk's first layer; which layers are MoE (E > 0)
} chunk_acts;

static int64_t layer_A(const chunk_acts *c, int l) {
    return c->E > 0 && (c->first + l) % c->freq == 0 ? c->A_moe : c->A;
}

static int recomputed(const chunk_acts *c, int l) {
    if (!c->full_recompute) return 0;
    return c->method_block ? l < c->n : 1;
}
static int chunk_start(const chunk_acts *c, int l) {
    return c->full_recompute && !c->method_block ? l / c->n * c->n : l;
}
static int chunk_len(const chunk_acts *c, int l) {
    if (!(c->full_recompute && !c->method_block)) return 1;
    int s = chunk_start(c, l);
    return c->n < c->L - s ? c->n : c->L - s;
}

typedef struct acts_walk {
    int64_t current, peak;
    int held, held_at_peak;  // forward passes held
} acts_walk;

static void grow(acts_walk *w, int64_t bytes) {
    w->current += bytes;
    if (w->current > w->peak) {
        w->peak = w->current;
        w->held_at_peak = w->held;
    }
}

static void forward_pass(acts_walk *w, const chunk_acts *c) {
    w->held++;
    grow(w, c->S);  // the block input x[0]
    for (int l = 0; l < c->L; l++) {
        grow(w, layer_A(c, l));
        grow(w, c->S);
        if (recomputed(c, l)) {
            w->current -= layer_A(c, l);                      // only the chunk's input is kept
            if (l > chunk_start(c, l)) w->current -= c->S;
        }
    }
    if (c->has_head) {
        grow(w, c->H1);
        grow(w, c->H2);
    }
}

static void backward_pass(acts_walk *w, const chunk_acts *c) {
    if (c->has_head) w->current -= c->H1 + c->H2;
    for (int l = c->L - 1; l >= 0; l--) {
        if (recomputed(c, l) && l == chunk_start(c, l) + chunk_len(c, l) - 1) {
            const int s = chunk_start(c, l), n = chunk_len(c, l);
            for (int k = s; k < s + n; k++) {
                grow(w, layer_A(c, k));
                if (k + 1 < s + n) grow(w, c->S);
            }
        }
        w->current -= layer_A(c, l) + c->S;  // acts[l], x[l + 1]
    }
    w->current -= c->S;  // x[0]
    w->held--;
}

// The engine's schedule (engine/pipeline_parallel/schedules.c, Megatron's): warm-up forwards,
// one forward + one backward in the steady state, cool-down backwards, over m·v virtual
// microbatches; virtual microbatch k runs chunk (k mod p·v)/p, backward chunks counting down.
static int warmup_of(int p, int r, int m, int v) {
    if (p == 1) return 0;
    int w = v > 1 ? (p - r - 1) * 2 + (v - 1) * p : p - r - 1;
    return w < m * v ? w : m * v;
}
static int op_chunk(char kind, int k, int p, int v) {
    if (v <= 1) return 0;
    int c = k % (p * v) / p;
    return kind == 'B' ? v - 1 - c : c;
}

static acts_walk walk_schedule(const chunk_acts *chunks, int p, int r, int m, int v) {
    acts_walk w = {0, 0, 0, 0};
    const int total = m * v, warm = p == 1 ? 0 : warmup_of(p, r, m, v);
    if (p == 1) {
        for (int k = 0; k < total; k++) {
            forward_pass(&w, &chunks[op_chunk('F', k, p, v)]);
            backward_pass(&w, &chunks[op_chunk('B', k, p, v)]);
        }
        return w;
    }
    for (int k = 0; k < warm; k++) forward_pass(&w, &chunks[op_chunk('F', k, p, v)]);
    for (int i = 0; i < total - warm; i++) {
        forward_pass(&w, &chunks[op_chunk('F', warm + i, p, v)]);
        backward_pass(&w, &chunks[op_chunk('B', i, p, v)]);
    }
    for (int k = total - warm; k < total; k++) backward_pass(&w, &chunks[op_chunk('B', k, p, v)]);
    return w;
}

// The engine's saved tensors per layer, fp32, 64-byte aligned: the rule the engine's plan reads
// (shapes/saved_tensors.h), on this layout's shapes.
static void engine_acts(const tb_config *c, const shape *s, chunk_acts *a, int has_head) {
    const int tp = s->tp, cp = c->context_parallel_size;
    const int64_t B = c->micro_batch_size, T = c->seq_length / cp, N = B * T;
    const int64_t Ns = c->sequence_parallel ? N / tp : N, C = s->C;
    const int64_t NHl = s->NH / tp, CA = NHl * s->hs, QKVl = s->QKV / tp, Fl = s->F / tp, F1l = s->F1 / tp;
    tb_layer_saved_shape layer = {.B = B, .T = T, .Ns = Ns, .C = C, .QKV = QKVl, .CA = CA, .NH = NHl,
                                  .G = s->G / tp, .F = Fl, .F1 = F1l,
                                  .flash = config_attention_core(c) == TB_ATTENTION_FLASH,
                                  .selective = c->recompute_granularity == TB_RECOMPUTE_SELECTIVE,
                                  .qk_norm = c->qk_layernorm};
    int64_t floats[TB_LAYER_SAVED];
    tb_layer_saved_floats(&layer, floats);
    a->A = 0;
    for (int i = 0; i < TB_LAYER_SAVED; i++) a->A += tb_saved_bytes(floats[i]);
    if (s->E > 0) {
        // a MoE layer (transformer_layer.c plan_for, moe_layer.c): no dense fc1/act; the router's
        // and dispatcher's saved tensors (moe_layer_saved_counts) over the rank's Ns tokens
        // (under sequence parallelism its shard), the shared expert's over the whole N (its
        // input gathered over tp, its Fs/tp columns), then the forward's one allocation for the
        // R rows reaching this rank's experts after the ep all-to-all and the etp all-gather,
        // (R, C + F1/etp + F/etp) floats + 1 byte (the all-gather dispatcher's, with moved
        // tokens, also a gathered output column C and its gathered routing, 3 x 4 bytes per
        // choice of every ep x etp rank's tokens). R = Ns·k exactly without ep and without
        // capacity (no token dropped; x etp after the gather); under expert parallelism it is
        // the routing's (data-dependent): a balanced router's etp·Ns·k, an estimate.
        const int64_t M = Ns * s->k, R = (int64_t)s->etp * M;
        const int64_t Fe1l = s->Fe1 / s->etp, Fel = s->Fe / s->etp;
        const tb_moe_saved_shape routed = {.Ns = Ns, .C = C, .E = s->E, .k = s->k, .E_local = s->E / s->ep,
                                           .ep = s->ep, .etp = s->etp, .M = M, .shared_rows = N,
                                           .Fs1 = s->Fs1 / tp, .Fs = s->Fs / tp};
        int64_t moe_floats[TB_MOE_SAVED];
        tb_moe_saved_floats(&routed, moe_floats);
        layer.moe = 1;
        tb_layer_saved_floats(&layer, floats);
        int64_t moe = 0;
        for (int i = 0; i < TB_LAYER_SAVED; i++) moe += tb_saved_bytes(floats[i]);
        for (int i = 0; i < TB_MOE_SAVED; i++) moe += tb_saved_bytes(moe_floats[i]);
        const int moved = s->ep > 1 || s->etp > 1;
        const int gathered = moved && c->moe_token_dispatcher_type == TB_MOE_DISPATCHER_ALLGATHER;
        a->A_moe = moe + R * (C + Fe1l + Fel + (gathered ? C : 0)) * 4 + 1;
        if (gathered) a->A_moe += (int64_t)s->ep * s->etp * Ns * s->k * 3 * 4 + 1;
    }
    a->S = Ns * C * 4;
    a->H1 = has_head ? (N * C + 2 * Ns) * 4 : 0;
    a->H2 = has_head ? (N * (s->Vp / tp) + N) * 4 : 0;
}

// Korthikanti et al. 2022, Table 2, per layer in bytes (16-bit activations, dropout masks of
// one byte), generalised: the sharded attention part 4 + 4·g/a (Q, K, V, the projection's
// input; 8 for multi-head attention), the MLP 4·F/h (GELU) or 6·F/h (SwiGLU's two fc1 halves
// and its output), so that tensor + sequence parallel + selective recompute is
// s·b·h·(18 + 4·F/h)/t, Megatron's theoretical_memory_usage. The core attention's 5·a·s/h is
// dropped with selective recompute or the flash core. The stream S (the layer input, the
// checkpoint of full recompute) is 2·s·b·h (/t with sequence parallelism) of the 10.
// --qk-layernorm adds its norms' inputs, Q and K before the norms (2 + 2·g/a), and their
// statistics (a mean and an rstd in fp32 per head and token: 8·(a + g)/h), sharded with the heads.
static void korthikanti_acts(const tb_config *c, const shape *s, chunk_acts *a, int has_head) {
    const double t = s->tp, sbh = (double)c->micro_batch_size * (c->seq_length / c->context_parallel_size) * s->C;
    const double a_heads = s->NH, h = s->C, seq = (double)c->seq_length / c->context_parallel_size;
    const double qk = c->qk_layernorm ? 2.0 + 2.0 * s->G / a_heads + 8.0 * (a_heads + s->G) / h : 0.0;
    const double sharded = 4.0 + 4.0 * s->G / a_heads + (c->swiglu ? 6.0 : 4.0) * s->F / h + qk;
    const int core_saved = c->recompute_granularity != TB_RECOMPUTE_SELECTIVE && config_attention_core(c) != TB_ATTENTION_FLASH;
    // the scores of the rank's s/cp queries against the whole sequence's keys
    const double core = core_saved ? 5.0 * a_heads * c->seq_length / h : 0.0;
    const int sp = c->sequence_parallel && s->tp > 1;
    const double layer = sp ? sbh * (10.0 + sharded + core) / t : sbh * (10.0 + (sharded + core) / t);
    a->S = (int64_t)llround(2.0 * sbh / (sp ? t : 1.0));
    a->A = (int64_t)llround(layer) - a->S;
    if (s->E > 0) {
        // an estimate for a MoE layer: the dense MLP's term replaced by k routed copies of each
        // token through an expert MLP (its input 2·k·s·b·h, etp times after the etp gather, its
        // fc1 and activation k·(4 or 6)·Fe/h: etp rows of Fe/etp columns), the shared expert's
        // (split over tp as the dense MLP), and the router's scores (fp32, E per token); under
        // sequence parallelism the routed terms are the rank's 1/t of the tokens
        const double mlp = (c->swiglu ? 6.0 : 4.0) * s->F / h, gate = c->swiglu ? 6.0 : 4.0;
        double routed = s->k * (2.0 * s->etp + gate * s->Fe / h) + 4.0 * s->E / h;
        const double shared = gate * s->Fs / h;
        // the all-gather dispatcher with moved tokens: the gathered outputs (the rows again) and
        // every ep x etp rank's routing (3 x 4 bytes per choice)
        if ((s->ep > 1 || s->etp > 1) && c->moe_token_dispatcher_type == TB_MOE_DISPATCHER_ALLGATHER)
            routed += s->k * (2.0 * s->etp + 12.0 * s->ep * s->etp / h);
        const double delta = sp ? (routed + shared - mlp) / t : routed + (shared - mlp) / t;
        a->A_moe = a->A + (int64_t)llround(sbh * delta);
    }
    a->H1 = 0;
    // the output layer's logits, kept in fp32 for the cross entropy (Megatron's 4·s·b·v/t)
    a->H2 = has_head ? (int64_t)llround(4.0 * (double)c->micro_batch_size * seq * (double)s->Vp / t) : 0;
}

// ---------------------------------------------------------------------------------------
// Communication per step (as the traces count it: count x element size per call)

typedef struct comm_acc {
    double msg, bus;  // message bytes (the traces'), bytes on the wire per rank
} comm_acc;

static void all_reduce(comm_acc *a, double count, double elem, int n) {
    if (n < 2) return;
    a->msg += count * elem;
    a->bus += count * elem * 2.0 * (n - 1) / n;  // ring all-reduce
}
static void gather_or_scatter(comm_acc *a, double local, double elem, int n) {
    if (n < 2) return;
    a->msg += local * n * elem;  // the traces count the whole gathered / reduced buffer (comm.c)
    a->bus += local * elem * (n - 1);
}
// a bucket's reduce-scatter or all-gather under the distributed optimizer: made on a group of one too
static void shard_collective(comm_acc *a, double local, double elem, int n) {
    a->msg += local * n * elem;
    a->bus += local * elem * (n - 1);
}
static void p2p(comm_acc *a, double count, double elem) {
    a->msg += count * elem;
    a->bus += count * elem;
}

typedef struct stage_comm {
    comm_acc tp, cp, pp, pp_grad, dp_cp, embedding, ep, expert_dp, etp;
} stage_comm;

// ---------------------------------------------------------------------------------------
// The plan

static int group_in_node(int span, int gpus_per_node) { return span <= gpus_per_node && gpus_per_node % span == 0; }

// Megatron-FSDP's memory of one chunk on one rank (plan_fsdp.h walks its step): fp32, the
// engine's buffers exactly — the parameters' slices (optim_grads_params) or the whole buffer,
// the shard's summed gradients beside the whole buckets held during the backward (or the
// rank's slices of the buffer at the end), Adam's moments of the shard, the other ranks'
// slices gathered at once; 16-bit, Megatron's per-unit accounting — 2-byte parameters sharded
// or whole, fp32 main gradients sharded plus the units' 16-bit gradients held, 12 bytes of
// optimizer state per parameter sharded.
static void fsdp_chunk(const tb_config *c, const shape *s, param_parts *parts, const chunk_acts *acts,
                       const chunk_params *cpz, int emb, int head, int64_t padded, int64_t shard, int dpcp, int m,
                       int mixed, tb_plan_stage *st, plan_fsdp_figures *fw) {
    const int L = acts->L, zero3 = config_shards_params(c);
    const chunk_params *lp = layer_part(s, parts, 0);
    const int64_t embedding = emb ? part_parameters(s, -1, 1, 0, parts->ep, parts->etp).aligned : 0;
    int *rc = tb_xcalloc((size_t)L * 3 + 1, sizeof *rc, "fsdp recompute");
    for (int l = 0; l < L; l++)
        rc[l] = recomputed(acts, l), rc[L + l] = chunk_start(acts, l), rc[2 * L + l] = chunk_len(acts, l);
    const plan_fsdp_shape fs = {L, emb, head, embedding, lp->aligned, cpz->aligned - L * lp->aligned - embedding,
                                padded, dpcp, s->tied, zero3, m, rc, rc + L, rc + 2 * L,
                                zero3 && c->overlap_param_gather, c->overlap_grad_reduce};
    plan_fsdp_walk(&fs, fw);
    free(rc);
    if (!mixed) {
        st->param_bytes += (zero3 ? shard : padded) * 4;
        st->grad_bytes += 4 * (shard + (fw->grads_held_peak > shard ? fw->grads_held_peak : shard));
        st->optimizer_bytes += 2 * shard * 4;
        st->gathered_bytes += fw->gathered_peak * 4;
    } else {
        st->param_bytes += zero3 ? (int64_t)ceil((double)cpz->held * 2 / dpcp) : cpz->held * 2;
        st->grad_bytes += (int64_t)ceil((double)cpz->held * 4 / dpcp) + fw->grads_held_peak * 2;
        st->optimizer_bytes += (int64_t)ceil((double)cpz->held * 12 / dpcp);
        st->gathered_bytes += fw->gathered_peak * 2;
    }
}

int plan_evaluate(tb_plan *plan, const tb_config *base, const tb_plan_cluster *cl, int tp, int cp, int pp, int vpp,
                  int mbs, tb_error *err) {
    memset(plan, 0, sizeof *plan);
    tb_config *c = &plan->cfg;
    *c = *base;
    c->tensor_model_parallel_size = tp;
    c->context_parallel_size = cp;
    c->pipeline_model_parallel_size = pp;
    // 0: none, or config_resolve's from num_layers_per_virtual_pipeline_stage (a size given as 1
    // with it stays 1: the rules check that the two agree, as the engine's do)
    c->virtual_pipeline_model_parallel_size =
        vpp > 1 ? vpp : c->num_layers_per_virtual_pipeline_stage > 0 ? base->virtual_pipeline_model_parallel_size : 0;
    c->micro_batch_size = mbs;
    c->world_size = cl->gpus;
    c->sequence_parallel = base->sequence_parallel && tp > 1;
    c->padded_vocab_size = 0;
    if (base->num_experts == 0) c->expert_tensor_parallel_size = 0;  // derived again: the dense model's is tp
    config_resolve(c);
    plan->tp = tp, plan->cp = cp, plan->pp = pp, plan->mbs = mbs;
    plan->vpp = c->virtual_pipeline_model_parallel_size > 1 ? c->virtual_pipeline_model_parallel_size : 1;
    plan->dp = c->data_parallel_size, plan->microbatches = c->num_microbatches, plan->sp = c->sequence_parallel;
    plan->ep = c->expert_model_parallel_size > 0 ? c->expert_model_parallel_size : 1;

    tb_error rule;
    if (config_validate_rules(c, TB_RULES_SKIP_BUILD_LIMITS | TB_RULES_SKIP_NOT_SUPPORTED, &rule) != 0) {
        char *nl = strchr(rule.msg, '\n');
        if (nl) *nl = '\0';
        snprintf(plan->rule, sizeof plan->rule, "%s", rule.msg);
        return 0;
    }
    if (c->num_experts > 0 && (cp > 1 || config_shards_grads(c))) {
        // legal under Megatron's rules, but unmodeled: MoE at cp > 1 (the engine refuses it as
        // "not supported yet"), Megatron-FSDP's expert units (plan_fsdp.c walks dense models)
        char with[96];
        if (cp > 1) snprintf(with, sizeof with, "context_parallel_size %d", cp);
        else snprintf(with, sizeof with, "data_parallel_sharding_strategy %s",
                      config_choice_name("data_parallel_sharding_strategy", c->data_parallel_sharding_strategy));
        snprintf(plan->rule, sizeof plan->rule, "the planner: num_experts %d with %s: not supported yet (%s)",
                 c->num_experts, with,
                 cp > 1 ? "MoE is modeled at cp 1, as the engine runs it" : "its FSDP units are modeled for dense models");
        return 0;
    }
    plan->legal = 1;
    if (config_validate(c, &rule) == 0) plan->runs_here = 1;
    else {
        char *nl = strchr(rule.msg, '\n');
        if (nl) *nl = '\0';
        snprintf(plan->rule, sizeof plan->rule, "%s", rule.msg);
    }

    const shape s = shape_of(c);
    param_parts parts = {.ep = s.ep, .etp = s.etp};  // the rule asked once per part for this layout
    const int v = plan->vpp, m = c->num_microbatches, dp = c->data_parallel_size, dpcp = dp * cp;
    plan->heads_per_tp = s.NH / tp;
    plan->query_groups_per_tp = s.G / tp;
    plan->tp_in_node = group_in_node(tp, cl->gpus_per_node);
    plan->cp_in_node = group_in_node(tp * cp, cl->gpus_per_node);
    plan->model_parameters = plan_model_parameters(c);
    plan->expert_parameters = plan_model_expert_parameters(c);
    plan->active_parameters = plan_active_parameters(c);
    plan->etp = s.etp;
    plan->edp = s.E > 0 ? cl->gpus / (s.etp * s.ep * pp) : dpcp;  // the expert grid etp x ep x edp x pp
    plan->experts_per_rank = s.E / s.ep;
    // the experts' replicas another group than the dense ones' (gpt_experts_apart)
    const int apart = s.E > 0 && (s.ep > 1 || s.etp != tp);
    plan->bubble = pp > 1 ? (double)(pp - 1) / ((double)v * m + pp - 1) : 0.0;

    int layers[TB_MAX_PIPELINE_STAGES];
    if (config_pipeline_split(c, layers, err) < 0) return -1;  // (validated above: never)
    plan->nstages = pp;
    plan->stages = tb_xcalloc((size_t)pp, sizeof *plan->stages, "plan stages");
    const int mixed = cl->precision != TB_PLAN_FP32;
    const double act_elem = mixed ? 2.0 : 4.0, grad_elem = 4.0, param_elem = mixed ? 2.0 : 4.0;
    const int full = c->recompute_granularity == TB_RECOMPUTE_FULL;
    const int64_t B = mbs, Tl = c->seq_length / cp, N = B * Tl, Ns = c->sequence_parallel ? N / tp : N;
    const int64_t kv_local = B * Tl * 2 * (s.G / tp) * s.hs;
    double max_stage_flops = 0;
    double comm_max[9] = {0}, bus_seconds_max = 0;  // tp, cp, pp, pp_grad, dp_cp, embedding, ep, expert_dp, etp

    int first_layer[TB_MAX_PIPELINE_STAGES];  // of each virtual stage, in model order
    for (int k = 0, at = 0; k < pp * v; k++) first_layer[k] = at, at += layers[k];
    const int edp = plan->edp;
    for (int r = 0; r < pp; r++) {
        tb_plan_stage *st = &plan->stages[r];
        chunk_acts eng[TB_MAX_PIPELINE_STAGES], kor[TB_MAX_PIPELINE_STAGES];
        stage_comm sc;
        memset(&sc, 0, sizeof sc);
        st->chunks = v;
        double stage_flops = 0;
        for (int ch = 0; ch < v; ch++) {
            const int k = ch * pp + r, L = layers[k], emb = k == 0, head = k == pp * v - 1;
            st->layers += L;
            st->has_embedding |= emb;
            st->has_head |= head;
            chunk_params cpz = chunk_parameters(&s, &parts, first_layer[k], L, emb, head);
            st->params_held += cpz.held;
            st->params_expert += cpz.expert;
            st->params_expert_replicated += cpz.expert_replicated;
            st->params_counted += cpz.counted;
            st->params_counted_other_tp += cpz.counted - cpz.replicated_counted;
            st->params_aligned += cpz.aligned;
            // the engine's buffers (gpt_model_init_chunk, adamw_init)
            // with the distributed optimizer and the experts apart, the experts' range starts and
            // the buffer ends on a multiple of 16 x lcm(dp x cp, expert-dp): dense sharded over
            // dp x cp, experts over expert-dp (adamw_init_expert_parallel)
            const int sharded = config_shards_optimizer(c) && (dpcp > 1 || (apart && edp > 1));
            const int split_ranges = sharded && apart && cpz.expert > 0;
            const int64_t dense_aligned = cpz.aligned - cpz.expert_aligned;
            const tb_gpt_buffer buf = tb_gpt_buffer_layout(dense_aligned, cpz.expert_aligned, dpcp, edp, split_ranges);
            const int64_t experts_lo = buf.experts_offset, padded = buf.padded;
            const int64_t shard = !sharded ? padded
                                  : split_ranges ? experts_lo / dpcp + (padded - experts_lo) / edp
                                                 : padded / dpcp;
            st->params_aligned += experts_lo - dense_aligned;  // the engine's num_parameters counts the gap
            st->buffer_elements += padded;
            // Megatron-FSDP's sharded gradients (and parameters): its module's step, below
            const int fsdp = config_shards_grads(c) && dpcp > 1 && s.E == 0;
            if (fsdp) {
                // (fsdp_chunk, once the chunk's recompute is known)
            } else if (!mixed) {
                st->param_bytes += padded * 4;
                st->grad_bytes += padded * 4 + (sharded ? shard * 4 : 0);
                st->optimizer_bytes += 2 * shard * 4;
            } else {  // Megatron: 2-byte params, fp32 main grads, fp32 master + Adam moments
                st->param_bytes += cpz.held * 2;
                st->grad_bytes += cpz.held * 4;
                // the experts' state sharded over expert-dp (the ranks holding the same experts)
                const int64_t dense = cpz.held - cpz.expert;
                st->optimizer_bytes += sharded ? (int64_t)ceil((double)dense * 12 / dpcp) +
                                                     (int64_t)ceil((double)cpz.expert * 12 / (edp > 0 ? edp : 1))
                                               : cpz.held * 12;
            }
            chunk_acts base_acts = {L, 0, 0, 0, 0, head, full, c->recompute_method == TB_RECOMPUTE_BLOCK,
                                    c->recompute_num_layers > 0 ? c->recompute_num_layers : 1, 0, first_layer[k],
                                    s.E, s.freq};
            eng[ch] = kor[ch] = base_acts;
            engine_acts(c, &s, &eng[ch], head);
            korthikanti_acts(c, &s, &kor[ch], head);
            plan_fsdp_figures fw = {0};
            if (fsdp) fsdp_chunk(c, &s, &parts, &eng[ch], &cpz, emb, head, padded, shard, dpcp, m, mixed, st, &fw);

            // communication of the chunk, per microbatch (x m) and per step
            double recomputed_layers = 0;
            for (int l = 0; l < L; l++) recomputed_layers += recomputed(&eng[ch], l);
            const double per_layer_tp = c->sequence_parallel ? 4.0 * Ns * s.C : 2.0 * N * s.C;
            stage_comm mb;  // one microbatch's calls, m times
            memset(&mb, 0, sizeof mb);
            // TP: each layer's forward and backward mappings, again for a recomputed forward
            for (int l = 0; l < L; l++) {
                const double reps = 1.0 + (recomputed(&eng[ch], l) ? 1.0 : 0.0);
                const int moe_layer = is_moe_layer(&s, first_layer[k] + l);
                // a MoE layer's MLP has no tp mapping of its own (MoE under tp runs sequence
                // parallel: the router and the dispatcher take the rank's Ns tokens); the
                // shared expert gathers its input and reduce-scatters its output in forward,
                // backward reduce-scatters the input's gradient after gathering the output's
                // gradient and, again, its input (moe_layer.c, shared_expert_backward); the
                // load-balancing loss all-reduces 2·E floats (choices, score sums) per forward
                const double layer_tp = moe_layer ? per_layer_tp / 2 : per_layer_tp;
                if (c->sequence_parallel) gather_or_scatter(&mb.tp, layer_tp * (reps + 1.0), act_elem, tp);
                else all_reduce(&mb.tp, layer_tp * (reps + 1.0), act_elem, tp);
                if (moe_layer && c->sequence_parallel) {
                    if (s.Fs > 0) gather_or_scatter(&mb.tp, (double)Ns * s.C * (2.0 * reps + 3.0), act_elem, tp);
                    const int lb = c->moe_router_load_balancing_type;
                    if (lb == TB_MOE_LB_AUX_LOSS || lb == TB_MOE_LB_SEQ_AUX_LOSS)
                        all_reduce(&mb.tp, 2.0 * s.E * reps, 4.0, tp);
                }
                // CP: K and V all-gathered in forward, again in backward, dK/dV reduce-scattered
                gather_or_scatter(&mb.cp, (double)kv_local * (reps + 2.0), act_elem, cp);
                // EP and ETP, a MoE layer's all-to-all dispatcher (token_dispatcher.c): per
                // forward the counts (E int32) all-gathered over ep, then the ep group's (ep x E)
                // over etp; the Ns·k permuted tokens all-to-all'd over ep to their experts, the
                // rows received all-gathered over etp (an all-to-all of the same rows to every
                // member: etp x rows), the experts' outputs reduce-scattered over etp (the etp
                // group's rows) and all-to-all'd back; backward the same in reverse (the output
                // gradients dispatched, the input gradients combined). A balanced router and no
                // drop: Ns·k rows each way (an estimate per rank: routing is data-dependent;
                // every row sent is received, so a stage's mean is exact).
                if ((s.ep > 1 || s.etp > 1) && moe_layer && c->moe_token_dispatcher_type == TB_MOE_DISPATCHER_ALLTOALL) {
                    const double rows = (double)Ns * s.k, bytes = rows * s.C * act_elem, Q = s.etp;
                    for (int f = 0; f < reps; f++) {
                        gather_or_scatter(&mb.ep, (double)s.E, 4.0, s.ep);
                        gather_or_scatter(&mb.etp, (double)s.ep * s.E, 4.0, s.etp);
                    }
                    if (s.ep > 1) {
                        mb.ep.msg += (2.0 * reps + 2.0) * bytes;
                        mb.ep.bus += (2.0 * reps + 2.0) * bytes * (s.ep - 1) / s.ep;
                    }
                    if (s.etp > 1) {
                        mb.etp.msg += (2.0 * reps + 2.0) * Q * bytes;
                        mb.etp.bus += (2.0 * reps + 2.0) * bytes * (Q - 1);
                    }
                } else if ((s.ep > 1 || s.etp > 1) && moe_layer) {
                    // the all-gather dispatcher (exact: no routing changes what it moves): per
                    // forward the Ns tokens, their routes and probs (int32 / fp32) all-gathered
                    // over ep then etp, the outputs reduce-scattered back; backward the output
                    // gradients all-gathered, the probs' and the tokens' gradients reduce-scattered
                    const double tok = (double)Ns * s.C, choice = (double)Ns * s.k;
                    const double act_calls = 2.0 * reps + 2.0, choice_calls = 2.0 * reps + 1.0;
                    gather_or_scatter(&mb.ep, tok * act_calls, act_elem, s.ep);
                    gather_or_scatter(&mb.ep, choice * choice_calls, 4.0, s.ep);
                    gather_or_scatter(&mb.etp, s.ep * tok * act_calls, act_elem, s.etp);
                    gather_or_scatter(&mb.etp, s.ep * choice * choice_calls, 4.0, s.etp);
                }
            }
            if (emb) {
                all_reduce(&mb.tp, (double)N * s.C, act_elem, tp);  // vocab-parallel embedding
                if (c->sequence_parallel) gather_or_scatter(&mb.tp, (double)Ns * s.C, act_elem, tp);
            }
            if (head) {
                if (c->sequence_parallel) gather_or_scatter(&mb.tp, 2.0 * Ns * s.C, act_elem, tp);
                else all_reduce(&mb.tp, (double)N * s.C, act_elem, tp);
                all_reduce(&mb.tp, 3.0 * N, 4.0, tp);  // cross entropy: max, target logit, sum of exp
            }
            if (pp > 1 && !emb) {
                p2p(&mb.pp, (double)Ns * s.C, act_elem);       // recv_forward
                p2p(&mb.pp_grad, (double)Ns * s.C, act_elem);  // send_backward
            }
            if (pp > 1 && !head) {
                p2p(&mb.pp, (double)Ns * s.C, act_elem);       // send_forward
                p2p(&mb.pp_grad, (double)Ns * s.C, act_elem);  // recv_backward
            }
            comm_acc *dst[] = {&sc.tp, &sc.cp, &sc.pp, &sc.pp_grad, &sc.ep, &sc.etp},
                     *src[] = {&mb.tp, &mb.cp, &mb.pp, &mb.pp_grad, &mb.ep, &mb.etp};
            for (int i = 0; i < 6; i++) {
                dst[i]->msg += m * src[i]->msg;
                dst[i]->bus += m * src[i]->bus;
            }
            // per step: sequence-parallel partial gradients over tp, the q/k norms' (partial
            // over tp always), the tied embedding, dp
            // (Megatron-FSDP sums them over tp every microbatch, before each reduce-scatter)
            const double partial_sums = fsdp ? m : 1;
            if (c->sequence_parallel) all_reduce(&sc.tp, partial_sums * (double)cpz.sp_partial, grad_elem, tp);
            if (cpz.tp_partial) all_reduce(&sc.tp, partial_sums * (double)cpz.tp_partial, grad_elem, tp);
            if (pp > 1 && s.tied && cpz.wte) all_reduce(&sc.embedding, (double)cpz.wte, grad_elem, 2);
            if (fsdp) {
                // each bucket reduce-scattered every microbatch; the parameters all-gathered per
                // unit (optim_grads_params) or after the update (optim_grads)
                gather_or_scatter(&sc.dp_cp, fw.reduced_elements / dpcp, grad_elem, dpcp);
                gather_or_scatter(&sc.dp_cp, config_shards_params(c) ? fw.gathered_elements / dpcp : (double)shard,
                                  param_elem, dpcp);
            } else if (sharded && mixed && apart && cpz.expert > 0) {
                // Megatron's distributed optimizer under ep: the dense range over dp x cp, the
                // experts' over expert-dp (the engine refuses it: the fp32 accounting keeps its buffers)
                const double dense = (double)(cpz.held - cpz.expert), e = (double)cpz.expert, ne = edp > 0 ? edp : 1;
                gather_or_scatter(&sc.dp_cp, dense / dpcp, grad_elem, dpcp);
                gather_or_scatter(&sc.dp_cp, dense / dpcp, param_elem, dpcp);
                gather_or_scatter(&sc.expert_dp, e / ne, grad_elem, edp);
                gather_or_scatter(&sc.expert_dp, e / ne, param_elem, edp);
            } else if (sharded && split_ranges) {
                // each range reduce-scattered and all-gathered over its own group, called (and
                // traced) even where that group is one rank (finalize_model_grads: every bucket)
                shard_collective(&sc.dp_cp, (double)experts_lo / dpcp, grad_elem, dpcp);
                shard_collective(&sc.dp_cp, (double)experts_lo / dpcp, param_elem, dpcp);
                shard_collective(&sc.expert_dp, (double)(padded - experts_lo) / edp, grad_elem, edp);
                shard_collective(&sc.expert_dp, (double)(padded - experts_lo) / edp, param_elem, edp);
            } else if (sharded) {
                gather_or_scatter(&sc.dp_cp, (double)shard, grad_elem, dpcp);  // reduce-scatter of the gradients
                gather_or_scatter(&sc.dp_cp, (double)shard, param_elem, dpcp); // all-gather of the parameters
            } else if (apart && cpz.expert > 0) {
                // finalize_model_grads: the dense range over dp x cp, the experts' over expert-dp
                all_reduce(&sc.dp_cp, mixed ? (double)(cpz.held - cpz.expert) : (double)dense_aligned, grad_elem, dpcp);
                all_reduce(&sc.expert_dp, mixed ? (double)cpz.expert : (double)(padded - dense_aligned), grad_elem, edp);
            } else {
                all_reduce(&sc.dp_cp, mixed ? (double)cpz.held : (double)padded, grad_elem, dpcp);
            }
            // FLOPs of the chunk: the engine's formula over what the rank holds, its heads
            const double tokens = (double)m * B * Tl;
            // (gpt_chunk_flops_per_token: the rank's experts run all ep ranks' tokens, k of E
            // active, their etp shards every etp rank's, each 1/tp of the microbatch)
            const double active = s.E > 0 ? (double)(cpz.held - cpz.expert) +
                                                (double)(cpz.expert * s.ep * s.etp / tp * s.k / s.E)
                                           : (double)cpz.held;
            double f = tokens * (6.0 * active + 12.0 * L * ((double)s.C / tp) * c->seq_length);
            if (full) f += tokens * 2.0 * cpz.held * recomputed_layers / (L > 0 ? L : 1);
            else if (c->recompute_granularity == TB_RECOMPUTE_SELECTIVE)
                f += tokens * 4.0 * L * ((double)s.C / tp) * c->seq_length;  // the core attention again
            stage_flops += f;
        }
        // the loss average: over pp, then dp x cp (one float each)
        if (pp > 1) all_reduce(&sc.pp, 1, 4.0, pp);
        all_reduce(&sc.dp_cp, 1, 4.0, dpcp);

        acts_walk we = walk_schedule(eng, pp, r, m, v), wk = walk_schedule(kor, pp, r, m, v);
        st->activation_bytes_engine = we.peak;
        st->activation_bytes_korthikanti = wk.peak;
        st->activation_bytes = mixed ? wk.peak : we.peak;
        st->microbatches_in_flight = mixed ? wk.held_at_peak : we.held_at_peak;
        st->total_bytes =
            st->param_bytes + st->grad_bytes + st->optimizer_bytes + st->gathered_bytes + st->activation_bytes;
        if (st->total_bytes > plan->peak_bytes) {
            plan->peak_bytes = st->total_bytes;
            plan->peak_stage = r;
        }
        const double msgs[9] = {sc.tp.msg,    sc.cp.msg,        sc.pp.msg, sc.pp_grad.msg,
                                sc.dp_cp.msg, sc.embedding.msg, sc.ep.msg, sc.expert_dp.msg, sc.etp.msg};
        for (int i = 0; i < 9; i++)
            if (msgs[i] > comm_max[i]) comm_max[i] = msgs[i];
        // exposed communication of the stage: nothing overlapped (a stated simplification)
        const double gb = 1e9;
        const double intra = cl->intra_node_gbps * gb, inter = cl->inter_node_gbps * gb;
        double secs = sc.tp.bus / (plan->tp_in_node ? intra : inter) + sc.cp.bus / (plan->cp_in_node ? intra : inter) +
                      (sc.pp.bus + sc.pp_grad.bus) / (group_in_node(tp * cp * dp * pp, cl->gpus_per_node) ? intra : inter) +
                      sc.embedding.bus / inter +
                      sc.dp_cp.bus / (group_in_node(tp * cp * dp, cl->gpus_per_node) ? intra : inter) +
                      sc.ep.bus / (group_in_node(s.ep, cl->gpus_per_node) ? intra : inter) +
                      sc.etp.bus / (group_in_node(s.etp, cl->gpus_per_node) ? intra : inter) +
                      sc.expert_dp.bus / (group_in_node(s.ep * edp, cl->gpus_per_node) ? intra : inter);
        if (secs > bus_seconds_max) bus_seconds_max = secs;
        if (stage_flops > max_stage_flops) max_stage_flops = stage_flops;
    }
    plan->comm.tp = comm_max[0];
    plan->comm.cp = comm_max[1];
    plan->comm.pp = comm_max[2];
    plan->comm.pp_grad = comm_max[3];
    plan->comm.dp_cp = comm_max[4];
    plan->comm.embedding = comm_max[5];
    plan->comm.ep = comm_max[6];
    plan->comm.expert_dp = comm_max[7];
    plan->comm.etp = comm_max[8];
    plan->comm.seconds = bus_seconds_max;
    plan->fits = plan->peak_bytes <= cl->gpu_memory;

    // model FLOPs of the global batch (no recompute): the engine's 6·N + 12·L·C·T per token
    const double tokens = (double)c->global_batch_size * c->seq_length;
    plan->flops_per_step =
        tokens * (6.0 * (double)plan->active_parameters + 12.0 * c->num_layers * (double)s.C * c->seq_length);
    const double rate = cl->peak_tflops * 1e12 * cl->compute_efficiency;
    plan->compute_seconds = rate > 0 ? max_stage_flops / rate : 0;
    plan->step_seconds = plan->compute_seconds * (pp > 1 ? ((double)v * m + pp - 1) / ((double)v * m) : 1.0) +
                         plan->comm.seconds;
    plan->mfu = plan->step_seconds > 0 && cl->peak_tflops > 0
                    ? plan->flops_per_step / (plan->step_seconds * cl->gpus * cl->peak_tflops * 1e12)
                    : 0;
    return 0;
}

void plan_free(tb_plan *plan) {
    free(plan->stages);
    plan->stages = NULL;
}
