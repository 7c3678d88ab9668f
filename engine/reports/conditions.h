// conditions.h — the conditions a run was measured under, so that a number derived from
// time can be judged (docs/ARCHITECTURE.md, "The run directory and the record"): how many
// threads each rank really ran, whether ranks × threads oversubscribed the cores, how much
// CPU time the run got against its wall time, and how much the rest of the host took
// meanwhile (other processes, and the hypervisor's steal), from /proc.
//
// Each metrics line carries the step's figures ("conditions": process_cpu_ms, host_busy_ms,
// other_processes_ms, steal_ms, run_queue_wait_ms: the rank thread's wait for a core); conditions.json (written by rank 0 at the end) the run's:
//   {"threads": {"ranks", "openmp_per_rank", "blas_per_rank", "total", "chosen_by",
//                "openmp_wait_policy", "openmp_wait_policy_source", "openmp_wait_policy_reason"},
//    "cores": {"online", "usable", "occupied": min(total, usable)},
// total = ranks × (max(openmp_per_rank, blas_per_rank) + background_per_rank): a rank's
// background threads (the --async-save checkpoint writer, the --overlap-grad-reduce
// communication thread; "background" names them) compute beside its kernels, so they count
// as if they ran all the time: a run is judged oversubscribed rather than trusted when they
// may have taken a core from the kernels.
//    "oversubscribed": total > usable,
//    "mpi_collectives": under mpirun, how a collective across processes ran ("native": MPI's
//        own, "exact": the group-order algorithm; --mpi-collectives), null in one process,
//    "scheduler": {"run_queue_wait_s", "run_queue_share", "measured", "unmeasured"}:
//        what oversubscription (or anything else) cost, measured rather than counted: the
//        time a rank's threads spent runnable but waiting for a core (the kernel's run_delay,
//        /proc/thread-self/schedstat) — the rank thread's between the first and last sample
//        plus its background threads' — for the rank that waited most, and that over wall_s.
//        null where a thread of the run is not measured (OpenMP or OpenBLAS workers: more
//        than one kernel thread per rank) or the kernel does not report it; "unmeasured"
//        says which.
//    "wall_s", "process_cpu_s", "cpu_share": process CPU / (wall × min(total, usable)),
//    "host": {"busy_s", "other_processes_s", "other_processes_share", "steal_s",
//             "loadavg_start", "loadavg_end", "stat_tick_s"}}
// The host's figures are /proc/stat's jiffies (stat_tick_s = 1/USER_HZ s on each CPU): a step
// of a few ms reads them as 0 or one jiffy; a run's totals are what to judge it by, and only
// when its window is long enough for a jiffy per CPU to be small beside the thresholds
// (experiments/prove/stability.c, window_resolves).
#ifndef TB_REPORTS_CONDITIONS_H
#define TB_REPORTS_CONDITIONS_H

#include <jansson.h>

#include "core/error.h"

// One reading of the clocks: this process's CPU time, the host's busy and steal time.
typedef struct conditions_sample {
    double wall_s;          // CLOCK_MONOTONIC
    double process_cpu_s;   // CLOCK_PROCESS_CPUTIME_ID: every thread of this process
    double host_busy_s;     // /proc/stat user+nice+system+irq+softirq over all CPUs; -1: unreadable
    double host_steal_s;    // /proc/stat steal; -1: unreadable
    double loadavg1;        // /proc/loadavg; -1: unreadable
    // the calling thread's run_delay (tb_thread_run_delay_s, core/clock.h) read just before the
    // clock (run_delay_s: a window that ends here) and just after it (run_delay_after_s: one
    // that starts here), so that a window's wait, b.run_delay_s − a.run_delay_after_s, lies
    // inside its wall time even when the thread waited for a core between the two reads
    double run_delay_s, run_delay_after_s;
} conditions_sample;

// The calling thread's wait for a core between samples a and b (which it took), in seconds;
// -1 when the kernel does not say.
double conditions_run_delay_between_s(const conditions_sample *a, const conditions_sample *b);

void conditions_sample_now(conditions_sample *s);
// The figures between two samples, for a metrics line.
json_t *conditions_step_json(const conditions_sample *from, const conditions_sample *to);
// The threads a run's ranks ran with, and why (backend/cpu/kernels.h, the thread policy).
typedef struct conditions_threads {
    int ranks, openmp_per_rank, blas_per_rank;
    int background_per_rank;                 // threads a rank runs beside its kernels
    const char *background;                  // what they are, e.g. "async checkpoint writer"; "" for none
    const char *chosen_by;                   // e.g. "--num-threads 2", "1 per rank thread"
    const char *wait_policy, *wait_source;   // cpu_openmp_wait_policy's
    const char *wait_reason;                 // cpu_openmp_wait_policy_reason's ("" for none)
    double run_others_cpu_s;                 // CPU time of this run's other processes (mpirun), counted as the run's
    double run_queue_wait_s;                 // scheduler.run_queue_wait_s; -1: not measured
    const char *run_queue_unmeasured;        // the threads it leaves out, "" for none
    const char *mpi_collectives;             // under mpirun: "native" or "exact" (--mpi-collectives); NULL: one process
} conditions_threads;

// conditions.json in run_dir.
int conditions_write(const char *run_dir, const conditions_threads *threads, const conditions_sample *start,
                     const conditions_sample *end, tb_error *err);

#endif
