// index_update.c — see index_update.h. The merged tables are what index_write.c's merge of
// every unit in database order gives (write_result there); this file applies the same rules to
// the keys the parsed units touch (U below: any of them), reading the other units' rows through
// the tu_* indexes:
//
//   - functions: per USR, the first row in database order makes the row (name, place, static),
//     the first definition upgrades it and writes the body (calls, range sites, callbacks, and
//     their collective sites); a USR is touched when U's rows of it, or the body U gives it,
//     differ between U's old facts and its new ones, and only those USRs are merged again;
//   - field targets: per (record, field, function), the first row in database order;
//   - libraries: per function without a definition, the first library of each linking target
//     whose units call or name it, for the functions touched and those U's calls start or stop
//     naming;
//   - files: U's own row and its file_errors; a file no unit refers to any more is removed.
//
// What the update does not do, and leaves to the full merge (the caller writes the index anew,
// *why says which): a unit whose definition of an external function is another file's copy
// (index_write.c renames those rows per file, so which copy comes first decides other units'
// calls), a first definition that moves to another file while an unparsed unit defines the
// function too, a body that passes to a unit not parsed this run (its calls would have to be
// read back), a field target of a function defined in several files, a changed --collective
// list or targets (digests in meta), a parsed unit that changes what inferred link units are
// inferred from (index_update_inferred.c).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/xalloc.h"
#include "index_db.h"
#include "index_libs.h"
#include "index_reuse.h"
#include "index_unit_keys.h"
#include "index_update.h"
#include "index_update_internal.h"
#include "index_write_internal.h"

int ix_update_applies(const ix_prev *prev, const ix_compdb *db, size_t ntodo, const char **why) {
    size_t most = db->ntus / 4 > 8 ? db->ntus / 4 : 8;
    if (!prev->db) return *why = "no previous index", 0;
    if (ntodo > most) return *why = "more than a quarter of the units changed", 0;
    if (prev->list.len != db->ntus) return *why = "the database lists other units", 0;
    if (prev->input_units_bad)
        return *why = "a file's input_units record is malformed: the full merge writes it anew", 0;
    for (size_t i = 0; i < db->ntus; i++) {
        int *k = tb_strmap_get(&prev->units, db->tus[i].file);
        if (!k || TB_VEC_AT(&prev->list, ix_prev_unit, *k).id != (long long)i + 1)
            return *why = "the database lists other units, or in another order", 0;
    }
    return 1;
}


static int exec(updater *u, const char *sql) {
    char *msg = NULL;
    if (sqlite3_exec(u->w.db, sql, NULL, NULL, &msg) == SQLITE_OK) return 0;
    int rc = tb_fail(u->w.err, "%s: %s: %s", u->w.path, sql, msg ? msg : sqlite3_errmsg(u->w.db));
    sqlite3_free(msg);
    return rc;
}

int ixu_exec_id(updater *u, const char *sql, long long id) {
    sqlite3_stmt *st = NULL;
    if (ixw_prep(&u->w, &st, sql)) return -1;
    sqlite3_bind_int64(st, 1, id);
    int rc = ixw_step(&u->w, st, sql);
    sqlite3_finalize(st);
    return rc;
}

static int not_applicable(updater *u, const char *why) {
    if (!u->why) u->why = why;
    return 1;
}

// --- the merged state --------------------------------------------------------------------

typedef struct merged_fn {
    long long id;         // 0: no row
    long long def_file;   // files.id of the definition, 0: none
    long long unit;       // unit_id
    int is_static;
} merged_fn;

static int read_merged(updater *u, const char *usr, merged_fn *m) {
    memset(m, 0, sizeof *m);
    sqlite3_bind_text(u->q_merged, 1, usr, -1, SQLITE_STATIC);
    int rc = sqlite3_step(u->q_merged);
    if (rc == SQLITE_ROW) {
        m->id = sqlite3_column_int64(u->q_merged, 0);
        if (sqlite3_column_int(u->q_merged, 1)) m->def_file = sqlite3_column_int64(u->q_merged, 2);
        m->unit = sqlite3_column_int64(u->q_merged, 3);
        m->is_static = sqlite3_column_int(u->q_merged, 4);
    }
    sqlite3_reset(u->q_merged);
    return rc == SQLITE_ROW || rc == SQLITE_DONE ? 0 : ixu_fail(u, "reading a function");
}

// Whether unit U's definitions are its own (index_write.c renames a definition whose file is
// not the merged one: another binary's copy of an external function): 1 when one is not.
static int renames(updater *u, const ix_result *r) {
    for (size_t j = 0; j < r->funcs.len; j++) {
        const ix_func *f = &TB_VEC_AT(&r->funcs, ix_func, j);
        if (!f->is_def) continue;
        merged_fn m;
        if (read_merged(u, f->usr, &m)) return -1;
        int *fid = f->file ? tb_strmap_get(&u->w.files, f->file) : NULL;
        if (m.def_file && (!fid || *fid != m.def_file)) return 1;
    }
    return 0;
}

