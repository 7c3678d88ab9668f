#include "runtime/memory.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "core/error.h"

// Every block is preceded by a 64-byte header that records its size and category, so
// tb_free needs only the pointer and the accounting can never drift from the truth.
typedef struct block_header {
    size_t bytes;
    uint32_t category;
    uint32_t magic;
    struct block_header *prev, *next;  // the live list
    void *data;                        // the block: right after the header, or on the device
    char what[TB_MEM_WHAT_MAX + 32];
} block_header;

_Static_assert(sizeof(block_header) % 64 == 0, "header keeps 64-byte alignment");

#define BLOCK_MAGIC 0x7b6d656du
#define COMMIT_MAGIC 0x7b636d74u  // a committed range of a reservation: its header malloc'd apart

static const char *const category_names[TB_MEM_NCATEGORIES] = {
    "params", "grads", "optimizer", "activations", "workspace", "comm", "gathered",
};

const char *tb_mem_category_name(tb_mem_category c) {
    return (unsigned)c < TB_MEM_NCATEGORIES ? category_names[c] : "unknown";
}

void tb_allocator_init(tb_allocator *a, size_t cap, tb_oom_handler on_oom, void *owner) {
    memset(a, 0, sizeof *a);
    a->cap = cap;
    a->on_oom = on_oom;
    a->owner = owner;
}

static void oom(tb_allocator *a, tb_mem_category c, size_t bytes, const char *what) {
    if (a->on_oom) a->on_oom(a->owner, a, c, bytes, what);
    else fprintf(stderr, "out of memory: %zu bytes for %s (%s)\n", bytes, what ? what : "?", tb_mem_category_name(c));
    fflush(NULL);
    _exit(TB_EXIT_OUT_OF_MEMORY);
}

static void take_snapshot(tb_allocator *a) {
    a->nsnapshot = 0;
    a->snapshot_dropped = 0;
    for (const block_header *h = a->live; h; h = h->next) {
        if (a->nsnapshot == TB_MEM_SNAPSHOT_MAX) {
            a->snapshot_dropped++;
            continue;
        }
        tb_mem_block_info *b = &a->snapshot[a->nsnapshot++];
        memcpy(b->what, h->what, TB_MEM_WHAT_MAX);
        b->category = (tb_mem_category)h->category;
        b->bytes = h->bytes;
    }
}

// A cached block of exactly `bytes`, or NULL. Cached blocks are linked through `next`.
static block_header *cache_take(tb_allocator *a, size_t bytes) {
    for (int i = 0; i < TB_MEM_CACHE_BINS; i++) {
        if (a->cache[i].bytes != bytes || !a->cache[i].head) continue;
        block_header *h = a->cache[i].head;
        a->cache[i].head = h->next;
        a->stats.cached[h->category] -= h->bytes;
        return h;
    }
    return NULL;
}

// Keeps a freed block for reuse in the bin of its size (or an empty bin); returns 0 when
// every bin holds blocks of other sizes.
static int cache_put(tb_allocator *a, block_header *h) {
    if (!a->caching || h->bytes == 0) return 0;
    int slot = -1;
    for (int i = 0; i < TB_MEM_CACHE_BINS; i++) {
        if (a->cache[i].bytes == h->bytes) {
            slot = i;
            break;
        }
        if (slot < 0 && !a->cache[i].head) slot = i;
    }
    if (slot < 0) return 0;
    a->cache[slot].bytes = h->bytes;
    h->next = a->cache[slot].head;
    a->cache[slot].head = h;
    a->stats.cached[h->category] += h->bytes;
    return 1;
}

int tb_mem_stats_count_alloc(tb_mem_stats *s, tb_mem_category c, size_t bytes) {
    s->allocations++;
    s->current[c] += bytes;
    if (s->current[c] > s->peak[c]) s->peak[c] = s->current[c];
    s->total_current += bytes;
    if (s->total_current <= s->total_peak) return 0;
    s->total_peak = s->total_current;
    memcpy(s->at_total_peak, s->current, sizeof s->current);
    return 1;
}

