-- drills/oom.lua — "an OOM at seq 128: what ran out, where, and which change makes it fit?"
-- (M129). One model on 2 tensor-parallel rank threads (a 2-core machine is not
-- oversubscribed), the global batch fixed at 8 samples, one variable changed at a time from
-- the baseline (seq 64, micro batch 2, no recompute):
--   uncapped, the peak of each memory category per rank: what each change costs;
--   under a per-rank --memory-cap between the baseline's peak and the changed runs' (3.5 MB
--   by default), the runs that go over it end in an OOM (expect_failure = "oom": the run must
--   end with the engine's OOM exit status, its reports kept in the record) and their per-rank
--   oom.rank-NNNNN.json name the cause — the rank, the category and the phase of the request
--   that crossed the cap, its size and what was allocated — while full recompute at seq 128
--   fits under the same cap.
--
--   build/bin/tracebook run runbooks/drills/oom.lua [--set cap=3500000]
--   cat artifacts/oom/v1/<run>/run/oom.json          (the merged report of every rank)
--
-- Every claim is exact (bytes and counts: nothing here is a time), so each is proven on any
-- machine.

local config = require "config"

local exp = tb.experiment{
    name = "oom", version = 1, seed = 1234,
    question = "Which change to a fixed global batch runs a rank out of memory, in which category and phase, "
               .. "and which change makes it fit again?",
}
local cap = tb.param("cap", 3500000)
local base = { num_layers = 2, hidden_size = 64, num_attention_heads = 2, vocab_size = 256, seq_length = 64,
               micro_batch_size = 2, global_batch_size = 8, train_iters = 2, seed = 7,
               tensor_model_parallel_size = 2, world_size = 2,
               -- the local core: it saves attention's T x T probabilities, the growth this drill is about
               -- (auto, the default, picks the blocked core, whose memory is linear in T)
               attention_backend = "local" }
local function with(extra) return config.with(base, extra) end
local recompute = { seq_length = 128, recompute_granularity = "full", recompute_method = "uniform",
                    recompute_num_layers = 1 }
local part = config.part

-- uncapped: the peak per category of each change
local baseline = exp:run(with{})
local seq128 = exp:run(with{ seq_length = 128 })
local micro4 = exp:run(with{ micro_batch_size = 4 })
local seq128_full = exp:run(with(recompute))
for _, c in ipairs{ "params", "grads", "optimizer", "activations", "workspace", "comm" } do
    exp:claim{ id = "baseline_peak_" .. c, parser = "peak_memory_bytes", runs = baseline, args = { category = c },
               text = "the baseline's peak " .. c .. " bytes per rank (seq 64, micro batch 2, tp 2)" }
end
exp:claim{ id = "baseline_peak_in_use", parser = "peak_memory_bytes", runs = baseline,
           args = { category = "total_peak" }, at_most = cap,
           text = "the baseline's most bytes in use at once on a rank: under the cap" }
exp:claim{ id = "seq128_activation_growth", parser = "ratio", runs = { seq128, baseline },
           args = { numerator = part("peak_memory_bytes", { category = "activations" }, seq128),
                    denominator = part("peak_memory_bytes", { category = "activations" }, baseline) },
           text = "peak activation bytes at seq 128 over seq 64 (more than 2x: attention's T x T probabilities)" }
exp:claim{ id = "micro4_activation_growth", parser = "ratio", runs = { micro4, baseline },
           args = { numerator = part("peak_memory_bytes", { category = "activations" }, micro4),
                    denominator = part("peak_memory_bytes", { category = "activations" }, baseline) },
           text = "peak activation bytes at micro batch 4 over 2 (the same global batch in half the microbatches)" }
exp:claim{ id = "recompute_saves_activations", parser = "saved_fraction", runs = { seq128_full, seq128 },
           args = { treatment = part("peak_memory_bytes", { category = "activations" }, seq128_full),
                    baseline = part("peak_memory_bytes", { category = "activations" }, seq128) },
           text = "of seq 128's peak activation bytes, the share full recompute saves" }

-- under the cap: which runs go out of memory, and why
local capped_seq128 = exp:run(with{ seq_length = 128, memory_cap = cap, expect_failure = "oom" })
local capped_micro4 = exp:run(with{ micro_batch_size = 4, memory_cap = cap, expect_failure = "oom" })
local capped_full = exp:run(with(config.with(recompute, { memory_cap = cap })))
exp:claim{ id = "seq128_oom_ranks", parser = "oom_figure", runs = capped_seq128, args = { figure = "ranks" },
           value = 2, text = "ranks out of memory at seq 128 under the cap: both tensor-parallel ranks, one report each" }
exp:claim{ id = "seq128_oom_in_activations", parser = "oom_figure", runs = capped_seq128,
           args = { figure = "ranks", requested_category = "activations", ["in"] = "forward" }, value = 2,
           text = "of them, the ranks whose request over the cap was activations in the forward: the cause" }
exp:claim{ id = "seq128_oom_requested_bytes", parser = "oom_figure", runs = capped_seq128,
           args = { figure = "requested_bytes" }, text = "the bytes rank 0 asked for when it crossed the cap" }
exp:claim{ id = "seq128_oom_allocated_bytes", parser = "oom_figure", runs = capped_seq128,
           args = { figure = "in_use_bytes" }, text = "the bytes rank 0 had allocated when it asked" }
exp:claim{ id = "seq128_oom_activations_held", parser = "oom_figure", runs = capped_seq128,
           args = { figure = "current_bytes", category = "activations" },
           text = "of them, activations (the saved activations of the layers before)" }
exp:claim{ id = "micro4_oom_in_activations", parser = "oom_figure", runs = capped_micro4,
           args = { figure = "ranks", requested_category = "activations", ["in"] = "forward" }, value = 2,
           text = "micro batch 4 under the cap: both ranks out of memory asking for activations in the forward" }
exp:claim{ id = "recompute_fits_under_cap", parser = "oom_figure", runs = capped_full, args = { figure = "ranks" },
           value = 0, text = "seq 128 with full recompute under the same cap: no rank out of memory" }
exp:claim{ id = "recompute_peak_in_use", parser = "peak_memory_bytes", runs = capped_full,
           args = { category = "total_peak" }, at_most = cap,
           text = "seq 128 with full recompute: its most bytes in use at once on a rank, under the cap" }
