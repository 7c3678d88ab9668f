// index_targets.h — which translation units link into which build target, from CMake's
// file API reply (index_targets.c).
#ifndef TB_TRACE_INDEX_TARGETS_H
#define TB_TRACE_INDEX_TARGETS_H

#include <stddef.h>
#include "core/error.h"
#include "index_compdb.h"
#include "pool.h"
#include "strmap.h"
#include "vec.h"

typedef struct ix_target_row {
    const char *target, *type, *file;  // file absolute, normalised
} ix_target_row;

// A library a linking target (executable, shared or module library) names on its link line,
// in link order, as a file: -lNAME found on the -L directories and the system's; libc,
// which the compiler driver adds, last.
typedef struct ix_target_link {
    const char *target, *library;
} ix_target_link;

typedef struct ix_targets {
    const char *source_dir;  // the code model's source directory, or NULL
    const char *reply_dir;
    tb_vec rows;             // of ix_target_row
    tb_vec links;            // of ix_target_link
    size_t ntargets;
    size_t capped;           // inferred link units: the seeds whose choices were cut at the limit
    tb_strmap is_file;       // a library's candidate path -> 1 a regular file, 0 not (stat'd once:
                             // every target's link line searches the same directories)
    tb_pool pool;
} ix_targets;

// 0: rows filled; 1: no reply there (rows empty); -1: a reply that cannot be read (err).
int ix_targets_load(ix_targets *t, const char *build_dir, tb_error *err);
// The user's map of binaries to their sources (`tracebook index --targets FILE`): a JSON
// object {"binary": ["src/a.c", "src/common.c"], ...}, a source's path absolute or relative
// to the file's directory, every source a unit of the database. Each binary is an
// executable (type "EXECUTABLE (targets file)"); no link lines, so no libraries. 0, or -1
// with err naming the file, the binary and the value that is wrong.
int ix_targets_load_map(ix_targets *t, const char *path, const ix_compdb *db, tb_error *err);
void ix_targets_free(ix_targets *t);
// Hex SHA-256 of what decides the targets and libraries rows: the targets' source (the meta
// value), their rows and link lines.
const char *ix_targets_digest(tb_pool *p, const char *targets_source, const ix_targets *targets);
// Hex SHA-256 of the CMake file API reply directory as stat(2) sees it (each file's name, size,
// mtime, ctime, inode): equal to a previous run's, the reply is the one read then (CMake writes
// new files when it regenerates) and the targets need not be read again. NULL: no reply.
// (Not seen: a library that appears or disappears on the -L directories meanwhile; --full.)
const char *ix_targets_signature(tb_pool *p, const char *build_dir);

#endif
