// pretrain_gpt end to end: the run directory holds the resolved config, per-step metrics,
// a Chrome trace whose ranges nest and cover every module, and a memory snapshot; an
// allocation over --memory-cap ends the run with an OOM report; bad data files are
// refused by name; preprocess_data output trains.
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <string.h>
#include <sys/wait.h>

#include "backend/cpu/kernels.h"
#include "core/json_number.h"
#include "datasets/gpt_dataset.h"
#include "tb_shell.h"
#include "tb_run_dir.h"
#include "backend/cpu/kernels.h"
#include "tb_test.h"

#define PRETRAIN TB_BIN_DIR "/pretrain_gpt"
#define TINY                                                                                           \
    " --num-layers 2 --hidden-size 32 --num-attention-heads 2 --seq-length 16 --vocab-size 64"        \
    " --micro-batch-size 2 --global-batch-size 4 --num-threads 1"

static tb_output sh;  // what the last command printed

#define RUN_DIR TB_TEST_TMPDIR "/run_dir_basic"

TB_TEST(run_writes_resolved_config_and_per_step_metrics) {
    TB_REQUIRE(tb_run(&sh, NULL, "rm -rf %s && %s" TINY " --train-iters 3 --run-dir %s", RUN_DIR, PRETRAIN, RUN_DIR) ==
                   0,
               "pretrain_gpt failed: %s", sh.err);
    TB_CHECK(strstr(sh.out, "global batch 4 = micro batch 2 x microbatches 2 x dp 1"),
             "the global-batch formula is printed:\n%s", sh.out);
    TB_CHECK(strstr(sh.out, "artifacts: " RUN_DIR), "the run dir is named at the end");
    json_t *cfg = tb_load_json(RUN_DIR "/" TB_RUN_CONFIG);
    TB_REQUIRE(cfg, "config.json");
    TB_CHECK(json_integer_value(json_object_get(cfg, "num_layers")) == 2, "num_layers");
    TB_CHECK(json_integer_value(json_object_get(cfg, "ffn_hidden_size")) == 128, "resolved ffn size");
    TB_CHECK(json_integer_value(json_object_get(json_object_get(cfg, "derived"), "num_microbatches")) == 2,
             "derived microbatches");
    json_decref(cfg);

    char path[1024];
    FILE *f = fopen(tb_rank_path(path, sizeof path, RUN_DIR, TB_RANK_METRICS, 0), "r");
    TB_REQUIRE(f, "metrics file");
    char line[8192];
    int steps = 0;
    while (fgets(line, sizeof line, f)) {
        json_error_t e;
        json_t *m = json_loads(line, 0, &e);
        TB_REQUIRE(m, "metrics line %d is not JSON: %s", steps + 1, e.text);
        steps++;
        TB_CHECK(json_integer_value(json_object_get(m, "step")) == steps, "step numbers count up");
        const char *numbers[] = {"loss", "lr", "grad_norm", "step_ms", "tokens_per_s", "tflops"};
        for (int i = 0; i < 6; i++) {
            json_t *v = json_object_get(m, numbers[i]);
            TB_CHECK(json_is_number(v) && json_number_value(v) >= 0, "%s is a non-negative number", numbers[i]);
        }
        TB_CHECK(json_number_value(json_object_get(m, "step_ms")) > 0, "step_ms > 0");
        TB_CHECK(json_integer_value(json_object_get(m, "tokens")) == 4 * 16, "tokens per step = 4 x 16");
        TB_CHECK(json_is_null(json_object_get(m, "mfu")), "mfu is null without --peak-tflops");
        json_t *mem = json_object_get(m, "mem_peak_bytes");
        const char *cats[] = {"params", "grads", "optimizer", "activations", "workspace", "comm", "total"};
        for (int i = 0; i < 7; i++) TB_CHECK(json_is_integer(json_object_get(mem, cats[i])), "mem %s", cats[i]);
        TB_CHECK(json_integer_value(json_object_get(mem, "activations")) > 0, "activations were accounted");
        json_decref(m);
    }
    fclose(f);
    TB_CHECK(steps == 3, "3 metrics lines, got %d", steps);
}

// A second run into a run directory that holds the first's files is refused before it writes
// anything: the first run's files stay as they were (a reader would otherwise mix the two runs,
// or count the first's rank files as ranks of the second). An empty directory is taken.
TB_TEST(a_run_directory_holding_a_run_is_refused_and_left_as_it_was) {
    const char *dir = TB_TEST_TMPDIR "/run_dir_reused";
    char path[1024];
    tb_rank_path(path, sizeof path, dir, TB_RANK_METRICS, 0);
    TB_REQUIRE(tb_run(&sh, NULL, "rm -rf %s && mkdir %s && %s" TINY " --train-iters 2 --run-dir %s", dir, dir,
                      PRETRAIN, dir) == 0,
               "an empty --run-dir is taken: %s", sh.err);
    char *before = tb_slurp(path);
    TB_REQUIRE(before, "%s", path);
    int rc = tb_run(&sh, NULL, "%s" TINY " --train-iters 1 --seed 9 --run-dir %s", PRETRAIN, dir);
    TB_CHECK(rc != 0 && strstr(sh.err, "--run-dir") && strstr(sh.err, dir) && strstr(sh.err, "not empty"),
             "a second run into %s: exit %d, stderr:\n%s", dir, rc, sh.err);
    char *after = tb_slurp(path);
    TB_CHECK(after && !strcmp(before, after), "the first run's metrics are as they were");
    free(before);
    free(after);
}

