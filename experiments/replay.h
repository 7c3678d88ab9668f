// replay.h — `tracebook replay RUN`: re-execute a recorded run at its recorded revision
// (docs/ARCHITECTURE.md, "Experiments").
//
//   tracebook replay RUN [--artifacts DIR] [--timing-tolerance 0.5] [--keep] [--jobs N]
//
// 1. Finds the record <artifacts>/<experiment>/v<version>/RUN and checks its git.patch (when
//    the run was dirty) against the manifest's sha256.
// 2. Materialises the recorded commit into a temporary directory with libgit2 (the commit
//    must be in this repository) and applies the saved patch (it must still apply).
// 3. Builds pretrain_gpt there (cmake, Release) and re-runs the recorded argv — the engine
//    swapped for the fresh build, the run directory for the replay's own record.
// 4. Compares, and prints a verdict per metric: the per-step losses of every rank must be
//    bitwise equal (the CPU backend is deterministic); the median step time must be within
//    the stated relative tolerance (machines differ: a timing outside it is reported, it
//    does not fail the replay). The replay is a record of its own with replay_of = RUN.
// Exit status: 0 when the losses match bitwise, TB_EXIT_FAILURE otherwise or on any error,
// TB_EXIT_USAGE for a bad command line.
#ifndef TB_EXPERIMENTS_REPLAY_H
#define TB_EXPERIMENTS_REPLAY_H

int tracebook_replay_main(int argc, char **argv);

#endif
