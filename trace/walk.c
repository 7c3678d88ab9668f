// walk.c — `tracebook walk RANGE --trace FILE...`: a Markdown walkthrough for one range,
// from the entry point down to the range's push and on to the collective below it, each
// hop with its file:line and source line, then the runtime evidence from the traces: the
// range's count and times per rank, and the shapes of the collectives nested inside it.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/options.h"
#include "core/xalloc.h"
#include "index_db.h"
#include "map_report.h"
#include "trace_cli.h"
#include "vec.h"
#include "walk_origin.h"

static void source_line(tb_graph *g, int file, int line) {
    const tb_source *s = tb_graph_source(g, file);
    size_t len = 0;
    const char *text = s ? tb_source_line(s, line, &len) : NULL;
    if (!text) {
        printf("   (source line not readable)\n");
        return;
    }
    while (len > 0 && (*text == ' ' || *text == '\t')) text++, len--;
    printf("   ```c\n   %.*s\n   ```\n", (int)len, text);
}

static void hop(tb_graph *g, int step, int fn, int file, int line, const tb_gcall *call, const char *note) {
    printf("%d. `%s` — %s:%d", step, g->fns[fn].name, tb_graph_file(g, file), line);
    if (call && call->field) printf(", through the function-pointer field `%s`", call->field);
    if (call && call->passed_to) printf(", passing `%s` to `%s`, which calls it back", call->callee_name, call->passed_to);
    else if (call && call->callback) printf(", taking `%s` as a callback, called back later", call->callee_name);
    if (note) printf(" %s", note);
    printf("\n");
    source_line(g, file, line);
}

static void walk_chain_to_site(tb_map *m, int r) {
    tb_graph *g = m->g;
    const tb_grange *rs = &g->ranges[r];
    tb_chain ch;
    if (!tb_map_entry_chain(m, rs->fn, &ch)) {
        printf("No static chain from `%s` reaches `%s`.\n\n", g->fns[m->entry.fn].name, g->fns[rs->fn].name);
        return;
    }
    printf("### From the entry point to the range (%d call%s)\n\n", ch.n - 1, ch.n == 2 ? "" : "s");
    for (int i = 0; i + 1 < ch.n; i++) {
        const tb_gcall *c = &g->calls[ch.calls[i]];
        hop(g, i + 1, ch.fns[i], c->file, c->pos.line, c, NULL);
    }
    hop(g, ch.n, rs->fn, rs->file, rs->pos.line, NULL, "— the range opens here");
    printf("\n");
    free(ch.fns);
    free(ch.calls);
}

// The collective chains of site r to show for runtime name `name` (-1: any), those the
// traces show inside the range first; seen[c] and seen_op[c] say how. Returns the count.
static int coll_order(tb_map *m, int r, int name, int **order, int **seen, const char ***seen_op) {
    const tb_site_model *sm = tb_map_site(m, r);
    *order = tb_xmalloc((size_t)(sm->ncolls + 1) * sizeof **order, "sort order");
    *seen = tb_xcalloc((size_t)sm->ncolls + 1, sizeof **seen, "seen flags");
    *seen_op = tb_xcalloc((size_t)sm->ncolls + 1, sizeof **seen_op, "collective ops");
    int relevant = 0, n = 0;
    for (int c = 0; c < sm->ncolls; c++) relevant += name < 0 || tb_map_coll_relevant(m, r, name, &sm->colls[c]);
    for (int pass = 0; pass < 2; pass++)
        for (int c = 0; c < sm->ncolls; c++) {
            if (relevant && name >= 0 && !tb_map_coll_relevant(m, r, name, &sm->colls[c])) continue;
            if (pass == 0 && name >= 0) (*seen)[c] = tb_map_coll_observed(m, name, &sm->colls[c], &(*seen_op)[c]);
            if ((pass == 0) == ((*seen)[c] > 0)) (*order)[n++] = c;
        }
    return n;
}

