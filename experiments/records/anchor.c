// anchor.c — digests anchored in the version's ledger and the catalogue (anchor.h).
#include "records/anchor.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "records/catalog.h"
#include "core/clock.h"
#include "core/fileio.h"
#include "core/run_dir.h"
#include "core/xalloc.h"
#include "records/provenance.h"

#define ZERO_LINK "0000000000000000000000000000000000000000000000000000000000000000"

int tb_json_digest(const char *path, char hex[65], tb_error *err) {
    json_error_t jerr;
    json_t *doc = json_load_file(path, JSON_DECODE_ANY, &jerr);
    if (!doc) return tb_fail(err, "%s: line %d: %s", path, jerr.line, jerr.text);
    char *text = json_dumps(doc, JSON_COMPACT | JSON_SORT_KEYS | JSON_REAL_PRECISION(17) | JSON_ENCODE_ANY);
    json_decref(doc);
    if (!text) return tb_fail(err, "%s: cannot write its canonical form (out of memory)", path);
    tb_sha256_hex(text, strlen(text), hex);
    free(text);
    return 0;
}

// "<experiment>/v<N>": the last two components of version_dir, the key of its anchors (the
// same however the artifacts root was spelled).
static int version_key(const char *version_dir, char *key, size_t len, tb_error *err) {
    size_t n = strlen(version_dir);
    while (n > 1 && version_dir[n - 1] == '/') n--;
    size_t slashes = 0, start = n;
    while (start > 0 && slashes < 2) {
        if (version_dir[start - 1] == '/' && ++slashes == 2) break;
        start--;
    }
    if (slashes < 1 || n - start >= len)
        return tb_fail(err, "%s: not an experiment version directory (<artifacts>/<experiment>/v<N>)", version_dir);
    memcpy(key, version_dir + start, n - start);
    key[n - start] = '\0';
    return 0;
}

static void chain_link(const char *prev, long long seq, const char *kind, const char *name, const char *sha256,
                       char hex[65]) {
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    fprintf(f, "%s\n%lld\n%s\n%s\n%s", prev, seq, kind, name, sha256);
    fclose(f);
    tb_sha256_hex(text, len, hex);
    free(text);
}

// The whole of an open file (from its start), NUL-terminated; NULL with err on a read error.
static char *read_all(int fd, const char *path, size_t *len, tb_error *err) {
    size_t cap = 4096, n = 0;
    char *buf = tb_xmalloc(cap, "ledger");
    if (lseek(fd, 0, SEEK_SET) < 0) {
        free(buf);
        tb_fail(err, "%s: %s", path, strerror(errno));
        return NULL;
    }
    for (;;) {
        if (n + 1 >= cap) buf = tb_xrealloc(buf, cap *= 2, "ledger");
        ssize_t got = read(fd, buf + n, cap - n - 1);
        if (got < 0 && errno == EINTR) continue;
        if (got < 0) {
            free(buf);
            tb_fail(err, "%s: %s", path, strerror(errno));
            return NULL;
        }
        if (got == 0) break;
        n += (size_t)got;
    }
    buf[n] = '\0';
    *len = n;
    return buf;
}

// The seq and link of the ledger text's last line ("" and 0 when it has none); -1 with err
// when that line is not a ledger entry (a damaged ledger is not extended).
static int last_entry(const char *text, const char *path, long long *seq, char link[65], tb_error *err) {
    *seq = 0;
    snprintf(link, 65, "%s", ZERO_LINK);
    size_t n = strlen(text);
    while (n > 0 && text[n - 1] == '\n') n--;
    if (n == 0) return 0;
    size_t start = n;
    while (start > 0 && text[start - 1] != '\n') start--;
    json_error_t jerr;
    json_t *e = json_loadb(text + start, n - start, 0, &jerr);
    const char *l = json_string_value(json_object_get(e, "link"));
    json_t *s = json_object_get(e, "seq");
    if (!l || strlen(l) != 64 || !json_is_integer(s)) {
        json_decref(e);
        return tb_fail(err, "%s: its last line is not a ledger entry (%s): the ledger is damaged; not extended", path,
                       e ? "no seq or link" : jerr.text);
    }
    *seq = json_integer_value(s);
    memcpy(link, l, 65);
    json_decref(e);
    return 0;
}

