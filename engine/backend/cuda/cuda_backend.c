// cuda_backend.c — see cuda_backend.h.
#include "backend/cuda/cuda_backend.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef TB_HAVE_CUDA_BACKEND

#include <cuda_runtime.h>

#include "backend/cpu/kernels.h"
#include "backend/cuda/cuda_kernels.h"
#include "backend/cuda/gemm.h"
#include "backend/flash_tiled.h"
#include "core/xalloc.h"

// the calling thread's binding (a rank's thread)
typedef struct binding {
    tb_cuda_context *ctx;
    tb_allocator *mem;
    tb_cuda_precision precision;
    tb_cuda_fail_fn fail;
    void *fail_arg;
    double *sum;      // one double on the device (the gradient norm's sum)
    // sum_squares_add's slices since the last take, and the list last sent to the device
    tb_cuda_segment *segs, *sent, *dsegs;
    int nsegs, segs_cap, sent_nsegs, sent_cap;
    tb_cuda_timer phase;  // CUDA events of the step's phases
    int side;             // a rank's second thread (bind_side_thread): no allocator, no GEMMs
    void *use;            // set_stream's stream, or NULL: the context's compute stream
    int debug_sync;       // TB_CUDA_DEBUG_SYNC=1: synchronise after every enqueued call (check)
    // 16-bit weight copies (weight16): the parameter ranges given to params_changed, its
    // generation (bumped by each call), and one copy per weight with the generation it is of
    struct param_range {
        const float *base;
        size_t n;
    } *ranges;
    int nranges;
    uint64_t generation;
    struct weight_copy {
        const float *w;
        size_t n;
        uint16_t *copy;
        uint64_t generation;
    } *copies;
    int ncopies;
} binding;
static _Thread_local binding cur;

static tb_cuda_stream stream(void) { return (tb_cuda_stream)(cur.use ? cur.use : cur.ctx->stream); }

__attribute__((noreturn)) static void fail(const char *what, const char *why) {
    char msg[512];
    snprintf(msg, sizeof msg, "CUDA backend: %s: %s (device %d)", what, why, cur.ctx ? cur.ctx->device : -1);
    if (cur.fail) cur.fail(cur.fail_arg, msg);
    fprintf(stderr, "%s\n", msg);
    abort();  // fail does not return
}

// Every enqueued call's result. With TB_CUDA_DEBUG_SYNC=1 the stream is also synchronised
// after each, so that an asynchronous fault (an illegal address, a trap in a kernel) is named
// by the launch or copy that raised it, not by whatever call next touches the device.
static void check(int rc, const char *what) {
    if (rc == 0 && cur.debug_sync && cur.ctx) rc = (int)cudaStreamSynchronize((cudaStream_t)stream());
    if (rc != 0) fail(what, cudaGetErrorString((cudaError_t)rc));
}
#define K(call) check((call), #call)

// --- the kernels of backend/kernel_table.h ----------------------------------------------
// A LAUNCH kernel's entry enqueues its launcher on the thread's stream and fails the rank on
// its error; an OWN kernel's cu_<name> is written below (declared here, from the table).
#define WITH_STREAM(...) (__VA_ARGS__, stream())
#define CU_KERNEL_LAUNCH(ret, name, params, args) \
    static ret cu_##name params { check(cuda_##name WITH_STREAM args, "cuda_" #name); }
#define CU_KERNEL_OWN(ret, name, params, args) static ret cu_##name params;
#define CU_KERNEL(side, ret, name, params, args) CU_KERNEL_##side(ret, name, params, args)
TB_KERNEL_TABLE(CU_KERNEL)
#define CU_ENTRY(side, ret, name, params, args) .name = cu_##name,

