// record_verify.h — is a record still what was recorded: every file its manifest lists must
// exist under the record with the listed sha256 (docs/ARCHITECTURE.md, "The run directory
// and the record"). `tracebook prove` checks this before it re-derives a number, `tracebook
// replay` before it rebuilds anything, so an altered file is named as altered, never read
// as evidence.
#ifndef TB_EXPERIMENTS_RECORD_VERIFY_H
#define TB_EXPERIMENTS_RECORD_VERIFY_H

#include <jansson.h>

// A path the manifest may name: relative, inside the record (no "..", no empty part).
int tb_record_safe_path(const char *rel);

// Checks every entry of `files` (the manifest's "files": relative path → sha256 hex) under
// the record `dir`. For each problem — a path outside the record, no sha256, a missing or
// unreadable file, an altered one ("file altered: PATH: sha256 expected X, actual Y") —
// calls problem(arg, text). Returns the number of files verified.
int tb_record_verify_files(const char *dir, const json_t *files, void (*problem)(void *arg, const char *text),
                           void *arg);

#endif
