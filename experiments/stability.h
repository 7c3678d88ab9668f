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
// Each reason is one line beginning with its kind:
//   "not verifiable: ..." the record has no (readable) conditions.json, or lacks a figure;
//   "oversubscribed: ..." more threads than usable cores (unless the claim accepts it), and
//                         the scheduler measured a rank's threads waiting for a core beyond
//                         TB_STABLE_MAX_RUN_QUEUE_SHARE of the run, or did not measure it; where
//                         it measured less, the extra threads rarely ran (a communication thread
//                         asleep between buckets) and the run is accepted, saying so;
//   "contended: ..."      other processes or the hypervisor's steal took too much of the cores,
//                         or a rank's threads waited for a core beyond the threshold;
//   "unstable: ..."       the per-step or per-repetition spread is too wide;
//   "unequal threads: ..." runs compared by the claim occupied different numbers of cores.
// Each names the run, the figure and the threshold below.
#ifndef TB_EXPERIMENTS_STABILITY_H
#define TB_EXPERIMENTS_STABILITY_H

#include <jansson.h>

// The thresholds (pyperf's `check` warns beyond the step-spread ones).
#define TB_STABLE_MAX_OTHER_SHARE 0.10     // host.other_processes_share: of wall × usable cores
#define TB_STABLE_MAX_STEAL_SHARE 0.05     // host.steal_s / (wall_s × cores.usable)
#define TB_STABLE_MAX_RUN_QUEUE_SHARE 0.05 // scheduler.run_queue_share: the most waiting rank's wait for a core / wall_s
#define TB_STABLE_MAX_STEP_SD 0.10         // standard deviation of the timed steps / their mean
#define TB_STABLE_MAX_STEP_OVER_MEAN 1.5   // the slowest step / the mean
#define TB_STABLE_MIN_STEP_OF_MEAN 0.5     // the fastest step / the mean
#define TB_STABLE_MAX_REPETITION_SPREAD 0.10  // (max − min) / median of the records' values
#define TB_STABLE_DEFAULT_WARMUP 1         // steps left out when the claim's args do not say

typedef struct tb_stability {
    int timed;       // 1 when the claim is timing-derived (the gate applied)
    char *reasons;   // "<kind>: ..." lines, each ending in '\n'; NULL when the timings are valid
    char *accepted;  // "accepted: ..." lines for conditions the claim accepts; NULL when none
} tb_stability;

// Gates a claim by its re-derived evidence (tb_parse_claim's, experiments/parsers.h).
// accept_oversubscribed: the claim's "accept_oversubscribed". Each timed record object in
// evidence gains "conditions": one line of text (CPU share, other processes' share, steal,
// threads on cores, per-step spread) for prove to print. out is filled; free it with
// tb_stability_free.
void tb_stability_check(json_t *evidence, int accept_oversubscribed, tb_stability *out);
void tb_stability_free(tb_stability *s);

#endif
