// commands.c — the records' commands (commands.h): replay, sign and the catalogue's.
#include "records/commands.h"

#include "records/catalog.h"
#include "records/replay.h"
#include "records/signing.h"

static const tb_subcommand commands[] = {
    {"replay", tracebook_replay_main, "re-run a record at its recorded revision and compare, loss bitwise"},
    {"sign", tracebook_sign_main, "sign each experiment version's ledger head with an Ed25519 key (prove --require-signature)"},
    {"ls", tracebook_ls_main, "experiments, or one experiment's runs"},
    {"show", tracebook_show_main, "one run: manifest, command, config, per-step metrics"},
    {"diff", tracebook_diff_main, "two runs side by side: config and metric differences"},
};

const tb_subcommand_table tb_records_commands = TB_SUBCOMMAND_TABLE("records", commands);
