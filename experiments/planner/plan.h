// plan.h — the parallel-configuration planner's model of one layout (`tracebook plan`).
//
// Given the model (the engine's own tb_config: its Megatron flags, resolved) and a cluster,
// plan_evaluate derives for one candidate layout (tp, cp, pp, vpp, dp, micro batch,
// microbatches) everything docs/ARCHITECTURE.md, "Planner" lists:
//
//   - legality: the engine's config rules themselves (config_validate_rules, engine/config/config.h),
//     first with Megatron's layout rules only (this build's capacity limits and what the
//     engine cannot run yet skipped), then whole — "legal" and "runs on this engine";
//   - per pipeline stage (every rank of a stage holds the same shapes: tensors split evenly
//     over tp, replicated over cp and dp): layers, parameters held (exact, the rank's
//     shards) and counted toward the model (tp-replicated tensors on tp rank 0 only, the
//     last stage's copy of the tied embedding never), and the bytes of parameters,
//     gradients, optimizer state and activations;
//   - communication per step and rank by group kind (tp, cp, pp, dp_cp, embedding) as the
//     engine's traces count it (count x element size of each call's buffer);
//   - the bubble (p − 1)/(v·m + p − 1), whether each tp and cp group stays inside a node,
//     and an estimated step time and MFU from a stated simple model.
//
// Two precisions of accounting: fp32 is the engine's (it trains fp32 on the CPU): the bytes
// are its allocations exactly — each tensor 16-element aligned in the flat buffer, the buffer
// padded to 16 x dp, the distributed optimizer's reduce-scattered gradient shard, Adam's two
// moments, and the activations its modules save (transformer_layer.c's plan, 64-byte
// aligned, the residual stream, the final norm and the logits), walked through its own
// schedule. bf16/fp16 is Megatron's mixed precision: 2-byte parameters, fp32 main gradients
// and fp32 master weights + Adam (18 bytes per parameter, 6 + 12/dp with the distributed
// optimizer) and Korthikanti et al. 2022's Table 2 activations (16-bit), generalised to the
// ffn size, grouped-query attention and SwiGLU.
#ifndef TB_EXPERIMENTS_PLAN_H
#define TB_EXPERIMENTS_PLAN_H

#include <jansson.h>
#include <stdint.h>
#include <stdio.h>

#include "config/config.h"

enum tb_plan_precision { TB_PLAN_FP32, TB_PLAN_BF16, TB_PLAN_FP16 };

typedef struct tb_plan_cluster {
    int gpus, gpus_per_node;
    int64_t gpu_memory;         // bytes per GPU
    double peak_tflops;         // per GPU, dense, at the training precision
    double compute_efficiency;  // the share of peak the GEMMs reach (the step-time model's one knob)
    double intra_node_gbps;     // GB/s per GPU inside a node (NVLink)
    double inter_node_gbps;     // GB/s per GPU across nodes (InfiniBand)
    int precision;              // enum tb_plan_precision
} tb_plan_cluster;

// What one rank of a pipeline stage holds (every rank of the stage holds the same).
typedef struct tb_plan_stage {
    int layers;                 // transformer layers over its chunks
    int chunks;                 // model chunks (virtual stages)
    int has_embedding, has_head;
    int64_t params_held;        // elements of its shards, exact
    int64_t params_counted;     // toward the model's N (tp rank 0's view)
    int64_t params_counted_other_tp;  // the same on a tp rank other than 0 (no tp-replicated tensors)
    int64_t params_expert;      // of params_held: its E/ep experts' etp shards (MoE), exact
    int64_t params_expert_replicated;  // of params_expert: replicated over etp (fc2's bias: counted on etp rank 0)
    int64_t params_aligned;     // the engine's "parameters" (pipeline.json): each tensor 16-element aligned
    int64_t buffer_elements;    // the engine's flat buffers: the aligned tensors padded to 16 x dp
    int64_t param_bytes, grad_bytes, optimizer_bytes;
    int64_t gathered_bytes;     // Megatron-FSDP's optim_grads_params: the other ranks' parameters held at once
    int64_t activation_bytes;             // at the chosen precision's accounting (below)
    int64_t activation_bytes_engine;      // the engine's saved tensors (fp32), peak over its schedule
    int64_t activation_bytes_korthikanti; // Korthikanti Table 2 (16-bit), peak over the same schedule
    int microbatches_in_flight;           // forward passes held at the activation peak (chunk-microbatches)
    int64_t total_bytes;                  // params + grads + optimizer + gathered + activations
} tb_plan_stage;

