// dist_checkpoint.h — sharded checkpoints of the whole training state (Megatron-Core's
// dist_checkpointing): saved at one layout, loadable at any other.
//
// `--save DIR` writes, every --save-interval steps and at the end of training:
//
//   DIR/iter_NNNNNNN/                      one committed checkpoint
//       metadata.json                      written last; what the directory holds (below)
//       rank-RRRRR.safetensors             the tensors rank R writes (F32, its shards)
//   DIR/latest_checkpointed_iteration.txt  the last committed iteration (Megatron's name)
//
// Global tensors, named as the model's table (models/gpt.h, Hugging Face GPT-2 names) in the
// engine's layout (rows, cols):
//   model.<name>                   the parameter
//   optimizer.exp_avg.<name>       Adam's first moment (fp32; the parameters are the master)
//   optimizer.exp_avg_sq.<name>    Adam's second moment
// Each is stored as the tensor-parallel shards of the layout it was saved at: one piece per
// tp rank (one in all for tensors replicated over tp), in the rank's own layout, with the
// geometry that reassembles it (full shape, split axis, segments — Q, K, V or gate, up — and
// the rows that are real, not vocabulary padding). Only one replica of a piece is written:
// tp rank 0 for tensors replicated over tp, never the last stage's copy of a tied embedding,
// and among the data-parallel replicas the one whose dp rank is the tensor's index mod dp,
// so the writes spread over the data-parallel group. An expert's tensors (MoE) are named by
// their global expert index (h.L.mlp.experts.E.*): the replica written is the one whose
// expert-dp rank is the index mod expert-dp, among the ranks holding that expert, and a tensor
// split over etp is one piece per etp rank ("tp_rank" its etp index, "tp" the etp size), so a
// checkpoint saved at one expert-parallel (or expert-tensor-parallel) size loads at any other.
// Under the distributed optimizer the moments are first all-gathered bucket by bucket over the
// data-parallel group (an experts' bucket over expert-dp: adamw_bucket_group), into buffers of
// the rank's backend (device memory on --device cuda: NCCL moves device buffers).
//
// On a device backend (--device cuda) the pieces go through host memory
// (backend/host_stage.h): a synchronous save copies each piece to one host stage as the
// writer reaches it, one at a time; an async save snapshots every piece it writes into one
// host buffer in the rank's thread; a load reassembles each tensor on the host and copies the
// rank's shard to the device. The files are the CPU's bit for bit for the same state.
//
// metadata.json: {"format": "tracebook-dist-checkpoint", "version": 1, "iteration",
//   "consumed_samples", "optimizer": {"step"}, "config" (resolved), "layout" {tp, pp, vpp,
//   dp, ep, etp, world, distributed_optimizer}, "tensors": {global name: {"full_rows", "full_cols",
//   "real_rows", "split_axis", "segments", "tp", "pieces": [{"tp_rank", "file", "key"}]}},
//   "files": {file: {"sha256", "bytes"}}}.
// RNG: nothing random runs after initialisation (no dropout) and the data position is a
// function of the iteration (datasets/gpt_dataset.h), so the iteration restores both.
//
// Crash-safe: the checkpoint is written into iter_NNNNNNN.tmp; after every rank's file is
// fsync'd, rank 0 writes metadata.json, renames the directory to iter_NNNNNNN and then
// rewrites latest_checkpointed_iteration.txt — a kill at any moment leaves the previous
// checkpoint the latest and complete, and no directory named iter_* without metadata.json.
//
// `--load DIR` (a directory with latest_checkpointed_iteration.txt, or one iter_ directory)
// checks the model's shape against the checkpoint's config (each difference named), every
// file's sha256, and that every tensor this rank needs has all its pieces, then reassembles
// each tensor and takes this rank's shard of it: tp, pp, vpp, dp and the distributed
// optimizer may all differ from the saving run's.
#ifndef TB_CHECKPOINT_DIST_CHECKPOINT_H
#define TB_CHECKPOINT_DIST_CHECKPOINT_H

