// timing_interval.c — the hierarchical bootstrap interval of the median, or of another
// quantile, of step times (timing_interval.h).
#include "prove/timing_interval.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "core/xalloc.h"

static int by_value(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

// The median of v[0..n) (n >= 1), sorting v.
static double median_sorting(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, by_value);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// splitmix64 (Steele, Lea, Flood 2014): small, fast, and the same sequence on every host.
static uint64_t next_random(uint64_t *state) {
    uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

// A uniform index in [0, n) (n small against 2^64: the modulo's bias is below 2^-40).
static int draw(uint64_t *state, int n) { return (int)(next_random(state) % (uint64_t)n); }

double tb_timing_quantile(const double *v, int n, double q) {
    const double at = q * (n - 1);
    const int i = (int)floor(at);
    return i + 1 < n ? v[i] + (at - i) * (v[i + 1] - v[i]) : v[n - 1];
}

int tb_timing_interval_compute(const tb_timing_repetition *reps, int n, tb_timing_interval *out) {
    return tb_timing_interval_compute_at(reps, n, 0.5, out);
}

// The q-quantile of v[0..n) (n >= 1), sorting v; the median's mean of the two middle values
// for q = 0.5, as median_sorting.
static double quantile_sorting(double *v, int n, double q) {
    if (q == 0.5) return median_sorting(v, n);
    qsort(v, (size_t)n, sizeof *v, by_value);
    return tb_timing_quantile(v, n, q);
}

int tb_timing_interval_compute_at(const tb_timing_repetition *reps, int n, double q, tb_timing_interval *out) {
    *out = (tb_timing_interval){
        .level = TB_TIMING_LEVEL, .resamples = TB_TIMING_RESAMPLES, .repetitions = n, .quantile = q};
    if (n < 1 || !(q > 0 && q < 1)) return -1;
    int total = 0;
    out->fewest_steps = reps[0].n;
    out->shortest_window_s = INFINITY;
    for (int r = 0; r < n; r++) {
        if (reps[r].n < 1) return -1;
        double window = 0;
        for (int i = 0; i < reps[r].n; i++) window += reps[r].steps[i];
        if (window / 1000 < out->shortest_window_s) out->shortest_window_s = window / 1000;
        if (reps[r].n < out->fewest_steps) out->fewest_steps = reps[r].n;
        total += reps[r].n;
    }
    out->steps = total;
    double *pooled = tb_xcalloc((size_t)total, sizeof *pooled, "pooled step times");
    double sum = 0;
    for (int r = 0, k = 0; r < n; r++)
        for (int i = 0; i < reps[r].n; i++) sum += pooled[k++] = reps[r].steps[i];
    out->mean = sum / total;
    double ss = 0;
    for (int k = 0; k < total; k++) ss += (pooled[k] - out->mean) * (pooled[k] - out->mean);
    out->sd = total > 1 ? sqrt(ss / (total - 1)) : 0;
    out->median = median_sorting(pooled, total);  // sorted now: the q-quantile reads it
    out->value = q == 0.5 ? out->median : tb_timing_quantile(pooled, total, q);

    // each resample: n repetitions drawn, each contributing as many steps as it has, drawn
    // from its own; the resample's size varies with the repetitions drawn (at most n x the
    // most steps of one)
    int most = 0;
    for (int r = 0; r < n; r++) most = reps[r].n > most ? reps[r].n : most;
    double *drawn = tb_xcalloc((size_t)n * (size_t)most, sizeof *drawn, "bootstrap resample");
    double *estimates = tb_xcalloc(TB_TIMING_RESAMPLES, sizeof *estimates, "bootstrap estimates");
    uint64_t state = 0x7472616365626f6full;  // "tracebook": the same interval from the same steps
    for (int b = 0; b < TB_TIMING_RESAMPLES; b++) {
        int k = 0;
        for (int j = 0; j < n; j++) {
            const tb_timing_repetition *rep = &reps[draw(&state, n)];
            for (int i = 0; i < rep->n; i++) drawn[k++] = rep->steps[draw(&state, rep->n)];
        }
        estimates[b] = quantile_sorting(drawn, k, q);
    }
    qsort(estimates, TB_TIMING_RESAMPLES, sizeof *estimates, by_value);
    out->lo = tb_timing_quantile(estimates, TB_TIMING_RESAMPLES, (1 - TB_TIMING_LEVEL) / 2);
    out->hi = tb_timing_quantile(estimates, TB_TIMING_RESAMPLES, 1 - (1 - TB_TIMING_LEVEL) / 2);
    free(estimates);
    free(drawn);
    free(pooled);
    return 0;
}

// The pooled steps of the n repetitions rep[idx[j]] (idx NULL: rep[j]), each drawn with
// replacement from its own when state is not NULL, into v; returns how many.
static int pool(const tb_timing_repetition *reps, const int *idx, int n, uint64_t *state, double *v) {
    int k = 0;
    for (int j = 0; j < n; j++) {
        const tb_timing_repetition *rep = &reps[idx ? idx[j] : j];
        for (int i = 0; i < rep->n; i++) v[k++] = rep->steps[state ? draw(state, rep->n) : i];
    }
    return k;
}

int tb_timing_ratio_interval_compute(const tb_timing_repetition *a, const tb_timing_repetition *b, int pairs,
                                     tb_timing_ratio_interval *out) {
    *out = (tb_timing_ratio_interval){.level = TB_TIMING_LEVEL, .resamples = TB_TIMING_RESAMPLES, .pairs = pairs};
    if (pairs < 1) return -1;
    int most = 0;
    for (int p = 0; p < pairs; p++) {
        if (a[p].n < 1 || b[p].n < 1) return -1;
        most = a[p].n > most ? a[p].n : most;
        most = b[p].n > most ? b[p].n : most;
    }
    double *va = tb_xcalloc((size_t)pairs * (size_t)most, sizeof *va, "paired resample");
    double *vb = tb_xcalloc((size_t)pairs * (size_t)most, sizeof *vb, "paired resample");
    double *ratios = tb_xcalloc(TB_TIMING_RESAMPLES, sizeof *ratios, "bootstrap ratios");
    int *idx = tb_xcalloc((size_t)pairs, sizeof *idx, "drawn pairs");
    int na = pool(a, NULL, pairs, NULL, va), nb = pool(b, NULL, pairs, NULL, vb);
    out->ratio = median_sorting(va, na) / median_sorting(vb, nb);
    uint64_t state = 0x7472616365626f6full;
    for (int r = 0; r < TB_TIMING_RESAMPLES; r++) {
        for (int j = 0; j < pairs; j++) idx[j] = draw(&state, pairs);
        na = pool(a, idx, pairs, &state, va);
        nb = pool(b, idx, pairs, &state, vb);
        ratios[r] = median_sorting(va, na) / median_sorting(vb, nb);
    }
    qsort(ratios, TB_TIMING_RESAMPLES, sizeof *ratios, by_value);
    out->lo = tb_timing_quantile(ratios, TB_TIMING_RESAMPLES, (1 - TB_TIMING_LEVEL) / 2);
    out->hi = tb_timing_quantile(ratios, TB_TIMING_RESAMPLES, 1 - (1 - TB_TIMING_LEVEL) / 2);
    free(idx);
    free(ratios);
    free(vb);
    free(va);
    return 0;
}
