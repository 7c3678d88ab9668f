// index_unit_keys.c — see index_unit_keys.h.
#include <stdlib.h>
#include <string.h>

#include "core/xalloc.h"
#include "index_unit_keys.h"

static void group(by_caller *g, size_t nfuncs, const tb_vec *facts, size_t size) {
    g->start = tb_xcalloc(nfuncs + 2, sizeof *g->start, "facts by caller");
    g->items = tb_xcalloc(facts->len + 1, sizeof *g->items, "facts by caller");
    for (size_t i = 0; i < facts->len; i++) {
        int c = *(const int *)((const char *)facts->items + i * size);  // `caller` is the first member
        if (c >= 0 && (size_t)c < nfuncs) g->start[c + 1]++;
    }
    for (size_t j = 0; j < nfuncs; j++) g->start[j + 1] += g->start[j];
    size_t *fill = tb_xcalloc(nfuncs + 1, sizeof *fill, "facts by caller");
    for (size_t i = 0; i < facts->len; i++) {
        int c = *(const int *)((const char *)facts->items + i * size);
        if (c >= 0 && (size_t)c < nfuncs) g->items[g->start[c] + fill[c]++] = i;
    }
    free(fill);
}

static void group_free(by_caller *g) {
    free(g->start);
    free(g->items);
}

#define S(x) ((x) ? (x) : "\x01")  // NULL, told apart from ""

void ix_key_unit(ix_unit_keys *k, const ix_result *r) {
    memset(k, 0, sizeof *k);
    k->r = r;
    size_t nf = r->funcs.len;
    group(&k->calls, nf, &r->calls, sizeof(ix_call));
    group(&k->ranges, nf, &r->ranges, sizeof(ix_range));
    group(&k->callbacks, nf, &r->callbacks, sizeof(ix_callback));
    tb_strmap_init(&k->sig);
    tb_strmap_init(&k->ft);
    tb_strmap_init(&k->named);
    tb_vec_init(&k->sigs, sizeof(const char *), "unit signatures");
    tb_vec_init(&k->fts, sizeof(const char *), "unit field targets");
    tb_buf b = {0};
    for (size_t j = 0; j < nf; j++) {
        const ix_func *f = &TB_VEC_AT(&r->funcs, ix_func, j);
        int *slot = tb_strmap_get(&k->sig, f->usr);
        b.len = 0;
        if (slot) tb_buf_printf(&b, "%s", TB_VEC_AT(&k->sigs, const char *, *slot));
        tb_buf_printf(&b, "F|%s|%s|%u|%u|%u|%u|%d|%d|%d\n", f->name, S(f->file), f->line, f->col, f->end_line,
                      f->end_col, f->is_static, f->is_def, f->main_like);
        if (f->is_def) {
            for (size_t i = k->calls.start[j]; i < k->calls.start[j + 1]; i++) {
                const ix_call *c = &TB_VEC_AT(&r->calls, ix_call, k->calls.items[i]);
                tb_buf_printf(&b, "C|%s|%s|%s|%s|%u|%u|%s|%s|%s\n", S(c->callee_usr), S(c->callee_name), S(c->field),
                              S(c->file), c->line, c->col, S(c->in_macro), S(c->resolution), S(c->candidates));
            }
            for (size_t i = k->ranges.start[j]; i < k->ranges.start[j + 1]; i++) {
                const ix_range *g = &TB_VEC_AT(&r->ranges, ix_range, k->ranges.items[i]);
                tb_buf_printf(&b, "R|%s|%s|%s|%u|%u\n", S(g->kind), S(g->name), S(g->file), g->line, g->col);
            }
            for (size_t i = k->callbacks.start[j]; i < k->callbacks.start[j + 1]; i++) {
                const ix_callback *c = &TB_VEC_AT(&r->callbacks, ix_callback, k->callbacks.items[i]);
                tb_buf_printf(&b, "B|%s|%s|%s|%u|%u\n", S(c->target_usr), S(c->passed_to), S(c->file), c->line, c->col);
            }
        }
        const char *s = tb_pool_dup(&k->pool, b.s ? b.s : "");
        if (slot) {
            TB_VEC_AT(&k->sigs, const char *, *slot) = s;
        } else {
            *(const char **)tb_vec_push(&k->sigs) = s;
            tb_strmap_put(&k->sig, f->usr, (int)k->sigs.len - 1);
        }
    }
    for (size_t i = 0; i < r->ftargets.len; i++) {
        const ix_ftarget *t = &TB_VEC_AT(&r->ftargets, ix_ftarget, i);
        b.len = 0;
        tb_buf_printf(&b, "%s\x1f%s\x1f%s", S(t->record), S(t->field), S(t->fn_usr));
        if (tb_strmap_get(&k->ft, b.s)) continue;  // the first row of the key is the one merged
        tb_strmap_put(&k->ft, b.s, (int)k->fts.len);
        *(const char **)tb_vec_push(&k->fts) = tb_pool_printf(&k->pool, "%s|%u", S(t->file), t->line);
    }
    for (size_t i = 0; i < r->calls.len; i++) {
        const char *c = TB_VEC_AT(&r->calls, ix_call, i).callee_usr;
        if (c) tb_strmap_put(&k->named, c, 1);
    }
    for (size_t i = 0; i < r->callbacks.len; i++) {
        const char *c = TB_VEC_AT(&r->callbacks, ix_callback, i).target_usr;
        if (c) tb_strmap_put(&k->named, c, 1);
    }
    tb_buf_free(&b);
}

