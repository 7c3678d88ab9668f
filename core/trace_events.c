// trace_events.c — a Chrome trace read one event at a time (trace_events.h).
//
// The file is read into a buffer that holds the bytes not yet consumed; each value (an event,
// a member name, another member's value) is decoded by jansson where it starts, with
// JSON_DISABLE_EOF_CHECK so that jansson stops at its end and says where (json_error_t's
// position). Only the punctuation between the values ('{' '[' ':' ',' ']' '}') is read here.
// A value cut by the buffer's end fails to decode near that end (or decodes a number short):
// unless the file has ended, the buffer is refilled — grown when it holds nothing consumed —
// and the value decoded again.
#include "core/trace_events.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "core/fileio.h"
#include "core/xalloc.h"

enum {
    FIRST_BUFFER = 1 << 20,
    // An error this close to the end of the bytes read may be the cut, not the file's
    // (jansson reports a token cut short where it stops reading it).
    CUT_MARGIN = 64,
};

typedef struct reader {
    const char *path;
    int fd;
    char *buf;
    size_t cap, len, off;  // buf[off, len): read and not yet consumed
    long long base;        // the file offset of buf[0]
    long long line;        // the line of buf[off] (from 1)
    long long line_start;  // the file offset where that line starts
    int eof;               // the file's last byte is in buf
    tb_error *err;
} reader;