// One line: the function names from the entry point through the range to its first collective.
static void walk_summary(tb_map *m, int r, int name, const char *range) {
    tb_graph *g = m->g;
    tb_chain ch;
    if (!tb_map_entry_chain(m, g->ranges[r].fn, &ch)) return;
    printf("**In short:** ");
    for (int i = 0; i < ch.n; i++) printf("%s`%s`", i ? " → " : "", g->fns[ch.fns[i]].name);
    printf(" opens `%s`", range);
    free(ch.fns);
    free(ch.calls);
    int *order, *seen;
    const char **seen_op;
    int n = coll_order(m, r, name, &order, &seen, &seen_op);
    if (n > 0) {
        const tb_coll_chain *cc = &tb_map_site(m, r)->colls[order[0]];
        printf(", then");
        for (int i = 1; i < cc->path.n; i++) printf("%s`%s`", i > 1 ? " → " : " ", g->fns[cc->path.fns[i]].name);
        if (cc->end_call >= 0) printf(" → `%s`", g->calls[cc->end_call].callee_name);
        if (cc->via) printf(" (through `%s`)", cc->via);
        if (seen[order[0]]) printf("; the traces show %d× `%s` inside it", seen[order[0]], seen_op[order[0]]);
    }
    printf(".\n\n");
    // what the other backends of the same collective would call (none executed here)
    int nstatic = 0;
    for (int i = 0; i < n && name >= 0 && seen[order[0]]; i++) {
        const tb_coll_chain *cc = &tb_map_site(m, r)->colls[order[i]];
        if (seen[order[i]] || !cc->via || !tb_map_chain_does(m, cc, seen_op[order[0]])) continue;
        int last = cc->path.fns[cc->path.n - 1];
        printf("%s`%s`", nstatic++ ? ", " : "**Static only** (the same collective on the backends these traces did not run): ",
               g->fns[last].name);
        if (cc->end_call >= 0) printf(" → `%s`", g->calls[cc->end_call].callee_name);
    }
    if (nstatic) printf(".\n\n");
    free(order);
    free(seen);
    free(seen_op);
}

// Where a library's function (no definition in the index) is declared and which library of
// the entry's binary defines it: ", declared at nccl.h:414, defined in libnccl.so.2".
static void library_where(const tb_map *m, int fn) {
    const tb_graph *g = m->g;
    if (g->fns[fn].is_definition) return;
    char loc[600];
    tb_graph_fn_loc(g, fn, loc, sizeof loc);
    const char *lib = tb_graph_library(g, fn, m->entry.target);
    printf(", declared at %s%s%s", loc, lib ? ", defined in " : "", lib ? lib : "");
}

