// backend.c — the dispatch's binding (see backend.h); the CPU table is backend/cpu/cpu_backend.c.
#include "backend/backend.h"

#include <stdlib.h>

#include "core/xalloc.h"

static _Thread_local const tb_backend *bound;

const tb_backend *tb_be(void) { return bound ? bound : tb_backend_cpu(); }
void tb_backend_bind(const tb_backend *be) { bound = be; }

double tb_be_sum_to_host(const float *x, size_t n) {
    const tb_backend *be = tb_be();
    float *host = NULL;
    if (!be->host) {
        host = tb_xmalloc(n * sizeof(float) + 1, "loss read back from the device");
        be->copy_to_host(host, x, n * sizeof(float));
        x = host;
    }
    double sum = 0.0;
    for (size_t i = 0; i < n; i++) sum += x[i];
    free(host);
    return sum;
}
