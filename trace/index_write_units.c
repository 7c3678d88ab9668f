// index_write_units.c — the per-unit tables of the index (the tu_* tables of index_db.h): each
// parsed unit's own facts, unmerged, and its input files with their hashes, written so that
// the next re-index can reuse a unit without parsing it (index_reuse.c) and update the merged
// tables by the difference of a unit's rows (index_update.c).
#include <stdlib.h>
#include <string.h>

#include "core/xalloc.h"
#include "index_db.h"
#include "index_unit_keys.h"
#include "index_unit_rows.h"
#include "index_write_internal.h"

const char *const ix_unit_table_names[IX_TU_TABLES] = {"tu_inputs",    "tu_deps",          "tu_functions",
                                                      "tu_calls",     "tu_field_targets", "tu_callbacks",
                                                      "tu_range_sites", "tu_symbols"};

static int write_inputs(writer *w, long long tu_id, const ix_result *r) {
    sqlite3_bind_int64(w->u_inputs, 1, tu_id);
    ixw_bind_text(w->u_inputs, 2, r->inputs ? r->inputs : "");
    sqlite3_bind_int(w->u_inputs, 3, r->reduced);
    int kept = r->deps.len > 0;
    for (size_t i = 0; i < r->deps.len && kept; i++) {
        const char *h = TB_VEC_AT(&r->deps, ix_dep, i).hash;
        kept = h && strlen(h) == 64;
    }
    sqlite3_bind_int(w->u_inputs, 4, kept);
    return ixw_step(w, w->u_inputs, "inserting a unit's inputs");
}

static long long packed_file_id(void *ctx, const char *path) {
    return ixw_file_id(ctx, path, 0, NULL, 0, NULL);
}

// A unit's rows of a packed table as one record (index_unit_rows.h); none when it has no rows.
static int write_packed(writer *w, long long tu_id, const ix_result *r, ix_unit_table t) {
    sqlite3_stmt *st = t == IX_TU_DEPS ? w->u_dep : t == IX_TU_FUNCTIONS ? w->u_func
                     : t == IX_TU_CALLS ? w->u_call : t == IX_TU_CALLBACKS ? w->u_cb
                     : t == IX_TU_RANGE_SITES ? w->u_range : w->u_sym;
    w->packed.len = 0;
    if (!ix_rows_pack(&w->packed, r, t, packed_file_id, w)) return 0;
    sqlite3_bind_int64(st, 1, tu_id);
    sqlite3_bind_blob(st, 2, w->packed.s, (int)w->packed.len, SQLITE_STATIC);
    return ixw_step(w, st, "inserting a unit's facts");
}

int ixw_write_unit_table(writer *w, long long tu_id, const ix_result *r, ix_unit_table t) {
    switch (t) {
    case IX_TU_INPUTS: return write_inputs(w, tu_id, r);
    case IX_TU_FIELD_TARGETS:
        for (size_t i = 0; i < r->ftargets.len; i++) {
            const ix_ftarget *f = &TB_VEC_AT(&r->ftargets, ix_ftarget, i);
            sqlite3_bind_int64(w->u_ft, 1, tu_id);
            ixw_bind_text(w->u_ft, 2, f->record);
            ixw_bind_text(w->u_ft, 3, f->field);
            ixw_bind_text(w->u_ft, 4, f->fn_usr);
            ixw_bind_file(w->u_ft, 5, ixw_file_id(w, f->file, 0, NULL, 0, NULL));
            ixw_bind_pos(w->u_ft, 6, f->line);
            if (ixw_step(w, w->u_ft, "inserting a unit's field target")) return -1;
        }
        return 0;
    case IX_TU_DEPS:
    case IX_TU_FUNCTIONS:
    case IX_TU_CALLS:
    case IX_TU_CALLBACKS:
    case IX_TU_RANGE_SITES:
    case IX_TU_SYMBOLS: return write_packed(w, tu_id, r, t);
    case IX_TU_TABLES: break;
    }
    return 0;
}

// The unit's own facts, unmerged, and its inputs (the tu_* tables), for the next re-index.
// The tables in ix_unit_table's order: the files they name are numbered in that order
// (touch_unit_files follows it).
int ixw_write_unit_facts(writer *w, long long tu_id, const ix_result *r) {
    for (int t = 0; t < IX_TU_TABLES; t++)
        if (ixw_write_unit_table(w, tu_id, r, (ix_unit_table)t)) return -1;
    return 0;
}

// input_units: each input file's units, from every unit's inputs (results[i].deps: a reused
// unit's read back with its facts), written anew at the end of a full write. A unit's files.id
// is its source's files row.
typedef struct input_pair {
    const char *path;
    long long tu_id;
} input_pair;

static int by_path_then_unit(const void *a, const void *b) {
    const input_pair *x = a, *y = b;
    int c = strcmp(x->path, y->path);
    return c ? c : (x->tu_id > y->tu_id) - (x->tu_id < y->tu_id);
}

int ixw_write_input_units(writer *w, const ix_compdb *db, const ix_result *results) {
    size_t n = 0;
    for (size_t i = 0; i < db->ntus; i++) n += results[i].deps.len;
    input_pair *pairs = tb_xcalloc(n ? n : 1, sizeof *pairs, "input files' units");
    long long *ids = tb_xcalloc(db->ntus ? db->ntus : 1, sizeof *ids, "a file's units");
    n = 0;
    for (size_t i = 0; i < db->ntus; i++) {
        const int *id = tb_strmap_get(&w->files, db->tus[i].file);
        for (size_t j = 0; id && j < results[i].deps.len; j++)
            pairs[n++] = (input_pair){TB_VEC_AT(&results[i].deps, ix_dep, j).path, *id};
    }
    if (n) qsort(pairs, n, sizeof *pairs, by_path_then_unit);
    sqlite3_stmt *ins = NULL;
    int rc = ixw_prep(w, &ins, "INSERT INTO input_units(path, units) VALUES(?,?)");
    for (size_t a = 0, b; a < n && !rc; a = b) {
        size_t k = 0;
        for (b = a; b < n && !strcmp(pairs[b].path, pairs[a].path); b++)
            if (!k || ids[k - 1] != pairs[b].tu_id) ids[k++] = pairs[b].tu_id;  // (a unit's path once)
        w->packed.len = 0;
        ix_units_pack(&w->packed, ids, k);
        ixw_bind_text(ins, 1, pairs[a].path);
        sqlite3_bind_blob(ins, 2, w->packed.s, (int)w->packed.len, SQLITE_STATIC);
        rc = ixw_step(w, ins, "inserting a file's units");
    }
    sqlite3_finalize(ins);
    free(ids);
    free(pairs);
    return rc;
}
