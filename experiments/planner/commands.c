// commands.c — the planner's command (commands.h).
#include "planner/commands.h"

#include "planner/plan_cli.h"

static const tb_subcommand commands[] = {
    {"plan", tracebook_plan_main, "every legal TP/CP/PP/VPP/DP layout of a model on a cluster: per-rank budget, comm, bubble"},
};

const tb_subcommand_table tb_planner_commands = TB_SUBCOMMAND_TABLE("planner", commands);
