// parsers_checkpoint.c — checkpoint_figure: one figure of a save in checkpoint.json.
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

// One figure of save sv (an element of checkpoint.json's saves); 0, or -1 with err naming the
// save (1-based, k) when it has no such number.
static int save_figure(const char *path, json_t *sv, long long k, const char *figure, double *v, tb_error *err) {
    json_t *last = json_object_get(sv, "last_arriver");
    if (!strcmp(figure, "materialized_bytes") || !strcmp(figure, "written_bytes")) {
        const char *phase = figure[0] == 'm' ? "materialize" : "write";
        size_t r, i;
        json_t *rank, *ph;
        *v = 0;
        json_array_foreach(json_object_get(sv, "ranks"), r, rank) json_array_foreach(json_object_get(rank, "phases"), i, ph) {
            const char *name = json_string_value(json_object_get(ph, "phase"));
            if (name && !strcmp(name, phase)) *v += (double)json_integer_value(json_object_get(ph, "bytes"));
        }
        return 0;
    }
    json_t *x = !strcmp(figure, "last_arriver")    ? json_object_get(last, "rank")
                : !strcmp(figure, "waited_for_ms") ? json_object_get(last, "waited_for_ms")
                : !strcmp(figure, "stall_fraction") ? json_object_get(sv, "max_stall_ms")
                                                    : json_object_get(sv, figure);
    double total = json_number_value(json_object_get(sv, "total_ms"));
    if (!json_is_number(x) || (!strcmp(figure, "stall_fraction") && !(total > 0)))
        return tb_fail(err, "%s: save %lld has no numeric %s", path, k, figure);
    *v = !strcmp(figure, "stall_fraction") ? json_number_value(x) / total : json_number_value(x);
    return 0;
}

static int by_value(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

// checkpoint_figure: one figure of a save in checkpoint.json (engine/checkpoint/dist_checkpoint.h),
// or (args.of) its max, min or median over every save, each save's value in the evidence.
int tbp_checkpoint_record(const parser *p, json_t *args, const char *dir, double *value, json_t *ev,
                             tb_error *err) {
    static const char *const figures[] = {"materialized_bytes", "written_bytes", "last_arriver", "waited_for_ms",
                                          "max_stall_ms",       "total_ms",      "stall_fraction", NULL};
    static const char *const ofs[] = {"max", "min", "median", NULL};
    const char *figure = tbp_string_arg(args, "figure", NULL);
    if (tbp_one_of(p, "figure", figure, figures, err) != 0) return -1;
    json_t *of_arg = json_object_get(args, "of");
    const char *of = json_string_value(of_arg);
    if (of_arg && tbp_one_of(p, "of", of, ofs, err) != 0) return -1;
    long long index;
    if (tbp_int_arg(p, args, "save", 0, 1, &index, err) != 0) return -1;
    if (of && index)
        return tb_fail(err, "parser %s: args.save %lld and args.of \"%s\": one save, or a figure over every save, "
                            "not both", p->name, index, of);
    if (of && !strcmp(figure, "last_arriver"))
        return tb_fail(err, "parser %s: args.of \"%s\" of last_arriver: a rank, not a quantity (ask one save)",
                       p->name, of);
    char path[REC_PATH_MAX];
    if (tbp_run_path(path, sizeof path, dir, TB_RUN_CHECKPOINT, err) != 0) return -1;
    json_t *root = tbp_load_json_file(path, err);
    if (!root) return -1;
    json_t *files = json_array();
    json_array_append_new(files, json_string(path));
    json_object_set_new(ev, "files", files);
    json_t *saves = json_object_get(root, "saves");
    const long long n = json_is_array(saves) ? (long long)json_array_size(saves) : 0;
    int rc = 0;
    if (n == 0) rc = tb_fail(err, "%s: no saves", path);
    else if (index > n) rc = tb_fail(err, "parser %s: args.save %lld, but %s holds %lld saves", p->name, index, path, n);
    double v = 0;
    char detail[160];
    if (rc == 0 && of) {
        double *each = tb_xmalloc((size_t)n * sizeof *each, "each save's figure");
        json_t *per_save = json_array();
        for (long long k = 0; k < n && rc == 0; k++)
            if ((rc = save_figure(path, json_array_get(saves, (size_t)k), k + 1, figure, &each[k], err)) == 0)
                json_array_append_new(per_save, json_real(each[k]));
        if (rc == 0) {
            json_object_set_new(ev, "per_save", per_save);
            qsort(each, (size_t)n, sizeof *each, by_value);
            v = !strcmp(of, "max") ? each[n - 1]
                : !strcmp(of, "min") ? each[0]
                                     : (n % 2 ? each[n / 2] : (each[n / 2 - 1] + each[n / 2]) / 2);
            snprintf(detail, sizeof detail, TB_RUN_CHECKPOINT " %s of %s over its %lld saves", of, figure, n);
        } else {
            json_decref(per_save);
        }
        free(each);
    } else if (rc == 0) {
        rc = save_figure(path, json_array_get(saves, (size_t)(index ? index - 1 : n - 1)), index ? index : n, figure,
                         &v, err);
        snprintf(detail, sizeof detail, TB_RUN_CHECKPOINT " save %lld of %lld: %s", index ? index : n, n, figure);
    }
    json_decref(root);
    if (rc != 0) return -1;
    *value = v;
    json_object_set_new(ev, "detail", json_string(detail));
    return 0;
}
