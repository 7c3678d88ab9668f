// bisect.c — `tracebook bisect RUN RUN [--step N] [--tolerance T] [--json]`: the first
// tensor where two runs of the same model, weights, inputs and seeds diverge beyond what
// float reordering explains (the runs' tensors/ from --dump-tensors, engine/reports/tensor_dump.h).
//
// The tensors are aligned by name and walked in the order the step computes them: the
// forward (embedding, then per layer its attention branch, MLP branch and output, then the
// loss), the backward (the gradients, last layer first), the optimizer (the parameters
// after the step). A tensor diverges when max |a − b| > T · max |b|: T (default 1e-5, the
// layouts' equivalence tolerance) bounds what summing the same terms in another order does
// to fp32 values after a few layers — tp, sp, dp and pp reorder the reductions, measured
// here at 1e-7..1e-6 of a tensor's scale. The first diverging tensor names where to look: its
// range (tracebook walk RANGE finds its source) or its parameter.
//
// The optimizer's step is not a sum: AdamW divides, p' = p·keep − step·m / (sqrt(v)·s + eps),
// so an element whose gradient is float noise around 0 (a bias the loss barely depends on)
// moves by an lr-sized amount either way, and every later step carries the difference. So the
// parameters after the step are bounded element by element by what produced them (the dump's
// param.before, adam.m, adam.v, adam.hyper, engine/reports/tensor_dump.h):
//   |a' − b'| ≤ T · max |b'| + |a − b| + |u_a − u_b| + rounding,
//   u_X = step · m_X / (sqrt(v_X) · s + eps) from run X's own moments and scalars,
// where the moments themselves were compared first (running averages of the gradients and
// their squares, within T of their scale), |a − b| is the difference the step started from
// (keep ≤ 1) and rounding is four fp32 roundings (2^-24 each) of the magnitudes involved.
// The verdict gives the worst element's ratio to its bound.
//
// A step after the first starts from parameters that already differ by the earlier steps'
// AdamW noise (above: an lr-sized move of a noise-gradient element), and every tensor it
// computes carries that difference. So the forward's and backward's tensors (and the moments)
// are bounded by (T + δ) · max |b|, δ the largest difference the step started from as a
// share of its parameter's scale (param.before, max over parameters of max |a − b| / max |b|):
// to first order a relative input difference δ moves an output by δ of its scale (unit gain;
// a layer that amplifies it more than that is not bounded here). At a first step from the
// same weights δ is 0. A dump without the optimizer's
// state (an older engine's) falls back to leaving out the elements whose gradient is within
// the bound of 0.
#include "inspect/bisect.h"

#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/options.h"
#include "core/run_arg.h"
#include "core/safetensors.h"
#include "core/xalloc.h"

#define BS_PATH_MAX 4096

typedef struct tensor_ref {
    const char *name;
    int file;  // index into the run's open files
    const tb_st_tensor *t;
} tensor_ref;

typedef struct dumped_run {
    tb_safetensors files[64];
    int nfiles;
    tensor_ref *refs;
    int n;
} dumped_run;

static void run_close(dumped_run *r) {
    for (int i = 0; i < r->nfiles; i++) tb_safetensors_close(&r->files[i]);
    free(r->refs);
    memset(r, 0, sizeof *r);
}

