// runbook_run.c — exp:run{config..., repeat_=N}: engine runs of an experiment, each recorded.
//
// Each run is one pretrain_gpt process with an exact argv (the config's keys in sorted order,
// so a config always gives the same command), or, with launcher = "mpirun" and processes = N,
// one mpirun of N such processes (the whole mpirun command is the argv recorded); its record directory gets the run directory,
// stdout/stderr logs, the git patch when the tree is dirty, a heartbeat while the run is
// live, and manifest.json last (recorder.h, record.h). A repetition that already finished
// with the same sweep point is not run again unless --force. SIGINT stops the engine and
// leaves the record marked incomplete; a SIGKILLed host leaves no manifest, which reads as
// incomplete too.
#include <dirent.h>
#include <jansson.h>
#include <lauxlib.h>
#include <limits.h>
#include <lua.h>
#include <math.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config/config.h"
#include "core/fileio.h"
#include "core/options.h"
#include "core/rng.h"
#include "core/run_dir.h"
#include "core/xalloc.h"
#include "runbook/lua_json.h"
#include "prove/parsers.h"
#include "records/record.h"
#include "records/recorder.h"
#include "runbook/runbook_host.h"
#include "prove/stability.h"

static const tb_option *option_by_key(const char *key) { return tb_options_find_key(tb_config_options, key); }

// What exp:run builds in C. A Lua error longjmps past any free() after it, so all of it is
// held here, in a to-be-closed userdata: its __close frees what is still held however
// exp:run ends (returned, or an error raised anywhere below it), and __gc does the same should
// the slot never be closed. A field freed early is set to NULL, so nothing is freed twice.
typedef struct run_state {
    json_t *point;     // the sweep point: the config table as the runbook gave it
    json_t *config;    // this repetition's config: the point and its seed
    json_t *resolved;  // build_argv's copy of config as the engine's flags see it
    json_t *argv;      // the engine's argv being built, or this repetition's
    char **records;    // [repeats] the record directory of each repetition (NULL: none yet)
    int repeats;
    json_t *supersedes;  // the repetition being run: its earlier, contended measurements
} run_state;

static void drop_json(json_t **j) {
    json_decref(*j);
    *j = NULL;
}

static int run_state_release(lua_State *L) {
    run_state *s = lua_touserdata(L, 1);
    drop_json(&s->point);
    drop_json(&s->config);
    drop_json(&s->resolved);
    drop_json(&s->argv);
    drop_json(&s->supersedes);
    for (int i = 0; i < s->repeats; i++) free(s->records[i]);
    free(s->records);
    s->records = NULL;
    s->repeats = 0;
    return 0;
}

// Pushes an empty run_state, marked to be closed when exp:run returns or raises.
static run_state *push_run_state(lua_State *L) {
    run_state *s = lua_newuserdatauv(L, sizeof *s, 0);
    memset(s, 0, sizeof *s);
    if (luaL_newmetatable(L, "tracebook.run_state")) {
        lua_pushcfunction(L, run_state_release);
        lua_setfield(L, -2, "__close");
        lua_pushcfunction(L, run_state_release);
        lua_setfield(L, -2, "__gc");
    }
    lua_setmetatable(L, -2);
    lua_toclose(L, -1);
    return s;
}

// The option key nearest to key (at most 2 edits: a typo), for "did you mean"; NULL if none.
static const char *nearest_key(const char *key) {
    const char *best = NULL;
    size_t best_d = 3, n = strlen(key);
    for (const tb_option *o = tb_config_options; o->flag && n < 64; o++) {
        size_t m = strlen(o->key), row[65];
        if (m > 64) continue;
        for (size_t j = 0; j <= m; j++) row[j] = j;  // Levenshtein, one row at a time
        for (size_t i = 1; i <= n; i++) {
            size_t diag = row[0];
            row[0] = i;
            for (size_t j = 1; j <= m; j++) {
                size_t up = row[j], cost = diag + (key[i - 1] != o->key[j - 1]);
                row[j] = cost < up + 1 ? cost : up + 1;
                if (row[j - 1] + 1 < row[j]) row[j] = row[j - 1] + 1;
                diag = up;
            }
        }
        if (row[m] < best_d) best_d = row[m], best = o->key;
    }
    return best;
}

int tb_runbook_is_engine_key(const char *key) { return option_by_key(key) != NULL; }

const char *tb_runbook_nearest_engine_key(const char *key) { return nearest_key(key); }

