// index_update_units.c — an update in place (index_update.c), the parsed units' own rows: the
// files their facts name, and their tu_* rows replaced where the new facts differ.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/xalloc.h"
#include "index_db.h"
#include "index_unit_rows.h"
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

// A unit's record that does not unpack: the update does not apply, and the full merge, which
// reads the reused units' records again (index_reuse_facts.c), parses that unit instead. (The
// reason outlives the updater: a literal.)
static int malformed(updater *u, ix_unit_table t) {
    const char *why = t == IX_TU_FUNCTIONS   ? "a unit's tu_functions record is malformed: its unit is parsed again"
                      : t == IX_TU_CALLS     ? "a unit's tu_calls record is malformed: its unit is parsed again"
                      : t == IX_TU_CALLBACKS ? "a unit's tu_callbacks record is malformed: its unit is parsed again"
                      : t == IX_TU_SYMBOLS   ? "a unit's tu_symbols record is malformed: its unit is parsed again"
                                             : "a unit's packed record is malformed: its unit is parsed again";
    if (!u->why) u->why = why;
    return 1;
}

int ixu_scan_packed(updater *u, ix_unit_table t, const char *(*path_of)(void *ctx, long long id), void *ctx,
                    int (*fn)(void *arg, long long tu_id, const ix_result *facts), void *arg) {
    char sql[64];
    snprintf(sql, sizeof sql, "SELECT tu_id, rows FROM %s ORDER BY tu_id", ix_unit_table_names[t]);
    sqlite3_stmt *st = NULL;
    if (ixw_prep(&u->w, &st, sql)) return -1;
    int step = SQLITE_DONE, rc = 0, stop = 0;
    while (!rc && !stop && (step = sqlite3_step(st)) == SQLITE_ROW) {
        ix_result facts;
        ix_result_init(&facts);
        long long tu_id = sqlite3_column_int64(st, 0);
        if (ix_rows_unpack(sqlite3_column_blob(st, 1), (size_t)sqlite3_column_bytes(st, 1), t, &facts, path_of, ctx))
            rc = malformed(u, t);
        else
            stop = fn(arg, tu_id, &facts) != 0;
        ix_result_free(&facts);
    }
    if (!rc && !stop && step != SQLITE_DONE) {
        char what[48];
        snprintf(what, sizeof what, "reading %s", ix_unit_table_names[t]);
        rc = ixu_fail(u, what);
    }
    sqlite3_finalize(st);
    return rc;
}

// The unit into usr's chain unless it is there: the calls come unit by unit, so a unit already
// named by a call is the chain's head; a callback's unit may be anywhere in it.
static void add_namer(ixu_namers *n, const char *usr, long long tu_id, int whole_chain) {
    int *head = tb_strmap_get(&n->first, usr);
    for (int k = head ? *head : -1; k >= 0; k = whole_chain ? TB_VEC_AT(&n->links, ixu_namer, (size_t)k).next : -1)
        if (TB_VEC_AT(&n->links, ixu_namer, (size_t)k).tu_id == tu_id) return;
    ixu_namer *l = tb_vec_push(&n->links);
    l->tu_id = tu_id;
    l->next = head ? *head : -1;
    tb_strmap_put(&n->first, usr, (int)n->links.len - 1);
}

static int note_callees(void *arg, long long tu_id, const ix_result *f) {
    for (size_t i = 0; i < f->calls.len; i++) {
        const char *usr = TB_VEC_AT(&f->calls, ix_call, i).callee_usr;
        if (usr) add_namer(arg, usr, tu_id, 0);
    }
    for (size_t i = 0; i < f->callbacks.len; i++) {
        const char *usr = TB_VEC_AT(&f->callbacks, ix_callback, i).target_usr;
        if (usr) add_namer(arg, usr, tu_id, 1);
    }
    return 0;
}

int ixu_namers_read(updater *u, ixu_namers *n) {
    tb_strmap_init(&n->first);
    tb_vec_init(&n->links, sizeof(ixu_namer), "units naming a function");
    int rc = ixu_scan_packed(u, IX_TU_CALLS, NULL, NULL, note_callees, n);
    return rc ? rc : ixu_scan_packed(u, IX_TU_CALLBACKS, NULL, NULL, note_callees, n);
}

void ixu_namers_free(ixu_namers *n) {
    tb_strmap_free(&n->first);
    tb_vec_free(&n->links);
}

static const char *note_file(void *ctx, long long id) {
    char key[32];
    snprintf(key, sizeof key, "%lld", id);
    tb_strmap_put(ctx, key, 1);
    return NULL;
}

