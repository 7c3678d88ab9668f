// host_stage.h — host code reading and writing the tensors of the thread's backend: the
// checkpoints (--save, --load, --save-hf, a Hugging Face --load) and the tensor dump
// (docs/ARCHITECTURE.md, "CUDA backend": host staging).
//
// On a host backend (the CPU) a tensor is host memory: it is read and written in place, no
// copy. On a device (tb_be()->host == 0) it goes through a host buffer with copy_to_host /
// copy_from_host, one tensor at a time: a tb_host_stage holds one buffer, grown to the
// largest tensor staged through it. Staging buffers are host memory (malloc), never the
// rank's device allocator's, so they are in none of its categories.
#ifndef TB_BACKEND_HOST_STAGE_H
#define TB_BACKEND_HOST_STAGE_H

#include <stddef.h>

#include "runtime/memory.h"

typedef struct tb_host_stage {
    void *buf;   // malloc'd, NULL until a device tensor is staged
    size_t cap;  // bytes
} tb_host_stage;

// The bytes of `tensor` readable by host code until the stage's next use: the tensor itself
// on a host backend, else a copy of it in the stage's buffer.
const void *tb_host_read(tb_host_stage *s, const void *tensor, size_t bytes);
// Host memory for host code to fill with what `tensor` will hold: the tensor itself on a host
// backend, else the stage's buffer; tb_host_write_end then copies it into the tensor (nothing
// to do on a host backend).
void *tb_host_write_begin(tb_host_stage *s, void *tensor, size_t bytes);
void tb_host_write_end(tb_host_stage *s, void *tensor, size_t bytes);
void tb_host_stage_free(tb_host_stage *s);

// Host memory for host code (a checkpoint's reassembled tensor, the dump's tensors): where
// mem's blocks are host memory, a workspace block of mem (counted as the CPU always counted
// it); where they are device memory (tb_allocator_set_device), malloc. Freed by
// tb_host_buffer_free with the same allocator.
void *tb_host_buffer(tb_allocator *mem, size_t bytes, const char *what);
void tb_host_buffer_free(tb_allocator *mem, void *p);

#endif
