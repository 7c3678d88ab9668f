// mappings.h — Megatron-Core's tensor-parallel mappings (tensor_parallel/mappings.py): the
// collectives that sit at the edges of tensor- and sequence-parallel regions.
//
// Sequence parallelism shards the sequence dimension of the residual stream: a rank holds
// rows (b, t) with t in [r·T/tp, (r+1)·T/tp) of every sequence b, i.e. a (B, T/tp, C)
// block. The engine keeps activations as (B, T, C), so gathering and reduce-scattering
// along the sequence go through a rank-major staging buffer:
//   gather_from_sequence_parallel_region       (B,T/tp,C) → all-gather → (B,T,C)
//   reduce_scatter_to_sequence_parallel_region (B,T,C) partial sums → (B,T/tp,C) summed
//   scatter_to_sequence_parallel_region        (B,T,C) → this rank's (B,T/tp,C), no communication
// and without sequence parallelism:
//   reduce_from_tensor_model_parallel_region   all-reduce over tp (row-parallel output,
//                                              column-parallel input gradient)
// With a tp group of one rank every mapping is a copy or nothing.
#ifndef TB_TENSOR_PARALLEL_MAPPINGS_H
#define TB_TENSOR_PARALLEL_MAPPINGS_H

#include <stddef.h>

#include "comm/comm.h"
#include "drills/fault_sites.h"

typedef struct tb_tp_region {
    tb_group *tp;    // NULL or size 1: no tensor parallelism
    int sp;          // sequence parallel
    int B, T, C;     // full (B,T,C) shape of the region's tensors
    float *staging;  // (B·T·C) scratch for the rank-major layout (sequence parallel only)
    const tb_fault_hooks *faults;  // a fault drill's hooks (drills/fault_sites.h; NULL: a normal run)
    const int32_t *pos;  // context parallelism: the global positions of the T local rows (NULL: 0..T-1)
} tb_tp_region;

static inline int tb_tp_size(const tb_tp_region *r) { return r->tp ? r->tp->size : 1; }

void reduce_from_tensor_model_parallel_region(const tb_tp_region *r, float *buf, size_t count);
void gather_from_sequence_parallel_region(const tb_tp_region *r, const float *local, float *full);
void reduce_scatter_to_sequence_parallel_region(const tb_tp_region *r, const float *full, float *local);
void scatter_to_sequence_parallel_region(const tb_tp_region *r, const float *full, float *local);

#endif
