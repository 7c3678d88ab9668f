#include "core/rng.h"

#include <math.h>

float tb_rng_normal(tb_rng *r) {
    // u1 in (0, 1]: never log(0)
    double u1 = ((double)(tb_rng_u64(r) >> 11) + 1.0) * 0x1p-53;
    double u2 = (double)(tb_rng_u64(r) >> 11) * 0x1p-53;
    return (float)(sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2));
}
