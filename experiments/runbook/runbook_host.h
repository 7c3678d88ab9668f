// runbook_host.h — what the parts of `tracebook run` share: the host (the command line and
// what was derived from it), reachable from any Lua C function through the registry.
//
//   runbook.c      the command: flags, the engine's path, git, running the runbook
//   runbook_api.c  the Lua API (tb.*, exp:claim) and its installation in a Lua state
//   runbook_run.c  exp:run: engine runs, each recorded (recorder.h)
//   runbook_plan.c exp:plan: a recorded `tracebook plan` (the planner)
//   runbook_check.c  what the API checks of the values it is given
//   lua_json.c     JSON values to and from Lua
#ifndef TB_EXPERIMENTS_RUNBOOK_HOST_H
#define TB_EXPERIMENTS_RUNBOOK_HOST_H

#include <jansson.h>
#include <limits.h>
#include <lua.h>
#include <stddef.h>

#include "core/error.h"
#include "core/options.h"
#include "records/provenance.h"

typedef struct tb_runbook_host {
    // the command line (runbook.c's option table)
    const char *artifacts;
    int dry_run, require_clean, force;
    int json;                // --json: progress on stderr, the outcome as one JSON document on stdout
    tb_strlist sets;         // --set key=value
    const char *sign_key;    // --sign KEY.pem: sign each declared version's ledger head at the end
    tb_strlist env_allowed;  // --env-allow NAME_OR_GLOB
    tb_strlist env_denied;   // --env-deny GLOB
    const char *runbook;
    // derived from it
    char runbook_sha256[65];
    char engine[PATH_MAX];   // build/bin/pretrain_gpt beside this tracebook binary
    char mpirun[PATH_MAX];   // Open MPI's mpirun on PATH, once a run asks for it ("" before)
    int tty;                 // stdout is a terminal: live progress lines
    json_t *params;          // the --set values by key
    json_t *params_read;     // the keys the runbook read (tb.param, tb.params): a --set it never
                             // read is an error at the end (a misspelled parameter is not ignored)
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

// exp:run{config..., repeat_=N, launcher=, processes=, rerun_contended_=K} (runbook_run.c).
// rerun_contended_ = K: a repetition whose run was contended by the gate prove applies
// (stability.h: other processes or the hypervisor's steal beyond the thresholds) is measured
// again, up to K re-runs in all per exp:run; the contended record stays, and the new one's
// manifest names it ("supersedes"). Default 0.
int tb_runbook_exp_run(lua_State *L);
#define TB_RUNBOOK_MAX_RERUNS 1000
// exp:plan{planner and model keys} (runbook_plan.c): one recorded `tracebook plan`
int tb_runbook_exp_plan(lua_State *L);
// exp:run's launcher values, and the most processes it launches
#define TB_RUNBOOK_LAUNCHERS "threads|mpirun"
#define TB_RUNBOOK_MAX_PROCESSES 4096
// exp:run's expect_failure values: a drill's run that must end as the engine ends that
// failure (core/error.h), its reports kept in the record: "oom" TB_EXIT_OUT_OF_MEMORY (oom.json),
// "hang" TB_EXIT_HANG (hang.json); or "killed" 128 + SIGKILL, the recorder's kill after
// kill_after_step (a crash on purpose)
#define TB_RUNBOOK_EXPECTED_FAILURES "oom|hang|killed"
// The exit status of an expect_failure value, or -1 when it is none of them.
int tb_runbook_expected_exit_status(const char *kind);
// Checks the value at idx for config key `key` (exp:run's, tb.sweep's): the engine's option
// (or repeat_) with the engine's own rules for its type, range and choices. Pushes nothing;
// raises naming what, the key and the value.
void tb_runbook_check_config_value(lua_State *L, const char *what, const char *key, int idx);
// Whether key is one of the engine's options (a pretrain_gpt flag with underscores); the
// option nearest a misspelt one (at most 2 edits), or NULL.
int tb_runbook_is_engine_key(const char *key);
const char *tb_runbook_nearest_engine_key(const char *key);

// --- the values the API is given (runbook_check.c) ---
// Every one raises a Lua error at the runbook's line (the caller of the API's C function)
// naming the call (`what`: "tb.experiment 'tp'"), the key and the value it got.

// luaL_error with printf's conversions: lua_pushfstring, which luaL_error formats with,
// takes only %% %s %f %I %p %d %c %U, and "%.17g" or "%lld" there raises "invalid option".
int tb_rb_error(lua_State *L, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
// "file:line: " of the innermost Lua function on the stack (C functions between, such as
// pcall or error, skipped), into buf; "" when there is none.
const char *tb_rb_lua_where(lua_State *L, char *buf, size_t len);
// The value at idx for a message: 'text', 42, 1.5, nan, true, nil, a table.
const char *tb_rb_describe(lua_State *L, int idx, char *buf, size_t len);
// Refuses a key of the table at idx that is not in allowed (NULL-terminated), naming it and
// listing allowed; and a value without a string key.
void tb_rb_check_keys(lua_State *L, int idx, const char *what, const char *const *allowed);
// The number at idx as an exact integer (2.0 is 2; 1.5 and strings are not): 1, or 0.
int tb_rb_integer(lua_State *L, int idx, lua_Integer *out);
// Field getters of the table at idx: 0 when key is absent (raises instead when required), 1
// with *out set. Strings are non-empty; integers exact and >= min; numbers finite and >= min.
int tb_rb_get_string(lua_State *L, int idx, const char *what, const char *key, int required, const char **out);
int tb_rb_get_integer(lua_State *L, int idx, const char *what, const char *key, int required, lua_Integer min,
                      lua_Integer *out);
int tb_rb_get_number(lua_State *L, int idx, const char *what, const char *key, int required, double min,
                     double *out);
// Whether the table at idx is a list (keys exactly 1..n, n >= 1).
int tb_rb_is_list(lua_State *L, int idx);
// Refuses a value (named `name` in messages) that tb_lua_to_json would not keep whole: a
// number not finite, a function, a table mixing a list with named keys, nesting past 16.
void tb_rb_check_json(lua_State *L, int idx, const char *what, const char *name);
// Raises "<what>: <name> has a metatable ..." for a table with one: the host reads tables raw
// (lua_next), so a metatable's __index or __pairs would be silently ignored; refused instead.
void tb_rb_check_plain_table(lua_State *L, int idx, const char *what, const char *name);
// Refuses a value other than a boolean, a string or a finite number; returns its lua_type.
int tb_rb_check_scalar(lua_State *L, int idx, const char *what, const char *name);

#endif
