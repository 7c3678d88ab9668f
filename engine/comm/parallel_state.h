// parallel_state.h — who a rank is: its coordinates in the tp × cp × dp × pp grid, its
// groups, and the per-rank context every module receives (Megatron-Core's parallel_state,
// without globals).
//
// Rank order is Megatron-Core's default "tp-cp-ep-dp-pp": tp varies fastest, pp slowest,
//   rank = tp_rank + tp·(cp_rank + cp·(dp_rank + dp·pp_rank)).
// A group holds the ranks that agree on every coordinate outside it, in increasing rank
// order (Megatron's generate_masked_orthogonal_rank_groups). E.g. tp 2, cp 2, dp 2, pp 2:
// tp [0,1] [2,3] ..; cp [0,2] [1,3] ..; dp [0,4] [1,5] ..; pp [0,8] [1,9] ..;
// dp_cp [0,2,4,6] [1,3,5,7] ..; mp (tp × pp) [0,1,8,9] ..; embedding: the first and last
// pipeline stage of each pipeline group.
//
// With experts (--num-experts), the expert grid lies beside the dense one over the same ranks
// (Megatron-Core's second RankGenerator, "MoE parallel folding"): etp × ep × expert-dp × pp,
// in the same order with etp in tp's place, ep in cp's, expert-dp in dp's,
//   rank = etp_rank + etp·(ep_rank + ep·(edp_rank + edp·pp_rank)),  edp = world / (etp·ep·pp),
// so the pipeline groups coincide. E.g. world 8, tp 2 (dense dp 4), etp 1, ep 4, pp 1:
// ep [0,1,2,3] [4,5,6,7]; expert_dp [0,4] [1,5] ..; etp [0] [1] ... Expert parameters'
// gradients are reduced over expert_dp, the dense ones over dp_cp. Without experts the grid is
// etp = tp, ep 1: ep is the rank alone, etp the tp group, expert_dp the dp_cp group.
// Every report names a rank by its coordinates: "rank 13 (tp1 cp0 dp1 pp1)".
#ifndef TB_PARALLEL_STATE_H
#define TB_PARALLEL_STATE_H

#include <pthread.h>
#include <setjmp.h>
#include <stdatomic.h>
#include <stdint.h>

#include "comm/group.h"
#include "config/config.h"
#include "core/error.h"
#include "drills/drills.h"

typedef struct tb_coords {
    int tp, cp, dp, pp;
} tb_coords;

// A rank's place in the expert grid.
typedef struct tb_expert_coords {
    int etp, ep, edp, pp;
} tb_expert_coords;

typedef enum tb_group_kind {
    TB_GROUP_TP,
    TB_GROUP_CP,
    TB_GROUP_DP,
    TB_GROUP_DP_CP,
    TB_GROUP_PP,
    TB_GROUP_MP,         // model parallel: tp × pp
    TB_GROUP_EMBEDDING,  // first and last pipeline stage
    TB_GROUP_WORLD,
    TB_GROUP_PP_GRAD,    // the pipeline group again, for gradients flowing backward (Megatron uses a
                         // second communicator for one direction, so the two never queue together)
    TB_GROUP_EP,         // expert parallel: the ranks that split a layer's experts
    TB_GROUP_ETP,        // expert tensor parallel
    TB_GROUP_EXPERT_DP,  // expert data parallel: replicas of the same experts
    TB_NGROUP_KINDS
} tb_group_kind;

const char *tb_group_kind_name(tb_group_kind k);

// Coordinates of `rank` under the config's sizes (tp-cp-ep-dp-pp order).
tb_coords parallel_state_coords(const tb_config *cfg, int rank);
tb_expert_coords parallel_state_expert_coords(const tb_config *cfg, int rank);
// "rank 13 (tp1 cp0 dp1 pp1)"
void parallel_state_label(char *buf, size_t len, int rank, tb_coords c);
// Members of the group of kind k that contains `rank`, in group order; returns the count
// (0 for a middle pipeline stage's embedding group: it belongs to none).
int parallel_state_group_members(const tb_config *cfg, tb_group_kind k, int rank, int *members);

struct tb_world;

struct tb_allocator;        // runtime/memory.h
struct tb_ranges;           // runtime/ranges.h
struct tb_flight_recorder;  // comm/flight_recorder.h

// How a rank fails from below its top (parallel_state_rank_fail): where it unwinds to, and
// what it failed with.
typedef struct tb_rank_failure {
    jmp_buf *unwind;  // where the rank unwinds to; NULL: a failure ends the process
    int status;       // TB_EXIT_* it failed with; 0 while it runs
    tb_error err;     // why
} tb_rank_failure;

// One rank: who it is (its coordinates and label), its groups, where it is in the run, and
// the objects it owns, each its own module's and reached from here. No engine state lives
// outside it. A world (parallel_state_world_init) gives every rank its objects; a rank built
// without one (a test, a tool) points them at its own.
typedef struct tb_rank {
    int rank;
    int world_size;
    tb_coords coords;
    char label[96];
    const tb_config *cfg;
    struct tb_world *world;         // NULL for a rank built without a world (tests)
    tb_group groups[TB_NGROUP_KINDS];
    // the rank's own objects
    struct tb_allocator *mem;       // every tensor of the rank (initialised by the trainer)
    struct tb_ranges *ranges;       // its trace (initialised by the trainer)
    struct tb_flight_recorder *fr;  // its collectives' last calls
    tb_rank_failure failure;
    char run_dir[TB_PATH_MAX];
    // where the rank is, for OOM and hang reports
    _Atomic int64_t step;           // 1-based; 0 before training
    _Atomic int microbatch;         // 0-based; -1 outside a microbatch
} tb_rank;

