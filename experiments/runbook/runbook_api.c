// runbook_api.c — the Lua API of `tracebook run` but exp:run (runbook_run.c), documented for
// users in runbooks/README.md. One global table `tb`:
//   tb.experiment{name=, version=, question=, seed=}  → an experiment with :run and :claim
//   exp:run{<engine config>..., repeat_=N}            → results (per run: steps, record; stats)
//   exp:claim{id=, parser=, runs=, args=, text=, value= | at_most=, accept_oversubscribed=,
//             timing_tolerance=, min_window_s=, min_steps=, min_repetitions=}  → the derived number
//   tb.sweep{key={v1, v2}, ...}                       → the cartesian product, as config tables
//   tb.param(name, default)                           → a --set value (number when numeric)
//   tb.assert(cond, message), tb.read_json(path), tb.read_jsonl(path)
//   tb.params                                         → every --set value, as strings (read-only view)
// Errors are Lua errors (tb_rb_error, runbook_check.c), so they carry the runbook's file:line;
// every value a call is given is checked there (runbooks/README.md, "What the API checks").
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
#include <unistd.h>

#include "records/anchor.h"
#include "records/catalog.h"
#include "core/fileio.h"
#include "core/run_dir.h"
#include "core/xalloc.h"
#include "runbook/lua_json.h"
#include "prove/parsers.h"
#include "prove/prove_records.h"
#include "records/record_verify.h"
#include "records/recorder.h"
#include "runbook/runbook_host.h"
#include "prove/stability.h"

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
    if (!ok) tb_rb_error(L, "%s: call it as exp:%s{...} on an experiment from tb.experiment", method, method);
}

// ---------------------------------------------------------------------------------------
// tb.experiment

static int l_experiment(lua_State *L) {
    tb_runbook_host *h = tb_runbook_host_of(L);
    luaL_checktype(L, 1, LUA_TTABLE);
    static const char *const keys[] = {"name", "version", "question", "seed", NULL};
    tb_rb_check_keys(L, 1, "tb.experiment", keys);
    const char *name, *question;
    tb_rb_get_string(L, 1, "tb.experiment", "name", 1, &name);
    if (!is_identifier(name))
        return tb_rb_error(L, "tb.experiment: name must be a word of letters, digits, '_', '-' or '.' (got '%s')",
                           name);
    char what[160];
    snprintf(what, sizeof what, "tb.experiment '%s'", name);
    lua_Integer version, seed = 1234;
    tb_rb_get_integer(L, 1, what, "version", 1, 1, &version);
    tb_rb_get_string(L, 1, what, "question", 1, &question);
    tb_rb_get_integer(L, 1, what, "seed", 0, 0, &seed);  // the root of every run's seed (runbook_run.c)

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
    lua_pushinteger(L, version);
    lua_setfield(L, -2, "version");
    luaL_setmetatable(L, "tracebook.experiment");

    char dir[PATH_MAX];
    tb_error err;
    if (tb_runbook_experiment_dir(L, lua_gettop(L), dir, sizeof dir, &err) != 0 ||
        (!h->dry_run && tb_mkdir_p(dir, &err) != 0))
        return tb_rb_error(L, "%s", err.msg);
    json_object_set_new(h->experiments, dir, json_pack("{s:s, s:s, s:s}", "dir", dir, "question", question,
                                                       "status", "running"));
    return 1;
}

// ---------------------------------------------------------------------------------------
// exp:claim

// Pushes a list of the record directories of `runs` (at idx): a result of exp:run, or a list
// of them. Checked whole before anything is allocated that an error (a longjmp) would leak.
static void push_records(lua_State *L, int idx, const char *what) {
    idx = lua_absindex(L, idx);
    lua_newtable(L);
    lua_getfield(L, idx, "runs");
    const int single = lua_istable(L, -1);  // one result of exp:run, else a list of them
    lua_pop(L, 1);
    if (!single && !tb_rb_is_list(L, idx))
        tb_rb_error(L, "%s: runs must be a result of exp:run or a non-empty list of them", what);
    lua_Integer count = single ? 1 : (lua_Integer)lua_rawlen(L, idx), n = 0;
    for (lua_Integer k = 1; k <= count; k++) {
        if (single) lua_pushvalue(L, idx);
        else lua_rawgeti(L, idx, k);
        if (!lua_istable(L, -1) || lua_getfield(L, -1, "runs") != LUA_TTABLE)
            tb_rb_error(L, "%s: runs[%lld] is not a result of exp:run", what, (long long)k);
        for (lua_Integer i = 1; i <= (lua_Integer)lua_rawlen(L, -1); i++) {
            lua_rawgeti(L, -1, i);
            if (!lua_istable(L, -1) || lua_getfield(L, -1, "record") != LUA_TSTRING)
                tb_rb_error(L, "%s: run %lld of runs[%lld] has no record directory (not a result of exp:run?)",
                            what, (long long)i, (long long)k);
            for (lua_Integer j = 1; j <= n; j++) {  // a repetition is a separate run, counted once
                lua_rawgeti(L, -5, j);
                const int same = lua_rawequal(L, -1, -2);
                lua_pop(L, 1);
                if (same)
                    tb_rb_error(L, "%s: the run %s is listed twice (a repetition is a separate run, counted once)",
                                what, lua_tostring(L, -1));
            }
            lua_rawseti(L, -5, ++n);
            lua_pop(L, 1);
        }
        lua_pop(L, 2);
    }
}

