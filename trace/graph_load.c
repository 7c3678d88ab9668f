// graph_load.c — tb_graph_open and tb_graph_free (graph.h): the source index's rows read into
// memory, the id columns turned into array indices, every call resolved to its candidate
// callees (direct calls by USR and name, calls through fields by their assigned functions,
// callbacks as calls at the mention).
#include "graph.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/xalloc.h"
#include "index_db.h"
#include "vec.h"

// Case-insensitive "contains".
static int has_word(const char *s, const char *w) {
    size_t n = strlen(w);
    for (; s && *s; s++) {
        size_t i = 0;
        while (i < n && s[i] && (s[i] | 32) == (w[i] | 32)) i++;
        if (i == n) return 1;
    }
    return 0;
}

static char *dup_col(sqlite3_stmt *st, int i) {
    const unsigned char *t = sqlite3_column_text(st, i);
    return t ? tb_xstrdup((const char *)t, "string") : NULL;
}

// --- id → index maps -------------------------------------------------------------------

// A row id of the index and the array index it was loaded at. A vec of them sorted by id
// maps ids to indices (binary search); rows read ORDER BY id are appended in order.
typedef struct id_idx {
    int64_t id;
    int idx;
} id_idx;

static int cmp_id_idx(const void *a, const void *b) {
    int64_t x = ((const id_idx *)a)->id, y = ((const id_idx *)b)->id;
    return x < y ? -1 : x > y;
}

static int id_find(const tb_vec *m, int64_t id) {
    id_idx key = {id, 0};
    const id_idx *hit = m->len ? bsearch(&key, m->items, m->len, sizeof key, cmp_id_idx) : NULL;
    return hit ? hit->idx : -1;
}

static void id_add(tb_vec *m, int64_t id, int idx) { *(id_idx *)tb_vec_push(m) = (id_idx){id, idx}; }

// --- loading ---------------------------------------------------------------------------

static int prepare(sqlite3 *db, const char *sql, sqlite3_stmt **st, tb_error *err, const char *path) {
    if (sqlite3_prepare_v2(db, sql, -1, st, NULL) != SQLITE_OK)
        return tb_fail(err, "%s: reading the index: %s", path, sqlite3_errmsg(db));
    return 0;
}

static const tb_graph *sort_graph;  // qsort context (single-threaded tool)

static int cmp_name(const void *a, const void *b) {
    int c = strcmp(sort_graph->fns[*(const int *)a].name, sort_graph->fns[*(const int *)b].name);
    return c ? c : *(const int *)a - *(const int *)b;
}

static const char *strip_record(const char *r) {
    for (;;) {
        if (!strncmp(r, "struct ", 7)) r += 7;
        else if (!strncmp(r, "const ", 6)) r += 6;
        else if (!strncmp(r, "union ", 6)) r += 6;
        else return r;
    }
}

static char *field_key(const char *record, const char *field) {
    record = strip_record(record);
    size_t n = strlen(record) + strlen(field) + 2;
    char *k = tb_xmalloc(n, "field key");
    snprintf(k, n, "%s.%s", record, field);
    return k;
}

static int find_field(const tb_graph *g, const char *key) {
    const int *i = tb_strmap_get(&g->field_by_key, key);
    return i ? *i : -1;
}

