// map.c — `tracebook map TRACE...`: every runtime range → its source site → the chain from
// the entry point → the collectives below it, with runtime figures; runtime nesting
// checked against the static call graph; coverage. See map.h.
#include "map.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/fileio.h"
#include "core/xalloc.h"
#include "index_db.h"
#include "trace_cli.h"

// =======================================================================================
// Runtime traces
// =======================================================================================

static uint64_t hash_str(const char *s) {
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

static int intern(tb_rt *rt, const char *s) {
    if (2 * (rt->nnames + 1) > rt->hash_cap) {
        int cap = rt->hash_cap ? 2 * rt->hash_cap : 256;
        int *h = tb_xmalloc((size_t)cap * sizeof *h, "distances to the targets");
        for (int i = 0; i < cap; i++) h[i] = -1;
        for (int i = 0; i < rt->nnames; i++) {
            size_t k = hash_str(rt->names[i]) & (size_t)(cap - 1);
            while (h[k] >= 0) k = (k + 1) & (size_t)(cap - 1);
            h[k] = i;
        }
        free(rt->name_hash);
        rt->name_hash = h;
        rt->hash_cap = cap;
    }
    size_t k = hash_str(s) & (size_t)(rt->hash_cap - 1);
    while (rt->name_hash[k] >= 0) {
        if (!strcmp(rt->names[rt->name_hash[k]], s)) return rt->name_hash[k];
        k = (k + 1) & (size_t)(rt->hash_cap - 1);
    }
    if (rt->nnames == rt->cap_names) {
        rt->cap_names = rt->cap_names ? 2 * rt->cap_names : 64;
        rt->names = tb_xrealloc(rt->names, (size_t)rt->cap_names * sizeof *rt->names, "names");
    }
    rt->names[rt->nnames] = tb_xstrdup(s, "string");
    rt->name_hash[k] = rt->nnames;
    return rt->nnames++;
}

static void add_event(tb_rt *rt, const char *name, int rank, int64_t tid, int64_t start, int64_t dur, json_t *args) {
    if (rt->nev == rt->cap) {
        rt->cap = rt->cap ? 2 * rt->cap : 1024;
        rt->ev = tb_xrealloc(rt->ev, (size_t)rt->cap * sizeof *rt->ev, "ev");
    }
    rt->ev[rt->nev++] = (tb_rt_event){intern(rt, name), rank, tid, start, dur < 0 ? 0 : dur, args, -1};
}

static void note_file(tb_rt *rt, const char *path, const char *format, int events) {
    json_array_append_new(rt->files, json_pack("{s:s, s:s, s:i}", "file", path, "format", format, "events", events));
}

static int64_t us_to_ns(json_t *v) { return (int64_t)llround(json_number_value(v) * 1000.0); }

// Chrome trace JSON: {"traceEvents": [...]} or a bare array; complete ("X") events.
static int load_chrome(tb_rt *rt, const char *path, tb_error *err) {
    json_error_t je;
    json_t *root = json_load_file(path, 0, &je);
    if (!root) return tb_fail(err, "%s:%d:%d: not a Chrome trace: %s", path, je.line, je.column, je.text);
    json_t *events = json_is_array(root) ? root : json_object_get(root, "traceEvents");
    if (!json_is_array(events)) {
        json_decref(root);
        return tb_fail(err, "%s: not a Chrome trace: no traceEvents array", path);
    }
    rt->roots = tb_xrealloc(rt->roots, (size_t)(rt->nroots + 1) * sizeof *rt->roots, "roots");
    rt->roots[rt->nroots++] = root;
    const char *backend = json_string_value(json_object_get(json_object_get(root, "distributedInfo"), "backend"));
    if (backend && !rt->backend_conflict) {
        if (!rt->backend) rt->backend = tb_xstrdup(backend, "trace backend");
        else if (strcmp(rt->backend, backend)) rt->backend_conflict = 1;
    }
    int n = 0;
    size_t i;
    json_t *e;
    json_array_foreach(events, i, e) {
        const char *ph = json_string_value(json_object_get(e, "ph"));
        const char *name = json_string_value(json_object_get(e, "name"));
        json_t *ts = json_object_get(e, "ts"), *dur = json_object_get(e, "dur");
        if (!ph || strcmp(ph, "X") || !name || !json_is_number(ts)) continue;
        json_t *pid = json_object_get(e, "pid"), *tid = json_object_get(e, "tid");
        int rank = json_is_integer(pid) ? (int)json_integer_value(pid) : 0;
        int64_t t = json_is_integer(tid) ? (int64_t)json_integer_value(tid)
                    : json_is_string(tid) ? (int64_t)(hash_str(json_string_value(tid)) >> 1)
                                          : 0;
        json_t *args = json_object_get(e, "args");
        add_event(rt, name, rank, t, us_to_ns(ts), json_is_number(dur) ? us_to_ns(dur) : 0,
                  json_is_object(args) ? args : NULL);
        n++;
    }
    note_file(rt, path, "chrome", n);
    return 0;
}

static int has_column(sqlite3 *db, const char *table, const char *column) {
    char sql[128];
    snprintf(sql, sizeof sql, "PRAGMA table_info(%s)", table);
    sqlite3_stmt *st;
    int found = 0;
    if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK) return 0;
    while (!found && sqlite3_step(st) == SQLITE_ROW)
        found = !strcmp((const char *)sqlite3_column_text(st, 1), column);
    sqlite3_finalize(st);
    return found;
}

static int cmp_i64(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

// Nsight Systems SQLite export: NVTX push/pop ranges (eventType 59), text inline or in
// StringIds through textId; one rank per thread (globalTid), numbered in globalTid order.
static int load_nsys(tb_rt *rt, const char *path, int first_rank, tb_error *err) {
    sqlite3 *db = NULL;
    if (sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL) != SQLITE_OK) {
        tb_fail(err, "%s: cannot open: %s", path, db ? sqlite3_errmsg(db) : "out of memory");
        sqlite3_close(db);
        return -1;
    }
    if (!has_column(db, "NVTX_EVENTS", "start") || !has_column(db, "NVTX_EVENTS", "eventType")) {
        sqlite3_close(db);
        return tb_fail(err, "%s: an SQLite file without an NVTX_EVENTS table (not `nsys export --type sqlite`?)",
                       path);
    }
    int text = has_column(db, "NVTX_EVENTS", "text");
    int text_id = has_column(db, "NVTX_EVENTS", "textId") && has_column(db, "StringIds", "value");
    // the default domain's ranges (nvtxRangePushA) only: libraries' own domains (NCCL's)
    // are not the program's ranges; unless that leaves nothing
    int domain = 0;
    if (has_column(db, "NVTX_EVENTS", "domainId")) {
        sqlite3_stmt *q;
        if (sqlite3_prepare_v2(db,
                               "SELECT COUNT(*) FROM NVTX_EVENTS WHERE eventType = 59 AND"
                               " (domainId IS NULL OR domainId = 0)",
                               -1, &q, NULL) == SQLITE_OK &&
            sqlite3_step(q) == SQLITE_ROW)
            domain = sqlite3_column_int64(q, 0) > 0;
        sqlite3_finalize(q);
    }
    char sql[512];
    snprintf(sql, sizeof sql,
             "SELECT e.start, e.\"end\", %s, e.globalTid FROM NVTX_EVENTS e %s"
             " WHERE e.eventType = 59 AND e.\"end\" IS NOT NULL%s ORDER BY e.start",
             text && text_id ? "COALESCE(e.text, s.value)" : text ? "e.text" : text_id ? "s.value" : "NULL",
             text_id ? "LEFT JOIN StringIds s ON s.id = e.textId" : "",
             domain ? " AND (e.domainId IS NULL OR e.domainId = 0)" : "");
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK) {
        tb_fail(err, "%s: reading NVTX_EVENTS: %s", path, sqlite3_errmsg(db));
        sqlite3_close(db);
        return -1;
    }
    int first = rt->nev, n = 0;
    while (sqlite3_step(st) == SQLITE_ROW) {
        const char *name = (const char *)sqlite3_column_text(st, 2);
        if (!name) continue;
        int64_t s = sqlite3_column_int64(st, 0), e = sqlite3_column_int64(st, 1);
        add_event(rt, name, 0, sqlite3_column_int64(st, 3), s, e - s, NULL);
        n++;
    }
    sqlite3_finalize(st);
    sqlite3_close(db);
    // threads → ranks
    int64_t *tids = tb_xmalloc((size_t)(n + 1) * sizeof *tids, "thread ids");
    for (int i = 0; i < n; i++) tids[i] = rt->ev[first + i].tid;
    qsort(tids, (size_t)n, sizeof *tids, cmp_i64);
    int k = 0;
    for (int i = 0; i < n; i++)
        if (k == 0 || tids[k - 1] != tids[i]) tids[k++] = tids[i];
    for (int i = 0; i < n; i++) {
        int64_t *p = bsearch(&rt->ev[first + i].tid, tids, (size_t)k, sizeof *tids, cmp_i64);
        rt->ev[first + i].rank = first_rank + (int)(p - tids);
    }
    free(tids);
    note_file(rt, path, "nsys-sqlite", n);
    return 0;
}

