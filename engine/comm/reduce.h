// reduce.h — the one summation of the CPU communicators: dst = src[0] + src[1] + ... in
// group order (or their elementwise max). The local and MPI backends both reduce through it,
// so a sum is the same bits whichever backend computed it (comm/mpi_backend.h).
#ifndef TB_COMM_REDUCE_H
#define TB_COMM_REDUCE_H

#include <stddef.h>

#include "comm/group.h"

// [lo, hi) of `count` elements that member i of n reduces in an all-reduce (its share).
void tb_reduce_share(size_t count, int i, int n, size_t *lo, size_t *hi);

// dst[0 .. hi-lo) = reduction of src[j][lo .. hi) over j = 0 .. n-1, in that order.
void tb_reduce_into(float *dst, const float *const *src, int n, size_t lo, size_t hi, tb_red_op op);

#endif
