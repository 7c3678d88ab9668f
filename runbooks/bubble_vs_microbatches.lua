-- bubble_vs_microbatches.lua — the pipeline bubble against the number of microbatches, the
-- curve of Megatron's (p − 1) / (m + p − 1): pp 4 under 1F1B at a fixed global batch of 32
-- samples split into m ∈ {4, 8, 16, 32} microbatches (micro batch 32 / m), 8 layers (hidden
-- 256, seq 128). The measured bubble is the share of the forward/backward schedule a stage
-- spends not computing (mean over stages and steps after the first, pipeline.json).
--
--   build/bin/tracebook run runbooks/bubble_vs_microbatches.lua [--set iters=4]
--
-- Every stage is a thread: on a machine with fewer than 4 cores the stages share them and
-- the measured bubbles are NOT PROVEN (oversubscribed: a time-shared stage's compute time
-- holds the time it waited for a core, so it does not measure the schedule), and they are
-- not accepted here. The exact claims — the theoretical bubble, the bytes a stage sends on
-- per step, the FLOPs and activation peak of a stage — hold on any machine.

local config = require "config"

local exp = tb.experiment{
    name = "bubble_vs_microbatches", version = 1, seed = 1234,
    question = "How does the pipeline bubble of pp 4 under 1F1B fall with the number of microbatches, measured and in theory?",
}
local base = { num_layers = 8, hidden_size = 256, num_attention_heads = 4, seq_length = 128, vocab_size = 256,
               pipeline_model_parallel_size = 4, world_size = 4, global_batch_size = 32,
               train_iters = tb.param("iters", 4), seed = 7 }
local counts = { 4, 8, 16, 32 }
local by_m = {}
for _, m in ipairs(counts) do by_m[m] = exp:run(config.with(base, { micro_batch_size = 32 // m })) end
local part = config.part

if by_m[4].stats then  -- not in a dry run: the curve as the runs left it in pipeline.json
    print(string.format("\n  %4s %6s %18s %20s %10s", "m", "micro", "measured bubble", "theoretical bubble", "step ms"))
    for _, m in ipairs(counts) do
        local r = by_m[m]
        local p = tb.read_json(r.runs[1].record .. "/run/pipeline.json")
        print(string.format("  %4d %6d %18.3f %20.3f %10.1f", m, 32 // m, p.measured_bubble_fraction,
                            p.theoretical_bubble_fraction, r.stats.step_ms.median))
    end
    print()
end

for _, m in ipairs(counts) do
    exp:claim{ id = string.format("pp4_m%d_theoretical_bubble", m), parser = "pipeline_bubble", runs = by_m[m],
               args = { kind = "theoretical" },
               text = string.format("theoretical bubble (p-1)/(m+p-1) of pp 4 with %d microbatches", m) }
    exp:claim{ id = string.format("pp4_m%d_bubble", m), parser = "pipeline_bubble", runs = by_m[m],
               text = string.format("measured bubble fraction of pp 4 with %d microbatches", m) }
end

-- exact: what the split into microbatches changes, and what it does not
exp:claim{ id = "pp4_p2p_send_bytes", parser = "comm_bytes", runs = by_m[4], args = { group = "pp", op = "send" },
           text = "bytes of activations a pp 4 stage sends to the next per step (32 samples)" }
exp:claim{ id = "pp4_p2p_send_bytes_m32_vs_m4", parser = "relative_difference", runs = { by_m[4], by_m[32] },
           at_most = 0,
           args = { a = part("comm_bytes", { group = "pp", op = "send" }, by_m[32]),
                    b = part("comm_bytes", { group = "pp", op = "send" }, by_m[4]) },
           text = "32 microbatches send exactly the bytes 4 do per step: the split changes the bubble, not the traffic" }
exp:claim{ id = "pp4_stage_flops_max", parser = "stage_figure", runs = by_m[4], args = { figure = "flops_per_step" },
           text = "model FLOPs per step of the busiest pp 4 stage (any m: the global batch is fixed)" }
exp:claim{ id = "pp4_stage0_activation_m32_over_m4", parser = "ratio", runs = { by_m[4], by_m[32] },
           args = { numerator = part("stage_figure", { figure = "peak_activation_bytes", stage = 0 }, by_m[32]),
                    denominator = part("stage_figure", { figure = "peak_activation_bytes", stage = 0 }, by_m[4]) },
           text = "the first stage's activation peak with 32 microbatches over its peak with 4 (1F1B keeps 4 in "
                  .. "flight there either way, of 1 sample against 8)" }
