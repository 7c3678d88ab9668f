// index_write_internal.h — what the two writers of the index share: index_write.c (a new
// file, or a copy of the previous one, merged from every unit's facts) and index_update.c (the
// previous file updated in place by the difference of the parsed units' old and new facts),
// and the tables both derive (index_derived.c: collective sites, libraries). The merge rules
// live in index_write.c's write_result; index_update.c applies the same rules to the rows the
// parsed units' change touches.
#ifndef TB_TRACE_INDEX_WRITE_INTERNAL_H
#define TB_TRACE_INDEX_WRITE_INTERNAL_H

#include <sqlite3.h>

#include "core/error.h"
#include "index_compdb.h"
#include "index_libs.h"
#include "index_options.h"
#include "index_targets.h"
#include "index_unit_keys.h"
#include "index_visit.h"
#include "index_write.h"
#include "pool.h"
#include "strmap.h"
#include "u64map.h"
#include "vec.h"

// What the writer knows of each function row it wrote.
struct finfo {
    long long id;
    long long def_file;  // files.id of the definition, 0: none yet
    int body_written;
    int is_static;       // as the row was inserted
    const char *name;
};

typedef struct writer {
    sqlite3 *db;
    sqlite3_stmt *ins_file, *ins_func, *upd_func, *ins_call, *ins_ft, *ins_range, *ins_coll, *ins_target, *ins_meta,
        *ins_cb, *ins_ferr;
    sqlite3_stmt *upd_unit;  // a unit's files row: its status, errors and diagnostics
    long long unit;       // files.id of the unit being merged
    struct {              // an update in place: the big tables' counts before it (temp.count_delta: its change)
        int before;
        long calls, functions, definitions;
        long targets, target_rows;  // (an update leaves the targets rows as they are)
        long library_found;         // functions with a libraries row
    } counted;
    sqlite3_stmt *u_inputs, *u_dep, *u_func, *u_call, *u_ft, *u_cb, *u_range, *u_sym;  // the tu_* tables
    tb_buf packed;        // a unit's rows of a packed tu_* table (index_unit_rows.h), reused
    tb_strmap files;      // path -> files.id
    tb_strmap funcs;      // usr -> index in finfo
    tb_vec finfo;         // of struct finfo, per index in funcs
    tb_pool pool;
    tb_error *err;
    const char *path;
} writer;

int ixw_sql_fail(writer *w, const char *what);
int ixw_prep(writer *w, sqlite3_stmt **st, const char *sql);
void ixw_bind_text(sqlite3_stmt *st, int i, const char *s);
void ixw_bind_file(sqlite3_stmt *st, int i, long long id);  // NULL for id <= 0
void ixw_bind_pos(sqlite3_stmt *st, int i, unsigned v);     // NULL for 0
// Steps an insert or update to its end and resets it; an error names `what`.
int ixw_step(writer *w, sqlite3_stmt *st, const char *what);
// files.id of path, inserting the row when the writer has not seen it (w->files).
long long ixw_file_id(writer *w, const char *path, int is_tu, const char *status, int errors, const char *diags);
// A body's rows under the function row caller_id: a call (its calls.id, -1 on failure), a
// range site, a callback; callee / target the USR as merged (a unit's renamed copy, or as is).
long long ixw_insert_call(writer *w, long long caller_id, const ix_call *c, const char *callee);
int ixw_insert_range(writer *w, long long caller_id, const ix_range *g);
int ixw_insert_callback(writer *w, long long caller_id, const ix_callback *b, const char *target);
// Prepares every insert statement of the writer; ixw_finalize finalizes them.
int ixw_prepare(writer *w);
void ixw_finalize(writer *w);
// The unit's rows of file_errors (w->unit is the unit) and of the tu_* tables.
int ixw_write_file_errors(writer *w, const ix_result *r);
int ixw_write_unit_facts(writer *w, long long tu_id, const ix_result *r);
// One of those tables' rows of the unit.
int ixw_write_unit_table(writer *w, long long tu_id, const ix_result *r, ix_unit_table t);
// input_units written from every unit's inputs (results[i].deps), the units by their files rows
// (a full write's end; the table is empty before).
int ixw_write_input_units(writer *w, const ix_compdb *db, const ix_result *results);

