// report.c — `tracebook report` (report.h): gathers an experiment version's records and
// claims, and writes the page: header, claims (prove.h), runs (config differences, figures by
// the claim parsers), plots (report_figures.c), raw files.
#include "reports/report.h"

#include <dirent.h>
#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "records/catalog.h"
#include "runs/catalog_cli.h"
#include "core/fileio.h"
#include "core/run_dir.h"
#include "core/xalloc.h"
#include "prove/parsers.h"
#include "prove/prove.h"
#include "records/record.h"
#include "reports/report_html.h"
#include "reports/report_internal.h"

// --- reading the records --------------------------------------------------------------

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

// One figure of one record by a claim parser's definition (parsers.h); NAN when it does not
// derive (a failed run, a file the run did not write).
static double parser_value(const char *parser, const char *args_json, const char *record_dir) {
    json_t *args = args_json ? json_loads(args_json, 0, NULL) : NULL;
    const char *dirs[1] = {record_dir};
    double v = NAN;
    tb_error err;
    if (tb_parse_claim(parser, args, dirs, 1, &v, NULL, &err) != 0) v = NAN;
    json_decref(args);
    return v;
}

static void load_loss(report_run *r) {
    char path[REPORT_PATH_MAX];
    tb_error err;
    if (tb_rank_file_path(path, sizeof path, r->run_dir, TB_RANK_METRICS, 0, &err) != 0) return;
    FILE *f = fopen(path, "r");
    if (!f) return;
    char line[1 << 16];
    int cap = 0, series_cap = 0;
    while (fgets(line, sizeof line, f)) {
        json_t *o = json_loads(line, 0, NULL);
        json_t *loss = json_object_get(o, "loss"), *step = json_object_get(o, "step");
        json_t *tps = json_object_get(o, "tokens_per_s"), *hw = json_object_get(o, "mem_total_peak_bytes");
        if (json_is_integer(step) && json_is_number(tps) && json_is_number(hw)) {
            if (r->nseries == series_cap) {
                series_cap = series_cap ? 2 * series_cap : 64;
                r->series_step = tb_xreallocarray(r->series_step, (size_t)series_cap, sizeof *r->series_step, "series");
                r->tokens_per_s_at = tb_xreallocarray(r->tokens_per_s_at, (size_t)series_cap, sizeof *r->tokens_per_s_at,
                                                      "series");
                r->high_water_at = tb_xreallocarray(r->high_water_at, (size_t)series_cap, sizeof *r->high_water_at,
                                                    "series");
            }
            r->series_step[r->nseries] = (double)json_integer_value(step);
            r->tokens_per_s_at[r->nseries] = json_number_value(tps);
            r->high_water_at[r->nseries++] = json_number_value(hw) / (1024.0 * 1024.0);
        }
        if (json_is_number(loss) && json_is_integer(step) && isfinite(json_number_value(loss))) {
            if (r->nloss == cap) {
                cap = cap ? 2 * cap : 64;
                r->loss_step = tb_xreallocarray(r->loss_step, (size_t)cap, sizeof *r->loss_step, "loss curve");
                r->loss = tb_xreallocarray(r->loss, (size_t)cap, sizeof *r->loss, "loss curve");
            }
            r->loss_step[r->nloss] = (double)json_integer_value(step);
            r->loss[r->nloss++] = json_number_value(loss);
        }
        json_t *moe = json_object_get(o, "moe");  // (the MoE layers' load, engine/transformer/moe)
        if (json_is_array(moe) && json_array_size(moe) && json_is_integer(step)) {
            json_decref(r->moe);
            r->moe = json_incref(moe);
            r->moe_step = json_integer_value(step);
        }
        json_decref(o);
    }
    fclose(f);
}

// The memory snapshot of the rank with the largest total peak: bytes per category at it.
static void load_memory(report_run *r) {
    r->memory_rank = -1;
    for (int rank = 0; rank < r->world; rank++) {
        char path[REPORT_PATH_MAX];
        tb_error err;
        if (tb_rank_file_path(path, sizeof path, r->run_dir, TB_RANK_MEMORY, rank, &err) != 0) return;
        json_t *m = json_load_file(path, 0, NULL);
        json_t *at = json_object_get(m, "at_total_peak");
        double total = json_number_value(json_object_get(m, "total_peak_bytes"));
        if (json_is_object(at) && (r->memory_rank < 0 || total > r->memory_total)) {
            r->memory_rank = rank;
            r->memory_total = total;
            for (int c = 0; c < REPORT_MEM_CATEGORIES; c++)
                r->memory[c] = json_number_value(json_object_get(at, report_mem_categories[c]));
        }
        json_decref(m);
    }
}