void tb_runbook_check_config_value(lua_State *L, const char *what, const char *key, int idx) {
    idx = lua_absindex(L, idx);
    char v[96], text[TB_PATH_MAX + 32];
    lua_Integer i = 0;
    if (!strcmp(key, "repeat_") || !strcmp(key, "repetition_")) {
        if (!tb_rb_integer(L, idx, &i) || i < 1 || i > INT_MAX)
            tb_rb_error(L, "%s: %s must be an integer >= 1 (got %s)", what, key, tb_rb_describe(L, idx, v, sizeof v));
        return;
    }
    if (!strcmp(key, "rerun_contended_")) {
        if (!tb_rb_integer(L, idx, &i) || i < 0 || i > TB_RUNBOOK_MAX_RERUNS)
            tb_rb_error(L, "%s: rerun_contended_ must be an integer from 0 to %d (got %s)", what,
                        TB_RUNBOOK_MAX_RERUNS, tb_rb_describe(L, idx, v, sizeof v));
        return;
    }
    if (!strcmp(key, "launcher")) {
        if (lua_type(L, idx) != LUA_TSTRING || tb_choice_index(TB_RUNBOOK_LAUNCHERS, lua_tostring(L, idx)) < 0)
            tb_rb_error(L, "%s: launcher must be 'threads' or 'mpirun' (got %s)", what,
                        tb_rb_describe(L, idx, v, sizeof v));
        return;
    }
    if (!strcmp(key, "expect_failure")) {
        if (lua_type(L, idx) != LUA_TSTRING || tb_runbook_expected_exit_status(lua_tostring(L, idx)) < 0)
            tb_rb_error(L, "%s: expect_failure must be 'oom', 'hang' or 'killed' (got %s)", what,
                        tb_rb_describe(L, idx, v, sizeof v));
        return;
    }
    if (!strcmp(key, "kill_after_step")) {
        if (!tb_rb_integer(L, idx, &i) || i < 1 || i > INT_MAX)
            tb_rb_error(L, "%s: kill_after_step must be an integer >= 1 (got %s)", what,
                        tb_rb_describe(L, idx, v, sizeof v));
        return;
    }
    if (!strcmp(key, "processes")) {
        if (!tb_rb_integer(L, idx, &i) || i < 1 || i > TB_RUNBOOK_MAX_PROCESSES)
            tb_rb_error(L, "%s: processes must be an integer from 1 to %d (got %s)", what, TB_RUNBOOK_MAX_PROCESSES,
                        tb_rb_describe(L, idx, v, sizeof v));
        return;
    }
    const tb_option *o = option_by_key(key);
    if (!o) {
        const char *near = nearest_key(key);
        char hint[96] = "";
        if (near) snprintf(hint, sizeof hint, "did you mean '%s'? ", near);
        tb_rb_error(L, "%s: unknown config key '%s' (%skeys are pretrain_gpt's flags with underscores, see "
                       "pretrain_gpt --help, and repeat_, repetition_, rerun_contended_, launcher, processes, expect_failure, "
                       "kill_after_step)", what, key,
                    hint);
    }
    if (!strcmp(key, "run_dir")) tb_rb_error(L, "%s: run_dir is set by the recorder", what);
    // the Lua type the option's values have: a number is not taken for a string or a boolean,
    // nor a string for a number, and an integer key gets no fraction to truncate
    const int t = lua_type(L, idx);
    const char *wants = NULL;
    switch (o->type) {
    case TB_OPT_BOOL:
        if (t != LUA_TBOOLEAN) wants = "true or false";
        break;
    case TB_OPT_INT:
    case TB_OPT_INT64:
        if (!tb_rb_integer(L, idx, &i)) wants = "an integer";
        else snprintf(text, sizeof text, "%lld", (long long)i);
        break;
    case TB_OPT_BYTES:  // a count, or a string with a K/M/G/T suffix
        if (t == LUA_TSTRING) snprintf(text, sizeof text, "%s", lua_tostring(L, idx));
        else if (!tb_rb_integer(L, idx, &i)) wants = "an integer byte count or a string such as '512M'";
        else snprintf(text, sizeof text, "%lld", (long long)i);
        break;
    case TB_OPT_FLOAT:
        if (t != LUA_TNUMBER || !isfinite(lua_tonumber(L, idx))) wants = "a finite number";
        else snprintf(text, sizeof text, "%.17g", (double)lua_tonumber(L, idx));
        break;
    case TB_OPT_STRING:
    case TB_OPT_CHOICE:
        if (t != LUA_TSTRING) wants = o->type == TB_OPT_CHOICE ? o->choices : "a string";
        else snprintf(text, sizeof text, "%s", lua_tostring(L, idx));
        break;
    default: wants = "a value a runbook cannot give (the option is a list)"; break;
    }
    if (wants)
        tb_rb_error(L, "%s: config key '%s' must be %s (got %s)", what, key, wants,
                    tb_rb_describe(L, idx, v, sizeof v));
    if (o->type == TB_OPT_BOOL) return;
    // the engine's own rules for the text its argv will hold: int range, choices, lengths
    tb_config scratch;
    config_defaults(&scratch);
    char where[160];
    snprintf(where, sizeof where, "%s: config key '%s'", what, key);
    tb_error err;
    if (tb_option_set(&scratch, o, text, where, &err) != 0) tb_rb_error(L, "%s", err.msg);
}

