// test_cuda_device.c — the CUDA backend's host side that runs without a GPU: the `--device`
// flag (a clear refusal naming the flag, exit non-zero, never a silent CPU run) and the device
// allocator's accounting (categories, peaks, caching, the cap and the OOM report, also when
// the device refuses an allocation) over a host-memory stand-in for cudaMalloc. With a GPU
// it also drives the allocator over real cudaMalloc to an OOM under a cap.
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "backend/cuda/cublaslt_dl.h"
#include "backend/cuda/cuda_device.h"
#include "backend/cuda/device_memory.h"
#include "config/config.h"
#include "core/error.h"
#include "runtime/memory.h"
#include "tb_shell.h"
#include "tb_test.h"

#define PRETRAIN TB_BIN_DIR "/pretrain_gpt"
#define TINY "--num-layers 1 --hidden-size 16 --num-attention-heads 2 --seq-length 8 --vocab-size 64 --train-iters 1"

static tb_output sh;

// The GPUs visible, asked in a child: CUDA initialised in this process would not survive the
// fork() of the tests below that allocate on the device (a forked child's first CUDA call fails
// with cudaErrorInitializationError).
static int device_count_in_child(char *why, size_t len) {
    int fd[2];
    if (pipe(fd) != 0) return snprintf(why, len, "pipe: %s", strerror(errno)), -1;
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        close(fd[0]);
        char w[256] = "";
        int n = tb_cuda_device_count(w, sizeof w);
        dprintf(fd[1], "%d %s", n, w);
        _exit(0);
    }
    close(fd[1]);
    char buf[320];
    size_t got = 0;
    ssize_t r;
    while (got + 1 < sizeof buf && (r = read(fd[0], buf + got, sizeof buf - 1 - got)) > 0) got += (size_t)r;
    buf[got] = 0;
    close(fd[0]);
    waitpid(pid, NULL, 0);
    int n = -1, at = 0;
    if (sscanf(buf, "%d %n", &n, &at) != 1) return snprintf(why, len, "the probe child said '%.200s'", buf), -1;
    snprintf(why, len, "%s", buf + at);
    return n;
}

// Without the backend or a GPU, --device cuda is refused before any rank starts (the
// assertions name what this machine lacks; with a GPU the run is test_cuda_training's).
TB_TEST(device_cuda_is_refused_naming_the_flag) {
    char why[256] = "";
    if (device_count_in_child(why, sizeof why) > 0) {
        printf("  SKIP device_cuda_is_refused_naming_the_flag: a GPU is visible (test_cuda_training runs on it)\n");
        return;
    }
    char run_dir[512];
    tb_tmp_path(run_dir, sizeof run_dir, "device-cuda");
    int rc = tb_run(&sh, TB_SOURCE_DIR, "'%s' " TINY " --attention-backend flash --run-dir '%s' --device cuda",
                    PRETRAIN, run_dir);
    TB_CHECK(rc == TB_EXIT_USAGE, "exit %d (expected %d), stderr:\n%s", rc, TB_EXIT_USAGE, sh.err);
    TB_CHECK(strstr(sh.err, "--device cuda: "), "stderr names the flag:\n%s", sh.err);
    if (tb_cuda_built()) TB_CHECK(strstr(sh.err, "no GPU is visible"), "this build says no GPU is visible:\n%s", sh.err);
    else TB_CHECK(strstr(sh.err, "no CUDA backend"), "this build says it lacks the backend:\n%s", sh.err);
    TB_CHECK(!strstr(sh.out, "step"), "nothing trained:\n%s", sh.out);
    TB_CHECK(!tb_exists(run_dir), "no run directory was made at %s", run_dir);
    // pipeline parallelism passes the config on --device cuda (it runs over NCCL): what stops
    // it here is the missing GPU (or backend), not a "not supported yet"
    char pp2[512];
    tb_flags_merge(pp2, sizeof pp2, TINY,
                   "--attention-backend flash --device cuda --world-size 2 --pipeline-model-parallel-size 2 "
                   "--num-layers 2 --micro-batch-size 1 --global-batch-size 2");
    rc = tb_run(&sh, TB_SOURCE_DIR, "'%s' %s", PRETRAIN, pp2);
    TB_CHECK(rc == TB_EXIT_USAGE && strstr(sh.err, "--device cuda: ") && !strstr(sh.err, "not supported yet"),
             "pp 2 on --device cuda: exit %d, stderr:\n%s", rc, sh.err);
    // bench_gpt's trainer is the CPU's: refused there, never run on the CPU instead
    rc = tb_run(&sh, TB_SOURCE_DIR, "'%s' " TINY " --attention-backend flash --device cuda", TB_BIN_DIR "/bench_gpt");
    TB_CHECK(rc == TB_EXIT_USAGE && strstr(sh.err, "--device cuda: not supported yet"), "bench_gpt: exit %d\n%s", rc,
             sh.err);
}

