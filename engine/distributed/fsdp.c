#include "distributed/fsdp.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "comm/comm.h"
#include "core/xalloc.h"
#include "runtime/ranges.h"

typedef struct placed {
    size_t offset;
    int param;
} placed;

static int by_offset(const void *a, const void *b) {
    const size_t x = ((const placed *)a)->offset, y = ((const placed *)b)->offset;
    return (x > y) - (x < y);
}

int fsdp_unit_cuts(const gpt_model *m, size_t align, size_t shared_align, size_t **out) {
    // the buffer in offset order: a MoE layer's experts lie in the experts' range after every
    // dense tensor, apart from their layer's other tensors in the table
    placed *order = tb_xcalloc((size_t)m->nparams + 1, sizeof *order, "fsdp unit cuts");
    for (int i = 0; i < m->nparams; i++) order[i] = (placed){m->params[i].offset, i};
    qsort(order, (size_t)m->nparams, sizeof *order, by_offset);
    size_t *cuts = tb_xcalloc((size_t)m->nparams + 1, sizeof *cuts, "fsdp unit cuts");
    int n = 0;
    for (int j = 1; j < m->nparams; j++) {
        const gpt_param *p = &m->params[order[j].param], *prev = &m->params[order[j - 1].param];
        if (gpt_param_site(m, p, 0) == gpt_param_site(m, prev, 0) && p->expert == prev->expert) continue;
        const size_t at = p->offset / align * align;
        if (at > 0 && at < m->padded_parameters && (n == 0 || at > cuts[n - 1])) cuts[n++] = at;
    }
    free(order);
    // the word embedding tied across the first and last stage: the buffer's first tensor on both
    // (core/shapes/gpt_parameters.c), made one bucket [0, its end rounded up to shared_align,
    // the same on both stages): its slices then hold the same elements on both, whose sums
    // fsdp_finish_grad_sync adds
    const gpt_param *wte = shared_align ? gpt_find_param(m, "wte.weight") : NULL;
    if (wte) {
        const size_t hi = (wte->offset + wte->numel + shared_align - 1) / shared_align * shared_align;
        size_t *kept = tb_xcalloc((size_t)n + 2, sizeof *kept, "fsdp unit cuts");
        int k = 0;
        if (hi < m->padded_parameters) kept[k++] = hi;
        for (int j = 0; j < n; j++)
            if (cuts[j] > hi) kept[k++] = cuts[j];
        free(cuts);
        cuts = kept;
        n = k;
    }
    if (!n) {
        free(cuts);
        cuts = NULL;
    }
    *out = cuts;
    return n;
}

// The three ranges of bucket k in a buffer: the ranks' slices before this rank's, its own, after.
static float *before(float *buf, const tb_shard_bucket *k) { return buf + k->lo; }
static float *own(float *buf, const tb_shard_bucket *k) { return buf + k->slice_lo; }
static float *after(float *buf, const tb_shard_bucket *k) { return buf + k->slice_hi; }
static size_t before_n(const tb_shard_bucket *k) { return k->slice_lo - k->lo; }
static size_t own_n(const tb_shard_bucket *k) { return k->slice_hi - k->slice_lo; }
static size_t after_n(const tb_shard_bucket *k) { return k->hi - k->slice_hi; }

static void commit(tb_fsdp *f, tb_mem_category c, float *p, size_t n, const char *what, int b) {
    if (!n) return;  // (a committed range is found by its start: never an empty one)
    char name[TB_MEM_WHAT_MAX];
    snprintf(name, sizeof name, "%s %d", what, b);
    tb_commit(f->m->mem, c, p, n * sizeof(float), name);
}

static void decommit(tb_fsdp *f, float *p, size_t n) {
    if (n) tb_decommit(f->m->mem, p);
}

// Whether parameter i is read by the forward or backward of `site`: its own unit's, and the tied
// word embedding by the output layer too.
static int used_at(const tb_fsdp *f, int i, int site) {
    if (f->site[i] == site) return 1;
    return site == GPT_SITE_HEAD && !f->m->cfg->untie_embeddings_and_output_weights &&
           !strcmp(f->m->params[i].name, "wte.weight");
}

