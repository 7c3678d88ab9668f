// parsers_failure.c — the parsers of a failed run's reports, read from their per-rank parts
// (core/failure_report.h): oom_figure (oom.rank-NNNNN.json) and hang_figure (hang.rank-NNNNN.json,
// merged here as tracebook hang merges them). Both exact: nothing in them is a time.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/failure_report.h"
#include "prove/parsers_internal.h"

static const char *const mem_categories[] = {"params",    "grads", "optimizer", "activations",
                                             "workspace", "comm",  "gathered",  NULL};
static const char *const mem_categories_total[] = {"params", "grads", "optimizer", "activations",
                                                   "workspace", "comm", "gathered", "total", NULL};

// The parts of `kind` in the record's run directory, each checked to be a rank of config
// world_size and its path added to files. NULL with err set on trouble: an unreadable part is
// an error, not a part left out.
static json_t *read_parts(const parser *p, const char *dir, tb_rank_file kind, json_t *files, char *run_dir,
                          size_t size, tb_error *err) {
    char config_path[REC_PATH_MAX];
    long long world;
    if (tbp_record_world_size(dir, config_path, sizeof config_path, files, &world, NULL, err) != 0 ||
        tb_run_path(run_dir, size, dir, TB_RECORD_RUN_DIR, err) != 0)
        return NULL;
    int unreadable = 0;
    json_t *parts = tb_report_parts_read(run_dir, kind, &unreadable, err);
    if (!parts) return NULL;
    const char *what = kind == TB_RANK_OOM_PART ? "oom" : "hang";
    if (unreadable) {
        json_decref(parts);
        tb_fail(err, "parser %s: %s: %d %s.rank-NNNNN.json part%s unreadable (not JSON, or its rank is not its "
                     "file's)", p->name, run_dir, unreadable, what, unreadable == 1 ? "" : "s");
        return NULL;
    }
    size_t i;
    json_t *part;
    json_array_foreach(parts, i, part) {
        json_int_t rank = json_integer_value(json_object_get(part, "rank"));
        char path[REC_PATH_MAX];
        if (rank < 0 || rank >= world) {
            json_decref(parts);
            tb_fail(err, "parser %s: %s: %s.rank-%05lld.json, but %s says world_size %lld", p->name, run_dir, what,
                    (long long)rank, config_path, world);
            return NULL;
        }
        if (tb_rank_file_path(path, sizeof path, run_dir, kind, (int)rank, err) != 0) {
            json_decref(parts);
            return NULL;
        }
        json_array_append_new(files, json_string(path));
    }
    return parts;
}

// Whether `range` is one of the " > "-separated names of a range stack.
static int on_stack(const char *stack, const char *range) {
    size_t n = strlen(range);
    for (const char *s = stack; s && *s;) {
        const char *end = strstr(s, " > ");
        size_t len = end ? (size_t)(end - s) : strlen(s);
        if (len == n && !strncmp(s, range, n)) return 1;
        s = end ? end + 3 : NULL;
    }
    return 0;
}

