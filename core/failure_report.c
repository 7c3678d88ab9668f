// failure_report.c — merging the per-rank parts of hang and OOM reports (failure_report.h).
#include "core/failure_report.h"

#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <unistd.h>

#include "core/fileio.h"
#include "core/xalloc.h"

void tb_rank_label_format(char *buf, size_t len, int rank, int tp, int cp, int dp, int pp) {
    snprintf(buf, len, "rank %d (tp%d cp%d dp%d pp%d)", rank, tp, cp, dp, pp);
}

static json_int_t jint(const json_t *o, const char *key) { return json_integer_value(json_object_get(o, key)); }
static const char *jstr(const json_t *o, const char *key) {
    const char *s = json_string_value(json_object_get(o, key));
    return s ? s : "";
}

static int by_rank(const void *a, const void *b) {
    json_int_t x = jint(*(json_t *const *)a, "rank"), y = jint(*(json_t *const *)b, "rank");
    return x < y ? -1 : x > y;
}

int tb_report_parts_count(const char *run_dir, tb_rank_file kind) {
    DIR *d = opendir(run_dir);
    if (!d) return 0;
    int n = 0, rank;
    for (struct dirent *e; (e = readdir(d));) n += tb_rank_file_match(e->d_name, kind, &rank) != 0;
    closedir(d);
    return n;
}

json_t *tb_report_parts_read(const char *run_dir, tb_rank_file kind, int *unreadable, tb_error *err) {
    if (unreadable) *unreadable = 0;
    DIR *d = opendir(run_dir);
    if (!d) return tb_fail(err, "%s: cannot open the run directory", run_dir), NULL;
    size_t n = 0, cap = 16;
    json_t **parts = tb_xcalloc(cap, sizeof *parts, "report parts");
    struct dirent *e;
    while ((e = readdir(d))) {
        int rank;
        if (!tb_rank_file_match(e->d_name, kind, &rank)) continue;
        char path[PATH_MAX + 300];
        snprintf(path, sizeof path, "%s/%s", run_dir, e->d_name);
        json_t *p = json_load_file(path, 0, NULL);
        if (!json_is_object(p) || !json_is_integer(json_object_get(p, "rank")) || jint(p, "rank") != rank) {
            json_decref(p);
            if (unreadable) ++*unreadable;
            continue;
        }
        if (n == cap) parts = tb_xrealloc(parts, (cap *= 2) * sizeof *parts, "report parts");
        parts[n++] = p;
    }
    closedir(d);
    qsort(parts, n, sizeof *parts, by_rank);
    json_t *out = json_array();
    for (size_t i = 0; i < n; i++) json_array_append_new(out, parts[i]);
    free(parts);
    return out;
}

// ---------------------------------------------------------------------------------------
// Hang parts

typedef struct hang_view {
    const json_t *parts;
    int size, tp, cp, dp, pp, k;
    const json_t **by_rank;  // [size]: the part of each rank, NULL when absent
} hang_view;

static void rank_label(const hang_view *v, int r, char *buf, size_t len) {
    const int c = r / v->tp;
    tb_rank_label_format(buf, len, r, r % v->tp, c % v->cp, c / v->cp % v->dp, c / v->cp / v->dp);
}

static int array_has(const json_t *a, json_int_t x) {
    size_t i;
    const json_t *y;
    json_array_foreach(a, i, y) if (json_integer_value(y) == x) return 1;
    return 0;
}

// A group of a part's rank by id: {"group_id", "members"} with its name in *name.
static const json_t *group_by_id(const json_t *part, json_int_t id, const char **name) {
    const char *key;
    const json_t *g;
    json_object_foreach((json_t *)json_object_get(part, "groups"), key, g) if (jint(g, "group_id") == id) {
        if (name) *name = key;
        return g;
    }
    return NULL;
}