// Every tensors/step-<step>.rank-*.safetensors of a run directory; step 0: the lowest dumped.
static int run_open(const char *dir, long long *step, dumped_run *r, tb_error *err) {
    memset(r, 0, sizeof *r);
    char tdir[BS_PATH_MAX];
    snprintf(tdir, sizeof tdir, "%s/tensors", dir);
    DIR *d = opendir(tdir);
    if (!d) return tb_fail(err, "%s: no tensors (run it with --dump-tensors STEPS)", tdir);
    struct dirent *de;
    long long lowest = -1;
    while ((de = readdir(d)) != NULL) {
        long long s;
        int rank, n = 0;
        if (sscanf(de->d_name, "step-%lld.rank-%d.safetensors%n", &s, &rank, &n) == 2 && de->d_name[n] == '\0' &&
            (lowest < 0 || s < lowest))
            lowest = s;
    }
    if (*step == 0) *step = lowest;
    rewinddir(d);
    int rc = 0;
    while (rc == 0 && (de = readdir(d)) != NULL) {
        long long s;
        int rank, n = 0;
        if (sscanf(de->d_name, "step-%lld.rank-%d.safetensors%n", &s, &rank, &n) != 2 || de->d_name[n] || s != *step)
            continue;
        if (r->nfiles == 64) rc = tb_fail(err, "%s: more than 64 dump files for step %lld", tdir, s);
        char path[BS_PATH_MAX + 256];
        snprintf(path, sizeof path, "%s/%s", tdir, de->d_name);
        if (rc == 0 && tb_safetensors_open(&r->files[r->nfiles], path, err) != 0) rc = -1;
        if (rc == 0) r->nfiles++;
    }
    closedir(d);
    if (rc == 0 && r->nfiles == 0) rc = tb_fail(err, "%s: no tensors of step %lld", tdir, *step);
    for (int f = 0; rc == 0 && f < r->nfiles; f++) {
        r->refs = tb_xreallocarray(r->refs, (size_t)(r->n + r->files[f].ntensors), sizeof *r->refs, "bisect tensors");
        for (int i = 0; i < r->files[f].ntensors; i++)
            r->refs[r->n++] = (tensor_ref){r->files[f].tensors[i].name, f, &r->files[f].tensors[i]};
    }
    return rc;
}

// The tensor's place in the step: phase (forward 0, backward 1, optimizer 2), then within it.
static void order_of(const char *name, int *phase, double *key) {
    int layer = -1;
    const char *base = strchr(name, '/') ? strchr(name, '/') + 1 : name;
    if (!strncmp(name, "fwd/", 4)) {
        *phase = 0;
        if (!strcmp(base, "embedding")) *key = -1;
        else if (!strcmp(base, "loss")) *key = 1e9;
        else if (sscanf(base, "layer.%d", &layer) == 1) {
            const char *rest = base + strlen("layer.") + (layer < 10 ? 1 : layer < 100 ? 2 : 3);
            *key = layer * 3.0 + (!strcmp(rest, ".attention") ? 0 : !strcmp(rest, ".mlp") ? 1 : 2);
        } else *key = 1e8;
        return;
    }
    // parameters in model order: the embeddings, the layers, the final norm and output layer
    double model = 1e8;
    if (!strncmp(base, "wte", 3) || !strncmp(base, "wpe", 3)) model = -1;
    else if (sscanf(base, "h.%d.", &layer) == 1) model = layer;
    *phase = !strncmp(name, "grad/", 5) ? 1 : 2;
    // the backward meets the last layer first; the optimizer: its scalars, then per parameter
    // its moments before its value
    const int sub = !strncmp(name, "adam.m/", 7) ? 0 : !strncmp(name, "adam.v/", 7) ? 1 : 2;
    *key = *phase == 1 ? -model : !strncmp(name, "adam.hyper/", 11) ? -1e9 : model * 4 + sub;
}

static json_t *number_json(double v);

// The tensor of a run named name (n elements) as floats (malloc'd) into *out: 1 read, 0 when
// the run has no such tensor of n elements, -1 with err set.
static int read_named(dumped_run *r, const char *name, int64_t n, float **out, tb_error *err) {
    *out = NULL;
    for (int j = 0; j < r->n; j++) {
        if (strcmp(r->refs[j].name, name) || tb_st_tensor_numel(r->refs[j].t) != n) continue;
        *out = tb_xmalloc((size_t)n * sizeof(float) + 1, "bisect tensor");
        if (tb_safetensors_read_f32(&r->files[r->refs[j].file], r->refs[j].t, *out, err) != 0) {
            free(*out);
            *out = NULL;
            return -1;
        }
        return 1;
    }
    return 0;
}