static long long config_int(json_t *config, const char *key, long long fallback) {
    json_t *v = json_object_get(config, key);
    if (!v) v = json_object_get(json_object_get(config, "derived"), key);
    return json_is_integer(v) ? (long long)json_integer_value(v) : fallback;
}

static int load_run(report_run *r, const char *version_dir, const char *id) {
    memset(r, 0, sizeof *r);
    snprintf(r->id, sizeof r->id, "%s", id);
    if (snprintf(r->record_dir, sizeof r->record_dir, "%s/%s", version_dir, id) >= (int)sizeof r->record_dir ||
        snprintf(r->run_dir, sizeof r->run_dir, "%s/" TB_RECORD_RUN_DIR, r->record_dir) >= (int)sizeof r->run_dir)
        return -1;
    char path[REPORT_PATH_MAX];
    if (snprintf(path, sizeof path, "%s/" TB_RECORD_MANIFEST, r->record_dir) < (int)sizeof path)
        r->manifest = json_load_file(path, 0, NULL);
    if (snprintf(path, sizeof path, "%s/" TB_RUN_CONFIG, r->run_dir) < (int)sizeof path)
        r->config = json_load_file(path, 0, NULL);
    if (!r->config && r->manifest) r->config = json_incref(json_object_get(r->manifest, "config"));
    const char *status = json_string_value(json_object_get(r->manifest, "status"));
    snprintf(r->status, sizeof r->status, "%s", status ? status : r->manifest ? "?" : "incomplete");
    json_int_t rep = 0;
    r->repetition = tb_manifest_repetition(r->manifest, &rep) ? (int)rep : 0;
    r->world = (int)config_int(r->config, "world_size", 1);
    r->tp = (int)config_int(r->config, "tensor_model_parallel_size", 1);
    r->pp = (int)config_int(r->config, "pipeline_model_parallel_size", 1);
    r->cp = (int)config_int(r->config, "context_parallel_size", 1);
    r->seq = config_int(r->config, "seq_length", 0);
    r->microbatches = config_int(r->config, "num_microbatches", 0);
    r->tokens_per_s = r->step_ms = r->final_loss = r->peak_bytes = r->activation_bytes = NAN;
    r->bubble = r->theoretical_bubble = NAN;
    if (strcmp(r->status, "finished")) return 0;  // figures only for runs that finished
    r->tokens_per_s = parser_value("tokens_per_s", NULL, r->record_dir);
    r->step_ms = parser_value("step_ms", NULL, r->record_dir);
    r->final_loss = parser_value("loss_at_step", NULL, r->record_dir);
    r->peak_bytes = parser_value("peak_memory_bytes", NULL, r->record_dir);
    r->activation_bytes = parser_value("peak_memory_bytes", "{\"category\": \"activations\"}", r->record_dir);
    if (r->pp > 1) {
        r->bubble = parser_value("pipeline_bubble", NULL, r->record_dir);
        r->theoretical_bubble = parser_value("pipeline_bubble", "{\"kind\": \"theoretical\"}", r->record_dir);
    }
    load_loss(r);
    load_memory(r);
    return 0;
}

static void free_run(report_run *r) {
    json_decref(r->manifest);
    json_decref(r->config);
    json_decref(r->flat);
    json_decref(r->moe);
    free(r->loss_step);
    free(r->loss);
    free(r->series_step);
    free(r->tokens_per_s_at);
    free(r->high_water_at);
}

// Short names for the keys a label shows (Megatron's abbreviations).
static const char *short_key(const char *key) {
    static const char *const names[][2] = {
        {"tensor_model_parallel_size", "tp"},  {"pipeline_model_parallel_size", "pp"},
        {"context_parallel_size", "cp"},       {"virtual_pipeline_model_parallel_size", "vpp"},
        {"world_size", "world"},               {"recompute_granularity", "recompute"},
        {"micro_batch_size", "mbs"},           {"global_batch_size", "gbs"},
        {"seq_length", "seq"},                 {"sequence_parallel", "sp"},
        {"use_distributed_optimizer", "dist-opt"}, {"expert_model_parallel_size", "ep"}};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++)
        if (!strcmp(key, names[i][0])) return names[i][1];
    return key;
}

