-- llama3_405b.lua — "how would you lay out a 405B dense model?": a LLaMA-3-405B shape
-- (126 layers, hidden 16384, 128 heads, 8 query groups, ffn 53248, vocab 128256) at seq 8192,
-- a 16M-token global batch, bf16 with the distributed optimizer, on 1024 80-GB GPUs (128 nodes
-- of 8). 126 layers split over power-of-two pipelines only when the embedding and the loss
-- count as a layer each (126 + 2 = 128, Megatron's --account-for-*-in-pipeline-split).
--
--   build/bin/tracebook run runbooks/plans/llama3_405b.lua [--set gpus=2048]
--
-- The plan is legal for Megatron; this CPU engine cannot run it (its world is at most 64
-- ranks and token files hold uint16 ids), which the table marks.
local plan = require "plan"

local exp = tb.experiment{
    name = "plan_llama3_405b", version = 2,
    question = "Which layout trains a 405B dense model on 1024 80-GB GPUs, with its layers per stage rebalanced for the embedding and the loss?",
}
local model = { num_layers = 126, hidden_size = 16384, num_attention_heads = 128, num_query_groups = 8,
                ffn_hidden_size = 53248, vocab_size = 128256, seq_length = 8192, swiglu = true,
                normalization = "RMSNorm", position_embedding_type = "rope",
                untie_embeddings_and_output_weights = true, disable_bias_linear = true, attention_backend = "flash",
                global_batch_size = 2048, use_distributed_optimizer = true, sequence_parallel = true,
                account_for_embedding_in_pipeline_split = true, account_for_loss_in_pipeline_split = true }
local cluster = { gpus = tb.param("gpus", 1024), gpus_per_node = 8, gpu_memory = "80G", bf16 = true, peak_tflops = 989 }
plan.answer(exp, model, cluster, 5)
-- beside the TP/PP/DP layouts: Megatron-FSDP (ZeRO-3) at pp 1, the state sharded instead of the layers split
plan.fsdp(exp, model, cluster, "optim_grads_params", 5)
