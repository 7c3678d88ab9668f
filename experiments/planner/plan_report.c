// plan_report.c — one plan as JSON and as a derivation in words (plan.h; `tracebook plan
// --json`, `--explain`). Every figure carries its formula and reference.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "planner/plan.h"

static const char *precision_name(int p) { return p == TB_PLAN_BF16 ? "bf16" : p == TB_PLAN_FP16 ? "fp16" : "fp32"; }

static const char *param_formula(const tb_plan *p, const tb_plan_cluster *cl) {
    const int sharded = config_shards_optimizer(&p->cfg) && p->dp * p->cp > 1;
    const int fsdp = config_shards_grads(&p->cfg) && p->dp * p->cp > 1, zero3 = config_shards_params(&p->cfg);
    if (fsdp && cl->precision == TB_PLAN_FP32)
        return zero3 ? "Megatron-FSDP optim_grads_params, the engine's fp32 buffers: the parameters' slices 4/(dp x cp) "
                       "B + the summed gradient shard 4/(dp x cp) B + the whole gradient buckets held during the "
                       "backward (or the shard's slices at its end) + Adam moments 8/(dp x cp) B per buffer element, "
                       "and the other ranks' slices of the units gathered at once (the step walked unit by unit)"
                     : "Megatron-FSDP optim_grads, the engine's fp32 buffers: parameters 4 B + the summed gradient "
                       "shard 4/(dp x cp) B + the whole gradient buckets held during the backward (or the shard's "
                       "slices at its end) + Adam moments 8/(dp x cp) B per buffer element";
    if (fsdp)
        return zero3 ? "Megatron-FSDP optim_grads_params, mixed precision: (2 B parameters + 4 B fp32 main gradients "
                       "+ 12 B master and Adam)/(dp x cp) per parameter, + 2 B per element of the units' gradient "
                       "buckets held and of the other ranks' slices of the units gathered at once"
                     : "Megatron-FSDP optim_grads, mixed precision: 2 B parameters + (4 B fp32 main gradients + 12 B "
                       "master and Adam)/(dp x cp) per parameter, + 2 B per element of the units' gradient buckets held";
    if (cl->precision == TB_PLAN_FP32)
        return sharded ? "the engine's fp32 buffers: parameters 4 B + gradients 4 B + the reduce-scattered gradient shard "
                         "4/(dp x cp) B + Adam moments 8/(dp x cp) B per buffer element (8 + 12/d)"
                       : "the engine's fp32 buffers: parameters 4 B + gradients 4 B + Adam moments 8 B per buffer element "
                         "(16)";
    return sharded ? "Megatron mixed precision with the distributed optimizer: 2 B parameters + 4 B fp32 main "
                     "gradients + (4 B master + 8 B Adam)/(dp x cp) per parameter (6 + 12/d)"
                   : "Megatron mixed precision: 2 B parameters + 4 B fp32 main gradients + 4 B master + 8 B Adam per "
                     "parameter (18)";
}

// Megatron-FSDP's overlap in the memory (plan_fsdp.h), or NULL without it.
static const char *overlap_formula(const tb_plan *p) {
    if (!config_shards_grads(&p->cfg) || p->dp * p->cp < 2 || !p->cfg.overlap_grad_reduce) return NULL;
    return config_shards_params(&p->cfg) && p->cfg.overlap_param_gather
               ? "with overlap, the next unit's parameters gathered beside this unit's (--overlap-param-gather's "
                 "prefetch, from the second step on), and a unit's gradient buckets held while their reduce-scatter "
                 "is in flight, until the backward after the next unit's (--overlap-grad-reduce: a bound, the engine "
                 "gives a bucket back once its reduce-scatter is done)"
               : "with overlap, a unit's gradient buckets held while their reduce-scatter is in flight, until the "
                 "backward after the next unit's (--overlap-grad-reduce: a bound, the engine gives a bucket back once "
                 "its reduce-scatter is done)";
}

