// test_query.c — `tracebook def | callers | callees | chain` on a hand-built index of the
// mini program (fixtures/map/), then end to end on this project's own index when
// `tracebook index` works here.
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "chain_output.h"
#include "graph.h"
#include "index_query.h"
#include "tb_shell.h"
#include "tb_test.h"
#include "trace/fixtures/map/mini_db.h"
#include "trace_cli.h"

#define DB TB_TEST_TMPDIR "/query-mini.sqlite"
#define DB_NO_TARGETS TB_TEST_TMPDIR "/query-mini-no-targets.sqlite"

TB_TEST(def_lists_both_static_definitions) {
    char *out;
    int rc = mini_run(tracebook_def_main, &out, "def", "helper", "--index", DB, NULL);
    TB_CHECK(rc == 0, "rc %d: %s", rc, out);
    TB_CHECK(mini_count_lines(out, "helper ") == 2, "two definitions expected:\n%s", out);
    TB_CHECK(tb_has(out, "a.c:2") && tb_has(out, "b.c:2"), "both files:\n%s", out);
    TB_CHECK(mini_count_lines(out, "static definition") == 2, "both static:\n%s", out);
    TB_CHECK(tb_has(out, "a.c@F@helper") && tb_has(out, "b.c@F@helper"), "USRs:\n%s", out);
    free(out);
    rc = mini_run(tracebook_def_main, &out, "def", "log_line", "--index", DB, NULL);
    TB_CHECK(rc == 0 && tb_has(out, "main.c:8") && tb_has(out, "tool.c:4") && tb_has(out, "external definition"),
             "log_line in both binaries:\n%s", out);
    TB_CHECK(tb_has(out, "[app]") && tb_has(out, "[tool]"), "labelled by binary:\n%s", out);
    free(out);
    rc = mini_run(tracebook_def_main, &out, "def", "tool.c:log_line", "--index", DB, NULL);
    TB_CHECK(rc == 0 && mini_count_lines(out, "log_line") == 1 && tb_has(out, "tool.c:4"), "FILE:NAME:\n%s", out);
    free(out);
}

TB_TEST(def_declaration_only_and_unknown_symbol) {
    char *out;
    int rc = mini_run(tracebook_def_main, &out, "def", "ncclAllReduce", "--index", DB, NULL);
    TB_CHECK(rc == 0 && tb_has(out, "declaration"), "a declaration is listed when nothing defines it:\n%s", out);
    free(out);
    rc = mini_run(tracebook_def_main, &out, "def", "no_such_function", "--index", DB, NULL);
    TB_CHECK(rc == 1, "unknown symbol: exit 1, got %d", rc);
    TB_CHECK(tb_has(out, "no function 'no_such_function'"), "message names it:\n%s", out);
    free(out);
}

TB_TEST(missing_index_is_an_error_naming_it) {
    char *out;
    int rc = mini_run(tracebook_def_main, &out, "def", "main", "--index", TB_TEST_TMPDIR "/nope.sqlite", NULL);
    TB_CHECK(rc == 1 && tb_has(out, TB_TEST_TMPDIR "/nope.sqlite: cannot open index: No such file or directory"),
             "rc %d:\n%s", rc, out);
    free(out);
    // a directory: named as one (SQLite itself says "disk I/O error")
    rc = mini_run(tracebook_def_main, &out, "def", "main", "--index", TB_TEST_TMPDIR, NULL);
    TB_CHECK(rc == 1 && tb_has(out, TB_TEST_TMPDIR ": is a directory, not an index file"), "rc %d:\n%s", rc, out);
    free(out);
    rc = mini_run(tracebook_chain_main, &out, "chain", "--from", "main", NULL);
    TB_CHECK(rc == 2 && tb_has(out, "usage"), "chain without --to is a usage error, rc %d:\n%s", rc, out);
    free(out);
}

