// runbook_api.c — the Lua API of `tracebook run` but exp:run (runbook_run.c), documented for
// users in runbooks/README.md. One global table `tb`:
//   tb.experiment{name=, version=, question=, seed=}  → an experiment with :run and :claim
//   exp:run{<engine config>..., repeat_=N}            → results (per run: steps, record; stats)
//   exp:claim{id=, parser=, runs=, args=, text=, value=}  → the derived number
//   tb.sweep{key={v1, v2}, ...}                       → the cartesian product, as config tables
//   tb.param(name, default)                           → a --set value (number when numeric)
//   tb.assert(cond, message), tb.read_json(path), tb.read_jsonl(path)
//   tb.params                                         → every --set value, as strings
// Errors are Lua errors (luaL_error), so they carry the runbook's file:line.
#include <errno.h>
#include <jansson.h>
#include <lauxlib.h>
#include <limits.h>
#include <lua.h>
#include <math.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "catalog.h"
#include "core/fileio.h"
#include "core/run_dir.h"
#include "core/xalloc.h"
#include "lua_json.h"
#include "parsers.h"
#include "recorder.h"
#include "runbook_host.h"

// ---------------------------------------------------------------------------------------
// The host and the experiment objects

tb_runbook_host *tb_runbook_host_of(lua_State *L) {
    lua_getfield(L, LUA_REGISTRYINDEX, "tracebook.host");
    tb_runbook_host *h = lua_touserdata(L, -1);
    lua_pop(L, 1);
    return h;
}

// A name that can be a directory and an id: letters, digits, '_', '-' and '.'.
static int is_identifier(const char *s) {
    if (!*s) return 0;
    for (; *s; s++)
        if (!(('a' <= *s && *s <= 'z') || ('A' <= *s && *s <= 'Z') || ('0' <= *s && *s <= '9') || *s == '_' ||
              *s == '-' || *s == '.'))
            return 0;
    return 1;
}

int tb_runbook_experiment_dir(lua_State *L, int exp, char *buf, size_t len, tb_error *err) {
    tb_runbook_host *h = tb_runbook_host_of(L);
    lua_getfield(L, exp, "name");
    lua_getfield(L, exp, "version");
    int rc = tb_path_format(buf, len, err, "%s/%s/v%lld", h->artifacts, lua_tostring(L, -2),
                            (long long)lua_tointeger(L, -1));
    lua_pop(L, 2);
    return rc;
}

void tb_runbook_check_experiment(lua_State *L, const char *method) {
    int ok = lua_istable(L, 1) && lua_getmetatable(L, 1);
    if (ok) {
        luaL_getmetatable(L, "tracebook.experiment");
        ok = lua_rawequal(L, -1, -2);
        lua_pop(L, 2);
    }
    if (!ok) luaL_error(L, "%s: call it as exp:%s{...} on an experiment from tb.experiment", method, method);
}

// ---------------------------------------------------------------------------------------
// tb.experiment

static int l_experiment(lua_State *L) {
    tb_runbook_host *h = tb_runbook_host_of(L);
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

    char dir[PATH_MAX];
    tb_error err;
    if (tb_runbook_experiment_dir(L, lua_gettop(L), dir, sizeof dir, &err) != 0 ||
        (!h->dry_run && tb_mkdir_p(dir, &err) != 0))
        return luaL_error(L, "%s", err.msg);
    lua_getfield(L, -1, "question");
    json_object_set_new(h->experiments, dir, json_pack("{s:s, s:s, s:s}", "dir", dir, "question", lua_tostring(L, -1),
                                                       "status", "running"));
    lua_pop(L, 1);
    return 1;
}

// ---------------------------------------------------------------------------------------
// exp:claim

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
    tb_runbook_host *h = tb_runbook_host_of(L);
    tb_runbook_check_experiment(L, "claim");
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
    // claims.json of this experiment version, before anything is allocated that an error
    // (a longjmp) would leak
    char version_dir[PATH_MAX], path[PATH_MAX + 32];
    tb_error err;
    if (tb_runbook_experiment_dir(L, 1, version_dir, sizeof version_dir, &err) != 0 ||
        tb_path_format(path, sizeof path, &err, "%s/" TB_EXPERIMENT_CLAIMS, version_dir) != 0)
        return luaL_error(L, "exp:claim '%s': %s", id, err.msg);
    lua_getfield(L, 2, "runs");
    if (!lua_istable(L, -1)) return luaL_error(L, "exp:claim '%s': runs (results of exp:run) are required", id);
    char **recs;
    int n = collect_records(L, lua_gettop(L), &recs);
    lua_pop(L, 1);
    lua_getfield(L, 2, "args");
    json_t *args = lua_istable(L, -1) ? tb_lua_to_json(L, -1) : json_object();
    lua_pop(L, 1);
    lua_getfield(L, 2, "relative_tolerance");
    double tol = lua_isnumber(L, -1) ? lua_tonumber(L, -1) : 1e-9;
    lua_pop(L, 1);
    double value;
    json_t *evidence = NULL;
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

    // claims.json: replace the claim with this id
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
    json_t *axes = tb_lua_to_json(L, 1);
    if (!json_is_object(axes)) return luaL_error(L, "tb.sweep: give {key = {values...}, ...}");
    size_t n, total = 1;
    const char **keys = tb_json_sorted_keys(axes, &n);
    for (size_t i = 0; i < n; i++) {
        json_t *v = json_object_get(axes, keys[i]);
        if (!json_is_array(v) || json_array_size(v) == 0) {
            char bad[256];
            snprintf(bad, sizeof bad, "%s", keys[i]);
            free(keys);
            json_decref(axes);
            return luaL_error(L, "tb.sweep: '%s' must be a non-empty list of values", bad);
        }
        total *= json_array_size(v);
    }
    lua_createtable(L, (int)total, 0);
    for (size_t p = 0; p < total; p++) {
        json_t *point = json_object();
        size_t rest = p;
        for (size_t a = n; a-- > 0;) {
            json_t *vals = json_object_get(axes, keys[a]);
            json_object_set(point, keys[a], json_array_get(vals, rest % json_array_size(vals)));
            rest /= json_array_size(vals);
        }
        tb_lua_push_json(L, point);
        lua_rawseti(L, -2, (lua_Integer)p + 1);
        json_decref(point);
    }
    free(keys);
    json_decref(axes);
    return 1;
}

static int l_param(lua_State *L) {
    tb_runbook_host *h = tb_runbook_host_of(L);
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
    tb_lua_push_json(L, j);
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
        tb_lua_push_json(L, j);
        lua_rawseti(L, -2, ++n);
        json_decref(j);
    }
    fclose(f);
    return 1;
}

// ---------------------------------------------------------------------------------------
// Installing the API

void tb_runbook_open_api(lua_State *L, tb_runbook_host *h) {
    lua_pushlightuserdata(L, h);
    lua_setfield(L, LUA_REGISTRYINDEX, "tracebook.host");
    luaL_newmetatable(L, "tracebook.experiment");
    lua_newtable(L);
    lua_pushcfunction(L, tb_runbook_exp_run);
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
    tb_lua_push_json(L, h->params);
    lua_setfield(L, -2, "params");
    lua_setglobal(L, "tb");
}
