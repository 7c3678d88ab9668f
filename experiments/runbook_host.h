// runbook_host.h — what the parts of `tracebook run` share: the host (the command line and
// what was derived from it), reachable from any Lua C function through the registry.
//
//   runbook.c      the command: flags, the engine's path, git, running the runbook
//   runbook_api.c  the Lua API (tb.*, exp:claim) and its installation in a Lua state
//   runbook_run.c  exp:run: engine runs, each recorded (recorder.h)
//   lua_json.c     JSON values to and from Lua
#ifndef TB_EXPERIMENTS_RUNBOOK_HOST_H
#define TB_EXPERIMENTS_RUNBOOK_HOST_H

#include <jansson.h>
#include <limits.h>
#include <lua.h>
#include <stddef.h>

#include "core/error.h"
#include "core/options.h"
#include "provenance.h"

typedef struct tb_runbook_host {
    // the command line (runbook.c's option table)
    const char *artifacts;
    int dry_run, require_clean, force;
    tb_strlist sets;         // --set key=value
    tb_strlist env_allowed;  // --env-allow NAME_OR_GLOB
    tb_strlist env_denied;   // --env-deny GLOB
    const char *runbook;
    // derived from it
    char runbook_sha256[65];
    char engine[PATH_MAX];   // build/bin/pretrain_gpt beside this tracebook binary
    int tty;                 // stdout is a terminal: live progress lines
    json_t *params;          // the --set values by key
    tb_git_state git;
    int have_git;
    json_t *experiments;     // declared experiments: <artifacts>/<name>/v<N> → experiment.json's object
    const char **env_allow;  // the default allow-list + the --env-allow globs, NULL-terminated
    const char **env_deny;   // the default secret globs + the --env-deny ones, NULL-terminated
    int runs_started;
} tb_runbook_host;

// Installs the API in L — the global `tb`, the experiment metatable — with h as the host.
void tb_runbook_open_api(lua_State *L, tb_runbook_host *h);
tb_runbook_host *tb_runbook_host_of(lua_State *L);

// <artifacts>/<name>/v<version> of the experiment at stack index exp: 0, or -1 with err set
// when it does not fit buf (the caller raises it as a Lua error, after freeing what it holds).
int tb_runbook_experiment_dir(lua_State *L, int exp, char *buf, size_t len, tb_error *err);
// Raises a Lua error unless argument 1 is an experiment from tb.experiment.
void tb_runbook_check_experiment(lua_State *L, const char *method);

// exp:run{config..., repeat_=N} (runbook_run.c)
int tb_runbook_exp_run(lua_State *L);

#endif
