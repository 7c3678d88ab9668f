// recorder.c — one engine process into a record (recorder.h).
#include "records/recorder.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "records/anchor.h"
#include "records/catalog.h"
#include "core/clock.h"
#include "core/fileio.h"
#include "core/json_number.h"
#include "core/rng.h"
#include "core/run_dir.h"
#include "core/xalloc.h"
#include "records/engine_build.h"
#include "records/record.h"

extern char **environ;

// The one process-level flag a signal handler may touch: the first SIGINT or SIGTERM's
// number. A second one ends the host at once (its engine child, PR_SET_PDEATHSIG, with it).
static volatile sig_atomic_t interrupted;
static void on_interrupt(int sig) {
    if (interrupted) _exit(128 + sig);
    interrupted = sig;
}

int tb_env_globs_check(const char *command, const tb_strlist *globs, const char *flag, tb_error *err) {
    for (int i = 0; i < globs->n; i++) {
        const char *g = globs->items[i];
        if (!*g) return tb_fail(err, "%s: flag %s: the value is empty; give a variable name or glob", command, flag);
        const char *eq = strchr(g, '=');
        if (eq)  // what follows '=' may be the secret itself: only the name part is shown
            return tb_fail(err, "%s: flag %s: '%.*s=...' is NAME=VALUE; give the name alone ('%.*s')", command,
                           flag, (int)(eq - g), g, (int)(eq - g), g);
    }
    return 0;
}

void tb_recorder_install_sigint(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_interrupt;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
}
int tb_recorder_interrupted(void) { return interrupted; }

void tb_new_run_id(char *buf, size_t len) {
    char stamp[32];
    time_t t = time(NULL);
    strftime(stamp, sizeof stamp, "%Y%m%dT%H%M%S", gmtime(&t));
    uint64_t s = (uint64_t)(tb_wall_s() * 1e6) ^ (uint64_t)getpid() << 32;
    uint32_t r = 0;
    int fd = open("/dev/urandom", O_RDONLY);
    if (fd >= 0) {
        if (read(fd, &r, sizeof r) != (ssize_t)sizeof r) r = 0;
        close(fd);
    }
    snprintf(buf, len, "%s-%08x", stamp, (unsigned)((uint32_t)tb_splitmix64(&s) ^ r));
}


int tb_record_rank_file(char *buf, size_t len, const char *record, tb_rank_file kind, int rank, tb_error *err) {
    char run_dir[PATH_MAX];
    if (tb_path_format(run_dir, sizeof run_dir, err, "%s/" TB_RECORD_RUN_DIR, record) != 0) return -1;
    return tb_rank_file_path(buf, len, run_dir, kind, rank, err);
}

// The last complete line of a metrics file (the newest step), or NULL.
static json_t *last_metrics_line(const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) return NULL;
    static char line[1 << 14], last[1 << 14];
    last[0] = '\0';
    while (fgets(line, sizeof line, f))
        if (strchr(line, '\n')) memcpy(last, line, sizeof last);
    fclose(f);
    return last[0] ? json_loads(last, 0, NULL) : NULL;
}

// The newest step in the metrics file's complete lines from *offset on (newest when none),
// *offset moved past them: a run's file is read once however long it gets.
static long long newest_logged_step(const char *path, long *offset, long long newest) {
    FILE *f = fopen(path, "r");
    if (!f) return newest;
    if (fseek(f, *offset, SEEK_SET) == 0) {
        char *line = NULL;
        size_t cap = 0;
        ssize_t n;
        while ((n = getline(&line, &cap, f)) > 0 && line[n - 1] == '\n') {  // a line being written: next time
            *offset += (long)n;
            json_t *o = json_loadb(line, (size_t)n, 0, NULL);
            json_t *step = json_object_get(o, "step");
            if (json_is_integer(step) && json_integer_value(step) > newest) newest = json_integer_value(step);
            json_decref(o);
        }
        free(line);
    }
    fclose(f);
    return newest;
}

