// grad_scaler.h — Megatron-Core's DynamicGradScaler (optimizer/grad_scaler.py), for --fp16.
// The backward's seed is multiplied by `scale`, so that small gradients survive the fp16
// copies of the GEMMs' operands; the optimizer divides it out again (AdamW's grad_scale,
// the gradient norm). A step whose gradients overflowed — its gradient norm, summed over the
// world, is Inf or NaN — is skipped (no AdamW update) and counts against the hysteresis; once
// that is spent every such step halves the scale (not below min_scale). After growth_interval
// steps in a row without one, the scale doubles and the hysteresis is restored.
//
// Megatron's defaults (--initial-loss-scale 2^32, --min-loss-scale 1, --loss-scale-window
// 1000, --hysteresis 2, growth 2, backoff 0.5) are the engine's; they are not flags yet.
#ifndef TB_OPTIMIZER_GRAD_SCALER_H
#define TB_OPTIMIZER_GRAD_SCALER_H

typedef struct tb_grad_scaler {
    float scale, min_scale, growth_factor, backoff_factor;
    int growth_interval, hysteresis;
    int growth_tracker, hysteresis_tracker;
} tb_grad_scaler;

void tb_grad_scaler_init(tb_grad_scaler *s);
// After a step's gradients are known: found_inf 1 when they overflowed (the step is skipped).
void tb_grad_scaler_update(tb_grad_scaler *s, int found_inf);

#endif
