// catalog_cli.c — `tracebook ls | show | diff`: the catalogue, read.
//
//   tracebook ls [EXPERIMENT] [--json] [--artifacts DIR]
//   tracebook show RUN [--json] [--artifacts DIR]
//   tracebook diff RUN RUN [--phases] [--json] [--artifacts DIR]
//
// Each command first brings the catalogue in line with the records (tb_catalog_rebuild:
// only new or changed records are read), then answers from it. RUN is a run id or a unique
// prefix of one. The throughput shown is the tokens_per_s parser's definition
// (experiments/prove/parsers.h) with warmup 1, computed from the catalogue's rows.
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "records/catalog.h"
#include "runs/catalog_cli.h"
#include "core/xalloc.h"
#include "prove/parsers.h"
#include "core/run_dir.h"
#include "inspect/step_report.h"

// ---------------------------------------------------------------------------------------
// Shared

typedef struct cli {
    const char *name;  // "tracebook ls", for messages
    const char *artifacts;
    const char *positional[2];
    int npositional;
    const char *experiment;  // ls --experiment
    int phases;  // diff --phases
    int json;    // --json: one JSON document on stdout (docs/RUNBOOKS.md, "JSON output")
    sqlite3 *db;
} cli;

// ls, show and diff take the same flags; each its own positionals.
#define TB_JSON_OPTION TB_OPTION("--json", cli, json, TB_OPT_BOOL, "false", NULL, "the answer as one JSON document")
static const tb_option cli_options[] = {TB_ARTIFACTS_OPTION(cli, artifacts), TB_JSON_OPTION, TB_OPTIONS_END};
static const tb_option ls_options[] = {
    TB_OPTION("--experiment", cli, experiment, TB_OPT_STRING, NULL, "NAME", "that experiment's versions and runs"),
    TB_ARTIFACTS_OPTION(cli, artifacts), TB_JSON_OPTION, TB_OPTIONS_END};

static const tb_command ls_command = {
    "tracebook ls", NULL,
    "Lists the experiments under the artifacts root (versions, runs by status, claims proven), or with\n"
    "--experiment one experiment's versions and runs (id, status, commit, step time, throughput).",
    ls_options, 0, 1, "tracebook ls\ntracebook ls --experiment tp_scaling --json", NULL};
static const tb_command show_command = {
    "tracebook show", "RUN",
    "Shows one run: manifest, command, config, per-step metrics. RUN is a run id (or a unique prefix of\n"
    "one) or a record directory (docs/CLI.md).",
    cli_options, 1, 1, "tracebook show 20261129T104512",
    "no such run, the catalogue cannot be read, or the record is unreadable (shown as far as it was read)"};
static const tb_option diff_options[] = {
    TB_ARTIFACTS_OPTION(cli, artifacts),
    TB_OPTION("--phases", cli, phases, TB_OPT_BOOL, "false", NULL,
              "also each phase of the steps (data, compute, optimizer, P2P wait, idle, every group's collective "
              "wait and transfer) and the first that changed beyond the runs' own spread"),
    TB_JSON_OPTION,
    TB_OPTIONS_END};
static const tb_command diff_command = {
    "tracebook diff", "RUN RUN",
    "Shows two runs side by side: the config keys that differ and the metrics; with --phases each phase\n"
    "of the steps and the first that changed beyond the runs' own spread. RUN as for show.",
    diff_options, 2, 2, "tracebook diff 20261129T104512 20261129T104530 --phases",
    "no such run, or the catalogue cannot be read"};

// Parses the command line. Returns -1 (done, *rc set) or 0.
static int cli_parse(cli *c, const tb_command *cmd, int argc, char **argv, int *rc) {
    memset(c, 0, sizeof *c);
    c->name = cmd->name;
    tb_positional pos;
    tb_error err;
    int parsed = tb_command_parse(cmd, c, argc, argv, &pos, &err);
    if (parsed != 0) {
        *rc = parsed > 0 ? 0 : tb_command_usage_error(cmd, &err);
        return -1;
    }
    for (int i = 0; i < pos.n; i++) c->positional[c->npositional++] = pos.items[i];
    tb_positional_free(&pos);
    return 0;
}

// Opens and syncs the catalogue, after every usage error has been said. Returns -1 (done,
// *rc set) or 0.
static int cli_open(cli *c, int *rc) {
    tb_error err;
    struct stat st;  // these commands read records: a missing root is said, not made (with a catalogue in it)
    if (stat(c->artifacts, &st) != 0 || !S_ISDIR(st.st_mode)) {
        fprintf(stderr, "%s: no artifacts directory %s (tracebook run writes one; --artifacts names another)\n",
                c->name, c->artifacts);
        *rc = TB_EXIT_FAILURE;
        return -1;
    }
    if (tb_catalog_open(&c->db, c->artifacts, &err) != 0 || tb_catalog_rebuild(c->db, c->artifacts, &err) != 0) {
        fprintf(stderr, "%s: %s\n", c->name, err.msg);
        sqlite3_close(c->db);
        *rc = TB_EXIT_FAILURE;
        return -1;
    }
    return 0;
}

static int cli_start(cli *c, const tb_command *cmd, int argc, char **argv, int *rc) {
    return cli_parse(c, cmd, argc, argv, rc) != 0 ? -1 : cli_open(c, rc);
}

