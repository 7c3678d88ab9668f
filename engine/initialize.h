// initialize.h — how this process was launched and the distributed setup around it
// (Megatron's initialize_megatron → _initialize_distributed): rank threads of one process
// (the default), or one process per rank or per --ranks-per-process rank threads under
// mpirun (docs/ARCHITECTURE.md, "Beyond one process").
//
//   main:  tb_initialize(&launch, argc, argv, &err)    first: MPI_Init_thread under mpirun
//          parse → tb_launch_apply → config_resolve → config_validate + tb_launch_validate
//          status = tb_launch_agree(&launch, status, &who)   every process ends alike
//          pretrain(&cfg, &launch, &err)
//          tb_finalize(&launch, failed)                last: MPI_Finalize, unless training failed
//
// Without mpirun nothing of MPI is touched. Under mpirun (Open MPI's OMPI_COMM_WORLD_SIZE or
// PMIX_RANK in the environment) the process initializes MPI with MPI_THREAD_MULTIPLE, since
// its rank threads call MPI concurrently, and refuses to run with less; a binary built
// without MPI refuses to run under mpirun, naming why.
#ifndef TB_INITIALIZE_H
#define TB_INITIALIZE_H

#include <jansson.h>
#include <stddef.h>

#include "config/config.h"
#include "core/error.h"

typedef struct tb_launch {
    int mpi;                  // 1: launched by mpirun, MPI initialized
    int processes, process;   // 1 and 0 without mpirun
    int argc;
    char **argv;              // the command line, for launch.json
} tb_launch;

// Whether the environment says mpirun started this process; what said so ("OMPI_COMM_WORLD_SIZE=2") into what.
int tb_launched_by_mpirun(char *what, size_t len);

// The launch of a process that runs every rank as a thread (tools, tests).
void tb_launch_threads(tb_launch *l, int argc, char **argv);

// First thing in main (see above). Returns 0, or -1 with err set; the launch is then
// threads-only and nothing needs finalizing (l->process still says which process this is,
// from the launcher's environment, so that only process 0 need say why).
int tb_initialize(tb_launch *l, int argc, char **argv, tb_error *err);
// Last thing in main: MPI_Finalize under mpirun, unless `failed_in_run` — a failure once the
// ranks were running (a timeout, an OOM, a peer's death). Then some process may be dead or
// still waiting in a call, and Open MPI's MPI_Finalize waits for every process: this one
// would wait with it, or forever. It exits without finalizing instead (mpirun reports that
// and its status). A refusal every process agreed on (tb_launch_agree) finalizes as usual.
void tb_finalize(tb_launch *l, int failed_in_run);

// Whether this process speaks for all (process 0): for what every process would print alike.
int tb_launch_is_lead(const tb_launch *l);
// Every process's status in, the largest out (MPI_Allreduce MAX), so that all end alike
// when any one cannot go on; the status itself without mpirun. first_failing (when not
// NULL) gets the lowest process whose status was not 0 (-1: none), the one to say why once.
int tb_launch_agree(const tb_launch *l, int status, int *first_failing);

// The processes of a launch of `processes` that share this host: under mpirun Open MPI's
// OMPI_COMM_WORLD_LOCAL_SIZE (all of them when it does not say or says nonsense); 1 without.
int tb_launch_processes_on_host(int processes);

// Before config_resolve: under mpirun, --ranks-per-process 0 becomes 1 and --world-size 0
// becomes processes × ranks per process (the world the launcher made, as Megatron takes it).
void tb_launch_apply(const tb_launch *l, tb_config *cfg);
// After config_resolve: the world must be processes × ranks per process under mpirun; without
// it --ranks-per-process must be 0 or the whole world. Each violation names its numbers.
int tb_launch_validate(const tb_launch *l, const tb_config *cfg, tb_error *err);

// Process 0's `bytes` bytes of buf to every process (nothing to do without mpirun).
int tb_launch_bcast(const tb_launch *l, void *buf, size_t bytes, tb_error *err);

// Before any step, collective under mpirun: every process checks that the --run-dir it will
// write to is new or empty (core/run_dir.h; a host of its own may hold an earlier run's files
// there), and they agree; process 0 then checks --save and --save-hf, creates the run directory
// and writes config.json and launch.json; every other process waits for its verdict and the
// directory's path (process 0's clock names a default one) and creates it too (its host may not
// share process 0's file system). The path goes to run_dir. 0, or -1 with err set.
int tb_launch_setup_run_dir(const tb_launch *l, const tb_config *cfg, char *run_dir, size_t len, tb_error *err);

// What launch.json holds: launcher, argv, processes, ranks per process, each process's host,
// pid and ranks, ranks per host, the MPI library. Collective under mpirun (host names are
// gathered): every process calls it; process 0 gets the object, the others NULL.
json_t *tb_launch_record(const tb_launch *l, const tb_config *cfg);

#endif
