// dist_checkpoint.c — sharded save and resharding load (dist_checkpoint.h).
#define _GNU_SOURCE  // nftw's FTW_DEPTH / FTW_PHYS
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
#include "config.h"
#include "core/clock.h"
#include "core/fileio.h"
#include "core/ranges.h"
#include "core/run_dir.h"
#include "core/safetensors.h"
#include "core/xalloc.h"

#define CKPT_FORMAT "tracebook-dist-checkpoint"
#define CKPT_VERSION 1
#define CKPT_PATH 4096

// A path under the checkpoint directory; a longer one than CKPT_PATH is an error, not cut.
__attribute__((format(printf, 3, 4))) static int ckpt_path(char *out, tb_error *err, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(out, CKPT_PATH, fmt, ap);
    va_end(ap);
    if (n < 0 || n >= CKPT_PATH) return tb_fail(err, "checkpoint path longer than %d bytes (%.60s...)", CKPT_PATH - 1, out);
    return 0;
}

// --- the world agreeing -----------------------------------------------------------------

// Every rank says whether it succeeded; all return 0 only when all did. A rank that did not
// fail learns which one did (the highest failing rank: its own err holds the reason).
static int agree(const tb_rank *rk, int ok, const char *what, tb_error *err) {
    if (!rk->world || rk->world_size == 1) return ok ? 0 : -1;
    float failed = ok ? 0.0f : (float)(rk->rank + 1);
    tb_all_reduce((tb_group *)&rk->groups[TB_GROUP_WORLD], &failed, 1, TB_RED_MAX);
    if (failed == 0.0f) return 0;
    if (ok) tb_fail(err, "%s: rank %d failed (its error is on its own output)", what, (int)failed - 1);
    return -1;
}

static const tb_group *dp_group(const tb_rank *rk) { return rk->world ? &rk->groups[TB_GROUP_DP_CP] : NULL; }

// --- files ------------------------------------------------------------------------------

static int sha256_file(const char *path, char hex[65], uint64_t *bytes, tb_error *err) {
    int fd = tb_open_regular(path, NULL, NULL, err);
    if (fd < 0) return -1;
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    int ok = ctx && EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) == 1;
    unsigned char buf[1 << 16], md[32];
    *bytes = 0;
    ssize_t n;
    while (ok && (n = read(fd, buf, sizeof buf)) > 0) {
        ok = EVP_DigestUpdate(ctx, buf, (size_t)n) == 1;
        *bytes += (uint64_t)n;
    }
    if (ok && n < 0) ok = 0;
    unsigned len = 0;
    ok = ok && EVP_DigestFinal_ex(ctx, md, &len) == 1 && len == 32;
    EVP_MD_CTX_free(ctx);
    close(fd);
    if (!ok) return tb_fail(err, "%s: cannot hash (%s)", path, errno ? strerror(errno) : "OpenSSL failed");
    for (int i = 0; i < 32; i++) snprintf(hex + 2 * i, 3, "%02x", md[i]);
    return 0;
}

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
    (void)st, (void)flag, (void)ftw;
    return remove(path);
}

// rm -rf; a missing path is fine.
static int remove_tree(const char *path, tb_error *err) {
    struct stat st;
    if (lstat(path, &st) != 0) return errno == ENOENT ? 0 : tb_fail(err, "%s: %s", path, strerror(errno));
    if (nftw(path, remove_entry, 16, FTW_DEPTH | FTW_PHYS) != 0)
        return tb_fail(err, "%s: cannot remove (%s)", path, strerror(errno));
    return 0;
}

static int fsync_dir(const char *path, tb_error *err) {
    int fd = open(path, O_RDONLY | O_DIRECTORY);
    int ok = fd >= 0 && fsync(fd) == 0;
    if (fd >= 0) close(fd);
    return ok ? 0 : tb_fail(err, "%s: cannot fsync the directory (%s)", path, strerror(errno));
}

// --- which pieces this rank holds and writes --------------------------------------------

