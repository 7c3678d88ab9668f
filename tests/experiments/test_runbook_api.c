// tracebook run: what the runbook API checks of the values it is given, and its error paths —
// every refusal at the runbook's file:line naming the call, the key and the value; nothing
// dropped or replaced by a default silently. Dry runs where no engine run is needed.
#include <jansson.h>
#include <string.h>

#include "tb_run_dir.h"
#include "tb_shell.h"
#include "tb_test.h"

#define TRACEBOOK TB_BIN_DIR "/tracebook"
#define TINY "num_layers = 2, hidden_size = 32, num_attention_heads = 2, seq_length = 16, vocab_size = 64"
#define ART TB_TEST_TMPDIR "/rbapi_artifacts"
#define RUNBOOK TB_TEST_TMPDIR "/rbapi.lua"
// line 1 of every runbook below: the experiment the body (from line 2) uses
#define HEADER "local exp = tb.experiment{ name = 'api', version = 1, question = 'q' }\n"

static tb_output sh;  // what the last command printed

// Runs RUNBOOK (HEADER then body) with extra flags; the exit status.
static int run_body(const char *body, const char *flags) {
    char text[4096];
    snprintf(text, sizeof text, HEADER "%s\n", body);
    tb_write_text(RUNBOOK, text);
    return tb_run(&sh, TB_SOURCE_DIR, "rm -rf %s && %s run %s --artifacts %s %s", ART, TRACEBOOK, RUNBOOK, ART, flags);
}

// The dry run of body fails with "rbapi.lua:<line>: " followed (on that line) by needle.
static void expect_refused_at(const char *body, int line, const char *needle) {
    int rc = run_body(body, "--dry-run");
    char at[64];
    snprintf(at, sizeof at, "rbapi.lua:%d: ", line);
    const char *hit = strstr(sh.err, at);
    const char *eol = hit ? strchr(hit, '\n') : NULL;
    const char *found = hit ? strstr(hit, needle) : NULL;
    TB_CHECK(rc == 1 && found && (!eol || found < eol), "%s\n  wanted exit 1 and '%s%s', got exit %d:\n%s", body, at,
             needle, rc, sh.err);
    TB_CHECK(!strstr(sh.err, "invalid option"), "a bad format in the message:\n%s", sh.err);
}

static void expect_refused(const char *body, const char *needle) { expect_refused_at(body, 2, needle); }

TB_TEST(non_finite_config_numbers_are_refused_not_dropped) {
    // NaN and infinity have no JSON form: the config lost the key and the run used the default lr
    expect_refused("exp:run{ " TINY ", lr = 0/0 }", "exp:run: config key 'lr' must be a finite number (got nan)");
    expect_refused("exp:run{ " TINY ", lr = math.huge }", "config key 'lr' must be a finite number (got inf)");
    expect_refused("exp:run{ " TINY ", lr = -math.huge }", "config key 'lr' must be a finite number (got -inf)");
}

// A config table read through a metatable was run as the default model (the host reads tables
// raw): refused, naming it; a self-referencing args table is refused naming the path (it gave
// "error object is nil": the check overflowed Lua's stack).
TB_TEST(metatables_and_self_referencing_tables_are_refused_by_name) {
    expect_refused("exp:run(setmetatable({}, { __index = { " TINY " } }))",
                   "exp:run: its config has a metatable: its fields are read as they are stored, so __index");
    expect_refused("local t = { figure = 'x' }; t.me = t; exp:claim{ id = 'c', parser = 'loss_at_step', runs = {}, "
                   "args = t, text = 't' }",
                   "exp:claim 'c': args.me.me.me.me.me.me.me.me.me.me.me.me.me.me.me.me.me is nested more than 16");
    expect_refused("exp:claim{ id = 'c', parser = 'loss_at_step', runs = {}, args = { a = setmetatable({}, {}) }, "
                   "text = 't' }",
                   "exp:claim 'c': args.a has a metatable");
}

