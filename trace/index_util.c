// index_util.c — the small containers `tracebook index` uses (see index_internal.h).
#include <fnmatch.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "index_internal.h"

static void *xrealloc(void *p, size_t n) {
    void *q = realloc(p, n ? n : 1);
    if (!q) {
        fprintf(stderr, "tracebook index: out of memory\n");
        abort();
    }
    return q;
}

// ---------------------------------------------------------------------------------------
// Pool

struct ix_pool_chunk {
    ix_pool_chunk *next;
    size_t used, cap;
    char data[];
};

#define IX_CHUNK 65536

static char *pool_alloc(ix_pool *p, size_t n) {
    ix_pool_chunk *c = p->head;
    if (!c || c->cap - c->used < n) {
        size_t cap = n > IX_CHUNK ? n : IX_CHUNK;
        ix_pool_chunk *nc = xrealloc(NULL, sizeof *nc + cap);
        nc->used = 0;
        nc->cap = cap;
        if (c && n > IX_CHUNK) {  // a big one: keep filling the current chunk afterwards
            nc->next = c->next;
            c->next = nc;
        } else {
            nc->next = c;
            p->head = nc;
        }
        c = nc;
    }
    char *s = c->data + c->used;
    c->used += n;
    return s;
}

void *ix_pool_alloc(ix_pool *p, size_t n) {
    char *d = pool_alloc(p, n + 15);
    d = (char *)(((uintptr_t)d + 15) & ~(uintptr_t)15);
    memset(d, 0, n);
    return d;
}

const char *ix_pool_dupn(ix_pool *p, const char *s, size_t n) {
    char *d = pool_alloc(p, n + 1);
    memcpy(d, s, n);
    d[n] = 0;
    return d;
}

const char *ix_pool_dup(ix_pool *p, const char *s) { return s ? ix_pool_dupn(p, s, strlen(s)) : NULL; }

const char *ix_pool_printf(ix_pool *p, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    char *d = pool_alloc(p, (size_t)n + 1);
    va_start(ap, fmt);
    vsnprintf(d, (size_t)n + 1, fmt, ap);
    va_end(ap);
    return d;
}

void ix_pool_free(ix_pool *p) {
    for (ix_pool_chunk *c = p->head, *n; c; c = n) {
        n = c->next;
        free(c);
    }
    p->head = NULL;
}

// ---------------------------------------------------------------------------------------
// Vector

void ix_vec_init(ix_vec *v, size_t item_size) {
    v->items = NULL;
    v->len = v->cap = 0;
    v->size = item_size;
}

void *ix_vec_push(ix_vec *v) {
    if (v->len == v->cap) {
        v->cap = v->cap ? 2 * v->cap : 16;
        v->items = xrealloc(v->items, v->cap * v->size);
    }
    void *it = (char *)v->items + v->len++ * v->size;
    memset(it, 0, v->size);
    return it;
}

void ix_vec_free(ix_vec *v) {
    free(v->items);
    v->items = NULL;
    v->len = v->cap = 0;
}

// ---------------------------------------------------------------------------------------
// Map

static uint64_t hash_str(const char *s) {
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

void ix_map_init(ix_map *m) { memset(m, 0, sizeof *m); }

static size_t map_find(const ix_map *m, const char *key) {
    size_t i = (size_t)hash_str(key) & (m->cap - 1);
    while (m->keys[i] && strcmp(m->keys[i], key)) i = (i + 1) & (m->cap - 1);
    return i;
}

int *ix_map_get(const ix_map *m, const char *key) {
    if (!m->cap) return NULL;
    size_t i = map_find(m, key);
    return m->keys[i] ? &m->vals[i] : NULL;
}

int *ix_map_put(ix_map *m, const char *key, int val) {
    if (2 * (m->len + 1) > m->cap) {
        size_t ocap = m->cap;
        const char **okeys = m->keys;
        int *ovals = m->vals;
        m->cap = ocap ? 2 * ocap : 64;
        m->keys = xrealloc(NULL, m->cap * sizeof *m->keys);
        m->vals = xrealloc(NULL, m->cap * sizeof *m->vals);
        memset(m->keys, 0, m->cap * sizeof *m->keys);
        for (size_t i = 0; i < ocap; i++)
            if (okeys[i]) {
                size_t j = map_find(m, okeys[i]);
                m->keys[j] = okeys[i];
                m->vals[j] = ovals[i];
            }
        free(okeys);
        free(ovals);
    }
    size_t i = map_find(m, key);
    if (!m->keys[i]) {
        m->keys[i] = ix_pool_dup(&m->pool, key);
        m->len++;
    }
    m->vals[i] = val;
    return &m->vals[i];
}

void ix_map_free(ix_map *m) {
    free(m->keys);
    free(m->vals);
    ix_pool_free(&m->pool);
    memset(m, 0, sizeof *m);
}

// ---------------------------------------------------------------------------------------
// Buffer

void ix_buf_add(ix_buf *b, const char *s, size_t n) {
    if (b->len + n + 1 > b->cap) {
        b->cap = (b->len + n + 1) * 2;
        b->s = xrealloc(b->s, b->cap);
    }
    memcpy(b->s + b->len, s, n);
    b->len += n;
    b->s[b->len] = 0;
}

void ix_buf_printf(ix_buf *b, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    if (b->len + (size_t)n + 1 > b->cap) {
        b->cap = (b->len + (size_t)n + 1) * 2;
        b->s = xrealloc(b->s, b->cap);
    }
    va_start(ap, fmt);
    vsnprintf(b->s + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

void ix_buf_free(ix_buf *b) {
    free(b->s);
    memset(b, 0, sizeof *b);
}

int ix_name_matches(const char *pattern, const char *name) { return fnmatch(pattern, name, 0) == 0; }