// The merge of one USR over every unit's rows (tu_functions, database order), as write_result
// does it: the row's values and who writes its body.
typedef struct replay {
    int exists, is_static, is_def;
    const char *name;
    long long file, unit, body_unit, def_file;
    unsigned line, col, end_line, end_col;
    int unparsed_def_units;  // units not parsed this run with a definition of the USR
    int renamed_in_unit;  // a definition in a parsed unit that is another file's copy
} replay;

static int replay_usr(updater *u, const char *usr, tb_pool *p, replay *out) {
    memset(out, 0, sizeof *out);
    int rc = ixu_functions_read(u);
    if (rc) return rc;
    long long last_def_unit = 0;
    for (const ixu_fn_row *row = ixu_functions_of(u, usr); row; row = ixu_functions_next(u, row)) {
        const ix_func *f = row->f;
        long long tu = row->tu_id, file = ixu_file_id(u, f->file);
        if (f->is_def && tu != last_def_unit) {
            out->unparsed_def_units += tu < 1 || (size_t)tu > u->db->ntus || !u->by_unit[tu];
            last_def_unit = tu;
        }
        if (f->is_def && out->exists && out->def_file && file != out->def_file) {  // renamed: another file's copy
            if (tu >= 1 && (size_t)tu <= u->db->ntus && u->by_unit[tu]) out->renamed_in_unit = 1;
            continue;
        }
        if (!out->exists) {
            out->exists = 1;
            out->name = tb_pool_dup(p, f->name);
            out->is_static = f->is_static;
        } else if (!f->is_def || out->def_file) {
            continue;  // the first row made it; only the first definition upgrades it
        }
        out->file = file;
        out->line = f->line;
        out->col = f->col;
        out->end_line = f->end_line;
        out->end_col = f->end_col;
        out->is_def = f->is_def;
        out->unit = tu;
        if (f->is_def) out->def_file = file, out->body_unit = tu;
    }
    return 0;
}

// A function row's body rows (and their collective sites) removed.
static int drop_body(updater *u, long long id) {
    return ixu_exec_id(u, "DELETE FROM collective_sites WHERE function_id = ?", id) ||
                   ixu_exec_id(u, "DELETE FROM calls WHERE caller_id = ?", id) ||
                   ixu_exec_id(u, "DELETE FROM range_sites WHERE function_id = ?", id) ||
                   ixu_exec_id(u, "DELETE FROM callbacks WHERE function_id = ?", id)
               ? -1
               : 0;
}

// The body of usr as unit k gives it (every definition row of usr in k), under function row id.
static int emit_body(updater *u, const ix_unit_keys *k, const char *usr, long long id) {
    writer *w = &u->w;
    const ix_result *r = k->r;
    for (size_t j = 0; j < r->funcs.len; j++) {
        const ix_func *f = &TB_VEC_AT(&r->funcs, ix_func, j);
        if (!f->is_def || strcmp(f->usr, usr)) continue;
        for (size_t i = k->calls.start[j]; i < k->calls.start[j + 1]; i++) {
            const ix_call *c = &TB_VEC_AT(&r->calls, ix_call, k->calls.items[i]);
            long long call_id = ixw_insert_call(w, id, c, c->callee_usr);
            if (call_id < 0) return -1;
            const char *site = ixw_collective_site(&u->coll, c->callee_usr, c->callee_name, c->field);
            if (!site) continue;
            sqlite3_bind_int64(w->ins_coll, 1, id);
            ixw_bind_text(w->ins_coll, 2, site);
            ixw_bind_file(w->ins_coll, 3, ixw_file_id(w, c->file, 0, NULL, 0, NULL));
            sqlite3_bind_int(w->ins_coll, 4, (int)c->line);
            sqlite3_bind_int(w->ins_coll, 5, (int)c->col);
            sqlite3_bind_int64(w->ins_coll, 6, call_id);
            if (ixw_step(w, w->ins_coll, "inserting a collective site")) return -1;
        }
        for (size_t i = k->ranges.start[j]; i < k->ranges.start[j + 1]; i++)
            if (ixw_insert_range(w, id, &TB_VEC_AT(&r->ranges, ix_range, k->ranges.items[i]))) return -1;
        for (size_t i = k->callbacks.start[j]; i < k->callbacks.start[j + 1]; i++) {
            const ix_callback *cb = &TB_VEC_AT(&r->callbacks, ix_callback, k->callbacks.items[i]);
            if (ixw_insert_callback(w, id, cb, cb->target_usr)) return -1;
        }
    }
    return 0;
}

