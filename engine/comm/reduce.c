#include "comm/reduce.h"

#include <string.h>

void tb_reduce_share(size_t count, int i, int n, size_t *lo, size_t *hi) {
    *lo = count * (size_t)i / (size_t)n;
    *hi = count * (size_t)(i + 1) / (size_t)n;
}

void tb_reduce_into(float *dst, const float *const *src, int n, size_t lo, size_t hi, tb_red_op op) {
    memcpy(dst, src[0] + lo, (hi - lo) * sizeof(float));
    for (int j = 1; j < n; j++) {
        const float *x = src[j] + lo;
        if (op == TB_RED_SUM)
            for (size_t i = 0; i < hi - lo; i++) dst[i] += x[i];
        else
            for (size_t i = 0; i < hi - lo; i++) dst[i] = x[i] > dst[i] ? x[i] : dst[i];
    }
}
