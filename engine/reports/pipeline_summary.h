// pipeline_summary.h — pipeline.json (written by rank 0 after training): for each stage its
// parameters, layers, FLOPs per step, peak activation memory and mean times; the measured
// bubble next to the theoretical one; the stage imbalance (slowest / fastest stage compute
// time); and for every rank ("ranks") its coordinates and the same exact figures — what it
// holds and computes, which under tensor parallelism is its shard. Also each step's
// per-stage timeline in the metrics line.
#ifndef TB_REPORTS_PIPELINE_SUMMARY_H
#define TB_REPORTS_PIPELINE_SUMMARY_H

#include <jansson.h>
#include <stdint.h>

#include "config/config.h"
#include "core/error.h"
#include "pipeline_parallel/schedules.h"

struct tb_rank;

// Sums of a stage's timelines over the steps that count (all but the first, unless there is
// only one).
typedef struct stage_totals {
    int64_t steps;
    double forward_ms, backward_ms, p2p_ms, optimizer_ms, pipeline_ms, step_ms;
} stage_totals;

void stage_totals_add(stage_totals *s, const tb_step_timeline *t, double step_ms);

// What a rank holds and computes (its stage's chunks, its tensor-parallel share): exact counts.
typedef struct stage_figures {
    int64_t parameters;          // in this rank's chunks
    int64_t layers;
    double flops_per_step;       // model FLOPs of the rank's chunks over the step's microbatches
                                 // (gpt_chunk_flops_per_token)
    int64_t peak_activation_bytes;
} stage_figures;

// One step on this rank: where the time went, and the measured bubble — the share of the
// forward/backward schedule this stage spent not computing ("pipeline" of a metrics line).
json_t *pipeline_timeline_json(const tb_config *cfg, int stage, int chunks, const tb_step_timeline *t, double step_ms);

// Every rank takes part (a gather over the world); rank 0 writes pipeline.json and,
// with pp > 1, prints the one-line summary.
int pipeline_summary_write(struct tb_rank *rk, const tb_config *cfg, const stage_figures *mine, const stage_totals *t,
                           tb_error *err);

#endif