void tb_cuda_backend_bind(tb_cuda_context *ctx, tb_allocator *mem, tb_cuda_precision precision, tb_cuda_fail_fn fail_fn,
                          void *fail_arg) {
    if (!ctx) {
        if (cur.sum && cur.mem) tb_free(cur.mem, cur.sum);
        if (cur.dsegs && cur.mem) tb_free(cur.mem, cur.dsegs);
        free(cur.segs);
        free(cur.sent);
        for (int i = 0; i < cur.ncopies && cur.mem; i++) tb_free(cur.mem, cur.copies[i].copy);
        free(cur.copies);
        free(cur.ranges);
        tb_cuda_timer_free(&cur.phase);
        memset(&cur, 0, sizeof cur);
        return;
    }
    cur = (binding){.ctx = ctx, .mem = mem, .precision = precision, .fail = fail_fn, .fail_arg = fail_arg,
                    .generation = 1};
    const char *sync = getenv("TB_CUDA_DEBUG_SYNC");
    if (sync && strcmp(sync, "0") && strcmp(sync, "1")) fail("TB_CUDA_DEBUG_SYNC", "must be 0 or 1");
    cur.debug_sync = sync && !strcmp(sync, "1");
    cur.sum = tb_alloc(mem, TB_MEM_WORKSPACE, sizeof(double), "sum of squares (device)");
    tb_error err;
    if (tb_cuda_timer_init(&cur.phase, &err) != 0) fail("the step's phase timer", err.msg);
}

// --- memory ----------------------------------------------------------------------------

static void cu_copy(void *dst, const void *src, size_t bytes) {
    if (dst != src && bytes) K(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, (cudaStream_t)stream()));
}
static void cu_zero(void *dst, size_t bytes) {
    if (bytes) K(cudaMemsetAsync(dst, 0, bytes, (cudaStream_t)stream()));
}
static void cu_copy_to_host(void *host_dst, const void *src, size_t bytes) {
    if (!bytes) return;
    K(cudaMemcpyAsync(host_dst, src, bytes, cudaMemcpyDeviceToHost, (cudaStream_t)stream()));
    K(cudaStreamSynchronize((cudaStream_t)stream()));
}
static void cu_copy_from_host(void *dst, const void *host_src, size_t bytes) {
    if (!bytes) return;
    K(cudaMemcpyAsync(dst, host_src, bytes, cudaMemcpyHostToDevice, (cudaStream_t)stream()));
    K(cudaStreamSynchronize((cudaStream_t)stream()));  // host_src reusable on return
}
static void cu_synchronize(void) { K(cudaStreamSynchronize((cudaStream_t)stream())); }
static void cu_phase_begin(void) { check(tb_cuda_timer_start(&cur.phase, cur.ctx->stream), "the phase timer's start event"); }
static double cu_phase_end_ms(void) {
    check(tb_cuda_timer_stop(&cur.phase, cur.ctx->stream), "the phase timer's stop event");
    double ms = tb_cuda_timer_elapsed_ms(&cur.phase);
    if (ms < 0) fail("the step's phase timer", cudaGetErrorString(cudaGetLastError()));
    return ms;
}

// --- GEMMs -----------------------------------------------------------------------------

// A 16-bit (bf16 or fp16, as bound) compute copy of n fp32 values, from the workspace (freed
// by the caller once the GEMM is enqueued: the caching allocator hands it out again in stream
// order).
static uint16_t *copy16(const float *x, size_t n, const char *what) {
    if (cur.side) fail(what, "a side thread runs no GEMM (it has no allocator)");
    uint16_t *b = tb_alloc(cur.mem, TB_MEM_WORKSPACE, n * sizeof(uint16_t), what);
    if (cur.precision == TB_CUDA_FP16_GEMMS) K(cuda_cast_f32_to_f16(b, x, n, stream()));
    else K(cuda_cast_f32_to_bf16(b, x, n, stream()));
    return b;
}
static tb_cuda_dtype dtype16(void) { return cur.precision == TB_CUDA_FP16_GEMMS ? TB_CUDA_F16 : TB_CUDA_BF16; }

