// collective_calls.h — a run's communicator calls matched across their group's members, from
// its per-rank traces alone (trace.rank-NNNNN.json), in the compact form `tracebook steps`,
// `comm` and `diff --phases` read (step_report.h), and each as the JSON tb_collective_calls
// gives.
//
// A call is matched across its group's members by its ordinal: its place among the member's
// collectives on that group (not the sequence number, which counts a member's P2P calls on the
// group too). For one call: last = the member that entered latest; a member's wait = last's
// enter − its enter, its transfer = its exit − last's enter (0 when it left before: a
// non-blocking send). P2P calls (send, recv) are left out: their sequence numbers are per caller.
//
// A trace is read one event at a time (core/trace_events.h) and kept compact: per range its
// times, depth, track and name, and of a communicator call's args only what is matched and
// reported (op, group, group id, seq, bytes); never the args objects themselves. A range is a
// call when its args.op is a string and args.group_id and args.seq integers (args.group and
// args.bytes may be missing: null in the JSON).
#ifndef TB_EXPERIMENTS_COLLECTIVE_CALLS_H
#define TB_EXPERIMENTS_COLLECTIVE_CALLS_H

#include <jansson.h>
#include <stddef.h>

#include "core/error.h"
#include "core/run_dir.h"

// 1 + the highest rank with a file of that kind in the run directory (0: none), or -1 with err
// set when the directory cannot be read.
int tb_run_rank_files(const char *dir, tb_rank_file kind, tb_error *err);

// One member's part in a matched call.
typedef struct tb_call_member {
    int rank;
    int comm_thread;  // made on the rank's communication thread (overlapped with its compute)
    double enter_ms, wait_ms, transfer_ms;
    int has_bytes;  // its args.bytes: 0 none, 1 an integer (bytes), 2 another value (bytes_other)
    long long bytes;
    json_t *bytes_other;  // (held by tb_calls)
    size_t event;         // its range's place in its rank's trace (last_in, last_after)
} tb_call_member;

// What `steps` and `comm` call the group of a range that names none (the engine names every one).
#define TB_CALL_NO_GROUP "(no group)"

// One call matched across its group's members.
typedef struct tb_matched_call {
    const char *group, *op;  // the last member's (held by tb_calls); group NULL: the range named none
    int group_id;
    long long ordinal;       // 0-based: its place among each member's collectives on the group
    long long seq, step;     // the last member's sequence number and step (-1: none)
    double enter_spread_ms;  // the last member's enter − the first's
    int last;                // members[last] entered last
    size_t first_member, nmembers;  // members[first_member .. + nmembers), by rank
} tb_matched_call;

typedef struct tb_calls {
    tb_matched_call *calls;  // largest enter spread first
    size_t n;
    tb_call_member *members;
    size_t nmembers;
    int nranks;              // 1 + the highest rank with a trace
    void *traces;            // the compact traces (what last_in / last_after are read from)
} tb_calls;

// Every matched call of the run directory's traces. 0, or -1 with err naming the directory or
// the trace file (byte, line and column of what is not a trace). Free with tb_calls_free.
int tb_calls_load(const char *run_dir, tb_calls *out, tb_error *err);
void tb_calls_free(tb_calls *c);

// Call i as step_report.h's tb_collective_calls describes it (a new reference).
json_t *tb_calls_json(const tb_calls *c, size_t i);

#endif
