-- pp_bubble.lua — "PP8 with 16 microbatches ran at S× with a B× stage imbalance", at CPU
-- scale: 16 layers (hidden 128, seq 128), the same global batch of 16 on 1 and on 8
-- pipeline stages under 1F1B (every stage a rank thread).
--
--   build/bin/tracebook run runbooks/pp_bubble.lua [--set repeats=6] [--set window=1]
--
-- Exact claims — the parameters, FLOPs and activation peak of each stage, the bytes a stage
-- sends on per step, the theoretical bubble — are counts from pipeline.json and every
-- rank's trace: true on any machine. The timing claims (speed-up, bubble, stage imbalance) are
-- replayed from per-op CPU time on one core per rank (the parser "replayed",
-- experiments/prove/schedule_replay.h): on a host with fewer than 8 cores the 8 stages share them,
-- and the wall clock would measure that sharing, not the schedule. Each layout is measured
-- over 6 processes, each with at least 1 s of replayed steps after the first
-- (runbooks/lib/timing.lua sizes train_iters from a calibration run), the two layouts'
-- processes alternating (pp1, pp8, pp1, ...). The speed-up is PROVEN when the 95% interval of
-- its paired ratio (over the 6 pairs) is within +-15%, the bubble and imbalance when the
-- median replayed step's is: a rank's CPU time per op drifts with the host's memory system
-- (on a shared 2-core VM by +-20% over tens of seconds, scripts/bench-host-drift.sh), which a
-- pair shares. Both layouts run one thread per rank (num_threads = 1): the speed-up is that
-- of 8 cores, one per stage, over 1.

local config = require "config"
local timing = require "timing"

local exp = tb.experiment{
    name = "pp_bubble", version = 3, seed = 1234,
    question = "What speed-up, bubble and stage imbalance does PP8 with 16 microbatches give, and what does each stage hold, compute and send?",
}
local base = { num_layers = 16, hidden_size = 128, num_attention_heads = 4, seq_length = 128, vocab_size = 256,
               micro_batch_size = 1, global_batch_size = 16, train_iters = tb.param("iters", 4), seed = 7,
               num_threads = 1 }
local function with(extra) return config.with(base, extra) end
-- --set window=S (a quick look below the claims' 1 s: their timings then NOT PROVEN, undersampled)
local replayed = { replayed = true, repetitions = tb.param("repeats", 6), min_window_s = tb.param("window", 1.0) }
local tolerance = 0.15  -- the timing claims' (above)
-- each sized by its own calibration, then their repetitions alternately (pp1, pp8, pp1, ...):
-- the speed-up is judged over those pairs
local sized = { timing.calibrated(exp, with{}, replayed),
                (timing.calibrated(exp, with{ pipeline_model_parallel_size = 8, world_size = 8 }, replayed)) }
local both = timing.interleaved(exp, sized)
local pp1, pp8 = both[1], both[2]
local part = config.part

if pp1.stats then  -- not in a dry run
    print(string.format("\n  pp 1: %.1f ms/step replayed (%.1f wall); pp 8: %.1f ms/step replayed (%.1f wall)\n",
                        pp1.stats.replayed_step_ms.median, pp1.stats.step_ms.median,
                        pp8.stats.replayed_step_ms.median, pp8.stats.step_ms.median))
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

-- timing, replayed on one core per rank: gated by prove on the conditions (contention) and the
-- sampling rule, not on oversubscription
local function replayed_part(figure, r) return part("replayed", { figure = figure }, r) end
exp:claim{ id = "pp8_speedup", parser = "ratio", runs = { pp1, pp8 },
           args = { numerator = replayed_part("tokens_per_s", pp8), denominator = replayed_part("tokens_per_s", pp1) },
           timing_tolerance = tolerance,
           text = "PP8/M16 throughput over PP1's, replayed from per-op CPU time on one core per stage (8 cores "
                  .. "against 1)" }
exp:claim{ id = "pp8_stage_imbalance", parser = "replayed", runs = pp8, args = { figure = "stage_imbalance" },
           timing_tolerance = tolerance,
           text = "slowest / fastest stage compute (forward + backward) at PP8/M16, replayed on one core per stage" }
exp:claim{ id = "pp8_bubble", parser = "replayed", runs = pp8, args = { figure = "bubble_fraction" },
           timing_tolerance = tolerance,
           text = "bubble fraction at PP8/M16, replayed on one core per stage" }
