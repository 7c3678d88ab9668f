// flash_view.h — where flash attention's queries, keys and values lie: one struct and its two
// common views, shared by the CPU kernel (backend/cpu/flash_attention.c) and the CUDA kernel
// (backend/cuda/attention.cu), so both read the same layouts.
//
// q rows (Tq per sample, qs floats apart, a sample qb floats after the last, head h at h·hs);
// k and v rows (Tk per sample, ks apart, kb between samples, group g at k_off + g·hs and
// v_off + g·hs), the keys in position order 0..Tk-1; qpos[i] the position of query row i (NULL:
// i), causal 1: key j visible to query i iff j ≤ qpos[i] (0: every key). out, dout and lse hold
// o_rows rows per sample (per sample and head for lse), the Tq rows of the view starting at
// their pointers.
#ifndef TB_BACKEND_FLASH_VIEW_H
#define TB_BACKEND_FLASH_VIEW_H

#include <stddef.h>
#include <stdint.h>

#ifdef __CUDACC__
#define TB_FLASH_VIEW_INLINE __host__ __forceinline__
#else
#define TB_FLASH_VIEW_INLINE static inline
#endif

typedef struct tb_flash_view {
    const float *q;
    int qs;
    size_t qb;
    const float *kv;
    int ks, k_off, v_off;
    size_t kb;
    int Tq, Tk, o_rows;
    const int32_t *qpos;
    int causal;
} tb_flash_view;

// Queries, keys and values all rows of one qkv tensor (B, T, (NH+2G)·hs): [Q heads | K groups |
// V groups].
TB_FLASH_VIEW_INLINE tb_flash_view tb_flash_view_fused(const float *qkv, int T, int NH, int G, int hs, int causal) {
    const int QKV = (NH + 2 * G) * hs;
    tb_flash_view v = {qkv, QKV, (size_t)T * QKV, qkv, QKV, NH * hs, (NH + G) * hs, (size_t)T * QKV, T, T, T, NULL,
                       causal};
    return v;
}

// Context parallelism: Tq queries of qkv at positions qpos against the whole sequence's keys
// and values, kv (B, Tk, 2·G·hs: [K groups | V groups]) in position order, causal by position.
TB_FLASH_VIEW_INLINE tb_flash_view tb_flash_view_cp(const float *qkv, const int32_t *qpos, const float *kv, int Tq,
                                                    int Tk, int NH, int G, int hs) {
    const int QKV = (NH + 2 * G) * hs, KV = 2 * G * hs;
    tb_flash_view v = {qkv, QKV, (size_t)Tq * QKV, kv, KV, 0, G * hs, (size_t)Tk * KV, Tq, Tk, Tq, qpos, 1};
    return v;
}

// Context parallelism's ring: one block of Tq query rows of a qkv tensor (B samples,
// q_batch_stride floats apart) against Tk key/value rows of a kv tensor ((2·G·hs)-float rows,
// kv_batch_stride between samples), every key visible (causal 0) or causal by row index
// (causal 1: the diagonal block); out and lse hold out_rows rows per sample.
TB_FLASH_VIEW_INLINE tb_flash_view tb_flash_view_block(const float *qkv, size_t q_batch_stride, const float *kv,
                                                       size_t kv_batch_stride, int Tq, int Tk, int out_rows, int causal,
                                                       int NH, int G, int hs) {
    const int QKV = (NH + 2 * G) * hs, KV = 2 * G * hs;
    tb_flash_view v = {qkv, QKV, q_batch_stride, kv, KV, 0, G * hs, kv_batch_stride, Tq, Tk, out_rows, NULL, causal};
    return v;
}

#endif