// A launch option that no collective of the run would take is refused: --mpi-collectives exact
// chooses how a collective across processes runs, and rank threads have none.
TB_TEST(mpi_collectives_exact_without_processes_is_refused) {
    int rc = tb_run(&sh, NULL, "%s" TINY " --train-iters 1 --world-size 2 --mpi-collectives exact --run-dir %s_exact",
                    PRETRAIN, RUN_DIR);
    TB_CHECK(rc != 0 && strstr(sh.err, "mpi_collectives exact needs collectives across processes"),
             "exit %d, stderr:\n%s", rc, sh.err);
}

TB_TEST(mfu_is_reported_against_the_peak_the_user_sets) {
    TB_REQUIRE(tb_run(&sh, NULL, "rm -rf %s_mfu && %s" TINY " --train-iters 1 --peak-tflops 0.5 --run-dir %s_mfu",
                      RUN_DIR, PRETRAIN, RUN_DIR) == 0,
               "%s", sh.err);
    char path[1024];
    FILE *f = fopen(tb_rank_path(path, sizeof path, RUN_DIR "_mfu", TB_RANK_METRICS, 0), "r");
    TB_REQUIRE(f, "metrics");
    char line[8192];
    TB_REQUIRE(fgets(line, sizeof line, f), "a line");
    fclose(f);
    json_t *m = json_loads(line, 0, NULL);
    double tflops = json_number_value(json_object_get(m, "tflops"));
    double mfu = json_number_value(json_object_get(m, "mfu"));
    TB_CHECK(fabs(mfu - tflops / 0.5) < 1e-9 * (1 + mfu), "mfu %g = tflops %g / 0.5", mfu, tflops);
    json_decref(m);
}

typedef struct event {
    const char *name;
    double ts, end;
    json_t *args;
} event;

static int by_start(const void *a, const void *b) {
    const event *x = a, *y = b;
    if (x->ts != y->ts) return x->ts < y->ts ? -1 : 1;
    return x->end > y->end ? -1 : x->end < y->end ? 1 : 0;  // the enclosing range first
}

static int count_named(const event *ev, int n, const char *name) {
    int c = 0;
    for (int i = 0; i < n; i++) c += !strcmp(ev[i].name, name);
    return c;
}


TB_TEST(trace_ranges_nest_properly_and_cover_every_module) {
    char path[1024];
    json_t *root = tb_load_json(tb_rank_path(path, sizeof path, RUN_DIR, TB_RANK_TRACE, 0));
    TB_REQUIRE(root, "trace JSON");
    TB_CHECK(json_integer_value(json_object_get(json_object_get(root, "distributedInfo"), "rank")) == 0,
             "distributedInfo.rank for Holistic Trace Analysis");
    json_t *events = json_object_get(root, "traceEvents");
    TB_REQUIRE(json_is_array(events), "traceEvents array");
    size_t total = json_array_size(events);
    event *ev = calloc(total, sizeof *ev);
    int n = 0;
    for (size_t i = 0; i < total; i++) {
        json_t *e = json_array_get(events, i);
        if (strcmp(json_string_value(json_object_get(e, "ph")), "X") != 0) continue;
        TB_CHECK(json_integer_value(json_object_get(e, "pid")) == 0, "pid is the rank");
        ev[n].name = json_string_value(json_object_get(e, "name"));
        ev[n].ts = json_number_value(json_object_get(e, "ts"));
        ev[n].end = ev[n].ts + json_number_value(json_object_get(e, "dur"));
        ev[n].args = json_object_get(e, "args");
        TB_CHECK(json_number_value(json_object_get(e, "dur")) >= 0, "%s: negative duration", ev[n].name);
        // the rank thread's CPU time beside the wall time (its OpenMP workers' is not in it)
        const double tdur = json_number_value(json_object_get(e, "tdur"));
        TB_CHECK(json_is_number(json_object_get(e, "tdur")) && tdur >= 0 &&
                     tdur <= json_number_value(json_object_get(e, "dur")) + 1,
                 "%s: thread CPU %.1f us of wall %.1f us", ev[n].name, tdur, json_number_value(json_object_get(e, "dur")));
        n++;
    }
    qsort(ev, (size_t)n, sizeof *ev, by_start);
    // Nesting: with a stack of open ranges, each range must end inside its parent.
    int *parent = malloc((size_t)n * sizeof(int)), stack[128], depth = 0, overlaps = 0;
    const double slack = 0.002;  // µs: the JSON keeps ns resolution
    for (int i = 0; i < n; i++) {
        while (depth > 0 && ev[stack[depth - 1]].end <= ev[i].ts + slack) depth--;
        parent[i] = depth > 0 ? stack[depth - 1] : -1;
        if (depth > 0 && ev[i].end > ev[stack[depth - 1]].end + slack) {
            if (overlaps++ < 3)
                printf("    '%s' [%.3f, %.3f] partly overlaps '%s' [%.3f, %.3f]\n", ev[i].name, ev[i].ts, ev[i].end,
                       ev[stack[depth - 1]].name, ev[stack[depth - 1]].ts, ev[stack[depth - 1]].end);
        }
        TB_REQUIRE(depth < 128, "nesting deeper than 128");
        stack[depth++] = i;
    }
    TB_CHECK(overlaps == 0, "%d ranges partly overlap another", overlaps);

    TB_CHECK(count_named(ev, n, "train_step") == 3, "3 train_step ranges");
    TB_CHECK(count_named(ev, n, "forward") == 6 && count_named(ev, n, "backward") == 6,
             "a forward and a backward range per microbatch (3 steps x 2)");
    const char *every_microbatch[] = {
        "forward", "embedding", "layer.0", "layer.0.input_layernorm", "layer.0.attention", "layer.0.attention.qkv",
        "layer.0.attention.core", "layer.0.attention.proj", "layer.0.pre_mlp_layernorm", "layer.0.mlp",
        "layer.0.mlp.fc1", "layer.0.mlp.activation", "layer.0.mlp.fc2", "layer.1", "final_layernorm",
        "output_layer", "loss", "backward", "loss.backward", "output_layer.backward", "final_layernorm.backward",
        "layer.1.backward", "layer.0.mlp.fc2.backward", "layer.0.mlp.activation.backward", "layer.0.mlp.fc1.backward",
        "layer.0.pre_mlp_layernorm.backward", "layer.0.attention.proj.backward", "layer.0.attention.core.backward",
        "layer.0.attention.qkv.backward", "layer.0.input_layernorm.backward", "embedding.backward"};
    for (size_t i = 0; i < sizeof every_microbatch / sizeof *every_microbatch; i++)
        TB_CHECK(count_named(ev, n, every_microbatch[i]) == 6, "'%s' appears %d times, expected 6 (once per microbatch)",
                 every_microbatch[i], count_named(ev, n, every_microbatch[i]));
    TB_CHECK(count_named(ev, n, "optimizer") == 3 && count_named(ev, n, "optimizer.adamw") == 3, "optimizer per step");

    // Parent chains: fc2 ⊂ mlp ⊂ layer.0 ⊂ forward ⊂ train_step
    const char *chain[] = {"layer.0.mlp.fc2", "layer.0.mlp", "layer.0", "forward", "train_step"};
    const char *bchain[] = {"layer.0.mlp.fc2.backward", "layer.0.mlp.backward", "layer.0.backward", "backward",
                            "train_step"};
    for (int i = 0; i < n; i++) {
        const char **c = !strcmp(ev[i].name, chain[0]) ? chain : !strcmp(ev[i].name, bchain[0]) ? bchain : NULL;
        if (!c) continue;
        int p = i;
        for (int k = 1; k < 5; k++) {
            p = parent[p];
            TB_CHECK(p >= 0 && !strcmp(ev[p].name, c[k]), "parent of '%s' should be '%s', is '%s'", c[k - 1], c[k],
                     p >= 0 ? ev[p].name : "(none)");
            if (p < 0) break;
        }
        TB_CHECK(parent[p] == -1, "train_step is outermost");
    }
    for (int i = 0; i < n; i++) {
        if (!strcmp(ev[i].name, "forward") || !strcmp(ev[i].name, "backward"))
            TB_CHECK(json_is_integer(json_object_get(ev[i].args, "microbatch")),
                     "forward and backward ranges carry their microbatch number");
        if (!strcmp(ev[i].name, "train_step"))
            TB_CHECK(json_is_integer(json_object_get(ev[i].args, "step")), "train_step ranges carry the step");
    }
    free(ev);
    free(parent);
    json_decref(root);
}