// What a run's optimizer step read and wrote for one parameter (tensor_dump.h).
typedef struct adam_inputs {
    float *before, *m, *v;
    double step_size, inv_sqrt_bc2, eps;
} adam_inputs;

static void adam_free(adam_inputs *a) {
    free(a->before), free(a->m), free(a->v);
    memset(a, 0, sizeof *a);
}

// The parameter's value before the step, its moments after it and the step's scalars: 1 when
// the dump has them all, 0 when not (an older engine's), -1 with err set.
static int adam_read(dumped_run *r, const char *param, int64_t n, adam_inputs *a, tb_error *err) {
    static const char *const prefixes[] = {"param.before", "adam.m", "adam.v"};
    static const char *const scalars[] = {"adam.hyper/step_size", "adam.hyper/inv_sqrt_bc2", "adam.hyper/eps"};
    float **bufs[] = {&a->before, &a->m, &a->v};
    double *values[] = {&a->step_size, &a->inv_sqrt_bc2, &a->eps};
    char name[200];
    int rc = 1;
    for (int k = 0; k < 3 && rc == 1; k++) {
        snprintf(name, sizeof name, "%s/%s", prefixes[k], param);
        rc = read_named(r, name, n, bufs[k], err);
    }
    for (int k = 0; k < 3 && rc == 1; k++) {
        float *scalar = NULL;
        rc = read_named(r, scalars[k], 1, &scalar, err);
        if (rc == 1) *values[k] = scalar[0];
        free(scalar);
    }
    return rc;
}

// δ (above): the largest max |a − b| / max |b| over the parameters both runs dumped before the
// step (param.before/), and which parameter it is; 0 and "" when they start alike or the dump
// has no param.before (an older engine's, or a run without the optimizer's state).
static int started_from(dumped_run runs[2], double *delta, char *which, size_t size, tb_error *err) {
    *delta = 0;
    which[0] = '\0';
    for (int i = 0; i < runs[0].n; i++) {
        const tensor_ref *x = &runs[0].refs[i];
        if (strncmp(x->name, "param.before/", 13)) continue;
        const int64_t n = tb_st_tensor_numel(x->t);
        float *a = NULL, *b = NULL;
        int got = read_named(&runs[0], x->name, n, &a, err);
        if (got == 1) got = read_named(&runs[1], x->name, n, &b, err);
        if (got < 0) {
            free(a), free(b);
            return -1;
        }
        double worst = 0, scale = 0;
        for (int64_t k = 0; got == 1 && k < n; k++) {
            const double d = fabs((double)a[k] - b[k]);
            if (d > worst || isnan(d)) worst = isnan(d) ? INFINITY : d;
            if (fabs(b[k]) > scale) scale = fabs(b[k]);
        }
        // a parameter that is NaN, or differs from an all-zero one, relieves nothing: the
        // step's tensors are then judged by T alone and the difference shows where it went
        const double rel = worst > 0 && scale > 0 ? worst / scale : 0;
        if (got == 1 && isfinite(rel) && rel > *delta) {
            *delta = rel;
            snprintf(which, size, "%s", x->name + 13);
        }
        free(a), free(b);
    }
    return 0;
}

// AdamW's update of one element from a run's own moments and scalars.
static double adam_update(const adam_inputs *a, int64_t k) {
    return a->step_size * (double)a->m[k] / (sqrt((double)a->v[k]) * a->inv_sqrt_bc2 + a->eps);
}

