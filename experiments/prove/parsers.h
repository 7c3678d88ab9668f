// parsers.h — claim parsers: the named, exact definitions that turn a claim's records into
// its number. A runbook's claim names one (record.h, claims.json "parser" and "args"), and
// `tracebook prove` re-derives the claim with it from the raw files of the claim's runs.
//
// A parser reads only the engine's run directory inside each record (<record>/run/:
// config.json, metrics.rank-NNNNN.jsonl, trace.rank-NNNNN.json, pipeline.json;
// engine/training.c writes them). It reads the files of every rank (ranks 0..world_size-1
// of config.json; a missing one is an error). A missing or malformed file is an error naming
// the file, and the line for JSONL.
//
// "Median" is the middle value, or the mean of the two middle values for an even count.
// Steps are 1-based, as the engine numbers them. Integer args may also be given as reals
// with an integral value (2.0), as Lua may pass them. Unknown args are an error (a typo
// must not silently fall back to a default).
//
// The parsers and their exact definitions (tb_parser_definition returns these texts):
//
//   tokens_per_s       args {"warmup_steps": W = 1, "quantile": Q = 0.5}
//       Per record: for each step s > W, tokens / (t_s / 1000), with tokens = config
//       global_batch_size x seq_length (the global batch's tokens) and t_s = the slowest
//       rank's step time, max over ranks r of metrics.rank-r step_ms at step s; the
//       record's value is the median over those steps, or with Q their Q-quantile (linear
//       between order statistics: 0.05 is the slow tail). The claim's value is the median
//       over records (the repetitions). The gate (stability.h) judges the interval of the
//       step times' (1 - Q)-quantile, the same figure.
//   step_ms            args {"warmup_steps": W = 1, "quantile": Q = 0.5}
//       Per record: the median (or Q-quantile) over steps s > W of t_s (above); median over
//       records.
//   loss_at_step       args {"step": S = the last step}
//       Per record: rank 0's loss at step S; every other rank that logged step S must agree
//       within a relative 1e-6 (the loss is all-reduced). Median over records.
//   peak_memory_bytes  args {"category": C = "total"}  (params, grads, optimizer,
//                      activations, workspace, comm, total)
//       Per record: max over steps and ranks of mem_peak_bytes[C] (the allocator's peak of
//       the category; "total" is the sum of the categories' peaks). Median over records.
//   pipeline_bubble    args {"kind": "measured" (default) | "theoretical"}
//       Per record: pipeline.json measured_bubble_fraction (mean over stages of 1 − compute /
//       schedule time, mean over steps after the first) or theoretical_bubble_fraction
//       ((p − 1) / (v·m + p − 1)). Median over records.
//   stage_imbalance    args {}
//       Per record: pipeline.json stage_imbalance (slowest / fastest stage forward+backward
//       time). Median over records.
//   comm_bytes         args {"group": G (required: tp, cp, dp, dp_cp, pp, pp_grad, mp,
//                      embedding, world, ep, etp, expert_dp), "op": O = every op (all_reduce, reduce_scatter,
//                      all_gather, all_to_all, broadcast, send, recv, barrier), "step": S = the last}
//       Per record: for each rank r, the sum of args.bytes over the communicator calls of
//       trace.rank-r.json on group G (and op O) that start inside rank r's train_step range
//       of step S (rank 0's last step by default; every rank must have it). bytes is count x
//       4, the buffer each call passes (NCCL-tests' algorithm bytes; a ring all-reduce moves
//       2(n-1)/n of it per rank), so "bytes all-reduced per rank per step by the TP group" is
//       {"group": "tp", "op": "all_reduce"}. The record's value is the max over ranks (the
//       busiest rank; evidence "per_rank" lists each). Calls outside train_step (the
//       slowest-rank reduction of the step time, the end-of-run gathers) are not the step's.
//       Median over records. Exact: not gated by the measurement conditions.
//   rank_figure        args {"figure": F (required: parameters, layers, flops_per_step,
//                      peak_activation_bytes), "rank": R | "of": "max" (default) | "min" | "sum"}
//       Per record: pipeline.json ranks[R].F — what rank R holds and computes, its
//       tensor-parallel shard (flops_per_step: 6 x its parameters + 12 x its layers x
//       hidden / tp x seq per token, over the step's microbatches) — or that reduced over
//       every rank. pipeline.json must list as many ranks as config world_size. Median over
//       records. Exact.
//   stage_figure       args {"figure": F (as rank_figure's), "stage": S | "of": "max" (default)
//                      | "min" | "sum"}
//       Per record: pipeline.json stages[S].F (the stage's rank with rank 0's tp, cp and dp
//       coordinates), or that reduced over every stage; as many stages as config
//       pipeline_model_parallel_size. For an exact stage imbalance: ratio of
//       {"figure": "flops_per_step", "of": "max"} over the same with "min". Median over
//       records. Exact.
//   step_phase         args {"phase": P (required: data, forward, backward, optimizer, p2p_wait,
//                      idle, exposed_comm), "rank": R = each step's slowest, "warmup_steps": W = 1}
//       Per record: for each step s > W of rank 0's metrics, rank r = R, or the rank with the
//       largest step_ms at s (the lowest such rank); the step's value is metrics.rank-r
//       pipeline.<P>_ms at s (exposed_comm: the communication the step waited for, not hidden
//       under compute). The record's value is the median over those steps; median over
//       records. Timed: gated.
//   collective_figure  args {"group": G (required: tp, cp, dp, dp_cp, pp_grad, mp, embedding,
//                      world), "op": O = every op, "in": RANGE = any, "figure": F =
//                      "enter_spread_ms", "warmup_steps": W = 1}
//       Per record: the collective calls of G (and O) inside the steps s > W, each matched
//       across the group's members by (group id, sequence number) from every rank's trace
//       (step_report.h, tracebook comm; P2P is left out), those whose last member called it
//       inside RANGE (e.g. finalize_model_grads.all_reduce) when given. F: enter_spread_ms (the
//       median over the calls of the last member's enter - the first's), max_enter_spread_ms,
//       transfer_ms (the median over the calls of the longest member's exit - the last enter),
//       last_rank (the rank last in the most calls; the lowest such rank) or last_rank_share
//       (the share of the calls it was last in). Median over records. Timed (an order in time
//       too): gated.
//   oom_figure         args {"figure": F (required), "rank": R, "requested_category": C,
//                      "in": RANGE, "category": K = "total"}
//       Per record: the oom.rank-r.json parts of the run directory (one per rank that ran out
//       of memory; r within config world_size; an unreadable one is an error), those of rank
//       R, whose request over the cap was in category C, and whose range stack holds RANGE,
//       when given. F: ranks (how many match; 0 when no rank ran out), or of the lowest
//       matching rank (an error when none): rank, step, microbatch, requested_bytes,
//       cap_bytes, in_use_bytes (current.total: allocated when it asked), current_bytes or
//       peak_bytes of K. Median over records. Exact.
//   hang_figure        args {"figure": F (required: blamed_rank, blamed_ranks, stuck_ranks,
//                      absent_ranks)}
//       Per record: the hang report merged at prove time from every hang.rank-r.json part
//       (core/failure_report.h's tb_hang_report_merge, as tracebook hang merges them; no part
//       is an error): blamed_rank, the one rank of its root_cause (an error unless exactly one),
//       blamed_ranks (how many root_cause names), stuck_ranks, absent_ranks (ranks that wrote
//       no part). Median over records. Exact: matched by sequence numbers.
//   first_divergence   args {"a": RECORD = 0, "b": RECORD = 1, "step": S = the first dumped,
//                      "tolerance": T = 1e-5}
//       Of two of the claim's records (a 0-based index into its runs, or a run id): the
//       1-based position, in the step's order, of the first tensor of run/tensors/step-S.*
//       (--dump-tensors) where b diverges from a, max |a - b| > T x max |b|, by tracebook
//       bisect's comparison (bisect.h); 0 when none does. The order: forward (fwd/embedding;
//       per layer l fwd/layer.l.attention, .mlp, fwd/layer.l; fwd/loss), backward (the
//       gradients, last layer first), optimizer (the parameters after the step). Both runs
//       must dump the same tensors (a tensor in one only is an error: "no divergence" over a
//       partial comparison would not be true). Exact.
//   ratio              args {"numerator": PART, "denominator": PART}
//       numerator value / denominator value, each PART {"parser": NAME, "args": {...},
//       "records": [0-based index into the claim's runs | run id, ...]} (records: default
//       all of the claim's runs) evaluated as a claim of its own. For speed-ups:
//       {"numerator": tokens_per_s of the new runs, "denominator": the same of the old}.
//   saved_fraction     args {"treatment": PART, "baseline": PART}  ("numerator" /
//                      "denominator" are accepted for treatment / baseline)
//       1 − treatment value / baseline value. For "recompute saved 78% of activation
//       memory": peak_memory_bytes {"category": "activations"} with and without recompute.
//   relative_difference  args {"a": PART, "b": PART}
//       |a value − b value| / |b value| (b value = 0: |a value − b value|), each PART as
//       ratio's, both derived from their records at prove time (a or b not finite is an
//       error). For "the loss is unchanged by recompute" with claims.json "at_most": 0:
//       {"a": loss_at_step of the recompute run, "b": the same of the run without}.
//   replayed           args {"figure": F (required: step_ms, tokens_per_s, bubble_fraction,
//                      stage_imbalance, exposed_comm_ms), "warmup_steps": W = 1}
//       Per record: every step s > W replayed on one core per rank from the thread CPU time
//       each rank's trace records per op (schedule_replay.h: the model, what it leaves out,
//       what it refuses); F of each replayed step — the slowest rank's replayed step time,
//       global_batch_size x seq_length / it, the mean over pipeline.json's stages of 1 −
//       replayed compute / replayed schedule span, slowest / fastest stage compute, or the
//       slowest rank's communicator calls in finalize_model_grads and optimizer with their
//       waits — and the record's value is the median over those steps. Median over records.
//       Timed, and sampled on the replayed step times; the oversubscription gate does not
//       apply (the replay gives each rank a core), the contention gates do.
//   resumed_loss_mismatches  args {}
//       The claim's records in order: a run trained uninterrupted, then the segments (at
//       least two) of the same run interrupted and resumed (runbooks/soak.lua). The first
//       segment starts as the uninterrupted run did (the same config load); each but the last
//       stops before the uninterrupted run's last step; each later one loads the directory the
//       segment before it saved into (config save, inside that segment's record: the
//       checkpoint it resumed from is one of the record's hashed files) and logs no step 1 (it
//       resumed, not trained from scratch). The configs may
//       differ only in run_dir, load, save, save_interval, exit_interval, async_save. Every
//       row every rank of a segment logged is compared with the uninterrupted run's rank r at
//       that step: the loss bit for bit (both absent counts as equal); a step the
//       uninterrupted run did not train, or a step of it no segment logged, is an error. The
//       value is the number of rows that differ: 0 is a bitwise resume. Exact.
//   memory_growth_bytes  args {"category": C = "every" (params, grads, optimizer,
//                        activations, workspace, comm, total, total_peak; "every": each but
//                        total), "warmup_steps": W = 1}
//       Per record, rank r and category c: metrics.rank-r mem_peak_bytes[c]
//       (mem_total_peak_bytes for total_peak) at the record's last logged step minus at its
//       W-th logged step. The allocator's high-water is a running maximum since the process
//       started (engine/runtime/memory.h), so this is how far it rose after the warm-up: a
//       leak, a buffer that a save keeps. The value is the max over records, ranks and
//       categories (evidence "worst" names them). Exact.
#ifndef TB_EXPERIMENTS_PARSERS_H
#define TB_EXPERIMENTS_PARSERS_H

