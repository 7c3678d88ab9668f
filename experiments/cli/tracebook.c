// tracebook.c — the tracebook CLI: one binary, one subcommand per job.
//
//   tracebook run | replay | prove | sign | ls | show | diff | hang | plan | report      (experiments/)
//   tracebook index | def | callers | callees | chain | map | walk      (trace/)
//
// Each subcommand parses its own flags from an option table (core/options.h) and returns
// its exit status (TB_EXIT_*, core/error.h); `tracebook COMMAND --help` prints that table.
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "records/catalog.h"
#include "core/error.h"
#include "core/xalloc.h"
#include "inspect/bisect.h"
#include "inspect/ckpt_cli.h"
#include "inspect/hang_cli.h"
#include "inspect/moe_report.h"
#include "planner/plan_cli.h"
#include "records/replay.h"
#include "reports/report.h"
#include "inspect/step_report.h"
#include "runbook/runbook.h"
#include "records/signing.h"
#include "trace_cli.h"

typedef struct command {
    const char *name;
    int (*main)(int argc, char **argv);
    const char *summary;
} command;

static const command commands[] = {
    {"run", tracebook_run_main, "run a Lua runbook: engine runs recorded with their provenance, claims"},
    {"replay", tracebook_replay_main, "re-run a record at its recorded revision and compare, loss bitwise"},
    {"prove", tracebook_prove_main, "re-derive claimed numbers from the raw files, checking every file's sha256"},
    {"sign", tracebook_sign_main, "sign each experiment version's ledger head with an Ed25519 key (prove --require-signature)"},
    {"ls", tracebook_ls_main, "experiments, or one experiment's runs"},
    {"show", tracebook_show_main, "one run: manifest, command, config, per-step metrics"},
    {"diff", tracebook_diff_main, "two runs side by side: config and metric differences"},
    {"steps", tracebook_steps_main, "each step per rank: data, compute, collectives (wait vs transfer), idle"},
    {"comm", tracebook_comm_main, "collectives matched across ranks: enter spread and the last member"},
    {"moe", tracebook_moe_main, "a MoE run's expert load per layer: imbalance, tokens, drops, aux loss, all-to-all"},
    {"bisect", tracebook_bisect_main, "the first tensor where two runs diverge beyond float reordering"},
    {"ckpt", tracebook_ckpt_main, "a run's checkpoint saves: phases per rank, the last arriver and why"},
    {"plan", tracebook_plan_main, "every legal TP/CP/PP/VPP/DP layout of a model on a cluster: per-rank budget, comm, bubble"},
    {"hang", tracebook_hang_main, "a run's hang report merged from every process's parts, absent ranks named"},
    {"report", tracebook_report_main, "one self-contained HTML page of an experiment: claims, runs, plots"},
    {"index", tracebook_index_main, "parse the compilation database with libclang into the source index"},
    {"def", tracebook_def_main, "where a symbol is defined"},
    {"callers", tracebook_callers_main, "who calls a function (through function-pointer fields too)"},
    {"callees", tracebook_callees_main, "what a function calls"},
    {"chain", tracebook_chain_main, "call chains from an entry point to a symbol, shortest first"},
    {"map", tracebook_map_main, "map every runtime range of traces to its source site and call chain"},
    {"walk", tracebook_walk_main, "a Markdown walkthrough from the entry point to a range's collectives"},
};

static void usage(FILE *out) {
    fprintf(out, "usage: tracebook COMMAND [ARGS...]   (tracebook COMMAND --help for its flags)\n\ncommands:\n");
    for (size_t i = 0; i < sizeof commands / sizeof *commands; i++)
        fprintf(out, "  %-8s %s\n", commands[i].name, commands[i].summary);
}

// jansson's allocations follow the host-allocation policy (core/xalloc.h): a JSON value that
// cannot be allocated ends the process with a report, never comes back NULL.
static void *json_xmalloc(size_t bytes) { return tb_xmalloc(bytes, "JSON value"); }

int main(int argc, char **argv) {
    json_set_alloc_funcs(json_xmalloc, free);
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? TB_EXIT_USAGE : 0;
    }
    for (size_t i = 0; i < sizeof commands / sizeof *commands; i++)
        if (!strcmp(argv[1], commands[i].name)) return commands[i].main(argc - 1, argv + 1);
    fprintf(stderr, "tracebook: unknown command '%s'\n", argv[1]);
    usage(stderr);
    return TB_EXIT_USAGE;
}