// A parameter after the step against its derived bound (above): the verdict at its worst
// element by the ratio |a' − b'| / bound, or NULL when every element is within its bound.
static json_t *judge_update(const char *tensor, const char *phase, int position, const float *x, const float *y,
                            int64_t n, const adam_inputs in[2], double tolerance) {
    double scale = 0;
    for (int64_t k = 0; k < n; k++) scale = fabs(y[k]) > scale ? fabs(y[k]) : scale;
    const double ulp = 0x1p-24;
    double worst = -1, worst_bound = 0, worst_d = 0, carried = 0, updates = 0;
    int64_t at = 0;
    for (int64_t k = 0; k < n; k++) {
        const double ua = adam_update(&in[0], k), ub = adam_update(&in[1], k);
        const double from = fabs((double)in[0].before[k] - in[1].before[k]), du = fabs(ua - ub);
        const double rounding = 4 * ulp * (fabs(y[k]) + fabs(ub) + fabs((double)in[1].before[k]));
        const double bound = tolerance * scale + from + du + rounding;
        const double d = fabs((double)x[k] - y[k]);
        const double ratio = isnan(d) || isnan(bound) ? INFINITY : bound > 0 ? d / bound : d > 0 ? INFINITY : 0;
        if (ratio > worst)
            worst = ratio, worst_bound = bound, worst_d = isnan(d) ? INFINITY : d, at = k, carried = from,
            updates = du;
    }
    if (!(worst > 1)) return NULL;
    return json_pack("{s:s, s:s, s:s, s:i, s:o, s:o, s:o, s:I, s:o, s:o, s:o, s:s, s:o, s:o, s:o}", "kind",
                     "divergence", "tensor", tensor, "phase", phase, "position", position, "max_abs_difference",
                     number_json(worst_d), "relative_to_scale", number_json(scale > 0 ? worst_d / scale : INFINITY),
                     "bound", number_json(worst_bound), "at_element", (json_int_t)at, "a", number_json((double)x[at]),
                     "b", number_json((double)y[at]), "scale", number_json(scale), "bound_kind",
                     "adamw: T x scale + the difference the step started from + the updates' difference + rounding",
                     "ratio_to_bound", number_json(worst), "started_from_difference", number_json(carried),
                     "update_difference", number_json(updates));
}

typedef struct compared {
    const tensor_ref *a, *b;
    int phase;
    double key;
} compared;

static int by_order(const void *x, const void *y) {
    const compared *a = x, *b = y;
    if (a->phase != b->phase) return a->phase - b->phase;
    if (a->key != b->key) return a->key < b->key ? -1 : 1;
    return strcmp(a->a->name, b->a->name);
}

typedef struct bisect_args {
    int step, json;
    double tolerance;
    const char *artifacts;
} bisect_args;

static const tb_option bisect_options[] = {
    TB_OPTION("--step", bisect_args, step, TB_OPT_INT, "0", "N", "the dumped step to compare (0: the first)"),
    TB_OPTION("--tolerance", bisect_args, tolerance, TB_OPT_FLOAT, "1e-5", "T",
              "a tensor diverges when max |a - b| > T x max |b|"),
    TB_OPTION("--json", bisect_args, json, TB_OPT_BOOL, "false", NULL, "the verdict as JSON"),
    TB_ARTIFACTS_OPTION(bisect_args, artifacts),
    TB_OPTIONS_END,
};
static const tb_command bisect_command = {
    "tracebook bisect", "RUN RUN",
    "The first tensor where two runs diverge beyond float reordering: both runs dumped their tensors\n"
    "(--dump-tensors); each tensor of the step is compared in the order the step computes it (forward,\n"
    "backward, optimizer) against a bound derived from what produced it. Each RUN is a run id (or a\n"
    "unique prefix), a record directory or a run directory (docs/CLI.md).",
    bisect_options, 2, 2,
    "tracebook bisect 20261129T104512-3f9a2c1e 20261129T104530-77b1d2e0 --step 1\n"
    "tracebook bisect /tmp/tp1-run /tmp/tp2-run",
    "the runs diverge (the first tensor named)\n2  a usage error, or a run or dump that cannot be read"};

static const char *const phase_names[] = {"forward", "backward", "optimizer"};

// A figure of the verdict: a JSON number, or "nan" / "inf" / "-inf" for one JSON cannot hold.
static json_t *number_json(double v) {
    if (isfinite(v)) return json_real(v);
    return json_string(isnan(v) ? "nan" : v > 0 ? "inf" : "-inf");
}

