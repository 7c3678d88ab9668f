// parallel_state properties: rank → coordinates in Megatron-Core's tp-cp-ep-dp-pp order
// (tp fastest), checked against an independent enumeration and Megatron's worked examples;
// the groups of each kind partition the world, have the sizes of their axes, list their
// members in increasing rank order, and place a rank at its coordinate along the group's
// axes; parallel_state_world_init gives each rank its groups on the local backend, one
// shared group object per group and kind; the pretrain_gpt binary prints the layout with
// --print-rank-layout and exits without training, or exits 2 naming the violated rule.
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "comm/comm.h"
#include "comm/local_backend.h"
#include "config/config.h"
#include "initialize.h"
#include "comm/parallel_state.h"
#include "tb_shell.h"
#include "tb_test.h"

// ---------------------------------------------------------------------------------------
// Helpers

typedef struct shape {
    int tp, cp, dp, pp;
} shape;

static int world_of(shape s) { return s.tp * s.cp * s.dp * s.pp; }

// A config with these sizes, resolved (not validated: pp and cp > 1 are refused for
// training, but the layout math must hold for them too).
static tb_config config_of(shape s) {
    tb_config c;
    config_defaults(&c);
    c.tensor_model_parallel_size = s.tp, c.context_parallel_size = s.cp;
    c.pipeline_model_parallel_size = s.pp, c.world_size = world_of(s);
    config_resolve(&c);
    return c;
}

// The rank at these coordinates, written out independently of the engine.
static int rank_at(shape s, int t, int c, int d, int p) { return t + s.tp * (c + s.cp * (d + s.dp * p)); }

// The members of `kind`'s group around coordinates (t, c, d, p), by nested loops whose
// outer loops run over the slower axes, so members come out in increasing rank order.
// Embedding: the first and the last pipeline stage (one stage when pp is 1).
static int expected_members(shape s, tb_group_kind kind, int t, int c, int d, int p, int *out) {
    int n = 0;
    switch (kind) {
    case TB_GROUP_TP:
        for (int i = 0; i < s.tp; i++) out[n++] = rank_at(s, i, c, d, p);
        break;
    case TB_GROUP_CP:
        for (int i = 0; i < s.cp; i++) out[n++] = rank_at(s, t, i, d, p);
        break;
    case TB_GROUP_DP:
        for (int i = 0; i < s.dp; i++) out[n++] = rank_at(s, t, c, i, p);
        break;
    case TB_GROUP_DP_CP:
        for (int i = 0; i < s.dp; i++)
            for (int j = 0; j < s.cp; j++) out[n++] = rank_at(s, t, j, i, p);
        break;
    case TB_GROUP_PP:
    case TB_GROUP_PP_GRAD:  // the pipeline group again, on its own communicator
        for (int i = 0; i < s.pp; i++) out[n++] = rank_at(s, t, c, d, i);
        break;
    case TB_GROUP_MP:
        for (int i = 0; i < s.pp; i++)
            for (int j = 0; j < s.tp; j++) out[n++] = rank_at(s, j, c, d, i);
        break;
    case TB_GROUP_EMBEDDING:
        out[n++] = rank_at(s, t, c, d, 0);
        if (s.pp > 1) out[n++] = rank_at(s, t, c, d, s.pp - 1);
        break;
    case TB_GROUP_WORLD:
        for (int r = 0; r < world_of(s); r++) out[n++] = r;
        break;
    // a dense model's expert grid: etp = tp, ep 1, expert-dp = dp x cp
    case TB_GROUP_EP: out[n++] = rank_at(s, t, c, d, p); break;
    case TB_GROUP_ETP: return expected_members(s, TB_GROUP_TP, t, c, d, p, out);
    case TB_GROUP_EXPERT_DP: return expected_members(s, TB_GROUP_DP_CP, t, c, d, p, out);
    default: break;
    }
    return n;
}

static int expected_size(shape s, tb_group_kind kind) {
    switch (kind) {
    case TB_GROUP_TP: return s.tp;
    case TB_GROUP_CP: return s.cp;
    case TB_GROUP_DP: return s.dp;
    case TB_GROUP_DP_CP: return s.dp * s.cp;
    case TB_GROUP_PP:
    case TB_GROUP_PP_GRAD: return s.pp;
    case TB_GROUP_MP: return s.tp * s.pp;
    case TB_GROUP_EMBEDDING: return s.pp > 1 ? 2 : 1;
    case TB_GROUP_WORLD: return world_of(s);
    case TB_GROUP_EP: return 1;
    case TB_GROUP_ETP: return s.tp;
    case TB_GROUP_EXPERT_DP: return s.dp * s.cp;
    default: return -1;
    }
}

// The rank's place in its group: its coordinate along the group's axes.
static int expected_index(shape s, tb_group_kind kind, int rank, tb_coords c) {
    switch (kind) {
    case TB_GROUP_TP: return c.tp;
    case TB_GROUP_CP: return c.cp;
    case TB_GROUP_DP: return c.dp;
    case TB_GROUP_DP_CP: return c.cp + s.cp * c.dp;
    case TB_GROUP_PP:
    case TB_GROUP_PP_GRAD: return c.pp;
    case TB_GROUP_MP: return c.tp + s.tp * c.pp;
    case TB_GROUP_EMBEDDING: return c.pp == 0 ? 0 : 1;
    case TB_GROUP_WORLD: return rank;
    case TB_GROUP_EP: return 0;
    case TB_GROUP_ETP: return c.tp;
    case TB_GROUP_EXPERT_DP: return c.cp + s.cp * c.dp;
    default: return -1;
    }
}

// Is this rank in an embedding group (first or last pipeline stage)?
static int in_embedding(shape s, tb_coords c) { return c.pp == 0 || c.pp == s.pp - 1; }