int tbp_oom_record(const parser *p, json_t *args, const char *dir, double *value, json_t *ev, tb_error *err) {
    static const char *const figures[] = {"ranks",     "rank",         "step",          "microbatch", "requested_bytes",
                                          "cap_bytes", "in_use_bytes", "current_bytes", "peak_bytes", NULL};
    const char *figure = tbp_string_arg(args, "figure", NULL);
    const char *category = tbp_string_arg(args, "category", NULL);
    const char *requested = tbp_string_arg(args, "requested_category", NULL);
    const char *in = tbp_string_arg(args, "in", NULL);
    if (tbp_one_of(p, "figure", figure, figures, err) != 0) return -1;
    if (json_object_get(args, "requested_category") &&
        tbp_one_of(p, "requested_category", requested, mem_categories, err) != 0)
        return -1;
    const int by_category = !strcmp(figure, "current_bytes") || !strcmp(figure, "peak_bytes");
    if (json_object_get(args, "category") && !by_category)
        return tb_fail(err, "parser %s: args.category is for the figures current_bytes and peak_bytes (to match the "
                            "request's category: args.requested_category)", p->name);
    if (json_object_get(args, "category") && tbp_one_of(p, "category", category, mem_categories_total, err) != 0)
        return -1;
    if (json_object_get(args, "in") && (!in || !*in))
        return tb_fail(err, "parser %s: args.in must be a range name (e.g. forward)", p->name);
    long long want_rank;
    if (tbp_int_arg(p, args, "rank", -1, 0, &want_rank, err) != 0) return -1;
    if (!category) category = "total";

    json_t *files = json_array();
    json_object_set_new(ev, "files", files);
    char run_dir[REC_PATH_MAX];
    json_t *parts = read_parts(p, dir, TB_RANK_OOM_PART, files, run_dir, sizeof run_dir, err);
    if (!parts) return -1;
    int matching = 0, rc = 0;
    json_t *first = NULL;
    size_t i;
    json_t *part;
    json_array_foreach(parts, i, part) {
        const char *stack = json_string_value(json_object_get(part, "range_stack"));
        const char *cat = json_string_value(json_object_get(part, "requested_category"));
        json_int_t rank = json_integer_value(json_object_get(part, "rank"));
        if (!stack || !cat) {
            rc = tb_fail(err, "%s: the oom part of rank %lld has no range_stack or requested_category", run_dir,
                         (long long)rank);
            break;
        }
        if ((want_rank >= 0 && rank != want_rank) || (requested && strcmp(cat, requested)) ||
            (in && !on_stack(stack, in)))
            continue;
        matching++;
        if (!first) first = part;
    }
    double v = matching;
    char detail[1024];
    snprintf(detail, sizeof detail, "%d of %zu oom part%s match", matching, json_array_size(parts),
             json_array_size(parts) == 1 ? "" : "s");
    if (rc == 0 && first) {
        json_t *x = NULL;
        if (!strcmp(figure, "in_use_bytes")) x = json_object_get(json_object_get(first, "current"), "total");
        else if (by_category)
            x = json_object_get(json_object_get(first, figure[0] == 'c' ? "current" : "peak"), category);
        else if (strcmp(figure, "ranks")) x = json_object_get(first, figure);
        if (strcmp(figure, "ranks") && !json_is_integer(x))
            rc = tb_fail(err, "%s: the oom part of rank %lld has no integer %s%s%s", run_dir,
                         (long long)json_integer_value(json_object_get(first, "rank")), figure,
                         by_category ? " of " : "", by_category ? category : "");
        else if (x) v = (double)json_integer_value(x);
        snprintf(detail + strlen(detail), sizeof detail - strlen(detail),
                 "; the first: %s out of memory at step %lld microbatch %lld in %s: %lld bytes of %s (%s) over the "
                 "cap %lld with %lld in use",
                 json_string_value(json_object_get(first, "rank_label")),
                 (long long)json_integer_value(json_object_get(first, "step")),
                 (long long)json_integer_value(json_object_get(first, "microbatch")),
                 json_string_value(json_object_get(first, "range_stack")),
                 (long long)json_integer_value(json_object_get(first, "requested_bytes")),
                 json_string_value(json_object_get(first, "requested_category")),
                 json_string_value(json_object_get(first, "requested_what")),
                 (long long)json_integer_value(json_object_get(first, "cap_bytes")),
                 (long long)json_integer_value(json_object_get(json_object_get(first, "current"), "total")));
    } else if (rc == 0 && strcmp(figure, "ranks")) {
        rc = tb_fail(err, "parser %s: %s: no rank ran out of memory%s%s%s%s%s (%zu oom part%s)", p->name, run_dir,
                     want_rank >= 0 || requested || in ? " matching" : "", requested ? " requested_category " : "",
                     requested ? requested : "", in ? " in " : "", in ? in : "", json_array_size(parts),
                     json_array_size(parts) == 1 ? "" : "s");
    }
    json_decref(parts);
    if (rc != 0) return -1;
    *value = v;
    json_object_set_new(ev, "detail", json_string(detail));
    return 0;
}

int tbp_hang_record(const parser *p, json_t *args, const char *dir, double *value, json_t *ev, tb_error *err) {
    static const char *const figures[] = {"blamed_rank", "blamed_ranks", "stuck_ranks", "absent_ranks", NULL};
    const char *figure = tbp_string_arg(args, "figure", NULL);
    if (tbp_one_of(p, "figure", figure, figures, err) != 0) return -1;
    json_t *files = json_array();
    json_object_set_new(ev, "files", files);
    char run_dir[REC_PATH_MAX];
    json_t *parts = read_parts(p, dir, TB_RANK_HANG_PART, files, run_dir, sizeof run_dir, err);
    if (!parts) return -1;
    if (json_array_size(parts) == 0) {
        json_decref(parts);
        return tb_fail(err, "parser %s: %s: no hang.rank-NNNNN.json part (the run did not hang)", p->name, run_dir);
    }
    json_t *report = tb_hang_report_merge(parts);
    json_decref(parts);
    json_t *causes = json_object_get(report, "root_cause");
    const size_t ncauses = json_array_size(causes);
    int rc = 0;
    double v = 0;
    char detail[2048];
    int used = snprintf(detail, sizeof detail, "root cause (merged from the parts):");
    size_t i;
    json_t *c;
    json_array_foreach(causes, i, c) {
        if (used < (int)sizeof detail)
            used += snprintf(detail + used, sizeof detail - (size_t)used, "%s %s: %s", i ? ";" : "",
                             json_string_value(json_object_get(c, "rank_label")),
                             json_string_value(json_object_get(c, "reason")));
    }
    if (!ncauses && used < (int)sizeof detail) snprintf(detail + used, sizeof detail - (size_t)used, " none");
    if (!strcmp(figure, "blamed_rank")) {
        json_t *rank = json_object_get(json_array_get(causes, 0), "rank");
        if (ncauses != 1 || !json_is_integer(rank))
            rc = tb_fail(err, "parser %s: %s: the root cause names %zu ranks, not one (%s); blamed_ranks counts them",
                         p->name, run_dir, ncauses, detail);
        else v = (double)json_integer_value(rank);
    } else if (!strcmp(figure, "blamed_ranks")) {
        v = (double)ncauses;
    } else if (!strcmp(figure, "stuck_ranks")) {
        json_t *n = json_object_get(report, "stuck_ranks");
        if (!json_is_integer(n)) rc = tb_fail(err, "parser %s: %s: the merged report has no stuck_ranks", p->name, run_dir);
        else v = (double)json_integer_value(n);
    } else {
        v = (double)json_array_size(json_object_get(report, "absent_ranks"));
    }
    json_decref(report);
    if (rc != 0) return -1;
    *value = v;
    json_object_set_new(ev, "detail", json_string(detail));
    return 0;
}
