// intern.h — strings stored once: a name that repeats (a range's name, every step of a run)
// is kept by its offset into one arena. Offsets stay valid as the arena grows; a pointer from
// tb_intern_str only until the next tb_intern_add.
#ifndef TB_CORE_INTERN_H
#define TB_CORE_INTERN_H

#include <stddef.h>
#include <stdint.h>

typedef struct tb_intern {
    char *strings;  // the names, each NUL-terminated, each once
    size_t nstrings, cap_strings;
    uint32_t *slots;  // the names' offsets by hash (open addressing; UINT32_MAX: empty)
    size_t cap_slots, nnames;
} tb_intern;

// The offset of the n bytes at s (no NUL among them) in the arena, added when new.
uint32_t tb_intern_add(tb_intern *in, const char *s, size_t n);

static inline const char *tb_intern_str(const tb_intern *in, uint32_t off) { return in->strings + off; }

void tb_intern_free(tb_intern *in);

#endif
