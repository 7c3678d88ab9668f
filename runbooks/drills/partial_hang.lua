-- drills/partial_hang.lua — "only some ranks hang in a collective: which rank is the cause?"
-- (M133). In each layout one rank is stopped before its next collective at step 2
-- (--inject-stall RANK:2); its peers wait, their watchdogs fire after --collective-timeout
-- (1 s here) and the run ends with the engine's hang exit status (expect_failure = "hang":
-- the run must end so, its reports kept in the record). Each rank writes hang.rank-NNNNN.json
-- (its groups, pending call, last completed call, flight-recorder tail); the claims merge
-- them at prove time, as `tracebook hang` does, matching each group's pending collectives
-- across ranks by sequence number, and name the root cause: the rank that never entered the
-- collective its peers wait in — not whichever victim's watchdog fired first.
--
--   build/bin/tracebook run runbooks/drills/partial_hang.lua
--   build/bin/tracebook hang artifacts/partial_hang/v1/<run>       (the report, root cause first)
--
-- Layouts of 4 ranks run 4 rank threads on a 2-core machine: oversubscribed, which the exact
-- verdicts do not mind. Every claim is exact (ranks and counts, matched by sequence numbers).

local config = require "config"

local exp = tb.experiment{
    name = "partial_hang", version = 1, seed = 1234,
    question = "When some ranks hang in a collective, does the hang report blame the rank that never entered it, "
               .. "in every layout?",
}
local base = { num_layers = 4, hidden_size = 32, num_attention_heads = 2, vocab_size = 256, seq_length = 16,
               micro_batch_size = 1, train_iters = 3, seed = 7, collective_timeout = 1,
               expect_failure = "hang" }
-- name, layout, the stalled rank
local layouts = {
    { "tp2", { tensor_model_parallel_size = 2, world_size = 2 }, 1 },
    { "dp2", { world_size = 2 }, 1 },
    { "pp2", { pipeline_model_parallel_size = 2, world_size = 2, global_batch_size = 2 }, 1 },
    { "pp4", { pipeline_model_parallel_size = 4, world_size = 4, global_batch_size = 4 }, 2 },
    { "tp2_pp2", { tensor_model_parallel_size = 2, pipeline_model_parallel_size = 2, world_size = 4,
                   global_batch_size = 2 }, 1 },
    { "tp2_dp2", { tensor_model_parallel_size = 2, world_size = 4 }, 2 },
}
for _, l in ipairs(layouts) do
    local name, layout, stalled = l[1], l[2], l[3]
    local point = config.with(base, layout)
    point.inject_stall = stalled .. ":2"
    local r = exp:run(point)
    exp:claim{ id = name .. "_blamed_rank", parser = "hang_figure", runs = r, args = { figure = "blamed_rank" },
               value = stalled,
               text = name .. ": the rank the hang report's root cause blames (rank " .. stalled .. " was stalled)" }
    exp:claim{ id = name .. "_blamed_ranks", parser = "hang_figure", runs = r, args = { figure = "blamed_ranks" },
               value = 1, text = name .. ": ranks the root cause names: only the stalled one" }
end