// A verdict figure for printing: the number with %.*g, or its text.
static const char *number_text(json_t *v, int digits, char *buf, size_t size) {
    if (json_is_string(v)) snprintf(buf, size, "%s", json_string_value(v));
    else snprintf(buf, size, "%.*g", digits, json_number_value(v));
    return buf;
}

int tb_bisect_runs(const char *run_a, const char *run_b, long long step, double tolerance, json_t **result,
                   tb_error *err) {
    *result = NULL;
    dumped_run runs[2];
    memset(runs, 0, sizeof runs);
    int rc = run_open(run_a, &step, &runs[0], err);
    if (rc == 0) rc = run_open(run_b, &step, &runs[1], err);
    compared *cmp = NULL;
    int n = 0, only = 0;
    json_t *verdict = NULL;
    if (rc == 0) {
        cmp = tb_xcalloc((size_t)runs[0].n + 1, sizeof *cmp, "bisect pairs");
        for (int i = 0; i < runs[0].n; i++) {
            const tensor_ref *x = &runs[0].refs[i], *y = NULL;
            // the step's input, not its output: the optimizer's bound reads it
            if (!strncmp(x->name, "param.before/", 13)) continue;
            for (int j = 0; j < runs[1].n && !y; j++)
                if (!strcmp(runs[1].refs[j].name, x->name)) y = &runs[1].refs[j];
            if (!y) {
                only++;
                continue;
            }
            cmp[n] = (compared){x, y, 0, 0};
            order_of(x->name, &cmp[n].phase, &cmp[n].key);
            n++;
        }
        for (int j = 0; j < runs[1].n; j++) only -= !strncmp(runs[1].refs[j].name, "param.before/", 13);
        only += runs[1].n - n;
        qsort(cmp, (size_t)n, sizeof *cmp, by_order);
    }
    double carried = 0;  // δ: the largest relative difference the step's parameters started from
    char carried_from[160] = "";
    if (rc == 0) rc = started_from(runs, &carried, carried_from, sizeof carried_from, err);
    for (int i = 0; rc == 0 && i < n && !verdict; i++) {
        const tb_st_tensor *ta = cmp[i].a->t, *tb = cmp[i].b->t;
        int64_t na = tb_st_tensor_numel(ta), nb = tb_st_tensor_numel(tb);
        if (na != nb) {
            verdict = json_pack("{s:s, s:s, s:s, s:i, s:I, s:I}", "kind", "shape", "tensor", ta->name, "phase",
                                phase_names[cmp[i].phase], "position", i + 1, "elements_a", (json_int_t)na,
                                "elements_b", (json_int_t)nb);
            break;
        }
        float *x = tb_xmalloc((size_t)na * sizeof(float) + 1, "bisect tensor"), *y = tb_xmalloc((size_t)nb * sizeof(float) + 1, "bisect tensor");
        rc = tb_safetensors_read_f32(&runs[0].files[cmp[i].a->file], ta, x, err);
        if (rc == 0) rc = tb_safetensors_read_f32(&runs[1].files[cmp[i].b->file], tb, y, err);
        // a parameter after the step: its bound follows AdamW's arithmetic (above)
        adam_inputs in[2];
        memset(in, 0, sizeof in);
        int derived = 0;
        if (rc == 0 && cmp[i].phase == 2 && !strncmp(ta->name, "param/", 6)) {
            derived = adam_read(&runs[0], ta->name + 6, na, &in[0], err);
            if (derived == 1) derived = adam_read(&runs[1], ta->name + 6, nb, &in[1], err);
            if (derived < 0) rc = -1;
        }
        if (rc == 0 && derived == 1) {
            verdict = judge_update(ta->name, phase_names[cmp[i].phase], i + 1, x, y, na, in, tolerance);
            adam_free(&in[0]), adam_free(&in[1]);
            free(x), free(y);
            continue;
        }
        adam_free(&in[0]), adam_free(&in[1]);
        // an older dump without the optimizer's state: leave out the elements whose gradient is
        // within the bound of 0 — Adam's first steps move them by about lr whatever the
        // gradient's size, so reordering noise in a near-zero gradient may move them either way
        float *g = NULL;
        double gbound = 0;
        if (rc == 0 && cmp[i].phase == 2 && !strncmp(ta->name, "param/", 6)) {
            char gname[160];
            snprintf(gname, sizeof gname, "grad/%s", strchr(ta->name, '/') + 1);
            for (int j = 0; j < runs[1].n && !g; j++)
                if (!strcmp(runs[1].refs[j].name, gname) && tb_st_tensor_numel(runs[1].refs[j].t) == nb) {
                    g = tb_xmalloc((size_t)nb * sizeof(float) + 1, "bisect gradient");
                    if (tb_safetensors_read_f32(&runs[1].files[runs[1].refs[j].file], runs[1].refs[j].t, g, err) != 0)
                        rc = -1;
                }
            for (int64_t k = 0; g && k < nb; k++) gbound = fabs(g[k]) > gbound ? fabs(g[k]) : gbound;
            gbound *= tolerance;
        }
        double worst = 0, scale = 0;
        int64_t at = 0;
        for (int64_t k = 0; rc == 0 && k < na; k++) {
            if (g && fabs(g[k]) <= gbound) continue;
            double d = fabs((double)x[k] - y[k]);
            if (d > worst || isnan(d)) worst = isnan(d) ? INFINITY : d, at = k;
            if (fabs(y[k]) > scale) scale = fabs(y[k]);
        }
        const double relative = tolerance + carried;
        if (rc == 0 && worst > relative * scale) {
            // a NaN or Inf difference is the plainest divergence of all: its figures are kept
            // as text ("nan", "inf"), which JSON's numbers cannot hold
            verdict = json_pack("{s:s, s:s, s:s, s:i, s:o, s:o, s:o, s:I, s:o, s:o, s:o}", "kind", "divergence",
                                "tensor", ta->name, "phase", phase_names[cmp[i].phase], "position", i + 1,
                                "max_abs_difference", number_json(worst), "relative_to_scale",
                                number_json(scale > 0 ? worst / scale : INFINITY), "bound",
                                number_json(relative * scale), "at_element", (json_int_t)at, "a",
                                number_json((double)x[at]), "b", number_json((double)y[at]), "scale",
                                number_json(scale));
            if (!verdict) rc = tb_fail(err, "bisect: tensor %s diverges, but its verdict could not be built", ta->name);
        }
        free(x), free(y), free(g);
    }
    if (rc == 0)
        *result = json_pack("{s:I, s:i, s:i, s:f, s:o, s:s, s:o}", "step", (json_int_t)step, "tensors_compared", n,
                            "tensors_in_one_run_only", only, "tolerance", tolerance, "started_from_relative_difference",
                            number_json(carried), "started_from_parameter", carried_from, "first_divergence",
                            verdict ? json_incref(verdict) : json_null());
    json_decref(verdict);
    free(cmp);
    run_close(&runs[0]);
    run_close(&runs[1]);
    return rc;
}

