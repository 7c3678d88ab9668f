// catalog.c — the catalogue: records and claims in SQLite (catalog.h is the contract).
//
// A record is read whole into memory first (manifest, every rank's metrics) and only then
// written, inside one SAVEPOINT: a record that cannot be read leaves the catalogue as it
// was, and a process killed mid-write leaves SQLite's journal to roll the run back.
#include "records/catalog.h"

#include <dirent.h>
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/fileio.h"
#include "core/json_number.h"
#include "core/run_dir.h"
#include "core/xalloc.h"
#include "records/record.h"

#define CAT_PATH_MAX 4096

// ---------------------------------------------------------------------------------------
// Small helpers

static int exec_sql(sqlite3 *db, const char *sql, tb_error *err) {
    char *msg = NULL;
    if (sqlite3_exec(db, sql, NULL, NULL, &msg) != SQLITE_OK) {
        tb_fail(err, "catalogue: %s (in: %.80s)", msg ? msg : sqlite3_errmsg(db), sql);
        sqlite3_free(msg);
        return -1;
    }
    return 0;
}

static int prepare(sqlite3 *db, sqlite3_stmt **st, const char *sql, tb_error *err) {
    if (sqlite3_prepare_v2(db, sql, -1, st, NULL) != SQLITE_OK)
        return tb_fail(err, "catalogue: %s (preparing: %.80s)", sqlite3_errmsg(db), sql);
    return 0;
}

static int step_done(sqlite3 *db, sqlite3_stmt *st, tb_error *err) {
    int rc = sqlite3_step(st);
    sqlite3_reset(st);
    sqlite3_clear_bindings(st);
    if (rc != SQLITE_DONE && rc != SQLITE_ROW) return tb_fail(err, "catalogue: %s", sqlite3_errmsg(db));
    return 0;
}

static void bind_text(sqlite3_stmt *st, int i, const char *s) {
    if (s) sqlite3_bind_text(st, i, s, -1, SQLITE_TRANSIENT);
    else sqlite3_bind_null(st, i);
}

// A JSON value as compact text (NULL for absent / null), malloc'd. Keys keep the file's
// order (a config reads as the engine wrote it), or are sorted (claims' args: a stable text
// to compare).
static char *json_text(json_t *v, int sort_keys) {
    if (!v || json_is_null(v)) return NULL;
    return json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY | JSON_REAL_PRECISION(17) | (sort_keys ? JSON_SORT_KEYS : 0));
}

static void bind_json_sorted(sqlite3_stmt *st, int i, json_t *v) {
    char *text = json_text(v, 1);
    if (text) sqlite3_bind_text(st, i, text, -1, free);
    else sqlite3_bind_null(st, i);
}

static void bind_json(sqlite3_stmt *st, int i, json_t *v) {
    char *text = json_text(v, 0);
    if (text) sqlite3_bind_text(st, i, text, -1, free);
    else sqlite3_bind_null(st, i);
}

static void bind_json_int(sqlite3_stmt *st, int i, json_t *v) {
    if (json_is_integer(v)) sqlite3_bind_int64(st, i, (sqlite3_int64)json_integer_value(v));
    else if (json_is_boolean(v)) sqlite3_bind_int(st, i, json_is_true(v));
    else sqlite3_bind_null(st, i);
}

// A number of a metrics line (core/json_number.h): finite ones as REAL; NaN and the
// infinities as the TEXT they were written as, since SQLite stores a NaN REAL as NULL and
// "absent" must not be confused with "diverged".
static void bind_json_real(sqlite3_stmt *st, int i, json_t *v) {
    double d;
    if (!tb_json_number_value(v, &d)) sqlite3_bind_null(st, i);
    else if (isfinite(d)) sqlite3_bind_double(st, i, d);
    else sqlite3_bind_text(st, i, isnan(d) ? "NaN" : d > 0 ? "Infinity" : "-Infinity", -1, SQLITE_STATIC);
}

static int path_of(char *out, size_t size, const char *dir, const char *name, tb_error *err) {
    int n = snprintf(out, size, "%s/%s", dir, name);
    if (n < 0 || (size_t)n >= size) return tb_fail(err, "%s/%s: path too long", dir, name);
    return 0;
}

