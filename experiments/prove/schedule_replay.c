// schedule_replay.c — the replay of a run's steps on one core per rank (schedule_replay.h).
#include "prove/schedule_replay.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/intern.h"
#include "core/trace_events.h"
#include "core/xalloc.h"

// ---------------------------------------------------------------------------------------
// One rank's step, read from its trace

// A communicator call, or a hand-over between a rank thread and its communication thread
// (--overlap-grad-reduce): the rank thread queues bucket k (ddp.start_grad_sync.b: POST) and
// later waits for every bucket it queued (ddp.finish_grad_sync: JOIN); the communication
// thread takes the buckets in that order, each a ddp.bucket.b range (BEGIN and END around
// its calls).
typedef enum op_kind { OP_SEND, OP_RECV, OP_COLLECTIVE, OP_POST, OP_JOIN, OP_BEGIN, OP_END } op_kind;

// One op of the step, in its thread's order.
typedef struct rop {
    op_kind kind;
    const char *name;       // its range name (messages)
    int group_id, peer;     // peer: the other rank of a send or recv (a global rank)
    int ordinal;            // among the rank's collectives on the group (a collective), or its
                            // sends to / recvs from the peer on the group (P2P), in this step
    int item;               // POST, BEGIN, END: the bucket's place in the step's queue; JOIN:
                            // how many buckets were queued before it
    int bucket;             // POST, BEGIN, END: the bucket (b of the range's name)
    int exposed;            // inside finalize_model_grads or optimizer
    int64_t cpu_start, cpu_dur;
    // the replay
    int entered;
    int64_t enter, wait;    // replay time it was reached; how long it waited for peers there
} rop;

// A depth-1 range of the step the figures read.
typedef enum span_kind { SPAN_PASS, SPAN_P2P, SPAN_EXPOSED } span_kind;
typedef struct span {
    int64_t cpu_start, cpu_end;
    span_kind kind;         // a forward or backward (compute); a pipeline send or recv (both in the
                            // schedule span); finalize_model_grads or optimizer (exposed calls)
    int ops_before_start;   // the step's calls that precede its start (by trace order: a range's
    int ops_before_end;     // own calls follow its push), and that precede its end
} span;

typedef struct rank_step {
    long long step;
    int64_t cpu_start, cpu_end;
    double wall_ms;
    rop *ops;               // the rank thread's
    int nops;
    rop *cops;              // the communication thread's: BEGIN, its calls, END for each bucket
    int ncops, cap_cops;
    int nposts, nitems;     // the buckets the rank thread queued in the step, the thread took
    span *spans;
    int nspans;
    int64_t *waits_before;  // (nops + 1) prefix sums of the ops' waits, after the replay
    // the replay's hand-overs: when each queued bucket was queued and finished
    int64_t *posted_at, *done_at;
    int posted, done;
} rank_step;

typedef struct rank_trace {
    const char *name;
    rank_step *steps;
    int nsteps;
    json_int_t comm_tid;    // the communication thread's, -1 none
} rank_trace;

// The members of each group id: rank of (group id, group index), from every trace's calls.
typedef struct group_map {
    int *rank;   // [id * stride + index], -1 unknown
    int *size;   // [id]
    int nids, stride;
} group_map;

static int64_t ns_of(double us) { return (int64_t)llround(us * 1000.0); }

static int number_field(json_t *e, const char *key, double *out) {
    json_t *v = json_object_get(e, key);
    if (!json_is_number(v)) return -1;
    *out = json_number_value(v);
    return 0;
}

static int int_arg(json_t *args, const char *key, long long *out) {
    json_t *v = json_object_get(args, key);
    if (!json_is_integer(v)) return -1;
    *out = (long long)json_integer_value(v);
    return 0;
}

static int is_prefixed_number(const char *s, const char *prefix, int *n) {
    const size_t len = strlen(prefix);
    if (strncmp(s, prefix, len) || s[len] < '0' || s[len] > '9') return 0;
    char *end;
    const long v = strtol(s + len, &end, 10);
    if (*end || v > 1 << 30) return 0;
    *n = (int)v;
    return 1;
}

// ---------------------------------------------------------------------------------------
// A rank's trace as the replay reads it: one pass over its events (a file read one event at a
// time, core/trace_events.h, or a parsed trace), each complete event kept compact.

typedef struct sev {
    uint32_t name;         // in the trace's names
    json_t *args;          // kept when the replay reads it (args.op, step or group); else NULL
    size_t at;             // index in traceEvents
    long long tid;         // 0 when not an integer
    int tid_is_int, has_depth;  // an integer tid; an integer args.depth
    long long depth;
    int timed;             // numeric tts, dur and tdur >= 0, an integer args.depth >= 0
    int64_t start, end;    // thread CPU time
    double wall_us;
} sev;

struct tb_replay_trace {
    tb_intern names;
    sev *ev;
    size_t n, cap;
    json_int_t rank_tid;   // the first train_step's thread (with an integer tid)
    int rank_tid_set;
};

