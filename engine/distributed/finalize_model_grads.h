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

#include "distributed/distributed_data_parallel.h"
#include "models/gpt.h"
#include "optimizer/optimizer.h"
#include "comm/parallel_state.h"

// ddp: the rank's DistributedDataParallel; when it reduces the gradients itself
// (ddp_reduces_grads: --overlap-grad-reduce, or Megatron-FSDP's sharded gradients), the sp
// all-reduces were made during backward and the dp reduction is the buckets' (distributed/
// distributed_data_parallel.h): this does the embedding all-reduce only, and the caller then
// waits for the buckets with ddp_finish_grad_sync once every chunk's embedding is final.
void finalize_model_grads(gpt_model *m, tb_rank *rk, tb_adamw *opt, tb_ddp *ddp);

#endif