static const char *col(sqlite3_stmt *st, int i) {
    const char *s = (const char *)sqlite3_column_text(st, i);
    return s ? s : "";
}

static int sql_error(cli *c) {
    fprintf(stderr, "%s: catalogue: %s\n", c->name, sqlite3_errmsg(c->db));
    return TB_EXIT_FAILURE;
}

// A column as JSON: NULL → null, a number as it is, text as a string (a non-finite metric is
// kept as the text "NaN" / "Infinity").
static json_t *col_json(sqlite3_stmt *st, int i) {
    switch (sqlite3_column_type(st, i)) {
    case SQLITE_NULL: return json_null();
    case SQLITE_INTEGER: return json_integer(sqlite3_column_int64(st, i));
    case SQLITE_FLOAT: return json_real(sqlite3_column_double(st, i));
    default: return json_string(col(st, i));
    }
}

// A JSON column (argv, config, sweep_point) parsed, or null.
static json_t *col_parsed(sqlite3_stmt *st, int i) {
    json_t *v = *col(st, i) ? json_loads(col(st, i), JSON_DECODE_ANY, NULL) : NULL;
    return v ? v : json_null();
}

static json_t *real_or_null(double v) { return isfinite(v) ? json_real(v) : json_null(); }

static void print_json(json_t *doc) {
    json_dumpf(doc, stdout, JSON_INDENT(1) | JSON_REAL_PRECISION(17));
    printf("\n");
    json_decref(doc);
}

// A run's summary from the catalogue. Step time t_s = max over ranks of step_ms; the medians
// are over steps after the first (all steps when there is one).
typedef struct run_summary {
    int steps, ranks;
    double median_step_ms;  // NAN when unknown
    double tokens_per_s;    // tokens per step / median-of-steps, see parsers.h tokens_per_s
    double final_loss;
    long long final_step;
    double peak_bytes;  // max over steps and ranks of mem_total_peak_bytes
} run_summary;

static int summarize_run(sqlite3 *db, const char *run_id, run_summary *s) {
    s->steps = s->ranks = 0;
    s->median_step_ms = s->tokens_per_s = s->final_loss = s->peak_bytes = NAN;
    s->final_step = -1;
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(db,
                           "SELECT step, max(step_ms), count(*), max(mem_total_peak_bytes),"
                           " max(CASE WHEN rank = 0 THEN loss END) FROM metrics WHERE run_id = ?1"
                           " GROUP BY step ORDER BY step",
                           -1, &st, NULL) != SQLITE_OK)
        return -1;
    sqlite3_bind_text(st, 1, run_id, -1, SQLITE_TRANSIENT);
    int cap = 0, n = 0;
    double *t = NULL;
    long long *steps = NULL;
    while (sqlite3_step(st) == SQLITE_ROW) {
        if (n == cap) {
            cap = cap ? 2 * cap : 64;
            t = tb_xreallocarray(t, (size_t)cap, sizeof *t, "step times");
            steps = tb_xreallocarray(steps, (size_t)cap, sizeof *steps, "steps");
        }
        steps[n] = sqlite3_column_int64(st, 0);
        t[n] = sqlite3_column_type(st, 1) == SQLITE_NULL ? NAN : sqlite3_column_double(st, 1);
        if (sqlite3_column_int(st, 2) > s->ranks) s->ranks = sqlite3_column_int(st, 2);
        if (sqlite3_column_type(st, 3) != SQLITE_NULL &&
            (isnan(s->peak_bytes) || sqlite3_column_double(st, 3) > s->peak_bytes))
            s->peak_bytes = sqlite3_column_double(st, 3);
        if (sqlite3_column_type(st, 4) != SQLITE_NULL) {
            s->final_loss = sqlite3_column_double(st, 4);
            s->final_step = steps[n];
        }
        n++;
    }
    sqlite3_finalize(st);
    s->steps = n;
    // steps after the first (the warmup); all of them when there is just one
    int k = 0;
    for (int i = 0; i < n; i++)
        if ((steps[i] > 1 || n == 1) && !isnan(t[i])) t[k++] = t[i];
    if (k > 0) {
        double *tps = tb_xcalloc((size_t)k, sizeof *tps, "per-step throughput");
        double tokens = NAN;
        if (sqlite3_prepare_v2(db,
                               "SELECT json_extract(config, '$.global_batch_size') * json_extract(config, "
                               "'$.seq_length') FROM runs WHERE run_id = ?1",
                               -1, &st, NULL) == SQLITE_OK) {
            sqlite3_bind_text(st, 1, run_id, -1, SQLITE_TRANSIENT);
            if (sqlite3_step(st) == SQLITE_ROW && sqlite3_column_type(st, 0) != SQLITE_NULL)
                tokens = sqlite3_column_double(st, 0);
            sqlite3_finalize(st);
        }
        for (int i = 0; i < k; i++) tps[i] = tokens / (t[i] / 1000.0);
        s->median_step_ms = tb_median(t, k);
        s->tokens_per_s = tb_median(tps, k);
        free(tps);
    }
    free(t);
    free(steps);
    return 0;
}