static void format_list(char *buf, size_t len, const int *v, int n) {
    size_t used = 0;
    buf[0] = '\0';
    used += (size_t)snprintf(buf + used, len - used, "[");
    for (int i = 0; i < n && used < len; i++) used += (size_t)snprintf(buf + used, len - used, "%s%d", i ? ", " : "", v[i]);
    if (used < len) snprintf(buf + used, len - used, "]");
}

static int same_list(const int *a, int na, const int *b, int nb) {
    return na == nb && memcmp(a, b, (size_t)na * sizeof(int)) == 0;
}

// Shapes of every kind: one rank, one axis at a time, mixed, non-powers of two, 64 ranks.
static const shape shapes[] = {
    {1, 1, 1, 1}, {2, 1, 1, 1}, {1, 2, 1, 1}, {1, 1, 4, 1}, {1, 1, 1, 4}, {2, 1, 4, 1}, {2, 2, 2, 2},
    {2, 1, 2, 4}, {2, 1, 4, 4}, {4, 2, 1, 2}, {3, 1, 5, 1}, {1, 3, 2, 3}, {2, 2, 2, 8}, {8, 1, 8, 1},
    {4, 1, 2, 3},
};
#define NSHAPES ((int)(sizeof shapes / sizeof shapes[0]))

// ---------------------------------------------------------------------------------------
// Coordinates

TB_TEST(resolve_derives_dp_from_the_world_for_every_shape) {
    for (int i = 0; i < NSHAPES; i++) {
        tb_config c = config_of(shapes[i]);
        TB_CHECK(c.data_parallel_size == shapes[i].dp && c.world_size == world_of(shapes[i]),
                 "tp %d cp %d dp %d pp %d: world %d, dp %d", shapes[i].tp, shapes[i].cp, shapes[i].dp, shapes[i].pp,
                 c.world_size, c.data_parallel_size);
    }
}

TB_TEST(coordinates_follow_tp_cp_ep_dp_pp_order_with_tp_fastest) {
    for (int i = 0; i < NSHAPES; i++) {
        shape s = shapes[i];
        tb_config cfg = config_of(s);
        int r = 0;
        // Walk the grid slowest axis outermost: ranks come in increasing order.
        for (int p = 0; p < s.pp; p++)
            for (int d = 0; d < s.dp; d++)
                for (int c = 0; c < s.cp; c++)
                    for (int t = 0; t < s.tp; t++, r++) {
                        tb_coords k = parallel_state_coords(&cfg, r);
                        TB_CHECK(k.tp == t && k.cp == c && k.dp == d && k.pp == p,
                                 "tp %d cp %d dp %d pp %d: rank %d is (tp%d cp%d dp%d pp%d), want (tp%d cp%d dp%d pp%d)",
                                 s.tp, s.cp, s.dp, s.pp, r, k.tp, k.cp, k.dp, k.pp, t, c, d, p);
                    }
    }
}