// A site's index in the per-site tables (fsdp.h).
static int site_index(const tb_fsdp *f, int site) {
    const int s = site - GPT_SITE_EMBEDDING;
    if (s < 0 || s >= f->nsites) {
        fprintf(stderr, "fsdp: site %d is no unit of the model (%d units)\n", site, f->nsites);
        abort();
    }
    return s;
}

// The per-site tables: the buckets each unit reads, and its parameters, last first.
static void index_sites(tb_fsdp *f) {
    const gpt_model *m = f->m;
    const int nb = f->opt->nbuckets;
    int last = GPT_SITE_HEAD;
    for (int i = 0; i < m->nparams; i++)
        if (f->site[i] > last) last = f->site[i];
    f->nsites = last + 1 - GPT_SITE_EMBEDDING;
    f->needs = tb_xcalloc((size_t)f->nsites * (size_t)nb, 1, "fsdp buckets of units");
    f->site_first = tb_xcalloc((size_t)f->nsites + 1, sizeof *f->site_first, "fsdp parameters of units");
    f->site_params = tb_xcalloc((size_t)m->nparams + 1, sizeof *f->site_params, "fsdp parameters of units");
    for (int s = 0; s < f->nsites; s++)
        for (int i = 0; i < m->nparams; i++)
            if (used_at(f, i, s + GPT_SITE_EMBEDDING))
                for (int b = f->blo[i]; b <= f->bhi[i]; b++) f->needs[(size_t)s * nb + b] = 1;
    for (int i = 0; i < m->nparams; i++) f->site_first[site_index(f, f->site[i]) + 1]++;
    for (int s = 0; s < f->nsites; s++) f->site_first[s + 1] += f->site_first[s];
    int *fill = tb_xcalloc((size_t)f->nsites, sizeof *fill, "fsdp parameters of units");
    for (int i = m->nparams - 1; i >= 0; i--) {
        const int s = site_index(f, f->site[i]);
        f->site_params[f->site_first[s] + fill[s]++] = i;
    }
    free(fill);
}

// The group bucket k is sharded over: dp × cp, or expert-dp for the experts' buckets.
static tb_group *group_of(const tb_fsdp *f, const tb_shard_bucket *k) {
    return adamw_bucket_group(f->opt, k, f->dp);
}

static void gather(tb_fsdp *f, int b) {
    const tb_shard_bucket *k = &f->opt->buckets[b];
    float *p = f->m->param_memory;
    commit(f, TB_MEM_GATHERED, before(p, k), before_n(k), "parameters gathered, bucket", b);
    commit(f, TB_MEM_GATHERED, after(p, k), after_n(k), "parameters gathered, bucket", b);
    const int64_t t0 = tb_now_ns();
    tb_all_gather(group_of(f, k), own(p, k), before(p, k), own_n(k));
    f->gather_ms += (double)(tb_now_ns() - t0) / 1e6;
    f->gathered[b] = 1;
}

// Overlap: waits for ticket t of the communication thread, timed as exposed (*ms) inside
// range `what` when it is not done yet.
static void wait_ticket(tb_fsdp *f, int t, const char *what, double *ms) {
    if (f->comm.done(f->comm.ctx, t)) {
        f->comm.wait(f->comm.ctx, t);  // (done: returns at once, and reports a failed thread)
        return;
    }
    const int64_t t0 = tb_now_ns();
    TB_RANGE_PUSH("%s", what);
    f->comm.wait(f->comm.ctx, t);
    TB_RANGE_POP();
    *ms += (double)(tb_now_ns() - t0) / 1e6;
}

static int post(tb_fsdp *f, int b, int gather) {
    const int t = f->comm.post(f->comm.ctx, b, gather);
    if (t != f->posted) {
        fprintf(stderr, "fsdp: ticket %d posted where %d was due (another caller on the queue)\n", t, f->posted);
        abort();
    }
    f->posted++;
    return t;
}

