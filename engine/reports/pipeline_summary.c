#include "reports/pipeline_summary.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm.h"
#include "core/fileio.h"
#include "core/run_dir.h"
#include "core/xalloc.h"
#include "comm/parallel_state.h"

static int virtual_size(const tb_config *c) {
    return c->virtual_pipeline_model_parallel_size > 1 ? c->virtual_pipeline_model_parallel_size : 1;
}

static double theoretical_bubble(const tb_config *c) {
    return pipeline_theoretical_bubble(c->pipeline_model_parallel_size, c->num_microbatches, virtual_size(c));
}

json_t *pipeline_timeline_json(const tb_config *cfg, int stage, int chunks, const tb_step_timeline *t, double step_ms) {
    double compute = t->forward_ms + t->backward_ms;
    double idle = step_ms - compute - t->p2p_ms - t->optimizer_ms - t->data_ms;
    return json_pack("{s:i, s:i, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f, s:f}", "stage", stage, "chunks", chunks,
                     "exposed_comm_ms", t->exposed_comm_ms, "data_ms",
                     t->data_ms, "forward_ms", t->forward_ms, "backward_ms", t->backward_ms, "p2p_wait_ms", t->p2p_ms,
                     "optimizer_ms",
                     t->optimizer_ms, "idle_ms", idle > 0 ? idle : 0.0, "bubble_fraction",
                     t->pipeline_ms > 0 ? 1.0 - compute / t->pipeline_ms : 0.0, "theoretical_bubble",
                     theoretical_bubble(cfg));
}

void stage_totals_add(stage_totals *s, const tb_step_timeline *t, double step_ms) {
    s->steps++;
    s->forward_ms += t->forward_ms;
    s->backward_ms += t->backward_ms;
    s->p2p_ms += t->p2p_ms;
    s->optimizer_ms += t->optimizer_ms;
    s->pipeline_ms += t->pipeline_ms;
    s->step_ms += step_ms;
}

// What each stage sends rank 0: 8-byte fields only, gathered bit for bit.
typedef struct stage_record {
    stage_figures figures;
    double forward_ms, backward_ms, p2p_ms, optimizer_ms, pipeline_ms, step_ms;  // means over the steps
} stage_record;

_Static_assert(sizeof(stage_record) % sizeof(float) == 0, "gathered as float32 words");

static json_t *stage_json(int s, const stage_record *f, double compute, double bubble) {
    double idle = f->step_ms - compute - f->p2p_ms - f->optimizer_ms;
    return json_pack("{s:i, s:I, s:I, s:f, s:I, s:f, s:f, s:f, s:f, s:f, s:f, s:f}", "stage", s, "parameters",
                     (json_int_t)f->figures.parameters, "layers", (json_int_t)f->figures.layers, "flops_per_step",
                     f->figures.flops_per_step, "peak_activation_bytes", (json_int_t)f->figures.peak_activation_bytes,
                     "forward_ms", f->forward_ms, "backward_ms", f->backward_ms, "p2p_wait_ms", f->p2p_ms,
                     "optimizer_ms", f->optimizer_ms, "idle_ms", idle > 0 ? idle : 0.0, "compute_ms", compute,
                     "bubble_fraction", bubble);
}

// One rank's exact figures ("ranks" of pipeline.json): what it holds and computes.
static json_t *rank_json(const tb_config *c, int r, const stage_figures *f) {
    tb_coords at = parallel_state_coords(c, r);
    return json_pack("{s:i, s:i, s:i, s:i, s:i, s:I, s:I, s:f, s:I}", "rank", r, "tp", at.tp, "cp", at.cp, "dp", at.dp,
                     "pp", at.pp, "parameters", (json_int_t)f->parameters, "layers", (json_int_t)f->layers,
                     "flops_per_step", f->flops_per_step, "peak_activation_bytes",
                     (json_int_t)f->peak_activation_bytes);
}

int pipeline_summary_write(tb_rank *rk, const tb_config *c, const stage_figures *mine, const stage_totals *t,
                           tb_error *err) {
    const int p = c->pipeline_model_parallel_size, v = virtual_size(c);
    const int world = rk->world ? rk->world_size : 1;
    const double n = t->steps > 0 ? (double)t->steps : 1;
    stage_record me = {*mine,          t->forward_ms / n,  t->backward_ms / n, t->p2p_ms / n,
                       t->optimizer_ms / n, t->pipeline_ms / n, t->step_ms / n};
    // every rank's record: the stages are rank 0's pipeline group (its tp, cp and dp
    // coordinates), and every rank's exact figures are reported too (a tensor-parallel rank
    // holds and computes its shard, which the stages alone would not show)
    stage_record *all = tb_xcalloc((size_t)world, sizeof *all, "pipeline stage records");
    if (world > 1) tb_all_gather_bytes(&rk->groups[TB_GROUP_WORLD], &me, all, sizeof me);
    else all[0] = me;
    int rc = 0;
    if (rk->rank == 0) {
        json_t *stages = json_array();
        double slowest = 0, fastest = 1e300, bubble_sum = 0;
        for (int s = 0; s < p; s++) {
            const stage_record *f = &all[world > 1 ? rk->groups[TB_GROUP_PP].ranks[s] : s];
            double compute = f->forward_ms + f->backward_ms;
            double bubble = f->pipeline_ms > 0 ? 1.0 - compute / f->pipeline_ms : 0.0;
            slowest = compute > slowest ? compute : slowest;
            fastest = compute < fastest ? compute : fastest;
            bubble_sum += bubble;
            json_array_append_new(stages, stage_json(s, f, compute, bubble));
        }
        const char *schedule = p == 1 ? "no pipelining" : v > 1 ? "interleaved 1F1B" : "1F1B";
        double imbalance = fastest > 0 ? slowest / fastest : 0.0;
        json_t *ranks = json_array();
        for (int r = 0; r < world; r++) json_array_append_new(ranks, rank_json(c, r, &all[r].figures));
        json_t *summary = json_pack(
            "{s:i, s:i, s:i, s:s, s:I, s:f, s:f, s:f, s:s, s:o, s:s, s:o}", "pipeline_model_parallel_size", p,
            "virtual_pipeline_model_parallel_size", v, "num_microbatches", c->num_microbatches, "schedule", schedule,
            "steps_averaged", (json_int_t)t->steps, "measured_bubble_fraction", bubble_sum / p,
            "theoretical_bubble_fraction", theoretical_bubble(c), "stage_imbalance", imbalance,
            "stage_imbalance_definition",
            "slowest / fastest stage compute (forward + backward) time, mean over steps after the first", "stages",
            stages, "flops_definition",
            "model FLOPs over the step's microbatches: tokens x (6 x the rank's parameters + 12 x its layers x "
            "hidden / tp x seq), the formula of the whole model applied to what the rank holds and its heads",
            "ranks", ranks);
        char path[TB_PATH_MAX + 32];
        rc = tb_run_path(path, sizeof path, rk->run_dir, TB_RUN_PIPELINE, err);
        if (rc == 0) rc = tb_write_json_atomic(path, summary, err);
        json_decref(summary);
        if (rc == 0 && p > 1)
            printf("pipeline: %s, measured bubble %.3f (theoretical %.3f), stage imbalance %.2fx\n", schedule,
                   bubble_sum / p, theoretical_bubble(c), imbalance);
    }
    free(all);
    return rc;
}
