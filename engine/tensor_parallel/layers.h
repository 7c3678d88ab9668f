// layers.h — Megatron-Core's tensor-parallel layers (tensor_parallel/layers.py), CPU fp32.
//
// ColumnParallelLinear splits the weight along its output dimension (QKV, fc1), and
// RowParallelLinear along its input dimension (attention projection, fc2);
// VocabParallelEmbedding splits the vocabulary rows. Their conjugate mappings
// (mappings.py) are:
//   column-parallel: input via copy_to (identity forward, all-reduce of dinp backward)
//   row-parallel:    output via reduce_from (all-reduce forward, identity backward)
// With one tensor-parallel rank — all the engine runs today; config_validate refuses
// tp > 1 as not supported yet — both mappings are the identity, so each layer is exactly
// its local matmul. Weights are (out, in) as in Megatron and llm.c: out = inp @ Wᵀ + b.
#ifndef TB_TENSOR_PARALLEL_LAYERS_H
#define TB_TENSOR_PARALLEL_LAYERS_H

#include <stdint.h>

// inp (N,C), weight (OC,C), bias (OC) or NULL → out (N,OC)
void column_parallel_linear_forward(float *out, const float *inp, const float *weight,
                                    const float *bias, int N, int C, int OC);
// dout (N,OC) → dinp (N,C) written; dweight, dbias accumulated
void column_parallel_linear_backward(float *dinp, float *dweight, float *dbias, const float *dout,
                                     const float *inp, const float *weight, int N, int C, int OC);
void row_parallel_linear_forward(float *out, const float *inp, const float *weight, const float *bias,
                                 int N, int C, int OC);
void row_parallel_linear_backward(float *dinp, float *dweight, float *dbias, const float *dout,
                                  const float *inp, const float *weight, int N, int C, int OC);

// tokens (B,T) → out (B,T,C) = wte[token] + wpe[t]
void vocab_parallel_embedding_forward(float *out, const int32_t *tokens, const float *wte,
                                      const float *wpe, int B, int T, int C);
void vocab_parallel_embedding_backward(float *dwte, float *dwpe, const float *dout,
                                       const int32_t *tokens, int B, int T, int C);

#endif
