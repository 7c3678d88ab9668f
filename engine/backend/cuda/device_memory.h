// device_memory.h — the tagged caching allocator on device memory: the categories, the
// per-category current/peak/cached bytes and the cap of runtime/memory.h, for cudaMalloc'd
// buffers. Device pointers cannot carry a header in front, so each block's record lives on
// the host, in a list keyed by the device pointer. An allocation over the cap, or one the
// device refuses (cudaMalloc fails even after the cache is returned), calls the OOM handler
// with the reason; without one, the report goes to stderr and the process exits with
// TB_EXIT_OUT_OF_MEMORY. Call sites never test for NULL.
//
// The raw allocation is a pair of functions (tb_device_raw): cudaMalloc/cudaFree on the
// current device by default (tb_device_raw_cuda), so the accounting itself runs and is
// tested on a machine without a GPU over a host-memory stand-in (tests/engine/test_cuda_memory.c).
#ifndef TB_BACKEND_CUDA_DEVICE_MEMORY_H
#define TB_BACKEND_CUDA_DEVICE_MEMORY_H

#include <stdio.h>

#include "runtime/memory.h"

typedef struct tb_device_raw {
    // 0 and *p set, or non-zero with the device's reason in `why`
    int (*alloc)(void *ctx, void **p, size_t bytes, char *why, size_t why_len);
    void (*release)(void *ctx, void *p);
    void *ctx;
    const char *name;  // "cudaMalloc" in reports
} tb_device_raw;

// cudaMalloc / cudaFree on the calling thread's current device (NULL functions when the CUDA
// backend is not built: every allocation then fails, naming why)
tb_device_raw tb_device_raw_cuda(void);

typedef struct tb_device_allocator tb_device_allocator;

// reason: "over the cap of N bytes" or "<raw name>: <device's message>"
typedef void (*tb_device_oom_handler)(void *owner, const tb_device_allocator *a, tb_mem_category category,
                                      size_t bytes, const char *what, const char *reason);

struct tb_device_allocator {
    tb_mem_stats stats;  // as runtime/memory.h: held by the engine, reserved = held + cached
    void *live;          // host records of live blocks (newest first)
    void *cached;        // host records of freed blocks kept for reuse (exact size)
    size_t cap;          // 0: none
    int caching;
    int device;          // for reports
    tb_device_raw raw;
    tb_device_oom_handler on_oom;
    void *owner;
};

void tb_device_allocator_init(tb_device_allocator *a, int device, size_t cap, tb_device_raw raw,
                              tb_device_oom_handler on_oom, void *owner);
void *tb_device_alloc(tb_device_allocator *a, tb_mem_category category, size_t bytes, const char *what);
void tb_device_free(tb_device_allocator *a, void *p);
void tb_device_allocator_set_caching(tb_device_allocator *a, int on);
void tb_device_allocator_release_cache(tb_device_allocator *a);
// frees every live block and the cache
void tb_device_allocator_destroy(tb_device_allocator *a);

// The OOM report (what the default handler prints): the request, the reason, and per
// category the allocated, peak and cached bytes, then the largest live buffers.
void tb_device_oom_report(FILE *f, const tb_device_allocator *a, tb_mem_category category, size_t bytes,
                          const char *what, const char *reason);

#endif
