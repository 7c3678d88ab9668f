// test_ranges.c — a trace's memory is bounded however long the run (runtime/ranges.h): a
// range's name is kept once however often it recurs, and the events beyond spill_events go
// out to the spill file between steps, from which the writer streams them back. The trace
// written from a spilled track holds the same events, in the same order, with the same
// arguments (communicator figures and all-to-all split sizes too) as one written from memory.
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/ranges.h"
#include "tb_shell.h"
#include "tb_test.h"

#define STEPS 40

// One step's ranges: nested, a communicator call with split sizes, a name with the step in it.
static void record_step(int64_t step) {
    TB_RANGE_PUSH("train_step");
    tb_range_annotate(step, -1);
    for (int mb = 0; mb < 3; mb++) {
        TB_RANGE_PUSH("forward.layer.%d", mb);
        tb_range_annotate(step, mb);
        TB_RANGE_PUSH("all_to_all");
        const tb_range_comm_args c = {"ep", "all_to_all", "float32", 3, 2, mb % 2, (uint64_t)(step * 3 + mb),
                                      (size_t)(10 + mb), (size_t)(40 + 4 * mb), -1, -1};
        tb_range_annotate_comm(&c);
        const size_t send[2] = {(size_t)step, (size_t)mb}, recv[2] = {(size_t)mb, (size_t)step + 1};
        tb_range_annotate_splits(send, recv, 2);
        TB_RANGE_POP();
        TB_RANGE_POP();
    }
    TB_RANGE_PUSH("optimizer");
    TB_RANGE_POP();
    TB_RANGE_POP();
}

// Records STEPS steps into a trace spilling past `spill_events` (between steps, as the
// training loop does) and writes it to path. Returns the events held at the end.
static size_t record(const char *path, size_t spill_events, const char *spill_dir, size_t *held_most,
                     size_t *names_bytes) {
    tb_ranges t;
    tb_ranges_init(&t, 3, 4, "rank 3", tb_now_ns(), 1);
    t.spill_events = spill_events;
    if (spill_dir) tb_ranges_spill_to(&t, spill_dir);
    tb_ranges_bind(&t);
    tb_error err;
    *held_most = 0;
    for (int64_t s = 1; s <= STEPS; s++) {
        record_step(s);
        if (t.nevents > *held_most) *held_most = t.nevents;
        TB_CHECK(tb_ranges_spill(&t, &err) == 0, "spill after step %lld: %s", (long long)s, err.msg);
        if (s == 1) *names_bytes = t.names.nstrings;
    }
    tb_ranges_bind(NULL);
    TB_CHECK(tb_ranges_write_chrome(&t, path, &err) == 0, "%s", err.msg);
    size_t held = t.nevents;
    TB_CHECK(t.names.nstrings == *names_bytes,
             "the names after %d steps take %zu bytes, after one %zu: each is kept once",
             STEPS, t.names.nstrings, *names_bytes);
    tb_ranges_free(&t);
    return held;
}

// The event without its times (which differ between two recordings).
static json_t *untimed(json_t *e) {
    json_t *c = json_deep_copy(e);
    const char *times[] = {"ts", "dur", "tts", "tdur"};
    for (int i = 0; i < 4; i++) json_object_del(c, times[i]);
    return c;
}