// One touched USR merged again: its functions row and, where a parsed unit writes or wrote it
// (or the writer changed), its body.
static int merge_usr(updater *u, const char *usr, const merged_fn *before) {
    tb_pool p = {0};
    replay r;
    int rc = replay_usr(u, usr, &p, &r);
    if (rc) goto out;
    rc = 1;
    if (r.renamed_in_unit) {
        not_applicable(u, "a definition in the unit is another file's copy of an external function");
        goto out;
    }
    // another unit's definition is a renamed copy or not by which file defines the function first
    if (before->def_file && r.def_file && before->def_file != r.def_file && r.unparsed_def_units) {
        not_applicable(u, "a function defined in several files changes its first definition");
        goto out;
    }
    long long body_before = before->def_file ? before->unit : 0;
    if (r.body_unit && r.body_unit != body_before && !u->by_unit[r.body_unit]) {
        not_applicable(u, "a function body passes to a unit that was not parsed");
        goto out;
    }
    rc = -1;
    writer *w = &u->w;
    long long id = before->id;
    // libraries rows follow the row's existence, definition and static-ness (and who names it)
    if (!id || !r.exists || (before->def_file != 0) != (r.is_def != 0) || before->is_static != r.is_static)
        tb_strmap_put(&u->lib_check, usr, 1);
    if (!r.exists) {
        if (id && (drop_body(u, id) || ixu_exec_id(u, "DELETE FROM libraries WHERE function_id = ?", id) ||
                   ixu_exec_id(u, "DELETE FROM functions WHERE id = ?", id)))
            goto out;
        rc = 0;
        goto out;
    }
    sqlite3_stmt *st = id ? u->upd_fn : u->ins_fn;
    ixw_bind_text(st, 1, r.name);
    ixw_bind_file(st, 2, r.file);
    sqlite3_bind_int(st, 3, (int)r.line);
    sqlite3_bind_int(st, 4, (int)r.col);
    sqlite3_bind_int(st, 5, r.is_static);
    sqlite3_bind_int(st, 6, r.is_def);
    ixw_bind_pos(st, 7, r.end_line);
    ixw_bind_pos(st, 8, r.end_col);
    sqlite3_bind_int64(st, 9, r.unit);
    if (id)
        sqlite3_bind_int64(st, 10, id);
    else
        ixw_bind_text(st, 10, usr);
    if (ixw_step(w, st, id ? "updating a function" : "inserting a function")) goto out;
    if (!id) id = sqlite3_last_insert_rowid(w->db);
    if ((body_before && u->by_unit[body_before]) || (r.body_unit && u->by_unit[r.body_unit]) ||
        body_before != r.body_unit) {
        if (drop_body(u, id)) goto out;
        if (r.body_unit && emit_body(u, u->by_unit[r.body_unit], usr, id)) goto out;
    }
    rc = 0;
out:
    tb_pool_free(&p);
    return rc;
}

// A field target key merged again: the first row of (record, field, function) in database order.
static int merge_ftarget(updater *u, const char *key) {
    char *k = tb_xstrdup(key, "field target key");
    char *field = strchr(k, '\x1f'), *fn = field ? strchr(field + 1, '\x1f') : NULL;
    int rc = -1;
    sqlite3_stmt *q = NULL;
    if (!field || !fn) goto out;
    *field++ = 0;
    *fn++ = 0;
    if (!strcmp(k, "\x01") || !strcmp(field, "\x01") || !strcmp(fn, "\x01")) {
        rc = not_applicable(u, "a field target without a record, field or function");
        goto out;
    }
    // a function defined in several files: which copy a unit's row names depends on the renames
    int got = ixu_functions_read(u);
    if (got) {
        rc = got;
        goto out;
    }
    long long def_file = 0;
    int copies = 0;
    for (const ixu_fn_row *row = ixu_functions_of(u, fn); row && copies < 2; row = ixu_functions_next(u, row)) {
        long long file = row->f->is_def ? ixu_file_id(u, row->f->file) : 0;
        if (file && file != def_file) copies++, def_file = file;
    }
    if (copies > 1) {
        rc = not_applicable(u, "a field target names a function defined in several files");
        goto out;
    }
    if (ixw_prep(&u->w, &q, "DELETE FROM field_targets WHERE record = ? AND field = ? AND function_usr = ?")) goto out;
    sqlite3_bind_text(q, 1, k, -1, SQLITE_STATIC);
    sqlite3_bind_text(q, 2, field, -1, SQLITE_STATIC);
    sqlite3_bind_text(q, 3, fn, -1, SQLITE_STATIC);
    if (ixw_step(&u->w, q, "removing a field target")) goto out;
    sqlite3_finalize(q);
    q = NULL;
    if (ixw_prep(&u->w, &q,
                 "INSERT INTO field_targets(record, field, function_usr, file_id, line) SELECT record, field,"
                 " function_usr, file_id, line FROM tu_field_targets WHERE record = ?1 AND field = ?2 AND"
                 " function_usr = ?3 ORDER BY tu_id, rowid LIMIT 1"))
        goto out;
    sqlite3_bind_text(q, 1, k, -1, SQLITE_STATIC);
    sqlite3_bind_text(q, 2, field, -1, SQLITE_STATIC);
    sqlite3_bind_text(q, 3, fn, -1, SQLITE_STATIC);
    if (ixw_step(&u->w, q, "merging a field target")) goto out;
    if (ixw_collective_record(&u->coll, k)) u->recollect = 1;
    rc = 0;
out:
    sqlite3_finalize(q);
    free(k);
    return rc;
}

