// backend.h — the kernel dispatch (docs/ARCHITECTURE.md, "CUDA backend"): one const table of
// the model's numeric entry points, chosen once per rank from --device. The model, the
// tensor-parallel layers, the optimizer and finalize_model_grads call tb_be()->..., never a
// backend directly.
//
//   cpu   the entries ARE the cpu_* kernels of backend/cpu/kernels.h (and the host loops the
//         model ran before the dispatch existed, moved here unchanged): the CPU path computes
//         the same bits as before.
//   cuda  backend/cuda/cuda_backend.c: the cuda_* launchers and the cuBLASLt GEMMs on the
//         rank's device context (stream, cuBLASLt handle); every pointer is device memory.
//
// The table in use is the calling thread's (tb_backend_bind): a rank is a thread, as its
// CUDA device is the thread's current device; an unbound thread (tests, tools) gets the CPU
// table. Shapes, arguments and gradient conventions are backend/cpu/kernels.h's: parameter
// gradients accumulate, activation gradients are written.
//
// Memory: `host` says whether the backend's tensors are host memory. Host code reads or
// writes a tensor only through copy_to_host / copy_from_host (loss, gradient norm, weights'
// initialisation, reports); copy and zero work on tensors of the backend.
#ifndef TB_BACKEND_BACKEND_H
#define TB_BACKEND_BACKEND_H

#include <stddef.h>
#include <stdint.h>

struct cpu_flash_block;  // backend/cpu/kernels.h

