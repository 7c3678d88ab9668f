// MoE configuration properties: Megatron-Core's MoE rules (engine/config/config_moe.c), each
// refusing its violation with its numbers; a MoE setting without experts refused; the MoE
// values not built refused as "not supported yet"; the MoE flags parsed with Megatron-LM's
// names; expert parallelism's layouts. (The other rules: test_config.c.)
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include "config/config.h"
#include "config_cases.h"
#include "tb_shell.h"
#include "tb_test.h"

// Expert parallelism and expert tensor parallelism run with either dispatcher, tensor
// parallelism with sequence parallelism; what they do not do yet is refused.
TB_TEST(expert_parallelism_runs_alltoall_and_refuses_what_it_lacks) {
#define EP2 "world_size=2 expert_model_parallel_size=2 num_experts=2 "
    CHECK_CASES(IS_VALID("num_experts=4"), IS_VALID(EP2 "moe_token_dispatcher_type=alltoall"),
                // tensor and sequence parallelism, the experts whole (etp 1) or split over etp
                IS_VALID("world_size=2 num_experts=4 tensor_model_parallel_size=2 sequence_parallel=1 "
                         "expert_tensor_parallel_size=1"),
                IS_VALID("world_size=2 num_experts=4 tensor_model_parallel_size=2 sequence_parallel=1 "
                         "moe_token_dispatcher_type=alltoall"),
                IS_VALID("world_size=2 num_experts=4 tensor_model_parallel_size=2 sequence_parallel=1"),
                IS_VALID("world_size=4 num_experts=4 tensor_model_parallel_size=2 sequence_parallel=1 "
                         "expert_model_parallel_size=2 moe_token_dispatcher_type=alltoall"),
                IS_VALID("world_size=4 expert_model_parallel_size=4 num_experts=8 moe_token_dispatcher_type=alltoall "
                         "global_batch_size=16"),
                IS_VALID(EP2 "moe_token_dispatcher_type=allgather"),
                IS_VALID(EP2 "moe_token_dispatcher_type=alltoall use_distributed_optimizer=1"),
                IS_VALID(EP2 "moe_token_dispatcher_type=alltoall overlap_grad_reduce=1"),
                IS_VALID(EP2 "moe_token_dispatcher_type=alltoall dump_tensors=1"));
#undef EP2
}

