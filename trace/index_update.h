// index_update.h — a re-index that parsed few units updates the previous index file in place
// (index_update.c), by the difference between each parsed unit's old and new facts, in one
// SQLite transaction: the cost follows the units that changed, not the size of the index.
#ifndef TB_TRACE_INDEX_UPDATE_H
#define TB_TRACE_INDEX_UPDATE_H

#include "index_compdb.h"
#include "index_options.h"
#include "index_reuse.h"
#include "index_targets.h"
#include "index_visit.h"
#include "index_write.h"

// Whether an update in place can apply before anything is parsed: the database lists the
// previous index's units, in the same order (files.id 1..n in database order), and at most a
// quarter of them (at least 8) are to be parsed. Otherwise *why says why not.
int ix_update_applies(const ix_prev *prev, const ix_compdb *db, size_t ntodo, const char **why);

// Updates the index at path: the units todo[0..ntodo) are parsed into results (their inputs
// and hashed deps filled in); every other unit keeps its rows. The merged tables end up
// exactly as a full index of the same sources writes them (row ids aside).
// ix_update_begin does what needs no parsed facts (their previous facts read, the file opened
// in a write transaction, statements, file ids) — index.c runs it while the units are parsed;
// it never returns NULL. ix_update_end applies the parsed facts and frees u: 0 updated; 1 does
// not apply (*why says why: the targets or the --collective list changed, a change that
// renumbers another unit's copies of an external function, a body that moves to another unit),
// the file untouched; -1 failed (err, as given to begin), the file untouched.
// targets: the CMake file API reply's, read (*targets_loaded) or, when its signature was the
// previous run's, read here only if a library row needs them (then *targets_loaded is set).
typedef struct ix_update ix_update;
ix_update *ix_update_begin(const char *path, const ix_compdb *db, const size_t *todo, size_t ntodo, ix_prev *prev,
                           ix_targets *targets, int *targets_loaded, const char *build_dir, const ix_options *opt,
                           tb_error *err);
int ix_update_end(ix_update *u, const ix_result *results, const ix_meta *meta, ix_summary *sum, const char **why);

#endif
