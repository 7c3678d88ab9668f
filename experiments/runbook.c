// runbook.c — the Lua host of `tracebook run` and the run recorder it drives.
//
// The Lua API (documented for users in runbooks/README.md) is one global table `tb`:
//   tb.experiment{name=, version=, question=, seed=}  → an experiment with :run and :claim
//   exp:run{<engine config>..., repeat_=N}            → results (per run: steps, record; stats)
//   exp:claim{id=, parser=, runs=, args=, text=, value=}  → the derived number
//   tb.sweep{key={v1, v2}, ...}                       → the cartesian product, as config tables
//   tb.param(name, default)                           → a --set value (number when numeric)
//   tb.assert(cond, message), tb.read_json(path), tb.read_jsonl(path)
// Errors anywhere (syntax, runtime, an unknown config key, a failed engine run) end the
// runbook with file:line and a traceback, mark its experiments failed, and exit non-zero.
//
// The recorder: each engine run is one pretrain_gpt process; its record directory gets the
// run directory, stdout/stderr logs, the git patch when the tree is dirty, a heartbeat while
// the run is live, and manifest.json last (experiments/record.h). SIGINT stops the engine
// and leaves the record marked incomplete; a SIGKILLed host leaves no manifest, which reads
// as incomplete too.
#include "runbook.h"

#include <dirent.h>
#include <errno.h>
#include <jansson.h>
#include <lauxlib.h>
#include <limits.h>
#include <lua.h>
#include <lualib.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "catalog.h"
#include "config.h"
#include "core/fileio.h"
#include "core/options.h"
#include "core/rng.h"
#include "core/run_dir.h"
#include "core/xalloc.h"
#include "parsers.h"
#include "provenance.h"
#include "record.h"
#include "recorder.h"

extern char **environ;

typedef struct host {
    // the command line (run_options)
    const char *artifacts;
    int dry_run, require_clean, force;
    tb_strlist sets;         // --set key=value
    tb_strlist env_denied;   // --env-deny GLOB
    const char *runbook;
    // derived from it
    char runbook_sha256[65];
    char engine[PATH_MAX];   // build/bin/pretrain_gpt beside this tracebook binary
    int tty;
    json_t *params;          // the --set values by key
    tb_git_state git;
    int have_git;
    json_t *experiments;     // declared experiments: name/vN → their directory
    const char **env_deny;   // the default secret globs + the --env-deny ones, NULL-terminated
    int runs_started;
} host;

static host *host_of(lua_State *L) {
    lua_getfield(L, LUA_REGISTRYINDEX, "tracebook.host");
    host *h = lua_touserdata(L, -1);
    lua_pop(L, 1);
    return h;
}

// ---------------------------------------------------------------------------------------
// JSON ↔ Lua

static void push_json(lua_State *L, const json_t *j) {
    if (json_is_object(j)) {
        lua_newtable(L);
        const char *k;
        json_t *v;
        json_object_foreach((json_t *)j, k, v) {
            push_json(L, v);
            lua_setfield(L, -2, k);
        }
    } else if (json_is_array(j)) {
        lua_newtable(L);
        for (size_t i = 0; i < json_array_size(j); i++) {
            push_json(L, json_array_get(j, i));
            lua_rawseti(L, -2, (lua_Integer)i + 1);
        }
    } else if (json_is_integer(j)) lua_pushinteger(L, (lua_Integer)json_integer_value(j));
    else if (json_is_real(j)) lua_pushnumber(L, json_real_value(j));
    else if (json_is_string(j)) lua_pushstring(L, json_string_value(j));
    else if (json_is_boolean(j)) lua_pushboolean(L, json_is_true(j));
    else lua_pushnil(L);
}

// Lua value at idx → JSON (tables with keys 1..n become arrays).
static json_t *to_json(lua_State *L, int idx) {
    idx = lua_absindex(L, idx);
    switch (lua_type(L, idx)) {
    case LUA_TBOOLEAN: return json_boolean(lua_toboolean(L, idx));
    case LUA_TNUMBER:
        return lua_isinteger(L, idx) ? json_integer((json_int_t)lua_tointeger(L, idx)) : json_real(lua_tonumber(L, idx));
    case LUA_TSTRING: return json_string(lua_tostring(L, idx));
    case LUA_TTABLE: {
        lua_Integer n = (lua_Integer)lua_rawlen(L, idx);
        if (n > 0) {
            json_t *a = json_array();
            for (lua_Integer i = 1; i <= n; i++) {
                lua_rawgeti(L, idx, i);
                json_array_append_new(a, to_json(L, -1));
                lua_pop(L, 1);
            }
            return a;
        }
        json_t *o = json_object();
        lua_pushnil(L);
        while (lua_next(L, idx)) {
            if (lua_type(L, -2) == LUA_TSTRING) json_object_set_new(o, lua_tostring(L, -2), to_json(L, -1));
            lua_pop(L, 1);
        }
        return o;
    }
    default: return json_null();
    }
}

