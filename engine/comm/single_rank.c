// single_rank.c — see single_rank.h.
#include "comm/single_rank.h"

#include <string.h>

tb_rank *rank_init_single(tb_single_rank *s, const tb_config *cfg) {
    memset(s, 0, sizeof *s);
    tb_rank *rk = &s->rk;
    rk->mem = &s->mem;
    rk->ranges = &s->ranges;
    rk->fr = &s->fr;
    tb_flight_recorder_init(rk->fr);
    rk->cfg = cfg;
    rk->rank = 0;
    rk->world_size = 1;
    rk->coords = parallel_state_coords(cfg, 0);
    parallel_state_label(rk->label, sizeof rk->label, 0, rk->coords);
    rk->microbatch = -1;
    return rk;
}