typedef struct problems {
    char text[2048];
    size_t len;
} problems;

static void add_problem(void *ctx, const char *line) {
    problems *p = ctx;
    if (p->len < sizeof p->text) {
        int n = snprintf(p->text + p->len, sizeof p->text - p->len, "%s%s", p->len ? "; " : "", line);
        p->len += n > 0 ? (size_t)n : 0;
    }
}

// claims.json as the last claim left it, anchored (anchor.h), or absent and never anchored:
// 0; else -1 with err saying why. A claim extends the file and anchors the result, so a
// file changed in between (by hand, or a program the runbook started) would be vouched for
// by that anchor; it is refused instead.
// *stamp: the file as hashed (zeros when absent), for claims_unchanged after it is read.
static int claims_as_anchored(const char *artifacts, const char *version_dir, const char *path, tb_file_stamp *stamp,
                              tb_error *err) {
    char hex[65];
    *stamp = (tb_file_stamp){0};
    const int present = access(path, F_OK) == 0;
    if (present && tb_sha256_regular(path, hex, stamp, err) != 0) return -1;
    sqlite3 *db;
    if (tb_catalog_open(&db, artifacts, err) != 0) return -1;
    tb_anchor_verifier *v = tb_anchor_verifier_new(db);
    problems p = {.len = 0};
    tb_anchor_verify(v, version_dir, TB_ANCHOR_FILE, TB_EXPERIMENT_CLAIMS, present ? hex : NULL, add_problem, &p);
    tb_anchor_verifier_free(v);
    sqlite3_close(db);
    if (!p.len) return 0;
    return tb_fail(err, "%s is not as the last claim left it, so no claim extends it: %s (restore it as anchored, or "
                        "claim into a new version: tb.experiment{ version = N + 1 })", path, p.text);
}

// Refuses a second claim with the id of one made before in the same experiment version (it
// would silently replace the first in claims.json), naming both lines; else remembers this one.
static void check_claim_unique(lua_State *L, const char *version_dir, const char *id, const char *what) {
    if (lua_getfield(L, LUA_REGISTRYINDEX, "tracebook.claims") != LUA_TTABLE) {
        lua_pop(L, 1);
        lua_newtable(L);
        lua_pushvalue(L, -1);
        lua_setfield(L, LUA_REGISTRYINDEX, "tracebook.claims");
    }
    if (lua_getfield(L, -1, version_dir) != LUA_TTABLE) {  // this version's claims: id → where
        lua_pop(L, 1);
        lua_newtable(L);
        lua_pushvalue(L, -1);
        lua_setfield(L, -3, version_dir);
    }
    luaL_where(L, 1);  // "file:line: ", or "" where Lua cannot tell
    char here[512];
    snprintf(here, sizeof here, "%s", lua_tostring(L, -1));
    lua_pop(L, 1);
    size_t len = strlen(here);
    if (len >= 2 && !strcmp(here + len - 2, ": ")) here[len - 2] = '\0';
    if (lua_getfield(L, -1, id) == LUA_TSTRING)
        tb_rb_error(L, "%s: a claim with this id was already made in %s at %s (this one is at %s): claim ids are "
                       "unique within an experiment version", what, version_dir, lua_tostring(L, -1),
                    here[0] ? here : "an unknown line");
    lua_pop(L, 1);
    lua_pushstring(L, here[0] ? here : "an unknown line");
    lua_setfield(L, -2, id);
    lua_pop(L, 2);
}

