// The communicator on the local backend, what its calls leave behind: every call is recorded
// in the flight recorder and as a "comm.<group>.<op>" trace range with its figures, and a call
// whose peer never comes ends the run with a hang report (hang.json, a stderr summary, exit
// status 4) after the collective timeout, not never. The results of the calls are
// test_comm.c's.
#include <float.h>
#include <jansson.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "comm/flight_recorder.h"
#include "core/failure_report.h"
#include "comm_world.h"
#include "tb_run_dir.h"
#include "tb_shell.h"

#define PRETRAIN TB_BIN_DIR "/pretrain_gpt"

// ---------------------------------------------------------------------------------------
// 1. recording: flight recorder and trace ranges

typedef struct expect_call {
    const char *group;
    tb_group_kind kind;
    uint64_t seq;
    tb_comm_op op;
    size_t count;
    int peer;        // -2 / -3: depends on the rank (send/recv on tp / dp_cp); see peer_of
    int microbatch;  // the entry's (the rank's is 1)
} expect_call;

// The calls every rank of a world of 4, tp 2, makes in record_rank, in order.
// The last four are one tb_batch_send_recv on two groups (local backend: op by op, sends
// first), the first of them naming its own microbatch.
static const expect_call recorded[] = {
    {"world", TB_GROUP_WORLD, 1, TB_COMM_ALL_REDUCE, 10, -1, 1},
    {"tp", TB_GROUP_TP, 1, TB_COMM_ALL_REDUCE, 3, -1, 1},
    {"world", TB_GROUP_WORLD, 2, TB_COMM_BARRIER, 0, -1, 1},
    {"world", TB_GROUP_WORLD, 3, TB_COMM_ALL_REDUCE, 7, -1, 1},
    {"tp", TB_GROUP_TP, 2, TB_COMM_BROADCAST, 5, 1, 1},
    {"tp", TB_GROUP_TP, 3, TB_COMM_SEND, 4, -2, 1},
    {"tp", TB_GROUP_TP, 4, TB_COMM_RECV, 4, -2, 1},
    {"dp_cp", TB_GROUP_DP_CP, 1, TB_COMM_ALL_GATHER, 4, -1, 1},     // 2 per member x 2
    {"dp_cp", TB_GROUP_DP_CP, 2, TB_COMM_REDUCE_SCATTER, 6, -1, 1}, // 3 per member x 2
    {"world", TB_GROUP_WORLD, 4, TB_COMM_ALL_TO_ALL, 4, -1, 1},     // 1 to each of 4
    {"tp", TB_GROUP_TP, 5, TB_COMM_SEND, 4, -2, 3},
    {"dp_cp", TB_GROUP_DP_CP, 3, TB_COMM_SEND, 2, -3, 1},
    {"tp", TB_GROUP_TP, 6, TB_COMM_RECV, 4, -2, 1},
    {"dp_cp", TB_GROUP_DP_CP, 4, TB_COMM_RECV, 2, -3, 1},
};
#define NRECORDED ((int)(sizeof recorded / sizeof *recorded))

static void trace_path(char *buf, size_t len, int rank) {
    snprintf(buf, len, "%s/comm_trace.rank-%d.json", TB_TEST_TMPDIR, rank);
}

static void record_rank(tb_rank *rk, void *arg) {
    (void)arg;
    tb_ranges_init(rk->ranges, rk->rank, rk->world_size, rk->label, rk->world->origin_ns, 1);
    tb_ranges_bind(rk->ranges);
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
    const int tpeer = (tp->index + 1) % 2, dpeer = (dp->index + 1) % 2;
    const tb_p2p_op batch[] = {{TB_COMM_SEND, tp, buf, 4, tpeer, 3},
                               {TB_COMM_SEND, dp, buf + 4, 2, dpeer, -1},
                               {TB_COMM_RECV, tp, out, 4, tpeer, -1},
                               {TB_COMM_RECV, dp, out + 4, 2, dpeer, -1}};
    tb_batch_send_recv(batch, 4);
    TB_RANGE_POP();
    char path[512];
    trace_path(path, sizeof path, rk->rank);
    tb_error err;
    RK_CHECK(tb_ranges_write_chrome(rk->ranges, path, &err) == 0, "%s: %s", rk->label, err.msg);
    tb_ranges_bind(NULL);
    tb_ranges_free(rk->ranges);
}

