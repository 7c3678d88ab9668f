// index_unit_rows.h — a unit's rows of one tu_* table packed into one record: the `rows` BLOB
// of tu_deps, tu_functions, tu_calls, tu_callbacks, tu_range_sites and tu_symbols (index_db.h);
// and the units that read a file, input_units' `units` BLOB. A full index writes
// hundreds of thousands of these facts that only the next re-index reads, and always a whole
// unit's at a time; one SQLite row per unit and table costs a fraction of one per fact
// (docs/PERFORMANCE.md, "The units' facts as one record").
//
// The record: the row count, then each row's columns in the table's order (the order of the
// ix_* struct's fields as index_write_units.c writes them). Every value is a LEB128 varint: a
// text is its length + 1 (0: NULL) and its bytes; a number (caller, line, column, a flag) is
// itself; a file is its files.id (0: none). Nothing else writes or reads it. (tu_deps' paths are
// texts: not every input file has a files row.)
#ifndef TB_TRACE_INDEX_UNIT_ROWS_H
#define TB_TRACE_INDEX_UNIT_ROWS_H

#include <stddef.h>

#include "index_unit_keys.h"
#include "index_visit.h"
#include "pool.h"

// Whether table t holds one packed record per unit (else one SQLite row per fact).
int ix_rows_packed(ix_unit_table t);

// Appends the record of r's rows of table t to out and returns how many rows it holds: 0, and
// nothing appended, when r has none (or t is not packed). file_id(ctx, path) gives the files.id
// of each file a row names, called in row order (the writer numbers new files as it is asked).
size_t ix_rows_pack(tb_buf *out, const ix_result *r, ix_unit_table t,
                    long long (*file_id)(void *ctx, const char *path), void *ctx);

// Appends the rows of a record of table t to r's vector for t: texts copied into r->pool,
// files as path_of(ctx, id) (NULL for none, an id it does not know, or no path_of). 0, or -1
// when the record is malformed (empty, it ends inside a value, a length runs past its end,
// bytes are left over, a number is out of range, a symbol's kind is neither 'f' nor 'v'): what
// r holds then is incomplete, and the unit must be parsed again.
int ix_rows_unpack(const void *record, size_t n, ix_unit_table t, ix_result *r,
                   const char *(*path_of)(void *ctx, long long id), void *ctx);

// A file's units: their count, then each files.id, ascending (varints as above). Unpacked onto
// ids (of long long): 0, or -1 when the record is malformed (empty, no unit, an id 0 or not
// above the one before it, bytes left over).
void ix_units_pack(tb_buf *out, const long long *ids, size_t n);
int ix_units_unpack(const void *record, size_t n, tb_vec *ids);

// A unit's command line as it was parsed (tu_inputs.command): its directory, whether it is
// CUDA host code (0 or 1), its arguments' count and each, its fallback's count and each (texts
// and numbers as above). Unpacked into tu's directory, cuda, args and fallback (texts in pool;
// tu->file is not in the record): 0, or -1 when the record is malformed (empty, no directory,
// a cuda flag other than 0 or 1, a word NULL, a count past the end, bytes left over).
void ix_command_pack(tb_buf *out, const ix_tu *tu);
int ix_command_unpack(const void *record, size_t n, tb_pool *pool, ix_tu *tu);

#endif
