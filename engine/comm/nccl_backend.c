// nccl_backend.c — the communicator on NCCL (see nccl_backend.h). Compiled always: the
// real backend with TB_HAVE_NCCL, a stub that says it was not built otherwise.
#include "comm/nccl_backend.h"

#include <stdio.h>
#include <string.h>

#include "comm/comm.h"
#include "comm/local_backend.h"
#include "comm/mpi_backend.h"
#include "core/xalloc.h"
#include "comm/parallel_state.h"

#define TB_NCCL_NOT_BUILT "NCCL backend not built (no CUDA toolkit / NCCL found at configure time)"

#ifdef TB_HAVE_NCCL

#include <cuda_runtime.h>
#include <nccl.h>
#include <stdlib.h>
#include <time.h>

struct tb_nccl_ids {
    int n;                 // group ids 0 .. n-1 (kinds × world size)
    unsigned char *have;   // (n) which ids the world uses
    ncclUniqueId *id;      // (n)
};

// One group as one member sees it; what tb_group.backend_state points to.
typedef struct nccl_group {
    ncclComm_t comm;       // NULL once aborted
    cudaStream_t stream;
    int device;
    float *scratch;        // one float on the device, for barrier
    char name[64];         // the communicator's name in NCCL's logs
    cudaStream_t compute;  // the rank's compute stream (training, tb_nccl_rank_set_compute_stream), or NULL
    cudaEvent_t computed;  // recorded on it by a call of the rank thread, the group's stream waits for it
    void *stage;           // device staging of host buffers (with a compute stream), grown as needed
    size_t stage_bytes;
} nccl_group;

static nccl_group *state(const tb_group *g) { return g->backend == &tb_nccl_backend ? g->backend_state : NULL; }

static double world_timeout(const struct tb_rank *rk) {
    return rk && rk->world && rk->world->comm.collective_timeout_s > 0 ? rk->world->comm.collective_timeout_s : 300.0;
}

static const char *last_error(ncclComm_t comm) {
    const char *s = ncclGetLastError(comm);
    return s && *s ? s : "no further detail";
}

