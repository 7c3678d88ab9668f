// commands.c — the records' command (commands.h): sign.
#include "records/commands.h"

#include "records/signing.h"

static const tb_subcommand commands[] = {
    {"sign", tracebook_sign_main, "sign each experiment version's ledger head with an Ed25519 key (prove --require-signature)"},
};

const tb_subcommand_table tb_records_commands = TB_SUBCOMMAND_TABLE("records", commands);
