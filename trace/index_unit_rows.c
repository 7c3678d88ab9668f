// index_unit_rows.c — a unit's rows of one tu_* table as one record (index_unit_rows.h).
#include "index_unit_rows.h"

#include <limits.h>
#include <string.h>

int ix_rows_packed(ix_unit_table t) {
    return t == IX_TU_DEPS || t == IX_TU_FUNCTIONS || t == IX_TU_CALLS || t == IX_TU_CALLBACKS ||
           t == IX_TU_RANGE_SITES || t == IX_TU_SYMBOLS;
}

// ---- packing ----

typedef struct packer {
    tb_buf *out;
    long long (*file_id)(void *ctx, const char *path);
    void *ctx;
} packer;

static void put_u(packer *p, unsigned long long v) {
    char b[10];
    size_t n = 0;
    do {
        b[n++] = (char)((v & 0x7f) | (v > 0x7f ? 0x80 : 0));
        v >>= 7;
    } while (v);
    tb_buf_add(p->out, b, n);
}

static void put_text(packer *p, const char *s) {
    if (!s) {
        put_u(p, 0);
        return;
    }
    size_t n = strlen(s);
    put_u(p, (unsigned long long)n + 1);
    tb_buf_add(p->out, s, n);
}

static void put_file(packer *p, const char *path) {
    long long id = path ? p->file_id(p->ctx, path) : 0;
    put_u(p, id > 0 ? (unsigned long long)id : 0);
}

size_t ix_rows_pack(tb_buf *out, const ix_result *r, ix_unit_table t,
                    long long (*file_id)(void *ctx, const char *path), void *ctx) {
    packer p = {out, file_id, ctx};
    const tb_vec *rows = t == IX_TU_DEPS ? &r->deps : t == IX_TU_FUNCTIONS ? &r->funcs
                       : t == IX_TU_CALLS ? &r->calls : t == IX_TU_CALLBACKS ? &r->callbacks
                       : t == IX_TU_RANGE_SITES ? &r->ranges : t == IX_TU_SYMBOLS ? &r->syms : NULL;
    if (!rows || !rows->len) return 0;  // not packed (ix_rows_packed), or nothing to pack
    switch (t) {
    case IX_TU_DEPS:
        put_u(&p, r->deps.len);
        for (size_t i = 0; i < r->deps.len; i++) {
            const ix_dep *d = &TB_VEC_AT(&r->deps, ix_dep, i);
            put_text(&p, d->path);
            put_text(&p, d->hash ? d->hash : "-");
        }
        break;
    case IX_TU_FUNCTIONS:
        put_u(&p, r->funcs.len);
        for (size_t i = 0; i < r->funcs.len; i++) {
            const ix_func *f = &TB_VEC_AT(&r->funcs, ix_func, i);
            put_text(&p, f->usr);
            put_text(&p, f->name);
            put_file(&p, f->file);
            put_u(&p, f->line);
            put_u(&p, f->col);
            put_u(&p, f->end_line);
            put_u(&p, f->end_col);
            put_u(&p, f->is_static ? 1 : 0);
            put_u(&p, f->is_def ? 1 : 0);
            put_u(&p, f->main_like ? 1 : 0);
        }
        break;
    case IX_TU_CALLS:
        put_u(&p, r->calls.len);
        for (size_t i = 0; i < r->calls.len; i++) {
            const ix_call *c = &TB_VEC_AT(&r->calls, ix_call, i);
            put_u(&p, (unsigned long long)c->caller);
            put_text(&p, c->callee_usr);
            put_text(&p, c->callee_name);
            put_text(&p, c->field);
            put_file(&p, c->file);
            put_u(&p, c->line);
            put_u(&p, c->col);
            put_text(&p, c->in_macro);
            put_text(&p, c->resolution);
            put_text(&p, c->candidates);
        }
        break;
    case IX_TU_CALLBACKS:
        put_u(&p, r->callbacks.len);
        for (size_t i = 0; i < r->callbacks.len; i++) {
            const ix_callback *b = &TB_VEC_AT(&r->callbacks, ix_callback, i);
            put_u(&p, (unsigned long long)b->caller);
            put_text(&p, b->target_usr);
            put_text(&p, b->passed_to);
            put_file(&p, b->file);
            put_u(&p, b->line);
            put_u(&p, b->col);
        }
        break;
    case IX_TU_RANGE_SITES:
        put_u(&p, r->ranges.len);
        for (size_t i = 0; i < r->ranges.len; i++) {
            const ix_range *g = &TB_VEC_AT(&r->ranges, ix_range, i);
            put_u(&p, (unsigned long long)g->caller);
            put_text(&p, g->kind);
            put_text(&p, g->name);
            put_file(&p, g->file);
            put_u(&p, g->line);
            put_u(&p, g->col);
        }
        break;
    case IX_TU_SYMBOLS:
        put_u(&p, r->syms.len);
        for (size_t i = 0; i < r->syms.len; i++) {
            const ix_sym *y = &TB_VEC_AT(&r->syms, ix_sym, i);
            put_text(&p, y->usr);
            put_text(&p, y->name);
            put_u(&p, y->kind == 'v' ? 'v' : 'f');
            put_u(&p, y->defines ? 1 : 0);
        }
        break;
    default: break;
    }
    return rows->len;
}

