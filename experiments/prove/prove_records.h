// prove_records.h — what `tracebook prove` knows of each record it reads (prove.c): the
// record verified against its manifest once, however many claims name it — its files'
// sha256, a missing or unreadable manifest, a manifest that lists nothing, files it does not
// list (failures: nothing vouches for them), a manifest that is not the one anchored when it
// was written (anchor.h), a run that did not finish (a warning).
#ifndef TB_EXPERIMENTS_PROVE_RECORDS_H
#define TB_EXPERIMENTS_PROVE_RECORDS_H

#include <jansson.h>
#include <stddef.h>

#include "records/record_verify.h"

#define PROVE_PATH_MAX 4096

// A growable string (NULL s: empty).
typedef struct strbuf {
    char *s;
    size_t len, cap;
} strbuf;

__attribute__((format(printf, 2, 3))) void sb_printf(strbuf *b, const char *fmt, ...);

typedef struct record_stamp {
    char *path;
    tb_file_stamp stamp;
} record_stamp;

typedef struct record_check {
    char *dir;
    json_t *manifest;   // NULL when missing or unreadable
    strbuf failures;    // one line each: missing / altered / unlisted files, an incomplete record
    strbuf warnings;    // a run that did not finish
    int files_verified;
    record_stamp *stamps;  // the manifest and every file verified, as they were when hashed
    size_t nstamps, stamps_cap;
} record_check;

// The verified records, by directory (open addressing; each record is verified once).
// anchors: the manifests' digests are checked against their anchors (anchor.h); NULL: every
// record fails, "not checked against its anchors".
typedef struct check_table {
    record_check *slots;
    size_t cap, n;
    struct tb_anchor_verifier *anchors;
} check_table;

// The record at dir, verified the first time it is asked for; the entry stays valid until
// the next record is verified.
record_check *verify_record(check_table *t, const char *dir);
void check_table_free(check_table *t);  // (not t->anchors: the caller's)

// Appends each line of lines (newline-terminated) to b unless b holds it already.
void sb_add_lines_once(strbuf *b, const char *lines);

// Every file a parser read, as its evidence lists them (each record object's "record_dir" and
// "files", at any depth: a ratio's parts too), must lie in its record and be listed in that
// record's manifest with its sha256; the records a part names beyond the claim's runs are
// verified here. Each problem is one line appended to failures (once).
void check_read_files(check_table *t, json_t *evidence, strbuf *failures, int depth);

// A claim is named by where it lives: 1 when claims.json (root, read from path) names another
// experiment or version than the directory it lies in (exp_dirname/v<version>), reason saying
// which (its claims would be printed, and catalogued, as another experiment's); else 0.
int claims_file_misnamed(json_t *root, const char *path, const char *exp_dirname, long long version, char *reason,
                         size_t size);

// Each node of the evidence (a parser's, a part's) lists every run once: a run listed twice
// would count as two repetitions. One line per run listed twice is appended to failures.
void check_distinct_runs(json_t *evidence, strbuf *failures, int depth);

// Every file of the claim's records (dirs, and each record its evidence names) still as it was
// when it was hashed (record_verify.h, tb_file_unchanged): the parsers and the gate read the
// files after verify_record hashed them, so a file changed in between (or served by a program
// racing prove) fails the claim, naming it. Called once the claim is derived and gated.
void check_unchanged(check_table *t, char *const *dirs, size_t n, json_t *evidence, strbuf *failures);

#endif
