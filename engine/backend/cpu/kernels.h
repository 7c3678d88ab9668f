// kernels.h — the CPU backend: every numeric kernel of the model, forward and backward
// side by side, fp32. Matmuls go to OpenBLAS sgemm; the rest are plain C loops over
// contiguous rows, parallel over rows (or over columns for reductions across rows) with
// OpenMP static schedules.
//
// Shapes use llm.c's letters: N = B·T rows (tokens), C channels, OC output channels,
// F MLP hidden, NH heads, G query groups (key/value heads), hs head size, V vocab,
// Vp padded vocab.
//
// Gradient convention: gradients of parameters ACCUMULATE (+=) — they are summed over
// microbatches and zeroed once per step; gradients of activations are WRITTEN (=).
//
// Determinism: no result depends on the number of threads. Every reduction that crosses
// rows (bias, norm-weight and embedding gradients) is split by column, so each output
// element is summed by one thread in a fixed order.
#ifndef TB_BACKEND_CPU_KERNELS_H
#define TB_BACKEND_CPU_KERNELS_H

#include <stddef.h>
#include <stdint.h>

// --- linear: out = inp @ weight^T + bias ----------------------------------------------
// inp (N,C), weight (OC,C), bias (OC) or NULL → out (N,OC)
void cpu_matmul_forward(float *out, const float *inp, const float *weight, const float *bias, int N,
                        int C, int OC);
// dout (N,OC) → dinp (N,C) written (if not NULL); dweight (OC,C) and dbias (OC) accumulated
// (dbias may be NULL).
void cpu_matmul_backward(float *dinp, float *dweight, float *dbias, const float *dout,
                         const float *inp, const float *weight, int N, int C, int OC);
// Grouped GEMM (MoE's --moe-grouped-gemm, Megatron's GroupedMLP): G independent linears over
// consecutive row blocks, rows[g] rows of inp / out for group g with its own weight (OC,C) and
// bias (NULL: none), in one call — parallel over the groups, each group's GEMM the sgemm of
// cpu_matmul_forward single-threaded (the same bits as G calls of it: test_moe). A group of
// no rows is skipped.
void cpu_grouped_matmul_forward(float *out, const float *inp, const float *const *weight, const float *const *bias,
                                const int32_t *rows, int G, int C, int OC);
// Its backward: dinp (NULL: not wanted) written, dweight[g] and dbias[g] (NULL: none) accumulated.
void cpu_grouped_matmul_backward(float *dinp, float *const *dweight, float *const *dbias, const float *dout,
                                 const float *inp, const float *const *weight, const int32_t *rows, int G, int C,
                                 int OC);

// --- norms ----------------------------------------------------------------------------
// LayerNorm: out = (inp - mean) * rstd * weight + bias; saves mean (N), rstd (N).
void cpu_layernorm_forward(float *out, float *mean, float *rstd, const float *inp,
                           const float *weight, const float *bias, int N, int C, float eps);
void cpu_layernorm_backward(float *dinp, float *dweight, float *dbias, const float *dout,
                            const float *inp, const float *weight, const float *mean,
                            const float *rstd, int N, int C);
// RMSNorm: out = inp * rstd * weight, rstd = 1 / sqrt(mean(inp²) + eps); saves rstd (N).
void cpu_rmsnorm_forward(float *out, float *rstd, const float *inp, const float *weight, int N, int C,
                         float eps);
void cpu_rmsnorm_backward(float *dinp, float *dweight, const float *dout, const float *inp,
                          const float *weight, const float *rstd, int N, int C);

// --- activations ----------------------------------------------------------------------
// GELU, tanh approximation: (N·F) → (N·F)
void cpu_gelu_forward(float *out, const float *inp, size_t n);
void cpu_gelu_backward(float *dinp, const float *inp, const float *dout, size_t n);
// SwiGLU: inp (N, 2F) = [gate | up] → out (N, F) = silu(gate) * up
void cpu_swiglu_forward(float *out, const float *inp, int N, int F);
void cpu_swiglu_backward(float *dinp, const float *inp, const float *dout, int N, int F);

// --- residual -------------------------------------------------------------------------
void cpu_add(float *out, const float *a, const float *b, size_t n);            // out = a + b
void cpu_add_inplace(float *acc, const float *b, size_t n);                    // acc += b

// --- attention core -------------------------------------------------------------------
// Causal grouped-query attention over a fused qkv (B,T,(NH + 2G)·hs) laid out
// [Q heads | K groups | V groups]; head h reads key/value group h / (NH/G).
// out (B,T,NH·hs). probs (B,NH,T,T) is saved for backward; when probs is NULL the
// probabilities live only in `scratch` (T·T floats) — the selective-recompute path.
void cpu_attention_forward(float *out, float *probs, float *scratch, const float *qkv, int B, int T,
                           int NH, int G, int hs);
