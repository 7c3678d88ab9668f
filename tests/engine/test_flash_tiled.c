// The tiled tensor-core attention's algorithm in C (backend/flash_tiled.h), against the CPU's
// exact flash kernels on every view the CUDA kernels take: the fused core (causal and not,
// grouped queries), context parallelism's all-gather view (queries at zig-zag positions), and
// the ring's blocks (causal and not, out rows beyond the block). Sequence lengths that are and
// are not multiples of the 64-row tiles, head sizes 16, 64 and 128. Without rounding the tiles
// and loop order alone must give the exact kernels' results to fp32's tolerance; with the
// MMAs' bf16 operands, to bf16's. test_cuda_kernels checks the CUDA kernels against this twin.
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "backend/cpu/kernels.h"
#include "backend/flash_tiled.h"
#include "core/rng.h"
#include "tb_test.h"

static tb_rng rng;

static float *randn(size_t n, float s) {
    float *x = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) x[i] = s * tb_rng_normal(&rng);
    return x;
}
static float *zeros(size_t n) { return calloc(n, sizeof(float)); }

// |a − b| ≤ atol + rtol·|b| everywhere; the worst element named
static void close_to(const float *a, const float *b, size_t n, double atol, double rtol, const char *what) {
    size_t worst = 0;
    double excess = -1.0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]) - (atol + rtol * fabs((double)b[i]));
        if (d > excess || isnan(a[i])) excess = isnan(a[i]) ? INFINITY : d, worst = i;
    }
    TB_CHECK(excess <= 0.0, "%s: element %zu is %.7g, the exact kernel's %.7g (atol %g, rtol %g)", what, worst,
             a[worst], b[worst], atol, rtol);
}

// fp32: the same arithmetic in another order; bf16: the MMAs' rounded operands (the CUDA
// kernels' tolerance against the CPU, test_cuda_kernels' BF16_ATOL / BF16_RTOL, doubled for the
// backward's longer chains)
#define F32_ATOL 2e-5
#define F32_RTOL 2e-4
#define BF16_ATOL 2e-2
#define BF16_RTOL 3e-2

// The exact kernels' results for one view: out and lse (whole tensors; the view's rows start
// `at` rows in), dq and dkv (dkv NULL: the fused view, whose dqkv holds both), and the dout.
typedef struct exact {
    const float *out, *lse, *dq, *dkv, *dout;
    size_t nout, nlse, nq, nkv, out_at, lse_at;
} exact;

// The twin on view v, without and with bf16 rounding, against x: the forward from the inputs,
// the backward from the exact kernel's out and lse (its own error alone).
static void twin_matches(const tb_flash_view *v, const exact *x, int B, int NH, int G, int hs, const char *name) {
    for (int bf16 = 0; bf16 <= 1; bf16++) {
        const double atol = bf16 ? BF16_ATOL : F32_ATOL, rtol = bf16 ? BF16_RTOL : F32_RTOL;
        float *out = zeros(x->nout), *lse = zeros(x->nlse), *dq = zeros(x->nq), *dkv = x->dkv ? zeros(x->nkv) : dq;
        float *D = zeros((size_t)B * NH * v->Tq);
        tb_flash_tiled_forward(out + x->out_at, lse + x->lse_at, v, B, NH, G, hs, bf16);
        tb_flash_tiled_backward(dq, dkv, D, x->dout + x->out_at, x->out + x->out_at, x->lse + x->lse_at, v, B, NH, G,
                                hs, bf16);
        char what[160];
        snprintf(what, sizeof what, "%s, %s", name, bf16 ? "bf16" : "fp32");
        close_to(out, x->out, x->nout, atol, rtol, what);  // rows outside the view: zero in both
        close_to(lse, x->lse, x->nlse, atol, rtol, what);
        close_to(dq, x->dq, x->nq, atol, rtol, what);
        if (x->dkv) close_to(dkv, x->dkv, x->nkv, atol, rtol, what), free(dkv);
        free(out), free(lse), free(dq), free(D);
    }
}