// The config value at idx as JSON: an integer key's integral float (2.0) as the integer, so
// the argv and the sweep point say 2.
static json_t *config_json(lua_State *L, int idx, const tb_option *o) {
    lua_Integer i;
    if ((o->type == TB_OPT_INT || o->type == TB_OPT_INT64 || o->type == TB_OPT_BYTES) && tb_rb_integer(L, idx, &i))
        return json_integer((json_int_t)i);
    return tb_lua_to_json(L, idx);
}

// A string value with "{run_dir}" replaced by the run's directory: where a run writes files of
// its own (e.g. save = "{run_dir}/checkpoints"), so that they belong to its record.
static void substitute_run_dir(char *out, size_t size, const char *value, const char *run_dir) {
    size_t used = 0;
    for (const char *at; (at = strstr(value, "{run_dir}")) != NULL && used < size; value = at + 9)
        used += (size_t)snprintf(out + used, size - used, "%.*s%s", (int)(at - value), value, run_dir);
    if (used < size) snprintf(out + used, size - used, "%s", value);
}

// The keys of exp:run that say how the engine is launched or how its run must end, not how
// it is configured: in the sweep point, never in the engine's argv.
static int is_launch_key(const char *key) {
    return !strcmp(key, "launcher") || !strcmp(key, "processes") || !strcmp(key, "expect_failure") ||
           !strcmp(key, "kill_after_step");
}

int tb_runbook_expected_exit_status(const char *kind) {
    switch (kind ? tb_choice_index(TB_RUNBOOK_EXPECTED_FAILURES, kind) : -1) {
    case 0: return TB_EXIT_OUT_OF_MEMORY;
    case 1: return TB_EXIT_HANG;
    case 2: return 128 + SIGKILL;  // killed by the recorder (kill_after_step): a crash
    default: return -1;
    }
}

// The mpirun on PATH, checked once to be Open MPI's (the engine knows its launch by Open MPI's
// environment, and the options below are Open MPI's), into h->mpirun; raises naming why not.
static void find_mpirun(lua_State *L, tb_runbook_host *h) {
    if (h->mpirun[0]) return;
    const char *path = getenv("PATH");
    char candidate[PATH_MAX];
    for (const char *p = path ? path : ""; *p;) {
        size_t n = strcspn(p, ":");
        if (n > 0 && n + 8 < sizeof candidate) {
            snprintf(candidate, sizeof candidate, "%.*s/mpirun", (int)n, p);
            if (access(candidate, X_OK) == 0) break;
        }
        candidate[0] = '\0';
        p += n + (p[n] == ':');
    }
    if (!candidate[0])
        tb_rb_error(L, "exp:run: launcher = 'mpirun', but no mpirun is on PATH (install Open MPI: openmpi-bin)");
    char cmd[PATH_MAX + 32], line[256] = "";
    snprintf(cmd, sizeof cmd, "'%s' --version 2>&1", candidate);
    FILE *f = popen(cmd, "r");
    int open_mpi = 0;
    while (f && fgets(line, sizeof line, f)) open_mpi |= strstr(line, "Open MPI") != NULL;
    if (f) pclose(f);
    if (!open_mpi)
        tb_rb_error(L, "exp:run: launcher = 'mpirun': %s is not Open MPI's mpirun (its --version does not say "
                       "'Open MPI'); the engine is launched by Open MPI", candidate);
    snprintf(h->mpirun, sizeof h->mpirun, "%s", candidate);
}

// The launcher's part of the command, before the engine: nothing for threads; for mpirun its
// path, -np and the options a run on one shared host needs (docs in runbooks/README.md).
static void launcher_argv(lua_State *L, tb_runbook_host *h, const json_t *config, json_t *argv) {
    const char *launcher = json_string_value(json_object_get(config, "launcher"));
    const json_t *processes = json_object_get(config, "processes");
    // a crash on purpose: the recorder kills the engine it started, so one process, not mpirun's
    const char *expected = json_string_value(json_object_get(config, "expect_failure"));
    const int killed = expected && !strcmp(expected, "killed"), kill_step = json_object_get(config, "kill_after_step") != NULL;
    if (killed != kill_step)
        tb_rb_error(L, kill_step ? "exp:run: kill_after_step needs expect_failure = 'killed' (the run is to end killed)"
                                 : "exp:run: expect_failure = 'killed' needs kill_after_step = N (the step after which "
                                   "the recorder kills the engine)");
    if (killed && launcher && !strcmp(launcher, "mpirun"))
        tb_rb_error(L, "exp:run: expect_failure = 'killed' is not supported yet with launcher = 'mpirun' (the recorder "
                       "kills the one engine process it started)");
    if (processes && (!launcher || strcmp(launcher, "mpirun") != 0))
        tb_rb_error(L, "exp:run: processes = %lld needs launcher = 'mpirun' (with threads every rank is a thread of "
                       "one process)", (long long)json_integer_value(processes));
    if (!launcher || strcmp(launcher, "mpirun") != 0) return;
    if (!processes)
        tb_rb_error(L, "exp:run: launcher = 'mpirun' needs processes = N (mpirun -np N)");
    find_mpirun(L, h);
    json_array_append_new(argv, json_string(h->mpirun));
    // as root, Open MPI refuses to run without being told
    if (geteuid() == 0) json_array_append_new(argv, json_string("--allow-run-as-root"));
    // more processes than cores is allowed, and none is pinned to one core (its OpenMP and
    // BLAS threads would share it)
    json_array_append_new(argv, json_string("--oversubscribe"));
    json_array_append_new(argv, json_string("--bind-to"));
    json_array_append_new(argv, json_string("none"));
    json_array_append_new(argv, json_string("-np"));
    char n[32];
    snprintf(n, sizeof n, "%" JSON_INTEGER_FORMAT, json_integer_value(processes));
    json_array_append_new(argv, json_string(n));
}

