// query.c — `tracebook def | callers | callees | chain`: questions about the call graph in
// the source index (index_db.h), answered from the graph loaded by graph.c.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph.h"
#include "index_db.h"
#include "trace_cli.h"

typedef struct qargs {
    const char *index;
    const char *symbol;  // positional
    const char *from, *to;
    int max, max_depth;
} qargs;

static int usage(const char *cmd, const char *text, int rc) {
    fprintf(rc ? stderr : stdout, "usage: tracebook %s %s\n", cmd, text);
    return rc;
}

// Parses the shared flags; returns -1 ok, else the exit status to return.
static int parse(int argc, char **argv, qargs *a, const char *help, int want_symbol) {
    const char *cmd = argv[0];
    memset(a, 0, sizeof *a);
    a->index = TB_INDEX_DEFAULT_PATH;
    a->max = 10;
    a->max_depth = 32;
    for (int i = 1; i < argc; i++) {
        const char *s = argv[i];
        if (!strcmp(s, "--help") || !strcmp(s, "-h")) return usage(cmd, help, 0);
        const char **str = !strcmp(s, "--index") ? &a->index
                           : !strcmp(s, "--from") ? &a->from
                           : !strcmp(s, "--to")   ? &a->to
                                                  : NULL;
        int *num = !strcmp(s, "--max") ? &a->max : !strcmp(s, "--max-depth") ? &a->max_depth : NULL;
        if (str || num) {
            if (i + 1 >= argc) {
                fprintf(stderr, "tracebook %s: %s needs a value\n", cmd, s);
                return 2;
            }
            if (str) *str = argv[++i];
            else {
                char *end;
                long v = strtol(argv[++i], &end, 10);
                if (*end || v < 1 || v > 100000) {
                    fprintf(stderr, "tracebook %s: %s: '%s' is not a count from 1 to 100000\n", cmd, s, argv[i]);
                    return 2;
                }
                *num = (int)v;
            }
        } else if (s[0] == '-' && s[1]) {
            fprintf(stderr, "tracebook %s: unknown flag '%s'\n", cmd, s);
            return usage(cmd, help, 2);
        } else if (want_symbol && !a->symbol) {
            a->symbol = s;
        } else {
            fprintf(stderr, "tracebook %s: unexpected argument '%s'\n", cmd, s);
            return usage(cmd, help, 2);
        }
    }
    if (want_symbol && !a->symbol) return usage(cmd, help, 2);
    return -1;
}

static tb_graph *open_graph(const char *cmd, const char *path) {
    tb_graph *g;
    tb_error err;
    if (tb_graph_open(&g, path, &err) != 0) {
        fprintf(stderr, "tracebook %s: %s\n", cmd, err.msg);
        return NULL;
    }
    return g;
}

// The functions SYMBOL names: definitions, or declarations when nothing defines it.
static int resolve(const tb_graph *g, const char *cmd, const char *symbol, int **fns) {
    int n = tb_graph_lookup(g, symbol, fns), k = 0;
    for (int i = 0; i < n; i++)
        if (g->fns[(*fns)[i]].is_definition) (*fns)[k++] = (*fns)[i];
    if (k == 0) k = n;
    if (k == 0) fprintf(stderr, "tracebook %s: no function '%s' in %s\n", cmd, symbol, g->index_path);
    return k;
}

static const char *linkage(const tb_gfn *f) { return f->is_static ? "static" : "external"; }

// --- def -------------------------------------------------------------------------------

int tracebook_def_main(int argc, char **argv) {
    qargs a;
    int rc = parse(argc, argv, &a, "SYMBOL [--index FILE]   (SYMBOL: NAME or FILE:NAME)", 1);
    if (rc >= 0) return rc;
    tb_graph *g = open_graph(argv[0], a.index);
    if (!g) return 1;
    int *fns, n = resolve(g, argv[0], a.symbol, &fns);
    for (int i = 0; i < n; i++) {
        const tb_gfn *f = &g->fns[fns[i]];
        char loc[600];
        tb_graph_fn_loc(g, fns[i], loc, sizeof loc);
        printf("%s  %s  %s %s  %s", f->name, loc, linkage(f), f->is_definition ? "definition" : "declaration",
               f->usr);
        int t = tb_graph_target_of_fn(g, fns[i]);
        if (t >= 0) printf("  [%s]", g->targets[t].name);
        printf("\n");
    }
    free(fns);
    tb_graph_free(g);
    return n > 0 ? 0 : 1;
}

