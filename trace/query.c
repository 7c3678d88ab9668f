// query.c — placeholder until the queries land.
#include <stdio.h>

#include "trace_cli.h"

static int not_yet(const char *what) {
    fprintf(stderr, "tracebook %s: not supported yet\n", what);
    return 1;
}

int tracebook_def_main(int argc, char **argv) { (void)argc, (void)argv; return not_yet("def"); }
int tracebook_callers_main(int argc, char **argv) { (void)argc, (void)argv; return not_yet("callers"); }
int tracebook_callees_main(int argc, char **argv) { (void)argc, (void)argv; return not_yet("callees"); }
int tracebook_chain_main(int argc, char **argv) { (void)argc, (void)argv; return not_yet("chain"); }
int tracebook_map_main(int argc, char **argv) { (void)argc, (void)argv; return not_yet("map"); }
int tracebook_walk_main(int argc, char **argv) { (void)argc, (void)argv; return not_yet("walk"); }
