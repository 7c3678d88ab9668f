// report_figures.c — the plots of `tracebook report`, chosen from what the runs hold
// (report_internal.h); report_plots.c draws them with gnuplot. A plot the runs hold no data
// for is left out with a line saying why.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/run_dir.h"
#include "core/trace_events.h"
#include "core/xalloc.h"
#include "prove/parsers.h"
#include "reports/report_internal.h"
#include "reports/report_plots.h"
#include "inspect/step_report.h"

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void figure(tb_html *h, const char *name, const char *svg, const char *caption) {
    tb_html_raw(h, "<figure class=\"plot\" data-plot=\"");
    tb_html_text(h, name);
    tb_html_raw(h, "\">");
    tb_html_raw(h, svg);  // gnuplot's SVG: it escaped the text it holds (report_plots.h)
    tb_html_raw(h, "<figcaption>");
    tb_html_text(h, caption);
    tb_html_raw(h, "</figcaption></figure>\n");
}

static void absent(tb_html *h, const char *text) {
    tb_html_raw(h, "<p class=\"absent\">");
    tb_html_text(h, text);
    tb_html_raw(h, "</p>\n");
}

// min / median / max over a group's runs of one figure (NAN when no run has it).
static void group_spread(const report *rp, int group, size_t offset, double *lo, double *mid, double *hi) {
    double *v = tb_xcalloc((size_t)rp->nruns + 1, sizeof *v, "figures");
    int n = 0;
    for (int i = 0; i < rp->nruns; i++) {
        double x = *(const double *)((const char *)&rp->runs[i] + offset);
        if (rp->runs[i].group == group && isfinite(x)) v[n++] = x;
    }
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    *lo = n ? v[0] : NAN, *hi = n ? v[n - 1] : NAN;
    *mid = n ? tb_median(v, n) : NAN;
    free(v);
}

static const report_run *group_first(const report *rp, int group) {
    for (int i = 0; i < rp->nruns; i++)
        if (rp->runs[i].group == group) return &rp->runs[i];
    return NULL;
}

static int group_count(const report *rp, int group) {
    int n = 0;
    for (int i = 0; i < rp->nruns; i++) n += rp->runs[i].group == group && isfinite(rp->runs[i].tokens_per_s);
    return n;
}

// Shows a drawn plot; svg NULL (gnuplot failed, err set): -1.
static int show(tb_html *h, char *svg, const char *name, const char *caption) {
    if (!svg) return -1;
    figure(h, name, svg, caption);
    free(svg);
    return 0;
}

static int plot_throughput(tb_html *h, const report *rp, tb_error *err) {
    int ng = 0;
    const char **labels = tb_xcalloc((size_t)rp->ngroups + 1, sizeof *labels, "labels");
    double *lo = tb_xcalloc((size_t)rp->ngroups + 1, 3 * sizeof *lo, "spread"), *mid = lo + rp->ngroups + 1,
           *hi = mid + rp->ngroups + 1;
    char (*text)[600] = tb_xcalloc((size_t)rp->ngroups + 1, sizeof *text, "labels");
    for (int g = 0; g < rp->ngroups; g++) {
        if (!group_count(rp, g)) continue;
        group_spread(rp, g, offsetof(report_run, tokens_per_s), &lo[ng], &mid[ng], &hi[ng]);
        snprintf(text[ng], sizeof text[ng], "%s (%d)", group_first(rp, g)->label, group_count(rp, g));
        labels[ng] = text[ng];
        ng++;
    }
    int rc = 0;
    if (!ng) absent(h, "Throughput: no finished run has step times.");
    else rc = show(h, tb_plot_ranges("Throughput by configuration", "tokens/s", ng, labels, lo, mid, hi,
                                   "median, bar: min..max over repetitions", NULL, NULL, err), "throughput",
                   "tokens/s (the tokens_per_s parser: global-batch tokens / the slowest rank's step time, median "
                   "over the steps after the first) of each configuration; the point is the median over its "
                   "repetitions (their count in parentheses), the bar spans min to max. Timings from a shared or "
                   "oversubscribed machine: see the claims' verdicts before quoting any.");
    free(labels), free(lo), free(text);
    return rc;
}

