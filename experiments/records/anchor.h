// anchor.h — what an experiment version wrote, anchored as it was written (docs/ARCHITECTURE.md,
// "Anchors"), so that an edit made afterwards is named by `tracebook prove`.
//
// A record's manifest vouches for its files (their sha256); nothing vouched for the manifest
// itself, nor for the version's claims.json and experiment.json: a forger who rewrote a
// metrics line, its sha256 in the manifest and the claimed number in claims.json got
// PROVEN. Now every time one of them is written, its digest is anchored twice:
//   - in the version's ledger, <artifacts>/<experiment>/v<N>/ledger.jsonl: one JSON line per
//     anchoring, {"seq", "kind", "name", "sha256", "prev", "link"}, where link is the sha256
//     of "prev\nseq\nkind\nname\nsha256" and prev the previous line's link (64 zeros for the
//     first): a hash chain, as a transparency log keeps one, so a line edited, removed or
//     inserted breaks every link after it;
//   - in the catalogue (catalog.sqlite, experiments/records/catalog.h): each item's latest digest,
//     seq and link (table anchors) and each version's head, the last seq and link (table
//     anchor_heads). These rows are not derived from the records: a rebuild keeps them.
// kind is "record" (name: the run id; sha256: the manifest's canonical form, tb_manifest_digest)
// or "file" (name: claims.json or experiment.json; sha256: the file's bytes).
//
// What it catches: an edit of a manifest, claims.json or experiment.json, or their deletion,
// unless the ledger and the catalogue are both rewritten to match (a ledger rewritten alone,
// its chain recomputed, no longer ends where the catalogue's head says). Against a forger
// who rewrites both, only a signature by a key the forger does not hold helps (signing.h).
#ifndef TB_EXPERIMENTS_ANCHOR_H
#define TB_EXPERIMENTS_ANCHOR_H

#include <sqlite3.h>

#include "core/error.h"

#define TB_ANCHOR_RECORD "record"
#define TB_ANCHOR_FILE "file"

// sha256 (hex) of the canonical form of the JSON file at path: parsed, then written with its
// keys sorted, compact, reals with 17 significant digits — so the digest is of what the file
// says, not of its whitespace. 0, or -1 with err naming the file and the parse error.
int tb_json_digest(const char *path, char hex[65], tb_error *err);

// Anchors the finished record at record_dir (<artifacts>/<experiment>/v<N>/<run id>): its
// manifest's digest, in its version's ledger and in the catalogue under artifacts. 0, or -1
// with err naming what could not be read or written (a record left unanchored does not prove).
int tb_anchor_record(const char *artifacts, const char *record_dir, tb_error *err);

// Anchors the version's file `name` (TB_EXPERIMENT_CLAIMS or TB_EXPERIMENT_STATUS), as now
// written in version_dir: the sha256 of its bytes. 0, or -1 with err.
int tb_anchor_version_file(const char *artifacts, const char *version_dir, const char *name, tb_error *err);

// Verifying. A verifier caches each version's ledger, read and its chain checked once.
typedef struct tb_anchor_verifier tb_anchor_verifier;

// db: the catalogue (not owned); NULL when it could not be opened: every check then fails,
// saying so.
tb_anchor_verifier *tb_anchor_verifier_new(sqlite3 *db);
void tb_anchor_verifier_free(tb_anchor_verifier *v);

// A signer whose signature is required: the highest seq of a version's ledger it signed (0 and
// why, one line, when none; chain_link(ctx, seq) gives the ledger's link at seq, NULL when it
// has none), and its id for messages. signing.h makes one from a public key
// (tb_public_key_signer); the anchors know signatures only through it.
typedef struct tb_anchor_signer {
    long long (*signed_seq)(const void *key, const char *version_dir, const char *version_key,
                            const char *(*chain_link)(void *ctx, long long seq), void *ctx, char *why,
                            size_t why_len);
    const char *(*id)(const void *key);
    const void *key;  // not owned
} tb_anchor_signer;

// With a signer required (`tracebook prove --require-signature`), an item is vouched for only
// when anchored at or before a ledger head it signed (signing.h); *signer is copied.
void tb_anchor_verifier_require_signature(tb_anchor_verifier *v, const tb_anchor_signer *signer);

// The version's ledger head (its last seq and link) and its key "<experiment>/v<N>", when the
// ledger chains and ends where the catalogue's head says: 0; else -1 with *problems (malloc'd
// lines) saying why.
int tb_anchor_ledger_head(tb_anchor_verifier *v, const char *version_dir, char *key, size_t key_len, long long *seq,
                          char link[65], char **problems);

// Calls add(ctx, line) for each reason the item (kind, name) of version_dir is not anchored
// as it is now: sha256 is its digest now, or NULL when it is missing. An item neither ledger
// nor catalogue ever anchored, and missing, is fine (a version without experiment.json yet);
// one anchored and missing is not. Problems of the version's ledger itself (a broken chain,
// a head the catalogue does not have) are reported with every item of the version.
// Returns how many lines were added.
int tb_anchor_verify(tb_anchor_verifier *v, const char *version_dir, const char *kind, const char *name,
                     const char *sha256, void (*add)(void *ctx, const char *line), void *ctx);

// Every run the version's ledger or the catalogue anchored as a record, against its record now:
// calls add(ctx, line) for each that is gone (no <version_dir>/<run id>/manifest.json: which
// sweep point it measured cannot be told, so no claim of the version can show it rests on every
// run measured — the slow repetitions deleted whole and the fast ones claimed, say), whose
// manifest is not a regular file or does not read, or is not as anchored (tb_anchor_verify:
// the selection rule reads the manifests of records no claim lists, which are otherwise not
// checked), and for an anchored name that is not a run id. Returns how many lines were added.
int tb_anchor_records_check(tb_anchor_verifier *v, const char *version_dir, void (*add)(void *ctx, const char *line),
                            void *ctx);

#endif
