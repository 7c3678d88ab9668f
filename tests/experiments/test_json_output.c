// test_json_output.c — `--json` of the listing commands (docs/RUNBOOKS.md, "JSON output"): each
// prints one JSON document that jansson parses, with the documented keys, and the values
// agree with the facts the same command's text prints. Two tiny recorded runs (one rank, and
// tp 2 on two rank threads) and one exact claim give every command something to list.
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tb_shell.h"
#include "tb_test.h"

#define TRACEBOOK TB_BIN_DIR "/tracebook"
#define DIR_ TB_TEST_TMPDIR "/json_output"
#define ART DIR_ "/artifacts"
#define TINY "num_layers = 2, hidden_size = 32, num_attention_heads = 2, seq_length = 16, vocab_size = 64"

static tb_output sh;
static char run_one[256], run_tp2[256];  // run ids

// Runs `tracebook ARGS --json`, parses stdout as one document (NULL, with a failed check, when
// the command fails or prints anything but one JSON document).
static json_t *json_of(const char *args) {
    int rc = tb_run(&sh, TB_SOURCE_DIR, "%s %s --json", TRACEBOOK, args);
    json_error_t jerr;
    json_t *doc = json_loads(sh.out, 0, &jerr);
    TB_CHECK(rc == 0 && doc, "tracebook %s --json: exit %d, %s (line %d)\n%s\n%s", args, rc, jerr.text, jerr.line,
             sh.out, sh.err);
    return rc == 0 ? doc : (json_decref(doc), NULL);
}

// Runs `tracebook ARGS` (text) into sh.
static int text_of(const char *args) { return tb_run(&sh, TB_SOURCE_DIR, "%s %s", TRACEBOOK, args); }

static int has_keys(json_t *o, const char *const *keys) {
    for (; *keys; keys++)
        if (!json_object_get(o, *keys)) {
            printf("    missing key \"%s\"\n", *keys);
            return 0;
        }
    return 1;
}

TB_TEST(two_recorded_runs_and_a_claim) {
    tb_run(&sh, NULL, "rm -rf %s && mkdir -p %s", DIR_, DIR_);
    tb_write_text(DIR_ "/js.lua", "local exp = tb.experiment{ name = 'js', version = 1, question = 'json?' }\n"
                                  "local one = exp:run{ " TINY ", train_iters = 3 }\n"
                                  "local tp2 = exp:run{ " TINY ", train_iters = 3, tensor_model_parallel_size = 2,"
                                  " world_size = 2 }\n"
                                  "exp:claim{ id = 'mem', parser = 'peak_memory_bytes', runs = one, text = 'b' }\n"
                                  "print('RUNS ' .. one.runs[1].run_id .. ' ' .. tp2.runs[1].run_id)\n");
    TB_REQUIRE(tb_run(&sh, TB_SOURCE_DIR, "%s run %s/js.lua --artifacts %s", TRACEBOOK, DIR_, ART) == 0, "%s\n%s",
               sh.out, sh.err);
    const char *p = strstr(sh.out, "RUNS ");
    TB_REQUIRE(p && sscanf(p, "RUNS %255s %255s", run_one, run_tp2) == 2, "%s", sh.out);
}

TB_TEST(ls_json_lists_the_experiments_and_runs_it_prints) {
    json_t *doc = json_of("ls --artifacts " ART);
    TB_REQUIRE(doc, "ls");
    json_t *e = json_array_get(json_object_get(doc, "experiments"), 0);
    static const char *const keys[] = {"name", "version", "question", "runs", "finished", "failed", "running",
                                       "incomplete", "unreadable", "claims", "claims_proven", NULL};
    TB_CHECK(json_array_size(json_object_get(doc, "experiments")) == 1 && has_keys(e, keys), "one experiment, its keys");
    TB_CHECK(!strcmp(json_string_value(json_object_get(e, "name")), "js") &&
                 json_integer_value(json_object_get(e, "runs")) == 2 &&
                 json_integer_value(json_object_get(e, "finished")) == 2 &&
                 json_integer_value(json_object_get(e, "claims")) == 1,
             "js v1: 2 runs, 2 finished, 1 claim");
    TB_REQUIRE(text_of("ls --artifacts " ART) == 0, "%s", sh.err);
    char line[256];
    snprintf(line, sizeof line, "%-24s %7s %5lld %9lld", "js", "v1", (long long)json_integer_value(json_object_get(e, "runs")),
             (long long)json_integer_value(json_object_get(e, "finished")));
    TB_CHECK(strstr(sh.out, line), "the text has '%s':\n%s", line, sh.out);
    json_decref(doc);

    doc = json_of("ls --experiment js --artifacts " ART);
    TB_REQUIRE(doc, "ls --experiment js");
    json_t *v = json_array_get(json_object_get(doc, "versions"), 0), *runs = json_object_get(v, "runs");
    TB_CHECK(json_array_size(runs) == 2, "two runs listed");
    TB_REQUIRE(text_of("ls --experiment js --artifacts " ART) == 0, "%s", sh.err);
    size_t i;
    json_t *r;
    json_array_foreach(runs, i, r) {
        static const char *const rkeys[] = {"run_id", "status", "commit", "dirty", "repetition", "sweep_point",
                                            "replay_of", "tokens_per_s", NULL};
        TB_CHECK(has_keys(r, rkeys), "run keys");
        char tps[64];
        snprintf(tps, sizeof tps, "%.1f", json_real_value(json_object_get(r, "tokens_per_s")));
        const char *row = strstr(sh.out, json_string_value(json_object_get(r, "run_id")));
        const char *eol = row ? strchr(row, '\n') : NULL;
        const char *hit = row ? strstr(row, tps) : NULL;
        TB_CHECK(hit && hit < eol, "run %s: the text's tok/s is %s:\n%s", json_string_value(json_object_get(r, "run_id")),
                 tps, sh.out);
    }
    json_decref(doc);
}

