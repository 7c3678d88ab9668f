-- moe_mesh.lua — "why do fine-grained MoE setups prefer expert-TP = 1?" (M128), answered with
-- the GEMM shapes. One fine-grained MoE (16 small experts of ffn 32, top-4, every layer a MoE
-- layer) on 4 data-parallel ranks, its experts laid out two ways over the same ranks:
--   ETP1 x EP4: each rank holds 4 whole experts;
--   ETP2 x EP2: each rank holds 8 experts, each split in two over the etp group (fc1
--               column-parallel, fc2 row-parallel), the tokens all-gathered over etp before
--               the experts and the outputs reduce-scattered after them.
-- The dense part is the same in both (tp 1, dp 4), and so are the seed, the global batch and
-- the routing's input, so what differs is the mesh.
--
--   build/bin/tracebook run runbooks/moe_mesh.lua [--set iters=4] [--set repeats=5 --set window=1]
--   build/bin/tracebook moe artifacts/moe_mesh/v2/<run>/run     (per-layer load, all-to-alls)
--
-- Exact (counts read from every rank's metrics and traces): the shapes (M, N, K) of a rank's
-- expert GEMMs — M the rows that reach a local expert per microbatch, N and K its shard's —
-- how many expert GEMMs a rank runs, the bytes it sends over ep and over etp per step, and the
-- load imbalance. Timed: each layout's step time and their ratio, replayed from per-op CPU
-- time on one core per rank (the parser "replayed", experiments/prove/schedule_replay.h): 4 rank
-- threads on a 2-core host time-share, so their wall clock measures the sharing, not the
-- mesh. A replayed all-to-all costs what the local backend's copies cost on the rank that
-- entered last; transfer times over a real link are left out. Each layout runs `repeats`
-- processes (one thread per rank), sized by a replayed calibration run to at least 1 s of
-- replayed steps each, the two layouts' processes in rounds (etp1, etp2, etp1, ...), so the
-- ratio is judged over the pairs; PROVEN when the 95% interval is within +-15% (the host's
-- memory system drifts, scripts/bench-host-drift.sh) and the host was quiet. --set window=S
-- sizes the runs for S seconds of replayed steps (below 1 s: NOT PROVEN, undersampled).

local config = require "config"
local timing = require "timing"

local exp = tb.experiment{
    name = "moe_mesh", version = 2, seed = 1234,
    question = "For a fine-grained MoE, what do expert-tensor parallelism 2 x expert parallelism 2 change against "
               .. "ETP 1 x EP 4 on the same ranks: the expert GEMM shapes, the GEMMs per rank, the bytes moved "
               .. "and the step time?",
}
-- the exact claims read step `iters`, the config's last: the timed runs train longer (sized by
-- the calibration, each layout its own length) on the config's learning-rate schedule, so
-- their steps up to `iters` are the config's, and the routing (the counts) is step-dependent
local iters = tb.param("iters", 4)
local base = { num_layers = 2, hidden_size = 128, num_attention_heads = 4, vocab_size = 256, seq_length = 64,
               micro_batch_size = 2, global_batch_size = 16, train_iters = iters, seed = 7,
               world_size = 4, num_experts = 16, moe_router_topk = 4, moe_ffn_hidden_size = 32,
               moe_token_dispatcher_type = "alltoall", num_threads = 1 }
local repeats, tolerance, window = tb.param("repeats", 5), 0.15, tb.param("window", 1.0)
local function sized(extra)
    return (timing.calibrated(exp, config.with(base, extra), { replayed = true, repetitions = repeats,
                                                                min_window_s = window }))
end
local layouts = timing.interleaved(exp, { sized{ expert_model_parallel_size = 4, expert_tensor_parallel_size = 1 },
                                          sized{ expert_model_parallel_size = 2, expert_tensor_parallel_size = 2 } })
local etp1, etp2 = layouts[1], layouts[2]
local part = config.part
local function at(args) return config.with(args, { step = iters }) end
local function replayed_ms(r) return part("replayed", { figure = "step_ms" }, r) end

