// index_reuse_facts.c — the previous index's per-unit facts read back (index_reuse.h,
// ix_prev_results and ix_prev_unit_facts): the tu_* tables scanned once each, every row given
// to the reused unit it belongs to, as the unit's parse produced it.
#include <stdlib.h>
#include <string.h>

#include "core/xalloc.h"
#include "index_db.h"
#include "index_reuse.h"
#include "index_reuse_internal.h"
#include "index_unit_rows.h"

static unsigned col_u(sqlite3_stmt *st, int i) {
    return sqlite3_column_type(st, i) == SQLITE_NULL ? 0 : (unsigned)sqlite3_column_int(st, i);
}

// files.id -> path in the previous index (the facts' file_id columns).
static const char *path_of_id(void *ctx, long long id) {
    const ix_prev *p = ctx;
    return id > 0 && (size_t)id < p->paths.len ? TB_VEC_AT(&p->paths, const char *, id) : NULL;
}

static const char *file_path(ix_prev *p, sqlite3_stmt *st, int i) {
    return sqlite3_column_type(st, i) == SQLITE_NULL ? NULL : path_of_id(p, sqlite3_column_int64(st, i));
}

// One pass over each tu_* table of the previous index (rows in insertion order: each unit's
// in the order its parse produced them), each row given to the unit it belongs to when that
// unit is reused. slot[tu_id]: the index in results, or -1.
typedef struct reuse_scan {
    ix_prev *p;
    const ix_prev_unit **match;
    ix_result *results;
    long long *slot;
    long long nslots;
    char *bad;  // per result: a row that does not fit (the unit is parsed instead)
    long long only;  // > 0: read this unit's rows only (through the tu_id indexes)
} reuse_scan;

static ix_result *row_unit(reuse_scan *s, sqlite3_stmt *st, size_t *i) {
    long long id = sqlite3_column_int64(st, 0);
    if (id <= 0 || id >= s->nslots || s->slot[id] < 0) return NULL;
    *i = (size_t)s->slot[id];
    return s->bad[*i] ? NULL : &s->results[*i];
}

static int scan(reuse_scan *s, const char *sql, sqlite3_stmt **st) {
    *st = NULL;
    if (s->only <= 0) return sqlite3_prepare_v2(s->p->db, sql, -1, st, NULL) == SQLITE_OK ? 0 : -1;
    const char *order = strstr(sql, " ORDER BY");  // the tu_* scans; else the units' status
    char *q = order ? sqlite3_mprintf("%.*s WHERE tu_id = %lld%s", (int)(order - sql), sql, s->only, order)
                    : sqlite3_mprintf("%s WHERE u.tu_id = %lld", sql, s->only);
    if (!q) return -1;
    int rc = sqlite3_prepare_v2(s->p->db, q, -1, st, NULL) == SQLITE_OK ? 0 : -1;
    sqlite3_free(q);
    return rc;
}

// Whether the caller of each of the unit's body facts of table t (calls, callbacks, range
// sites) is one of its functions.
static int callers_ok(const ix_result *r, ix_unit_table t) {
    const tb_vec *v = t == IX_TU_CALLS ? &r->calls : t == IX_TU_CALLBACKS ? &r->callbacks : &r->ranges;
    for (size_t k = 0; k < v->len; k++) {
        int caller = t == IX_TU_CALLS       ? TB_VEC_AT(v, ix_call, k).caller
                     : t == IX_TU_CALLBACKS ? TB_VEC_AT(v, ix_callback, k).caller
                                            : TB_VEC_AT(v, ix_range, k).caller;
        if (caller < 0 || (size_t)caller >= r->funcs.len) return 0;
    }
    return 1;
}

// A packed table (index_unit_rows.h): each reused unit's record unpacked into its result (one
// record per unit: its vector for the table is empty before).
static int read_packed(reuse_scan *s, const char *sql, ix_unit_table t) {
    sqlite3_stmt *st;
    if (scan(s, sql, &st)) return -1;
    int step;
    size_t i;
    ix_result *r;
    while ((step = sqlite3_step(st)) == SQLITE_ROW) {
        if (!(r = row_unit(s, st, &i))) continue;
        if (ix_rows_unpack(sqlite3_column_blob(st, 1), (size_t)sqlite3_column_bytes(st, 1), t, r, path_of_id, s->p) ||
            (t != IX_TU_FUNCTIONS && t != IX_TU_SYMBOLS && !callers_ok(r, t)))
            s->bad[i] = 1;
    }
    sqlite3_finalize(st);
    return step == SQLITE_DONE ? 0 : -1;
}

