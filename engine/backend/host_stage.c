// host_stage.c — see host_stage.h.
#include "backend/host_stage.h"

#include <stdlib.h>

#include "backend/backend.h"
#include "core/xalloc.h"

static void *grown(tb_host_stage *s, size_t bytes) {
    if (s->cap < bytes) {
        free(s->buf);
        s->buf = tb_xmalloc(bytes, "host staging of a device tensor");
        s->cap = bytes;
    }
    return s->buf;
}

const void *tb_host_read(tb_host_stage *s, const void *tensor, size_t bytes) {
    const tb_backend *be = tb_be();
    if (be->host || !bytes) return tensor;
    void *h = grown(s, bytes);
    be->copy_to_host(h, tensor, bytes);
    return h;
}

void *tb_host_write_begin(tb_host_stage *s, void *tensor, size_t bytes) {
    return tb_be()->host || !bytes ? tensor : grown(s, bytes);
}

void tb_host_write_end(tb_host_stage *s, void *tensor, size_t bytes) {
    const tb_backend *be = tb_be();
    if (!be->host && bytes) be->copy_from_host(tensor, s->buf, bytes);
}

void tb_host_stage_free(tb_host_stage *s) {
    free(s->buf);
    s->buf = NULL;
    s->cap = 0;
}

void *tb_host_buffer(tb_allocator *mem, size_t bytes, const char *what) {
    if (!mem->device) return tb_alloc(mem, TB_MEM_WORKSPACE, bytes, what);
    return tb_xmalloc(bytes ? bytes : 1, what);
}

void tb_host_buffer_free(tb_allocator *mem, void *p) {
    if (!mem->device) tb_free(mem, p);
    else free(p);
}
