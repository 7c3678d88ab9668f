// config_rules.c — config_validate: every rule of a config, Megatron-Core's and the engine's,
// each violation named with its numbers and all of them listed, one per line; what the
// engine cannot run yet refused as "not supported yet" (the MoE rules: config_moe.c).
#include "config/config_rules.h"

#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "config/config.h"
#include "config/drill_flags.h"

void violated(rules *r, const char *fmt, ...) {
    r->count++;
    if (!r->err) return;
    size_t cap = sizeof r->err->msg;
    if (r->used + 2 >= cap) return;
    if (r->count > 1) r->err->msg[r->used++] = '\n';
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(r->err->msg + r->used, cap - r->used, fmt, ap);
    va_end(ap);
    if (n > 0) r->used += (size_t)n < cap - r->used ? (size_t)n : cap - r->used - 1;
}

// Precision and --device cuda: what the CUDA backend runs (backend/cuda/cuda_backend.h) and
// what it does not yet. Whether this build has the backend and a GPU is visible is checked
// where a run starts (tb_cuda_check_device_flag), not here: the planner and runbooks validate
// GPU configurations on any machine.
static void device_not_supported_yet(rules *r, const tb_config *c) {
    if (c->bf16 && c->fp16) violated(r, "bf16 and fp16 are exclusive (both given)");
    if (c->device != TB_DEVICE_CUDA) {
        if (c->bf16 || c->fp16)
            violated(r, "%s with device cpu: not supported yet on --device cpu (the CPU backend is the fp32 "
                        "reference the CUDA backend is checked against; %s runs on --device cuda)",
                     c->bf16 ? "bf16" : "fp16", c->bf16 ? "bf16" : "fp16");
        return;
    }
#define CUDA_REFUSED(cond, ...) \
    if (cond) violated(r, __VA_ARGS__)
    CUDA_REFUSED(config_attention_core(c) == TB_ATTENTION_FLASH && c->num_attention_heads > 0 &&
                     c->hidden_size / c->num_attention_heads > 1024,
                 "device cuda with head size %d: not supported yet (the CUDA flash attention kernel takes head sizes "
                 "up to 1024; --attention-backend local takes any)", c->hidden_size / c->num_attention_heads);
#undef CUDA_REFUSED
}

int config_validate(const tb_config *c, tb_error *err) { return config_validate_rules(c, 0, err); }

