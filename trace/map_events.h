// map_events.h — runtime range events, as read from the traces: the container the trace
// readers (map_chrome.c, map_nsys.c) fill and the map (map.h) reads.
//
// An event is a range (push .. pop) on one rank and thread with its start and duration in
// ns. Names are interned: tb_rt.names holds each distinct name once, in order of first
// appearance, and an event refers to its name by index. parent is the innermost event on
// the same rank and thread whose interval holds the event's (tb_rt_link_parents).
#ifndef TB_TRACE_MAP_EVENTS_H
#define TB_TRACE_MAP_EVENTS_H

#include <jansson.h>
#include <stdint.h>
#include <stdio.h>

#include "strmap.h"
#include "vec.h"

typedef struct tb_rt_event {
    int name;            // index in tb_rt.names
    int rank;
    int64_t tid;
    int64_t start, dur;  // ns
    json_t *args;        // borrowed (Chrome traces), NULL otherwise
    int parent;          // innermost enclosing event on the same rank and thread, -1
} tb_rt_event;

typedef struct tb_rt {
    tb_rt_event *ev;     // events.items: valid until the next tb_rt_add_event
    int nev;
    char **names;        // names_vec.items: distinct names, in order of first appearance
    int nnames;
    tb_vec events;       // of tb_rt_event
    tb_vec names_vec;    // of char *
    tb_strmap name_index;  // name -> index in names
    tb_vec roots;        // of json_t *: parsed files (owners of args)
    json_t *files;       // [{file, format, events}]
    char *backend;       // the Chrome traces' distributedInfo.backend ("local", "nccl"), NULL
    int backend_conflict;
    // Range events that could not be read (a non-string name, a ts or dur that is not a
    // number, a negative dur): not in ev, counted per file and reason.
    int ndropped;
    json_t *dropped;     // [{file, reason, count, first}]: first the event's index in the file
} tb_rt;

// Counts of one file's malformed range events, per reason (tb_rt_drop, tb_rt_note_drops).
#define TB_RT_MAX_REASONS 12
typedef struct tb_rt_drops {
    const char *reason[TB_RT_MAX_REASONS];
    int count[TB_RT_MAX_REASONS];
    long first[TB_RT_MAX_REASONS];
    int n;
} tb_rt_drops;

// One malformed event (index `at` in its file) for `reason` ("with a non-string name").
void tb_rt_drop(tb_rt_drops *d, const char *reason, long at);
// A file's drops into rt (dropped, ndropped); returns how many.
int tb_rt_note_drops(tb_rt *rt, const char *path, const tb_rt_drops *d);
// "dropped 48 malformed events: 40 with a non-string name (first: event 12), 8 with ..." of
// one file's dropped entries, into buf.
void tb_rt_drops_text(const tb_rt *rt, const char *path, char *buf, size_t len);
// One line per file with drops on out: "WHO: FILE: dropped ...". Returns rt->ndropped.
int tb_rt_print_drops(const tb_rt *rt, FILE *out, const char *who);

void tb_rt_init(tb_rt *rt);
void tb_rt_add_event(tb_rt *rt, const char *name, int rank, int64_t tid, int64_t start, int64_t dur, json_t *args);
// A file read: its path, format and how many events it gave (tb_rt.files).
void tb_rt_note_file(tb_rt *rt, const char *path, const char *format, int events);
// Keeps a parsed JSON document alive as long as rt (events borrow its args).
void tb_rt_keep_root(tb_rt *rt, json_t *root);
// The backend a Chrome trace says it ran on; two different ones make it unknown.
void tb_rt_note_backend(tb_rt *rt, const char *backend);
// Sets every event's parent.
void tb_rt_link_parents(tb_rt *rt);
void tb_rt_free(tb_rt *rt);

#endif
