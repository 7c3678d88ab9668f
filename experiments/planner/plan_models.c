// plan_models.c — the planner's preset models and the model's parameter count (plan_models.h).
// docs/ARCHITECTURE.md, "Planner".
#include "planner/plan_models.h"

#include <stdlib.h>
#include <string.h>

#include "planner/plan.h"
#include "plan_models_data.h"  // (the build directory's, scripts/embed-plan-models.cmake)

const tb_plan_model *plan_models(int *count) {
    *count = PLAN_MODEL_COUNT;
    return plan_model_table;
}

const tb_plan_model *plan_model_find(const char *name) {
    for (int i = 0; i < PLAN_MODEL_COUNT; i++)
        if (!strcmp(plan_model_table[i].name, name)) return &plan_model_table[i];
    return NULL;
}

void plan_model_names(char *buf, size_t len) {
    size_t at = 0;
    buf[0] = '\0';
    for (int i = 0; i < PLAN_MODEL_COUNT && at < len; i++) {
        int n = snprintf(buf + at, len - at, "%s%s", i ? ", " : "", plan_model_table[i].name);
        if (n < 0) break;
        at += (size_t)n;
    }
}

int plan_model_sets(const char *name, const char *key) {
    const tb_plan_model *m = plan_model_find(name);
    json_t *root = m ? json_loads(m->json, 0, NULL) : NULL;
    const int sets = json_object_get(root, key) != NULL;
    json_decref(root);
    return sets;
}

int plan_model_load(tb_config *cfg, const char *name, tb_error *err) {
    const tb_plan_model *m = plan_model_find(name);
    if (!m) {
        char names[1024];
        plan_model_names(names, sizeof names);
        return tb_fail(err, "--model '%s': no such preset; the presets: %s (tracebook plan --model list)", name, names);
    }
    char source[256];
    snprintf(source, sizeof source, "--model %s (experiments/planner/models/%s.json)", name, name);
    json_error_t jerr;
    json_t *root = json_loads(m->json, 0, &jerr);
    if (!root) return tb_fail(err, "%s:%d:%d: %s", source, jerr.line, jerr.column, jerr.text);
    const int rc = config_apply_json(cfg, root, source, err);
    json_decref(root);
    return rc;
}

tb_plan_parameters plan_parameters(const tb_config *model, int tp) {
    tb_plan_parameters p = {0};
    tb_config c = *model;
    c.tensor_model_parallel_size = tp > 0 ? tp : 1;
    c.padded_vocab_size = 0;
    config_resolve(&c);  // ffn, query groups, position rows, the experts' ffn; the padded vocabulary at tp
    p.tp = c.tensor_model_parallel_size;
    p.vocab_size = c.vocab_size;
    p.padded_vocab_size = c.padded_vocab_size;
    p.experts = c.num_experts;
    p.topk = c.moe_router_topk;
    if (c.num_attention_heads < 1 || c.hidden_size < 1 || c.num_layers < 0 || c.vocab_size < 1) return p;
    p.countable = 1;
    // N depends on tp only through the padding: counted on one rank holding every tensor whole
    c.tensor_model_parallel_size = 1;
    c.expert_model_parallel_size = 1;
    c.expert_tensor_parallel_size = 1;
    c.padded_vocab_size = p.padded_vocab_size;
    p.padded = plan_model_parameters(&c);
    c.padded_vocab_size = c.vocab_size;
    p.exact = plan_model_parameters(&c);
    p.active = plan_active_parameters(&c);
    return p;
}

void plan_format_count(int64_t n, char *buf, size_t len) {
    char digits[32];
    snprintf(digits, sizeof digits, "%lld", (long long)(n < 0 ? -n : n));
    const size_t nd = strlen(digits);
    size_t at = 0;
    if (n < 0 && at + 1 < len) buf[at++] = '-';
    for (size_t i = 0; i < nd && at + 1 < len; i++) {
        if (i > 0 && (nd - i) % 3 == 0 && at + 2 < len) buf[at++] = ',';
        buf[at++] = digits[i];
    }
    buf[at < len ? at : len - 1] = '\0';
}

