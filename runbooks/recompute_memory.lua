-- recompute_memory.lua — "recompute saved N% of activation memory at seq 4096", at CPU
-- scale: a long sequence, activation peaks with no recompute, selective (attention core) and
-- full (every layer, uniform).
--
--   build/bin/tracebook run runbooks/recompute_memory.lua [--set seq=1024]

local config = require "config"

local exp = tb.experiment{
    name = "recompute_memory", version = 1, seed = 1234,
    question = "How much activation memory do selective and full recompute save at a long sequence?",
}
local seq = tb.param("seq", 1024)
-- the local core (DotProductAttention): selective recompute recomputes its T x T probabilities
-- instead of saving them, Megatron's selective recompute; the blocked core that auto picks saves
-- none to begin with
local base = { num_layers = 4, hidden_size = 128, num_attention_heads = 4, seq_length = seq, vocab_size = 256,
               micro_batch_size = 1, global_batch_size = 1, train_iters = 3, seed = 7, attention_backend = "local" }
local function with(extra) return config.with(base, extra) end
local none = exp:run(with{})
local selective = exp:run(with{ recompute_granularity = "selective" })
local full = exp:run(with{ recompute_granularity = "full", recompute_method = "uniform", recompute_num_layers = 1 })

local function peak(r) return config.peak(r.runs[1], "activations") end
if none.stats then  -- not in a dry run
    print(string.format("\n  seq %d: activation peak none %.1f MiB, selective %.1f MiB, full %.1f MiB\n", seq,
                        peak(none) / 1048576, peak(selective) / 1048576, peak(full) / 1048576))
end

local function saving(id, treatment, text)
    exp:claim{ id = id, parser = "saved_fraction", runs = { none, treatment }, text = text,
               args = { treatment = { parser = "peak_memory_bytes", args = { category = "activations" },
                                      records = { config.first_id(treatment) } },
                        baseline = { parser = "peak_memory_bytes", args = { category = "activations" },
                                     records = { config.first_id(none) } } } }
end
saving("full_recompute_saving", full, "full recompute saves this fraction of activation memory")
saving("selective_recompute_saving", selective, "selective recompute saves this fraction of activation memory")
-- both losses are read from the records at prove time (the baseline is not a number of this
-- runbook): a relative difference of 0 is the same double, bit for bit
exp:claim{ id = "loss_unchanged_by_recompute", parser = "relative_difference", runs = { none, full }, at_most = 0,
           args = { a = { parser = "loss_at_step", records = { config.first_id(full) } },
                    b = { parser = "loss_at_step", records = { config.first_id(none) } } },
           text = "full recompute leaves the last step's loss bit for bit" }
