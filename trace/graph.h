// graph.h — the source index loaded into memory as a call graph, and the searches the
// queries share: symbol and entry-point lookup, call resolution (direct calls by USR,
// calls through function-pointer fields by their assigned functions), per-binary scopes,
// shortest chains.
//
// A *scope* is a build target: a traversal in the scope of `pretrain_gpt` only follows
// functions whose definitions are in translation units that link into pretrain_gpt (or in
// headers, or in files no target claims). Scope -1 means the whole index. This is how two
// `main`s, or a function defined in two binaries, stay apart.
//
// Edges beyond the index's rows:
//   - a direct call of an external function reaches every external definition of that name
//     (the indexer gives a second binary's copy its own USR), narrowed to the copies linked
//     with the caller, then to the scope's own;
//   - callbacks: each callbacks row (a function passed as an argument,
//     parallel_state_run_ranks(&world, rank_main, runs), or stored, returned ...) becomes a
//     call of it from the function that names it, at the mention (callback 1, passed_to the
//     callee it was passed to when it is an argument): whoever passes a callback causes it to
//     run, while the calls made later through the parameter lead nowhere themselves.
#ifndef TB_TRACE_GRAPH_H
#define TB_TRACE_GRAPH_H

#include <sqlite3.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "core/error.h"
#include "source.h"
#include "strmap.h"

typedef struct tb_gfile {
    char *path;          // absolute, as indexed
    const char *shown;   // relative to the project root when under it
    int is_tu;
    int ntargets;        // targets claiming this file
    int partial;         // a unit whose parse had errors (status partial or failed)
    int errors;          // a unit's error diagnostics
    char *first_error;   // a unit's first diagnostic line, or NULL
} tb_gfile;

typedef struct tb_gfn {
    int64_t id;
    char *usr, *name;
    int file;            // index in files, -1 unknown
    tb_pos pos;
    tb_pos end;          // the body's closing brace from the index; line 0: not known
    int is_static, is_definition;
    int unit;            // the unit whose parse gave its row (files index), -1 unknown
    int calls_begin, calls_end;    // its call sites: calls[calls_begin .. calls_end), in source order
    int ranges_begin, ranges_end;  // its range sites: ranges[...], in source order
    int libs_begin, libs_end;      // without a definition: the libraries defining it, libs[...]
} tb_gfn;

// A function the index has no definition of, and the library of a binary's link that
// defines it (index_db.h, libraries).
typedef struct tb_glib {
    int fn;
    char *target, *library;
} tb_glib;

typedef struct tb_gcall {
    int64_t id;          // calls.id; 0 for a callback edge
    int caller;          // function index
    char *callee_usr;    // NULL for a call through a field
    char *callee_name;
    char *field;         // "record.field" or NULL
    char *in_macro;
    char *resolution;    // calls.resolution: NULL (the compiler's), "name", "candidates" (index_db.h)
    char *candidates;    // "candidates": the USRs, one per line
    int file;
    tb_pos pos;
    int *targets;        // candidate callees (function indices), the whole index
    int ntargets;
    int field_index;     // in fields, -1
    int callback;        // a callback edge (a callbacks row): the function is named here, not called
    char *passed_to;     // a callback edge: the callee was passed as an argument to this function (or NULL)
} tb_gcall;

typedef struct tb_grange {
    int fn;
    int is_pop;
    char *name;          // literal or printf pattern; NULL for pops (and non-literal names)
    int file;
    tb_pos pos;
} tb_grange;

typedef struct tb_gcoll {
    int fn;
    int call;            // its call site (index in calls, from call_id), -1 when not found
    char *callee_name;
    int file;
    tb_pos pos;
} tb_gcoll;

typedef struct tb_gfield {
    char *key;           // "record.field"
    int *fns;            // assigned functions
    int nfns;
} tb_gfield;

typedef struct tb_gtarget {
    char *name, *type;
    int is_executable;        // type says so (or no type given)
    unsigned char *has_file;  // per file index
} tb_gtarget;

typedef struct tb_graph {
    char *index_path;
    char *root;          // project root for shown paths ("" when none)
    tb_gfile *files;
    int nfiles;
    tb_gfn *fns;
    int nfns;
    tb_gcall *calls;
    int ncalls;
    tb_grange *ranges;
    int nranges;
    tb_gcoll *colls;
    int ncolls;
    tb_gfield *fields;
    int nfields;
    tb_gtarget *targets;
    int ntargets;
    tb_glib *libs;           // grouped by function, in function order
    int nlibs;
    tb_strmap fn_by_usr;     // usr -> function index
    int *by_name;            // function indices sorted by name (index order within a name)
    tb_strmap name_first;    // name -> its first position in by_name
    tb_strmap field_by_key;  // "record.field" -> index in fields
    // per scope (target index + 1), built on demand: successors of each function
    struct tb_adj *adj;
    tb_sources sources;
} tb_graph;

// One edge of the scoped call graph: caller → callee through a call site (first site per pair).
typedef struct tb_edge {
    int to;
    int call;
} tb_edge;

typedef struct tb_adj {
    int built;
    int *begin;          // per function: edges[begin[f] .. begin[f+1])
    tb_edge *edges;
} tb_adj;

