// warp.cuh — the warp-wide reductions the CUDA kernels share (every lane gets the result;
// a full warp of 32 lanes takes part).
#ifndef TB_BACKEND_CUDA_WARP_CUH
#define TB_BACKEND_CUDA_WARP_CUH

__device__ __forceinline__ float warp_sum(float x) {
    for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
    return x;
}
__device__ __forceinline__ float warp_max(float x) {
    for (int o = 16; o > 0; o >>= 1) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, o));
    return x;
}

#endif
