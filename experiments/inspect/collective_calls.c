// collective_calls.c — a run's communicator calls matched across their members (collective_calls.h).
#include "inspect/collective_calls.h"

#include <dirent.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/intern.h"
#include "core/trace_events.h"
#include "core/xalloc.h"

#define CC_PATH_MAX 4096
#define CC_MAX_RANKS 4096

// One range event of one rank's trace.
typedef struct range_ev {
    double ts, end;  // µs
    int depth;
    int tid;         // the track: 0 the rank's thread, 1 its communication thread
    uint32_t name;   // in the rank's names (UINT32_MAX: none)
    int32_t call;    // its communicator call's figures (rank_trace.calls), -1: none
    long long step;  // its args.step (-1: none; a step's is its train_step's, at depth 0)
} range_ev;

// What a communicator call's range carries in its args and the matching reads: op and group
// (in the rank's names; group UINT32_MAX: none), group_id and seq, and bytes.
typedef struct comm_call {
    uint32_t op, group;
    int group_id;
    int has_bytes;  // as tb_call_member's
    long long seq, bytes;
    json_t *bytes_other;
} comm_call;

typedef struct rank_trace {
    tb_intern names;
    range_ev *ev;
    size_t n, cap;
    comm_call *calls;
    size_t ncalls, cap_calls;
} rank_trace;

typedef struct run_traces {
    rank_trace *ranks;  // by rank; n == 0 for a rank without a trace
    int nranks;
} run_traces;

static void traces_free(run_traces *t) {
    if (!t) return;
    for (int r = 0; r < t->nranks; r++) {
        for (size_t i = 0; i < t->ranks[r].ncalls; i++) json_decref(t->ranks[r].calls[i].bytes_other);
        tb_intern_free(&t->ranks[r].names);
        free(t->ranks[r].ev);
        free(t->ranks[r].calls);
    }
    free(t->ranks);
    free(t);
}

int tb_run_rank_files(const char *dir, tb_rank_file kind, tb_error *err) {
    DIR *d = opendir(dir);
    if (!d) return tb_fail(err, "%s: cannot open the run directory", dir);
    struct dirent *de;
    int max_rank = -1;
    while ((de = readdir(d)) != NULL) {
        int r;
        if (tb_rank_file_match(de->d_name, kind, &r) && r < CC_MAX_RANKS && r > max_rank) max_rank = r;
    }
    closedir(d);
    return max_rank + 1;
}

static const char *name_of(const rank_trace *rt, uint32_t id) {
    return id == UINT32_MAX ? NULL : tb_intern_str(&rt->names, id);
}

// A complete range ("X") of a rank's trace, kept compact.
static int keep_range(json_t *e, size_t i, void *ud, tb_error *err) {
    (void)i;
    rank_trace *rt = ud;
    const char *ph = json_string_value(json_object_get(e, "ph"));
    json_t *ts = json_object_get(e, "ts"), *dur = json_object_get(e, "dur"), *args = json_object_get(e, "args");
    if (!ph || strcmp(ph, "X") != 0 || !json_is_number(ts) || !json_is_number(dur)) return 0;
    if (rt->n == rt->cap)
        rt->ev = tb_xreallocarray(rt->ev, rt->cap = rt->cap ? 2 * rt->cap : 1024, sizeof *rt->ev, "trace events");
    range_ev *x = &rt->ev[rt->n++];
    const char *name = json_string_value(json_object_get(e, "name"));
    x->ts = json_number_value(ts);
    x->end = x->ts + json_number_value(dur);
    x->depth = (int)json_integer_value(json_object_get(args, "depth"));
    x->tid = (int)json_integer_value(json_object_get(e, "tid"));
    x->name = name ? tb_intern_add(&rt->names, name, strlen(name)) : UINT32_MAX;
    json_t *step = json_object_get(args, "step");
    x->step = json_is_integer(step) ? json_integer_value(step) : -1;
    x->call = -1;
    const char *op = json_string_value(json_object_get(args, "op"));
    const char *group = json_string_value(json_object_get(args, "group"));
    json_t *gid = json_object_get(args, "group_id"), *seq = json_object_get(args, "seq");
    json_t *bytes = json_object_get(args, "bytes");
    if (op && json_is_integer(gid) && json_is_integer(seq)) {
        if (rt->ncalls == INT32_MAX) return tb_fail(err, "more than %d communicator calls in one trace", INT32_MAX);
        if (rt->ncalls == rt->cap_calls)
            rt->calls = tb_xreallocarray(rt->calls, rt->cap_calls = rt->cap_calls ? 2 * rt->cap_calls : 256,
                                         sizeof *rt->calls, "communicator calls");
        comm_call *c = &rt->calls[rt->ncalls];
        *c = (comm_call){tb_intern_add(&rt->names, op, strlen(op)),
                         group ? tb_intern_add(&rt->names, group, strlen(group)) : UINT32_MAX,
                         (int)json_integer_value(gid), json_is_integer(bytes) ? 1 : bytes ? 2 : 0,
                         json_integer_value(seq), json_integer_value(bytes), NULL};
        if (c->has_bytes == 2) c->bytes_other = json_incref(bytes);
        x->call = (int32_t)rt->ncalls++;
    }
    return 0;
}