TB_TEST(coordinates_of_megatrons_16_rank_example) {
    // tp 2, cp 2, dp 2, pp 2 (parallel_state.h's example)
    tb_config cfg = config_of((shape){2, 2, 2, 2});
    static const struct {
        int rank;
        tb_coords c;
        const char *label;
    } cases[] = {
        {0, {0, 0, 0, 0}, "rank 0 (tp0 cp0 dp0 pp0)"},   {1, {1, 0, 0, 0}, "rank 1 (tp1 cp0 dp0 pp0)"},
        {2, {0, 1, 0, 0}, "rank 2 (tp0 cp1 dp0 pp0)"},   {4, {0, 0, 1, 0}, "rank 4 (tp0 cp0 dp1 pp0)"},
        {7, {1, 1, 1, 0}, "rank 7 (tp1 cp1 dp1 pp0)"},   {8, {0, 0, 0, 1}, "rank 8 (tp0 cp0 dp0 pp1)"},
        {13, {1, 0, 1, 1}, "rank 13 (tp1 cp0 dp1 pp1)"}, {15, {1, 1, 1, 1}, "rank 15 (tp1 cp1 dp1 pp1)"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        tb_coords k = parallel_state_coords(&cfg, cases[i].rank);
        TB_CHECK(k.tp == cases[i].c.tp && k.cp == cases[i].c.cp && k.dp == cases[i].c.dp && k.pp == cases[i].c.pp,
                 "rank %d: (tp%d cp%d dp%d pp%d)", cases[i].rank, k.tp, k.cp, k.dp, k.pp);
        char label[96];
        parallel_state_label(label, sizeof label, cases[i].rank, k);
        TB_CHECK(!strcmp(label, cases[i].label), "label \"%s\", want \"%s\"", label, cases[i].label);
    }
}

// ---------------------------------------------------------------------------------------
// Groups: worked examples

// Every listed group, seen from each of its members, is exactly the list.
static void check_groups(const char *what, const tb_config *cfg, tb_group_kind kind, const int *groups, int ngroups,
                         int size) {
    int members[64];
    for (int g = 0; g < ngroups; g++) {
        const int *want = groups + g * size;
        for (int i = 0; i < size; i++) {
            int n = parallel_state_group_members(cfg, kind, want[i], members);
            char got[512], exp[512];
            format_list(got, sizeof got, members, n);
            format_list(exp, sizeof exp, want, size);
            TB_CHECK(same_list(members, n, want, size), "%s: %s group of rank %d is %s, want %s", what,
                     tb_group_kind_name(kind), want[i], got, exp);
        }
    }
}

TB_TEST(groups_of_megatrons_16_rank_example_tp2_cp2_dp2_pp2) {
    tb_config cfg = config_of((shape){2, 2, 2, 2});
    const char *what = "tp 2 cp 2 dp 2 pp 2";
    static const int tp[8][2] = {{0, 1}, {2, 3}, {4, 5}, {6, 7}, {8, 9}, {10, 11}, {12, 13}, {14, 15}};
    static const int cp[8][2] = {{0, 2}, {1, 3}, {4, 6}, {5, 7}, {8, 10}, {9, 11}, {12, 14}, {13, 15}};
    static const int dp[8][2] = {{0, 4}, {1, 5}, {2, 6}, {3, 7}, {8, 12}, {9, 13}, {10, 14}, {11, 15}};
    static const int pp[8][2] = {{0, 8}, {1, 9}, {2, 10}, {3, 11}, {4, 12}, {5, 13}, {6, 14}, {7, 15}};
    static const int dp_cp[4][4] = {{0, 2, 4, 6}, {1, 3, 5, 7}, {8, 10, 12, 14}, {9, 11, 13, 15}};
    static const int mp[4][4] = {{0, 1, 8, 9}, {2, 3, 10, 11}, {4, 5, 12, 13}, {6, 7, 14, 15}};
    static const int world[1][16] = {{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}};
    check_groups(what, &cfg, TB_GROUP_TP, &tp[0][0], 8, 2);
    check_groups(what, &cfg, TB_GROUP_CP, &cp[0][0], 8, 2);
    check_groups(what, &cfg, TB_GROUP_DP, &dp[0][0], 8, 2);
    check_groups(what, &cfg, TB_GROUP_PP, &pp[0][0], 8, 2);
    check_groups(what, &cfg, TB_GROUP_PP_GRAD, &pp[0][0], 8, 2);
    check_groups(what, &cfg, TB_GROUP_DP_CP, &dp_cp[0][0], 4, 4);
    check_groups(what, &cfg, TB_GROUP_MP, &mp[0][0], 4, 4);
    check_groups(what, &cfg, TB_GROUP_EMBEDDING, &pp[0][0], 8, 2);  // pp 2: first and last stage = pp
    check_groups(what, &cfg, TB_GROUP_WORLD, &world[0][0], 1, 16);
}

TB_TEST(groups_of_megatrons_initialize_model_parallel_example_tp2_pp4) {
    // Megatron-LM's initialize_model_parallel docstring: 16 GPUs, tp 2, pp 4 → dp 2.
    tb_config cfg = config_of((shape){2, 1, 2, 4});
    const char *what = "tp 2 dp 2 pp 4";
    static const int tp[8][2] = {{0, 1}, {2, 3}, {4, 5}, {6, 7}, {8, 9}, {10, 11}, {12, 13}, {14, 15}};
    static const int dp[8][2] = {{0, 2}, {1, 3}, {4, 6}, {5, 7}, {8, 10}, {9, 11}, {12, 14}, {13, 15}};
    static const int pp[4][4] = {{0, 4, 8, 12}, {1, 5, 9, 13}, {2, 6, 10, 14}, {3, 7, 11, 15}};
    static const int mp[2][8] = {{0, 1, 4, 5, 8, 9, 12, 13}, {2, 3, 6, 7, 10, 11, 14, 15}};
    static const int embedding[4][2] = {{0, 12}, {1, 13}, {2, 14}, {3, 15}};
    check_groups(what, &cfg, TB_GROUP_TP, &tp[0][0], 8, 2);
    check_groups(what, &cfg, TB_GROUP_DP, &dp[0][0], 8, 2);
    check_groups(what, &cfg, TB_GROUP_DP_CP, &dp[0][0], 8, 2);  // cp 1: dp_cp = dp
    check_groups(what, &cfg, TB_GROUP_PP, &pp[0][0], 4, 4);
    check_groups(what, &cfg, TB_GROUP_PP_GRAD, &pp[0][0], 4, 4);
    check_groups(what, &cfg, TB_GROUP_MP, &mp[0][0], 2, 8);
    check_groups(what, &cfg, TB_GROUP_EMBEDDING, &embedding[0][0], 4, 2);
}

TB_TEST(embedding_groups_join_first_and_last_stage_tp2_dp4_pp4) {
    // 32 ranks: rank = tp + 2·(dp + 4·pp); a pp group steps by 8.
    tb_config cfg = config_of((shape){2, 1, 4, 4});
    static const int pp[8][4] = {{0, 8, 16, 24},  {1, 9, 17, 25},  {2, 10, 18, 26}, {3, 11, 19, 27},
                                 {4, 12, 20, 28}, {5, 13, 21, 29}, {6, 14, 22, 30}, {7, 15, 23, 31}};
    static const int embedding[8][2] = {{0, 24}, {1, 25}, {2, 26}, {3, 27}, {4, 28}, {5, 29}, {6, 30}, {7, 31}};
    static const int dp[2][4] = {{0, 2, 4, 6}, {25, 27, 29, 31}};
    static const int mp[2][8] = {{0, 1, 8, 9, 16, 17, 24, 25}, {6, 7, 14, 15, 22, 23, 30, 31}};
    check_groups("tp 2 dp 4 pp 4", &cfg, TB_GROUP_PP, &pp[0][0], 8, 4);
    check_groups("tp 2 dp 4 pp 4", &cfg, TB_GROUP_EMBEDDING, &embedding[0][0], 8, 2);
    check_groups("tp 2 dp 4 pp 4", &cfg, TB_GROUP_DP, &dp[0][0], 2, 4);
    check_groups("tp 2 dp 4 pp 4", &cfg, TB_GROUP_MP, &mp[0][0], 2, 8);
}

// ---------------------------------------------------------------------------------------
// Groups: properties over every shape

TB_TEST(each_group_is_the_ranks_agreeing_outside_its_axes_in_increasing_order) {
    int members[64], want[64];
    for (int i = 0; i < NSHAPES; i++) {
        shape s = shapes[i];
        tb_config cfg = config_of(s);
        for (int r = 0; r < world_of(s); r++) {
            tb_coords c = parallel_state_coords(&cfg, r);
            for (int k = 0; k < TB_NGROUP_KINDS; k++) {
                // Middle pipeline stages are in no embedding group (see the next test).
                if (k == TB_GROUP_EMBEDDING && !in_embedding(s, c)) continue;
                int n = parallel_state_group_members(&cfg, (tb_group_kind)k, r, members);
                int m = expected_members(s, (tb_group_kind)k, c.tp, c.cp, c.dp, c.pp, want);
                char got[512], exp[512];
                format_list(got, sizeof got, members, n);
                format_list(exp, sizeof exp, want, m);
                TB_CHECK(same_list(members, n, want, m), "tp %d cp %d dp %d pp %d: %s group of rank %d is %s, want %s",
                         s.tp, s.cp, s.dp, s.pp, tb_group_kind_name((tb_group_kind)k), r, got, exp);
            }
        }
    }
}

TB_TEST(groups_of_a_kind_partition_the_world_with_the_axis_sizes) {
    int members[64], other[64];
    for (int i = 0; i < NSHAPES; i++) {
        shape s = shapes[i];
        tb_config cfg = config_of(s);
        const int w = world_of(s);
        for (int k = 0; k < TB_NGROUP_KINDS; k++) {
            const char *kn = tb_group_kind_name((tb_group_kind)k);
            int covered[64] = {0}, groups = 0, in_groups = 0;
            for (int r = 0; r < w; r++) {
                tb_coords c = parallel_state_coords(&cfg, r);
                if (k == TB_GROUP_EMBEDDING && !in_embedding(s, c)) continue;
                in_groups++;
                int n = parallel_state_group_members(&cfg, (tb_group_kind)k, r, members);
                TB_CHECK(n == expected_size(s, (tb_group_kind)k), "tp %d cp %d dp %d pp %d: %s group of rank %d has %d "
                         "members, want %d", s.tp, s.cp, s.dp, s.pp, kn, r, n, expected_size(s, (tb_group_kind)k));
                int index = -1, sorted = 1;
                for (int j = 0; j < n; j++) {
                    if (members[j] == r) index = j;
                    if (j && members[j] <= members[j - 1]) sorted = 0;
                    if (members[j] < 0 || members[j] >= w) sorted = 0;
                }
                TB_CHECK(sorted, "tp %d cp %d dp %d pp %d: %s group of rank %d is not strictly increasing in [0, %d)",
                         s.tp, s.cp, s.dp, s.pp, kn, r, w);
                TB_CHECK(index == expected_index(s, (tb_group_kind)k, r, c),
                         "tp %d cp %d dp %d pp %d: rank %d (tp%d cp%d dp%d pp%d) is at %d in its %s group, want %d",
                         s.tp, s.cp, s.dp, s.pp, r, c.tp, c.cp, c.dp, c.pp, index, kn,
                         expected_index(s, (tb_group_kind)k, r, c));
                // Every member sees the same group: groups are classes, so they partition.
                for (int j = 0; j < n; j++) {
                    int no = parallel_state_group_members(&cfg, (tb_group_kind)k, members[j], other);
                    TB_CHECK(same_list(members, n, other, no), "tp %d cp %d dp %d pp %d: ranks %d and %d disagree on "
                             "their %s group", s.tp, s.cp, s.dp, s.pp, r, members[j], kn);
                }
                if (index == 0) {  // count each group once, at its first member
                    groups++;
                    for (int j = 0; j < n; j++) covered[members[j]]++;
                }
            }
            int total = 0, once = 1;
            for (int r = 0; r < w; r++) {
                total += covered[r];
                tb_coords c = parallel_state_coords(&cfg, r);
                int want = k == TB_GROUP_EMBEDDING && !in_embedding(s, c) ? 0 : 1;
                if (covered[r] != want) once = 0;
            }
            TB_CHECK(once && total == in_groups, "tp %d cp %d dp %d pp %d: %s groups do not cover each rank once", s.tp,
                     s.cp, s.dp, s.pp, kn);
            TB_CHECK(groups * expected_size(s, (tb_group_kind)k) == in_groups,
                     "tp %d cp %d dp %d pp %d: %d %s groups of %d for %d ranks", s.tp, s.cp, s.dp, s.pp, groups, kn,
                     expected_size(s, (tb_group_kind)k), in_groups);
        }
    }
}

// The expert grid (Megatron-Core's expert RankGenerator, order etp-ep-edp-pp) beside the
// dense one: worked examples, and every expert group the ranks agreeing outside its axes.
TB_TEST(expert_groups_follow_megatrons_expert_grid) {
    tb_config cfg;
    config_defaults(&cfg);
    // world 8, tp 2 (dense dp 4), etp 1, ep 4: ep spans the tp ranks (parallel folding)
    cfg.world_size = 8, cfg.tensor_model_parallel_size = 2, cfg.num_experts = 8, cfg.expert_model_parallel_size = 4;
    cfg.expert_tensor_parallel_size = 1;
    config_resolve(&cfg);
    static const int ep4[2][4] = {{0, 1, 2, 3}, {4, 5, 6, 7}};
    static const int edp2[4][2] = {{0, 4}, {1, 5}, {2, 6}, {3, 7}};
    static const int etp1[8][1] = {{0}, {1}, {2}, {3}, {4}, {5}, {6}, {7}};
    check_groups("world 8 tp 2 etp 1 ep 4", &cfg, TB_GROUP_EP, &ep4[0][0], 2, 4);
    check_groups("world 8 tp 2 etp 1 ep 4", &cfg, TB_GROUP_EXPERT_DP, &edp2[0][0], 4, 2);
    check_groups("world 8 tp 2 etp 1 ep 4", &cfg, TB_GROUP_ETP, &etp1[0][0], 8, 1);
    // etp = tp 2, ep 2, pp 2 over 16: expert-dp 2; the pipeline groups coincide with the dense ones
    cfg.world_size = 16, cfg.pipeline_model_parallel_size = 2, cfg.expert_model_parallel_size = 2;
    cfg.expert_tensor_parallel_size = 2;
    config_resolve(&cfg);
    static const int etp2[8][2] = {{0, 1}, {2, 3}, {4, 5}, {6, 7}, {8, 9}, {10, 11}, {12, 13}, {14, 15}};
    static const int ep2[8][2] = {{0, 2}, {1, 3}, {4, 6}, {5, 7}, {8, 10}, {9, 11}, {12, 14}, {13, 15}};
    static const int edp[8][2] = {{0, 4}, {1, 5}, {2, 6}, {3, 7}, {8, 12}, {9, 13}, {10, 14}, {11, 15}};
    check_groups("world 16 tp 2 etp 2 ep 2 pp 2", &cfg, TB_GROUP_ETP, &etp2[0][0], 8, 2);
    check_groups("world 16 tp 2 etp 2 ep 2 pp 2", &cfg, TB_GROUP_EP, &ep2[0][0], 8, 2);
    check_groups("world 16 tp 2 etp 2 ep 2 pp 2", &cfg, TB_GROUP_EXPERT_DP, &edp[0][0], 8, 2);
    for (int r = 0; r < 16; r++) {
        tb_expert_coords e = parallel_state_expert_coords(&cfg, r);
        TB_CHECK(e.pp == parallel_state_coords(&cfg, r).pp, "rank %d: expert pp %d, dense pp %d", r, e.pp,
                 parallel_state_coords(&cfg, r).pp);
        TB_CHECK(r == e.etp + 2 * (e.ep + 2 * (e.edp + 2 * e.pp)), "rank %d: etp%d ep%d edp%d pp%d", r, e.etp, e.ep,
                 e.edp, e.pp);
    }
}

TB_TEST(group_kind_names) {
    static const char *const names[TB_NGROUP_KINDS] = {"tp",    "cp",      "dp", "dp_cp", "pp",       "mp",
                                                         "embedding", "world", "pp_grad", "ep", "etp", "expert_dp"};
    for (int k = 0; k < TB_NGROUP_KINDS; k++)
        TB_CHECK(!strcmp(tb_group_kind_name((tb_group_kind)k), names[k]), "kind %d is \"%s\", want \"%s\"", k,
                 tb_group_kind_name((tb_group_kind)k), names[k]);
    TB_CHECK(!strcmp(tb_group_kind_name(TB_NGROUP_KINDS), "?"), "out of range: \"%s\"",
             tb_group_kind_name(TB_NGROUP_KINDS));
}

// ---------------------------------------------------------------------------------------
// The world

TB_TEST(world_init_gives_each_rank_its_groups_with_one_shared_object_per_group) {
    tb_config cfg;
    config_defaults(&cfg);
    cfg.tensor_model_parallel_size = 2, cfg.world_size = 4;  // tp 2 x dp 2
    snprintf(cfg.inject_stall, sizeof cfg.inject_stall, "1:2");
    config_resolve(&cfg);
    tb_error err;
    TB_REQUIRE(config_validate(&cfg, &err) == 0, "tp 2 x dp 2 is valid: \"%s\"", err.msg);
    shape s = {2, 1, 2, 1};
    tb_world w;
    TB_REQUIRE(parallel_state_world_init(&w, &cfg, &tb_local_backend, &err) == 0, "world_init: \"%s\"", err.msg);
    TB_CHECK(w.size == 4 && w.cfg == &cfg, "size %d", w.size);
    TB_CHECK(w.comm.collective_timeout_s == cfg.collective_timeout, "timeout %g", w.comm.collective_timeout_s);
    TB_CHECK(w.drills.stall_rank == 1 && w.drills.stall_step == 2, "--inject-stall 1:2 → rank %d step %lld",
             w.drills.stall_rank, (long long)w.drills.stall_step);
    static const int want_tp[4][2] = {{0, 1}, {0, 1}, {2, 3}, {2, 3}};
    static const int want_dp[4][2] = {{0, 2}, {1, 3}, {0, 2}, {1, 3}};
    for (int r = 0; r < w.size; r++) {
        tb_rank *rk = &w.ranks[r];
        TB_CHECK(rk->rank == r && rk->world_size == 4 && rk->cfg == &cfg && rk->world == &w, "rank %d's identity", r);
        TB_CHECK(rk->coords.tp == r % 2 && rk->coords.dp == r / 2 && rk->coords.cp == 0 && rk->coords.pp == 0,
                 "rank %d: (tp%d cp%d dp%d pp%d)", r, rk->coords.tp, rk->coords.cp, rk->coords.dp, rk->coords.pp);
        char label[96];
        snprintf(label, sizeof label, "rank %d (tp%d cp0 dp%d pp0)", r, r % 2, r / 2);
        TB_CHECK(!strcmp(rk->label, label), "label \"%s\", want \"%s\"", rk->label, label);
        TB_CHECK(rk->step == 0 && rk->microbatch == -1, "rank %d: step %lld, microbatch %d", r, (long long)rk->step,
                 rk->microbatch);
        TB_CHECK(same_list(rk->groups[TB_GROUP_TP].ranks, rk->groups[TB_GROUP_TP].size, want_tp[r], 2),
                 "rank %d's tp group", r);
        TB_CHECK(same_list(rk->groups[TB_GROUP_DP].ranks, rk->groups[TB_GROUP_DP].size, want_dp[r], 2),
                 "rank %d's dp group", r);
        for (int k = 0; k < TB_NGROUP_KINDS; k++) {
            const tb_group *g = &rk->groups[k];
            const char *kn = tb_group_kind_name((tb_group_kind)k);
            int want[64];
            int n = expected_members(s, (tb_group_kind)k, rk->coords.tp, rk->coords.cp, rk->coords.dp, rk->coords.pp,
                                     want);
            TB_CHECK(g->name && !strcmp(g->name, kn), "rank %d: group %d named \"%s\", want \"%s\"", r, k,
                     g->name ? g->name : "(null)", kn);
            TB_CHECK(same_list(g->ranks, g->size, want, n), "rank %d: %s group of %d ranks differs", r, kn, g->size);
            TB_CHECK(g->index == expected_index(s, (tb_group_kind)k, r, rk->coords) && g->ranks[g->index] == r,
                     "rank %d: index %d in its %s group", r, g->index, kn);
            TB_CHECK(g->backend == &tb_local_backend && g->backend_state != NULL, "rank %d: %s group's backend", r, kn);
            TB_CHECK(g->rk == rk && g->seq == 0, "rank %d: %s group's owner and sequence", r, kn);
        }
    }
    // Same group ⇔ same shared object and id, across ranks and kinds.
    for (int r1 = 0; r1 < w.size; r1++)
        for (int k1 = 0; k1 < TB_NGROUP_KINDS; k1++)
            for (int r2 = 0; r2 < w.size; r2++)
                for (int k2 = 0; k2 < TB_NGROUP_KINDS; k2++) {
                    const tb_group *a = &w.ranks[r1].groups[k1], *b = &w.ranks[r2].groups[k2];
                    int same = k1 == k2 && same_list(a->ranks, a->size, b->ranks, b->size);
                    TB_CHECK((a->backend_state == b->backend_state) == same,
                             "rank %d's %s group and rank %d's %s group: %s one object", r1, a->name, r2, b->name,
                             same ? "should share" : "should not share");
                    TB_CHECK((a->id == b->id) == same, "rank %d's %s group (id %d) and rank %d's %s group (id %d)", r1,
                             a->name, a->id, r2, b->name, b->id);
                }
    parallel_state_world_free(&w);
    TB_CHECK(w.ranks == NULL && w.local_groups == NULL && w.size == 0, "world_free clears the world");
}

TB_TEST(world_of_one_rank_has_groups_of_one) {
    tb_config cfg;
    config_defaults(&cfg);
    config_resolve(&cfg);
    tb_error err;
    tb_world w;
    TB_REQUIRE(parallel_state_world_init(&w, &cfg, &tb_local_backend, &err) == 0, "world_init: \"%s\"", err.msg);
    TB_CHECK(w.size == 1 && w.drills.stall_rank == -1, "size %d, stall rank %d", w.size, w.drills.stall_rank);
    for (int k = 0; k < TB_NGROUP_KINDS; k++) {
        const tb_group *g = &w.ranks[0].groups[k];
        TB_CHECK(g->size == 1 && g->index == 0 && g->ranks[0] == 0 && g->backend_state != NULL, "%s group",
                 tb_group_kind_name((tb_group_kind)k));
    }
    parallel_state_world_free(&w);
}

// The rank's index among the ranks on its host (its GPU: this mod the visible count): the
// rank without mpirun; under mpirun the process's local rank (OMPI_COMM_WORLD_LOCAL_RANK) times
// the ranks of a process plus the rank's index in its process, so that two processes on one
// host never take the same GPU while a second host's processes start again from 0.
TB_TEST(rank_on_host_is_the_local_index_torchrun_calls_local_rank) {
    tb_config cfg;
    config_defaults(&cfg);
    cfg.world_size = 8;
    config_resolve(&cfg);
    tb_error err;
    tb_world w;
    unsetenv("OMPI_COMM_WORLD_LOCAL_RANK");
    unsetenv("OMPI_COMM_WORLD_LOCAL_SIZE");
    TB_REQUIRE(parallel_state_world_init(&w, &cfg, &tb_local_backend, &err) == 0, "world_init: \"%s\"", err.msg);
    for (int r = 0; r < 8; r++)
        TB_CHECK(parallel_state_rank_on_host(&w.ranks[r]) == r, "one process: rank %d on host %d", r,
                 parallel_state_rank_on_host(&w.ranks[r]));
    parallel_state_world_free(&w);
    // 4 processes of 2 rank threads, 2 processes per host: process 3 is the second on its host
    TB_REQUIRE(parallel_state_world_init_process(&w, &cfg, 3, 4, &tb_local_backend, &err) == 0, "world_init_process: \"%s\"", err.msg);
    setenv("OMPI_COMM_WORLD_LOCAL_RANK", "1", 1);
    setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "2", 1);
    TB_CHECK(parallel_state_rank_on_host(&w.ranks[6]) == 2 && parallel_state_rank_on_host(&w.ranks[7]) == 3,
             "process 3, local rank 1: ranks 6, 7 on host %d, %d (expected 2, 3)",
             parallel_state_rank_on_host(&w.ranks[6]), parallel_state_rank_on_host(&w.ranks[7]));
    TB_CHECK(tb_launch_processes_on_host(4) == 2, "processes on host %d (OMPI_COMM_WORLD_LOCAL_SIZE=2)",
             tb_launch_processes_on_host(4));
    // without the local rank (or with nonsense) the process index stands in for it
    setenv("OMPI_COMM_WORLD_LOCAL_RANK", "x1", 1);
    setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "9", 1);
    TB_CHECK(parallel_state_rank_on_host(&w.ranks[7]) == 7, "nonsense local rank: rank 7 on host %d",
             parallel_state_rank_on_host(&w.ranks[7]));
    TB_CHECK(tb_launch_processes_on_host(4) == 4, "local size 9 of 4 processes: %d on the host (expected all 4)",
             tb_launch_processes_on_host(4));
    unsetenv("OMPI_COMM_WORLD_LOCAL_RANK");
    unsetenv("OMPI_COMM_WORLD_LOCAL_SIZE");
    TB_CHECK(tb_launch_processes_on_host(1) == 1, "one process: %d on the host", tb_launch_processes_on_host(1));
    parallel_state_world_free(&w);
}