// --- callers / callees -----------------------------------------------------------------

static void print_call_targets(const tb_graph *g, const tb_gcall *c) {
    for (int i = 0; i < c->ntargets; i++) {
        char loc[600];
        tb_graph_fn_loc(g, c->targets[i], loc, sizeof loc);
        printf("%s%s (%s)", i ? ", " : " → ", g->fns[c->targets[i]].name, loc);
    }
}

// callers of Record.field: the calls through that field.
static int field_callers(const tb_graph *g, const char *key) {
    int found = -1;
    for (int i = 0; i < g->nfields; i++)
        if (!strcmp(g->fields[i].key, key)) found = i;
    int sites = 0;
    for (int c = 0; c < g->ncalls; c++) sites += g->calls[c].field && !strcmp(g->calls[c].field, key);
    if (found < 0 && sites == 0) return 0;
    printf("calls through %s", key);
    for (int i = 0; found >= 0 && i < g->fields[found].nfns; i++) {
        char loc[600];
        tb_graph_fn_loc(g, g->fields[found].fns[i], loc, sizeof loc);
        printf("%s%s (%s)", i ? ", " : " (assigned: ", g->fns[g->fields[found].fns[i]].name, loc);
    }
    printf("%s:\n", found >= 0 ? ")" : "");
    for (int c = 0; c < g->ncalls; c++) {
        const tb_gcall *call = &g->calls[c];
        if (!call->field || strcmp(call->field, key)) continue;
        printf("  %-36s %s:%d:%d\n", g->fns[call->caller].name, tb_graph_file(g, call->file), call->pos.line,
               call->pos.col);
    }
    if (!sites) printf("  (no call sites in the index)\n");
    return 1;
}

int tracebook_callers_main(int argc, char **argv) {
    qargs a;
    int rc = parse(argc, argv, &a, "SYMBOL [--index FILE]   (SYMBOL: NAME, FILE:NAME or Record.field)", 1);
    if (rc >= 0) return rc;
    tb_graph *g = open_graph(argv[0], a.index);
    if (!g) return 1;
    if (strchr(a.symbol, '.') && !strchr(a.symbol, ':') && !strchr(a.symbol, '/') && field_callers(g, a.symbol)) {
        tb_graph_free(g);
        return 0;
    }
    int *fns, n = resolve(g, argv[0], a.symbol, &fns);
    for (int i = 0; i < n; i++) {
        int f = fns[i];
        char loc[600];
        tb_graph_fn_loc(g, f, loc, sizeof loc);
        printf("callers of %s (%s, %s):\n", g->fns[f].name, loc, linkage(&g->fns[f]));
        int found = 0;
        for (int c = 0; c < g->ncalls; c++) {
            const tb_gcall *call = &g->calls[c];
            int hit = 0;
            for (int k = 0; k < call->ntargets && !hit; k++) hit = call->targets[k] == f;
            if (!hit) continue;
            found++;
            printf("  %-36s %s:%d:%d", g->fns[call->caller].name, tb_graph_file(g, call->file), call->pos.line,
                   call->pos.col);
            if (call->field) printf("  via %s", call->field);
            if (call->passed_to) printf("  (passed to %s as a callback)", call->passed_to);
            else if (call->callback) printf("  (taken as a callback)");
            if (call->in_macro) printf("  [%s]", call->in_macro);
            printf("\n");
        }
        if (!found) printf("  (no call sites in the index)\n");
    }
    free(fns);
    tb_graph_free(g);
    return n > 0 ? 0 : 1;
}

