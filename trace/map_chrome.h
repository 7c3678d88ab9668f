// map_chrome.h — reading the engine's per-rank Chrome trace JSON into runtime events.
//
// {"traceEvents": [...]} or a bare array; ranges are complete ("X") events and begin/end
// ("B"/"E") pairs, each E closing the latest open B of its process and thread in timestamp
// order (as Chrome's viewer pairs them; an E's name is not checked); rank = pid, thread =
// tid (a string tid hashed to a number); ts and dur in µs become ns; args are kept
// (borrowed from the parsed document, which rt keeps; a B/E pair's are the B's updated
// with the E's). distributedInfo.backend is noted. What cannot be a range is dropped and
// counted per reason (tb_rt_drop): a missing or non-string name (an E may have none), a
// missing or non-number ts, an X without a dur or with a non-number or negative one, an E
// with no open B on its thread, a B never closed.
#ifndef TB_TRACE_MAP_CHROME_H
#define TB_TRACE_MAP_CHROME_H

#include "core/error.h"
#include "map_events.h"

// 0, or -1 with err naming the file (and the JSON error's line and column).
int tb_rt_load_chrome(tb_rt *rt, const char *path, tb_error *err);

#endif
