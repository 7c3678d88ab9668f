#include "tensor_parallel/layers.h"

#include <string.h>

#include "backend/backend.h"

static void add_bias(float *out, const float *bias, int rows, int OC) {
    if (bias) tb_be()->add_bias(out, bias, rows, OC);
}

void column_parallel_linear_forward(float *out, const float *inp, const float *weight, const float *bias, int N,
                                    int C, int OC) {
    tb_be()->matmul_forward(out, inp, weight, bias, N, C, OC);
}

void column_parallel_linear_backward(const tb_tp_region *r, float *dinp, float *partial, float *dweight,
                                     float *dbias, const float *dout, const float *inp, const float *weight, int N,
                                     int C, int OC) {
    if (r->sp && tb_tp_size(r) > 1) {
        tb_be()->matmul_backward(partial, dweight, dbias, dout, inp, weight, N, C, OC);
        reduce_scatter_to_sequence_parallel_region(r, partial, dinp);
    } else {
        tb_be()->matmul_backward(dinp, dweight, dbias, dout, inp, weight, N, C, OC);
        reduce_from_tensor_model_parallel_region(r, dinp, (size_t)N * C);  // copy_to's backward
    }
}

void row_parallel_linear_forward(const tb_tp_region *r, float *out, float *partial, const float *inp,
                                 const float *weight, const float *bias, int N, int K, int OC) {
    int rows = N;
    if (tb_tp_size(r) > 1 && !r->sp && tb_fault_fires(r->faults, TB_SITE_ROW_PARALLEL_BIAS)) {
        // a drill's bug: the bias added to every rank's partial sum, so tp times after the reduce
        tb_be()->matmul_forward(out, inp, weight, bias, N, K, OC);
        reduce_from_tensor_model_parallel_region(r, out, (size_t)N * OC);
        return;
    }
    if (r->sp && tb_tp_size(r) > 1) {
        tb_be()->matmul_forward(partial, inp, weight, NULL, N, K, OC);
        reduce_scatter_to_sequence_parallel_region(r, partial, out);
        rows = N / tb_tp_size(r);
    } else {
        tb_be()->matmul_forward(out, inp, weight, NULL, N, K, OC);
        reduce_from_tensor_model_parallel_region(r, out, (size_t)N * OC);
    }
    add_bias(out, bias, rows, OC);
}

void row_parallel_linear_backward(const tb_tp_region *r, float *dinp, float *gathered, float *dweight,
                                  float *dbias, const float *dout, const float *inp, const float *weight, int N,
                                  int K, int OC) {
    const float *d = dout;
    int rows = N;
    if (r->sp && tb_tp_size(r) > 1) {
        gather_from_sequence_parallel_region(r, dout, gathered);
        d = gathered;
        rows = N / tb_tp_size(r);
    }
    tb_be()->matmul_backward(dinp, dweight, NULL, d, inp, weight, N, K, OC);
    if (dbias) {
        // the bias was added to this rank's rows only
        tb_be()->bias_backward(dbias, dout, rows, OC);
    }
}

void vocab_parallel_embedding_forward(const tb_tp_region *r, float *out, float *full, const int32_t *tokens,
                                      const float *wte, int vocab_start, int vocab_local, const float *wpe) {
    if (tb_tp_size(r) == 1) {
        tb_be()->embedding_forward(out, tokens, wte, vocab_start, vocab_local, wpe, r->pos, r->B, r->T, r->C);
        return;
    }
    // each rank looks up the tokens of its vocabulary range; the all-reduce assembles them
    tb_be()->embedding_forward(full, tokens, wte, vocab_start, vocab_local, NULL, NULL, r->B, r->T, r->C);
    reduce_from_tensor_model_parallel_region(r, full, (size_t)r->B * r->T * r->C);
    tb_be()->add_positions(full, wpe, r->pos, r->B, r->T, r->C);
    if (r->sp) scatter_to_sequence_parallel_region(r, full, out);
    else tb_be()->copy(out, full, (size_t)r->B * r->T * r->C * sizeof(float));
}

void vocab_parallel_embedding_backward(const tb_tp_region *r, float *dwte, float *dwpe, float *full,
                                       const float *dout, const int32_t *tokens, int vocab_start, int vocab_local) {
    const float *d = dout;
    if (r->sp && tb_tp_size(r) > 1) {
        gather_from_sequence_parallel_region(r, dout, full);
        d = full;
    }
    tb_be()->embedding_backward(dwte, dwpe, d, tokens, vocab_start, vocab_local, r->pos, r->B, r->T, r->C);
}