static int collect_event(json_t *e, size_t i, void *ud, tb_error *err) {
    (void)err;
    tb_replay_trace *t = ud;
    const char *nm = json_string_value(json_object_get(e, "name"));
    const char *ph = json_string_value(json_object_get(e, "ph"));
    json_t *tid = json_object_get(e, "tid");
    if (nm && !strcmp(nm, "train_step") && json_is_integer(tid) && !t->rank_tid_set)
        t->rank_tid = json_integer_value(tid), t->rank_tid_set = 1;
    if (!nm || !ph || strcmp(ph, "X")) return 0;
    if (t->n == t->cap)
        t->ev = tb_xreallocarray(t->ev, t->cap = t->cap ? 2 * t->cap : 1024, sizeof *t->ev, "replay events");
    json_t *args = json_object_get(e, "args");
    double tts = 0, tdur = 0, dur = 0;
    long long depth = -1;
    const int has_depth = int_arg(args, "depth", &depth) == 0;
    const int timed = !number_field(e, "tts", &tts) && !number_field(e, "tdur", &tdur) &&
                      !number_field(e, "dur", &dur) && has_depth && tdur >= 0 && depth >= 0;
    const int kept = json_object_get(args, "op") || json_object_get(args, "step") || json_object_get(args, "group");
    t->ev[t->n++] = (sev){tb_intern_add(&t->names, nm, strlen(nm)), kept ? json_incref(args) : NULL, i,
                          json_integer_value(tid), json_is_integer(tid), has_depth, depth, timed,
                          timed ? ns_of(tts) : 0, timed ? ns_of(tts + tdur) : 0, dur};
    return 0;
}

static tb_replay_trace *trace_new(void) { return tb_xcalloc(1, sizeof(tb_replay_trace), "replay trace"); }

int tb_replay_trace_read(const char *path, tb_replay_trace **out, tb_error *err) {
    tb_replay_trace *t = trace_new();
    const int rc = tb_trace_read(path, collect_event, t, NULL, err);
    if (rc != 0) tb_replay_trace_free(t);
    *out = rc == 0 ? t : NULL;
    return rc;
}

void tb_replay_trace_free(tb_replay_trace *t) {
    if (!t) return;
    for (size_t i = 0; i < t->n; i++) json_decref(t->ev[i].args);
    free(t->ev);
    tb_intern_free(&t->names);
    free(t);
}

static const char *sev_name(const tb_replay_trace *t, const sev *e) { return tb_intern_str(&t->names, e->name); }

// The threads of a rank's trace: the rank thread (that of the first train_step) and, if any
// other thread recorded work, the communication thread of --overlap-grad-reduce — one thread
// whose outermost ranges are all ddp.bucket.b. Any other thread's work is not replayed:
// refused by name.
static int rank_thread_events(const tb_replay_trace *trace, const char *name, json_int_t *tid_out,
                              json_int_t *comm_tid_out, tb_error *err) {
    const json_int_t tid = trace->rank_tid_set ? trace->rank_tid : -1;
    if (tid < 0) return tb_fail(err, "%s: no train_step range (a run that trained no step has nothing to replay)", name);
    json_int_t comm_tid = -1;
    int bucket;
    for (size_t k = 0; k < trace->n; k++) {
        const sev *e = &trace->ev[k];
        const char *n = sev_name(trace, e);
        if (!e->tid_is_int || e->tid == tid) continue;
        const json_int_t other = e->tid;
        const int outermost = e->has_depth && e->depth == 0;
        if (comm_tid >= 0 && other != comm_tid)
            return tb_fail(err,
                           "%s: traceEvents[%zu] (%s) ran on thread %lld, a third thread beside the rank thread %lld "
                           "and the communication thread %lld: replaying it is not supported yet",
                           name, e->at, n, (long long)other, (long long)tid, (long long)comm_tid);
        if (outermost && !strncmp(n, "ddp.param_gather.", 17))
            return tb_fail(err,
                           "%s: traceEvents[%zu] (%s) on thread %lld: replaying --overlap-param-gather's gathers "
                           "(queued by one step's optimizer, waited for in the next step's forward) is not supported "
                           "yet",
                           name, e->at, n, (long long)other);
        if (!e->has_depth || (outermost && !is_prefixed_number(n, "ddp.bucket.", &bucket)))
            return tb_fail(err,
                           "%s: traceEvents[%zu] (%s) ran on thread %lld, not the rank thread %lld and not inside a "
                           "ddp.bucket range of the communication thread: replaying it is not supported yet",
                           name, e->at, n, (long long)other, (long long)tid);
        comm_tid = other;
    }
    *tid_out = tid;
    *comm_tid_out = comm_tid;
    return 0;
}

static int is_pipeline_p2p(const char *group) { return !strcmp(group, "pp") || !strcmp(group, "pp_grad"); }