// Overlap: the ranges of bucket b's other slices committed, their all-gather posted.
static void post_gather(tb_fsdp *f, int b) {
    const tb_shard_bucket *k = &f->opt->buckets[b];
    float *p = f->m->param_memory;
    commit(f, TB_MEM_GATHERED, before(p, k), before_n(k), "parameters gathered, bucket", b);
    commit(f, TB_MEM_GATHERED, after(p, k), after_n(k), "parameters gathered, bucket", b);
    f->gather_ticket[b] = post(f, b, 1);
    f->gathered[b] = 1;
}

static void wait_gather(tb_fsdp *f, int b) {
    if (f->gather_ticket[b] < 0) return;
    wait_ticket(f, f->gather_ticket[b], "fsdp.wait_param_gather", &f->gather_ms);
    f->gather_ticket[b] = -1;
}

static void release(tb_fsdp *f, int b) {
    const tb_shard_bucket *k = &f->opt->buckets[b];
    if (f->comm.post) wait_gather(f, b);  // (a gather in flight writes the range)
    decommit(f, before(f->m->param_memory, k), before_n(k));
    decommit(f, after(f->m->param_memory, k), after_n(k));
    f->gathered[b] = 0;
}

// This rank's slices of the parameters committed (category params), written from keep (the
// shard, packed as the optimizer's) when given.
static void shard_params(tb_fsdp *f, const float *keep) {
    for (int b = 0; b < f->opt->nbuckets; b++) {
        const tb_shard_bucket *k = &f->opt->buckets[b];
        commit(f, TB_MEM_PARAMS, own(f->m->param_memory, k), own_n(k), "parameters, this rank's slice of bucket", b);
        if (keep) memcpy(own(f->m->param_memory, k), keep + k->at, own_n(k) * sizeof(float));
    }
}

void fsdp_init(tb_fsdp *f, const tb_config *cfg, tb_rank *rk, gpt_model *m, tb_adamw *opt) {
    memset(f, 0, sizeof *f);
    if (!m->grads_reserved) return;  // (gpt_model_init_chunk decided: sharded gradients over dp × cp > 1)
    f->active = 1;
    f->shard_params = m->params_reserved;
    f->dp = &rk->groups[TB_GROUP_DP_CP];
    f->tp = &rk->groups[TB_GROUP_TP];
    f->sp_reduce = cfg->sequence_parallel && f->tp->size > 1;
    f->m = m;
    f->opt = opt;
    f->wte = -1;
    const gpt_param *wte = gpt_find_param(m, "wte.weight");
    if (rk->groups[TB_GROUP_EMBEDDING].size > 1 && !cfg->untie_embeddings_and_output_weights && wte) {
        if (wte->offset != 0 || opt->nbuckets < 1 || opt->buckets[0].lo != 0 || opt->buckets[0].hi < wte->numel) {
            fprintf(stderr, "%s: fsdp: the tied word embedding is not the first bucket of the buffer\n", rk->label);
            abort();
        }
        f->emb = &rk->groups[TB_GROUP_EMBEDDING];
        f->wte = (int)(wte - m->params);
    }
    const int nb = opt->nbuckets;
    f->site = tb_xcalloc((size_t)m->nparams, sizeof *f->site, "fsdp sites");
    f->blo = tb_xcalloc((size_t)m->nparams, sizeof *f->blo, "fsdp buckets of parameters");
    f->bhi = tb_xcalloc((size_t)m->nparams, sizeof *f->bhi, "fsdp buckets of parameters");
    f->pending = tb_xcalloc((size_t)nb, sizeof *f->pending, "fsdp pending");
    f->nparams = tb_xcalloc((size_t)nb, sizeof *f->nparams, "fsdp bucket parameters");
    f->gathered = tb_xcalloc((size_t)nb, 1, "fsdp gathered");
    f->grads_held = tb_xcalloc((size_t)nb, 1, "fsdp gradients held");
    size_t largest = 0;
    for (int b = 0; b < nb; b++)
        if (own_n(&opt->buckets[b]) > largest) largest = own_n(&opt->buckets[b]);
    f->reduced = tb_alloc(m->mem, TB_MEM_COMM, largest * sizeof(float), "fsdp reduce-scatter destination");
    for (int i = 0; i < m->nparams; i++) {
        const gpt_param *p = &m->params[i];
        f->site[i] = gpt_param_site(m, p, 0);
        f->blo[i] = f->bhi[i] = -1;
        for (int b = 0; b < nb; b++) {
            const tb_shard_bucket *k = &opt->buckets[b];
            if (p->offset >= k->hi || p->offset + p->numel <= k->lo) continue;
            if (f->blo[i] < 0) f->blo[i] = b;
            f->bhi[i] = b;
            f->nparams[b]++;
        }
    }
    for (int b = 0; b < nb; b++) f->pending[b] = f->nparams[b];
    index_sites(f);
    // the backward reports each unit every microbatch (gpt.h: grads_ready)
    m->grads_each_microbatch = 1;
    if (!f->shard_params) return;

    if (m->params_whole) {
        // loaded whole (gpt_params_whole): this rank's slices kept aside, the whole given
        // back, the slices committed and written again
        float *keep = tb_xmalloc(opt->shard_numel * sizeof(float) + 1, "fsdp parameter shard (staging)");
        for (int b = 0; b < nb; b++)
            memcpy(keep + opt->buckets[b].at, own(m->param_memory, &opt->buckets[b]),
                   own_n(&opt->buckets[b]) * sizeof(float));
        tb_decommit(m->mem, m->param_memory);
        m->params_whole = 0;
        shard_params(f, keep);
        free(keep);
        return;
    }
    // else drawn tensor by tensor (gpt_init_param, a tensor's staging at a time), the parts in
    // this rank's slices kept: the whole model is never held
    shard_params(f, NULL);
    for (int i = 0; i < m->nparams; i++) {
        const gpt_param *p = &m->params[i];
        float *x = tb_alloc(m->mem, TB_MEM_WORKSPACE, p->numel * sizeof(float), "initial weights of a tensor");
        gpt_init_param(m, i, x);
        for (int b = f->blo[i]; b <= f->bhi[i]; b++) {
            const tb_shard_bucket *k = &opt->buckets[b];
            const size_t lo = p->offset > k->slice_lo ? p->offset : k->slice_lo;
            const size_t hi = p->offset + p->numel < k->slice_hi ? p->offset + p->numel : k->slice_hi;
            if (lo < hi) memcpy(m->param_memory + lo, x + (lo - p->offset), (hi - lo) * sizeof(float));
        }
        tb_free(m->mem, x);
    }
}

