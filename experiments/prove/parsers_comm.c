// parsers_comm.c — comm_bytes: the bytes of a group's communicator calls inside a step, from
// every rank's trace.rank-NNNNN.json.
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/trace_events.h"
#include "core/xalloc.h"
#include "prove/parsers_internal.h"
#include "inspect/step_report.h"

// The engine's communicator group and op names (engine/comm/group.h, parallel_state.c): an
// arg outside them is a typo, which would otherwise count no calls and give 0 bytes.
static const char *const comm_groups[] = {"tp",    "cp",   "dp", "dp_cp", "pp",        "pp_grad", "mp", "embedding",
                                          "world", "ep", "etp", "expert_dp", NULL};
static const char *const comm_ops[] = {"all_reduce", "reduce_scatter", "all_gather", "all_to_all", "broadcast",
                                       "send",       "recv",           "barrier",    NULL};

// One rank's trace, read one event at a time: its train_step ranges and the group's calls.
typedef struct comm_scan {
    const char *path, *group, *op;
    long long want;      // the step asked for (< 0: the rank's last)
    long long found;     // the train_step chosen so far (-1: none)
    double start, end;   // its [ts, ts + dur]
    double *ts;          // the matching calls' start times
    long long *bytes;    // and their bytes
    size_t n, cap;
    int bad_call;        // a matching call without ts or bytes: said once the step is known
    tb_error bad;
} comm_scan;

static int comm_event(json_t *e, size_t i, void *ud, tb_error *err) {
    comm_scan *c = ud;
    json_t *args = json_object_get(e, "args");
    const char *name = json_string_value(json_object_get(e, "name"));
    json_t *s = json_object_get(args, "step");
    if (name && !strcmp(name, "train_step") && json_is_integer(s)) {
        long long at = (long long)json_integer_value(s);
        if (c->want >= 0 ? at != c->want : at <= c->found) return 0;
        json_t *ts = json_object_get(e, "ts"), *dur = json_object_get(e, "dur");
        if (!json_is_number(ts) || !json_is_number(dur) || json_number_value(dur) < 0)
            return tb_fail(err, "%s: traceEvents[%zu] (train_step, step %lld) has no numeric ts and dur", c->path, i,
                           at);
        c->found = at;
        c->start = json_number_value(ts);
        c->end = c->start + json_number_value(dur);
        return 0;
    }
    json_t *b = json_object_get(args, "bytes");
    const char *g = json_string_value(json_object_get(args, "group"));
    const char *o = json_string_value(json_object_get(args, "op"));
    if (!g || strcmp(g, c->group) || (c->op && (!o || strcmp(o, c->op)))) return 0;
    json_t *ts = json_object_get(e, "ts");
    if (!json_is_number(ts) || !json_is_integer(b) || json_integer_value(b) < 0) {
        if (!c->bad_call++)
            tb_fail(&c->bad, "%s: traceEvents[%zu] (comm.%s.%s) has no numeric ts or non-negative integer args.bytes",
                    c->path, i, g, o ? o : "?");
        return 0;
    }
    if (c->n == c->cap) {
        c->cap = c->cap ? 2 * c->cap : 256;
        c->ts = tb_xreallocarray(c->ts, c->cap, sizeof *c->ts, "communicator calls");
        c->bytes = tb_xreallocarray(c->bytes, c->cap, sizeof *c->bytes, "communicator calls");
    }
    c->ts[c->n] = json_number_value(ts);
    c->bytes[c->n++] = (long long)json_integer_value(b);
    return 0;
}

// One rank's trace: the [ts, ts + dur] of train_step `step` (the rank's last step when
// step < 0, which sets *step), then the bytes and calls of the matching communicator calls
// starting inside it.
static int rank_comm_bytes(const char *path, const char *group, const char *op, long long *step, double *bytes,
                           long long *calls, tb_error *err) {
    comm_scan c = {.path = path, .group = group, .op = op, .want = *step, .found = -1, .end = -1};
    int rc = access(path, R_OK) != 0 ? tb_fail(err, "%s: missing or unreadable (%s)", path, strerror(errno))
                                     : tb_trace_read(path, comm_event, &c, NULL, err);
    if (rc == 0 && c.found < 0) {
        if (*step >= 0) rc = tb_fail(err, "%s: no train_step range with args.step %lld", path, *step);
        else rc = tb_fail(err, "%s: no train_step range", path);
    }
    if (rc == 0 && c.bad_call) rc = tb_fail(err, "%s", c.bad.msg);
    *bytes = 0;
    *calls = 0;
    for (size_t k = 0; rc == 0 && k < c.n; k++) {
        if (c.ts[k] < c.start || c.ts[k] > c.end) continue;
        *bytes += (double)c.bytes[k];
        (*calls)++;
    }
    free(c.ts);
    free(c.bytes);
    if (rc == 0 && *step < 0) *step = c.found;
    return rc;
}

