// parsers_resume.c — the parsers of a long run and its resumes (the soak runbook,
// runbooks/soak.lua), both combinations over the claim's records read from every rank's
// metrics.rank-NNNNN.jsonl:
//
//   resumed_loss_mismatches: an interrupted run, as the segments that resumed one another
//     from checkpoints, against the same run uninterrupted — every loss logged, bit for bit;
//   memory_growth_bytes: how far the allocator's high-water rose after the warm-up (a leak,
//     a buffer a save or a load keeps), per record, rank and category.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/xalloc.h"
#include "prove/parsers_internal.h"

// ---------------------------------------------------------------------------------------
// resumed_loss_mismatches

// Config keys a segment may set otherwise than the uninterrupted run: where it runs, what it
// saves and loads, when it exits. Anything else (the model, the batch, the seed, the schedule,
// the layout) must be equal, or the two runs are not the same training.
static const char *const io_keys[] = {"run_dir", "load", "save", "save_interval", "exit_interval", "async_save", NULL};

static int io_key(const char *key) {
    for (const char *const *k = io_keys; *k; k++)
        if (!strcmp(*k, key)) return 1;
    return 0;
}

static int same_training(const tbp_record_metrics *whole, const tbp_record_metrics *seg, int first_segment,
                         tb_error *err) {
    const char *key;
    json_t *v;
    json_t *keys = json_object();  // the union of both configs' keys
    json_object_foreach(whole->config, key, v) json_object_set(keys, key, json_true());
    json_object_foreach(seg->config, key, v) json_object_set(keys, key, json_true());
    int rc = 0;
    json_object_foreach(keys, key, v) {
        // the first segment starts where the uninterrupted run started: the same load (none, or
        // the same initial checkpoint)
        if (io_key(key) && !(first_segment && !strcmp(key, "load"))) continue;
        json_t *a = json_object_get(whole->config, key), *b = json_object_get(seg->config, key);
        if (a && b && json_equal(a, b)) continue;
        char *sa = a ? json_dumps(a, JSON_ENCODE_ANY | JSON_COMPACT) : NULL;
        char *sb = b ? json_dumps(b, JSON_ENCODE_ANY | JSON_COMPACT) : NULL;
        rc = tb_fail(err, "config %s differs: %s in the uninterrupted run (%s), %s in the segment (%s); only %s may",
                     key, sa ? sa : "absent", whole->config_path, sb ? sb : "absent", seg->config_path,
                     "run_dir, load (after the first segment), save, save_interval, exit_interval and async_save");
        free(sa);
        free(sb);
        break;
    }
    json_decref(keys);
    return rc;
}

static const char *config_string(const tbp_record_metrics *m, const char *key) {
    const char *s = json_string_value(json_object_get(m->config, key));
    return s ? s : "";
}

static size_t trimmed_len(const char *s) {
    size_t n = strlen(s);
    while (n > 1 && s[n - 1] == '/') n--;
    return n;
}

// Segment k (k >= 1) resumed from segment k - 1: its load is the directory segment k - 1 saved
// into, inside segment k - 1's record (config save = "{run_dir}/...", the run's own files).
static int resumed_from(const tbp_record_metrics *prev, const char *prev_dir, const tbp_record_metrics *seg,
                        tb_error *err) {
    const char *load = config_string(seg, "load"), *save = config_string(prev, "save");
    size_t nl = trimmed_len(load), ns = trimmed_len(save);
    if (!*load || nl != ns || strncmp(load, save, nl))
        return tb_fail(err, "%s: load '%s' is not the directory the previous segment saved into (%s: save '%s')",
                       seg->config_path, load, prev->config_path, save);
    char run_id[256], inside[300];
    snprintf(inside, sizeof inside, "/%s/" TB_RECORD_RUN_DIR "/", tbp_base_name(prev_dir, run_id, sizeof run_id));
    if (!strstr(save, inside))
        return tb_fail(err, "%s: save '%s' is not inside the previous segment's record %s (no '%s' in it)",
                       prev->config_path, save, prev_dir, inside);
    return 0;
}

// What makes the records an interrupted run and not copies of the whole one: every segment but
// the last stopped before the uninterrupted run's last step, and every segment but the first
// resumed from a checkpoint (its first logged step is after step 1, not a training from scratch).
static int interrupted_and_resumed(const tbp_record_metrics *whole, const tbp_record_metrics *seg, int first, int last,
                                   tb_error *err) {
    const tbp_rank_metrics *w0 = &whole->ranks[0], *s0 = &seg->ranks[0];
    const long long end = (long long)w0->rows[w0->n - 1].step, from = (long long)s0->rows[0].step,
                    to = (long long)s0->rows[s0->n - 1].step;
    if (!last && to >= end)
        return tb_fail(err, "%s: logged steps %lld..%lld, up to the uninterrupted run's last (%lld): not interrupted",
                       s0->path, from, to, end);
    if (!first && from <= 1)
        return tb_fail(err, "%s: its first logged step is %lld: trained from the start, not resumed from a checkpoint",
                       s0->path, from);
    return 0;
}

