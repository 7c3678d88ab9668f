// test_checkpoint.c — the model's weights as safetensors in Hugging Face GPT-2's names and
// shapes (checkpoint/gpt_checkpoint.h): a save/load round trip restores every bit; the file
// holds GPT-2's names, unpadded vocabulary and transposed Conv1D weights; a Hugging Face
// file ("transformer." prefix, attention-mask buffers, lm_head.weight) loads; and
// pretrain_gpt's --save-hf and --load carry the weights from one run into the next. The
// refusals of a file that does not fit the model are test_checkpoint_refusals.c's.
#include <stdint.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <jansson.h>

#include "backend/cpu/kernels.h"
#include "checkpoint_models.h"
#include "datasets/gpt_dataset.h"
#include "tb_shell.h"
#include "tb_run_dir.h"
#include "tb_test.h"

#define PRETRAIN TB_BIN_DIR "/pretrain_gpt"

// ---------------------------------------------------------------------------------------
// 1. round trip

static void round_trip(const tb_config *cfg, const char *path) {
    TB_REQUIRE(config_ok(cfg), "config");
    box *a = box_new(cfg, 1), *b = box_new(cfg, 2);
    const size_t bytes = a->m.num_parameters * sizeof(float);
    TB_CHECK(memcmp(a->m.param_memory, b->m.param_memory, bytes) != 0, "seeds 1 and 2 gave the same weights");
    // garbage in b's padded vocabulary rows: loading must leave them 0, as in a
    const gpt_param *wte = gpt_find_param(&b->m, "wte.weight");
    for (size_t j = (size_t)V * C; j < wte->numel; j++) b->m.param_memory[wte->offset + j] = 7.0f;
    const size_t workspace = a->mem.stats.current[TB_MEM_WORKSPACE];

    tb_error err = {{0}};
    int rc = gpt_save_safetensors(&a->m, path, 1, &err);
    TB_CHECK(rc == 0, "save %s: %s", path, err.msg);
    TB_CHECK(a->mem.stats.current[TB_MEM_WORKSPACE] == workspace, "save left workspace allocated");
    rc = rc == 0 ? gpt_load_safetensors(&b->m, path, &err) : -1;
    TB_CHECK(rc == 0, "load %s: %s", path, err.msg);
    TB_CHECK(b->mem.stats.current[TB_MEM_WORKSPACE] == workspace, "load left workspace allocated");

    int equal = memcmp(a->m.param_memory, b->m.param_memory, bytes) == 0;
    TB_CHECK(equal, "weights after the round trip differ from the saved ones");
    for (int i = 0; !equal && i < a->m.nparams; i++) {
        const gpt_param *p = &a->m.params[i];
        if (memcmp(a->m.param_memory + p->offset, b->m.param_memory + p->offset, p->numel * sizeof(float)))
            printf("    differs: %s\n", p->name);
    }
    int32_t in[B * T], tg[B * T];
    fixed_batch(in, tg);
    float la = loss_of(&a->m, in, tg), lb = loss_of(&b->m, in, tg);
    TB_CHECK(memcmp(&la, &lb, sizeof la) == 0, "loss %.9g after loading, %.9g saved", lb, la);
    TB_CHECK(box_free(a) == 0 && box_free(b) == 0, "allocations left after freeing the models");
    unlink(path);
}

TB_TEST(save_then_load_restores_every_parameter_bitwise_gpt2_layernorm_gelu_biases_tied) {
    tb_config cfg;
    gpt2_config(&cfg);
    round_trip(&cfg, TMP("roundtrip-gpt2.safetensors"));
}

TB_TEST(save_then_load_restores_every_parameter_bitwise_rmsnorm_swiglu_gqa_no_bias_untied) {
    tb_config cfg;
    llama_config(&cfg);
    round_trip(&cfg, TMP("roundtrip-llama.safetensors"));
}

// ---------------------------------------------------------------------------------------
// 2. the file's names and shapes

typedef struct want_tensor {
    const char *name;
    int ndim;
    int64_t d0, d1;
} want_tensor;

