// tracebook.c — the tracebook CLI: one binary, one subcommand per job, each part's commands
// in a table its folder owns (core/subcommand.h):
//
//   runbook/  run                                   runs/     ls show diff replay
//   records/  sign                                  prove/    prove
//   inspect/  steps comm moe bisect ckpt hang       planner/  plan
//   reports/  report
//   trace/    index def callers callees chain map walk
//
// Each subcommand parses its own flags from an option table (core/options.h) and returns
// its exit status (TB_EXIT_*, core/error.h); `tracebook COMMAND --help` prints that table.
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/subcommand.h"
#include "core/version.h"
#include "core/xalloc.h"
#include "inspect/commands.h"
#include "planner/commands.h"
#include "prove/commands.h"
#include "records/commands.h"
#include "reports/commands.h"
#include "runbook/commands.h"
#include "runs/commands.h"
#include "trace_cli.h"

// In the order `tracebook --help` lists them.
static const tb_subcommand_table *const parts[] = {
    &tb_runbook_commands, &tb_runs_commands, &tb_records_commands, &tb_prove_commands, &tb_inspect_commands,
    &tb_planner_commands, &tb_reports_commands, &tb_trace_commands,
};
#define NPARTS (sizeof parts / sizeof *parts)

static void usage(FILE *out) {
    fprintf(out, "usage: tracebook COMMAND [ARGS...]   (tracebook COMMAND --help for its flags)\n"
                 "       tracebook --version           (the version and the commit this binary was built from)\n");
    for (size_t p = 0; p < NPARTS; p++) {
        fprintf(out, "\n%s:\n", parts[p]->part);
        for (size_t i = 0; i < parts[p]->count; i++)
            fprintf(out, "  %-8s %s\n", parts[p]->commands[i].name, parts[p]->commands[i].summary);
    }
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
    if (!strcmp(argv[1], "--version")) {
        char line[256];
        tb_version_line(line, sizeof line, "tracebook");
        printf("%s\n", line);
        return 0;
    }
    for (size_t p = 0; p < NPARTS; p++)
        for (size_t i = 0; i < parts[p]->count; i++)
            if (!strcmp(argv[1], parts[p]->commands[i].name)) return parts[p]->commands[i].main(argc - 1, argv + 1);
    fprintf(stderr, "tracebook: unknown command '%s'\n", argv[1]);
    usage(stderr);
    return TB_EXIT_USAGE;
}
