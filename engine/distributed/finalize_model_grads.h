// finalize_model_grads.h — the end-of-step gradient synchronisation (Megatron-Core
// distributed/finalize_model_grads.py + the DDP grad reduction), after the last
// microbatch's backward:
//   1. sequence parallelism: gradients of parameters replicated over tp but summed over a
//      rank's own sequence rows (norms, row-parallel biases) are all-reduced over tp;
//   2. the tied word embedding: the first and the last pipeline stage each hold a copy; their
//      gradients are all-reduced over the embedding group so both copies take the same step;
//   3. data parallelism over dp × cp: gradients are all-reduced and averaged — or, with the
//      distributed optimizer, reduce-scattered so each rank gets the averaged shard it owns.
#ifndef TB_DISTRIBUTED_FINALIZE_MODEL_GRADS_H
#define TB_DISTRIBUTED_FINALIZE_MODEL_GRADS_H

#include "models/gpt.h"
#include "optimizer/optimizer.h"
#include "parallel_state.h"

void finalize_model_grads(gpt_model *m, tb_rank *rk, tb_adamw *opt);

#endif
