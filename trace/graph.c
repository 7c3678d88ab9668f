// graph.c — see graph.h: lookups, scopes, the scoped call graph, entry points and the
// searches over it. Loading the index into a tb_graph is graph_load.c.
#include "graph.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/xalloc.h"
#include "vec.h"

// --- lookups ---------------------------------------------------------------------------

int tb_graph_fn_by_usr(const tb_graph *g, const char *usr) {
    const int *i = tb_strmap_get(&g->fn_by_usr, usr);
    return i ? *i : -1;
}

int tb_graph_name_first(const tb_graph *g, const char *name) {
    const int *i = tb_strmap_get(&g->name_first, name);
    return i ? *i : -1;
}

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
    for (int i = tb_graph_name_first(g, name); i >= 0 && i < g->nfns && !strcmp(g->fns[g->by_name[i]].name, name); i++) {
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

int tb_graph_target_of_fn(const tb_graph *g, int fn) {
    int file = g->fns[fn].file, found = -1;
    if (file < 0) return -1;
    for (int i = 0; i < g->ntargets; i++) {
        if (!g->targets[i].is_executable || !g->targets[i].has_file[file]) continue;
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
    tb_vec edges;
    tb_vec_init(&edges, sizeof(tb_edge), "call edges");
    int *tmp = tb_xmalloc((size_t)(g->nfns + 1) * sizeof *tmp, "call targets");
    for (int f = 0; f < g->nfns; f++) {
        a->begin[f] = (int)edges.len;
        if (!tb_graph_in_scope(g, t, f)) continue;
        for (int c = g->fns[f].calls_begin; c < g->fns[f].calls_end; c++) {
            int k = tb_graph_call_targets(g, c, t, tmp, g->nfns);
            for (int j = 0; j < k; j++) {
                int dup = 0;
                for (size_t e = (size_t)a->begin[f]; e < edges.len && !dup; e++)
                    dup = TB_VEC_AT(&edges, tb_edge, e).to == tmp[j];
                if (!dup) *(tb_edge *)tb_vec_push(&edges) = (tb_edge){tmp[j], c};
            }
        }
    }
    a->begin[g->nfns] = (int)edges.len;
    a->edges = edges.len ? tb_vec_take(&edges) : tb_xmalloc(sizeof *a->edges, "call edges");
    free(tmp);
    a->built = 1;
    return a;
}

// --- entry points ----------------------------------------------------------------------

static void entry_label(const tb_graph *g, tb_entry *e) {
    if (e->target < 0) snprintf(e->label, sizeof e->label, "%s", tb_graph_file(g, g->fns[e->fn].file));
}

// The executables linking fn's file, grouped by what a search from fn sees in each: the
// units (files claimed by targets) of the functions reachable from it in the whole index
// that the target has. Equal views give equal scoped searches.
static void add_entries(tb_graph *g, tb_vec *out, int fn) {
    int file = g->fns[fn].file;
    tb_vec exes;
    tb_vec_init(&exes, sizeof(int), "entry binaries");
    for (int t = 0; file >= 0 && t < g->ntargets; t++)
        if (g->targets[t].is_executable && g->targets[t].has_file[file]) *(int *)tb_vec_push(&exes) = t;
    if (exes.len <= 1) {
        tb_entry *e = tb_vec_push(out);
        *e = (tb_entry){.fn = fn, .target = exes.len ? TB_VEC_AT(&exes, int, 0) : -1, .nbinaries = (int)exes.len};
        if (exes.len) snprintf(e->label, sizeof e->label, "%s", g->targets[e->target].name);
        tb_vec_free(&exes);
        return;
    }
    int *dist = tb_xmalloc((size_t)(g->nfns + 1) * sizeof *dist, "entry distances");
    tb_graph_bfs(g, -1, &fn, 1, dist, NULL, NULL);
    unsigned char *unit = tb_xcalloc((size_t)g->nfiles + 1, 1, "reached units");
    tb_vec units;
    tb_vec_init(&units, sizeof(int), "reached units");
    for (int f = 0; f < g->nfns; f++) {
        int uf = g->fns[f].file;
        if (dist[f] < 0 || uf < 0 || !g->files[uf].is_tu || !g->files[uf].ntargets || unit[uf]) continue;
        unit[uf] = 1;
        *(int *)tb_vec_push(&units) = uf;
    }
    int n = (int)exes.len, *group = tb_xmalloc((size_t)n * sizeof *group, "entry groups");
    for (int i = 0; i < n; i++) {
        group[i] = i;
        for (int j = 0; j < i && group[i] == i; j++) {
            if (group[j] != j) continue;
            int same = 1;
            const tb_gtarget *a = &g->targets[TB_VEC_AT(&exes, int, i)], *b = &g->targets[TB_VEC_AT(&exes, int, j)];
            for (size_t k = 0; k < units.len && same; k++) {
                int uf = TB_VEC_AT(&units, int, k);
                same = a->has_file[uf] == b->has_file[uf];
            }
            if (same) group[i] = j;
        }
    }
    for (int i = 0; i < n; i++) {
        if (group[i] != i) continue;
        tb_entry *e = tb_vec_push(out);
        *e = (tb_entry){.fn = fn, .target = TB_VEC_AT(&exes, int, i)};
        size_t used = 0;
        int shown = 0;
        for (int j = i; j < n; j++) e->nbinaries += group[j] == i;
        for (int j = i; j < n; j++) {
            if (group[j] != i) continue;
            const char *name = g->targets[TB_VEC_AT(&exes, int, j)].name;
            int left = e->nbinaries - shown;
            // room for this name and, if more follow, " and N more"
            if (shown && used + strlen(name) + 2 + (left > 1 ? 16 : 0) >= sizeof e->label) {
                snprintf(e->label + used, sizeof e->label - used, " and %d more", left);
                break;
            }
            used += (size_t)snprintf(e->label + used, sizeof e->label - used, "%s%s", shown ? ", " : "", name);
            if (used >= sizeof e->label) used = sizeof e->label - 1;
            shown++;
        }
    }
    free(group);
    tb_vec_free(&units);
    free(unit);
    free(dist);
    tb_vec_free(&exes);
}

int tb_graph_entries(tb_graph *g, const char *entry, tb_entry **out, tb_error *err) {
    *out = NULL;
    tb_vec found;
    tb_vec_init(&found, sizeof(tb_entry), "entry points");
    int *fns = NULL, k;
    int t = strchr(entry, ':') ? -1 : tb_graph_target_by_name(g, entry);
    if (t >= 0) {  // a build target: its main
        k = tb_graph_lookup(g, "main", &fns);
        for (int i = 0; i < k; i++) {
            int file = g->fns[fns[i]].file;
            if (g->fns[fns[i]].is_definition && file >= 0 && g->targets[t].has_file[file]) {
                tb_entry *e = tb_vec_push(&found);
                *e = (tb_entry){.fn = fns[i], .target = t, .nbinaries = 1};
                snprintf(e->label, sizeof e->label, "%s", g->targets[t].name);
            }
        }
        free(fns);
        if (found.len == 0) {
            tb_vec_free(&found);
            return tb_fail(err, "entry '%s': target found but no main defined in its sources", entry), 0;
        }
    } else {
        k = tb_graph_lookup(g, entry, &fns);
        for (int i = 0; i < k; i++)
            if (g->fns[fns[i]].is_definition) add_entries(g, &found, fns[i]);
        free(fns);
        if (found.len == 0 && !strchr(entry, ':') && !strchr(entry, '/')) {
            // no target table: a main in ENTRY.c (pretrain_gpt → engine/pretrain_gpt.c:main)
            char file[512];
            snprintf(file, sizeof file, "%s.c:main", entry);
            k = tb_graph_lookup(g, file, &fns);
            for (int i = 0; i < k; i++)
                if (g->fns[fns[i]].is_definition) add_entries(g, &found, fns[i]);
            free(fns);
        }
        if (found.len == 0) {
            tb_vec_free(&found);
            return tb_fail(err, "entry '%s': no target, function or FILE:FUNCTION of that name is defined in %s",
                           entry, g->index_path),
                   0;
        }
    }
    int n = (int)found.len;
    *out = tb_vec_take(&found);
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
        tb_vec *bucket = tb_xcalloc((size_t)nb, sizeof *bucket, "path buckets");  // of int: paths by length
        size_t *bh = tb_xcalloc((size_t)nb, sizeof *bh, "path buckets");          // next one to take
        for (int b = 0; b < nb; b++) tb_vec_init(&bucket[b], sizeof(int), "path bucket");
        tb_vec paths, chains;
        tb_vec_init(&paths, sizeof(pnode), "partial paths");
        tb_vec_init(&chains, sizeof(tb_chain), "chains");
        size_t budget = 2000000;
        *(pnode *)tb_vec_push(&paths) = (pnode){entry, -1, -1, 0};
        *(int *)tb_vec_push(&bucket[h[entry]]) = 0;
        for (int b = 0; b < nb && nout < max; b++) {
            while (bh[b] < bucket[b].len && nout < max) {
                int p = TB_VEC_AT(&bucket[b], int, bh[b]++);
                pnode cur = TB_VEC_AT(&paths, pnode, p);
                if (is_to[cur.fn]) {
                    tb_chain *c = tb_vec_push(&chains);
                    nout++;
                    c->n = cur.g + 1;
                    c->fns = tb_xmalloc((size_t)c->n * sizeof *c->fns, "chain functions");
                    c->calls = tb_xmalloc((size_t)c->n * sizeof *c->calls, "chain calls");
                    int i = c->n - 1;
                    for (int q = p; q >= 0; q = TB_VEC_AT(&paths, pnode, q).parent, i--) {
                        c->fns[i] = TB_VEC_AT(&paths, pnode, q).fn;
                        if (TB_VEC_AT(&paths, pnode, q).parent >= 0) c->calls[i - 1] = TB_VEC_AT(&paths, pnode, q).call;
                    }
                    continue;
                }
                for (int e = a->begin[cur.fn]; e < a->begin[cur.fn + 1]; e++) {
                    int v = a->edges[e].to;
                    if (h[v] < 0 || cur.g + 1 + h[v] > max_depth) continue;
                    int on_path = 0;
                    for (int q = p; q >= 0 && !on_path; q = TB_VEC_AT(&paths, pnode, q).parent)
                        on_path = TB_VEC_AT(&paths, pnode, q).fn == v;
                    if (on_path) continue;
                    if (paths.len == budget) {
                        *truncated = 1;
                        continue;
                    }
                    *(pnode *)tb_vec_push(&paths) = (pnode){v, p, a->edges[e].call, cur.g + 1};
                    *(int *)tb_vec_push(&bucket[cur.g + 1 + h[v]]) = (int)paths.len - 1;
                }
            }
        }
        for (int b = 0; b < nb; b++) tb_vec_free(&bucket[b]);
        free(bucket);
        free(bh);
        tb_vec_free(&paths);
        *out = tb_vec_take(&chains);
    }
done:
    free(h);
    free(is_to);
    return nout;
}

static int same_chain(const tb_chain *a, const tb_chain *b) {
    if (a->n != b->n || memcmp(a->fns, b->fns, (size_t)a->n * sizeof *a->fns)) return 0;
    return a->n < 2 || !memcmp(a->calls, b->calls, (size_t)(a->n - 1) * sizeof *a->calls);
}

int tb_graph_chains_via(tb_graph *g, int t, int entry, const int *via, int nvia, const int *to, int nto, int max,
                        int max_depth, tb_chain **out, int *truncated) {
    tb_vec all;
    tb_vec_init(&all, sizeof(tb_chain), "chains");
    *truncated = 0;
    for (int v = 0; v < nvia; v++) {
        tb_chain *pre = NULL, *suf = NULL;
        int tr = 0, ns = 0;
        int np = tb_graph_chains(g, t, entry, &via[v], 1, max, max_depth, &pre, &tr);
        *truncated |= tr;
        if (np) ns = tb_graph_chains(g, t, via[v], to, nto, max, max_depth, &suf, &tr);
        *truncated |= np && tr;
        for (int i = 0; i < np; i++)
            for (int j = 0; j < ns; j++) {
                const tb_chain *a = &pre[i], *b = &suf[j];
                int n = a->n + b->n - 1, repeats = 0;
                if (n - 1 > max_depth) continue;
                for (int x = 0; x + 1 < a->n && !repeats; x++)
                    for (int y = 0; y < b->n && !repeats; y++) repeats = a->fns[x] == b->fns[y];
                if (repeats) continue;
                tb_chain c = {n, tb_xmalloc((size_t)n * sizeof(int), "chain functions"),
                              tb_xmalloc((size_t)n * sizeof(int), "chain calls")};
                memcpy(c.fns, a->fns, (size_t)a->n * sizeof(int));
                memcpy(c.fns + a->n, b->fns + 1, (size_t)(b->n - 1) * sizeof(int));
                if (a->n > 1) memcpy(c.calls, a->calls, (size_t)(a->n - 1) * sizeof(int));
                if (b->n > 1) memcpy(c.calls + a->n - 1, b->calls, (size_t)(b->n - 1) * sizeof(int));
                int known = 0;
                for (size_t k = 0; k < all.len && !known; k++) known = same_chain(&TB_VEC_AT(&all, tb_chain, k), &c);
                if (known) {
                    free(c.fns);
                    free(c.calls);
                } else {
                    *(tb_chain *)tb_vec_push(&all) = c;
                }
            }
        tb_chains_free(pre, np);
        tb_chains_free(suf, ns);
    }
    tb_chain *c = all.items;
    int n = (int)all.len;
    for (int i = 1; i < n; i++)  // shortest first, stable
        for (int j = i; j > 0 && c[j - 1].n > c[j].n; j--) {
            tb_chain tmp = c[j - 1];
            c[j - 1] = c[j];
            c[j] = tmp;
        }
    if (n > max) {
        for (int i = max; i < n; i++) {
            free(c[i].fns);
            free(c[i].calls);
        }
        n = max;
    }
    *out = tb_vec_take(&all);
    return n;
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

const char *tb_graph_library(const tb_graph *g, int fn, int t) {
    const tb_gfn *f = &g->fns[fn];
    for (int i = f->libs_begin; t >= 0 && i < f->libs_end; i++)
        if (!strcmp(g->libs[i].target, g->targets[t].name)) return g->libs[i].library;
    return f->libs_begin < f->libs_end ? g->libs[f->libs_begin].library : NULL;
}

int tb_graph_fn_partial(const tb_graph *g, int fn) {
    int u = g->fns[fn].unit;
    return u >= 0 && g->files[u].partial ? u : -1;
}

int tb_graph_note_partial(const tb_graph *g, const int *fns, int n, FILE *out, const char *prefix) {
    int count = 0;
    for (int i = 0; i < n; i++) {
        int u = tb_graph_fn_partial(g, fns[i]), seen = 0;
        for (int j = 0; j < i && !seen && u >= 0; j++) seen = tb_graph_fn_partial(g, fns[j]) == u;
        if (u < 0 || seen) continue;
        fprintf(out, "%spartial parse: %s: %d error%s (first: %s): what its functions call may be missing\n", prefix,
                tb_graph_file(g, u), g->files[u].errors, g->files[u].errors == 1 ? "" : "s",
                g->files[u].first_error ? g->files[u].first_error : "?");
        count++;
    }
    return count;
}

static void hop_text(const tb_graph *g, int t, int fn, int call, char *buf, size_t len);

void tb_graph_hop(const tb_graph *g, int t, int fn, int call, char *buf, size_t len) {
    hop_text(g, t, fn, call, buf, len);
    size_t n = strlen(buf);
    // a call in a template the compiler left to its instantiation, linked by its one candidate
    if (call >= 0 && tb_graph_call_by_name(&g->calls[call]) && n + 1 < len)
        n += (size_t)snprintf(buf + n, len - n, " [resolved by name]");
    if (tb_graph_fn_partial(g, fn) >= 0 && n + 1 < len) snprintf(buf + n, len - n, " [partial parse]");
}

static void hop_text(const tb_graph *g, int t, int fn, int call, char *buf, size_t len) {
    if (call < 0) {
        char loc[600];
        tb_graph_fn_loc(g, fn, loc, sizeof loc);
        const char *lib = g->fns[fn].is_definition ? NULL : tb_graph_library(g, fn, t);
        if (g->fns[fn].is_definition)
            snprintf(buf, len, "%s (%s)", g->fns[fn].name, loc);
        else  // a library's function: the chain's last hop
            snprintf(buf, len, "%s (declared at %s%s%s)", g->fns[fn].name, loc, lib ? "; defined in " : "",
                     lib ? lib : "");
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
