// prove_records.c — records verified against their manifests, once each (prove_records.h).
#include "prove/prove_records.h"

#include <dirent.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/run_dir.h"
#include "records/anchor.h"
#include "core/error.h"
#include "core/xalloc.h"
#include "records/record.h"
#include "records/record_verify.h"

// ---------------------------------------------------------------------------------------
// A growable string

void sb_printf(strbuf *b, const char *fmt, ...) {
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        size_t room = b->cap - b->len;
        int n = vsnprintf(b->s ? b->s + b->len : NULL, b->s ? room : 0, fmt, ap);
        va_end(ap);
        if (n < 0) return;
        if (b->s && (size_t)n < room) {
            b->len += (size_t)n;
            return;
        }
        b->cap = (b->len + (size_t)n + 1) * 2;
        b->s = tb_xrealloc(b->s, b->cap, "report text");
    }
}

// ---------------------------------------------------------------------------------------
// Verifying a record against its manifest

static uint64_t hash_str(const char *s) {
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

// The slot of dir: its entry, or the empty slot where it belongs.
static record_check *check_find(check_table *t, const char *dir) {
    size_t j = hash_str(dir) & (t->cap - 1);
    while (t->slots[j].dir && strcmp(t->slots[j].dir, dir)) j = (j + 1) & (t->cap - 1);
    return &t->slots[j];
}

// A new entry for dir (not in the table), growing the table first when half full; pointers
// to entries stay valid until the next insertion.
static record_check *check_insert(check_table *t, const char *dir) {
    if (2 * (t->n + 1) > t->cap) {
        size_t cap = t->cap ? 2 * t->cap : 1024;
        check_table bigger = {tb_xcalloc(cap, sizeof(record_check), "verified records"), cap, 0, t->anchors};
        for (size_t i = 0; i < t->cap; i++)
            if (t->slots[i].dir) {
                *check_find(&bigger, t->slots[i].dir) = t->slots[i];
                bigger.n++;
            }
        free(t->slots);
        *t = bigger;
    }
    record_check *c = check_find(t, dir);
    c->dir = tb_xstrdup(dir, "record path");
    t->n++;
    return c;
}

void check_table_free(check_table *t) {
    for (size_t i = 0; i < t->cap; i++)
        if (t->slots[i].dir) {
            free(t->slots[i].dir);
            json_decref(t->slots[i].manifest);
            free(t->slots[i].failures.s);
            free(t->slots[i].warnings.s);
            for (size_t k = 0; k < t->slots[i].nstamps; k++) free(t->slots[i].stamps[k].path);
            free(t->slots[i].stamps);
        }
    free(t->slots);
}

static void add_failure(void *failures, const char *text) { sb_printf(failures, "%s\n", text); }

static void record_problem(void *check, const char *text) { add_failure(&((record_check *)check)->failures, text); }

static void add_stamp(void *check, const char *path, const tb_file_stamp *stamp) {
    record_check *c = check;
    if (c->nstamps == c->stamps_cap) {
        c->stamps_cap = c->stamps_cap ? 2 * c->stamps_cap : 16;
        c->stamps = tb_xrealloc(c->stamps, c->stamps_cap * sizeof *c->stamps, "file stamps");
    }
    c->stamps[c->nstamps++] = (record_stamp){tb_xstrdup(path, "record path"), *stamp};
}

// Every regular file under dir/sub that the manifest's files do not list: a file in a record
// that its manifest does not vouch for is a failure, not a warning — an extra rank's metrics
// would otherwise sit beside the listed ones, for whatever reads a directory to find them.
static void find_unlisted(const char *root, const char *sub, json_t *files, strbuf *failures, int depth) {
    char path[PROVE_PATH_MAX];
    if (snprintf(path, sizeof path, "%s%s%s", root, *sub ? "/" : "", sub) >= (int)sizeof path || depth > 16) return;
    DIR *d = opendir(path);
    if (!d) return;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        if (!*sub && (!strcmp(e->d_name, TB_RECORD_MANIFEST) || !strcmp(e->d_name, TB_RECORD_HEARTBEAT))) continue;
        char rel[PROVE_PATH_MAX], full[PROVE_PATH_MAX];
        if (snprintf(rel, sizeof rel, "%s%s%s", sub, *sub ? "/" : "", e->d_name) >= (int)sizeof rel ||
            snprintf(full, sizeof full, "%s/%s", root, rel) >= (int)sizeof full)
            continue;
        struct stat st;
        if (lstat(full, &st) != 0) continue;
        if (S_ISDIR(st.st_mode)) find_unlisted(root, rel, files, failures, depth + 1);
        else if (!json_object_get(files, rel))
            sb_printf(failures, "unlisted file (not in the manifest, so nothing vouches for it): %s\n", full);
    }
    closedir(d);
}

