// index_write.c — the SQLite side of `tracebook index`: merges the translation units'
// facts (in compilation-database order, so the same sources give the same index), derives
// the collective sites, adds the targets and meta rows, and publishes the file atomically
// (written to <out>.tmp.<pid>, fsync'd, renamed over <out>: index_file.c).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/xalloc.h"
#include "index_db.h"
#include "index_file.h"
#include "index_reuse.h"
#include "index_write_internal.h"
#include "pool.h"
#include "strmap.h"

int ixw_sql_fail(writer *w, const char *what) {
    return tb_fail(w->err, "%s: %s: %s", w->path, what, sqlite3_errmsg(w->db));
}

int ixw_prep(writer *w, sqlite3_stmt **st, const char *sql) {
    return sqlite3_prepare_v2(w->db, sql, -1, st, NULL) == SQLITE_OK ? 0 : ixw_sql_fail(w, "preparing a statement");
}

void ixw_bind_text(sqlite3_stmt *st, int i, const char *s) {
    if (s)
        sqlite3_bind_text(st, i, s, -1, SQLITE_STATIC);
    else
        sqlite3_bind_null(st, i);
}

int ixw_step(writer *w, sqlite3_stmt *st, const char *what) {
    int rc = sqlite3_step(st);
    sqlite3_reset(st);
    sqlite3_clear_bindings(st);
    return rc == SQLITE_DONE ? 0 : ixw_sql_fail(w, what);
}

long long ixw_file_id(writer *w, const char *path, int is_tu, const char *status, int errors, const char *diags) {
    if (!path) return 0;
    int *id = tb_strmap_get(&w->files, path);
    if (id) return *id;
    ixw_bind_text(w->ins_file, 1, path);
    sqlite3_bind_int(w->ins_file, 2, is_tu);
    ixw_bind_text(w->ins_file, 3, status);
    sqlite3_bind_int(w->ins_file, 4, errors);
    ixw_bind_text(w->ins_file, 5, diags);
    if (ixw_step(w, w->ins_file, "inserting a file")) return -1;
    long long rid = sqlite3_last_insert_rowid(w->db);
    tb_strmap_put(&w->files, path, (int)rid);
    return rid;
}

void ixw_bind_file(sqlite3_stmt *st, int i, long long id) {
    if (id > 0)
        sqlite3_bind_int64(st, i, id);
    else
        sqlite3_bind_null(st, i);
}

void ixw_bind_pos(sqlite3_stmt *st, int i, unsigned v) {
    if (v)
        sqlite3_bind_int(st, i, (int)v);
    else
        sqlite3_bind_null(st, i);
}

int ixw_prepare(writer *w) {
    return (ixw_prep(w, &w->ins_file, "INSERT INTO files(path, is_tu, status, errors, diagnostics) VALUES(?,?,?,?,?)") ||
        ixw_prep(w, &w->ins_func,
             "INSERT INTO functions(usr, name, file_id, line, col, is_static, is_definition, end_line, end_col,"
             " unit_id) VALUES(?,?,?,?,?,?,?,?,?,?)") ||
        ixw_prep(w, &w->upd_func, "UPDATE functions SET file_id = ?, line = ?, col = ?, end_line = ?, end_col = ?, is_definition = 1,"
                                   " unit_id = ? WHERE id = ?") ||
        ixw_prep(w, &w->ins_ferr, "INSERT INTO file_errors(unit_id, file_id, errors, first) VALUES(?,?,?,?)"
                              " ON CONFLICT(unit_id, file_id) DO UPDATE SET errors = errors + 1") ||
        ixw_prep(w, &w->ins_call,
             "INSERT INTO calls(caller_id, callee_usr, callee_name, field, file_id, line, col, in_macro, resolution,"
             " candidates) VALUES(?,?,?,?,?,?,?,?,?,?)") ||
        ixw_prep(w, &w->ins_ft,
             "INSERT OR IGNORE INTO field_targets(record, field, function_usr, file_id, line) VALUES(?,?,?,?,?)") ||
        ixw_prep(w, &w->ins_range,
             "INSERT INTO range_sites(function_id, kind, name, file_id, line, col) VALUES(?,?,?,?,?,?)") ||
        ixw_prep(w, &w->ins_coll,
             "INSERT INTO collective_sites(function_id, callee_name, file_id, line, col, call_id) VALUES(?,?,?,?,?,?)") ||
        ixw_prep(w, &w->ins_cb,
             "INSERT INTO callbacks(function_id, target_usr, passed_to, file_id, line, col) VALUES(?,?,?,?,?,?)") ||
        ixw_prep(w, &w->ins_target, "INSERT OR IGNORE INTO targets(target, type, file_id) VALUES(?,?,?)") ||
        ixw_prep(w, &w->ins_meta, "INSERT OR REPLACE INTO meta(key, value) VALUES(?,?)") ||
        ixw_prep(w, &w->u_inputs,
                 "INSERT INTO tu_inputs(tu_id, inputs, reduced, deps_kept, command) VALUES(?,?,?,?,?)") ||
        ixw_prep(w, &w->u_dep, "INSERT INTO tu_deps(tu_id, rows) VALUES(?,?)") ||
        ixw_prep(w, &w->u_func, "INSERT INTO tu_functions(tu_id, rows) VALUES(?,?)") ||
        ixw_prep(w, &w->u_call, "INSERT INTO tu_calls(tu_id, rows) VALUES(?,?)") ||
        ixw_prep(w, &w->u_ft,
             "INSERT INTO tu_field_targets(tu_id, record, field, function_usr, file_id, line) VALUES(?,?,?,?,?,?)") ||
        ixw_prep(w, &w->u_cb, "INSERT INTO tu_callbacks(tu_id, rows) VALUES(?,?)") ||
        ixw_prep(w, &w->u_range, "INSERT INTO tu_range_sites(tu_id, rows) VALUES(?,?)") ||
        ixw_prep(w, &w->u_sym, "INSERT INTO tu_symbols(tu_id, rows) VALUES(?,?)")) ? -1 : 0;
}

