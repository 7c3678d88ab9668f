// parsers.c — the claim parsers (parsers.h has each one's exact definition).
//
// Every simple parser is a per-record function over one record's run directory; the
// driver (parse_over_records) runs it on each record and takes the median over records.
// ratio and saved_fraction combine two sub-claims. A record's files are read fresh on each
// call: the point of a parser is that its number comes from the raw files.
#include "parsers.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/json_number.h"
#include "core/run_dir.h"
#include "core/xalloc.h"

#define REC_PATH_MAX 4096

// ---------------------------------------------------------------------------------------
// Definitions

typedef struct parser parser;
typedef int (*record_fn)(const parser *p, json_t *args, const char *record_dir, double *value, json_t *ev,
                         tb_error *err);
typedef int (*combine_fn)(const parser *p, json_t *args, const char *const *dirs, int n, double *value,
                          json_t **evidence, tb_error *err);

struct parser {
    const char *name;
    const char *definition;
    const char *const *arg_names;  // the args it accepts (NULL-terminated)
    record_fn per_record;          // a per-record parser (median over records), or
    combine_fn combine;            // a combination of sub-claims
};

static const char *const warmup_args[] = {"warmup_steps", NULL};
static const char *const step_args[] = {"step", NULL};
static const char *const category_args[] = {"category", NULL};
static const char *const kind_args[] = {"kind", NULL};
static const char *const no_args[] = {NULL};
static const char *const ratio_args[] = {"numerator", "denominator", NULL};
static const char *const saved_args[] = {"treatment", "baseline", "numerator", "denominator", NULL};
static const char *const difference_args[] = {"a", "b", NULL};
static const char *const comm_args[] = {"group", "op", "step", NULL};
static const char *const rank_figure_args[] = {"figure", "rank", "of", NULL};
static const char *const stage_figure_args[] = {"figure", "stage", "of", NULL};
static const char *const checkpoint_args[] = {"figure", "save", NULL};

static int tokens_per_s_record(const parser *, json_t *, const char *, double *, json_t *, tb_error *);
static int step_ms_record(const parser *, json_t *, const char *, double *, json_t *, tb_error *);
static int loss_at_step_record(const parser *, json_t *, const char *, double *, json_t *, tb_error *);
static int peak_memory_record(const parser *, json_t *, const char *, double *, json_t *, tb_error *);
static int pipeline_record(const parser *, json_t *, const char *, double *, json_t *, tb_error *);
static int comm_bytes_record(const parser *, json_t *, const char *, double *, json_t *, tb_error *);
static int figure_record(const parser *, json_t *, const char *, double *, json_t *, tb_error *);
static int checkpoint_record(const parser *, json_t *, const char *, double *, json_t *, tb_error *);
static int ratio_combine(const parser *, json_t *, const char *const *, int, double *, json_t **, tb_error *);
// --- the planner's parser (parsers_plan.c, issue 16): one entry below and one name ---
#include "parsers_plan.h"
static int plan_figure_record(const parser *p, json_t *args, const char *dir, double *v, json_t *ev, tb_error *err) {
    (void)p;
    return tb_plan_figure_record(args, dir, v, ev, err);
}
// --- end of the planner's parser ---
static int difference_combine(const parser *, json_t *, const char *const *, int, double *, json_t **, tb_error *);

