#include "tensor_parallel/layers.h"

#include "backend/cpu/kernels.h"

void column_parallel_linear_forward(float *out, const float *inp, const float *weight,
                                    const float *bias, int N, int C, int OC) {
    // copy_to_tensor_model_parallel_region(inp): identity in forward
    cpu_matmul_forward(out, inp, weight, bias, N, C, OC);
}

void column_parallel_linear_backward(float *dinp, float *dweight, float *dbias, const float *dout,
                                     const float *inp, const float *weight, int N, int C, int OC) {
    cpu_matmul_backward(dinp, dweight, dbias, dout, inp, weight, N, C, OC);
    // copy_to_tensor_model_parallel_region backward: all-reduce of dinp over tp (one rank: none)
}

void row_parallel_linear_forward(float *out, const float *inp, const float *weight, const float *bias,
                                 int N, int C, int OC) {
    cpu_matmul_forward(out, inp, weight, bias, N, C, OC);
    // reduce_from_tensor_model_parallel_region(out): all-reduce over tp (one rank: none)
}

void row_parallel_linear_backward(float *dinp, float *dweight, float *dbias, const float *dout,
                                  const float *inp, const float *weight, int N, int C, int OC) {
    // reduce_from_tensor_model_parallel_region backward: identity
    cpu_matmul_backward(dinp, dweight, dbias, dout, inp, weight, N, C, OC);
}

void vocab_parallel_embedding_forward(float *out, const int32_t *tokens, const float *wte,
                                      const float *wpe, int B, int T, int C) {
    cpu_embedding_forward(out, tokens, wte, wpe, B, T, C);
}

void vocab_parallel_embedding_backward(float *dwte, float *dwpe, const float *dout,
                                       const int32_t *tokens, int B, int T, int C) {
    cpu_embedding_backward(dwte, dwpe, dout, tokens, B, T, C);
}
