// drills.h — the engine's drills, parsed once from the config when the world is made
// (docs/ARCHITECTURE.md, "Drills"): a known bug in the model's math at a named fault site
// (--debug-inject-fault, fault_sites.h), a rank that stops before a collective
// (--inject-stall), and a slow data loader, link or checkpoint writer (--debug-slow-data,
// --debug-slow-link, --debug-slow-write). The training loop, the communicator and the
// checkpoint writer ask this plan; the model sees only the fault hooks; nothing else parses a
// drill's flag. config_validate has refused a malformed value already; tb_drills_init names
// one again (a config built without validation).
#ifndef TB_DRILLS_DRILLS_H
#define TB_DRILLS_DRILLS_H

#include <stdint.h>

#include "config/config.h"
#include "core/error.h"
#include "drills/fault_sites.h"

typedef struct tb_drills {
    tb_fault_hooks faults;        // the --debug-inject-fault site's callback (none: all NULL)
    int stall_rank;               // --inject-stall RANK:STEP (-1: none)
    int64_t stall_step;
    char slow_link_group[32];     // --debug-slow-link GROUP:MS ("": none)
    int slow_link_ms;
    int slow_data_rank;           // --debug-slow-data RANK:MS (-1: none)
    int slow_data_ms;
    int slow_write_rank;          // --debug-slow-write RANK:MS (-1: none)
    int slow_write_ms;
} tb_drills;

// d from cfg's drill flags: 0, or -1 with err naming the flag and its value.
int tb_drills_init(tb_drills *d, const tb_config *cfg, tb_error *err);

// The hooks the model's fault sites ask: NULL without a fault drill (d NULL too). The
// pointer stays valid as long as d.
const tb_fault_hooks *tb_drills_fault_hooks(const tb_drills *d);
// The site's name in messages and docs ("row_parallel_linear.bias", ...).
const char *tb_fault_site_name(tb_fault_site site);

// Whether `rank` stops at `step` (--inject-stall).
int tb_drills_stalls(const tb_drills *d, int rank, int64_t step);
// The delays, slept by the caller's thread where the drill applies (d NULL: none):
// `rank`'s data loading, `rank`'s checkpoint write, one call on a group named `group`. Each
// returns the milliseconds slept.
int tb_drills_slow_data(const tb_drills *d, int rank);
int tb_drills_slow_write(const tb_drills *d, int rank);
int tb_drills_slow_link(const tb_drills *d, const char *group);

#endif
