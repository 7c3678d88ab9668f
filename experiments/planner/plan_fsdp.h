// plan_fsdp.h — Megatron-FSDP in the planner (plan.h): the engine's FSDP module
// (engine/distributed/fsdp.h) walked through one step of one rank, at the granularity of its
// units and buckets, for the figures plan_evaluate reports — the whole gradient buckets held at
// once, the other ranks' parameters gathered at once, and the elements all-gathered and
// reduce-scattered per step. The walk is one stage's model chunk (the engine runs Megatron-FSDP
// with pp, one chunk a stage): the embedding unit, the layers, the head. Not walked as the
// engine lays it out: the last stage's copy of a word embedding tied across stages, which the
// engine places first in the buffer as a bucket of its own (fsdp_unit_cuts) and the walk counts
// in the head unit — the figures of such a stage differ by the buckets' fringes (under a
// multiple of dp x cp elements per cut).
//
// The buffer as the engine lays it out: each unit's tensors 16-element aligned, in order
// (embedding, layers, head), the head's bucket running to the padded end; each bucket cut at
// its unit's first element moved down to a multiple of dp x cp (fsdp_unit_cuts), so a bucket
// may hold the last elements of the unit before it.
#ifndef TB_EXPERIMENTS_PLAN_FSDP_H
#define TB_EXPERIMENTS_PLAN_FSDP_H

#include <stdint.h>

typedef struct plan_fsdp_shape {
    int layers;                      // L
    int has_embedding, has_head;     // the chunk's ends (the whole model at pp 1)
    int64_t embedding, layer, head;  // each unit's elements in the buffer (its tensors 16-aligned)
    int64_t padded;                  // the buffer's length
    int dpcp;                        // the shard group
    int tied;                        // the output layer reads the embedding's unit (both in the chunk)
    int shard_params;                // optim_grads_params: units gathered before their forward and backward
    int microbatches;                // per rank and step
    // full recompute (transformer_block.h): per layer, whether it is recomputed and its chunk's
    // first layer and length (the chunk's forward runs again before its last layer's backward)
    const int *recompute, *chunk_start, *chunk_len;
    // overlap (fsdp.h, "Time"): prefetch (--overlap-param-gather under optim_grads_params), each
    // use's next unit gathered with it; drain (--overlap-grad-reduce), a unit's buckets held while
    // their reduce-scatter is in flight, until the backward after the next unit's: their bound
    // (the engine gives a bucket back earlier when its reduce-scatter is done by then)
    int prefetch, drain;
} plan_fsdp_shape;

typedef struct plan_fsdp_figures {
    int64_t grads_held_peak;   // elements of whole gradient buckets committed at once
    int64_t gathered_peak;     // elements of other ranks' slices of parameters gathered at once
    double gathered_elements;  // per step: the all-gathers' whole buckets (each call's recv buffer)
    double reduced_elements;   // per step: the reduce-scatters' whole buckets (each call's send buffer)
} plan_fsdp_figures;

// Walks a step (nothing gathered at its start — the previous update made the gathered copies
// stale — and no read of the whole model after it; with prefetch, a step after the first, which
// records the schedule). Returns 0, or -1 for a chunk with no unit.
int plan_fsdp_walk(const plan_fsdp_shape *s, plan_fsdp_figures *out);

#endif
