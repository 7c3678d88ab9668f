// parsers_metrics.c — the parsers of every rank's metrics.rank-NNNNN.jsonl: tokens_per_s and
// step_ms (the slowest rank's step time), loss_at_step, peak_memory_bytes, step_phase (a
// phase of the step decomposition); and the step times of the stability gate
// (tb_slowest_step_ms).
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/json_number.h"
#include "core/xalloc.h"
#include "prove/parsers_internal.h"
#include "prove/timing_interval.h"

// ---------------------------------------------------------------------------------------
// One record's metrics: every rank's metrics.rank-NNNNN.jsonl

void tbp_record_metrics_free(tbp_record_metrics *m) {
    for (int r = 0; r < m->nranks; r++) free(m->ranks[r].rows);
    free(m->ranks);
    json_decref(m->config);
    memset(m, 0, sizeof *m);
}

static int cmp_row_step(const void *a, const void *b) {
    int64_t x = ((const tbp_metric_row *)a)->step, y = ((const tbp_metric_row *)b)->step;
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
// error naming file and line). category: the mem_peak_bytes key for TBP_NEED_MEM ("total_peak":
// mem_total_peak_bytes), the pipeline key for TBP_NEED_PHASE ("backward_ms").
static int read_rank_metrics(tbp_rank_metrics *rm, int need, const char *category, tb_error *err) {
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
        tbp_metric_row row = {0};
        row.line = lineno;
        json_t *step = json_object_get(o, "step");
        if (!json_is_integer(step) || json_integer_value(step) < 0) {
            rc = tb_fail(err, "%s:%d: no integer 'step'", rm->path, lineno);
        } else {
            row.step = (int64_t)json_integer_value(step);
            if ((need & TBP_NEED_STEP_MS) && number_field(o, "step_ms", &row.step_ms) != 0)
                rc = tb_fail(err, "%s:%d: no numeric 'step_ms'", rm->path, lineno);
            if (rc == 0 && (need & TBP_NEED_LOSS)) row.has_loss = number_field(o, "loss", &row.loss) == 0;
            if (rc == 0 && (need & TBP_NEED_MEM)) {
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
        if (rc == 0 && (need & TBP_NEED_PHASE) && number_field(json_object_get(o, "pipeline"), category, &row.phase) != 0)
            rc = tb_fail(err, "%s:%d: no numeric 'pipeline.%s'", rm->path, lineno, category);
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

const tbp_metric_row *tbp_find_step(const tbp_rank_metrics *rm, int64_t step) {
    int lo = 0, hi = rm->n - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2;
        if (rm->rows[mid].step == step) return &rm->rows[mid];
        if (rm->rows[mid].step < step) lo = mid + 1;
        else hi = mid - 1;
    }
    return NULL;
}

int tbp_read_record_metrics(tbp_record_metrics *m, const char *record_dir, int need, const char *category,
                               json_t *files, tb_error *err) {
    memset(m, 0, sizeof *m);
    if (tbp_run_path(m->config_path, sizeof m->config_path, record_dir, TB_RUN_CONFIG, err) != 0) return -1;
    if (!(m->config = tbp_load_json_file(m->config_path, err))) return -1;
    json_array_append_new(files, json_string(m->config_path));
    json_t *ws = json_object_get(m->config, "world_size");
    long long world = json_is_integer(ws) ? json_integer_value(ws) : 1;
    if (world < 1 || world > 1 << 20) {
        tbp_record_metrics_free(m);
        return tb_fail(err, "%s: world_size %lld out of range", m->config_path, world);
    }
    m->ranks = tb_xcalloc((size_t)world, sizeof *m->ranks, "ranks' metrics");
    m->nranks = (int)world;
    char run_dir[REC_PATH_MAX];
    if (tb_run_path(run_dir, sizeof run_dir, record_dir, TB_RECORD_RUN_DIR, err) != 0) {
        tbp_record_metrics_free(m);
        return -1;
    }
    for (int r = 0; r < m->nranks; r++) {
        if (tb_rank_file_path(m->ranks[r].path, sizeof m->ranks[r].path, run_dir, TB_RANK_METRICS, r, err) != 0 ||
            read_rank_metrics(&m->ranks[r], need, category, err) != 0) {
            if (r > 0) tb_fail_prefix(err, "rank %d of world_size %lld (%s)", r, world, m->config_path);
            tbp_record_metrics_free(m);
            return -1;
        }
        json_array_append_new(files, json_string(m->ranks[r].path));
    }
    return 0;
}

// The global batch's tokens: config global_batch_size x seq_length.
static int tokens_per_step(const tbp_record_metrics *m, double *tokens, json_t *ev, tb_error *err) {
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
static int slowest_step_times(const tbp_record_metrics *m, long long warmup, double **times, int *n, json_t *ev,
                              tb_error *err) {
    const tbp_rank_metrics *r0 = &m->ranks[0];
    double *t = tb_xcalloc((size_t)r0->n, sizeof *t, "step times");
    int k = 0;
    int64_t first = 0, last = 0;
    for (int i = 0; i < r0->n; i++) {
        const tbp_metric_row *row = &r0->rows[i];
        if (row->step <= warmup) continue;
        double slowest = row->step_ms;
        for (int r = 1; r < m->nranks; r++) {
            const tbp_metric_row *o = tbp_find_step(&m->ranks[r], row->step);
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
    double q;
    if (tbp_int_arg(p, args, "warmup_steps", 1, 0, &warmup, err) != 0 || tbp_quantile_arg(p, args, &q, err) != 0)
        return -1;
    json_t *files = json_array();
    json_object_set_new(ev, "files", files);
    tbp_record_metrics m;
    if (tbp_read_record_metrics(&m, dir, TBP_NEED_STEP_MS, NULL, files, err) != 0) return -1;
    double tokens = 0, *t = NULL;
    int n = 0;
    int rc = throughput ? tokens_per_step(&m, &tokens, ev, err) : 0;
    if (rc == 0) rc = slowest_step_times(&m, warmup, &t, &n, ev, err);
    if (rc == 0) {
        if (throughput)
            for (int i = 0; i < n; i++) t[i] = tokens / (t[i] / 1000.0);
        json_t *s = tbp_summary_json(t, n);  // sorts t
        *value = json_real_value(json_object_get(s, "median"));
        if (q != 0.5) {  // the q-quantile over the steps, as the gate's interval takes it
            *value = tb_timing_quantile(t, n, q);
            json_object_set_new(ev, "quantile", json_real(q));
        }
        json_object_set_new(ev, "per_step", s);
    }
    free(t);
    tbp_record_metrics_free(&m);
    return rc;
}

int tbp_tokens_per_s_record(const parser *p, json_t *args, const char *dir, double *value, json_t *ev,
                               tb_error *err) {
    return step_time_record(p, args, dir, 1, value, ev, err);
}

int tbp_step_ms_record(const parser *p, json_t *args, const char *dir, double *value, json_t *ev,
                          tb_error *err) {
    return step_time_record(p, args, dir, 0, value, ev, err);
}

int tbp_loss_at_step_record(const parser *p, json_t *args, const char *dir, double *value, json_t *ev,
                               tb_error *err) {
    long long want = -1;
    if (tbp_int_arg(p, args, "step", -1, 1, &want, err) != 0) return -1;
    json_t *files = json_array();
    json_object_set_new(ev, "files", files);
    tbp_record_metrics m;
    if (tbp_read_record_metrics(&m, dir, TBP_NEED_LOSS, NULL, files, err) != 0) return -1;
    const tbp_rank_metrics *r0 = &m.ranks[0];
    int64_t step = want < 0 ? r0->rows[r0->n - 1].step : (int64_t)want;
    const tbp_metric_row *row = tbp_find_step(r0, step);
    int rc = 0;
    if (!row) rc = tb_fail(err, "%s: no step %lld (steps %lld..%lld)", r0->path, (long long)step,
                           (long long)r0->rows[0].step, (long long)r0->rows[r0->n - 1].step);
    else if (!row->has_loss) rc = tb_fail(err, "%s:%d: no numeric 'loss'", r0->path, row->line);
    int agreeing = 1;
    for (int r = 1; rc == 0 && r < m.nranks; r++) {
        const tbp_metric_row *o = tbp_find_step(&m.ranks[r], step);
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
    tbp_record_metrics_free(&m);
    return rc;
}

int tbp_peak_memory_record(const parser *p, json_t *args, const char *dir, double *value, json_t *ev,
                              tb_error *err) {
    static const char *const categories[] = {"params", "grads", "optimizer", "activations", "workspace",
                                             "comm",   "gathered", "total", "total_peak"};
    const char *category = tbp_string_arg(args, "category", "total");
    int known = 0;
    for (size_t i = 0; i < sizeof categories / sizeof *categories; i++) known |= !strcmp(category, categories[i]);
    if (!known)
        return tb_fail(err, "parser %s: args.category '%s' is not one of params, grads, optimizer, activations, "
                            "workspace, comm, gathered, total, total_peak", p->name, category);
    json_t *files = json_array();
    json_object_set_new(ev, "files", files);
    tbp_record_metrics m;
    if (tbp_read_record_metrics(&m, dir, TBP_NEED_MEM, category, files, err) != 0) return -1;
    double peak = -1;
    int peak_rank = 0;
    const tbp_metric_row *at = NULL;
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
    tbp_record_metrics_free(&m);
    return 0;
}

// step_phase: a phase of the step decomposition (metrics "pipeline") on the slowest rank of
// each step, or on args.rank.
int tbp_step_phase_record(const parser *p, json_t *args, const char *dir, double *value, json_t *ev,
                          tb_error *err) {
    static const char *const phases[] = {"data", "forward", "backward", "optimizer", "p2p_wait", "idle", "exposed_comm",
                                         NULL};
    const char *phase = tbp_string_arg(args, "phase", NULL);
    if (tbp_one_of(p, "phase", phase, phases, err) != 0) return -1;
    long long warmup, want_rank;
    if (tbp_int_arg(p, args, "warmup_steps", 1, 0, &warmup, err) != 0 ||
        tbp_int_arg(p, args, "rank", -1, 0, &want_rank, err) != 0)
        return -1;
    char key[64];
    snprintf(key, sizeof key, "%s_ms", phase);
    json_t *files = json_array();
    json_object_set_new(ev, "files", files);
    tbp_record_metrics m;
    if (tbp_read_record_metrics(&m, dir, TBP_NEED_STEP_MS | TBP_NEED_PHASE, key, files, err) != 0) return -1;
    int rc = 0;
    if (want_rank >= m.nranks)
        rc = tb_fail(err, "parser %s: args.rank %lld is not below world_size %d (%s)", p->name, want_rank, m.nranks,
                     m.config_path);
    const tbp_rank_metrics *r0 = &m.ranks[0];
    double *v = tb_xcalloc((size_t)r0->n + 1, sizeof *v, "phase times");
    int *slowest = tb_xcalloc((size_t)m.nranks, sizeof *slowest, "slowest ranks"), k = 0;
    for (int i = 0; rc == 0 && i < r0->n; i++) {
        if (r0->rows[i].step <= warmup) continue;
        const int64_t step = r0->rows[i].step;
        const tbp_metric_row *at = NULL;
        int at_rank = 0;
        for (int r = 0; r < m.nranks && rc == 0; r++) {
            const tbp_metric_row *o = tbp_find_step(&m.ranks[r], step);
            if (!o) rc = tb_fail(err, "%s: no step %lld (rank 0 has it, %s:%d)", m.ranks[r].path, (long long)step,
                                 r0->path, r0->rows[i].line);
            else if (want_rank >= 0 ? r == want_rank : (!at || o->step_ms > at->step_ms)) at = o, at_rank = r;
        }
        if (rc != 0) break;
        slowest[at_rank]++;
        v[k++] = at->phase;
    }
    if (rc == 0 && k == 0)
        rc = tb_fail(err, "%s: no steps after warmup_steps %lld (last step %lld)", r0->path, warmup,
                     (long long)r0->rows[r0->n - 1].step);
    if (rc == 0) {
        json_t *s = tbp_summary_json(v, k);
        *value = json_real_value(json_object_get(s, "median"));
        json_object_set_new(ev, "per_step", s);
        char detail[256];
        if (want_rank >= 0)
            snprintf(detail, sizeof detail, "metrics pipeline.%s of rank %lld, %d steps after warmup_steps %lld", key,
                     want_rank, k, warmup);
        else {
            int most = 0;
            for (int r = 1; r < m.nranks; r++) most = slowest[r] > slowest[most] ? r : most;
            snprintf(detail, sizeof detail, "metrics pipeline.%s of each step's slowest rank (largest step_ms), %d "
                     "steps after warmup_steps %lld; the slowest most often: rank %d (%d of the steps)", key, k,
                     warmup, most, slowest[most]);
        }
        json_object_set_new(ev, "detail", json_string(detail));
    }
    free(v);
    free(slowest);
    tbp_record_metrics_free(&m);
    return rc;
}

// ---------------------------------------------------------------------------------------
// Step times for the stability gate (experiments/prove/stability.h)

int tb_slowest_step_ms(const char *record_dir, long long warmup, double **times, int *n, tb_error *err) {
    *times = NULL;
    *n = 0;
    json_t *files = json_array(), *ev = json_object();
    tbp_record_metrics m;
    int rc = tbp_read_record_metrics(&m, record_dir, TBP_NEED_STEP_MS, NULL, files, err);
    if (rc == 0) {
        rc = slowest_step_times(&m, warmup, times, n, ev, err);
        tbp_record_metrics_free(&m);
    }
    json_decref(files);
    json_decref(ev);
    return rc;
}
