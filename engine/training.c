#include "comm/local_backend.h"
#include "training.h"

#include <math.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "backend/backend.h"
#include "backend/cpu/kernels.h"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_device.h"
#include "checkpoint/dist_checkpoint.h"
#include "checkpoint/gpt_checkpoint.h"
#include "comm/comm.h"
#include "comm/mpi_backend.h"
#include "comm/nccl_backend.h"
#include "comm/watchdog.h"
#include "core/run_dir.h"
#include "core/xalloc.h"
#include "distributed/finalize_model_grads.h"
#include "reports/conditions.h"
#include "reports/memory_report.h"
#include "reports/metrics_log.h"
#include "reports/pipeline_summary.h"
#include "reports/tensor_dump.h"
#include "training_dump.h"

static tb_group *group(tb_rank *rk, tb_group_kind k) { return rk->world ? &rk->groups[k] : NULL; }
static double ms_since(int64_t t0) { return (double)(tb_now_ns() - t0) / 1e6; }

// ---------------------------------------------------------------------------------------
// Setup (Megatron's setup_model_and_optimizer and the data iterator)

// The models' gradient-ready hook: DistributedDataParallel's (a no-op without overlap).
static void grads_ready(void *ctx, int chunk, int site) { ddp_site_ready(ctx, chunk, site); }
static void params_needed(void *ctx, int chunk, int site) { ddp_params_needed(ctx, chunk, site); }

// --load: a checkpoint directory (the whole state, resharded to this layout) or safetensors.
static int load(tb_trainer *tr, tb_error *err) {
    const tb_config *cfg = tr->cfg;
    for (int c = 0; c < tr->nchunks; c++) gpt_params_whole(&tr->models[c]);  // (Megatron-FSDP: fsdp_init shards)
    if (dist_checkpoint_is_dir(cfg->load)) {
        dist_ckpt_state s = {tr->rk, cfg, tr->models, tr->opts, tr->nchunks};
        if (dist_checkpoint_load(&s, cfg->load, &tr->start_iteration, err) != 0) return tb_fail_prefix(err, "flag --load");
        return 0;
    }
    struct stat st;
    if (stat(cfg->load, &st) == 0 && S_ISDIR(st.st_mode))
        return tb_fail(err, "flag --load %s: a directory without " TB_CKPT_LATEST " or " TB_CKPT_METADATA
                       ": not a checkpoint (a --save directory, one of its iter_NNNNNNN, or a safetensors file is "
                       "expected)", cfg->load);
    if (cfg->num_experts > 0)
        return tb_fail(err, "flag --load %s with num_experts %d: not supported yet (GPT-2 files have no experts; "
                       "a checkpoint directory of --save holds them)", cfg->load, cfg->num_experts);
    if (cfg->pipeline_model_parallel_size > 1)
        return tb_fail(err, "flag --load with pipeline_model_parallel_size %d: not supported yet",
                       cfg->pipeline_model_parallel_size);
    if (gpt_load_safetensors(&tr->models[0], cfg->load, err) != 0) return tb_fail_prefix(err, "flag --load");
    return 0;
}