#include <jansson.h>

#include "core/error.h"

// Derives a claim's value from its records (record directories, as
// artifacts/<experiment>/v<version>/<run-id>) with the named parser. args may be NULL (all
// defaults). On success *value is set and, when evidence is not NULL, *evidence is a new
// JSON object (the caller decrefs it):
//   {"parser", "definition", "args", "value", "min", "median", "max" (over records),
//    "records": [{"run_id", "record_dir", "value", "files": [paths read], ...parser's
//                 details: "steps_used" {"first","last","count"}, "per_step" {"min",
//                 "median","max"}, "tokens_per_step", "tokens_formula", "rank_of_peak",
//                 "step_of_peak", ...}]}
// and for ratio / saved_fraction {"parser", "definition", "value", "numerator"|"treatment":
// evidence, "denominator"|"baseline": evidence}; for relative_difference {"parser",
// "definition", "value", "a_value", "b_value", "a": evidence, "b": evidence}.
int tb_parse_claim(const char *parser, json_t *args, const char *const *record_dirs, int nrecords, double *value,
                   json_t **evidence, tb_error *err);

// The exact definition of a parser (the text above, one paragraph), or NULL when there is
// no parser of that name.
const char *tb_parser_definition(const char *parser);

// Whether the number the parser gives with these args is derived from time, which prove's
// stability gate judges (stability.h): 1, or 0 for an exact one, a combination (ratio,
// saved_fraction, relative_difference: their parts are judged) or no parser of that name.
int tb_parser_timed(const char *parser, json_t *args);
// Whether the parser's time is replayed from per-op CPU time (replayed: the gate samples the
// replayed step times and does not apply the oversubscription gate): 1, else 0.
int tb_parser_replayed(const char *parser);

// The parsers' names, NULL-terminated.
extern const char *const tb_parser_names[];

// The median of n values (n > 0; values is sorted in place).
double tb_median(double *values, int n);

// t_s of a record for its steps s > warmup, as tokens_per_s and step_ms use them (the
// slowest rank's step_ms at each step, in step order): *times is malloc'd, *n its count.
int tb_slowest_step_ms(const char *record_dir, long long warmup, double **times, int *n, tb_error *err);

#endif
