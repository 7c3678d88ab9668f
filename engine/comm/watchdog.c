#include "comm/watchdog.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "comm/hang_analysis.h"
#include "core/fileio.h"
#include "core/ranges.h"
#include "core/run_dir.h"
#include "parallel_state.h"
#include "core/xalloc.h"

#define TAIL 8

typedef struct rank_view {
    tb_flight_entry tail[TAIL];
    int ntail;
    const tb_flight_entry *pending;    // the newest entry still open, or NULL
    const tb_flight_entry *completed;  // the newest closed entry, or NULL
} rank_view;

static void view_rank(tb_rank *rk, rank_view *v) {
    v->ntail = tb_flight_recorder_tail(&rk->fr, v->tail, TAIL);
    v->pending = v->completed = NULL;
    for (int i = v->ntail - 1; i >= 0; i--) {
        if (!v->pending && v->tail[i].exit_ns == 0 && !v->completed) v->pending = &v->tail[i];
        if (!v->completed && v->tail[i].exit_ns != 0) v->completed = &v->tail[i];
    }
}

static json_t *entry_json(const tb_flight_entry *e, int64_t now) {
    if (!e) return json_null();
    json_t *o = json_pack("{s:s, s:i, s:i, s:I, s:s, s:I, s:I, s:I, s:i}", "group", e->group, "group_id", e->group_id,
                          "group_size", e->group_size, "seq", (json_int_t)e->seq, "op", tb_comm_op_name(e->op), "count",
                          (json_int_t)e->count, "bytes", (json_int_t)e->bytes, "step", (json_int_t)e->step,
                          "microbatch", e->microbatch);
    if (e->peer >= 0) json_object_set_new(o, "peer", json_integer(e->peer));
    if (e->exit_ns) json_object_set_new(o, "duration_ms", json_real((double)(e->exit_ns - e->enter_ns) / 1e6));
    else json_object_set_new(o, "pending_for_s", json_real((double)(now - e->enter_ns) / 1e9));
    return o;
}

static int contains(const tb_group *g, int rank) {
    for (int i = 0; i < g->size; i++)
        if (g->ranks[i] == rank) return 1;
    return 0;
}

