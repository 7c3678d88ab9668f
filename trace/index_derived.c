// index_derived.c — the tables derived from the merged facts (index_write_internal.h): which
// calls are collective sites (--collective: names, globs, @Record's fields), and for each
// function without a definition the library of each linking target's link line that defines
// it (index_libs.c reads the libraries). index_write.c derives both for a whole index;
// index_update.c asks the same questions for the rows an update touched.
#include <stdlib.h>
#include <string.h>

#include "core/xalloc.h"
#include "index_libs.h"
#include "index_write_internal.h"
#include "u64map.h"

// collective_sites: direct calls of a listed name or glob; with "@Record", calls of any
// function assigned to one of Record's fields, and calls through those fields (named
// "Record.field").
int ixw_collectives_init(writer *w, const ix_options *opt, ixw_collectives *c) {
    memset(c, 0, sizeof *c);
    tb_strmap_init(&c->members);  // USRs of functions assigned to a field of an @Record
    tb_strmap_init(&c->exact);    // the listed names without a glob
    c->records = tb_xcalloc(opt->ncollectives + 1, sizeof *c->records, "collective records");
    c->globs = tb_xcalloc(opt->ncollectives + 1, sizeof *c->globs, "collective globs");
    sqlite3_stmt *q = NULL;
    if (ixw_prep(w, &q, "SELECT function_usr FROM field_targets WHERE record = ?")) return -1;
    for (size_t i = 0; i < opt->ncollectives; i++) {
        const char *p = opt->collectives[i];
        if (p[0] == '@') {
            c->records[c->nrecords++] = p + 1;
            sqlite3_bind_text(q, 1, p + 1, -1, SQLITE_STATIC);
            while (sqlite3_step(q) == SQLITE_ROW)
                tb_strmap_put(&c->members, (const char *)sqlite3_column_text(q, 0), 1);
            sqlite3_reset(q);
        } else if (strpbrk(p, "*?[\\")) {  // the globs in a list (ix_name_matches' answer, once per name)
            c->globs[c->nglobs++] = p;
        } else {
            tb_strmap_put(&c->exact, p, 1);
        }
    }
    sqlite3_finalize(q);
    return 0;
}

const char *ixw_collective_site(const ixw_collectives *c, const char *usr, const char *name, const char *field) {
    if (field) {
        for (size_t i = 0; i < c->nrecords; i++) {
            size_t n = strlen(c->records[i]);
            if (!strncmp(field, c->records[i], n) && field[n] == '.') return field;
        }
        return NULL;
    }
    if ((usr && tb_strmap_get(&c->members, usr)) || (name && tb_strmap_get(&c->exact, name))) return name;
    for (size_t i = 0; i < c->nglobs && name; i++)
        if (ix_name_matches(c->globs[i], name)) return name;
    return NULL;
}

int ixw_collective_record(const ixw_collectives *c, const char *record) {
    for (size_t i = 0; record && i < c->nrecords; i++)
        if (!strcmp(c->records[i], record)) return 1;
    return 0;
}

void ixw_collectives_free(ixw_collectives *c) {
    free(c->records);
    free(c->globs);
    tb_strmap_free(&c->exact);
    tb_strmap_free(&c->members);
}

int ixw_write_collectives(writer *w, const ix_options *opt) {
    ixw_collectives c;
    sqlite3_stmt *q = NULL;
    int rc = -1;
    if (ixw_collectives_init(w, opt, &c)) goto out;
    if (ixw_prep(w, &q, "SELECT caller_id, callee_usr, callee_name, field, file_id, line, col, id FROM calls ORDER BY id"))
        goto out;
    while (sqlite3_step(q) == SQLITE_ROW) {
        const char *site = ixw_collective_site(&c, (const char *)sqlite3_column_text(q, 1),
                                               (const char *)sqlite3_column_text(q, 2),
                                               (const char *)sqlite3_column_text(q, 3));
        if (!site) continue;
        sqlite3_bind_int64(w->ins_coll, 1, sqlite3_column_int64(q, 0));
        ixw_bind_text(w->ins_coll, 2, site);
        if (sqlite3_column_type(q, 4) == SQLITE_NULL)
            sqlite3_bind_null(w->ins_coll, 3);
        else
            sqlite3_bind_int64(w->ins_coll, 3, sqlite3_column_int64(q, 4));
        sqlite3_bind_int(w->ins_coll, 4, sqlite3_column_int(q, 5));
        sqlite3_bind_int(w->ins_coll, 5, sqlite3_column_int(q, 6));
        sqlite3_bind_int64(w->ins_coll, 6, sqlite3_column_int64(q, 7));
        if (ixw_step(w, w->ins_coll, "inserting a collective site")) goto out;
    }
    rc = 0;
out:
    sqlite3_finalize(q);
    ixw_collectives_free(&c);
    return rc;
}

