// stability.c — the stability gate (stability.h): conditions.json of every timed record of a
// claim, its samples (repetitions, steps, windows) and the median's interval.
#include "prove/stability.h"

#include <dirent.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/error.h"
#include "core/run_dir.h"
#include "core/xalloc.h"
#include "prove/parsers.h"
#include "prove/selection.h"
#include "records/record.h"
#include "records/record_verify.h"
#include "prove/timing_interval.h"

#define STAB_PATH_MAX 4096

// Reasons and accepted conditions, collected as text (open_memstream: grows as needed).
typedef struct gate {
    FILE *reasons, *accepted;
    char *reasons_buf, *accepted_buf;
    size_t reasons_len, accepted_len;
    int timed;
    tb_sampling sampling;
    // the cores the first timed record's threads occupied (min(threads, usable cores)):
    // runs whose timings are compared must have run on the same number
    double occupied;
    char occupied_run[128];
    int paired;      // judging the sides of a paired ratio: their own intervals are not the verdict
} gate;

// Appends a line unless the same line is there already: a record shared by a ratio's two
// sides is judged once.
__attribute__((format(printf, 3, 4))) static void add_line(FILE *f, char **buf, const char *fmt, ...) {
    char line[STAB_PATH_MAX + 512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    fflush(f);
    if (*buf && strstr(*buf, line)) return;
    fprintf(f, "%s\n", line);
}

static int pct(double fraction) { return (int)lround(100 * fraction); }

// What tb_record_verify_files says of one file: its first problem, and the file as it was
// hashed (so that what is read of it after is checked to be what was hashed).
typedef struct one_file {
    char problem[512], path[STAB_PATH_MAX + 64];
    tb_file_stamp stamp;
    int stamped;
} one_file;

static void note_problem(void *arg, const char *text) {
    one_file *f = arg;
    if (!f->problem[0]) snprintf(f->problem, sizeof f->problem, "%s", text);
}

static void note_stamp(void *arg, const char *path, const tb_file_stamp *stamp) {
    one_file *f = arg;
    f->stamp = *stamp, f->stamped = 1;
    snprintf(f->path, sizeof f->path, "%s", path);
}

static double number_at(json_t *o, const char *key, const char *sub, int *ok) {
    json_t *v = json_object_get(o, key);
    if (sub) v = json_object_get(v, sub);
    if (!json_is_number(v)) {
        *ok = 0;
        return NAN;
    }
    return json_number_value(v);
}

// /proc/stat counts each CPU's time in whole ticks (USER_HZ: 10 ms on Linux), so a figure
// taken as the difference of two readings, as the host's busy time and steal are, is off by
// up to a tick per online CPU. As a share of the window's core time (wall × usable cores)
// that resolution must be finer than the thresholds, or a window of a few ticks reads a host
// beside two busy loops as quiet (13 ms on 2 CPUs counted 1 tick of 2.6). The conditions' own
// host.stat_tick_s, else this host's (records older than it; USER_HZ is part of Linux's ABI).
// 0, or -1 with the "not verifiable: ..." reason in line.
static int window_resolves(json_t *c, double wall, double usable, const char *run, char line[512]) {
    json_t *host = json_object_get(c, "host");
    json_t *tick_v = json_object_get(host, "stat_tick_s"), *online_v = json_object_get(json_object_get(c, "cores"), "online");
    const double tick = json_is_number(tick_v) ? json_number_value(tick_v) : 1.0 / (double)sysconf(_SC_CLK_TCK);
    const double online = json_is_number(online_v) && json_number_value(online_v) >= usable ? json_number_value(online_v)
                                                                                           : usable;
    const double threshold = TB_STABLE_MAX_STEAL_SHARE < TB_STABLE_MAX_OTHER_SHARE ? TB_STABLE_MAX_STEAL_SHARE
                                                                                    : TB_STABLE_MAX_OTHER_SHARE;
    const double resolution = online * tick / (wall * usable);
    if (tick > 0 && resolution <= threshold) return 0;
    snprintf(line, 512,
             "not verifiable: run %s timed %.0f ms, too short for /proc/stat to tell contention: its counters tick "
             "every %.0f ms on each of %.0f CPUs, +-%d%% of the window's core time against the %d%% threshold "
             "(a window of at least %.0f ms resolves it)",
             run, wall * 1e3, tick * 1e3, online, pct(resolution), pct(threshold),
             ceil(online * tick / (threshold * usable) * 1e3));
    return -1;
}

// The host's contention during a run (other processes, the hypervisor's steal) against the
// thresholds: one "contended: ..." line per gate crossed, into lines; returns their count.
static int host_contention(double others, double steal, double wall, double usable, const char *run,
                           char lines[2][256]) {
    int n = 0;
    const double steal_share = steal / (wall * usable);
    if (others > TB_STABLE_MAX_OTHER_SHARE)
        snprintf(lines[n++], sizeof lines[0],
                 "contended: other processes took %d%% of the cores during run %s (threshold %d%%)", pct(others), run,
                 pct(TB_STABLE_MAX_OTHER_SHARE));
    if (steal_share > TB_STABLE_MAX_STEAL_SHARE)
        snprintf(lines[n++], sizeof lines[0],
                 "contended: the hypervisor stole %d%% of the cores during run %s (steal %.3g s; threshold %d%%)",
                 pct(steal_share), run, steal, pct(TB_STABLE_MAX_STEAL_SHARE));
    return n;
}

// A record's conditions.json, loaded (NULL with why in err: no such file, not JSON).
static json_t *load_conditions(const char *record_dir, char *path, size_t size, json_error_t *jerr, tb_error *err) {
    char run_dir[STAB_PATH_MAX];
    if (tb_run_path(run_dir, sizeof run_dir, record_dir, TB_RECORD_RUN_DIR, err) != 0 ||
        tb_run_path(path, size, run_dir, TB_RUN_CONDITIONS, err) != 0)
        return NULL;
    json_t *c = json_load_file(path, 0, jerr);
    if (!c) tb_fail(err, "%s: line %d: %s", path, jerr->line, jerr->text);
    return c;
}

int tb_stability_contended(const char *record_dir, const char *run, char *why, size_t size) {
    char path[STAB_PATH_MAX];
    json_error_t jerr;
    tb_error err;
    why[0] = '\0';
    json_t *c = load_conditions(record_dir, path, sizeof path, &jerr, &err);
    if (!c) {
        snprintf(why, size, "%s", err.msg);
        return -1;
    }
    int ok = 1;
    const double wall = number_at(c, "wall_s", NULL, &ok), usable = number_at(c, "cores", "usable", &ok);
    json_t *host = json_object_get(c, "host");
    const double others = number_at(host, "other_processes_share", NULL, &ok),
                 steal = number_at(host, "steal_s", NULL, &ok);
    if (!ok || !(wall > 0) || !(usable >= 1)) {
        json_decref(c);
        snprintf(why, size, "%s lacks wall_s, cores.usable, host.other_processes_share or host.steal_s", path);
        return -1;
    }
    char unresolved[512];
    if (window_resolves(c, wall, usable, run, unresolved) != 0) {
        json_decref(c);
        snprintf(why, size, "%s", unresolved + strlen("not verifiable: "));
        return -1;
    }
    json_decref(c);
    char lines[2][256];
    const int n = host_contention(others, steal, wall, usable, run, lines);
    if (n) snprintf(why, size, "%s%s%s", lines[0], n > 1 ? "; " : "", n > 1 ? lines[1] + strlen("contended: ") : "");
    return n > 0;
}

// A repetition measured again because its first measurement was contended (the manifest's
// "supersedes", runbook_run.c's rerun_contended_): each measurement it replaces must be a
// record of the same version, the same sweep point and repetition, whose conditions.json —
// unaltered since it was recorded — shows the contention. Then the sample is the host's
// undisturbed one, and the replaced measurements are listed as accepted; otherwise a
// "selected:" reason: a timing sample left out without cause would let a runbook choose its
// samples.
// Each replaced record goes into the record's evidence ("replaces": run_id, record_dir and the
// file read), so that prove verifies it against its manifest and anchors like any it reads.
static void judge_remeasure(gate *g, const char *run, const char *record_dir, json_t *m, json_t *rec) {
    json_t *replaced = json_object_get(m, "supersedes");
    size_t i;
    json_t *entry;
    json_array_foreach(replaced, i, entry) {
        const char *old = json_string_value(json_object_get(entry, "run_id"));
        char old_dir[STAB_PATH_MAX], old_manifest[STAB_PATH_MAX + 32], why[STAB_PATH_MAX + 768] = "";
        const char *slash = strrchr(record_dir, '/');
        const int base = slash ? (int)(slash - record_dir) : 0;
        json_t *om = NULL;
        json_int_t rep = 0, old_rep = -1;
        one_file conditions_file = {.stamped = 0};
        if (!old || !tb_record_safe_path(old) || strchr(old, '/')) {
            snprintf(why, sizeof why, "its manifest's supersedes[%zu] names no run id", i);
        } else {
            snprintf(old_dir, sizeof old_dir, "%.*s%s%s", base, record_dir, slash ? "/" : "", old);
            snprintf(old_manifest, sizeof old_manifest, "%s/" TB_RECORD_MANIFEST, old_dir);
            tb_file_stamp st;  // a regular file (a FIFO would block the read), and verified below
            tb_error serr;
            om = tb_file_stamp_of(old_manifest, &st, &serr) == 0 ? json_load_file(old_manifest, 0, NULL) : NULL;
            if (!om)
                snprintf(why, sizeof why, "the record it replaces, %s, has no readable manifest", old_dir);
            else if (!tb_manifest_repetition(m, &rep) || !tb_manifest_repetition(om, &old_rep) || rep != old_rep ||
                     !json_equal(json_object_get(m, "sweep_point"), json_object_get(om, "sweep_point")))
                snprintf(why, sizeof why, "the run it replaces, %s, is another repetition or sweep point", old);
        }
        if (!why[0]) {
            // the replaced run's conditions as recorded: its manifest's sha256 of them
            const char *key = TB_RECORD_RUN_DIR "/" TB_RUN_CONDITIONS;
            json_t *listed = json_object_get(json_object_get(om, "files"), key);
            json_t *one = json_object();
            if (listed) json_object_set(one, key, listed);
            one_file *f = &conditions_file;
            if (!listed || tb_record_verify_files(old_dir, one, note_problem, note_stamp, f) != 1 || f->problem[0])
                snprintf(why, sizeof why, "the conditions of the run it replaces, %s, are not as recorded%s%s", old,
                         f->problem[0] ? ": " : "", f->problem);
            json_decref(one);
        }
        if (om) {
            char conditions[STAB_PATH_MAX + 64];
            snprintf(conditions, sizeof conditions, "%s/" TB_RECORD_RUN_DIR "/" TB_RUN_CONDITIONS, old_dir);
            if (!json_is_array(json_object_get(rec, "replaces"))) json_object_set_new(rec, "replaces", json_array());
            json_array_append_new(json_object_get(rec, "replaces"),
                                  json_pack("{s:s, s:s, s:[s]}", "run_id", old, "record_dir", old_dir, "files",
                                            conditions));
        }
        char contention[600] = "";
        if (!why[0] && tb_stability_contended(old_dir, old, contention, sizeof contention) != 1)
            snprintf(why, sizeof why, "the run it replaces, %s, was not measured contended (%s)", old,
                     contention[0] ? contention : "within every threshold");
        tb_error changed;  // what tb_stability_contended read is what was hashed
        if (!why[0] && conditions_file.stamped &&
            tb_file_unchanged(conditions_file.path, &conditions_file.stamp, &changed) != 0)
            snprintf(why, sizeof why, "the conditions of the run it replaces, %s: %s", old, changed.msg);
        if (why[0])
            add_line(g->reasons, &g->reasons_buf,
                     "selected: run %s replaces an earlier measurement of its repetition as contended, but %s: a "
                     "timing sample is left out only when it was measured contended",
                     run, why);
        else
            add_line(g->accepted, &g->accepted_buf,
                     "accepted: run %s measured its repetition again, replacing run %s: %s", run, old, contention);
        json_decref(om);
    }
}

// conditions.json of one record: oversubscription and contention. Appends the figures to
// text (the PROVEN evidence line). A replayed figure (replayed = 1) gives each rank a core of
// its own: neither oversubscription nor the thread counts of compared runs enter it, the
// contention of other processes and the hypervisor does.
static void judge_conditions(gate *g, json_t *rec, const char *run, const char *record_dir, int replayed,
                             char *text, size_t size) {
    char run_dir[STAB_PATH_MAX], path[STAB_PATH_MAX];
    tb_error err;
    if (tb_run_path(run_dir, sizeof run_dir, record_dir, TB_RECORD_RUN_DIR, &err) != 0 ||
        tb_run_path(path, sizeof path, run_dir, TB_RUN_CONDITIONS, &err) != 0) {
        add_line(g->reasons, &g->reasons_buf, "not verifiable: %s", err.msg);
        return;
    }
    json_error_t jerr;
    json_t *c = json_load_file(path, 0, &jerr);
    if (!c) {
        FILE *probe = fopen(path, "r");
        if (!probe)
            add_line(g->reasons, &g->reasons_buf,
                     "not verifiable: %s has no " TB_RUN_CONDITIONS ", so whether its timings were contended is "
                     "unknown",
                     record_dir);
        else
            add_line(g->reasons, &g->reasons_buf,
                     "not verifiable: %s: line %d: %s, so whether the timings of run %s were contended is unknown",
                     path, jerr.line, jerr.text, run);
        if (probe) fclose(probe);
        return;
    }
    // a conditions.json put there after the run is no evidence: the manifest must list it
    char manifest_path[STAB_PATH_MAX];
    snprintf(manifest_path, sizeof manifest_path, "%s/" TB_RECORD_MANIFEST, record_dir);
    json_t *manifest = json_load_file(manifest_path, 0, NULL);
    int listed = json_object_get(json_object_get(manifest, "files"), TB_RECORD_RUN_DIR "/" TB_RUN_CONDITIONS) != NULL;
    if (!listed) {
        json_decref(manifest);
        add_line(g->reasons, &g->reasons_buf,
                 "not verifiable: %s is not in %s, so it is no evidence of how the timings of run %s were measured",
                 path, manifest_path, run);
        json_decref(c);
        return;
    }
    int ok = 1;
    double wall = number_at(c, "wall_s", NULL, &ok), usable = number_at(c, "cores", "usable", &ok),
           threads = number_at(c, "threads", "total", &ok), cpu_share = number_at(c, "cpu_share", NULL, &ok);
    json_t *host = json_object_get(c, "host");
    double others = number_at(host, "other_processes_share", NULL, &ok), steal = number_at(host, "steal_s", NULL, &ok);
    if (!ok || !(wall > 0) || !(usable >= 1)) {
        // the engine writes null for a figure /proc did not give
        add_line(g->reasons, &g->reasons_buf,
                 "not verifiable: %s lacks wall_s, cores.usable, threads.total, cpu_share, "
                 "host.other_processes_share or host.steal_s (or they are not positive), so whether the timings of "
                 "run %s were contended is unknown",
                 path, run);
        json_decref(manifest);
        json_decref(c);
        return;
    }
    double steal_share = steal / (wall * usable);
    const double occupied = threads < usable ? threads : usable;
    if (replayed) {
        // no comparison of occupied cores
    } else if (!g->occupied_run[0]) {
        g->occupied = occupied;
        snprintf(g->occupied_run, sizeof g->occupied_run, "%s", run);
    } else if (occupied != g->occupied)
        add_line(g->reasons, &g->reasons_buf,
                 "unequal threads: run %s ran its %.0f thread%s on %.0f of %.0f usable cores, run %s on %.0f, so "
                 "their timings measure the thread counts as much as the layouts (give both the same --num-threads)",
                 run, threads, threads == 1 ? "" : "s", occupied, usable, g->occupied_run, g->occupied);
    // the scheduler's own account of the waiting (absent from records older than it: unmeasured)
    json_t *sched = json_object_get(c, "scheduler");
    json_t *share_v = json_object_get(sched, "run_queue_share");
    const double queue_share = json_is_number(share_v) ? json_number_value(share_v) : -1;
    const char *unmeasured = json_string_value(json_object_get(sched, "unmeasured"));
    const int oversubscribed = json_is_true(json_object_get(c, "oversubscribed"));
    if (replayed) {
        if (oversubscribed)
            add_line(g->accepted, &g->accepted_buf,
                     "accepted: oversubscribed, %.0f threads on %.0f cores (run %s): its figure is replayed from "
                     "per-op CPU time on one core per rank, not read from the wall clock the threads shared",
                     threads, usable, run);
        else if (queue_share > TB_STABLE_MAX_RUN_QUEUE_SHARE)
            add_line(g->reasons, &g->reasons_buf,
                     "contended: in run %s a rank's threads waited for a core %d%% of the run (%.0f thread%s on %.0f "
                     "usable cores; threshold %d%%)",
                     run, pct(queue_share), threads, threads == 1 ? "" : "s", usable,
                     pct(TB_STABLE_MAX_RUN_QUEUE_SHARE));
    } else if (g->sampling.accept_oversubscribed) {
        if (oversubscribed)
            add_line(g->accepted, &g->accepted_buf, "accepted: oversubscribed, %.0f threads on %.0f cores (run %s)",
                     threads, usable, run);
    } else if (queue_share > TB_STABLE_MAX_RUN_QUEUE_SHARE) {
        add_line(g->reasons, &g->reasons_buf,
                 "%s: in run %s a rank's threads waited for a core %d%% of the run (%.0f thread%s on %.0f usable "
                 "cores; threshold %d%%)%s",
                 oversubscribed ? "oversubscribed" : "contended", run, pct(queue_share), threads,
                 threads == 1 ? "" : "s", usable, pct(TB_STABLE_MAX_RUN_QUEUE_SHARE),
                 oversubscribed ? " (a claim may declare accept_oversubscribed)" : "");
    } else if (oversubscribed && queue_share >= 0) {
        // more threads than cores, but the threads beyond them rarely ran: measured, not counted
        add_line(g->accepted, &g->accepted_buf,
                 "accepted: %.0f threads on %.0f cores, but no rank's threads waited for a core more than %d%% of "
                 "run %s (threshold %d%%, measured by the scheduler's run_delay)",
                 threads, usable, pct(queue_share), run, pct(TB_STABLE_MAX_RUN_QUEUE_SHARE));
    } else if (oversubscribed) {
        add_line(g->reasons, &g->reasons_buf,
                 "oversubscribed: run %s ran %.0f threads on %.0f usable cores, so its threads waited for each "
                 "other, by how much not measured%s%s (a claim may declare accept_oversubscribed)",
                 run, threads, usable, unmeasured && unmeasured[0] ? ": " : "",
                 unmeasured && unmeasured[0] ? unmeasured : "");
    }
    char contention[2][256], unresolved[512];
    if (window_resolves(c, wall, usable, run, unresolved) != 0) add_line(g->reasons, &g->reasons_buf, "%s", unresolved);
    for (int k = 0, lines = host_contention(others, steal, wall, usable, run, contention); k < lines; k++)
        add_line(g->reasons, &g->reasons_buf, "%s", contention[k]);
    judge_remeasure(g, run, record_dir, manifest, rec);
    json_decref(manifest);
    char queue[96] = "";
    if (queue_share >= 0)
        snprintf(queue, sizeof queue, ", waited for a core %d%% (threshold %d%%)", pct(queue_share),
                 pct(TB_STABLE_MAX_RUN_QUEUE_SHARE));
    snprintf(text, size, "cpu share %d%%, other processes %d%% (threshold %d%%), steal %d%% (threshold %d%%), "
                         "%.0f thread%s on %.0f core%s%s%s",
             pct(cpu_share), pct(others), pct(TB_STABLE_MAX_OTHER_SHARE), pct(steal_share),
             pct(TB_STABLE_MAX_STEAL_SHARE), threads, threads == 1 ? "" : "s", usable, usable == 1 ? "" : "s",
             oversubscribed ? " (oversubscribed)" : "", queue);
    json_decref(c);
}

// A record's timed steps (the slowest rank's step_ms after warmup), appended to text with
// their window; *steps (malloc'd) and *n, or NULL when they cannot be read (a reason added).
// A record's timed steps (malloc'd, *n of them): the slowest rank's step_ms after warmup, or
// for a replayed figure its replay's (the record's evidence "replayed_step_ms", what the parser
// replayed from the raw traces a moment ago). NULL with why in err.
static double *record_steps(const char *record_dir, json_t *replayed, long long warmup, int *n, tb_error *err) {
    double *t = NULL;
    if (!replayed) return tb_slowest_step_ms(record_dir, warmup, &t, n, err) == 0 ? t : NULL;
    *n = (int)json_array_size(replayed);
    if (*n == 0) {
        tb_fail(err, "%s has no replayed steps", record_dir);
        return NULL;
    }
    t = tb_xcalloc((size_t)*n, sizeof *t, "replayed steps");
    for (int i = 0; i < *n; i++) t[i] = json_number_value(json_array_get(replayed, (size_t)i));
    return t;
}

static double *timed_steps(gate *g, const char *run, const char *record_dir, json_t *replayed, long long warmup,
                           int *n, char *text, size_t size) {
    tb_error err;
    double *t = record_steps(record_dir, replayed, warmup, n, &err);
    if (!t) {
        add_line(g->reasons, &g->reasons_buf, "not verifiable: the step times of run %s: %s", run, err.msg);
        return NULL;
    }
    double window = 0, ss = 0;
    for (int i = 0; i < *n; i++) window += t[i];
    const double mean = window / *n;
    for (int i = 0; i < *n; i++) ss += (t[i] - mean) * (t[i] - mean);
    const double sd = *n > 1 ? sqrt(ss / (*n - 1)) : 0;
    size_t used = strlen(text);
    snprintf(text + used, size - used, "%s%d %s step%s (warmup %lld) over %.3g s, mean %.4g ms, sd %.1f%%",
             used ? "; " : "", *n, replayed ? "replayed" : "timed", *n == 1 ? "" : "s", warmup, window / 1000, mean,
             100 * sd / mean);
    if (*n < g->sampling.min_steps || window / 1000 < g->sampling.min_window_s)
        add_line(g->reasons, &g->reasons_buf,
                 "undersampled: run %s %s %d step%s over %.3g s after the warm-up (a repetition must time at least "
                 "%d steps over at least %.3g s: the claim's min_steps and min_window_s)",
                 run, replayed ? "replayed" : "timed", *n, *n == 1 ? "" : "s", window / 1000, g->sampling.min_steps,
                 g->sampling.min_window_s);
    return t;
}

// The node's timed steps over its records: the count of repetitions, the median's interval
// against the claim's tolerance; the figures go into the node ("sampling", "sampling_text").
static void judge_sampling(gate *g, json_t *ev, const char *parser, int replayed, tb_timing_repetition *reps,
                           int n, int records) {
    if (records < g->sampling.min_repetitions)
        add_line(g->reasons, &g->reasons_buf,
                 "undersampled: %d repetition%s of %s; a timing claim needs at least %d, each a separate process "
                 "(the claim's min_repetitions)",
                 records, records == 1 ? "" : "s", parser, g->sampling.min_repetitions);
    // the claim's quantile of its figure (args.quantile, parsers.h), as one of the step times:
    // a throughput's q-quantile is the step time's (1 - q)-quantile
    json_t *qa = json_object_get(json_object_get(ev, "args"), "quantile");
    double q = json_is_number(qa) ? json_number_value(qa) : 0.5;
    if (!strcmp(parser, "tokens_per_s")) q = 1 - q;
    char what[32] = "median";
    if (q != 0.5) snprintf(what, sizeof what, "p%.3g", 100 * q);
    tb_timing_interval iv;
    if (n < 1 || n < records || tb_timing_interval_compute_at(reps, n, q, &iv) != 0) return;  // reasons given per record
    const double tol = g->sampling.timing_tolerance, below = 1 - iv.lo / iv.value, above = iv.hi / iv.value - 1;
    char text[512];
    snprintf(text, sizeof text,
             "%s %sstep %.4g ms, %.0f%% interval [%.4g, %.4g] ms (-%.1f%%/+%.1f%%; timing_tolerance +-%.1f%%), mean "
             "%.4g +- sd %.4g ms (%.1f%%%s), %d steps over %d repetition%s (hierarchical bootstrap over repetitions "
             "then steps, %d resamples)",
             what, replayed ? "replayed " : "", iv.value, 100 * iv.level, iv.lo, iv.hi, 100 * below, 100 * above, 100 * tol, iv.mean, iv.sd,
             100 * iv.sd / iv.mean, iv.sd > TB_STABLE_WARN_STEP_SD * iv.mean ? ": above 10%, pyperf would warn" : "",
             iv.steps, iv.repetitions, iv.repetitions == 1 ? "" : "s", iv.resamples);
    json_object_set_new(ev, "sampling_text", json_string(text));
    json_object_set_new(
        ev, "sampling",
        json_pack("{s:s, s:f, s:[f, f], s:f, s:s, s:i, s:i, s:i, s:f, s:f, s:f, s:i, s:f}", "step_times",
                  replayed ? "replayed from per-op CPU time on one core per rank" : "wall clock", "median_ms", iv.median,
                  "interval_ms", iv.lo, iv.hi, "level", iv.level, "method",
                  "hierarchical percentile bootstrap: repetitions with replacement, then each one's steps",
                  "resamples", iv.resamples, "repetitions", iv.repetitions, "steps", iv.steps, "mean_ms", iv.mean,
                  "sd_ms", iv.sd, "timing_tolerance", tol, "fewest_steps", iv.fewest_steps, "shortest_window_s",
                  iv.shortest_window_s));
    if (q != 0.5) {  // the interval is the quantile's
        json_object_set_new(json_object_get(ev, "sampling"), "quantile", json_real(q));
        json_object_set_new(json_object_get(ev, "sampling"), "quantile_ms", json_real(iv.value));
    }
    if ((below > tol || above > tol) && !g->paired)
        add_line(g->reasons, &g->reasons_buf,
                 "unstable: the %s %sstep time's %.0f%% interval over %d repetition%s and %d steps of %s is [%.4g, "
                 "%.4g] ms, -%.1f%%/+%.1f%% of the %s %.4g ms, wider than the claim's timing_tolerance +-%.1f%%",
                 what, replayed ? "replayed " : "", 100 * iv.level, iv.repetitions, iv.repetitions == 1 ? "" : "s",
                 iv.steps, parser, iv.lo, iv.hi,
                 100 * below, 100 * above, what, iv.value, 100 * tol);
}

static void add_reason(void *g, const char *line) {
    gate *gt = g;
    add_line(gt->reasons, &gt->reasons_buf, "%s", line);
}

// ---------------------------------------------------------------------------------------
// Paired ratios: two configurations' repetitions run alternately (timing.interleaved)

// Whether a side's figure is its step time or its inverse (a ratio of them is a ratio of step
// times): tokens_per_s, step_ms, and replayed of step_ms or tokens_per_s.
static int step_time_side(json_t *side) {
    const char *p = json_string_value(json_object_get(side, "parser"));
    json_t *q = json_object_get(json_object_get(side, "args"), "quantile");
    if (!p || (json_is_number(q) && json_number_value(q) != 0.5)) return 0;  // pairs compare medians
    if (!strcmp(p, "tokens_per_s") || !strcmp(p, "step_ms")) return 1;
    const char *f = json_string_value(json_object_get(json_object_get(side, "args"), "figure"));
    return !strcmp(p, "replayed") && f && (!strcmp(f, "step_ms") || !strcmp(f, "tokens_per_s"));
}

// A record's start and end (manifest.json, ISO 8601 UTC to the second: they compare as text).
static int record_window(json_t *rec, char *start, char *end, size_t size) {
    const char *dir = json_string_value(json_object_get(rec, "record_dir"));
    char path[STAB_PATH_MAX];
    snprintf(path, sizeof path, "%s/" TB_RECORD_MANIFEST, dir ? dir : "");
    json_t *m = json_load_file(path, 0, NULL);
    const char *s = json_string_value(json_object_get(m, "start")), *e = json_string_value(json_object_get(m, "end"));
    const int ok = s && e;
    if (ok) snprintf(start, size, "%s", s), snprintf(end, size, "%s", e);
    json_decref(m);
    return ok;
}

// Whether the two sides' records ran as pairs: as many on each side, pair i (record i of each
// side) after pair i - 1 and its two runs one after the other — in one round of
// timing.interleaved, where other configurations' runs of the round may sit between them (by
// the manifests' start and end, to the second).
static int paired_records(json_t *a, json_t *b) {
    json_t *ra = json_object_get(a, "records"), *rb = json_object_get(b, "records");
    const size_t n = json_array_size(ra);
    if (n < 1 || n != json_array_size(rb)) return 0;
    char prev_end[40] = "";
    for (size_t i = 0; i < n; i++) {
        char sa[40], ea[40], sb[40], eb[40];
        if (!record_window(json_array_get(ra, i), sa, ea, sizeof sa) ||
            !record_window(json_array_get(rb, i), sb, eb, sizeof sb))
            return 0;
        const char *first_start = strcmp(sa, sb) <= 0 ? sa : sb, *last_end = strcmp(ea, eb) >= 0 ? ea : eb;
        // the pair after the previous one, and its two runs one after the other (not overlapping
        // by more than the second the stamps round to)
        const int sequential = strcmp(ea, sb) <= 0 || strcmp(eb, sa) <= 0;
        if (strcmp(first_start, prev_end) < 0 || !sequential) return 0;
        snprintf(prev_end, sizeof prev_end, "%s", last_end);
    }
    return 1;
}

// The steps of each record of a side into reps (n of them); 0, or -1 when one cannot be read.
static int side_steps(json_t *side, tb_timing_repetition *reps, int n) {
    json_t *w = json_object_get(json_object_get(side, "args"), "warmup_steps");
    const long long warmup = json_is_number(w) ? (long long)json_number_value(w) : TB_STABLE_DEFAULT_WARMUP;
    const int replayed = tb_parser_replayed(json_string_value(json_object_get(side, "parser")));
    for (int i = 0; i < n; i++) {
        json_t *rec = json_array_get(json_object_get(side, "records"), (size_t)i);
        tb_error err;
        int steps = 0;
        double *t = record_steps(json_string_value(json_object_get(rec, "record_dir")),
                                 replayed ? json_object_get(rec, "replayed_step_ms") : NULL, warmup, &steps, &err);
        if (!t) return -1;
        reps[i] = (tb_timing_repetition){t, steps};
    }
    return 0;
}

// The paired ratio's interval against the claim's tolerance, into the ratio's node.
static void judge_pairs(gate *g, json_t *ev, json_t *num, json_t *den) {
    const int n = (int)json_array_size(json_object_get(num, "records"));
    tb_timing_repetition *a = tb_xcalloc((size_t)n, sizeof *a, "paired steps");
    tb_timing_repetition *b = tb_xcalloc((size_t)n, sizeof *b, "paired steps");
    tb_timing_ratio_interval iv;
    if (side_steps(num, a, n) == 0 && side_steps(den, b, n) == 0 && tb_timing_ratio_interval_compute(a, b, n, &iv) == 0) {
        const double tol = g->sampling.timing_tolerance, below = 1 - iv.lo / iv.ratio, above = iv.hi / iv.ratio - 1;
        char text[512];
        snprintf(text, sizeof text,
                 "paired: %d pairs of repetitions run one after the other; numerator / denominator median step time "
                 "%.4g, %.0f%% interval [%.4g, %.4g] (-%.1f%%/+%.1f%%; timing_tolerance +-%.1f%%; hierarchical "
                 "bootstrap over the pairs then their steps, %d resamples)",
                 iv.pairs, iv.ratio, 100 * iv.level, iv.lo, iv.hi, 100 * below, 100 * above, 100 * tol, iv.resamples);
        json_object_set_new(ev, "sampling_text", json_string(text));
        json_object_set_new(ev, "sampling",
                            json_pack("{s:s, s:f, s:[f, f], s:f, s:i, s:i, s:f}", "method",
                                      "paired: ratio of the pooled median step times, hierarchical percentile "
                                      "bootstrap over the pairs then each one's steps",
                                      "step_time_ratio", iv.ratio, "interval", iv.lo, iv.hi, "level", iv.level,
                                      "pairs", iv.pairs, "resamples", iv.resamples, "timing_tolerance", tol));
        if (below > tol || above > tol)
            add_line(g->reasons, &g->reasons_buf,
                     "unstable: the paired ratio of median step times over %d pairs is %.4g, its %.0f%% interval "
                     "[%.4g, %.4g] -%.1f%%/+%.1f%%, wider than the claim's timing_tolerance +-%.1f%%",
                     iv.pairs, iv.ratio, 100 * iv.level, iv.lo, iv.hi, 100 * below, 100 * above, 100 * tol);
    }
    for (int i = 0; i < n; i++) free((void *)a[i].steps), free((void *)b[i].steps);
    free(a);
    free(b);
}

static void judge(gate *g, json_t *ev, int depth) {
    // every side a composite parser reads (ratio, saved_fraction, relative_difference)
    static const char *const sides[] = {"numerator", "denominator", "treatment", "baseline", "a", "b"};
    const char *parser = json_string_value(json_object_get(ev, "parser"));
    json_t *num = json_object_get(ev, "numerator"), *den = json_object_get(ev, "denominator");
    // a ratio of two step times whose repetitions ran in pairs is judged by the pairs: the
    // drift of the host between them cancels in each pair's ratio (the sides' own intervals,
    // which hold that drift, are printed but are not the verdict)
    const int pairs = parser && !strcmp(parser, "ratio") && !g->paired && step_time_side(num) &&
                      step_time_side(den) && paired_records(num, den);
    if (pairs) g->paired = 1;
    for (int s = 0; s < 6 && depth < 16; s++)
        if (json_object_get(ev, sides[s])) judge(g, json_object_get(ev, sides[s]), depth + 1);
    if (pairs) {
        g->paired = 0;
        judge_pairs(g, ev, num, den);
    }
    json_t *args = json_object_get(ev, "args");
    if (!tb_parser_timed(parser, args)) return;
    g->timed = 1;
    const int replayed = tb_parser_replayed(parser);
    json_t *w = json_object_get(args, "warmup_steps");
    long long warmup = json_is_number(w) ? (long long)json_number_value(w) : TB_STABLE_DEFAULT_WARMUP;
    json_t *records = json_object_get(ev, "records");
    const int nrecords = (int)json_array_size(records);
    tb_timing_repetition *reps = tb_xcalloc((size_t)nrecords + 1, sizeof *reps, "timed repetitions");
    int n = 0;
    size_t i;
    json_t *rec;
    json_array_foreach(records, i, rec) {
        const char *run = json_string_value(json_object_get(rec, "run_id"));
        const char *dir = json_string_value(json_object_get(rec, "record_dir"));
        if (!run || !dir) continue;
        char text[1024] = "";
        judge_conditions(g, rec, run, dir, replayed, text, sizeof text);
        int steps = 0;
        json_t *replayed_steps = replayed ? json_object_get(rec, "replayed_step_ms") : NULL;
        if (replayed && !json_is_array(replayed_steps)) {
            add_line(g->reasons, &g->reasons_buf, "not verifiable: run %s: the replay gave no replayed_step_ms", run);
            continue;
        }
        double *t = timed_steps(g, run, dir, replayed_steps, warmup, &steps, text, sizeof text);
        if (t) reps[n++] = (tb_timing_repetition){t, steps};
        json_object_set_new(rec, "conditions", json_string(text));
    }
    judge_sampling(g, ev, parser ? parser : "?", replayed, reps, n, nrecords);
    tb_selection_check(records, parser ? parser : "?", add_reason, g);
    for (int k = 0; k < n; k++) free((void *)reps[k].steps);
    free(reps);
}

int tb_sampling_from_claim(json_t *claim, tb_sampling *out, char *msg, size_t size) {
    *out = (tb_sampling){json_is_true(json_object_get(claim, "accept_oversubscribed")), TB_TIMING_DEFAULT_TOLERANCE,
                         TB_TIMING_DEFAULT_MIN_WINDOW_S, TB_TIMING_DEFAULT_MIN_STEPS,
                         TB_TIMING_DEFAULT_MIN_REPETITIONS};
    static const struct {
        const char *key;
        double lo, hi;  // the accepted range, inclusive
        int integer;
    } fields[] = {{"timing_tolerance", 1e-6, 1, 0},
                  {"min_window_s", 0, 3600, 0},
                  {"min_steps", 1, 1e6, 1},
                  {"min_repetitions", 1, 1000, 1}};
    for (size_t f = 0; f < sizeof fields / sizeof *fields; f++) {
        json_t *v = json_object_get(claim, fields[f].key);
        if (!v) continue;
        const double x = json_is_number(v) ? json_number_value(v) : NAN;
        if (!(x >= fields[f].lo && x <= fields[f].hi) || (fields[f].integer && x != floor(x))) {
            char *got = json_dumps(v, JSON_ENCODE_ANY);
            snprintf(msg, size, "%s must be %s in [%g, %g] (got %s)", fields[f].key,
                     fields[f].integer ? "an integer" : "a number", fields[f].lo, fields[f].hi, got ? got : "?");
            free(got);
            return -1;
        }
        if (!strcmp(fields[f].key, "timing_tolerance")) out->timing_tolerance = x;
        else if (!strcmp(fields[f].key, "min_window_s")) out->min_window_s = x;
        else if (!strcmp(fields[f].key, "min_steps")) out->min_steps = (int)x;
        else out->min_repetitions = (int)x;
    }
    return 0;
}

void tb_stability_check(json_t *evidence, const tb_sampling *sampling, tb_stability *out) {
    memset(out, 0, sizeof *out);
    gate g = {0};
    g.sampling = *sampling;
    g.reasons = open_memstream(&g.reasons_buf, &g.reasons_len);
    g.accepted = open_memstream(&g.accepted_buf, &g.accepted_len);
    if (!g.reasons || !g.accepted) {
        fprintf(stderr, "tracebook prove: out of memory for the stability gate\n");
        exit(TB_EXIT_OUT_OF_MEMORY);
    }
    judge(&g, evidence, 0);
    fclose(g.reasons);
    fclose(g.accepted);
    out->timed = g.timed;
    if (g.reasons_len) out->reasons = g.reasons_buf;
    else free(g.reasons_buf);
    if (g.accepted_len) out->accepted = g.accepted_buf;
    else free(g.accepted_buf);
}

void tb_stability_free(tb_stability *s) {
    free(s->reasons);
    free(s->accepted);
    memset(s, 0, sizeof *s);
}