// Whether a completed call on group g needed member rank a: every collective but a
// broadcast from another root; a recv from a; never a send (sends are eager).
static int call_needed(const json_t *e, const json_t *g, json_int_t a) {
    const char *op = jstr(e, "op");
    const json_t *members = json_object_get(g, "members");
    const json_t *peer = json_object_get(e, "peer");
    if (!strcmp(op, "send")) return 0;
    if (!strcmp(op, "recv") || !strcmp(op, "broadcast"))
        return json_is_integer(peer) && json_integer_value(json_array_get(members, (size_t)json_integer_value(peer))) == a;
    return 1;
}

// What a rank without a part last took part in, as its peers saw it: among the completed
// calls in the present ranks' tails on groups holding it, that needed it, each peer's latest
// (a tail is in call order); of those, the one of the latest step (then the lowest peer:
// peers' clocks need not agree, so nothing finer is compared across them). A new object, or
// NULL when no peer's tail shows it.
static json_t *last_seen_by_peers(const hang_view *v, int a) {
    const json_t *best = NULL, *best_part = NULL;
    for (int r = 0; r < v->size; r++) {
        const json_t *p = v->by_rank[r], *latest = NULL;
        if (!p) continue;
        size_t i;
        const json_t *e;
        json_array_foreach(json_object_get(p, "flight_recorder_tail"), i, e) {
            if (!json_object_get(e, "duration_ms")) continue;  // still pending
            const json_t *g = group_by_id(p, jint(e, "group_id"), NULL);
            if (g && array_has(json_object_get(g, "members"), a) && call_needed(e, g, a)) latest = e;
        }
        if (latest && (!best || jint(latest, "step") > jint(best, "step"))) best = latest, best_part = p;
    }
    if (!best) return NULL;
    json_t *o = json_deep_copy(best);
    json_object_del(o, "duration_ms");
    json_object_set_new(o, "completed_by", json_integer(jint(best_part, "rank")));
    json_object_set_new(o, "known_from", json_string("peers"));
    return o;
}

// The peer entry of rank r for the call (group id, seq) that others wait in: NULL when r is
// in it (pending there).
static json_t *absent_peer(const hang_view *v, int r, json_int_t group_id, json_int_t seq) {
    const json_t *p = v->by_rank[r];
    char label[96];
    rank_label(v, r, label, sizeof label);
    if (p) {
        const json_t *pend = json_object_get(p, "pending");
        if (json_is_object(pend) && jint(pend, "group_id") == group_id && jint(pend, "seq") == seq) return NULL;
        json_t *lc = json_deep_copy(json_object_get(p, "last_completed"));
        if (json_is_object(lc)) json_object_set_new(lc, "known_from", json_string("own part"));
        return json_pack("{s:i, s:s, s:b, s:o, s:O?}", "rank", r, "rank_label", label, "reported", 1, "last_completed",
                         lc ? lc : json_null(), "pending", json_object_get(p, "pending"));
    }
    json_t *seen = last_seen_by_peers(v, r);
    return json_pack("{s:i, s:s, s:b, s:i, s:o, s:n}", "rank", r, "rank_label", label, "reported", 0, "process",
                     r / v->k, "last_completed", seen ? seen : json_null(), "pending");
}

// The detection the report leads with: the earliest timeout, else the earliest part.
static const json_t *lead_part(const json_t *parts) {
    const json_t *lead = NULL;
    size_t i;
    const json_t *p;
    json_array_foreach(parts, i, p) {
        const int timeout = json_is_object(json_object_get(p, "timed_out"));
        const int lead_timeout = lead && json_is_object(json_object_get(lead, "timed_out"));
        if (!lead || (timeout && !lead_timeout) ||
            (timeout == lead_timeout &&
             json_number_value(json_object_get(p, "written_at")) < json_number_value(json_object_get(lead, "written_at"))))
            lead = p;
    }
    return lead;
}

static int is_p2p(const char *op) { return op && (!strcmp(op, "send") || !strcmp(op, "recv")); }

