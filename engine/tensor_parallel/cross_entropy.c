#include "tensor_parallel/cross_entropy.h"

#include "backend/cpu/kernels.h"

void vocab_parallel_cross_entropy_forward(float *logits, float *losses, const int32_t *targets, int N,
                                          int V, int Vp) {
    cpu_cross_entropy_forward(logits, losses, targets, N, V, Vp);
}

void vocab_parallel_cross_entropy_backward(float *probs, const int32_t *targets, float dloss, int N,
                                           int V, int Vp) {
    cpu_cross_entropy_backward(probs, targets, dloss, N, V, Vp);
}