// A GEMM's 16-bit weight: Megatron keeps the model's parameters in bf16 beside the optimizer's
// fp32 copy; here the fp32 parameters are the model's, and a weight inside a range given to
// params_changed has one 16-bit copy (category params, "16-bit weight copy"), cast at its first
// GEMM after each change and reused by every later one — the forward's, the backward's dinp,
// every microbatch's — so weights are cast once per optimizer step. A weight outside every
// range is cast per call into the workspace (*owned = 1: the caller frees it).
static uint16_t *weight16(const float *w, size_t n, int *owned) {
    *owned = 0;
    int in_params = 0;
    for (int i = 0; i < cur.nranges && !in_params; i++)
        in_params = w >= cur.ranges[i].base && w + n <= cur.ranges[i].base + cur.ranges[i].n;
    if (!in_params) {
        *owned = 1;
        return copy16(w, n, "16-bit GEMM weight");
    }
    struct weight_copy *c = NULL;
    for (int i = 0; i < cur.ncopies && !c; i++)
        if (cur.copies[i].w == w && cur.copies[i].n == n) c = &cur.copies[i];
    if (!c) {
        cur.copies = tb_xreallocarray(cur.copies, (size_t)cur.ncopies + 1, sizeof *cur.copies, "16-bit weight copies");
        c = &cur.copies[cur.ncopies++];
        *c = (struct weight_copy){w, n, tb_alloc(cur.mem, TB_MEM_PARAMS, n * sizeof(uint16_t), "16-bit weight copy"), 0};
    }
    if (c->generation != cur.generation) {
        if (cur.precision == TB_CUDA_FP16_GEMMS) K(cuda_cast_f32_to_f16(c->copy, w, n, stream()));
        else K(cuda_cast_f32_to_bf16(c->copy, w, n, stream()));
        c->generation = cur.generation;
    }
    return c->copy;
}

static void cu_params_changed(const float *params, size_t n) {
    int known = 0;
    for (int i = 0; i < cur.nranges && !known; i++) known = cur.ranges[i].base == params && cur.ranges[i].n == n;
    if (!known) {
        cur.ranges = tb_xreallocarray(cur.ranges, (size_t)cur.nranges + 1, sizeof *cur.ranges, "parameter ranges");
        cur.ranges[cur.nranges++] = (struct param_range){params, n};
    }
    cur.generation++;
}

static void cu_matmul_forward(float *out, const float *inp, const float *weight, const float *bias, int N, int C,
                              int OC) {
    tb_error err;
    if (cur.precision == TB_CUDA_FP32) {
        if (tb_cuda_matmul_forward(cur.ctx, out, TB_CUDA_F32, inp, weight, TB_CUDA_F32, bias, N, C, OC, &err) != 0)
            fail("matmul forward (fp32)", err.msg);
        check(0, "matmul forward (fp32)");
        return;
    }
    int w_owned;
    uint16_t *in16 = copy16(inp, (size_t)N * C, "16-bit GEMM input");
    uint16_t *w16 = weight16(weight, (size_t)OC * C, &w_owned);
    int rc = tb_cuda_matmul_forward(cur.ctx, out, TB_CUDA_F32, in16, w16, dtype16(), bias, N, C, OC, &err);
    if (w_owned) tb_free(cur.mem, w16);
    tb_free(cur.mem, in16);
    if (rc != 0) fail("matmul forward (16-bit operands)", err.msg);
    check(0, "matmul forward (16-bit operands)");
}

static void cu_matmul_backward(float *dinp, float *dweight, float *dbias, const float *dout, const float *inp,
                               const float *weight, int N, int C, int OC) {
    tb_error err;
    if (cur.precision == TB_CUDA_FP32) {
        if (tb_cuda_matmul_backward(cur.ctx, dinp, dweight, dbias, dout, inp, weight, N, C, OC, &err) != 0)
            fail("matmul backward (fp32)", err.msg);
        check(0, "matmul backward (fp32)");
        return;
    }
    int w_owned = 0;
    uint16_t *d16 = copy16(dout, (size_t)N * OC, "16-bit GEMM output grad");
    uint16_t *in16 = copy16(inp, (size_t)N * C, "16-bit GEMM input");
    uint16_t *w16 = dinp ? weight16(weight, (size_t)OC * C, &w_owned) : NULL;  // read for dinp only
    int rc = tb_cuda_matmul_backward_16(cur.ctx, dinp, dweight, d16, in16, w16, dtype16(), N, C, OC, &err);
    if (w_owned) tb_free(cur.mem, w16);
    tb_free(cur.mem, in16);
    tb_free(cur.mem, d16);
    if (rc != 0) fail("matmul backward (16-bit operands)", err.msg);
    check(0, "matmul backward (16-bit operands)");
    if (dbias) K(cuda_bias_backward(dbias, dout, N, OC, stream()));
}

