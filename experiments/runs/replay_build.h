// replay_build.h — the engine a replay runs (replay.h, step 3): pretrain_gpt built at the
// recorded commit and saved patch with the recorded CMake options, or that same build kept by
// an earlier replay.
//
// A runbook's runs share one revision and one build, and each replay of one rebuilt the engine
// from scratch (with the CUDA backend, a minute or more of nvcc). A fresh build is kept under
// <artifacts>/.replay-builds/<key>/ (pretrain_gpt, its build.log, and build.json: what the key
// was made of and the binary's sha256), and a later replay whose key is the same runs it
// instead of building again. The key is the SHA-256 of the commit, the saved patch's sha256,
// the CMake options, the toolchain as the build would find it (the environment CMake and the
// compilers read: CC CXX CFLAGS CXXFLAGS LDFLAGS CUDACXX CUDAHOSTCXX CUDAFLAGS CUDA_PATH CUDA_HOME
// CUDAARCHS PATH CPATH C_INCLUDE_PATH LIBRARY_PATH PKG_CONFIG_PATH CMAKE_PREFIX_PATH; the first line of
// `${CC:-cc} --version`, `${CUDAHOSTCXX:-g++} --version` and `cmake --version`; where nvcc
// resolves to as CMake looks for it, and the last line of its --version) and the host
// (-march=native and CUDA's "native" architectures build for it: its name, the CPU's model and
// flags; and the libraries CMake finds as the package manager installed them: the sha256 of
// /var/lib/dpkg/status): a new compiler, toolkit, package or machine makes a new key. Libraries
// installed outside the package manager (under CMAKE_PREFIX_PATH, say) are keyed by that
// variable only: after changing one, --rebuild. A kept build is used only when its build.json
// names the same key material and its binary, linked (or copied) into the replay's own
// temporary directory, has the sha256 recorded there; the replay runs that file, so another
// replay replacing the entry meanwhile (a rename) changes nothing it runs. A kept build that is
// not this one is built again, and why is said; `--rebuild` never reuses one (and replaces it). A
// fresh build runs from its own tree as before; only a copy is kept. Whatever ran, the replay
// asks the binary how it was built (engine_build.h) and names what differs from the recorded
// build. Deleting .replay-builds is always safe (the next replay builds again). It holds at
// most TB_REPLAY_KEPT_MAX builds (this project's Release build with CUDA: 6 MB each): keeping
// one removes the least recently used beyond that (a build.json's time is when it was kept or
// last run), and what replays that no longer run left half made (a temporary entry more than
// ten minutes old whose pid has no process); each removal is said.
#ifndef TB_EXPERIMENTS_REPLAY_BUILD_H
#define TB_EXPERIMENTS_REPLAY_BUILD_H

#include <jansson.h>
#include <stddef.h>
#include <stdio.h>

#include "core/error.h"

#define TB_REPLAY_KEPT_MAX 8  // kept builds, the most recently used

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

// A fresh build's binary (`built`), its log and build.json (key, sha256) put in entry, in place of
// what is there (a temporary directory renamed into place; the previous entry put back if that
// fails). 0, or -1 said on b->say ("not kept for a later replay: ..."): keeping is optional.
int tb_replay_build_keep(const tb_replay_build *b, const char *log, const char *built, const char *entry,
                         const json_t *key);

// Puts the engine's path in engine: in wt, the replay's own temporary directory (the fresh
// build's tree, or the kept binary's link), which the caller removes unless *keep is set (a
// failed build: its log is there). 0, or -1 with the reason printed on stderr.
int tb_replay_build_engine(const tb_replay_build *b, char *engine, size_t engine_len, char *wt, size_t wt_len,
                           int *keep);

#endif
