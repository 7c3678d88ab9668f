// parsers_combine.c — the parsers that combine two sub-claims, each derived from its records:
// ratio, saved_fraction, relative_difference.
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/xalloc.h"
#include "prove/parsers_internal.h"

// One side of a ratio: {"parser", "args", "records": [index | run id]} over the claim's records.
static int part_value(const parser *p, const char *side, json_t *part, const char *const *dirs, int n,
                      double *value, json_t **evidence, tb_error *err) {
    if (!json_is_object(part)) return tb_fail(err, "parser %s: args.%s must be an object {parser, args, records}",
                                              p->name, side);
    json_t *name = json_object_get(part, "parser");
    if (!json_is_string(name)) return tb_fail(err, "parser %s: args.%s.parser must be a parser's name", p->name, side);
    const char *key;
    json_t *v;
    json_object_foreach(part, key, v) {
        if (strcmp(key, "parser") && strcmp(key, "args") && strcmp(key, "records"))
            return tb_fail(err, "parser %s: unknown args.%s.%s (known: parser, args, records)", p->name, side, key);
    }
    json_t *sel = json_object_get(part, "records");
    const char **chosen = tb_xcalloc((size_t)(n > 0 ? n : 1), sizeof *chosen, "chosen records");
    int k = 0, rc = 0;
    if (!sel || json_is_null(sel)) {
        for (int i = 0; i < n; i++) chosen[k++] = dirs[i];
    } else if (!json_is_array(sel) || json_array_size(sel) == 0 || json_array_size(sel) > (size_t)n * 64) {
        rc = tb_fail(err, "parser %s: args.%s.records must be a non-empty array of indices or run ids", p->name, side);
    } else {
        chosen = tb_xreallocarray(chosen, json_array_size(sel), sizeof *chosen, "chosen records");
        size_t i;
        json_array_foreach(sel, i, v) {
            int found = -1;
            long long index;
            if (tbp_integral(v, &index) == 0 && index >= 0 && index < n) found = (int)index;
            char run_id[256];
            for (int j = 0; json_is_string(v) && j < n && found < 0; j++)
                if (!strcmp(tbp_base_name(dirs[j], run_id, sizeof run_id), json_string_value(v))) found = j;
            if (found < 0) {
                char *text = json_dumps(v, JSON_ENCODE_ANY);
                rc = tb_fail(err, "parser %s: args.%s.records[%zu] = %s is neither an index below %d nor one of the "
                                  "claim's run ids", p->name, side, i, text ? text : "?", n);
                free(text);
                break;
            }
            chosen[k++] = dirs[found];
        }
    }
    if (rc == 0 && tb_parse_claim(json_string_value(name), json_object_get(part, "args"), chosen, k, value, evidence,
                                  err) != 0)
        rc = tb_fail_prefix(err, "%s %s", p->name, side);
    free(chosen);
    return rc;
}

int tbp_ratio_combine(const parser *p, json_t *args, const char *const *dirs, int n, double *value,
                         json_t **evidence, tb_error *err) {
    const int saved = !strcmp(p->name, "saved_fraction");
    const char *top = saved && json_object_get(args, "treatment") ? "treatment" : "numerator";
    const char *bottom = saved && json_object_get(args, "baseline") ? "baseline" : "denominator";
    if (!args || !json_object_get(args, top) || !json_object_get(args, bottom))
        return tb_fail(err, "parser %s: needs args.%s and args.%s", p->name, saved ? "treatment" : "numerator",
                       saved ? "baseline" : "denominator");
    double a, b;
    json_t *ea = NULL, *eb = NULL;
    if (part_value(p, top, json_object_get(args, top), dirs, n, &a, evidence ? &ea : NULL, err) != 0) return -1;
    if (part_value(p, bottom, json_object_get(args, bottom), dirs, n, &b, evidence ? &eb : NULL, err) != 0) {
        json_decref(ea);
        return -1;
    }
    if (b == 0) {
        json_decref(ea);
        json_decref(eb);
        return tb_fail(err, "parser %s: the %s is 0", p->name, bottom);
    }
    *value = saved ? 1.0 - a / b : a / b;
    if (evidence)
        *evidence = json_pack("{s:s, s:s, s:f, s:f, s:f, s:o, s:o}", "parser", p->name, "definition", p->definition,
                              "value", *value, top[0] == 't' ? "treatment_value" : "numerator_value", a,
                              bottom[0] == 'b' ? "baseline_value" : "denominator_value", b, top, ea, bottom, eb);
    return 0;
}

// |a - b| / |b|: how far a treatment's number is from its baseline's, both derived here from
// their records, so a comparison claim cannot carry the baseline as a constant.
int tbp_difference_combine(const parser *p, json_t *args, const char *const *dirs, int n, double *value,
                              json_t **evidence, tb_error *err) {
    if (!args || !json_object_get(args, "a") || !json_object_get(args, "b"))
        return tb_fail(err, "parser %s: needs args.a and args.b", p->name);
    double a, b;
    json_t *ea = NULL, *eb = NULL;
    if (part_value(p, "a", json_object_get(args, "a"), dirs, n, &a, evidence ? &ea : NULL, err) != 0) return -1;
    if (part_value(p, "b", json_object_get(args, "b"), dirs, n, &b, evidence ? &eb : NULL, err) != 0) {
        json_decref(ea);
        return -1;
    }
    if (!isfinite(a) || !isfinite(b)) {
        json_decref(ea);
        json_decref(eb);
        return tb_fail(err, "parser %s: a = %.17g, b = %.17g: both must be finite", p->name, a, b);
    }
    // b = 0: the absolute difference (a relative one is undefined; 0 stays 0 when a = b)
    *value = b != 0 ? fabs(a - b) / fabs(b) : fabs(a - b);
    if (evidence)
        *evidence = json_pack("{s:s, s:s, s:f, s:f, s:f, s:o, s:o}", "parser", p->name, "definition", p->definition,
                              "value", *value, "a_value", a, "b_value", b, "a", ea, "b", eb);
    return 0;
}