int config_validate_rules(const tb_config *c, unsigned skip, tb_error *err) {
    rules r = {err, 0, 0};
    const int build_limits = !(skip & TB_RULES_SKIP_BUILD_LIMITS);
    if (err) err->msg[0] = '\0';
    const int tp = c->tensor_model_parallel_size, pp = c->pipeline_model_parallel_size;
    const int cp = c->context_parallel_size, ep = c->expert_model_parallel_size;
    const int vpp = c->virtual_pipeline_model_parallel_size;

    POSITIVE(&r, c, num_layers);
    POSITIVE(&r, c, hidden_size);
    POSITIVE(&r, c, ffn_hidden_size);
    POSITIVE(&r, c, num_attention_heads);
    POSITIVE(&r, c, num_query_groups);
    POSITIVE(&r, c, seq_length);
    POSITIVE(&r, c, vocab_size);
    POSITIVE(&r, c, make_vocab_size_divisible_by);
    POSITIVE(&r, c, micro_batch_size);
    if (c->data_parallel_size > 0) POSITIVE(&r, c, global_batch_size);  // else derived from dp 0: said below
    POSITIVE(&r, c, train_iters);
    POSITIVE(&r, c, log_interval);
    POSITIVE(&r, c, tensor_model_parallel_size);
    POSITIVE(&r, c, pipeline_model_parallel_size);
    POSITIVE(&r, c, context_parallel_size);
    POSITIVE(&r, c, expert_model_parallel_size);
    POSITIVE(&r, c, world_size);
    // Size limits keep every derived size and buffer length far from overflow.
#define AT_MOST(field, limit)                                                                   \
    if ((int64_t)c->field > (int64_t)(limit))                                                   \
    violated(&r, #field " (%lld) exceeds the largest supported value %lld", (long long)c->field, \
             (long long)(limit))
    AT_MOST(num_layers, 1 << 16);
    AT_MOST(hidden_size, 1 << 20);
    AT_MOST(ffn_hidden_size, 1 << 22);
    AT_MOST(num_attention_heads, 1 << 16);
    AT_MOST(seq_length, 1 << 20);
    AT_MOST(max_position_embeddings, 1 << 20);
    AT_MOST(make_vocab_size_divisible_by, 1 << 16);
    AT_MOST(padded_vocab_size, 1 << 20);
    AT_MOST(micro_batch_size, 1 << 20);
    AT_MOST(global_batch_size, 1 << 30);
    if (build_limits && c->world_size > 64)
        violated(&r, "world_size (%d) exceeds 64, the largest world (and group) this build supports", c->world_size);
    AT_MOST(tensor_model_parallel_size, 1 << 16);
    AT_MOST(pipeline_model_parallel_size, 1 << 16);
    AT_MOST(context_parallel_size, 1 << 16);
    AT_MOST(expert_model_parallel_size, 1 << 16);
    AT_MOST(virtual_pipeline_model_parallel_size, TB_MAX_PIPELINE_STAGES);
    AT_MOST(num_layers_per_virtual_pipeline_stage, 1 << 16);
#undef AT_MOST
    if (c->mock_data && c->data_path[0])
        violated(&r, "mock_data and data_path '%s' are exclusive", c->data_path);
    // (a world smaller than one model-parallel replica, e.g. tp 3 over mpirun -np 2, makes
    // dp 0 and so a derived global batch of 0: this rule says why)
    const int64_t model_parallel = (int64_t)tp * cp * pp;
    if (tp >= 1 && cp >= 1 && pp >= 1 && c->world_size >= 1 && c->world_size % model_parallel != 0)
        violated(&r,
                 "world_size (%d) must be divisible by tensor_model_parallel_size x "
                 "context_parallel_size x pipeline_model_parallel_size (%d x %d x %d = %lld)",
                 c->world_size, tp, cp, pp, (long long)model_parallel);
    if (r.count) return -1;  // the rules below divide by these

    // Shapes
    DIVISIBLE(&r, c->hidden_size, "hidden_size", c->num_attention_heads, "num_attention_heads");
    DIVISIBLE(&r, c->num_attention_heads, "num_attention_heads", c->num_query_groups, "num_query_groups");
    DIVISIBLE(&r, c->num_attention_heads, "num_attention_heads", tp, "tensor_model_parallel_size");
    DIVISIBLE(&r, c->num_query_groups, "num_query_groups", tp, "tensor_model_parallel_size");
    DIVISIBLE(&r, c->ffn_hidden_size, "ffn_hidden_size", tp, "tensor_model_parallel_size");
    if (c->max_position_embeddings < c->seq_length)
        violated(&r, "seq_length (%d) must be at most max_position_embeddings (%d)", c->seq_length,
                 c->max_position_embeddings);
    if (build_limits && c->vocab_size > 65536)
        violated(&r, "vocab_size (%d) must be at most 65536 (token files hold uint16 ids)", c->vocab_size);
    if (c->norm_epsilon <= 0) violated(&r, "norm_epsilon (%g) must be positive", c->norm_epsilon);
    if (c->init_method_std < 0) violated(&r, "init_method_std (%g) must be non-negative", c->init_method_std);
    if (c->position_embedding_type == TB_POS_ROPE) {
        const int hs = c->hidden_size / c->num_attention_heads;
        const double rot = hs * c->rotary_percent;
        if (!(c->rotary_percent > 0 && c->rotary_percent <= 1))
            violated(&r, "rotary_percent (%g) must be in (0, 1]", c->rotary_percent);
        else if (rot != floor(rot) || (long)rot % 2 != 0)
            violated(&r, "the rotary dimension, head size %d x rotary_percent %g = %g, must be an even integer", hs,
                     c->rotary_percent, rot);
        if (c->rotary_base <= 0) violated(&r, "rotary_base (%d) must be positive", c->rotary_base);
    } else {
        // rope's settings without rope would be silently ignored
        const char *pos = config_choice_name("position_embedding_type", c->position_embedding_type);
        if (c->rotary_percent != 1.0)
            violated(&r, "rotary_percent (%g) applies only with position_embedding_type rope (is %s)",
                     c->rotary_percent, pos);
        if (c->rotary_base != 10000)
            violated(&r, "rotary_base (%d) applies only with position_embedding_type rope (is %s)", c->rotary_base,
                     pos);
        if (c->rotary_interleaved)
            violated(&r, "rotary_interleaved applies only with position_embedding_type rope (is %s)", pos);
    }

    // Parallel layout (world_size divisible by tp x cp x pp: checked above)
    const int dp = c->data_parallel_size;
    if (vpp < 0) violated(&r, "virtual_pipeline_model_parallel_size (%d) must be non-negative", vpp);
    if (vpp > 0 && pp < 2)
        violated(&r, "virtual_pipeline_model_parallel_size (%d) needs pipeline_model_parallel_size > 1 (is %d)",
                 vpp, pp);
    if (c->num_layers_per_virtual_pipeline_stage < 0)
        violated(&r, "num_layers_per_virtual_pipeline_stage (%d) must be non-negative",
                 c->num_layers_per_virtual_pipeline_stage);
    else if (c->num_layers_per_virtual_pipeline_stage > 0) {
        const int n = c->num_layers_per_virtual_pipeline_stage;
        const int64_t total = (int64_t)c->num_layers + c->account_for_embedding_in_pipeline_split +
                              c->account_for_loss_in_pipeline_split;
        if (total % ((int64_t)pp * n) != 0) {
            if (total == c->num_layers)
                violated(&r, "num_layers (%d) must be divisible by pipeline_model_parallel_size x "
                             "num_layers_per_virtual_pipeline_stage (%d x %d)", c->num_layers, pp, n);
            else
                violated(&r, "num_layers (%d) + embedding (%d) + loss (%d) must be divisible by "
                             "pipeline_model_parallel_size x num_layers_per_virtual_pipeline_stage (%d x %d)",
                         c->num_layers, c->account_for_embedding_in_pipeline_split,
                         c->account_for_loss_in_pipeline_split, pp, n);
        }
        else if (vpp != config_virtual_stages_from_layers(c))
            violated(&r, "virtual_pipeline_model_parallel_size (%d) and num_layers_per_virtual_pipeline_stage (%d) "
                         "disagree (%d per virtual stage makes %d virtual stages); give one of them",
                     vpp, n, n, config_virtual_stages_from_layers(c));
    }
    if ((int64_t)pp * (vpp > 1 ? vpp : 1) > TB_MAX_PIPELINE_STAGES)
        violated(&r, "pipeline stages (%d x %d) exceed %d", pp, vpp, TB_MAX_PIPELINE_STAGES);
    else {
        int layers[TB_MAX_PIPELINE_STAGES];
        tb_error split_err;
        split_err.msg[0] = '\0';
        if (config_pipeline_split(c, layers, &split_err) < 0) violated(&r, "%s", split_err.msg);
    }
    if (c->sequence_parallel) DIVISIBLE(&r, c->seq_length, "seq_length", tp, "tensor_model_parallel_size");
    if (cp > 1) DIVISIBLE(&r, c->seq_length, "seq_length", 2 * cp, "2 x context_parallel_size");
    if (ep > 1 && cp > 1)
        violated(&r, "expert_model_parallel_size (%d) and context_parallel_size (%d) cannot both exceed 1",
                 ep, cp);
    config_moe_rules(&r, c);
    config_fsdp_rules(&r, c);

    // Batch
    if (dp > 0) {
        int per = c->micro_batch_size * dp;
        if (c->global_batch_size % per != 0)
            violated(&r,
                     "global_batch_size (%d) must be divisible by micro_batch_size x data_parallel_size "
                     "(%d x %d = %d)", c->global_batch_size, c->micro_batch_size, dp, per);
        else {
            int m = c->global_batch_size / per;
            if (m < pp)
                violated(&r, "num_microbatches (%d) must be at least pipeline_model_parallel_size (%d)", m, pp);
            if (vpp > 1 && m % pp != 0)
                violated(&r, "num_microbatches (%d) must be divisible by pipeline_model_parallel_size (%d) "
                             "with an interleaved schedule", m, pp);
        }
    }

    // Optimizer and schedule
    if (c->lr < 0) violated(&r, "lr (%g) must be non-negative", c->lr);
    if (c->min_lr < 0 || c->min_lr > c->lr)
        violated(&r, "min_lr (%g) must be between 0 and lr (%g)", c->min_lr, c->lr);
    if (c->lr_warmup_iters < 0) violated(&r, "lr_warmup_iters (%d) must be non-negative", c->lr_warmup_iters);
    if (c->lr_decay_iters < 1) violated(&r, "lr_decay_iters (%d) must be at least 1", c->lr_decay_iters);
    // Megatron's rule (OptimizerParamScheduler: lr_warmup_steps < lr_decay_steps): a warm-up
    // that does not end before the decay does leaves no decay, and one past the last step
    // never reaches the peak lr.
    else if (c->lr_warmup_iters >= c->lr_decay_iters)
        violated(&r, "lr_warmup_iters (%d) must be less than lr_decay_iters (%d%s)", c->lr_warmup_iters,
                 c->lr_decay_iters, c->lr_decay_iters == c->train_iters ? " = train_iters" : "");
    if (c->adam_beta1 < 0 || c->adam_beta1 >= 1) violated(&r, "adam_beta1 (%g) must be in [0, 1)", c->adam_beta1);
    if (c->adam_beta2 < 0 || c->adam_beta2 >= 1) violated(&r, "adam_beta2 (%g) must be in [0, 1)", c->adam_beta2);
    if (c->adam_eps <= 0) violated(&r, "adam_eps (%g) must be positive", c->adam_eps);
    if (c->lr_decay_style == TB_LR_CONSTANT && c->min_lr != 0)  // a constant lr never decays to it
        violated(&r, "min_lr %g has no effect with lr_decay_style constant (the lr stays %g)", c->min_lr, c->lr);
    if (c->weight_decay < 0) violated(&r, "weight_decay (%g) must be non-negative", c->weight_decay);
    if (c->clip_grad < 0) violated(&r, "clip_grad (%g) must be non-negative", c->clip_grad);

    // DistributedDataParallel
    if (c->ddp_bucket_size < 1) violated(&r, "ddp_bucket_size (%d) must be at least 1", c->ddp_bucket_size);
    // Megatron's rule: the parameter all-gather to overlap is the distributed optimizer's
    // (and, as Megatron's arguments.py, it runs on the gradient reduction's buckets and thread)
    if (c->overlap_param_gather && !c->use_distributed_optimizer)
        violated(&r, "overlap_param_gather needs use_distributed_optimizer");
    if (c->overlap_param_gather && !c->overlap_grad_reduce)
        violated(&r, "overlap_param_gather needs overlap_grad_reduce");

    // Recompute
    if (c->recompute_granularity == TB_RECOMPUTE_FULL) {
        if (c->recompute_method == TB_RECOMPUTE_METHOD_NONE)
            violated(&r, "recompute_granularity full needs recompute_method uniform or block");
        int lo = c->recompute_method == TB_RECOMPUTE_BLOCK ? 0 : 1;
        if (c->recompute_num_layers < lo || c->recompute_num_layers > c->num_layers)
            violated(&r, "recompute_num_layers (%d) must be between %d and num_layers (%d)",
                     c->recompute_num_layers, lo, c->num_layers);
    } else {
        if (c->recompute_num_layers < 0)
            violated(&r, "recompute_num_layers (%d) must be non-negative", c->recompute_num_layers);
        else if (c->recompute_num_layers > 0)  // Megatron reads it only with full recompute
            violated(&r, "recompute_num_layers %d needs recompute_granularity full (is %s)", c->recompute_num_layers,
                     config_choice_name("recompute_granularity", c->recompute_granularity));
        if (c->recompute_method != TB_RECOMPUTE_METHOD_NONE)
            violated(&r, "recompute_method %s needs recompute_granularity full (is %s)",
                     config_choice_name("recompute_method", c->recompute_method),
                     config_choice_name("recompute_granularity", c->recompute_granularity));
    }

    // Instrumentation
    if (c->memory_cap < 0) violated(&r, "memory_cap (%lld) must be non-negative", (long long)c->memory_cap);
    if (c->peak_tflops < 0) violated(&r, "peak_tflops (%g) must be non-negative", c->peak_tflops);
    if (c->num_threads < 0) violated(&r, "num_threads (%d) must be non-negative", c->num_threads);
    if (c->seed < 0) violated(&r, "seed (%lld) must be non-negative", (long long)c->seed);
    if (c->save_interval < 0) violated(&r, "save_interval (%d) must be non-negative", c->save_interval);
    if (c->exit_interval < 0) violated(&r, "exit_interval (%d) must be non-negative", c->exit_interval);
    else if (c->exit_interval > c->train_iters)  // training ends before the exit would happen
        violated(&r, "exit_interval %d is beyond train_iters (%d), so the exit would never happen",
                 c->exit_interval, c->train_iters);
    if (c->save_interval > 0 && !c->save[0])
        violated(&r, "save_interval %d needs save (a checkpoint directory)", c->save_interval);
    if (!c->save_optim && !c->save[0])
        violated(&r, "save_optim false (--no-save-optim) needs save (a checkpoint directory)");
    const size_t save_len = strlen(c->save);
    if (save_len >= 12 && !strcmp(c->save + save_len - 12, ".safetensors"))
        violated(&r, "save '%s' names a checkpoint directory; a Hugging Face safetensors file is save_hf's",
                 c->save);
    if (c->ranks_per_process < 0) violated(&r, "ranks_per_process (%d) must be non-negative", c->ranks_per_process);
    if (!(c->collective_timeout > 0))
        violated(&r, "collective_timeout (%g) must be positive", c->collective_timeout);
    if (c->debug_slow_write[0]) {
        int rank, ms;
        if (tb_drill_rank_ms(c->debug_slow_write, &rank, &ms) != 0)
            violated(&r, "debug_slow_write '%s' must be RANK:MS (decimal integers within int range)",
                     c->debug_slow_write);
        else if (rank < 0 || rank >= c->world_size || ms < 0)
            violated(&r, "debug_slow_write '%s': rank must be in [0, %d) and MS at least 0", c->debug_slow_write,
                     c->world_size);
        else if (!c->save[0])
            violated(&r, "debug_slow_write '%s' needs save (a checkpoint directory), or the drill never runs",
                     c->debug_slow_write);
    }
    if (c->async_save && !c->save[0]) violated(&r, "async_save needs save (a checkpoint directory)");
    if (c->dump_tensors[0]) {
        const char *p = c->dump_tensors;
        int n = 0;
        while (*p) {
            char *end;
            long long step = strtoll(p, &end, 10);
            if (end == p || (*end && *end != ',') || step < 1 || step > c->train_iters || ++n > 64) {
                violated(&r, "dump_tensors '%s' must be up to 64 steps in [1, train_iters %d], comma-separated",
                         c->dump_tensors, c->train_iters);
                break;
            }
            p = *end ? end + 1 : end;
        }
    }
    if (c->inject_stall[0]) {
        int rank;
        int64_t step;
        if (tb_drill_rank_step(c->inject_stall, &rank, &step) != 0)
            violated(&r, "inject_stall '%s' must be RANK:STEP (decimal integers)", c->inject_stall);
        else if (rank < 0 || rank >= c->world_size || step < 1)
            violated(&r, "inject_stall '%s': rank must be in [0, %d) and step at least 1", c->inject_stall,
                     c->world_size);
        else if (c->world_size < 2)  // a stall is found by the peers left waiting in a collective
            violated(&r, "inject_stall '%s' needs world_size at least 2 (is %d): with no peer to wait for the "
                         "stalled rank, the drill would never fire", c->inject_stall, c->world_size);
        else if (step > c->train_iters)  // a drill that never fires would pass for one that found no hang
            violated(&r, "inject_stall '%s': step %lld is beyond train_iters (%d), so the stall would never happen",
                     c->inject_stall, (long long)step, c->train_iters);
    }

    if (c->debug_slow_data[0]) {
        int rank, ms;
        if (tb_drill_rank_ms(c->debug_slow_data, &rank, &ms) != 0)
            violated(&r, "debug_slow_data '%s' must be RANK:MS (decimal integers within int range)",
                     c->debug_slow_data);
        else if (rank < 0 || rank >= c->world_size || ms < 0 || ms > 60000)
            violated(&r, "debug_slow_data '%s': rank must be in [0, %d) and MS in [0, 60000]", c->debug_slow_data,
                     c->world_size);
    }
    if (c->debug_slow_link[0]) {
        static const char *const kinds[] = {"tp", "cp", "dp", "dp_cp", "pp", "mp", "embedding", "world", "pp_grad"};
        char kind[32];
        int ms, known = 0;
        if (tb_drill_group_ms(c->debug_slow_link, kind, sizeof kind, &ms) != 0) {
            violated(&r, "debug_slow_link '%s' must be GROUP:MS (MS a decimal integer within int range)",
                     c->debug_slow_link);
        } else {
            // each group's ranks (Megatron's: mp = tp x pp; embedding = the first and last stage)
            const int sizes[] = {tp, cp, dp, dp * cp, pp, tp * pp, pp > 1 ? 2 : 1, c->world_size, pp};
            int size = 0;
            for (size_t i = 0; i < sizeof kinds / sizeof *kinds; i++)
                if (!strcmp(kind, kinds[i])) known = 1, size = sizes[i];
            if (!known || ms < 0 || ms > 60000)
                violated(&r, "debug_slow_link '%s': the group must be one of tp, cp, dp, dp_cp, pp, mp, embedding, "
                             "world, pp_grad and MS in [0, 60000]", c->debug_slow_link);
            else if (size < 2)  // a drill that never fires would pass for a link that is not slow
                violated(&r, "debug_slow_link '%s': group %s has 1 rank at this layout, so it has no link to slow",
                         c->debug_slow_link, kind);
        }
    }

    if (r.count || (skip & TB_RULES_SKIP_NOT_SUPPORTED)) return r.count ? -1 : 0;

    // What the engine cannot run yet: refused, never ignored.
    if (cp > 1 && config_attention_core(c) != TB_ATTENTION_FLASH)
        violated(&r, "context_parallel_size %d needs attention_backend flash (the blocked kernel takes the "
                     "sequence's K and V with each local query's position; is %s%s)",
                 cp, config_choice_name("attention_backend", config_attention_core(c)),
                 c->attention_backend == TB_ATTENTION_AUTO ? ", auto's choice here" : "");
    if (c->sequence_parallel && tp == 1)
        violated(&r, "sequence_parallel needs tensor_model_parallel_size > 1 (is 1)");
    config_moe_not_supported_yet(&r, c);
    config_fsdp_not_supported_yet(&r, c);
    device_not_supported_yet(&r, c);
    if (c->save_hf[0] && pp > 1)
        violated(&r, "save_hf with pipeline_model_parallel_size %d: not supported yet (save a checkpoint with save, "
                     "load it at pp 1, then save_hf)", pp);
    if (c->hidden_dropout != 0) violated(&r, "hidden_dropout %g: dropout is not supported yet", c->hidden_dropout);
    if (c->attention_dropout != 0)
        violated(&r, "attention_dropout %g: dropout is not supported yet", c->attention_dropout);
    return r.count ? -1 : 0;
}
