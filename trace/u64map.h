// u64map.h — the integer map of trace/: nonzero 64-bit key → int. Open addressing (a
// multiplicative hash, linear probing, at most half full). Used for libclang's Decl and Stmt
// pointers → rows and roles (index_visit_roles.c, ixv_note_function), and (function row,
// target) pairs of the libraries phase (index_derived.c).
#ifndef TB_TRACE_U64MAP_H
#define TB_TRACE_U64MAP_H

#include <stddef.h>
#include <stdint.h>

typedef struct tb_u64map {
    uint64_t *keys;  // 0: an empty slot
    int *vals;
    size_t cap, len;
} tb_u64map;  // zero-initialised: empty

int *tb_u64map_get(const tb_u64map *m, uint64_t key);  // NULL when absent (and for key 0)
void tb_u64map_put(tb_u64map *m, uint64_t key, int val);  // inserts or overwrites; key 0 is ignored
void tb_u64map_clear(tb_u64map *m);  // empty, its room kept
void tb_u64map_free(tb_u64map *m);

#endif