// The fused core: out, lse, dqkv of the twin against cpu_flash_attention_*_masked
static void fused_case(int B, int T, int NH, int G, int hs, int causal) {
    const int QKV = (NH + 2 * G) * hs, C = NH * hs;
    const size_t nqkv = (size_t)B * T * QKV, nout = (size_t)B * T * C, nlse = (size_t)B * NH * T;
    float *qkv = randn(nqkv, 1.0f), *dout = randn(nout, 1.0f);
    float *out = zeros(nout), *lse = zeros(nlse), *dqkv = zeros(nqkv);
    float *scratch = zeros(cpu_flash_attention_scratch_floats(T, hs, 1));
    cpu_flash_attention_forward_masked(out, lse, scratch, 1, qkv, B, T, NH, G, hs, causal);
    cpu_flash_attention_backward_masked(dqkv, scratch, 1, dout, out, qkv, lse, B, T, NH, G, hs, causal);
    const tb_flash_view v = tb_flash_view_fused(qkv, T, NH, G, hs, causal);
    const exact x = {out, lse, dqkv, NULL, dout, nout, nlse, nqkv, 0, 0, 0};
    char what[128];
    snprintf(what, sizeof what, "fused B %d T %d NH %d G %d hs %d causal %d", B, T, NH, G, hs, causal);
    twin_matches(&v, &x, B, NH, G, hs, what);
    free(qkv), free(dout), free(out), free(lse), free(dqkv), free(scratch);
}

TB_TEST(fused_core_causal_and_not_every_tile_shape) {
    fused_case(2, 64, 2, 2, 16, 1);    // one tile
    fused_case(2, 150, 4, 2, 16, 1);   // a partial last tile, grouped queries
    fused_case(1, 130, 4, 1, 64, 1);   // GPT-2's head size, one group (MQA)
    fused_case(1, 100, 2, 2, 128, 1);  // the largest head size
    fused_case(2, 90, 4, 2, 32, 0);    // every key visible
}

// Context parallelism's all-gather view: Tq = 2c local queries at positions [r·c, (r+1)·c) and
// [(2cp−1−r)·c, (2cp−r)·c) (the zig-zag), against the whole sequence's K and V (Tk = 2·cp·c).
TB_TEST(context_parallel_view_at_zig_zag_positions) {
    const int B = 2, NH = 4, G = 2, hs = 32, cp = 2, c = 40, Tq = 2 * c, Tk = 2 * cp * c;
    const int QKV = (NH + 2 * G) * hs, KV = 2 * G * hs, C = NH * hs;
    for (int r = 0; r < cp; r++) {
        int32_t qpos[2 * 40];
        for (int i = 0; i < c; i++) qpos[i] = r * c + i, qpos[c + i] = (2 * cp - 1 - r) * c + i;
        const size_t nqkv = (size_t)B * Tq * QKV, nkv = (size_t)B * Tk * KV, nout = (size_t)B * Tq * C;
        const size_t nlse = (size_t)B * NH * Tq;
        float *qkv = randn(nqkv, 1.0f), *kv = randn(nkv, 1.0f), *dout = randn(nout, 1.0f);
        float *out = zeros(nout), *lse = zeros(nlse), *dqkv = zeros(nqkv), *dkv = zeros(nkv);
        float *scratch = zeros(cpu_flash_attention_scratch_floats(Tk, hs, 1));
        cpu_flash_attention_cp_forward(out, lse, scratch, 1, qkv, qpos, kv, B, Tq, Tk, NH, G, hs);
        cpu_flash_attention_cp_backward(dqkv, dkv, scratch, 1, dout, out, qkv, qpos, kv, lse, B, Tq, Tk, NH, G, hs);
        const tb_flash_view v = tb_flash_view_cp(qkv, qpos, kv, Tq, Tk, NH, G, hs);
        const exact x = {out, lse, dqkv, dkv, dout, nout, nlse, nqkv, nkv, 0, 0};
        char what[64];
        snprintf(what, sizeof what, "cp rank %d of %d", r, cp);
        twin_matches(&v, &x, B, NH, G, hs, what);
        free(qkv), free(kv), free(dout), free(out), free(lse), free(dqkv), free(dkv), free(scratch);
    }
}

