// cpu_backend.c — the CPU table of the dispatch (backend.h): host memory, the cpu_* kernels
// (kernels.h, moe_kernels.h), the default backend of every thread (tb_be).
#include <string.h>

#include "backend/backend.h"
#include "backend/cpu/kernels.h"
#include "backend/cpu/moe_kernels.h"

static void cpu_copy(void *dst, const void *src, size_t bytes) {
    if (dst != src) memcpy(dst, src, bytes);
}
static void cpu_zero(void *dst, size_t bytes) { memset(dst, 0, bytes); }
static void cpu_synchronize(void) {}

// (row-parallel linear's bias, tensor_parallel/layers.c, as it was)
static void cpu_add_bias(float *out, const float *bias, int rows, int OC) {
#pragma omp parallel for schedule(static)
    for (int n = 0; n < rows; n++) {
        float *o = out + (size_t)n * OC;
        for (int j = 0; j < OC; j++) o[j] += bias[j];
    }
}
static void cpu_bias_backward(float *dbias, const float *dout, int rows, int OC) {
    for (int n = 0; n < rows; n++) {
        const float *g = dout + (size_t)n * OC;
        for (int j = 0; j < OC; j++) dbias[j] += g[j];
    }
}
static void cpu_scale(float *out, const float *inp, float s, size_t n) {
    for (size_t i = 0; i < n; i++) out[i] = inp[i] * s;
}
static void cpu_flash_forward(float *out, float *lse, float *scratch, int threads, const float *qkv, int B, int T,
                              int NH, int G, int hs) {
    cpu_flash_attention_forward(out, lse, scratch, threads, qkv, B, T, NH, G, hs, 1);
}
static void cpu_flash_backward(float *dqkv, float *scratch, int threads, const float *dout, const float *out,
                               const float *qkv, const float *lse, int B, int T, int NH, int G, int hs) {
    cpu_flash_attention_backward(dqkv, scratch, threads, dout, out, qkv, lse, B, T, NH, G, hs, 1);
}

static const tb_backend cpu_backend = {
    .name = "cpu",
    .host = 1,
    .copy = cpu_copy,
    .zero = cpu_zero,
    .copy_to_host = cpu_copy,
    .copy_from_host = cpu_copy,
    .synchronize = cpu_synchronize,
    .matmul_forward = cpu_matmul_forward,
    .matmul_backward = cpu_matmul_backward,
    .add_bias = cpu_add_bias,
    .bias_backward = cpu_bias_backward,
    .layernorm_forward = cpu_layernorm_forward,
    .layernorm_backward = cpu_layernorm_backward,
    .rmsnorm_forward = cpu_rmsnorm_forward,
    .rmsnorm_backward = cpu_rmsnorm_backward,
    .gelu_forward = cpu_gelu_forward,
    .gelu_backward = cpu_gelu_backward,
    .swiglu_forward = cpu_swiglu_forward,
    .swiglu_backward = cpu_swiglu_backward,
    .add = cpu_add,
    .add_inplace = cpu_add_inplace,
    .scale = cpu_scale,
    .attention_forward = cpu_attention_forward,
    .attention_backward = cpu_attention_backward,
    .flash_attention_forward = cpu_flash_forward,
    .flash_attention_backward = cpu_flash_backward,
    .rope_apply = cpu_rope_apply,
    .flash_attention_cp_forward = cpu_flash_attention_cp_forward,
    .flash_attention_cp_backward = cpu_flash_attention_cp_backward,
    .cp_pack_kv = cpu_cp_pack_kv,
    .cp_add_kv_grads = cpu_cp_add_kv_grads,
    .cp_rank_major_to_positions = cpu_cp_rank_major_to_positions,
    .cp_positions_to_rank_major = cpu_cp_positions_to_rank_major,
    .flash_attention_block_forward = cpu_flash_attention_block_forward,
    .flash_attention_block_backward = cpu_flash_attention_block_backward,
    .cp_merge_partial = cpu_cp_merge_partial,
    .embedding_forward = cpu_embedding_forward,
    .embedding_backward = cpu_embedding_backward,
    .add_positions = cpu_add_positions,
    .ce_row_max = cpu_ce_row_max,
    .ce_target_logit = cpu_ce_target_logit,
    .ce_exp_sum = cpu_ce_exp_sum,
    .ce_normalize = cpu_ce_normalize,
    .cross_entropy_backward = cpu_cross_entropy_backward,
    .adamw_update = cpu_adamw_update,
    .sum_squares = cpu_sum_squares,
    // --- MoE ---
    .moe_router_forward = cpu_moe_router_forward,
    .moe_router_backward = cpu_moe_router_backward,
    .moe_aux_score_sums = cpu_moe_aux_score_sums,
    .moe_permute = cpu_moe_permute,
    .moe_permute_backward = cpu_moe_permute_backward,
    .moe_unpermute = cpu_moe_unpermute,
    .moe_unpermute_backward = cpu_moe_unpermute_backward,
    .grouped_matmul_forward = cpu_grouped_matmul_forward,
    .grouped_matmul_backward = cpu_grouped_matmul_backward,
};

const tb_backend *tb_backend_cpu(void) { return &cpu_backend; }
