// config_moe.c — the mixture-of-experts rules of config validation (config.c calls them):
// Megatron-Core's, each with its numbers, and the MoE values the engine cannot run yet.
#include "config/config.h"
#include "config/config_rules.h"

// Mixture of experts (transformer/moe/): Megatron-Core's rules, each with its numbers. The
// expert grid is expert-tp x ep x expert-dp x pp over the same world as the dense
// tp x cp x dp x pp one (parallel_state.h), so etp x ep x pp must divide the world. Without
// experts every MoE setting left at a non-default value is refused: it would be ignored.
void config_moe_rules(rules *r, const tb_config *c) {
    const int tp = c->tensor_model_parallel_size, pp = c->pipeline_model_parallel_size;
    const int ep = c->expert_model_parallel_size, etp = c->expert_tensor_parallel_size;
    if (c->num_experts < 0) {
        violated(r, "num_experts (%d) must be non-negative (0: dense)", c->num_experts);
        return;
    }
    if (c->num_experts == 0) {
        static const char *const dense = "applies only with num_experts > 0 (is 0: dense)";
        if (ep > 1) violated(r, "expert_model_parallel_size (%d) needs num_experts > 0", ep);
        if (etp != tp) violated(r, "expert_tensor_parallel_size (%d) %s", etp, dense);
        if (c->moe_router_topk != 2) violated(r, "moe_router_topk (%d) %s", c->moe_router_topk, dense);
        if (c->moe_router_load_balancing_type != TB_MOE_LB_AUX_LOSS)
            violated(r, "moe_router_load_balancing_type %s %s",
                     config_choice_name("moe_router_load_balancing_type", c->moe_router_load_balancing_type), dense);
        if (c->moe_aux_loss_coeff != 0) violated(r, "moe_aux_loss_coeff (%g) %s", c->moe_aux_loss_coeff, dense);
        if (c->moe_router_pre_softmax) violated(r, "moe_router_pre_softmax %s", dense);
        if (c->moe_router_score_function != TB_MOE_SCORE_SOFTMAX)
            violated(r, "moe_router_score_function %s %s",
                     config_choice_name("moe_router_score_function", c->moe_router_score_function), dense);
        if (c->moe_ffn_hidden_size != 0) violated(r, "moe_ffn_hidden_size (%d) %s", c->moe_ffn_hidden_size, dense);
        if (c->moe_layer_freq != 1) violated(r, "moe_layer_freq (%d) %s", c->moe_layer_freq, dense);
        if (c->moe_token_dispatcher_type != TB_MOE_DISPATCHER_ALLGATHER)
            violated(r, "moe_token_dispatcher_type %s %s",
                     config_choice_name("moe_token_dispatcher_type", c->moe_token_dispatcher_type), dense);
        if (c->moe_expert_capacity_factor != 0)
            violated(r, "moe_expert_capacity_factor (%g) %s", c->moe_expert_capacity_factor, dense);
        if (c->moe_token_drop_policy != TB_MOE_DROP_PROBS)
            violated(r, "moe_token_drop_policy %s %s",
                     config_choice_name("moe_token_drop_policy", c->moe_token_drop_policy), dense);
        if (c->moe_pad_expert_input_to_capacity) violated(r, "moe_pad_expert_input_to_capacity %s", dense);
        if (c->moe_shared_expert_intermediate_size != 0)
            violated(r, "moe_shared_expert_intermediate_size (%d) %s", c->moe_shared_expert_intermediate_size, dense);
        if (c->moe_grouped_gemm) violated(r, "moe_grouped_gemm %s", dense);
        return;
    }
    const int E = c->num_experts;
    if (E > TB_MOE_MAX_EXPERTS)
        violated(r, "num_experts (%d) exceeds %d, the most this build supports", E, TB_MOE_MAX_EXPERTS);
    DIVISIBLE(r, E, "num_experts", ep, "expert_model_parallel_size");
    if (c->moe_router_topk < 1 || c->moe_router_topk > E)
        violated(r, "moe_router_topk (%d) must be between 1 and num_experts (%d)", c->moe_router_topk, E);
    if (c->moe_aux_loss_coeff < 0) violated(r, "moe_aux_loss_coeff (%g) must be non-negative", c->moe_aux_loss_coeff);
    else if (c->moe_aux_loss_coeff > 0 && c->moe_router_load_balancing_type == TB_MOE_LB_NONE)
        violated(r, "moe_aux_loss_coeff (%g) applies only with a load-balancing loss "
                    "(moe_router_load_balancing_type is none)", c->moe_aux_loss_coeff);
    if (c->moe_router_pre_softmax && c->moe_router_score_function != TB_MOE_SCORE_SOFTMAX)
        violated(r, "moe_router_pre_softmax applies only with moe_router_score_function softmax (is sigmoid)");
    if (c->moe_ffn_hidden_size < 1) violated(r, "moe_ffn_hidden_size (%d) must be at least 1", c->moe_ffn_hidden_size);
    else if (c->moe_ffn_hidden_size > (1 << 22))
        violated(r, "moe_ffn_hidden_size (%d) exceeds the largest supported value %d", c->moe_ffn_hidden_size, 1 << 22);
    if (c->moe_layer_freq < 1) violated(r, "moe_layer_freq (%d) must be at least 1", c->moe_layer_freq);
    if (etp < 1) violated(r, "expert_tensor_parallel_size (%d) must be at least 1", etp);
    else {
        if (c->moe_ffn_hidden_size >= 1)
            DIVISIBLE(r, c->moe_ffn_hidden_size, "moe_ffn_hidden_size", etp, "expert_tensor_parallel_size");
        const int64_t expert_mp = (int64_t)etp * ep * pp;
        if (c->world_size % expert_mp != 0)
            violated(r, "world_size (%d) must be divisible by expert_tensor_parallel_size x "
                        "expert_model_parallel_size x pipeline_model_parallel_size (%d x %d x %d = %lld): the "
                        "expert grid", c->world_size, etp, ep, pp, (long long)expert_mp);
    }
    if (c->moe_expert_capacity_factor < 0)
        violated(r, "moe_expert_capacity_factor (%g) must be non-negative (0: no capacity)",
                 c->moe_expert_capacity_factor);
    // Megatron's rule: the capacity is applied by the top-k routers with a load-balancing loss or none
    if (c->moe_expert_capacity_factor > 0 && c->moe_router_load_balancing_type == TB_MOE_LB_SINKHORN)
        violated(r, "moe_expert_capacity_factor (%g) needs moe_router_load_balancing_type aux_loss, seq_aux_loss, "
                    "global_aux_loss or none (is sinkhorn)", c->moe_expert_capacity_factor);
    if (c->moe_expert_capacity_factor == 0) {
        if (c->moe_pad_expert_input_to_capacity)
            violated(r, "moe_pad_expert_input_to_capacity needs moe_expert_capacity_factor");
        if (c->moe_token_drop_policy != TB_MOE_DROP_PROBS)
            violated(r, "moe_token_drop_policy %s applies only with moe_expert_capacity_factor",
                     config_choice_name("moe_token_drop_policy", c->moe_token_drop_policy));
    }
    if (c->moe_shared_expert_intermediate_size < 0)
        violated(r, "moe_shared_expert_intermediate_size (%d) must be non-negative (0: none)",
                 c->moe_shared_expert_intermediate_size);
    else if (c->moe_shared_expert_intermediate_size > (1 << 22))
        violated(r, "moe_shared_expert_intermediate_size (%d) exceeds the largest supported value %d",
                 c->moe_shared_expert_intermediate_size, 1 << 22);
    else if (c->moe_shared_expert_intermediate_size > 0 && tp > 0)  // split over tp as the dense MLP
        DIVISIBLE(r, c->moe_shared_expert_intermediate_size, "moe_shared_expert_intermediate_size", tp,
                  "tensor_model_parallel_size");
    // Megatron's rule (arguments.py): MoE under tensor parallelism runs sequence parallel
    if (tp > 1 && !c->sequence_parallel)
        violated(r, "num_experts (%d) with tensor_model_parallel_size %d needs sequence_parallel", E, tp);
}