// The geometry that reassembles a tensor from its pieces over its split group (tp, or an
// expert's etp: gpt_param_split_group; models/gpt.h's fields).
static json_t *geometry_json(const gpt_param *p, int tp) {
    json_t *seg = json_array();
    for (int s = 0; s < p->nseg; s++) json_array_append_new(seg, json_integer(p->seg[s]));
    return json_pack("{s:i, s:i, s:i, s:i, s:i, s:o, s:i, s:i, s:i}", "full_rows", p->full_rows, "full_cols",
                     p->full_cols, "real_rows", p->hf_rows, "ndim", p->ndim, "split_axis", p->split_axis, "segments",
                     seg, "tp", p->split_axis < 0 ? 1 : tp, "rows", p->rows, "cols", p->cols);
}

// The replicas of this rank's tensors: a dense tensor's over tp (when not split) and dp × cp;
// an expert's (MoE) over expert-dp, the ranks that hold the same experts, and over etp when
// not split (fc2's bias; a split one's etp ranks each hold a piece).
typedef struct replicas {
    int tp_rank, dp_rank, dp_size;     // dense
    int etp_rank, edp_rank, edp_size;  // experts
} replicas;

static replicas replicas_of(const tb_rank *rk, const gpt_model *m) {
    replicas r = {m->tp_rank, 0, 1, 0, 0, 1};
    if (rk->world) {
        const tb_group *dp = &rk->groups[TB_GROUP_DP_CP], *edp = &rk->groups[TB_GROUP_EXPERT_DP];
        r.dp_rank = dp->index, r.dp_size = dp->size;
        r.etp_rank = rk->groups[TB_GROUP_ETP].index, r.edp_rank = edp->index, r.edp_size = edp->size;
    }
    return r;
}

// Whether this rank writes parameter p's pieces: one replica of each, spread over the
// data-parallel (expert-data-parallel) replicas. An expert's tensors are named by their global
// expert index (h.L.mlp.experts.E.*), so each is one global tensor whatever the ep it was saved at.
static int writes(const gpt_param *p, const replicas *r) {
    if (p->pp_duplicate) return 0;  // the first stage writes the tied embedding
    if (p->expert) return (p->split_axis >= 0 || r->etp_rank == 0) && r->edp_rank == p->global_index % r->edp_size;
    if (p->split_axis < 0 && r->tp_rank != 0) return 0;  // replicated over tp
    return r->dp_rank == p->global_index % r->dp_size;
}

static const char *const kinds[3] = {"model", "optimizer.exp_avg", "optimizer.exp_avg_sq"};

// --- save -------------------------------------------------------------------------------

static double ms_now(const tb_rank *rk) {
    return (double)(tb_now_ns() - (rk->world ? rk->world->origin_ns : 0)) / 1e6;
}

static void phase_begin(dist_ckpt_timing *t, int phase, double ms) { t->start_ms[phase] = t->end_ms[phase] = ms; }
static void phase_end(dist_ckpt_timing *t, int phase, double ms, int64_t bytes) {
    t->end_ms[phase] = ms;
    t->bytes[phase] += bytes;
}



