// dist_checkpoint_load.c — the resharding load (dist_checkpoint.h): a committed checkpoint's
// pieces reassembled into each global tensor, then this rank's shard of it under the layout
// it loads into, every file verified against its sha256 once. (The save: dist_checkpoint.c.)
#include "checkpoint/dist_checkpoint.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "backend/backend.h"
#include "backend/host_stage.h"
#include "comm/comm.h"
#include "config/config.h"
#include "core/clock.h"
#include "core/fileio.h"
#include "runtime/ranges.h"
#include "core/run_dir.h"
#include "core/safetensors.h"
#include "core/xalloc.h"
#include "checkpoint/dist_checkpoint_internal.h"

// --- load -------------------------------------------------------------------------------

int dist_checkpoint_is_dir(const char *path) {
    struct stat st;
    if (stat(path, &st) != 0 || !S_ISDIR(st.st_mode)) return 0;
    char p[CKPT_PATH];
    if (ckpt_path(p, NULL, "%s/" TB_CKPT_LATEST, path) == 0 && access(p, F_OK) == 0) return 1;
    return ckpt_path(p, NULL, "%s/" TB_CKPT_METADATA, path) == 0 && access(p, F_OK) == 0;
}

// A JSON file opened only when it is a regular file (a FIFO would block the load forever).
static json_t *load_json_regular(const char *path, tb_error *err) {
    int fd = tb_open_regular(path, "a checkpoint's JSON file is expected", NULL, err);
    if (fd < 0) return NULL;
    FILE *f = fdopen(fd, "r");
    if (!f) {
        close(fd);
        tb_fail(err, "%s: %s", path, strerror(errno));
        return NULL;
    }
    json_error_t jerr;
    json_t *j = json_loadf(f, 0, &jerr);
    fclose(f);
    if (!j) tb_fail(err, "%s: %s (line %d)", path, jerr.text, jerr.line);
    return j;
}

// The committed checkpoint directory `dir` names: latest_checkpointed_iteration.txt's, or dir
// itself; *named_iteration the iteration the directory's name says (iter_NNNNNNN), -1 when it
// says none.
static int resolve_dir(const char *dir, char *out, long long *named_iteration, tb_error *err) {
    char p[CKPT_PATH];
    *named_iteration = -1;
    if (ckpt_path(p, err, "%s/" TB_CKPT_LATEST, dir) != 0) return -1;
    struct stat st;
    if (lstat(p, &st) != 0) {
        if (ckpt_path(out, err, "%s", dir) != 0) return -1;
        const char *base = strrchr(out, '/');
        base = base ? base + 1 : out;
        long long it;
        int n = 0;
        if (sscanf(base, "iter_%lld%n", &it, &n) == 1 && base[n] == '\0' && it >= 0) *named_iteration = it;
        return 0;
    }
    int fd = tb_open_regular(p, "a text file holding the iteration is expected", NULL, err);
    if (fd < 0) return -1;
    char text[64];
    ssize_t len = read(fd, text, sizeof text - 1);
    close(fd);
    if (len < 0) return tb_fail(err, "%s: %s", p, strerror(errno));
    text[len] = '\0';
    char *end;
    errno = 0;
    long long it = strtoll(text, &end, 10);
    while (*end == ' ' || *end == '\n' || *end == '\t' || *end == '\r') end++;
    if (end == text || *end || len == (ssize_t)sizeof text - 1)
        return tb_fail(err, "%s: want one iteration number, not what it holds", p);
    if (errno == ERANGE || it < 0 || it > 9999999)
        return tb_fail(err, "%s: iteration %.*s is out of range [0, 9999999] (the iter_NNNNNNN directories)", p,
                       (int)strcspn(text, " \n\t\r"), text);
    *named_iteration = it;
    return ckpt_path(out, err, "%s/iter_%07lld", dir, it);
}

// The model's shape: what a checkpoint must agree with to load at all.
static const char *const shape_keys[] = {
    "num_layers", "hidden_size", "ffn_hidden_size", "num_attention_heads", "num_query_groups", "vocab_size",
    "normalization", "swiglu", "disable_bias_linear", "untie_embeddings_and_output_weights",
    "position_embedding_type", "rotary_percent", "max_position_embeddings", "num_experts", "moe_ffn_hidden_size",
    "moe_layer_freq", "moe_shared_expert_intermediate_size"};

