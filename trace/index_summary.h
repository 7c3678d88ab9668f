// index_summary.h — what `tracebook index` prints when it has written the index: the counts of
// the index's tables and the run's figures, as text lines or (--json) one JSON document.
#ifndef TB_TRACE_INDEX_SUMMARY_H
#define TB_TRACE_INDEX_SUMMARY_H

#include <stddef.h>

#include "index_write.h"

// The run's own figures beside the index's counts.
typedef struct ix_run_figures {
    const char *out;          // the index written
    double seconds;           // wall time of the whole command
    size_t parsed, reused;    // units parsed this time / whose facts were kept
    long files, lines;        // distinct files and their lines parsed (each once)
    long reduced;             // units parsed with the reduced command line
    size_t duplicates;        // database entries skipped (a file listed twice)
} ix_run_figures;

void ix_print_summary(const ix_summary *sum, const ix_run_figures *run, int json);

#endif