// The world as this process sees it and what its ranks share: the local backend's group
// objects, the collective timeout, the fault injection, the hang report's once-flag.
//
// Without mpirun one process runs every rank. Under mpirun process p of P runs the rank
// threads p·K .. p·K + K - 1 (K = size / P, --ranks-per-process), so that a tensor-parallel
// group stays inside a process when K >= tp (Megatron's node-local tp). Every rank of the
// world has its tb_rank (coordinates, label, group membership), so that any process can name
// any rank; only the local ones run, allocate and record.
typedef struct tb_world {
    const tb_config *cfg;
    int size;
    tb_rank *ranks;                 // (size)
    int process, processes;         // this process and how many there are (0 and 1 without mpirun)
    int local_first, local_count;   // the ranks this process runs: [local_first, local_first + local_count)
    // the backend of the groups whose members are all in this process (comm/local_backend.h's,
    // given by the caller), and (kinds × size) by group id the shared object of each such group;
    // NULL for every other group
    const tb_comm_backend *in_process;
    void **local_groups;
    // (kinds × size) by group id: the MPI backend's state of each group that spans processes and
    // has a member here (comm/mpi_backend.h); NULL until tb_mpi_world_connect
    void **mpi_groups;
    tb_comm_world comm;             // the collective timeout and the abort, as the backends see them
    tb_drills drills;               // the drills' plan (drills/drills.h), parsed once from cfg
    atomic_int hang_reported;
    // The world's abort: set by the first rank that fails (the root cause); every rank
    // waiting in a call on the local backend, or stalled by --inject-stall, then wakes and
    // fails too, so all rank threads return to their tops.
    // (comm.aborted: 0, or 1 + the rank that failed first)
    int abort_status;               // that rank's TB_EXIT_* status
    pthread_mutex_t abort_mu;
    pthread_cond_t abort_cv;
    char run_dir[TB_PATH_MAX];
    int64_t origin_ns;              // ts = 0 of every rank's trace
    struct tb_rank_objects *objects;  // (size) what each rank's pointers point at (parallel_state.c)
} tb_world;

// Builds the world for cfg in one process: every rank's coordinates and groups on the
// in-process backend `in_process` (&tb_local_backend, comm/local_backend.h: parallel_state
// knows no backend, as Megatron's parallel_state takes torch.distributed's). Allocators, traces
// and run directories of the ranks are left to the caller.
int parallel_state_world_init(tb_world *w, const tb_config *cfg, const tb_comm_backend *in_process, tb_error *err);
// The same as process `process` of `processes` (which must divide the world size): groups
// whose members are all local go on `in_process`; the local ranks' groups that span
// processes are left with no backend (backend NULL) until tb_mpi_world_connect gives them
// theirs.
int parallel_state_world_init_process(tb_world *w, const tb_config *cfg, int process, int processes,
                                      const tb_comm_backend *in_process, tb_error *err);
void parallel_state_world_free(tb_world *w);
// Whether this process runs `rank`; the process that runs it.
int parallel_state_rank_is_local(const tb_world *w, int rank);
int parallel_state_process_of(const tb_world *w, int rank);
// The rank's index among the ranks on its host, the GPU it takes being this mod the visible
// count (Megatron's / torchrun's LOCAL_RANK): without mpirun its rank; under mpirun
// local_process · K + its index in the process, local_process being Open MPI's
// OMPI_COMM_WORLD_LOCAL_RANK (K = the ranks of a process; the process index when it does not say).
int parallel_state_rank_on_host(const tb_rank *rk);

// Runs fn(rank, arg) for every rank of this process, each on its own thread (on the calling
// thread when the process has one rank), and returns when all have returned.
void parallel_state_run_ranks(tb_world *w, void (*fn)(tb_rank *rk, void *arg), void *arg);

// Ends this rank's part in the run from anywhere below its top (an allocation over the
// memory cap, a communicator call that timed out or failed, a peer's failure): records
// status and the message in rk, aborts the world (the first rank to fail is its root
// cause) and wakes every rank waiting on the local backend, then unwinds to rk->failure.unwind
// (longjmp). The rank's top frees what it held once every rank has stopped (a peer may
// still be reading its buffers). A rank without an unwind point (a tool, a test's rank)
// prints the message and ends the process with status.
void parallel_state_rank_fail(tb_rank *rk, int status, const char *fmt, ...)
    __attribute__((noreturn, format(printf, 3, 4)));
// Aborts the world for rk's failure (the first call names the root cause) and wakes every
// waiting rank; for a rank that failed by returning an error, so that its peers do not
// wait for it until the collective timeout.
void parallel_state_abort(tb_world *w, const tb_rank *rk, int status);
// The rank whose failure aborted the world, or -1 while it runs.
int parallel_state_aborted_by(tb_world *w);
// Blocks until the world is aborted.
void parallel_state_wait_for_abort(tb_world *w);
// The same for at most `seconds`; returns 1 when the world was aborted, 0 when the time ran out.
int parallel_state_wait_for_abort_timed(tb_world *w, double seconds);

// Prints rank → coordinates → members of each group (pretrain_gpt --print-rank-layout).
void parallel_state_print_layout(FILE *out, const tb_config *cfg);

#endif
