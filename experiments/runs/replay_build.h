// replay_build.h — the engine a replay runs (replay.h, step 3): pretrain_gpt built at the
// recorded commit and saved patch with the recorded CMake options, or that same build kept by
// an earlier replay.
//
// A runbook's runs share one revision and one build, and each replay of one rebuilt the engine
// from scratch (with the CUDA backend, a minute or more of nvcc). A fresh build is kept under
// <artifacts>/.replay-builds/<key>/ (pretrain_gpt, its build.log, and build.json: what the key
// was made of and the binary's sha256), and a later replay whose key is the same runs it
// instead of building again. The key is the SHA-256 of the commit, the saved patch's sha256,
// the CMake options and the toolchain as the build would find it (the environment CMake reads
// for compilers and flags: CC CFLAGS LDFLAGS CUDACXX CUDAFLAGS CUDA_PATH CUDA_HOME PATH; the
// first line of `${CC:-cc} --version`; where nvcc resolves to): a new compiler or toolkit
// makes a new key. A kept build is used only when its build.json names the same key material
// and the binary's sha256 is the one recorded there; otherwise it is built again, and said so.
// `--rebuild` never reuses one (and replaces it). Whatever was reused, the replay asks the binary
// how it was built (engine_build.h) and names what differs from the recorded build.
#ifndef TB_EXPERIMENTS_REPLAY_BUILD_H
#define TB_EXPERIMENTS_REPLAY_BUILD_H

#include <jansson.h>
#include <stddef.h>
#include <stdio.h>

#include "core/error.h"

typedef struct tb_replay_build {
    const char *artifacts;     // the kept builds are under <artifacts>/.replay-builds
    const char *repo_root;     // the repository that holds the commit
    const char *run_id;        // for the messages
    const char *commit;        // 40 hex digits
    const char *patch;         // the saved patch (NULL: the run's tree was clean) ...
    size_t patch_len;          // ... its length ...
    const char *patch_sha256;  // ... and its sha256, as the manifest has it
    const char *cmake_args;    // tb_engine_build_cmake_args's words
    int jobs;                  // cmake --build -j
    int rebuild;               // 1: build even when a kept build matches
    FILE *say;                 // progress
} tb_replay_build;

// Where the build b asks for is kept: entry gets <artifacts>/.replay-builds/<the key's first 16
// hex digits>, *key (when not NULL) what the key was made of (the caller's reference). 0, or -1
// with err set (a path too long).
int tb_replay_build_entry(const tb_replay_build *b, char *entry, size_t len, json_t **key, tb_error *err);

// Puts the engine's path in engine. wt gets the temporary directory a fresh build made ("" when
// a kept build was used): the caller removes it unless *keep is set (a failed build: its log is
// there). 0, or -1 with the reason printed on stderr.
int tb_replay_build_engine(const tb_replay_build *b, char *engine, size_t engine_len, char *wt, size_t wt_len,
                           int *keep);

#endif
