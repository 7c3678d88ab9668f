// dist_checkpoint_internal.h — what the save (dist_checkpoint.c) and the load
// (dist_checkpoint_load.c) of a distributed checkpoint share. Not an interface beyond them.
#ifndef TB_CHECKPOINT_DIST_CHECKPOINT_INTERNAL_H
#define TB_CHECKPOINT_DIST_CHECKPOINT_INTERNAL_H

#include <stdint.h>

#include "core/error.h"
#include "comm/parallel_state.h"

#define CKPT_FORMAT "tracebook-dist-checkpoint"
#define CKPT_VERSION 1
#define CKPT_PATH 4096

// The tensors saved per parameter, in this order: "<kind>.<parameter name>".
static const char *const ckpt_kinds[3] = {"model", "optimizer.exp_avg", "optimizer.exp_avg_sq"};

// A path under the checkpoint directory (CKPT_PATH bytes at out); a longer one is an error
// naming its start, not cut.
__attribute__((format(printf, 3, 4))) int ckpt_path(char *out, tb_error *err, const char *fmt, ...);
// Every rank says whether it succeeded; all return 0 only when all did. A rank that did not
// fail learns which one did (the highest failing rank: its own err holds the reason).
int ckpt_agree(const tb_rank *rk, int ok, const char *what, tb_error *err);
// The sha256 of a regular file in hex, and its size.
int ckpt_sha256_file(const char *path, char hex[65], uint64_t *bytes, tb_error *err);
// Milliseconds since the world's origin (the traces' ts = 0).
double ckpt_ms_now(const tb_rank *rk);

#endif
