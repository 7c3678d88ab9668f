-- config.lua — helpers the runbooks share (require "config").
local M = {}

-- A copy of `base` with the keys of `extra` set over it: one point of an experiment.
function M.with(base, extra)
    local c = {}
    for k, v in pairs(base) do c[k] = v end
    for k, v in pairs(extra or {}) do c[k] = v end
    return c
end

-- The largest value of mem_peak_bytes[category] over a run's steps (rank 0).
function M.peak(run, category)
    local p = 0
    for _, s in ipairs(run.steps) do p = math.max(p, s.mem_peak_bytes[category]) end
    return p
end

-- The run ids of a result of exp:run, every repetition (none in a dry run).
function M.ids(result)
    local ids = {}
    for i, run in ipairs(result.runs) do ids[i] = run.run_id end
    return ids
end

-- The first repetition's run id, nil in a dry run (nothing ran): `records = { first_id(r) }`
-- is then empty, as M.ids's list is.
function M.first_id(result)
    return result.runs[1] and result.runs[1].run_id
end

-- One side of a comparison claim (ratio, saved_fraction, relative_difference): `parser` with
-- `args` over every repetition of `result`, derived from its records at prove time.
function M.part(parser, args, result)
    return { parser = parser, args = args, records = M.ids(result) }
end

return M
