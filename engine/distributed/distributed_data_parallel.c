#include "distributed/distributed_data_parallel.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/nccl_backend.h"
#include "core/clock.h"
#include "core/xalloc.h"

int ddp_active(const tb_ddp *d) { return d->started; }

int ddp_reduces_grads(const tb_ddp *d) { return d->started || d->fsdp.active; }

static void add_cut(size_t **cuts, int *n, int *cap, size_t at) {
    if (*n == *cap) {
        *cap = *cap ? 2 * *cap : 8;
        *cuts = tb_xrealloc(*cuts, (size_t)*cap * sizeof **cuts, "ddp bucket cuts");
    }
    (*cuts)[(*n)++] = at;
}

static int cmp_size(const void *a, const void *b) {
    size_t x = *(const size_t *)a, y = *(const size_t *)b;
    return (x > y) - (x < y);
}

int ddp_add_cut(size_t **cuts, int ncuts, size_t at, size_t padded_parameters) {
    if (at == 0 || at >= padded_parameters) return ncuts;
    for (int i = 0; i < ncuts; i++)
        if ((*cuts)[i] == at) return ncuts;
    int n = ncuts, cap = ncuts;
    add_cut(cuts, &n, &cap, at);
    qsort(*cuts, (size_t)n, sizeof **cuts, cmp_size);
    return n;
}

// The expert-dp group when the experts' replicas are apart from dp's and m has experts.
static const tb_group *experts_group(const gpt_model *m, const tb_config *cfg, const tb_rank *rk) {
    return rk->world && gpt_experts_apart(cfg) && m->expert_parameters > 0 ? &rk->groups[TB_GROUP_EXPERT_DP] : NULL;
}

int ddp_chunk_cuts(const gpt_model *m, const tb_config *cfg, const tb_rank *rk, int sharded, size_t **cuts) {
    const tb_group *dp = rk->world ? &rk->groups[TB_GROUP_DP_CP] : NULL, *edp = experts_group(m, cfg, rk);
    const size_t align = sharded ? gpt_lcm(dp ? (size_t)dp->size : 1, edp ? (size_t)edp->size : 1) : 1;
    // Megatron-FSDP: one bucket a unit (a MoE layer's experts their own, sliced over expert-dp);
    // a tied embedding's bucket aligned alike on the first and last stage, whether or not a
    // stage holds experts
    const int shared = ddp_shared_embedding(cfg, rk);
    const size_t shared_align =
        shared && sharded ? gpt_lcm(align, gpt_experts_apart(cfg) ? (size_t)gpt_expert_dp_size(cfg) : 1) : 0;
    int n = cfg->use_megatron_fsdp ? fsdp_unit_cuts(m, align, shared_align, cuts)
                                   : ddp_bucket_cuts(m, (size_t)cfg->ddp_bucket_size, align, shared, cuts);
    return edp ? ddp_add_cut(cuts, n, m->experts_offset, m->padded_parameters) : n;
}

int ddp_shared_embedding(const tb_config *cfg, const tb_rank *rk) {
    return rk->world && rk->groups[TB_GROUP_EMBEDDING].size > 1 && !cfg->untie_embeddings_and_output_weights;
}

int ddp_bucket_cuts(const gpt_model *m, size_t bucket_size, size_t align, int shared_embedding, size_t **out) {
    size_t *cuts = NULL;
    int n = 0, cap = 0;
    size_t top = m->padded_parameters;  // the open bucket's hi
    int open = 0;                       // parameters in the open bucket
    // from the end of the buffer down, at parameter boundaries: a bucket's lo is a cut
    for (int i = m->nparams - 1; i >= 0; i--) {
        const gpt_param *p = &m->params[i];
        if (gpt_param_site(m, p, shared_embedding) == TB_DDP_SITE_DEFERRED) {
            const size_t hi = (p->offset + p->numel + align - 1) / align * align;  // up: keep it whole
            if (open && hi < top) add_cut(&cuts, &n, &cap, hi);
            add_cut(&cuts, &n, &cap, p->offset / align * align);
            top = p->offset;
            open = 0;
            continue;
        }
        open++;
        if (top - p->offset >= bucket_size) {
            add_cut(&cuts, &n, &cap, p->offset / align * align);
            top = p->offset;
            open = 0;
        }
    }
    // ascending, each once, strictly inside the buffer
    if (n) qsort(cuts, (size_t)n, sizeof *cuts, cmp_size);
    int k = 0;
    for (int i = 0; i < n; i++)
        if (cuts[i] > 0 && cuts[i] < m->padded_parameters && (k == 0 || cuts[i] != cuts[k - 1])) cuts[k++] = cuts[i];
    if (!k) {
        free(cuts);
        cuts = NULL;
    }
    *out = cuts;
    return k;
}