void fsdp_free(tb_fsdp *f) {
    if (!f->active) return;
    // the committed ranges go with the model's reservations (gpt_model_free)
    tb_free(f->m->mem, f->reduced);
    free(f->site);
    free(f->blo);
    free(f->bhi);
    free(f->pending);
    free(f->nparams);
    free(f->gathered);
    free(f->grads_held);
    free(f->needs);
    free(f->site_first);
    free(f->site_params);
    free(f->gather_ticket);
    free(f->reduce_ticket);
    free(f->order);
    memset(f, 0, sizeof *f);
}

// Whatever of bucket b's gradient range is committed: a microbatch's, the previous step's
// slice, and the others' slices a dump gathered.
static void give_back_grads(tb_fsdp *f, int b) {
    const tb_shard_bucket *k = &f->opt->buckets[b];
    float *g = f->m->grad_memory;
    const fsdp_grads_held held = (fsdp_grads_held)f->grads_held[b];
    if (held == FSDP_GRADS_MICROBATCH || held == FSDP_GRADS_REDUCING) decommit(f, before(g, k), k->hi - k->lo);
    if (held == FSDP_GRADS_SLICE || held == FSDP_GRADS_WHOLE) decommit(f, own(g, k), own_n(k));
    if (held == FSDP_GRADS_WHOLE) {
        decommit(f, before(g, k), before_n(k));
        decommit(f, after(g, k), after_n(k));
    }
    f->grads_held[b] = FSDP_GRADS_NONE;
}

void fsdp_start_step(tb_fsdp *f) {
    if (!f->active) return;
    f->gather_ms = f->reduce_ms = 0;
    f->posted = f->drain_before = f->at = f->off_schedule = 0;
    for (int b = 0; b < f->opt->nbuckets; b++) {
        give_back_grads(f, b);
        f->pending[b] = f->nparams[b];
    }
    memset(f->opt->shard_grads, 0, f->opt->shard_numel * sizeof(float));
}