void ix_key_free(ix_unit_keys *k) {
    group_free(&k->calls);
    group_free(&k->ranges);
    group_free(&k->callbacks);
    tb_strmap_free(&k->sig);
    tb_strmap_free(&k->ft);
    tb_strmap_free(&k->named);
    tb_vec_free(&k->sigs);
    tb_vec_free(&k->fts);
    tb_pool_free(&k->pool);
}

const char *ix_sig_of(const ix_unit_keys *k, const char *usr) {
    int *i = tb_strmap_get(&k->sig, usr);
    return i ? TB_VEC_AT(&k->sigs, const char *, *i) : NULL;
}

int ix_differs(const char *a, const char *b) { return !a || !b ? a != b : strcmp(a, b) != 0; }

static int same(const char *a, const char *b) { return a == b || (a && b && !strcmp(a, b)); }

static int row_equal(ix_unit_table t, const void *x, const void *y) {
    switch (t) {
    case IX_TU_DEPS: {
        const ix_dep *a = x, *b = y;
        return same(a->path, b->path) && same(a->hash ? a->hash : "-", b->hash ? b->hash : "-");
    }
    case IX_TU_FUNCTIONS: {
        const ix_func *a = x, *b = y;
        return same(a->usr, b->usr) && same(a->name, b->name) && same(a->file, b->file) && a->line == b->line &&
               a->col == b->col && a->end_line == b->end_line && a->end_col == b->end_col &&
               a->is_static == b->is_static && a->is_def == b->is_def && a->main_like == b->main_like;
    }
    case IX_TU_CALLS: {
        const ix_call *a = x, *b = y;
        return a->caller == b->caller && same(a->callee_usr, b->callee_usr) && same(a->callee_name, b->callee_name) &&
               same(a->field, b->field) && same(a->file, b->file) && a->line == b->line && a->col == b->col &&
               same(a->in_macro, b->in_macro) && same(a->resolution, b->resolution) &&
               same(a->candidates, b->candidates);
    }
    case IX_TU_FIELD_TARGETS: {
        const ix_ftarget *a = x, *b = y;
        return same(a->record, b->record) && same(a->field, b->field) && same(a->fn_usr, b->fn_usr) &&
               same(a->file, b->file) && a->line == b->line;
    }
    case IX_TU_CALLBACKS: {
        const ix_callback *a = x, *b = y;
        return a->caller == b->caller && same(a->target_usr, b->target_usr) && same(a->passed_to, b->passed_to) &&
               same(a->file, b->file) && a->line == b->line && a->col == b->col;
    }
    case IX_TU_RANGE_SITES: {
        const ix_range *a = x, *b = y;
        return a->caller == b->caller && same(a->kind, b->kind) && same(a->name, b->name) && same(a->file, b->file) &&
               a->line == b->line && a->col == b->col;
    }
    case IX_TU_SYMBOLS: {
        const ix_sym *a = x, *b = y;
        return same(a->usr, b->usr) && same(a->name, b->name) && a->kind == b->kind && a->defines == b->defines;
    }
    default: return 0;
    }
}

static const tb_vec *rows_of(const ix_result *r, ix_unit_table t) {
    switch (t) {
    case IX_TU_DEPS: return &r->deps;
    case IX_TU_FUNCTIONS: return &r->funcs;
    case IX_TU_CALLS: return &r->calls;
    case IX_TU_FIELD_TARGETS: return &r->ftargets;
    case IX_TU_CALLBACKS: return &r->callbacks;
    case IX_TU_RANGE_SITES: return &r->ranges;
    default: return &r->syms;
    }
}

int ix_unit_rows_equal(const ix_result *a, const ix_result *b, ix_unit_table t) {
    if (t == IX_TU_INPUTS) return 0;  // (not compared: see index_unit_keys.h)
    const tb_vec *va = rows_of(a, t), *vb = rows_of(b, t);
    if (va->len != vb->len) return 0;
    for (size_t i = 0; i < va->len; i++)
        if (!row_equal(t, (const char *)va->items + i * va->size, (const char *)vb->items + i * vb->size)) return 0;
    return 1;
}
