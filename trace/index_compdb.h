// index_compdb.h — the compilation database (index_compdb.c): compile_commands.json read and
// each entry's command line translated into clang arguments for libclang (the rules are in
// the comment at the top of index.c).
#ifndef TB_TRACE_INDEX_COMPDB_H
#define TB_TRACE_INDEX_COMPDB_H

#include "core/error.h"
#include "pool.h"
#include "vec.h"

// The directory of the stand-in headers index_unsaved.c supplies as in-memory files (CUDA 13's
// missing texture_fetch_functions.h, omp.h when LLVM's is not installed); it goes last on the
// include path (-idirafter), so real headers win.
#define IX_STUB_DIR "/tracebook-stubs"

typedef struct ix_tu {
    const char *file;        // absolute, normalised
    const char *directory;   // the entry's working directory
    const char **args;       // clang arguments (no compiler, no source file), NULL-terminated
    int nargs;
    const char **fallback;   // a minimal command line (-D -U -I -include -std -x ...), for a retry
    int nfallback;
    int cuda;                // parsed as CUDA host code
} ix_tu;

typedef struct ix_compdb {
    const char *path;        // the compile_commands.json file, absolute
    const char *dir;         // its directory
    ix_tu *tus;
    size_t ntus;
    size_t nduplicates;      // entries skipped because their file was already listed
    tb_pool pool;
} ix_compdb;

// Loads and translates the database. A missing, unreadable or malformed file is an error
// naming it (with the JSON error's line and column).
int ix_compdb_load(ix_compdb *db, const char *arg, tb_error *err);
void ix_compdb_free(ix_compdb *db);
// Splits a shell-quoted command line into p-owned words; returns the count.
int ix_split_command(tb_pool *p, const char *cmd, tb_vec *out /* of const char * */);
// A path made absolute against dir and normalised (realpath when it exists, else lexically).
const char *ix_abspath(tb_pool *p, const char *dir, const char *path);

#endif