// Rank 0: the rank files' piece lists merged into metadata.json, then the commit.
static int commit(const dist_ckpt_state *s, const char *dir, const char *tmp, const char *final, int64_t iteration,
                  int64_t optimizer_step, dist_ckpt_timing *t, tb_error *err) {
    const tb_config *cfg = s->cfg;
    json_t *tensors = json_object(), *files = json_object();
    char path[CKPT_PATH];
    int rc = 0;
    for (int r = 0; r < s->rk->world_size && rc == 0; r++) {
        if (ckpt_path(path, err, "%s/rank-%05d.json", tmp, r) != 0) {
            rc = -1;
            break;
        }
        json_error_t jerr;
        json_t *part = json_load_file(path, 0, &jerr);
        if (!part) {
            rc = tb_fail(err, "%s: %s", path, jerr.text);
            break;
        }
        json_t *file = json_object_get(part, "file");
        if (json_is_string(file))
            json_object_set(files, json_string_value(file), json_object_get(part, "digest"));
        size_t i;
        json_t *piece;
        json_array_foreach(json_object_get(part, "pieces"), i, piece) {
            const char *name = json_string_value(json_object_get(piece, "tensor"));
            json_t *tensor = json_object_get(tensors, name);
            if (!tensor) {
                tensor = json_deep_copy(json_object_get(piece, "geometry"));
                json_object_set_new(tensor, "pieces", json_array());
                json_object_set_new(tensors, name, tensor);
            }
            json_array_append_new(json_object_get(tensor, "pieces"),
                                  json_pack("{s:O, s:O, s:O}", "tp_rank", json_object_get(piece, "tp_rank"), "file",
                                            file, "key", json_object_get(piece, "tensor")));
        }
        json_decref(part);
        if (remove(path) != 0) rc = tb_fail(err, "%s: cannot remove (%s)", path, strerror(errno));
    }
    if (rc == 0) {
        const int vpp = cfg->virtual_pipeline_model_parallel_size > 1 ? cfg->virtual_pipeline_model_parallel_size : 1;
        json_t *meta = json_pack(
            "{s:s, s:i, s:I, s:I, s:{s:I}, s:o, s:{s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:b}, s:o, s:o}", "format", CKPT_FORMAT,
            "version", CKPT_VERSION, "iteration", (json_int_t)iteration, "consumed_samples",
            (json_int_t)(iteration * cfg->global_batch_size), "optimizer", "step", (json_int_t)optimizer_step, "config",
            config_to_json(cfg), "layout", "tp", cfg->tensor_model_parallel_size, "pp",
            cfg->pipeline_model_parallel_size, "vpp", vpp, "dp", cfg->data_parallel_size, "ep", cfg->expert_model_parallel_size, "etp",
            cfg->expert_tensor_parallel_size, "world", cfg->world_size,
            "distributed_optimizer", cfg->use_distributed_optimizer, "tensors", tensors, "files", files);
        tensors = files = NULL;
        rc = ckpt_path(path, err, "%s/" TB_CKPT_METADATA, tmp);
        if (rc == 0) rc = tb_write_json_atomic(path, meta, err);
        json_decref(meta);
    }
    json_decref(tensors);
    json_decref(files);
    phase_end(t, CKPT_METADATA, ms_now(s->rk), 0);
    phase_begin(t, CKPT_COMMIT, ms_now(s->rk));
    // the checkpoint becomes visible whole: an older one of the same iteration goes first
    char old[CKPT_PATH];
    if (rc == 0) rc = ckpt_path(old, err, "%s.old", final);
    if (rc == 0) rc = fsync_dir(tmp, err);
    if (rc == 0) rc = remove_tree(old, err);
    if (rc == 0 && access(final, F_OK) == 0 && rename(final, old) != 0)
        rc = tb_fail(err, "%s: cannot move aside (%s)", final, strerror(errno));
    if (rc == 0 && rename(tmp, final) != 0) rc = tb_fail(err, "%s: cannot commit as %s (%s)", tmp, final, strerror(errno));
    if (rc == 0) rc = fsync_dir(dir, err);
    if (rc == 0) rc = remove_tree(old, err);
    if (rc == 0) {
        char text[32];
        int n = snprintf(text, sizeof text, "%" PRId64 "\n", iteration);
        rc = ckpt_path(path, err, "%s/" TB_CKPT_LATEST, dir);
        if (rc == 0) rc = tb_write_file_atomic(path, text, (size_t)n, err);
    }
    phase_end(t, CKPT_COMMIT, ms_now(s->rk), 0);
    return rc;
}

// --- the save's phases --------------------------------------------------------------------

static const char *const phase_names[CKPT_NPHASES] = {"materialize", "serialize", "write", "fsync",
                                                      "barrier",     "metadata",  "commit"};

// The rank of the slow-writer drill and its delay (--debug-slow-write RANK:MS), or -1.
static int slow_writer(const tb_config *cfg, int *ms) {
    int rank = -1;
    if (!cfg->debug_slow_write[0] || sscanf(cfg->debug_slow_write, "%d:%d", &rank, ms) != 2) return -1;
    return rank;
}

