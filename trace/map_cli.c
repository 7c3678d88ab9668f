// map_cli.c — `tracebook map TRACE...`: the report (map_report.h) as text on stdout, and as
// JSON with --json (on stdout) or --output FILE.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/fileio.h"
#include "core/options.h"
#include "core/xalloc.h"
#include "index_db.h"
#include "map_report.h"
#include "trace_cli.h"

#define TEXT_COLLECTIVES 6

static void print_report(json_t *rep) {
    json_t *entry = json_object_get(rep, "entry"), *traces = json_object_get(rep, "traces");
    printf("map: %zu trace file%s, %zu rank%s, %lld range events, %zu names\n", json_array_size(traces),
           json_array_size(traces) == 1 ? "" : "s", json_array_size(json_object_get(rep, "ranks")),
           json_array_size(json_object_get(rep, "ranks")) == 1 ? "" : "s",
           (long long)json_integer_value(json_object_get(rep, "events")),
           json_array_size(json_object_get(rep, "ranges")));
    printf("entry: %s [%s] at %s; index %s\n", json_string_value(json_object_get(entry, "function")),
           json_string_value(json_object_get(entry, "target")), json_string_value(json_object_get(entry, "at")),
           json_string_value(json_object_get(rep, "index")));
    size_t i, k;
    json_t *r, *x;
    char a[64], b[64], buf[8192];
    json_array_foreach(json_object_get(rep, "ranges"), i, r) {
        double total = json_real_value(json_object_get(r, "total_us")) * 1e3;
        double mean = json_real_value(json_object_get(r, "mean_us")) * 1e3;
        tb_format_ns(total, a, sizeof a);
        tb_format_ns(mean, b, sizeof b);
        printf("\n%s  %lld× total %s mean %s\n", json_string_value(json_object_get(r, "name")),
               (long long)json_integer_value(json_object_get(r, "count")), a, b);
        printf("  ranks  ");
        json_array_foreach(json_object_get(r, "per_rank"), k, x) {
            tb_format_ns(json_real_value(json_object_get(x, "total_us")) * 1e3, a, sizeof a);
            tb_format_ns(json_real_value(json_object_get(x, "mean_us")) * 1e3, b, sizeof b);
            printf("%s%lld: %lld× %s (mean %s)", k ? "; " : "", (long long)json_integer_value(json_object_get(x, "rank")),
                   (long long)json_integer_value(json_object_get(x, "count")), a, b);
        }
        printf("\n");
        json_t *comm = json_object_get(r, "comm");
        if (comm) {
            json_array_foreach(json_object_get(comm, "shapes"), k, x)
                printf("  comm   group %s (size %lld) %s %s: %lld× %lld elements, %lld bytes\n",
                       json_string_value(json_object_get(x, "group")),
                       (long long)json_integer_value(json_object_get(x, "group_size")),
                       json_string_value(json_object_get(x, "op")), json_string_value(json_object_get(x, "dtype")),
                       (long long)json_integer_value(json_object_get(x, "calls")),
                       (long long)json_integer_value(json_object_get(x, "count")),
                       (long long)json_integer_value(json_object_get(x, "bytes")));
            printf("  comm   %lld bytes in all\n", (long long)json_integer_value(json_object_get(comm, "bytes_total")));
        }
        json_t *sites = json_object_get(r, "sites");
        if (json_array_size(sites) == 0) printf("  site   NONE: no range site's pattern matches this name\n");
        size_t s;
        json_t *sj;
        json_array_foreach(sites, s, sj) {
            json_t *end = json_object_get(sj, "end_line");
            printf("  site   \"%s\" in %s (%s:%lld", json_string_value(json_object_get(sj, "pattern")),
                   json_string_value(json_object_get(sj, "function")), json_string_value(json_object_get(sj, "file")),
                   (long long)json_integer_value(json_object_get(sj, "line")));
            if (end) printf("-%lld", (long long)json_integer_value(end));
            printf(")%s\n", json_is_true(json_object_get(sj, "continues_in_callers")) ? ", continues in its callers" : "");
            json_t *chain = json_object_get(sj, "chain");
            if (json_is_array(chain)) {
                tb_map_hops_text(chain, buf, sizeof buf);
                printf("  chain  %s\n", buf);
            } else {
                printf("  chain  NONE from the entry point\n");
            }
            json_t *colls = json_object_get(sj, "collectives");
            json_array_foreach(colls, k, x) {
                if (k == TEXT_COLLECTIVES) {
                    printf("  coll   ... %zu more (--json lists all)\n", json_array_size(colls) - k);
                    break;
                }
                tb_map_hops_text(json_object_get(x, "hops"), buf, sizeof buf);
                long long seen = (long long)json_integer_value(json_object_get(x, "observed"));
                printf("  coll   %s: %s", json_string_value(json_object_get(x, "collective")), buf);
                if (seen)
                    printf("  [traces: %lld× %s inside]\n", seen,
                           json_string_value(json_object_get(x, "observed_op")));
                else printf("  [not in these traces]\n");
            }
        }
    }
    json_t *nest = json_object_get(rep, "nestings");
    long long unexplained = (long long)json_integer_value(json_object_get(rep, "unexplained_nestings"));
    printf("\nnesting: %zu distinct parent → child pairs; %lld unexplained by static paths\n", json_array_size(nest),
           unexplained);
    json_array_foreach(nest, k, x) if (!json_is_true(json_object_get(x, "explained")))
        printf("  UNEXPLAINED %s → %s (%lld×): %s\n", json_string_value(json_object_get(x, "parent")),
               json_string_value(json_object_get(x, "child")), (long long)json_integer_value(json_object_get(x, "count")),
               json_string_value(json_object_get(x, "why")));
    json_t *cov = json_object_get(rep, "coverage");
    long long dropped = (long long)json_integer_value(json_object_get(cov, "dropped_events"));
    printf("\ncoverage: %lld/%lld range events (%.1f%%) map to a site with a chain from %s [%s]", 
           (long long)json_integer_value(json_object_get(cov, "mapped_events")),
           (long long)json_integer_value(json_object_get(cov, "events")),
           json_real_value(json_object_get(cov, "percent")), json_string_value(json_object_get(entry, "function")),
           json_string_value(json_object_get(entry, "target")));
    if (dropped) printf("; PARTIAL: %lld malformed event%s dropped (on stderr)", dropped, dropped == 1 ? "" : "s");
    printf("\n");
    json_array_foreach(json_object_get(rep, "unmapped"), k, x) printf("  unmapped: %s\n", json_string_value(x));
    json_array_foreach(json_object_get(rep, "partial_parses"), k, x)
        printf("PARTIAL: partial parse: %s: %lld error%s (first: %s): what its functions call may be missing\n",
               json_string_value(json_object_get(x, "unit")), (long long)json_integer_value(json_object_get(x, "errors")),
               json_integer_value(json_object_get(x, "errors")) == 1 ? "" : "s",
               json_string_value(json_object_get(x, "first")));
}