static void walk_collectives(tb_map *m, int r, int name) {
    tb_graph *g = m->g;
    const tb_grange *rs = &g->ranges[r];
    const tb_site_model *sm = tb_map_site(m, r);
    int relevant = 0;
    for (int c = 0; c < sm->ncolls; c++) relevant += name < 0 || tb_map_coll_relevant(m, r, name, &sm->colls[c]);
    printf("### From the range to the collective%s\n\n", relevant == 1 ? "" : "s");
    if (tb_pos_cmp(sm->end, TB_POS_END) != 0)
        printf("The range spans %s:%d–%d of `%s`", tb_graph_file(g, rs->file), rs->pos.line, sm->end.line,
               g->fns[rs->fn].name);
    else
        printf("The range is open from %s:%d to the end of `%s`", tb_graph_file(g, rs->file), rs->pos.line,
               g->fns[rs->fn].name);
    if (sm->escapes) printf(" and stays open after it returns: it continues in its callers until they pop it");
    printf(".\n\n");
    if (relevant == 0) {
        printf("No collective is reachable from the calls inside the range.\n\n");
        return;
    }
    int *order, *seen;
    const char **seen_op;
    int norder = coll_order(m, r, name, &order, &seen, &seen_op), k = 0;
    for (int oi = 0; oi < norder; oi++) {
        int c = order[oi];
        const tb_coll_chain *cc = &sm->colls[c];
        int last = cc->path.fns[cc->path.n - 1];
        const char *coll = cc->coll_call >= 0 ? g->calls[cc->coll_call].callee_name : cc->via ? cc->via : g->fns[last].name;
        printf("#### %d. `%s` → `%s`%s%s%s\n\n", ++k, coll,
               cc->end_call >= 0 ? g->calls[cc->end_call].callee_name : g->fns[last].name, cc->via ? " (via `" : "",
               cc->via ? cc->via : "", cc->via ? "`)" : "");
        if (name >= 0 && seen[c])
            printf("Seen at runtime: %d× `%s` inside `%s` in these traces.\n\n", seen[c], seen_op[c],
                   m->rt.names[name]);
        else if (name >= 0)
            printf("**Static only:** not executed in these traces (a path the configuration that produced them did "
                   "not take); on this backend the same collective would call `%s`%s%s%s.\n\n",
                   cc->end_call >= 0 ? g->calls[cc->end_call].callee_name : g->fns[last].name,
                   cc->end_call >= 0 ? " via `" : "", cc->end_call >= 0 ? g->fns[last].name : "",
                   cc->end_call >= 0 ? "`" : "");
        tb_walk_group(m, name, cc, tb_walk_rt_group(m, name, cc));
        tb_walk_stream(m, cc);
        if (cc->path.fns[0] != rs->fn)
            printf("The range, still open, continues in `%s`:\n\n", g->fns[cc->path.fns[0]].name);
        int step = 1;
        for (int i = 0; i + 1 < cc->path.n; i++) {
            const tb_gcall *call = &g->calls[cc->path.calls[i]];
            hop(g, step++, cc->path.fns[i], call->file, call->pos.line, call,
                cc->path.calls[i] == cc->coll_call ? "— the collective call" : NULL);
        }
        if (cc->end_call >= 0) {
            const tb_gcall *e = &g->calls[cc->end_call];
            hop(g, step++, last, e->file, e->pos.line, NULL, NULL);
            printf("%d. `%s` — the NCCL call", step, e->callee_name);
            if (e->ntargets == 1) library_where(m, e->targets[0]);
            printf("\n");
        } else if (!g->fns[last].is_definition && cc->path.n > 1) {
            printf("%d. `%s` — the library's function", step, g->fns[last].name);
            library_where(m, last);
            printf("\n");
        } else {
            hop(g, step, last, g->fns[last].file, g->fns[last].pos.line, NULL,
                cc->via ? "— the backend's implementation" : NULL);
        }
        printf("\n");
    }
    free(order);
    free(seen);
    free(seen_op);
}

typedef struct shape {
    const char *name, *group, *op, *dtype;
    int rank;
    long long group_size, count, bytes;
    int calls;
    double total;  // ns, over the calls
} shape;

static int is_instance(const tb_map *m, const char *range, int pattern, int ev) {
    const char *n = m->rt.names[m->rt.ev[ev].name];
    return pattern ? tb_range_pattern_match(range, n) : !strcmp(range, n);
}

