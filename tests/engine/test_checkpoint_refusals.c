// test_checkpoint_refusals.c — a safetensors file that does not fit the model is refused
// (checkpoint/gpt_checkpoint.h) with a message naming the file, the tensor and both shapes:
// another hidden size, a missing tensor or layer, an extra layer or norm bias, a tied file
// for an untied model, a corrupt or absent file; an untied file loads into a tied model
// without its lm_head. What loads is test_checkpoint.c's.
#include <math.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include "backend/cpu/kernels.h"
#include "checkpoint_models.h"
#include "tb_test.h"

// ---------------------------------------------------------------------------------------
// mismatches

// Loads path into a fresh model of cfg; returns the rc, the message in err, and checks the
// failure released its staging memory.
static int load_into(const tb_config *cfg, const char *path, tb_error *err) {
    box *b = box_new(cfg, 9);
    size_t workspace = b->mem.stats.current[TB_MEM_WORKSPACE];
    memset(err, 0, sizeof *err);
    int rc = gpt_load_safetensors(&b->m, path, err);
    TB_CHECK(b->mem.stats.current[TB_MEM_WORKSPACE] == workspace, "load of %s left workspace allocated", path);
    TB_CHECK(box_free(b) == 0, "allocations left");
    return rc;
}

TB_TEST(hidden_size_mismatch_is_refused_naming_the_tensor_and_both_shapes) {
    tb_config c32, c48;
    gpt2_config(&c32);
    gpt2_config(&c48);
    c48.hidden_size = 48;
    config_resolve(&c48);
    TB_REQUIRE(config_ok(&c48), "config");
    const char *path = TMP("hidden32.safetensors");
    TB_REQUIRE(save_model_of(&c32, 1, path) == 0, "save");
    tb_error err;
    char want[2048];
    // the whole file: the first tensor checked (wte) is the first named
    int rc = load_into(&c48, path, &err);
    snprintf(want, sizeof want, "%s: tensor 'wte.weight' has shape [50, 32], the model needs [50, 48]", path);
    TB_CHECK(rc != 0 && !strcmp(err.msg, want), "rc %d, message:\n      %s\n    expected:\n      %s", rc,
             err.msg, want);

    // a hidden-48 file whose c_attn alone is from hidden 32
    box *m48 = box_new(&c48, 1);
    tensor_set s = {0};
    set_from_model(&s, &m48->m, "");
    TB_CHECK(box_free(m48) == 0, "allocations left");
    owned *qkv = set_find(&s, "h.0.attn.c_attn.weight");
    TB_REQUIRE(qkv && qkv->shape[0] == 48 && qkv->shape[1] == 144, "h.0.attn.c_attn.weight of hidden 48");
    free(qkv->data);
    qkv->shape[0] = 32, qkv->shape[1] = 96;
    qkv->data = calloc(32 * 96, sizeof(float));
    const char *mixed = TMP("hidden-mixed.safetensors");
    rc = set_write(&s, mixed, &err);
    TB_REQUIRE(rc == 0, "write: %s", err.msg);
    rc = load_into(&c48, mixed, &err);
    snprintf(want, sizeof want,
             "%s: tensor 'h.0.attn.c_attn.weight' has shape [32, 96], the model needs [48, 144]", mixed);
    TB_CHECK(rc != 0 && !strcmp(err.msg, want), "rc %d, message:\n      %s\n    expected:\n      %s", rc,
             err.msg, want);

    // the engine's own (out, in) layout instead of Conv1D's (in, out) is refused too
    qkv = set_find(&s, "h.0.attn.c_attn.weight");
    qkv->shape[0] = 144, qkv->shape[1] = 48;
    free(qkv->data);
    qkv->data = calloc(144 * 48, sizeof(float));
    rc = set_write(&s, mixed, &err);
    TB_REQUIRE(rc == 0, "write: %s", err.msg);
    rc = load_into(&c48, mixed, &err);
    TB_CHECK(rc != 0 && strstr(err.msg, "'h.0.attn.c_attn.weight' has shape [144, 48], the model needs [48, 144]"),
             "rc %d: %s", rc, err.msg);
    // a padded vocabulary ([Vp, C]) is not the file layout
    set_free(&s);
    box *m32 = box_new(&c32, 1);
    set_from_model(&s, &m32->m, "");
    TB_CHECK(box_free(m32) == 0, "allocations left");
    owned *wte = set_find(&s, "wte.weight");
    free(wte->data);
    wte->shape[0] = VP;
    wte->data = calloc((size_t)VP * C, sizeof(float));
    rc = set_write(&s, mixed, &err);
    set_free(&s);
    TB_REQUIRE(rc == 0, "write: %s", err.msg);
    rc = load_into(&c32, mixed, &err);
    TB_CHECK(rc != 0 && strstr(err.msg, "'wte.weight' has shape [64, 32], the model needs [50, 32]"), "rc %d: %s",
             rc, err.msg);
    unlink(path);
    unlink(mixed);
}

