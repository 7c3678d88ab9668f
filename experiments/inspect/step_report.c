// step_report.c — `tracebook steps` and `tracebook comm` (step_report.h).
#include "inspect/step_report.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/options.h"
#include "core/run_arg.h"
#include "core/run_dir.h"
#include "core/xalloc.h"
#include "inspect/collective_calls.h"

#define SR_PATH_MAX 4096

// The metrics' stage timeline, in the order a step runs them.
static const char *const phases[] = {"data_ms", "forward_ms", "backward_ms", "optimizer_ms", "p2p_wait_ms", "idle_ms"};
#define NPHASES 6

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

// The matched calls of each step: their places in the calls array (largest spread first) ordered
// by step, and within a step as the array has them, so a step's figures sum the same calls in
// the same order as a scan of the whole array would, reading only its own (that scan, once per
// step and rank, made `steps` of a 2,000-step TP2 run take 55-58 s, against 3 s).
typedef struct step_call {
    long long step;
    size_t index;  // in tb_calls.calls
} step_call;

typedef struct step_calls {
    step_call *order;
    size_t n;
} step_calls;

static int by_step_then_index(const void *a, const void *b) {
    const step_call *x = a, *y = b;
    if (x->step != y->step) return x->step < y->step ? -1 : 1;
    return x->index < y->index ? -1 : x->index > y->index;
}

static void step_calls_init(step_calls *sc, const tb_calls *calls) {
    sc->n = calls->n;
    sc->order = tb_xcalloc(sc->n + 1, sizeof *sc->order, "calls by step");
    for (size_t i = 0; i < sc->n; i++) sc->order[i] = (step_call){calls->calls[i].step, i};
    qsort(sc->order, sc->n, sizeof *sc->order, by_step_then_index);
}

static void step_calls_free(step_calls *sc) {
    free(sc->order);
    memset(sc, 0, sizeof *sc);
}

// The step's calls: sc->order[*first .. *first + count), count returned.
static size_t step_calls_of(const step_calls *sc, long long step, size_t *first) {
    size_t lo = 0, hi = sc->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (sc->order[mid].step < step) lo = mid + 1;
        else hi = mid;
    }
    size_t end = lo;
    while (end < sc->n && sc->order[end].step == step) end++;
    *first = lo;
    return end - lo;
}

// Every matched call as JSON, largest spread first.
static json_t *calls_json(const tb_calls *calls) {
    json_t *out = json_array();
    for (size_t i = 0; i < calls->n; i++) json_array_append_new(out, tb_calls_json(calls, i));
    return out;
}

json_t *tb_collective_calls(const char *run_dir, tb_error *err) {
    tb_calls calls;
    if (tb_calls_load(run_dir, &calls, err) != 0) return NULL;
    json_t *out = calls_json(&calls);
    tb_calls_free(&calls);
    return out;
}

// --- tracebook comm ---------------------------------------------------------------------

typedef struct comm_args {
    int top, json;
    const char *artifacts;
} comm_args;

static const tb_option comm_options[] = {
    TB_OPTION("--top", comm_args, top, TB_OPT_INT, "10", "N", "the N calls with the largest enter spread (0: all)"),
    TB_OPTION("--json", comm_args, json, TB_OPT_BOOL, "false", NULL, "every matched call as JSON"),
    TB_ARTIFACTS_OPTION(comm_args, artifacts),
    TB_OPTIONS_END,
};
static const tb_command comm_command = {
    "tracebook comm", "RUN",
    "Collectives matched across ranks from the per-rank traces: for each call, when each member entered,\n"
    "the enter spread and the last member to arrive (the one the others waited for). RUN is a run id (or a\n"
    "unique prefix), a record directory or a run directory (docs/CLI.md).",
    comm_options, 1, 1, "tracebook comm 20261129T104512 --top 5", NULL};

