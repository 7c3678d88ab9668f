// index_reuse.h — incremental indexing (index_reuse.c): file and command-line hashes, and
// the previous index's units whose inputs are unchanged, read back as results.
#ifndef TB_TRACE_INDEX_REUSE_H
#define TB_TRACE_INDEX_REUSE_H

#include <openssl/evp.h>
#include <sqlite3.h>
#include "index_compdb.h"
#include "index_options.h"
#include "index_visit.h"
#include "pool.h"
#include "strmap.h"
#include "vec.h"

// Content hashes of files, each file read once per run. A file that cannot be read hashes
// to "-"; one modified after the run started (its mtime is not before `start`) to "~",
// which matches no content, so its units are parsed again next time.
// SHA-256 over a sequence of strings (each with its terminating NUL, so the sequence is
// unambiguous), as lowercase hex in p; ix_digest_hex frees the context.
EVP_MD_CTX *ix_digest_new(void);
void ix_digest_add(EVP_MD_CTX *ctx, const char *s);
const char *ix_digest_hex(tb_pool *p, EVP_MD_CTX *ctx);

// A file's identity and state as stat(2) gives it; equal at a later stat: the contents are
// unchanged (ctime moves on every change, and no program can set it back).
typedef struct ix_file_stat {
    long long size, mtime_ns, ctime_ns, ino, dev;
} ix_file_stat;

typedef struct ix_hashes {
    tb_strmap idx;          // path -> index in ents
    tb_vec ents;            // of struct hash_ent (index_reuse.c): hash, lines, stat
    tb_strmap known_idx;    // path -> index in known
    tb_vec known;           // what the previous index's file_stats recorded
    tb_pool pool;
    long long start_ns;     // CLOCK_REALTIME when the run started
} ix_hashes;

void ix_hashes_init(ix_hashes *h);
// OpenSSL's first SHA-256 fetch (its configuration read, its default provider loaded: 2-3 ms
// here), done once; every digest does it when first taken (a digest taken while another
// thread fetches waits for it).
void ix_digest_fetch(void);
// The previous index's file_stats: a file whose stat is as recorded there takes the hash
// recorded there instead of being read again (a stat per file instead of its contents).
void ix_hashes_known(ix_hashes *h, sqlite3 *db);
// Every file hashed this run (not "-" or "~") with its stat, as the index's file_stats. With
// holds_known, the table holds what ix_hashes_known loaded, and only the differences are
// written (rows of files not hashed this run deleted, new or changed ones written).
int ix_hashes_save(const ix_hashes *h, sqlite3 *db, int holds_known);
const char *ix_file_hash(ix_hashes *h, const char *path, long *lines);
void ix_hashes_free(ix_hashes *h);

// The parsed units' (todo) input files deduplicated, the source first, with their hashes (each
// file read once, or its stat unchanged), and the figures: the distinct files the parses read
// (`counted`), their number and lines.
void ix_hash_unit_inputs(const ix_compdb *db, ix_result *results, const size_t *todo, size_t ntodo, ix_hashes *hashes,
                         tb_strmap *counted, long *nfiles, long *nlines);

// Hex SHA-256 of what, besides its files, decides a unit's facts: directory, file, the
// clang arguments and the reduced ones, CUDA mode, the range push / pop lists.
const char *ix_inputs_hash(tb_pool *p, const ix_tu *tu, const ix_options *opt);
// The indexer itself (this executable's SHA-256, libclang's version, the schema): facts
// recorded by another build of tracebook are not reused. The key is computed when first asked
// for; ix_prev_load takes the previous index's key without reading the executable when the
// executable's stat (size, mtime, ctime, inode, device: `stat`, as meta indexer_exe_stat
// records it) is the one recorded with it, as file_stats does for the sources.
typedef struct ix_indexer {
    const char *stat;  // the executable's stat as text, "" when it cannot be taken
    const char *key;   // NULL until computed or taken from the previous index
    tb_pool *pool;
} ix_indexer;
void ix_indexer_init(ix_indexer *ind, tb_pool *p);
const char *ix_indexer_key(ix_indexer *ind);

// The previous index's units, when --output names an index of this schema written by the same
// indexer.
typedef struct ix_prev_unit {
    long long id;        // files.id of the unit in the previous index
    const char *inputs;  // its ix_inputs_hash
    tb_vec deps;         // of ix_dep
    int deps_bad;        // its tu_deps record did not unpack when deps were read (parsed, not reused)
    int missing_header;  // a "file not found" error: parsed again every run
    long ndeps;          // its inputs in tu_deps, and whether one of them has changed since
    int deps_changed;    // (ix_prev_check_deps); deps itself is read only for a full merge
    int deps_kept;       // tu_inputs.deps_kept: every recorded hash a SHA-256
    const char *status;  // ok | partial | failed, its error count and diagnostics (files row), and
    int errors, reduced; // whether it was parsed with the reduced command line
    const char *diagnostics;
} ix_prev_unit;

typedef struct ix_prev {
    sqlite3 *db;
    tb_strmap units;        // unit path -> index in list
    tb_vec list;         // of ix_prev_unit
    tb_vec paths;        // of const char *: files.id -> path (NULL: none)
    tb_pool pool;
    int deps_loaded;     // the units' deps vecs are filled (read_results needs them)
    int input_units_bad; // an input_units record read did not unpack (the full merge writes them anew)
    ix_prev_unit **by_id;  // files.id -> its unit in list (paths.len entries), NULL: none
} ix_prev;

// 0: loaded; 1: nothing to reuse (no file, another schema or indexer: *why says which);
// the previous index being unreadable is also 1, never an error.
int ix_prev_load(ix_prev *p, const char *path, ix_indexer *ind, const char **why);
// A meta value of the previous index (in p's pool), or NULL.
const char *ix_prev_meta(ix_prev *p, const char *key);
// Each unit of the previous index learns whether every input file it recorded still has the
// hash recorded (h: each file hashed once, or its stat unchanged; the recorded files stat'ed
// first by `jobs` threads): the units input_units names for each changed file, or, with many
// changed files, one pass over every unit's tu_deps record.
void ix_prev_check_deps(ix_prev *p, ix_hashes *h, int jobs);
// The previous unit for tu when its command line is unchanged and ix_prev_check_deps found
// every input file unchanged, else NULL.
const ix_prev_unit *ix_prev_match(const ix_prev *p, const ix_tu *tu, const char *inputs);
// Whether unit u is parsed again whatever its command line now (ix_prev_match never returns
// it): an input file changed or missing, nothing recorded to compare.
int ix_prev_reparsed(const ix_prev_unit *u);
// Fills results[i] (initialised here) with the facts of unit match[i] from the previous index,
// for each i < n whose match[i] is not NULL, reading each table once; a unit whose rows do
// not fit (or every unit, on a read error: -1) gets match[i] = NULL and results[i] zeroed, to
// be parsed. The results' paths point into p: keep p until they are written.
int ix_prev_results(ix_prev *p, const ix_prev_unit **match, ix_result *results, size_t n);
// The facts of one previous unit (its rows only, through the tu_id indexes) into r, which it
// initialises; -1 (r zeroed) when its rows cannot be read or do not fit.
int ix_prev_unit_facts(ix_prev *p, const ix_prev_unit *u, ix_result *r);
// Closes the previous index (the facts read stay); ix_prev_free does it too.
void ix_prev_close(ix_prev *p);
void ix_prev_free(ix_prev *p);

#endif
