// device_memory.c — see device_memory.h. Compiled always; only tb_device_raw_cuda needs the
// CUDA runtime.
#include "backend/cuda/device_memory.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/error.h"
#include "core/xalloc.h"

#ifdef TB_HAVE_CUDA_BACKEND
#include <cuda_runtime.h>
#endif

typedef struct device_block {
    void *ptr;
    size_t bytes;
    tb_mem_category category;
    char what[TB_MEM_WHAT_MAX];
    struct device_block *next;
} device_block;

#ifdef TB_HAVE_CUDA_BACKEND
static int cuda_raw_alloc(void *ctx, void **p, size_t bytes, char *why, size_t why_len) {
    (void)ctx;
    cudaError_t e = cudaMalloc(p, bytes ? bytes : 1);
    if (e == cudaSuccess) return 0;
    (void)cudaGetLastError();  // clear the sticky-free error so later calls are unaffected
    snprintf(why, why_len, "%s (%s)", cudaGetErrorString(e), cudaGetErrorName(e));
    return -1;
}
static void cuda_raw_release(void *ctx, void *p) {
    (void)ctx;
    cudaError_t e = cudaFree(p);  // a release cannot fail the run: said, not lost
    if (e != cudaSuccess) fprintf(stderr, "CUDA device memory: cudaFree: %s\n", cudaGetErrorString(e));
}
tb_device_raw tb_device_raw_cuda(void) { return (tb_device_raw){cuda_raw_alloc, cuda_raw_release, NULL, "cudaMalloc"}; }
#else
static int unbuilt_alloc(void *ctx, void **p, size_t bytes, char *why, size_t why_len) {
    (void)ctx, (void)p, (void)bytes;
    snprintf(why, why_len, "the CUDA backend is not built (no nvcc at configure time)");
    return -1;
}
static void unbuilt_release(void *ctx, void *p) { (void)ctx, (void)p; }
tb_device_raw tb_device_raw_cuda(void) { return (tb_device_raw){unbuilt_alloc, unbuilt_release, NULL, "cudaMalloc"}; }
#endif

void tb_device_allocator_init(tb_device_allocator *a, int device, size_t cap, tb_device_raw raw,
                              tb_device_oom_handler on_oom, void *owner) {
    memset(a, 0, sizeof *a);
    a->device = device;
    a->cap = cap;
    a->raw = raw;
    a->on_oom = on_oom;
    a->owner = owner;
}

static void insert_sorted(tb_mem_block_info *snap, int *n, const device_block *b) {
    if (*n == TB_MEM_SNAPSHOT_MAX && snap[*n - 1].bytes >= b->bytes) return;
    int i = *n < TB_MEM_SNAPSHOT_MAX ? (*n)++ : *n - 1;
    while (i > 0 && snap[i - 1].bytes < b->bytes) {
        snap[i] = snap[i - 1];
        i--;
    }
    memcpy(snap[i].what, b->what, TB_MEM_WHAT_MAX);
    snap[i].category = b->category;
    snap[i].bytes = b->bytes;
}

void tb_device_oom_report(FILE *f, const tb_device_allocator *a, tb_mem_category category, size_t bytes,
                          const char *what, const char *reason) {
    const tb_mem_stats *s = &a->stats;
    fprintf(f, "CUDA out of memory on device %d: %zu bytes for %s (%s): %s\n", a->device, bytes, what ? what : "?",
            tb_mem_category_name(category), reason);
    fprintf(f, "  allocated %zu bytes, reserved %zu (cached %zu), cap %zu%s\n", s->total_current, s->reserved,
            s->reserved - s->total_current, a->cap, a->cap ? "" : " (none)");
    fprintf(f, "  %-12s %14s %14s %14s\n", "category", "allocated", "peak", "cached");
    for (int c = 0; c < TB_MEM_NCATEGORIES; c++)
        fprintf(f, "  %-12s %14zu %14zu %14zu\n", tb_mem_category_name((tb_mem_category)c), s->current[c], s->peak[c],
                s->cached[c]);
    enum { SHOW = 8 };
    tb_mem_block_info top[TB_MEM_SNAPSHOT_MAX];
    int n = 0;
    for (const device_block *b = a->live; b; b = b->next) insert_sorted(top, &n, b);
    if (n) fprintf(f, "  largest live buffers:\n");
    for (int i = 0; i < n && i < SHOW; i++)
        fprintf(f, "    %14zu  %-11s %s\n", top[i].bytes, tb_mem_category_name(top[i].category), top[i].what);
}

