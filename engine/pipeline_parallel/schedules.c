#include "pipeline_parallel/schedules.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "runtime/ranges.h"
#include "core/xalloc.h"
#include "comm/parallel_state.h"

int pipeline_warmup(int p, int r, int m, int v) {
    if (p == 1) return 0;
    int w = v > 1 ? (p - r - 1) * 2 + (v - 1) * p : p - r - 1;
    return w < m * v ? w : m * v;
}

// Virtual microbatch k → (microbatch, chunk), Megatron's get_model_chunk_id with
// microbatch groups of size p.
static pp_op virtual_op(char kind, int k, int p, int v) {
    pp_op op = {kind, k, 0};
    if (v > 1) {
        int in_group = k % (p * v);
        op.chunk = in_group / p;
        if (kind == 'B') op.chunk = v - 1 - op.chunk;
        op.microbatch = k / (p * v) * p + k % p;
    }
    return op;
}

int pipeline_schedule(int p, int r, int m, int v, pp_op *ops) {
    const int total = m * v, warmup = pipeline_warmup(p, r, m, v);
    int n = 0;
    if (p == 1) {
        for (int k = 0; k < total; k++) {
            ops[n++] = virtual_op('F', k, p, v);
            ops[n++] = virtual_op('B', k, p, v);
        }
        return n;
    }
    for (int k = 0; k < warmup; k++) ops[n++] = virtual_op('F', k, p, v);
    for (int i = 0; i < total - warmup; i++) {
        ops[n++] = virtual_op('F', warmup + i, p, v);
        ops[n++] = virtual_op('B', i, p, v);
    }
    for (int k = total - warmup; k < total; k++) ops[n++] = virtual_op('B', k, p, v);
    return n;
}

double pipeline_theoretical_bubble(int p, int m, int v) {
    if (v < 1) v = 1;
    return (double)(p - 1) / ((double)v * m + p - 1);
}

// What op o of rank r receives before it runs (*in, from direction *in_dir) and sends after (*out).
static void op_p2p(int p, int r, int v, const pp_op *o, pp_p2p_dir *in_dir, pp_msg *in, pp_p2p_dir *out_dir,
                   pp_msg *out) {
    const int vs = o->chunk * p + r, last = p * v - 1;
    if (o->kind == 'F') {
        *in_dir = PP_RECV_PREV, *in = (pp_msg){vs > 0, o->microbatch, vs};
        *out_dir = PP_SEND_NEXT, *out = (pp_msg){vs < last, o->microbatch, vs + 1};
    } else {
        *in_dir = PP_RECV_NEXT, *in = (pp_msg){vs < last, o->microbatch, vs};
        *out_dir = PP_SEND_PREV, *out = (pp_msg){vs > 0, o->microbatch, vs - 1};
    }
}

int pipeline_p2p_program(int p, int r, int m, int v, pp_p2p_mode mode, const pp_op *ops, int nops,
                         pp_p2p_call *calls) {
    if (v < 1) v = 1;
    const int warmup = pipeline_warmup(p, r, m, v), steady_end = warmup + 2 * (m * v - warmup);
    const int pairs = mode == PP_P2P_BATCHED && v > 1 && p > 1;
    pp_p2p_call sends = {0};  // the sends of the ops run since the last call
    int n = 0;
    for (int i = 0; i <= nops;) {
        // the ops up to the next call: an interleaved steady state's (forward, backward) pair, else one
        const int len = i == nops ? 1 : pairs && i >= warmup && i + 1 < steady_end ? 2 : 1;
        pp_p2p_call c = sends;
        c.before = i;
        memset(&sends, 0, sizeof sends);
        for (int k = i; k < i + len && k < nops; k++) {
            pp_p2p_dir in_dir, out_dir;
            pp_msg in, out;
            op_p2p(p, r, v, &ops[k], &in_dir, &in, &out_dir, &out);
            if (in.present) c.msg[in_dir] = in;
            if (out.present) sends.msg[out_dir] = out;
        }
        for (int d = 0; d < PP_P2P_DIRS; d++) {
            if (!c.msg[d].present) continue;
            if (mode == PP_P2P_BATCHED) {
                calls[n++] = c;
                break;
            }
            calls[n] = (pp_p2p_call){.before = i};
            calls[n++].msg[d] = c.msg[d];
        }
        i += len;
    }
    return n;
}

// ---------------------------------------------------------------------------------------
// The executor

static tb_group *group(struct tb_rank *rk, tb_group_kind k) { return rk->world ? &rk->groups[k] : NULL; }

