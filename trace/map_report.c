// map_report.c — see map_report.h.
#include "map_report.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/xalloc.h"
#include "map_nesting.h"
#include "vec.h"

void tb_format_ns(double ns, char *buf, size_t len) {
    if (ns < 1e6) snprintf(buf, len, "%.1f us", ns / 1e3);
    else if (ns < 1e9) snprintf(buf, len, "%.3f ms", ns / 1e6);
    else snprintf(buf, len, "%.3f s", ns / 1e9);
}

// The last hop at a library's function (no definition in the index): where it is declared
// and the library of the entry's binary that defines it.
static json_t *library_hop_json(const tb_map *m, const char *name, int fn) {
    const tb_graph *g = m->g;
    json_t *h = json_pack("{s:s}", "function", name);
    if (fn < 0 || g->fns[fn].is_definition) return h;
    char loc[600];
    tb_graph_fn_loc(g, fn, loc, sizeof loc);
    json_object_set_new(h, "declared_at", json_string(loc));
    const char *lib = tb_graph_library(g, fn, m->entry.target);
    if (lib) json_object_set_new(h, "library", json_string(lib));
    return h;
}

static json_t *hop_json(const tb_graph *g, int fn, int file, int line, const tb_gcall *call) {
    json_t *h = json_pack("{s:s, s:s, s:i}", "function", g->fns[fn].name, "file", tb_graph_file(g, file), "line", line);
    if (call && call->field) json_object_set_new(h, "via", json_string(call->field));
    if (call && call->passed_to) json_object_set_new(h, "passed_to", json_string(call->passed_to));
    if (call && call->callback) json_object_set_new(h, "callback", json_true());
    return h;
}

json_t *tb_map_chain_json(const tb_graph *g, const tb_chain *c, int last_file, int last_line) {
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
        hops = tb_map_chain_json(g, &c->path, e->file, e->pos.line);
        json_array_append_new(hops, library_hop_json(m, e->callee_name, e->ntargets == 1 ? e->targets[0] : -1));
    } else if (!g->fns[last].is_definition && c->path.n > 1) {  // ends in a library's function (MPI_Allreduce)
        tb_chain up = {c->path.n - 1, c->path.fns, c->path.calls};
        const tb_gcall *e = &g->calls[c->path.calls[c->path.n - 2]];
        hops = tb_map_chain_json(g, &up, e->file, e->pos.line);
        json_array_append_new(hops, library_hop_json(m, g->fns[last].name, last));
    } else {
        hops = tb_map_chain_json(g, &c->path, g->fns[last].file, g->fns[last].pos.line);
    }
    const char *coll = c->coll_call >= 0 ? g->calls[c->coll_call].callee_name
                       : c->end_call >= 0 ? g->calls[c->end_call].callee_name
                                          : c->via ? c->via : g->fns[last].name;
    json_t *j = json_pack("{s:s, s:s, s:o}", "collective", coll, "end",
                          c->end_call >= 0 ? g->calls[c->end_call].callee_name : g->fns[last].name, "hops", hops);
    if (c->via) json_object_set_new(j, "via", json_string(c->via));
    return j;
}

