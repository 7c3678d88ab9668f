// run_arg.h — the RUN argument, taken the same way by every tracebook command that reads one
// run (show, diff, replay, steps, comm, moe, bisect, ckpt, hang; docs/CLI.md): a run id or a
// unique prefix of one under --artifacts, a record's directory (<artifacts>/<experiment>/
// v<N>/<run-id>, holding manifest.json), or a run directory as `pretrain_gpt --run-dir` wrote
// it (not recorded: no run id).
#ifndef TB_CORE_RUN_ARG_H
#define TB_CORE_RUN_ARG_H

#include <limits.h>

#include "core/error.h"
#include "core/options.h"

#define TB_ARTIFACTS_DEFAULT "artifacts"
// The --artifacts flag of every subcommand, for a const char * field of its option table.
#define TB_ARTIFACTS_OPTION(type, field) \
    TB_OPTION("--artifacts", type, field, TB_OPT_STRING, TB_ARTIFACTS_DEFAULT, "DIR", "the artifacts root")

typedef struct tb_run_arg {
    char record_dir[PATH_MAX];  // the record; "" for a bare run directory
    char run_dir[PATH_MAX];     // the engine's files: the record's run/ or the directory itself
    char run_id[256];           // the record's run id; "" for a bare run directory
} tb_run_arg;

// Resolves arg (a directory is taken as it is; a word that is not one is a run id or a prefix
// looked up under artifacts). Returns 0, or -1 with err naming the argument and what was
// tried: no such directory and no run id starting with it, or a prefix naming several runs.
int tb_run_arg_resolve(const char *arg, const char *artifacts, tb_run_arg *out, tb_error *err);

#endif