// Candidate callees of a direct call over the whole index. An external function may be
// defined in several binaries (each definition its own row); a static one is its USR alone.
static void resolve_direct(tb_graph *g, tb_gcall *c) {
    int f = c->callee_usr ? tb_graph_fn_by_usr(g, c->callee_usr) : -1;
    tb_vec found;
    tb_vec_init(&found, sizeof(int), "call targets");
    if (f >= 0 && g->fns[f].is_static) {
        *(int *)tb_vec_push(&found) = f;
    } else {
        const char *name = f >= 0 ? g->fns[f].name : c->callee_name;
        int i = name ? tb_graph_name_first(g, name) : -1;
        for (; i >= 0 && i < g->nfns && !strcmp(g->fns[g->by_name[i]].name, name); i++) {
            const tb_gfn *h = &g->fns[g->by_name[i]];
            if (h->is_static || !h->is_definition) continue;
            *(int *)tb_vec_push(&found) = g->by_name[i];
        }
        if (found.len == 0 && f >= 0) *(int *)tb_vec_push(&found) = f;  // a declaration only (library function)
    }
    int n = (int)found.len;
    int *out = found.len ? tb_vec_take(&found) : tb_xmalloc(sizeof *out, "call targets");
    if (n > 1 && c->file >= 0 && g->files[c->file].ntargets > 0) {
        // copies in several binaries: those linked with the caller
        int k = 0;
        for (int i = 0; i < n; i++) {
            int file = g->fns[out[i]].file, shared = file < 0 || g->files[file].ntargets == 0;
            for (int t = 0; t < g->ntargets && !shared; t++)
                shared = g->targets[t].has_file[c->file] && g->targets[t].has_file[file];
            if (shared) out[k++] = out[i];
        }
        if (k > 0) n = k;
    }
    c->targets = out;
    c->ntargets = n;
}

// --- callbacks -------------------------------------------------------------------------
//
// A callbacks row (a function passed as an argument: pthread_create(.., run_job, ..),
// parallel_state_run_ranks(&world, rank_main, runs), qsort(.., cmp); or stored, returned)
// becomes a call of the function from the one whose body names it, at the mention
// (callback 1, passed_to the callee it was passed to): whoever passes a callback causes it
// to run.

static int cmp_call(const void *a, const void *b) {
    const tb_gcall *x = sort_graph->calls + *(const int *)a, *y = sort_graph->calls + *(const int *)b;
    if (x->caller != y->caller) return x->caller < y->caller ? -1 : 1;
    int c = tb_pos_cmp(x->pos, y->pos);
    if (c) return c;
    if (x->callback != y->callback) return x->callback - y->callback;  // the call, then what it is passed
    return *(const int *)a - *(const int *)b;
}

// Adds the callbacks rows as calls and puts every function's calls back in source order.
static int load_callbacks(tb_graph *g, sqlite3 *db, tb_vec *calls, const tb_vec *fns, const tb_vec *files,
                          tb_error *err, const char *path) {
    sqlite3_stmt *st = NULL;
    if (prepare(db, "SELECT function_id, target_usr, passed_to, file_id, line, col FROM callbacks ORDER BY id", &st,
                err, path))
        return -1;
    int nbefore = g->ncalls;
    while (sqlite3_step(st) == SQLITE_ROW) {
        int caller = id_find(fns, sqlite3_column_int64(st, 0));
        const char *usr = (const char *)sqlite3_column_text(st, 1);
        int f = usr ? tb_graph_fn_by_usr(g, usr) : -1;
        if (caller < 0 || f < 0) continue;  // a function the index has no row for (a system header's)
        tb_gcall *c = tb_vec_push(calls);
        c->caller = caller;
        c->callee_usr = tb_xstrdup(g->fns[f].usr, "callee USR");
        c->callee_name = tb_xstrdup(g->fns[f].name, "callee name");
        c->file = sqlite3_column_type(st, 3) == SQLITE_NULL ? g->fns[caller].file
                                                            : id_find(files, sqlite3_column_int64(st, 3));
        c->pos = (tb_pos){sqlite3_column_int(st, 4), sqlite3_column_int(st, 5)};
        c->field_index = -1;
        c->callback = 1;
        c->passed_to = dup_col(st, 2);
        resolve_direct(g, c);
    }
    sqlite3_finalize(st);
    g->calls = calls->items;
    g->ncalls = (int)calls->len;
    if (g->ncalls > nbefore) {
        int *order = tb_xmalloc((size_t)g->ncalls * sizeof *order, "sort order");
        for (int i = 0; i < g->ncalls; i++) order[i] = i;
        sort_graph = g;
        qsort(order, (size_t)g->ncalls, sizeof *order, cmp_call);
        tb_gcall *sorted = tb_xmalloc((size_t)g->ncalls * sizeof *sorted, "sorted calls");
        for (int i = 0; i < g->ncalls; i++) sorted[i] = g->calls[order[i]];
        free(tb_vec_take(calls));
        g->calls = sorted;
        free(order);
    }
    for (int f = 0, i = 0; f < g->nfns; f++) {
        g->fns[f].calls_begin = i;
        while (i < g->ncalls && g->calls[i].caller == f) i++;
        g->fns[f].calls_end = i;
    }
    return 0;
}

