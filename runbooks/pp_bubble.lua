-- pp_bubble.lua — "PP8 with 16 microbatches ran at S× with a B× stage imbalance", at CPU
-- scale: 16 layers, the same global batch on 1 and on 8 pipeline stages (every stage a
-- thread; on a 2-core machine the stages share the cores).
--
--   build/bin/tracebook run runbooks/pp_bubble.lua

local config = require "config"

local exp = tb.experiment{
    name = "pp_bubble", version = 1, seed = 1234,
    question = "What speed-up and stage imbalance does PP8 with 16 microbatches give?",
}
local base = { num_layers = 16, hidden_size = 128, num_attention_heads = 4, seq_length = 128, vocab_size = 256,
               micro_batch_size = 1, global_batch_size = 16, train_iters = tb.param("iters", 4), seed = 7 }
local function with(extra) return config.with(base, extra) end
local pp1 = exp:run(with{})
local pp8 = exp:run(with{ pipeline_model_parallel_size = 8, world_size = 8 })

exp:claim{ id = "pp8_speedup", parser = "ratio", runs = { pp1, pp8 },
           args = { numerator = { parser = "tokens_per_s", records = { pp8.runs[1].run_id } },
                    denominator = { parser = "tokens_per_s", records = { pp1.runs[1].run_id } } },
           text = "PP8/M16 throughput over PP1's (speed-up)" }
exp:claim{ id = "pp8_stage_imbalance", parser = "stage_imbalance", runs = pp8,
           text = "slowest / fastest stage compute time at PP8/M16" }
exp:claim{ id = "pp8_bubble", parser = "pipeline_bubble", runs = pp8, text = "measured bubble fraction at PP8/M16" }
exp:claim{ id = "pp8_theoretical_bubble", parser = "pipeline_bubble", runs = pp8, args = { kind = "theoretical" },
           text = "theoretical bubble (p-1)/(m+p-1) at PP8/M16" }