static void cu_bias_backward(float *dbias, const float *dout, int rows, int OC) {
    if (rows > 0) K(cuda_bias_backward(dbias, dout, rows, OC, stream()));
}

// --- attention -------------------------------------------------------------------------

// The unfused core: the probabilities in `probs` when the caller keeps them, otherwise in a
// workspace block of the step (selective recompute: recomputed by the same kernel in backward,
// so the same bits); dS in another, freed in stream order.
static void cu_attention_forward(float *out, float *probs, float *scratch, const float *qkv, int B, int T, int NH,
                                 int G, int hs) {
    (void)scratch;
    float *P = probs ? probs
                     : tb_alloc(cur.mem, TB_MEM_WORKSPACE, (size_t)B * NH * T * T * sizeof(float),
                                "attention probabilities (recomputed)");
    K(cuda_attention_probs(P, qkv, B, T, NH, G, hs, stream()));
    K(cuda_attention_forward(out, P, qkv, B, T, NH, G, hs, stream()));
    if (!probs) tb_free(cur.mem, P);
}
static void cu_attention_backward(float *dqkv, float *scratch, const float *dout, const float *qkv, const float *probs,
                                  int B, int T, int NH, int G, int hs) {
    (void)scratch;
    const size_t bytes = (size_t)B * NH * T * T * sizeof(float);
    float *P = (float *)probs, *ds = tb_alloc(cur.mem, TB_MEM_WORKSPACE, bytes, "attention dS");
    if (!probs) {
        P = tb_alloc(cur.mem, TB_MEM_WORKSPACE, bytes, "attention probabilities (recomputed)");
        K(cuda_attention_probs(P, qkv, B, T, NH, G, hs, stream()));
    }
    K(cuda_attention_backward(dqkv, ds, dout, qkv, P, B, T, NH, G, hs, stream()));
    if (!probs) tb_free(cur.mem, P);
    tb_free(cur.mem, ds);
}
// Attention on tensor cores (attention_tc.cu: bf16 MMA, FlashAttention-2's tiles) when the
// rank computes in 16 bits (--bf16 / --fp16: the GEMMs' operands are 16-bit already) and the
// head size has a tiled kernel; otherwise the exact fp32 kernels (attention.cu).
static int tensor_cores(int hs) { return cur.precision != TB_CUDA_FP32 && tb_flash_tiled_supported(hs); }

// The tiled backward adds into dq and dkv; D (rowsum(dO ∘ O)) in a workspace block.
static void tc_backward(float *dq_base, float *dkv, const float *dout, const float *out, const float *lse,
                        const tb_flash_view *v, int B, int NH, int G, int hs) {
    float *D = tb_alloc(cur.mem, TB_MEM_WORKSPACE, (size_t)B * NH * v->Tq * sizeof(float), "attention D (dO·O per row)");
    K(cuda_flash_attention_tc_backward(dq_base, dkv, D, dout, out, lse, v, B, NH, G, hs, stream()));
    tb_free(cur.mem, D);
}

