// gpt_dataset.h — the token source for GPT pretraining: fixed-length samples of T input
// tokens and their T targets (the inputs shifted by one), addressed by a global sample
// index so any rank can fetch any sample without reading the ones before it.
//
// Two kinds:
//
// 1. Token file (llm.c's format, so data prepared by llm.c loads as is):
//
//      offset 0     int32 magic    20240520
//      offset 4     int32 version  1 (uint16 tokens)
//      offset 8     int32 ntokens  number of tokens (read as uint32)
//      offset 12    244 more int32, zero (unused)
//      offset 1024  ntokens x uint16 token ids
//
//    Everything is little-endian. The whole file is read and validated at open: header,
//    the file size against ntokens, at least T+1 tokens, and every token id < vocab_size
//    (an error names the byte offset of the first bad token). The tokens live in one
//    TB_MEM_WORKSPACE buffer ("token data") from the caller's tb_allocator.
//
//    Sample i covers tokens [s, s + T + 1) with s = (i mod num_samples) * T, i.e. the
//    consecutive non-overlapping windows llm.c's loader reads (the last token of one
//    window is the first of the next), wrapping around after num_samples =
//    (ntokens - 1) / T. inputs = tokens[s .. s+T), targets = tokens[s+1 .. s+T+1).
//
// 2. Synthetic: a seeded, learnable stream (a short run shows the loss falling), with no
//    file. The exact generator, all arithmetic in uint64 (wrapping):
//
//      splitmix64_next(&x): x += 0x9E3779B97F4A7C15; return mix64(x)
//      mix64(z):            z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9
//                           z = (z ^ (z >> 27)) * 0x94D049BB133111EB
//                           return z ^ (z >> 31)
//
//      successor table (a permutation of [0, V), built once at open; V = vocab_size):
//        x = seed ^ 0x5375636365737372        ("Successr")
//        successor[v] = v for all v
//        for v = V-1 down to 1: j = splitmix64_next(&x) % (v + 1); swap successor[v], successor[j]
//
//      sample i (generated from (seed, i) alone; T + 1 tokens t[0..T]):
//        x = mix64(mix64(seed ^ 0x53616d706c655354) ^ i)      ("SampleST")
//        t[0] = splitmix64_next(&x) % V
//        for k = 1..T: r = splitmix64_next(&x)
//                      t[k] = (r % 4 != 0) ? successor[t[k-1]]     (probability 3/4)
//                                          : (r >> 2) % V          (uniform, probability 1/4)
//        inputs[k] = t[k], targets[k] = t[k+1] for k in [0, T)
//
//    So a target equals successor[input] with probability 3/4 + 1/(4V); the best
//    achievable loss is about -(3/4 + 1/4V) ln(3/4 + 1/4V) - (V-1)/(4V) ln(1/(4V)) nats,
//    far below ln V. (The % reductions have a modulo bias below V / 2^62, negligible.)
//    num_samples is UINT64_MAX: every index is a distinct sample.
//
// Both kinds are deterministic: the same (dataset, index) gives the same tokens on every
// call, rank and run. tb_gpt_dataset_get_sample reads only the dataset, so threads may
// call it concurrently.
#ifndef TB_DATASETS_GPT_DATASET_H
#define TB_DATASETS_GPT_DATASET_H

#include <stdint.h>

#include "core/error.h"
#include "runtime/memory.h"

#define TB_TOKEN_FILE_MAGIC 20240520
#define TB_TOKEN_FILE_VERSION 1
#define TB_TOKEN_FILE_HEADER_INTS 256
#define TB_TOKEN_FILE_HEADER_BYTES 1024   // 256 x int32
#define TB_TOKEN_FILE_MAX_TOKENS UINT32_MAX

typedef enum tb_gpt_dataset_kind {
    TB_GPT_DATASET_NONE = 0,   // zeroed / closed
    TB_GPT_DATASET_SYNTHETIC,
    TB_GPT_DATASET_FILE,
} tb_gpt_dataset_kind;

typedef struct tb_gpt_dataset {
    tb_gpt_dataset_kind kind;
    int seq_length;           // T
    int vocab_size;           // V; every token is < this
    uint64_t num_samples;     // file: (num_tokens - 1) / T; synthetic: UINT64_MAX

    // TB_GPT_DATASET_FILE
    uint16_t *tokens;         // (num_tokens,) TB_MEM_WORKSPACE "token data"
    uint64_t num_tokens;

    // TB_GPT_DATASET_SYNTHETIC
    uint64_t seed;
    int32_t *successor;       // (V,) a permutation of [0, V); TB_MEM_WORKSPACE
} tb_gpt_dataset;

// Reads and validates the whole token file (see the top comment). seq_length >= 1,
// vocab_size >= 1. On failure *ds is zeroed, nothing stays allocated, and err names the
// path, the byte offset where that applies, and the wrong value.
int tb_gpt_dataset_open_file(tb_gpt_dataset *ds, tb_allocator *a, const char *path,
                             int seq_length, int vocab_size, tb_error *err);

// The seeded synthetic stream (generator above). Allocates the (V,) successor table.
int tb_gpt_dataset_open_synthetic(tb_gpt_dataset *ds, uint64_t seed, int seq_length,
                                  int vocab_size, tb_allocator *a, tb_error *err);

// Frees what open allocated and zeroes *ds. Safe on a zeroed or already closed dataset.
void tb_gpt_dataset_close(tb_gpt_dataset *ds, tb_allocator *a);

// Sample `index` (any uint64; a file wraps it modulo num_samples): inputs (T,) and
// targets (T,) with targets[k] = the token after inputs[k].
void tb_gpt_dataset_get_sample(const tb_gpt_dataset *ds, uint64_t index, int32_t *inputs,
                               int32_t *targets);

// Writes a token file (1024-byte header + ntokens little-endian uint16) crash-safely:
// to "<path>.tmp.<pid>", fsync, rename over path (then fsync of the directory). A reader
// sees the old file or the whole new one; on failure the temporary file is removed.
// ntokens <= TB_TOKEN_FILE_MAX_TOKENS.
int tb_token_file_write(const char *path, const uint16_t *tokens, uint64_t ntokens,
                        tb_error *err);

#endif