int trainer_init(tb_trainer *tr, const tb_config *cfg, tb_rank *rk, tb_error *err) {
    memset(tr, 0, sizeof *tr);
    tr->rk = rk;
    tr->cfg = cfg;
    // the data and the step's tokens are read on the host: rk->mem is the device's under --device cuda
    tr->host = rk->mem;
    if (!tb_be()->host) {
        tb_allocator_init(&tr->host_mem, 0, memory_report_oom, rk);
        tr->host = &tr->host_mem;
    }
    int rc = cfg->data_path[0] ? tb_gpt_dataset_open_file(&tr->data, tr->host, cfg->data_path, cfg->seq_length,
                                                          cfg->vocab_size, err)
                               : tb_gpt_dataset_open_synthetic(&tr->data, (uint64_t)cfg->seed, cfg->seq_length,
                                                               cfg->vocab_size, tr->host, err);
    if (rc != 0) return tb_fail_prefix(err, "flag --data-path");

    // this rank's chunks: virtual stage k = c·pp + pp_rank, with the layers the split gives it
    const int p = cfg->pipeline_model_parallel_size, r = rk->coords.pp, M = cfg->num_microbatches;
    const int v = cfg->virtual_pipeline_model_parallel_size > 1 ? cfg->virtual_pipeline_model_parallel_size : 1;
    int layers[TB_MAX_PIPELINE_STAGES];
    if (config_pipeline_split(cfg, layers, err) < 0) {
        tb_gpt_dataset_close(&tr->data, tr->host);
        return -1;
    }
    tr->nchunks = v;
    tr->models = tb_xcalloc((size_t)v, sizeof *tr->models, "model chunks");
    tr->opts = tb_xcalloc((size_t)v, sizeof *tr->opts, "optimizers of the model chunks");
    const tb_group *dp = group(rk, TB_GROUP_DP_CP);
    for (int c = 0; c < v; c++) {
        int k = c * p + r, first = 0;
        for (int j = 0; j < k; j++) first += layers[j];
        gpt_chunk_spec spec = {first, layers[k], k == 0, k == p * v - 1, M, group(rk, TB_GROUP_EP),
                               group(rk, TB_GROUP_ETP)};
        TB_RANGE_PUSH("setup.model.chunk.%d", c);
        gpt_model_init_chunk(&tr->models[c], cfg, rk->mem, group(rk, TB_GROUP_TP), spec);
        TB_RANGE_POP();
        // the distributed optimizer's shard: this rank's slice of every DDP bucket; with the
        // experts' replicas apart, the experts' range its own buckets, sliced over expert-dp
        const gpt_model *m = &tr->models[c];
        tb_group *edp = gpt_experts_apart(cfg) && m->expert_parameters > 0 ? group(rk, TB_GROUP_EXPERT_DP) : NULL;
        size_t *cuts = NULL;
        int ncuts = 0;
        if (config_shards_optimizer(cfg) && ((dp && dp->size > 1) || (edp && edp->size > 1)))
            ncuts = ddp_chunk_cuts(m, cfg, rk, 1, &cuts);
        TB_RANGE_PUSH("setup.optimizer.chunk.%d", c);
        adamw_init_expert_parallel(&tr->opts[c], cfg, m->padded_parameters, dp ? dp->index : 0, dp ? dp->size : 1,
                                   edp ? m->experts_offset : m->padded_parameters, edp, cuts, ncuts, rk->mem);
        TB_RANGE_POP();
        free(cuts);
    }
    if (cfg->load[0]) {
        TB_RANGE_PUSH("setup.load");
        rc = load(tr, err);
        TB_RANGE_POP();
        if (rc != 0) {
            trainer_free(tr);
            return -1;
        }
    }
    for (int c = 0; c < tr->nchunks; c++) {
        tr->models[c].chunk_index = c;
        tr->models[c].grads_ready = grads_ready;
        tr->models[c].grads_ready_ctx = &tr->ddp;
        tr->models[c].params_needed = params_needed;
        // a fault drill's hooks at the model's fault sites (NULL in a normal run)
        tr->models[c].block.d.tp.faults = rk->world ? tb_drills_fault_hooks(&rk->world->drills) : NULL;
    }
    ddp_init(&tr->ddp, cfg, rk, tr->models, tr->opts, tr->nchunks);
    tr->dump = tensor_dump_create(rk);
    tb_group *cp = group(rk, TB_GROUP_CP);
    for (int c = 0; c < tr->nchunks; c++) {
        tr->models[c].block.d.forward_hook = tensor_dump_hook(tr->dump);
        transformer_layer_set_context_parallel(&tr->models[c].block.d, &tr->models[c].block.ws, cp, cp ? cp->index : 0);
    }
    const int cp_size = cfg->context_parallel_size > 1 ? cfg->context_parallel_size : 1;
    size_t tokens = (size_t)M * cfg->micro_batch_size * (cfg->seq_length / cp_size);
    if (cfg->fp16) tb_grad_scaler_init(&tr->scaler);
    tr->inputs = tb_alloc(tr->host, TB_MEM_WORKSPACE, tokens * sizeof(int32_t), "batch inputs");
    tr->targets = tb_alloc(tr->host, TB_MEM_WORKSPACE, tokens * sizeof(int32_t), "batch targets");
    TB_RANGE_PUSH("setup.pipeline");
    pipeline_init(&tr->pipeline, cfg, rk, tr->models, tr->nchunks);
    TB_RANGE_POP();
    return 0;
}

void trainer_free(tb_trainer *tr) {
    ddp_free(&tr->ddp);  // first: its thread may still be in a call on the buffers below
    dist_checkpoint_writer_free(&tr->ckpt);
    tensor_dump_free(tr->dump);
    tb_free(tr->host, tr->inputs);
    tb_free(tr->host, tr->targets);
    pipeline_free(&tr->pipeline);
    for (int c = 0; c < tr->nchunks; c++) {
        adamw_free(&tr->opts[c]);
        gpt_model_free(&tr->models[c]);
    }
    free(tr->models);
    free(tr->opts);
    tb_gpt_dataset_close(&tr->data, tr->host);
    if (tr->host == &tr->host_mem) tb_allocator_free_all(&tr->host_mem);
    memset(tr, 0, sizeof *tr);
}

// ---------------------------------------------------------------------------------------
// One step

// The step's microbatches of this data-parallel rank (Megatron's get_batch). Global sample
// index: step-major, then microbatch, then dp rank, then row.
static void get_batch(tb_trainer *tr, int64_t step) {
    const tb_config *cfg = tr->cfg;
    const int B = cfg->micro_batch_size, T = cfg->seq_length;
    const int dp_rank = tr->rk->world ? tr->rk->groups[TB_GROUP_DP].index : 0;
    const tb_layer_dims *d = &tr->models[0].block.d;
    const int Tl = d->T;  // T / cp: with context parallelism, this rank's zig-zag chunks of each sample
    int32_t *in = d->cp ? tb_xmalloc((size_t)T * sizeof *in, "full sample") : NULL;
    int32_t *tg = d->cp ? tb_xmalloc((size_t)T * sizeof *tg, "full sample") : NULL;
    for (int mb = 0; mb < cfg->num_microbatches; mb++) {
        uint64_t first = (uint64_t)(step - 1) * cfg->global_batch_size +
                         (uint64_t)mb * B * cfg->data_parallel_size + (uint64_t)dp_rank * B;
        for (int b = 0; b < B; b++) {
            int32_t *li = tr->inputs + ((size_t)mb * B + b) * Tl, *lt = tr->targets + ((size_t)mb * B + b) * Tl;
            if (!d->cp) {
                tb_gpt_dataset_get_sample(&tr->data, first + b, li, lt);
                continue;
            }
            tb_gpt_dataset_get_sample(&tr->data, first + b, in, tg);
            const int32_t *pos = tr->models[0].block.ws.cp_pos_host;
            for (int t = 0; t < Tl; t++) li[t] = in[pos[t]], lt[t] = tg[pos[t]];
        }
    }
    free(in);
    free(tg);
}