// Pass 1, per parsed unit: what its change touches (the USRs whose rows or bodies differ, with
// their merged rows before anything changes; the field target keys; the functions it starts or
// stops naming; the files it stops naming), and its tu_* rows, file_errors and files row replaced.
static int prepare_unit(updater *u, size_t k, long long tu_id, const ix_result *old, const ix_result *now) {
    writer *w = &u->w;
    w->unit = tu_id;
    int rc = renames(u, old);  // the merged rows are still the old ones
    if (rc) return rc < 0 ? -1 : not_applicable(u, "a definition in the unit is another file's copy of an external function");
    ix_unit_keys *ko = &u->old_keys[k], *kn = &u->new_keys[k];
    ix_key_unit(ko, old);
    ix_key_unit(kn, now);
    u->by_unit[tu_id] = kn;
    tb_strmap named_old, named_now;  // files.id (as text) the old and new facts name
    tb_strmap_init(&named_old);
    tb_strmap_init(&named_now);
    rc = -1;
    for (int side = 0; side < 2; side++) {
        const ix_unit_keys *a = side ? kn : ko, *b = side ? ko : kn;
        for (size_t i = 0; i < a->sig.cap; i++) {
            const char *usr = a->sig.keys[i];
            if (!usr || (side && ix_sig_of(b, usr)) || !ix_differs(ix_sig_of(a, usr), ix_sig_of(b, usr))) continue;
            if (tb_strmap_get(&u->touched, usr)) continue;  // another parsed unit touched it first
            tb_strmap_put(&u->touched, usr, (int)u->before.len);
            if (read_merged(u, usr, tb_vec_push(&u->before))) goto out;
        }
        for (size_t i = 0; i < a->named.cap; i++)  // libraries: functions U starts or stops naming
            if (a->named.keys[i] && !tb_strmap_get(&b->named, a->named.keys[i]))
                tb_strmap_put(&u->lib_check, a->named.keys[i], 1);
        for (size_t i = 0; i < a->ft.cap; i++) {  // field targets whose first row in U differs
            const char *key = a->ft.keys[i];
            if (!key || (side && tb_strmap_get(&b->ft, key))) continue;
            int *x = tb_strmap_get(&a->ft, key), *y = tb_strmap_get(&b->ft, key);
            if (y && !strcmp(TB_VEC_AT(&a->fts, const char *, *x), TB_VEC_AT(&b->fts, const char *, *y))) continue;
            tb_strmap_put(&u->ft_touched, key, 1);
        }
    }
    ixu_files_named(u, old, &named_old);
    {
        sqlite3_stmt *q = NULL;
        if (ixw_prep(w, &q, "SELECT file_id FROM file_errors WHERE unit_id = ?")) goto out;
        sqlite3_bind_int64(q, 1, tu_id);
        while (sqlite3_step(q) == SQLITE_ROW) {
            char key[32];
            snprintf(key, sizeof key, "%lld", (long long)sqlite3_column_int64(q, 0));
            tb_strmap_put(&named_old, key, 1);
        }
        sqlite3_finalize(q);
    }

    // the unit's own rows: only the tables whose rows differ are written again
    int replaced = ixu_replace_unit_rows(u, tu_id, old, now);
    if (replaced) {
        rc = replaced;  // (1: a record there does not unpack)
        goto out;
    }
    if (ixu_exec_id(u, "DELETE FROM file_errors WHERE unit_id = ?", tu_id) || ixw_write_file_errors(w, now)) goto out;
    ixu_files_named(u, now, &named_now);
    for (size_t i = 0; i < named_old.cap; i++)  // the candidates: named before, not now (errors aside)
        if (named_old.keys[i] && !tb_strmap_get(&named_now, named_old.keys[i]))
            tb_strmap_put(&u->orphan, named_old.keys[i], 1);
    {
        sqlite3_stmt *q = NULL;
        if (ixw_prep(w, &q, "UPDATE files SET status = ?, errors = ?, diagnostics = ? WHERE id = ?")) goto out;
        ixw_bind_text(q, 1, now->status);
        sqlite3_bind_int(q, 2, now->errors);
        ixw_bind_text(q, 3, now->diagnostics);
        sqlite3_bind_int64(q, 4, tu_id);
        int bad = ixw_step(w, q, "updating a unit's status");
        sqlite3_finalize(q);
        if (bad) goto out;
    }
    rc = 0;
out:
    tb_strmap_free(&named_old);
    tb_strmap_free(&named_now);
    return rc;
}

