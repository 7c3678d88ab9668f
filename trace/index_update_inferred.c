// index_update_inferred.c — whether link units inferred from the units' symbols stand through
// an update in place (index_update_internal.h, ixu_inferred_link_units_stand): the parsed units'
// old and new facts against the other units', as index_units.h's check asks for them.
#include <stdio.h>
#include <string.h>

#include "index_units.h"
#include "index_update_internal.h"

// The other units' external symbols, for one parsed unit k's check (index_units.h): their rows
// here (a parsed unit's still its old facts) and the other parsed units' new facts.
typedef struct elsewhere {
    updater *u;
    int k;                   // the parsed unit asked about
    long long tu_id;         // its files.id
    const tb_strmap *news;   // USR -> the parsed unit whose new facts name it, -1: several ('d' + 'r' keys)
    tb_strmap defined;       // USRs the other units' rows here define
    sqlite3_stmt *refq;
    int failed;
} elsewhere;

static int named_by_another(const elsewhere *e, char kind, const char *usr) {
    char key[8 + 1024];
    if (snprintf(key, sizeof key, "%c%s", kind, usr) >= (int)sizeof key) return 1;  // (too long: as if it were)
    const int *v = tb_strmap_get(e->news, key);
    return v && *v != e->k;
}

static int defined_elsewhere(void *ctx, const char *usr) {
    const elsewhere *e = ctx;
    return tb_strmap_get(&e->defined, usr) || named_by_another(e, 'd', usr);
}

static int referenced_elsewhere(void *ctx, const char *usr) {
    elsewhere *e = ctx;
    if (named_by_another(e, 'r', usr)) return 1;
    sqlite3_reset(e->refq);
    sqlite3_bind_text(e->refq, 1, usr, -1, SQLITE_STATIC);
    sqlite3_bind_int64(e->refq, 2, e->tu_id);
    int rc = sqlite3_step(e->refq);
    if (rc != SQLITE_ROW && rc != SQLITE_DONE) e->failed = 1;
    return rc != SQLITE_DONE;  // (a failed query: as if it were, so the update does not apply)
}

typedef struct new_names {
    tb_strmap *m;
    int k;
} new_names;

static void note_new(void *ctx, char kind, const char *usr, const char *name) {
    new_names *n = ctx;
    char key[8 + 1024];
    if (snprintf(key, sizeof key, "%c%s", kind, usr) >= (int)sizeof key) return;  // (named_by_another: always)
    int *v = tb_strmap_get(n->m, key);
    if (!v)
        tb_strmap_put(n->m, key, n->k);
    else if (*v != n->k)
        *v = -1;
}

int ixu_inferred_link_units_stand(updater *u, const ix_result *results, const ix_result *old, const size_t *todo,
                                     size_t ntodo) {
    tb_strmap news;
    tb_strmap_init(&news);
    for (size_t k = 0; k < ntodo; k++) ix_unit_link_symbols(&results[todo[k]], note_new, &(new_names){&news, (int)k});
    elsewhere e = {.u = u, .news = &news};
    const char *why = NULL;
    int rc = ixw_prep(&u->w, &e.refq,
                      "SELECT 1 FROM tu_calls WHERE callee_usr = ?1 AND tu_id <> ?2 UNION ALL SELECT 1 FROM tu_callbacks"
                      " WHERE target_usr = ?1 AND tu_id <> ?2 UNION ALL SELECT 1 FROM tu_field_targets WHERE"
                      " function_usr = ?1 AND tu_id <> ?2 UNION ALL SELECT 1 FROM tu_symbols WHERE usr = ?1 AND"
                      " defines = 0 AND tu_id <> ?2 LIMIT 1");
    sqlite3_stmt *defs = NULL;
    if (!rc) rc = ixw_prep(&u->w, &defs, "SELECT usr FROM tu_symbols WHERE defines = 1 AND tu_id <> ?1");
    for (size_t k = 0; k < ntodo && !rc && !why && !e.failed; k++) {
        e.k = (int)k;
        e.tu_id = (long long)todo[k] + 1;
        tb_strmap_init(&e.defined);
        sqlite3_reset(defs);
        sqlite3_bind_int64(defs, 1, e.tu_id);
        int step;
        while ((step = sqlite3_step(defs)) == SQLITE_ROW) tb_strmap_put(&e.defined, (const char *)sqlite3_column_text(defs, 0), 1);
        if (step != SQLITE_DONE) e.failed = 1;
        ix_link_lookup look = {defined_elsewhere, referenced_elsewhere, &e};
        if (!e.failed) why = ix_units_link_facts_changed(&old[k], &results[todo[k]], &look);
        tb_strmap_free(&e.defined);
    }
    sqlite3_finalize(e.refq);
    sqlite3_finalize(defs);
    tb_strmap_free(&news);
    if (rc || e.failed) return rc ? rc : ixu_fail(u, "reading the units' external symbols");
    if (why && !u->why) u->why = why;
    return why ? 1 : 0;
}