TB_TEST(callers_include_calls_through_fields) {
    char *out;
    int rc = mini_run(tracebook_callers_main, &out, "callers", "mlp_forward", "--index", DB, NULL);
    mini_loc l = mini_find("train.c", "spec.mlp(layer)", 1);
    char site[64];
    snprintf(site, sizeof site, "train.c:%d:%d", l.line, l.col);
    TB_CHECK(rc == 0 && tb_has(out, "layer_forward") && tb_has(out, site) && tb_has(out, "via mini_spec.mlp"),
             "the spec's field call is a caller (%s):\n%s", site, out);
    free(out);
    rc = mini_run(tracebook_callers_main, &out, "callers", "local_all_reduce", "--index", DB, NULL);
    TB_CHECK(rc == 0 && tb_has(out, "all_reduce") && tb_has(out, "via mini_backend.all_reduce"),
             "a backend function's callers are the calls through its field:\n%s", out);
    free(out);
    rc = mini_run(tracebook_callers_main, &out, "callers", "all_reduce", "--index", DB, NULL);
    TB_CHECK(rc == 0 && tb_has(out, "reduce_from_tp") && tb_has(out, "optimizer_step") &&
                 mini_count_lines(out, "train.c:") == 2,
             "one line per call site:\n%s", out);
    free(out);
    rc = mini_run(tracebook_callers_main, &out, "callers", "mini_backend.all_reduce", "--index", DB, NULL);
    l = mini_find("comm.c", "backend->all_reduce(n)", 1);
    snprintf(site, sizeof site, "comm.c:%d:%d", l.line, l.col);
    TB_CHECK(rc == 0 && tb_has(out, "calls through mini_backend.all_reduce (assigned: local_all_reduce (comm.c:") &&
                 mini_count_lines(out, site) == 1,
             "callers of a field (%s):\n%s", site, out);
    free(out);
    rc = mini_run(tracebook_callers_main, &out, "callers", "rank_main", "--index", DB, NULL);
    TB_CHECK(rc == 0 && tb_has(out, "main") && tb_has(out, "passed to run_ranks"),
             "a function passed as an argument is called back by whoever receives it:\n%s", out);
    free(out);
}

TB_TEST(callees_list_each_call_site) {
    char *out;
    int rc = mini_run(tracebook_callees_main, &out, "callees", "all_reduce", "--index", DB, NULL);
    TB_CHECK(rc == 0, "rc %d:\n%s", rc, out);
    TB_CHECK(tb_has(out, "begin") && tb_has(out, "end") && tb_has(out, "via mini_backend.all_reduce"), "%s", out);
    TB_CHECK(tb_has(out, "local_all_reduce (comm.c:") && tb_has(out, "nccl_all_reduce (comm.c:"),
             "a field call resolves to every assigned function:\n%s", out);
    free(out);
}

TB_TEST(chain_shortest_first_with_hops_and_bounded) {
    char *out;
    int rc = mini_run(tracebook_chain_main, &out, "chain", "--from", "app", "--to", "all_reduce", "--index", DB, NULL);
    TB_CHECK(rc == 0, "rc %d:\n%s", rc, out);
    TB_CHECK(tb_has(out, "[app] chains from main (main.c:11) to all_reduce: 2"), "two chains:\n%s", out);
    char *c1 = tb_chain_n(out, 1), *c2 = tb_chain_n(out, 2);
    TB_CHECK(tb_has(c1, "#1 (4 calls)") && tb_has(c1, "optimizer_step (train.c:") && !tb_has(c1, "layer_forward"),
             "shortest first, through the optimizer:\n%s", c1);
    mini_loc l = mini_find("main.c", "run_ranks(rank_main)", 1);
    char hop[128];
    snprintf(hop, sizeof hop, "main (main.c:%d, passes rank_main to run_ranks)", l.line);
    TB_CHECK(tb_has(c1, hop), "first hop '%s':\n%s", hop, c1);
    TB_CHECK(tb_has(c2, "#2 (6 calls)") && tb_has(c2, "layer_forward (train.c:") && tb_has(c2, "via mini_spec.mlp") &&
                 tb_has(c2, "mlp_forward") && tb_has(c2, "reduce_from_tp"),
             "then the longer chain through the spec's field:\n%s", c2);
    free(c1);
    free(c2);
    free(out);

    rc = mini_run(tracebook_chain_main, &out, "chain", "--from", "app", "--to", "all_reduce", "--top", "1", "--index",
                  DB, NULL);
    TB_CHECK(rc == 0 && tb_has(out, "#1") && !tb_has(out, "#2"), "--top 1 bounds it:\n%s", out);
    free(out);
    rc = mini_run(tracebook_chain_main, &out, "chain", "--from", "app", "--to", "all_reduce", "--max-depth", "3",
                  "--index", DB, NULL);
    TB_CHECK(rc == 1 && tb_has(out, "none within 3 calls"), "--max-depth bounds it, rc %d:\n%s", rc, out);
    free(out);
    rc = mini_run(tracebook_chain_main, &out, "chain", "--from", "app", "--to", "local_all_reduce", "--index", DB,
                  NULL);
    char via[128], local[128];
    snprintf(via, sizeof via, "all_reduce (comm.c:%d, via mini_backend.all_reduce)",
             mini_find("comm.c", "backend->all_reduce(n)", 1).line);
    snprintf(local, sizeof local, "local_all_reduce (comm.c:%d)", mini_find("comm.c", "int local_all_reduce", 1).line);
    TB_CHECK(rc == 0 && tb_has(out, via) && tb_has(out, local), "down the backend's field (%s, %s):\n%s", via, local,
             out);
    free(out);
}

