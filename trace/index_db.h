// index_db.h — the source index: one SQLite file that `tracebook index` writes and every
// query (def, callers, callees, chain, map, walk) reads. This header is the contract
// between the indexer and the queries.
//
// Paths are absolute, as the compilation database gives them. Lines and columns are
// 1-based. A function is identified by its libclang USR: static functions of the same name
// in two files have different USRs (the USR includes the file), so they stay distinct.
#ifndef TB_TRACE_INDEX_DB_H
#define TB_TRACE_INDEX_DB_H

#include <sqlite3.h>

#include "core/error.h"

#define TB_INDEX_DEFAULT_PATH "build/tracebook-index.sqlite"
#define TB_INDEX_SCHEMA_VERSION "12"

// The schema: the tables, then their secondary indexes (the indexer creates these after most
// of its bulk inserts, which is faster than maintaining them row by row; the file is the same).
#define TB_INDEX_SCHEMA TB_INDEX_TABLES TB_INDEX_INDEXES
#define TB_INDEX_TABLES                                                                                      \
    "CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT);\n"                                                 \
    /* every source and header file seen; status of translation units: ok | partial | failed */              \
    "CREATE TABLE files(id INTEGER PRIMARY KEY, path TEXT UNIQUE NOT NULL, is_tu INTEGER NOT NULL,"          \
    " status TEXT, errors INTEGER NOT NULL DEFAULT 0, diagnostics TEXT);\n"                                  \
    /* functions declared or defined; is_definition = has a body in this index; end_line/end_col: the */     \
    /* closing brace of the body (NULL without a definition) */                                              \
    /* unit_id: the translation unit (files.id) whose parse gave the row (its body, for a definition): */   \
    /* when that unit's status is partial, what the function calls may be missing (the queries say so) */     \
    "CREATE TABLE functions(id INTEGER PRIMARY KEY, usr TEXT UNIQUE NOT NULL, name TEXT NOT NULL,"           \
    " file_id INTEGER, line INTEGER, col INTEGER, is_static INTEGER NOT NULL, is_definition INTEGER NOT NULL," \
    " end_line INTEGER, end_col INTEGER, unit_id INTEGER);\n"                                                \
    /* error diagnostics of a unit's parse by the file they are in (a header of the toolkit, the source), */ \
    /* from files.diagnostics; file_id the unit itself for an error without a location */                     \
    "CREATE TABLE file_errors(unit_id INTEGER NOT NULL, file_id INTEGER NOT NULL, errors INTEGER NOT NULL,"     \
    " first TEXT, UNIQUE(unit_id, file_id));\n"                                                              \
    /* call sites. A direct call names its callee's USR; a call through a struct field holding a  */         \
    /* function pointer has callee_usr NULL and field = 'record.field' (e.g. tb_comm_backend.all_reduce), */ \
    /* resolved through field_targets. in_macro: the macro the call was expanded from, if any.    */         \
    /* resolution: NULL when the compiler resolved the call (or nothing could: a pointer, a field); */        \
    /* 'name' when a call in a template that the compiler leaves unresolved until instantiation (a  */        \
    /* dependent call, a member of a dependent type) names one function, which callee_usr is;        */        \
    /* 'candidates' when it names several: candidates holds their USRs, one per line, callee_usr NULL */       \
    "CREATE TABLE calls(id INTEGER PRIMARY KEY, caller_id INTEGER NOT NULL, callee_usr TEXT,"                \
    " callee_name TEXT NOT NULL, field TEXT, file_id INTEGER, line INTEGER, col INTEGER, in_macro TEXT,"     \
    " resolution TEXT, candidates TEXT);\n"                                                                   \
    /* functions assigned to function-pointer fields anywhere (designated initializers, positional */        \
    /* initializers of struct constants, assignments) */                                                     \
    "CREATE TABLE field_targets(record TEXT NOT NULL, field TEXT NOT NULL, function_usr TEXT NOT NULL,"      \
    " file_id INTEGER, line INTEGER, UNIQUE(record, field, function_usr));\n"                                \
    /* range sites: calls of the range push / pop functions (TB_RANGE_PUSH → tb_range_push, nvtxRangePushA) */ \
    /* with the literal name or printf-style pattern, in their enclosing function */                         \
    "CREATE TABLE range_sites(id INTEGER PRIMARY KEY, function_id INTEGER NOT NULL, kind TEXT NOT NULL,"     \
    " name TEXT, file_id INTEGER, line INTEGER, col INTEGER);\n"                                             \
    /* callbacks: a function named in a body other than as the callee of a call (passed as an argument, */  \
    /* stored in a variable or array, returned): function_id the function whose body names it, target_usr */ \
    /* the function named, passed_to the callee's name when it is an argument of a call, else NULL.       */ \
    /* Whoever passes a callback causes it to run: the queries add the edge function → target.            */ \
    /* Functions assigned to function-pointer fields are field_targets rows instead.                      */ \
    "CREATE TABLE callbacks(id INTEGER PRIMARY KEY, function_id INTEGER NOT NULL, target_usr TEXT NOT NULL,"  \
    " passed_to TEXT, file_id INTEGER, line INTEGER, col INTEGER);\n"                                        \
    /* collective sites: calls of the NCCL communication functions and of the communicator's entry */        \
    /* points (configurable list); call_id: the calls row of the same call site */                           \
    "CREATE TABLE collective_sites(id INTEGER PRIMARY KEY, function_id INTEGER NOT NULL,"                    \
    " callee_name TEXT NOT NULL, file_id INTEGER, line INTEGER, col INTEGER, call_id INTEGER);\n"            \
    /* which translation units link into which build target (a --targets file, CMake's file API, or */      \
    /* inferred from the units' symbols: meta targets_source), so chains stay inside one binary */           \
    "CREATE TABLE targets(target TEXT NOT NULL, type TEXT, file_id INTEGER NOT NULL,"                        \
    " UNIQUE(target, file_id));\n"                                                                           \
    /* libraries: for a function the index has no definition of (a library's API: ncclAllReduce, */        \
    /* MPI_Allreduce, sqrtf), the library that defines it on the link line of a linking target whose */     \
    /* units call or name it: the first there whose symbols have it (a shared object's dynamic symbols, */   \
    /* an archive's symbol index, the inputs of an ld script); from CMake's file API, so only with targets */ \
    "CREATE TABLE libraries(function_id INTEGER NOT NULL, target TEXT NOT NULL, library TEXT NOT NULL,"       \
    " UNIQUE(function_id, target));\n"                                                                       \
    /* Internal to `tracebook index` (incremental re-indexing; the queries do not read them): each */        \
    /* unit's own facts as its parse produced them, before the merge across units (a header's inline */     \
    /* function is in every unit that includes it), and its inputs. tu_id: the unit's files.id; file_id, */  \
    /* files.id; caller: the index (0-based) of the function in the unit's tu_functions record. A */         \
    /* re-index reuses the rows of the units whose inputs are unchanged and merges again, so the tables */  \
    /* above are exactly what a full index gives (index_update.c: by the difference of the parsed */        \
    /* units' old and new rows). */                                                                         \
    /* deps_kept: every tu_deps hash of the unit is a SHA-256 (none '-' or '~'), so file_stats has them; */ \
    /* command: the command line the unit was parsed with (packed: index_unit_rows.h), which a re-index */  \
    /* starts parsing a changed unit with before the compilation database is read (index_speculate.h) */     \
    "CREATE TABLE tu_inputs(tu_id INTEGER PRIMARY KEY, inputs TEXT NOT NULL, reduced INTEGER NOT NULL,"       \
    " deps_kept INTEGER NOT NULL, command BLOB);\n"                                                          \
    /* every input file of a unit (its source, each file it included) with the hex SHA-256 of its */        \
    /* contents: '-' unreadable, '~' modified while the index was written; one row per unit, the */          \
    /* pairs (path, hash) packed into `rows` (index_unit_rows.h) in the order the parse met them */        \
    "CREATE TABLE tu_deps(tu_id INTEGER PRIMARY KEY, rows BLOB NOT NULL);\n"                                 \
    /* the units (files.id) whose tu_deps name each path, packed ascending into `units`: which units */     \
    /* a changed file makes a re-index parse again */                                                       \
    "CREATE TABLE input_units(path TEXT PRIMARY KEY, units BLOB NOT NULL) WITHOUT ROWID;\n"                   \
    /* A unit's functions, calls, callbacks, range sites and external symbols: one row per unit and */    \
    /* table, the unit's rows packed into `rows` (index_unit_rows.h), a unit without any has none. */       \
    /* Their columns, in the record's order: tu_functions usr, name, file_id, line, col, end_line, */      \
    /* end_col, is_static, is_definition, main_like; tu_calls caller, callee_usr, callee_name, field, */    \
    /* file_id, line, col, in_macro, resolution, candidates; tu_callbacks caller, target_usr, */             \
    /* passed_to, file_id, line, col; tu_range_sites caller, kind, name, file_id, line, col; */             \
    /* tu_symbols usr, name, kind, defines: the unit's external symbols, for inferring link units */        \
    /* (index_units.c): kind 'f' a function, 'v' a variable; defines 1: a strong definition in the */       \
    /* unit's own code, 0: a reference to a variable (references to functions are the calls, */             \
    /* callbacks and tu_field_targets rows) */                                                              \
    "CREATE TABLE tu_functions(tu_id INTEGER PRIMARY KEY, rows BLOB NOT NULL);\n"                             \
    "CREATE TABLE tu_calls(tu_id INTEGER PRIMARY KEY, rows BLOB NOT NULL);\n"                                 \
    "CREATE TABLE tu_field_targets(tu_id INTEGER NOT NULL, record TEXT, field TEXT, function_usr TEXT,"       \
    " file_id INTEGER, line INTEGER);\n"                                                                     \
    "CREATE TABLE tu_callbacks(tu_id INTEGER PRIMARY KEY, rows BLOB NOT NULL);\n"                             \
    "CREATE TABLE tu_range_sites(tu_id INTEGER PRIMARY KEY, rows BLOB NOT NULL);\n"                           \
    "CREATE TABLE tu_symbols(tu_id INTEGER PRIMARY KEY, rows BLOB NOT NULL);\n"                               \
    /* the units' input files as the run that hashed them saw them (stat: size, times in ns, inode, */      \
    /* device) with their SHA-256 and lines: a file whose stat is unchanged is not read again */            \
    "CREATE TABLE file_stats(path TEXT PRIMARY KEY, size INTEGER NOT NULL, mtime_ns INTEGER NOT NULL,"         \
    " ctime_ns INTEGER NOT NULL, ino INTEGER NOT NULL, dev INTEGER NOT NULL, hash TEXT NOT NULL,"              \
    " lines INTEGER NOT NULL);\n"
