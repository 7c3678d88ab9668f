// index_file.h — the index as a file (index_file.c, for index_write.c): the previous index
// copied to be updated in place, and a written index published: its bulk sent to the disk
// while the end's work runs, fsync'd and renamed over --output.
#ifndef TB_TRACE_INDEX_FILE_H
#define TB_TRACE_INDEX_FILE_H

#include <pthread.h>

#include "core/error.h"

// Whether path may be written as the index: absent, or a source index of any schema (an
// SQLite file with the index's functions and calls tables) that the new one replaces.
// Anything else — the compilation database, a source file, another program's database, a
// directory — is refused, err naming it and what it is, so that a mistyped --output loses
// nothing. 0, or -1.
int ix_output_check(const char *path, tb_error *err);

// from's bytes into a new file `to` (truncated first): 0, or -1 (err names the file and why).
int ix_file_copy(const char *from, const char *to, tb_error *err);

// The bulk of the file (the tables, written while the units were parsed) goes to the disk while
// the end's work runs (collective sites, the counts, the commit): a thread fdatasync's the file
// meanwhile, so that the fsync before the rename has only what came after to write (this
// project: that fsync 28-38 ms -> 9-11 ms, the work beside it no slower). Its descriptor stays
// open until SQLite has closed the file: closing any descriptor of a file drops every POSIX
// lock the process holds on it, SQLite's among them; the final fsync uses it. Its error is the
// run's: a write-back error is reported once, so the fsync after would not see it.
typedef struct ix_early_flush {
    const char *path;  // the temporary file, kept by the caller until ix_flush_finish
    int fd;            // -1: none
    int error;         // the fdatasync's errno, 0: none
    pthread_t th;
    int started;
} ix_early_flush;
// Starts the thread when `start` (else the finish does all), for the file at path.
void ix_flush_start(ix_early_flush *f, const char *path, int start);
// After SQLite closed the file: joins the thread; when rc is 0 and publish is set, fsyncs the
// file and renames it over `to`; unlinks it unless published. Returns rc, or -1 when the
// write-back, fsync or rename failed (err says which and why).
int ix_flush_finish(ix_early_flush *f, int rc, int publish, const char *to, tb_error *err);

#endif