static int write_all(int fd, const char *buf, size_t len) {
    while (len > 0) {
        ssize_t w = write(fd, buf, len);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return -1;
        buf += w;
        len -= (size_t)w;
    }
    return 0;
}

static int catalogue_anchor(const char *artifacts, const char *key, const char *kind, const char *name,
                            const char *sha256, long long seq, const char *link, tb_error *err) {
    sqlite3 *db;
    if (tb_catalog_open(&db, artifacts, err) != 0) return -1;
    char at[32];
    tb_iso_now(at, sizeof at);
    sqlite3_stmt *st = NULL;
    int rc = sqlite3_exec(db, "BEGIN IMMEDIATE", NULL, NULL, NULL) == SQLITE_OK ? 0 : -1;
    if (rc == 0)
        rc = sqlite3_prepare_v2(db,
                                "INSERT OR REPLACE INTO anchors(version_dir, kind, name, sha256, seq, link, anchored_at)"
                                " VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                                -1, &st, NULL) == SQLITE_OK
                 ? 0
                 : -1;
    if (rc == 0) {
        sqlite3_bind_text(st, 1, key, -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 2, kind, -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 3, name, -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 4, sha256, -1, SQLITE_STATIC);
        sqlite3_bind_int64(st, 5, seq);
        sqlite3_bind_text(st, 6, link, -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 7, at, -1, SQLITE_STATIC);
        rc = sqlite3_step(st) == SQLITE_DONE ? 0 : -1;
        sqlite3_finalize(st);
        st = NULL;
    }
    if (rc == 0)
        rc = sqlite3_prepare_v2(db, "INSERT OR REPLACE INTO anchor_heads(version_dir, seq, link) VALUES(?1, ?2, ?3)", -1,
                                &st, NULL) == SQLITE_OK
                 ? 0
                 : -1;
    if (rc == 0) {
        sqlite3_bind_text(st, 1, key, -1, SQLITE_STATIC);
        sqlite3_bind_int64(st, 2, seq);
        sqlite3_bind_text(st, 3, link, -1, SQLITE_STATIC);
        rc = sqlite3_step(st) == SQLITE_DONE ? 0 : -1;
        sqlite3_finalize(st);
    }
    if (rc == 0) rc = sqlite3_exec(db, "COMMIT", NULL, NULL, NULL) == SQLITE_OK ? 0 : -1;
    if (rc != 0) {
        tb_fail(err, "catalogue under %s: anchoring %s %s of %s: %s", artifacts, kind, name, key, sqlite3_errmsg(db));
        sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL);
    }
    sqlite3_close(db);
    return rc;
}

