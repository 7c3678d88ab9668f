// moe_report.h — `tracebook moe RUN [--json]`: a MoE run's expert load and all-to-all
// traffic per MoE layer over the whole run, from every rank's files alone
// (metrics.rank-NNNNN.jsonl's "moe" entries, trace.rank-NNNNN.json's all-to-all ranges), so
// rank threads and mpirun processes read alike:
//
//   load imbalance    per step, the layer's tokens per expert summed over the ranks that route
//                     distinct tokens (every rank; under tp without sequence parallelism only tp
//                     rank 0's), then the busiest expert over the mean (1 = balanced): its min,
//                     median and max over the steps
//   ep imbalance      per step, in each expert-parallel group the tokens reaching each ep rank's
//                     experts (Σ over the group's ranks and the rank's E/ep experts), the busiest
//                     ep rank over the group's mean, the worst group's: min, median, max (null at ep 1)
//   tokens            per expert over the run; routed and dropped tokens
//   aux loss          the load-balancing loss (the metrics' mean over a step's microbatches,
//                     averaged over the ranks): first step, last step, mean over steps
//   all-to-all        the layer's comm.*.all_to_all calls (those inside layer.L.moe.* ranges:
//                     dispatch, combine and their backward), matched across the ep group
//                     (step_report.h): bytes each rank passed (its own share included), and each
//                     member's wait for the last peer to enter vs its transfer after, summed;
//                     per rank and in all. The metrics' own per-layer "a2a_bytes" (computed by
//                     the engine from the routing) are summed beside them: equal unless a
//                     recompute repeated the forward's all-to-alls.
#ifndef TB_EXPERIMENTS_MOE_REPORT_H
#define TB_EXPERIMENTS_MOE_REPORT_H

#include <jansson.h>

#include "core/error.h"

// {"run_dir", "ranks", "steps", "num_experts", "topk", "ep", "layers": [{"layer", "steps",
//  "imbalance": {"min", "median", "max"}, "ep_imbalance": {...} | null, "tokens_per_expert": [...],
//  "routed_tokens", "dropped_tokens", "load_balancing_loss": {"first", "last", "mean"} | null,
//  "a2a": {"calls", "bytes", "metrics_bytes", "wait_ms", "transfer_ms", "ranks": [{"rank",
//  "calls", "bytes", "metrics_bytes", "wait_ms", "transfer_ms"}]} | null (no expert parallelism)}],
//  "traces": true | false (the run wrote none: no all-to-all figures)}. NULL with err set
// (not a MoE run, no metrics, a malformed line).
json_t *tb_moe_report(const char *run_dir, tb_error *err);

int tracebook_moe_main(int argc, char **argv);

#endif
