#include "initialize.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/fileio.h"
#include "core/run_dir.h"
#include "core/xalloc.h"

#ifdef TB_HAVE_MPI
#include <mpi.h>
#endif

#define HOST_LEN 256

int tb_launched_by_mpirun(char *what, size_t len) {
    static const char *const vars[] = {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK"};
    for (size_t i = 0; i < sizeof vars / sizeof *vars; i++) {
        const char *v = getenv(vars[i]);
        if (v && *v) {
            if (what) snprintf(what, len, "%s=%s", vars[i], v);
            return 1;
        }
    }
    return 0;
}

void tb_launch_threads(tb_launch *l, int argc, char **argv) {
    memset(l, 0, sizeof *l);
    l->processes = 1;
    l->argc = argc;
    l->argv = argv;
}

#ifdef TB_HAVE_MPI
static const char *thread_level_name(int level) {
    switch (level) {
    case MPI_THREAD_SINGLE: return "MPI_THREAD_SINGLE";
    case MPI_THREAD_FUNNELED: return "MPI_THREAD_FUNNELED";
    case MPI_THREAD_SERIALIZED: return "MPI_THREAD_SERIALIZED";
    case MPI_THREAD_MULTIPLE: return "MPI_THREAD_MULTIPLE";
    default: return "an unknown thread level";
    }
}
#endif

int tb_initialize(tb_launch *l, int argc, char **argv, tb_error *err) {
    tb_launch_threads(l, argc, argv);
    char what[128];
    if (!tb_launched_by_mpirun(what, sizeof what)) return 0;
    // until MPI says otherwise, the launcher's word for who this is (so that one process
    // speaks for all when MPI cannot be initialized)
    const char *rank = getenv("OMPI_COMM_WORLD_RANK");
    if (rank) l->process = atoi(rank);
#ifdef TB_HAVE_MPI
    int provided = MPI_THREAD_SINGLE;
    if (MPI_Init_thread(NULL, NULL, MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS)
        return tb_fail(err, "launched by mpirun (%s) but MPI_Init_thread failed", what);
    if (provided < MPI_THREAD_MULTIPLE) {
        MPI_Finalize();
        return tb_fail(err, "launched by mpirun (%s): MPI gives %s, and the rank threads of a process call MPI "
                       "concurrently, which needs MPI_THREAD_MULTIPLE (an MPI built without thread support?)",
                       what, thread_level_name(provided));
    }
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    l->mpi = 1;
    MPI_Comm_size(MPI_COMM_WORLD, &l->processes);
    MPI_Comm_rank(MPI_COMM_WORLD, &l->process);
    return 0;
#else
    return tb_fail(err, "launched by mpirun (%s), but this pretrain_gpt was built without MPI (no MPI found at "
                   "configure time, or -DTB_WITH_MPI=OFF): install libopenmpi-dev and rebuild, or run it without "
                   "mpirun (every rank a thread of one process)", what);
#endif
}

void tb_finalize(tb_launch *l, int failed_in_run) {
#ifdef TB_HAVE_MPI
    if (l->mpi && !failed_in_run) MPI_Finalize();
#else
    (void)failed_in_run;
#endif
    l->mpi = 0;
}

int tb_launch_is_lead(const tb_launch *l) { return l->process == 0; }

int tb_launch_processes_on_host(int processes) {
    const char *local = processes > 1 ? getenv("OMPI_COMM_WORLD_LOCAL_SIZE") : NULL;
    char *end = NULL;
    long n = local ? strtol(local, &end, 10) : 0;
    return local && end != local && *end == '\0' && n > 0 && n <= processes ? (int)n : processes;
}

int tb_launch_agree(const tb_launch *l, int status, int *first_failing) {
    int first = status != 0 ? l->process : INT_MAX;
#ifdef TB_HAVE_MPI
    if (l->mpi) {
        MPI_Allreduce(MPI_IN_PLACE, &status, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
        MPI_Allreduce(MPI_IN_PLACE, &first, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    }
#endif
    if (first_failing) *first_failing = first == INT_MAX ? -1 : first;
    return status;
}

void tb_launch_apply(const tb_launch *l, tb_config *cfg) {
    if (!l->mpi) return;
    if (cfg->ranks_per_process == 0) cfg->ranks_per_process = 1;
    int64_t world = (int64_t)l->processes * cfg->ranks_per_process;
    if (cfg->world_size == 0 && cfg->ranks_per_process > 0) cfg->world_size = world > INT_MAX ? INT_MAX : (int)world;
}

int tb_launch_validate(const tb_launch *l, const tb_config *cfg, tb_error *err) {
    const int k = cfg->ranks_per_process;
    if (cfg->mpi_collectives == TB_MPI_COLLECTIVES_EXACT && (!l->mpi || l->processes < 2))
        return tb_fail(err, "mpi_collectives exact needs collectives across processes (mpirun -np 2 or more): "
                            "this run's ranks are threads of %s, so no collective would take it",
                       l->mpi ? "its 1 process" : "one process (no mpirun)");
    if (l->mpi) {
        if (k < 1) return tb_fail(err, "ranks_per_process (%d) must be at least 1 under mpirun", k);
        const int64_t world = (int64_t)l->processes * k;
        if (cfg->world_size != world)
            return tb_fail(err, "world_size (%d) must equal processes (%d) x ranks_per_process (%d) = %lld under "
                           "mpirun (mpirun -np sets the processes, --ranks-per-process the rank threads of each)",
                           cfg->world_size, l->processes, k, (long long)world);
        return 0;
    }
    if (k != 0 && k != cfg->world_size)
        return tb_fail(err, "ranks_per_process (%d) needs mpirun: without it one process holds every rank "
                       "(world_size %d); launch mpirun -np %d ... --ranks-per-process %d",
                       k, cfg->world_size, k > 0 && cfg->world_size % k == 0 ? cfg->world_size / k : 1, k);
    return 0;
}

int tb_launch_bcast(const tb_launch *l, void *buf, size_t bytes, tb_error *err) {
#ifdef TB_HAVE_MPI
    if (!l->mpi) return 0;
    if (bytes > (size_t)INT_MAX) return tb_fail(err, "broadcast of %zu bytes: more than MPI's int count", bytes);
    int rc = MPI_Bcast(buf, (int)bytes, MPI_BYTE, 0, MPI_COMM_WORLD);
    if (rc != MPI_SUCCESS) return tb_fail(err, "MPI_Bcast from process 0 failed (error %d)", rc);
#endif
    return 0;
}

// Each process: its host name and pid, gathered on process 0.
typedef struct process_info {
    char host[HOST_LEN];
    long long pid;
} process_info;

json_t *tb_launch_record(const tb_launch *l, const tb_config *cfg) {
    process_info me;
    memset(&me, 0, sizeof me);
    if (gethostname(me.host, sizeof me.host - 1) != 0) snprintf(me.host, sizeof me.host, "?");
    me.pid = (long long)getpid();
    process_info *all = tb_xcalloc((size_t)l->processes, sizeof *all, "launch record");
    char library[1024] = "";
#ifdef TB_HAVE_MPI
    if (l->mpi) {
        MPI_Gather(&me, (int)sizeof me, MPI_BYTE, all, (int)sizeof me, MPI_BYTE, 0, MPI_COMM_WORLD);
        int len = 0;
        char text[MPI_MAX_LIBRARY_VERSION_STRING];
        if (MPI_Get_library_version(text, &len) == MPI_SUCCESS) {
            text[strcspn(text, "\n")] = '\0';  // its first line: the library and version
            snprintf(library, sizeof library, "%s", text);
        }
    } else
#endif
        all[0] = me;
    if (l->process != 0) {
        free(all);
        return NULL;
    }
    const int k = l->mpi ? cfg->ranks_per_process : cfg->world_size;
    json_t *argv = json_array(), *processes = json_array(), *per_host = json_object();
    for (int i = 0; i < l->argc; i++) json_array_append_new(argv, json_string(l->argv[i]));
    for (int p = 0; p < l->processes; p++) {
        json_t *ranks = json_array();
        for (int r = p * k; r < (p + 1) * k; r++) json_array_append_new(ranks, json_integer(r));
        json_array_append_new(processes, json_pack("{s:i, s:s, s:I, s:o}", "process", p, "host", all[p].host, "pid",
                                                   (json_int_t)all[p].pid, "ranks", ranks));
        json_t *n = json_object_get(per_host, all[p].host);
        json_object_set_new(per_host, all[p].host, json_integer((n ? json_integer_value(n) : 0) + k));
    }
    free(all);
    // how a collective across processes ran (config.h, enum tb_mpi_collectives)
    json_t *collectives = l->mpi ? json_string(cfg->mpi_collectives == TB_MPI_COLLECTIVES_EXACT ? "exact" : "native")
                                 : json_null();
    return json_pack("{s:s, s:o, s:i, s:i, s:i, s:o, s:o, s:o, s:o, s:o}", "launcher", l->mpi ? "mpirun" : "threads",
                     "argv", argv, "processes", l->processes, "ranks_per_process", k, "world_size", cfg->world_size,
                     "thread_level", l->mpi ? json_string("MPI_THREAD_MULTIPLE") : json_null(), "mpi_library",
                     library[0] ? json_string(library) : json_null(), "mpi_collectives", collectives, "per_process",
                     processes, "ranks_per_host", per_host);
}

static int write_config(const char *run_dir, const tb_config *cfg, tb_error *err) {
    char path[TB_PATH_MAX + 64];
    if (tb_run_path(path, sizeof path, run_dir, TB_RUN_CONFIG, err) != 0) return -1;
    json_t *resolved = config_to_json(cfg);
    int rc = tb_write_json_atomic(path, resolved, err);
    json_decref(resolved);
    return rc;
}

static int write_launch(const char *run_dir, json_t *record, tb_error *err) {
    char path[TB_PATH_MAX + 64];
    if (tb_run_path(path, sizeof path, run_dir, TB_RUN_LAUNCH, err) != 0) return -1;
    return tb_write_json_atomic(path, record, err);
}

int tb_launch_setup_run_dir(const tb_launch *l, const tb_config *cfg, char *run_dir, size_t len, tb_error *err) {
    json_t *record = tb_launch_record(l, cfg);  // collective: every process's host
    // every process's own view of the directory, before process 0 creates anything in it
    const int unused = tb_run_dir_check_unused("--run-dir", cfg->run_dir, err) == 0;
    int refused = !unused;
    if (l->mpi) {
        int first = -1;
        refused = tb_launch_agree(l, unused ? 0 : TB_EXIT_FAILURE, &first) != 0;
        if (refused && unused)
            tb_fail(err, "process %d: process %d refused --run-dir %s (its message says why)", l->process, first,
                    cfg->run_dir);
    }
    if (refused) {
        json_decref(record);
        return -1;
    }
    struct {
        int rc;
        char dir[TB_PATH_MAX];
    } verdict = {0, ""};
    if (tb_launch_is_lead(l)) {
        verdict.rc = tb_output_dir_check("--save", cfg->save, err) ||  // (after the run directory's check)
                     tb_output_file_check("--save-hf", cfg->save_hf, err) ||
                     tb_run_dir_create(cfg->run_dir, run_dir, len, err) != 0 ||
                     write_config(run_dir, cfg, err) != 0 || write_launch(run_dir, record, err) != 0;
        snprintf(verdict.dir, sizeof verdict.dir, "%s", run_dir);
    }
    json_decref(record);
    if (!l->mpi) return verdict.rc ? -1 : 0;
    tb_error bcast_err;
    if (tb_launch_bcast(l, &verdict, sizeof verdict, &bcast_err) != 0) {
        if (err) *err = bcast_err;
        return -1;
    }
    if (verdict.rc) {
        if (!tb_launch_is_lead(l)) tb_fail(err, "process %d: process 0 could not set up the run directory", l->process);
        return -1;
    }
    // the same path, created on every host (one may not share process 0's file system); every
    // process agrees on the outcome before any goes on to the collectives that follow
    int rc = tb_launch_is_lead(l) ? 0 : tb_run_dir_create(verdict.dir, run_dir, len, err), first = -1;
    if (tb_launch_agree(l, rc ? TB_EXIT_FAILURE : 0, &first) != 0 && rc == 0)
        rc = tb_fail(err, "process %d: process %d could not create the run directory %s", l->process, first,
                     verdict.dir);
    return rc ? -1 : 0;
}
