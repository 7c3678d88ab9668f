// parsers.c — the claim parsers' registry and driver (parsers.h has each one's exact
// definition; parsers_internal.h the parts' shared interface).
//
// Every simple parser is a per-record function over one record's run directory (metrics and
// timing: parsers_metrics.c; traces: parsers_comm.c; pipeline.json: parsers_pipeline.c;
// checkpoint.json: parsers_checkpoint.c); the driver (parse_over_records) runs it on each
// record and takes the median over records. ratio, saved_fraction and relative_difference
// combine two sub-claims (parsers_combine.c). A record's files are read fresh on each call:
// the point of a parser is that its number comes from the raw files.
#include "prove/parsers.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/xalloc.h"
#include "prove/parsers_internal.h"

// ---------------------------------------------------------------------------------------
// Definitions

static const char *const step_time_args[] = {"warmup_steps", "quantile", NULL};
static const char *const step_args[] = {"step", NULL};
static const char *const category_args[] = {"category", NULL};
static const char *const kind_args[] = {"kind", NULL};
static const char *const no_args[] = {NULL};
static const char *const ratio_args[] = {"numerator", "denominator", NULL};
static const char *const saved_args[] = {"treatment", "baseline", "numerator", "denominator", NULL};
static const char *const difference_args[] = {"a", "b", NULL};
static const char *const comm_args[] = {"group", "op", "step", NULL};
static const char *const rank_figure_args[] = {"figure", "rank", "of", NULL};
static const char *const stage_figure_args[] = {"figure", "stage", "of", NULL};
static const char *const checkpoint_args[] = {"figure", "save", "of", NULL};
static const char *const step_phase_args[] = {"phase", "rank", "warmup_steps", NULL};
static const char *const collective_args[] = {"group", "op", "in", "figure", "warmup_steps", NULL};
static const char *const oom_args[] = {"figure", "rank", "requested_category", "in", "category", NULL};
static const char *const hang_args[] = {"figure", NULL};
static const char *const divergence_args[] = {"a", "b", "step", "tolerance", NULL};
static const char *const moe_figure_args[] = {"figure", "layer", "step", "rank", "of", NULL};
static const char *const replayed_args[] = {"figure", "warmup_steps", NULL};
static const char *const growth_args[] = {"category", "warmup_steps", NULL};

// Which claims are timed (stability.h): these read a time, or an order in time.
static int always_timed(json_t *args) {
    (void)args;
    return 1;
}
static int bubble_timed(json_t *args) {  // the theoretical bubble is arithmetic on the config
    const char *kind = json_string_value(json_object_get(args, "kind"));
    return !kind || strcmp(kind, "theoretical") != 0;
}
static int checkpoint_timed(json_t *args) {  // the byte counts are exact; the rest are times
    const char *figure = json_string_value(json_object_get(args, "figure"));
    return !figure || (strcmp(figure, "materialized_bytes") != 0 && strcmp(figure, "written_bytes") != 0);
}
// --- the planner's parser (parsers_plan.c, issue 16): one entry below and one name ---
#include "prove/parsers_plan.h"
static int plan_figure_record(const parser *p, json_t *args, const char *dir, double *v, json_t *ev, tb_error *err) {
    (void)p;
    return tb_plan_figure_record(args, dir, v, ev, err);
}
// --- end of the planner's parser ---

