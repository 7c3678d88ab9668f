// record.h — a run record: the evidence one engine run leaves (docs/ARCHITECTURE.md, "The run
// directory and the record"). The file names are defined once, in core/run_dir.h
// (TB_RECORD_*, TB_RUN_*, TB_EXPERIMENT_*); this header describes what they hold.
//
//   artifacts/<experiment>/v<version>/<run-id>/
//     manifest.json    written LAST, atomically (temp + rename); its absence, or
//                      "status": "running" with a stale heartbeat, means incomplete
//     heartbeat        rewritten every few seconds while the run is live: one line, the
//                      CLOCK_REALTIME time in seconds
//     run/             the engine's run directory (--run-dir): config.json,
//                      metrics.rank-NNNNN.jsonl, trace.rank-NNNNN.json, memory.rank-NNNNN.json,
//                      pipeline.json, launch.json, oom.json / hang.json and their per-rank
//                      parts (oom.rank-NNNNN.json, hang.rank-NNNNN.json) when they happen
//     stdout.log, stderr.log
//     git.patch        the working tree's diff against HEAD when the tree was dirty
//
// manifest.json:
//   {
//     "manifest_version": 2,                     // 2: repetitions count from 1 (see below)
//     "run_id": "20261129T104512-3f9a2c1e",     // start time + 8 hex of randomness
//     "experiment": "tp_scaling", "version": 2, "question": "...",
//     "status": "finished" | "failed" | "incomplete",
//     "runbook": {"path": "runbooks/tp_scaling.lua", "sha256": "..."},
//     "seed": 1234,                              // derived from the experiment's root seed
//     "repetition": 1, "sweep_point": {"tensor_model_parallel_size": 2},
//                      // 1..N for a config run with repeat_=N, as every command prints it
//     "replay_of": null | "<run-id>",
//     "supersedes": [{"run_id": "<run-id>", "reason": "contended: ..."}],
//                      // only on a repetition measured again because those earlier
//                      // measurements of it were contended (exp:run's rerun_contended_);
//                      // they stay in the version, and prove checks that they were
//     "git": {"commit": "40 hex", "branch": "main", "dirty": true,
//             "changed": ["engine/x.c"], "untracked": ["notes.txt"],
//             "patch": "git.patch", "patch_sha256": "..."},        // patch fields when dirty
//     "argv": ["build/bin/pretrain_gpt", "--num-layers", "2", ...],
//                      // the whole command: under mpirun ["/usr/bin/mpirun", ..., "-np", "2",
//                      // "build/bin/pretrain_gpt", ...]
//     "launcher": {"name": "threads" | "mpirun", "processes": 2, "engine_argv_index": 7},
//                      // argv[engine_argv_index] is the engine (replay swaps it for its build);
//                      // a record without "launcher" ran the engine as argv[0]
//     "cwd": "/abs/path",                       // redacted like an environment value
//     "environment": {"PATH": "...", "OMP_NUM_THREADS": "4", ...},
//                      // only allowed names (provenance.h: the default allow-list, plus
//                      // --env-allow), never a denied one; a value carrying credentials is
//                      // "<redacted: why>" (tb_credential_marker)
//     "environment_filter": {"allow": [globs], "deny": [globs], "left_out": 41,
//                            "left_out_names": ["HOME", ...], "redacted": ["HTTPS_PROXY"]},
//                      // the record is partial: what was left out, by name, never by value
//     "host": {"hostname": ..., "cpu_model": ..., "cores": 2, "memory_bytes": ...,
//              "gpus": [...], "driver": ..., "cuda": ..., "nccl": ...,
//              "compiler": "gcc 12.2.0", "build_type": "Release"},
//     "config": { ...the engine's resolved config.json... },
//     "start": "2026-11-29T10:45:12Z", "end": "...", "exit_status": 0,
//     "expected_failure": {"kind": "oom", "exit_status": 3},   // only for exp:run's expect_failure
//     "files": {"run/metrics.rank-00000.jsonl": "sha256 hex", "stdout.log": "...", ...}
//                                                // every file of the record but manifest.json
//   }
//
// Claims of an experiment version: artifacts/<experiment>/v<version>/claims.json, rewritten
// atomically as claims are made:
//   {"experiment": "tp_scaling", "version": 2, "claims": [
//     {"id": "tp8_tokens_per_s", "text": "TP8 runs at {value} tok/s", "value": 14712.3,
//      "parser": "tokens_per_s", "args": {"warmup_steps": 1},
//      "runs": ["<run-id>", ...],                 // the records the number is derived from
//      "relative_tolerance": 1e-9},                // re-derivation must agree within this
//     {"id": "loss_unchanged", "text": "...", "at_most": 0,   // instead of value: a bound
//      "parser": "relative_difference", "args": {"a": {...}, "b": {...}}, "runs": [...]}
//   ]}
// `tracebook prove` re-derives each claim's value from the raw files of its runs with the
// named parser (experiments/prove/parsers.h) after checking every file's sha256 against its
// manifest; a claim with "at_most" (exclusive with "value" and "relative_tolerance", a
// number >= 0) proves iff the re-derived number is <= the bound.
#ifndef TB_EXPERIMENTS_RECORD_H
#define TB_EXPERIMENTS_RECORD_H

