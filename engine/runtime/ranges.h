// ranges.h — ranges: the one instrumentation primitive (docs/ARCHITECTURE.md, "Observability").
//
//   TB_RANGE_PUSH("layer.%d.mlp.fc2", l);   ... work ...   TB_RANGE_POP();
//
// A range name is a string literal or a printf-style pattern with integer arguments, so
// the source indexer can match a runtime name back to the site that produced it. Each
// push/pop pair is
//   - an NVTX range (nvtxRangePushA / nvtxRangePop) when the NVTX3 headers were found,
//     so Nsight Systems shows the same names, and
//   - a complete ("X") event in the trace of the rank that owns the calling thread,
//     written as Chrome trace JSON (Perfetto, chrome://tracing, Holistic Trace Analysis),
//     with the thread's CPU time beside the wall time (the format's "tts" and "tdur").
//
// Ranges follow NVTX's model: a per-thread stack. A rank thread binds its rank's tb_ranges
// once (tb_ranges_bind); TB_RANGE_PUSH/POP then need no argument. A thread with no bound
// trace still emits NVTX ranges and records nothing. Ranges on one thread nest by
// construction: an event is opened at push and closed by the matching pop.
//
// The trace's own buffers are instrumentation, not model state: they are plain malloc'd
// and deliberately kept out of the tagged allocator's figures, as a profiler's buffers are
// kept out of the memory it reports. They are bounded: a range's name is kept once however
// often it recurs, and once spill_events events are held, the next tb_ranges_spill (between
// steps, every range closed) writes them, in order, to an unlinked file in the spill
// directory, from which the trace writer streams them back: a run of any length holds at most
// spill_events events a track (64 bytes each, plus their communicator figures) and writes its
// trace without building it in memory.
#ifndef TB_CORE_RANGES_H
#define TB_CORE_RANGES_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "core/error.h"
#include "core/intern.h"

#define TB_RANGES_MAX_DEPTH 64
#define TB_RANGE_NAME_MAX 128
#define TB_RANGES_SPILL_EVENTS 65536  // events held before a spill writes them out

typedef struct tb_range_event {
    uint32_t name;        // offset of the NUL-terminated name in the string arena
    uint32_t depth;       // nesting depth at push (0 = outermost)
    int64_t start_ns;     // relative to the trace origin
    int64_t dur_ns;       // -1 while open
    // the calling thread's CPU time (CLOCK_THREAD_CPUTIME_ID) at push, and spent until pop:
    // what the range cost this thread on a core of its own, whatever else shared the core —
    // the durations a schedule's replay runs on (docs/ARCHITECTURE.md, "Observability"). Its
    // OpenMP/BLAS workers' time is not in it (a rank has none when ranks share a process).
    int64_t cpu_start_ns, cpu_dur_ns;
    int64_t arg_step;     // -1 = none; otherwise written as args.step
    int64_t arg_microbatch;
    int64_t comm;         // index in tb_ranges.comm_args, -1 = not a communicator call
} tb_range_event;

// The figures a communicator call's range carries in its args.
typedef struct tb_range_comm_args {
    const char *group;    // static strings
    const char *op;
    const char *dtype;
    int group_id, group_size, group_index;
    uint64_t seq;
    size_t count, bytes;
    int peer;             // -1: none
    int64_t splits;       // all-to-all: index in tb_ranges.splits of its 2 · group_size element counts
                          // (what it sends to each member, then what it receives from each); -1: none
} tb_range_comm_args;

typedef struct tb_ranges {
    int rank;
    int world_size;
    char rank_label[96];  // e.g. "rank 0 (tp0 cp0 dp0 pp0)"
    int64_t origin_ns;    // CLOCK_MONOTONIC time that maps to ts = 0
    int recording;        // 0: NVTX only, no events kept

    tb_range_event *events;
    size_t nevents, cap_events;
    tb_intern names;  // the events' names, each once (a step's ranges repeat every step)
    tb_range_comm_args *comm_args;
    size_t ncomm, cap_comm;
    size_t *splits;
    size_t nsplits, cap_splits;

    // the spill (tb_ranges_spill): chunks of closed events, their communicator figures and
    // split sizes, as held in memory; created on the first spill, unlinked at once
    FILE *spill;
    char spill_dir[4096];  // where the spill file goes ("": the system's temporary directory)
    size_t spill_events;   // the events held before a spill (TB_RANGES_SPILL_EVENTS; tests lower it)
    size_t nspilled;       // events written out so far
    tb_error spill_err;    // the first spill's failure, reported by the writer too
    int spill_failed;

    size_t stack[TB_RANGES_MAX_DEPTH];  // indices of the open events
    char stack_names[TB_RANGES_MAX_DEPTH][TB_RANGE_NAME_MAX];
    int depth;
    // guards stack_names and depth: another thread reads them (tb_ranges_stack_string, the
    // hang report of a peer's watchdog or communication thread) while this one runs
    pthread_mutex_t stack_mu;
} tb_ranges;

int64_t tb_now_ns(void);  // CLOCK_MONOTONIC in ns
int64_t tb_thread_cpu_ns(void);  // CLOCK_THREAD_CPUTIME_ID of the calling thread, in ns

void tb_ranges_init(tb_ranges *t, int rank, int world_size, const char *rank_label, int64_t origin_ns,
                   int recording);
void tb_ranges_free(tb_ranges *t);

// Where t's spill file goes: the run directory, beside the trace it becomes.
void tb_ranges_spill_to(tb_ranges *t, const char *dir);
// By the thread t is bound to, or with that thread idle and what it wrote visible to the caller
// (ddp_trace_spill), with no range open (between steps, outside any timed window): writes
// the events held out to the spill file once spill_events or more are held; otherwise does
// nothing. Returns 0, or -1 with err naming the spill file and why (the trace writer then
// fails with the same message). NULL or a t not recording: 0.
int tb_ranges_spill(tb_ranges *t, tb_error *err);

// Binds t to the calling thread (NULL unbinds). Ranges pushed on this thread go to t.
void tb_ranges_bind(tb_ranges *t);
tb_ranges *tb_ranges_current(void);

void tb_range_push(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void tb_range_pop(void);
// Attaches step / microbatch numbers (-1: leave out) to the innermost open range of this thread.
void tb_range_annotate(int64_t step, int64_t microbatch);
// Attaches a communicator call's figures to the innermost open range of this thread.
void tb_range_annotate_comm(const tb_range_comm_args *args);
// The split sizes of the communicator call the innermost range annotates (after
// tb_range_annotate_comm): n elements sent to each member, n received from each; the trace
// writes them as args.send_splits and args.recv_splits.
void tb_range_annotate_splits(const size_t *send, const size_t *recv, int n);

#define TB_RANGE_PUSH(...) tb_range_push(__VA_ARGS__)
#define TB_RANGE_POP() tb_range_pop()

// Writes the Chrome trace JSON (temp + rename; the spilled events first, then those held, in
// the order they were pushed; one event per line). Open ranges are an error: every push must
// have been popped.
int tb_ranges_write_chrome(const tb_ranges *t, const char *path, tb_error *err);
// The same with a second thread's track of the same rank (tid 1, named second_name: the
// DistributedDataParallel communication thread); second may be NULL.
int tb_ranges_write_chrome_tracks(const tb_ranges *t, const tb_ranges *second, const char *second_name,
                                  const char *path, tb_error *err);

// The current range stack of this trace, outermost first, joined by " > " (for reports).
void tb_ranges_stack_string(const tb_ranges *t, char *buf, size_t len);

#endif
