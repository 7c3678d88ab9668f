// tb_run_dir.h — paths of a run directory's and a record's files in tests, by the names
// core/run_dir.h defines once (TB_RUN_CONFIG, TB_RECORD_MANIFEST, ...).
#ifndef TB_TESTS_RUN_DIR_H
#define TB_TESTS_RUN_DIR_H

#include <stdio.h>

#include "core/run_dir.h"

// "<dir>/<kind>.rank-NNNNN.<ext>" into buf; the empty string (which opens nothing) when it
// does not fit, after printing why.
static inline const char *tb_rank_path(char *buf, size_t len, const char *dir, tb_rank_file kind, int rank) {
    tb_error err;
    if (tb_rank_file_path(buf, len, dir, kind, rank, &err) != 0) {
        printf("    %s\n", err.msg);
        buf[0] = '\0';
    }
    return buf;
}

// "<record>/run/<kind>.rank-NNNNN.<ext>": a rank's file in the run directory of a record.
static inline const char *tb_record_rank_path(char *buf, size_t len, const char *record, tb_rank_file kind, int rank) {
    char run[4096];
    if (snprintf(run, sizeof run, "%s/%s", record, TB_RECORD_RUN_DIR) >= (int)sizeof run) {
        buf[0] = '\0';  // too long for a path: no such file
        return buf;
    }
    return tb_rank_path(buf, len, run, kind, rank);
}

#endif
