// index_libs.h — which library of a binary's link provides a function the index has no
// definition for (index_libs.c): the symbols a shared object exports (its ELF .dynsym), a
// static archive defines (its ar symbol index) or a GNU ld script's inputs provide.
#ifndef TB_TRACE_INDEX_LIBS_H
#define TB_TRACE_INDEX_LIBS_H

#include "pool.h"
#include "strmap.h"
#include "vec.h"

typedef struct ix_libs {
    tb_strmap by_path;  // library path -> index in libs
    tb_vec libs;        // of struct ix_lib (index_libs.c)
    tb_pool pool;
} ix_libs;

void ix_libs_init(ix_libs *l);
// Whether the library file at path defines the symbol `name` (each file read once; a file
// that cannot be read or is neither ELF, an archive nor a linker script defines nothing).
int ix_lib_defines(ix_libs *l, const char *path, const char *name);
// The same in two steps: the file's number in l (read on first use; numbers count from 0),
// then the lookup by that number. A caller asking many names of the same few files (every
// target's link line names the same libraries) keeps the numbers.
int ix_lib_number(ix_libs *l, const char *path);
int ix_lib_defines_at(const ix_libs *l, int number, const char *name);
void ix_libs_free(ix_libs *l);

#endif