static void cu_flash_attention_forward(float *out, float *lse, float *scratch, int threads, const float *qkv, int B,
                                       int T, int NH, int G, int hs) {
    (void)scratch, (void)threads;
    if (tensor_cores(hs)) {
        const tb_flash_view v = tb_flash_view_fused(qkv, T, NH, G, hs, 1);
        K(cuda_flash_attention_tc_forward(out, lse, &v, B, NH, G, hs, stream()));
        return;
    }
    K(cuda_flash_attention_forward(out, lse, qkv, B, T, NH, G, hs, stream()));
}
static void cu_flash_attention_backward(float *dqkv, float *scratch, int threads, const float *dout,
                                        const float *out, const float *qkv, const float *lse, int B, int T, int NH,
                                        int G, int hs) {
    (void)scratch, (void)threads;
    if (tensor_cores(hs)) {
        const tb_flash_view v = tb_flash_view_fused(qkv, T, NH, G, hs, 1);
        cu_zero(dqkv, (size_t)B * T * (NH + 2 * G) * hs * sizeof(float));  // dqkv is written
        tc_backward(dqkv, dqkv, dout, out, lse, &v, B, NH, G, hs);
        return;
    }
    K(cuda_flash_attention_backward(dqkv, dout, out, qkv, lse, B, T, NH, G, hs, stream()));
}
static void cu_flash_attention_cp_forward(float *out, float *lse, float *scratch, int threads, const float *qkv,
                                          const int32_t *qpos, const float *kv, int B, int Tq, int Tk, int NH, int G,
                                          int hs) {
    (void)scratch, (void)threads;
    if (tensor_cores(hs)) {
        const tb_flash_view v = tb_flash_view_cp(qkv, qpos, kv, Tq, Tk, NH, G, hs);
        K(cuda_flash_attention_tc_forward(out, lse, &v, B, NH, G, hs, stream()));
        return;
    }
    K(cuda_flash_attention_cp_forward(out, lse, qkv, qpos, kv, B, Tq, Tk, NH, G, hs, stream()));
}
static void cu_flash_attention_cp_backward(float *dqkv, float *dkv, float *scratch, int threads, const float *dout,
                                           const float *out, const float *qkv, const int32_t *qpos, const float *kv,
                                           const float *lse, int B, int Tq, int Tk, int NH, int G, int hs) {
    (void)scratch, (void)threads;
    if (tensor_cores(hs)) {
        const tb_flash_view v = tb_flash_view_cp(qkv, qpos, kv, Tq, Tk, NH, G, hs);
        cu_zero(dqkv, (size_t)B * Tq * (NH + 2 * G) * hs * sizeof(float));  // both written
        cu_zero(dkv, (size_t)B * Tk * 2 * G * hs * sizeof(float));
        tc_backward(dqkv, dkv, dout, out, lse, &v, B, NH, G, hs);
        return;
    }
    K(cuda_flash_attention_cp_backward(dqkv, dkv, dout, out, qkv, qpos, kv, lse, B, Tq, Tk, NH, G, hs, stream()));
}
static void cu_flash_attention_block_forward(float *out, float *lse, float *scratch, int threads,
                                             const cpu_flash_block *blk, int B, int NH, int G, int hs) {
    (void)scratch, (void)threads;
    if (tensor_cores(hs)) {
        const tb_flash_view v = tb_flash_view_block(blk->qkv, blk->q_batch_stride, blk->kv, blk->kv_batch_stride,
                                                    blk->Tq, blk->Tk, blk->out_rows, blk->causal, NH, G, hs);
        K(cuda_flash_attention_tc_forward(out, lse, &v, B, NH, G, hs, stream()));
        return;
    }
    K(cuda_flash_attention_block_forward(out, lse, blk->qkv, blk->q_batch_stride, blk->kv, blk->kv_batch_stride,
                                         blk->Tq, blk->Tk, blk->out_rows, blk->causal, B, NH, G, hs, stream()));
}
static void cu_flash_attention_block_backward(float *dq, float *dkv, float *scratch, int threads, const float *dout,
                                              const float *out, const float *lse, const cpu_flash_block *blk, int B,
                                              int NH, int G, int hs) {
    (void)scratch, (void)threads;
    if (tensor_cores(hs)) {  // the block's gradients add into dq and dkv
        const tb_flash_view v = tb_flash_view_block(blk->qkv, blk->q_batch_stride, blk->kv, blk->kv_batch_stride,
                                                    blk->Tq, blk->Tk, blk->out_rows, blk->causal, NH, G, hs);
        tc_backward(dq, dkv, dout, out, lse, &v, B, NH, G, hs);
        return;
    }
    K(cuda_flash_attention_block_backward(dq, dkv, dout, out, lse, blk->qkv, blk->q_batch_stride, blk->kv,
                                          blk->kv_batch_stride, blk->Tq, blk->Tk, blk->out_rows, blk->causal, B, NH, G,
                                          hs, stream()));
}