TB_TEST(missing_tensor_is_refused_naming_it_and_its_shape) {
    tb_config cfg;
    gpt2_config(&cfg);
    box *m = box_new(&cfg, 1);
    tensor_set s = {0};
    set_from_model(&s, &m->m, "");
    TB_CHECK(box_free(m) == 0, "allocations left");
    set_remove(&s, "h.1.mlp.c_fc.bias");
    const char *path = TMP("missing.safetensors");
    tb_error err = {{0}};
    int rc = set_write(&s, path, &err);
    set_free(&s);
    TB_REQUIRE(rc == 0, "write: %s", err.msg);
    rc = load_into(&cfg, path, &err);
    char want[2048];
    snprintf(want, sizeof want, "%s: tensor 'h.1.mlp.c_fc.bias' [128] is missing", path);
    TB_CHECK(rc != 0 && !strcmp(err.msg, want), "rc %d, message:\n      %s\n    expected:\n      %s", rc,
             err.msg, want);
    // a file of fewer layers than the model: the first tensor of the missing layer
    tb_config c3 = cfg;
    c3.num_layers = 3;
    config_resolve(&c3);
    const char *two = TMP("two-layers.safetensors");
    TB_REQUIRE(save_model_of(&cfg, 1, two) == 0, "save");
    rc = load_into(&c3, two, &err);
    snprintf(want, sizeof want, "%s: tensor 'h.2.ln_1.weight' [32] is missing", two);
    TB_CHECK(rc != 0 && !strcmp(err.msg, want), "rc %d, message:\n      %s\n    expected:\n      %s", rc,
             err.msg, want);
    unlink(path);
    unlink(two);
}

TB_TEST(extra_layer_in_the_file_is_refused_as_having_no_place) {
    tb_config c2, c3;
    gpt2_config(&c2);
    c3 = c2;
    c3.num_layers = 3;
    config_resolve(&c3);
    const char *path = TMP("three-layers.safetensors");
    TB_REQUIRE(save_model_of(&c3, 1, path) == 0, "save");
    tb_error err;
    int rc = load_into(&c2, path, &err);
    char want[2048];
    snprintf(want, sizeof want, "%s: tensor 'h.2.ln_1.weight' has no place in this model (2 layers, LayerNorm)",
             path);
    TB_CHECK(rc != 0 && !strcmp(err.msg, want), "rc %d, message:\n      %s\n    expected:\n      %s", rc,
             err.msg, want);
    // a LayerNorm file (norm biases) into an RMSNorm model (none): the bias has no place
    tb_config rms = c2;
    rms.normalization = TB_NORM_RMSNORM;
    const char *ln = TMP("layernorm.safetensors");
    TB_REQUIRE(save_model_of(&c2, 1, ln) == 0, "save");
    rc = load_into(&rms, ln, &err);
    TB_CHECK(rc != 0 && strstr(err.msg, "'h.0.ln_1.bias' has no place in this model (2 layers, RMSNorm)"),
             "rc %d: %s", rc, err.msg);
    unlink(path);
    unlink(ln);
}