// How many members of group g are pending in the call `c` is (its group id, seq, op, count).
static int same_call_support(const hang_view *v, const json_t *g, const json_t *c) {
    int n = 0;
    size_t i;
    const json_t *mj;
    json_array_foreach(json_object_get(g, "members"), i, mj) {
        const json_int_t m = json_integer_value(mj);
        const json_t *p = m >= 0 && m < v->size ? v->by_rank[m] : NULL, *q = p ? json_object_get(p, "pending") : NULL;
        if (json_is_object(q) && jint(q, "group_id") == jint(c, "group_id") && jint(q, "seq") == jint(c, "seq") &&
            !strcmp(jstr(q, "op"), jstr(c, "op")) && jint(q, "count") == jint(c, "count"))
            n++;
    }
    return n;
}

// Whether a rank's part shows it past the collective (group id, seq): pending in a later call
// of that group, or that call (or a later one) among its completed calls. Parts are written at
// different moments — each process when its own watchdog fires or when it is terminated — so
// a rank can be seen waiting in a call that a later snapshot of a peer shows done: a
// collective completes only once every member is in it, so the waiting snapshot is stale and
// is no evidence against that peer.
static int passed_collective(const json_t *part, json_int_t group_id, json_int_t seq) {
    const json_t *pend = json_object_get(part, "pending");
    if (json_is_object(pend) && jint(pend, "group_id") == group_id && !is_p2p(jstr(pend, "op")) &&
        jint(pend, "seq") > seq)
        return 1;
    size_t i;
    const json_t *e;
    json_array_foreach(json_object_get(part, "flight_recorder_tail"), i, e) {
        if (!json_object_get(e, "duration_ms")) continue;  // still pending
        if (jint(e, "group_id") == group_id && !is_p2p(jstr(e, "op")) && jint(e, "seq") >= seq) return 1;
    }
    return 0;
}

// The root cause (PyTorch's flight-recorder analysis): from every stuck rank, the members of
// its pending call that are not in it with it — every member of a collective's group, the
// peer of a send or recv — followed to those that wait for nothing: no part (the process
// died or has not reported), no pending call (computing, stalled) and not past the call
// (passed_collective: a stale snapshot is no evidence), or the group's call at the same
// sequence number with another op or count (mismatch; at another sequence number one of the
// two snapshots is stale). A stuck rank waiting for another stuck
// rank is a victim. The verdict depends on what every rank is doing, not on whose watchdog
// fired first. A JSON array ordered by rank.
static json_t *root_cause(const hang_view *v) {
    json_t *causes = json_object();  // rank (text) -> cause
    for (int r = 0; r < v->size; r++) {
        const json_t *p = v->by_rank[r], *pend = p ? json_object_get(p, "pending") : NULL;
        if (!json_is_object(pend)) continue;
        const char *gname = NULL;
        const json_t *g = group_by_id(p, jint(pend, "group_id"), &gname);
        if (!g) continue;
        const char *op = jstr(pend, "op");
        size_t i;
        const json_t *mj;
        json_array_foreach(json_object_get(g, "members"), i, mj) {
            const int m = (int)json_integer_value(mj);
            if (m == r || m < 0 || m >= v->size) continue;
            if (is_p2p(op) && json_is_integer(json_object_get(pend, "peer")) && jint(pend, "peer") != (json_int_t)i)
                continue;
            const json_t *theirs = v->by_rank[m], *tp = theirs ? json_object_get(theirs, "pending") : NULL;
            char why[384] = "";
            const char *kind = NULL;
            if (theirs && !is_p2p(op) && passed_collective(theirs, jint(pend, "group_id"), jint(pend, "seq")))
                continue;  // r's snapshot predates m's: m got past the call r was seen in
            if (!theirs || !json_is_object(tp)) {
                kind = "absent";
                snprintf(why, sizeof why, "%snever entered %s seq %lld on group %s, which rank %d waits in",
                         theirs ? "" : "wrote no report (its process died or has not reported); ", op,
                         (long long)jint(pend, "seq"), gname, r);
            } else if (jint(tp, "group_id") == jint(pend, "group_id") && !is_p2p(op)) {
                // two members pending at different seqs of one group: the one behind was seen
                // before it completed a call the other has completed (a collective completes
                // only with every member in it), so neither waits for the other
                if (jint(tp, "seq") != jint(pend, "seq")) continue;
                // another op or count: the odd one out is blamed (a tie blames both)
                if ((strcmp(jstr(tp, "op"), op) != 0 || jint(tp, "count") != jint(pend, "count")) &&
                    same_call_support(v, g, tp) <= same_call_support(v, g, pend))
                    kind = "mismatch",
                    snprintf(why, sizeof why, "entered seq %lld on group %s as %s of %lld elements, rank %d as %s of %lld",
                             (long long)jint(pend, "seq"), gname, jstr(tp, "op"), (long long)jint(tp, "count"), r, op,
                             (long long)jint(pend, "count"));
            }
            if (!kind) continue;  // it waits in a call of its own: a victim, followed from its entry
            char key[32];
            snprintf(key, sizeof key, "%d", m);
            json_t *c = json_object_get(causes, key);
            if (!c) {
                char label[96];
                rank_label(v, m, label, sizeof label);
                json_t *lc = theirs ? json_deep_copy(json_object_get(theirs, "last_completed")) : last_seen_by_peers(v, m);
                c = json_pack("{s:i, s:s, s:s, s:s, s:o, s:s, s:O, s:o, s:O?, s:O?, s:O?}", "rank", m, "rank_label",
                              label, "kind", kind, "reason", why, "waited_for_by", json_array(), "group", gname,
                              "group_members", json_object_get(g, "members"), "last_completed", lc ? lc : json_null(),
                              "step", theirs ? json_object_get(theirs, "step") : NULL, "microbatch",
                              theirs ? json_object_get(theirs, "microbatch") : NULL, "phase",
                              theirs ? json_object_get(theirs, "phase") : NULL);
                json_object_set_new(causes, key, c);
            }
            json_array_append_new(json_object_get(c, "waited_for_by"), json_integer(r));
        }
    }
    json_t *out = json_array();
    for (int m = 0; m < v->size; m++) {
        char key[32];
        snprintf(key, sizeof key, "%d", m);
        json_t *c = json_object_get(causes, key);
        if (c) json_array_append(out, c);
    }
    json_decref(causes);
    return out;
}