static int plot_bubble(tb_html *h, const report *rp, tb_error *err) {
    int ng = 0;
    const char **labels = tb_xcalloc((size_t)rp->ngroups + 1, sizeof *labels, "labels");
    double *lo = tb_xcalloc((size_t)rp->ngroups + 1, 4 * sizeof *lo, "spread"), *mid = lo + rp->ngroups + 1,
           *hi = mid + rp->ngroups + 1, *theory = hi + rp->ngroups + 1;
    char (*text)[600] = tb_xcalloc((size_t)rp->ngroups + 1, sizeof *text, "labels");
    for (int g = 0; g < rp->ngroups; g++) {
        const report_run *r = group_first(rp, g);
        if (r->pp <= 1) continue;
        group_spread(rp, g, offsetof(report_run, bubble), &lo[ng], &mid[ng], &hi[ng]);
        double tlo, thi;
        group_spread(rp, g, offsetof(report_run, theoretical_bubble), &tlo, &theory[ng], &thi);
        if (!isfinite(mid[ng]) && !isfinite(theory[ng])) continue;
        snprintf(text[ng], sizeof text[ng], "%s, pp %d, m %lld", r->label, r->pp, r->microbatches);
        labels[ng] = text[ng];
        ng++;
    }
    int rc = 0;
    if (!ng) absent(h, "Pipeline bubble: no pipeline-parallel run (pipeline_model_parallel_size > 1) with a pipeline.json.");
    else rc = show(h, tb_plot_ranges("Pipeline bubble: measured vs (p-1)/(v*m+p-1)", "bubble fraction", ng, labels, lo,
                                   mid, hi, "measured (median, bar: min..max)", theory, "theoretical", err), "bubble",
                   "The pipeline_bubble parser's figures from pipeline.json: measured (mean over stages of 1 - "
                   "compute / schedule time, over the steps after the first) against the theoretical (p-1)/(v*m+p-1).");
    free(labels), free(lo), free(text);
    return rc;
}

static int plot_memory(tb_html *h, const report *rp, tb_error *err) {
    int n = 0;
    const char **labels = tb_xcalloc((size_t)rp->nruns + 1, sizeof *labels, "labels");
    char (*text)[600] = tb_xcalloc((size_t)rp->nruns + 1, sizeof *text, "labels");
    double *v = tb_xcalloc((size_t)(rp->nruns + 1) * REPORT_MEM_CATEGORIES, sizeof *v, "memory");
    for (int g = 0; g < rp->ngroups; g++) {  // one bar per configuration: repetitions hold the same bytes
        const report_run *r = NULL;
        for (int i = 0; i < rp->nruns && !r; i++)
            if (rp->runs[i].group == g && rp->runs[i].memory_rank >= 0) r = &rp->runs[i];
        if (!r) continue;
        snprintf(text[n], sizeof text[n], "%s (rank %d)", r->label, r->memory_rank);
        labels[n] = text[n];
        for (int c = 0; c < REPORT_MEM_CATEGORIES; c++) v[n * REPORT_MEM_CATEGORIES + c] = r->memory[c] / 1048576.0;
        n++;
    }
    int rc = 0;
    if (!n) absent(h, "Memory by category: no run wrote a memory snapshot (memory.rank-NNNNN.json).");
    else rc = show(h, tb_plot_stacked("Memory at the peak, by category", "MiB", n, labels, REPORT_MEM_CATEGORIES,
                                    report_mem_categories, v, err), "memory",
                   "Bytes in use per category at the moment of the total peak (memory.rank-NNNNN.json "
                   "at_total_peak) of the rank with the largest peak, one bar per configuration.");
    free(labels), free(text), free(v);
    return rc;
}

// A per-step series of rank 0's metrics: a run's steps, its values and their count.
typedef int (*series_of)(const report_run *r, const double **steps, const double **values);