// Passes 2 and 3: every touched USR and field target merged again once, over every unit's
// rows as they are now; then no parsed unit may have a definition that is another file's copy.
static int merge_touched(updater *u, const ix_result *results, const size_t *todo, size_t ntodo) {
    for (size_t i = 0; i < u->touched.cap; i++) {
        const char *usr = u->touched.keys[i];
        if (!usr) continue;
        int rc = merge_usr(u, usr, &TB_VEC_AT(&u->before, merged_fn, u->touched.vals[i]));
        if (rc) return rc;
    }
    for (size_t k = 0; k < ntodo; k++) {
        u->w.unit = (long long)todo[k] + 1;
        int rc = renames(u, &results[todo[k]]);
        if (rc) return rc < 0 ? -1 : not_applicable(u, "a definition in the unit is another file's copy of an external function");
    }
    for (size_t i = 0; i < u->ft_touched.cap; i++) {
        if (!u->ft_touched.keys[i]) continue;
        int rc = merge_ftarget(u, u->ft_touched.keys[i]);
        if (rc) return rc;
    }
    return 0;
}

// libraries for the functions checked: as write_libraries derives them for every function.
static int update_libraries(updater *u) {
    if (!u->lib_check.len) return 0;
    writer *w = &u->w;
    if (!*u->targets_loaded) {  // the reply's signature was unchanged: read it only now
        *u->targets_loaded = 1;
        if (ix_targets_load(u->targets, u->build_dir, w->err) != 0)
            return not_applicable(u, "the CMake file API reply cannot be read again");
        if (strcmp(ix_targets_digest(&w->pool, "cmake-file-api", u->targets), u->targets_digest))
            return not_applicable(u, "the targets or their link lines changed");
    }
    const ix_targets *t = u->targets;
    if (!t->links.len) return 0;
    tb_strmap first_row, first_link;  // unit path -> its first targets row; target -> its first link
    tb_strmap_init(&first_row);
    tb_strmap_init(&first_link);
    int *next_row = ixw_chain(&t->rows, ixw_row_file, &first_row);
    int *next_link = ixw_chain(&t->links, ixw_link_target, &first_link);
    ix_libs libs;
    ix_libs_init(&libs);
    ixu_namers namers;  // read when first needed
    int namers_read = 0;
    sqlite3_stmt *fn = NULL, *ins = NULL;
    int rc = -1;
    if (ixw_prep(w, &fn, "SELECT id, name, is_definition, is_static FROM functions WHERE usr = ?") ||
        ixw_prep(w, &ins, "INSERT OR IGNORE INTO libraries(function_id, target, library) VALUES(?,?,?)"))
        goto out;
    for (size_t k = 0; k < u->lib_check.cap; k++) {
        const char *usr = u->lib_check.keys[k];
        if (!usr) continue;
        sqlite3_bind_text(fn, 1, usr, -1, SQLITE_STATIC);
        if (sqlite3_step(fn) != SQLITE_ROW) {
            sqlite3_reset(fn);
            continue;  // no row: nothing to link (a deleted row's libraries went with it)
        }
        long long id = sqlite3_column_int64(fn, 0);
        const char *name = tb_pool_dup(&w->pool, (const char *)sqlite3_column_text(fn, 1));
        int keep_out = sqlite3_column_int(fn, 2) || sqlite3_column_int(fn, 3);
        sqlite3_reset(fn);
        if (ixu_exec_id(u, "DELETE FROM libraries WHERE function_id = ?", id)) goto out;
        if (keep_out) continue;
        int got = namers_read++ ? 0 : ixu_namers_read(u, &namers);
        if (got) {
            rc = got;
            goto out;
        }
        tb_strmap done;  // targets already given this function's row
        tb_strmap_init(&done);
        int bad = 0;
        int *first = tb_strmap_get(&namers.first, usr);
        for (int n = first ? *first : -1; n >= 0 && !bad; n = TB_VEC_AT(&namers.links, ixu_namer, (size_t)n).next) {
            long long tu = TB_VEC_AT(&namers.links, ixu_namer, (size_t)n).tu_id;
            if (tu < 1 || (size_t)tu > u->db->ntus) continue;
            int *r0 = tb_strmap_get(&first_row, u->db->tus[tu - 1].file);
            for (int r = r0 ? *r0 : -1; r >= 0 && !bad; r = next_row[r]) {
                const char *target = TB_VEC_AT(&t->rows, ix_target_row, (size_t)r).target;
                if (tb_strmap_get(&done, target)) continue;
                tb_strmap_put(&done, target, 1);
                int *l0 = tb_strmap_get(&first_link, target);
                for (int l = l0 ? *l0 : -1; l >= 0; l = next_link[l]) {
                    const ix_target_link *link = &TB_VEC_AT(&t->links, ix_target_link, (size_t)l);
                    if (!ix_lib_defines(&libs, link->library, name)) continue;
                    sqlite3_bind_int64(ins, 1, id);
                    ixw_bind_text(ins, 2, target);
                    ixw_bind_text(ins, 3, link->library);
                    bad = ixw_step(w, ins, "inserting a library");
                    break;
                }
            }
        }
        tb_strmap_free(&done);
        if (bad) goto out;
    }
    rc = 0;
out:
    sqlite3_finalize(fn);
    sqlite3_finalize(ins);
    if (namers_read) ixu_namers_free(&namers);
    ix_libs_free(&libs);
    free(next_row);
    free(next_link);
    tb_strmap_free(&first_row);
    tb_strmap_free(&first_link);
    return rc;
}