// A header on the host for a block on the device; a refused allocation is retried once
// after the cache has been given back, then is an OOM naming the device's reason.
static block_header *device_block(tb_allocator *a, tb_mem_category c, size_t bytes, const char *what) {
    const tb_mem_device *d = a->device;
    block_header *h = malloc(sizeof *h);
    if (!h) oom(a, c, bytes, what);
    char why[sizeof a->device_failure - 32] = "";
    void *p = NULL;
    if (d->alloc(d->ctx, &p, bytes ? bytes : 1, why, sizeof why) != 0) {
        tb_allocator_release_cache(a);
        if (d->alloc(d->ctx, &p, bytes ? bytes : 1, why, sizeof why) != 0) {
            free(h);
            snprintf(a->device_failure, sizeof a->device_failure, "%s: %s", d->name, why);
            oom(a, c, bytes, what);
        }
    }
    h->data = p;
    return h;
}

// Names block h, puts it at the head of the live list and counts it (a snapshot at a new peak).
static void live_link(tb_allocator *a, block_header *h, tb_mem_category c, size_t bytes, uint32_t magic,
                      const char *what) {
    h->bytes = bytes;
    h->category = (uint32_t)c;
    h->magic = magic;
    snprintf(h->what, TB_MEM_WHAT_MAX, "%s", what ? what : "?");
    h->prev = NULL;
    h->next = a->live;
    if (h->next) h->next->prev = h;
    a->live = h;
    if (tb_mem_stats_count_alloc(&a->stats, c, h->bytes)) take_snapshot(a);
}

// Takes block h off the live list and out of the current counts.
static void live_unlink(tb_allocator *a, block_header *h) {
    h->magic = 0;
    if (h->prev) h->prev->next = h->next;
    else a->live = h->next;
    if (h->next) h->next->prev = h->prev;
    a->stats.current[h->category] -= h->bytes;
    a->stats.total_current -= h->bytes;
}

static void *alloc_impl(tb_allocator *a, tb_mem_category c, size_t bytes, const char *what,
                        int zero) {
    tb_mem_stats *s = &a->stats;
    if (a->cap && s->total_current + bytes > a->cap) oom(a, c, bytes, what);
    block_header *h = cache_take(a, bytes);
    if (!h && a->device) {
        h = device_block(a, c, bytes, what);
        s->reserved += bytes;
        if (s->reserved > s->reserved_peak) s->reserved_peak = s->reserved;
    } else if (!h) {
        void *raw = NULL;
        if (posix_memalign(&raw, 64, sizeof(block_header) + (bytes ? bytes : 1)) != 0)
            oom(a, c, bytes, what);
        h = raw;
        h->data = h + 1;
        s->reserved += bytes;
        if (s->reserved > s->reserved_peak) s->reserved_peak = s->reserved;
    }
    void *p = h->data;
    if (zero && a->device) a->device->zero(a->device->ctx, p, bytes);
    else if (zero) memset(p, 0, bytes);
    live_link(a, h, c, bytes, BLOCK_MAGIC, what);
    return p;
}

void *tb_alloc(tb_allocator *a, tb_mem_category c, size_t bytes, const char *what) {
    return alloc_impl(a, c, bytes, what, 0);
}

void *tb_calloc(tb_allocator *a, tb_mem_category c, size_t bytes, const char *what) {
    return alloc_impl(a, c, bytes, what, 1);
}

// A device block's header: the live one whose block p is.
static block_header *device_header(const tb_allocator *a, void *p) {
    for (block_header *h = a->live; h; h = h->next)
        if (h->data == p) return h;
    fprintf(stderr, "tb_free: device pointer %p was not allocated by tb_alloc (or was freed twice)\n", p);
    abort();
}

// Gives a block back to where it came from.
static void release_block(tb_allocator *a, block_header *h) {
    if (a->device) a->device->release(a->device->ctx, h->data);
    free(h);
}

void tb_free(tb_allocator *a, void *p) {
    if (!p) return;
    block_header *h = a->device ? device_header(a, p) : (block_header *)p - 1;
    if (h->magic != BLOCK_MAGIC) {
        fprintf(stderr, "tb_free: %p was not allocated by tb_alloc (or was freed twice)\n", p);
        abort();
    }
    live_unlink(a, h);
    if (!cache_put(a, h)) {
        a->stats.reserved -= h->bytes;
        release_block(a, h);
    }
}

