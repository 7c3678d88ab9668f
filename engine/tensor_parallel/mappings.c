#include "tensor_parallel/mappings.h"

#include <string.h>

#include "backend/backend.h"
#include "runtime/ranges.h"

void reduce_from_tensor_model_parallel_region(const tb_tp_region *r, float *buf, size_t count) {
    if (tb_tp_size(r) > 1) tb_all_reduce(r->tp, buf, count, TB_RED_SUM);
}

// Rows of rank `rank`'s sequence shard, (B, T/tp, C), copied between the (B,T,C) layout and
// a contiguous block. to_block: (B,T,C) → block; else block → (B,T,C).
static void shard_rows(const tb_tp_region *r, int rank, float *btc, float *block, int to_block) {
    const int tp = tb_tp_size(r), Tl = r->T / tp;
    const size_t row = (size_t)Tl * r->C * sizeof(float);
    for (int b = 0; b < r->B; b++) {
        float *seq = btc + ((size_t)b * r->T + (size_t)rank * Tl) * r->C;
        float *blk = block + (size_t)b * Tl * r->C;
        if (to_block) tb_be()->copy(blk, seq, row);
        else tb_be()->copy(seq, blk, row);
    }
}

void gather_from_sequence_parallel_region(const tb_tp_region *r, const float *local, float *full) {
    const int tp = tb_tp_size(r);
    const size_t shard = (size_t)r->B * (r->T / tp) * r->C;
    if (tp == 1) {
        if (full != local) tb_be()->copy(full, local, shard * sizeof(float));
        return;
    }
    tb_all_gather(r->tp, local, r->staging, shard);  // rank-major: [(B,T/tp,C) of rank 0 | rank 1 | ...]
    for (int k = 0; k < tp; k++) shard_rows(r, k, full, r->staging + (size_t)k * shard, 0);
}

void reduce_scatter_to_sequence_parallel_region(const tb_tp_region *r, const float *full, float *local) {
    const int tp = tb_tp_size(r);
    const size_t shard = (size_t)r->B * (r->T / tp) * r->C;
    if (tp == 1) {
        if (full != local) tb_be()->copy(local, full, shard * sizeof(float));
        return;
    }
    for (int k = 0; k < tp; k++) shard_rows(r, k, (float *)full, r->staging + (size_t)k * shard, 1);
    tb_reduce_scatter(r->tp, r->staging, local, shard);
}

void scatter_to_sequence_parallel_region(const tb_tp_region *r, const float *full, float *local) {
    const int tp = tb_tp_size(r);
    if (tp == 1) {
        if (full != local) tb_be()->copy(local, full, (size_t)r->B * r->T * r->C * sizeof(float));
        return;
    }
    shard_rows(r, r->tp->index, (float *)full, local, 1);
}
