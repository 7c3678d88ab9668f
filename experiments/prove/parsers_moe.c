// parsers_moe.c — moe_figure: one exact figure of a MoE layer from every rank's metrics
// (the "moe" entries of metrics.rank-NNNNN.jsonl, engine/transformer/moe/moe_layer.h): what
// the layer's expert GEMMs ran over on the rank (their rows M per local expert per microbatch,
// their N and K), how many experts the rank holds, and the step's routing (load imbalance,
// dropped tokens, all-to-all bytes). Exact: counts and shapes, no time.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "prove/parsers_internal.h"

static const char *const figures[] = {"expert_rows_mean", "expert_rows_max", "local_experts", "fc1_n", "fc1_k",
                                      "fc2_n",            "fc2_k",           "max_over_mean", "routed_tokens",
                                      "dropped_tokens",   "a2a_bytes",       NULL};

// The metrics line of `step` (-1: the last line with a "moe" array) in one rank's file; NULL
// with err set when there is none.
static json_t *moe_line(const char *path, long long step, tb_error *err) {
    FILE *f = fopen(path, "r");
    if (!f) {
        tb_fail(err, "%s: cannot open", path);
        return NULL;
    }
    json_t *found = NULL;
    int failed = 0;
    char *line = NULL;
    size_t cap = 0;
    int lineno = 0;
    while (getline(&line, &cap, f) > 0) {
        lineno++;
        json_error_t jerr;
        json_t *o = json_loads(line, 0, &jerr);
        if (!o) {
            tb_fail(err, "%s: line %d: %s", path, lineno, jerr.text);
            json_decref(found);
            found = NULL;
            failed = 1;
            break;
        }
        json_t *s = json_object_get(o, "step");
        if (json_is_array(json_object_get(o, "moe")) &&
            (step < 0 || (json_is_integer(s) && json_integer_value(s) == step))) {
            json_decref(found);
            found = o;
            if (step >= 0) break;
        } else {
            json_decref(o);
        }
    }
    free(line);
    fclose(f);
    if (!found && !failed)
        tb_fail(err, "%s: no metrics line %s%lld with a \"moe\" array", path, step < 0 ? "" : "of step ",
                step < 0 ? 0LL : step);
    return found;
}

// The figure of one layer entry; -1 with err set when the entry lacks what it needs.
static int entry_figure(const char *figure, json_t *e, const char *path, double *out, tb_error *err) {
    if (!strncmp(figure, "expert_rows_", 12) || !strcmp(figure, "local_experts")) {
        json_t *rows = json_object_get(e, "expert_rows"), *mb = json_object_get(e, "microbatches");
        if (!json_is_array(rows) || !json_is_integer(mb) || json_integer_value(mb) <= 0)
            return tb_fail(err, "%s: layer %lld has no \"expert_rows\" array and positive \"microbatches\" (written "
                                "by the engine since the moe entries record the expert GEMMs)",
                           path, (long long)json_integer_value(json_object_get(e, "layer")));
        size_t n = json_array_size(rows);
        if (!strcmp(figure, "local_experts")) return *out = (double)n, 0;
        double sum = 0, max = 0;
        for (size_t i = 0; i < n; i++) {
            double r = json_number_value(json_array_get(rows, i));
            sum += r;
            max = r > max ? r : max;
        }
        const double m = (double)json_integer_value(mb);
        *out = !strcmp(figure, "expert_rows_max") ? max / m : n ? sum / ((double)n * m) : 0;
        return 0;
    }
    if (!strncmp(figure, "fc", 2)) {
        char linear[4] = {figure[0], figure[1], figure[2], 0};
        json_t *dims = json_object_get(json_object_get(e, "expert_gemm"), linear);
        if (!json_is_array(dims) || json_array_size(dims) != 2)
            return tb_fail(err, "%s: layer %lld has no \"expert_gemm\".%s [N, K]", path,
                           (long long)json_integer_value(json_object_get(e, "layer")), linear);
        *out = json_number_value(json_array_get(dims, figure[4] == 'n' ? 0 : 1));
        return 0;
    }
    json_t *v = json_object_get(e, figure);
    if (!json_is_number(v))
        return tb_fail(err, "%s: layer %lld has no numeric \"%s\"", path,
                       (long long)json_integer_value(json_object_get(e, "layer")), figure);
    *out = json_number_value(v);
    return 0;
}

