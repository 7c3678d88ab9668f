// metrics_log.h — the per-step record of a rank and rank 0's console.
//
// metrics.rank-NNNNN.jsonl gets one JSON line per step, flushed as written, so a run that
// dies keeps every finished step: step, loss, lr, grad_norm, step_ms, tokens,
// tokens_per_s, tflops, mfu (null without --peak-tflops), mem_peak_bytes by category,
// mem_total_peak_bytes, slowest_rank_step_ms, the stage's timeline ("pipeline") and the
// step's measurement conditions ("conditions": CPU time of the process, of the host's other
// processes, steal) and, with experts, each MoE layer's load ("moe": tokens per expert, the
// busiest expert over the mean, the load-balancing loss).
// Rank 0 prints the run's header, a table line every --log-interval steps and a footer.
#ifndef TB_REPORTS_METRICS_LOG_H
#define TB_REPORTS_METRICS_LOG_H

#include <jansson.h>
#include <stdint.h>
#include <stdio.h>

#include "config/config.h"
#include "core/error.h"
#include "runtime/memory.h"
#include "models/gpt.h"

struct tb_rank;

typedef struct step_metrics {
    int64_t step;
    double loss, lr, grad_norm;
    double step_ms;               // this rank's
    double slowest_rank_step_ms;  // the world's slowest, which sets throughput
    double tokens_per_s, tflops, mfu;
    double loss_scale;            // --fp16: the step's loss scale (written only with --fp16)
    int skipped;                  // --fp16: the update was skipped (the gradients overflowed)
} step_metrics;

typedef struct metrics_log {
    FILE *f;
    char path[TB_PATH_MAX + 64];
} metrics_log;

int metrics_log_open(metrics_log *log, const char *run_dir, int rank, tb_error *err);
// One line: the step's figures, the allocator's peaks, `pipeline` (the stage timeline) and
// `conditions` (reports/conditions.h), both taken over.
// moe: the MoE layers' load statistics (transformer/moe/moe_layer.h), taken over; NULL without experts.
int metrics_log_write(metrics_log *log, const step_metrics *s, const tb_config *cfg, const tb_allocator *mem,
                      json_t *pipeline, json_t *conditions, json_t *moe, tb_error *err);
int metrics_log_close(metrics_log *log, tb_error *err);

// rank 0's console
void print_run_header(const tb_config *cfg, const gpt_model *m, const char *run_dir);
void print_step_line(const step_metrics *s);
void print_run_footer(const struct tb_rank *rk);

#endif