static void walk_runtime(tb_map *m, const char *range, int pattern) {
    const tb_rt *rt = &m->rt;
    int nranks = 0;
    for (int i = 0; i < rt->nev; i++)
        if (rt->ev[i].rank + 1 > nranks) nranks = rt->ev[i].rank + 1;
    printf("## Runtime evidence\n\n");
    int total_count = 0;
    double total = 0;
    for (int i = 0; i < rt->nev; i++)
        if (is_instance(m, range, pattern, i)) total_count++, total += (double)rt->ev[i].dur;
    if (total_count == 0) {
        printf("No event named `%s` in the traces.\n", range);
        return;
    }
    char a[64], b[64], c[64], d[64];
    tb_format_ns(total, a, sizeof a);
    tb_format_ns(total / total_count, b, sizeof b);
    printf("`%s`: %d event%s, total %s, mean %s.\n\n", range, total_count, total_count == 1 ? "" : "s", a, b);
    printf("| rank | count | total | mean | min | max |\n|---:|---:|---:|---:|---:|---:|\n");
    for (int r = 0; r < nranks; r++) {
        int n = 0;
        double t = 0, lo = 0, hi = 0;
        for (int i = 0; i < rt->nev; i++) {
            if (rt->ev[i].rank != r || !is_instance(m, range, pattern, i)) continue;
            double du = (double)rt->ev[i].dur;
            if (n == 0 || du < lo) lo = du;
            if (n == 0 || du > hi) hi = du;
            n++, t += du;
        }
        if (!n) continue;
        tb_format_ns(t, a, sizeof a);
        tb_format_ns(t / n, b, sizeof b);
        tb_format_ns(lo, c, sizeof c);
        tb_format_ns(hi, d, sizeof d);
        printf("| %d | %d | %s | %s | %s | %s |\n", r, n, a, b, c, d);
    }
    // communicator ranges nested (at any depth) inside the range's events
    tb_vec found;
    tb_vec_init(&found, sizeof(shape), "collective shapes");
    for (int i = 0; i < rt->nev; i++) {
        const tb_rt_event *e = &rt->ev[i];
        if (!e->args || !json_object_get(e->args, "bytes")) continue;
        int inside = 0;
        for (int p = e->parent; p >= 0 && !inside; p = rt->ev[p].parent) inside = is_instance(m, range, pattern, p);
        if (!inside) continue;
        shape s = {rt->names[e->name],
                   json_string_value(json_object_get(e->args, "group")),
                   json_string_value(json_object_get(e->args, "op")),
                   json_string_value(json_object_get(e->args, "dtype")),
                   e->rank,
                   (long long)json_integer_value(json_object_get(e->args, "group_size")),
                   (long long)json_integer_value(json_object_get(e->args, "count")),
                   (long long)json_integer_value(json_object_get(e->args, "bytes")),
                   1,
                   (double)e->dur};
        size_t k;
        for (k = 0; k < found.len; k++) {
            shape *t = &TB_VEC_AT(&found, shape, k);
            if (!strcmp(t->name, s.name) && t->rank == s.rank && t->group_size == s.group_size &&
                t->count == s.count && t->bytes == s.bytes && !strcmp(t->group ? t->group : "", s.group ? s.group : ""))
                break;
        }
        if (k < found.len) {
            TB_VEC_AT(&found, shape, k).calls++;
            TB_VEC_AT(&found, shape, k).total += (double)e->dur;
            continue;
        }
        *(shape *)tb_vec_push(&found) = s;
    }
    int nshapes = (int)found.len;
    shape *shapes = tb_vec_take(&found);
    printf("\n### Collectives inside `%s` at runtime\n\n", range);
    if (nshapes == 0) {
        printf("No communicator range is nested inside it in these traces.\n");
    } else {
        printf("The shapes are the trace args of each communicator range (count in elements of dtype, bytes per "
               "call); time is the range's total and mean over its calls.\n\n");
        printf("| range | rank | calls | group | group size | op | dtype | count | bytes | total | mean |\n"
               "|---|---:|---:|---|---:|---|---|---:|---:|---:|---:|\n");
        for (int k = 0; k < nshapes; k++) {
            const shape *s = &shapes[k];
            char tt[64], mt[64];
            tb_format_ns(s->total, tt, sizeof tt);
            tb_format_ns(s->total / s->calls, mt, sizeof mt);
            printf("| %s | %d | %d | %s | %lld | %s | %s | %lld | %lld | %s | %s |\n", s->name, s->rank, s->calls,
                   s->group ? s->group : "", s->group_size, s->op ? s->op : "", s->dtype ? s->dtype : "", s->count,
                   s->bytes, tt, mt);
        }
    }
    free(shapes);
}

// --json: the walkthrough's facts as one document. Each site as map's report has it (its
// chain from the entry point; its collectives, those the traces show inside the range
// first, with how often), and the runtime figures of the range names it matches.
static json_t *site_json(tb_map *m, int r, int name) {
    const tb_site_model *sm = tb_map_site(m, r);
    int has_chain;
    json_t *sj = tb_map_site_json(m, r, &has_chain);
    int *order, *seen;
    const char **seen_op;
    int n = coll_order(m, r, name, &order, &seen, &seen_op);
    json_t *colls = json_array();
    for (int i = 0; i < n; i++) {
        json_t *cj = tb_map_coll_json(m, &sm->colls[order[i]]);
        json_object_set_new(cj, "observed", json_integer(name >= 0 ? seen[order[i]] : 0));
        if (name >= 0 && seen[order[i]]) json_object_set_new(cj, "observed_op", json_string(seen_op[order[i]]));
        json_array_append_new(colls, cj);
    }
    free(order);
    free(seen);
    free(seen_op);
    json_object_set_new(sj, "collectives", colls);
    return sj;
}