// Each rank sums its rank number over its tp and dp groups and the world, and counts itself.
typedef struct sum_job {
    atomic_int calls[4];
    float tp_sum[4], dp_sum[4], world_sum[4];
} sum_job;

static void sum_ranks(tb_rank *rk, void *arg) {
    sum_job *j = arg;
    atomic_fetch_add(&j->calls[rk->rank], 1);
    float v = (float)rk->rank;
    tb_all_reduce(&rk->groups[TB_GROUP_TP], &v, 1, TB_RED_SUM);
    j->tp_sum[rk->rank] = v;
    v = (float)rk->rank;
    tb_all_reduce(&rk->groups[TB_GROUP_DP], &v, 1, TB_RED_SUM);
    j->dp_sum[rk->rank] = v;
    v = (float)rk->rank;
    tb_all_reduce(&rk->groups[TB_GROUP_WORLD], &v, 1, TB_RED_SUM);
    j->world_sum[rk->rank] = v;
}

TB_TEST(ranks_of_a_shared_group_meet_in_it) {
    tb_config cfg;
    config_defaults(&cfg);
    cfg.tensor_model_parallel_size = 2, cfg.world_size = 4;
    cfg.collective_timeout = 30;
    config_resolve(&cfg);
    tb_error err;
    tb_world w;
    TB_REQUIRE(parallel_state_world_init(&w, &cfg, &tb_local_backend, &err) == 0, "world_init: \"%s\"", err.msg);
    static sum_job j;
    memset(&j, 0, sizeof j);
    parallel_state_run_ranks(&w, sum_ranks, &j);
    static const float tp[4] = {1, 1, 5, 5}, dp[4] = {2, 4, 2, 4};
    for (int r = 0; r < 4; r++) {
        TB_CHECK(atomic_load(&j.calls[r]) == 1, "rank %d ran %d times", r, atomic_load(&j.calls[r]));
        TB_CHECK(j.tp_sum[r] == tp[r] && j.dp_sum[r] == dp[r] && j.world_sum[r] == 6,
                 "rank %d: tp sum %g (want %g), dp sum %g (want %g), world sum %g (want 6)", r, j.tp_sum[r], tp[r],
                 j.dp_sum[r], dp[r], j.world_sum[r]);
        TB_CHECK(w.ranks[r].groups[TB_GROUP_TP].seq == 1 && w.ranks[r].groups[TB_GROUP_DP].seq == 1,
                 "rank %d: one call on each group", r);
    }
    parallel_state_world_free(&w);
}