static int loss_series(const report_run *r, const double **steps, const double **values) {
    *steps = r->loss_step, *values = r->loss;
    return r->nloss;
}
static int throughput_series(const report_run *r, const double **steps, const double **values) {
    *steps = r->series_step, *values = r->tokens_per_s_at;
    return r->nseries;
}
static int high_water_series(const report_run *r, const double **steps, const double **values) {
    *steps = r->series_step, *values = r->high_water_at;
    return r->nseries;
}

typedef struct step_plot {
    const char *title, *ylabel, *name, *caption;
    const char *none;  // said when no run has the series (NULL: nothing)
    series_of series;
    int least;  // plotted when some run has at least this many points
} step_plot;

// One line per run of a series.
static int plot_per_step(tb_html *h, const report *rp, const step_plot *sp, tb_error *err) {
    int n = 0, most = 0;
    const char **names = tb_xcalloc((size_t)rp->nruns + 1, sizeof *names, "names");
    char (*text)[600] = tb_xcalloc((size_t)rp->nruns + 1, sizeof *text, "names");
    int *np = tb_xcalloc((size_t)rp->nruns + 1, sizeof *np, "points");
    const double **x = tb_xcalloc((size_t)rp->nruns + 1, sizeof *x, "x"), **y = tb_xcalloc((size_t)rp->nruns + 1, sizeof *y, "y");
    for (int i = 0; i < rp->nruns; i++) {
        const report_run *r = &rp->runs[i];
        if (!(np[n] = sp->series(r, &x[n], &y[n]))) continue;
        snprintf(text[n], sizeof text[n], "%s #%d", r->label, r->repetition);
        names[n] = text[n];
        most = np[n] > most ? np[n] : most;
        n++;
    }
    int rc = 0;
    if (!n || most < sp->least) {
        if (sp->none) absent(h, sp->none);
    } else {
        rc = show(h, tb_plot_lines(sp->title, "step", sp->ylabel, 0, n, names, np, x, y, err), sp->name, sp->caption);
    }
    free(names), free(text), free(np), free(x), free(y);
    return rc;
}

// The loss, and over time (a long run such as the soak shows drift, a slowdown or a leak; a
// run stopped and resumed continues its line where the process before it stopped) the
// throughput and the allocator's high-water.
static int plot_over_steps(tb_html *h, const report *rp, tb_error *err) {
    static const step_plot plots[] = {
        {"Loss per step", "loss (rank 0)", "loss",
         "Rank 0's loss at every step (metrics.rank-00000.jsonl), one line per run.",
         "Loss curves: no run logged a finite loss.", loss_series, 1},
        {"Throughput per step", "tokens/s (rank 0)", "throughput_over_time",
         "Rank 0's tokens_per_s at every step (metrics.rank-00000.jsonl), one line per run; shown when a run has at "
         "least 50 steps.",
         NULL, throughput_series, 50},
        {"Memory high-water per step", "MiB (rank 0)", "memory_over_time",
         "Rank 0's allocator high-water at every step (mem_total_peak_bytes: the most in use at once since the process "
         "started), one line per run: flat after the warm-up unless memory leaks; shown when a run has at least 50 "
         "steps.",
         NULL, high_water_series, 50},
    };
    for (size_t i = 0; i < sizeof plots / sizeof *plots; i++)
        if (plot_per_step(h, rp, &plots[i], err) != 0) return -1;
    return 0;
}

