// core/trace_events.h: a Chrome trace read one event at a time gives the events a whole-file
// jansson load gives, in order, in both of Chrome's formats, whatever the buffer's cuts; a file
// that is not a trace is refused naming the byte, line and column; a reader's own error stops
// the read; a large trace is read in memory bounded by an event, not by the file.
#include <jansson.h>
#include <stdio.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "core/trace_events.h"
#include "tb_shell.h"
#include "tb_test.h"

#define DIR TB_TEST_TMPDIR "/trace_events"

static int write_file(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    if (!f) return -1;
    fputs(text, f);
    return fclose(f);
}

typedef struct collected {
    json_t *events;  // every event, kept
    size_t next;     // the index the next event must have
    int stop_at;     // >= 0: the callback fails at that index
} collected;

static int collect(json_t *e, size_t i, void *ud, tb_error *err) {
    collected *c = ud;
    if (i != c->next++) return tb_fail(err, "index %zu out of order", i);
    if (c->stop_at >= 0 && (size_t)c->stop_at == i) return tb_fail(err, "the reader's own refusal at %zu", i);
    json_array_append(c->events, e);
    return 0;
}

// Reads path both ways and checks they agree; returns the streamed events (NULL on failure).
static json_t *read_both(const char *path, json_t **top) {
    collected c = {json_array(), 0, -1};
    tb_error err = {{0}};
    if (tb_trace_read(path, collect, &c, top, &err) != 0) {
        printf("    %s: %s\n", path, err.msg);
        json_decref(c.events);
        return NULL;
    }
    return c.events;
}

TB_TEST(both_formats_give_the_events_a_whole_load_gives) {
    const char *object = "{\"displayTimeUnit\": \"ms\", \"traceEvents\": [\n"
                         "{\"name\":\"a\",\"ph\":\"X\",\"ts\":1.5,\"dur\":2,\"args\":{\"s\":\"]},\"}},\n"
                         "{\"name\":\"b\\u00e9\",\"ph\":\"X\",\"ts\":-3e2,\"dur\":0}\n"
                         "],\n\"distributedInfo\": {\"rank\": 3}, \"n\": 12}\n";
    const char *array = "  [ {\"name\":\"a\"} , 7, {\"name\":\"c\",\"args\":[1,[2]]} ]  ";
    TB_REQUIRE(write_file(DIR "/object.json", object) == 0 && write_file(DIR "/array.json", array) == 0, "writing");
    json_t *top = NULL;
    json_t *ev = read_both(DIR "/object.json", &top);
    json_t *whole = json_loads(object, 0, NULL);
    TB_CHECK(ev && json_equal(ev, json_object_get(whole, "traceEvents")), "the object format's events");
    json_object_del(whole, "traceEvents");
    TB_CHECK(top && json_equal(top, whole), "the other members: %s", top ? json_dumps(top, 0) : "none");
    json_decref(whole);
    json_decref(top);
    json_decref(ev);
    ev = read_both(DIR "/array.json", &top);
    whole = json_loads(array, 0, NULL);
    TB_CHECK(ev && json_equal(ev, whole), "the array format's events");
    TB_CHECK(top && json_object_size(top) == 0, "no other members in the array format");
    json_decref(whole);
    json_decref(top);
    json_decref(ev);
}

// The large trace: events of many sizes (one of 3 MiB, larger than the 1 MiB buffer the reader
// starts with), written one at a time so that no test holds a tree of the whole file.
enum { LARGE_EVENTS = 200000, BIG_EVENT = 100000 };

static json_t *large_event(int i) {
    if (i == BIG_EVENT) {
        char *big = calloc(3 << 20, 1);
        memset(big, 'q', (3 << 20) - 1);
        json_t *e = json_pack("{s:s, s:s}", "name", "big", "blob", big);
        free(big);
        return e;
    }
    char name[64];
    snprintf(name, sizeof name, "range.%d.%.*s", i, i % 37, "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx");
    return json_pack("{s:s, s:s, s:f, s:f, s:I, s:{s:i}}", "name", name, "ph", "X", "ts", i * 1.25 + 0.001, "dur",
                     12345.678, "tid", (json_int_t)(i % 3), "args", "depth", i % 5);
}

static int write_large(const char *path) {
    FILE *f = fopen(path, "w");
    if (!f) return -1;
    fputs("{\"traceEvents\": [", f);
    for (int i = 0; i < LARGE_EVENTS; i++) {
        json_t *e = large_event(i);
        char *text = json_dumps(e, JSON_COMPACT);
        fprintf(f, "%s%s", i ? ",\n" : "\n", text);
        free(text);
        json_decref(e);
    }
    fputs("\n], \"displayTimeUnit\": \"ms\"}\n", f);
    return fclose(f);
}

