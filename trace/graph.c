// graph.c — see graph.h.
#include "graph.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/xalloc.h"
#include "index_db.h"

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

typedef struct id_map {
    int64_t *ids;  // sorted
    int *idx;
    int n;
} id_map;

static int id_find(const id_map *m, int64_t id) {
    int lo = 0, hi = m->n - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2;
        if (m->ids[mid] == id) return m->idx[mid];
        if (m->ids[mid] < id) lo = mid + 1;
        else hi = mid - 1;
    }
    return -1;
}

// Rows come ORDER BY id, so appending keeps the map sorted.
static void id_add(id_map *m, int64_t id, int idx, int *cap) {
    if (m->n == *cap) {
        *cap = *cap ? 2 * *cap : 256;
        m->ids = tb_xrealloc(m->ids, (size_t)*cap * sizeof *m->ids, "ids");
        m->idx = tb_xrealloc(m->idx, (size_t)*cap * sizeof *m->idx, "idx");
    }
    m->ids[m->n] = id;
    m->idx[m->n++] = idx;
}

static void id_map_free(id_map *m) {
    free(m->ids);
    free(m->idx);
}

// --- loading ---------------------------------------------------------------------------

#define GROW(arr, n, cap)                                                  \
    do {                                                                   \
        if ((n) == (cap)) {                                                \
            (cap) = (cap) ? 2 * (cap) : 256;                               \
            (arr) = tb_xrealloc((arr), (size_t)(cap) * sizeof *(arr), "array");         \
        }                                                                  \
    } while (0)

static int prepare(sqlite3 *db, const char *sql, sqlite3_stmt **st, tb_error *err, const char *path) {
    if (sqlite3_prepare_v2(db, sql, -1, st, NULL) != SQLITE_OK)
        return tb_fail(err, "%s: reading the index: %s", path, sqlite3_errmsg(db));
    return 0;
}

static const tb_graph *sort_graph;  // qsort context (single-threaded tool)

static int cmp_usr(const void *a, const void *b) {
    return strcmp(sort_graph->fns[*(const int *)a].usr, sort_graph->fns[*(const int *)b].usr);
}

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
    int lo = 0, hi = g->nfields - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2;
        int c = strcmp(g->fields[mid].key, key);
        if (!c) return mid;
        if (c < 0) lo = mid + 1;
        else hi = mid - 1;
    }
    return -1;
}

int tb_graph_fn_by_usr(const tb_graph *g, const char *usr) {
    int lo = 0, hi = g->nfns - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2;
        int c = strcmp(g->fns[g->by_usr[mid]].usr, usr);
        if (!c) return g->by_usr[mid];
        if (c < 0) lo = mid + 1;
        else hi = mid - 1;
    }
    return -1;
}

// First index in by_name with that name, or -1.
static int name_first(const tb_graph *g, const char *name) {
    int lo = 0, hi = g->nfns;
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if (strcmp(g->fns[g->by_name[mid]].name, name) < 0) lo = mid + 1;
        else hi = mid;
    }
    return lo < g->nfns && !strcmp(g->fns[g->by_name[lo]].name, name) ? lo : -1;
}

