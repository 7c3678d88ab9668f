#include "checkpoint/gpt_checkpoint.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/host_stage.h"
#include "core/safetensors.h"
#include "core/xalloc.h"

// The shape a tensor has in files: Conv1D weights transposed, embeddings unpadded.
// Files hold whole tensors: under tensor parallelism the shards are gathered on save and
// sliced on load.
static void file_shape(const gpt_param *p, int *ndim, int64_t shape[2]) {
    *ndim = p->ndim;
    if (p->ndim == 1) {
        shape[0] = p->full_cols;
    } else if (p->hf_transposed) {
        shape[0] = p->full_cols;
        shape[1] = p->full_rows;
    } else {
        shape[0] = p->hf_rows;
        shape[1] = p->full_cols;
    }
}

static size_t full_numel(const gpt_param *p) { return (size_t)p->full_rows * p->full_cols; }

static void shape_string(char *buf, size_t len, int ndim, const int64_t *shape) {
    size_t used = (size_t)snprintf(buf, len, "[");
    for (int i = 0; i < ndim && used < len; i++)
        used += (size_t)snprintf(buf + used, len - used, "%s%lld", i ? ", " : "", (long long)shape[i]);
    if (used < len) snprintf(buf + used, len - used, "]");
}

// (rows, cols) → (cols, rows)
static void transpose(float *dst, const float *src, int rows, int cols) {
    enum { TILE = 32 };
    for (int r0 = 0; r0 < rows; r0 += TILE)
        for (int c0 = 0; c0 < cols; c0 += TILE)
            for (int r = r0; r < r0 + TILE && r < rows; r++)
                for (int c = c0; c < c0 + TILE && c < cols; c++)
                    dst[(size_t)c * rows + r] = src[(size_t)r * cols + c];
}

// The writer's source: tensor i gathered whole over tp (a collective) into host memory, in
// file layout. One tensor at a time: the gather and transpose buffers hold the largest.
typedef struct hf_source {
    gpt_model *m;
    float *whole, *file;  // host: the gathered tensor, its transpose
    int next;             // the next tensor to gather (every tp rank gathers them all, in order)
} hf_source;

static const float *hf_fetch(void *ctx, int i, const tb_st_entry *e) {
    (void)e;
    hf_source *src = ctx;
    const gpt_param *p = &src->m->params[i];
    src->next = i + 1;
    gpt_gather_param(src->m, i, 0, src->whole);
    if (!p->hf_transposed) return src->whole;
    transpose(src->file, src->whole, p->full_rows, p->full_cols);
    return src->file;
}

int gpt_save_safetensors(gpt_model *m, const char *path, int write, tb_error *err) {
    size_t largest = 0;
    for (int i = 0; i < m->nparams; i++)
        if (full_numel(&m->params[i]) > largest) largest = full_numel(&m->params[i]);
    hf_source src = {m, tb_host_buffer(m->mem, largest * sizeof(float), "checkpoint gather"),
                     tb_host_buffer(m->mem, largest * sizeof(float), "checkpoint staging"), 0};
    tb_st_entry *entries = tb_xcalloc((size_t)m->nparams, sizeof *entries, "checkpoint entries");
    for (int i = 0; i < m->nparams; i++) {
        entries[i].name = m->params[i].name;
        file_shape(&m->params[i], &entries[i].ndim, entries[i].shape);
    }
    int rc = 0;
    if (write) {
        json_t *config = config_to_json(m->cfg);
        char *config_text = json_dumps(config, JSON_COMPACT);
        json_t *meta = json_pack("{s:s, s:s, s:s}", "format", "pt", "producer", "tracebook pretrain_gpt",
                                 "tracebook_config", config_text ? config_text : "{}");
        const tb_st_source source = {hf_fetch, &src};
        rc = tb_safetensors_write_from(path, entries, m->nparams, meta, &source, NULL, err);
        json_decref(meta);
        json_decref(config);
        free(config_text);
    }
    // the gathers the writer did not make (a rank that does not write, or a write that failed
    // part way): the other tp ranks are in them
    while (src.next < m->nparams) hf_fetch(&src, src.next, &entries[src.next]);
    free(entries);
    tb_host_buffer_free(m->mem, src.file);
    tb_host_buffer_free(m->mem, src.whole);
    return rc;
}

// Buffers of the attention mask in Hugging Face's GPT-2, present in its files.
static int is_hf_buffer(const char *name) {
    int l, n = 0;
    if (sscanf(name, "h.%d.attn.bias%n", &l, &n) == 1 && name[n] == '\0') return 1;
    if (sscanf(name, "h.%d.attn.masked_bias%n", &l, &n) == 1 && name[n] == '\0') return 1;
    return 0;
}

