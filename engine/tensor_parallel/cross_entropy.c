#include "tensor_parallel/cross_entropy.h"

#include "backend/backend.h"

void vocab_parallel_cross_entropy_forward(tb_group *tp, float *logits, float *losses, float *scratch,
                                          const int32_t *targets, int N, int Vl, int vocab_start, int V,
                                          const tb_fault_hooks *faults) {
    float *max = scratch, *target = scratch + N, *sum = scratch + 2 * (size_t)N;
    const int parallel = tp && tp->size > 1;
    tb_be()->ce_row_max(logits, max, N, Vl, vocab_start, V);
    if (parallel) tb_all_reduce(tp, max, (size_t)N, TB_RED_MAX);
    tb_be()->ce_target_logit(logits, max, target, targets, N, Vl, vocab_start);
    if (parallel) tb_all_reduce(tp, target, (size_t)N, TB_RED_SUM);
    tb_be()->ce_exp_sum(logits, max, sum, N, Vl, vocab_start, V);
    if (parallel && !tb_fault_fires(faults, TB_SITE_VOCAB_CE_EXP_SUM)) tb_all_reduce(tp, sum, (size_t)N, TB_RED_SUM);
    tb_be()->ce_normalize(logits, sum, target, losses, N, Vl);
}

void vocab_parallel_cross_entropy_backward(float *probs, const int32_t *targets, float dloss, int N, int Vl,
                                           int vocab_start) {
    tb_be()->cross_entropy_backward(probs, targets, dloss, N, Vl, vocab_start);
}
