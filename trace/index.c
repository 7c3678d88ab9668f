// index.c — placeholder until the indexer lands.
#include <stdio.h>

#include "trace_cli.h"

int tracebook_index_main(int argc, char **argv) {
    (void)argc, (void)argv;
    fprintf(stderr, "tracebook index: not supported yet\n");
    return 1;
}
