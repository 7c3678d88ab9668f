// stability.h — the stability gate of `tracebook prove`, in the spirit of pyperf's `check`:
// a number derived from time is PROVEN only when its runs were measured validly. A claim
// re-derives from its files first (prove.c); then, for every record of a timing-derived
// part of it, this gate reads the record's run/conditions.json (engine/reports/conditions.h)
// and the per-step times, and says why the timings cannot be trusted, if they cannot.
//
// Timing-derived (tb_parser_timed, parsers.h: each parser says so in its table entry):
// tokens_per_s, step_ms, pipeline_bubble with kind "measured" (the default), stage_imbalance,
// checkpoint_figure but for its byte counts, step_phase, collective_figure; ratio,
// saved_fraction and relative_difference when a part is (recursively). Counts
// (peak_memory_bytes, loss_at_step, comm_bytes, rank_figure, stage_figure, the theoretical
// bubble, oom_figure, hang_figure, first_divergence) are exact: not gated.
//
// What a timing claim measures (pyperf's method): every repetition of the run (a separate
// process) times its steps after the warm-up (warmup_steps, default 1: the first step, which
// pays the first touch of every buffer); the claim's repetitions must number at least
// min_repetitions (3), each timing at least min_steps (5) steps over at least min_window_s
// (1 s) of steps. The verdict is the median step time's 95% interval (timing_interval.h: a
// hierarchical bootstrap over repetitions, then steps) against the claim's timing_tolerance
// (relative, default 5%): PROVEN only when the interval lies within ±timing_tolerance of the
// median. For tokens_per_s and step_ms that median is the claimed figure's (tokens / t is
// monotone in t); for the other timed figures (a bubble, an imbalance, a phase's time) it is
// the precision of the run's step timing, not an interval of the figure itself. A ratio's
// sides are judged each on its own — unless both are step times (tokens_per_s, step_ms,
// replayed step_ms or tokens_per_s) whose repetitions ran in pairs, pair i after pair i - 1
// and its two runs one after the other (a round of runbooks/lib/timing.lua's interleaved;
// the manifests' start and end say so): then the verdict is the interval of the ratio of median step times over the pairs
// (timing_interval.h), in which what the host's speed does between pairs cancels, and the
// sides' own intervals are printed but not gated. A claim sets these in claims.json
// (exp:claim's timing_tolerance, min_window_s, min_steps, min_repetitions).
//
// A replayed figure (parser "replayed": each rank on a core of its own, from per-op CPU time)
// is sampled on its replayed step times; the oversubscription gate and the comparison of
// occupied cores do not apply to it, the contention gates do.
//
// Each reason is one line beginning with its kind:
//   "not verifiable: ..." the record has no (readable) conditions.json, or lacks a figure;
//   "oversubscribed: ..." more threads than usable cores (unless the claim accepts it), and
//                         the scheduler measured a rank's threads waiting for a core beyond
//                         TB_STABLE_MAX_RUN_QUEUE_SHARE of the run, or did not measure it; where
//                         it measured less, the extra threads rarely ran (a communication thread
//                         asleep between buckets) and the run is accepted, saying so;
//   "contended: ..."      other processes or the hypervisor's steal took too much of the cores,
//                         or a rank's threads waited for a core beyond the threshold;
//   "undersampled: ..."   fewer repetitions than min_repetitions, or a repetition that timed
//                         fewer than min_steps steps or a shorter window than min_window_s;
//   "unstable: ..."       the median's interval (a paired ratio's) is wider than the claim's
//                         timing_tolerance;
//   "unequal threads: ..." runs compared by the claim occupied different numbers of cores;
//   "selected: ..."       a repetition replaces an earlier measurement of itself (its manifest's
//                         "supersedes": exp:run's rerun_contended_) that was not measured
//                         contended, or whose conditions are not as recorded.
// A repetition measured again because its first measurement was contended is sampled like
// any other; the measurements it replaced are named in the accepted lines with their
// contention (stability.c, judge_remeasure).
// Each names the run, the figure and the threshold below.
#ifndef TB_EXPERIMENTS_STABILITY_H
#define TB_EXPERIMENTS_STABILITY_H

#include <jansson.h>

// The thresholds of the conditions (contention and oversubscription).
#define TB_STABLE_MAX_OTHER_SHARE 0.10     // host.other_processes_share: of wall × usable cores
#define TB_STABLE_MAX_STEAL_SHARE 0.05     // host.steal_s / (wall_s × cores.usable)
#define TB_STABLE_MAX_RUN_QUEUE_SHARE 0.05 // scheduler.run_queue_share: the most waiting rank's wait for a core / wall_s
#define TB_STABLE_DEFAULT_WARMUP 1         // steps left out when the claim's args do not say
#define TB_STABLE_WARN_STEP_SD 0.10        // pyperf warns when the standard deviation passes 10% of the mean

// A timing claim's sampling rule, its defaults, and the claim fields that set them.
#define TB_TIMING_DEFAULT_TOLERANCE 0.05
#define TB_TIMING_DEFAULT_MIN_WINDOW_S 1.0
#define TB_TIMING_DEFAULT_MIN_STEPS 5
#define TB_TIMING_DEFAULT_MIN_REPETITIONS 3
typedef struct tb_sampling {
    int accept_oversubscribed;  // the claim's accept_oversubscribed
    double timing_tolerance;    // the median's interval within ±this of the median (relative)
    double min_window_s;        // each repetition's timed steps sum to at least this
    int min_steps;              // and number at least this
    int min_repetitions;        // repetitions (separate processes) at least
} tb_sampling;

// The claim's rule: each field it has, checked (a number in range, an integer count), the
// defaults for the rest. Returns 0, or -1 with why in msg (naming the field and its value).
int tb_sampling_from_claim(json_t *claim, tb_sampling *out, char *msg, size_t size);

typedef struct tb_stability {
    int timed;       // 1 when the claim is timing-derived (the gate applied)
    char *reasons;   // "<kind>: ..." lines, each ending in '\n'; NULL when the timings are valid
    char *accepted;  // "accepted: ..." lines for conditions the claim accepts; NULL when none
} tb_stability;

// Gates a claim by its re-derived evidence (tb_parse_claim's, experiments/prove/parsers.h) under
// its sampling rule. Each timed record object in evidence gains "conditions": one line of
// text (CPU share, other processes' share, steal, threads on cores, its timed steps and
// window); each timed parser object gains "sampling" (the interval's figures) and
// "sampling_text" (one line: median, interval, spread, sample counts) for prove to print.
// out is filled; free it with tb_stability_free.
// The contention a run's conditions.json shows (the gate's own thresholds above): other
// processes beyond TB_STABLE_MAX_OTHER_SHARE of the cores, or the hypervisor's steal beyond
// TB_STABLE_MAX_STEAL_SHARE. 1 with the "contended: ..." reason in why, 0 when neither, -1
// with why when the conditions cannot be read or lack a figure. run names the run in why.
int tb_stability_contended(const char *record_dir, const char *run, char *why, size_t size);

void tb_stability_check(json_t *evidence, const tb_sampling *sampling, tb_stability *out);
void tb_stability_free(tb_stability *s);

#endif
