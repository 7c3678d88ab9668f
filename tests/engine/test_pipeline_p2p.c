// test_pipeline_p2p.c — the pipeline executor's point-to-point program
// (pipeline_p2p_program in engine/pipeline_parallel/schedules.c, the calls forward_backward_func
// makes through p2p_communicate) simulated for every rank of a pipeline at once, for every
// valid shape in a grid (p 1..8; v 1..4, v > 1 only with p > 1; m from p to 4p, a multiple
// of p when interleaved, as config_validate requires):
//   - under RENDEZVOUS semantics (NCCL's): a message is matched once both its send and its
//     recv are posted, and a call (a batch of sends and recvs) completes once every one of
//     its messages is matched; a rank posts its next call only when its current one has
//     completed. The batched program (what the executor runs) completes on every rank;
//   - under EAGER semantics (the local and MPI backends'): a send is matched when posted.
//     Both programs complete;
//   - the program before batching (PP_P2P_SEPARATE: each send and recv its own call)
//     deadlocks under rendezvous, e.g. at p 2, m 2 (stage 0 sends microbatch 1's activation
//     while stage 1 sends microbatch 0's gradient): the simulation can fail;
//   - the k-th message sent on a channel (activations on pp, gradients on pp_grad, from one
//     rank to its neighbour) is the k-th the receiver expects: same microbatch, and the
//     receiving op's virtual stage;
//   - the executor's single buffers are safe: an op's input is received before it runs and
//     after the previous op reading that buffer ran; its output is sent after it runs and
//     before the next op writing that buffer runs;
//   - without interleaving the batched program sends and receives the same messages in the
//     same order as the separate one (the CPU runs exactly the calls it ran before batching).
// The simulated programs are pipeline_p2p_program's own output, not a model of it.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pipeline_parallel/schedules.h"
#include "tb_test.h"

#define MAXP 8
#define MAXV 4
#define MAXM (4 * MAXP)
#define MAX_OPS (2 * MAXM * MAXV)
#define MAX_CALLS (2 * MAX_OPS + 1)
#define MAX_MSGS (MAXM * MAXV)  // per channel

typedef struct rank_prog {
    pp_op ops[MAX_OPS];
    int nops;
    pp_p2p_call calls[MAX_CALLS];
    int ncalls;
} rank_prog;

// One end of a message: which rank posts it in which call, and what it carries.
typedef struct end_ref {
    int rank, call, microbatch, vstage;
} end_ref;

// A channel: activations ('A', on pp, rank → rank + 1) or gradients ('G', on pp_grad, rank →
// rank − 1), from src; the sends and the recvs in program order.
typedef struct channel {
    end_ref send[MAX_MSGS], recv[MAX_MSGS];
    int nsend, nrecv;
} channel;

static rank_prog progs[MAXP];
static channel chans[2][MAXP];  // [0 activations / 1 gradients][sender]

static int is_send(int d) { return d == PP_SEND_NEXT || d == PP_SEND_PREV; }

// The channel a message of rank r in direction d travels on.
static channel *chan_of(int p, int r, int d) {
    const int next = (r + 1) % p, prev = (r - 1 + p) % p;
    switch (d) {
    case PP_SEND_NEXT: return &chans[0][r];
    case PP_SEND_PREV: return &chans[1][r];
    case PP_RECV_PREV: return &chans[0][prev];
    default: return &chans[1][next];
    }
}

// One op's send merged with the next op's recv, and nothing more: the separate program's
// calls at one point of the schedule (the sends of the op before, the recv of the op after)
// made one call, as 1F1B pairs them. Not what the executor runs when interleaved.
static void pair_per_op(int p) {
    for (int r = 0; r < p; r++) {
        rank_prog *g = &progs[r];
        int n = 0;
        for (int c = 0; c < g->ncalls; c++) {
            if (n > 0 && g->calls[n - 1].before == g->calls[c].before) {
                for (int d = 0; d < PP_P2P_DIRS; d++)
                    if (g->calls[c].msg[d].present) g->calls[n - 1].msg[d] = g->calls[c].msg[d];
            } else {
                g->calls[n++] = g->calls[c];
            }
        }
        g->ncalls = n;
    }
}

// Every rank's schedule and program.
static void build_programs(int p, int m, int v, pp_p2p_mode mode) {
    for (int r = 0; r < p; r++) {
        rank_prog *g = &progs[r];
        g->nops = pipeline_schedule(p, r, m, v, g->ops);
        g->ncalls = pipeline_p2p_program(p, r, m, v, mode, g->ops, g->nops, g->calls);
    }
}