// Chains the items (of a vec) that share a key: *first maps each key to its first item, and the
// returned array (malloc'd) gives each item's next with the same key, -1 after the last.
int *ixw_chain(const tb_vec *items, const char *(*key)(const void *item), tb_strmap *first);
const char *ixw_link_target(const void *item);  // an ix_target_link's target
const char *ixw_row_file(const void *item);     // an ix_target_row's file

// Which calls are collective sites (--collective): listed names and globs, and with @Record
// the functions field_targets assigns to Record's fields and calls through those fields.
typedef struct ixw_collectives {
    tb_strmap members, exact;
    const char **records, **globs;
    size_t nrecords, nglobs;
} ixw_collectives;
int ixw_collectives_init(writer *w, const ix_options *opt, ixw_collectives *c);
// The site's callee_name for a call (usr, name, field as in calls), or NULL: not a site.
const char *ixw_collective_site(const ixw_collectives *c, const char *usr, const char *name, const char *field);
// Whether record is one of the @Record entries (its field targets decide sites).
int ixw_collective_record(const ixw_collectives *c, const char *record);
void ixw_collectives_free(ixw_collectives *c);
// Every call of the calls table that is a collective site, into collective_sites.
int ixw_write_collectives(writer *w, const ix_options *opt);
// The libraries table of a whole index, from the units' facts in memory and w's function rows:
// after every unit (ixw_write_libraries), or unit by unit as each is merged (begin, unit for
// each unit in database order, end; then free), targets final from the beginning.
typedef struct ixw_libraries {
    const ix_targets *targets;
    int active;               // targets with link lines: rows to write
    ix_libs libs;
    int *lib_of, *next_link;  // per link: its library's number in libs; its target's next link, -1 after the last
    unsigned char *archive;   // per link: its library is a static archive (.a)
    size_t *chain_at;         // per unit, ntus + 1: where the first links of its targets start in chains
    int *chains;
    tb_u64map asked;          // (function row, target's first link): the pair was asked
    tb_u64map defines;        // (function row, library number): 1 defines it, 2 does not
    tb_u64map given;          // function row id + 1: in early
    tb_vec early;             // of int: finfo indexes given rows while without a definition
    tb_vec missed;            // the names a unit's calls gave that had no function row yet, or waited for the end
    sqlite3_stmt *ins;
} ixw_libraries;
int ixw_libraries_begin(writer *w, ixw_libraries *l, const ix_compdb *db, const ix_targets *targets);
int ixw_libraries_unit(writer *w, ixw_libraries *l, size_t unit, const ix_result *r);
int ixw_libraries_end(writer *w, ixw_libraries *l);
void ixw_libraries_free(ixw_libraries *l);
int ixw_write_libraries(writer *w, const ix_compdb *db, const ix_result *results, const ix_targets *targets);

// The meta rows every writer writes (schema, paths, counts, the digests an update checks).
int ixw_write_meta(writer *w, const ix_meta *meta, const ix_options *opt, long tus, long errors,
                   long tus_with_errors);
// Hex SHA-256 of the --collective list: an update in place needs it unchanged (as it needs
// ix_targets_digest unchanged).
const char *ixw_collectives_digest(tb_pool *p, const ix_options *opt);
// The summary's counts, read from the tables.
void ixw_count_summary(writer *w, ix_summary *sum);
// The calls, the functions and those defined here: 0, or -1 when they cannot be counted.
int ixw_count_big(writer *w, long *calls, long *functions, long *definitions);
// An update in place, before it changes anything: w->counted (the counts that take a scan of a
// big table; ixw_count_summary adds temp.count_delta's change). 0, or -1.
int ixw_count_before(writer *w);
// The one value a query gives (a count), -1 when it gives none.
long ixw_count(writer *w, const char *sql);

#endif
