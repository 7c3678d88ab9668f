// map_chrome.c — see map_chrome.h.
#include "map_chrome.h"

#include <math.h>
#include <string.h>

#include "strmap.h"

static int64_t us_to_ns(json_t *v) { return (int64_t)llround(json_number_value(v) * 1000.0); }

int tb_rt_load_chrome(tb_rt *rt, const char *path, tb_error *err) {
    json_error_t je;
    json_t *root = json_load_file(path, 0, &je);
    if (!root) return tb_fail(err, "%s:%d:%d: not a Chrome trace: %s", path, je.line, je.column, je.text);
    json_t *events = json_is_array(root) ? root : json_object_get(root, "traceEvents");
    if (!json_is_array(events)) {
        json_decref(root);
        return tb_fail(err, "%s: not a Chrome trace: no traceEvents array", path);
    }
    tb_rt_keep_root(rt, root);
    tb_rt_note_backend(rt, json_string_value(json_object_get(json_object_get(root, "distributedInfo"), "backend")));
    int n = 0;
    size_t i;
    json_t *e;
    tb_rt_drops drops = {0};
    json_array_foreach(events, i, e) {
        const char *ph = json_string_value(json_object_get(e, "ph"));
        json_t *jname = json_object_get(e, "name");
        const char *name = json_string_value(jname);
        json_t *ts = json_object_get(e, "ts"), *dur = json_object_get(e, "dur");
        if (!ph || strcmp(ph, "X")) continue;  // metadata, instants, counters: not ranges
        // a complete event the map cannot use: counted and named, never silently lost
        const char *bad = !name                              ? (jname ? "with a non-string name" : "without a name")
                          : !ts                              ? "without a ts"
                          : !json_is_number(ts)              ? (json_is_string(ts) ? "with a string ts" : "with a non-number ts")
                          : dur && !json_is_number(dur)      ? (json_is_string(dur) ? "with a string dur" : "with a non-number dur")
                          : dur && json_number_value(dur) < 0 ? "with a negative dur"
                                                              : NULL;
        if (bad) {
            tb_rt_drop(&drops, bad, (long)i);
            continue;
        }
        json_t *pid = json_object_get(e, "pid"), *tid = json_object_get(e, "tid");
        int rank = json_is_integer(pid) ? (int)json_integer_value(pid) : 0;
        int64_t t = json_is_integer(tid) ? (int64_t)json_integer_value(tid)
                    : json_is_string(tid) ? (int64_t)(tb_strhash(json_string_value(tid)) >> 1)
                                          : 0;
        json_t *args = json_object_get(e, "args");
        tb_rt_add_event(rt, name, rank, t, us_to_ns(ts), json_is_number(dur) ? us_to_ns(dur) : 0,
                  json_is_object(args) ? args : NULL);
        n++;
    }
    tb_rt_note_file(rt, path, "chrome", n);
    tb_rt_note_drops(rt, path, &drops);
    return 0;
}