// ---------------------------------------------------------------------------------------
// Small helpers

static int is_identifier(const char *s) {
    if (!*s) return 0;
    for (; *s; s++)
        if (!(('a' <= *s && *s <= 'z') || ('A' <= *s && *s <= 'Z') || ('0' <= *s && *s <= '9') || *s == '_' ||
              *s == '-' || *s == '.'))
            return 0;
    return 1;
}

static int cmp_key(const void *a, const void *b) { return strcmp(*(const char *const *)a, *(const char *const *)b); }

static const tb_option *option_by_key(const char *key) { return tb_options_find_key(tb_config_options, key); }

// ---------------------------------------------------------------------------------------
// tb.experiment

static int experiment_dir(lua_State *L, int exp, char *buf, size_t len) {
    host *h = host_of(L);
    lua_getfield(L, exp, "name");
    lua_getfield(L, exp, "version");
    snprintf(buf, len, "%s/%s/v%lld", h->artifacts, lua_tostring(L, -2), (long long)lua_tointeger(L, -1));
    lua_pop(L, 2);
    return 0;
}

static int l_experiment(lua_State *L) {
    host *h = host_of(L);
    luaL_checktype(L, 1, LUA_TTABLE);
    lua_getfield(L, 1, "name");
    const char *name = lua_tostring(L, -1);
    if (!name || !is_identifier(name))
        return luaL_error(L, "tb.experiment: name must be a word of letters, digits, '_', '-' or '.' (got %s)",
                          name ? name : "nothing");
    lua_getfield(L, 1, "version");
    if (!lua_isinteger(L, -1) || lua_tointeger(L, -1) < 1)
        return luaL_error(L, "tb.experiment '%s': version must be an integer >= 1", name);
    lua_getfield(L, 1, "question");
    if (!lua_isstring(L, -1)) return luaL_error(L, "tb.experiment '%s': question (a string) is required", name);
    lua_getfield(L, 1, "seed");
    lua_Integer seed = lua_isinteger(L, -1) ? lua_tointeger(L, -1) : 1234;
    lua_pop(L, 4);

    lua_newtable(L);  // the experiment object
    lua_pushvalue(L, 1);
    lua_pushnil(L);
    while (lua_next(L, 1)) {  // copy the declaration's fields
        lua_pushvalue(L, -2);
        lua_insert(L, -2);
        lua_settable(L, -5);
    }
    lua_pop(L, 1);
    lua_pushinteger(L, seed);
    lua_setfield(L, -2, "seed");
    luaL_setmetatable(L, "tracebook.experiment");

    char dir[PATH_MAX + 64];
    experiment_dir(L, lua_gettop(L), dir, sizeof dir);
    tb_error err;
    if (!h->dry_run && tb_mkdir_p(dir, &err) != 0) return luaL_error(L, "%s", err.msg);
    lua_getfield(L, -1, "question");
    json_object_set_new(h->experiments, dir, json_pack("{s:s, s:s, s:s}", "dir", dir, "question", lua_tostring(L, -1),
                                                       "status", "running"));
    lua_pop(L, 1);
    return 1;
}

// ---------------------------------------------------------------------------------------
// Running the engine

