#include "parallel_state.h"

#include <stdio.h>

tb_coords parallel_state_coords(const tb_config *cfg, int rank) {
    tb_coords c;
    int tp = cfg->tensor_model_parallel_size, cp = cfg->context_parallel_size;
    int dp = cfg->data_parallel_size;
    c.tp = rank % tp;
    rank /= tp;
    c.cp = rank % cp;
    rank /= cp;
    c.dp = rank % dp;
    c.pp = rank / dp;
    return c;
}

void parallel_state_label(char *buf, size_t len, int rank, tb_coords c) {
    snprintf(buf, len, "rank %d (tp%d cp%d dp%d pp%d)", rank, c.tp, c.cp, c.dp, c.pp);
}
