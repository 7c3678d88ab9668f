// query.c — `tracebook def | callers | callees | chain`: questions about the call graph in
// the source index (index_db.h), answered from the graph loaded by graph.c.
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/options.h"
#include "core/xalloc.h"
#include "graph.h"
#include "index_db.h"
#include "trace_cli.h"
#include "vec.h"

typedef struct qargs {
    const char *index;
    const char *from, *to, *via;
    int top, max_depth;
    int json;  // --json: one JSON document (docs/RUNBOOKS.md, "JSON output")
} qargs;

#define INDEX_OPTION TB_OPTION("--index", qargs, index, TB_OPT_STRING, TB_INDEX_DEFAULT_PATH, "FILE", "the source index")
#define JSON_OPTION TB_OPTION("--json", qargs, json, TB_OPT_BOOL, "false", NULL, "the answer as one JSON document")

static const tb_option symbol_options[] = {INDEX_OPTION, JSON_OPTION, TB_OPTIONS_END};

static const tb_option chain_options[] = {
    TB_OPTION("--from", qargs, from, TB_OPT_STRING, NULL, "ENTRY",
              "a function (main), FILE:FUNCTION (engine/pretrain_gpt.c:main) or a build target (its main)"),
    TB_OPTION("--to", qargs, to, TB_OPT_STRING, NULL, "SYMBOL",
              "the function the chains end in (a library's too: ncclAllReduce, MPI_Allreduce)"),
    TB_OPTION("--via", qargs, via, TB_OPT_STRING, NULL, "SYMBOL",
              "only chains through this function (row_parallel_linear_forward)"),
    TB_OPTION("--top", qargs, top, TB_OPT_INT, "10", "N", "at most N chains, the shortest (1 to 100000)"),
    TB_OPTION("--max-depth", qargs, max_depth, TB_OPT_INT, "32", "D", "at most D calls deep (1 to 100000)"),
    INDEX_OPTION,
    JSON_OPTION,
    TB_OPTIONS_END};

static const tb_command def_command = {
    "tracebook def", "SYMBOL",
    "Where a function is declared and defined, from the source index (tracebook index writes it): file,\n"
    "line, column and linkage of each. SYMBOL is NAME, or FILE:NAME for a static function of one file.",
    symbol_options, 1, 1, "tracebook def row_parallel_linear_forward", "no function of that name in the index"};
static const tb_command callers_command = {
    "tracebook callers", "SYMBOL",
    "The call sites of a function: direct calls, calls through a function-pointer field (SYMBOL as\n"
    "Record.field lists the calls through that field) and places that pass the function as a callback.\n"
    "SYMBOL is NAME, FILE:NAME or Record.field.",
    symbol_options, 1, 1, "tracebook callers row_parallel_linear_forward\ntracebook callers tb_activation_module.forward",
    "no function of that name in the index"};
static const tb_command callees_command = {
    "tracebook callees", "SYMBOL",
    "The calls a function makes, each with its line and how it was resolved (by the compiler, by name in\n"
    "a template, or the candidates of an overload set). SYMBOL is NAME or FILE:NAME.",
    symbol_options, 1, 1, "tracebook callees mlp_forward", "no function of that name in the index"};
static const tb_command chain_command = {
    "tracebook chain", NULL,
    "Call chains from an entry point down to a function (a library's too), shortest first, through\n"
    "function-pointer fields and callbacks; each hop with its file and line. --via keeps the chains\n"
    "through one function.",
    chain_options, 0, 0,
    "tracebook chain --from pretrain_gpt --to ncclAllReduce\n"
    "tracebook chain --from pretrain_gpt --to ncclAllReduce --via row_parallel_linear_forward",
    "no chain, or a function that is not in the index"};

