// moe_report.c — `tracebook moe` (moe_report.h).
#include "inspect/moe_report.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/options.h"
#include "core/run_arg.h"
#include "core/run_dir.h"
#include "core/xalloc.h"
#include "inspect/step_report.h"

#define MR_PATH_MAX 4096

// One MoE layer's figures over the run.
typedef struct layer_acc {
    int seen;                 // steps with a record of this layer
    int64_t *tokens;          // (E) over the run
    int64_t routed, dropped;
    double *imbalance;        // (steps) max over mean of the step's tokens per expert
    double *ep_imbalance;     // (steps) the worst ep group's busiest ep rank over its mean
    double *aux;              // (steps) mean over the ranks of the step's load-balancing loss
    int naux;
    // per rank: the metrics' a2a_bytes, and the trace's all-to-all calls
    int64_t *metrics_bytes, *calls, *bytes;
    double *wait_ms, *transfer_ms;
} layer_acc;

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static json_t *spread_json(double *v, int n) {
    if (n == 0) return json_null();
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    const double median = n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
    return json_pack("{s:f, s:f, s:f}", "min", v[0], "median", median, "max", v[n - 1]);
}

static int cfg_int(const json_t *cfg, const char *key, int fallback) {
    const json_t *v = json_object_get(cfg, key);
    return json_is_integer(v) ? (int)json_integer_value(v) : fallback;
}

// The trace's all-to-alls of each MoE layer (inside a layer.L.moe.* range), per member.
static void add_a2a(const json_t *calls, layer_acc *acc, int num_layers, int nranks) {
    size_t i;
    json_t *c;
    json_array_foreach(calls, i, c) {
        const char *op = json_string_value(json_object_get(c, "op"));
        const char *in = json_string_value(json_object_get(c, "last_in"));
        int layer, n = 0;
        if (!op || strcmp(op, "all_to_all") != 0 || !in || sscanf(in, "layer.%d.moe%n", &layer, &n) != 1 || n == 0 ||
            layer < 0 || layer >= num_layers)
            continue;
        size_t k;
        json_t *m;
        json_array_foreach(json_object_get(c, "members"), k, m) {
            const int r = (int)json_integer_value(json_object_get(m, "rank"));
            if (r < 0 || r >= nranks) continue;
            layer_acc *a = &acc[layer];
            a->calls[r]++;
            a->bytes[r] += json_integer_value(json_object_get(m, "bytes"));
            a->wait_ms[r] += json_number_value(json_object_get(m, "wait_ms"));
            a->transfer_ms[r] += json_number_value(json_object_get(m, "transfer_ms"));
        }
    }
}