// The manifest at path (NULL: missing) against the digest anchored when the record was
// finished (anchor.h): a manifest edited since (its config, argv, exit status, files) fails.
static void check_anchor(check_table *t, record_check *c, const char *path, int present) {
    if (!t->anchors) {
        sb_printf(&c->failures, "not checked against its anchors (internal: no verifier): %s\n", path);
        return;
    }
    char version_dir[PROVE_PATH_MAX], hex[65];
    snprintf(version_dir, sizeof version_dir, "%s", c->dir);
    char *slash = strrchr(version_dir, '/');
    if (!slash) {
        sb_printf(&c->failures, "not a record directory (<artifacts>/<experiment>/v<N>/<run id>): %s\n", c->dir);
        return;
    }
    *slash = '\0';
    tb_error err;
    if (present && tb_json_digest(path, hex, &err) != 0) return;  // unreadable: said already
    tb_anchor_verify(t->anchors, version_dir, TB_ANCHOR_RECORD, slash + 1, present ? hex : NULL, add_failure,
                     &c->failures);
}

record_check *verify_record(check_table *t, const char *dir) {
    record_check *c = t->cap ? check_find(t, dir) : NULL;
    if (c && c->dir) return c;
    c = check_insert(t, dir);
    char path[PROVE_PATH_MAX];
    if (snprintf(path, sizeof path, "%s/" TB_RECORD_MANIFEST, dir) >= (int)sizeof path) {
        sb_printf(&c->failures, "record path too long: %s\n", dir);
        return c;
    }
    struct stat st;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
        sb_printf(&c->failures, "record missing: %s (no such directory)\n", dir);
        check_anchor(t, c, path, 0);
        return c;
    }
    // the manifest is read twice (its JSON, its digest against the anchors): a regular file
    // whose stamp holds across both, so that both reads saw the same bytes
    tb_file_stamp mstamp;
    tb_error serr;
    const int present = stat(path, &st) == 0;
    if (present && tb_file_stamp_of(path, &mstamp, &serr) != 0) {
        sb_printf(&c->failures, "manifest unreadable: %s\n", serr.msg);
        return c;
    }
    json_error_t jerr;
    c->manifest = json_load_file(path, 0, &jerr);
    check_anchor(t, c, path, present);
    if (present && tb_file_unchanged(path, &mstamp, &serr) != 0) sb_printf(&c->failures, "%s\n", serr.msg);
    else if (present) add_stamp(c, path, &mstamp);
    if (!c->manifest) {
        if (stat(path, &st) != 0) sb_printf(&c->failures, "record incomplete: %s missing\n", path);
        else sb_printf(&c->failures, "manifest unreadable: %s: line %d: %s\n", path, jerr.line, jerr.text);
        return c;
    }
    json_t *files = json_object_get(c->manifest, "files");
    if (!json_is_object(files)) {
        sb_printf(&c->failures, "manifest without \"files\": %s\n", path);
        return c;
    }
    if (json_object_size(files) == 0) {
        sb_printf(&c->failures, "manifest lists no files: %s (a record whose manifest vouches for nothing proves nothing)\n",
                  path);
        return c;
    }
    const char *status = json_string_value(json_object_get(c->manifest, "status"));
    if (!status || (strcmp(status, "finished") && !tb_manifest_failed_as_expected(c->manifest)))
        sb_printf(&c->warnings, "run status %s (not finished): %s\n", status ? status : "(none)", path);
    c->files_verified = tb_record_verify_files(dir, files, record_problem, add_stamp, c);
    find_unlisted(dir, "", files, &c->failures, 0);
    return c;
}