TB_TEST(memory_snapshot_explains_the_peak) {
    char path[1024];
    json_t *m = tb_load_json(tb_rank_path(path, sizeof path, RUN_DIR, TB_RANK_MEMORY, 0));
    TB_REQUIRE(m, "memory snapshot");
    json_int_t peak = json_integer_value(json_object_get(m, "total_peak_bytes"));
    json_t *at = json_object_get(m, "at_total_peak");
    TB_CHECK(peak > 0 && json_integer_value(json_object_get(at, "total")) == peak, "categories at peak sum to the peak");
    json_t *live = json_object_get(m, "live_at_total_peak");
    json_int_t sum = 0;
    size_t i;
    json_t *b;
    json_array_foreach(live, i, b) sum += json_integer_value(json_object_get(b, "bytes"));
    TB_CHECK(sum == peak, "the live buffers listed at peak (%lld bytes) add up to the peak (%lld)", (long long)sum,
             (long long)peak);
    TB_CHECK(json_array_size(live) > 5, "several buffers listed");
    json_decref(m);
}

TB_TEST(allocation_over_the_memory_cap_writes_an_oom_report_and_exits_nonzero) {
    char path[1024];
    json_t *m = tb_load_json(tb_rank_path(path, sizeof path, RUN_DIR, TB_RANK_MEMORY, 0));
    TB_REQUIRE(m, "memory snapshot of the uncapped run");
    json_int_t peak = json_integer_value(json_object_get(m, "total_peak_bytes"));
    json_decref(m);
    // One byte under the uncapped peak: the run must stop at the allocation that reaches it.
    int status = tb_run(&sh, NULL, "rm -rf %s_oom && %s" TINY " --train-iters 3 --memory-cap %lld --run-dir %s_oom",
                        RUN_DIR, PRETRAIN, (long long)peak - 1, RUN_DIR);
    TB_CHECK(status == 3, "exit status %d, expected 3", status);
    TB_CHECK(strstr(sh.err, "OUT OF MEMORY on rank 0 (tp0 cp0 dp0 pp0)"), "stderr summary:\n%s", sh.err);
    json_t *r = tb_load_json(RUN_DIR "_oom/" TB_RUN_OOM_REPORT);
    TB_REQUIRE(r, "oom.json");
    TB_CHECK(!strcmp(json_string_value(json_object_get(r, "rank_label")), "rank 0 (tp0 cp0 dp0 pp0)"), "rank label");
    TB_CHECK(json_integer_value(json_object_get(r, "step")) >= 1, "step of the OOM");
    TB_CHECK(json_integer_value(json_object_get(r, "microbatch")) >= 0, "microbatch of the OOM");
    TB_CHECK(strstr(json_string_value(json_object_get(r, "range_stack")), "train_step > "),
             "range stack: %s", json_string_value(json_object_get(r, "range_stack")));
    json_int_t req = json_integer_value(json_object_get(r, "requested_bytes"));
    json_int_t cur = json_integer_value(json_object_get(json_object_get(r, "current"), "total"));
    TB_CHECK(req > 0 && cur + req > peak - 1, "requested %lld + in use %lld exceeds the cap", (long long)req,
             (long long)cur);
    TB_CHECK(json_array_size(json_object_get(r, "live")) > 0, "live buffers listed");
    // allocated vs reserved per category: reserved = in use + the caching allocator's freed
    // blocks (their counting: test_training's caching allocator test)
    json_t *reserved = json_object_get(r, "reserved"), *cached = json_object_get(r, "cached"),
           *current = json_object_get(r, "current");
    TB_REQUIRE(reserved && cached, "oom.json has reserved and cached bytes");
    const char *key;
    json_t *v;
    json_object_foreach(current, key, v) {
        json_int_t want = json_integer_value(v) + json_integer_value(json_object_get(cached, key));
        TB_CHECK(json_integer_value(json_object_get(reserved, key)) == want, "reserved %s %lld = in use + cached %lld",
                 key, (long long)json_integer_value(json_object_get(reserved, key)), (long long)want);
    }
    TB_CHECK(strstr(sh.err, "reserved "), "the stderr summary says what is reserved:\n%s", sh.err);
    json_decref(r);

    // A cap below the parameters fails at model construction, before any step.
    status =
        tb_run(&sh, NULL, "rm -rf %s_oom0 && %s" TINY " --memory-cap 1K --run-dir %s_oom0", RUN_DIR, PRETRAIN, RUN_DIR);
    TB_CHECK(status == 3, "exit status %d, expected 3", status);
    r = tb_load_json(RUN_DIR "_oom0/" TB_RUN_OOM_REPORT);
    TB_REQUIRE(r, "oom.json at init");
    TB_CHECK(json_integer_value(json_object_get(r, "step")) == 0, "OOM before training reports step 0");
    // where in the setup: the range stack is kept there too
    const char *stack = json_string_value(json_object_get(r, "range_stack"));
    TB_CHECK(stack && !strcmp(stack, "setup > setup.model.chunk.0"), "range stack at init: '%s'",
             stack ? stack : "(none)");
    json_decref(r);
}

