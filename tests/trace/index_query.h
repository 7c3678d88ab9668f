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
#include "index_unit_rows.h"
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

// files.id -> path, for the packed tables' file columns.
typedef struct tb_dump_files {
    char **path;  // by id; NULL: no such row
    long n;
} tb_dump_files;

static inline void tb_index_dump_files(sqlite3 *db, tb_dump_files *f) {
    long max = tb_index_q_long(db, "SELECT MAX(id) FROM files");
    f->n = max > 0 ? max + 1 : 0;
    f->path = calloc((size_t)f->n + 1, sizeof *f->path);
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v2(db, "SELECT id, path FROM files", -1, &st, NULL) == SQLITE_OK)
        while (sqlite3_step(st) == SQLITE_ROW) {
            long id = (long)sqlite3_column_int64(st, 0);
            if (id > 0 && id < f->n) f->path[id] = strdup((const char *)sqlite3_column_text(st, 1));
        }
    sqlite3_finalize(st);
}

static inline const char *tb_index_dump_path_of(void *ctx, long long id) {
    const tb_dump_files *f = ctx;
    return id > 0 && id < f->n ? f->path[id] : "(no files row)";
}

static inline void tb_dump_add(char **s, size_t *len, size_t *cap, const char *text) {
    size_t n = strlen(text);
    if (*len + n + 1 > *cap) {
        while (*len + n + 1 > *cap) *cap *= 2;
        *s = realloc(*s, *cap);
    }
    memcpy(*s + *len, text, n + 1);
    *len += n;
}

static inline int tb_dump_cmp(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

#define TB_DUMP_V(x) ((x) ? (x) : "NULL")

// A packed table's rows (index_unit_rows.h, unpacked by the indexer's own code), one line each
// as the queries give theirs: the unit's path, then the columns in the record's order, lines
// sorted. A record that does not unpack is a line that says so.
static inline void tb_index_dump_packed(sqlite3 *db, const char *table, size_t q, tb_dump_files *files, char **s,
                                        size_t *len, size_t *cap) {
    ix_unit_table t = !strcmp(table, "tu_deps") ? IX_TU_DEPS : !strcmp(table, "tu_functions") ? IX_TU_FUNCTIONS
                    : !strcmp(table, "tu_calls") ? IX_TU_CALLS : !strcmp(table, "tu_callbacks") ? IX_TU_CALLBACKS
                    : !strcmp(table, "tu_range_sites") ? IX_TU_RANGE_SITES : IX_TU_SYMBOLS;
    char sql[64];
    snprintf(sql, sizeof sql, "SELECT tu_id, rows FROM %s", table);
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK) {
        printf("  sql error: %s\n", sqlite3_errmsg(db));
        return;
    }
    char **lines = NULL;
    size_t n = 0, cap_lines = 0;
    char line[16384];
    while (sqlite3_step(st) == SQLITE_ROW) {
        long long tu = sqlite3_column_int64(st, 0);
        const char *unit = tb_index_dump_path_of(files, tu);
        ix_result r;
        ix_result_init(&r);
        int bad = ix_rows_unpack(sqlite3_column_blob(st, 1), (size_t)sqlite3_column_bytes(st, 1), t, &r,
                                 tb_index_dump_path_of, files);
        size_t rows = t == IX_TU_DEPS ? r.deps.len : t == IX_TU_FUNCTIONS ? r.funcs.len
                    : t == IX_TU_CALLS ? r.calls.len : t == IX_TU_CALLBACKS ? r.callbacks.len
                    : t == IX_TU_RANGE_SITES ? r.ranges.len : r.syms.len;
        for (size_t i = 0; i <= rows; i++) {
            if (i == rows && !bad) break;
            if (i == rows) {
                snprintf(line, sizeof line, "%zu %s|a malformed record|\n", q, unit);
            } else if (t == IX_TU_DEPS) {
                const ix_dep *d = &TB_VEC_AT(&r.deps, ix_dep, i);
                snprintf(line, sizeof line, "%zu %s|%s|%s|\n", q, unit, TB_DUMP_V(d->path), TB_DUMP_V(d->hash));
            } else if (t == IX_TU_FUNCTIONS) {  // (its index in the record: the callers the rows name)
                const ix_func *f = &TB_VEC_AT(&r.funcs, ix_func, i);
                snprintf(line, sizeof line, "%zu %s|%zu|%s|%s|%s|%u|%u|%u|%u|%d|%d|%d|\n", q, unit, i,
                         TB_DUMP_V(f->usr), TB_DUMP_V(f->name), TB_DUMP_V(f->file), f->line, f->col, f->end_line,
                         f->end_col, f->is_static, f->is_def, f->main_like);
            } else if (t == IX_TU_CALLS) {
                const ix_call *c = &TB_VEC_AT(&r.calls, ix_call, i);
                snprintf(line, sizeof line, "%zu %s|%d|%s|%s|%s|%s|%u|%u|%s|%s|%s|\n", q, unit, c->caller,
                         TB_DUMP_V(c->callee_usr), TB_DUMP_V(c->callee_name), TB_DUMP_V(c->field), TB_DUMP_V(c->file),
                         c->line, c->col, TB_DUMP_V(c->in_macro), TB_DUMP_V(c->resolution), TB_DUMP_V(c->candidates));
            } else if (t == IX_TU_CALLBACKS) {
                const ix_callback *b = &TB_VEC_AT(&r.callbacks, ix_callback, i);
                snprintf(line, sizeof line, "%zu %s|%d|%s|%s|%s|%u|%u|\n", q, unit, b->caller,
                         TB_DUMP_V(b->target_usr), TB_DUMP_V(b->passed_to), TB_DUMP_V(b->file), b->line, b->col);
            } else if (t == IX_TU_RANGE_SITES) {
                const ix_range *g = &TB_VEC_AT(&r.ranges, ix_range, i);
                snprintf(line, sizeof line, "%zu %s|%d|%s|%s|%s|%u|%u|\n", q, unit, g->caller, TB_DUMP_V(g->kind),
                         TB_DUMP_V(g->name), TB_DUMP_V(g->file), g->line, g->col);
            } else {
                const ix_sym *y = &TB_VEC_AT(&r.syms, ix_sym, i);
                snprintf(line, sizeof line, "%zu %s|%s|%s|%c|%d|\n", q, unit, TB_DUMP_V(y->usr), TB_DUMP_V(y->name),
                         (char)y->kind, y->defines);
            }
            if (n == cap_lines) lines = realloc(lines, (cap_lines = cap_lines ? 2 * cap_lines : 256) * sizeof *lines);
            lines[n++] = strdup(line);
        }
        ix_result_free(&r);
    }
    sqlite3_finalize(st);
    if (n) qsort(lines, n, sizeof *lines, tb_dump_cmp);
    for (size_t i = 0; i < n; i++) {
        tb_dump_add(s, len, cap, lines[i]);
        free(lines[i]);
    }
    free(lines);
}

