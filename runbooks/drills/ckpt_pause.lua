-- drills/ckpt_pause.lua — "the checkpoint pause went from 30 s to 5 minutes: where?" (the
-- distributed checkpoint, engine/checkpoint/dist_checkpoint.h). Four runs of one model on
-- 2 data-parallel ranks with the distributed optimizer (2 rank threads: a 2-core machine is
-- not oversubscribed), each saving every 2 steps into its own record:
--   model only (--no-save-optim) against model + optimizer: what a save has to write;
--   sync against async (--async-save): what training waits for, against the whole save
--     (the async run is one rank of one thread: its background writer needs a core of its
--     own, and conditions.json counts it, so on 2 cores two ranks and their two writers
--     would be an oversubscribed measurement that prove refuses);
--   a slow-writer drill (--debug-slow-write 1:400): the last rank at the barrier, by how
--   long, and the phase that made it late — every rank waiting at the barrier is one
--   rank's late write, not a slow barrier.
--
--   build/bin/tracebook run runbooks/drills/ckpt_pause.lua [--set repeats=3 --set window=1]
--       [--set iters=16 --set save_interval=8]
--   build/bin/tracebook ckpt artifacts/ckpt_pause/v3/<run>/run      (the phases per rank)
--
-- The byte counts are exact (checkpoint.json's materialize and write phases, summed over
-- ranks). The rest are times (and who arrived last, an order in time), wall clock: every
-- run is at most 2 threads on 2 cores (one per rank, or one rank and its writer), sized by a
-- calibration run to `repeats` processes of at least 1 s of steps (runbooks/lib/timing.lua),
-- the four configs' processes in rounds, a save every 8 steps; PROVEN when the median step's
-- 95% interval is within +-15% (the host's memory system drifts, scripts/bench-host-drift.sh)
-- and the host was quiet (the gate judges the run's step timing; a save's figures are read
-- from the last save, the async one from the first).

local config = require "config"
local timing = require "timing"

local exp = tb.experiment{
    name = "ckpt_pause", version = 3, seed = 1234,
    question = "What does a checkpoint save write, what does training wait for, and which rank makes the others wait?",
}
local base = { num_layers = 4, hidden_size = 256, num_attention_heads = 4, seq_length = 64, vocab_size = 256,
               micro_batch_size = 2, global_batch_size = 8, train_iters = tb.param("iters", 16), seed = 7,
               world_size = 2, num_threads = 1, use_distributed_optimizer = true,
               save = "{run_dir}/checkpoints", save_interval = tb.param("save_interval", 8) }
local repeats, tolerance, window = tb.param("repeats", 3), 0.15, tb.param("window", 1.0)
local function sized(extra)
    return (timing.calibrated(exp, config.with(base, extra), { repetitions = repeats, min_window_s = window }))
end
local runs = timing.interleaved(exp, { sized{}, sized{ save_optim = false },
                                       sized{ async_save = true, world_size = 1 },
                                       sized{ debug_slow_write = "1:400" } })
local full, model_only, async, slow = runs[1], runs[2], runs[3], runs[4]
local part = config.part

-- exact: what a save writes
exp:claim{ id = "state_bytes_per_save", parser = "checkpoint_figure", runs = full,
           args = { figure = "materialized_bytes" },
           text = "bytes of model and optimizer state one save writes (all ranks, one replica of each piece)" }
exp:claim{ id = "file_bytes_per_save", parser = "checkpoint_figure", runs = full, args = { figure = "written_bytes" },
           text = "bytes of the shard files of one save (all ranks; the state plus safetensors headers)" }
exp:claim{ id = "model_only_fraction", parser = "ratio", runs = { model_only, full },
           args = { numerator = part("checkpoint_figure", { figure = "materialized_bytes" }, model_only),
                    denominator = part("checkpoint_figure", { figure = "materialized_bytes" }, full) },
           text = "a model-only save's state over a model + optimizer save's (Adam keeps two fp32 moments per "
                  .. "parameter: 1/3)" }

-- timing: gated on the measurement conditions
exp:claim{ id = "slow_writer_is_last", parser = "checkpoint_figure", runs = slow, args = { figure = "last_arriver" },
           timing_tolerance = tolerance,
           text = "the rank last at the barrier under the slow-writer drill (rank 1 writes 400 ms late)" }
exp:claim{ id = "slow_writer_wait_ms", parser = "checkpoint_figure", runs = slow, args = { figure = "waited_for_ms" },
           timing_tolerance = tolerance,
           text = "how long after the first rank the last one reached the barrier (ms)" }
exp:claim{ id = "sync_stall_fraction", parser = "checkpoint_figure", runs = full, args = { figure = "stall_fraction" },
           timing_tolerance = tolerance,
           text = "of a sync save's time, the share training waited (all of it)" }
exp:claim{ id = "async_stall_fraction", parser = "checkpoint_figure", runs = async,
           timing_tolerance = tolerance,
           args = { figure = "stall_fraction", save = 1 },
           text = "of the first async save's time (until it was committed at the next save), the share training "
                  .. "waited: the copy, and the barrier and commit at the next save" }