static const parser parsers[] = {
    {"tokens_per_s",
     "per record: for each step s > warmup_steps (default 1), tokens / (t_s / 1000) with tokens = config "
     "global_batch_size x seq_length and t_s = max over ranks of metrics.rank-r step_ms at step s (the slowest "
     "rank); the record's value is the median over those steps (args.quantile q: their q-quantile, linear "
     "between order statistics, so 0.05 is the slow tail); the claim's value is the median over records",
     step_time_args, tbp_tokens_per_s_record, NULL, always_timed},
    {"step_ms",
     "per record: the median (args.quantile q: the q-quantile) over steps s > warmup_steps (default 1) of t_s = "
     "max over ranks of metrics.rank-r step_ms at step s (the slowest rank); median over records",
     step_time_args, tbp_step_ms_record, NULL, always_timed},
    {"loss_at_step",
     "per record: rank 0's loss at args.step (default the last step); every other rank that logged that step "
     "must agree within a relative 1e-6; median over records",
     step_args, tbp_loss_at_step_record, NULL, NULL},
    {"peak_memory_bytes",
     "per record: max over steps and ranks of metrics mem_peak_bytes[category] (default \"total\", the sum of "
     "the categories' peaks; \"total_peak\" reads mem_total_peak_bytes, the most in use at once); median over "
     "records",
     category_args, tbp_peak_memory_record, NULL, NULL},
    {"pipeline_bubble",
     "per record: pipeline.json measured_bubble_fraction (args.kind \"measured\", the default: mean over stages "
     "of 1 - compute / schedule time, mean over steps after the first) or theoretical_bubble_fraction "
     "(\"theoretical\": (p - 1) / (v m + p - 1)); median over records",
     kind_args, tbp_pipeline_record, NULL, bubble_timed},
    {"stage_imbalance",
     "per record: pipeline.json stage_imbalance (slowest / fastest stage forward+backward time, mean over steps "
     "after the first); median over records",
     no_args, tbp_pipeline_record, NULL, always_timed},
    {"comm_bytes",
     "per record: for each rank r of config world_size, the sum of args.bytes (count x 4: the buffer each call "
     "passes, not a ring's bus bytes) of the communicator calls in trace.rank-r.json on args.group (required: "
     "tp, cp, dp, dp_cp, pp, pp_grad, mp, embedding, world, ep, etp, expert_dp) with args.op (default every op) that start inside "
     "rank r's train_step range of args.step (default the last step); the record's value is the max over ranks "
     "(the busiest rank); median over records",
     comm_args, tbp_comm_bytes_record, NULL, NULL},
    {"rank_figure",
     "per record: pipeline.json ranks[args.rank].<args.figure> (parameters, layers, flops_per_step, "
     "peak_activation_bytes: what the rank holds and computes, its tensor-parallel shard), or with args.of "
     "\"max\" (the default when no rank is given), \"min\" or \"sum\" that over every rank (as many as config "
     "world_size); median over records",
     rank_figure_args, tbp_figure_record, NULL, NULL},
    {"stage_figure",
     "per record: pipeline.json stages[args.stage].<args.figure> (parameters, layers, flops_per_step, "
     "peak_activation_bytes of the stage's rank with rank 0's tp, cp and dp coordinates), or with args.of "
     "\"max\" (the default when no stage is given), \"min\" or \"sum\" that over every stage (as many as "
     "config pipeline_model_parallel_size); median over records",
     stage_figure_args, tbp_figure_record, NULL, NULL},
    {"checkpoint_figure",
     "per record: checkpoint.json saves[args.save - 1] (1-based; default the last save): args.figure "
     "materialized_bytes (the state the ranks listed to save, summed over ranks: exact), written_bytes (their "
     "shard files, summed: exact), last_arriver (the rank last at the barrier), waited_for_ms (how long after the "
     "first), max_stall_ms (what training waited, the worst rank), total_ms or stall_fraction (max_stall_ms / "
     "total_ms); or with args.of \"max\", \"min\" or \"median\" (not with args.save) that figure over every save "
     "(each save's in the evidence; not last_arriver, a rank); median over records",
     checkpoint_args, tbp_checkpoint_record, NULL, checkpoint_timed},
    {"step_phase",
     "per record: for each step s > warmup_steps (default 1) of rank 0's metrics, the rank r = args.rank, or "
     "(the default) the slowest rank at s (the largest metrics step_ms; the lowest such rank); the step's value "
     "is metrics.rank-r pipeline.<args.phase>_ms at s, args.phase (required) one of data, forward, backward, "
     "optimizer, p2p_wait, idle, exposed_comm (communication the step waited for: not hidden under compute); "
     "the record's value is the median over those steps; median over records",
     step_phase_args, tbp_step_phase_record, NULL, always_timed},
    {"collective_figure",
     "per record: the collective calls of args.group (required: tp, cp, dp, dp_cp, pp_grad, mp, embedding, "
     "world; P2P is left out), args.op (default every op) and args.in (default any: the range the last member "
     "called it in, e.g. finalize_model_grads.all_reduce) inside the steps s > warmup_steps (default 1), "
     "each matched across the group's members by (group id, sequence number) from every trace.rank-r.json "
     "(tracebook comm): args.figure enter_spread_ms (the default: the median over the calls of the last "
     "member's enter - the first member's), max_enter_spread_ms, transfer_ms (the median over the calls of the "
     "longest member's exit - the last enter: the transfer once every member is in), last_rank (the rank that "
     "entered last in the most calls; the lowest such rank) or last_rank_share (the share of the calls it "
     "entered last); median over records",
     collective_args, tbp_collective_record, NULL, always_timed},
    {"oom_figure",
     "per record: the ranks that ran out of memory, one oom.rank-r.json each (a rank of config world_size; "
     "run/oom.json is their merge), those matching args.rank, args.requested_category (the category of the "
     "request over the cap: params, grads, optimizer, activations, workspace, comm) and args.in (a range on the "
     "range stack at the request, e.g. forward) when given; args.figure ranks (how many match: 0 when none ran "
     "out), or of the lowest matching rank: rank, step, microbatch, requested_bytes, cap_bytes, in_use_bytes "
     "(allocated when it asked), current_bytes or peak_bytes of args.category (default total); median over "
     "records. Exact",
     oom_args, tbp_oom_record, NULL, NULL},
    {"hang_figure",
     "per record: the hang report merged at prove time from every hang.rank-r.json of the run directory "
     "(core/failure_report.h, as tracebook hang merges them): args.figure blamed_rank (the one rank of its root "
     "cause: the rank that never entered the collective its peers wait in, or entered a mismatched one; an "
     "error unless exactly one is named), blamed_ranks (how many the root cause names), stuck_ranks (the ranks "
     "waiting in a call), absent_ranks (the ranks that wrote no part); median over records. Exact: matched by "
     "sequence numbers, whichever watchdog fired first",
     hang_args, tbp_hang_record, NULL, NULL},
    {"first_divergence",
     "the first tensor at which run b's dumped tensors (--dump-tensors, tensors/step-<args.step>.rank-r."
     "safetensors; default step: the first dumped) diverge from run a's, as tracebook bisect finds it: the "
     "tensors both hold, in the step's order (forward: embedding, per layer attention, mlp, output, then loss; "
     "backward: the gradients, last layer first; optimizer: the parameters after the step), a tensor diverging "
     "when max |a - b| > args.tolerance (default 1e-5) x max |b|; the value is its 1-based position in that "
     "order, 0 when none diverges; args.a and args.b (0-based index into the claim's runs or run id; default 0 "
     "and 1) choose the two records; both must dump the same tensors (one in one run only is an error). Exact",
     divergence_args, NULL, tbp_first_divergence_combine, NULL},
    {"ratio",
     "numerator / denominator, each {parser, args, records: [0-based index into the claim's runs | run id]} "
     "(records default: all the claim's runs) derived as a claim of its own",
     ratio_args, NULL, tbp_ratio_combine, NULL},
    {"saved_fraction",
     "1 - treatment / baseline, each {parser, args, records: [0-based index into the claim's runs | run id]} "
     "(records default: all the claim's runs; numerator/denominator accepted for treatment/baseline)",
     saved_args, NULL, tbp_ratio_combine, NULL},
    {"relative_difference",
     "|a - b| / |b| (|a - b| when b is 0), each {parser, args, records: [0-based index into the claim's runs | run "
     "id]} (records default: all the claim's runs) derived as a claim of its own; both are read from the records "
     "at prove time, so neither side is a number the runbook states",
     difference_args, NULL, tbp_difference_combine, NULL},
    {"moe_figure",
     "per record: for each rank r of config world_size holding MoE layer args.layer (default the first MoE layer of the first rank read: rank 0, or args.rank), "
     "the layer's entry in the \"moe\" array of metrics.rank-r.jsonl at args.step (default the last step): "
     "args.figure expert_rows_mean (the rows M of the rank's expert GEMMs per local expert per microbatch, "
     "after the expert-tensor-parallel gather, padding included), expert_rows_max (the busiest local expert's), "
     "local_experts, fc1_n, fc1_k, fc2_n, fc2_k (the N and K of each expert's linear on the rank: its etp "
     "shard), max_over_mean, routed_tokens, dropped_tokens or a2a_bytes; that of args.rank, or with args.of "
     "\"max\" (the default), \"min\" or \"sum\" over the ranks holding the layer; median over records",
     moe_figure_args, tbp_moe_figure_record, NULL, NULL},
    {"plan_figure", TB_PLAN_FIGURE_DEFINITION, tb_plan_figure_args, plan_figure_record, NULL, NULL},  // parsers_plan.c
    {"replayed",
     "per record: every step s > warmup_steps (default 1) replayed on one core per rank from the thread CPU time "
     "each rank's trace.rank-r.json records per op (tts/tdur): a rank's work between communicator calls takes the "
     "CPU time recorded between them, a collective starts when its last member enters (matched by its order among "
     "the member's collectives on the group), a send is eager and the k-th recv from a peer waits for the k-th send, "
     "and --overlap-grad-reduce's communication thread runs on a core of its own, each bucket no earlier than the "
     "rank thread queued it, finish_grad_sync waiting for the last (schedule_replay.h); args.figure (required) "
     "step_ms (the slowest rank's replayed train_step), tokens_per_s "
     "(global_batch_size x seq_length / step_ms), bubble_fraction (mean over pipeline.json's stages of 1 - replayed "
     "forward+backward / replayed schedule span), stage_imbalance (slowest / fastest stage replayed compute) or "
     "exposed_comm_ms (the slowest rank's calls in finalize_model_grads and optimizer and its finish_grad_sync, "
     "waits included); the "
     "record's value is the median over those steps; median over records. Not modelled: caches and memory "
     "bandwidth shared between cores, transfers beyond the calls' own CPU time; refused: sleeps (the slow drills), "
     "--overlap-param-gather, worker threads of a rank, other background threads, a device",
     replayed_args, tbp_replayed_record, NULL, always_timed},  // parsers_replay.c
    {"resumed_loss_mismatches",
     "the claim's first record is a run trained uninterrupted, the others in order the segments (at least two) of "
     "the same run interrupted and resumed: the first segment starts as the uninterrupted run did, each but the last "
     "stops before its last step, each later one loads (config load) the directory the segment before it saved into "
     "(config save, inside that segment's record) and starts after step 1; "
     "the configs may differ only in run_dir, load, save, save_interval, exit_interval and async_save. Every "
     "loss every rank of a segment logged (metrics.rank-r.jsonl) is compared bit for bit with the uninterrupted "
     "run's rank r at that step, and every step of the uninterrupted run must be logged by a segment; the value "
     "is the number of segment rows whose loss differs (0: the resumes trained the same bits). Exact",
     no_args, NULL, tbp_resumed_loss_combine, NULL},  // parsers_resume.c
    {"memory_growth_bytes",
     "per record, rank r and category c (args.category: params, grads, optimizer, activations, workspace, comm, "
     "total or total_peak; default \"every\": each of them but total), metrics.rank-r mem_peak_bytes[c] "
     "(mem_total_peak_bytes for total_peak) at the record's last logged step minus at its args.warmup_steps-th "
     "logged step (default 1): the allocator's high-water is a running maximum since the process started, so "
     "this is how far it rose after the warm-up; the value is the max over records, ranks and categories. "
     "Exact",
     growth_args, NULL, tbp_memory_growth_combine, NULL},  // parsers_resume.c
};
#define NPARSERS ((int)(sizeof parsers / sizeof *parsers))