static int is_dir(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

// "v<digits>" → the version, or -1.
static long version_of_dirname(const char *name) {
    if (name[0] != 'v' || !name[1]) return -1;
    char *end;
    long v = strtol(name + 1, &end, 10);
    return *end || v < 0 ? -1 : v;
}

// The trailing components of a record directory: .../<experiment>/v<version>/<run-id>.
typedef struct record_ids {
    char experiment[256], run_id[256];
    long version;
} record_ids;

static int ids_from_path(const char *record_dir, record_ids *ids, tb_error *err) {
    char copy[CAT_PATH_MAX];
    snprintf(copy, sizeof copy, "%s", record_dir);
    size_t len = strlen(copy);
    while (len > 1 && copy[len - 1] == '/') copy[--len] = '\0';
    char *parts[3] = {NULL, NULL, NULL};
    for (int k = 0; k < 3; k++) {
        char *slash = strrchr(copy, '/');
        parts[k] = slash ? slash + 1 : copy;
        if (!slash) break;
        *slash = '\0';
    }
    if (!parts[2] || !parts[1] || version_of_dirname(parts[1]) < 0 || !*parts[0] || !*parts[2])
        return tb_fail(err, "%s: not a record directory (<artifacts>/<experiment>/v<version>/<run-id>)", record_dir);
    snprintf(ids->run_id, sizeof ids->run_id, "%s", parts[0]);
    snprintf(ids->experiment, sizeof ids->experiment, "%s", parts[2]);
    ids->version = version_of_dirname(parts[1]);
    return 0;
}

// manifest.json's mtime and size, "" when there is none: a sync re-reads a record whose
// stamp changed.
static void manifest_stamp(const char *manifest_path, char *out, size_t size) {
    struct stat st;
    if (stat(manifest_path, &st) != 0) {
        out[0] = '\0';
        return;
    }
    snprintf(out, size, "%lld.%09ld:%lld", (long long)st.st_mtim.tv_sec, (long)st.st_mtim.tv_nsec,
             (long long)st.st_size);
}

// ---------------------------------------------------------------------------------------
// Opening

static int has_column(sqlite3 *db, const char *table, const char *column) {
    sqlite3_stmt *st;
    int found = 0;
    if (sqlite3_prepare_v2(db, "SELECT 1 FROM pragma_table_info(?1) WHERE name = ?2", -1, &st, NULL) != SQLITE_OK)
        return 0;
    sqlite3_bind_text(st, 1, table, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, column, -1, SQLITE_STATIC);
    found = sqlite3_step(st) == SQLITE_ROW;
    sqlite3_finalize(st);
    return found;
}

int tb_catalog_open(sqlite3 **db, const char *artifacts, tb_error *err) {
    *db = NULL;
    if (tb_mkdir_p(artifacts, err) != 0) return tb_fail_prefix(err, "artifacts directory");
    char path[CAT_PATH_MAX];
    if (path_of(path, sizeof path, artifacts, TB_CATALOG, err) != 0) return -1;
    if (sqlite3_open_v2(path, db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, NULL) != SQLITE_OK) {
        tb_fail(err, "%s: cannot open the catalogue (%s)", path, *db ? sqlite3_errmsg(*db) : "out of memory");
        sqlite3_close(*db);
        *db = NULL;
        return -1;
    }
    sqlite3_busy_timeout(*db, TB_CATALOG_BUSY_TIMEOUT_MS);
    int rc = exec_sql(*db, "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;", err);
    if (rc == 0) rc = exec_sql(*db, "BEGIN IMMEDIATE;", err);
    if (rc == 0) rc = exec_sql(*db, TB_CATALOG_SCHEMA, err);
    if (rc == 0) {
        sqlite3_stmt *st;
        rc = prepare(*db, &st, "SELECT value FROM meta WHERE key = 'schema_version'", err);
        if (rc == 0) {
            if (sqlite3_step(st) == SQLITE_ROW) {
                const char *v = (const char *)sqlite3_column_text(st, 0);
                if (v && (!strcmp(v, "1") || !strcmp(v, "2") || !strcmp(v, "3"))) {
                    // schema 1 held repetitions 0-based before manifest_version 2: forgetting every
                    // manifest's stamp makes the next sync store them 1-based. Schema 2 lacked
                    // claims.at_most (the next sync re-reads every claims.json; claims and their
                    // prove history kept). Schema 3 lacked the anchors tables, just created.
                    rc = exec_sql(*db, !strcmp(v, "1") ? "UPDATE runs SET manifest_stamp = '';" : "", err);
                    if (rc == 0 && !has_column(*db, "claims", "at_most"))
                        rc = exec_sql(*db, "ALTER TABLE claims ADD COLUMN at_most REAL;", err);
                    if (rc == 0)
                        rc = exec_sql(*db, "UPDATE meta SET value = '" TB_CATALOG_SCHEMA_VERSION
                                      "' WHERE key = 'schema_version';", err);
                } else if (!v || strcmp(v, TB_CATALOG_SCHEMA_VERSION) != 0)
                    rc = tb_fail(err, "%s: catalogue schema version %s, this tracebook writes %s: use the tracebook "
                                      "that wrote it (deleting the file loses its anchors, and the records it "
                                      "anchored would no longer prove)",
                                 path, v ? v : "(none)", TB_CATALOG_SCHEMA_VERSION);
            } else {
                rc = exec_sql(*db, "INSERT INTO meta(key, value) VALUES('schema_version', '" TB_CATALOG_SCHEMA_VERSION "')",
                              err);
            }
            sqlite3_finalize(st);
        }
    }
    if (rc == 0) rc = exec_sql(*db, "COMMIT;", err);
    if (rc != 0) {
        if (!strstr(err ? err->msg : "", path)) tb_fail_prefix(err, "%s", path);
        sqlite3_close(*db);
        *db = NULL;
        return -1;
    }
    return 0;
}

// ---------------------------------------------------------------------------------------
// Reading a record

typedef struct metric_row {
    int rank;
    int64_t step;
    json_t *line;  // the parsed line (its numbers are read when binding)
} metric_row;

typedef struct record {
    char dir[CAT_PATH_MAX];
    record_ids ids;
    json_t *manifest;  // NULL: no manifest
    const char *status;
    char stamp[64];
    metric_row *rows;
    int nrows, cap;
} record;

static void record_free(record *r) {
    for (int i = 0; i < r->nrows; i++) json_decref(r->rows[i].line);
    free(r->rows);
    json_decref(r->manifest);
    memset(r, 0, sizeof *r);
}

// "running" with a heartbeat older than TB_HEARTBEAT_STALE_S (or none) is a dead runner.
static int heartbeat_is_stale(const char *record_dir) {
    char path[CAT_PATH_MAX];
    if (path_of(path, sizeof path, record_dir, TB_RECORD_HEARTBEAT, NULL) != 0) return 1;
    double beat = -1;
    FILE *f = fopen(path, "r");
    if (f) {
        if (fscanf(f, "%lf", &beat) != 1) beat = -1;
        fclose(f);
    }
    if (beat < 0) {
        struct stat st;
        if (stat(path, &st) != 0) return 1;
        beat = (double)st.st_mtim.tv_sec;
    }
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    return (double)now.tv_sec - beat > TB_HEARTBEAT_STALE_S;
}

static int read_metrics_file(record *r, const char *path, int rank, int finished, tb_error *err) {
    FILE *f = fopen(path, "rb");
    if (!f) return tb_fail(err, "%s: cannot open (%s)", path, strerror(errno));
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    int lineno = 0, rc = 0;
    while ((len = getline(&line, &cap, f)) > 0) {
        lineno++;
        int terminated = line[len - 1] == '\n';
        size_t k = 0;
        while (k < (size_t)len && (line[k] == ' ' || line[k] == '\t' || line[k] == '\r' || line[k] == '\n')) k++;
        if (k == (size_t)len) continue;
        json_error_t jerr;
        json_t *o = json_loadb(line, (size_t)len, 0, &jerr);
        json_t *step = o ? json_object_get(o, "step") : NULL;
        if (!o || !json_is_integer(step)) {
            json_decref(o);
            // a killed run's last line may be cut short: not evidence, not an error
            if (!terminated && !finished) break;
            rc = tb_fail(err, "%s:%d: %s", path, lineno, !o ? jerr.text : "not a metrics line (no integer 'step')");
            break;
        }
        if (r->nrows == r->cap) {
            r->cap = r->cap ? 2 * r->cap : 64;
            r->rows = tb_xreallocarray(r->rows, (size_t)r->cap, sizeof *r->rows, "metrics rows");
        }
        r->rows[r->nrows++] = (metric_row){rank, (int64_t)json_integer_value(step), o};
    }
    free(line);
    if (rc == 0 && ferror(f)) rc = tb_fail(err, "%s: read error", path);
    fclose(f);
    return rc;
}

// Reads every run/metrics.rank-NNNNN.jsonl of the record.
static int read_metrics(record *r, tb_error *err) {
    char run_dir[CAT_PATH_MAX];
    if (path_of(run_dir, sizeof run_dir, r->dir, TB_RECORD_RUN_DIR, err) != 0) return -1;
    DIR *d = opendir(run_dir);
    if (!d) return 0;  // a run that never started its engine: no metrics
    const int finished = r->status && !strcmp(r->status, "finished");
    struct dirent *e;
    int rc = 0;
    while (rc == 0 && (e = readdir(d))) {
        int rank;
        if (!tb_rank_file_match(e->d_name, TB_RANK_METRICS, &rank)) continue;
        char path[CAT_PATH_MAX];
        rc = path_of(path, sizeof path, run_dir, e->d_name, err);
        if (rc == 0) rc = read_metrics_file(r, path, rank, finished, err);
    }
    closedir(d);
    return rc;
}

static int record_read(record *r, const char *record_dir, tb_error *err) {
    memset(r, 0, sizeof *r);
    snprintf(r->dir, sizeof r->dir, "%s", record_dir);
    if (!is_dir(record_dir)) return tb_fail(err, "%s: no such record directory", record_dir);
    if (ids_from_path(record_dir, &r->ids, err) != 0) return -1;
    char path[CAT_PATH_MAX];
    if (path_of(path, sizeof path, record_dir, TB_RECORD_MANIFEST, err) != 0) return -1;
    manifest_stamp(path, r->stamp, sizeof r->stamp);
    r->status = "incomplete";
    if (r->stamp[0]) {
        json_error_t jerr;
        r->manifest = json_load_file(path, 0, &jerr);
        if (!r->manifest || !json_is_object(r->manifest)) {
            record_free(r);
            return tb_fail(err, "%s: line %d: %s", path, jerr.line, r->manifest ? "not a JSON object" : jerr.text);
        }
        json_t *m = r->manifest;
        json_t *mv = json_object_get(m, "manifest_version");
        if (json_is_integer(mv) && json_integer_value(mv) > TB_MANIFEST_VERSION) {
            tb_fail(err, "%s: manifest_version %lld, this tracebook reads up to %d", path,
                    (long long)json_integer_value(mv), TB_MANIFEST_VERSION);
            record_free(r);
            return -1;
        }
        json_t *id = json_object_get(m, "run_id"), *exp = json_object_get(m, "experiment"),
               *ver = json_object_get(m, "version"), *status = json_object_get(m, "status");
        const char *bad = !json_is_string(id) ? "run_id" : !json_is_string(exp) ? "experiment"
                        : !json_is_integer(ver) ? "version" : !json_is_string(status) ? "status" : NULL;
        if (bad) {
            record_free(r);
            return tb_fail(err, "%s: no valid '%s'", path, bad);
        }
        if (strcmp(json_string_value(id), r->ids.run_id) || strcmp(json_string_value(exp), r->ids.experiment) ||
            json_integer_value(ver) != r->ids.version) {
            tb_fail(err, "%s: names run %s of %s v%lld, but lies at %s/v%ld/%s", path, json_string_value(id),
                    json_string_value(exp), (long long)json_integer_value(ver), r->ids.experiment, r->ids.version,
                    r->ids.run_id);
            record_free(r);
            return -1;
        }
        r->status = json_string_value(status);
        if (!strcmp(r->status, "running") && heartbeat_is_stale(record_dir)) r->status = "incomplete";
    }
    if (read_metrics(r, err) != 0) {
        record_free(r);
        return -1;
    }
    return 0;
}

// ---------------------------------------------------------------------------------------
// Writing a record

typedef struct writer {
    sqlite3 *db;
    sqlite3_stmt *experiment, *experiment_bare, *run, *delete_metrics, *metric;
} writer;

static void writer_close(writer *w) {
    sqlite3_finalize(w->experiment);
    sqlite3_finalize(w->experiment_bare);
    sqlite3_finalize(w->run);
    sqlite3_finalize(w->delete_metrics);
    sqlite3_finalize(w->metric);
    memset(w, 0, sizeof *w);
}

static int writer_open(writer *w, sqlite3 *db, tb_error *err) {
    memset(w, 0, sizeof *w);
    w->db = db;
    int rc = prepare(db, &w->experiment,
                     "INSERT INTO experiments(name, version, question, runbook_path, runbook_sha256) "
                     "VALUES(?1, ?2, ?3, ?4, ?5) ON CONFLICT(name, version) DO UPDATE SET "
                     "question = coalesce(excluded.question, question), "
                     "runbook_path = coalesce(excluded.runbook_path, runbook_path), "
                     "runbook_sha256 = coalesce(excluded.runbook_sha256, runbook_sha256)",
                     err);
    if (rc == 0)
        rc = prepare(db, &w->experiment_bare, "INSERT OR IGNORE INTO experiments(name, version) VALUES(?1, ?2)", err);
    if (rc == 0)
        rc = prepare(db, &w->run,
                     "INSERT OR REPLACE INTO runs(run_id, experiment, version, status, repetition, sweep_point, seed,"
                     " \"commit\", branch, dirty, start, \"end\", exit_status, record_dir, replay_of, config, argv,"
                     " problem, manifest_stamp) "
                     "VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19)",
                     err);
    if (rc == 0) rc = prepare(db, &w->delete_metrics, "DELETE FROM metrics WHERE run_id = ?1", err);
    if (rc == 0)
        rc = prepare(db, &w->metric,
                     "INSERT OR REPLACE INTO metrics(run_id, rank, step, loss, step_ms, tokens_per_s, tflops,"
                     " grad_norm, mem_total_peak_bytes) VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
                     err);
    if (rc != 0) writer_close(w);
    return rc;
}

static int savepoint_end(sqlite3 *db, const char *name, int rc, tb_error *err) {
    char sql[128];
    if (rc == 0) {
        snprintf(sql, sizeof sql, "RELEASE %s;", name);
        return exec_sql(db, sql, err);
    }
    snprintf(sql, sizeof sql, "ROLLBACK TO %s; RELEASE %s;", name, name);
    exec_sql(db, sql, NULL);
    return -1;
}

// Writes the record's rows (or, with problem, an "unreadable" row) in one SAVEPOINT.
static int record_write(writer *w, const record *r, const char *problem, tb_error *err) {
    if (exec_sql(w->db, "SAVEPOINT add_run;", err) != 0) return -1;
    json_t *m = r->manifest;
    int rc = 0;
    if (m) {
        json_t *runbook = json_object_get(m, "runbook");
        sqlite3_bind_text(w->experiment, 1, r->ids.experiment, -1, SQLITE_TRANSIENT);
        sqlite3_bind_int64(w->experiment, 2, r->ids.version);
        bind_text(w->experiment, 3, json_string_value(json_object_get(m, "question")));
        bind_text(w->experiment, 4, json_string_value(json_object_get(runbook, "path")));
        bind_text(w->experiment, 5, json_string_value(json_object_get(runbook, "sha256")));
        rc = step_done(w->db, w->experiment, err);
    } else {
        sqlite3_bind_text(w->experiment_bare, 1, r->ids.experiment, -1, SQLITE_TRANSIENT);
        sqlite3_bind_int64(w->experiment_bare, 2, r->ids.version);
        rc = step_done(w->db, w->experiment_bare, err);
    }
    if (rc == 0) {
        json_t *git = json_object_get(m, "git");
        sqlite3_stmt *st = w->run;
        sqlite3_bind_text(st, 1, r->ids.run_id, -1, SQLITE_TRANSIENT);
        sqlite3_bind_text(st, 2, r->ids.experiment, -1, SQLITE_TRANSIENT);
        sqlite3_bind_int64(st, 3, r->ids.version);
        sqlite3_bind_text(st, 4, problem ? "unreadable" : r->status, -1, SQLITE_TRANSIENT);
        json_int_t rep;
        if (tb_manifest_repetition(m, &rep)) sqlite3_bind_int64(st, 5, (sqlite3_int64)rep);
        else sqlite3_bind_null(st, 5);
        bind_json_sorted(st, 6, json_object_get(m, "sweep_point"));
        bind_json_int(st, 7, json_object_get(m, "seed"));
        bind_text(st, 8, json_string_value(json_object_get(git, "commit")));
        bind_text(st, 9, json_string_value(json_object_get(git, "branch")));
        bind_json_int(st, 10, json_object_get(git, "dirty"));
        bind_text(st, 11, json_string_value(json_object_get(m, "start")));
        bind_text(st, 12, json_string_value(json_object_get(m, "end")));
        bind_json_int(st, 13, json_object_get(m, "exit_status"));
        sqlite3_bind_text(st, 14, r->dir, -1, SQLITE_TRANSIENT);
        bind_text(st, 15, json_string_value(json_object_get(m, "replay_of")));
        bind_json(st, 16, json_object_get(m, "config"));
        bind_json(st, 17, json_object_get(m, "argv"));
        bind_text(st, 18, problem);
        sqlite3_bind_text(st, 19, r->stamp, -1, SQLITE_TRANSIENT);
        rc = step_done(w->db, st, err);
    }
    if (rc == 0) {
        sqlite3_bind_text(w->delete_metrics, 1, r->ids.run_id, -1, SQLITE_TRANSIENT);
        rc = step_done(w->db, w->delete_metrics, err);
    }
    for (int i = 0; rc == 0 && !problem && i < r->nrows; i++) {
        sqlite3_stmt *st = w->metric;
        json_t *o = r->rows[i].line;
        sqlite3_bind_text(st, 1, r->ids.run_id, -1, SQLITE_TRANSIENT);
        sqlite3_bind_int(st, 2, r->rows[i].rank);
        sqlite3_bind_int64(st, 3, r->rows[i].step);
        bind_json_real(st, 4, json_object_get(o, "loss"));
        bind_json_real(st, 5, json_object_get(o, "step_ms"));
        bind_json_real(st, 6, json_object_get(o, "tokens_per_s"));
        bind_json_real(st, 7, json_object_get(o, "tflops"));
        bind_json_real(st, 8, json_object_get(o, "grad_norm"));
        bind_json_int(st, 9, json_object_get(o, "mem_total_peak_bytes"));
        rc = step_done(w->db, st, err);
    }
    if (rc != 0) tb_fail_prefix(err, "%s", r->dir);
    return savepoint_end(w->db, "add_run", rc, err);
}

int tb_catalog_add_run(sqlite3 *db, const char *record_dir, tb_error *err) {
    record r;
    if (record_read(&r, record_dir, err) != 0) return -1;
    writer w;
    int rc = writer_open(&w, db, err);
    if (rc == 0) {
        rc = record_write(&w, &r, NULL, err);
        writer_close(&w);
    }
    record_free(&r);
    return rc;
}

// ---------------------------------------------------------------------------------------
// Claims

int tb_catalog_add_claims(sqlite3 *db, const char *path, tb_error *err) {
    record_ids where;  // its claims are catalogued under the experiment and version where it lies
    if (ids_from_path(path, &where, err) != 0) return -1;
    json_error_t jerr;
    json_t *root = json_load_file(path, 0, &jerr);
    if (!root) return tb_fail(err, "%s: line %d: %s", path, jerr.line, jerr.text);
    json_t *exp = json_object_get(root, "experiment"), *ver = json_object_get(root, "version"),
           *claims = json_object_get(root, "claims");
    if (!json_is_string(exp) || !json_is_integer(ver) || !json_is_array(claims)) {
        tb_fail(err, "%s: needs \"experiment\" (string), \"version\" (integer) and \"claims\" (array)", path);
        return json_decref(root), -1;
    } else if (strcmp(where.experiment, json_string_value(exp)) || json_integer_value(ver) != where.version) {
        tb_fail(err, "%s: names experiment \"%s\" version %lld, not the directory it lies in (%s/v%ld)", path,
                json_string_value(exp), (long long)json_integer_value(ver), where.experiment, where.version);
        return json_decref(root), -1;
    }
    size_t i;
    json_t *c;
    json_array_foreach(claims, i, c) {
        const char *bad = !json_is_string(json_object_get(c, "id"))       ? "id (string)"
                          : !json_is_number(json_object_get(c, "value")) && !json_is_number(json_object_get(c, "at_most"))
                              ? "value (number) or at_most (number)"
                          : !json_is_string(json_object_get(c, "parser")) ? "parser (string)"
                          : !json_is_array(json_object_get(c, "runs"))    ? "runs (array of run ids)"
                                                                          : NULL;
        if (bad) {
            json_decref(root);
            return tb_fail(err, "%s: claims[%zu]: needs %s", path, i, bad);
        }
    }
    sqlite3_stmt *upsert = NULL, *prune = NULL, *bare = NULL;
    int rc = exec_sql(db, "SAVEPOINT add_claims;", err);
    if (rc != 0) {
        json_decref(root);
        return -1;
    }
    rc = prepare(db, &upsert,
                 "INSERT INTO claims(experiment, version, id, value, parser, text, runs, args, relative_tolerance, "
                 "at_most) VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10) ON CONFLICT(experiment, version, id) DO "
                 "UPDATE SET "
                 "proven_at = CASE WHEN value IS excluded.value AND at_most IS excluded.at_most AND parser IS "
                 "excluded.parser AND runs IS excluded.runs AND args IS excluded.args THEN proven_at END, "
                 "proven_value = CASE WHEN value IS excluded.value AND at_most IS excluded.at_most AND parser IS "
                 "excluded.parser AND runs IS excluded.runs AND args IS excluded.args THEN proven_value END, "
                 "value = excluded.value, at_most = excluded.at_most, parser = excluded.parser, text = excluded.text, "
                 "runs = excluded.runs, args = excluded.args, relative_tolerance = excluded.relative_tolerance",
                 err);
    if (rc == 0)
        rc = prepare(db, &prune,
                     "DELETE FROM claims WHERE experiment = ?1 AND version = ?2 "
                     "AND id NOT IN (SELECT value FROM json_each(?3))",
                     err);
    if (rc == 0) rc = prepare(db, &bare, "INSERT OR IGNORE INTO experiments(name, version) VALUES(?1, ?2)", err);
    if (rc == 0) {
        sqlite3_bind_text(bare, 1, json_string_value(exp), -1, SQLITE_TRANSIENT);
        sqlite3_bind_int64(bare, 2, json_integer_value(ver));
        rc = step_done(db, bare, err);
    }
    json_t *ids = json_array();
    json_array_foreach(claims, i, c) {
        if (rc != 0) break;
        json_array_append(ids, json_object_get(c, "id"));
        sqlite3_bind_text(upsert, 1, json_string_value(exp), -1, SQLITE_TRANSIENT);
        sqlite3_bind_int64(upsert, 2, json_integer_value(ver));
        sqlite3_bind_text(upsert, 3, json_string_value(json_object_get(c, "id")), -1, SQLITE_TRANSIENT);
        // a claim states its number (value) or bounds it (at_most); the other is NULL
        bind_json_real(upsert, 4, json_object_get(c, "value"));
        bind_json_real(upsert, 10, json_object_get(c, "at_most"));
        bind_text(upsert, 5, json_string_value(json_object_get(c, "parser")));
        bind_text(upsert, 6, json_string_value(json_object_get(c, "text")));
        bind_json_sorted(upsert, 7, json_object_get(c, "runs"));
        bind_json_sorted(upsert, 8, json_object_get(c, "args"));
        bind_json_real(upsert, 9, json_object_get(c, "relative_tolerance"));
        rc = step_done(db, upsert, err);
    }
    if (rc == 0) {
        sqlite3_bind_text(prune, 1, json_string_value(exp), -1, SQLITE_TRANSIENT);
        sqlite3_bind_int64(prune, 2, json_integer_value(ver));
        bind_json(prune, 3, ids);
        rc = step_done(db, prune, err);
    }
    json_decref(ids);
    sqlite3_finalize(upsert);
    sqlite3_finalize(prune);
    sqlite3_finalize(bare);
    json_decref(root);
    if (rc != 0) tb_fail_prefix(err, "%s", path);
    return savepoint_end(db, "add_claims", rc, err);
}

// ---------------------------------------------------------------------------------------
// Rebuild: the catalogue in line with the artifacts root

typedef struct known_run {
    char *run_id, *status, *stamp, *record_dir;
    int seen;
} known_run;

static int cmp_known(const void *a, const void *b) {
    return strcmp(((const known_run *)a)->run_id, ((const known_run *)b)->run_id);
}

static char *column_dup(sqlite3_stmt *st, int i) {
    const char *s = (const char *)sqlite3_column_text(st, i);
    return tb_xstrdup(s ? s : "", "catalogue column");
}

typedef struct sync_state {
    sqlite3 *db;
    writer w;
    known_run *known;
    int nknown;
    json_t *versions;  // [[experiment, version], ...] seen as directories
    json_t *claim_versions;  // the same, for versions with a claims.json
} sync_state;

static int sync_record(sync_state *s, const char *record_dir, tb_error *err) {
    record_ids ids;
    if (ids_from_path(record_dir, &ids, err) != 0) return -1;
    known_run key = {.run_id = ids.run_id};
    known_run *k = s->nknown ? bsearch(&key, s->known, (size_t)s->nknown, sizeof *s->known, cmp_known) : NULL;
    if (k) {
        k->seen = 1;
        char manifest[CAT_PATH_MAX], stamp[64];
        if (path_of(manifest, sizeof manifest, record_dir, TB_RECORD_MANIFEST, err) != 0) return -1;
        manifest_stamp(manifest, stamp, sizeof stamp);
        int settled = strcmp(k->status, "running") && strcmp(k->status, "incomplete") &&
                      strcmp(k->status, "unreadable");
        if (settled && stamp[0] && !strcmp(stamp, k->stamp) && !strcmp(record_dir, k->record_dir)) return 0;
    }
    record r;
    tb_error why;
    if (record_read(&r, record_dir, &why) != 0) {
        // catalogued as unreadable, with the reason; the scan goes on
        memset(&r, 0, sizeof r);
        snprintf(r.dir, sizeof r.dir, "%s", record_dir);
        r.ids = ids;
        r.status = "unreadable";
        return record_write(&s->w, &r, why.msg, err);
    }
    int rc = record_write(&s->w, &r, NULL, err);
    record_free(&r);
    return rc;
}

static int sync_version(sync_state *s, const char *exp_name, const char *version_dir, long version, tb_error *err) {
    json_array_append_new(s->versions, json_pack("[s, I]", exp_name, (json_int_t)version));
    char path[CAT_PATH_MAX];
    if (path_of(path, sizeof path, version_dir, TB_EXPERIMENT_CLAIMS, err) != 0) return -1;
    if (access(path, F_OK) == 0) {
        json_array_append_new(s->claim_versions, json_pack("[s, I]", exp_name, (json_int_t)version));
        // a claims file that cannot be read is left out here; `tracebook prove` reports it
        tb_catalog_add_claims(s->db, path, NULL);
    }
    DIR *d = opendir(version_dir);
    if (!d) return 0;
    struct dirent *e;
    int rc = 0;
    while (rc == 0 && (e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        if (path_of(path, sizeof path, version_dir, e->d_name, err) != 0) {
            rc = -1;
            break;
        }
        if (e->d_type == DT_DIR || (e->d_type == DT_UNKNOWN && is_dir(path))) rc = sync_record(s, path, err);
    }
    closedir(d);
    return rc;
}

static int sync_artifacts(sync_state *s, const char *artifacts, tb_error *err) {
    DIR *top = opendir(artifacts);
    if (!top) return tb_fail(err, "%s: cannot open the artifacts directory (%s)", artifacts, strerror(errno));
    struct dirent *e;
    int rc = 0;
    while (rc == 0 && (e = readdir(top))) {
        if (e->d_name[0] == '.') continue;
        char exp_dir[CAT_PATH_MAX];
        if (path_of(exp_dir, sizeof exp_dir, artifacts, e->d_name, err) != 0) {
            rc = -1;
            break;
        }
        if (!(e->d_type == DT_DIR || (e->d_type == DT_UNKNOWN && is_dir(exp_dir)))) continue;
        DIR *d = opendir(exp_dir);
        if (!d) continue;
        struct dirent *v;
        while (rc == 0 && (v = readdir(d))) {
            long version = version_of_dirname(v->d_name);
            char version_dir[CAT_PATH_MAX];
            if (version < 0) continue;
            if (path_of(version_dir, sizeof version_dir, exp_dir, v->d_name, err) != 0) rc = -1;
            else if (is_dir(version_dir)) rc = sync_version(s, e->d_name, version_dir, version, err);
        }
        closedir(d);
    }
    closedir(top);
    return rc;
}

// Drops the rows of records, claims files and experiment versions that are gone.
static int sync_prune(sync_state *s, tb_error *err) {
    sqlite3_stmt *del_run = NULL, *del_metrics = NULL;
    int rc = prepare(s->db, &del_run, "DELETE FROM runs WHERE run_id = ?1", err);
    if (rc == 0) rc = prepare(s->db, &del_metrics, "DELETE FROM metrics WHERE run_id = ?1", err);
    for (int i = 0; rc == 0 && i < s->nknown; i++) {
        if (s->known[i].seen) continue;
        sqlite3_bind_text(del_run, 1, s->known[i].run_id, -1, SQLITE_TRANSIENT);
        rc = step_done(s->db, del_run, err);
        sqlite3_bind_text(del_metrics, 1, s->known[i].run_id, -1, SQLITE_TRANSIENT);
        if (rc == 0) rc = step_done(s->db, del_metrics, err);
    }
    sqlite3_finalize(del_run);
    sqlite3_finalize(del_metrics);
    sqlite3_stmt *st = NULL;
    if (rc == 0)
        rc = prepare(s->db, &st,
                     "DELETE FROM claims WHERE NOT EXISTS (SELECT 1 FROM json_each(?1) AS v"
                     " WHERE json_extract(v.value, '$[0]') = claims.experiment"
                     " AND json_extract(v.value, '$[1]') = claims.version)",
                     err);
    if (rc == 0) {
        bind_json(st, 1, s->claim_versions);
        rc = step_done(s->db, st, err);
    }
    sqlite3_finalize(st);
    st = NULL;
    if (rc == 0)
        rc = prepare(s->db, &st,
                     "DELETE FROM experiments WHERE NOT EXISTS (SELECT 1 FROM json_each(?1) AS v"
                     " WHERE json_extract(v.value, '$[0]') = experiments.name"
                     " AND json_extract(v.value, '$[1]') = experiments.version)",
                     err);
    if (rc == 0) {
        bind_json(st, 1, s->versions);
        rc = step_done(s->db, st, err);
    }
    sqlite3_finalize(st);
    return rc;
}

int tb_catalog_rebuild(sqlite3 *db, const char *artifacts, tb_error *err) {
    sync_state s;
    memset(&s, 0, sizeof s);
    s.db = db;
    if (!is_dir(artifacts)) return tb_fail(err, "%s: no such artifacts directory", artifacts);
    const int own_transaction = sqlite3_get_autocommit(db);
    if (own_transaction && exec_sql(db, "BEGIN IMMEDIATE;", err) != 0) return -1;
    if (exec_sql(db, "SAVEPOINT rebuild;", err) != 0) {
        if (own_transaction) exec_sql(db, "ROLLBACK;", NULL);
        return -1;
    }
    sqlite3_stmt *st;
    int rc = prepare(db, &st, "SELECT run_id, status, manifest_stamp, record_dir FROM runs", err);
    if (rc == 0) {
        int cap = 0;
        while (sqlite3_step(st) == SQLITE_ROW) {
            if (s.nknown == cap)
                s.known = tb_xreallocarray(s.known, (size_t)(cap = cap ? 2 * cap : 256), sizeof *s.known,
                                           "catalogued runs");
            s.known[s.nknown++] = (known_run){column_dup(st, 0), column_dup(st, 1), column_dup(st, 2),
                                              column_dup(st, 3), 0};
        }
        sqlite3_finalize(st);
        if (s.nknown) qsort(s.known, (size_t)s.nknown, sizeof *s.known, cmp_known);
    }
    s.versions = json_array();
    s.claim_versions = json_array();
    if (rc == 0) rc = writer_open(&s.w, db, err);
    if (rc == 0) {
        rc = sync_artifacts(&s, artifacts, err);
        if (rc == 0) rc = sync_prune(&s, err);
        writer_close(&s.w);
    }
    for (int i = 0; i < s.nknown; i++) {
        free(s.known[i].run_id);
        free(s.known[i].status);
        free(s.known[i].stamp);
        free(s.known[i].record_dir);
    }
    free(s.known);
    json_decref(s.versions);
    json_decref(s.claim_versions);
    rc = savepoint_end(db, "rebuild", rc, err);
    if (own_transaction) {
        if (rc == 0) rc = exec_sql(db, "COMMIT;", err);
        else exec_sql(db, "ROLLBACK;", NULL);
    }
    return rc;
}