// The engine's argv for a config table (at idx): flags in key order, so a config always
// gives the same command.
static json_t *build_argv(lua_State *L, int idx, host *h, const char *run_dir, json_t *config, int *repeats) {
    json_t *argv = json_array();
    json_array_append_new(argv, json_string(h->engine));
    *repeats = 1;
    lua_pushnil(L);
    while (lua_next(L, idx)) {
        if (lua_type(L, -2) != LUA_TSTRING) {
            luaL_error(L, "exp:run: config keys must be strings");
            return NULL;
        }
        const char *key = lua_tostring(L, -2);
        if (!strcmp(key, "repeat_")) {
            if (!lua_isinteger(L, -1) || lua_tointeger(L, -1) < 1) luaL_error(L, "exp:run: repeat_ must be >= 1");
            *repeats = (int)lua_tointeger(L, -1);
        } else {
            const tb_option *o = option_by_key(key);
            if (!o) luaL_error(L, "exp:run: unknown config key '%s' (keys are pretrain_gpt's flags with underscores)", key);
            if (!strcmp(key, "run_dir")) luaL_error(L, "exp:run: run_dir is set by the recorder");
            json_object_set_new(config, key, to_json(L, -1));
        }
        lua_pop(L, 1);
    }
    const char *key;
    json_t *v;
    // jansson keeps insertion order; walk sorted keys
    size_t n = json_object_size(config), i = 0;
    const char **keys = tb_xcalloc(n ? n : 1, sizeof *keys, "config keys");
    json_object_foreach(config, key, v) keys[i++] = key;
    qsort(keys, n, sizeof *keys, cmp_key);
    for (i = 0; i < n; i++) {
        const tb_option *o = option_by_key(keys[i]);
        v = json_object_get(config, keys[i]);
        char text[TB_PATH_MAX + 32];
        if (json_is_boolean(v)) {
            snprintf(text, sizeof text, "%s=%s", o->flag, json_is_true(v) ? "true" : "false");
            json_array_append_new(argv, json_string(text));
            continue;
        }
        if (json_is_integer(v)) snprintf(text, sizeof text, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
        else if (json_is_real(v)) snprintf(text, sizeof text, "%.17g", json_real_value(v));
        else if (json_is_string(v)) snprintf(text, sizeof text, "%s", json_string_value(v));
        else {
            char bad[256];
            snprintf(bad, sizeof bad, "%s", keys[i]);
            free(keys);
            luaL_error(L, "exp:run: config key '%s' needs a number, string or boolean", bad);
        }
        json_array_append_new(argv, json_string(o->flag));
        json_array_append_new(argv, json_string(text));
    }
    free(keys);
    json_array_append_new(argv, json_string("--run-dir"));
    json_array_append_new(argv, json_string(run_dir));
    return argv;
}

// A finished record of this experiment version with the same sweep point and repetition.
static int find_finished(const char *version_dir, const json_t *point, int repetition, char *out, size_t len) {
    DIR *d = opendir(version_dir);
    if (!d) return 0;
    int found = 0;
    struct dirent *e;
    while (!found && (e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        char path[PATH_MAX * 2];
        tb_path_format(path, sizeof path, "%s/%s/" TB_RECORD_MANIFEST, version_dir, e->d_name);
        json_t *m = json_load_file(path, 0, NULL);
        const char *status = m ? json_string_value(json_object_get(m, "status")) : NULL;
        if (status && !strcmp(status, "finished") &&
            json_integer_value(json_object_get(m, "repetition")) == repetition &&
            json_equal(json_object_get(m, "sweep_point"), (json_t *)point)) {
            tb_path_format(out, len, "%s/%s", version_dir, e->d_name);
            found = 1;
        }
        json_decref(m);
    }
    closedir(d);
    return found;
}

// Pushes a run's result table: run_id, record, status, seed, repetition, steps (rank 0).
static void push_run_result(lua_State *L, const char *rec, const char *run_id, int repetition, int64_t seed,
                            const char *status, int skipped) {
    lua_newtable(L);
    lua_pushstring(L, run_id);
    lua_setfield(L, -2, "run_id");
    lua_pushstring(L, rec);
    lua_setfield(L, -2, "record");
    lua_pushstring(L, status);
    lua_setfield(L, -2, "status");
    lua_pushinteger(L, repetition);
    lua_setfield(L, -2, "repetition");
    lua_pushinteger(L, seed);
    lua_setfield(L, -2, "seed");
    lua_pushboolean(L, skipped);
    lua_setfield(L, -2, "resumed");
    char path[PATH_MAX + 64];
    tb_record_rank_file(path, sizeof path, rec, TB_RANK_METRICS, 0);
    lua_newtable(L);
    FILE *f = fopen(path, "r");
    char line[1 << 14];
    lua_Integer i = 0;
    while (f && fgets(line, sizeof line, f)) {
        json_t *m = json_loads(line, 0, NULL);
        if (!m) continue;
        push_json(L, m);
        lua_rawseti(L, -2, ++i);
        json_decref(m);
    }
    if (f) fclose(f);
    lua_setfield(L, -2, "steps");
}

// min / median / max of a parser's per-run values over the repetitions, into the table on top.
static void push_stat(lua_State *L, const char *parser, char **records, int n, int warmup) {
    double *v = tb_xcalloc((size_t)(n ? n : 1), sizeof *v, "per-run values");
    int k = 0;
    json_t *args = json_pack("{s:i}", "warmup_steps", warmup);
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
    lua_setfield(L, -2, parser);
    free(v);
}

static void check_experiment(lua_State *L, const char *method) {
    int ok = lua_istable(L, 1) && lua_getmetatable(L, 1);
    if (ok) {
        luaL_getmetatable(L, "tracebook.experiment");
        ok = lua_rawequal(L, -1, -2);
        lua_pop(L, 2);
    }
    if (!ok) luaL_error(L, "%s: call it as exp:%s{...} on an experiment from tb.experiment", method, method);
}

// exp:run{config..., repeat_=N} → {runs = {...}, stats = {tokens_per_s = {min, median, max,
// n, warmup_steps}, step_ms = ...}, config = the config table}
static int l_run(lua_State *L) {
    host *h = host_of(L);
    check_experiment(L, "run");
    luaL_checktype(L, 2, LUA_TTABLE);
    char version_dir[PATH_MAX + 64];
    experiment_dir(L, 1, version_dir, sizeof version_dir);
    json_t *point = json_object();
    int repeats;
    json_t *argv_template = build_argv(L, 2, h, "RUN_DIR", point, &repeats);
    json_decref(argv_template);
    lua_getfield(L, 1, "seed");
    const uint64_t root = (uint64_t)lua_tointeger(L, -1);
    lua_pop(L, 1);
    char *canonical = json_dumps(point, JSON_COMPACT | JSON_SORT_KEYS);
    uint64_t point_hash = 1469598103934665603ull;  // FNV-1a of the sweep point
    for (const char *c = canonical; *c; c++) point_hash = (point_hash ^ (unsigned char)*c) * 1099511628211ull;
    free(canonical);
    // for the progress line: the point's train_iters, else the engine's default
    tb_config defaults;
    config_defaults(&defaults);
    const int iters = json_is_integer(json_object_get(point, "train_iters"))
                          ? (int)json_integer_value(json_object_get(point, "train_iters"))
                          : defaults.train_iters;

    char **records = tb_xcalloc((size_t)repeats, sizeof *records, "records");
    lua_newtable(L);  // result
    lua_newtable(L);  // result.runs
    for (int rep = 0; rep < repeats; rep++) {
        // each run's seed: from the experiment's root seed, the sweep point and the repetition
        int64_t seed = json_is_integer(json_object_get(point, "seed"))
                           ? (int64_t)json_integer_value(json_object_get(point, "seed"))
                           : (int64_t)(tb_seed_mix(tb_seed_mix(root, point_hash), (uint64_t)rep) >> 33);
        json_t *config = json_deep_copy(point);
        json_object_set_new(config, "seed", json_integer(seed));
        char rec[PATH_MAX + 128], run_id[64];
        if (!h->force && find_finished(version_dir, point, rep, rec, sizeof rec)) {
            const char *slash = strrchr(rec, '/');
            tb_path_format(run_id, sizeof run_id, "%s", slash ? slash + 1 : rec);
            printf("  skip: %s repetition %d already finished as %s (--force re-runs)\n", version_dir, rep, run_id);
            push_run_result(L, rec, run_id, rep, seed, "finished", 1);
            lua_rawseti(L, -2, rep + 1);
            records[rep] = tb_xstrdup(rec, "record path");
            json_decref(config);
            continue;
        }
        tb_new_run_id(run_id, sizeof run_id);
        tb_path_format(rec, sizeof rec, "%s/%s", version_dir, run_id);
        char run_dir[PATH_MAX + 160];
        tb_path_format(run_dir, sizeof run_dir, "%s/" TB_RECORD_RUN_DIR, rec);
        lua_newtable(L);
        push_json(L, config);
        int cfg_idx = lua_gettop(L);
        json_t *resolved = json_object();
        int dummy;
        json_t *argv = build_argv(L, cfg_idx, h, run_dir, resolved, &dummy);
        json_decref(resolved);
        lua_pop(L, 2);
        if (h->dry_run) {
            printf("  dry run: ");
            for (size_t i = 0; i < json_array_size(argv); i++)
                printf("%s%s", i ? " " : "", json_string_value(json_array_get(argv, i)));
            char *text = json_dumps(config, JSON_COMPACT | JSON_SORT_KEYS);
            printf("\n    config %s\n", text);
            free(text);
            json_decref(argv);
            json_decref(config);
            continue;
        }
        tb_error err;
        const double t_start = tb_wall_s();
        if (tb_mkdir_p(rec, &err) != 0) luaL_error(L, "%s", err.msg);
        if (h->have_git && h->git.dirty) {
            char patch[PATH_MAX + 160];
            tb_path_format(patch, sizeof patch, "%s/" TB_RECORD_PATCH, rec);
            if (tb_write_file_atomic(patch, h->git.patch, strlen(h->git.patch), &err) != 0)
                luaL_error(L, "%s", err.msg);
        }
        char start[32];
        tb_iso_now(start, sizeof start);
        int run_no = ++h->runs_started;
        if (!h->tty) {
            printf("  run %d: %s repetition %d of %d (%s)\n", run_no, version_dir, rep + 1, repeats, run_id);
            fflush(stdout);
        }
        char label[96];
        snprintf(label, sizeof label, "%d (repetition %d of %d)", run_no, rep + 1, repeats);
        tb_run_outcome o = tb_run_engine(argv, rec, h->tty, label, iters);
        lua_getfield(L, 1, "name");
        lua_getfield(L, 1, "version");
        lua_getfield(L, 1, "question");
        tb_run_identity id = {lua_tostring(L, -3), lua_tointeger(L, -2), lua_tostring(L, -1), h->runbook,
                              h->runbook_sha256, seed, rep, point, NULL, h->have_git ? &h->git : NULL,
                              h->env_deny};
        int recorded = tb_record_finish(h->artifacts, rec, run_id, &id, argv, start, o, &err);
        lua_pop(L, 3);
        if (recorded != 0) luaL_error(L, "recording %s: %s", rec, err.msg);
        const double total = tb_wall_s() - t_start;
        // what recording costs: everything but the engine's own process time
        printf("  run %d %s in %.2f s: engine %.2f s, recording %.3f s (%.2f%%)\n", run_no,
               o.exit_status == 0 ? "done" : "ended", total, o.engine_s, total - o.engine_s,
               100.0 * (total - o.engine_s) / total);
        json_decref(argv);
        json_decref(config);
        if (o.interrupted) luaL_error(L, "interrupted: run %s recorded as incomplete", run_id);
        if (o.exit_status != 0) {
            char log[PATH_MAX + 160], line[512] = "", last[512] = "";
            tb_path_format(log, sizeof log, "%s/" TB_RECORD_STDERR, rec);
            FILE *f = fopen(log, "r");
            while (f && fgets(line, sizeof line, f))
                if (line[0] != '\n') memcpy(last, line, sizeof last);
            if (f) fclose(f);
            last[strcspn(last, "\n")] = '\0';
            luaL_error(L, "engine run %s failed (exit status %d): %s (see %s)", run_id, o.exit_status, last, log);
        }
        push_run_result(L, rec, run_id, rep, seed, "finished", 0);
        lua_rawseti(L, -2, rep + 1);
        records[rep] = tb_xstrdup(rec, "record path");
    }
    lua_setfield(L, -2, "runs");
    if (!h->dry_run) {
        lua_newtable(L);
        int n = 0;
        for (int i = 0; i < repeats; i++)
            if (records[i]) records[n++] = records[i];
        push_stat(L, "tokens_per_s", records, n, 1);
        push_stat(L, "step_ms", records, n, 1);
        lua_setfield(L, -2, "stats");
        for (int i = 0; i < n; i++) free(records[i]);
    }
    free(records);
    push_json(L, point);
    lua_setfield(L, -2, "config");
    json_decref(point);
    return 1;
}

// The record directories of `runs` (at idx): a result of exp:run, or a list of them.
static int collect_records(lua_State *L, int idx, char ***out) {
    int n = 0, cap = 8;
    char **recs = tb_xcalloc((size_t)cap, sizeof *recs, "claim records");
    lua_getfield(L, idx, "runs");
    int list = lua_istable(L, -1) ? 0 : 1;
    lua_pop(L, 1);
    lua_Integer count = list ? (lua_Integer)lua_rawlen(L, idx) : 1;
    for (lua_Integer k = 1; k <= count; k++) {
        if (list) lua_rawgeti(L, idx, k);
        else lua_pushvalue(L, idx);
        lua_getfield(L, -1, "runs");
        if (!lua_istable(L, -1)) luaL_error(L, "exp:claim: runs must be results of exp:run (or a list of them)");
        for (lua_Integer i = 1; i <= (lua_Integer)lua_rawlen(L, -1); i++) {
            lua_rawgeti(L, -1, i);
            lua_getfield(L, -1, "record");
            if (n == cap) recs = tb_xreallocarray(recs, (size_t)(cap *= 2), sizeof *recs, "claim records");
            recs[n++] = tb_xstrdup(luaL_checkstring(L, -1), "record path");
            lua_pop(L, 2);
        }
        lua_pop(L, 2);
    }
    *out = recs;
    return n;
}

// exp:claim{id=, parser=, runs=, args=, text=, value=, relative_tolerance=} → the number
// derived by the parser from the runs' raw files, stored in the version's claims.json.
static int l_claim(lua_State *L) {
    host *h = host_of(L);
    check_experiment(L, "claim");
    luaL_checktype(L, 2, LUA_TTABLE);
    lua_getfield(L, 2, "id");
    lua_getfield(L, 2, "parser");
    lua_getfield(L, 2, "text");
    const char *id = lua_tostring(L, -3), *parser = lua_tostring(L, -2), *text = lua_tostring(L, -1);
    if (!id || !is_identifier(id)) return luaL_error(L, "exp:claim: id must be a word (got %s)", id ? id : "nothing");
    if (!parser) return luaL_error(L, "exp:claim '%s': parser is required", id);
    if (!text) return luaL_error(L, "exp:claim '%s': text is required", id);
    if (h->dry_run) {
        lua_pushnil(L);
        return 1;
    }
    lua_getfield(L, 2, "runs");
    if (!lua_istable(L, -1)) return luaL_error(L, "exp:claim '%s': runs (results of exp:run) are required", id);
    char **recs;
    int n = collect_records(L, lua_gettop(L), &recs);
    lua_pop(L, 1);
    lua_getfield(L, 2, "args");
    json_t *args = lua_istable(L, -1) ? to_json(L, -1) : json_object();
    lua_pop(L, 1);
    lua_getfield(L, 2, "relative_tolerance");
    double tol = lua_isnumber(L, -1) ? lua_tonumber(L, -1) : 1e-9;
    lua_pop(L, 1);
    double value;
    json_t *evidence = NULL;
    tb_error err;
    int rc = tb_parse_claim(parser, args, (const char *const *)recs, n, &value, &evidence, &err);
    json_decref(evidence);
    if (rc != 0) {
        for (int i = 0; i < n; i++) free(recs[i]);
        free(recs);
        json_decref(args);
        return luaL_error(L, "exp:claim '%s': %s", id, err.msg);
    }
    lua_getfield(L, 2, "value");
    if (lua_isnumber(L, -1)) {
        double expected = lua_tonumber(L, -1);
        if (fabs(expected - value) > tol * fmax(fabs(expected), fabs(value))) {
            for (int i = 0; i < n; i++) free(recs[i]);
            free(recs);
            json_decref(args);
            return luaL_error(L, "exp:claim '%s': the runs give %.17g, the runbook claims %.17g", id, value, expected);
        }
    }
    lua_pop(L, 1);

    // claims.json of this experiment version: replace the claim with this id
    char version_dir[PATH_MAX + 64], path[PATH_MAX + 96];
    experiment_dir(L, 1, version_dir, sizeof version_dir);
    tb_path_format(path, sizeof path, "%s/" TB_EXPERIMENT_CLAIMS, version_dir);
    json_t *doc = json_load_file(path, 0, NULL);
    if (!json_is_object(doc)) {
        json_decref(doc);
        lua_getfield(L, 1, "name");
        lua_getfield(L, 1, "version");
        doc = json_pack("{s:s, s:I, s:[]}", "experiment", lua_tostring(L, -2), "version",
                        (json_int_t)lua_tointeger(L, -1), "claims");
        lua_pop(L, 2);
    }
    json_t *claims = json_object_get(doc, "claims"), *runs = json_array();
    for (size_t i = json_array_size(claims); i-- > 0;)
        if (!strcmp(json_string_value(json_object_get(json_array_get(claims, i), "id")) ?: "", id))
            json_array_remove(claims, i);
    for (int i = 0; i < n; i++) {
        const char *slash = strrchr(recs[i], '/');
        json_array_append_new(runs, json_string(slash ? slash + 1 : recs[i]));
        free(recs[i]);
    }
    free(recs);
    json_array_append_new(claims, json_pack("{s:s, s:s, s:f, s:s, s:o, s:o, s:f}", "id", id, "text", text, "value",
                                            value, "parser", parser, "args", args, "runs", runs,
                                            "relative_tolerance", tol));
    rc = tb_write_json_atomic(path, doc, &err);
    json_decref(doc);
    if (rc != 0) return luaL_error(L, "%s", err.msg);
    sqlite3 *db;
    if (tb_catalog_open(&db, h->artifacts, &err) == 0) {
        if (tb_catalog_add_claims(db, path, &err) != 0) fprintf(stderr, "tracebook: catalogue: %s\n", err.msg);
        sqlite3_close(db);
    }
    printf("  claim %s: %s = %.6g (parser %s, %d run%s)\n", id, text, value, parser, n, n == 1 ? "" : "s");
    lua_pushnumber(L, value);
    return 1;
}

// tb.sweep{a={1,2}, b={'x','y'}} → {{a=1,b='x'}, {a=1,b='y'}, {a=2,b='x'}, {a=2,b='y'}} (keys sorted)
static int l_sweep(lua_State *L) {
    luaL_checktype(L, 1, LUA_TTABLE);
    json_t *axes = to_json(L, 1);
    if (!json_is_object(axes)) return luaL_error(L, "tb.sweep: give {key = {values...}, ...}");
    size_t n = json_object_size(axes), total = 1, i = 0;
    const char **keys = tb_xcalloc(n ? n : 1, sizeof *keys, "sweep axes");
    const char *k;
    json_t *v;
    json_object_foreach(axes, k, v) {
        if (!json_is_array(v) || json_array_size(v) == 0) {
            free(keys);
            json_decref(axes);
            return luaL_error(L, "tb.sweep: '%s' must be a non-empty list of values", k);
        }
        keys[i++] = k;
        total *= json_array_size(v);
    }
    qsort(keys, n, sizeof *keys, cmp_key);
    lua_createtable(L, (int)total, 0);
    for (size_t p = 0; p < total; p++) {
        json_t *point = json_object();
        size_t rest = p;
        for (size_t a = n; a-- > 0;) {
            json_t *vals = json_object_get(axes, keys[a]);
            json_object_set(point, keys[a], json_array_get(vals, rest % json_array_size(vals)));
            rest /= json_array_size(vals);
        }
        push_json(L, point);
        lua_rawseti(L, -2, (lua_Integer)p + 1);
        json_decref(point);
    }
    free(keys);
    json_decref(axes);
    return 1;
}

static int l_param(lua_State *L) {
    host *h = host_of(L);
    const char *name = luaL_checkstring(L, 1);
    json_t *v = json_object_get(h->params, name);
    if (!v) {
        lua_settop(L, 2);
        return 1;
    }
    const char *s = json_string_value(v);
    char *end;
    double d = strtod(s, &end);
    if (*s && !*end) {
        if (d == (double)(lua_Integer)d && !strchr(s, '.') && !strchr(s, 'e')) lua_pushinteger(L, (lua_Integer)d);
        else lua_pushnumber(L, d);
    } else {
        lua_pushstring(L, s);
    }
    return 1;
}

static int l_assert(lua_State *L) {
    if (!lua_toboolean(L, 1)) return luaL_error(L, "assertion failed: %s", luaL_optstring(L, 2, "(no message)"));
    return 0;
}

static int l_read_json(lua_State *L) {
    const char *path = luaL_checkstring(L, 1);
    json_error_t e;
    json_t *j = json_load_file(path, 0, &e);
    if (!j) return luaL_error(L, "tb.read_json: %s:%d: %s", path, e.line, e.text);
    push_json(L, j);
    json_decref(j);
    return 1;
}

static int l_read_jsonl(lua_State *L) {
    const char *path = luaL_checkstring(L, 1);
    FILE *f = fopen(path, "r");
    if (!f) return luaL_error(L, "tb.read_jsonl: %s: %s", path, strerror(errno));
    lua_newtable(L);
    char line[1 << 16];
    lua_Integer n = 0;
    while (fgets(line, sizeof line, f)) {
        json_error_t e;
        json_t *j = json_loads(line, 0, &e);
        if (!j) {
            fclose(f);
            return luaL_error(L, "tb.read_jsonl: %s:%lld: %s", path, (long long)n + 1, e.text);
        }
        push_json(L, j);
        lua_rawseti(L, -2, ++n);
        json_decref(j);
    }
    fclose(f);
    return 1;
}

// ---------------------------------------------------------------------------------------
// tracebook run

static int traceback(lua_State *L) {
    const char *msg = lua_tostring(L, 1);
    luaL_traceback(L, L, msg ? msg : "(error object is not a string)", 1);
    return 1;
}

static void mark_experiments(host *h, const char *status, const char *error) {
    const char *key;
    json_t *e;
    json_object_foreach(h->experiments, key, e) {
        char path[PATH_MAX + 96];
        tb_path_format(path, sizeof path, "%s/" TB_EXPERIMENT_STATUS, key);
        json_object_set_new(e, "status", json_string(status));
        json_object_set_new(e, "error", error ? json_string(error) : json_null());
        json_object_set_new(e, "runbook", json_string(h->runbook));
        tb_error err;
        if (!h->dry_run && tb_write_json_atomic(path, e, &err) != 0) fprintf(stderr, "tracebook: %s\n", err.msg);
    }
}

static const tb_option run_options[] = {
    TB_OPTION("--set", host, sets, TB_OPT_LIST, NULL, "KEY=VALUE", "a parameter the runbook reads with tb.param"),
    TB_OPTION("--dry-run", host, dry_run, TB_OPT_BOOL, NULL, NULL, "print each engine run's argv and config; run nothing"),
    TB_OPTION("--require-clean", host, require_clean, TB_OPT_BOOL, NULL, NULL, "refuse to run from a dirty working tree"),
    TB_OPTION("--force", host, force, TB_OPT_BOOL, NULL, NULL, "re-run repetitions that already finished"),
    TB_OPTION("--env-deny", host, env_denied, TB_OPT_LIST, NULL, "GLOB",
              "also keep environment variables matching GLOB out of the manifests"),
    TB_ARTIFACTS_OPTION(host, artifacts),
    TB_OPTIONS_END};

static const tb_command run_command = {
    "tracebook run", "RUNBOOK.lua",
    "Runs a Lua runbook: each engine run recorded under <artifacts>/<experiment>/v<version>/<run-id>/\n"
    "with its provenance; claims derived from the records (runbooks/README.md documents the Lua API).\n"
    "Environment variables matching *TOKEN* *KEY* *PASSWORD* *SECRET* *CREDENTIAL* never reach a manifest.",
    run_options, 1, 1};

// The parsed command line into h: the --set values by key, the deny-list. 0, or -1 with err set.
static int host_from_args(host *h, tb_error *err) {
    h->params = json_object();
    h->experiments = json_object();
    for (int i = 0; i < h->sets.n; i++) {
        const char *kv = h->sets.items[i], *eq = strchr(kv, '=');
        if (!eq || eq == kv) return tb_fail(err, "tracebook run: flag --set: '%s' is not key=value", kv);
        char key[256];
        if (snprintf(key, sizeof key, "%.*s", (int)(eq - kv), kv) >= (int)sizeof key)
            return tb_fail(err, "tracebook run: flag --set: key of '%.40s...' is over %zu characters", kv,
                           sizeof key - 1);
        json_object_set_new(h->params, key, json_string(eq + 1));
    }
    int ndefault = 0;
    while (tb_default_env_deny[ndefault]) ndefault++;
    h->env_deny = tb_xcalloc((size_t)ndefault + (size_t)h->env_denied.n + 1, sizeof *h->env_deny, "env deny-list");
    for (int i = 0; i < ndefault; i++) h->env_deny[i] = tb_default_env_deny[i];
    for (int i = 0; i < h->env_denied.n; i++) h->env_deny[ndefault + i] = h->env_denied.items[i];
    return 0;
}

static void host_free(host *h) {
    if (h->have_git) tb_git_state_free(&h->git);
    json_decref(h->params);
    json_decref(h->experiments);
    free(h->env_deny);
    tb_strlist_free(&h->sets);
    tb_strlist_free(&h->env_denied);
}

int tracebook_run_main(int argc, char **argv) {
    host h;
    memset(&h, 0, sizeof h);
    tb_positional pos;
    tb_error err;
    int parsed = tb_command_parse(&run_command, &h, argc, argv, &pos, &err);
    if (parsed != 0) {
        host_free(&h);
        return parsed > 0 ? 0 : tb_command_usage_error(&run_command, &err);
    }
    const char *runbook = h.runbook = pos.items[0];
    tb_positional_free(&pos);
    if (host_from_args(&h, &err) != 0) {
        host_free(&h);
        return tb_command_usage_error(&run_command, &err);
    }
    if (tb_sha256_file(runbook, h.runbook_sha256, &err) != 0) {
        fprintf(stderr, "tracebook run: %s\n", err.msg);
        host_free(&h);
        return TB_EXIT_FAILURE;
    }
    // the engine sits beside this binary: build/bin/pretrain_gpt
    char self[PATH_MAX];
    ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
    if (len <= 0) {
        fprintf(stderr, "tracebook run: cannot find its own path (/proc/self/exe: %s)\n", strerror(errno));
        host_free(&h);
        return TB_EXIT_FAILURE;
    }
    self[len] = '\0';
    char *slash = strrchr(self, '/');
    if (slash) *slash = '\0';
    tb_path_format(h.engine, sizeof h.engine, "%s/pretrain_gpt", self);
    h.have_git = tb_git_describe(".", &h.git, &err) == 0;
    if (!h.have_git) fprintf(stderr, "tracebook run: no git provenance: %s\n", err.msg);
    if (h.require_clean && (!h.have_git || h.git.dirty)) {
        fprintf(stderr, "tracebook run: --require-clean: the working tree is %s\n",
                h.have_git ? "dirty (commit or stash first)" : "not a git repository");
        host_free(&h);
        return TB_EXIT_FAILURE;
    }
    h.tty = isatty(1);
    tb_recorder_install_sigint();

    lua_State *L = luaL_newstate();
    if (!L) {
        fprintf(stderr, "tracebook run: cannot create a Lua state (out of memory)\n");
        host_free(&h);
        return TB_EXIT_OUT_OF_MEMORY;
    }
    luaL_openlibs(L);
    lua_pushlightuserdata(L, &h);
    lua_setfield(L, LUA_REGISTRYINDEX, "tracebook.host");
    luaL_newmetatable(L, "tracebook.experiment");
    lua_newtable(L);
    lua_pushcfunction(L, l_run);
    lua_setfield(L, -2, "run");
    lua_pushcfunction(L, l_claim);
    lua_setfield(L, -2, "claim");
    lua_setfield(L, -2, "__index");
    lua_pop(L, 1);
    static const luaL_Reg tb_functions[] = {
        {"experiment", l_experiment}, {"sweep", l_sweep},         {"param", l_param},
        {"assert", l_assert},         {"read_json", l_read_json}, {"read_jsonl", l_read_jsonl},
        {NULL, NULL},
    };
    luaL_newlib(L, tb_functions);
    push_json(L, h.params);
    lua_setfield(L, -2, "params");
    lua_setglobal(L, "tb");
    // require() finds the shared helpers in runbooks/lib/ beside the runbook
    char dir[PATH_MAX];
    snprintf(dir, sizeof dir, "%s", runbook);
    char *cut = strrchr(dir, '/');
    if (cut) *cut = '\0';
    else snprintf(dir, sizeof dir, ".");
    lua_getglobal(L, "package");
    lua_pushfstring(L, "%s/lib/?.lua;", dir);
    lua_getfield(L, -2, "path");
    lua_concat(L, 2);
    lua_setfield(L, -2, "path");
    lua_pop(L, 1);

    printf("tracebook run %s%s\n", runbook, h.dry_run ? " (dry run: nothing is executed)" : "");
    if (h.have_git)
        printf("  commit %.12s on %s%s\n", h.git.commit, h.git.branch, h.git.dirty ? " (dirty: the diff is saved with each run)" : "");
    lua_pushcfunction(L, traceback);
    int rc = luaL_loadfile(L, runbook);
    if (rc == LUA_OK) rc = lua_pcall(L, 0, 0, -2);
    int status = 0;
    if (rc != LUA_OK) {
        const char *msg = lua_tostring(L, -1);
        fprintf(stderr, "tracebook run: %s\n", msg ? msg : "error");
        char first[1024];
        snprintf(first, sizeof first, "%s", msg ? msg : "error");
        first[strcspn(first, "\n")] = '\0';
        mark_experiments(&h, "failed", first);
        status = TB_EXIT_FAILURE;
    } else {
        mark_experiments(&h, "finished", NULL);
    }
    lua_close(L);
    host_free(&h);
    return tb_recorder_interrupted() ? 128 + SIGINT : status;
}
