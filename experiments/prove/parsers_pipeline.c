// parsers_pipeline.c — the parsers of pipeline.json: pipeline_bubble, stage_imbalance,
// rank_figure and stage_figure.
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "prove/parsers_internal.h"

int tbp_pipeline_record(const parser *p, json_t *args, const char *dir, double *value, json_t *ev,
                           tb_error *err) {
    const char *key = "stage_imbalance";
    if (!strcmp(p->name, "pipeline_bubble")) {
        const char *kind = tbp_string_arg(args, "kind", "measured");
        if (!strcmp(kind, "measured")) key = "measured_bubble_fraction";
        else if (!strcmp(kind, "theoretical")) key = "theoretical_bubble_fraction";
        else return tb_fail(err, "parser %s: args.kind '%s' is not measured or theoretical", p->name, kind);
    }
    char path[REC_PATH_MAX];
    if (tbp_run_path(path, sizeof path, dir, TB_RUN_PIPELINE, err) != 0) return -1;
    json_t *files = json_array();
    json_object_set_new(ev, "files", files);
    json_t *root = tbp_load_json_file(path, err);
    if (!root) return -1;
    json_array_append_new(files, json_string(path));
    json_t *v = json_object_get(root, key);
    int rc = 0;
    if (!json_is_number(v)) rc = tb_fail(err, "%s: no numeric '%s'", path, key);
    else {
        *value = json_number_value(v);
        json_object_set_new(ev, "key", json_string(key));
        json_object_set(ev, "schedule", json_object_get(root, "schedule"));
        json_object_set(ev, "pipeline_model_parallel_size", json_object_get(root, "pipeline_model_parallel_size"));
        json_object_set(ev, "num_microbatches", json_object_get(root, "num_microbatches"));
    }
    json_decref(root);
    return rc;
}

// rank_figure and stage_figure: one exact figure of pipeline.json's "ranks" or "stages".
int tbp_figure_record(const parser *p, json_t *args, const char *dir, double *value, json_t *ev, tb_error *err) {
    static const char *const figures[] = {"parameters", "layers", "flops_per_step", "peak_activation_bytes", NULL};
    static const char *const reductions[] = {"max", "min", "sum", NULL};
    const int stages = !strcmp(p->name, "stage_figure");
    const char *list = stages ? "stages" : "ranks", *index_key = stages ? "stage" : "rank";
    const char *figure = tbp_string_arg(args, "figure", NULL), *of = tbp_string_arg(args, "of", NULL);
    if (tbp_one_of(p, "figure", figure, figures, err) != 0) return -1;
    json_t *index_arg = json_object_get(args, index_key);
    if (index_arg && json_object_get(args, "of"))
        return tb_fail(err, "parser %s: args.%s and args.of exclude each other (one %s, or a reduction over all)",
                       p->name, index_key, index_key);
    if (json_object_get(args, "of") && tbp_one_of(p, "of", of, reductions, err) != 0) return -1;
    long long index = -1;
    if (tbp_int_arg(p, args, index_key, -1, 0, &index, err) != 0) return -1;
    if (index < 0 && !of) of = "max";

    json_t *files = json_array();
    json_object_set_new(ev, "files", files);
    char config_path[REC_PATH_MAX], path[REC_PATH_MAX];
    long long world;
    json_t *config = NULL;
    if (tbp_record_world_size(dir, config_path, sizeof config_path, files, &world, &config, err) != 0) return -1;
    json_t *pp = json_object_get(config, "pipeline_model_parallel_size");
    long long expected = stages ? (json_is_integer(pp) ? json_integer_value(pp) : 1) : world;
    json_decref(config);
    if (tbp_run_path(path, sizeof path, dir, TB_RUN_PIPELINE, err) != 0) return -1;
    json_t *root = tbp_load_json_file(path, err);
    if (!root) return -1;
    json_array_append_new(files, json_string(path));
    json_t *items = json_object_get(root, list);
    int rc = 0;
    // as many entries as the config says: a pipeline.json of another run (or before "ranks"
    // was written) is refused, not read
    if (!json_is_array(items))
        rc = tb_fail(err, "%s: no '%s' array (written by the engine since pipeline.json reports every rank)", path,
                     list);
    else if ((long long)json_array_size(items) != expected)
        rc = tb_fail(err, "%s: %zu %s, but %s says %s %lld", path, json_array_size(items), list, config_path,
                     stages ? "pipeline_model_parallel_size" : "world_size", expected);
    else if (index >= expected)
        rc = tb_fail(err, "parser %s: args.%s %lld is not below the record's %lld %s (%s)", p->name, index_key, index,
                     expected, list, path);
    double result = 0;
    long long at = index;
    for (long long i = 0; rc == 0 && i < expected; i++) {
        if (index >= 0 && i != index) continue;
        json_t *item = json_array_get(items, (size_t)i), *v = json_object_get(item, figure);
        json_t *pos = json_object_get(item, index_key);
        if (!json_is_number(v) || !json_is_integer(pos) || json_integer_value(pos) != i) {
            rc = tb_fail(err, "%s: %s[%lld] has no numeric '%s' (or its '%s' is not %lld)", path, list, i, figure,
                         index_key, i);
            break;
        }
        double x = json_number_value(v);
        if (index >= 0 || !strcmp(of, "sum")) result += x;
        else if (i == 0 || (!strcmp(of, "max") ? x > result : x < result)) result = x, at = i;
    }
    json_decref(root);
    if (rc != 0) return -1;
    *value = result;
    char detail[256];
    if (index >= 0)
        snprintf(detail, sizeof detail, TB_RUN_PIPELINE " %s[%lld].%s", list, index, figure);
    else if (!strcmp(of, "sum"))
        snprintf(detail, sizeof detail, TB_RUN_PIPELINE " the sum over %lld %s of %s", expected, list, figure);
    else
        snprintf(detail, sizeof detail, TB_RUN_PIPELINE " the %s over %lld %s of %s: %s %lld", of, expected, list,
                 figure, index_key, at);
    json_object_set_new(ev, "detail", json_string(detail));
    return 0;
}