// The parameters may have changed (an update, its all-gather, a load): a device's 16-bit weight copies are stale.
static void params_changed(tb_trainer *tr) {
    for (int c = 0; c < tr->nchunks; c++)
        tb_be()->params_changed(tr->models[c].param_memory, tr->models[c].padded_parameters);
}

// Clip, AdamW, and (distributed optimizer) the all-gather of the updated parameters — unless
// --overlap-param-gather leaves it to the communication thread (train_step). Returns the
// milliseconds of the all-gather (communication the rank waited for).
static double optimizer_step(tb_trainer *tr, int64_t step, tb_step_result *r) {
    tb_rank *rk = tr->rk;
    TB_RANGE_PUSH("optimizer");
    TB_RANGE_PUSH("optimizer.clip_grads");
    r->grad_norm = clip_grads_global_norm_parallel(tr->models, tr->opts, tr->nchunks, rk);
    // --fp16: the gradients carry the loss scale; an overflow (the world's norm is not finite)
    // skips the update (Megatron's found_inf); else the scale is divided out of the norm and,
    // through AdamW's grad_scale, out of the gradients
    const int fp16 = tr->cfg->fp16;
    float unscale = 1.0f;
    if (fp16) {
        r->loss_scale = tr->scaler.scale;
        r->skipped = !isfinite(r->grad_norm);
        tb_grad_scaler_update(&tr->scaler, r->skipped);
        unscale = 1.0f / (float)r->loss_scale;
        if (!r->skipped) r->grad_norm *= unscale;
    }
    float clip = clip_grads_coefficient(r->grad_norm, tr->cfg->clip_grad);
    TB_RANGE_POP();
    TB_RANGE_PUSH("optimizer.adamw");
    r->lr = lr_at_step(tr->cfg, step);
    for (int c = 0; c < tr->nchunks && !r->skipped; c++) {
        gpt_model *m = &tr->models[c];
        adamw_step(&tr->opts[c], m->params, m->nparams, m->param_memory, m->grad_memory, fp16 ? clip * unscale : clip,
                   (float)r->lr);
    }
    TB_RANGE_POP();
    const int64_t t0 = tb_now_ns();
    for (int c = 0; c < tr->nchunks && !tr->ddp.param_gather && !tr->ddp.fsdp.shard_params; c++) {
        if (!tr->opts[c].sharded) continue;
        TB_RANGE_PUSH("optimizer.all_gather_params");
        adamw_shard_all_gather_inplace(&tr->opts[c], &rk->groups[TB_GROUP_DP_CP], tr->models[c].param_memory);
        TB_RANGE_POP();
    }
    params_changed(tr);
    TB_RANGE_POP();
    return ms_since(t0);
}

// The global batch's loss: from the last pipeline stage, averaged over data-parallel ranks.
static double average_loss(tb_rank *rk, double stage_loss) {
    tb_group *pp = group(rk, TB_GROUP_PP), *dp = group(rk, TB_GROUP_DP_CP);
    if (!((pp && pp->size > 1) || (dp && dp->size > 1))) return stage_loss;
    TB_RANGE_PUSH("loss_average");
    float loss = (float)stage_loss;
    if (pp && pp->size > 1) tb_all_reduce(pp, &loss, 1, TB_RED_SUM);
    if (dp && dp->size > 1) tb_all_reduce(dp, &loss, 1, TB_RED_SUM);
    TB_RANGE_POP();
    return loss / (dp ? dp->size : 1);
}

// Training stops after `step` (--exit-interval).
static int exits_after(const tb_config *cfg, int64_t step) {
    return cfg->exit_interval > 0 && step % cfg->exit_interval == 0;
}

// A checkpoint is saved after `step`: each --save-interval, the last step, an exit.
static int saves_after(const tb_config *cfg, int64_t step) {
    return cfg->save[0] && ((cfg->save_interval > 0 && step % cfg->save_interval == 0) || step >= cfg->train_iters ||
                            exits_after(cfg, step));
}

// Whether anything reads the parameters (or calls the dp group) after the step, before the
// next one's forward: a tensor dump, a checkpoint, the end of training.
static int params_read_after(const tb_trainer *tr, int64_t step) {
    const tb_config *cfg = tr->cfg;
    return step >= cfg->train_iters || exits_after(cfg, step) || tensor_dump_wants(tr->dump, step) ||
           saves_after(cfg, step);
}

