// index_internal.h — the pieces of `tracebook index` (index.c): the compilation database
// (index_compdb.c), the libclang pass over one translation unit (index_visit.c), the CMake
// file API reply (index_targets.c) and the SQLite writer (index_write.c). Not a public API:
// only index*.c include it. See the comment at the top of index.c for the semantics.
#ifndef TB_TRACE_INDEX_INTERNAL_H
#define TB_TRACE_INDEX_INTERNAL_H

#include <fnmatch.h>
#include <sqlite3.h>
#include <stddef.h>

#include "core/error.h"
#include "pool.h"
#include "strmap.h"
#include "vec.h"

// ---------------------------------------------------------------------------------------
// Options

typedef struct ix_options {
    const char *compdb_arg;      // --compdb as given
    const char *out;             // --out
    const char *build_dir;       // --build-dir (NULL: the compdb's directory)
    const char **collectives;    // names, globs or @Record
    size_t ncollectives;
    const char **range_push;
    size_t nrange_push;
    const char **range_pop;
    size_t nrange_pop;
    int jobs;
    int quiet;
    int verbose;                 // each unit's clang arguments and parse time on stderr
    int full;                    // --full: parse every unit, reuse nothing from --out
} ix_options;

// fnmatch-style name match used for collective and range lists.
static inline int ix_name_matches(const char *pattern, const char *name) { return fnmatch(pattern, name, 0) == 0; }

// ---------------------------------------------------------------------------------------
// The compilation database

// The directory of the stand-in headers index_visit.c supplies as in-memory files (CUDA 13's
// missing texture_fetch_functions.h, omp.h when LLVM's is not installed); it goes last on the
// include path (-idirafter), so real headers win.
#define IX_STUB_DIR "/tracebook-stubs"

typedef struct ix_tu {
    const char *file;        // absolute, normalised
    const char *directory;   // the entry's working directory
    const char **args;       // clang arguments (no compiler, no source file), NULL-terminated
    int nargs;
    const char **fallback;   // a minimal command line (-D -U -I -include -std -x ...), for a retry
    int nfallback;
    int cuda;                // parsed as CUDA host code
} ix_tu;

typedef struct ix_compdb {
    const char *path;        // the compile_commands.json file, absolute
    const char *dir;         // its directory
    ix_tu *tus;
    size_t ntus;
    size_t nduplicates;      // entries skipped because their file was already listed
    tb_pool pool;
} ix_compdb;

// Loads and translates the database. A missing, unreadable or malformed file is an error
// naming it (with the JSON error's line and column).
int ix_compdb_load(ix_compdb *db, const char *arg, tb_error *err);
void ix_compdb_free(ix_compdb *db);
// Splits a shell-quoted command line into p-owned words; returns the count.
int ix_split_command(tb_pool *p, const char *cmd, tb_vec *out /* of const char * */);
// A path made absolute against dir and normalised (realpath when it exists, else lexically).
const char *ix_abspath(tb_pool *p, const char *dir, const char *path);

// ---------------------------------------------------------------------------------------
// One translation unit's facts (index_visit.c)

typedef struct ix_func {
    const char *usr, *name, *file;
    unsigned line, col;
    unsigned end_line, end_col;  // the body's closing brace (definitions), else 0
    int is_static, is_def;
    int main_like;  // external `main`: its USR is made file-qualified (every binary has one)
} ix_func;

typedef struct ix_call {
    int caller;  // index in the TU's funcs
    const char *callee_usr, *callee_name, *field, *file, *in_macro;
    unsigned line, col;
} ix_call;

typedef struct ix_ftarget {
    const char *record, *field, *fn_usr, *file;
    unsigned line;
} ix_ftarget;

typedef struct ix_callback {
    int caller;  // index in the TU's funcs: the body that names the function
    const char *target_usr, *passed_to, *file;  // passed_to: the callee when an argument, else NULL
    unsigned line, col;
} ix_callback;

typedef struct ix_range {
    int caller;
    const char *kind, *name, *file;
    unsigned line, col;
} ix_range;

// One input file of a unit: its source, or a file it included (directly or not; system
// headers too). hash: hex SHA-256 of the contents when the unit was indexed (index_reuse.c).
typedef struct ix_dep {
    const char *path, *hash;
} ix_dep;