// "%.Ng" or "-" for NAN
static const char *num(char *buf, size_t size, double v, int digits) {
    if (isnan(v)) snprintf(buf, size, "-");
    else snprintf(buf, size, "%.*g", digits, v);
    return buf;
}

// A metrics cell: "-" when absent, a non-finite value as the catalogue keeps it ("NaN",
// "Infinity"), else the number (scaled).
static const char *cell(char *buf, size_t size, sqlite3_stmt *st, int col, double scale, int digits) {
    switch (sqlite3_column_type(st, col)) {
    case SQLITE_NULL: return num(buf, size, NAN, digits);
    case SQLITE_TEXT: snprintf(buf, size, "%s", (const char *)sqlite3_column_text(st, col)); return buf;
    default: return num(buf, size, sqlite3_column_double(st, col) * scale, digits);
    }
}

static void commit_text(char *out, size_t size, const char *commit, int dirty) {
    snprintf(out, size, "%.12s%s", *commit ? commit : "-", dirty ? "+dirty" : "");
}

// The run id a RUN argument names: the run id itself, a unique prefix, or a record directory.
static int resolve_run(cli *c, const char *arg, char *out, size_t size) {
    tb_run_arg dir;
    tb_error err;
    if (strchr(arg, '/') || access(arg, F_OK) == 0) {
        if (tb_run_arg_resolve(arg, c->artifacts, &dir, &err) != 0) {
            fprintf(stderr, "%s: %s\n", c->name, err.msg);
            return TB_EXIT_FAILURE;
        }
        if (!dir.run_id[0]) {
            fprintf(stderr, "%s: %s is a run directory, not a record (no manifest.json): %s reads recorded runs; "
                            "tracebook steps, comm, moe, ckpt and hang read a run directory\n", c->name, arg, c->name);
            return TB_EXIT_FAILURE;
        }
        arg = dir.run_id;
    }
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(c->db, "SELECT run_id FROM runs WHERE substr(run_id, 1, length(?1)) = ?1 ORDER BY run_id",
                           -1, &st, NULL) != SQLITE_OK)
        return sql_error(c);
    sqlite3_bind_text(st, 1, arg, -1, SQLITE_TRANSIENT);
    int n = 0, exact = 0;
    char first[256] = "";
    while (sqlite3_step(st) == SQLITE_ROW) {
        if (!strcmp(col(st, 0), arg)) exact = 1;
        if (n == 0 || exact) snprintf(first, sizeof first, "%s", col(st, 0));
        n++;
    }
    sqlite3_finalize(st);
    if (n == 0) {
        fprintf(stderr, "%s: no run '%s' in %s (tracebook ls lists them)\n", c->name, arg, c->artifacts);
        return TB_EXIT_FAILURE;
    }
    if (n > 1 && !exact) {
        fprintf(stderr, "%s: '%s' names %d runs; give more of the id\n", c->name, arg, n);
        return TB_EXIT_FAILURE;
    }
    snprintf(out, size, "%s", exact ? arg : first);
    return 0;
}

// ---------------------------------------------------------------------------------------
// ls

static int ls_experiments(cli *c) {
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(
            c->db,
            "SELECT e.name, e.version, coalesce(e.question, ''), count(r.run_id),"
            " coalesce(sum(r.status = 'finished'), 0), coalesce(sum(r.status = 'failed'), 0),"
            " coalesce(sum(r.status = 'running'), 0), coalesce(sum(r.status = 'incomplete'), 0),"
            " coalesce(sum(r.status = 'unreadable'), 0),"
            " (SELECT count(*) FROM claims c WHERE c.experiment = e.name AND c.version = e.version),"
            " (SELECT count(*) FROM claims c WHERE c.experiment = e.name AND c.version = e.version"
            "  AND c.proven_at IS NOT NULL)"
            " FROM experiments e LEFT JOIN runs r ON r.experiment = e.name AND r.version = e.version"
            " GROUP BY e.name, e.version ORDER BY e.name, e.version",
            -1, &st, NULL) != SQLITE_OK)
        return sql_error(c);
    if (!c->json)
        printf("%-24s %7s %5s %9s %7s %8s %11s %11s %8s  %s\n", "experiment", "version", "runs", "finished", "failed",
               "running", "incomplete", "unreadable", "claims", "question");
    int rows = 0;
    json_t *list = json_array();
    while (sqlite3_step(st) == SQLITE_ROW) {
        if (c->json) {
            json_array_append_new(
                list, json_pack("{s:s, s:i, s:s, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:i}", "name", col(st, 0), "version",
                                sqlite3_column_int(st, 1), "question", col(st, 2), "runs", sqlite3_column_int(st, 3),
                                "finished", sqlite3_column_int(st, 4), "failed", sqlite3_column_int(st, 5), "running",
                                sqlite3_column_int(st, 6), "incomplete", sqlite3_column_int(st, 7), "unreadable",
                                sqlite3_column_int(st, 8), "claims", sqlite3_column_int(st, 9), "claims_proven",
                                sqlite3_column_int(st, 10)));
            continue;
        }
        char version[32], claims[32];
        snprintf(version, sizeof version, "v%d", sqlite3_column_int(st, 1));
        snprintf(claims, sizeof claims, "%d/%d", sqlite3_column_int(st, 10), sqlite3_column_int(st, 9));
        printf("%-24s %7s %5d %9d %7d %8d %11d %11d %8s  %s\n", col(st, 0), version, sqlite3_column_int(st, 3),
               sqlite3_column_int(st, 4), sqlite3_column_int(st, 5), sqlite3_column_int(st, 6),
               sqlite3_column_int(st, 7), sqlite3_column_int(st, 8), claims, col(st, 2));
        rows++;
    }
    sqlite3_finalize(st);
    if (c->json) print_json(json_pack("{s:s, s:o}", "artifacts", c->artifacts, "experiments", list));
    else json_decref(list);
    if (c->json) return 0;
    if (!rows) printf("(no experiments under %s)\n", c->artifacts);
    else printf("(claims: proven/total)\n");
    return 0;
}

