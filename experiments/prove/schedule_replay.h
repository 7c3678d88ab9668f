// schedule_replay.h — a run's steps replayed on one core per rank, from the per-op thread CPU
// time its traces record (docs/ARCHITECTURE.md, "Replayed timings").
//
// Wall clock of 8 rank threads on 2 cores measures the time-sharing, not the schedule. Every
// range of a rank thread records the CPU time the thread spent in it (trace.rank-r.json's
// "tts"/"tdur", CLOCK_THREAD_CPUTIME_ID): what the work cost with a core of its own. The
// replay runs each step again as a discrete-event simulation on those costs, one clock per
// rank, as profiled-op simulators do:
//   - a rank's thread is its own core: its work between two communicator calls takes the
//     thread CPU time the trace recorded between them;
//   - a collective (matched across the group's members by its order among the member's
//     collectives on that group in the step) starts when its last member enters and ends,
//     on each member, the member's own recorded CPU time in the call later;
//   - a point-to-point message is eager, as the local and MPI backends' sends are: a send
//     ends its own CPU time after it starts; the k-th recv on a group from a peer (FIFO per
//     pair, MPI's non-overtaking rule) starts when both it and the k-th send to it have
//     been reached, and ends its own CPU time after the later of its start and the send's end;
//   - each step starts every rank at 0 (a step's ranks are not carried into the next);
//   - --overlap-grad-reduce's communication thread is a core of its own beside its rank's:
//     it takes the buckets in the order the rank thread queued them (ddp.start_grad_sync.b,
//     on the rank thread's clock), each bucket (ddp.bucket.b: its CPU time, its calls matched
//     with the peers' communication threads as above) starting no earlier than it was
//     queued and no earlier than the previous one ended; the rank thread's
//     ddp.finish_grad_sync waits until every bucket it queued has ended.
// The gaps a rank waits in the replay are its bubble; the step takes the slowest rank's time.
//
// Not modelled: memory bandwidth and caches shared by cores (a rank's CPU time is what it
// cost beside the other ranks of the recorded run, on a core it may have shared — with a
// communication thread, beside its own rank's compute too); transfer time beyond the CPU time
// the calls spent copying and reducing (the local backend's transfers are those copies); the
// hand-over's wake-up (a thread's resumption after a condition variable, in no thread's CPU
// time); sleeps, which cost no CPU time (so runs with --debug-slow-data or --debug-slow-link
// are refused), and work on other threads (--overlap-param-gather's gathers, queued in one
// step and waited for in the next; OpenMP or BLAS worker threads of a rank; a device's
// kernels): refused, "not supported yet".
#ifndef TB_EXPERIMENTS_SCHEDULE_REPLAY_H
#define TB_EXPERIMENTS_SCHEDULE_REPLAY_H

#include <jansson.h>

#include "core/error.h"

// One step as replayed, and as the wall clock recorded it.
typedef struct tb_replay_step {
    long long step;
    double step_ms;          // the slowest rank's replayed train_step
    double wall_step_ms;     // the slowest rank's recorded train_step (dur)
    int slowest_rank;        // of the replay (the lowest such rank)
    double bubble_fraction;  // mean over the stages of 1 - compute / schedule span (below)
    double stage_imbalance;  // slowest / fastest stage compute
    double exposed_comm_ms;  // the slowest rank's communicator calls in finalize_model_grads and
                             // optimizer and its ddp.finish_grad_sync: their own CPU time and the
                             // waits for peers (or the communication thread) before them
} tb_replay_step;

// A stage's compute is the replayed span of its depth-1 forward and backward ranges summed;
// its schedule span runs from the first to the last of its depth-1 forward, backward and
// pipeline send/recv ranges (comm.pp.*, comm.pp_grad.*): the engine's pipeline_ms.

// Replays every step the world's traces (traces[r]: rank r's trace.rank-r.json, parsed;
// names[r] its file, for messages) hold. stage_ranks[s] (s < pp): the rank of pipeline stage s
// whose stages are reported (pipeline.json's: rank 0's pipeline group). *steps (malloc'd) in
// rank 0's step order, *nsteps of them. Returns 0, or -1 with err naming the file, the event
// and the value (a trace without tts/tdur, work on a thread it does not replay, a call that never
// matches).
int tb_replay_steps(json_t *const *traces, const char *const *names, int world, const int *stage_ranks, int pp,
                    tb_replay_step **steps, int *nsteps, tb_error *err);

// A rank's trace as the replay keeps it: each complete event's name, times and the args the
// replay reads, not the whole document. tb_replay_trace_read reads the file one event at a
// time (a long run's trace is hundreds of MB: core/trace_events.h).
typedef struct tb_replay_trace tb_replay_trace;
int tb_replay_trace_read(const char *path, tb_replay_trace **out, tb_error *err);
void tb_replay_trace_free(tb_replay_trace *t);

// tb_replay_steps on traces read so (names[r]: traces[r]'s file, for messages).
int tb_replay_steps_of(tb_replay_trace *const *traces, const char *const *names, int world, const int *stage_ranks,
                       int pp, tb_replay_step **steps, int *nsteps, tb_error *err);

#endif
