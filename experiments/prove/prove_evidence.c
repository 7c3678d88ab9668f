// prove_evidence.c — a claim's evidence as `tracebook prove` prints it (prove_evidence.h).
#include "prove/prove_evidence.h"

#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include "core/run_dir.h"
#include "prove/prove_records.h"
#include "records/record.h"

// The argv as one shell-pasteable line.
static void print_command(json_t *argv) {
    size_t i;
    json_t *a;
    json_array_foreach(argv, i, a) {
        const char *s = json_string_value(a);
        if (!s) continue;
        int plain = *s != '\0';
        for (const char *p = s; *p && plain; p++)
            plain = strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-./=:,+@%", *p) != NULL;
        fputs(i ? " " : "", stdout);
        if (plain) {
            fputs(s, stdout);
            continue;
        }
        putchar('\'');
        for (const char *p = s; *p; p++) {
            if (*p == '\'') fputs("'\\''", stdout);
            else putchar(*p);
        }
        putchar('\'');
    }
}

static long long cfg_int(json_t *config, const char *key) {
    json_t *v = json_object_get(config, key);
    if (!v) v = json_object_get(json_object_get(config, "derived"), key);
    return json_is_integer(v) ? (long long)json_integer_value(v) : json_is_true(v) ? 1 : -1;
}

static const char *cfg_str(json_t *config, const char *key) {
    const char *s = json_string_value(json_object_get(config, key));
    return s ? s : "?";
}

// The config's highlights and the global-batch identity (config.json "derived").
void evidence_print_config(const char *indent, json_t *config) {
    printf("%sconfig: layers %lld, hidden %lld, heads %lld, seq %lld, vocab %lld | tp %lld, cp %lld, pp %lld",
           indent, cfg_int(config, "num_layers"), cfg_int(config, "hidden_size"),
           cfg_int(config, "num_attention_heads"), cfg_int(config, "seq_length"), cfg_int(config, "vocab_size"),
           cfg_int(config, "tensor_model_parallel_size"), cfg_int(config, "context_parallel_size"),
           cfg_int(config, "pipeline_model_parallel_size"));
    if (cfg_int(config, "virtual_pipeline_model_parallel_size") > 1)
        printf(" (virtual %lld)", cfg_int(config, "virtual_pipeline_model_parallel_size"));
    printf(", dp %lld (world %lld)%s%s | recompute %s | train_iters %lld, seed %lld\n",
           cfg_int(config, "data_parallel_size"), cfg_int(config, "world_size"),
           cfg_int(config, "sequence_parallel") == 1 ? ", sequence parallel" : "",
           cfg_int(config, "use_distributed_optimizer") == 1 ? ", distributed optimizer" : "",
           cfg_str(config, "recompute_granularity"), cfg_int(config, "train_iters"), cfg_int(config, "seed"));
    long long gbs = cfg_int(config, "global_batch_size"), mbs = cfg_int(config, "micro_batch_size"),
              m = cfg_int(config, "num_microbatches"), dp = cfg_int(config, "data_parallel_size"),
              seq = cfg_int(config, "seq_length");
    printf("%sglobal batch %lld = micro batch %lld x microbatches %lld x dp %lld (%lld tokens per step)%s\n", indent,
           gbs, mbs, m, dp, gbs * seq, gbs == mbs * m * dp ? "" : "  [DOES NOT HOLD]");
}

