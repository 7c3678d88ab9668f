#include "core/shapes/saved_tensors.h"

int64_t tb_attention_saved_floats(int flash, int64_t B, int64_t T, int64_t NH, int selective) {
    if (flash) return B * NH * T;       // the log-sum-exp of each row
    return selective ? 0 : B * NH * T * T;  // the probabilities
}

void tb_layer_saved_floats(const tb_layer_saved_shape *s, int64_t floats[TB_LAYER_SAVED]) {
    const int64_t N = s->B * s->T, qk = s->qk_norm ? 1 : 0, hs = s->NH ? s->CA / s->NH : 0;
    const int64_t f[TB_LAYER_SAVED] = {
        N * s->C,   s->Ns,    s->Ns,    N * s->QKV,
        tb_attention_saved_floats(s->flash, s->B, s->T, s->NH, s->selective),
        N * s->CA,  s->Ns * s->C, N * s->C, s->Ns, s->Ns,
        s->moe ? 0 : N * s->F1, s->moe ? 0 : N * s->F,
        qk * N * s->NH * hs, qk * N * s->NH, qk * N * s->NH, qk * N * s->G * hs, qk * N * s->G, qk * N * s->G,
    };
    for (int i = 0; i < TB_LAYER_SAVED; i++) floats[i] = f[i];
}

void tb_moe_saved_floats(const tb_moe_saved_shape *s, int64_t floats[TB_MOE_SAVED]) {
    const int64_t Nk = s->Ns * s->k;
    const int64_t f[TB_MOE_SAVED] = {
        s->Ns * s->E, Nk, Nk, Nk, s->E, s->E, Nk, s->M, s->etp * s->ep * s->E, s->E_local, s->M * s->C,
        s->shared_rows * s->Fs1, s->shared_rows * s->Fs,
    };
    for (int i = 0; i < TB_MOE_SAVED; i++) floats[i] = f[i];
}