// Appends the entry to the version's ledger and records it in the catalogue, under an
// exclusive flock of the ledger (two runners of one experiment extend one chain).
static int anchor(const char *artifacts, const char *version_dir, const char *kind, const char *name,
                  const char *sha256, tb_error *err) {
    char key[PATH_MAX], path[PATH_MAX + 32];
    if (version_key(version_dir, key, sizeof key, err) != 0 ||
        tb_path_format(path, sizeof path, err, "%s/" TB_EXPERIMENT_LEDGER, version_dir) != 0)
        return -1;
    struct stat st;
    if (lstat(path, &st) == 0 && !S_ISREG(st.st_mode))
        return tb_fail(err, "%s: not a regular file (the version's ledger is expected): not extended", path);
    int fd = open(path, O_RDWR | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0644);
    if (fd < 0) return tb_fail(err, "%s: cannot open the ledger: %s", path, strerror(errno));
    if (flock(fd, LOCK_EX) != 0) {
        close(fd);
        return tb_fail(err, "%s: cannot lock the ledger: %s", path, strerror(errno));
    }
    size_t len;
    char *text = read_all(fd, path, &len, err);
    long long seq;
    char prev[65], link[65];
    int rc = text ? last_entry(text, path, &seq, prev, err) : -1;
    free(text);
    if (rc == 0) {
        seq++;
        chain_link(prev, seq, kind, name, sha256, link);
        json_t *e = json_pack("{s:I, s:s, s:s, s:s, s:s, s:s}", "seq", (json_int_t)seq, "kind", kind, "name", name,
                              "sha256", sha256, "prev", prev, "link", link);
        char *line = json_dumps(e, JSON_COMPACT | JSON_PRESERVE_ORDER);
        json_decref(e);
        size_t n = strlen(line);
        line = tb_xrealloc(line, n + 2, "ledger line");
        memcpy(line + n, "\n", 2);
        if (write_all(fd, line, n + 1) != 0 || fsync(fd) != 0)
            rc = tb_fail(err, "%s: cannot append to the ledger: %s", path, strerror(errno));
        free(line);
    }
    if (rc == 0) rc = catalogue_anchor(artifacts, key, kind, name, sha256, seq, link, err);
    close(fd);  // releases the lock, after the catalogue has the new head
    return rc;
}

int tb_anchor_record(const char *artifacts, const char *record_dir, tb_error *err) {
    char version_dir[PATH_MAX], manifest[PATH_MAX + 32], hex[65];
    if (tb_path_format(version_dir, sizeof version_dir, err, "%s", record_dir) != 0 ||
        tb_path_format(manifest, sizeof manifest, err, "%s/" TB_RECORD_MANIFEST, record_dir) != 0)
        return -1;
    size_t n = strlen(version_dir);
    while (n > 1 && version_dir[n - 1] == '/') version_dir[--n] = '\0';
    char *slash = strrchr(version_dir, '/');
    if (!slash || !slash[1]) return tb_fail(err, "%s: not a record directory (<artifacts>/<experiment>/v<N>/<run id>)", record_dir);
    *slash = '\0';
    if (tb_json_digest(manifest, hex, err) != 0) return tb_fail_prefix(err, "anchoring the record");
    return anchor(artifacts, version_dir, TB_ANCHOR_RECORD, slash + 1, hex, err);
}

int tb_anchor_version_file(const char *artifacts, const char *version_dir, const char *name, tb_error *err) {
    char path[PATH_MAX + 64], hex[65];
    if (tb_path_format(path, sizeof path, err, "%s/%s", version_dir, name) != 0) return -1;
    if (tb_sha256_file(path, hex, err) != 0) return tb_fail_prefix(err, "anchoring %s", name);
    return anchor(artifacts, version_dir, TB_ANCHOR_FILE, name, hex, err);
}

// ---------------------------------------------------------------------------------------
// Verifying

typedef struct ledger {
    char *version_dir;
    json_t *entries;   // the ledger's lines, parsed (those that parse)
    char *problems;    // the ledger's own problems, one line each; NULL when none
    int have_head;     // the catalogue has a head for the version
    long long signed_seq;  // with a key required: the last seq it signed (0: none, sign_why says why)
    char sign_why[2 * PATH_MAX];
} ledger;

struct tb_anchor_verifier {
    sqlite3 *db;
    tb_anchor_signer signer;   // required signer (signer.key NULL: none)
    ledger *ledgers;
    size_t n, cap;
};

void tb_anchor_verifier_require_signature(tb_anchor_verifier *v, const tb_anchor_signer *signer) {
    v->signer = *signer;
}