json_t *tb_hang_report_merge(const json_t *parts) {
    const json_t *first = json_array_get(parts, 0), *world = json_object_get(first, "world");
    hang_view v = {parts, (int)jint(world, "size"), (int)jint(world, "tp"), (int)jint(world, "cp"),
                   (int)jint(world, "dp"), (int)jint(world, "pp"), (int)jint(world, "ranks_per_process"), NULL};
    if (v.size < 1) v.size = 1;
    if (v.tp < 1) v.tp = 1;
    if (v.cp < 1) v.cp = 1;
    if (v.dp < 1) v.dp = 1;
    if (v.k < 1) v.k = v.size;
    v.by_rank = tb_xcalloc((size_t)v.size, sizeof *v.by_rank, "hang parts by rank");
    size_t i;
    const json_t *p;
    json_array_foreach(parts, i, p) {
        json_int_t r = jint(p, "rank");
        if (r >= 0 && r < v.size) v.by_rank[r] = p;
    }

    // the reporting ranks, and each process's detection once
    static const char *const rank_keys[] = {"rank", "rank_label", "coordinates", "step", "microbatch", "pending",
                                            "last_completed", "flight_recorder_tail", "process", "host", "pid",
                                            "reason", NULL};
    json_t *ranks = json_array(), *detections = json_array(), *stuck = json_object(), *seen_process = json_object();
    int nstuck = 0, first_stuck = -1;
    for (int r = 0; r < v.size; r++) {
        if (!(p = v.by_rank[r])) continue;
        json_t *e = json_object();
        for (int k = 0; rank_keys[k]; k++)
            if (json_object_get(p, rank_keys[k])) json_object_set(e, rank_keys[k], json_object_get(p, rank_keys[k]));
        json_array_append_new(ranks, e);
        char key[160];
        snprintf(key, sizeof key, "%lld:%s", (long long)jint(p, "process"), jstr(p, "reason"));
        if (!json_object_get(seen_process, key)) {
            json_object_set_new(seen_process, key, json_true());
            json_array_append_new(detections, json_pack("{s:I, s:s, s:s, s:O?, s:O?, s:O?}", "process",
                                                        jint(p, "process"), "reason", jstr(p, "reason"), "message",
                                                        jstr(p, "message"), "detected_by",
                                                        json_object_get(p, "detected_by"), "detected_by_label",
                                                        json_object_get(p, "detected_by_label"), "timed_out",
                                                        json_object_get(p, "timed_out")));
        }
        const json_t *pend = json_object_get(p, "pending");
        if (!json_is_object(pend)) continue;
        snprintf(key, sizeof key, "%s#%lld", jstr(pend, "group"), (long long)jint(pend, "group_id"));
        json_t *list = json_object_get(stuck, key);
        if (!list) json_object_set_new(stuck, key, list = json_array());
        json_array_append_new(list, json_pack("{s:i, s:s, s:s, s:I}", "rank", r, "rank_label", jstr(p, "rank_label"),
                                              "op", jstr(pend, "op"), "seq", jint(pend, "seq")));
        if (first_stuck < 0) first_stuck = r;
        nstuck++;
    }
    json_decref(seen_process);

    // the smallest group (of more than one rank) holding every stuck rank
    json_t *common = json_null();
    if (first_stuck >= 0) {
        const char *key, *best_name = NULL;
        const json_t *g, *best = NULL;
        json_object_foreach((json_t *)json_object_get(v.by_rank[first_stuck], "groups"), key, g) {
            const json_t *members = json_object_get(g, "members");
            int all = json_array_size(members) > 1;
            for (int r = 0; r < v.size && all; r++)
                if (v.by_rank[r] && json_is_object(json_object_get(v.by_rank[r], "pending"))) all = array_has(members, r);
            if (all && (!best || json_array_size(members) < json_array_size(json_object_get(best, "members"))))
                best = g, best_name = key;
        }
        if (best)
            common = json_pack("{s:s, s:I, s:O?}", "group", best_name, "group_id", jint(best, "group_id"), "members",
                               json_object_get(best, "members"));
    }

    // who is absent from the call the others wait in: the timed-out call, else every call a
    // stuck rank waits in
    const json_t *lead = lead_part(parts), *to = json_object_get(lead, "timed_out");
    json_t *absent_peers = json_array(), *listed = json_object();
    for (int r = 0; r < v.size; r++) {
        json_int_t gid, seq;
        const json_t *g;
        if (json_is_object(to)) {
            if (r > 0) break;
            gid = jint(to, "group_id"), seq = jint(to, "seq"), g = to;
        } else {
            const json_t *pend = v.by_rank[r] ? json_object_get(v.by_rank[r], "pending") : NULL;
            if (!json_is_object(pend)) continue;
            gid = jint(pend, "group_id"), seq = jint(pend, "seq");
            g = group_by_id(v.by_rank[r], gid, NULL);
            if (!g) continue;
        }
        const json_t *m;
        size_t j;
        json_array_foreach(json_object_get(g, "members"), j, m) {
            json_int_t peer = json_integer_value(m);
            char key[32];
            snprintf(key, sizeof key, "%lld", (long long)peer);
            if (peer < 0 || peer >= v.size || json_object_get(listed, key)) continue;
            json_t *a = absent_peer(&v, (int)peer, gid, seq);
            if (!a) continue;
            json_object_set_new(listed, key, json_true());
            json_array_append_new(absent_peers, a);
        }
    }
    json_decref(listed);

    // the ranks that wrote no part
    json_t *absent_ranks = json_array();
    for (int r = 0; r < v.size; r++) {
        if (v.by_rank[r]) continue;
        char label[96];
        rank_label(&v, r, label, sizeof label);
        json_t *seen = last_seen_by_peers(&v, r);
        json_array_append_new(absent_ranks, json_pack("{s:i, s:s, s:i, s:o}", "rank", r, "rank_label", label,
                                                      "process", r / v.k, "last_completed", seen ? seen : json_null()));
    }

    json_t *causes = root_cause(&v);
    json_t *timed_out = json_is_object(to) ? json_deep_copy(to) : json_null();
    if (json_is_object(timed_out)) json_object_set(timed_out, "detected_by", json_object_get(lead, "detected_by"));
    json_t *report = json_pack(
        "{s:s, s:s, s:s, s:O?, s:o, s:O?, s:O?, s:o, s:o, s:o, s:o, s:o, s:o, s:i, s:i, s:I, s:i}", "kind", "hang",
        "message", jstr(lead, "message"), "reason", jstr(lead, "reason"), "collective_timeout_s",
        json_object_get(lead, "collective_timeout_s"), "timed_out", timed_out, "detected_by",
        json_object_get(lead, "detected_by"), "detected_by_label", json_object_get(lead, "detected_by_label"),
        "detections", detections, "absent_peers", absent_peers, "absent_ranks", absent_ranks, "stuck_by_group", stuck,
        "smallest_common_group", common, "ranks", ranks, "stuck_ranks", nstuck, "world_size", v.size, "processes",
        jint(first, "processes"), "reported_ranks", (int)json_array_size(parts));
    json_object_set_new(report, "root_cause", causes);
    free(v.by_rank);
    return report;
}