static const tb_rt *sort_rt;

static int cmp_event(const void *a, const void *b) {
    const tb_rt_event *x = &sort_rt->ev[*(const int *)a], *y = &sort_rt->ev[*(const int *)b];
    if (x->rank != y->rank) return x->rank < y->rank ? -1 : 1;
    if (x->tid != y->tid) return x->tid < y->tid ? -1 : 1;
    if (x->start != y->start) return x->start < y->start ? -1 : 1;
    if (x->dur != y->dur) return x->dur > y->dur ? -1 : 1;  // the enclosing one first
    return *(const int *)a - *(const int *)b;
}

// Parent = the innermost event on the same rank and thread whose interval holds this one.
static void link_parents(tb_rt *rt) {
    int *order = tb_xmalloc((size_t)(rt->nev + 1) * sizeof *order, "sort order");
    for (int i = 0; i < rt->nev; i++) order[i] = i;
    sort_rt = rt;
    qsort(order, (size_t)rt->nev, sizeof *order, cmp_event);
    int *stack = tb_xmalloc((size_t)(rt->nev + 1) * sizeof *stack, "range stack"), depth = 0;
    for (int k = 0; k < rt->nev; k++) {
        tb_rt_event *e = &rt->ev[order[k]];
        while (depth > 0) {
            const tb_rt_event *top = &rt->ev[stack[depth - 1]];
            if (top->rank == e->rank && top->tid == e->tid && e->start + e->dur <= top->start + top->dur) break;
            depth--;
        }
        e->parent = depth > 0 ? stack[depth - 1] : -1;
        stack[depth++] = order[k];
    }
    free(stack);
    free(order);
}

int tb_rt_load(tb_rt *rt, char **paths, int npaths, tb_error *err) {
    memset(rt, 0, sizeof *rt);
    rt->files = json_array();
    int next_rank = 0;
    for (int i = 0; i < npaths; i++) {
        FILE *f = fopen(paths[i], "rb");
        if (!f) return tb_fail(err, "%s: cannot open trace", paths[i]);
        char head[16] = {0};
        size_t got = fread(head, 1, sizeof head, f);
        fclose(f);
        int first = rt->nev;
        int rc = got == 16 && !memcmp(head, "SQLite format 3", 16) ? load_nsys(rt, paths[i], next_rank, err)
                                                                    : load_chrome(rt, paths[i], err);
        if (rc != 0) return -1;
        for (int k = first; k < rt->nev; k++)
            if (rt->ev[k].rank + 1 > next_rank) next_rank = rt->ev[k].rank + 1;
    }
    link_parents(rt);
    return 0;
}

void tb_rt_free(tb_rt *rt) {
    for (int i = 0; i < rt->nnames; i++) free(rt->names[i]);
    for (int i = 0; i < rt->nroots; i++) json_decref(rt->roots[i]);
    json_decref(rt->files);
    free(rt->backend);
    free(rt->names);
    free(rt->name_hash);
    free(rt->roots);
    free(rt->ev);
    memset(rt, 0, sizeof *rt);
}

// =======================================================================================
// Name patterns
// =======================================================================================

static int run_of(const char *s, const char *set) {
    int n = 0;
    while (s[n] && strchr(set, s[n])) n++;
    return n;
}

int tb_range_pattern_match(const char *p, const char *s) {
    while (*p) {
        if (*p != '%') {
            if (*p != *s) return 0;
            p++, s++;
            continue;
        }
        p++;
        if (*p == '%') {
            if (*s != '%') return 0;
            p++, s++;
            continue;
        }
        p += run_of(p, "-+ #0'");
        p += run_of(p, "0123456789*");
        if (*p == '.') p += 1 + run_of(p + 1, "0123456789*");
        p += run_of(p, "hlLqjzt");
        char conv = *p;
        if (!conv) return 0;
        p++;
        const char *set = NULL;
        int sign = 0;
        switch (conv) {
        case 'd':
        case 'i': set = "0123456789", sign = 1; break;
        case 'u': set = "0123456789"; break;
        case 'x': set = "0123456789abcdef"; break;
        case 'X': set = "0123456789ABCDEF"; break;
        case 'o': set = "01234567"; break;
        case 'f': case 'F': case 'e': case 'E': case 'g': case 'G': case 'a': case 'A':
            set = "0123456789.eE+-xXabcdefABCDEFinftyINFTYnN";
            break;
        case 'p': set = "0123456789abcdefx(nil)"; break;
        case 'c':
            if (!*s) return 0;
            s++;
            continue;
        case 's':
            for (const char *e = s + strlen(s); e >= s; e--)
                if (tb_range_pattern_match(p, e)) return 1;
            return 0;
        default: return 0;
        }
        const char *q = s;
        if (sign && *q == '-') q++;
        int n = run_of(q, set);
        for (int k = n; k >= 1; k--)
            if (tb_range_pattern_match(p, q + k)) return 1;
        return 0;
    }
    return *s == '\0';
}

// =======================================================================================
// The static model
// =======================================================================================

// The function's closing brace: from the index (functions.end_line), else from the braces
// of its source.
static tb_pos fn_end(tb_map *m, int fn) {
    const tb_gfn *f = &m->g->fns[fn];
    if (f->end.line > 0) return f->end;
    const tb_source *s = tb_graph_source(m->g, f->file);
    if (!s) return TB_POS_END;
    int b = tb_source_body_after(s, f->pos);
    return b >= 0 ? s->blocks[b].close : TB_POS_END;
}

static int block_of(const tb_source *s, tb_pos p) { return s ? tb_source_block_at(s, p) : -1; }

// Pairs the pushes and pops of one function. A pop closes the innermost open push when it
// is in that push's block; a pop in a block nested deeper (an early return) leaves it open;
// pushes whose blocks already ended (the branches of an if/else) close together at the
// pop after them. A push never popped continues in the callers (escapes); a pop with no
// push open closes a range its caller opened.
static void pair_ranges(tb_map *m, int fn) {
    tb_graph *g = m->g;
    const tb_gfn *f = &g->fns[fn];
    if (f->ranges_begin == f->ranges_end) return;
    const tb_source *s = tb_graph_source(g, f->file);
    int n = f->ranges_end - f->ranges_begin;
    int *stack = tb_xmalloc((size_t)n * sizeof *stack, "range stack"), depth = 0;
    char *seen_pop = tb_xcalloc((size_t)n, 1, "range pops");  // a pop was seen (and left it open) for this push
    tb_pos end = fn_end(m, fn);
    for (int r = f->ranges_begin; r < f->ranges_end; r++) {
        const tb_grange *rs = &g->ranges[r];
        if (!rs->is_pop) {
            stack[depth++] = r;
            continue;
        }
        if (depth == 0) {
            m->pops_caller[fn] = 1;
            continue;
        }
        int closed = 0;
        while (depth > 0 && s) {
            int b = block_of(s, g->ranges[stack[depth - 1]].pos);
            if (b < 0 || tb_pos_cmp(s->blocks[b].close, rs->pos) >= 0) break;
            m->sites[stack[--depth]].end = rs->pos;
            closed = 1;
        }
        if (closed || depth == 0) continue;
        int top = stack[depth - 1];
        int tb = block_of(s, g->ranges[top].pos), pb = block_of(s, rs->pos);
        if (s && pb != tb && tb_source_block_within(s, pb, tb)) {
            seen_pop[top - f->ranges_begin] = 1;  // conditional pop: the range goes on after it
            continue;
        }
        m->sites[top].end = rs->pos;
        depth--;
    }
    for (int i = 0; i < depth; i++) {
        m->sites[stack[i]].end = end;
        m->sites[stack[i]].escapes = !seen_pop[stack[i] - f->ranges_begin];
    }
    free(seen_pop);
    free(stack);
}