static const char *activation_formula(const tb_plan_cluster *cl) {
    return cl->precision == TB_PLAN_FP32
               ? "the engine's saved tensors per layer (transformer_layer.c: ln_1 out, mean, rstd, qkv, the attention "
                 "core's saved rows, attention out, mid residual, ln_2 out, mean, rstd, fc1 out, activation out, with "
                 "--qk-layernorm the queries and keys before their norms and the norms' means and rstds; each "
                 "64-byte aligned) + the residual stream per layer, + the final norm and logits on the last stage, in "
                 "fp32, walked through the 1F1B / interleaved schedule; peak over the schedule"
               : "Korthikanti et al. 2022 Table 2 per layer (16-bit): s*b*h*(10 + (4 + 4g/a + 4F/h [6F/h SwiGLU] + "
                 "5as/h [+ 2 + 2g/a + 8(a+g)/h with --qk-layernorm])/t), with sequence parallelism s*b*h*(10 + ...)/t; "
                 "5as/h dropped under selective recompute or "
                 "the flash core; full recompute keeps the layer input 2sbh (/t with SP); + fp32 logits 4*s*b*V/t "
                 "on the last stage; s = seq/cp; x the microbatches in flight at the schedule's peak";
}

void plan_layout_name(const tb_plan *p, char *buf, size_t len) {
    int n = snprintf(buf, len, "tp%d,cp%d,pp%d", p->tp, p->cp, p->pp);
    if (p->vpp > 1 && n > 0 && (size_t)n < len) n += snprintf(buf + n, len - (size_t)n, ",vpp%d", p->vpp);
    if (p->cfg.num_experts > 0 && n > 0 && (size_t)n < len) n += snprintf(buf + n, len - (size_t)n, ",ep%d", p->ep);
    if (p->cfg.num_experts > 0 && p->etp > 1 && n > 0 && (size_t)n < len)
        n += snprintf(buf + n, len - (size_t)n, ",etp%d", p->etp);
    if (n > 0 && (size_t)n < len) snprintf(buf + n, len - (size_t)n, ",dp%d,mbs%d", p->dp, p->mbs);
}

static json_t *layers_json(const tb_config *c, int rebalance) {
    tb_config x = *c;
    if (rebalance) {
        if (c->pipeline_model_parallel_size < 2) return json_null();
        x.account_for_embedding_in_pipeline_split = 1;
        x.account_for_loss_in_pipeline_split = 1;
        x.pipeline_layout[0] = '\0';
    }
    int layers[TB_MAX_PIPELINE_STAGES];
    tb_error err;
    int n = config_pipeline_split(&x, layers, &err);
    if (n < 0) return json_string(err.msg);
    json_t *a = json_array();
    for (int i = 0; i < n; i++) json_array_append_new(a, json_integer(layers[i]));
    return a;
}

// The peak stage's activations of the same layout under each recompute choice: none,
// selective (the core attention), full with uniform chunks of one layer.
static const char *const recompute_names[3] = {"none", "selective", "full_uniform_1"};

static void recompute_variants(const tb_plan *p, const tb_plan_cluster *cl, int64_t out[3]) {
    for (int i = 0; i < 3; i++) {
        tb_config c = p->cfg;
        c.recompute_granularity = i == 0 ? TB_RECOMPUTE_NONE : i == 1 ? TB_RECOMPUTE_SELECTIVE : TB_RECOMPUTE_FULL;
        c.recompute_method = i == 2 ? TB_RECOMPUTE_UNIFORM : TB_RECOMPUTE_METHOD_NONE;
        c.recompute_num_layers = i == 2 ? 1 : 0;
        tb_plan v;
        tb_error err;
        out[i] = -1;
        if (plan_evaluate(&v, &c, cl, p->tp, p->cp, p->pp, p->vpp, p->mbs, &err) == 0 && v.legal) {
            out[i] = 0;
            for (int s = 0; s < v.nstages; s++)
                if (v.stages[s].activation_bytes > out[i]) out[i] = v.stages[s].activation_bytes;
        }
        plan_free(&v);
    }
}

