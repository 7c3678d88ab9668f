// failure_report.h — the reports of a failure that spans ranks and processes (hang.json,
// oom.json), merged from their per-rank parts (docs/ARCHITECTURE.md, "Beyond one process").
//
// A process whose rank fails writes one part per rank it reports on — hang.rank-NNNNN.json
// for each of its ranks (comm/watchdog.h), oom.rank-NNNNN.json for a rank over the memory
// cap (reports/memory_report.h) — and then merges every part in the run directory into the
// report (tb_report_merge_write), under an exclusive flock of the directory: merges follow
// one another, and the last one sees every part written before it. The first process to
// finish its part so merges what is there; each later one merges again; `tracebook hang
// RUN_DIR` merges whatever is there when asked. Parts are per rank, not per process, so that
// a rank without one — its process killed before it could write, or not yet reported — is
// found by its missing file, without any process having to say so.
//
// Merging needs nothing but the parts (tb_core: tracebook links no engine). A hang part
// holds its rank's coordinates, groups (id and members of each), step, pending call, last
// completed call and flight-recorder tail, the world's layout, and what its process saw:
// why it reported ("timeout", "terminated" by SIGTERM — mpirun ending the job after a
// process died —, "stalled") and, after a timeout, the call that timed out. The merged
// hang.json holds every reporting rank; the absent ranks, named by their coordinates, with
// the last call a peer saw them take part in (a peer's completed collective on a group they
// belong to needs their contribution: "known from peers"); the stuck ranks by group; the
// smallest group holding every stuck rank; and the peers absent from the timed-out call.
#ifndef TB_CORE_FAILURE_REPORT_H
#define TB_CORE_FAILURE_REPORT_H

#include <jansson.h>
#include <stddef.h>
#include <stdio.h>

#include "core/error.h"
#include "core/run_dir.h"

// "rank 13 (tp1 cp0 dp1 pp1)": every report names a rank by its coordinates.
void tb_rank_label_format(char *buf, size_t len, int rank, int tp, int cp, int dp, int pp);

// The parts of `kind` (TB_RANK_HANG_PART or TB_RANK_OOM_PART) in run_dir, by increasing
// rank; an unreadable part is left out and counted in *unreadable (when not NULL).
json_t *tb_report_parts_read(const char *run_dir, tb_rank_file kind, int *unreadable, tb_error *err);
// How many parts of the kind the run directory holds (their names only; none read).
int tb_report_parts_count(const char *run_dir, tb_rank_file kind);

// The merged reports of a non-empty array of parts (see above).
json_t *tb_hang_report_merge(const json_t *parts);
json_t *tb_oom_report_merge(const json_t *parts);

// Reads the parts of `kind`, merges them and writes the report (hang.json, oom.json), under
// the directory's flock. *merged (when not NULL) gets the report. -1 with err set when no part
// is there or the report cannot be written.
int tb_report_merge_write(const char *run_dir, tb_rank_file kind, json_t **merged, tb_error *err);

// The readable summary of a merged hang report: the message, who detected it in which call,
// the stuck ranks, the peers absent from the call with the last call each completed, the
// ranks that wrote no part. `path` (NULL: none) is printed as the report's file.
void tb_hang_report_print(FILE *out, const json_t *report, const char *path);

#endif
