// forward_hook.h — a module's output seen as the forward produces it, PyTorch's forward hook
// (nn.Module.register_forward_hook) for the model's modules: the embedding, each layer's
// attention and MLP branches and its residual stream. The model calls tb_forward_hook_call at
// those points and knows nothing of who listens; a listener (the tensor dump of
// reports/tensor_dump.h) installs a hook on the layer dims (tb_layer_dims.forward_hook). A
// normal run installs none: the call is one NULL test, the name never formatted.
#ifndef TB_TRANSFORMER_FORWARD_HOOK_H
#define TB_TRANSFORMER_FORWARD_HOOK_H

struct tb_tp_region;

typedef struct tb_forward_hook {
    // x: the module's output, rows × C on this rank (this rank's shard of the tokens under
    // sequence parallelism, r telling how to gather it); name: the module's range name.
    void (*output)(void *ctx, const struct tb_tp_region *r, const float *x, int rows, int C, const char *name);
    void *ctx;
} tb_forward_hook;

// Calls h's output with the name formatted from fmt; nothing when h is NULL.
void tb_forward_hook_call(const tb_forward_hook *h, const struct tb_tp_region *r, const float *x, int rows, int C,
                          const char *fmt, ...) __attribute__((format(printf, 6, 7)));

#endif