int tracebook_comm_main(int argc, char **argv) {
    comm_args a = {0};
    tb_positional pos = {0};
    tb_error err;
    int rc = tb_command_parse(&comm_command, &a, argc, argv, &pos, &err);
    if (rc == 1) return 0;
    if (rc != 0) return tb_command_usage_error(&comm_command, &err);
    if (a.top < 0) {
        fprintf(stderr, "tracebook comm: flag --top: %d is negative\n", a.top);
        tb_positional_free(&pos);
        return 2;
    }
    tb_run_arg run;
    tb_calls calls;
    rc = tb_run_arg_resolve(pos.items[0], a.artifacts, &run, &err) == 0 ? tb_calls_load(run.run_dir, &calls, &err) : -1;
    tb_positional_free(&pos);
    if (rc != 0) {
        fprintf(stderr, "tracebook comm: %s\n", err.msg);
        return 1;
    }
    if (a.json) {  // every call: the JSON of them all, as tb_collective_calls gives it
        json_t *all = calls_json(&calls);
        json_dumpf(all, stdout, JSON_INDENT(1));
        printf("\n");
        json_decref(all);
        tb_calls_free(&calls);
        return 0;
    }
    const size_t n = calls.n;
    double *spread = tb_xcalloc(n + 1, sizeof *spread, "spreads");
    for (size_t i = 0; i < n; i++) spread[i] = calls.calls[i].enter_spread_ms;
    qsort(spread, n, sizeof *spread, cmp_double);
    printf("%zu collective calls matched across their groups; enter spread median %.3f ms, max %.3f ms\n\n", n,
           n ? spread[n / 2] : 0.0, n ? spread[n - 1] : 0.0);
    free(spread);
    printf("  %-8s %5s %-14s %10s %5s %11s  %s\n", "group", "seq", "op", "bytes", "step", "spread ms",
           "last to enter (in; after)");
    for (size_t i = 0; i < n && (a.top == 0 || i < (size_t)a.top); i++) {
        json_t *c = tb_calls_json(&calls, i);  // one at a time: the table's rows, not every call's JSON
        json_t *bytes = json_object_get(c, "bytes");
        char bytes_text[32] = "-";  // (a range without bytes)
        if (json_is_integer(bytes))
            snprintf(bytes_text, sizeof bytes_text, "%lld", (long long)json_integer_value(bytes));
        const char *group = json_string_value(json_object_get(c, "group"));
        printf("  %-8s %5lld %-14s %10s %5lld %11.3f  rank %lld (in %s; after %s)\n", group ? group : TB_CALL_NO_GROUP,
               (long long)json_integer_value(json_object_get(c, "seq")), json_string_value(json_object_get(c, "op")),
               bytes_text,
               (long long)json_integer_value(json_object_get(c, "step")),
               json_number_value(json_object_get(c, "enter_spread_ms")),
               (long long)json_integer_value(json_object_get(c, "last_rank")),
               json_string_value(json_object_get(c, "last_in")) ? json_string_value(json_object_get(c, "last_in")) : "-",
               json_string_value(json_object_get(c, "last_after")) ? json_string_value(json_object_get(c, "last_after"))
                                                                   : "-");
        json_decref(c);
    }
    tb_calls_free(&calls);
    return 0;
}

// --- phases of two runs ---------------------------------------------------------------

#define MAX_PHASE_ROWS 64

typedef struct phase_series {
    char name[64];
    double v[2][1024];  // per run, per step after the first
    int n[2];
} phase_series;

static phase_series *series_of(phase_series *all, int *n, const char *name) {
    for (int i = 0; i < *n; i++)
        if (!strcmp(all[i].name, name)) return &all[i];
    if (*n == MAX_PHASE_ROWS) return NULL;
    phase_series *p = &all[(*n)++];
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "%s", name);
    return p;
}