void ixw_finalize(writer *w) {
    sqlite3_stmt *sts[] = {w->ins_file, w->ins_func, w->upd_func, w->ins_call, w->ins_ft, w->ins_ferr,
                           w->ins_range, w->ins_coll, w->ins_target, w->ins_meta, w->ins_cb,
                           w->u_inputs, w->u_dep, w->u_func, w->u_call, w->u_ft, w->u_cb, w->u_range, w->u_sym};
    for (size_t i = 0; i < sizeof sts / sizeof *sts; i++) sqlite3_finalize(sts[i]);
    tb_buf_free(&w->packed);
}

// Inserts the function or upgrades its row to the definition; returns its finfo index.
static int put_function(writer *w, const ix_func *f, const char *usr) {
    long long fid = ixw_file_id(w, f->file, 0, NULL, 0, NULL);
    if (fid < 0) return -1;
    int *slot = tb_strmap_get(&w->funcs, usr);
    if (slot) {
        struct finfo *fi = &TB_VEC_AT(&w->finfo, struct finfo, *slot);
        if (f->is_def && !fi->def_file) {
            sqlite3_bind_int64(w->upd_func, 1, fid);
            sqlite3_bind_int(w->upd_func, 2, (int)f->line);
            sqlite3_bind_int(w->upd_func, 3, (int)f->col);
            ixw_bind_pos(w->upd_func, 4, f->end_line);
            ixw_bind_pos(w->upd_func, 5, f->end_col);
            sqlite3_bind_int64(w->upd_func, 6, w->unit);
            sqlite3_bind_int64(w->upd_func, 7, fi->id);
            if (ixw_step(w, w->upd_func, "updating a function")) return -1;
            fi->def_file = fid;
        }
        return *slot;
    }
    ixw_bind_text(w->ins_func, 1, usr);
    ixw_bind_text(w->ins_func, 2, f->name);
    ixw_bind_file(w->ins_func, 3, fid);
    sqlite3_bind_int(w->ins_func, 4, (int)f->line);
    sqlite3_bind_int(w->ins_func, 5, (int)f->col);
    sqlite3_bind_int(w->ins_func, 6, f->is_static);
    sqlite3_bind_int(w->ins_func, 7, f->is_def);
    ixw_bind_pos(w->ins_func, 8, f->end_line);
    ixw_bind_pos(w->ins_func, 9, f->end_col);
    sqlite3_bind_int64(w->ins_func, 10, w->unit);
    if (ixw_step(w, w->ins_func, "inserting a function")) return -1;
    *(struct finfo *)tb_vec_push(&w->finfo) =
        (struct finfo){sqlite3_last_insert_rowid(w->db), f->is_def ? fid : 0, 0, f->is_static, f->name};
    int k = (int)w->finfo.len - 1;
    tb_strmap_put(&w->funcs, usr, k);
    return k;
}

// A body's rows: a call (returns its calls.id, -1 on failure), a range site, a callback, under
// the function row caller_id; callee / target: the USR as merged (a unit's renamed copy).
long long ixw_insert_call(writer *w, long long caller_id, const ix_call *c, const char *callee) {
    long long fid = ixw_file_id(w, c->file, 0, NULL, 0, NULL);
    if (fid < 0) return -1;
    sqlite3_bind_int64(w->ins_call, 1, caller_id);
    ixw_bind_text(w->ins_call, 2, callee);
    ixw_bind_text(w->ins_call, 3, c->callee_name);
    ixw_bind_text(w->ins_call, 4, c->field);
    ixw_bind_file(w->ins_call, 5, fid);
    sqlite3_bind_int(w->ins_call, 6, (int)c->line);
    sqlite3_bind_int(w->ins_call, 7, (int)c->col);
    ixw_bind_text(w->ins_call, 8, c->in_macro);
    ixw_bind_text(w->ins_call, 9, c->resolution);
    ixw_bind_text(w->ins_call, 10, c->candidates);
    return ixw_step(w, w->ins_call, "inserting a call") ? -1 : sqlite3_last_insert_rowid(w->db);
}

int ixw_insert_range(writer *w, long long caller_id, const ix_range *g) {
    long long fid = ixw_file_id(w, g->file, 0, NULL, 0, NULL);
    if (fid < 0) return -1;
    sqlite3_bind_int64(w->ins_range, 1, caller_id);
    ixw_bind_text(w->ins_range, 2, g->kind);
    ixw_bind_text(w->ins_range, 3, g->name);
    ixw_bind_file(w->ins_range, 4, fid);
    sqlite3_bind_int(w->ins_range, 5, (int)g->line);
    sqlite3_bind_int(w->ins_range, 6, (int)g->col);
    return ixw_step(w, w->ins_range, "inserting a range site");
}