static int ls_runs(cli *c, const char *experiment) {
    sqlite3_stmt *versions;
    if (sqlite3_prepare_v2(c->db,
                           "SELECT version, coalesce(question, ''), coalesce(runbook_path, ''),"
                           " coalesce(runbook_sha256, '') FROM experiments WHERE name = ?1 ORDER BY version",
                           -1, &versions, NULL) != SQLITE_OK)
        return sql_error(c);
    sqlite3_stmt *runs;
    if (sqlite3_prepare_v2(c->db,
                           "SELECT run_id, status, coalesce(\"commit\", ''), coalesce(dirty, 0), repetition,"
                           " coalesce(sweep_point, ''), coalesce(replay_of, '') FROM runs"
                           " WHERE experiment = ?1 AND version = ?2 ORDER BY start IS NULL, start, run_id",
                           -1, &runs, NULL) != SQLITE_OK) {
        sqlite3_finalize(versions);
        return sql_error(c);
    }
    sqlite3_bind_text(versions, 1, experiment, -1, SQLITE_TRANSIENT);
    int nversions = 0;
    json_t *jversions = json_array();
    while (sqlite3_step(versions) == SQLITE_ROW) {
        int version = sqlite3_column_int(versions, 0);
        json_t *jruns = json_array();
        if (c->json)
            json_array_append_new(jversions, json_pack("{s:i, s:s, s:s, s:s, s:o}", "version", version, "question",
                                                       col(versions, 1), "runbook_path", col(versions, 2),
                                                       "runbook_sha256", col(versions, 3), "runs", jruns));
        if (!c->json) printf("%s%s v%d: %s\n", nversions ? "\n" : "", experiment, version,
               *col(versions, 1) ? col(versions, 1) : "(no question recorded)");
        if (!c->json && *col(versions, 2)) printf("  runbook %s (sha256 %.12s)\n", col(versions, 2), col(versions, 3));
        if (!c->json)
            printf("  %-28s %-10s %-19s %3s  %14s  %s\n", "run id", "status", "commit", "rep", "tok/s (median)",
                   "sweep point");
        sqlite3_bind_text(runs, 1, experiment, -1, SQLITE_TRANSIENT);
        sqlite3_bind_int(runs, 2, version);
        int n = 0;
        while (sqlite3_step(runs) == SQLITE_ROW) {
            char commit[64], rep[16], tps[32];
            commit_text(commit, sizeof commit, col(runs, 2), sqlite3_column_int(runs, 3));
            if (sqlite3_column_type(runs, 4) == SQLITE_NULL) snprintf(rep, sizeof rep, "-");
            else snprintf(rep, sizeof rep, "%d", sqlite3_column_int(runs, 4));
            run_summary s;
            summarize_run(c->db, col(runs, 0), &s);
            const char *sweep = *col(runs, 5) && strcmp(col(runs, 5), "{}") ? col(runs, 5) : "-";
            if (c->json) {
                json_array_append_new(
                    jruns, json_pack("{s:s, s:s, s:s, s:b, s:o, s:o, s:o, s:o}", "run_id", col(runs, 0), "status",
                                     col(runs, 1), "commit", col(runs, 2), "dirty", sqlite3_column_int(runs, 3),
                                     "repetition", col_json(runs, 4), "sweep_point", col_parsed(runs, 5), "replay_of",
                                     *col(runs, 6) ? json_string(col(runs, 6)) : json_null(), "tokens_per_s",
                                     real_or_null(s.tokens_per_s)));
                n++;
                continue;
            }
            if (isnan(s.tokens_per_s)) snprintf(tps, sizeof tps, "-");
            else snprintf(tps, sizeof tps, "%.1f", s.tokens_per_s);
            printf("  %-28s %-10s %-19s %3s  %14s  %s%s%s\n", col(runs, 0), col(runs, 1), commit, rep, tps, sweep,
                   *col(runs, 6) ? "  replay of " : "", col(runs, 6));
            n++;
        }
        sqlite3_reset(runs);
        if (!c->json) json_decref(jruns);
        if (!n && !c->json) printf("  (no runs)\n");
        nversions++;
    }
    sqlite3_finalize(versions);
    sqlite3_finalize(runs);
    if (!nversions) {
        json_decref(jversions);
        fprintf(stderr, "%s: no experiment '%s' in %s\n", c->name, experiment, c->artifacts);
        return TB_EXIT_FAILURE;
    }
    if (c->json) print_json(json_pack("{s:s, s:o}", "experiment", experiment, "versions", jversions));
    else json_decref(jversions);
    return 0;
}

