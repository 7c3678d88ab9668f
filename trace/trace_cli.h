// trace_cli.h — the trace subcommands of the tracebook CLI. Each takes its own argv
// (argv[0] = the subcommand's name), prints its result on stdout and errors on stderr, and
// returns the process exit status (0 ok, 1 failure, 2 bad usage).
#ifndef TB_TRACE_TRACE_CLI_H
#define TB_TRACE_TRACE_CLI_H

#include "core/subcommand.h"

// The table of them the CLI's main dispatches to (trace_cli.c).
extern const tb_subcommand_table tb_trace_commands;

int tracebook_index_main(int argc, char **argv);    // tracebook index [--compdb F] [--output F] ...
int tracebook_def_main(int argc, char **argv);      // tracebook def SYMBOL [--index F]
int tracebook_callers_main(int argc, char **argv);  // tracebook callers SYMBOL [--index F]
int tracebook_callees_main(int argc, char **argv);  // tracebook callees SYMBOL [--index F]
int tracebook_chain_main(int argc, char **argv);    // tracebook chain --from ENTRY --to SYMBOL [--index F]
int tracebook_map_main(int argc, char **argv);      // tracebook map TRACE... [--index F]
int tracebook_walk_main(int argc, char **argv);     // tracebook walk RANGE --trace F... [--index F]

#endif
