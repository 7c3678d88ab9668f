// timing_interval.h — how precisely a timing was measured: the confidence interval of the
// median step time over a claim's repetitions (separate processes) and their timed steps,
// as pyperf judges a benchmark by its values over several processes.
//
// The interval is a hierarchical (two-stage) percentile bootstrap: each resample draws the
// repetitions with replacement, then within each drawn repetition its steps with replacement,
// and takes the median of everything drawn. Drawing the repetitions first keeps what varies
// between processes (memory layout, clock, what else ran) in the interval: steps of one
// process are not independent samples of the run's speed. The generator is seeded by a
// constant, so the same step times give the same interval: prove re-derives its verdict.
#ifndef TB_EXPERIMENTS_TIMING_INTERVAL_H
#define TB_EXPERIMENTS_TIMING_INTERVAL_H

#define TB_TIMING_RESAMPLES 2000
#define TB_TIMING_LEVEL 0.95

// One repetition's timed steps (after the warm-up), in ms.
typedef struct tb_timing_repetition {
    const double *steps;
    int n;
} tb_timing_repetition;

typedef struct tb_timing_interval {
    double median;            // of every timed step, pooled
    double quantile, value;   // q and the q-quantile of every timed step, pooled (0.5: the median)
    double lo, hi;            // the q-quantile's interval's ends (ms)
    double mean, sd;          // pooled; sd is the sample deviation (pyperf's)
    double level;             // TB_TIMING_LEVEL
    int resamples;            // TB_TIMING_RESAMPLES
    int repetitions, steps;   // what it was computed from
    int fewest_steps;         // the fewest timed steps of one repetition
    double shortest_window_s; // the shortest repetition's timed window: the sum of its steps
} tb_timing_interval;

// The interval over n repetitions (n >= 1, each with at least one step). Returns 0, or -1
// when there is nothing to compute it from.
int tb_timing_interval_compute(const tb_timing_repetition *reps, int n, tb_timing_interval *out);
// The q-quantile of sorted v[0..n) (n >= 1, 0 <= q <= 1) by linear interpolation between order
// statistics: the definition the parsers' args.quantile and the interval above share.
double tb_timing_quantile(const double *sorted, int n, double q);
// The same for the q-quantile (0 < q < 1; linear interpolation between order statistics) of
// the step times instead of their median: the same bootstrap, each resample's q-quantile.
int tb_timing_interval_compute_at(const tb_timing_repetition *reps, int n, double q, tb_timing_interval *out);

// A ratio of two timings measured in pairs: a[i] and b[i] are repetitions (separate
// processes) of two configurations run one right after the other, so that what drifts on the
// host over minutes (a shared memory system's speed) is common to the pair. The figure is
// median(a's steps) / median(b's steps), pooled; its interval is the same hierarchical
// bootstrap over the pairs (drawn with replacement, each then drawing its two repetitions'
// steps), so that the drift between pairs enters it only as it moves the ratio.
typedef struct tb_timing_ratio_interval {
    double ratio, lo, hi;     // median(a) / median(b), pooled, and its interval's ends
    double level;
    int resamples, pairs;
} tb_timing_ratio_interval;

int tb_timing_ratio_interval_compute(const tb_timing_repetition *a, const tb_timing_repetition *b, int pairs,
                                     tb_timing_ratio_interval *out);

#endif
