-- drills/tp_divergence.lua — "TP1 and TP2 losses slowly diverge: float noise or a bug?"
-- (M132). Weights, optimizer state, inputs and seeds are fixed: every run loads one
-- checkpoint (written after 2 steps, so the biases are no longer zero) and dumps the logical
-- tensors of its next step (--dump-tensors 3: every layer's and submodule's forward output
-- gathered over tp/sp, the loss, every parameter's gradient and the parameters after the
-- step). The claims compare two runs' dumps as `tracebook bisect` does: aligned by name,
-- walked in the step's order, a tensor diverging when max |a - b| > 1e-5 x max |b| (the bound
-- on what summing the same terms in another order does to fp32 values; tp reorders the
-- reductions by about 1e-7..1e-6 of a tensor's scale). The value is the 1-based position of
-- the first diverging tensor in that order (0: none), which names the tensor:
--   forward 1 fwd/embedding, then per layer l: 2 + 3l fwd/layer.l.attention, 3 + 3l
--   fwd/layer.l.mlp, 4 + 3l fwd/layer.l, then fwd/loss (2 + 3L for L layers); the backward
--   starts at 3 + 3L with grad/ln_f.bias (the last layer's gradients first).
-- TP2 (and TP2 with sequence parallelism) against TP1 without a fault: no divergence beyond
-- the bound; with each of the engine's debug faults (--debug-inject-fault) the divergence is
-- found at the tensor the bug breaks first.
--
--   build/bin/tracebook run runbooks/drills/tp_divergence.lua
--   build/bin/tracebook bisect artifacts/tp_divergence/v1/<tp1 run>/run artifacts/tp_divergence/v1/<other>/run
--
-- Every claim is exact (the dumped tensors are files of the records).

local config = require "config"

local exp = tb.experiment{
    name = "tp_divergence", version = 1, seed = 1234,
    question = "Do TP1 and TP2 diverge beyond float reordering, and does the first divergence name the bug when "
               .. "there is one?",
}
local layers = 2
local model = { num_layers = layers, hidden_size = 64, num_attention_heads = 4, seq_length = 32, vocab_size = 200,
                micro_batch_size = 2, global_batch_size = 4, train_iters = 3, seed = 7 }
-- the fixed weights: a checkpoint after 2 steps, in its own record
local init = exp:run(config.with(model, { exit_interval = 2, save = "{run_dir}/checkpoints" }))
local dumped = config.with(model, { dump_tensors = "3" })
if #init.runs > 0 and init.runs[1].record then dumped.load = init.runs[1].record .. "/run/checkpoints" end
local function with(extra) return config.with(dumped, extra) end
local tp2 = { tensor_model_parallel_size = 2, world_size = 2 }

local tp1 = exp:run(with{})
local tp2_clean = exp:run(with(tp2))
local tp2_sp = exp:run(with(config.with(tp2, { sequence_parallel = true })))
local forward = 2 + 3 * layers  -- the position of fwd/loss, the last forward tensor
local faults = {
    { "row_parallel_bias_per_rank", {}, 2,
      "fwd/layer.0.attention: every tp rank adds the row-parallel bias before the reduction (tp times the bias)" },
    { "vocab_ce_local_sum", {}, forward,
      "fwd/loss: the vocab-parallel cross entropy's exp sums are not all-reduced over tp" },
    { "skip_sp_grad_all_reduce", { sequence_parallel = true }, forward + 1,
      "grad/ln_f.bias, the first gradient of the backward: the sequence-parallel partial gradients are not "
      .. "all-reduced over tp" },
}
exp:claim{ id = "tp2_no_divergence", parser = "first_divergence", runs = { tp1, tp2_clean }, value = 0,
           text = "TP2 against TP1, no fault: no tensor diverges beyond 1e-5 of its scale" }
exp:claim{ id = "tp2_sp_no_divergence", parser = "first_divergence", runs = { tp1, tp2_sp }, value = 0,
           text = "TP2 with sequence parallelism against TP1, no fault: no tensor diverges beyond the bound" }
for _, f in ipairs(faults) do
    local name, extra, position, where = f[1], f[2], f[3], f[4]
    local faulty = exp:run(with(config.with(config.with(tp2, extra), { debug_inject_fault = name })))
    exp:claim{ id = name .. "_found_at", parser = "first_divergence", runs = { tp1, faulty }, value = position,
               text = "TP2 with --debug-inject-fault " .. name .. " against TP1: the first divergence is tensor "
                      .. position .. " of the step, " .. where }
end
