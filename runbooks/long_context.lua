-- long_context.lua — "which context-parallel size fits 128K?", at CPU scale: the same model
-- at two sequence lengths on 1 and 2 context-parallel ranks exchanging K and V by all-gather,
-- and on 2 and 4 ranks passing them around the ring (cp_comm_type p2p) (the flash attention
-- core; cp ranks hold zig-zag chunks of each sequence, engine/transformer/context_parallel.h).
--
--   build/bin/tracebook run runbooks/long_context.lua [--set seq=1024] [--set repeats=3 --set window=1]
--
-- Exact claims (pipeline.json and every rank's trace, true on any machine): a cp rank's peak
-- activation memory is the single rank's over cp (memory per rank ∝ seq / cp), and doubling
-- the sequence doubles it; the bytes of K and V a cp rank all-gathers per step; the bytes a
-- ring rank sends per step, and how they grow from cp 2 to cp 4 (3·cp − 2 sends of a chunk pair
-- of T/cp tokens per layer and microbatch: (10/4) / (4/2) = 1.25); losses equal to the single
-- rank's. The step time at twice the sequence is a timing claim, wall clock: 2 rank threads
-- of one thread each (a core per rank on a 2-core host), sized by a calibration run to 3
-- processes of at least 1 s of steps (runbooks/lib/timing.lua), PROVEN when the median step's
-- 95% interval is within +-15% (the host's memory system drifts, scripts/bench-host-drift.sh)
-- and the host was quiet. --set window=S sizes it for S seconds, --set repeats=N runs N
-- processes (a quick look: below 1 s or 3 processes the timing is NOT PROVEN, undersampled).

local config = require "config"
local timing = require "timing"

local exp = tb.experiment{
    name = "long_context", version = 3, seed = 1234,
    question = "How do activation memory per rank and CP communication scale with the sequence and the context-parallel size?",
}
local seq = tb.param("seq", 512)
local base = { num_layers = 2, hidden_size = 128, num_attention_heads = 4, vocab_size = 256, micro_batch_size = 1,
               global_batch_size = 2, train_iters = tb.param("iters", 3), seed = 7, attention_backend = "flash" }
local function with(extra) return config.with(base, extra) end
local cp1 = exp:run(with{ seq_length = seq })
local cp2 = exp:run(with{ seq_length = seq, world_size = 2, context_parallel_size = 2 })
local ring2 = exp:run(with{ seq_length = seq, world_size = 2, context_parallel_size = 2, cp_comm_type = "p2p" })
local ring4 = exp:run(with{ seq_length = seq, world_size = 4, context_parallel_size = 4, cp_comm_type = "p2p" })
local cp1_long = exp:run(with{ seq_length = 2 * seq })
local cp2_long = exp:run(timing.calibrated(exp, with{ seq_length = 2 * seq, world_size = 2, context_parallel_size = 2,
                                                     num_threads = 1 },
                                          { min_window_s = tb.param("window", 1.0),
                                            repetitions = tb.param("repeats", 3) }))
local part = config.part
local activations = { figure = "peak_activation_bytes" }

exp:claim{ id = "cp2_activation_share", parser = "ratio", runs = { cp2, cp1 },
           args = { numerator = part("rank_figure", activations, cp2), denominator = part("rank_figure", activations, cp1) },
           text = "a cp 2 rank's peak activation memory over the single rank's at the same sequence (1/2: per rank ∝ seq / cp)" }
exp:claim{ id = "cp2_activation_growth", parser = "ratio", runs = { cp2_long, cp2 },
           args = { numerator = part("rank_figure", activations, cp2_long),
                    denominator = part("rank_figure", activations, cp2) },
           text = "a cp 2 rank's peak activation memory at twice the sequence over once (2: linear, the flash core)" }
exp:claim{ id = "cp2_kv_all_gather_bytes", parser = "comm_bytes", runs = cp2,
           args = { group = "cp", op = "all_gather" },
           text = "bytes of K and V a cp 2 rank passes to the cp group's all-gathers per step (forward and backward)" }
exp:claim{ id = "cp2_loss_is_the_single_ranks", parser = "relative_difference", runs = { cp2, cp1 }, at_most = 1e-6,
           args = { a = part("loss_at_step", nil, cp2), b = part("loss_at_step", nil, cp1) },
           text = "the last step's loss at cp 2 against the single rank's (relative; float reordering only)" }
exp:claim{ id = "ring2_send_bytes", parser = "comm_bytes", runs = ring2, args = { group = "cp", op = "send" },
           text = "bytes a cp 2 ring rank sends to the next cp rank per step: per layer and microbatch 1 K/V "
                  .. "chunk pair forward, 1 backward and 2 of their gradients, each B x seq/2 x 2 x hidden x 4 B" }
local ring_sends = function(run) return part("comm_bytes", { group = "cp", op = "send" }, run) end
exp:claim{ id = "ring4_over_ring2_send_bytes", parser = "ratio", runs = { ring4, ring2 },
           args = { numerator = ring_sends(ring4), denominator = ring_sends(ring2) },
           text = "a cp 4 ring rank's send bytes per step over a cp 2 ring rank's (1.25: 3cp - 2 sends of seq/cp "
                  .. "tokens each, so the bytes per rank hardly grow while each message shrinks as 1/cp)" }
exp:claim{ id = "ring4_activation_share", parser = "ratio", runs = { ring4, cp1 },
           args = { numerator = part("rank_figure", activations, ring4), denominator = part("rank_figure", activations, cp1) },
           text = "a cp 4 ring rank's peak activation memory over the single rank's (1/4: per rank ∝ seq / cp)" }
exp:claim{ id = "ring2_loss_is_the_single_ranks", parser = "relative_difference", runs = { ring2, cp1 }, at_most = 1e-6,
           args = { a = part("loss_at_step", nil, ring2), b = part("loss_at_step", nil, cp1) },
           text = "the last step's loss of the cp 2 ring against the single rank's (relative; float reordering only)" }
exp:claim{ id = "ring4_loss_is_the_single_ranks", parser = "relative_difference", runs = { ring4, cp1 }, at_most = 1e-6,
           args = { a = part("loss_at_step", nil, ring4), b = part("loss_at_step", nil, cp1) },
           text = "the last step's loss of the cp 4 ring against the single rank's (relative; float reordering only)" }
exp:claim{ id = "cp2_step_ms_long", parser = "step_ms", runs = cp2_long, timing_tolerance = 0.15,
           text = "median step time of a cp 2 run at twice the sequence (ms; wall clock, a core per rank)" }
