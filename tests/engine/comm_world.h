// comm_world.h — what the communicator tests share: a world of ranks on the local backend
// (world_up / world_down), a clock, and RK_CHECK for checks made on a rank's own thread.
//
// Rank functions run on their own threads: checks made there go through RK_CHECK, which
// serialises the harness's bookkeeping.
#ifndef TB_TESTS_ENGINE_COMM_WORLD_H
#define TB_TESTS_ENGINE_COMM_WORLD_H

#include <pthread.h>

#include "comm/comm.h"
#include "config.h"
#include "core/memory.h"
#include "core/ranges.h"
#include "parallel_state.h"
#include "tb_test.h"

static pthread_mutex_t check_mu = PTHREAD_MUTEX_INITIALIZER;

#define RK_CHECK(cond, ...)                                                                            \
    do {                                                                                               \
        int rk_ok_ = (cond) ? 1 : 0;                                                                   \
        if (!rk_ok_) {                                                                                 \
            pthread_mutex_lock(&check_mu);                                                             \
            TB_CHECK(rk_ok_, __VA_ARGS__);                                                             \
            pthread_mutex_unlock(&check_mu);                                                           \
        }                                                                                              \
    } while (0)

typedef struct world {
    tb_config cfg;
    tb_world w;
} world;

// A world of `size` ranks with tensor parallel size tp on the local backend; every rank's
// allocator ready. The timeout bounds a test that deadlocks (it becomes a hang report).
static inline int world_up(world *W, int size, int tp, double timeout_s) {
    config_defaults(&W->cfg);
    W->cfg.world_size = size;
    W->cfg.tensor_model_parallel_size = tp;
    config_resolve(&W->cfg);
    tb_error err;
    if (parallel_state_world_init(&W->w, &W->cfg, &err) != 0) {
        TB_CHECK(0, "world %d tp %d: %s", size, tp, err.msg);
        return -1;
    }
    W->w.comm.collective_timeout_s = timeout_s;
    W->w.origin_ns = tb_now_ns();
    for (int r = 0; r < W->w.size; r++) tb_allocator_init(&W->w.ranks[r].mem, 0, NULL, NULL);
    return 0;
}

static inline void world_down(world *W) {
    for (int r = 0; r < W->w.size; r++) tb_allocator_release_cache(&W->w.ranks[r].mem);
    parallel_state_world_free(&W->w);
}

static inline double now_s(void) { return (double)tb_now_ns() / 1e9; }

#endif
