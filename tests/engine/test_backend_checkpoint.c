// test_backend_checkpoint.c — checkpoints and tensor dumps on a device backend, without a GPU:
// the stand-in device of standin_device.h (the CPU's kernels, host = 0, counting copies, its
// blocks from a stand-in device source) takes --device cuda's staging paths
// (backend/host_stage.h), which must write and read the CPU's bits.
//
// Per layout (one rank; tp 2 with sequence parallelism on rank threads; dp 2 with the
// distributed optimizer), the same 3-step run on the CPU and on the stand-in, each saving
// after step 2 (--save, the Hugging Face export of --save-hf, --dump-tensors 2). Asserted:
//   - the shard files, the Hugging Face file and the dump's files hash (sha256) the same, and
//     metadata.json's tensors, files, layout and optimizer step are equal;
//   - the staging ran: rank 0's copies to the host during the save are one per piece it
//     wrote, during the export one per tensor (gathered), and loading copies one tensor per
//     piece loaded (3 per parameter: the weights and both moments) more than a run without;
//   - a CPU checkpoint loaded on the stand-in, and the stand-in's loaded on the CPU, train
//     step 3 to the uninterrupted CPU run's bits (loss, every weight);
//   - an --async-save on the stand-in, taken after step 2 and completed after step 3 has
//     changed the weights, writes the CPU's step-2 shards (the snapshot is taken in the
//     rank's thread).
#include <dirent.h>
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <openssl/evp.h>
#include <string.h>

#include "checkpoint/dist_checkpoint.h"
#include "checkpoint/gpt_checkpoint.h"
#include "core/fileio.h"
#include "training_dump.h"
#include "standin_device.h"
#include "tb_shell.h"
#include "tb_test.h"
#include "trainers.h"

#define ITERS 3
#define SAVE_AT 2

typedef struct job {
    tb_config cfg;
    int device;                          // 1: the stand-in table and memory
    char run_dir[900], hf[1000];         // the dump's run directory; the Hugging Face file
    char ckpt[1000];                     // where the checkpoint is moved after the run
    // rank 0's results
    double loss[ITERS + 1];              // by step; NAN where not trained here
    float *weights;                      // the final parameters (host copy)
    size_t nweights;
    int nparams;                         // rank 0's tensors
    long init_from_host;                 // copies to the device during trainer_init (the load's among them)
    long save_to_host, hf_to_host;       // copies to the host during the save and the export
    int failed;
} job;

static void fail(job *j, const tb_rank *rk, const char *what, const tb_error *err) {
    printf("    %s: %s: %s\n", rk->label, what, err->msg);
    j->failed = 1;
}

static void job_rank(tb_rank *rk, void *arg) {
    job *j = arg;
    const tb_config *cfg = rk->cfg;
    snprintf(rk->run_dir, sizeof rk->run_dir, "%s", j->run_dir);
    tb_allocator_init(rk->mem, 0, NULL, NULL);
    if (j->device) standin_bind(rk->mem);
    cpu_set_num_threads(1);
    tb_trainer tr;
    tb_error err;
    long from0 = thread_from_host;
    if (trainer_init(&tr, cfg, rk, &err) != 0) {
        fail(j, rk, "trainer_init", &err);
        tb_allocator_free_all(rk->mem);
        tb_backend_bind(NULL);
        return;
    }
    const int lead = rk->rank == 0;
    if (lead) j->init_from_host = thread_from_host - from0, j->nparams = tr.models[0].nparams;
    dist_ckpt_state s = {rk, cfg, tr.models, tr.opts, tr.nchunks};
    for (int64_t step = tr.start_iteration + 1; step <= cfg->train_iters && !j->failed; step++) {
        tb_step_result res = train_step(&tr, step);
        if (lead) j->loss[step] = res.loss;
        if (step != SAVE_AT || !cfg->save[0]) continue;
        if (training_dump_finish(tr.dump, tr.models, tr.opts, tr.nchunks, res.lr, res.loss, &err) != 0)
            fail(j, rk, "dump", &err);
        long t0 = thread_to_host;
        if (dist_checkpoint_save(&s, &tr.ckpt, cfg->save, step, &err) != 0) fail(j, rk, "save", &err);
        // a sync save is complete here; an async one completes after the next step
        if (!cfg->async_save && dist_checkpoint_finish(&s, &tr.ckpt, &err) != 0) fail(j, rk, "save", &err);
        if (lead) j->save_to_host = thread_to_host - t0;
        t0 = thread_to_host;
        if (j->hf[0] && gpt_save_safetensors(&tr.models[0], j->hf, lead, &err) != 0) fail(j, rk, "save_hf", &err);
        if (lead) j->hf_to_host = thread_to_host - t0;
    }
    if (!j->failed && dist_checkpoint_finish(&s, &tr.ckpt, &err) != 0) fail(j, rk, "async save", &err);
    if (lead) {
        j->nweights = tr.models[0].padded_parameters;
        j->weights = malloc(j->nweights * sizeof(float));
        tb_be()->copy_to_host(j->weights, tr.models[0].param_memory, j->nweights * sizeof(float));
    }
    trainer_free(&tr);
    tb_allocator_free_all(rk->mem);
    tb_backend_bind(NULL);
}

