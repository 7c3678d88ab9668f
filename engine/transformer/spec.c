#include "transformer/spec.h"

#include "backend/backend.h"
#include "backend/cpu/kernels.h"

static void layernorm_forward(float *out, float *mean, float *rstd, const float *inp, const float *weight,
                              const float *bias, int N, int C, float eps) {
    tb_be()->layernorm_forward(out, mean, rstd, inp, weight, bias, N, C, eps);
}

static void layernorm_backward(float *dinp, float *dweight, float *dbias, const float *dout,
                               const float *inp, const float *weight, const float *mean,
                               const float *rstd, int N, int C) {
    tb_be()->layernorm_backward(dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C);
}

static void rmsnorm_forward(float *out, float *mean, float *rstd, const float *inp, const float *weight,
                            const float *bias, int N, int C, float eps) {
    tb_be()->rmsnorm_forward(out, rstd, inp, weight, N, C, eps);
}

static void rmsnorm_backward(float *dinp, float *dweight, float *dbias, const float *dout,
                             const float *inp, const float *weight, const float *mean, const float *rstd,
                             int N, int C) {
    tb_be()->rmsnorm_backward(dinp, dweight, dout, inp, weight, rstd, N, C);
}

static void gelu_forward(float *out, const float *inp, int N, int F) {
    tb_be()->gelu_forward(out, inp, (size_t)N * F);
}

static void gelu_backward(float *dinp, const float *inp, const float *dout, int N, int F) {
    tb_be()->gelu_backward(dinp, inp, dout, (size_t)N * F);
}

static const tb_norm_module layernorm = {"LayerNorm", 1, layernorm_forward, layernorm_backward};
static const tb_norm_module rmsnorm = {"RMSNorm", 0, rmsnorm_forward, rmsnorm_backward};
static const tb_activation_module gelu = {"gelu_tanh", 1, gelu_forward, gelu_backward};
static void swiglu_forward(float *out, const float *inp, int N, int F) { tb_be()->swiglu_forward(out, inp, N, F); }
static void swiglu_backward(float *dinp, const float *inp, const float *dout, int N, int F) {
    tb_be()->swiglu_backward(dinp, inp, dout, N, F);
}
static const tb_activation_module swiglu = {"swiglu", 2, swiglu_forward, swiglu_backward};
static size_t local_scratch_floats(int T, int hs, int threads) { return 2 * (size_t)T * T; }
static void local_forward(float *out, float *probs, float *scratch, int threads, const float *qkv, int B, int T,
                          int NH, int G, int hs) {
    tb_be()->attention_forward(out, probs, scratch, qkv, B, T, NH, G, hs);  // BLAS threads over the whole core
}
static void local_backward(float *dqkv, float *scratch, int threads, const float *dout, const float *out,
                           const float *qkv, const float *probs, int B, int T, int NH, int G, int hs) {
    tb_be()->attention_backward(dqkv, scratch, dout, qkv, probs, B, T, NH, G, hs);
}
static void flash_forward(float *out, float *lse, float *scratch, int threads, const float *qkv, int B, int T, int NH,
                          int G, int hs) {
    tb_be()->flash_attention_forward(out, lse, scratch, threads, qkv, B, T, NH, G, hs);
}
static void flash_backward(float *dqkv, float *scratch, int threads, const float *dout, const float *out,
                           const float *qkv, const float *lse, int B, int T, int NH, int G, int hs) {
    tb_be()->flash_attention_backward(dqkv, scratch, threads, dout, out, qkv, lse, B, T, NH, G, hs);
}

static const tb_core_attention_module dot_product_attention = {
    "dot_product_attention", 0, local_scratch_floats, local_forward, local_backward};
static const tb_core_attention_module flash_attention = {
    "flash_attention", 1, cpu_flash_attention_scratch_floats, flash_forward, flash_backward};

void transformer_layer_spec_for(const tb_config *cfg, transformer_layer_spec *spec) {
    const tb_norm_module *norm = cfg->normalization == TB_NORM_RMSNORM ? &rmsnorm : &layernorm;
    spec->input_layernorm = norm;
    spec->pre_mlp_layernorm = norm;
    spec->final_layernorm = norm;
    spec->q_layernorm = spec->k_layernorm = cfg->qk_layernorm ? norm : NULL;
    spec->core_attention = config_attention_core(cfg) == TB_ATTENTION_FLASH ? &flash_attention : &dot_product_attention;
    spec->activation = cfg->swiglu ? &swiglu : &gelu;
}