static int nothing_more(void *arg, long long tu_id, const ix_result *f) {
    (void)arg, (void)tu_id, (void)f;
    return 0;
}

int ixu_packed_files(updater *u, tb_strmap *ids) {
    static const ix_unit_table tables[] = {IX_TU_FUNCTIONS, IX_TU_CALLS, IX_TU_CALLBACKS, IX_TU_RANGE_SITES};
    int rc = 0;
    for (size_t t = 0; t < sizeof tables / sizeof *tables && !rc; t++)
        rc = ixu_scan_packed(u, tables[t], note_file, ids, nothing_more, NULL);
    return rc;
}

static const char *path_by_id(void *ctx, long long id) {
    const ixu_functions *fx = ctx;
    return id > 0 && (size_t)id < fx->npaths ? fx->paths[id] : NULL;
}

int ixu_functions_read(updater *u) {
    ixu_functions *fx = &u->fns;
    if (fx->read) return fx->rc;
    fx->read = 1;
    tb_vec_init(&fx->units, sizeof(ix_result), "units' functions");
    tb_vec_init(&fx->rows, sizeof(ixu_fn_row), "functions by USR");
    tb_strmap_init(&fx->first);
    for (size_t k = 0; k < u->w.files.cap; k++)
        if (u->w.files.keys[k] && (size_t)u->w.files.vals[k] >= fx->npaths) fx->npaths = (size_t)u->w.files.vals[k] + 1;
    fx->paths = tb_xcalloc(fx->npaths + 1, sizeof *fx->paths, "file paths by id");
    for (size_t k = 0; k < u->w.files.cap; k++)
        if (u->w.files.keys[k] && u->w.files.vals[k] > 0) fx->paths[u->w.files.vals[k]] = u->w.files.keys[k];
    // the units last to first, each one's rows last to first, each put before its USR's first:
    // every chain ends up in database order
    sqlite3_stmt *st = NULL;
    if (ixw_prep(&u->w, &st, "SELECT tu_id, rows FROM tu_functions ORDER BY tu_id DESC")) return fx->rc = -1;
    int step = SQLITE_DONE, rc = 0;
    while (!rc && (step = sqlite3_step(st)) == SQLITE_ROW) {
        long long tu_id = sqlite3_column_int64(st, 0);
        ix_result *r = tb_vec_push(&fx->units);
        ix_result_init(r);
        if (ix_rows_unpack(sqlite3_column_blob(st, 1), (size_t)sqlite3_column_bytes(st, 1), IX_TU_FUNCTIONS, r,
                           path_by_id, fx)) {
            rc = malformed(u, IX_TU_FUNCTIONS);
            break;
        }
        for (size_t j = r->funcs.len; j-- > 0;) {
            const ix_func *f = &TB_VEC_AT(&r->funcs, ix_func, j);
            int *head = tb_strmap_get(&fx->first, f->usr);
            ixu_fn_row *row = tb_vec_push(&fx->rows);
            *row = (ixu_fn_row){.tu_id = tu_id, .f = f, .next = head ? *head : -1};
            tb_strmap_put(&fx->first, f->usr, (int)fx->rows.len - 1);
        }
    }
    if (!rc && step != SQLITE_DONE) rc = ixu_fail(u, "reading tu_functions");
    sqlite3_finalize(st);
    return fx->rc = rc;
}

const ixu_fn_row *ixu_functions_of(const updater *u, const char *usr) {
    const int *k = u->fns.read ? tb_strmap_get(&u->fns.first, usr) : NULL;
    return k ? &TB_VEC_AT(&u->fns.rows, ixu_fn_row, (size_t)*k) : NULL;
}

const ixu_fn_row *ixu_functions_next(const updater *u, const ixu_fn_row *row) {
    return row->next >= 0 ? &TB_VEC_AT(&u->fns.rows, ixu_fn_row, (size_t)row->next) : NULL;
}

long long ixu_file_id(const updater *u, const char *path) {
    const int *id = path ? tb_strmap_get(&u->w.files, path) : NULL;
    return id ? *id : 0;
}

void ixu_functions_free(ixu_functions *fx) {
    if (!fx->read) return;
    for (size_t i = 0; i < fx->units.len; i++) ix_result_free(&TB_VEC_AT(&fx->units, ix_result, i));
    tb_vec_free(&fx->units);
    tb_vec_free(&fx->rows);
    tb_strmap_free(&fx->first);
    free(fx->paths);
    memset(fx, 0, sizeof *fx);
}
