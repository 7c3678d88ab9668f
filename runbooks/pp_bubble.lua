-- pp_bubble.lua — "PP8 with 16 microbatches ran at S× with a B× stage imbalance", at CPU
-- scale: 16 layers (hidden 256, seq 128), the same global batch of 16 on 1 and on 8
-- pipeline stages under 1F1B (every stage a thread; on a machine with fewer than 8 cores the
-- stages share them).
--
--   build/bin/tracebook run runbooks/pp_bubble.lua [--set iters=4]
--
-- Exact claims — the parameters, FLOPs and activation peak of each stage, the bytes a stage
-- sends on per step, the theoretical bubble — are counts from pipeline.json and every
-- rank's trace: true on any machine. The timing claims pass prove's stability gate only on
-- a quiet machine; with fewer cores than stages the PP8 run is oversubscribed: the speed-up
-- of the configuration as it ran accepts that and says so, while the measured bubble and
-- stage imbalance do not (a time-shared stage's compute time holds the time it waited for
-- a core, so neither measures the schedule).

local config = require "config"

local exp = tb.experiment{
    name = "pp_bubble", version = 2, seed = 1234,
    question = "What speed-up, bubble and stage imbalance does PP8 with 16 microbatches give, and what does each stage hold, compute and send?",
}
local base = { num_layers = 16, hidden_size = 256, num_attention_heads = 4, seq_length = 128, vocab_size = 256,
               micro_batch_size = 1, global_batch_size = 16, train_iters = tb.param("iters", 4), seed = 7 }
local function with(extra) return config.with(base, extra) end
local pp1 = exp:run(with{})
local pp8 = exp:run(with{ pipeline_model_parallel_size = 8, world_size = 8 })
local part = config.part

if pp1.stats then  -- not in a dry run
    print(string.format("\n  pp 1: %.1f ms/step; pp 8: %.1f ms/step\n", pp1.stats.step_ms.median,
                        pp8.stats.step_ms.median))
end

-- exact: counts, not gated
exp:claim{ id = "pp8_theoretical_bubble", parser = "pipeline_bubble", runs = pp8, args = { kind = "theoretical" },
           text = "theoretical bubble (p-1)/(m+p-1) at PP8/M16" }
exp:claim{ id = "pp1_parameters", parser = "rank_figure", runs = pp1, args = { figure = "parameters" },
           text = "parameters of the whole model (PP1)" }
exp:claim{ id = "pp8_stage_parameters_max", parser = "stage_figure", runs = pp8, args = { figure = "parameters" },
           text = "parameters of the largest PP8 stage (2 layers, and the embedding or the output layer)" }
exp:claim{ id = "pp8_stage_flops_max", parser = "stage_figure", runs = pp8, args = { figure = "flops_per_step" },
           text = "model FLOPs per step of the busiest PP8 stage" }
exp:claim{ id = "pp8_flops_imbalance", parser = "ratio", runs = pp8,
           args = { numerator = part("stage_figure", { figure = "flops_per_step", of = "max" }, pp8),
                    denominator = part("stage_figure", { figure = "flops_per_step", of = "min" }, pp8) },
           text = "busiest / idlest PP8 stage in model FLOPs per step (the imbalance of the work, exact)" }
exp:claim{ id = "pp8_stage0_activation_bytes", parser = "stage_figure", runs = pp8,
           args = { figure = "peak_activation_bytes", stage = 0 },
           text = "activation peak of PP8's first stage (1F1B keeps 8 microbatches in flight there)" }
exp:claim{ id = "pp8_activation_first_over_last", parser = "ratio", runs = pp8,
           args = { numerator = part("stage_figure", { figure = "peak_activation_bytes", stage = 0 }, pp8),
                    denominator = part("stage_figure", { figure = "peak_activation_bytes", stage = 7 }, pp8) },
           text = "activation peak of PP8's first stage over its last's (1F1B: 8 microbatches in flight against 1)" }
exp:claim{ id = "pp8_p2p_send_bytes", parser = "comm_bytes", runs = pp8, args = { group = "pp", op = "send" },
           text = "bytes of activations a PP8 stage sends to the next per step (16 microbatches)" }

-- timing: gated by prove on the measurement conditions
exp:claim{ id = "pp8_speedup", parser = "ratio", runs = { pp1, pp8 }, accept_oversubscribed = true,
           args = { numerator = part("tokens_per_s", nil, pp8), denominator = part("tokens_per_s", nil, pp1) },
           text = "PP8/M16 throughput over PP1's as it ran here: with fewer than 8 cores the 8 stages share them, "
                  .. "so this is not the speed-up of 8 devices" }
exp:claim{ id = "pp8_stage_imbalance", parser = "stage_imbalance", runs = pp8,
           text = "slowest / fastest stage compute time at PP8/M16" }
exp:claim{ id = "pp8_bubble", parser = "pipeline_bubble", runs = pp8, text = "measured bubble fraction at PP8/M16" }