typedef struct tb_backend {
    const char *name;  // "cpu", "cuda"
    int host;          // 1: tensors are host memory

    // --- memory (bytes) ---
    void (*copy)(void *dst, const void *src, size_t bytes);  // tensor → tensor
    void (*zero)(void *dst, size_t bytes);
    void (*copy_to_host)(void *host_dst, const void *src, size_t bytes);    // waits for the copy
    void (*copy_from_host)(void *dst, const void *host_src, size_t bytes);  // host_src reusable on return
    void (*synchronize)(void);  // every kernel enqueued by this thread has finished
    // Device timing of a phase of the step (NULL on the CPU, whose phases the host clock
    // times): begin records an event on the thread's stream; end records another, waits for
    // it and returns the milliseconds between the two (CUDA events). One phase at a time.
    void (*phase_begin)(void);
    double (*phase_end_ms)(void);

    // --- linear (backend/cpu/kernels.h; GEMMs: cuBLASLt on cuda) ---
    void (*matmul_forward)(float *out, const float *inp, const float *weight, const float *bias, int N, int C,
                           int OC);
    void (*matmul_backward)(float *dinp, float *dweight, float *dbias, const float *dout, const float *inp,
                            const float *weight, int N, int C, int OC);
    // out (rows, OC) += bias (OC) on every row; dbias (OC) += column sums of dout's first rows rows
    void (*add_bias)(float *out, const float *bias, int rows, int OC);
    void (*bias_backward)(float *dbias, const float *dout, int rows, int OC);

    // --- norms, activations, residual ---
    void (*layernorm_forward)(float *out, float *mean, float *rstd, const float *inp, const float *weight,
                              const float *bias, int N, int C, float eps);
    void (*layernorm_backward)(float *dinp, float *dweight, float *dbias, const float *dout, const float *inp,
                               const float *weight, const float *mean, const float *rstd, int N, int C);
    void (*rmsnorm_forward)(float *out, float *rstd, const float *inp, const float *weight, int N, int C, float eps);
    void (*rmsnorm_backward)(float *dinp, float *dweight, const float *dout, const float *inp, const float *weight,
                             const float *rstd, int N, int C);
    void (*gelu_forward)(float *out, const float *inp, size_t n);
    void (*gelu_backward)(float *dinp, const float *inp, const float *dout, size_t n);
    void (*swiglu_forward)(float *out, const float *inp, int N, int F);
    void (*swiglu_backward)(float *dinp, const float *inp, const float *dout, int N, int F);
    void (*add)(float *out, const float *a, const float *b, size_t n);
    void (*add_inplace)(float *acc, const float *b, size_t n);
    void (*scale)(float *out, const float *inp, float s, size_t n);  // out = inp · s (out may be inp)

    // --- attention core, unfused ("local": cpu_attention_forward / _backward of
    // backend/cpu/kernels.h; probs (B, NH, T, T) saved, or NULL: recomputed, scratch 2·T·T) ---
    void (*attention_forward)(float *out, float *probs, float *scratch, const float *qkv, int B, int T, int NH, int G,
                              int hs);
    void (*attention_backward)(float *dqkv, float *scratch, const float *dout, const float *qkv, const float *probs,
                               int B, int T, int NH, int G, int hs);
    // --- attention core (flash: out, lse; causal); NULL where the backend lacks it ---
    void (*flash_attention_forward)(float *out, float *lse, float *scratch, int threads, const float *qkv, int B,
                                    int T, int NH, int G, int hs);
    void (*flash_attention_backward)(float *dqkv, float *scratch, int threads, const float *dout, const float *out,
                                     const float *qkv, const float *lse, int B, int T, int NH, int G, int hs);
    void (*rope_apply)(float *qkv, const float *cos_t, const float *sin_t, int B, int T, int row, int heads, int hs,
                       int dim, int interleaved, int inverse);

    // --- context parallelism, cp_comm_type all_gather (transformer/context_parallel.h) ---
    // kv rows are (2·G·hs) floats [K groups | V groups]; qkv rows (NH+2G)·hs. As
    // cpu_flash_attention_cp_forward / _backward and the cpu_cp_* loops of backend/cpu/kernels.h;
    // qpos (Tq) is a tensor of the backend.
    void (*flash_attention_cp_forward)(float *out, float *lse, float *scratch, int threads, const float *qkv,
                                       const int32_t *qpos, const float *kv, int B, int Tq, int Tk, int NH, int G,
                                       int hs);
    void (*flash_attention_cp_backward)(float *dqkv, float *dkv, float *scratch, int threads, const float *dout,
                                        const float *out, const float *qkv, const int32_t *qpos, const float *kv,
                                        const float *lse, int B, int Tq, int Tk, int NH, int G, int hs);
    void (*cp_pack_kv)(float *kv, const float *qkv, int B, int Tq, int NH, int G, int hs);
    void (*cp_add_kv_grads)(float *dqkv, const float *dkv, int B, int Tq, int NH, int G, int hs);
    void (*cp_rank_major_to_positions)(float *seq, const float *gathered, int cp_size, int B, int Tq, int KV);
    void (*cp_positions_to_rank_major)(float *gathered, const float *seq, int cp_size, int B, int Tq, int KV);
    // cp_comm_type p2p (the ring): one block of queries against one K/V chunk pair, as
    // cpu_flash_attention_block_forward / _backward (the block: backend/cpu/kernels.h; forward
    // writes the block's out and lse, backward adds into dq and dkv), and the merge of a
    // block's partial out and lse into the running ones (cpu_cp_merge_partial)
    void (*flash_attention_block_forward)(float *out, float *lse, float *scratch, int threads,
                                          const struct cpu_flash_block *blk, int B, int NH, int G, int hs);
    void (*flash_attention_block_backward)(float *dq, float *dkv, float *scratch, int threads, const float *dout,
                                           const float *out, const float *lse, const struct cpu_flash_block *blk,
                                           int B, int NH, int G, int hs);
    void (*cp_merge_partial)(float *out, float *lse, const float *pout, const float *plse, int B, int NH, int Tq,
                             int row0, int rows, int hs);

    // --- embedding ---
    void (*embedding_forward)(float *out, const int32_t *tokens, const float *wte, int vocab_start, int vocab_local,
                              const float *wpe, const int32_t *pos, int B, int T, int C);
    void (*embedding_backward)(float *dwte, float *dwpe, const float *dout, const int32_t *tokens, int vocab_start,
                               int vocab_local, const int32_t *pos, int B, int T, int C);
    void (*add_positions)(float *out, const float *wpe, const int32_t *pos, int B, int T, int C);

    // --- vocab-parallel cross-entropy stages ---
    void (*ce_row_max)(const float *logits, float *rowmax, int N, int Vl, int vocab_start, int V);
    void (*ce_target_logit)(const float *logits, const float *max, float *target, const int32_t *targets, int N,
                            int Vl, int vocab_start);
    void (*ce_exp_sum)(float *logits, const float *max, float *sum, int N, int Vl, int vocab_start, int V);
    void (*ce_normalize)(float *probs, const float *sum, const float *target, float *losses, int N, int Vl);
    void (*cross_entropy_backward)(float *probs_to_dlogits, const int32_t *targets, float dloss, int N, int Vl,
                                   int vocab_start);

    // --- optimizer, reductions ---
    void (*adamw_update)(float *p, float *m, float *v, const float *g, size_t n, float grad_scale, float b1, float b2,
                         float eps, float keep, float step, float inv_sqrt_bc2);
    double (*sum_squares)(const float *x, size_t n);  // read back to the host

    // --- a rank's second thread, streams and events (NULL on the CPU, whose kernels have
    // finished when they return and run on any thread) ---
    // DistributedDataParallel's communication thread (distributed/distributed_data_parallel.h)
    // runs on the rank's device: it binds the rank thread's context (thread_context, taken on
    // the rank thread; bind_side_thread, on the other thread, makes the device current — NULL
    // unbinds; a side thread runs the elementwise kernels, no GEMM and no sum_squares), puts
    // its work on a communication group's stream (set_stream; NULL: back to the thread's own)
    // and orders the streams with events (PyTorch's Event.record / Event.wait): event_record
    // marks the work enqueued so far on the thread's current stream, event_wait makes the work
    // enqueued on it from now wait for the marked work. An event must have been recorded (in
    // host order) before a wait on it means anything. A failed call fails the thread as a
    // failed kernel does (the bound fail function).
    void *(*thread_context)(void);
    void (*bind_side_thread)(void *context, void (*fail)(void *arg, const char *msg), void *fail_arg);
    void (*set_stream)(void *stream);
    void *(*event_create)(void);
    void (*event_destroy)(void *event);  // any thread (a failed rank's teardown)
    void (*event_record)(void *event);
    void (*event_wait)(void *event);
    // --- MoE --- (backend/cpu/moe_kernels.h: shapes and conventions; the router's per-token
    // arithmetic is backend/moe_row.h on both backends).
    void (*moe_router_forward)(const float *logits, float *scores, int32_t *topk, float *probs, int N, int E, int k,
                               int sigmoid, int pre_softmax);
    void (*moe_router_backward)(float *d_logits, const float *scores, const int32_t *topk, const float *probs,
                                const float *d_probs, const int32_t *counts, int T, double aux, int N, int E, int k,
                                int sigmoid, int pre_softmax);
    void (*moe_aux_score_sums)(double *col, const float *scores, int S, int T, int E, int normalise);
    void (*moe_permute)(float *out, const float *inp, const int32_t *idx, int M, int C);
    void (*moe_permute_backward)(float *dinp, const float *d_perm, const int32_t *pos, int N, int k, int C);
    void (*moe_unpermute)(float *out, const float *y, const int32_t *pos, const float *probs, int N, int k, int C);
    void (*moe_unpermute_backward)(float *dy, float *d_probs, const float *dout, const float *y, const int32_t *pos,
                                   const float *probs, int N, int k, int C);
    // --moe-grouped-gemm (backend/cpu/kernels.h's cpu_grouped_matmul_*): rows (G) a host array,
    // the groups' weights and biases tensors; on cuda one cuBLASLt GEMM per group, back to back
    void (*grouped_matmul_forward)(float *out, const float *inp, const float *const *weight,
                                   const float *const *bias, const int32_t *rows, int G, int C, int OC);
    void (*grouped_matmul_backward)(float *dinp, float *const *dweight, float *const *dbias, const float *dout,
                                    const float *inp, const float *const *weight, const int32_t *rows, int G, int C,
                                    int OC);
} tb_backend;

// The CPU table (always there).
const tb_backend *tb_backend_cpu(void);

// The calling thread's table (the CPU's when none is bound); bind NULL to unbind.
const tb_backend *tb_be(void);
void tb_backend_bind(const tb_backend *be);

// Σ x[i] for i < n in double, in index order, read from a tensor of the thread's backend
// (the loss): the CPU reads the tensor itself, the others copy it to the host first.
double tb_be_sum_to_host(const float *x, size_t n);

#endif