// ---------------------------------------------------------------------------------------
// OOM parts

json_t *tb_oom_report_merge(const json_t *parts) {
    // the earliest part leads (its fields at the top, as a one-rank oom.json always had them)
    const json_t *lead = NULL, *p;
    size_t i;
    json_array_foreach(parts, i, p) if (!lead || json_number_value(json_object_get(p, "written_at")) <
                                                     json_number_value(json_object_get(lead, "written_at"))) lead = p;
    json_t *report = json_deep_copy(lead), *all = json_array();
    json_array_foreach(parts, i, p) json_array_append_new(
        all, json_pack("{s:I, s:s, s:I, s:I, s:O?, s:s, s:I, s:s, s:I, s:I}", "rank", jint(p, "rank"), "rank_label",
                       jstr(p, "rank_label"), "process", jint(p, "process"), "step", jint(p, "step"), "microbatch",
                       json_object_get(p, "microbatch"), "requested_what", jstr(p, "requested_what"),
                       "requested_bytes", jint(p, "requested_bytes"), "requested_category",
                       jstr(p, "requested_category"), "cap_bytes", jint(p, "cap_bytes"), "in_use_bytes",
                       jint(json_object_get(p, "current"), "total")));
    json_object_set_new(report, "out_of_memory_ranks", all);
    json_object_set_new(report, "reported_ranks", json_integer((json_int_t)json_array_size(parts)));
    return report;
}