// The ring's blocks: Tq query rows of a qkv tensor against Tk rows of a kv tensor, every key
// visible (an earlier chunk) or causal by row index (the diagonal block); out and lse hold
// out_rows rows per sample, the block's starting at row 10.
TB_TEST(ring_blocks_causal_and_not) {
    const int B = 2, NH = 2, G = 1, hs = 64, Tq = 70, out_rows = 90, row0 = 10;
    const int QKV = (NH + 2 * G) * hs, KV = 2 * G * hs, C = NH * hs;
    for (int causal = 0; causal <= 1; causal++) {
        const int Tk = causal ? Tq : 100;
        const size_t nqkv = (size_t)B * Tq * QKV, nkv = (size_t)B * Tk * KV, nout = (size_t)B * out_rows * C;
        const size_t nlse = (size_t)B * NH * out_rows;
        float *qkv = randn(nqkv, 1.0f), *kv = randn(nkv, 1.0f), *dout = randn(nout, 1.0f);
        float *out = zeros(nout), *lse = zeros(nlse), *dq = zeros(nqkv), *dkv = zeros(nkv);
        float *scratch = zeros(cpu_flash_attention_scratch_floats(Tq > Tk ? Tq : Tk, hs, 1));
        const cpu_flash_block blk = {qkv, (size_t)Tq * QKV, kv, (size_t)Tk * KV, Tq, Tk, out_rows, causal};
        float *o0 = out + (size_t)row0 * C, *l0 = lse + row0;
        const float *do0 = dout + (size_t)row0 * C;
        cpu_flash_attention_block_forward(o0, l0, scratch, 1, &blk, B, NH, G, hs);
        cpu_flash_attention_block_backward(dq, dkv, scratch, 1, do0, o0, l0, &blk, B, NH, G, hs);
        const tb_flash_view v =
            tb_flash_view_block(qkv, (size_t)Tq * QKV, kv, (size_t)Tk * KV, Tq, Tk, out_rows, causal, NH, G, hs);
        const exact x = {out, lse, dq, dkv, dout, nout, nlse, nqkv, nkv, (size_t)row0 * C, row0};
        twin_matches(&v, &x, B, NH, G, hs, causal ? "ring block, causal" : "ring block, every key visible");
        free(qkv), free(kv), free(dout), free(out), free(lse), free(dq), free(dkv), free(scratch);
    }
}

// The bf16 rounding the twin applies is __float2bfloat16's: to nearest, ties to even.
TB_TEST(bf16_rounding_is_to_nearest_even) {
    TB_CHECK(tb_round_bf16(1.0f) == 1.0f, "1 is a bf16");
    TB_CHECK(tb_round_bf16(1.0f + 0x1p-8f) == 1.0f, "a tie rounds to the even neighbour (down)");
    TB_CHECK(tb_round_bf16(1.0f + 3 * 0x1p-8f) == 1.0f + 0x1p-6f, "a tie rounds to the even neighbour (up)");
    TB_CHECK(tb_round_bf16(1.0f + 0x1p-8f + 0x1p-12f) == 1.0f + 0x1p-7f, "above the tie rounds up");
    TB_CHECK(isnan(tb_round_bf16(NAN)), "NaN stays NaN");
}

int main(void) {
    tb_rng_init(&rng, 17);
    TB_RUN(bf16_rounding_is_to_nearest_even);
    TB_RUN(fused_core_causal_and_not_every_tile_shape);
    TB_RUN(context_parallel_view_at_zig_zag_positions);
    TB_RUN(ring_blocks_causal_and_not);
    return tb_test_summary();
}