static int check_shape(const json_t *saved, const tb_config *cfg, const char *path, tb_error *err) {
    json_t *mine = config_to_json(cfg);
    int rc = 0;
    for (size_t i = 0; i < sizeof shape_keys / sizeof *shape_keys && rc == 0; i++) {
        json_t *a = json_object_get(saved, shape_keys[i]), *b = json_object_get(mine, shape_keys[i]);
        if (!json_equal(a, b)) {
            char *sa = a ? json_dumps(a, JSON_ENCODE_ANY) : NULL, *sb = b ? json_dumps(b, JSON_ENCODE_ANY) : NULL;
            rc = tb_fail(err, "%s: the checkpoint's %s is %s, this model's %s", path, shape_keys[i],
                         sa ? sa : "(absent)", sb ? sb : "(absent)");
            free(sa), free(sb);
        }
    }
    json_decref(mine);
    return rc;
}

// Open files of one checkpoint, each verified against its sha256 once.
typedef struct open_files {
    const char *dir;
    int64_t bytes_read;  // of tensor data
    json_t *digests;  // metadata "files"
    int n;
    char *names[64];
    tb_safetensors st[64];
} open_files;

static tb_safetensors *file_of(open_files *of, const char *name, tb_error *err) {
    for (int i = 0; i < of->n; i++)
        if (!strcmp(of->names[i], name)) return &of->st[i];
    if (of->n == 64) {
        tb_fail(err, "%s: more than 64 shard files needed by one rank: not supported yet", of->dir);
        return NULL;
    }
    char path[CKPT_PATH], hex[65];
    uint64_t bytes;
    // a shard file lies in the checkpoint directory: a name with a '/' (or "..") could read
    // any file that has a matching entry
    if (!name || !*name || strchr(name, '/') || !strcmp(name, "..") || !strcmp(name, ".")) {
        tb_fail(err, "%s: a piece's file '%s' is not a file name inside the checkpoint directory", of->dir,
                name ? name : "(none)");
        return NULL;
    }
    if (ckpt_path(path, err, "%s/%s", of->dir, name) != 0) return NULL;
    const json_t *digest = json_object_get(of->digests, name);
    const char *want = json_string_value(json_object_get(digest, "sha256"));
    const json_t *want_bytes = json_object_get(digest, "bytes");
    if (!want || !json_is_integer(want_bytes)) {
        tb_fail(err, "%s: not listed in %s's files with its sha256 and bytes", path, TB_CKPT_METADATA);
        return NULL;
    }
    if (ckpt_sha256_file(path, hex, &bytes, err) != 0) return NULL;
    if (strcmp(hex, want) != 0) {
        tb_fail(err, "%s: sha256 %s, the metadata says %s: the shard was altered or damaged", path, hex, want);
        return NULL;
    }
    if ((json_int_t)bytes != json_integer_value(want_bytes)) {
        tb_fail(err, "%s: %llu bytes, the metadata says %lld", path, (unsigned long long)bytes,
                (long long)json_integer_value(want_bytes));
        return NULL;
    }
    tb_safetensors *st = &of->st[of->n];
    if (tb_safetensors_open(st, path, err) != 0) return NULL;
    of->names[of->n++] = tb_xstrdup(name, "checkpoint file name");
    return st;
}

static void close_files(open_files *of) {
    for (int i = 0; i < of->n; i++) {
        tb_safetensors_close(&of->st[i]);
        free(of->names[i]);
    }
    of->n = 0;
}

static int geo_int(const json_t *t, const char *key) { return (int)json_integer_value(json_object_get(t, key)); }