tb_step_result train_step(tb_trainer *tr, int64_t step) {
    tb_rank *rk = tr->rk;
    const tb_backend *be = tb_be();
    tb_step_result r;
    memset(&r, 0, sizeof r);
    rk->step = step;

    TB_RANGE_PUSH("train_step");
    tb_range_annotate(step, -1);
    tensor_dump_arm(tr->dump, step);
    params_changed(tr);  // a load, or --overlap-param-gather's gathers (waited for before each layer's GEMMs)
    for (int c = 0; c < tr->nchunks; c++) {
        gpt_zero_grad(&tr->models[c]);
        if (tr->models[c].block.moe_stats.num_layers) moe_stats_reset(&tr->models[c].block.moe_stats);
    }
    int64_t t0 = tb_now_ns();
    TB_RANGE_PUSH("data");
    get_batch(tr, step);
    if (rk->world) tb_drills_slow_data(&rk->world->drills, rk->rank);  // --debug-slow-data
    TB_RANGE_POP();
    r.time.data_ms = ms_since(t0);
    ddp_start_step(&tr->ddp);
    // on a device (kernels are asynchronous) the phases are timed by CUDA events on the rank's
    // stream, which end when the phase's work has; on the CPU by the host clock
    t0 = tb_now_ns();
    if (tr->cfg->fp16) tr->pipeline.grad_scale = tr->scaler.scale;
    if (be->phase_begin) be->phase_begin();
    double stage_loss = forward_backward_func(&tr->pipeline, tr->inputs, tr->targets, &r.time);
    r.nonfinite_microbatch = tr->pipeline.nonfinite_microbatch;
    r.time.pipeline_ms = be->phase_end_ms ? be->phase_end_ms() : ms_since(t0);

    t0 = tb_now_ns();
    if (be->phase_begin) be->phase_begin();
    for (int c = 0; c < tr->nchunks; c++) finalize_model_grads(&tr->models[c], rk, &tr->opts[c], &tr->ddp);
    ddp_finish_grad_sync(&tr->ddp);
    // all of it is gradient reduction the rank waited for (none of it hides under compute)
    r.time.exposed_comm_ms = ms_since(t0) + tr->ddp.rank_reduce_ms;
    training_dump_grads(tr->dump, tr->models, tr->opts, tr->nchunks, &tr->ddp);
    r.time.exposed_comm_ms += optimizer_step(tr, step, &r);
    r.time.optimizer_ms = be->phase_end_ms ? be->phase_end_ms() : ms_since(t0);

    r.loss = average_loss(rk, stage_loss / tr->cfg->num_microbatches);
    // --overlap-param-gather: the updated parameters' all-gather runs under the next step's
    // data and forward; a step after which they are read (a dump, a save, the end) waits for it
    // here, inside the step's time
    ddp_start_param_gather(&tr->ddp, step);
    if (params_read_after(tr, step)) ddp_finish_param_gather(&tr->ddp);
    // the forward's waits for the previous step's gathers, and this one's
    r.time.exposed_comm_ms += tr->ddp.param_wait_ms;
    TB_RANGE_POP();
    return r;
}

// ---------------------------------------------------------------------------------------
// The loop, on every rank

// Parameters this rank counts toward the whole model's N: tp-replicated tensors on tp rank 0
// only, the tied embedding's second copy never, one data-parallel replica. n[0]: dense, n[1]: MoE.
static void counted_parameters(const tb_trainer *tr, int64_t n[2]) {
    const tb_rank *rk = tr->rk;
    n[0] = n[1] = 0;
    // one replica: of the dense parameters, dp-cp rank 0's; of the experts', expert-dp rank 0's
    const int dense_replica = !rk->world || rk->groups[TB_GROUP_DP_CP].index == 0;
    const int expert_replica = !rk->world || rk->groups[TB_GROUP_EXPERT_DP].index == 0;
    for (int k = 0; k < tr->nchunks; k++)
        for (int i = 0; i < tr->models[k].nparams; i++) {
            const gpt_param *p = &tr->models[k].params[i];
            if (!gpt_param_tp_counted(p, rk->coords.tp, rk->world ? rk->groups[TB_GROUP_ETP].index : 0)) continue;
            if (!(p->expert ? expert_replica : dense_replica)) continue;
            n[p->expert ? 1 : 0] += (int64_t)p->numel;
        }
}

// Model FLOPs per token of the whole model: N summed exactly over the world.
static double model_flops_per_token(tb_trainer *tr) {
    tb_rank *rk = tr->rk;
    int64_t mine[2], total[2];
    counted_parameters(tr, mine);
    total[0] = mine[0], total[1] = mine[1];
    if (rk->world && rk->world_size > 1) {
        int64_t *all = tb_xcalloc((size_t)rk->world_size * 2, sizeof *all, "parameter counts of the world");
        tb_all_gather_bytes(&rk->groups[TB_GROUP_WORLD], mine, all, sizeof mine);
        total[0] = total[1] = 0;
        for (int r = 0; r < rk->world_size; r++) total[0] += all[2 * r], total[1] += all[2 * r + 1];
        free(all);
    }
    const tb_config *c = tr->cfg;
    return gpt_flops_per_token(gpt_active_parameters(total[0], total[1], c), c->num_layers, c->hidden_size,
                               c->seq_length);
}

// What this rank holds and computes per step (its pipeline stage's chunks, its TP share of them).
static stage_figures stage_figures_of(const tb_trainer *tr) {
    const tb_config *c = tr->cfg;
    stage_figures f = {0, 0, 0, (int64_t)tr->rk->mem->stats.peak[TB_MEM_ACTIVATIONS]};
    const double tokens = (double)c->num_microbatches * c->micro_batch_size * c->seq_length;
    for (int k = 0; k < tr->nchunks; k++) {
        f.parameters += (int64_t)tr->models[k].num_parameters;
        f.layers += tr->models[k].chunk.num_layers;
        f.flops_per_step += tokens * gpt_chunk_flops_per_token(&tr->models[k]);
    }
    return f;
}