// The engine's own rules (engine/config/config_rules.c) over the run's command line, as
// pretrain_gpt applies them before its first step: a dry run names a config the engine would
// refuse (a negative seed, a dropout not supported yet) at the exp:run line, and a real run
// fails there before any of its repetitions. Under a launcher (mpirun) the world size is the
// launcher's, so the engine checks it there. 0, or -1 with err listing the rules broken.
static int engine_rules(json_t *argv, int engine_index, tb_error *err) {
    if (engine_index != 0) return 0;
    const size_t n = json_array_size(argv);
    char **v = tb_xcalloc(n + 1, sizeof *v, "engine arguments");
    for (size_t i = 0; i < n; i++) v[i] = (char *)json_string_value(json_array_get(argv, i));
    tb_config c;
    config_defaults(&c);
    int help = 0, rc = config_parse_args(&c, (int)n, v, &help, err);
    free(v);
    if (rc != 0) return -1;
    config_resolve(&c);
    return config_validate(&c, err);
}

// The command for a config table (at idx), into *argv_out — a run_state's, so that the errors
// raised here free it: the launcher's part (launcher_argv), then the engine and its flags in
// key order, so a config always gives the same command. *engine_index: where the engine is.
// The host's own keys go into *ctl, not the command.
typedef struct run_controls {
    int repeats;  // repeat_ (1 when absent)
    int only;     // repetition_ (0 when absent: every repetition)
    int reruns;   // rerun_contended_ (0 when absent)
} run_controls;

