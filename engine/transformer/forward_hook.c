#include "transformer/forward_hook.h"

#include <stdarg.h>
#include <stdio.h>

void tb_forward_hook_call(const tb_forward_hook *h, const struct tb_tp_region *r, const float *x, int rows, int C,
                          const char *fmt, ...) {
    if (!h || !h->output) return;
    char name[96];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name, sizeof name, fmt, ap);
    va_end(ap);
    h->output(h->ctx, r, x, rows, C, name);
}