// Adds (group id, index) -> rank to the map, growing it.
// A world of W ranks has at most W members per group and, the engine's groups being a dozen
// kinds, far fewer than 64·W + 64 group ids: beyond that the trace is not the engine's.
static int map_member(group_map *m, long long id, long long size, long long index, int rank, int world,
                      const char *name, size_t at, tb_error *err) {
    if (id < 0 || id >= 64LL * world + 64 || size < 1 || size > world || index < 0 || index >= size)
        return tb_fail(err,
                       "%s: traceEvents[%zu]: group_id %lld, group_size %lld, group_index %lld are not a member of a "
                       "group of a world of %d ranks",
                       name, at, id, size, index, world);
    if (id >= m->nids || size > m->stride) {
        const int nids = id >= m->nids ? (int)id + 1 : m->nids, stride = size > m->stride ? (int)size : m->stride;
        int *ranks = tb_xcalloc((size_t)nids * (size_t)stride, sizeof *ranks, "replay group members");
        int *sizes = tb_xcalloc((size_t)nids, sizeof *sizes, "replay group sizes");
        for (size_t k = 0; k < (size_t)nids * (size_t)stride; k++) ranks[k] = -1;
        for (int g = 0; g < m->nids; g++) {
            sizes[g] = m->size[g];
            for (int j = 0; j < m->stride; j++) ranks[(size_t)g * stride + j] = m->rank[(size_t)g * m->stride + j];
        }
        free(m->rank);
        free(m->size);
        *m = (group_map){ranks, sizes, nids, stride};
    }
    int *slot = &m->rank[(size_t)id * m->stride + index];
    if ((m->size[id] && m->size[id] != size) || (*slot >= 0 && *slot != rank))
        return tb_fail(err, "%s: traceEvents[%zu]: group %lld index %lld is rank %d here but rank %d (size %d) elsewhere",
                       name, at, id, index, rank, *slot, m->size[id]);
    m->size[id] = size;
    *slot = rank;
    return 0;
}

// One complete event of the rank thread, in trace order (push order: a range precedes what
// it holds, and what it holds are the events after it until one of its depth or less).
typedef struct tev {
    const char *name;
    json_t *args;
    size_t at;              // index in traceEvents
    long long depth;
    int64_t start, end;     // thread CPU time
    double wall_us;
} tev;

static int read_events(const tb_replay_trace *trace, json_int_t tid, const char *name, tev **out, size_t *n,
                       tb_error *err) {
    *out = tb_xcalloc(trace->n + 1, sizeof **out, "replay events");
    *n = 0;
    for (size_t k = 0; k < trace->n; k++) {
        const sev *e = &trace->ev[k];
        if (e->tid != tid) continue;
        if (!e->timed)
            return tb_fail(err,
                           "%s: traceEvents[%zu] (%s) has no numeric tts, non-negative tdur, dur and integer "
                           "args.depth (a trace written before ranges recorded thread CPU time cannot be replayed)",
                           name, e->at, sev_name(trace, e));
        (*out)[(*n)++] = (tev){sev_name(trace, e), e->args, e->at, e->depth, e->start, e->end, e->wall_us};
    }
    return 0;
}

// The steps of one rank's trace: each train_step's communicator calls and figure spans.
static int read_comm_thread(const tb_replay_trace *trace, const char *name, int rank, int world, group_map *map,
                            rank_trace *out, tb_error *err);

// A communicator call's op from its range (group and op in its args), or 1 when the range is
// not a call. P2P peers are group indices until every trace is read (resolve_ops).
static int call_op(const tev *e, const char *name, int rank, int world, group_map *map, rop *o, tb_error *err) {
    const char *group = json_string_value(json_object_get(e->args, "group"));
    const char *op = json_string_value(json_object_get(e->args, "op"));
    if (strncmp(e->name, "comm.", 5) || !group || !op) return 1;
    long long gid, gsize, gindex;
    if (int_arg(e->args, "group_id", &gid) || int_arg(e->args, "group_size", &gsize) ||
        int_arg(e->args, "group_index", &gindex))
        return tb_fail(err, "%s: traceEvents[%zu] (%s) has no integer args.group_id, group_size, group_index", name,
                       e->at, e->name);
    if (map_member(map, gid, gsize, gindex, rank, world, name, e->at, err) != 0) return -1;
    *o = (rop){.kind = OP_COLLECTIVE, .name = e->name, .group_id = (int)gid, .peer = -1, .cpu_start = e->start,
               .cpu_dur = e->end - e->start};
    if (!strcmp(op, "send") || !strcmp(op, "recv")) {
        long long peer;
        if (int_arg(e->args, "peer", &peer) != 0 || peer < 0 || peer >= gsize)
            return tb_fail(err, "%s: traceEvents[%zu] (%s) has no args.peer in [0, %lld)", name, e->at, e->name,
                           gsize);
        o->kind = !strcmp(op, "send") ? OP_SEND : OP_RECV;
        o->peer = (int)peer;
    }
    return 0;
}