int ixw_insert_callback(writer *w, long long caller_id, const ix_callback *b, const char *target) {
    long long fid = ixw_file_id(w, b->file, 0, NULL, 0, NULL);
    if (fid < 0) return -1;
    sqlite3_bind_int64(w->ins_cb, 1, caller_id);
    ixw_bind_text(w->ins_cb, 2, target);
    ixw_bind_text(w->ins_cb, 3, b->passed_to);
    ixw_bind_file(w->ins_cb, 4, fid);
    sqlite3_bind_int(w->ins_cb, 5, (int)b->line);
    sqlite3_bind_int(w->ins_cb, 6, (int)b->col);
    return ixw_step(w, w->ins_cb, "inserting a callback");
}

// One translation unit's facts. A function whose body an earlier unit already contributed
// (an inline function of a header) contributes no calls or range sites again.
static int write_result(writer *w, const ix_result *r) {
    size_t nf = r->funcs.len;
    int *fidx = tb_xcalloc(nf ? nf : 1, sizeof *fidx, "file indexes");
    char *emit = tb_xcalloc(nf ? nf : 1, 1, "file flags");
    tb_strmap renamed;  // plain USR -> file-qualified USR, for this unit's duplicate definitions
    tb_strmap_init(&renamed);
    const char **renamed_to = tb_xcalloc(nf ? nf : 1, sizeof *renamed_to, "file renames");
    int rc = -1;
    for (size_t j = 0; j < nf; j++) {
        const ix_func *f = &TB_VEC_AT(&r->funcs, ix_func, j);
        const char *usr = f->usr;
        int *slot = tb_strmap_get(&w->funcs, usr);
        if (f->is_def && slot && TB_VEC_AT(&w->finfo, struct finfo, *slot).def_file) {
            long long fid = ixw_file_id(w, f->file, 0, NULL, 0, NULL);
            if (fid != TB_VEC_AT(&w->finfo, struct finfo, *slot).def_file) {
                // An external function defined again in another file (another binary's copy):
                // its own row, with a file-qualified USR; this unit's calls go to it.
                usr = tb_pool_printf(&w->pool, "c:%s@%s", f->file, f->usr + 2 + (f->usr[2] == '@'));
                renamed_to[j] = usr;
                tb_strmap_put(&renamed, f->usr, (int)j);
            }
        }
        int k = put_function(w, f, usr);
        if (k < 0) goto out;
        fidx[j] = k;
        emit[j] = f->is_def && !TB_VEC_AT(&w->finfo, struct finfo, k).body_written;
    }
    for (size_t j = 0; j < nf; j++)
        if (emit[j]) TB_VEC_AT(&w->finfo, struct finfo, fidx[j]).body_written = 1;

    for (size_t i = 0; i < r->calls.len; i++) {
        const ix_call *c = &TB_VEC_AT(&r->calls, ix_call, i);
        if (!emit[c->caller]) continue;
        const char *callee = c->callee_usr;
        int *ren = callee ? tb_strmap_get(&renamed, callee) : NULL;
        if (ren) callee = renamed_to[*ren];
        if (ixw_insert_call(w, TB_VEC_AT(&w->finfo, struct finfo, fidx[c->caller]).id, c, callee) < 0) goto out;
    }
    for (size_t i = 0; i < r->ranges.len; i++) {
        const ix_range *g = &TB_VEC_AT(&r->ranges, ix_range, i);
        if (!emit[g->caller]) continue;
        if (ixw_insert_range(w, TB_VEC_AT(&w->finfo, struct finfo, fidx[g->caller]).id, g)) goto out;
    }
    for (size_t i = 0; i < r->callbacks.len; i++) {
        const ix_callback *b = &TB_VEC_AT(&r->callbacks, ix_callback, i);
        if (!emit[b->caller]) continue;
        const char *target = b->target_usr;
        int *ren = tb_strmap_get(&renamed, target);
        if (ren) target = renamed_to[*ren];
        if (ixw_insert_callback(w, TB_VEC_AT(&w->finfo, struct finfo, fidx[b->caller]).id, b, target)) goto out;
    }
    for (size_t i = 0; i < r->ftargets.len; i++) {
        const ix_ftarget *t = &TB_VEC_AT(&r->ftargets, ix_ftarget, i);
        const char *fn = t->fn_usr;
        int *ren = tb_strmap_get(&renamed, fn);
        if (ren) fn = renamed_to[*ren];
        ixw_bind_text(w->ins_ft, 1, t->record);
        ixw_bind_text(w->ins_ft, 2, t->field);
        ixw_bind_text(w->ins_ft, 3, fn);
        ixw_bind_file(w->ins_ft, 4, ixw_file_id(w, t->file, 0, NULL, 0, NULL));
        sqlite3_bind_int(w->ins_ft, 5, (int)t->line);
        if (ixw_step(w, w->ins_ft, "inserting a field target")) goto out;
    }
    rc = 0;
out:
    free(fidx);
    free(emit);
    free(renamed_to);
    tb_strmap_free(&renamed);
    return rc;
}