// Two rank threads that both run out (at model construction, before any collective that an
// abort could stop) both keep their report: one part each, and oom.json lists both, led by
// the earlier one.
TB_TEST(two_ranks_out_of_memory_keep_both_reports_in_the_merged_oom_json) {
    int status = tb_run(&sh, NULL, "rm -rf %s_oom2 && %s" TINY " --world-size 2 --memory-cap 1K --run-dir %s_oom2",
                        RUN_DIR, PRETRAIN, RUN_DIR);
    TB_CHECK(status == 3, "exit status %d, expected 3", status);
    for (int r = 0; r < 2; r++) {
        char part[1024];
        snprintf(part, sizeof part, "%s_oom2/oom.rank-%05d.json", RUN_DIR, r);
        TB_CHECK(tb_exists(part), "rank %d's part %s", r, part);
    }
    json_t *m = tb_load_json(RUN_DIR "_oom2/" TB_RUN_OOM_REPORT);
    TB_REQUIRE(m, "oom.json");
    json_t *all = json_object_get(m, "out_of_memory_ranks");
    TB_CHECK(json_array_size(all) == 2 && json_integer_value(json_object_get(json_array_get(all, 0), "rank")) == 0 &&
                 json_integer_value(json_object_get(json_array_get(all, 1), "rank")) == 1,
             "both ranks listed, by rank (%zu)", json_array_size(all));
    TB_CHECK(json_integer_value(json_object_get(m, "reported_ranks")) == 2 &&
                 json_integer_value(json_object_get(json_array_get(all, 1), "requested_bytes")) > 1024,
             "the merged summary counts both and keeps each request");
    TB_CHECK(json_is_string(json_object_get(m, "rank_label")) && json_is_array(json_object_get(m, "live")),
             "the leading part's fields stay at the top, as a one-rank oom.json has them");
    json_decref(m);
}

TB_TEST(bad_data_files_are_refused_naming_the_file_and_offset) {
    // (each run into a directory of its own: a refused run has written its config.json there)
    int status = tb_run(&sh, NULL, "rm -rf %s_bad*; %s" TINY " --data-path %s/no-such-file.bin --run-dir %s_bad",
                        RUN_DIR, PRETRAIN, TB_TEST_TMPDIR, RUN_DIR);
    TB_CHECK(status != 0 && strstr(sh.err, "no-such-file.bin"), "missing file: status %d, stderr %s", status, sh.err);
    FILE *f = fopen(TB_TEST_TMPDIR "/wrong-magic.bin", "wb");
    int header[256] = {12345, 1, 100};
    fwrite(header, sizeof header, 1, f);
    unsigned short tokens[100] = {0};
    fwrite(tokens, sizeof tokens, 1, f);
    fclose(f);
    status = tb_run(&sh, NULL, "%s" TINY " --data-path %s/wrong-magic.bin --run-dir %s_bad2", PRETRAIN, TB_TEST_TMPDIR,
                    RUN_DIR);
    TB_CHECK(status != 0 && strstr(sh.err, "wrong-magic.bin: offset 0") && strstr(sh.err, "12345"),
             "wrong magic: status %d, stderr %s", status, sh.err);
    uint16_t toks[200];
    for (int i = 0; i < 200; i++) toks[i] = (uint16_t)(i % 64);
    toks[150] = 64;  // == vocab size
    tb_error err;
    TB_REQUIRE(tb_token_file_write(TB_TEST_TMPDIR "/big-id.bin", toks, 200, &err) == 0, "%s", err.msg);
    status =
        tb_run(&sh, NULL, "%s" TINY " --data-path %s/big-id.bin --run-dir %s_bad3", PRETRAIN, TB_TEST_TMPDIR, RUN_DIR);
    TB_CHECK(status != 0 && strstr(sh.err, "big-id.bin: offset 1324") && strstr(sh.err, "64"),
             "token id >= vocab: status %d, stderr %s", status, sh.err);
}