json_t *tb_moe_report(const char *dir, tb_error *err) {
    char path[MR_PATH_MAX];
    if (snprintf(path, sizeof path, "%s/" TB_RUN_CONFIG, dir) >= (int)sizeof path) {
        tb_fail(err, "%s: path too long", dir);
        return NULL;
    }
    json_error_t jerr;
    json_t *cfg = json_load_file(path, 0, &jerr);
    if (!cfg) {
        if (jerr.line < 1) tb_fail(err, "%s", jerr.text);  // not opened: jansson's text says why
        else tb_fail(err, "%s: line %d, column %d: %s", path, jerr.line, jerr.column, jerr.text);
        return NULL;
    }
    const int E = cfg_int(cfg, "num_experts", 0), topk = cfg_int(cfg, "moe_router_topk", 0);
    const int L = cfg_int(cfg, "num_layers", 0), ep = cfg_int(cfg, "expert_model_parallel_size", 1);
    const int tp = cfg_int(cfg, "tensor_model_parallel_size", 1), etp = cfg_int(cfg, "expert_tensor_parallel_size", 1);
    const int sp = json_is_true(json_object_get(cfg, "sequence_parallel"));
    // the all-gather dispatcher has no all-to-all (its metrics' a2a_bytes are 0)
    const char *dispatcher = json_string_value(json_object_get(cfg, "moe_token_dispatcher_type"));
    const int allgather = dispatcher && !strcmp(dispatcher, "allgather");
    json_decref(cfg);
    if (E <= 0) {
        tb_fail(err, "%s: num_experts is %d: not a MoE run", path, E);
        return NULL;
    }
    if (L <= 0 || ep < 1 || tp < 1 || etp < 1 || E % ep != 0) {
        tb_fail(err, "%s: num_layers %d, expert_model_parallel_size %d, tensor_model_parallel_size %d, "
                "expert_tensor_parallel_size %d: not a layout of %d experts", path, L, ep, tp, etp, E);
        return NULL;
    }
    const int nranks = tb_run_rank_files(dir, TB_RANK_METRICS, err);
    if (nranks < 0) return NULL;
    if (nranks == 0) {
        tb_fail(err, "%s: no metrics.rank-NNNNN.jsonl (not a run directory?)", dir);
        return NULL;
    }
    json_t **rows = tb_xcalloc((size_t)nranks, sizeof *rows, "metrics");
    int rc = tb_rank_metrics(dir, nranks, rows, err);
    const int nsteps = rc == 0 ? (int)json_array_size(rows[0]) : 0;
    for (int r = 1; rc == 0 && r < nranks; r++)
        if ((int)json_array_size(rows[r]) != nsteps)
            rc = tb_fail(err, "%s: rank %d has %zu metrics lines, rank 0 %d (an incomplete run?)", dir, r,
                         json_array_size(rows[r]), nsteps);
    layer_acc *acc = tb_xcalloc((size_t)L, sizeof *acc, "MoE layers");
    for (int l = 0; l < L; l++) {
        acc[l].tokens = tb_xcalloc((size_t)E, sizeof(int64_t), "MoE tokens");
        acc[l].imbalance = tb_xcalloc((size_t)nsteps + 1, sizeof(double), "MoE imbalance");
        acc[l].ep_imbalance = tb_xcalloc((size_t)nsteps + 1, sizeof(double), "MoE ep imbalance");
        acc[l].aux = tb_xcalloc((size_t)nsteps + 1, sizeof(double), "MoE aux loss");
        acc[l].metrics_bytes = tb_xcalloc((size_t)nranks, sizeof(int64_t), "MoE a2a bytes");
        acc[l].calls = tb_xcalloc((size_t)nranks, sizeof(int64_t), "MoE a2a calls");
        acc[l].bytes = tb_xcalloc((size_t)nranks, sizeof(int64_t), "MoE a2a bytes");
        acc[l].wait_ms = tb_xcalloc((size_t)nranks, sizeof(double), "MoE a2a wait");
        acc[l].transfer_ms = tb_xcalloc((size_t)nranks, sizeof(double), "MoE a2a transfer");
    }
    // per step: the tokens per expert of each layer over the ranks routing distinct tokens, and
    // each ep group's tokens per ep rank
    const int ngroups = (nranks + etp * ep - 1) / (etp * ep);
    int64_t *step_tokens = tb_xcalloc((size_t)L * E, sizeof(int64_t), "MoE step tokens");
    int64_t *ep_load = tb_xcalloc((size_t)L * ngroups * ep, sizeof(int64_t), "MoE ep load");
    double *aux_sum = tb_xcalloc((size_t)L, sizeof(double), "MoE aux sum");
    int *aux_n = tb_xcalloc((size_t)L, sizeof(int), "MoE aux n"), *seen = tb_xcalloc((size_t)L, sizeof(int), "seen");
    for (int s = 0; rc == 0 && s < nsteps; s++) {
        memset(step_tokens, 0, (size_t)L * E * sizeof *step_tokens);
        memset(ep_load, 0, (size_t)L * ngroups * ep * sizeof *ep_load);
        memset(aux_sum, 0, (size_t)L * sizeof *aux_sum), memset(aux_n, 0, (size_t)L * sizeof *aux_n);
        memset(seen, 0, (size_t)L * sizeof *seen);
        const json_int_t step = json_integer_value(json_object_get(json_array_get(rows[0], (size_t)s), "step"));
        for (int r = 0; rc == 0 && r < nranks; r++) {
            json_t *line = json_array_get(rows[r], (size_t)s);
            if (json_integer_value(json_object_get(line, "step")) != step) {
                rc = tb_fail(err, "%s: rank %d's metrics line %d is not step %lld (rank 0's)", dir, r, s + 1,
                             (long long)step);
                break;
            }
            // without sequence parallelism the tp ranks route the same tokens: count one of them
            const int distinct = sp || r % tp == 0, group = r / (etp * ep);
            size_t i;
            json_t *o;
            json_array_foreach(json_object_get(line, "moe"), i, o) {
                const int l = (int)json_integer_value(json_object_get(o, "layer"));
                json_t *counts = json_object_get(o, "tokens_per_expert");
                if (l < 0 || l >= L || json_array_size(counts) != (size_t)E) {
                    rc = tb_fail(err, "%s: rank %d step %lld: a moe entry of layer %d with %zu experts (want [0, %d) "
                                 "and %d)", dir, r, (long long)step, l, json_array_size(counts), L, E);
                    break;
                }
                layer_acc *a = &acc[l];
                a->metrics_bytes[r] += json_integer_value(json_object_get(o, "a2a_bytes"));
                json_t *lb = json_object_get(o, "load_balancing_loss");
                if (json_is_number(lb)) aux_sum[l] += json_number_value(lb), aux_n[l]++;
                if (!distinct) continue;
                seen[l] = 1;
                a->dropped += json_integer_value(json_object_get(o, "dropped_tokens"));
                for (int e = 0; e < E; e++) {
                    const int64_t n = json_integer_value(json_array_get(counts, (size_t)e));
                    step_tokens[(size_t)l * E + e] += n;
                    a->tokens[e] += n, a->routed += n;
                    // the ep rank holding expert e in this rank's ep group receives it
                    ep_load[((size_t)l * ngroups + group) * ep + e / (E / ep)] += n;
                }
            }
        }
        for (int l = 0; rc == 0 && l < L; l++) {
            if (!seen[l]) continue;
            layer_acc *a = &acc[l];
            int64_t total = 0, max = 0;
            for (int e = 0; e < E; e++) {
                const int64_t n = step_tokens[(size_t)l * E + e];
                total += n, max = n > max ? n : max;
            }
            a->imbalance[a->seen] = total > 0 ? (double)max / ((double)total / E) : 0;
            double worst = 0;
            for (int g = 0; g < ngroups; g++) {
                const int64_t *load = ep_load + ((size_t)l * ngroups + g) * ep;
                int64_t gt = 0, gm = 0;
                for (int i = 0; i < ep; i++) gt += load[i], gm = load[i] > gm ? load[i] : gm;
                if (gt > 0 && (double)gm / ((double)gt / ep) > worst) worst = (double)gm / ((double)gt / ep);
            }
            a->ep_imbalance[a->seen] = worst;
            if (aux_n[l]) a->aux[a->naux++] = aux_sum[l] / aux_n[l];
            a->seen++;
        }
    }
    free(step_tokens), free(ep_load), free(aux_sum), free(aux_n), free(seen);
    // the all-to-alls, from the traces when the run wrote them
    int traces = 0;
    if (rc == 0 && ep > 1) {
        tb_error terr;
        json_t *calls = tb_collective_calls(dir, &terr);
        if (calls) {
            traces = 1;
            add_a2a(calls, acc, L, nranks);
            json_decref(calls);
        }
    }
    json_t *out = NULL;
    if (rc == 0) {
        json_t *layers = json_array();
        for (int l = 0; l < L; l++) {
            layer_acc *a = &acc[l];
            if (!a->seen) continue;
            json_t *tokens = json_array();
            for (int e = 0; e < E; e++) json_array_append_new(tokens, json_integer((json_int_t)a->tokens[e]));
            json_t *aux = json_null();
            if (a->naux) {
                double sum = 0;
                for (int i = 0; i < a->naux; i++) sum += a->aux[i];
                aux = json_pack("{s:f, s:f, s:f}", "first", a->aux[0], "last", a->aux[a->naux - 1], "mean",
                                sum / a->naux);
            }
            json_t *a2a = json_null();
            if (ep > 1) {
                json_t *ranks = json_array();
                int64_t calls = 0, bytes = 0, mbytes = 0;
                double wait = 0, transfer = 0;
                for (int r = 0; r < nranks; r++) {
                    if (!a->calls[r] && !a->metrics_bytes[r]) continue;  // a rank without this layer (pp)
                    calls += a->calls[r], bytes += a->bytes[r], mbytes += a->metrics_bytes[r];
                    wait += a->wait_ms[r], transfer += a->transfer_ms[r];
                    json_array_append_new(ranks, json_pack("{s:i, s:I, s:I, s:I, s:f, s:f}", "rank", r, "calls",
                                                           (json_int_t)a->calls[r], "bytes", (json_int_t)a->bytes[r],
                                                           "metrics_bytes", (json_int_t)a->metrics_bytes[r], "wait_ms",
                                                           a->wait_ms[r], "transfer_ms", a->transfer_ms[r]));
                }
                a2a = json_pack("{s:I, s:I, s:I, s:f, s:f, s:o}", "calls", (json_int_t)calls, "bytes",
                                (json_int_t)bytes, "metrics_bytes", (json_int_t)mbytes, "wait_ms", wait,
                                "transfer_ms", transfer, "ranks", ranks);
            }
            json_array_append_new(
                layers, json_pack("{s:i, s:i, s:o, s:o, s:o, s:I, s:I, s:o, s:o}", "layer", l, "steps", a->seen,
                                  "imbalance", spread_json(a->imbalance, a->seen), "ep_imbalance",
                                  ep > 1 ? spread_json(a->ep_imbalance, a->seen) : json_null(), "tokens_per_expert",
                                  tokens, "routed_tokens", (json_int_t)a->routed, "dropped_tokens",
                                  (json_int_t)a->dropped, "load_balancing_loss", aux, "a2a", a2a));
        }
        out = json_pack("{s:s, s:i, s:i, s:i, s:i, s:i, s:o, s:b, s:b}", "run_dir", dir, "ranks", nranks, "steps",
                        nsteps, "num_experts", E, "topk", topk, "ep", ep, "layers", layers, "traces", traces,
                        "allgather", allgather);
    }
    for (int l = 0; l < L; l++) {
        free(acc[l].tokens), free(acc[l].imbalance), free(acc[l].ep_imbalance), free(acc[l].aux);
        free(acc[l].metrics_bytes), free(acc[l].calls), free(acc[l].bytes), free(acc[l].wait_ms);
        free(acc[l].transfer_ms);
    }
    free(acc);
    for (int r = 0; r < nranks; r++) json_decref(rows[r]);
    free(rows);
    return out;
}