static run_traces *load_traces(const char *dir, tb_error *err) {
    const int n = tb_run_rank_files(dir, TB_RANK_TRACE, err);
    if (n < 0) return NULL;
    if (n == 0) {
        tb_fail(err, "%s: no trace.rank-NNNNN.json (the run wrote no traces)", dir);
        return NULL;
    }
    run_traces *t = tb_xcalloc(1, sizeof *t, "rank traces");
    t->nranks = n;
    t->ranks = tb_xcalloc((size_t)t->nranks, sizeof *t->ranks, "rank traces");
    for (int r = 0; r < t->nranks; r++) {
        char path[CC_PATH_MAX];
        int rc = tb_rank_file_path(path, sizeof path, dir, TB_RANK_TRACE, r, err);
        if (rc == 0 && access(path, F_OK) != 0) continue;  // a rank that wrote none (it failed before the end)
        if (rc != 0 || tb_trace_read(path, keep_range, &t->ranks[r], NULL, err) != 0) {
            traces_free(t);
            return NULL;
        }
    }
    return t;
}

// --- matching ---------------------------------------------------------------------------

// One member's call before matching: its group, its ordinal (its place among the member's
// collectives on the group), and where its range is.
typedef struct call {
    int group_id, rank;
    long long seq, ordinal, step;
    size_t ev;  // index into the rank's events
} call;

static int by_group_seq(const void *a, const void *b) {
    const call *x = a, *y = b;
    if (x->group_id != y->group_id) return x->group_id < y->group_id ? -1 : 1;
    return x->seq < y->seq ? -1 : x->seq > y->seq;
}

static int by_call(const void *a, const void *b) {
    const call *x = a, *y = b;
    if (x->group_id != y->group_id) return x->group_id < y->group_id ? -1 : 1;
    if (x->ordinal != y->ordinal) return x->ordinal < y->ordinal ? -1 : 1;
    return x->rank - y->rank;
}

// The range enclosing event i of a rank (its parent), and the sibling it follows.
static void context_of(const rank_trace *rt, size_t i, const char **in, const char **after) {
    *in = *after = NULL;
    const range_ev *c = &rt->ev[i];
    for (size_t j = i; j-- > 0;) {
        const range_ev *e = &rt->ev[j];
        if (!*after && e->depth == c->depth && e->end <= c->ts) *after = name_of(rt, e->name);
        if (e->depth == c->depth - 1 && e->ts <= c->ts && e->end >= c->end) {
            *in = name_of(rt, e->name);
            break;
        }
    }
}

static long long step_of(const rank_trace *rt, size_t i) {
    const range_ev *c = &rt->ev[i];
    for (size_t j = i; j-- > 0;) {
        const range_ev *e = &rt->ev[j];
        if (e->depth == 0 && e->ts <= c->ts && e->end >= c->end) return e->step;
    }
    return -1;
}

// Every rank's collectives (P2P left out) with their ordinals, sorted by (group, ordinal, rank).
static call *rank_calls(const run_traces *t, size_t *count) {
    size_t n = 0, cap = 256;
    call *calls = tb_xcalloc(cap, sizeof *calls, "collective calls");
    for (int r = 0; r < t->nranks; r++) {
        size_t first = n;  // this rank's calls: calls[first .. n)
        const rank_trace *rt = &t->ranks[r];
        for (size_t i = 0; i < rt->n; i++) {
            if (rt->ev[i].call < 0) continue;
            const comm_call *c = &rt->calls[rt->ev[i].call];
            const char *op = tb_intern_str(&rt->names, c->op);
            if (!strcmp(op, "send") || !strcmp(op, "recv")) continue;
            if (n == cap) calls = tb_xreallocarray(calls, cap *= 2, sizeof *calls, "collective calls");
            calls[n++] = (call){c->group_id, r, c->seq, 0, step_of(rt, i), i};
        }
        // each call's ordinal: the rank's calls on its group before it (by seq, their order on
        // the group; calls of one seq share one)
        qsort(calls + first, n - first, sizeof *calls, by_group_seq);
        for (size_t k = first, g = first; k < n; k++) {  // g: the first call of calls[k]'s group
            if (calls[k].group_id != calls[g].group_id) g = k;
            calls[k].ordinal = k > g && calls[k].seq == calls[k - 1].seq ? calls[k - 1].ordinal : (long long)(k - g);
        }
    }
    qsort(calls, n, sizeof *calls, by_call);
    *count = n;
    return calls;
}

