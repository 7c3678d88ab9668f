// commands.c — prove's command (commands.h).
#include "prove/commands.h"

#include "prove/prove.h"

static const tb_subcommand commands[] = {
    {"prove", tracebook_prove_main, "re-derive claimed numbers from the raw files, checking every file's sha256"},
};

const tb_subcommand_table tb_prove_commands = TB_SUBCOMMAND_TABLE("claims", commands);