static int peer_of(const expect_call *e, const tb_rank *rk) {
    return e->peer == -2   ? (rk->groups[TB_GROUP_TP].index + 1) % 2
           : e->peer == -3 ? (rk->groups[TB_GROUP_DP_CP].index + 1) % 2
                           : e->peer;
}

TB_TEST(flight_recorder_holds_each_call_with_per_group_sequence_numbers) {
    world W;
    if (world_up(&W, 4, 2, 20) != 0) return;
    parallel_state_run_ranks(&W.w, record_rank, NULL);
    for (int r = 0; r < 4; r++) {
        tb_rank *rk = &W.w.ranks[r];
        tb_flight_entry tail[TB_FLIGHT_RECORDER_LEN];
        int n = tb_flight_recorder_tail(rk->fr, tail, TB_FLIGHT_RECORDER_LEN);
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
            TB_CHECK(e->step == 5 && e->microbatch == x->microbatch,
                     "%s entry %d: step %lld microbatch %d, expected 5 and %d", rk->label, i, (long long)e->step,
                     e->microbatch, x->microbatch);
        }
        TB_CHECK(rk->groups[TB_GROUP_WORLD].seq == 4 && rk->groups[TB_GROUP_TP].seq == 6 &&
                     rk->groups[TB_GROUP_DP_CP].seq == 4 && rk->groups[TB_GROUP_PP].seq == 0,
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
        int n = tb_flight_recorder_tail(W.w.ranks[r].fr, tail, TB_FLIGHT_RECORDER_LEN);
        TB_CHECK(n == TB_FLIGHT_RECORDER_LEN, "rank %d: %d entries", r, n);
        for (int i = 0; i < n; i++)
            if (tail[i].seq != (uint64_t)(7 + i) || tail[i].exit_ns < tail[i].enter_ns) {
                TB_CHECK(0, "rank %d: tail entry %d has seq %llu, expected %d (oldest first)", r, i,
                         (unsigned long long)tail[i].seq, 7 + i);
                break;
            }
        tb_flight_entry last;
        TB_CHECK(tb_flight_recorder_tail(W.w.ranks[r].fr, &last, 1) == 1 && last.seq == 70,
                 "rank %d: the newest entry is seq 70", r);
    }
    world_down(&W);
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
// 2. hangs: a call whose peer never comes ends the run after the timeout with a report

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
    const char *cause = hang ? strstr(hang, "root cause:\n    rank 3 (tp1 cp0 dp1 pp0): never entered ") : NULL;
    TB_CHECK(cause != NULL, "the stderr summary names the stalled rank as the root cause by its coordinates:\n%s",
             sh.err);
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

    // whichever rank's watchdog fired, the root cause is the stalled rank
    json_t *root = json_object_get(h, "root_cause");
    json_t *a3 = json_array_size(root) == 1 && jint(json_array_get(root, 0), "rank") == 3 ? json_array_get(root, 0) : NULL;
    size_t i;
    TB_CHECK(a3 != NULL && !strcmp(jstr(a3, "kind"), "absent"), "root_cause is rank 3 alone, absent (timed out on %s)",
             jstr(to, "group"));
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
        TB_CHECK(array_has_int(json_object_get(a3, "group_members"), 3), "the group rank 3 never entered holds it");
    }

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
    TB_CHECK(jint(h, "reported_ranks") == 4 && json_array_size(json_object_get(h, "absent_ranks")) == 0,
             "one process: every rank's part merged, none absent");
    json_decref(h);

    // one part per rank, merged again by tracebook hang into the same report
    for (int r = 0; r < 4; r++) {
        char part[256];
        snprintf(part, sizeof part, HANG_DIR "/hang.rank-%05d.json", r);
        json_t *p = tb_load_json(part);
        TB_CHECK(p && jint(p, "rank") == r && !strcmp(jstr(p, "reason"), "timeout") &&
                     json_is_object(json_object_get(p, "groups")),
                 "%s: rank %d's part, reason timeout, its groups", part, r);
        json_decref(p);
    }
    rc = tb_run(&sh, NULL, "%s/tracebook hang %s --json", TB_BIN_DIR, HANG_DIR);
    json_t *merged = json_loads(sh.out, 0, NULL);
    TB_CHECK(rc == 0 && merged && jint(merged, "reported_ranks") == 4 &&
                 json_array_size(json_object_get(merged, "ranks")) == 4,
             "tracebook hang --json: exit %d\n%s%s", rc, sh.out, sh.err);
    json_decref(merged);
    rc = tb_run(&sh, NULL, "%s/tracebook hang %s", TB_BIN_DIR, HANG_DIR);
    TB_CHECK(rc == 0 && strstr(sh.out, "absent from this call:") && strstr(sh.out, "rank 3 (tp1 cp0 dp1 pp0)") &&
                 strstr(sh.out, "reports from 4 of 4 ranks"),
             "tracebook hang: exit %d\n%s%s", rc, sh.out, sh.err);
    // a part cut short: named with its parse error, and --write keeps the 4-of-4 report rather
    // than one that calls rank 1 absent
    char *report = tb_slurp(HANG_DIR "/" TB_RUN_HANG_REPORT);
    size_t len = 0;
    char *part = tb_slurp_len(HANG_DIR "/hang.rank-00001.json", &len);
    TB_REQUIRE(report && part && len > 200, "the report and rank 1's part");
    tb_write_bytes(HANG_DIR "/hang.rank-00001.json", part, 200);
    rc = tb_run(&sh, NULL, "%s/tracebook hang %s --write", TB_BIN_DIR, HANG_DIR);
    char *after = tb_slurp(HANG_DIR "/" TB_RUN_HANG_REPORT);
    TB_CHECK(rc == 1 && strstr(sh.err, "/hang.rank-00001.json: line ") &&
                 strstr(sh.err, "--write: 1 part(s) cannot be read (above): the merge would report their ranks as "
                                "absent") &&
                 after && !strcmp(after, report),
             "a cut part: exit %d, the report kept\n%s%s", rc, sh.out, sh.err);
    tb_write_bytes(HANG_DIR "/hang.rank-00001.json", part, len);
    free(after);
    // rank 0's part without its "rank": not taken for rank 0's (a missing integer read as 0)
    json_t *p0 = tb_load_json(HANG_DIR "/hang.rank-00000.json");
    char *part0 = tb_slurp_len(HANG_DIR "/hang.rank-00000.json", &len);
    TB_REQUIRE(p0 && part0 && json_object_del(p0, "rank") == 0 &&
                   json_dump_file(p0, HANG_DIR "/hang.rank-00000.json", 0) == 0,
               "rank 0's part rewritten without its rank");
    rc = tb_run(&sh, NULL, "%s/tracebook hang %s --write", TB_BIN_DIR, HANG_DIR);
    after = tb_slurp(HANG_DIR "/" TB_RUN_HANG_REPORT);
    TB_CHECK(rc == 1 && strstr(sh.err, "/hang.rank-00000.json: not rank 0's part") &&
                 strstr(sh.err, "--write: 1 part(s) cannot be read") && after && !strcmp(after, report),
             "a part without its rank: exit %d, the report kept\n%s%s", rc, sh.out, sh.err);
    tb_write_bytes(HANG_DIR "/hang.rank-00000.json", part0, len);
    json_decref(p0);
    free(part0);
    free(report);
    free(part);
    free(after);
}

