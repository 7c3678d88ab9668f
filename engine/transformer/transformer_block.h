// transformer_block.h — the stack of layers and its activation recompute
// (Megatron-Core transformer_block.py, _checkpointed_forward).
//
// The block owns the residual stream: x[l] is the input of layer l, x[L] the block's
// output. Layers are grouped into chunks; a recomputed chunk keeps only its input x[s]
// through forward (its layers' activations and inner x are freed as soon as the next layer
// has consumed them) and re-runs its forward just before its backward:
//   none                  chunks of one layer, nothing recomputed
//   full, uniform, n      chunks of n consecutive layers, all recomputed
//   full, block, n        the first n layers each recomputed alone, the rest not
//   selective             like none, but each layer drops its attention probabilities
//                         (the attention core is recomputed inside its backward)
// Recompute re-runs the same kernels on the same inputs, so losses and gradients are
// bitwise identical with and without it; only the activation memory differs.
//
// A block may be one pipeline stage's slice of the model (layers first .. first + L - 1,
// named by their global index) and may hold several microbatches in flight at once (the
// 1F1B schedule keeps up to pp of them on the first stage): each in-flight microbatch has
// its own slot of residual stream and activations. Recompute chunks count the stage's own
// layers, as Megatron's do.
#ifndef TB_TRANSFORMER_BLOCK_H
#define TB_TRANSFORMER_BLOCK_H

#include "transformer/transformer_layer.h"

// What one in-flight microbatch holds.
typedef struct transformer_block_state {
    transformer_layer_acts *acts;      // (L)
    float **x;                         // (L+1) residual stream, NULL when not held
} transformer_block_state;

typedef struct transformer_block {
    int L;                             // layers in this block
    int first;                         // global index of its first layer
    tb_layer_dims d;
    const transformer_layer_spec *spec;
    tb_allocator *mem;
    transformer_layer_params *params;  // (L) views into the model's parameter buffer
    transformer_layer_params *grads;   // (L) views into the gradient buffer
    int nslots;
    transformer_block_state *slots;    // (nslots) microbatches in flight
    int *chunk_start;                  // (L) first layer of each layer's chunk
    int *chunk_len;                    // (L)
    int *recompute;                    // (L) layer is in a recomputed chunk
    int selective;
    transformer_workspace ws;
    float *d_ping, *d_pong;            // (Ns,C) gradients of the residual stream
    float *recompute_out;              // (Ns,C) where a recomputed chunk's last layer writes
    // Called after each layer's backward with its global index, when set (gpt_model's
    // gradient-ready hook: --overlap-grad-reduce starts a bucket's reduction from it).
    void (*layer_grads_done)(void *ctx, int layer);
    void *hooks_ctx;
    // Called before each layer's forward (a recomputed one's too) with its global index, when set
    // (on the same ctx: gpt_model's parameter-needed hook, --overlap-param-gather waits there for
    // its bucket, Megatron-FSDP gathers it).
    void (*layer_params_needed)(void *ctx, int layer);
    // Called before each layer's backward, when set (the model's params_needed_backward:
    // Megatron-FSDP gathers the layer's parameters and commits its gradients' memory there).
    void (*layer_backward_needs)(void *ctx, int layer);
    // The MoE layers' load statistics of the step (indexed by global layer; d.moe_stats points
    // here outside a recompute, so a recomputed forward is not counted twice).
    moe_stats moe_stats;
} transformer_block;

// Layers [first, first + L) of the model; nslots microbatches may be in flight.
// tp_group: the rank's tensor-parallel group (NULL with one rank).
void transformer_block_init(transformer_block *b, const tb_config *cfg, const transformer_layer_spec *spec,
                            tb_allocator *mem, tb_group *tp_group, int first, int L, int nslots);
void transformer_block_free(transformer_block *b);

// Allocates x[0] (Ns,C) of a slot and returns it: the block's input is written there.
float *transformer_block_input(transformer_block *b, int slot);
// Runs the layers on the slot's x[0]; returns x[L] (held until backward).
const float *transformer_block_forward(transformer_block *b, int slot);
// The slot's output x[L] of its forward (held until backward).
const float *transformer_block_output(const transformer_block *b, int slot);
// dout (Ns,C) = gradient at x[L] → returns the gradient at x[0] (a block buffer, valid until
// the next backward). Frees every activation the slot's forward held.
const float *transformer_block_backward(transformer_block *b, int slot, const float *dout);

// Frees whatever a slot's forward left held (after a forward without backward).
void transformer_block_release(transformer_block *b, int slot);

#endif
