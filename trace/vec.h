// vec.h — the growable array of trace/: fixed-size items, generic over the item size.
//
// Every array trace/ grows while reading (a unit's facts, the index's rows, runtime events,
// a file's lines and blocks) is a tb_vec. Items are zeroed when pushed; growth doubles the
// capacity through core/xalloc.h, so a push never fails (out of memory ends the process
// naming the vec's `what`). The items stay where they are until the next push: take
// pointers into a vec only between pushes.
//
//   tb_vec v;
//   tb_vec_init(&v, sizeof(tb_gfile), "index files");
//   tb_gfile *f = tb_vec_push(&v);
//   ... TB_VEC_AT(&v, tb_gfile, i) ...
//   tb_gfile *all = tb_vec_take(&v);   // the caller owns (and frees) the items now
#ifndef TB_TRACE_VEC_H
#define TB_TRACE_VEC_H

#include <stddef.h>

typedef struct tb_vec {
    void *items;
    size_t len, cap, size;
    const char *what;  // named in the out-of-memory report
} tb_vec;

void tb_vec_init(tb_vec *v, size_t item_size, const char *what);
void *tb_vec_push(tb_vec *v);  // a zeroed new item at the end
#define TB_VEC_AT(v, type, i) (((type *)(v)->items)[i])
// The items (NULL when none), detached: the vec is empty afterwards and the caller frees them.
void *tb_vec_take(tb_vec *v);
void tb_vec_free(tb_vec *v);

#endif
