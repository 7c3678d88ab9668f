// test_comm_batch.c — tb_batch_send_recv's recording on a backend that issues a batch
// together (NCCL's path through comm.c), on the CPU: a stand-in backend is the local one plus
// a batch_send_recv of its own (the local sends, then the local recvs, in list order), so that
// comm.c takes the batched path, not the op-by-op one the local backend gets. Asserted:
//   - each op of the batch is recorded as its single call would be: a range
//     comm.<group>.send|recv with the peer, bytes and the group's next sequence number, the
//     ranges nested in list order under the caller's; a flight-recorder entry per op, naming
//     the op's microbatch when it gives one, every entry open until the whole batch is done;
//   - a batch that times out ends the run with a hang report on the last op's group: the
//     timed-out call is that recv, the rank is pending in it, and its flight-recorder tail
//     shows the batch's other ops pending too.
// What the batch moves on the local backend, and its op-by-op records, are test_comm.c's and
// test_comm_records.c's; on NCCL, test_nccl.c's.
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "comm/flight_recorder.h"
#include "comm/local_backend.h"
#include "comm_world.h"
#include "tb_run_dir.h"
#include "tb_shell.h"

// --- the stand-in: the local backend, with a batch issued "together" ------------------

static int timeout_rank = -1;  // this rank's batch fails as a timeout would

static int standin_batch(const tb_p2p_op *ops, int n, int *timed_out, tb_error *err) {
    if (ops[0].g->rk->rank == timeout_rank) {
        *timed_out = 1;
        return tb_fail(err, "batch_send_recv on groups %s, %s not complete after 0.5 s (stand-in)", ops[0].g->name,
                       ops[n - 1].g->name);
    }
    for (int i = 0; i < n; i++) {
        tb_group *g = ops[i].g;
        int rc = ops[i].op == TB_COMM_SEND ? tb_local_backend.send(g, ops[i].buf, ops[i].count, ops[i].peer, timed_out, err)
                                           : tb_local_backend.recv(g, ops[i].buf, ops[i].count, ops[i].peer, timed_out, err);
        if (rc != 0) return rc;
    }
    return 0;
}

static tb_comm_backend standin;

static void use_standin(tb_rank *rk) {
    for (int k = 0; k < TB_NGROUP_KINDS; k++) rk->groups[k].backend = &standin;
}

// The batch every rank of a world of 2 (tp 2) makes: both ways with its one peer, on tp and world.
static void batch_rank(tb_rank *rk, void *arg) {
    (void)arg;
    use_standin(rk);
    tb_ranges_init(rk->ranges, rk->rank, rk->world_size, rk->label, rk->world->origin_ns, 1);
    tb_ranges_bind(rk->ranges);
    rk->step = 7;
    rk->microbatch = 2;
    tb_group *tp = &rk->groups[TB_GROUP_TP], *wd = &rk->groups[TB_GROUP_WORLD];
    float a[6] = {1, 2, 3, 4, 5, 6}, b[6] = {0};
    const int peer = 1 - tp->index;
    const tb_p2p_op ops[] = {{TB_COMM_SEND, tp, a, 4, peer, 5},
                             {TB_COMM_SEND, wd, a + 4, 2, 1 - wd->index, -1},
                             {TB_COMM_RECV, tp, b, 4, peer, -1},
                             {TB_COMM_RECV, wd, b + 4, 2, 1 - wd->index, -1}};
    TB_RANGE_PUSH("test.outer");
    tb_batch_send_recv(ops, 4);
    TB_RANGE_POP();
    RK_CHECK(!memcmp(a, b, sizeof a), "%s: the batch moved the wrong values", rk->label);
    char path[512];
    snprintf(path, sizeof path, "%s/comm_batch.rank-%d.json", TB_TEST_TMPDIR, rk->rank);
    tb_error err;
    RK_CHECK(tb_ranges_write_chrome(rk->ranges, path, &err) == 0, "%s: %s", rk->label, err.msg);
    tb_ranges_bind(NULL);
    tb_ranges_free(rk->ranges);
}

