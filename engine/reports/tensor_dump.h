// tensor_dump.h — the logical tensors of chosen steps, for finding the first divergence
// between two layouts (`tracebook bisect`). `--dump-tensors STEPS` (e.g. "1" or "1,3") writes,
// for each listed step, in the run directory:
//
//   tensors/step-NNNNNNN.rank-RRRRR.safetensors   (from each pipeline stage's tp 0, dp 0 rank)
//     fwd/<range>      microbatch 0's output of each module as its range names it:
//                      embedding, layer.N.attention (the branch before the residual add),
//                      layer.N.mlp, layer.N (the residual stream after the layer); (B·T, C),
//                      gathered over sequence parallelism — the same logical tensor at any tp
//     fwd/loss         the step's loss (on the last stage)
//     grad/<param>     every parameter's gradient after the step's reduction, whole (gathered
//                      over tp, and over dp under the distributed optimizer)
//     param.before/<param>  every parameter as the step found it (before the optimizer)
//     param/<param>    every parameter after the optimizer step, whole
//     adam.m/<param>, adam.v/<param>  AdamW's moments after the step, whole (the distributed
//                      optimizer's slices gathered)
//     adam.hyper/step_size, adam.hyper/inv_sqrt_bc2, adam.hyper/eps  the step's scalars:
//                      p = p·keep − step_size·m / (sqrt(v)·inv_sqrt_bc2 + eps)
//   __metadata__: "order.<name>": the tensor's place in the step (forward in the order the
//   modules ran, then the gradients in backward order, then the parameters).
// Every rank of the stage takes part (the gathers are collectives); one writes. The dump knows
// no model: its hook captures the forward outputs the model shows it, and the trainer hands
// it the gradients, parameters and moments (training_dump.h) through tensor_dump_keep.
#ifndef TB_REPORTS_TENSOR_DUMP_H
#define TB_REPORTS_TENSOR_DUMP_H

#include <stdint.h>

#include "core/error.h"

struct tb_rank;
struct tb_tp_region;

typedef struct tb_tensor_dump tb_tensor_dump;

// NULL when cfg dumps nothing; otherwise the dump of this rank, disarmed.
tb_tensor_dump *tensor_dump_create(struct tb_rank *rk);
void tensor_dump_free(tb_tensor_dump *d);
// Whether `step` is one of --dump-tensors' steps.
int tensor_dump_wants(const tb_tensor_dump *d, int64_t step);
// Arms the dump for `step`: the forward captures that follow (microbatch 0's) are kept.
void tensor_dump_arm(tb_tensor_dump *d, int64_t step);
// The forward hook (transformer/forward_hook.h) that captures the model's module outputs
// into d, for tb_layer_dims.forward_hook; NULL when d is. Each output (rows × C on this rank;
// gathered over sequence parallelism through its region when sp, and over context
// parallelism into the global sequence order) is kept as fwd/<name> once per name while armed
// (a recomputed forward is not captured again).
const struct tb_forward_hook *tensor_dump_hook(tb_tensor_dump *d);
// Whether d is armed (a step being dumped); 0 when d is NULL.
int tensor_dump_armed(const tb_tensor_dump *d);
// The rank the dump is of (its allocator, groups, run directory).
struct tb_rank *tensor_dump_rank(const tb_tensor_dump *d);
// A host buffer of rows × cols floats to fill, kept as `name` in the step's file; NULL when d
// is not armed or already keeps that name (each name once).
float *tensor_dump_keep(tb_tensor_dump *d, const char *name, int rows, int cols);
// Writes the step's file (on the stage's tp 0, cp 0, dp 0 rank) and disarms; 0 when not armed.
int tensor_dump_write(tb_tensor_dump *d, tb_error *err);

#endif