static int read_results(ix_prev *p, const ix_prev_unit **match, ix_result *results, size_t n, long long only) {
    if (!only && ixr_load_deps(p)) {  // the facts of a single unit (an update in place) do not need them
        for (size_t i = 0; i < n; i++) match[i] = NULL;
        return -1;
    }
    reuse_scan s = {.p = p, .match = match, .results = results, .only = only};
    long long maxid = 0;
    for (size_t i = 0; i < n; i++)
        if (match[i] && match[i]->id > maxid) maxid = match[i]->id;
    s.nslots = maxid + 1;
    s.slot = tb_xmalloc((size_t)s.nslots * sizeof *s.slot, "reused unit slots");
    for (long long k = 0; k < s.nslots; k++) s.slot[k] = -1;
    s.bad = tb_xcalloc(n ? n : 1, 1, "reuse failures");
    char *have_status = tb_xcalloc(n ? n : 1, 1, "reused unit status");
    for (size_t i = 0; i < n; i++) {
        if (!match[i]) continue;
        s.slot[match[i]->id] = (long long)i;
        ix_result_init(&results[i]);
        results[i].reused = 1;
    }
    sqlite3_stmt *st = NULL;
    int rc = -1;
    size_t i;
    ix_result *r;
    // The units' status.
    if (scan(&s, "SELECT f.id, f.status, f.errors, f.diagnostics, u.reduced FROM files f JOIN tu_inputs u"
                 " ON u.tu_id = f.id", &st)) goto out;
    while (sqlite3_step(st) == SQLITE_ROW) {
        if (!(r = row_unit(&s, st, &i))) continue;
        const char *status = (const char *)sqlite3_column_text(st, 1);
        r->status = !status ? "failed" : !strcmp(status, "ok") ? "ok" : !strcmp(status, "partial") ? "partial" : "failed";
        r->errors = sqlite3_column_int(st, 2);
        const char *diags = (const char *)sqlite3_column_text(st, 3);
        free(r->diagnostics);
        r->diagnostics = diags ? tb_xstrdup(diags, "diagnostics") : NULL;
        r->reduced = sqlite3_column_int(st, 4);
        have_status[i] = 1;
    }
    sqlite3_finalize(st);
    for (size_t k = 0; k < n; k++) s.bad[k] |= match[k] && !have_status[k];

    // the functions first: the body facts' callers are checked against them
    if (read_packed(&s, "SELECT tu_id, rows FROM tu_functions ORDER BY rowid", IX_TU_FUNCTIONS)) goto out;
    if (read_packed(&s, "SELECT tu_id, rows FROM tu_calls ORDER BY rowid", IX_TU_CALLS)) goto out;
    if (scan(&s, "SELECT tu_id, record, field, function_usr, file_id, line FROM tu_field_targets ORDER BY rowid", &st))
        goto out;
    while (sqlite3_step(st) == SQLITE_ROW) {
        if (!(r = row_unit(&s, st, &i))) continue;
        ix_ftarget *t = tb_vec_push(&r->ftargets);
        t->record = ixr_col_text(&r->pool, st, 1);
        t->field = ixr_col_text(&r->pool, st, 2);
        t->fn_usr = ixr_col_text(&r->pool, st, 3);
        t->file = file_path(p, st, 4);
        t->line = col_u(st, 5);
    }
    sqlite3_finalize(st);
    if (read_packed(&s, "SELECT tu_id, rows FROM tu_callbacks ORDER BY rowid", IX_TU_CALLBACKS) ||
        read_packed(&s, "SELECT tu_id, rows FROM tu_range_sites ORDER BY rowid", IX_TU_RANGE_SITES) ||
        read_packed(&s, "SELECT tu_id, rows FROM tu_symbols ORDER BY rowid", IX_TU_SYMBOLS))
        goto out;
    st = NULL;
    rc = 0;
out:
    sqlite3_finalize(st);
    for (size_t k = 0; k < n; k++) {
        if (!match[k]) continue;
        if (rc == 0 && !s.bad[k] && !match[k]->deps_bad) {
            r = &results[k];
            for (size_t d = 0; d < match[k]->deps.len; d++) {
                const ix_dep *src = &TB_VEC_AT(&match[k]->deps, ix_dep, d);
                ix_dep *dst = tb_vec_push(&r->deps);
                dst->path = tb_pool_dup(&r->pool, src->path);
                dst->hash = tb_pool_dup(&r->pool, src->hash);
            }
            continue;
        }
        ix_result_free(&results[k]);  // parsed instead
        match[k] = NULL;
    }
    free(have_status);
    free(s.bad);
    free(s.slot);
    return rc;
}

int ix_prev_results(ix_prev *p, const ix_prev_unit **match, ix_result *results, size_t n) {
    return read_results(p, match, results, n, 0);
}

int ix_prev_unit_facts(ix_prev *p, const ix_prev_unit *u, ix_result *r) {
    const ix_prev_unit *match[1] = {u};
    return read_results(p, match, r, 1, u->id) == 0 && match[0] ? 0 : -1;
}