int *ixw_chain(const tb_vec *items, const char *(*key)(const void *item), tb_strmap *first) {
    int *next = tb_xcalloc(items->len + 1, sizeof *next, "chains");
    int *last = tb_xcalloc(items->len + 1, sizeof *last, "chains");
    for (size_t i = 0; i < items->len; i++) {
        const char *k = key((const char *)items->items + i * items->size);
        next[i] = -1;
        int *f = tb_strmap_get(first, k);
        if (!f) {
            tb_strmap_put(first, k, (int)i);
            last[i] = (int)i;
        } else {
            next[last[*f]] = (int)i;
            last[*f] = (int)i;
        }
    }
    free(last);
    return next;
}

const char *ixw_link_target(const void *item) { return ((const ix_target_link *)item)->target; }
const char *ixw_row_file(const void *item) { return ((const ix_target_row *)item)->file; }

// libraries: each function without a definition in the index, called or named by a unit
// of a linking target, and the first library of that target's link line that defines it.
// Unit by unit, each after it is merged (ixw_libraries_unit): the functions its calls and
// callbacks name (as tu_calls and tu_callbacks hold them) that have no definition so far and
// are not static, each paired with every target the unit links into, each pair asked once.
// A full index written while the units parse asks as each unit comes: a function a later
// unit defines loses its rows at the end, and a name no function row had yet when its unit
// came is asked then (ixw_libraries_end), and so is a pair an archive would answer (ask), so
// the rows are those of asking after every unit.

// A (function row id, n) pair as one map key, n a target's first link or a library's number:
// a target's units call the same library functions (printf, MPI_Allreduce) many times over,
// and each pair is asked once. 0 (not a key) for a pair the key cannot hold: asked each time
// (the table's UNIQUE(function_id, target) keeps one row).
static uint64_t pair_key(long long id, int n) {
    if (id < 0 || id >= 1LL << 43 || n < 0 || n + 1 >= 1 << 20) return 0;
    return (uint64_t)id << 20 | (uint64_t)(n + 1);
}

struct lib_miss {  // a name of unit's calls asked at the end (ixw_libraries_end)
    size_t unit;
    const char *usr;
};