// The buckets of chunk c from its cuts; a parameter belongs to every bucket it has an
// element in.
static void layout_buckets(tb_ddp *d, int c, const size_t *cuts, int ncuts) {
    const gpt_model *m = &d->models[c];
    const int first = d->nbuckets;
    d->buckets = tb_xrealloc(d->buckets, (size_t)(d->nbuckets + ncuts + 1) * sizeof *d->buckets, "ddp buckets");
    for (int b = 0; b <= ncuts; b++) {
        ddp_bucket *k = &d->buckets[d->nbuckets++];
        *k = (ddp_bucket){.chunk = c, .lo = b ? cuts[b - 1] : 0, .hi = b < ncuts ? cuts[b] : m->padded_parameters,
                          .shard = d->opts && d->opts[c].sharded ? b : -1};
        k->expert = d->edp && m->expert_parameters > 0 && k->lo >= m->experts_offset;
    }
    for (int i = 0; i < m->nparams; i++) {
        const gpt_param *p = &m->params[i];
        d->bucket_lo[c][i] = d->bucket_hi[c][i] = -1;
        for (int b = first; b < d->nbuckets; b++) {
            if (p->offset >= d->buckets[b].hi || p->offset + p->numel <= d->buckets[b].lo) continue;
            if (d->bucket_lo[c][i] < 0) d->bucket_lo[c][i] = b;
            d->bucket_hi[c][i] = b;
            d->buckets[b].nparams++;
        }
    }
}

static void comm_thread_fail(tb_comm_thread *t, int status, const char *msg) {
    tb_ddp *d = (tb_ddp *)((char *)t - offsetof(tb_ddp, ct));
    // the world first, so that every waiting peer (and this rank's own thread in another
    // group's call) stops; the rank thread reports status and msg when it waits for us
    if (d->rk->world) parallel_state_abort(d->rk->world, d->rk, status);
    pthread_mutex_lock(&d->mu);
    d->failed = 1;
    d->fail_status = status;
    snprintf(d->fail_msg, sizeof d->fail_msg, "%s", msg);
    pthread_cond_broadcast(&d->cv);
    pthread_mutex_unlock(&d->mu);
    tb_ranges_bind(NULL);
    pthread_exit(NULL);
}

// A failed device call of the thread (an event, a kernel): the thread fails as from a call.
static void device_failed(void *arg, const char *msg) {
    tb_ddp *d = arg;
    comm_thread_fail(&d->ct, TB_EXIT_FAILURE, msg);
}

// On a device: the thread's work from now on the group's stream, after the bucket's ready
// event (recorded on the compute stream where the rank thread queued the bucket).
static void after_ready(tb_ddp *d, tb_group *g, void *const *ready, int b) {
    if (!ready) return;
    d->be->set_stream(tb_nccl_group_stream(g));
    d->be->event_wait(ready[b]);
}