// Activation memory against the sequence length, one line per context-parallel size, when a
// run has cp > 1.
static int plot_cp_memory(tb_html *h, const report *rp, tb_error *err) {
    int any_cp = 0;
    for (int i = 0; i < rp->nruns; i++) any_cp |= rp->runs[i].cp > 1 && isfinite(rp->runs[i].activation_bytes);
    if (!any_cp) {
        absent(h, "Context-parallel memory vs sequence length: no run with context_parallel_size > 1.");
        return 0;
    }
    int cps[64], ncp = 0;
    for (int i = 0; i < rp->nruns; i++) {
        int k = 0;
        while (k < ncp && cps[k] != rp->runs[i].cp) k++;
        if (k == ncp && ncp < 64) cps[ncp++] = rp->runs[i].cp;
    }
    const char *names[64];
    char text[64][32];
    int np[64] = {0};
    double *xs = tb_xcalloc((size_t)rp->nruns * 64 + 1, sizeof *xs, "x"), *ys = tb_xcalloc((size_t)rp->nruns * 64 + 1, sizeof *ys, "y");
    const double *x[64], *y[64];
    for (int k = 0; k < ncp; k++) {
        snprintf(text[k], sizeof text[k], "cp %d", cps[k]);
        names[k] = text[k], x[k] = xs + k * rp->nruns, y[k] = ys + k * rp->nruns;
        for (int g = 0; g < rp->ngroups; g++) {  // one point per configuration: the median over repetitions
            const report_run *r = group_first(rp, g);
            double lo, mid, hi;
            group_spread(rp, g, offsetof(report_run, activation_bytes), &lo, &mid, &hi);
            if (r->cp != cps[k] || !isfinite(mid)) continue;
            // in seq order
            int at = np[k];
            while (at > 0 && xs[k * rp->nruns + at - 1] > (double)r->seq) {
                xs[k * rp->nruns + at] = xs[k * rp->nruns + at - 1], ys[k * rp->nruns + at] = ys[k * rp->nruns + at - 1];
                at--;
            }
            xs[k * rp->nruns + at] = (double)r->seq, ys[k * rp->nruns + at] = mid / 1048576.0;
            np[k]++;
        }
    }
    char *svg = tb_plot_lines("Activation memory vs sequence length", "seq_length", "peak activations MiB (max over ranks)",
                              0, ncp, names, np, x, y, err);
    free(xs), free(ys);
    return show(h, svg, "cp_memory",
                "The peak_memory_bytes parser's activations figure (max over ranks and steps) per configuration, by "
                "sequence length, one line per context-parallel size.");
}

// The tokens each expert received in each MoE layer (metrics "moe": rank 0's layers, the last
// step), stacked per layer, for the first run that has MoE layers.
static int plot_moe_load(tb_html *h, const report *rp, tb_error *err) {
    const report_run *r = NULL;
    for (int i = 0; i < rp->nruns && !r; i++)
        if (rp->runs[i].moe) r = &rp->runs[i];
    if (!r) {
        absent(h, "MoE expert load: no run has MoE layers (num_experts > 0).");
        return 0;
    }
    const int nlayers = (int)json_array_size(r->moe);
    int E = 0;
    for (int l = 0; l < nlayers; l++) {
        const int e = (int)json_array_size(json_object_get(json_array_get(r->moe, (size_t)l), "tokens_per_expert"));
        E = e > E ? e : E;
    }
    if (E == 0) {
        absent(h, "MoE expert load: the MoE layers' metrics list no tokens per expert.");
        return 0;
    }
    const char **labels = tb_xcalloc((size_t)nlayers, sizeof *labels, "labels");
    const char **parts = tb_xcalloc((size_t)E, sizeof *parts, "expert names");
    char (*ltext)[32] = tb_xcalloc((size_t)nlayers, sizeof *ltext, "labels");
    char (*etext)[32] = tb_xcalloc((size_t)E, sizeof *etext, "expert names");
    double *v = tb_xcalloc((size_t)nlayers * E, sizeof *v, "expert load");
    for (int l = 0; l < nlayers; l++) {
        const json_t *layer = json_array_get(r->moe, (size_t)l), *t = json_object_get(layer, "tokens_per_expert");
        snprintf(ltext[l], sizeof ltext[l], "layer %lld", (long long)json_integer_value(json_object_get(layer, "layer")));
        labels[l] = ltext[l];
        for (int e = 0; e < E; e++) v[(size_t)l * E + e] = json_number_value(json_array_get(t, (size_t)e));
    }
    for (int e = 0; e < E; e++) snprintf(etext[e], sizeof etext[e], "expert %d", e), parts[e] = etext[e];
    char title[128], caption[1200];
    snprintf(title, sizeof title, "Tokens per expert, step %lld (rank 0)", r->moe_step);
    snprintf(caption, sizeof caption,
             "Run %s: the tokens routed to each expert in each of rank 0's MoE layers over the step's microbatches "
             "(metrics.rank-00000.jsonl \"moe\" of step %lld, tokens_per_expert); equal segments are a balanced "
             "router.",
             r->label, r->moe_step);
    int rc = show(h, tb_plot_stacked(title, "tokens", nlayers, labels, E, parts, v, err), "moe_load", caption);
    free(labels), free(parts), free(ltext), free(etext), free(v);
    return rc;
}