static int fail_at(reader *r, long long offset, long long line, long long column, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

static int fail_at(reader *r, long long offset, long long line, long long column, const char *fmt, ...) {
    char what[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    return tb_fail(r->err, "%s: byte %lld (line %lld, column %lld): %s", r->path, offset, line, column, what);
}

#define FAIL_HERE(r, ...)                                                                                   \
    fail_at((r), (r)->base + (long long)(r)->off, (r)->line, (r)->base + (long long)(r)->off - (r)->line_start + 1, \
            __VA_ARGS__)

// Reads more of the file after the unconsumed bytes (moved to the buffer's start; the buffer
// doubled when they fill it). Sets eof at the end of the file.
static int fill(reader *r) {
    if (r->off > 0) {
        memmove(r->buf, r->buf + r->off, r->len - r->off);
        r->base += (long long)r->off;
        r->len -= r->off;
        r->off = 0;
    }
    if (r->len == r->cap) {
        r->cap = r->cap ? 2 * r->cap : FIRST_BUFFER;
        r->buf = tb_xrealloc(r->buf, r->cap, "trace read buffer");
    }
    for (;;) {
        ssize_t n = read(r->fd, r->buf + r->len, r->cap - r->len);
        if (n > 0) {
            r->len += (size_t)n;
            return 0;
        }
        if (n == 0) {
            r->eof = 1;
            return 0;
        }
        if (errno != EINTR)
            return tb_fail(r->err, "%s: read failed at byte %lld: %s", r->path, r->base + (long long)r->len,
                           strerror(errno));
    }
}

// The line and its start's file offset after the n bytes at buf[off] (from *line, *start).
static void count_lines(const reader *r, size_t n, long long *line, long long *start) {
    const char *p = r->buf + r->off, *end = p + n;
    while ((p = memchr(p, '\n', (size_t)(end - p))) != NULL) {
        ++*line;
        *start = r->base + (long long)(++p - r->buf);
    }
}

// Consumes n bytes, counting their lines.
static void advance(reader *r, size_t n) {
    count_lines(r, n, &r->line, &r->line_start);
    r->off += n;
}

// The next byte after white space (consumed), or -1 at the end of the file.
static int peek(reader *r, int *c) {
    for (;;) {
        while (r->off < r->len) {
            char ch = r->buf[r->off];
            if (ch != ' ' && ch != '\t' && ch != '\n' && ch != '\r') {
                *c = (unsigned char)ch;
                return 0;
            }
            advance(r, 1);
        }
        if (r->eof) {
            *c = -1;
            return 0;
        }
        if (fill(r) != 0) return -1;
    }
}

// Decodes the value at the current position and consumes it. An error names it: what, with
// [index] when index >= 0 (formatted only then: this runs once per event).
static int decode(reader *r, json_t **out, const char *what, long long index) {
    for (;;) {
        const size_t avail = r->len - r->off;
        json_error_t je;
        json_t *v = json_loadb(r->buf + r->off, avail, JSON_DECODE_ANY | JSON_DISABLE_EOF_CHECK, &je);
        const size_t pos = je.position > 0 ? (size_t)je.position : 0;
        if (v && (pos < avail || r->eof)) {
            advance(r, pos);
            *out = v;
            return 0;
        }
        json_decref(v);
        if (!v && (r->eof || pos + CUT_MARGIN < avail)) {
            // where jansson stopped: the last byte it read (its position counts them), its line
            // and column counted here in bytes, as FAIL_HERE counts them
            const size_t last = pos > 0 ? pos - 1 : 0;
            long long line = r->line, line_start = r->line_start;
            count_lines(r, last, &line, &line_start);
            const long long at = r->base + (long long)(r->off + last);
            char name[320];
            if (index >= 0) snprintf(name, sizeof name, "%s[%lld]", what, index);
            else snprintf(name, sizeof name, "%s", what);
            return fail_at(r, at, line, at - line_start + 1, "%s: %s", name, je.text);
        }
        if (fill(r) != 0) return -1;
    }
}

static int read_events(reader *r, tb_trace_event_fn fn, void *ud) {
    advance(r, 1);  // '['
    int c;
    if (peek(r, &c) != 0) return -1;
    if (c == ']') {
        advance(r, 1);
        return 0;
    }
    for (size_t i = 0;; i++) {
        json_t *event;
        if (decode(r, &event, "traceEvents", (long long)i) != 0) return -1;
        const int rc = fn(event, i, ud, r->err);
        json_decref(event);
        if (rc != 0) return -1;
        if (peek(r, &c) != 0) return -1;
        if (c == ']') {
            advance(r, 1);
            return 0;
        }
        if (c != ',') return FAIL_HERE(r, "after traceEvents[%zu]: ',' or ']' expected, %s", i,
                                       c < 0 ? "the file ends" : "found another character");
        advance(r, 1);
    }
}

// One member after its name: traceEvents read event by event, another decoded into others;
// then the '}' after it (consumed: 1) or the ',' (consumed, *c the next byte: 0).
static int read_member(reader *r, tb_trace_event_fn fn, void *ud, json_t *others, const char *name, int *events,
                       int *c) {
    if (peek(r, c) != 0) return -1;
    if (*c != ':') return FAIL_HERE(r, "':' expected after the member name \"%s\"", name);
    advance(r, 1);
    if (peek(r, c) != 0) return -1;
    if (!strcmp(name, "traceEvents")) {
        if (*events) return FAIL_HERE(r, "a second traceEvents member");
        if (*c != '[') return FAIL_HERE(r, "traceEvents is not an array");
        if (read_events(r, fn, ud) != 0) return -1;
        *events = 1;
    } else {
        json_t *v;
        if (decode(r, &v, name, -1) != 0) return -1;
        json_object_set_new(others, name, v);
    }
    if (peek(r, c) != 0) return -1;
    if (*c != ',' && *c != '}') return FAIL_HERE(r, "',' or '}' expected after the member \"%s\"", name);
    const int close = *c == '}';
    advance(r, 1);
    return close ? 1 : peek(r, c);
}

// The object format: traceEvents read event by event, the other members decoded into others.
static int read_object(reader *r, tb_trace_event_fn fn, void *ud, json_t *others) {
    advance(r, 1);  // '{'
    int c, events = 0;
    if (peek(r, &c) != 0) return -1;
    if (c == '}') advance(r, 1);
    else
        for (;;) {
            if (c != '"')
                return FAIL_HERE(r, "a member name expected, %s", c < 0 ? "the file ends" : "found another character");
            json_t *key;
            if (decode(r, &key, "a member name", -1) != 0) return -1;
            const int rc = read_member(r, fn, ud, others, json_string_value(key), &events, &c);
            json_decref(key);
            if (rc < 0) return -1;
            if (rc == 1) break;
        }
    return events ? 0 : tb_fail(r->err, "%s: not a Chrome trace: no traceEvents array", r->path);
}

int tb_trace_read(const char *path, tb_trace_event_fn fn, void *ud, json_t **top, tb_error *err) {
    if (top) *top = NULL;
    reader r = {.path = path, .line = 1, .err = err};
    if ((r.fd = tb_open_regular(path, "a trace", NULL, err)) < 0) return -1;
    json_t *others = json_object();
    int c, rc = peek(&r, &c);
    if (rc == 0) {
        if (c == '[') rc = read_events(&r, fn, ud);
        else if (c == '{') rc = read_object(&r, fn, ud, others);
        else rc = FAIL_HERE(&r, "not a Chrome trace: %s", c < 0 ? "the file is empty" : "neither '{' nor '[' first");
    }
    if (rc == 0 && (rc = peek(&r, &c)) == 0 && c >= 0) rc = FAIL_HERE(&r, "data after the trace's end");
    close(r.fd);
    free(r.buf);
    if (rc == 0 && top) *top = others;
    else json_decref(others);
    return rc;
}
