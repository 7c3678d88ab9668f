#include "reports/metrics_log.h"

#include <stdlib.h>

#include "backend/cpu/kernels.h"
#include "core/json_number.h"
#include "core/run_dir.h"
#include "comm/parallel_state.h"
#include "reports/memory_report.h"
#include "runtime/memory.h"

int metrics_log_open(metrics_log *log, const char *run_dir, int rank, tb_error *err) {
    log->f = NULL;
    if (tb_rank_file_path(log->path, sizeof log->path, run_dir, TB_RANK_METRICS, rank, err) != 0) return -1;
    log->f = fopen(log->path, "w");
    if (!log->f) return tb_fail(err, "%s: cannot create metrics file", log->path);
    return 0;
}

int metrics_log_write(metrics_log *log, const step_metrics *s, const tb_config *c, const tb_allocator *mem,
                      json_t *pipeline, json_t *conditions, json_t *moe, tb_error *err) {
    // any figure may be NaN or Inf (a diverged run): written as json_number.h says, never lost
    json_t *o = json_pack("{s:I, s:o, s:o, s:o, s:o, s:I, s:o, s:o}", "step", (json_int_t)s->step, "loss",
                          tb_json_number(s->loss), "lr", tb_json_number(s->lr), "grad_norm", tb_json_number(s->grad_norm),
                          "step_ms", tb_json_number(s->step_ms), "tokens", (json_int_t)c->global_batch_size * c->seq_length,
                          "tokens_per_s", tb_json_number(s->tokens_per_s), "tflops", tb_json_number(s->tflops));
    json_object_set_new(o, "mfu", c->peak_tflops > 0 ? tb_json_number(s->mfu) : json_null());
    json_object_set_new(o, "mem_peak_bytes", memory_bytes_by_category(mem->stats.peak));
    json_object_set_new(o, "mem_total_peak_bytes", json_integer((json_int_t)mem->stats.total_peak));
    json_object_set_new(o, "slowest_rank_step_ms", tb_json_number(s->slowest_rank_step_ms));
    json_object_set_new(o, "pipeline", pipeline);
    json_object_set_new(o, "conditions", conditions);
    if (moe) json_object_set_new(o, "moe", moe);
    if (c->fp16) {  // Megatron's "loss scale" and skipped iterations
        json_object_set_new(o, "loss_scale", tb_json_number(s->loss_scale));
        json_object_set_new(o, "skipped", json_boolean(s->skipped));
    }
    char *text = json_dumps(o, JSON_COMPACT | JSON_REAL_PRECISION(17));
    json_decref(o);
    int bad = !text || fprintf(log->f, "%s\n", text) < 0 || fflush(log->f) != 0;
    free(text);
    return bad ? tb_fail(err, "%s: cannot write step %lld", log->path, (long long)s->step) : 0;
}

int metrics_log_close(metrics_log *log, tb_error *err) {
    if (!log->f) return 0;
    int rc = fclose(log->f);
    log->f = NULL;
    return rc != 0 ? tb_fail(err, "%s: write failed", log->path) : 0;
}

void print_run_header(const tb_config *c, const gpt_model *m, const char *run_dir) {
    printf("pretrain_gpt: GPT %d layers, hidden %d, heads %d (query groups %d), ffn %d%s, %s, seq %d, "
           "vocab %d (padded %d), attention %s%s\n",
           c->num_layers, c->hidden_size, c->num_attention_heads, c->num_query_groups, c->ffn_hidden_size,
           c->swiglu ? " SwiGLU" : " GELU", m->spec.input_layernorm->name, c->seq_length, c->vocab_size,
           c->padded_vocab_size, config_choice_name("attention_backend", config_attention_core(c)),
           c->attention_backend == TB_ATTENTION_AUTO ? " (auto)" : "");
    const int full = c->recompute_granularity == TB_RECOMPUTE_FULL;
    printf("parameters: %.2fM | world %d = tp %d x cp %d x dp %d x pp %d | threads %d | recompute %s%s%s\n",
           (double)m->num_parameters / 1e6, c->world_size, c->tensor_model_parallel_size, c->context_parallel_size,
           c->data_parallel_size, c->pipeline_model_parallel_size, cpu_get_num_threads(),
           config_choice_name("recompute_granularity", c->recompute_granularity), full ? " " : "",
           full ? config_choice_name("recompute_method", c->recompute_method) : "");
    if (c->num_experts > 0)
        printf("MoE: %d experts of ffn %d, top-%d%s, in layers l mod %d = 0 | load balancing %s (coeff %g) | "
               "dispatcher %s\n",
               c->num_experts, c->moe_ffn_hidden_size, c->moe_router_topk,
               c->moe_router_pre_softmax                                 ? " (pre-softmax)"
               : c->moe_router_score_function == TB_MOE_SCORE_SIGMOID ? " (sigmoid scores)"
                                                                         : "",
               c->moe_layer_freq,
               config_choice_name("moe_router_load_balancing_type", c->moe_router_load_balancing_type),
               c->moe_aux_loss_coeff, config_choice_name("moe_token_dispatcher_type", c->moe_token_dispatcher_type));
    printf("BLAS: %s\n", cpu_blas_name());
    printf("global batch %d = micro batch %d x microbatches %d x dp %d (%d tokens per step)\n", c->global_batch_size,
           c->micro_batch_size, c->num_microbatches, c->data_parallel_size, c->global_batch_size * c->seq_length);
    if (c->data_path[0]) printf("data: %s\n", c->data_path);
    else printf("data: synthetic token stream (seed %lld)\n", (long long)c->seed);
    printf("run dir: %s\n\n", run_dir);
    printf("%6s  %10s  %10s  %10s  %10s  %9s\n", "step", "loss", "lr", "grad norm", "tok/s", "ms");
    fflush(stdout);
}

void print_step_line(const step_metrics *s) {
    printf("%6lld  %10.6f  %10.3e  %10.4f  %10.1f  %9.1f\n", (long long)s->step, s->loss, s->lr, s->grad_norm,
           s->tokens_per_s, s->slowest_rank_step_ms);
    fflush(stdout);
}

static double mib(size_t bytes) { return (double)bytes / 1048576.0; }

void print_run_footer(const tb_rank *rk) {
    const tb_mem_stats *m = &rk->mem->stats;
    printf("\nartifacts: %s\n", rk->run_dir);
    printf("  %s  %s  %s (open in Perfetto)  %s  (%d rank%s)\n", TB_RUN_CONFIG, tb_rank_file_pattern(TB_RANK_METRICS),
           tb_rank_file_pattern(TB_RANK_TRACE), tb_rank_file_pattern(TB_RANK_MEMORY), rk->world_size,
           rk->world_size > 1 ? "s" : "");
    printf("peak memory (rank 0): %.1f MiB (", mib(m->total_peak));
    for (int c = 0; c < TB_MEM_NCATEGORIES; c++)  // (gathered: Megatron-FSDP's, only where it ran)
        if (c != TB_MEM_GATHERED || m->peak[c])
            printf("%s%s %.1f", c ? ", " : "", tb_mem_category_name((tb_mem_category)c), mib(m->at_total_peak[c]));
    printf(")\n");
}
