// replay.h — `tracebook replay RUN`: re-execute a recorded run at its recorded revision
// (docs/ARCHITECTURE.md, "Experiments").
//
//   tracebook replay RUN [--artifacts DIR] [--timing-tolerance 0.5] [--ignore-timing] [--keep] [--rebuild] [--jobs N]
//
// 1. Finds the record <artifacts>/<experiment>/v<version>/RUN and checks it is still what
//    was recorded: every file its manifest lists, by sha256 (an altered file is named as
//    altered and nothing is replayed), and its git.patch when the run was dirty.
// 2. Materialises the recorded commit into a temporary directory with libgit2 (the commit
//    must be in this repository) and applies the saved patch (it must still apply).
// 3. Builds pretrain_gpt there with the recorded build's CMake options (the manifest's
//    engine_build; Release for a record that has none), pins the recorded BLAS kernel when
//    this CPU is of the recorded ISA level, names whatever still differs from the recorded
//    build (engine_build.h), and re-runs the recorded argv — the engine swapped for the
//    fresh build, the run directory for the replay's own record. A fresh build is kept for a
//    later replay of the same revision, options and toolchain (replay_build.h; --rebuild
//    builds anyway).
// 4. Compares, and prints a verdict per metric: the per-step losses of every rank must be
//    bitwise equal (the CPU backend is deterministic) — MATCH or DIFFER, with the reason
//    bitwise equality was not to be expected when the builds differ; the median step time
//    must be within the stated relative tolerance — WITHIN or OUTSIDE. The replay is a
//    record of its own with replay_of = RUN.
// Exit status: 0 when the losses MATCH and the timing is WITHIN (or --ignore-timing);
// TB_EXIT_FAILURE on DIFFER, OUTSIDE, an altered record or any error; TB_EXIT_USAGE for a
// bad command line.
#ifndef TB_EXPERIMENTS_REPLAY_H
#define TB_EXPERIMENTS_REPLAY_H

int tracebook_replay_main(int argc, char **argv);

#endif
