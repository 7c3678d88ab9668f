// commands.c — the commands over the recorded runs (commands.h): ls, show, diff, replay.
#include "runs/commands.h"

#include "runs/catalog_cli.h"
#include "runs/replay.h"

static const tb_subcommand commands[] = {
    {"ls", tracebook_ls_main, "experiments, or one experiment's runs"},
    {"show", tracebook_show_main, "one run: manifest, command, config, per-step metrics"},
    {"diff", tracebook_diff_main, "two runs side by side: config and metric differences"},
    {"replay", tracebook_replay_main, "re-run a record at its recorded revision and compare, loss bitwise"},
};

const tb_subcommand_table tb_runs_commands = TB_SUBCOMMAND_TABLE("recorded runs", commands);
