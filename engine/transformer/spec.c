#include "transformer/spec.h"

#include "backend/cpu/kernels.h"

static void layernorm_forward(float *out, float *mean, float *rstd, const float *inp, const float *weight,
                              const float *bias, int N, int C, float eps) {
    cpu_layernorm_forward(out, mean, rstd, inp, weight, bias, N, C, eps);
}

static void layernorm_backward(float *dinp, float *dweight, float *dbias, const float *dout,
                               const float *inp, const float *weight, const float *mean,
                               const float *rstd, int N, int C) {
    cpu_layernorm_backward(dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C);
}

static void rmsnorm_forward(float *out, float *mean, float *rstd, const float *inp, const float *weight,
                            const float *bias, int N, int C, float eps) {
    cpu_rmsnorm_forward(out, rstd, inp, weight, N, C, eps);
}

static void rmsnorm_backward(float *dinp, float *dweight, float *dbias, const float *dout,
                             const float *inp, const float *weight, const float *mean, const float *rstd,
                             int N, int C) {
    cpu_rmsnorm_backward(dinp, dweight, dout, inp, weight, rstd, N, C);
}

static void gelu_forward(float *out, const float *inp, int N, int F) {
    cpu_gelu_forward(out, inp, (size_t)N * F);
}

static void gelu_backward(float *dinp, const float *inp, const float *dout, int N, int F) {
    cpu_gelu_backward(dinp, inp, dout, (size_t)N * F);
}

static const tb_norm_module layernorm = {"LayerNorm", 1, layernorm_forward, layernorm_backward};
static const tb_norm_module rmsnorm = {"RMSNorm", 0, rmsnorm_forward, rmsnorm_backward};
static const tb_activation_module gelu = {"gelu_tanh", 1, gelu_forward, gelu_backward};
static const tb_activation_module swiglu = {"swiglu", 2, cpu_swiglu_forward, cpu_swiglu_backward};
static const tb_core_attention_module dot_product_attention = {
    "dot_product_attention", cpu_attention_forward, cpu_attention_backward};

void transformer_layer_spec_for(const tb_config *cfg, transformer_layer_spec *spec) {
    const tb_norm_module *norm = cfg->normalization == TB_NORM_RMSNORM ? &rmsnorm : &layernorm;
    spec->input_layernorm = norm;
    spec->pre_mlp_layernorm = norm;
    spec->final_layernorm = norm;
    spec->core_attention = &dot_product_attention;
    spec->activation = cfg->swiglu ? &swiglu : &gelu;
}
