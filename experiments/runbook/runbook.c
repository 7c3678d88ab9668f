// runbook.c — `tracebook run RUNBOOK.lua`: the command around the Lua host.
//
// Parses the flags, finds the engine beside this binary (build/bin/pretrain_gpt), describes the
// source tree's git state once, then runs the runbook in a Lua state with the API of
// runbook_api.c and runbook_run.c. Errors anywhere in the runbook (syntax, runtime, an unknown
// config key, a failed engine run) end it with file:line and a traceback, mark its
// experiments failed (experiment.json) and give a non-zero exit status.
#include "runbook/runbook.h"

#include <dirent.h>
#include <errno.h>
#include <jansson.h>
#include <lauxlib.h>
#include <limits.h>
#include <lua.h>
#include <lualib.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "records/anchor.h"
#include "records/catalog.h"
#include "records/signing.h"
#include "core/fileio.h"
#include "core/options.h"
#include "core/run_dir.h"
#include "core/xalloc.h"
#include "records/provenance.h"
#include "records/recorder.h"
#include "reports/report.h"
#include "runbook/runbook_host.h"

// A Lua value for a message, into buf at *used: tables as {1, 2, key=value} (two levels,
// then {...}), strings quoted, a __tostring object as what it says.
static void render(lua_State *L, int idx, char *buf, size_t len, size_t *used, int depth) {
    idx = lua_absindex(L, idx);
#define PUT(...) (*used += (size_t)snprintf(buf + *used, *used < len ? len - *used : 0, __VA_ARGS__))
    if (*used >= len) return;
    if (luaL_getmetafield(L, idx, "__tostring") != LUA_TNIL) {
        lua_pop(L, 1);
        PUT("%s", luaL_tolstring(L, idx, NULL));
        lua_pop(L, 1);
    } else if (lua_type(L, idx) == LUA_TSTRING) {
        PUT("\"%s\"", lua_tostring(L, idx));
    } else if (lua_type(L, idx) != LUA_TTABLE) {
        PUT("%s", luaL_tolstring(L, idx, NULL));  // nil, true, 42, 1.5, function: 0x...
        lua_pop(L, 1);
    } else if (depth >= 2) {
        PUT("{...}");
    } else {
        PUT("{");
        const lua_Integer n = (lua_Integer)lua_rawlen(L, idx);
        int first = 1;
        for (lua_Integer i = 1; i <= n; i++, first = 0) {  // the list part in order
            PUT("%s", first ? "" : ", ");
            lua_rawgeti(L, idx, i);
            render(L, -1, buf, len, used, depth + 1);
            lua_pop(L, 1);
        }
        lua_pushnil(L);
        while (lua_next(L, idx)) {
            if (!(lua_isinteger(L, -2) && lua_tointeger(L, -2) >= 1 && lua_tointeger(L, -2) <= n)) {
                PUT("%s", first ? "" : ", ");
                first = 0;
                if (lua_type(L, -2) == LUA_TSTRING) PUT("%s=", lua_tostring(L, -2));
                else {
                    PUT("[");
                    render(L, -2, buf, len, used, depth + 1);
                    PUT("]=");
                }
                render(L, -1, buf, len, used, depth + 1);
            }
            lua_pop(L, 1);
        }
        PUT("}");
    }
#undef PUT
}

// The message handler: the error with a traceback. A string error carries its position
// already (error("...") adds it); any other error object — error({code = 42}), error(nil) —
// gets the position of the innermost Lua function on the stack, where the error was raised, and
// a rendering of the object, so it too says file:line and what was raised.
static int traceback(lua_State *L) {
    if (lua_type(L, 1) == LUA_TSTRING) {
        luaL_traceback(L, L, lua_tostring(L, 1), 1);
        return 1;
    }
    char where[512], what[1024];
    tb_rb_lua_where(L, where, sizeof where);
    size_t used = 0;
    render(L, 1, what, sizeof what, &used, 0);
    if (used >= sizeof what) memcpy(what + sizeof what - 4, "...", 4);
    char msg[1600];
    if (lua_isnil(L, 1)) snprintf(msg, sizeof msg, "%serror object is nil", where);
    else snprintf(msg, sizeof msg, "%serror object is a %s: %s", where, luaL_typename(L, 1), what);
    luaL_traceback(L, L, msg, 1);
    return 1;
}