// --- one step from the traces -----------------------------------------------------------

// The run the timeline and the step decomposition show: the deepest pipeline, then the most
// ranks, among the finished runs with traces.
static const report_run *timeline_run(const report *rp) {
    const report_run *best = NULL;
    for (int i = 0; i < rp->nruns; i++) {
        const report_run *r = &rp->runs[i];
        char path[REPORT_PATH_MAX];
        tb_error err;
        FILE *f;
        if (strcmp(r->status, "finished") || r->nloss == 0 ||
            tb_rank_file_path(path, sizeof path, r->run_dir, TB_RANK_TRACE, 0, &err) != 0 || !(f = fopen(path, "r")))
            continue;
        fclose(f);
        if (!best || r->pp > best->pp || (r->pp == best->pp && r->world > best->world)) best = r;
    }
    return best;
}

enum { K_DATA, K_FORWARD, K_BACKWARD, K_OPTIMIZER, K_OTHER, K_COLLECTIVE, K_P2P, NKINDS };
static const char *const kind_names[NKINDS] = {"data", "forward", "backward", "optimizer", "other", "collective", "P2P send/recv"};

static int kind_of(const char *name) {
    if (!strncmp(name, "comm.", 5)) return strstr(name, ".send") || strstr(name, ".recv") ? K_P2P : K_COLLECTIVE;
    if (!strcmp(name, "data")) return K_DATA;
    if (!strncmp(name, "forward", 7)) return K_FORWARD;
    if (!strncmp(name, "backward", 8)) return K_BACKWARD;
    if (!strncmp(name, "optimizer", 9)) return K_OPTIMIZER;
    return K_OTHER;
}

typedef struct boxes {
    int n, cap, *row, *kind;
    double *start, *end;
} boxes;

static void box_add(boxes *b, int row, int kind, double start, double end) {
    if (b->n == b->cap) {
        b->cap = b->cap ? 2 * b->cap : 256;
        b->row = tb_xreallocarray(b->row, (size_t)b->cap, sizeof *b->row, "timeline");
        b->kind = tb_xreallocarray(b->kind, (size_t)b->cap, sizeof *b->kind, "timeline");
        b->start = tb_xreallocarray(b->start, (size_t)b->cap, sizeof *b->start, "timeline");
        b->end = tb_xreallocarray(b->end, (size_t)b->cap, sizeof *b->end, "timeline");
    }
    b->row[b->n] = row, b->kind[b->n] = kind, b->start[b->n] = start, b->end[b->n] = end;
    b->n++;
}

// One rank's trace, read one event at a time: its name, the step's train_step range, and the
// rank thread's ranges that may be drawn (depth 1, or a communicator call), kept as candidates
// until the step's window is known.
typedef struct timeline_scan {
    long long step;
    char *label;  // [128]
    double t0, t1;
    boxes kept;   // row: 0 for a depth-1 range, 1 for a communicator call
} timeline_scan;