static const parser parsers[] = {
    {"tokens_per_s",
     "per record: for each step s > warmup_steps (default 1), tokens / (t_s / 1000) with tokens = config "
     "global_batch_size x seq_length and t_s = max over ranks of metrics.rank-r step_ms at step s (the slowest "
     "rank); the record's value is the median over those steps; the claim's value is the median over records",
     warmup_args, tokens_per_s_record, NULL},
    {"step_ms",
     "per record: the median over steps s > warmup_steps (default 1) of t_s = max over ranks of "
     "metrics.rank-r step_ms at step s (the slowest rank); median over records",
     warmup_args, step_ms_record, NULL},
    {"loss_at_step",
     "per record: rank 0's loss at args.step (default the last step); every other rank that logged that step "
     "must agree within a relative 1e-6; median over records",
     step_args, loss_at_step_record, NULL},
    {"peak_memory_bytes",
     "per record: max over steps and ranks of metrics mem_peak_bytes[category] (default \"total\", the sum of "
     "the categories' peaks; \"total_peak\" reads mem_total_peak_bytes, the most in use at once); median over "
     "records",
     category_args, peak_memory_record, NULL},
    {"pipeline_bubble",
     "per record: pipeline.json measured_bubble_fraction (args.kind \"measured\", the default: mean over stages "
     "of 1 - compute / schedule time, mean over steps after the first) or theoretical_bubble_fraction "
     "(\"theoretical\": (p - 1) / (v m + p - 1)); median over records",
     kind_args, pipeline_record, NULL},
    {"stage_imbalance",
     "per record: pipeline.json stage_imbalance (slowest / fastest stage forward+backward time, mean over steps "
     "after the first); median over records",
     no_args, pipeline_record, NULL},
    {"comm_bytes",
     "per record: for each rank r of config world_size, the sum of args.bytes (count x 4: the buffer each call "
     "passes, not a ring's bus bytes) of the communicator calls in trace.rank-r.json on args.group (required: "
     "tp, cp, dp, dp_cp, pp, pp_grad, mp, embedding, world) with args.op (default every op) that start inside "
     "rank r's train_step range of args.step (default the last step); the record's value is the max over ranks "
     "(the busiest rank); median over records",
     comm_args, comm_bytes_record, NULL},
    {"rank_figure",
     "per record: pipeline.json ranks[args.rank].<args.figure> (parameters, layers, flops_per_step, "
     "peak_activation_bytes: what the rank holds and computes, its tensor-parallel shard), or with args.of "
     "\"max\" (the default when no rank is given), \"min\" or \"sum\" that over every rank (as many as config "
     "world_size); median over records",
     rank_figure_args, figure_record, NULL},
    {"stage_figure",
     "per record: pipeline.json stages[args.stage].<args.figure> (parameters, layers, flops_per_step, "
     "peak_activation_bytes of the stage's rank with rank 0's tp, cp and dp coordinates), or with args.of "
     "\"max\" (the default when no stage is given), \"min\" or \"sum\" that over every stage (as many as "
     "config pipeline_model_parallel_size); median over records",
     stage_figure_args, figure_record, NULL},
    {"checkpoint_figure",
     "per record: checkpoint.json saves[args.save - 1] (1-based; default the last save): args.figure "
     "materialized_bytes (the state the ranks listed to save, summed over ranks: exact), written_bytes (their "
     "shard files, summed: exact), last_arriver (the rank last at the barrier), waited_for_ms (how long after the "
     "first), max_stall_ms (what training waited, the worst rank), total_ms or stall_fraction (max_stall_ms / "
     "total_ms); median over records",
     checkpoint_args, checkpoint_record, NULL},
    {"ratio",
     "numerator / denominator, each {parser, args, records: [0-based index into the claim's runs | run id]} "
     "(records default: all the claim's runs) derived as a claim of its own",
     ratio_args, NULL, ratio_combine},
    {"saved_fraction",
     "1 - treatment / baseline, each {parser, args, records: [0-based index into the claim's runs | run id]} "
     "(records default: all the claim's runs; numerator/denominator accepted for treatment/baseline)",
     saved_args, NULL, ratio_combine},
    {"relative_difference",
     "|a - b| / |b| (|a - b| when b is 0), each {parser, args, records: [0-based index into the claim's runs | run "
     "id]} (records default: all the claim's runs) derived as a claim of its own; both are read from the records "
     "at prove time, so neither side is a number the runbook states",
     difference_args, NULL, difference_combine},
    {"plan_figure", TB_PLAN_FIGURE_DEFINITION, tb_plan_figure_args, plan_figure_record, NULL},  // parsers_plan.c
};
#define NPARSERS ((int)(sizeof parsers / sizeof *parsers))

const char *const tb_parser_names[] = {"tokens_per_s",    "step_ms",         "loss_at_step", "peak_memory_bytes",
                                       "pipeline_bubble", "stage_imbalance", "comm_bytes",   "rank_figure",
                                       "stage_figure",    "checkpoint_figure", "ratio",      "saved_fraction",
                                       "relative_difference", "plan_figure", NULL};

static const parser *find_parser(const char *name) {
    for (int i = 0; name && i < NPARSERS; i++)
        if (!strcmp(parsers[i].name, name)) return &parsers[i];
    return NULL;
}

const char *tb_parser_definition(const char *name) {
    const parser *p = find_parser(name);
    return p ? p->definition : NULL;
}

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

// min / median / max of n values, as a JSON object (values is reordered)
static json_t *summary_json(double *v, int n) {
    double med = tb_median(v, n);
    return json_pack("{s:f, s:f, s:f, s:i}", "min", v[0], "median", med, "max", v[n - 1], "count", n);
}