// The ledger's link at seq (its entries are seq 1, 2, ... in order, as far as they chain).
static const char *link_at(void *ctx, long long seq) {
    const ledger *l = ctx;
    json_t *e = seq >= 1 ? json_array_get(l->entries, (size_t)(seq - 1)) : NULL;
    return e && json_integer_value(json_object_get(e, "seq")) == seq ? json_string_value(json_object_get(e, "link"))
                                                                      : NULL;
}

tb_anchor_verifier *tb_anchor_verifier_new(sqlite3 *db) {
    tb_anchor_verifier *v = tb_xcalloc(1, sizeof *v, "anchor verifier");
    v->db = db;
    return v;
}

void tb_anchor_verifier_free(tb_anchor_verifier *v) {
    if (!v) return;
    for (size_t i = 0; i < v->n; i++) {
        free(v->ledgers[i].version_dir);
        json_decref(v->ledgers[i].entries);
        free(v->ledgers[i].problems);
    }
    free(v->ledgers);
    free(v);
}

__attribute__((format(printf, 2, 3))) static void add_problem(char **problems, const char *fmt, ...) {
    char line[2 * PATH_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    size_t have = *problems ? strlen(*problems) : 0, n = strlen(line);
    *problems = tb_xrealloc(*problems, have + n + 2, "anchor problems");
    memcpy(*problems + have, line, n);
    memcpy(*problems + have + n, "\n", 2);
}

// Reads the version's ledger and checks its chain and its head against the catalogue.
static ledger *load_ledger(tb_anchor_verifier *v, const char *version_dir) {
    for (size_t i = 0; i < v->n; i++)
        if (!strcmp(v->ledgers[i].version_dir, version_dir)) return &v->ledgers[i];
    if (v->n == v->cap) v->ledgers = tb_xreallocarray(v->ledgers, v->cap = v->cap ? 2 * v->cap : 8, sizeof *v->ledgers, "ledgers");
    ledger *l = &v->ledgers[v->n++];
    *l = (ledger){.version_dir = tb_xstrdup(version_dir, "ledger path"), .entries = json_array()};
    char key[PATH_MAX], path[PATH_MAX + 32];
    tb_error err;
    if (version_key(version_dir, key, sizeof key, &err) != 0 ||
        tb_path_format(path, sizeof path, &err, "%s/" TB_EXPERIMENT_LEDGER, version_dir) != 0) {
        add_problem(&l->problems, "%s", err.msg);
        return l;
    }
    // the catalogue's head for the version
    long long head_seq = 0;
    char head_link[65] = "";
    if (!v->db) {
        add_problem(&l->problems, "anchors not checked: the catalogue (%s) could not be opened, and without it the "
                                  "ledger %s could be rewritten unnoticed", TB_CATALOG, path);
    } else {
        sqlite3_stmt *st;
        if (sqlite3_prepare_v2(v->db, "SELECT seq, link FROM anchor_heads WHERE version_dir = ?1", -1, &st, NULL) ==
            SQLITE_OK) {
            sqlite3_bind_text(st, 1, key, -1, SQLITE_STATIC);
            if (sqlite3_step(st) == SQLITE_ROW) {
                l->have_head = 1;
                head_seq = sqlite3_column_int64(st, 0);
                snprintf(head_link, sizeof head_link, "%s", (const char *)sqlite3_column_text(st, 1) ?: "");
            }
            sqlite3_finalize(st);
        } else {
            add_problem(&l->problems, "anchors not checked: catalogue: %s", sqlite3_errmsg(v->db));
        }
    }
    struct stat st;
    if (lstat(path, &st) != 0) {
        if (l->have_head)
            add_problem(&l->problems, "ledger missing: %s (the catalogue anchored %lld entries of %s; deleted?)", path,
                        head_seq, key);
        return l;
    }
    // opened only when a regular file: a FIFO put in its place would block prove forever
    const int fd = tb_open_regular(path, "the version's ledger is expected", NULL, &err);
    FILE *f = fd >= 0 ? fdopen(fd, "r") : NULL;
    if (!f) {
        if (fd >= 0) close(fd);
        add_problem(&l->problems, "%s", fd >= 0 ? strerror(errno) : err.msg);
        return l;
    }
    char *line = NULL;
    size_t cap = 0;
    long long lineno = 0, seq = 0;
    char prev[65] = ZERO_LINK;
    int broken = 0;
    while (getline(&line, &cap, f) > 0) {
        lineno++;
        json_error_t jerr;
        json_t *e = json_loads(line, 0, &jerr);
        const char *kind = json_string_value(json_object_get(e, "kind")),
                   *name = json_string_value(json_object_get(e, "name")),
                   *sha = json_string_value(json_object_get(e, "sha256")),
                   *p = json_string_value(json_object_get(e, "prev")),
                   *link = json_string_value(json_object_get(e, "link"));
        json_t *s = json_object_get(e, "seq");
        char want[65];
        if (!broken && (!kind || !name || !sha || !p || !link || !json_is_integer(s))) {
            add_problem(&l->problems, "ledger %s line %lld: not a ledger entry (%s)", path, lineno,
                        e ? "a field is missing" : jerr.text);
            broken = 1;
        } else if (!broken) {
            chain_link(p, json_integer_value(s), kind, name, sha, want);
            if (json_integer_value(s) != seq + 1 || strcmp(p, prev) || strcmp(link, want)) {
                add_problem(&l->problems,
                            "ledger %s line %lld: the chain breaks (seq %lld after %lld; its prev or link is not the "
                            "chain's): the ledger was edited",
                            path, lineno, (long long)json_integer_value(s), seq);
                broken = 1;
            }
        }
        if (e && !broken) {
            seq = json_integer_value(s);
            snprintf(prev, sizeof prev, "%s", link);
            json_array_append(l->entries, e);
        }
        json_decref(e);
    }
    free(line);
    fclose(f);
    if (v->db) {
        if (!l->have_head)
            add_problem(&l->problems,
                        "the catalogue has no anchors for %s (%s deleted or replaced?): its ledger alone could have "
                        "been rewritten, so nothing of the version is vouched for",
                        key, TB_CATALOG);
        else if (!broken && (seq != head_seq || strcmp(prev, head_link)))
            add_problem(&l->problems,
                        "ledger %s ends at seq %lld (link %.12s...), the catalogue's head is seq %lld (link %.12s...): "
                        "entries were removed, added or the ledger rewritten",
                        path, seq, prev, head_seq, head_link);
    }
    if (v->signer.key)
        l->signed_seq =
            v->signer.signed_seq(v->signer.key, version_dir, key, link_at, l, l->sign_why, sizeof l->sign_why);
    return l;
}

int tb_anchor_ledger_head(tb_anchor_verifier *v, const char *version_dir, char *key, size_t key_len, long long *seq,
                          char link[65], char **problems) {
    ledger *l = load_ledger(v, version_dir);
    tb_error err;
    *problems = NULL;
    if (version_key(version_dir, key, key_len, &err) != 0) {
        *problems = tb_xstrdup(err.msg, "problems");
        return -1;
    }
    if (l->problems) {
        *problems = tb_xstrdup(l->problems, "problems");
        return -1;
    }
    json_t *last = json_array_get(l->entries, json_array_size(l->entries) - 1);
    if (!last) {
        *problems = tb_xstrdup("its ledger is empty or missing: nothing was anchored", "problems");
        return -1;
    }
    *seq = json_integer_value(json_object_get(last, "seq"));
    snprintf(link, 65, "%s", json_string_value(json_object_get(last, "link")));
    return 0;
}

// Each line of text to add; how many.
static int emit(const char *text, void (*add)(void *ctx, const char *line), void *ctx) {
    int n = 0;
    for (const char *p = text; p && *p; n++) {
        size_t len = strcspn(p, "\n");
        char one[2 * PATH_MAX];
        snprintf(one, sizeof one, "%.*s", (int)len, p);
        add(ctx, one);
        p += len + (p[len] == '\n');
    }
    return n;
}

static const char *what_of(const char *kind, const char *name, char *buf, size_t len) {
    if (!strcmp(kind, TB_ANCHOR_RECORD)) snprintf(buf, len, "the manifest of record %s", name);
    else snprintf(buf, len, "%s", name);
    return buf;
}

int tb_anchor_verify(tb_anchor_verifier *v, const char *version_dir, const char *kind, const char *name,
                     const char *sha256, void (*add)(void *ctx, const char *line), void *ctx) {
    ledger *l = load_ledger(v, version_dir);
    char *problems = NULL, what[512], key[PATH_MAX];
    tb_error err;
    what_of(kind, name, what, sizeof what);
    if (version_key(version_dir, key, sizeof key, &err) != 0) snprintf(key, sizeof key, "%s", version_dir);
    // the item's latest ledger entry
    json_t *entry = NULL;
    for (size_t i = json_array_size(l->entries); i-- > 0;) {
        json_t *e = json_array_get(l->entries, i);
        if (!strcmp(json_string_value(json_object_get(e, "kind")), kind) &&
            !strcmp(json_string_value(json_object_get(e, "name")), name)) {
            entry = e;
            break;
        }
    }
    // and the catalogue's row
    int have_row = 0;
    long long row_seq = 0;
    char row_sha[65] = "", row_link[65] = "";
    sqlite3_stmt *st;
    if (v->db && sqlite3_prepare_v2(v->db, "SELECT sha256, seq, link FROM anchors WHERE version_dir = ?1 AND kind = ?2 "
                                           "AND name = ?3",
                                    -1, &st, NULL) == SQLITE_OK) {
        sqlite3_bind_text(st, 1, key, -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 2, kind, -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 3, name, -1, SQLITE_STATIC);
        if (sqlite3_step(st) == SQLITE_ROW) {
            have_row = 1;
            snprintf(row_sha, sizeof row_sha, "%s", (const char *)sqlite3_column_text(st, 0) ?: "");
            row_seq = sqlite3_column_int64(st, 1);
            snprintf(row_link, sizeof row_link, "%s", (const char *)sqlite3_column_text(st, 2) ?: "");
        }
        sqlite3_finalize(st);
    }
    const char *entry_sha = json_string_value(json_object_get(entry, "sha256"));
    const char *entry_link = json_string_value(json_object_get(entry, "link"));
    const long long entry_seq = json_integer_value(json_object_get(entry, "seq"));
    if (!sha256) {
        if (entry || have_row)
            add_problem(&problems, "%s is missing, but it was anchored (seq %lld of %s): deleted after it was written",
                        what, entry ? entry_seq : row_seq, key);
    } else if (!entry && !have_row) {
        add_problem(&problems,
                    "%s is not anchored: neither the ledger nor the catalogue has its digest (written by hand, or "
                    "before anchoring existed: run it again)",
                    what);
    } else {
        if (!entry) add_problem(&problems, "%s is not in the ledger of %s (the catalogue anchored it at seq %lld)", what,
                                key, row_seq);
        else if (strcmp(entry_sha, sha256))
            add_problem(&problems, "%s altered since it was anchored: its sha256 is %s, the ledger's (seq %lld) %s", what,
                        sha256, entry_seq, entry_sha);
        if (v->db && !have_row) add_problem(&problems, "%s is not anchored in the catalogue (%s)", what, TB_CATALOG);
        else if (have_row && strcmp(row_sha, sha256))
            add_problem(&problems, "%s altered since it was anchored: its sha256 is %s, the catalogue's (seq %lld) %s",
                        what, sha256, row_seq, row_sha);
        else if (have_row && entry && (row_seq != entry_seq || strcmp(row_link, entry_link)))
            add_problem(&problems,
                        "%s: the ledger's entry (seq %lld) is not the one the catalogue anchored (seq %lld): the ledger "
                        "was rewritten",
                        what, entry_seq, row_seq);
    }
    if (v->signer.key && sha256 && entry) {
        if (l->signed_seq == 0) add_problem(&problems, "%s", l->sign_why);
        else if (entry_seq > l->signed_seq)
            add_problem(&problems,
                        "%s was anchored at seq %lld, after the last head %s signed (seq %lld of %s): not signed", what,
                        entry_seq, v->signer.id(v->signer.key), l->signed_seq, key);
    }
    int added = emit(l->problems, add, ctx) + emit(problems, add, ctx);
    free(problems);
    return added;
}

int tb_anchor_records_check(tb_anchor_verifier *v, const char *version_dir, void (*add)(void *ctx, const char *line),
                            void *ctx) {
    ledger *l = load_ledger(v, version_dir);
    json_t *anchored = json_object();  // run id → the seq that anchored it (its latest)
    size_t i;
    json_t *e;
    json_array_foreach(l->entries, i, e) {
        const char *kind = json_string_value(json_object_get(e, "kind"));
        const char *name = json_string_value(json_object_get(e, "name"));
        if (kind && name && !strcmp(kind, TB_ANCHOR_RECORD))
            json_object_set_new(anchored, name, json_integer(json_integer_value(json_object_get(e, "seq"))));
    }
    char key[PATH_MAX];
    tb_error err;
    sqlite3_stmt *st;
    if (v->db && version_key(version_dir, key, sizeof key, &err) == 0 &&
        sqlite3_prepare_v2(v->db, "SELECT name, seq FROM anchors WHERE version_dir = ?1 AND kind = ?2", -1, &st,
                           NULL) == SQLITE_OK) {
        sqlite3_bind_text(st, 1, key, -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 2, TB_ANCHOR_RECORD, -1, SQLITE_STATIC);
        while (sqlite3_step(st) == SQLITE_ROW) {
            const char *name = (const char *)sqlite3_column_text(st, 0);
            if (name && !json_object_get(anchored, name))
                json_object_set_new(anchored, name, json_integer(sqlite3_column_int64(st, 1)));
        }
        sqlite3_finalize(st);
    }
    int n = 0;
    const char *run;
    json_t *seq;
    json_object_foreach(anchored, run, seq) {
        char path[PATH_MAX + 64], line[2 * PATH_MAX], hex[65];
        struct stat sb;
        const long long at = (long long)json_integer_value(seq);
        if (!*run || !strcmp(run, ".") || !strcmp(run, "..") || strpbrk(run, "/\n") ||
            tb_path_format(path, sizeof path, &err, "%s/%s/" TB_RECORD_MANIFEST, version_dir, run) != 0) {
            snprintf(line, sizeof line, "the record anchored at seq %lld is named '%.200s', which is not a run id: the "
                     "anchors were written by hand", at, run);
        } else if (lstat(path, &sb) != 0) {
            snprintf(line, sizeof line,
                     "run %s was anchored as a record of this version (seq %lld) and its record is gone (no %s): "
                     "which sweep point it measured cannot be told, so a claim of the version cannot show it rests "
                     "on every run measured", run, at, path);
        } else if (!S_ISREG(sb.st_mode)) {
            snprintf(line, sizeof line, "run %s, anchored as a record of this version (seq %lld): %s is %s, not a "
                     "regular file", run, at, path, tb_file_kind(sb.st_mode));
        } else if (tb_json_digest(path, hex, &err) != 0) {
            snprintf(line, sizeof line, "run %s, anchored as a record of this version (seq %lld): %s", run, at,
                     err.msg);
        } else {  // as anchored: an unlisted record's manifest is what the selection rule reads
            n += tb_anchor_verify(v, version_dir, TB_ANCHOR_RECORD, run, hex, add, ctx);
            continue;
        }
        add(ctx, line);
        n++;
    }
    json_decref(anchored);
    return n;
}
