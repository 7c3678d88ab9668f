// clock.h — the clocks a run reads: the wall clock as records and messages show it, and the
// calling thread's wait for a core.
#ifndef TB_CORE_CLOCK_H
#define TB_CORE_CLOCK_H

#include <stddef.h>

// Wall-clock seconds (CLOCK_REALTIME).
double tb_wall_s(void);
// "2026-11-29T10:45:12Z" (UTC)
void tb_iso_now(char *buf, size_t len);
// The calling thread's time spent runnable but waiting for a core since it started (the
// scheduler's run_delay, the second field of /proc/thread-self/schedstat), in seconds; -1
// when the kernel does not report it.
double tb_thread_run_delay_s(void);

#endif