static int call_hits(tb_map *m, int call, int fn) {
    int tmp[256];
    int k = tb_graph_call_targets(m->g, call, m->entry.target, tmp, 256);
    for (int i = 0; i < k; i++)
        if (tmp[i] == fn) return 1;
    return 0;
}

static int call_pops_caller(tb_map *m, int call) {
    int tmp[256];
    int k = tb_graph_call_targets(m->g, call, m->entry.target, tmp, 256);
    for (int i = 0; i < k; i++)
        if (m->pops_caller[tmp[i]]) return 1;
    return 0;
}

// An NCCL call that moves data: a direct nccl* call the index made a collective site (its
// default list has the communication calls, not ncclGetErrorString, ncclCommInitRank ...).
static int is_nccl(const tb_map *m, int c) {
    const tb_gcall *call = &m->g->calls[c];
    return m->coll_call[c] && !call->field && !call->callback && !strncmp(call->callee_name, "nccl", 4);
}

static tb_region *add_region(tb_site_model *sm, int fn, tb_pos from, tb_pos to) {
    sm->regions = tb_xrealloc(sm->regions, (size_t)(sm->nregions + 1) * sizeof *sm->regions, "regions");
    tb_region *rg = &sm->regions[sm->nregions++];
    memset(rg, 0, sizeof *rg);
    rg->fn = fn;
    rg->from = from;
    rg->to = to;
    return rg;
}

int tb_region_has(const tb_region *rg, tb_pos p) {
    if (tb_pos_cmp(p, rg->from) <= 0 || tb_pos_cmp(p, rg->to) > 0) return 0;
    for (int i = 0; i < rg->nskip; i++)
        if (tb_pos_cmp(p, rg->skip_from[i]) > 0 && tb_pos_cmp(p, rg->skip_to[i]) <= 0) return 0;
    return 1;
}

// A push inside an `if` branch: the range is open after the branch, not in its `else`
// alternatives (finalize_model_grads: reduce_scatter in the if, all_reduce in the else).
static void skip_else_branches(tb_map *m, tb_region *rg) {
    const tb_source *s = tb_graph_source(m->g, m->g->fns[rg->fn].file);
    if (!s) return;
    for (int b = tb_source_block_at(s, rg->from); b >= 0 && rg->nskip < 8; b = s->blocks[b].parent) {
        if (tb_pos_cmp(s->blocks[b].close, rg->to) >= 0) break;  // the range ends inside this block
        tb_pos end = tb_source_else_end(s, b);
        if (tb_pos_cmp(end, s->blocks[b].close) <= 0) continue;
        rg->skip_from[rg->nskip] = s->blocks[b].close;
        rg->skip_to[rg->nskip++] = end;
    }
}

// The range's span: its own function from the push to where it closes; for a push that
// escapes, each caller from the call to the first call that pops it (to that statement's
// end), or to the caller's end.
static void site_regions(tb_map *m, int r, tb_site_model *sm) {
    tb_graph *g = m->g;
    const tb_grange *rs = &g->ranges[r];
    skip_else_branches(m, add_region(sm, rs->fn, rs->pos, sm->end));
    if (!sm->escapes) return;
    for (int c = 0; c < g->ncalls; c++) {
        int caller = g->calls[c].caller;
        if (caller == rs->fn || !tb_graph_in_scope(g, m->entry.target, caller) || !call_hits(m, c, rs->fn))
            continue;
        tb_pos to = fn_end(m, caller);
        for (int k = c + 1; k < g->fns[caller].calls_end; k++)
            if (call_pops_caller(m, k)) {
                const tb_source *s = tb_graph_source(g, g->calls[k].file);
                to = s ? tb_source_statement_end(s, g->calls[k].pos) : g->calls[k].pos;
                break;
            }
        add_region(sm, caller, g->calls[c].pos, to);
    }
}

typedef struct descent {
    int call;    // the dispatch (field) or nccl* call
    int fn;      // the function making it
    int via_fn;  // for a dispatch from a helper: E → via_fn (by via_call) → ...; -1
    int via_call;
} descent;

// Below a communicator entry point E (the callee of a collective site): its backend
// dispatches (calls through function-pointer fields) and nccl* calls; if E makes none
// itself, those of the functions it calls.
static int comm_descent(tb_map *m, int e, descent *out, int cap) {
    tb_graph *g = m->g;
    int n = 0;
    for (int c = g->fns[e].calls_begin; c < g->fns[e].calls_end && n < cap; c++)
        if (g->calls[c].field || is_nccl(m, c)) out[n++] = (descent){c, e, -1, -1};
    if (n > 0) return n;
    const tb_adj *a = tb_graph_adj(g, m->entry.target);
    for (int k = a->begin[e]; k < a->begin[e + 1]; k++) {
        int h = a->edges[k].to;
        for (int c = g->fns[h].calls_begin; c < g->fns[h].calls_end && n < cap; c++)
            if (g->calls[c].field || is_nccl(m, c))
                out[n++] = (descent){c, h, h, a->edges[k].call};
    }
    return n;
}

typedef struct walk_state {
    int *pf, *pc;       // BFS predecessors
    unsigned char *vis; // 1 reached, 2 start (a span function)
    unsigned char *covered;
} walk_state;

static void path_to(const walk_state *w, int f, int **fns, int **calls, int *n) {
    int len = 1;
    for (int x = f; w->pf[x] >= 0; x = w->pf[x]) len++;
    *fns = tb_xmalloc((size_t)(len + 8) * sizeof **fns, "chain functions");
    *calls = tb_xmalloc((size_t)(len + 8) * sizeof **calls, "chain calls");
    int i = len - 1;
    for (int x = f; x >= 0; x = w->pf[x], i--) {
        (*fns)[i] = x;
        if (i > 0) (*calls)[i - 1] = w->pc[x];
        if (w->pf[x] < 0) break;
    }
    *n = len;
}

static void push_coll(tb_site_model *sm, int *fns, int *calls, int n, int end_call, int coll_call, const char *via) {
    sm->colls = tb_xrealloc(sm->colls, (size_t)(sm->ncolls + 1) * sizeof *sm->colls, "colls");
    sm->colls[sm->ncolls++] = (tb_coll_chain){{n, fns, calls}, end_call, coll_call, via};
}

