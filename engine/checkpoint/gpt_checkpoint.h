// gpt_checkpoint.h — the model's weights as safetensors, in Hugging Face GPT-2's names and
// shapes, so real GPT-2 weights load and our checkpoints open in transformers.
//
//   wte.weight                 [V, C]       (the unpadded vocabulary; padding rows are 0)
//   wpe.weight                 [maxT, C]
//   h.N.ln_1.weight / .bias    [C]
//   h.N.attn.c_attn.weight     [C, QKV]     Conv1D layout (in, out): the engine's (out, in)
//   h.N.attn.c_attn.bias       [QKV]        transposed; QKV columns are [Q | K | V]
//   h.N.attn.c_proj.weight     [C, C]       (+ .bias [C])
//   h.N.ln_2.weight / .bias    [C]
//   h.N.mlp.c_fc.weight        [C, F1]      F1 = F, or 2F = [gate | up] with SwiGLU
//   h.N.mlp.c_proj.weight      [F, C]       (+ .bias)
//   ln_f.weight / .bias        [C]
//   lm_head.weight             [V, C]       only with an untied output layer
// RMSNorm models have no norm biases; --disable-bias-linear models no linear biases;
// grouped-query attention changes QKV to (NH + 2G)·hs. Names may carry Hugging Face's
// "transformer." prefix. GPT-2's attention-mask buffers (h.N.attn.bias, h.N.attn.masked_bias)
// are not parameters and are skipped.
#ifndef TB_CHECKPOINT_GPT_CHECKPOINT_H
#define TB_CHECKPOINT_GPT_CHECKPOINT_H

#include "core/error.h"
#include "models/gpt.h"

// Under tensor parallelism every rank of the tp group must call it (the shards are gathered
// into whole tensors); only a rank with `write` set writes the file.
int gpt_save_safetensors(gpt_model *m, const char *path, int write, tb_error *err);
// Every model tensor must be present with its exact shape; an unexpected tensor is an
// error too (a 12-layer file does not load into a 6-layer model), and so is a NaN or ±Inf
// weight, named by tensor and element index. Under tensor parallelism
// each rank reads the whole tensors and keeps its shard. On failure the model's
// weights may be partly overwritten; the caller must not train on them.
int gpt_load_safetensors(gpt_model *m, const char *path, tb_error *err);

#endif
