// trainers.h — trainers for the tests that train in process: on one rank without a world,
// or on every rank thread of a world.
#ifndef TB_TESTS_ENGINE_TRAINERS_H
#define TB_TESTS_ENGINE_TRAINERS_H

#include <stdio.h>

#include "backend/cpu/kernels.h"
#include "comm/local_backend.h"
#include "config/config.h"
#include "comm/parallel_state.h"
#include "training.h"

// One rank without a world: the config resolved and validated (the trainer keeps a pointer
// to *cfg), the rank and its allocator, the trainer.
// *cfg = *in resolved; returns 0, or -1 having printed why.
static inline int single_rank_trainer(tb_config *cfg, const tb_config *in, tb_single_rank *single,
                                      tb_trainer *tr) {
    *cfg = *in;
    config_resolve(cfg);
    tb_error err;
    if (config_validate(cfg, &err) != 0) {
        printf("    invalid config: %s\n", err.msg);
        return -1;
    }
    tb_rank *rk = rank_init_single(single, cfg);
    tb_allocator_init(rk->mem, 0, NULL, NULL);
    if (trainer_init(tr, cfg, rk, &err) != 0) {
        printf("    %s\n", err.msg);
        return -1;
    }
    return 0;
}

// A rank thread's trainer (its allocator, one BLAS thread per rank); returns 0, or -1 having
// printed why.
static inline int rank_trainer(tb_rank *rk, const tb_config *cfg, tb_trainer *tr) {
    tb_allocator_init(rk->mem, 0, NULL, NULL);
    cpu_set_num_threads(1);
    tb_error err;
    if (trainer_init(tr, cfg, rk, &err) != 0) {
        printf("    %s: %s\n", rk->label, err.msg);
        return -1;
    }
    return 0;
}

// Resolves and validates *cfg, then runs fn on every rank of its world (rank threads).
static inline int run_world(tb_config *cfg, void (*fn)(tb_rank *rk, void *arg), void *arg) {
    config_resolve(cfg);
    tb_error err;
    if (config_validate(cfg, &err) != 0) {
        printf("    invalid config: %s\n", err.msg);
        return -1;
    }
    tb_world w;
    if (parallel_state_world_init(&w, cfg, &tb_local_backend, &err) != 0) {
        printf("    %s\n", err.msg);
        return -1;
    }
    parallel_state_run_ranks(&w, fn, arg);
    parallel_state_world_free(&w);
    return 0;
}

#endif
