// replay.c — `tracebook replay RUN` (replay.h describes the steps and the verdicts).
#include <dirent.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/run_arg.h"
#include "records/catalog.h"
#include "config/config.h"
#include "core/fileio.h"
#include "core/json_number.h"
#include "core/run_dir.h"
#include "core/xalloc.h"
#include "records/engine_build.h"
#include "prove/parsers.h"
#include "records/provenance.h"
#include "records/record.h"
#include "records/record_verify.h"
#include "records/recorder.h"
#include "runs/replay.h"
#include "runs/replay_build.h"

// Every rank's (step, loss) and the slowest rank's median step time of a run directory.
typedef struct run_series {
    int nranks, nsteps;
    double *loss;     // [rank][step]
    double median_step_ms;
} run_series;

static int read_series(const char *run_dir, run_series *s, tb_error *err) {
    memset(s, 0, sizeof *s);
    char path[PATH_MAX];
    if (tb_path_format(path, sizeof path, err, "%s/" TB_RUN_CONFIG, run_dir) != 0) return -1;
    json_t *cfg = json_load_file(path, 0, NULL);
    if (!cfg) return tb_fail(err, "%s: missing or malformed", path);
    s->nranks = (int)json_integer_value(json_object_get(cfg, "world_size"));
    s->nsteps = (int)json_integer_value(json_object_get(cfg, "train_iters"));
    json_decref(cfg);
    if (s->nranks < 1 || s->nsteps < 1) return tb_fail(err, "%s: no world_size / train_iters", path);
    s->loss = tb_xcalloc((size_t)s->nranks * (size_t)s->nsteps, sizeof *s->loss, "losses");
    double *slowest = tb_xcalloc((size_t)s->nsteps, sizeof *slowest, "step times");
    for (int r = 0; r < s->nranks; r++) {
        if (tb_rank_file_path(path, sizeof path, run_dir, TB_RANK_METRICS, r, err) != 0) {
            free(slowest);
            return -1;
        }
        FILE *f = fopen(path, "r");
        if (!f) {
            free(slowest);
            return tb_fail(err, "%s: missing", path);
        }
        char line[1 << 14];
        int n = 0;
        while (fgets(line, sizeof line, f) && n < s->nsteps) {
            json_t *m = json_loads(line, 0, NULL);
            if (!m) continue;
            int step = (int)json_integer_value(json_object_get(m, "step"));
            if (step >= 1 && step <= s->nsteps) {
                double *loss = &s->loss[(size_t)r * s->nsteps + step - 1];
                if (!tb_json_number_value(json_object_get(m, "loss"), loss)) *loss = NAN;
                double ms = json_number_value(json_object_get(m, "step_ms"));
                if (ms > slowest[step - 1]) slowest[step - 1] = ms;
                n++;
            }
            json_decref(m);
        }
        fclose(f);
        if (n != s->nsteps) {
            free(slowest);
            return tb_fail(err, "%s: %d steps, the config says %d", path, n, s->nsteps);
        }
    }
    // median over the steps after the first (warm-up)
    int first = s->nsteps > 1 ? 1 : 0, n = s->nsteps - first;
    s->median_step_ms = tb_median(slowest + first, n);
    free(slowest);
    return 0;
}

typedef struct replay_args {
    const char *artifacts;
    double timing_tolerance;
    int ignore_timing, keep, rebuild, jobs, json;
    tb_strlist env_allowed, env_denied;  // --env-allow, --env-deny (recorder.h)
    const char **env_allow, **env_deny;  // the defaults and those flags, NULL-terminated
} replay_args;

static void replay_args_free(replay_args *a) {
    free(a->env_allow);
    free(a->env_deny);
    tb_strlist_free(&a->env_allowed);
    tb_strlist_free(&a->env_denied);
}

static void print_problem(void *count, const char *text) {
    fprintf(stderr, "tracebook replay: %s\n", text);
    ++*(int *)count;
}

