// parallel_state.h — who a rank is: its coordinates in the tp × cp × dp × pp grid and the
// per-rank context every module receives (Megatron-Core's parallel_state, without globals).
//
// Rank order is Megatron-Core's default "tp-cp-ep-dp-pp": tp varies fastest, pp slowest,
//   rank = tp_rank + tp·(cp_rank + cp·(dp_rank + dp·pp_rank)).
// Every report names a rank by its coordinates: "rank 13 (tp1 cp0 dp1 pp1)".
//
// The communication groups (tp, cp, dp, dp×cp, pp, model-parallel, embedding) and the
// communicator arrive with the parallel core; today the engine runs a world of one rank.
#ifndef TB_PARALLEL_STATE_H
#define TB_PARALLEL_STATE_H

#include <stdint.h>

#include "config.h"
#include "core/memory.h"
#include "core/trace.h"

typedef struct tb_coords {
    int tp, cp, dp, pp;
} tb_coords;

// Coordinates of `rank` under the config's sizes (tp-cp-ep-dp-pp order).
tb_coords parallel_state_coords(const tb_config *cfg, int rank);
// "rank 13 (tp1 cp0 dp1 pp1)"
void parallel_state_label(char *buf, size_t len, int rank, tb_coords c);

// Everything that belongs to one rank. No engine state lives outside it.
typedef struct tb_rank {
    int rank;
    int world_size;
    tb_coords coords;
    char label[96];
    const tb_config *cfg;
    tb_allocator mem;
    tb_trace trace;
    char run_dir[TB_PATH_MAX];
    // where the rank is, for OOM and hang reports
    int64_t step;        // 1-based; 0 before training
    int microbatch;      // 0-based; -1 outside a microbatch
} tb_rank;

#endif
