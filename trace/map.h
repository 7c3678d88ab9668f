// map.h — runtime ranges ↔ source: the model behind `tracebook map` and `tracebook walk`
// (map.c). The traces are read by map_traces.h, names matched to sites by map_match.h, the
// report built by map_report.h (its nesting part by map_nesting.h), printed by map_cli.c.
//
// Runtime side: range events from the engine's per-rank Chrome trace JSON (complete "X"
// events and "B"/"E" pairs; rank = pid) or from an Nsight Systems SQLite export (NVTX_EVENTS rows of
// eventType 59, push/pop ranges, names in text or StringIds via textId; one rank per
// thread, numbered in globalTid order), with their nesting per rank and thread (the
// innermost event whose [ts, ts+dur] holds the child's).
//
// Static side (graph.h), in the scope of the entry point's binary:
//   site    each runtime name's push site(s): a site whose printf pattern matches the whole
//           name (%d → an integer, %s → any text, %% → %).
//   span    the calls between the push and the pop that closes it. Pushes and pops of a
//           function pair in source order with the braces in view: a pop in a block nested
//           deeper than its push (`if (...) { POP(); return; }`) does not end the range; a
//           push in an `if` branch does not span that `if`'s `else` branches; a push never
//           popped in its function (comm.c's begin()) goes on in each caller up to the
//           statement of the call that pops it (end()). Without the source file: source
//           order alone.
//   chain   the shortest call chain from the entry point to the site's function.
//   collectives  from the span's calls down the call graph to each collective site (the
//           communicator's entry points, nccl* data calls), then below it to the backend's
//           implementation through the function-pointer field (local_all_reduce) or to the
//           nccl* call; each with how often the traces show that op inside the range (on the
//           traces' backend, distributedInfo.backend).
//   nesting a runtime parent → child is explained when the child's push is inside the
//           parent's span, or the child's site function is reachable from the span's calls.
#ifndef TB_TRACE_MAP_H
#define TB_TRACE_MAP_H

#include <jansson.h>
#include <stdint.h>

#include "core/error.h"
#include "graph.h"
#include "map_events.h"
#include "map_match.h"

// --- the static model ------------------------------------------------------------------

typedef struct tb_region {
    int fn;
    tb_pos from, to;     // calls strictly after `from`, up to and including `to`,
    int nskip;           // except those in the `else` branches of the ifs the push is in
    tb_pos skip_from[8], skip_to[8];
} tb_region;

// Is p inside the region?
int tb_region_has(const tb_region *rg, tb_pos p);

// A collective below a range: a path of calls from the span down to the backend
// function (fns[n-1]) or to a nccl* call (end_call).
typedef struct tb_coll_chain {
    tb_chain path;       // fns[0] is a span function; calls[i] leads from fns[i] to fns[i+1]
    int end_call;        // a call after the last function (nccl*), -1
    int coll_call;       // the collective call on the path (communicator entry or nccl*), -1
    const char *via;     // field of the backend dispatch on the path, or NULL
} tb_coll_chain;

typedef struct tb_site_model {
    int done;
    tb_pos end;          // where the range closes in its function (TB_POS_END: function end)
    int escapes;         // never popped in its function: continues in the callers
    tb_region *regions;
    int nregions;
    unsigned char *reached;  // functions reachable from the calls in the span
    tb_coll_chain *colls;
    int ncolls;
} tb_site_model;

typedef struct tb_map {
    tb_graph *g;
    tb_entry entry;
    int *dist, *pred_fn, *pred_call;  // shortest chains from the entry
    tb_site_model *sites;             // per g->ranges index (push sites)
    unsigned char *pops_caller;       // per function: pops a range its caller opened
    unsigned char *coll_call;         // per call: a collective site
    unsigned char *comm_entry;        // per function: called at a collective site
    tb_rt rt;
    const char **name_op;             // per runtime name: its communicator op, NULL
    int **name_sites;                 // per runtime name: matching push sites
    int *name_nsites;
} tb_map;

// Opens the index, resolves the entry (ENTRY as in `tracebook chain`; several → error),
// loads the traces and matches names. 0 or -1 with err.
int tb_map_open(tb_map *m, const char *index, const char *entry, char **traces, int ntraces, tb_error *err);
void tb_map_close(tb_map *m);

// The span, reach and collectives of push site r (computed on first use).
const tb_site_model *tb_map_site(tb_map *m, int r);
// The chain from the entry to function fn, 0 when unreachable.
int tb_map_entry_chain(const tb_map *m, int fn, tb_chain *out);
// Collective chains of site r relevant to runtime name `name` (a comm range's op filters).
int tb_map_coll_relevant(tb_map *m, int r, int name, const tb_coll_chain *c);
// How many communicator ranges doing chain c's op (on the traces' backend) the traces show
// inside events named `name` (or being them); *op set to that op.
int tb_map_coll_observed(const tb_map *m, int name, const tb_coll_chain *c, const char **op);
// The op of a communicator range from its events' args, or NULL.
const char *tb_map_name_op(const tb_map *m, int name);

// The op of runtime event ev (a communicator range): args.op, else the OP of a
// "comm.GROUP.OP" name; NULL for other ranges.
const char *tb_map_event_op(const tb_map *m, int ev);
// Does collective chain c perform op (all_reduce ...)? By its backend field or its call's name.
int tb_map_chain_does(const tb_map *m, const tb_coll_chain *c, const char *op);
// Does the chain end in the backend the traces ran on (distributedInfo.backend)? Unknown: 1.
int tb_map_chain_on_backend(const tb_map *m, const tb_coll_chain *c);

#endif