typedef struct ix_result {
    const char *status;  // ok | partial | failed
    int errors;
    int reduced;         // parsed with the reduced command line
    int reused;          // facts taken from the previous index, not parsed this run
    char *diagnostics;   // malloc'd, "file:line:col: message" lines, or NULL
    tb_vec funcs, calls, ftargets, ranges, callbacks;
    tb_vec deps;         // of ix_dep: the unit's input files (hashes filled in by index.c)
    const char *inputs;  // hex SHA-256 of the unit's command line and options (ix_inputs_hash)
    tb_pool pool;
    double seconds;
} ix_result;

// Parses tu with its own flags and extracts its facts into r (which it initialises).
// Never fails: a TU that does not parse gets status "failed" and its diagnostics.
void ix_index_tu(void *cxindex, const ix_tu *tu, const ix_options *opt, ix_result *r);
void ix_result_free(ix_result *r);
void ix_result_init(ix_result *r);

// ---------------------------------------------------------------------------------------
// Incremental indexing (index_reuse.c)

// Content hashes of files, each file read once per run. A file that cannot be read hashes
// to "-"; one modified after the run started (its mtime is not before `start`) to "~",
// which matches no content, so its units are parsed again next time.
typedef struct ix_hashes {
    tb_strmap idx;          // path -> index in ents
    tb_vec ents;         // of struct { const char *hash; long lines; }
    tb_pool pool;
    long long start_ns;  // CLOCK_REALTIME when the run started
} ix_hashes;

void ix_hashes_init(ix_hashes *h);
const char *ix_file_hash(ix_hashes *h, const char *path, long *lines);
void ix_hashes_free(ix_hashes *h);

// Hex SHA-256 of what, besides its files, decides a unit's facts: directory, file, the
// clang arguments and the reduced ones, CUDA mode, the range push / pop lists.
const char *ix_inputs_hash(tb_pool *p, const ix_tu *tu, const ix_options *opt);
// Hex SHA-256 of the indexer itself (this executable and libclang's version): facts recorded
// by another build of tracebook are not reused.
const char *ix_indexer_key(tb_pool *p);

// The previous index's units, when --out names an index of this schema written by the same
// indexer.
typedef struct ix_prev_unit {
    long long id;        // files.id of the unit in the previous index
    const char *inputs;  // its ix_inputs_hash
    tb_vec deps;         // of ix_dep
    int missing_header;  // a "file not found" error: parsed again every run
} ix_prev_unit;

typedef struct ix_prev {
    sqlite3 *db;
    tb_strmap units;        // unit path -> index in list
    tb_vec list;         // of ix_prev_unit
    tb_vec paths;        // of const char *: files.id -> path (NULL: none)
    tb_pool pool;
} ix_prev;

// 0: loaded; 1: nothing to reuse (no file, another schema or indexer: *why says which);
// the previous index being unreadable is also 1, never an error.
int ix_prev_load(ix_prev *p, const char *path, const char *indexer_key, const char **why);
// The previous unit for tu when every input is unchanged, else NULL.
const ix_prev_unit *ix_prev_match(ix_prev *p, const ix_tu *tu, const char *inputs, ix_hashes *h);
// Fills r (initialised here) with the unit's facts from the previous index; -1 on a read error.
// r's paths point into p: keep p until r is written.
int ix_prev_result(ix_prev *p, const ix_prev_unit *u, ix_result *r);
void ix_prev_free(ix_prev *p);

// ---------------------------------------------------------------------------------------
// Targets from CMake's file API (index_targets.c)

typedef struct ix_target_row {
    const char *target, *type, *file;  // file absolute, normalised
} ix_target_row;

typedef struct ix_targets {
    const char *source_dir;  // the code model's source directory, or NULL
    const char *reply_dir;
    tb_vec rows;             // of ix_target_row
    size_t ntargets;
    tb_pool pool;
} ix_targets;

// 0: rows filled; 1: no reply there (rows empty); -1: a reply that cannot be read (err).
int ix_targets_load(ix_targets *t, const char *build_dir, tb_error *err);
void ix_targets_free(ix_targets *t);

// ---------------------------------------------------------------------------------------
// The writer (index_write.c)

typedef struct ix_summary {
    long tus, tus_with_errors, tus_failed, errors;
    long files, functions, definitions, calls, callbacks, field_targets, range_sites, collective_sites;
    long targets, target_rows;
} ix_summary;

typedef struct ix_meta {
    const char *source_dir, *build_dir, *compdb, *targets_source, *indexer_key;
} ix_meta;

// Writes everything to path via a temporary file and a rename.
int ix_write_index(const char *path, const ix_compdb *db, ix_result *results, const ix_targets *targets,
                   const ix_options *opt, const ix_meta *meta, ix_summary *sum, tb_error *err);


#endif