// A release at teardown that fails cannot fail the run any more (the rank is ending, maybe
// after a fault that left the error sticky): it is said on stderr rather than lost.
static void released(int failed, const char *what, const char *why) {
    if (failed) fprintf(stderr, "NCCL backend: teardown: %s: %s\n", what, why);
}
#define RELEASED_CUDA(call)                                                       \
    do {                                                                          \
        cudaError_t e_ = (call);                                                  \
        released(e_ != cudaSuccess, #call, cudaGetErrorString(e_));               \
    } while (0)

static void abort_comm(nccl_group *s) {
    if (s->comm) {
        ncclResult_t r = ncclCommAbort(s->comm);
        released(r != ncclSuccess, "ncclCommAbort", ncclGetErrorString(r));
    }
    s->comm = NULL;
}

// ---------------------------------------------------------------------------------------
// Version and unique ids

int tb_nccl_built(void) { return 1; }

int tb_nccl_version(char *buf, size_t len) {
    int v = 0;
    ncclResult_t r = ncclGetVersion(&v);
    if (r != ncclSuccess) {
        snprintf(buf, len, "ncclGetVersion: %s", ncclGetErrorString(r));
        return -1;
    }
    // Since 2.9 the code is MAJOR·10000 + MINOR·100 + PATCH; before, MAJOR·1000 + MINOR·100 + PATCH.
    if (v >= 20900) snprintf(buf, len, "%d.%d.%d", v / 10000, v / 100 % 100, v % 100);
    else snprintf(buf, len, "%d.%d.%d", v / 1000, v / 100 % 10, v % 100);
    return 0;
}

void tb_nccl_ids_free(tb_nccl_ids *ids) {
    if (!ids) return;
    free(ids->have);
    free(ids->id);
    free(ids);
}

int tb_nccl_ids_create(const tb_world *w, tb_nccl_ids **out, tb_error *err) {
    *out = NULL;
    tb_nccl_ids *ids = tb_xcalloc(1, sizeof *ids, "NCCL unique ids");
    ids->n = w->size * TB_NGROUP_KINDS;
    ids->have = tb_xcalloc((size_t)ids->n, 1, "NCCL unique ids");
    ids->id = tb_xcalloc((size_t)ids->n, sizeof *ids->id, "NCCL unique ids");
    for (int r = 0; r < w->size; r++)
        for (int k = 0; k < TB_NGROUP_KINDS; k++) {
            const tb_group *g = &w->ranks[r].groups[k];
            if (g->id < 0 || g->id >= ids->n) {
                tb_nccl_ids_free(ids);
                return tb_fail(err, "NCCL unique ids: group %s of rank %d has id %d, outside [0, %d)", g->name, r,
                               g->id, w->size * TB_NGROUP_KINDS);
            }
            if (ids->have[g->id]) continue;
            ncclResult_t res = ncclGetUniqueId(&ids->id[g->id]);
            if (res != ncclSuccess) {
                tb_nccl_ids_free(ids);
                return tb_fail(err, "ncclGetUniqueId for group %s (id %d): %s (%s)", g->name, g->id,
                               ncclGetErrorString(res), last_error(NULL));
            }
            ids->have[g->id] = 1;
        }
    *out = ids;
    return 0;
}

int tb_nccl_ids_create_mpi(tb_world *w, tb_nccl_ids **out, tb_error *err) {
    *out = NULL;
    tb_nccl_ids *ids = tb_xcalloc(1, sizeof *ids, "NCCL unique ids");
    ids->n = w->size * TB_NGROUP_KINDS;
    ids->have = tb_xcalloc((size_t)ids->n, 1, "NCCL unique ids");
    ids->id = tb_xcalloc((size_t)ids->n, sizeof *ids->id, "NCCL unique ids");
    for (int id = 0; id < ids->n; id++) {
        const tb_group *g0 = &w->ranks[id % w->size].groups[id / w->size];  // its first member's view
        if (g0->id != id) continue;
        int here = 0;
        for (int i = 0; i < g0->size; i++) here |= parallel_state_rank_is_local(w, g0->ranks[i]);
        if (!here) continue;
        if (parallel_state_rank_is_local(w, g0->ranks[0])) {
            ncclResult_t res = ncclGetUniqueId(&ids->id[id]);
            // a failure here leaves the group's other processes waiting in the broadcast
            // until the collective timeout, which ends their part too
            if (res != ncclSuccess) {
                tb_nccl_ids_free(ids);
                return tb_fail(err, "ncclGetUniqueId for group %s (id %d): %s (%s)", g0->name, id,
                               ncclGetErrorString(res), last_error(NULL));
            }
        }
        if (tb_mpi_group_bcast_from_first(w, id, &ids->id[id], sizeof ids->id[id], err) != 0) {
            tb_nccl_ids_free(ids);
            return tb_fail_prefix(err, "NCCL unique id of group %s (id %d) over MPI", g0->name, id);
        }
        ids->have[id] = 1;
    }
    *out = ids;
    return 0;
}

// ---------------------------------------------------------------------------------------
// Setting up and tearing down a rank

static void free_state(nccl_group *s, int abort) {
    if (!s) return;
    if (abort) abort_comm(s);
    if (s->stream) RELEASED_CUDA(cudaStreamDestroy(s->stream));
    if (s->scratch) RELEASED_CUDA(cudaFree(s->scratch));
    if (s->stage) RELEASED_CUDA(cudaFree(s->stage));
    if (s->computed) RELEASED_CUDA(cudaEventDestroy(s->computed));
    free(s);
}

// Back to the CPU backend the group had before: MPI for a group that spans processes.
static void back_to_local(tb_group *g) {
    tb_rank *rk = g->rk;
    tb_world *w = rk ? rk->world : NULL;
    if (w && w->mpi_groups && g->id >= 0 && w->mpi_groups[g->id]) {
        g->backend = &tb_mpi_backend;
        g->backend_state = w->mpi_groups[g->id];
        return;
    }
    g->backend = &tb_local_backend;
    g->backend_state = w && w->local_groups ? w->local_groups[g->id] : NULL;
}

int tb_nccl_rank_init(tb_rank *rk, const tb_nccl_ids *ids, tb_error *err) {
    int ndev = 0;
    cudaError_t ce = cudaGetDeviceCount(&ndev);
    if (ce != cudaSuccess) return tb_fail(err, "%s: cudaGetDeviceCount: %s", rk->label, cudaGetErrorString(ce));
    if (ndev == 0) return tb_fail(err, "%s: no CUDA device", rk->label);
    int dev = parallel_state_rank_on_host(rk) % ndev;  // the rank's GPU (training.c, rank_setup_device)
    ce = cudaSetDevice(dev);
    if (ce != cudaSuccess) return tb_fail(err, "%s: cudaSetDevice(%d): %s", rk->label, dev, cudaGetErrorString(ce));

    nccl_group *st[TB_NGROUP_KINDS] = {0};
    int rc = 0;
    for (int k = 0; k < TB_NGROUP_KINDS && rc == 0; k++) {
        tb_group *g = &rk->groups[k];
        if (!ids || g->id < 0 || g->id >= ids->n || !ids->have[g->id]) {
            rc = tb_fail(err, "%s: no NCCL unique id for group %s (id %d): run tb_nccl_ids_create on this world first",
                         rk->label, g->name, g->id);
            break;
        }
        nccl_group *s = st[k] = tb_xcalloc(1, sizeof *s, "NCCL group state");
        s->device = dev;
        snprintf(s->name, sizeof s->name, "tb.%s.%d", g->name, g->id);
        if ((ce = cudaStreamCreate(&s->stream)) != cudaSuccess ||
            (ce = cudaMalloc((void **)&s->scratch, sizeof(float))) != cudaSuccess) {
            rc = tb_fail(err, "%s: group %s on device %d: %s", rk->label, g->name, dev, cudaGetErrorString(ce));
            break;
        }
        ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
        cfg.blocking = 0;  // every wait below is ours, with a timeout
        cfg.commName = s->name;
        ncclResult_t r = ncclCommInitRankConfig(&s->comm, g->size, ids->id[g->id], g->index, &cfg);
        if (r != ncclSuccess && r != ncclInProgress)
            rc = tb_fail(err, "%s: ncclCommInitRankConfig for group %s (%d ranks, member %d, device %d): %s (%s)",
                         rk->label, g->name, g->size, g->index, dev, ncclGetErrorString(r), last_error(s->comm));
    }

    // Wait until every communicator is ready (they initialize concurrently, in the background).
    double timeout = world_timeout(rk), deadline = tb_comm_now_s() + timeout;
    unsigned polls = 0;
    for (int pending = 1; rc == 0 && pending;) {
        pending = 0;
        for (int k = 0; k < TB_NGROUP_KINDS && rc == 0; k++) {
            ncclResult_t a = ncclSuccess;
            ncclResult_t r = ncclCommGetAsyncError(st[k]->comm, &a);
            if (r != ncclSuccess) a = r;
            if (a == ncclInProgress) pending = 1;
            else if (a != ncclSuccess)
                rc = tb_fail(err, "%s: NCCL communicator for group %s (%d ranks, member %d, device %d): %s (%s)",
                             rk->label, rk->groups[k].name, rk->groups[k].size, rk->groups[k].index, dev,
                             ncclGetErrorString(a), last_error(st[k]->comm));
        }
        if (rc == 0 && pending) {
            if (tb_comm_now_s() > deadline) {
                rc = tb_fail(err, "%s: NCCL communicator init not complete after %.1f s (does every rank of every "
                             "group call tb_nccl_rank_init?)",
                             rk->label, timeout);
                break;
            }
            tb_comm_backoff(&polls);
        }
    }

    if (rc != 0) {
        for (int k = 0; k < TB_NGROUP_KINDS; k++) free_state(st[k], 1);
        return -1;
    }
    for (int k = 0; k < TB_NGROUP_KINDS; k++) {
        rk->groups[k].backend = &tb_nccl_backend;
        rk->groups[k].backend_state = st[k];
    }
    return 0;
}

void tb_nccl_rank_destroy(tb_rank *rk) {
    nccl_group *st[TB_NGROUP_KINDS] = {0};
    int finalizing[TB_NGROUP_KINDS] = {0};
    for (int k = 0; k < TB_NGROUP_KINDS; k++) {
        st[k] = state(&rk->groups[k]);
        if (!st[k]) continue;
        back_to_local(&rk->groups[k]);
        if (!st[k]->comm) continue;
        RELEASED_CUDA(cudaSetDevice(st[k]->device));
        ncclResult_t r = ncclCommFinalize(st[k]->comm);
        if (r == ncclSuccess || r == ncclInProgress) finalizing[k] = 1;
        else abort_comm(st[k]);
    }
    // Finalize every communicator together (a peer may be finalizing them in any order);
    // those not quiescent by the timeout are aborted.
    double deadline = tb_comm_now_s() + world_timeout(rk);
    unsigned polls = 0;
    for (int pending = 1; pending;) {
        pending = 0;
        for (int k = 0; k < TB_NGROUP_KINDS; k++) {
            if (!finalizing[k]) continue;
            ncclResult_t a = ncclSuccess;
            ncclResult_t r = ncclCommGetAsyncError(st[k]->comm, &a);
            if (r != ncclSuccess) a = r;
            if (a == ncclInProgress) {
                pending = 1;
                continue;
            }
            finalizing[k] = 0;
            if (a == ncclSuccess) {
                ncclResult_t d = ncclCommDestroy(st[k]->comm);
                released(d != ncclSuccess, "ncclCommDestroy", ncclGetErrorString(d));
                st[k]->comm = NULL;
            } else {
                abort_comm(st[k]);
            }
        }
        if (pending) {
            if (tb_comm_now_s() > deadline) {
                for (int k = 0; k < TB_NGROUP_KINDS; k++)
                    if (finalizing[k]) abort_comm(st[k]);
                break;
            }
            tb_comm_backoff(&polls);
        }
    }
    for (int k = 0; k < TB_NGROUP_KINDS; k++) free_state(st[k], 1);
}

void *tb_nccl_group_comm(const tb_group *g) {
    nccl_group *s = state(g);
    return s ? (void *)s->comm : NULL;
}

void *tb_nccl_group_stream(const tb_group *g) {
    nccl_group *s = state(g);
    return s ? (void *)s->stream : NULL;
}

int tb_nccl_group_device(const tb_group *g) {
    nccl_group *s = state(g);
    return s ? s->device : -1;
}

// ---------------------------------------------------------------------------------------
// The calls

// The buffers of a call are written by kernels on the rank's compute stream. A call of the
// rank thread orders the group's stream after everything enqueued there so far: an event
// recorded on the compute stream now, which the group's stream waits for (the call's own wait,
// finish, then covers the compute stream's work up to the call). A rank's communication thread
// that orders its calls itself (tb_comm_thread.stream_ordered: DistributedDataParallel has the
// group's stream wait for the event recorded where the bucket became ready) is not ordered
// here: the compute stream's later work — the rest of the backward — must not hold it back.
static cudaError_t order_after_compute(nccl_group *s) {
    const tb_comm_thread *t = tb_comm_thread_current();
    if (t && t->stream_ordered) return cudaSuccess;
    cudaError_t ce = cudaSuccess;
    if (!s->computed) ce = cudaEventCreateWithFlags(&s->computed, cudaEventDisableTiming);
    if (ce == cudaSuccess) ce = cudaEventRecord(s->computed, s->compute);
    if (ce == cudaSuccess) ce = cudaStreamWaitEvent(s->stream, s->computed, 0);
    return ce;
}

// Common checks before enqueuing: a live communicator, the rank's device current, the group's
// stream after the work that wrote the buffers.
static int prepare(tb_group *g, const char *op, nccl_group **out, tb_error *err) {
    nccl_group *s = state(g);
    if (!s) return tb_fail(err, "%s on group %s: the group is not on the NCCL backend", op, g->name);
    if (!s->comm)
        return tb_fail(err, "%s on group %s: the NCCL communicator was aborted after an earlier failure", op, g->name);
    cudaError_t ce = cudaSetDevice(s->device);
    if (ce != cudaSuccess)
        return tb_fail(err, "%s on group %s: cudaSetDevice(%d): %s", op, g->name, s->device, cudaGetErrorString(ce));
    if (s->compute && (ce = order_after_compute(s)) != cudaSuccess)
        return tb_fail(err, "%s on group %s: ordering the group's stream after the rank's compute stream: %s", op,
                       g->name, cudaGetErrorString(ce));
    *out = s;
    return 0;
}

// With a compute stream (training), a host buffer — the scalars and figures the trainer
// reduces or gathers: the loss, the gradient norm, report figures — is copied through the
// group's staging buffer. 1: p is host memory to stage.
static int staged(const nccl_group *s, const void *p) {
    if (!s->compute || !p) return 0;
    struct cudaPointerAttributes a;
    if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
        cudaGetLastError();
        return 1;
    }
    return a.type == cudaMemoryTypeUnregistered || a.type == cudaMemoryTypeHost;
}