// Files that U's old facts named and nothing names any more leave the files table.
static int drop_orphans(updater *u) {
    if (!u->orphan.len) return 0;
    sqlite3_stmt *q = NULL, *del = NULL;
    tb_strmap packed;  // the files the packed records name
    tb_strmap_init(&packed);
    int rc = ixu_packed_files(u, &packed);
    if (rc) goto out;
    rc = -1;
    if (ixw_prep(&u->w, &q,
                 "SELECT NOT (EXISTS(SELECT 1 FROM files WHERE id = ?1 AND is_tu = 1)"
                 " OR EXISTS(SELECT 1 FROM tu_field_targets WHERE file_id = ?1)"
                 " OR EXISTS(SELECT 1 FROM file_errors WHERE file_id = ?1))") ||
        ixw_prep(&u->w, &del, "DELETE FROM files WHERE id = ?"))
        goto out;
    for (size_t k = 0; k < u->orphan.cap; k++) {
        if (!u->orphan.keys[k] || tb_strmap_get(&packed, u->orphan.keys[k])) continue;
        long long id = atoll(u->orphan.keys[k]);
        sqlite3_bind_int64(q, 1, id);
        int gone = sqlite3_step(q) == SQLITE_ROW && sqlite3_column_int(q, 0);
        sqlite3_reset(q);
        if (!gone) continue;
        sqlite3_bind_int64(del, 1, id);
        if (ixw_step(&u->w, del, "removing a file")) goto out;
    }
    rc = 0;
out:
    sqlite3_finalize(q);
    sqlite3_finalize(del);
    tb_strmap_free(&packed);
    return rc;
}

static const char *meta_of(updater *u, const char *key) {
    sqlite3_stmt *q = NULL;
    const char *v = NULL;
    if (sqlite3_prepare_v2(u->w.db, "SELECT value FROM meta WHERE key = ?", -1, &q, NULL) != SQLITE_OK) return NULL;
    sqlite3_bind_text(q, 1, key, -1, SQLITE_STATIC);
    if (sqlite3_step(q) == SQLITE_ROW) v = tb_pool_dup(&u->w.pool, (const char *)sqlite3_column_text(q, 0));
    sqlite3_finalize(q);
    return v;
}