// --- tracebook moe ----------------------------------------------------------------------

typedef struct moe_args {
    int json;
    const char *artifacts;
} moe_args;

static const tb_option moe_options[] = {
    TB_OPTION("--json", moe_args, json, TB_OPT_BOOL, "false", NULL, "the report as JSON"),
    TB_ARTIFACTS_OPTION(moe_args, artifacts),
    TB_OPTIONS_END,
};
static const tb_command moe_command = {
    "tracebook moe", "RUN",
    "A MoE run's expert load per layer over the run: the load imbalance (max over mean tokens per\n"
    "expert), tokens routed and dropped, the auxiliary loss, and the all-to-all's bytes and wait vs\n"
    "transfer. RUN is a run id (or a unique prefix), a record directory or a run directory (docs/CLI.md).",
    moe_options, 1, 1, "tracebook moe 20261129T104512", NULL};

static double num(const json_t *o, const char *key) { return json_number_value(json_object_get(o, key)); }

static void print_spread(const json_t *s) {
    if (json_is_null(s)) printf("  %-20s", "-");
    else printf("  %5.3f %5.3f %5.3f   ", num(s, "min"), num(s, "median"), num(s, "max"));
}

static void print_report(const json_t *rep) {
    printf("%s: %lld experts, top-%lld, ep %lld; %lld steps, %lld ranks\n\n",
           json_string_value(json_object_get(rep, "run_dir")), (long long)num(rep, "num_experts"),
           (long long)num(rep, "topk"), (long long)num(rep, "ep"), (long long)num(rep, "steps"),
           (long long)num(rep, "ranks"));
    const int ep = (int)num(rep, "ep");
    printf("  %-5s  %-20s  %-20s %10s %8s  %s\n", "layer", "max/mean min med max", "ep rank max/mean", "routed",
           "dropped", "aux loss first -> last (mean)");
    size_t i;
    json_t *l;
    json_array_foreach(json_object_get(rep, "layers"), i, l) {
        printf("  %-5lld", (long long)json_integer_value(json_object_get(l, "layer")));
        print_spread(json_object_get(l, "imbalance"));
        print_spread(json_object_get(l, "ep_imbalance"));
        printf("%10lld %8lld  ", (long long)json_integer_value(json_object_get(l, "routed_tokens")),
               (long long)json_integer_value(json_object_get(l, "dropped_tokens")));
        json_t *aux = json_object_get(l, "load_balancing_loss");
        if (json_is_null(aux)) printf("-\n");
        else printf("%.4f -> %.4f (%.4f)\n", num(aux, "first"), num(aux, "last"), num(aux, "mean"));
    }
    json_array_foreach(json_object_get(rep, "layers"), i, l) {
        printf("\nlayer %lld: tokens per expert over the run:", (long long)json_integer_value(json_object_get(l, "layer")));
        size_t e;
        json_t *n;
        json_array_foreach(json_object_get(l, "tokens_per_expert"), e, n) printf(" %lld", (long long)json_integer_value(n));
        printf("\n");
        json_t *a2a = json_object_get(l, "a2a");
        if (json_is_null(a2a)) continue;
        if (!json_is_true(json_object_get(rep, "traces"))) {
            printf("  all-to-all: %.1f KB by the metrics; no traces: no wait or transfer times\n",
                   num(a2a, "metrics_bytes") / 1e3);
            continue;
        }
        printf("  all-to-all: %lld calls, %.1f KB sent (the metrics: %.1f KB%s); wait for peers %.3f ms, "
               "transfer %.3f ms (summed over ranks)\n",
               (long long)num(a2a, "calls"), num(a2a, "bytes") / 1e3, num(a2a, "metrics_bytes") / 1e3,
               num(a2a, "bytes") == num(a2a, "metrics_bytes")
                   ? ", equal"
                   : ", differs: a recompute repeats the forward's, or the run predates a2a_bytes",
               num(a2a, "wait_ms"), num(a2a, "transfer_ms"));
        size_t r;
        json_t *rk;
        json_array_foreach(json_object_get(a2a, "ranks"), r, rk)
            printf("    rank %-4lld %5lld calls %10.1f KB  wait %8.3f ms  transfer %8.3f ms\n",
                   (long long)num(rk, "rank"), (long long)num(rk, "calls"), num(rk, "bytes") / 1e3, num(rk, "wait_ms"),
                   num(rk, "transfer_ms"));
    }
    if (ep == 1) printf("\n(ep 1: no all-to-all)\n");
    else if (json_is_true(json_object_get(rep, "allgather")))
        printf("\n(the all-gather dispatcher: no all-to-all; its tokens move in all-gathers and reduce-scatters)\n");
}

int tracebook_moe_main(int argc, char **argv) {
    moe_args a = {0};
    tb_positional pos = {0};
    tb_error err;
    int rc = tb_command_parse(&moe_command, &a, argc, argv, &pos, &err);
    if (rc == 1) return 0;
    if (rc != 0) return tb_command_usage_error(&moe_command, &err);
    tb_run_arg run;
    json_t *rep = tb_run_arg_resolve(pos.items[0], a.artifacts, &run, &err) == 0 ? tb_moe_report(run.run_dir, &err)
                                                                                  : NULL;
    tb_positional_free(&pos);
    if (!rep) {
        fprintf(stderr, "tracebook moe: %s\n", err.msg);
        return 1;
    }
    if (a.json) {
        json_dumpf(rep, stdout, JSON_INDENT(1));
        printf("\n");
    } else {
        print_report(rep);
    }
    json_decref(rep);
    return 0;
}