// Megatron's MoE rules, each named with its numbers; a MoE setting without experts would be
// ignored, so it is refused.
TB_TEST(moe_rules_follow_megatron_and_moe_settings_without_experts_are_refused) {
    const char *dense = "applies only with num_experts > 0 (is 0: dense)";
    char want[16][160];
    const char *flags[] = {"moe_router_topk=4", "moe_aux_loss_coeff=0.01", "moe_router_pre_softmax=1",
                           "moe_ffn_hidden_size=64", "moe_layer_freq=2", "moe_token_dispatcher_type=alltoall",
                           "moe_expert_capacity_factor=1.5", "moe_token_drop_policy=position",
                           "moe_pad_expert_input_to_capacity=1", "moe_shared_expert_intermediate_size=32",
                           "moe_grouped_gemm=1", "moe_router_load_balancing_type=none",
                           "moe_router_score_function=sigmoid", "expert_tensor_parallel_size=2"};
    const char *named[] = {"moe_router_topk (4)", "moe_aux_loss_coeff (0.01)", "moe_router_pre_softmax",
                           "moe_ffn_hidden_size (64)", "moe_layer_freq (2)", "moe_token_dispatcher_type alltoall",
                           "moe_expert_capacity_factor (1.5)", "moe_token_drop_policy position",
                           "moe_pad_expert_input_to_capacity", "moe_shared_expert_intermediate_size (32)",
                           "moe_grouped_gemm", "moe_router_load_balancing_type none", "moe_router_score_function sigmoid",
                           "expert_tensor_parallel_size (2)"};
    for (size_t i = 0; i < sizeof flags / sizeof *flags; i++) {
        snprintf(want[0], sizeof want[0], "%s %s", named[i], dense);
        tb_config c = config_with(flags[i]);
        EXPECT_ONLY(&c, want[0]);
    }
    CHECK_CASES(ONLY("num_experts=4 moe_router_topk=5", "moe_router_topk (5) must be between 1 and num_experts (4)"),
                ONLY("num_experts=4 moe_router_topk=0", "moe_router_topk (0) must be between 1 and num_experts (4)"),
                ONLY("num_experts=300 moe_router_topk=1",
                     "num_experts (300) exceeds 256, the most this build supports"),
                ONLY("num_experts=4 moe_aux_loss_coeff=-1", "moe_aux_loss_coeff (-1) must be non-negative"),
                ONLY("num_experts=4 moe_aux_loss_coeff=0.01 moe_router_load_balancing_type=none",
                     "moe_aux_loss_coeff (0.01) applies only with a load-balancing loss "
                     "(moe_router_load_balancing_type is none)"),
                ONLY("num_experts=4 moe_ffn_hidden_size=-8", "moe_ffn_hidden_size (-8) must be at least 1"),
                ONLY("num_experts=4 moe_layer_freq=0", "moe_layer_freq (0) must be at least 1"),
                ONLY("num_experts=4 moe_pad_expert_input_to_capacity=1",
                     "moe_pad_expert_input_to_capacity needs moe_expert_capacity_factor"),
                ONLY("num_experts=4 moe_token_drop_policy=position",
                     "moe_token_drop_policy position applies only with moe_expert_capacity_factor"),
                IS_VALID("num_experts=4 moe_expert_capacity_factor=1.25 moe_token_drop_policy=position"),
                ONLY("num_experts=4 moe_expert_capacity_factor=1 moe_router_load_balancing_type=sinkhorn",
                     "moe_expert_capacity_factor (1) needs moe_router_load_balancing_type aux_loss, seq_aux_loss, "
                     "global_aux_loss or none (is sinkhorn)"),
                ONLY("num_experts=4 moe_expert_capacity_factor=-1",
                     "moe_expert_capacity_factor (-1) must be non-negative (0: no capacity)"),
                IS_VALID("num_experts=4 moe_shared_expert_intermediate_size=64"),
                ONLY("num_experts=4 moe_shared_expert_intermediate_size=-1",
                     "moe_shared_expert_intermediate_size (-1) must be non-negative (0: none)"),
                ONLY("num_experts=4 moe_router_pre_softmax=1 moe_router_score_function=sigmoid",
                     "moe_router_pre_softmax applies only with moe_router_score_function softmax (is sigmoid)"),
                ONLY("num_experts=4 tensor_model_parallel_size=2",
                     "num_experts (4) with tensor_model_parallel_size 2 needs sequence_parallel"),
                ONLY("num_experts=4 tensor_model_parallel_size=2 sequence_parallel=1 expert_tensor_parallel_size=2 "
                     "moe_ffn_hidden_size=33",
                     "moe_ffn_hidden_size (33) must be divisible by expert_tensor_parallel_size (2)"));
    // the experts' hidden size defaults to the dense one, etp to tp
    tb_config c = config_with("num_experts=4 ffn_hidden_size=96");
    config_resolve(&c);
    TB_CHECK(c.moe_ffn_hidden_size == 96 && c.expert_tensor_parallel_size == 1, "moe_ffn %d etp %d",
             c.moe_ffn_hidden_size, c.expert_tensor_parallel_size);
}