TB_TEST(show_json_holds_the_run_and_the_steps_it_prints) {
    char args[512];
    snprintf(args, sizeof args, "show %s --artifacts %s", run_one, ART);
    json_t *doc = json_of(args);
    TB_REQUIRE(doc, "show");
    static const char *const keys[] = {"run_id", "experiment", "version", "question", "status", "exit_status",
                                       "record_dir", "start", "end", "repetition", "seed", "sweep_point", "replay_of",
                                       "commit", "branch", "dirty", "problem", "argv", "config", "steps", "summary",
                                       NULL};
    TB_CHECK(has_keys(doc, keys), "show's keys");
    json_t *steps = json_object_get(doc, "steps"), *summary = json_object_get(doc, "summary");
    TB_CHECK(json_array_size(steps) == 3 && json_integer_value(json_object_get(summary, "steps")) == 3, "three steps");
    TB_CHECK(!strcmp(json_string_value(json_object_get(doc, "status")), "finished") &&
                 json_integer_value(json_object_get(doc, "exit_status")) == 0 &&
                 strstr(json_string_value(json_array_get(json_object_get(doc, "argv"), 0)), "pretrain_gpt") &&
                 json_integer_value(json_object_get(json_object_get(doc, "config"), "num_layers")) == 2,
             "status, argv and config");
    // rank 0's loss of each step: what metrics.rank-00000.jsonl holds
    char path[1024];
    snprintf(path, sizeof path, "%s/run/metrics.rank-00000.jsonl", json_string_value(json_object_get(doc, "record_dir")));
    char *metrics = tb_slurp(path);
    TB_REQUIRE(metrics, "%s", path);
    const char *line = metrics;
    size_t i;
    json_t *st;
    json_array_foreach(steps, i, st) {
        json_t *m = json_loads(line, JSON_DISABLE_EOF_CHECK, NULL);
        TB_CHECK(m && json_real_value(json_object_get(m, "loss")) == json_real_value(json_object_get(st, "loss")) &&
                     json_integer_value(json_object_get(m, "step")) == json_integer_value(json_object_get(st, "step")),
                 "step %zu's loss is the metrics line's", i + 1);
        json_decref(m);
        line = strchr(line, '\n') + 1;
    }
    free(metrics);
    TB_REQUIRE(text_of(args) == 0, "%s", sh.err);
    char final[128];
    snprintf(final, sizeof final, "final loss %.8g (step 3)", json_real_value(json_object_get(summary, "final_loss")));
    TB_CHECK(strstr(sh.out, final), "the text has '%s':\n%s", final, sh.out);
    json_decref(doc);
}

TB_TEST(diff_json_names_the_keys_the_text_names) {
    char args[1200];
    snprintf(args, sizeof args, "diff %s %s --phases --artifacts %s", run_one, run_tp2, ART);
    json_t *doc = json_of(args);
    TB_REQUIRE(doc, "diff");
    static const char *const keys[] = {"a", "b", "config_differences", "config_equal", "metrics", "phases", NULL};
    TB_CHECK(has_keys(doc, keys), "diff's keys");
    TB_CHECK(!strcmp(json_string_value(json_object_get(json_object_get(doc, "b"), "run_id")), run_tp2), "b is tp 2");
    int tp_found = 0;
    size_t i;
    json_t *d;
    TB_REQUIRE(text_of(args) == 0, "%s", sh.err);
    json_array_foreach(json_object_get(doc, "config_differences"), i, d) {
        const char *key = json_string_value(json_object_get(d, "key"));
        if (!strcmp(key, "tensor_model_parallel_size"))
            tp_found = json_integer_value(json_object_get(d, "a")) == 1 && json_integer_value(json_object_get(d, "b")) == 2;
        char needle[300];
        snprintf(needle, sizeof needle, "\n  %s ", key);
        TB_CHECK(strstr(sh.out, needle), "the text names %s", key);
    }
    TB_CHECK(tp_found, "tensor_model_parallel_size 1 against 2");
    char counts[128];
    snprintf(counts, sizeof counts, "(%zu config keys differ, %lld equal)", json_array_size(json_object_get(doc, "config_differences")),
             (long long)json_integer_value(json_object_get(doc, "config_equal")));
    TB_CHECK(strstr(sh.out, counts), "the text has '%s'", counts);
    json_t *phases = json_object_get(doc, "phases"), *first = json_object_get(phases, "first_changed");
    TB_CHECK(json_array_size(json_object_get(phases, "phases")) >= 6, "every phase");
    if (json_is_null(first)) TB_CHECK(strstr(sh.out, "no phase changed beyond"), "no phase changed, as the text says");
    else {
        char f[128];
        snprintf(f, sizeof f, "first changed phase: %s (", json_string_value(json_object_get(first, "phase")));
        TB_CHECK(strstr(sh.out, f), "the text has '%s'", f);
    }
    json_decref(doc);
}