// One run's phase values per step (after the first): the slowest rank's metrics phases, and
// per group the largest wait and transfer of a rank in that step.
static int phase_values(const char *dir, int run, phase_series *all, int *nseries, tb_error *err) {
    tb_calls calls;
    if (tb_calls_load(dir, &calls, err) != 0) return -1;
    json_t **rows = tb_xcalloc((size_t)calls.nranks, sizeof *rows, "metrics");
    int rc = tb_rank_metrics(dir, calls.nranks, rows, err);
    step_calls by_step;
    step_calls_init(&by_step, &calls);
    for (size_t s = 1; rc == 0 && s < json_array_size(rows[0]); s++) {
        json_int_t step = json_integer_value(json_object_get(json_array_get(rows[0], s), "step"));
        int slow = 0;
        for (int r = 1; r < calls.nranks; r++)
            if (json_number_value(json_object_get(json_array_get(rows[r], s), "step_ms")) >
                json_number_value(json_object_get(json_array_get(rows[slow], s), "step_ms")))
                slow = r;
        json_t *pipe = json_object_get(json_array_get(rows[slow], s), "pipeline");
        for (int p = 0; p < NPHASES; p++) {
            phase_series *ps = series_of(all, nseries, phases[p]);
            if (ps && ps->n[run] < 1024) ps->v[run][ps->n[run]++] = json_number_value(json_object_get(pipe, phases[p]));
        }
        // per group: the largest per-rank wait and transfer summed over the step's calls
        double wait[64][64], xfer[64][64];  // [group][rank]: ranks beyond 64 are left out
        char groups[64][32];
        int ng = 0;
        memset(wait, 0, sizeof wait), memset(xfer, 0, sizeof xfer);
        size_t first, count = step_calls_of(&by_step, step, &first);
        for (size_t i = first; i < first + count; i++) {
            const tb_matched_call *c = &calls.calls[by_step.order[i].index];
            const char *g = c->group ? c->group : TB_CALL_NO_GROUP;
            int gi = 0;
            while (gi < ng && strcmp(groups[gi], g)) gi++;
            if (gi == ng && ng < 64) snprintf(groups[ng++], sizeof groups[0], "%s", g);
            if (gi >= 64) continue;
            for (size_t k = 0; k < c->nmembers; k++) {
                const tb_call_member *m = &calls.members[c->first_member + k];
                if (m->rank < 0 || m->rank >= 64) continue;
                wait[gi][m->rank] += m->wait_ms;
                xfer[gi][m->rank] += m->transfer_ms;
            }
        }
        for (int g = 0; g < ng; g++) {
            double w = 0, x = 0;
            for (int r = 0; r < 64; r++) w = wait[g][r] > w ? wait[g][r] : w, x = xfer[g][r] > x ? xfer[g][r] : x;
            char name[64];
            snprintf(name, sizeof name, "%.31s wait", groups[g]);
            phase_series *ps = series_of(all, nseries, name);
            if (ps && ps->n[run] < 1024) ps->v[run][ps->n[run]++] = w;
            snprintf(name, sizeof name, "%.31s transfer", groups[g]);
            ps = series_of(all, nseries, name);
            if (ps && ps->n[run] < 1024) ps->v[run][ps->n[run]++] = x;
        }
    }
    for (int r = 0; r < calls.nranks; r++) json_decref(rows[r]);
    free(rows);
    step_calls_free(&by_step);
    tb_calls_free(&calls);
    return rc;
}

static void stats_of(const double *v, int n, double *median, double *lo, double *hi) {
    double s[1024];
    memcpy(s, v, (size_t)n * sizeof *v);
    qsort(s, (size_t)n, sizeof *s, cmp_double);
    *median = n ? (n % 2 ? s[n / 2] : (s[n / 2 - 1] + s[n / 2]) / 2) : 0;
    *lo = n ? s[0] : 0, *hi = n ? s[n - 1] : 0;
}