// What one save of this rank holds until it is committed.
struct dist_ckpt_save {
    dist_ckpt_state state;  // a copy: the caller's may be gone when an async save completes
    const dist_ckpt_state *s;
    char dir[CKPT_PATH], final[CKPT_PATH], tmp[CKPT_PATH];
    int64_t iteration;
    int64_t optimizer_step;  // Adam's step at the save (an async save commits after later steps)
    int n;
    tb_st_entry *entries;
    json_t *pieces;
    float *staging;    // async: the copies entries point at, host memory (the model trains on meanwhile)
    int on_device;     // sync on a device: entries point at device tensors, staged one at a time
    tb_host_stage stage;
    float **moments;   // the distributed optimizer's all-gathered moments, per chunk (2 each)
    int ok;
    tb_error err;
    dist_ckpt_timing t;
    double stall_ms;   // what training waited for this save
    pthread_t thread;
    int threaded;
    double run_delay_s;  // the writer thread's wait for a core (tb_thread_run_delay_s)
};

// The distributed optimizer's all-gathered moments given back (the unsharded ones are the
// optimizer's own).
static void free_gathered_moments(struct dist_ckpt_save *sv) {
    for (int c = 0; sv->moments && c < sv->s->nchunks; c++)
        if (sv->s->opts[c].sharded) {
            tb_free(&sv->s->rk->mem, sv->moments[2 * c]), tb_free(&sv->s->rk->mem, sv->moments[2 * c + 1]);
            sv->moments[2 * c] = sv->moments[2 * c + 1] = NULL;
        }
}

// Materialisation: the moments all-gathered where sharded, the pieces this rank writes listed
// (and, for an async save, copied out). A collective: in the rank's thread.
static void materialize(struct dist_ckpt_save *sv) {
    const dist_ckpt_state *s = sv->s;
    tb_rank *rk = s->rk;
    const tb_group *dp = dp_group(rk);
    const replicas reps = replicas_of(rk, &s->models[0]);
    phase_begin(&sv->t, CKPT_MATERIALIZE, ms_now(rk));
    sv->moments = tb_xcalloc(2 * (size_t)s->nchunks, sizeof *sv->moments, "checkpoint moments");
    for (int c = 0; c < s->nchunks; c++) {
        const tb_adamw *o = &s->opts[c];
        for (int k = 0; k < 2; k++) {
            const float *mine = k ? o->v : o->m;
            if (!o->sharded) {
                sv->moments[2 * c + k] = (float *)mine;
                continue;
            }
            sv->moments[2 * c + k] = tb_alloc(&rk->mem, TB_MEM_WORKSPACE,
                                              s->models[c].padded_parameters * sizeof(float), "checkpoint moments");
            adamw_shard_all_gather(o, (tb_group *)dp, mine, sv->moments[2 * c + k]);
        }
    }
    int cap = 0;
    size_t floats = 0;
    sv->pieces = json_array();
    for (int c = 0; c < s->nchunks; c++) {
        const gpt_model *m = &s->models[c];
        for (int i = 0; i < m->nparams; i++) {
            const gpt_param *p = &m->params[i];
            if (!writes(p, &reps)) continue;
            int parts, part;  // its pieces: over tp, or an expert's over etp
            gpt_param_split_group(m, p, &parts, &part);
            const float *data[3] = {m->param_memory + p->offset, sv->moments[2 * c] + p->offset,
                                    sv->moments[2 * c + 1] + p->offset};
            for (int k = 0; k < (s->cfg->save_optim ? 3 : 1); k++) {  // the model, then the moments
                if (sv->n == cap)
                    sv->entries = tb_xreallocarray(sv->entries, (size_t)(cap = cap ? 2 * cap : 64),
                                                   sizeof *sv->entries, "checkpoint entries");
                char name[160];
                snprintf(name, sizeof name, "%s.%s", kinds[k], p->name);
                tb_st_entry *e = &sv->entries[sv->n++];
                memset(e, 0, sizeof *e);
                e->name = tb_xstrdup(name, "checkpoint entry name");
                e->ndim = 2;
                e->shape[0] = p->rows, e->shape[1] = p->cols;
                e->data = data[k];
                floats += p->numel;
                json_array_append_new(sv->pieces, json_pack("{s:s, s:i, s:o}", "tensor", name, "tp_rank",
                                                            p->split_axis < 0 ? 0 : part, "geometry",
                                                            geometry_json(p, parts)));
            }
        }
    }
    const tb_backend *be = tb_be();
    if (s->cfg->async_save && floats) {
        // the state as of this step, for the background writer: host memory (on a device, a
        // copy of every piece this rank writes, made here in the rank's thread)
        sv->staging = tb_host_buffer(&rk->mem, floats * sizeof(float), "checkpoint staging");
        float *at = sv->staging;
        for (int i = 0; i < sv->n; i++) {
            size_t numel = (size_t)sv->entries[i].shape[0] * sv->entries[i].shape[1];
            be->copy_to_host(at, sv->entries[i].data, numel * sizeof(float));  // the CPU's: memcpy
            sv->entries[i].data = at;
            at += numel;
        }
        free_gathered_moments(sv);  // the copies hold them: not kept on the device while training goes on
    } else {
        sv->on_device = !be->host;
    }
    phase_end(&sv->t, CKPT_MATERIALIZE, ms_now(rk), (int64_t)(floats * sizeof(float)));
}