// Candidate callees of a direct call over the whole index. An external function may be
// defined in several binaries (each definition its own row); a static one is its USR alone.
static void resolve_direct(tb_graph *g, tb_gcall *c) {
    int f = c->callee_usr ? tb_graph_fn_by_usr(g, c->callee_usr) : -1;
    int cap = 4, n = 0;
    int *out = tb_xmalloc((size_t)cap * sizeof *out, "result array");
    if (f >= 0 && g->fns[f].is_static) {
        out[n++] = f;
    } else {
        const char *name = f >= 0 ? g->fns[f].name : c->callee_name;
        int i = name ? name_first(g, name) : -1;
        for (; i >= 0 && i < g->nfns && !strcmp(g->fns[g->by_name[i]].name, name); i++) {
            const tb_gfn *h = &g->fns[g->by_name[i]];
            if (h->is_static || !h->is_definition) continue;
            GROW(out, n, cap);
            out[n++] = g->by_name[i];
        }
        if (n == 0 && f >= 0) out[n++] = f;  // a declaration only (library function)
    }
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
static int load_callbacks(tb_graph *g, sqlite3 *db, const id_map *fns, const id_map *files, tb_error *err,
                          const char *path) {
    sqlite3_stmt *st = NULL;
    if (prepare(db, "SELECT function_id, target_usr, passed_to, file_id, line, col FROM callbacks ORDER BY id", &st,
                err, path))
        return -1;
    int cap = g->ncalls, nbefore = g->ncalls;
    while (sqlite3_step(st) == SQLITE_ROW) {
        int caller = id_find(fns, sqlite3_column_int64(st, 0));
        const char *usr = (const char *)sqlite3_column_text(st, 1);
        int f = usr ? tb_graph_fn_by_usr(g, usr) : -1;
        if (caller < 0 || f < 0) continue;  // a function the index has no row for (a system header's)
        GROW(g->calls, g->ncalls, cap);
        tb_gcall *c = &g->calls[g->ncalls++];
        memset(c, 0, sizeof *c);
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
    if (g->ncalls > nbefore) {
        int *order = tb_xmalloc((size_t)g->ncalls * sizeof *order, "sort order");
        for (int i = 0; i < g->ncalls; i++) order[i] = i;
        sort_graph = g;
        qsort(order, (size_t)g->ncalls, sizeof *order, cmp_call);
        tb_gcall *sorted = tb_xmalloc((size_t)g->ncalls * sizeof *sorted, "sorted calls");
        for (int i = 0; i < g->ncalls; i++) sorted[i] = g->calls[order[i]];
        free(g->calls);
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

typedef struct id_idx {
    int64_t id;
    int idx;
} id_idx;

static int cmp_id_idx(const void *a, const void *b) {
    int64_t x = ((const id_idx *)a)->id, y = ((const id_idx *)b)->id;
    return x < y ? -1 : x > y;
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
    id_map files = {0}, fns = {0};
    int cap_files = 0, cap_fns = 0, cap = 0, rc = -1;
    char *meta_root = NULL;

    if (prepare(db, "SELECT key, value FROM meta", &st, err, path)) goto out;
    while (sqlite3_step(st) == SQLITE_ROW) {
        const char *k = (const char *)sqlite3_column_text(st, 0);
        if (k && (!strcmp(k, "root") || !strcmp(k, "source_dir") || !strcmp(k, "project_root")) && !meta_root)
            meta_root = dup_col(st, 1);
    }
    sqlite3_finalize(st);

    if (prepare(db, "SELECT id, path, is_tu FROM files ORDER BY id", &st, err, path)) goto out;
    cap = 0;
    while (sqlite3_step(st) == SQLITE_ROW) {
        GROW(g->files, g->nfiles, cap);
        tb_gfile *f = &g->files[g->nfiles];
        memset(f, 0, sizeof *f);
        f->path = dup_col(st, 1);
        if (!f->path) f->path = tb_xstrdup("?", "path");
        f->is_tu = sqlite3_column_int(st, 2);
        id_add(&files, sqlite3_column_int64(st, 0), g->nfiles++, &cap_files);
    }
    sqlite3_finalize(st);

    if (prepare(db, "SELECT target, type, file_id FROM targets ORDER BY target", &st, err, path)) goto out;
    cap = 0;
    while (sqlite3_step(st) == SQLITE_ROW) {
        const char *name = (const char *)sqlite3_column_text(st, 0);
        int file = id_find(&files, sqlite3_column_int64(st, 2));
        if (!name || file < 0) continue;
        tb_gtarget *t = g->ntargets ? &g->targets[g->ntargets - 1] : NULL;
        if (!t || strcmp(t->name, name)) {
            GROW(g->targets, g->ntargets, cap);
            t = &g->targets[g->ntargets++];
            t->name = tb_xstrdup(name, "name");
            t->type = dup_col(st, 1);
            t->has_file = tb_xcalloc((size_t)g->nfiles + 1, 1, "has file");
        }
        if (!t->has_file[file]) {
            t->has_file[file] = 1;
            g->files[file].ntargets++;
        }
    }
    sqlite3_finalize(st);
    st = NULL;
    if (prepare(db,
                "SELECT id, usr, name, file_id, line, col, is_static, is_definition, end_line, end_col FROM functions"
                " ORDER BY id",
                &st, err, path))
        goto out;
    cap = 0;
    while (sqlite3_step(st) == SQLITE_ROW) {
        GROW(g->fns, g->nfns, cap);
        tb_gfn *f = &g->fns[g->nfns];
        memset(f, 0, sizeof *f);
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
        id_add(&fns, f->id, g->nfns++, &cap_fns);
    }
    sqlite3_finalize(st);
    g->by_usr = tb_xmalloc((size_t)(g->nfns + 1) * sizeof *g->by_usr, "functions by USR");
    g->by_name = tb_xmalloc((size_t)(g->nfns + 1) * sizeof *g->by_name, "functions by name");
    for (int i = 0; i < g->nfns; i++) g->by_usr[i] = g->by_name[i] = i;
    sort_graph = g;
    qsort(g->by_usr, (size_t)g->nfns, sizeof *g->by_usr, cmp_usr);
    qsort(g->by_name, (size_t)g->nfns, sizeof *g->by_name, cmp_name);

    if (prepare(db, "SELECT record, field, function_usr FROM field_targets", &st, err, path)) goto out;
    {
        typedef struct kf {
            char *key;
            int fn;
        } kf;
        kf *pairs = NULL;
        int np = 0, pcap = 0;
        while (sqlite3_step(st) == SQLITE_ROW) {
            const char *rec = (const char *)sqlite3_column_text(st, 0);
            const char *fld = (const char *)sqlite3_column_text(st, 1);
            const char *usr = (const char *)sqlite3_column_text(st, 2);
            int f = usr ? tb_graph_fn_by_usr(g, usr) : -1;
            if (!rec || !fld || f < 0) continue;
            GROW(pairs, np, pcap);
            pairs[np++] = (kf){field_key(rec, fld), f};
        }
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
        cap = 0;
        for (int i = 0; i < np; i++) {
            tb_gfield *fd = g->nfields ? &g->fields[g->nfields - 1] : NULL;
            if (!fd || strcmp(fd->key, pairs[i].key)) {
                GROW(g->fields, g->nfields, cap);
                fd = &g->fields[g->nfields++];
                fd->key = pairs[i].key;
                fd->fns = NULL;
                fd->nfns = 0;
            } else {
                free(pairs[i].key);
                if (fd->fns[fd->nfns - 1] == pairs[i].fn) continue;
            }
            fd->fns = tb_xrealloc(fd->fns, (size_t)(fd->nfns + 1) * sizeof *fd->fns, "chain functions");
            fd->fns[fd->nfns++] = pairs[i].fn;
        }
        free(pairs);
    }

    if (prepare(db,
                "SELECT caller_id, callee_usr, callee_name, field, file_id, line, col, in_macro, id FROM calls"
                " ORDER BY caller_id, line, col, id",
                &st, err, path))
        goto out;
    cap = 0;
    while (sqlite3_step(st) == SQLITE_ROW) {
        int caller = id_find(&fns, sqlite3_column_int64(st, 0));
        if (caller < 0) continue;
        GROW(g->calls, g->ncalls, cap);
        tb_gcall *c = &g->calls[g->ncalls++];
        memset(c, 0, sizeof *c);
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
    }
    sqlite3_finalize(st);
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

    if (load_callbacks(g, db, &fns, &files, err, path)) goto out;

    if (prepare(db, "SELECT function_id, kind, name, file_id, line, col FROM range_sites ORDER BY function_id, line, col, id",
                &st, err, path))
        goto out;
    cap = 0;
    while (sqlite3_step(st) == SQLITE_ROW) {
        int fn = id_find(&fns, sqlite3_column_int64(st, 0));
        if (fn < 0) continue;
        GROW(g->ranges, g->nranges, cap);
        tb_grange *r = &g->ranges[g->nranges++];
        const char *kind = (const char *)sqlite3_column_text(st, 1);
        r->fn = fn;
        r->is_pop = kind && (has_word(kind, "pop") || has_word(kind, "end"));
        r->name = r->is_pop ? NULL : dup_col(st, 2);
        r->file = sqlite3_column_type(st, 3) == SQLITE_NULL ? g->fns[fn].file
                                                            : id_find(&files, sqlite3_column_int64(st, 3));
        r->pos = (tb_pos){sqlite3_column_int(st, 4), sqlite3_column_int(st, 5)};
    }
    sqlite3_finalize(st);
    for (int f = 0, i = 0; f < g->nfns; f++) {
        g->fns[f].ranges_begin = i;
        while (i < g->nranges && g->ranges[i].fn == f) i++;
        g->fns[f].ranges_end = i;
    }

    if (prepare(db, "SELECT function_id, callee_name, file_id, line, col, call_id FROM collective_sites ORDER BY id",
                &st, err, path))
        goto out;
    cap = 0;
    id_idx *by_call_id = tb_xmalloc((size_t)(g->ncalls + 1) * sizeof *by_call_id, "by call id");
    int ncid = 0;
    for (int i = 0; i < g->ncalls; i++)
        if (g->calls[i].id) by_call_id[ncid++] = (id_idx){g->calls[i].id, i};
    qsort(by_call_id, (size_t)ncid, sizeof *by_call_id, cmp_id_idx);
    while (sqlite3_step(st) == SQLITE_ROW) {
        int fn = id_find(&fns, sqlite3_column_int64(st, 0));
        if (fn < 0) continue;
        GROW(g->colls, g->ncolls, cap);
        tb_gcoll *c = &g->colls[g->ncolls++];
        c->fn = fn;
        c->callee_name = dup_col(st, 1);
        if (!c->callee_name) c->callee_name = tb_xstrdup("?", "callee name");
        c->file = sqlite3_column_type(st, 2) == SQLITE_NULL ? g->fns[fn].file
                                                            : id_find(&files, sqlite3_column_int64(st, 2));
        c->pos = (tb_pos){sqlite3_column_int(st, 3), sqlite3_column_int(st, 4)};
        c->call = -1;
        if (sqlite3_column_type(st, 5) != SQLITE_NULL) {
            id_idx key = {sqlite3_column_int64(st, 5), 0};
            const id_idx *hit = bsearch(&key, by_call_id, (size_t)ncid, sizeof *by_call_id, cmp_id_idx);
            if (hit && g->calls[hit->idx].caller == fn) c->call = hit->idx;
        }
    }
    sqlite3_finalize(st);
    free(by_call_id);

    g->adj = tb_xcalloc((size_t)g->ntargets + 1, sizeof *g->adj, "scoped graphs");
    set_root(g, meta_root);
    rc = 0;
out:
    if (rc != 0 && st) sqlite3_finalize(st);
    free(meta_root);
    id_map_free(&files);
    id_map_free(&fns);
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
    for (int i = 0; i < g->nfiles; i++) free(g->files[i].path);
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
        free(c->targets);
        free(c->passed_to);
    }
    for (int i = 0; i < g->nranges; i++) free(g->ranges[i].name);
    for (int i = 0; i < g->ncolls; i++) free(g->colls[i].callee_name);
    for (int i = 0; i < g->nfields; i++) {
        free(g->fields[i].key);
        free(g->fields[i].fns);
    }
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
    free(g->by_usr);
    free(g->by_name);
    free(g->root);
    free(g->index_path);
    free(g);
}

// --- lookups ---------------------------------------------------------------------------

const char *tb_graph_file(const tb_graph *g, int file) {
    return file >= 0 && file < g->nfiles ? g->files[file].shown : "?";
}

const tb_source *tb_graph_source(tb_graph *g, int file) {
    if (file < 0 || file >= g->nfiles) return NULL;
    return tb_sources_get(&g->sources, g->files[file].path);
}

static int ends_with_path(const char *path, const char *suffix) {
    size_t n = strlen(path), k = strlen(suffix);
    if (k == 0 || k > n || strcmp(path + n - k, suffix)) return 0;
    return k == n || path[n - k - 1] == '/' || suffix[0] == '/';
}

int tb_graph_lookup(const tb_graph *g, const char *symbol, int **out) {
    const char *colon = strrchr(symbol, ':');
    const char *name = colon ? colon + 1 : symbol;
    char *file = colon ? tb_xstrndup(symbol, (size_t)(colon - symbol), "file name") : NULL;
    int n = 0;
    *out = tb_xmalloc((size_t)(g->nfns + 1) * sizeof **out, "result array");
    for (int i = name_first(g, name); i >= 0 && i < g->nfns && !strcmp(g->fns[g->by_name[i]].name, name); i++) {
        int f = g->by_name[i];
        if (file && (g->fns[f].file < 0 || !ends_with_path(g->files[g->fns[f].file].path, file))) continue;
        (*out)[n++] = f;
    }
    free(file);
    return n;
}

int tb_graph_target_by_name(const tb_graph *g, const char *name) {
    for (int i = 0; i < g->ntargets; i++)
        if (!strcmp(g->targets[i].name, name)) return i;
    return -1;
}

int tb_graph_in_scope(const tb_graph *g, int t, int fn) {
    if (t < 0) return 1;
    int file = g->fns[fn].file;
    if (file < 0 || !g->files[file].is_tu || g->files[file].ntargets == 0) return 1;
    return g->targets[t].has_file[file];
}

static int is_executable(const tb_gtarget *t) {
    return !t->type || !*t->type || has_word(t->type, "exec");
}

int tb_graph_target_of_fn(const tb_graph *g, int fn) {
    int file = g->fns[fn].file, found = -1;
    if (file < 0) return -1;
    for (int i = 0; i < g->ntargets; i++) {
        if (!is_executable(&g->targets[i]) || !g->targets[i].has_file[file]) continue;
        if (found >= 0) return -1;
        found = i;
    }
    return found;
}

int tb_graph_call_targets(const tb_graph *g, int call, int t, int *out, int cap) {
    const tb_gcall *c = &g->calls[call];
    int n = 0;
    for (int i = 0; i < c->ntargets && n < cap; i++)
        if (tb_graph_in_scope(g, t, c->targets[i])) out[n++] = c->targets[i];
    if (!c->field && n > 1 && t >= 0) {  // several definitions: the target's own first
        int k = 0;
        for (int i = 0; i < n; i++) {
            int file = g->fns[out[i]].file;
            if (file >= 0 && g->targets[t].has_file[file]) out[k++] = out[i];
        }
        if (k > 0) n = k;
    }
    return n;
}

const tb_adj *tb_graph_adj(tb_graph *g, int t) {
    tb_adj *a = &g->adj[t + 1];
    if (a->built) return a;
    a->begin = tb_xmalloc((size_t)(g->nfns + 1) * sizeof *a->begin, "edge offsets");
    int cap = g->ncalls + 16, n = 0;
    a->edges = tb_xmalloc((size_t)cap * sizeof *a->edges, "call edges");
    int *tmp = tb_xmalloc((size_t)(g->nfns + 1) * sizeof *tmp, "call targets");
    for (int f = 0; f < g->nfns; f++) {
        a->begin[f] = n;
        if (!tb_graph_in_scope(g, t, f)) continue;
        for (int c = g->fns[f].calls_begin; c < g->fns[f].calls_end; c++) {
            int k = tb_graph_call_targets(g, c, t, tmp, g->nfns);
            for (int j = 0; j < k; j++) {
                int dup = 0;
                for (int e = a->begin[f]; e < n && !dup; e++) dup = a->edges[e].to == tmp[j];
                if (dup) continue;
                if (n == cap) {
                    cap *= 2;
                    a->edges = tb_xrealloc(a->edges, (size_t)cap * sizeof *a->edges, "call edges");
                }
                a->edges[n++] = (tb_edge){tmp[j], c};
            }
        }
    }
    a->begin[g->nfns] = n;
    free(tmp);
    a->built = 1;
    return a;
}

// --- entry points ----------------------------------------------------------------------

static void entry_label(const tb_graph *g, tb_entry *e) {
    if (e->target >= 0) snprintf(e->label, sizeof e->label, "%s", g->targets[e->target].name);
    else snprintf(e->label, sizeof e->label, "%s", tb_graph_file(g, g->fns[e->fn].file));
}

static int add_entry(tb_entry **out, int n, int fn, int target) {
    *out = tb_xrealloc(*out, (size_t)(n + 1) * sizeof **out, "result array");
    (*out)[n].fn = fn;
    (*out)[n].target = target;
    return n + 1;
}

int tb_graph_entries(const tb_graph *g, const char *entry, tb_entry **out, tb_error *err) {
    *out = NULL;
    int n = 0, *fns = NULL, k;
    int t = strchr(entry, ':') ? -1 : tb_graph_target_by_name(g, entry);
    if (t >= 0) {  // a build target: its main
        k = tb_graph_lookup(g, "main", &fns);
        for (int i = 0; i < k; i++) {
            int file = g->fns[fns[i]].file;
            if (g->fns[fns[i]].is_definition && file >= 0 && g->targets[t].has_file[file])
                n = add_entry(out, n, fns[i], t);
        }
        free(fns);
        if (n == 0) {
            free(*out);
            *out = NULL;
            return tb_fail(err, "entry '%s': target found but no main defined in its sources", entry), 0;
        }
    } else {
        k = tb_graph_lookup(g, entry, &fns);
        for (int i = 0; i < k; i++)
            if (g->fns[fns[i]].is_definition) n = add_entry(out, n, fns[i], tb_graph_target_of_fn(g, fns[i]));
        free(fns);
        if (n == 0 && !strchr(entry, ':') && !strchr(entry, '/')) {
            // no target table: a main in ENTRY.c (pretrain_gpt → engine/pretrain_gpt.c:main)
            char file[512];
            snprintf(file, sizeof file, "%s.c:main", entry);
            k = tb_graph_lookup(g, file, &fns);
            for (int i = 0; i < k; i++)
                if (g->fns[fns[i]].is_definition) n = add_entry(out, n, fns[i], tb_graph_target_of_fn(g, fns[i]));
            free(fns);
        }
        if (n == 0) {
            free(*out);
            *out = NULL;
            return tb_fail(err, "entry '%s': no target, function or FILE:FUNCTION of that name is defined in %s",
                           entry, g->index_path),
                   0;
        }
    }
    for (int i = 0; i < n; i++) entry_label(g, &(*out)[i]);
    return n;
}

// --- searches --------------------------------------------------------------------------

void tb_graph_bfs(tb_graph *g, int t, const int *from, int nfrom, int *dist, int *pred_fn, int *pred_call) {
    const tb_adj *a = tb_graph_adj(g, t);
    int *queue = tb_xmalloc((size_t)(g->nfns + 1) * sizeof *queue, "search queue");
    int head = 0, tail = 0;
    for (int i = 0; i < g->nfns; i++) {
        dist[i] = -1;
        if (pred_fn) pred_fn[i] = -1;
        if (pred_call) pred_call[i] = -1;
    }
    for (int i = 0; i < nfrom; i++)
        if (from[i] >= 0 && dist[from[i]] < 0 && tb_graph_in_scope(g, t, from[i])) {
            dist[from[i]] = 0;
            queue[tail++] = from[i];
        }
    while (head < tail) {
        int f = queue[head++];
        for (int e = a->begin[f]; e < a->begin[f + 1]; e++) {
            int v = a->edges[e].to;
            if (dist[v] >= 0) continue;
            dist[v] = dist[f] + 1;
            if (pred_fn) pred_fn[v] = f;
            if (pred_call) pred_call[v] = a->edges[e].call;
            queue[tail++] = v;
        }
    }
    free(queue);
}

typedef struct pnode {
    int fn, parent, call, g;
} pnode;

int tb_graph_chains(tb_graph *g, int t, int entry, const int *to, int nto, int max, int max_depth,
                    tb_chain **out, int *truncated) {
    *out = NULL;
    *truncated = 0;
    const tb_adj *a = tb_graph_adj(g, t);
    // h: calls from each function to the nearest `to` (reverse BFS)
    int nf = g->nfns;
    int *h = tb_xmalloc((size_t)(nf + 1) * sizeof *h, "distances to the targets");
    int *rbegin = tb_xcalloc((size_t)nf + 2, sizeof *rbegin, "reverse edge offsets");
    int nedges = a->begin[nf];
    int *redges = tb_xmalloc((size_t)(nedges + 1) * sizeof *redges, "reverse edges");
    for (int f = 0; f < nf; f++)
        for (int e = a->begin[f]; e < a->begin[f + 1]; e++) rbegin[a->edges[e].to + 1]++;
    for (int f = 0; f < nf; f++) rbegin[f + 1] += rbegin[f];
    int *fill = tb_xmalloc((size_t)(nf + 1) * sizeof *fill, "reverse edge fill");
    memcpy(fill, rbegin, (size_t)nf * sizeof *fill);
    for (int f = 0; f < nf; f++)
        for (int e = a->begin[f]; e < a->begin[f + 1]; e++) redges[fill[a->edges[e].to]++] = f;
    int *queue = tb_xmalloc((size_t)(nf + 1) * sizeof *queue, "search queue"), head = 0, tail = 0;
    char *is_to = tb_xcalloc((size_t)nf + 1, 1, "target flags");
    for (int f = 0; f < nf; f++) h[f] = -1;
    for (int i = 0; i < nto; i++)
        if (h[to[i]] < 0 && tb_graph_in_scope(g, t, to[i])) {
            h[to[i]] = 0;
            is_to[to[i]] = 1;
            queue[tail++] = to[i];
        }
    while (head < tail) {
        int f = queue[head++];
        for (int e = rbegin[f]; e < rbegin[f + 1]; e++)
            if (h[redges[e]] < 0) {
                h[redges[e]] = h[f] + 1;
                queue[tail++] = redges[e];
            }
    }
    free(queue);
    free(fill);
    free(rbegin);
    free(redges);

    int nout = 0;
    if (h[entry] < 0 || h[entry] > max_depth || !tb_graph_in_scope(g, t, entry)) goto done;
    // best-first over partial paths with the exact remaining distance: complete chains
    // come out shortest first; one bucket per total length
    {
        int nb = max_depth + 1;
        int **bucket = tb_xcalloc((size_t)nb, sizeof *bucket, "path buckets");
        int *bn = tb_xcalloc((size_t)nb, sizeof *bn, "path buckets"), *bcap = tb_xcalloc((size_t)nb, sizeof *bcap, "path buckets"), *bh = tb_xcalloc((size_t)nb, sizeof *bh, "path buckets");
        size_t pcap = 1024, pn = 0, budget = 2000000;
        pnode *paths = tb_xmalloc(pcap * sizeof *paths, "partial paths");
        paths[pn++] = (pnode){entry, -1, -1, 0};
#define PUSH_PATH(b, idx)                                                             \
    do {                                                                             \
        if (bn[b] == bcap[b]) {                                                      \
            bcap[b] = bcap[b] ? 2 * bcap[b] : 64;                                    \
            bucket[b] = tb_xrealloc(bucket[b], (size_t)bcap[b] * sizeof *bucket[b], "path buckets");     \
        }                                                                            \
        bucket[b][bn[b]++] = (idx);                                                  \
    } while (0)
        PUSH_PATH(h[entry], 0);
        for (int b = 0; b < nb && nout < max; b++) {
            while (bh[b] < bn[b] && nout < max) {
                int p = bucket[b][bh[b]++];
                pnode cur = paths[p];
                if (is_to[cur.fn]) {
                    *out = tb_xrealloc(*out, (size_t)(nout + 1) * sizeof **out, "result array");
                    tb_chain *c = &(*out)[nout++];
                    c->n = cur.g + 1;
                    c->fns = tb_xmalloc((size_t)c->n * sizeof *c->fns, "chain functions");
                    c->calls = tb_xmalloc((size_t)c->n * sizeof *c->calls, "chain calls");
                    int i = c->n - 1;
                    for (int q = p; q >= 0; q = paths[q].parent, i--) {
                        c->fns[i] = paths[q].fn;
                        if (paths[q].parent >= 0) c->calls[i - 1] = paths[q].call;
                    }
                    continue;
                }
                for (int e = a->begin[cur.fn]; e < a->begin[cur.fn + 1]; e++) {
                    int v = a->edges[e].to;
                    if (h[v] < 0 || cur.g + 1 + h[v] > max_depth) continue;
                    int on_path = 0;
                    for (int q = p; q >= 0 && !on_path; q = paths[q].parent) on_path = paths[q].fn == v;
                    if (on_path) continue;
                    if (pn == budget) {
                        *truncated = 1;
                        continue;
                    }
                    if (pn == pcap) {
                        pcap *= 2;
                        paths = tb_xrealloc(paths, pcap * sizeof *paths, "partial paths");
                    }
                    paths[pn] = (pnode){v, p, a->edges[e].call, cur.g + 1};
                    int fb = cur.g + 1 + h[v];
                    PUSH_PATH(fb, (int)pn);
                    pn++;
                }
            }
        }
#undef PUSH_PATH
        for (int b = 0; b < nb; b++) free(bucket[b]);
        free(bucket);
        free(bn);
        free(bcap);
        free(bh);
        free(paths);
    }
done:
    free(h);
    free(is_to);
    return nout;
}

void tb_chains_free(tb_chain *c, int n) {
    for (int i = 0; i < n; i++) {
        free(c[i].fns);
        free(c[i].calls);
    }
    free(c);
}

void tb_graph_fn_loc(const tb_graph *g, int fn, char *buf, size_t len) {
    snprintf(buf, len, "%s:%d", tb_graph_file(g, g->fns[fn].file), g->fns[fn].pos.line);
}

void tb_graph_hop(const tb_graph *g, int fn, int call, char *buf, size_t len) {
    if (call < 0) {
        char loc[600];
        tb_graph_fn_loc(g, fn, loc, sizeof loc);
        snprintf(buf, len, "%s (%s)", g->fns[fn].name, loc);
        return;
    }
    const tb_gcall *c = &g->calls[call];
    if (c->passed_to)
        snprintf(buf, len, "%s (%s:%d, passes %s to %s)", g->fns[fn].name, tb_graph_file(g, c->file), c->pos.line,
                 c->callee_name, c->passed_to);
    else if (c->callback)
        snprintf(buf, len, "%s (%s:%d, takes %s as a callback)", g->fns[fn].name, tb_graph_file(g, c->file),
                 c->pos.line, c->callee_name);
    else if (c->field)
        snprintf(buf, len, "%s (%s:%d, via %s)", g->fns[fn].name, tb_graph_file(g, c->file), c->pos.line, c->field);
    else
        snprintf(buf, len, "%s (%s:%d)", g->fns[fn].name, tb_graph_file(g, c->file), c->pos.line);
}
