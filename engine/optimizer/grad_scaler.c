// grad_scaler.c — see grad_scaler.h.
#include "optimizer/grad_scaler.h"

void tb_grad_scaler_init(tb_grad_scaler *s) {
    *s = (tb_grad_scaler){4294967296.0f, 1.0f, 2.0f, 0.5f, 1000, 2, 0, 2};
}

void tb_grad_scaler_update(tb_grad_scaler *s, int found_inf) {
    if (found_inf) {
        s->growth_tracker = 0;
        s->hysteresis_tracker--;
        if (s->hysteresis_tracker <= 0) {
            const float backed_off = s->scale * s->backoff_factor;
            s->scale = backed_off > s->min_scale ? backed_off : s->min_scale;
        }
        return;
    }
    s->growth_tracker++;
    if (s->growth_tracker == s->growth_interval) {
        s->growth_tracker = 0;
        s->hysteresis_tracker = s->hysteresis;
        s->scale *= s->growth_factor;
    }
}