// A device's piece, one at a time through the save's host stage (a synchronous save: the rank's thread).
static const float *fetch_piece(void *ctx, int i, const tb_st_entry *e) {
    (void)i;
    struct dist_ckpt_save *sv = ctx;
    return tb_host_read(&sv->stage, e->data, (size_t)e->shape[0] * e->shape[1] * sizeof(float));
}

// Serialisation, write and fsync of this rank's shard file and its piece list: no collective,
// so it may run in a background thread.
static void write_files(struct dist_ckpt_save *sv) {
    const dist_ckpt_state *s = sv->s;
    const tb_rank *rk = s->rk;
    char file[64], hex[65] = "", path[CKPT_PATH];
    uint64_t bytes = 0;
    snprintf(file, sizeof file, "rank-%05d.safetensors", rk->rank);
    double sec[3] = {0, 0, 0}, t0 = ms_now(rk);
    int delay_ms = 0;
    if (slow_writer(s->cfg, &delay_ms) == rk->rank) usleep((useconds_t)delay_ms * 1000);  // the drill
    double slept = ms_now(rk) - t0;
    sv->ok = ckpt_path(path, &sv->err, "%s/%s", sv->tmp, file) == 0 &&
             (sv->n == 0 || tb_safetensors_write_from(path, sv->entries, sv->n, NULL,
                                                      sv->on_device ? &(tb_st_source){fetch_piece, sv} : NULL, sec,
                                                      &sv->err) == 0);
    // phases as they ran: serialize, write (the drill's delay is the write's), fsync
    sv->t.start_ms[CKPT_SERIALIZE] = t0;
    sv->t.end_ms[CKPT_SERIALIZE] = sv->t.start_ms[CKPT_WRITE] = t0 + sec[0] * 1e3;
    sv->t.end_ms[CKPT_WRITE] = sv->t.start_ms[CKPT_FSYNC] = t0 + slept + (sec[0] + sec[1]) * 1e3;
    sv->t.end_ms[CKPT_FSYNC] = t0 + slept + (sec[0] + sec[1] + sec[2]) * 1e3;
    if (sv->ok && sv->n) sv->ok = sha256_file(path, hex, &bytes, &sv->err) == 0;
    sv->t.bytes[CKPT_WRITE] = (int64_t)bytes;
    if (sv->ok) {
        json_t *part = json_pack("{s:o, s:{s:s, s:I}, s:O}", "file", sv->n ? json_string(file) : json_null(), "digest",
                                 "sha256", hex, "bytes", (json_int_t)bytes, "pieces", sv->pieces);
        sv->ok = ckpt_path(path, &sv->err, "%s/rank-%05d.json", sv->tmp, rk->rank) == 0 &&
                 tb_write_json_atomic(path, part, &sv->err) == 0;
        json_decref(part);
    }
    sv->t.arrival_ms = ms_now(rk);
}

