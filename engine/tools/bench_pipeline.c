// bench_pipeline — the pipeline's bubble and balance, measured, next to theory.
//
//   build/bin/bench_pipeline                 both experiments below
//   build/bin/bench_pipeline --bubble-only   (or --pp8-only)
//
// 1. Bubble curve: pp 4 at a fixed global batch of 32 samples, m ∈ {4, 8, 16, 32}
//    microbatches (micro batch 32/m): the measured bubble (the share of the forward/backward
//    schedule a stage spends not computing, mean over stages and steps after the first) next
//    to the theoretical (p − 1)/(m + p − 1).
// 2. PP8/M16: pp 8 with 16 microbatches against pp 1 at the same global batch on a 16-layer
//    model: speed-up (median step time) and stage imbalance (slowest / fastest stage
//    compute).
// Every rank is a thread of this process; on a machine with fewer cores than ranks the
// stages share cores, which the measured bubble and speed-up include. Each run leaves its
// artifacts under artifacts/bench_pipeline/.
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend/cpu/kernels.h"
#include "config.h"
#include "core/run_dir.h"
#include "training.h"

typedef struct run_figures {
    double step_ms;              // median of the slowest rank's step time, steps after the first
    double measured_bubble, theoretical_bubble, imbalance;
} run_figures;

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static int run(const char *name, int layers, int pp, int micro, int global, run_figures *out) {
    tb_config cfg;
    config_defaults(&cfg);
    cfg.num_layers = layers, cfg.hidden_size = 256, cfg.num_attention_heads = 4, cfg.seq_length = 128;
    cfg.vocab_size = 256, cfg.micro_batch_size = micro, cfg.global_batch_size = global, cfg.train_iters = 4;
    cfg.pipeline_model_parallel_size = pp, cfg.world_size = pp, cfg.log_interval = 1000;
    snprintf(cfg.run_dir, sizeof cfg.run_dir, "artifacts/bench_pipeline/%s", name);
    config_resolve(&cfg);
    tb_error err;
    if (config_validate(&cfg, &err) != 0 || pretrain(&cfg, NULL, &err) != 0) {
        fprintf(stderr, "bench_pipeline: %s: %s\n", name, err.msg);
        return -1;
    }
    char path[TB_PATH_MAX + 64];
    json_t *p = tb_run_path(path, sizeof path, cfg.run_dir, TB_RUN_PIPELINE, &err) == 0 ? json_load_file(path, 0, NULL)
                                                                                       : NULL;
    FILE *f = tb_rank_file_path(path, sizeof path, cfg.run_dir, TB_RANK_METRICS, 0, &err) == 0 ? fopen(path, "r") : NULL;
    if (!p || !f) {
        fprintf(stderr, "bench_pipeline: %s: artifacts missing\n", name);
        if (f) fclose(f);
        json_decref(p);
        return -1;
    }
    out->measured_bubble = json_number_value(json_object_get(p, "measured_bubble_fraction"));
    out->theoretical_bubble = json_number_value(json_object_get(p, "theoretical_bubble_fraction"));
    out->imbalance = json_number_value(json_object_get(p, "stage_imbalance"));
    json_decref(p);
    double ms[64];
    int n = 0;
    char line[1 << 14];
    while (fgets(line, sizeof line, f) && n < 64) {
        json_t *m = json_loads(line, 0, NULL);
        if (json_integer_value(json_object_get(m, "step")) > 1)
            ms[n++] = json_number_value(json_object_get(m, "slowest_rank_step_ms"));
        json_decref(m);
    }
    fclose(f);
    qsort(ms, (size_t)n, sizeof *ms, cmp_double);
    out->step_ms = n ? ms[n / 2] : NAN;
    return 0;
}

int main(int argc, char **argv) {
    cpu_runtime_select(argv);
    int bubble = 1, pp8 = 1;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--bubble-only")) pp8 = 0;
        else if (!strcmp(argv[i], "--pp8-only")) bubble = 0;
        else {
            fprintf(stderr, "bench_pipeline: unknown flag '%s' (--bubble-only, --pp8-only)\n", argv[i]);
            return 2;
        }
    }
    // the engine's own output goes to a log; this tool prints the figures
    if (!freopen("artifacts/bench_pipeline.log", "w", stdout)) {
        fprintf(stderr, "bench_pipeline: run from the repository root (artifacts/ must exist)\n");
        return 2;
    }
    FILE *out = fdopen(dup(2), "w");
    fprintf(out, "bench_pipeline: GPT hidden 256, 4 heads, seq 128, vocab 256; 4 steps, the first not counted\n");
    fprintf(out, "BLAS: %s\n\n", cpu_blas_name());
    if (bubble) {
        fprintf(out, "1. bubble curve: pp 4, 8 layers, global batch 32\n");
        fprintf(out, "   %4s %6s %18s %20s %10s\n", "m", "micro", "measured bubble", "theoretical bubble", "step ms");
        int ms[] = {4, 8, 16, 32};
        for (int i = 0; i < 4; i++) {
            char name[32];
            snprintf(name, sizeof name, "pp4_m%d", ms[i]);
            run_figures r;
            if (run(name, 8, 4, 32 / ms[i], 32, &r) != 0) return 1;
            fprintf(out, "   %4d %6d %18.3f %20.3f %10.1f\n", ms[i], 32 / ms[i], r.measured_bubble,
                    r.theoretical_bubble, r.step_ms);
            fflush(out);
        }
        fprintf(out, "\n");
    }
    if (pp8) {
        fprintf(out, "2. PP8/M16: 16 layers, micro batch 1, global batch 16\n");
        run_figures one, eight;
        if (run("pp1_m16", 16, 1, 1, 16, &one) != 0 || run("pp8_m16", 16, 8, 1, 16, &eight) != 0) return 1;
        fprintf(out, "   pp 1: %.1f ms/step\n", one.step_ms);
        fprintf(out, "   pp 8: %.1f ms/step, speed-up %.2fx, measured bubble %.3f (theoretical %.3f), "
                     "stage imbalance %.2fx\n",
                eight.step_ms, one.step_ms / eight.step_ms, eight.measured_bubble, eight.theoretical_bubble,
                eight.imbalance);
    }
    return 0;
}
