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

#include "backend/kernel_table.h"

// The kernels of the dispatch (backend/kernel_table.h: shapes and conventions there),
// declared from its list: `ret cpu_<name>(parameters)` for every line.
#define TB_CPU_KERNEL_DECLARATION(side, ret, name, params, args) ret cpu_##name params;
TB_KERNEL_TABLE(TB_CPU_KERNEL_DECLARATION)
#undef TB_CPU_KERNEL_DECLARATION

// Σ x² in double, in fixed blocks of 65,536 added in order (the same bits for any thread
// count): what sum_squares_add adds, and the CUDA kernel's twin in its test.
double cpu_sum_squares(const float *x, size_t n);

// Blocked causal attention (FlashAttention-2's algorithm, flash_attention.c): the table's
// flash_attention_forward / _backward with the mask a parameter — causal 0: every position
// sees every other (the engine's GPT is always causal; tests use both). scratch:
// cpu_flash_attention_scratch_floats(T, hs, threads) floats.
size_t cpu_flash_attention_scratch_floats(int T, int hs, int threads);
void cpu_flash_attention_forward_masked(float *out, float *lse, float *scratch, int threads, const float *qkv, int B,
                                        int T, int NH, int G, int hs, int causal);
void cpu_flash_attention_backward_masked(float *dqkv, float *scratch, int threads, const float *dout,
                                         const float *out, const float *qkv, const float *lse, int B, int T, int NH,
                                         int G, int hs, int causal);
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
// x[i] = exp(x[i] − shift) for i < n (finite values: activations.c's vector expf); returns
// their sum. One thread's row: the caller parallelises.
float cpu_exp_shifted(float *x, int n, float shift);

// --- rotary position embedding (RoPE, Megatron's RotaryEmbedding) ---------------------
// The rotation of position t: angle t · base^(−2i / dim) for channel pair i < dim / 2, as
// cos and sin tables (T, dim / 2), computed in double and rounded once.
void cpu_rope_tables(float *cos_t, float *sin_t, int T, int dim, double base);
// The same for rows at positions pos[0..T) (context parallelism's local tokens).
void cpu_rope_tables_at(float *cos_t, float *sin_t, const int32_t *pos, int T, int dim, double base);

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
// conditions.json measures the contention, and prove refuses its timings (docs/PERFORMANCE.md,
// "Thread policy"). A policy in the environment is always respected.
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

#endif
