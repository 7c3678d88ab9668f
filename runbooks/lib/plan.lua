-- plan.lua — the planner's questions as runbooks (runbooks/plans/): one recorded ranked plan
-- (exp:plan, `tracebook plan`), one recorded derivation of its top candidate (--explain), and
-- claims that `tracebook prove` re-derives from the recorded plan.json files (parser
-- plan_figure): the model's parameter count, the chosen layout's per-rank memory, its bubble,
-- and the agreement of the ranked and the explained budgets; for a MoE model also its expert
-- and active parameters, the experts per ep rank and the chosen layout's all-to-all and
-- expert-dp bytes.
local M = {}

local function merged(a, b)
    local t = {}
    for k, v in pairs(a) do t[k] = v end
    for k, v in pairs(b or {}) do t[k] = v end
    return t
end

-- exp: the experiment; model: the engine's keys (num_layers, ...); cluster: the planner's
-- (gpus, gpus_per_node, gpu_memory, bf16, ...). Returns the ranked plan, the explained one and
-- the chosen layout's name.
function M.answer(exp, model, cluster, top)
    local ranked = exp:plan(merged(merged(model, cluster), { top = top or 5 }))
    local best = ranked.plan.candidates and ranked.plan.candidates[1]
    tb.assert(best ~= nil, "the planner found no legal layout")
    tb.assert(best.peak.fits, "no legal layout fits: the smallest peak is " .. best.peak.bytes .. " bytes")
    local ep = best.moe and best.moe.ep or 1
    -- a MoE layout names its etp (--explain's default is Megatron's, tp)
    local etp = best.moe and ("etp" .. best.moe.etp .. ",") or ""
    local layout = string.format("tp%d,cp%d,pp%d,%s%s%sdp%d,mbs%d", best.tp, best.cp, best.pp,
                                 best.vpp > 1 and ("vpp" .. best.vpp .. ",") or "", ep > 1 and ("ep" .. ep .. ",") or "",
                                 etp, best.dp, best.micro_batch_size)
    local explained = exp:plan(merged(merged(model, cluster), { explain = layout }))
    local name = best.layout
    exp:claim{ id = "model_parameters", parser = "plan_figure", runs = explained,
               args = { figure = "model_parameters" },
               text = "parameters of the model at " .. name .. "'s padded vocabulary (exact, as the engine lays them out)" }
    local figures = {
        { "chosen_peak_bytes_per_rank", "peak_bytes",
          "per-rank memory of " .. name .. " at its peak stage: parameters + gradients + optimizer + activations (bytes)" },
        { "chosen_optimizer_bytes", "optimizer_bytes", "optimizer state per rank of " .. name .. " at its peak stage (bytes)" },
        { "chosen_activation_bytes", "activation_bytes", "activations per rank of " .. name .. " at its peak stage (bytes)" },
        { "chosen_bubble", "bubble", "pipeline bubble (p - 1)/(v m + p - 1) of " .. name },
    }
    for _, f in ipairs(figures) do
        exp:claim{ id = f[1], parser = "plan_figure", runs = explained, args = { figure = f[2] }, text = f[3] }
    end
    exp:claim{ id = "ranked_and_explained_agree", parser = "relative_difference", runs = { ranked, explained }, at_most = 0,
               args = { a = { parser = "plan_figure", args = { figure = "peak_bytes" }, records = { ranked.runs[1].run_id } },
                        b = { parser = "plan_figure", args = { figure = "peak_bytes" }, records = { explained.runs[1].run_id } } },
               text = "the ranked list's top candidate and its --explain derivation give the same per-rank peak" }
    exp:claim{ id = "legal_layouts", parser = "plan_figure", runs = ranked, args = { figure = "legal_layouts" },
               text = "layouts of the model on the cluster that the engine's config rules allow" }
    if best.moe then  -- a MoE model: what a token computes with, and the dispatcher's traffic
        local moe = {
            { "expert_parameters", "expert_parameters", "parameters of every MoE layer's experts (exact)" },
            { "active_parameters", "active_parameters",
              "parameters a token computes with: N - experts + experts x k / E (exact, the engine's gpt_active_parameters)" },
            { "experts_per_ep_rank", "experts_per_ep_rank", "experts each expert-parallel rank of " .. name .. " holds" },
            { "chosen_all_to_all_bytes", "comm_ep_bytes",
              "all-to-all bytes per rank and step of " .. name .. " (a balanced router's estimate, no token dropped)" },
            { "chosen_expert_dp_bytes", "comm_expert_dp_bytes",
              "the experts' gradient bytes over expert-dp per rank and step of " .. name },
        }
        if best.moe.etp > 1 then
            moe[#moe + 1] = { "chosen_etp_bytes", "comm_etp_bytes",
                              "expert-tensor-parallel bytes per rank and step of " .. name
                              .. " (the rows all-gathered and reduce-scattered over etp; a balanced router's estimate)" }
        end
        for _, f in ipairs(moe) do
            exp:claim{ id = f[1], parser = "plan_figure", runs = explained, args = { figure = f[2] }, text = f[3] }
        end
    end
    return ranked, explained, name
end

-- Megatron-FSDP's answer beside it: the same model with --use-megatron-fsdp and `strategy`
-- (optim_grads or optim_grads_params), pipeline parallelism fixed at 1 (FSDP shards the state
-- instead of splitting the layers; the engine's FSDP runs one stage), ranked the same way.
-- Claims, prefixed fsdp_: the top layout's per-rank peak, its parameters' and gathered units'
-- bytes at its peak stage and its dp x cp bytes per step. Returns the ranked plan and the layout.
function M.fsdp(exp, model, cluster, strategy, top)
    local m = merged(model, { use_megatron_fsdp = true, data_parallel_sharding_strategy = strategy,
                              pipeline_model_parallel_size = 1 })
    local ranked = exp:plan(merged(merged(m, cluster), { top = top or 5 }))
    local best = ranked.plan.candidates and ranked.plan.candidates[1]
    tb.assert(best ~= nil, "the planner found no legal Megatron-FSDP " .. strategy .. " layout at pp 1")
    tb.assert(best.peak.fits, "no Megatron-FSDP " .. strategy .. " layout at pp 1 fits: the smallest peak is "
              .. best.peak.bytes .. " bytes")
    local name = best.layout .. " (Megatron-FSDP " .. strategy .. ")"
    local figures = {
        { "fsdp_peak_bytes_per_rank", "peak_bytes",
          "per-rank memory of " .. name .. ": its parameters, gradients, optimizer, gathered units and activations (bytes)" },
        { "fsdp_param_bytes", "param_bytes", "parameter bytes per rank of " .. name },
        { "fsdp_gathered_bytes", "gathered_bytes",
          "the other ranks' parameters a rank of " .. name .. " holds at once: its gathered units (bytes)" },
        { "fsdp_dp_cp_bytes", "comm_dp_cp_bytes",
          "dp x cp bytes per rank and step of " .. name .. ": the units' reduce-scatters and all-gathers" },
    }
    for _, f in ipairs(figures) do
        exp:claim{ id = f[1], parser = "plan_figure", runs = ranked, args = { figure = f[2], candidate = 1 },
                   text = f[3] }
    end
    return ranked, best.layout
end

return M
