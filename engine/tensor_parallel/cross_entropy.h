// cross_entropy.h — vocab-parallel cross-entropy (Megatron-Core tensor_parallel/cross_entropy.py).
//
// Each tensor-parallel rank holds the logits of its vocabulary shard, (N, Vl) for columns
// [vocab_start, vocab_start + Vl); the full logits never sit on one rank. Forward does
// Megatron's three all-reduces over tp: MAX of the row maxima, SUM of the target logit
// (only the owning rank contributes), SUM of the exponentials; it turns the logits into
// probabilities in place and returns per-token losses. Backward has no communication:
// dlogits = softmax − onehot on the local shard, in place. Columns ≥ V (the padding of the
// vocabulary) take no part: probability 0, gradient 0.
#ifndef TB_TENSOR_PARALLEL_CROSS_ENTROPY_H
#define TB_TENSOR_PARALLEL_CROSS_ENTROPY_H

#include <stdint.h>

#include "comm/comm.h"
#include "drills/fault_sites.h"

// logits (N,Vl) → probs in place; losses (N); scratch (3N floats)
// faults: a drill's hooks (NULL: none); at TB_SITE_VOCAB_CE_EXP_SUM the exp sums stay per rank
void vocab_parallel_cross_entropy_forward(tb_group *tp, float *logits, float *losses, float *scratch,
                                          const int32_t *targets, int N, int Vl, int vocab_start, int V,
                                          const tb_fault_hooks *faults);
// probs (N,Vl) → dlogits in place, scaled by dloss (dL/dloss of each token)
void vocab_parallel_cross_entropy_backward(float *probs, const int32_t *targets, float dloss, int N, int Vl,
                                           int vocab_start);

#endif
