// tb_mpirun.h — how the tests launch pretrain_gpt under Open MPI (TB_MPIEXEC is defined by
// CMake when MPI and mpiexec were found).
//
// A container runs as root on few cores: mpirun needs leave for both; shared memory and self
// transports only, through the ob1 messaging layer (the one that uses them: without it each
// process first asks UCX for a network, 0.2 s of every launch); no binding, so that
// oversubscribed processes are not pinned to one core.
// `timeout` turns a hang into a failed check, never a stuck suite. Under LeakSanitizer, Open
// MPI's leaks are suppressed by library (tests/lsan.supp, plus tests/lsan-mpirun.supp for what
// it allocates through glibc's asprintf: the two joined by CMake, and the unwinder they need,
// in TB_MPIRUN_LSAN_OPTIONS), which needs its frames named: its components must stay loaded, so
// the launched processes preload tests/tb_keep_loaded.c (TB_MPIRUN_PRELOAD, defined by CMake in
// such a build; AddressSanitizer's check that its runtime comes first among the libraries is
// turned off for them, as the preload comes before it). TB_MPIRUN_SANITIZER_ENV is that
// environment, for a command line.
#ifndef TB_TESTS_MPIRUN_H
#define TB_TESTS_MPIRUN_H

#ifdef TB_MPIRUN_PRELOAD
#define TB_MPIRUN_SANITIZER_ENV                                                  \
    "ASAN_OPTIONS=\"${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0\" " \
    "LSAN_OPTIONS=\"${LSAN_OPTIONS:+$LSAN_OPTIONS:}" TB_MPIRUN_LSAN_OPTIONS "\" "
#define TB_MPIRUN_KEEP_LOADED " -x LD_PRELOAD='" TB_MPIRUN_PRELOAD "'"
#else
#define TB_MPIRUN_SANITIZER_ENV ""
#define TB_MPIRUN_KEEP_LOADED ""
#endif

#ifdef TB_MPIEXEC
#define MPIRUN                                                                                             \
    TB_MPIRUN_SANITIZER_ENV "timeout 300 " TB_MPIEXEC " --allow-run-as-root --oversubscribe --bind-to none" \
    " --mca pml ob1 --mca btl self,vader" TB_MPIRUN_KEEP_LOADED

// What test_mpi.c and test_mpi_failures.c launch: the engine, the tiny model they train, the
// two paths of --mpi-collectives, their run directories (this test process's, tb_tmp_path: a
// second run of the same test, as scripts/test.sh's on the Haswell kernel, names others), and
// `mpirun -np N pretrain_gpt ARGS` with its output in *sh and its wall time added to *total_s.
#include <stdarg.h>
#include <stdio.h>

#include "tb_shell.h"

#define TB_MPI_ENGINE TB_BIN_DIR "/pretrain_gpt"
#define TB_MPI_MODEL_UNTIMED                                                                                          \
    " --num-layers 4 --hidden-size 32 --num-attention-heads 4 --seq-length 16 --vocab-size 128"                  \
    " --micro-batch-size 2 --global-batch-size 8 --train-iters 3 --lr 3e-3"
#define TB_MPI_MODEL TB_MPI_MODEL_UNTIMED " --collective-timeout 60"  // (UNTIMED: for a test's own timeout)
#define TB_MPI_ALGORITHMS {"native", "exact"}

static inline const char *tb_mpi_run_dir(char *buf, size_t len, const char *kind, int i) {
    return tb_tmp_path(buf, len, "mpi-%s-%d", kind, i);
}

static inline int tb_mpirun_engine_v(tb_output *sh, double *total_s, int processes, const char *fmt_args, va_list ap) {
    char args[4096];
    vsnprintf(args, sizeof args, fmt_args, ap);
    int rc = tb_run_merged(sh, NULL, MPIRUN " -np %d " TB_MPI_ENGINE " %s", processes, args);
    *total_s += sh->seconds;
    return rc;
}
#endif

#endif
