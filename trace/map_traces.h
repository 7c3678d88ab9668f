// map_traces.h — the runtime side of `tracebook map` and `tracebook walk`: every trace file
// read into one tb_rt (map_events.h), each in the format its content shows — an SQLite file
// is an Nsight Systems export (map_nsys.h), anything else Chrome trace JSON (map_chrome.h).
// Ranks: a Chrome trace's pids as they are; an export's threads numbered after the ranks
// of the files before it. Parents are linked once everything is read.
#ifndef TB_TRACE_MAP_TRACES_H
#define TB_TRACE_MAP_TRACES_H

#include "core/error.h"
#include "map_events.h"

// Fills rt (initialised here; tb_rt_free it, also after an error). 0, or -1 with err; traces
// without a single range event are an error (their malformed events named), not an empty map.
int tb_rt_load(tb_rt *rt, char **paths, int npaths, tb_error *err);

#endif