// Records a chain: the path to f, then call c, then (dispatches) each backend target, with
// the nccl* call inside the target when it makes one.
static void record_dispatch(tb_map *m, walk_state *w, tb_site_model *sm, int f, int c, int coll_call,
                            const int *pre_fns, const int *pre_calls, int npre) {
    tb_graph *g = m->g;
    const tb_gcall *call = &g->calls[c];
    int *pf, *pc, n;
    path_to(w, f, &pf, &pc, &n);
    if (is_nccl(m, c)) {
        int *fns = tb_xmalloc((size_t)(n + npre + 1) * sizeof *fns, "chain functions"), *calls = tb_xmalloc((size_t)(n + npre + 1) * sizeof *calls, "chain calls");
        memcpy(fns, pf, (size_t)n * sizeof *fns);
        memcpy(calls, pc, (size_t)(n - 1) * sizeof *calls);
        for (int i = 0; i < npre; i++) {  // a helper between the entry point and the call
            calls[n - 1 + i] = pre_calls[i];
            fns[n + i] = pre_fns[i];
        }
        push_coll(sm, fns, calls, n + npre, c, coll_call >= 0 ? coll_call : c, NULL);
        w->covered[c] = 1;
        free(pf);
        free(pc);
        return;
    }
    int tmp[64];
    int k = tb_graph_call_targets(g, c, m->entry.target, tmp, 64);
    for (int t = 0; t < k; t++) {
        int *fns = tb_xmalloc((size_t)(n + npre + 2) * sizeof *fns, "chain functions"), *calls = tb_xmalloc((size_t)(n + npre + 2) * sizeof *calls, "chain calls");
        memcpy(fns, pf, (size_t)n * sizeof *fns);
        memcpy(calls, pc, (size_t)(n - 1) * sizeof *calls);
        int len = n;
        for (int i = 0; i < npre; i++) {
            calls[len - 1] = pre_calls[i];
            fns[len++] = pre_fns[i];
        }
        calls[len - 1] = c;
        fns[len++] = tmp[t];
        int end_call = -1;
        for (int x = g->fns[tmp[t]].calls_begin; x < g->fns[tmp[t]].calls_end && end_call < 0; x++)
            if (is_nccl(m, x)) end_call = x;
        if (end_call >= 0) w->covered[end_call] = 1;
        push_coll(sm, fns, calls, len, end_call, coll_call, call->field);
    }
    w->covered[c] = 1;
    free(pf);
    free(pc);
}

static void handle_call(tb_map *m, walk_state *w, tb_site_model *sm, int f, int c, int in_span, int *queue,
                        int *tail) {
    tb_graph *g = m->g;
    const tb_gcall *call = &g->calls[c];
    if (w->covered[c]) {
        // recorded already as part of a collective's descent
    } else if (call->field && (m->coll_call[c] || (in_span && m->comm_entry[f]))) {
        record_dispatch(m, w, sm, f, c, -1, NULL, NULL, 0);  // a backend dispatch
    } else if (is_nccl(m, c)) {
        record_dispatch(m, w, sm, f, c, c, NULL, NULL, 0);
    } else if (m->coll_call[c] && strncmp(call->callee_name, "nccl", 4)) {  // a communicator entry point: down to its backend dispatch
        int tmp[64];
        int k = tb_graph_call_targets(g, c, m->entry.target, tmp, 64);
        for (int t = 0; t < k; t++) {
            descent d[32];
            int nd = comm_descent(m, tmp[t], d, 32);
            for (int i = 0; i < nd; i++) {
                // path: ... f -(c)-> E [-(via_call)-> helper] -(d.call)-> backend
                int pre_fns[2] = {tmp[t], d[i].via_fn}, pre_calls[2] = {c, d[i].via_call};
                record_dispatch(m, w, sm, f, d[i].call, c, pre_fns, pre_calls, d[i].via_fn >= 0 ? 2 : 1);
            }
            if (nd == 0) {  // nothing below: the entry point ends the chain
                int *pf, *pc, n;
                path_to(w, f, &pf, &pc, &n);
                pf = tb_xrealloc(pf, (size_t)(n + 1) * sizeof *pf, "chain functions");
                pc[n - 1] = c;
                pf[n] = tmp[t];
                push_coll(sm, pf, pc, n + 1, -1, c, NULL);
            }
        }
        if (k == 0) {  // not defined in the index: the call ends the chain
            int *pf, *pc, n;
            path_to(w, f, &pf, &pc, &n);
            push_coll(sm, pf, pc, n, c, c, NULL);
        }
    }
    int tmp[256];
    int k = tb_graph_call_targets(g, c, m->entry.target, tmp, 256);
    for (int i = 0; i < k; i++) {
        int v = tmp[i];
        if (w->vis[v]) continue;
        w->vis[v] = 1;
        w->pf[v] = f;
        w->pc[v] = c;
        sm->reached[v] = 1;
        queue[(*tail)++] = v;
    }
}

const tb_site_model *tb_map_site(tb_map *m, int r) {
    tb_site_model *sm = &m->sites[r];
    if (sm->done) return sm;
    sm->done = 1;
    tb_graph *g = m->g;
    site_regions(m, r, sm);
    int nf = g->nfns;
    sm->reached = tb_xcalloc((size_t)nf + 1, 1, "reached functions");
    walk_state w = {tb_xmalloc((size_t)(nf + 1) * sizeof(int), "w"), tb_xmalloc((size_t)(nf + 1) * sizeof(int), "w"),
                    tb_xcalloc((size_t)nf + 1, 1, "array"), tb_xcalloc((size_t)g->ncalls + 1, 1, "array")};
    for (int i = 0; i < nf; i++) w.pf[i] = w.pc[i] = -1;
    int *queue = tb_xmalloc((size_t)(nf + 1) * sizeof *queue, "search queue"), head = 0, tail = 0;
    for (int i = 0; i < sm->nregions; i++) w.vis[sm->regions[i].fn] = 2;
    for (int i = 0; i < sm->nregions; i++) {
        const tb_region *rg = &sm->regions[i];
        for (int c = g->fns[rg->fn].calls_begin; c < g->fns[rg->fn].calls_end; c++) {
            tb_pos p = g->calls[c].pos;
            if (tb_region_has(rg, p)) handle_call(m, &w, sm, rg->fn, c, 1, queue, &tail);
        }
    }
    while (head < tail) {
        int f = queue[head++];
        for (int c = g->fns[f].calls_begin; c < g->fns[f].calls_end; c++) handle_call(m, &w, sm, f, c, 0, queue, &tail);
    }
    free(queue);
    free(w.pf);
    free(w.pc);
    free(w.vis);
    free(w.covered);
    return sm;
}

int tb_map_entry_chain(const tb_map *m, int fn, tb_chain *out) {
    if (m->dist[fn] < 0) return 0;
    int n = m->dist[fn] + 1;
    out->n = n;
    out->fns = tb_xmalloc((size_t)n * sizeof *out->fns, "chain functions");
    out->calls = tb_xmalloc((size_t)n * sizeof *out->calls, "chain calls");
    int i = n - 1;
    for (int x = fn; i >= 0; x = m->pred_fn[x], i--) {
        out->fns[i] = x;
        if (i > 0) out->calls[i - 1] = m->pred_call[x];
    }
    return 1;
}

// The op of a communicator range event: args.op, else the OP of a "comm.GROUP.OP" name.
static const char *event_op(const tb_map *m, int ev) {
    const tb_rt_event *e = &m->rt.ev[ev];
    const char *op = e->args ? json_string_value(json_object_get(e->args, "op")) : NULL;
    if (op) return op;
    const char *name = m->rt.names[e->name];
    const char *dot = strrchr(name, '.');
    if (!strncmp(name, "comm.", 5) && dot && dot > name + 5 && dot[1]) return dot + 1;
    return NULL;
}

const char *tb_map_name_op(const tb_map *m, int name) { return name >= 0 && name < m->rt.nnames ? m->name_op[name] : NULL; }

static int ends_with_word(const char *s, const char *w) {
    size_t n = strlen(s), k = strlen(w);
    return k <= n && !strcmp(s + n - k, w) && (k == n || s[n - k - 1] == '_' || s[n - k - 1] == '.');
}

// Does collective chain c perform op (all_reduce ...)? By its backend field or its call's name.
static int chain_does(const tb_map *m, const tb_coll_chain *c, const char *op) {
    if (c->via && ends_with_word(c->via, op)) return 1;
    if (c->coll_call >= 0 && ends_with_word(m->g->calls[c->coll_call].callee_name, op)) return 1;
    return 0;
}

// Does the chain end in the backend the traces say they ran on (distributedInfo.backend:
// "local" → local_all_reduce in local_backend.c)? Unknown backend: yes.
static int chain_on_backend(const tb_map *m, const tb_coll_chain *c) {
    const char *b = m->rt.backend_conflict ? NULL : m->rt.backend;
    if (!b || !*b) return 1;
    const tb_graph *g = m->g;
    int last = c->path.fns[c->path.n - 1];
    const char *file = tb_graph_file(g, g->fns[last].file), *base = strrchr(file, '/');
    if (c->end_call >= 0) return strstr(g->calls[c->end_call].callee_name, b) != NULL;
    return strstr(g->fns[last].name, b) || strstr(base ? base + 1 : file, b);
}