int tbp_comm_bytes_record(const parser *p, json_t *args, const char *dir, double *value, json_t *ev,
                             tb_error *err) {
    const char *group = tbp_string_arg(args, "group", NULL), *op = tbp_string_arg(args, "op", NULL);
    if (tbp_one_of(p, "group", group, comm_groups, err) != 0) return -1;
    if (json_object_get(args, "op") && tbp_one_of(p, "op", op, comm_ops, err) != 0) return -1;
    long long step = -1;
    if (tbp_int_arg(p, args, "step", -1, 1, &step, err) != 0) return -1;
    json_t *files = json_array();
    json_object_set_new(ev, "files", files);
    char config_path[REC_PATH_MAX], run_dir[REC_PATH_MAX], path[REC_PATH_MAX];
    long long world;
    if (tbp_record_world_size(dir, config_path, sizeof config_path, files, &world, NULL, err) != 0 ||
        tb_run_path(run_dir, sizeof run_dir, dir, TB_RECORD_RUN_DIR, err) != 0)
        return -1;
    json_t *per_rank = json_array();
    json_object_set_new(ev, "per_rank", per_rank);
    double most = -1, least = 0;
    long long most_rank = 0, most_calls = 0;
    for (long long r = 0; r < world; r++) {
        double bytes;
        long long calls;
        // rank 0 fixes the step (its last, unless args.step says); every other rank must have it
        if (tb_rank_file_path(path, sizeof path, run_dir, TB_RANK_TRACE, (int)r, err) != 0 ||
            rank_comm_bytes(path, group, op, &step, &bytes, &calls, err) != 0)
            return r > 0 ? tb_fail_prefix(err, "rank %lld of world_size %lld (%s)", r, world, config_path) : -1;
        json_array_append_new(files, json_string(path));
        json_array_append_new(per_rank, json_pack("{s:I, s:f, s:I}", "rank", (json_int_t)r, "bytes", bytes, "calls",
                                                  (json_int_t)calls));
        if (bytes > most) most = bytes, most_rank = r, most_calls = calls;
        if (r == 0 || bytes < least) least = bytes;
    }
    *value = most;
    char detail[512];
    snprintf(detail, sizeof detail,
             "step %lld, comm.%s.%s calls inside train_step: the busiest of %lld rank%s is rank %lld with %lld "
             "call%s, %.0f bytes (the least: %.0f bytes)",
             step, group, op ? op : "*", world, world == 1 ? "" : "s", most_rank, most_calls,
             most_calls == 1 ? "" : "s", most, least);
    json_object_set_new(ev, "step", json_integer(step));
    json_object_set_new(ev, "detail", json_string(detail));
    return 0;
}