void plan_parameters_print(FILE *out, const char *name, const tb_plan_parameters *p) {
    fprintf(out, "model: %s", name);
    if (!p->countable) {
        fprintf(out, " (no parameter count: the shape has no attention heads or no hidden size)\n");
        return;
    }
    char exact[32], padded[32], vp[32], active[32];
    plan_format_count(p->exact, exact, sizeof exact);
    plan_format_count(p->padded, padded, sizeof padded);
    plan_format_count(p->padded_vocab_size, vp, sizeof vp);
    fprintf(out, ", %s parameters (%s with the vocabulary padded to %s at tp %d)", exact, padded, vp, p->tp);
    if (p->experts > 0) {
        plan_format_count(p->active, active, sizeof active);
        fprintf(out, ", %s active per token (top-%d of %d experts)", active, p->topk, p->experts);
    }
    fprintf(out, "\n");
}

json_t *plan_parameters_json(const tb_plan_parameters *p) {
    if (!p->countable) return json_null();
    json_t *o = json_pack("{s:I, s:I, s:i, s:i, s:i, s:s}", "exact", (json_int_t)p->exact, "padded",
                          (json_int_t)p->padded, "vocab_size", p->vocab_size, "padded_vocab_size",
                          p->padded_vocab_size, "tp", p->tp, "note",
                          "the engine's tensors (core/shapes/gpt_parameters.h); exact: the embedding's (and an "
                          "untied output layer's) rows at vocab_size; padded: at padded_vocab_size, vocab_size "
                          "rounded up to a multiple of make_vocab_size_divisible_by x tp");
    if (o && p->experts > 0) json_object_set_new(o, "active", json_integer(p->active));
    return o;
}

int plan_models_list(FILE *out, int json, tb_error *err) {
    json_t *list = json ? json_array() : NULL;
    if (!json)
        fprintf(out, "preset models (tracebook plan --model NAME: experiments/planner/models/NAME.json, built into "
                     "this binary; flags override its values):\n");
    for (int i = 0; i < PLAN_MODEL_COUNT; i++) {
        const tb_plan_model *m = &plan_model_table[i];
        tb_config c;
        config_defaults(&c);
        if (plan_model_load(&c, m->name, err) != 0) {
            json_decref(list);
            return -1;
        }
        const tb_plan_parameters p = plan_parameters(&c, 1);
        config_resolve(&c);
        if (json) {
            json_t *preset = json_loads(m->json, 0, NULL);
            json_array_append_new(list, json_pack("{s:s, s:o, s:o*}", "name", m->name, "parameters",
                                                  plan_parameters_json(&p), "config", preset));
            continue;
        }
        char n[32], extra[160] = "";
        plan_format_count(p.exact, n, sizeof n);
        if (c.num_experts > 0) {
            char a[32];
            plan_format_count(p.active, a, sizeof a);
            snprintf(extra, sizeof extra, ", %d experts of ffn %d, top-%d, shared ffn %d (%s active)", c.num_experts,
                     c.moe_ffn_hidden_size, c.moe_router_topk, c.moe_shared_expert_intermediate_size, a);
        }
        fprintf(out, "  %-18s %19s parameters: %d layers, hidden %d, %d heads, %d query groups, ffn %d, vocab %d, "
                     "seq %d%s\n",
                m->name, n, c.num_layers, c.hidden_size, c.num_attention_heads, c.num_query_groups,
                c.ffn_hidden_size, c.vocab_size, c.seq_length, extra);
    }
    if (json) {
        json_t *o = json_pack("{s:o}", "models", list);
        char *s = json_dumps(o, JSON_INDENT(2));
        if (s) fprintf(out, "%s\n", s);
        free(s);
        json_decref(o);
    }
    return 0;
}
