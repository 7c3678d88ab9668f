// index_query.h — what the trace tests share to look into an index: open it read-only,
// read one number from a query, dump and compare whole indexes, write a CMake file-API reply,
// index a fixture once, whether the project builds NCCL.
#ifndef TB_TESTS_TRACE_INDEX_QUERY_H
#define TB_TESTS_TRACE_INDEX_QUERY_H

#include <sqlite3.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/fileio.h"
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

// Every table of an index as text, ids replaced by what they stand for (paths, USRs), rows in
// a canonical order: two indexes with the same content give the same text, whatever their
// rows' ids and order. meta's `created` (the time) and `indexer` (the executable's hash) are
// left out. NULL when the file cannot be opened; a query that fails prints its error.
static inline char *tb_index_dump(const char *path) {
    sqlite3 *db = tb_index_open_ro(path);
    if (!db) return NULL;
    static const char *const queries[] = {
        "SELECT path, is_tu, status, errors, diagnostics FROM files ORDER BY 1",
        "SELECT f.usr, f.name, p.path, f.line, f.col, f.is_static, f.is_definition, f.end_line, f.end_col, u.path"
        " FROM functions f LEFT JOIN files p ON p.id = f.file_id LEFT JOIN files u ON u.id = f.unit_id ORDER BY 1",
        "SELECT fn.usr, c.callee_usr, c.callee_name, c.field, p.path, c.line, c.col, c.in_macro FROM calls c"
        " JOIN functions fn ON fn.id = c.caller_id LEFT JOIN files p ON p.id = c.file_id ORDER BY 1,2,3,4,5,6,7,8",
        "SELECT record, field, function_usr, p.path, line FROM field_targets t LEFT JOIN files p ON p.id = t.file_id"
        " ORDER BY 1,2,3",
        "SELECT fn.usr, r.kind, r.name, p.path, r.line, r.col FROM range_sites r JOIN functions fn ON fn.id ="
        " r.function_id LEFT JOIN files p ON p.id = r.file_id ORDER BY 1,2,3,4,5,6",
        "SELECT fn.usr, b.target_usr, b.passed_to, p.path, b.line, b.col FROM callbacks b JOIN functions fn ON"
        " fn.id = b.function_id LEFT JOIN files p ON p.id = b.file_id ORDER BY 1,2,3,4,5,6",
        "SELECT fn.usr, s.callee_name, p.path, s.line, s.col, c.callee_name, c.line, c.col FROM collective_sites s"
        " JOIN functions fn ON fn.id = s.function_id LEFT JOIN files p ON p.id = s.file_id LEFT JOIN calls c ON"
        " c.id = s.call_id ORDER BY 1,2,3,4,5",
        "SELECT t.target, t.type, p.path FROM targets t LEFT JOIN files p ON p.id = t.file_id ORDER BY 1,3",
        "SELECT f.usr, l.target, l.library FROM libraries l JOIN functions f ON f.id = l.function_id ORDER BY 1,2",
        "SELECT u.path, p.path, e.errors, e.first FROM file_errors e LEFT JOIN files u ON u.id = e.unit_id"
        " LEFT JOIN files p ON p.id = e.file_id ORDER BY 1,2",
        "SELECT key, value FROM meta WHERE key NOT IN ('created', 'indexer') ORDER BY 1",
        "SELECT p.path, t.inputs, t.reduced FROM tu_inputs t LEFT JOIN files p ON p.id = t.tu_id ORDER BY 1",
        "SELECT p.path, d.path, d.hash FROM tu_deps d LEFT JOIN files p ON p.id = d.tu_id ORDER BY 1,2",
        "SELECT p.path, t.usr, t.name, q.path, t.line, t.col, t.end_line, t.end_col, t.is_static, t.is_definition,"
        " t.main_like FROM tu_functions t LEFT JOIN files p ON p.id = t.tu_id LEFT JOIN files q ON q.id = t.file_id"
        " ORDER BY 1,2",
        "SELECT p.path, t.caller, t.callee_usr, t.callee_name, t.field, q.path, t.line, t.col, t.in_macro FROM"
        " tu_calls t LEFT JOIN files p ON p.id = t.tu_id LEFT JOIN files q ON q.id = t.file_id"
        " ORDER BY 1,2,3,4,5,6,7,8,9",
        "SELECT p.path, t.record, t.field, t.function_usr, q.path, t.line FROM tu_field_targets t LEFT JOIN files p"
        " ON p.id = t.tu_id LEFT JOIN files q ON q.id = t.file_id ORDER BY 1,2,3,4,5,6",
        "SELECT p.path, t.caller, t.target_usr, t.passed_to, q.path, t.line, t.col FROM tu_callbacks t LEFT JOIN"
        " files p ON p.id = t.tu_id LEFT JOIN files q ON q.id = t.file_id ORDER BY 1,2,3,4,5,6,7",
        "SELECT p.path, t.caller, t.kind, t.name, q.path, t.line, t.col FROM tu_range_sites t LEFT JOIN files p"
        " ON p.id = t.tu_id LEFT JOIN files q ON q.id = t.file_id ORDER BY 1,2,3,4,5,6,7",
        "SELECT p.path, t.usr, t.name, t.kind, t.defines FROM tu_symbols t LEFT JOIN files p ON p.id = t.tu_id"
        " ORDER BY 1,2,3,4,5",
    };
    size_t cap = 1 << 16, len = 0;
    char *s = malloc(cap);
    s[0] = 0;
    for (size_t q = 0; q < sizeof queries / sizeof *queries; q++) {
        sqlite3_stmt *st = NULL;
        if (sqlite3_prepare_v2(db, queries[q], -1, &st, NULL) != SQLITE_OK) {
            printf("  sql error: %s\n", sqlite3_errmsg(db));
            continue;
        }
        while (sqlite3_step(st) == SQLITE_ROW) {
            for (int c = 0; c < sqlite3_column_count(st); c++) {
                const char *v = (const char *)sqlite3_column_text(st, c);
                size_t need = len + (v ? strlen(v) : 4) + 8;
                if (need > cap) {
                    while (need > cap) cap *= 2;
                    s = realloc(s, cap);
                }
                if (!c) len += (size_t)snprintf(s + len, cap - len, "%zu ", q);  // the table's query
                len += (size_t)snprintf(s + len, cap - len, "%s|", v ? v : "NULL");
            }
            s[len++] = '\n';
            s[len] = 0;
        }
        sqlite3_finalize(st);
    }
    sqlite3_close(db);
    return s;
}