// --- reductions ------------------------------------------------------------------------

// A step's gradient norm: add records each slice (a host list); take sums every slice in one
// launch into one device double and reads it back by one copy and one sync. The list goes to
// the device only when it differs from the last one sent (the same slices every step).
static void cu_sum_squares_add(const float *x, size_t n) {
    if (n == 0) return;
    if (cur.side) fail("sum_squares_add", "not on a side thread (it has no allocator)");
    if (cur.nsegs == cur.segs_cap) {
        cur.segs_cap = cur.segs_cap ? 2 * cur.segs_cap : 256;
        cur.segs = tb_xreallocarray(cur.segs, (size_t)cur.segs_cap, sizeof *cur.segs, "gradient norm slices");
    }
    cur.segs[cur.nsegs++] = (tb_cuda_segment){x, n};
}
static double cu_sum_squares_take(void) {
    double s = 0.0;
    const int n = cur.nsegs;
    cur.nsegs = 0;
    if (n == 0) return 0.0;
    const size_t bytes = (size_t)n * sizeof(tb_cuda_segment);
    if (n != cur.sent_nsegs || memcmp(cur.sent, cur.segs, bytes)) {
        if (n > cur.sent_cap) {
            if (cur.dsegs) tb_free(cur.mem, cur.dsegs);
            cur.dsegs = tb_alloc(cur.mem, TB_MEM_WORKSPACE, bytes, "gradient norm slices (device)");
            cur.sent = tb_xreallocarray(cur.sent, (size_t)n, sizeof *cur.sent, "gradient norm slices sent");
            cur.sent_cap = n;
        }
        memcpy(cur.sent, cur.segs, bytes);
        cur.sent_nsegs = n;
        cu_copy_from_host(cur.dsegs, cur.sent, bytes);
    }
    size_t longest = 0;
    for (int i = 0; i < n; i++) longest = cur.segs[i].n > longest ? cur.segs[i].n : longest;
    K(cudaMemsetAsync(cur.sum, 0, sizeof(double), (cudaStream_t)stream()));
    K(cuda_sum_squares_segments(cur.sum, cur.dsegs, n, longest, stream()));
    cu_copy_to_host(&s, cur.sum, sizeof s);
    return s;
}

// --- a rank's second thread, streams and events --------------------------------------

static void *cu_thread_context(void) { return cur.ctx; }