int tbp_resumed_loss_combine(const parser *p, json_t *args, const char *const *dirs, int n, double *value,
                             json_t **evidence, tb_error *err) {
    if (n < 3)
        return tb_fail(err, "parser %s: needs the uninterrupted run and at least two segments, an interruption and a "
                            "resume (%d record%s)", p->name, n, n == 1 ? "" : "s");
    tbp_record_metrics *m = tb_xcalloc((size_t)n, sizeof *m, "records' metrics");
    long long *differ = tb_xcalloc((size_t)n, sizeof *differ, "rows that differ");
    json_t *records = json_array();  // per record: run_id, record_dir, value (its rows that differ), files, detail
    int rc = 0, loaded = 0;
    for (int i = 0; i < n && rc == 0; i++, loaded++) {
        json_t *files = json_array();
        char run_id[256];
        json_array_append_new(records, json_pack("{s:s, s:s, s:o}", "run_id", tbp_base_name(dirs[i], run_id, sizeof run_id),
                                                 "record_dir", dirs[i], "files", files));
        if (tbp_read_record_metrics(&m[i], dirs[i], TBP_NEED_LOSS, NULL, files, err) != 0)
            rc = tb_fail_prefix(err, "parser %s, record %s", p->name, dirs[i]);
    }
    for (int i = 1; i < n && rc == 0; i++) {
        if (same_training(&m[0], &m[i], i == 1, err) != 0 || (i > 1 && resumed_from(&m[i - 1], dirs[i - 1], &m[i], err)) ||
            interrupted_and_resumed(&m[0], &m[i], i == 1, i == n - 1, err) != 0)
            rc = tb_fail_prefix(err, "parser %s, segment %d of %d (%s)", p->name, i, n - 1, dirs[i]);
    }
    // every rank's rows, every segment's steps against the uninterrupted run's, bit for bit
    long long compared = 0, mismatches = 0;
    json_t *first = NULL;
    const tbp_rank_metrics *w0 = rc == 0 ? &m[0].ranks[0] : NULL;
    char *covered = w0 ? tb_xcalloc((size_t)w0->n, 1, "covered steps") : NULL;
    for (int i = 1; i < n && rc == 0; i++) {
        for (int r = 0; r < m[i].nranks && rc == 0; r++) {
            const tbp_rank_metrics *s = &m[i].ranks[r], *w = &m[0].ranks[r];
            for (int k = 0; k < s->n && rc == 0; k++) {
                const tbp_metric_row *a = &s->rows[k], *b = tbp_find_step(w, a->step);
                if (!b) {
                    rc = tb_fail(err, "parser %s: %s:%d: step %lld is not a step of the uninterrupted run (%s: steps "
                                 "%lld..%lld)", p->name, s->path, a->line, (long long)a->step, w->path,
                                 (long long)w->rows[0].step, (long long)w->rows[w->n - 1].step);
                    break;
                }
                if (r == 0) covered[b - w->rows] = 1;
                compared++;
                int same = a->has_loss == b->has_loss && (!a->has_loss || !memcmp(&a->loss, &b->loss, sizeof a->loss));
                if (same) continue;
                differ[i]++;
                if (!mismatches++) {
                    char sa[64] = "no loss", sb[64] = "no loss";
                    if (a->has_loss) snprintf(sa, sizeof sa, "%.17g", a->loss);
                    if (b->has_loss) snprintf(sb, sizeof sb, "%.17g", b->loss);
                    first = json_pack("{s:I, s:i, s:s, s:i, s:s, s:s, s:i, s:s}", "step", (json_int_t)a->step, "rank", r,
                                      "segment_file", s->path, "segment_line", a->line, "segment_loss", sa,
                                      "uninterrupted_file", w->path, "uninterrupted_line", b->line,
                                      "uninterrupted_loss", sb);
                }
            }
        }
    }
    for (int i = 0; i < n && rc == 0; i++) {  // what each record is in the comparison
        const tbp_rank_metrics *r0 = &m[i].ranks[0];
        const char *load = config_string(&m[i], "load");
        char detail[REC_PATH_MAX + 160];
        if (i == 0)
            snprintf(detail, sizeof detail, "the uninterrupted run: steps %lld..%lld", (long long)r0->rows[0].step,
                     (long long)r0->rows[r0->n - 1].step);
        else
            snprintf(detail, sizeof detail, "segment %d of %d: steps %lld..%lld, %lld of its rows differ%s%s", i, n - 1,
                     (long long)r0->rows[0].step, (long long)r0->rows[r0->n - 1].step, differ[i],
                     *load ? "; loaded " : "", load);
        json_t *rec = json_array_get(records, (size_t)i);
        json_object_set_new(rec, "value", json_real((double)differ[i]));
        json_object_set_new(rec, "detail", json_string(detail));
    }
    for (int k = 0; rc == 0 && k < w0->n; k++)
        if (!covered[k])
            rc = tb_fail(err, "parser %s: step %lld of the uninterrupted run (%s:%d) was logged by no segment", p->name,
                         (long long)w0->rows[k].step, w0->path, w0->rows[k].line);
    if (rc == 0) {
        *value = (double)mismatches;
        if (evidence) {
            *evidence = json_pack("{s:s, s:s, s:O, s:f, s:I, s:I, s:o, s:o}", "parser", p->name, "definition",
                                  p->definition, "args", args ? args : json_null(), "value", *value, "rows_compared",
                                  (json_int_t)compared, "steps", (json_int_t)w0->n, "first_mismatch",
                                  first ? first : json_null(), "records", records);
            first = records = NULL;
        }
    }
    json_decref(first);
    json_decref(records);
    free(covered);
    free(differ);
    for (int i = 0; i < loaded; i++) tbp_record_metrics_free(&m[i]);
    free(m);
    return rc;
}

