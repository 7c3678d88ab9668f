// mlp.c — the MLP: ColumnParallel fc1 → activation (GELU or SwiGLU) → RowParallel fc2.
#include "runtime/ranges.h"
#include "tensor_parallel/layers.h"
#include "transformer/transformer_layer.h"

void mlp_forward(const transformer_layer_spec *spec, int layer, const tb_layer_dims *d,
                 const transformer_layer_params *p, transformer_layer_acts *a, transformer_workspace *ws,
                 float *out) {
    TB_RANGE_PUSH("layer.%d.mlp", layer);

    TB_RANGE_PUSH("layer.%d.mlp.fc1", layer);
    // (N,C) -> (N,F1): this rank's columns
    column_parallel_linear_forward(a->fc1, a->ln2, p->fc1_w, p->fc1_b, d->N, d->C, d->F1);
    TB_RANGE_POP();

    TB_RANGE_PUSH("layer.%d.mlp.activation", layer);
    // (N,F1) -> (N,F)
    spec->activation->forward(a->act, a->fc1, d->N, d->F);
    TB_RANGE_POP();

    TB_RANGE_PUSH("layer.%d.mlp.fc2", layer);
    // (N,F) -> (Ns,C), summed over tp
    row_parallel_linear_forward(&d->tp, out, ws->full, a->act, p->fc2_w, p->fc2_b, d->N, d->F, d->C);
    TB_RANGE_POP();

    TB_RANGE_POP();
}

void mlp_backward(const transformer_layer_spec *spec, int layer, const tb_layer_dims *d,
                  const transformer_layer_params *p, transformer_layer_params *g,
                  const transformer_layer_acts *a, transformer_workspace *ws, const float *dout,
                  float *dln2) {
    TB_RANGE_PUSH("layer.%d.mlp.backward", layer);

    TB_RANGE_PUSH("layer.%d.mlp.fc2.backward", layer);
    row_parallel_linear_backward(&d->tp, ws->d_act, ws->full, g->fc2_w, g->fc2_b, dout, a->act, p->fc2_w, d->N,
                                 d->F, d->C);
    TB_RANGE_POP();

    TB_RANGE_PUSH("layer.%d.mlp.activation.backward", layer);
    spec->activation->backward(ws->d_fc1, a->fc1, ws->d_act, d->N, d->F);
    TB_RANGE_POP();

    TB_RANGE_PUSH("layer.%d.mlp.fc1.backward", layer);
    column_parallel_linear_backward(&d->tp, dln2, ws->full, g->fc1_w, g->fc1_b, ws->d_fc1, a->ln2, p->fc1_w,
                                    d->N, d->C, d->F1);
    TB_RANGE_POP();

    TB_RANGE_POP();
}