// Checks the file holds exactly the listed tensors (h.N. entries for every layer), each F32
// with the listed shape.
static void check_names_and_shapes(const tb_safetensors *st, const want_tensor *per_layer, int nlayer,
                                   const want_tensor *global, int nglobal) {
    TB_CHECK(st->ntensors == nglobal + L * nlayer, "%d tensors in the file, expected %d", st->ntensors,
             nglobal + L * nlayer);
    char name[96];
    for (int i = 0; i < nglobal + L * nlayer; i++) {
        const want_tensor *w = i < nglobal ? &global[i] : &per_layer[(i - nglobal) % nlayer];
        if (i < nglobal) snprintf(name, sizeof name, "%s", w->name);
        else snprintf(name, sizeof name, "h.%d.%s", (i - nglobal) / nlayer, w->name);
        const tb_st_tensor *t = tb_safetensors_find(st, name);
        TB_CHECK(t != NULL, "no tensor %s in the file", name);
        if (!t) continue;
        TB_CHECK(!strcmp(t->dtype, "F32"), "%s: dtype %s", name, t->dtype);
        int same = t->ndim == w->ndim && t->shape[0] == w->d0 && (w->ndim == 1 || t->shape[1] == w->d1);
        TB_CHECK(same, "%s: shape [%lld%s%lld] (ndim %d), expected [%lld, %lld] (ndim %d)", name,
                 (long long)t->shape[0], t->ndim > 1 ? ", " : " ", t->ndim > 1 ? (long long)t->shape[1] : 0LL,
                 t->ndim, (long long)w->d0, (long long)w->d1, w->ndim);
    }
    for (int i = 0; i < st->ntensors; i++)
        TB_CHECK(strncmp(st->tensors[i].name, "transformer.", 12) != 0, "%s: saved with a prefix",
                 st->tensors[i].name);
}

// Reads tensor `name` and checks it holds the engine tensor by value: a Conv1D weight
// transposed (file[i][j] == engine[j][i]), an embedding's first hf_rows rows, a vector as is.
static void check_values(const tb_safetensors *st, const gpt_model *m, const char *name) {
    const tb_st_tensor *t = tb_safetensors_find(st, name);
    const gpt_param *p = gpt_find_param(m, name);
    TB_REQUIRE(t && p, "%s: in the file %d, in the model %d", name, t != NULL, p != NULL);
    float *f = malloc((size_t)tb_st_tensor_numel(t) * sizeof(float));
    tb_error err = {{0}};
    int rc = tb_safetensors_read_f32(st, t, f, &err);
    TB_CHECK(rc == 0, "read %s: %s", name, err.msg);
    const float *e = m->param_memory + p->offset;
    int bad = 0;
    if (rc == 0 && p->hf_transposed) {
        // file (in = cols, out = rows), engine (out = rows, in = cols)
        TB_CHECK(t->shape[0] == p->cols && t->shape[1] == p->rows, "%s: not the engine's shape transposed", name);
        for (int i = 0; i < p->cols; i++)
            for (int j = 0; j < p->rows; j++) bad += f[(size_t)i * p->rows + j] != e[(size_t)j * p->cols + i];
    } else if (rc == 0) {
        size_t n = (size_t)p->hf_rows * p->cols;
        TB_CHECK((size_t)tb_st_tensor_numel(t) == n, "%s: %lld elements, expected %zu", name,
                 (long long)tb_st_tensor_numel(t), n);
        bad = memcmp(f, e, n * sizeof(float)) != 0;
    }
    TB_CHECK(bad == 0, "%s: the file's values are not the engine's (%s)", name,
             p->hf_transposed ? "transposed" : "as is");
    free(f);
}

