// token_dispatcher.h — the token permutation of Megatron-Core's token dispatchers
// (transformer/moe/token_dispatcher.py, moe_utils.permute / unpermute) on one rank.
//
// permute: the M = N·k routed copies of the tokens, grouped by expert in expert order and,
// within an expert, in token order (Megatron's routing-map permutation), so each expert's
// tokens are consecutive rows and one GEMM per linear (experts.h); expert parallelism would
// send each rank's consecutive block of experts to it.
// unpermute (combine): out[n] = Σ_j probs[n,j] · expert_out[perm_pos[n,j]], summed in j order.
// The maps (moe_permute_map*, moe_pad_to_capacity, the all-to-all's counts and plan) are host
// arrays; moe_permute, moe_permute_backward, moe_unpermute and moe_unpermute_backward take
// tensors of the thread's backend (its moe_* entries, backend.h).
#ifndef TB_TRANSFORMER_MOE_TOKEN_DISPATCHER_H
#define TB_TRANSFORMER_MOE_TOKEN_DISPATCHER_H

#include <stddef.h>
#include <stdint.h>

#include "comm/group.h"
#include "runtime/memory.h"
#include "transformer/moe/moe_types.h"

// The rows a rank's N tokens dispatch: N·k, or under --moe-pad-expert-input-to-capacity
// E · capacity when more (the permuted buffers' size, M below).
int moe_dispatch_rows(const tb_moe_dims *m, int N);

// route (N,k) → tokens_per_expert (E), perm_pos (N,k), perm_token (M, the choices not dropped);
// a dropped choice (route -1) has perm_pos -1 and no row: it is skipped by every function below.
void moe_permute_map(const int32_t *route, int N, int k, int E, int32_t *tokens_per_expert, int32_t *perm_pos,
                     int32_t *perm_token);
// The same for the experts [first, first + El) only: a choice of another expert has no row.
void moe_permute_map_local(const int32_t *route, int N, int k, int first, int El, int32_t *tokens_per_expert,
                           int32_t *perm_pos, int32_t *perm_token);
// inp (N,C) → out (M,C): out[m] = inp[perm_token[m]], a zero row where perm_token is -1 (padding)
void moe_permute(float *out, const float *inp, const int32_t *perm_token, int M, int C);
// --moe-pad-expert-input-to-capacity: each expert's rows moved to [e·capacity, e·capacity +
// tokens), the rest of its capacity padding (perm_token -1: zero rows); tokens_per_expert
// becomes the capacity of each (every expert keeps at most its capacity: router_apply_capacity).
void moe_pad_to_capacity(int32_t *tokens_per_expert, int32_t *perm_pos, int32_t *perm_token, int N, int k, int E,
                         int capacity);
// d_perm (M,C) → dinp (N,C) accumulated: dinp[n] += Σ_j d_perm[perm_pos[n,j]]
void moe_permute_backward(float *dinp, const float *d_perm, const int32_t *perm_pos, int N, int k, int C);
// expert_out (M,C) → out (N,C) written
void moe_unpermute(float *out, const float *expert_out, const int32_t *perm_pos, const float *probs, int N, int k,
                   int C);
// dout (N,C) → d_expert_out (M,C) written, d_probs (N,k) written
void moe_unpermute_backward(float *d_expert_out, float *d_probs, const float *dout, const float *expert_out,
                            const int32_t *perm_pos, const float *probs, int N, int k, int C);

// --- the all-to-all dispatcher (Megatron's MoEAlltoAllTokenDispatcher) over the expert-parallel
// group (P ranks, E_local = E / P each) and the expert-tensor-parallel group (Q ranks, each
// holding a 1/Q shard of the same E_local experts):
//   dispatch  permuted tokens (M,C) ─A2A over ep─► (R_me,C) from every ep rank, in (ep source,
//             local expert) order ─all-gather over etp (variable sizes)─► (R,C) in (etp source,
//             ep source, local expert) order ─sort─► (R,C) each local expert's rows together
//   combine   the reverse: sort back ─reduce-scatter over etp (variable sizes, the row-parallel
//             fc2's partial sums)─► (R_me,C) ─A2A back over ep─► (M,C) in this rank's permuted order
// A source s = q·P + p is the rank at etp index q, ep index p; all_counts (Q·P, E) holds every
// source's tokens_per_expert. Without etp (Q 1) R = R_me; without ep (P 1) the A2A is skipped.
typedef struct moe_a2a_plan {
    tb_group *ep, *etp;                  // NULL: size 1
    int P, Q, E, El, first, C;           // first: this rank's first expert (ep index · El)
    const int32_t *all_counts;           // (Q·P, E)
    size_t send[TB_MAX_GROUP], recv[TB_MAX_GROUP];  // floats to / from each ep member
    size_t etp_rows[TB_MAX_GROUP];       // R_me of each etp member
    size_t rows_me, rows;                // R_me, R
} moe_a2a_plan;
// Every rank's tokens_per_expert (E) → all_counts (Q·P, E): all-gathered over ep, then over etp.
// Host arrays (the NCCL backend stages host buffers through the device).
void moe_alltoall_counts(tb_group *ep, tb_group *etp, const int32_t *tokens_per_expert, int E, int32_t *all_counts);
// The plan of this rank from all_counts; local_counts (E_local): the rows of each local expert (R in all).
moe_a2a_plan moe_alltoall_plan(tb_group *ep, tb_group *etp, const int32_t *all_counts, int E, int C,
                               int32_t *local_counts);
