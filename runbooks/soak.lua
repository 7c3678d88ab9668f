-- soak.lua — "does a long run survive its restarts, and does its memory stay flat?" (M126,
-- M129: a multi-hour soak, the high-water regression after a fix). One model trained twice
-- on 2 data-parallel ranks with the distributed optimizer (2 rank threads of one thread each:
-- a 2-core machine is not oversubscribed), the same config, seed and global batch:
--   the uninterrupted run: train_iters steps in one process, a checkpoint every
--     save_interval steps;
--   the interrupted run: the same steps in `resumes` + 1 processes, each stopped at a stated
--     step and the next loading the newest checkpoint from the previous process's record
--     (--load) and going on. `stop=kill` (the default): the recorder kills the process
--     (SIGKILL, exp:run's expect_failure = "killed") once it has logged the step — a crash at a
--     moment it does not choose, perhaps inside a save, so the next process trains again the
--     steps after the newest committed checkpoint; `stop=exit`: --exit-interval, where the
--     process saves and exits (Megatron's planned exit).
-- The size: `minutes` of the uninterrupted run at the step time a calibration run measured on
-- this host (the interrupted run repeats it: the runbook takes about twice `minutes`), or
-- `iters` steps when set. The stops are at i x train_iters / (resumes + 1), i = 1..resumes.
--
--   build/bin/tracebook run runbooks/soak.lua [--set minutes=2] [--set resumes=2]
--       [--set stop=kill|exit] [--set iters=N] [--set save_interval=N]
--   build/bin/tracebook prove --all
--
-- The claims are exact, read from every rank's metrics of every process:
--   every loss of every process of the interrupted run is the uninterrupted run's at that
--     step, bit for bit (parser resumed_loss_mismatches: the processes must chain, each
--     loading the checkpoint directory the one before it saved into, with configs that
--     differ only in where they save, load and exit);
--   the allocator's high-water, per process, rank and category, does not rise after the
--     warm-up (parser memory_growth_bytes): the warm-up is the first save_interval + 1 logged
--     steps of each process, which hold its first step (the activations, the optimizer's
--     state) and its first save.
-- Timed, gated as every timing claim is: the uninterrupted run's throughput p5, p50 and p95
-- over its steps (parser tokens_per_s with args.quantile; the gate judges that quantile's
-- interval) and the longest pause of its saves (checkpoint_figure max_stall_ms with args.of
-- "max": every save's pause is in the claim's evidence). `tracebook report --experiment soak` plots each
-- process's throughput and memory high-water per step.
--
-- v2: the pause claim is the longest of every save's (v1 read the last save's only).

local config = require "config"

local exp = tb.experiment{
    name = "soak", version = 2, seed = 1234,
    question = "Over a long run stopped and resumed from its checkpoints, does training give the uninterrupted "
               .. "run's losses bit for bit, and does each process's memory high-water stay flat after its warm-up?",
}
local model = { num_layers = 4, hidden_size = 128, num_attention_heads = 4, seq_length = 128, vocab_size = 256,
                micro_batch_size = 4, global_batch_size = 8, seed = 7, world_size = 2, num_threads = 1,
                use_distributed_optimizer = true }
local minutes, resumes = tb.param("minutes", 2), math.tointeger(tb.param("resumes", 2))
tb.assert(resumes and resumes >= 1, "resumes must be an integer >= 1")
local stop = tb.param("stop", "kill")
tb.assert(stop == "kill" or stop == "exit", "stop must be 'kill' or 'exit' (got " .. tostring(stop) .. ")")

local iters = math.tointeger(tb.param("iters", 0))
tb.assert(iters, "iters must be an integer")
if iters == 0 then
    -- the calibration: 6 steps timed, the median after the first sizes the run
    local probe = exp:run(config.with(model, { train_iters = 6 }))
    local ms = probe.stats and probe.stats.step_ms and probe.stats.step_ms.median
    iters = ms and math.max(4 * (resumes + 1), math.ceil(minutes * 60000 / ms)) or 4 * (resumes + 1)
    if ms then print(string.format("  soak: calibration's median step %.1f ms -> train_iters %d (%.3g minutes)", ms,
                                   iters, minutes)) end
end
tb.assert(iters >= resumes + 2, "iters must leave a step between the stops (iters " .. iters .. ", resumes " .. resumes .. ")")
local save_interval = math.tointeger(tb.param("save_interval", math.max(1, iters // 8)))
tb.assert(save_interval and save_interval >= 1 and save_interval <= iters // (resumes + 1),
          "save_interval must be an integer from 1 to iters / (resumes + 1): every process saves before its stop")
local timeline = config.with(model, { train_iters = iters, save = "{run_dir}/checkpoints", save_interval = save_interval })

local whole = exp:run(timeline)
local segments, previous = {}, nil
for i = 1, resumes + 1 do
    local seg = config.with(timeline, {})
    local at = i * iters // (resumes + 1)
    if i <= resumes and stop == "exit" then seg.exit_interval = at end
    if i <= resumes and stop == "kill" then seg.expect_failure, seg.kill_after_step = "killed", at end
    if previous and #previous.runs > 0 and previous.runs[1].record then
        seg.load = previous.runs[1].record .. "/run/checkpoints"
    end
    previous = exp:run(seg)
    segments[i] = previous
end

local all = { whole }
for _, s in ipairs(segments) do all[#all + 1] = s end
exp:claim{ id = "resumed_losses_bitwise", parser = "resumed_loss_mismatches", runs = all, value = 0,
           text = string.format("steps whose loss, on any rank of the %d processes of the run %s and resumed "
                                .. "%d times, differs in any bit from the uninterrupted run's (%d steps)", resumes + 1,
                                stop == "kill" and "killed (SIGKILL)" or "stopped (--exit-interval)", resumes, iters) }
exp:claim{ id = "memory_growth_after_warmup_bytes", parser = "memory_growth_bytes", runs = all,
           args = { warmup_steps = save_interval + 1 }, at_most = 0,
           text = string.format("how far any process's allocator high-water, on any rank and in any category, rose "
                                .. "after its first %d logged steps (its first step and first save)", save_interval + 1) }

-- timing, gated (docs/RUNBOOKS.md, "What PROVEN means"): the uninterrupted run's throughput over its
-- steps — the slow tail (p5), the median and the fast tail (p95) — and the longest pause of
-- its saves. One process, sampled over its whole run (min_repetitions 1: the soak is this run, not
-- a benchmark repeated), each figure's 95% interval within +-15% of it, refused when other
-- processes or the hypervisor took the cores at any time of it.
for _, q in ipairs{ { "p5", 0.05 }, { "p50", 0.5 }, { "p95", 0.95 } } do
    exp:claim{ id = "throughput_" .. q[1] .. "_tokens_per_s", parser = "tokens_per_s", runs = whole,
               args = { quantile = q[2] }, min_repetitions = 1, timing_tolerance = 0.15,
               text = string.format("the %s of the uninterrupted run's throughput over its %d steps (tokens/s; one "
                                    .. "process: the slowest rank's step each step)", q[1], iters - 1) }
end
exp:claim{ id = "save_pause_ms", parser = "checkpoint_figure", runs = whole,
           args = { figure = "max_stall_ms", of = "max" }, min_repetitions = 1, timing_tolerance = 0.15,
           text = "the longest any save of the uninterrupted run made training wait (ms, the worst rank; every "
                  .. "save's pause in the evidence)" }
