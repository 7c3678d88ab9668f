#include "reports/memory_report.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/failure_report.h"
#include "core/fileio.h"
#include "core/run_dir.h"
#include "comm/parallel_state.h"
#include "runtime/ranges.h"

json_t *memory_bytes_by_category(const size_t *bytes) {
    json_t *o = json_object();
    size_t total = 0;
    for (int c = 0; c < TB_MEM_NCATEGORIES; c++) {
        json_object_set_new(o, tb_mem_category_name((tb_mem_category)c), json_integer((json_int_t)bytes[c]));
        total += bytes[c];
    }
    json_object_set_new(o, "total", json_integer((json_int_t)total));
    return o;
}

static json_t *live_buffer(const char *what, tb_mem_category c, size_t bytes) {
    return json_pack("{s:s, s:s, s:I}", "what", what, "category", tb_mem_category_name(c), "bytes", (json_int_t)bytes);
}

static int by_bytes_desc(const void *a, const void *b) {
    const tb_mem_block_info *x = a, *y = b;
    return x->bytes < y->bytes ? 1 : x->bytes > y->bytes ? -1 : strcmp(x->what, y->what);
}

static json_t *memory_snapshot_json(tb_rank *rk) {
    tb_allocator *a = rk->mem;
    qsort(a->snapshot, (size_t)a->nsnapshot, sizeof a->snapshot[0], by_bytes_desc);
    json_t *live = json_array();
    for (int i = 0; i < a->nsnapshot; i++)
        json_array_append_new(live, live_buffer(a->snapshot[i].what, a->snapshot[i].category, a->snapshot[i].bytes));
    return json_pack("{s:i, s:s, s:I, s:I, s:o, s:o, s:o, s:o, s:I}", "rank", rk->rank, "rank_label", rk->label,
                     "cap_bytes", (json_int_t)a->cap, "total_peak_bytes", (json_int_t)a->stats.total_peak,
                     "at_total_peak", memory_bytes_by_category(a->stats.at_total_peak), "peak_by_category",
                     memory_bytes_by_category(a->stats.peak), "live_at_total_peak", live, "current",
                     memory_bytes_by_category(a->stats.current), "live_not_listed", (json_int_t)a->snapshot_dropped);
}

int memory_snapshot_write(tb_rank *rk, tb_error *err) {
    char path[TB_PATH_MAX + 64];
    if (tb_rank_file_path(path, sizeof path, rk->run_dir, TB_RANK_MEMORY, rk->rank, err) != 0) return -1;
    json_t *snap = memory_snapshot_json(rk);
    int rc = tb_write_json_atomic(path, snap, err);
    json_decref(snap);
    return rc;
}

static void add_live(void *arg, const char *what, tb_mem_category c, size_t bytes) {
    json_array_append_new(arg, live_buffer(what, c, bytes));
}