// Bytes per step on one rank, summed over the calls of a group kind: count x element size of
// each call as the traces record it (args.bytes; experiments/prove/parsers.h "comm_bytes"): an
// all-reduce's buffer, an all-gather's or reduce-scatter's whole (group-size x shard) buffer,
// a send's or receive's.
// The figure is the busiest rank's of the kind (max over stages).
typedef struct tb_plan_comm {
    double tp, cp, pp, pp_grad, dp_cp, embedding;  // pp: activations forward, pp_grad: gradients backward
    double ep;         // MoE all-to-all dispatcher: counts all-gathered, tokens all-to-all'd (a balanced-router estimate)
    double expert_dp;  // the experts' gradient all-reduce over expert-dp (ep > 1)
    double etp;        // MoE under expert tensor parallelism: counts and tokens all-gathered, outputs reduce-scattered
    double seconds;  // the step-time model's exposed communication, every kind
} tb_plan_comm;

typedef struct tb_plan {
    tb_config cfg;              // the candidate as the engine would run it (resolved)
    int legal;                  // Megatron's layout rules hold
    int runs_here;              // and this engine runs it (its capacity, its "not supported yet")
    char rule[sizeof(tb_error)];  // the first rule broken (legal 0), or this engine's (runs_here 0)
    int tp, cp, pp, vpp, dp, mbs, microbatches, sp;
    int heads_per_tp, query_groups_per_tp;
    int tp_in_node, cp_in_node;
    int64_t model_parameters;   // N at this layout's padded vocabulary, exact
    int64_t expert_parameters;  // of N: every MoE layer's experts (0: dense), exact
    int64_t active_parameters;  // per token: N − experts + experts·k/E (the engine's gpt_active_parameters)
    int ep, etp, edp, experts_per_rank;  // expert parallel (from the model's expert_model_parallel_size), expert
                                         // tensor parallel, expert-dp (world / (etp x ep x pp))
    int nstages;
    tb_plan_stage *stages;      // (pp)
    int peak_stage;             // the stage with the most bytes
    int64_t peak_bytes;
    int fits;
    double bubble;              // (p − 1)/(v·m + p − 1)
    tb_plan_comm comm;
    double flops_per_step;      // model FLOPs of the global batch (the engine's 6·N_active + 12·L·C·T per token)
    double compute_seconds, step_seconds, mfu;
} tb_plan;

// Fills plan for the layout. base: the model (its parallel fields are overwritten).
// Returns 0 (plan->legal and runs_here say the verdict), or -1 with err set on a shape the
// planner cannot evaluate (never for a legal layout).
int plan_evaluate(tb_plan *plan, const tb_config *base, const tb_plan_cluster *cl, int tp, int cp, int pp, int vpp,
                  int mbs, tb_error *err);
void plan_free(tb_plan *plan);

// The whole derivation of one plan as JSON (every figure, each with its formula).
json_t *plan_to_json(const tb_plan *plan, const tb_plan_cluster *cl);
// The derivation as text (tracebook plan --explain).
void plan_explain(FILE *out, const tb_plan *plan, const tb_plan_cluster *cl);

// "tp4,cp1,pp4[,vpp2],dp4,mbs1"
void plan_layout_name(const tb_plan *plan, char *buf, size_t len);

// The parameters of the model at tensor-parallel size tp (its padded vocabulary), exact.
int64_t plan_model_parameters(const tb_config *cfg);
// Of those, the experts' (every MoE layer's E experts), and the active parameters per token.
int64_t plan_model_expert_parameters(const tb_config *cfg);
int64_t plan_active_parameters(const tb_config *cfg);

#endif