// dout (B,T,NH·hs) → dqkv (B,T,(NH+2G)·hs) written. probs as saved by forward, or NULL to
// recompute them from qkv in `scratch` (2·T·T floats), bit for bit as forward did.
void cpu_attention_backward(float *dqkv, float *scratch, const float *dout, const float *qkv,
                            const float *probs, int B, int T, int NH, int G, int hs);

// Blocked causal attention (FlashAttention-2's algorithm, flash_attention.c), same layout:
// out (B,T,NH·hs) and lse (B,NH,T), each row's log-sum-exp of its scaled scores — all it
// saves. Backward recomputes each block's probabilities from lse and reads forward's out;
// dqkv is written. scratch: cpu_flash_attention_scratch_floats(T, hs, threads) floats; at
// most `threads` OpenMP threads run. Results do not depend on the thread count. causal 0:
// every position sees every other (the engine's GPT is always causal; tests use both).
size_t cpu_flash_attention_scratch_floats(int T, int hs, int threads);
// Context parallelism: this rank's queries — Tq rows of qkv at global positions qpos —
// against the whole sequence's keys and values, kv (B, Tk, 2·G·hs: [K groups | V groups]) in
// position order, causal by position. out (B,Tq,NH·hs), lse (B,NH,Tq) as above; backward
// writes dqkv's Q part (its K and V parts zero) and dkv (B, Tk, 2·G·hs), the gradient at every
// key and value from this rank's queries (summed over the context-parallel ranks by the caller).
// scratch: cpu_flash_attention_scratch_floats(Tk, hs, threads) floats.
void cpu_flash_attention_cp_forward(float *out, float *lse, float *scratch, int threads, const float *qkv,
                                    const int32_t *qpos, const float *kv, int B, int Tq, int Tk, int NH, int G,
                                    int hs);
void cpu_flash_attention_cp_backward(float *dqkv, float *dkv, float *scratch, int threads, const float *dout,
                                     const float *out, const float *qkv, const int32_t *qpos, const float *kv,
                                     const float *lse, int B, int Tq, int Tk, int NH, int G, int hs);
// Context parallelism's data movement (backend/cpu/context_parallel.c), kv rows (2·G·hs)
// floats [K groups | V groups], qkv rows (NH+2G)·hs:
//   pack_kv                kv (B, Tq, KV) = the K and V parts of qkv (B, Tq, QKV)
//   add_kv_grads           dqkv's K and V parts += dkv (B, Tq, KV)
//   rank_major_to_positions  the all-gathered rows (cp, B, Tq, KV), rank-major, into the
//                          sequence in position order seq (B, cp·Tq, KV) (backend/cp_layout.h);
//   positions_to_rank_major  the reverse (for the reduce-scatter of dK/dV)
void cpu_cp_pack_kv(float *kv, const float *qkv, int B, int Tq, int NH, int G, int hs);
void cpu_cp_add_kv_grads(float *dqkv, const float *dkv, int B, int Tq, int NH, int G, int hs);
void cpu_cp_rank_major_to_positions(float *seq, const float *gathered, int cp_size, int B, int Tq, int KV);
void cpu_cp_positions_to_rank_major(float *gathered, const float *seq, int cp_size, int B, int Tq, int KV);
// The ring's merge of a block's partial attention (pout (B, rows, NH·hs), plse (B, NH, rows))
// into out and lse (B, Tq rows, from row0) by the online-softmax rule.
void cpu_cp_merge_partial(float *out, float *lse, const float *pout, const float *plse, int B, int NH, int Tq,
                          int row0, int rows, int hs);
// One block of context parallelism's ring (cp_comm_type p2p): Tq query rows of a fused qkv
// tensor (B samples, q_batch_stride floats apart) against Tk key/value rows of a kv tensor
// ((2·G·hs)-float rows [K groups | V groups], kv_batch_stride floats between samples), either
// every query seeing every key (causal 0) or causal by row index (causal 1: the diagonal block,
// both sides' rows in position order). out, dout (B, out_rows, NH·hs) and lse (B, NH, out_rows)
// are views whose Tq rows start at the pointers passed. Forward writes out and lse of this
// block alone (the caller merges blocks by log-sum-exp); backward, given the merged out and
// lse, adds this block's gradients into dq (laid out as the qkv view's Q part) and dkv (as kv).
// scratch: cpu_flash_attention_scratch_floats(max(Tq, Tk), hs, threads) floats or more.
typedef struct cpu_flash_block {
    const float *qkv;
    size_t q_batch_stride;
    const float *kv;
    size_t kv_batch_stride;
    int Tq, Tk, out_rows, causal;
} cpu_flash_block;
void cpu_flash_attention_block_forward(float *out, float *lse, float *scratch, int threads, const cpu_flash_block *blk,
                                       int B, int NH, int G, int hs);
