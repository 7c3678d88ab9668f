// intern.c — strings stored once (intern.h): FNV-1a over an open-addressed table of offsets,
// kept at most half full.
#include "core/intern.h"

#include <stdlib.h>
#include <string.h>

#include "core/xalloc.h"

static uint64_t hash(const char *s, size_t n) {  // FNV-1a
    uint64_t h = 14695981039346656037ull;
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
    return h;
}

static void rehash(tb_intern *in) {
    size_t cap = in->cap_slots ? 2 * in->cap_slots : 256;
    uint32_t *slots = tb_xreallocarray(NULL, cap, sizeof *slots, "interned names");
    memset(slots, 0xff, cap * sizeof *slots);
    for (size_t i = 0; i < in->cap_slots; i++) {
        if (in->slots[i] == UINT32_MAX) continue;
        const char *name = in->strings + in->slots[i];
        size_t k = hash(name, strlen(name)) & (cap - 1);
        while (slots[k] != UINT32_MAX) k = (k + 1) & (cap - 1);
        slots[k] = in->slots[i];
    }
    free(in->slots);
    in->slots = slots;
    in->cap_slots = cap;
}

uint32_t tb_intern_add(tb_intern *in, const char *s, size_t n) {
    if (2 * (in->nnames + 1) > in->cap_slots) rehash(in);
    size_t k = hash(s, n) & (in->cap_slots - 1);
    for (; in->slots[k] != UINT32_MAX; k = (k + 1) & (in->cap_slots - 1)) {
        const char *name = in->strings + in->slots[k];
        if (!strncmp(name, s, n) && name[n] == '\0') return in->slots[k];
    }
    if (in->nstrings + n + 1 > in->cap_strings) {
        size_t cap = in->cap_strings ? in->cap_strings : 1024;
        while (cap < in->nstrings + n + 1) cap *= 2;
        in->strings = tb_xrealloc(in->strings, cap, "interned names");
        in->cap_strings = cap;
    }
    uint32_t off = (uint32_t)in->nstrings;
    memcpy(in->strings + off, s, n);
    in->strings[off + n] = '\0';
    in->nstrings += n + 1;
    in->slots[k] = off;
    in->nnames++;
    return off;
}

void tb_intern_free(tb_intern *in) {
    free(in->strings);
    free(in->slots);
    memset(in, 0, sizeof *in);
}
