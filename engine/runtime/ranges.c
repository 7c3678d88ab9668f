#include "runtime/ranges.h"

#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/fileio.h"
#include "core/xalloc.h"

#ifdef TB_HAVE_NVTX
#include <nvtx3/nvToolsExt.h>
#endif

static _Thread_local tb_ranges *current_trace;

int64_t tb_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

int64_t tb_thread_cpu_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

void tb_ranges_init(tb_ranges *t, int rank, int world_size, const char *rank_label, int64_t origin_ns,
                   int recording) {
    memset(t, 0, sizeof *t);
    t->rank = rank;
    t->world_size = world_size;
    snprintf(t->rank_label, sizeof t->rank_label, "%s", rank_label);
    t->origin_ns = origin_ns;
    t->recording = recording;
    pthread_mutex_init(&t->stack_mu, NULL);
}

void tb_ranges_free(tb_ranges *t) {
    free(t->events);
    free(t->strings);
    free(t->comm_args);
    free(t->splits);
    t->events = NULL;
    t->strings = NULL;
    t->comm_args = NULL;
    t->splits = NULL;
    pthread_mutex_destroy(&t->stack_mu);
}

void tb_ranges_bind(tb_ranges *t) { current_trace = t; }
tb_ranges *tb_ranges_current(void) { return current_trace; }

static void *grow(void *p, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap) return p;
    size_t c = *cap ? *cap : 1024;
    while (c < need) c *= 2;
    *cap = c;
    return tb_xreallocarray(p, c, elem, "range events");
}

static uint32_t intern(tb_ranges *t, const char *s, size_t n) {
    t->strings = grow(t->strings, &t->cap_strings, t->nstrings + n + 1, 1);
    uint32_t off = (uint32_t)t->nstrings;
    memcpy(t->strings + off, s, n + 1);
    t->nstrings += n + 1;
    return off;
}

#ifdef TB_HAVE_NVTX
// NVTX initialises itself on the first call, unsynchronised: once, before any thread's push
static pthread_once_t nvtx_once = PTHREAD_ONCE_INIT;
static void nvtx_init(void) { nvtxInitialize(NULL); }
#endif

void tb_range_push(const char *fmt, ...) {
    char name[TB_RANGE_NAME_MAX];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(name, sizeof name, fmt, ap);
    va_end(ap);
    if (n < 0) n = 0;
    if (n >= (int)sizeof name) n = sizeof name - 1;
#ifdef TB_HAVE_NVTX
    pthread_once(&nvtx_once, nvtx_init);
    nvtxRangePushA(name);
#endif
    tb_ranges *t = current_trace;
    if (!t) return;
    if (t->depth >= TB_RANGES_MAX_DEPTH) {
        fprintf(stderr, "trace: ranges nested deeper than %d at '%s'\n", TB_RANGES_MAX_DEPTH, name);
        abort();
    }
    pthread_mutex_lock(&t->stack_mu);
    memcpy(t->stack_names[t->depth], name, (size_t)n + 1);
    pthread_mutex_unlock(&t->stack_mu);
    if (t->recording) {
        t->events = grow(t->events, &t->cap_events, t->nevents + 1, sizeof *t->events);
        tb_range_event *e = &t->events[t->nevents];
        e->name = intern(t, name, (size_t)n);
        e->depth = (uint32_t)t->depth;
        e->dur_ns = -1;
        e->arg_step = -1;
        e->arg_microbatch = -1;
        e->comm = -1;
        e->cpu_dur_ns = -1;
        // the CPU window inside the wall window: wall then CPU here, CPU then wall at pop
        e->start_ns = tb_now_ns() - t->origin_ns;
        e->cpu_start_ns = tb_thread_cpu_ns();
        t->stack[t->depth] = t->nevents++;
    }
    pthread_mutex_lock(&t->stack_mu);
    t->depth++;
    pthread_mutex_unlock(&t->stack_mu);
}

void tb_range_pop(void) {
#ifdef TB_HAVE_NVTX
    nvtxRangePop();
#endif
    tb_ranges *t = current_trace;
    if (!t) return;
    if (t->depth == 0) {
        fprintf(stderr, "trace: TB_RANGE_POP without a matching push\n");
        abort();
    }
    pthread_mutex_lock(&t->stack_mu);
    t->depth--;
    pthread_mutex_unlock(&t->stack_mu);
    if (t->recording) {
        tb_range_event *e = &t->events[t->stack[t->depth]];
        e->cpu_dur_ns = tb_thread_cpu_ns() - e->cpu_start_ns;
        e->dur_ns = tb_now_ns() - t->origin_ns - e->start_ns;
    }
}

void tb_range_annotate(int64_t step, int64_t microbatch) {
    tb_ranges *t = current_trace;
    if (!t || !t->recording || t->depth == 0) return;
    tb_range_event *e = &t->events[t->stack[t->depth - 1]];
    e->arg_step = step;
    e->arg_microbatch = microbatch;
}

void tb_range_annotate_comm(const tb_range_comm_args *args) {
    tb_ranges *t = current_trace;
    if (!t || !t->recording || t->depth == 0) return;
    t->comm_args = grow(t->comm_args, &t->cap_comm, t->ncomm + 1, sizeof *t->comm_args);
    t->comm_args[t->ncomm] = *args;
    t->events[t->stack[t->depth - 1]].comm = (int64_t)t->ncomm++;
}

