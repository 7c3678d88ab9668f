// cpu_backend.c — the CPU table of the dispatch (backend.h): host memory, the cpu_* kernels
// (kernels.h, one per line of backend/kernel_table.h), the default backend of every thread
// (tb_be).
#include <string.h>

#include "backend/backend.h"
#include "backend/cpu/kernels.h"

static void cpu_copy(void *dst, const void *src, size_t bytes) {
    if (dst != src) memcpy(dst, src, bytes);
}
static void cpu_zero(void *dst, size_t bytes) { memset(dst, 0, bytes); }
static void cpu_synchronize(void) {}

#define CPU_ENTRY(side, ret, name, params, args) .name = cpu_##name,

static const tb_backend cpu_backend = {
    .name = "cpu",
    .host = 1,
    .copy = cpu_copy,
    .zero = cpu_zero,
    .copy_to_host = cpu_copy,
    .copy_from_host = cpu_copy,
    .synchronize = cpu_synchronize,
    TB_KERNEL_TABLE(CPU_ENTRY)
    // no phase timer, side thread, streams or events: NULL (backend.h)
};

const tb_backend *tb_backend_cpu(void) { return &cpu_backend; }
