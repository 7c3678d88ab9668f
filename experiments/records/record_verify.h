// record_verify.h — is a record still what was recorded: every file its manifest lists must
// exist under the record with the listed sha256 (docs/ARCHITECTURE.md, "The run directory
// and the record"). `tracebook prove` checks this before it re-derives a number, `tracebook
// replay` before it rebuilds anything, so an altered file is named as altered, never read
// as evidence.
#ifndef TB_EXPERIMENTS_RECORD_VERIFY_H
#define TB_EXPERIMENTS_RECORD_VERIFY_H

#include <jansson.h>

#include "core/error.h"

// A path the manifest may name: relative, inside the record (no "..", no empty part).
int tb_record_safe_path(const char *rel);

// What a regular file was when it was hashed: its device, inode, size and times. The kernel
// sets ctime on every change of a file's contents or metadata (a rename too) and no program
// can set it back, so the same stamp later means the bytes read in between were the bytes
// hashed. (A FUSE file system could serve other bytes under one stamp: not guarded against.)
typedef struct tb_file_stamp {
    long long dev, ino, size, mtime_ns, ctime_ns;
} tb_file_stamp;

// The sha256 (hex) of the file at path and its stamp, from one open. Only a regular file is
// read: a FIFO (which can serve other bytes to every reader: the hash one copy, the parser
// another), a socket, a device or a directory is refused by name, and opening one never
// blocks. 0, or -1 with err.
int tb_sha256_regular(const char *path, char hex[65], tb_file_stamp *stamp, tb_error *err);

// The stamp of the regular file at path now (refused as tb_sha256_regular refuses). 0 or -1.
int tb_file_stamp_of(const char *path, tb_file_stamp *stamp, tb_error *err);

// 0 when the file at path has the stamp *then; else -1 with err naming what changed.
int tb_file_unchanged(const char *path, const tb_file_stamp *then, tb_error *err);

// Checks every entry of `files` (the manifest's "files": relative path → sha256 hex) under
// the record `dir`. For each problem — a path outside the record, no sha256, a missing,
// unreadable or non-regular file, an altered one ("file altered: PATH: sha256 expected X,
// actual Y") — calls problem(arg, text); for each file verified, stamped(arg, path, stamp)
// when stamped is not NULL (a caller that reads the files afterwards checks them against
// their stamps after reading: tb_file_unchanged). Returns the number of files verified.
int tb_record_verify_files(const char *dir, const json_t *files, void (*problem)(void *arg, const char *text),
                           void (*stamped)(void *arg, const char *path, const tb_file_stamp *stamp), void *arg);

#endif