static void reduce_bucket(tb_ddp *d, int b) {
    const ddp_bucket *k = &d->buckets[b];
    float *g = d->models[k->chunk].grad_memory;
    const float inv = 1.0f / (float)d->dp->size;  // an expert bucket's too (finalize_model_grads)
    tb_group *group = k->expert ? d->edp : d->dp;
    TB_RANGE_PUSH("ddp.bucket.%d", b);
    tb_range_annotate(d->ct.step, -1);  // the step its calls belong to (tracebook comm)
    after_ready(d, group, d->grad_ready, b);
    if (k->shard >= 0) {
        // the distributed optimizer: this rank's slice summed, then averaged (finalize's rule)
        const tb_adamw *o = &d->opts[k->chunk];
        const tb_shard_bucket *s = &o->buckets[k->shard];
        const size_t n = s->slice_hi - s->slice_lo;
        tb_reduce_scatter(group, g + k->lo, o->shard_grads + s->at, n);
        d->be->scale(g + s->slice_lo, o->shard_grads + s->at, inv, n);
    } else {
        const size_t n = k->hi - k->lo;
        if (group->size > 1) tb_all_reduce(group, g + k->lo, n, TB_RED_SUM);
        d->be->scale(g + k->lo, g + k->lo, inv, n);  // finalize_model_grads' average, per element
    }
    if (d->grad_done) d->be->event_record(d->grad_done[b]);
    TB_RANGE_POP();
}

static void gather_bucket(tb_ddp *d, int b) {
    const ddp_bucket *k = &d->buckets[b];
    const tb_shard_bucket *s = &d->opts[k->chunk].buckets[k->shard];
    float *p = d->models[k->chunk].param_memory;
    tb_group *group = k->expert ? d->edp : d->dp;
    TB_RANGE_PUSH("ddp.param_gather.%d", b);
    tb_range_annotate(d->ct.step, -1);
    after_ready(d, group, d->gather_ready, b);
    tb_all_gather(group, p + s->slice_lo, p + s->lo, s->slice_hi - s->slice_lo);
    if (d->gather_done) d->be->event_record(d->gather_done[b]);
    TB_RANGE_POP();
}

static void *comm_main(void *arg) {
    tb_ddp *d = arg;
    tb_ranges_bind(&d->ranges);
    tb_comm_thread_bind(&d->ct);
    // the rank's table, and on a device the rank's device (its kernels: the buckets' averages)
    tb_backend_bind(d->be);
    if (d->be->bind_side_thread) d->be->bind_side_thread(d->be_context, device_failed, d);
    pthread_mutex_lock(&d->mu);
    for (;;) {
        while (!d->stop && d->taken == d->queued) pthread_cond_wait(&d->cv, &d->mu);
        if (d->taken == d->queued) break;  // stopped
        ddp_work w = d->queue[d->taken++];
        d->ct.step = w.step;  // only this thread reads it
        pthread_mutex_unlock(&d->mu);
        if (d->fsdp.active) fsdp_comm_run(&d->fsdp, w.bucket, w.gather, w.step, d->dp, d->edp);
        else if (w.gather) gather_bucket(d, w.bucket);
        else reduce_bucket(d, w.bucket);
        const double run_delay = tb_thread_run_delay_s();
        pthread_mutex_lock(&d->mu);
        d->run_delay_s = run_delay;
        d->track_events = d->ranges.nevents;
        d->done++;
        if (d->fsdp.active) {
            // (the rank thread counts its own tickets: fsdp.c)
        } else if (w.gather) {
            d->buckets[w.bucket].gathered = 1;
            d->gathers_left--;
        } else {
            d->reduced++;
        }
        pthread_cond_broadcast(&d->cv);
    }
    pthread_mutex_unlock(&d->mu);
    if (d->be->bind_side_thread) d->be->bind_side_thread(NULL, NULL, NULL);
    tb_backend_bind(NULL);
    tb_comm_thread_bind(NULL);
    tb_ranges_bind(NULL);
    return NULL;
}

// On a device: each bucket's four events (backend/backend.h), and the scratch of the waits.
static void **events(const tb_ddp *d) {
    void **ev = tb_xcalloc((size_t)d->nbuckets, sizeof *ev, "ddp bucket events");
    for (int b = 0; b < d->nbuckets; b++) ev[b] = d->be->event_create();
    return ev;
}
static void free_events(const tb_ddp *d, void **ev) {
    for (int b = 0; ev && b < d->nbuckets; b++) d->be->event_destroy(ev[b]);
    free(ev);
}