const char *const tb_parser_names[] = {"tokens_per_s",    "step_ms",         "loss_at_step", "peak_memory_bytes",
                                       "pipeline_bubble", "stage_imbalance", "comm_bytes",   "rank_figure",
                                       "stage_figure",    "checkpoint_figure", "step_phase", "collective_figure",
                                       "oom_figure",      "hang_figure",     "first_divergence", "ratio",
                                       "saved_fraction",  "relative_difference", "plan_figure", "moe_figure", "replayed",
                                       "resumed_loss_mismatches", "memory_growth_bytes", NULL};

static const parser *find_parser(const char *name) {
    for (int i = 0; name && i < NPARSERS; i++)
        if (!strcmp(parsers[i].name, name)) return &parsers[i];
    return NULL;
}

const char *tb_parser_definition(const char *name) {
    const parser *p = find_parser(name);
    return p ? p->definition : NULL;
}

int tb_parser_timed(const char *name, json_t *args) {
    const parser *p = find_parser(name);
    return p && p->timed && p->timed(args);
}

int tb_parser_replayed(const char *name) {
    const parser *p = find_parser(name);
    return p && p->per_record == tbp_replayed_record;
}

// ---------------------------------------------------------------------------------------
// The driver and the combinations

static int check_args(const parser *p, json_t *args, tb_error *err) {
    if (!args || json_is_null(args)) return 0;
    if (!json_is_object(args)) return tb_fail(err, "parser %s: args must be a JSON object", p->name);
    const char *key;
    json_t *v;
    json_object_foreach(args, key, v) {
        int known = 0;
        for (const char *const *a = p->arg_names; *a; a++) known |= !strcmp(*a, key);
        if (!known) {
            char list[256] = "";
            size_t used = 0;
            for (const char *const *a = p->arg_names; *a && used < sizeof list; a++) {
                int w = snprintf(list + used, sizeof list - used, "%s%s", used ? ", " : "", *a);
                if (w < 0) break;
                used += (size_t)w;
            }
            return tb_fail(err, "parser %s: unknown args.%s (known: %s)", p->name, key, used ? list : "none");
        }
    }
    return 0;
}