int tracebook_ls_main(int argc, char **argv) {
    cli c;
    int rc;
    if (cli_parse(&c, &ls_command, argc, argv, &rc) != 0) return rc;
    if (c.npositional) {  // the old spelling
        tb_error err;
        tb_fail(&err, "tracebook ls: the experiment is named with --experiment in every command now (docs/CLI.md): "
                      "tracebook ls --experiment %s", c.positional[0]);
        return tb_command_usage_error(&ls_command, &err);
    }
    if (cli_open(&c, &rc) != 0) return rc;
    rc = c.experiment ? ls_runs(&c, c.experiment) : ls_experiments(&c);
    sqlite3_close(c.db);
    return rc;
}

// ---------------------------------------------------------------------------------------
// show

static void print_argv(const char *argv_json) {
    json_t *argv = json_loads(argv_json, 0, NULL);
    size_t i;
    json_t *a;
    json_array_foreach(argv, i, a) {
        const char *s = json_string_value(a);
        int plain = s && *s && !strpbrk(s, " \t\n'\"$`\\*?;&|<>()[]{}!#~");
        printf(plain ? "%s%s" : "%s'%s'", i ? " " : "", s ? s : "");
    }
    json_decref(argv);
}

// Prints the config's keys, nested objects as dotted keys ("derived.num_microbatches").
static void print_config_keys(json_t *obj, const char *prefix) {
    const char *key;
    json_t *v;
    json_object_foreach(obj, key, v) {
        char full[256];
        snprintf(full, sizeof full, "%s%s%s", prefix, *prefix ? "." : "", key);
        if (json_is_object(v)) {
            print_config_keys(v, full);
            continue;
        }
        char *text = json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT | JSON_REAL_PRECISION(15));
        printf("  %-44s %s\n", full, text ? text : "?");
        free(text);
    }
}

// The per-step rows show prints: step, the slowest rank's step_ms, rank 0's loss, grad norm,
// tok/s, TFLOP/s, and the max over ranks of the total peak.
static const char show_steps_sql[] =
    "SELECT step, max(step_ms), max(CASE WHEN rank = 0 THEN loss END),"
    " max(CASE WHEN rank = 0 THEN grad_norm END), max(CASE WHEN rank = 0 THEN tokens_per_s END),"
    " max(CASE WHEN rank = 0 THEN tflops END), max(mem_total_peak_bytes)"
    " FROM metrics WHERE run_id = ?1 GROUP BY step ORDER BY step";

// show --json; st is the run's row (finalized here).
static int show_run_json(cli *c, const char *run_id, sqlite3_stmt *st) {
    json_t *doc = json_pack("{s:s, s:s, s:i, s:s, s:s, s:o, s:s, s:o, s:o, s:o, s:o, s:o, s:o, s:s, s:s, s:b, s:o, s:o, s:o}",
                            "run_id", run_id, "experiment", col(st, 0), "version", sqlite3_column_int(st, 1),
                            "question", col(st, 2), "status", col(st, 3), "exit_status", col_json(st, 4), "record_dir",
                            col(st, 5), "start", col_json(st, 6), "end", col_json(st, 7), "repetition",
                            col_json(st, 8), "seed", col_json(st, 9), "sweep_point", col_parsed(st, 10), "replay_of",
                            strcmp(col(st, 11), "-") ? json_string(col(st, 11)) : json_null(), "commit", col(st, 12),
                            "branch", col(st, 13), "dirty", sqlite3_column_int(st, 14), "argv", col_parsed(st, 15),
                            "config", col_parsed(st, 16), "problem",
                            *col(st, 17) ? json_string(col(st, 17)) : json_null());
    sqlite3_finalize(st);
    // start / end are "-" when absent (the text's placeholder): null
    for (int k = 0; k < 2; k++) {
        const char *key = k ? "end" : "start";
        if (!strcmp(json_string_value(json_object_get(doc, key)) ? json_string_value(json_object_get(doc, key)) : "", "-"))
            json_object_set_new(doc, key, json_null());
    }
    run_summary s;
    summarize_run(c->db, run_id, &s);
    json_t *steps = json_array();
    if (sqlite3_prepare_v2(c->db, show_steps_sql, -1, &st, NULL) != SQLITE_OK) {
        json_decref(doc);
        json_decref(steps);
        return sql_error(c);
    }
    sqlite3_bind_text(st, 1, run_id, -1, SQLITE_TRANSIENT);
    while (sqlite3_step(st) == SQLITE_ROW)
        json_array_append_new(steps, json_pack("{s:I, s:o, s:o, s:o, s:o, s:o, s:o}", "step",
                                               (json_int_t)sqlite3_column_int64(st, 0), "step_ms", col_json(st, 1),
                                               "loss", col_json(st, 2), "grad_norm", col_json(st, 3), "tokens_per_s",
                                               col_json(st, 4), "tflops", col_json(st, 5), "peak_bytes", col_json(st, 6)));
    sqlite3_finalize(st);
    json_object_set_new(doc, "steps", steps);
    json_object_set_new(doc, "summary",
                        json_pack("{s:i, s:i, s:o, s:o, s:o, s:o, s:o}", "ranks", s.ranks, "steps", s.steps,
                                  "median_step_ms", real_or_null(s.median_step_ms), "tokens_per_s",
                                  real_or_null(s.tokens_per_s), "final_loss", real_or_null(s.final_loss), "final_step",
                                  s.final_step >= 0 ? json_integer(s.final_step) : json_null(), "peak_bytes",
                                  real_or_null(s.peak_bytes)));
    print_json(doc);
    return 0;
}