static int by_spread(const void *a, const void *b) {
    const double x = ((const tb_matched_call *)a)->enter_spread_ms, y = ((const tb_matched_call *)b)->enter_spread_ms;
    return x < y ? 1 : x > y ? -1 : 0;
}

int tb_calls_load(const char *run_dir, tb_calls *out, tb_error *err) {
    memset(out, 0, sizeof *out);
    run_traces *t = load_traces(run_dir, err);
    if (!t) return -1;
    size_t n;
    call *calls = rank_calls(t, &n);
    out->traces = t;
    out->nranks = t->nranks;
    out->members = tb_xcalloc(n + 1, sizeof *out->members, "call members");
    out->nmembers = n;
    out->calls = tb_xcalloc(n + 1, sizeof *out->calls, "matched calls");
    for (size_t a = 0, b; a < n; a = b) {
        for (b = a + 1; b < n && calls[b].group_id == calls[a].group_id && calls[b].ordinal == calls[a].ordinal;) b++;
        size_t last = a, first = a;
        for (size_t k = a; k < b; k++) {
            const range_ev *e = &t->ranks[calls[k].rank].ev[calls[k].ev];
            if (e->ts > t->ranks[calls[last].rank].ev[calls[last].ev].ts) last = k;
            if (e->ts < t->ranks[calls[first].rank].ev[calls[first].ev].ts) first = k;
        }
        const rank_trace *lt = &t->ranks[calls[last].rank];
        const range_ev *le = &lt->ev[calls[last].ev];
        const range_ev *fe = &t->ranks[calls[first].rank].ev[calls[first].ev];
        for (size_t k = a; k < b; k++) {
            const range_ev *e = &t->ranks[calls[k].rank].ev[calls[k].ev];
            const comm_call *c = &t->ranks[calls[k].rank].calls[e->call];
            const double transfer = e->end - le->ts;
            out->members[k] = (tb_call_member){calls[k].rank, e->tid == 1, e->ts / 1e3, (le->ts - e->ts) / 1e3,
                                               (transfer > 0 ? transfer : 0) / 1e3, c->has_bytes, c->bytes,
                                               c->bytes_other, calls[k].ev};
        }
        const comm_call *lc = &lt->calls[le->call];
        out->calls[out->n++] = (tb_matched_call){
            name_of(lt, lc->group), name_of(lt, lc->op), calls[a].group_id,
            calls[a].ordinal, calls[last].seq, calls[last].step, (le->ts - fe->ts) / 1e3, (int)(last - a), a, b - a};
    }
    free(calls);
    qsort(out->calls, out->n, sizeof *out->calls, by_spread);  // largest spread first
    return 0;
}

void tb_calls_free(tb_calls *c) {
    traces_free(c->traces);
    free(c->calls);
    free(c->members);
    memset(c, 0, sizeof *c);
}

// A member's args.bytes as written (a new reference), or NULL when it had none.
static json_t *member_bytes(const tb_call_member *m) {
    return m->has_bytes == 1 ? json_integer(m->bytes) : m->has_bytes == 2 ? json_incref(m->bytes_other) : NULL;
}

json_t *tb_calls_json(const tb_calls *c, size_t i) {
    const tb_matched_call *m = &c->calls[i];
    json_t *members = json_array();
    for (size_t k = 0; k < m->nmembers; k++) {
        const tb_call_member *p = &c->members[m->first_member + k];
        json_array_append_new(members, json_pack("{s:i, s:f, s:f, s:f, s:o?, s:b}", "rank", p->rank, "enter_ms",
                                                 p->enter_ms, "wait_ms", p->wait_ms, "transfer_ms", p->transfer_ms,
                                                 "bytes", member_bytes(p), "comm_thread", p->comm_thread));
    }
    const tb_call_member *last = &c->members[m->first_member + (size_t)m->last];
    const run_traces *t = c->traces;
    const char *in, *after;
    context_of(&t->ranks[last->rank], last->event, &in, &after);
    return json_pack("{s:s?, s:i, s:I, s:I, s:s, s:o?, s:I, s:f, s:i, s:s?, s:s?, s:o}", "group", m->group,
                     "group_id", m->group_id, "call", (json_int_t)m->ordinal + 1, "seq", (json_int_t)m->seq, "op",
                     m->op, "bytes", member_bytes(last), "step", (json_int_t)m->step, "enter_spread_ms",
                     m->enter_spread_ms, "last_rank", last->rank, "last_in", in, "last_after", after, "members",
                     members);
}