void memory_report_oom(void *owner, const tb_allocator *a, tb_mem_category category, size_t bytes, const char *what) {
    tb_rank *rk = owner;
    char stack[1024];
    tb_ranges_stack_string(rk->ranges, stack, sizeof stack);
    json_t *live = json_array();
    tb_allocator_each_live(a, add_live, live);
    json_t *report = json_pack(
        "{s:s, s:i, s:s, s:{s:i, s:i, s:i, s:i}, s:I, s:i, s:s, s:s, s:I, s:s, s:I, s:o, s:o, s:o}", "kind",
        "out_of_memory", "rank", rk->rank, "rank_label", rk->label, "coordinates", "tp", rk->coords.tp, "cp",
        rk->coords.cp, "dp", rk->coords.dp, "pp", rk->coords.pp, "step", (json_int_t)rk->step, "microbatch",
        rk->microbatch, "range_stack", stack, "requested_what", what ? what : "?", "requested_bytes",
        (json_int_t)bytes, "requested_category", tb_mem_category_name(category), "cap_bytes", (json_int_t)a->cap,
        "current", memory_bytes_by_category(a->stats.current), "peak", memory_bytes_by_category(a->stats.peak),
        "live", live);
    // allocated (current) against reserved: what the process holds, the caching allocator's
    // freed blocks included (torch.cuda.memory_stats' allocated vs reserved bytes)
    size_t reserved[TB_MEM_NCATEGORIES];
    for (int c = 0; c < TB_MEM_NCATEGORIES; c++) reserved[c] = a->stats.current[c] + a->stats.cached[c];
    json_object_set_new(report, "reserved", memory_bytes_by_category(reserved));  // its total: stats.reserved
    json_object_set_new(report, "cached", memory_bytes_by_category(a->stats.cached));
    // the device a rank's tensors are on (--device cuda), and why it refused, when it did
    json_object_set_new(report, "memory", json_string(a->device ? a->device->name : "host"));
    if (a->device_failure[0]) json_object_set_new(report, "device_failure", json_string(a->device_failure));
    // this rank's part, then oom.json merged from every rank's that ran out (core/failure_report.h)
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    char host[256] = "?";
    if (gethostname(host, sizeof host - 1) != 0) snprintf(host, sizeof host, "?");
    json_object_set_new(report, "process", json_integer(rk->world ? rk->world->process : 0));
    json_object_set_new(report, "host", json_string(host));
    json_object_set_new(report, "written_at", json_real((double)now.tv_sec + now.tv_nsec * 1e-9));
    char part[TB_PATH_MAX + 64], path[TB_PATH_MAX + 32];
    tb_error err;
    json_t *merged = NULL;
    int wrote = tb_rank_file_path(part, sizeof part, rk->run_dir, TB_RANK_OOM_PART, rk->rank, &err) == 0 &&
                tb_write_json_atomic(part, report, &err) == 0 &&
                tb_run_path(path, sizeof path, rk->run_dir, TB_RUN_OOM_REPORT, &err) == 0 &&
                tb_report_merge_write(rk->run_dir, TB_RANK_OOM_PART, &merged, &err) == 0;
    json_decref(report);
    const size_t others = merged ? json_array_size(json_object_get(merged, "out_of_memory_ranks")) - 1 : 0;
    json_decref(merged);

    fprintf(stderr, "\nOUT OF MEMORY on %s at step %lld, microbatch %d\n", rk->label, (long long)rk->step,
            rk->microbatch);
    fprintf(stderr, "  requested %zu bytes (%s, %s); cap %zu bytes, in use %zu bytes\n", bytes, what ? what : "?",
            tb_mem_category_name(category), a->cap, a->stats.total_current);
    fprintf(stderr, "  range stack: %s\n", stack[0] ? stack : "(none)");
    if (a->device_failure[0]) fprintf(stderr, "  the device refused it: %s\n", a->device_failure);
    fprintf(stderr, "  in use by category:");
    for (int c = 0; c < TB_MEM_NCATEGORIES; c++)
        fprintf(stderr, " %s %zu", tb_mem_category_name((tb_mem_category)c), a->stats.current[c]);
    fprintf(stderr, "\n  reserved %zu bytes (in use + %zu cached by the caching allocator)", a->stats.reserved,
            a->stats.reserved - a->stats.total_current);
    fprintf(stderr, "\n  report: %s (this rank: %s", wrote ? path : err.msg, part);
    if (others) fprintf(stderr, "; %zu other rank(s) out of memory too", others);
    fprintf(stderr, ")\n");
    fflush(NULL);
    if (a->device_failure[0])
        parallel_state_rank_fail(rk, TB_EXIT_OUT_OF_MEMORY, "out of memory: %zu bytes for %s (%s): %s (%s)", bytes,
                                 what ? what : "?", tb_mem_category_name(category), a->device_failure,
                                 wrote ? path : err.msg);
    parallel_state_rank_fail(rk, TB_EXIT_OUT_OF_MEMORY, "out of memory: %zu bytes for %s (%s) over --memory-cap %zu (%s)",
                             bytes, what ? what : "?", tb_mem_category_name(category), a->cap, wrote ? path : err.msg);
}
