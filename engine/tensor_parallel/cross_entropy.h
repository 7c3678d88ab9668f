// cross_entropy.h — vocab-parallel cross-entropy (Megatron-Core tensor_parallel/cross_entropy.py).
//
// Forward turns the logits into probabilities in place and returns per-token losses;
// backward turns those probabilities into dlogits in place (softmax − onehot), with no
// communication. Under tensor parallelism the row max, the target logit and the sum of
// exponentials are all-reduced over tp so the full logits never sit on one rank; with one
// rank (today) the local shard is the whole vocabulary. Columns V..Vp of the padded
// vocabulary take no part: probability 0, gradient 0.
#ifndef TB_TENSOR_PARALLEL_CROSS_ENTROPY_H
#define TB_TENSOR_PARALLEL_CROSS_ENTROPY_H

#include <stdint.h>

// logits (N,Vp) → probs (N,Vp) in place; losses (N)
void vocab_parallel_cross_entropy_forward(float *logits, float *losses, const int32_t *targets, int N,
                                          int V, int Vp);
// probs (N,Vp) → dlogits (N,Vp) in place, scaled by dloss (dL/dloss of each token)
void vocab_parallel_cross_entropy_backward(float *probs, const int32_t *targets, float dloss, int N,
                                           int V, int Vp);

#endif
