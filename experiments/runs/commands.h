// commands.h — the runs/ commands of the tracebook CLI (core/subcommand.h).
#ifndef TB_EXPERIMENTS_RUNS_COMMANDS_H
#define TB_EXPERIMENTS_RUNS_COMMANDS_H

#include "core/subcommand.h"

extern const tb_subcommand_table tb_runs_commands;

#endif
