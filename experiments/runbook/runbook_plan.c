// runbook_plan.c — exp:plan{...}: one recorded `tracebook plan` (plan_cli.h) of an experiment.
//
// The table is the planner's command line as keys: the model and training keys of exp:run
// (the engine's options, underscores) and the planner's own (gpus, gpus_per_node,
// gpu_memory, peak_tflops, compute_efficiency, intra_node_bandwidth, inter_node_bandwidth,
// bf16, fp16, explain, top, max_micro_batch_size, max_virtual_stages; model, a preset by name,
// whose shape the keys given override; all, the illegal layouts listed too). The process is this
// tracebook binary's `plan ... --output <record>/run/plan.json`, recorded like an engine run
// (recorder.h: stdout/stderr, manifest with every file's sha256, the catalogue), so a claim
// with parser plan_figure (parsers_plan.h) re-derives from the recorded plan.json.
// Returns {runs = {{run_id, record, status, repetition}}, plan = plan.json as a table,
// config = the table}; the planner's table (or --explain derivation) is printed.
#include <jansson.h>
#include <lauxlib.h>
#include <limits.h>
#include <lua.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config/config.h"
#include "core/fileio.h"
#include "core/run_dir.h"
#include "planner/plan_models.h"
#include "runbook/lua_json.h"
#include "records/record.h"
#include "records/recorder.h"
#include "runbook/runbook_host.h"

static const char *const planner_keys[] = {"model", "gpus", "gpus_per_node", "gpu_memory", "peak_tflops",
                                           "compute_efficiency", "intra_node_bandwidth", "inter_node_bandwidth",
                                           "bf16", "fp16", "all", "explain", "top", "max_micro_batch_size",
                                           "max_virtual_stages", NULL};

// "model, gpus, ..." into buf
static void planner_key_list(char *buf, size_t len) {
    size_t used = 0;
    buf[0] = '\0';
    for (const char *const *p = planner_keys; *p && used < len; p++) {
        int w = snprintf(buf + used, len - used, "%s%s", p == planner_keys ? "" : ", ", *p);
        used += w > 0 ? (size_t)w : 0;
    }
}

static int is_planner_key(const char *k) {
    for (const char *const *p = planner_keys; *p; p++)
        if (!strcmp(*p, k)) return 1;
    return 0;
}

// "--" + key with '-' for '_'
static void flag_of(const char *key, char *buf, size_t len) {
    snprintf(buf, len, "--%s", key);
    for (char *c = buf + 2; *c; c++)
        if (*c == '_') *c = '-';
}

