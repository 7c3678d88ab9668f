// plan_fsdp.c — see plan_fsdp.h.
#include "planner/plan_fsdp.h"

#include <stdlib.h>
#include <string.h>

#include "core/xalloc.h"

// A unit's use of its parameters: its forward (a recomputed one too) or its backward.
typedef struct use {
    int unit, backward, first;  // first: a microbatch's first use
} use;

typedef struct walk {
    const plan_fsdp_shape *s;
    int units;                 // the embedding's (when held), the layers', the head's (when held)
    int first;                 // layer 0's unit: 1 with the embedding, else 0
    int64_t *off, *cut, *size; // per unit: its first element, its bucket's start, the bucket's length
    unsigned char *gathered, *held, *done;  // per bucket, per bucket, per unit (this microbatch)
    int *reducing;             // per bucket: the unit_done that posted its reduce-scatter (drain), else -1
    int dones;                 // unit_done calls so far
    int last_post;             // the last of them that posted a reduce-scatter (drain), else -1
    use *uses;                 // the step's uses in order (nuses)
    int nuses;
    plan_fsdp_figures *out;
} walk;

// Whether unit u has elements in bucket b: its own, and the next when its last elements sit
// below the next cut.
static int touches(const walk *w, int u, int b) {
    return b == u || (b == u + 1 && u + 1 < w->units && w->off[u + 1] > w->cut[u + 1]);
}

// Whether the forward or backward of unit u reads (writes) bucket b: its own buckets, and the
// tied embedding's by the output layer.
static int needs(const walk *w, int u, int b) {
    const plan_fsdp_shape *s = w->s;
    const int head = s->has_head && u == w->units - 1;
    return touches(w, u, b) || (s->tied && s->has_embedding && head && touches(w, 0, b));
}

// Use k of the step: unit u's forward or backward (next: the use after it, prefetched, or -1).
static void acquire(walk *w, int u, int backward, int next) {
    int64_t held = 0, gathered = 0;
    for (int b = 0; b < w->units; b++) {
        const int need = needs(w, u, b), keep = need || (next >= 0 && needs(w, next, b));
        // the drain: before a backward, the reduce-scatters older than the last unit's, and
        // those of the buckets it writes again, done and given back
        if (backward && w->reducing[b] >= 0 && (w->reducing[b] < w->last_post || need)) w->held[b] = 0;
        if (!w->held[b]) w->reducing[b] = -1;
        if (backward && need) w->held[b] = 1;  // its gradients committed whole
        held += w->held[b] ? w->size[b] : 0;
        if (!w->s->shard_params) continue;
        if (keep && !w->gathered[b]) w->out->gathered_elements += (double)w->size[b];
        w->gathered[b] = (unsigned char)keep;  // (the others given back first)
        if (keep) gathered += w->size[b] - w->size[b] / w->s->dpcp;
    }
    if (held > w->out->grads_held_peak) w->out->grads_held_peak = held;
    if (gathered > w->out->gathered_peak) w->out->gathered_peak = gathered;
}

static void add_use(walk *w, int unit, int backward, int first) { w->uses[w->nuses++] = (use){unit, backward, first}; }

// Unit u's gradients of the microbatch are final: each held bucket whose every unit is done is
// reduce-scattered and given back.
static void unit_done(walk *w, int u) {
    w->done[u] = 1;
    for (int b = 0; b < w->units; b++) {
        if (!w->held[b] || w->reducing[b] >= 0) continue;  // (in flight: reduced already)
        int complete = 1;
        for (int v = 0; v < w->units && complete; v++)
            if (touches(w, v, b) && !w->done[v]) complete = 0;
        if (!complete) continue;
        w->out->reduced_elements += (double)w->size[b];
        if (w->s->drain) {
            if (w->reducing[b] < 0) w->reducing[b] = w->last_post = w->dones;  // held while in flight
        } else {
            w->held[b] = 0;
        }
    }
    w->dones++;
}

int plan_fsdp_walk(const plan_fsdp_shape *s, plan_fsdp_figures *out) {
    memset(out, 0, sizeof *out);
    if (s->layers + s->has_embedding + s->has_head < 1 || s->dpcp < 1) return -1;
    walk w = {.s = s, .units = s->has_embedding + s->layers + s->has_head, .first = s->has_embedding, .out = out};
    const int n = w.units, L = s->layers;
    w.off = tb_xcalloc((size_t)n, sizeof *w.off, "fsdp walk");
    w.cut = tb_xcalloc((size_t)n, sizeof *w.cut, "fsdp walk");
    w.size = tb_xcalloc((size_t)n, sizeof *w.size, "fsdp walk");
    w.gathered = tb_xcalloc((size_t)n, 1, "fsdp walk");
    w.held = tb_xcalloc((size_t)n, 1, "fsdp walk");
    w.done = tb_xcalloc((size_t)n, 1, "fsdp walk");
    for (int u = 1; u < n; u++)
        w.off[u] = w.off[u - 1] + (u - 1 < w.first ? s->embedding : s->layer);  // (the head's last: no unit after)
    for (int u = 1; u < n; u++) w.cut[u] = w.off[u] / s->dpcp * s->dpcp;
    for (int u = 0; u < n; u++) w.size[u] = (u + 1 < n ? w.cut[u + 1] : s->padded) - w.cut[u];
    w.reducing = tb_xcalloc((size_t)n, sizeof *w.reducing, "fsdp walk");
    w.last_post = -1;
    for (int b = 0; b < n; b++) w.reducing[b] = -1;
    // the step's uses: each microbatch's forward (embedding, layers, head), then its backward
    // (head, layers down, a recomputed chunk's forward again before its last layer's, embedding)
    w.uses = tb_xcalloc((size_t)s->microbatches * (size_t)(3 * n + 1) + 1, sizeof *w.uses, "fsdp walk");
    const int head = s->has_head ? n - 1 : -1, emb = s->has_embedding ? 0 : -1;
    for (int mb = 0; mb < s->microbatches; mb++) {
        for (int u = 0; u < n; u++) add_use(&w, u, 0, u == 0);
        if (head >= 0) add_use(&w, head, 1, 0);
        for (int l = L - 1; l >= 0; l--) {
            if (s->recompute && s->recompute[l] && l == s->chunk_start[l] + s->chunk_len[l] - 1)
                for (int j = s->chunk_start[l]; j <= l; j++) add_use(&w, w.first + j, 0, 0);
            add_use(&w, w.first + l, 1, 0);
        }
        if (emb >= 0) add_use(&w, emb, 1, 0);
    }
    for (int k = 0; k < w.nuses; k++) {
        const use *x = &w.uses[k];
        if (x->first) memset(w.done, 0, (size_t)n);
        acquire(&w, x->unit, x->backward, s->prefetch && k + 1 < w.nuses ? w.uses[k + 1].unit : -1);
        if (x->backward) unit_done(&w, x->unit);
    }
    free(w.off), free(w.cut), free(w.size), free(w.gathered), free(w.held), free(w.done), free(w.reducing);
    free(w.uses);
    return 0;
}
