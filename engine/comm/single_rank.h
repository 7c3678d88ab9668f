// single_rank.h — a rank built without a world (a test, a tool): the rank and the objects it
// owns, which a world gives its ranks (comm/parallel_state.h).
#ifndef TB_COMM_SINGLE_RANK_H
#define TB_COMM_SINGLE_RANK_H

#include "comm/flight_recorder.h"
#include "comm/parallel_state.h"
#include "config/config.h"
#include "runtime/memory.h"
#include "runtime/ranges.h"

typedef struct tb_single_rank {
    tb_rank rk;
    tb_allocator mem;
    tb_ranges ranges;
    tb_flight_recorder fr;
} tb_single_rank;
// Rank 0 of a world of one for cfg (coordinates all 0), its objects s's: the flight recorder
// initialised, the allocator and the ranges left to the caller. Returns &s->rk.
tb_rank *rank_init_single(tb_single_rank *s, const tb_config *cfg);

#endif
