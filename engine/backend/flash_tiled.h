// flash_tiled.h — FlashAttention-2 as the CUDA tensor-core kernels run it
// (backend/cuda/attention_tc.cu), written first in C with the kernels' own tiles, loop order
// and roundings, so that a GPU run checks the transcription, not the algorithm
// (docs/ARCHITECTURE.md, "Attention on tensor cores").
//
// Tiles: a block of TB_FLASH_TILE_Q = 64 query rows, four warps of 16 rows each; key/value
// tiles of TB_FLASH_TILE_K = 64 rows. Every matrix product's operands are rounded to bf16 (the
// MMA's inputs: Q, K, V, the probabilities P, dO and dS), products accumulate in fp32;
// softmax, its statistics, the correction factors and D = rowsum(dO ∘ O) in fp32.
//
//   forward   per (sample, head, query block): key tiles in order up to the block's last
//             visible key; per row the running maximum m and sum l (the online softmax) and
//             the output accumulator O; out = O / l, lse = m + log l.
//   backward  D first (per row); then dK/dV per (sample, group, key tile): every head of the
//             group and every query block that sees the tile, dV += Pᵀ dO and dK += dSᵀ Q
//             accumulated in the tile's own registers (no atomics: the tile's rows belong to
//             one block); then dQ per (sample, head, query block): key tiles in order, dQ +=
//             dS K, in registers. P and dS are recomputed in each pass (FlashAttention-2's
//             trade of FLOPs for no atomics).
//
// Views (backend/flash_view.h): the fused causal core, context parallelism's all-gather view
// (queries at positions qpos) and the ring's blocks. Head sizes: multiples of 16 up to
// TB_FLASH_TC_MAX_HS (the MMA's k step; the tiles in shared memory); others are refused by
// tb_flash_tiled_supported and run the exact fp32 kernels.
#ifndef TB_BACKEND_FLASH_TILED_H
#define TB_BACKEND_FLASH_TILED_H

#include "backend/flash_view.h"

#define TB_FLASH_TILE_Q 64
#define TB_FLASH_TILE_K 64
#define TB_FLASH_WARP_ROWS 16
#define TB_FLASH_TC_MAX_HS 128

// 1 when head size hs runs on the tiled tensor-core kernels.
static inline int tb_flash_tiled_supported(int hs) { return hs > 0 && hs % 16 == 0 && hs <= TB_FLASH_TC_MAX_HS; }

// bf16 1: the operands rounded as the kernels' MMAs take them; 0: no rounding (fp32 throughout:
// the tiles and loop order alone, checked against the exact kernels to fp32's tolerance).
//
// out (B, o_rows, NH·hs) and lse (B, NH, o_rows): the view's Tq rows written.
void tb_flash_tiled_forward(float *out, float *lse, const tb_flash_view *v, int B, int NH, int G, int hs, int bf16);

// Given out and lse of the forward: ADDS the view's gradients into dq (laid out as the view's
// q rows: dq_base + the q offsets) and dkv (as its kv rows). D (B, NH, Tq floats) is the
// caller's scratch.
void tb_flash_tiled_backward(float *dq_base, float *dkv, float *D, const float *dout, const float *out,
                             const float *lse, const tb_flash_view *v, int B, int NH, int G, int hs, int bf16);

// bf16 rounding (to nearest, ties to even; NaN kept a NaN), as __float2bfloat16.
float tb_round_bf16(float x);

#endif