static void set_root(tb_graph *g, const char *meta_root) {
    if (meta_root && *meta_root) {
        g->root = tb_xstrdup(meta_root, "project root");
    } else {
        // the longest common directory of the translation units
        char *root = NULL;
        for (int i = 0; i < g->nfiles; i++) {
            if (!g->files[i].is_tu || g->files[i].path[0] != '/') continue;
            if (!root) {
                root = tb_xstrdup(g->files[i].path, "project root");
                char *slash = strrchr(root, '/');
                if (slash) *slash = '\0';
                continue;
            }
            size_t k = 0;
            const char *p = g->files[i].path;
            while (root[k] && root[k] == p[k]) k++;
            if (root[k] == '\0' && (p[k] == '/' || p[k] == '\0')) continue;
            while (k > 0 && root[k] != '/') k--;
            root[k] = '\0';
        }
        g->root = root ? root : tb_xstrdup("", "project root");
    }
    size_t rl = strlen(g->root);
    while (rl > 1 && g->root[rl - 1] == '/') g->root[--rl] = '\0';
    for (int i = 0; i < g->nfiles; i++) {
        const char *p = g->files[i].path;
        g->files[i].shown = (rl > 1 && !strncmp(p, g->root, rl) && p[rl] == '/') ? p + rl + 1 : p;
    }
}