TB_TEST(saved_file_has_hugging_face_gpt2_names_and_shapes) {
    tb_config cfg;
    gpt2_config(&cfg);
    TB_REQUIRE(config_ok(&cfg), "config");
    TB_REQUIRE(cfg.padded_vocab_size == VP, "padded vocab %d", cfg.padded_vocab_size);
    const char *path = TMP("names-gpt2.safetensors");
    box *b = box_new(&cfg, 3);
    tb_error err = {{0}};
    int rc = gpt_save_safetensors(&b->m, path, 1, &err);
    TB_CHECK(rc == 0, "save: %s", err.msg);
    tb_safetensors st;
    rc = rc == 0 ? tb_safetensors_open(&st, path, &err) : -1;
    TB_CHECK(rc == 0, "open: %s", err.msg);
    if (rc == 0) {
        const want_tensor global[] = {
            {"wte.weight", 2, V, C}, {"wpe.weight", 2, T, C}, {"ln_f.weight", 1, C, 0}, {"ln_f.bias", 1, C, 0}};
        const want_tensor layer[] = {
            {"ln_1.weight", 1, C, 0},           {"ln_1.bias", 1, C, 0},
            {"attn.c_attn.weight", 2, C, 3 * C}, {"attn.c_attn.bias", 1, 3 * C, 0},
            {"attn.c_proj.weight", 2, C, C},     {"attn.c_proj.bias", 1, C, 0},
            {"ln_2.weight", 1, C, 0},           {"ln_2.bias", 1, C, 0},
            {"mlp.c_fc.weight", 2, C, 4 * C},    {"mlp.c_fc.bias", 1, 4 * C, 0},
            {"mlp.c_proj.weight", 2, 4 * C, C},  {"mlp.c_proj.bias", 1, C, 0}};
        check_names_and_shapes(&st, layer, 12, global, 4);
        TB_CHECK(tb_safetensors_find(&st, "lm_head.weight") == NULL, "a tied model saved lm_head.weight");
        const char *by_value[] = {"wte.weight",          "wpe.weight",        "h.0.attn.c_attn.weight",
                                  "h.1.attn.c_proj.weight", "h.0.mlp.c_fc.weight", "h.1.mlp.c_proj.weight",
                                  "h.0.attn.c_attn.bias", "ln_f.weight"};
        for (size_t i = 0; i < sizeof by_value / sizeof *by_value; i++) check_values(&st, &b->m, by_value[i]);

        json_t *fmt = st.metadata ? json_object_get(st.metadata, "format") : NULL;
        TB_CHECK(json_is_string(fmt) && !strcmp(json_string_value(fmt), "pt"), "metadata format is not \"pt\"");
        json_t *conf = st.metadata ? json_object_get(st.metadata, "tracebook_config") : NULL;
        json_t *parsed = json_is_string(conf) ? json_loads(json_string_value(conf), 0, NULL) : NULL;
        json_t *hidden = parsed ? json_object_get(parsed, "hidden_size") : NULL;
        TB_CHECK(json_is_integer(hidden) && json_integer_value(hidden) == C,
                 "metadata tracebook_config does not hold hidden_size %d", C);
        json_decref(parsed);
        tb_safetensors_close(&st);
    }
    TB_CHECK(box_free(b) == 0, "allocations left");
    unlink(path);
}

TB_TEST(saved_file_of_rmsnorm_swiglu_gqa_untied_model_has_gqa_and_gated_shapes_and_lm_head) {
    tb_config cfg;
    llama_config(&cfg);
    TB_REQUIRE(config_ok(&cfg), "config");
    const int hs = C / NH, G = 2, QKV = (NH + 2 * G) * hs, F = 4 * C;
    const char *path = TMP("names-llama.safetensors");
    box *b = box_new(&cfg, 4);
    tb_error err = {{0}};
    int rc = gpt_save_safetensors(&b->m, path, 1, &err);
    TB_CHECK(rc == 0, "save: %s", err.msg);
    tb_safetensors st;
    rc = rc == 0 ? tb_safetensors_open(&st, path, &err) : -1;
    TB_CHECK(rc == 0, "open: %s", err.msg);
    if (rc == 0) {
        const want_tensor global[] = {{"wte.weight", 2, V, C},
                                      {"wpe.weight", 2, T, C},
                                      {"ln_f.weight", 1, C, 0},
                                      {"lm_head.weight", 2, V, C}};
        const want_tensor layer[] = {{"ln_1.weight", 1, C, 0},         {"attn.c_attn.weight", 2, C, QKV},
                                     {"attn.c_proj.weight", 2, C, C},  {"ln_2.weight", 1, C, 0},
                                     {"mlp.c_fc.weight", 2, C, 2 * F}, {"mlp.c_proj.weight", 2, F, C}};
        check_names_and_shapes(&st, layer, 6, global, 4);
        const char *by_value[] = {"h.0.attn.c_attn.weight", "h.1.mlp.c_fc.weight", "h.0.mlp.c_proj.weight",
                                  "lm_head.weight", "wte.weight"};
        for (size_t i = 0; i < sizeof by_value / sizeof *by_value; i++) check_values(&st, &b->m, by_value[i]);
        tb_safetensors_close(&st);
    }
    TB_CHECK(box_free(b) == 0, "allocations left");
    unlink(path);
}

// ---------------------------------------------------------------------------------------
// 3. a Hugging Face file

