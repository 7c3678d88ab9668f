// The communicator on the local backend: every collective and point-to-point call gives
// the documented result (reductions summed in group order, the same bits on every rank and
// in every run), every call is recorded in the flight recorder and as a "comm.<group>.<op>"
// trace range with its figures, and a call whose peer never comes ends the run with a hang
// report (hang.json, a stderr summary, exit status 4) after the collective timeout, not
// never.
//
// Rank functions run on their own threads: checks made there go through RK_CHECK, which
// serialises the harness's bookkeeping.
#include <jansson.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "comm/comm.h"
#include "comm/flight_recorder.h"
#include "config.h"
#include "core/memory.h"
#include "core/ranges.h"
#include "parallel_state.h"
#include "tb_shell.h"
#include "tb_run_dir.h"
#include "tb_test.h"

#define PRETRAIN TB_BIN_DIR "/pretrain_gpt"

// ---------------------------------------------------------------------------------------
// Harness

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
static int world_up(world *W, int size, int tp, double timeout_s) {
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

static void world_down(world *W) {
    for (int r = 0; r < W->w.size; r++) tb_allocator_release_cache(&W->w.ranks[r].mem);
    parallel_state_world_free(&W->w);
}

static double now_s(void) { return (double)tb_now_ns() / 1e9; }

static uint64_t mix64(uint64_t x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

// A value whose sums depend on the order of addition: a random mantissa over 21 binades.
static float input_value(int rank, size_t i, uint32_t salt) {
    uint64_t h = mix64(((uint64_t)salt << 48) ^ ((uint64_t)rank << 40) ^ (uint64_t)i);
    float m = (float)((h >> 40) & 0xFFFFFF) / 16777216.0f * 2.0f - 1.0f;
    int e = (int)((h >> 8) % 21) - 10;
    return ldexpf(m, e);
}

static uint64_t fnv1a(const void *p, size_t n) {
    const unsigned char *b = p;
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

// Index of the first element whose bits differ, or (size_t)-1.
static size_t first_bit_mismatch(const float *a, const float *b, size_t n) {
    if (n == 0 || memcmp(a, b, n * sizeof(float)) == 0) return (size_t)-1;
    for (size_t i = 0; i < n; i++)
        if (memcmp(&a[i], &b[i], sizeof(float)) != 0) return i;
    return (size_t)-1;
}

// ---------------------------------------------------------------------------------------
// 1. all_reduce

#define AR_MAX_COUNT 1000003u
#define AR_MAX_CASES 64
#define AR_MAX_RANKS 8

typedef struct ar_case {
    tb_group_kind kind;
    size_t count;
    tb_red_op op;
} ar_case;

// Inputs: a table per rank, read at an offset per case (the same values in every run).
#define AR_SPAN 1000
static float *ar_table[AR_MAX_RANKS];

static void ar_table_init(void) {
    for (int r = 0; r < AR_MAX_RANKS; r++) {
        if (ar_table[r]) continue;
        ar_table[r] = malloc((AR_MAX_COUNT + AR_SPAN) * sizeof(float));
        for (size_t i = 0; i < AR_MAX_COUNT + AR_SPAN; i++) ar_table[r][i] = input_value(r, i, 7);
    }
}

static void ar_table_free(void) {
    for (int r = 0; r < AR_MAX_RANKS; r++) {
        free(ar_table[r]);
        ar_table[r] = NULL;
    }
}

static inline float ar_input(int rank, size_t i, int ci) { return ar_table[rank][i + (size_t)(ci * 37) % AR_SPAN]; }

typedef struct ar_ctx {
    ar_case cases[AR_MAX_CASES];
    int ncases;
    int rep;
    float *buf[AR_MAX_RANKS], *want[AR_MAX_RANKS];
    uint64_t hash[2][AR_MAX_CASES][AR_MAX_RANKS];
    size_t order_sensitive[AR_MAX_CASES][AR_MAX_RANKS];  // elements whose reverse-order sum differs
} ar_ctx;

static void all_reduce_rank(tb_rank *rk, void *arg) {
    ar_ctx *c = arg;
    float *buf = c->buf[rk->rank], *want = c->want[rk->rank];
    for (int ci = 0; ci < c->ncases; ci++) {
        const ar_case *k = &c->cases[ci];
        tb_group *g = &rk->groups[k->kind];
        for (size_t i = 0; i < k->count; i++) buf[i] = ar_input(rk->rank, i, ci);
        tb_all_reduce(g, buf, k->count, k->op);

        // The same reduction in plain C, members in group order.
        for (size_t i = 0; i < k->count; i++) want[i] = ar_input(g->ranks[0], i, ci);
        for (int j = 1; j < g->size; j++)
            for (size_t i = 0; i < k->count; i++) {
                float x = ar_input(g->ranks[j], i, ci);
                if (k->op == TB_RED_SUM) want[i] += x;
                else want[i] = x > want[i] ? x : want[i];
            }
        size_t bad = first_bit_mismatch(buf, want, k->count);
        RK_CHECK(bad == (size_t)-1,
                 "%s: all_reduce %s on %s (%d ranks) of %zu: element %zu is %.9g, the group-order result is %.9g",
                 rk->label, k->op == TB_RED_SUM ? "sum" : "max", g->name, g->size, k->count, bad,
                 bad != (size_t)-1 ? buf[bad] : 0.0, bad != (size_t)-1 ? want[bad] : 0.0);
        c->hash[c->rep][ci][rk->rank] = fnv1a(buf, k->count * sizeof(float));

        // The inputs make the order matter: summing the other way round gives other bits.
        size_t differs = 0;
        if (k->op == TB_RED_SUM && k->count >= 1000 && g->size >= 3)
            for (size_t i = 0; i < 1000; i++) {
                float r = ar_input(g->ranks[g->size - 1], i, ci);
                for (int j = g->size - 2; j >= 0; j--) r += ar_input(g->ranks[j], i, ci);
                differs += memcmp(&r, &want[i], sizeof r) != 0;
            }
        c->order_sensitive[ci][rk->rank] = differs;
    }
}

static void check_all_reduce_world(int size, int tp) {
    world W;
    if (world_up(&W, size, tp, 20) != 0) return;
    ar_ctx *c = calloc(1, sizeof *c);
    static const size_t counts[] = {0, 1, 7, 1000};
    const tb_group_kind kinds[] = {TB_GROUP_WORLD, TB_GROUP_TP, TB_GROUP_DP_CP, TB_GROUP_DP};
    for (int k = 0; k < 4; k++) {
        for (int n = 0; n < 4; n++) {
            c->cases[c->ncases++] = (ar_case){kinds[k], counts[n], TB_RED_SUM};
            c->cases[c->ncases++] = (ar_case){kinds[k], counts[n], TB_RED_MAX};
        }
        if (kinds[k] != TB_GROUP_DP) c->cases[c->ncases++] = (ar_case){kinds[k], AR_MAX_COUNT, TB_RED_SUM};
    }
    c->cases[c->ncases++] = (ar_case){TB_GROUP_WORLD, AR_MAX_COUNT, TB_RED_MAX};
    for (int r = 0; r < size; r++) {
        c->buf[r] = malloc(AR_MAX_COUNT * sizeof(float));
        c->want[r] = malloc(AR_MAX_COUNT * sizeof(float));
    }
    uint64_t world_cases = 0;
    for (int ci = 0; ci < c->ncases; ci++) world_cases += c->cases[ci].kind == TB_GROUP_WORLD;
    for (c->rep = 0; c->rep < 2; c->rep++) parallel_state_run_ranks(&W.w, all_reduce_rank, c);

    for (int ci = 0; ci < c->ncases; ci++) {
        const ar_case *k = &c->cases[ci];
        for (int r = 0; r < size; r++) {
            const tb_group *g = &W.w.ranks[r].groups[k->kind];
            int first = g->ranks[0];
            TB_CHECK(c->hash[0][ci][r] == c->hash[0][ci][first],
                     "world %d tp %d: all_reduce on %s of %zu: rank %d's result differs in its bits from rank %d's",
                     size, tp, g->name, k->count, r, first);
            TB_CHECK(c->hash[0][ci][r] == c->hash[1][ci][r],
                     "world %d tp %d: all_reduce on %s of %zu: rank %d's result differs between two runs", size, tp,
                     g->name, k->count, r);
            if (k->op == TB_RED_SUM && k->count >= 1000 && g->size >= 3)
                TB_CHECK(c->order_sensitive[ci][r] > 0,
                         "world %d: the test inputs should make the summation order visible on %s", size, g->name);
        }
    }
    for (int r = 0; r < size; r++) {
        const tb_mem_stats *s = &W.w.ranks[r].mem.stats;
        TB_CHECK(s->current[TB_MEM_COMM] == 0, "%s: all-reduce shares are freed (%zu bytes left)",
                 W.w.ranks[r].label, s->current[TB_MEM_COMM]);
        int in_group = W.w.ranks[r].groups[TB_GROUP_WORLD].size > 1;
        TB_CHECK(!in_group || s->peak[TB_MEM_COMM] > 0, "%s: the all-reduce share comes from the rank's allocator",
                 W.w.ranks[r].label);
        TB_CHECK(W.w.ranks[r].groups[TB_GROUP_WORLD].seq == 2 * world_cases,
                 "%s: %llu calls counted on world, expected %llu", W.w.ranks[r].label,
                 (unsigned long long)W.w.ranks[r].groups[TB_GROUP_WORLD].seq, (unsigned long long)(2 * world_cases));
    }
    for (int r = 0; r < size; r++) {
        free(c->buf[r]);
        free(c->want[r]);
    }
    free(c);
    world_down(&W);
}

TB_TEST(all_reduce_sums_in_group_order_bitwise_identical_on_every_rank_and_run) {
    // world 2/3/4/8; tp and dp groups of sizes 1, 2, 3, 4 and 8; counts 0, 1, 7, 1000, 1000003
    const int layouts[][2] = {{2, 1}, {2, 2}, {3, 1}, {3, 3}, {4, 2}, {8, 2}, {8, 4}};
    ar_table_init();
    for (size_t i = 0; i < sizeof layouts / sizeof *layouts; i++) check_all_reduce_world(layouts[i][0], layouts[i][1]);
    ar_table_free();
}

// ---------------------------------------------------------------------------------------
// 2. the other collectives and point-to-point

typedef struct coll_ctx {
    tb_group_kind kind;
} coll_ctx;

static void reduce_scatter_rank(tb_rank *rk, void *arg) {
    tb_group *g = &rk->groups[((coll_ctx *)arg)->kind];
    static const size_t recvcounts[] = {0, 1, 5, 1001};
    for (int t = 0; t < 4; t++) {
        size_t rc = recvcounts[t], n = rc * (size_t)g->size;
        uint32_t salt = 100u + (uint32_t)t;
        float *send = malloc((n + 1) * sizeof(float)), *recv = malloc((rc + 1) * sizeof(float));
        for (size_t i = 0; i < n; i++) send[i] = input_value(rk->rank, i, salt);
        for (size_t i = 0; i <= rc; i++) recv[i] = -1234.5f;
        tb_reduce_scatter(g, send, recv, rc);
        size_t lo = rc * (size_t)g->index, bad = (size_t)-1;
        for (size_t i = 0; i < rc && bad == (size_t)-1; i++) {
            float want = input_value(g->ranks[0], lo + i, salt);
            for (int j = 1; j < g->size; j++) want += input_value(g->ranks[j], lo + i, salt);
            if (memcmp(&want, &recv[i], sizeof want) != 0) bad = i;
        }
        RK_CHECK(bad == (size_t)-1, "%s: reduce_scatter on %s (%d ranks) of %zu per member: element %zu of its share "
                 "is not the group-order sum", rk->label, g->name, g->size, rc, bad);
        RK_CHECK(recv[rc] == -1234.5f, "%s: reduce_scatter writes past its share", rk->label);
        for (size_t i = 0; i < n; i++)
            if (send[i] != input_value(rk->rank, i, salt)) {
                RK_CHECK(0, "%s: reduce_scatter changed its send buffer at %zu", rk->label, i);
                break;
            }
        free(send);
        free(recv);
    }
}

static void all_gather_rank(tb_rank *rk, void *arg) {
    tb_group *g = &rk->groups[((coll_ctx *)arg)->kind];
    static const size_t sendcounts[] = {0, 1, 3, 257};
    for (int t = 0; t < 4; t++) {
        size_t sc = sendcounts[t], n = sc * (size_t)g->size;
        uint32_t salt = 200u + (uint32_t)t;
        float *send = malloc((sc + 1) * sizeof(float)), *recv = malloc((n + 1) * sizeof(float));
        for (size_t i = 0; i < sc; i++) send[i] = input_value(rk->rank, i, salt);
        for (size_t i = 0; i <= n; i++) recv[i] = -1234.5f;
        tb_all_gather(g, send, recv, sc);
        size_t bad = (size_t)-1;
        for (int j = 0; j < g->size && bad == (size_t)-1; j++)
            for (size_t i = 0; i < sc; i++)
                if (recv[(size_t)j * sc + i] != input_value(g->ranks[j], i, salt)) {
                    bad = (size_t)j * sc + i;
                    break;
                }
        RK_CHECK(bad == (size_t)-1, "%s: all_gather on %s (%d ranks) of %zu: element %zu is not member %zu's",
                 rk->label, g->name, g->size, sc, bad, sc ? bad / sc : 0);
        RK_CHECK(recv[n] == -1234.5f, "%s: all_gather writes past size x sendcount", rk->label);

        // in place: each member's contribution already sits at its slot (how the engine
        // gathers the distributed optimizer's parameter shards)
        for (size_t i = 0; i < n; i++) recv[i] = -1.0f;
        for (size_t i = 0; i < sc; i++) recv[(size_t)g->index * sc + i] = input_value(rk->rank, i, salt);
        tb_all_gather(g, recv + (size_t)g->index * sc, recv, sc);
        bad = (size_t)-1;
        for (int j = 0; j < g->size && bad == (size_t)-1; j++)
            for (size_t i = 0; i < sc; i++)
                if (recv[(size_t)j * sc + i] != input_value(g->ranks[j], i, salt)) {
                    bad = (size_t)j * sc + i;
                    break;
                }
        RK_CHECK(bad == (size_t)-1, "%s: in-place all_gather on %s of %zu: element %zu is wrong", rk->label, g->name,
                 sc, bad);
        free(send);
        free(recv);
    }
}

// Elements member `src` sends to member `dst` in round t: uneven, some zero.
static size_t a2a_count(int src, int dst, int t) { return (size_t)((src * 3 + dst * 5 + t) % 4) * (t == 2 ? 97 : 1); }
static float a2a_value(int src_rank, int dst_index, size_t k) {
    return (float)(src_rank * 100000 + dst_index * 1000 + (int)k);
}

static void all_to_all_rank(tb_rank *rk, void *arg) {
    tb_group *g = &rk->groups[((coll_ctx *)arg)->kind];
    int n = g->size, me = g->index;
    for (int t = 0; t < 3; t++) {
        size_t sendcounts[TB_MAX_GROUP], recvcounts[TB_MAX_GROUP], nsend = 0, nrecv = 0;
        for (int j = 0; j < n; j++) {
            sendcounts[j] = a2a_count(me, j, t);
            recvcounts[j] = a2a_count(j, me, t);
            nsend += sendcounts[j];
            nrecv += recvcounts[j];
        }
        float *send = malloc((nsend + 1) * sizeof(float)), *recv = malloc((nrecv + 1) * sizeof(float));
        size_t at = 0;
        for (int j = 0; j < n; j++)
            for (size_t k = 0; k < sendcounts[j]; k++) send[at++] = a2a_value(rk->rank, j, k);
        for (size_t i = 0; i <= nrecv; i++) recv[i] = -1.0f;
        tb_all_to_all(g, send, sendcounts, recv, recvcounts);
        at = 0;
        int ok = 1;
        for (int j = 0; j < n && ok; j++)
            for (size_t k = 0; k < recvcounts[j]; k++, at++)
                if (recv[at] != a2a_value(g->ranks[j], me, k)) {
                    RK_CHECK(0, "%s: all_to_all on %s round %d: element %zu from member %d is %.1f, expected %.1f",
                             rk->label, g->name, t, k, j, recv[at], a2a_value(g->ranks[j], me, k));
                    ok = 0;
                    break;
                }
        RK_CHECK(recv[nrecv] == -1.0f, "%s: all_to_all writes past the sum of recvcounts", rk->label);
        free(send);
        free(recv);
    }
}

static void broadcast_rank(tb_rank *rk, void *arg) {
    tb_group *g = &rk->groups[((coll_ctx *)arg)->kind];
    int roots[2] = {g->size - 1, g->size > 2 ? 1 : g->size - 1};
    for (int t = 0; t < 2; t++) {
        int root = roots[t];
        static const size_t counts[] = {0, 1000};
        for (int c = 0; c < 2; c++) {
            size_t count = counts[c];
            uint32_t salt = 300u + (uint32_t)(t * 2 + c);
            float *buf = malloc((count + 1) * sizeof(float));
            for (size_t i = 0; i <= count; i++)
                buf[i] = g->index == root && i < count ? input_value(rk->rank, i, salt) : -7.0f;
            tb_broadcast(g, buf, count, root);
            size_t bad = (size_t)-1;
            for (size_t i = 0; i < count; i++)
                if (buf[i] != input_value(g->ranks[root], i, salt)) {
                    bad = i;
                    break;
                }
            RK_CHECK(bad == (size_t)-1, "%s: broadcast on %s from member %d of %zu: element %zu is not the root's",
                     rk->label, g->name, root, count, bad);
            RK_CHECK(buf[count] == -7.0f, "%s: broadcast writes past count", rk->label);
            free(buf);
        }
    }
}

#define RING_MSGS 4
#define RING_LEN 17

static size_t ring_len(int m) { return m == 2 ? 0 : (size_t)RING_LEN; }  // one empty message among them

static void send_recv_ring_rank(tb_rank *rk, void *arg) {
    tb_group *g = &rk->groups[((coll_ctx *)arg)->kind];
    int n = g->size, next = (g->index + 1) % n, prev = (g->index - 1 + n) % n;
    float msg[RING_LEN];
    // every rank sends first (eager: no deadlock), several messages to the same peer
    for (int m = 0; m < RING_MSGS; m++) {
        for (int k = 0; k < RING_LEN; k++) msg[k] = (float)(rk->rank * 10000 + m * 100 + k);
        tb_send(g, msg, ring_len(m), next);
    }
    for (int m = 0; m < RING_MSGS; m++) {
        for (int k = 0; k < RING_LEN; k++) msg[k] = -1.0f;
        tb_recv(g, msg, ring_len(m), prev);
        int bad = -1;
        for (int k = 0; k < (int)ring_len(m) && bad < 0; k++)
            if (msg[k] != (float)(g->ranks[prev] * 10000 + m * 100 + k)) bad = k;
        RK_CHECK(bad < 0, "%s: recv %d on %s from member %d: element %d is %.0f; messages arrive out of order or "
                 "corrupted", rk->label, m, g->name, prev, bad, bad >= 0 ? msg[bad] : 0.0f);
        if (ring_len(m) == 0) RK_CHECK(msg[0] == -1.0f, "%s: an empty message writes nothing", rk->label);
    }
}

#define BARRIER_ROUNDS 5

typedef struct barrier_ctx {
    tb_group_kind kind;
    atomic_int arrived[BARRIER_ROUNDS][AR_MAX_RANKS];  // by round and the group's first member
} barrier_ctx;

static void barrier_rank(tb_rank *rk, void *arg) {
    barrier_ctx *c = arg;
    tb_group *g = &rk->groups[c->kind];
    for (int round = 0; round < BARRIER_ROUNDS; round++) {
        if ((round + g->index) % 2) usleep(2000u * (unsigned)(g->index + 1));  // stragglers
        atomic_fetch_add(&c->arrived[round][g->ranks[0]], 1);
        tb_barrier(g);
        int seen = atomic_load(&c->arrived[round][g->ranks[0]]);
        RK_CHECK(seen == g->size, "%s: left barrier round %d on %s when %d of %d members had arrived", rk->label,
                 round, g->name, seen, g->size);
    }
}

static void run_on_groups(int size, int tp, void (*fn)(tb_rank *, void *), int skip_singletons) {
    const tb_group_kind kinds[] = {TB_GROUP_WORLD, TB_GROUP_TP, TB_GROUP_DP_CP};
    world W;
    if (world_up(&W, size, tp, 20) != 0) return;
    for (int k = 0; k < 3; k++) {
        if (skip_singletons && W.w.ranks[0].groups[kinds[k]].size < 2) continue;
        coll_ctx c = {kinds[k]};
        parallel_state_run_ranks(&W.w, fn, &c);
    }
    world_down(&W);
}

static const int coll_layouts[][2] = {{2, 1}, {3, 1}, {4, 2}, {8, 4}};
#define NCOLL_LAYOUTS (sizeof coll_layouts / sizeof *coll_layouts)

TB_TEST(reduce_scatter_gives_each_member_its_share_of_the_group_order_sum) {
    for (size_t i = 0; i < NCOLL_LAYOUTS; i++) run_on_groups(coll_layouts[i][0], coll_layouts[i][1], reduce_scatter_rank, 0);
}

TB_TEST(all_gather_concatenates_in_member_order_also_in_place) {
    for (size_t i = 0; i < NCOLL_LAYOUTS; i++) run_on_groups(coll_layouts[i][0], coll_layouts[i][1], all_gather_rank, 0);
}

TB_TEST(all_to_all_routes_uneven_per_peer_counts_in_member_order) {
    for (size_t i = 0; i < NCOLL_LAYOUTS; i++) run_on_groups(coll_layouts[i][0], coll_layouts[i][1], all_to_all_rank, 0);
}

TB_TEST(broadcast_from_a_non_zero_root_reaches_every_member) {
    for (size_t i = 0; i < NCOLL_LAYOUTS; i++) run_on_groups(coll_layouts[i][0], coll_layouts[i][1], broadcast_rank, 1);
}

TB_TEST(send_recv_ring_does_not_deadlock_and_queued_messages_arrive_in_order) {
    for (size_t i = 0; i < NCOLL_LAYOUTS; i++)
        run_on_groups(coll_layouts[i][0], coll_layouts[i][1], send_recv_ring_rank, 1);
}

TB_TEST(barrier_releases_no_member_before_all_have_arrived) {
    const tb_group_kind kinds[] = {TB_GROUP_WORLD, TB_GROUP_TP, TB_GROUP_DP_CP};
    world W;
    if (world_up(&W, 4, 2, 20) != 0) return;
    for (int k = 0; k < 3; k++) {
        barrier_ctx *c = calloc(1, sizeof *c);
        c->kind = kinds[k];
        parallel_state_run_ranks(&W.w, barrier_rank, c);
        free(c);
    }
    world_down(&W);
}

// ---------------------------------------------------------------------------------------
// 3. recording: flight recorder and trace ranges

typedef struct expect_call {
    const char *group;
    tb_group_kind kind;
    uint64_t seq;
    tb_comm_op op;
    size_t count;
    int peer;  // -2: depends on the rank (send/recv); see peer_of
} expect_call;

// The calls every rank of a world of 4, tp 2, makes in record_rank, in order.
static const expect_call recorded[] = {
    {"world", TB_GROUP_WORLD, 1, TB_COMM_ALL_REDUCE, 10, -1},
    {"tp", TB_GROUP_TP, 1, TB_COMM_ALL_REDUCE, 3, -1},
    {"world", TB_GROUP_WORLD, 2, TB_COMM_BARRIER, 0, -1},
    {"world", TB_GROUP_WORLD, 3, TB_COMM_ALL_REDUCE, 7, -1},
    {"tp", TB_GROUP_TP, 2, TB_COMM_BROADCAST, 5, 1},
    {"tp", TB_GROUP_TP, 3, TB_COMM_SEND, 4, -2},
    {"tp", TB_GROUP_TP, 4, TB_COMM_RECV, 4, -2},
    {"dp_cp", TB_GROUP_DP_CP, 1, TB_COMM_ALL_GATHER, 4, -1},     // 2 per member x 2
    {"dp_cp", TB_GROUP_DP_CP, 2, TB_COMM_REDUCE_SCATTER, 6, -1}, // 3 per member x 2
    {"world", TB_GROUP_WORLD, 4, TB_COMM_ALL_TO_ALL, 4, -1},     // 1 to each of 4
};
#define NRECORDED ((int)(sizeof recorded / sizeof *recorded))

static void trace_path(char *buf, size_t len, int rank) {
    snprintf(buf, len, "%s/comm_trace.rank-%d.json", TB_TEST_TMPDIR, rank);
}

static void record_rank(tb_rank *rk, void *arg) {
    (void)arg;
    tb_ranges_init(&rk->ranges, rk->rank, rk->world_size, rk->label, rk->world->origin_ns, 1);
    tb_ranges_bind(&rk->ranges);
    rk->step = 5;
    rk->microbatch = 1;
    float buf[16] = {0}, out[16] = {0};
    size_t ones[4] = {1, 1, 1, 1};
    tb_group *tp = &rk->groups[TB_GROUP_TP], *dp = &rk->groups[TB_GROUP_DP_CP], *wd = &rk->groups[TB_GROUP_WORLD];
    TB_RANGE_PUSH("test.outer");
    tb_all_reduce(wd, buf, 10, TB_RED_SUM);
    tb_all_reduce(tp, buf, 3, TB_RED_SUM);
    tb_barrier(wd);
    tb_all_reduce(wd, buf, 7, TB_RED_MAX);
    tb_broadcast(tp, buf, 5, 1);
    tb_send(tp, buf, 4, (tp->index + 1) % 2);
    tb_recv(tp, out, 4, (tp->index + 1) % 2);
    tb_all_gather(dp, buf, out, 2);
    tb_reduce_scatter(dp, buf, out, 3);
    tb_all_to_all(wd, buf, ones, out, ones);
    TB_RANGE_POP();
    char path[512];
    trace_path(path, sizeof path, rk->rank);
    tb_error err;
    RK_CHECK(tb_ranges_write_chrome(&rk->ranges, path, &err) == 0, "%s: %s", rk->label, err.msg);
    tb_ranges_bind(NULL);
    tb_ranges_free(&rk->ranges);
}

static int peer_of(const expect_call *e, const tb_rank *rk) {
    return e->peer == -2 ? (rk->groups[TB_GROUP_TP].index + 1) % 2 : e->peer;
}

TB_TEST(flight_recorder_holds_each_call_with_per_group_sequence_numbers) {
    world W;
    if (world_up(&W, 4, 2, 20) != 0) return;
    parallel_state_run_ranks(&W.w, record_rank, NULL);
    for (int r = 0; r < 4; r++) {
        tb_rank *rk = &W.w.ranks[r];
        tb_flight_entry tail[TB_FLIGHT_RECORDER_LEN];
        int n = tb_flight_recorder_tail(&rk->fr, tail, TB_FLIGHT_RECORDER_LEN);
        TB_CHECK(n == NRECORDED, "%s: %d entries recorded, expected %d", rk->label, n, NRECORDED);
        for (int i = 0; i < n && i < NRECORDED; i++) {
            const tb_flight_entry *e = &tail[i];
            const expect_call *x = &recorded[i];
            const tb_group *g = &rk->groups[x->kind];
            TB_CHECK(e->group && strcmp(e->group, x->group) == 0, "%s entry %d: group %s, expected %s", rk->label, i,
                     e->group ? e->group : "(null)", x->group);
            TB_CHECK(e->group_id == g->id && e->group_size == g->size, "%s entry %d: group id/size %d/%d, expected %d/%d",
                     rk->label, i, e->group_id, e->group_size, g->id, g->size);
            TB_CHECK(e->seq == x->seq, "%s entry %d (%s on %s): seq %llu, expected %llu (counted per group)",
                     rk->label, i, tb_comm_op_name(x->op), x->group, (unsigned long long)e->seq,
                     (unsigned long long)x->seq);
            TB_CHECK(e->op == x->op, "%s entry %d: op %s, expected %s", rk->label, i, tb_comm_op_name(e->op),
                     tb_comm_op_name(x->op));
            TB_CHECK(e->count == x->count, "%s entry %d (%s): count %zu, expected %zu", rk->label, i,
                     tb_comm_op_name(x->op), e->count, x->count);
            TB_CHECK(e->bytes == 4 * x->count, "%s entry %d: bytes %zu, expected 4 x %zu", rk->label, i, e->bytes,
                     x->count);
            TB_CHECK(e->peer == peer_of(x, rk), "%s entry %d (%s): peer %d, expected %d", rk->label, i,
                     tb_comm_op_name(x->op), e->peer, peer_of(x, rk));
            TB_CHECK(e->enter_ns > 0 && e->exit_ns >= e->enter_ns, "%s entry %d: enter %lld exit %lld", rk->label, i,
                     (long long)e->enter_ns, (long long)e->exit_ns);
            TB_CHECK(i == 0 || e->enter_ns >= tail[i - 1].exit_ns, "%s entry %d starts before the previous ended",
                     rk->label, i);
            TB_CHECK(e->step == 5 && e->microbatch == 1, "%s entry %d: step %lld microbatch %d, expected 5 and 1",
                     rk->label, i, (long long)e->step, e->microbatch);
        }
        TB_CHECK(rk->groups[TB_GROUP_WORLD].seq == 4 && rk->groups[TB_GROUP_TP].seq == 4 &&
                     rk->groups[TB_GROUP_DP_CP].seq == 2 && rk->groups[TB_GROUP_PP].seq == 0,
                 "%s: per-group call counts world %llu tp %llu dp_cp %llu pp %llu", rk->label,
                 (unsigned long long)rk->groups[TB_GROUP_WORLD].seq, (unsigned long long)rk->groups[TB_GROUP_TP].seq,
                 (unsigned long long)rk->groups[TB_GROUP_DP_CP].seq, (unsigned long long)rk->groups[TB_GROUP_PP].seq);
    }
    world_down(&W);
}

static void many_barriers_rank(tb_rank *rk, void *arg) {
    (void)arg;
    for (int i = 0; i < TB_FLIGHT_RECORDER_LEN + 6; i++) tb_barrier(&rk->groups[TB_GROUP_WORLD]);
}

TB_TEST(flight_recorder_keeps_the_newest_calls_when_it_wraps) {
    world W;
    if (world_up(&W, 2, 1, 20) != 0) return;
    parallel_state_run_ranks(&W.w, many_barriers_rank, NULL);
    for (int r = 0; r < 2; r++) {
        tb_flight_entry tail[TB_FLIGHT_RECORDER_LEN];
        int n = tb_flight_recorder_tail(&W.w.ranks[r].fr, tail, TB_FLIGHT_RECORDER_LEN);
        TB_CHECK(n == TB_FLIGHT_RECORDER_LEN, "rank %d: %d entries", r, n);
        for (int i = 0; i < n; i++)
            if (tail[i].seq != (uint64_t)(7 + i) || tail[i].exit_ns < tail[i].enter_ns) {
                TB_CHECK(0, "rank %d: tail entry %d has seq %llu, expected %d (oldest first)", r, i,
                         (unsigned long long)tail[i].seq, 7 + i);
                break;
            }
        tb_flight_entry last;
        TB_CHECK(tb_flight_recorder_tail(&W.w.ranks[r].fr, &last, 1) == 1 && last.seq == 70,
                 "rank %d: the newest entry is seq 70", r);
    }
    world_down(&W);
}

static const char *jstr(json_t *o, const char *key) {
    const char *s = json_string_value(json_object_get(o, key));
    return s ? s : "";
}

static long long jint(json_t *o, const char *key) {
    json_t *v = json_object_get(o, key);
    return json_is_integer(v) ? (long long)json_integer_value(v) : -999999;
}

TB_TEST(trace_has_comm_ranges_with_group_op_dtype_count_bytes_seq_and_rank) {
    world W;
    if (world_up(&W, 4, 2, 20) != 0) return;
    parallel_state_run_ranks(&W.w, record_rank, NULL);
    for (int r = 0; r < 4; r++) {
        tb_rank *rk = &W.w.ranks[r];
        char path[512];
        trace_path(path, sizeof path, r);
        json_t *root = tb_load_json(path);
        TB_CHECK(root != NULL, "%s: no trace at %s", rk->label, path);
        if (!root) continue;
        json_t *events = json_object_get(root, "traceEvents");
        size_t i;
        json_t *ev;
        int ncomm = 0, nworld_ar = 0;
        double outer_ts = -1, outer_end = -1;
        json_array_foreach(events, i, ev) {
            if (strcmp(jstr(ev, "name"), "test.outer") == 0) {
                outer_ts = json_number_value(json_object_get(ev, "ts"));
                outer_end = outer_ts + json_number_value(json_object_get(ev, "dur"));
            }
        }
        TB_CHECK(outer_ts >= 0, "%s: the enclosing range is in the trace", rk->label);
        json_array_foreach(events, i, ev) {
            const char *name = jstr(ev, "name");
            if (strncmp(name, "comm.", 5) != 0) continue;
            json_t *args = json_object_get(ev, "args");
            int k = ncomm++;
            if (k >= NRECORDED) continue;
            const expect_call *x = &recorded[k];
            const tb_group *g = &rk->groups[x->kind];
            char want[64];
            snprintf(want, sizeof want, "comm.%s.%s", x->group, tb_comm_op_name(x->op));
            TB_CHECK(strcmp(name, want) == 0, "%s: comm range %d is %s, expected %s", rk->label, k, name, want);
            TB_CHECK(strcmp(jstr(ev, "ph"), "X") == 0, "%s: %s is a complete (X) event", rk->label, name);
            TB_CHECK(strcmp(jstr(args, "group"), x->group) == 0 && strcmp(jstr(args, "op"), tb_comm_op_name(x->op)) == 0,
                     "%s: %s args group %s op %s", rk->label, name, jstr(args, "group"), jstr(args, "op"));
            TB_CHECK(strcmp(jstr(args, "dtype"), "float32") == 0, "%s: %s dtype '%s'", rk->label, name,
                     jstr(args, "dtype"));
            TB_CHECK(jint(args, "count") == (long long)x->count && jint(args, "bytes") == 4 * (long long)x->count,
                     "%s: %s count %lld bytes %lld, expected %zu and %zu", rk->label, name, jint(args, "count"),
                     jint(args, "bytes"), x->count, 4 * x->count);
            TB_CHECK(jint(args, "seq") == (long long)x->seq, "%s: %s seq %lld, expected %llu", rk->label, name,
                     jint(args, "seq"), (unsigned long long)x->seq);
            TB_CHECK(jint(args, "group_size") == g->size && jint(args, "group_index") == g->index &&
                         jint(args, "group_id") == g->id,
                     "%s: %s group_size %lld index %lld id %lld, expected %d %d %d", rk->label, name,
                     jint(args, "group_size"), jint(args, "group_index"), jint(args, "group_id"), g->size, g->index,
                     g->id);
            TB_CHECK(jint(args, "peer") == peer_of(x, rk), "%s: %s peer %lld, expected %d", rk->label, name,
                     jint(args, "peer"), peer_of(x, rk));
            TB_CHECK(strcmp(jstr(args, "rank"), rk->label) == 0, "%s: %s args.rank '%s'", rk->label, name,
                     jstr(args, "rank"));
            TB_CHECK(jint(args, "depth") == 1, "%s: %s nests under the caller's range (depth %lld)", rk->label, name,
                     jint(args, "depth"));
            double ts = json_number_value(json_object_get(ev, "ts")), dur = json_number_value(json_object_get(ev, "dur"));
            TB_CHECK(dur >= 0 && ts >= outer_ts && ts + dur <= outer_end + 1e-3, "%s: %s [%f, +%f] lies inside the "
                     "caller's range [%f, %f]", rk->label, name, ts, dur, outer_ts, outer_end);
            if (strcmp(name, "comm.world.all_reduce") == 0) nworld_ar++;
        }
        TB_CHECK(ncomm == NRECORDED, "%s: %d comm ranges, expected %d", rk->label, ncomm, NRECORDED);
        TB_CHECK(nworld_ar == 2, "%s: %d comm.world.all_reduce events, expected 2", rk->label, nworld_ar);
        json_decref(root);
        remove(path);
    }
    world_down(&W);
}

// ---------------------------------------------------------------------------------------
// 4. hangs: a call whose peer never comes ends the run after the timeout with a report

static tb_output sh;  // what the last command printed

static int array_has_int(json_t *a, long long v) {
    size_t i;
    json_t *x;
    json_array_foreach(a, i, x) if (json_is_integer(x) && json_integer_value(x) == v) return 1;
    return 0;
}

#define HANG_SHAPE                                                                                     \
    " --num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 32 --vocab-size 256"       \
    " --micro-batch-size 2 --global-batch-size 8 --train-iters 4 --world-size 4"                      \
    " --tensor-model-parallel-size 2 --collective-timeout 2"
#define HANG_DIR TB_TEST_TMPDIR "/comm_hang"
#define NOHANG_DIR TB_TEST_TMPDIR "/comm_nohang"

TB_TEST(stalled_rank_ends_the_run_with_a_hang_report_after_the_timeout) {
    int rc = tb_run(&sh, NULL, "rm -rf %s && timeout 60 %s" HANG_SHAPE " --inject-stall 3:2 --run-dir %s", HANG_DIR,
                    PRETRAIN, HANG_DIR);
    TB_CHECK(rc == 4, "pretrain_gpt with a stalled rank exits %d, expected 4 (124: still hanging after 60 s)\n%s", rc,
             sh.err);
    TB_CHECK(sh.seconds >= 1.9, "the hang is reported after %.2f s, before the 2 s timeout", sh.seconds);
    TB_CHECK(sh.seconds < 30, "the hang is reported after %.1f s; the timeout is 2 s", sh.seconds);
    const char *hang = strstr(sh.err, "HANG:");
    TB_CHECK(hang != NULL, "stderr says HANG:\n%s", sh.err);
    const char *absent = hang ? strstr(hang, "absent from this call:") : NULL;
    TB_CHECK(absent && strstr(absent, "rank 3 (tp1 cp0 dp1 pp0)"),
             "the stderr summary names the absent rank by its coordinates:\n%s", sh.err);
    TB_CHECK(hang && strstr(hang, "hang.json"), "the stderr summary names the report file");

    json_t *h = tb_load_json(HANG_DIR "/" TB_RUN_HANG_REPORT);
    TB_REQUIRE(h != NULL, "no hang.json in %s", HANG_DIR);
    TB_CHECK(strcmp(jstr(h, "kind"), "hang") == 0, "kind '%s'", jstr(h, "kind"));
    TB_CHECK(json_number_value(json_object_get(h, "collective_timeout_s")) == 2.0, "collective_timeout_s");
    json_t *to = json_object_get(h, "timed_out");
    TB_CHECK(json_is_object(to) && jstr(to, "group")[0], "timed_out.group is named");
    TB_CHECK(json_is_string(json_object_get(to, "op")) && json_is_integer(json_object_get(to, "seq")),
             "timed_out has op and seq");

    json_t *ranks = json_object_get(h, "ranks");
    TB_REQUIRE(json_is_array(ranks) && json_array_size(ranks) == 4, "every rank is listed under ranks");
    int pending_count = 0;
    for (int r = 0; r < 4; r++) {
        json_t *e = json_array_get(ranks, (size_t)r);
        json_t *co = json_object_get(e, "coordinates");
        TB_CHECK(jint(e, "rank") == r, "ranks[%d].rank = %lld", r, jint(e, "rank"));
        TB_CHECK(jint(co, "tp") == r % 2 && jint(co, "cp") == 0 && jint(co, "dp") == r / 2 && jint(co, "pp") == 0,
                 "ranks[%d] coordinates tp %lld cp %lld dp %lld pp %lld", r, jint(co, "tp"), jint(co, "cp"),
                 jint(co, "dp"), jint(co, "pp"));
        char label[96];
        snprintf(label, sizeof label, "rank %d (tp%d cp0 dp%d pp0)", r, r % 2, r / 2);
        TB_CHECK(strcmp(jstr(e, "rank_label"), label) == 0, "ranks[%d].rank_label '%s'", r, jstr(e, "rank_label"));
        json_t *tail = json_object_get(e, "flight_recorder_tail");
        TB_CHECK(json_is_array(tail) && json_array_size(tail) > 0, "ranks[%d] has a flight_recorder_tail", r);
        json_t *last = json_array_get(tail, json_array_size(tail) - 1);
        TB_CHECK(!last || (json_is_string(json_object_get(last, "op")) && jint(last, "seq") >= 1 &&
                           jint(last, "bytes") == 4 * jint(last, "count")),
                 "ranks[%d] flight-recorder entries carry op, seq, bytes = 4 x count", r);
        if (!json_is_null(json_object_get(e, "pending"))) pending_count++;
    }
    json_t *r3 = json_array_get(ranks, 3);
    TB_CHECK(json_is_null(json_object_get(r3, "pending")), "the stalled rank has no pending call");
    TB_CHECK(jint(r3, "step") == 2, "the stalled rank is at step 2 (%lld)", jint(r3, "step"));

    json_t *absent_peers = json_object_get(h, "absent_peers");
    json_t *a3 = NULL;
    size_t i;
    json_t *a;
    json_array_foreach(absent_peers, i, a) if (jint(a, "rank") == 3) a3 = a;
    TB_CHECK(a3 != NULL, "absent_peers holds rank 3 (timed out on %s)", jstr(to, "group"));
    if (a3) {
        json_t *lc = json_object_get(a3, "last_completed");
        TB_CHECK(json_is_object(lc), "rank 3's last completed call is reported");
        TB_CHECK(jstr(lc, "op")[0] && jint(lc, "seq") >= 1 && jint(lc, "bytes") > 0 &&
                     jint(lc, "bytes") == 4 * jint(lc, "count"),
                 "rank 3's last_completed: op '%s' seq %lld bytes %lld count %lld", jstr(lc, "op"), jint(lc, "seq"),
                 jint(lc, "bytes"), jint(lc, "count"));
        TB_CHECK(jint(lc, "step") == 1, "rank 3 last completed a call in step 1 (%lld)", jint(lc, "step"));
        TB_CHECK(strcmp(jstr(a3, "rank_label"), "rank 3 (tp1 cp0 dp1 pp0)") == 0, "absent rank label '%s'",
                 jstr(a3, "rank_label"));
    }
    TB_CHECK(array_has_int(json_object_get(to, "members"), 3) || !a3, "the timed-out group holds rank 3");

    json_t *by_group = json_object_get(h, "stuck_by_group");
    TB_CHECK(json_is_object(by_group) && json_object_size(by_group) > 0, "stuck ranks are grouped in stuck_by_group");
    json_t *common = json_object_get(h, "smallest_common_group");
    TB_CHECK(json_is_object(common) && jstr(common, "group")[0], "smallest_common_group is present");
    int listed = 0;
    const char *key;
    json_t *list;
    json_object_foreach(by_group, key, list) {
        json_t *s;
        json_array_foreach(list, i, s) {
            long long r = jint(s, "rank");
            listed++;
            TB_CHECK(r >= 0 && r < 3, "stuck rank %lld: the stalled rank 3 never entered a call", r);
            json_t *pend = r >= 0 && r < 4 ? json_object_get(json_array_get(ranks, (size_t)r), "pending") : NULL;
            TB_CHECK(json_is_object(pend) && jint(pend, "seq") == jint(s, "seq"),
                     "stuck rank %lld under %s is pending in that call", r, key);
            char own[96];
            snprintf(own, sizeof own, "%s#%lld", jstr(pend, "group"), jint(pend, "group_id"));
            TB_CHECK(strcmp(key, own) == 0, "stuck rank %lld is listed under its own group (%s, pending on %s)", r,
                     key, own);
            TB_CHECK(array_has_int(json_object_get(common, "members"), r),
                     "smallest_common_group holds stuck rank %lld", r);
        }
    }
    TB_CHECK(listed == pending_count && listed > 0, "%d ranks have a pending call, %d are listed as stuck",
             pending_count, listed);
    json_decref(h);
}

TB_TEST(same_run_without_a_stall_exits_0_without_a_hang_report) {
    int rc =
        tb_run(&sh, NULL, "rm -rf %s && timeout 60 %s" HANG_SHAPE " --run-dir %s", NOHANG_DIR, PRETRAIN, NOHANG_DIR);
    TB_CHECK(rc == 0, "pretrain_gpt exits %d:\n%s", rc, sh.err);
    TB_CHECK(!tb_exists(NOHANG_DIR "/" TB_RUN_HANG_REPORT), "no hang.json without a hang");
    TB_CHECK(tb_exists(NOHANG_DIR "/" TB_RUN_CONFIG), "the run wrote its run dir");
    TB_CHECK(!strstr(sh.err, "HANG"), "no hang summary:\n%s", sh.err);
}

// In process: a recv whose sender never sends times out after the world's timeout (the
// run ends in a child process, so the test survives it).
static void lonely_recv_rank(tb_rank *rk, void *arg) {
    (void)arg;
    if (rk->rank == 0) {
        float x[4];
        tb_recv(&rk->groups[TB_GROUP_WORLD], x, 4, 1);
    }
}

#define RECV_HANG_DIR TB_TEST_TMPDIR "/comm_recv_hang"

TB_TEST(recv_without_a_sender_returns_after_the_timeout_with_a_hang_report) {
    TB_REQUIRE(system("rm -rf " RECV_HANG_DIR " && mkdir -p " RECV_HANG_DIR) == 0, "mkdir");
    fflush(NULL);
    double t0 = now_s();
    pid_t pid = fork();
    TB_REQUIRE(pid >= 0, "fork");
    if (pid == 0) {
        if (!freopen(RECV_HANG_DIR "/stderr.txt", "w", stderr)) _exit(99);
        world W;
        if (world_up(&W, 2, 1, 0.5) != 0) _exit(98);
        snprintf(W.w.run_dir, sizeof W.w.run_dir, "%s", RECV_HANG_DIR);
        parallel_state_run_ranks(&W.w, lonely_recv_rank, NULL);
        _exit(0);  // not reached: the timeout ends the process
    }
    int status = 0;
    // bounded wait: a recv that never times out must not hang the test
    int done = 0;
    while (!done && now_s() - t0 < 20) {
        pid_t got = waitpid(pid, &status, WNOHANG);
        if (got == pid) done = 1;
        else usleep(20000);
    }
    if (!done) {
        kill(pid, 9);
        waitpid(pid, &status, 0);
    }
    double secs = now_s() - t0;
    TB_CHECK(done, "the recv was still waiting after 20 s; the timeout is 0.5 s");
    TB_CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 4, "the process ends with status 4 (status %d)", status);
    TB_CHECK(secs >= 0.45, "ended after %.3f s, before the 0.5 s timeout", secs);
    static char err_text[1 << 16];
    tb_slurp_into(RECV_HANG_DIR "/stderr.txt", err_text, sizeof err_text);
    TB_CHECK(strstr(err_text, "HANG: recv on group world"), "stderr summary:\n%s", err_text);
    json_t *h = tb_load_json(RECV_HANG_DIR "/" TB_RUN_HANG_REPORT);
    TB_REQUIRE(h != NULL, "hang.json written to the world's run dir");
    json_t *to = json_object_get(h, "timed_out");
    TB_CHECK(strcmp(jstr(to, "op"), "recv") == 0 && strcmp(jstr(to, "group"), "world") == 0 &&
                 jint(to, "detected_by") == 0,
             "timed_out: %s on %s detected by %lld", jstr(to, "op"), jstr(to, "group"), jint(to, "detected_by"));
    json_t *absent = json_object_get(h, "absent_peers");
    TB_CHECK(json_array_size(absent) == 1 && jint(json_array_get(absent, 0), "rank") == 1 &&
                 json_is_null(json_object_get(json_array_get(absent, 0), "last_completed")),
             "the silent sender is the one absent peer, with nothing completed");
    json_t *pend = json_object_get(json_array_get(json_object_get(h, "ranks"), 0), "pending");
    TB_CHECK(strcmp(jstr(pend, "op"), "recv") == 0 && jint(pend, "peer") == 1 && jint(pend, "bytes") == 16,
             "rank 0 is pending in recv from member 1 of 16 bytes");
    json_decref(h);
}

int main(void) {
    double t0 = now_s();
    TB_RUN(all_reduce_sums_in_group_order_bitwise_identical_on_every_rank_and_run);
    TB_RUN(reduce_scatter_gives_each_member_its_share_of_the_group_order_sum);
    TB_RUN(all_gather_concatenates_in_member_order_also_in_place);
    TB_RUN(all_to_all_routes_uneven_per_peer_counts_in_member_order);
    TB_RUN(broadcast_from_a_non_zero_root_reaches_every_member);
    TB_RUN(send_recv_ring_does_not_deadlock_and_queued_messages_arrive_in_order);
    TB_RUN(barrier_releases_no_member_before_all_have_arrived);
    TB_RUN(flight_recorder_holds_each_call_with_per_group_sequence_numbers);
    TB_RUN(flight_recorder_keeps_the_newest_calls_when_it_wraps);
    TB_RUN(trace_has_comm_ranges_with_group_op_dtype_count_bytes_seq_and_rank);
    TB_RUN(stalled_rank_ends_the_run_with_a_hang_report_after_the_timeout);
    TB_RUN(same_run_without_a_stall_exits_0_without_a_hang_report);
    TB_RUN(recv_without_a_sender_returns_after_the_timeout_with_a_hang_report);
    printf("(%.1f s)\n", now_s() - t0);
    return tb_test_summary();
}