static json_t *walk_json(tb_map *m, const char *range, int pattern, const int *sites, int nsites, int name) {
    json_t *rep = tb_map_report(m);
    json_t *doc = json_pack("{s:s, s:b}", "range", range, "pattern", pattern);
    const char *keep[] = {"index", "entry", "traces", "partial_parses", "status"};
    for (size_t i = 0; i < sizeof keep / sizeof *keep; i++) json_object_set(doc, keep[i], json_object_get(rep, keep[i]));
    json_t *sj = json_array(), *runtime = json_array(), *x;
    for (int i = 0; i < nsites; i++) json_array_append_new(sj, site_json(m, sites[i], name));
    size_t k;
    json_array_foreach(json_object_get(rep, "ranges"), k, x) {
        const char *n = json_string_value(json_object_get(x, "name"));
        if (pattern ? tb_range_pattern_match(range, n) : !strcmp(range, n)) {
            json_object_del(x, "sites");  // the sites are above, walked
            json_array_append(runtime, x);
        }
    }
    json_object_set_new(doc, "sites", sj);
    json_object_set_new(doc, "runtime", runtime);
    json_decref(rep);
    return doc;
}

typedef struct walk_args {
    const char *index, *from;
    int json;
    tb_strlist traces;
} walk_args;

static const tb_option walk_options[] = {
    TB_OPTION("--trace", walk_args, traces, TB_OPT_LIST, NULL, "FILE",
              "a trace (Chrome JSON or nsys SQLite); words after RANGE are traces too"),
    TB_OPTION("--from", walk_args, from, TB_OPT_STRING, "pretrain_gpt", "ENTRY",
              "the entry point: a build target (its main), a function or FILE:FUNCTION"),
    TB_OPTION("--json", walk_args, json, TB_OPT_BOOL, NULL, NULL,
              "the walkthrough's facts as one JSON document: sites, chains, collectives, runtime figures"),
    TB_OPTION("--index", walk_args, index, TB_OPT_STRING, TB_INDEX_DEFAULT_PATH, "FILE", "the source index"),
    TB_OPTIONS_END};

static const tb_command walk_command = {
    "tracebook walk", "RANGE [TRACE...]",
    "A Markdown walkthrough from the entry point down to a range and the collectives below it, each hop\n"
    "with its file:line and source line; with traces, the range's runtime figures per rank and the shapes\n"
    "of the collectives inside it. RANGE: a runtime range name (layer.0.mlp.fc2) or a site's pattern\n"
    "(layer.%d.mlp.fc2).",
    walk_options, 1, -1,
    "tracebook walk layer.%d.mlp.fc2\n"
    "tracebook walk layer.0.mlp.fc2 artifacts/tp_scaling/v3/*/run/trace.rank-00000.json",
    "no site matches RANGE, an input cannot be read, or the walk is partial (malformed events, a partial parse)"};

