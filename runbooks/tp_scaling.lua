-- tp_scaling.lua — "TP1→8 cut throughput from X to Y tok/s", at CPU scale: the same model
-- and global batch with tensor parallelism 1, 2, 4 and 8 (every rank a thread of one
-- process, so on a small machine the ranks share its cores and the all-reduces are pure cost).
--
--   build/bin/tracebook run runbooks/tp_scaling.lua [--set iters=6 --set repeats=2]
--
-- Two kinds of claim. Exact ones — the bytes each rank all-reduces per step, the parameters
-- and FLOPs each rank holds and computes — are counts read from every rank's trace and
-- pipeline.json, true on any machine under any load. Timing ones are PROVEN only when
-- prove's stability gate passes: on a machine with fewer than 8 cores the TP4 and TP8 runs
-- have more rank threads than cores (oversubscribed); the claims about those configurations
-- as they ran accept it and say so, prove prints the condition.

local config = require "config"

local exp = tb.experiment{
    name = "tp_scaling", version = 2, seed = 1234,
    question = "How does throughput change from TP1 to TP8 at a fixed global batch, and what does each rank hold, compute and all-reduce?",
}
local iters, repeats = tb.param("iters", 6), tb.param("repeats", 2)
local results = {}
for _, point in ipairs(tb.sweep{ tensor_model_parallel_size = { 1, 2, 4, 8 } }) do
    point.world_size = point.tensor_model_parallel_size
    point.num_layers, point.hidden_size, point.num_attention_heads = 2, 256, 8
    point.seq_length, point.vocab_size = 128, 256
    point.micro_batch_size, point.global_batch_size = 4, 8
    point.train_iters, point.repeat_, point.seed = iters, repeats, 7
    results[#results + 1] = exp:run(point)
end
local tp1, tp2, tp8 = results[1], results[2], results[4]

if tp1.stats then  -- not in a dry run
    print(string.format("\n  %4s %12s %12s", "tp", "tok/s", "step ms"))
    for _, r in ipairs(results) do
        print(string.format("  %4d %12.0f %12.1f", r.config.tensor_model_parallel_size, r.stats.tokens_per_s.median,
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

-- timing: gated by prove on the measurement conditions
exp:claim{ id = "tp1_tokens_per_s", parser = "tokens_per_s", runs = tp1, text = "TP1 throughput (tok/s)" }
exp:claim{ id = "tp2_over_tp1", parser = "ratio", runs = { tp1, tp2 },
           args = { numerator = part("tokens_per_s", nil, tp2), denominator = part("tokens_per_s", nil, tp1) },
           text = "TP2 throughput as a fraction of TP1's" }
exp:claim{ id = "tp8_tokens_per_s", parser = "tokens_per_s", runs = tp8, accept_oversubscribed = true,
           text = "TP8 throughput (tok/s) as it ran here: with fewer than 8 cores its 8 rank threads share them" }
exp:claim{ id = "tp8_over_tp1", parser = "ratio", runs = { tp1, tp8 }, accept_oversubscribed = true,
           args = { numerator = part("tokens_per_s", nil, tp8), denominator = part("tokens_per_s", nil, tp1) },
           text = "TP8 throughput as a fraction of TP1's, as it ran here: with fewer than 8 cores TP8's ranks share "
                  .. "them, so the ratio holds the cost of time-sharing as well as of the all-reduces" }