-- exact: the expert GEMMs of a rank (layer 0; the busiest rank unless a rank is named)
for _, c in ipairs{ { "etp1", etp1 }, { "etp2", etp2 } } do
    local name, r = c[1], c[2]
    exp:claim{ id = "local_experts_" .. name, parser = "moe_figure", runs = r,
               args = at{ figure = "local_experts", rank = 0 },
               text = "expert GEMMs (per linear) rank 0 runs per microbatch, " .. name }
    exp:claim{ id = "gemm_m_" .. name, parser = "moe_figure", runs = r,
               args = at{ figure = "expert_rows_mean", rank = 0 },
               text = "M: the rows reaching one of rank 0's experts per microbatch at step " .. iters
                      .. ", the mean over its experts, " .. name }
    exp:claim{ id = "fc1_n_" .. name, parser = "moe_figure", runs = r, args = at{ figure = "fc1_n", rank = 0 },
               text = "N of an expert's fc1 GEMM on rank 0 (ffn / etp), " .. name }
    exp:claim{ id = "fc1_k_" .. name, parser = "moe_figure", runs = r, args = at{ figure = "fc1_k", rank = 0 },
               text = "K of an expert's fc1 GEMM on rank 0 (hidden), " .. name }
    exp:claim{ id = "fc2_k_" .. name, parser = "moe_figure", runs = r, args = at{ figure = "fc2_k", rank = 0 },
               text = "K of an expert's fc2 GEMM on rank 0 (ffn / etp), " .. name }
    exp:claim{ id = "ep_a2a_bytes_" .. name, parser = "comm_bytes", runs = r,
               args = at{ group = "ep", op = "all_to_all" },
               text = "bytes the busiest rank's all-to-alls over ep send per step, " .. name }
    exp:claim{ id = "load_max_over_mean_" .. name, parser = "moe_figure", runs = r,
               args = at{ figure = "max_over_mean" },
               text = "the busiest expert's tokens over the mean, layer 0, step " .. iters .. ", the most imbalanced "
                      .. "rank, " .. name }
    exp:claim{ id = "step_ms_" .. name, parser = "replayed", runs = r, args = { figure = "step_ms" },
               timing_tolerance = tolerance,
               text = "the step time (ms), " .. name .. ", replayed from per-op CPU time on one core per rank" }
end
exp:claim{ id = "etp_bytes_etp2", parser = "comm_bytes", runs = etp2, args = at{ group = "etp", op = "all_to_all" },
           text = "bytes the busiest rank moves over etp per step (the tokens all-gathered before the experts and "
                  .. "the outputs reduce-scattered after them, and their gradients), ETP2 x EP2; ETP1 moves none" }
exp:claim{ id = "gemm_m_etp2_over_etp1", parser = "ratio", runs = { etp1, etp2 },
           args = { numerator = part("moe_figure", at{ figure = "expert_rows_mean", rank = 0 }, etp2),
                    denominator = part("moe_figure", at{ figure = "expert_rows_mean", rank = 0 }, etp1) },
           text = "M under ETP2 x EP2 over M under ETP1 x EP4 (the etp gather keeps an expert's token group at 4 "
                  .. "ranks: about 1, the routing's difference)" }
exp:claim{ id = "fc1_n_etp2_over_etp1", parser = "ratio", runs = { etp1, etp2 },
           args = { numerator = part("moe_figure", at{ figure = "fc1_n", rank = 0 }, etp2),
                    denominator = part("moe_figure", at{ figure = "fc1_n", rank = 0 }, etp1) },
           text = "fc1's N under ETP2 over ETP1: each GEMM half as wide" }
exp:claim{ id = "gemms_etp2_over_etp1", parser = "ratio", runs = { etp1, etp2 },
           args = { numerator = part("moe_figure", at{ figure = "local_experts", rank = 0 }, etp2),
                    denominator = part("moe_figure", at{ figure = "local_experts", rank = 0 }, etp1) },
           text = "expert GEMMs per rank under ETP2 over ETP1: twice as many, each half the size" }
exp:claim{ id = "speedup_etp1_over_etp2", parser = "ratio", runs = { etp1, etp2 },
           timing_tolerance = tolerance, args = { numerator = replayed_ms(etp2), denominator = replayed_ms(etp1) },
           text = "the step time under ETP2 x EP2 over ETP1 x EP4, replayed on one core per rank (paired rounds)" }