static int timeline_event(json_t *e, size_t i, void *ud, tb_error *err) {
    (void)i, (void)err;
    timeline_scan *t = ud;
    const char *name = json_string_value(json_object_get(e, "name"));
    json_t *args = json_object_get(e, "args");
    if (!name) return 0;
    if (!strcmp(name, "process_name") && json_string_value(json_object_get(args, "name")))
        snprintf(t->label, 128, "%s", json_string_value(json_object_get(args, "name")));
    const int rank_thread = json_integer_value(json_object_get(e, "tid")) == 0;
    const double ts = json_number_value(json_object_get(e, "ts")), dur = json_number_value(json_object_get(e, "dur"));
    if (!strcmp(name, "train_step") && json_integer_value(json_object_get(args, "step")) == t->step && rank_thread) {
        t->t0 = ts;
        t->t1 = ts + dur;
    }
    const char *ph = json_string_value(json_object_get(e, "ph"));
    if (!ph || strcmp(ph, "X") || !rank_thread) return 0;
    const int kind = kind_of(name), comm = kind == K_COLLECTIVE || kind == K_P2P;
    if (comm || json_integer_value(json_object_get(args, "depth")) == 1) box_add(&t->kept, comm, kind, ts, ts + dur);
    return 0;
}

static int plot_timeline(tb_html *h, const report *rp, const report_run *r, long long step, tb_error *err) {
    boxes b = {0};
    char (*labels)[128] = tb_xcalloc((size_t)r->world, sizeof *labels, "rows");
    const char **rows = tb_xcalloc((size_t)r->world, sizeof *rows, "rows");
    double origin = INFINITY;
    for (int rank = 0; rank < r->world; rank++) {
        snprintf(labels[rank], sizeof labels[rank], "rank %d", rank);
        rows[rank] = labels[rank];
        char path[REPORT_PATH_MAX];
        if (tb_rank_file_path(path, sizeof path, r->run_dir, TB_RANK_TRACE, rank, err) != 0) continue;
        if (access(path, F_OK) != 0) continue;  // a rank that wrote none
        timeline_scan t = {.step = step, .label = labels[rank], .t0 = NAN, .t1 = NAN};
        tb_error terr;
        if (tb_trace_read(path, timeline_event, &t, NULL, &terr) != 0) {  // said in the figure's place
            free(t.kept.row), free(t.kept.kind), free(t.kept.start), free(t.kept.end);
            free(b.row), free(b.kind), free(b.start), free(b.end), free(labels), free(rows);
            tb_html text = {0};
            tb_html_rawf(&text, "Pipeline timeline: %s", terr.msg);
            absent(h, text.s);
            tb_html_free(&text);
            return 0;
        }
        if (isfinite(t.t0) && t.t0 < origin) origin = t.t0;
        // depth-1 ranges of the step first, the communicator calls (any depth) drawn over them
        for (int pass = 0; pass < 2 && isfinite(t.t0); pass++)
            for (int k = 0; k < t.kept.n; k++)
                if (t.kept.row[k] == pass && t.kept.start[k] >= t.t0 && t.kept.start[k] <= t.t1)
                    box_add(&b, rank, t.kept.kind[k], t.kept.start[k], t.kept.end[k]);
        free(t.kept.row), free(t.kept.kind), free(t.kept.start), free(t.kept.end);
    }
    for (int i = 0; i < b.n; i++) b.start[i] = (b.start[i] - origin) / 1000.0, b.end[i] = (b.end[i] - origin) / 1000.0;
    int rc = 0;
    char title[512], caption[1400];
    snprintf(title, sizeof title, "Step %lld of run %s, per rank", step, r->id);
    if (!b.n) {
        absent(h, "Pipeline timeline: the traces hold no ranges for the step.");
    } else {
        char *svg = tb_plot_timeline(title, "ms from the earliest rank's step start", r->world, rows, b.n, b.row,
                                     b.start, b.end, b.kind, NKINDS, kind_names, err);
        snprintf(caption, sizeof caption,
                 "Each rank's top-level ranges of step %lld (trace.rank-NNNNN.json; run %s, the run with the deepest "
                 "pipeline and then the most ranks), communicator calls drawn over them; the gaps are idle time. "
                 "pp %d, tp %d, %d rank%s.",
                 step, r->id, r->pp, r->tp, r->world, r->world == 1 ? "" : "s");
        rc = show(h, svg, "timeline", caption);
    }
    free(b.row), free(b.kind), free(b.start), free(b.end), free(labels), free(rows);
    return rc;
}