static int is_directory(const char *path) {
    struct stat st;
    return lstat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

// Appends line (with its newline) unless failures holds it already.
static void add_once(strbuf *failures, const char *line) {
    if (failures->s && strstr(failures->s, line)) return;
    sb_printf(failures, "%s", line);
}

void sb_add_lines_once(strbuf *b, const char *lines) {
    for (const char *p = lines; p && *p;) {
        size_t len = strcspn(p, "\n");
        char *line = tb_xmalloc(len + 2, "report line");
        memcpy(line, p, len);
        memcpy(line + len, "\n", 2);
        add_once(b, line);
        free(line);
        p += len + (p[len] == '\n');
    }
}

// A node's records (a parser's, or one side's of a composite parser) each a separate run:
// one record listed twice would count as two repetitions of a timing claim (and weigh twice
// in a mean), so a record named more than once fails the claim, naming it.
static void check_distinct_records(json_t *records, strbuf *failures) {
    size_t i, j;
    json_t *a;
    json_array_foreach(records, i, a) {
        const char *dir = json_string_value(json_object_get(a, "record_dir"));
        for (j = 0; dir && j < i; j++) {
            const char *other = json_string_value(json_object_get(json_array_get(records, j), "record_dir"));
            if (other && !strcmp(dir, other)) break;
        }
        if (!dir || j == i) continue;
        char line[PROVE_PATH_MAX + 256];
        snprintf(line, sizeof line,
                 "run listed twice: %s (records %zu and %zu of one part; a repetition is a separate run, counted "
                 "once)\n",
                 dir, j + 1, i + 1);
        add_once(failures, line);
    }
}

void check_read_files(check_table *t, json_t *ev, strbuf *failures, int depth) {
    if (depth > 32) return;
    if (json_is_array(ev)) {
        size_t i;
        json_t *v;
        json_array_foreach(ev, i, v) check_read_files(t, v, failures, depth + 1);
        return;
    }
    if (!json_is_object(ev)) return;
    if (json_is_array(json_object_get(ev, "records"))) check_distinct_records(json_object_get(ev, "records"), failures);
    const char *dir = json_string_value(json_object_get(ev, "record_dir"));
    json_t *read = json_object_get(ev, "files");
    if (dir && json_is_array(read)) {
        record_check *c = verify_record(t, dir);  // once per record; a part's records too
        if (c->failures.len) sb_add_lines_once(failures, c->failures.s);
        json_t *listed = json_object_get(c->manifest, "files");
        const size_t len = strlen(dir);
        size_t i;
        json_t *f;
        json_array_foreach(read, i, f) {
            const char *path = json_string_value(f);
            char line[2 * PROVE_PATH_MAX + 256];
            if (!path) continue;
            if (strncmp(path, dir, len) || path[len] != '/') {
                snprintf(line, sizeof line, "read outside its record: %s (record %s)\n", path, dir);
                add_once(failures, line);
            } else if (!json_object_get(listed, path + len + 1) && !is_directory(path)) {
                // (a directory a parser read from — dumped tensors — holds only listed files:
                // verify_record fails a record with any file its manifest does not list)
                snprintf(line, sizeof line,
                         "read but not in the manifest: %s (the parser read a file whose sha256 nothing vouches for)\n",
                         path);
                add_once(failures, line);
            }
        }
    }
    const char *key;
    json_t *v;
    json_object_foreach(ev, key, v) if (json_is_object(v) || json_is_array(v)) check_read_files(t, v, failures, depth + 1);
}


static void recheck(check_table *t, const char *dir, strbuf *failures) {
    record_check *c = t->cap ? check_find(t, dir) : NULL;
    if (!c || !c->dir) return;  // never verified: check_read_files said so
    for (size_t k = 0; k < c->nstamps; k++) {
        tb_error err;
        if (tb_file_unchanged(c->stamps[k].path, &c->stamps[k].stamp, &err) != 0) {
            char line[sizeof err.msg + 2];
            snprintf(line, sizeof line, "%s\n", err.msg);
            add_once(failures, line);
        }
    }
}

static void recheck_evidence(check_table *t, json_t *ev, strbuf *failures, int depth) {
    if (depth > 32 || !(json_is_object(ev) || json_is_array(ev))) return;
    const char *dir = json_is_object(ev) ? json_string_value(json_object_get(ev, "record_dir")) : NULL;
    if (dir) recheck(t, dir, failures);
    size_t i;
    json_t *v;
    const char *key;
    if (json_is_array(ev)) json_array_foreach(ev, i, v) recheck_evidence(t, v, failures, depth + 1);
    else json_object_foreach(ev, key, v) recheck_evidence(t, v, failures, depth + 1);
}

void check_unchanged(check_table *t, char *const *dirs, size_t n, json_t *evidence, strbuf *failures) {
    for (size_t i = 0; i < n; i++)
        if (dirs[i]) recheck(t, dirs[i], failures);
    recheck_evidence(t, evidence, failures, 0);
}

int claims_file_misnamed(json_t *root, const char *path, const char *exp_dirname, long long version, char *reason,
                         size_t size) {
    const char *named = json_string_value(json_object_get(root, "experiment"));
    json_t *ver = json_object_get(root, "version");
    if (named && !strcmp(named, exp_dirname) && json_is_integer(ver) && json_integer_value(ver) == version) return 0;
    char *got = json_dumps(ver, JSON_ENCODE_ANY);
    snprintf(reason, size, "%s names experiment %s%s%s version %s, but lies in %s/v%lld (a claim is named by where it "
             "lives)", path, named ? "\"" : "", named ? named : "(none)", named ? "\"" : "", got ? got : "(none)",
             exp_dirname, version);
    free(got);
    return 1;
}

void check_distinct_runs(json_t *ev, strbuf *failures, int depth) {
    if (depth > 32 || !(json_is_object(ev) || json_is_array(ev))) return;
    if (json_is_object(ev) && json_is_array(json_object_get(ev, "records")))
        check_distinct_records(json_object_get(ev, "records"), failures);
    size_t i;
    json_t *v;
    const char *key;
    if (json_is_array(ev)) json_array_foreach(ev, i, v) check_distinct_runs(v, failures, depth + 1);
    else json_object_foreach(ev, key, v) check_distinct_runs(v, failures, depth + 1);
}
