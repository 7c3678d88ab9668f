// layers.h — Megatron-Core's tensor-parallel layers (tensor_parallel/layers.py), CPU fp32.
//
// ColumnParallelLinear splits the weight along its output dimension (QKV, fc1, the output
// layer); RowParallelLinear along its input dimension (attention projection, fc2);
// VocabParallelEmbedding splits the vocabulary rows. Weights are (out, in), as in Megatron
// and llm.c: out = inp @ Wᵀ + b. Where each collective sits (as in Megatron-Core's layers.py
// and mappings.py):
//
//                      forward                               backward
//   column-parallel    input is full (gathered under SP)     dinp: all-reduce over tp, or
//                      no communication                      reduce-scatter along the sequence (SP)
//   row-parallel       output: all-reduce over tp, or        dout: all-gathered along the
//                      reduce-scatter along the sequence     sequence (SP), else none
//                      (SP); the bias is added after it
//   vocab embedding    all-reduce of the masked lookups,     SP: all-gather of dout
//                      then SP: scatter along the sequence
//
// N = B·T rows; Ns = N / tp under sequence parallelism, else N.
#ifndef TB_TENSOR_PARALLEL_LAYERS_H
#define TB_TENSOR_PARALLEL_LAYERS_H

#include <stdint.h>

#include "tensor_parallel/mappings.h"

// inp (N,C) → out (N,OC) = inp @ Wᵀ + b, with W (OC,C) this rank's output rows, b (OC) or NULL
void column_parallel_linear_forward(float *out, const float *inp, const float *weight, const float *bias, int N,
                                    int C, int OC);
// dout (N,OC) → dinp (Ns,C), the input gradient summed over tp; `partial` (N,C) is scratch
// under sequence parallelism. dweight, dbias accumulated.
void column_parallel_linear_backward(const tb_tp_region *r, float *dinp, float *partial, float *dweight,
                                     float *dbias, const float *dout, const float *inp, const float *weight, int N,
                                     int C, int OC);
// inp (N,K) (K: this rank's input columns) → out (Ns,OC) summed over tp, + bias (OC, full)
// after the sum; `partial` (N,OC) is scratch under sequence parallelism.
void row_parallel_linear_forward(const tb_tp_region *r, float *out, float *partial, const float *inp,
                                 const float *weight, const float *bias, int N, int K, int OC);
// dout (Ns,OC) → dinp (N,K) written; dweight accumulated; dbias accumulated over dout's
// own rows (under SP a partial sum: all-reduced over tp with the other sequence-parallel
// gradients when the step's gradients are finalised). `gathered` (N,OC) is scratch under SP.
void row_parallel_linear_backward(const tb_tp_region *r, float *dinp, float *gathered, float *dweight,
                                  float *dbias, const float *dout, const float *inp, const float *weight, int N,
                                  int K, int OC);

// tokens (B,T) → out (Ns,C) = wte[token] + wpe[t]; wte (vocab_local,C) holds rows
// [vocab_start, vocab_start + vocab_local). full (N,C) is scratch.
void vocab_parallel_embedding_forward(const tb_tp_region *r, float *out, float *full, const int32_t *tokens,
                                      const float *wte, int vocab_start, int vocab_local, const float *wpe);
// dout (Ns,C) → dwte, dwpe accumulated; full (N,C) is scratch.
void vocab_parallel_embedding_backward(const tb_tp_region *r, float *dwte, float *dwpe, float *full,
                                       const float *dout, const int32_t *tokens, int vocab_start, int vocab_local);

#endif