static void *writer_thread(void *arg) {
    struct dist_ckpt_save *sv = arg;
    write_files(sv);
    sv->run_delay_s = tb_thread_run_delay_s();
    return NULL;
}

static void save_free(struct dist_ckpt_save *sv) {
    tb_rank *rk = sv->s->rk;
    for (int i = 0; i < sv->n; i++) free((char *)sv->entries[i].name);
    free(sv->entries);
    json_decref(sv->pieces);
    if (sv->staging) tb_host_buffer_free(&rk->mem, sv->staging);
    tb_host_stage_free(&sv->stage);
    free_gathered_moments(sv);
    free(sv->moments);
    free(sv);
}

// The median of a phase's duration over the ranks.
static double median_phase(const dist_ckpt_timing *all, int n, int phase) {
    double *d = tb_xcalloc((size_t)n, sizeof *d, "checkpoint phase durations");
    for (int r = 0; r < n; r++) d[r] = all[r].end_ms[phase] - all[r].start_ms[phase];
    for (int i = 1; i < n; i++)  // insertion sort: n is the world size
        for (int j = i; j > 0 && d[j - 1] > d[j]; j--) {
            double x = d[j];
            d[j] = d[j - 1], d[j - 1] = x;
        }
    double m = n % 2 ? d[n / 2] : (d[n / 2 - 1] + d[n / 2]) / 2;
    free(d);
    return m;
}

// checkpoint.json gains this save: every rank's phases, the barrier arrivals, the last
// arriver and the phase that made it late (the one furthest above the ranks' median).
static int record_save(dist_ckpt_writer *w, const tb_rank *rk, const struct dist_ckpt_save *sv,
                       const dist_ckpt_timing *all, tb_error *err) {
    const int n = rk->world_size;
    int last = 0, first = 0;
    for (int r = 1; r < n; r++) {
        if (all[r].arrival_ms > all[last].arrival_ms) last = r;
        if (all[r].arrival_ms < all[first].arrival_ms) first = r;
    }
    int late = CKPT_MATERIALIZE;
    double excess = -1e300;
    for (int ph = CKPT_MATERIALIZE; ph <= CKPT_FSYNC; ph++) {
        double d = all[last].end_ms[ph] - all[last].start_ms[ph] - median_phase(all, n, ph);
        if (d > excess) excess = d, late = ph;
    }
    json_t *ranks = json_array();
    double start = all[0].begin_ms, end = 0;
    for (int r = 0; r < n; r++) {
        json_t *phases = json_array();
        for (int ph = 0; ph < CKPT_NPHASES; ph++) {
            if (all[r].end_ms[ph] == 0 && all[r].start_ms[ph] == 0) continue;  // rank 0's metadata and commit only
            json_array_append_new(phases, json_pack("{s:s, s:f, s:f, s:f, s:I}", "phase", phase_names[ph], "start_ms",
                                                    all[r].start_ms[ph], "end_ms", all[r].end_ms[ph], "ms",
                                                    all[r].end_ms[ph] - all[r].start_ms[ph], "bytes",
                                                    (json_int_t)all[r].bytes[ph]));
            if (all[r].begin_ms < start) start = all[r].begin_ms;
            if (all[r].done_ms > end) end = all[r].done_ms;
        }
        json_array_append_new(ranks, json_pack("{s:i, s:s, s:f, s:f, s:o}", "rank", r, "rank_label",
                                               rk->world ? rk->world->ranks[r].label : rk->label, "barrier_arrival_ms",
                                               all[r].arrival_ms, "stall_ms", all[r].stall_ms, "phases", phases));
    }
    const double lm = all[last].end_ms[late] - all[last].start_ms[late];
    json_t *save = json_pack(
        "{s:I, s:s, s:b, s:f, s:f, s:{s:i, s:f, s:f, s:s, s:f, s:f}, s:o}", "iteration", (json_int_t)sv->iteration,
        "checkpoint", sv->final, "async", sv->s->cfg->async_save, "total_ms", end - start, "max_stall_ms",
        0.0, "last_arriver", "rank", last, "arrival_ms", all[last].arrival_ms, "waited_for_ms",
        all[last].arrival_ms - all[first].arrival_ms, "late_phase", phase_names[late], "phase_ms", lm,
        "median_phase_ms", lm - excess, "ranks", ranks);
    double max_stall = 0;
    for (int r = 0; r < n; r++) max_stall = all[r].stall_ms > max_stall ? all[r].stall_ms : max_stall;
    json_object_set_new(save, "max_stall_ms", json_real(max_stall));
    if (!w->saves) w->saves = json_array();
    json_array_append_new(w->saves, save);
    json_t *doc = json_pack("{s:s, s:O}", "kind", "checkpoint", "saves", w->saves);
    char path[CKPT_PATH];
    int rc = ckpt_path(path, err, "%s/" TB_RUN_CHECKPOINT, rk->run_dir[0] ? rk->run_dir : ".");
    if (rc == 0) rc = tb_write_json_atomic(path, doc, err);
    json_decref(doc);
    return rc;
}