void evidence_print_run(const char *indent, json_t *rec, check_table *checks) {
    const char *dir = json_string_value(json_object_get(rec, "record_dir"));
    record_check *c = dir ? verify_record(checks, dir) : NULL;
    json_t *m = c ? c->manifest : NULL;
    printf("%srun %s", indent, json_string_value(json_object_get(rec, "run_id")));
    json_t *sweep = json_object_get(m, "sweep_point");
    json_int_t rep;
    if (tb_manifest_repetition(m, &rep)) printf("  repetition %lld", (long long)rep);
    if (json_is_object(sweep) && json_object_size(sweep)) {
        char *s = json_dumps(sweep, JSON_COMPACT | JSON_SORT_KEYS);
        printf("  sweep %s", s);
        free(s);
    }
    printf("  value %.10g\n", json_number_value(json_object_get(rec, "value")));
    json_t *steps = json_object_get(rec, "steps_used"), *per = json_object_get(rec, "per_step");
    if (steps && per)
        printf("%s  per step (steps %lld..%lld, %lld step%s, warmup %lld, slowest of %lld rank%s): min %.10g  median "
               "%.10g  max %.10g\n",
               indent, (long long)json_integer_value(json_object_get(steps, "first")),
               (long long)json_integer_value(json_object_get(steps, "last")),
               (long long)json_integer_value(json_object_get(steps, "count")),
               json_integer_value(json_object_get(steps, "count")) == 1 ? "" : "s",
               (long long)json_integer_value(json_object_get(rec, "warmup_steps")),
               (long long)json_integer_value(json_object_get(rec, "ranks")),
               json_integer_value(json_object_get(rec, "ranks")) == 1 ? "" : "s",
               json_number_value(json_object_get(per, "min")), json_number_value(json_object_get(per, "median")),
               json_number_value(json_object_get(per, "max")));
    if (json_object_get(rec, "conditions"))
        printf("%s  conditions: %s\n", indent, json_string_value(json_object_get(rec, "conditions")));
    if (json_object_get(rec, "tokens_formula"))
        printf("%s  tokens per step: %s\n", indent, json_string_value(json_object_get(rec, "tokens_formula")));
    if (json_object_get(rec, "step_of_peak"))
        printf("%s  peak %s at step %lld on rank %lld\n", indent,
               json_string_value(json_object_get(rec, "category")),
               (long long)json_integer_value(json_object_get(rec, "step_of_peak")),
               (long long)json_integer_value(json_object_get(rec, "rank_of_peak")));
    if (json_object_get(rec, "ranks_agreeing"))
        printf("%s  loss at step %lld (rank 0, line %lld; ranks with that loss: %lld)\n", indent,
               (long long)json_integer_value(json_object_get(rec, "step")),
               (long long)json_integer_value(json_object_get(rec, "line")),
               (long long)json_integer_value(json_object_get(rec, "ranks_agreeing")));
    if (json_object_get(rec, "detail"))  // comm_bytes, rank_figure, stage_figure: where the number was read
        printf("%s  %s\n", indent, json_string_value(json_object_get(rec, "detail")));
    if (json_object_get(rec, "key"))
        printf("%s  " TB_RUN_PIPELINE " %s (%s, pp %lld, %lld microbatches)\n", indent,
               json_string_value(json_object_get(rec, "key")), json_string_value(json_object_get(rec, "schedule")),
               (long long)json_integer_value(json_object_get(rec, "pipeline_model_parallel_size")),
               (long long)json_integer_value(json_object_get(rec, "num_microbatches")));
    if (m) {
        printf("%s  command: ", indent);
        print_command(json_object_get(m, "argv"));
        printf("\n");
    }
    // the config as the engine resolved it (run/config.json, verified above)
    char path[PROVE_PATH_MAX];
    json_t *config = NULL;
    if (dir && snprintf(path, sizeof path, "%s/" TB_RECORD_RUN_DIR "/" TB_RUN_CONFIG, dir) < (int)sizeof path)
        config = json_load_file(path, 0, NULL);
    if (!config && m) config = json_incref(json_object_get(m, "config"));
    if (config) {
        char ind[64];
        snprintf(ind, sizeof ind, "%s  ", indent);
        evidence_print_config(ind, config);
        json_decref(config);
    }
    if (m) {
        json_t *git = json_object_get(m, "git");
        const char *commit = json_string_value(json_object_get(git, "commit"));
        int dirty = json_is_true(json_object_get(git, "dirty"));
        printf("%s  commit %s (branch %s, %s)", indent, commit ? commit : "(unknown)",
               json_string_value(json_object_get(git, "branch")) ? json_string_value(json_object_get(git, "branch"))
                                                                  : "?",
               dirty ? "DIRTY" : "clean");
        json_t *changed = json_object_get(git, "changed");
        if (dirty && json_array_size(changed)) {
            printf(" changed:");
            size_t i;
            json_t *f;
            json_array_foreach(changed, i, f) printf(" %s", json_string_value(f) ? json_string_value(f) : "?");
        }
        printf("\n");
    }
    json_t *files = json_object_get(rec, "files");
    size_t i;
    json_t *f;
    printf("%s  files read:", indent);
    json_array_foreach(files, i, f) printf(" %s", json_string_value(f));
    printf("\n");
    if (c) printf("%s  files verified: %d of the manifest's, sha256 matches\n", indent, c->files_verified);
}