static int show_run_text(cli *c, const char *run_id, sqlite3_stmt *st);

// A record catalogued as unreadable is shown as far as it could be read, and fails the command.
static int show_run(cli *c, const char *run_id) {
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(c->db,
                           "SELECT r.experiment, r.version, coalesce(e.question, ''), r.status, r.exit_status,"
                           " r.record_dir, coalesce(r.start, '-'), coalesce(r.\"end\", '-'), r.repetition, r.seed,"
                           " coalesce(r.sweep_point, '-'), coalesce(r.replay_of, '-'), coalesce(r.\"commit\", ''),"
                           " coalesce(r.branch, '-'), coalesce(r.dirty, 0), coalesce(r.argv, ''),"
                           " coalesce(r.config, ''), coalesce(r.problem, '')"
                           " FROM runs r LEFT JOIN experiments e ON e.name = r.experiment AND e.version = r.version"
                           " WHERE r.run_id = ?1",
                           -1, &st, NULL) != SQLITE_OK)
        return sql_error(c);
    sqlite3_bind_text(st, 1, run_id, -1, SQLITE_TRANSIENT);
    if (sqlite3_step(st) != SQLITE_ROW) {
        sqlite3_finalize(st);
        return sql_error(c);
    }
    char problem[1024] = "";
    const int unreadable = !strcmp(col(st, 3), "unreadable");
    if (unreadable) snprintf(problem, sizeof problem, "%s", col(st, 17));
    int rc = c->json ? show_run_json(c, run_id, st) : show_run_text(c, run_id, st);
    if (rc == 0 && unreadable) {
        fprintf(stderr, "tracebook show: %s: the record is unreadable: %s\n", run_id, problem);
        rc = TB_EXIT_FAILURE;
    }
    return rc;
}

// show's text; st is the run's row (finalized here).
static int show_run_text(cli *c, const char *run_id, sqlite3_stmt *st) {
    printf("run %s\n", run_id);
    printf("  %-12s %s v%d%s%s\n", "experiment", col(st, 0), sqlite3_column_int(st, 1), *col(st, 2) ? ": " : "",
           col(st, 2));
    printf("  %-12s %s", "status", col(st, 3));
    if (sqlite3_column_type(st, 4) != SQLITE_NULL) printf(" (exit %d)", sqlite3_column_int(st, 4));
    printf("\n  %-12s %s\n", "record", col(st, 5));
    printf("  %-12s %s .. %s\n", "time", col(st, 6), col(st, 7));
    printf("  %-12s repetition %s, seed %s, sweep point %s, replay of %s\n", "identity",
           sqlite3_column_type(st, 8) == SQLITE_NULL ? "-" : col(st, 8),
           sqlite3_column_type(st, 9) == SQLITE_NULL ? "-" : col(st, 9), col(st, 10), col(st, 11));
    printf("  %-12s %s (branch %s, %s)\n", "commit", *col(st, 12) ? col(st, 12) : "-", col(st, 13),
           sqlite3_column_int(st, 14) ? "DIRTY" : "clean");
    if (*col(st, 17)) printf("  %-12s %s\n", "problem", col(st, 17));
    if (*col(st, 15)) {
        printf("  %-12s ", "command");
        print_argv(col(st, 15));
        printf("\n");
    }
    json_t *config = *col(st, 16) ? json_loads(col(st, 16), 0, NULL) : NULL;
    sqlite3_finalize(st);
    if (config) {
        printf("\nconfig:\n");
        print_config_keys(config, "");
        json_decref(config);
    }

    run_summary s;
    summarize_run(c->db, run_id, &s);
    if (sqlite3_prepare_v2(c->db, show_steps_sql, -1, &st, NULL) != SQLITE_OK)
        return sql_error(c);
    sqlite3_bind_text(st, 1, run_id, -1, SQLITE_TRANSIENT);
    printf("\nsteps (%d rank%s; step ms: the slowest rank's; loss, grad norm, tok/s, TFLOP/s: rank 0's; peak: max "
           "over ranks of bytes in use at once):\n",
           s.ranks, s.ranks == 1 ? "" : "s");
    printf("  %6s  %12s  %10s  %10s  %12s  %8s  %10s\n", "step", "loss", "grad norm", "step ms", "tok/s", "TFLOP/s",
           "peak MiB");
    while (sqlite3_step(st) == SQLITE_ROW) {
        char b[6][32];
        printf("  %6lld  %12s  %10s  %10s  %12s  %8s  %10s\n", (long long)sqlite3_column_int64(st, 0),
               cell(b[0], 32, st, 2, 1, 8), cell(b[1], 32, st, 3, 1, 5), cell(b[2], 32, st, 1, 1, 5),
               cell(b[3], 32, st, 4, 1, 8), cell(b[4], 32, st, 5, 1, 4), cell(b[5], 32, st, 6, 1 / 1048576.0, 5));
    }
    sqlite3_finalize(st);
    if (!s.steps) printf("  (no metrics)\n");
    else {
        char b[3][32];
        printf("median over steps after the first: step %s ms, %s tok/s; final loss %s (step %lld)\n",
               num(b[0], 32, s.median_step_ms, 6), num(b[1], 32, s.tokens_per_s, 8), num(b[2], 32, s.final_loss, 8),
               s.final_step);
    }
    return 0;
}