static int load(tb_graph *g, sqlite3 *db, const char *path, tb_error *err) {
    sqlite3_stmt *st = NULL;
    tb_vec files, fns, rows;  // id -> index maps (files, functions); the rows being read
    tb_vec_init(&files, sizeof(id_idx), "file ids");
    tb_vec_init(&fns, sizeof(id_idx), "function ids");
    tb_vec_init(&rows, 1, "index rows");
    int rc = -1;
    char *meta_root = NULL;

    if (prepare(db, "SELECT key, value FROM meta", &st, err, path)) goto out;
    while (sqlite3_step(st) == SQLITE_ROW) {
        const char *k = (const char *)sqlite3_column_text(st, 0);
        if (k && (!strcmp(k, "root") || !strcmp(k, "source_dir") || !strcmp(k, "project_root")) && !meta_root)
            meta_root = dup_col(st, 1);
    }
    sqlite3_finalize(st);

    if (prepare(db, "SELECT id, path, is_tu, status, errors, diagnostics FROM files ORDER BY id", &st, err, path))
        goto out;
    tb_vec_init(&rows, sizeof(tb_gfile), "index files");
    while (sqlite3_step(st) == SQLITE_ROW) {
        tb_gfile *f = tb_vec_push(&rows);
        f->path = dup_col(st, 1);
        if (!f->path) f->path = tb_xstrdup("?", "path");
        f->is_tu = sqlite3_column_int(st, 2);
        const char *status = (const char *)sqlite3_column_text(st, 3);
        f->partial = f->is_tu && status && strcmp(status, "ok");
        f->errors = sqlite3_column_int(st, 4);
        const char *diags = (const char *)sqlite3_column_text(st, 5);
        if (f->partial && diags) f->first_error = tb_xstrndup(diags, strcspn(diags, "\n"), "diagnostic");
        id_add(&files, sqlite3_column_int64(st, 0), (int)rows.len - 1);
    }
    sqlite3_finalize(st);
    g->nfiles = (int)rows.len;
    g->files = tb_vec_take(&rows);

    if (prepare(db, "SELECT target, type, file_id FROM targets ORDER BY target", &st, err, path)) goto out;
    tb_vec_init(&rows, sizeof(tb_gtarget), "targets");
    while (sqlite3_step(st) == SQLITE_ROW) {
        const char *name = (const char *)sqlite3_column_text(st, 0);
        int file = id_find(&files, sqlite3_column_int64(st, 2));
        if (!name || file < 0) continue;
        tb_gtarget *t = rows.len ? &TB_VEC_AT(&rows, tb_gtarget, rows.len - 1) : NULL;
        if (!t || strcmp(t->name, name)) {
            t = tb_vec_push(&rows);
            t->name = tb_xstrdup(name, "name");
            t->type = dup_col(st, 1);
            t->has_file = tb_xcalloc((size_t)g->nfiles + 1, 1, "target files");
            t->is_executable = !t->type || !*t->type || has_word(t->type, "exec");
        }
        if (!t->has_file[file]) {
            t->has_file[file] = 1;
            g->files[file].ntargets++;
        }
    }
    sqlite3_finalize(st);
    st = NULL;
    g->ntargets = (int)rows.len;
    g->targets = tb_vec_take(&rows);
    if (prepare(db,
                "SELECT id, usr, name, file_id, line, col, is_static, is_definition, end_line, end_col, unit_id"
                " FROM functions ORDER BY id",
                &st, err, path))
        goto out;
    tb_vec_init(&rows, sizeof(tb_gfn), "functions");
    while (sqlite3_step(st) == SQLITE_ROW) {
        tb_gfn *f = tb_vec_push(&rows);
        f->id = sqlite3_column_int64(st, 0);
        f->usr = dup_col(st, 1);
        f->name = dup_col(st, 2);
        if (!f->usr) f->usr = tb_xstrdup("", "USR");
        if (!f->name) f->name = tb_xstrdup("?", "name");
        f->file = sqlite3_column_type(st, 3) == SQLITE_NULL ? -1 : id_find(&files, sqlite3_column_int64(st, 3));
        f->pos = (tb_pos){sqlite3_column_int(st, 4), sqlite3_column_int(st, 5)};
        f->is_static = sqlite3_column_int(st, 6);
        f->is_definition = sqlite3_column_int(st, 7);
        f->end = (tb_pos){sqlite3_column_int(st, 8), sqlite3_column_int(st, 9)};
        f->unit = sqlite3_column_type(st, 10) == SQLITE_NULL ? -1 : id_find(&files, sqlite3_column_int64(st, 10));
        id_add(&fns, f->id, (int)rows.len - 1);
    }
    sqlite3_finalize(st);
    g->nfns = (int)rows.len;
    g->fns = tb_vec_take(&rows);
    // USRs are unique (functions.usr UNIQUE); names group the functions of one name, in
    // index order, and name_first gives where each group starts in by_name
    for (int i = 0; i < g->nfns; i++)
        if (!tb_strmap_get(&g->fn_by_usr, g->fns[i].usr)) tb_strmap_put(&g->fn_by_usr, g->fns[i].usr, i);
    g->by_name = tb_xcalloc((size_t)g->nfns + 1, sizeof *g->by_name, "functions by name");
    for (int i = 0; i < g->nfns; i++) g->by_name[i] = i;
    sort_graph = g;
    qsort(g->by_name, (size_t)g->nfns, sizeof *g->by_name, cmp_name);
    for (int i = g->nfns - 1; i >= 0; i--) tb_strmap_put(&g->name_first, g->fns[g->by_name[i]].name, i);

    if (prepare(db, "SELECT record, field, function_usr FROM field_targets", &st, err, path)) goto out;
    {
        typedef struct kf {
            char *key;
            int fn;
        } kf;
        tb_vec kfs;
        tb_vec_init(&kfs, sizeof(kf), "field targets");
        while (sqlite3_step(st) == SQLITE_ROW) {
            const char *rec = (const char *)sqlite3_column_text(st, 0);
            const char *fld = (const char *)sqlite3_column_text(st, 1);
            const char *usr = (const char *)sqlite3_column_text(st, 2);
            int f = usr ? tb_graph_fn_by_usr(g, usr) : -1;
            if (!rec || !fld || f < 0) continue;
            *(kf *)tb_vec_push(&kfs) = (kf){field_key(rec, fld), f};
        }
        kf *pairs = kfs.items;
        int np = (int)kfs.len;
        sqlite3_finalize(st);
        st = NULL;
        // group by key ("struct x" and "x" are one record), functions in index order
        for (int i = 1; i < np; i++)  // insertion sort: few rows, stable
            for (int j = i; j > 0; j--) {
                int c = strcmp(pairs[j - 1].key, pairs[j].key);
                if (c < 0 || (c == 0 && pairs[j - 1].fn <= pairs[j].fn)) break;
                kf tmp = pairs[j - 1];
                pairs[j - 1] = pairs[j];
                pairs[j] = tmp;
            }
        // one field per key, its distinct functions
        tb_vec_init(&rows, sizeof(tb_gfield), "fields");
        for (int i = 0; i < np;) {
            tb_gfield *fd = tb_vec_push(&rows);
            fd->key = pairs[i].key;
            tb_vec fns_of;
            tb_vec_init(&fns_of, sizeof(int), "field functions");
            int j = i;
            for (; j < np && !strcmp(pairs[j].key, fd->key); j++) {
                if (j > i) free(pairs[j].key);
                if (j == i || pairs[j].fn != pairs[j - 1].fn) *(int *)tb_vec_push(&fns_of) = pairs[j].fn;
            }
            fd->nfns = (int)fns_of.len;
            fd->fns = tb_vec_take(&fns_of);
            tb_strmap_put(&g->field_by_key, fd->key, (int)rows.len - 1);
            i = j;
        }
        g->nfields = (int)rows.len;
        g->fields = tb_vec_take(&rows);
        tb_vec_free(&kfs);
    }

    if (prepare(db,
                "SELECT caller_id, callee_usr, callee_name, field, file_id, line, col, in_macro, id, resolution, candidates"
                " FROM calls"
                " ORDER BY caller_id, line, col, id",
                &st, err, path))
        goto out;
    tb_vec calls;
    tb_vec_init(&calls, sizeof(tb_gcall), "calls");
    while (sqlite3_step(st) == SQLITE_ROW) {
        int caller = id_find(&fns, sqlite3_column_int64(st, 0));
        if (caller < 0) continue;
        tb_gcall *c = tb_vec_push(&calls);
        c->caller = caller;
        c->callee_usr = dup_col(st, 1);
        c->callee_name = dup_col(st, 2);
        if (!c->callee_name) c->callee_name = tb_xstrdup("?", "callee name");
        c->field = dup_col(st, 3);
        if (c->field && !*c->field) {
            free(c->field);
            c->field = NULL;
        }
        c->file = sqlite3_column_type(st, 4) == SQLITE_NULL ? g->fns[caller].file
                                                            : id_find(&files, sqlite3_column_int64(st, 4));
        c->pos = (tb_pos){sqlite3_column_int(st, 5), sqlite3_column_int(st, 6)};
        c->in_macro = dup_col(st, 7);
        c->field_index = -1;
        c->id = sqlite3_column_int64(st, 8);
        c->resolution = dup_col(st, 9);
        c->candidates = dup_col(st, 10);
    }
    sqlite3_finalize(st);
    g->ncalls = (int)calls.len;
    g->calls = calls.items;  // calls keeps them: load_callbacks appends
    for (int f = 0, i = 0; f < g->nfns; f++) {  // calls are grouped by caller id = function order
        g->fns[f].calls_begin = i;
        while (i < g->ncalls && g->calls[i].caller == f) i++;
        g->fns[f].calls_end = i;
    }
    for (int i = 0; i < g->ncalls; i++) {
        tb_gcall *c = &g->calls[i];
        if (c->field) {
            const char *dot = strrchr(c->field, '.');
            if (dot) {
                char *rec = tb_xstrndup(c->field, (size_t)(dot - c->field), "record name");
                char *key = field_key(rec, dot + 1);
                c->field_index = find_field(g, key);
                free(rec);
                free(key);
            }
            if (c->field_index >= 0) {
                const tb_gfield *fd = &g->fields[c->field_index];
                c->targets = tb_xmalloc((size_t)(fd->nfns + 1) * sizeof *c->targets, "call targets");
                memcpy(c->targets, fd->fns, (size_t)fd->nfns * sizeof *c->targets);
                c->ntargets = fd->nfns;
            }
        } else {
            resolve_direct(g, c);
        }
    }

    if (load_callbacks(g, db, &calls, &fns, &files, err, path)) goto out;

    if (prepare(db, "SELECT function_id, kind, name, file_id, line, col FROM range_sites ORDER BY function_id, line, col, id",
                &st, err, path))
        goto out;
    tb_vec_init(&rows, sizeof(tb_grange), "range sites");
    while (sqlite3_step(st) == SQLITE_ROW) {
        int fn = id_find(&fns, sqlite3_column_int64(st, 0));
        if (fn < 0) continue;
        tb_grange *r = tb_vec_push(&rows);
        const char *kind = (const char *)sqlite3_column_text(st, 1);
        r->fn = fn;
        r->is_pop = kind && (has_word(kind, "pop") || has_word(kind, "end"));
        r->name = r->is_pop ? NULL : dup_col(st, 2);
        r->file = sqlite3_column_type(st, 3) == SQLITE_NULL ? g->fns[fn].file
                                                            : id_find(&files, sqlite3_column_int64(st, 3));
        r->pos = (tb_pos){sqlite3_column_int(st, 4), sqlite3_column_int(st, 5)};
    }
    sqlite3_finalize(st);
    g->nranges = (int)rows.len;
    g->ranges = tb_vec_take(&rows);
    for (int f = 0, i = 0; f < g->nfns; f++) {
        g->fns[f].ranges_begin = i;
        while (i < g->nranges && g->ranges[i].fn == f) i++;
        g->fns[f].ranges_end = i;
    }

    if (prepare(db, "SELECT function_id, callee_name, file_id, line, col, call_id FROM collective_sites ORDER BY id",
                &st, err, path))
        goto out;
    tb_vec by_call_id;
    tb_vec_init(&by_call_id, sizeof(id_idx), "call ids");
    for (int i = 0; i < g->ncalls; i++)
        if (g->calls[i].id) id_add(&by_call_id, g->calls[i].id, i);
    qsort(by_call_id.items, by_call_id.len, sizeof(id_idx), cmp_id_idx);
    tb_vec_init(&rows, sizeof(tb_gcoll), "collective sites");
    while (sqlite3_step(st) == SQLITE_ROW) {
        int fn = id_find(&fns, sqlite3_column_int64(st, 0));
        if (fn < 0) continue;
        tb_gcoll *c = tb_vec_push(&rows);
        c->fn = fn;
        c->callee_name = dup_col(st, 1);
        if (!c->callee_name) c->callee_name = tb_xstrdup("?", "callee name");
        c->file = sqlite3_column_type(st, 2) == SQLITE_NULL ? g->fns[fn].file
                                                            : id_find(&files, sqlite3_column_int64(st, 2));
        c->pos = (tb_pos){sqlite3_column_int(st, 3), sqlite3_column_int(st, 4)};
        c->call = -1;
        if (sqlite3_column_type(st, 5) != SQLITE_NULL) {
            int call = id_find(&by_call_id, sqlite3_column_int64(st, 5));
            if (call >= 0 && g->calls[call].caller == fn) c->call = call;
        }
    }
    sqlite3_finalize(st);
    g->ncolls = (int)rows.len;
    g->colls = tb_vec_take(&rows);
    tb_vec_free(&by_call_id);

    if (prepare(db, "SELECT function_id, target, library FROM libraries ORDER BY function_id, target", &st, err,
                path))
        goto out;
    tb_vec_init(&rows, sizeof(tb_glib), "libraries");
    while (sqlite3_step(st) == SQLITE_ROW) {
        int fn = id_find(&fns, sqlite3_column_int64(st, 0));
        if (fn < 0) continue;
        tb_glib *l = tb_vec_push(&rows);
        l->fn = fn;
        l->target = dup_col(st, 1);
        l->library = dup_col(st, 2);
        if (!l->target) l->target = tb_xstrdup("?", "target");
        if (!l->library) l->library = tb_xstrdup("?", "library");
    }
    sqlite3_finalize(st);
    st = NULL;
    g->nlibs = (int)rows.len;
    g->libs = tb_vec_take(&rows);
    for (int f = 0, i = 0; f < g->nfns; f++) {  // function ids ascend with the index
        g->fns[f].libs_begin = i;
        while (i < g->nlibs && g->libs[i].fn == f) i++;
        g->fns[f].libs_end = i;
    }

    g->adj = tb_xcalloc((size_t)g->ntargets + 1, sizeof *g->adj, "scoped graphs");
    set_root(g, meta_root);
    rc = 0;
out:
    if (rc != 0 && st) sqlite3_finalize(st);
    free(meta_root);
    tb_vec_free(&files);
    tb_vec_free(&fns);
    tb_vec_free(&rows);  // the rows of a section that failed
    return rc;
}