static int read_rank(const tb_replay_trace *trace, const char *name, int rank, int world, group_map *map,
                     rank_trace *out, tb_error *err) {
    json_int_t tid = -1;
    tev *ev = NULL;
    size_t n = 0;
    if (rank_thread_events(trace, name, &tid, &out->comm_tid, err) != 0) return -1;
    if (read_events(trace, tid, name, &ev, &n, err) != 0) {
        free(ev);
        return -1;
    }
    out->name = name;
    out->steps = tb_xcalloc(n + 1, sizeof *out->steps, "replay steps");
    int rc = 0;
    for (size_t i = 0; i < n && rc == 0; i++) {
        if (strcmp(ev[i].name, "train_step")) continue;
        long long step;
        if (int_arg(ev[i].args, "step", &step) != 0) {
            rc = tb_fail(err, "%s: traceEvents[%zu] (train_step) has no integer args.step", name, ev[i].at);
            break;
        }
        size_t last = i + 1;  // the step's events: [i + 1, last)
        while (last < n && ev[last].depth > ev[i].depth) last++;
        rank_step *st = &out->steps[out->nsteps++];
        *st = (rank_step){.step = step, .cpu_start = ev[i].start, .cpu_end = ev[i].end,
                          .wall_ms = ev[i].wall_us / 1000.0};
        st->ops = tb_xcalloc(last - i, sizeof *st->ops, "replay ops");
        st->spans = tb_xcalloc(last - i, sizeof *st->spans, "replay spans");
        int *ops_before = tb_xcalloc(last - i + 1, sizeof *ops_before, "replay op positions");
        for (size_t j = i + 1; j < last && rc == 0; j++) {
            ops_before[j - i - 1] = st->nops;
            rop o = {.name = ev[j].name, .peer = -1, .cpu_start = ev[j].start, .cpu_dur = ev[j].end - ev[j].start};
            if (is_prefixed_number(ev[j].name, "ddp.start_grad_sync.", &o.bucket)) {
                o.kind = OP_POST;
                o.item = st->nposts++;
            } else if (!strcmp(ev[j].name, "ddp.finish_grad_sync")) {
                o.kind = OP_JOIN;
                o.item = st->nposts;
                o.bucket = -1;
            } else if ((rc = call_op(&ev[j], name, rank, world, map, &o, err)) != 0) {
                rc = rc < 0 ? -1 : 0;
                continue;
            }
            st->ops[st->nops++] = o;
        }
        ops_before[last - i - 1] = st->nops;
        // the depth-1 ranges the figures read, with the calls before their start and end
        for (size_t j = i + 1; j < last && rc == 0; j++) {
            if (ev[j].depth != ev[i].depth + 1) continue;
            const char *nm = ev[j].name, *group = json_string_value(json_object_get(ev[j].args, "group"));
            int kind = -1;
            if (!strcmp(nm, "forward") || !strcmp(nm, "backward")) kind = SPAN_PASS;
            else if (!strncmp(nm, "comm.", 5) && group && is_pipeline_p2p(group)) kind = SPAN_P2P;
            else if (!strcmp(nm, "finalize_model_grads") || !strcmp(nm, "optimizer") ||
                     !strcmp(nm, "ddp.finish_grad_sync"))
                kind = SPAN_EXPOSED;
            if (kind < 0) continue;
            size_t end = j + 1;
            while (end < last && ev[end].depth > ev[j].depth) end++;
            st->spans[st->nspans++] =
                (span){ev[j].start, ev[j].end, (span_kind)kind, ops_before[j - i - 1], ops_before[end - i - 1]};
        }
        for (int k = 0; k < st->nspans; k++)
            if (st->spans[k].kind == SPAN_EXPOSED)
                for (int o = st->spans[k].ops_before_start; o < st->spans[k].ops_before_end; o++) st->ops[o].exposed = 1;
        free(ops_before);
    }
    free(ev);
    if (rc == 0 && out->comm_tid >= 0) rc = read_comm_thread(trace, name, rank, world, map, out, err);
    return rc;
}

static void add_comm_op(rank_step *st, rop o) {
    if (st->ncops == st->cap_cops) {
        st->cap_cops = st->cap_cops ? 2 * st->cap_cops : 16;
        st->cops = tb_xreallocarray(st->cops, (size_t)st->cap_cops, sizeof *st->cops, "replay communication ops");
    }
    st->cops[st->ncops++] = o;
}

// The END of the step's last bucket taken: at its range's end on the thread's CPU clock.
static void end_bucket(rank_step *st, int64_t cpu_end, int bucket) {
    add_comm_op(st, (rop){.kind = OP_END, .name = "ddp.bucket (end)", .cpu_start = cpu_end, .item = st->nitems - 1,
                          .bucket = bucket});
}