TB_TEST(chain_entry_forms) {
    char *out;
    const char *forms[] = {"app", "main.c:main", "mini/main.c:main", MINI_DIR "/main.c:main"};
    for (size_t i = 0; i < sizeof forms / sizeof *forms; i++) {
        int rc = mini_run(tracebook_chain_main, &out, "chain", "--from", forms[i], "--to", "mlp_forward", "--index",
                          DB, NULL);
        TB_CHECK(rc == 0 && tb_has(out, "[app] chains from main (main.c:11)") && !tb_has(out, "[tool]"),
                 "--from %s:\n%s", forms[i], out);
        free(out);
    }
    int rc = mini_run(tracebook_chain_main, &out, "chain", "--from", "train_step", "--to", "mlp_forward", "--index", DB,
                      NULL);
    TB_CHECK(rc == 0 && tb_has(out, "train_step (train.c:13)") && tb_has(out, "layer_forward"), "a function:\n%s", out);
    free(out);
    rc = mini_run(tracebook_chain_main, &out, "chain", "--from", "nosuch", "--to", "mlp_forward", "--index", DB, NULL);
    TB_CHECK(rc == 1 && tb_has(out, "entry 'nosuch'"), "unknown entry:\n%s", out);
    free(out);
}

TB_TEST(two_mains_give_labelled_chains_scoped_to_their_binary) {
    char *out;
    int rc = mini_run(tracebook_chain_main, &out, "chain", "--from", "main", "--to", "log_line", "--index", DB, NULL);
    TB_CHECK(rc == 0, "rc %d:\n%s", rc, out);
    const char *app = strstr(out, "[app]"), *tool = strstr(out, "[tool]");
    TB_REQUIRE(app && tool, "both binaries labelled:\n%s", out);
    char *app_part = strndup(app, app < tool ? (size_t)(tool - app) : strlen(app));
    char *tool_part = strndup(tool, tool < app ? (size_t)(app - tool) : strlen(tool));
    TB_CHECK(tb_has(app_part, "log_line (main.c:8)") && !tb_has(app_part, "tool.c"), "app's own log_line:\n%s",
             app_part);
    // tool's call names the first definition's USR (app's); the scope picks tool's own copy
    TB_CHECK(tb_has(tool_part, "log_line (tool.c:4)") && !tb_has(tool_part, "main.c"), "tool's own log_line:\n%s",
             tool_part);
    free(app_part);
    free(tool_part);
    free(out);
    rc = mini_run(tracebook_chain_main, &out, "chain", "--from", "tool", "--to", "all_reduce", "--index", DB, NULL);
    TB_CHECK(rc == 1 && tb_has(out, "[tool]") && tb_has(out, "none"), "tool does not link the app's functions:\n%s",
             out);
    free(out);
}

TB_TEST(without_targets_mains_are_labelled_by_file) {
    char *out;
    int rc = mini_run(tracebook_chain_main, &out, "chain", "--from", "main", "--to", "log_line", "--index",
                      DB_NO_TARGETS, NULL);
    TB_CHECK(rc == 0 && tb_has(out, "[main.c]") && tb_has(out, "[tool.c]"), "labels:\n%s", out);
    free(out);
}