// ---- unpacking ----

typedef struct unpacker {
    const unsigned char *at, *end;
    int bad;
    tb_pool *pool;  // where texts are copied
    const char *(*path_of)(void *ctx, long long id);
    void *ctx;
} unpacker;

static unsigned long long get_u(unpacker *u) {
    unsigned long long v = 0;
    for (unsigned shift = 0; shift < 64; shift += 7) {
        if (u->at >= u->end) break;
        unsigned char b = *u->at++;
        v |= (unsigned long long)(b & 0x7f) << shift;
        if (!(b & 0x80)) return v;
    }
    u->bad = 1;  // ended inside the value, or longer than 64 bits
    return 0;
}

// A number that fits the field (an int or an unsigned of the struct).
static unsigned long long get_max(unpacker *u, unsigned long long max) {
    unsigned long long v = get_u(u);
    if (v > max) u->bad = 1;
    return v > max ? 0 : v;
}

static const char *get_text(unpacker *u) {
    unsigned long long n = get_u(u);
    if (!n || u->bad) return NULL;
    if (n - 1 > (unsigned long long)(u->end - u->at)) {
        u->bad = 1;
        return NULL;
    }
    const char *s = tb_pool_dupn(u->pool, (const char *)u->at, (size_t)(n - 1));
    u->at += n - 1;
    return s;
}

static const char *get_file(unpacker *u) {
    unsigned long long id = get_max(u, LLONG_MAX);
    return id && !u->bad && u->path_of ? u->path_of(u->ctx, (long long)id) : NULL;
}

// The row count, which cannot exceed the bytes left (every row takes at least one byte).
static size_t get_count(unpacker *u) {
    unsigned long long n = get_u(u);
    if (n > (unsigned long long)(u->end - u->at)) u->bad = 1;
    return u->bad ? 0 : (size_t)n;
}

int ix_rows_unpack(const void *record, size_t n, ix_unit_table t, ix_result *r,
                   const char *(*path_of)(void *ctx, long long id), void *ctx) {
    if (!record || !n) return -1;  // not even the row count
    unpacker u = {.at = record, .end = (const unsigned char *)record + n, .pool = &r->pool, .path_of = path_of,
                  .ctx = ctx};
    size_t rows = get_count(&u);
    switch (t) {
    case IX_TU_DEPS:
        for (size_t i = 0; i < rows && !u.bad; i++) {
            ix_dep *d = tb_vec_push(&r->deps);
            d->path = get_text(&u);
            d->hash = get_text(&u);
            if (!d->path || !d->hash) u.bad = 1;
        }
        break;
    case IX_TU_FUNCTIONS:
        for (size_t i = 0; i < rows && !u.bad; i++) {
            ix_func *f = tb_vec_push(&r->funcs);
            f->usr = get_text(&u);
            f->name = get_text(&u);
            f->file = get_file(&u);
            f->line = (unsigned)get_max(&u, UINT_MAX);
            f->col = (unsigned)get_max(&u, UINT_MAX);
            f->end_line = (unsigned)get_max(&u, UINT_MAX);
            f->end_col = (unsigned)get_max(&u, UINT_MAX);
            f->is_static = (int)get_max(&u, 1);
            f->is_def = (int)get_max(&u, 1);
            f->main_like = (int)get_max(&u, 1);
            if (!f->usr || !f->name) u.bad = 1;
        }
        break;
    case IX_TU_CALLS:
        for (size_t i = 0; i < rows && !u.bad; i++) {
            ix_call *c = tb_vec_push(&r->calls);
            c->caller = (int)get_max(&u, INT_MAX);
            c->callee_usr = get_text(&u);
            c->callee_name = get_text(&u);
            c->field = get_text(&u);
            c->file = get_file(&u);
            c->line = (unsigned)get_max(&u, UINT_MAX);
            c->col = (unsigned)get_max(&u, UINT_MAX);
            c->in_macro = get_text(&u);
            c->resolution = get_text(&u);
            c->candidates = get_text(&u);
        }
        break;
    case IX_TU_CALLBACKS:
        for (size_t i = 0; i < rows && !u.bad; i++) {
            ix_callback *b = tb_vec_push(&r->callbacks);
            b->caller = (int)get_max(&u, INT_MAX);
            b->target_usr = get_text(&u);
            b->passed_to = get_text(&u);
            b->file = get_file(&u);
            b->line = (unsigned)get_max(&u, UINT_MAX);
            b->col = (unsigned)get_max(&u, UINT_MAX);
        }
        break;
    case IX_TU_RANGE_SITES:
        for (size_t i = 0; i < rows && !u.bad; i++) {
            ix_range *g = tb_vec_push(&r->ranges);
            g->caller = (int)get_max(&u, INT_MAX);
            g->kind = get_text(&u);
            g->name = get_text(&u);
            g->file = get_file(&u);
            g->line = (unsigned)get_max(&u, UINT_MAX);
            g->col = (unsigned)get_max(&u, UINT_MAX);
        }
        break;
    case IX_TU_SYMBOLS:
        for (size_t i = 0; i < rows && !u.bad; i++) {
            ix_sym *y = tb_vec_push(&r->syms);
            y->usr = get_text(&u);
            y->name = get_text(&u);
            unsigned long long kind = get_u(&u);
            y->kind = (int)kind;
            y->defines = (int)get_max(&u, 1);
            if (!y->usr || !y->name || (kind != 'f' && kind != 'v')) u.bad = 1;
        }
        break;
    default: u.bad = 1; break;  // not a packed table
    }
    return u.bad || u.at != u.end ? -1 : 0;
}