// The --set keys the runbook never read, as one message into buf: 1 when there are any.
static int unread_params(const tb_runbook_host *h, char *buf, size_t len) {
    const char *key;
    json_t *v;
    size_t used = 0;
    int n = 0;
    buf[0] = '\0';
    json_object_foreach(h->params, key, v) {
        if (json_object_get(h->params_read, key)) continue;
        used += (size_t)snprintf(buf + (used < len ? used : len - 1), used < len ? len - used : 1, "%s--set %s=%s",
                                 n++ ? ", " : "", key, json_string_value(v));
    }
    if (!n) return 0;
    size_t at = used < len ? used : len - 1;
    snprintf(buf + at, len - at, ": the runbook %s never reads %s (tb.param): misspelled?", h->runbook,
             n == 1 ? "this parameter" : "these parameters");
    return 1;
}

// A Lua count hook: once SIGINT or SIGTERM has come, every 10,000 instructions raise an
// error, so a runbook in a loop stops.
static void interrupt_hook(lua_State *L, lua_Debug *ar) {
    (void)ar;
    const int sig = tb_recorder_interrupted();
    if (sig) luaL_error(L, "interrupted by %s", sig == SIGTERM ? "SIGTERM" : "SIGINT");
}

// pcall, xpcall and coroutine.resume as the stock ones (upvalue 1), but once the host is
// interrupted whatever they caught is raised again: a runbook cannot catch its interruption.
static int l_rethrow_if_interrupted(lua_State *L) {
    const int n = lua_gettop(L);
    lua_pushvalue(L, lua_upvalueindex(1));
    lua_insert(L, 1);
    lua_call(L, n, LUA_MULTRET);
    const int sig = tb_recorder_interrupted();
    if (sig) luaL_error(L, "interrupted by %s", sig == SIGTERM ? "SIGTERM" : "SIGINT");
    return lua_gettop(L);
}

static void wrap_catchers(lua_State *L) {
    static const char *const globals[] = {"pcall", "xpcall"};
    for (size_t i = 0; i < sizeof globals / sizeof *globals; i++) {
        lua_getglobal(L, globals[i]);
        lua_pushcclosure(L, l_rethrow_if_interrupted, 1);
        lua_setglobal(L, globals[i]);
    }
    lua_getglobal(L, "coroutine");
    lua_getfield(L, -1, "resume");
    lua_pushcclosure(L, l_rethrow_if_interrupted, 1);
    lua_setfield(L, -2, "resume");
    lua_pop(L, 1);
}

// load as the stock one (upvalue 1), for text chunks only: a binary chunk is bytecode, which
// Lua does not verify (a crafted one corrupts the host's memory).
static int l_load_text(lua_State *L) {
    const char *mode = luaL_optstring(L, 3, "t");
    if (strcmp(mode, "t")) return luaL_error(L, "load: runbooks load text chunks only (mode 't'; got '%s')", mode);
    // the caller's arguments as given, mode "t" third: a fourth (env) only when the caller gave
    // one — stock load takes a nil there as the chunk's _ENV, not as "the globals"
    const int n = lua_gettop(L) < 3 ? 3 : lua_gettop(L);
    lua_settop(L, n);
    lua_pushliteral(L, "t");
    lua_replace(L, 3);
    lua_pushvalue(L, lua_upvalueindex(1));
    lua_insert(L, 1);
    lua_call(L, n, LUA_MULTRET);
    return lua_gettop(L);
}

