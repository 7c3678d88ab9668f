// fileio.h — crash-safe file output shared by every writer of the run directory, and the
// one way an input file is opened (tb_open_regular).
//
// A file is written to "<path>.tmp.<pid>.<n>" (n: a per-process counter), flushed and fsync'd, then renamed over <path>:
// a reader sees the old file or the whole new one, never a half-written one, and a failed
// write removes its temporary file and leaves the old one in place.
#ifndef TB_CORE_FILEIO_H
#define TB_CORE_FILEIO_H

#include <jansson.h>
#include <stddef.h>
#include <stdio.h>
#include <sys/stat.h>

#include "core/error.h"

int tb_write_file_atomic(const char *path, const void *data, size_t len, tb_error *err);
// The same for a file written a piece at a time: tb_atomic_open creates the temporary file
// (a->f, "wb"); tb_atomic_close flushes, fsyncs and renames it over the path when `ok` (and
// every write to a->f succeeded), else removes it. Each returns 0, or -1 with err naming the
// path and why (tb_atomic_close with ok 0 returns -1 and leaves err as it was).
typedef struct tb_atomic_file {
    FILE *f;
    char path[4096], tmp[4096];
} tb_atomic_file;
int tb_atomic_open(tb_atomic_file *a, const char *path, tb_error *err);
int tb_atomic_close(tb_atomic_file *a, int ok, tb_error *err);
// Indented JSON, one trailing newline.
int tb_write_json_atomic(const char *path, const json_t *root, tb_error *err);
// mkdir -p; existing directories are fine.
int tb_mkdir_p(const char *path, tb_error *err);
// rm -rf (links are removed, never followed); a missing path is fine. 0, or -1 with err naming
// the path and the reason.
int tb_remove_tree(const char *path, tb_error *err);

// Opens path read-only when it is a regular file, and returns the descriptor (blocking
// reads) with *st (when not NULL) its fstat. Anything else is refused by what it is before
// any open: opening a FIFO blocks until a writer comes, and reading a FIFO or a device
// (/dev/zero) may never end. `note` (NULL: none) ends the message in parentheses, e.g.
// "PATH: is a FIFO (named pipe), not a regular file (an llm.c token file is expected)".
// Returns -1 with the message in err.
int tb_open_regular(const char *path, const char *note, struct stat *st, tb_error *err);

// json_load_file's contract (the same flags, the same errors: line -1 and "unable to open
// PATH: ..." when the file cannot be opened) with the file read a block at a time
// (json_load_callback): jansson's own reads it one fgetc at a time, each taking the FILE's
// lock (the 0.85 MB of this project's CMake file API reply took ~30 ms of CPU so).
// error->source is "<callback>".
json_t *tb_json_load_file(const char *path, size_t flags, json_error_t *error);

// Whether a run can write what it ends by writing, checked before it starts (an hour of steps
// is not lost to a directory that does not exist): tb_output_dir_check — dir (the value of
// flag) is a directory or is made now, and is writable; tb_output_file_check — path is not a
// directory and its directory exists and is writable. An empty value checks nothing. 0, or
// -1 with err naming the flag, the path and why.
int tb_output_dir_check(const char *flag, const char *dir, tb_error *err);
int tb_output_file_check(const char *flag, const char *path, tb_error *err);

// What kind of file a mode is, in words for a message: "a directory", "a FIFO (named pipe)",
// "a character device", ... ("a regular file" for one).
const char *tb_file_kind(mode_t mode);

// snprintf for paths, never a silent truncation: 0, or -1 with err naming the path that
// does not fit (its start and its end) and the limit, len - 1 bytes; buf is then "".
int tb_path_format(char *buf, size_t len, tb_error *err, const char *fmt, ...) __attribute__((format(printf, 4, 5)));

#endif