// The communication thread's buckets, each into the step its args.step names: BEGIN, the
// bucket's calls, END. The k-th bucket it took in a step is the k-th the rank thread queued
// (one queue, first in first out): checked by bucket number.
static int read_comm_thread(const tb_replay_trace *trace, const char *name, int rank, int world, group_map *map,
                            rank_trace *out, tb_error *err) {
    tev *ev = NULL;
    size_t n = 0;
    int rc = read_events(trace, out->comm_tid, name, &ev, &n, err);
    rank_step *st = NULL;
    int64_t item_end = 0;
    int bucket = -1;
    for (size_t j = 0; j < n && rc == 0; j++) {
        rop o = {.name = ev[j].name, .peer = -1, .cpu_start = ev[j].start, .cpu_dur = ev[j].end - ev[j].start};
        if (ev[j].depth == 0) {
            if (st) end_bucket(st, item_end, bucket);
            st = NULL;
            long long step;
            (void)is_prefixed_number(ev[j].name, "ddp.bucket.", &o.bucket);  // (rank_thread_events checked)
            if (int_arg(ev[j].args, "step", &step) != 0) {
                rc = tb_fail(err, "%s: traceEvents[%zu] (%s) has no integer args.step", name, ev[j].at, ev[j].name);
                break;
            }
            for (int s = 0; s < out->nsteps && !st; s++)
                if (out->steps[s].step == step) st = &out->steps[s];
            if (!st) {
                rc = tb_fail(err, "%s: traceEvents[%zu] (%s) belongs to step %lld, which has no train_step", name,
                             ev[j].at, ev[j].name, step);
                break;
            }
            o.kind = OP_BEGIN;
            o.cpu_dur = 0;
            bucket = o.bucket;
            o.item = st->nitems++;
            item_end = ev[j].end;
            add_comm_op(st, o);
            continue;
        }
        if (!st) {
            rc = tb_fail(err,
                         "%s: traceEvents[%zu] (%s) ran on thread %lld outside a ddp.bucket range of the communication "
                         "thread: replaying it is not supported yet",
                         name, ev[j].at, ev[j].name, (long long)out->comm_tid);
            break;
        }
        const int r = call_op(&ev[j], name, rank, world, map, &o, err);
        if (r < 0) rc = -1;
        else if (r == 0 && o.kind != OP_COLLECTIVE)
            rc = tb_fail(err, "%s: traceEvents[%zu] (%s): a send or recv on the communication thread is not "
                              "supported yet by the replay", name, ev[j].at, ev[j].name);
        else if (r == 0) add_comm_op(st, o);  // (matched after the rank thread's calls before its JOIN)
    }
    if (rc == 0 && st) end_bucket(st, item_end, bucket);
    free(ev);
    // every step: the buckets taken are those queued, in order, and waited for
    for (int s = 0; s < out->nsteps && rc == 0; s++) {
        rank_step *t = &out->steps[s];
        if (t->nitems != t->nposts) {
            rc = tb_fail(err, "%s: step %lld: the rank thread queued %d bucket%s (ddp.start_grad_sync), the "
                              "communication thread took %d (ddp.bucket): a trace written before the engine recorded "
                              "ddp.start_grad_sync cannot be replayed", name, t->step, t->nposts,
                         t->nposts == 1 ? "" : "s", t->nitems);
            break;
        }
        int k = 0, joined = t->nposts == 0;
        for (int o = 0; o < t->nops; o++) {
            if (t->ops[o].kind == OP_JOIN && t->ops[o].item == t->nposts) joined = 1;
            if (t->ops[o].kind != OP_POST) continue;
            while (k < t->ncops && t->cops[k].kind != OP_BEGIN) k++;
            if (k == t->ncops || t->cops[k].bucket != t->ops[o].bucket) {
                rc = tb_fail(err, "%s: step %lld: the rank thread queued bucket %d as its bucket %d of the step, the "
                                  "communication thread took %d: not one queue in order", name, t->step,
                             t->ops[o].bucket, t->ops[o].item + 1, k < t->ncops ? t->cops[k].bucket : -1);
                break;
            }
            k++;
        }
        if (rc == 0 && !joined)
            rc = tb_fail(err, "%s: step %lld: the rank thread queued %d bucket%s and never waited for them all "
                              "(no ddp.finish_grad_sync after the last)", name, t->step, t->nposts,
                         t->nposts == 1 ? "" : "s");
    }
    return rc;
}

// P2P peers from group indices to ranks, and every call's ordinal in its step: the calls
// before it of the same kind on the same group (and, P2P, with the same peer).
typedef struct ordinal_key {
    int group_id, peer;
    op_kind kind;
    int count;
} ordinal_key;

// The step's ops in the order a rank's calls on one group follow each other: the rank
// thread's before its first JOIN, the communication thread's (which has the data-parallel
// groups between the rank thread's start_grad_sync and finish_grad_sync), the rank thread's
// from the JOIN on.
static rop *merged_op(rank_step *st, int join, int k) {
    if (k < join) return &st->ops[k];
    if (k < join + st->ncops) return &st->cops[k - join];
    return &st->ops[k - st->ncops];
}