// The MoE values the engine cannot run yet (after every rule passed).
void config_moe_not_supported_yet(rules *r, const tb_config *c) {
    const int E = c->num_experts;
    if (E == 0) return;
    const int tp = c->tensor_model_parallel_size, cp = c->context_parallel_size;
    const int ep = c->expert_model_parallel_size, etp = c->expert_tensor_parallel_size;
    if (cp > 1)
        violated(r, "num_experts %d with context_parallel_size %d: not supported yet (MoE runs at cp 1)", E, cp);
    const int lb = c->moe_router_load_balancing_type;
    if (lb != TB_MOE_LB_AUX_LOSS && lb != TB_MOE_LB_SEQ_AUX_LOSS && lb != TB_MOE_LB_NONE)
        violated(r, "moe_router_load_balancing_type %s: not supported yet (aux_loss, seq_aux_loss and none are)",
                 config_choice_name("moe_router_load_balancing_type", lb));
    if (lb == TB_MOE_LB_SEQ_AUX_LOSS && (tp > 1 || cp > 1))
        violated(r, "moe_router_load_balancing_type seq_aux_loss with tensor_model_parallel_size %d and "
                    "context_parallel_size %d: not supported yet (a rank's tokens must be whole sequences)", tp, cp);
    if (c->moe_token_dispatcher_type == TB_MOE_DISPATCHER_FLEX)
        violated(r, "moe_token_dispatcher_type flex: not supported yet (allgather and alltoall are)");
    if (c->moe_pad_expert_input_to_capacity && c->moe_token_dispatcher_type == TB_MOE_DISPATCHER_ALLGATHER &&
        (ep > 1 || etp > 1))
        violated(r, "moe_pad_expert_input_to_capacity with moe_token_dispatcher_type allgather and "
                    "expert_model_parallel_size %d, expert_tensor_parallel_size %d: not supported yet (alltoall is)",
                 ep, etp);
    if (c->save_hf[0])
        violated(r, "save_hf with num_experts %d: not supported yet (GPT-2 files have no experts)", E);
}
