#include "training.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "backend/cpu/kernels.h"
#include "checkpoint/gpt_checkpoint.h"
#include "core/fileio.h"
#include "distributed/finalize_model_grads.h"
#include "pipeline_parallel/schedules.h"

// ---------------------------------------------------------------------------------------
// Run directory and reports

static int make_run_dir(const tb_config *cfg, char *out, size_t len, tb_error *err) {
    if (cfg->run_dir[0]) {
        snprintf(out, len, "%s", cfg->run_dir);
    } else {
        char stamp[32];
        time_t now = time(NULL);
        strftime(stamp, sizeof stamp, "%Y%m%dT%H%M%S", localtime(&now));
        snprintf(out, len, "artifacts/adhoc/%s", stamp);
        struct stat st;
        for (int i = 1; stat(out, &st) == 0; i++) snprintf(out, len, "artifacts/adhoc/%s.%d", stamp, i);
    }
    return tb_mkdir_p(out, err);
}

static void rank_file(char *buf, size_t len, const tb_rank *rk, const char *kind, const char *ext) {
    snprintf(buf, len, "%s/%s.rank-%05d.%s", rk->run_dir, kind, rk->rank, ext);
}

static json_t *bytes_by_category(const size_t *bytes) {
    json_t *o = json_object();
    size_t total = 0;
    for (int c = 0; c < TB_MEM_NCATEGORIES; c++) {
        json_object_set_new(o, tb_mem_category_name((tb_mem_category)c), json_integer((json_int_t)bytes[c]));
        total += bytes[c];
    }
    json_object_set_new(o, "total", json_integer((json_int_t)total));
    return o;
}

static int by_bytes_desc(const void *a, const void *b) {
    const tb_mem_block_info *x = a, *y = b;
    return x->bytes < y->bytes ? 1 : x->bytes > y->bytes ? -1 : strcmp(x->what, y->what);
}

static json_t *memory_snapshot_json(tb_rank *rk) {
    tb_allocator *a = &rk->mem;
    qsort(a->snapshot, (size_t)a->nsnapshot, sizeof a->snapshot[0], by_bytes_desc);
    json_t *live = json_array();
    for (int i = 0; i < a->nsnapshot; i++)
        json_array_append_new(live, json_pack("{s:s, s:s, s:I}", "what", a->snapshot[i].what, "category",
                                              tb_mem_category_name(a->snapshot[i].category), "bytes",
                                              (json_int_t)a->snapshot[i].bytes));
    return json_pack("{s:i, s:s, s:I, s:I, s:o, s:o, s:o, s:o, s:I}", "rank", rk->rank, "rank_label",
                     rk->label, "cap_bytes", (json_int_t)a->cap, "total_peak_bytes",
                     (json_int_t)a->stats.total_peak, "at_total_peak", bytes_by_category(a->stats.at_total_peak),
                     "peak_by_category", bytes_by_category(a->stats.peak), "live_at_total_peak", live,
                     "current", bytes_by_category(a->stats.current), "live_not_listed",
                     (json_int_t)a->snapshot_dropped);
}

typedef struct live_list {
    json_t *array;
} live_list;

static void add_live(void *arg, const char *what, tb_mem_category c, size_t bytes) {
    live_list *l = arg;
    json_array_append_new(l->array, json_pack("{s:s, s:s, s:I}", "what", what, "category",
                                              tb_mem_category_name(c), "bytes", (json_int_t)bytes));
}

