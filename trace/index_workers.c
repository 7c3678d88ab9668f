// index_workers.c — the indexer's parse workers (index_workers.h).
#include "index_workers.h"

#include <clang-c/Index.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "core/xalloc.h"

// One worker: the next unit of the list until none is left; a parsed unit's facts are
// published (done[i]) under the mutex, which the waiting thread reads them after.
static void *worker(void *arg) {
    ix_work *w = arg;
    ix_libclang_init();  // before any other thread's clang_createIndex can run beside it
    CXIndex idx = clang_createIndex(0, 0);
    double parse_cpu = 0, dispose_cpu = 0;
    for (;;) {
        size_t k = atomic_fetch_add(&w->next, 1);
        if (k >= w->ntodo) break;
        size_t i = w->todo[k];
        if (w->opt->parse_only) {
            if (ix_parse_only(idx, &w->db->tus[i], &parse_cpu, &dispose_cpu)) atomic_fetch_add(&w->failed, 1);
            continue;
        }
        ix_index_tu(idx, &w->db->tus[i], w->opt, w->omp_files, &w->results[i]);
        pthread_mutex_lock(&w->mu);
        w->done[i] = 1;
        pthread_cond_broadcast(&w->cv);
        pthread_mutex_unlock(&w->mu);
    }
    clang_disposeIndex(idx);
    pthread_mutex_lock(&w->mu);
    w->parse_cpu += parse_cpu;
    w->dispose_cpu += dispose_cpu;
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

static pthread_once_t libclang_once = PTHREAD_ONCE_INIT;
static void libclang_first_index(void) { clang_disposeIndex(clang_createIndex(0, 0)); }
void ix_libclang_init(void) { pthread_once(&libclang_once, libclang_first_index); }

void ix_wait_unit(ix_work *w, size_t i) {
    pthread_mutex_lock(&w->mu);
    while (!w->done[i]) pthread_cond_wait(&w->cv, &w->mu);
    pthread_mutex_unlock(&w->mu);
}

int ix_unit_done(ix_work *w, size_t i) {
    pthread_mutex_lock(&w->mu);
    int done = w->done[i];
    pthread_mutex_unlock(&w->mu);
    return done;
}

void ix_work_init(ix_work *w, const ix_compdb *db, const ix_options *opt, ix_result *results, const size_t *todo,
                  size_t ntodo) {
    *w = (ix_work){.db = db, .opt = opt, .results = results, .todo = todo, .ntodo = ntodo};
    if (!opt->parse_only) w->omp_files = ix_omp_files_new();
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cv, NULL);
    w->done = tb_xcalloc(db->ntus ? db->ntus : 1, 1, "units parsed");
}

void ix_work_free(ix_work *w) {
    ix_omp_files_free(w->omp_files);
    pthread_mutex_destroy(&w->mu);
    pthread_cond_destroy(&w->cv);
    free(w->done);
}

// The threads of a run: `jobs` of them (at most one per unit), each with the stack libclang
// gives a parse of its own (see ix_parse_on_workers).
static void start(ix_work *w, int jobs) {
    atomic_init(&w->next, 0);
    atomic_init(&w->failed, 0);
    int nthreads = jobs < (int)w->ntodo ? jobs : (int)w->ntodo;
    w->threads = tb_xcalloc((size_t)(nthreads > 0 ? nthreads : 1), sizeof *w->threads, "worker threads");
    w->started = 0;
    pthread_attr_t attr;
    int sized = pthread_attr_init(&attr) == 0;
    if (sized && pthread_attr_setstacksize(&attr, IX_PARSE_STACK) != 0) {
        pthread_attr_destroy(&attr);
        sized = 0;
    }
    for (int i = 0; i < nthreads; i++) {
        if (pthread_create(&w->threads[w->started], sized ? &attr : NULL, worker, w) != 0) break;
        w->started++;
    }
    if (sized) pthread_attr_destroy(&attr);
}

static void finish(ix_work *w, void (*meanwhile)(ix_work *w, void *arg), void *arg) {
    if (w->ntodo && !w->started) worker(w);  // no thread could start: parse here first
    if (meanwhile) meanwhile(w, arg);
    for (int i = 0; i < w->started; i++) pthread_join(w->threads[i], NULL);
    free(w->threads);
    w->threads = NULL;
}

void ix_run_workers(ix_work *w, int jobs, void (*meanwhile)(ix_work *w, void *arg), void *arg) {
    start(w, jobs);
    finish(w, meanwhile, arg);
}

void ix_workers_start(ix_work *w, int jobs) { start(w, jobs); }

void ix_workers_finish(ix_work *w, void (*meanwhile)(ix_work *w, void *arg), void *arg) { finish(w, meanwhile, arg); }

void ix_parse_on_workers(void) { setenv("LIBCLANG_NOTHREADS", "1", 0); }

int ix_parse_only_run(const ix_compdb *db, const ix_options *opt, const struct timespec *t0) {
    size_t *todo = tb_xcalloc(db->ntus ? db->ntus : 1, sizeof *todo, "units to parse");
    for (size_t i = 0; i < db->ntus; i++) todo[i] = i;
    ix_work w;
    ix_work_init(&w, db, opt, NULL, todo, db->ntus);
    ix_run_workers(&w, opt->jobs, NULL, NULL);
    free(todo);
    struct timespec t1;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double secs = (double)(t1.tv_sec - t0->tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0->tv_nsec);
    int failed = atomic_load(&w.failed);
    printf("tracebook index --parse-only: %zu TUs parsed (%d failed) with -j %d in %.3f s (libclang's parses "
           "alone: nothing visited, no index written)\n",
           db->ntus, failed, opt->jobs, secs);
    if (opt->verbose)  // beside the index's --verbose line on its units' time
        fprintf(stderr, "tracebook index --parse-only: CPU in libclang's parses %.3f s, in disposal %.3f s\n",
                w.parse_cpu, w.dispose_cpu);
    ix_work_free(&w);
    return failed ? 1 : 0;
}
