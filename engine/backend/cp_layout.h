// cp_layout.h — context parallelism's zig-zag (transformer/context_parallel.h) as one inline
// function (as adamw_element.h), shared by the host code and the CUDA kernels (backend/cuda/context_parallel.cu):
// the sequence of T tokens is cut into 2·cp chunks of S = T/(2·cp); cp rank `rank` holds chunks
// rank and 2·cp−1−rank, its local row t < S in the first, S ≤ t < 2S in the second.
#ifndef TB_BACKEND_CP_LAYOUT_H
#define TB_BACKEND_CP_LAYOUT_H

#include <math.h>

#ifdef __CUDACC__
#define TB_CP_INLINE __host__ __device__ __forceinline__
#else
#define TB_CP_INLINE static inline
#endif

// The global position of cp rank `rank`'s local row t (of T / cp).
TB_CP_INLINE int tb_cp_position(int T, int cp, int rank, int t) {
    const int S = T / (2 * cp);
    return t < S ? rank * S + t : (2 * cp - 1 - rank) * S + (t - S);
}

// The ring's merge of one row of one head (hs values): a block's partial output po and
// log-sum-exp pl into the running o and *L by the online-softmax rule, lse' = log(e^L + e^pl),
// o' = o·e^(L − lse') + po·e^(pl − lse'). The CPU's loop and the CUDA kernel both call it.
TB_CP_INLINE void tb_cp_merge_row(float *o, float *L, const float *po, float pl, int hs) {
    const float hi = *L > pl ? *L : pl, lo = *L > pl ? pl : *L;
    const float merged = hi + log1pf(expf(lo - hi));
    const float wa = expf(*L - merged), wb = expf(pl - merged);
    for (int e = 0; e < hs; e++) o[e] = o[e] * wa + po[e] * wb;
    *L = merged;
}

#endif
