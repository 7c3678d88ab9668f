// catalog_cli.h — the commands over the recorded runs of the catalogue (records/catalog.h):
// ls, show and diff, and diff's view of a config (which `tracebook report` shares).
#ifndef TB_EXPERIMENTS_RUNS_CATALOG_CLI_H
#define TB_EXPERIMENTS_RUNS_CATALOG_CLI_H

#include <jansson.h>

// diff's view of a config: nested objects flattened into dotted keys
// ("derived.num_microbatches"), added to out in order.
void tb_config_flatten(json_t *config, const char *prefix, json_t *out);
// The dotted keys whose values are not equal in all n flattened configs (a key absent from
// one differs), in the first config's order, then the keys only later ones have: a new array.
json_t *tb_config_differing_keys(json_t *const *flat, int n);

// The commands (argv[0] = the command's name). Each prints its result on stdout and errors on
// stderr and returns the exit status: 0 ok, TB_EXIT_FAILURE, TB_EXIT_USAGE (a bad command
// line; --help prints each command's flags from its option table).
//   tracebook ls [EXPERIMENT] [--json] [--artifacts DIR]
//   tracebook show RUN [--json] [--artifacts DIR]          (RUN: a run id or a unique prefix of one)
//   tracebook diff RUN RUN [--phases] [--json] [--artifacts DIR]
int tracebook_ls_main(int argc, char **argv);
int tracebook_show_main(int argc, char **argv);
int tracebook_diff_main(int argc, char **argv);

#endif
