// token_dispatcher.h — the token permutation of Megatron-Core's token dispatchers
// (transformer/moe/token_dispatcher.py, moe_utils.permute / unpermute) on one rank.
//
// permute: the M = N·k routed copies of the tokens, grouped by expert in expert order and,
// within an expert, in token order (Megatron's routing-map permutation), so each expert's
// tokens are consecutive rows and one GEMM per linear (experts.h); expert parallelism would
// send each rank's consecutive block of experts to it.
// unpermute (combine): out[n] = Σ_j probs[n,j] · expert_out[perm_pos[n,j]], summed in j order.
#ifndef TB_TRANSFORMER_MOE_TOKEN_DISPATCHER_H
#define TB_TRANSFORMER_MOE_TOKEN_DISPATCHER_H

#include <stddef.h>
#include <stdint.h>

#include "comm/group.h"

// route (N,k) → tokens_per_expert (E), perm_pos (N,k), perm_token (M, the choices not dropped);
// a dropped choice (route -1) has perm_pos -1 and no row: it is skipped by every function below.
void moe_permute_map(const int32_t *route, int N, int k, int E, int32_t *tokens_per_expert, int32_t *perm_pos,
                     int32_t *perm_token);
// inp (N,C) → out (M,C): out[m] = inp[perm_token[m]]
void moe_permute(float *out, const float *inp, const int32_t *perm_token, int M, int C);
// d_perm (M,C) → dinp (N,C) accumulated: dinp[n] += Σ_j d_perm[perm_pos[n,j]]
void moe_permute_backward(float *dinp, const float *d_perm, const int32_t *perm_pos, int N, int k, int C);
// expert_out (M,C) → out (N,C) written
void moe_unpermute(float *out, const float *expert_out, const int32_t *perm_pos, const float *probs, int N, int k,
                   int C);
// dout (N,C) → d_expert_out (M,C) written, d_probs (N,k) written
void moe_unpermute_backward(float *d_expert_out, float *d_probs, const float *dout, const float *expert_out,
                            const int32_t *perm_pos, const float *probs, int N, int k, int C);

// --- the all-to-all dispatcher over the expert-parallel group (P ranks, E_local = E / P) ---
// Every rank's tokens_per_expert (E) → all_counts (P,E), through an all-gather of the bytes.
void moe_alltoall_counts(tb_group *ep, const int32_t *tokens_per_expert, int E, int32_t *all_counts);
// Floats this rank sends to / receives from each member (rows × C), and the rows of each local expert.
void moe_alltoall_splits(const int32_t *all_counts, int me, int P, int E, int C, size_t *send, size_t *recv,
                         int32_t *local_counts);
// Rows in (source rank, local expert) order ↔ (local expert, source rank) order; counts (P,E).
void moe_sort_chunks(float *out, const float *in, const int32_t *all_counts, int P, int E, int first, int El, int C,
                     int to_expert_major);
// send (M,C), this rank's permuted tokens → expert_in (R,C), each local expert's rows together
// (all_to_all, then sorted); recv (R,C) is scratch.
void moe_alltoall_dispatch(tb_group *ep, const float *send, const int32_t *all_counts, int E, int C, float *recv,
                           float *expert_in);
// expert_out (R,C) → out (M,C) in this rank's permuted order (sorted back, then all_to_all); scratch (R,C).
void moe_alltoall_combine(tb_group *ep, const float *expert_out, const int32_t *all_counts, int E, int C,
                          float *scratch, float *out);

#endif