json_t *plan_to_json(const tb_plan *p, const tb_plan_cluster *cl) {
    char name[96];
    plan_layout_name(p, name, sizeof name);
    json_t *o = json_object();
    json_object_set_new(o, "layout", json_string(name));
    json_object_set_new(o, "tp", json_integer(p->tp));
    json_object_set_new(o, "cp", json_integer(p->cp));
    json_object_set_new(o, "pp", json_integer(p->pp));
    json_object_set_new(o, "vpp", json_integer(p->vpp));
    json_object_set_new(o, "dp", json_integer(p->dp));
    json_object_set_new(o, "micro_batch_size", json_integer(p->mbs));
    json_object_set_new(o, "num_microbatches", json_integer(p->microbatches));
    json_object_set_new(o, "sequence_parallel", json_boolean(p->sp));
    json_object_set_new(o, "legal", json_boolean(p->legal));
    json_object_set_new(o, "runs_on_this_engine", json_boolean(p->runs_here));
    json_object_set_new(o, "rule", p->rule[0] ? json_string(p->rule) : json_null());
    if (!p->legal) return o;
    const tb_config *c = &p->cfg;
    json_object_set_new(o, "global_batch",
                        json_pack("{s:i, s:s}", "value", c->global_batch_size, "formula",
                                  "global_batch_size = micro_batch_size x num_microbatches x dp"));
    char gbs[160];
    snprintf(gbs, sizeof gbs, "%d = %d x %d x %d", c->global_batch_size, p->mbs, p->microbatches, p->dp);
    json_object_set_new(json_object_get(o, "global_batch"), "derivation", json_string(gbs));
    json_object_set_new(o, "heads_per_tp_rank", json_integer(p->heads_per_tp));
    json_object_set_new(o, "query_groups_per_tp_rank", json_integer(p->query_groups_per_tp));
    json_object_set_new(o, "layers_per_stage", layers_json(c, 0));
    json_object_set_new(o, "layers_per_stage_rebalanced", layers_json(c, 1));
    json_object_set_new(o, "model_parameters", json_integer(p->model_parameters));
    json_object_set_new(o, "padded_vocab_size", json_integer(c->padded_vocab_size));
    if (c->num_experts > 0) {
        json_t *moe = json_pack(
            "{s:i, s:i, s:i, s:i, s:i, s:i, s:I, s:I, s:s, s:f, s:f, s:f, s:s}", "num_experts", c->num_experts, "topk",
            c->moe_router_topk, "ep", p->ep, "etp", p->etp, "expert_dp", p->edp, "experts_per_ep_rank",
            p->experts_per_rank, "expert_parameters", (json_int_t)p->expert_parameters, "active_parameters",
            (json_int_t)p->active_parameters, "active_formula",
            "N - experts + experts x k / E (integer division, the engine's gpt_active_parameters)",
            "all_to_all_bytes_per_step", p->comm.ep, "etp_bytes_per_step", p->comm.etp, "expert_dp_bytes_per_step",
            p->comm.expert_dp, "all_to_all_note",
            "an estimate per rank: a balanced router and no token dropped (routing is data-dependent; a stage's "
            "mean is exact: every row sent is received): per MoE layer and microbatch, per forward the E int32 "
            "counts all-gathered over ep (then ep x E over etp) and the rank's Ns x k permuted tokens x C "
            "all-to-all'd over ep, all-gathered over etp (etp x the rows), reduce-scattered over etp and "
            "all-to-all'd back, backward the same again; Ns: the rank's tokens (s x b / tp under sequence "
            "parallelism); the engine's activations of a MoE layer are exact without ep and without a capacity "
            "factor (R = etp x Ns x k rows), an estimate otherwise");
        json_object_set_new(o, "moe", moe);
    }
    json_object_set_new(
        o, "groups",
        json_pack("{s:{s:i, s:b, s:s}, s:{s:i, s:b, s:s}, s:{s:i, s:s}, s:{s:i, s:s}}", "tp", "size", p->tp,
                  "inside_node", p->tp_in_node, "role", "splits every layer's weights; collectives per layer",
                  "cp", "size", p->cp, "inside_node", p->cp_in_node, "role",
                  "splits the sequence; K/V all-gathered per layer", "dp_cp", "size", p->dp * p->cp, "role",
                  "ranks holding the same shards (dp replicas x cp): gradients averaged over it, the distributed "
                  "optimizer's state sharded over it",
                  "pp", "size", p->pp, "role", "consecutive layer stages; activations sent point to point"));
    json_t *stages = json_array();
    for (int s = 0; s < p->nstages; s++) {
        const tb_plan_stage *st = &p->stages[s];
        json_array_append_new(
            stages,
            json_pack("{s:i, s:i, s:i, s:b, s:b, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:i, s:I}",
                      "stage", s, "layers", st->layers, "chunks", st->chunks, "embedding", st->has_embedding, "head",
                      st->has_head, "parameters_held", (json_int_t)st->params_held, "parameters_counted",
                      (json_int_t)st->params_counted, "parameters_counted_other_tp_ranks",
                      (json_int_t)st->params_counted_other_tp, "parameters_aligned", (json_int_t)st->params_aligned,
                      "buffer_elements", (json_int_t)st->buffer_elements,
                      "param_bytes", (json_int_t)st->param_bytes, "grad_bytes", (json_int_t)st->grad_bytes,
                      "optimizer_bytes", (json_int_t)st->optimizer_bytes, "activation_bytes",
                      (json_int_t)st->activation_bytes, "activation_bytes_engine",
                      (json_int_t)st->activation_bytes_engine, "activation_bytes_korthikanti",
                      (json_int_t)st->activation_bytes_korthikanti, "microbatches_in_flight",
                      st->microbatches_in_flight, "total_bytes", (json_int_t)st->total_bytes));
    }
    for (int s = 0; s < p->nstages; s++) {
        json_object_set_new(json_array_get(stages, (size_t)s), "parameters_expert",
                            json_integer(p->stages[s].params_expert));
        json_object_set_new(json_array_get(stages, (size_t)s), "gathered_bytes",
                            json_integer(p->stages[s].gathered_bytes));
    }
    json_object_set_new(o, "stages", stages);
    int64_t variants[3];
    recompute_variants(p, cl, variants);
    json_t *by_recompute = json_object();
    for (int i = 0; i < 3; i++)
        json_object_set_new(by_recompute, recompute_names[i], variants[i] >= 0 ? json_integer(variants[i]) : json_null());
    json_object_set_new(o, "activation_bytes_by_recompute", by_recompute);
    json_object_set_new(o, "peak", json_pack("{s:i, s:I, s:I, s:b}", "stage", p->peak_stage, "bytes",
                                             (json_int_t)p->peak_bytes, "gpu_memory", (json_int_t)cl->gpu_memory,
                                             "fits", p->fits));
    json_object_set_new(o, "precision", json_string(precision_name(cl->precision)));
    json_object_set_new(o, "memory_formula",
                        json_pack("{s:s, s:s?, s:s, s:s}", "weights_and_optimizer", param_formula(p, cl),
                                  "fsdp_overlap", overlap_formula(p), "activations", activation_formula(cl),
                                  "not_counted",
                                  "workspace (gradients of the layer being computed, staging) and communication "
                                  "buffers; the engine reports them as its workspace and comm categories"));
    json_object_set_new(o, "bubble",
                        json_pack("{s:f, s:s}", "value", p->bubble, "formula",
                                  "(p - 1) / (v x m + p - 1), Narayanan et al. 2021 as a share of the step"));
    json_object_set_new(
        o, "comm_bytes_per_step",
        json_pack("{s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:s}", "tp", p->comm.tp, "cp", p->comm.cp, "pp",
                  p->comm.pp, "pp_grad", p->comm.pp_grad, "dp_cp", p->comm.dp_cp, "embedding", p->comm.embedding,
                  "ep", p->comm.ep, "etp", p->comm.etp, "expert_dp", p->comm.expert_dp, "definition",
                  "per rank and step, the sum over the group's calls of count x element size of the buffer each "
                  "passes (the traces' args.bytes), the busiest stage's; pp: activations forward (and the loss), "
                  "pp_grad: their gradients backward"));
    json_object_set_new(
        o, "estimate",
        json_pack("{s:f, s:f, s:f, s:f, s:f, s:f, s:s}", "flops_per_step", p->flops_per_step, "compute_s",
                  p->compute_seconds, "exposed_comm_s", p->comm.seconds, "step_s", p->step_seconds, "tokens_per_s",
                  p->step_seconds > 0 ? (double)c->global_batch_size * c->seq_length / p->step_seconds : 0.0, "mfu",
                  p->mfu, "model",
                  "an estimate: the busiest stage's FLOPs (6 x its parameters + 12 x layers x h/tp x seq per token, "
                  "plus recompute) at peak_tflops x compute_efficiency, stretched by the bubble, plus every "
                  "collective's bytes on the wire at the node's or the network's bandwidth, none overlapped; MFU "
                  "= model FLOPs / (step x GPUs x peak)"));
    return o;
}