static int plot_steps(tb_html *h, const report_run *r, long long step, tb_error *err) {
    tb_error derr;
    json_t *steps = tb_step_decomposition(r->run_dir, (int)step, &derr);
    if (!steps) {
        tb_html text = {0};
        tb_html_rawf(&text, "Step decomposition: %s", derr.msg);
        absent(h, text.s);
        tb_html_free(&text);
        return 0;
    }
    static const char *const phases[] = {"data_ms", "forward_ms", "backward_ms", "optimizer_ms", "p2p_wait_ms", "idle_ms"};
    static const char *const phase_names[] = {"data", "forward", "backward", "optimizer", "P2P wait", "idle"};
    json_t *ranks = json_object_get(json_array_get(steps, 0), "ranks");
    int n = (int)json_array_size(ranks);
    const char **labels = tb_xcalloc((size_t)n + 1, sizeof *labels, "labels");
    char (*text)[32] = tb_xcalloc((size_t)n + 1, sizeof *text, "labels");
    double *v = tb_xcalloc((size_t)(n + 1) * 6, sizeof *v, "phases");
    long long slowest = json_integer_value(json_object_get(json_array_get(steps, 0), "slowest_rank"));
    for (int i = 0; i < n; i++) {
        json_t *row = json_array_get(ranks, (size_t)i);
        snprintf(text[i], sizeof text[i], "rank %d%s", i, i == slowest ? " (slowest)" : "");
        labels[i] = text[i];
        for (int p = 0; p < 6; p++) v[i * 6 + p] = json_number_value(json_object_get(row, phases[p]));
    }
    char title[128];
    snprintf(title, sizeof title, "Step %lld decomposed, per rank", step);
    char *svg = tb_plot_stacked(title, "ms", n, labels, 6, phase_names, v, err);
    int rc = svg ? 0 : -1;
    if (svg) {
        figure(h, "steps", svg,
               "tracebook steps' decomposition of the same step: each rank's data, forward, backward, optimizer, "
               "P2P wait and idle time from its metrics line (the stage timeline).");
        tb_html_raw(h, "<table><tr><th>rank</th><th>step ms</th><th>collectives: group wait / transfer ms (calls)</th></tr>");
        for (int i = 0; i < n; i++) {
            json_t *row = json_array_get(ranks, (size_t)i);
            tb_html_rawf(h, "<tr><td>%d</td><td class=\"num\">%.2f</td><td>", i, json_number_value(json_object_get(row, "step_ms")));
            const char *g;
            json_t *acc;
            int first = 1;
            json_object_foreach(json_object_get(row, "collectives"), g, acc) {
                tb_html_raw(h, first ? "" : "; ");
                tb_html_textf(h, "%s %.3f / %.3f (%lld)", g, json_number_value(json_object_get(acc, "wait_ms")),
                              json_number_value(json_object_get(acc, "transfer_ms")),
                              (long long)json_integer_value(json_object_get(acc, "calls")));
                first = 0;
            }
            tb_html_raw(h, first ? "none</td></tr>" : "</td></tr>");
        }
        tb_html_raw(h, "</table>\n");
    }
    free(svg), free(labels), free(text), free(v);
    json_decref(steps);
    return rc;
}

int report_write_plots(tb_html *h, const report *rp, tb_error *err) {
    tb_html_raw(h, "<h2 id=\"plots\">Plots</h2>\n");
    if (plot_throughput(h, rp, err) != 0 || plot_bubble(h, rp, err) != 0 || plot_memory(h, rp, err) != 0 ||
        plot_over_steps(h, rp, err) != 0)
        return -1;
    const report_run *r = timeline_run(rp);
    if (!r) {
        absent(h, "Pipeline timeline and step decomposition: no finished run with traces.");
    } else {
        long long step = (long long)r->loss_step[r->nloss - 1];  // the last step: past the warm-up
        if (plot_timeline(h, rp, r, step, err) != 0 || plot_steps(h, r, step, err) != 0) return -1;
    }
    if (plot_cp_memory(h, rp, err) != 0) return -1;
    return plot_moe_load(h, rp, err);
}
