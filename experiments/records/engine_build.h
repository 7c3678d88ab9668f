// engine_build.h — how the engine binary of a run was built, asked of the binary itself
// (`pretrain_gpt --build-info`, engine/build_info.h), so that the record holds what the run
// executed and a replay can rebuild exactly that (docs/ARCHITECTURE.md, "Experiments").
//
// The manifest's "engine_build" is that JSON plus "sha256" of the binary. A replay passes its
// "cmake" options back to CMake, pins the recorded BLAS kernel (OPENBLAS_CORETYPE) when this
// host can run it, and compares the rebuilt binary's build with the recorded one: where
// they differ in anything that changes floating-point results — compiler, codegen flags,
// CPU ISA level, BLAS kernel — bitwise equal losses are not expected, and the verdict says
// which and why.
#ifndef TB_EXPERIMENTS_ENGINE_BUILD_H
#define TB_EXPERIMENTS_ENGINE_BUILD_H

#include <jansson.h>
#include <stddef.h>

#include "core/error.h"

// Runs `<engine> --build-info` and returns its JSON with "sha256" of the binary added, or
// NULL with err set (the engine could not be run, or did not answer with a JSON object). The
// answer is kept for the next call: a binary with the same sha256 under the same environment
// is not asked again (a runbook's runs share one engine). Not thread-safe.
json_t *tb_engine_build_info(const char *engine, tb_error *err);

// The CMake options of a recorded build as command-line words ("-DCMAKE_BUILD_TYPE=Debug
// -DTB_SANITIZE='address,undefined' ... -DTB_CUDA='OFF' -DTB_WITH_MPI='ON'"), each value
// single-quoted for the shell; the parts (TB_CUDA, TB_WITH_MPI) as the recorded build resolved
// them, so the replay compiles the parts that ran (but TB_CUDA=AUTO, the toolkit's headers
// without the backend, resolves anew on the replaying host; NCCL's root, TB_NCCL_ROOT, is not
// recorded: the toolkit's NCCL is looked for). `unrecorded` gets the options a record
// made before they were recorded lacks ("TB_CUDA, ...", "" when none): CMake's defaults apply.
// 0, or -1 with err set (a missing or non-string option, a value with a quote in it, too long).
int tb_engine_build_cmake_args(const json_t *build, char *buf, size_t len, char *unrecorded, size_t unrecorded_len,
                               tb_error *err);

// Why two builds cannot be expected to compute the same bits: "" when nothing that matters
// differs, else e.g. "CPU ISA level x86-64-v4 vs x86-64-v3; BLAS kernel SkylakeX vs Haswell".
void tb_engine_build_differences(const json_t *recorded, const json_t *replayed, char *buf, size_t len);

#endif
