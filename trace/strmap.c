// strmap.c — see strmap.h.
#include "strmap.h"

#include <stdlib.h>
#include <string.h>

#include "core/xalloc.h"

unsigned long long tb_strhash(const char *s) {
    unsigned long long h = 1469598103934665603ull;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

void tb_strmap_init(tb_strmap *m) { memset(m, 0, sizeof *m); }

static size_t map_find(const tb_strmap *m, const char *key) {
    size_t i = (size_t)tb_strhash(key) & (m->cap - 1);
    while (m->keys[i] && strcmp(m->keys[i], key)) i = (i + 1) & (m->cap - 1);
    return i;
}

int *tb_strmap_get(const tb_strmap *m, const char *key) {
    if (!m->cap) return NULL;
    size_t i = map_find(m, key);
    return m->keys[i] ? &m->vals[i] : NULL;
}

// Grows the table to at least cap slots (a power of two), every key placed again.
static void map_grow(tb_strmap *m, size_t cap) {
    size_t ocap = m->cap;
    const char **okeys = m->keys;
    int *ovals = m->vals;
    m->cap = cap;
    m->keys = tb_xcalloc(m->cap, sizeof *m->keys, "string map keys");
    m->vals = tb_xcalloc(m->cap, sizeof *m->vals, "string map values");
    for (size_t i = 0; i < ocap; i++)
        if (okeys[i]) {
            size_t j = map_find(m, okeys[i]);
            m->keys[j] = okeys[i];
            m->vals[j] = ovals[i];
        }
    free(okeys);
    free(ovals);
}

void tb_strmap_reserve(tb_strmap *m, size_t n) {
    size_t cap = m->cap ? m->cap : 64;
    while (2 * n > cap) cap *= 2;
    if (cap > m->cap) map_grow(m, cap);
}

int *tb_strmap_put(tb_strmap *m, const char *key, int val) {
    if (2 * (m->len + 1) > m->cap) map_grow(m, m->cap ? 2 * m->cap : 64);
    size_t i = map_find(m, key);
    if (!m->keys[i]) {
        m->keys[i] = tb_pool_dup(&m->pool, key);
        m->len++;
    }
    m->vals[i] = val;
    return &m->vals[i];
}

void tb_strmap_free(tb_strmap *m) {
    free(m->keys);
    free(m->vals);
    tb_pool_free(&m->pool);
    memset(m, 0, sizeof *m);
}