// ---- a file's units (input_units.units) ----

void ix_units_pack(tb_buf *out, const long long *ids, size_t n) {
    packer p = {out, NULL, NULL};
    put_u(&p, n);
    for (size_t i = 0; i < n; i++) put_u(&p, ids[i] > 0 ? (unsigned long long)ids[i] : 0);
}

int ix_units_unpack(const void *record, size_t n, tb_vec *ids) {
    if (!record || !n) return -1;
    unpacker u = {.at = record, .end = (const unsigned char *)record + n};
    size_t count = get_count(&u);
    long long last = 0;
    for (size_t i = 0; i < count && !u.bad; i++) {
        long long id = (long long)get_max(&u, LLONG_MAX);
        if (id <= last) u.bad = 1;  // ascending, each unit once, none 0
        last = id;
        if (!u.bad) *(long long *)tb_vec_push(ids) = id;
    }
    return u.bad || !count || u.at != u.end ? -1 : 0;
}

// ---- a unit's command line (tu_inputs.command) ----

// A word list: its count, then each word (none NULL).
static void put_words(packer *p, const char *const *words, int n) {
    put_u(p, (unsigned long long)(n > 0 ? n : 0));
    for (int i = 0; i < n; i++) put_text(p, words[i]);
}

void ix_command_pack(tb_buf *out, const ix_tu *tu) {
    packer p = {out, NULL, NULL};
    put_text(&p, tu->directory);
    put_u(&p, tu->cuda ? 1 : 0);
    put_words(&p, tu->args, tu->nargs);
    put_words(&p, tu->fallback, tu->nfallback);
}

// NULL-terminated, as ix_compdb_load leaves a unit's words; NULL when malformed (u->bad).
static const char **get_words(unpacker *u, int *n) {
    size_t count = get_count(u);
    if (u->bad || count > INT_MAX - 1) {
        u->bad = 1;
        return NULL;
    }
    const char **words = tb_pool_alloc(u->pool, sizeof *words * (count + 1));
    for (size_t i = 0; i < count && !u->bad; i++)
        if (!(words[i] = get_text(u))) u->bad = 1;
    words[count] = NULL;
    *n = (int)count;
    return u->bad ? NULL : words;
}

int ix_command_unpack(const void *record, size_t n, tb_pool *pool, ix_tu *tu) {
    if (!record || !n) return -1;
    unpacker u = {.at = record, .end = (const unsigned char *)record + n, .pool = pool};
    tu->directory = get_text(&u);
    unsigned long long cuda = get_max(&u, 1);
    tu->cuda = (int)cuda;
    if (!tu->directory) u.bad = 1;
    if (!u.bad) tu->args = get_words(&u, &tu->nargs);
    if (!u.bad) tu->fallback = get_words(&u, &tu->nfallback);
    return u.bad || u.at != u.end ? -1 : 0;
}
