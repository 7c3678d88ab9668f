// index_reuse_internal.h — what index_reuse.c and index_reuse_facts.c share; not an interface
// beyond them (index_reuse.h is).
#ifndef TB_TRACE_INDEX_REUSE_INTERNAL_H
#define TB_TRACE_INDEX_REUSE_INTERNAL_H

#include <sqlite3.h>

#include "index_reuse.h"
#include "pool.h"

// Column i of the row as text copied into p, or NULL.
const char *ixr_col_text(tb_pool *p, sqlite3_stmt *st, int i);
// The units' input files themselves (each unit's deps, from tu_deps), for the facts read back:
// a full merge writes them again (and input_units from them). Read once; 0, or -1 when tu_deps
// cannot be read; a unit whose record does not unpack is marked deps_bad (parsed instead).
int ixr_load_deps(ix_prev *p);

#endif