// --qk-layernorm's tensors (h.L.attn.q_norm.*, k_norm.*): a file without them (GPT-2's) cannot
// fill a model that has them, and a file with them has no place in a model without them
TB_TEST(q_and_k_norms_missing_or_extra_are_refused_naming_the_tensor) {
    tb_config plain, qk;
    gpt2_config(&plain);
    qk = plain;
    qk.qk_layernorm = 1;
    config_resolve(&qk);
    const char *ppath = TMP("plain.safetensors"), *qpath = TMP("qk.safetensors");
    TB_REQUIRE(save_model_of(&plain, 1, ppath) == 0 && save_model_of(&qk, 1, qpath) == 0, "save");
    tb_error err;
    char want[2048];
    int rc = load_into(&qk, ppath, &err);
    snprintf(want, sizeof want, "%s: tensor 'h.0.attn.q_norm.weight' [%d] is missing", ppath,
             qk.hidden_size / qk.num_attention_heads);
    TB_CHECK(rc != 0 && !strcmp(err.msg, want), "rc %d, message:\n      %s\n    expected:\n      %s", rc, err.msg,
             want);
    rc = load_into(&plain, qpath, &err);
    TB_CHECK(rc != 0 && strstr(err.msg, "'h.0.attn.q_norm.weight' has no place in this model (2 layers, LayerNorm)"),
             "rc %d: %s", rc, err.msg);
    rc = load_into(&qk, qpath, &err);
    TB_CHECK(rc == 0, "a --qk-layernorm file into a --qk-layernorm model: %s", err.msg);
    unlink(ppath);
    unlink(qpath);
}

TB_TEST(tied_model_ignores_lm_head_and_untied_model_demands_it) {
    tb_config tied, untied;
    gpt2_config(&tied);
    untied = tied;
    untied.untie_embeddings_and_output_weights = 1;
    const char *upath = TMP("untied.safetensors"), *tpath = TMP("tied.safetensors");
    // untied file → tied model: loads; wte comes from wte.weight, lm_head.weight is unused
    box *u = box_new(&untied, 1);
    tb_error err = {{0}};
    int rc = gpt_save_safetensors(&u->m, upath, 1, &err);
    TB_REQUIRE(rc == 0, "save: %s", err.msg);
    const gpt_param *uhead = gpt_find_param(&u->m, "lm_head.weight"), *uwte = gpt_find_param(&u->m, "wte.weight");
    TB_REQUIRE(uhead && uwte, "untied model tensors");
    TB_CHECK(memcmp(u->m.param_memory + uhead->offset, u->m.param_memory + uwte->offset,
                    uwte->numel * sizeof(float)) != 0,
             "lm_head equals wte: the test could not tell them apart");
    box *t = box_new(&tied, 2);
    rc = gpt_load_safetensors(&t->m, upath, &err);
    TB_CHECK(rc == 0, "untied file into tied model: %s", err.msg);
    int same = 1;
    for (int i = 0; i < t->m.nparams; i++) {
        const gpt_param *p = &t->m.params[i], *q = gpt_find_param(&u->m, p->name);
        same &= q && !memcmp(t->m.param_memory + p->offset, u->m.param_memory + q->offset, p->numel * sizeof(float));
    }
    TB_CHECK(same, "the tied model's weights are not the file's (lm_head.weight must not replace wte)");
    TB_CHECK(t->m.w.lm_head == t->m.w.wte, "the tied model's output layer is no longer wte");

    // tied file → untied model: lm_head.weight is demanded
    rc = gpt_save_safetensors(&t->m, tpath, 1, &err);
    TB_REQUIRE(rc == 0, "save: %s", err.msg);
    rc = load_into(&untied, tpath, &err);
    char want[2048];
    snprintf(want, sizeof want, "%s: tensor 'lm_head.weight' [50, 32] is missing", tpath);
    TB_CHECK(rc != 0 && !strcmp(err.msg, want), "rc %d, message:\n      %s\n    expected:\n      %s", rc,
             err.msg, want);
    TB_CHECK(box_free(u) == 0 && box_free(t) == 0, "allocations left");
    unlink(upath);
    unlink(tpath);
}