// Waits for the save in flight, then the barrier, rank 0's metadata and commit, and the record.
static int complete(const dist_ckpt_state *s, dist_ckpt_writer *w, tb_error *err) {
    struct dist_ckpt_save *sv = w->in_flight;
    if (!sv) return 0;
    tb_rank *rk = s->rk;
    w->in_flight = NULL;
    double wait0 = ms_now(rk);
    if (sv->threaded) {
        pthread_join(sv->thread, NULL);
        if (w->writers_run_delay_s >= 0)
            w->writers_run_delay_s = sv->run_delay_s < 0 ? -1 : w->writers_run_delay_s + sv->run_delay_s;
    }
    TB_RANGE_PUSH("checkpoint.barrier");
    phase_begin(&sv->t, CKPT_BARRIER, sv->t.arrival_ms);
    int rc = agree(rk, sv->ok, "checkpoint shards", sv->ok ? err : (tb_error *)memcpy(err, &sv->err, sizeof *err));
    phase_end(&sv->t, CKPT_BARRIER, ms_now(rk), 0);
    TB_RANGE_POP();
    if (rc == 0) {
        int ok = 1;
        if (rk->rank == 0) {
            TB_RANGE_PUSH("checkpoint.metadata");
            phase_begin(&sv->t, CKPT_METADATA, ms_now(rk));
            ok = commit(s, sv->dir, sv->tmp, sv->final, sv->iteration, sv->optimizer_step, &sv->t, err) == 0;
            TB_RANGE_POP();
        }
        rc = agree(rk, ok, "checkpoint commit", err);
    }
    sv->t.done_ms = ms_now(rk);
    sv->t.stall_ms = sv->stall_ms + (sv->t.done_ms - wait0);
    if (rc == 0) {
        // every rank's phases to rank 0, which records them
        dist_ckpt_timing *all = tb_xcalloc((size_t)rk->world_size, sizeof *all, "checkpoint timings");
        if (rk->world && rk->world_size > 1) tb_all_gather_bytes(&rk->groups[TB_GROUP_WORLD], &sv->t, all, sizeof sv->t);
        else all[0] = sv->t;
        if (rk->rank == 0) rc = record_save(w, rk, sv, all, err);
        // the file bytes of every rank, and the longest serialize-to-fsync of a rank: the write's rate
        double written = 0, write_ms = 0;
        for (int r = 0; r < rk->world_size; r++) {
            written += (double)all[r].bytes[CKPT_WRITE];
            double ms = all[r].end_ms[CKPT_FSYNC] - all[r].start_ms[CKPT_SERIALIZE];
            write_ms = ms > write_ms ? ms : write_ms;
        }
        free(all);
        if (rk->rank == 0 && rc == 0)
            printf("saved checkpoint: %s (%.0f ms, training stalled %.0f ms; %.1f MB written in %.0f ms, %.0f MB/s)\n",
                   sv->final, sv->t.done_ms - sv->t.begin_ms, sv->t.stall_ms, written / 1e6, write_ms,
                   written / 1e3 / (write_ms + 1e-9));
    }
    save_free(sv);
    return rc;
}

