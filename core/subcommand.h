// subcommand.h — a part's subcommands of the tracebook CLI, as a table its folder owns: the
// CLI's main (experiments/cli/tracebook.c) dispatches to each part's table in turn, and
// adding a command touches its part's table only. Each command takes its own argv (argv[0] =
// the command's name), prints its result on stdout and errors on stderr, and returns the
// process's exit status (TB_EXIT_*, core/error.h).
#ifndef TB_CORE_SUBCOMMAND_H
#define TB_CORE_SUBCOMMAND_H

#include <stddef.h>

typedef struct tb_subcommand {
    const char *name;
    int (*main)(int argc, char **argv);
    const char *summary;  // one line, for `tracebook --help`
} tb_subcommand;

typedef struct tb_subcommand_table {
    const char *part;  // what the commands are about, a heading in `tracebook --help`
    const tb_subcommand *commands;
    size_t count;
} tb_subcommand_table;

#define TB_SUBCOMMAND_TABLE(part_, array_) {(part_), (array_), sizeof(array_) / sizeof *(array_)}

#endif