// Before the parsed units' facts are there (while they are parsed): the file in a write
// transaction, its digests, the statements, the file ids.
static int update_open(updater *u) {
    writer *w = &u->w;
    if (exec(u, "PRAGMA cache_size=-65536; PRAGMA temp_store=MEMORY; BEGIN IMMEDIATE")) return -1;
    u->targets_digest = meta_of(u, "targets_digest");
    u->collectives_digest = meta_of(u, "collectives_digest");
    if (ixw_prepare(w) || ixw_collectives_init(w, u->opt, &u->coll) ||
        ixw_prep(w, &u->q_merged, "SELECT id, is_definition, file_id, unit_id, is_static FROM functions WHERE usr = ?") ||
        ixw_prep(w, &u->ins_fn,
                 "INSERT INTO functions(name, file_id, line, col, is_static, is_definition, end_line, end_col, unit_id,"
                 " usr) VALUES(?,?,?,?,?,?,?,?,?,?)") ||
        ixw_prep(w, &u->upd_fn,
                 "UPDATE functions SET name = ?, file_id = ?, line = ?, col = ?, is_static = ?, is_definition = ?,"
                 " end_line = ?, end_col = ?, unit_id = ? WHERE id = ?"))
        return -1;
    sqlite3_stmt *files = NULL;
    if (ixw_prep(w, &files, "SELECT id, path FROM files")) return -1;
    while (sqlite3_step(files) == SQLITE_ROW)
        tb_strmap_put(&w->files, (const char *)sqlite3_column_text(files, 1), (int)sqlite3_column_int64(files, 0));
    sqlite3_finalize(files);
    // The summary's counts of the big tables (calls, functions and their definitions, the
    // targets, the functions with a library: a scan of every row, 4-5 ms over this project,
    // after a small update) taken now, while the units are parsed; what the update inserts,
    // deletes or upgrades is counted by triggers of this connection (temp: the file does not
    // keep them). A function's first libraries row counts it, its last one's deletion uncounts it
    // (INSERT OR IGNORE fires no trigger when it inserts nothing). The update leaves the targets
    // rows as they are (it applies only while their digest stands).
    if (ixw_count_before(w) ||
        exec(u, "CREATE TEMP TABLE count_delta(calls INTEGER NOT NULL, functions INTEGER NOT NULL,"
                " definitions INTEGER NOT NULL, library_found INTEGER NOT NULL);"
                " INSERT INTO count_delta VALUES(0, 0, 0, 0);"
                " CREATE TEMP TRIGGER library_added AFTER INSERT ON main.libraries BEGIN UPDATE count_delta"
                "  SET library_found = library_found"
                "   + ((SELECT COUNT(*) FROM main.libraries WHERE function_id = NEW.function_id) = 1); END;"
                " CREATE TEMP TRIGGER library_removed AFTER DELETE ON main.libraries BEGIN UPDATE count_delta"
                "  SET library_found = library_found"
                "   - NOT EXISTS(SELECT 1 FROM main.libraries WHERE function_id = OLD.function_id); END;"
                " CREATE TEMP TRIGGER calls_added AFTER INSERT ON main.calls"
                "  BEGIN UPDATE count_delta SET calls = calls + 1; END;"
                " CREATE TEMP TRIGGER calls_removed AFTER DELETE ON main.calls"
                "  BEGIN UPDATE count_delta SET calls = calls - 1; END;"
                " CREATE TEMP TRIGGER functions_added AFTER INSERT ON main.functions BEGIN UPDATE count_delta"
                "  SET functions = functions + 1, definitions = definitions + (NEW.is_definition = 1); END;"
                " CREATE TEMP TRIGGER functions_removed AFTER DELETE ON main.functions BEGIN UPDATE count_delta"
                "  SET functions = functions - 1, definitions = definitions - (OLD.is_definition = 1); END;"
                " CREATE TEMP TRIGGER functions_changed AFTER UPDATE OF is_definition ON main.functions"
                "  BEGIN UPDATE count_delta SET definitions = definitions + (NEW.is_definition = 1)"
                "   - (OLD.is_definition = 1); END;"))
        return -1;
    w->counted.before = 1;
    return 0;
}

static int update_all(updater *u, const ix_result *results, const ix_result *old, const size_t *todo, size_t ntodo,
                      const ix_meta *meta, ix_summary *sum) {
    writer *w = &u->w;
    struct timespec tp;
    clock_gettime(CLOCK_MONOTONIC, &tp);
    const char *td = u->targets_digest, *cd = u->collectives_digest;
    if (!td || !meta->targets_digest || strcmp(td, meta->targets_digest))
        return not_applicable(u, "the targets or their link lines changed");
    const char *ts = meta->targets_source;
    if (!strcmp(ts, "inferred") || !strcmp(ts, "none")) {
        int stand = ixu_inferred_link_units_stand(u, results, old, todo, ntodo);
        if (stand) return stand;
    }
    if (!cd || strcmp(cd, ixw_collectives_digest(&w->pool, u->opt)))
        return not_applicable(u, "the --collective list changed");
    for (size_t k = 0; k < ntodo; k++) {
        int rc = prepare_unit(u, k, (long long)todo[k] + 1, &old[k], &results[todo[k]]);
        if (rc) return rc;
    }
    ix_phase_mark(u->opt, &tp, "update: the parsed units' own facts");
    int rc = merge_touched(u, results, todo, ntodo);
    if (rc) return rc;
    ix_phase_mark(u->opt, &tp, "update: merged facts");
    if ((rc = update_libraries(u))) return rc;
    ix_phase_mark(u->opt, &tp, "update: libraries");
    if (u->recollect) {
        ixw_collectives_free(&u->coll);
        memset(&u->coll, 0, sizeof u->coll);
        if (exec(u, "DELETE FROM collective_sites") || ixw_write_collectives(w, u->opt)) return -1;
    }
    if ((rc = drop_orphans(u))) return rc;
    ix_phase_mark(u->opt, &tp, "update: collective sites, orphan files");

    sqlite3_stmt *q = NULL;
    if (ixw_prep(w, &q, "SELECT COUNT(*), SUM(errors), SUM(errors > 0), SUM(status = 'failed') FROM files WHERE is_tu = 1"))
        return -1;
    if (sqlite3_step(q) == SQLITE_ROW) {
        sum->tus = (long)sqlite3_column_int64(q, 0);
        sum->errors = (long)sqlite3_column_int64(q, 1);
        sum->tus_with_errors = (long)sqlite3_column_int64(q, 2);
        sum->tus_failed = (long)sqlite3_column_int64(q, 3);
    }
    sqlite3_finalize(q);
    if (ixw_write_meta(w, meta, u->opt, sum->tus, sum->errors, sum->tus_with_errors)) return -1;
    if (meta->hashes && ix_hashes_save(meta->hashes, w->db, 1)) return ixu_fail(u, "writing file_stats");
    ix_phase_mark(u->opt, &tp, "update: meta, file stats");
    ixw_count_summary(w, sum);
    ix_phase_mark(u->opt, &tp, "update: counts");
    rc = exec(u, "COMMIT");
    ix_phase_mark(u->opt, &tp, "update: commit");
    return rc;
}

