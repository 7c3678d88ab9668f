-- deepseek_moe_64_experts.lua — "how would you train a DeepSeek-style MoE with many small
-- experts?": a DeepSeekMoE-16B-like shape (28 layers, hidden 2048, 16 heads, vocab 102400,
-- SwiGLU, RMSNorm, RoPE, untied) whose every layer routes each token to 6 of 64 fine-grained
-- experts of ffn 1408 beside a shared expert of 2816 (DeepSeek's 2 shared experts of 1408 as
-- one), at seq 4096 and a 4M-token global batch, bf16 with the distributed optimizer and
-- selective recompute, the all-to-all dispatcher, on 8 nodes of 8 x 80 GB.
--
--   build/bin/tracebook run runbooks/plans/deepseek_moe_64_experts.lua [--set gpus=128]
--   build/bin/tracebook prove --all
--
-- What differs from a dense plan: the experts are 15.5 of the 17.1 B parameters but a token
-- computes with 6/64 of them (2.8 B active), so expert parallelism shards the experts' weights
-- and optimizer state over ep (each ep rank holds 64/ep experts, replicated over expert-dp)
-- instead of splitting every GEMM over tp; the price is the all-to-all of every MoE layer
-- (N x 6 tokens out and back, forward and backward). DeepSeek's first layer is dense; this
-- engine's --moe-layer-freq cannot say that, so every layer is a MoE layer here. MoE under tp
-- needs sequence parallelism (Megatron's rule), which this model does not ask for, so the
-- candidates are tp 1; asked with --sequence-parallel the planner budgets the tp x etp layouts
-- too (etp tp and 1), and at this shape its top candidate stays the same tp 1 layout. MoE under
-- cp > 1 is refused (the engine runs MoE at cp 1).
--
-- Exact claims (the planner's arithmetic, re-derived from the recorded plan.json): the
-- parameter count, the expert and active parameters, the experts per ep rank, the chosen
-- layout's per-rank memory, its bubble, its all-to-all and expert-dp bytes (the all-to-all a
-- balanced router's estimate, stated so), the legal layouts.
local plan = require "plan"

local exp = tb.experiment{
    name = "plan_deepseek_moe_64_experts", version = 1,
    question = "Which PP/EP/DP layout trains a DeepSeek-style MoE of 64 small experts (top-6) on 64 80-GB GPUs, "
               .. "and what does each rank hold and send?",
}
local model = { num_layers = 28, hidden_size = 2048, num_attention_heads = 16, ffn_hidden_size = 10944,
                vocab_size = 102400, seq_length = 4096, swiglu = true, normalization = "RMSNorm",
                position_embedding_type = "rope", untie_embeddings_and_output_weights = true,
                disable_bias_linear = true, attention_backend = "flash",
                num_experts = 64, moe_router_topk = 6, moe_ffn_hidden_size = 1408,
                moe_shared_expert_intermediate_size = 2816, moe_token_dispatcher_type = "alltoall",
                global_batch_size = tb.param("gbs", 1024), use_distributed_optimizer = true,
                recompute_granularity = "selective" }
local cluster = { gpus = tb.param("gpus", 64), gpus_per_node = 8, gpu_memory = "80G", bf16 = true, peak_tflops = 989 }
local ranked = plan.answer(exp, model, cluster, 5)
local best = ranked.plan.candidates[1]
tb.assert(best.moe.ep > 1, "with 64 experts the top layout shards them over expert parallelism")
