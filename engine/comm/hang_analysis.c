// hang_analysis.c — the root cause of a hang (hang_analysis.h).
#include "comm/hang_analysis.h"

#include <stdio.h>
#include <string.h>

#include "core/ranges.h"
#include "core/xalloc.h"
#include "parallel_state.h"

// The group of rank r whose id is `id`, or NULL.
static const tb_group *group_with_id(const tb_rank *rk, int id) {
    for (int k = 0; k < TB_NGROUP_KINDS; k++)
        if (rk->groups[k].size > 0 && rk->groups[k].id == id) return &rk->groups[k];
    return NULL;
}

static int is_p2p(tb_comm_op op) { return op == TB_COMM_SEND || op == TB_COMM_RECV; }

static json_t *call_json(const tb_flight_entry *e) {
    if (!e) return json_null();
    return json_pack("{s:s, s:i, s:I, s:s, s:I, s:I, s:I}", "group", e->group, "group_id", e->group_id, "seq",
                     (json_int_t)e->seq, "op", tb_comm_op_name(e->op), "count", (json_int_t)e->count, "bytes",
                     (json_int_t)e->bytes, "step", (json_int_t)e->step);
}

typedef struct cause {
    int kind;  // 0: none, 1: absent, 2: mismatch
    char reason[320];
    int waiter;  // the first stuck rank found waiting for it (the lowest rank: views are walked in rank order)
    const tb_group *group;  // the waiter's group of the call
    json_t *waited_for_by;
} cause;

json_t *tb_hang_root_cause(tb_world *w, const tb_flight_entry *const *pending, const tb_flight_entry *const *completed,
                           const int *known, char *text, size_t len) {
    cause *causes = tb_xcalloc((size_t)w->size, sizeof *causes, "hang root causes");
    for (int r = 0; r < w->size; r++) {
        const tb_flight_entry *call = known[r] ? pending[r] : NULL;
        const tb_group *g = call ? group_with_id(&w->ranks[r], call->group_id) : NULL;
        if (!g) continue;
        for (int i = 0; i < g->size; i++) {
            const int m = g->ranks[i];
            if (m == r || !known[m]) continue;  // a member in another process: not seen from here
            // a send or recv waits for its peer only
            if (is_p2p(call->op) && call->peer >= 0 && call->peer != i) continue;
            const tb_flight_entry *theirs = pending[m];
            char why[320] = "";
            int kind = 0;
            if (!theirs) {
                kind = 1;
                snprintf(why, sizeof why, "never entered %s seq %llu on group %s, which rank %d waits in",
                         tb_comm_op_name(call->op), (unsigned long long)call->seq, call->group, r);
            } else if (theirs->group_id == call->group_id && !is_p2p(call->op)) {
                if (theirs->seq != call->seq)
                    kind = 2, snprintf(why, sizeof why, "is in %s seq %llu on group %s where rank %d is in seq %llu",
                                       tb_comm_op_name(theirs->op), (unsigned long long)theirs->seq, call->group, r,
                                       (unsigned long long)call->seq);
                else if (theirs->op != call->op || theirs->count != call->count)
                    kind = 2, snprintf(why, sizeof why,
                                       "entered seq %llu on group %s as %s of %zu elements, rank %d as %s of %zu",
                                       (unsigned long long)call->seq, call->group, tb_comm_op_name(theirs->op),
                                       theirs->count, r, tb_comm_op_name(call->op), call->count);
            }
            // else: m waits in a call of its own (a victim: followed from its own entry) or with r
            if (!kind) continue;
            cause *c = &causes[m];
            if (!c->kind) {
                c->kind = kind;
                c->waiter = r;
                c->group = g;
                snprintf(c->reason, sizeof c->reason, "%s", why);
                c->waited_for_by = json_array();
            }
            json_array_append_new(c->waited_for_by, json_integer(r));
        }
    }
    json_t *out = json_array();
    size_t used = strlen(text);
    for (int m = 0; m < w->size; m++) {
        cause *c = &causes[m];
        if (!c->kind) continue;
        const tb_rank *rk = &w->ranks[m];
        char phase[512];
        tb_ranges_stack_string(&rk->ranges, phase, sizeof phase);
        json_t *members = json_array();
        for (int i = 0; i < c->group->size; i++) json_array_append_new(members, json_integer(c->group->ranks[i]));
        json_array_append_new(
            out, json_pack("{s:i, s:s, s:s, s:s, s:o, s:s, s:o, s:o, s:I, s:i, s:s}", "rank", m, "rank_label",
                           rk->label, "kind", c->kind == 1 ? "absent" : "mismatch", "reason", c->reason,
                           "waited_for_by", c->waited_for_by, "group", c->group->name, "group_members", members,
                           "last_completed", call_json(completed[m]), "step", (json_int_t)rk->step, "microbatch",
                           (int)rk->microbatch, "phase", phase));
        const tb_flight_entry *done = completed[m];
        const size_t nwait = json_array_size(c->waited_for_by);
        if (used < len)
            used += (size_t)snprintf(text + used, len - used,
                                     "\n    %s: %s%s; last completed %s%s%s seq %llu; at step %lld%s%s", rk->label,
                                     c->reason, nwait > 1 ? " (and more: see waited_for_by)" : "",
                                     done ? tb_comm_op_name(done->op) : "nothing", done ? " on " : "",
                                     done ? done->group : "", done ? (unsigned long long)done->seq : 0ull,
                                     (long long)rk->step, phase[0] ? ", in " : "", phase);
    }
    free(causes);
    return out;
}
