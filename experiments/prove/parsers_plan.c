// parsers_plan.c — the "plan_figure" claim parser (parsers_plan.h): a figure of a recorded plan.
#include "prove/parsers_plan.h"

#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "core/run_dir.h"
#include "records/recorder.h"

const char *const tb_plan_figure_args[] = {"figure", "layout", "candidate", "stage", NULL};

static int integer_arg(json_t *args, const char *key, long long lo, long long dflt, long long *out, tb_error *err) {
    json_t *v = json_object_get(args, key);
    *out = dflt;
    if (!v) return 0;
    double d = json_number_value(v);
    if (!json_is_number(v) || d != (double)(long long)d || d < (double)lo)
        return tb_fail(err, "parser plan_figure: args.%s must be an integer >= %lld", key, lo);
    *out = (long long)d;
    return 0;
}

int tb_plan_figure_record(json_t *args, const char *record_dir, double *value, json_t *ev, tb_error *err) {
    const char *figure = json_string_value(json_object_get(args, "figure"));
    if (!figure) return tb_fail(err, "parser plan_figure: args.figure is required");
    char path[PATH_MAX];
    if (tb_path_format(path, sizeof path, err, "%s/" TB_RECORD_RUN_DIR "/plan.json", record_dir) != 0) return -1;
    json_error_t je;
    json_t *doc = json_load_file(path, 0, &je);
    if (!doc && je.line < 1) return tb_fail(err, "%s", je.text);  // not opened: jansson's text says why
    if (!doc) return tb_fail(err, "%s: line %d, column %d: %s", path, je.line, je.column, je.text);
    json_object_set_new(ev, "files", json_pack("[s]", path));
    int rc = -1;
    if (!strcmp(figure, "legal_layouts") || !strcmp(figure, "fit_layouts")) {
        json_t *v = json_object_get(doc, !strcmp(figure, "legal_layouts") ? "legal" : "fit");
        if (!json_is_integer(v)) {
            tb_fail(err, "%s: no '%s' (an --explain plan has one layout)", path, figure);
            goto out;
        }
        *value = (double)json_integer_value(v);
        rc = 0;
        goto out;
    }
    json_t *cands = json_object_get(doc, "candidates"), *plan = NULL;
    json_t *one = json_object_get(doc, "plan");
    const char *layout = json_string_value(json_object_get(args, "layout"));
    long long candidate, stage;
    if (integer_arg(args, "candidate", 1, 1, &candidate, err) != 0 || integer_arg(args, "stage", 0, -1, &stage, err) != 0)
        goto out;
    if (one) cands = NULL;
    if (layout) {
        size_t i;
        json_t *c;
        json_array_foreach(cands, i, c) if (!strcmp(json_string_value(json_object_get(c, "layout")) ?: "", layout)) plan = c;
        if (one && !strcmp(json_string_value(json_object_get(one, "layout")) ?: "", layout)) plan = one;
        if (!plan) {
            tb_fail(err, "%s: no layout '%s' among the recorded candidates", path, layout);
            goto out;
        }
    } else if (one) {
        if (candidate != 1) {
            tb_fail(err, "%s: an --explain plan has one candidate (args.candidate %lld)", path, candidate);
            goto out;
        }
        plan = one;
    } else {
        plan = json_array_get(cands, (size_t)(candidate - 1));
        if (!plan) {
            tb_fail(err, "%s: candidate %lld of %zu recorded", path, candidate, json_array_size(cands));
            goto out;
        }
    }
    json_object_set_new(ev, "layout", json_copy(json_object_get(plan, "layout")));
    if (!json_is_true(json_object_get(plan, "legal"))) {
        tb_fail(err, "%s: layout %s is not legal: %s", path, json_string_value(json_object_get(plan, "layout")),
                json_string_value(json_object_get(plan, "rule")) ?: "");
        goto out;
    }
    json_t *v = NULL;
    if (!strcmp(figure, "model_parameters")) v = json_object_get(plan, "model_parameters");
    else if (!strcmp(figure, "peak_bytes")) v = json_object_get(json_object_get(plan, "peak"), "bytes");
    else if (!strcmp(figure, "bubble")) v = json_object_get(json_object_get(plan, "bubble"), "value");
    else if (!strcmp(figure, "step_s") || !strcmp(figure, "mfu") || !strcmp(figure, "tokens_per_s"))
        v = json_object_get(json_object_get(plan, "estimate"), figure);
    else if (!strcmp(figure, "expert_parameters") || !strcmp(figure, "active_parameters") ||
             !strcmp(figure, "experts_per_ep_rank")) {
        v = json_object_get(json_object_get(plan, "moe"), figure);
        if (!v) {
            tb_fail(err, "%s: layout %s is not a MoE plan: no %s", path,
                    json_string_value(json_object_get(plan, "layout")), figure);
            goto out;
        }
    }
    else if (!strncmp(figure, "comm_", 5) && strlen(figure) > 11 && !strcmp(figure + strlen(figure) - 6, "_bytes")) {
        char group[32];  // comm_<group>_bytes: tp, cp, pp, pp_grad, dp_cp, embedding, ep, etp, expert_dp
        snprintf(group, sizeof group, "%.*s", (int)(strlen(figure) - 11), figure + 5);
        v = json_object_get(json_object_get(plan, "comm_bytes_per_step"), group);
        if (!v) {
            tb_fail(err, "parser plan_figure: unknown args.figure '%s' "
                    "(comm_<tp|cp|pp|pp_grad|dp_cp|embedding|ep|etp|expert_dp>_bytes)", figure);
            goto out;
        }
    } else {
        static const char *const per_stage[] = {"param_bytes",     "grad_bytes",      "optimizer_bytes",
                                                "gathered_bytes",  "activation_bytes", "total_bytes",
                                                "parameters_held", "parameters_aligned", "layers", NULL};
        int known = 0;
        for (const char *const *k = per_stage; *k; k++) known |= !strcmp(*k, figure);
        if (!known) {
            tb_fail(err, "parser plan_figure: unknown args.figure '%s'", figure);
            goto out;
        }
        if (stage < 0) stage = json_integer_value(json_object_get(json_object_get(plan, "peak"), "stage"));
        json_t *st = json_array_get(json_object_get(plan, "stages"), (size_t)stage);
        if (!st) {
            tb_fail(err, "%s: layout %s has no stage %lld", path, json_string_value(json_object_get(plan, "layout")),
                    stage);
            goto out;
        }
        v = json_object_get(st, figure);
        json_object_set_new(ev, "stage", json_integer(stage));
    }
    if (!json_is_number(v)) {
        tb_fail(err, "%s: layout %s has no %s", path, json_string_value(json_object_get(plan, "layout")), figure);
        goto out;
    }
    *value = json_number_value(v);
    rc = 0;
out:
    json_decref(doc);
    return rc;
}
