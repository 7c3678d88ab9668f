// test_timing_interval.c — the median's interval of a timing claim (experiments/prove/timing_interval.h):
// its figures on data whose answer is known, the same interval from the same steps, and the
// coverage the 95% level promises on repetitions drawn from a known distribution.
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "tb_test.h"
#include "prove/timing_interval.h"

TB_TEST(steps_all_equal_give_an_interval_of_one_point) {
    const double a[] = {10, 10, 10, 10, 10}, b[] = {10, 10, 10};
    const tb_timing_repetition reps[] = {{a, 5}, {b, 3}};
    tb_timing_interval iv;
    TB_REQUIRE(tb_timing_interval_compute(reps, 2, &iv) == 0, "computed");
    TB_CHECK(iv.median == 10 && iv.lo == 10 && iv.hi == 10 && iv.sd == 0 && iv.mean == 10,
             "median %g [%g, %g], sd %g", iv.median, iv.lo, iv.hi, iv.sd);
    TB_CHECK(iv.steps == 8 && iv.repetitions == 2 && iv.fewest_steps == 3 && fabs(iv.shortest_window_s - 0.03) < 1e-12,
             "%d steps, %d repetitions, fewest %d, shortest window %g s", iv.steps, iv.repetitions, iv.fewest_steps,
             iv.shortest_window_s);
    TB_CHECK(iv.level == 0.95 && iv.resamples == 2000, "level %g, %d resamples", iv.level, iv.resamples);
}

TB_TEST(the_pooled_median_mean_and_sample_deviation) {
    const double a[] = {1, 2, 3}, b[] = {4, 5, 6, 7};
    const tb_timing_repetition reps[] = {{a, 3}, {b, 4}};
    tb_timing_interval iv;
    TB_REQUIRE(tb_timing_interval_compute(reps, 2, &iv) == 0, "computed");
    // 1..7: median 4, mean 4, sample deviation sqrt(28 / 6)
    TB_CHECK(iv.median == 4 && iv.mean == 4 && fabs(iv.sd - sqrt(28.0 / 6)) < 1e-12, "median %g mean %g sd %g",
             iv.median, iv.mean, iv.sd);
    TB_CHECK(iv.lo >= 1 && iv.lo <= iv.median && iv.hi >= iv.median && iv.hi <= 7, "[%g, %g]", iv.lo, iv.hi);
}

// prove re-derives its verdict: the same steps give the same interval, bit for bit
TB_TEST(the_same_steps_give_the_same_interval) {
    const double a[] = {9.7, 10.4, 10.1, 12.0, 9.9, 10.2}, b[] = {11.0, 10.8, 10.9, 11.3, 10.7};
    const tb_timing_repetition reps[] = {{a, 6}, {b, 5}};
    tb_timing_interval x, y;
    TB_REQUIRE(tb_timing_interval_compute(reps, 2, &x) == 0 && tb_timing_interval_compute(reps, 2, &y) == 0,
               "computed");
    TB_CHECK(x.lo == y.lo && x.hi == y.hi && x.median == y.median, "[%.17g, %.17g] vs [%.17g, %.17g]", x.lo, x.hi,
             y.lo, y.hi);
    TB_CHECK(x.lo < x.median && x.median < x.hi, "a spread gives an interval around the median: [%g, %g] %g", x.lo,
             x.hi, x.median);
}

TB_TEST(nothing_to_compute_from_is_refused) {
    const double a[] = {1};
    const tb_timing_repetition empty[] = {{a, 0}};
    tb_timing_interval iv;
    TB_CHECK(tb_timing_interval_compute(empty, 0, &iv) == -1, "no repetitions");
    TB_CHECK(tb_timing_interval_compute(empty, 1, &iv) == -1, "a repetition without steps");
}

// Another quantile: its value between order statistics, its interval around it, and the median
// path unchanged at 0.5.
TB_TEST(a_quantile_and_its_interval) {
    double a[100];
    for (int i = 0; i < 100; i++) a[i] = 100 - i;  // 1..100, unsorted
    const tb_timing_repetition reps[] = {{a, 100}};
    tb_timing_interval iv, med, plain;
    TB_REQUIRE(tb_timing_interval_compute_at(reps, 1, 0.95, &iv) == 0, "computed");
    // sorted 1..100: at = 0.95 x 99 = 94.05, between 95 and 96
    TB_CHECK(fabs(iv.value - 95.05) < 1e-9 && iv.quantile == 0.95 && iv.median == 50.5, "p95 %.17g, median %g",
             iv.value, iv.median);
    TB_CHECK(iv.lo < iv.value && iv.value < iv.hi && iv.lo > 85 && iv.hi <= 100, "p95's interval [%g, %g]", iv.lo,
             iv.hi);
    TB_REQUIRE(tb_timing_interval_compute_at(reps, 1, 0.5, &med) == 0 && tb_timing_interval_compute(reps, 1, &plain) == 0,
               "computed");
    TB_CHECK(med.value == 50.5 && med.lo == plain.lo && med.hi == plain.hi, "0.5 is the median's interval");
    TB_CHECK(tb_timing_interval_compute_at(reps, 1, 0, &iv) == -1 && tb_timing_interval_compute_at(reps, 1, 1, &iv) == -1,
             "q outside (0, 1) is refused");
}