// The staging buffer of at least `bytes`, holding `in_bytes` of `in` (if not NULL).
static void *stage_in(tb_group *g, nccl_group *s, const char *op, const void *in, size_t in_bytes, size_t bytes,
                      tb_error *err) {
    cudaError_t ce = cudaSuccess;
    if (s->stage_bytes < bytes) {
        if (s->stage && (ce = cudaFree(s->stage)) != cudaSuccess)
            return tb_fail(err, "%s on group %s: freeing the smaller staging buffer: %s", op, g->name,
                           cudaGetErrorString(ce)),
                   NULL;
        s->stage = NULL;
        s->stage_bytes = 0;
        if ((ce = cudaMalloc(&s->stage, bytes)) != cudaSuccess)
            return tb_fail(err, "%s on group %s: staging %zu bytes of host buffers: %s", op, g->name, bytes,
                           cudaGetErrorString(ce)), NULL;
        s->stage_bytes = bytes;
    }
    if (in && in_bytes && (ce = cudaMemcpy(s->stage, in, in_bytes, cudaMemcpyHostToDevice)) != cudaSuccess)
        return tb_fail(err, "%s on group %s: staging a host buffer: %s", op, g->name, cudaGetErrorString(ce)), NULL;
    return s->stage;
}

static int stage_out(tb_group *g, const char *op, void *out, const void *dev, size_t bytes, tb_error *err) {
    cudaError_t ce = cudaMemcpy(out, dev, bytes, cudaMemcpyDeviceToHost);
    if (ce != cudaSuccess)
        return tb_fail(err, "%s on group %s: copying back a staged host buffer: %s", op, g->name,
                       cudaGetErrorString(ce));
    return 0;
}