TB_TEST(hugging_face_file_with_prefix_mask_buffers_and_lm_head_loads_into_tied_model) {
    tb_config cfg;
    gpt2_config(&cfg);
    TB_REQUIRE(config_ok(&cfg), "config");
    const char *path = TMP("hf.safetensors");
    // the reference: weights set directly
    box *ref = box_new(&cfg, 5);
    set_weights(&ref->m, 0xC0FFEE);
    // the file: every tensor as transformer.<name>, plus GPT-2's buffers and an lm_head
    tensor_set s = {0};
    set_from_model(&s, &ref->m, "transformer.");
    char name[96];
    for (int l = 0; l < L; l++) {
        snprintf(name, sizeof name, "transformer.h.%d.attn.bias", l);
        float *mask = set_add(&s, name, 4, (int64_t[]){1, 1, T, T}, NULL);
        for (int i = 0; i < T; i++)
            for (int j = 0; j <= i; j++) mask[i * T + j] = 1.0f;
        snprintf(name, sizeof name, "transformer.h.%d.attn.masked_bias", l);
        set_add(&s, name, 0, NULL, (float[]){-1e4f});
    }
    // lm_head.weight (never prefixed in GPT2LMHeadModel) with values unlike wte: a tied
    // model that used them would compute another loss
    float *head = set_add(&s, "lm_head.weight", 2, (int64_t[]){V, C}, NULL);
    for (int i = 0; i < V * C; i++) head[i] = (float)(i % 7) - 3.0f;
    tb_error err = {{0}};
    int rc = set_write(&s, path, &err);
    set_free(&s);
    TB_REQUIRE(rc == 0, "write %s: %s", path, err.msg);

    box *b = box_new(&cfg, 6);
    rc = gpt_load_safetensors(&b->m, path, &err);
    TB_CHECK(rc == 0, "load: %s", err.msg);
    TB_CHECK(memcmp(ref->m.param_memory, b->m.param_memory, ref->m.num_parameters * sizeof(float)) == 0,
             "loaded weights differ from the ones in the file");
    int32_t in[B * T], tg[B * T];
    fixed_batch(in, tg);
    float lref = loss_of(&ref->m, in, tg), lb = loss_of(&b->m, in, tg);
    TB_CHECK(memcmp(&lref, &lb, sizeof lref) == 0, "loss %.9g after loading, %.9g with the weights set directly",
             lb, lref);
    TB_CHECK(lref > 1.0f && lref < 10.0f, "implausible loss %g", lref);
    TB_CHECK(box_free(ref) == 0 && box_free(b) == 0, "allocations left");
    unlink(path);
}

TB_TEST(hugging_face_file_with_prefix_loads_into_untied_rmsnorm_model) {
    tb_config cfg;
    llama_config(&cfg);
    TB_REQUIRE(config_ok(&cfg), "config");
    const char *path = TMP("hf-llama.safetensors");
    box *ref = box_new(&cfg, 5);
    set_weights(&ref->m, 0xBEEF);
    tensor_set s = {0};
    set_from_model(&s, &ref->m, "transformer.");
    // lm_head is outside the transformer in Hugging Face models: keep it unprefixed
    owned *head = set_find(&s, "transformer.lm_head.weight");
    if (head) snprintf(head->name, sizeof head->name, "lm_head.weight");
    tb_error err = {{0}};
    int rc = set_write(&s, path, &err);
    set_free(&s);
    TB_REQUIRE(rc == 0, "write %s: %s", path, err.msg);
    box *b = box_new(&cfg, 6);
    rc = gpt_load_safetensors(&b->m, path, &err);
    TB_CHECK(rc == 0, "load: %s", err.msg);
    TB_CHECK(memcmp(ref->m.param_memory, b->m.param_memory, ref->m.num_parameters * sizeof(float)) == 0,
             "loaded weights differ from the ones in the file");
    int32_t in[B * T], tg[B * T];
    fixed_batch(in, tg);
    float lref = loss_of(&ref->m, in, tg), lb = loss_of(&b->m, in, tg);
    TB_CHECK(memcmp(&lref, &lb, sizeof lref) == 0, "loss %.9g vs %.9g", lb, lref);
    TB_CHECK(box_free(ref) == 0 && box_free(b) == 0, "allocations left");
    unlink(path);
}

// ---------------------------------------------------------------------------------------
// 4. through pretrain_gpt