void tb_watchdog_report_hang(tb_group *g, const char *what) {
    tb_rank *me = g->rk;
    tb_world *w = me->world;
    if (!w) {
        fprintf(stderr, "%s: HANG: %s\n", me->label, what);
        fflush(NULL);
        return;
    }
    if (atomic_exchange(&w->hang_reported, 1)) {
        // another rank is writing the report; it aborts the world when the report is whole
        parallel_state_wait_for_abort(w);
        return;
    }
    const int64_t now = tb_now_ns();
    // Under mpirun a process sees its own ranks only: the others' views stay empty, and they
    // are named as in another process rather than as absent (merging the processes' reports is
    // the report reader's part).
    rank_view *views = tb_xcalloc((size_t)w->size, sizeof *views, "hang report views");
    for (int r = 0; r < w->size; r++)
        if (parallel_state_rank_is_local(w, r)) view_rank(&w->ranks[r], &views[r]);

    // every rank of this process: coordinates, pending call, flight-recorder tail
    json_t *ranks = json_array();
    int *stuck = tb_xcalloc((size_t)w->size, sizeof(int), "hang report stuck ranks"), nstuck = 0;
    for (int r = 0; r < w->size; r++) {
        if (!parallel_state_rank_is_local(w, r)) continue;
        tb_rank *rk = &w->ranks[r];
        json_t *tail = json_array();
        for (int i = 0; i < views[r].ntail; i++) json_array_append_new(tail, entry_json(&views[r].tail[i], now));
        json_array_append_new(
            ranks, json_pack("{s:i, s:s, s:{s:i, s:i, s:i, s:i}, s:I, s:i, s:o, s:o, s:o}", "rank", r, "rank_label",
                             rk->label, "coordinates", "tp", rk->coords.tp, "cp", rk->coords.cp, "dp", rk->coords.dp,
                             "pp", rk->coords.pp, "step", (json_int_t)rk->step, "microbatch", (int)rk->microbatch,
                             "pending", entry_json(views[r].pending, now), "last_completed",
                             entry_json(views[r].completed, now), "flight_recorder_tail", tail));
        if (views[r].pending) stuck[nstuck++] = r;
    }

    // stuck ranks grouped by the communicator they wait in
    json_t *by_group = json_object();
    for (int i = 0; i < nstuck; i++) {
        const tb_flight_entry *p = views[stuck[i]].pending;
        char key[64];
        snprintf(key, sizeof key, "%s#%d", p->group, p->group_id);
        json_t *list = json_object_get(by_group, key);
        if (!list) json_object_set_new(by_group, key, list = json_array());
        json_array_append_new(list, json_pack("{s:i, s:s, s:s, s:I}", "rank", stuck[i], "rank_label",
                                              w->ranks[stuck[i]].label, "op", tb_comm_op_name(p->op), "seq",
                                              (json_int_t)p->seq));
    }

    // the smallest group (of more than one rank) that holds every stuck rank
    const tb_group *common = NULL;
    if (nstuck > 0) {
        tb_rank *first = &w->ranks[stuck[0]];
        for (int k = 0; k < TB_NGROUP_KINDS; k++) {
            const tb_group *cand = &first->groups[k];
            int all = cand->size > 1;
            for (int i = 1; i < nstuck && all; i++) all = contains(cand, stuck[i]);
            if (all && (!common || cand->size < common->size)) common = cand;
        }
    }
    json_t *common_json = json_null();
    if (common) {
        json_t *members = json_array();
        for (int i = 0; i < common->size; i++) json_array_append_new(members, json_integer(common->ranks[i]));
        common_json = json_pack("{s:s, s:i, s:o}", "group", common->name, "group_id", common->id, "members", members);
    }

    // the timed-out group: who is waiting with us, who is absent and what each did last
    json_t *absent = json_array(), *members = json_array(), *remote = json_array();
    char absent_text[1024] = "";
    size_t used = 0;
    for (int i = 0; i < g->size; i++) {
        int r = g->ranks[i];
        json_array_append_new(members, json_integer(r));
        if (!parallel_state_rank_is_local(w, r)) {
            json_array_append_new(remote, json_pack("{s:i, s:s, s:i}", "rank", r, "rank_label", w->ranks[r].label,
                                                    "process", parallel_state_process_of(w, r)));
            continue;
        }
        const tb_flight_entry *p = views[r].pending;
        if (p && p->group_id == g->id && p->seq == g->seq) continue;
        const tb_flight_entry *c = views[r].completed;
        json_array_append_new(absent, json_pack("{s:i, s:s, s:o, s:o}", "rank", r, "rank_label", w->ranks[r].label,
                                                "last_completed", entry_json(c, now), "pending",
                                                entry_json(p, now)));
        if (used < sizeof absent_text)
            used += (size_t)snprintf(absent_text + used, sizeof absent_text - used,
                                     "\n    %s: last completed %s on %s seq %llu (%zu bytes)%s%s", w->ranks[r].label,
                                     c ? tb_comm_op_name(c->op) : "nothing", c ? c->group : "-",
                                     c ? (unsigned long long)c->seq : 0ull, c ? c->bytes : (size_t)0,
                                     p ? ", now waiting in " : "", p ? tb_comm_op_name(p->op) : "");
    }
    // the root cause: whom the stuck ranks wait for, followed to those that wait for nothing
    const tb_flight_entry **pending = tb_xcalloc((size_t)w->size, sizeof *pending, "hang report pending"),
                          **completed = tb_xcalloc((size_t)w->size, sizeof *completed, "hang report completed");
    int *known = tb_xcalloc((size_t)w->size, sizeof *known, "hang report known ranks");
    for (int r = 0; r < w->size; r++) {
        known[r] = parallel_state_rank_is_local(w, r);
        pending[r] = views[r].pending, completed[r] = views[r].completed;
    }
    char cause_text[2048] = "";
    json_t *root_cause = tb_hang_root_cause(w, pending, completed, known, cause_text, sizeof cause_text);
    free(pending), free(completed), free(known);
    const size_t ncauses = json_array_size(root_cause);

    const tb_flight_entry *mine = views[me->rank].pending;
    const size_t nremote = json_array_size(remote);  // (the report takes remote)
    json_t *report = json_pack(
        "{s:s, s:s, s:f, s:{s:s, s:i, s:I, s:s, s:o, s:i, s:s}, s:o, s:o, s:o, s:o, s:i, s:i, s:o}", "kind", "hang",
        "message", what, "collective_timeout_s", w->comm.collective_timeout_s, "timed_out", "group", g->name,
        "group_id", g->id, "seq", (json_int_t)g->seq, "op", mine ? tb_comm_op_name(mine->op) : "?", "members",
        members, "detected_by", me->rank, "detected_by_label", me->label, "absent_peers", absent, "stuck_by_group",
        by_group, "smallest_common_group", common_json, "ranks", ranks, "process", w->process, "processes",
        w->processes, "members_in_other_processes", remote);
    json_object_set_new(report, "root_cause", root_cause);
    char path[TB_PATH_MAX + 32];
    tb_error err;
    int wrote = tb_run_path(path, sizeof path, w->run_dir[0] ? w->run_dir : ".", TB_RUN_HANG_REPORT, &err) == 0 &&
                tb_write_json_atomic(path, report, &err) == 0;
    json_decref(report);

    fprintf(stderr, "\nHANG: %s\n", what);
    fprintf(stderr, "  detected by %s in %s seq %llu on group %s [", me->label, mine ? tb_comm_op_name(mine->op) : "?",
            (unsigned long long)g->seq, g->name);
    for (int i = 0; i < g->size; i++) fprintf(stderr, "%s%d", i ? ", " : "", g->ranks[i]);
    fprintf(stderr, "]\n  stuck ranks: %d of %d", nstuck, w->local_count);
    if (common) fprintf(stderr, "; smallest common group: %s", common->name);
    if (ncauses) fprintf(stderr, "\n  root cause:%s", cause_text);
    else if (nstuck) fprintf(stderr, "\n  root cause: none outside a call here (the stuck ranks wait for each other, or for "
                                   "ranks in other processes)");
    fprintf(stderr, "\n  absent from this call:%s\n", absent_text[0] ? absent_text : " none");
    if (nremote)
        fprintf(stderr, "  %zu member(s) in other processes, not seen from process %d\n", nremote, w->process);
    fprintf(stderr, "  report: %s\n", wrote ? path : err.msg);
    fflush(NULL);
    free(stuck);
    free(views);
}
