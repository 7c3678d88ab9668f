// adamw_element.h — the AdamW update of one value, shared by the CPU loop (cpu_adamw_update,
// backend/cpu/kernels.c) and the CUDA kernel (backend/cuda/kernels.cu), so both evaluate the same
// formula in the same order. Not bit for bit across the two: nvcc contracts a·b + c into
// fused multiply-adds by default (-fmad=true), and gcc does where -march=native has FMA
// (-ffp-contract=fast), each where it chooses; the GPU tests compare within a tolerance.
#ifndef TB_BACKEND_ADAMW_ELEMENT_H
#define TB_BACKEND_ADAMW_ELEMENT_H

#include <math.h>

#ifdef __CUDACC__
#define TB_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define TB_HOST_DEVICE static inline
#endif

TB_HOST_DEVICE void adamw_element(float *p, float *m, float *v, float g, float grad_scale, float b1, float b2,
                                  float eps, float keep, float step, float inv_sqrt_bc2) {
    float gj = g * grad_scale;
    float mj = b1 * *m + (1.0f - b1) * gj;
    float vj = b2 * *v + (1.0f - b2) * gj * gj;
    *m = mj;
    *v = vj;
    *p = *p * keep - step * mj / (sqrtf(vj) * inv_sqrt_bc2 + eps);
}

#endif