ix_update *ix_update_begin(const char *path, const ix_compdb *db, const size_t *todo, size_t ntodo, ix_prev *prev,
                           ix_targets *targets, int *targets_loaded, const char *build_dir, const ix_options *opt,
                           tb_error *err) {
    updater *u = tb_xcalloc(1, sizeof *u, "index update");
    *u = (updater){.db = db, .targets = targets, .targets_loaded = targets_loaded, .build_dir = build_dir, .opt = opt,
                   .todo = todo, .ntodo = ntodo, .err = err, .w = {.err = err, .path = path}};
    tb_vec_init(&u->w.finfo, sizeof(struct finfo), "function rows");
    tb_strmap_init(&u->w.files);
    tb_strmap_init(&u->w.funcs);
    tb_strmap_init(&u->lib_check);
    tb_strmap_init(&u->orphan);
    tb_strmap_init(&u->touched);
    tb_strmap_init(&u->ft_touched);
    tb_vec_init(&u->before, sizeof(merged_fn), "touched functions");
    u->old_keys = tb_xcalloc(ntodo ? ntodo : 1, sizeof *u->old_keys, "parsed units' facts");
    u->new_keys = tb_xcalloc(ntodo ? ntodo : 1, sizeof *u->new_keys, "parsed units' facts");
    u->by_unit = tb_xcalloc(db->ntus + 1, sizeof *u->by_unit, "parsed units");
    // the parsed units' old facts, read before anything changes
    u->old = tb_xcalloc(ntodo ? ntodo : 1, sizeof *u->old, "old unit facts");
    for (size_t k = 0; k < ntodo && !u->rc; k++) {
        int *p = tb_strmap_get(&prev->units, db->tus[todo[k]].file);
        if (!p || ix_prev_unit_facts(prev, &TB_VEC_AT(&prev->list, ix_prev_unit, *p), &u->old[k])) {
            u->why = "a unit's previous facts cannot be read";
            u->rc = 1;
        }
    }
    if (!u->rc) {
        if (sqlite3_open_v2(path, &u->w.db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX, NULL) != SQLITE_OK) {
            u->rc = tb_fail(err, "%s: cannot open the index: %s", path, u->w.db ? sqlite3_errmsg(u->w.db) : "out of memory");
        } else {
            sqlite3_busy_timeout(u->w.db, 5000);
            u->rc = update_open(u);
        }
    }
    return u;
}

int ix_update_end(ix_update *u, const ix_result *results, const ix_meta *meta, ix_summary *sum, const char **why) {
    memset(sum, 0, sizeof *sum);
    *why = NULL;
    int rc = u->rc ? u->rc : update_all(u, results, u->old, u->todo, u->ntodo, meta, sum);
    if (rc && u->w.db) sqlite3_exec(u->w.db, "ROLLBACK", NULL, NULL, NULL);
    if (rc > 0) *why = u->why ? u->why : "the update does not apply";
    ixw_finalize(&u->w);
    sqlite3_stmt *sts[] = {u->q_merged, u->ins_fn, u->upd_fn};
    for (size_t i = 0; i < sizeof sts / sizeof *sts; i++) sqlite3_finalize(sts[i]);
    ixw_collectives_free(&u->coll);
    if (u->w.db && sqlite3_close(u->w.db) != SQLITE_OK && !rc)
        rc = tb_fail(u->err, "%s: closing the index failed", u->w.path);
    tb_strmap_free(&u->w.files);
    tb_strmap_free(&u->w.funcs);
    tb_vec_free(&u->w.finfo);
    tb_pool_free(&u->w.pool);
    tb_strmap_free(&u->lib_check);
    tb_strmap_free(&u->orphan);
    ixu_functions_free(&u->fns);
    tb_strmap_free(&u->touched);
    tb_strmap_free(&u->ft_touched);
    tb_vec_free(&u->before);
    for (size_t k = 0; k < u->ntodo; k++) {
        if (u->old_keys[k].r) ix_key_free(&u->old_keys[k]);
        if (u->new_keys[k].r) ix_key_free(&u->new_keys[k]);
    }
    free(u->old_keys);
    free(u->new_keys);
    free(u->by_unit);
    for (size_t k = 0; k < u->ntodo; k++) ix_result_free(&u->old[k]);
    free(u->old);
    free(u);
    return rc;
}