// Parses argv by cmd's table into a; *symbol the positional (when cmd takes one). Returns
// -1 to go on, else the exit status to return (0 after --help, 2 on a usage error).
static int parse(const tb_command *cmd, int argc, char **argv, qargs *a, const char **symbol) {
    memset(a, 0, sizeof *a);
    tb_positional pos;
    tb_error err;
    int rc = tb_command_parse(cmd, a, argc, argv, &pos, &err);
    if (rc == 1) return 0;
    if (rc != 0) return tb_command_usage_error(cmd, &err);
    if (symbol) *symbol = pos.n ? pos.items[0] : NULL;
    tb_positional_free(&pos);
    const tb_option *counts[] = {tb_options_find_flag(cmd->options, "--top", 5),
                                 tb_options_find_flag(cmd->options, "--max-depth", 11)};
    for (int i = 0; i < 2; i++) {
        if (!counts[i]) continue;
        int v = *(const int *)((const char *)a + counts[i]->offset);
        if (v < 1 || v > 100000) {
            tb_fail(&err, "%s: flag %s: '%d' is not a count from 1 to 100000", cmd->name, counts[i]->flag, v);
            return tb_command_usage_error(cmd, &err);
        }
    }
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

// --- JSON --------------------------------------------------------------------------------
// With --json every command builds its document beside (not instead of) the graph walk the
// text prints from, and prints it at the end; the partial-parse notes become its
// "partial_parse" lines.

static json_t *str_or_null(const char *s) { return s ? json_string(s) : json_null(); }

// {"name", "location", "linkage", "definition"} of function fn.
static json_t *fn_json(const tb_graph *g, int fn) {
    char loc[600];
    tb_graph_fn_loc(g, fn, loc, sizeof loc);
    const tb_gfn *f = &g->fns[fn];
    return json_pack("{s:s, s:s, s:s, s:b}", "name", f->name, "location", loc, "linkage", linkage(f), "definition",
                     f->is_definition);
}

// A call site: {"caller" | "callee", "file", "line", "col", "via", "passed_to", "callback", "in_macro",
// "resolution": null (the compiler's), "name" or "candidates" (index_db.h); "candidates": the
// candidates' USRs (null unless several).
static json_t *call_json(const tb_graph *g, const tb_gcall *call, const char *who_key, const char *who) {
    json_t *candidates = json_null();
    if (call->candidates) {
        candidates = json_array();
        for (const char *p = call->candidates; *p;) {
            size_t len = strcspn(p, "\n");
            json_array_append_new(candidates, json_stringn(p, len));
            p += len + (p[len] == '\n');
        }
    }
    return json_pack("{s:s, s:s, s:i, s:i, s:o, s:o, s:b, s:o, s:o, s:o}", who_key, who, "file",
                     tb_graph_file(g, call->file), "line", call->pos.line, "col", call->pos.col, "via",
                     str_or_null(call->field), "passed_to", str_or_null(call->passed_to), "callback", call->callback,
                     "in_macro", str_or_null(call->in_macro), "resolution", str_or_null(call->resolution),
                     "candidates", candidates);
}

// The partial-parse lines for the functions shown, into doc's "partial_parse"; prints doc.
static void print_doc(const tb_graph *g, json_t *doc, const int *fns, int n) {
    char *text = NULL;
    size_t len = 0;
    FILE *mem = open_memstream(&text, &len);
    if (mem) {
        tb_graph_note_partial(g, fns, n, mem, "");
        fclose(mem);
    }
    json_t *lines = json_array();
    for (const char *p = text; p && *p;) {
        size_t k = strcspn(p, "\n");
        if (k) json_array_append_new(lines, json_stringn(p, k));
        p += k + (p[k] == '\n');
    }
    free(text);
    json_object_set_new(doc, "partial_parse", lines);
    json_dumpf(doc, stdout, JSON_INDENT(1));
    printf("\n");
    json_decref(doc);
}

// --- def -------------------------------------------------------------------------------

// For a function without a definition in the index: each library that defines it, with the
// binaries that link it there.
static void print_libraries(const tb_graph *g, int fn) {
    const tb_gfn *f = &g->fns[fn];
    if (f->is_definition) return;
    for (int i = f->libs_begin; i < f->libs_end; i++) {
        int first = 1;
        for (int k = f->libs_begin; k < i && first; k++) first = strcmp(g->libs[k].library, g->libs[i].library) != 0;
        if (!first) continue;
        printf("  defined in %s, linked by", g->libs[i].library);
        int n = 0;
        for (int k = i; k < f->libs_end; k++)
            if (!strcmp(g->libs[k].library, g->libs[i].library)) printf("%s %s", n++ ? "," : "", g->libs[k].target);
        printf("\n");
    }
    if (f->libs_begin == f->libs_end)
        printf("  no definition in the index%s\n",
               g->ntargets ? " or in the libraries its binaries link" : " (no targets: the libraries are not known)");
}

int tracebook_def_main(int argc, char **argv) {
    qargs a;
    const char *symbol;
    int rc = parse(&def_command, argc, argv, &a, &symbol);
    if (rc >= 0) return rc;
    tb_graph *g = open_graph(argv[0], a.index);
    if (!g) return 1;
    int *fns, n = resolve(g, argv[0], symbol, &fns);
    if (a.json && n > 0) {
        json_t *list = json_array();
        for (int i = 0; i < n; i++) {
            const tb_gfn *f = &g->fns[fns[i]];
            json_t *o = fn_json(g, fns[i]), *libs = json_array();
            int t = tb_graph_target_of_fn(g, fns[i]);
            json_object_set_new(o, "usr", json_string(f->usr));
            json_object_set_new(o, "binary", t >= 0 ? json_string(g->targets[t].name) : json_null());
            for (int k = f->is_definition ? f->libs_end : f->libs_begin; k < f->libs_end; k++)
                json_array_append_new(libs, json_pack("{s:s, s:s}", "library", g->libs[k].library, "linked_by",
                                                      g->libs[k].target));
            json_object_set_new(o, "libraries", libs);
            json_array_append_new(list, o);
        }
        print_doc(g, json_pack("{s:s, s:o}", "symbol", symbol, "functions", list), fns, n);
    }
    for (int i = 0; i < n && !a.json; i++) {
        const tb_gfn *f = &g->fns[fns[i]];
        char loc[600];
        tb_graph_fn_loc(g, fns[i], loc, sizeof loc);
        printf("%s  %s  %s %s  %s", f->name, loc, linkage(f), f->is_definition ? "definition" : "declaration",
               f->usr);
        int t = tb_graph_target_of_fn(g, fns[i]);
        if (t >= 0) printf("  [%s]", g->targets[t].name);
        printf("\n");
        print_libraries(g, fns[i]);
    }
    if (!a.json) tb_graph_note_partial(g, fns, n, stdout, "");
    free(fns);
    tb_graph_free(g);
    return n > 0 ? 0 : 1;
}

// --- callers / callees -----------------------------------------------------------------

// How a call in a template was linked (index_db.h, calls.resolution): by its one candidate's
// name, or not at all among several candidates, which are listed.
static void print_resolution(const tb_graph *g, const tb_gcall *c) {
    if (tb_graph_call_by_name(c)) printf("  [resolved by name]");
    if (!tb_graph_call_ambiguous(c) || !c->candidates) return;
    int n = 1;
    for (const char *p = c->candidates; *p; p++) n += *p == '\n';
    printf("  [unresolved: %d candidates", n);
    for (const char *p = c->candidates; *p;) {
        size_t len = strcspn(p, "\n");
        char usr[1024];
        snprintf(usr, sizeof usr, "%.*s", (int)(len < sizeof usr ? len : sizeof usr - 1), p);
        int fn = tb_graph_fn_by_usr(g, usr);
        char loc[600] = "?";
        if (fn >= 0) tb_graph_fn_loc(g, fn, loc, sizeof loc);
        printf("%s %s (%s)", p == c->candidates ? ":" : ",", fn >= 0 ? g->fns[fn].name : usr, loc);
        p += len + (p[len] == '\n');
    }
    printf("]");
}

static void print_call_targets(const tb_graph *g, const tb_gcall *c) {
    for (int i = 0; i < c->ntargets; i++) {
        char loc[600];
        tb_graph_fn_loc(g, c->targets[i], loc, sizeof loc);
        printf("%s%s (%s)", i ? ", " : " → ", g->fns[c->targets[i]].name, loc);
    }
}

// callers of Record.field: the calls through that field.
static int field_callers(const tb_graph *g, const char *key, int as_json) {
    int found = -1;
    for (int i = 0; i < g->nfields; i++)
        if (!strcmp(g->fields[i].key, key)) found = i;
    int sites = 0;
    for (int c = 0; c < g->ncalls; c++) sites += g->calls[c].field && !strcmp(g->calls[c].field, key);
    if (found < 0 && sites == 0) return 0;
    if (as_json) {
        json_t *assigned = json_array(), *callers = json_array();
        for (int i = 0; found >= 0 && i < g->fields[found].nfns; i++)
            json_array_append_new(assigned, fn_json(g, g->fields[found].fns[i]));
        for (int c = 0; c < g->ncalls; c++)
            if (g->calls[c].field && !strcmp(g->calls[c].field, key))
                json_array_append_new(callers, call_json(g, &g->calls[c], "caller", g->fns[g->calls[c].caller].name));
        print_doc(g, json_pack("{s:s, s:s, s:o, s:o}", "symbol", key, "field", key, "assigned", assigned, "callers",
                               callers),
                  NULL, 0);
        return 1;
    }
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
    const char *symbol;
    int rc = parse(&callers_command, argc, argv, &a, &symbol);
    if (rc >= 0) return rc;
    tb_graph *g = open_graph(argv[0], a.index);
    if (!g) return 1;
    if (strchr(symbol, '.') && !strchr(symbol, ':') && !strchr(symbol, '/') && field_callers(g, symbol, a.json)) {
        tb_graph_free(g);
        return 0;
    }
    int *fns, n = resolve(g, argv[0], symbol, &fns);
    json_t *list = a.json ? json_array() : NULL;
    for (int i = 0; i < n; i++) {
        int f = fns[i];
        if (list) {
            json_t *o = fn_json(g, f), *callers = json_array();
            for (int c = 0; c < g->ncalls; c++) {
                int hit = 0;
                for (int k = 0; k < g->calls[c].ntargets && !hit; k++) hit = g->calls[c].targets[k] == f;
                if (hit) json_array_append_new(callers, call_json(g, &g->calls[c], "caller", g->fns[g->calls[c].caller].name));
            }
            json_object_set_new(o, "callers", callers);
            json_array_append_new(list, o);
            continue;
        }
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
            print_resolution(g, call);
            printf("\n");
        }
        if (!found) printf("  (no call sites in the index)\n");
    }
    // the callers shown come from their units' parses: a partial one may miss call sites
    int *shown = tb_xmalloc(((size_t)g->ncalls + 1) * sizeof *shown, "callers shown"), nshown = 0;
    for (int c = 0; c < g->ncalls; c++) {
        int hit = 0;
        for (int k = 0; k < g->calls[c].ntargets && !hit; k++)
            for (int i = 0; i < n && !hit; i++) hit = g->calls[c].targets[k] == fns[i];
        if (hit) shown[nshown++] = g->calls[c].caller;
    }
    if (list && n > 0) print_doc(g, json_pack("{s:s, s:o}", "symbol", symbol, "functions", list), shown, nshown);
    else if (list) json_decref(list);
    else tb_graph_note_partial(g, shown, nshown, stdout, "");
    free(shown);
    free(fns);
    tb_graph_free(g);
    return n > 0 ? 0 : 1;
}

