// parsers_tensors.c — first_divergence: where two runs' dumped tensors (--dump-tensors,
// engine/reports/tensor_dump.h) first diverge, by tracebook bisect's comparison (bisect.h).
// Exact: the tensors are the records' files, the bound is the claim's.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "inspect/bisect.h"
#include "prove/parsers_internal.h"

// args.<side>: a 0-based index into the claim's records or one of their run ids (default dflt).
static int pick_record(const parser *p, json_t *args, const char *side, int dflt, const char *const *dirs, int n,
                       int *out, tb_error *err) {
    json_t *v = json_object_get(args, side);
    long long index;
    if (!v || json_is_null(v)) {
        if (dflt >= n)
            return tb_fail(err, "parser %s: the claim has %d record%s; args.%s defaults to index %d", p->name, n,
                           n == 1 ? "" : "s", side, dflt);
        *out = dflt;
        return 0;
    }
    if (tbp_integral(v, &index) == 0 && index >= 0 && index < n) {
        *out = (int)index;
        return 0;
    }
    char run_id[256];
    for (int i = 0; json_is_string(v) && i < n; i++)
        if (!strcmp(tbp_base_name(dirs[i], run_id, sizeof run_id), json_string_value(v))) {
            *out = i;
            return 0;
        }
    char *text = json_dumps(v, JSON_ENCODE_ANY);
    tb_fail(err, "parser %s: args.%s = %s is neither an index below %d nor one of the claim's run ids", p->name, side,
            text ? text : "?", n);
    free(text);
    return -1;
}

int tbp_first_divergence_combine(const parser *p, json_t *args, const char *const *dirs, int n, double *value,
                                 json_t **evidence, tb_error *err) {
    int ia, ib;
    long long step;
    if (pick_record(p, args, "a", 0, dirs, n, &ia, err) != 0 || pick_record(p, args, "b", 1, dirs, n, &ib, err) != 0 ||
        tbp_int_arg(p, args, "step", 0, 1, &step, err) != 0)
        return -1;
    if (ia == ib) return tb_fail(err, "parser %s: args.a and args.b are the same record (%d)", p->name, ia);
    json_t *tol = json_object_get(args, "tolerance");
    double tolerance = 1e-5;
    if (tol && (!json_is_number(tol) || !(json_number_value(tol) >= 0) || !isfinite(json_number_value(tol))))
        return tb_fail(err, "parser %s: args.tolerance must be a finite number >= 0", p->name);
    if (tol) tolerance = json_number_value(tol);
    char run_a[REC_PATH_MAX], run_b[REC_PATH_MAX];
    if (tb_run_path(run_a, sizeof run_a, dirs[ia], TB_RECORD_RUN_DIR, err) != 0 ||
        tb_run_path(run_b, sizeof run_b, dirs[ib], TB_RECORD_RUN_DIR, err) != 0)
        return -1;
    json_t *result = NULL;
    if (tb_bisect_runs(run_a, run_b, step, tolerance, &result, err) != 0)
        return tb_fail_prefix(err, "parser %s, records %s and %s", p->name, dirs[ia], dirs[ib]);
    // "no divergence" over a partial comparison would not be true of the runs: every tensor
    // one run dumped must be in the other
    const json_int_t compared = json_integer_value(json_object_get(result, "tensors_compared"));
    const json_int_t only = json_integer_value(json_object_get(result, "tensors_in_one_run_only"));
    if (compared == 0 || only != 0) {
        json_decref(result);
        return tb_fail(err, "parser %s: records %s and %s: %lld tensors in both runs, %lld in one only (the runs must "
                            "dump the same tensors: the same model and --dump-tensors step)",
                       p->name, dirs[ia], dirs[ib], (long long)compared, (long long)only);
    }
    json_t *verdict = json_object_get(result, "first_divergence");
    *value = json_is_null(verdict) ? 0 : (double)json_integer_value(json_object_get(verdict, "position"));
    if (evidence) {
        char detail[1024];
        const long long dumped = (long long)json_integer_value(json_object_get(result, "step"));
        if (json_is_null(verdict))
            snprintf(detail, sizeof detail, "step %lld, %d tensors compared in step order: no divergence beyond %g x "
                     "max |b|", dumped, (int)compared, tolerance);
        else
        {
            char *worst = json_dumps(json_object_get(verdict, "max_abs_difference"), JSON_ENCODE_ANY);
            char *bound = json_dumps(json_object_get(verdict, "bound"), JSON_ENCODE_ANY);
            snprintf(detail, sizeof detail, "step %lld, %d tensors compared in step order: the first divergence is "
                     "tensor %lld, %s (%s), max |a - b| %s against the bound %s", dumped, (int)compared,
                     (long long)json_integer_value(json_object_get(verdict, "position")),
                     json_string_value(json_object_get(verdict, "tensor")),
                     json_string_value(json_object_get(verdict, "kind")), worst ? worst : "-", bound ? bound : "-");
            free(worst);
            free(bound);
        }
        // the two records, each with the dumped tensors compared as its files (prove verifies
        // them against the manifest with the rest)
        json_t *records = json_array();
        const int sides[2] = {ia, ib};
        for (int s = 0; s < 2; s++) {
            char run_id[256], tensors[REC_PATH_MAX + 16];
            snprintf(tensors, sizeof tensors, "%s/tensors", s ? run_b : run_a);
            json_array_append_new(
                records, json_pack("{s:s, s:s, s:f, s:s, s:[s]}", "run_id",
                                   tbp_base_name(dirs[sides[s]], run_id, sizeof run_id), "record_dir", dirs[sides[s]],
                                   "value", *value, "detail", s ? "run b" : detail, "files", tensors));
        }
        *evidence = json_pack("{s:s, s:s, s:O, s:f, s:o, s:O}", "parser", p->name, "definition", p->definition, "args",
                              args ? args : json_null(), "value", *value, "records", records, "bisect", result);
    }
    json_decref(result);
    return 0;
}
