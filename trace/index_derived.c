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

// libraries: each function without a definition in the index, called or named by a unit
// of a linking target, and the first library of that target's link line that defines it.
// From the units' facts in memory (each unit's own calls and callbacks, as tu_calls and
// tu_callbacks hold them): each unit's candidates once (a unit links into many targets), then
// the pairs (function row, target) in (id, target) order, each once.
struct lib_pair {
    long long id;
    const char *name;
    int target;  // index of the target's first link (its link chain)
};

static int lib_pair_cmp(const void *a, const void *b) {
    const struct lib_pair *x = a, *y = b;
    if (x->id != y->id) return x->id < y->id ? -1 : 1;
    return (x->target > y->target) - (x->target < y->target);
}

// A (function row id, target) pair as one map key: a target's units call the same library
// functions (printf, MPI_Allreduce) many times over, and each pair is listed once. 0 (not a
// key) for a pair the key cannot hold: the sort's dedup keeps that one once. (Also a
// (function row id, library number) pair: its lookup asked once; 0: asked each time.)
static uint64_t pair_key(long long id, int target) {
    if (id < 0 || id >= 1LL << 43 || target < 0 || target + 1 >= 1 << 20) return 0;
    return (uint64_t)id << 20 | (uint64_t)(target + 1);
}

// The unit's functions without a definition that are not static, each once (finfo indexes).
static void lib_candidates(writer *w, const ix_result *r, tb_vec *out) {
    tb_strmap seen;
    tb_strmap_init(&seen);
    for (size_t j = 0; j < r->calls.len + r->callbacks.len; j++) {
        const char *usr = j < r->calls.len ? TB_VEC_AT(&r->calls, ix_call, j).callee_usr
                                           : TB_VEC_AT(&r->callbacks, ix_callback, j - r->calls.len).target_usr;
        int *slot = usr ? tb_strmap_get(&w->funcs, usr) : NULL;
        if (!slot || tb_strmap_get(&seen, usr)) continue;
        tb_strmap_put(&seen, usr, 1);
        const struct finfo *fi = &TB_VEC_AT(&w->finfo, struct finfo, *slot);
        if (!fi->def_file && !fi->is_static) *(int *)tb_vec_push(out) = *slot;
    }
    tb_strmap_free(&seen);
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

int ixw_write_libraries(writer *w, const ix_compdb *db, const ix_result *results, const ix_targets *targets) {
    if (!targets || !targets->links.len) return 0;
    tb_strmap unit_of, first_link;  // unit path -> index in db->tus; target -> its first link
    tb_strmap_init(&unit_of);
    tb_strmap_init(&first_link);
    for (size_t i = 0; i < db->ntus; i++)
        if (!tb_strmap_get(&unit_of, db->tus[i].file)) tb_strmap_put(&unit_of, db->tus[i].file, (int)i);
    int *next_link = ixw_chain(&targets->links, ixw_link_target, &first_link);  // the target's next link
    tb_vec *cands = tb_xcalloc(db->ntus ? db->ntus : 1, sizeof *cands, "library candidates");  // per unit, lazily
    char *have = tb_xcalloc(db->ntus ? db->ntus : 1, 1, "library candidates");
    tb_vec pairs;
    tb_vec_init(&pairs, sizeof(struct lib_pair), "library candidates");
    tb_strmap seen;  // "target\nunit": a target row listed twice
    tb_strmap_init(&seen);
    tb_u64map listed = {0};  // pair_key → 1: the pairs already in pairs
    for (size_t i = 0; i < targets->rows.len; i++) {
        const ix_target_row *t = &TB_VEC_AT(&targets->rows, ix_target_row, i);
        int *u = tb_strmap_get(&unit_of, t->file), *first = tb_strmap_get(&first_link, t->target);
        if (!u || !first) continue;
        const char *key = tb_pool_printf(&w->pool, "%s\n%s", t->target, t->file);
        if (tb_strmap_get(&seen, key)) continue;
        tb_strmap_put(&seen, key, 1);
        if (!have[*u]) {
            tb_vec_init(&cands[*u], sizeof(int), "library candidates");
            lib_candidates(w, &results[*u], &cands[*u]);
            have[*u] = 1;
        }
        for (size_t j = 0; j < cands[*u].len; j++) {
            const struct finfo *fi = &TB_VEC_AT(&w->finfo, struct finfo, TB_VEC_AT(&cands[*u], int, j));
            uint64_t pair = pair_key(fi->id, *first);
            if (tb_u64map_get(&listed, pair)) continue;  // the target's other units call it too
            tb_u64map_put(&listed, pair, 1);
            *(struct lib_pair *)tb_vec_push(&pairs) = (struct lib_pair){fi->id, fi->name, *first};
        }
    }
    tb_strmap_free(&seen);
    tb_u64map_free(&listed);
    if (pairs.len) qsort(pairs.items, pairs.len, sizeof(struct lib_pair), lib_pair_cmp);
    // Each link's library by its number in libs; whether a library defines a function, asked
    // once per pair (function row, library): the targets' link lines name the same libraries
    // (this project: 245,000 lookups along the chains, 12,000 distinct).
    ix_libs libs;
    ix_libs_init(&libs);
    int *lib_of = tb_xcalloc(targets->links.len, sizeof *lib_of, "link libraries");
    for (size_t i = 0; i < targets->links.len; i++)
        lib_of[i] = ix_lib_number(&libs, TB_VEC_AT(&targets->links, ix_target_link, i).library);
    tb_u64map defines = {0};  // pair_key(function row, library number) -> 1 defines, 2 does not
    sqlite3_stmt *ins = NULL;
    int rc = -1;
    if (ixw_prep(w, &ins, "INSERT OR IGNORE INTO libraries(function_id, target, library) VALUES(?,?,?)")) goto out;
    for (size_t k = 0; k < pairs.len; k++) {
        const struct lib_pair *p = &TB_VEC_AT(&pairs, struct lib_pair, k);
        if (k && !lib_pair_cmp(p, &TB_VEC_AT(&pairs, struct lib_pair, k - 1))) continue;
        for (int i = p->target; i >= 0; i = next_link[i]) {
            const ix_target_link *l = &TB_VEC_AT(&targets->links, ix_target_link, (size_t)i);
            uint64_t key = pair_key(p->id, lib_of[i]);
            int *known = key ? tb_u64map_get(&defines, key) : NULL;
            int yes = known ? *known == 1 : ix_lib_defines_at(&libs, lib_of[i], p->name);
            if (key && !known) tb_u64map_put(&defines, key, yes ? 1 : 2);
            if (!yes) continue;
            sqlite3_bind_int64(ins, 1, p->id);
            ixw_bind_text(ins, 2, l->target);
            ixw_bind_text(ins, 3, l->library);
            if (ixw_step(w, ins, "inserting a library")) goto out;
            break;
        }
    }
    rc = 0;
out:
    sqlite3_finalize(ins);
    tb_u64map_free(&defines);
    free(lib_of);
    ix_libs_free(&libs);
    tb_vec_free(&pairs);
    for (size_t i = 0; i < db->ntus; i++)
        if (have[i]) tb_vec_free(&cands[i]);
    free(cands);
    free(have);
    free(next_link);
    tb_strmap_free(&unit_of);
    tb_strmap_free(&first_link);
    return rc;
}