// The channels of the programs built, each message matched with its other end; 0, or -1 with why.
static int index_channels(int p, pp_p2p_mode mode, char *why, size_t len) {
    memset(chans, 0, sizeof chans);
    for (int r = 0; r < p; r++) {
        const rank_prog *g = &progs[r];
        if (g->ncalls < 0 || g->ncalls > 2 * g->nops + 1) {
            snprintf(why, len, "rank %d: %d calls for %d ops", r, g->ncalls, g->nops);
            return -1;
        }
        for (int c = 0; c < g->ncalls; c++) {
            const pp_p2p_call *call = &g->calls[c];
            int present = 0;
            if (call->before < 0 || call->before > g->nops || (c > 0 && call->before < g->calls[c - 1].before)) {
                snprintf(why, len, "rank %d call %d: before op %d (out of order or range)", r, c, call->before);
                return -1;
            }
            for (int d = 0; d < PP_P2P_DIRS; d++) {
                if (!call->msg[d].present) continue;
                present++;
                channel *ch = chan_of(p, r, d);
                end_ref e = {r, c, call->msg[d].microbatch, call->msg[d].vstage};
                int *n = is_send(d) ? &ch->nsend : &ch->nrecv;
                if (*n == MAX_MSGS) {
                    snprintf(why, len, "rank %d: more than %d messages on one channel", r, MAX_MSGS);
                    return -1;
                }
                (is_send(d) ? ch->send : ch->recv)[(*n)++] = e;
            }
            if (present == 0 || (mode == PP_P2P_SEPARATE && present != 1)) {
                snprintf(why, len, "rank %d call %d holds %d messages", r, c, present);
                return -1;
            }
        }
    }
    // the k-th send of a channel is the k-th recv: the same microbatch for the same virtual stage
    for (int k = 0; k < 2; k++)
        for (int src = 0; src < p; src++) {
            const channel *ch = &chans[k][src];
            if (ch->nsend != ch->nrecv) {
                snprintf(why, len, "%s from rank %d: %d sent, %d received", k ? "gradients" : "activations", src,
                         ch->nsend, ch->nrecv);
                return -1;
            }
            for (int i = 0; i < ch->nsend; i++)
                if (ch->send[i].microbatch != ch->recv[i].microbatch || ch->send[i].vstage != ch->recv[i].vstage) {
                    snprintf(why, len, "%s from rank %d, message %d: sent microbatch %d for virtual stage %d, rank %d "
                             "expects microbatch %d for virtual stage %d", k ? "gradients" : "activations", src, i,
                             ch->send[i].microbatch, ch->send[i].vstage, ch->recv[i].rank, ch->recv[i].microbatch,
                             ch->recv[i].vstage);
                    return -1;
                }
        }
    return 0;
}

// Builds every rank's schedule and program (mode) and indexes them; 0, or -1 with why.
static int build(int p, int m, int v, pp_p2p_mode mode, char *why, size_t len) {
    build_programs(p, m, v, mode);
    return index_channels(p, mode, why, len);
}

// The other end of message d of call c of rank r.
static const end_ref *peer_end(int p, int r, int c, int d) {
    const channel *ch = chan_of(p, r, d);
    const end_ref *mine = is_send(d) ? ch->send : ch->recv, *theirs = is_send(d) ? ch->recv : ch->send;
    const int n = is_send(d) ? ch->nsend : ch->nrecv;
    for (int i = 0; i < n; i++)
        if (mine[i].rank == r && mine[i].call == c) return &theirs[i];
    return NULL;
}

