// moe_cases.h — the tiny MoE model test_moe.c and test_moe_layouts.c train, and one
// rank's training of it with the load statistics of its last step.
#ifndef TB_TESTS_MOE_CASES_H
#define TB_TESTS_MOE_CASES_H

#include <stdint.h>

#include "config/config.h"
#include "trainers.h"
#include "training.h"

// A tiny MoE model: experts in layers 0 and 2 of 4 (freq 2), top-2 of 4.
static inline void moe_config(tb_config *c) {
    config_defaults(c);
    c->num_layers = 4, c->hidden_size = 32, c->num_attention_heads = 4, c->seq_length = 16;
    c->micro_batch_size = 2, c->global_batch_size = 4, c->vocab_size = 64, c->train_iters = 3, c->lr = 1e-3;
    c->num_threads = 2;
    c->num_experts = 4, c->moe_router_topk = 2, c->moe_layer_freq = 2, c->moe_ffn_hidden_size = 24;
    c->moe_aux_loss_coeff = 0.01;
}

typedef struct moe_run {
    double loss[3];
    int64_t tokens[4][4];  // the last step's tokens per expert per layer
    int microbatches[4];
    double lb[4];
    int64_t dropped[4];
    size_t peak_activations;  // the rank's peak of activation bytes
} moe_run;

static inline int train_moe(const tb_config *in, moe_run *out) {
    static tb_config cfg;  // the trainer keeps a pointer
    tb_single_rank rk;
    tb_trainer tr;
    if (single_rank_trainer(&cfg, in, &rk, &tr) != 0) return -1;
    for (int s = 1; s <= cfg.train_iters; s++) out->loss[s - 1] = train_step(&tr, s).loss;
    const moe_stats *st = &tr.models[0].block.moe_stats;
    for (int l = 0; l < 4; l++) {
        for (int e = 0; e < 4; e++) out->tokens[l][e] = st->tokens_per_expert[l * 4 + e];
        out->microbatches[l] = st->microbatches[l];
        out->lb[l] = st->load_balancing_loss[l];
        out->dropped[l] = st->dropped_tokens[l];
    }
    out->peak_activations = rk.mem.stats.peak[TB_MEM_ACTIVATIONS];
    trainer_free(&tr);
    return rk.mem.stats.total_current == 0 ? 0 : -2;
}

#endif
