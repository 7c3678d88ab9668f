// index_update_internal.h — what index_update.c, index_update_units.c and
// index_update_inferred.c share: the updater's state and the helpers they use; not an
// interface beyond them (index_update.h is).
#ifndef TB_TRACE_INDEX_UPDATE_INTERNAL_H
#define TB_TRACE_INDEX_UPDATE_INTERNAL_H

#include "index_compdb.h"
#include "index_options.h"
#include "index_targets.h"
#include "index_unit_keys.h"
#include "index_update.h"
#include "index_visit.h"
#include "index_write_internal.h"
#include "strmap.h"
#include "vec.h"

// Every unit's functions as its tu_functions record holds them, by USR (index_update_units.c):
// first maps a USR to the first of its rows, which chain in database order (unit, then row).
typedef struct ixu_fn_row {
    long long tu_id;
    const ix_func *f;  // in units
    int next;          // index in rows, -1 after the last
} ixu_fn_row;
typedef struct ixu_functions {
    int read;            // read (rc: what it gave, 0 or 1)
    int rc;
    tb_vec units;        // of ix_result: each record unpacked (its funcs only)
    tb_vec rows;         // of ixu_fn_row
    tb_strmap first;
    const char **paths;  // files.id -> path (the writer's keys), for the records' files
    size_t npaths;
} ixu_functions;

struct ix_update {
    writer w;
    const ix_compdb *db;
    ix_targets *targets;      // read lazily (update_libraries) when *targets_loaded is 0
    int *targets_loaded;
    const char *build_dir;
    const char *targets_digest, *collectives_digest;  // the index's
    const ix_options *opt;
    const char *why;          // set: the update does not apply
    ixw_collectives coll;
    int recollect;            // an @Record's field targets changed: every collective site again
    tb_strmap lib_check;      // USRs whose libraries rows are derived again
    ix_unit_keys *old_keys, *new_keys;  // per parsed unit (todo order)
    const ix_unit_keys **by_unit;    // tu_id -> the parsed unit's new facts, NULL: not parsed
    tb_strmap touched;        // USR -> index in before: merged again in pass 2
    tb_vec before;            // of merged_fn: the touched USRs' merged rows before the update
    tb_strmap ft_touched;     // field target keys merged again
    tb_strmap orphan;         // files.id (as text) U's old facts named and its new ones do not: removed
                              // when nothing else names them
    ixu_functions fns;        // read when pass 2 first asks for a USR's rows (ixu_functions_read)
    sqlite3_stmt *q_merged, *ins_fn, *upd_fn;
    const size_t *todo;       // the parsed units (indexes in db->tus)
    size_t ntodo;
    ix_result *old;           // their previous facts
    int rc;                   // ix_update_begin's outcome: 0, 1 (does not apply: why), -1 (failed: err)
    tb_error *err;
};
typedef struct ix_update updater;

static inline int ixu_fail(updater *u, const char *what) { return ixw_sql_fail(&u->w, what); }
// Runs a statement with one integer parameter to its end.
int ixu_exec_id(updater *u, const char *sql, long long id);

// The files.id values a unit's facts name, as text keys, into m.
void ixu_files_named(updater *u, const ix_result *r, tb_strmap *m);
// A parsed unit's tu_deps record replaced by its new inputs (index_update_units.c), and the
// input_units records of the paths it starts or stops reading: 0, 1 (a record there does not
// unpack: the update does not apply, u->why says so), -1 (err).
int ixu_replace_deps(updater *u, long long tu_id, const ix_result *now);
// A parsed unit's tu_* rows replaced, table by table, where its new facts differ from its old:
// as ixu_replace_deps.
int ixu_replace_unit_rows(updater *u, long long tu_id, const ix_result *old, const ix_result *now);
// Every unit's record of a packed table (index_unit_rows.h), unpacked: fn(arg, tu_id, facts)
// with the record's rows in facts' vector for t (files by path_of(ctx, id); path_of NULL: none), in
// tu_id order; fn returns nonzero to stop. 0; 1 when a record is malformed (the update does not
// apply, u->why says so: the full merge parses that record's unit again); -1 (err) when the
// table cannot be read.
int ixu_scan_packed(updater *u, ix_unit_table t, const char *(*path_of)(void *ctx, long long id), void *ctx,
                    int (*fn)(void *arg, long long tu_id, const ix_result *facts), void *arg);
// The units whose calls or callbacks name each function, from the packed records: first maps
// a USR to the first of its chain in links, each unit once.
typedef struct ixu_namer {
    long long tu_id;
    int next;  // index in links, -1 after the last
} ixu_namer;
typedef struct ixu_namers {
    tb_strmap first;
    tb_vec links;  // of ixu_namer
} ixu_namers;
int ixu_namers_read(updater *u, ixu_namers *n);  // as ixu_scan_packed; free it either way
void ixu_namers_free(ixu_namers *n);
// The files.id values (as text keys) the packed records of functions, calls, callbacks and
// range sites name, into ids: as ixu_scan_packed.
int ixu_packed_files(updater *u, tb_strmap *ids);
// u->fns read from the tu_functions records as they are (once: after the parsed units' records
// are replaced, pass 2); as ixu_scan_packed (asked again, it gives the same). The rows of a USR:
// ixu_functions_of.
int ixu_functions_read(updater *u);
const ixu_fn_row *ixu_functions_of(const updater *u, const char *usr);  // NULL: none
const ixu_fn_row *ixu_functions_next(const updater *u, const ixu_fn_row *row);
// The files.id of a path of the records (0 for none).
long long ixu_file_id(const updater *u, const char *path);
void ixu_functions_free(ixu_functions *fx);
// Link units inferred from the units' symbols (no CMake reply; meta says "inferred" or "none"):
// 0 when the previous ones stand, no parsed unit having changed what the inference reads
// (index_units.h); 1 when one did (u->why says how: the full merge infers them again) or a
// record it reads is malformed (ixu_scan_packed); -1 failed (err).
int ixu_inferred_link_units_stand(updater *u, const ix_result *results, const ix_result *old, const size_t *todo,
                                  size_t ntodo);

#endif