// input_units, one line per file: its path, then its units' paths (sorted; a record that does
// not unpack says so).
static inline void tb_index_dump_input_units(sqlite3 *db, size_t q, tb_dump_files *files, char **s, size_t *len,
                                             size_t *cap) {
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v2(db, "SELECT path, units FROM input_units ORDER BY path", -1, &st, NULL) != SQLITE_OK) {
        printf("  sql error: %s\n", sqlite3_errmsg(db));
        return;
    }
    while (sqlite3_step(st) == SQLITE_ROW) {
        tb_vec ids;
        tb_vec_init(&ids, sizeof(long long), "a file's units");
        int bad = ix_units_unpack(sqlite3_column_blob(st, 1), (size_t)sqlite3_column_bytes(st, 1), &ids);
        char **units = calloc(ids.len + 1, sizeof *units);
        for (size_t i = 0; i < ids.len; i++) {
            const char *u = tb_index_dump_path_of(files, TB_VEC_AT(&ids, long long, i));
            units[i] = strdup(u ? u : "NULL");
        }
        if (ids.len) qsort(units, ids.len, sizeof *units, tb_dump_cmp);
        char pre[32];
        snprintf(pre, sizeof pre, "%zu ", q);
        tb_dump_add(s, len, cap, pre);
        tb_dump_add(s, len, cap, (const char *)sqlite3_column_text(st, 0));
        tb_dump_add(s, len, cap, "|");
        for (size_t i = 0; i < ids.len; i++) {
            tb_dump_add(s, len, cap, units[i]);
            tb_dump_add(s, len, cap, "|");
            free(units[i]);
        }
        tb_dump_add(s, len, cap, bad ? "a malformed record|\n" : "\n");
        free(units);
        tb_vec_free(&ids);
    }
    sqlite3_finalize(st);
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
        "SELECT p.path, t.inputs, t.reduced, t.deps_kept, hex(t.command) FROM tu_inputs t LEFT JOIN files p"
        " ON p.id = t.tu_id ORDER BY 1",
        "packed tu_deps",
        "input_units",
        "packed tu_functions",
        "packed tu_calls",
        "SELECT p.path, t.record, t.field, t.function_usr, q.path, t.line FROM tu_field_targets t LEFT JOIN files p"
        " ON p.id = t.tu_id LEFT JOIN files q ON q.id = t.file_id ORDER BY 1,2,3,4,5,6",
        "packed tu_callbacks",
        "packed tu_range_sites",
        "packed tu_symbols",
    };
    size_t cap = 1 << 16, len = 0;
    char *s = malloc(cap);
    s[0] = 0;
    tb_dump_files files = {0};
    tb_index_dump_files(db, &files);
    for (size_t q = 0; q < sizeof queries / sizeof *queries; q++) {
        if (!strncmp(queries[q], "packed ", 7)) {
            tb_index_dump_packed(db, queries[q] + 7, q, &files, &s, &len, &cap);
            continue;
        }
        if (!strcmp(queries[q], "input_units")) {
            tb_index_dump_input_units(db, q, &files, &s, &len, &cap);
            continue;
        }
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
    for (long i = 0; i < files.n; i++) free(files.path[i]);
    free(files.path);
    sqlite3_close(db);
    return s;
}

// The rows of the tu_* tables whose unit is not a unit's files row (what a unit leaving the
// database must not leave behind), or -1 when the file cannot be read.
static inline long tb_index_stray_unit_rows(const char *path) {
    static const char *const tables[] = {"tu_inputs", "tu_deps", "tu_functions", "tu_calls",
                                         "tu_field_targets", "tu_callbacks", "tu_range_sites", "tu_symbols"};
    sqlite3 *db = tb_index_open_ro(path);
    if (!db) return -1;
    long stray = 0;
    for (size_t t = 0; t < sizeof tables / sizeof *tables && stray >= 0; t++) {
        long n = tb_index_q_long(db, "SELECT COUNT(*) FROM %s WHERE tu_id NOT IN"
                                 " (SELECT id FROM files WHERE is_tu = 1)", tables[t]);
        stray = n < 0 ? -1 : stray + n;
    }
    sqlite3_close(db);
    return stray;
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
