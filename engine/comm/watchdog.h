// watchdog.h — what happens when a communicator call does not complete: the hang report.
//
// The rank whose call timed out writes its process's part of the report — one
// hang.rank-NNNNN.json per rank of the process: coordinates, groups, step, pending call,
// last completed call and flight-recorder tail — merges every part in the run directory
// into hang.json (core/failure_report.h) and prints the merged report's summary on stderr;
// the communicator then fails the rank (exit status 4 for the run), which aborts the
// process's world, so nothing hangs forever. With one process (rank threads) the part of
// every rank is there and hang.json is whole at once; under mpirun each process that times
// out adds its ranks, and the ranks of a process that wrote nothing (killed) are named
// absent, with what their peers saw them complete.
//
// Under mpirun a process also reports when it is terminated: mpirun ends a job whose process
// failed or died by sending SIGTERM to the others (SIGKILL a second later, Open MPI's
// odls_base_sigkill_timeout), and a process blocked in a call to a dead peer would otherwise
// die without a word. tb_watchdog_start installs a SIGTERM handler whose watcher thread
// writes the process's parts and merges ("reason": "terminated") and ends the process with
// status 4 (_exit: its rank threads are still waiting in their calls).
#ifndef TB_COMM_WATCHDOG_H
#define TB_COMM_WATCHDOG_H

#include "comm/group.h"
#include "core/error.h"

struct tb_world;

// `g` is the group whose call timed out on this rank; `what` the backend's message. When
// another rank's timeout is already being reported, waits until that report is written
// (the world aborted) and writes none.
void tb_watchdog_report_hang(tb_group *g, const char *what);
// A rank stalled by --inject-stall that gives up waiting (under mpirun, where no abort of
// another process reaches it): its process's parts ("reason": "stalled") unless a report
// is already being written.
void tb_watchdog_report_stall(struct tb_rank *rk, const char *what);

// The watchdog thread, under mpirun: MPI's own collectives block in MPI (comm/mpi_backend.h,
// --mpi-collectives native), so they cannot time out in the thread that waits, as an NCCL
// call cannot in PyTorch, whose NCCL watchdog this follows. Ten times a second the thread asks
// the MPI backend which member of this process has been blocked in such a call the longest
// (tb_mpi_blocked_since); one blocked longer than the collective timeout (+ 0.5 s) is
// reported as that call's hang — the same parts, merge and message, the flight recorders
// read as a timeout in the call would read them — and the process ends with status 4. A
// world aborted by a failure in this process while a member is still blocked in MPI 2 s later
// ends the process with the failure's status. Calls that time out in their own thread never
// block in MPI, and report themselves.
//
// Under mpirun (w->processes > 1): the SIGTERM handler and its watcher thread, and the
// watchdog thread, for the run's rank threads (nothing to do with one process).
// tb_watchdog_stop stops the watchdog and restores the previous handler once they have
// returned.
int tb_watchdog_start(struct tb_world *w, tb_error *err);
void tb_watchdog_stop(struct tb_world *w);

#endif
