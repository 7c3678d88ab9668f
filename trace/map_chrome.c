// map_chrome.c — see map_chrome.h.
#include "map_chrome.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/trace_events.h"
#include "core/xalloc.h"

#include "strmap.h"

static int64_t us_to_ns(json_t *v) { return (int64_t)llround(json_number_value(v) * 1000.0); }

// A duration event ("B" begin or "E" end) waiting for its pair: Chrome pairs each E with
// the latest unclosed B of the same process and thread, in timestamp order.
typedef struct be_event {
    long at;           // index in the file's events
    int rank;
    int64_t tid, ts;   // ts in ns
    int is_end;
    const char *name;  // NULL for an E without one
    json_t *args;
} be_event;

static int cmp_be(const void *a, const void *b) {
    const be_event *x = a, *y = b;
    if (x->rank != y->rank) return x->rank < y->rank ? -1 : 1;
    if (x->tid != y->tid) return x->tid < y->tid ? -1 : 1;
    if (x->ts != y->ts) return x->ts < y->ts ? -1 : 1;
    return x->at < y->at ? -1 : x->at > y->at;  // file order within one timestamp
}

// The B/E events as ranges: each E closes the latest open B of its thread (its name, when
// given, is not checked: Chrome's viewer pairs the same way); an E with nothing open and a
// B never closed are dropped and counted. The range's args are the B's, updated with the E's.
typedef struct be_pair {
    const be_event *b, *e;
} be_pair;

static int cmp_pair(const void *a, const void *b) {
    long x = ((const be_pair *)a)->b->at, y = ((const be_pair *)b)->b->at;
    return x < y ? -1 : x > y;
}

// The B/E events as ranges: each E closes the latest open B of its thread (its name, when
// given, is not checked: Chrome's viewer pairs the same way); an E with nothing open and a
// B never closed are dropped and counted. The range's args are the B's, updated with the
// E's. Ranges are added in their B's file order, as a file of X events lists them.
static int pair_begin_end(tb_rt *rt, tb_vec *be, tb_rt_drops *drops) {
    be_event *v = be->items;
    size_t n = be->len;
    if (n == 0) return 0;  // (qsort takes no NULL array)
    qsort(v, n, sizeof *v, cmp_be);
    size_t *stack = tb_xmalloc((n + 1) * sizeof *stack, "open ranges"), depth = 0;
    tb_vec pairs;
    tb_vec_init(&pairs, sizeof(be_pair), "begin/end pairs");
    for (size_t i = 0; i <= n; i++) {
        // a new thread (or the end): whatever is still open there was never closed
        if (i == n || (i > 0 && (v[i].rank != v[i - 1].rank || v[i].tid != v[i - 1].tid))) {
            for (size_t k = 0; k < depth; k++) tb_rt_drop(drops, "\"B\" never closed by an \"E\"", v[stack[k]].at);
            depth = 0;
        }
        if (i == n) break;
        if (!v[i].is_end)
            stack[depth++] = i;
        else if (!depth)
            tb_rt_drop(drops, "\"E\" with no open \"B\" on its thread", v[i].at);
        else
            *(be_pair *)tb_vec_push(&pairs) = (be_pair){&v[stack[--depth]], &v[i]};
    }
    free(stack);
    if (pairs.len) qsort(pairs.items, pairs.len, sizeof(be_pair), cmp_pair);
    for (size_t k = 0; k < pairs.len; k++) {
        const be_event *b = TB_VEC_AT(&pairs, be_pair, k).b, *e = TB_VEC_AT(&pairs, be_pair, k).e;
        json_t *args = b->args;
        if (e->args && json_object_size(e->args)) {
            if (args) {
                args = json_deep_copy(args);
                json_object_update(args, e->args);
                tb_rt_keep_root(rt, args);  // owned with the documents
            } else {
                args = e->args;
            }
        }
        tb_rt_add_event(rt, b->name, b->rank, b->tid, b->ts, e->ts - b->ts, args);
    }
    int added = (int)pairs.len;
    tb_vec_free(&pairs);
    return added;
}