// ---------------------------------------------------------------------------------------
// The layout printout

// The layout as parallel_state_print_layout should print it, from the independent
// enumeration: a header, then per rank its label and one line per group kind (a dense
// model's: without the expert grid's).
static char *expected_layout(shape s) {
    size_t cap = 1 << 16, used = 0;
    char *buf = malloc(cap);
    if (!buf) return NULL;
    used += (size_t)snprintf(buf + used, cap - used,
                             "world %d = tp %d x cp %d x dp %d x pp %d (order tp-cp-ep-dp-pp, tp fastest)\n",
                             world_of(s), s.tp, s.cp, s.dp, s.pp);
    int r = 0, members[64];
    for (int p = 0; p < s.pp; p++)
        for (int d = 0; d < s.dp; d++)
            for (int c = 0; c < s.cp; c++)
                for (int t = 0; t < s.tp; t++, r++) {
                    used += (size_t)snprintf(buf + used, cap - used, "rank %d (tp%d cp%d dp%d pp%d)\n", r, t, c, d, p);
                    for (int k = 0; k < TB_GROUP_EP; k++) {
                        if (k == TB_GROUP_EMBEDDING && !(p == 0 || p == s.pp - 1)) {
                            // Middle stages: print what the engine prints today (see the report
                            // of the embedding test); the layout check skips these lines.
                            used += (size_t)snprintf(buf + used, cap - used, "  embedding ?\n");
                            continue;
                        }
                        int n = expected_members(s, (tb_group_kind)k, t, c, d, p, members);
                        char list[512];
                        format_list(list, sizeof list, members, n);
                        used += (size_t)snprintf(buf + used, cap - used, "  %-9s %s\n",
                                                 tb_group_kind_name((tb_group_kind)k), list);
                    }
                }
    return buf;
}