static const tb_option replay_options[] = {
    TB_ARTIFACTS_OPTION(replay_args, artifacts),
    TB_OPTION("--timing-tolerance", replay_args, timing_tolerance, TB_OPT_FLOAT, "0.5", "FRACTION",
              "the relative difference of the median step time still called WITHIN"),
    TB_OPTION("--ignore-timing", replay_args, ignore_timing, TB_OPT_BOOL, NULL, NULL,
              "a step time OUTSIDE the tolerance is reported but does not fail the replay"),
    TB_OPTION("--keep", replay_args, keep, TB_OPT_BOOL, NULL, NULL, "keep the temporary source tree and its build"),
    TB_OPTION("--rebuild", replay_args, rebuild, TB_OPT_BOOL, NULL, NULL,
              "build the engine even when an earlier replay kept the same build (and replace it)"),
    TB_OPTION("-j", replay_args, jobs, TB_OPT_INT, NULL, "N", "parallel build jobs (default: the online CPUs)"),
    TB_OPTION("--jobs", replay_args, jobs, TB_OPT_INT, NULL, "N", "the same as -j"),
    TB_OPTION("--json", replay_args, json, TB_OPT_BOOL, NULL, NULL,
              "the verdicts as one JSON document on stdout (the progress goes to stderr)"),
    TB_OPTION("--env-allow", replay_args, env_allowed, TB_OPT_LIST, NULL, "NAME_OR_GLOB",
              "also record environment variables matching NAME_OR_GLOB in the replay's manifest"),
    TB_OPTION("--env-deny", replay_args, env_denied, TB_OPT_LIST, NULL, "GLOB",
              "also keep environment variables matching GLOB out of it (wins over --env-allow)"),
    TB_OPTIONS_END};

static const tb_command replay_command = {
    "tracebook replay", "RUN",
    "Re-runs a record at its recorded commit (and saved patch) with a fresh build (or the one an earlier\n"
    "replay kept for the same revision, options, toolchain and host, its sha256 checked), and compares:\n"
    "the losses must be bitwise equal; the step time is reported against --timing-tolerance.\n"
    "RUN is a run id (or a unique prefix) or a record directory (docs/CLI.md).\n" TB_ENV_POLICY_HELP,
    replay_options, 1, 1, "tracebook replay 20261129T104512 -j 2",
    "the losses differ, the step time is outside the tolerance, or the record cannot be replayed"};