void tb_range_annotate_splits(const size_t *send, const size_t *recv, int n) {
    tb_ranges *t = current_trace;
    if (!t || !t->recording || t->depth == 0 || n <= 0) return;
    int64_t comm = t->events[t->stack[t->depth - 1]].comm;
    if (comm < 0) return;
    t->splits = grow(t->splits, &t->cap_splits, t->nsplits + 2 * (size_t)n, sizeof *t->splits);
    memcpy(t->splits + t->nsplits, send, (size_t)n * sizeof *send);
    memcpy(t->splits + t->nsplits + n, recv, (size_t)n * sizeof *recv);
    t->comm_args[comm].splits = (int64_t)t->nsplits;
    t->nsplits += 2 * (size_t)n;
}

static json_t *counts_json(const size_t *v, int n) {
    json_t *a = json_array();
    for (int i = 0; i < n; i++) json_array_append_new(a, json_integer((json_int_t)v[i]));
    return a;
}

void tb_ranges_stack_string(const tb_ranges *t, char *buf, size_t len) {
    size_t used = 0;
    buf[0] = '\0';
    if (!t) return;
    pthread_mutex_lock((pthread_mutex_t *)&t->stack_mu);
    for (int i = 0; i < t->depth && used < len; i++)
        used += (size_t)snprintf(buf + used, len - used, "%s%s", i ? " > " : "", t->stack_names[i]);
    pthread_mutex_unlock((pthread_mutex_t *)&t->stack_mu);
}

static json_t *metadata_event(const char *what, int pid, int tid, const char *name) {
    return json_pack("{s:s, s:s, s:i, s:i, s:{s:s}}", "name", what, "ph", "M", "pid", pid, "tid", tid,
                     "args", "name", name);
}

static void append_events(json_t *events, const tb_ranges *t, int tid) {
    for (size_t i = 0; i < t->nevents; i++) {
        const tb_range_event *e = &t->events[i];
        json_t *ev = json_pack("{s:s, s:s, s:s, s:f, s:f, s:f, s:f, s:i, s:i}", "name", t->strings + e->name,
                               "cat", "range", "ph", "X", "ts", (double)e->start_ns / 1000.0, "dur",
                               (double)e->dur_ns / 1000.0, "tts", (double)e->cpu_start_ns / 1000.0, "tdur",
                               (double)e->cpu_dur_ns / 1000.0, "pid", t->rank, "tid", tid);
        json_t *args = json_pack("{s:i}", "depth", (json_int_t)e->depth);
        if (e->arg_step >= 0) json_object_set_new(args, "step", json_integer(e->arg_step));
        if (e->arg_microbatch >= 0)
            json_object_set_new(args, "microbatch", json_integer(e->arg_microbatch));
        if (e->comm >= 0) {
            const tb_range_comm_args *c = &t->comm_args[e->comm];
            json_t *figures = json_pack("{s:s, s:s, s:s, s:i, s:i, s:i, s:I, s:I, s:I, s:i, s:s}", "group",
                                               c->group, "op", c->op, "dtype", c->dtype, "group_id", c->group_id,
                                               "group_size", c->group_size, "group_index", c->group_index, "seq",
                                               (json_int_t)c->seq, "count", (json_int_t)c->count, "bytes",
                                               (json_int_t)c->bytes, "peer", c->peer, "rank", t->rank_label);
            json_object_update(args, figures);
            json_decref(figures);
            if (c->splits >= 0) {
                json_object_set_new(args, "send_splits", counts_json(t->splits + c->splits, c->group_size));
                json_object_set_new(args, "recv_splits",
                                    counts_json(t->splits + c->splits + c->group_size, c->group_size));
            }
        }
        json_object_set_new(ev, "args", args);
        json_array_append_new(events, ev);
    }
}

int tb_ranges_write_chrome(const tb_ranges *t, const char *path, tb_error *err) {
    return tb_ranges_write_chrome_tracks(t, NULL, NULL, path, err);
}

int tb_ranges_write_chrome_tracks(const tb_ranges *t, const tb_ranges *second, const char *second_name,
                                  const char *path, tb_error *err) {
    if (t->depth != 0)
        return tb_fail(err, "%s: %d range(s) still open (innermost '%s')", path, t->depth,
                       t->stack_names[t->depth - 1]);
    if (second && second->depth != 0)
        return tb_fail(err, "%s: %d range(s) of track '%s' still open (innermost '%s')", path, second->depth,
                       second_name, second->stack_names[second->depth - 1]);
    json_t *events = json_array();
    json_array_append_new(events, metadata_event("process_name", t->rank, 0, t->rank_label));
    json_array_append_new(events, metadata_event("thread_name", t->rank, 0, "engine"));
    append_events(events, t, 0);
    if (second) {
        json_array_append_new(events, metadata_event("thread_name", t->rank, 1, second_name));
        append_events(events, second, 1);
    }
    json_t *root = json_pack("{s:o, s:s, s:{s:s, s:i, s:i}}", "traceEvents", events, "displayTimeUnit",
                             "ms", "distributedInfo", "backend", "local", "rank", t->rank,
                             "world_size", t->world_size);
    int rc = tb_write_json_atomic(path, root, err);
    json_decref(root);
    return rc;
}