int tracebook_show_main(int argc, char **argv) {
    cli c;
    int rc;
    if (cli_start(&c, &show_command, argc, argv, &rc) != 0) return rc;
    char run_id[256];
    rc = resolve_run(&c, c.positional[0], run_id, sizeof run_id);
    if (rc == 0) rc = show_run(&c, run_id);
    sqlite3_close(c.db);
    return rc;
}

// ---------------------------------------------------------------------------------------
// diff

void tb_config_flatten(json_t *obj, const char *prefix, json_t *out) {
    const char *key;
    json_t *v;
    json_object_foreach(obj, key, v) {
        char full[256];
        snprintf(full, sizeof full, "%s%s%s", prefix, *prefix ? "." : "", key);
        if (json_is_object(v) && json_object_size(v)) tb_config_flatten(v, full, out);
        else json_object_set(out, full, v);
    }
}

json_t *tb_config_differing_keys(json_t *const *flat, int n) {
    json_t *keys = json_array(), *seen = json_object();
    for (int r = 0; r < n; r++) {
        const char *key;
        json_t *v;
        json_object_foreach(flat[r], key, v) {
            if (json_object_get(seen, key)) continue;
            json_object_set_new(seen, key, json_true());
            int same = 1;
            for (int o = 0; o < n && same; o++) {
                json_t *w = json_object_get(flat[o], key);
                same = w && json_equal(v, w);
            }
            if (!same) json_array_append_new(keys, json_string(key));
        }
    }
    json_decref(seen);
    return keys;
}

// The run's config flattened; its commit text and label ("quickstart v1, finished"), and the
// same ids into info (experiment, version, status).
static json_t *run_config_flat(cli *c, const char *run_id, char *commit, size_t commit_size, char *label,
                               size_t label_size, json_t *info) {
    sqlite3_stmt *st;
    json_t *flat = json_object();
    if (sqlite3_prepare_v2(c->db,
                           "SELECT coalesce(config, ''), coalesce(\"commit\", ''), coalesce(dirty, 0), experiment,"
                           " version, status FROM runs WHERE run_id = ?1",
                           -1, &st, NULL) != SQLITE_OK)
        return flat;
    sqlite3_bind_text(st, 1, run_id, -1, SQLITE_TRANSIENT);
    if (sqlite3_step(st) == SQLITE_ROW) {
        json_t *config = json_loads(col(st, 0), 0, NULL);
        if (config) tb_config_flatten(config, "", flat);
        json_decref(config);
        commit_text(commit, commit_size, col(st, 1), sqlite3_column_int(st, 2));
        snprintf(label, label_size, "%s v%d, %s", col(st, 3), sqlite3_column_int(st, 4), col(st, 5));
        json_object_set_new(info, "experiment", json_string(col(st, 3)));
        json_object_set_new(info, "version", json_integer(sqlite3_column_int(st, 4)));
        json_object_set_new(info, "status", json_string(col(st, 5)));
        json_object_set_new(info, "commit", json_string(col(st, 1)));
        json_object_set_new(info, "dirty", json_boolean(sqlite3_column_int(st, 2)));
    }
    sqlite3_finalize(st);
    return flat;
}

static void print_metric_row(const char *name, double a, double b, int digits) {
    char x[32], y[32], r[32];
    snprintf(r, sizeof r, "-");
    if (!isnan(a) && !isnan(b) && a != 0) snprintf(r, sizeof r, "%.4g", b / a);
    printf("  %-46s %18s %18s %10s\n", name, num(x, sizeof x, a, digits), num(y, sizeof y, b, digits), r);
}

// The record's run directory (record_dir/run) of a run id, into dir. 0, or an exit status.
static int run_dir_of(cli *c, const char *run_id, char *dir, size_t size) {
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(c->db, "SELECT record_dir FROM runs WHERE run_id = ?1", -1, &st, NULL) != SQLITE_OK)
        return sql_error(c);
    sqlite3_bind_text(st, 1, run_id, -1, SQLITE_TRANSIENT);
    int rc = sqlite3_step(st) == SQLITE_ROW ? 0 : TB_EXIT_FAILURE;
    if (rc == 0) snprintf(dir, size, "%s/" TB_RECORD_RUN_DIR, col(st, 0));
    sqlite3_finalize(st);
    return rc;
}

