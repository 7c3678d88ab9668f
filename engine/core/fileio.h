// fileio.h — crash-safe file output shared by every writer of the run directory.
//
// A file is written to "<path>.tmp.<pid>.<n>" (n: a per-process counter), flushed and fsync'd, then renamed over <path>:
// a reader sees the old file or the whole new one, never a half-written one, and a failed
// write removes its temporary file and leaves the old one in place.
#ifndef TB_CORE_FILEIO_H
#define TB_CORE_FILEIO_H

#include <jansson.h>
#include <stddef.h>

#include "core/error.h"

int tb_write_file_atomic(const char *path, const void *data, size_t len, tb_error *err);
// Indented JSON, one trailing newline.
int tb_write_json_atomic(const char *path, const json_t *root, tb_error *err);
// mkdir -p; existing directories are fine.
int tb_mkdir_p(const char *path, tb_error *err);

#endif
