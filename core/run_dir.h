// run_dir.h — the names of every file in a run directory and in a record, defined once.
//
// The run directory is the contract between the engine (which writes it) and
// experiments/ and trace/ (which read it); the record wraps a run directory with its
// provenance. docs/ARCHITECTURE.md, "The run directory and the record", describes what
// each file holds; artifacts/README.md shows the tree.
//
//   <run dir>/config.json                  the resolved config
//             metrics.rank-NNNNN.jsonl     one line per step
//             trace.rank-NNNNN.json        Chrome trace of the rank's ranges
//             memory.rank-NNNNN.json       memory snapshot at the peak
//             pipeline.json                per-stage summary (rank 0)
//             conditions.json              threads, cores, CPU time, host load (rank 0)
//             launch.json                  threads or mpirun: processes, hosts, ranks of each (rank 0)
//             hang.rank-NNNNN.json         a rank's part of a hang report, when one happens
//             oom.rank-NNNNN.json          a rank's out-of-memory report, when it runs out
//             oom.json, hang.json          the reports merged from those parts (core/failure_report.h)
//
//   <artifacts>/<experiment>/v<N>/experiment.json, claims.json
//                                 <run-id>/manifest.json (written last), run/ (the run
//                                 directory), stdout.log, stderr.log, git.patch, heartbeat
//   <artifacts>/catalog.sqlite
#ifndef TB_CORE_RUN_DIR_H
#define TB_CORE_RUN_DIR_H

#include <stddef.h>

#include "core/error.h"

// --- the run directory (written by pretrain_gpt) ---
#define TB_RUN_CONFIG "config.json"
#define TB_RUN_PIPELINE "pipeline.json"
#define TB_RUN_CONDITIONS "conditions.json"  // what the run's timings were measured under
#define TB_RUN_LAUNCH "launch.json"          // how the run was launched: threads or mpirun, processes, hosts
#define TB_RUN_OOM_REPORT "oom.json"
#define TB_RUN_HANG_REPORT "hang.json"
#define TB_RUN_CHECKPOINT "checkpoint.json"  // every checkpoint save: per-rank phases, the last arriver
// where pretrain_gpt puts a run given no --run-dir: <this>/<timestamp>
#define TB_RUN_ADHOC_ROOT "artifacts/adhoc"

// Creates the run directory: `requested` when given (non-empty), else a new
// TB_RUN_ADHOC_ROOT/<local time, %Y%m%dT%H%M%S>[.N]. Writes its path into out.
int tb_run_dir_create(const char *requested, char *out, size_t len, tb_error *err);

// A run directory given by name (`flag`: --run-dir, or a directory of runs such as plan
// --verify's --work-dir) must be new or empty: a run's files are never mixed with an earlier
// run's (a reader would count its stale rank files) nor written over them (nothing already
// written is lost). Returns 0 (empty `dir`, a missing directory or an empty one), or -1 with
// err naming the flag, the directory and an entry in it (or why it cannot be read).
int tb_run_dir_check_unused(const char *flag, const char *dir, tb_error *err);

// The per-rank files: "<kind>.rank-NNNNN.<ext>". Every rank of a run that ends writes the
// first TB_RANK_NFILES; the parts of the failure reports only when that failure happens.
typedef enum tb_rank_file {
    TB_RANK_METRICS,  // metrics.rank-NNNNN.jsonl
    TB_RANK_TRACE,    // trace.rank-NNNNN.json
    TB_RANK_MEMORY,   // memory.rank-NNNNN.json
    TB_RANK_NFILES,
    TB_RANK_HANG_PART = TB_RANK_NFILES,  // hang.rank-NNNNN.json
    TB_RANK_OOM_PART,                    // oom.rank-NNNNN.json
    TB_RANK_NKINDS
} tb_rank_file;

// "metrics.rank-NNNNN.jsonl" etc., with NNNNN spelled out (for messages and docs).
const char *tb_rank_file_pattern(tb_rank_file kind);

// "<dir>/<name>". Returns 0, or -1 with err set when the path does not fit in len.
int tb_run_path(char *buf, size_t len, const char *dir, const char *name, tb_error *err);
// "<dir>/<kind>.rank-<rank, 5 digits>.<ext>". Returns 0, or -1 with err set.
int tb_rank_file_path(char *buf, size_t len, const char *dir, tb_rank_file kind, int rank, tb_error *err);
// Whether a directory entry's name is that kind's file of some rank; sets *rank.
int tb_rank_file_match(const char *name, tb_rank_file kind, int *rank);

// --- the record (written by tracebook run / replay) ---
#define TB_RECORD_MANIFEST "manifest.json"
#define TB_RECORD_RUN_DIR "run"  // the run directory inside a record
#define TB_RECORD_STDOUT "stdout.log"
#define TB_RECORD_STDERR "stderr.log"
#define TB_RECORD_PATCH "git.patch"
#define TB_RECORD_HEARTBEAT "heartbeat"
// one experiment version's directory
#define TB_EXPERIMENT_STATUS "experiment.json"
#define TB_EXPERIMENT_CLAIMS "claims.json"
#define TB_EXPERIMENT_REPORT "report.html"  // tracebook report (experiments/reports/report.h)
#define TB_EXPERIMENT_LEDGER "ledger.jsonl"  // the version's anchors (experiments/records/anchor.h)
#define TB_EXPERIMENT_SIGNATURES "ledger.sig.json"  // signatures of its heads (experiments/records/signing.h)
// the artifacts root
#define TB_CATALOG "catalog.sqlite"

#endif