TB_TEST(text_prepared_by_preprocess_data_trains_with_a_byte_vocabulary) {
    FILE *f = fopen(TB_TEST_TMPDIR "/corpus.txt", "w");
    for (int i = 0; i < 40; i++) fprintf(f, "the quick brown fox jumps over the lazy dog %d\n", i);
    fclose(f);
    TB_REQUIRE(tb_run(&sh, NULL, "%s/preprocess_data --input %s/corpus.txt --output %s/corpus.bin", TB_BIN_DIR,
                      TB_TEST_TMPDIR, TB_TEST_TMPDIR) == 0,
               "preprocess_data: %s", sh.err);
    TB_REQUIRE(tb_run(&sh, NULL,
                      "rm -rf %s_text && %s --num-layers 2 --hidden-size 32 --num-attention-heads 2 --seq-length 32 "
                      "--vocab-size 256 --train-iters 2 --data-path %s/corpus.bin --run-dir %s_text",
                      RUN_DIR, PRETRAIN, TB_TEST_TMPDIR, RUN_DIR) == 0,
               "training on it: %s", sh.err);
    TB_CHECK(strstr(sh.out, "data: " TB_TEST_TMPDIR "/corpus.bin"), "the data file is named");
}

TB_TEST(two_runs_of_the_binary_write_identical_losses) {
    static char a[1 << 16], b[1 << 16];
    char path[1024];
    TB_REQUIRE(tb_run(&sh, NULL, "rm -rf %s_d1 && %s" TINY " --train-iters 3 --run-dir %s_d1", RUN_DIR, PRETRAIN,
                      RUN_DIR) == 0,
               "1");
    TB_REQUIRE(tb_run(&sh, NULL, "rm -rf %s_d2 && %s" TINY " --train-iters 3 --run-dir %s_d2", RUN_DIR, PRETRAIN,
                      RUN_DIR) == 0,
               "2");
    TB_REQUIRE(tb_run(&sh, NULL, "grep -o '\"loss\": *[^,]*' %s",
                      tb_rank_path(path, sizeof path, RUN_DIR "_d1", TB_RANK_METRICS, 0)) == 0,
               "grep");
    snprintf(a, sizeof a, "%s", sh.out);
    TB_REQUIRE(tb_run(&sh, NULL, "grep -o '\"loss\": *[^,]*' %s",
                      tb_rank_path(path, sizeof path, RUN_DIR "_d2", TB_RANK_METRICS, 0)) == 0,
               "grep");
    snprintf(b, sizeof b, "%s", sh.out);
    TB_CHECK(strlen(a) > 20 && !strcmp(a, b), "losses differ:\n%s\nvs\n%s", a, b);
}

// Each metrics line of a run directory parsed as JSON; returns how many, -1 when one is not JSON.
static int parse_metrics(const char *dir, json_t **lines, int max) {
    char path[1024];
    FILE *f = fopen(tb_rank_path(path, sizeof path, dir, TB_RANK_METRICS, 0), "r");
    if (!f) return -1;
    char text[1 << 14];
    int n = 0;
    while (n < max && fgets(text, sizeof text, f)) {
        if (!(lines[n] = json_loads(text, 0, NULL))) {
            fclose(f);
            return -1;
        }
        n++;
    }
    fclose(f);
    return n;
}

// Megatron's --check-for-nan-in-loss-and-grad, on by default: a diverging run (lr 1e300)
// stops at the first NaN loss naming the step and microbatch; the step's metrics line is
// still written — as valid JSON, the NaN as "NaN" — and nothing before it is lost.
TB_TEST(a_nan_loss_stops_training_naming_the_step_and_its_metrics_line_stays_valid_json) {
    int status = tb_run(&sh, NULL, "rm -rf %s_nan && %s" TINY " --train-iters 4 --lr 1e300 --run-dir %s_nan", RUN_DIR,
                        PRETRAIN, RUN_DIR);
    TB_CHECK(status == 1, "exit status %d, expected 1:\n%s", status, sh.err);
    TB_CHECK(strstr(sh.err, "step 2: loss ") && strstr(sh.err, "microbatch 0") && strstr(sh.err, "training stopped") &&
                 strstr(sh.err, "rank 0 (tp0 cp0 dp0 pp0)"),
             "the stop names the step, the microbatch and the rank:\n%s", sh.err);
    json_t *lines[8] = {0};
    int n = parse_metrics(RUN_DIR "_nan", lines, 8);
    TB_CHECK(n == 2, "%d metrics lines parse as JSON (want 2: steps 1 and 2)", n);
    if (n == 2) {
        double v;
        TB_CHECK(json_is_string(json_object_get(lines[1], "loss")) &&
                     tb_json_number_value(json_object_get(lines[1], "loss"), &v) && isnan(v),
                 "step 2's loss is written \"NaN\"");
        TB_CHECK(json_is_number(json_object_get(lines[0], "loss")), "step 1's loss is a number");
    }
    for (int i = 0; i < 8; i++) json_decref(lines[i]);

    // the flag's negation, as Megatron's: trains on through NaN, every line still JSON
    status = tb_run(&sh, NULL, "rm -rf %s_nan2 && %s" TINY " --train-iters 4 --lr 1e300 --no-check-for-nan-in-loss-and-grad"
                               " --run-dir %s_nan2", RUN_DIR, PRETRAIN, RUN_DIR);
    TB_CHECK(status == 0, "--no-check-for-nan-in-loss-and-grad: exit status %d:\n%s", status, sh.err);
    memset(lines, 0, sizeof lines);
    n = parse_metrics(RUN_DIR "_nan2", lines, 8);
    TB_CHECK(n == 4, "%d metrics lines parse as JSON (want 4)", n);
    for (int i = 0; i < 8; i++) json_decref(lines[i]);
}