static int count_only(json_t *e, size_t i, void *ud, tb_error *err) {
    (void)e, (void)i, (void)err;
    ++*(size_t *)ud;
    return 0;
}

// Run first, before any test loads a tree: the large trace (~27 MB on disk; a jansson tree of
// it several times that) read by counting grows the process by the buffer (grown to 4 MiB for
// the 3 MiB event) and that event, not by the file.
TB_TEST(reading_keeps_one_event_not_the_file) {
    tb_run(NULL, NULL, "rm -rf %s && mkdir -p %s", DIR, DIR);
    TB_REQUIRE(write_large(DIR "/large.json") == 0, "writing large.json");
    struct rusage before, after;
    getrusage(RUSAGE_SELF, &before);
    size_t n = 0;
    tb_error err = {{0}};
    TB_REQUIRE(tb_trace_read(DIR "/large.json", count_only, &n, NULL, &err) == 0, "%s", err.msg);
    getrusage(RUSAGE_SELF, &after);
    TB_CHECK(n == LARGE_EVENTS, "%zu events", n);
#if defined(__SANITIZE_ADDRESS__)
    // AddressSanitizer keeps freed memory in its quarantine (256 MB): RSS measures it, not the
    // reader. The Release run checks the bound.
    printf("    max RSS not compared under AddressSanitizer (grew by %ld KiB)\n", after.ru_maxrss - before.ru_maxrss);
#else
    TB_CHECK(after.ru_maxrss - before.ru_maxrss < 16 * 1024, "max RSS grew by %ld KiB reading a 27 MB trace",
             after.ru_maxrss - before.ru_maxrss);
#endif
}

static int same_as_written(json_t *e, size_t i, void *ud, tb_error *err) {
    (void)ud;
    json_t *want = large_event((int)i);
    int same = json_equal(e, want);
    json_decref(want);
    return same ? 0 : tb_fail(err, "traceEvents[%zu] differs from the event written", i);
}

// Every event across the buffer's ~27 cuts, and the 3 MiB one the buffer grows for, equals the
// event written; a top-level number straddling the first cut (byte 1 MiB) is read whole, not
// as the digits before the cut.
TB_TEST(a_trace_larger_than_the_buffer_reads_whole_across_every_cut) {
    tb_error err = {{0}};
    TB_CHECK(tb_trace_read(DIR "/large.json", same_as_written, NULL, NULL, &err) == 0, "%s", err.msg);
    const size_t cut = 1 << 20, pad = cut - 4 - strlen("{\"pad\": \"\", \"n\": ");
    char *text = malloc(cut + 64);
    memset(text, 0, cut + 64);
    strcpy(text, "{\"pad\": \"");
    memset(text + strlen(text), 'p', pad);
    strcat(text, "\", \"n\": 123456789, \"traceEvents\": []}");
    TB_REQUIRE(strstr(text, "123456789") - text == (ptrdiff_t)cut - 4, "the number straddles byte %zu", cut);
    TB_REQUIRE(write_file(DIR "/straddle.json", text) == 0, "writing straddle.json");
    free(text);
    json_t *top = NULL;
    size_t n = 0;
    TB_CHECK(tb_trace_read(DIR "/straddle.json", count_only, &n, &top, &err) == 0 && n == 0 &&
                 json_integer_value(json_object_get(top, "n")) == 123456789,
             "the member n read as %lld (%s)", (long long)json_integer_value(json_object_get(top, "n")), err.msg);
    json_decref(top);
}

static void refused(const char *name, const char *text, const char *expect) {
    char path[256];
    snprintf(path, sizeof path, DIR "/%s.json", name);
    TB_REQUIRE(write_file(path, text) == 0, "writing %s", path);
    collected c = {json_array(), 0, -1};
    tb_error err = {{0}};
    json_t *top = (json_t *)&c;  // must come back NULL
    int rc = tb_trace_read(path, collect, &c, &top, &err);
    TB_CHECK(rc == -1 && strstr(err.msg, path) && strstr(err.msg, expect) && top == NULL,
             "%s: exit %d, message '%s', expected one with '%s'", name, rc, err.msg, expect);
    json_decref(c.events);
}