#define FLAGS                                                                                        \
    "--num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 16 --vocab-size 50 "       \
    "--make-vocab-size-divisible-by 16 --micro-batch-size 2 --num-threads 2"

static tb_output sh;  // what the last command printed

// Every tensor of a and b: same names, shapes and bytes. Returns the count that differ.
static int compare_files(const char *a, const char *b) {
    tb_safetensors x, y;
    tb_error err = {{0}};
    if (tb_safetensors_open(&x, a, &err) != 0) return printf("    %s\n", err.msg), 1;
    if (tb_safetensors_open(&y, b, &err) != 0) return tb_safetensors_close(&x), printf("    %s\n", err.msg), 1;
    int bad = x.ntensors != y.ntensors;
    for (int i = 0; i < x.ntensors; i++) {
        const tb_st_tensor *s = &x.tensors[i], *t = tb_safetensors_find(&y, s->name);
        int same = t && t->ndim == s->ndim && !memcmp(t->shape, s->shape, (size_t)s->ndim * sizeof *s->shape);
        if (same) {
            size_t n = (size_t)tb_st_tensor_numel(s);
            float *p = malloc(n * sizeof(float)), *q = malloc(n * sizeof(float));
            same = tb_safetensors_read_f32(&x, s, p, &err) == 0 && tb_safetensors_read_f32(&y, t, q, &err) == 0 &&
                   !memcmp(p, q, n * sizeof(float));
            free(p), free(q);
        }
        if (!same) printf("    %s differs between %s and %s\n", s->name, a, b);
        bad += !same;
    }
    tb_safetensors_close(&x), tb_safetensors_close(&y);
    return bad;
}

// The loss of step `step` in a run directory's metrics, or -1.
static double metrics_loss(const char *run_dir, int step) {
    char path[1024], line[4096];
    tb_rank_path(path, sizeof path, run_dir, TB_RANK_METRICS, 0);
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    double loss = -1;
    while (loss < 0 && fgets(line, sizeof line, f)) {
        json_t *o = json_loads(line, 0, NULL);
        if (json_integer_value(json_object_get(o, "step")) == step && json_is_real(json_object_get(o, "loss")))
            loss = json_real_value(json_object_get(o, "loss"));
        json_decref(o);
    }
    fclose(f);
    return loss;
}

TB_TEST(pretrain_gpt_save_then_load_carries_the_weights_bitwise) {
    const char *a = TMP("run-a.safetensors"), *b = TMP("run-b.safetensors");
    unlink(a), unlink(b);
    int rc = tb_run(&sh, NULL, "'%s' " FLAGS " --train-iters 2 --save-hf '%s' --run-dir '%s'", PRETRAIN, a, TMP("run-a"));
    TB_REQUIRE(rc == 0, "run a: exit %d: %s", rc, sh.err);
    rc = tb_run(&sh, NULL, "'%s' " FLAGS " --train-iters 1 --lr 0 --load '%s' --save-hf '%s' --run-dir '%s'", PRETRAIN, a,
                b, TMP("run-b"));
    TB_REQUIRE(rc == 0, "run b: exit %d: %s", rc, sh.err);
    TB_CHECK(compare_files(a, b) == 0, "a step at lr 0 from --load A did not save A's weights back");

    // in process: the saved weights differ from the init (the save came after training), and
    // run b's step-1 loss is their loss on step 1's batch
    tb_config cfg;
    gpt2_config(&cfg);  // FLAGS, and pretrain_gpt's default seed
    box *init = box_new(&cfg, cfg.seed), *loaded = box_new(&cfg, cfg.seed);
    tb_error err = {{0}};
    rc = gpt_load_safetensors(&loaded->m, a, &err);
    TB_CHECK(rc == 0, "load %s: %s", a, err.msg);
    TB_CHECK(memcmp(init->m.param_memory, loaded->m.param_memory, init->m.num_parameters * sizeof(float)) != 0,
             "run a saved its initial weights, not the trained ones");
    tb_gpt_dataset ds;
    rc = tb_gpt_dataset_open_synthetic(&ds, (uint64_t)cfg.seed, T, V, &loaded->mem, &err);
    TB_CHECK(rc == 0, "dataset: %s", err.msg);
    if (rc == 0) {
        int32_t in[B * T], tg[B * T];
        for (int i = 0; i < B; i++) tb_gpt_dataset_get_sample(&ds, (uint64_t)i, in + i * T, tg + i * T);
        tb_gpt_dataset_close(&ds, &loaded->mem);
        double want = loss_of(&loaded->m, in, tg), fresh = loss_of(&init->m, in, tg);
        double got = metrics_loss(TMP("run-b"), 1);
        TB_CHECK(got == want, "run b step-1 loss %.17g, the saved weights' loss %.17g (initial weights %.17g)",
                 got, want, fresh);
        TB_CHECK(got != fresh, "run b's loss is the initial weights' loss: --load had no effect");
        TB_CHECK(metrics_loss(TMP("run-a"), 1) == fresh, "run a step-1 loss %.17g, initial weights' loss %.17g",
                 metrics_loss(TMP("run-a"), 1), fresh);
    }
    TB_CHECK(box_free(init) == 0 && box_free(loaded) == 0, "allocations left");
    unlink(b);

    // --load of a missing file
    const char *absent = TMP("run-absent.safetensors");
    unlink(absent);
    rc = tb_run(&sh, NULL, "'%s' " FLAGS " --train-iters 1 --load '%s' --run-dir '%s'", PRETRAIN, absent,
                TMP("run-absent"));
    TB_CHECK(rc != 0 && strstr(sh.err, absent) && strstr(sh.err, "--load"), "missing file: exit %d, stderr: %s", rc,
             sh.err);
    // --load of a file with other shapes
    char wrong[512];
    tb_flags_merge(wrong, sizeof wrong, FLAGS, "--hidden-size 48 --train-iters 1");
    rc = tb_run(&sh, NULL, "'%s' %s --load '%s' --run-dir '%s'", PRETRAIN, wrong, a, TMP("run-wrong"));
    TB_CHECK(rc != 0 && strstr(sh.err, "'wte.weight' has shape [50, 32], the model needs [50, 48]"),
             "wrong shape: exit %d, stderr: %s", rc, sh.err);
    unlink(a);
}