// package.searchers[2] for text only: a module found on package.path is loaded as text (a
// precompiled chunk in runbooks/lib would be bytecode, which Lua does not verify).
static int l_search_lua_text(lua_State *L) {
    const char *name = luaL_checkstring(L, 1);
    lua_pushvalue(L, lua_upvalueindex(1));  // the package table, as the stock searcher holds it
    lua_getfield(L, -1, "searchpath");
    lua_pushvalue(L, 1);
    lua_getfield(L, -3, "path");
    lua_call(L, 2, 2);  // the file, or nil and the places tried
    if (lua_type(L, -2) != LUA_TSTRING) return 1;  // the places tried: require lists them
    const char *file = lua_tostring(L, -2);
    if (luaL_loadfilex(L, file, "t") != LUA_OK)
        return luaL_error(L, "error loading module '%s' from file '%s':\n\t%s", name, file, lua_tostring(L, -1));
    lua_pushstring(L, file);  // the loader's second argument, as the stock searcher gives it
    return 2;
}

// The Lua a runbook runs in (runbooks/README.md, "The Lua a runbook gets"): the base library,
// package (require of Lua files), coroutine, table, string, math, utf8, and of os what reads
// the clock and the environment. No io, no os.execute, remove, rename, tmpname or setlocale,
// no debug, no C modules (package.loadlib, the C searchers), no dofile or loadfile, load for
// text only: what a runbook leaves behind goes through exp:run and exp:claim, which record and
// anchor it; a file it could write itself (a claims.json holding a number of its own, a
// ledger line) would go around both.
static void open_runbook_libs(lua_State *L) {
    static const luaL_Reg libs[] = {{LUA_GNAME, luaopen_base},         {LUA_LOADLIBNAME, luaopen_package},
                                    {LUA_COLIBNAME, luaopen_coroutine}, {LUA_TABLIBNAME, luaopen_table},
                                    {LUA_OSLIBNAME, luaopen_os},        {LUA_STRLIBNAME, luaopen_string},
                                    {LUA_MATHLIBNAME, luaopen_math},    {LUA_UTF8LIBNAME, luaopen_utf8}};
    for (size_t i = 0; i < sizeof libs / sizeof *libs; i++) {
        luaL_requiref(L, libs[i].name, libs[i].func, 1);
        lua_pop(L, 1);
    }
    static const char *const os_left_out[] = {"execute", "remove", "rename", "tmpname", "setlocale"};
    lua_getglobal(L, LUA_OSLIBNAME);
    for (size_t i = 0; i < sizeof os_left_out / sizeof *os_left_out; i++) {
        lua_pushnil(L);
        lua_setfield(L, -2, os_left_out[i]);
    }
    lua_pop(L, 1);
    lua_getglobal(L, LUA_LOADLIBNAME);
    lua_pushnil(L);
    lua_setfield(L, -2, "loadlib");
    lua_getfield(L, -1, "searchers");  // 1 preload, 2 Lua files (text only here), 3 and 4 C libraries
    for (lua_Integer k = (lua_Integer)lua_rawlen(L, -1); k > 2; k--) {
        lua_pushnil(L);
        lua_rawseti(L, -2, k);
    }
    lua_pushvalue(L, -2);  // the package table
    lua_pushcclosure(L, l_search_lua_text, 1);
    lua_rawseti(L, -2, 2);
    lua_pop(L, 2);
    lua_pushnil(L);
    lua_setglobal(L, "dofile");
    lua_pushnil(L);
    lua_setglobal(L, "loadfile");
    lua_getglobal(L, "load");
    lua_pushcclosure(L, l_load_text, 1);
    lua_setglobal(L, "load");
}

// Writes each declared experiment's experiment.json with the runbook's outcome (exit_code >= 0:
// the status os.exit gave). One that cannot be written is reported and the others are still
// written: 0, or -1 when any failed.
static int mark_experiments(tb_runbook_host *h, const char *status, const char *error, int exit_code) {
    const char *key;
    json_t *e;
    int rc = 0;
    json_object_foreach(h->experiments, key, e) {
        json_object_set_new(e, "status", json_string(status));
        json_object_set_new(e, "error", error ? json_string(error) : json_null());
        json_object_set_new(e, "runbook", json_string(h->runbook));
        if (exit_code >= 0) json_object_set_new(e, "exit_code", json_integer(exit_code));
        char path[PATH_MAX + 96];
        tb_error err;
        if (tb_path_format(path, sizeof path, &err, "%s/" TB_EXPERIMENT_STATUS, key) != 0 ||
            (!h->dry_run && (tb_write_json_atomic(path, e, &err) != 0 ||
                             tb_anchor_version_file(h->artifacts, key, TB_EXPERIMENT_STATUS, &err) != 0))) {
            fprintf(stderr, "tracebook: %s\n", err.msg);
            rc = -1;
        }
    }
    return rc;
}

