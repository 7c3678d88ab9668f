// map_nsys.h — reading an Nsight Systems SQLite export (`nsys export --type sqlite`) into
// runtime events.
//
// NVTX push/pop ranges (NVTX_EVENTS rows of eventType 59), names inline (text) or in
// StringIds through textId; the default domain's only, unless that leaves nothing. One
// rank per thread (globalTid), numbered from first_rank in globalTid order.
#ifndef TB_TRACE_MAP_NSYS_H
#define TB_TRACE_MAP_NSYS_H

#include "core/error.h"
#include "map_events.h"

// 0, or -1 with err naming the file and what is wrong with it.
int tb_rt_load_nsys(tb_rt *rt, const char *path, int first_rank, tb_error *err);

#endif