// The claim table's sampling rule fields (stability.h) as claims.json stores them, checked
// by the rule prove applies (tb_sampling_from_claim): a refused value raises a Lua error
// naming the field and the value. Every field is read before anything is allocated.
static json_t *sampling_rule(lua_State *L, int idx, const char *what) {
    static const char *const keys[] = {"timing_tolerance", "min_window_s", "min_steps", "min_repetitions"};
    double v[4];
    int has[4];
    for (int k = 0; k < 4; k++) has[k] = tb_rb_get_number(L, idx, what, keys[k], 0, -HUGE_VAL, &v[k]);
    json_t *rule = json_object();
    for (int k = 0; k < 4; k++)
        if (has[k])
            json_object_set_new(rule, keys[k], v[k] == floor(v[k]) && fabs(v[k]) < 1e15 ? json_integer((json_int_t)v[k])
                                                                                     : json_real(v[k]));
    tb_sampling checked;
    char bad[512];
    if (tb_sampling_from_claim(rule, &checked, bad, sizeof bad) != 0) {
        json_decref(rule);
        tb_rb_error(L, "%s: %s", what, bad);
    }
    return rule;
}

// exp:claim{id=, parser=, runs=, args=, text=, value=, relative_tolerance=, at_most=} → the
// number derived by the parser from the runs' raw files, stored in the version's claims.json
// (with at_most: the bound, which the derived number must not exceed, instead of the number).
static int l_claim(lua_State *L) {
    tb_runbook_host *h = tb_runbook_host_of(L);
    tb_runbook_check_experiment(L, "claim");
    luaL_checktype(L, 2, LUA_TTABLE);
    static const char *const keys[] = {"id",      "parser", "runs", "args", "text", "value", "relative_tolerance",
                                       "at_most", "accept_oversubscribed", "timing_tolerance", "min_window_s",
                                       "min_steps", "min_repetitions", NULL};
    tb_rb_check_keys(L, 2, "exp:claim", keys);
    const char *id, *parser, *text;
    tb_rb_get_string(L, 2, "exp:claim", "id", 1, &id);
    if (!is_identifier(id))
        return tb_rb_error(L, "exp:claim: id must be a word of letters, digits, '_', '-' or '.' (got '%s')", id);
    char what[160];
    snprintf(what, sizeof what, "exp:claim '%s'", id);
    tb_rb_get_string(L, 2, what, "parser", 1, &parser);
    if (!tb_parser_definition(parser)) {
        char list[512] = "";
        size_t used = 0;
        for (int i = 0; tb_parser_names[i] && used < sizeof list; i++)
            used += (size_t)snprintf(list + used, sizeof list - used, "%s%s", i ? ", " : "", tb_parser_names[i]);
        return tb_rb_error(L, "%s: unknown parser '%s' (the parsers: %s)", what, parser, list);
    }
    tb_rb_get_string(L, 2, what, "text", 1, &text);
    double tol = 1e-9, expected = 0, bound = 0;
    const int has_tol = tb_rb_get_number(L, 2, what, "relative_tolerance", 0, 0, &tol);
    const int has_value = tb_rb_get_number(L, 2, what, "value", 0, -HUGE_VAL, &expected);
    // at_most bounds the derived number instead of stating it (prove checks derived <= bound)
    const int has_bound = tb_rb_get_number(L, 2, what, "at_most", 0, 0, &bound);
    if (has_bound && has_value)
        return tb_rb_error(L, "%s: value = %.17g and at_most = %.17g exclude each other (a claim states its number or "
                              "bounds it)", what, expected, bound);
    if (has_bound && has_tol)
        return tb_rb_error(L, "%s: relative_tolerance applies to value, not to at_most = %.17g", what, bound);
    // a timing claim whose runs oversubscribe the cores on purpose says so: prove then
    // accepts them and prints the condition (stability.h)
    int accept_oversubscribed = 0;
    if (lua_getfield(L, 2, "accept_oversubscribed") != LUA_TNIL) {
        if (!lua_isboolean(L, -1))
            return tb_rb_error(L, "%s: accept_oversubscribed must be true or false (got a %s)", what,
                               luaL_typename(L, -1));
        accept_oversubscribed = lua_toboolean(L, -1);
    }
    lua_pop(L, 1);
    json_decref(sampling_rule(L, 2, what));  // refused here as prove would refuse it
    if (lua_getfield(L, 2, "args") != LUA_TNIL) {
        if (!lua_istable(L, -1)) {
            char v[96];
            return tb_rb_error(L, "%s: args must be a table (got %s)", what, tb_rb_describe(L, -1, v, sizeof v));
        }
        tb_rb_check_json(L, -1, what, "args");
    }
    lua_pop(L, 1);
    if (lua_getfield(L, 2, "runs") != LUA_TTABLE)
        return tb_rb_error(L, "%s: runs (results of exp:run) are required", what);
    push_records(L, -1, what);  // checked in a dry run too, where its list is empty
    lua_remove(L, -2);
    const int records_idx = lua_gettop(L);
    char version_dir[PATH_MAX], path[PATH_MAX + 32];
    tb_error err;
    if (tb_runbook_experiment_dir(L, 1, version_dir, sizeof version_dir, &err) != 0 ||
        tb_path_format(path, sizeof path, &err, "%s/" TB_EXPERIMENT_CLAIMS, version_dir) != 0)
        return tb_rb_error(L, "%s: %s", what, err.msg);
    check_claim_unique(L, version_dir, id, what);
    if (h->dry_run) {
        lua_pushnil(L);
        return 1;
    }
    tb_file_stamp claims_stamp;
    if (claims_as_anchored(h->artifacts, version_dir, path, &claims_stamp, &err) != 0)
        return tb_rb_error(L, "%s: %s", what, err.msg);
    // from here no Lua error until what is allocated is freed
    int n = (int)lua_rawlen(L, records_idx);
    char **recs = tb_xcalloc((size_t)(n ? n : 1), sizeof *recs, "claim records");
    for (int i = 0; i < n; i++) {
        lua_rawgeti(L, records_idx, i + 1);
        recs[i] = tb_xstrdup(lua_tostring(L, -1), "record path");
        lua_pop(L, 1);
    }
    lua_getfield(L, 2, "args");
    json_t *args = lua_istable(L, -1) ? tb_lua_to_json(L, -1) : json_object();
    lua_pop(L, 1);
    double value;
    json_t *evidence = NULL;
    int rc = tb_parse_claim(parser, args, (const char *const *)recs, n, &value, &evidence, &err);
    strbuf twice = {0};  // a part's records (args) listing a run twice: prove refuses it (prove_records.h)
    if (rc == 0) check_distinct_runs(evidence, &twice, 0);
    if (twice.len) rc = tb_fail(&err, "%.*s", (int)strcspn(twice.s, "\n"), twice.s);
    free(twice.s);
    json_decref(evidence);
    if (rc != 0) {
        for (int i = 0; i < n; i++) free(recs[i]);
        free(recs);
        json_decref(args);
        return tb_rb_error(L, "exp:claim '%s': %s", id, err.msg);
    }
    if (has_value && fabs(expected - value) > tol * fmax(fabs(expected), fabs(value))) {
        for (int i = 0; i < n; i++) free(recs[i]);
        free(recs);
        json_decref(args);
        return tb_rb_error(L, "%s: the runs give %.17g, the runbook claims %.17g (relative tolerance %g)", what, value,
                           expected, tol);
    }
    if (has_bound && !(value <= bound)) {
        for (int i = 0; i < n; i++) free(recs[i]);
        free(recs);
        json_decref(args);
        return tb_rb_error(L, "%s: the runs give %.17g, above the bound at_most = %.17g", what, value, bound);
    }

    // claims.json: replace the claim with this id — in the file as it was checked against its
    // anchor before the parser ran (or still absent, as it was then)
    json_t *doc = json_load_file(path, 0, NULL);
    if (claims_stamp.ino ? tb_file_unchanged(path, &claims_stamp, &err) != 0
                         : access(path, F_OK) == 0 && tb_fail(&err, "%s: appeared while the claim was derived", path)) {
        for (int i = 0; i < n; i++) free(recs[i]);
        free(recs);
        json_decref(args);
        json_decref(doc);
        return tb_rb_error(L, "%s: %s", what, err.msg);
    }
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
    // a bounded claim stores its bound, not the derived number: prove re-derives that
    if (has_bound)
        json_array_append_new(claims, json_pack("{s:s, s:s, s:f, s:s, s:o, s:o}", "id", id, "text", text, "at_most",
                                                bound, "parser", parser, "args", args, "runs", runs));
    else
        json_array_append_new(claims, json_pack("{s:s, s:s, s:f, s:s, s:o, s:o, s:f}", "id", id, "text", text,
                                                "value", value, "parser", parser, "args", args, "runs", runs,
                                                "relative_tolerance", tol));
    json_t *stored = json_array_get(claims, json_array_size(claims) - 1);
    if (accept_oversubscribed) json_object_set_new(stored, "accept_oversubscribed", json_true());
    json_t *rule = sampling_rule(L, 2, what);  // checked above: raises nothing now
    json_object_update(stored, rule);
    json_decref(rule);
    rc = tb_write_json_atomic(path, doc, &err);
    json_decref(doc);
    if (rc != 0 || tb_anchor_version_file(h->artifacts, version_dir, TB_EXPERIMENT_CLAIMS, &err) != 0)
        return tb_rb_error(L, "%s", err.msg);
    sqlite3 *db;
    if (tb_catalog_open(&db, h->artifacts, &err) == 0) {
        if (tb_catalog_add_claims(db, path, &err) != 0) fprintf(stderr, "tracebook: catalogue: %s\n", err.msg);
        sqlite3_close(db);
    }
    if (has_bound)
        printf("  claim %s: %s: %.6g <= %.6g (parser %s, %d run%s)\n", id, text, value, bound, parser, n,
               n == 1 ? "" : "s");
    else
        printf("  claim %s: %s = %.6g (parser %s, %d run%s)\n", id, text, value, parser, n, n == 1 ? "" : "s");
    lua_pushnumber(L, value);
    return 1;
}