// Global tensor `name` reassembled from its pieces, then this rank's shard of it (p's
// geometry at tp ranks: an expert's at etp ranks) written to dst.
static int load_tensor(open_files *of, const json_t *tensors, const char *name, const gpt_param *p, int tp,
                       int tp_rank, float *dst, tb_allocator *mem, tb_host_stage *stage, tb_error *err) {
    const json_t *t = json_object_get(tensors, name);
    if (!t) return tb_fail(err, "%s: tensor %s is not in the checkpoint", of->dir, name);
    gpt_param src = *p;  // the saving layout's geometry of the same tensor
    src.full_rows = geo_int(t, "full_rows"), src.full_cols = geo_int(t, "full_cols");
    src.split_axis = geo_int(t, "split_axis"), src.rows = geo_int(t, "rows"), src.cols = geo_int(t, "cols");
    const json_t *seg = json_object_get(t, "segments");
    src.nseg = (int)json_array_size(seg);
    for (int s = 0; s < src.nseg && s < 3; s++) src.seg[s] = (int)json_integer_value(json_array_get(seg, (size_t)s));
    const int src_tp = geo_int(t, "tp"), real = geo_int(t, "real_rows");
    // an expert's tensor has no segments where it is whole (etp 1): the same full tensor
    const int same_segments = src.nseg == p->nseg || (p->expert && (src.nseg == 0 || p->nseg == 0));
    if (src.full_cols != p->full_cols || real != p->hf_rows || !same_segments || src.nseg > 3 || src_tp < 1 ||
        src.full_rows < real)
        return tb_fail(err, "%s: tensor %s is [%d real of %d rows, %d cols] in %d segments there, [%d of %d, %d] in %d "
                       "here",
                       of->dir, name, real, src.full_rows, src.full_cols, src.nseg, p->hf_rows, p->full_rows,
                       p->full_cols, p->nseg);
    const size_t src_full = (size_t)src.full_rows * src.full_cols, dst_full = (size_t)p->full_rows * p->full_cols;
    // host memory: the files' pieces read and reassembled on the host, this rank's shard then
    // written to dst (on a device: through the stage)
    float *full = tb_host_buffer(mem, (src_full > dst_full ? src_full : dst_full) * sizeof(float), "checkpoint tensor"),
          *shard = tb_host_buffer(mem, (size_t)src.rows * src.cols * sizeof(float), "checkpoint shard");
    // every tp piece exactly once
    int have[TB_MAX_GROUP] = {0}, rc = 0;
    size_t i;
    json_t *piece;
    json_array_foreach(json_object_get(t, "pieces"), i, piece) {
        int r = geo_int(piece, "tp_rank");
        if (r < 0 || r >= src_tp || r >= TB_MAX_GROUP || have[r]++) {
            rc = tb_fail(err, "%s: tensor %s has a piece for tp rank %d twice or out of [0, %d)", of->dir, name, r,
                         src_tp);
            break;
        }
        tb_safetensors *st = file_of(of, json_string_value(json_object_get(piece, "file")), err);
        const char *key = json_string_value(json_object_get(piece, "key"));
        const tb_st_tensor *tt = st && key ? tb_safetensors_find(st, key) : NULL;
        if (!st) rc = -1;
        else if (!tt) rc = tb_fail(err, "%s: tensor %s is not in its shard file", of->dir, key ? key : name);
        else if (tb_st_tensor_numel(tt) != (int64_t)src.rows * src.cols)
            rc = tb_fail(err, "%s: %s holds %" PRId64 " floats, its geometry %d x %d", st->path, key,
                         tb_st_tensor_numel(tt), src.rows, src.cols);
        else rc = tb_safetensors_read_f32(st, tt, shard, err);
        for (int64_t k = 0; rc == 0 && k < (int64_t)src.rows * src.cols; k++)
            if (!isfinite(shard[k]))  // as the safetensors path refuses one, naming the tensor
                rc = tb_fail(err, "%s: tensor %s holds a non-finite value (%g at element %lld)", st->path, key,
                             (double)shard[k], (long long)k);
        if (rc != 0) break;
        of->bytes_read += (int64_t)(tt->end - tt->begin);
        gpt_param_shard_copy(&src, src_tp, r, full, shard, 0);
    }
    for (int r = 0; rc == 0 && r < src_tp; r++)
        if (!have[r]) rc = tb_fail(err, "%s: tensor %s lacks the piece of tp rank %d of %d", of->dir, name, r, src_tp);
    if (rc == 0) {
        // the real rows are the same; the padding (another tp's vocabulary multiple) is zero
        if (p->full_rows != src.full_rows) {
            if (p->full_rows > real) memset(full + (size_t)real * p->full_cols, 0,
                                            (size_t)(p->full_rows - real) * p->full_cols * sizeof(float));
        }
        const size_t bytes = p->numel * sizeof(float);
        gpt_param_shard_copy(p, tp, tp_rank, full, tb_host_write_begin(stage, dst, bytes), 1);
        tb_host_write_end(stage, dst, bytes);
    }
    tb_host_buffer_free(mem, full);
    tb_host_buffer_free(mem, shard);
    return rc;
}

