// parsers_replay.c — replayed: a timing figure of the run's steps replayed on one core per
// rank from every rank's per-op thread CPU time (schedule_replay.h), for layouts with more
// ranks than the host has cores.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/xalloc.h"
#include "prove/parsers_internal.h"
#include "prove/schedule_replay.h"

// What the replay needs of the run: the CPU backend, every rank's work on its rank thread, and
// no sleeps inside the steps. Anything else is refused, not replayed wrongly.
// *comm_thread: whether each rank ran --overlap-grad-reduce's communication thread.
static int replayable(const char *config_path, json_t *config, const char *conditions_path, json_t *conditions,
                      int *comm_thread_out, tb_error *err) {
    const char *device = json_string_value(json_object_get(config, "device"));
    if (device && strcmp(device, "cpu"))
        return tb_fail(err, "%s: device %s: replaying a device's kernels from the host thread's CPU time is not "
                            "supported yet (the replay is of the CPU backend)", config_path, device);
    static const char *const sleeps[] = {"debug_slow_data", "debug_slow_link", NULL};
    for (const char *const *k = sleeps; *k; k++) {
        const char *v = json_string_value(json_object_get(config, *k));
        if (v && *v)
            return tb_fail(err, "%s: %s \"%s\": the drill's delay is a sleep, which costs no CPU time, so a replay "
                                "would leave it out; replaying it is not supported yet", config_path, *k, v);
    }
    if (json_is_true(json_object_get(config, "overlap_param_gather")))
        return tb_fail(err, "%s: overlap_param_gather: replaying the parameter gathers the communication thread "
                            "runs across steps is not supported yet", config_path);
    // --overlap-grad-reduce's communication thread is replayed on a core of its own (the
    // traces show whether the run had one: a dp of 1 has none); any other background thread
    // (the async checkpoint writer) is not
    json_t *threads = json_object_get(conditions, "threads");
    const char *background = json_string_value(json_object_get(threads, "background"));
    const long long comm_thread = json_is_true(json_object_get(config, "overlap_grad_reduce")) && background &&
                                  !strcmp(background, "gradient-reduce communication");
    *comm_thread_out = (int)comm_thread;
    static const struct { const char *key; long long most; } per_rank[] = {
        {"openmp_per_rank", 1}, {"blas_per_rank", 1}, {"background_per_rank", 0}};
    for (size_t i = 0; i < sizeof per_rank / sizeof *per_rank; i++) {
        json_t *v = json_object_get(threads, per_rank[i].key);
        if (!json_is_integer(v))
            return tb_fail(err, "%s: no integer threads.%s, so whether every rank's work ran on its rank thread is "
                                "unknown", conditions_path, per_rank[i].key);
        const long long most = per_rank[i].most + (i == 2 ? comm_thread : 0);
        if (json_integer_value(v) > most)
            return tb_fail(err,
                           "%s: threads.%s %lld: the replay needs each rank's work on its rank thread (at most %lld), "
                           "since a worker thread's CPU time is not in the rank's trace; replaying it is not "
                           "supported yet (give the run --num-threads equal to its ranks)",
                           conditions_path, per_rank[i].key, (long long)json_integer_value(v), most);
    }
    return 0;
}

// The ranks of the stages pipeline.json reports: those with tp, cp and dp coordinates 0.
static int stage_ranks_of(const char *path, json_t *pipeline, long long world, int pp, int *stage_ranks,
                          tb_error *err) {
    json_t *ranks = json_object_get(pipeline, "ranks");
    if (!json_is_array(ranks) || (long long)json_array_size(ranks) != world)
        return tb_fail(err, "%s: 'ranks' must list the %lld ranks of config world_size", path, world);
    for (int s = 0; s < pp; s++) stage_ranks[s] = -1;
    size_t i;
    json_t *r;
    json_array_foreach(ranks, i, r) {
        json_t *rank = json_object_get(r, "rank"), *at = json_object_get(r, "pp");
        if (!json_is_integer(rank) || !json_is_integer(at))
            return tb_fail(err, "%s: ranks[%zu] has no integer rank and pp", path, i);
        int origin = 1;
        static const char *const others[] = {"tp", "cp", "dp"};
        for (int k = 0; k < 3; k++) origin &= json_integer_value(json_object_get(r, others[k])) == 0;
        const long long s = json_integer_value(at);
        if (s < 0 || s >= pp)
            return tb_fail(err, "%s: ranks[%zu].pp %lld outside pipeline_model_parallel_size %d", path, i, s, pp);
        if (origin) stage_ranks[s] = (int)json_integer_value(rank);
    }
    for (int s = 0; s < pp; s++)
        if (stage_ranks[s] < 0 || stage_ranks[s] >= world)
            return tb_fail(err, "%s: no rank of stage %d with tp, cp and dp 0", path, s);
    return 0;
}