// Queues one unit of work (d->mu held).
static void enqueue(tb_ddp *d, int bucket, int gather, int64_t step) {
    if (d->queued == d->cap) {
        d->cap = d->cap ? 2 * d->cap : 2 * d->nbuckets + 2;
        d->queue = tb_xrealloc(d->queue, (size_t)d->cap * sizeof *d->queue, "ddp work queue");
    }
    d->queue[d->queued++] = (ddp_work){bucket, gather, step};
    pthread_cond_broadcast(&d->cv);
}

// The window opens (d->mu held): the comm thread's dp calls are next.
static void open_window(tb_ddp *d) {
    if (d->window) return;
    d->queued = d->taken = d->done = 0;
    d->dp->seq = d->rk->groups[TB_GROUP_DP_CP].seq;
    if (d->edp) d->edp->seq = d->rk->groups[TB_GROUP_EXPERT_DP].seq;
    d->window = 1;
}

// The models' hook before a unit's backward (gpt.h), under Megatron-FSDP.
static void backward_needs(void *ctx, int chunk, int site) {
    (void)chunk;  // (one chunk a rank under FSDP)
    fsdp_acquire(&((tb_ddp *)ctx)->fsdp, site, 1);
}

// The communication thread's own copies of the dp group and (the experts' replicas apart from
// dp's) the expert-dp group: their transfer buffers come from the thread's allocator (the
// rank's is not thread-safe); seq is handed over at the window's ends.
static void copy_groups(tb_ddp *d, const tb_config *cfg, tb_rank *rk) {
    d->rk = rk;
    d->dp = tb_xcalloc(1, sizeof *d->dp, "ddp data-parallel group");
    *d->dp = rk->groups[TB_GROUP_DP_CP];
    tb_allocator *mem = tb_xcalloc(1, sizeof *mem, "ddp allocator");
    tb_allocator_init(mem, 0, NULL, NULL);
    d->dp->mem = mem;
    if (gpt_experts_apart(cfg)) {
        d->edp = tb_xcalloc(1, sizeof *d->edp, "ddp expert-data-parallel group");
        *d->edp = rk->groups[TB_GROUP_EXPERT_DP];
        d->edp->mem = mem;
    }
}

int ddp_trace_spill(tb_ddp *d, tb_error *err) {
    if (!d->started) return 0;
    pthread_mutex_lock(&d->mu);
    int idle = 0;
    if (d->track_events >= d->ranges.spill_events) {
        while (d->done < d->queued && !d->failed) pthread_cond_wait(&d->cv, &d->mu);
        idle = !d->failed;  // (a failed thread fails the rank at its next wait)
    }
    pthread_mutex_unlock(&d->mu);
    if (!idle) return 0;
    int rc = tb_ranges_spill(&d->ranges, err);  // the thread waits for work this thread queues
    pthread_mutex_lock(&d->mu);
    d->track_events = d->ranges.nevents;
    pthread_mutex_unlock(&d->mu);
    return rc;
}

// The thread itself, its track and failure path (after the buckets and their events).
static void start_thread(tb_ddp *d, tb_rank *rk) {
    d->be = tb_be();
    d->be_context = d->be->thread_context ? d->be->thread_context() : NULL;
    tb_ranges_init(&d->ranges, rk->rank, rk->world_size, rk->label, rk->world->origin_ns, 1);
    tb_ranges_spill_to(&d->ranges, rk->run_dir);
    d->ct.fail = comm_thread_fail;
    d->ct.microbatch = -1;
    d->ct.stream_ordered = d->grad_ready != NULL;  // (the events order its calls: the module comment)
    pthread_mutex_init(&d->mu, NULL);
    pthread_cond_init(&d->cv, NULL);
    if (pthread_create(&d->thread, NULL, comm_main, d) != 0) {
        fprintf(stderr, "%s: --overlap-grad-reduce: cannot start the communication thread\n", rk->label);
        abort();
    }
    d->started = 1;
}

