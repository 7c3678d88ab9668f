-- timing.lua — sizing a timing measurement for the host it runs on (require "timing"), as
-- pyperf calibrates a benchmark before it measures: a short calibration run of the same
-- config times its steps, and the measured config trains enough steps that each repetition
-- times at least `min_window_s` of steps after the warm-up (the sampling rule prove applies,
-- experiments/prove/stability.h: 3 repetitions, 5 steps and 1 s each unless the claim says more).
local config = require "config"

local M = {}

M.defaults = { min_window_s = 1.0, min_steps = 5, repetitions = 3, warmup_steps = 1, margin = 2.0 }

local function option(opts, key)
    local v = opts and opts[key]
    if v == nil then return M.defaults[key] end
    return v
end

-- `cfg` (an exp:run config) measured for timing: train_iters raised so that a repetition
-- times at least min_window_s (with a margin of 2: a shared VM's speed swings between phases,
-- the AMD EPYC one's quickstart step between ~65 and ~118 ms (its memory system, shared with
-- other tenants), so a calibration in a slow phase asks half the steps a fast phase needs;
-- with 1.5, 2 of 5 quickstart rounds there timed 0.99 s) and min_steps steps after
-- warmup_steps, never lowered (exact claims may read a step of the config's), repeat_ set
-- to `repetitions`, and rerun_contended_ to `rerun_contended` (default: a third of the
-- repetitions, rounded up; `--set rerun_contended=K` for all): a repetition the host's contention disturbed (other processes or
-- the hypervisor's steal beyond prove's thresholds, experiments/prove/stability.h) is measured
-- again, the disturbed record kept and named by the new one; the learning-rate schedule is pinned to the config's train_iters
-- (lr_decay_iters), so that the steps the config trains give the same losses. The
-- calibration run is an ordinary recorded run of the experiment
-- (warmup_steps + 5 steps), so the choice has its evidence; the chosen train_iters is in every
-- measured run's argv, so a replay trains the same steps. With opts.replayed the window is
-- of replayed steps (parsers.h "replayed": each rank on a core of its own), shorter than the
-- wall clock's when the ranks outnumber the cores. Returns the config and the calibration's
-- fastest step time in ms (nil in a dry run, where nothing is timed).
function M.calibrated(exp, cfg, opts)
    local warmup, min_steps = option(opts, "warmup_steps"), option(opts, "min_steps")
    local window, margin = option(opts, "min_window_s"), option(opts, "margin")
    local probe = exp:run(config.with(cfg, { train_iters = warmup + 5, repeat_ = 1 }))
    local stats = probe.stats and probe.stats[opts and opts.replayed and "replayed_step_ms" or "step_ms"]
    if opts and opts.replayed and probe.stats and (stats.n or 0) == 0 then
        error("timing.calibrated: the calibration run " .. probe.runs[1].run_id .. " cannot be replayed (tracebook "
              .. "prove says why); size it by the wall clock instead (opts.replayed = false)")
    end
    local reps = option(opts, "repetitions")
    -- `--set rerun_contended=K` overrides it for every measurement of the runbook (tests set 0:
    -- under a parallel test suite every run is contended, and prove refuses it either way)
    local reruns = opts and opts.rerun_contended
    if reruns == nil then reruns = (reps + 2) // 3 end
    reruns = tb.param("rerun_contended", reruns)
    local measured = { repeat_ = reps, rerun_contended_ = reruns }
    -- the calibration's fastest step: the steps right after the warm-up run slower than later
    -- ones, and the host's speed drifts (one phase of a shared VM runs 20% slower than the
    -- next), so its median would ask too few steps; a replayed step is the replayed median
    -- scaled by the same fastest / median of the probe's wall-clock steps
    local fastest = nil
    if stats and stats.median and stats.median > 0 then
        local times = {}
        for _, s in ipairs(probe.runs[1].steps or {}) do
            if s.step > warmup and s.step_ms and s.step_ms > 0 then times[#times + 1] = s.step_ms end
        end
        table.sort(times)
        local n = #times
        local median = n > 0 and (n % 2 == 1 and times[(n + 1) // 2] or (times[n // 2] + times[n // 2 + 1]) / 2) or nil
        fastest = stats.median * ((n > 0 and median > 0) and times[1] / median or 1)
    end
    if fastest then
        local steps = math.max(min_steps, math.ceil(margin * window * 1000 / fastest))
        measured.train_iters = math.max(cfg.train_iters or 0, warmup + steps)
        -- the schedule stays the config's: lr_decay_iters defaults to train_iters, so without
        -- it the longer run would take other learning rates at the config's own steps
        if cfg.train_iters and not cfg.lr_decay_iters and measured.train_iters > cfg.train_iters then
            measured.lr_decay_iters = cfg.train_iters
        end
        print(string.format("  timing: calibration's fastest %sstep %.1f ms -> train_iters %d (%d timed steps, >= %.2g s "
                            .. "each)", opts and opts.replayed and "replayed " or "", fastest, measured.train_iters,
                            measured.train_iters - warmup, window))
    end
    return config.with(cfg, measured), fastest
end

-- The configs' repetitions run alternately, pair by pair: repetition 1 of each config, then
-- repetition 2 of each, ... (exp:run's repetition_; a config's rerun_contended_ is its budget of
-- re-measurements over all its repetitions), so that a ratio of their timings is judged
-- over the pairs (experiments/prove/stability.h): what the host's speed does over the minutes the
-- runbook takes is common to a pair and cancels in its ratio. cfgs: configs as exp:run takes
-- them (timing.calibrated's); returns one result per config, each {runs = every repetition's
-- run, stats = {tokens_per_s, step_ms, replayed_step_ms = {min, median, max, n}} over the
-- repetitions, config}.
function M.interleaved(exp, cfgs, opts)
    local reps = 0
    for _, c in ipairs(cfgs) do reps = math.max(reps, c.repeat_ or option(opts, "repetitions")) end
    local out, values = {}, {}
    local reruns = {}
    for i = 1, #cfgs do
        out[i], values[i] = { runs = {} }, { tokens_per_s = {}, step_ms = {}, replayed_step_ms = {} }
        reruns[i] = cfgs[i].rerun_contended_ or 0
    end
    for rep = 1, reps do
        for i, c in ipairs(cfgs) do
            local r = exp:run(config.with(c, { repeat_ = reps, repetition_ = rep, rerun_contended_ = reruns[i] }))
            out[i].config = r.config
            for _, run in ipairs(r.runs) do
                out[i].runs[#out[i].runs + 1] = run
                reruns[i] = reruns[i] - #(run.supersedes or {})
            end
            for key, list in pairs(values[i]) do
                local st = r.stats and r.stats[key]
                if st and st.median then list[#list + 1] = st.median end
            end
        end
    end
    for i = 1, #cfgs do
        if next(values[i].step_ms) then  -- not in a dry run
            out[i].stats = {}
            for key, list in pairs(values[i]) do
                table.sort(list)
                local n, median = #list, nil
                if n % 2 == 1 then median = list[(n + 1) // 2]
                elseif n > 0 then median = (list[n // 2] + list[n // 2 + 1]) / 2 end
                out[i].stats[key] = { min = list[1], median = median, max = list[n], n = n }
            end
        end
    end
    return out
end

return M