// The last component of a path (a record directory's run id), into out.
static const char *base_name(const char *path, char *out, size_t size) {
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
static int run_path(char *out, size_t size, const char *record_dir, const char *file, tb_error *err) {
    char run_dir[REC_PATH_MAX];
    if (tb_run_path(run_dir, sizeof run_dir, record_dir, TB_RECORD_RUN_DIR, err) != 0) return -1;
    return tb_run_path(out, size, run_dir, file, err);
}

static json_t *load_json_file(const char *path, tb_error *err) {
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

// A JSON integer, or a real with an integral value (a Lua float such as 2.0): 0, else -1.
static int integral(json_t *v, long long *out) {
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
static int int_arg(const parser *p, json_t *args, const char *key, long long dflt, long long min, long long *out,
                   tb_error *err) {
    json_t *v = args ? json_object_get(args, key) : NULL;
    if (!v || json_is_null(v)) {
        *out = dflt;
        return 0;
    }
    if (integral(v, out) != 0 || *out < min)
        return tb_fail(err, "parser %s: args.%s must be an integer >= %lld", p->name, key, min);
    return 0;
}

static const char *string_arg(json_t *args, const char *key, const char *dflt) {
    json_t *v = args ? json_object_get(args, key) : NULL;
    return json_is_string(v) ? json_string_value(v) : dflt;
}

// ---------------------------------------------------------------------------------------
// One record's metrics: every rank's metrics.rank-NNNNN.jsonl

enum { NEED_STEP_MS = 1, NEED_LOSS = 2, NEED_MEM = 4 };

typedef struct metric_row {
    int64_t step;
    int line;
    int has_loss;
    double loss, step_ms, mem;
} metric_row;

typedef struct rank_metrics {
    char path[REC_PATH_MAX];
    metric_row *rows;  // sorted by step
    int n;
} rank_metrics;

typedef struct record_metrics {
    json_t *config;  // run/config.json
    char config_path[REC_PATH_MAX];
    int nranks;
    rank_metrics *ranks;
} record_metrics;

static void record_metrics_free(record_metrics *m) {
    for (int r = 0; r < m->nranks; r++) free(m->ranks[r].rows);
    free(m->ranks);
    json_decref(m->config);
    memset(m, 0, sizeof *m);
}

static int cmp_row_step(const void *a, const void *b) {
    int64_t x = ((const metric_row *)a)->step, y = ((const metric_row *)b)->step;
    return x < y ? -1 : x > y ? 1 : 0;
}

static int read_whole_file(const char *path, char **data, size_t *len, tb_error *err) {
    FILE *f = fopen(path, "rb");
    if (!f) return tb_fail(err, "%s: cannot open (%s)", path, strerror(errno));
    size_t cap = 1 << 16, n = 0;
    char *buf = tb_xmalloc(cap, "metrics file");
    for (;;) {
        if (n + 1 >= cap) buf = tb_xrealloc(buf, cap *= 2, "metrics file");
        size_t got = fread(buf + n, 1, cap - n - 1, f);
        n += got;
        if (got == 0) break;
    }
    int bad = ferror(f);
    fclose(f);
    if (bad) {
        free(buf);
        return tb_fail(err, "%s: read error", path);
    }
    buf[n] = '\0';
    *data = buf;
    *len = n;
    return 0;
}

// A number of a metrics line, non-finite ones included (core/json_number.h).
static int number_field(json_t *line, const char *key, double *out) {
    return tb_json_number_value(json_object_get(line, key), out) ? 0 : -1;
}

// Reads one rank's metrics file, keeping the fields `need` asks for (an absent one is an
// error naming file and line). category: the mem_peak_bytes key for NEED_MEM ("total_peak":
// mem_total_peak_bytes).
static int read_rank_metrics(rank_metrics *rm, int need, const char *category, tb_error *err) {
    char *data = NULL;
    size_t len = 0;
    if (read_whole_file(rm->path, &data, &len, err) != 0) return -1;
    int cap = 64, lineno = 0, rc = 0;
    rm->rows = tb_xcalloc((size_t)cap, sizeof *rm->rows, "metrics rows");
    rm->n = 0;
    for (char *p = data; p < data + len && rc == 0;) {
        char *nl = memchr(p, '\n', (size_t)(data + len - p));
        size_t l = nl ? (size_t)(nl - p) : (size_t)(data + len - p);
        lineno++;
        char *line_start = p;
        p += l + (nl ? 1 : 0);
        size_t k = 0;
        while (k < l && (line_start[k] == ' ' || line_start[k] == '\t' || line_start[k] == '\r')) k++;
        if (k == l) continue;  // blank line
        json_error_t jerr;
        json_t *o = json_loadb(line_start, l, 0, &jerr);
        if (!o || !json_is_object(o)) {
            rc = tb_fail(err, "%s:%d: %s", rm->path, lineno, o ? "not a JSON object" : jerr.text);
            json_decref(o);
            break;
        }
        metric_row row = {0};
        row.line = lineno;
        json_t *step = json_object_get(o, "step");
        if (!json_is_integer(step) || json_integer_value(step) < 0) {
            rc = tb_fail(err, "%s:%d: no integer 'step'", rm->path, lineno);
        } else {
            row.step = (int64_t)json_integer_value(step);
            if ((need & NEED_STEP_MS) && number_field(o, "step_ms", &row.step_ms) != 0)
                rc = tb_fail(err, "%s:%d: no numeric 'step_ms'", rm->path, lineno);
            if (rc == 0 && (need & NEED_LOSS)) row.has_loss = number_field(o, "loss", &row.loss) == 0;
            if (rc == 0 && (need & NEED_MEM)) {
                int ok;
                if (!strcmp(category, "total_peak")) {
                    ok = number_field(o, "mem_total_peak_bytes", &row.mem) == 0;
                } else {
                    json_t *mem = json_object_get(o, "mem_peak_bytes");
                    ok = json_is_object(mem) && json_is_number(json_object_get(mem, category));
                    if (ok) row.mem = json_number_value(json_object_get(mem, category));
                }
                if (!ok && !strcmp(category, "total_peak"))
                    rc = tb_fail(err, "%s:%d: no numeric 'mem_total_peak_bytes'", rm->path, lineno);
                else if (!ok)
                    rc = tb_fail(err, "%s:%d: no numeric 'mem_peak_bytes.%s'", rm->path, lineno, category);
            }
        }
        json_decref(o);
        if (rc != 0) break;
        if (rm->n == cap) rm->rows = tb_xreallocarray(rm->rows, (size_t)(cap *= 2), sizeof *rm->rows, "metrics rows");
        rm->rows[rm->n++] = row;
    }
    free(data);
    if (rc != 0) return -1;
    if (rm->n == 0) return tb_fail(err, "%s: no metrics lines", rm->path);
    qsort(rm->rows, (size_t)rm->n, sizeof *rm->rows, cmp_row_step);
    for (int i = 1; i < rm->n; i++)
        if (rm->rows[i].step == rm->rows[i - 1].step)
            return tb_fail(err, "%s:%d: step %lld repeats line %d", rm->path, rm->rows[i].line,
                           (long long)rm->rows[i].step, rm->rows[i - 1].line);
    return 0;
}

static const metric_row *find_step(const rank_metrics *rm, int64_t step) {
    int lo = 0, hi = rm->n - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2;
        if (rm->rows[mid].step == step) return &rm->rows[mid];
        if (rm->rows[mid].step < step) lo = mid + 1;
        else hi = mid - 1;
    }
    return NULL;
}

// Reads config.json and the metrics of ranks 0..world_size-1, adding the paths to files.
static int read_record_metrics(record_metrics *m, const char *record_dir, int need, const char *category,
                               json_t *files, tb_error *err) {
    memset(m, 0, sizeof *m);
    if (run_path(m->config_path, sizeof m->config_path, record_dir, TB_RUN_CONFIG, err) != 0) return -1;
    if (!(m->config = load_json_file(m->config_path, err))) return -1;
    json_array_append_new(files, json_string(m->config_path));
    json_t *ws = json_object_get(m->config, "world_size");
    long long world = json_is_integer(ws) ? json_integer_value(ws) : 1;
    if (world < 1 || world > 1 << 20) {
        record_metrics_free(m);
        return tb_fail(err, "%s: world_size %lld out of range", m->config_path, world);
    }
    m->ranks = tb_xcalloc((size_t)world, sizeof *m->ranks, "ranks' metrics");
    m->nranks = (int)world;
    char run_dir[REC_PATH_MAX];
    if (tb_run_path(run_dir, sizeof run_dir, record_dir, TB_RECORD_RUN_DIR, err) != 0) {
        record_metrics_free(m);
        return -1;
    }
    for (int r = 0; r < m->nranks; r++) {
        if (tb_rank_file_path(m->ranks[r].path, sizeof m->ranks[r].path, run_dir, TB_RANK_METRICS, r, err) != 0 ||
            read_rank_metrics(&m->ranks[r], need, category, err) != 0) {
            if (r > 0) tb_fail_prefix(err, "rank %d of world_size %lld (%s)", r, world, m->config_path);
            record_metrics_free(m);
            return -1;
        }
        json_array_append_new(files, json_string(m->ranks[r].path));
    }
    return 0;
}

// The global batch's tokens: config global_batch_size x seq_length.
static int tokens_per_step(const record_metrics *m, double *tokens, json_t *ev, tb_error *err) {
    json_t *gbs = json_object_get(m->config, "global_batch_size"), *seq = json_object_get(m->config, "seq_length");
    if (!json_is_integer(gbs) || !json_is_integer(seq) || json_integer_value(gbs) <= 0 ||
        json_integer_value(seq) <= 0)
        return tb_fail(err, "%s: needs positive integer global_batch_size and seq_length", m->config_path);
    *tokens = (double)json_integer_value(gbs) * (double)json_integer_value(seq);
    char formula[160];
    snprintf(formula, sizeof formula, "global_batch_size %lld x seq_length %lld = %.0f",
             (long long)json_integer_value(gbs), (long long)json_integer_value(seq), *tokens);
    json_object_set_new(ev, "tokens_per_step", json_real(*tokens));
    json_object_set_new(ev, "tokens_formula", json_string(formula));
    return 0;
}

// t_s (max over ranks of step_ms) for rank 0's steps > warmup; *times is malloc'd.
static int slowest_step_times(const record_metrics *m, long long warmup, double **times, int *n, json_t *ev,
                              tb_error *err) {
    const rank_metrics *r0 = &m->ranks[0];
    double *t = tb_xcalloc((size_t)r0->n, sizeof *t, "step times");
    int k = 0;
    int64_t first = 0, last = 0;
    for (int i = 0; i < r0->n; i++) {
        const metric_row *row = &r0->rows[i];
        if (row->step <= warmup) continue;
        double slowest = row->step_ms;
        for (int r = 1; r < m->nranks; r++) {
            const metric_row *o = find_step(&m->ranks[r], row->step);
            if (!o) {
                free(t);
                return tb_fail(err, "%s: no step %lld (rank 0 has it, %s:%d)", m->ranks[r].path,
                               (long long)row->step, r0->path, row->line);
            }
            if (o->step_ms > slowest) slowest = o->step_ms;
        }
        if (!(slowest > 0)) {
            free(t);
            return tb_fail(err, "%s:%d: step_ms %g at step %lld is not positive", r0->path, row->line, slowest,
                           (long long)row->step);
        }
        if (k == 0) first = row->step;
        last = row->step;
        t[k++] = slowest;
    }
    if (k == 0) {
        free(t);
        return tb_fail(err, "%s: no steps after warmup_steps %lld (last step %lld)", r0->path, warmup,
                       (long long)r0->rows[r0->n - 1].step);
    }
    json_object_set_new(ev, "warmup_steps", json_integer(warmup));
    json_object_set_new(ev, "steps_used", json_pack("{s:I, s:I, s:i}", "first", (json_int_t)first, "last",
                                                    (json_int_t)last, "count", k));
    json_object_set_new(ev, "ranks", json_integer(m->nranks));
    *times = t;
    *n = k;
    return 0;
}

// ---------------------------------------------------------------------------------------
// The per-record parsers

static int step_time_record(const parser *p, json_t *args, const char *dir, int throughput, double *value,
                            json_t *ev, tb_error *err) {
    long long warmup = 1;
    if (int_arg(p, args, "warmup_steps", 1, 0, &warmup, err) != 0) return -1;
    json_t *files = json_array();
    json_object_set_new(ev, "files", files);
    record_metrics m;
    if (read_record_metrics(&m, dir, NEED_STEP_MS, NULL, files, err) != 0) return -1;
    double tokens = 0, *t = NULL;
    int n = 0;
    int rc = throughput ? tokens_per_step(&m, &tokens, ev, err) : 0;
    if (rc == 0) rc = slowest_step_times(&m, warmup, &t, &n, ev, err);
    if (rc == 0) {
        if (throughput)
            for (int i = 0; i < n; i++) t[i] = tokens / (t[i] / 1000.0);
        json_t *s = summary_json(t, n);
        *value = json_real_value(json_object_get(s, "median"));
        json_object_set_new(ev, "per_step", s);
    }
    free(t);
    record_metrics_free(&m);
    return rc;
}

static int tokens_per_s_record(const parser *p, json_t *args, const char *dir, double *value, json_t *ev,
                               tb_error *err) {
    return step_time_record(p, args, dir, 1, value, ev, err);
}

static int step_ms_record(const parser *p, json_t *args, const char *dir, double *value, json_t *ev,
                          tb_error *err) {
    return step_time_record(p, args, dir, 0, value, ev, err);
}

static int loss_at_step_record(const parser *p, json_t *args, const char *dir, double *value, json_t *ev,
                               tb_error *err) {
    long long want = -1;
    if (int_arg(p, args, "step", -1, 1, &want, err) != 0) return -1;
    json_t *files = json_array();
    json_object_set_new(ev, "files", files);
    record_metrics m;
    if (read_record_metrics(&m, dir, NEED_LOSS, NULL, files, err) != 0) return -1;
    const rank_metrics *r0 = &m.ranks[0];
    int64_t step = want < 0 ? r0->rows[r0->n - 1].step : (int64_t)want;
    const metric_row *row = find_step(r0, step);
    int rc = 0;
    if (!row) rc = tb_fail(err, "%s: no step %lld (steps %lld..%lld)", r0->path, (long long)step,
                           (long long)r0->rows[0].step, (long long)r0->rows[r0->n - 1].step);
    else if (!row->has_loss) rc = tb_fail(err, "%s:%d: no numeric 'loss'", r0->path, row->line);
    int agreeing = 1;
    for (int r = 1; rc == 0 && r < m.nranks; r++) {
        const metric_row *o = find_step(&m.ranks[r], step);
        if (!o || !o->has_loss) continue;
        if (fabs(o->loss - row->loss) > 1e-6 * fabs(row->loss))
            rc = tb_fail(err, "%s:%d: loss %.17g at step %lld disagrees with rank 0's %.17g (%s:%d)",
                         m.ranks[r].path, o->line, o->loss, (long long)step, row->loss, r0->path, row->line);
        agreeing++;
    }
    if (rc == 0) {
        *value = row->loss;
        json_object_set_new(ev, "step", json_integer(step));
        json_object_set_new(ev, "line", json_integer(row->line));
        json_object_set_new(ev, "ranks_agreeing", json_integer(agreeing));
    }
    record_metrics_free(&m);
    return rc;
}

static int peak_memory_record(const parser *p, json_t *args, const char *dir, double *value, json_t *ev,
                              tb_error *err) {
    static const char *const categories[] = {"params",    "grads", "optimizer", "activations",
                                             "workspace", "comm",  "total",     "total_peak"};
    const char *category = string_arg(args, "category", "total");
    int known = 0;
    for (size_t i = 0; i < sizeof categories / sizeof *categories; i++) known |= !strcmp(category, categories[i]);
    if (!known)
        return tb_fail(err, "parser %s: args.category '%s' is not one of params, grads, optimizer, activations, "
                            "workspace, comm, total, total_peak", p->name, category);
    json_t *files = json_array();
    json_object_set_new(ev, "files", files);
    record_metrics m;
    if (read_record_metrics(&m, dir, NEED_MEM, category, files, err) != 0) return -1;
    double peak = -1;
    int peak_rank = 0;
    const metric_row *at = NULL;
    for (int r = 0; r < m.nranks; r++)
        for (int i = 0; i < m.ranks[r].n; i++)
            if (m.ranks[r].rows[i].mem > peak) {
                peak = m.ranks[r].rows[i].mem;
                peak_rank = r;
                at = &m.ranks[r].rows[i];
            }
    *value = peak;
    json_object_set_new(ev, "category", json_string(category));
    json_object_set_new(ev, "rank_of_peak", json_integer(peak_rank));
    json_object_set_new(ev, "step_of_peak", json_integer(at ? at->step : 0));
    json_object_set_new(ev, "ranks", json_integer(m.nranks));
    record_metrics_free(&m);
    return 0;
}

static int pipeline_record(const parser *p, json_t *args, const char *dir, double *value, json_t *ev,
                           tb_error *err) {
    const char *key = "stage_imbalance";
    if (!strcmp(p->name, "pipeline_bubble")) {
        const char *kind = string_arg(args, "kind", "measured");
        if (!strcmp(kind, "measured")) key = "measured_bubble_fraction";
        else if (!strcmp(kind, "theoretical")) key = "theoretical_bubble_fraction";
        else return tb_fail(err, "parser %s: args.kind '%s' is not measured or theoretical", p->name, kind);
    }
    char path[REC_PATH_MAX];
    if (run_path(path, sizeof path, dir, TB_RUN_PIPELINE, err) != 0) return -1;
    json_t *files = json_array();
    json_object_set_new(ev, "files", files);
    json_t *root = load_json_file(path, err);
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

// The engine's communicator group and op names (engine/comm/group.h, parallel_state.c): an
// arg outside them is a typo, which would otherwise count no calls and give 0 bytes.
static const char *const comm_groups[] = {"tp", "cp", "dp", "dp_cp", "pp", "pp_grad", "mp", "embedding", "world",
                                          NULL};
static const char *const comm_ops[] = {"all_reduce", "reduce_scatter", "all_gather", "all_to_all", "broadcast",
                                       "send",       "recv",           "barrier",    NULL};

// Whether s is one of names; else err names the arg, the value and the choices.
static int one_of(const parser *p, const char *key, const char *s, const char *const *names, tb_error *err) {
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
static int record_world_size(const char *dir, char *config_path, size_t size, json_t *files, long long *world,
                             json_t **config, tb_error *err) {
    if (run_path(config_path, size, dir, TB_RUN_CONFIG, err) != 0) return -1;
    json_t *c = load_json_file(config_path, err);
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

// One rank's trace: the [ts, ts + dur] of train_step `step` (the rank's last step when
// step < 0, which sets *step), then the bytes and calls of the matching communicator calls
// starting inside it.
static int rank_comm_bytes(const char *path, const char *group, const char *op, long long *step, double *bytes,
                           long long *calls, tb_error *err) {
    json_t *root = load_json_file(path, err);
    if (!root) return -1;
    json_t *events = json_object_get(root, "traceEvents");
    int rc = 0;
    if (!json_is_array(events)) rc = tb_fail(err, "%s: no 'traceEvents' array", path);
    double start = 0, end = -1;
    long long found = -1;
    size_t i;
    json_t *e;
    json_array_foreach(events, i, e) {
        if (rc != 0) break;
        const char *name = json_string_value(json_object_get(e, "name"));
        json_t *s = json_object_get(json_object_get(e, "args"), "step");
        if (!name || strcmp(name, "train_step") || !json_is_integer(s)) continue;
        long long at = (long long)json_integer_value(s);
        if (*step >= 0 ? at != *step : at <= found) continue;
        json_t *ts = json_object_get(e, "ts"), *dur = json_object_get(e, "dur");
        if (!json_is_number(ts) || !json_is_number(dur) || json_number_value(dur) < 0) {
            rc = tb_fail(err, "%s: traceEvents[%zu] (train_step, step %lld) has no numeric ts and dur", path, i, at);
            break;
        }
        found = at;
        start = json_number_value(ts);
        end = start + json_number_value(dur);
    }
    if (rc == 0 && found < 0) {
        if (*step >= 0) rc = tb_fail(err, "%s: no train_step range with args.step %lld", path, *step);
        else rc = tb_fail(err, "%s: no train_step range", path);
    }
    *bytes = 0;
    *calls = 0;
    json_array_foreach(events, i, e) {
        if (rc != 0) break;
        json_t *args = json_object_get(e, "args"), *b = json_object_get(args, "bytes");
        const char *g = json_string_value(json_object_get(args, "group"));
        const char *o = json_string_value(json_object_get(args, "op"));
        if (!g || strcmp(g, group) || (op && (!o || strcmp(o, op)))) continue;
        json_t *ts = json_object_get(e, "ts");
        if (!json_is_number(ts) || !json_is_integer(b) || json_integer_value(b) < 0) {
            rc = tb_fail(err, "%s: traceEvents[%zu] (comm.%s.%s) has no numeric ts or non-negative integer "
                              "args.bytes", path, i, g, o ? o : "?");
            break;
        }
        double t = json_number_value(ts);
        if (t < start || t > end) continue;
        *bytes += (double)json_integer_value(b);
        (*calls)++;
    }
    json_decref(root);
    if (rc == 0 && *step < 0) *step = found;
    return rc;
}

static int comm_bytes_record(const parser *p, json_t *args, const char *dir, double *value, json_t *ev,
                             tb_error *err) {
    const char *group = string_arg(args, "group", NULL), *op = string_arg(args, "op", NULL);
    if (one_of(p, "group", group, comm_groups, err) != 0) return -1;
    if (json_object_get(args, "op") && one_of(p, "op", op, comm_ops, err) != 0) return -1;
    long long step = -1;
    if (int_arg(p, args, "step", -1, 1, &step, err) != 0) return -1;
    json_t *files = json_array();
    json_object_set_new(ev, "files", files);
    char config_path[REC_PATH_MAX], run_dir[REC_PATH_MAX], path[REC_PATH_MAX];
    long long world;
    if (record_world_size(dir, config_path, sizeof config_path, files, &world, NULL, err) != 0 ||
        tb_run_path(run_dir, sizeof run_dir, dir, TB_RECORD_RUN_DIR, err) != 0)
        return -1;
    json_t *per_rank = json_array();
    json_object_set_new(ev, "per_rank", per_rank);
    double most = -1, least = 0;
    long long most_rank = 0, most_calls = 0;
    for (long long r = 0; r < world; r++) {
        double bytes;
        long long calls;
        // rank 0 fixes the step (its last, unless args.step says); every other rank must have it
        if (tb_rank_file_path(path, sizeof path, run_dir, TB_RANK_TRACE, (int)r, err) != 0 ||
            rank_comm_bytes(path, group, op, &step, &bytes, &calls, err) != 0)
            return r > 0 ? tb_fail_prefix(err, "rank %lld of world_size %lld (%s)", r, world, config_path) : -1;
        json_array_append_new(files, json_string(path));
        json_array_append_new(per_rank, json_pack("{s:I, s:f, s:I}", "rank", (json_int_t)r, "bytes", bytes, "calls",
                                                  (json_int_t)calls));
        if (bytes > most) most = bytes, most_rank = r, most_calls = calls;
        if (r == 0 || bytes < least) least = bytes;
    }
    *value = most;
    char detail[512];
    snprintf(detail, sizeof detail,
             "step %lld, comm.%s.%s calls inside train_step: the busiest of %lld rank%s is rank %lld with %lld "
             "call%s, %.0f bytes (the least: %.0f bytes)",
             step, group, op ? op : "*", world, world == 1 ? "" : "s", most_rank, most_calls,
             most_calls == 1 ? "" : "s", most, least);
    json_object_set_new(ev, "step", json_integer(step));
    json_object_set_new(ev, "detail", json_string(detail));
    return 0;
}

// checkpoint_figure: one figure of a save in checkpoint.json (engine/checkpoint/dist_checkpoint.h).
static int checkpoint_record(const parser *p, json_t *args, const char *dir, double *value, json_t *ev,
                             tb_error *err) {
    static const char *const figures[] = {"materialized_bytes", "written_bytes", "last_arriver", "waited_for_ms",
                                          "max_stall_ms",       "total_ms",      "stall_fraction", NULL};
    const char *figure = string_arg(args, "figure", NULL);
    if (one_of(p, "figure", figure, figures, err) != 0) return -1;
    long long index;
    if (int_arg(p, args, "save", 0, 1, &index, err) != 0) return -1;
    char path[REC_PATH_MAX];
    if (run_path(path, sizeof path, dir, TB_RUN_CHECKPOINT, err) != 0) return -1;
    json_t *root = load_json_file(path, err);
    if (!root) return -1;
    json_t *files = json_array();
    json_array_append_new(files, json_string(path));
    json_object_set_new(ev, "files", files);
    json_t *saves = json_object_get(root, "saves");
    const long long n = json_is_array(saves) ? (long long)json_array_size(saves) : 0;
    int rc = 0;
    if (n == 0) rc = tb_fail(err, "%s: no saves", path);
    else if (index > n) rc = tb_fail(err, "parser %s: args.save %lld, but %s holds %lld saves", p->name, index, path, n);
    json_t *sv = rc == 0 ? json_array_get(saves, (size_t)(index ? index - 1 : n - 1)) : NULL;
    json_t *last = json_object_get(sv, "last_arriver");
    double v = 0;
    if (rc == 0 && (!strcmp(figure, "materialized_bytes") || !strcmp(figure, "written_bytes"))) {
        const char *phase = figure[0] == 'm' ? "materialize" : "write";
        size_t r, i;
        json_t *rank, *ph;
        json_array_foreach(json_object_get(sv, "ranks"), r, rank) json_array_foreach(json_object_get(rank, "phases"), i, ph) {
            const char *name = json_string_value(json_object_get(ph, "phase"));
            if (name && !strcmp(name, phase)) v += (double)json_integer_value(json_object_get(ph, "bytes"));
        }
    } else if (rc == 0) {
        json_t *x = !strcmp(figure, "last_arriver")    ? json_object_get(last, "rank")
                    : !strcmp(figure, "waited_for_ms") ? json_object_get(last, "waited_for_ms")
                    : !strcmp(figure, "stall_fraction") ? json_object_get(sv, "max_stall_ms")
                                                        : json_object_get(sv, figure);
        double total = json_number_value(json_object_get(sv, "total_ms"));
        if (!json_is_number(x) || (!strcmp(figure, "stall_fraction") && !(total > 0)))
            rc = tb_fail(err, "%s: save %lld has no numeric %s", path, index ? index : n, figure);
        else v = !strcmp(figure, "stall_fraction") ? json_number_value(x) / total : json_number_value(x);
    }
    json_decref(root);
    if (rc != 0) return -1;
    *value = v;
    char detail[160];
    snprintf(detail, sizeof detail, TB_RUN_CHECKPOINT " save %lld of %lld: %s", index ? index : n, n, figure);
    json_object_set_new(ev, "detail", json_string(detail));
    return 0;
}

// rank_figure and stage_figure: one exact figure of pipeline.json's "ranks" or "stages".
static int figure_record(const parser *p, json_t *args, const char *dir, double *value, json_t *ev, tb_error *err) {
    static const char *const figures[] = {"parameters", "layers", "flops_per_step", "peak_activation_bytes", NULL};
    static const char *const reductions[] = {"max", "min", "sum", NULL};
    const int stages = !strcmp(p->name, "stage_figure");
    const char *list = stages ? "stages" : "ranks", *index_key = stages ? "stage" : "rank";
    const char *figure = string_arg(args, "figure", NULL), *of = string_arg(args, "of", NULL);
    if (one_of(p, "figure", figure, figures, err) != 0) return -1;
    json_t *index_arg = json_object_get(args, index_key);
    if (index_arg && json_object_get(args, "of"))
        return tb_fail(err, "parser %s: args.%s and args.of exclude each other (one %s, or a reduction over all)",
                       p->name, index_key, index_key);
    if (json_object_get(args, "of") && one_of(p, "of", of, reductions, err) != 0) return -1;
    long long index = -1;
    if (int_arg(p, args, index_key, -1, 0, &index, err) != 0) return -1;
    if (index < 0 && !of) of = "max";

    json_t *files = json_array();
    json_object_set_new(ev, "files", files);
    char config_path[REC_PATH_MAX], path[REC_PATH_MAX];
    long long world;
    json_t *config = NULL;
    if (record_world_size(dir, config_path, sizeof config_path, files, &world, &config, err) != 0) return -1;
    json_t *pp = json_object_get(config, "pipeline_model_parallel_size");
    long long expected = stages ? (json_is_integer(pp) ? json_integer_value(pp) : 1) : world;
    json_decref(config);
    if (run_path(path, sizeof path, dir, TB_RUN_PIPELINE, err) != 0) return -1;
    json_t *root = load_json_file(path, err);
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

// ---------------------------------------------------------------------------------------
// The driver and the combinations

static int check_args(const parser *p, json_t *args, tb_error *err) {
    if (!args || json_is_null(args)) return 0;
    if (!json_is_object(args)) return tb_fail(err, "parser %s: args must be a JSON object", p->name);
    const char *key;
    json_t *v;
    json_object_foreach(args, key, v) {
        int known = 0;
        for (const char *const *a = p->arg_names; *a; a++) known |= !strcmp(*a, key);
        if (!known) {
            char list[256] = "";
            size_t used = 0;
            for (const char *const *a = p->arg_names; *a && used < sizeof list; a++) {
                int w = snprintf(list + used, sizeof list - used, "%s%s", used ? ", " : "", *a);
                if (w < 0) break;
                used += (size_t)w;
            }
            return tb_fail(err, "parser %s: unknown args.%s (known: %s)", p->name, key, used ? list : "none");
        }
    }
    return 0;
}

static int parse_over_records(const parser *p, json_t *args, const char *const *dirs, int n, double *value,
                              json_t **evidence, tb_error *err) {
    double *values = tb_xcalloc((size_t)n, sizeof *values, "per-record values");
    json_t *records = json_array();
    int rc = 0;
    for (int i = 0; i < n && rc == 0; i++) {
        json_t *ev = json_object();
        char run_id[256];
        json_object_set_new(ev, "run_id", json_string(base_name(dirs[i], run_id, sizeof run_id)));
        json_object_set_new(ev, "record_dir", json_string(dirs[i]));
        if (p->per_record(p, args, dirs[i], &values[i], ev, err) != 0) {
            rc = tb_fail_prefix(err, "parser %s, record %s", p->name, dirs[i]);
            json_decref(ev);
            break;
        }
        json_object_set_new(ev, "value", json_real(values[i]));
        json_array_append_new(records, ev);
    }
    if (rc == 0) {
        json_t *s = summary_json(values, n);
        *value = json_real_value(json_object_get(s, "median"));
        if (evidence) {
            *evidence = json_pack("{s:s, s:s, s:O, s:f, s:o, s:o}", "parser", p->name, "definition", p->definition,
                                  "args", args ? args : json_null(), "value", *value, "over_records", s, "records",
                                  records);
            records = NULL;
        } else {
            json_decref(s);
        }
    }
    json_decref(records);
    free(values);
    return rc;
}

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
            if (integral(v, &index) == 0 && index >= 0 && index < n) found = (int)index;
            char run_id[256];
            for (int j = 0; json_is_string(v) && j < n && found < 0; j++)
                if (!strcmp(base_name(dirs[j], run_id, sizeof run_id), json_string_value(v))) found = j;
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

static int ratio_combine(const parser *p, json_t *args, const char *const *dirs, int n, double *value,
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
static int difference_combine(const parser *p, json_t *args, const char *const *dirs, int n, double *value,
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

int tb_parse_claim(const char *name, json_t *args, const char *const *record_dirs, int nrecords, double *value,
                   json_t **evidence, tb_error *err) {
    if (evidence) *evidence = NULL;
    const parser *p = find_parser(name);
    if (!p) {
        char known[512] = "";
        size_t used = 0;
        for (int i = 0; i < NPARSERS; i++) {
            int w = snprintf(known + used, sizeof known - used, "%s%s", i ? ", " : "", parsers[i].name);
            if (w < 0 || (size_t)w >= sizeof known - used) break;
            used += (size_t)w;
        }
        return tb_fail(err, "unknown parser '%s' (parsers: %s)", name ? name : "(null)", known);
    }
    if (nrecords <= 0) return tb_fail(err, "parser %s: no records to derive from", p->name);
    if (check_args(p, args, err) != 0) return -1;
    if (p->combine) return p->combine(p, args, record_dirs, nrecords, value, evidence, err);
    return parse_over_records(p, args, record_dirs, nrecords, value, evidence, err);
}

// ---------------------------------------------------------------------------------------
// Step times for the stability gate (experiments/stability.h)

int tb_slowest_step_ms(const char *record_dir, long long warmup, double **times, int *n, tb_error *err) {
    *times = NULL;
    *n = 0;
    json_t *files = json_array(), *ev = json_object();
    record_metrics m;
    int rc = read_record_metrics(&m, record_dir, NEED_STEP_MS, NULL, files, err);
    if (rc == 0) {
        rc = slowest_step_times(&m, warmup, times, n, ev, err);
        record_metrics_free(&m);
    }
    json_decref(files);
    json_decref(ev);
    return rc;
}
