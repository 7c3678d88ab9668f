// commands.c — the runbook host's command (commands.h).
#include "runbook/commands.h"

#include "runbook/runbook.h"

static const tb_subcommand commands[] = {
    {"run", tracebook_run_main, "run a Lua runbook: engine runs recorded with their provenance, claims"},
};

const tb_subcommand_table tb_runbook_commands = TB_SUBCOMMAND_TABLE("runbooks", commands);
