// pool.h — a string arena and growable text, for the indexer's many small strings.
//
// A unit's facts are thousands of short strings (USRs, names, paths) that all live exactly
// as long as the unit's result: they are carved from one pool and freed together. Chunks
// come from core/xalloc.h, so nothing here returns NULL.
#ifndef TB_TRACE_POOL_H
#define TB_TRACE_POOL_H

#include <stddef.h>

typedef struct tb_pool_chunk tb_pool_chunk;
typedef struct tb_pool {
    tb_pool_chunk *head;
} tb_pool;  // zero-initialised: empty

void *tb_pool_alloc(tb_pool *p, size_t n);  // zeroed, 16-byte aligned
const char *tb_pool_dup(tb_pool *p, const char *s);  // NULL for NULL
const char *tb_pool_dupn(tb_pool *p, const char *s, size_t n);
const char *tb_pool_printf(tb_pool *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void tb_pool_free(tb_pool *p);

// Growable text, always NUL-terminated once anything was added (s is NULL before).
typedef struct tb_buf {
    char *s;
    size_t len, cap;
} tb_buf;  // zero-initialised: empty

void tb_buf_add(tb_buf *b, const char *s, size_t n);
void tb_buf_printf(tb_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void tb_buf_free(tb_buf *b);

#endif