// NCCL reads and writes device memory only: a host pointer would be an illegal access
// that kills the CUDA context, so it is refused here with its name.
static int check_buffer(tb_group *g, nccl_group *s, const char *op, const char *what, const void *p, tb_error *err) {
    struct cudaPointerAttributes a;
    cudaError_t ce = cudaPointerGetAttributes(&a, p);
    if (ce != cudaSuccess) {
        cudaGetLastError();  // not sticky; clear it
        return tb_fail(err, "%s on group %s: %s buffer %p: cudaPointerGetAttributes: %s", op, g->name, what, p,
                       cudaGetErrorString(ce));
    }
    if (a.type == cudaMemoryTypeManaged) return 0;
    if (a.type != cudaMemoryTypeDevice)
        return tb_fail(err, "%s on group %s: %s buffer %p is not device memory (the NCCL backend takes device buffers)",
                       op, g->name, what, p);
    if (a.device != s->device)
        return tb_fail(err, "%s on group %s: %s buffer %p is on device %d, the rank's device is %d", op, g->name, what,
                       p, a.device, s->device);
    return 0;
}

// What one wait covers: the group of a single call, or every op's group of a batch
// (tb_batch_send_recv), with the words its failures name them by.
typedef struct wait_set {
    int n;
    tb_group *g[TB_P2P_BATCH_MAX];
    nccl_group *s[TB_P2P_BATCH_MAX];
    char groups[192];  // "group pp" / "groups pp, pp_grad"
    char where[384];   // "group pp (2 ranks, member 0)" / "groups pp (2 ranks, member 0), pp_grad (...)"
} wait_set;

