#include "distributed/distributed_data_parallel.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/xalloc.h"

int ddp_active(const tb_ddp *d) { return d->started; }

// Which backward site finalises parameter p's gradient in chunk m.
static int site_of(const gpt_model *m, const gpt_param *p, int shared_embedding) {
    int l;
    char rest[64];
    if (sscanf(p->name, "h.%d.%63s", &l, rest) == 2) return l;
    if (!strcmp(p->name, "wte.weight")) {
        if (shared_embedding) return TB_DDP_SITE_DEFERRED;
        return m->chunk.has_embedding ? TB_DDP_SITE_EMBEDDING : TB_DDP_SITE_HEAD;
    }
    if (!strcmp(p->name, "wpe.weight")) return TB_DDP_SITE_EMBEDDING;
    return TB_DDP_SITE_HEAD;  // ln_f.*, lm_head.weight
}

static void add_bucket(tb_ddp *d, int chunk, size_t lo, size_t hi, int nparams) {
    d->buckets = tb_xrealloc(d->buckets, (size_t)(d->nbuckets + 1) * sizeof *d->buckets, "ddp buckets");
    d->buckets[d->nbuckets++] = (ddp_bucket){chunk, lo, hi, nparams, nparams};
}

// Buckets of one chunk, from the end of its buffer down (module comment).
static void layout_buckets(tb_ddp *d, int c, size_t bucket_size) {
    const gpt_model *m = &d->models[c];
    size_t top = m->padded_parameters;  // the open bucket's hi
    int open = 0;                       // parameters in the open bucket
    const int first = d->nbuckets;
    for (int i = m->nparams - 1; i >= 0; i--) {
        const gpt_param *p = &m->params[i];
        if (d->site[c][i] == TB_DDP_SITE_DEFERRED) {
            if (open) add_bucket(d, c, p->offset + p->numel, top, open);
            size_t hi = open ? p->offset + p->numel : top;
            open = 0;
            d->bucket_of[c][i] = d->nbuckets;
            add_bucket(d, c, p->offset, hi, 1);
            top = p->offset;
            continue;
        }
        d->bucket_of[c][i] = d->nbuckets;
        open++;
        if (top - p->offset >= bucket_size) {
            add_bucket(d, c, p->offset, top, open);
            top = p->offset;
            open = 0;
        }
    }
    if (open) add_bucket(d, c, 0, top, open);
    else if (d->nbuckets > first) d->buckets[d->nbuckets - 1].lo = 0;  // nothing below the lowest parameter
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

static void reduce_bucket(tb_ddp *d, int b) {
    const ddp_bucket *k = &d->buckets[b];
    float *g = d->models[k->chunk].grad_memory + k->lo;
    const size_t n = k->hi - k->lo;
    const float inv = 1.0f / (float)d->dp->size;
    TB_RANGE_PUSH("ddp.bucket.%d", b);
    tb_all_reduce(d->dp, g, n, TB_RED_SUM);
    for (size_t i = 0; i < n; i++) g[i] *= inv;  // finalize_model_grads' average, per element
    TB_RANGE_POP();
}

static void *comm_main(void *arg) {
    tb_ddp *d = arg;
    tb_ranges_bind(&d->ranges);
    tb_comm_thread_bind(&d->ct);
    pthread_mutex_lock(&d->mu);
    for (;;) {
        while (!d->stop && d->taken == d->queued) pthread_cond_wait(&d->cv, &d->mu);
        if (d->taken == d->queued) break;  // stopped
        int b = d->queue[d->taken++];
        pthread_mutex_unlock(&d->mu);
        reduce_bucket(d, b);
        pthread_mutex_lock(&d->mu);
        d->done++;
        pthread_cond_broadcast(&d->cv);
    }
    pthread_mutex_unlock(&d->mu);
    tb_comm_thread_bind(NULL);
    tb_ranges_bind(NULL);
    return NULL;
}

void ddp_init(tb_ddp *d, const tb_config *cfg, tb_rank *rk, gpt_model *models, int nchunks) {
    memset(d, 0, sizeof *d);
    if (!cfg->overlap_grad_reduce || !rk->world || rk->groups[TB_GROUP_DP_CP].size < 2) return;
    d->rk = rk;
    d->models = models;
    d->nchunks = nchunks;
    // the comm thread's own copy of the dp group: its transfer buffers come from the
    // thread's allocator (the rank's is not thread-safe); seq is handed over at the window's ends
    d->dp = tb_xcalloc(1, sizeof *d->dp, "ddp data-parallel group");
    *d->dp = rk->groups[TB_GROUP_DP_CP];
    tb_allocator *mem = tb_xcalloc(1, sizeof *mem, "ddp allocator");
    tb_allocator_init(mem, 0, NULL, NULL);
    d->dp->mem = mem;
    d->tp = &rk->groups[TB_GROUP_TP];
    d->sp_reduce = cfg->sequence_parallel && d->tp->size > 1 && cfg->debug_inject_fault != TB_FAULT_SKIP_SP_GRAD;
    const int shared_embedding = rk->groups[TB_GROUP_EMBEDDING].size > 1 && !cfg->untie_embeddings_and_output_weights;
    d->site = tb_xcalloc((size_t)nchunks, sizeof *d->site, "ddp sites");
    d->bucket_of = tb_xcalloc((size_t)nchunks, sizeof *d->bucket_of, "ddp buckets of parameters");
    for (int c = 0; c < nchunks; c++) {
        const gpt_model *m = &models[c];
        d->site[c] = tb_xcalloc((size_t)m->nparams + 1, sizeof **d->site, "ddp sites");
        d->bucket_of[c] = tb_xcalloc((size_t)m->nparams + 1, sizeof **d->bucket_of, "ddp buckets of parameters");
        for (int i = 0; i < m->nparams; i++) d->site[c][i] = site_of(m, &m->params[i], shared_embedding);
        layout_buckets(d, c, (size_t)cfg->ddp_bucket_size);
    }
    d->queue = tb_xcalloc((size_t)d->nbuckets + 1, sizeof *d->queue, "ddp bucket queue");
    tb_ranges_init(&d->ranges, rk->rank, rk->world_size, rk->label, rk->world->origin_ns, 1);
    d->ct.fail = comm_thread_fail;
    d->ct.microbatch = -1;
    pthread_mutex_init(&d->mu, NULL);
    pthread_cond_init(&d->cv, NULL);
    if (pthread_create(&d->thread, NULL, comm_main, d) != 0) {
        fprintf(stderr, "%s: --overlap-grad-reduce: cannot start the communication thread\n", rk->label);
        abort();
    }
    d->started = 1;
}

void ddp_free(tb_ddp *d) {
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
    for (int c = 0; c < d->nchunks; c++) {
        free(d->site[c]);
        free(d->bucket_of[c]);
    }
    free(d->site);
    free(d->bucket_of);
    free(d->buckets);
    free(d->queue);
    memset(d, 0, sizeof *d);
}

void ddp_start_step(tb_ddp *d, int64_t step) {
    if (!d->started) return;
    pthread_mutex_lock(&d->mu);
    for (int b = 0; b < d->nbuckets; b++) d->buckets[b].pending = d->buckets[b].nparams;
    d->queued = d->taken = d->done = 0;
    d->ct.step = step;
    d->dp->seq = d->rk->groups[TB_GROUP_DP_CP].seq;  // the window opens: the comm thread's calls are next
    pthread_mutex_unlock(&d->mu);
    d->rank_reduce_ms = 0;
}

static void param_ready(tb_ddp *d, int c, int i) {
    gpt_model *m = &d->models[c];
    const gpt_param *p = &m->params[i];
    if (d->sp_reduce && p->sp_partial) {
        int64_t t0 = tb_now_ns();
        tb_all_reduce(d->tp, m->grad_memory + p->offset, p->numel, TB_RED_SUM);
        d->rank_reduce_ms += (double)(tb_now_ns() - t0) / 1e6;
    }
    ddp_bucket *b = &d->buckets[d->bucket_of[c][i]];
    pthread_mutex_lock(&d->mu);
    if (--b->pending == 0) {
        d->queue[d->queued++] = (int)(b - d->buckets);
        pthread_cond_broadcast(&d->cv);
    }
    pthread_mutex_unlock(&d->mu);
}

void ddp_site_ready(tb_ddp *d, int chunk, int site) {
    if (!d->started) return;
    const gpt_model *m = &d->models[chunk];
    // the last parameters first: the order their buckets fill in
    for (int i = m->nparams - 1; i >= 0; i--)
        if (d->site[chunk][i] == site) param_ready(d, chunk, i);
}

void ddp_finish_grad_sync(tb_ddp *d) {
    if (!d->started) return;
    for (int c = 0; c < d->nchunks; c++) ddp_site_ready(d, c, TB_DDP_SITE_DEFERRED);
    TB_RANGE_PUSH("ddp.finish_grad_sync");
    pthread_mutex_lock(&d->mu);
    while (d->done < d->nbuckets && !d->failed) pthread_cond_wait(&d->cv, &d->mu);
    int failed = d->failed;
    d->rk->groups[TB_GROUP_DP_CP].seq = d->dp->seq;  // the window closes: the rank thread's calls are next
    pthread_mutex_unlock(&d->mu);
    TB_RANGE_POP();
    if (failed) parallel_state_rank_fail(d->rk, d->fail_status, "%s", d->fail_msg);
}
