#include "transformer/moe/moe_types.h"

#include <string.h>

tb_moe_dims tb_moe_dims_for(const tb_config *cfg, int fc1_factor) {
    tb_moe_dims m;
    memset(&m, 0, sizeof m);
    m.freq = 1;
    if (cfg->num_experts <= 0) return m;
    m.E = cfg->num_experts;
    m.expert_first = 0;
    m.k = cfg->moe_router_topk;
    m.etp_size = cfg->expert_tensor_parallel_size > 1 ? cfg->expert_tensor_parallel_size : 1;
    m.F = cfg->moe_ffn_hidden_size / m.etp_size;  // this etp rank's columns of each expert
    m.F1 = fc1_factor * m.F;
    const int tp = cfg->tensor_model_parallel_size > 1 ? cfg->tensor_model_parallel_size : 1;
    m.Fs = cfg->moe_shared_expert_intermediate_size > 0 ? cfg->moe_shared_expert_intermediate_size / tp : 0;
    m.Fs1 = fc1_factor * m.Fs;
    m.freq = cfg->moe_layer_freq > 0 ? cfg->moe_layer_freq : 1;
    m.pre_softmax = cfg->moe_router_pre_softmax;
    m.sigmoid = cfg->moe_router_score_function == TB_MOE_SCORE_SIGMOID;
    m.aux_loss = cfg->moe_router_load_balancing_type == TB_MOE_LB_AUX_LOSS ||
                 cfg->moe_router_load_balancing_type == TB_MOE_LB_SEQ_AUX_LOSS;
    m.seq_aux = cfg->moe_router_load_balancing_type == TB_MOE_LB_SEQ_AUX_LOSS;
    m.seq_length = cfg->seq_length;
    m.aux_coeff = cfg->moe_aux_loss_coeff;
    m.capacity_factor = cfg->moe_expert_capacity_factor;
    m.drop_position = cfg->moe_token_drop_policy == TB_MOE_DROP_POSITION;
    m.ep_size = cfg->expert_model_parallel_size > 1 ? cfg->expert_model_parallel_size : 1;
    m.E_local = m.E / m.ep_size;  // expert_first and the groups: set by the model
    m.ep = m.etp = m.sp = NULL;
    m.tp = NULL;
    m.allgather = cfg->moe_token_dispatcher_type == TB_MOE_DISPATCHER_ALLGATHER;
    m.grouped_gemm = cfg->moe_grouped_gemm;
    m.pad_to_capacity = cfg->moe_pad_expert_input_to_capacity && cfg->moe_expert_capacity_factor > 0;
    return m;
}
