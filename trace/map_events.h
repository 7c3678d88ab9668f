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
} tb_rt;

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
