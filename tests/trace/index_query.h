// index_query.h — what the trace tests share to look into an index: open it read-only,
// read one number from a query, index a fixture once, whether the project builds NCCL.
#ifndef TB_TESTS_TRACE_INDEX_QUERY_H
#define TB_TESTS_TRACE_INDEX_QUERY_H

#include <sqlite3.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tb_shell.h"

static inline sqlite3 *tb_index_open_ro(const char *path) {
    sqlite3 *db = NULL;
    if (sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL) != SQLITE_OK) {
        sqlite3_close(db);
        return NULL;
    }
    return db;
}

// The first column of the first row of a query (sqlite3_mprintf format: %Q quotes), or -1.
static inline long tb_index_vq_long(sqlite3 *db, const char *fmt, va_list ap) {
    char *sql = sqlite3_vmprintf(fmt, ap);
    sqlite3_stmt *st = NULL;
    long v = -1;
    if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK)
        printf("  sql error: %s\n    %s\n", sqlite3_errmsg(db), sql);
    else if (sqlite3_step(st) == SQLITE_ROW && sqlite3_column_type(st, 0) != SQLITE_NULL)
        v = (long)sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    sqlite3_free(sql);
    return v;
}

static inline long tb_index_q_long(sqlite3 *db, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    long v = tb_index_vq_long(db, fmt, ap);
    va_end(ap);
    return v;
}

// Whether the project's compilation database compiles engine/comm/nccl_backend.c with NCCL
// (CMake found the CUDA toolkit and NCCL: -DTB_HAVE_NCCL=1); without it the file is the stub
// that calls no nccl* function.
static inline int tb_project_nccl_built(void) {
    json_t *db = tb_load_json(TB_BIN_DIR "/../compile_commands.json");
    int built = 0;
    size_t i;
    json_t *e;
    json_array_foreach(db, i, e) {
        const char *file = json_string_value(json_object_get(e, "file"));
        const char *cmd = json_string_value(json_object_get(e, "command"));
        if (file && cmd && tb_has(file, "engine/comm/nccl_backend.c")) built = tb_has(cmd, "-DTB_HAVE_NCCL=1");
    }
    json_decref(db);
    return built;
}

// Indexes a fixture once: `tracebook index --compdb DIR --out INDEX` when its inputs were
// written (inputs_ok), else status 99 and a note. *status -1: not yet. Returns whether the
// index succeeded; *output keeps what it printed.
static inline int tb_index_fixture(int *status, char **output, int inputs_ok, const char *tracebook,
                                   const char *compdb_dir, const char *index) {
    if (*status >= 0) return *status == 0;
    if (!inputs_ok) {
        *status = 99;
        *output = strdup("cannot write the fixture inputs");
        return 0;
    }
    unlink(index);
    *status = tb_shell(output, "'%s' index --compdb '%s' --out '%s'", tracebook, compdb_dir, index);
    return *status == 0;
}

#endif