// ---------------------------------------------------------------------------------------
// Writing and printing

int tb_report_merge_write(const char *run_dir, tb_rank_file kind, json_t **merged, tb_error *err) {
    if (merged) *merged = NULL;
    const char *name = kind == TB_RANK_HANG_PART ? TB_RUN_HANG_REPORT : TB_RUN_OOM_REPORT;
    char path[PATH_MAX + 32];
    if (tb_run_path(path, sizeof path, run_dir, name, err) != 0) return -1;
    // the directory's lock: one merge at a time, across threads and processes
    int fd = open(run_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0 && flock(fd, LOCK_EX) != 0) {
        close(fd);
        fd = -1;
    }
    json_t *parts = tb_report_parts_read(run_dir, kind, NULL, err);
    int rc = -1;
    if (parts && json_array_size(parts) == 0)
        tb_fail(err, "%s: no %s to merge", run_dir, tb_rank_file_pattern(kind));
    else if (parts) {
        json_t *report = kind == TB_RANK_HANG_PART ? tb_hang_report_merge(parts) : tb_oom_report_merge(parts);
        rc = tb_write_json_atomic(path, report, err);
        if (merged) *merged = report;
        else json_decref(report);
    }
    json_decref(parts);
    if (fd >= 0) close(fd);  // releases the lock
    return rc;
}