static int resolve_ops(rank_trace *t, const group_map *map, int world, tb_error *err) {
    for (int s = 0; s < t->nsteps; s++) {
        rank_step *st = &t->steps[s];
        const int n = st->nops + st->ncops;
        ordinal_key *keys = tb_xcalloc((size_t)n + 1, sizeof *keys, "replay ordinals");
        int nkeys = 0, join = 0;
        while (join < st->nops && st->ops[join].kind != OP_JOIN) join++;
        for (int k = 0; k < n; k++) {
            rop *o = merged_op(st, join, k);
            if (o->kind > OP_COLLECTIVE) continue;  // a hand-over
            if (o->kind != OP_COLLECTIVE) {
                const int peer = map->rank[(size_t)o->group_id * map->stride + o->peer];
                if (peer < 0 || peer >= world) {
                    free(keys);
                    return tb_fail(err, "%s: step %lld: %s with group %d index %d: no trace shows that member",
                                   t->name, st->step, o->name, o->group_id, o->peer);
                }
                o->peer = peer;
            }
            int j = 0;
            while (j < nkeys && !(keys[j].group_id == o->group_id && keys[j].peer == o->peer && keys[j].kind == o->kind))
                j++;
            if (j == nkeys) keys[nkeys++] = (ordinal_key){o->group_id, o->peer, o->kind, 0};
            o->ordinal = keys[j].count++;
        }
        free(keys);
    }
    return 0;
}

// ---------------------------------------------------------------------------------------
// The replay of one step

// A collective instance, (group id, ordinal): how many members have entered, when the last did.
typedef struct instance {
    int entered;
    int64_t last_enter;
} instance;

// The ends of the sends of one (group, sender, receiver), in order.
typedef struct channel {
    int group_id, src, dst, n, cap;
    int64_t *ends;
} channel;

typedef struct sim {
    instance **inst;  // [group id][ordinal]
    int *ninst;       // [group id]
    int nids;
    channel *ch;
    int nch, capch;
} sim;

static instance *find_instance(sim *m, int group_id, int ordinal) {
    if (ordinal >= m->ninst[group_id]) {
        const int n = 2 * ordinal + 16;
        m->inst[group_id] = tb_xreallocarray(m->inst[group_id], (size_t)n, sizeof **m->inst, "replay collectives");
        for (int k = m->ninst[group_id]; k < n; k++) m->inst[group_id][k] = (instance){0, INT64_MIN};
        m->ninst[group_id] = n;
    }
    return &m->inst[group_id][ordinal];
}

static channel *find_channel(sim *m, int group_id, int src, int dst) {
    for (int i = 0; i < m->nch; i++)
        if (m->ch[i].group_id == group_id && m->ch[i].src == src && m->ch[i].dst == dst) return &m->ch[i];
    if (m->nch == m->capch) {
        m->capch = m->capch ? 2 * m->capch : 16;
        m->ch = tb_xreallocarray(m->ch, (size_t)m->capch, sizeof *m->ch, "replay channels");
    }
    m->ch[m->nch] = (channel){group_id, src, dst, 0, 0, NULL};
    return &m->ch[m->nch++];
}

static void sim_free(sim *m) {
    for (int i = 0; i < m->nch; i++) free(m->ch[i].ends);
    for (int g = 0; g < m->nids; g++) free(m->inst[g]);
    free(m->inst);
    free(m->ninst);
    free(m->ch);
}

// Replay time of CPU time t on a rank, after `ops` of the step's calls: the CPU time since
// the step began plus their waits.
static int64_t replay_at(const rank_step *st, int64_t t, int ops) { return t - st->cpu_start + st->waits_before[ops]; }

// A thread of the replay, on its own core: agent a < world is rank a's rank thread, a >= world
// rank a - world's communication thread.
static rop *agent_ops(rank_trace *ranks, const int *index, int world, int a, int *n) {
    rank_step *st = &ranks[a % world].steps[index[a % world]];
    *n = a < world ? st->nops : st->ncops;
    return a < world ? st->ops : st->cops;
}

