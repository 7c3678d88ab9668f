#include "distributed/finalize_model_grads.h"

#include <string.h>

#include "backend/backend.h"
#include "config/config.h"

#include "runtime/ranges.h"

void finalize_model_grads(gpt_model *m, tb_rank *rk, tb_adamw *opt, tb_ddp *ddp) {
    if (!rk->world) return;
    const tb_config *cfg = m->cfg;
    TB_RANGE_PUSH("finalize_model_grads");

    tb_group *tp = &rk->groups[TB_GROUP_TP];
    const int overlap = ddp && ddp_reduces_grads(ddp);  // (the sp, tp and dp sums were made there)
    if (!overlap && cfg->sequence_parallel && tp->size > 1 &&
        !tb_fault_fires(m->block.d.tp.faults, TB_SITE_SP_GRAD_REDUCE)) {
        TB_RANGE_PUSH("finalize_model_grads.sequence_parallel");
        for (int i = 0; i < m->nparams; i++)
            if (m->params[i].sp_partial)
                tb_all_reduce(tp, m->grad_memory + m->params[i].offset, m->params[i].numel, TB_RED_SUM);
        TB_RANGE_POP();
    }
    // replicated tensors each tp rank applies to its own heads (the q/k norms of --qk-layernorm):
    // their gradients are partial sums over tp with or without sequence parallelism
    if (!overlap && tp->size > 1) {
        int reduced = 0;
        for (int i = 0; i < m->nparams; i++) {
            if (!m->params[i].tp_partial) continue;
            if (!reduced++) TB_RANGE_PUSH("finalize_model_grads.tp_partial");
            tb_all_reduce(tp, m->grad_memory + m->params[i].offset, m->params[i].numel, TB_RED_SUM);
        }
        if (reduced) TB_RANGE_POP();
    }

    // the word embedding tied across the first and last pipeline stage: one gradient (under
    // Megatron-FSDP its shard's slices are summed instead, fsdp_finish_grad_sync: no whole
    // gradient is left here)
    tb_group *emb = &rk->groups[TB_GROUP_EMBEDDING];
    const gpt_param *wte = gpt_find_param(m, "wte.weight");
    const int fsdp = ddp && ddp->fsdp.active;
    if (emb->size > 1 && wte && !cfg->untie_embeddings_and_output_weights && !fsdp) {
        TB_RANGE_PUSH("finalize_model_grads.embedding");
        tb_all_reduce(emb, m->grad_memory + wte->offset, wte->numel, TB_RED_SUM);
        TB_RANGE_POP();
    }

    tb_group *dp = &rk->groups[TB_GROUP_DP_CP], *edp = &rk->groups[TB_GROUP_EXPERT_DP];
    // the experts' replicas are another group than the dense ones' under expert parallelism or
    // when etp is not tp (at etp 1 under tp 2, the tp ranks hold the same experts)
    const int experts_apart = m->expert_parameters > 0 &&
                              (rk->groups[TB_GROUP_EP].size > 1 || rk->groups[TB_GROUP_ETP].size != tp->size);
    if (!overlap && (dp->size > 1 || (experts_apart && edp->size > 1))) {  // (overlap: ddp_finish_grad_sync)
        const float inv = 1.0f / (float)dp->size;
        if (opt->sharded) {
            TB_RANGE_PUSH("finalize_model_grads.reduce_scatter");
            // each bucket of every rank's buffer → the sum of this rank's slice, then the average
            // (an expert bucket's over expert-dp, averaged over dp × cp as the all-reduce below)
            for (int b = 0; b < opt->nbuckets; b++) {
                const tb_shard_bucket *k = &opt->buckets[b];
                const size_t n = k->slice_hi - k->slice_lo;
                tb_reduce_scatter(adamw_bucket_group(opt, k, dp), m->grad_memory + k->lo, opt->shard_grads + k->at, n);
                tb_be()->scale(m->grad_memory + k->slice_lo, opt->shard_grads + k->at, inv, n);
            }
        } else if (experts_apart) {
            // the dense range over dp × cp, the experts' over expert-dp (the ranks holding the
            // same experts), both averaged over dp × cp as Megatron's DDP scales expert
            // gradients: each expert's gradient sums every dp (and, at etp 1, tp) rank's tokens
            TB_RANGE_PUSH("finalize_model_grads.all_reduce");
            const size_t dense = m->experts_offset;
            if (dp->size > 1) tb_all_reduce(dp, m->grad_memory, dense, TB_RED_SUM);
            if (edp->size > 1) tb_all_reduce(edp, m->grad_memory + dense, m->padded_parameters - dense, TB_RED_SUM);
            tb_be()->scale(m->grad_memory, m->grad_memory, inv, m->padded_parameters);
        } else {
            TB_RANGE_PUSH("finalize_model_grads.all_reduce");
            tb_all_reduce(dp, m->grad_memory, m->padded_parameters, TB_RED_SUM);
            tb_be()->scale(m->grad_memory, m->grad_memory, inv, m->padded_parameters);
        }
        TB_RANGE_POP();
    }
    TB_RANGE_POP();
}
