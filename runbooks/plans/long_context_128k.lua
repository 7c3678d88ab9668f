-- long_context_128k.lua — "how would you train at 128K context?": a LLaMA-3-8B shape (32
-- layers, hidden 4096, 32 heads, 8 query groups, ffn 14336, vocab 128256) at seq 131072, a
-- 64-sequence (8M-token) global batch, bf16, the distributed optimizer, sequence parallelism
-- and the flash core, on 64 80-GB GPUs: context parallelism is what makes it fit (each cp rank
-- holds 2 zig-zag chunks of seq / 2cp tokens and all-gathers K and V per layer).
--
--   build/bin/tracebook run runbooks/plans/long_context_128k.lua [--set seq=65536]
local plan = require "plan"

local exp = tb.experiment{
    name = "plan_long_context_128k", version = 1,
    question = "Which TP/CP/PP layout fits an 8B model at 128K context on 64 80-GB GPUs?",
}
local model = { num_layers = 32, hidden_size = 4096, num_attention_heads = 32, num_query_groups = 8,
                ffn_hidden_size = 14336, vocab_size = 128256, seq_length = tb.param("seq", 131072), swiglu = true,
                normalization = "RMSNorm", position_embedding_type = "rope",
                untie_embeddings_and_output_weights = true, disable_bias_linear = true,
                max_position_embeddings = 131072, global_batch_size = 64, use_distributed_optimizer = true,
                sequence_parallel = true, attention_backend = "flash" }
local cluster = { gpus = 64, gpus_per_node = 8, gpu_memory = "80G", bf16 = true, peak_tflops = 989 }
local ranked = plan.answer(exp, model, cluster, 5)
tb.assert(ranked.plan.candidates[1].cp > 1, "at 128K the top layout uses context parallelism")
