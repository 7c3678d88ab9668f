// vec.c — see vec.h.
#include "vec.h"

#include <stdlib.h>
#include <string.h>

#include "core/xalloc.h"

void tb_vec_init(tb_vec *v, size_t item_size, const char *what) {
    v->items = NULL;
    v->len = v->cap = 0;
    v->size = item_size;
    v->what = what;
}

void *tb_vec_push(tb_vec *v) {
    if (v->len == v->cap) {
        v->cap = v->cap ? 2 * v->cap : 16;
        v->items = tb_xreallocarray(v->items, v->cap, v->size, v->what ? v->what : "array");
    }
    void *it = (char *)v->items + v->len++ * v->size;
    memset(it, 0, v->size);
    return it;
}

void *tb_vec_take(tb_vec *v) {
    void *items = v->items;
    v->items = NULL;
    v->len = v->cap = 0;
    return items;
}

void tb_vec_free(tb_vec *v) { free(tb_vec_take(v)); }