// file_errors: the unit's error diagnostics ("file:line:col: message" lines, or "unit: message"
// without a location) counted by the file they are in, each file's first one kept.
int ixw_write_file_errors(writer *w, const ix_result *r) {
    for (const char *s = r->diagnostics; s && *s;) {
        const char *e = strchr(s, '\n');
        size_t n = e ? (size_t)(e - s) : strlen(s);
        // the path ends at the first ":LINE:COL: "; a note's line ("unit: note: ...") is not an error
        const char *path_end = NULL;
        for (const char *p = s; p < s + n && !path_end; p++) {
            if (*p != ':' || p[1] < '0' || p[1] > '9') continue;
            const char *q = p + 1;
            while (*q >= '0' && *q <= '9') q++;
            if (*q != ':' || q[1] < '0' || q[1] > '9') continue;
            q++;
            while (*q >= '0' && *q <= '9') q++;
            if (*q == ':') path_end = p;
        }
        int is_note = !path_end && (strstr(s, ": note: ") && (size_t)(strstr(s, ": note: ") - s) < n);
        if (!is_note) {
            char *path = path_end ? tb_xstrndup(s, (size_t)(path_end - s), "diagnostic path") : NULL;
            long long fid = path ? ixw_file_id(w, path, 0, NULL, 0, NULL) : w->unit;
            free(path);
            char *first = tb_xstrndup(s, n, "diagnostic");
            if (fid < 0) {
                free(first);
                return -1;
            }
            sqlite3_bind_int64(w->ins_ferr, 1, w->unit);
            sqlite3_bind_int64(w->ins_ferr, 2, fid);
            sqlite3_bind_int(w->ins_ferr, 3, 1);
            sqlite3_bind_text(w->ins_ferr, 4, first, -1, SQLITE_TRANSIENT);
            int rc = ixw_step(w, w->ins_ferr, "inserting a file's errors");
            free(first);
            if (rc) return -1;
        }
        s += n + (e ? 1 : 0);
    }
    return 0;
}

// In place (ix_write_index): a reused unit's tu_* rows stay as they are; its files are
// numbered in the order write_unit_facts would number them, so that every file gets the id a
// rewrite would give it.
static int touch_unit_files(writer *w, const ix_result *r) {
    long long bad = 0;
    for (size_t i = 0; i < r->funcs.len; i++) bad |= ixw_file_id(w, TB_VEC_AT(&r->funcs, ix_func, i).file, 0, NULL, 0, NULL);
    for (size_t i = 0; i < r->calls.len; i++) bad |= ixw_file_id(w, TB_VEC_AT(&r->calls, ix_call, i).file, 0, NULL, 0, NULL);
    for (size_t i = 0; i < r->ftargets.len; i++)
        bad |= ixw_file_id(w, TB_VEC_AT(&r->ftargets, ix_ftarget, i).file, 0, NULL, 0, NULL);
    for (size_t i = 0; i < r->callbacks.len; i++)
        bad |= ixw_file_id(w, TB_VEC_AT(&r->callbacks, ix_callback, i).file, 0, NULL, 0, NULL);
    for (size_t i = 0; i < r->ranges.len; i++) bad |= ixw_file_id(w, TB_VEC_AT(&r->ranges, ix_range, i).file, 0, NULL, 0, NULL);
    return bad < 0 ? -1 : 0;
}

static int ixw_put_meta(writer *w, const char *key, const char *value) {
    ixw_bind_text(w->ins_meta, 1, key);
    ixw_bind_text(w->ins_meta, 2, value);
    return ixw_step(w, w->ins_meta, "inserting meta");
}

long ixw_count(writer *w, const char *sql) {
    sqlite3_stmt *st = NULL;
    long n = -1;
    if (sqlite3_prepare_v2(w->db, sql, -1, &st, NULL) == SQLITE_OK && sqlite3_step(st) == SQLITE_ROW)
        n = (long)sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    return n;
}

int ixw_count_big(writer *w, long *calls, long *functions, long *definitions) {
    sqlite3_stmt *st = NULL;
    int rc = -1;
    if (sqlite3_prepare_v2(w->db, "SELECT (SELECT COUNT(*) FROM calls), COUNT(*), TOTAL(is_definition = 1) FROM functions",
                           -1, &st, NULL) == SQLITE_OK &&
        sqlite3_step(st) == SQLITE_ROW) {
        *calls = (long)sqlite3_column_int64(st, 0);
        *functions = (long)sqlite3_column_int64(st, 1);
        *definitions = (long)sqlite3_column_int64(st, 2);
        rc = 0;
    }
    sqlite3_finalize(st);
    return rc;
}

// The targets (distinct), their rows, the functions with a libraries row: -1 each that cannot
// be counted.
static void count_targets_libraries(writer *w, long *targets, long *target_rows, long *library_found) {
    *targets = ixw_count(w, "SELECT COUNT(DISTINCT target) FROM targets");
    *target_rows = ixw_count(w, "SELECT COUNT(*) FROM targets");
    *library_found = ixw_count(w, "SELECT COUNT(DISTINCT function_id) FROM libraries");
}

int ixw_count_before(writer *w) {
    if (ixw_count_big(w, &w->counted.calls, &w->counted.functions, &w->counted.definitions)) return -1;
    count_targets_libraries(w, &w->counted.targets, &w->counted.target_rows, &w->counted.library_found);
    return w->counted.targets < 0 || w->counted.target_rows < 0 || w->counted.library_found < 0 ? -1 : 0;
}