int tracebook_bisect_main(int argc, char **argv) {
    bisect_args a = {0};
    tb_positional pos = {0};
    tb_error err;
    int rc = tb_command_parse(&bisect_command, &a, argc, argv, &pos, &err);
    if (rc == 1) return 0;
    if (rc != 0) return tb_command_usage_error(&bisect_command, &err);
    if (!(a.tolerance >= 0) || a.step < 0) {
        fprintf(stderr, "tracebook bisect: %s must not be negative\n", a.step < 0 ? "--step" : "--tolerance");
        tb_positional_free(&pos);
        return 2;
    }
    json_t *out = NULL;
    tb_run_arg runs[2];
    for (int i = 0; i < 2; i++)
        if (tb_run_arg_resolve(pos.items[i], a.artifacts, &runs[i], &err) != 0) {
            fprintf(stderr, "tracebook bisect: %s\n", err.msg);
            tb_positional_free(&pos);
            return 2;
        }
    rc = tb_bisect_runs(runs[0].run_dir, runs[1].run_dir, a.step, a.tolerance, &out, &err);
    json_t *verdict = out ? json_object_get(out, "first_divergence") : NULL;
    if (json_is_null(verdict)) verdict = NULL;
    if (rc == 0) {
        const long long step = (long long)json_integer_value(json_object_get(out, "step"));
        const int n = (int)json_integer_value(json_object_get(out, "tensors_compared"));
        const int only = (int)json_integer_value(json_object_get(out, "tensors_in_one_run_only"));
        if (a.json) {
            json_dumpf(out, stdout, JSON_INDENT(1));
            printf("\n");
        } else {
            const double carried = json_number_value(json_object_get(out, "started_from_relative_difference"));
            char from[256] = "";
            if (carried > 0)
                snprintf(from, sizeof from, " + %.3g (the step's parameters started %.3g of their scale apart, at %s)",
                         carried, carried, json_string_value(json_object_get(out, "started_from_parameter")));
            printf("step %lld: %d tensors compared in step order (forward, backward, optimizer)%s; bound: max |a - b| "
                   "<= (%g%s) x max |b| (the parameters after the step: and what AdamW's step explains)\n",
                   step, n, only ? " (some only in one run)" : "", a.tolerance, from);
            if (!verdict) {
                printf("no divergence beyond the bound\n");
            } else if (!strcmp(json_string_value(json_object_get(verdict, "kind")), "shape")) {
                printf("first divergence: %s (%s): %lld elements against %lld\n",
                       json_string_value(json_object_get(verdict, "tensor")),
                       json_string_value(json_object_get(verdict, "phase")),
                       (long long)json_integer_value(json_object_get(verdict, "elements_a")),
                       (long long)json_integer_value(json_object_get(verdict, "elements_b")));
            } else {
                const char *name = json_string_value(json_object_get(verdict, "tensor"));
                char t[6][64];
                printf("first divergence: %s (%s): max |a - b| %s at element %lld (%s against %s), %s of the "
                       "tensor's scale %s (bound %s)\n",
                       name, json_string_value(json_object_get(verdict, "phase")),
                       number_text(json_object_get(verdict, "max_abs_difference"), 6, t[0], sizeof t[0]),
                       (long long)json_integer_value(json_object_get(verdict, "at_element")),
                       number_text(json_object_get(verdict, "a"), 9, t[1], sizeof t[1]),
                       number_text(json_object_get(verdict, "b"), 9, t[2], sizeof t[2]),
                       number_text(json_object_get(verdict, "relative_to_scale"), 3, t[3], sizeof t[3]),
                       number_text(json_object_get(verdict, "scale"), 6, t[4], sizeof t[4]),
                       number_text(json_object_get(verdict, "bound"), 3, t[5], sizeof t[5]));
                json_t *ratio = json_object_get(verdict, "ratio_to_bound");
                if (ratio)
                    printf("  the bound follows AdamW's step: %g x scale + the difference the step started from %s "
                           "+ the updates' difference %s + rounding; %s x the bound\n",
                           a.tolerance, number_text(json_object_get(verdict, "started_from_difference"), 3, t[0], sizeof t[0]),
                           number_text(json_object_get(verdict, "update_difference"), 3, t[1], sizeof t[1]),
                           number_text(ratio, 3, t[2], sizeof t[2]));
                const char *base = strchr(name, '/') + 1;
                if (!strncmp(name, "fwd/", 4) && strcmp(base, "loss") != 0)
                    printf("  the range %s computes it: tracebook walk %s --trace RUN/trace.rank-00000.json shows its "
                           "source\n", base, base);
                else if (strncmp(name, "fwd/", 4) != 0)
                    printf("  the %s of parameter %s\n", strncmp(name, "grad/", 5) ? "value after the step" : "gradient",
                           base);
            }
        }
    } else {
        fprintf(stderr, "tracebook bisect: %s\n", err.msg);
    }
    const int diverged = verdict != NULL;
    json_decref(out);
    tb_positional_free(&pos);
    return rc != 0 ? 2 : diverged ? 1 : 0;
}
