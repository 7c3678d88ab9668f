// single_rank.h — a trainer on one rank without a world, for the tests that train in process:
// the config resolved and validated (the trainer keeps a pointer to *cfg), the rank and its
// allocator, the trainer.
#ifndef TB_TESTS_ENGINE_SINGLE_RANK_H
#define TB_TESTS_ENGINE_SINGLE_RANK_H

#include <stdio.h>

#include "config.h"
#include "training.h"

// *cfg = *in resolved; returns 0, or -1 having printed why.
static inline int single_rank_trainer(tb_config *cfg, const tb_config *in, tb_rank *rk, tb_trainer *tr) {
    *cfg = *in;
    config_resolve(cfg);
    tb_error err;
    if (config_validate(cfg, &err) != 0) {
        printf("    invalid config: %s\n", err.msg);
        return -1;
    }
    rank_init_single(rk, cfg);
    tb_allocator_init(&rk->mem, 0, NULL, NULL);
    if (trainer_init(tr, cfg, rk, &err) != 0) {
        printf("    %s\n", err.msg);
        return -1;
    }
    return 0;
}

#endif
