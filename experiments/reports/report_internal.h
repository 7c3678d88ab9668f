// report_internal.h — what the parts of `tracebook report` share (report.c gathers,
// report_sections.c writes the claims and the runs, report_figures.c chooses and draws the
// plots). Not an interface beyond them: report.h is.
#ifndef TB_EXPERIMENTS_REPORT_INTERNAL_H
#define TB_EXPERIMENTS_REPORT_INTERNAL_H

#include <jansson.h>

#include "core/error.h"
#include "reports/report_html.h"

#define REPORT_PATH_MAX 4096
#define REPORT_MEM_CATEGORIES 7
#define REPORT_LABEL_MAX 40  // a run's label on a plot's axis: its config differences, or "config N"
// engine/runtime/memory.h's categories, in its order (memory.rank-NNNNN.json keys)
// (a snapshot older than a category reads as 0 bytes of it)
static const char *const report_mem_categories[REPORT_MEM_CATEGORIES] = {
    "params", "grads", "optimizer", "activations", "workspace", "comm", "gathered"};

typedef struct report_run {
    char id[256], record_dir[REPORT_PATH_MAX], run_dir[REPORT_PATH_MAX], status[32], label[512];
    json_t *manifest, *config, *flat;  // flat: config flattened to dotted keys (catalog.h)
    int repetition, group;              // group: runs of one config share it (repetitions); 0-based
    int world, tp, pp, cp;
    long long seq, microbatches;
    // by the claim parsers' definitions (parsers.h), NAN when they do not derive
    double tokens_per_s, step_ms, final_loss, peak_bytes, activation_bytes, bubble, theoretical_bubble;
    double *loss_step, *loss;  // rank 0's loss per step
    int nloss;
    // rank 0's throughput and allocator high-water (mem_total_peak_bytes) per step, over time
    double *series_step, *tokens_per_s_at, *high_water_at;
    int nseries;
    json_t *moe;               // rank 0's MoE load statistics of its last step (metrics "moe"), or NULL
    long long moe_step;
    int memory_rank;  // the rank of the largest total peak (memory.rank-NNNNN.json), -1: none
    double memory_total, memory[REPORT_MEM_CATEGORIES];
} report_run;

typedef struct report {
    char version_dir[REPORT_PATH_MAX], artifacts[REPORT_PATH_MAX], experiment[256];
    char link_prefix[REPORT_PATH_MAX];  // the version directory relative to the page ("" when the same)
    long long version;
    json_t *status;     // experiment.json, or NULL
    json_t *proof;      // tb_prove_collect's document (prove.h)
    json_t *differing;  // config keys that differ between the runs
    report_run *runs;
    int nruns, ngroups;
} report;

// A link to a file of the version directory (record_relative: "<run-id>/run/..."), relative
// to the page.
void report_href(const report *rp, const char *record_relative, char *out, size_t size);

void report_write_claims(tb_html *h, const report *rp);
void report_write_runs(tb_html *h, const report *rp);
// The plots the runs hold data for; 0, or -1 with err set when gnuplot fails.
int report_write_plots(tb_html *h, const report *rp, tb_error *err);

#endif
