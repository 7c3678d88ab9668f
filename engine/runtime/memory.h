// memory.h — the one tagged allocator every engine allocation goes through.
//
// Each allocation carries a category; the allocator keeps current and peak bytes per
// category and in total, so a step's memory can be explained by what holds it (the
// figures Megatron users read from torch.cuda.memory_stats, split by purpose). An
// optional cap turns an allocation that would cross it into an OOM: the allocator calls
// the owner's OOM handler (which writes the report and ends the run) instead of
// returning NULL, so call sites never test for NULL.
//
// With caching on (tb_allocator_set_caching), like PyTorch's caching allocator, freed blocks
// are kept for reuse by the next request of
// the same size instead of going back to the system: activations are freed and allocated
// again every microbatch, and fresh pages from the kernel cost a page fault and a clear
// each. The accounting (and the cap) count the bytes the engine holds, never the cache;
// `reserved` says how much the process holds in all.
#ifndef TB_CORE_MEMORY_H
#define TB_CORE_MEMORY_H

#include <stddef.h>
#include <stdint.h>

typedef enum tb_mem_category {
    TB_MEM_PARAMS,
    TB_MEM_GRADS,
    TB_MEM_OPTIMIZER,
    TB_MEM_ACTIVATIONS,
    TB_MEM_WORKSPACE,
    TB_MEM_COMM,
    TB_MEM_GATHERED,  // Megatron-FSDP: the other ranks' parameters of the units gathered now (distributed/fsdp.h)
    TB_MEM_NCATEGORIES
} tb_mem_category;

const char *tb_mem_category_name(tb_mem_category c);

typedef struct tb_allocator tb_allocator;

// Where the bytes of the blocks come from: the host (none set: posix_memalign) or a device
// (backend/cuda/cuda_backend.h: cudaMalloc on the rank's GPU). A device block's header (its
// size, category, name) lives on the host, found by the block's pointer when it is freed; the
// categories, peaks, cache, cap and OOM handler are the same. A device allocation that fails
// is retried once after the cache is given back (PyTorch's), then is an OOM whose reason
// (`device_failure`) the report names.
typedef struct tb_mem_device {
    const char *name;  // "cudaMalloc" in reports
    // 0 and *p set, or non-zero with the device's reason in `why`
    int (*alloc)(void *ctx, void **p, size_t bytes, char *why, size_t why_len);
    void (*release)(void *ctx, void *p);
    void (*zero)(void *ctx, void *p, size_t bytes);
    void *ctx;
} tb_mem_device;

// Called when an allocation of `bytes` in `category` would exceed the cap (or the system
// allocator fails). Should not return: it reports and fails the run (the engine's handler,
// reports/memory_report.c, unwinds the rank). If it returns — or there is none — the
// allocator ends the process with TB_EXIT_OUT_OF_MEMORY.
typedef void (*tb_oom_handler)(void *owner, const tb_allocator *a, tb_mem_category category,
                               size_t bytes, const char *what);

#define TB_MEM_WHAT_MAX 56
#define TB_MEM_SNAPSHOT_MAX 512

// One live buffer, as listed in the snapshot taken at the total peak.
typedef struct tb_mem_block_info {
    char what[TB_MEM_WHAT_MAX];
    tb_mem_category category;
    size_t bytes;
} tb_mem_block_info;

typedef struct tb_mem_stats {
    size_t current[TB_MEM_NCATEGORIES];
    size_t peak[TB_MEM_NCATEGORIES];
    size_t total_current;
    size_t total_peak;
    // current bytes per category at the moment total_peak was reached
    size_t at_total_peak[TB_MEM_NCATEGORIES];
    uint64_t allocations;
    size_t reserved;            // held from the system: in use + cached
    size_t reserved_peak;
    size_t cached[TB_MEM_NCATEGORIES];  // freed blocks kept for reuse, by the category they last held
} tb_mem_stats;

#define TB_MEM_CACHE_BINS 128

struct tb_allocator {
    tb_mem_stats stats;
    void *live;                 // doubly linked list of live blocks (newest first)
    struct {                    // freed blocks kept for reuse, one list per exact size
        size_t bytes;
        void *head;
    } cache[TB_MEM_CACHE_BINS];
    // The live buffers at the moment total_peak was reached (largest first when read
    // through tb_allocator_peak_snapshot); nsnapshot may be capped at TB_MEM_SNAPSHOT_MAX.
    tb_mem_block_info snapshot[TB_MEM_SNAPSHOT_MAX];
    int nsnapshot;
    size_t snapshot_dropped;    // live buffers not listed because the snapshot was full
    size_t cap;                 // 0 = no cap
    int caching;                // keep freed blocks for reuse (off by default)
    tb_oom_handler on_oom;
    void *owner;
    const tb_mem_device *device;  // NULL: host memory
    char device_failure[160];     // the device's reason for the last refused allocation ("" if none)
};

// Counts an allocation of `bytes` in category c into s (current, peaks, at_total_peak); returns
// 1 when it set a new total peak. Shared with the device allocator (backend/cuda/device_memory.h).
int tb_mem_stats_count_alloc(tb_mem_stats *s, tb_mem_category c, size_t bytes);

void tb_allocator_init(tb_allocator *a, size_t cap, tb_oom_handler on_oom, void *owner);

// 64-byte aligned; tb_calloc zero-fills. `what` names the buffer in OOM reports and
// snapshots (copied, so it may be a formatted stack buffer).
void *tb_alloc(tb_allocator *a, tb_mem_category category, size_t bytes, const char *what);
void *tb_calloc(tb_allocator *a, tb_mem_category category, size_t bytes, const char *what);
void tb_free(tb_allocator *a, void *p);

// Clears the peaks down to the current values (e.g. at the start of a step).
void tb_allocator_reset_peaks(tb_allocator *a);

void tb_allocator_set_caching(tb_allocator *a, int on);
// Blocks from a device from now on (before the first allocation; NULL: host).
void tb_allocator_set_device(tb_allocator *a, const tb_mem_device *device);
// Returns every cached block to the system (buffers in use are untouched). An allocator
// with caching on must call this before it goes away.
void tb_allocator_release_cache(tb_allocator *a);

// Reservations (host memory only: Megatron-FSDP's sharded buffers, distributed/fsdp.h): address
// space with no memory behind it, so that pointers into a whole buffer stay valid while only the
// ranges committed in it are held. A reservation reads as zeros and counts nothing. A committed
// range [p, p + bytes) counts as a live block of its category (the cap, the peaks, the snapshot:
// named `what`); its pages fault in as they are first written. Decommitting it gives its whole
// pages back to the system (MADV_DONTNEED) and zeroes what it shares of a page with a neighbour,
// so it reads as zeros again either way; its bytes leave the accounting. Commits within one
// reservation do not overlap; tb_unreserve decommits what is still committed in it.
void *tb_reserve(tb_allocator *a, size_t bytes, const char *what);
void tb_unreserve(tb_allocator *a, void *p, size_t bytes);
void tb_commit(tb_allocator *a, tb_mem_category category, void *p, size_t bytes, const char *what);
void tb_decommit(tb_allocator *a, void *p);

// Frees every live buffer: for a rank that failed mid-step, whose buffers no owner will
// free (its stack was unwound). Committed ranges are decommitted; reservations stay.
void tb_allocator_free_all(tb_allocator *a);

// Visits every live buffer, newest first.
void tb_allocator_each_live(const tb_allocator *a, void (*fn)(void *arg, const char *what,
                                                              tb_mem_category c, size_t bytes),
                            void *arg);

#endif