void ixw_count_summary(writer *w, ix_summary *sum) {
    sum->files = ixw_count(w, "SELECT COUNT(*) FROM files");
    sqlite3_stmt *st = NULL;
    sum->calls = sum->functions = sum->definitions = sum->library_found = -1;
    if (w->counted.before) {  // an update in place: the counts before it and their change (index_update.c)
        if (sqlite3_prepare_v2(w->db, "SELECT calls, functions, definitions, library_found FROM temp.count_delta", -1,
                               &st, NULL) == SQLITE_OK &&
            sqlite3_step(st) == SQLITE_ROW) {
            sum->calls = w->counted.calls + (long)sqlite3_column_int64(st, 0);
            sum->functions = w->counted.functions + (long)sqlite3_column_int64(st, 1);
            sum->definitions = w->counted.definitions + (long)sqlite3_column_int64(st, 2);
            sum->library_found = w->counted.library_found + (long)sqlite3_column_int64(st, 3);
        }
        sum->targets = w->counted.targets;
        sum->target_rows = w->counted.target_rows;
    } else {
        ixw_count_big(w, &sum->calls, &sum->functions, &sum->definitions);
        count_targets_libraries(w, &sum->targets, &sum->target_rows, &sum->library_found);
    }
    sqlite3_finalize(st);
    sum->library_functions = sum->functions < 0 ? -1 : sum->functions - sum->definitions;
    sum->callbacks = ixw_count(w, "SELECT COUNT(*) FROM callbacks");
    sum->field_targets = ixw_count(w, "SELECT COUNT(*) FROM field_targets");
    sum->range_sites = ixw_count(w, "SELECT COUNT(*) FROM range_sites");
    sum->collective_sites = ixw_count(w, "SELECT COUNT(*) FROM collective_sites");
}

const char *ixw_collectives_digest(tb_pool *p, const ix_options *opt) {
    EVP_MD_CTX *ctx = ix_digest_new();
    for (size_t i = 0; i < opt->ncollectives; i++) ix_digest_add(ctx, opt->collectives[i]);
    return ix_digest_hex(p, ctx);
}

int ixw_write_meta(writer *w, const ix_meta *meta, const ix_options *opt, long tus, long errors,
                   long tus_with_errors) {
    char now[64], num[32], num2[32], num3[32];
    time_t t = time(NULL);
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(now, sizeof now, "%Y-%m-%dT%H:%M:%SZ", &tm);
    snprintf(num, sizeof num, "%ld", tus);
    snprintf(num2, sizeof num2, "%ld", errors);
    snprintf(num3, sizeof num3, "%ld", tus_with_errors);
    return ixw_put_meta(w, "schema_version", TB_INDEX_SCHEMA_VERSION) || ixw_put_meta(w, "source_dir", meta->source_dir) ||
                   ixw_put_meta(w, "build_dir", meta->build_dir) || ixw_put_meta(w, "compdb", meta->compdb) ||
                   ixw_put_meta(w, "created", now) || ixw_put_meta(w, "tu_count", num) ||
                   ixw_put_meta(w, "error_count", num2) || ixw_put_meta(w, "tus_with_errors", num3) ||
                   ixw_put_meta(w, "targets_source", meta->targets_source) ||
                   ixw_put_meta(w, "indexer", meta->indexer_key) ||
                   ixw_put_meta(w, "indexer_exe_stat", meta->indexer_exe_stat) ||
                   ixw_put_meta(w, "targets_digest", meta->targets_digest) ||
                   ixw_put_meta(w, "targets_signature", meta->targets_signature) ||
                   ixw_put_meta(w, "link_units_capped", meta->link_units_capped ? meta->link_units_capped : "0") ||
                   ixw_put_meta(w, "collectives_digest", ixw_collectives_digest(&w->pool, opt))
               ? -1
               : 0;
}

void ix_phase_mark(const ix_options *opt, struct timespec *last, const char *what) {
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    if (opt->verbose)
        fprintf(stderr, "tracebook index: phase %s: %.3f s\n", what,
                (double)(now.tv_sec - last->tv_sec) + 1e-9 * (double)(now.tv_nsec - last->tv_nsec));
    *last = now;
}

void ix_phase_units(const ix_options *opt, const ix_result *results, const size_t *todo, size_t ntodo,
                    double writer_busy) {
    if (!opt->verbose) return;
    double all = 0, parse = 0, parse_cpu = 0, walk = 0, inclusions = 0, dispose = 0;
    for (size_t k = 0; k < ntodo; k++) {
        const ix_result *r = &results[todo[k]];
        all += r->seconds, parse += r->parse_seconds, parse_cpu += r->parse_cpu;
        walk += r->walk_cpu, inclusions += r->inclusions_cpu, dispose += r->dispose_cpu;
    }
    fprintf(stderr,
            "tracebook index: the units' time: %.3f s, of which libclang's parses %.3f s, the rest %.3f s (CPU: "
            "parses %.3f s, AST walks %.3f s, inclusions %.3f s, disposal %.3f s)",
            all, parse, all - parse, parse_cpu, walk, inclusions, dispose);
    if (writer_busy >= 0) fprintf(stderr, "; the writer thread busy %.3f s", writer_busy);
    fprintf(stderr, "\n");
}