// The metadata's layout against the config it saved with: the same sizes, each named.
static int check_layout(const json_t *meta, const char *path, tb_error *err) {
    static const char *const keys[][2] = {{"tp", "tensor_model_parallel_size"},
                                          {"pp", "pipeline_model_parallel_size"},
                                          {"dp", "data_parallel_size"},
                                          {"ep", "expert_model_parallel_size"},
                                          {"etp", "expert_tensor_parallel_size"},
                                          {"world", "world_size"}};
    const json_t *layout = json_object_get(meta, "layout"), *config = json_object_get(meta, "config");
    for (size_t i = 0; i < sizeof keys / sizeof *keys; i++) {
        // data_parallel_size is derived (config.derived), the others are the config's own
        const json_t *b = json_object_get(config, keys[i][1]);
        if (!json_is_integer(b)) b = json_object_get(json_object_get(config, "derived"), keys[i][1]);
        const json_t *a = json_object_get(layout, keys[i][0]);
        if (!json_is_integer(a) || !json_is_integer(b) || json_integer_value(a) != json_integer_value(b) ||
            json_integer_value(a) < 1)
            return tb_fail(err, "%s: layout.%s is %lld but the saved config's %s is %lld (the metadata disagrees with "
                           "itself)", path, keys[i][0], (long long)json_integer_value(a), keys[i][1],
                           (long long)json_integer_value(b));
    }
    return 0;
}