TB_TEST(a_batch_records_each_op_as_its_call_with_nested_ranges) {
    static const struct {
        const char *name;
        tb_comm_op op;
        tb_group_kind kind;
        size_t count;
        int microbatch, seq;  // (seq: per group)
    } want[] = {{"comm.tp.send", TB_COMM_SEND, TB_GROUP_TP, 4, 5, 1},
                {"comm.world.send", TB_COMM_SEND, TB_GROUP_WORLD, 2, 2, 1},
                {"comm.tp.recv", TB_COMM_RECV, TB_GROUP_TP, 4, 2, 2},
                {"comm.world.recv", TB_COMM_RECV, TB_GROUP_WORLD, 2, 2, 2}};
    world W;
    if (world_up(&W, 2, 2, 20) != 0) return;
    timeout_rank = -1;
    parallel_state_run_ranks(&W.w, batch_rank, NULL);
    for (int r = 0; r < 2; r++) {
        tb_rank *rk = &W.w.ranks[r];
        tb_flight_entry tail[TB_FLIGHT_RECORDER_LEN];
        int n = tb_flight_recorder_tail(rk->fr, tail, TB_FLIGHT_RECORDER_LEN);
        TB_CHECK(n == 4, "%s: %d flight-recorder entries, expected 4", rk->label, n);
        int64_t last_enter = 0;
        for (int i = 0; i < n && i < 4; i++) last_enter = tail[i].enter_ns > last_enter ? tail[i].enter_ns : last_enter;
        for (int i = 0; i < n && i < 4; i++) {
            const tb_flight_entry *e = &tail[i];
            const tb_group *g = &rk->groups[want[i].kind];
            TB_CHECK(e->op == want[i].op && e->group_id == g->id && e->count == want[i].count &&
                         e->bytes == 4 * want[i].count && e->peer == 1 - g->index && e->seq == (uint64_t)want[i].seq,
                     "%s entry %d: %s on %s, count %zu, peer %d, seq %llu", rk->label, i, tb_comm_op_name(e->op),
                     e->group, e->count, e->peer, (unsigned long long)e->seq);
            TB_CHECK(e->step == 7 && e->microbatch == want[i].microbatch, "%s entry %d: step %lld microbatch %d",
                     rk->label, i, (long long)e->step, e->microbatch);
            TB_CHECK(e->exit_ns >= last_enter, "%s entry %d: closed before the batch's last op was entered", rk->label,
                     i);
        }
        char path[512];
        snprintf(path, sizeof path, "%s/comm_batch.rank-%d.json", TB_TEST_TMPDIR, r);
        json_t *root = tb_load_json(path);
        TB_CHECK(root != NULL, "%s: no trace at %s", rk->label, path);
        if (!root) continue;
        size_t i;
        json_t *ev;
        int k = 0;
        double prev_ts = -1, prev_end = -1;
        json_array_foreach(json_object_get(root, "traceEvents"), i, ev) {
            const char *name = jstr(ev, "name");
            if (strncmp(name, "comm.", 5) != 0) continue;
            json_t *args = json_object_get(ev, "args");
            double ts = json_number_value(json_object_get(ev, "ts")), end = ts + json_number_value(json_object_get(ev, "dur"));
            if (k < 4) {
                const tb_group *g = &rk->groups[want[k].kind];
                TB_CHECK(!strcmp(name, want[k].name) && jint(args, "depth") == k + 1 && jint(args, "seq") == want[k].seq &&
                             jint(args, "peer") == 1 - g->index && jint(args, "bytes") == 4 * (long long)want[k].count,
                         "%s: range %d is %s at depth %lld (seq %lld, peer %lld, bytes %lld), expected %s at depth %d",
                         rk->label, k, name, jint(args, "depth"), jint(args, "seq"), jint(args, "peer"),
                         jint(args, "bytes"), want[k].name, k + 1);
                TB_CHECK(k == 0 || (ts >= prev_ts && end <= prev_end + 1e-3), "%s: %s does not nest inside the op before",
                         rk->label, name);
            }
            prev_ts = ts, prev_end = end;
            k++;
        }
        TB_CHECK(k == 4, "%s: %d comm ranges, expected 4", rk->label, k);
        json_decref(root);
        remove(path);
    }
    world_down(&W);
}