// An event's args, kept with the map's documents when a reader of the map looks at them: a
// communicator call's (args.op, bytes, group and its members: map.c, map_report.c, walk.c,
// walk_origin.c; a trace of another tool may name the op only in the range's name). The
// others are not kept: the file is read one event at a time, never held whole.
static json_t *kept_args(tb_rt *rt, json_t *args) {
    if (!json_is_object(args) ||
        (!json_object_get(args, "op") && !json_object_get(args, "bytes") && !json_object_get(args, "group")))
        return NULL;
    tb_rt_keep_root(rt, json_incref(args));
    return args;
}

typedef struct chrome_read {
    tb_rt *rt;
    tb_rt_drops drops;
    tb_vec be;  // of be_event
    int n;      // ranges added
} chrome_read;

static int chrome_event(json_t *e, size_t i, void *ud, tb_error *err) {
    (void)err;
    chrome_read *c = ud;
    const char *ph = json_string_value(json_object_get(e, "ph"));
    json_t *jname = json_object_get(e, "name");
    const char *name = json_string_value(jname);
    json_t *ts = json_object_get(e, "ts"), *dur = json_object_get(e, "dur");
    // ranges: complete events (X), and begin/end pairs (B, E); metadata, instants,
    // counters, async and flow events are not ranges of a thread
    if (!ph || (strcmp(ph, "X") && strcmp(ph, "B") && strcmp(ph, "E"))) return 0;
    int is_x = ph[0] == 'X', is_end = ph[0] == 'E';
    // an event the map cannot use: counted and named, never silently lost (an E need
    // not name its range)
    const char *bad = !name && !(is_end && !jname) ? (jname ? "with a non-string name" : "without a name")
                      : !ts                          ? "without a ts"
                      : !json_is_number(ts)          ? (json_is_string(ts) ? "with a string ts"
                                                                           : "with a non-number ts")
                      : is_x && !dur                 ? "\"X\" without a dur"
                      : is_x && !json_is_number(dur) ? (json_is_string(dur) ? "with a string dur"
                                                                            : "with a non-number dur")
                      : is_x && json_number_value(dur) < 0 ? "with a negative dur"
                                                           : NULL;
    if (bad) {
        tb_rt_drop(&c->drops, bad, (long)i);
        return 0;
    }
    json_t *pid = json_object_get(e, "pid"), *tid = json_object_get(e, "tid");
    int rank = json_is_integer(pid) ? (int)json_integer_value(pid) : 0;
    int64_t t = json_is_integer(tid) ? (int64_t)json_integer_value(tid)
                : json_is_string(tid) ? (int64_t)(tb_strhash(json_string_value(tid)) >> 1)
                                      : 0;
    json_t *args = json_object_get(e, "args");
    if (!is_x) {
        // kept past this event: its name and args (a B's are the range's, updated with its E's)
        if (name) tb_rt_keep_root(c->rt, json_incref(jname));
        json_t *kept = json_is_object(args) ? json_incref(args) : NULL;
        if (kept) tb_rt_keep_root(c->rt, kept);
        *(be_event *)tb_vec_push(&c->be) = (be_event){(long)i, rank, t, us_to_ns(ts), is_end, name, kept};
        return 0;
    }
    tb_rt_add_event(c->rt, name, rank, t, us_to_ns(ts), us_to_ns(dur), kept_args(c->rt, args));
    c->n++;
    return 0;
}

int tb_rt_load_chrome(tb_rt *rt, const char *path, tb_error *err) {
    chrome_read c = {.rt = rt};
    tb_vec_init(&c.be, sizeof(be_event), "begin and end events");
    json_t *top = NULL;
    if (tb_trace_read(path, chrome_event, &c, &top, err) != 0) {
        tb_vec_free(&c.be);
        return -1;
    }
    tb_rt_note_backend(rt, json_string_value(json_object_get(json_object_get(top, "distributedInfo"), "backend")));
    json_decref(top);
    c.n += pair_begin_end(rt, &c.be, &c.drops);
    tb_vec_free(&c.be);
    tb_rt_note_file(rt, path, "chrome", c.n);
    tb_rt_note_drops(rt, path, &c.drops);
    return 0;
}