// Megatron-FSDP's side of the queue (fsdp.h: tb_fsdp_comm), on the rank thread.
static int fsdp_post(void *ctx, int bucket, int gather) {
    tb_ddp *d = ctx;
    pthread_mutex_lock(&d->mu);
    const int ticket = d->queued;
    enqueue(d, bucket, gather, d->rk->step);
    pthread_mutex_unlock(&d->mu);
    return ticket;
}

static void fail_if(tb_ddp *d, int failed) {
    if (failed) parallel_state_rank_fail(d->rk, d->fail_status, "%s", d->fail_msg);
}

static void fsdp_wait(void *ctx, int ticket) {
    tb_ddp *d = ctx;
    pthread_mutex_lock(&d->mu);
    while (d->done <= ticket && !d->failed) pthread_cond_wait(&d->cv, &d->mu);
    const int failed = d->failed;
    pthread_mutex_unlock(&d->mu);
    fail_if(d, failed);
}

static int fsdp_done(void *ctx, int ticket) {
    tb_ddp *d = ctx;
    pthread_mutex_lock(&d->mu);
    const int done = d->done > ticket || d->failed;  // (a failed thread: fsdp_wait reports it)
    pthread_mutex_unlock(&d->mu);
    return done;
}

void ddp_init(tb_ddp *d, const tb_config *cfg, tb_rank *rk, gpt_model *models, tb_adamw *opts, int nchunks) {
    memset(d, 0, sizeof *d);
    if (rk->world && nchunks == 1) fsdp_init(&d->fsdp, cfg, rk, &models[0], &opts[0]);
    if (d->fsdp.active) {
        models[0].params_needed_backward = backward_needs;
        if (!cfg->overlap_grad_reduce) return;
        // every dp call of the step on the communication thread (fsdp.h, "Time")
        copy_groups(d, cfg, rk);
        start_thread(d, rk);
        const tb_fsdp_comm comm = {d, fsdp_post, fsdp_wait, fsdp_done};
        fsdp_overlap(&d->fsdp, &comm, cfg->overlap_param_gather);
        return;
    }
    if (!cfg->overlap_grad_reduce || !rk->world || rk->groups[TB_GROUP_DP_CP].size < 2) return;
    d->models = models;
    d->opts = opts;
    d->nchunks = nchunks;
    d->param_gather = cfg->overlap_param_gather && opts[0].sharded;
    copy_groups(d, cfg, rk);
    d->tp = &rk->groups[TB_GROUP_TP];
    d->sp_reduce = cfg->sequence_parallel && d->tp->size > 1;
    const int shared_embedding = ddp_shared_embedding(cfg, rk);
    d->site = tb_xcalloc((size_t)nchunks, sizeof *d->site, "ddp sites");
    d->bucket_lo = tb_xcalloc((size_t)nchunks, sizeof *d->bucket_lo, "ddp buckets of parameters");
    d->bucket_hi = tb_xcalloc((size_t)nchunks, sizeof *d->bucket_hi, "ddp buckets of parameters");
    for (int c = 0; c < nchunks; c++) {
        const gpt_model *m = &models[c];
        d->site[c] = tb_xcalloc((size_t)m->nparams + 1, sizeof **d->site, "ddp sites");
        d->bucket_lo[c] = tb_xcalloc((size_t)m->nparams + 1, sizeof **d->bucket_lo, "ddp buckets of parameters");
        d->bucket_hi[c] = tb_xcalloc((size_t)m->nparams + 1, sizeof **d->bucket_hi, "ddp buckets of parameters");
        for (int i = 0; i < m->nparams; i++) d->site[c][i] = gpt_param_site(m, &m->params[i], shared_embedding);
        size_t *cuts;
        int ncuts = ddp_chunk_cuts(m, cfg, rk, opts[c].sharded, &cuts);
        if (opts[c].sharded && ncuts + 1 != opts[c].nbuckets) {
            fprintf(stderr, "%s: --overlap-grad-reduce: %d buckets, the distributed optimizer has %d\n", rk->label,
                    ncuts + 1, opts[c].nbuckets);
            abort();
        }
        layout_buckets(d, c, cuts, ncuts);
        free(cuts);
    }
    d->to_wait = tb_xcalloc((size_t)d->nbuckets, sizeof *d->to_wait, "ddp bucket waits");
    if (tb_be()->event_create) {
        d->be = tb_be();  // (events(): the table's; start_thread sets it again)
        d->grad_ready = events(d), d->grad_done = events(d);
        if (d->param_gather) d->gather_ready = events(d), d->gather_done = events(d);
    }
    start_thread(d, rk);
}