// The run records the conditions its timings were measured under (conditions.json and each
// metrics line): threads per rank, oversubscription, CPU time, and what other processes took.
// Beside two busy loops the host's other processes are seen taking a large share of it.
TB_TEST(a_run_records_its_measurement_conditions_and_a_contended_run_is_seen_as_contended) {
    // 4 rank threads of 1 thread each on this machine's cores: oversubscribed when cores < 4
    int status = tb_run(&sh, NULL, "rm -rf %s_cond && %s" TINY " --train-iters 3 --world-size 4 "
                        "--tensor-model-parallel-size 2 --run-dir %s_cond", RUN_DIR, PRETRAIN, RUN_DIR);
    TB_REQUIRE(status == 0, "pretrain_gpt: %s", sh.err);
    json_t *c = tb_load_json(RUN_DIR "_cond/" TB_RUN_CONDITIONS);
    TB_REQUIRE(c, TB_RUN_CONDITIONS);
    json_t *threads = json_object_get(c, "threads");
    TB_CHECK(json_integer_value(json_object_get(threads, "ranks")) == 4 &&
                 json_integer_value(json_object_get(threads, "openmp_per_rank")) == 1 &&
                 json_integer_value(json_object_get(threads, "total")) == 4,
             "4 ranks of 1 thread each");
    long cores = json_integer_value(json_object_get(json_object_get(c, "cores"), "usable"));
    TB_CHECK(json_is_true(json_object_get(c, "oversubscribed")) == (cores < 4), "oversubscribed with %ld cores", cores);
    TB_CHECK(json_number_value(json_object_get(c, "process_cpu_s")) > 0 && json_number_value(json_object_get(c, "wall_s")) > 0,
             "CPU and wall time");
    json_decref(c);
    json_t *lines[4] = {0};
    TB_CHECK(parse_metrics(RUN_DIR "_cond", lines, 4) == 3 &&
                 json_is_number(json_object_get(json_object_get(lines[2], "conditions"), "process_cpu_ms")),
             "each metrics line carries its step's conditions");
    for (int i = 0; i < 4; i++) json_decref(lines[i]);

    // one rank beside two busy loops (bounded: they end by themselves after 20 s)
    status = tb_run(&sh, NULL,
                    "timeout 20 sh -c 'while :; do :; done' & a=$!; timeout 20 sh -c 'while :; do :; done' & b=$!; "
                    "sleep 0.5; rm -rf %s_busy && %s" TINY " --train-iters 40 --run-dir %s_busy; rc=$?; "
                    "kill $a $b 2>/dev/null; wait $a $b 2>/dev/null; exit $rc",
                    RUN_DIR, PRETRAIN, RUN_DIR);
    TB_REQUIRE(status == 0, "pretrain_gpt beside busy loops: %s", sh.err);
    c = tb_load_json(RUN_DIR "_busy/" TB_RUN_CONDITIONS);
    TB_REQUIRE(c, TB_RUN_CONDITIONS " of the contended run");
    double share = json_number_value(json_object_get(json_object_get(c, "host"), "other_processes_share"));
    TB_CHECK(share > 0.25, "other processes took %.0f%% of the cores during the run", 100 * share);
    json_decref(c);
}