// Before a unit's backward: the gradient ranges of the buckets it writes that hold none, committed.
static void commit_grads(tb_fsdp *f, const unsigned char *needed) {
    for (int b = 0; b < f->opt->nbuckets; b++) {
        if (!needed[b] || f->grads_held[b] != FSDP_GRADS_NONE) continue;
        const tb_shard_bucket *k = &f->opt->buckets[b];
        commit(f, TB_MEM_GRADS, before(f->m->grad_memory, k), k->hi - k->lo, "gradients of the microbatch, bucket", b);
        f->grads_held[b] = FSDP_GRADS_MICROBATCH;
    }
}

// Overlap: bucket b's reduce-scatter waited for (when it is in flight) and its range given back.
static void settle_reduce(tb_fsdp *f, int b) {
    if (f->grads_held[b] != FSDP_GRADS_REDUCING) return;
    wait_ticket(f, f->reduce_ticket[b], "fsdp.wait_reduce_scatter", &f->reduce_ms);
    f->reduce_ticket[b] = -1;
    give_back_grads(f, b);
}

// Overlap: the schedule's use after this one (site, backward), or NULL: the first step records
// the uses; a later one follows them, and prefetches nothing from a use they did not have on.
static const fsdp_use *next_use(tb_fsdp *f, int site, int backward) {
    const fsdp_use u = {site, backward};
    const int at = f->at++;
    if (!f->recorded) {
        if (f->norder == f->order_cap) {
            f->order_cap = f->order_cap ? 2 * f->order_cap : 64;
            f->order = tb_xrealloc(f->order, (size_t)f->order_cap * sizeof *f->order, "fsdp schedule");
        }
        f->order[f->norder++] = u;
        return NULL;
    }
    if (at >= f->norder || f->order[at].site != site || f->order[at].backward != backward) f->off_schedule = 1;
    return !f->prefetch || f->off_schedule || at + 1 >= f->norder ? NULL : &f->order[at + 1];
}

// fsdp_acquire with a communication thread (fsdp.h, "Time").
static void acquire_overlapped(tb_fsdp *f, int site, int backward) {
    const int nb = f->opt->nbuckets;
    const unsigned char *needed = &f->needs[(size_t)site_index(f, site) * nb];
    const fsdp_use *next = next_use(f, site, backward);
    const unsigned char *prefetched = next ? &f->needs[(size_t)site_index(f, next->site) * nb] : NULL;
    // the reduce-scatters that are done given back; before a backward, every one posted before
    // the last unit's (the drain: this unit's gradients and the last unit's are live), and those
    // of the buckets this unit writes again
    for (int b = 0; b < nb; b++) {
        if (f->grads_held[b] != FSDP_GRADS_REDUCING) continue;
        const int t = f->reduce_ticket[b];
        if (f->comm.done(f->comm.ctx, t) || (backward && (t < f->drain_before || needed[b]))) settle_reduce(f, b);
    }
    if (backward) commit_grads(f, needed);
    if (!f->shard_params) return;
    // what neither this unit nor the next reads goes first: the peak holds two units' parameters
    for (int b = 0; b < nb; b++)
        if (f->gathered[b] && !needed[b] && !(prefetched && prefetched[b])) release(f, b);
    for (int b = 0; b < nb; b++)
        if (needed[b] && !f->gathered[b]) post_gather(f, b);
    for (int b = 0; b < nb && prefetched; b++)
        if (prefetched[b] && !f->gathered[b]) post_gather(f, b);
    for (int b = 0; b < nb; b++)
        if (needed[b]) wait_gather(f, b);
}

