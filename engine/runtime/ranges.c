#include "runtime/ranges.h"

#include <errno.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

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
    t->spill_events = TB_RANGES_SPILL_EVENTS;
    pthread_mutex_init(&t->stack_mu, NULL);
}

void tb_ranges_free(tb_ranges *t) {
    free(t->events);
    tb_intern_free(&t->names);
    free(t->comm_args);
    free(t->splits);
    if (t->spill) fclose(t->spill);
    t->events = NULL;
    t->comm_args = NULL;
    t->splits = NULL;
    t->spill = NULL;
    pthread_mutex_destroy(&t->stack_mu);
}

void tb_ranges_spill_to(tb_ranges *t, const char *dir) {
    if (tb_path_format(t->spill_dir, sizeof t->spill_dir, &t->spill_err, "%s", dir) != 0) t->spill_failed = 1;
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
        e->name = tb_intern_add(&t->names, name, (size_t)n);
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

// ---------------------------------------------------------------------------------------
// The spill: each chunk is a header, then the events, their communicator figures and split
// sizes as held (indices into the chunk's own arrays; the names' offsets into t->names,
// which is never spilled; the figures' group/op/dtype static strings of this process).

typedef struct spill_chunk {
    uint64_t nevents, ncomm, nsplits;
} spill_chunk;

static int spill_open(tb_ranges *t, tb_error *err) {
    if (!t->spill_dir[0]) {
        t->spill = tmpfile();
        return t->spill ? 0
                        : tb_fail(err, "trace of rank %d: cannot create its spill file in the temporary directory: %s",
                                  t->rank, strerror(errno));
    }
    char path[sizeof t->spill_dir + 64];
    if (tb_path_format(path, sizeof path, err, "%s/.trace.rank-%05d.spill.XXXXXX", t->spill_dir, t->rank) != 0)
        return -1;
    int fd = mkstemp(path);
    if (fd < 0) return tb_fail(err, "%s: cannot create the trace's spill file: %s", path, strerror(errno));
    unlink(path);  // it lives while it is open: nothing is left behind, whatever ends the run
    t->spill = fdopen(fd, "w+b");
    if (!t->spill) {
        close(fd);
        return tb_fail(err, "%s: cannot open the trace's spill file: %s", path, strerror(errno));
    }
    return 0;
}

int tb_ranges_spill(tb_ranges *t, tb_error *err) {
    if (!t || !t->recording) return 0;
    if (t->spill_failed) {
        if (err) *err = t->spill_err;
        return -1;
    }
    if (t->nevents == 0 || t->nevents < t->spill_events || t->depth != 0) return 0;
    const spill_chunk h = {t->nevents, t->ncomm, t->nsplits};
    tb_error e;
    int rc = t->spill || spill_open(t, &e) == 0 ? 0 : -1;
    // at the end of the file: a trace written before (put_track) left it where it read
    if (rc == 0 && (fseek(t->spill, 0, SEEK_END) != 0 || fwrite(&h, sizeof h, 1, t->spill) != 1 ||
                    fwrite(t->events, sizeof *t->events, t->nevents, t->spill) != t->nevents ||
                    (t->ncomm && fwrite(t->comm_args, sizeof *t->comm_args, t->ncomm, t->spill) != t->ncomm) ||
                    (t->nsplits && fwrite(t->splits, sizeof *t->splits, t->nsplits, t->spill) != t->nsplits) ||
                    fflush(t->spill) != 0))
        rc = tb_fail(&e, "trace of rank %d: cannot write %zu events to its spill file%s%s: %s", t->rank, t->nevents,
                     t->spill_dir[0] ? " in " : "", t->spill_dir, strerror(errno));
    if (rc != 0) {
        t->spill_failed = 1;
        t->spill_err = e;
        if (err) *err = e;
        return -1;
    }
    t->nspilled += t->nevents;
    t->nevents = t->ncomm = t->nsplits = 0;
    return 0;
}

// ---------------------------------------------------------------------------------------
// The writer: one event per line, streamed

typedef struct trace_out {
    FILE *f;
    size_t n;        // events written
    int unencoded;   // an event jansson could not encode (out of memory): the trace is not written
} trace_out;

// An event's times are integer nanoseconds written as microseconds. Below 10^15 ns (11.5 days)
// "%.15g" prints the exact decimal ns/1000 (at most 15 significant digits), which reads back as
// the very double it was written from: ns/1000.0, correctly rounded from a ns count below 2^53,
// lies within half an ulp of that decimal, far inside the 15th digit's half unit. So "3708.521"
// is written, not "3708.5210000000002" (17 digits, what any double needs to round-trip): the
// same numbers to every reader, and a TP2 run's trace 14% smaller. An event with a longer time
// is written with 17 digits throughout.
#define TRACE_SHORT_NS 1000000000000000LL
#define TRACE_SHORT_DIGITS 15
#define TRACE_ROUND_TRIP_DIGITS 17  // (also the metadata events', which hold no reals)
static int trace_precision(const tb_range_event *e) {
    const int64_t t[] = {e->start_ns, e->dur_ns, e->cpu_start_ns, e->cpu_dur_ns};
    for (size_t i = 0; i < sizeof t / sizeof *t; i++)
        if (t[i] <= -TRACE_SHORT_NS || t[i] >= TRACE_SHORT_NS) return TRACE_ROUND_TRIP_DIGITS;
    return TRACE_SHORT_DIGITS;
}

static void put_event(trace_out *o, json_t *ev, int precision) {
    char *text = ev ? json_dumps(ev, JSON_COMPACT | JSON_REAL_PRECISION(precision)) : NULL;
    json_decref(ev);
    if (!text) {
        o->unencoded = 1;
        return;
    }
    fprintf(o->f, "%s\n%s", o->n++ ? "," : "", text);
    free(text);
}

static void put_events(trace_out *o, const tb_ranges *t, const tb_range_event *events, size_t n,
                       const tb_range_comm_args *comm_args, const size_t *splits, int tid) {
    for (size_t i = 0; i < n; i++) {
        const tb_range_event *e = &events[i];
        json_t *ev = json_pack("{s:s, s:s, s:s, s:f, s:f, s:f, s:f, s:i, s:i}", "name",
                               tb_intern_str(&t->names, e->name),
                               "cat", "range", "ph", "X", "ts", (double)e->start_ns / 1000.0, "dur",
                               (double)e->dur_ns / 1000.0, "tts", (double)e->cpu_start_ns / 1000.0, "tdur",
                               (double)e->cpu_dur_ns / 1000.0, "pid", t->rank, "tid", tid);
        json_t *args = json_pack("{s:i}", "depth", (json_int_t)e->depth);
        if (e->arg_step >= 0) json_object_set_new(args, "step", json_integer(e->arg_step));
        if (e->arg_microbatch >= 0)
            json_object_set_new(args, "microbatch", json_integer(e->arg_microbatch));
        if (e->comm >= 0) {
            const tb_range_comm_args *c = &comm_args[e->comm];
            json_t *figures = json_pack("{s:s, s:s, s:s, s:i, s:i, s:i, s:I, s:I, s:I, s:i, s:s}", "group",
                                               c->group, "op", c->op, "dtype", c->dtype, "group_id", c->group_id,
                                               "group_size", c->group_size, "group_index", c->group_index, "seq",
                                               (json_int_t)c->seq, "count", (json_int_t)c->count, "bytes",
                                               (json_int_t)c->bytes, "peer", c->peer, "rank", t->rank_label);
            json_object_update(args, figures);
            json_decref(figures);
            if (c->splits >= 0) {
                json_object_set_new(args, "send_splits", counts_json(splits + c->splits, c->group_size));
                json_object_set_new(args, "recv_splits",
                                    counts_json(splits + c->splits + c->group_size, c->group_size));
            }
        }
        json_object_set_new(ev, "args", args);
        put_event(o, ev, trace_precision(e));
    }
}

// A track's events: its spill file's chunks, then those held. 0, or -1 with err set.
static int put_track(trace_out *o, const tb_ranges *t, int tid, const char *path, tb_error *err) {
    if (t->spill_failed) return tb_fail(err, "%s: %s", path, t->spill_err.msg);
    if (t->spill) {
        if (fflush(t->spill) != 0 || fseek(t->spill, 0, SEEK_SET) != 0)
            return tb_fail(err, "%s: cannot read the spilled events back: %s", path, strerror(errno));
        for (size_t read = 0; read < t->nspilled;) {
            spill_chunk h;
            tb_range_event *events = NULL;
            tb_range_comm_args *comm = NULL;
            size_t *splits = NULL;
            int ok = fread(&h, sizeof h, 1, t->spill) == 1 && h.nevents > 0 && h.nevents <= t->nspilled - read;
            if (ok) {
                events = tb_xreallocarray(NULL, h.nevents, sizeof *events, "spilled range events");
                comm = tb_xreallocarray(NULL, h.ncomm + 1, sizeof *comm, "spilled communicator figures");
                splits = tb_xreallocarray(NULL, h.nsplits + 1, sizeof *splits, "spilled split sizes");
                ok = fread(events, sizeof *events, h.nevents, t->spill) == h.nevents &&
                     fread(comm, sizeof *comm, h.ncomm, t->spill) == h.ncomm &&
                     fread(splits, sizeof *splits, h.nsplits, t->spill) == h.nsplits;
            }
            if (ok) put_events(o, t, events, h.nevents, comm, splits, tid);
            free(events);
            free(comm);
            free(splits);
            if (!ok)
                return tb_fail(err, "%s: the spilled events of rank %d end early (%zu of %zu read back)", path,
                               t->rank, read, t->nspilled);
            read += h.nevents;
        }
    }
    put_events(o, t, t->events, t->nevents, t->comm_args, t->splits, tid);
    return 0;
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
    tb_atomic_file a;
    if (tb_atomic_open(&a, path, err) != 0) return -1;
    trace_out o = {a.f, 0, 0};
    fputs("{\"traceEvents\": [", a.f);
    put_event(&o, metadata_event("process_name", t->rank, 0, t->rank_label), TRACE_ROUND_TRIP_DIGITS);
    put_event(&o, metadata_event("thread_name", t->rank, 0, "engine"), TRACE_ROUND_TRIP_DIGITS);
    int rc = put_track(&o, t, 0, path, err);
    if (rc == 0 && second) {
        put_event(&o, metadata_event("thread_name", t->rank, 1, second_name), TRACE_ROUND_TRIP_DIGITS);
        rc = put_track(&o, second, 1, path, err);
    }
    json_t *info = json_pack("{s:s, s:i, s:i}", "backend", "local", "rank", t->rank, "world_size", t->world_size);
    char *text = info ? json_dumps(info, JSON_COMPACT) : NULL;
    json_decref(info);
    if (rc == 0 && (o.unencoded || !text))
        rc = tb_fail(err, "%s: an event could not be encoded as JSON (out of memory)", path);
    if (rc == 0) fprintf(a.f, "\n],\n\"displayTimeUnit\": \"ms\",\n\"distributedInfo\": %s}\n", text);
    free(text);
    if (rc != 0) {
        tb_atomic_close(&a, 0, err);
        return -1;
    }
    return tb_atomic_close(&a, 1, err);
}
