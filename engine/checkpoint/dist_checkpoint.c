// dist_checkpoint.c — the sharded save (dist_checkpoint.h); the resharding load: dist_checkpoint_load.c.
#include "checkpoint/dist_checkpoint.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
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


// A path under the checkpoint directory; a longer one than CKPT_PATH is an error, not cut.
int ckpt_path(char *out, tb_error *err, const char *fmt, ...) {
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
int ckpt_agree(const tb_rank *rk, int ok, const char *what, tb_error *err) {
    if (!rk->world || rk->world_size == 1) return ok ? 0 : -1;
    float failed = ok ? 0.0f : (float)(rk->rank + 1);
    tb_all_reduce((tb_group *)&rk->groups[TB_GROUP_WORLD], &failed, 1, TB_RED_MAX);
    if (failed == 0.0f) return 0;
    if (ok) tb_fail(err, "%s: rank %d failed (its error is on its own output)", what, (int)failed - 1);
    return -1;
}

static const tb_group *dp_group(const tb_rank *rk) { return rk->world ? &rk->groups[TB_GROUP_DP_CP] : NULL; }

// --- files ------------------------------------------------------------------------------

int ckpt_sha256_file(const char *path, char hex[65], uint64_t *bytes, tb_error *err) {
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

// --- save -------------------------------------------------------------------------------

double ckpt_ms_now(const tb_rank *rk) {
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
    phase_end(t, CKPT_METADATA, ckpt_ms_now(s->rk), 0);
    phase_begin(t, CKPT_COMMIT, ckpt_ms_now(s->rk));
    // the checkpoint becomes visible whole: an older one of the same iteration goes first
    char old[CKPT_PATH];
    if (rc == 0) rc = ckpt_path(old, err, "%s.old", final);
    if (rc == 0) rc = fsync_dir(tmp, err);
    if (rc == 0) rc = tb_remove_tree(old, err);
    if (rc == 0 && access(final, F_OK) == 0 && rename(final, old) != 0)
        rc = tb_fail(err, "%s: cannot move aside (%s)", final, strerror(errno));
    if (rc == 0 && rename(tmp, final) != 0) rc = tb_fail(err, "%s: cannot commit as %s (%s)", tmp, final, strerror(errno));
    if (rc == 0) rc = fsync_dir(dir, err);
    if (rc == 0) rc = tb_remove_tree(old, err);
    if (rc == 0) {
        char text[32];
        int n = snprintf(text, sizeof text, "%" PRId64 "\n", iteration);
        rc = ckpt_path(path, err, "%s/" TB_CKPT_LATEST, dir);
        if (rc == 0) rc = tb_write_file_atomic(path, text, (size_t)n, err);
    }
    phase_end(t, CKPT_COMMIT, ckpt_ms_now(s->rk), 0);
    return rc;
}

// --- the save's phases --------------------------------------------------------------------

static const char *const phase_names[CKPT_NPHASES] = {"materialize", "serialize", "write", "fsync",
                                                      "barrier",     "metadata",  "commit"};

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
            tb_free(sv->s->rk->mem, sv->moments[2 * c]), tb_free(sv->s->rk->mem, sv->moments[2 * c + 1]);
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
    phase_begin(&sv->t, CKPT_MATERIALIZE, ckpt_ms_now(rk));
    sv->moments = tb_xcalloc(2 * (size_t)s->nchunks, sizeof *sv->moments, "checkpoint moments");
    for (int c = 0; c < s->nchunks; c++) {
        const tb_adamw *o = &s->opts[c];
        for (int k = 0; k < 2; k++) {
            const float *mine = k ? o->v : o->m;
            if (!o->sharded) {
                sv->moments[2 * c + k] = (float *)mine;
                continue;
            }
            sv->moments[2 * c + k] = tb_alloc(rk->mem, TB_MEM_WORKSPACE,
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
                snprintf(name, sizeof name, "%s.%s", ckpt_kinds[k], p->name);
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
        sv->staging = tb_host_buffer(rk->mem, floats * sizeof(float), "checkpoint staging");
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
    phase_end(&sv->t, CKPT_MATERIALIZE, ckpt_ms_now(rk), (int64_t)(floats * sizeof(float)));
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
    double sec[3] = {0, 0, 0}, t0 = ckpt_ms_now(rk);
    if (rk->world) tb_drills_slow_write(&rk->world->drills, rk->rank);  // --debug-slow-write
    double slept = ckpt_ms_now(rk) - t0;
    sv->ok = ckpt_path(path, &sv->err, "%s/%s", sv->tmp, file) == 0 &&
             (sv->n == 0 || tb_safetensors_write_from(path, sv->entries, sv->n, NULL,
                                                      sv->on_device ? &(tb_st_source){fetch_piece, sv} : NULL, sec,
                                                      &sv->err) == 0);
    // phases as they ran: serialize, write (the drill's delay is the write's), fsync
    sv->t.start_ms[CKPT_SERIALIZE] = t0;
    sv->t.end_ms[CKPT_SERIALIZE] = sv->t.start_ms[CKPT_WRITE] = t0 + sec[0] * 1e3;
    sv->t.end_ms[CKPT_WRITE] = sv->t.start_ms[CKPT_FSYNC] = t0 + slept + (sec[0] + sec[1]) * 1e3;
    sv->t.end_ms[CKPT_FSYNC] = t0 + slept + (sec[0] + sec[1] + sec[2]) * 1e3;
    if (sv->ok && sv->n) sv->ok = ckpt_sha256_file(path, hex, &bytes, &sv->err) == 0;
    sv->t.bytes[CKPT_WRITE] = (int64_t)bytes;
    if (sv->ok) {
        json_t *part = json_pack("{s:o, s:{s:s, s:I}, s:O}", "file", sv->n ? json_string(file) : json_null(), "digest",
                                 "sha256", hex, "bytes", (json_int_t)bytes, "pieces", sv->pieces);
        sv->ok = ckpt_path(path, &sv->err, "%s/rank-%05d.json", sv->tmp, rk->rank) == 0 &&
                 tb_write_json_atomic(path, part, &sv->err) == 0;
        json_decref(part);
    }
    sv->t.arrival_ms = ckpt_ms_now(rk);
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
    if (sv->staging) tb_host_buffer_free(rk->mem, sv->staging);
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
    double wait0 = ckpt_ms_now(rk);
    if (sv->threaded) {
        pthread_join(sv->thread, NULL);
        if (w->writers_run_delay_s >= 0)
            w->writers_run_delay_s = sv->run_delay_s < 0 ? -1 : w->writers_run_delay_s + sv->run_delay_s;
    }
    TB_RANGE_PUSH("checkpoint.barrier");
    phase_begin(&sv->t, CKPT_BARRIER, sv->t.arrival_ms);
    int rc = ckpt_agree(rk, sv->ok, "checkpoint shards", sv->ok ? err : (tb_error *)memcpy(err, &sv->err, sizeof *err));
    phase_end(&sv->t, CKPT_BARRIER, ckpt_ms_now(rk), 0);
    TB_RANGE_POP();
    if (rc == 0) {
        int ok = 1;
        if (rk->rank == 0) {
            TB_RANGE_PUSH("checkpoint.metadata");
            phase_begin(&sv->t, CKPT_METADATA, ckpt_ms_now(rk));
            ok = commit(s, sv->dir, sv->tmp, sv->final, sv->iteration, sv->optimizer_step, &sv->t, err) == 0;
            TB_RANGE_POP();
        }
        rc = ckpt_agree(rk, ok, "checkpoint commit", err);
    }
    sv->t.done_ms = ckpt_ms_now(rk);
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
    double t0 = ckpt_ms_now(rk);
    struct dist_ckpt_save *sv = tb_xcalloc(1, sizeof *sv, "checkpoint save");
    sv->state = *s;
    sv->s = &sv->state;
    sv->t.begin_ms = t0;
    sv->iteration = iteration;
    sv->optimizer_step = s->opts[0].t;
    int ok = ckpt_path(sv->dir, err, "%s", dir) == 0 &&
             ckpt_path(sv->final, err, "%s/iter_%07" PRId64, dir, iteration) == 0 &&
             ckpt_path(sv->tmp, err, "%s.tmp", sv->final) == 0;
    if (ok && rk->rank == 0)
        ok = tb_mkdir_p(dir, err) == 0 && tb_remove_tree(sv->tmp, err) == 0 && tb_mkdir_p(sv->tmp, err) == 0;
    if (ckpt_agree(rk, ok, "checkpoint directory", err) != 0) {
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
        sv->stall_ms = ckpt_ms_now(rk) - t0;
        TB_RANGE_POP();
        return 0;  // completed by the next save or dist_checkpoint_finish
    }
    TB_RANGE_PUSH("checkpoint.write");
    write_files(sv);
    TB_RANGE_POP();
    sv->stall_ms = ckpt_ms_now(rk) - t0;
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
