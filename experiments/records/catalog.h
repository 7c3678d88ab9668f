// catalog.h — the catalogue: every record and claim under an artifacts root, in one SQLite
// file (<artifacts>/catalog.sqlite, TB_CATALOG of core/run_dir.h) that `tracebook ls | show | diff | prove` query.
//
// The records (experiments/records/record.h) are the truth; the catalogue is an index derived from
// them, but for the anchors (experiments/records/anchor.h: each manifest's, claims.json's and
// experiment.json's digest as written, and each version's ledger head), which are not
// derived. Any command may bring the rest in line with the records (tb_catalog_rebuild).
// Deleting catalog.sqlite loses the prove history (claims.proven_at / proven_value) and the
// anchors: the records written before then no longer prove ("not anchored in the catalogue").
//
// Every write of a record or a claims file is one transaction (a SAVEPOINT, so it nests in
// a caller's transaction), so a catalogue killed mid-way holds the old rows or the new ones,
// never half a run. The file is in WAL mode with a busy timeout: a runner adding runs and a
// `tracebook ls` reading them do not fail on each other's locks.
#ifndef TB_EXPERIMENTS_CATALOG_H
#define TB_EXPERIMENTS_CATALOG_H

#include <jansson.h>
#include <sqlite3.h>

#include "core/error.h"
#include "core/options.h"
#include "core/run_arg.h"  // TB_ARTIFACTS_DEFAULT, TB_ARTIFACTS_OPTION

// 2: runs.repetition is 1-based for every record (record.h, tb_manifest_repetition). A schema-1
// catalogue is brought to 2 on open: its runs are re-read at the next sync.
// 3: claims.at_most, the bound of a claim that bounds its number instead of stating it. A
// schema-2 catalogue gains the column on open; the next sync fills it from claims.json.
// 4: the anchors and anchor_heads tables (experiments/records/anchor.h). A schema-3 catalogue gains
// them on open, empty: the records it indexes were never anchored, and do not prove.
#define TB_CATALOG_SCHEMA_VERSION "4"
// A record whose manifest says "running" but whose heartbeat is older than this (or absent)
// is catalogued as "incomplete": its runner died.
#define TB_HEARTBEAT_STALE_S 60
#define TB_CATALOG_BUSY_TIMEOUT_MS 10000

// The schema. Columns hold the manifest's fields (record.h); JSON-valued ones are JSON text.
// runs.status is the manifest's ("finished" | "failed" | "incomplete" | "running"), or
// "incomplete" for a record without a manifest or with a stale heartbeat, or "unreadable"
// for a record whose files could not be read (runs.problem says why).
#define TB_CATALOG_SCHEMA                                                                                     \
    "CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT);\n"                                    \
    "CREATE TABLE IF NOT EXISTS experiments(name TEXT NOT NULL, version INTEGER NOT NULL, question TEXT,"     \
    " runbook_path TEXT, runbook_sha256 TEXT, PRIMARY KEY(name, version));\n"                                 \
    "CREATE TABLE IF NOT EXISTS runs(run_id TEXT PRIMARY KEY, experiment TEXT NOT NULL,"                      \
    " version INTEGER NOT NULL, status TEXT NOT NULL, repetition INTEGER, sweep_point TEXT, seed INTEGER,"    \
    " \"commit\" TEXT, branch TEXT, dirty INTEGER, start TEXT, \"end\" TEXT, exit_status INTEGER,"            \
    " record_dir TEXT NOT NULL, replay_of TEXT, config TEXT,"                                                 \
    /* beyond the manifest: the exact argv (JSON array), why a record is unreadable, and the */               \
    /* manifest's mtime:size when catalogued, so a sync re-reads only changed records */                      \
    " argv TEXT, problem TEXT, manifest_stamp TEXT);\n"                                                       \
    "CREATE INDEX IF NOT EXISTS runs_experiment ON runs(experiment, version);\n"                              \
    /* one row per metrics line: rank r's step s (metrics.rank-NNNNN.jsonl) */                                \
    "CREATE TABLE IF NOT EXISTS metrics(run_id TEXT NOT NULL, rank INTEGER NOT NULL, step INTEGER NOT NULL,"  \
    " loss REAL, step_ms REAL, tokens_per_s REAL, tflops REAL, grad_norm REAL, mem_total_peak_bytes INTEGER," \
    " PRIMARY KEY(run_id, rank, step));\n"                                                                    \
    /* claims.json's claims; proven_at (UTC, ISO 8601) and proven_value are the last successful */            \
    /* `tracebook prove` (NULL when never proven, or when the last prove failed) */                           \
    "CREATE TABLE IF NOT EXISTS claims(experiment TEXT NOT NULL, version INTEGER NOT NULL, id TEXT NOT NULL," \
    " value REAL, at_most REAL, parser TEXT, text TEXT, runs TEXT, args TEXT, relative_tolerance REAL,"       \
    " proven_at TEXT, proven_value REAL, PRIMARY KEY(experiment, version, id));\n"                         \
    /* anchors (experiments/records/anchor.h): not derived from the records, so a sync keeps them; */                 \
    /* version_dir is "<experiment>/v<N>" */                                                                  \
    "CREATE TABLE IF NOT EXISTS anchors(version_dir TEXT NOT NULL, kind TEXT NOT NULL, name TEXT NOT NULL,"  \
    " sha256 TEXT NOT NULL, seq INTEGER NOT NULL, link TEXT NOT NULL, anchored_at TEXT,"                     \
    " PRIMARY KEY(version_dir, kind, name));\n"                                                               \
    "CREATE TABLE IF NOT EXISTS anchor_heads(version_dir TEXT PRIMARY KEY, seq INTEGER NOT NULL,"            \
    " link TEXT NOT NULL);\n"

// Opens <artifacts>/catalog.sqlite, creating the directory, the file and the schema when
// they are missing. A catalogue of another schema version is an error that says to delete
// it (every command rebuilds it from the records).
int tb_catalog_open(sqlite3 **db, const char *artifacts, tb_error *err);

// Catalogues one record directory (artifacts/<experiment>/v<version>/<run-id>): its
// manifest.json and run/metrics.rank-*.jsonl, replacing any earlier rows of the run (an
// idempotent upsert, one transaction). A record without manifest.json is catalogued as
// "incomplete" with the ids its path gives. A metrics line that does not parse is an error
// naming file and line — except a last, unterminated line of a run that did not finish
// (killed mid-write), which is skipped.
int tb_catalog_add_run(sqlite3 *db, const char *record_dir, tb_error *err);

// Catalogues an experiment version's claims.json (record.h): upserts every claim and
// drops the version's claims the file no longer has. A claim keeps its proven_at /
// proven_value while its value, parser, args and runs are unchanged.
int tb_catalog_add_claims(sqlite3 *db, const char *claims_json_path, tb_error *err);

// Brings the catalogue in line with the artifacts root: scans <artifacts>/*/v*/*/ (a record
// is a directory there; its manifest.json may be missing: "incomplete") and
// <artifacts>/*/v*/claims.json. Records whose manifest is unchanged since they were
// catalogued are not re-read (running / incomplete / unreadable ones always are); rows of
// records, claims files and experiment versions that are gone are dropped. A record that
// cannot be read does not stop the scan: it is catalogued "unreadable" with the error in
// runs.problem; a claims.json that cannot be read is left out (`tracebook prove` reports
// it). Fails only when the catalogue itself cannot be written.
int tb_catalog_rebuild(sqlite3 *db, const char *artifacts, tb_error *err);

#endif