TB_TEST(graph_api_lookup_and_scope) {
    tb_graph *g;
    tb_error err;
    TB_REQUIRE(tb_graph_open(&g, DB, &err) == 0, "%s", err.msg);
    int *fns, n = tb_graph_lookup(g, "helper", &fns);
    TB_CHECK(n == 2, "two helpers, got %d", n);
    free(fns);
    int app = tb_graph_target_by_name(g, "app"), tool = tb_graph_target_by_name(g, "tool");
    TB_REQUIRE(app >= 0 && tool >= 0, "targets");
    n = tb_graph_lookup(g, "tool.c:log_line", &fns);
    TB_CHECK(n == 1 && tb_graph_in_scope(g, tool, fns[0]) && !tb_graph_in_scope(g, app, fns[0]),
             "tool's log_line is in tool only");
    free(fns);
    TB_CHECK(!strcmp(g->root, MINI_DIR), "root from meta source_dir: %s", g->root);
    tb_graph_free(g);
}

// --- end to end on this project -------------------------------------------------------

#define E2E_INDEX TB_TEST_TMPDIR "/query-project.sqlite"

TB_TEST(project_chain_from_pretrain_gpt_to_the_local_backend) {
    TB_REQUIRE(tb_run(NULL, NULL,
                      TB_BIN_DIR "/tracebook index --compdb " TB_BIN_DIR "/../compile_commands.json --output " E2E_INDEX
                                 " --quiet > " TB_TEST_TMPDIR "/query-index.log 2>&1") == 0,
               "`tracebook index` failed on the project (see %s/query-index.log)", TB_TEST_TMPDIR);
    char *out;
    int rc = mini_run(tracebook_chain_main, &out, "chain", "--from", "pretrain_gpt", "--to", "local_all_reduce",
                      "--index", E2E_INDEX, NULL);
    TB_CHECK(rc == 0 && tb_has(out, "[pretrain_gpt] chains from main (engine/pretrain_gpt.c:"), "rc %d:\n%s", rc, out);
    char *c1 = tb_chain_n(out, 1);
    TB_CHECK(tb_has(c1, "via tb_comm_backend.all_reduce") &&
                 tb_has(c1, "local_all_reduce (engine/comm/local_backend.c:") && tb_has(c1, "rank_main"),
             "through the rank callback and the backend's field:\n%s", c1);
    free(c1);
    free(out);
    // the tensor-parallel all-reduce of the MLP: among the chains to the backend's call, one
    // passes through the MLP's row-parallel linear
    rc = mini_run(tracebook_chain_main, &out, "chain", "--from", "pretrain_gpt", "--to", "local_all_reduce", "--top",
                  "50", "--index", E2E_INDEX, NULL);
    const char *mlp = out ? strstr(out, "→ mlp_forward (engine/transformer/mlp.c:") : NULL;
    const char *row = mlp ? strstr(mlp, "\n") : NULL;
    const char *next_hop = "  → row_parallel_linear_forward (engine/tensor_parallel/layers.c:";
    TB_CHECK(rc == 0 && row && !strncmp(row + 1, next_hop, strlen(next_hop)),
             "a chain main → ... → mlp_forward → row_parallel_linear_forward → ... → local_all_reduce:\n%s", out);
    free(out);
    rc = mini_run(tracebook_chain_main, &out, "chain", "--from", "engine/pretrain_gpt.c:main", "--to",
                  "mlp_forward", "--index", E2E_INDEX, NULL);
    TB_CHECK(rc == 0 && tb_has(out, "transformer_layer_forward") &&
                 tb_has(out, "mlp_forward (engine/transformer/mlp.c:"),
             "FILE:FUNCTION entry:\n%s", out);
    free(out);
    rc = mini_run(tracebook_callers_main, &out, "callers", "local_all_reduce", "--index", E2E_INDEX, NULL);
    TB_CHECK(rc == 0 && tb_has(out, "tb_all_reduce") && tb_has(out, "engine/comm/comm.c:") &&
                 tb_has(out, "via tb_comm_backend.all_reduce"),
             "%s", out);
    free(out);
    rc = mini_run(tracebook_def_main, &out, "def", "main", "--index", E2E_INDEX, NULL);
    TB_CHECK(rc == 0 && tb_has(out, "engine/pretrain_gpt.c:") && tb_has(out, "[pretrain_gpt]") &&
                 tb_has(out, "[tracebook]"),
             "every binary's main:\n%s", out);
    free(out);
}

