// parsers_internal.h — what the claim parsers' files share (parsers.c: the registry and the
// driver; parsers_*.c: the parsers by the files they read). Not an interface beyond them:
// parsers.h is the parsers' contract.
#ifndef TB_EXPERIMENTS_PARSERS_INTERNAL_H
#define TB_EXPERIMENTS_PARSERS_INTERNAL_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "core/error.h"
#include "core/run_dir.h"
#include "prove/parsers.h"

#define REC_PATH_MAX 4096

typedef struct parser parser;
// A per-record parser: the record's value into *value, its details into ev (an object that
// already holds run_id and record_dir).
typedef int (*record_fn)(const parser *p, json_t *args, const char *record_dir, double *value, json_t *ev,
                         tb_error *err);
// A combination of sub-claims over the claim's records.
typedef int (*combine_fn)(const parser *p, json_t *args, const char *const *dirs, int n, double *value,
                          json_t **evidence, tb_error *err);

struct parser {
    const char *name;
    const char *definition;
    const char *const *arg_names;  // the args it accepts (NULL-terminated)
    record_fn per_record;          // a per-record parser (median over records), or
    combine_fn combine;            // a combination of sub-claims
    // whether the number its args give is derived from time (prove's stability gate,
    // stability.h); NULL: never (an exact parser, or a combination, whose parts are judged)
    int (*timed)(json_t *args);
};

// ---- helpers (parsers_util.c)

// min / median / max / count of n values, as a JSON object (values is sorted in place).
json_t *tbp_summary_json(double *v, int n);
// The last component of a path (a record directory's run id), into out.
const char *tbp_base_name(const char *path, char *out, size_t size);
// <record>/run/<file>: a file of the engine's run directory inside a record.
int tbp_run_path(char *out, size_t size, const char *record_dir, const char *file, tb_error *err);
// A JSON object from a file; err names the file and the line of a parse error.
json_t *tbp_load_json_file(const char *path, tb_error *err);
// A JSON integer, or a real with an integral value (a Lua float such as 2.0): 0, else -1.
int tbp_integral(json_t *v, long long *out);
// An integer arg >= min, or the default when absent.
int tbp_int_arg(const parser *p, json_t *args, const char *key, long long dflt, long long min, long long *out,
                tb_error *err);
// args.quantile: a number strictly between 0 and 1, 0.5 (the median) when absent.
int tbp_quantile_arg(const parser *p, json_t *args, double *q, tb_error *err);
// A string arg, or dflt when absent or not a string.
const char *tbp_string_arg(json_t *args, const char *key, const char *dflt);
// Whether s is one of names (NULL-terminated); else err names the arg, the value and the choices.
int tbp_one_of(const parser *p, const char *key, const char *s, const char *const *names, tb_error *err);
// config.json's world_size (1 when absent, as the engine's default), with its path added to
// files; *config (when not NULL) gets the config (the caller decrefs it).
int tbp_record_world_size(const char *dir, char *config_path, size_t size, json_t *files, long long *world,
                          json_t **config, tb_error *err);

// ---- one record's metrics (parsers_metrics.c): config.json and every rank's
// metrics.rank-NNNNN.jsonl, the fields a parser needs

enum { TBP_NEED_STEP_MS = 1, TBP_NEED_LOSS = 2, TBP_NEED_MEM = 4, TBP_NEED_PHASE = 8 };

typedef struct tbp_metric_row {
    int64_t step;
    int line;  // of the rank's file, 1-based
    int has_loss;
    double loss, step_ms, mem, phase;
} tbp_metric_row;

typedef struct tbp_rank_metrics {
    char path[REC_PATH_MAX];
    tbp_metric_row *rows;  // sorted by step, no step twice
    int n;
} tbp_rank_metrics;

typedef struct tbp_record_metrics {
    json_t *config;  // run/config.json
    char config_path[REC_PATH_MAX];
    int nranks;
    tbp_rank_metrics *ranks;
} tbp_record_metrics;

// Reads config.json and the metrics of ranks 0..world_size-1 (the fields `need` asks for; an
// absent one is an error naming file and line), adding the paths to files. category: the
// mem_peak_bytes key for TBP_NEED_MEM ("total_peak": mem_total_peak_bytes), the pipeline key
// for TBP_NEED_PHASE ("backward_ms").
int tbp_read_record_metrics(tbp_record_metrics *m, const char *record_dir, int need, const char *category,
                            json_t *files, tb_error *err);
void tbp_record_metrics_free(tbp_record_metrics *m);
// The row of `step`, or NULL.
const tbp_metric_row *tbp_find_step(const tbp_rank_metrics *rm, int64_t step);

// ---- the per-record parsers and the combinations (one file per kind of record file)

int tbp_tokens_per_s_record(const parser *, json_t *, const char *, double *, json_t *, tb_error *);  // metrics
int tbp_step_ms_record(const parser *, json_t *, const char *, double *, json_t *, tb_error *);
int tbp_loss_at_step_record(const parser *, json_t *, const char *, double *, json_t *, tb_error *);
int tbp_peak_memory_record(const parser *, json_t *, const char *, double *, json_t *, tb_error *);
int tbp_pipeline_record(const parser *, json_t *, const char *, double *, json_t *, tb_error *);  // pipeline
int tbp_figure_record(const parser *, json_t *, const char *, double *, json_t *, tb_error *);
int tbp_comm_bytes_record(const parser *, json_t *, const char *, double *, json_t *, tb_error *);  // comm
int tbp_step_phase_record(const parser *, json_t *, const char *, double *, json_t *, tb_error *);
int tbp_checkpoint_record(const parser *, json_t *, const char *, double *, json_t *, tb_error *);  // checkpoint
int tbp_collective_record(const parser *, json_t *, const char *, double *, json_t *, tb_error *);  // traces
int tbp_oom_record(const parser *, json_t *, const char *, double *, json_t *, tb_error *);  // failure reports
int tbp_moe_figure_record(const parser *, json_t *, const char *, double *, json_t *, tb_error *);  // moe entries
int tbp_hang_record(const parser *, json_t *, const char *, double *, json_t *, tb_error *);
int tbp_replayed_record(const parser *, json_t *, const char *, double *, json_t *, tb_error *);  // replay
int tbp_first_divergence_combine(const parser *, json_t *, const char *const *, int, double *, json_t **,
                                 tb_error *);  // dumped tensors
int tbp_ratio_combine(const parser *, json_t *, const char *const *, int, double *, json_t **, tb_error *);
int tbp_difference_combine(const parser *, json_t *, const char *const *, int, double *, json_t **, tb_error *);
int tbp_resumed_loss_combine(const parser *, json_t *, const char *const *, int, double *, json_t **,
                             tb_error *);  // a run and its resumes (parsers_resume.c)
int tbp_memory_growth_combine(const parser *, json_t *, const char *const *, int, double *, json_t **, tb_error *);

#endif
