// commands.c — the commands that read one run's files (commands.h).
#include "inspect/commands.h"

#include "inspect/bisect.h"
#include "inspect/ckpt_cli.h"
#include "inspect/hang_cli.h"
#include "inspect/moe_report.h"
#include "inspect/step_report.h"

static const tb_subcommand commands[] = {
    {"steps", tracebook_steps_main,
     "each step per rank: data, compute, exposed communication, collectives (wait vs transfer, bytes), idle"},
    {"comm", tracebook_comm_main, "collectives matched across ranks: enter spread and the last member"},
    {"moe", tracebook_moe_main, "a MoE run's expert load per layer: imbalance, tokens, drops, aux loss, all-to-all"},
    {"bisect", tracebook_bisect_main, "the first tensor where two runs diverge beyond float reordering"},
    {"ckpt", tracebook_ckpt_main, "a run's checkpoint saves: phases per rank, the last arriver and why"},
    {"hang", tracebook_hang_main, "a run's hang report merged from every process's parts, absent ranks named"},
};

const tb_subcommand_table tb_inspect_commands = TB_SUBCOMMAND_TABLE("one run's files", commands);