// What the CUDA backend does not run yet, and the precisions, are refused by the config on any
// machine, each naming the flag's setting and "not supported yet" (config.c).
TB_TEST(device_and_precision_rules) {
    static const struct {
        const char *flags, *expect;
    } cases[] = {
        {"--bf16", "bf16 with device cpu: not supported yet on --device cpu"},
        {"--fp16", "fp16 with device cpu: not supported yet on --device cpu"},
        {"--bf16 --fp16 --device cuda --attention-backend flash", "bf16 and fp16 are exclusive"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        int rc = tb_run(&sh, TB_SOURCE_DIR, "'%s' " TINY " %s", PRETRAIN, cases[i].flags);
        TB_CHECK(rc == TB_EXIT_USAGE && strstr(sh.err, cases[i].expect), "%s: exit %d, expected '%s' in:\n%s",
                 cases[i].flags, rc, cases[i].expect, sh.err);
        TB_CHECK(!strstr(sh.out, "step"), "%s: nothing trained:\n%s", cases[i].flags, sh.out);
    }
}

// Context parallelism runs on cuda, both exchanges: the config takes the all-gather and the ring.
TB_TEST(context_parallel_all_gather_passes_the_config_on_cuda) {
    tb_config c;
    config_defaults(&c);
    c.device = TB_DEVICE_CUDA, c.attention_backend = TB_ATTENTION_FLASH;
    c.world_size = 2, c.context_parallel_size = 2, c.seq_length = 16;
    config_resolve(&c);
    tb_error err = {0};
    TB_CHECK(config_validate(&c, &err) == 0, "cp 2, all_gather, device cuda: %s", err.msg);
    c.cp_comm_type = TB_CP_P2P;
    TB_CHECK(config_validate(&c, &err) == 0, "cp 2, p2p, device cuda: %s", err.msg);
}

// Head sizes up to 1024 run on cuda (the attention kernel's instances of 8, 16 and 32 channels
// per lane); 1100 is refused by name and number.
TB_TEST(head_sizes_up_to_1024_pass_the_config_on_cuda) {
    tb_config c;
    config_defaults(&c);
    c.device = TB_DEVICE_CUDA, c.attention_backend = TB_ATTENTION_FLASH;
    c.hidden_size = 2048, c.num_attention_heads = 2;
    config_resolve(&c);
    tb_error err = {0};
    TB_CHECK(config_validate(&c, &err) == 0, "head size 1024, device cuda: %s", err.msg);
    c.hidden_size = 2200;
    TB_CHECK(config_validate(&c, &err) != 0 && strstr(err.msg, "device cuda with head size 1100: not supported yet"),
             "head size 1100, device cuda: %s", err.msg);
}

TB_TEST(device_cpu_trains_and_bad_values_are_refused) {
    char run_dir[512];
    tb_tmp_path(run_dir, sizeof run_dir, "device-cpu");
    int rc = tb_run(&sh, TB_SOURCE_DIR, "'%s' " TINY " --run-dir '%s' --device cpu", PRETRAIN, run_dir);
    TB_CHECK(rc == 0, "--device cpu trains: exit %d, stderr:\n%s", rc, sh.err);
    tb_run(&sh, NULL, "rm -rf '%s'", run_dir);
    rc = tb_run(&sh, TB_SOURCE_DIR, "'%s' " TINY " --device tpu", PRETRAIN);
    TB_CHECK(rc == TB_EXIT_USAGE, "--device tpu: exit %d, stderr:\n%s", rc, sh.err);
    TB_CHECK(strstr(sh.err, "--device") && strstr(sh.err, "tpu"), "names the flag and the value:\n%s", sh.err);
}

// --- the allocator over host memory ----------------------------------------------------

typedef struct host_raw {
    size_t limit;     // bytes the stand-in "device" holds at most
    size_t held;
    int allocs, releases;
} host_raw;

// Each stand-in block is preceded by its size, so that release gives the bytes back.
static int host_alloc(void *ctx, void **p, size_t bytes, char *why, size_t why_len) {
    host_raw *h = ctx;
    if (h->held + bytes > h->limit) {
        snprintf(why, why_len, "out of memory (stand-in device of %zu bytes)", h->limit);
        return -1;
    }
    size_t *block = malloc(sizeof(size_t) * 2 + bytes);
    block[0] = bytes;
    *p = block + 2;
    h->held += bytes;
    h->allocs++;
    return 0;
}

static void host_release(void *ctx, void *p) {
    host_raw *h = ctx;
    size_t *block = (size_t *)p - 2;
    h->held -= block[0];
    h->releases++;
    free(block);
}

static tb_device_raw host_device(host_raw *h) { return (tb_device_raw){host_alloc, host_release, h, "cudaMalloc"}; }

TB_TEST(device_allocator_counts_by_category_and_caches) {
    host_raw h = {.limit = 1 << 20};
    tb_device_allocator a;
    tb_device_allocator_init(&a, 0, 0, host_device(&h), NULL, NULL);
    tb_device_allocator_set_caching(&a, 1);
    void *w = tb_device_alloc(&a, TB_MEM_PARAMS, 4096, "wte");
    void *x = tb_device_alloc(&a, TB_MEM_ACTIVATIONS, 1000, "layer0.ln1");
    TB_CHECK(a.stats.current[TB_MEM_PARAMS] == 4096 && a.stats.current[TB_MEM_ACTIVATIONS] == 1000,
             "params %zu activations %zu", a.stats.current[TB_MEM_PARAMS], a.stats.current[TB_MEM_ACTIVATIONS]);
    tb_device_free(&a, x);
    TB_CHECK(a.stats.current[TB_MEM_ACTIVATIONS] == 0 && a.stats.peak[TB_MEM_ACTIVATIONS] == 1000,
             "freed: current %zu peak %zu", a.stats.current[TB_MEM_ACTIVATIONS], a.stats.peak[TB_MEM_ACTIVATIONS]);
    TB_CHECK(a.stats.cached[TB_MEM_ACTIVATIONS] == 1000 && a.stats.reserved == 5096,
             "cached %zu reserved %zu", a.stats.cached[TB_MEM_ACTIVATIONS], a.stats.reserved);
    void *y = tb_device_alloc(&a, TB_MEM_WORKSPACE, 1000, "attn scratch");
    TB_CHECK(y == x && h.allocs == 2, "same size reuses the cached block (allocs %d)", h.allocs);
    TB_CHECK(a.stats.cached[TB_MEM_ACTIVATIONS] == 0 && a.stats.current[TB_MEM_WORKSPACE] == 1000,
             "the block changes category: cached %zu workspace %zu", a.stats.cached[TB_MEM_ACTIVATIONS],
             a.stats.current[TB_MEM_WORKSPACE]);
    tb_device_free(&a, y);
    tb_device_allocator_release_cache(&a);
    TB_CHECK(h.releases == 1 && a.stats.reserved == 4096, "release_cache returns it: releases %d reserved %zu",
             h.releases, a.stats.reserved);
    tb_device_free(&a, w);
    tb_device_allocator_destroy(&a);
    TB_CHECK(h.releases == 2 && a.stats.total_current == 0 && a.stats.reserved == 0, "all returned");
}

// --- the tagged allocator (runtime/memory.h) over a device source: what a rank's tensors use
// under --device cuda, here with the host stand-in for cudaMalloc ------------------------

static void host_zero(void *ctx, void *p, size_t bytes) { memset(p, 0, bytes); }
static tb_mem_device stand_in(host_raw *h) { return (tb_mem_device){"cudaMalloc", host_alloc, host_release, host_zero, h}; }

TB_TEST(tagged_allocator_on_a_device_source) {
    host_raw h = {.limit = 1 << 20};
    tb_mem_device dev = stand_in(&h);
    tb_allocator a;
    tb_allocator_init(&a, 0, NULL, NULL);
    tb_allocator_set_device(&a, &dev);
    tb_allocator_set_caching(&a, 1);
    unsigned char *w = tb_calloc(&a, TB_MEM_PARAMS, 4096, "wte");
    TB_CHECK(h.allocs == 1 && ((size_t *)w)[-2] == 4096, "the block is the source's (allocs %d)", h.allocs);
    int zero = 1;
    for (int i = 0; i < 4096; i++) zero &= w[i] == 0;
    TB_CHECK(zero, "tb_calloc zeroes through the source");
    void *x = tb_alloc(&a, TB_MEM_ACTIVATIONS, 1000, "layer.0 activations");
    TB_CHECK(a.stats.current[TB_MEM_PARAMS] == 4096 && a.stats.current[TB_MEM_ACTIVATIONS] == 1000 &&
                 a.stats.total_peak == 5096,
             "params %zu activations %zu peak %zu", a.stats.current[TB_MEM_PARAMS],
             a.stats.current[TB_MEM_ACTIVATIONS], a.stats.total_peak);
    tb_free(&a, x);  // found by its pointer: the header is on the host
    TB_CHECK(a.stats.cached[TB_MEM_ACTIVATIONS] == 1000 && a.stats.reserved == 5096, "cached %zu reserved %zu",
             a.stats.cached[TB_MEM_ACTIVATIONS], a.stats.reserved);
    void *y = tb_alloc(&a, TB_MEM_WORKSPACE, 1000, "attention scratch");
    TB_CHECK(y == x && h.allocs == 2, "the cached block is reused (allocs %d)", h.allocs);
    tb_allocator_free_all(&a);
    tb_allocator_release_cache(&a);
    TB_CHECK(h.releases == 2 && h.held == 0 && a.stats.total_current == 0 && a.stats.reserved == 0,
             "everything back to the source: releases %d held %zu", h.releases, h.held);
}

static void report_device_failure(void *owner, const tb_allocator *a, tb_mem_category c, size_t bytes, const char *what) {
    fprintf(stderr, "oom %zu bytes for %s (%s): %s; reserved %zu cached %zu\n", bytes, what, tb_mem_category_name(c),
            a->device_failure, a->stats.reserved, a->stats.cached[TB_MEM_ACTIVATIONS]);
}

static void tagged_device_refuses(void) {
    static host_raw h = {.limit = 10000};
    static tb_mem_device dev;
    dev = stand_in(&h);
    tb_allocator a;
    tb_allocator_init(&a, 0, report_device_failure, NULL);
    tb_allocator_set_device(&a, &dev);
    tb_allocator_set_caching(&a, 1);
    tb_free(&a, tb_alloc(&a, TB_MEM_ACTIVATIONS, 3000, "logits"));  // cached, given back before the retry
    tb_alloc(&a, TB_MEM_GRADS, 7000, "gradients");
    tb_alloc(&a, TB_MEM_GRADS, 7000, "shard grads");
}

static void tagged_over_cap(void) {
    static host_raw h = {.limit = 1 << 20};
    static tb_mem_device dev;
    dev = stand_in(&h);
    tb_allocator a;
    tb_allocator_init(&a, 8192, report_device_failure, NULL);
    tb_allocator_set_device(&a, &dev);
    tb_alloc(&a, TB_MEM_PARAMS, 6000, "parameters");
    tb_alloc(&a, TB_MEM_OPTIMIZER, 4000, "adam exp_avg");
}

// Runs fn in a child; returns its exit status, its stderr in err.
static int in_child(void (*fn)(void), char *err, size_t len) {
    int fd[2];
    if (pipe(fd) != 0) return -1;
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        dup2(fd[1], 2);
        close(fd[0]);
        fn();
        _exit(0);
    }
    close(fd[1]);
    size_t n = 0;
    ssize_t r;
    while (n + 1 < len && (r = read(fd[0], err + n, len - 1 - n)) > 0) n += (size_t)r;
    err[n] = 0;
    close(fd[0]);
    int st = 0;
    waitpid(pid, &st, 0);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static void over_cap(void) {
    static host_raw h = {.limit = 1 << 20};
    tb_device_allocator a;
    tb_device_allocator_init(&a, 3, 8192, host_device(&h), NULL, NULL);
    tb_device_alloc(&a, TB_MEM_PARAMS, 6000, "layer0.qkv.weight");
    tb_device_alloc(&a, TB_MEM_OPTIMIZER, 4000, "adam m");
}

static void device_refuses(void) {
    static host_raw h = {.limit = 10000};
    tb_device_allocator a;
    tb_device_allocator_init(&a, 1, 0, host_device(&h), NULL, NULL);
    tb_device_allocator_set_caching(&a, 1);
    void *p = tb_device_alloc(&a, TB_MEM_ACTIVATIONS, 3000, "logits");
    tb_device_free(&a, p);  // cached: given back before the retry, which still fails
    tb_device_alloc(&a, TB_MEM_GRADS, 7000, "grads bucket 0");
    tb_device_alloc(&a, TB_MEM_GRADS, 7000, "grads bucket 1");
}

TB_TEST(device_allocator_oom_reports) {
    char err[4096];
    int rc = in_child(over_cap, err, sizeof err);
    TB_CHECK(rc == TB_EXIT_OUT_OF_MEMORY, "over the cap: exit %d\n%s", rc, err);
    TB_CHECK(strstr(err, "CUDA out of memory on device 3: 4000 bytes for adam m (optimizer): over the cap of 8192"),
             "names the request and the cap:\n%s", err);
    TB_CHECK(strstr(err, "layer0.qkv.weight") && strstr(err, "params"), "lists what holds the memory:\n%s", err);
    rc = in_child(device_refuses, err, sizeof err);
    TB_CHECK(rc == TB_EXIT_OUT_OF_MEMORY, "device refuses: exit %d\n%s", rc, err);
    TB_CHECK(strstr(err, "7000 bytes for grads bucket 1 (grads): cudaMalloc: out of memory (stand-in device"),
             "names cudaMalloc's reason:\n%s", err);
    TB_CHECK(strstr(err, "reserved 7000 (cached 0)"), "the cache was given back before the retry:\n%s", err);
}

TB_TEST(tagged_allocator_device_oom) {
    char err[4096];
    int rc = in_child(tagged_device_refuses, err, sizeof err);
    TB_CHECK(rc == TB_EXIT_OUT_OF_MEMORY, "device refuses: exit %d\n%s", rc, err);
    TB_CHECK(strstr(err, "oom 7000 bytes for shard grads (grads): cudaMalloc: out of memory (stand-in device of 10000 "
                         "bytes); reserved 7000 cached 0"),
             "names the device's reason, after giving the cache back:\n%s", err);
    rc = in_child(tagged_over_cap, err, sizeof err);
    TB_CHECK(rc == TB_EXIT_OUT_OF_MEMORY && strstr(err, "oom 4000 bytes for adam exp_avg (optimizer): ;"),
             "over the cap (no device reason): exit %d\n%s", rc, err);
}

// --- on a GPU: real cudaMalloc under a cap ---------------------------------------------

static void gpu_over_cap(void) {
    tb_device_allocator a;
    tb_device_allocator_init(&a, 0, (size_t)64 << 20, tb_device_raw_cuda(), NULL, NULL);
    void *p = tb_device_alloc(&a, TB_MEM_PARAMS, (size_t)48 << 20, "params");
    if (!p) _exit(9);
    tb_device_alloc(&a, TB_MEM_ACTIVATIONS, (size_t)32 << 20, "activations");
}

static void gpu_too_big(void) {
    tb_device_allocator a;
    tb_device_allocator_init(&a, 0, 0, tb_device_raw_cuda(), NULL, NULL);
    tb_device_alloc(&a, TB_MEM_WORKSPACE, (size_t)1 << 50, "a petabyte");
}

// In a child: cuBLASLt not loaded until it is asked for, then loaded and called through the table.
static void cublaslt_on_demand(void) {
#ifdef TB_HAVE_CUDA_BACKEND
    if (tb_cublaslt_loaded()) fprintf(stderr, "loaded before it was asked for\n"), _exit(2);
    tb_error err;
    const tb_cublaslt *lt = tb_cublaslt_load(&err);
    if (!lt) fprintf(stderr, "%s\n", err.msg), _exit(3);
    // called through the table: the status string cuBLASLt itself keeps (no GPU needed)
    const char *ok = lt->GetStatusString(CUBLAS_STATUS_SUCCESS);
    if (!ok || strcmp(ok, "success")) fprintf(stderr, "status string '%s'\n", ok ? ok : "(null)"), _exit(4);
    if (!tb_cublaslt_loaded() || tb_cublaslt_get() != lt) fprintf(stderr, "not loaded after the load\n"), _exit(5);
#endif
}

// The engine starts without cuBLASLt: the library registers its kernels as it loads (0.3-0.4 s
// of every process here), so the backend loads it with the process's first device context
// (tb_cuda_context_init, which needs a GPU), and a CPU run never does. Checked of the real
// binary (the loader's own account of what it maps) and, in a process linked as the engine is,
// the load itself.
TB_TEST(cublaslt_is_not_loaded_at_start_and_loads_on_demand) {
    if (!tb_cuda_built()) {
        printf("  SKIP cublaslt_is_not_loaded_at_start_and_loads_on_demand: no CUDA backend\n");
        return;
    }
    int rc = tb_run(&sh, TB_SOURCE_DIR, "LD_DEBUG=files '%s' --help", PRETRAIN);
    TB_CHECK(rc == 0 && strstr(sh.err, "file=libopenblas") && !strstr(sh.err, "libcublasLt"),
             "pretrain_gpt --help: exit %d, the files the loader mapped:\n%s", rc, sh.err);
    char err[4096];
    rc = in_child(cublaslt_on_demand, err, sizeof err);
    TB_CHECK(rc == 0, "exit %d: %s", rc, err);
}

TB_TEST(gpu_oom_under_a_cap) {
    char why[256] = "";
    if (device_count_in_child(why, sizeof why) <= 0) {
        printf("  SKIP gpu_oom_under_a_cap: %s\n", why);
        return;
    }
    char err[4096];
    int rc = in_child(gpu_over_cap, err, sizeof err);
    TB_CHECK(rc == TB_EXIT_OUT_OF_MEMORY && strstr(err, "over the cap of 67108864"), "exit %d\n%s", rc, err);
    rc = in_child(gpu_too_big, err, sizeof err);
    TB_CHECK(rc == TB_EXIT_OUT_OF_MEMORY && strstr(err, "cudaMalloc: "), "cudaMalloc failure: exit %d\n%s", rc, err);
}

int main(void) {
    TB_RUN(device_cuda_is_refused_naming_the_flag);
    TB_RUN(device_cpu_trains_and_bad_values_are_refused);
    TB_RUN(device_and_precision_rules);
    TB_RUN(context_parallel_all_gather_passes_the_config_on_cuda);
    TB_RUN(head_sizes_up_to_1024_pass_the_config_on_cuda);
    TB_RUN(tagged_allocator_on_a_device_source);
    TB_RUN(tagged_allocator_device_oom);
    TB_RUN(device_allocator_counts_by_category_and_caches);
    TB_RUN(device_allocator_oom_reports);
    TB_RUN(cublaslt_is_not_loaded_at_start_and_loads_on_demand);
    TB_RUN(gpu_oom_under_a_cap);
    tb_output_free(&sh);
    return tb_test_summary();
}