static double gib(int64_t b) { return (double)b / (1024.0 * 1024.0 * 1024.0); }

void plan_explain(FILE *out, const tb_plan *p, const tb_plan_cluster *cl) {
    char name[96];
    plan_layout_name(p, name, sizeof name);
    const tb_config *c = &p->cfg;
    fprintf(out, "layout %s on %d GPUs (%d per node, %.0f GiB each), %s\n", name, cl->gpus, cl->gpus_per_node,
            gib(cl->gpu_memory), precision_name(cl->precision));
    if (!p->legal) {
        fprintf(out, "  not legal: %s\n", p->rule);
        return;
    }
    if (!p->runs_here) fprintf(out, "  legal, but this engine cannot run it: %s\n", p->rule);
    fprintf(out, "\nmodel: %d layers, hidden %d, %d heads, %d query groups, ffn %d%s, vocab %d (padded %d at tp %d), seq %d\n",
            c->num_layers, c->hidden_size, c->num_attention_heads, c->num_query_groups, c->ffn_hidden_size,
            c->swiglu ? " SwiGLU" : "", c->vocab_size, c->padded_vocab_size, p->tp, c->seq_length);
    fprintf(out, "  parameters N = %lld (exact, as the engine lays them out)\n", (long long)p->model_parameters);
    if (c->num_experts > 0)
        fprintf(out, "  MoE: %d experts (ffn %d), top-%d, every %d layer(s)%s; experts' parameters %lld, active per token "
                     "%lld = N - experts + experts x %d / %d\n",
                c->num_experts, c->moe_ffn_hidden_size, c->moe_router_topk, c->moe_layer_freq,
                c->moe_shared_expert_intermediate_size > 0 ? ", a shared expert" : "", (long long)p->expert_parameters,
                (long long)p->active_parameters, c->moe_router_topk, c->num_experts);
    fprintf(out, "\nworld %d = tp %d x cp %d x dp %d x pp %d (rank order tp-cp-dp-pp, tp fastest)\n", cl->gpus,
            p->tp, p->cp, p->dp, p->pp);
    fprintf(out, "  tp group: %d consecutive ranks, %s a node; heads per tp rank %d / %d = %d, query groups %d / %d = %d\n",
            p->tp, p->tp_in_node ? "inside" : "ACROSS", c->num_attention_heads, p->tp, p->heads_per_tp,
            c->num_query_groups, p->tp, p->query_groups_per_tp);
    if (p->cp > 1)
        fprintf(out, "  cp group: %d ranks at stride %d, %s a node; each holds seq %d / %d = %d tokens (2 x %d zig-zag chunks)\n",
                p->cp, p->tp, p->cp_in_node ? "inside" : "ACROSS", c->seq_length, p->cp, c->seq_length / p->cp,
                p->cp);
    fprintf(out, "  dp x cp group: %d ranks holding the same shards: gradients averaged over it%s\n", p->dp * p->cp,
            config_shards_params(c)  ? ", the parameters, gradients and optimizer state sharded over it per unit "
                                       "(Megatron-FSDP optim_grads_params)"
            : config_shards_grads(c) ? ", the gradients and optimizer state sharded over it per unit (Megatron-FSDP "
                                       "optim_grads)"
            : config_shards_optimizer(c) ? ", the optimizer state sharded over it (distributed optimizer)"
                                         : "");
    if (c->num_experts > 0) {
        const int Fe = c->moe_ffn_hidden_size, gate = c->swiglu ? 2 : 1;
        fprintf(out, "  expert grid %d = etp %d x ep %d x expert-dp %d x pp %d: each ep rank holds %d / %d = %d experts, "
                     "their gradients averaged over expert-dp%s\n",
                cl->gpus, p->etp, p->ep, p->edp, p->pp, c->num_experts, p->ep, p->experts_per_rank,
                c->use_distributed_optimizer ? " (their optimizer state sharded over it, the dense over dp x cp)" : "");
        if (p->etp > 1)
            fprintf(out, "  expert shard per etp rank: ffn %d / %d = %d columns of each expert (fc1 %d x %d, fc2 %d x %d; "
                         "fc2's bias whole on every etp rank, added by etp rank 0)\n",
                    Fe, p->etp, Fe / p->etp, gate * Fe / p->etp, c->hidden_size, c->hidden_size, Fe / p->etp);
        else if (p->tp > 1)
            fprintf(out, "  etp 1 under tp %d: every tp rank holds its ep rank's experts whole (ffn %d)\n", p->tp, Fe);
        if (c->moe_shared_expert_intermediate_size > 0 && p->tp > 1)
            fprintf(out, "  shared expert split over tp as the dense MLP: ffn %d / %d = %d columns per tp rank\n",
                    c->moe_shared_expert_intermediate_size, p->tp, c->moe_shared_expert_intermediate_size / p->tp);
        const int Ns = p->sp ? c->micro_batch_size * c->seq_length / p->tp : c->micro_batch_size * c->seq_length;
        fprintf(out, "  router replicated over tp, on the rank's %d tokens (%s); the %s dispatcher per MoE layer and "
                     "microbatch: ",
                Ns, p->sp ? "s x b / tp: sequence parallel" : "s x b",
                c->moe_token_dispatcher_type == TB_MOE_DISPATCHER_ALLTOALL ? "all-to-all" : "all-gather");
        if (p->ep == 1 && p->etp == 1)
            fprintf(out, "no collective (every expert on the rank)\n");
        else if (c->moe_token_dispatcher_type == TB_MOE_DISPATCHER_ALLTOALL)
            fprintf(out, "E counts all-gathered over ep%s; %d x %d = %d rows all-to-all'd over ep%s, the experts, %s"
                         "all-to-all'd back; backward the same in reverse\n",
                    p->etp > 1 ? " then over etp" : "", Ns, c->moe_router_topk, Ns * c->moe_router_topk,
                    p->etp > 1 ? ", all-gathered over etp (variable sizes: an all-to-all of the same rows to each member)"
                               : "",
                    p->etp > 1 ? "their outputs reduce-scattered over etp, " : "");
        else
            fprintf(out, "the %d tokens, their routes and probs all-gathered over ep then etp, the outputs "
                         "reduce-scattered back; backward the output gradients all-gathered, the gradients "
                         "reduce-scattered\n",
                    Ns);
    }
    fprintf(out, "  global batch %d = micro batch %d x microbatches %d x dp %d\n", c->global_batch_size, p->mbs,
            p->microbatches, p->dp);
    int layers[TB_MAX_PIPELINE_STAGES];
    tb_error err;
    int n = config_pipeline_split(c, layers, &err);
    fprintf(out, "  layers per %sstage:", p->vpp > 1 ? "virtual " : "");
    for (int i = 0; i < n; i++) fprintf(out, " %d", layers[i]);
    fprintf(out, "\n");
    if (p->pp > 1) {
        json_t *re = layers_json(c, 1);
        char *txt = json_dumps(re, JSON_COMPACT | JSON_ENCODE_ANY);
        fprintf(out, "  rebalanced for the embedding and the loss (--account-for-embedding/loss-in-pipeline-split): %s\n",
                txt);
        free(txt);
        json_decref(re);
    }

    fprintf(out, "\nmemory per rank (%s):\n  weights and optimizer: %s\n  activations: %s\n", precision_name(cl->precision),
            param_formula(p, cl), activation_formula(cl));
    if (overlap_formula(p)) fprintf(out, "  Megatron-FSDP overlap: %s\n", overlap_formula(p));
    if (c->num_experts > 0)
        fprintf(out, "  MoE layers: %s\n",
                cl->precision == TB_PLAN_FP32
                    ? (p->ep > 1 ? "the engine's saved tensors with the R rows reaching the rank's experts taken as "
                                   "etp x Ns x k (a balanced router): an estimate"
                                 : "the engine's saved tensors, the R = etp x Ns x k rows exact at ep 1 (no token "
                                   "dropped without a capacity factor)")
                    : "an estimate: the MLP term replaced by k x (2 etp + (4 or 6) x Fe/h) for the routed copies, (4 or "
                      "6) x Fs/h for the shared expert and 4E/h for the router's fp32 scores (/t under sequence "
                      "parallelism)");
    fprintf(out, "  %-6s %7s %15s %9s %9s %9s %9s %9s %9s %9s\n", "stage", "layers", "params held", "params",
            "grads", "optim", "gathered", "acts", "in flight", "total");
    for (int s = 0; s < p->nstages; s++) {
        const tb_plan_stage *st = &p->stages[s];
        fprintf(out, "  %-6d %7d %15lld %8.2fG %8.2fG %8.2fG %8.2fG %8.2fG %9d %8.2fG%s\n", s, st->layers,
                (long long)st->params_held, gib(st->param_bytes), gib(st->grad_bytes), gib(st->optimizer_bytes),
                gib(st->gathered_bytes), gib(st->activation_bytes), st->microbatches_in_flight, gib(st->total_bytes),
                s == p->peak_stage ? "  <- peak" : "");
    }
    fprintf(out, "  peak %.2f GiB of %.2f GiB: %s (workspace and communication buffers not counted)\n",
            gib(p->peak_bytes), gib(cl->gpu_memory), p->fits ? "fits" : "DOES NOT FIT");
    int64_t variants[3];
    recompute_variants(p, cl, variants);
    fprintf(out, "  activations of the busiest stage by recompute choice:");
    for (int i = 0; i < 3; i++)
        if (variants[i] >= 0) fprintf(out, " %s %.2f GiB%s", recompute_names[i], gib(variants[i]), i < 2 ? "," : "");
    fprintf(out, "\n");

    fprintf(out, "\ncommunication per rank per step (count x element bytes of each call, busiest stage):\n");
    fprintf(out, "  tp %.2f GB   (per layer and microbatch: %s; + embedding, logits and cross entropy%s)\n",
            p->comm.tp / 1e9, p->sp ? "4 all-gathers + 4 reduce-scatters, each of an s*b*h buffer (s*b*h/tp per rank)"
                                    : "4 all-reduces of s*b*h",
            c->num_experts > 0 && p->tp > 1
                ? "; a MoE layer: the attention's half, the shared expert's 2 forward + 3 backward, the "
                  "load-balancing loss's 2E floats all-reduced"
                : "");
    if (p->cp > 1) fprintf(out, "  cp %.2f GB   (per layer: K/V all-gathered forward and backward, dK/dV reduce-scattered)\n", p->comm.cp / 1e9);
    if (p->pp > 1) fprintf(out, "  pp %.2f GB   (per microbatch: the stage's activation forward, its gradient backward)\n", (p->comm.pp + p->comm.pp_grad) / 1e9);
    fprintf(out, "  dp x cp %.2f GB   (%s)\n", p->comm.dp_cp / 1e9,
            config_shards_params(c) && p->dp * p->cp > 1
                ? "each unit's gradients reduce-scattered every microbatch, its parameters all-gathered before its "
                  "forward and its backward"
            : config_shards_grads(c) && p->dp * p->cp > 1
                ? "each unit's gradients reduce-scattered every microbatch, the parameters all-gathered after the update"
            : config_shards_optimizer(c) && p->dp * p->cp > 1 ? "gradients reduce-scattered, parameters all-gathered"
                                                              : "gradients all-reduced");
    if (p->comm.ep > 0)
        fprintf(out, "  ep %.2f GB   (an estimate, a balanced router: per MoE layer and microbatch the counts "
                     "all-gathered, the rank's Ns x k tokens all-to-all'd out and back, forward and backward)\n",
                p->comm.ep / 1e9);
    if (p->comm.etp > 0)
        fprintf(out, "  etp %.2f GB   (per MoE layer and microbatch the ep group's counts all-gathered, the rows received "
                     "over ep all-gathered and the outputs reduce-scattered, forward and backward; the busiest rank's "
                     "depends on the routing)\n",
                p->comm.etp / 1e9);
    if (p->comm.expert_dp > 0) fprintf(out, "  expert-dp %.2f GB   (the experts' gradients all-reduced)\n", p->comm.expert_dp / 1e9);
    if (p->comm.embedding > 0) fprintf(out, "  embedding %.2f GB   (the tied word embedding's gradient, first + last stage)\n", p->comm.embedding / 1e9);
    fprintf(out, "\npipeline bubble (p - 1)/(v x m + p - 1) = (%d - 1)/(%d x %d + %d - 1) = %.4f\n", p->pp, p->vpp,
            p->microbatches, p->pp, p->bubble);
    fprintf(out, "\nestimate (a simple model, not a measurement): compute %.3f s at %.0f TFLOP/s x %.2f, exposed comm %.3f s, "
                 "step %.3f s, %.0f tokens/s, MFU %.1f%%\n",
            p->compute_seconds, cl->peak_tflops, cl->compute_efficiency, p->comm.seconds, p->step_seconds,
            p->step_seconds > 0 ? (double)c->global_batch_size * c->seq_length / p->step_seconds : 0.0, 100 * p->mfu);
    fprintf(out, "\nacceptance metrics to watch (the engine's names):\n"
                 "  1. mem_peak_bytes by category per rank (metrics.rank-N.jsonl) against the budget above\n"
                 "  2. pipeline.json measured_bubble_fraction against %.4f, and stage_imbalance\n"
                 "  3. tokens_per_s and mfu (metrics, with --peak-tflops) against the estimate\n"
                 "  4. exposed_comm_ms (metrics pipeline) and the comm bytes per group (tracebook steps / comm_bytes)\n"
                 "  5. loss and grad_norm equal to the single-rank run of the same global batch\n",
            p->bubble);
}