TB_TEST(experiment_seed_must_be_an_integer_not_replaced_by_the_default) {
    const char *bad[][2] = {{"'abc'", "(got 'abc')"}, {"{}", "(got an empty table)"}, {"1.5", "(got 1.5)"},
                            {"-1", "(got -1)"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char body[256];
        snprintf(body, sizeof body, "tb.experiment{ name = 's', version = 1, question = 'q', seed = %s }", bad[i][0]);
        char needle[128];
        snprintf(needle, sizeof needle, "tb.experiment 's': seed must be an integer >= 0 %s", bad[i][1]);
        expect_refused(body, needle);
    }
    // an integer (and a float with an integral value) is the root seed
    TB_CHECK(run_body("local e = tb.experiment{ name = 's', version = 1, question = 'q', seed = 7.0 }\n"
                      "tb.assert(e.seed == 7 and math.type(e.seed) == 'integer', 'seed 7')",
                      "--dry-run") == 0,
             "seed = 7.0:\n%s", sh.err);
}

TB_TEST(duplicate_claim_ids_in_one_version_are_refused_naming_both_lines) {
    expect_refused_at("local r = exp:run{ " TINY " }\n"
                      "exp:claim{ id = 'tps', parser = 'tokens_per_s', runs = r, text = 'a' }\n"
                      "exp:claim{ id = 'other', parser = 'tokens_per_s', runs = r, text = 'b' }\n"
                      "exp:claim{ id = 'tps', parser = 'step_ms', runs = r, text = 'c' }",
                      5, "exp:claim 'tps': a claim with this id was already made in ");
    TB_CHECK(strstr(sh.err, "/api/v1 at ") && strstr(sh.err, "rbapi.lua:3 (this one is at ") &&
                 strstr(sh.err, "rbapi.lua:5): claim ids are unique within an experiment version"),
             "names both lines:\n%s", sh.err);
    // the same id in another experiment version is another claim
    TB_CHECK(run_body("local r = exp:run{ " TINY " }\n"
                      "exp:claim{ id = 'tps', parser = 'tokens_per_s', runs = r, text = 'a' }\n"
                      "local v2 = tb.experiment{ name = 'api', version = 2, question = 'q' }\n"
                      "v2:claim{ id = 'tps', parser = 'tokens_per_s', runs = v2:run{ " TINY " }, text = 'a' }",
                      "--dry-run") == 0,
             "one id in two versions:\n%s", sh.err);
}

// The empty axis once freed its key before formatting it into the message (a heap use after
// free under ASan); each axis's values are checked as exp:run checks them, at the sweep's line.
TB_TEST(sweep_axes_are_non_empty_lists_of_config_values_checked_at_the_sweep) {
    expect_refused("tb.sweep{ a = {} }", "tb.sweep: 'a' must be a non-empty list of values (got an empty table)");
    expect_refused("tb.sweep{ num_layers = 3 }", "tb.sweep: 'num_layers' must be a non-empty list of values (got 3)");
    expect_refused("tb.sweep{ num_layers = {1, 1.5} }",
                   "tb.sweep num_layers[2]: config key 'num_layers' must be an integer (got 1.5)");
    expect_refused("tb.sweep{ lr = {0.1, 0/0} }", "tb.sweep lr[2]: config key 'lr' must be a finite number (got nan)");
    expect_refused("tb.sweep{ num_layerz = {1} }", "unknown config key 'num_layerz' (did you mean 'num_layers'?");
    TB_CHECK(run_body("local p = tb.sweep{ num_layers = {1, 2}, lr = {0.1, 0.2, 0.3} }\n"
                      "tb.assert(#p == 6 and p[6].num_layers == 2 and p[6].lr == 0.3, 'the product')",
                      "--dry-run") == 0,
             "a good sweep:\n%s", sh.err);
}

TB_TEST(claim_value_mismatch_reports_both_numbers) {
    // lua_pushfstring has no %.17g: the message was "invalid option '%.' to 'lua_pushfstring'"
    int rc = run_body("local r = exp:run{ " TINY ", train_iters = 2 }\n"
                      "exp:claim{ id = 'tps', parser = 'tokens_per_s', runs = r, text = 't', value = -1.5 }",
                      "");
    TB_CHECK(rc == 1 && strstr(sh.err, "rbapi.lua:3: exp:claim 'tps': the runs give ") &&
                 strstr(sh.err, ", the runbook claims -1.5 (relative tolerance 1e-09)"),
             "exit %d:\n%s", rc, sh.err);
    TB_CHECK(!strstr(sh.err, "invalid option"), "%s", sh.err);
}

// After a rerun with --force, a plain run resumes each repetition at its latest record (the
// --force one), as prove's selection rule takes it: not whichever the directory lists first.
TB_TEST(a_resume_after_force_takes_the_latest_record) {
    const char *body = "print('first ' .. exp:run{ " TINY ", train_iters = 2 }.runs[1].run_id)";
    TB_REQUIRE(run_body(body, "") == 0, "first run:\n%s", sh.err);
    char forced[64] = "";
    for (int round = 0; round < 2; round++) {
        int rc = tb_run(&sh, TB_SOURCE_DIR, "%s run %s --artifacts %s %s", TRACEBOOK, RUNBOOK, ART,
                        round == 0 ? "--force" : "");
        const char *at = strstr(sh.out, "first ");
        TB_REQUIRE(rc == 0 && at, "round %d:\n%s%s", round, sh.out, sh.err);
        char id[64];
        sscanf(at + 6, "%63s", id);
        if (round == 0) snprintf(forced, sizeof forced, "%s", id);
        else TB_CHECK(!strcmp(id, forced) && strstr(sh.out, "already finished as"),
                      "resumed %s, the --force run is %s:\n%s", id, forced, sh.out);
    }
}

// A dry run applies the engine's own rules to each exp:run's command line: what pretrain_gpt
// would refuse is refused at the line, before any run.
TB_TEST(a_dry_run_refuses_what_the_engine_would_refuse) {
    expect_refused("exp:run{ " TINY ", hidden_dropout = 0.1 }",
                   "exp:run: pretrain_gpt would refuse this config: hidden_dropout 0.1: dropout is not supported yet");
    expect_refused("exp:run{ " TINY ", seed = -1 }", "seed (-1) must be non-negative");
    expect_refused("exp:run{ " TINY ", global_batch_size = 3, micro_batch_size = 2 }", "exp:run: pretrain_gpt would "
                                                                                          "refuse this config: ");
}

// A claim over the same run listed twice would count it as two repetitions: refused at the
// claim, naming the run (prove refuses such a claims.json too: test_prove).
TB_TEST(claim_refuses_a_run_listed_twice) {
    int rc = run_body("local r = exp:run{ " TINY ", train_iters = 2 }\n"
                      "exp:claim{ id = 'twice', parser = 'loss_at_step', runs = { r, r }, text = 't' }",
                      "");
    TB_CHECK(rc == 1 && strstr(sh.err, "rbapi.lua:3: exp:claim 'twice': the run ") &&
                 strstr(sh.err, " is listed twice (a repetition is a separate run, counted once)"),
             "exit %d:\n%s", rc, sh.err);
    // the same within one part of a composite claim (its args' records)
    rc = run_body("local r = exp:run{ " TINY ", train_iters = 2 }\n"
                  "local id = r.runs[1].run_id\n"
                  "exp:claim{ id = 'part', parser = 'ratio', runs = r, text = 't', args = {\n"
                  "  numerator = { parser = 'loss_at_step', records = { id, id } },\n"
                  "  denominator = { parser = 'loss_at_step', records = { id } } } }",
                  "");
    TB_CHECK(rc == 1 && strstr(sh.err, "exp:claim 'part': run listed twice: ") &&
                 strstr(sh.err, "(records 1 and 2 of one part"),
             "a part's records: exit %d:\n%s", rc, sh.err);
}

// The Lua a runbook gets writes no file of its own: no io, no os.execute/remove/rename, no C
// modules, no dofile/loadfile, load for text only (a claims.json or ledger line written by the
// runbook itself would go around exp:claim and the anchors).
TB_TEST(runbooks_get_no_io_no_processes_no_c_modules) {
    expect_refused("io.open('x', 'w')", "attempt to index a nil value (global 'io')");
    expect_refused("os.execute('true')", "attempt to call a nil value (field 'execute')");
    expect_refused("os.remove('x')", "attempt to call a nil value (field 'remove')");
    expect_refused("os.rename('x', 'y')", "attempt to call a nil value (field 'rename')");
    expect_refused("package.loadlib('x', 'y')", "attempt to call a nil value (field 'loadlib')");
    expect_refused("debug.sethook()", "attempt to index a nil value (global 'debug')");
    expect_refused("dofile('x')", "attempt to call a nil value (global 'dofile')");
    expect_refused("assert(load(string.dump(function() end)))", "attempt to load a binary chunk (mode is 't')");
    expect_refused("load('return 1', 'c', 'bt')", "load: runbooks load text chunks only (mode 't'; got 'bt')");
    expect_refused("tb.assert(#package.searchers == 2, 'C searchers'); require('no_such_module')",
                   "module 'no_such_module' not found");
    // a precompiled runbook or module is bytecode, which Lua does not verify: refused as text-only
    static const char binary[] = "\x1bLuaT\x00\x19\x93\r\n\x1a\n";
    tb_write_bytes(RUNBOOK, binary, sizeof binary - 1);
    int rc = tb_run(&sh, TB_SOURCE_DIR, "%s run %s --artifacts %s --dry-run", TRACEBOOK, RUNBOOK, ART);
    TB_CHECK(rc == 1 && strstr(sh.err, "attempt to load a binary chunk (mode is 't')"),
             "a binary runbook: exit %d:\n%s", rc, sh.err);
    tb_write_bytes(TB_TEST_TMPDIR "/rbapi_binmod.lua", binary, sizeof binary - 1);
    rc = run_body("package.path = '" TB_TEST_TMPDIR "/?.lua'; require('rbapi_binmod')", "--dry-run");
    TB_CHECK(rc == 1 && strstr(sh.err, "error loading module 'rbapi_binmod' from file ") &&
                 strstr(sh.err, "attempt to load a binary chunk (mode is 't')"),
             "a binary module: exit %d:\n%s", rc, sh.err);
    TB_CHECK(run_body("tb.assert(load('return math.pi')() == math.pi, 'a loaded chunk sees the globals')\n"
                      "tb.assert(load('return x', 'c', 't', { x = 3 })() == 3, 'an env given is its _ENV')",
                      "--dry-run") == 0,
             "load as stock load, text only:\n%s", sh.err);
    TB_CHECK(run_body("tb.assert(load('return 1 + 1')() == 2 and os.time() > 0 and os.clock() >= 0 and "
                      "type(os.getenv('HOME')) == 'string' and math.sqrt(4) == 2 and string.rep('a', 2) == 'aa', "
                      "'what a runbook uses')",
                      "--dry-run") == 0,
             "text load, the clock, the environment, math and string remain:\n%s", sh.err);
}

// claims.json changed since the last claim anchored it: the next claim refuses to extend it
// (its anchor would vouch for the change), naming the file and the anchor's verdict.
TB_TEST(claim_refuses_to_extend_a_claims_file_changed_since_its_anchor) {
    TB_REQUIRE(run_body("local r = exp:run{ " TINY ", train_iters = 2 }\n"
                        "exp:claim{ id = 'first', parser = 'loss_at_step', runs = r, text = 't' }",
                        "") == 0,
               "first claim:\n%s", sh.err);
    const char *path = ART "/api/v1/" TB_EXPERIMENT_CLAIMS;
    char *text = tb_slurp(path);
    char *at = text ? strstr(text, "\"first\"") : NULL;
    TB_REQUIRE(at, "claims.json written");
    memcpy(at, "\"forge\"", 7);  // the same length: the id edited in place
    tb_write_text(path, text);
    free(text);
    char body[1024];
    snprintf(body, sizeof body, HEADER "local r = exp:run{ " TINY ", train_iters = 2 }\n"
             "exp:claim{ id = 'second', parser = 'loss_at_step', runs = r, text = 't' }\n");
    tb_write_text(RUNBOOK, body);
    int rc = tb_run(&sh, TB_SOURCE_DIR, "%s run %s --artifacts %s", TRACEBOOK, RUNBOOK, ART);
    TB_CHECK(rc == 1 && strstr(sh.err, "rbapi.lua:3: exp:claim 'second': ") &&
                 strstr(sh.err, "/api/v1/claims.json is not as the last claim left it, so no claim extends it: "),
             "exit %d:\n%s", rc, sh.err);
    text = tb_slurp(path);
    TB_CHECK(text && strstr(text, "\"forge\"") && !strstr(text, "\"second\""), "the file left as it was");
    free(text);
}

// at_most bounds the derived number: claims.json keeps the bound (no value: prove re-derives
// the number), and a run whose number is above it fails at the claim's line.
TB_TEST(claim_at_most_stores_the_bound_and_refuses_a_number_above_it) {
    // two repetitions of one seed: the same losses, bit for bit
    int rc = run_body("local r = exp:run{ " TINY ", train_iters = 2, seed = 3, repeat_ = 2 }\n"
                      "local d = exp:claim{ id = 'same', parser = 'relative_difference', runs = r, at_most = 0,\n"
                      "  accept_oversubscribed = true,\n"
                      "  args = { a = { parser = 'loss_at_step', records = { r.runs[2].run_id } },\n"
                      "           b = { parser = 'loss_at_step', records = { r.runs[1].run_id } } }, text = 't' }\n"
                      "tb.assert(d == 0, 'the derived difference')",
                      "");
    TB_REQUIRE(rc == 0, "exit %d:\n%s\n%s", rc, sh.out, sh.err);
    TB_CHECK(strstr(sh.out, "claim same: t: 0 <= 0 (parser relative_difference, 2 runs)"), "%s", sh.out);
    json_t *doc = tb_load_json(ART "/api/v1/" TB_EXPERIMENT_CLAIMS);
    json_t *c = json_array_get(json_object_get(doc, "claims"), 0);
    TB_CHECK(c && json_is_number(json_object_get(c, "at_most")) && json_number_value(json_object_get(c, "at_most")) == 0 &&
                 !json_object_get(c, "value") && !json_object_get(c, "relative_tolerance"),
             "claims.json: at_most 0, no value, no relative_tolerance");
    TB_CHECK(json_is_true(json_object_get(c, "accept_oversubscribed")), "claims.json: accept_oversubscribed passed on");
    json_decref(doc);
    TB_CHECK(tb_run(&sh, TB_SOURCE_DIR, "%s prove same --artifacts %s", TRACEBOOK, ART) == 0 &&
                 strstr(sh.out, "derived 0 <= bound 0 (at_most)"),
             "prove:\n%s\n%s", sh.out, sh.err);
    // step 1's loss against step 2's: above a bound of 0
    rc = run_body("local r = exp:run{ " TINY ", train_iters = 2 }\n"
                  "exp:claim{ id = 'drop', parser = 'relative_difference', runs = r, at_most = 0,\n"
                  "  args = { a = { parser = 'loss_at_step', args = { step = 1 } },\n"
                  "           b = { parser = 'loss_at_step', args = { step = 2 } } }, text = 't' }",
                  "");
    TB_CHECK(rc == 1 && strstr(sh.err, "rbapi.lua:3: exp:claim 'drop': the runs give ") &&
                 strstr(sh.err, ", above the bound at_most = 0"),
             "exit %d:\n%s", rc, sh.err);
    // what at_most takes
    const char *cases[][2] = {
        {"exp:claim{ id = 'c', parser = 'tokens_per_s', runs = exp:run{ " TINY " }, text = 't', value = 1, at_most = 2 }",
         "exp:claim 'c': value = 1 and at_most = 2 exclude each other"},
        {"exp:claim{ id = 'c', parser = 'tokens_per_s', runs = exp:run{ " TINY " }, text = 't', at_most = -1 }",
         "exp:claim 'c': at_most must be a finite number >= 0 (got -1)"},
        {"exp:claim{ id = 'c', parser = 'tokens_per_s', runs = exp:run{ " TINY " }, text = 't', at_most = 0/0 }",
         "exp:claim 'c': at_most must be a finite number >= 0 (got nan)"},
        {"exp:claim{ id = 'c', parser = 'tokens_per_s', runs = exp:run{ " TINY " }, text = 't', at_most = math.huge }",
         "exp:claim 'c': at_most must be a finite number >= 0 (got inf)"},
        {"exp:claim{ id = 'c', parser = 'tokens_per_s', runs = exp:run{ " TINY " }, text = 't', at_most = '1' }",
         "exp:claim 'c': at_most must be a finite number >= 0 (got '1')"},
        {"exp:claim{ id = 'c', parser = 'tokens_per_s', runs = exp:run{ " TINY " }, text = 't', at_most = 1, "
         "relative_tolerance = 0 }",
         "exp:claim 'c': relative_tolerance applies to value, not to at_most = 1"},
        {"exp:claim{ id = 'c', parser = 'tokens_per_s', runs = exp:run{ " TINY " }, text = 't', value = 1, "
         "accept_oversubscribed = 'yes' }",
         "exp:claim 'c': accept_oversubscribed must be true or false (got a string)"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) expect_refused(cases[i][0], cases[i][1]);
}

TB_TEST(read_jsonl_parse_error_names_the_file_and_its_line) {
    // "%lld" is not lua_pushfstring's: the message was "invalid option '%l'"
    tb_write_text(TB_TEST_TMPDIR "/rbapi_bad.jsonl", "{\"a\": 1}\nnot json\n");
    expect_refused("tb.read_jsonl('" TB_TEST_TMPDIR "/rbapi_bad.jsonl')",
                   "tb.read_jsonl: " TB_TEST_TMPDIR "/rbapi_bad.jsonl:2: ");
}

TB_TEST(non_string_error_objects_report_the_runbook_line_and_the_object) {
    expect_refused_at("local x = 1\nerror({code = 42})", 3, "error object is a table: {code=42}");
    expect_refused("error(nil)", "error object is nil");
    expect_refused("error(42)", "error object is a number: 42");
    expect_refused("error({1, 'two', k = true})", "error object is a table: {1, \"two\", k=true}");
    // the experiment's record holds the same first line
    TB_CHECK(run_body("error({code = 42})", "") == 1, "%s", sh.err);
    json_t *e = tb_load_json(ART "/api/v1/" TB_EXPERIMENT_STATUS);
    const char *err = json_string_value(json_object_get(e, "error"));
    TB_CHECK(e && !strcmp(json_string_value(json_object_get(e, "status")), "failed") && err &&
                 !strcmp(err, RUNBOOK ":2: error object is a table: {code=42}"),
             "experiment.json error: %s", err ? err : "(none)");
    json_decref(e);
}

TB_TEST(os_exit_records_the_experiment_as_interrupted_and_exits_with_its_status) {
    // inside pcall, which must not catch it: os.exit ends the runbook whatever calls it
    int rc = run_body("print('before')\npcall(os.exit, 3)\nprint('after')", "");
    TB_CHECK(rc == 3 && strstr(sh.out, "before") && !strstr(sh.out, "after"), "exit %d:\n%s\n%s", rc, sh.out, sh.err);
    json_t *e = tb_load_json(ART "/api/v1/" TB_EXPERIMENT_STATUS);
    const char *err = json_string_value(json_object_get(e, "error"));
    TB_CHECK(e && !strcmp(json_string_value(json_object_get(e, "status")) ?: "", "interrupted") &&
                 json_integer_value(json_object_get(e, "exit_code")) == 3 && err &&
                 strstr(err, "rbapi.lua:3: os.exit(3)"),
             "experiment.json: status interrupted, exit_code 3, the line: %s", err ? err : "(no record)");
    json_decref(e);
    rc = run_body("os.exit(true)", "");
    e = tb_load_json(ART "/api/v1/" TB_EXPERIMENT_STATUS);
    TB_CHECK(rc == 0 && e && !strcmp(json_string_value(json_object_get(e, "status")) ?: "", "interrupted") &&
                 json_integer_value(json_object_get(e, "exit_code")) == 0,
             "os.exit(true): exit %d, %s", rc, sh.err);
    json_decref(e);
}

TB_TEST(api_tables_refuse_unknown_keys_listing_the_allowed) {
    expect_refused("tb.experiment{ name = 'k', version = 1, question = 'q', seeed = 1 }",
                   "tb.experiment: unknown key 'seeed' (it takes name, version, question, seed)");
    expect_refused("exp:claim{ id = 'c', parser = 'ratio', runs = exp:run{ " TINY " }, text = 't', valu = 1 }",
                   "exp:claim: unknown key 'valu' (it takes id, parser, runs, args, text, value, relative_tolerance, "
                   "at_most, accept_oversubscribed, timing_tolerance, min_window_s, min_steps, min_repetitions)");
    expect_refused("tb.experiment{ 'k', version = 1, question = 'q' }", "tb.experiment: a value without a name");
    expect_refused("exp:run{ " TINY ", num_layerz = 2 }",
                   "unknown config key 'num_layerz' (did you mean 'num_layers'?");
    expect_refused("exp:run{ " TINY ", launchr = 'mpirun' }",
                   "unknown config key 'launchr' (keys are pretrain_gpt's flags with underscores, see pretrain_gpt "
                   "--help, and repeat_, repetition_, rerun_contended_, launcher, processes, expect_failure, kill_after_step)");
    // a timing claim's sampling rule is refused by prove's own rule, naming the field and value
    expect_refused("exp:claim{ id = 'c', parser = 'tokens_per_s', runs = exp:run{ " TINY " }, text = 't', "
                   "timing_tolerance = 2 }",
                   "exp:claim 'c': timing_tolerance must be a number in [1e-06, 1] (got 2)");
    expect_refused("exp:claim{ id = 'c', parser = 'tokens_per_s', runs = exp:run{ " TINY " }, text = 't', "
                   "min_repetitions = 2.5 }",
                   "exp:claim 'c': min_repetitions must be an integer in [1, 1000] (got 2.5)");
    expect_refused("exp:claim{ id = 'c', parser = 'tokens_per_sec', runs = exp:run{ " TINY " }, text = 't' }",
                   "exp:claim 'c': unknown parser 'tokens_per_sec' (the parsers: tokens_per_s, step_ms, ");
}

TB_TEST(api_values_are_checked_for_type_integrality_and_range) {
    const char *cases[][2] = {
        {"exp:run{ " TINY ", train_iters = 1.5 }", "config key 'train_iters' must be an integer (got 1.5)"},
        {"exp:run{ " TINY ", train_iters = '3' }", "config key 'train_iters' must be an integer (got '3')"},
        {"exp:run{ " TINY ", train_iters = 1e12 }",
         "config key 'train_iters': '1000000000000' is out of range (-2147483648 to 2147483647)"},
        {"exp:run{ " TINY ", swiglu = 1 }", "config key 'swiglu' must be true or false (got 1)"},
        {"exp:run{ " TINY ", recompute_granularity = 'fulll' }", "'fulll' is not one of none|selective|full"},
        {"exp:run{ " TINY ", recompute_granularity = 1 }", "must be none|selective|full (got 1)"},
        {"exp:run{ " TINY ", repeat_ = 0 }", "exp:run: repeat_ must be an integer >= 1 (got 0)"},
        {"exp:run{ " TINY ", repeat_ = 1.5 }", "exp:run: repeat_ must be an integer >= 1 (got 1.5)"},
        {"exp:run{ " TINY ", launcher = 'slurm' }", "exp:run: launcher must be 'threads' or 'mpirun' (got 'slurm')"},
        {"exp:run{ " TINY ", launcher = 2 }", "exp:run: launcher must be 'threads' or 'mpirun' (got 2)"},
        {"exp:run{ " TINY ", launcher = 'mpirun', processes = 0 }",
         "exp:run: processes must be an integer from 1 to 4096 (got 0)"},
        {"exp:run{ " TINY ", launcher = 'mpirun', processes = 2.5 }",
         "exp:run: processes must be an integer from 1 to 4096 (got 2.5)"},
        {"exp:run{ " TINY ", launcher = 'mpirun', processes = '2' }",
         "exp:run: processes must be an integer from 1 to 4096 (got '2')"},
        {"exp:run{ " TINY ", processes = 2 }",
         "exp:run: processes = 2 needs launcher = 'mpirun' (with threads every rank is a thread of one process)"},
        {"exp:run{ " TINY ", launcher = 'threads', processes = 2 }", "exp:run: processes = 2 needs launcher = 'mpirun'"},
        {"exp:run{ " TINY ", launcher = 'mpirun' }", "exp:run: launcher = 'mpirun' needs processes = N (mpirun -np N)"},
        {"tb.sweep{ processes = { 2, 0 } }", "tb.sweep processes[2]: processes must be an integer from 1 to 4096 (got 0)"},
        {"tb.experiment{ name = 'v', version = 0, question = 'q' }", "version must be an integer >= 1 (got 0)"},
        {"tb.experiment{ name = 'v', version = 1.5, question = 'q' }", "version must be an integer >= 1 (got 1.5)"},
        {"tb.experiment{ name = 'v', version = 1, question = '' }", "question must be a non-empty string (got '')"},
        {"tb.experiment{ name = 'v', version = 1 }", "tb.experiment 'v': question is required"},
        {"tb.experiment{ name = 'a b', version = 1, question = 'q' }", "name must be a word of letters"},
        {"exp:claim{ id = 'c', parser = 'tokens_per_s', runs = exp:run{ " TINY " }, text = '' }",
         "exp:claim 'c': text must be a non-empty string (got '')"},
        {"exp:claim{ id = 'c', parser = 'tokens_per_s', runs = exp:run{ " TINY " }, text = 't', value = 0/0 }",
         "exp:claim 'c': value must be a finite number (got nan)"},
        {"exp:claim{ id = 'c', parser = 'tokens_per_s', runs = exp:run{ " TINY " }, text = 't', "
         "relative_tolerance = -1 }",
         "relative_tolerance must be a finite number >= 0 (got -1)"},
        {"exp:claim{ id = 'c', parser = 'tokens_per_s', runs = exp:run{ " TINY " }, text = 't', "
         "args = { warmup_steps = 1/0 } }",
         "exp:claim 'c': args.warmup_steps must be a finite number (got inf)"},
        {"exp:claim{ id = 'c', parser = 'tokens_per_s', runs = { 1 }, text = 't' }",
         "exp:claim 'c': runs[1] is not a result of exp:run"},
        {"tb.param(5)", "tb.param: the name must be a non-empty string (got 5)"},
        {"tb.param('x', {})", "tb.param 'x': the default must be a number, string or boolean (got an empty table)"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) expect_refused(cases[i][0], cases[i][1]);
    // a --set value that cannot be what the default is
    TB_CHECK(run_body("tb.param('iters', 8)", "--dry-run --set iters=abc") == 1 &&
                 strstr(sh.err, "rbapi.lua:2: tb.param 'iters': --set iters=abc is not a number (the default, 8, is)"),
             "%s", sh.err);
    TB_CHECK(run_body("tb.param('lr', 0.1)", "--dry-run --set lr=1e999") == 1 &&
                 strstr(sh.err, "tb.param 'lr': --set lr=1e999 is not a finite number"),
             "%s", sh.err);
    TB_CHECK(run_body("tb.assert(tb.param('on', false) == true and tb.param('n', 1) == 2.5, 'parsed')\n"
                      "tb.assert(tb.param('name', 'x') == 'inf', 'text that is no decimal number stays text')",
                      "--dry-run --set on=true --set n=2.5 --set name=inf") == 0,
             "%s", sh.err);
    // what the checks take: integral floats for integer keys, as the integer
    TB_CHECK(run_body("exp:run{ " TINY ", train_iters = 2.0, lr = 1e-3, swiglu = true, memory_cap = '1G' }",
                      "--dry-run") == 0 &&
                 strstr(sh.out, "--train-iters 2 ") && strstr(sh.out, "--swiglu=true"),
             "%s\n%s", sh.out, sh.err);
}

int main(void) {
    TB_RUN(non_finite_config_numbers_are_refused_not_dropped);
    TB_RUN(experiment_seed_must_be_an_integer_not_replaced_by_the_default);
    TB_RUN(duplicate_claim_ids_in_one_version_are_refused_naming_both_lines);
    TB_RUN(sweep_axes_are_non_empty_lists_of_config_values_checked_at_the_sweep);
    TB_RUN(claim_value_mismatch_reports_both_numbers);
    TB_RUN(a_dry_run_refuses_what_the_engine_would_refuse);
    TB_RUN(a_resume_after_force_takes_the_latest_record);
    TB_RUN(claim_refuses_a_run_listed_twice);
    TB_RUN(runbooks_get_no_io_no_processes_no_c_modules);
    TB_RUN(claim_refuses_to_extend_a_claims_file_changed_since_its_anchor);
    TB_RUN(claim_at_most_stores_the_bound_and_refuses_a_number_above_it);
    TB_RUN(read_jsonl_parse_error_names_the_file_and_its_line);
    TB_RUN(non_string_error_objects_report_the_runbook_line_and_the_object);
    TB_RUN(os_exit_records_the_experiment_as_interrupted_and_exits_with_its_status);
    TB_RUN(api_tables_refuse_unknown_keys_listing_the_allowed);
    TB_RUN(api_values_are_checked_for_type_integrality_and_range);
    TB_RUN(metatables_and_self_referencing_tables_are_refused_by_name);
    return tb_test_summary();
}