double ddp_thread_run_delay_s(tb_ddp *d) {
    if (!d->started) return 0;
    pthread_mutex_lock(&d->mu);
    double v = d->run_delay_s;
    pthread_mutex_unlock(&d->mu);
    return v;
}

void ddp_free(tb_ddp *d) {
    fsdp_free(&d->fsdp);
    if (!d->started) return;
    pthread_mutex_lock(&d->mu);
    d->stop = 1;
    pthread_cond_broadcast(&d->cv);
    pthread_mutex_unlock(&d->mu);
    pthread_join(d->thread, NULL);
    pthread_mutex_destroy(&d->mu);
    pthread_cond_destroy(&d->cv);
    tb_ranges_free(&d->ranges);
    tb_allocator_free_all(d->dp->mem);
    tb_allocator_release_cache(d->dp->mem);
    free(d->dp->mem);
    free(d->dp);
    free(d->edp);
    for (int c = 0; c < d->nchunks; c++) {
        free(d->site[c]);
        free(d->bucket_lo[c]);
        free(d->bucket_hi[c]);
    }
    free(d->site);
    free(d->bucket_lo);
    free(d->bucket_hi);
    free(d->buckets);
    free(d->queue);
    free_events(d, d->grad_ready);
    free_events(d, d->grad_done);
    free_events(d, d->gather_ready);
    free_events(d, d->gather_done);
    free(d->to_wait);
    memset(d, 0, sizeof *d);
}

void ddp_start_step(tb_ddp *d) {
    d->rank_reduce_ms = 0;
    d->param_wait_ms = 0;
    fsdp_start_step(&d->fsdp);
    if (!d->started) return;
    pthread_mutex_lock(&d->mu);
    open_window(d);  // (already open while the previous step's gathers are queued)
    for (int b = 0; b < d->nbuckets; b++) d->buckets[b].pending = d->buckets[b].nparams;
    d->reduced = 0;
    pthread_mutex_unlock(&d->mu);
}

// Hands bucket b's reduction to the communication thread (d->mu held): Megatron's
// start_grad_sync. The range marks when, on the rank thread's CPU clock: a replay starts the
// thread's ddp.bucket.b no earlier (docs/ARCHITECTURE.md, "Replayed timings").
static void start_grad_sync(tb_ddp *d, int b, int64_t step) {
    TB_RANGE_PUSH("ddp.start_grad_sync.%d", b);
    enqueue(d, b, 0, step);
    TB_RANGE_POP();
}

static void param_ready(tb_ddp *d, int c, int i, int64_t step) {
    gpt_model *m = &d->models[c];
    const gpt_param *p = &m->params[i];
    const int sp = d->sp_reduce && p->sp_partial && !tb_fault_fires(m->block.d.tp.faults, TB_SITE_SP_GRAD_REDUCE);
    if (sp || (p->tp_partial && d->tp->size > 1)) {
        int64_t t0 = tb_now_ns();
        tb_all_reduce(d->tp, m->grad_memory + p->offset, p->numel, TB_RED_SUM);
        d->rank_reduce_ms += (double)(tb_now_ns() - t0) / 1e6;
    }
    int n = 0;
    pthread_mutex_lock(&d->mu);
    // the highest bucket first: the order buckets fill in
    for (int b = d->bucket_hi[c][i]; b >= d->bucket_lo[c][i]; b--)
        if (--d->buckets[b].pending == 0) d->to_wait[n++] = b;
    if (!d->grad_ready)
        for (int j = 0; j < n; j++) start_grad_sync(d, d->to_wait[j], step);
    pthread_mutex_unlock(&d->mu);
    if (!d->grad_ready || !n) return;
    // on a device, the ready event here, in the rank thread's order (outside the lock: a failed
    // record unwinds the rank), then the bucket is queued
    for (int j = 0; j < n; j++) d->be->event_record(d->grad_ready[d->to_wait[j]]);
    pthread_mutex_lock(&d->mu);
    for (int j = 0; j < n; j++) start_grad_sync(d, d->to_wait[j], step);
    pthread_mutex_unlock(&d->mu);
}