static int run(job *j) {
    for (int s = 0; s <= ITERS; s++) j->loss[s] = NAN;
    tb_config *cfg = &j->cfg;
    if (cfg->world_size > 1) return run_world(cfg, job_rank, j) != 0 || j->failed ? -1 : 0;
    config_resolve(cfg);
    tb_error err;
    if (config_validate(cfg, &err) != 0) {
        printf("    invalid config: %s\n", err.msg);
        return -1;
    }
    tb_single_rank single;
    job_rank(rank_init_single(&single, cfg), j);
    return j->failed ? -1 : 0;
}

// Runs the job; its checkpoint (saved where every job of the layout saves: the path is in the
// resolved config, which the files record) moved to j->ckpt.
static int run_and_keep(job *j) {
    int rc = run(j);
    if (rc == 0 && j->ckpt[0] && rename(j->cfg.save, j->ckpt) != 0) {
        printf("    %s -> %s: %s\n", j->cfg.save, j->ckpt, strerror(errno));
        rc = -1;
    }
    return rc;
}

// --- comparing files ---------------------------------------------------------------------

// sha256 of a file as hex; "" when it cannot be read.
static void sha256_of(const char *path, char hex[65]) {
    size_t len = 0;
    char *bytes = tb_slurp_len(path, &len);
    hex[0] = '\0';
    if (!bytes) return;
    unsigned char md[32];
    unsigned n = 0;
    EVP_Digest(bytes, len, md, &n, EVP_sha256(), NULL);
    for (int i = 0; i < 32; i++) snprintf(hex + 2 * i, 3, "%02x", md[i]);
    free(bytes);
}

// The two files hash the same (both present).
static void same_file(const char *what, const char *a, const char *b) {
    char ha[65], hb[65];
    sha256_of(a, ha), sha256_of(b, hb);
    TB_CHECK(ha[0] && !strcmp(ha, hb), "%s: %s sha256 %.16s, %s %.16s", what, a, ha[0] ? ha : "(unreadable)", b,
             hb[0] ? hb : "(unreadable)");
}

// Pieces of the checkpoint's tensors in file `file`.
static int pieces_in(const json_t *meta, const char *file) {
    int n = 0;
    const char *name;
    json_t *t;
    json_object_foreach(json_object_get(meta, "tensors"), name, t) {
        size_t i;
        json_t *piece;
        json_array_foreach(json_object_get(t, "pieces"), i, piece)
            n += !strcmp(json_string_value(json_object_get(piece, "file")), file);
    }
    return n;
}

// Two committed checkpoints of iteration SAVE_AT: every shard file and the metadata's
// description of the tensors the same. Returns the pieces in rank 0's file.
static int same_checkpoint(const char *what, const char *a, const char *b, int world) {
    char ma[1200], mb[1200], fa[1200], fb[1200];
    snprintf(ma, sizeof ma, "%s/iter_%07d/" TB_CKPT_METADATA, a, SAVE_AT);
    snprintf(mb, sizeof mb, "%s/iter_%07d/" TB_CKPT_METADATA, b, SAVE_AT);
    json_t *ja = json_load_file(ma, 0, NULL), *jb = json_load_file(mb, 0, NULL);
    TB_CHECK(ja && jb, "%s: metadata %s, %s", what, ja ? "read" : ma, jb ? "read" : mb);
    int pieces = 0;
    if (ja && jb) {
        static const char *const keys[] = {"tensors", "files", "layout", "optimizer", "iteration"};
        for (int k = 0; k < 5; k++)
            TB_CHECK(json_equal(json_object_get(ja, keys[k]), json_object_get(jb, keys[k])),
                     "%s: metadata.json's %s differ", what, keys[k]);
        pieces = pieces_in(ja, "rank-00000.safetensors");
    }
    for (int r = 0; r < world; r++) {
        snprintf(fa, sizeof fa, "%s/iter_%07d/rank-%05d.safetensors", a, SAVE_AT, r);
        snprintf(fb, sizeof fb, "%s/iter_%07d/rank-%05d.safetensors", b, SAVE_AT, r);
        same_file(what, fa, fb);
    }
    json_decref(ja);
    json_decref(jb);
    return pieces;
}

