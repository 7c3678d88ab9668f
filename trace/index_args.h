// index_args.h — `tracebook index`'s command line (index_args.c): its flags, their checks, and
// the lists the indexer reads (the default collectives and range functions, then the user's).
#ifndef TB_TRACE_INDEX_ARGS_H
#define TB_TRACE_INDEX_ARGS_H

#include "core/options.h"
#include "index_options.h"

typedef struct index_args {
    const char *compdb, *output, *build_dir, *targets;
    tb_strlist collectives, range_push, range_pop;
    int no_default_collectives, jobs, full, parse_only, quiet, verbose, json;
} index_args;

// Parses argv into args and opt: -1 to run the index; otherwise the exit status to return
// (0 after --help; 2 after a usage error, printed with the usage). Either way ix_args_free
// frees what it kept.
int ix_args_parse(int argc, char **argv, index_args *args, ix_options *opt);
void ix_args_free(index_args *args, ix_options *opt);

#endif