int tracebook_callees_main(int argc, char **argv) {
    qargs a;
    const char *symbol;
    int rc = parse(&callees_command, argc, argv, &a, &symbol);
    if (rc >= 0) return rc;
    tb_graph *g = open_graph(argv[0], a.index);
    if (!g) return 1;
    int *fns, n = resolve(g, argv[0], symbol, &fns);
    json_t *list = a.json ? json_array() : NULL;
    for (int i = 0; i < n; i++) {
        const tb_gfn *f = &g->fns[fns[i]];
        if (list) {
            json_t *o = fn_json(g, fns[i]), *calls = json_array();
            for (int c = f->calls_begin; c < f->calls_end; c++) {
                const tb_gcall *call = &g->calls[c];
                json_t *cj = call_json(g, call, "callee", call->callee_name), *targets = json_array();
                for (int k = 0; k < call->ntargets; k++) json_array_append_new(targets, fn_json(g, call->targets[k]));
                json_object_set_new(cj, "targets", targets);
                json_array_append_new(calls, cj);
            }
            json_object_set_new(o, "calls", calls);
            json_array_append_new(list, o);
            continue;
        }
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
            print_resolution(g, call);
            print_call_targets(g, call);
            printf("\n");
        }
        if (f->calls_begin == f->calls_end) printf("  (%s)\n", f->is_definition ? "no calls" : "no body in the index");
    }
    if (list && n > 0) print_doc(g, json_pack("{s:s, s:o}", "symbol", symbol, "functions", list), fns, n);
    else if (list) json_decref(list);
    else tb_graph_note_partial(g, fns, n, stdout, "");
    free(fns);
    tb_graph_free(g);
    return n > 0 ? 0 : 1;
}

