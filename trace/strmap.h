// strmap.h — the string map of trace/: string → int (an index into an array, mostly).
//
// Open addressing (FNV-1a, linear probing, at most half full); keys are copied into the
// map's own pool, so a key need not outlive the put. Used for paths → file rows, USRs →
// functions, field keys → fields, runtime range names → names, unit paths → units.
#ifndef TB_TRACE_STRMAP_H
#define TB_TRACE_STRMAP_H

#include <stddef.h>

#include "pool.h"

typedef struct tb_strmap {
    const char **keys;
    int *vals;
    size_t cap, len;
    tb_pool pool;
} tb_strmap;  // zero-initialised: empty

void tb_strmap_init(tb_strmap *m);
int *tb_strmap_get(const tb_strmap *m, const char *key);  // NULL when absent
int *tb_strmap_put(tb_strmap *m, const char *key, int val);  // inserts or overwrites; returns the slot
void tb_strmap_reserve(tb_strmap *m, size_t n);  // room for n keys without growing again
void tb_strmap_free(tb_strmap *m);

// The 64-bit FNV-1a hash of s (also how Chrome traces' string thread ids become numbers).
unsigned long long tb_strhash(const char *s);

#endif