// Megatron's --check-for-nan-in-loss-and-grad: a NaN or Inf loss or gradient norm stops the
// run (after its metrics line is written), naming the step, the microbatch where this rank
// first saw it, and the rank. Every rank sees the global loss and norm, so all stop together.
static int check_finite(const tb_rank *rk, int64_t step, const tb_step_result *r, tb_error *err) {
    // (--fp16: an overflowed gradient is the loss scaler's, which skipped the step)
    if (isfinite(r->loss) && (isfinite(r->grad_norm) || r->skipped)) return 0;
    char where[160] = "";
    if (r->nonfinite_microbatch >= 0)
        snprintf(where, sizeof where, " (first in microbatch %d of this rank's stage)", r->nonfinite_microbatch);
    return tb_fail(err, "step %lld: loss %g, gradient norm %g%s%s%s: training stopped "
                   "(--no-check-for-nan-in-loss-and-grad trains on)",
                   (long long)step, r->loss, r->grad_norm, where, rk->world_size > 1 ? "" : " on ",
                   rk->world_size > 1 ? "" : rk->label);
}

// The rank threads of this process, and the ranks on this host: under mpirun the processes
// Open MPI says share this node (OMPI_COMM_WORLD_LOCAL_SIZE; all of them when it does not say).
static int ranks_in_process(const tb_rank *rk) { return rk->world ? rk->world->local_count : 1; }

static int ranks_on_host(const tb_rank *rk) {
    return tb_launch_processes_on_host(rk->world ? rk->world->processes : 1) * ranks_in_process(rk);
}

// conditions.json, by rank 0; every rank calls it. Under mpirun the run's other processes
// are not "other processes" of the host: their CPU time is summed over the world (one value
// per process) and counted as the run's. The threads are rank 0's: every rank of a run has
// the same policy.
static int write_conditions(tb_rank *rk, const conditions_sample *first, const conditions_sample *last,
                            tb_ddp *ddp, const dist_ckpt_writer *ckpt, tb_error *err) {
    // the time this rank's threads waited for a core (its thread, its background threads);
    // the rank that waited most speaks for the run (-1 from any rank: unknown)
    const double comm_wait = ddp_thread_run_delay_s(ddp), own_wait = conditions_run_delay_between_s(first, last);
    float wait = own_wait < 0 || comm_wait < 0 || ckpt->writers_run_delay_s < 0
                     ? -1.0f
                     : (float)(own_wait + comm_wait + ckpt->writers_run_delay_s);
    if (rk->world_size > 1) {
        float unknown = wait < 0 ? 1.0f : 0.0f;
        float both[2] = {wait, unknown};
        tb_all_reduce(&rk->groups[TB_GROUP_WORLD], both, 2, TB_RED_MAX);
        wait = both[1] > 0 ? -1.0f : both[0];
    }
    float others = 0;
    if (rk->world && rk->world->processes > 1) {
        others = rk->rank == rk->world->local_first && rk->rank != 0
                     ? (float)(last->process_cpu_s - first->process_cpu_s) : 0.0f;
        tb_all_reduce(&rk->groups[TB_GROUP_WORLD], &others, 1, TB_RED_SUM);
    }
    if (rk->rank != 0) return 0;
    char chosen_by[64];
    if (rk->cfg->num_threads > 0) snprintf(chosen_by, sizeof chosen_by, "--num-threads %d", rk->cfg->num_threads);
    else if (ranks_in_process(rk) > 1) snprintf(chosen_by, sizeof chosen_by, "1 per rank thread");
    else if (ranks_on_host(rk) > 1)
        snprintf(chosen_by, sizeof chosen_by, "the usable cores / %d ranks on the host", ranks_on_host(rk));
    else snprintf(chosen_by, sizeof chosen_by, "the usable cores");
    // a rank's background threads (distributed_data_parallel.c, dist_checkpoint.c)
    const int async_writer = rk->cfg->async_save && rk->cfg->save[0];
    const int comm_thread = rk->cfg->overlap_grad_reduce && rk->groups[TB_GROUP_DP_CP].size > 1;
    const char *background = async_writer && comm_thread ? "async checkpoint writer, gradient-reduce communication"
                             : async_writer              ? "async checkpoint writer"
                             : comm_thread               ? "gradient-reduce communication"
                                                         : "";
    conditions_threads t = {
        .ranks = ranks_on_host(rk),
        .openmp_per_rank = cpu_get_num_threads(),
        .blas_per_rank = cpu_get_blas_num_threads(),
        .background_per_rank = async_writer + comm_thread,
        .background = background,
        .chosen_by = chosen_by,
        .wait_reason = cpu_openmp_wait_policy_reason(),
        .run_others_cpu_s = others,
        .run_queue_wait_s = wait,
        .run_queue_unmeasured = cpu_get_num_threads() > 1 || cpu_get_blas_num_threads() > 1
                                    ? "the OpenMP and OpenBLAS worker threads of the kernels"
                                    : "",
        .mpi_collectives = rk->world && rk->world->processes > 1
                               ? (rk->cfg->mpi_collectives == TB_MPI_COLLECTIVES_EXACT ? "exact" : "native")
                               : NULL,
    };
    if (t.run_queue_unmeasured[0]) t.run_queue_wait_s = -1;
    t.wait_policy = cpu_openmp_wait_policy(&t.wait_source);
    return conditions_write(rk->run_dir, &t, first, last, err);
}

static int save_checkpoint(tb_trainer *tr, int64_t step, tb_error *err) {
    dist_ckpt_state s = {tr->rk, tr->cfg, tr->models, tr->opts, tr->nchunks};
    if (dist_checkpoint_save(&s, &tr->ckpt, tr->cfg->save, step, err) != 0) return tb_fail_prefix(err, "flag --save");
    return 0;
}