// Each run's label: the config keys that differ between the runs (derived.* and the
// recompute details left to the table), with the values of this run; runs of one config
// (repetitions) share a group.
static void label_runs(report *rp) {
    json_t **flat = tb_xcalloc((size_t)rp->nruns + 1, sizeof *flat, "configs");
    for (int i = 0; i < rp->nruns; i++) {
        rp->runs[i].flat = json_object();
        if (rp->runs[i].config) tb_config_flatten(rp->runs[i].config, "", rp->runs[i].flat);
        json_object_del(rp->runs[i].flat, "run_dir");
        flat[i] = rp->runs[i].flat;
    }
    rp->differing = tb_config_differing_keys(flat, rp->nruns);
    // where a run wrote its files is not part of its configuration
    for (size_t k = json_array_size(rp->differing); k-- > 0;)
        if (!strcmp(json_string_value(json_array_get(rp->differing, k)), "run_dir")) json_array_remove(rp->differing, k);
    free(flat);
    for (int i = 0; i < rp->nruns; i++) {
        report_run *r = &rp->runs[i];
        tb_html b = {0};
        size_t k;
        json_t *key;
        json_array_foreach(rp->differing, k, key) {
            const char *name = json_string_value(key);
            if (!strncmp(name, "derived.", 8) || !strcmp(name, "recompute_method") ||
                !strcmp(name, "recompute_num_layers") || !strcmp(name, "max_position_embeddings"))
                continue;
            json_t *v = json_object_get(r->flat, name);
            char *text = v ? json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT) : NULL;
            const char *shown = text ? text : "-";
            if (text && text[0] == '"') shown = text + 1, text[strlen(text) - 1] = '\0';
            tb_html_rawf(&b, "%s%s %s", b.len ? ", " : "", short_key(name), shown);
            free(text);
        }
        r->group = -1;
        for (int j = 0; j < i && r->group < 0; j++)
            if (json_equal(rp->runs[j].flat, r->flat)) r->group = rp->runs[j].group;
        if (r->group < 0) r->group = rp->ngroups++;
        // a plot's axis holds a short label; a longer one is named by its configuration's number
        // (the runs table's "config" column)
        if (b.s && strlen(b.s) <= REPORT_LABEL_MAX) snprintf(r->label, sizeof r->label, "%s", b.s);
        else snprintf(r->label, sizeof r->label, "config %d", r->group + 1);
        tb_html_free(&b);
    }
}

static int load_report(report *rp, const char *version_dir, tb_error *err) {
    memset(rp, 0, sizeof *rp);
    snprintf(rp->version_dir, sizeof rp->version_dir, "%s", version_dir);
    // <artifacts>/<experiment>/v<N>
    char copy[REPORT_PATH_MAX];
    snprintf(copy, sizeof copy, "%s", version_dir);
    size_t len = strlen(copy);
    while (len > 1 && copy[len - 1] == '/') copy[--len] = '\0';
    char *vslash = strrchr(copy, '/');
    char *end;
    if (!vslash || vslash[1] != 'v' || (rp->version = strtoll(vslash + 2, &end, 10)) < 0 || *end || end == vslash + 2)
        return tb_fail(err, "%s: not an experiment version directory (<artifacts>/<experiment>/v<N>)", version_dir);
    *vslash = '\0';
    char *eslash = strrchr(copy, '/');
    if (snprintf(rp->experiment, sizeof rp->experiment, "%s", eslash ? eslash + 1 : copy) >= (int)sizeof rp->experiment)
        return tb_fail(err, "%s: the experiment's name is over %zu characters", version_dir, sizeof rp->experiment - 1);
    if (eslash) *eslash = '\0';
    snprintf(rp->artifacts, sizeof rp->artifacts, "%s", eslash ? copy : ".");
    char path[REPORT_PATH_MAX];
    snprintf(path, sizeof path, "%s/" TB_EXPERIMENT_STATUS, version_dir);
    rp->status = json_load_file(path, 0, NULL);
    DIR *d = opendir(version_dir);
    if (!d) return tb_fail(err, "%s: cannot open: %s", version_dir, strerror(errno));
    char **ids = NULL;
    int n = 0, cap = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        struct stat st;
        if (e->d_name[0] == '.' || snprintf(path, sizeof path, "%s/%s", version_dir, e->d_name) >= (int)sizeof path ||
            stat(path, &st) != 0 || !S_ISDIR(st.st_mode))
            continue;
        if (n == cap) ids = tb_xreallocarray(ids, (size_t)(cap = cap ? 2 * cap : 16), sizeof *ids, "run ids");
        ids[n++] = tb_xstrdup(e->d_name, "run id");
    }
    closedir(d);
    if (n) qsort(ids, (size_t)n, sizeof *ids, cmp_str);  // run ids begin with their start time
    rp->runs = tb_xcalloc((size_t)n + 1, sizeof *rp->runs, "runs");
    for (int i = 0; i < n; i++) {
        if (load_run(&rp->runs[rp->nruns], version_dir, ids[i]) == 0) rp->nruns++;
        free(ids[i]);
    }
    free(ids);
    if (!rp->status && rp->nruns == 0)
        return tb_fail(err, "%s: no runs and no " TB_EXPERIMENT_STATUS " (not an experiment version)", version_dir);
    label_runs(rp);
    rp->proof = tb_prove_collect(rp->artifacts, rp->experiment, rp->version, err);
    return rp->proof ? 0 : -1;
}

