-- llama2_70b_64_gpus.lua — "how would you train a 70B model on 64 H100s?": a LLaMA-2-70B
-- shape (80 layers, hidden 8192, 64 heads, 8 query groups, ffn 28672, vocab 32000, SwiGLU,
-- RMSNorm, RoPE, untied) at seq 4096 and a 2M-token global batch, bf16 with the distributed
-- optimizer, sequence parallelism and selective recompute, on 8 nodes of 8 x 80 GB.
--
--   build/bin/tracebook run runbooks/plans/llama2_70b_64_gpus.lua [--set gbs=1024]
--   build/bin/tracebook prove --all
--
-- Exact claims (the planner's arithmetic, re-derived from the recorded plan.json): the
-- parameter count, the chosen layout's per-rank memory, its bubble, the legal layouts.
local plan = require "plan"

local exp = tb.experiment{
    name = "plan_llama2_70b_64_gpus", version = 2,
    question = "Which TP/CP/PP/DP layout trains a LLaMA-2-70B shape on 64 80-GB GPUs, and what does each rank hold?",
}
local model = { num_layers = 80, hidden_size = 8192, num_attention_heads = 64, num_query_groups = 8,
                ffn_hidden_size = 28672, vocab_size = 32000, seq_length = 4096, swiglu = true,
                normalization = "RMSNorm", position_embedding_type = "rope",
                untie_embeddings_and_output_weights = true, disable_bias_linear = true, attention_backend = "flash",
                global_batch_size = tb.param("gbs", 512), use_distributed_optimizer = true,
                sequence_parallel = true, recompute_granularity = "selective" }
local cluster = { gpus = 64, gpus_per_node = 8, gpu_memory = "80G", bf16 = true, peak_tflops = 989 }
plan.answer(exp, model, cluster, 5)
-- beside the TP/PP/DP layouts: Megatron-FSDP (ZeRO-3) at pp 1, the state sharded instead of the layers split
plan.fsdp(exp, model, cluster, "optim_grads_params", 5)
