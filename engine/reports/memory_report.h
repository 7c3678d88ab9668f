// memory_report.h — what a rank's memory accounting leaves in the run directory:
// memory.rank-NNNNN.json (the snapshot at the rank's peak: bytes per category and every
// live buffer at that moment, largest first) and, when an allocation goes over
// --memory-cap, the rank's oom.rank-NNNNN.json merged with every other rank's that ran out
// into oom.json (core/failure_report.h), with a summary on stderr.
#ifndef TB_REPORTS_MEMORY_REPORT_H
#define TB_REPORTS_MEMORY_REPORT_H

#include <jansson.h>
#include <stddef.h>

#include "core/error.h"
#include "runtime/memory.h"

struct tb_rank;

// {"params": bytes, ..., "comm": bytes, "total": bytes} of a per-category array.
json_t *memory_bytes_by_category(const size_t *bytes);

// Writes memory.rank-NNNNN.json of rk (temp + rename).
int memory_snapshot_write(struct tb_rank *rk, tb_error *err);

// The tagged allocator's OOM handler (owner: the tb_rank): writes oom.rank-NNNNN.json — rank
// and coordinates, process and host, step, microbatch, range stack, the request, bytes in use
// per category, every live buffer — then merges the parts of every rank that ran out into
// oom.json (the earliest one's fields at the top, a list of all: two ranks that run out at
// once both stay in it) and prints a summary on stderr, then fails the rank (parallel_state_rank_fail,
// exit status 3 for the run). Does not return.
void memory_report_oom(void *owner, const tb_allocator *a, tb_mem_category category, size_t bytes, const char *what);

#endif