// ---------------------------------------------------------------------------------------
// memory_growth_bytes

static const char *const every_category[] = {"params", "grads", "optimizer", "activations",
                                             "workspace", "comm", "total_peak", NULL};

int tbp_memory_growth_combine(const parser *p, json_t *args, const char *const *dirs, int n, double *value,
                              json_t **evidence, tb_error *err) {
    static const char *const choices[] = {"params", "grads",    "optimizer",  "activations", "workspace", "comm",
                                          "gathered", "total_peak", "total",  "every",       NULL};
    const char *category = tbp_string_arg(args, "category", "every");
    long long warmup;
    if (tbp_one_of(p, "category", category, choices, err) != 0 ||
        tbp_int_arg(p, args, "warmup_steps", 1, 1, &warmup, err) != 0)
        return -1;
    const char *one[] = {category, NULL};
    const char *const *cats = strcmp(category, "every") ? one : every_category;
    json_t *records = json_array(), *worst = NULL;
    double most = -INFINITY;
    int rc = 0;
    for (int i = 0; i < n && rc == 0; i++) {
        double rec_most = -INFINITY;
        json_t *rec_worst = NULL, *files = json_array();
        for (const char *const *c = cats; *c && rc == 0; c++) {
            tbp_record_metrics m;
            json_t *these = json_array();
            if (tbp_read_record_metrics(&m, dirs[i], TBP_NEED_MEM, *c, these, err) != 0) {
                json_decref(these);
                rc = tb_fail_prefix(err, "parser %s, record %s", p->name, dirs[i]);
                break;
            }
            if (c == cats) json_array_extend(files, these);
            json_decref(these);
            for (int r = 0; r < m.nranks && rc == 0; r++) {
                const tbp_rank_metrics *rm = &m.ranks[r];
                if (rm->n <= warmup) {
                    rc = tb_fail(err, "parser %s: %s: %d steps logged, none after warmup_steps %lld", p->name,
                                 rm->path, rm->n, warmup);
                    break;
                }
                const tbp_metric_row *at = &rm->rows[warmup - 1], *last = &rm->rows[rm->n - 1];
                double growth = last->mem - at->mem;
                if (growth > rec_most) {
                    rec_most = growth;
                    json_decref(rec_worst);
                    rec_worst = json_pack("{s:s, s:i, s:I, s:f, s:I, s:f, s:s}", "category", *c, "rank", r,
                                          "after_warmup_step", (json_int_t)at->step, "after_warmup_bytes", at->mem,
                                          "last_step", (json_int_t)last->step, "last_bytes", last->mem, "file",
                                          rm->path);
                }
            }
            tbp_record_metrics_free(&m);
        }
        if (rc != 0) {
            json_decref(files);
            json_decref(rec_worst);
            break;
        }
        char run_id[256], detail[REC_PATH_MAX + 200];
        snprintf(detail, sizeof detail, "the most it rose: %.0f bytes of %s on rank %lld, from step %lld to step %lld (%s)",
                 rec_most, json_string_value(json_object_get(rec_worst, "category")),
                 (long long)json_integer_value(json_object_get(rec_worst, "rank")),
                 (long long)json_integer_value(json_object_get(rec_worst, "after_warmup_step")),
                 (long long)json_integer_value(json_object_get(rec_worst, "last_step")),
                 json_string_value(json_object_get(rec_worst, "file")));
        json_array_append_new(records, json_pack("{s:s, s:s, s:f, s:o, s:s, s:O}", "run_id",
                                                 tbp_base_name(dirs[i], run_id, sizeof run_id), "record_dir", dirs[i],
                                                 "value", rec_most, "files", files, "detail", detail, "where", rec_worst));
        if (rec_most > most) {
            most = rec_most;
            json_decref(worst);
            worst = json_incref(rec_worst);
        }
        json_decref(rec_worst);
    }
    if (rc == 0) {
        *value = most;
        if (evidence) {
            *evidence = json_pack("{s:s, s:s, s:O, s:f, s:I, s:o, s:o}", "parser", p->name, "definition",
                                  p->definition, "args", args ? args : json_null(), "value", *value, "warmup_steps",
                                  (json_int_t)warmup, "worst", worst, "records", records);
            worst = records = NULL;
        }
    }
    json_decref(worst);
    json_decref(records);
    return rc;
}