#include <jansson.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "core/run_dir.h"

// 2: "repetition" counts from 1. Records of manifest_version 1 (and older ones without the
// field) counted from 0; they stay as they were written — a record is evidence, and its
// manifest is not rewritten — and are read through tb_manifest_repetition.
#define TB_MANIFEST_VERSION 2

// The manifest's repetition, 1-based whatever the record's manifest_version: one more than a
// version-1 record says. 1 with *out set, or 0 when the manifest has no integer repetition.
static inline int tb_manifest_repetition(const json_t *m, json_int_t *out) {
    const json_t *rep = json_object_get(m, "repetition"), *mv = json_object_get(m, "manifest_version");
    if (!json_is_integer(rep)) return 0;
    int zero_based = !json_is_integer(mv) || json_integer_value(mv) < 2;
    *out = json_integer_value(rep) + (zero_based ? 1 : 0);
    return 1;
}

// Which of two records of one repetition is the later (a rerun with --force measures it
// again): their manifests' start (ISO 8601 to the second), then the manifest file's mtime
// (written once, as the record finished: it orders runs that started within one second), then
// the run id. > 0 when a is the later. exp:run resumes the latest, prove's selection rule
// requires it (experiments/prove/selection.h).
static inline int tb_record_later(const char *a_start, long long a_mtime_ns, const char *a_id, const char *b_start,
                                  long long b_mtime_ns, const char *b_id) {
    int c = strcmp(a_start ? a_start : "", b_start ? b_start : "");
    if (c) return c;
    if (a_mtime_ns != b_mtime_ns) return a_mtime_ns > b_mtime_ns ? 1 : -1;
    return strcmp(a_id ? a_id : "", b_id ? b_id : "");
}

// The mtime (ns) of <record_dir>/manifest.json, 0 when it has none.
static inline long long tb_record_manifest_mtime_ns(const char *record_dir) {
    char path[8192];
    struct stat st;
    if (snprintf(path, sizeof path, "%s/" TB_RECORD_MANIFEST, record_dir) >= (int)sizeof path) return 0;
    return stat(path, &st) == 0 ? (long long)st.st_mtim.tv_sec * 1000000000LL + st.st_mtim.tv_nsec : 0;
}

// Whether a manifest is of a run that failed as its runbook expected (exp:run's
// expect_failure): status "failed" and "expected_failure": {"kind", "exit_status"} with the
// run's own exit_status — a drill's OOM or hang, whose record is complete evidence as a
// finished run's is.
static inline int tb_manifest_failed_as_expected(const json_t *m) {
    const char *status = json_string_value(json_object_get(m, "status"));
    const json_t *expected = json_object_get(json_object_get(m, "expected_failure"), "exit_status");
    const json_t *exit_status = json_object_get(m, "exit_status");
    return status && !strcmp(status, "failed") && json_is_integer(expected) && json_is_integer(exit_status) &&
           json_integer_value(expected) == json_integer_value(exit_status);
}

#endif
