// index_update_units.c — an update in place (index_update.c), the parsed units' own rows: the
// files their facts name, and their tu_* rows replaced where the new facts differ.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/xalloc.h"
#include "index_db.h"
#include "index_update_internal.h"

void ixu_files_named(updater *u, const ix_result *r, tb_strmap *m) {
    char key[32];
#define NAME(path)                                                                   \
    do {                                                                             \
        int *id_ = (path) ? tb_strmap_get(&u->w.files, (path)) : NULL;              \
        if (id_) snprintf(key, sizeof key, "%d", *id_), tb_strmap_put(m, key, 1);    \
    } while (0)
    for (size_t i = 0; i < r->funcs.len; i++) NAME(TB_VEC_AT(&r->funcs, ix_func, i).file);
    for (size_t i = 0; i < r->calls.len; i++) NAME(TB_VEC_AT(&r->calls, ix_call, i).file);
    for (size_t i = 0; i < r->ftargets.len; i++) NAME(TB_VEC_AT(&r->ftargets, ix_ftarget, i).file);
    for (size_t i = 0; i < r->callbacks.len; i++) NAME(TB_VEC_AT(&r->callbacks, ix_callback, i).file);
    for (size_t i = 0; i < r->ranges.len; i++) NAME(TB_VEC_AT(&r->ranges, ix_range, i).file);
#undef NAME
}

// tu_deps by path, against the rows there (the previous facts read for the update do not hold
// the inputs): a changed hash is updated, an input gone deleted, a new one inserted.
int ixu_replace_deps(updater *u, long long tu_id, const ix_result *now) {
    writer *w = &u->w;
    tb_strmap was;  // path -> index in rows
    tb_strmap_init(&was);
    tb_vec rows;    // of ix_dep, the unit's rows there
    tb_vec_init(&rows, sizeof(ix_dep), "a unit's input files");
    tb_pool pool = {0};
    char *kept = NULL;
    sqlite3_stmt *sel = NULL, *upd = NULL, *del = NULL;
    int rc = -1;
    if (ixw_prep(w, &sel, "SELECT path, hash FROM tu_deps WHERE tu_id = ?") ||
        ixw_prep(w, &upd, "UPDATE tu_deps SET hash = ? WHERE path = ? AND tu_id = ?") ||
        ixw_prep(w, &del, "DELETE FROM tu_deps WHERE path = ? AND tu_id = ?"))
        goto out;
    sqlite3_bind_int64(sel, 1, tu_id);
    int step;
    while ((step = sqlite3_step(sel)) == SQLITE_ROW) {
        const char *path = (const char *)sqlite3_column_text(sel, 0), *hash = (const char *)sqlite3_column_text(sel, 1);
        ix_dep *d = tb_vec_push(&rows);
        d->path = tb_pool_dup(&pool, path ? path : "");
        d->hash = tb_pool_dup(&pool, hash ? hash : "-");
        tb_strmap_put(&was, d->path, (int)rows.len - 1);
    }
    if (step != SQLITE_DONE) {
        ixu_fail(u, "reading a unit's input files");
        goto out;
    }
    kept = tb_xcalloc(rows.len + 1, 1, "inputs kept");
    for (size_t i = 0; i < now->deps.len; i++) {
        const ix_dep *d = &TB_VEC_AT(&now->deps, ix_dep, i);
        int *j = tb_strmap_get(&was, d->path);
        if (!j || kept[*j]) {
            if (ixw_write_unit_dep(w, tu_id, d)) goto out;
            continue;
        }
        kept[*j] = 1;
        const char *n = d->hash ? d->hash : "-";
        if (!strcmp(TB_VEC_AT(&rows, ix_dep, *j).hash, n)) continue;
        ixw_bind_text(upd, 1, n);
        ixw_bind_text(upd, 2, d->path);
        sqlite3_bind_int64(upd, 3, tu_id);
        if (ixw_step(w, upd, "updating a unit's input file")) goto out;
    }
    for (size_t i = 0; i < rows.len; i++) {
        if (kept[i]) continue;
        ixw_bind_text(del, 1, TB_VEC_AT(&rows, ix_dep, i).path);
        sqlite3_bind_int64(del, 2, tu_id);
        if (ixw_step(w, del, "deleting a unit's input file")) goto out;
    }
    rc = 0;
out:
    sqlite3_finalize(sel);
    sqlite3_finalize(upd);
    sqlite3_finalize(del);
    free(kept);
    tb_vec_free(&rows);
    tb_pool_free(&pool);
    tb_strmap_free(&was);
    return rc;
}

// The unit's tu_* rows as the new facts give them. A table whose rows are the same, column by
// column and in order, is left as it is (an edit rarely changes what the headers give, the
// bulk of a unit's rows); any other is deleted and written again; tu_deps row by row.
int ixu_replace_unit_rows(updater *u, long long tu_id, const ix_result *old, const ix_result *now) {
    for (int t = 0; t < IX_TU_TABLES; t++) {
        if (t == IX_TU_DEPS) {
            if (ixu_replace_deps(u, tu_id, now)) return -1;
            continue;
        }
        if (ix_unit_rows_equal(old, now, (ix_unit_table)t)) continue;
        char sql[96];
        snprintf(sql, sizeof sql, "DELETE FROM %s WHERE tu_id = ?", ix_unit_table_names[t]);
        if (ixu_exec_id(u, sql, tu_id) || ixw_write_unit_table(&u->w, tu_id, now, (ix_unit_table)t)) return -1;
    }
    return 0;
}