static void wait_one(wait_set *w, tb_group *g, nccl_group *s) {
    w->n = 1;
    w->g[0] = g;
    w->s[0] = s;
    snprintf(w->groups, sizeof w->groups, "group %s", g->name);
    snprintf(w->where, sizeof w->where, "group %s (%d ranks, member %d)", g->name, g->size, g->index);
}

static void abort_all(wait_set *w) {
    for (int i = 0; i < w->n; i++) abort_comm(w->s[i]);
}

// After enqueuing (r: what the enqueue returned): waits until the operations are done on
// every group's stream, NCCL reports an error, or the timeout passes (then every
// communicator of the set is aborted).
static int finish_set(wait_set *w, const char *op, ncclResult_t r, int *timed_out, tb_error *err) {
    if (r != ncclSuccess && r != ncclInProgress)
        return tb_fail(err, "%s on %s: %s (%s)", op, w->where, ncclGetErrorString(r), last_error(w->s[0]->comm));
    double timeout = world_timeout(w->g[0]->rk), deadline = tb_comm_now_s() + timeout;
    unsigned polls = 0;
    for (;;) {
        int done = 1;
        for (int i = 0; i < w->n; i++) {
            nccl_group *s = w->s[i];
            ncclResult_t a = ncclSuccess;
            ncclResult_t q = ncclCommGetAsyncError(s->comm, &a);
            if (q != ncclSuccess) a = q;
            if (a != ncclSuccess && a != ncclInProgress) {
                tb_fail(err, "%s on %s: NCCL error %s (%s)%s%s; communicator aborted", op, w->where,
                        ncclGetErrorString(a), last_error(s->comm), w->n > 1 ? " on group " : "",
                        w->n > 1 ? w->g[i]->name : "");
                abort_all(w);
                return -1;
            }
            if (a == ncclInProgress) {  // still being enqueued in the background
                done = 0;
                continue;
            }
            cudaError_t ce = cudaStreamQuery(s->stream);
            if (ce == cudaErrorNotReady) done = 0;
            else if (ce != cudaSuccess) {
                tb_fail(err, "%s on %s: CUDA error on the stream of group %s: %s; communicator aborted", op,
                        w->where, w->g[i]->name, cudaGetErrorString(ce));
                abort_all(w);
                return -1;
            }
        }
        if (done) return 0;
        const tb_comm_world *world = w->g[0]->world;
        if (world && atomic_load(&world->aborted)) {
            abort_all(w);
            return tb_fail(err, "%s on %s stopped: the run was aborted by the failure of %s; NCCL communicator "
                           "aborted",
                           op, w->groups, world->aborted_by);
        }
        if (tb_comm_now_s() > deadline) {
            abort_all(w);
            *timed_out = 1;
            return tb_fail(err, "%s on %s not complete after %.1f s; NCCL communicator aborted", op, w->where,
                           timeout);
        }
        tb_comm_backoff(&polls);
    }
}

static int finish(tb_group *g, nccl_group *s, const char *op, ncclResult_t r, int *timed_out, tb_error *err) {
    wait_set w;
    wait_one(&w, g, s);
    return finish_set(&w, op, r, timed_out, err);
}

// The staged calls: the host buffer copied into the group's staging buffer, the call on it,
// the result copied back.
static int nccl_all_reduce(tb_group *g, float *buf, size_t count, tb_red_op op, int *timed_out, tb_error *err);
static int nccl_all_gather(tb_group *g, const float *send, float *recv, size_t sendcount, int *timed_out,
                           tb_error *err);
static int nccl_broadcast(tb_group *g, float *buf, size_t count, int root, int *timed_out, tb_error *err);

static int staged_all_reduce(tb_group *g, nccl_group *s, float *buf, size_t count, tb_red_op op, int *timed_out,
                             tb_error *err) {
    float *d = stage_in(g, s, "all_reduce", buf, count * sizeof(float), count * sizeof(float), err);
    if (!d || nccl_all_reduce(g, d, count, op, timed_out, err)) return -1;
    return stage_out(g, "all_reduce", buf, d, count * sizeof(float), err);
}

