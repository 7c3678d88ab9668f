// config_fsdp.c — Megatron-FSDP's rules of config validation (config_rules.c calls them):
// Megatron-Core's own, then what the engine's FSDP (distributed/fsdp.h) cannot run yet.
#include "config/config.h"
#include "config/config_rules.h"

void config_fsdp_rules(rules *r, const tb_config *c) {
    const char *strategy = config_choice_name("data_parallel_sharding_strategy", c->data_parallel_sharding_strategy);
    if (!c->use_megatron_fsdp) {
        // the strategy is Megatron-FSDP's: without it nothing would read the value
        if (c->data_parallel_sharding_strategy != TB_FSDP_NO_SHARD)
            violated(r, "data_parallel_sharding_strategy %s needs use_megatron_fsdp", strategy);
        return;
    }
    // Megatron's rule: Megatron-FSDP runs with (and replaces) the distributed optimizer
    if (!c->use_distributed_optimizer) violated(r, "use_megatron_fsdp needs use_distributed_optimizer");
    if (c->overlap_param_gather && c->data_parallel_sharding_strategy == TB_FSDP_NO_SHARD)
        violated(r, "overlap_param_gather with data_parallel_sharding_strategy no_shard: nothing to gather (no_shard "
                    "keeps every parameter on every rank)");
}

// The Megatron-FSDP layouts the engine cannot run yet (after every rule passed).
void config_fsdp_not_supported_yet(rules *r, const tb_config *c) {
    if (!c->use_megatron_fsdp) return;
    const char *strategy = config_choice_name("data_parallel_sharding_strategy", c->data_parallel_sharding_strategy);
    // with pp each stage's one model chunk is sharded over its dp group; what is not built:
    if (c->pipeline_model_parallel_size > 1 && c->virtual_pipeline_model_parallel_size > 1)
        violated(r, "use_megatron_fsdp with virtual_pipeline_model_parallel_size %d: not supported yet (a stage's "
                    "model chunks would each need their own units and shard)",
                 c->virtual_pipeline_model_parallel_size);
    // overlap: optim_grads_params prefetches each unit's gather (distributed/fsdp.h); under
    // optim_grads the parameters are whole, and their all-gather after the optimizer step is the
    // rank thread's
    if (c->overlap_param_gather && c->data_parallel_sharding_strategy == TB_FSDP_OPTIM_GRADS)
        violated(r, "use_megatron_fsdp optim_grads with overlap_param_gather: not supported yet (the updated "
                    "parameters' all-gather after the optimizer step runs on the rank's thread; optim_grads_params "
                    "overlaps each unit's gather with the unit before it)");
    if (c->device == TB_DEVICE_CUDA && config_shards_grads(c))
        violated(r, "data_parallel_sharding_strategy %s with device cuda: not supported yet (a unit's memory is "
                    "given back by releasing pages of a host reservation; the device allocator has none)", strategy);
}