// Refuses a tensor holding NaN or ±Inf: such a weight trains to NaN from the first step.
// x is the tensor in file order, so the index is the element's place in the file.
static int check_finite(const char *path, const tb_st_tensor *t, const float *x, size_t n, tb_error *err) {
    for (size_t i = 0; i < n; i++) {
        if (isfinite(x[i])) continue;
        char at[64] = "";
        if (t->ndim == 2)
            snprintf(at, sizeof at, " [%zu, %zu]", i / (size_t)t->shape[1], i % (size_t)t->shape[1]);
        return tb_fail(err, "%s: tensor '%s' element %zu%s of %zu is %s: weights must be finite", path, t->name, i,
                       at, n, isnan(x[i]) ? "NaN" : x[i] > 0 ? "+Inf" : "-Inf");
    }
    return 0;
}

static const char *strip_prefix(const char *name) {
    return strncmp(name, "transformer.", 12) == 0 ? name + 12 : name;
}

int gpt_load_safetensors(gpt_model *m, const char *path, tb_error *err) {
    tb_safetensors st;
    if (tb_safetensors_open(&st, path, err) != 0) return -1;
    int rc = 0;
    // Every tensor in the file must be one the model has, and only once (not both with and
    // without the "transformer." prefix).
    for (int i = 0; i < st.ntensors && rc == 0; i++) {
        const char *name = strip_prefix(st.tensors[i].name);
        if (is_hf_buffer(name)) continue;
        if (!strcmp(name, "lm_head.weight") && !m->cfg->untie_embeddings_and_output_weights) continue;
        if (!gpt_find_param(m, name))
            rc = tb_fail(err, "%s: tensor '%s' has no place in this model (%d layers, %s%s%s%s)", path,
                         st.tensors[i].name, m->cfg->num_layers, m->spec.input_layernorm->name,
                         m->cfg->disable_bias_linear ? ", no linear biases" : "",
                         m->cfg->untie_embeddings_and_output_weights ? ", untied output layer" : "",
                         m->cfg->qk_layernorm ? ", q/k norms" : "");
        else if (name != st.tensors[i].name && tb_safetensors_find(&st, name))
            rc = tb_fail(err, "%s: tensor '%s' appears both as '%s' and '%s'", path, name, name,
                         st.tensors[i].name);
    }
    size_t largest = 0;
    for (int i = 0; i < m->nparams; i++)
        if (full_numel(&m->params[i]) > largest) largest = full_numel(&m->params[i]);
    float *buf = rc == 0 ? tb_host_buffer(m->mem, 2 * largest * sizeof(float), "checkpoint staging") : NULL;
    float *whole = buf ? buf + largest : NULL;
    tb_host_stage stage = {0};
    for (int i = 0; i < m->nparams && rc == 0; i++) {
        const gpt_param *p = &m->params[i];
        const tb_st_tensor *t = tb_safetensors_find(&st, p->name);
        if (!t) {
            char prefixed[80];
            snprintf(prefixed, sizeof prefixed, "transformer.%s", p->name);
            t = tb_safetensors_find(&st, prefixed);
        }
        int ndim;
        int64_t want[2];
        char want_s[64], have_s[160];
        file_shape(p, &ndim, want);
        shape_string(want_s, sizeof want_s, ndim, want);
        if (!t) {
            rc = tb_fail(err, "%s: tensor '%s' %s is missing", path, p->name, want_s);
            break;
        }
        int same = t->ndim == ndim;
        for (int d = 0; same && d < ndim; d++) same = t->shape[d] == want[d];
        if (!same) {
            shape_string(have_s, sizeof have_s, t->ndim, t->shape);
            rc = tb_fail(err, "%s: tensor '%s' has shape %s, the model needs %s", path, p->name, have_s,
                         want_s);
            break;
        }
        // the whole tensor in engine layout, then this rank's shard of it
        size_t numel = (size_t)tb_st_tensor_numel(t);
        if (p->hf_transposed) {
            if ((rc = tb_safetensors_read_f32(&st, t, buf, err)) != 0) break;
            if ((rc = check_finite(path, t, buf, numel, err)) != 0) break;
            transpose(whole, buf, p->full_cols, p->full_rows);
        } else {
            memset(whole, 0, full_numel(p) * sizeof(float));  // padded vocabulary rows stay 0
            if ((rc = tb_safetensors_read_f32(&st, t, whole, err)) != 0) break;
            if ((rc = check_finite(path, t, whole, numel, err)) != 0) break;
        }
        float *dst = m->param_memory + p->offset;  // on a device: through the stage
        gpt_param_shard_copy(p, m->tp_size, m->tp_rank, whole, tb_host_write_begin(&stage, dst, p->numel * sizeof(float)),
                             1);
        tb_host_write_end(&stage, dst, p->numel * sizeof(float));
    }
    tb_host_stage_free(&stage);
    if (buf) tb_host_buffer_free(m->mem, buf);
    tb_safetensors_close(&st);
    return rc;
}
