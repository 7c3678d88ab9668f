// comm_world.h — what the communicator tests share: a world of ranks on the local backend
// (world_up / world_down), a clock, RK_CHECK for checks made on a rank's own thread, and
// jstr / jint to read a report's JSON fields.
//
// Rank functions run on their own threads: checks made there go through RK_CHECK, which
// serialises the harness's bookkeeping.
#ifndef TB_TESTS_ENGINE_COMM_WORLD_H
#define TB_TESTS_ENGINE_COMM_WORLD_H

#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <unistd.h>

#include "comm/comm.h"
#include "comm/local_backend.h"
#include "config/config.h"
#include "runtime/memory.h"
#include "runtime/ranges.h"
#include "comm/parallel_state.h"
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
    if (parallel_state_world_init(&W->w, &W->cfg, &tb_local_backend, &err) != 0) {
        TB_CHECK(0, "world %d tp %d: %s", size, tp, err.msg);
        return -1;
    }
    W->w.comm.collective_timeout_s = timeout_s;
    W->w.origin_ns = tb_now_ns();
    for (int r = 0; r < W->w.size; r++) tb_allocator_init(W->w.ranks[r].mem, 0, NULL, NULL);
    return 0;
}

static inline void world_down(world *W) {
    for (int r = 0; r < W->w.size; r++) tb_allocator_release_cache(W->w.ranks[r].mem);
    parallel_state_world_free(&W->w);
}

// Runs fn on every rank of a world (size, tp, the collective timeout) in a child process, with
// the run directory dir and stderr into dir/stderr.txt, so that the test survives a run that a
// hang ends. Returns the child's pid (-1 when fork fails); the child exits 0 if fn returns.
static inline pid_t world_in_child(const char *dir, int size, int tp, double timeout_s, void (*fn)(tb_rank *, void *),
                                   void *arg) {
    fflush(NULL);
    pid_t pid = fork();
    if (pid != 0) return pid;
    char path[1024];
    snprintf(path, sizeof path, "%s/stderr.txt", dir);
    if (!freopen(path, "w", stderr)) _exit(99);
    world W;
    if (world_up(&W, size, tp, timeout_s) != 0) _exit(98);
    snprintf(W.w.run_dir, sizeof W.w.run_dir, "%s", dir);
    parallel_state_run_ranks(&W.w, fn, arg);
    _exit(0);
}

static inline double now_s(void) { return (double)tb_now_ns() / 1e9; }

// A JSON object's string field ("" when absent) and integer field (-999999 when absent).
static inline const char *jstr(json_t *o, const char *key) {
    const char *s = json_string_value(json_object_get(o, key));
    return s ? s : "";
}

static inline long long jint(json_t *o, const char *key) {
    json_t *v = json_object_get(o, key);
    return json_is_integer(v) ? (long long)json_integer_value(v) : -999999;
}

#endif
