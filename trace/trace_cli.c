// trace_cli.c — the trace commands' table (trace_cli.h, core/subcommand.h).
#include "trace_cli.h"

static const tb_subcommand commands[] = {
    {"index", tracebook_index_main, "parse the compilation database with libclang into the source index"},
    {"def", tracebook_def_main, "where a symbol is defined"},
    {"callers", tracebook_callers_main, "who calls a function (through function-pointer fields too)"},
    {"callees", tracebook_callees_main, "what a function calls"},
    {"chain", tracebook_chain_main, "call chains from an entry point to a symbol, shortest first"},
    {"map", tracebook_map_main, "map every runtime range of traces to its source site and call chain"},
    {"walk", tracebook_walk_main, "a Markdown walkthrough from the entry point to a range's collectives"},
};

const tb_subcommand_table tb_trace_commands = TB_SUBCOMMAND_TABLE("source tracing", commands);
