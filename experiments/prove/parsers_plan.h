// parsers_plan.h — the claim parser over a recorded plan (exp:plan, `tracebook plan --output`):
// registered in parsers.c's table as "plan_figure" (definition there and in parsers.h's list).
#ifndef TB_EXPERIMENTS_PARSERS_PLAN_H
#define TB_EXPERIMENTS_PARSERS_PLAN_H

#include <jansson.h>

#include "core/error.h"

// The args plan_figure accepts (NULL-terminated) and its definition.
extern const char *const tb_plan_figure_args[];
#define TB_PLAN_FIGURE_DEFINITION                                                                                     \
    "per record: run/plan.json (written by tracebook plan --output, which exp:plan records): args.figure "         \
    "(required) of the plan args.layout names (e.g. \"tp8,cp1,pp8,dp1,mbs1\") or of candidate args.candidate "     \
    "(1-based in the ranked list, default 1; an --explain plan is its only candidate): model_parameters, "         \
    "peak_bytes, bubble, step_s, mfu, tokens_per_s, comm_<tp|cp|pp|pp_grad|dp_cp|embedding|ep|expert_dp>_bytes "    \
    "(per rank and step, the busiest), of a MoE plan expert_parameters, active_parameters, experts_per_ep_rank, "  \
    "or per rank of args.stage (default the peak stage) param_bytes, grad_bytes, "              \
    "optimizer_bytes, gathered_bytes (Megatron-FSDP), activation_bytes, total_bytes, parameters_held, "          \
    "parameters_aligned (pipeline.json's parameters), layers; or of the whole plan legal_layouts, fit_layouts; "   \
    "median over records. Exact: the "                                                                              \
    "planner's arithmetic, re-read from the recorded file"

// One record's value. ev gets "layout" and "files" (the plan.json read).
int tb_plan_figure_record(json_t *args, const char *record_dir, double *value, json_t *ev, tb_error *err);

#endif