int ixw_libraries_begin(writer *w, ixw_libraries *l, const ix_compdb *db, const ix_targets *targets) {
    memset(l, 0, sizeof *l);
    l->targets = targets;
    ix_libs_init(&l->libs);
    tb_vec_init(&l->early, sizeof(int), "functions given library rows");
    tb_vec_init(&l->missed, sizeof(struct lib_miss), "names asked at the end");
    if (!targets || !targets->links.len) return 0;  // nothing links: no rows
    l->active = 1;
    l->lib_of = tb_xcalloc(targets->links.len, sizeof *l->lib_of, "link libraries");
    l->archive = tb_xcalloc(targets->links.len, 1, "link libraries");
    for (size_t i = 0; i < targets->links.len; i++) {
        const char *lib = TB_VEC_AT(&targets->links, ix_target_link, i).library;
        size_t n = strlen(lib);
        l->lib_of[i] = ix_lib_number(&l->libs, lib);
        l->archive[i] = n > 2 && !strcmp(lib + n - 2, ".a");
    }
    tb_strmap first_link, unit_of, seen;  // target -> its first link; unit path -> index; "target\nunit"
    tb_strmap_init(&first_link);
    tb_strmap_init(&unit_of);
    tb_strmap_init(&seen);
    l->next_link = ixw_chain(&targets->links, ixw_link_target, &first_link);
    for (size_t i = 0; i < db->ntus; i++)
        if (!tb_strmap_get(&unit_of, db->tus[i].file)) tb_strmap_put(&unit_of, db->tus[i].file, (int)i);
    // each unit's targets (their first links), a target listing the unit twice once
    size_t n = targets->rows.len;
    int *unit = tb_xcalloc(n ? n : 1, sizeof *unit, "target rows' units");
    int *first = tb_xcalloc(n ? n : 1, sizeof *first, "target rows' links");
    l->chain_at = tb_xcalloc(db->ntus + 1, sizeof *l->chain_at, "units' targets");
    for (size_t i = 0; i < n; i++) {
        const ix_target_row *t = &TB_VEC_AT(&targets->rows, ix_target_row, i);
        int *u = tb_strmap_get(&unit_of, t->file), *f = tb_strmap_get(&first_link, t->target);
        unit[i] = -1;
        if (!u || !f) continue;
        const char *key = tb_pool_printf(&w->pool, "%s\n%s", t->target, t->file);
        if (tb_strmap_get(&seen, key)) continue;
        tb_strmap_put(&seen, key, 1);
        unit[i] = *u, first[i] = *f;
        l->chain_at[*u + 1]++;
    }
    for (size_t u = 0; u < db->ntus; u++) l->chain_at[u + 1] += l->chain_at[u];
    l->chains = tb_xcalloc(l->chain_at[db->ntus] + 1, sizeof *l->chains, "units' targets");
    size_t *fill = tb_xcalloc(db->ntus + 1, sizeof *fill, "units' targets");
    for (size_t i = 0; i < n; i++)
        if (unit[i] >= 0) l->chains[l->chain_at[unit[i]] + fill[unit[i]]++] = first[i];
    free(fill);
    free(unit);
    free(first);
    tb_strmap_free(&seen);
    tb_strmap_free(&unit_of);
    tb_strmap_free(&first_link);
    return ixw_prep(w, &l->ins, "INSERT OR IGNORE INTO libraries(function_id, target, library) VALUES(?,?,?)");
}

// The first link of the chain starting at link i whose library defines the function, or -1.
static int defining_link(ixw_libraries *l, const struct finfo *fi, int i) {
    for (; i >= 0; i = l->next_link[i]) {
        uint64_t key = pair_key(fi->id, l->lib_of[i]);
        int *known = key ? tb_u64map_get(&l->defines, key) : NULL;
        int yes = known ? *known == 1 : ix_lib_defines_at(&l->libs, l->lib_of[i], fi->name);
        if (key && !known) tb_u64map_put(&l->defines, key, yes ? 1 : 2);
        if (yes) return i;
    }
    return -1;
}

// Function row slot (a candidate) with every target of unit u: the first library defining it.
// Asked while the units are still coming (early), a pair whose library is a static archive
// waits for the end instead (l->missed): an archive on a project's link line is mostly the
// project's own (libtb_engine.a), built from units a later one of which defines the function,
// and its row would be taken back then (2026-12-07, this project: 11,665 of the 36,393 rows
// inserted, 380 functions'). The rows are the same either way: at the end it is asked only
// while still without a definition. *waits (early): 1 when a pair waits.
static int ask(writer *w, ixw_libraries *l, size_t u, int slot, int *waits) {
    const struct finfo *fi = &TB_VEC_AT(&w->finfo, struct finfo, slot);
    int given = 0;
    for (size_t c = l->chain_at[u]; c < l->chain_at[u + 1]; c++) {
        uint64_t pair = pair_key(fi->id, l->chains[c]);
        if (pair && tb_u64map_get(&l->asked, pair)) continue;  // the target's other units name it too
        int i = defining_link(l, fi, l->chains[c]);
        if (waits && i >= 0 && l->archive[i]) {
            *waits = 1;  // not marked asked: the end asks it
            continue;
        }
        if (pair) tb_u64map_put(&l->asked, pair, 1);
        if (i < 0) continue;
        const ix_target_link *link = &TB_VEC_AT(&l->targets->links, ix_target_link, (size_t)i);
        sqlite3_bind_int64(l->ins, 1, fi->id);
        ixw_bind_text(l->ins, 2, link->target);
        ixw_bind_text(l->ins, 3, link->library);
        if (ixw_step(w, l->ins, "inserting a library")) return -1;
        given = 1;
    }
    if (given && !tb_u64map_get(&l->given, (uint64_t)fi->id + 1)) {  // taken back if a later unit defines it
        tb_u64map_put(&l->given, (uint64_t)fi->id + 1, 1);
        *(int *)tb_vec_push(&l->early) = slot;
    }
    return 0;
}