// Rows in source-major order (S sources, each its local experts' chunks) ↔ expert-major order
// (each local expert's chunks from every source); counts (S,E), the local experts [first, first + El).
void moe_sort_chunks(float *out, const float *in, const int32_t *all_counts, int S, int E, int first, int El, int C,
                     int to_expert_major);
// send (M,C), this rank's permuted tokens → expert_in (R,C), each local expert's rows together.
void moe_alltoall_dispatch(const moe_a2a_plan *pl, tb_allocator *mem, const float *send, float *expert_in);
// expert_out (R,C) (partial sums under etp) → out (M,C) in this rank's permuted order.
void moe_alltoall_combine(const moe_a2a_plan *pl, tb_allocator *mem, const float *expert_out, float *out);
// The variable-size collectives over etp (tb_all_to_all underneath, in a range of their name):
// mine (rows[me],C) → all (Σ rows, C), the members' rows in group order;
void moe_all_gather_v(tb_group *g, tb_allocator *mem, const float *mine, const size_t *rows, int C, float *all);
// all (Σ rows, C) on every member → mine (rows[me],C) = Σ over members of their copy of segment me,
// summed in group order (the same bits on every backend).
void moe_reduce_scatter_v(tb_group *g, tb_allocator *mem, const float *all, const size_t *rows, int C, float *mine);

// The bytes this rank sends in the layer's all-to-alls over ep for one microbatch (a's routing,
// after its dispatch): the dispatch's rows out and the combine's back, forward and again in
// backward, its own share included — the metrics' a2a_bytes. Under etp only this rank's ep
// all-to-all (the etp all-gather and reduce-scatter are not all-to-alls of the dispatch); 0 with
// the all-gather dispatcher or at ep 1 (no all-to-all).
int64_t moe_alltoall_bytes(const tb_moe_dims *m, int C, const moe_layer_acts *a);

// --- the all-gather dispatcher (Megatron's MoEAllGatherTokenDispatcher) over ep and etp ---
// Every rank of the ep × etp grid (S = Q·P ranks, source s = q·P + p as above) gathers every
// rank's N tokens with their routing, runs its local experts (its etp shard of them) on the
// tokens routed to them, combines weighted by the probs, and the (S·N, C) partial outputs are
// reduce-scattered back: token n of rank s sums every rank's share for it.
// x (floats per rank) → all (S · floats): all-gathered over ep, then over etp (either NULL: size 1).
void moe_allgather_tokens(tb_group *ep, tb_group *etp, tb_allocator *mem, const float *x, size_t floats, float *all);
// all (S · floats) → x (floats): the sum over the S ranks of their copy of this rank's segment,
// reduce-scattered over etp, then over ep.
void moe_reduce_scatter_tokens(tb_group *ep, tb_group *etp, tb_allocator *mem, const float *all, size_t floats,
                               float *x);

// --- the dispatchers as the MoE layer calls them (Megatron's token_permutation /
// token_unpermutation): all-to-all, or all-gather (--moe-token-dispatcher-type), each moving
// tokens only under ep or etp (moe_tokens_moved); on one rank, the permutation alone ---
// The routed tokens of inp (N,C) (a->route) to this rank's experts: a's permutation, counts and
// expert buffers (R rows: a->expert_in filled). Returns the (R,C) buffer the experts write.
float *moe_token_dispatch(const tb_moe_dims *m, int layer, int N, int C, moe_layer_acts *a, moe_workspace *ws,
                          const float *inp);
// The experts' outputs y (R,C) → out (N,C): each token's k outputs weighted by its probs (y freed
// when the dispatch allocated it).
void moe_token_combine(const tb_moe_dims *m, int N, int C, moe_layer_acts *a, moe_workspace *ws, float *y,
                       float *out);
// dout (N,C) → ws->d_probs (N,k) and the returned d_y (R,C), the gradient at the experts' outputs.
float *moe_token_combine_backward(const tb_moe_dims *m, int N, int C, const moe_layer_acts *a, moe_workspace *ws,
                                  const float *dout);
// d_in (R,C), the gradient at the experts' inputs → dinp (N,C) accumulated; frees d_y and d_in
// when they were allocated.
void moe_token_dispatch_backward(const tb_moe_dims *m, int N, int C, const moe_layer_acts *a, moe_workspace *ws,
                                 float *d_y, float *d_in, float *dinp);

#endif