int dist_checkpoint_save(const dist_ckpt_state *s, dist_ckpt_writer *w, const char *dir, int64_t iteration,
                         tb_error *err) {
    tb_rank *rk = s->rk;
    // one save in flight at a time: the previous one completes first
    if (complete(s, w, err) != 0) return -1;
    TB_RANGE_PUSH("checkpoint.save");
    double t0 = ms_now(rk);
    struct dist_ckpt_save *sv = tb_xcalloc(1, sizeof *sv, "checkpoint save");
    sv->state = *s;
    sv->s = &sv->state;
    sv->t.begin_ms = t0;
    sv->iteration = iteration;
    sv->optimizer_step = s->opts[0].t;
    int ok = ckpt_path(sv->dir, err, "%s", dir) == 0 &&
             ckpt_path(sv->final, err, "%s/iter_%07" PRId64, dir, iteration) == 0 &&
             ckpt_path(sv->tmp, err, "%s.tmp", sv->final) == 0;
    if (ok && rk->rank == 0) ok = tb_mkdir_p(dir, err) == 0 && remove_tree(sv->tmp, err) == 0 && tb_mkdir_p(sv->tmp, err) == 0;
    if (agree(rk, ok, "checkpoint directory", err) != 0) {
        save_free(sv);
        TB_RANGE_POP();
        return -1;
    }
    TB_RANGE_PUSH("checkpoint.materialize");
    materialize(sv);
    TB_RANGE_POP();
    w->in_flight = sv;
    if (s->cfg->async_save && pthread_create(&sv->thread, NULL, writer_thread, sv) == 0) {
        sv->threaded = 1;
        sv->stall_ms = ms_now(rk) - t0;
        TB_RANGE_POP();
        return 0;  // completed by the next save or dist_checkpoint_finish
    }
    TB_RANGE_PUSH("checkpoint.write");
    write_files(sv);
    TB_RANGE_POP();
    sv->stall_ms = ms_now(rk) - t0;
    int rc = complete(s, w, err);
    TB_RANGE_POP();
    return rc;
}

int dist_checkpoint_finish(const dist_ckpt_state *s, dist_ckpt_writer *w, tb_error *err) {
    return complete(s, w, err);
}

void dist_checkpoint_writer_free(dist_ckpt_writer *w) {
    if (w->in_flight) {
        struct dist_ckpt_save *sv = w->in_flight;
        if (sv->threaded) pthread_join(sv->thread, NULL);
        save_free(sv);
        w->in_flight = NULL;
    }
    json_decref(w->saves);
    w->saves = NULL;
}

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
    if (sha256_file(path, hex, &bytes, err) != 0) return NULL;
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
    tb_allocator *mem = &s->rk->mem;
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
                snprintf(name, sizeof name, "%s.%s", kinds[k], p->name);
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
    const double t0 = ms_now(s->rk);
    float bytes = 0;  // this rank's tensor bytes read (summed over the world below, MB-exact enough for a print)
    int ok = load_rank(s, dir, iteration, &bytes, err) == 0;
    if (agree(s->rk, ok, "checkpoint load", err) != 0) return -1;
    if (s->rk->world && s->rk->world_size > 1) tb_all_reduce(&s->rk->groups[TB_GROUP_WORLD], &bytes, 1, TB_RED_SUM);
    if (s->rk->rank == 0)
        printf("loaded checkpoint: %s, iteration %lld: %.1f MB read by %d rank%s in %.0f ms (%.0f MB/s)\n", dir,
               (long long)*iteration, bytes / 1e6, s->rk->world_size, s->rk->world_size == 1 ? "" : "s",
               ms_now(s->rk) - t0, bytes / 1e3 / (ms_now(s->rk) - t0 + 1e-9));
    return 0;
}
