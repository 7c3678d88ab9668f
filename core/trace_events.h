// trace_events.h — a Chrome trace read one event at a time (docs/ARCHITECTURE.md,
// "Observability": the readers of the per-rank traces).
//
// A trace of a long run is large (10,000 steps of a 2-layer model: 208 MB), and a whole jansson
// tree of it is ten times that; every reader wants its events one by one. tb_trace_read decodes
// the file in a bounded buffer, each event with jansson, and hands each to a callback, so what a
// reader keeps is its own choice. Both of Chrome's trace formats are read: the JSON Object
// Format ({"traceEvents": [...], other members}) the engine writes, and the JSON Array Format
// ([...]) other tools write.
#ifndef TB_CORE_TRACE_EVENTS_H
#define TB_CORE_TRACE_EVENTS_H

#include <jansson.h>
#include <stddef.h>

#include "core/error.h"

// One event, borrowed (json_incref it to keep it past the call), and its index in the array.
// A non-zero return stops the read; tb_trace_read then returns -1 with the callback's err.
typedef int (*tb_trace_event_fn)(json_t *event, size_t index, void *ud, tb_error *err);

// Reads path's events in order. top (may be NULL) gets, on success, a new object holding the
// object format's other members (displayTimeUnit, distributedInfo ...; empty for the array
// format). A file that is not a trace (not JSON, no traceEvents array, data after the trace)
// fails naming the path, the byte offset, line and column, and jansson's reason.
int tb_trace_read(const char *path, tb_trace_event_fn fn, void *ud, json_t **top, tb_error *err);

#endif