// tb.sweep{a={1,2}, b={'x','y'}} → {{a=1,b='x'}, {a=1,b='y'}, {a=2,b='x'}, {a=2,b='y'}} (keys sorted)
static int l_sweep(lua_State *L) {
    luaL_checktype(L, 1, LUA_TTABLE);
    // every axis is a config key with a non-empty list of values exp:run takes: checked here, so
    // a bad value is refused at the sweep's line rather than at one point's exp:run
    lua_pushnil(L);
    while (lua_next(L, 1)) {
        char k[96];
        if (lua_type(L, -2) != LUA_TSTRING)
            return tb_rb_error(L, "tb.sweep: axes are config keys, got [%s]: give {key = {values...}, ...}",
                               tb_rb_describe(L, -2, k, sizeof k));
        const char *key = lua_tostring(L, -2);
        if (!lua_istable(L, -1) || !tb_rb_is_list(L, -1)) {
            char v[96];
            tb_rb_describe(L, -1, v, sizeof v);
            return tb_rb_error(L, "tb.sweep: '%s' must be a non-empty list of values (got %s)", key,
                               strcmp(v, "a table") ? v : "a table with named keys or gaps");
        }
        for (lua_Integer i = 1; i <= (lua_Integer)lua_rawlen(L, -1); i++) {
            char name[160];
            snprintf(name, sizeof name, "%s[%lld]", key, (long long)i);
            lua_rawgeti(L, -1, i);
            char what[200];
            snprintf(what, sizeof what, "tb.sweep %s", name);
            tb_runbook_check_config_value(L, what, key, -1);
            lua_pop(L, 1);
        }
        lua_pop(L, 1);
    }
    json_t *axes = tb_lua_to_json(L, 1);
    if (!json_is_object(axes)) {
        json_decref(axes);
        return tb_rb_error(L, "tb.sweep: give {key = {values...}, ...}");
    }
    size_t n, total = 1;
    const char **keys = tb_json_sorted_keys(axes, &n);
    for (size_t i = 0; i < n; i++) total *= json_array_size(json_object_get(axes, keys[i]));
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

// A --set value as a Lua number: decimal text only ("nan", "inf", "0x10" stay strings), an
// integer when it has no '.' or exponent and fits. 1 with the number pushed, 0 when the text is
// not a number, -1 when it is one out of range (1e999).
static int push_param_number(lua_State *L, const char *s) {
    if (!*s || !strchr("+-.0123456789", *s) || strpbrk(s, "xXnNiI")) return 0;
    char *end;
    errno = 0;
    long long i = strtoll(s, &end, 10);
    if (!*end && errno == 0) {
        lua_pushinteger(L, (lua_Integer)i);
        return 1;
    }
    errno = 0;
    double d = strtod(s, &end);
    if (*end) return 0;
    if (!isfinite(d) || (errno == ERANGE && fabs(d) > 1)) return -1;
    lua_pushnumber(L, d);
    return 1;
}

// tb.param(name, default) → the --set value of name (a number when it reads as one; true/false
// when the default is a boolean), else default. A value that cannot be what the default is
// (iters=abc for a number) is refused, naming the parameter.
static int l_param(lua_State *L) {
    tb_runbook_host *h = tb_runbook_host_of(L);
    char v[96];
    if (lua_type(L, 1) != LUA_TSTRING || lua_rawlen(L, 1) == 0)
        return tb_rb_error(L, "tb.param: the name must be a non-empty string (got %s)",
                           tb_rb_describe(L, 1, v, sizeof v));
    const char *name = lua_tostring(L, 1);
    char what[160];
    snprintf(what, sizeof what, "tb.param '%s'", name);
    const int dt = lua_type(L, 2);
    if (dt != LUA_TNONE && dt != LUA_TNIL) tb_rb_check_scalar(L, 2, what, "the default");
    json_object_set_new(h->params_read, name, json_true());
    const char *s = json_string_value(json_object_get(h->params, name));
    if (!s) {
        lua_settop(L, 2);
        return 1;
    }
    if (dt == LUA_TBOOLEAN) {
        if (strcmp(s, "true") && strcmp(s, "false") && strcmp(s, "1") && strcmp(s, "0"))
            return tb_rb_error(L, "%s: --set %s=%s is not true or false (the default is a boolean)", what, name, s);
        lua_pushboolean(L, !strcmp(s, "true") || !strcmp(s, "1"));
        return 1;
    }
    const int number = push_param_number(L, s);
    if (number < 0) return tb_rb_error(L, "%s: --set %s=%s is not a finite number", what, name, s);
    if (!number && dt == LUA_TNUMBER)
        return tb_rb_error(L, "%s: --set %s=%s is not a number (the default, %s, is)", what, name, s,
                           tb_rb_describe(L, 2, v, sizeof v));
    if (!number) lua_pushstring(L, s);
    return 1;
}

// tb.params[key]: the --set value (a string), the key marked read.
static int l_params_index(lua_State *L) {
    tb_runbook_host *h = tb_runbook_host_of(L);
    if (lua_type(L, 2) == LUA_TSTRING) json_object_set_new(h->params_read, lua_tostring(L, 2), json_true());
    lua_pushvalue(L, 2);
    lua_rawget(L, lua_upvalueindex(1));
    return 1;
}

// pairs(tb.params): every --set value, all marked read.
static int l_params_pairs(lua_State *L) {
    tb_runbook_host *h = tb_runbook_host_of(L);
    const char *key;
    json_t *v;
    json_object_foreach(h->params, key, v) json_object_set_new(h->params_read, key, json_true());
    lua_getglobal(L, "next");
    lua_pushvalue(L, lua_upvalueindex(1));
    lua_pushnil(L);
    return 3;
}

static int l_assert(lua_State *L) {
    if (!lua_toboolean(L, 1)) return tb_rb_error(L, "assertion failed: %s", luaL_optstring(L, 2, "(no message)"));
    return 0;
}

static int l_read_json(lua_State *L) {
    const char *path = luaL_checkstring(L, 1);
    json_error_t e;
    json_t *j = json_load_file(path, 0, &e);
    if (!j) return tb_rb_error(L, "tb.read_json: %s:%d: %s", path, e.line, e.text);
    tb_lua_push_json(L, j);
    json_decref(j);
    return 1;
}

static int l_read_jsonl(lua_State *L) {
    const char *path = luaL_checkstring(L, 1);
    FILE *f = fopen(path, "r");
    if (!f) return tb_rb_error(L, "tb.read_jsonl: %s: %s", path, strerror(errno));
    lua_newtable(L);
    char line[1 << 16];
    lua_Integer n = 0;
    while (fgets(line, sizeof line, f)) {
        json_error_t e;
        json_t *j = json_loads(line, 0, &e);
        if (!j) {
            fclose(f);
            return tb_rb_error(L, "tb.read_jsonl: %s:%lld: %s", path, (long long)n + 1, e.text);
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
    lua_pushcfunction(L, tb_runbook_exp_plan);  // runbook_plan.c
    lua_setfield(L, -2, "plan");
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
    // tb.params: an empty table whose reads go to the values (upvalue 1), each read key
    // marked read (pairs marks them all), so that a --set nothing reads is an error
    lua_newtable(L);
    lua_newtable(L);
    tb_lua_push_json(L, h->params);
    lua_pushcclosure(L, l_params_index, 1);
    lua_setfield(L, -2, "__index");
    tb_lua_push_json(L, h->params);
    lua_pushcclosure(L, l_params_pairs, 1);
    lua_setfield(L, -2, "__pairs");
    lua_setmetatable(L, -2);
    lua_setfield(L, -2, "params");
    lua_setglobal(L, "tb");
}