// Runs the programs built: 0 when every rank completes, -1 with where each rank is stuck.
static int simulate(int p, int eager, char *why, size_t len) {
    int pc[MAXP] = {0};
    for (int progress = 1; progress;) {
        progress = 0;
        for (int r = 0; r < p; r++) {
            while (pc[r] < progs[r].ncalls) {
                const pp_p2p_call *call = &progs[r].calls[pc[r]];
                int matched = 1;
                for (int d = 0; d < PP_P2P_DIRS && matched; d++) {
                    if (!call->msg[d].present || (eager && is_send(d))) continue;
                    const end_ref *e = peer_end(p, r, pc[r], d);
                    matched = e && pc[e->rank] >= e->call;  // the peer has posted (or completed) its end
                }
                if (!matched) break;
                pc[r]++;
                progress = 1;
            }
        }
    }
    int stuck = 0;
    size_t used = (size_t)snprintf(why, len, "deadlock:");
    for (int r = 0; r < p; r++) {
        if (pc[r] == progs[r].ncalls) continue;
        stuck = 1;
        const pp_p2p_call *call = &progs[r].calls[pc[r]];
        static const char *const names[PP_P2P_DIRS] = {"send_next", "send_prev", "recv_prev", "recv_next"};
        if (used < len)
            used += (size_t)snprintf(why + used, len - used, " rank %d in call %d/%d before op %d (", r, pc[r],
                                     progs[r].ncalls, call->before);
        for (int d = 0; d < PP_P2P_DIRS && used < len; d++)
            if (call->msg[d].present)
                used += (size_t)snprintf(why + used, len - used, " %s mb %d", names[d], call->msg[d].microbatch);
        if (used < len) used += (size_t)snprintf(why + used, len - used, " );");
    }
    return stuck ? -1 : 0;
}

// The op of rank r that message (direction d, microbatch, virtual stage of the receiver) is the
// input of (a recv) or the output of (a send); -1 when none.
static int op_of(int p, int r, int d, const pp_msg *msg) {
    const rank_prog *g = &progs[r];
    const char kind = d == PP_SEND_NEXT || d == PP_RECV_PREV ? 'F' : 'B';
    const int vs = d == PP_SEND_NEXT ? msg->vstage - 1 : d == PP_SEND_PREV ? msg->vstage + 1 : msg->vstage;
    for (int i = 0; i < g->nops; i++)
        if (g->ops[i].kind == kind && g->ops[i].microbatch == msg->microbatch && g->ops[i].chunk * p + r == vs)
            return i;
    return -1;
}

// The executor's buffers (one per direction): every op's input arrives before it runs and after
// the previous op of its kind ran; its output leaves after it runs and before the next op of its
// kind runs. Also each op with an input or output has exactly that message.
static int buffers_safe(int p, int v, char *why, size_t len) {
    for (int r = 0; r < p; r++) {
        const rank_prog *g = &progs[r];
        int seen_in[MAX_OPS] = {0}, seen_out[MAX_OPS] = {0};
        for (int c = 0; c < g->ncalls; c++) {
            const pp_p2p_call *call = &g->calls[c];
            for (int d = 0; d < PP_P2P_DIRS; d++) {
                if (!call->msg[d].present) continue;
                const int k = op_of(p, r, d, &call->msg[d]);
                if (k < 0) {
                    snprintf(why, len, "rank %d call %d: direction %d carries microbatch %d for virtual stage %d, no "
                             "op of this rank", r, c, d, call->msg[d].microbatch, call->msg[d].vstage);
                    return -1;
                }
                const char kind = g->ops[k].kind;
                int lo = is_send(d) ? k + 1 : call->before, hi = is_send(d) ? call->before : k;  // ops [lo, hi)
                if (lo > hi) {
                    snprintf(why, len, "rank %d call %d (before op %d): the %s of op %d %c%d.%d", r, c, call->before,
                             is_send(d) ? "output, sent before the op ran," : "input, received after the op ran,", k,
                             kind, g->ops[k].microbatch, g->ops[k].chunk);
                    return -1;
                }
                for (int j = lo; j < hi; j++)
                    if (g->ops[j].kind == kind) {
                        snprintf(why, len, "rank %d call %d: the %s of op %d %c%d.%d crosses op %d %c%d.%d, which uses "
                                 "the same buffer", r, c, is_send(d) ? "output" : "input", k, kind,
                                 g->ops[k].microbatch, g->ops[k].chunk, j, kind, g->ops[j].microbatch,
                                 g->ops[j].chunk);
                        return -1;
                    }
                (is_send(d) ? seen_out : seen_in)[k]++;
            }
        }
        for (int k = 0; k < g->nops; k++) {
            const int vs = g->ops[k].chunk * p + r, first = vs == 0, last = vs == p * v - 1;
            const int want_in = g->ops[k].kind == 'F' ? !first : !last, want_out = g->ops[k].kind == 'F' ? !last : !first;
            if (seen_in[k] != want_in || seen_out[k] != want_out) {
                snprintf(why, len, "rank %d op %d %c%d.%d: %d inputs received (want %d), %d outputs sent (want %d)", r,
                         k, g->ops[k].kind, g->ops[k].microbatch, g->ops[k].chunk, seen_in[k], want_in, seen_out[k],
                         want_out);
                return -1;
            }
        }
    }
    return 0;
}