// Only the lookups a writer makes have an index: the queries load whole tables into memory
// (graph_load.c), so an index for them (callers by callee_usr, functions by name: built on
// 48 000 text keys, 30 ms of every full index's serial end) would be read by nothing.
#define TB_INDEX_INDEXES                                                                                     \
    "CREATE INDEX IF NOT EXISTS calls_caller ON calls(caller_id);\n"                                         \
    "CREATE INDEX IF NOT EXISTS callbacks_function ON callbacks(function_id);\n"                             \
    "CREATE INDEX IF NOT EXISTS range_sites_function ON range_sites(function_id);\n"                         \
    "CREATE INDEX IF NOT EXISTS collective_sites_function ON collective_sites(function_id);\n"               \
    TB_INDEX_UNIT_INDEXES
// For updating the index in place (index_update.c): each unit's rows, a field target's rows.
// (The packed tables are keyed by the unit already, input_units by the file; a USR's rows in
// every unit, and which units name a function, for its libraries rows, are read from their
// records when an update first asks: only for functions whose rows, naming or definition
// changed.)
#define TB_INDEX_UNIT_INDEXES TB_INDEX_UNIT_ROW_INDEXES TB_INDEX_UNIT_KEY_INDEXES
// Keyed by the unit first: a full index writes unit after unit, so each insert lands at the
// end of these; they are made with the tables. The others are built once most rows are in (a
// new index: when every unit is being parsed, else at the end; the rows of the last units are
// added to them).
#define TB_INDEX_UNIT_ROW_INDEXES                                                                            \
    "CREATE INDEX IF NOT EXISTS tu_field_targets_unit ON tu_field_targets(tu_id);\n"
#define TB_INDEX_UNIT_KEY_INDEXES                                                                            \
    "CREATE INDEX IF NOT EXISTS tu_field_targets_key ON tu_field_targets(record, field, function_usr);\n"

// Opens an existing index read-only; a missing or foreign file, or one that fails SQLite's
// quick_check (every page and b-tree), is an error naming it.
int tb_index_open(sqlite3 **db, const char *path, tb_error *err);

#endif