// The thread policy (backend/cpu/kernels.h) is recorded with who chose it: one rank takes the
// usable cores, rank threads one each, --num-threads overrides both; the wait policy is the
// engine's ("ENGINE" below: a bounded spin on a quiet host, sleep beside a busy task, with the
// reason) unless the environment chose one. Whether the host is quiet while ctest runs
// another test beside this one is not this test's to know: the recorded policy must agree
// with the recorded reason (the busy case is wait_policy_sleeps_beside_a_busy_process).
TB_TEST(the_thread_policy_is_recorded_with_who_chose_it) {
    static const char *const model = " --num-layers 2 --hidden-size 32 --num-attention-heads 2 --seq-length 16"
                                     " --vocab-size 64 --micro-batch-size 2 --global-batch-size 4 --train-iters 2";
    static const struct {
        const char *env, *flags;
        int per_rank;  // 0: the usable cores
        const char *chosen_by, *policy, *source;
    } cases[] = {
        {"env -u OMP_WAIT_POLICY -u GOMP_SPINCOUNT", "", 0, "the usable cores", "ENGINE", "engine default"},
        {"env -u OMP_WAIT_POLICY -u GOMP_SPINCOUNT", " --world-size 2 --tensor-model-parallel-size 2", 1,
         "1 per rank thread", "ENGINE", "engine default"},
        {"env -u GOMP_SPINCOUNT OMP_WAIT_POLICY=ACTIVE", " --num-threads 1", 1, "--num-threads 1", "ACTIVE",
         "environment"},
        {"env -u OMP_WAIT_POLICY GOMP_SPINCOUNT=1000", " --world-size 2 --tensor-model-parallel-size 2 --num-threads 2",
         2, "--num-threads 2", "GOMP_SPINCOUNT=1000", "environment"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int status = tb_run(&sh, NULL, "rm -rf %s_threads && %s %s%s%s --run-dir %s_threads", RUN_DIR, cases[i].env,
                            PRETRAIN, model, cases[i].flags, RUN_DIR);
        TB_REQUIRE(status == 0, "case %zu: pretrain_gpt: %s", i, sh.err);
        json_t *c = tb_load_json(RUN_DIR "_threads/" TB_RUN_CONDITIONS);
        TB_REQUIRE(c, "case %zu: " TB_RUN_CONDITIONS, i);
        json_t *t = json_object_get(c, "threads"), *cores = json_object_get(c, "cores");
        long usable = (long)json_integer_value(json_object_get(cores, "usable"));
        long per_rank = (long)json_integer_value(json_object_get(t, "openmp_per_rank"));
        long total = (long)json_integer_value(json_object_get(t, "total"));
        long want = cases[i].per_rank ? cases[i].per_rank : usable;
        TB_CHECK(per_rank == want && (long)json_integer_value(json_object_get(t, "blas_per_rank")) == want,
                 "case %zu: %ld OpenMP threads per rank (want %ld)", i, per_rank, want);
        const char *chosen = json_string_value(json_object_get(t, "chosen_by"));
        const char *policy = json_string_value(json_object_get(t, "openmp_wait_policy"));
        const char *source = json_string_value(json_object_get(t, "openmp_wait_policy_source"));
        TB_CHECK(chosen && !strcmp(chosen, cases[i].chosen_by), "case %zu: chosen by '%s' (want '%s')", i,
                 chosen ? chosen : "(none)", cases[i].chosen_by);
        const char *reason = json_string_value(json_object_get(t, "openmp_wait_policy_reason"));
        const char *policy_want = cases[i].policy;
        if (!strcmp(policy_want, "ENGINE"))  // the engine's choice, by the reason it gives
            policy_want = reason && !strncmp(reason, "quiet host:", 11) ? "GOMP_SPINCOUNT=300000"
                   : reason && !strncmp(reason, "busy host:", 10) ? "PASSIVE"
                                                                  : "(a reason: quiet host or busy host)";
        else
            TB_CHECK(reason && !reason[0], "case %zu: a reason '%s' for the environment's policy", i, reason);
        TB_CHECK(policy && source && !strcmp(policy, policy_want) && !strcmp(source, cases[i].source),
                 "case %zu: wait policy '%s' from '%s' (want '%s' from '%s'; reason '%s')", i, policy ? policy : "(none)",
                 source ? source : "(none)", policy_want, cases[i].source, reason ? reason : "(none)");
        long occupied = (long)json_integer_value(json_object_get(cores, "occupied"));
        TB_CHECK(occupied == (total < usable ? total : usable), "case %zu: %ld threads occupy %ld of %ld cores", i,
                 total, occupied, usable);
        json_decref(c);
    }
}

// The choice itself: spin only when no other task was runnable; sleep when one was, or when
// the host could not be read (unknown is not quiet).
TB_TEST(wait_policy_spins_only_on_a_quiet_host) {
    const char *name, *value;
    char why[512];
    TB_CHECK(cpu_wait_policy_choose(0, &name, &value, why, sizeof why) == 1 && !strcmp(name, "GOMP_SPINCOUNT") &&
                 !strcmp(value, TB_SPIN_ROUNDS) && !strncmp(why, "quiet host: ", 12),
             "no other task: %s=%s (%s)", name, value, why);
    for (int others = 1; others <= 3; others++)
        TB_CHECK(cpu_wait_policy_choose(others, &name, &value, why, sizeof why) == 0 &&
                     !strcmp(name, "OMP_WAIT_POLICY") && !strcmp(value, "PASSIVE") && !strncmp(why, "busy host: ", 11),
                 "%d other tasks: %s=%s (%s)", others, name, value, why);
    TB_CHECK(cpu_wait_policy_choose(-1, &name, &value, why, sizeof why) == 0 && !strcmp(value, "PASSIVE") &&
                 strstr(why, "unreadable"),
             "unreadable: %s=%s (%s)", name, value, why);
}

// Beside a task that keeps a core busy, the engine's default lets waiting threads sleep at
// once (a spinning team waits at every barrier for its member sharing that core), and says why.
TB_TEST(wait_policy_sleeps_beside_a_busy_process) {
    int status = tb_run(&sh, NULL,
                        "timeout 20 sh -c 'while :; do :; done' & a=$!; sleep 0.3; rm -rf %s_policy && "
                        "env -u OMP_WAIT_POLICY -u GOMP_SPINCOUNT %s" TINY " --train-iters 2 --run-dir %s_policy; "
                        "rc=$?; kill $a 2>/dev/null; wait $a 2>/dev/null; exit $rc",
                        RUN_DIR, PRETRAIN, RUN_DIR);
    TB_REQUIRE(status == 0, "pretrain_gpt beside a busy loop: %s", sh.err);
    json_t *c = tb_load_json(RUN_DIR "_policy/" TB_RUN_CONDITIONS);
    TB_REQUIRE(c, TB_RUN_CONDITIONS " of the run beside a busy loop");
    json_t *t = json_object_get(c, "threads");
    const char *policy = json_string_value(json_object_get(t, "openmp_wait_policy"));
    const char *reason = json_string_value(json_object_get(t, "openmp_wait_policy_reason"));
    TB_CHECK(policy && !strcmp(policy, "PASSIVE") && reason && strstr(reason, "busy host: ") &&
                 strstr(reason, "other task"),
             "beside a busy loop: policy '%s', reason '%s'", policy ? policy : "(none)", reason ? reason : "(none)");
    json_decref(c);
}

// A rank's background threads (the async checkpoint writer, the gradient-reduce communication
// thread) compute beside its kernels: conditions.json counts them in the total, so two rank
// threads with both on 2 cores are 6 threads, oversubscribed; without them 2 threads.
TB_TEST(background_threads_count_in_the_threads_a_run_occupied) {
    static const struct {
        const char *flags, *background;
        long per_rank;
    } cases[] = {
        {"", "", 0},
        {" --save %s_bg/ckpt --save-interval 2 --async-save", "async checkpoint writer", 1},
        {" --overlap-grad-reduce", "gradient-reduce communication", 1},
        {" --overlap-grad-reduce --save %s_bg/ckpt --save-interval 2 --async-save",
         "async checkpoint writer, gradient-reduce communication", 2},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char flags[512];
        snprintf(flags, sizeof flags, cases[i].flags, RUN_DIR);
        int status = tb_run(&sh, NULL, "rm -rf %s_bg && %s" TINY " --train-iters 2 --world-size 2%s --run-dir %s_bg/run",
                            RUN_DIR, PRETRAIN, flags, RUN_DIR);
        TB_REQUIRE(status == 0, "case %zu: pretrain_gpt: %s", i, sh.err);
        json_t *c = tb_load_json(RUN_DIR "_bg/run/" TB_RUN_CONDITIONS);
        TB_REQUIRE(c, "case %zu: " TB_RUN_CONDITIONS, i);
        json_t *t = json_object_get(c, "threads");
        long per_rank = (long)json_integer_value(json_object_get(t, "background_per_rank"));
        const char *what = json_string_value(json_object_get(t, "background"));
        long total = (long)json_integer_value(json_object_get(t, "total"));
        long usable = (long)json_integer_value(json_object_get(json_object_get(c, "cores"), "usable"));
        TB_CHECK(per_rank == cases[i].per_rank && what && !strcmp(what, cases[i].background),
                 "case %zu: %ld background threads per rank '%s' (want %ld '%s')", i, per_rank, what ? what : "(none)",
                 cases[i].per_rank, cases[i].background);
        TB_CHECK(total == 2 * (1 + cases[i].per_rank), "case %zu: %ld threads in all (want %ld)", i, total,
                 2 * (1 + cases[i].per_rank));
        TB_CHECK(json_is_true(json_object_get(c, "oversubscribed")) == (total > usable),
                 "case %zu: oversubscribed is %s with %ld threads on %ld cores", i,
                 json_is_true(json_object_get(c, "oversubscribed")) ? "true" : "false", total, usable);
        // what the threads waited for a core, measured: the rank waiting most, its rank thread
        // and background threads; rank 0's per-step waits of its rank thread add up to no more
        json_t *sched = json_object_get(c, "scheduler");
        json_t *wait = json_object_get(sched, "run_queue_wait_s"), *share = json_object_get(sched, "run_queue_share");
        double wall = json_number_value(json_object_get(c, "wall_s"));
        TB_CHECK(json_is_number(wait) && json_number_value(wait) >= 0 &&
                     json_number_value(wait) <= wall * (1 + cases[i].per_rank) && json_is_number(share) &&
                     fabs(json_number_value(share) - json_number_value(wait) / wall) < 1e-9,
                 "case %zu: scheduler.run_queue_wait_s %g, run_queue_share %g within a wall of %g s per thread", i,
                 json_number_value(wait), json_number_value(share), wall);
        double steps_ms = 0;
        int lines = 0;
        FILE *m = fopen(RUN_DIR "_bg/run/metrics.rank-00000.jsonl", "r");
        char line[1 << 16];
        while (m && fgets(line, sizeof line, m)) {
            json_t *o = json_loads(line, 0, NULL);
            json_t *w = json_object_get(json_object_get(o, "conditions"), "run_queue_wait_ms");
            if (json_is_number(w)) steps_ms += json_number_value(w), lines++;
            json_decref(o);
        }
        if (m) fclose(m);
        TB_CHECK(lines == 2 && steps_ms >= 0 && steps_ms <= json_number_value(wait) * 1e3 * (1 + 1e-5) + 1e-3,
                 "case %zu: %d steps' run_queue_wait_ms sum to %g ms, over the run's %g s", i, lines, steps_ms,
                 json_number_value(wait));
        json_decref(c);
    }
    // with OpenMP workers beside a rank thread the wait is not measured, and says what is not
    char flags[512];
    tb_flags_merge(flags, sizeof flags, TINY + 1, "--train-iters 2 --num-threads 2");
    int status = tb_run(&sh, NULL, "rm -rf %s_bg && %s %s --run-dir %s_bg/run", RUN_DIR, PRETRAIN, flags, RUN_DIR);
    TB_REQUIRE(status == 0, "pretrain_gpt --num-threads 2: %s", sh.err);
    json_t *c = tb_load_json(RUN_DIR "_bg/run/" TB_RUN_CONDITIONS);
    json_t *sched = json_object_get(c, "scheduler");
    const char *unmeasured = json_string_value(json_object_get(sched, "unmeasured"));
    TB_CHECK(json_is_null(json_object_get(sched, "run_queue_share")) && unmeasured && strstr(unmeasured, "OpenMP"),
             "--num-threads 2: run_queue_share null, unmeasured '%s'", unmeasured ? unmeasured : "(none)");
    json_decref(c);
}

int main(void) {
    TB_RUN(run_writes_resolved_config_and_per_step_metrics);
    TB_RUN(a_run_directory_holding_a_run_is_refused_and_left_as_it_was);
    TB_RUN(mpi_collectives_exact_without_processes_is_refused);
    TB_RUN(wait_policy_spins_only_on_a_quiet_host);
    TB_RUN(wait_policy_sleeps_beside_a_busy_process);
    TB_RUN(background_threads_count_in_the_threads_a_run_occupied);
    TB_RUN(mfu_is_reported_against_the_peak_the_user_sets);
    TB_RUN(trace_ranges_nest_properly_and_cover_every_module);
    TB_RUN(memory_snapshot_explains_the_peak);
    TB_RUN(allocation_over_the_memory_cap_writes_an_oom_report_and_exits_nonzero);
    TB_RUN(two_ranks_out_of_memory_keep_both_reports_in_the_merged_oom_json);
    TB_RUN(bad_data_files_are_refused_naming_the_file_and_offset);
    TB_RUN(text_prepared_by_preprocess_data_trains_with_a_byte_vocabulary);
    TB_RUN(two_runs_of_the_binary_write_identical_losses);
    TB_RUN(a_nan_loss_stops_training_naming_the_step_and_its_metrics_line_stays_valid_json);
    TB_RUN(a_run_records_its_measurement_conditions_and_a_contended_run_is_seen_as_contended);
    TB_RUN(the_thread_policy_is_recorded_with_who_chose_it);
    return tb_test_summary();
}