void pipeline_init(tb_pipeline *pl, const tb_config *cfg, struct tb_rank *rk, gpt_model *models, int nchunks) {
    memset(pl, 0, sizeof *pl);
    const int p = cfg->pipeline_model_parallel_size, r = rk->coords.pp, M = cfg->num_microbatches;
    pl->rk = rk;
    pl->models = models;
    pl->nchunks = nchunks;
    pl->micro_batch_size = cfg->micro_batch_size;
    pl->seq_length = cfg->seq_length / (cfg->context_parallel_size > 1 ? cfg->context_parallel_size : 1);
    pl->num_microbatches = M;
    pl->grad_scale = 1.0f;
    pl->ops = tb_xcalloc((size_t)2 * M * nchunks, sizeof *pl->ops, "pipeline schedule");
    pl->nops = pipeline_schedule(p, r, M, nchunks, pl->ops);
    pl->calls = tb_xcalloc((size_t)2 * pl->nops + 1, sizeof *pl->calls, "pipeline point-to-point program");
    pl->ncalls = pipeline_p2p_program(p, r, M, nchunks, PP_P2P_BATCHED, pl->ops, pl->nops, pl->calls);
    if (p > 1) {
        size_t count = (size_t)models[0].block.d.Ns * cfg->hidden_size, bytes = count * sizeof(float);
        pl->peers = (p2p_peers){group(rk, TB_GROUP_PP), group(rk, TB_GROUP_PP_GRAD), (r - 1 + p) % p, (r + 1) % p,
                                count};
        pl->x_in = tb_alloc(rk->mem, TB_MEM_COMM, bytes, "pipeline activation received");
        pl->x_out = tb_alloc(rk->mem, TB_MEM_COMM, bytes, "pipeline activation sent");
        pl->d_in = tb_alloc(rk->mem, TB_MEM_COMM, bytes, "pipeline gradient sent");
        pl->d_out = tb_alloc(rk->mem, TB_MEM_COMM, bytes, "pipeline gradient received");
    }
}

void pipeline_free(tb_pipeline *pl) {
    if (pl->rk) {
        tb_allocator *mem = pl->rk->mem;
        tb_free(mem, pl->x_in);
        tb_free(mem, pl->x_out);
        tb_free(mem, pl->d_in);
        tb_free(mem, pl->d_out);
    }
    free(pl->ops);
    free(pl->calls);
    memset(pl, 0, sizeof *pl);
}

static double ms_since(int64_t t0) { return (double)(tb_now_ns() - t0) / 1e6; }

// One call of the program: its messages from / into the stage's buffers.
static void exchange(tb_pipeline *pl, const pp_p2p_call *c, double *wait_ms) {
    float *const buf[PP_P2P_DIRS] = {pl->x_out, pl->d_in, pl->x_in, pl->d_out};  // by pp_p2p_dir
    p2p_communicate(&pl->peers, c->msg, buf, wait_ms);
}

double forward_backward_func(tb_pipeline *pl, const int32_t *inputs, const int32_t *targets, tb_step_timeline *time) {
    const size_t mb_tokens = (size_t)pl->micro_batch_size * pl->seq_length;
    const float loss_scale = pl->grad_scale / (float)pl->num_microbatches;  // (1 / M bit for bit without --fp16)
    double loss = 0.0;
    pl->nonfinite_microbatch = -1;
    int c = 0;
    // on a device an op's kernels are asynchronous: each op ends waiting for them, so that the
    // host clock times the device's work (without the wait a backward was timed as its
    // launches, ~2 of ~45 ms on an H200, and the rest read as idle time)
    const tb_backend *be = tb_be();
    for (int i = 0; i <= pl->nops; i++) {
        // the point-to-point calls before op i (after the last op: its sends), while the rank
        // is at op i's microbatch (each message's entry names its own)
        if (i < pl->nops) pl->rk->microbatch = pl->ops[i].microbatch;
        for (; c < pl->ncalls && pl->calls[c].before == i; c++) exchange(pl, &pl->calls[c], &time->p2p_ms);
        if (i == pl->nops) break;
        const pp_op *op = &pl->ops[i];
        gpt_model *m = &pl->models[op->chunk];
        int64_t t0 = tb_now_ns();
        if (op->kind == 'F') {
            float l = gpt_forward_chunk(m, op->microbatch, inputs + (size_t)op->microbatch * mb_tokens,
                                        targets + (size_t)op->microbatch * mb_tokens, pl->x_in, pl->x_out);
            if (!be->host) be->synchronize();
            time->forward_ms += ms_since(t0);
            if (m->chunk.has_head) {
                loss += l;
                if (!isfinite(l) && pl->nonfinite_microbatch < 0) pl->nonfinite_microbatch = op->microbatch;
            }
        } else {
            // the chunk's last backward of the step: only now are its gradients final (every
            // schedule runs a chunk's backwards in microbatch order)
            m->grads_final = op->microbatch == pl->num_microbatches - 1;
            gpt_backward_chunk(m, op->microbatch, loss_scale, pl->d_out, pl->d_in);
            m->grads_final = 0;
            if (!be->host) be->synchronize();
            time->backward_ms += ms_since(t0);
        }
    }
    pl->rk->microbatch = -1;
    return loss;
}