int tbp_moe_figure_record(const parser *p, json_t *args, const char *dir, double *value, json_t *ev, tb_error *err) {
    static const char *const reductions[] = {"max", "min", "sum", NULL};
    const char *figure = tbp_string_arg(args, "figure", NULL), *of = tbp_string_arg(args, "of", NULL);
    if (tbp_one_of(p, "figure", figure, figures, err) != 0) return -1;
    if (json_object_get(args, "rank") && json_object_get(args, "of"))
        return tb_fail(err, "parser %s: args.rank and args.of exclude each other (one rank, or a reduction over all)",
                       p->name);
    if (json_object_get(args, "of") && tbp_one_of(p, "of", of, reductions, err) != 0) return -1;
    long long rank = -1, layer = -1, step = -1;
    if (tbp_int_arg(p, args, "rank", -1, 0, &rank, err) != 0 || tbp_int_arg(p, args, "layer", -1, 0, &layer, err) != 0 ||
        tbp_int_arg(p, args, "step", -1, 1, &step, err) != 0)
        return -1;
    if (rank < 0 && !of) of = "max";

    json_t *files = json_array();
    json_object_set_new(ev, "files", files);
    char config_path[REC_PATH_MAX], run_dir[REC_PATH_MAX], path[REC_PATH_MAX];
    long long world;
    if (tbp_record_world_size(dir, config_path, sizeof config_path, files, &world, NULL, err) != 0) return -1;
    if (rank >= world)
        return tb_fail(err, "parser %s: args.rank %lld is not below the record's world_size %lld (%s)", p->name, rank,
                       world, config_path);
    if (tb_run_path(run_dir, sizeof run_dir, dir, TB_RECORD_RUN_DIR, err) != 0) return -1;
    double result = 0;
    long long at = -1, counted = 0;
    for (long long r = 0; r < world; r++) {
        if (rank >= 0 && r != rank) continue;
        if (tb_rank_file_path(path, sizeof path, run_dir, TB_RANK_METRICS, (int)r, err) != 0) return -1;
        json_t *line = moe_line(path, step, err);
        if (!line) return -1;
        json_array_append_new(files, json_string(path));
        json_t *entries = json_object_get(line, "moe"), *e = NULL;
        // the layer asked for, or the first MoE layer of the first rank read (every rank then reads that one)
        for (size_t i = 0; i < json_array_size(entries) && !e; i++) {
            json_t *l = json_object_get(json_array_get(entries, i), "layer");
            if (layer < 0 && json_is_integer(l)) layer = json_integer_value(l);
            if (json_is_integer(l) && json_integer_value(l) == layer) e = json_array_get(entries, i);
        }
        double x = 0;
        int rc = e ? entry_figure(figure, e, path, &x, err) : 0;
        json_decref(line);
        if (rc != 0) return -1;
        if (!e) continue;  // the layer lies on another pipeline stage
        counted++;
        if (rank >= 0 || !strcmp(of, "sum")) result += x;
        else if (at < 0 || (!strcmp(of, "max") ? x > result : x < result)) result = x, at = r;
    }
    if (!counted)
        return tb_fail(err, "parser %s: no rank of %s has MoE layer %lld%s", p->name, dir, layer,
                       rank >= 0 ? " on the rank asked for" : "");
    *value = result;
    char detail[256];
    if (rank >= 0) snprintf(detail, sizeof detail, "rank %lld, MoE layer %lld: %s", rank, layer, figure);
    else if (!strcmp(of, "sum"))
        snprintf(detail, sizeof detail, "the sum over %lld ranks holding MoE layer %lld of %s", counted, layer, figure);
    else
        snprintf(detail, sizeof detail, "the %s over %lld ranks holding MoE layer %lld of %s: rank %lld", of, counted,
                 layer, figure, at);
    json_object_set_new(ev, "detail", json_string(detail));
    return 0;
}