// --- a batch that times out -----------------------------------------------------------

#define BATCH_HANG_DIR TB_TEST_TMPDIR "/comm_batch_hang"

static void hanging_batch_rank(tb_rank *rk, void *arg) {
    (void)arg;
    use_standin(rk);
    if (rk->rank != 0) return;  // the peer never joins
    rk->step = 3;
    tb_group *tp = &rk->groups[TB_GROUP_TP], *wd = &rk->groups[TB_GROUP_WORLD];
    float a[4] = {0}, b[4];
    const tb_p2p_op ops[] = {{TB_COMM_SEND, wd, a, 4, 1, 0}, {TB_COMM_RECV, tp, b, 4, 1, 1}};
    tb_batch_send_recv(ops, 2);
}

TB_TEST(a_batch_that_times_out_is_reported_on_its_last_op) {
    TB_REQUIRE(system("rm -rf " BATCH_HANG_DIR " && mkdir -p " BATCH_HANG_DIR) == 0, "mkdir");
    timeout_rank = 0;
    pid_t pid = world_in_child(BATCH_HANG_DIR, 2, 2, 0.5, hanging_batch_rank, NULL);  // the hang ends it
    timeout_rank = -1;
    TB_REQUIRE(pid >= 0, "fork");
    int status = 0;
    waitpid(pid, &status, 0);
    TB_CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 4, "the process ends with status 4 (status %d)", status);
    static char err_text[1 << 16];
    tb_slurp_into(BATCH_HANG_DIR "/stderr.txt", err_text, sizeof err_text);
    TB_CHECK(strstr(err_text, "HANG: batch_send_recv on groups world, tp"), "stderr summary:\n%s", err_text);
    json_t *h = tb_load_json(BATCH_HANG_DIR "/" TB_RUN_HANG_REPORT);
    TB_REQUIRE(h != NULL, "hang.json written to the world's run dir");
    json_t *to = json_object_get(h, "timed_out");
    TB_CHECK(!strcmp(jstr(to, "op"), "recv") && !strcmp(jstr(to, "group"), "tp") && jint(to, "detected_by") == 0,
             "timed_out: %s on %s detected by %lld", jstr(to, "op"), jstr(to, "group"), jint(to, "detected_by"));
    json_t *rank0 = json_array_get(json_object_get(h, "ranks"), 0);
    json_t *pend = json_object_get(rank0, "pending");
    TB_CHECK(!strcmp(jstr(pend, "op"), "recv") && !strcmp(jstr(pend, "group"), "tp") && jint(pend, "peer") == 1 &&
                 jint(pend, "microbatch") == 1,
             "rank 0 is pending in the batch's recv on tp (microbatch 1): %s on %s", jstr(pend, "op"),
             jstr(pend, "group"));
    // the batch's send is pending with it (read from rank 0's own part: the merged report's
    // ranks keep only their pending and last completed calls)
    char part[1024];
    tb_rank_path(part, sizeof part, BATCH_HANG_DIR, TB_RANK_HANG_PART, 0);
    json_t *p0 = tb_load_json(part);
    json_t *tail = json_object_get(p0, "flight_recorder_tail");
    json_t *first = json_array_get(tail, 0);
    TB_CHECK(json_array_size(tail) == 2 && !strcmp(jstr(first, "op"), "send") && !strcmp(jstr(first, "group"), "world") &&
                 !json_object_get(first, "duration_ms") && jint(first, "microbatch") == 0,
             "rank 0's tail: the send on world still pending, microbatch 0 (%zu entries)", json_array_size(tail));
    json_decref(p0);
    json_decref(h);
}

int main(void) {
    standin = tb_local_backend;
    standin.name = "stand-in batching";
    standin.batch_send_recv = standin_batch;
    TB_RUN(a_batch_records_each_op_as_its_call_with_nested_ranges);
    TB_RUN(a_batch_that_times_out_is_reported_on_its_last_op);
    return tb_test_summary();
}