void ddp_site_ready(tb_ddp *d, int chunk, int site) {
    if (d->fsdp.active) {
        fsdp_site_done(&d->fsdp, site);
        return;
    }
    if (!d->started) return;
    const gpt_model *m = &d->models[chunk];
    // the last parameters first: the order their buckets fill in
    for (int i = m->nparams - 1; i >= 0; i--)
        if (d->site[chunk][i] == site) param_ready(d, chunk, i, d->rk->step);
}

// Closes the window once its work is done — with grads, once every bucket is reduced too
// (d->mu held): the rank thread's dp calls are next. 0, or 1 when the comm thread failed.
static int close_window(tb_ddp *d, int grads) {
    while ((d->done < d->queued || (grads && d->reduced < d->nbuckets)) && !d->failed)
        pthread_cond_wait(&d->cv, &d->mu);
    if (d->window && !d->failed) {
        d->rk->groups[TB_GROUP_DP_CP].seq = d->dp->seq;
        if (d->edp) d->rk->groups[TB_GROUP_EXPERT_DP].seq = d->edp->seq;
    }
    d->window = 0;
    return d->failed;
}


// Megatron-FSDP's communication of the step so far, as the rank's waits: the reduce-scatters
// (and tp sums) as its own reductions, the all-gathers as its parameter waits.
static void count_fsdp_comm(tb_ddp *d) {
    d->rank_reduce_ms += d->fsdp.reduce_ms;
    d->param_wait_ms += d->fsdp.gather_ms;
    d->fsdp.reduce_ms = d->fsdp.gather_ms = 0;
}

void ddp_finish_grad_sync(tb_ddp *d) {
    if (d->fsdp.active) {
        if (d->started) {
            // every reduce-scatter (and gather) the step posted, done: the dp group is the rank's again
            TB_RANGE_PUSH("fsdp.finish_grad_sync");
            pthread_mutex_lock(&d->mu);
            const int failed = close_window(d, 0);
            pthread_mutex_unlock(&d->mu);
            TB_RANGE_POP();
            fail_if(d, failed);
            fsdp_comm_settle(&d->fsdp);
        }
        fsdp_finish_grad_sync(&d->fsdp);
        count_fsdp_comm(d);
        return;
    }
    if (!d->started) return;
    for (int c = 0; c < d->nchunks; c++) ddp_site_ready(d, c, TB_DDP_SITE_DEFERRED);
    TB_RANGE_PUSH("ddp.finish_grad_sync");
    pthread_mutex_lock(&d->mu);
    int failed = close_window(d, 1);
    pthread_mutex_unlock(&d->mu);
    // on a device: the compute stream (the optimizer) after every bucket's reduction
    for (int b = 0; b < d->nbuckets && d->grad_done && !failed; b++) d->be->event_wait(d->grad_done[b]);
    TB_RANGE_POP();
    fail_if(d, failed);
}

