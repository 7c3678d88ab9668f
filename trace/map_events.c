// map_events.c — see map_events.h.
#include "map_events.h"

#include <stdlib.h>
#include <string.h>

#include "core/xalloc.h"

void tb_rt_init(tb_rt *rt) {
    memset(rt, 0, sizeof *rt);
    tb_vec_init(&rt->events, sizeof(tb_rt_event), "range events");
    tb_vec_init(&rt->names_vec, sizeof(char *), "range names");
    tb_vec_init(&rt->roots, sizeof(json_t *), "trace documents");
    tb_strmap_init(&rt->name_index);
    rt->files = json_array();
    rt->dropped = json_array();
}

void tb_rt_drop(tb_rt_drops *d, const char *reason, long at) {
    int i = 0;
    while (i < d->n && strcmp(d->reason[i], reason)) i++;
    if (i == d->n) {
        if (d->n == TB_RT_MAX_REASONS) i--;  // (more reasons than the readers have)
        else d->n++;
        d->reason[i] = reason;
        d->first[i] = at;
    }
    d->count[i]++;
}

int tb_rt_note_drops(tb_rt *rt, const char *path, const tb_rt_drops *d) {
    int n = 0;
    for (int i = 0; i < d->n; i++) {
        json_array_append_new(rt->dropped, json_pack("{s:s, s:s, s:i, s:I}", "file", path, "reason", d->reason[i],
                                                     "count", d->count[i], "first", (json_int_t)d->first[i]));
        n += d->count[i];
    }
    rt->ndropped += n;
    return n;
}

void tb_rt_drops_text(const tb_rt *rt, const char *path, char *buf, size_t len) {
    size_t i, used = 0;
    json_t *x;
    long total = 0;
    json_array_foreach(rt->dropped, i, x) if (!strcmp(json_string_value(json_object_get(x, "file")), path)) total +=
        (long)json_integer_value(json_object_get(x, "count"));
    buf[0] = '\0';
    if (!total) return;
    used += (size_t)snprintf(buf, len, "dropped %ld malformed event%s:", total, total == 1 ? "" : "s");
    int k = 0;
    json_array_foreach(rt->dropped, i, x) {
        if (used >= len || strcmp(json_string_value(json_object_get(x, "file")), path)) continue;
        used += (size_t)snprintf(buf + used, len - used, "%s %lld %s (first: event %lld)", k++ ? "," : "",
                                 (long long)json_integer_value(json_object_get(x, "count")),
                                 json_string_value(json_object_get(x, "reason")),
                                 (long long)json_integer_value(json_object_get(x, "first")));
    }
}

static int intern(tb_rt *rt, const char *s) {
    const int *known = tb_strmap_get(&rt->name_index, s);
    if (known) return *known;
    *(char **)tb_vec_push(&rt->names_vec) = tb_xstrdup(s, "range name");
    rt->names = rt->names_vec.items;
    rt->nnames = (int)rt->names_vec.len;
    tb_strmap_put(&rt->name_index, s, rt->nnames - 1);
    return rt->nnames - 1;
}

void tb_rt_add_event(tb_rt *rt, const char *name, int rank, int64_t tid, int64_t start, int64_t dur, json_t *args) {
    int n = intern(rt, name);
    *(tb_rt_event *)tb_vec_push(&rt->events) = (tb_rt_event){n, rank, tid, start, dur < 0 ? 0 : dur, args, -1};
    rt->ev = rt->events.items;
    rt->nev = (int)rt->events.len;
}

void tb_rt_note_file(tb_rt *rt, const char *path, const char *format, int events) {
    json_array_append_new(rt->files, json_pack("{s:s, s:s, s:i}", "file", path, "format", format, "events", events));
}

int tb_rt_print_drops(const tb_rt *rt, FILE *out, const char *who) {
    size_t i;
    json_t *f;
    json_array_foreach(rt->files, i, f) {
        const char *path = json_string_value(json_object_get(f, "file"));
        char text[1024];
        tb_rt_drops_text(rt, path, text, sizeof text);
        if (text[0]) fprintf(out, "%s: %s: %s\n", who, path, text);
    }
    return rt->ndropped;
}

void tb_rt_keep_root(tb_rt *rt, json_t *root) { *(json_t **)tb_vec_push(&rt->roots) = root; }

void tb_rt_note_backend(tb_rt *rt, const char *backend) {
    if (!backend || rt->backend_conflict) return;
    if (!rt->backend) rt->backend = tb_xstrdup(backend, "trace backend");
    else if (strcmp(rt->backend, backend)) rt->backend_conflict = 1;
}

static const tb_rt *sort_rt;  // qsort context (single-threaded tool)

static int cmp_event(const void *a, const void *b) {
    const tb_rt_event *x = &sort_rt->ev[*(const int *)a], *y = &sort_rt->ev[*(const int *)b];
    if (x->rank != y->rank) return x->rank < y->rank ? -1 : 1;
    if (x->tid != y->tid) return x->tid < y->tid ? -1 : 1;
    if (x->start != y->start) return x->start < y->start ? -1 : 1;
    if (x->dur != y->dur) return x->dur > y->dur ? -1 : 1;  // the enclosing one first
    return *(const int *)a - *(const int *)b;
}

// Parent = the innermost event on the same rank and thread whose interval holds this one.
void tb_rt_link_parents(tb_rt *rt) {
    int *order = tb_xmalloc((size_t)(rt->nev + 1) * sizeof *order, "event order");
    for (int i = 0; i < rt->nev; i++) order[i] = i;
    sort_rt = rt;
    qsort(order, (size_t)rt->nev, sizeof *order, cmp_event);
    int *stack = tb_xmalloc((size_t)(rt->nev + 1) * sizeof *stack, "event stack"), depth = 0;
    for (int k = 0; k < rt->nev; k++) {
        tb_rt_event *e = &rt->ev[order[k]];
        while (depth > 0) {
            const tb_rt_event *top = &rt->ev[stack[depth - 1]];
            if (top->rank == e->rank && top->tid == e->tid && e->start + e->dur <= top->start + top->dur) break;
            depth--;
        }
        e->parent = depth > 0 ? stack[depth - 1] : -1;
        stack[depth++] = order[k];
    }
    free(stack);
    free(order);
}

void tb_rt_free(tb_rt *rt) {
    for (int i = 0; i < rt->nnames; i++) free(rt->names[i]);
    for (size_t i = 0; i < rt->roots.len; i++) json_decref(TB_VEC_AT(&rt->roots, json_t *, i));
    json_decref(rt->files);
    json_decref(rt->dropped);
    free(rt->backend);
    tb_vec_free(&rt->names_vec);
    tb_vec_free(&rt->roots);
    tb_vec_free(&rt->events);
    tb_strmap_free(&rt->name_index);
    memset(rt, 0, sizeof *rt);
}
