// index_workers.h — the indexer's parse workers (index.c): the units of a list parsed `jobs`
// at a time, each worker taking the next unit as it finishes one, and the facts of each unit
// handed over as soon as it is parsed, so that the thread that writes the index can take the
// units in database order while the rest are still being parsed.
#ifndef TB_TRACE_INDEX_WORKERS_H
#define TB_TRACE_INDEX_WORKERS_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <time.h>

#include "index_compdb.h"
#include "index_options.h"
#include "index_visit.h"

typedef struct ix_work {
    const ix_compdb *db;
    const ix_options *opt;
    ix_result *results;  // per unit of the database (NULL with --parse-only)
    const size_t *todo;  // the units to parse (indexes in db->tus)
    size_t ntodo;
    atomic_size_t next;
    atomic_int failed;   // --parse-only: units libclang could not build
    double parse_cpu, dispose_cpu;  // --parse-only: the workers' CPU time in parses and disposals (under mu)
    pthread_mutex_t mu;  // done, and its signal
    pthread_cond_t cv;
    char *done;          // per unit of the database: its facts are in results
    ix_omp_files *omp_files;  // the input files' OpenMP directives, read once (NULL with --parse-only)
    pthread_t *threads;  // the started workers (`started` of them), joined by ix_workers_finish
    int started;
} ix_work;

void ix_work_init(ix_work *w, const ix_compdb *db, const ix_options *opt, ix_result *results, const size_t *todo,
                  size_t ntodo);
void ix_work_free(ix_work *w);

// The units of w->todo, `jobs` at a time (opt->parse_only: parsed and dropped, the failures
// counted): `jobs` threads parse while this one runs meanwhile(w, arg) (when not NULL), which
// may wait for units (ix_wait_unit) and use their facts as they come, then joins them. A list
// may be run again after more units were appended to it.
void ix_run_workers(ix_work *w, int jobs, void (*meanwhile)(ix_work *w, void *arg), void *arg);
// The same in two steps, for a caller with more to do before its meanwhile: `jobs` threads
// start parsing now; ix_workers_finish runs meanwhile(w, arg) (when not NULL) on this thread,
// then joins them (a list none could start for is parsed here first).
void ix_workers_start(ix_work *w, int jobs);
void ix_workers_finish(ix_work *w, void (*meanwhile)(ix_work *w, void *arg), void *arg);

// --parse-only, the reference bench-index.sh prints next to the index's own figures: every
// unit of the database parsed as the index parses it first (ix_parse_only), `jobs` at a time,
// nothing else; prints the wall time since t0. 0, or 1 when a unit failed.
int ix_parse_only_run(const ix_compdb *db, const ix_options *opt, const struct timespec *t0);

// Waits until unit i (of the database) is parsed; whether it is, now.
void ix_wait_unit(ix_work *w, size_t i);
int ix_unit_done(ix_work *w, size_t i);

// Every parse on the worker that asked for it. Unless LIBCLANG_NOTHREADS is set, libclang runs
// each clang_parseTranslationUnit2 on a thread it makes for that parse (8 MiB of stack, for
// clang's recursion: llvm::CrashRecoveryContext::RunSafelyOnThread) and joins: a thread made
// and joined per unit, and the unit's AST allocated in that thread's malloc arena, then walked
// and freed in the worker's. Set (unless the environment sets it already), the parse runs on
// the worker itself, whose stack is the same IX_PARSE_STACK (libclang's crash recovery then
// runs on the worker). Measured here (AMD EPYC, 2 cores, -j 2, this project): the full index
// 3.5-8.3% less wall time (median 5%), --parse-only ~2.5% (docs/PERFORMANCE.md). Called before
// the process starts any thread (setenv). --parse-only runs the same, being the index's parse.
#define IX_PARSE_STACK (8u << 20)
void ix_parse_on_workers(void);

// libclang's one-time initialisation (LLVM's, on the first clang_createIndex of the process:
// ~5 ms here), once per process whoever calls it first; the others wait for it. Every worker
// calls it before its own clang_createIndex: the first one registers LLVM's targets
// (llvm::InitializeAllTargets), and LLVM's TargetRegistry leaves avoiding races in
// registration to its callers.
// The index's warm-up thread calls it early, so the workers' indexes are made at once.
void ix_libclang_init(void);

#endif