int tb_map_coll_observed(const tb_map *m, int name, const tb_coll_chain *c, const char **op) {
    const tb_rt *rt = &m->rt;
    int n = 0;
    if (op) *op = NULL;
    if (!chain_on_backend(m, c)) return 0;
    for (int e = 0; e < rt->nev; e++) {
        const char *eop = event_op(m, e);
        if (!eop || !chain_does(m, c, eop)) continue;
        int inside = 0;
        for (int a = e; a >= 0 && !inside; a = rt->ev[a].parent) inside = rt->ev[a].name == name;
        if (!inside) continue;
        n++;
        if (op) *op = eop;
    }
    return n;
}

int tb_map_coll_relevant(tb_map *m, int r, int name, const tb_coll_chain *c) {
    (void)r;
    const char *op = tb_map_name_op(m, name);
    return !op || chain_does(m, c, op);
}

// =======================================================================================
// Opening
// =======================================================================================

int tb_map_open(tb_map *m, const char *index, const char *entry, char **traces, int ntraces, tb_error *err) {
    memset(m, 0, sizeof *m);
    if (tb_graph_open(&m->g, index, err) != 0) return -1;
    tb_graph *g = m->g;
    tb_entry *entries;
    int ne = tb_graph_entries(g, entry, &entries, err);
    if (ne == 0) goto fail;
    if (ne > 1) {
        size_t used = (size_t)snprintf(err->msg, sizeof err->msg, "entry '%s' is ambiguous:", entry);
        for (int i = 0; i < ne && used < sizeof err->msg; i++) {
            char loc[600];
            tb_graph_fn_loc(g, entries[i].fn, loc, sizeof loc);
            used += (size_t)snprintf(err->msg + used, sizeof err->msg - used, "%s %s at %s [%s]", i ? "," : "",
                                     g->fns[entries[i].fn].name, loc, entries[i].label);
        }
        if (used < sizeof err->msg)
            snprintf(err->msg + used, sizeof err->msg - used, "; give a build target or FILE:FUNCTION");
        free(entries);
        goto fail;
    }
    m->entry = entries[0];
    free(entries);

    int nf = g->nfns;
    m->dist = tb_xmalloc((size_t)(nf + 1) * sizeof *m->dist, "entry distances");
    m->pred_fn = tb_xmalloc((size_t)(nf + 1) * sizeof *m->pred_fn, "entry chains");
    m->pred_call = tb_xmalloc((size_t)(nf + 1) * sizeof *m->pred_call, "entry chains");
    tb_graph_bfs(g, m->entry.target, &m->entry.fn, 1, m->dist, m->pred_fn, m->pred_call);

    m->sites = tb_xcalloc((size_t)g->nranges + 1, sizeof *m->sites, "site models");
    m->pops_caller = tb_xcalloc((size_t)nf + 1, 1, "pop flags");
    m->coll_call = tb_xcalloc((size_t)g->ncalls + 1, 1, "collective flags");
    m->comm_entry = tb_xcalloc((size_t)nf + 1, 1, "communicator entries");
    for (int f = 0; f < nf; f++) pair_ranges(m, f);
    for (int i = 0; i < g->ncolls; i++) {
        int best = g->colls[i].call;  // collective_sites.call_id
        if (best < 0) continue;
        m->coll_call[best] = 1;
        for (int k = 0; k < g->calls[best].ntargets; k++)
            if (g->fns[g->calls[best].targets[k]].is_definition) m->comm_entry[g->calls[best].targets[k]] = 1;
    }

    if (tb_rt_load(&m->rt, traces, ntraces, err) != 0) goto fail;
    m->name_op = tb_xcalloc((size_t)m->rt.nnames + 1, sizeof *m->name_op, "range ops");
    char *op_done = tb_xcalloc((size_t)m->rt.nnames + 1, 1, "range ops");
    for (int e = 0; e < m->rt.nev; e++)
        if (!op_done[m->rt.ev[e].name]) {
            op_done[m->rt.ev[e].name] = 1;
            m->name_op[m->rt.ev[e].name] = event_op(m, e);
        }
    free(op_done);
    m->name_sites = tb_xcalloc((size_t)m->rt.nnames + 1, sizeof *m->name_sites, "name sites");
    m->name_nsites = tb_xcalloc((size_t)m->rt.nnames + 1, sizeof *m->name_nsites, "name sites");
    for (int n = 0; n < m->rt.nnames; n++)
        for (int r = 0; r < g->nranges; r++) {
            const tb_grange *rs = &g->ranges[r];
            if (rs->is_pop || !rs->name || !tb_graph_in_scope(g, m->entry.target, rs->fn)) continue;
            if (!tb_range_pattern_match(rs->name, m->rt.names[n])) continue;
            m->name_sites[n] = tb_xrealloc(m->name_sites[n], (size_t)(m->name_nsites[n] + 1) * sizeof(int), "name sites");
            m->name_sites[n][m->name_nsites[n]++] = r;
        }
    return 0;
fail:
    tb_map_close(m);
    return -1;
}

void tb_map_close(tb_map *m) {
    if (m->sites && m->g)
        for (int r = 0; r < m->g->nranges; r++) {
            tb_site_model *sm = &m->sites[r];
            free(sm->regions);
            free(sm->reached);
            for (int i = 0; i < sm->ncolls; i++) {
                free(sm->colls[i].path.fns);
                free(sm->colls[i].path.calls);
            }
            free(sm->colls);
        }
    if (m->name_sites)
        for (int n = 0; n < m->rt.nnames; n++) free(m->name_sites[n]);
    free(m->name_sites);
    free(m->name_nsites);
    free(m->name_op);
    free(m->sites);
    free(m->pops_caller);
    free(m->coll_call);
    free(m->comm_entry);
    free(m->dist);
    free(m->pred_fn);
    free(m->pred_call);
    tb_rt_free(&m->rt);
    tb_graph_free(m->g);
    memset(m, 0, sizeof *m);
}

// =======================================================================================
// The report
// =======================================================================================

void tb_format_ns(double ns, char *buf, size_t len) {
    if (ns < 1e6) snprintf(buf, len, "%.1f us", ns / 1e3);
    else if (ns < 1e9) snprintf(buf, len, "%.3f ms", ns / 1e6);
    else snprintf(buf, len, "%.3f s", ns / 1e9);
}

static json_t *hop_json(const tb_graph *g, int fn, int file, int line, const tb_gcall *call) {
    json_t *h = json_pack("{s:s, s:s, s:i}", "function", g->fns[fn].name, "file", tb_graph_file(g, file), "line", line);
    if (call && call->field) json_object_set_new(h, "via", json_string(call->field));
    if (call && call->passed_to) json_object_set_new(h, "passed_to", json_string(call->passed_to));
    if (call && call->callback) json_object_set_new(h, "callback", json_true());
    return h;
}

static json_t *chain_json(const tb_graph *g, const tb_chain *c, int last_file, int last_line) {
    json_t *a = json_array();
    for (int i = 0; i < c->n; i++) {
        if (i + 1 < c->n) {
            const tb_gcall *call = &g->calls[c->calls[i]];
            json_array_append_new(a, hop_json(g, c->fns[i], call->file, call->pos.line, call));
        } else {
            json_array_append_new(a, hop_json(g, c->fns[i], last_file, last_line, NULL));
        }
    }
    return a;
}

json_t *tb_map_coll_json(tb_map *m, const tb_coll_chain *c) {
    const tb_graph *g = m->g;
    int last = c->path.fns[c->path.n - 1];
    json_t *hops;
    if (c->end_call >= 0) {
        const tb_gcall *e = &g->calls[c->end_call];
        hops = chain_json(g, &c->path, e->file, e->pos.line);
        json_array_append_new(hops, json_pack("{s:s}", "function", e->callee_name));
    } else {
        hops = chain_json(g, &c->path, g->fns[last].file, g->fns[last].pos.line);
    }
    const char *coll = c->coll_call >= 0 ? g->calls[c->coll_call].callee_name
                       : c->end_call >= 0 ? g->calls[c->end_call].callee_name
                                          : c->via ? c->via : g->fns[last].name;
    json_t *j = json_pack("{s:s, s:s, s:o}", "collective", coll, "end",
                          c->end_call >= 0 ? g->calls[c->end_call].callee_name : g->fns[last].name, "hops", hops);
    if (c->via) json_object_set_new(j, "via", json_string(c->via));
    return j;
}

