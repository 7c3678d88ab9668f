// ckpt_cli.c — `tracebook ckpt RUN [--json]` (ckpt_cli.h): for every save, its total time
// and training's stall, the last rank to reach the barrier, by how long and the phase that
// made it late; then each rank's phases (ms and bytes) and its barrier arrival. "All ranks
// waited 5 minutes at the barrier" reads here as one late rank and the phase it was late in.
#include "inspect/ckpt_cli.h"

#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include "core/error.h"
#include "core/options.h"
#include "core/run_arg.h"
#include "core/run_dir.h"

typedef struct ckpt_args {
    int json;
    const char *artifacts;
} ckpt_args;

static const tb_option ckpt_options[] = {
    TB_OPTION("--json", ckpt_args, json, TB_OPT_BOOL, "false", NULL, "print checkpoint.json itself"),
    TB_ARTIFACTS_OPTION(ckpt_args, artifacts),
    TB_OPTIONS_END,
};

static const tb_command ckpt_command = {
    "tracebook ckpt", "RUN",
    "A run's checkpoint saves (checkpoint.json): each save's phases per rank (materialize, serialize,\n"
    "write, fsync, barrier, metadata, commit), the last rank to arrive and the phase that made it late,\n"
    "and the stall training saw. RUN is a run id (or a unique prefix), a record directory or a run\n"
    "directory (docs/CLI.md).",
    ckpt_options, 1, 1, "tracebook ckpt 20261129T104512 --json", NULL};

static double num(const json_t *o, const char *key) { return json_number_value(json_object_get(o, key)); }

int tracebook_ckpt_main(int argc, char **argv) {
    ckpt_args a = {0};
    tb_positional pos = {0};
    tb_error err;
    int rc = tb_command_parse(&ckpt_command, &a, argc, argv, &pos, &err);
    if (rc == 1) return 0;
    if (rc != 0) return tb_command_usage_error(&ckpt_command, &err);
    char path[4096];
    tb_run_arg run;
    rc = tb_run_arg_resolve(pos.items[0], a.artifacts, &run, &err);
    if (rc == 0) rc = tb_run_path(path, sizeof path, run.run_dir, TB_RUN_CHECKPOINT, &err);
    tb_positional_free(&pos);
    if (rc != 0) {
        fprintf(stderr, "tracebook ckpt: %s\n", err.msg);
        return 1;
    }
    json_error_t jerr;
    json_t *doc = json_load_file(path, 0, &jerr);
    json_t *saves = json_object_get(doc, "saves");
    if (!doc || !json_is_array(saves)) {
        if (doc) fprintf(stderr, "tracebook ckpt: %s: no \"saves\" array (not a checkpoint.json)\n", path);
        else if (jerr.line < 1)  // not opened: jansson's text says why
            fprintf(stderr, "tracebook ckpt: %s\n", jerr.text);
        else fprintf(stderr, "tracebook ckpt: %s: line %d, column %d: %s\n", path, jerr.line, jerr.column, jerr.text);
        json_decref(doc);
        return 1;
    }
    if (a.json) {
        json_dumpf(doc, stdout, JSON_INDENT(1));
        printf("\n");
        json_decref(doc);
        return 0;
    }
    size_t i;
    json_t *s;
    json_array_foreach(saves, i, s) {
        json_t *last = json_object_get(s, "last_arriver");
        printf("iteration %lld  %s  %s: total %.1f ms, training stalled up to %.1f ms\n",
               (long long)json_integer_value(json_object_get(s, "iteration")),
               json_string_value(json_object_get(s, "checkpoint")),
               json_is_true(json_object_get(s, "async")) ? "async" : "sync", num(s, "total_ms"), num(s, "max_stall_ms"));
        printf("  last to the barrier: rank %lld, %.1f ms after the first; late in %s (%.1f ms, the ranks' median "
               "%.1f ms)\n",
               (long long)json_integer_value(json_object_get(last, "rank")), num(last, "waited_for_ms"),
               json_string_value(json_object_get(last, "late_phase")), num(last, "phase_ms"),
               num(last, "median_phase_ms"));
        size_t r;
        json_t *rank;
        json_array_foreach(json_object_get(s, "ranks"), r, rank) {
            printf("  %-28s arrival %9.1f ms  stall %8.1f ms |", json_string_value(json_object_get(rank, "rank_label")),
                   num(rank, "barrier_arrival_ms"), num(rank, "stall_ms"));
            size_t p;
            json_t *ph;
            json_array_foreach(json_object_get(rank, "phases"), p, ph) {
                json_int_t bytes = json_integer_value(json_object_get(ph, "bytes"));
                printf(" %s %.1f", json_string_value(json_object_get(ph, "phase")), num(ph, "ms"));
                if (bytes) printf(" (%.2f MB)", (double)bytes / 1e6);
            }
            printf("\n");
        }
    }
    json_decref(doc);
    return 0;
}