// What a run ends by writing is checked before its first step: --save-hf in a directory that
// does not exist, and --save naming a file, are refused at once (no step trained, no run
// directory made), naming the flag and the path.
TB_TEST(outputs_that_cannot_be_written_are_refused_before_training) {
    const char *run = TMP("run-never");
    char *rm = NULL;
    tb_shell(&rm, "rm -rf '%s'", run);
    free(rm);
    int rc = tb_run(&sh, NULL, "'%s' " FLAGS " --train-iters 50 --save-hf '%s' --run-dir '%s'", PRETRAIN,
                    TMP("no-such-dir/x.safetensors"), run);
    TB_CHECK(rc != 0 && strstr(sh.err, "--save-hf ") && strstr(sh.err, "no-such-dir does not exist") &&
                 !strstr(sh.out, "step    1"),
             "--save-hf: exit %d: %s", rc, sh.err);
    const char *file = TMP("a-file.txt");
    tb_write_text(file, "notes\n");
    rc = tb_run(&sh, NULL, "'%s' " FLAGS " --train-iters 50 --save '%s' --run-dir '%s'", PRETRAIN, file, run);
    TB_CHECK(rc != 0 && strstr(sh.err, "--save ") && strstr(sh.err, "is a regular file, not a directory"),
             "--save: exit %d: %s", rc, sh.err);
    TB_CHECK(!tb_exists(run), "no run directory made");
}

int main(int argc, char **argv) {
    (void)argc;
    // the BLAS kernels pretrain_gpt runs with, so in-process losses match its bitwise
    cpu_runtime_select(argv);
    cpu_set_num_threads(2);
    TB_RUN(save_then_load_restores_every_parameter_bitwise_gpt2_layernorm_gelu_biases_tied);
    TB_RUN(save_then_load_restores_every_parameter_bitwise_rmsnorm_swiglu_gqa_no_bias_untied);
    TB_RUN(saved_file_has_hugging_face_gpt2_names_and_shapes);
    TB_RUN(saved_file_of_rmsnorm_swiglu_gqa_untied_model_has_gqa_and_gated_shapes_and_lm_head);
    TB_RUN(hugging_face_file_with_prefix_mask_buffers_and_lm_head_loads_into_tied_model);
    TB_RUN(hugging_face_file_with_prefix_loads_into_untied_rmsnorm_model);
    TB_RUN(pretrain_gpt_save_then_load_carries_the_weights_bitwise);
    TB_RUN(outputs_that_cannot_be_written_are_refused_before_training);
    return tb_test_summary();
}