void ddp_start_param_gather(tb_ddp *d, int64_t step) {
    fsdp_release_all(&d->fsdp);  // (Megatron-FSDP gathers on demand: what it holds is stale now)
    if (!d->started || !d->param_gather) return;
    // on a device: every bucket's ready event after the optimizer step's kernels
    for (int b = 0; b < d->nbuckets && d->gather_ready; b++) d->be->event_record(d->gather_ready[b]);
    pthread_mutex_lock(&d->mu);
    open_window(d);
    // forward order: chunk by chunk (the first microbatch runs them in order), each from the
    // start of its buffer
    for (int b = 0; b < d->nbuckets; b++) d->buckets[b].gathered = 0, d->buckets[b].gather_unwaited = 1;
    d->gathers_left = d->gathers_unwaited = d->nbuckets;
    for (int c = 0; c < d->nchunks; c++)
        for (int b = 0; b < d->nbuckets; b++)
            if (d->buckets[b].chunk == c) enqueue(d, b, 1, step);
    pthread_mutex_unlock(&d->mu);
}

// Whether parameter i of chunk c is used at `site`: its own site, and the tied embedding
// (deferred) by the embedding and the output layer.
static int used_at(const tb_ddp *d, int c, int i, int site) {
    const int own = d->site[c][i];
    return own == site || (own == TB_DDP_SITE_DEFERRED && (site == TB_DDP_SITE_EMBEDDING || site == TB_DDP_SITE_HEAD));
}

void ddp_params_needed(tb_ddp *d, int chunk, int site) {
    if (d->fsdp.active) {
        fsdp_acquire(&d->fsdp, site, 0);
        return;
    }
    if (!d->started || !d->param_gather) return;
    pthread_mutex_lock(&d->mu);
    if (d->gathers_unwaited == 0 || d->failed) {
        pthread_mutex_unlock(&d->mu);
        return;
    }
    const int64_t t0 = tb_now_ns();
    int waited = 0, n = 0;
    const gpt_model *m = &d->models[chunk];
    for (int i = 0; i < m->nparams && !d->failed; i++) {
        if (!used_at(d, chunk, i, site)) continue;
        for (int b = d->bucket_lo[chunk][i]; b <= d->bucket_hi[chunk][i] && !d->failed; b++) {
            while (!d->buckets[b].gathered && !d->failed) {
                if (!waited) TB_RANGE_PUSH("ddp.wait_param_gather");
                waited = 1;
                pthread_cond_wait(&d->cv, &d->mu);
            }
            if (d->buckets[b].gathered && d->buckets[b].gather_unwaited) {
                d->buckets[b].gather_unwaited = 0;
                d->gathers_unwaited--;
                d->to_wait[n++] = b;
            }
        }
    }
    int failed = d->failed;
    pthread_mutex_unlock(&d->mu);
    // on a device: the forward's kernels (the compute stream) after the bucket's gather
    for (int j = 0; j < n && d->gather_done && !failed; j++) d->be->event_wait(d->gather_done[d->to_wait[j]]);
    if (waited) {
        TB_RANGE_POP();
        d->param_wait_ms += (double)(tb_now_ns() - t0) / 1e6;
    }
    fail_if(d, failed);
}

void ddp_finish_param_gather(tb_ddp *d) {
    if (d->fsdp.active) {
        fsdp_gather_all(&d->fsdp);
        count_fsdp_comm(d);
        return;
    }
    if (!d->started || !d->param_gather) return;
    const int64_t t0 = tb_now_ns();
    TB_RANGE_PUSH("ddp.finish_param_gather");
    pthread_mutex_lock(&d->mu);
    int failed = close_window(d, 0), n = 0;
    for (int b = 0; b < d->nbuckets && !failed; b++)
        if (d->buckets[b].gather_unwaited) d->buckets[b].gather_unwaited = 0, d->to_wait[n++] = b;
    if (!failed) d->gathers_unwaited = 0;
    pthread_mutex_unlock(&d->mu);
    // on a device: what reads the parameters next (the compute stream) after every gather
    for (int j = 0; j < n && d->gather_done; j++) d->be->event_wait(d->gather_done[d->to_wait[j]]);
    TB_RANGE_POP();
    d->param_wait_ms += (double)(tb_now_ns() - t0) / 1e6;
    fail_if(d, failed);
}