void cpu_flash_attention_block_backward(float *dq, float *dkv, float *scratch, int threads, const float *dout,
                                        const float *out, const float *lse, const cpu_flash_block *blk, int B, int NH,
                                        int G, int hs);
// x[i] = exp(x[i] − shift) for i < n (finite values: activations.c's vector expf); returns
// their sum. One thread's row: the caller parallelises.
float cpu_exp_shifted(float *x, int n, float shift);
void cpu_flash_attention_forward(float *out, float *lse, float *scratch, int threads, const float *qkv, int B, int T,
                                 int NH, int G, int hs, int causal);
void cpu_flash_attention_backward(float *dqkv, float *scratch, int threads, const float *dout, const float *out,
                                  const float *qkv, const float *lse, int B, int T, int NH, int G, int hs, int causal);

// --- rotary position embedding (RoPE, Megatron's RotaryEmbedding) ---------------------
// The rotation of position t: angle t · base^(−2i / dim) for channel pair i < dim / 2, as
// cos and sin tables (T, dim / 2), computed in double and rounded once.
void cpu_rope_tables(float *cos_t, float *sin_t, int T, int dim, double base);
// The same for rows at positions pos[0..T) (context parallelism's local tokens).
void cpu_rope_tables_at(float *cos_t, float *sin_t, const int32_t *pos, int T, int dim, double base);
// Rotates the first `dim` channels of each of the first `heads` heads of every row of a
// fused qkv (B·T rows of `row` floats; heads hs floats wide, from the row's start: the Q
// heads then the K groups), row b·T + t by position t. Pairs are (i, i + dim/2), Megatron's
// rotate_half, or (2i, 2i+1) when interleaved. inverse rotates by −angle: the transpose,
// which takes a gradient at the rotated q, k back to the unrotated ones.
void cpu_rope_apply(float *qkv, const float *cos_t, const float *sin_t, int B, int T, int row, int heads, int hs,
                    int dim, int interleaved, int inverse);

// --- embedding ------------------------------------------------------------------------
// out (B,T,C) = wte[token − vocab_start] (0 for tokens outside [vocab_start,
// vocab_start + vocab_local): another tensor-parallel rank's rows) + wpe[t] if wpe is not NULL,
// t the row's position in its sample, or pos[t] when pos is not NULL (context parallelism).
void cpu_embedding_forward(float *out, const int32_t *tokens, const float *wte, int vocab_start, int vocab_local,
                           const float *wpe, const int32_t *pos, int B, int T, int C);
// dwte (rows of this rank's vocabulary range) and dwpe (if not NULL) accumulated
void cpu_embedding_backward(float *dwte, float *dwpe, const float *dout, const int32_t *tokens, int vocab_start,
                            int vocab_local, const int32_t *pos, int B, int T, int C);
// out (B,T,C) += wpe[t]
void cpu_add_positions(float *out, const float *wpe, const int32_t *pos, int B, int T, int C);

// --- loss: softmax cross-entropy over a vocabulary shard -------------------------------
// logits (N,Vl) hold columns [vocab_start, vocab_start + Vl) of the padded vocabulary; only
// global columns < V are real. The stages let tensor parallelism all-reduce between them
// (tensor_parallel/cross_entropy.c).
// rowmax (N) = max over this shard's real columns (-FLT_MAX if it has none)
void cpu_ce_row_max(const float *logits, float *rowmax, int N, int Vl, int vocab_start, int V);
// target (N) = logit[target] − max when the target column is in this shard, else 0
void cpu_ce_target_logit(const float *logits, const float *max, float *target, const int32_t *targets, int N,
                         int Vl, int vocab_start);
// logits → exp(logit − max) in place over real columns (padding → 0); sum (N) over the shard
void cpu_ce_exp_sum(float *logits, const float *max, float *sum, int N, int Vl, int vocab_start, int V);
// exp → probabilities (÷ sum); losses (N) = log(sum) − target
void cpu_ce_normalize(float *probs, const float *sum, const float *target, float *losses, int N, int Vl);
// probs (N,Vl) → dlogits in place: (p − onehot(target)) · dloss
void cpu_cross_entropy_backward(float *probs_to_dlogits, const int32_t *targets, float dloss, int N, int Vl,
                                int vocab_start);

// --- reductions -----------------------------------------------------------------------
// Σ x² in double, summed in fixed blocks so the result is independent of thread count.
double cpu_sum_squares(const float *x, size_t n);

