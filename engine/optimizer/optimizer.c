#include "optimizer/optimizer.h"

#include <math.h>

#include "backend/cpu/kernels.h"

void adamw_init(tb_adamw *opt, const tb_config *cfg, size_t num_parameters, tb_allocator *mem) {
    opt->n = num_parameters;
    opt->mem = mem;
    opt->t = 0;
    opt->beta1 = (float)cfg->adam_beta1;
    opt->beta2 = (float)cfg->adam_beta2;
    opt->eps = (float)cfg->adam_eps;
    opt->weight_decay = (float)cfg->weight_decay;
    opt->m = tb_calloc(mem, TB_MEM_OPTIMIZER, num_parameters * sizeof(float), "adam exp_avg");
    opt->v = tb_calloc(mem, TB_MEM_OPTIMIZER, num_parameters * sizeof(float), "adam exp_avg_sq");
}

void adamw_free(tb_adamw *opt) {
    tb_free(opt->mem, opt->m);
    tb_free(opt->mem, opt->v);
    opt->m = opt->v = NULL;
}

void adamw_step(tb_adamw *opt, const gpt_param *table, int nparams, float *params, const float *grads,
                float grad_scale, float lr) {
    opt->t++;
    const float b1 = opt->beta1, b2 = opt->beta2, eps = opt->eps;
    const float bc1 = 1.0f - powf(b1, (float)opt->t), bc2 = 1.0f - powf(b2, (float)opt->t);
    // lr / bc1 and 1 / sqrt(bc2) folded once: p -= step · m / (sqrt(v)·inv_sqrt_bc2 + eps)
    const float step = lr / bc1, inv_sqrt_bc2 = 1.0f / sqrtf(bc2);
    for (int i = 0; i < nparams; i++) {
        const gpt_param *e = &table[i];
        const float keep = e->decay ? 1.0f - lr * opt->weight_decay : 1.0f;
        float *p = params + e->offset, *m = opt->m + e->offset, *v = opt->v + e->offset;
        const float *g = grads + e->offset;
        const size_t n = e->numel;
#pragma omp parallel for schedule(static)
        for (size_t j = 0; j < n; j++) {
            float gj = g[j] * grad_scale;
            float mj = b1 * m[j] + (1.0f - b1) * gj;
            float vj = b2 * v[j] + (1.0f - b2) * gj * gj;
            m[j] = mj;
            v[j] = vj;
            p[j] = p[j] * keep - step * mj / (sqrtf(vj) * inv_sqrt_bc2 + eps);
        }
    }
}

double clip_grads_global_norm(const float *grads, size_t n) { return sqrt(cpu_sum_squares(grads, n)); }

float clip_grads_coefficient(double norm, double max_norm) {
    if (max_norm <= 0) return 1.0f;
    double coeff = max_norm / (norm + 1e-6);
    return coeff < 1.0 ? (float)coeff : 1.0f;
}

double lr_at_step(const tb_config *cfg, int64_t step) {
    const double max_lr = cfg->lr, min_lr = cfg->min_lr;
    const int64_t warmup = cfg->lr_warmup_iters, decay = cfg->lr_decay_iters;
    if (warmup > 0 && step <= warmup) return max_lr * (double)step / (double)warmup;
    if (cfg->lr_decay_style == TB_LR_CONSTANT) return max_lr;
    if (step > decay) return min_lr;
    double ratio = decay > warmup ? (double)(step - warmup) / (double)(decay - warmup) : 1.0;
    double coeff = cfg->lr_decay_style == TB_LR_COSINE ? 0.5 * (cos(M_PI * ratio) + 1.0) : 1.0 - ratio;
    return min_lr + coeff * (max_lr - min_lr);
}
