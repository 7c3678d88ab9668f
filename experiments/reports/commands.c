// commands.c — the report's command (commands.h).
#include "reports/commands.h"

#include "reports/report.h"

static const tb_subcommand commands[] = {
    {"report", tracebook_report_main, "one self-contained HTML page of an experiment: claims, runs, plots"},
};

const tb_subcommand_table tb_reports_commands = TB_SUBCOMMAND_TABLE("reports", commands);