// The test's own generator (not the interval's): splitmix64, and normal draws by Box-Muller.
static uint64_t rng_state = 12345;
static double uniform(void) {
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return ((z ^ (z >> 31)) >> 11) * (1.0 / 9007199254740992.0);
}
static double normal(void) { return sqrt(-2 * log(1 - uniform())) * cos(2 * M_PI * uniform()); }

// Runs of a known distribution: each repetition a process whose own speed is drawn (100 ms
// times 1 + 3% N(0,1)), each step that times 1 + 5% N(0,1): the median over processes and
// steps is 100 ms. Over 300 such claims (3 repetitions of 12 steps, as the runbooks take
// them) the 95% interval must hold 100 ms in most: a percentile bootstrap over 3 repetitions
// under-covers (it cannot draw a process speed it has not seen), so the bound asked is 80%,
// and an interval that ignored the repetitions (steps alone) covers far less (checked too).
TB_TEST(the_interval_covers_the_true_median_of_runs_drawn_from_a_known_distribution) {
    enum { CLAIMS = 300, REPS = 3, STEPS = 12 };
    int covered = 0, covered_flat = 0;
    double steps[REPS][STEPS];
    for (int c = 0; c < CLAIMS; c++) {
        tb_timing_repetition reps[REPS];
        for (int r = 0; r < REPS; r++) {
            const double process = 1 + 0.03 * normal();
            for (int s = 0; s < STEPS; s++) steps[r][s] = 100 * process * (1 + 0.05 * normal());
            reps[r] = (tb_timing_repetition){steps[r], STEPS};
        }
        tb_timing_interval iv, flat;
        TB_REQUIRE(tb_timing_interval_compute(reps, REPS, &iv) == 0, "claim %d", c);
        // every step as one repetition: the interval of independent steps
        tb_timing_repetition one = {&steps[0][0], REPS * STEPS};
        TB_REQUIRE(tb_timing_interval_compute(&one, 1, &flat) == 0, "claim %d, pooled", c);
        covered += iv.lo <= 100 && 100 <= iv.hi;
        covered_flat += flat.lo <= 100 && 100 <= flat.hi;
    }
    printf("    covered %d of %d (steps alone: %d)\n", covered, CLAIMS, covered_flat);
    TB_CHECK(covered >= CLAIMS * 80 / 100, "the interval held the true median in %d of %d claims", covered, CLAIMS);
    TB_CHECK(covered > covered_flat, "drawing repetitions first covers more than steps alone (%d vs %d)", covered,
             covered_flat);
}

// A drift common to each pair cancels: pair i's steps are k_i times as slow on both sides
// (k from 0.7 to 1.4), b's twice a's, so every pair's ratio is 0.5 and the interval holds only
// the steps' own spread; the same steps judged unpaired (each side on its own) hold the drift.
TB_TEST(a_drift_shared_by_each_pair_cancels_in_the_paired_ratio) {
    const double k[4] = {1, 1.4, 0.7, 1.2};
    double sa[4][5], sb[4][5];
    tb_timing_repetition a[4], b[4];
    for (int p = 0; p < 4; p++) {
        for (int i = 0; i < 5; i++) sa[p][i] = 100 * k[p] * (1 + 0.01 * i), sb[p][i] = 2 * sa[p][i];
        a[p] = (tb_timing_repetition){sa[p], 5};
        b[p] = (tb_timing_repetition){sb[p], 5};
    }
    tb_timing_ratio_interval r;
    TB_REQUIRE(tb_timing_ratio_interval_compute(a, b, 4, &r) == 0, "computed");
    // what is left is the steps' own 0..4% spread, drawn independently on each side
    TB_CHECK(fabs(r.ratio - 0.5) < 1e-12 && r.lo > 0.5 * 0.97 && r.hi < 0.5 * 1.03,
             "ratio %.15g in [%.15g, %.15g]: the 40%% drift between pairs is not in it", r.ratio, r.lo, r.hi);
    TB_CHECK(r.pairs == 4 && r.level == 0.95 && r.resamples == 2000, "%d pairs", r.pairs);
    tb_timing_interval side;
    TB_REQUIRE(tb_timing_interval_compute(a, 4, &side) == 0, "computed");
    TB_CHECK(side.hi / side.lo > 1.5, "unpaired, a's own interval [%g, %g] holds the drift", side.lo, side.hi);
    // pairs that do not share it: b's drift reversed
    tb_timing_repetition rev[4] = {b[3], b[2], b[1], b[0]};
    TB_REQUIRE(tb_timing_ratio_interval_compute(a, rev, 4, &r) == 0, "computed");
    TB_CHECK(r.hi / r.lo > 1.5, "pairs with different drifts: interval [%g, %g]", r.lo, r.hi);
    TB_CHECK(tb_timing_ratio_interval_compute(a, b, 0, &r) == -1, "no pairs: nothing to compute from");
}

int main(void) {
    TB_RUN(steps_all_equal_give_an_interval_of_one_point);
    TB_RUN(the_pooled_median_mean_and_sample_deviation);
    TB_RUN(the_same_steps_give_the_same_interval);
    TB_RUN(nothing_to_compute_from_is_refused);
    TB_RUN(a_quantile_and_its_interval);
    TB_RUN(the_interval_covers_the_true_median_of_runs_drawn_from_a_known_distribution);
    TB_RUN(a_drift_shared_by_each_pair_cancels_in_the_paired_ratio);
    return tb_test_summary();
}
