// plan_models.h — `tracebook plan --model NAME`: the preset models, and the model's parameter
// count a plan opens with. docs/ARCHITECTURE.md, "Planner".
//
// A preset is one JSON file in experiments/planner/models/, NAME.json, of the engine's config
// keys exactly as `--config FILE.json` takes them; CMake embeds the files in the binary at
// build time (scripts/embed-plan-models.cmake writes them as byte arrays into the build's
// generated/plan_models_data.h), so --model finds them wherever tracebook runs. A preset loads
// through the engine's own loader (config_apply_json: the key loop of config_load_json), and
// the flags on the command line then override its values, as they override a --config file's.
#ifndef TB_EXPERIMENTS_PLAN_MODELS_H
#define TB_EXPERIMENTS_PLAN_MODELS_H

#include <jansson.h>
#include <stdint.h>
#include <stdio.h>

#include "config/config.h"

typedef struct tb_plan_model {
    const char *name;  // the file's name without .json
    const char *json;  // its contents, NUL-terminated
} tb_plan_model;

// The presets, sorted by name; *count of them.
const tb_plan_model *plan_models(int *count);
// The preset of that name, or NULL.
const tb_plan_model *plan_model_find(const char *name);
// The preset's values applied over cfg through the engine's config loader: 0, or -1 with err
// set (an unknown name's message lists the known ones).
int plan_model_load(tb_config *cfg, const char *name, tb_error *err);
// Whether preset name sets config key (a flag for it overrides the preset's value).
int plan_model_sets(const char *name, const char *key);
// "deepseek-moe-16b, gpt2-124m, ..." into buf.
void plan_model_names(char *buf, size_t len);

// The model's parameters, the engine's own accounting (plan_model_parameters: the tensors of
// core/shapes/gpt_parameters.h), with the vocabulary as given and with the rows the engine pads
// it to (make_vocab_size_divisible_by x tp).
typedef struct tb_plan_parameters {
    int countable;               // 0: the shape has no count (no heads or no hidden size)
    int64_t exact;               // at vocab_size
    int64_t padded;              // at padded_vocab_size (the embedding's and output layer's rows at tp)
    int64_t active;              // per token (MoE: the engine's gpt_active_parameters), at vocab_size
    int vocab_size, padded_vocab_size, tp;
    int experts, topk;           // MoE: num_experts (0: dense), moe_router_topk
} tb_plan_parameters;
// model: the flags' (and preset's) config, resolved or not (a copy is resolved at tp).
tb_plan_parameters plan_parameters(const tb_config *model, int tp);
// A plan's first line: "model: NAME, N parameters (M with the vocabulary padded to Vp at tp T)".
void plan_parameters_print(FILE *out, const char *name, const tb_plan_parameters *p);
// {"exact", "padded", "active" (MoE), "vocab_size", "padded_vocab_size", "tp", "note"}, or JSON null.
json_t *plan_parameters_json(const tb_plan_parameters *p);
// "124,439,808"
void plan_format_count(int64_t n, char *buf, size_t len);

// `tracebook plan --model list`: each preset, its parameter count and shape (JSON with json).
// 0, or -1 with err set (a preset that does not load: a bug of the build).
int plan_models_list(FILE *out, int json, tb_error *err);

#endif
