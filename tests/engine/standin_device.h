// standin_device.h — a stand-in "device" for the tests that take --device cuda's paths without
// a GPU: the CPU's kernels in a table that says its tensors are not host memory (host = 0),
// with counting copies to and from the host, and a device memory source over aligned_alloc
// for the rank's allocator (tb_allocator_set_device), counting its blocks. Host code that
// honours backend.h's contract (a tensor read or written only through copy_to_host /
// copy_from_host) computes on it exactly what it computes on the CPU.
#ifndef TB_TESTS_ENGINE_STANDIN_DEVICE_H
#define TB_TESTS_ENGINE_STANDIN_DEVICE_H

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "runtime/memory.h"

static _Atomic long to_host, from_host, device_blocks;
static _Thread_local long thread_to_host, thread_from_host;  // the calling rank's own copies
static tb_backend standin;

static void count_to_host(void *dst, const void *src, size_t bytes) {
    to_host++;
    thread_to_host++;
    memcpy(dst, src, bytes);
}
static void count_from_host(void *dst, const void *src, size_t bytes) {
    from_host++;
    thread_from_host++;
    memcpy(dst, src, bytes);
}

static int block_alloc(void *ctx, void **p, size_t bytes, char *why, size_t why_len) {
    (void)ctx;
    *p = aligned_alloc(64, (bytes + 63) / 64 * 64);
    if (!*p) return snprintf(why, why_len, "malloc failed"), -1;
    device_blocks++;
    return 0;
}
static void block_release(void *ctx, void *p) {
    (void)ctx;
    free(p);
}
static void block_zero(void *ctx, void *p, size_t bytes) {
    (void)ctx;
    memset(p, 0, bytes);
}
static const tb_mem_device standin_memory = {"stand-in", block_alloc, block_release, block_zero, NULL};

// Fills the stand-in table (call once, before any rank binds it).
static inline void standin_init(void) {
    standin = *tb_backend_cpu();
    standin.name = "stand-in device";
    standin.host = 0;
    standin.copy_to_host = count_to_host;
    standin.copy_from_host = count_from_host;
}

// The calling rank on the stand-in device: its allocator's blocks from the stand-in source,
// the stand-in table bound to its thread (tb_backend_bind(NULL) undoes the binding).
static inline void standin_bind(tb_allocator *mem) {
    tb_allocator_set_device(mem, &standin_memory);
    tb_backend_bind(&standin);
}

#endif