// Runs step index s of every rank; fills out.
static int replay_one(rank_trace *ranks, const int *index, int world, const group_map *map, const int *stage_ranks,
                      int pp, tb_replay_step *out, tb_error *err) {
    sim m = {tb_xcalloc((size_t)map->nids + 1, sizeof *m.inst, "replay collectives"),
             tb_xcalloc((size_t)map->nids + 1, sizeof *m.ninst, "replay collectives"), map->nids, NULL, 0, 0};
    const int agents = 2 * world;
    int *pos = tb_xcalloc((size_t)agents, sizeof *pos, "replay positions");
    int64_t *clock = tb_xcalloc((size_t)agents, sizeof *clock, "replay clocks");
    int64_t *cpu_prev = tb_xcalloc((size_t)agents, sizeof *cpu_prev, "replay cpu marks");
    int rc = 0, remaining = 0;
    for (int a = 0; a < agents; a++) {
        rank_step *st = &ranks[a % world].steps[index[a % world]];
        int n;
        rop *ops = agent_ops(ranks, index, world, a, &n);
        // a communication thread's clock starts at its first bucket's begin (it slept before)
        cpu_prev[a] = a < world ? st->cpu_start : n ? ops[0].cpu_start : 0;
        remaining += n > 0;
        if (a < world) {
            st->posted_at = tb_xcalloc((size_t)st->nposts + 1, sizeof *st->posted_at, "replay hand-overs");
            st->done_at = tb_xcalloc((size_t)st->nposts + 1, sizeof *st->done_at, "replay hand-overs");
            st->posted = st->done = 0;
        }
    }
    while (remaining > 0 && rc == 0) {
        int progress = 0;
        for (int a = 0; a < agents; a++) {
            const int r = a % world;
            rank_step *st = &ranks[r].steps[index[r]];
            int nops;
            rop *ops = agent_ops(ranks, index, world, a, &nops);
            while (pos[a] < nops) {
                rop *o = &ops[pos[a]];
                if (!o->entered) {
                    o->enter = clock[a] + (o->cpu_start - cpu_prev[a]);
                    o->entered = 1;
                    if (o->kind == OP_COLLECTIVE) {
                        instance *in = find_instance(&m, o->group_id, o->ordinal);
                        in->entered++;
                        if (o->enter > in->last_enter) in->last_enter = o->enter;
                    }
                }
                int64_t start = o->enter;  // when its own work begins
                if (o->kind == OP_POST) {
                    st->posted_at[st->posted++] = start;
                } else if (o->kind == OP_BEGIN) {
                    if (st->posted <= o->item) break;  // not queued yet
                    if (st->posted_at[o->item] > start) start = st->posted_at[o->item];
                } else if (o->kind == OP_END) {
                    st->done_at[st->done++] = start;
                } else if (o->kind == OP_JOIN) {
                    if (st->done < o->item) break;  // a queued bucket is not reduced yet
                    if (o->item > 0 && st->done_at[o->item - 1] > start) start = st->done_at[o->item - 1];
                } else if (o->kind == OP_SEND) {
                    channel *c = find_channel(&m, o->group_id, r, o->peer);
                    if (c->n == c->cap) {
                        c->cap = c->cap ? 2 * c->cap : 8;
                        c->ends = tb_xreallocarray(c->ends, (size_t)c->cap, sizeof *c->ends, "replay sends");
                    }
                    c->ends[c->n++] = o->enter + o->cpu_dur;
                } else if (o->kind == OP_RECV) {
                    channel *c = find_channel(&m, o->group_id, o->peer, r);
                    if (o->ordinal >= c->n) break;  // its send is not reached yet
                    const int64_t sent = c->ends[o->ordinal];
                    start = sent > o->enter ? sent : o->enter;
                } else {
                    instance *in = find_instance(&m, o->group_id, o->ordinal);
                    if (in->entered < map->size[o->group_id]) break;  // a member is not in yet
                    start = in->last_enter;
                }
                o->wait = start - o->enter;
                clock[a] = start + o->cpu_dur;
                cpu_prev[a] = o->cpu_start + o->cpu_dur;
                if (++pos[a] == nops) remaining--;
                progress = 1;
            }
        }
        if (!progress) {
            // name the first stuck thread and the call it waits in
            for (int a = 0; a < agents && rc == 0; a++) {
                const int r = a % world;
                int nops;
                const rop *ops = agent_ops(ranks, index, world, a, &nops);
                if (pos[a] < nops && ops[pos[a]].kind > OP_COLLECTIVE)
                    rc = tb_fail(err,
                                 "%s: step %lld: the replay stalls at %s (bucket %d, the %s's hand-over %d of the "
                                 "step): the thread it waits for is stalled in turn",
                                 ranks[r].name, ranks[r].steps[index[r]].step, ops[pos[a]].name, ops[pos[a]].bucket,
                                 a < world ? "rank thread" : "communication thread", ops[pos[a]].item + 1);
                else if (pos[a] < nops)
                    rc = tb_fail(err,
                                 "%s: step %lld: the replay stalls at %s%s (group %d, call %d of its kind in the "
                                 "step): its peers never reach the matching call in their traces",
                                 ranks[r].name, ranks[r].steps[index[r]].step, ops[pos[a]].name,
                                 a < world ? "" : " on the communication thread", ops[pos[a]].group_id,
                                 ops[pos[a]].ordinal + 1);
            }
        }
    }
    if (rc == 0) {
        double slowest = -1, wall = 0, compute_max = 0, compute_min = INFINITY, bubble_sum = 0;
        int slow = 0;
        for (int r = 0; r < world; r++) {
            rank_step *st = &ranks[r].steps[index[r]];
            st->waits_before = tb_xcalloc((size_t)st->nops + 1, sizeof *st->waits_before, "replay waits");
            for (int k = 0; k < st->nops; k++) st->waits_before[k + 1] = st->waits_before[k] + st->ops[k].wait;
            const double end_ms = (double)(clock[r] + (st->cpu_end - cpu_prev[r])) / 1e6;
            if (end_ms > slowest) slowest = end_ms, slow = r;
            if (st->wall_ms > wall) wall = st->wall_ms;
        }
        for (int s = 0; s < pp; s++) {
            const rank_step *st = &ranks[stage_ranks[s]].steps[index[stage_ranks[s]]];
            int64_t compute = 0, lo = INT64_MAX, hi = INT64_MIN;
            for (int k = 0; k < st->nspans; k++) {
                if (st->spans[k].kind == SPAN_EXPOSED) continue;
                const int64_t a = replay_at(st, st->spans[k].cpu_start, st->spans[k].ops_before_start);
                const int64_t b = replay_at(st, st->spans[k].cpu_end, st->spans[k].ops_before_end);
                if (st->spans[k].kind == SPAN_PASS) compute += b - a;
                if (a < lo) lo = a;
                if (b > hi) hi = b;
            }
            const double c = (double)compute / 1e6;
            if (c > compute_max) compute_max = c;
            if (c < compute_min) compute_min = c;
            bubble_sum += hi > lo ? 1.0 - (double)compute / (double)(hi - lo) : 0.0;
        }
        const rank_step *st = &ranks[slow].steps[index[slow]];
        int64_t exposed = 0;
        for (int k = 0; k < st->nops; k++)
            if (st->ops[k].exposed) exposed += st->ops[k].wait + st->ops[k].cpu_dur;
        *out = (tb_replay_step){st->step, slowest, wall, slow, pp > 0 ? bubble_sum / pp : 0,
                                compute_min > 0 ? compute_max / compute_min : 0, (double)exposed / 1e6};
    }
    free(pos);
    free(clock);
    free(cpu_prev);
    sim_free(&m);
    return rc;
}