json_t *tb_phase_diff_json(const char *run_a, const char *run_b, tb_error *err) {
    phase_series *all = tb_xcalloc(MAX_PHASE_ROWS, sizeof *all, "phase series");
    int n = 0;
    if (phase_values(run_a, 0, all, &n, err) != 0 || phase_values(run_b, 1, all, &n, err) != 0) {
        free(all);
        return NULL;
    }
    json_t *rows = json_array(), *first = json_null();
    for (int i = 0; i < n; i++) {
        double ma, la, ha, mb, lb, hb;
        stats_of(all[i].v[0], all[i].n[0], &ma, &la, &ha);
        stats_of(all[i].v[1], all[i].n[1], &mb, &lb, &hb);
        const double spread = (ha - la) > (hb - lb) ? ha - la : hb - lb, delta = mb - ma;
        const int changed = all[i].n[0] && all[i].n[1] && fabs(delta) > spread;
        json_t *side[2];
        for (int k = 0; k < 2; k++)
            side[k] = all[i].n[k] ? json_pack("{s:f, s:f, s:f, s:i}", "median_ms", k ? mb : ma, "min_ms", k ? lb : la,
                                              "max_ms", k ? hb : ha, "steps", all[i].n[k])
                                  : json_null();
        json_array_append_new(rows, json_pack("{s:s, s:o, s:o, s:f, s:f, s:b}", "phase", all[i].name, "a", side[0], "b",
                                              side[1], "delta_ms", delta, "spread_ms", spread, "changed", changed));
        if (changed && json_is_null(first)) first = json_pack("{s:s, s:f, s:f}", "phase", all[i].name, "delta_ms", delta, "spread_ms", spread);
    }
    free(all);
    return json_pack("{s:o, s:o}", "phases", rows, "first_changed", first);
}

int tb_phase_diff(FILE *out, const char *run_a, const char *run_b, tb_error *err) {
    json_t *d = tb_phase_diff_json(run_a, run_b, err);
    if (!d) return -1;
    fprintf(out, "\nphases (ms per step after the first; the slowest rank's, and each group's most waiting rank):\n");
    fprintf(out, "  %-24s %26s %26s %10s\n", "", "A median [min, max]", "B median [min, max]", "B - A");
    size_t i;
    json_t *row;
    json_array_foreach(json_object_get(d, "phases"), i, row) {
        char text[2][64];
        for (int k = 0; k < 2; k++) {
            json_t *side = json_object_get(row, k ? "b" : "a");
            if (json_is_null(side)) snprintf(text[k], sizeof text[k], "-");
            else
                snprintf(text[k], sizeof text[k], "%.3f [%.3f, %.3f]", json_real_value(json_object_get(side, "median_ms")),
                         json_real_value(json_object_get(side, "min_ms")), json_real_value(json_object_get(side, "max_ms")));
        }
        fprintf(out, "  %-24s %26s %26s %+10.3f%s\n", json_string_value(json_object_get(row, "phase")), text[0], text[1],
                json_real_value(json_object_get(row, "delta_ms")),
                json_is_true(json_object_get(row, "changed")) ? "  changed" : "");
    }
    json_t *first = json_object_get(d, "first_changed");
    if (!json_is_null(first))
        fprintf(out, "\nfirst changed phase: %s (%+.3f ms per step, beyond the runs' own spread of %.3f ms)\n",
                json_string_value(json_object_get(first, "phase")), json_real_value(json_object_get(first, "delta_ms")),
                json_real_value(json_object_get(first, "spread_ms")));
    else
        fprintf(out, "\nno phase changed beyond the runs' own spread\n");
    json_decref(d);
    return 0;
}

// --- tracebook steps --------------------------------------------------------------------

typedef struct steps_args {
    int step, json;
    const char *artifacts;
} steps_args;

static const tb_option steps_options[] = {
    TB_OPTION("--step", steps_args, step, TB_OPT_INT, "0", "N", "only step N (0: every step)"),
    TB_OPTION("--json", steps_args, json, TB_OPT_BOOL, "false", NULL, "the decomposition as JSON"),
    TB_ARTIFACTS_OPTION(steps_args, artifacts),
    TB_OPTIONS_END,
};
static const tb_command steps_command = {
    "tracebook steps", "RUN",
    "Each step per rank from the run's traces and metrics: data, compute, exposed communication, each\n"
    "group's collectives (wait vs transfer, bytes, calls on the communication thread) and idle time.\n"
    "RUN is a run id (or a unique prefix), a record directory or a run directory (docs/CLI.md).",
    steps_options, 1, 1, "tracebook steps 20261129T104512 --step 3", NULL};