void tb_map_hops_text(json_t *hops, char *buf, size_t len) {
    size_t used = 0;
    size_t i;
    json_t *h;
    buf[0] = '\0';
    json_array_foreach(hops, i, h) {
        const char *fn = json_string_value(json_object_get(h, "function"));
        const char *file = json_string_value(json_object_get(h, "file"));
        const char *via = json_string_value(json_object_get(h, "via"));
        const char *passed = json_string_value(json_object_get(h, "passed_to"));
        const char *decl = json_string_value(json_object_get(h, "declared_at"));
        const char *lib = json_string_value(json_object_get(h, "library"));
        int line = (int)json_integer_value(json_object_get(h, "line"));
        int w;
        if (!file && decl)
            w = snprintf(buf + used, len - used, "%s%s (declared at %s%s%s)", i ? " → " : "", fn, decl,
                         lib ? "; defined in " : "", lib ? lib : "");
        else if (!file) w = snprintf(buf + used, len - used, "%s%s", i ? " → " : "", fn);
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
    tb_map_hops_text(json_object_get(j, "hops"), buf, len);
    json_decref(j);
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
    tb_vec ops;  // of op_count
} op_list;

// Per name: the ops of the communicator ranges inside its events, with counts (for a
// communicator range, its own op).
static op_list *nested_ops(const tb_map *m) {
    const tb_rt *rt = &m->rt;
    op_list *l = tb_xcalloc((size_t)rt->nnames + 1, sizeof *l, "nested ops");
    int *stamp = tb_xmalloc((size_t)(rt->nnames + 1) * sizeof *stamp, "nested ops");
    for (int n = 0; n < rt->nnames; n++) {
        stamp[n] = -1;
        tb_vec_init(&l[n].ops, sizeof(op_count), "nested ops");
    }
    for (int e = 0; e < rt->nev; e++) {
        const char *op = tb_map_event_op(m, e);
        if (!op) continue;
        for (int a = e; a >= 0; a = rt->ev[a].parent) {
            int n = rt->ev[a].name;
            if (stamp[n] == e) continue;
            stamp[n] = e;
            size_t k;
            for (k = 0; k < l[n].ops.len && strcmp(TB_VEC_AT(&l[n].ops, op_count, k).op, op); k++) {}
            if (k == l[n].ops.len) *(op_count *)tb_vec_push(&l[n].ops) = (op_count){op, 0};
            TB_VEC_AT(&l[n].ops, op_count, k).count++;
        }
    }
    free(stamp);
    return l;
}

json_t *tb_map_site_json(tb_map *m, int r, int *has_chain) {
    const tb_graph *g = m->g;
    const tb_grange *rs = &g->ranges[r];
    const tb_site_model *sm = tb_map_site(m, r);
    json_t *sj = json_pack("{s:s, s:s, s:s, s:i}", "pattern", rs->name, "function", g->fns[rs->fn].name, "file",
                           tb_graph_file(g, rs->file), "line", rs->pos.line);
    if (tb_pos_cmp(sm->end, TB_POS_END) != 0) json_object_set_new(sj, "end_line", json_integer(sm->end.line));
    if (sm->escapes) json_object_set_new(sj, "continues_in_callers", json_true());
    tb_chain ch;
    *has_chain = tb_map_entry_chain(m, rs->fn, &ch);
    if (*has_chain) {
        json_object_set_new(sj, "chain", tb_map_chain_json(g, &ch, rs->file, rs->pos.line));
        free(ch.fns);
        free(ch.calls);
    } else {
        json_object_set_new(sj, "chain", json_null());
    }
    return sj;
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
            const tb_site_model *sm = tb_map_site(m, r);
            int has_chain;
            json_t *sj = tb_map_site_json(m, r, &has_chain);
            mapped[n] |= has_chain;
            // the collectives below it; those the traces show inside the range first
            json_t *colls = json_array(), *unseen = json_array();
            int relevant = 0;
            for (int c = 0; c < sm->ncolls; c++) relevant += tb_map_coll_relevant(m, r, n, &sm->colls[c]);
            for (int c = 0; c < sm->ncolls; c++) {
                if (relevant && !tb_map_coll_relevant(m, r, n, &sm->colls[c])) continue;
                int seen = 0;
                const char *seen_op = NULL;
                for (size_t k = 0; k < ops[n].ops.len && tb_map_chain_on_backend(m, &sm->colls[c]); k++) {
                    const op_count *oc = &TB_VEC_AT(&ops[n].ops, op_count, k);
                    if (tb_map_chain_does(m, &sm->colls[c], oc->op)) {
                        seen += oc->count;
                        seen_op = oc->op;
                    }
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

    int unexplained = 0;
    json_object_set_new(report, "nestings", tb_map_nestings(m, &unexplained));
    json_object_set_new(report, "unexplained_nestings", json_integer(unexplained));

    int covered = 0;
    for (int i = 0; i < rt->nev; i++) covered += mapped[rt->ev[i].name];
    json_object_set_new(report, "unmapped", unmapped);
    // the malformed events dropped count against the coverage: they are range events of the
    // traces that were not mapped
    int all = rt->nev + rt->ndropped;
    json_object_set_new(report, "coverage",
                        json_pack("{s:i, s:i, s:i, s:f}", "mapped_events", covered, "events", all, "dropped_events",
                                  rt->ndropped, "percent", all ? 100.0 * covered / all : 0.0));
    json_object_set(report, "dropped", rt->dropped);
    // the static side relies on every function the entry reaches: a partial parse among
    // their units may have lost calls, so the map is partial too
    json_t *pp = json_array();
    unsigned char *seen = tb_xcalloc((size_t)g->nfiles + 1, 1, "partial units");
    for (int f = 0; f < g->nfns; f++) {
        int u = m->dist[f] >= 0 ? tb_graph_fn_partial(g, f) : -1;
        if (u < 0 || seen[u]) continue;
        seen[u] = 1;
        json_array_append_new(pp, json_pack("{s:s, s:i, s:s}", "unit", tb_graph_file(g, u), "errors", g->files[u].errors,
                                            "first", g->files[u].first_error ? g->files[u].first_error : "?"));
    }
    free(seen);
    json_object_set_new(report, "partial_parses", pp);
    json_object_set_new(report, "status", json_string(rt->ndropped || json_array_size(pp) ? "partial" : "complete"));
    for (int n = 0; n < nn; n++) tb_vec_free(&ops[n].ops);
    free(ops);
    free(comm);
    free(mapped);
    free(order);
    free(rank_count);
    free(rank_total);
    free(st);
    return report;
}
