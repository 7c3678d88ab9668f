// tb_trace_events.h — what the tests that write run directories by hand share: a JSON file
// written compactly, and a range event of a rank's Chrome trace as the engine writes it
// (runtime/ranges.h: "X" events with their depth, and the collectives' args).
#ifndef TB_TESTS_TRACE_EVENTS_H
#define TB_TESTS_TRACE_EVENTS_H

#include <jansson.h>
#include <stdlib.h>

#include "tb_shell.h"

// Writes j to path (compact) and releases j.
static inline void tb_write_json(const char *path, json_t *j) {
    char *text = json_dumps(j, JSON_COMPACT);
    tb_write_text(path, text);
    free(text);
    json_decref(j);
}

// A range [ts, ts + dur) µs at depth; args (taken; NULL: none) get the depth.
static inline json_t *tb_trace_range(const char *name, double ts, double dur, int depth, json_t *args) {
    json_t *a = args ? args : json_object();
    json_object_set_new(a, "depth", json_integer(depth));
    return json_pack("{s:s, s:s, s:s, s:f, s:f, s:i, s:i, s:o}", "name", name, "cat", "range", "ph", "X", "ts", ts,
                     "dur", dur, "pid", 0, "tid", 0, "args", a);
}

#endif