// The MLP's tensor-parallel all-reduce down to the NCCL call, a function of nccl.h that
// libnccl defines (after project_chain_from_pretrain_gpt_to_the_local_backend: its index).
TB_TEST(project_chain_from_main_to_ncclAllReduce_through_the_row_parallel_linear) {
    if (!tb_project_nccl_built()) {
        printf("  skipped: engine/comm/nccl_backend.c is compiled without NCCL in this build (no -DTB_HAVE_NCCL=1 in "
               "compile_commands.json), so no ncclAllReduce is called\n");
        return;
    }
    char *out;
    int rc = mini_run(tracebook_def_main, &out, "def", "ncclAllReduce", "--index", E2E_INDEX, NULL);
    TB_CHECK(rc == 0 && tb_has(out, "nccl.h:") && tb_has(out, "external declaration") && tb_has(out, "libnccl") &&
                 tb_has(out, "pretrain_gpt"),
             "where it is declared and which library defines it:\n%s", out);
    free(out);
    char call[128];
    snprintf(call, sizeof call, "→ nccl_all_reduce (engine/comm/nccl_backend.c:%d)\n",
             tb_line_of(TB_SOURCE_DIR "/engine/comm/nccl_backend.c", "ncclAllReduce(buf, buf, count"));
    rc = mini_run(tracebook_chain_main, &out, "chain", "--from", "main", "--to", "ncclAllReduce", "--index", E2E_INDEX,
                  NULL);
    const char *sec = out ? strstr(out, "[pretrain_gpt] chains from main (engine/pretrain_gpt.c:") : NULL;
    char *c1 = tb_chain_n(sec ? sec : "", 1);
    TB_CHECK(rc == 0 && tb_has(c1, call) && tb_has(c1, "→ ncclAllReduce (declared at "),
             "pretrain_gpt's shortest chain ends at the NCCL call (%s):\n%s", call, out);
    free(c1);
    free(out);
    rc = mini_run(tracebook_chain_main, &out, "chain", "--from", "main", "--via", "row_parallel_linear_forward", "--to",
                  "ncclAllReduce", "--index", E2E_INDEX, NULL);
    sec = out ? strstr(out, "[pretrain_gpt] chains from main (engine/pretrain_gpt.c:") : NULL;
    c1 = tb_chain_n(sec ? sec : "", 1);
    const char *row = strstr(c1, "→ row_parallel_linear_forward (engine/tensor_parallel/layers.c:");
    const char *nccl = row ? strstr(row, call) : NULL;
    TB_CHECK(rc == 0 && nccl && tb_has(nccl, "→ ncclAllReduce (declared at ") && tb_has(nccl, "nccl.h:") &&
                 tb_has(nccl, "libnccl"),
             "main → ... → row_parallel_linear_forward → ... → %s → ncclAllReduce:\n%s", call, out);
    free(c1);
    // one of them is the MLP's (fc2), the other the attention's output projection
    int mlp = 0;
    for (int i = 1; i <= 4 && !mlp; i++) {
        char *c = tb_chain_n(sec ? sec : "", i);
        const char *m = strstr(c, "→ mlp_forward (engine/transformer/mlp.c:");
        mlp = m && strstr(m, "\n  → row_parallel_linear_forward (") && strstr(m, call);
        free(c);
    }
    TB_CHECK(mlp, "a chain through mlp_forward → row_parallel_linear_forward:\n%s", out);
    free(out);
}

