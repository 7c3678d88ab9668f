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
    const char *indexer_exe_stat;   // ix_indexer's stat of the executable the key hashed
    const char *targets_digest;     // ix_targets_digest of the targets the rows come from
    const char *targets_signature;  // ix_targets_signature of the reply they were read from, or NULL
    const char *link_units_capped;  // inferred link units: the seeds cut at the limit ("0" when none)
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
// --verbose: where the parse workers' time went, summed over the parsed units (todo): libclang's
// parses and the rest (the visits); and how long the writer thread was busy (writer_busy < 0:
// no writer thread).
void ix_phase_units(const ix_options *opt, const ix_result *results, const size_t *todo, size_t ntodo,
                    double writer_busy);

// The same, one unit at a time as the units' facts come (the full index writes while the
// units are parsed): ix_write_begin makes the new file with the units' rows; ix_write_unit
// writes unit i's facts, called for i = 0, 1, ... in database order (after a failure it writes
// nothing more); ix_write_end writes the rest, commits and publishes (0) or fails (-1, err says
// why; nothing is published); ix_write_abandon drops the file. Either frees the writer.
typedef struct ix_writer ix_writer;
ix_writer *ix_write_begin(const char *path, const ix_compdb *db, tb_error *err);
int ix_write_unit(ix_writer *x, size_t i, const ix_result *r);
// What of the end needs no more units, done while they are still parsed. Once the link units
// are known (CMake's reply or --targets; not inferred ones), before the first ix_write_unit
// (after it, the call does nothing: the end writes all) and with targets unchanged until
// ix_write_end: their targets rows whose files have rows already (every unit's own file has
// one from ix_write_begin; the end writes the others), and from then on each unit's libraries
// rows as it is written (the end takes back those of functions a later unit defines, and asks
// the pairs a static archive answers: ixw_libraries_unit). Then
// the secondary indexes (the rows of the units after them are added to the indexes as they
// are written). Each returns 0, or -1 (the writer failed: ix_write_end reports it).
int ix_write_link_units(ix_writer *x, const ix_targets *targets);
int ix_write_indexes(ix_writer *x);
int ix_write_end(ix_writer *x, const ix_result *results, const ix_targets *targets, const ix_options *opt,
                 const ix_meta *meta, ix_summary *sum);
void ix_write_abandon(ix_writer *x);

int ix_write_index(const char *path, const ix_compdb *db, ix_result *results, const ix_targets *targets,
                   const ix_options *opt, const ix_meta *meta, const ix_inplace *in, ix_summary *sum,
                   tb_error *err);

#endif