// --sign: each declared experiment version's ledger head signed (signing.h), after its
// experiment.json was written; a version that cannot be signed is reported: 0, or -1.
static int sign_experiments(tb_runbook_host *h) {
    const char *key;
    json_t *e;
    int rc = 0;
    json_object_foreach(h->experiments, key, e) {
        struct stat st;
        if (stat(key, &st) != 0) continue;  // nothing was recorded for it
        long long seq;
        char id[TB_KEY_ID_MAX];
        tb_error err;
        if (tb_sign_version(h->artifacts, key, h->sign_key, &seq, id, &err) == 0) {
            printf("  signed %s at seq %lld with %s\n", key, seq, id);
        } else {
            fprintf(stderr, "tracebook run: %s\n", err.msg);
            rc = -1;
        }
    }
    fflush(stdout);
    return rc;
}

// Writes (or refreshes) each declared experiment's report (report.h) and prints its path. A
// report that cannot be written loses nothing — the runs and claims are recorded before — but
// the command says so and fails, as it does when experiment.json cannot be written: 0, or -1.
static int write_reports(tb_runbook_host *h) {
    const char *key;
    json_t *e;
    int rc = 0;
    json_object_foreach(h->experiments, key, e) {
        char written[PATH_MAX + 64];
        tb_error err;
        struct stat st;
        if (stat(key, &st) != 0) continue;  // nothing was recorded for it (an error before its first run)
        if (tb_report_write(key, NULL, written, sizeof written, &err) == 0) {
            printf("  report %s\n", written);
        } else {
            fprintf(stderr, "tracebook run: %s: the runs and claims are recorded, but the report was not written: %s\n",
                    key, err.msg);
            rc = -1;
        }
    }
    fflush(stdout);
    return rc;
}

// os.exit in a runbook: the stock one ends the process at once, and the experiments it declared
// were left "running" with no outcome. This one first records them as interrupted, with the
// exit status and the runbook's line, then calls the stock os.exit (upvalue 1) with the same
// arguments, so the process ends exactly as os.exit would. Recording before exiting, rather
// than raising an error for the host to catch, is the robust way: a pcall, xpcall or
// coroutine in the runbook would catch such an error and carry on, where os.exit must end it.
// Nothing needs unwinding: os.exit is called from Lua, so no exp:run (and no engine) is live.
static int l_exit(lua_State *L) {
    tb_runbook_host *h = tb_runbook_host_of(L);
    const int code = lua_isboolean(L, 1) ? (lua_toboolean(L, 1) ? EXIT_SUCCESS : EXIT_FAILURE)
                                         : (int)luaL_optinteger(L, 1, EXIT_SUCCESS);
    char where[512], msg[600];
    snprintf(msg, sizeof msg, "%sos.exit(%d) ended the runbook", tb_rb_lua_where(L, where, sizeof where), code);
    fprintf(stderr, "tracebook run: %s: the experiments are recorded as interrupted\n", msg);
    mark_experiments(h, "interrupted", msg, code);
    lua_pushvalue(L, lua_upvalueindex(1));
    lua_insert(L, 1);
    lua_call(L, lua_gettop(L) - 1, 0);
    return 0;  // not reached: the stock os.exit does not return
}

typedef tb_runbook_host host;  // the option table's target