// In place: the copy of the previous index loses everything but the tu_* rows of the reused
// units (their previous files.id: results[i].reused units, prev_id[i]).
static int clear_for_update(writer *w, const ix_compdb *db, const ix_result *results, const long long *prev_id) {
    char *msg = NULL;
    if (sqlite3_exec(w->db,
                     "CREATE TEMP TABLE kept(id INTEGER PRIMARY KEY);"
                     " DROP INDEX IF EXISTS calls_caller; DROP INDEX IF EXISTS callbacks_function;"
                     " DROP INDEX IF EXISTS range_sites_function; DROP INDEX IF EXISTS collective_sites_function;"
                     " DELETE FROM meta; DELETE FROM files; DELETE FROM functions; DELETE FROM file_errors;"
                     " DELETE FROM calls; DELETE FROM field_targets; DELETE FROM range_sites; DELETE FROM callbacks;"
                     " DELETE FROM collective_sites; DELETE FROM targets; DELETE FROM libraries;"
                     " DELETE FROM input_units;",
                     NULL, NULL, &msg) != SQLITE_OK) {
        int rc = tb_fail(w->err, "%s: clearing the previous index's copy: %s", w->path, msg ? msg : sqlite3_errmsg(w->db));
        sqlite3_free(msg);
        return rc;
    }
    sqlite3_stmt *keep = NULL;
    if (ixw_prep(w, &keep, "INSERT OR IGNORE INTO kept(id) VALUES(?)")) return -1;
    for (size_t i = 0; i < db->ntus; i++) {
        if (!results[i].reused) continue;
        sqlite3_bind_int64(keep, 1, prev_id[i]);
        if (ixw_step(w, keep, "keeping a unit")) {
            sqlite3_finalize(keep);
            return -1;
        }
    }
    sqlite3_finalize(keep);
    static const char *const tables[] = {"tu_inputs", "tu_deps", "tu_functions", "tu_calls",
                                         "tu_field_targets", "tu_callbacks", "tu_range_sites", "tu_symbols"};
    for (size_t t = 0; t < sizeof tables / sizeof *tables; t++) {
        char sql[160];
        snprintf(sql, sizeof sql, "DELETE FROM %s WHERE tu_id NOT IN (SELECT id FROM kept)", tables[t]);
        if (sqlite3_exec(w->db, sql, NULL, NULL, &msg) != SQLITE_OK) {
            int rc = tb_fail(w->err, "%s: clearing %s: %s", w->path, tables[t], msg ? msg : sqlite3_errmsg(w->db));
            sqlite3_free(msg);
            return rc;
        }
    }
    return 0;
}

// In place: every file has the id it had in the previous index (files new since then come
// after them), so the kept tu_* rows still name the right files. 1 when so.
static int same_file_ids(const writer *w, const ix_inplace *in) {
    for (size_t k = 0; k < w->files.cap; k++) {
        if (!w->files.keys[k]) continue;
        size_t id = (size_t)w->files.vals[k];
        if (id < in->nprev_paths && (!in->prev_paths[id] || strcmp(in->prev_paths[id], w->files.keys[k]))) return 0;
    }
    return 1;
}

// The file's schema (or the previous index's copy cleared) and the units' files rows, ids in
// database order; each unit's status is set when its facts are written (write_unit).
static int write_begin(writer *w, const ix_compdb *db, const ix_result *results, const ix_inplace *in) {
    char *msg = NULL;
    // A new file that only this process sees until it is renamed over --output: no journal, no
    // syncs but the one before the rename, one transaction, the secondary indexes built once
    // after most of the bulk inserts (ix_write_indexes, or the end). A small page cache
    // (SQLite's default, 2 MB): the pages spill to the file as the units are written, while the
    // others parse, where a cache holding the whole file (22 MB for this project) wrote it all
    // at the commit, after the last parse (0.06-0.07 s of the run's serial end, against
    // 0.01 s). 16 KiB pages (a new file; a copy
    // keeps its own): a quarter of the writes and B-tree pages of 4 KiB, the end's indexes
    // built 10-15 ms sooner, the writer thread ~50 ms less busy over this project, and a
    // one-file update in place no slower (its journal copies whole pages: 32 KiB ones were
    // 2-3 ms slower there).
    if ((!in && sqlite3_exec(w->db, "PRAGMA page_size=16384", NULL, NULL, &msg) != SQLITE_OK) ||
        sqlite3_exec(w->db,
                     "PRAGMA journal_mode=OFF; PRAGMA synchronous=OFF; PRAGMA locking_mode=EXCLUSIVE;"
                     " PRAGMA temp_store=MEMORY; PRAGMA cache_size=-2048; BEGIN;",
                     NULL, NULL, &msg) != SQLITE_OK ||
        (!in && sqlite3_exec(w->db, TB_INDEX_TABLES TB_INDEX_UNIT_ROW_INDEXES, NULL, NULL, &msg) != SQLITE_OK)) {
        int rc = tb_fail(w->err, "%s: creating the schema: %s", w->path, msg ? msg : sqlite3_errmsg(w->db));
        sqlite3_free(msg);
        return rc;
    }
    if (in && clear_for_update(w, db, results, in->prev_id)) return -1;
    if (ixw_prepare(w) ||
        ixw_prep(w, &w->upd_unit, "UPDATE files SET status = ?, errors = ?, diagnostics = ? WHERE id = ?"))
        return -1;
    for (size_t i = 0; i < db->ntus; i++)
        if (ixw_file_id(w, db->tus[i].file, 1, NULL, 0, NULL) < 0) return -1;
    return 0;
}

// Unit i's facts, in database order: merged into the tables, its file_errors, its status, and
// its own facts (tu_*) — or, a reused unit of the previous index's copy, the files they name
// numbered as writing them would number them (its rows there stay).
static int write_unit(writer *w, const ix_compdb *db, size_t i, const ix_result *r, const ix_inplace *in) {
    const int *id = tb_strmap_get(&w->files, db->tus[i].file);  // the map grows as files come: copy
    if (!id) return tb_fail(w->err, "%s: %s has no files row", w->path, db->tus[i].file);
    const long long tu_id = *id;
    w->unit = tu_id;
    if (write_result(w, r) || ixw_write_file_errors(w, r)) return -1;
    ixw_bind_text(w->upd_unit, 1, r->status);
    sqlite3_bind_int(w->upd_unit, 2, r->errors);
    ixw_bind_text(w->upd_unit, 3, r->diagnostics);
    sqlite3_bind_int64(w->upd_unit, 4, tu_id);
    if (ixw_step(w, w->upd_unit, "setting a unit's status")) return -1;
    return in && r->reused ? touch_unit_files(w, r) : ixw_write_unit_facts(w, tu_id, r);
}

