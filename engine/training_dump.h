// training_dump.h — what the trainer puts in the tensor dump (reports/tensor_dump.h,
// --dump-tensors) besides the forward outputs the dump's hook captures: every parameter's
// gradient after the step's reduction and the parameters the step started from, then every
// parameter after the optimizer step, AdamW's moments and the step's scalars, and the loss,
// each whole (gathered over tp, over dp under the distributed optimizer, every expert over
// ep), real vocabulary rows only. The dump module knows no model: the trainer, which does,
// hands it the tensors.
#ifndef TB_TRAINING_DUMP_H
#define TB_TRAINING_DUMP_H

#include "core/error.h"

struct tb_tensor_dump;
struct gpt_model;
struct tb_adamw;
struct tb_ddp;

// After the step's gradients are reduced (before the optimizer): every gradient, whole, and
// the parameters the step starts from (what bisect carries into the optimizer's bound). ddp:
// the rank's, whose Megatron-FSDP module gathers sharded gradients and parameters.
void training_dump_grads(struct tb_tensor_dump *d, struct gpt_model *models, struct tb_adamw *opts, int nchunks,
                         struct tb_ddp *ddp);
// After the optimizer step: every parameter, the moments of opts (a collective where they are
// sharded), the step's AdamW scalars at learning rate lr, and the loss; writes the file and
// disarms the dump.
int training_dump_finish(struct tb_tensor_dump *d, struct gpt_model *models, struct tb_adamw *opts, int nchunks,
                         double lr, double loss, tb_error *err);

#endif