TB_TEST(non_finite_weight_is_refused_naming_the_tensor_and_the_element) {
    tb_config cfg;
    gpt2_config(&cfg);
    static const struct {
        const char *tensor;
        size_t index;
        float value;
        const char *where;  // what the message says of the element
    } cases[] = {
        // a Conv1D weight, [in, out] in the file: the index is the file's, row-major
        {"h.0.attn.c_attn.weight", 5 * 96 + 7, NAN, "element 487 [5, 7] of 3072 is NaN"},
        {"wte.weight", 3, INFINITY, "element 3 [0, 3] of 1600 is +Inf"},  // vocabulary 50, unpadded
        {"ln_f.bias", 31, -INFINITY, "element 31 of 32 is -Inf"},
    };
    const char *path = TMP("non-finite.safetensors");
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        box *m = box_new(&cfg, 1);
        tensor_set s = {0};
        set_from_model(&s, &m->m, "");
        TB_CHECK(box_free(m) == 0, "allocations left");
        owned *o = set_find(&s, cases[i].tensor);
        TB_REQUIRE(o != NULL, "no tensor %s", cases[i].tensor);
        o->data[cases[i].index] = cases[i].value;
        tb_error err = {{0}};
        int rc = set_write(&s, path, &err);
        set_free(&s);
        TB_REQUIRE(rc == 0, "write: %s", err.msg);
        rc = load_into(&cfg, path, &err);
        char want[2048];
        snprintf(want, sizeof want, "%s: tensor '%s' %s: weights must be finite", path, cases[i].tensor,
                 cases[i].where);
        TB_CHECK(rc != 0 && !strcmp(err.msg, want), "rc %d, message:\n      %s\n    expected:\n      %s", rc, err.msg,
                 want);
    }
    unlink(path);
}

TB_TEST(corrupt_or_absent_file_is_refused_naming_the_path) {
    tb_config cfg;
    gpt2_config(&cfg);
    const char *path = TMP("corrupt.safetensors");
    FILE *f = fopen(path, "wb");
    TB_REQUIRE(f != NULL, "create %s", path);
    fputs("this is not a safetensors file, just some text\n", f);
    fclose(f);
    tb_error err;
    int rc = load_into(&cfg, path, &err);
    TB_CHECK(rc != 0 && strstr(err.msg, path), "rc %d: %s", rc, err.msg);
    const char *absent = TMP("no-such-file.safetensors");
    unlink(absent);
    rc = load_into(&cfg, absent, &err);
    TB_CHECK(rc != 0 && strstr(err.msg, absent), "rc %d: %s", rc, err.msg);
    // a save into a directory that does not exist fails naming the path
    box *b = box_new(&cfg, 1);
    const char *bad = TMP("no-such-dir/weights.safetensors");
    memset(&err, 0, sizeof err);
    size_t workspace = b->mem.stats.current[TB_MEM_WORKSPACE];
    rc = gpt_save_safetensors(&b->m, bad, 1, &err);
    TB_CHECK(rc != 0 && strstr(err.msg, "no-such-dir"), "rc %d: %s", rc, err.msg);
    TB_CHECK(b->mem.stats.current[TB_MEM_WORKSPACE] == workspace, "failed save left workspace allocated");
    TB_CHECK(box_free(b) == 0, "allocations left");
    unlink(path);
}

int main(int argc, char **argv) {
    (void)argc;
    // the BLAS kernels pretrain_gpt runs with, so in-process losses match its bitwise
    cpu_runtime_select(argv);
    cpu_set_num_threads(2);
    TB_RUN(hidden_size_mismatch_is_refused_naming_the_tensor_and_both_shapes);
    TB_RUN(missing_tensor_is_refused_naming_it_and_its_shape);
    TB_RUN(extra_layer_in_the_file_is_refused_as_having_no_place);
    TB_RUN(q_and_k_norms_missing_or_extra_are_refused_naming_the_tensor);
    TB_RUN(tied_model_ignores_lm_head_and_untied_model_demands_it);
    TB_RUN(non_finite_weight_is_refused_naming_the_tensor_and_the_element);
    TB_RUN(corrupt_or_absent_file_is_refused_naming_the_path);
    return tb_test_summary();
}
