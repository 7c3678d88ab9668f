#include "pipeline_parallel/schedules.h"

int pipeline_warmup(int p, int r, int m, int v) {
    if (p == 1) return 0;
    int w = v > 1 ? (p - r - 1) * 2 + (v - 1) * p : p - r - 1;
    return w < m * v ? w : m * v;
}

// Virtual microbatch k → (microbatch, chunk), Megatron's get_model_chunk_id with
// microbatch groups of size p.
static pp_op virtual_op(char kind, int k, int p, int v) {
    pp_op op = {kind, k, 0};
    if (v > 1) {
        int in_group = k % (p * v);
        op.chunk = in_group / p;
        if (kind == 'B') op.chunk = v - 1 - op.chunk;
        op.microbatch = k / (p * v) * p + k % p;
    }
    return op;
}

int pipeline_schedule(int p, int r, int m, int v, pp_op *ops) {
    const int total = m * v, warmup = pipeline_warmup(p, r, m, v);
    int n = 0;
    if (p == 1) {
        for (int k = 0; k < total; k++) {
            ops[n++] = virtual_op('F', k, p, v);
            ops[n++] = virtual_op('B', k, p, v);
        }
        return n;
    }
    for (int k = 0; k < warmup; k++) ops[n++] = virtual_op('F', k, p, v);
    for (int i = 0; i < total - warmup; i++) {
        ops[n++] = virtual_op('F', warmup + i, p, v);
        ops[n++] = virtual_op('B', i, p, v);
    }
    for (int k = total - warmup; k < total; k++) ops[n++] = virtual_op('B', k, p, v);
    return n;
}

double pipeline_theoretical_bubble(int p, int m, int v) {
    if (v < 1) v = 1;
    return (double)(p - 1) / ((double)v * m + p - 1);
}
