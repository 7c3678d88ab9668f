// index_unit_keys.h — one unit's facts keyed for comparing two versions of the unit
// (index_unit_keys.c, for index_update.c): per USR, the unit's rows of the function and the
// body each definition gives (calls, range sites, callbacks) as one string; per field target
// key, the place of its first row; the functions its calls and callbacks name.
#ifndef TB_TRACE_INDEX_UNIT_KEYS_H
#define TB_TRACE_INDEX_UNIT_KEYS_H

#include "index_visit.h"
#include "pool.h"
#include "strmap.h"
#include "vec.h"

// Per caller (index in funcs), the facts its body holds: offsets into an index array.
typedef struct by_caller {
    size_t *start;  // nfuncs + 1 offsets
    size_t *items;  // indexes into the facts vec
} by_caller;

typedef struct ix_unit_keys {
    const ix_result *r;
    by_caller calls, ranges, callbacks;
    tb_strmap sig;  // usr -> index in sigs: the unit's rows of the USR and the bodies they give
    tb_vec sigs;    // of const char *
    tb_strmap ft;   // "record\x1f field\x1f function" -> index in fts: the first row's place
    tb_vec fts;     // of const char *
    tb_strmap named;  // USRs its calls and callbacks name (libraries)
    tb_pool pool;
} ix_unit_keys;

// k keys r's facts (r must outlive k).
void ix_key_unit(ix_unit_keys *k, const ix_result *r);
void ix_key_free(ix_unit_keys *k);
// The unit's rows of usr and their bodies as one string, or NULL: the unit has none.
const char *ix_sig_of(const ix_unit_keys *k, const char *usr);
// Whether two signatures (or NULLs) differ.
int ix_differs(const char *a, const char *b);

// A unit's own tables (index_db.h's tu_*), in the order index_write.c writes them.
typedef enum ix_unit_table {
    IX_TU_INPUTS, IX_TU_DEPS, IX_TU_FUNCTIONS, IX_TU_CALLS, IX_TU_FIELD_TARGETS, IX_TU_CALLBACKS, IX_TU_RANGE_SITES,
    IX_TU_SYMBOLS, IX_TU_TABLES
} ix_unit_table;
extern const char *const ix_unit_table_names[IX_TU_TABLES];

// 1 when a and b give the same rows of table t (every column, in the same order), so an
// update in place may leave the unit's rows there as they are; IX_TU_DEPS compares every
// input's path and hash. IX_TU_INPUTS is never equal: a parsed unit's one row is written again
// (its command record, which only a speculative parse reads, then whole whatever it was).
int ix_unit_rows_equal(const ix_result *a, const ix_result *b, ix_unit_table t);

#endif
