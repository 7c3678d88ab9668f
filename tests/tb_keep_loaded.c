// tb_keep_loaded.c — preloaded into the processes the tests launch under mpirun in a build with
// LeakSanitizer (tests/tb_mpirun.h): dlclose does nothing, so every shared object stays mapped
// to the end of the process.
//
// Why: Open MPI 4.1 unloads its components (mca_*.so, PMIx's plugins) in MPI_Finalize, before
// LeakSanitizer's check at exit; frames in an unloaded object have no module and no name, so
// tests/lsan.supp, which suppresses leaks by Open MPI's libraries and nothing else, cannot match
// them. Open MPI 5's mca_base_component_disable_dlclose is not a parameter of 4.1 (mpirun
// accepts it and does nothing). Keeping the components loaded also halved the CPU time of a
// launch under the slow unwinder the suppressions needed then (a 2-process run of the test
// model: 4.4 s → 2.1 s; tests/lsan-mpirun.supp says why the fast one does now).
//
// Not built in, not linked into anything: the engine under test is the one the suite built.
#include <dlfcn.h>

int dlclose(void *handle) {
    (void)handle;
    return 0;
}