int tb_replay_steps_of(tb_replay_trace *const *traces, const char *const *names, int world, const int *stage_ranks,
                       int pp, tb_replay_step **steps, int *nsteps, tb_error *err) {
    *steps = NULL;
    *nsteps = 0;
    if (world < 1 || pp < 1 || pp > world) return tb_fail(err, "replay: world %d with %d stages", world, pp);
    for (int s = 0; s < pp; s++)
        if (stage_ranks[s] < 0 || stage_ranks[s] >= world)
            return tb_fail(err, "replay: stage %d is rank %d, outside world_size %d", s, stage_ranks[s], world);
    rank_trace *ranks = tb_xcalloc((size_t)world, sizeof *ranks, "replay ranks");
    group_map map = {0};
    int rc = 0;
    for (int r = 0; r < world && rc == 0; r++) rc = read_rank(traces[r], names[r], r, world, &map, &ranks[r], err);
    for (int r = 0; r < world && rc == 0; r++) rc = resolve_ops(&ranks[r], &map, world, err);
    int *index = tb_xcalloc((size_t)world, sizeof *index, "replay step index");
    tb_replay_step *out = rc == 0 ? tb_xcalloc((size_t)ranks[0].nsteps + 1, sizeof *out, "replayed steps") : NULL;
    for (int s = 0; rc == 0 && s < ranks[0].nsteps; s++) {
        const long long step = ranks[0].steps[s].step;
        for (int r = 0; r < world && rc == 0; r++) {
            int k = 0;
            while (k < ranks[r].nsteps && ranks[r].steps[k].step != step) k++;
            if (k == ranks[r].nsteps) rc = tb_fail(err, "%s: no train_step of step %lld (rank 0 has it)", names[r], step);
            index[r] = k;
        }
        if (rc == 0) rc = replay_one(ranks, index, world, &map, stage_ranks, pp, &out[s], err);
    }
    if (rc == 0) {
        *steps = out;
        *nsteps = ranks[0].nsteps;
    } else {
        free(out);
    }
    free(index);
    for (int r = 0; r < world; r++) {
        for (int s = 0; s < ranks[r].nsteps; s++) {
            free(ranks[r].steps[s].ops);
            free(ranks[r].steps[s].spans);
            free(ranks[r].steps[s].waits_before);
            free(ranks[r].steps[s].cops);
            free(ranks[r].steps[s].posted_at);
            free(ranks[r].steps[s].done_at);
        }
        free(ranks[r].steps);
    }
    free(ranks);
    free(map.rank);
    free(map.size);
    return rc;
}

int tb_replay_steps(json_t *const *traces, const char *const *names, int world, const int *stage_ranks, int pp,
                    tb_replay_step **steps, int *nsteps, tb_error *err) {
    *steps = NULL;
    *nsteps = 0;
    if (world < 1) return tb_fail(err, "replay: world %d with %d stages", world, pp);
    tb_replay_trace **read = tb_xcalloc((size_t)world, sizeof *read, "replay traces");
    int rc = 0;
    for (int r = 0; r < world && rc == 0; r++) {
        json_t *events = json_object_get(traces[r], "traceEvents");
        if (!json_is_array(events)) {
            rc = tb_fail(err, "%s: no 'traceEvents' array", names[r]);
            break;
        }
        read[r] = trace_new();
        size_t i;
        json_t *e;
        json_array_foreach(events, i, e) collect_event(e, i, read[r], err);
    }
    if (rc == 0) rc = tb_replay_steps_of(read, names, world, stage_ranks, pp, steps, nsteps, err);
    for (int r = 0; r < world; r++) tb_replay_trace_free(read[r]);
    free(read);
    return rc;
}