int tracebook_callees_main(int argc, char **argv) {
    qargs a;
    int rc = parse(argc, argv, &a, "SYMBOL [--index FILE]", 1);
    if (rc >= 0) return rc;
    tb_graph *g = open_graph(argv[0], a.index);
    if (!g) return 1;
    int *fns, n = resolve(g, argv[0], a.symbol, &fns);
    for (int i = 0; i < n; i++) {
        const tb_gfn *f = &g->fns[fns[i]];
        char loc[600];
        tb_graph_fn_loc(g, fns[i], loc, sizeof loc);
        printf("calls made by %s (%s, %s):\n", f->name, loc, linkage(f));
        for (int c = f->calls_begin; c < f->calls_end; c++) {
            const tb_gcall *call = &g->calls[c];
            printf("  %-36s %s:%d:%d", call->callee_name, tb_graph_file(g, call->file), call->pos.line,
                   call->pos.col);
            if (call->field) printf("  via %s", call->field);
            if (call->passed_to) printf("  (passed to %s as a callback)", call->passed_to);
            else if (call->callback) printf("  (taken as a callback)");
            if (call->in_macro) printf("  [%s]", call->in_macro);
            print_call_targets(g, call);
            printf("\n");
        }
        if (f->calls_begin == f->calls_end) printf("  (%s)\n", f->is_definition ? "no calls" : "no body in the index");
    }
    free(fns);
    tb_graph_free(g);
    return n > 0 ? 0 : 1;
}

// --- chain -----------------------------------------------------------------------------

static void print_chain(const tb_graph *g, const tb_chain *c) {
    for (int i = 0; i < c->n; i++) {
        char hop[1200];
        tb_graph_hop(g, c->fns[i], i + 1 < c->n ? c->calls[i] : -1, hop, sizeof hop);
        printf("  %s%s\n", i ? "→ " : "  ", hop);
    }
}

int tracebook_chain_main(int argc, char **argv) {
    qargs a;
    const char *help = "--from ENTRY --to SYMBOL [--max N] [--max-depth D] [--index FILE]\n"
                       "  ENTRY: a function (main), FILE:FUNCTION (engine/pretrain_gpt.c:main) or a build target\n"
                       "  (pretrain_gpt: its main); chains are shortest first, at most N (10), D calls deep (32)";
    int rc = parse(argc, argv, &a, help, 0);
    if (rc >= 0) return rc;
    if (!a.from || !a.to) return usage(argv[0], help, 2);
    tb_graph *g = open_graph(argv[0], a.index);
    if (!g) return 1;
    tb_error err;
    tb_entry *entries = NULL;
    int *to = NULL, nto = resolve(g, argv[0], a.to, &to);
    int nentries = nto > 0 ? tb_graph_entries(g, a.from, &entries, &err) : 0;
    if (nto > 0 && nentries == 0) fprintf(stderr, "tracebook %s: %s\n", argv[0], err.msg);
    int total = 0;
    for (int e = 0; e < nentries; e++) {
        const tb_entry *en = &entries[e];
        char loc[600];
        tb_graph_fn_loc(g, en->fn, loc, sizeof loc);
        tb_chain *chains;
        int truncated;
        int n = tb_graph_chains(g, en->target, en->fn, to, nto, a.max, a.max_depth, &chains, &truncated);
        printf("[%s] chains from %s (%s) to %s: %d%s\n", en->label, g->fns[en->fn].name, loc, a.to, n,
               n == a.max ? " (the shortest; --max for more)" : "");
        for (int i = 0; i < n; i++) {
            printf("#%d (%d call%s)\n", i + 1, chains[i].n - 1, chains[i].n == 2 ? "" : "s");
            print_chain(g, &chains[i]);
        }
        if (n == 0) printf("  (none within %d calls)\n", a.max_depth);
        if (truncated) printf("  (search stopped at its budget; more chains may exist)\n");
        total += n;
        tb_chains_free(chains, n);
    }
    free(entries);
    free(to);
    tb_graph_free(g);
    return total > 0 ? 0 : 1;
}
