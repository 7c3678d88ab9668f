// step_report.h — a run's steps and collectives across its ranks, from the per-rank files
// alone (metrics.rank-NNNNN.jsonl, trace.rank-NNNNN.json), so threads and processes read alike:
//
//   tracebook steps RUN [--step N] [--json] [--artifacts DIR]
//       per step and rank: data, forward, backward, optimizer, P2P wait, idle (the metrics'
//       stage timeline), and each group's collectives split into waiting for peers and
//       transfer; the slowest rank of each step marked.
//   tracebook comm RUN [--top N] [--json] [--artifacts DIR]
//       every collective call matched across its group's members by (group id, its place
//       among the member's collectives on the group — not the sequence number, which counts a
//       member's P2P calls on the group too): its enter spread (how long after the first member the last one entered)
//       and the last member, with the range it was in and the one it had just left — a
//       collective whose transfer is fast can still wait long for a late peer.
//
// For one call of a group's members: last = the latest enter; a member's wait = last − its
// enter, its transfer = its exit − last (0 when it left before: a non-blocking send).
#ifndef TB_EXPERIMENTS_STEP_REPORT_H
#define TB_EXPERIMENTS_STEP_REPORT_H

#include <jansson.h>
#include <stdio.h>

#include "core/error.h"
#include "core/run_dir.h"
#include "inspect/collective_calls.h"  // (tb_run_rank_files)

// Every matched collective call of a run directory: a JSON array of {"group", "group_id",
// "call" (1-based: its place among each member's collectives on the group), "seq" (the last
// member's sequence number), "op", "bytes" (the last member's), "step", "enter_spread_ms", "last_rank", "last_in",
// "last_after", "members": [{"rank", "enter_ms", "wait_ms", "transfer_ms", "bytes" (its own:
// an all-to-all's differ per member)}]}, largest spread first.
// P2P calls are left out (their sequence numbers are per caller, not per pair).
json_t *tb_collective_calls(const char *run_dir, tb_error *err);
// Every rank's metrics lines (metrics.rank-NNNNN.jsonl of ranks 0 .. nranks-1), as JSON
// objects: rows[rank] an array in line order (NULL past a failing rank). -1 with err naming
// the file and line.
int tb_rank_metrics(const char *dir, int nranks, json_t **rows, tb_error *err);

// `tracebook diff A B --phases`: per phase (the steps' data, forward, backward, optimizer, P2P
// wait, idle on the slowest rank of each step, and each group's collective wait and transfer)
// the median and range over the steps after the first, of two run directories; a phase
// changed when its medians differ by more than the wider of the two runs' own ranges. Prints
// the table and the first changed phase in that order. Returns 0, or -1 with err set.
int tb_phase_diff(FILE *out, const char *run_a, const char *run_b, tb_error *err);
// The same as data: {"phases": [{"phase", "a": {"median_ms", "min_ms", "max_ms", "steps"} | null,
// "b": ..., "delta_ms", "spread_ms", "changed"}], "first_changed": {"phase", "delta_ms",
// "spread_ms"} | null}. NULL with err set.
json_t *tb_phase_diff_json(const char *run_a, const char *run_b, tb_error *err);

// `tracebook steps` as data: a JSON array, one element per step of rank 0's metrics (or only
// step only_step, when > 0: absent, an error): {"step", "slowest_rank", "ranks": [{"rank",
// "step_ms", "data_ms", "forward_ms", "backward_ms", "optimizer_ms", "p2p_wait_ms", "idle_ms",
// "exposed_comm_ms" (the metrics': communication the rank thread waited for), "collectives":
// {GROUP: {"wait_ms", "transfer_ms", "calls", "bytes", "comm_thread_calls" (those its
// communication thread made: overlapped)}}}]}. NULL with err set.
json_t *tb_step_decomposition(const char *run_dir, int only_step, tb_error *err);

int tracebook_steps_main(int argc, char **argv);
int tracebook_comm_main(int argc, char **argv);

#endif