static void build_argv(lua_State *L, int idx, tb_runbook_host *h, const char *run_dir, json_t *config,
                       run_controls *ctl, json_t **argv_out, int *engine_index) {
    json_t *argv = *argv_out = json_array();
    *ctl = (run_controls){1, 0, 0};
    lua_pushnil(L);
    while (lua_next(L, idx)) {
        char k[96];
        if (lua_type(L, -2) != LUA_TSTRING)
            tb_rb_error(L, "exp:run: config keys must be strings (got [%s])", tb_rb_describe(L, -2, k, sizeof k));
        const char *key = lua_tostring(L, -2);
        tb_runbook_check_config_value(L, "exp:run", key, -1);
        if (!strcmp(key, "repeat_")) ctl->repeats = (int)lua_tointeger(L, -1);
        else if (!strcmp(key, "repetition_")) ctl->only = (int)lua_tointeger(L, -1);
        else if (!strcmp(key, "rerun_contended_")) ctl->reruns = (int)lua_tointeger(L, -1);
        else if (!strcmp(key, "kill_after_step")) json_object_set_new(config, key, json_integer(lua_tointeger(L, -1)));
        else if (is_launch_key(key)) json_object_set_new(config, key, tb_lua_to_json(L, -1));
        else json_object_set_new(config, key, config_json(L, -1, option_by_key(key)));
        lua_pop(L, 1);
    }
    launcher_argv(L, h, config, argv);
    *engine_index = (int)json_array_size(argv);
    json_array_append_new(argv, json_string(h->engine));
    size_t n;
    const char **keys = tb_json_sorted_keys(config, &n);
    for (size_t i = 0; i < n; i++) {
        if (is_launch_key(keys[i])) continue;
        const tb_option *o = option_by_key(keys[i]);
        json_t *v = json_object_get(config, keys[i]);
        char text[TB_PATH_MAX + 32];
        if (json_is_boolean(v)) {
            snprintf(text, sizeof text, "%s=%s", o->flag, json_is_true(v) ? "true" : "false");
            json_array_append_new(argv, json_string(text));
            continue;
        }
        if (json_is_integer(v)) snprintf(text, sizeof text, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
        else if (json_is_real(v)) snprintf(text, sizeof text, "%.17g", json_real_value(v));
        else if (json_is_string(v)) substitute_run_dir(text, sizeof text, json_string_value(v), run_dir);
        else {
            char bad[256];
            snprintf(bad, sizeof bad, "%s", keys[i]);
            free(keys);
            tb_rb_error(L, "exp:run: config key '%s' needs a number, string or boolean", bad);
        }
        json_array_append_new(argv, json_string(o->flag));
        json_array_append_new(argv, json_string(text));
    }
    free(keys);
    json_array_append_new(argv, json_string(option_by_key("run_dir")->flag));
    json_array_append_new(argv, json_string(run_dir));
}

// A finished record of this experiment version with the same sweep point and repetition
// (1-based; a record of manifest_version 1 is read 1-based too), into out: 1 found, 0 not, -1
// with err set when a path does not fit. A record that another one supersedes (measured again
// as contended), or whose run id is in `replaced` (this call's own), is not the repetition's.
static int find_finished(const char *version_dir, const json_t *point, int repetition, const json_t *replaced,
                         char *out, size_t len, tb_error *err) {
    DIR *d = opendir(version_dir);
    if (!d) return 0;
    int found = 0;
    json_t *superseded = json_object(), *candidates = json_array();  // run ids
    size_t k;
    json_t *v;
    json_array_foreach(replaced, k, v) json_object_set(superseded, json_string_value(json_object_get(v, "run_id")), json_true());
    struct dirent *e;
    while (found >= 0 && (e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        char path[PATH_MAX * 2];
        if (tb_path_format(path, sizeof path, err, "%s/%s/" TB_RECORD_MANIFEST, version_dir, e->d_name) != 0) {
            found = -1;
            break;
        }
        json_t *m = json_load_file(path, 0, NULL);
        const char *status = m ? json_string_value(json_object_get(m, "status")) : NULL;
        json_int_t rep;
        // a replay is evidence about its original, never a repetition of the experiment
        int replay = m && json_is_string(json_object_get(m, "replay_of"));
        // a point that expects a failure is done when its run failed so, any other when it finished
        const int done = json_object_get(point, "expect_failure") ? tb_manifest_failed_as_expected(m)
                                                                  : status && !strcmp(status, "finished");
        if (done && !replay && tb_manifest_repetition(m, &rep) && rep == repetition &&
            json_equal(json_object_get(m, "sweep_point"), (json_t *)point)) {
            const char *start = json_string_value(json_object_get(m, "start"));
            char rec[PATH_MAX * 2];
            snprintf(rec, sizeof rec, "%s/%s", version_dir, e->d_name);
            json_array_append_new(candidates, json_pack("{s:s, s:s, s:I}", "run_id", e->d_name, "start",
                                                        start ? start : "", "mtime",
                                                        (json_int_t)tb_record_manifest_mtime_ns(rec)));
            json_array_foreach(json_object_get(m, "supersedes"), k, v) {
                const char *id = json_string_value(json_object_get(v, "run_id"));
                if (id) json_object_set(superseded, id, json_true());
            }
        }
        json_decref(m);
    }
    closedir(d);
    // the repetition's latest record (its start, then its run id), as prove's selection rule
    // takes it (experiments/prove/stability.c): after a rerun with --force, the rerun's
    json_t *best = NULL;
    json_array_foreach(candidates, k, v) {
        if (json_object_get(superseded, json_string_value(json_object_get(v, "run_id")))) continue;
        if (!best || tb_record_later(json_string_value(json_object_get(v, "start")),
                                     json_integer_value(json_object_get(v, "mtime")),
                                     json_string_value(json_object_get(v, "run_id")),
                                     json_string_value(json_object_get(best, "start")),
                                     json_integer_value(json_object_get(best, "mtime")),
                                     json_string_value(json_object_get(best, "run_id"))) > 0)
            best = v;
    }
    if (found >= 0 && best)
        found = tb_path_format(out, len, err, "%s/%s", version_dir, json_string_value(json_object_get(best, "run_id")))
                        == 0 ? 1 : -1;
    json_decref(superseded);
    json_decref(candidates);
    return found;
}

// Pushes a run's result table: run_id, record, status, seed, repetition, steps (rank 0).
// Raises a Lua error when the metrics file's path does not fit.
static void push_run_result(lua_State *L, const char *rec, const char *run_id, int repetition, int64_t seed,
                            const char *status, int skipped) {
    char path[PATH_MAX + 64];
    tb_error err;
    if (tb_record_rank_file(path, sizeof path, rec, TB_RANK_METRICS, 0, &err) != 0) tb_rb_error(L, "%s", err.msg);
    json_t *result = json_pack("{s:s, s:s, s:s, s:i, s:I, s:b}", "run_id", run_id, "record", rec, "status", status,
                               "repetition", repetition, "seed", (json_int_t)seed, "resumed", skipped);
    tb_lua_push_json(L, result);
    json_decref(result);
    lua_newtable(L);
    FILE *f = fopen(path, "r");
    char line[1 << 14];
    lua_Integer i = 0;
    while (f && fgets(line, sizeof line, f)) {
        json_t *m = json_loads(line, 0, NULL);
        if (!m) continue;
        tb_lua_push_json(L, m);
        lua_rawseti(L, -2, ++i);
        json_decref(m);
    }
    if (f) fclose(f);
    lua_setfield(L, -2, "steps");
}

// min / median / max of a parser's per-run values over the repetitions (args.figure when
// figure is not NULL), into the table on top as field `key`. A run the parser cannot read
// (a replay of a run that is not replayable) is left out: n counts those it read.
static void push_stat(lua_State *L, const char *key, const char *parser, const char *figure, char **records, int n,
                      int warmup) {
    double *v = tb_xcalloc((size_t)(n ? n : 1), sizeof *v, "per-run values");
    int k = 0;
    json_t *args = json_pack("{s:i}", "warmup_steps", warmup);
    if (figure) json_object_set_new(args, "figure", json_string(figure));
    for (int i = 0; i < n; i++) {
        double x;
        json_t *evidence = NULL;
        tb_error err;
        const char *one[1] = {records[i]};
        if (tb_parse_claim(parser, args, one, 1, &x, &evidence, &err) == 0) v[k++] = x;
        json_decref(evidence);
    }
    json_decref(args);
    lua_newtable(L);
    if (k > 0) {
        double med = tb_median(v, k);
        lua_pushnumber(L, v[0]);
        lua_setfield(L, -2, "min");
        lua_pushnumber(L, med);
        lua_setfield(L, -2, "median");
        lua_pushnumber(L, v[k - 1]);
        lua_setfield(L, -2, "max");
    }
    lua_pushinteger(L, k);
    lua_setfield(L, -2, "n");
    lua_pushinteger(L, warmup);
    lua_setfield(L, -2, "warmup_steps");
    lua_setfield(L, -2, key);
    free(v);
}

// exp:run{config..., repeat_=N} → {runs = {...}, stats = {tokens_per_s = {min, median, max,
// n, warmup_steps}, step_ms = ..., replayed_step_ms = ...}, config = the config table}
int tb_runbook_exp_run(lua_State *L) {
    tb_runbook_host *h = tb_runbook_host_of(L);
    tb_runbook_check_experiment(L, "run");
    luaL_checktype(L, 2, LUA_TTABLE);
    tb_rb_check_plain_table(L, 2, "exp:run", "its config");
    char version_dir[PATH_MAX];
    tb_error err;
    if (tb_runbook_experiment_dir(L, 1, version_dir, sizeof version_dir, &err) != 0)
        return tb_rb_error(L, "%s", err.msg);
    run_state *s = push_run_state(L);  // from here on, every error frees what s holds
    s->point = json_object();
    int engine_index = 0;
    run_controls ctl;
    build_argv(L, 2, h, "RUN_DIR", s->point, &ctl, &s->argv, &engine_index);  // only checks: dropped
    if (engine_rules(s->argv, engine_index, &err) != 0)
        return tb_rb_error(L, "exp:run: pretrain_gpt would refuse this config: %s", err.msg);
    int repeats = ctl.repeats, reruns_left = ctl.reruns;
    const int only = ctl.only;
    drop_json(&s->argv);
    lua_getfield(L, 1, "seed");
    const uint64_t root = (uint64_t)lua_tointeger(L, -1);
    lua_pop(L, 1);
    // the seed is the model config's: how it is launched leaves it alone, so that the same
    // config on threads and under mpirun trains the same bits
    json_t *model_point = json_deep_copy(s->point);
    json_object_del(model_point, "launcher");
    json_object_del(model_point, "processes");
    json_object_del(model_point, "expect_failure");
    json_object_del(model_point, "kill_after_step");
    char *canonical = json_dumps(model_point, JSON_COMPACT | JSON_SORT_KEYS);
    json_decref(model_point);
    uint64_t point_hash = 1469598103934665603ull;  // FNV-1a of the sweep point
    for (const char *c = canonical; *c; c++) point_hash = (point_hash ^ (unsigned char)*c) * 1099511628211ull;
    free(canonical);
    // for the progress line: the point's train_iters, else the engine's default
    tb_config defaults;
    config_defaults(&defaults);
    const int iters = json_is_integer(json_object_get(s->point, "train_iters"))
                          ? (int)json_integer_value(json_object_get(s->point, "train_iters"))
                          : defaults.train_iters;

    // repetition_ = K: repetition K alone (its seed and record those of the sweep point's K-th),
    // so that the repetitions of two configs can alternate in time (runbooks/lib/timing.lua)
    if (only > repeats) repeats = only;
    const int first = only ? only : 1, final_rep = only ? only : repeats, count = final_rep - first + 1;
    s->records = tb_xcalloc((size_t)count, sizeof *s->records, "records");
    s->repeats = count;
    lua_newtable(L);  // result
    lua_newtable(L);  // result.runs
    // repetitions are numbered 1..repeats wherever they are stored or printed (the manifest,
    // the results, every line); runs[rep - first + 1] and records[rep - first] hold repetition rep
    for (int rep = first; rep <= final_rep; rep++) {
        // each run's seed: from the experiment's root seed, the sweep point and the repetition
        // — mixed 0-based, as before repetitions counted from 1, so that a config keeps its seeds
        int64_t seed = json_is_integer(json_object_get(s->point, "seed"))
                           ? (int64_t)json_integer_value(json_object_get(s->point, "seed"))
                           : (int64_t)(tb_seed_mix(tb_seed_mix(root, point_hash), (uint64_t)(rep - 1)) >> 33);
        s->config = json_deep_copy(s->point);
        json_object_set_new(s->config, "seed", json_integer(seed));
        char rec[PATH_MAX + 128], run_id[64];
        int finished = h->force ? 0 : find_finished(version_dir, s->point, rep, s->supersedes, rec, sizeof rec, &err);
        if (finished < 0) tb_rb_error(L, "%s", err.msg);
        const char *expected = json_string_value(json_object_get(s->point, "expect_failure"));
        const int expected_status = expected ? tb_runbook_expected_exit_status(expected) : 0;
        if (finished) {
            const char *slash = strrchr(rec, '/');
            if (tb_path_format(run_id, sizeof run_id, &err, "%s", slash ? slash + 1 : rec) != 0)
                tb_rb_error(L, "the run id of a finished record: %s", err.msg);
            printf("  skip: %s repetition %d of %d already finished as %s (--force re-runs)\n", version_dir, rep,
                   repeats, run_id);
            push_run_result(L, rec, run_id, rep, seed, expected ? "failed" : "finished", 1);
            lua_rawseti(L, -2, rep - first + 1);
            s->records[rep - first] = tb_xstrdup(rec, "record path");
            drop_json(&s->config);
            continue;
        }
        tb_new_run_id(run_id, sizeof run_id);
        char run_dir[PATH_MAX + 160];
        if (tb_path_format(rec, sizeof rec, &err, "%s/%s", version_dir, run_id) != 0 ||
            tb_path_format(run_dir, sizeof run_dir, &err, "%s/" TB_RECORD_RUN_DIR, rec) != 0)
            tb_rb_error(L, "%s", err.msg);
        lua_newtable(L);
        tb_lua_push_json(L, s->config);
        int cfg_idx = lua_gettop(L);
        s->resolved = json_object();
        run_controls same;
        build_argv(L, cfg_idx, h, run_dir, s->resolved, &same, &s->argv, &engine_index);
        drop_json(&s->resolved);
        lua_pop(L, 2);
        if (h->dry_run) {
            printf("  dry run, repetition %d of %d: ", rep, repeats);
            for (size_t i = 0; i < json_array_size(s->argv); i++)
                printf("%s%s", i ? " " : "", json_string_value(json_array_get(s->argv, i)));
            char *text = json_dumps(s->config, JSON_COMPACT | JSON_SORT_KEYS);
            printf("\n    config %s\n", text);
            free(text);
            drop_json(&s->argv);
            drop_json(&s->config);
            continue;
        }
        const double t_start = tb_wall_s();
        if (tb_mkdir_p(rec, &err) != 0) tb_rb_error(L, "%s", err.msg);
        if (h->have_git && h->git.dirty) {
            char patch[PATH_MAX + 160];
            if (tb_path_format(patch, sizeof patch, &err, "%s/" TB_RECORD_PATCH, rec) != 0 ||
                tb_write_file_atomic(patch, h->git.patch, strlen(h->git.patch), &err) != 0)
                tb_rb_error(L, "%s", err.msg);
        }
        char start[32];
        tb_iso_now(start, sizeof start);
        int run_no = ++h->runs_started;
        if (!h->tty) {
            printf("  run %d: %s repetition %d of %d (%s)\n", run_no, version_dir, rep, repeats, run_id);
            fflush(stdout);
        }
        char label[96];
        snprintf(label, sizeof label, "%d (repetition %d of %d)", run_no, rep, repeats);
        tb_run_outcome o;
        const json_t *kill_step = json_object_get(s->point, "kill_after_step");
        if (tb_run_engine(s->argv, rec, h->tty, label, iters, kill_step ? (long long)json_integer_value(kill_step) : 0,
                          &o, &err) != 0)
            tb_rb_error(L, "run %s not started: %s", run_id, err.msg);
        lua_getfield(L, 1, "name");
        lua_getfield(L, 1, "version");
        lua_getfield(L, 1, "question");
        tb_run_identity id = {lua_tostring(L, -3), lua_tointeger(L, -2), lua_tostring(L, -1), h->runbook,
                              h->runbook_sha256, seed, rep, s->point, NULL, h->have_git ? &h->git : NULL,
                              (const char *const *)h->env_allow, (const char *const *)h->env_deny, expected,
                              expected_status, s->supersedes};
        json_t *launch = tb_launch_json(json_string_value(json_object_get(s->point, "launcher")),
                                        (int)json_integer_value(json_object_get(s->point, "processes")), engine_index);
        int recorded = tb_record_finish(h->artifacts, rec, run_id, &id, s->argv, launch, start, o, &err);
        json_decref(launch);
        lua_pop(L, 3);
        if (recorded != 0) tb_rb_error(L, "recording %s: %s", rec, err.msg);
        const double total = tb_wall_s() - t_start;
        // what recording costs: everything but the engine's own process time
        printf("  run %d %s in %.2f s: engine %.2f s, recording %.3f s (%.2f%%)\n", run_no,
               o.exit_status == 0 ? "done" : "ended", total, o.engine_s, total - o.engine_s,
               100.0 * (total - o.engine_s) / total);
        if (o.killed_after_step) printf("  run %d killed (SIGKILL) when step %lld was logged\n", run_no, o.killed_after_step);
        drop_json(&s->argv);
        drop_json(&s->config);
        if (o.interrupted) tb_rb_error(L, "interrupted: run %s recorded as incomplete", run_id);
        if (expected && o.exit_status != expected_status)
            tb_rb_error(L, "engine run %s was expected to fail with %s (exit status %d), but its exit status was %d "
                           "(see %s/" TB_RECORD_STDERR ")", run_id, expected, expected_status, o.exit_status, rec);
        if (o.exit_status != 0 && !expected) {
            char log[PATH_MAX + 160], line[512] = "", last[512] = "";
            if (tb_path_format(log, sizeof log, &err, "%s/" TB_RECORD_STDERR, rec) != 0)
                tb_rb_error(L, "engine run %s failed (exit status %d): %s", run_id, o.exit_status, err.msg);
            FILE *f = fopen(log, "r");
            while (f && fgets(line, sizeof line, f))
                if (line[0] != '\n') memcpy(last, line, sizeof last);
            if (f) fclose(f);
            last[strcspn(last, "\n")] = '\0';
            tb_rb_error(L, "engine run %s failed (exit status %d): %s (see %s)", run_id, o.exit_status, last, log);
        }
        // a measurement the host's contention disturbed (the gate prove applies, stability.h)
        // is measured again, up to rerun_contended_ times per exp:run; the earlier record stays,
        // named in the new one's manifest, and prove checks that it was contended
        char why[768];
        if (!expected && reruns_left > 0 && tb_stability_contended(rec, run_id, why, sizeof why) == 1) {
            reruns_left--;
            if (!s->supersedes) s->supersedes = json_array();
            json_array_append_new(s->supersedes, json_pack("{s:s, s:s}", "run_id", run_id, "reason", why));
            printf("  re-run: repetition %d of %d (%s) was %s; measuring it again (%d more re-run%s "
                   "allowed by rerun_contended_)\n",
                   rep, repeats, run_id, why, reruns_left, reruns_left == 1 ? "" : "s");
            fflush(stdout);
            rep--;  // the same repetition: its seed, its sweep point
            continue;
        }
        push_run_result(L, rec, run_id, rep, seed, expected ? "failed" : "finished", 0);
        if (s->supersedes) {
            tb_lua_push_json(L, s->supersedes);
            lua_setfield(L, -2, "supersedes");
            drop_json(&s->supersedes);
        }
        lua_rawseti(L, -2, rep - first + 1);
        s->records[rep - first] = tb_xstrdup(rec, "record path");
    }
    lua_setfield(L, -2, "runs");
    if (!h->dry_run) {
        lua_newtable(L);
        int n = 0;
        for (int i = 0; i < count; i++)
            if (s->records[i]) s->records[n++] = s->records[i];
        s->repeats = n;  // what is left past n is NULL or moved below n: freed once, by the first n
        push_stat(L, "tokens_per_s", "tokens_per_s", NULL, s->records, n, 1);
        push_stat(L, "step_ms", "step_ms", NULL, s->records, n, 1);
        // the step replayed on one core per rank (parsers.h "replayed"), for sizing a replayed
        // timing measurement (runbooks/lib/timing.lua)
        push_stat(L, "replayed_step_ms", "replayed", "step_ms", s->records, n, 1);
        lua_setfield(L, -2, "stats");
    }
    tb_lua_push_json(L, s->point);
    lua_setfield(L, -2, "config");
    return 1;  // the result; s is closed on the way out
}