// Compares line by line; a line "  embedding ?" in `want` matches any embedding line.
static void check_layout(const char *what, const char *got, const char *want) {
    int line = 1;
    while (*got || *want) {
        const char *ge = strchr(got, '\n'), *we = strchr(want, '\n');
        size_t gl = ge ? (size_t)(ge - got) : strlen(got), wl = we ? (size_t)(we - want) : strlen(want);
        int wild = wl == strlen("  embedding ?") && !strncmp(want, "  embedding ?", wl);
        int ok = wild ? !strncmp(got, "  embedding [", strlen("  embedding [")) : gl == wl && !strncmp(got, want, wl);
        if (!ok) {
            TB_CHECK(0, "%s: line %d is \"%.*s\", want \"%.*s\"", what, line, (int)gl, got, (int)wl, want);
            return;
        }
        got += gl + (ge ? 1 : 0);
        want += wl + (we ? 1 : 0);
        line++;
    }
}

TB_TEST(print_layout_lists_every_rank_and_its_groups) {
    static const shape printed[] = {{2, 1, 4, 1}, {2, 2, 2, 2}, {1, 1, 1, 1}, {2, 1, 2, 4}};
    for (size_t i = 0; i < sizeof printed / sizeof printed[0]; i++) {
        shape s = printed[i];
        tb_config cfg = config_of(s);
        char path[512];
        tb_tmp_path(path, sizeof path, "layout.txt");
        FILE *f = fopen(path, "w");
        TB_REQUIRE(f != NULL, "tmpfile");
        parallel_state_print_layout(f, &cfg);
        fclose(f);
        char *got = tb_slurp(path);
        remove(path);
        char *want = expected_layout(s);
        TB_REQUIRE(got && want, "buffers");
        char what[64];
        snprintf(what, sizeof what, "tp %d cp %d dp %d pp %d", s.tp, s.cp, s.dp, s.pp);
        check_layout(what, got, want);
        free(got);
        free(want);
    }
}

