// index_options.h — what `tracebook index` was asked to do (index.c fills it from the command
// line): the pieces of the indexer read it, none changes it.
#ifndef TB_TRACE_INDEX_OPTIONS_H
#define TB_TRACE_INDEX_OPTIONS_H

#include <fnmatch.h>
#include <stddef.h>
#include <string.h>

typedef struct ix_options {
    const char *compdb_arg;      // --compdb as given
    const char *out;             // --output
    const char *build_dir;       // --build-dir (NULL: the compdb's directory)
    const char **collectives;    // names, globs or @Record
    size_t ncollectives;
    const char **range_push;
    size_t nrange_push;
    const char **range_pop;
    size_t nrange_pop;
    int jobs;
    int quiet;
    int verbose;                 // each unit's clang arguments and parse time on stderr
    int full;                    // --full: parse every unit, reuse nothing from --output
    int parse_only;              // --parse-only: the benchmark's reference (libclang's parses alone)
} ix_options;

// fnmatch-style name match used for collective and range lists (a pattern without a glob
// character is compared as a string: the same answer, without fnmatch's cost per call site).
static inline int ix_name_matches(const char *pattern, const char *name) {
    if (!strpbrk(pattern, "*?[\\")) return strcmp(pattern, name) == 0;
    return fnmatch(pattern, name, 0) == 0;
}

#endif