// What the CPU libraries choose once, when they load, before main runs:
// - OpenBLAS picks its kernels from the CPU model. OpenBLAS 0.3.21 (Debian 12) does not know
//   recent Xeons and falls back to its generic SSE3 "Prescott" kernels, at a third of the
//   speed: on a CPU with AVX-512 (or AVX2 + FMA) OPENBLAS_CORETYPE=SkylakeX (or Haswell).
// - libgomp reads its wait policy: bounded spin on a quiet host, sleep beside a busy task
//   (the thread policy below).
// Called first thing in main: when either must change, it sets the environment and
// re-executes the program, once. A user's OPENBLAS_CORETYPE, OMP_WAIT_POLICY or
// GOMP_SPINCOUNT is always respected.
void cpu_runtime_select(char **argv);

// Sets OpenBLAS's and OpenMP's thread counts (0: all cores).
void cpu_set_num_threads(int n);
// The most threads a rank's kernels can run: OpenBLAS's build limit (it clamps above it).
int cpu_max_num_threads(void);

// --- the thread policy (docs/ARCHITECTURE.md, "Ranks and threads") -------------------
// Threads for one rank: `requested` (--num-threads) when positive; else 1 when several
// rank threads share this process (concurrent callers of OpenBLAS's threaded path contend
// for its one pool); else the usable cores divided among the ranks on this host (at least
// 1). One rank alone, or a thread per rank, each occupies every core of a small host, so
// layouts compared there use the same cores; where they do not, conditions.json says so
// and prove's stability gate refuses to compare their timings.
int cpu_threads_per_rank(int requested, int ranks_in_process, int ranks_on_host);

// The wait policy, chosen at start from the host (cpu_runtime_select): waiting OpenMP
// threads spin a bounded time, then sleep (GOMP_SPINCOUNT=300000, libgomp's own bound,
// a few ms) on a quiet host, and sleep at once (OMP_WAIT_POLICY=PASSIVE) when another task
// keeps a core busy. Spinning, a team with a statically scheduled region waits at every
// barrier for its member that shares a core with the other task: a 2-thread step measured
// 3-5x slower beside one busy process. Sleeping, every region pays a wake-up: the
// quickstart model's step 0-14% (Intel) to 2x (AMD EPYC) slower on a quiet host. libgomp
// reads the policy once, so a task that starts after the engine is not seen: the run's
// conditions.json measures the contention, and prove refuses its timings (README, "Thread
// policy"). A policy in the environment is always respected.
#define TB_SPIN_ROUNDS "300000"
#define TB_WAIT_PROBE_READINGS 8
#define TB_WAIT_PROBE_APART_US 2000
// The policy for `others` runnable tasks besides this process (-1: unknown): the variable
// to set and its value; why (the reason recorded with the run). Returns 1 for the spin.
int cpu_wait_policy_choose(int others, const char **env_name, const char **env_value, char *why, size_t size);
// Why the engine chose the policy it runs with ("" when it did not choose: the environment's).
const char *cpu_openmp_wait_policy_reason(void);
// The policy libgomp read ("PASSIVE", "ACTIVE, GOMP_SPINCOUNT=1000", "unset") and who set
// it: "engine default" (cpu_runtime_select), "environment" or "libgomp default".
const char *cpu_openmp_wait_policy(const char **source);
int cpu_get_num_threads(void);
// The threads OpenBLAS runs a call with on this thread (openblas_get_num_threads).
int cpu_get_blas_num_threads(void);
// The BLAS in use, e.g. "OpenBLAS 0.3.21 Cooperlake" (the kernel set it chose for this CPU).
const char *cpu_blas_name(void);
// The BLAS library's build configuration and the kernel it runs with (OpenBLAS's
// openblas_get_config and openblas_get_corename, e.g. "SkylakeX").
const char *cpu_blas_config(void);
const char *cpu_blas_corename(void);

// --- optimizer ---------------------------------------------------------------------
// The AdamW update of n contiguous fp32 values (the backend's adamw_update, which
// optimizer.c's adamw_step calls per slice of a tensor; the CPU counterpart of the CUDA
// backend's cuda_adamw_update, both through backend/adamw_element.h): g·grad_scale into m
// and v, then p = p·keep − step·m / (sqrt(v)·inv_sqrt_bc2 + eps); keep = 1 − lr·weight_decay
// for decayed tensors (else 1), step = lr / (1 − β1^t), inv_sqrt_bc2 = 1 / sqrt(1 − β2^t).
void cpu_adamw_update(float *p, float *m, float *v, const float *g, size_t n, float grad_scale, float b1, float b2,
                      float eps, float keep, float step, float inv_sqrt_bc2);

#endif