typedef struct map_args {
    const char *index, *from, *output;
    int json;
} map_args;

static const tb_option map_options[] = {
    TB_OPTION("--from", map_args, from, TB_OPT_STRING, "pretrain_gpt", "ENTRY",
              "the entry point: a build target (its main), a function or FILE:FUNCTION"),
    TB_OPTION("--json", map_args, json, TB_OPT_BOOL, NULL, NULL, "print the report as one JSON document"),
    TB_OPTION("--output", map_args, output, TB_OPT_STRING, NULL, "FILE", "also write the JSON report to FILE"),
    TB_OPTION("--index", map_args, index, TB_OPT_STRING, TB_INDEX_DEFAULT_PATH, "FILE", "the source index"),
    TB_OPTIONS_END};

static const tb_command map_command = {
    "tracebook map", "TRACE...",
    "Every runtime range of the traces (the engine's trace.rank-NNNNN.json files, or `nsys export --type\n"
    "sqlite` files) mapped to its source site, the chain from the entry point and the collectives below\n"
    "it; ranges no static path explains and the share of events mapped (coverage).",
    map_options, 1, -1,
    "tracebook map --from pretrain_gpt artifacts/quickstart/v1/*/run/trace.rank-*.json",
    "a trace or the index cannot be read, or the map is partial (malformed events, a partial parse)"};

// `--json FILE` was the JSON file before --json printed the report: refused, naming --output.
static int old_json_file(int argc, char **argv, tb_error *err) {
    for (int i = 1; i + 1 < argc; i++)
        if (!strcmp(argv[i], "--json") && argv[i + 1][0] != '-' && access(argv[i + 1], F_OK) != 0)
            return tb_fail(err, "tracebook map: --json takes no file now (it prints the report as JSON): "
                                "'%s' is not a trace; write the JSON file with --output %s", argv[i + 1], argv[i + 1]);
    return 0;
}

int tracebook_map_main(int argc, char **argv) {
    map_args args = {0};
    tb_positional pos;
    tb_error err;
    int prc = tb_command_parse(&map_command, &args, argc, argv, &pos, &err);
    if (prc == 1) return 0;
    if (prc == 0 && old_json_file(argc, argv, &err) != 0) {
        tb_positional_free(&pos);
        prc = -1;
    }
    if (prc != 0) return tb_command_usage_error(&map_command, &err);
    const char *index = args.index, *entry = args.from, *json_out = args.output;
    char **traces = (char **)pos.items;
    int ntraces = pos.n;
    tb_map m;
    if (tb_map_open(&m, index, entry, traces, ntraces, &err) != 0) {
        fprintf(stderr, "tracebook map: %s\n", err.msg);
        tb_positional_free(&pos);
        return 1;
    }
    json_t *rep = tb_map_report(&m);
    int rc = 0;
    if (json_out && tb_write_json_atomic(json_out, rep, &err) != 0) {
        fprintf(stderr, "tracebook map: %s\n", err.msg);
        rc = 1;
    }
    if (args.json) {
        json_dumpf(rep, stdout, JSON_INDENT(2) | JSON_SORT_KEYS);
        fputc('\n', stdout);
    } else {
        print_report(rep);
    }
    // malformed events: named on stderr, and the run is partial (exit 1)
    if (tb_rt_print_drops(&m.rt, stderr, "tracebook map")) rc = 1;
    if (json_array_size(json_object_get(rep, "partial_parses"))) rc = 1;  // the static side may miss calls
    json_decref(rep);
    tb_map_close(&m);
    tb_positional_free(&pos);
    return rc;
}