TB_TEST(what_is_not_a_trace_is_refused_naming_where) {
    refused("empty", "  \n", "byte 3 (line 2, column 1): not a Chrome trace: the file is empty");
    refused("scalar", "42", "neither '{' nor '[' first");
    refused("no_events", "{\"displayTimeUnit\": \"ms\"}", "not a Chrome trace: no traceEvents array");
    refused("events_not_array", "{\"traceEvents\": {}}", "byte 16 (line 1, column 17): traceEvents is not an array");
    refused("bad_event", "{\"traceEvents\": [\n{\"name\": \"a\"},\n{\"name\": tru}\n]}",
            "byte 44 (line 3, column 12): traceEvents[1]: invalid token near 'tru'");
    refused("cut", "{\"traceEvents\": [{\"name\": \"a\"}, {\"name\"", "traceEvents[1]:");
    refused("missing_comma", "[{\"a\":1} {\"b\":2}]", "byte 9 (line 1, column 10): after traceEvents[0]: ',' or ']'");
    refused("trailing_comma", "[{\"a\":1},]", "traceEvents[1]:");
    refused("after_end", "[{\"a\":1}] x", "byte 10 (line 1, column 11): data after the trace's end");
    refused("two_arrays", "{\"traceEvents\": [], \"traceEvents\": []}", "a second traceEvents member");
    refused("member_comma", "{\"traceEvents\": [],}", "a member name expected");
    TB_CHECK(tb_run(NULL, NULL, "mkdir -p %s/a_directory.json", DIR) == 0, "mkdir");
    collected c = {json_array(), 0, -1};
    tb_error err = {{0}};
    TB_CHECK(tb_trace_read(DIR "/a_directory.json", collect, &c, NULL, &err) == -1 &&
                 strstr(err.msg, "not a regular file"),
             "a directory: %s", err.msg);
    TB_CHECK(tb_trace_read(DIR "/absent.json", collect, &c, NULL, &err) == -1 && strstr(err.msg, "absent.json"),
             "a missing file: %s", err.msg);
    json_decref(c.events);
}

// A bad event whose last byte read sits at `at`: lines of small events before it, more after.
static char *with_bad_event_at(size_t at, size_t *lines_before, size_t *line_start) {
    const size_t total = at + (1 << 20);
    char *text = calloc(total + 64, 1);
    size_t n = (size_t)sprintf(text, "{\"traceEvents\": [\n");
    const char *bad = "{\"name\": tru}";  // jansson stops after "tru": its last byte read is the u
    const size_t bad_last = 11;
    while (n + 32 < at - bad_last) n += (size_t)sprintf(text + n, "{\"name\":\"f\"},\n");
    const size_t pad = at - bad_last - n - strlen("{\"name\":\"\"},\n");
    n += (size_t)sprintf(text + n, "{\"name\":\"%.*s\"},\n", (int)pad, "ppppppppppppppppppppppppppppppppppppppppp");
    *line_start = n;
    n += (size_t)sprintf(text + n, "%s,\n", bad);
    while (n < total) n += (size_t)sprintf(text + n, "{\"name\":\"f\"},\n");
    sprintf(text + n, "{}]}\n");
    *lines_before = 0;
    for (size_t i = 0; i < *line_start; i++) *lines_before += text[i] == '\n';
    return text;
}

// Past the first buffer (its bytes moved, the file offset counted from a base) and within a
// few bytes of its end (an error there may be the cut: the buffer is refilled and the event
// decoded again), the error names the byte, line and column of the last byte jansson read.
TB_TEST(an_error_past_the_first_buffer_names_its_byte_line_and_column) {
    const size_t places[] = {(1 << 20) - 10, (3 << 19) + 7};
    for (size_t k = 0; k < 2; k++) {
        size_t lines, line_start;
        char *text = with_bad_event_at(places[k], &lines, &line_start);
        char name[32], expect[160];
        snprintf(name, sizeof name, "bad_at_%zu", places[k]);
        snprintf(expect, sizeof expect, "byte %zu (line %zu, column %zu): traceEvents[%zu]: invalid token near 'tru'",
                 places[k], lines + 1, places[k] - line_start + 1, lines - 1);
        TB_CHECK(text[places[k]] == 'u' && text[places[k] + 1] == '}', "the test's bad event at byte %zu", places[k]);
        refused(name, text, expect);
        free(text);
    }
}

TB_TEST(the_readers_own_error_stops_the_read_and_is_returned) {
    collected c = {json_array(), 0, 1};
    tb_error err = {{0}};
    json_t *top = NULL;
    TB_CHECK(tb_trace_read(DIR "/object.json", collect, &c, &top, &err) == -1 &&
                 !strcmp(err.msg, "the reader's own refusal at 1") && json_array_size(c.events) == 1 && !top,
             "rc -1, the callback's message, one event before it: '%s', %zu events", err.msg,
             json_array_size(c.events));
    json_decref(c.events);
}

int main(void) {
    TB_RUN(reading_keeps_one_event_not_the_file);
    TB_RUN(both_formats_give_the_events_a_whole_load_gives);
    TB_RUN(a_trace_larger_than_the_buffer_reads_whole_across_every_cut);
    TB_RUN(what_is_not_a_trace_is_refused_naming_where);
    TB_RUN(an_error_past_the_first_buffer_names_its_byte_line_and_column);
    TB_RUN(the_readers_own_error_stops_the_read_and_is_returned);
    return tb_test_summary();
}