// Every file of run_dir a's tensors/ is in b's, the same.
static void same_dump(const char *what, const char *a, const char *b) {
    char da[1100], fa[1400], fb[1400];
    snprintf(da, sizeof da, "%s/tensors", a);
    DIR *d = opendir(da);
    TB_REQUIRE(d, "%s: no dump at %s", what, da);
    int files = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        snprintf(fa, sizeof fa, "%s/%s", da, e->d_name);
        snprintf(fb, sizeof fb, "%s/tensors/%s", b, e->d_name);
        same_file(what, fa, fb);
        files++;
    }
    closedir(d);
    TB_CHECK(files > 0, "%s: the dump wrote no file", what);
}

// --- the cases -----------------------------------------------------------------------------

static void small(tb_config *c) {
    config_defaults(c);
    c->num_layers = 2, c->hidden_size = 32, c->num_attention_heads = 4, c->seq_length = 16;
    c->vocab_size = 96, c->micro_batch_size = 2, c->global_batch_size = 4, c->train_iters = ITERS;
    c->attention_backend = TB_ATTENTION_FLASH, c->lr = 3e-3, c->collective_timeout = 60;
}

static void job_init(job *j, const char *layout_name, const char *role, void (*layout)(tb_config *), int device) {
    memset(j, 0, sizeof *j);
    small(&j->cfg);
    if (layout) layout(&j->cfg);
    j->device = device;
    tb_tmp_path(j->run_dir, sizeof j->run_dir, "backend-ckpt-%s-%s", layout_name, role);
    tb_output sh = {0};
    tb_run(&sh, NULL, "rm -rf '%s' && mkdir -p '%s'", j->run_dir, j->run_dir);
    tb_output_free(&sh);
}

// A job that saves after step SAVE_AT: its checkpoint (moved there), export and dump in its
// run directory.
static void saves(job *j, const char *layout_name) {
    tb_tmp_path(j->cfg.save, sizeof j->cfg.save, "backend-ckpt-%s-saving", layout_name);
    snprintf(j->ckpt, sizeof j->ckpt, "%s/ckpt", j->run_dir);
    snprintf(j->hf, sizeof j->hf, "%s/model.safetensors", j->run_dir);
    snprintf(j->cfg.dump_tensors, sizeof j->cfg.dump_tensors, "%d", SAVE_AT);
}

static void same_training(const char *what, const job *a, const job *b, int from_step) {
    for (int s = from_step; s <= ITERS; s++)
        TB_CHECK(a->loss[s] == b->loss[s], "%s: step %d loss %.9g vs %.9g", what, s, a->loss[s], b->loss[s]);
    TB_CHECK(a->weights && b->weights && a->nweights == b->nweights &&
                 memcmp(a->weights, b->weights, a->nweights * sizeof(float)) == 0,
             "%s: the final weights differ", what);
}