static void oom(tb_device_allocator *a, tb_mem_category c, size_t bytes, const char *what, const char *reason) {
    if (a->on_oom) a->on_oom(a->owner, a, c, bytes, what, reason);
    else tb_device_oom_report(stderr, a, c, bytes, what, reason);
    fflush(NULL);
    _exit(TB_EXIT_OUT_OF_MEMORY);
}

static void free_records(tb_device_allocator *a, device_block **list) {
    while (*list) {
        device_block *b = *list;
        *list = b->next;
        a->raw.release(a->raw.ctx, b->ptr);
        a->stats.reserved -= b->bytes;
        free(b);
    }
}

void tb_device_allocator_release_cache(tb_device_allocator *a) {
    free_records(a, (device_block **)&a->cached);
    memset(a->stats.cached, 0, sizeof a->stats.cached);
}

void tb_device_allocator_set_caching(tb_device_allocator *a, int on) {
    a->caching = on;
    if (!on) tb_device_allocator_release_cache(a);
}

void *tb_device_alloc(tb_device_allocator *a, tb_mem_category c, size_t bytes, const char *what) {
    tb_mem_stats *s = &a->stats;
    if (a->cap && s->total_current + bytes > a->cap) {
        char reason[96];
        snprintf(reason, sizeof reason, "over the cap of %zu bytes", a->cap);
        oom(a, c, bytes, what, reason);
    }
    device_block *b = NULL;
    for (device_block **pp = (device_block **)&a->cached; *pp; pp = &(*pp)->next)
        if ((*pp)->bytes == bytes) {
            b = *pp;
            *pp = b->next;
            s->cached[b->category] -= b->bytes;
            break;
        }
    if (!b) {
        void *p = NULL;
        char why[256] = "";
        int failed = a->raw.alloc(a->raw.ctx, &p, bytes, why, sizeof why);
        if (failed && a->cached) {  // as PyTorch: give the cache back to the device, try once more
            tb_device_allocator_release_cache(a);
            failed = a->raw.alloc(a->raw.ctx, &p, bytes, why, sizeof why);
        }
        if (failed) {
            char reason[320];
            snprintf(reason, sizeof reason, "%s: %s", a->raw.name ? a->raw.name : "device allocation", why);
            oom(a, c, bytes, what, reason);
        }
        b = tb_xcalloc(1, sizeof *b, "device block record");
        b->ptr = p;
        b->bytes = bytes;
        s->reserved += bytes;
        if (s->reserved > s->reserved_peak) s->reserved_peak = s->reserved;
    }
    b->category = c;
    snprintf(b->what, sizeof b->what, "%s", what ? what : "?");
    b->next = a->live;
    a->live = b;
    tb_mem_stats_count_alloc(s, c, bytes);
    return b->ptr;
}

void tb_device_free(tb_device_allocator *a, void *p) {
    if (!p) return;
    device_block **pp = (device_block **)&a->live;
    while (*pp && (*pp)->ptr != p) pp = &(*pp)->next;
    if (!*pp) {
        fprintf(stderr, "tb_device_free: %p was not allocated by tb_device_alloc (or was freed twice)\n", p);
        abort();
    }
    device_block *b = *pp;
    *pp = b->next;
    a->stats.current[b->category] -= b->bytes;
    a->stats.total_current -= b->bytes;
    if (a->caching) {
        b->next = a->cached;
        a->cached = b;
        a->stats.cached[b->category] += b->bytes;
    } else {
        a->raw.release(a->raw.ctx, b->ptr);
        a->stats.reserved -= b->bytes;
        free(b);
    }
}

void tb_device_allocator_destroy(tb_device_allocator *a) {
    while (a->live) tb_device_free(a, ((device_block *)a->live)->ptr);
    tb_device_allocator_release_cache(a);
}