static void free_report(report *rp) {
    for (int i = 0; i < rp->nruns; i++) free_run(&rp->runs[i]);
    free(rp->runs);
    json_decref(rp->status);
    json_decref(rp->differing);
    json_decref(rp->proof);
}

// --- relative links ---------------------------------------------------------------------

// The path of to relative to the directory from (both existing), in out: "../v1/x".
static int relative_path(const char *from_dir, const char *to, char *out, size_t size, tb_error *err) {
    char a[PATH_MAX], b[PATH_MAX];
    if (!realpath(from_dir, a)) return tb_fail(err, "%s: %s", from_dir, strerror(errno));
    if (!realpath(to, b)) return tb_fail(err, "%s: %s", to, strerror(errno));
    size_t common = 0, i = 0;
    for (; a[i] && a[i] == b[i]; i++)
        if (a[i] == '/') common = i;
    if (!a[i] && (b[i] == '/' || !b[i])) common = i;
    tb_html r = {0};
    for (const char *p = a + common; *p; p++)
        if (*p == '/') tb_html_raw(&r, "../");
    const char *rest = b + common;
    if (*rest == '/') rest++;
    tb_html_raw(&r, *rest ? rest : ".");
    int fits = snprintf(out, size, "%s", r.s) < (int)size;
    tb_html_free(&r);
    return fits ? 0 : tb_fail(err, "relative path from %s to %s: over %zu characters", a, b, size);
}

void report_href(const report *rp, const char *record_relative, char *out, size_t size) {
    if (snprintf(out, size, "%s%s%s", rp->link_prefix, *rp->link_prefix ? "/" : "", record_relative) >= (int)size)
        snprintf(out, size, "%s", record_relative);  // never: the prefix and the name are paths that exist
}

// --- writing ----------------------------------------------------------------------------

static const char page_style[] =
    "body{font-family:system-ui,-apple-system,'Segoe UI',sans-serif;margin:0 auto;max-width:1100px;padding:1em 2em;"
    "color:#222;line-height:1.4}h1{margin-bottom:.2em}h2{border-bottom:1px solid #ccc;padding-bottom:.2em;"
    "margin-top:2em}code,pre{font-family:ui-monospace,monospace;font-size:.88em}pre{background:#f6f6f6;"
    "padding:.6em;overflow-x:auto;white-space:pre-wrap}table{border-collapse:collapse;font-size:.9em;margin:.5em 0}"
    "td,th{border:1px solid #ddd;padding:.25em .5em;text-align:left;vertical-align:top}th{background:#f0f0f0}"
    "td.num{text-align:right;font-variant-numeric:tabular-nums}.verdict{font-weight:bold;padding:.1em .5em;"
    "border-radius:3px}.proven{background:#d8f0d8;color:#155215}.not-proven{background:#f8dada;color:#7a1010}"
    ".claim{border:1px solid #ddd;border-radius:4px;padding:.5em 1em;margin:.8em 0}.meta{color:#555}"
    "figure.plot{margin:1.2em 0}figure.plot svg{width:100%;height:auto;max-width:760px;display:block}"
    "figcaption{color:#444;font-size:.9em;max-width:760px}.absent{color:#666;font-style:italic}"
    "details>summary{cursor:pointer}";

