// drill_flags.h — the forms of the drill flags (docs/ARCHITECTURE.md, "Drills"), parsed in
// one place: the config's rules check the values (config_rules.c), the drills' plan takes
// them (drills/drills.c).
//   --inject-stall RANK:STEP        --debug-slow-data RANK:MS, --debug-slow-write RANK:MS
//   --debug-slow-link GROUP:MS      (GROUP a group kind's name: tp, dp, pp, ...)
// Each returns 0 with the parts set, or -1 when the text is not of its form (parts unset).
#ifndef TB_CONFIG_DRILL_FLAGS_H
#define TB_CONFIG_DRILL_FLAGS_H

#include <stddef.h>
#include <stdint.h>

int tb_drill_rank_step(const char *text, int *rank, int64_t *step);
int tb_drill_rank_ms(const char *text, int *rank, int *ms);
// group: at most group_size - 1 characters of [a-z_] (group_size at least 2)
int tb_drill_group_ms(const char *text, char *group, size_t group_size, int *ms);

#endif