// The side thread shares the rank's context (device, handles; the compute stream only through
// set_stream(NULL)) and allocates nothing.
static void cu_bind_side_thread(void *context, void (*fail_fn)(void *arg, const char *msg), void *fail_arg) {
    if (!context) {
        memset(&cur, 0, sizeof cur);
        return;
    }
    tb_cuda_context *ctx = context;
    cur = (binding){.ctx = ctx, .precision = TB_CUDA_FP32, .fail = fail_fn, .fail_arg = fail_arg, .side = 1};
    cudaError_t e = cudaSetDevice(ctx->device);
    if (e != cudaSuccess) fail("cudaSetDevice (a side thread of the rank)", cudaGetErrorString(e));
}
static void cu_set_stream(void *s) { cur.use = s; }
static void *cu_event_create(void) {
    cudaEvent_t ev = NULL;
    K(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
    return ev;
}
static void cu_event_destroy(void *ev) {
    cudaError_t e = ev ? cudaEventDestroy((cudaEvent_t)ev) : cudaSuccess;
    if (e != cudaSuccess) fprintf(stderr, "CUDA backend: teardown: cudaEventDestroy: %s\n", cudaGetErrorString(e));
}
static void cu_event_record(void *ev) { K(cudaEventRecord((cudaEvent_t)ev, (cudaStream_t)stream())); }
static void cu_event_wait(void *ev) { K(cudaStreamWaitEvent((cudaStream_t)stream(), (cudaEvent_t)ev, 0)); }

// --- MoE: the grouped GEMMs ---------------------------------------------------------

// A grouped GEMM as one GEMM per group, enqueued in order on the stream (each group's rows
// consecutive, rows on the host); the precision's 16-bit operands as every GEMM's.
static void cu_grouped_matmul_forward(float *out, const float *inp, const float *const *weight,
                                      const float *const *bias, const int32_t *rows, int G, int C, int OC) {
    size_t at = 0;
    for (int g = 0; g < G; g++) {
        if (rows[g] > 0)
            cu_matmul_forward(out + at * OC, inp + at * C, weight[g], bias ? bias[g] : NULL, rows[g], C, OC);
        at += (size_t)rows[g];
    }
}
static void cu_grouped_matmul_backward(float *dinp, float *const *dweight, float *const *dbias, const float *dout,
                                       const float *inp, const float *const *weight, const int32_t *rows, int G, int C,
                                       int OC) {
    size_t at = 0;
    for (int g = 0; g < G; g++) {
        if (rows[g] > 0)
            cu_matmul_backward(dinp ? dinp + at * C : NULL, dweight[g], dbias ? dbias[g] : NULL, dout + at * OC,
                               inp + at * C, weight[g], rows[g], C, OC);
        at += (size_t)rows[g];
    }
}

static const tb_backend cuda_backend = {
    .name = "cuda",
    .host = 0,
    .copy = cu_copy,
    .zero = cu_zero,
    .copy_to_host = cu_copy_to_host,
    .copy_from_host = cu_copy_from_host,
    .synchronize = cu_synchronize,
    .phase_begin = cu_phase_begin,
    .phase_end_ms = cu_phase_end_ms,
    TB_KERNEL_TABLE(CU_ENTRY)
    .thread_context = cu_thread_context,
    .bind_side_thread = cu_bind_side_thread,
    .set_stream = cu_set_stream,
    .event_create = cu_event_create,
    .event_destroy = cu_event_destroy,
    .event_record = cu_event_record,
    .event_wait = cu_event_wait,
};

const tb_backend *tb_backend_cuda(void) { return &cuda_backend; }

// --- device memory for the tagged allocator ---------------------------------------------

static int dev_alloc(void *ctx, void **p, size_t bytes, char *why, size_t why_len) {
    tb_cuda_context *c = ctx;
    cudaError_t e = cudaSetDevice(c->device);
    if (e == cudaSuccess) e = cudaMalloc(p, bytes);
    if (e != cudaSuccess) {
        snprintf(why, why_len, "%s (device %d)", cudaGetErrorString(e), c->device);
        (void)cudaGetLastError();  // an out-of-memory error is not sticky
        return -1;
    }
    return 0;
}
static void dev_release(void *ctx, void *p) {
    tb_cuda_context *c = ctx;
    // (the teardown of a failed rank runs on the main thread; a release cannot fail the run)
    cudaError_t e = cudaSetDevice(c->device);
    if (e == cudaSuccess) e = cudaFree(p);
    if (e != cudaSuccess)
        fprintf(stderr, "CUDA backend: releasing a block on device %d: %s\n", c->device, cudaGetErrorString(e));
}
static void dev_zero(void *ctx, void *p, size_t bytes) {
    tb_cuda_context *c = ctx;
    if (cudaMemsetAsync(p, 0, bytes, (cudaStream_t)c->stream) != cudaSuccess) {
        char why[128];
        snprintf(why, sizeof why, "cudaMemsetAsync of %zu bytes: %s", bytes, cudaGetErrorString(cudaGetLastError()));
        fail("zeroing an allocation", why);
    }
}

void tb_cuda_mem_device(tb_mem_device *d, tb_cuda_context *ctx) {
    *d = (tb_mem_device){"cudaMalloc", dev_alloc, dev_release, dev_zero, ctx};
}

#else  // not built

const tb_backend *tb_backend_cuda(void) { return NULL; }
void tb_cuda_backend_bind(tb_cuda_context *ctx, tb_allocator *mem, tb_cuda_precision precision, tb_cuda_fail_fn fail,
                          void *fail_arg) {
    (void)ctx, (void)mem, (void)precision, (void)fail, (void)fail_arg;
}
void tb_cuda_mem_device(tb_mem_device *d, tb_cuda_context *ctx) {
    (void)ctx;
    memset(d, 0, sizeof *d);
}

#endif
