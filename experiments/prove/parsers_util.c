// parsers_util.c — the helpers every claim parser shares (parsers_internal.h): medians,
// paths inside a record, JSON files and args.
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "prove/parsers_internal.h"

// ---------------------------------------------------------------------------------------
// Small helpers

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y ? 1 : 0;
}

double tb_median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// min / median / max of n values, as a JSON object (values is sorted in place)
json_t *tbp_summary_json(double *v, int n) {
    double med = tb_median(v, n);
    return json_pack("{s:f, s:f, s:f, s:i}", "min", v[0], "median", med, "max", v[n - 1], "count", n);
}

// The last component of a path (a record directory's run id), into out.
const char *tbp_base_name(const char *path, char *out, size_t size) {
    size_t len = strlen(path);
    while (len > 1 && path[len - 1] == '/') len--;
    const char *end = path + len, *b = end;
    while (b > path && b[-1] != '/') b--;
    size_t n = (size_t)(end - b) < size - 1 ? (size_t)(end - b) : size - 1;
    memcpy(out, b, n);
    out[n] = '\0';
    return out;
}

// <record>/run/<file>: a file of the engine's run directory inside a record.
int tbp_run_path(char *out, size_t size, const char *record_dir, const char *file, tb_error *err) {
    char run_dir[REC_PATH_MAX];
    if (tb_run_path(run_dir, sizeof run_dir, record_dir, TB_RECORD_RUN_DIR, err) != 0) return -1;
    return tb_run_path(out, size, run_dir, file, err);
}

json_t *tbp_load_json_file(const char *path, tb_error *err) {
    json_error_t jerr;
    json_t *root = json_load_file(path, 0, &jerr);
    if (!root) {
        if (access(path, R_OK) != 0) tb_fail(err, "%s: missing or unreadable (%s)", path, strerror(errno));
        else tb_fail(err, "%s: line %d, column %d: %s", path, jerr.line, jerr.column, jerr.text);
        return NULL;
    }
    if (!json_is_object(root)) {
        json_decref(root);
        tb_fail(err, "%s: not a JSON object", path);
        return NULL;
    }
    return root;
}

// A JSON integer, or a real with an tbp_integral value (a Lua float such as 2.0): 0, else -1.
int tbp_integral(json_t *v, long long *out) {
    if (json_is_integer(v)) {
        *out = (long long)json_integer_value(v);
        return 0;
    }
    double d = json_is_real(v) ? json_real_value(v) : 0.5;
    if (d != floor(d) || fabs(d) > 9e15) return -1;
    *out = (long long)d;
    return 0;
}

// An integer arg >= min, or the default when absent.
int tbp_int_arg(const parser *p, json_t *args, const char *key, long long dflt, long long min, long long *out,
                   tb_error *err) {
    json_t *v = args ? json_object_get(args, key) : NULL;
    if (!v || json_is_null(v)) {
        *out = dflt;
        return 0;
    }
    if (tbp_integral(v, out) != 0 || *out < min)
        return tb_fail(err, "parser %s: args.%s must be an integer >= %lld", p->name, key, min);
    return 0;
}

int tbp_quantile_arg(const parser *p, json_t *args, double *q, tb_error *err) {
    json_t *v = args ? json_object_get(args, "quantile") : NULL;
    *q = 0.5;
    if (!v || json_is_null(v)) return 0;
    if (!json_is_number(v) || !(json_number_value(v) > 0 && json_number_value(v) < 1))
        return tb_fail(err, "parser %s: args.quantile must be a number between 0 and 1, both excluded", p->name);
    *q = json_number_value(v);
    return 0;
}

const char *tbp_string_arg(json_t *args, const char *key, const char *dflt) {
    json_t *v = args ? json_object_get(args, key) : NULL;
    return json_is_string(v) ? json_string_value(v) : dflt;
}

// Whether s is one of names; else err names the arg, the value and the choices.
int tbp_one_of(const parser *p, const char *key, const char *s, const char *const *names, tb_error *err) {
    char list[256] = "";
    size_t used = 0;
    for (const char *const *n = names; *n; n++) {
        if (s && !strcmp(s, *n)) return 0;
        int w = snprintf(list + used, sizeof list - used, "%s%s", used ? ", " : "", *n);
        if (w > 0 && (size_t)w < sizeof list - used) used += (size_t)w;
    }
    if (!s) return tb_fail(err, "parser %s: args.%s must be a string, one of %s", p->name, key, list);
    return tb_fail(err, "parser %s: args.%s '%s' is not one of %s", p->name, key, s, list);
}

// config.json's world_size (1 when absent, as the engine's default), with its path.
int tbp_record_world_size(const char *dir, char *config_path, size_t size, json_t *files, long long *world,
                             json_t **config, tb_error *err) {
    if (tbp_run_path(config_path, size, dir, TB_RUN_CONFIG, err) != 0) return -1;
    json_t *c = tbp_load_json_file(config_path, err);
    if (!c) return -1;
    json_array_append_new(files, json_string(config_path));
    json_t *ws = json_object_get(c, "world_size");
    *world = json_is_integer(ws) ? json_integer_value(ws) : 1;
    if (*world < 1 || *world > 1 << 20) {
        json_decref(c);
        return tb_fail(err, "%s: world_size %lld out of range", config_path, *world);
    }
    if (config) *config = c;
    else json_decref(c);
    return 0;
}
