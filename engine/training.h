// training.h — the training loop of pretrain_gpt (Megatron's training.py: pretrain →
// train → train_step), for a world of one rank today.
//
// One step: zero grads → for each microbatch: fetch, forward, backward (gradients sum,
// each microbatch's loss scaled by 1 / num_microbatches) → global grad norm and clip →
// AdamW at the step's learning rate → metrics. Global batch = micro batch × microbatches
// × dp, printed at start.
//
// The run directory gets config.json (resolved), metrics.rank-NNNNN.jsonl (one line per
// step, flushed as written), trace.rank-NNNNN.json (Chrome trace), memory.rank-NNNNN.json
// (the memory snapshot at peak) and, when one happens, oom.json.
#ifndef TB_TRAINING_H
#define TB_TRAINING_H

#include "config.h"
#include "core/error.h"

// Runs a validated, resolved config to the end. Returns 0, or -1 with err set. An OOM
// under --memory-cap does not return: it writes its report and exits with status 3.
int pretrain(const tb_config *cfg, tb_error *err);

#endif