// The step's MoE load statistics of this rank's layers (metrics "moe"), NULL without experts.
static json_t *moe_step_json(const tb_trainer *tr) {
    if (tr->cfg->num_experts <= 0) return NULL;
    moe_stats all;
    moe_stats_init(&all, tr->cfg->num_layers, tr->cfg->num_experts);
    for (int c = 0; c < tr->nchunks; c++) moe_stats_add(&all, &tr->models[c].block.moe_stats);
    const int lb = tr->cfg->moe_router_load_balancing_type;
    json_t *j = moe_stats_json(&all, lb == TB_MOE_LB_AUX_LOSS || lb == TB_MOE_LB_SEQ_AUX_LOSS);
    moe_stats_free(&all);
    return j;
}

static int train(tb_trainer *tr, metrics_log *log, tb_error *err) {
    tb_rank *rk = tr->rk;
    const tb_config *cfg = tr->cfg;
    const int lead = rk->rank == 0;
    if (metrics_log_open(log, rk->run_dir, rk->rank, err) != 0) return -1;
    if (lead) print_run_header(cfg, &tr->models[0], rk->run_dir);
    const double flops_per_token = model_flops_per_token(tr);
    const int64_t tokens_per_step = (int64_t)cfg->global_batch_size * cfg->seq_length;
    stage_totals totals;
    memset(&totals, 0, sizeof totals);
    // the measurement conditions, sampled between steps (outside the timed window)
    conditions_sample first, before, after;
    conditions_sample_now(&first);
    before = first;

    int rc = 0;
    for (int64_t step = tr->start_iteration + 1; step <= cfg->train_iters && rc == 0; step++) {
        int64_t t0 = tb_now_ns();
        tb_step_result r = train_step(tr, step);
        double seconds = (double)(tb_now_ns() - t0) / 1e9;
        conditions_sample_now(&after);
        // throughput is set by the slowest rank
        float slowest = (float)seconds;
        if (rk->world_size > 1) tb_all_reduce(&rk->groups[TB_GROUP_WORLD], &slowest, 1, TB_RED_MAX);
        step_metrics s = {step, r.loss, r.lr, r.grad_norm, seconds * 1e3, slowest * 1e3,
                          (double)tokens_per_step / slowest, 0, 0, r.loss_scale, r.skipped};
        s.tflops = flops_per_token * (double)tokens_per_step / slowest / 1e12 / rk->world_size;
        s.mfu = cfg->peak_tflops > 0 ? s.tflops / cfg->peak_tflops : 0;
        json_t *timeline = pipeline_timeline_json(cfg, rk->coords.pp, tr->nchunks, &r.time, seconds * 1e3);
        if (step > 1 || cfg->train_iters == 1) stage_totals_add(&totals, &r.time, seconds * 1e3);
        rc = metrics_log_write(log, &s, cfg, rk->mem, timeline, conditions_step_json(&before, &after),
                               moe_step_json(tr), err);
        before = after;
        if (rc == 0 && lead && (step % cfg->log_interval == 0 || step == cfg->train_iters)) print_step_line(&s);
        if (rc == 0 && cfg->check_for_nan_in_loss_and_grad) rc = check_finite(rk, step, &r, err);
        if (rc == 0 && training_dump_finish(tr->dump, tr->models, tr->opts, tr->nchunks, r.lr, r.loss, err) != 0)
            rc = tb_fail_prefix(err, "flag --dump-tensors");
        if (rc == 0 && saves_after(cfg, step)) rc = save_checkpoint(tr, step, err);
        if (rc == 0) rc = tb_ranges_spill(rk->ranges, err) || ddp_trace_spill(&tr->ddp, err) ? -1 : 0;
        if (exits_after(cfg, step)) break;
    }
    if (rc == 0) {  // an async save still writing
        dist_ckpt_state s = {rk, cfg, tr->models, tr->opts, tr->nchunks};
        if (dist_checkpoint_finish(&s, &tr->ckpt, err) != 0) rc = tb_fail_prefix(err, "flag --save");
    }
    if (metrics_log_close(log, rc == 0 ? err : NULL) != 0) rc = -1;
    // the run's conditions span its steps and the completion of its last (async) save, so that
    // the writer thread's wait for a core falls inside the window it is judged against
    conditions_sample end;
    conditions_sample_now(&end);
    if (rc == 0) rc = write_conditions(rk, &first, &end, &tr->ddp, &tr->ckpt, err);
    if (rc != 0) return -1;
    stage_figures mine = stage_figures_of(tr);
    return pipeline_summary_write(rk, cfg, &mine, &totals, err);
}

// What one rank holds for its run, kept outside its stack: a rank that fails part way
// unwinds (parallel_state_rank_fail), and what it held is freed after every rank stopped.
typedef struct rank_run {
    int status;        // 0, or the TB_EXIT_* status it failed with
    tb_error err;
    int unwound;       // failed below its top; its state is freed by pretrain after the join
    tb_trainer tr;
    metrics_log log;
    // --device cuda: the rank's GPU (its stream, cuBLASLt handle) and the device memory its
    // allocator draws from; the world's NCCL unique ids (several ranks)
    tb_cuda_context cuda;
    tb_mem_device device_memory;
    int on_device, on_nccl;
    const tb_nccl_ids *nccl_ids;
} rank_run;

// A CUDA call of the rank that failed: the rank fails as from any other error below its top.
static void cuda_failed(void *arg, const char *msg) { parallel_state_rank_fail(arg, TB_EXIT_FAILURE, "%s", msg); }

