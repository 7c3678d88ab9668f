// map.c — the static model behind `tracebook map` and `tracebook walk` (map.h): where each
// push site's range spans (pushes and pops paired with the braces in view), what its span
// reaches, the collectives below it, and the chain from the entry point; tb_map_open ties
// it to the runtime side (map_traces.h) and matches names to sites (map_match.h).
#include "map.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "core/xalloc.h"
#include "map_traces.h"
#include "vec.h"

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

static tb_region *add_region(tb_vec *regions, int fn, tb_pos from, tb_pos to) {
    tb_region *rg = tb_vec_push(regions);
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
    tb_vec regions;
    tb_vec_init(&regions, sizeof(tb_region), "range span");
    skip_else_branches(m, add_region(&regions, rs->fn, rs->pos, sm->end));
    for (int c = 0; sm->escapes && c < g->ncalls; c++) {
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
        add_region(&regions, caller, g->calls[c].pos, to);
    }
    sm->nregions = (int)regions.len;
    sm->regions = tb_vec_take(&regions);
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
    tb_vec colls;       // of tb_coll_chain: the site's collectives found so far
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

static void push_coll(walk_state *w, int *fns, int *calls, int n, int end_call, int coll_call, const char *via) {
    *(tb_coll_chain *)tb_vec_push(&w->colls) = (tb_coll_chain){{n, fns, calls}, end_call, coll_call, via};
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
        push_coll(w, fns, calls, n + npre, c, coll_call >= 0 ? coll_call : c, NULL);
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
        push_coll(w, fns, calls, len, end_call, coll_call, call->field);
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
                // path_to leaves room for the entry point
                pc[n - 1] = c;
                pf[n] = tmp[t];
                push_coll(w, pf, pc, n + 1, -1, c, NULL);
            }
        }
        if (k == 0) {  // not defined in the index: the call ends the chain
            int *pf, *pc, n;
            path_to(w, f, &pf, &pc, &n);
            push_coll(w, pf, pc, n, c, c, NULL);
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
    walk_state w = {tb_xmalloc((size_t)(nf + 1) * sizeof(int), "span predecessors"),
                    tb_xmalloc((size_t)(nf + 1) * sizeof(int), "span predecessor calls"),
                    tb_xcalloc((size_t)nf + 1, 1, "span visits"), tb_xcalloc((size_t)g->ncalls + 1, 1, "span calls"), {0}};
    tb_vec_init(&w.colls, sizeof(tb_coll_chain), "collective chains");
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
    sm->ncolls = (int)w.colls.len;
    sm->colls = tb_vec_take(&w.colls);
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
const char *tb_map_event_op(const tb_map *m, int ev) {
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

// A library's collective named in its own style performs the op in snake case: ncclAllReduce,
// MPI_Allreduce → all_reduce (letters compared without case or underscores, after the
// library's prefix).
static int library_call_does(const char *callee, const char *op) {
    if (!strncmp(callee, "nccl", 4) && isupper((unsigned char)callee[4])) callee += 4;
    else if (!strncmp(callee, "MPI_", 4)) callee += 4;
    else return 0;
    for (;; callee++, op++) {
        while (*op == '_') op++;
        while (*callee == '_') callee++;
        if (!*op || !*callee) return !*op && !*callee;
        if (tolower((unsigned char)*op) != tolower((unsigned char)*callee)) return 0;
    }
}

// Does collective chain c perform op (all_reduce ...)? By its backend field or its call's name.
int tb_map_chain_does(const tb_map *m, const tb_coll_chain *c, const char *op) {
    if (c->via && ends_with_word(c->via, op)) return 1;
    if (c->coll_call >= 0 && ends_with_word(m->g->calls[c->coll_call].callee_name, op)) return 1;
    if (c->coll_call >= 0 && library_call_does(m->g->calls[c->coll_call].callee_name, op)) return 1;
    return 0;
}

// Does the chain end in the backend the traces say they ran on (distributedInfo.backend:
// "local" → local_all_reduce in local_backend.c)? Unknown backend: yes.
int tb_map_chain_on_backend(const tb_map *m, const tb_coll_chain *c) {
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
    if (!tb_map_chain_on_backend(m, c)) return 0;
    for (int e = 0; e < rt->nev; e++) {
        const char *eop = tb_map_event_op(m, e);
        if (!eop || !tb_map_chain_does(m, c, eop)) continue;
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
    return !op || tb_map_chain_does(m, c, op);
}

// --- opening ---------------------------------------------------------------------------

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
            m->name_op[m->rt.ev[e].name] = tb_map_event_op(m, e);
        }
    free(op_done);
    tb_match_sites(g, m->entry.target, &m->rt, &m->name_sites, &m->name_nsites);
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