// staging: [size · sendcount received | sendcount sent]
static int staged_all_gather(tb_group *g, nccl_group *s, const float *send, float *recv, size_t sendcount,
                             int *timed_out, tb_error *err) {
    const size_t n = sendcount * sizeof(float), total = (size_t)g->size * n;
    float *d = stage_in(g, s, "all_gather", NULL, 0, total + n, err);
    if (!d) return -1;
    float *mine = d + (size_t)g->size * sendcount;
    cudaError_t ce = cudaMemcpy(mine, send, n, cudaMemcpyHostToDevice);
    if (ce != cudaSuccess)
        return tb_fail(err, "all_gather on group %s: staging a host buffer: %s", g->name, cudaGetErrorString(ce));
    if (nccl_all_gather(g, mine, d, sendcount, timed_out, err)) return -1;
    return stage_out(g, "all_gather", recv, d, total, err);
}

static int staged_broadcast(tb_group *g, nccl_group *s, float *buf, size_t count, int root, int *timed_out,
                            tb_error *err) {
    float *d = stage_in(g, s, "broadcast", buf, count * sizeof(float), count * sizeof(float), err);
    if (!d || nccl_broadcast(g, d, count, root, timed_out, err)) return -1;
    return stage_out(g, "broadcast", buf, d, count * sizeof(float), err);
}

static int nccl_all_reduce(tb_group *g, float *buf, size_t count, tb_red_op op, int *timed_out, tb_error *err) {
    nccl_group *s = NULL;
    if (prepare(g, "all_reduce", &s, err)) return -1;
    if (count == 0) return 0;
    if (staged(s, buf)) return staged_all_reduce(g, s, buf, count, op, timed_out, err);
    if (check_buffer(g, s, "all_reduce", "the", buf, err)) return -1;
    ncclResult_t r =
        ncclAllReduce(buf, buf, count, ncclFloat32, op == TB_RED_MAX ? ncclMax : ncclSum, s->comm, s->stream);
    return finish(g, s, "all_reduce", r, timed_out, err);
}

static int nccl_reduce_scatter(tb_group *g, const float *send, float *recv, size_t recvcount, int *timed_out,
                               tb_error *err) {
    nccl_group *s = NULL;
    if (prepare(g, "reduce_scatter", &s, err)) return -1;
    if (recvcount == 0) return 0;
    if (check_buffer(g, s, "reduce_scatter", "send", send, err) ||
        check_buffer(g, s, "reduce_scatter", "recv", recv, err))
        return -1;
    ncclResult_t r = ncclReduceScatter(send, recv, recvcount, ncclFloat32, ncclSum, s->comm, s->stream);
    return finish(g, s, "reduce_scatter", r, timed_out, err);
}

static int nccl_all_gather(tb_group *g, const float *send, float *recv, size_t sendcount, int *timed_out,
                           tb_error *err) {
    nccl_group *s = NULL;
    if (prepare(g, "all_gather", &s, err)) return -1;
    if (sendcount == 0) return 0;
    if (staged(s, send) && staged(s, recv)) return staged_all_gather(g, s, send, recv, sendcount, timed_out, err);
    if (check_buffer(g, s, "all_gather", "send", send, err) || check_buffer(g, s, "all_gather", "recv", recv, err))
        return -1;
    ncclResult_t r = ncclAllGather(send, recv, sendcount, ncclFloat32, s->comm, s->stream);
    return finish(g, s, "all_gather", r, timed_out, err);
}

static int nccl_all_to_all(tb_group *g, const float *send, const size_t *sendcounts, float *recv,
                           const size_t *recvcounts, int *timed_out, tb_error *err) {
    nccl_group *s = NULL;
    if (prepare(g, "all_to_all", &s, err)) return -1;
    size_t nsend = 0, nrecv = 0;
    for (int j = 0; j < g->size; j++) {
        nsend += sendcounts[j];
        nrecv += recvcounts[j];
    }
    if ((nsend && check_buffer(g, s, "all_to_all", "send", send, err)) ||
        (nrecv && check_buffer(g, s, "all_to_all", "recv", recv, err)))
        return -1;
    if (nsend == 0 && nrecv == 0) return 0;
    // One fused group of send/recv pairs (nccl-tests' alltoallv); empty pairs are left out
    // on both sides, since a member's sendcounts[j] is member j's recvcounts[index].
    ncclResult_t r = ncclGroupStart(), first = r;
    size_t at_send = 0, at_recv = 0;
    for (int j = 0; j < g->size && first == ncclSuccess; j++) {
        if (sendcounts[j]) r = ncclSend(send + at_send, sendcounts[j], ncclFloat32, j, s->comm, s->stream);
        if (r == ncclSuccess && recvcounts[j])
            r = ncclRecv(recv + at_recv, recvcounts[j], ncclFloat32, j, s->comm, s->stream);
        if (r != ncclSuccess && r != ncclInProgress) first = r;
        at_send += sendcounts[j];
        at_recv += recvcounts[j];
    }
    r = ncclGroupEnd();
    if (first != ncclSuccess) r = first;
    return finish(g, s, "all_to_all", r, timed_out, err);
}