// --device cuda: the rank on GPU rank mod the visible count (backend/cuda/cuda_backend.h), its
// allocator on that device, the CUDA table bound to its thread, its groups on NCCL.
static int rank_setup_device(tb_rank *rk, rank_run *run, tb_error *err) {
    const tb_config *cfg = rk->cfg;
    if (cfg->device != TB_DEVICE_CUDA) return 0;
    char why[256] = "";
    const int n = tb_cuda_device_count(why, sizeof why);
    if (n <= 0) return tb_fail(err, "--device cuda: no GPU is visible (%s)", why);
    const int device = parallel_state_rank_on_host(rk) % n;
    if (tb_cuda_context_init(&run->cuda, device, 0, err) != 0) return tb_fail_prefix(err, "--device cuda");
    tb_cuda_mem_device(&run->device_memory, &run->cuda);
    tb_allocator_set_device(rk->mem, &run->device_memory);
    // cuBLASLt's workspace is the rank's memory like any other (the report, the cap, the OOM report)
    run->cuda.workspace = tb_alloc(rk->mem, TB_MEM_WORKSPACE, TB_CUDA_WORKSPACE_BYTES, "cuBLASLt workspace");
    run->cuda.workspace_bytes = TB_CUDA_WORKSPACE_BYTES;
    const tb_cuda_precision precision = cfg->bf16 ? TB_CUDA_BF16_GEMMS : cfg->fp16 ? TB_CUDA_FP16_GEMMS : TB_CUDA_FP32;
    tb_cuda_backend_bind(&run->cuda, rk->mem, precision, cuda_failed, rk);
    tb_backend_bind(tb_backend_cuda());
    run->on_device = 1;
    if (run->nccl_ids) {
        if (tb_nccl_rank_init(rk, run->nccl_ids, err) != 0) return tb_fail_prefix(err, "--device cuda: NCCL");
        tb_nccl_rank_set_compute_stream(rk, run->cuda.stream);
        run->on_nccl = 1;
    }
    return 0;
}

// The rank's thread, after its tensors are freed.
static void rank_teardown_device(tb_rank *rk, rank_run *run) {
    if (run->on_nccl) tb_nccl_rank_destroy(rk);
    run->on_nccl = 0;
}

static void rank_setup(tb_rank *rk) {
    // the thread policy (backend/cpu/kernels.h): the rank threads of this process, the ranks on this host
    cpu_set_num_threads(cpu_threads_per_rank(rk->cfg->num_threads, ranks_in_process(rk), ranks_on_host(rk)));
    tb_allocator_init(rk->mem, (size_t)rk->cfg->memory_cap, memory_report_oom, rk);
    tb_allocator_set_caching(rk->mem, 1);
    const int64_t origin = rk->world ? rk->world->origin_ns : tb_now_ns();
    tb_ranges_init(rk->ranges, rk->rank, rk->world_size, rk->label, origin, 1);
    tb_ranges_spill_to(rk->ranges, rk->run_dir);
    tb_ranges_bind(rk->ranges);
}

static void rank_teardown(tb_rank *rk, rank_run *run) {
    metrics_log_close(&run->log, NULL);
    if (run->tr.rk) trainer_free(&run->tr);
    if (!run->unwound && run->on_device) {  // (an unwound rank's thread is gone, and its binding with it)
        tb_cuda_backend_bind(NULL, NULL, TB_CUDA_FP32, NULL, NULL);
        tb_backend_bind(NULL);
    }
    tb_allocator_free_all(rk->mem);  // what was in flight when a failing rank unwound
    tb_allocator_release_cache(rk->mem);
    if (!run->unwound) rank_teardown_device(rk, run);
    if (run->on_device) tb_cuda_context_free(&run->cuda);
    run->on_device = 0;
    tb_ranges_free(rk->ranges);
}

// A rank's whole run: its trainer, training, and its files.
static int rank_train(tb_rank *rk, rank_run *run) {
    const tb_config *cfg = rk->cfg;
    const int lead = rk->rank == 0;
    tb_error *err = &run->err;
    // the setup's allocations are on the range stack too (an OOM report names where)
    TB_RANGE_PUSH("setup");
    int rc = rank_setup_device(rk, run, err);
    if (rc == 0) rc = trainer_init(&run->tr, cfg, rk, err);
    TB_RANGE_POP();
    if (rc != 0) return -1;
    rc = train(&run->tr, &run->log, err);
    if (rc == 0 && cfg->save_hf[0]) {
        if (gpt_save_safetensors(&run->tr.models[0], cfg->save_hf, lead, err) != 0)
            rc = tb_fail_prefix(err, "flag --save-hf");
        else if (lead)
            printf("\nsaved weights: %s\n", cfg->save_hf);
    }
    if (rc == 0) rc = memory_snapshot_write(rk, err);
    if (rc == 0) {
        char path[TB_PATH_MAX + 64];
        rc = tb_rank_file_path(path, sizeof path, rk->run_dir, TB_RANK_TRACE, rk->rank, err);
        const tb_ddp *ddp = &run->tr.ddp;
        if (rc == 0)
            rc = tb_ranges_write_chrome_tracks(rk->ranges, ddp_active(ddp) ? &ddp->ranges : NULL,
                                               "ddp communication", path, err);
    }
    if (rc == 0 && lead) print_run_footer(rk);
    return rc;
}