void tb_allocator_set_caching(tb_allocator *a, int on) {
    a->caching = on;
    if (!on) tb_allocator_release_cache(a);
}

void tb_allocator_release_cache(tb_allocator *a) {
    for (int i = 0; i < TB_MEM_CACHE_BINS; i++) {
        while (a->cache[i].head) {
            block_header *h = a->cache[i].head;
            a->cache[i].head = h->next;
            a->stats.reserved -= h->bytes;
            a->stats.cached[h->category] -= h->bytes;
            release_block(a, h);
        }
        a->cache[i].bytes = 0;
    }
}

void tb_allocator_set_device(tb_allocator *a, const tb_mem_device *device) { a->device = device; }

void tb_allocator_reset_peaks(tb_allocator *a) {
    tb_mem_stats *s = &a->stats;
    memcpy(s->peak, s->current, sizeof s->peak);
    s->total_peak = s->total_current;
    memcpy(s->at_total_peak, s->current, sizeof s->current);
    take_snapshot(a);
}

void tb_allocator_free_all(tb_allocator *a) {
    while (a->live) {
        block_header *h = a->live;
        if (h->magic == COMMIT_MAGIC) tb_decommit(a, h->data);
        else tb_free(a, h->data);
    }
}

// ---------------------------------------------------------------------------------------
// Reservations and their committed ranges

void *tb_reserve(tb_allocator *a, size_t bytes, const char *what) {
    if (a->device) {
        fprintf(stderr, "tb_reserve: %s: a device allocator has no reservations\n", what);
        abort();
    }
    void *p = mmap(NULL, bytes ? bytes : 1, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) oom(a, TB_MEM_PARAMS, bytes, what);
    return p;
}

void tb_unreserve(tb_allocator *a, void *p, size_t bytes) {
    if (!p) return;
    const char *lo = p, *hi = lo + bytes;
    for (block_header *h = a->live, *next; h; h = next) {
        next = h->next;
        const char *at = h->data;
        if (h->magic == COMMIT_MAGIC && at >= lo && at < hi) tb_decommit(a, h->data);
    }
    munmap(p, bytes ? bytes : 1);
}

void tb_commit(tb_allocator *a, tb_mem_category c, void *p, size_t bytes, const char *what) {
    tb_mem_stats *s = &a->stats;
    if (a->cap && s->total_current + bytes > a->cap) oom(a, c, bytes, what);
    block_header *h = malloc(sizeof *h);
    if (!h) oom(a, c, bytes, what);
    h->data = p;
    s->reserved += bytes;
    if (s->reserved > s->reserved_peak) s->reserved_peak = s->reserved;
    live_link(a, h, c, bytes, COMMIT_MAGIC, what);
}

void tb_decommit(tb_allocator *a, void *p) {
    block_header *h = a->live;
    while (h && !(h->magic == COMMIT_MAGIC && h->data == p)) h = h->next;
    if (!h) {
        fprintf(stderr, "tb_decommit: %p is not a committed range (or was decommitted twice)\n", p);
        abort();
    }
    live_unlink(a, h);
    a->stats.reserved -= h->bytes;
    // the whole pages inside go back to the system (they read as zeros after); the edges
    // share a page with a neighbouring range, which stays: they are zeroed here
    const uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE), lo = (uintptr_t)p, hi = lo + h->bytes;
    const uintptr_t in_lo = (lo + page - 1) / page * page, in_hi = hi / page * page;
    if (in_lo < in_hi) {
        memset(p, 0, in_lo - lo);
        memset((void *)in_hi, 0, hi - in_hi);
        if (madvise((void *)in_lo, in_hi - in_lo, MADV_DONTNEED) != 0) memset((void *)in_lo, 0, in_hi - in_lo);
    } else {
        memset(p, 0, h->bytes);
    }
    free(h);
}

void tb_allocator_each_live(const tb_allocator *a, void (*fn)(void *arg, const char *what,
                                                              tb_mem_category c, size_t bytes),
                            void *arg) {
    for (const block_header *h = a->live; h; h = h->next)
        fn(arg, h->what, (tb_mem_category)h->category, h->bytes);
}