static void print_call(FILE *out, const json_t *c) {
    fprintf(out, "%s on %s seq %lld (%lld bytes)", jstr(c, "op"), jstr(c, "group"), (long long)jint(c, "seq"),
            (long long)jint(c, "bytes"));
}

void tb_hang_report_print(FILE *out, const json_t *report, const char *path) {
    fprintf(out, "\nHANG: %s\n", jstr(report, "message"));
    const json_t *to = json_object_get(report, "timed_out");
    if (json_is_object(to)) {
        fprintf(out, "  detected by %s in %s seq %lld on group %s [", jstr(report, "detected_by_label"),
                jstr(to, "op"), (long long)jint(to, "seq"), jstr(to, "group"));
        size_t i;
        const json_t *m;
        json_array_foreach(json_object_get(to, "members"), i, m)
            fprintf(out, "%s%lld", i ? ", " : "", (long long)json_integer_value(m));
        fprintf(out, "]\n");
    } else {
        fprintf(out, "  reported (%s) without a call of its own timing out\n", jstr(report, "reason"));
    }
    fprintf(out, "  stuck ranks: %lld of %lld", (long long)jint(report, "stuck_ranks"),
            (long long)jint(report, "world_size"));
    const json_t *common = json_object_get(report, "smallest_common_group");
    if (json_is_object(common)) fprintf(out, "; smallest common group: %s", jstr(common, "group"));
    size_t i;
    const json_t *a;
    if (json_array_size(json_object_get(report, "root_cause"))) fprintf(out, "\n  root cause:");
    json_array_foreach(json_object_get(report, "root_cause"), i, a) {
        const json_t *c = json_object_get(a, "last_completed");
        fprintf(out, "\n    %s: %s; last completed ", jstr(a, "rank_label"), jstr(a, "reason"));
        if (json_is_object(c)) print_call(out, c);
        else fprintf(out, "nothing known");
        if (json_is_integer(json_object_get(a, "step"))) fprintf(out, "; at step %lld", (long long)jint(a, "step"));
        if (jstr(a, "phase")[0]) fprintf(out, ", in %s", jstr(a, "phase"));
    }
    fprintf(out, "\n  absent from this call:%s\n", json_array_size(json_object_get(report, "absent_peers")) ? "" : " none");
    json_array_foreach(json_object_get(report, "absent_peers"), i, a) {
        const json_t *c = json_object_get(a, "last_completed"), *pend = json_object_get(a, "pending");
        fprintf(out, "    %s: ", jstr(a, "rank_label"));
        if (!json_is_true(json_object_get(a, "reported"))) fprintf(out, "no report (process %lld), ", (long long)jint(a, "process"));
        fprintf(out, "last completed ");
        if (json_is_object(c)) print_call(out, c);
        else fprintf(out, "nothing known");
        if (json_is_object(c) && !strcmp(jstr(c, "known_from"), "peers"))
            fprintf(out, " (seen by rank %lld)", (long long)jint(c, "completed_by"));
        if (json_is_object(pend)) fprintf(out, ", now waiting in %s on %s", jstr(pend, "op"), jstr(pend, "group"));
        fprintf(out, "\n");
    }
    const json_t *absent = json_object_get(report, "absent_ranks");
    fprintf(out, "  reports from %lld of %lld ranks", (long long)jint(report, "reported_ranks"),
            (long long)jint(report, "world_size"));
    if (json_array_size(absent)) {
        fprintf(out, "; absent (no part written: the process died first, or has not reported yet):");
        json_array_foreach(absent, i, a) fprintf(out, "%s %s", i ? "," : "", jstr(a, "rank_label"));
    }
    fprintf(out, "\n");
    if (path) fprintf(out, "  report: %s\n", path);
}