int tb_runbook_exp_plan(lua_State *L) {
    tb_runbook_host *h = tb_runbook_host_of(L);
    tb_runbook_check_experiment(L, "plan");
    luaL_checktype(L, 2, LUA_TTABLE);
    char version_dir[PATH_MAX];
    tb_error err;
    if (tb_runbook_experiment_dir(L, 1, version_dir, sizeof version_dir, &err) != 0)
        return tb_rb_error(L, "%s", err.msg);
    // check every key before anything runs: an engine option with its own rules, or the planner's
    lua_pushnil(L);
    while (lua_next(L, 2)) {
        if (lua_type(L, -2) != LUA_TSTRING) return tb_rb_error(L, "exp:plan: every key must be a name");
        const char *k = lua_tostring(L, -2);
        if (is_planner_key(k)) {
            int t = lua_type(L, -1);
            int is_bool = !strcmp(k, "bf16") || !strcmp(k, "fp16") || !strcmp(k, "all");
            int is_model = !strcmp(k, "model");
            if (is_model ? t != LUA_TSTRING : is_bool ? t != LUA_TBOOLEAN : t != LUA_TNUMBER && t != LUA_TSTRING) {
                char got[96];
                return tb_rb_error(L, "exp:plan: %s must be %s (got %s)", k,
                                   is_model  ? "a preset's name (tracebook plan --model list)"
                                   : is_bool ? "true or false"
                                             : "a number or a string",
                                   tb_rb_describe(L, -1, got, sizeof got));
            }
            if (is_model && !plan_model_find(lua_tostring(L, -1))) {
                char names[512];
                plan_model_names(names, sizeof names);
                return tb_rb_error(L, "exp:plan: model '%s' is not a preset (the presets: %s)", lua_tostring(L, -1),
                                   names);
            }
        } else if (!strcmp(k, "world_size") || !strcmp(k, "launcher") || !strcmp(k, "processes")) {
            return tb_rb_error(L, "exp:plan: %s does not apply to a plan (the cluster is gpus = N)", k);
        } else if (!strcmp(k, "run_dir") || !strcmp(k, "repeat_") || !strcmp(k, "repetition_") ||
                   !strcmp(k, "rerun_contended_") || !strcmp(k, "expect_failure") || !strcmp(k, "kill_after_step")) {
            return tb_rb_error(L, "exp:plan: %s does not apply to a plan (no engine runs)", k);
        } else if (!tb_runbook_is_engine_key(k)) {
            char keys[512], hint[96] = "";
            planner_key_list(keys, sizeof keys);
            const char *near = tb_runbook_nearest_engine_key(k);
            if (near) snprintf(hint, sizeof hint, "did you mean '%s'? ", near);
            return tb_rb_error(L, "exp:plan: unknown key '%s' (%skeys are the planner's: %s; and the model and "
                                  "training keys: pretrain_gpt's flags with underscores)", k, hint, keys);
        } else {
            tb_runbook_check_config_value(L, "exp:plan", k, -1);
        }
        lua_pop(L, 1);
    }
    json_t *point = tb_lua_to_json(L, 2);
    if (h->dry_run) {
        json_decref(point);
        printf("  dry run: exp:plan\n");
        lua_newtable(L);
        lua_newtable(L);
        lua_setfield(L, -2, "runs");
        return 1;
    }
    char rec[PATH_MAX + 128], run_id[64], run_dir[PATH_MAX + 160], out[PATH_MAX + 200], self[PATH_MAX];
    tb_new_run_id(run_id, sizeof run_id);
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0) {
        json_decref(point);
        return tb_rb_error(L, "exp:plan: cannot find this tracebook binary (/proc/self/exe)");
    }
    self[n] = '\0';
    if (tb_path_format(rec, sizeof rec, &err, "%s/%s", version_dir, run_id) != 0 ||
        tb_path_format(run_dir, sizeof run_dir, &err, "%s/" TB_RECORD_RUN_DIR, rec) != 0 ||
        tb_path_format(out, sizeof out, &err, "%s/plan.json", run_dir) != 0 || tb_mkdir_p(run_dir, &err) != 0) {
        json_decref(point);
        return tb_rb_error(L, "%s", err.msg);
    }
    // the argv: the keys in sorted order, so a table always gives the same command
    json_t *argv = json_pack("[s, s]", self, "plan");
    const char **keys = calloc(json_object_size(point) + 1, sizeof *keys);
    size_t nk = 0;
    const char *k;
    json_t *v;
    json_object_foreach(point, k, v) keys[nk++] = k;
    for (size_t i = 1; i < nk; i++)
        for (size_t j = i; j > 0 && strcmp(keys[j - 1], keys[j]) > 0; j--) {
            const char *t = keys[j];
            keys[j] = keys[j - 1], keys[j - 1] = t;
        }
    for (size_t i = 0; i < nk; i++) {
        char flag[128], value[256];
        flag_of(keys[i], flag, sizeof flag);
        v = json_object_get(point, keys[i]);
        if (json_is_boolean(v)) {
            if (json_is_true(v)) json_array_append_new(argv, json_string(flag));
            else if (!is_planner_key(keys[i])) {  // the engine's --no-FLAG
                char no[140];
                snprintf(no, sizeof no, "--no-%s", flag + 2);
                json_array_append_new(argv, json_string(no));
            }
            continue;
        }
        if (json_is_integer(v)) snprintf(value, sizeof value, "%lld", (long long)json_integer_value(v));
        else if (json_is_real(v)) snprintf(value, sizeof value, "%.17g", json_real_value(v));
        else snprintf(value, sizeof value, "%s", json_string_value(v) ?: "");
        json_array_append_new(argv, json_string(flag));
        json_array_append_new(argv, json_string(value));
    }
    free(keys);
    json_array_append_new(argv, json_string("--output"));
    json_array_append_new(argv, json_string(out));
    char start[32];
    tb_iso_now(start, sizeof start);
    printf("  plan: %s (%s)\n", version_dir, run_id);
    fflush(stdout);
    tb_run_outcome o;
    if (tb_run_engine(argv, rec, 0, "plan", 0, 0, &o, &err) != 0) {
        json_decref(argv);
        json_decref(point);
        return tb_rb_error(L, "plan %s not started: %s", run_id, err.msg);
    }
    lua_getfield(L, 1, "name");
    lua_getfield(L, 1, "version");
    lua_getfield(L, 1, "question");
    tb_run_identity id = {lua_tostring(L, -3), lua_tointeger(L, -2), lua_tostring(L, -1), h->runbook,
                          h->runbook_sha256, 0, 1, point, NULL, h->have_git ? &h->git : NULL,
                          (const char *const *)h->env_allow, (const char *const *)h->env_deny, NULL, 0, NULL};
    // no engine in the argv (engine_argv_index -1): the manifest's engine_build says so, and
    // tracebook replay refuses the record
    json_t *launch = json_pack("{s:s, s:i, s:i}", "name", "tracebook plan", "processes", 1, "engine_argv_index", -1);
    int recorded = tb_record_finish(h->artifacts, rec, run_id, &id, argv, launch, start, o, &err);
    json_decref(launch);
    lua_pop(L, 3);
    json_decref(argv);
    if (recorded != 0) {
        json_decref(point);
        return tb_rb_error(L, "recording %s: %s", rec, err.msg);
    }
    // what the planner printed (its table, or the derivation), then the verdict
    char log[PATH_MAX + 160];
    if (tb_path_format(log, sizeof log, &err, "%s/" TB_RECORD_STDOUT, rec) == 0) {
        FILE *f = fopen(log, "r");
        char line[4096];
        while (f && fgets(line, sizeof line, f)) printf("    %s", line);
        if (f) fclose(f);
    }
    json_t *plan = json_load_file(out, 0, NULL);
    if (o.exit_status != 0 && !plan) {
        json_decref(point);
        return tb_rb_error(L, "plan %s failed (exit status %d; see %s/" TB_RECORD_STDERR ")", run_id, o.exit_status, rec);
    }
    lua_newtable(L);  // result
    lua_newtable(L);  // runs
    json_t *r = json_pack("{s:s, s:s, s:s, s:i, s:i}", "run_id", run_id, "record", rec, "status", "finished",
                          "repetition", 1, "exit_status", o.exit_status);
    tb_lua_push_json(L, r);
    json_decref(r);
    lua_rawseti(L, -2, 1);
    lua_setfield(L, -2, "runs");
    tb_lua_push_json(L, plan);
    lua_setfield(L, -2, "plan");
    json_decref(plan);
    tb_lua_push_json(L, point);
    lua_setfield(L, -2, "config");
    json_decref(point);
    return 1;
}