static void rank_main(tb_rank *rk, void *arg) {
    rank_run *run = (rank_run *)arg + rk->rank;
    jmp_buf unwind;
    rank_setup(rk);
    if (setjmp(unwind) == 0) {
        rk->failure.unwind = &unwind;
        run->status = rank_train(rk, run) == 0 ? 0 : TB_EXIT_FAILURE;
        rk->failure.unwind = NULL;
        if (run->status != 0 && rk->world) parallel_state_abort(rk->world, rk, run->status);
        // a rank that ends by itself, failed or not, has left every collective it entered
        rank_teardown(rk, run);
    } else {
        rk->failure.unwind = NULL;
        run->unwound = 1;
        run->status = rk->failure.status;
        run->err = rk->failure.err;
    }
    tb_ranges_bind(NULL);
}

// The rank whose failure the run reports: the one that aborted the world, else the first failed.
static int failed_rank(tb_world *w, const rank_run *runs) {
    int root = parallel_state_aborted_by(w);
    if (root >= 0) return root;
    for (int r = 0; r < w->size; r++)
        if (runs[r].status != 0) return r;
    return -1;
}

// Under mpirun: the groups that span processes onto MPI communicators, every process
// agreeing on the outcome (the creation is collective, so all go on or none does).
static int connect_processes(tb_world *w, const tb_launch *l, tb_error *err) {
    if (!l->mpi) return 0;
    int rc = tb_mpi_world_connect(w, err) != 0 ? TB_EXIT_FAILURE : 0;
    if (tb_launch_agree(l, rc, NULL) == 0) return 0;
    if (rc == 0) {
        tb_mpi_world_disconnect(w);
        tb_fail(err, "process %d: another process could not set up its MPI communicators", l->process);
    }
    return -1;
}

// --device cuda on several ranks: the NCCL unique id of every group, made by the process of
// its first member and, under mpirun, broadcast over the group's MPI communicator (every
// process agreeing on the outcome, as for the MPI communicators).
static int create_nccl_ids(tb_world *w, const tb_launch *l, tb_nccl_ids **ids, tb_error *err) {
    int rc = (l->mpi ? tb_nccl_ids_create_mpi(w, ids, err) : tb_nccl_ids_create(w, ids, err)) != 0;
    if (rc) tb_fail_prefix(err, "--device cuda: NCCL");
    if (!l->mpi || tb_launch_agree(l, rc ? TB_EXIT_FAILURE : 0, NULL) == 0) return rc ? -1 : 0;
    if (!rc) {
        tb_nccl_ids_free(*ids);
        *ids = NULL;
        tb_fail(err, "process %d: another process could not make or receive the NCCL unique ids", l->process);
    }
    return -1;
}

int pretrain(const tb_config *cfg, const tb_launch *launch, tb_error *err) {
    // --device cuda: this build's backend and enough GPUs, or a clear refusal (never the CPU instead)
    tb_launch threads;
    if (!launch) {
        tb_launch_threads(&threads, 0, NULL);
        launch = &threads;
    }
    const int ranks_on_this_host = tb_launch_processes_on_host(launch->processes) * (cfg->world_size / launch->processes);
    if (cfg->device == TB_DEVICE_CUDA && tb_cuda_check_device_flag(cfg, ranks_on_this_host, err) != 0)
        return TB_EXIT_USAGE;
    tb_world world;
    if (parallel_state_world_init_process(&world, cfg, launch->process, launch->processes, &tb_local_backend, err) != 0)
        return TB_EXIT_FAILURE;
    world.origin_ns = tb_now_ns();
    if (tb_launch_setup_run_dir(launch, cfg, world.run_dir, sizeof world.run_dir, err) != 0 ||
        connect_processes(&world, launch, err) != 0) {
        parallel_state_world_free(&world);
        return TB_EXIT_FAILURE;
    }
    tb_nccl_ids *nccl_ids = NULL;  // --device cuda: every group of the world on NCCL
    if (cfg->device == TB_DEVICE_CUDA && world.size > 1 && create_nccl_ids(&world, launch, &nccl_ids, err) != 0) {
        tb_mpi_world_disconnect(&world);
        parallel_state_world_free(&world);
        return TB_EXIT_FAILURE;
    }
    rank_run *runs = tb_xcalloc((size_t)world.size, sizeof *runs, "rank runs");
    for (int r = 0; r < world.size; r++) runs[r].nccl_ids = nccl_ids;
    for (int r = 0; r < world.size; r++)
        snprintf(world.ranks[r].run_dir, sizeof world.ranks[r].run_dir, "%s", world.run_dir);
    // under mpirun a SIGTERM from the launcher (another process failed) leaves a report
    tb_error watch_err;
    if (tb_watchdog_start(&world, &watch_err) != 0) fprintf(stderr, "pretrain_gpt: %s (no report on SIGTERM)\n", watch_err.msg);
    parallel_state_run_ranks(&world, rank_main, runs);
    // an unwound rank's teardown joins its communication thread, which may be blocked in MPI:
    // the watchdog stays until it is done, and stops before the communicators go
    for (int r = 0; r < world.size; r++)
        if (runs[r].unwound) rank_teardown(&world.ranks[r], &runs[r]);
    tb_watchdog_stop(&world);
    tb_mpi_world_disconnect(&world);
    int status = 0, failed = failed_rank(&world, runs);
    if (failed >= 0) {
        status = runs[failed].status;
        if (err) *err = runs[failed].err;
        if (world.size > 1) tb_fail_prefix(err, "%s", world.ranks[failed].label);
    }
    free(runs);
    tb_nccl_ids_free(nccl_ids);
    parallel_state_world_free(&world);
    return status;
}