TB_TEST(a_spilled_trace_holds_the_same_events_as_one_kept_in_memory) {
    const char *kept = TB_TEST_TMPDIR "/ranges_kept.json", *spilled = TB_TEST_TMPDIR "/ranges_spilled.json";
    const int per_step = 1 + 3 * 2 + 1;
    size_t most, names, names_spilled;
    size_t held = record(kept, (size_t)1 << 30, NULL, &most, &names);
    TB_CHECK(held == (size_t)STEPS * per_step, "without a spill every event is held: %zu", held);
    // spill past 20 events: at most 20 + one step's held at any time
    held = record(spilled, 20, TB_TEST_TMPDIR, &most, &names_spilled);
    TB_CHECK(most < 20 + (size_t)per_step && held < 20, "spilling past 20 events held at most %zu (%zu at the end)",
             most, held);
    TB_CHECK(names_spilled == names, "the same names");

    json_error_t je;
    json_t *a = json_load_file(kept, 0, &je), *b = json_load_file(spilled, 0, &je);
    TB_REQUIRE(a && b, "both traces are JSON: %s (line %d)", je.text, je.line);
    json_t *ea = json_object_get(a, "traceEvents"), *eb = json_object_get(b, "traceEvents");
    TB_CHECK(json_array_size(ea) == 2 + (size_t)STEPS * per_step && json_array_size(eb) == json_array_size(ea),
             "%zu and %zu events (2 metadata + %d a step)", json_array_size(ea), json_array_size(eb), per_step);
    for (size_t i = 0; i < json_array_size(ea) && i < json_array_size(eb); i++) {
        json_t *x = untimed(json_array_get(ea, i)), *y = untimed(json_array_get(eb, i));
        int same = json_equal(x, y);
        if (!same) {
            char *sx = json_dumps(x, JSON_COMPACT), *sy = json_dumps(y, JSON_COMPACT);
            TB_CHECK(0, "event %zu differs:\n  kept    %s\n  spilled %s", i, sx, sy);
            free(sx);
            free(sy);
        }
        json_decref(x);
        json_decref(y);
        if (!same) break;
    }
    // the spilled events keep their order in time
    double last = -1;
    size_t i;
    json_t *e;
    int ordered = 1;
    json_array_foreach(eb, i, e) {
        json_t *ts = json_object_get(e, "ts");
        if (!ts) continue;  // metadata
        if (!strcmp(json_string_value(json_object_get(e, "name")) ?: "", "train_step")) {
            ordered &= json_number_value(ts) >= last;
            last = json_number_value(ts);
        }
    }
    TB_CHECK(ordered, "the steps are in the order they ran");
    TB_CHECK(json_is_object(json_object_get(b, "distributedInfo")) &&
                 json_integer_value(json_object_get(json_object_get(b, "distributedInfo"), "rank")) == 3,
             "distributedInfo names the rank");
    json_decref(a);
    json_decref(b);
}

// A spill that cannot be written fails the spill and then the trace, naming why; the trace's
// previous file is left as it was.
TB_TEST(a_spill_that_cannot_be_written_fails_the_trace_naming_why) {
    tb_ranges t;
    tb_ranges_init(&t, 0, 1, "rank 0", tb_now_ns(), 1);
    t.spill_events = 1;
    tb_ranges_spill_to(&t, TB_TEST_TMPDIR "/no-such-directory");
    tb_ranges_bind(&t);
    record_step(1);
    tb_ranges_bind(NULL);
    tb_error err;
    TB_CHECK(tb_ranges_spill(&t, &err) != 0 && strstr(err.msg, "no-such-directory") && strstr(err.msg, "spill"),
             "the spill fails naming its directory: %s", err.msg);
    const char *path = TB_TEST_TMPDIR "/ranges_failed.json";
    FILE *f = fopen(path, "w");
    TB_REQUIRE(f, "%s", path);
    fputs("before\n", f);
    fclose(f);
    TB_CHECK(tb_ranges_write_chrome(&t, path, &err) != 0 && strstr(err.msg, "no-such-directory"),
             "the trace fails with the spill's reason: %s", err.msg);
    f = fopen(path, "r");
    char line[32] = "";
    TB_CHECK(f && fgets(line, sizeof line, f) && !strcmp(line, "before\n"), "the earlier file is as it was");
    if (f) fclose(f);
    tb_ranges_free(&t);
}

// The text of the number after `"key":` at the n-th occurrence in s (NULL when there is none).
static const char *number_after(const char *s, const char *key, int n, char *out, size_t size) {
    char pat[32];
    snprintf(pat, sizeof pat, "\"%s\":", key);
    const char *p = s;
    for (int k = 0; k <= n; k++) {
        p = strstr(p, pat);
        if (!p) return NULL;
        p += strlen(pat);
    }
    size_t len = strspn(p, "-+.0123456789eE");
    if (len == 0 || len >= size) return NULL;
    memcpy(out, p, len);
    out[len] = 0;
    return out;
}