// collective_figure: the collectives of a group matched across its members (step_report.h's
// tb_collective_calls, what tracebook comm lists) inside the steps after the warm-up.
int tbp_collective_record(const parser *p, json_t *args, const char *dir, double *value, json_t *ev,
                          tb_error *err) {
    static const char *const figures[] = {"enter_spread_ms", "max_enter_spread_ms", "transfer_ms", "last_rank",
                                          "last_rank_share", NULL};
    static const char *const groups[] = {"tp", "cp", "dp", "dp_cp", "pp_grad", "mp", "embedding", "world",
                                         "ep", "etp", "expert_dp", NULL};
    const char *group = tbp_string_arg(args, "group", NULL), *op = tbp_string_arg(args, "op", NULL);
    const char *figure = tbp_string_arg(args, "figure", "enter_spread_ms"), *in = tbp_string_arg(args, "in", NULL);
    if (json_object_get(args, "in") && (!in || !*in))
        return tb_fail(err, "parser %s: args.in must be a range name (e.g. finalize_model_grads.all_reduce)", p->name);
    if (tbp_one_of(p, "group", group, groups, err) != 0) return -1;
    if (json_object_get(args, "op") && tbp_one_of(p, "op", op, comm_ops, err) != 0) return -1;
    if (json_object_get(args, "op") && (!strcmp(op, "send") || !strcmp(op, "recv")))
        return tb_fail(err, "parser %s: args.op %s: P2P calls are not matched across a group (their sequence numbers "
                            "are per caller)", p->name, op);
    if (tbp_one_of(p, "figure", figure, figures, err) != 0) return -1;
    long long warmup;
    if (tbp_int_arg(p, args, "warmup_steps", 1, 0, &warmup, err) != 0) return -1;
    json_t *files = json_array();
    json_object_set_new(ev, "files", files);
    char config_path[REC_PATH_MAX], run_dir[REC_PATH_MAX], path[REC_PATH_MAX];
    long long world;
    if (tbp_record_world_size(dir, config_path, sizeof config_path, files, &world, NULL, err) != 0 ||
        tb_run_path(run_dir, sizeof run_dir, dir, TB_RECORD_RUN_DIR, err) != 0)
        return -1;
    for (long long r = 0; r < world; r++) {  // every rank's trace: a call missing a member is no spread
        if (tb_rank_file_path(path, sizeof path, run_dir, TB_RANK_TRACE, (int)r, err) != 0) return -1;
        if (access(path, R_OK) != 0)
            return tb_fail(err, "%s: missing (rank %lld of world_size %lld, %s)", path, r, world, config_path);
        json_array_append_new(files, json_string(path));
    }
    json_t *calls = tb_collective_calls(run_dir, err);
    if (!calls) return -1;
    size_t n = json_array_size(calls), k = 0, i;
    double *spread = tb_xcalloc(n + 1, sizeof *spread, "enter spreads");
    double *transfer = tb_xcalloc(n + 1, sizeof *transfer, "transfers");
    long long *last = tb_xcalloc((size_t)world, sizeof *last, "last ranks");
    json_t *c;
    json_array_foreach(calls, i, c) {
        const char *g = json_string_value(json_object_get(c, "group"));
        const char *o = json_string_value(json_object_get(c, "op"));
        const char *last_in = json_string_value(json_object_get(c, "last_in"));
        if (!g || strcmp(g, group) || (op && (!o || strcmp(o, op))) || (in && (!last_in || strcmp(last_in, in))))
            continue;
        if (json_integer_value(json_object_get(c, "step")) <= warmup) continue;  // -1: outside train_step
        spread[k] = json_number_value(json_object_get(c, "enter_spread_ms"));
        double longest = 0;
        size_t j;
        json_t *m;
        json_array_foreach(json_object_get(c, "members"), j, m) {
            double t = json_number_value(json_object_get(m, "transfer_ms"));
            longest = t > longest ? t : longest;
        }
        transfer[k++] = longest;
        json_int_t lr = json_integer_value(json_object_get(c, "last_rank"));
        if (lr >= 0 && lr < world) last[lr]++;
    }
    json_decref(calls);
    int rc = 0;
    if (k == 0)
        rc = tb_fail(err, "parser %s: %s: no %s calls on group %s%s%s inside the steps after warmup_steps %lld",
                     p->name, run_dir, op ? op : "collective", group, in ? " in " : "", in ? in : "", warmup);
    long long most = 0;
    for (long long r = 1; r < world; r++)
        if (last[r] > last[most]) most = r;
    double v = 0;
    if (rc == 0) {
        const double med_spread = tb_median(spread, (int)k);  // sorts: spread[k - 1] is the largest
        if (!strcmp(figure, "last_rank")) v = (double)most;
        else if (!strcmp(figure, "last_rank_share")) v = (double)last[most] / (double)k;
        else if (!strcmp(figure, "transfer_ms")) v = tb_median(transfer, (int)k);
        else if (!strcmp(figure, "max_enter_spread_ms")) v = spread[k - 1];
        else v = med_spread;
        char detail[512];
        snprintf(detail, sizeof detail,
                 "%zu %s call%s on group %s%s%s in steps > %lld matched across every trace: enter spread median "
                 "%.4g ms, max %.4g ms; rank %lld entered last in %lld of them",
                 k, op ? op : "collective", k == 1 ? "" : "s", group, in ? " in " : "", in ? in : "", warmup,
                 med_spread, spread[k - 1], most, last[most]);
        json_object_set_new(ev, "detail", json_string(detail));
    }
    free(spread);
    free(transfer);
    free(last);
    if (rc != 0) return -1;
    *value = v;
    return 0;
}