// ---------------------------------------------------------------------------------------
// The pretrain_gpt binary

#define PRETRAIN TB_BIN_DIR "/pretrain_gpt"

TB_TEST(print_rank_layout_prints_and_exits_0_without_training) {
    char run_dir[512];
    tb_tmp_path(run_dir, sizeof run_dir, "layout-run");
    tb_output sh = {0};
    int status = tb_run(
        &sh, NULL, "'" PRETRAIN "' --print-rank-layout --world-size 8 --tensor-model-parallel-size 2 --run-dir '%s'",
        run_dir);
    TB_REQUIRE(sh.out && sh.err, "captured output");
    TB_CHECK(status == 0, "exit status %d; stderr: %s", status, sh.err);
    TB_CHECK(access(run_dir, F_OK) != 0, "no run directory: %s exists", run_dir);
    TB_CHECK(strstr(sh.out, "world 8 = tp 2 x cp 1 x dp 4 x pp 1 (order tp-cp-ep-dp-pp, tp fastest)\n") == sh.out,
             "header: %.200s", sh.out);
    TB_CHECK(strstr(sh.out,
                    "\nrank 5 (tp1 cp0 dp2 pp0)\n  tp        [4, 5]\n  cp        [5]\n  dp        [1, 3, 5, 7]\n"
                    "  dp_cp     [1, 3, 5, 7]\n  pp        [5]\n  mp        [4, 5]\n  embedding [5]\n"
                    "  world     [0, 1, 2, 3, 4, 5, 6, 7]\n  pp_grad   [5]\n") != NULL,
             "rank 5's block: %s", sh.out);
    char *want = expected_layout((shape){2, 1, 4, 1});
    TB_REQUIRE(want != NULL, "buffer");
    TB_CHECK(!strcmp(sh.out, want), "the whole printout differs:\n%s\nwant:\n%s", sh.out, want);
    TB_CHECK(strstr(sh.out, "step") == NULL && strstr(sh.out, "run dir") == NULL, "no training output: %s", sh.out);
    free(want);
    tb_output_free(&sh);
}

