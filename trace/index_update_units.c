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

// A unit's record that does not unpack: the update does not apply, and the full merge, which
// reads the reused units' records again (index_reuse_facts.c), parses that unit instead; a
// file's input_units record (t IX_TU_TABLES): the full merge writes that table anew. (The
// reason outlives the updater: a literal.)
static int malformed(updater *u, ix_unit_table t) {
    static const char *const why[IX_TU_TABLES + 1] = {
        [IX_TU_DEPS] = "a unit's tu_deps record is malformed: its unit is parsed again",
        [IX_TU_FUNCTIONS] = "a unit's tu_functions record is malformed: its unit is parsed again",
        [IX_TU_CALLS] = "a unit's tu_calls record is malformed: its unit is parsed again",
        [IX_TU_CALLBACKS] = "a unit's tu_callbacks record is malformed: its unit is parsed again",
        [IX_TU_RANGE_SITES] = "a unit's tu_range_sites record is malformed: its unit is parsed again",
        [IX_TU_SYMBOLS] = "a unit's tu_symbols record is malformed: its unit is parsed again",
        [IX_TU_TABLES] = "a file's input_units record is malformed: the full merge writes it anew"};
    if (!u->why) u->why = why[t] ? why[t] : "a unit's record is malformed: its unit is parsed again";
    return 1;
}

// input_units' record of path with tu_id added (add) or taken out: 0, 1 (the record does not
// unpack: see malformed), -1.
static int move_reader(updater *u, sqlite3_stmt *sel, const char *path, long long tu_id, int add) {
    writer *w = &u->w;
    tb_vec ids;
    tb_vec_init(&ids, sizeof(long long), "a file's units");
    sqlite3_bind_text(sel, 1, path, -1, SQLITE_STATIC);
    int step = sqlite3_step(sel), rc = 0;
    if (step == SQLITE_ROW &&
        ix_units_unpack(sqlite3_column_blob(sel, 0), (size_t)sqlite3_column_bytes(sel, 0), &ids))
        rc = malformed(u, IX_TU_TABLES);
    else if (step != SQLITE_ROW && step != SQLITE_DONE)
        rc = ixu_fail(u, "reading a file's units");
    sqlite3_reset(sel);
    size_t at = 0;  // where tu_id is, or goes (ascending)
    while (at < ids.len && TB_VEC_AT(&ids, long long, at) < tu_id) at++;
    int there = at < ids.len && TB_VEC_AT(&ids, long long, at) == tu_id;
    if (!rc && add != there) {
        if (add) {
            tb_vec_push(&ids);
            long long *v = ids.items;
            memmove(v + at + 1, v + at, (ids.len - 1 - at) * sizeof *v);
            v[at] = tu_id;
        } else {
            long long *v = ids.items;
            memmove(v + at, v + at + 1, (ids.len - at - 1) * sizeof *v);
            ids.len--;
        }
        sqlite3_stmt *st = NULL;
        if (!ids.len) {
            rc = ixw_prep(w, &st, "DELETE FROM input_units WHERE path = ?");
            if (!rc) ixw_bind_text(st, 1, path);
        } else {
            rc = ixw_prep(w, &st, "INSERT OR REPLACE INTO input_units(path, units) VALUES(?,?)");
            w->packed.len = 0;
            ix_units_pack(&w->packed, ids.items, ids.len);
            if (!rc) {
                ixw_bind_text(st, 1, path);
                sqlite3_bind_blob(st, 2, w->packed.s, (int)w->packed.len, SQLITE_STATIC);
            }
        }
        if (!rc) rc = ixw_step(w, st, "writing a file's units");
        sqlite3_finalize(st);
    }
    tb_vec_free(&ids);
    return rc;
}

// The unit's tu_deps record replaced by its new inputs, and input_units' records of the paths it
// starts or stops reading (the previous facts read for the update do not hold the inputs: the
// record there is read). 0, 1 (a record does not unpack: see malformed), -1.
int ixu_replace_deps(updater *u, long long tu_id, const ix_result *now) {
    writer *w = &u->w;
    ix_result old;
    ix_result_init(&old);
    tb_strmap was, is;  // the paths before and now
    tb_strmap_init(&was);
    tb_strmap_init(&is);
    sqlite3_stmt *sel = NULL;
    int rc = ixw_prep(w, &sel, "SELECT rows FROM tu_deps WHERE tu_id = ?");
    if (rc) goto out;
    sqlite3_bind_int64(sel, 1, tu_id);
    int step = sqlite3_step(sel);
    if (step == SQLITE_ROW && ix_rows_unpack(sqlite3_column_blob(sel, 0), (size_t)sqlite3_column_bytes(sel, 0),
                                             IX_TU_DEPS, &old, NULL, NULL))
        rc = malformed(u, IX_TU_DEPS);
    else if (step != SQLITE_ROW && step != SQLITE_DONE)
        rc = ixu_fail(u, "reading a unit's input files");
    sqlite3_finalize(sel);
    sel = NULL;
    if (rc || ix_unit_rows_equal(&old, now, IX_TU_DEPS)) goto out;
    if ((rc = ixu_exec_id(u, "DELETE FROM tu_deps WHERE tu_id = ?", tu_id)) ||
        (rc = ixw_write_unit_table(w, tu_id, now, IX_TU_DEPS)))
        goto out;
    for (size_t i = 0; i < old.deps.len; i++) tb_strmap_put(&was, TB_VEC_AT(&old.deps, ix_dep, i).path, 1);
    for (size_t i = 0; i < now->deps.len; i++) tb_strmap_put(&is, TB_VEC_AT(&now->deps, ix_dep, i).path, 1);
    if ((rc = ixw_prep(w, &sel, "SELECT units FROM input_units WHERE path = ?"))) goto out;
    for (size_t i = 0; i < old.deps.len && !rc; i++) {
        const char *path = TB_VEC_AT(&old.deps, ix_dep, i).path;
        if (!tb_strmap_get(&is, path)) rc = move_reader(u, sel, path, tu_id, 0);
    }
    for (size_t i = 0; i < now->deps.len && !rc; i++) {
        const char *path = TB_VEC_AT(&now->deps, ix_dep, i).path;
        if (!tb_strmap_get(&was, path)) rc = move_reader(u, sel, path, tu_id, 1);
    }
out:
    sqlite3_finalize(sel);
    tb_strmap_free(&was);
    tb_strmap_free(&is);
    ix_result_free(&old);
    return rc;
}

// The unit's tu_* rows as the new facts give them. A table whose rows are the same, column by
// column and in order, is left as it is (an edit rarely changes what the headers give, the
// bulk of a unit's rows); any other is deleted and written again; tu_deps row by row.
int ixu_replace_unit_rows(updater *u, long long tu_id, const ix_result *old, const ix_result *now) {
    for (int t = 0; t < IX_TU_TABLES; t++) {
        if (t == IX_TU_DEPS) {
            int rc = ixu_replace_deps(u, tu_id, now);
            if (rc) return rc;
            continue;
        }
        if (ix_unit_rows_equal(old, now, (ix_unit_table)t)) continue;
        char sql[96];
        snprintf(sql, sizeof sql, "DELETE FROM %s WHERE tu_id = ?", ix_unit_table_names[t]);
        if (ixu_exec_id(u, sql, tu_id) || ixw_write_unit_table(&u->w, tu_id, now, (ix_unit_table)t)) return -1;
    }
    return 0;
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