int tb_run_engine(const json_t *argv, const char *rec, int progress, const char *label, int iters,
                  long long kill_after_step, tb_run_outcome *outcome, tb_error *err) {
    tb_run_outcome out = {0, 0, 0, 0.0, 0};
    const double started = tb_wall_s();
    char out_path[PATH_MAX], err_path[PATH_MAX], beat[PATH_MAX], metrics[PATH_MAX];
    if (tb_path_format(out_path, sizeof out_path, err, "%s/" TB_RECORD_STDOUT, rec) != 0 ||
        tb_path_format(err_path, sizeof err_path, err, "%s/" TB_RECORD_STDERR, rec) != 0 ||
        tb_path_format(beat, sizeof beat, err, "%s/" TB_RECORD_HEARTBEAT, rec) != 0 ||
        tb_record_rank_file(metrics, sizeof metrics, rec, TB_RANK_METRICS, 0, err) != 0)
        return -1;
    size_t n = json_array_size(argv);
    char **args = tb_xcalloc(n + 1, sizeof *args, "engine argv");
    for (size_t i = 0; i < n; i++) args[i] = (char *)json_string_value(json_array_get(argv, i));
    fflush(NULL);
    const pid_t host = getpid();
    pid_t pid = fork();
    if (pid == 0) {
        // the engine dies with the host (a kill -9 of the host leaves no orphan training on)
        if (prctl(PR_SET_PDEATHSIG, SIGTERM) != 0 || getppid() != host) _exit(128 + SIGTERM);
        int o = open(out_path, O_WRONLY | O_CREAT | O_TRUNC, 0644), e = open(err_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (o < 0 || e < 0 || dup2(o, 1) < 0 || dup2(e, 2) < 0) _exit(126);
        signal(SIGINT, SIG_DFL);
        signal(SIGTERM, SIG_DFL);
        execv(args[0], args);
        fprintf(stderr, "exec %s: %s\n", args[0], strerror(errno));
        _exit(127);
    }
    free(args);
    if (pid < 0) {
        out.exit_status = 127;
        *outcome = out;
        return 0;
    }
    double last_beat = 0, last_progress = 0;
    long metrics_offset = 0;
    long long newest = 0;
    int status = 0;
    for (;;) {
        if (waitpid(pid, &status, WNOHANG) == pid) break;
        if (kill_after_step > 0 && !out.killed_after_step &&
            (newest = newest_logged_step(metrics, &metrics_offset, newest)) >= kill_after_step) {
            kill(pid, SIGKILL);
            out.killed_after_step = newest;
        }
        if (interrupted && !out.interrupted) {
            out.interrupted = 1;
            kill(pid, interrupted);  // SIGINT or SIGTERM, as the host got
        }
        double t = tb_wall_s();
        if (t - last_beat >= 2.0) {
            char text[64];
            int len = snprintf(text, sizeof text, "%.3f\n", t);
            tb_error ignored;  // a heartbeat is a hint for watchers: a missed one is not an error
            tb_write_file_atomic(beat, text, (size_t)len, &ignored);
            last_beat = t;
        }
        if (progress && t - last_progress >= 0.5) {
            json_t *m = last_metrics_line(metrics);
            if (m) {
                json_int_t step = json_integer_value(json_object_get(m, "step"));
                double step_ms = NAN, loss = NAN, tps = NAN;
                tb_json_number_value(json_object_get(m, "step_ms"), &step_ms);
                tb_json_number_value(json_object_get(m, "loss"), &loss);
                tb_json_number_value(json_object_get(m, "tokens_per_s"), &tps);
                fprintf(stdout, "\r  run %s: step %lld/%d  loss %.4f  %.0f tok/s  ETA %.0f s   ", label,
                        (long long)step, iters, loss, tps, (double)(iters - step) * step_ms / 1e3);
                fflush(stdout);
                json_decref(m);
            }
            last_progress = t;
        }
        struct timespec ts = {0, 10 * 1000 * 1000};  // 10 ms: the most a run waits to be noticed done
        nanosleep(&ts, NULL);
    }
    out.engine_s = tb_wall_s() - started;
    if (progress) fprintf(stdout, "\r%*s\r", 100, "");
    if (WIFEXITED(status)) out.exit_status = WEXITSTATUS(status);
    else if (WIFSIGNALED(status)) {
        out.signaled = 1;
        out.exit_status = 128 + WTERMSIG(status);
    }
    *outcome = out;
    return 0;
}

json_t *tb_launch_json(const char *launcher, int processes, int engine_index) {
    const int mpi = launcher && !strcmp(launcher, "mpirun");
    return json_pack("{s:s, s:i, s:i}", "name", mpi ? "mpirun" : "threads", "processes", mpi ? processes : 1,
                     "engine_argv_index", engine_index);
}

int tb_manifest_engine_index(const json_t *m) {
    const json_t *idx = json_object_get(json_object_get(m, "launcher"), "engine_argv_index");
    json_int_t k = json_is_integer(idx) ? json_integer_value(idx) : 0;
    return k >= 0 && (size_t)k < json_array_size(json_object_get(m, "argv")) ? (int)k : -1;
}

int tb_record_finish(const char *artifacts, const char *rec, const char *run_id, const tb_run_identity *id,
                     const json_t *argv, const json_t *launch, const char *start, tb_run_outcome o, tb_error *err) {
    // every path first: once the manifest is written the record is complete, and nothing
    // after it may fail
    char cfg_path[PATH_MAX], path[PATH_MAX], beat[PATH_MAX];
    if (tb_path_format(cfg_path, sizeof cfg_path, err, "%s/" TB_RECORD_RUN_DIR "/" TB_RUN_CONFIG, rec) != 0 ||
        tb_path_format(path, sizeof path, err, "%s/" TB_RECORD_MANIFEST, rec) != 0 ||
        tb_path_format(beat, sizeof beat, err, "%s/" TB_RECORD_HEARTBEAT, rec) != 0)
        return -1;
    json_t *files = NULL;
    if (tb_hash_tree(rec, TB_RECORD_MANIFEST, &files, err) != 0) return -1;
    json_object_del(files, TB_RECORD_HEARTBEAT);  // rewritten while live: not evidence
    char end[32], cwd[PATH_MAX];
    tb_iso_now(end, sizeof end);
    if (!getcwd(cwd, sizeof cwd)) snprintf(cwd, sizeof cwd, "?");
    json_t *config = json_load_file(cfg_path, 0, NULL);
    // a run the recorder killed as its runbook asked (expect_failure "killed") failed as expected;
    // any other signal, or an interrupted host, leaves the run incomplete
    const int killed_as_asked = o.killed_after_step && id->expected_failure && !strcmp(id->expected_failure, "killed");
    const char *status = o.interrupted || (o.signaled && !killed_as_asked) ? "incomplete"
                         : o.exit_status == 0                               ? "finished"
                                                                            : "failed";
    json_t *m = json_pack("{s:i, s:s, s:s, s:I, s:s, s:s, s:{s:s, s:s}, s:I, s:i, s:O}", "manifest_version",
                          TB_MANIFEST_VERSION, "run_id", run_id, "experiment", id->experiment, "version",
                          (json_int_t)id->version, "question", id->question ? id->question : "", "status", status,
                          "runbook", "path", id->runbook, "sha256", id->runbook_sha256, "seed", (json_int_t)id->seed,
                          "repetition", id->repetition, "sweep_point", id->sweep_point);
    if (!m) {  // json_pack refuses a NULL string: a replayed manifest without these fields
        json_decref(files);
        json_decref(config);
        return tb_fail(err, "%s: manifest: the run's identity lacks its experiment, runbook path, runbook sha256 or sweep point", rec);
    }
    json_object_set_new(m, "replay_of", id->replay_of ? json_string(id->replay_of) : json_null());
    if (id->supersedes) json_object_set_new(m, "supersedes", json_deep_copy(id->supersedes));
    json_object_set_new(m, "git", id->git ? tb_git_state_json(id->git, id->git->dirty ? TB_RECORD_PATCH : NULL) : json_null());
    json_object_set_new(m, "argv", json_deep_copy(argv));
    json_object_set_new(m, "launcher", launch ? json_deep_copy(launch) : tb_launch_json(NULL, 1, 0));
    // a directory name is the user's to choose: one that looks like a credential is not recorded
    const char *cwd_marker = tb_credential_marker(cwd);
    json_object_set_new(m, "cwd", json_string(cwd_marker ? cwd_marker : cwd));
    json_t *env_filter = NULL;
    json_object_set_new(m, "environment", tb_environment_json(environ, id->env_allow, id->env_deny, &env_filter));
    json_object_set_new(m, "environment_filter", env_filter ? env_filter : json_null());
    json_object_set_new(m, "host", tb_host_json());
    // what the engine binary is (engine_build.h); an engine that cannot say is noted, not fatal
    tb_error build_err;
    const int engine_index = tb_manifest_engine_index(m);
    json_t *build = engine_index < 0 ? NULL : tb_engine_build_info(json_string_value(json_array_get(argv, (size_t)engine_index)), &build_err);
    if (engine_index < 0) tb_fail(&build_err, "the launcher's engine_argv_index is not in argv");
    json_object_set_new(m, "engine_build", build ? build : json_pack("{s:s}", "error", build_err.msg));
    json_object_set_new(m, "config", config ? config : json_null());
    json_object_set_new(m, "start", json_string(start));
    json_object_set_new(m, "end", json_string(end));
    json_object_set_new(m, "exit_status", json_integer(o.exit_status));
    if (id->expected_failure)
        json_object_set_new(m, "expected_failure", json_pack("{s:s, s:i}", "kind", id->expected_failure, "exit_status",
                                                             id->expected_exit_status));
    json_object_set_new(m, "files", files);
    int rc = tb_write_json_atomic(path, m, err);
    json_decref(m);
    if (rc != 0) return -1;
    unlink(beat);
    // the manifest's digest into the version's ledger and the catalogue (anchor.h): a record
    // that cannot be anchored is complete but does not prove, and the caller says so
    if (tb_anchor_record(artifacts, rec, err) != 0) return -1;
    sqlite3 *db;
    tb_error cat_err;
    if (tb_catalog_open(&db, artifacts, &cat_err) == 0) {
        if (tb_catalog_add_run(db, rec, &cat_err) != 0) fprintf(stderr, "tracebook: catalogue: %s\n", cat_err.msg);
        sqlite3_close(db);
    } else {
        fprintf(stderr, "tracebook: catalogue: %s\n", cat_err.msg);
    }
    return 0;
}