int ixw_libraries_unit(writer *w, ixw_libraries *l, size_t u, const ix_result *r) {
    if (!l->active || l->chain_at[u] == l->chain_at[u + 1]) return 0;
    tb_strmap seen;
    tb_strmap_init(&seen);
    int rc = 0;
    for (size_t j = 0; j < r->calls.len + r->callbacks.len && !rc; j++) {
        const char *usr = j < r->calls.len ? TB_VEC_AT(&r->calls, ix_call, j).callee_usr
                                           : TB_VEC_AT(&r->callbacks, ix_callback, j - r->calls.len).target_usr;
        if (!usr || tb_strmap_get(&seen, usr)) continue;
        tb_strmap_put(&seen, usr, 1);
        int *slot = tb_strmap_get(&w->funcs, usr);
        if (!slot) {
            *(struct lib_miss *)tb_vec_push(&l->missed) = (struct lib_miss){u, usr};
            continue;
        }
        const struct finfo *fi = &TB_VEC_AT(&w->finfo, struct finfo, *slot);
        int waits = 0;
        if (!fi->def_file && !fi->is_static) rc = ask(w, l, u, *slot, &waits);
        if (waits) *(struct lib_miss *)tb_vec_push(&l->missed) = (struct lib_miss){u, usr};
    }
    tb_strmap_free(&seen);
    return rc;
}

int ixw_libraries_end(writer *w, ixw_libraries *l) {
    if (!l->active) return 0;
    for (size_t k = 0; k < l->missed.len; k++) {  // names without a row when their unit came; archive pairs
        const struct lib_miss *m = &TB_VEC_AT(&l->missed, struct lib_miss, k);
        int *slot = tb_strmap_get(&w->funcs, m->usr);
        if (!slot) continue;
        const struct finfo *fi = &TB_VEC_AT(&w->finfo, struct finfo, *slot);
        if (!fi->def_file && !fi->is_static && ask(w, l, m->unit, *slot, NULL)) return -1;
    }
    sqlite3_stmt *del = NULL;
    int rc = 0;
    for (size_t k = 0; k < l->early.len && !rc; k++) {  // defined by a unit after the one that named it
        const struct finfo *fi = &TB_VEC_AT(&w->finfo, struct finfo, TB_VEC_AT(&l->early, int, k));
        if (!fi->def_file) continue;
        if (!del && ixw_prep(w, &del, "DELETE FROM libraries WHERE function_id = ?")) return -1;
        sqlite3_bind_int64(del, 1, fi->id);
        rc = ixw_step(w, del, "taking back a library");
    }
    sqlite3_finalize(del);
    return rc;
}

void ixw_libraries_free(ixw_libraries *l) {
    sqlite3_finalize(l->ins);
    ix_libs_free(&l->libs);
    free(l->lib_of);
    free(l->archive);
    free(l->next_link);
    free(l->chain_at);
    free(l->chains);
    tb_u64map_free(&l->asked);
    tb_u64map_free(&l->defines);
    tb_u64map_free(&l->given);
    tb_vec_free(&l->early);
    tb_vec_free(&l->missed);
    memset(l, 0, sizeof *l);
}

int ixw_write_libraries(writer *w, const ix_compdb *db, const ix_result *results, const ix_targets *targets) {
    ixw_libraries l;
    int rc = ixw_libraries_begin(w, &l, db, targets);
    for (size_t u = 0; u < db->ntus && !rc; u++) rc = ixw_libraries_unit(w, &l, u, &results[u]);
    if (!rc) rc = ixw_libraries_end(w, &l);
    ixw_libraries_free(&l);
    return rc;
}