int tracebook_walk_main(int argc, char **argv) {
    walk_args args = {0};
    tb_positional pos;
    tb_error err;
    int prc = tb_command_parse(&walk_command, &args, argc, argv, &pos, &err);
    if (prc == 1) return 0;
    if (prc != 0) {
        tb_strlist_free(&args.traces);
        return tb_command_usage_error(&walk_command, &err);
    }
    const char *index = args.index, *entry = args.from, *range = pos.items[0];
    // the --trace values, then the words after RANGE
    int ntraces = args.traces.n + pos.n - 1;
    char **traces = tb_xcalloc((size_t)ntraces + 1, sizeof *traces, "trace paths");
    for (int i = 0; i < args.traces.n; i++) traces[i] = (char *)args.traces.items[i];
    for (int i = 1; i < pos.n; i++) traces[args.traces.n + i - 1] = (char *)pos.items[i];
    tb_strlist_free(&args.traces);
    tb_positional_free(&pos);
    tb_map m;
    if (tb_map_open(&m, index, entry, traces, ntraces, &err) != 0) {
        fprintf(stderr, "tracebook walk: %s\n", err.msg);
        free(traces);
        return 1;
    }
    tb_graph *g = m.g;
    // the sites: those whose pattern matches RANGE, or whose pattern is RANGE
    int pattern = 0, *sites = tb_xmalloc((size_t)(g->nranges + 1) * sizeof *sites, "site models"), nsites = 0;
    for (int r = 0; r < g->nranges; r++) {
        const tb_grange *rs = &g->ranges[r];
        if (rs->is_pop || !rs->name || !tb_graph_in_scope(g, m.entry.target, rs->fn)) continue;
        if (!strcmp(rs->name, range) && strchr(range, '%')) pattern = 1;
        if (tb_range_pattern_match(rs->name, range) || !strcmp(rs->name, range)) sites[nsites++] = r;
    }
    int name = -1;
    for (int n = 0; n < m.rt.nnames && !pattern; n++)
        if (!strcmp(m.rt.names[n], range)) name = n;
    if (nsites == 0) {
        fprintf(stderr, "tracebook walk: no range site in %s matches '%s' (in the scope of %s)\n", index, range,
                m.entry.label);
        free(sites);
        tb_map_close(&m);
        free(traces);
        return 1;
    }
    if (args.json) {
        json_t *doc = walk_json(&m, range, pattern, sites, nsites, name);
        json_dumpf(doc, stdout, JSON_INDENT(1));
        fputc('\n', stdout);
        int partial_json = strcmp(json_string_value(json_object_get(doc, "status")), "complete") != 0;
        json_decref(doc);
        tb_rt_print_drops(&m.rt, stderr, "tracebook walk");
        free(sites);
        tb_map_close(&m);
        free(traces);
        return partial_json ? 1 : 0;
    }
    char loc[600];
    tb_graph_fn_loc(g, m.entry.fn, loc, sizeof loc);
    printf("# Walkthrough: `%s`\n\n", range);
    printf("From `%s` of `%s` (%s) down to the range `%s` and the collective%s below it.\n\n", g->fns[m.entry.fn].name,
           m.entry.label, loc, range, nsites == 1 ? "" : "s");
    printf("- index: `%s`\n- traces:", index);
    for (int i = 0; i < ntraces; i++) printf(" `%s`", traces[i]);
    printf("%s\n\n", ntraces ? "" : " none (static walk only)");
    walk_summary(&m, sites[0], name, range);
    for (int i = 0; i < nsites; i++) {
        const tb_grange *rs = &g->ranges[sites[i]];
        if (nsites > 1) printf("## Site %d of %d: ", i + 1, nsites);
        else printf("## Site: ");
        printf("`\"%s\"` in `%s` (%s:%d)\n\n", rs->name, g->fns[rs->fn].name, tb_graph_file(g, rs->file),
               rs->pos.line);
        walk_chain_to_site(&m, sites[i]);
        walk_collectives(&m, sites[i], name);
    }
    if (ntraces) walk_runtime(&m, range, pattern);
    int *reached = tb_xmalloc(((size_t)g->nfns + 1) * sizeof *reached, "reached functions"), nreached = 0;
    for (int f = 0; f < g->nfns; f++)
        if (m.dist[f] >= 0) reached[nreached++] = f;
    int partial_parses = tb_graph_note_partial(g, reached, nreached, stdout, "\n**Partial parse:** ");
    free(reached);
    int partial = m.rt.ndropped > 0 || partial_parses > 0;
    if (m.rt.ndropped)
        printf("\n**Partial:** %d malformed range event%s of the traces could not be read and are not counted above "
               "(named on stderr).\n",
               m.rt.ndropped, m.rt.ndropped == 1 ? "" : "s");
    tb_rt_print_drops(&m.rt, stderr, "tracebook walk");
    free(sites);
    tb_map_close(&m);
    free(traces);
    return partial ? 1 : 0;
}