static int load_rank(const dist_ckpt_state *s, const char *dir, int64_t *iteration, float *bytes, tb_error *err) {
    char resolved[CKPT_PATH], path[CKPT_PATH];
    long long named = -1;
    if (resolve_dir(dir, resolved, &named, err) != 0 || ckpt_path(path, err, "%s/" TB_CKPT_METADATA, resolved) != 0)
        return -1;
    json_t *meta = load_json_regular(path, err);
    if (!meta) return -1;
    int rc = 0;
    const char *format = json_string_value(json_object_get(meta, "format"));
    json_int_t version = json_integer_value(json_object_get(meta, "version"));
    json_t *it = json_object_get(meta, "iteration"), *step = json_object_get(json_object_get(meta, "optimizer"), "step");
    json_t *consumed = json_object_get(meta, "consumed_samples");
    const json_t *saved_gbs = json_object_get(json_object_get(meta, "config"), "global_batch_size");
    if (!format || strcmp(format, CKPT_FORMAT) != 0 || version != CKPT_VERSION)
        rc = tb_fail(err, "%s: format %s version %lld, this engine reads %s version %d", path,
                     format ? format : "(none)", (long long)version, CKPT_FORMAT, CKPT_VERSION);
    else if (!json_is_integer(it) || json_integer_value(it) < 0 || !json_is_integer(step))
        rc = tb_fail(err, "%s: iteration and optimizer.step must be integers", path);
    else if (named >= 0 && json_integer_value(it) != named)
        rc = tb_fail(err, "%s: iteration %lld, but its directory is iter_%07lld", path,
                     (long long)json_integer_value(it), named);
    else if (json_integer_value(step) < 0 || json_integer_value(step) > json_integer_value(it))
        rc = tb_fail(err, "%s: optimizer.step %lld is out of [0, iteration %lld] (one Adam step per iteration at most)",
                     path, (long long)json_integer_value(step), (long long)json_integer_value(it));
    else if (!json_is_integer(consumed) || !json_is_integer(saved_gbs))
        rc = tb_fail(err, "%s: consumed_samples and config.global_batch_size must be integers", path);
    else if (json_integer_value(consumed) != json_integer_value(it) * json_integer_value(saved_gbs))
        rc = tb_fail(err, "%s: consumed_samples %lld is not iteration %lld x the saved global_batch_size %lld (%lld)",
                     path, (long long)json_integer_value(consumed), (long long)json_integer_value(it),
                     (long long)json_integer_value(saved_gbs),
                     (long long)(json_integer_value(it) * json_integer_value(saved_gbs)));
    else if (check_layout(meta, path, err) != 0)
        rc = -1;
    else if (json_integer_value(it) >= s->cfg->train_iters)
        rc = tb_fail(err, "%s: the checkpoint is of iteration %lld; train_iters (%d) leaves nothing to train", path,
                     (long long)json_integer_value(it), s->cfg->train_iters);
    else rc = check_shape(json_object_get(meta, "config"), s->cfg, path, err);
    open_files of = {.dir = resolved, .digests = json_object_get(meta, "files")};
    const json_t *tensors = json_object_get(meta, "tensors");
    tb_allocator *mem = s->rk->mem;
    tb_host_stage stage = {0};
    for (int c = 0; c < s->nchunks && rc == 0; c++) {
        gpt_model *m = &s->models[c];
        tb_adamw *o = &s->opts[c];
        float *moments[2] = {NULL, NULL};
        for (int k = 0; k < 2; k++)
            moments[k] = o->sharded ? tb_alloc(mem, TB_MEM_WORKSPACE, m->padded_parameters * sizeof(float),
                                               "checkpoint moments")
                                    : (k ? o->v : o->m);
        for (int i = 0; i < m->nparams && rc == 0; i++) {
            const gpt_param *p = &m->params[i];
            float *dst[3] = {m->param_memory + p->offset, moments[0] + p->offset, moments[1] + p->offset};
            int parts, part;
            gpt_param_split_group(m, p, &parts, &part);
            for (int k = 0; k < (s->cfg->load_optim ? 3 : 1) && rc == 0; k++) {
                char name[160];
                snprintf(name, sizeof name, "%s.%s", ckpt_kinds[k], p->name);
                if (k > 0 && !json_object_get(tensors, name))
                    rc = tb_fail(err, "%s: the checkpoint has no optimizer state (%s; saved with --no-save-optim?): "
                                 "--no-load-optim starts a fresh optimizer", of.dir, name);
                else rc = load_tensor(&of, tensors, name, p, parts, part, dst[k], mem, &stage, err);
            }
        }
        if (o->sharded) {
            if (rc == 0 && s->cfg->load_optim) {
                adamw_shard_extract(o, moments[0], o->m);
                adamw_shard_extract(o, moments[1], o->v);
            }
            tb_free(mem, moments[0]);
            tb_free(mem, moments[1]);
        }
        o->t = s->cfg->load_optim ? json_integer_value(step) : 0;
    }
    tb_host_stage_free(&stage);
    *bytes = (float)of.bytes_read;
    close_files(&of);
    if (rc == 0) *iteration = json_integer_value(it);
    json_decref(meta);
    return rc;
}

int dist_checkpoint_load(const dist_ckpt_state *s, const char *dir, int64_t *iteration, tb_error *err) {
    const double t0 = ckpt_ms_now(s->rk);
    float bytes = 0;  // this rank's tensor bytes read (summed over the world below, MB-exact enough for a print)
    int ok = load_rank(s, dir, iteration, &bytes, err) == 0;
    if (ckpt_agree(s->rk, ok, "checkpoint load", err) != 0) return -1;
    if (s->rk->world && s->rk->world_size > 1) tb_all_reduce(&s->rk->groups[TB_GROUP_WORLD], &bytes, 1, TB_RED_SUM);
    if (s->rk->rank == 0)
        printf("loaded checkpoint: %s, iteration %lld: %.1f MB read by %d rank%s in %.0f ms (%.0f MB/s)\n", dir,
               (long long)*iteration, bytes / 1e6, s->rk->world_size, s->rk->world_size == 1 ? "" : "s",
               ckpt_ms_now(s->rk) - t0, bytes / 1e3 / (ckpt_ms_now(s->rk) - t0 + 1e-9));
    return 0;
}