// An event's times are written as the exact decimal of their integer ns below 10^15 ns (the
// fewest digits that read back as the same double), with 17 significant digits beyond; either
// reads back as the double the event was written from.
TB_TEST(trace_times_are_written_short_and_read_back_as_the_same_doubles) {
    tb_ranges t;
    tb_ranges_init(&t, 0, 1, "rank 0", tb_now_ns(), 1);
    tb_ranges_bind(&t);
    for (int i = 0; i < 4; i++) {
        TB_RANGE_PUSH("op.%d", i);
        TB_RANGE_POP();
    }
    tb_ranges_bind(NULL);
    TB_REQUIRE(t.nevents == 4, "4 events held (%zu)", t.nevents);
    // {start, dur, cpu start, cpu dur} in ns; the texts each must be written as
    static const struct {
        int64_t ns[4];
        const char *text[4];
    } cases[] = {
        {{3708521, 260525161, 1099201, 0}, {"3708.521", "260525.161", "1099.201", "0.0"}},
        {{999999999999999, 1, 123456789012345, 100000}, {"999999999999.999", "0.001", "123456789012.345", "100.0"}},
        {{-3708521, 999, 5, 6}, {"-3708.521", "0.999", "0.005", "0.006"}},  // (before the origin)
        // past 10^15 ns (11.5 days) the exact decimal has 16 digits (15 would write
        // 1000000000000.0): the event is written with the 17 any double needs
        {{1000000000000001, 7, 2, 3}, {"1000000000000.001", "0.0070000000000000001", "0.002", "0.0030000000000000001"}},
    };
    for (int i = 0; i < 4; i++) {
        t.events[i].start_ns = cases[i].ns[0];
        t.events[i].dur_ns = cases[i].ns[1];
        t.events[i].cpu_start_ns = cases[i].ns[2];
        t.events[i].cpu_dur_ns = cases[i].ns[3];
    }
    const char *path = TB_TEST_TMPDIR "/ranges_short.json";
    tb_error err;
    TB_REQUIRE(tb_ranges_write_chrome(&t, path, &err) == 0, "%s", err.msg);
    tb_ranges_free(&t);
    char *text = tb_slurp(path);
    TB_REQUIRE(text, "%s", path);
    static const char *const keys[] = {"ts", "dur", "tts", "tdur"};
    for (int i = 0; i < 4; i++)
        for (int k = 0; k < 4; k++) {
            char num[64];
            const char *got = number_after(text, keys[k], i, num, sizeof num);
            TB_CHECK(got && !strcmp(got, cases[i].text[k]), "event %d %s: written '%s', expected '%s'", i, keys[k],
                     got ? got : "(none)", cases[i].text[k]);
            const double want = (double)cases[i].ns[k] / 1000.0;
            TB_CHECK(got && strtod(got, NULL) == want, "event %d %s: '%s' reads back as %.17g, written from %.17g", i,
                     keys[k], got ? got : "(none)", got ? strtod(got, NULL) : 0.0, want);
        }
    // the argument for the short form, over 200,000 ns counts spread across every decade below 10^15
    uint64_t x = 0x9E3779B97F4A7C15ull;
    int bad = 0;
    for (int i = 0; i < 200000 && !bad; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        const int64_t ns = (int64_t)(x % 1000000000000000ull) >> (i % 50);
        char s[64];
        snprintf(s, sizeof s, "%.15g", (double)ns / 1000.0);
        if (strtod(s, NULL) != (double)ns / 1000.0) {
            bad = 1;
            TB_CHECK(0, "%lld ns: %%.15g writes %s, which reads back as %.17g, not %.17g", (long long)ns, s,
                     strtod(s, NULL), (double)ns / 1000.0);
        }
    }
    free(text);
}

int main(void) {
    TB_RUN(a_spilled_trace_holds_the_same_events_as_one_kept_in_memory);
    TB_RUN(a_spill_that_cannot_be_written_fails_the_trace_naming_why);
    TB_RUN(trace_times_are_written_short_and_read_back_as_the_same_doubles);
    return tb_test_summary();
}
