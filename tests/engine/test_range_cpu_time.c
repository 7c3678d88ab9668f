// test_range_cpu_time.c — every range records the calling thread's CPU time beside its wall
// time (runtime/ranges.h: the Chrome trace's "tts" and "tdur"): a range that computes spends CPU
// time, one that sleeps spends next to none, a thread's CPU time never exceeds its wall time,
// and a range's CPU time holds its children's. These are the durations a replay of the
// schedule runs on (one core per rank), whatever else shared the cores.
#include <jansson.h>
#include <string.h>
#include <time.h>

#include "runtime/ranges.h"
#include "tb_test.h"

#define TRACE TB_TEST_TMPDIR "/range_cpu_time.json"

// Computes for about `ms` of this thread's CPU time.
static void compute_for(double ms) {
    const int64_t until = tb_thread_cpu_ns() + (int64_t)(ms * 1e6);
    volatile double x = 1;
    while (tb_thread_cpu_ns() < until)
        for (int i = 0; i < 1000; i++) x = x * 1.0000001 + 1e-9;
}

static json_t *event_named(json_t *events, const char *name) {
    size_t i;
    json_t *e;
    json_array_foreach(events, i, e) {
        if (!strcmp(json_string_value(json_object_get(e, "name")) ?: "", name)) return e;
    }
    return NULL;
}

TB_TEST(ranges_record_the_threads_cpu_time_beside_wall_time) {
    tb_ranges t;
    tb_ranges_init(&t, 0, 1, "rank 0", tb_now_ns(), 1);
    tb_ranges_bind(&t);
    TB_RANGE_PUSH("step");
    TB_RANGE_PUSH("compute");
    compute_for(30);
    TB_RANGE_POP();
    TB_RANGE_PUSH("sleep");
    nanosleep(&(struct timespec){0, 30 * 1000 * 1000}, NULL);
    TB_RANGE_POP();
    TB_RANGE_POP();
    tb_ranges_bind(NULL);
    tb_error err;
    TB_REQUIRE(tb_ranges_write_chrome(&t, TRACE, &err) == 0, "%s", err.msg);
    tb_ranges_free(&t);

    json_t *root = json_load_file(TRACE, 0, NULL);
    json_t *events = json_object_get(root, "traceEvents");
    json_t *step = event_named(events, "step"), *compute = event_named(events, "compute"),
           *sleep = event_named(events, "sleep");
    TB_REQUIRE(step && compute && sleep, "the three ranges in the trace");
    double dur[3], tdur[3], tts[3];
    json_t *const ev[3] = {step, compute, sleep};
    for (int i = 0; i < 3; i++) {
        dur[i] = json_number_value(json_object_get(ev[i], "dur"));
        tdur[i] = json_number_value(json_object_get(ev[i], "tdur"));
        tts[i] = json_number_value(json_object_get(ev[i], "tts"));
        TB_CHECK(json_is_number(json_object_get(ev[i], "tdur")) && json_is_number(json_object_get(ev[i], "tts")),
                 "%s: tts and tdur", json_string_value(json_object_get(ev[i], "name")));
        // one thread's CPU time fits in its wall time (1 µs: the two clocks are read apart)
        TB_CHECK(tdur[i] >= 0 && tdur[i] <= dur[i] + 1, "%s: CPU %.1f us of wall %.1f us",
                 json_string_value(json_object_get(ev[i], "name")), tdur[i], dur[i]);
    }
    TB_CHECK(tdur[1] >= 29000, "the computing range spent %.0f us of CPU (it computed 30 ms)", tdur[1]);
    TB_CHECK(dur[2] >= 29000 && tdur[2] < 0.2 * dur[2], "the sleeping range spent %.0f us of CPU in %.0f us", tdur[2],
             dur[2]);
    TB_CHECK(tdur[0] >= tdur[1] + tdur[2] && tts[0] <= tts[1] && tts[1] + tdur[1] <= tts[2] + 0.5,
             "the step's CPU time %.0f us holds its children's (%.0f + %.0f), in order", tdur[0], tdur[1], tdur[2]);
    json_decref(root);
}

int main(void) {
    TB_RUN(ranges_record_the_threads_cpu_time_beside_wall_time);
    return tb_test_summary();
}