int tracebook_replay_main(int argc, char **argv) {
    replay_args args = {.jobs = (int)sysconf(_SC_NPROCESSORS_ONLN)};
    tb_positional pos;
    tb_error err;
    int parsed = tb_command_parse(&replay_command, &args, argc, argv, &pos, &err);
    if (parsed == 0 && (args.jobs < 1 || args.jobs > 1024))  // -j 0 was taken as 1
        parsed = tb_fail(&err, "%s: flag -j: '%d' is not a number of parallel build jobs from 1 to 1024",
                         replay_command.name, args.jobs);
    if (parsed != 0) {
        tb_positional_free(&pos);
        replay_args_free(&args);
        return parsed > 0 ? 0 : tb_command_usage_error(&replay_command, &err);
    }
    FILE *say = args.json ? stderr : stdout;  // the progress and the verdicts' text
    tb_run_arg run;
    int resolved = tb_run_arg_resolve(pos.items[0], args.artifacts, &run, &err);
    tb_positional_free(&pos);
    if (resolved != 0 || !run.record_dir[0]) {
        if (resolved != 0) fprintf(stderr, "tracebook replay: %s\n", err.msg);
        else fprintf(stderr, "tracebook replay: %s is a run directory, not a record (no manifest.json): only "
                             "recorded runs can be replayed\n", run.run_dir);
        replay_args_free(&args);
        return TB_EXIT_FAILURE;
    }
    const char *artifacts = args.artifacts, *run_id = run.run_id;
    if (tb_env_globs_check("tracebook replay", &args.env_allowed, "--env-allow", &err) != 0 ||
        tb_env_globs_check("tracebook replay", &args.env_denied, "--env-deny", &err) != 0) {
        replay_args_free(&args);
        return tb_command_usage_error(&replay_command, &err);
    }
    args.env_allow = tb_globs_with(tb_default_env_allow, args.env_allowed.items, args.env_allowed.n);
    args.env_deny = tb_globs_with(tb_default_env_deny, args.env_denied.items, args.env_denied.n);
    char rec[PATH_MAX], path[PATH_MAX];
    snprintf(rec, sizeof rec, "%s", run.record_dir);
    if (tb_path_format(path, sizeof path, &err, "%s/" TB_RECORD_MANIFEST, rec) != 0) {
        fprintf(stderr, "tracebook replay: %s\n", err.msg);
        replay_args_free(&args);
        return TB_EXIT_FAILURE;
    }
    json_error_t jerr;
    json_t *m = json_load_file(path, 0, &jerr);
    if (!m) {
        fprintf(stderr, "tracebook replay: %s: %s (an incomplete record cannot be replayed)\n", path, jerr.text);
        replay_args_free(&args);
        return TB_EXIT_FAILURE;
    }
    int rc = TB_EXIT_FAILURE;
    char wt[PATH_MAX] = "";
    tb_git_state here;
    memset(&here, 0, sizeof here);
    json_t *git = json_object_get(m, "git"), *rargv = json_object_get(m, "argv");
    // a plan record (exp:plan) is the planner's arithmetic, not an engine run
    if (!strcmp(json_string_value(json_array_get(rargv, 1)) ?: "", "plan")) {
        fprintf(stderr, "tracebook replay: %s is a plan record (exp:plan): replaying a plan is not supported yet "
                        "(tracebook prove re-derives its claims from its plan.json)\n", path);
        goto out;
    }
    // the record must still be what was recorded: an altered file is named, never replayed
    int problems = 0;
    if (!json_is_object(json_object_get(m, "files"))) {
        fprintf(stderr, "tracebook replay: %s lists no files: the record cannot be checked\n", path);
        goto out;
    }
    tb_record_verify_files(rec, json_object_get(m, "files"), print_problem, NULL, &problems);
    if (problems) {
        fprintf(stderr, "tracebook replay: %s: %d file%s of the record no longer match%s its manifest; not replayed\n",
                run_id, problems, problems == 1 ? "" : "s", problems == 1 ? "es" : "");
        goto out;
    }
    // a source the run's tree had but git did not track: the engine's build globs its sources,
    // so the run may have compiled it, and the saved patch (git diff HEAD) cannot bring it back
    char sources[1024];
    size_t nsources = tb_git_untracked_sources(json_object_get(git, "untracked"), sources, sizeof sources);
    if (nsources) {
        fprintf(stderr, "tracebook replay: %s: the run's tree had %zu untracked source file%s (%s), which its build "
                        "may have compiled and its record does not hold (the saved patch is git diff HEAD); the engine "
                        "it ran cannot be rebuilt: not replayed (git add such a file before the run: a staged file "
                        "is in the saved patch)\n",
                run_id, nsources, nsources == 1 ? "" : "s", sources);
        goto out;
    }
    const char *commit = json_string_value(json_object_get(git, "commit"));
    if (!commit) {
        fprintf(stderr, "tracebook replay: %s records no git commit: nothing to check out\n", path);
        goto out;
    }
    if (tb_git_describe(".", &here, &err) != 0) {
        fprintf(stderr, "tracebook replay: %s\n", err.msg);
        goto out;
    }
    // the recorded build's CMake options (engine_build.h); a record from before they were
    // recorded gets the Release build replay always made, and says so
    const json_t *recorded_build = json_object_get(m, "engine_build");
    char cmake_args[2048];
    if (json_object_get(recorded_build, "cmake")) {
        char unrecorded[256];
        if (tb_engine_build_cmake_args(recorded_build, cmake_args, sizeof cmake_args, unrecorded, sizeof unrecorded,
                                       &err) != 0) {
            fprintf(stderr, "tracebook replay: %s: %s\n", run_id, err.msg);
            goto out;
        }
        if (unrecorded[0])
            fprintf(say, "  the record predates engine_build.cmake's %s: CMake's defaults for them\n", unrecorded);
    } else {
        snprintf(cmake_args, sizeof cmake_args, "-DCMAKE_BUILD_TYPE=Release");
        fprintf(say, "  the record does not say how its engine was built (no engine_build.cmake): a Release build\n");
        recorded_build = NULL;
    }
    // the saved patch, checked against the manifest
    char *patch = NULL;
    size_t patch_len = 0;
    const char *patch_sha = NULL;
    if (json_is_true(json_object_get(git, "dirty"))) {
        char patch_path[PATH_MAX], hex[65];
        if (tb_path_format(patch_path, sizeof patch_path, &err, "%s/" TB_RECORD_PATCH, rec) != 0) {
            fprintf(stderr, "tracebook replay: %s\n", err.msg);
            goto out;
        }
        FILE *f = fopen(patch_path, "rb");
        if (!f) {
            fprintf(stderr, "tracebook replay: the run was dirty but %s is missing\n", patch_path);
            goto out;
        }
        fseek(f, 0, SEEK_END);
        patch_len = (size_t)ftell(f);
        fseek(f, 0, SEEK_SET);
        patch = tb_xmalloc(patch_len + 1, "saved patch");
        if (fread(patch, 1, patch_len, f) != patch_len) patch_len = 0;
        patch[patch_len] = '\0';
        fclose(f);
        tb_sha256_hex(patch, patch_len, hex);
        const char *want = json_string_value(json_object_get(git, "patch_sha256"));
        if (!want || strcmp(want, hex) != 0) {
            fprintf(stderr, "tracebook replay: %s: sha256 %s, the manifest says %s\n", patch_path, hex,
                    want ? want : "(none)");
            free(patch);
            goto out;
        }
        patch_sha = want;
    }
    char engine[PATH_MAX];
    int keep = 0;
    tb_replay_build build = {artifacts,  here.root,  run_id,   commit,         patch, patch_len,
                             patch_sha,  cmake_args, args.jobs, args.rebuild, say};
    int built = tb_replay_build_engine(&build, engine, sizeof engine, wt, sizeof wt, &keep);
    free(patch);
    if (keep) args.keep = 1;
    if (built != 0) goto out;

    // the replay's own record beside the original
    char version_dir[PATH_MAX], new_id[64], new_rec[PATH_MAX], run_dir[PATH_MAX];
    snprintf(version_dir, sizeof version_dir, "%s", rec);
    *strrchr(version_dir, '/') = '\0';
    tb_new_run_id(new_id, sizeof new_id);
    if (tb_path_format(new_rec, sizeof new_rec, &err, "%s/%s", version_dir, new_id) != 0 ||
        tb_path_format(run_dir, sizeof run_dir, &err, "%s/" TB_RECORD_RUN_DIR, new_rec) != 0 ||
        tb_mkdir_p(new_rec, &err) != 0) {
        fprintf(stderr, "tracebook replay: %s\n", err.msg);
        goto out;
    }
    // The recorded BLAS kernel, pinned when this host is of the recorded ISA level (a kernel
    // for a level this CPU lacks would not run); then what still differs from the recording.
    char differences[1024] = "";
    if (recorded_build) {
        const char *level = json_string_value(json_object_get(json_object_get(recorded_build, "cpu"), "isa_level"));
        const char *kernel = json_string_value(json_object_get(json_object_get(recorded_build, "blas"), "kernel"));
        json_t *here_build = tb_engine_build_info(engine, &err);
        if (!here_build) {
            fprintf(stderr, "tracebook replay: the rebuilt engine: %s\n", err.msg);
            goto out;
        }
        const char *here_level = json_string_value(json_object_get(json_object_get(here_build, "cpu"), "isa_level"));
        if (kernel && level && here_level && !strcmp(level, here_level)) {
            setenv("OPENBLAS_CORETYPE", kernel, 1);
            json_decref(here_build);
            if (!(here_build = tb_engine_build_info(engine, &err))) {
                fprintf(stderr, "tracebook replay: the rebuilt engine with OPENBLAS_CORETYPE=%s: %s\n", kernel,
                        err.msg);
                goto out;
            }
            fprintf(say, "  BLAS kernel pinned to the recorded %s (OPENBLAS_CORETYPE)\n", kernel);
        }
        tb_engine_build_differences(recorded_build, here_build, differences, sizeof differences);
        json_decref(here_build);
        if (differences[0]) fprintf(say, "  this build differs from the recorded one: %s\n", differences);
    }

    // the engine's own flag for the run directory, from its option table
    // the same launch (mpirun and its options as recorded), with this build's engine where
    // the recorded one was and the replay's run directory
    const char *run_dir_flag = tb_options_find_key(tb_config_options, "run_dir")->flag;
    const int engine_index = tb_manifest_engine_index(m);
    if (engine_index < 0) {
        fprintf(stderr, "tracebook replay: %s: the launcher's engine_argv_index is outside argv\n", path);
        goto out;
    }
    json_t *new_argv = json_array();
    for (size_t i = 0; i < json_array_size(rargv); i++) {
        const char *a = json_string_value(json_array_get(rargv, i));
        if (i == (size_t)engine_index) a = engine;
        else if (i > (size_t)engine_index && !strcmp(json_string_value(json_array_get(rargv, i - 1)), run_dir_flag))
            a = run_dir;
        json_array_append_new(new_argv, json_string(a));
    }
    const json_t *launch = json_object_get(m, "launcher");
    if (json_is_object(launch) && strcmp(json_string_value(json_object_get(launch, "name")) ?: "", "threads"))
        fprintf(say, "  launched as recorded: %s with %lld processes\n", json_string_value(json_array_get(rargv, 0)),
               (long long)json_integer_value(json_object_get(launch, "processes")));
    char start[32];
    tb_iso_now(start, sizeof start);
    fprintf(say, "  re-running the recorded argv as %s\n", new_id);
    fflush(stdout);
    tb_recorder_install_sigint();
    tb_run_outcome o;
    if (tb_run_engine(new_argv, new_rec, isatty(1), "replay",
                      (int)json_integer_value(json_object_get(json_object_get(m, "config"), "train_iters")),
                      // a run killed on purpose is killed again after the same step
                      (long long)json_integer_value(json_object_get(json_object_get(m, "sweep_point"), "kill_after_step")),
                      &o, &err) != 0) {
        fprintf(stderr, "tracebook replay: %s\n", err.msg);
        json_decref(new_argv);
        goto out;
    }
    json_int_t repetition = 1;  // a replay is the same repetition, said the way this tracebook writes it
    tb_manifest_repetition(m, &repetition);
    tb_run_identity id = {json_string_value(json_object_get(m, "experiment")),
                          json_integer_value(json_object_get(m, "version")),
                          json_string_value(json_object_get(m, "question")),
                          json_string_value(json_object_get(json_object_get(m, "runbook"), "path")),
                          json_string_value(json_object_get(json_object_get(m, "runbook"), "sha256")),
                          json_integer_value(json_object_get(m, "seed")),
                          (int)repetition,
                          json_object_get(m, "sweep_point"),
                          run_id,
                          &here,
                          (const char *const *)args.env_allow,
                          (const char *const *)args.env_deny,
                          json_string_value(json_object_get(json_object_get(m, "expected_failure"), "kind")),
                          (int)json_integer_value(json_object_get(json_object_get(m, "expected_failure"), "exit_status")),
                          NULL};  // a replay is evidence about its original, never a re-measurement
    int recorded = tb_record_finish(artifacts, new_rec, new_id, &id, new_argv,
                                    json_is_object(launch) ? launch : NULL, start, o, &err);
    json_decref(new_argv);
    if (recorded != 0) {
        fprintf(stderr, "tracebook replay: recording %s: %s\n", new_rec, err.msg);
        goto out;
    }
    const char *expected_kind = json_string_value(json_object_get(json_object_get(m, "expected_failure"), "kind"));
    if (o.exit_status != 0 && expected_kind &&
        o.exit_status == (int)json_integer_value(json_object_get(json_object_get(m, "expected_failure"), "exit_status"))) {
        fprintf(stderr, "tracebook replay: the replay ended as the original was expected to: %s (exit status %d), "
                        "recorded as %s; comparing the losses of a run that fails on purpose is not supported yet\n",
                expected_kind, o.exit_status, new_rec);
        goto out;
    }
    if (o.exit_status != 0) {
        fprintf(stderr, "tracebook replay: the engine failed (exit status %d; see %s/" TB_RECORD_STDERR ")\n", o.exit_status,
                new_rec);
        goto out;
    }

    // verdicts
    char orig_run[PATH_MAX];
    run_series a = {0}, b = {0};  // read_series may fail with the losses allocated
    if (tb_path_format(orig_run, sizeof orig_run, &err, "%s/" TB_RECORD_RUN_DIR, rec) != 0 ||
        read_series(orig_run, &a, &err) != 0 || read_series(run_dir, &b, &err) != 0) {
        fprintf(stderr, "tracebook replay: %s\n", err.msg);
        free(a.loss);
        free(b.loss);
        goto out;
    }
    int same = a.nranks == b.nranks && a.nsteps == b.nsteps, first_diff = -1;
    for (int i = 0; same && i < a.nranks * a.nsteps; i++)
        if (memcmp(&a.loss[i], &b.loss[i], sizeof(double)) != 0) {
            same = 0;
            first_diff = i;
        }
    fprintf(say, "\n  verdicts (original %s vs replay %s)\n", run_id, new_id);
    if (same)
        fprintf(say, "  loss       bitwise identical: %d steps x %d ranks                     MATCH\n", a.nsteps, a.nranks);
    else if (first_diff >= 0)
        fprintf(say, "  loss       rank %d step %d: %.17g vs %.17g                           DIFFER\n",
               first_diff / a.nsteps, first_diff % a.nsteps + 1, a.loss[first_diff], b.loss[first_diff]);
    else
        fprintf(say, "  loss       shapes differ: %d x %d vs %d x %d steps x ranks          DIFFER\n", a.nsteps, a.nranks,
               b.nsteps, b.nranks);
    if (!same && differences[0])
        fprintf(say, "             bitwise equality is not expected here: %s\n", differences);
    double rel = fabs(b.median_step_ms - a.median_step_ms) / a.median_step_ms;
    int timing_ok = rel <= args.timing_tolerance;
    fprintf(say, "  step time  median %.2f ms vs %.2f ms (%+.1f%%), tolerance ±%.0f%%           %s\n", a.median_step_ms,
           b.median_step_ms, 100.0 * (b.median_step_ms - a.median_step_ms) / a.median_step_ms,
           100.0 * args.timing_tolerance, timing_ok ? "WITHIN" : args.ignore_timing ? "OUTSIDE (ignored: --ignore-timing)" : "OUTSIDE");
    fprintf(say, "  replay recorded as %s (replay_of %s)\n", new_rec, run_id);
    rc = same && (timing_ok || args.ignore_timing) ? 0 : TB_EXIT_FAILURE;
    if (args.json) {
        json_t *doc = json_pack("{s:s, s:s, s:s, s:{s:s, s:i, s:i}, s:{s:f, s:f, s:f, s:s}, s:s, s:b}", "run_id", run_id,
                                "replay_id", new_id, "replay_record", new_rec, "loss", "verdict",
                                same ? "MATCH" : "DIFFER", "steps", a.nsteps, "ranks", a.nranks, "step_time",
                                "original_median_ms", a.median_step_ms, "replay_median_ms", b.median_step_ms,
                                "tolerance", args.timing_tolerance, "verdict", timing_ok ? "WITHIN" : "OUTSIDE",
                                "build_differences", differences, "ignore_timing", args.ignore_timing);
        if (!same && first_diff >= 0)
            json_object_set_new(json_object_get(doc, "loss"), "first_difference",
                                json_pack("{s:i, s:i, s:f, s:f}", "rank", first_diff / a.nsteps, "step",
                                          first_diff % a.nsteps + 1, "original", a.loss[first_diff], "replay",
                                          b.loss[first_diff]));
        json_dumpf(doc, stdout, JSON_INDENT(1) | JSON_REAL_PRECISION(17));
        fputc('\n', stdout);
        json_decref(doc);
    }
    free(a.loss);
    free(b.loss);
out:
    if (wt[0] && !args.keep && tb_remove_tree(wt, &err) != 0)
        fprintf(stderr, "tracebook replay: could not remove %s\n", err.msg);
    tb_git_state_free(&here);
    json_decref(m);
    replay_args_free(&args);
    return rc;
}