static void hops_text(json_t *hops, char *buf, size_t len) {
    size_t used = 0;
    size_t i;
    json_t *h;
    buf[0] = '\0';
    json_array_foreach(hops, i, h) {
        const char *fn = json_string_value(json_object_get(h, "function"));
        const char *file = json_string_value(json_object_get(h, "file"));
        const char *via = json_string_value(json_object_get(h, "via"));
        const char *passed = json_string_value(json_object_get(h, "passed_to"));
        int line = (int)json_integer_value(json_object_get(h, "line"));
        int w;
        if (!file) w = snprintf(buf + used, len - used, "%s%s", i ? " → " : "", fn);
        else if (via) w = snprintf(buf + used, len - used, "%s%s (%s:%d, via %s)", i ? " → " : "", fn, file, line, via);
        else if (passed)
            w = snprintf(buf + used, len - used, "%s%s (%s:%d, a callback passed to %s)", i ? " → " : "", fn, file,
                         line, passed);
        else if (json_is_true(json_object_get(h, "callback")))
            w = snprintf(buf + used, len - used, "%s%s (%s:%d, a callback)", i ? " → " : "", fn, file, line);
        else w = snprintf(buf + used, len - used, "%s%s (%s:%d)", i ? " → " : "", fn, file, line);
        if (w < 0 || (size_t)w >= len - used) {
            if (len > 4) memcpy(buf + len - 4, "...", 4);
            return;
        }
        used += (size_t)w;
    }
}

void tb_map_coll_text(tb_map *m, const tb_coll_chain *c, char *buf, size_t len) {
    json_t *j = tb_map_coll_json(m, c);
    hops_text(json_object_get(j, "hops"), buf, len);
    json_decref(j);
}

// Is the runtime nesting parent → child explained by a static path between their sites?
static const char *explain(tb_map *m, int parent, int child) {
    tb_graph *g = m->g;
    for (int i = 0; i < m->name_nsites[parent]; i++) {
        const tb_site_model *sm = tb_map_site(m, m->name_sites[parent][i]);
        for (int j = 0; j < m->name_nsites[child]; j++) {
            const tb_grange *cs = &g->ranges[m->name_sites[child][j]];
            for (int k = 0; k < sm->nregions; k++) {
                const tb_region *rg = &sm->regions[k];
                if (cs->fn == rg->fn && tb_region_has(rg, cs->pos))
                    return k == 0 ? "pushed inside the parent's span" : "pushed where the parent's range continues";
            }
            if (sm->reached[cs->fn]) return "reachable from the calls inside the parent's span";
        }
    }
    return NULL;
}

typedef struct name_stats {
    int count;
    double total;
    int64_t first;
} name_stats;

static name_stats *sort_stats;
static tb_rt *sort_names_rt;

static int cmp_names(const void *a, const void *b) {
    int x = *(const int *)a, y = *(const int *)b;
    if (sort_stats[x].first != sort_stats[y].first) return sort_stats[x].first < sort_stats[y].first ? -1 : 1;
    return strcmp(sort_names_rt->names[x], sort_names_rt->names[y]);
}

// Per name: the communicator figures of its events (args of the Chrome trace): each distinct
// (group, group size, op, dtype, count, bytes) with its calls, and the bytes in all; NULL
// for names without them. One pass over the events.
static json_t **comm_figures(tb_map *m) {
    const tb_rt *rt = &m->rt;
    json_t **out = tb_xcalloc((size_t)rt->nnames + 1, sizeof *out, "result array");
    for (int i = 0; i < rt->nev; i++) {
        const tb_rt_event *e = &rt->ev[i];
        json_t *a = e->args, *b = a ? json_object_get(a, "bytes") : NULL;
        if (!b) continue;
        if (!out[e->name]) out[e->name] = json_pack("{s:I, s:[]}", "bytes_total", (json_int_t)0, "shapes");
        json_t *fig = out[e->name], *shapes = json_object_get(fig, "shapes");
        json_int_t bytes = json_integer_value(b), count = json_integer_value(json_object_get(a, "count"));
        json_int_t gsize = json_integer_value(json_object_get(a, "group_size"));
        const char *group = json_string_value(json_object_get(a, "group"));
        const char *op = json_string_value(json_object_get(a, "op"));
        const char *dtype = json_string_value(json_object_get(a, "dtype"));
        json_object_set_new(fig, "bytes_total",
                            json_integer(json_integer_value(json_object_get(fig, "bytes_total")) + bytes));
        size_t k;
        json_t *sh, *hit = NULL;
        json_array_foreach(shapes, k, sh) {
            if (json_integer_value(json_object_get(sh, "bytes")) == bytes &&
                json_integer_value(json_object_get(sh, "count")) == count &&
                json_integer_value(json_object_get(sh, "group_size")) == gsize &&
                !strcmp(json_string_value(json_object_get(sh, "group")), group ? group : "") &&
                !strcmp(json_string_value(json_object_get(sh, "op")), op ? op : "") &&
                !strcmp(json_string_value(json_object_get(sh, "dtype")), dtype ? dtype : "")) {
                hit = sh;
                break;
            }
        }
        if (!hit) {
            hit = json_pack("{s:s, s:I, s:s, s:s, s:I, s:I, s:i}", "group", group ? group : "", "group_size", gsize,
                            "op", op ? op : "", "dtype", dtype ? dtype : "", "count", count, "bytes", bytes, "calls",
                            0);
            json_array_append_new(shapes, hit);
        }
        json_object_set_new(hit, "calls", json_integer(json_integer_value(json_object_get(hit, "calls")) + 1));
    }
    return out;
}

typedef struct op_count {
    const char *op;
    int count;
} op_count;

typedef struct op_list {
    op_count *ops;
    int n;
} op_list;

// Per name: the ops of the communicator ranges inside its events, with counts (for a
// communicator range, its own op).
static op_list *nested_ops(const tb_map *m) {
    const tb_rt *rt = &m->rt;
    op_list *l = tb_xcalloc((size_t)rt->nnames + 1, sizeof *l, "nested ops");
    int *stamp = tb_xmalloc((size_t)(rt->nnames + 1) * sizeof *stamp, "nested ops");
    for (int n = 0; n < rt->nnames; n++) stamp[n] = -1;
    for (int e = 0; e < rt->nev; e++) {
        const char *op = event_op(m, e);
        if (!op) continue;
        for (int a = e; a >= 0; a = rt->ev[a].parent) {
            int n = rt->ev[a].name;
            if (stamp[n] == e) continue;
            stamp[n] = e;
            int k;
            for (k = 0; k < l[n].n && strcmp(l[n].ops[k].op, op); k++) {}
            if (k == l[n].n) {
                l[n].ops = tb_xrealloc(l[n].ops, (size_t)(k + 1) * sizeof *l[n].ops, "ops");
                l[n].ops[l[n].n++] = (op_count){op, 0};
            }
            l[n].ops[k].count++;
        }
    }
    free(stamp);
    return l;
}

