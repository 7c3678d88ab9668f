// The communicator on the local backend, collectives and point-to-point: every call gives the
// documented result (reductions summed in group order, the same bits on every rank and in
// every run). What each call leaves behind (the flight recorder, the trace ranges, the hang
// report) is test_comm_records.c's.
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include "comm_world.h"

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
        const tb_mem_stats *s = &W.w.ranks[r].mem->stats;
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

// A batch both ways around the group (the pipeline's send_forward_backward_recv_forward_backward):
// every member sends to its next and its previous member first, then receives from both.
static void batch_both_ways_rank(tb_rank *rk, void *arg) {
    tb_group *g = &rk->groups[((coll_ctx *)arg)->kind];
    int n = g->size, next = (g->index + 1) % n, prev = (g->index - 1 + n) % n;
    float to_next[RING_LEN], to_prev[RING_LEN], from_prev[RING_LEN], from_next[RING_LEN];
    for (int k = 0; k < RING_LEN; k++) {
        to_next[k] = (float)(rk->rank * 1000 + k);
        to_prev[k] = (float)(-rk->rank * 1000 - k - 1);
        from_prev[k] = from_next[k] = 0.5f;
    }
    const tb_p2p_op ops[] = {{TB_COMM_SEND, g, to_next, RING_LEN, next, -1},
                             {TB_COMM_SEND, g, to_prev, RING_LEN, prev, -1},
                             {TB_COMM_RECV, g, from_prev, RING_LEN, prev, -1},
                             {TB_COMM_RECV, g, from_next, RING_LEN, next, -1}};
    tb_batch_send_recv(ops, 4);
    int bad = -1;
    for (int k = 0; k < RING_LEN && bad < 0; k++)
        if (from_prev[k] != (float)(g->ranks[prev] * 1000 + k) || from_next[k] != (float)(-g->ranks[next] * 1000 - k - 1))
            bad = k;
    RK_CHECK(bad < 0, "%s: batch on %s: element %d from member %d is %.0f, from member %d is %.0f", rk->label, g->name,
             bad, prev, bad >= 0 ? from_prev[bad] : 0.0f, next, bad >= 0 ? from_next[bad] : 0.0f);
    RK_CHECK(g->seq == 4, "%s: the batch on %s counts as 4 calls (seq %llu)", rk->label, g->name,
             (unsigned long long)g->seq);
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

TB_TEST(batched_sends_and_recvs_both_ways_deliver_each_message) {
    for (size_t i = 0; i < NCOLL_LAYOUTS; i++)
        run_on_groups(coll_layouts[i][0], coll_layouts[i][1], batch_both_ways_rank, 1);
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

int main(void) {
    double t0 = now_s();
    TB_RUN(all_reduce_sums_in_group_order_bitwise_identical_on_every_rank_and_run);
    TB_RUN(reduce_scatter_gives_each_member_its_share_of_the_group_order_sum);
    TB_RUN(all_gather_concatenates_in_member_order_also_in_place);
    TB_RUN(all_to_all_routes_uneven_per_peer_counts_in_member_order);
    TB_RUN(broadcast_from_a_non_zero_root_reaches_every_member);
    TB_RUN(send_recv_ring_does_not_deadlock_and_queued_messages_arrive_in_order);
    TB_RUN(batched_sends_and_recvs_both_ways_deliver_each_message);
    TB_RUN(barrier_releases_no_member_before_all_have_arrived);
    printf("(%.1f s)\n", now_s() - t0);
    return tb_test_summary();
}