int tracebook_diff_main(int argc, char **argv) {
    cli c;
    int rc;
    if (cli_start(&c, &diff_command, argc, argv, &rc) != 0) return rc;
    char ids[2][256];
    rc = resolve_run(&c, c.positional[0], ids[0], sizeof ids[0]);
    if (rc == 0) rc = resolve_run(&c, c.positional[1], ids[1], sizeof ids[1]);
    if (rc != 0) {
        sqlite3_close(c.db);
        return rc;
    }
    char commit[2][64] = {"-", "-"}, label[2][300] = {"", ""};
    json_t *flat[2], *doc = json_object();
    for (int k = 0; k < 2; k++) {
        json_t *info = json_pack("{s:s, s:s}", "run_id", ids[k], "commit", "");
        flat[k] = run_config_flat(&c, ids[k], commit[k], sizeof commit[k], label[k], sizeof label[k], info);
        json_object_set_new(doc, k ? "b" : "a", info);
    }
    if (!c.json) {
        printf("  %-46s %-30s %-30s\n", "", "A", "B");
        printf("  %-46s %-30s %-30s\n", "run", ids[0], ids[1]);
        printf("  %-46s %-30s %-30s\n", "experiment", label[0], label[1]);
        printf("  %-46s %-30s %-30s\n", "commit", commit[0], commit[1]);
    }

    // config keys that differ, in A's order then B's extra keys
    json_t *keys = tb_config_differing_keys(flat, 2), *jdiff = json_array();
    int differ = 0, equal = (int)json_object_size(flat[0]);
    size_t i;
    json_t *k;
    json_array_foreach(keys, i, k) {
        json_t *a = json_object_get(flat[0], json_string_value(k)), *b = json_object_get(flat[1], json_string_value(k));
        if (a) equal--;
        differ++;
        if (c.json) {
            json_array_append_new(jdiff, json_pack("{s:s, s:O?, s:O?}", "key", json_string_value(k), "a", a, "b", b));
            continue;
        }
        if (differ == 1) printf("\nconfig (keys that differ):\n");
        char *ta = a ? json_dumps(a, JSON_ENCODE_ANY | JSON_COMPACT | JSON_REAL_PRECISION(15)) : NULL;
        char *tb = b ? json_dumps(b, JSON_ENCODE_ANY | JSON_COMPACT | JSON_REAL_PRECISION(15)) : NULL;
        printf("  %-46s %-30s %-30s\n", json_string_value(k), ta ? ta : "(absent)", tb ? tb : "(absent)");
        free(ta);
        free(tb);
    }
    if (c.json) {
        json_object_set_new(doc, "config_differences", jdiff);
        json_object_set_new(doc, "config_equal", json_integer(equal));
    } else {
        json_decref(jdiff);
        printf("%s(%d config key%s differ, %d equal)\n", differ ? "" : "\n", differ, differ == 1 ? "" : "s", equal);
    }
    json_decref(keys);
    json_decref(flat[0]);
    json_decref(flat[1]);

    run_summary s[2];
    for (int r = 0; r < 2; r++) summarize_run(c.db, ids[r], &s[r]);
    const struct {
        const char *key, *text;
        double a, b;
        int digits;
    } metrics[] = {
        {"median_step_ms", "median step ms (steps > 1, slowest rank)", s[0].median_step_ms, s[1].median_step_ms, 6},
        {"tokens_per_s", "tok/s (median over steps > 1)", s[0].tokens_per_s, s[1].tokens_per_s, 8},
        {"final_loss", "final loss (rank 0, last step)", s[0].final_loss, s[1].final_loss, 8},
        {"peak_bytes", "peak memory bytes (at once, max over ranks)", s[0].peak_bytes, s[1].peak_bytes, 12},
        {"steps", "steps", s[0].steps, s[1].steps, 10},
        {"ranks", "ranks", s[0].ranks, s[1].ranks, 10},
    };
    json_t *jmetrics = json_object();
    if (!c.json) printf("\nmetrics:\n  %-46s %18s %18s %10s\n", "", "A", "B", "B/A");
    for (size_t m = 0; m < sizeof metrics / sizeof *metrics; m++) {
        if (!c.json) {
            print_metric_row(metrics[m].text, metrics[m].a, metrics[m].b, metrics[m].digits);
            continue;
        }
        double ratio = !isnan(metrics[m].a) && !isnan(metrics[m].b) && metrics[m].a != 0 ? metrics[m].b / metrics[m].a : NAN;
        json_object_set_new(jmetrics, metrics[m].key,
                            json_pack("{s:o, s:o, s:o}", "a", real_or_null(metrics[m].a), "b",
                                      real_or_null(metrics[m].b), "ratio", real_or_null(ratio)));
    }
    if (c.json) json_object_set_new(doc, "metrics", jmetrics);
    else json_decref(jmetrics);
    if (c.phases) {
        char dirs[2][4096];
        for (int r = 0; r < 2 && rc == 0; r++) rc = run_dir_of(&c, ids[r], dirs[r], sizeof dirs[r]);
        tb_error err;
        json_t *phases = NULL;
        if (rc == 0 && c.json && !(phases = tb_phase_diff_json(dirs[0], dirs[1], &err))) rc = TB_EXIT_FAILURE;
        else if (rc == 0 && !c.json && tb_phase_diff(stdout, dirs[0], dirs[1], &err) != 0) rc = TB_EXIT_FAILURE;
        if (rc == TB_EXIT_FAILURE) fprintf(stderr, "%s --phases: %s\n", c.name, err.msg);
        if (phases) json_object_set_new(doc, "phases", phases);
    }
    if (c.json && rc == 0) print_json(doc);
    else json_decref(doc);
    sqlite3_close(c.db);
    return rc;
}