json_t *tb_map_report(tb_map *m) {
    tb_graph *g = m->g;
    tb_rt *rt = &m->rt;
    int nn = rt->nnames;
    json_t *report = json_object();
    char loc[600];
    tb_graph_fn_loc(g, m->entry.fn, loc, sizeof loc);
    json_object_set_new(report, "index", json_string(g->index_path));
    json_object_set_new(report, "entry", json_pack("{s:s, s:s, s:s}", "target", m->entry.label, "function",
                                                   g->fns[m->entry.fn].name, "at", loc));
    json_object_set(report, "traces", rt->files);

    // per name: count, total, first start; per rank
    name_stats *st = tb_xcalloc((size_t)nn + 1, sizeof *st, "name figures");
    int max_rank = -1;
    for (int n = 0; n < nn; n++) st[n].first = INT64_MAX;
    for (int i = 0; i < rt->nev; i++) {
        const tb_rt_event *e = &rt->ev[i];
        st[e->name].count++;
        st[e->name].total += (double)e->dur;
        if (e->start < st[e->name].first) st[e->name].first = e->start;
        if (e->rank > max_rank) max_rank = e->rank;
    }
    int nranks = max_rank + 1;
    int *rank_count = tb_xcalloc((size_t)nn * (size_t)(nranks + 1) + 1, sizeof *rank_count, "per-rank figures");
    double *rank_total = tb_xcalloc((size_t)nn * (size_t)(nranks + 1) + 1, sizeof *rank_total, "per-rank figures");
    for (int i = 0; i < rt->nev; i++) {
        const tb_rt_event *e = &rt->ev[i];
        if (e->rank < 0) continue;
        rank_count[(size_t)e->name * (size_t)nranks + (size_t)e->rank]++;
        rank_total[(size_t)e->name * (size_t)nranks + (size_t)e->rank] += (double)e->dur;
    }
    json_t *ranks = json_array();
    for (int r = 0; r < nranks; r++) {
        int any = 0;
        for (int i = 0; i < rt->nev && !any; i++) any = rt->ev[i].rank == r;
        if (any) json_array_append_new(ranks, json_integer(r));
    }
    json_object_set_new(report, "ranks", ranks);
    json_object_set_new(report, "events", json_integer(rt->nev));

    int *order = tb_xmalloc((size_t)(nn + 1) * sizeof *order, "sort order");
    for (int n = 0; n < nn; n++) order[n] = n;
    sort_stats = st;
    sort_names_rt = rt;
    qsort(order, (size_t)nn, sizeof *order, cmp_names);

    op_list *ops = nested_ops(m);
    json_t **comm = comm_figures(m);
    char *mapped = tb_xcalloc((size_t)nn + 1, 1, "mapped names");
    json_t *ranges = json_array(), *unmapped = json_array();
    for (int oi = 0; oi < nn; oi++) {
        int n = order[oi];
        json_t *rj = json_pack("{s:s, s:i, s:f, s:f}", "name", rt->names[n], "count", st[n].count, "total_us",
                               st[n].total / 1e3, "mean_us", st[n].count ? st[n].total / 1e3 / st[n].count : 0.0);
        json_t *per_rank = json_array();
        for (int r = 0; r < nranks; r++) {
            int c = rank_count[(size_t)n * (size_t)nranks + (size_t)r];
            if (!c) continue;
            double t = rank_total[(size_t)n * (size_t)nranks + (size_t)r];
            json_array_append_new(per_rank, json_pack("{s:i, s:i, s:f, s:f}", "rank", r, "count", c, "total_us",
                                                      t / 1e3, "mean_us", t / 1e3 / c));
        }
        json_object_set_new(rj, "per_rank", per_rank);
        if (comm[n]) json_object_set_new(rj, "comm", comm[n]);
        json_t *sites = json_array();
        for (int i = 0; i < m->name_nsites[n]; i++) {
            int r = m->name_sites[n][i];
            const tb_grange *rs = &g->ranges[r];
            const tb_site_model *sm = tb_map_site(m, r);
            json_t *sj = json_pack("{s:s, s:s, s:s, s:i}", "pattern", rs->name, "function", g->fns[rs->fn].name,
                                   "file", tb_graph_file(g, rs->file), "line", rs->pos.line);
            if (tb_pos_cmp(sm->end, TB_POS_END) != 0) json_object_set_new(sj, "end_line", json_integer(sm->end.line));
            if (sm->escapes) json_object_set_new(sj, "continues_in_callers", json_true());
            tb_chain ch;
            if (tb_map_entry_chain(m, rs->fn, &ch)) {
                json_object_set_new(sj, "chain", chain_json(g, &ch, rs->file, rs->pos.line));
                free(ch.fns);
                free(ch.calls);
                mapped[n] = 1;
            } else {
                json_object_set_new(sj, "chain", json_null());
            }
            // the collectives below it; those the traces show inside the range first
            json_t *colls = json_array(), *unseen = json_array();
            int relevant = 0;
            for (int c = 0; c < sm->ncolls; c++) relevant += tb_map_coll_relevant(m, r, n, &sm->colls[c]);
            for (int c = 0; c < sm->ncolls; c++) {
                if (relevant && !tb_map_coll_relevant(m, r, n, &sm->colls[c])) continue;
                int seen = 0;
                const char *seen_op = NULL;
                for (int k = 0; k < ops[n].n && chain_on_backend(m, &sm->colls[c]); k++)
                    if (chain_does(m, &sm->colls[c], ops[n].ops[k].op)) {
                        seen += ops[n].ops[k].count;
                        seen_op = ops[n].ops[k].op;
                    }
                json_t *cj = tb_map_coll_json(m, &sm->colls[c]);
                json_object_set_new(cj, "observed", json_integer(seen));
                if (seen_op) json_object_set_new(cj, "observed_op", json_string(seen_op));
                json_array_append_new(seen ? colls : unseen, cj);
            }
            json_array_extend(colls, unseen);
            json_decref(unseen);
            json_object_set_new(sj, "collectives", colls);
            json_array_append_new(sites, sj);
        }
        json_object_set_new(rj, "sites", sites);
        json_object_set_new(rj, "mapped", json_boolean(mapped[n]));
        if (!mapped[n]) json_array_append_new(unmapped, json_string(rt->names[n]));
        json_array_append_new(ranges, rj);
    }
    json_object_set_new(report, "ranges", ranges);

    // nestings: distinct (parent, child) name pairs
    int *pair_count = NULL;
    int *pairs = NULL, npairs = 0, cap = 0;
    for (int i = 0; i < rt->nev; i++) {
        int p = rt->ev[i].parent;
        if (p < 0) continue;
        int a = rt->ev[p].name, b = rt->ev[i].name, k;
        for (k = 0; k < npairs; k++)
            if (pairs[2 * k] == a && pairs[2 * k + 1] == b) break;
        if (k == npairs) {
            if (npairs == cap) {
                cap = cap ? 2 * cap : 64;
                pairs = tb_xrealloc(pairs, (size_t)cap * 2 * sizeof *pairs, "pairs");
                pair_count = tb_xrealloc(pair_count, (size_t)cap * sizeof *pair_count, "pair count");
            }
            pairs[2 * npairs] = a;
            pairs[2 * npairs + 1] = b;
            pair_count[npairs++] = 0;
        }
        pair_count[k]++;
    }
    json_t *nestings = json_array();
    int unexplained = 0;
    for (int k = 0; k < npairs; k++) {
        const char *how = explain(m, pairs[2 * k], pairs[2 * k + 1]);
        json_t *nj = json_pack("{s:s, s:s, s:i, s:b}", "parent", rt->names[pairs[2 * k]], "child",
                               rt->names[pairs[2 * k + 1]], "count", pair_count[k], "explained", how != NULL);
        if (how) json_object_set_new(nj, "how", json_string(how));
        else {
            unexplained++;
            json_object_set_new(nj, "why", json_string(!m->name_nsites[pairs[2 * k]]   ? "the parent has no source site"
                                                      : !m->name_nsites[pairs[2 * k + 1]] ? "the child has no source site"
                                                      : "no static path from the parent's span to the child's site"));
        }
        json_array_append_new(nestings, nj);
    }
    json_object_set_new(report, "nestings", nestings);
    json_object_set_new(report, "unexplained_nestings", json_integer(unexplained));

    int covered = 0;
    for (int i = 0; i < rt->nev; i++) covered += mapped[rt->ev[i].name];
    json_object_set_new(report, "unmapped", unmapped);
    json_object_set_new(report, "coverage",
                        json_pack("{s:i, s:i, s:f}", "mapped_events", covered, "events", rt->nev, "percent",
                                  rt->nev ? 100.0 * covered / rt->nev : 100.0));
    for (int n = 0; n < nn; n++) free(ops[n].ops);
    free(ops);
    free(comm);
    free(pairs);
    free(pair_count);
    free(mapped);
    free(order);
    free(rank_count);
    free(rank_total);
    free(st);
    return report;
}

// =======================================================================================
// Text
// =======================================================================================