static void layout_case(const char *name, void (*layout)(tb_config *), int async_too) {
    job *cpu = calloc(1, sizeof *cpu), *dev = calloc(1, sizeof *dev);
    job_init(cpu, name, "cpu", layout, 0), saves(cpu, name);
    job_init(dev, name, "dev", layout, 1), saves(dev, name);
    TB_REQUIRE(run_and_keep(cpu) == 0, "%s: the CPU run", name);
    TB_REQUIRE(run_and_keep(dev) == 0, "%s: the stand-in device run", name);
    const int world = cpu->cfg.world_size;
    char what[160];
    snprintf(what, sizeof what, "%s: the device's run", name);
    same_training(what, cpu, dev, 1);
    snprintf(what, sizeof what, "%s: --save", name);
    const int pieces = same_checkpoint(what, cpu->ckpt, dev->ckpt, world);
    snprintf(what, sizeof what, "%s: --save-hf", name);
    same_file(what, cpu->hf, dev->hf);
    snprintf(what, sizeof what, "%s: --dump-tensors", name);
    same_dump(what, cpu->run_dir, dev->run_dir);
    printf("    %s: rank 0 wrote %d pieces; staged to the host: save %ld, save-hf %ld (%d tensors)\n", name, pieces,
           dev->save_to_host, dev->hf_to_host, dev->nparams);
    TB_CHECK(pieces > 0 && dev->save_to_host == pieces, "%s: the save staged %ld pieces to the host, rank 0 wrote %d",
             name, dev->save_to_host, pieces);
    TB_CHECK(dev->hf_to_host == dev->nparams, "%s: the export staged %ld tensors to the host, the model has %d", name,
             dev->hf_to_host, dev->nparams);
    TB_CHECK(cpu->save_to_host == 0 && cpu->hf_to_host == 0, "%s: the CPU copied nothing through the stand-in", name);

    // each checkpoint loaded on the other backend, trained on: the CPU's bits
    job *dev_loads = calloc(1, sizeof *dev_loads), *cpu_loads = calloc(1, sizeof *cpu_loads);
    job_init(dev_loads, name, "dev-loads-cpu", layout, 1);
    job_init(cpu_loads, name, "cpu-loads-dev", layout, 0);
    snprintf(dev_loads->cfg.load, sizeof dev_loads->cfg.load, "%s", cpu->ckpt);
    snprintf(cpu_loads->cfg.load, sizeof cpu_loads->cfg.load, "%s", dev->ckpt);
    TB_REQUIRE(run(dev_loads) == 0 && run(cpu_loads) == 0, "%s: the resumed runs", name);
    snprintf(what, sizeof what, "%s: the CPU's checkpoint resumed on the device", name);
    same_training(what, cpu, dev_loads, SAVE_AT + 1);
    snprintf(what, sizeof what, "%s: the device's checkpoint resumed on the CPU", name);
    same_training(what, cpu, cpu_loads, SAVE_AT + 1);
    const long loaded = dev_loads->init_from_host - dev->init_from_host;
    printf("    %s: loading staged %ld tensors to the device\n", name, loaded);
    TB_CHECK(loaded == 3L * dev->nparams, "%s: the load staged %ld tensors to the device, want 3 x %d", name, loaded,
             dev->nparams);

    if (async_too) {  // the snapshot: taken after step 2, written after step 3 changed the weights
        job *as = calloc(1, sizeof *as);
        job_init(as, name, "dev-async", layout, 1), saves(as, name);
        as->cfg.async_save = 1;
        as->hf[0] = '\0', as->cfg.dump_tensors[0] = '\0';
        TB_REQUIRE(run_and_keep(as) == 0, "%s: the async run", name);
        snprintf(what, sizeof what, "%s: --async-save on the device", name);
        same_checkpoint(what, cpu->ckpt, as->ckpt, world);
        TB_CHECK(as->save_to_host == pieces, "%s: the async snapshot copied %ld pieces, rank 0 wrote %d", name,
                 as->save_to_host, pieces);
        free(as->weights), free(as);
    }
    job *all[] = {cpu, dev, dev_loads, cpu_loads};
    for (int i = 0; i < 4; i++) free(all[i]->weights), free(all[i]);
}

static void tp2_sp(tb_config *c) {
    c->world_size = 2, c->tensor_model_parallel_size = 2, c->sequence_parallel = 1;
}
static void dp2_distopt(tb_config *c) {
    c->world_size = 2, c->use_distributed_optimizer = 1;
}

TB_TEST(one_rank_checkpoints_on_a_device_table_are_the_cpus) { layout_case("one rank", NULL, 1); }
TB_TEST(tp2_sp_checkpoints_on_a_device_table_are_the_cpus) { layout_case("tp2 sp", tp2_sp, 0); }
TB_TEST(dp2_distributed_optimizer_checkpoints_on_a_device_table_are_the_cpus) {
    layout_case("dp2 dist-opt", dp2_distopt, 1);
}

// The config no longer refuses them on --device cuda (config.c's device rules).
TB_TEST(the_config_takes_checkpoints_and_dumps_on_cuda) {
    tb_config c;
    small(&c);
    c.device = TB_DEVICE_CUDA;
    snprintf(c.save, sizeof c.save, "ckpt");
    snprintf(c.load, sizeof c.load, "ckpt");
    snprintf(c.save_hf, sizeof c.save_hf, "model.safetensors");
    snprintf(c.dump_tensors, sizeof c.dump_tensors, "1");
    c.async_save = 1;
    config_resolve(&c);
    tb_error err;
    TB_CHECK(config_validate(&c, &err) == 0, "--device cuda with save, load, save_hf, dump_tensors: %s", err.msg);
}

int main(void) {
    standin_init();
    TB_RUN(the_config_takes_checkpoints_and_dumps_on_cuda);
    TB_RUN(one_rank_checkpoints_on_a_device_table_are_the_cpus);
    TB_RUN(tp2_sp_checkpoints_on_a_device_table_are_the_cpus);
    TB_RUN(dp2_distributed_optimizer_checkpoints_on_a_device_table_are_the_cpus);
    return tb_test_summary();
}