static int nccl_broadcast(tb_group *g, float *buf, size_t count, int root, int *timed_out, tb_error *err) {
    nccl_group *s = NULL;
    if (prepare(g, "broadcast", &s, err)) return -1;
    if (root < 0 || root >= g->size)
        return tb_fail(err, "broadcast on group %s: root %d outside the group's %d members", g->name, root, g->size);
    if (count == 0) return 0;
    if (staged(s, buf)) return staged_broadcast(g, s, buf, count, root, timed_out, err);
    if (check_buffer(g, s, "broadcast", "the", buf, err)) return -1;
    ncclResult_t r = ncclBroadcast(buf, buf, count, ncclFloat32, root, s->comm, s->stream);
    return finish(g, s, "broadcast", r, timed_out, err);
}

static int check_peer(tb_group *g, const char *op, int peer, tb_error *err) {
    if (peer < 0 || peer >= g->size)
        return tb_fail(err, "%s on group %s: peer %d outside the group's %d members", op, g->name, peer, g->size);
    if (peer == g->index)
        return tb_fail(err, "%s on group %s: member %d to itself: not supported on the NCCL backend (a send "
                       "completes only when its recv is posted)",
                       op, g->name, peer);
    return 0;
}

static int nccl_send(tb_group *g, const float *buf, size_t count, int peer, int *timed_out, tb_error *err) {
    nccl_group *s = NULL;
    if (prepare(g, "send", &s, err) || check_peer(g, "send", peer, err)) return -1;
    if (count == 0) return 0;
    if (check_buffer(g, s, "send", "the", buf, err)) return -1;
    ncclResult_t r = ncclSend(buf, count, ncclFloat32, peer, s->comm, s->stream);
    return finish(g, s, "send", r, timed_out, err);
}

static int nccl_recv(tb_group *g, float *buf, size_t count, int peer, int *timed_out, tb_error *err) {
    nccl_group *s = NULL;
    if (prepare(g, "recv", &s, err) || check_peer(g, "recv", peer, err)) return -1;
    if (count == 0) return 0;
    if (check_buffer(g, s, "recv", "the", buf, err)) return -1;
    ncclResult_t r = ncclRecv(buf, count, ncclFloat32, peer, s->comm, s->stream);
    return finish(g, s, "recv", r, timed_out, err);
}

// Megatron's batch_isend_irecv: every op of the batch in one NCCL group, each on its own
// group's communicator and stream (NCCL makes the streams wait for each other around the
// group's kernels), then one wait for all of them.
static int nccl_batch_send_recv(const tb_p2p_op *ops, int n, int *timed_out, tb_error *err) {
    wait_set w = {0};
    size_t used = 0, uw = 0;
    for (int i = 0; i < n; i++) {
        const tb_p2p_op *o = &ops[i];
        const char *op = o->op == TB_COMM_SEND ? "send" : "recv";
        nccl_group *s = NULL;
        if (o->op != TB_COMM_SEND && o->op != TB_COMM_RECV)
            return tb_fail(err, "batch_send_recv on group %s: op %d of the batch is %s, not a send or recv", o->g->name,
                           i, tb_comm_op_name(o->op));
        if (prepare(o->g, op, &s, err) || check_peer(o->g, op, o->peer, err)) return -1;
        if (o->count && check_buffer(o->g, s, op, "the", o->buf, err)) return -1;
        w.g[i] = o->g;
        w.s[i] = s;
        if (used < sizeof w.groups)
            used += (size_t)snprintf(w.groups + used, sizeof w.groups - used, "%s%s", i ? ", " : "groups ", o->g->name);
        if (uw < sizeof w.where)
            uw += (size_t)snprintf(w.where + uw, sizeof w.where - uw, "%s%s (%d ranks, member %d: %s %s member %d)",
                                   i ? ", " : "groups ", o->g->name, o->g->size, o->g->index, op,
                                   o->op == TB_COMM_SEND ? "to" : "from", o->peer);
    }
    w.n = n;
    ncclResult_t r = ncclGroupStart(), first = r;
    for (int i = 0; i < n && first == ncclSuccess; i++) {
        const tb_p2p_op *o = &ops[i];
        if (!o->count) continue;
        r = o->op == TB_COMM_SEND ? ncclSend(o->buf, o->count, ncclFloat32, o->peer, w.s[i]->comm, w.s[i]->stream)
                                  : ncclRecv(o->buf, o->count, ncclFloat32, o->peer, w.s[i]->comm, w.s[i]->stream);
        if (r != ncclSuccess && r != ncclInProgress) first = r;
    }
    r = ncclGroupEnd();
    if (first != ncclSuccess) r = first;
    return finish_set(&w, "batch_send_recv", r, timed_out, err);
}

