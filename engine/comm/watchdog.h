// watchdog.h — what happens when a communicator call does not complete: the hang report.
//
// The rank whose call timed out writes hang.json in the run directory and a readable
// summary on stderr; the communicator then fails the rank (exit status 4 for the run),
// which aborts the world, so nothing hangs forever. The
// report holds, for every rank of the world: its coordinates, its pending call (if any)
// and its flight-recorder tail; the stuck ranks grouped by communicator; the smallest
// group containing every stuck rank; and, for the group that timed out, the absent
// peers — members not waiting in that call — with the last call each completed.
#ifndef TB_COMM_WATCHDOG_H
#define TB_COMM_WATCHDOG_H

#include "comm/group.h"

// `g` is the group whose call timed out on this rank; `what` the backend's message. When
// another rank's timeout is already being reported, waits until that report is written
// (the world aborted) and writes none.
void tb_watchdog_report_hang(tb_group *g, const char *what);

#endif