static void iso_now(char *out, size_t size) {
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    strftime(out, size, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

// The page's title ends so: how a page this command wrote is told apart (replaceable).
#define REPORT_TITLE_SUFFIX " — tracebook report"

static void write_header(tb_html *h, const report *rp) {
    tb_html_raw(h, "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
                   "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\"><title>");
    tb_html_textf(h, "%s v%lld" REPORT_TITLE_SUFFIX, rp->experiment, rp->version);
    tb_html_rawf(h, "</title><style>%s</style></head>\n<body>\n<h1>", page_style);
    tb_html_textf(h, "%s v%lld", rp->experiment, rp->version);
    tb_html_raw(h, "</h1>\n");
    const char *question = json_string_value(json_object_get(rp->status, "question"));
    if (!question && rp->nruns) question = json_string_value(json_object_get(rp->runs[0].manifest, "question"));
    tb_html_raw(h, "<p class=\"question\"><b>Question:</b> ");
    tb_html_text(h, question ? question : "(no question recorded)");
    tb_html_raw(h, "</p>\n<p class=\"meta\">");
    const char *status = json_string_value(json_object_get(rp->status, "status"));
    const char *runbook = json_string_value(json_object_get(rp->status, "runbook"));
    const char *error = json_string_value(json_object_get(rp->status, "error"));
    tb_html_textf(h, "Experiment %s", status ? status : "(no experiment.json)");
    if (runbook) tb_html_textf(h, "; runbook %s", runbook);
    tb_html_textf(h, "; %d run%s", rp->nruns, rp->nruns == 1 ? "" : "s");
    json_t *summary = json_object_get(rp->proof, "summary");
    tb_html_textf(h, "; claims: %lld proven of %lld", (long long)json_integer_value(json_object_get(summary, "proven")),
                  (long long)json_integer_value(json_object_get(summary, "claims")));
    char now[32];
    iso_now(now, sizeof now);
    tb_html_textf(h, ". Written %s by tracebook report from the records under %s.", now, rp->version_dir);
    tb_html_raw(h, "</p>\n");
    if (error) {
        tb_html_raw(h, "<p class=\"not-proven\">Runbook error: ");
        tb_html_text(h, error);
        tb_html_raw(h, "</p>\n");
    }
    tb_html_raw(h, "<nav><a href=\"#claims\">Claims</a> · <a href=\"#runs\">Runs</a> · <a href=\"#plots\">Plots</a>"
                   " · <a href=\"#files\">Raw files</a></nav>\n");
}

static void write_files(tb_html *h, const report *rp) {
    tb_html_raw(h, "<h2 id=\"files\">Raw files</h2>\n<p>Every record's files, relative to this page. The per-rank "
                   "traces are Chrome trace-event files: open them in Perfetto (ui.perfetto.dev, \"Open trace "
                   "file\"; the trace stays on your machine) or chrome://tracing.</p>\n<ul>\n");
    for (int i = 0; i < rp->nruns; i++) {
        const report_run *r = &rp->runs[i];
        char href[REPORT_PATH_MAX], rel[REPORT_PATH_MAX];
        tb_html_raw(h, "<li><code>");
        tb_html_text(h, r->id);
        tb_html_raw(h, "</code>: ");
        static const char *const files[] = {TB_RECORD_MANIFEST, TB_RECORD_STDOUT, TB_RECORD_STDERR,
                                            TB_RECORD_RUN_DIR "/" TB_RUN_CONFIG, TB_RECORD_RUN_DIR "/" TB_RUN_PIPELINE,
                                            TB_RECORD_RUN_DIR "/" TB_RUN_CONDITIONS};
        int first = 1;
        for (size_t f = 0; f < sizeof files / sizeof *files; f++) {
            char path[REPORT_PATH_MAX];
            struct stat st;
            if (snprintf(path, sizeof path, "%s/%s", r->record_dir, files[f]) >= (int)sizeof path ||
                stat(path, &st) != 0)
                continue;
            snprintf(rel, sizeof rel, "%s/%s", r->id, files[f]);
            report_href(rp, rel, href, sizeof href);
            tb_html_raw(h, first ? "" : " · ");
            tb_html_link(h, href, files[f]);
            first = 0;
        }
        for (int rank = 0; rank < r->world; rank++) {
            static const tb_rank_file kinds[] = {TB_RANK_METRICS, TB_RANK_TRACE, TB_RANK_MEMORY};
            for (size_t k = 0; k < sizeof kinds / sizeof *kinds; k++) {
                char path[REPORT_PATH_MAX];
                tb_error err;
                struct stat st;
                if (tb_rank_file_path(path, sizeof path, r->run_dir, kinds[k], rank, &err) != 0 || stat(path, &st) != 0)
                    continue;
                const char *base = strrchr(path, '/') + 1;
                snprintf(rel, sizeof rel, "%s/" TB_RECORD_RUN_DIR "/%s", r->id, base);
                report_href(rp, rel, href, sizeof href);
                tb_html_raw(h, first ? "" : " · ");
                tb_html_link(h, href, base);
                first = 0;
            }
        }
        tb_html_raw(h, "</li>\n");
    }
    tb_html_raw(h, "</ul>\n");
}

// Whether out may be written: absent, or a page this command wrote before (its title within
// the first KiB). Anything else — a ledger, claims.json, a record's file, another program's
// page — is refused, naming it: the report reads the version it would overwrite. 0 or -1.
static int replaceable(const char *out, tb_error *err) {
    struct stat st;
    if (stat(out, &st) != 0) return 0;
    if (!S_ISREG(st.st_mode))
        return tb_fail(err, "--output %s is %s, not a report: not replaced", out, tb_file_kind(st.st_mode));
    char head[1025] = "";
    FILE *f = fopen(out, "rb");
    size_t n = f ? fread(head, 1, sizeof head - 1, f) : 0;
    if (f) fclose(f);
    head[n] = '\0';
    if (n == 0 || (!strncmp(head, "<!DOCTYPE html>", 15) && strstr(head, REPORT_TITLE_SUFFIX "</title>"))) return 0;
    return tb_fail(err, "--output %s exists and is not a page tracebook report wrote: not replaced; remove it, or "
                        "give --output another path", out);
}

int tb_report_write(const char *version_dir, const char *out, char *written, size_t written_size, tb_error *err) {
    report rp;
    if (load_report(&rp, version_dir, err) != 0) {
        free_report(&rp);
        return -1;
    }
    char default_out[REPORT_PATH_MAX];
    if (!out) {
        if (snprintf(default_out, sizeof default_out, "%s/" TB_EXPERIMENT_REPORT, version_dir) >= (int)sizeof default_out) {
            free_report(&rp);
            return tb_fail(err, "%s/" TB_EXPERIMENT_REPORT ": path too long", version_dir);
        }
        out = default_out;
    }
    // links are relative to the page's directory
    char out_dir[REPORT_PATH_MAX];
    snprintf(out_dir, sizeof out_dir, "%s", out);
    char *slash = strrchr(out_dir, '/');
    if (slash == out_dir) snprintf(out_dir, sizeof out_dir, "/");
    else if (slash) *slash = '\0';
    else snprintf(out_dir, sizeof out_dir, ".");
    if (relative_path(out_dir, version_dir, rp.link_prefix, sizeof rp.link_prefix, err) != 0) {
        free_report(&rp);
        return tb_fail_prefix(err, "report %s", out);
    }
    if (replaceable(out, err) != 0) {
        free_report(&rp);
        return -1;
    }
    if (!strcmp(rp.link_prefix, ".")) rp.link_prefix[0] = '\0';
    tb_html h = {0};
    write_header(&h, &rp);
    report_write_claims(&h, &rp);
    report_write_runs(&h, &rp);
    int rc = report_write_plots(&h, &rp, err);
    if (rc == 0) {
        write_files(&h, &rp);
        tb_html_raw(&h, "</body></html>\n");
        rc = tb_write_file_atomic(out, h.s, h.len, err);
    }
    if (rc == 0) snprintf(written, written_size, "%s", out);
    tb_html_free(&h);
    free_report(&rp);
    return rc;
}

// --- tracebook report -------------------------------------------------------------------

typedef struct report_args {
    const char *artifacts, *output, *experiment;
    int version, json;
} report_args;

static const tb_option report_options[] = {
    TB_OPTION("--experiment", report_args, experiment, TB_OPT_STRING, NULL, "NAME", "the experiment (required)"),
    TB_OPTION("--version", report_args, version, TB_OPT_INT, "0", "N", "the experiment's version N (0: the highest)"),
    TB_OPTION("--output", report_args, output, TB_OPT_STRING, NULL, "FILE",
              "write the page here (default <artifacts>/<experiment>/v<N>/report.html)"),
    TB_OPTION("--json", report_args, json, TB_OPT_BOOL, NULL, NULL,
              "print what was written as JSON: the page, the experiment and version"),
    TB_ARTIFACTS_OPTION(report_args, artifacts),
    TB_OPTIONS_END};

static const tb_command report_command = {
    "tracebook report", NULL,
    "Writes one self-contained HTML page of an experiment version: its question, every claim with\n"
    "its verdict and evidence (as tracebook prove derives them), the runs with their config\n"
    "differences, plots drawn by gnuplot, and relative links to every raw file and per-rank trace.",
    report_options, 0, 1,
    "tracebook report --experiment tp_scaling\n"
    "tracebook report --experiment tp_scaling --version 3 --output /tmp/tp.html",
    "no such experiment or version, or the page could not be written"};

int tracebook_report_main(int argc, char **argv) {
    report_args a = {0};  // a flag without a default leaves its field as it is
    tb_positional pos = {0};
    tb_error err;
    int rc = tb_command_parse(&report_command, &a, argc, argv, &pos, &err);
    if (rc != 0) return rc > 0 ? 0 : tb_command_usage_error(&report_command, &err);
    char exp_dir[REPORT_PATH_MAX], version_dir[REPORT_PATH_MAX + 32];
    if (pos.n || !a.experiment) {  // the old spelling, or none
        if (pos.n)
            tb_fail(&err, "tracebook report: the experiment is named with --experiment in every command now "
                          "(docs/CLI.md): tracebook report --experiment %s", pos.items[0]);
        else
            tb_fail(&err, "tracebook report: give the experiment: --experiment NAME (tracebook ls lists them)");
        tb_positional_free(&pos);
        return tb_command_usage_error(&report_command, &err);
    }
    const char *experiment = a.experiment;
    if (!*experiment || strchr(experiment, '/') || !strcmp(experiment, "..") || !strcmp(experiment, ".")) {
        fprintf(stderr, "tracebook report: --experiment '%s' is not an experiment name\n", experiment);
        tb_positional_free(&pos);
        return TB_EXIT_USAGE;
    }
    if (a.version < 0) {
        fprintf(stderr, "tracebook report: flag --version: %d is negative\n", a.version);
        tb_positional_free(&pos);
        return TB_EXIT_USAGE;
    }
    snprintf(exp_dir, sizeof exp_dir, "%s/%s", a.artifacts, experiment);
    long long version = a.version;
    if (version == 0) {  // the highest v<N>
        DIR *d = opendir(exp_dir);
        struct dirent *e;
        while (d && (e = readdir(d))) {
            char *end;
            long long v = e->d_name[0] == 'v' ? strtoll(e->d_name + 1, &end, 10) : -1;
            if (v > version && *end == '\0' && end != e->d_name + 1) version = v;
        }
        if (d) closedir(d);
        if (version == 0) {
            fprintf(stderr, "tracebook report: no experiment '%s' in %s (no %s/v<N>)\n", experiment, a.artifacts,
                    exp_dir);
            tb_positional_free(&pos);
            return TB_EXIT_FAILURE;
        }
    }
    snprintf(version_dir, sizeof version_dir, "%s/v%lld", exp_dir, version);
    struct stat st;
    if (stat(version_dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
        fprintf(stderr, "tracebook report: no version %lld of experiment '%s' (%s)\n", version, experiment,
                version_dir);
        tb_positional_free(&pos);
        return TB_EXIT_FAILURE;
    }
    char written[REPORT_PATH_MAX];
    rc = tb_report_write(version_dir, a.output, written, sizeof written, &err);
    if (rc == 0 && a.json) {
        json_t *doc = json_pack("{s:s, s:s, s:I, s:s}", "report", written, "experiment", experiment, "version",
                                (json_int_t)version, "version_dir", version_dir);
        json_dumpf(doc, stdout, JSON_INDENT(1));
        fputc('\n', stdout);
        json_decref(doc);
    } else if (rc == 0) {
        printf("report %s\n", written);
    }
    else fprintf(stderr, "tracebook report: %s\n", err.msg);
    tb_positional_free(&pos);
    return rc == 0 ? 0 : TB_EXIT_FAILURE;
}