void fsdp_acquire(tb_fsdp *f, int site, int backward) {
    if (!f->active) return;
    if (f->comm.post) {
        acquire_overlapped(f, site, backward);
        return;
    }
    const int nb = f->opt->nbuckets;
    const unsigned char *needed = &f->needs[(size_t)site_index(f, site) * nb];
    if (backward) commit_grads(f, needed);
    if (!f->shard_params) return;
    // the buckets this unit does not read go first: the peak holds this unit's
    for (int b = 0; b < nb; b++)
        if (f->gathered[b] && !needed[b]) release(f, b);
    int pushed = 0;
    for (int b = 0; b < nb; b++) {
        if (!needed[b] || f->gathered[b]) continue;
        if (!pushed++) TB_RANGE_PUSH("fsdp.all_gather_params");
        gather(f, b);
    }
    if (pushed) TB_RANGE_POP();
}

// A bucket's gradients of the microbatch, final on every rank: this rank's slice of their sum
// added into the shard, the bucket given back (it reads as zeros for the next microbatch).
static void reduce_bucket(tb_fsdp *f, int b) {
    const tb_shard_bucket *k = &f->opt->buckets[b];
    const size_t n = own_n(k);
    const int64_t t0 = tb_now_ns();
    TB_RANGE_PUSH("fsdp.reduce_scatter_grads");
    tb_reduce_scatter(group_of(f, k), before(f->m->grad_memory, k), f->reduced, n);
    TB_RANGE_POP();
    f->reduce_ms += (double)(tb_now_ns() - t0) / 1e6;
    float *acc = f->opt->shard_grads + k->at;
    for (size_t j = 0; j < n; j++) acc[j] += f->reduced[j];
    give_back_grads(f, b);
    f->pending[b] = f->nparams[b];
}

void fsdp_site_done(tb_fsdp *f, int site) {
    if (!f->active) return;
    gpt_model *m = f->m;
    // the last parameters first: the order their buckets fill in
    const int s = site_index(f, site);
    int first_posted = -1;
    for (int j = f->site_first[s]; j < f->site_first[s + 1]; j++) {
        const int i = f->site_params[j];
        const gpt_param *p = &m->params[i];
        // a gradient each tp rank holds part of (sequence parallelism's norms and row-parallel
        // biases; the q/k norms always) is summed over tp before dp, as finalize_model_grads does
        const int sp = f->sp_reduce && p->sp_partial && !tb_fault_fires(m->block.d.tp.faults, TB_SITE_SP_GRAD_REDUCE);
        if (sp || (p->tp_partial && f->tp->size > 1)) {
            const int64_t t0 = tb_now_ns();
            tb_all_reduce(f->tp, m->grad_memory + p->offset, p->numel, TB_RED_SUM);
            f->reduce_ms += (double)(tb_now_ns() - t0) / 1e6;
        }
        for (int b = f->bhi[i]; b >= f->blo[i]; b--) {
            if (--f->pending[b] != 0) continue;
            if (!f->comm.post) {
                reduce_bucket(f, b);
                continue;
            }
            if (first_posted < 0) first_posted = f->posted;
            f->reduce_ticket[b] = post(f, b, 0);
            f->grads_held[b] = FSDP_GRADS_REDUCING;
            f->pending[b] = f->nparams[b];
        }
    }
    if (first_posted >= 0) f->drain_before = first_posted;
}

void fsdp_comm_run(tb_fsdp *f, int b, int gather, int64_t step, tb_group *dp, tb_group *edp) {
    const tb_shard_bucket *k = &f->opt->buckets[b];
    tb_group *group = k->expert ? edp : dp;
    if (!group) {
        fprintf(stderr, "fsdp: bucket %d of the experts has no expert-dp group on the communication thread\n", b);
        abort();
    }
    const size_t n = own_n(k);
    if (gather) {
        TB_RANGE_PUSH("fsdp.all_gather_params.%d", b);
        tb_range_annotate(step, -1);  // the step its calls belong to (tracebook comm)
        tb_all_gather(group, own(f->m->param_memory, k), before(f->m->param_memory, k), n);
        TB_RANGE_POP();
        return;
    }
    TB_RANGE_PUSH("fsdp.reduce_scatter_grads.%d", b);
    tb_range_annotate(step, -1);
    tb_reduce_scatter(group, before(f->m->grad_memory, k), f->reduced, n);
    float *acc = f->opt->shard_grads + k->at;
    for (size_t j = 0; j < n; j++) acc[j] += f->reduced[j];
    TB_RANGE_POP();
}