TB_TEST(prove_json_gives_each_verdict_with_its_evidence) {
    json_t *doc = json_of("prove --all --artifacts " ART);
    TB_REQUIRE(doc, "prove");
    json_t *summary = json_object_get(doc, "summary"), *c = json_array_get(json_object_get(doc, "claims"), 0);
    TB_CHECK(json_integer_value(json_object_get(summary, "claims")) == 1 &&
                 json_integer_value(json_object_get(summary, "proven")) == 1,
             "one claim, proven");
    static const char *const keys[] = {"name", "experiment", "version", "id", "verdict", "proven", "headline",
                                       "reasons", "text", "parser", "args", "runs", "claimed", "at_most", "derived",
                                       "relative_difference", "relative_tolerance", "accepted", "warnings", "evidence",
                                       NULL};
    TB_CHECK(has_keys(c, keys), "a claim's keys");
    TB_CHECK(!strcmp(json_string_value(json_object_get(c, "verdict")), "PROVEN") &&
                 json_real_value(json_object_get(c, "derived")) == json_real_value(json_object_get(c, "claimed")),
             "PROVEN, derived = claimed");
    json_t *rec = json_array_get(json_object_get(json_object_get(c, "evidence"), "records"), 0);
    TB_CHECK(!strcmp(json_string_value(json_object_get(rec, "run_id")), run_one) &&
                 json_is_array(json_object_get(json_object_get(rec, "record"), "command")) &&
                 json_integer_value(json_object_get(json_object_get(rec, "record"), "files_verified")) > 0,
             "the evidence's record: its command and verified files");
    TB_REQUIRE(text_of("prove --all --artifacts " ART) == 0, "%s", sh.err);
    char derived[128];
    snprintf(derived, sizeof derived, "derived %.10g (", json_real_value(json_object_get(c, "derived")));
    TB_CHECK(strstr(sh.out, "PROVEN  js/v1/mem") && strstr(sh.out, derived), "the text's verdict and '%s':\n%s", derived,
             sh.out);
    json_decref(doc);
}

TB_TEST(steps_and_comm_json_count_what_the_text_prints) {
    char args[1200];
    snprintf(args, sizeof args, "steps %s/js/v1/%s/run", ART, run_tp2);
    json_t *doc = json_of(args);
    TB_REQUIRE(doc, "steps");
    TB_CHECK(json_array_size(doc) == 3, "three steps");
    TB_REQUIRE(text_of(args) == 0, "%s", sh.err);
    size_t i;
    json_t *st;
    json_array_foreach(doc, i, st) {
        json_t *ranks = json_object_get(st, "ranks"), *r0 = json_array_get(ranks, 0);
        static const char *const keys[] = {"rank", "step_ms", "data_ms", "forward_ms", "backward_ms", "optimizer_ms",
                                           "p2p_wait_ms", "idle_ms", "collectives", NULL};
        TB_CHECK(json_array_size(ranks) == 2 && has_keys(r0, keys), "two ranks with every phase");
        char mark[64];
        long long slow = json_integer_value(json_object_get(st, "slowest_rank"));
        snprintf(mark, sizeof mark, "  * %-5lld %9.2f", slow,
                 json_real_value(json_object_get(json_array_get(ranks, (size_t)slow), "step_ms")));
        TB_CHECK(strstr(sh.out, mark), "the text marks rank %lld slowest: '%s'", slow, mark);
    }
    json_decref(doc);
    snprintf(args, sizeof args, "comm %s/js/v1/%s/run", ART, run_tp2);
    doc = json_of(args);
    TB_REQUIRE(doc, "comm");
    TB_REQUIRE(text_of(args) == 0, "%s", sh.err);
    char head[64];
    snprintf(head, sizeof head, "%zu collective calls matched", json_array_size(doc));
    TB_CHECK(json_array_size(doc) > 0 && strstr(sh.out, head), "'%s' in the text:\n%s", head, sh.out);
    json_decref(doc);
}

int main(void) {
    TB_RUN(two_recorded_runs_and_a_claim);
    TB_RUN(ls_json_lists_the_experiments_and_runs_it_prints);
    TB_RUN(show_json_holds_the_run_and_the_steps_it_prints);
    TB_RUN(diff_json_names_the_keys_the_text_names);
    TB_RUN(prove_json_gives_each_verdict_with_its_evidence);
    TB_RUN(steps_and_comm_json_count_what_the_text_prints);
    tb_output_free(&sh);
    return tb_test_summary();
}