// The allocator's OOM handler: the report goes to oom.json and stderr, then the run ends.
static void report_oom(void *owner, const tb_allocator *a, tb_mem_category category, size_t bytes,
                       const char *what) {
    tb_rank *rk = owner;
    char stack[1024];
    tb_ranges_stack_string(&rk->ranges, stack, sizeof stack);
    live_list live = {json_array()};
    tb_allocator_each_live(a, add_live, &live);
    json_t *report = json_pack(
        "{s:s, s:i, s:s, s:{s:i, s:i, s:i, s:i}, s:I, s:i, s:s, s:s, s:I, s:s, s:I, s:o, s:o, s:o}", "kind",
        "out_of_memory", "rank", rk->rank, "rank_label", rk->label, "coordinates", "tp", rk->coords.tp, "cp",
        rk->coords.cp, "dp", rk->coords.dp, "pp", rk->coords.pp, "step", (json_int_t)rk->step, "microbatch",
        rk->microbatch, "range_stack", stack, "requested_what", what ? what : "?", "requested_bytes",
        (json_int_t)bytes, "requested_category", tb_mem_category_name(category), "cap_bytes",
        (json_int_t)a->cap, "current", bytes_by_category(a->stats.current), "peak",
        bytes_by_category(a->stats.peak), "live", live.array);
    char path[TB_PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/oom.json", rk->run_dir);
    tb_error err;
    int wrote = tb_write_json_atomic(path, report, &err) == 0;
    json_decref(report);

    fprintf(stderr, "\nOUT OF MEMORY on %s at step %lld, microbatch %d\n", rk->label, (long long)rk->step,
            rk->microbatch);
    fprintf(stderr, "  requested %zu bytes (%s, %s); cap %zu bytes, in use %zu bytes\n", bytes,
            what ? what : "?", tb_mem_category_name(category), a->cap, a->stats.total_current);
    fprintf(stderr, "  range stack: %s\n", stack[0] ? stack : "(none)");
    fprintf(stderr, "  in use by category:");
    for (int c = 0; c < TB_MEM_NCATEGORIES; c++)
        fprintf(stderr, " %s %zu", tb_mem_category_name((tb_mem_category)c), a->stats.current[c]);
    fprintf(stderr, "\n  report: %s\n", wrote ? path : err.msg);
    fflush(NULL);
    exit(3);
}

// ---------------------------------------------------------------------------------------
// The loop

typedef struct stage_totals {
    int64_t steps;
    double forward_ms, backward_ms, p2p_ms, optimizer_ms, pipeline_ms, step_ms;
} stage_totals;

typedef struct step_metrics {
    int64_t step;
    double loss, lr, grad_norm, step_ms, tokens_per_s, tflops, mfu;
} step_metrics;

static void print_header(const tb_config *c, const gpt_model *m, const char *run_dir) {
    printf("pretrain_gpt: GPT %d layers, hidden %d, heads %d (query groups %d), ffn %d%s, %s, seq %d, "
           "vocab %d (padded %d)\n",
           c->num_layers, c->hidden_size, c->num_attention_heads, c->num_query_groups, c->ffn_hidden_size,
           c->swiglu ? " SwiGLU" : " GELU", m->spec.input_layernorm->name, c->seq_length, c->vocab_size,
           c->padded_vocab_size);
    printf("parameters: %.2fM | world %d = tp %d x cp %d x dp %d x pp %d | threads %d | recompute %s%s%s\n",
           (double)m->num_parameters / 1e6, c->world_size, c->tensor_model_parallel_size,
           c->context_parallel_size, c->data_parallel_size, c->pipeline_model_parallel_size,
           cpu_get_num_threads(), config_choice_name("recompute_granularity", c->recompute_granularity),
           c->recompute_granularity == TB_RECOMPUTE_FULL ? " " : "",
           c->recompute_granularity == TB_RECOMPUTE_FULL
               ? config_choice_name("recompute_method", c->recompute_method)
               : "");
    printf("BLAS: %s\n", cpu_blas_name());
    printf("global batch %d = micro batch %d x microbatches %d x dp %d (%d tokens per step)\n",
           c->global_batch_size, c->micro_batch_size, c->num_microbatches, c->data_parallel_size,
           c->global_batch_size * c->seq_length);
    if (c->data_path[0]) printf("data: %s\n", c->data_path);
    else printf("data: synthetic token stream (seed %lld)\n", (long long)c->seed);
    printf("run dir: %s\n\n", run_dir);
    printf("%6s  %10s  %10s  %10s  %10s  %9s\n", "step", "loss", "lr", "grad norm", "tok/s", "ms");
    fflush(stdout);
}

static json_t *metrics_line(const step_metrics *s, const tb_config *c, const tb_allocator *mem) {
    json_t *o = json_pack("{s:I, s:f, s:f, s:f, s:f, s:I, s:f, s:f}", "step", (json_int_t)s->step, "loss",
                          s->loss, "lr", s->lr, "grad_norm", s->grad_norm, "step_ms", s->step_ms, "tokens",
                          (json_int_t)c->global_batch_size * c->seq_length, "tokens_per_s", s->tokens_per_s,
                          "tflops", s->tflops);
    json_object_set_new(o, "mfu", c->peak_tflops > 0 ? json_real(s->mfu) : json_null());
    json_object_set_new(o, "mem_peak_bytes", bytes_by_category(mem->stats.peak));
    json_object_set_new(o, "mem_total_peak_bytes", json_integer((json_int_t)mem->stats.total_peak));
    return o;
}

static tb_group *group(tb_rank *rk, tb_group_kind k) { return rk->world ? &rk->groups[k] : NULL; }

// ---------------------------------------------------------------------------------------
// The per-stage timeline and the pipeline summary

// Model FLOPs per token, 6·N + 12·L·C·T, with N the whole model's parameters: each rank
// counts what it holds once (tp-replicated tensors on tp rank 0, the tied embedding's copy
// on the first stage, one data-parallel replica) and the world sums it.
static double model_flops_per_token(const tb_trainer *tr) {
    const tb_config *c = tr->cfg;
    tb_rank *rk = tr->rk;
    float local = 0;
    int counts = !rk->world || rk->groups[TB_GROUP_DP_CP].index == 0;
    for (int k = 0; counts && k < tr->nchunks; k++)
        for (int i = 0; i < tr->models[k].nparams; i++) {
            const gpt_param *p = &tr->models[k].params[i];
            if ((p->tp_duplicate && rk->coords.tp != 0) || p->pp_duplicate) continue;
            local += (float)p->numel;
        }
    if (rk->world && rk->world_size > 1) tb_all_reduce(&rk->groups[TB_GROUP_WORLD], &local, 1, TB_RED_SUM);
    return 6.0 * local + 12.0 * c->num_layers * (double)c->hidden_size * c->seq_length;
}

static double theoretical_bubble(const tb_config *c) {
    int v = c->virtual_pipeline_model_parallel_size > 1 ? c->virtual_pipeline_model_parallel_size : 1;
    return pipeline_theoretical_bubble(c->pipeline_model_parallel_size, c->num_microbatches, v);
}

// This step on this rank: where the time went, and the measured bubble — the share of the
// forward/backward schedule this stage spent not computing.
static json_t *timeline_json(const tb_trainer *tr, const tb_step_timeline *t, double step_ms) {
    double compute = t->forward_ms + t->backward_ms;
    double idle = step_ms - compute - t->p2p_ms - t->optimizer_ms;
    return json_pack("{s:i, s:i, s:f, s:f, s:f, s:f, s:f, s:f, s:f}", "stage", tr->rk->coords.pp, "chunks", tr->nchunks,
                     "forward_ms", t->forward_ms, "backward_ms", t->backward_ms, "p2p_wait_ms", t->p2p_ms,
                     "optimizer_ms", t->optimizer_ms, "idle_ms", idle > 0 ? idle : 0.0, "bubble_fraction",
                     t->pipeline_ms > 0 ? 1.0 - compute / t->pipeline_ms : 0.0, "theoretical_bubble",
                     theoretical_bubble(tr->cfg));
}

static void stage_totals_add(stage_totals *s, const tb_step_timeline *t, double step_ms) {
    s->steps++;
    s->forward_ms += t->forward_ms;
    s->backward_ms += t->backward_ms;
    s->p2p_ms += t->p2p_ms;
    s->optimizer_ms += t->optimizer_ms;
    s->pipeline_ms += t->pipeline_ms;
    s->step_ms += step_ms;
}

// pipeline.json (rank 0): for each stage — parameters, FLOPs per step, peak activation
// memory, mean times — the measured bubble next to the theoretical one, and the stage
// imbalance (slowest / fastest stage compute time). Every rank takes part in the gather.
enum { STAGE_PARAMS, STAGE_LAYERS, STAGE_FLOPS, STAGE_ACT_PEAK, STAGE_FWD, STAGE_BWD, STAGE_P2P, STAGE_OPT,
       STAGE_PIPE, STAGE_STEP, STAGE_FIELDS };

static int write_pipeline_summary(tb_trainer *tr, const stage_totals *t, tb_error *err) {
    tb_rank *rk = tr->rk;
    const tb_config *c = tr->cfg;
    const int p = c->pipeline_model_parallel_size;
    const double n = t->steps > 0 ? t->steps : 1;
    float mine[STAGE_FIELDS] = {0};
    int layers = 0;
    for (int k = 0; k < tr->nchunks; k++) {
        mine[STAGE_PARAMS] += (float)tr->models[k].num_parameters;
        layers += tr->models[k].chunk.num_layers;
    }
    const double tokens = (double)c->num_microbatches * c->micro_batch_size * c->seq_length;
    mine[STAGE_LAYERS] = (float)layers;
    mine[STAGE_FLOPS] = (float)(tokens * (6.0 * mine[STAGE_PARAMS] +
                                          12.0 * layers * (double)c->hidden_size * c->seq_length));
    mine[STAGE_ACT_PEAK] = (float)rk->mem.stats.peak[TB_MEM_ACTIVATIONS];
    mine[STAGE_FWD] = (float)(t->forward_ms / n);
    mine[STAGE_BWD] = (float)(t->backward_ms / n);
    mine[STAGE_P2P] = (float)(t->p2p_ms / n);
    mine[STAGE_OPT] = (float)(t->optimizer_ms / n);
    mine[STAGE_PIPE] = (float)(t->pipeline_ms / n);
    mine[STAGE_STEP] = (float)(t->step_ms / n);
    float *all = calloc((size_t)p * STAGE_FIELDS, sizeof(float));
    if (rk->world && p > 1) tb_all_gather(&rk->groups[TB_GROUP_PP], mine, all, STAGE_FIELDS);
    else memcpy(all, mine, sizeof mine);
    int rc = 0;
    if (rk->rank == 0) {
        json_t *stages = json_array();
        double slowest = 0, fastest = 1e300, bubble_sum = 0;
        for (int s = 0; s < p; s++) {
            const float *f = all + (size_t)s * STAGE_FIELDS;
            double compute = (double)f[STAGE_FWD] + f[STAGE_BWD];
            double bubble = f[STAGE_PIPE] > 0 ? 1.0 - compute / f[STAGE_PIPE] : 0.0;
            double idle = (double)f[STAGE_STEP] - compute - f[STAGE_P2P] - f[STAGE_OPT];
            slowest = compute > slowest ? compute : slowest;
            fastest = compute < fastest ? compute : fastest;
            bubble_sum += bubble;
            json_array_append_new(
                stages, json_pack("{s:i, s:I, s:i, s:f, s:I, s:f, s:f, s:f, s:f, s:f, s:f, s:f}", "stage", s,
                                  "parameters", (json_int_t)f[STAGE_PARAMS], "layers", (int)f[STAGE_LAYERS],
                                  "flops_per_step", (double)f[STAGE_FLOPS], "peak_activation_bytes",
                                  (json_int_t)f[STAGE_ACT_PEAK], "forward_ms", (double)f[STAGE_FWD], "backward_ms",
                                  (double)f[STAGE_BWD], "p2p_wait_ms", (double)f[STAGE_P2P], "optimizer_ms",
                                  (double)f[STAGE_OPT], "idle_ms", idle > 0 ? idle : 0.0, "compute_ms", compute,
                                  "bubble_fraction", bubble));
        }
        int v = c->virtual_pipeline_model_parallel_size > 1 ? c->virtual_pipeline_model_parallel_size : 1;
        json_t *summary = json_pack(
            "{s:i, s:i, s:i, s:s, s:I, s:f, s:f, s:f, s:s, s:o}", "pipeline_model_parallel_size", p,
            "virtual_pipeline_model_parallel_size", v, "num_microbatches", c->num_microbatches, "schedule",
            p == 1 ? "no pipelining" : v > 1 ? "interleaved 1F1B" : "1F1B", "steps_averaged", (json_int_t)t->steps,
            "measured_bubble_fraction", bubble_sum / p, "theoretical_bubble_fraction", theoretical_bubble(c),
            "stage_imbalance", fastest > 0 ? slowest / fastest : 0.0, "stage_imbalance_definition",
            "slowest / fastest stage compute (forward + backward) time, mean over steps after the first", "stages",
            stages);
        char path[TB_PATH_MAX + 32];
        snprintf(path, sizeof path, "%s/pipeline.json", rk->run_dir);
        rc = tb_write_json_atomic(path, summary, err);
        json_decref(summary);
        if (rc == 0 && p > 1)
            printf("pipeline: %s, measured bubble %.3f (theoretical %.3f), stage imbalance %.2fx\n",
                   v > 1 ? "interleaved 1F1B" : "1F1B", bubble_sum / p, theoretical_bubble(c),
                   fastest > 0 ? slowest / fastest : 0.0);
    }
    free(all);
    return rc;
}

int trainer_init(tb_trainer *tr, const tb_config *cfg, tb_rank *rk, tb_error *err) {
    memset(tr, 0, sizeof *tr);
    tr->rk = rk;
    tr->cfg = cfg;
    int rc = cfg->data_path[0] ? tb_gpt_dataset_open_file(&tr->data, &rk->mem, cfg->data_path, cfg->seq_length,
                                                          cfg->vocab_size, err)
                               : tb_gpt_dataset_open_synthetic(&tr->data, (uint64_t)cfg->seed, cfg->seq_length,
                                                               cfg->vocab_size, &rk->mem, err);
    if (rc != 0) return tb_fail_prefix(err, "flag --data-path");

    // this rank's chunks: virtual stage k = c·pp + pp_rank, with the layers the split gives it
    const int p = cfg->pipeline_model_parallel_size, r = rk->coords.pp, M = cfg->num_microbatches;
    const int v = cfg->virtual_pipeline_model_parallel_size > 1 ? cfg->virtual_pipeline_model_parallel_size : 1;
    int layers[TB_MAX_PIPELINE_STAGES];
    if (config_pipeline_split(cfg, layers, err) < 0) {
        tb_gpt_dataset_close(&tr->data, &rk->mem);
        return -1;
    }
    tr->nchunks = v;
    tr->models = calloc((size_t)v, sizeof *tr->models);
    tr->opts = calloc((size_t)v, sizeof *tr->opts);
    const tb_group *dp = group(rk, TB_GROUP_DP_CP);
    for (int c = 0; c < v; c++) {
        int k = c * p + r, first = 0;
        for (int j = 0; j < k; j++) first += layers[j];
        gpt_chunk_spec spec = {first, layers[k], k == 0, k == p * v - 1, M};
        gpt_model_init_chunk(&tr->models[c], cfg, &rk->mem, group(rk, TB_GROUP_TP), spec);
        adamw_init(&tr->opts[c], cfg, tr->models[c].padded_parameters, dp ? dp->index : 0, dp ? dp->size : 1,
                   &rk->mem);
    }
    if (cfg->load[0]) {
        if (p > 1) {
            trainer_free(tr);
            return tb_fail(err, "flag --load with pipeline_model_parallel_size %d: not supported yet", p);
        }
        if (gpt_load_safetensors(&tr->models[0], cfg->load, err) != 0) {
            trainer_free(tr);
            return tb_fail_prefix(err, "flag --load");
        }
    }
    size_t tokens = (size_t)M * cfg->micro_batch_size * cfg->seq_length;
    tr->inputs = tb_alloc(&rk->mem, TB_MEM_WORKSPACE, tokens * sizeof(int32_t), "batch inputs");
    tr->targets = tb_alloc(&rk->mem, TB_MEM_WORKSPACE, tokens * sizeof(int32_t), "batch targets");
    if (p > 1) {
        size_t act = (size_t)tr->models[0].block.d.Ns * cfg->hidden_size * sizeof(float);
        tr->x_in = tb_alloc(&rk->mem, TB_MEM_COMM, act, "pipeline activation received");
        tr->x_out = tb_alloc(&rk->mem, TB_MEM_COMM, act, "pipeline activation sent");
        tr->d_in = tb_alloc(&rk->mem, TB_MEM_COMM, act, "pipeline gradient sent");
        tr->d_out = tb_alloc(&rk->mem, TB_MEM_COMM, act, "pipeline gradient received");
    }
    tr->ops = calloc((size_t)2 * M * v, sizeof *tr->ops);
    tr->nops = pipeline_schedule(p, r, M, v, tr->ops);
    return 0;
}

void trainer_free(tb_trainer *tr) {
    tb_allocator *mem = &tr->rk->mem;
    tb_free(mem, tr->inputs);
    tb_free(mem, tr->targets);
    tb_free(mem, tr->x_in);
    tb_free(mem, tr->x_out);
    tb_free(mem, tr->d_in);
    tb_free(mem, tr->d_out);
    for (int c = 0; c < tr->nchunks; c++) {
        adamw_free(&tr->opts[c]);
        gpt_model_free(&tr->models[c]);
    }
    free(tr->models);
    free(tr->opts);
    free(tr->ops);
    tb_gpt_dataset_close(&tr->data, mem);
    memset(tr, 0, sizeof *tr);
}

static double ms_since(int64_t t0) { return (double)(tb_now_ns() - t0) / 1e6; }

// Runs this rank's pipeline schedule for one step: every (microbatch, chunk) forward and
// backward, with the activations and gradients exchanged with the neighbouring stages.
// Returns the sum of the last stage's microbatch losses (0 elsewhere).
static double run_schedule(tb_trainer *tr, int64_t step, tb_step_timeline *time) {
    const tb_config *cfg = tr->cfg;
    tb_rank *rk = tr->rk;
    const int B = cfg->micro_batch_size, T = cfg->seq_length, M = cfg->num_microbatches;
    const int p = cfg->pipeline_model_parallel_size, r = rk->coords.pp;
    const int dp_rank = rk->world ? rk->groups[TB_GROUP_DP_CP].index : 0;
    const int next = (r + 1) % p, prev = (r - 1 + p) % p;
    tb_group *pp = group(rk, TB_GROUP_PP), *pp_grad = group(rk, TB_GROUP_PP_GRAD);
    const size_t act = tr->x_in ? (size_t)tr->models[0].block.d.Ns * cfg->hidden_size : 0;
    double loss = 0.0;

    for (int mb = 0; mb < M; mb++) {
        // global sample index: step-major, then microbatch, then dp rank, then row
        uint64_t first = (uint64_t)(step - 1) * cfg->global_batch_size +
                         (uint64_t)mb * B * cfg->data_parallel_size + (uint64_t)dp_rank * B;
        for (int b = 0; b < B; b++)
            tb_gpt_dataset_get_sample(&tr->data, first + b, tr->inputs + ((size_t)mb * B + b) * T,
                                      tr->targets + ((size_t)mb * B + b) * T);
    }
    for (int i = 0; i < tr->nops; i++) {
        const pp_op *op = &tr->ops[i];
        gpt_model *m = &tr->models[op->chunk];
        const int32_t *inputs = tr->inputs + (size_t)op->microbatch * B * T;
        const int32_t *targets = tr->targets + (size_t)op->microbatch * B * T;
        rk->microbatch = op->microbatch;
        int64_t t0;
        if (op->kind == 'F') {
            if (!m->chunk.has_embedding) {
                t0 = tb_now_ns();
                tb_recv(pp, tr->x_in, act, prev);  // recv_forward
                time->p2p_ms += ms_since(t0);
            }
            t0 = tb_now_ns();
            float l = gpt_forward_chunk(m, op->microbatch, inputs, targets, tr->x_in, tr->x_out);
            time->forward_ms += ms_since(t0);
            if (m->chunk.has_head) loss += l;
            else {
                t0 = tb_now_ns();
                tb_send(pp, tr->x_out, act, next);  // send_forward
                time->p2p_ms += ms_since(t0);
            }
        } else {
            if (!m->chunk.has_head) {
                t0 = tb_now_ns();
                tb_recv(pp_grad, tr->d_out, act, next);  // recv_backward
                time->p2p_ms += ms_since(t0);
            }
            t0 = tb_now_ns();
            gpt_backward_chunk(m, op->microbatch, 1.0f / (float)M, tr->d_out, tr->d_in);
            time->backward_ms += ms_since(t0);
            if (!m->chunk.has_embedding) {
                t0 = tb_now_ns();
                tb_send(pp_grad, tr->d_in, act, prev);  // send_backward
                time->p2p_ms += ms_since(t0);
            }
        }
    }
    rk->microbatch = -1;
    return loss;
}

tb_step_result train_step(tb_trainer *tr, int64_t step) {
    const tb_config *cfg = tr->cfg;
    tb_rank *rk = tr->rk;
    const int M = cfg->num_microbatches;
    tb_step_result r;
    memset(&r, 0, sizeof r);
    rk->step = step;

    TB_RANGE_PUSH("train_step");
    tb_range_annotate(step, -1);
    for (int c = 0; c < tr->nchunks; c++) gpt_zero_grad(&tr->models[c]);
    int64_t t0 = tb_now_ns();
    r.loss = run_schedule(tr, step, &r.time) / M;
    r.time.pipeline_ms = ms_since(t0);

    t0 = tb_now_ns();
    for (int c = 0; c < tr->nchunks; c++) finalize_model_grads(&tr->models[c], rk, &tr->opts[c]);

    TB_RANGE_PUSH("optimizer");
    TB_RANGE_PUSH("optimizer.clip_grads");
    r.grad_norm = clip_grads_global_norm_parallel(tr->models, tr->opts, tr->nchunks, rk);
    float clip = clip_grads_coefficient(r.grad_norm, cfg->clip_grad);
    TB_RANGE_POP();
    TB_RANGE_PUSH("optimizer.adamw");
    r.lr = lr_at_step(cfg, step);
    for (int c = 0; c < tr->nchunks; c++) {
        gpt_model *m = &tr->models[c];
        adamw_step(&tr->opts[c], m->params, m->nparams, m->param_memory, m->grad_memory, clip, (float)r.lr);
    }
    TB_RANGE_POP();
    for (int c = 0; c < tr->nchunks; c++) {
        if (!tr->opts[c].sharded) continue;
        TB_RANGE_PUSH("optimizer.all_gather_params");
        gpt_model *m = &tr->models[c];
        tb_all_gather(&rk->groups[TB_GROUP_DP_CP], m->param_memory + tr->opts[c].lo, m->param_memory,
                      tr->opts[c].hi - tr->opts[c].lo);
        TB_RANGE_POP();
    }
    TB_RANGE_POP();
    r.time.optimizer_ms = ms_since(t0);

    // the global batch's loss: from the last pipeline stage, averaged over data-parallel ranks
    tb_group *pp = group(rk, TB_GROUP_PP), *dp = group(rk, TB_GROUP_DP_CP);
    if ((pp && pp->size > 1) || (dp && dp->size > 1)) {
        TB_RANGE_PUSH("loss_average");
        float loss = (float)r.loss;
        if (pp && pp->size > 1) tb_all_reduce(pp, &loss, 1, TB_RED_SUM);
        if (dp && dp->size > 1) tb_all_reduce(dp, &loss, 1, TB_RED_SUM);
        r.loss = loss / (dp ? dp->size : 1);
        TB_RANGE_POP();
    }
    TB_RANGE_POP();
    return r;
}

void rank_init_single(tb_rank *rk, const tb_config *cfg) {
    memset(rk, 0, sizeof *rk);
    rk->cfg = cfg;
    rk->rank = 0;
    rk->world_size = 1;
    rk->coords = parallel_state_coords(cfg, 0);
    parallel_state_label(rk->label, sizeof rk->label, 0, rk->coords);
    rk->microbatch = -1;
}

// ---------------------------------------------------------------------------------------
// A rank's whole run: its thread, its allocator, trace, trainer and files.

typedef struct rank_run {
    int rc;
    tb_error err;
} rank_run;

static int rank_train(tb_rank *rk, tb_error *err) {
    const tb_config *cfg = rk->cfg;
    const int lead = rk->rank == 0;
    char path[TB_PATH_MAX + 64];
    // one rank: every core; several rank threads: one core each (DESIGN.md)
    cpu_set_num_threads(rk->world_size > 1 ? 1 : cfg->num_threads);
    tb_allocator_init(&rk->mem, (size_t)cfg->memory_cap, report_oom, rk);
    tb_allocator_set_caching(&rk->mem, 1);
    tb_ranges_init(&rk->ranges, rk->rank, rk->world_size, rk->label, rk->world ? rk->world->origin_ns : tb_now_ns(), 1);
    tb_ranges_bind(&rk->ranges);

    tb_trainer tr;
    int rc = trainer_init(&tr, cfg, rk, err);
    if (rc != 0) goto out;

    rank_file(path, sizeof path, rk, "metrics", "jsonl");
    FILE *metrics = fopen(path, "w");
    if (!metrics) {
        rc = tb_fail(err, "%s: cannot create metrics file", path);
        goto done;
    }
    if (lead) print_header(cfg, &tr.models[0], rk->run_dir);
    const double flops_per_token = model_flops_per_token(&tr);
    const int64_t tokens_per_step = (int64_t)cfg->global_batch_size * cfg->seq_length;
    stage_totals totals;
    memset(&totals, 0, sizeof totals);

    for (int64_t step = 1; step <= cfg->train_iters; step++) {
        int64_t t0 = tb_now_ns();
        tb_step_result r = train_step(&tr, step);
        double seconds = (double)(tb_now_ns() - t0) / 1e9;
        // throughput is set by the slowest rank
        float slowest = (float)seconds;
        if (rk->world_size > 1) tb_all_reduce(&rk->groups[TB_GROUP_WORLD], &slowest, 1, TB_RED_MAX);
        step_metrics s = {step, r.loss, r.lr, r.grad_norm, seconds * 1e3, (double)tokens_per_step / slowest, 0, 0};
        s.tflops = flops_per_token * (double)tokens_per_step / slowest / 1e12 / rk->world_size;
        s.mfu = cfg->peak_tflops > 0 ? s.tflops / cfg->peak_tflops : 0;
        json_t *line = metrics_line(&s, cfg, &rk->mem);
        json_object_set_new(line, "slowest_rank_step_ms", json_real(slowest * 1e3));
        json_object_set_new(line, "pipeline", timeline_json(&tr, &r.time, seconds * 1e3));
        if (step > 1 || cfg->train_iters == 1) stage_totals_add(&totals, &r.time, seconds * 1e3);
        char *text = json_dumps(line, JSON_COMPACT | JSON_REAL_PRECISION(17));
        fprintf(metrics, "%s\n", text);
        fflush(metrics);
        free(text);
        json_decref(line);
        if (lead && (step % cfg->log_interval == 0 || step == cfg->train_iters)) {
            printf("%6lld  %10.6f  %10.3e  %10.4f  %10.1f  %9.1f\n", (long long)step, s.loss, s.lr, s.grad_norm,
                   s.tokens_per_s, slowest * 1e3);
            fflush(stdout);
        }
    }
    if (fclose(metrics) != 0) {
        rc = tb_fail(err, "%s/metrics: write failed", rk->run_dir);
        goto done;
    }
    if ((rc = write_pipeline_summary(&tr, &totals, err)) != 0) goto done;

    if (cfg->save[0]) {
        if (cfg->pipeline_model_parallel_size > 1) {
            rc = tb_fail(err, "flag --save with pipeline_model_parallel_size %d: not supported yet", cfg->pipeline_model_parallel_size);
            goto done;
        }
        if (gpt_save_safetensors(&tr.models[0], cfg->save, lead, err) != 0) {
            rc = tb_fail_prefix(err, "flag --save");
            goto done;
        }
        if (lead) printf("\nsaved weights: %s\n", cfg->save);
    }

    rank_file(path, sizeof path, rk, "memory", "json");
    json_t *snap = memory_snapshot_json(rk);
    rc = tb_write_json_atomic(path, snap, err);
    json_decref(snap);
    if (rc == 0) {
        rank_file(path, sizeof path, rk, "trace", "json");
        rc = tb_ranges_write_chrome(&rk->ranges, path, err);
    }
    if (rc == 0 && lead) {
        printf("\nartifacts: %s\n", rk->run_dir);
        printf("  config.json  metrics.rank-NNNNN.jsonl  trace.rank-NNNNN.json (open in Perfetto)  "
               "memory.rank-NNNNN.json  (%d rank%s)\n", rk->world_size, rk->world_size > 1 ? "s" : "");
        printf("peak memory (rank 0): %.1f MiB (params %.1f, grads %.1f, optimizer %.1f, activations %.1f, "
               "workspace %.1f, comm %.1f)\n",
               (double)rk->mem.stats.total_peak / 1048576.0,
               (double)rk->mem.stats.at_total_peak[TB_MEM_PARAMS] / 1048576.0,
               (double)rk->mem.stats.at_total_peak[TB_MEM_GRADS] / 1048576.0,
               (double)rk->mem.stats.at_total_peak[TB_MEM_OPTIMIZER] / 1048576.0,
               (double)rk->mem.stats.at_total_peak[TB_MEM_ACTIVATIONS] / 1048576.0,
               (double)rk->mem.stats.at_total_peak[TB_MEM_WORKSPACE] / 1048576.0,
               (double)rk->mem.stats.at_total_peak[TB_MEM_COMM] / 1048576.0);
    }

done:
    trainer_free(&tr);
out:
    tb_allocator_release_cache(&rk->mem);
    tb_ranges_bind(NULL);
    tb_ranges_free(&rk->ranges);
    return rc;
}

static void rank_main(tb_rank *rk, void *arg) {
    rank_run *run = (rank_run *)arg + rk->rank;
    run->rc = rank_train(rk, &run->err);
}

int pretrain(const tb_config *cfg, tb_error *err) {
    tb_world world;
    if (parallel_state_world_init(&world, cfg, err) != 0) return -1;
    world.origin_ns = tb_now_ns();
    int rc = make_run_dir(cfg, world.run_dir, sizeof world.run_dir, err);
    if (rc == 0) {
        char path[TB_PATH_MAX + 64];
        snprintf(path, sizeof path, "%s/config.json", world.run_dir);
        json_t *resolved = config_to_json(cfg);
        rc = tb_write_json_atomic(path, resolved, err);
        json_decref(resolved);
    }
    if (rc != 0) {
        parallel_state_world_free(&world);
        return -1;
    }
    rank_run *runs = calloc((size_t)world.size, sizeof *runs);
    for (int r = 0; r < world.size; r++)
        snprintf(world.ranks[r].run_dir, sizeof world.ranks[r].run_dir, "%s", world.run_dir);
    parallel_state_run_ranks(&world, rank_main, runs);
    for (int r = 0; r < world.size && rc == 0; r++)
        if (runs[r].rc != 0) {
            rc = -1;
            if (err) *err = runs[r].err;
            if (world.size > 1) tb_fail_prefix(err, "%s", world.ranks[r].label);
        }
    free(runs);
    parallel_state_world_free(&world);
    return rc;
}