// A targets row: 1 written, 0 not (its file has no row: not a source the database lists, nor
// a file its units read), -1 failed.
static int write_target(writer *w, const ix_target_row *t) {
    int *fid = tb_strmap_get(&w->files, t->file);
    if (!fid) return 0;
    ixw_bind_text(w->ins_target, 1, t->target);
    ixw_bind_text(w->ins_target, 2, t->type);
    sqlite3_bind_int64(w->ins_target, 3, *fid);
    return ixw_step(w, w->ins_target, "inserting a target") ? -1 : 1;
}

// After every unit: the derived tables, the targets rows (those not written early: written[i]
// for i < nwritten), the secondary indexes (unless built already), the libraries rows (libs:
// written unit by unit, only the end's take-backs left), meta, file stats, the summary's
// counts; committed. 1: in place, a file's id changed (rewrite instead).
static int write_end(writer *w, const ix_compdb *db, const ix_result *results, const ix_targets *targets,
                     const char *written, size_t nwritten, ixw_libraries *libs, const ix_options *opt,
                     const ix_meta *meta, const ix_inplace *in, ix_summary *sum) {
    char *msg = NULL;
    struct timespec tp;
    clock_gettime(CLOCK_MONOTONIC, &tp);
    if (in && !same_file_ids(w, in)) return 1;  // the kept rows are valid only if no id changed
    if (ixw_write_collectives(w, opt)) return -1;
    for (size_t i = 0; targets && i < targets->rows.len; i++)
        if (!(i < nwritten && written[i]) && write_target(w, &TB_VEC_AT(&targets->rows, ix_target_row, i)) < 0)
            return -1;
    ix_phase_mark(opt, &tp, "write: collective sites, targets");
    if (sqlite3_exec(w->db, TB_INDEX_INDEXES, NULL, NULL, &msg) != SQLITE_OK) {
        int rc = tb_fail(w->err, "%s: creating the indexes: %s", w->path, msg ? msg : sqlite3_errmsg(w->db));
        sqlite3_free(msg);
        return rc;
    }
    ix_phase_mark(opt, &tp, "write: secondary indexes");
    if (libs ? ixw_libraries_end(w, libs) : ixw_write_libraries(w, db, results, targets)) return -1;
    ix_phase_mark(opt, &tp, libs ? "write: libraries (the units' rows written as they came; taken back, added)"
                                 : "write: libraries");
    if (ixw_write_input_units(w, db, results)) return -1;

    sum->tus = (long)db->ntus;
    for (size_t i = 0; i < db->ntus; i++) {
        sum->errors += results[i].errors;
        sum->tus_with_errors += results[i].errors > 0;
        sum->tus_failed += !strcmp(results[i].status, "failed");
    }
    if (ixw_write_meta(w, meta, opt, sum->tus, sum->errors, sum->tus_with_errors)) return -1;
    if (meta->hashes && ix_hashes_save(meta->hashes, w->db, in != NULL)) return ixw_sql_fail(w, "writing file_stats");
    ixw_count_summary(w, sum);
    if (sqlite3_exec(w->db, "COMMIT", NULL, NULL, NULL) != SQLITE_OK) return ixw_sql_fail(w, "committing");
    ix_phase_mark(opt, &tp, "write: counts, commit");
    return 0;
}

struct ix_writer {
    writer w;
    char tmp[4096];
    const char *path;
    const ix_compdb *db;
    const ix_inplace *in;
    int failed;  // a unit, targets, index or libraries row could not be written: the rest is skipped, the end fails
    size_t units;             // units written so far
    const ix_targets *early;  // whose rows ix_write_link_units wrote: ntargets of them, written[i] set
    char *written;
    size_t ntargets;
    ixw_libraries libs;       // with early: each unit's libraries rows as it is written
};

// Finalizes the statements and closes the file: SQLITE_OK or the close's error.
static int writer_close(ix_writer *x) {
    if (!x->w.db) return SQLITE_OK;
    ixw_finalize(&x->w);
    sqlite3_finalize(x->w.upd_unit);
    sqlite3_finalize(x->libs.ins);  // (NULL unless the link units came early)
    x->libs.ins = NULL;
    int rc = sqlite3_close(x->w.db);
    x->w.db = NULL;
    return rc;
}

static void writer_free(ix_writer *x) {
    writer_close(x);
    tb_strmap_free(&x->w.files);
    tb_strmap_free(&x->w.funcs);
    tb_vec_free(&x->w.finfo);
    tb_pool_free(&x->w.pool);
    free(x->written);
    if (x->early) ixw_libraries_free(&x->libs);
    free(x);
}

void ix_write_abandon(ix_writer *x) {
    char tmp[sizeof x->tmp];
    memcpy(tmp, x->tmp, sizeof tmp);
    writer_free(x);
    unlink(tmp);
}

