// tb_mpirun.h — how the tests launch pretrain_gpt under Open MPI (TB_MPIEXEC is defined by
// CMake when MPI and mpiexec were found).
//
// A container runs as root on few cores: mpirun needs leave for both; shared memory and self
// transports only; no binding, so that oversubscribed processes are not pinned to one core.
// `timeout` turns a hang into a failed check, never a stuck suite. Under LeakSanitizer, Open
// MPI's leaks are suppressed by library (tests/lsan.supp), which needs whole stacks: its
// libraries have no frame pointers, hence the slow unwinder, and its components stay loaded
// (no dlclose) so that their frames have names.
#ifndef TB_TESTS_MPIRUN_H
#define TB_TESTS_MPIRUN_H

#ifdef TB_MPIEXEC
#define MPIRUN                                                                                              \
    "LSAN_OPTIONS=\"${LSAN_OPTIONS:+$LSAN_OPTIONS:}fast_unwind_on_malloc=0\" timeout 300 " TB_MPIEXEC          \
    " --allow-run-as-root --oversubscribe --bind-to none --mca btl self,vader"                                  \
    " --mca mca_base_component_disable_dlclose 1"
#endif

#endif