#define TEXT_COLLECTIVES 6

static void print_report(json_t *rep) {
    json_t *entry = json_object_get(rep, "entry"), *traces = json_object_get(rep, "traces");
    printf("map: %zu trace file%s, %zu rank%s, %lld range events, %zu names\n", json_array_size(traces),
           json_array_size(traces) == 1 ? "" : "s", json_array_size(json_object_get(rep, "ranks")),
           json_array_size(json_object_get(rep, "ranks")) == 1 ? "" : "s",
           (long long)json_integer_value(json_object_get(rep, "events")),
           json_array_size(json_object_get(rep, "ranges")));
    printf("entry: %s [%s] at %s; index %s\n", json_string_value(json_object_get(entry, "function")),
           json_string_value(json_object_get(entry, "target")), json_string_value(json_object_get(entry, "at")),
           json_string_value(json_object_get(rep, "index")));
    size_t i, k;
    json_t *r, *x;
    char a[64], b[64], buf[8192];
    json_array_foreach(json_object_get(rep, "ranges"), i, r) {
        double total = json_real_value(json_object_get(r, "total_us")) * 1e3;
        double mean = json_real_value(json_object_get(r, "mean_us")) * 1e3;
        tb_format_ns(total, a, sizeof a);
        tb_format_ns(mean, b, sizeof b);
        printf("\n%s  %lld× total %s mean %s\n", json_string_value(json_object_get(r, "name")),
               (long long)json_integer_value(json_object_get(r, "count")), a, b);
        printf("  ranks  ");
        json_array_foreach(json_object_get(r, "per_rank"), k, x) {
            tb_format_ns(json_real_value(json_object_get(x, "total_us")) * 1e3, a, sizeof a);
            tb_format_ns(json_real_value(json_object_get(x, "mean_us")) * 1e3, b, sizeof b);
            printf("%s%lld: %lld× %s (mean %s)", k ? "; " : "", (long long)json_integer_value(json_object_get(x, "rank")),
                   (long long)json_integer_value(json_object_get(x, "count")), a, b);
        }
        printf("\n");
        json_t *comm = json_object_get(r, "comm");
        if (comm) {
            json_array_foreach(json_object_get(comm, "shapes"), k, x)
                printf("  comm   group %s (size %lld) %s %s: %lld× %lld elements, %lld bytes\n",
                       json_string_value(json_object_get(x, "group")),
                       (long long)json_integer_value(json_object_get(x, "group_size")),
                       json_string_value(json_object_get(x, "op")), json_string_value(json_object_get(x, "dtype")),
                       (long long)json_integer_value(json_object_get(x, "calls")),
                       (long long)json_integer_value(json_object_get(x, "count")),
                       (long long)json_integer_value(json_object_get(x, "bytes")));
            printf("  comm   %lld bytes in all\n", (long long)json_integer_value(json_object_get(comm, "bytes_total")));
        }
        json_t *sites = json_object_get(r, "sites");
        if (json_array_size(sites) == 0) printf("  site   NONE: no range site's pattern matches this name\n");
        size_t s;
        json_t *sj;
        json_array_foreach(sites, s, sj) {
            json_t *end = json_object_get(sj, "end_line");
            printf("  site   \"%s\" in %s (%s:%lld", json_string_value(json_object_get(sj, "pattern")),
                   json_string_value(json_object_get(sj, "function")), json_string_value(json_object_get(sj, "file")),
                   (long long)json_integer_value(json_object_get(sj, "line")));
            if (end) printf("-%lld", (long long)json_integer_value(end));
            printf(")%s\n", json_is_true(json_object_get(sj, "continues_in_callers")) ? ", continues in its callers" : "");
            json_t *chain = json_object_get(sj, "chain");
            if (json_is_array(chain)) {
                hops_text(chain, buf, sizeof buf);
                printf("  chain  %s\n", buf);
            } else {
                printf("  chain  NONE from the entry point\n");
            }
            json_t *colls = json_object_get(sj, "collectives");
            json_array_foreach(colls, k, x) {
                if (k == TEXT_COLLECTIVES) {
                    printf("  coll   ... %zu more (--json FILE lists all)\n", json_array_size(colls) - k);
                    break;
                }
                hops_text(json_object_get(x, "hops"), buf, sizeof buf);
                long long seen = (long long)json_integer_value(json_object_get(x, "observed"));
                printf("  coll   %s: %s", json_string_value(json_object_get(x, "collective")), buf);
                if (seen)
                    printf("  [traces: %lld× %s inside]\n", seen,
                           json_string_value(json_object_get(x, "observed_op")));
                else printf("  [not in these traces]\n");
            }
        }
    }
    json_t *nest = json_object_get(rep, "nestings");
    long long unexplained = (long long)json_integer_value(json_object_get(rep, "unexplained_nestings"));
    printf("\nnesting: %zu distinct parent → child pairs; %lld unexplained by static paths\n", json_array_size(nest),
           unexplained);
    json_array_foreach(nest, k, x) if (!json_is_true(json_object_get(x, "explained")))
        printf("  UNEXPLAINED %s → %s (%lld×): %s\n", json_string_value(json_object_get(x, "parent")),
               json_string_value(json_object_get(x, "child")), (long long)json_integer_value(json_object_get(x, "count")),
               json_string_value(json_object_get(x, "why")));
    json_t *cov = json_object_get(rep, "coverage");
    printf("\ncoverage: %lld/%lld range events (%.1f%%) map to a site with a chain from %s [%s]\n",
           (long long)json_integer_value(json_object_get(cov, "mapped_events")),
           (long long)json_integer_value(json_object_get(cov, "events")),
           json_real_value(json_object_get(cov, "percent")), json_string_value(json_object_get(entry, "function")),
           json_string_value(json_object_get(entry, "target")));
    json_array_foreach(json_object_get(rep, "unmapped"), k, x) printf("  unmapped: %s\n", json_string_value(x));
}

int tracebook_map_main(int argc, char **argv) {
    const char *index = TB_INDEX_DEFAULT_PATH, *entry = "pretrain_gpt", *json_out = NULL;
    const char *help = "TRACE... [--entry ENTRY] [--json FILE] [--index FILE]\n"
                       "  TRACE: the engine's trace.rank-NNNNN.json files, or `nsys export --type sqlite` files\n"
                       "  ENTRY: a build target (pretrain_gpt, the default), a function or FILE:FUNCTION";
    char **traces = tb_xcalloc((size_t)argc + 1, sizeof *traces, "trace paths");
    int ntraces = 0;
    for (int i = 1; i < argc; i++) {
        const char *s = argv[i];
        const char **val = !strcmp(s, "--index") ? &index : !strcmp(s, "--entry") ? &entry : !strcmp(s, "--json") ? &json_out : NULL;
        if (!strcmp(s, "--help") || !strcmp(s, "-h")) {
            printf("usage: tracebook map %s\n", help);
            free(traces);
            return 0;
        }
        if (val) {
            if (i + 1 >= argc) {
                fprintf(stderr, "tracebook map: %s needs a value\n", s);
                free(traces);
                return 2;
            }
            *val = argv[++i];
        } else if (s[0] == '-' && s[1]) {
            fprintf(stderr, "tracebook map: unknown flag '%s'\nusage: tracebook map %s\n", s, help);
            free(traces);
            return 2;
        } else {
            traces[ntraces++] = argv[i];
        }
    }
    if (ntraces == 0) {
        fprintf(stderr, "usage: tracebook map %s\n", help);
        free(traces);
        return 2;
    }
    tb_map m;
    tb_error err;
    if (tb_map_open(&m, index, entry, traces, ntraces, &err) != 0) {
        fprintf(stderr, "tracebook map: %s\n", err.msg);
        free(traces);
        return 1;
    }
    json_t *rep = tb_map_report(&m);
    int rc = 0;
    if (json_out && tb_write_json_atomic(json_out, rep, &err) != 0) {
        fprintf(stderr, "tracebook map: %s\n", err.msg);
        rc = 1;
    }
    print_report(rep);
    json_decref(rep);
    tb_map_close(&m);
    free(traces);
    return rc;
}