int tb_graph_open(tb_graph **out, const char *path, tb_error *err) {
    *out = NULL;
    sqlite3 *db = NULL;
    if (tb_index_open(&db, path, err) != 0) return -1;
    tb_graph *g = tb_xcalloc(1, sizeof *g, "graph");
    g->index_path = tb_xstrdup(path, "index path");
    tb_sources_init(&g->sources);
    int rc = load(g, db, path, err);
    sqlite3_close(db);
    if (rc != 0) {
        tb_graph_free(g);
        return -1;
    }
    *out = g;
    return 0;
}

void tb_graph_free(tb_graph *g) {
    if (!g) return;
    for (int i = 0; i < g->nfiles; i++) {
        free(g->files[i].path);
        free(g->files[i].first_error);
    }
    for (int i = 0; i < g->nfns; i++) {
        free(g->fns[i].usr);
        free(g->fns[i].name);
    }
    for (int i = 0; i < g->ncalls; i++) {
        tb_gcall *c = &g->calls[i];
        free(c->callee_usr);
        free(c->callee_name);
        free(c->field);
        free(c->in_macro);
        free(c->resolution);
        free(c->candidates);
        free(c->targets);
        free(c->passed_to);
    }
    for (int i = 0; i < g->nranges; i++) free(g->ranges[i].name);
    for (int i = 0; i < g->ncolls; i++) free(g->colls[i].callee_name);
    for (int i = 0; i < g->nfields; i++) {
        free(g->fields[i].key);
        free(g->fields[i].fns);
    }
    for (int i = 0; i < g->nlibs; i++) {
        free(g->libs[i].target);
        free(g->libs[i].library);
    }
    free(g->libs);
    for (int i = 0; i < g->ntargets; i++) {
        free(g->targets[i].name);
        free(g->targets[i].type);
        free(g->targets[i].has_file);
    }
    if (g->adj)
        for (int i = 0; i <= g->ntargets; i++) {
            free(g->adj[i].begin);
            free(g->adj[i].edges);
        }
    tb_sources_free(&g->sources);
    free(g->adj);
    free(g->files);
    free(g->fns);
    free(g->calls);
    free(g->ranges);
    free(g->colls);
    free(g->fields);
    free(g->targets);
    tb_strmap_free(&g->fn_by_usr);
    tb_strmap_free(&g->name_first);
    tb_strmap_free(&g->field_by_key);
    free(g->by_name);
    free(g->root);
    free(g->index_path);
    free(g);
}

