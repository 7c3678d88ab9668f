// u64map.c — see u64map.h.
#include "u64map.h"

#include <stdlib.h>
#include <string.h>

#include "core/xalloc.h"

static size_t slot_of(uint64_t key, size_t cap) {
    uint64_t h = key * 11400714819323198485ull;  // Fibonacci hashing; the high bits folded in
    return (size_t)(h ^ h >> 32) & (cap - 1);
}

int *tb_u64map_get(const tb_u64map *m, uint64_t key) {
    if (!m->cap || !key) return NULL;
    for (size_t i = slot_of(key, m->cap);; i = (i + 1) & (m->cap - 1)) {
        if (m->keys[i] == key) return &m->vals[i];
        if (!m->keys[i]) return NULL;
    }
}

void tb_u64map_put(tb_u64map *m, uint64_t key, int val) {
    if (!key) return;
    if (2 * (m->len + 1) > m->cap) {
        tb_u64map old = *m;
        m->cap = old.cap ? 2 * old.cap : 64;
        m->keys = tb_xcalloc(m->cap, sizeof *m->keys, "integer map");
        m->vals = tb_xcalloc(m->cap, sizeof *m->vals, "integer map");
        m->len = 0;
        for (size_t i = 0; i < old.cap; i++)
            if (old.keys[i]) tb_u64map_put(m, old.keys[i], old.vals[i]);
        free(old.keys);
        free(old.vals);
    }
    size_t i = slot_of(key, m->cap);
    while (m->keys[i] && m->keys[i] != key) i = (i + 1) & (m->cap - 1);
    if (!m->keys[i]) m->len++;
    m->keys[i] = key;
    m->vals[i] = val;
}

void tb_u64map_clear(tb_u64map *m) {
    if (m->len) memset(m->keys, 0, m->cap * sizeof *m->keys);
    m->len = 0;
}

void tb_u64map_free(tb_u64map *m) {
    free(m->keys);
    free(m->vals);
    *m = (tb_u64map){0};
}