typedef struct shape {
    int p, m, v;
} shape;

static int grid(shape *out) {
    int n = 0;
    for (int p = 1; p <= MAXP; p++)
        for (int v = 1; v <= MAXV; v++) {
            if (v > 1 && p == 1) continue;
            for (int m = p; m <= 4 * p; m++)
                if (v == 1 || m % p == 0) out[n++] = (shape){p, m, v};
        }
    return n;
}

TB_TEST(batched_program_completes_under_rendezvous_and_eager_sends) {
    static shape shapes[1024];
    const int n = grid(shapes);
    int bad = 0, interleaved = 0;
    char why[2048];
    for (int s = 0; s < n && bad < 5; s++) {
        const shape sh = shapes[s];
        if (build(sh.p, sh.m, sh.v, PP_P2P_BATCHED, why, sizeof why) != 0) {
            TB_CHECK(0, "p=%d m=%d v=%d: %s", sh.p, sh.m, sh.v, why);
            bad++;
            continue;
        }
        for (int eager = 0; eager < 2; eager++)
            if (simulate(sh.p, eager, why, sizeof why) != 0) {
                TB_CHECK(0, "p=%d m=%d v=%d, %s sends: %s", sh.p, sh.m, sh.v, eager ? "eager" : "rendezvous", why);
                bad++;
            }
        if (buffers_safe(sh.p, sh.v, why, sizeof why) != 0) {
            TB_CHECK(0, "p=%d m=%d v=%d: %s", sh.p, sh.m, sh.v, why);
            bad++;
        }
        interleaved += sh.v > 1;
    }
    printf("    %d shapes (%d interleaved), every rank's batched program run to completion\n", n, interleaved);
}

TB_TEST(separate_program_completes_eager_and_deadlocks_rendezvous) {
    static shape shapes[1024];
    const int n = grid(shapes);
    int bad = 0, deadlocked = 0;
    char why[2048];
    for (int s = 0; s < n && bad < 5; s++) {
        const shape sh = shapes[s];
        if (build(sh.p, sh.m, sh.v, PP_P2P_SEPARATE, why, sizeof why) != 0) {
            TB_CHECK(0, "p=%d m=%d v=%d: %s", sh.p, sh.m, sh.v, why);
            bad++;
            continue;
        }
        if (simulate(sh.p, 1, why, sizeof why) != 0) {
            TB_CHECK(0, "p=%d m=%d v=%d, eager sends: %s", sh.p, sh.m, sh.v, why);
            bad++;
        }
        if (buffers_safe(sh.p, sh.v, why, sizeof why) != 0) {
            TB_CHECK(0, "p=%d m=%d v=%d: %s", sh.p, sh.m, sh.v, why);
            bad++;
        }
        deadlocked += simulate(sh.p, 0, why, sizeof why) != 0;
    }
    // the case of the refusal this replaces: p 2, 2 microbatches
    TB_REQUIRE(build(2, 2, 1, PP_P2P_SEPARATE, why, sizeof why) == 0, "p=2 m=2: %s", why);
    TB_CHECK(simulate(2, 0, why, sizeof why) != 0, "p=2 m=2 v=1: the separate program completed under rendezvous");
    printf("    p=2 m=2 v=1, separate calls, rendezvous: %s\n", why);
    TB_CHECK(deadlocked > 0, "no shape deadlocks");
    printf("    %d of %d shapes deadlock with separate calls on rendezvous sends\n", deadlocked, n);
}

