// index_speculate.c — a re-index's first parses from the recorded command lines
// (index_speculate.h).
#include "index_speculate.h"

#include <sqlite3.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/xalloc.h"
#include "index_unit_rows.h"

// The recorded command line of previous unit u (its path from prev), into s->db; 0, or -1 when
// it has none or it does not unpack.
static int recorded_command(ix_spec *s, ix_prev *prev, sqlite3_stmt *st, const ix_prev_unit *u) {
    if (u->id <= 0 || (size_t)u->id >= prev->paths.len || !TB_VEC_AT(&prev->paths, const char *, u->id)) return -1;
    sqlite3_bind_int64(st, 1, u->id);
    ix_tu tu = {.file = tb_pool_dup(&s->db.pool, TB_VEC_AT(&prev->paths, const char *, u->id))};
    int rc = -1;
    if (sqlite3_step(st) == SQLITE_ROW && sqlite3_column_type(st, 0) == SQLITE_BLOB)
        rc = ix_command_unpack(sqlite3_column_blob(st, 0), (size_t)sqlite3_column_bytes(st, 0), &s->db.pool, &tu);
    sqlite3_reset(st);
    if (!rc) s->db.tus[s->db.ntus++] = tu;
    return rc;
}

void ix_spec_start(ix_spec *s, ix_prev *prev, const ix_options *opt) {
    memset(s, 0, sizeof *s);
    if (!prev->db || opt->jobs < 1) return;
    size_t n = 0;
    for (size_t i = 0; i < prev->list.len; i++) n += ix_prev_reparsed(&TB_VEC_AT(&prev->list, ix_prev_unit, i));
    sqlite3_stmt *st = NULL;
    if (n == 0 || n > (size_t)opt->jobs ||
        sqlite3_prepare_v2(prev->db, "SELECT command FROM tu_inputs WHERE tu_id = ?", -1, &st, NULL) != SQLITE_OK) {
        sqlite3_finalize(st);
        return;
    }
    s->db.tus = tb_xcalloc(n, sizeof *s->db.tus, "speculative units");
    for (size_t i = 0; i < prev->list.len; i++) {
        const ix_prev_unit *u = &TB_VEC_AT(&prev->list, ix_prev_unit, i);
        if (ix_prev_reparsed(u)) (void)recorded_command(s, prev, st, u);
    }
    sqlite3_finalize(st);
    if (!s->db.ntus) return;
    s->results = tb_xcalloc(s->db.ntus, sizeof *s->results, "speculative units' facts");
    s->list = tb_xcalloc(s->db.ntus, sizeof *s->list, "speculative units");
    s->unit = tb_xcalloc(s->db.ntus, sizeof *s->unit, "speculative units");
    for (size_t k = 0; k < s->db.ntus; k++) s->list[k] = k, s->unit[k] = SIZE_MAX;
    ix_work_init(&s->w, &s->db, opt, s->results, s->list, s->db.ntus);
    ix_workers_start(&s->w, opt->jobs);
    s->started = 1;
}

static int same_words(const char *const *a, int na, const char *const *b, int nb) {
    if (na != nb) return 0;
    for (int i = 0; i < na; i++)
        if (strcmp(a[i], b[i])) return 0;
    return 1;
}

// The same parse: every input of clang_parseTranslationUnit2 and of the fallback's retry.
static int same_command(const ix_tu *a, const ix_tu *b) {
    return !strcmp(a->file, b->file) && !strcmp(a->directory, b->directory) && !a->cuda == !b->cuda &&
           same_words(a->args, a->nargs, b->args, b->nargs) &&
           same_words(a->fallback, a->nfallback, b->fallback, b->nfallback);
}

size_t ix_spec_take(ix_spec *s, const ix_compdb *db, const size_t *todo, size_t ntodo, size_t *rest) {
    size_t nrest = 0;
    for (size_t j = 0; j < ntodo; j++) {
        const ix_tu *tu = &db->tus[todo[j]];
        size_t k = 0;
        while (k < s->db.ntus && !(s->unit[k] == SIZE_MAX && same_command(&s->db.tus[k], tu))) k++;
        if (k < s->db.ntus) {
            s->unit[k] = todo[j];
            s->taken++;
        } else {
            rest[nrest++] = todo[j];
        }
    }
    return nrest;
}

void ix_spec_finish(ix_spec *s, ix_result *results, ix_work *w) {
    if (!s->started) return;
    ix_workers_finish(&s->w, NULL, NULL);
    s->started = 0;
    for (size_t k = 0; k < s->db.ntus; k++) {
        if (s->unit[k] == SIZE_MAX) {
            ix_result_free(&s->results[k]);
            continue;
        }
        results[s->unit[k]] = s->results[k];
        memset(&s->results[k], 0, sizeof s->results[k]);
        if (!w) continue;
        pthread_mutex_lock(&w->mu);
        w->done[s->unit[k]] = 1;
        pthread_cond_broadcast(&w->cv);
        pthread_mutex_unlock(&w->mu);
    }
}

void ix_spec_free(ix_spec *s) {
    if (s->started) {  // a run that stopped before it took them: waited for, dropped
        for (size_t k = 0; k < s->db.ntus; k++) s->unit[k] = SIZE_MAX;
        ix_spec_finish(s, NULL, NULL);
    }
    if (s->results) ix_work_free(&s->w);
    free(s->results);
    free(s->list);
    free(s->unit);
    ix_compdb_free(&s->db);
    memset(s, 0, sizeof *s);
}