static int parse_over_records(const parser *p, json_t *args, const char *const *dirs, int n, double *value,
                              json_t **evidence, tb_error *err) {
    double *values = tb_xcalloc((size_t)n, sizeof *values, "per-record values");
    json_t *records = json_array();
    int rc = 0;
    for (int i = 0; i < n && rc == 0; i++) {
        json_t *ev = json_object();
        char run_id[256];
        json_object_set_new(ev, "run_id", json_string(tbp_base_name(dirs[i], run_id, sizeof run_id)));
        json_object_set_new(ev, "record_dir", json_string(dirs[i]));
        if (p->per_record(p, args, dirs[i], &values[i], ev, err) != 0) {
            rc = tb_fail_prefix(err, "parser %s, record %s", p->name, dirs[i]);
            json_decref(ev);
            break;
        }
        json_object_set_new(ev, "value", json_real(values[i]));
        json_array_append_new(records, ev);
    }
    if (rc == 0) {
        json_t *s = tbp_summary_json(values, n);
        *value = json_real_value(json_object_get(s, "median"));
        if (evidence) {
            *evidence = json_pack("{s:s, s:s, s:O, s:f, s:o, s:o}", "parser", p->name, "definition", p->definition,
                                  "args", args ? args : json_null(), "value", *value, "over_records", s, "records",
                                  records);
            records = NULL;
        } else {
            json_decref(s);
        }
    }
    json_decref(records);
    free(values);
    return rc;
}
int tb_parse_claim(const char *name, json_t *args, const char *const *record_dirs, int nrecords, double *value,
                   json_t **evidence, tb_error *err) {
    if (evidence) *evidence = NULL;
    const parser *p = find_parser(name);
    if (!p) {
        char known[512] = "";
        size_t used = 0;
        for (int i = 0; i < NPARSERS; i++) {
            int w = snprintf(known + used, sizeof known - used, "%s%s", i ? ", " : "", parsers[i].name);
            if (w < 0 || (size_t)w >= sizeof known - used) break;
            used += (size_t)w;
        }
        return tb_fail(err, "unknown parser '%s' (parsers: %s)", name ? name : "(null)", known);
    }
    if (nrecords <= 0) return tb_fail(err, "parser %s: no records to derive from", p->name);
    if (check_args(p, args, err) != 0) return -1;
    if (p->combine) return p->combine(p, args, record_dirs, nrecords, value, evidence, err);
    return parse_over_records(p, args, record_dirs, nrecords, value, evidence, err);
}