#include <jansson.h>
#include <stdint.h>

#include "core/error.h"
#include "models/gpt.h"
#include "optimizer/optimizer.h"
#include "comm/parallel_state.h"

#define TB_CKPT_LATEST "latest_checkpointed_iteration.txt"
#define TB_CKPT_METADATA "metadata.json"

// What one rank checkpoints: its model chunks and their optimizers.
typedef struct dist_ckpt_state {
    tb_rank *rk;
    const tb_config *cfg;
    gpt_model *models;
    tb_adamw *opts;
    int nchunks;
} dist_ckpt_state;

// A save's phases on one rank (ms on the trace's clock), in checkpoint.json and as ranges
// (checkpoint.save > checkpoint.materialize, checkpoint.write, checkpoint.barrier, ...):
//   materialize  the distributed optimizer's moments all-gathered, the pieces listed (and
//                copied out for an async save)
//   serialize    the safetensors header; write: the bytes to the kernel; fsync: to the disk,
//                with the rename and the directory's fsync
//   barrier      from this rank's arrival (its file and piece list written) to every rank's
//   metadata, commit   rank 0: metadata.json; the rename to iter_NNNNNNN and latest
// (On the CPU backend there is no device-to-host copy: the state is host memory. On a device,
// materialize includes an async save's copies to the host, write a sync save's.)
enum { CKPT_MATERIALIZE, CKPT_SERIALIZE, CKPT_WRITE, CKPT_FSYNC, CKPT_BARRIER, CKPT_METADATA, CKPT_COMMIT,
       CKPT_NPHASES };
typedef struct dist_ckpt_timing {
    double start_ms[CKPT_NPHASES], end_ms[CKPT_NPHASES];
    int64_t bytes[CKPT_NPHASES];
    double begin_ms;    // the save's call (its directory agreed on before materialize)
    double arrival_ms;  // at the barrier
    double stall_ms;    // what training waited for this save on this rank
    double done_ms;     // when the save was committed and this rank went on (returned to training)
} dist_ckpt_timing;

// The saves of one run: at most one in flight (--async-save), and rank 0's checkpoint.json.
struct dist_ckpt_save;
typedef struct dist_ckpt_writer {
    struct dist_ckpt_save *in_flight;
    json_t *saves;
    double writers_run_delay_s;  // the async writer threads' waits for a core, summed (-1: unknown)
} dist_ckpt_writer;

// Every rank calls it after step `iteration`; returns 0 on every rank or -1 on every rank
// (a failing rank's reason is in its err, the others name the rank that failed). A save
// still in flight completes first. With --async-save it returns once the state is copied
// out; the files are written by a background thread, and the barrier, commit and record
// happen at the next save or dist_checkpoint_finish. checkpoint.json in the run directory
// (rank 0) lists every save: per rank its phases with bytes, barrier arrival and stall; the
// last arriver, by how long, and the phase that made it late.
int dist_checkpoint_save(const dist_ckpt_state *s, dist_ckpt_writer *w, const char *dir, int64_t iteration,
                         tb_error *err);
// Completes the save in flight, if any (end of training).
int dist_checkpoint_finish(const dist_ckpt_state *s, dist_ckpt_writer *w, tb_error *err);
// After a failure: waits for a background writer, frees what is left (commits nothing).
void dist_checkpoint_writer_free(dist_ckpt_writer *w);
// Every rank calls it before training; *iteration is the checkpoint's (training resumes at
// the next step). Returns -1 with the reason on the rank that found it (the others fail
// with "rank R could not load").
int dist_checkpoint_load(const dist_ckpt_state *s, const char *dir, int64_t *iteration, tb_error *err);
// 1 when path is a checkpoint directory (it holds latest_checkpointed_iteration.txt or
// metadata.json), 0 otherwise (e.g. a Hugging Face .safetensors file).
int dist_checkpoint_is_dir(const char *path);

#endif