static const tb_option run_options[] = {
    TB_OPTION("--set", host, sets, TB_OPT_LIST, NULL, "KEY=VALUE", "a parameter the runbook reads with tb.param"),
    TB_OPTION("--dry-run", host, dry_run, TB_OPT_BOOL, NULL, NULL, "print each engine run's argv and config; run nothing"),
    TB_OPTION("--json", host, json, TB_OPT_BOOL, NULL, NULL,
              "the progress on stderr, and on stdout one JSON document: each experiment version, its runs and claims"),
    TB_OPTION("--require-clean", host, require_clean, TB_OPT_BOOL, NULL, NULL, "refuse to run from a dirty working tree"),
    TB_OPTION("--force", host, force, TB_OPT_BOOL, NULL, NULL, "re-run repetitions that already finished"),
    TB_OPTION("--sign", host, sign_key, TB_OPT_STRING, NULL, "KEY.pem",
              "at the end, sign each experiment version's ledger head with this Ed25519 key (tracebook sign)"),
    TB_OPTION("--env-allow", host, env_allowed, TB_OPT_LIST, NULL, "NAME_OR_GLOB",
              "also record environment variables matching NAME_OR_GLOB in the manifests"),
    TB_OPTION("--env-deny", host, env_denied, TB_OPT_LIST, NULL, "GLOB",
              "also keep environment variables matching GLOB out of the manifests (wins over --env-allow)"),
    TB_ARTIFACTS_OPTION(host, artifacts),
    TB_OPTIONS_END};

static const tb_command run_command = {
    "tracebook run", "RUNBOOK.lua",
    "Runs a Lua runbook: each engine run recorded under <artifacts>/<experiment>/v<version>/<run-id>/\n"
    "with its provenance; claims derived from the records (runbooks/README.md documents the Lua API).\n"
    TB_ENV_POLICY_HELP,
    run_options, 1, 1,
    "tracebook run runbooks/quickstart.lua\n"
    "tracebook run runbooks/tp_scaling.lua --set max_tp=4 --json",
    "the runbook failed (its error named), a run it needed failed, or a --set it never read"};

