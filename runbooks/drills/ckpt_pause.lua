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
--   build/bin/tracebook run runbooks/drills/ckpt_pause.lua [--set iters=4]
--   build/bin/tracebook ckpt artifacts/ckpt_pause/v1/<run>/run      (the phases per rank)
--
-- The byte counts are exact (checkpoint.json's materialize and write phases, summed over
-- ranks); the times pass prove's stability gate only on a quiet machine.

local config = require "config"

local exp = tb.experiment{
    name = "ckpt_pause", version = 2, seed = 1234,
    question = "What does a checkpoint save write, what does training wait for, and which rank makes the others wait?",
}
local base = { num_layers = 4, hidden_size = 256, num_attention_heads = 4, seq_length = 64, vocab_size = 256,
               micro_batch_size = 2, global_batch_size = 8, train_iters = tb.param("iters", 4), seed = 7,
               world_size = 2, use_distributed_optimizer = true,
               save = "{run_dir}/checkpoints", save_interval = 2 }
local function with(extra) return config.with(base, extra) end
local full = exp:run(with{})
local model_only = exp:run(with{ save_optim = false })
local async = exp:run(with{ async_save = true, world_size = 1, num_threads = 1 })
local slow = exp:run(with{ debug_slow_write = "1:400" })
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
           text = "the rank last at the barrier under the slow-writer drill (rank 1 writes 400 ms late)" }
exp:claim{ id = "slow_writer_wait_ms", parser = "checkpoint_figure", runs = slow, args = { figure = "waited_for_ms" },
           text = "how long after the first rank the last one reached the barrier (ms)" }
exp:claim{ id = "sync_stall_fraction", parser = "checkpoint_figure", runs = full, args = { figure = "stall_fraction" },
           text = "of a sync save's time, the share training waited (all of it)" }
exp:claim{ id = "async_stall_fraction", parser = "checkpoint_figure", runs = async,
           args = { figure = "stall_fraction", save = 1 },
           text = "of the first async save's time (until it was committed at the next save), the share training "
                  .. "waited: the copy, and the barrier and commit at the next save" }