void evidence_print(const char *indent, const char *label, json_t *ev, check_table *checks) {
    const char *parser = json_string_value(json_object_get(ev, "parser"));
    json_t *a = json_object_get(ev, "args");
    char *args = json_is_object(a) && json_object_size(a) ? json_dumps(a, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
    printf("%s%sparser %s%s%s = %.10g\n", indent, label, parser, args ? " " : "", args ? args : "",
           json_number_value(json_object_get(ev, "value")));
    free(args);
    printf("%s  definition: %s\n", indent, json_string_value(json_object_get(ev, "definition")));
    if (json_object_get(ev, "sampling_text"))
        printf("%s  sampling: %s\n", indent, json_string_value(json_object_get(ev, "sampling_text")));
    char deeper[64];
    snprintf(deeper, sizeof deeper, "%s  ", indent);
    static const char *const sides[] = {"numerator", "denominator", "treatment", "baseline", "a", "b"};
    for (int s = 0; s < (int)(sizeof sides / sizeof *sides); s++) {
        json_t *part = json_object_get(ev, sides[s]);
        if (!part) continue;
        char side_label[32];
        snprintf(side_label, sizeof side_label, "%s: ", sides[s]);
        evidence_print(deeper, side_label, part, checks);
    }
    json_t *over = json_object_get(ev, "over_records");
    if (over)
        printf("%s  %lld record%s (repetitions): min %.10g  median %.10g  max %.10g\n", indent,
               (long long)json_integer_value(json_object_get(over, "count")),
               json_integer_value(json_object_get(over, "count")) == 1 ? "" : "s",
               json_number_value(json_object_get(over, "min")), json_number_value(json_object_get(over, "median")),
               json_number_value(json_object_get(over, "max")));
    size_t i;
    json_t *rec;
    json_array_foreach(json_object_get(ev, "records"), i, rec) evidence_print_run(deeper, rec, checks);
}

// The claim's text with {value} replaced by the value.
void evidence_print_text(const char *text, double value) {
    const char *p = text;
    for (const char *hit; (hit = strstr(p, "{value}")); p = hit + 7) {
        fwrite(p, 1, (size_t)(hit - p), stdout);
        printf("%.6g", value);
    }
    fputs(p, stdout);
}

json_t *evidence_config_json(json_t *config) {
    static const char *const keys[] = {"num_layers", "hidden_size", "num_attention_heads", "seq_length", "vocab_size",
                                       "tensor_model_parallel_size", "context_parallel_size",
                                       "pipeline_model_parallel_size", "virtual_pipeline_model_parallel_size",
                                       "data_parallel_size", "world_size", "sequence_parallel",
                                       "use_distributed_optimizer", "train_iters", "seed", "global_batch_size",
                                       "micro_batch_size", "num_microbatches"};
    json_t *o = json_object();
    for (size_t i = 0; i < sizeof keys / sizeof *keys; i++)
        json_object_set_new(o, keys[i], json_integer(cfg_int(config, keys[i])));
    json_object_set_new(o, "recompute_granularity", json_string(cfg_str(config, "recompute_granularity")));
    long long gbs = cfg_int(config, "global_batch_size"), mbs = cfg_int(config, "micro_batch_size"),
              m = cfg_int(config, "num_microbatches"), dp = cfg_int(config, "data_parallel_size");
    json_object_set_new(o, "tokens_per_step", json_integer(gbs * cfg_int(config, "seq_length")));
    json_object_set_new(o, "global_batch_identity_holds", json_boolean(gbs == mbs * m * dp));
    return o;
}