// --- chain -----------------------------------------------------------------------------

static void print_chain(const tb_graph *g, int t, const tb_chain *c) {
    for (int i = 0; i < c->n; i++) {
        char hop[1200];
        tb_graph_hop(g, t, c->fns[i], i + 1 < c->n ? c->calls[i] : -1, hop, sizeof hop);
        printf("  %s%s\n", i ? "→ " : "  ", hop);
    }
}

int tracebook_chain_main(int argc, char **argv) {
    qargs a;
    int rc = parse(&chain_command, argc, argv, &a, NULL);
    if (rc >= 0) return rc;
    if (!a.from || !a.to) {
        tb_error err;
        tb_fail(&err, "%s: needs --from ENTRY and --to SYMBOL", chain_command.name);
        return tb_command_usage_error(&chain_command, &err);
    }
    tb_graph *g = open_graph(argv[0], a.index);
    if (!g) return 1;
    tb_error err;
    tb_entry *entries = NULL;
    int *to = NULL, nto = resolve(g, argv[0], a.to, &to);
    int *via = NULL, nvia = nto > 0 && a.via ? resolve(g, argv[0], a.via, &via) : 0;
    int nentries = nto > 0 && (!a.via || nvia > 0) ? tb_graph_entries(g, a.from, &entries, &err) : 0;
    if (nto > 0 && nentries == 0) fprintf(stderr, "tracebook %s: %s\n", argv[0], err.msg);
    int total = 0;
    json_t *jentries = a.json ? json_array() : NULL;
    tb_vec shown;  // the functions of the chains printed
    tb_vec_init(&shown, sizeof(int), "chain functions");
    for (int e = 0; e < nentries; e++) {
        const tb_entry *en = &entries[e];
        char loc[600];
        tb_graph_fn_loc(g, en->fn, loc, sizeof loc);
        tb_chain *chains;
        int truncated;
        int n = a.via ? tb_graph_chains_via(g, en->target, en->fn, via, nvia, to, nto, a.top, a.max_depth, &chains,
                                            &truncated)
                      : tb_graph_chains(g, en->target, en->fn, to, nto, a.top, a.max_depth, &chains, &truncated);
        if (jentries) {
            json_t *jchains = json_array();
            for (int i = 0; i < n; i++) {
                json_t *hops = json_array();
                for (int k = 0; k < chains[i].n; k++) {
                    char hop[1200];
                    tb_graph_hop(g, en->target, chains[i].fns[k], k + 1 < chains[i].n ? chains[i].calls[k] : -1, hop,
                                 sizeof hop);
                    json_array_append_new(hops, json_string(hop));
                }
                json_array_append_new(jchains, json_pack("{s:i, s:o}", "calls", chains[i].n - 1, "hops", hops));
            }
            json_array_append_new(jentries, json_pack("{s:s, s:s, s:s, s:o, s:b}", "binary", en->label, "entry",
                                                      g->fns[en->fn].name, "location", loc, "chains", jchains,
                                                      "truncated", truncated));
        } else {
            printf("[%s] chains from %s (%s) %s%s%sto %s: %d%s\n", en->label, g->fns[en->fn].name, loc,
                   a.via ? "via " : "", a.via ? a.via : "", a.via ? " " : "", a.to, n,
                   n == a.top ? " (the shortest; --top for more)" : "");
            for (int i = 0; i < n; i++) {
                printf("#%d (%d call%s)\n", i + 1, chains[i].n - 1, chains[i].n == 2 ? "" : "s");
                print_chain(g, en->target, &chains[i]);
            }
            if (n == 0) printf("  (none within %d calls)\n", a.max_depth);
            if (truncated) printf("  (search stopped at its budget; more chains may exist)\n");
        }
        total += n;
        for (int i = 0; i < n; i++)
            for (int k = 0; k < chains[i].n; k++) *(int *)tb_vec_push(&shown) = chains[i].fns[k];
        tb_chains_free(chains, n);
    }
    if (jentries && nentries > 0)
        print_doc(g, json_pack("{s:s, s:s, s:o, s:o}", "from", a.from, "to", a.to, "via", str_or_null(a.via), "entries",
                               jentries),
                  shown.items, (int)shown.len);
    else if (jentries) json_decref(jentries);
    else tb_graph_note_partial(g, shown.items, (int)shown.len, stdout, "");
    tb_vec_free(&shown);
    free(entries);
    free(to);
    free(via);
    tb_graph_free(g);
    return total > 0 ? 0 : 1;
}