static int nccl_barrier(tb_group *g, int *timed_out, tb_error *err) {
    nccl_group *s = NULL;
    if (prepare(g, "barrier", &s, err)) return -1;
    ncclResult_t r = ncclAllReduce(s->scratch, s->scratch, 1, ncclFloat32, ncclSum, s->comm, s->stream);
    return finish(g, s, "barrier", r, timed_out, err);
}

void tb_nccl_rank_set_compute_stream(tb_rank *rk, void *stream) {
    for (int k = 0; k < TB_NGROUP_KINDS; k++) {
        nccl_group *s = state(&rk->groups[k]);
        if (s) s->compute = (cudaStream_t)stream;
    }
}

const tb_comm_backend tb_nccl_backend = {
    .name = "nccl",
    .all_reduce = nccl_all_reduce,
    .reduce_scatter = nccl_reduce_scatter,
    .all_gather = nccl_all_gather,
    .all_to_all = nccl_all_to_all,
    .broadcast = nccl_broadcast,
    .send = nccl_send,
    .recv = nccl_recv,
    .barrier = nccl_barrier,
    .batch_send_recv = nccl_batch_send_recv,
};

#else  // !TB_HAVE_NCCL: the stub

struct tb_nccl_ids {
    int unused;
};

int tb_nccl_built(void) { return 0; }

int tb_nccl_version(char *buf, size_t len) {
    snprintf(buf, len, "%s", TB_NCCL_NOT_BUILT);
    return -1;
}

int tb_nccl_ids_create(const tb_world *w, tb_nccl_ids **out, tb_error *err) {
    *out = NULL;
    return tb_fail(err, "%s", TB_NCCL_NOT_BUILT);
}

int tb_nccl_ids_create_mpi(tb_world *w, tb_nccl_ids **out, tb_error *err) {
    *out = NULL;
    return tb_fail(err, "%s", TB_NCCL_NOT_BUILT);
}

void tb_nccl_ids_free(tb_nccl_ids *ids) { (void)ids; }

int tb_nccl_rank_init(tb_rank *rk, const tb_nccl_ids *ids, tb_error *err) {
    return tb_fail(err, "%s: %s", rk->label, TB_NCCL_NOT_BUILT);
}

void tb_nccl_rank_destroy(tb_rank *rk) { (void)rk; }
void tb_nccl_rank_set_compute_stream(tb_rank *rk, void *stream) { (void)rk, (void)stream; }

void *tb_nccl_group_comm(const tb_group *g) { return NULL; }
void *tb_nccl_group_stream(const tb_group *g) { return NULL; }
int tb_nccl_group_device(const tb_group *g) { return -1; }

static int not_built(tb_group *g, const char *op, tb_error *err) {
    return tb_fail(err, "%s on group %s: %s", op, g->name, TB_NCCL_NOT_BUILT);
}
static int stub_all_reduce(tb_group *g, float *b, size_t n, tb_red_op op, int *t, tb_error *err) {
    return not_built(g, "all_reduce", err);
}
static int stub_reduce_scatter(tb_group *g, const float *s, float *r, size_t n, int *t, tb_error *err) {
    return not_built(g, "reduce_scatter", err);
}
static int stub_all_gather(tb_group *g, const float *s, float *r, size_t n, int *t, tb_error *err) {
    return not_built(g, "all_gather", err);
}
static int stub_all_to_all(tb_group *g, const float *s, const size_t *sc, float *r, const size_t *rc, int *t,
                           tb_error *err) {
    return not_built(g, "all_to_all", err);
}
static int stub_broadcast(tb_group *g, float *b, size_t n, int root, int *t, tb_error *err) {
    return not_built(g, "broadcast", err);
}
static int stub_send(tb_group *g, const float *b, size_t n, int peer, int *t, tb_error *err) {
    return not_built(g, "send", err);
}
static int stub_recv(tb_group *g, float *b, size_t n, int peer, int *t, tb_error *err) {
    return not_built(g, "recv", err);
}
static int stub_barrier(tb_group *g, int *t, tb_error *err) { return not_built(g, "barrier", err); }
static int stub_batch_send_recv(const tb_p2p_op *ops, int n, int *t, tb_error *err) {
    return not_built(ops[0].g, "batch_send_recv", err);
}

const tb_comm_backend tb_nccl_backend = {
    .name = "nccl",
    .all_reduce = stub_all_reduce,
    .reduce_scatter = stub_reduce_scatter,
    .all_gather = stub_all_gather,
    .all_to_all = stub_all_to_all,
    .broadcast = stub_broadcast,
    .send = stub_send,
    .recv = stub_recv,
    .barrier = stub_barrier,
    .batch_send_recv = stub_batch_send_recv,
};

#endif