int tbp_replayed_record(const parser *p, json_t *args, const char *dir, double *value, json_t *ev, tb_error *err) {
    static const char *const figures[] = {"step_ms", "tokens_per_s", "bubble_fraction", "stage_imbalance",
                                          "exposed_comm_ms", NULL};
    const char *figure = tbp_string_arg(args, "figure", NULL);
    if (tbp_one_of(p, "figure", figure, figures, err) != 0) return -1;
    long long warmup;
    if (tbp_int_arg(p, args, "warmup_steps", 1, 0, &warmup, err) != 0) return -1;
    json_t *files = json_array();
    json_object_set_new(ev, "files", files);
    char config_path[REC_PATH_MAX], run_dir[REC_PATH_MAX], path[REC_PATH_MAX];
    long long world;
    json_t *config = NULL, *conditions = NULL, *pipeline = NULL;
    tb_replay_trace **traces = NULL;
    char **names = NULL;
    tb_replay_step *steps = NULL;
    int nsteps = 0, rc = 0, pp = 1, *stage_ranks = NULL, comm_thread = 0;
    if (tbp_record_world_size(dir, config_path, sizeof config_path, files, &world, &config, err) != 0 ||
        tb_run_path(run_dir, sizeof run_dir, dir, TB_RECORD_RUN_DIR, err) != 0)
        return -1;
    json_t *ppv = json_object_get(config, "pipeline_model_parallel_size");
    pp = json_is_integer(ppv) ? (int)json_integer_value(ppv) : 1;
    if (pp < 1 || pp > world) rc = tb_fail(err, "%s: pipeline_model_parallel_size %d with world_size %lld",
                                           config_path, pp, world);
    if (rc == 0 && (rc = tbp_run_path(path, sizeof path, dir, TB_RUN_CONDITIONS, err)) == 0 &&
        (conditions = tbp_load_json_file(path, err)) == NULL)
        rc = -1;
    if (rc == 0) {
        json_array_append_new(files, json_string(path));
        rc = replayable(config_path, config, path, conditions, &comm_thread, err);
    }
    // under mpirun a call's thread CPU time holds its wait: MPI's progress engine polls, in
    // MPI's own collectives and in the exact algorithm's MPI_Testall alike
    json_t *launch = NULL;
    if (rc == 0 && (rc = tbp_run_path(path, sizeof path, dir, TB_RUN_LAUNCH, err)) == 0 &&
        (launch = tbp_load_json_file(path, err)) == NULL)
        rc = -1;
    if (rc == 0) {
        json_array_append_new(files, json_string(path));
        json_t *procs = json_object_get(launch, "processes");
        if (!json_is_integer(procs))
            rc = tb_fail(err, "%s: no integer 'processes', so whether the run's calls polled MPI is unknown", path);
        else if (json_integer_value(procs) > 1)
            rc = tb_fail(err, "%s: %lld processes under mpirun: a call's CPU time there holds its wait (MPI's progress "
                              "engine polls while it waits), so it is not the call's own work; replaying it is not "
                              "supported yet", path, (long long)json_integer_value(procs));
    }
    json_decref(launch);
    if (rc == 0 && (rc = tbp_run_path(path, sizeof path, dir, TB_RUN_PIPELINE, err)) == 0 &&
        (pipeline = tbp_load_json_file(path, err)) == NULL)
        rc = -1;
    if (rc == 0) {
        json_array_append_new(files, json_string(path));
        stage_ranks = tb_xcalloc((size_t)pp, sizeof *stage_ranks, "replay stages");
        rc = stage_ranks_of(path, pipeline, world, pp, stage_ranks, err);
    }
    if (rc == 0) {
        traces = tb_xcalloc((size_t)world, sizeof *traces, "replay traces");
        names = tb_xcalloc((size_t)world, sizeof *names, "replay trace names");
    }
    for (long long r = 0; rc == 0 && r < world; r++) {
        if (tb_rank_file_path(path, sizeof path, run_dir, TB_RANK_TRACE, (int)r, err) != 0 ||
            tb_replay_trace_read(path, &traces[r], err) != 0) {
            rc = -1;
            break;
        }
        names[r] = tb_xstrdup(path, "replay trace name");
        json_array_append_new(files, json_string(path));
    }
    if (rc == 0)
        rc = tb_replay_steps_of(traces, (const char *const *)names, (int)world, stage_ranks, pp, &steps, &nsteps, err);
    double tokens = 0;
    if (rc == 0 && !strcmp(figure, "tokens_per_s")) {
        json_t *gbs = json_object_get(config, "global_batch_size"), *seq = json_object_get(config, "seq_length");
        if (!json_is_integer(gbs) || !json_is_integer(seq) || json_integer_value(gbs) <= 0 ||
            json_integer_value(seq) <= 0)
            rc = tb_fail(err, "%s: needs positive integer global_batch_size and seq_length", config_path);
        else tokens = (double)json_integer_value(gbs) * (double)json_integer_value(seq);
    }
    double *v = tb_xcalloc((size_t)nsteps + 1, sizeof *v, "replayed figures");
    int k = 0;
    json_t *replayed = json_array(), *wall = json_array();
    for (int s = 0; rc == 0 && s < nsteps; s++) {
        const tb_replay_step *st = &steps[s];
        if (st->step <= warmup) continue;
        double x = st->step_ms;
        if (!strcmp(figure, "tokens_per_s")) x = tokens / (st->step_ms / 1000.0);
        else if (!strcmp(figure, "bubble_fraction")) x = st->bubble_fraction;
        else if (!strcmp(figure, "stage_imbalance")) x = st->stage_imbalance;
        else if (!strcmp(figure, "exposed_comm_ms")) x = st->exposed_comm_ms;
        v[k++] = x;
        json_array_append_new(replayed, json_real(st->step_ms));
        json_array_append_new(wall, json_real(st->wall_step_ms));
    }
    if (rc == 0 && k == 0) rc = tb_fail(err, "%s: no steps after warmup_steps %lld to replay", run_dir, warmup);
    if (rc == 0) {
        double rmed = 0, wmed = 0;
        double *tmp = tb_xcalloc((size_t)k, sizeof *tmp, "replayed steps");
        for (int i = 0; i < k; i++) tmp[i] = json_real_value(json_array_get(replayed, (size_t)i));
        rmed = tb_median(tmp, k);
        for (int i = 0; i < k; i++) tmp[i] = json_real_value(json_array_get(wall, (size_t)i));
        wmed = tb_median(tmp, k);
        free(tmp);
        json_t *s = tbp_summary_json(v, k);
        *value = json_real_value(json_object_get(s, "median"));
        json_object_set_new(ev, "per_step", s);
        json_object_set_new(ev, "warmup_steps", json_integer(warmup));
        // the gate's samples (stability.c): the replayed step times, not the wall clock
        json_object_set_new(ev, "replayed_step_ms", replayed);
        json_object_set_new(ev, "wall_step_ms", wall);
        replayed = wall = NULL;
        char detail[512];
        snprintf(detail, sizeof detail,
                 "replayed from per-op CPU time on one core per rank%s (%lld ranks, %d stage%s): %d steps after "
                 "warmup_steps %lld, median replayed step %.4g ms against %.4g ms of wall clock recorded",
                 comm_thread ? " and one per rank's communication thread" : "", world, pp, pp == 1 ? "" : "s", k,
                 warmup, rmed, wmed);
        json_object_set_new(ev, "detail", json_string(detail));
    }
    json_decref(replayed);
    json_decref(wall);
    free(v);
    free(steps);
    for (long long r = 0; traces && r < world; r++) {
        tb_replay_trace_free(traces[r]);
        free(names[r]);
    }
    free(traces);
    free(names);
    free(stage_ranks);
    json_decref(pipeline);
    json_decref(conditions);
    json_decref(config);
    return rc;
}
