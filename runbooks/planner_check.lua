-- planner_check.lua — the planner (tracebook plan, fp32: the engine's accounting) against what
-- the engine measures, as claims prove re-derives: for small shapes of the layout families
-- (tp + sequence parallelism, interleaved pipeline, data parallel with the distributed
-- optimizer, context parallelism) one engine step and the plan of the same layout, and each
-- predicted figure claimed equal to the measured one (relative_difference at_most 0): the
-- rank's parameters, its optimizer and activation peaks, the theoretical bubble and the
-- bytes per step of the layout's groups. `tracebook plan --verify` checks more (every rank,
-- every category) without records; this keeps the evidence.
--
--   build/bin/tracebook run runbooks/planner_check.lua && build/bin/tracebook prove --all
local config = require "config"

local exp = tb.experiment{
    name = "planner_check", version = 1, seed = 1234,
    question = "Does the planner's per-rank budget, bubble and communication equal what the engine measures?",
}
local model = { num_layers = 4, hidden_size = 64, num_attention_heads = 4, num_query_groups = 2, seq_length = 32,
                vocab_size = 256, global_batch_size = 8, train_iters = 1 }
local function with(a, b)
    local t = {}
    for k, v in pairs(a) do t[k] = v end
    for k, v in pairs(b) do t[k] = v end
    return t
end
-- name, the engine's layout keys, the plan's --explain, the groups whose bytes are claimed
local families = {
    { "tp2_sp", { tensor_model_parallel_size = 2, sequence_parallel = true, micro_batch_size = 2 },
      "tp2,cp1,pp1,dp1,mbs2", { "tp" } },
    { "pp2_v2", { pipeline_model_parallel_size = 2, virtual_pipeline_model_parallel_size = 2, micro_batch_size = 1 },
      "tp1,cp1,pp2,vpp2,dp1,mbs1", { "pp", "pp_grad", "embedding" } },
    { "dp2_distopt", { world_size = 2, use_distributed_optimizer = true, micro_batch_size = 2 },
      "tp1,cp1,pp1,dp2,mbs2", { "dp_cp" } },
    { "cp2", { context_parallel_size = 2, attention_backend = "flash", micro_batch_size = 2 },
      "tp1,cp2,pp1,dp1,mbs2", { "cp", "dp_cp" } },
}
for _, f in ipairs(families) do
    local name, layout, explain, groups = f[1], f[2], f[3], f[4]
    local run = exp:run(with(model, layout))
    local plan_keys = with(model, layout)
    plan_keys.world_size, plan_keys.train_iters = nil, nil
    plan_keys.tensor_model_parallel_size, plan_keys.pipeline_model_parallel_size = nil, nil
    plan_keys.virtual_pipeline_model_parallel_size, plan_keys.context_parallel_size = nil, nil
    plan_keys.explain = explain
    local plan = exp:plan(plan_keys)
    local function equal(id, predicted, measured, text)
        exp:claim{ id = name .. "_" .. id, parser = "relative_difference", runs = { plan, run }, at_most = 0,
                   args = { a = { parser = "plan_figure", args = predicted, records = { config.first_id(plan) } },
                            b = { parser = measured[1], args = measured[2], records = { config.first_id(run) } } },
                   text = name .. ": " .. text .. ", planned = measured" }
    end
    equal("parameters", { figure = "parameters_aligned", stage = 0 }, { "rank_figure", { figure = "parameters", rank = 0 } },
          "rank 0's parameters (the engine's aligned buffer count)")
    equal("optimizer_bytes", { figure = "optimizer_bytes", stage = 0 }, { "peak_memory_bytes", { category = "optimizer" } },
          "optimizer state per rank (bytes; stage 0 holds the most)")
    equal("activation_bytes", { figure = "activation_bytes", stage = 0 },
          { "rank_figure", { figure = "peak_activation_bytes", rank = 0 } }, "rank 0's activation peak (bytes)")
    equal("bubble", { figure = "bubble" }, { "pipeline_bubble", { kind = "theoretical" } }, "the theoretical bubble")
    for _, g in ipairs(groups) do
        equal("comm_" .. g, { figure = "comm_" .. g .. "_bytes" }, { "comm_bytes", { group = g } },
              "bytes per step of the busiest rank on the " .. g .. " group")
    end
end
