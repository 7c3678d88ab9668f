// map_chrome.h — reading the engine's per-rank Chrome trace JSON into runtime events.
//
// {"traceEvents": [...]} or a bare array; complete ("X") events only, rank = pid, thread =
// tid (a string tid hashed to a number); ts and dur in µs become ns; args are kept
// (borrowed from the parsed document, which rt keeps). distributedInfo.backend is noted.
#ifndef TB_TRACE_MAP_CHROME_H
#define TB_TRACE_MAP_CHROME_H

#include "core/error.h"
#include "map_events.h"

// 0, or -1 with err naming the file (and the JSON error's line and column).
int tb_rt_load_chrome(tb_rt *rt, const char *path, tb_error *err);

#endif
