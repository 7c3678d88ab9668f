// index_update_inferred.c — whether link units inferred from the units' symbols stand through
// an update in place (index_update_internal.h, ixu_inferred_link_units_stand): the parsed units'
// old and new facts against the other units', as index_units.h's check asks for them.
#include <stdlib.h>
#include <string.h>

#include "core/xalloc.h"
#include "index_units.h"
#include "index_update_internal.h"

// Who names a key: a map from the key to the one unit that does, -1 when several do.
static void note(tb_strmap *m, const char *key, int who) {
    int *v = tb_strmap_get(m, key);
    if (!v)
        tb_strmap_put(m, key, who);
    else if (*v != who)
        *v = -1;
}

static int named_by_another(const tb_strmap *m, const char *key, int self) {
    const int *v = tb_strmap_get(m, key);
    return v && *v != self;
}

// "d" or "r" and a USR: the keys of the parsed units' new facts.
static char *kind_key(char kind, const char *usr) {
    size_t n = strlen(usr) + 2;
    char *key = tb_xmalloc(n, "symbol key");
    key[0] = kind;
    memcpy(key + 1, usr, n - 1);
    return key;
}

// The other units' external symbols, for one parsed unit's check: every unit's rows here (a
// parsed unit's still its old facts), read once, and the parsed units' new facts.
typedef struct elsewhere {
    updater *u;
    int k;              // the parsed unit asked about (todo order)
    int tu_id;          // its files.id
    tb_strmap news;     // kind_key -> the parsed unit (k) whose new facts name it, -1: several
    tb_strmap defined;  // USR -> the files.id of the unit whose rows define it, -1: several
    tb_strmap used;     // USR -> the unit whose rows refer to it, -1: several (read when first asked)
    int used_read;
    int failed;  // a read failed: -1 (err), or 1 (a malformed record: u->why says so)
} elsewhere;

// A read's outcome kept: the first that failed.
static void read_into(elsewhere *e, int rc) {
    if (rc && !e->failed) e->failed = rc < 0 ? -1 : 1;
}

static int read_pairs(elsewhere *e, tb_strmap *m, const char *sql) {
    sqlite3_stmt *st = NULL;
    if (ixw_prep(&e->u->w, &st, sql)) return -1;
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW)
        note(m, (const char *)sqlite3_column_text(st, 0), sqlite3_column_int(st, 1));
    sqlite3_finalize(st);
    return rc == SQLITE_DONE ? 0 : ixu_fail(e->u, "reading the units' external symbols");
}

// The functions a unit's packed records refer to (calls, callbacks, the variables it refers
// to), or those it defines (its symbols).
static int note_used(void *arg, long long tu_id, const ix_result *f) {
    elsewhere *e = arg;
    for (size_t i = 0; i < f->calls.len; i++) {
        const char *usr = TB_VEC_AT(&f->calls, ix_call, i).callee_usr;
        if (usr) note(&e->used, usr, (int)tu_id);
    }
    for (size_t i = 0; i < f->callbacks.len; i++) {
        const char *usr = TB_VEC_AT(&f->callbacks, ix_callback, i).target_usr;
        if (usr) note(&e->used, usr, (int)tu_id);
    }
    for (size_t i = 0; i < f->syms.len; i++)
        if (!TB_VEC_AT(&f->syms, ix_sym, i).defines) note(&e->used, TB_VEC_AT(&f->syms, ix_sym, i).usr, (int)tu_id);
    return 0;
}

static int note_defined(void *arg, long long tu_id, const ix_result *f) {
    elsewhere *e = arg;
    for (size_t i = 0; i < f->syms.len; i++)
        if (TB_VEC_AT(&f->syms, ix_sym, i).defines) note(&e->defined, TB_VEC_AT(&f->syms, ix_sym, i).usr, (int)tu_id);
    return 0;
}

static int defined_elsewhere(void *ctx, const char *usr) {
    const elsewhere *e = ctx;
    char *key = kind_key('d', usr);
    int yes = named_by_another(&e->defined, usr, e->tu_id) || named_by_another(&e->news, key, e->k);
    free(key);
    return yes;
}

static int referenced_elsewhere(void *ctx, const char *usr) {
    elsewhere *e = ctx;
    if (!e->used_read) {
        e->used_read = 1;
        read_into(e, read_pairs(e, &e->used,
                                "SELECT function_usr, tu_id FROM tu_field_targets WHERE function_usr IS NOT NULL"));
        static const ix_unit_table tables[] = {IX_TU_CALLS, IX_TU_CALLBACKS, IX_TU_SYMBOLS};
        for (size_t t = 0; t < sizeof tables / sizeof *tables && !e->failed; t++)
            read_into(e, ixu_scan_packed(e->u, tables[t], NULL, NULL, note_used, e));
    }
    char *key = kind_key('r', usr);
    int yes = e->failed || named_by_another(&e->used, usr, e->tu_id) || named_by_another(&e->news, key, e->k);
    free(key);
    return yes;  // (a failed read: as if another unit did, so the update does not apply)
}

static void note_new(void *ctx, char kind, const char *usr, const char *name) {
    elsewhere *e = ctx;
    char *key = kind_key(kind, usr);
    note(&e->news, key, e->k);
    free(key);
}

int ixu_inferred_link_units_stand(updater *u, const ix_result *results, const ix_result *old, const size_t *todo,
                                  size_t ntodo) {
    elsewhere e = {.u = u};
    tb_strmap_init(&e.news);
    tb_strmap_init(&e.defined);
    tb_strmap_init(&e.used);
    for (size_t k = 0; k < ntodo; k++) {
        e.k = (int)k;
        ix_unit_link_symbols(&results[todo[k]], note_new, &e);
    }
    read_into(&e, ixu_scan_packed(u, IX_TU_SYMBOLS, NULL, NULL, note_defined, &e));
    const char *why = NULL;
    ix_link_lookup look = {defined_elsewhere, referenced_elsewhere, &e};
    for (size_t k = 0; k < ntodo && !why && !e.failed; k++) {
        e.k = (int)k;
        e.tu_id = (int)todo[k] + 1;
        why = ix_units_link_facts_changed(&old[k], &results[todo[k]], &look);
    }
    tb_strmap_free(&e.news);
    tb_strmap_free(&e.defined);
    tb_strmap_free(&e.used);
    if (e.failed) return e.failed;  // (1: u->why says which record)
    if (why && !u->why) u->why = why;
    return why ? 1 : 0;
}