// What the MoE layer does not do yet is refused, each naming its flag's value.
TB_TEST(moe_values_not_built_are_refused_as_not_supported_yet) {
    CHECK_CASES(REFUSED("num_experts=4 moe_router_load_balancing_type=sinkhorn",
                        "moe_router_load_balancing_type sinkhorn: not supported yet (aux_loss, seq_aux_loss and none "
                        "are)"),
                REFUSED("num_experts=4 moe_router_load_balancing_type=global_aux_loss",
                        "moe_router_load_balancing_type global_aux_loss: not supported yet"),
                IS_VALID("num_experts=4 moe_router_load_balancing_type=seq_aux_loss moe_aux_loss_coeff=0.01"),
                IS_VALID("num_experts=4 moe_router_score_function=sigmoid"),
                REFUSED("num_experts=4 moe_router_load_balancing_type=seq_aux_loss context_parallel_size=2 world_size=2",
                        "moe_router_load_balancing_type seq_aux_loss with tensor_model_parallel_size 1 and "
                        "context_parallel_size 2: not supported yet (a rank's tokens must be whole sequences)"),
                REFUSED("num_experts=4 moe_token_dispatcher_type=flex",
                        "moe_token_dispatcher_type flex: not supported yet"),
                IS_VALID("num_experts=4 moe_expert_capacity_factor=1.25 moe_pad_expert_input_to_capacity=1"),
                REFUSED("world_size=2 num_experts=4 expert_model_parallel_size=2 moe_expert_capacity_factor=1.25 "
                        "moe_pad_expert_input_to_capacity=1",
                        "moe_pad_expert_input_to_capacity with moe_token_dispatcher_type allgather and "
                        "expert_model_parallel_size 2, expert_tensor_parallel_size 1: not supported yet"),

                IS_VALID("num_experts=4 moe_grouped_gemm=1"),
                IS_VALID("world_size=2 num_experts=4 tensor_model_parallel_size=2 sequence_parallel=1 "
                         "moe_shared_expert_intermediate_size=8"),
                REFUSED("world_size=2 num_experts=4 tensor_model_parallel_size=2 sequence_parallel=1 "
                        "moe_shared_expert_intermediate_size=9",
                        "moe_shared_expert_intermediate_size (9) must be divisible by tensor_model_parallel_size (2)"),
                IS_VALID("world_size=2 num_experts=4 tensor_model_parallel_size=2 sequence_parallel=1 "
                         "moe_router_score_function=sigmoid"),
                IS_VALID("num_experts=4 save=/tmp/ckpt"),
                IS_VALID("world_size=4 num_experts=4 expert_model_parallel_size=2 use_distributed_optimizer=1 "
                         "load=/tmp/ckpt"),
                IS_VALID("world_size=2 num_experts=4 tensor_model_parallel_size=2 sequence_parallel=1 save=/tmp/ckpt"),
                REFUSED("num_experts=4 save_hf=/tmp/m.safetensors", "save_hf with num_experts 4: not supported yet"));
}

// The MoE flags parse as Megatron-LM's.
TB_TEST(moe_flags_parse_with_megatron_names) {
    char *argv[] = {"pretrain_gpt", "--num-experts", "8", "--moe-router-topk", "3", "--moe-router-load-balancing-type",
                    "none", "--moe-router-pre-softmax", "--moe-ffn-hidden-size", "48", "--moe-layer-freq", "2",
                    "--moe-token-dispatcher-type", "alltoall", "--expert-model-parallel-size", "2",
                    "--expert-tensor-parallel-size", "1", "--moe-aux-loss-coeff", "0"};
    tb_config c;
    tb_error e;
    int help = 0;
    TB_REQUIRE(parse(&c, ARGC(argv), argv, &help, &e) == 0, "%s", e.msg);
    TB_CHECK(c.num_experts == 8 && c.moe_router_topk == 3 && c.moe_router_load_balancing_type == TB_MOE_LB_NONE &&
                 c.moe_router_pre_softmax && c.moe_ffn_hidden_size == 48 && c.moe_layer_freq == 2 &&
                 c.moe_token_dispatcher_type == TB_MOE_DISPATCHER_ALLTOALL && c.expert_model_parallel_size == 2 &&
                 c.expert_tensor_parallel_size == 1,
             "parsed");
    CHECK_PARSE_REFUSALS({{"--moe-router-load-balancing-type", "balanced", NULL}, "balanced"},
                         {{"--moe-token-dispatcher-type", "a2a", NULL}, "a2a"},
                         {{"--moe-router-topk", "two", NULL}, "two"});
}

int main(void) {
    TB_RUN(expert_parallelism_runs_alltoall_and_refuses_what_it_lacks);
    TB_RUN(moe_rules_follow_megatron_and_moe_settings_without_experts_are_refused);
    TB_RUN(moe_values_not_built_are_refused_as_not_supported_yet);
    TB_RUN(moe_flags_parse_with_megatron_names);
    return tb_test_summary();
}
