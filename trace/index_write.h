// index_write.h — the SQLite writer (index_write.c): every unit's facts merged and written
// as the index (index_db.h), via a temporary file and a rename.
#ifndef TB_TRACE_INDEX_WRITE_H
#define TB_TRACE_INDEX_WRITE_H

#include <time.h>

#include "core/error.h"
#include "index_compdb.h"
#include "index_options.h"
#include "index_targets.h"
#include "index_visit.h"

typedef struct ix_summary {
    long tus, tus_with_errors, tus_failed, errors;
    long files, functions, definitions, calls, callbacks, field_targets, range_sites, collective_sites;
    long targets, target_rows;
    long library_functions, library_found;  // functions without a definition; those a link's library defines
} ix_summary;

typedef struct ix_meta {
    const char *source_dir, *build_dir, *compdb, *targets_source, *indexer_key;
    const char *targets_digest;     // ix_targets_digest of the targets the rows come from
    const char *targets_signature;  // ix_targets_signature of the reply they were read from, or NULL
    const struct ix_hashes *hashes;  // the input files' stats and hashes (file_stats), or NULL
} ix_meta;

// A re-index that updates the previous index instead of writing a new one: its copy keeps
// the reused units' tu_* rows (the bulk of the file); everything else is written again.
typedef struct ix_inplace {
    const char *prev_file;             // the previous index
    const long long *prev_id;          // per unit of the database: its files.id there (reused units)
    const char *const *prev_paths;     // files.id -> path there (NULL: no such id)
    size_t nprev_paths;
} ix_inplace;

// Writes everything to path via a temporary file and a rename. in (or NULL): update a copy of
// the previous index, when every file keeps its id (else, or when the copy cannot be updated,
// the index is written anew).
// --verbose: "phase WHAT: S s" on stderr, the seconds since *last; *last becomes now.
void ix_phase_mark(const ix_options *opt, struct timespec *last, const char *what);

int ix_write_index(const char *path, const ix_compdb *db, ix_result *results, const ix_targets *targets,
                   const ix_options *opt, const ix_meta *meta, const ix_inplace *in, ix_summary *sum,
                   tb_error *err);

#endif