// Pairing only each op's send with the next op's recv (1F1B's pairs) is the batched program
// without interleaving, and deadlocks an interleaved pipeline on rendezvous sends (p 2, m 4,
// v 2): there the steady state's (forward, backward) pairs share their calls, sending and
// receiving both ways at once.
TB_TEST(interleaved_steady_state_exchanges_both_ways_in_one_call) {
    static shape shapes[1024];
    static pp_p2p_call bat[MAXP][MAX_CALLS];
    const int n = grid(shapes);
    int bad = 0, deadlocked = 0, interleaved = 0;
    char why[2048];
    for (int s = 0; s < n && bad < 5; s++) {
        const shape sh = shapes[s];
        build_programs(sh.p, sh.m, sh.v, PP_P2P_BATCHED);
        int nb[MAXP];
        for (int r = 0; r < sh.p; r++) {
            nb[r] = progs[r].ncalls;
            memcpy(bat[r], progs[r].calls, (size_t)nb[r] * sizeof bat[r][0]);
        }
        build_programs(sh.p, sh.m, sh.v, PP_P2P_SEPARATE);
        pair_per_op(sh.p);
        if (sh.v == 1) {
            for (int r = 0; r < sh.p; r++)
                if (nb[r] != progs[r].ncalls || memcmp(bat[r], progs[r].calls, (size_t)nb[r] * sizeof bat[r][0])) {
                    TB_CHECK(0, "p=%d m=%d rank %d: the batched program is not the separate one paired op by op", sh.p,
                             sh.m, r);
                    bad++;
                }
            continue;
        }
        interleaved++;
        if (index_channels(sh.p, PP_P2P_BATCHED, why, sizeof why) != 0) {
            TB_CHECK(0, "p=%d m=%d v=%d: %s", sh.p, sh.m, sh.v, why);
            bad++;
            continue;
        }
        deadlocked += simulate(sh.p, 0, why, sizeof why) != 0;
    }
    TB_CHECK(deadlocked > 0, "pairing op by op never deadlocks an interleaved shape (of %d)", interleaved);
    printf("    op-by-op pairs deadlock %d of %d interleaved shapes on rendezvous sends\n", deadlocked, interleaved);
    build_programs(2, 4, 2, PP_P2P_SEPARATE);
    pair_per_op(2);
    TB_REQUIRE(index_channels(2, PP_P2P_BATCHED, why, sizeof why) == 0, "%s", why);
    TB_CHECK(simulate(2, 0, why, sizeof why) != 0, "p=2 m=4 v=2: op-by-op pairs completed under rendezvous");
    TB_REQUIRE(build(2, 4, 2, PP_P2P_BATCHED, why, sizeof why) == 0, "%s", why);
    int four = 0;
    for (int r = 0; r < 2; r++)
        for (int c = 0; c < progs[r].ncalls; c++) {
            int k = 0;
            for (int d = 0; d < PP_P2P_DIRS; d++) k += progs[r].calls[c].msg[d].present;
            four += k == 4;
        }
    TB_CHECK(four > 0, "p=2 m=4 v=2: no call sends and receives both ways");
    TB_CHECK(simulate(2, 0, why, sizeof why) == 0, "p=2 m=4 v=2: %s", why);
}

// Without interleaving, batching groups the same calls: flattened, the batched program is the
// separate one, message for message.
TB_TEST(one_f_one_b_batches_keep_the_message_order) {
    static shape shapes[1024];
    static pp_p2p_call sep[MAX_CALLS], bat[MAX_CALLS];
    const int n = grid(shapes);
    int bad = 0;
    for (int s = 0; s < n && bad < 5; s++) {
        const shape sh = shapes[s];
        if (sh.v > 1) continue;
        for (int r = 0; r < sh.p && bad < 5; r++) {
            static pp_op ops[MAX_OPS];
            const int nops = pipeline_schedule(sh.p, r, sh.m, sh.v, ops);
            const int ns = pipeline_p2p_program(sh.p, r, sh.m, sh.v, PP_P2P_SEPARATE, ops, nops, sep);
            const int nb = pipeline_p2p_program(sh.p, r, sh.m, sh.v, PP_P2P_BATCHED, ops, nops, bat);
            int k = 0, same = 1;
            for (int c = 0; c < nb && same; c++)
                for (int d = 0; d < PP_P2P_DIRS && same; d++) {
                    if (!bat[c].msg[d].present) continue;
                    same = k < ns && sep[k].before == bat[c].before && sep[k].msg[d].present &&
                           sep[k].msg[d].microbatch == bat[c].msg[d].microbatch &&
                           sep[k].msg[d].vstage == bat[c].msg[d].vstage;
                    k++;
                }
            if (!same || k != ns) {
                TB_CHECK(0, "p=%d m=%d rank %d: the batched program's messages (%d) differ from the separate ones (%d)",
                         sh.p, sh.m, r, k, ns);
                bad++;
            }
        }
    }
}

int main(void) {
    TB_RUN(batched_program_completes_under_rendezvous_and_eager_sends);
    TB_RUN(separate_program_completes_eager_and_deadlocks_rendezvous);
    TB_RUN(interleaved_steady_state_exchanges_both_ways_in_one_call);
    TB_RUN(one_f_one_b_batches_keep_the_message_order);
    return tb_test_summary();
}