// --json: one document each, its facts those the text prints.
TB_TEST(json_answers_carry_what_the_text_says) {
    char *out, *text;
    int rc = mini_run(tracebook_def_main, &out, "def", "helper", "--json", "--index", DB, NULL);
    json_t *doc = json_loads(out, 0, NULL);
    json_t *fns = json_object_get(doc, "functions");
    TB_CHECK(rc == 0 && doc && json_array_size(fns) == 2 && json_is_array(json_object_get(doc, "partial_parse")),
             "def: two functions:\n%s", out);
    mini_run(tracebook_def_main, &text, "def", "helper", "--index", DB, NULL);
    size_t i;
    json_t *f;
    json_array_foreach(fns, i, f) {
        TB_CHECK(!strcmp(json_string_value(json_object_get(f, "linkage")), "static") &&
                     json_is_true(json_object_get(f, "definition")) &&
                     tb_has(text, json_string_value(json_object_get(f, "location"))) &&
                     tb_has(text, json_string_value(json_object_get(f, "usr"))),
                 "def %zu as the text says:\n%s", i, text);
    }
    json_decref(doc);
    free(out), free(text);

    rc = mini_run(tracebook_callers_main, &out, "callers", "all_reduce", "--json", "--index", DB, NULL);
    doc = json_loads(out, 0, NULL);
    json_t *callers = json_object_get(json_array_get(json_object_get(doc, "functions"), 0), "callers");
    TB_CHECK(rc == 0 && json_array_size(callers) == 2, "callers: the two call sites:\n%s", out);
    mini_run(tracebook_callers_main, &text, "callers", "all_reduce", "--index", DB, NULL);
    json_array_foreach(callers, i, f) {
        char site[256];
        snprintf(site, sizeof site, "%s:%lld:%lld", json_string_value(json_object_get(f, "file")),
                 (long long)json_integer_value(json_object_get(f, "line")), (long long)json_integer_value(json_object_get(f, "col")));
        TB_CHECK(tb_has(text, json_string_value(json_object_get(f, "caller"))) && tb_has(text, site),
                 "caller %s at %s in the text:\n%s", json_string_value(json_object_get(f, "caller")), site, text);
    }
    json_decref(doc);
    free(out), free(text);

    rc = mini_run(tracebook_callees_main, &out, "callees", "all_reduce", "--json", "--index", DB, NULL);
    doc = json_loads(out, 0, NULL);
    json_t *calls = json_object_get(json_array_get(json_object_get(doc, "functions"), 0), "calls");
    int field_targets = 0;
    json_array_foreach(calls, i, f) {
        const char *via = json_string_value(json_object_get(f, "via"));
        if (via && !strcmp(via, "mini_backend.all_reduce")) field_targets = (int)json_array_size(json_object_get(f, "targets"));
    }
    TB_CHECK(rc == 0 && json_array_size(calls) >= 3 && field_targets == 2,
             "callees: the field call resolves to both backends:\n%s", out);
    json_decref(doc);
    free(out);

    rc = mini_run(tracebook_chain_main, &out, "chain", "--from", "app", "--to", "all_reduce", "--json", "--index", DB,
                  NULL);
    doc = json_loads(out, 0, NULL);
    json_t *entry = json_array_get(json_object_get(doc, "entries"), 0), *chains = json_object_get(entry, "chains");
    TB_CHECK(rc == 0 && !strcmp(json_string_value(json_object_get(entry, "binary")), "app") &&
                 json_array_size(chains) == 2 &&
                 json_integer_value(json_object_get(json_array_get(chains, 0), "calls")) == 4 &&
                 json_integer_value(json_object_get(json_array_get(chains, 1), "calls")) == 6,
             "chain: two chains of 4 and 6 calls, as the text's #1 and #2:\n%s", out);
    mini_run(tracebook_chain_main, &text, "chain", "--from", "app", "--to", "all_reduce", "--index", DB, NULL);
    json_array_foreach(json_object_get(json_array_get(chains, 1), "hops"), i, f)
        TB_CHECK(tb_has(text, json_string_value(f)), "hop '%s' in the text", json_string_value(f));
    json_decref(doc);
    free(out), free(text);
}

int main(void) {
    mini_db_create(DB, 1);
    mini_db_create(DB_NO_TARGETS, 0);
    TB_RUN(def_lists_both_static_definitions);
    TB_RUN(def_declaration_only_and_unknown_symbol);
    TB_RUN(missing_index_is_an_error_naming_it);
    TB_RUN(callers_include_calls_through_fields);
    TB_RUN(callees_list_each_call_site);
    TB_RUN(chain_shortest_first_with_hops_and_bounded);
    TB_RUN(json_answers_carry_what_the_text_says);
    TB_RUN(chain_entry_forms);
    TB_RUN(two_mains_give_labelled_chains_scoped_to_their_binary);
    TB_RUN(without_targets_mains_are_labelled_by_file);
    TB_RUN(graph_api_lookup_and_scope);
    TB_RUN(project_chain_from_pretrain_gpt_to_the_local_backend);
    TB_RUN(project_chain_from_main_to_ncclAllReduce_through_the_row_parallel_linear);
    return tb_test_summary();
}
