// context_parallel.h — context parallelism (Megatron-Core's CP, cp_comm_type all_gather): the
// sequence of T tokens is cut into 2·cp chunks of T/(2·cp) and context-parallel rank i holds
// chunks i and 2·cp−1−i (the zig-zag that gives every rank the same causal work). Everything
// but attention is per token and runs on the rank's T/cp tokens; attention takes each local
// query at its global position against the whole sequence's K and V, all-gathered over the
// cp group (and its K/V gradients reduce-scattered back to their owners). Position ids (the
// learned embedding, RoPE) follow the global positions; the loss is averaged over the dp × cp
// group, as the gradients are.
#ifndef TB_TRANSFORMER_CONTEXT_PARALLEL_H
#define TB_TRANSFORMER_CONTEXT_PARALLEL_H

#include <stdint.h>

#include "comm/group.h"

// The global positions of cp rank `rank`'s T/cp local tokens, in local order.
void cp_local_positions(int T, int cp, int rank, int32_t *pos);

// Forward of the attention core under context parallelism: local qkv (B, Tq = T/cp rows),
// out (B, Tq, NH·hs), lse (B, NH, Tq). kv_scratch holds 3·B·T·2·G·hs floats; scratch is the
// flash kernel's for T keys. A collective over cp.
void cp_attention_forward(tb_group *cp, const int32_t *pos, float *out, float *lse, float *scratch, int threads,
                          float *kv_scratch, const float *qkv, int B, int Tq, int NH, int G, int hs);
// Backward: dqkv (B, Tq, QKV) written whole, with the K/V gradients every cp rank's queries gave
// this rank's keys and values. A collective over cp.
void cp_attention_backward(tb_group *cp, const int32_t *pos, float *dqkv, float *scratch, int threads,
                           float *kv_scratch, const float *dout, const float *out, const float *qkv, const float *lse,
                           int B, int Tq, int NH, int G, int hs);

#endif
