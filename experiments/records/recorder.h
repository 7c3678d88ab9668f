// recorder.h — running one engine process into a record (experiments/records/record.h): the shared
// machinery of `tracebook run` and `tracebook replay`.
//
// tb_run_engine forks the engine with stdout/stderr into the record, rewrites a heartbeat
// every 2 s while it lives and, on a terminal, shows a live progress line; SIGINT or SIGTERM
// to the host (tb_recorder_install_sigint) stops the engine, and the engine dies with the host
// (PR_SET_PDEATHSIG) if the host is killed. tb_record_finish hashes every file of
// the record into manifest.json and writes the manifest last, atomically, then catalogues
// the run.
#ifndef TB_EXPERIMENTS_RECORDER_H
#define TB_EXPERIMENTS_RECORDER_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "core/clock.h"
#include "core/error.h"
#include "core/fileio.h"
#include "core/options.h"
#include "core/run_dir.h"
#include "records/provenance.h"

typedef struct tb_run_outcome {
    int exit_status;   // the engine's exit status, or 128 + signal
    int signaled;      // the engine died of a signal
    int interrupted;   // the host was interrupted (SIGINT) and stopped the engine
    double engine_s;   // wall time from fork to the engine's exit
    long long killed_after_step;  // kill_after_step: the newest step rank 0 had logged when it was killed (0: not)
} tb_run_outcome;

// Who a run is: the manifest's identity fields.
typedef struct tb_run_identity {
    const char *experiment;
    int64_t version;
    const char *question;
    const char *runbook, *runbook_sha256;
    int64_t seed;
    int repetition;            // 1..N (record.h)
    const json_t *sweep_point;
    const char *replay_of;     // NULL unless a replay
    const tb_git_state *git;   // NULL when there is no git provenance
    const char *const *env_allow;  // name globs the manifest records (NULL: tb_default_env_allow)
    const char *const *env_deny;   // name globs kept out even when allowed (NULL: tb_default_env_deny)
    // a drill's run that must fail (exp:run's expect_failure): its kind ("oom", "hang") and the
    // exit status it must end with; NULL and 0 for a run that must finish
    const char *expected_failure;
    int expected_exit_status;
    // the earlier measurements of this repetition it replaces, each measured contended
    // (exp:run's rerun_contended_): [{"run_id", "reason"}]; NULL for none
    const json_t *supersedes;
} tb_run_identity;

// What `tracebook run` and `tracebook replay` say in --help about the environment a manifest
// records (provenance.h, tb_environment_json).
#define TB_ENV_POLICY_HELP                                                                               \
    "Manifests record only allowed environment variables: OMP_* GOMP_* OPENBLAS_* CUDA_* NCCL_* TB_* LANG\n" \
    "LC_* PATH and the library/include/pkg-config/CMake/Lua search paths, plus --env-allow; never names\n"   \
    "matching *PASS* *PWD* *AUTH* *SECRET* *TOKEN* *KEY* *CREDENTIAL* *DSN* *COOKIE* *SESSION* (any case)\n" \
    "or --env-deny. A value carrying credentials (a URL's user or user:password@, a JWT, a known token\n"      \
    "prefix) is recorded as \"<redacted: why>\"."

// The --env-allow / --env-deny values of a command line: a name or a glob, so neither empty
// nor holding '=' (a NAME=VALUE pasted by mistake would put a value in the manifest's
// filter). 0, or -1 with err naming the command, the flag and the value.
int tb_env_globs_check(const char *command, const tb_strlist *globs, const char *flag, tb_error *err);

// SIGINT and SIGTERM: the first sets the flag (the engine running is sent the same signal and
// recorded incomplete; the runbook host stops at its next Lua instructions), a second ends
// the host at once. tb_recorder_interrupted: the first signal's number, 0 when none.
void tb_recorder_install_sigint(void);
int tb_recorder_interrupted(void);

// "20261129T104512-3f9a2c1e": start time + 8 hex of randomness
void tb_new_run_id(char *buf, size_t len);
// "<record>/run/<kind>.rank-NNNNN.<ext>": a rank's file of the run directory inside a record
// (core/run_dir.h). 0, or -1 with err set when the path does not fit.
int tb_record_rank_file(char *buf, size_t len, const char *record, tb_rank_file kind, int rank, tb_error *err);

// Runs argv (argv[0] the engine, or its launcher) with stdout.log / stderr.log / heartbeat in `record`, and
// fills *out with how it ended. progress: show a live line — "run <label>: step s/iters  loss
// tok/s  ETA" — for a terminal. -1 with err set when the record's file paths do not fit:
// then no engine was started. An engine that cannot be started (fork, exec) is not an error
// here: it ends with exit status 127 (126 when its logs cannot be opened). kill_after_step > 0:
// the engine is killed (SIGKILL: no handler, no cleanup, a crash at a moment it does not
// choose) as soon as rank 0's metrics file has a complete line of that step or a later one
// (polled every 10 ms, so it may be a step further, or inside the save after the step).
int tb_run_engine(const json_t *argv, const char *record, int progress, const char *label, int iters,
                  long long kill_after_step, tb_run_outcome *out, tb_error *err);

// How a run was launched, for its manifest's "launcher": {"name": "threads" | "mpirun",
// "processes": N, "engine_argv_index": K} — argv[K] is the engine (0 on threads; after
// mpirun and its options under mpirun), which a replay swaps for its own build. A launcher
// of NULL is threads.
json_t *tb_launch_json(const char *launcher, int processes, int engine_index);
// The engine's index in a manifest's argv: its launcher's engine_argv_index, 0 for a record
// written before launchers were recorded (argv[0] was the engine). -1 when the index is not
// in argv.
int tb_manifest_engine_index(const json_t *manifest);

// manifest.json for a finished (or failed, or interrupted) run, written last; then the run
// is catalogued (a catalogue failure is reported, not fatal). argv is the whole command
// (launcher and engine), launch its tb_launch_json (NULL: threads, the engine at argv[0]).
int tb_record_finish(const char *artifacts, const char *record, const char *run_id, const tb_run_identity *id,
                     const json_t *argv, const json_t *launch, const char *start, tb_run_outcome outcome,
                     tb_error *err);

#endif