// Opens the index (tb_index_open) and loads it.
int tb_graph_open(tb_graph **g, const char *path, tb_error *err);
void tb_graph_free(tb_graph *g);

// "engine/comm/comm.c:65" style locations (shown path).
const char *tb_graph_file(const tb_graph *g, int file);
// The source of a file (cached); NULL when unreadable.
const tb_source *tb_graph_source(tb_graph *g, int file);

// Functions named `name` (all rows), or for "FILE:NAME" those whose file ends with FILE.
// Fills out (malloc'd) and returns the count.
int tb_graph_lookup(const tb_graph *g, const char *symbol, int **out);
int tb_graph_fn_by_usr(const tb_graph *g, const char *usr);  // -1: none
// Whether a call's callee was found by name (calls.resolution "name": a dependent call in a
// template with one candidate), and whether it has several candidates instead.
static inline int tb_graph_call_by_name(const tb_gcall *c) { return c->resolution && !strcmp(c->resolution, "name"); }
static inline int tb_graph_call_ambiguous(const tb_gcall *c) {
    return c->resolution && !strcmp(c->resolution, "candidates");
}
// Where the functions named `name` start in by_name (they follow it), -1: none.
int tb_graph_name_first(const tb_graph *g, const char *name);
int tb_graph_target_by_name(const tb_graph *g, const char *name);

// Scope: which functions a traversal in target t may enter (t = -1: all).
int tb_graph_in_scope(const tb_graph *g, int t, int fn);
// The executable target a function's file links into, when exactly one does; else -1.
int tb_graph_target_of_fn(const tb_graph *g, int fn);

// Callees of a call in scope t: candidates in scope; for a direct call with several
// definitions, those defined in the scope's own translation units first.
int tb_graph_call_targets(const tb_graph *g, int call, int t, int *out, int cap);

// The scoped call graph (built once per scope).
const tb_adj *tb_graph_adj(tb_graph *g, int t);

// An entry point: a resolved function with the scope it runs in and a label.
typedef struct tb_entry {
    int fn;
    int target;          // scope, -1 = whole index
    int nbinaries;       // the executables this entry stands for (same search in each), 0 for none
    char label[160];     // the binaries' names ("a, b and 3 more"), or the file, for printing
} tb_entry;

// ENTRY is FILE:FUNCTION, a target name (its main), or a function name (each definition,
// each in the scope of its binary). A definition linked into several executables is one
// entry per group of them in which the searches from it see the same functions (the same
// units among those it reaches): a chain never combines units of two binaries, and one
// library function used by many binaries is not searched many times. Returns the count
// (malloc'd array), 0 with err set when none.
int tb_graph_entries(tb_graph *g, const char *entry, tb_entry **out, tb_error *err);

// Shortest paths from `from` over the scoped graph: dist[f] (-1 unreachable) and the edge
// that reached f (pred_fn, pred_call). Arrays of nfns ints, malloc'd by the caller.
void tb_graph_bfs(tb_graph *g, int t, const int *from, int nfrom, int *dist, int *pred_fn, int *pred_call);

// A chain: the functions and, for each but the last, the call site to the next one.
typedef struct tb_chain {
    int n;
    int *fns;
    int *calls;          // n - 1 entries
} tb_chain;

// Up to max distinct chains (by function sequence) from entry to any of `to`, shortest
// first, each at most max_depth calls long. Returns the count; *truncated set when the
// search stopped on its budget.
int tb_graph_chains(tb_graph *g, int t, int entry, const int *to, int nto, int max, int max_depth,
                    tb_chain **out, int *truncated);
// The same through one of `via`: the shortest chains entry → via[i] joined with the
// shortest via[i] → `to`, no function twice, shortest first.
int tb_graph_chains_via(tb_graph *g, int t, int entry, const int *via, int nvia, const int *to, int nto, int max,
                        int max_depth, tb_chain **out, int *truncated);
void tb_chains_free(tb_chain *c, int n);

// "name (file:line[, via record.field])" for hop i of a chain, into buf; the last hop, a
// library's function: "name (declared at header:line; defined in LIBRARY)", LIBRARY on the
// link of target t.
void tb_graph_hop(const tb_graph *g, int t, int fn, int call, char *buf, size_t len);
// "file:line" of a function.
void tb_graph_fn_loc(const tb_graph *g, int fn, char *buf, size_t len);
// The unit whose parse gave fn when that parse was partial (errors: what fn calls may be
// missing), else -1. tb_graph_hop marks such a hop "[partial parse]".
int tb_graph_fn_partial(const tb_graph *g, int fn);
// For an answer that showed functions fns[0..n): one line on out per distinct partial unit
// among them ("partial parse: UNIT: N errors (first: ...): what its functions call may be
// missing"), each line after prefix. Returns how many units.
int tb_graph_note_partial(const tb_graph *g, const int *fns, int n, FILE *out, const char *prefix);
// The library defining a function the index has no definition of, on target t's link (t -1
// or not linking it: the first known); NULL when unknown.
const char *tb_graph_library(const tb_graph *g, int fn, int t);

#endif
