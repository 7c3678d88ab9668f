// pool.c — see pool.h.
#include "pool.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/xalloc.h"

struct tb_pool_chunk {
    tb_pool_chunk *next;
    size_t used, cap;
    char data[];
};

#define TB_POOL_CHUNK 65536

static char *pool_alloc(tb_pool *p, size_t n) {
    tb_pool_chunk *c = p->head;
    if (!c || c->cap - c->used < n) {
        size_t cap = n > TB_POOL_CHUNK ? n : TB_POOL_CHUNK;
        tb_pool_chunk *nc = tb_xmalloc(sizeof *nc + cap, "string pool chunk");
        nc->used = 0;
        nc->cap = cap;
        if (c && n > TB_POOL_CHUNK) {  // a big one: keep filling the current chunk afterwards
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

void *tb_pool_alloc(tb_pool *p, size_t n) {
    char *d = pool_alloc(p, n + 15);
    d = (char *)(((uintptr_t)d + 15) & ~(uintptr_t)15);
    memset(d, 0, n);
    return d;
}

const char *tb_pool_dupn(tb_pool *p, const char *s, size_t n) {
    char *d = pool_alloc(p, n + 1);
    memcpy(d, s, n);
    d[n] = 0;
    return d;
}

const char *tb_pool_dup(tb_pool *p, const char *s) { return s ? tb_pool_dupn(p, s, strlen(s)) : NULL; }

const char *tb_pool_printf(tb_pool *p, const char *fmt, ...) {
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

void tb_pool_free(tb_pool *p) {
    for (tb_pool_chunk *c = p->head, *n; c; c = n) {
        n = c->next;
        free(c);
    }
    p->head = NULL;
}

// ---------------------------------------------------------------------------------------
// Text

static void buf_reserve(tb_buf *b, size_t n) {
    if (b->len + n + 1 <= b->cap) return;
    b->cap = (b->len + n + 1) * 2;
    b->s = tb_xrealloc(b->s, b->cap, "text buffer");
}

void tb_buf_add(tb_buf *b, const char *s, size_t n) {
    buf_reserve(b, n);
    memcpy(b->s + b->len, s, n);
    b->len += n;
    b->s[b->len] = 0;
}

void tb_buf_printf(tb_buf *b, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    buf_reserve(b, (size_t)n);
    va_start(ap, fmt);
    vsnprintf(b->s + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

void tb_buf_free(tb_buf *b) {
    free(b->s);
    memset(b, 0, sizeof *b);
}
