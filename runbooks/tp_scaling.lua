-- tp_scaling.lua — "TP1→8 cut throughput from X to Y tok/s", at CPU scale: the same model
-- and global batch with tensor parallelism 1, 2, 4 and 8, every rank a thread of one process
-- with one OpenMP/BLAS thread (num_threads = 1).
--
--   build/bin/tracebook run runbooks/tp_scaling.lua [--set repeats=8] [--set window=1]
--
-- Two kinds of claim. Exact ones — the bytes each rank all-reduces per step, the parameters
-- and FLOPs each rank holds and computes — are counts read from every rank's trace and
-- pipeline.json, true on any machine under any load. Timing ones are replayed from per-op CPU
-- time on one core per rank (the parser "replayed", experiments/prove/schedule_replay.h): on a
-- host with fewer than 8 cores TP4's and TP8's ranks share them, and the wall clock would
-- measure that sharing. A replayed all-reduce costs what the local backend's copies and sums
-- cost the rank's thread, so TP8 here is 8 cores of one host sharing its memory, not 8 GPUs
-- with NVLink. Each layout runs `repeats` processes, sized by a replayed calibration run to
-- at least 1 s of replayed steps each, the four layouts' processes in rounds (tp1, tp2, tp4,
-- tp8, tp1, ...), so that each ratio is judged over its pairs of one round (the host's memory
-- system drifts between rounds, scripts/bench-host-drift.sh); PROVEN when the interval is
-- within +-15%.

local config = require "config"
local timing = require "timing"

local exp = tb.experiment{
    name = "tp_scaling", version = 3, seed = 1234,
    question = "How does throughput change from TP1 to TP8 at a fixed global batch, and what does each rank hold, compute and all-reduce?",
}
-- --set window=S sizes the runs for S seconds of replayed steps (a quick look: below the claims'
-- 1 s, their timings are then NOT PROVEN as undersampled)
local repeats, tolerance, window = tb.param("repeats", 8), 0.15, tb.param("window", 1.0)
local sized = {}
for _, point in ipairs(tb.sweep{ tensor_model_parallel_size = { 1, 2, 4, 8 } }) do
    point.world_size = point.tensor_model_parallel_size
    point.num_layers, point.hidden_size, point.num_attention_heads = 2, 256, 8
    point.seq_length, point.vocab_size = 128, 256
    point.micro_batch_size, point.global_batch_size = 4, 8
    point.train_iters, point.seed, point.num_threads = 6, 7, 1
    sized[#sized + 1] = (timing.calibrated(exp, point, { replayed = true, repetitions = repeats, min_window_s = window }))
end
local results = timing.interleaved(exp, sized)
local tp1, tp2, tp8 = results[1], results[2], results[4]

if tp1.stats then  -- not in a dry run
    print(string.format("\n  %4s %14s %14s %12s", "tp", "replayed tok/s", "replayed ms", "wall ms"))
    for _, r in ipairs(results) do
        print(string.format("  %4d %14.0f %14.1f %12.1f", r.config.tensor_model_parallel_size,
                            8 * 128 / (r.stats.replayed_step_ms.median / 1000), r.stats.replayed_step_ms.median,
                            r.stats.step_ms.median))
    end
    print()
end

local part = config.part

-- exact: counts, not gated
exp:claim{ id = "tp8_all_reduce_bytes_per_rank", parser = "comm_bytes", runs = tp8,
           args = { group = "tp", op = "all_reduce" },
           text = "bytes each TP8 rank all-reduces over its tensor-parallel group per step" }
exp:claim{ id = "tp_all_reduce_bytes_tp8_vs_tp2", parser = "relative_difference", runs = { tp2, tp8 }, at_most = 0,
           args = { a = part("comm_bytes", { group = "tp", op = "all_reduce" }, tp8),
                    b = part("comm_bytes", { group = "tp", op = "all_reduce" }, tp2) },
           text = "a TP8 rank all-reduces exactly the bytes a TP2 rank does per step (Megatron's tensor parallelism "
                  .. "all-reduces whole activations, whatever the degree)" }
exp:claim{ id = "tp1_parameters", parser = "rank_figure", runs = tp1, args = { figure = "parameters" },
           text = "parameters of the model on its one TP1 rank" }
exp:claim{ id = "tp8_parameters_per_rank", parser = "rank_figure", runs = tp8, args = { figure = "parameters" },
           text = "parameters each TP8 rank holds: its shards (the vocabulary padded to a multiple of 128 x 8) and "
                  .. "the norms, row-parallel biases and position embedding every rank holds whole" }
exp:claim{ id = "tp8_parameter_share", parser = "ratio", runs = { tp1, tp8 },
           args = { numerator = part("rank_figure", { figure = "parameters" }, tp8),
                    denominator = part("rank_figure", { figure = "parameters" }, tp1) },
           text = "a TP8 rank holds this fraction of TP1's parameters (1/8 = 0.125 for a perfect split)" }
exp:claim{ id = "tp8_flops_per_rank", parser = "rank_figure", runs = tp8, args = { figure = "flops_per_step" },
           text = "model FLOPs each TP8 rank computes per step" }
exp:claim{ id = "tp8_flops_share", parser = "ratio", runs = { tp1, tp8 },
           args = { numerator = part("rank_figure", { figure = "flops_per_step" }, tp8),
                    denominator = part("rank_figure", { figure = "flops_per_step" }, tp1) },
           text = "a TP8 rank computes this fraction of TP1's model FLOPs per step" }

-- timing, replayed on one core per rank: gated by prove on the conditions (contention) and the
-- sampling rule (paired for the ratios), not on oversubscription
local function replayed_tps(r) return part("replayed", { figure = "tokens_per_s" }, r) end
exp:claim{ id = "tp1_tokens_per_s", parser = "replayed", runs = tp1, args = { figure = "tokens_per_s" },
           timing_tolerance = tolerance, text = "TP1 throughput (tok/s) on one core" }
exp:claim{ id = "tp8_tokens_per_s", parser = "replayed", runs = tp8, args = { figure = "tokens_per_s" },
           timing_tolerance = tolerance,
           text = "TP8 throughput (tok/s), replayed from per-op CPU time on one core per rank" }
exp:claim{ id = "tp2_over_tp1", parser = "ratio", runs = { tp1, tp2 }, timing_tolerance = tolerance,
           args = { numerator = replayed_tps(tp2), denominator = replayed_tps(tp1) },
           text = "TP2 throughput as a fraction of TP1's, one core per rank (replayed)" }
exp:claim{ id = "tp8_over_tp1", parser = "ratio", runs = { tp1, tp8 }, timing_tolerance = tolerance,
           args = { numerator = replayed_tps(tp8), denominator = replayed_tps(tp1) },
           text = "TP8 throughput as a fraction of TP1's, one core per rank (replayed): 8 cores against 1, the "
                  .. "all-reduces costing what the local backend's copies and sums cost" }