// A new file, or (in) the previous index's copy; NULL on failure (err says why).
static ix_writer *begin_attempt(const char *path, const ix_compdb *db, const ix_result *results,
                                const ix_inplace *in, tb_error *err) {
    ix_writer *x = tb_xcalloc(1, sizeof *x, "index writer");
    snprintf(x->tmp, sizeof x->tmp, "%s.tmp.%ld", path, (long)getpid());
    x->path = path;
    x->db = db;
    x->in = in;
    x->w.err = err;
    x->w.path = x->tmp;
    tb_vec_init(&x->w.finfo, sizeof(struct finfo), "function rows");
    tb_strmap_init(&x->w.files);
    tb_strmap_init(&x->w.funcs);
    unlink(x->tmp);
    int rc = in ? ix_file_copy(in->prev_file, x->tmp, err) : 0;
    if (!rc && sqlite3_open_v2(x->tmp, &x->w.db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX,
                               NULL) != SQLITE_OK)
        rc = tb_fail(err, "%s: cannot create the index: %s", x->tmp, x->w.db ? sqlite3_errmsg(x->w.db) : "out of memory");
    if (!rc) rc = write_begin(&x->w, db, results, in);
    if (!rc) return x;
    ix_write_abandon(x);
    return NULL;
}

ix_writer *ix_write_begin(const char *path, const ix_compdb *db, tb_error *err) {
    return begin_attempt(path, db, NULL, NULL, err);
}

int ix_write_link_units(ix_writer *x, const ix_targets *targets) {
    if (x->failed || x->early || x->units) return x->failed ? -1 : 0;  // once, before any unit (else all at the end)
    x->early = targets;
    if (ixw_libraries_begin(&x->w, &x->libs, x->db, targets)) x->failed = 1;
    x->ntargets = targets->rows.len;
    x->written = tb_xcalloc(x->ntargets ? x->ntargets : 1, 1, "targets rows written");
    for (size_t i = 0; i < x->ntargets && !x->failed; i++) {
        int rc = write_target(&x->w, &TB_VEC_AT(&targets->rows, ix_target_row, i));
        if (rc < 0) x->failed = 1;
        x->written[i] = rc > 0;
    }
    return x->failed ? -1 : 0;
}

int ix_write_indexes(ix_writer *x) {
    char *msg = NULL;
    if (!x->failed && sqlite3_exec(x->w.db, TB_INDEX_INDEXES, NULL, NULL, &msg) != SQLITE_OK) {
        tb_fail(x->w.err, "%s: creating the indexes: %s", x->w.path, msg ? msg : sqlite3_errmsg(x->w.db));
        sqlite3_free(msg);
        x->failed = 1;
    }
    return x->failed ? -1 : 0;
}

int ix_write_unit(ix_writer *x, size_t i, const ix_result *r) {
    if (x->failed) return -1;
    if (write_unit(&x->w, x->db, i, r, x->in) || (x->early && ixw_libraries_unit(&x->w, &x->libs, i, r)))
        x->failed = 1;
    x->units++;
    return x->failed ? -1 : 0;
}

// 0: committed, closed, fsync'd and renamed over the path; 1: in place, renumbered (nothing
// published); -1 failed (err says why). Frees x; the temporary file is gone unless published.
static int end_attempt(ix_writer *x, const ix_result *results, const ix_targets *targets, const ix_options *opt,
                       const ix_meta *meta, ix_summary *sum, int publish) {
    tb_error *err = x->w.err;
    char tmp[sizeof x->tmp];
    memcpy(tmp, x->tmp, sizeof tmp);
    const char *path = x->path;
    ix_early_flush flush;
    ix_flush_start(&flush, tmp, publish && !x->failed);
    const int early = targets && targets == x->early;
    int rc = x->failed ? -1
                       : write_end(&x->w, x->db, results, targets, early ? x->written : NULL, early ? x->ntargets : 0,
                                   early ? &x->libs : NULL, opt, meta, x->in, sum);
    if (writer_close(x) != SQLITE_OK && !rc) rc = tb_fail(err, "%s: closing the index failed", tmp);
    writer_free(x);
    rc = ix_flush_finish(&flush, rc, publish, path, err);
    return rc;
}

int ix_write_end(ix_writer *x, const ix_result *results, const ix_targets *targets, const ix_options *opt,
                 const ix_meta *meta, ix_summary *sum) {
    memset(sum, 0, sizeof *sum);
    return end_attempt(x, results, targets, opt, meta, sum, 1) ? -1 : 0;
}

// One attempt over results already there: 1 when in place renumbers files, 0 published, -1 failed.
static int write_attempt(const char *path, const ix_compdb *db, ix_result *results, const ix_targets *targets,
                         const ix_options *opt, const ix_meta *meta, const ix_inplace *in, ix_summary *sum,
                         tb_error *err) {
    memset(sum, 0, sizeof *sum);
    ix_writer *x = begin_attempt(path, db, results, in, err);
    if (!x) return -1;
    struct timespec tp;
    clock_gettime(CLOCK_MONOTONIC, &tp);
    for (size_t i = 0; i < db->ntus; i++) ix_write_unit(x, i, &results[i]);
    ix_phase_mark(opt, &tp, in ? "write: every unit's facts merged, the parsed units' own facts (tu_*), in place"
                               : "write: every unit's facts merged and its own facts (tu_*)");
    return end_attempt(x, results, targets, opt, meta, sum, 1);
}

int ix_write_index(const char *path, const ix_compdb *db, ix_result *results, const ix_targets *targets,
                   const ix_options *opt, const ix_meta *meta, const ix_inplace *in, ix_summary *sum,
                   tb_error *err) {
    int rc = write_attempt(path, db, results, targets, opt, meta, in, sum, err);
    if (rc && in) {  // renumbered files, or the previous index's copy could not be updated
        if (opt->verbose)
            fprintf(stderr, "tracebook index: %s: the index is rewritten\n",
                    rc > 0 ? "the files' numbering changed" : err->msg);
        rc = write_attempt(path, db, results, targets, opt, meta, NULL, sum, err);
    }
    return rc ? -1 : 0;
}
