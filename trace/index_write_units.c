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
#include "strmap.h"

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
    tb_buf command = {0};
    if (r->tu) ix_command_pack(&command, r->tu);
    if (r->tu) sqlite3_bind_blob(w->u_inputs, 5, command.s, (int)command.len, SQLITE_STATIC);
    else sqlite3_bind_null(w->u_inputs, 5);
    int rc = ixw_step(w, w->u_inputs, "inserting a unit's inputs");
    tb_buf_free(&command);
    return rc;
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
// is its source's files row. The files are grouped by a map, and only they are sorted: sorting
// every (file, unit) pair (31,739 over this project, their paths sharing long prefixes) took 39
// of this function's 49 million instructions at the run's serial end; grouped, it takes 34.
static int by_text(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

int ixw_write_input_units(writer *w, const ix_compdb *db, const ix_result *results) {
    tb_strmap at;  // path -> its index in paths
    tb_strmap_init(&at);
    size_t npairs = 0;
    for (size_t i = 0; i < db->ntus; i++) npairs += results[i].deps.len;
    const char **paths = tb_xcalloc(npairs + 1, sizeof *paths, "input files");
    size_t *start = tb_xcalloc(npairs + 2, sizeof *start, "input files' units");
    long long *ids = tb_xcalloc(npairs + 1, sizeof *ids, "input files' units");
    long long *unit = tb_xcalloc(db->ntus + 1, sizeof *unit, "units' files rows");
    size_t n = 0;
    for (int pass = 0; pass < 2; pass++) {  // count each file's units, then place them
        for (size_t i = 0; i < db->ntus; i++) {
            const int *id = pass ? NULL : tb_strmap_get(&w->files, db->tus[i].file);
            if (!pass) unit[i] = id ? *id : 0;
            for (size_t j = 0; unit[i] && j < results[i].deps.len; j++) {
                const char *path = TB_VEC_AT(&results[i].deps, ix_dep, j).path;
                int *k = tb_strmap_get(&at, path);
                if (!k) {
                    paths[n] = path;
                    k = tb_strmap_put(&at, path, (int)n++);
                }
                if (pass)
                    ids[start[*k + 1]++] = unit[i];
                else
                    start[*k + 2]++;
            }
        }
        if (!pass)
            for (size_t k = 0; k < n; k++) start[k + 2] += start[k + 1];
    }
    // start[k] .. start[k + 1]: file k's units; each ascending, once (a unit's file once)
    const char **sorted = tb_xcalloc(n + 1, sizeof *sorted, "input files");
    memcpy(sorted, paths, n * sizeof *paths);
    if (n) qsort(sorted, n, sizeof *sorted, by_text);
    sqlite3_stmt *ins = NULL;
    int rc = ixw_prep(w, &ins, "INSERT INTO input_units(path, units) VALUES(?,?)");
    for (size_t s = 0; s < n && !rc; s++) {
        size_t k = (size_t)*tb_strmap_get(&at, sorted[s]), m = 0;
        long long *v = ids + start[k];
        for (size_t a = 0; a < start[k + 1] - start[k]; a++) {  // insertion: the units come mostly ascending
            long long x = v[a];
            size_t b = m;
            while (b > 0 && v[b - 1] > x) b--;
            if (b > 0 && v[b - 1] == x) continue;
            memmove(v + b + 1, v + b, (m - b) * sizeof *v);
            v[b] = x;
            m++;
        }
        w->packed.len = 0;
        ix_units_pack(&w->packed, v, m);
        ixw_bind_text(ins, 1, sorted[s]);
        sqlite3_bind_blob(ins, 2, w->packed.s, (int)w->packed.len, SQLITE_STATIC);
        rc = ixw_step(w, ins, "inserting a file's units");
    }
    sqlite3_finalize(ins);
    free(sorted);
    free(unit);
    free(ids);
    free(start);
    free(paths);
    tb_strmap_free(&at);
    return rc;
}