TB_TEST(print_rank_layout_of_a_pipeline_layout) {
    char run_dir[512];
    tb_tmp_path(run_dir, sizeof run_dir, "pp-layout-run");
    tb_output sh = {0};
    int status =
        tb_run(&sh, NULL,
               "'" PRETRAIN
               "' --print-rank-layout --world-size 16 --tensor-model-parallel-size 2 --pipeline-model-parallel-size 4 "
               "--micro-batch-size 1 --global-batch-size 8 --run-dir '%s'",
               run_dir);
    TB_REQUIRE(sh.out && sh.err, "captured output");
    TB_CHECK(status == 0, "exit status %d; stderr: %s", status, sh.err);
    TB_CHECK(access(run_dir, F_OK) != 0, "no run directory: %s exists", run_dir);
    char *want = expected_layout((shape){2, 1, 2, 4});
    TB_REQUIRE(want != NULL, "buffer");
    check_layout("pretrain_gpt tp 2 dp 2 pp 4", sh.out, want);
    TB_CHECK(strstr(sh.out,
                    "\nrank 13 (tp1 cp0 dp0 pp3)\n  tp        [12, 13]\n  cp        [13]\n  dp        [13, 15]\n"
                    "  dp_cp     [13, 15]\n  pp        [1, 5, 9, 13]\n  mp        [0, 1, 4, 5, 8, 9, 12, 13]\n"
                    "  embedding [1, 13]\n") != NULL,
             "rank 13's block: %s", sh.out);
    free(want);
    tb_output_free(&sh);
}

TB_TEST(print_rank_layout_of_an_invalid_layout_exits_2_naming_the_rule) {
    char run_dir[512];
    tb_tmp_path(run_dir, sizeof run_dir, "bad-layout-run");
    tb_output sh = {0};
    int status = tb_run(
        &sh, NULL, "'" PRETRAIN "' --print-rank-layout --world-size 6 --tensor-model-parallel-size 4 --run-dir '%s'",
        run_dir);
    TB_REQUIRE(sh.out && sh.err, "captured output");
    TB_CHECK(status == 2, "exit status %d", status);
    TB_CHECK(strstr(sh.err, "invalid configuration") != NULL &&
                 strstr(sh.err,
                        "world_size (6) must be divisible by tensor_model_parallel_size x context_parallel_size x "
                        "pipeline_model_parallel_size (4 x 1 x 1 = 4)") != NULL,
             "stderr: %s", sh.err);
    TB_CHECK(sh.out[0] == '\0', "nothing printed on stdout: %s", sh.out);
    TB_CHECK(access(run_dir, F_OK) != 0, "no run directory: %s exists", run_dir);
    tb_output_free(&sh);
}

int main(void) {
    TB_RUN(resolve_derives_dp_from_the_world_for_every_shape);
    TB_RUN(coordinates_follow_tp_cp_ep_dp_pp_order_with_tp_fastest);
    TB_RUN(coordinates_of_megatrons_16_rank_example);

    TB_RUN(groups_of_megatrons_16_rank_example_tp2_cp2_dp2_pp2);
    TB_RUN(groups_of_megatrons_initialize_model_parallel_example_tp2_pp4);
    TB_RUN(embedding_groups_join_first_and_last_stage_tp2_dp4_pp4);
    TB_RUN(each_group_is_the_ranks_agreeing_outside_its_axes_in_increasing_order);
    TB_RUN(groups_of_a_kind_partition_the_world_with_the_axis_sizes);
    TB_RUN(expert_groups_follow_megatrons_expert_grid);
    TB_RUN(group_kind_names);

    TB_RUN(world_init_gives_each_rank_its_groups_with_one_shared_object_per_group);
    TB_RUN(world_of_one_rank_has_groups_of_one);
    TB_RUN(rank_on_host_is_the_local_index_torchrun_calls_local_rank);
    TB_RUN(ranks_of_a_shared_group_meet_in_it);

    TB_RUN(print_layout_lists_every_rank_and_its_groups);
    TB_RUN(print_rank_layout_prints_and_exits_0_without_training);
    TB_RUN(print_rank_layout_of_a_pipeline_layout);
    TB_RUN(print_rank_layout_of_an_invalid_layout_exits_2_naming_the_rule);
    return tb_test_summary();
}