TB_TEST(same_run_without_a_stall_exits_0_without_a_hang_report) {
    int rc =
        tb_run(&sh, NULL, "rm -rf %s && timeout 60 %s" HANG_SHAPE " --run-dir %s", NOHANG_DIR, PRETRAIN, NOHANG_DIR);
    TB_CHECK(rc == 0, "pretrain_gpt exits %d:\n%s", rc, sh.err);
    TB_CHECK(!tb_exists(NOHANG_DIR "/" TB_RUN_HANG_REPORT), "no hang.json without a hang");
    rc = tb_run(&sh, NULL, "%s/tracebook hang %s", TB_BIN_DIR, NOHANG_DIR);
    TB_CHECK(rc == 1 && strstr(sh.err, "no hang.rank-NNNNN.json to merge"), "tracebook hang without parts: exit %d\n%s",
             rc, sh.err);
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
    double t0 = now_s();
    pid_t pid = world_in_child(RECV_HANG_DIR, 2, 1, 0.5, lonely_recv_rank, NULL);  // the timeout ends it
    TB_REQUIRE(pid >= 0, "fork");
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

// A timeout of any size the flag takes means "wait that long": a rank that comes late is
// waited for, never reported as a hang because the deadline overflowed.
static void late_peer_rank(tb_rank *rk, void *arg) {
    (void)arg;
    tb_group *g = &rk->groups[TB_GROUP_WORLD];
    float x[4] = {1, 2, 3, 4};
    if (rk->rank == 1) usleep(300000);
    tb_barrier(g);
    if (rk->rank == 1) {
        usleep(300000);
        tb_send(g, x, 4, 0);
    } else {
        tb_recv(g, x, 4, 1);
    }
}

static int late_peer_world(void *arg, char *out, size_t len) {
    double timeout = *(const double *)arg;
    (void)out, (void)len;  // what went wrong is on stderr.txt
    if (!freopen(RECV_HANG_DIR "/stderr.txt", "w", stderr)) return 99;
    world W;
    if (world_up(&W, 2, 1, timeout) != 0) return 98;
    snprintf(W.w.run_dir, sizeof W.w.run_dir, "%s", RECV_HANG_DIR);
    parallel_state_run_ranks(&W.w, late_peer_rank, NULL);  // a hang report ends the process with 4
    world_down(&W);
    return 0;
}

TB_TEST(a_huge_collective_timeout_waits_for_a_late_peer_instead_of_reporting_a_hang) {
    static const double timeouts[] = {1e19, 9.3e18, 1e300, DBL_MAX, 300};
    for (size_t i = 0; i < sizeof timeouts / sizeof timeouts[0]; i++) {
        TB_REQUIRE(system("rm -rf " RECV_HANG_DIR " && mkdir -p " RECV_HANG_DIR) == 0, "mkdir");
        char msg[256];
        double t0 = now_s();
        int rc = tb_call_bounded(late_peer_world, (void *)&timeouts[i], 20, msg, sizeof msg);
        static char err_text[1 << 16];
        tb_slurp_into(RECV_HANG_DIR "/stderr.txt", err_text, sizeof err_text);
        TB_CHECK(rc == 0, "timeout %g s: exit %d after %.2f s (4: a hang reported; 142: still waiting after 20 s): %s",
                 timeouts[i], rc, now_s() - t0, err_text);
        TB_CHECK(!tb_exists(RECV_HANG_DIR "/" TB_RUN_HANG_REPORT), "timeout %g s: hang.json written", timeouts[i]);
    }
}

// The hang drills (issue's tp, dp, pp, tp x pp, tp x dp x pp layouts, a rank stalled at step
// 2): whichever rank's watchdog fires first, the root cause is the stalled rank, every time.
// TB_HANG_REPEATS sets the repeats (default 6; the drill's acceptance ran 20).
TB_TEST(the_root_cause_of_each_hang_drill_is_the_stalled_rank_every_time) {
    static const struct {
        const char *layout;
        int stalled;
    } drills[] = {
        {"--world-size 2 --tensor-model-parallel-size 2", 1},
        {"--world-size 2", 0},
        {"--world-size 2 --pipeline-model-parallel-size 2", 1},
        {"--world-size 4 --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2", 1},
        {"--world-size 8 --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2", 5},
    };
    const char *env = getenv("TB_HANG_REPEATS");
    const int repeats = env && atoi(env) > 0 ? atoi(env) : 6;
    for (size_t d = 0; d < sizeof drills / sizeof *drills; d++) {
        int right = 0;
        char last_wrong[256] = "";
        for (int k = 0; k < repeats; k++) {
            int rc = tb_run(&sh, NULL,
                            "rm -rf %s_drill && timeout 60 %s --num-layers 2 --hidden-size 32 --num-attention-heads 2"
                            " --seq-length 16 --vocab-size 64 --micro-batch-size 1 --global-batch-size 8"
                            " --train-iters 3 --collective-timeout 1 --inject-stall %d:2 %s --run-dir %s_drill",
                            HANG_DIR, PRETRAIN, drills[d].stalled, drills[d].layout, HANG_DIR);
            json_t *h = rc == 4 ? tb_load_json(HANG_DIR "_drill/" TB_RUN_HANG_REPORT) : NULL;
            json_t *root = json_object_get(h, "root_cause");
            long long who = json_array_size(root) == 1 ? jint(json_array_get(root, 0), "rank") : -1;
            if (who == drills[d].stalled) right++;
            else snprintf(last_wrong, sizeof last_wrong, "exit %d, %zu root causes, first rank %lld", rc,
                          json_array_size(root), who);
            json_decref(h);
        }
        printf("    %-72s stalled rank %d: named %d of %d times\n", drills[d].layout, drills[d].stalled, right,
               repeats);
        TB_CHECK(right == repeats, "%s: the root cause was rank %d in %d of %d repeats (last other: %s)",
                 drills[d].layout, drills[d].stalled, right, repeats, last_wrong);
    }
}

// Context parallelism's ring on the flight recorder: cp rank 1 stalls at step 2, so rank 0's
// first receive of the ring (the K/V chunk pair of layer 0, from its previous cp rank) waits
// on group cp and times out; the hang report names the wait by group, op and peer with the
// message's size (B x T/cp x 2 x hidden floats), and rank 1 as the root cause in the ring's range.
TB_TEST(a_stalled_ring_rank_is_named_in_the_peers_recv_on_group_cp) {
    int rc = tb_run(&sh, NULL,
                    "rm -rf %s_ring && timeout 60 %s --num-layers 2 --hidden-size 32 --num-attention-heads 2"
                    " --seq-length 16 --vocab-size 64 --micro-batch-size 1 --global-batch-size 2 --train-iters 3"
                    " --collective-timeout 1 --world-size 2 --context-parallel-size 2 --cp-comm-type p2p"
                    " --attention-backend flash --inject-stall 1:2 --run-dir %s_ring",
                    HANG_DIR, PRETRAIN, HANG_DIR);
    TB_CHECK(rc == 4, "a stalled ring rank: exit %d, expected 4\n%s", rc, sh.err);
    TB_CHECK(strstr(sh.err, "HANG: recv on group cp (2 ranks) not complete after 1.0 s"), "stderr:\n%s", sh.err);
    json_t *h = tb_load_json(HANG_DIR "_ring/" TB_RUN_HANG_REPORT);
    TB_REQUIRE(h != NULL, "no hang.json");
    json_t *to = json_object_get(h, "timed_out");
    TB_CHECK(!strcmp(jstr(to, "group"), "cp") && !strcmp(jstr(to, "op"), "recv") && jint(to, "detected_by") == 0,
             "timed out: %s %s detected by %lld", jstr(to, "group"), jstr(to, "op"), jint(to, "detected_by"));
    json_t *pending = json_object_get(json_array_get(json_object_get(h, "ranks"), 0), "pending");
    TB_CHECK(!strcmp(jstr(pending, "group"), "cp") && !strcmp(jstr(pending, "op"), "recv") &&
                 jint(pending, "peer") == 1 && jint(pending, "count") == 1 * 8 * 2 * 32,
             "rank 0 waits in recv on cp from 1 of 512 floats: %s %s peer %lld count %lld", jstr(pending, "group"),
             jstr(pending, "op"), jint(pending, "peer"), jint(pending, "count"));
    json_t *root = json_object_get(h, "root_cause");
    json_t *r1 = json_array_size(root) == 1 ? json_array_get(root, 0) : NULL;
    TB_CHECK(r1 && jint(r1, "rank") == 1 && !strcmp(jstr(r1, "kind"), "absent") && !strcmp(jstr(r1, "group"), "cp") &&
                 strstr(jstr(r1, "phase"), "layer.0.attention.core > cp.ring."),
             "root cause rank 1, absent from group cp, in the ring's range: %s", r1 ? jstr(r1, "phase") : "(none)");
    json_decref(h);
}

// Parts are written at different moments (each process when its watchdog fires or mpirun
// terminates it), so a snapshot can be stale. Three dp ranks, rank 2 stalled: rank 0 was seen
// waiting in seq 4, which ranks 1 and 2 have since completed (rank 1 now waits in seq 5, rank 2
// computes). Only rank 2 is the root cause: neither rank 1 (further on) nor rank 0 (seen
// before seq 4 completed) is, and rank 2's own completion of seq 4 is no reason to blame it
// from rank 0's stale view — it is blamed from rank 1's. A same-seq call of another count is a
// mismatch.
static json_t *synthetic_part(int rank, json_t *pending, json_t *tail) {
    json_t *p = json_pack("{s:i, s:s, s:{s:i, s:i, s:i, s:i, s:i, s:i}, s:{s:{s:i, s:[i, i, i]}}, s:o, s:o, s:I, "
                          "s:i, s:n, s:f}",
                          "rank", rank, "rank_label", rank == 0 ? "rank 0" : rank == 1 ? "rank 1" : "rank 2", "world",
                          "size", 3, "tp", 1, "cp", 1, "dp", 3, "pp", 1, "ranks_per_process", 1, "groups", "dp",
                          "group_id", 7, "members", 0, 1, 2, "pending", pending ? pending : json_null(),
                          "flight_recorder_tail", tail, "step", (json_int_t)2, "microbatch", 0, "timed_out",
                          "written_at", 1000.0 + rank);
    return p;
}
static json_t *call(int seq, int count, int done) {
    json_t *c = json_pack("{s:i, s:i, s:s, s:i, s:i, s:I}", "group_id", 7, "seq", seq, "op", "all_reduce", "count",
                          count, "peer", -1, "step", (json_int_t)2);
    if (done) json_object_set_new(c, "duration_ms", json_real(0.1));
    return c;
}
static long long only_root_cause(json_t *parts, const char **kind) {
    json_t *h = tb_hang_report_merge(parts);
    json_t *root = json_object_get(h, "root_cause");
    long long who = json_array_size(root) == 1 ? jint(json_array_get(root, 0), "rank") : -(long long)json_array_size(root) - 1;
    static char k[32];
    snprintf(k, sizeof k, "%s", json_array_size(root) == 1 ? jstr(json_array_get(root, 0), "kind") : "?");
    *kind = k;
    json_decref(h);
    return who;
}
TB_TEST(stale_snapshots_blame_no_rank_that_got_past_the_call) {
    json_t *parts = json_pack("[o, o, o]", synthetic_part(0, call(4, 8, 0), json_pack("[o, o]", call(3, 8, 1), call(4, 8, 0))),
                              synthetic_part(1, call(5, 8, 0), json_pack("[o, o]", call(4, 8, 1), call(5, 8, 0))),
                              synthetic_part(2, NULL, json_pack("[o]", call(4, 8, 1))));
    const char *kind;
    long long who = only_root_cause(parts, &kind);
    TB_CHECK(who == 2 && !strcmp(kind, "absent"), "the root cause is rank 2, absent (got %lld, %s)", who, kind);
    json_decref(parts);
    // the same seq with another count: a mismatch, blamed on the odd one
    parts = json_pack("[o, o, o]", synthetic_part(0, call(5, 8, 0), json_array()),
                      synthetic_part(1, call(5, 8, 0), json_array()), synthetic_part(2, call(5, 16, 0), json_array()));
    who = only_root_cause(parts, &kind);
    TB_CHECK(who == 2 && !strcmp(kind, "mismatch"), "a count mismatch at seq 5 blames rank 2 (got %lld, %s)", who, kind);
    json_decref(parts);
}

int main(void) {
    double t0 = now_s();
    TB_RUN(flight_recorder_holds_each_call_with_per_group_sequence_numbers);
    TB_RUN(flight_recorder_keeps_the_newest_calls_when_it_wraps);
    TB_RUN(trace_has_comm_ranges_with_group_op_dtype_count_bytes_seq_and_rank);
    TB_RUN(stalled_rank_ends_the_run_with_a_hang_report_after_the_timeout);
    TB_RUN(same_run_without_a_stall_exits_0_without_a_hang_report);
    TB_RUN(recv_without_a_sender_returns_after_the_timeout_with_a_hang_report);
    TB_RUN(a_huge_collective_timeout_waits_for_a_late_peer_instead_of_reporting_a_hang);
    TB_RUN(the_root_cause_of_each_hang_drill_is_the_stalled_rank_every_time);
    TB_RUN(stale_snapshots_blame_no_rank_that_got_past_the_call);
    TB_RUN(a_stalled_ring_rank_is_named_in_the_peers_recv_on_group_cp);
    printf("(%.1f s)\n", now_s() - t0);
    return tb_test_summary();
}
