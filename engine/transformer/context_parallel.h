// context_parallel.h — context parallelism (Megatron-Core's CP): the sequence of T tokens is
// cut into 2·cp chunks of T/(2·cp) and context-parallel rank i holds chunks i and 2·cp−1−i
// (the zig-zag that gives every rank the same causal work). Everything but attention is per
// token and runs on the rank's T/cp tokens; attention takes each local query at its global
// position against the whole sequence's K and V, exchanged over the cp group one of two ways
// (cp_comm_type):
//   all_gather  the whole sequence's K and V all-gathered to every rank, its K/V gradients
//               reduce-scattered back to their owners;
//   p2p         a ring of cp steps: each step sends the K/V chunk pair a rank holds to the next
//               cp rank and receives the previous rank's, computes the local queries against
//               the pair it holds with the causal rule of each chunk pair (diagonal, whole or
//               skipped) and merges the partial results by log-sum-exp (the online softmax);
//               the backward passes the K/V and their gradients around the same ring, so that
//               each rank ends with its own chunks' dK/dV. Only one chunk pair besides the
//               rank's own is held at a time: memory does not grow with cp.
// Position ids (the
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

// The workspace floats either exchange needs (ring: p2p), for Tq = T/cp local tokens.
size_t cp_attention_workspace_floats(int ring, int B, int Tq, int cp_size, int NH, int G, int hs);

// The ring (cp_comm_type p2p), the same contract as the two above: ws holds
// cp_attention_workspace_floats(1, ...) floats, scratch the flash kernel's for T = Tq (not T·cp).
// cp − 1 sends of this rank's B·Tq·2·G·hs K/V floats forward; cp − 1 of the K/V and cp of
// their gradients backward, each to the next cp rank (comm.cp.send / comm.cp.recv). Each
// step's send is posted before its compute and its receive waited for after it: the sends are
// eager (the communicator copies the message and returns), so no rank waits on a send and a
// receive waits only for a peer still computing; the copy itself is made inside the send (no
// asynchronous transfer overlaps the compute).
void cp_ring_attention_forward(tb_group *cp, float *out, float *lse, float *scratch, int threads, float *ws,
                               const float *qkv, int B, int Tq, int NH, int G, int hs);
void cp_ring_attention_backward(tb_group *cp, float *dqkv, float *scratch, int threads, float *ws, const float *dout,
                                const float *out, const float *qkv, const float *lse, int B, int Tq, int NH, int G,
                                int hs);

#endif
