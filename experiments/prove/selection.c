// selection.c — a timing claim rests on every repetition of its sweep point (selection.h).
#include "prove/selection.h"

#include <dirent.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/run_dir.h"
#include "records/record.h"
#include "records/record_verify.h"

#define SEL_PATH_MAX 4096

__attribute__((format(printf, 3, 4))) static void say(void (*reason)(void *ctx, const char *line), void *ctx,
                                                      const char *fmt, ...) {
    char line[2 * SEL_PATH_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    reason(ctx, line);
}


// A record's manifest, when it is a regular file (a FIFO would block the read); NULL else.
static json_t *load_manifest(const char *record_dir) {
    char path[SEL_PATH_MAX + 512];
    tb_file_stamp st;
    tb_error err;
    snprintf(path, sizeof path, "%s/" TB_RECORD_MANIFEST, record_dir);
    return tb_file_stamp_of(path, &st, &err) == 0 ? json_load_file(path, 0, NULL) : NULL;
}

static int listed_in(json_t *records, const char *run_id) {
    size_t i;
    json_t *r;
    json_array_foreach(records, i, r) {
        const char *id = json_string_value(json_object_get(r, "run_id"));
        if (id && !strcmp(id, run_id)) return 1;
    }
    return 0;
}

// What a run measures: its manifest's sweep point less the seed (runs of one config that
// differ in seed alone are repetitions of it, whatever seed each was given). New reference.
static json_t *measured_point(json_t *m) {
    json_t *p = json_deep_copy(json_object_get(m, "sweep_point"));
    if (json_is_object(p)) json_object_del(p, "seed");
    return p;
}

// The first key whose value differs between two points (or that one lacks), for a message.
static const char *first_difference(json_t *a, json_t *b) {
    const char *key;
    json_t *v;
    json_object_foreach(a, key, v) if (!json_equal(v, json_object_get(b, key))) return key;
    json_object_foreach(b, key, v) if (!json_object_get(a, key)) return key;
    return "(its value)";
}

// A repetition's key: its number and seed ("3 of seed 7"): a rerun of both (--force) measures
// the same repetition again, runs of other seeds are repetitions of their own.
static void repetition_key(json_t *m, char *key, size_t size) {
    json_int_t rep = 1;
    if (!tb_manifest_repetition(m, &rep)) rep = 1;
    char *seed = json_dumps(json_object_get(json_object_get(m, "sweep_point"), "seed"), JSON_ENCODE_ANY);
    snprintf(key, size, "%lld%s%s", (long long)rep, seed ? " of seed " : "", seed ? seed : "");
    free(seed);
}

// The node's timed records measure one sweep point (less the seed), and are, for every
// repetition of it the version holds — done (finished, or failed as its point expects), not a
// replay, not superseded by a listed record's re-measurement — that repetition's latest record
// (its start, then its run id; exp:run resumes the same one): a repetition left out, or an
// earlier measurement of one listed (the faster of a --force rerun's two, say), is a selection
// and fails the claim, naming the runs. The version's records are read from its directory; a
// record deleted whole is prove's to name, from the anchors (tb_anchor_records_check).
void tb_selection_check(json_t *records, const char *parser, void (*reason)(void *ctx, const char *line), void *ctx) {
    json_t *point = NULL, *superseded = json_object();  // run id → true, from the listed records
    char version_dir[SEL_PATH_MAX] = "", first_run[128] = "";
    size_t i, k;
    json_t *rec, *v;
    json_array_foreach(records, i, rec) {
        const char *dir = json_string_value(json_object_get(rec, "record_dir"));
        const char *run = json_string_value(json_object_get(rec, "run_id"));
        const char *slash = dir ? strrchr(dir, '/') : NULL;
        if (!slash || !run) continue;
        json_t *m = load_manifest(dir), *p = measured_point(m);
        json_array_foreach(json_object_get(m, "supersedes"), k, v) {
            const char *id = json_string_value(json_object_get(v, "run_id"));
            if (id) json_object_set_new(superseded, id, json_true());
        }
        json_decref(m);
        if (!point) {
            point = p ? p : json_null();
            snprintf(version_dir, sizeof version_dir, "%.*s", (int)(slash - dir), dir);
            snprintf(first_run, sizeof first_run, "%s", run);
            continue;
        }
        if (!json_equal(point, p))
            say(reason, ctx, "mixed: the repetitions of %s measure different configs: runs %s and %s differ in %s", parser,
                     first_run, run, first_difference(point, p));
        json_decref(p);
    }
    if (!point) {
        json_decref(superseded);
        return;
    }
    const int expects_failure = json_object_get(point, "expect_failure") != NULL;
    json_t *latest = json_object();  // repetition key → {run_id, start}
    DIR *d = opendir(version_dir);
    struct dirent *e;
    while (d && (e = readdir(d))) {
        if (e->d_name[0] == '.' || json_object_get(superseded, e->d_name)) continue;
        char dir[SEL_PATH_MAX + 256];
        snprintf(dir, sizeof dir, "%s/%s", version_dir, e->d_name);
        json_t *m = load_manifest(dir), *p = measured_point(m);
        const char *status = json_string_value(json_object_get(m, "status"));
        const int done = expects_failure ? tb_manifest_failed_as_expected(m) : status && !strcmp(status, "finished");
        if (m && done && json_equal(point, p) && !json_is_string(json_object_get(m, "replay_of"))) {
            char key[96];
            repetition_key(m, key, sizeof key);
            const char *start = json_string_value(json_object_get(m, "start"));
            const long long mtime = tb_record_manifest_mtime_ns(dir);
            json_t *was = json_object_get(latest, key);
            if (!was || tb_record_later(start, mtime, e->d_name, json_string_value(json_object_get(was, "start")),
                                        json_integer_value(json_object_get(was, "mtime")),
                                        json_string_value(json_object_get(was, "run_id"))) > 0)
                json_object_set_new(latest, key, json_pack("{s:s, s:s, s:I}", "run_id", e->d_name, "start",
                                                           start ? start : "", "mtime", (json_int_t)mtime));
        }
        json_decref(p);
        json_decref(m);
    }
    if (d) closedir(d);
    const char *key;
    json_t *last;
    json_object_foreach(latest, key, last) {
        const char *id = json_string_value(json_object_get(last, "run_id"));
        if (!listed_in(records, id))
            say(reason, ctx, "selected: the repetitions of %s leave out run %s, the latest measurement of repetition %s of their "
                     "sweep point (done, not superseded): a timing claim rests on every repetition measured, each at "
                     "its latest",
                     parser, id, key);
    }
    json_array_foreach(records, i, rec) {  // each listed record its repetition's latest
        const char *dir = json_string_value(json_object_get(rec, "record_dir"));
        const char *run = json_string_value(json_object_get(rec, "run_id"));
        json_t *m = dir && run ? load_manifest(dir) : NULL;
        char rkey[96];
        if (m) repetition_key(m, rkey, sizeof rkey);
        const char *newer = m ? json_string_value(json_object_get(json_object_get(latest, rkey), "run_id")) : NULL;
        if (newer && strcmp(newer, run))
            say(reason, ctx, "selected: run %s is an earlier measurement of repetition %s, measured again as run %s: a timing "
                     "claim takes each repetition at its latest",
                     run, rkey, newer);
        json_decref(m);
    }
    json_decref(latest);
    json_decref(superseded);
    json_decref(point);
}