static int cmp_names(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

// The run ids of a version directory (its entries holding a manifest), sorted (ids start with
// their start time).
static json_t *version_runs(const char *version_dir) {
    char **ids = NULL;
    size_t n = 0;
    DIR *d = opendir(version_dir);
    struct dirent *de;
    while (d && (de = readdir(d))) {
        char manifest[PATH_MAX + 300];
        snprintf(manifest, sizeof manifest, "%s/%s/" TB_RECORD_MANIFEST, version_dir, de->d_name);
        if (de->d_name[0] == '.' || access(manifest, F_OK) != 0) continue;
        ids = tb_xreallocarray(ids, n + 1, sizeof *ids, "run ids");
        ids[n++] = tb_xstrdup(de->d_name, "run id");
    }
    if (d) closedir(d);
    if (n) qsort(ids, n, sizeof *ids, cmp_names);
    json_t *runs = json_array();
    for (size_t i = 0; i < n; i++) {
        json_array_append_new(runs, json_string(ids[i]));
        free(ids[i]);
    }
    free(ids);
    return runs;
}

// --json: what the runbook recorded, per declared experiment version: its experiment.json
// object, the run ids under it and its claims.json's claims (null when it wrote none).
static void print_outcome_json(const tb_runbook_host *h, int status, FILE *out) {
    json_t *versions = json_array();
    const char *key;
    json_t *e;
    json_object_foreach(h->experiments, key, e) {
        json_t *v = json_deep_copy(e);
        json_object_set_new(v, "version_dir", json_string(key));
        json_object_set_new(v, "runs", version_runs(key));
        char claims_path[PATH_MAX + 32];
        snprintf(claims_path, sizeof claims_path, "%s/" TB_EXPERIMENT_CLAIMS, key);
        json_t *claims = json_load_file(claims_path, 0, NULL);
        json_object_set(v, "claims", claims ? json_object_get(claims, "claims") : json_null());
        json_decref(claims);
        json_array_append_new(versions, v);
    }
    json_t *doc = json_pack("{s:s, s:b, s:i, s:o}", "runbook", h->runbook, "dry_run", h->dry_run, "exit_status",
                            status, "experiments", versions);
    json_dumpf(doc, out, JSON_INDENT(1) | JSON_REAL_PRECISION(17));
    fputc('\n', out);
    json_decref(doc);
}

// The parsed command line into h: the --set values by key, the deny-list. 0, or -1 with err set.
static int host_from_args(tb_runbook_host *h, tb_error *err) {
    h->params = json_object();
    h->experiments = json_object();
    for (int i = 0; i < h->sets.n; i++) {
        const char *kv = h->sets.items[i], *eq = strchr(kv, '=');
        if (!eq || eq == kv) return tb_fail(err, "tracebook run: flag --set: '%s' is not key=value", kv);
        char key[256];
        if (snprintf(key, sizeof key, "%.*s", (int)(eq - kv), kv) >= (int)sizeof key)
            return tb_fail(err, "tracebook run: flag --set: key of '%.40s...' is over %zu characters", kv,
                           sizeof key - 1);
        const char *before = json_string_value(json_object_get(h->params, key));
        if (before)
            return tb_fail(err, "tracebook run: flag --set: '%s' is set twice (%s=%s, then %s): give it once", key, key,
                           before, kv);
        json_object_set_new(h->params, key, json_string(eq + 1));
    }
    h->params_read = json_object();
    if (tb_env_globs_check("tracebook run", &h->env_allowed, "--env-allow", err) != 0 ||
        tb_env_globs_check("tracebook run", &h->env_denied, "--env-deny", err) != 0)
        return -1;
    h->env_allow = tb_globs_with(tb_default_env_allow, h->env_allowed.items, h->env_allowed.n);
    h->env_deny = tb_globs_with(tb_default_env_deny, h->env_denied.items, h->env_denied.n);
    char id[TB_KEY_ID_MAX];  // a key that cannot sign fails now, not after the runs
    if (h->sign_key && tb_sign_key_check(h->sign_key, id, err) != 0) return tb_fail_prefix(err, "tracebook run: flag --sign");
    return 0;
}

static void host_free(tb_runbook_host *h) {
    if (h->have_git) tb_git_state_free(&h->git);
    json_decref(h->params);
    json_decref(h->params_read);
    json_decref(h->experiments);
    free(h->env_allow);
    free(h->env_deny);
    tb_strlist_free(&h->sets);
    tb_strlist_free(&h->env_allowed);
    tb_strlist_free(&h->env_denied);
}

int tracebook_run_main(int argc, char **argv) {
    tb_runbook_host h;
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
    if (tb_path_format(h.engine, sizeof h.engine, &err, "%s/pretrain_gpt", self) != 0) {
        fprintf(stderr, "tracebook run: the engine beside this binary: %s\n", err.msg);
        host_free(&h);
        return TB_EXIT_FAILURE;
    }
    h.have_git = tb_git_describe(".", &h.git, &err) == 0;
    if (!h.have_git) fprintf(stderr, "tracebook run: no git provenance: %s\n", err.msg);
    if (h.require_clean && (!h.have_git || h.git.dirty)) {
        fprintf(stderr, "tracebook run: --require-clean: the working tree is %s\n",
                h.have_git ? "dirty (commit or stash first)" : "not a git repository");
        host_free(&h);
        return TB_EXIT_FAILURE;
    }
    // untracked sources: the engine's build globs them in, a record cannot hold them, and
    // tracebook replay refuses such a record (provenance.h)
    char sources[1024];
    size_t nsources = h.have_git ? tb_git_untracked_sources(h.git.untracked, sources, sizeof sources) : 0;
    if (nsources) {
        const char *s = nsources == 1 ? "" : "s", *it = nsources == 1 ? "it" : "them";
        if (h.require_clean) {
            fprintf(stderr, "tracebook run: --require-clean: the working tree has %zu untracked source file%s (%s), "
                            "which the engine's build may compile and no record can hold (commit or remove %s)\n",
                    nsources, s, sources, it);
            host_free(&h);
            return TB_EXIT_FAILURE;
        }
        fprintf(stderr, "tracebook run: warning: %zu untracked source file%s (%s): the engine's build may compile %s, "
                        "but a record saves only git diff HEAD, so tracebook replay will refuse these runs (git add "
                        "%s to save %s with each run)\n", nsources, s, sources, it, it, it);
    }
    // --json: everything the runbook, its engines and their children print goes to stderr; the
    // document alone to the real stdout
    FILE *json_out = NULL;
    if (h.json) {
        fflush(stdout);
        int fd = dup(1);
        json_out = fd >= 0 ? fdopen(fd, "w") : NULL;
        if (!json_out || dup2(2, 1) < 0) {
            fprintf(stderr, "tracebook run: --json: cannot set stdout aside: %s\n", strerror(errno));
            host_free(&h);
            return TB_EXIT_FAILURE;
        }
    }
    h.tty = isatty(1);
    tb_recorder_install_sigint();

    lua_State *L = luaL_newstate();
    if (!L) {
        fprintf(stderr, "tracebook run: cannot create a Lua state (out of memory)\n");
        host_free(&h);
        return TB_EXIT_OUT_OF_MEMORY;
    }
    // a signal stops a runbook busy in Lua, not only one waiting for an engine
    lua_sethook(L, interrupt_hook, LUA_MASKCOUNT, 10000);
    open_runbook_libs(L);
    wrap_catchers(L);
    tb_runbook_open_api(L, &h);
    lua_getglobal(L, "os");
    lua_getfield(L, -1, "exit");
    lua_pushcclosure(L, l_exit, 1);
    lua_setfield(L, -2, "exit");
    lua_pop(L, 1);
    // require() finds the shared helpers in runbooks/lib/ beside the runbook, or one folder up
    // (runbooks/drills/)
    char dir[PATH_MAX];
    snprintf(dir, sizeof dir, "%s", runbook);
    char *cut = strrchr(dir, '/');
    if (cut) *cut = '\0';
    else snprintf(dir, sizeof dir, ".");
    lua_getglobal(L, "package");
    lua_pushfstring(L, "%s/lib/?.lua;%s/../lib/?.lua;", dir, dir);
    lua_getfield(L, -2, "path");
    lua_concat(L, 2);
    lua_setfield(L, -2, "path");
    lua_pop(L, 1);

    printf("tracebook run %s%s\n", runbook, h.dry_run ? " (dry run: nothing is executed)" : "");
    if (h.have_git)
        printf("  commit %.12s on %s%s\n", h.git.commit, h.git.branch, h.git.dirty ? " (dirty: the diff is saved with each run)" : "");
    lua_pushcfunction(L, traceback);
    int rc = luaL_loadfilex(L, runbook, "t");  // text: a precompiled runbook is unverified bytecode
    if (rc == LUA_OK) rc = lua_pcall(L, 0, 0, -2);
    int status = 0;
    char unread[1024];
    if (rc != LUA_OK) {
        const char *msg = lua_tostring(L, -1);
        fprintf(stderr, "tracebook run: %s\n", msg ? msg : "error");
        char first[1024];
        snprintf(first, sizeof first, "%s", msg ? msg : "error");
        first[strcspn(first, "\n")] = '\0';
        mark_experiments(&h, tb_recorder_interrupted() ? "interrupted" : "failed", first, -1);
        status = TB_EXIT_FAILURE;
    } else if (unread_params(&h, unread, sizeof unread)) {
        // the runbook ran, but not as asked: a --set it never read (misspelled?) was ignored
        fprintf(stderr, "tracebook run: %s\n", unread);
        mark_experiments(&h, "failed", unread, -1);
        status = TB_EXIT_FAILURE;
    } else if (mark_experiments(&h, "finished", NULL, -1) != 0) {
        status = TB_EXIT_FAILURE;  // the runs are recorded, but not the experiment's outcome
    }
    if (!h.dry_run && !tb_recorder_interrupted() && write_reports(&h) != 0) status = TB_EXIT_FAILURE;
    if (h.sign_key && !h.dry_run && sign_experiments(&h) != 0) status = TB_EXIT_FAILURE;
    lua_close(L);
    int exit_status = tb_recorder_interrupted() ? 128 + tb_recorder_interrupted() : status;
    if (json_out) {
        fflush(stdout);
        print_outcome_json(&h, exit_status, json_out);
        fclose(json_out);
    }
    host_free(&h);
    return exit_status;
}