// Whether two indexes have the same content (tb_index_dump); prints both dumps when not.
static inline int tb_index_same(const char *what_a, const char *a_path, const char *what_b, const char *b_path) {
    char *a = tb_index_dump(a_path), *b = tb_index_dump(b_path);
    int same = a && b && !strcmp(a, b);
    if (!same) printf("  %s:\n%s\n  %s:\n%s\n", what_a, a ? a : "(none)", what_b, b ? b : "(none)");
    free(a);
    free(b);
    return same;
}

// A hand-written CMake file-API reply in reply_dir: one executable "app" of the given sources
// ("{\"path\": \"a.c\", \"compileGroupIndex\": 0}, ..."), its link line's fragments
// ("{\"fragment\": \"-lm\", \"role\": \"libraries\"}, ..."). 0 when written.
static inline int tb_write_app_reply(const char *reply_dir, const char *source_dir, const char *build_dir,
                                     const char *sources, const char *fragments) {
    char path[4096], text[8192];
    int bad = 0;
    snprintf(path, sizeof path, "%s/index-2000-01-01T00-00-00-0000.json", reply_dir);
    bad |= tb_write_text(path, "{\"reply\": {\"codemodel-v2\": {\"jsonFile\": \"codemodel-v2-x.json\"}}}\n");
    snprintf(path, sizeof path, "%s/codemodel-v2-x.json", reply_dir);
    snprintf(text, sizeof text,
             "{\"paths\": {\"source\": \"%s\", \"build\": \"%s\"}, \"configurations\": [{\"targets\": [{\"id\":"
             " \"app::@x\", \"name\": \"app\", \"jsonFile\": \"target-app.json\"}]}]}\n",
             source_dir, build_dir);
    bad |= tb_write_text(path, text);
    snprintf(path, sizeof path, "%s/target-app.json", reply_dir);
    snprintf(text, sizeof text,
             "{\"name\": \"app\", \"type\": \"EXECUTABLE\", \"sources\": [%s], \"link\": {\"commandFragments\": [%s]}}\n",
             sources, fragments);
    bad |= tb_write_text(path, text);
    return bad ? -1 : 0;
}

// An ar archive with only its symbol index (the "/" member GNU ar writes) naming n functions:
// enough for the indexer, which reads no member. 0 when written.
static inline int tb_write_symbol_archive(const char *path, const char *const *names, int n) {
    unsigned char body[1024];
    size_t len = 4 + 4 * (size_t)n;
    body[0] = body[1] = body[2] = 0;
    body[3] = (unsigned char)n;
    memset(body + 4, 0, 4 * (size_t)n);
    for (int i = 0; i < n; i++) {
        size_t k = strlen(names[i]) + 1;
        memcpy(body + len, names[i], k);
        len += k;
    }
    if (len % 2) body[len++] = '\n';
    char file[2048];
    int h = snprintf(file, sizeof file, "!<arch>\n%-16s%-12s%-6s%-6s%-8s%-10zu`\n", "/", "0", "0", "0", "0", len);
    memcpy(file + h, body, len);
    return tb_write_bytes(path, file, (size_t)h + len);
}

// Indexes a fixture once: `tracebook index --compdb DIR --output INDEX` when its inputs were
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
    *status = tb_shell(output, "'%s' index --compdb '%s' --output '%s'", tracebook, compdb_dir, index);
    return *status == 0;
}

#endif