void fsdp_overlap(tb_fsdp *f, const tb_fsdp_comm *comm, int prefetch) {
    if (!f->active) return;
    f->comm = *comm;
    f->prefetch = prefetch && f->shard_params;
    const int nb = f->opt->nbuckets;
    f->gather_ticket = tb_xmalloc((size_t)nb * sizeof *f->gather_ticket + 1, "fsdp gather tickets");
    f->reduce_ticket = tb_xmalloc((size_t)nb * sizeof *f->reduce_ticket + 1, "fsdp reduce-scatter tickets");
    for (int b = 0; b < nb; b++) f->gather_ticket[b] = f->reduce_ticket[b] = -1;
}

void fsdp_comm_settle(tb_fsdp *f) {
    if (!f->active || !f->comm.post) return;
    for (int b = 0; b < f->opt->nbuckets; b++) {
        f->gather_ticket[b] = -1;
        if (f->grads_held[b] == FSDP_GRADS_REDUCING) give_back_grads(f, b);
        f->reduce_ticket[b] = -1;
    }
    f->recorded = 1;  // (the first step's uses are the schedule)
}

void fsdp_finish_grad_sync(tb_fsdp *f) {
    if (!f->active) return;
    if (f->emb) {
        // the word embedding's elements of this rank's slice of bucket 0: the same on both stages
        const gpt_param *wte = &f->m->params[f->wte];
        const tb_shard_bucket *k = &f->opt->buckets[0];
        const size_t lo = k->slice_lo, hi = k->slice_hi < wte->numel ? k->slice_hi : wte->numel;
        if (lo < hi) {
            const int64_t t0 = tb_now_ns();
            TB_RANGE_PUSH("fsdp.embedding_grads");
            tb_all_reduce(f->emb, f->opt->shard_grads + k->at, hi - lo, TB_RED_SUM);
            TB_RANGE_POP();
            f->reduce_ms += (double)(tb_now_ns() - t0) / 1e6;
        }
    }
    const float inv = 1.0f / (float)f->dp->size;
    for (int b = 0; b < f->opt->nbuckets; b++) {
        if (f->grads_held[b] != FSDP_GRADS_NONE) {
            fprintf(stderr, "fsdp: bucket %d's gradients were never final (%d of its %d parameters pending)\n", b,
                    f->pending[b], f->nparams[b]);
            abort();
        }
        const tb_shard_bucket *k = &f->opt->buckets[b];
        commit(f, TB_MEM_GRADS, own(f->m->grad_memory, k), own_n(k), "gradients, this rank's slice of bucket", b);
        f->grads_held[b] = FSDP_GRADS_SLICE;
        tb_be()->scale(own(f->m->grad_memory, k), f->opt->shard_grads + k->at, inv, own_n(k));
    }
}

void fsdp_gather_all(tb_fsdp *f) {
    if (!f->active || !f->shard_params) return;
    TB_RANGE_PUSH("fsdp.gather_all");
    for (int b = 0; b < f->opt->nbuckets; b++)
        if (!f->gathered[b]) gather(f, b);
    TB_RANGE_POP();
}

void fsdp_release_all(tb_fsdp *f) {
    if (!f->active || !f->shard_params) return;
    for (int b = 0; b < f->opt->nbuckets; b++)
        if (f->gathered[b]) release(f, b);
}

void fsdp_gather_grads(tb_fsdp *f) {
    if (!f->active) return;
    for (int b = 0; b < f->opt->nbuckets; b++) {
        if (f->grads_held[b] != FSDP_GRADS_SLICE) continue;
        const tb_shard_bucket *k = &f->opt->buckets[b];
        float *g = f->m->grad_memory;
        commit(f, TB_MEM_GRADS, before(g, k), before_n(k), "gradients gathered for a dump, bucket", b);
        commit(f, TB_MEM_GRADS, after(g, k), after_n(k), "gradients gathered for a dump, bucket", b);
        tb_all_gather(group_of(f, k), own(g, k), before(g, k), own_n(k));
        f->grads_held[b] = FSDP_GRADS_WHOLE;
    }
}