int tb_rank_metrics(const char *dir, int nranks, json_t **rows, tb_error *err) {
    for (int r = 0; r < nranks; r++) {
        char path[SR_PATH_MAX], line[1 << 16];
        if (tb_rank_file_path(path, sizeof path, dir, TB_RANK_METRICS, r, err) != 0) return -1;
        rows[r] = json_array();
        FILE *f = fopen(path, "r");
        if (!f) return tb_fail(err, "%s: missing (rank %d has a trace but no metrics)", path, r);
        int lineno = 0;
        while (fgets(line, sizeof line, f)) {
            lineno++;
            json_error_t jerr;
            json_t *o = json_loads(line, 0, &jerr);
            if (!o) {
                fclose(f);
                return tb_fail(err, "%s: line %d: %s", path, lineno, jerr.text);
            }
            json_array_append_new(rows[r], o);
        }
        fclose(f);
    }
    return 0;
}

static void add_int(json_t *o, const char *key, json_int_t v) {
    json_object_set_new(o, key, json_integer(json_integer_value(json_object_get(o, key)) + v));
}

json_t *tb_step_decomposition(const char *dir, int only_step, tb_error *err) {
    tb_calls calls;
    if (tb_calls_load(dir, &calls, err) != 0) return NULL;
    json_t **rows = tb_xcalloc((size_t)calls.nranks, sizeof *rows, "metrics"), *out = json_array();
    int rc = tb_rank_metrics(dir, calls.nranks, rows, err);
    step_calls by_step;
    step_calls_init(&by_step, &calls);
    // per (step, rank): the metrics' phases, and each group's collective wait and transfer
    for (size_t s = 0; rc == 0 && s < json_array_size(rows[0]); s++) {
        json_int_t step = json_integer_value(json_object_get(json_array_get(rows[0], s), "step"));
        if (only_step && step != only_step) continue;
        json_t *ranks = json_array();
        int slowest = 0;
        double slowest_ms = -1;
        size_t first, count = step_calls_of(&by_step, step, &first);
        for (int r = 0; r < calls.nranks; r++) {
            json_t *m = json_array_get(rows[r], s), *pipe = json_object_get(m, "pipeline");
            double step_ms = json_number_value(json_object_get(m, "step_ms"));
            if (step_ms > slowest_ms) slowest_ms = step_ms, slowest = r;
            json_t *row = json_pack("{s:i, s:f}", "rank", r, "step_ms", step_ms), *groups = json_object();
            for (int p = 0; p < NPHASES; p++)
                json_object_set_new(row, phases[p], json_real(json_number_value(json_object_get(pipe, phases[p]))));
            // the communication the rank waited for (the rest ran under its compute, on its thread)
            json_object_set_new(row, "exposed_comm_ms",
                                json_real(json_number_value(json_object_get(pipe, "exposed_comm_ms"))));
            for (size_t i = first; i < first + count; i++) {
                const tb_matched_call *c = &calls.calls[by_step.order[i].index];
                const char *g = c->group ? c->group : TB_CALL_NO_GROUP;
                for (size_t k = 0; k < c->nmembers; k++) {
                    const tb_call_member *mem = &calls.members[c->first_member + k];
                    if (mem->rank != r) continue;
                    json_t *acc = json_object_get(groups, g);
                    if (!acc)
                        json_object_set_new(groups, g,
                                            acc = json_pack("{s:f, s:f, s:i, s:I, s:i}", "wait_ms", 0.0, "transfer_ms",
                                                            0.0, "calls", 0, "bytes", (json_int_t)0,
                                                            "comm_thread_calls", 0));
                    add_int(acc, "bytes", mem->has_bytes == 1 ? mem->bytes : 0);  // (bytes not an integer: none)
                    add_int(acc, "comm_thread_calls", mem->comm_thread);
                    json_object_set_new(acc, "wait_ms",
                                        json_real(json_number_value(json_object_get(acc, "wait_ms")) + mem->wait_ms));
                    json_object_set_new(acc, "transfer_ms",
                                        json_real(json_number_value(json_object_get(acc, "transfer_ms")) +
                                                  mem->transfer_ms));
                    add_int(acc, "calls", 1);
                }
            }
            json_object_set_new(row, "collectives", groups);
            json_array_append_new(ranks, row);
        }
        json_array_append_new(out, json_pack("{s:I, s:i, s:o}", "step", step, "slowest_rank", slowest, "ranks", ranks));
    }
    if (rc == 0 && only_step && json_array_size(out) == 0)
        rc = tb_fail(err, "%s: no step %d in rank 0's metrics (%zu steps)", dir, only_step, json_array_size(rows[0]));
    for (int r = 0; r < calls.nranks; r++) json_decref(rows[r]);
    free(rows);
    step_calls_free(&by_step);
    tb_calls_free(&calls);
    if (rc != 0) {
        json_decref(out);
        return NULL;
    }
    return out;
}

