-- tp_scaling.lua — "TP1→8 cut throughput from X to Y tok/s", at CPU scale: the same model
-- and global batch with tensor parallelism 1, 2, 4 and 8 (every rank a thread of one
-- process, so on a small machine the ranks share its cores and the all-reduces are pure cost).
--
--   build/bin/tracebook run runbooks/tp_scaling.lua [--set iters=6 --set repeats=2]

local exp = tb.experiment{
    name = "tp_scaling", version = 1, seed = 1234,
    question = "How does throughput change from TP1 to TP8 at a fixed global batch?",
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

print(string.format("\n  %4s %12s %12s", "tp", "tok/s", "step ms"))
for i, r in ipairs(results) do
    print(string.format("  %4d %12.0f %12.1f", r.config.tensor_model_parallel_size, r.stats.tokens_per_s.median,
                        r.stats.step_ms.median))
end
print()

exp:claim{ id = "tp1_tokens_per_s", parser = "tokens_per_s", runs = results[1], text = "TP1 throughput (tok/s)" }
exp:claim{ id = "tp8_tokens_per_s", parser = "tokens_per_s", runs = results[4], text = "TP8 throughput (tok/s)" }
exp:claim{ id = "tp8_over_tp1", parser = "ratio", runs = { results[1], results[4] },
           args = { numerator = { parser = "tokens_per_s", records = { results[4].runs[1].run_id, results[4].runs[#results[4].runs].run_id } },
                    denominator = { parser = "tokens_per_s", records = { results[1].runs[1].run_id, results[1].runs[#results[1].runs].run_id } } },
           text = "TP8 throughput as a fraction of TP1's" }