int tracebook_steps_main(int argc, char **argv) {
    steps_args a = {0};
    tb_positional pos = {0};
    tb_error err;
    int rc = tb_command_parse(&steps_command, &a, argc, argv, &pos, &err);
    if (rc == 1) return 0;
    if (rc != 0) return tb_command_usage_error(&steps_command, &err);
    tb_run_arg run;
    if (tb_run_arg_resolve(pos.items[0], a.artifacts, &run, &err) != 0) {
        fprintf(stderr, "tracebook steps: %s\n", err.msg);
        tb_positional_free(&pos);
        return 1;
    }
    const char *dir = run.run_dir;
    if (a.step < 0) {
        fprintf(stderr, "tracebook steps: flag --step: %d is negative\n", a.step);
        tb_positional_free(&pos);
        return 2;
    }
    json_t *out = tb_step_decomposition(dir, a.step, &err);
    rc = out ? 0 : -1;
    if (rc == 0 && a.json) {
        json_dumpf(out, stdout, JSON_INDENT(1));
        printf("\n");
    } else if (rc == 0) {
        size_t s;
        json_t *st;
        json_array_foreach(out, s, st) {
            printf("step %lld (* the slowest rank)\n", (long long)json_integer_value(json_object_get(st, "step")));
            printf("    %-5s %9s %8s %8s %8s %8s %8s %8s %8s   collectives: wait / transfer ms (bytes; calls on "
                   "the communication thread)\n", "rank", "step ms", "data", "forward", "backward", "optim", "p2p wait",
                   "idle", "exposed");
            size_t r;
            json_t *row;
            json_array_foreach(json_object_get(st, "ranks"), r, row) {
                printf("  %c %-5zu %9.2f", (int)r == json_integer_value(json_object_get(st, "slowest_rank")) ? '*' : ' ', r,
                       json_number_value(json_object_get(row, "step_ms")));
                for (int p = 0; p < NPHASES; p++) printf(" %8.2f", json_number_value(json_object_get(row, phases[p])));
                printf(" %8.2f  ", json_number_value(json_object_get(row, "exposed_comm_ms")));
                const char *g;
                json_t *acc;
                json_object_foreach(json_object_get(row, "collectives"), g, acc) {
                    printf(" %s %.2f / %.2f (%lld B", g, json_number_value(json_object_get(acc, "wait_ms")),
                           json_number_value(json_object_get(acc, "transfer_ms")),
                           (long long)json_integer_value(json_object_get(acc, "bytes")));
                    const json_int_t on_thread = json_integer_value(json_object_get(acc, "comm_thread_calls"));
                    if (on_thread)
                        printf("; %lld of %lld calls", (long long)on_thread,
                               (long long)json_integer_value(json_object_get(acc, "calls")));
                    printf(")");
                }
                printf("\n");
            }
        }
    }
    if (rc != 0) fprintf(stderr, "tracebook steps: %s\n", err.msg);
    json_decref(out);
    tb_positional_free(&pos);
    return rc != 0;
}
