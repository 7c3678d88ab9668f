// tracebook run: the Lua host and the run recorder, end to end through the binary.
#include <jansson.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tb_shell.h"
#include "tb_run_dir.h"
#include "tb_test.h"

#define TRACEBOOK TB_BIN_DIR "/tracebook"
#define TINY "num_layers = 2, hidden_size = 32, num_attention_heads = 2, seq_length = 16, vocab_size = 64"

static tb_output sh;  // what the last command printed

// The record directories of an experiment version, in a fixed order (the version's files —
// experiment.json, claims.json, report.html — are not records).
static int records(const char *version_dir, char names[][256], int max) {
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "find %s -mindepth 1 -maxdepth 1 -type d -printf '%%f\\n' 2>/dev/null | sort", version_dir);
    FILE *p = popen(cmd, "r");
    int n = 0;
    while (p && n < max && fgets(names[n], 256, p)) {
        names[n][strcspn(names[n], "\n")] = '\0';
        n++;
    }
    if (p) pclose(p);
    return n;
}

#define ART TB_TEST_TMPDIR "/rb_artifacts"

TB_TEST(runbook_runs_records_and_claims_and_prove_rederives) {
    tb_write_text(TB_TEST_TMPDIR "/ok.lua",
               "local exp = tb.experiment{ name = 'rb', version = 1, question = 'does it record?' }\n"
               "local r = exp:run{ " TINY ", train_iters = 3, repeat_ = 2 }\n"
               "tb.assert(#r.runs == 2, 'two repetitions')\n"
               "tb.assert(#r.runs[1].steps == 3, 'three steps read back')\n"
               "tb.assert(r.stats.tokens_per_s.n == 2 and r.stats.tokens_per_s.warmup_steps == 1, 'stats')\n"
               "tb.assert(r.runs[1].seed ~= r.runs[2].seed, 'seeds differ per repetition')\n"
               // an exact claim: prove's exit 0 is about re-derivation; a timing claim of these tiny runs may
               // rightly be NOT PROVEN (unstable) on a shared machine (experiments/prove/stability.h)
               "local v = exp:claim{ id = 'mem', parser = 'peak_memory_bytes', runs = r, text = 'bytes' }\n"
               "tb.assert(v > 0, 'a positive number')\n");
    TB_REQUIRE(tb_run(&sh, TB_SOURCE_DIR, "rm -rf %s && %s run %s/ok.lua --artifacts %s", ART, TRACEBOOK,
                      TB_TEST_TMPDIR, ART) == 0,
               "tracebook run failed:\n%s\n%s", sh.out, sh.err);
    char names[8][256];
    int n = records(ART "/rb/v1", names, 8);
    TB_REQUIRE(n == 2, "two records, got %d", n);
    char path[1024];
    snprintf(path, sizeof path, ART "/rb/v1/%s/" TB_RECORD_MANIFEST, names[0]);
    json_t *m = json_load_file(path, 0, NULL);
    TB_REQUIRE(m, "manifest.json of %s", names[0]);
    TB_CHECK(!strcmp(json_string_value(json_object_get(m, "status")), "finished"), "status finished");
    TB_CHECK(json_is_array(json_object_get(m, "argv")) &&
                 strstr(json_string_value(json_array_get(json_object_get(m, "argv"), 0)), "pretrain_gpt"),
             "argv starts with the engine");
    TB_CHECK(json_is_object(json_object_get(m, "config")), "resolved config recorded");
    TB_CHECK(json_is_object(json_object_get(m, "host")) && json_is_object(json_object_get(m, "environment")),
             "host and environment recorded");
    TB_CHECK(json_object_get(json_object_get(m, "files"), "run/metrics.rank-00000.jsonl") != NULL,
             "the metrics file is hashed");
    TB_CHECK(json_is_object(json_object_get(m, "git")), "git provenance (the source tree is a repository)");
    TB_CHECK(strlen(json_string_value(json_object_get(json_object_get(m, "runbook"), "sha256"))) == 64,
             "runbook sha256");
    json_decref(m);
    TB_CHECK(access(ART "/rb/v1/" TB_EXPERIMENT_CLAIMS, F_OK) == 0, "claims.json written");
    TB_CHECK(tb_run(&sh, TB_SOURCE_DIR, "%s prove --all --artifacts %s", TRACEBOOK, ART) == 0, "prove failed:\n%s\n%s",
             sh.out, sh.err);

    // resume: a second run skips the finished repetitions
    TB_REQUIRE(tb_run(&sh, TB_SOURCE_DIR, "%s run %s/ok.lua --artifacts %s", TRACEBOOK, TB_TEST_TMPDIR, ART) == 0,
               "rerun:\n%s", sh.err);
    TB_CHECK(strstr(sh.out, "skip:") != NULL, "the rerun says it skips:\n%s", sh.out);
    TB_CHECK(records(ART "/rb/v1", names, 8) == 2, "no new records on resume");
    TB_REQUIRE(tb_run(&sh, TB_SOURCE_DIR, "%s run %s/ok.lua --force --artifacts %s", TRACEBOOK, TB_TEST_TMPDIR, ART) ==
                   0,
               "force");
    TB_CHECK(records(ART "/rb/v1", names, 8) == 4, "--force re-runs");
}

// repetition_ = K runs repetition K alone, with its seed and record as the K-th of repeat_;
// timing.interleaved alternates two configs' repetitions that way (runbooks/lib/timing.lua).
TB_TEST(repetition_runs_one_repetition_and_interleaved_alternates_configs) {
    tb_run(&sh, NULL, "rm -rf %s/alt && mkdir -p %s/alt && ln -s %s/runbooks/lib %s/alt/lib", TB_TEST_TMPDIR,
           TB_TEST_TMPDIR, TB_SOURCE_DIR, TB_TEST_TMPDIR);
    tb_write_text(TB_TEST_TMPDIR "/alt/alt.lua",
                  "local timing = require 'timing'\n"
                  "local exp = tb.experiment{ name = 'alt', version = 1, question = 'q' }\n"
                  "local both = timing.interleaved(exp, { { " TINY ", train_iters = 2 }, { " TINY ", train_iters = 3 } },\n"
                  "                                 { repetitions = 2 })\n"
                  "tb.assert(#both[1].runs == 2 and #both[2].runs == 2, 'two repetitions of each')\n"
                  "tb.assert(both[1].runs[2].repetition == 2 and both[2].runs[1].repetition == 1, 'numbered')\n"
                  "tb.assert(both[1].stats.step_ms.n == 2, 'stats over both repetitions')\n"
                  "local all = exp:run{ " TINY ", train_iters = 2, repeat_ = 2 }\n"
                  "tb.assert(all.runs[2].run_id == both[1].runs[2].run_id and all.runs[2].resumed,\n"
                  "          'repetition 2 of repeat_ 2 is the record repetition_ 2 made')\n"
                  "tb.assert(all.runs[1].seed == both[1].runs[1].seed and all.runs[1].seed ~= all.runs[2].seed, 'seeds')\n"
                  "exp:claim{ id = 'mem', parser = 'peak_memory_bytes', runs = all, text = 'bytes' }\n");
    TB_CHECK(tb_run(&sh, TB_SOURCE_DIR, "rm -rf %s_alt && %s run %s/alt/alt.lua --artifacts %s_alt", ART, TRACEBOOK,
                    TB_TEST_TMPDIR, ART) == 0,
             "%s\n%s", sh.out, sh.err);
    // the order: config 1 repetition 1, config 2 repetition 1, config 1 repetition 2, ...
    const char *p = strstr(sh.out, "repetition 1 of 2"), *q = p ? strstr(p + 1, "repetition 1 of 2") : NULL;
    const char *r = q ? strstr(q + 1, "repetition 2 of 2") : NULL, *t = r ? strstr(r + 1, "repetition 2 of 2") : NULL;
    TB_CHECK(p && q && r && t, "repetition 1 twice, then 2 twice:\n%s", sh.out);
    tb_write_text(TB_TEST_TMPDIR "/alt/bad.lua",
                  "local exp = tb.experiment{ name = 'alt', version = 1, question = 'q' }\n"
                  "exp:run{ " TINY ", repetition_ = 0 }\n");
    TB_CHECK(tb_run(&sh, TB_SOURCE_DIR, "%s run %s/alt/bad.lua --artifacts %s_alt", TRACEBOOK, TB_TEST_TMPDIR, ART) != 0 &&
                 strstr(sh.err, "repetition_ must be an integer >= 1 (got 0)"),
             "repetition_ 0 is refused: %s", sh.err);
}

// rerun_contended_ = K: a repetition measured beside busy processes (the gate prove applies:
// other processes beyond 10% of the cores) is measured again, up to K times (300 steps: a
// timed window /proc/stat's ticks resolve, stability.c window_resolves); every record
// stays, the last one's manifest names those it replaces and why, a resume takes the last
// one, and prove judges it like any (still contended here: NOT PROVEN, never "selected") and
// verifies the records it replaces.
TB_TEST(a_contended_repetition_is_measured_again_naming_what_it_replaces) {
    tb_write_text(TB_TEST_TMPDIR "/rerun.lua",
                  "local exp = tb.experiment{ name = 'rerun', version = 1, question = 'q' }\n"
                  "local r = exp:run{ " TINY ", train_iters = 300, rerun_contended_ = 2 }\n"
                  "print('replaced ' .. #(r.runs[1].supersedes or {}) .. ' final ' .. r.runs[1].run_id)\n"
                  "local once = exp:run{ " TINY ", train_iters = 4, rerun_contended_ = 0 }\n"
                  "exp:claim{ id = 'tps', parser = 'tokens_per_s', runs = r, text = 't', min_repetitions = 1,\n"
                  "           min_window_s = 0, min_steps = 1 }\n");
    // two busy loops beside the engine on a 2-core host: other processes take half the cores or more
    TB_REQUIRE(tb_run(&sh, TB_SOURCE_DIR,
                      "rm -rf %s_rerun; (while :; do :; done) & a=$!; (while :; do :; done) & b=$!; "
                      "%s run %s/rerun.lua --artifacts %s_rerun; rc=$?; kill $a $b; exit $rc",
                      ART, TRACEBOOK, TB_TEST_TMPDIR, ART) == 0,
               "%s\n%s", sh.out, sh.err);
    char names[8][256], final_id[64] = "";
    const char *p = strstr(sh.out, "replaced 2 final ");
    TB_CHECK(p && sscanf(p, "replaced 2 final %63s", final_id) == 1, "two re-runs, the third run kept:\n%s", sh.out);
    const char *q = strstr(sh.out, "re-run: repetition 1 of 1 ("), *q2 = q ? strstr(q + 1, "re-run: repetition 1 of 1 (") : NULL;
    TB_CHECK(q && q2 && strstr(q, "was contended: other processes took ") && strstr(q2, "(0 more re-runs allowed"),
             "each re-run says why:\n%s", sh.out);
    TB_CHECK(records(ART "_rerun/rerun/v1", names, 8) == 4, "3 records of the first config, 1 of the second");
    char path[512];
    snprintf(path, sizeof path, ART "_rerun/rerun/v1/%s/" TB_RECORD_MANIFEST, final_id);
    json_t *m = json_load_file(path, 0, NULL), *sup = json_object_get(m, "supersedes");
    TB_CHECK(json_array_size(sup) == 2 &&
                 !strncmp(json_string_value(json_object_get(json_array_get(sup, 1), "reason")) ?: "",
                          "contended: other processes took ", 32),
             "the kept record's manifest names both replaced runs and why");
    json_decref(m);
    tb_run(&sh, TB_SOURCE_DIR, "%s prove --all --artifacts %s_rerun", TRACEBOOK, ART);
    TB_CHECK(strstr(sh.out, "NOT PROVEN  rerun/v1/tps (contended: ") && !strstr(sh.out, "selected:") &&
                 strstr(sh.out, "; 3 records verified"),
             "the kept run is judged like any, the replaced ones verified:\n%s", sh.out);
    // a resume takes the kept record, not a replaced one
    TB_CHECK(tb_run(&sh, TB_SOURCE_DIR, "%s run %s/rerun.lua --artifacts %s_rerun", TRACEBOOK, TB_TEST_TMPDIR, ART) ==
                     0 &&
                 strstr(sh.out, final_id) && strstr(sh.out, "already finished as ") &&
                 records(ART "_rerun/rerun/v1", names, 8) == 4,
             "resumed without a run:\n%s", sh.out);
    tb_write_text(TB_TEST_TMPDIR "/rerun_bad.lua",
                  "local exp = tb.experiment{ name = 'rerun', version = 2, question = 'q' }\n"
                  "exp:run{ " TINY ", rerun_contended_ = -1 }\n");
    TB_CHECK(tb_run(&sh, TB_SOURCE_DIR, "%s run %s/rerun_bad.lua --artifacts %s_rerun", TRACEBOOK, TB_TEST_TMPDIR,
                    ART) != 0 &&
                 strstr(sh.err, "rerun_contended_ must be an integer from 0 to 1000 (got -1)"),
             "a negative budget is refused: %s", sh.err);
}

// repeat_=3 is repetitions 1, 2, 3: in the manifests, the results the runbook reads, the
// progress lines, the resume line, ls, show, prove's evidence and a dry run.
TB_TEST(repetitions_are_numbered_from_one_everywhere) {
    tb_write_text(TB_TEST_TMPDIR "/reps.lua",
                  "local exp = tb.experiment{ name = 'reps', version = 1, question = 'q' }\n"
                  "local r = exp:run{ " TINY ", train_iters = 2, repeat_ = 3 }\n"
                  "if tb.param('dry', 0) == 0 then  -- a dry run returns no runs\n"
                  "  for i = 1, 3 do tb.assert(r.runs[i].repetition == i, 'runs[' .. i .. '].repetition is ' .. "
                  "r.runs[i].repetition) end\n"
                  "end\n"
                  // exact, so that prove's exit 0 stays about the repetitions' numbering, not the timings
                  "exp:claim{ id = 'mem', parser = 'peak_memory_bytes', runs = r, text = 'bytes' }\n");
    TB_REQUIRE(tb_run(&sh, TB_SOURCE_DIR, "rm -rf %s_reps && %s run %s/reps.lua --artifacts %s_reps", ART, TRACEBOOK,
                      TB_TEST_TMPDIR, ART) == 0,
               "%s\n%s", sh.out, sh.err);
    TB_CHECK(strstr(sh.out, "reps/v1 repetition 1 of 3 (") && strstr(sh.out, "reps/v1 repetition 3 of 3 ("),
             "progress lines:\n%s", sh.out);
    char names[8][256], ids[4][256] = {"", "", "", ""};
    TB_REQUIRE(records(ART "_reps/reps/v1", names, 8) == 3, "three records");
    for (int i = 0; i < 3; i++) {
        char path[1024];
        snprintf(path, sizeof path, ART "_reps/reps/v1/%.200s/" TB_RECORD_MANIFEST, names[i]);
        json_t *m = json_load_file(path, 0, NULL);
        json_int_t rep = json_integer_value(json_object_get(m, "repetition"));
        TB_CHECK(rep >= 1 && rep <= 3 && !ids[rep][0], "%s: repetition %lld", names[i], (long long)rep);
        TB_CHECK(json_integer_value(json_object_get(m, "manifest_version")) == 2, "manifest_version 2");
        if (rep >= 1 && rep <= 3) snprintf(ids[rep], sizeof ids[rep], "%.200s", names[i]);
        json_decref(m);
    }
    TB_REQUIRE(ids[1][0] && ids[2][0] && ids[3][0], "repetitions 1, 2 and 3 recorded");
    TB_REQUIRE(tb_run(&sh, TB_SOURCE_DIR, "%s ls --experiment reps --artifacts %s_reps", TRACEBOOK, ART) == 0, "%s", sh.err);
    for (int rep = 1; rep <= 3; rep++) {
        char needle[300], id[256], status[32], commit[64], col[16];
        snprintf(needle, sizeof needle, "\n  %s ", ids[rep]);
        const char *line = strstr(sh.out, needle);
        TB_CHECK(line && sscanf(line, " %255s %31s %63s %15s", id, status, commit, col) == 4 && atoi(col) == rep,
                 "ls: %s is repetition %d:\n%s", ids[rep], rep, sh.out);
    }
    for (int rep = 1; rep <= 3; rep++) {
        char needle[64];
        TB_REQUIRE(tb_run(&sh, TB_SOURCE_DIR, "%s show %s --artifacts %s_reps", TRACEBOOK, ids[rep], ART) == 0, "%s",
                   sh.err);
        snprintf(needle, sizeof needle, "identity     repetition %d, seed ", rep);
        TB_CHECK(strstr(sh.out, needle), "show %s: '%s':\n%s", ids[rep], needle, sh.out);
    }
    TB_REQUIRE(tb_run(&sh, TB_SOURCE_DIR, "%s prove mem --artifacts %s_reps", TRACEBOOK, ART) == 0, "%s", sh.err);
    for (int rep = 1; rep <= 3; rep++) {
        char needle[320];
        snprintf(needle, sizeof needle, "run %s  repetition %d  sweep ", ids[rep], rep);
        TB_CHECK(strstr(sh.out, needle), "prove: '%s':\n%s", needle, sh.out);
    }
    TB_CHECK(!strstr(sh.out, "repetition 0"), "no repetition 0 in prove:\n%s", sh.out);
    // resume names the repetitions it skips the same way
    TB_REQUIRE(tb_run(&sh, TB_SOURCE_DIR, "%s run %s/reps.lua --artifacts %s_reps", TRACEBOOK, TB_TEST_TMPDIR, ART) == 0,
               "%s", sh.err);
    TB_CHECK(strstr(sh.out, "repetition 1 of 3 already finished as ") &&
                 strstr(sh.out, "repetition 3 of 3 already finished as ") && !strstr(sh.out, "repetition 0"),
             "resume:\n%s", sh.out);
    TB_REQUIRE(tb_run(&sh, TB_SOURCE_DIR, "%s run %s/reps.lua --dry-run --set dry=1 --artifacts %s_reps_dry", TRACEBOOK,
                      TB_TEST_TMPDIR, ART) == 0,
               "%s", sh.err);
    TB_CHECK(strstr(sh.out, "dry run, repetition 1 of 3: ") && strstr(sh.out, "dry run, repetition 3 of 3: ") &&
                 !strstr(sh.out, "repetition 0"),
             "dry run:\n%s", sh.out);
}

TB_TEST(dry_run_prints_argv_and_config_and_runs_nothing) {
    tb_write_text(TB_TEST_TMPDIR "/dry.lua",
               "local exp = tb.experiment{ name = 'dry', version = 1, question = 'q' }\n"
               "for _, p in ipairs(tb.sweep{ tensor_model_parallel_size = {1, 2} }) do\n"
               "  p.num_layers = 2; p.hidden_size = 32; p.num_attention_heads = 2; p.world_size = p.tensor_model_parallel_size\n"
               "  exp:run(p)\nend\n");
    TB_REQUIRE(tb_run(&sh, TB_SOURCE_DIR, "rm -rf %s_dry && %s run %s/dry.lua --dry-run --artifacts %s_dry", ART,
                      TRACEBOOK, TB_TEST_TMPDIR, ART) == 0,
               "%s", sh.err);
    TB_CHECK(strstr(sh.out, "--tensor-model-parallel-size 2") && strstr(sh.out, "config {"),
             "argv and config printed:\n%s", sh.out);
    TB_CHECK(access(ART "_dry/dry/v1", F_OK) != 0, "nothing recorded");
}

// Every runbook the project ships runs dry (its summaries and claims with no run behind them:
// no stats, no records), exits 0 and records nothing.
TB_TEST(every_shipped_runbook_runs_dry) {
    int status = tb_run(&sh, TB_SOURCE_DIR,
                        "rm -rf %s_dryall && for r in runbooks/*.lua runbooks/drills/*.lua; do %s run \"$r\" --dry-run"
                        " --artifacts %s_dryall > /dev/null 2>%s/dryall.err || { echo \"FAILED $r\"; cat %s/dryall.err; }; done",
                        ART, TRACEBOOK, ART, TB_TEST_TMPDIR, TB_TEST_TMPDIR);
    TB_CHECK(status == 0 && !strstr(sh.out, "FAILED"), "a dry run failed:\n%s", sh.out);
    TB_CHECK(tb_run(&sh, NULL, "find %s_dryall -name manifest.json | grep -q .", ART) != 0, "nothing recorded");
}

TB_TEST(runbook_errors_name_file_and_line_and_mark_the_experiment_failed) {
    tb_write_text(TB_TEST_TMPDIR "/syntax.lua", "local x = \n");
    TB_CHECK(tb_run(&sh, TB_SOURCE_DIR, "rm -rf %s_err && %s run %s/syntax.lua --artifacts %s_err", ART, TRACEBOOK,
                    TB_TEST_TMPDIR, ART) != 0 &&
                 strstr(sh.err, "syntax.lua:"),
             "syntax error with file:line:\n%s", sh.err);
    tb_write_text(TB_TEST_TMPDIR "/badkey.lua",
               "local exp = tb.experiment{ name = 'bad', version = 1, question = 'q' }\n"
               "\n"
               "exp:run{ num_layerz = 2 }\n");
    TB_CHECK(tb_run(&sh, TB_SOURCE_DIR, "%s run %s/badkey.lua --artifacts %s_err", TRACEBOOK, TB_TEST_TMPDIR, ART) !=
                     0 &&
                 strstr(sh.err, "badkey.lua:3:") && strstr(sh.err, "unknown config key 'num_layerz'") &&
                 strstr(sh.err, "stack traceback"),
             "unknown key at badkey.lua:3 with a traceback:\n%s", sh.err);
    json_t *e = json_load_file(ART "_err/bad/v1/" TB_EXPERIMENT_STATUS, 0, NULL);
    TB_CHECK(e && !strcmp(json_string_value(json_object_get(e, "status")), "failed"), "experiment marked failed");
    json_decref(e);
    // a config the engine's rules refuse: at the line, before anything runs (a dry run too)
    tb_write_text(TB_TEST_TMPDIR "/engine_refuses.lua",
               "local exp = tb.experiment{ name = 'enginerefuses', version = 1, question = 'q' }\n"
               "exp:run{ " TINY ", train_iters = 2, num_attention_heads = 3 }\n");
    for (int dry = 0; dry < 2; dry++) {
        TB_CHECK(tb_run(&sh, TB_SOURCE_DIR, "%s run %s/engine_refuses.lua --artifacts %s_err %s", TRACEBOOK,
                        TB_TEST_TMPDIR, ART, dry ? "--dry-run" : "") != 0 &&
                     strstr(sh.err, "engine_refuses.lua:2: exp:run: pretrain_gpt would refuse this config: ") &&
                     strstr(sh.err, "must be divisible by num_attention_heads (3)"),
                 "the engine's rule at the runbook line (dry run %d):\n%s", dry, sh.err);
        char none[8][256];
        TB_CHECK(records(ART "_err/enginerefuses/v1", none, 8) == 0, "nothing run (dry run %d)", dry);
    }
    // an engine that fails as it runs (its token file missing): reported at the line, recorded
    tb_write_text(TB_TEST_TMPDIR "/engine_fails.lua",
               "local exp = tb.experiment{ name = 'enginefail', version = 1, question = 'q' }\n"
               "exp:run{ " TINY ", train_iters = 2, data_path = '/nonexistent/tokens.bin' }\n");
    TB_CHECK(tb_run(&sh, TB_SOURCE_DIR, "%s run %s/engine_fails.lua --artifacts %s_err", TRACEBOOK, TB_TEST_TMPDIR,
                    ART) != 0 &&
                 strstr(sh.err, "engine_fails.lua:2:") && strstr(sh.err, "failed (exit status 1)"),
             "engine failure reported at the runbook line:\n%s", sh.err);
    char names[8][256];
    TB_REQUIRE(records(ART "_err/enginefail/v1", names, 8) == 1, "the failed run is recorded");
    char path[1024];
    snprintf(path, sizeof path, ART "_err/enginefail/v1/%s/" TB_RECORD_MANIFEST, names[0]);
    json_t *m = json_load_file(path, 0, NULL);
    TB_CHECK(m && !strcmp(json_string_value(json_object_get(m, "status")), "failed"), "record status failed");
    json_decref(m);
}

// A root too long for any path under it ends the runbook at the line that needed the path,
// with one message naming the path (its start: the root; its end: the experiment's
// directory) and the limit; a dry run, which creates nothing, is refused the same way
// instead of printing a cut path.
TB_TEST(over_long_artifacts_root_is_refused_naming_the_path_and_the_limit) {
    char root[5000];
    int len = snprintf(root, sizeof root, "%s_long", ART);
    while (len < PATH_MAX + 100) len += snprintf(root + len, sizeof root - (size_t)len, "/%0199d", 0);
    char head[201], limit[64];  // the root's first 200 bytes: the message shows at least that much of it
    memcpy(head, root, sizeof head - 1);
    head[sizeof head - 1] = '\0';
    snprintf(limit, sizeof limit, "over the limit of %d)", PATH_MAX - 1);
    tb_write_text(TB_TEST_TMPDIR "/toolong.lua",
                  "local exp = tb.experiment{ name = 'toolong', version = 1, question = 'q' }\n"
                  "exp:run{ " TINY ", train_iters = 1 }\n");
    const char *modes[] = {"", " --dry-run"};
    for (int i = 0; i < 2; i++) {
        int rc = tb_run(&sh, TB_SOURCE_DIR, "%s run %s/toolong.lua%s --artifacts %s", TRACEBOOK, TB_TEST_TMPDIR,
                        modes[i], root);
        const char *msg = strstr(sh.err, "path too long: ");
        TB_CHECK(rc == 1 && msg, "run%s: exit status %d, stderr:\n%.600s", modes[i], rc, sh.err);
        if (!msg) continue;
        TB_CHECK(strstr(sh.err, "toolong.lua:1: path too long: ") != NULL, "run%s: at the runbook's line:\n%.600s",
                 modes[i], sh.err);
        TB_CHECK(strstr(msg, head) == msg + strlen("path too long: "), "run%s: names the root:\n%.600s", modes[i],
                 msg);
        TB_CHECK(strstr(msg, "/toolong/v1 (") && strstr(msg, limit), "run%s: names the experiment's directory and %s:\n%s",
                 modes[i], limit, msg);
        TB_CHECK(!strstr(msg + 1, "path too long"), "run%s: reported once:\n%s", modes[i], sh.err);
    }
}

TB_TEST(interrupted_run_leaves_an_incomplete_record_never_a_half_manifest) {
    tb_write_text(TB_TEST_TMPDIR "/long.lua",
               "local exp = tb.experiment{ name = 'long', version = 1, question = 'q' }\n"
               "exp:run{ num_layers = 4, hidden_size = 128, num_attention_heads = 4, seq_length = 128, "
               "vocab_size = 256, train_iters = 100000 }\n");
    char cmd[2048];
    // SIGINT to the host after 1.5 s: it stops the engine and records the run incomplete
    snprintf(cmd, sizeof cmd,
             "cd %s && rm -rf %s_int && (%s run %s/long.lua --artifacts %s_int > /dev/null 2>&1 & pid=$!; sleep 1.5; "
             "kill -INT $pid; wait $pid; echo $? > %s/int.status)",
             TB_SOURCE_DIR, ART, TRACEBOOK, TB_TEST_TMPDIR, ART, TB_TEST_TMPDIR);
    TB_REQUIRE(system(cmd) == 0, "shell");
    char status[64];
    tb_slurp_into(TB_TEST_TMPDIR "/int.status", status, sizeof status);
    TB_CHECK(atoi(status) != 0, "interrupted host exits non-zero (got %s)", status);
    char names[8][256];
    TB_REQUIRE(records(ART "_int/long/v1", names, 8) == 1, "one record");
    char path[1024];
    snprintf(path, sizeof path, ART "_int/long/v1/%s/" TB_RECORD_MANIFEST, names[0]);
    json_t *m = json_load_file(path, 0, NULL);
    TB_CHECK(m && !strcmp(json_string_value(json_object_get(m, "status")), "incomplete"), "status incomplete");
    json_decref(m);

    // SIGKILL to the host: no manifest at all (the manifest is written last), which reads as incomplete
    // ... and its engine dies with it (PR_SET_PDEATHSIG): none is left training after 1 s
    snprintf(cmd, sizeof cmd,
             "cd %s && rm -rf %s_kill && (%s run %s/long.lua --artifacts %s_kill > /dev/null 2>&1 & pid=$!; sleep 1.5; "
             "kill -KILL $pid; wait $pid; sleep 1; pgrep -f '[p]retrain_gpt.*%s_kill' > %s/orphans; "
             "pkill -KILL -f '[p]retrain_gpt.*%s_kill' ; true)",
             TB_SOURCE_DIR, ART, TRACEBOOK, TB_TEST_TMPDIR, ART, ART, TB_TEST_TMPDIR, ART);
    TB_REQUIRE(system(cmd) == 0, "shell");
    char orphans[256];
    tb_slurp_into(TB_TEST_TMPDIR "/orphans", orphans, sizeof orphans);
    TB_CHECK(orphans[0] == '\0', "no engine outlives a killed host (pids: %s)", orphans);
    TB_REQUIRE(records(ART "_kill/long/v1", names, 8) == 1, "one record");
    snprintf(path, sizeof path, ART "_kill/long/v1/%s/" TB_RECORD_MANIFEST, names[0]);
    TB_CHECK(access(path, F_OK) != 0, "no manifest after SIGKILL");
    snprintf(path, sizeof path, ART "_kill/long/v1/%s/" TB_RECORD_HEARTBEAT, names[0]);
    TB_CHECK(access(path, F_OK) == 0, "a heartbeat was being written while the run was live");
    TB_CHECK(tb_run(&sh, TB_SOURCE_DIR, "%s ls --experiment long --artifacts %s_kill", TRACEBOOK, ART) == 0 &&
                 strstr(sh.out, "incomplete"),
             "the catalogue lists the killed run as incomplete:\n%s\n%s", sh.out, sh.err);
}

// SIGTERM ends a run as SIGINT does (the engine stopped, its record incomplete, the experiment
// interrupted, exit 128 + 15); a runbook busy in a Lua loop — one that catches errors with
// pcall, even — stops at SIGINT too.
TB_TEST(sigterm_and_a_runbook_busy_in_lua_are_interrupted) {
    char cmd[2048], status[64], names[8][256], path[1024];
    tb_write_text(TB_TEST_TMPDIR "/long.lua",
                  "local exp = tb.experiment{ name = 'long', version = 1, question = 'q' }\n"
                  "exp:run{ num_layers = 4, hidden_size = 128, num_attention_heads = 4, seq_length = 128, "
                  "vocab_size = 256, train_iters = 100000 }\n");
    snprintf(cmd, sizeof cmd,
             "cd %s && rm -rf %s_term && (%s run %s/long.lua --artifacts %s_term > /dev/null 2>&1 & pid=$!; sleep 1.5; "
             "kill -TERM $pid; wait $pid; echo $? > %s/term.status)",
             TB_SOURCE_DIR, ART, TRACEBOOK, TB_TEST_TMPDIR, ART, TB_TEST_TMPDIR);
    TB_REQUIRE(system(cmd) == 0, "shell");
    tb_slurp_into(TB_TEST_TMPDIR "/term.status", status, sizeof status);
    TB_CHECK(atoi(status) == 128 + SIGTERM, "SIGTERM: exit 143 (got %s)", status);
    TB_REQUIRE(records(ART "_term/long/v1", names, 8) == 1, "one record");
    snprintf(path, sizeof path, ART "_term/long/v1/%s/" TB_RECORD_MANIFEST, names[0]);
    json_t *m = json_load_file(path, 0, NULL);
    TB_CHECK(m && !strcmp(json_string_value(json_object_get(m, "status")) ?: "", "incomplete"), "record incomplete");
    json_decref(m);
    json_t *e = json_load_file(ART "_term/long/v1/" TB_EXPERIMENT_STATUS, 0, NULL);
    TB_CHECK(e && !strcmp(json_string_value(json_object_get(e, "status")) ?: "", "interrupted"),
             "experiment.json says interrupted");
    json_decref(e);

    tb_write_text(TB_TEST_TMPDIR "/busy.lua",
                  "local exp = tb.experiment{ name = 'busy', version = 1, question = 'q' }\n"
                  "exp:run{ " TINY ", train_iters = 2 }\n"
                  "while true do pcall(function() local x = 0; for i = 1, 1e6 do x = x + i end end) end\n");
    snprintf(cmd, sizeof cmd,
             "cd %s && rm -rf %s_busy && (%s run %s/busy.lua --artifacts %s_busy > /dev/null 2>&1 & pid=$!; sleep 3; "
             "kill -INT $pid; sleep 2; if kill -0 $pid 2>/dev/null; then kill -KILL $pid; echo alive; fi; wait $pid; "
             "echo $? >> %s/busy.status) > %s/busy.status",
             TB_SOURCE_DIR, ART, TRACEBOOK, TB_TEST_TMPDIR, ART, TB_TEST_TMPDIR, TB_TEST_TMPDIR);
    TB_REQUIRE(system(cmd) == 0, "shell");
    tb_slurp_into(TB_TEST_TMPDIR "/busy.status", status, sizeof status);
    TB_CHECK(!strstr(status, "alive") && atoi(status) == 128 + SIGINT,
             "a runbook in a pcall loop stops within 2 s of SIGINT, exit 130 (got %s)", status);
    e = json_load_file(ART "_busy/busy/v1/" TB_EXPERIMENT_STATUS, 0, NULL);
    TB_CHECK(e && !strcmp(json_string_value(json_object_get(e, "status")) ?: "", "interrupted") &&
                 strstr(json_string_value(json_object_get(e, "error")) ?: "", "busy.lua:3: interrupted by SIGINT"),
             "experiment.json says interrupted, at the runbook's line");
    json_decref(e);
}

TB_TEST(killed_engine_leaves_an_incomplete_record_and_fails_the_runbook) {
    tb_write_text(TB_TEST_TMPDIR "/long2.lua",
               "local exp = tb.experiment{ name = 'long2', version = 1, question = 'q' }\n"
               "exp:run{ num_layers = 4, hidden_size = 128, num_attention_heads = 4, seq_length = 128, "
               "vocab_size = 256, train_iters = 100000 }\n");
    char cmd[2048];
    snprintf(cmd, sizeof cmd,
             "cd %s && rm -rf %s_eng && (%s run %s/long2.lua --artifacts %s_eng > /dev/null 2> %s/eng.err & pid=$!; "
             "sleep 1.5; pkill -KILL -f '[p]retrain_gpt.*%s_eng'; wait $pid; echo $? > %s/eng.status)",
             TB_SOURCE_DIR, ART, TRACEBOOK, TB_TEST_TMPDIR, ART, TB_TEST_TMPDIR, ART, TB_TEST_TMPDIR);
    TB_REQUIRE(system(cmd) == 0, "shell");
    char status[64];
    tb_slurp_into(TB_TEST_TMPDIR "/eng.status", status, sizeof status);
    TB_CHECK(atoi(status) != 0, "the runbook fails when its engine is killed (exit %s)", status);
    char names[8][256];
    TB_REQUIRE(records(ART "_eng/long2/v1", names, 8) == 1, "one record");
    char path[1024];
    snprintf(path, sizeof path, ART "_eng/long2/v1/%s/" TB_RECORD_MANIFEST, names[0]);
    json_t *m = json_load_file(path, 0, NULL);
    TB_CHECK(m && !strcmp(json_string_value(json_object_get(m, "status")), "incomplete") &&
                 json_integer_value(json_object_get(m, "exit_status")) == 128 + 9,
             "manifest says incomplete, exit 137");
    json_decref(m);
}

TB_TEST(env_deny_keeps_secrets_out_of_the_manifest) {
    tb_write_text(TB_TEST_TMPDIR "/env.lua",
               "local exp = tb.experiment{ name = 'env', version = 1, question = 'q' }\n"
               "exp:run{ " TINY ", train_iters = 1 }\n");
    TB_REQUIRE(tb_run(&sh, TB_SOURCE_DIR,
                      "rm -rf %s_env && MY_API_TOKEN=s3cret TB_PRIVATE_NOTE=x TB_VISIBLE=y %s run %s/env.lua "
                      "--env-deny 'TB_PRIVATE*' --artifacts %s_env",
                      ART, TRACEBOOK, TB_TEST_TMPDIR, ART) == 0,
               "%s", sh.err);
    char names[8][256];
    TB_REQUIRE(records(ART "_env/env/v1", names, 8) == 1, "one record");
    char path[1024];
    snprintf(path, sizeof path, ART "_env/env/v1/%s/" TB_RECORD_MANIFEST, names[0]);
    json_t *m = json_load_file(path, 0, NULL);
    json_t *env = json_object_get(m, "environment");
    TB_CHECK(env && !json_object_get(env, "MY_API_TOKEN"), "default deny-list drops *TOKEN*");
    TB_CHECK(env && !json_object_get(env, "TB_PRIVATE_NOTE"), "--env-deny drops its glob");
    TB_CHECK(env && json_object_get(env, "TB_VISIBLE"), "other variables are kept");
    json_decref(m);
}

// Nine variables that a deny-list of *TOKEN* *KEY* *PASSWORD* *SECRET* *CREDENTIAL* let through
// verbatim, each with a realistic secret: none of the values may appear in any file of the
// record or the catalogue. Meanwhile the allow-list still records what matters, an
// --env-allow name is recorded, and a credential-bearing URL in an allowed name is redacted.
TB_TEST(no_secret_value_reaches_any_file_of_the_record) {
    static const char *const secrets[][2] = {
        {"DATABASE_URL", "postgres://app:Pg-s3cret" "-pw@db.internal:5432/prod"},
        {"MY_PASSWD", "hunter2-Correct" "-Horse"},
        {"API_AUTH", "Basic-YWxhZGRpbjpv" "cGVuc2VzYW1l"},
        {"SSH_PASSPHRASE", "tr0ub4dor" "-and-3-phrase"},
        {"GH_PAT", "ghp_aB3dE5fG7hJ9kL1m" "N3pQ5rS7tU9vW1xY3z5A"},
        {"SENTRY_DSN", "https://3f2a9c1e5b7d4e8f" "9a0b1c2d3e4f5a6b@o123456.ingest.sentry.io/4504"},
        {"NPM_CONFIG__AUTH", "dXNlcjpucG1f" "c2VjcmV0X3Bhc3M="},
        {"HTTPS_PROXY", "http://proxyuser:Pr0xy" "-pass@proxy.corp:3128"},
        {"REPO_URL", "https://x-access-token:ghs_16C7e42F292c6912" "E7710c838347Ae178B4a@github.com/org/repo.git"},
    };
    // the part of each value that is the secret (what must not leak, even cut out of a URL).
    // Each is split across two literals so that this file's own text never holds one: the
    // record of a dirty tree carries its diff (git.patch), which would hold this very test.
    static const char *const needles[] = {"Pg-s3cret" "-pw", "hunter2-Correct" "-Horse", "YWxhZGRpbjpv" "cGVuc2VzYW1l",
                                          "tr0ub4dor" "-and-3-phrase", "aB3dE5fG7hJ9kL1m" "N3pQ5rS7tU9vW1xY3z5A",
                                          "3f2a9c1e5b7d4e8f" "9a0b1c2d3e4f5a6b", "dXNlcjpucG1f" "c2VjcmV0X3Bhc3M",
                                          "Pr0xy" "-pass", "16C7e42F292c6912" "E7710c838347Ae178B4a",
                                          "S3cr3t" "-tb-mirror"};
    tb_write_text(TB_TEST_TMPDIR "/secrets.lua",
                  "local exp = tb.experiment{ name = 'secrets', version = 1, question = 'q' }\n"
                  "exp:run{ " TINY ", train_iters = 1 }\n");
    char env[4096] = "";
    size_t len = 0;
    for (size_t i = 0; i < sizeof secrets / sizeof *secrets; i++)
        len += (size_t)snprintf(env + len, sizeof env - len, "%s='%s' ", secrets[i][0], secrets[i][1]);
    // HTTPS_PROXY and REPO_URL are allowed on purpose: an allowed name still has its
    // credential-bearing value redacted; TB_MIRROR is allowed by default (TB_*)
    TB_REQUIRE(tb_run(&sh, TB_SOURCE_DIR,
                      "rm -rf %s_sec && env %s OMP_NUM_THREADS=3 MY_TOOL_HOME=/opt/mytool "
                      "TB_MIRROR=https://bob:S3cr3t" "-tb-mirror@mirror.example.com/simple "
                      "%s run %s/secrets.lua --env-allow MY_TOOL_HOME --env-allow HTTPS_PROXY --env-allow 'REPO_*' "
                      "--artifacts %s_sec",
                      ART, env, TRACEBOOK, TB_TEST_TMPDIR, ART) == 0,
               "%s", sh.err);
    char names[8][256];
    TB_REQUIRE(records(ART "_sec/secrets/v1", names, 8) == 1, "one record");
    char path[1024];
    snprintf(path, sizeof path, ART "_sec/secrets/v1/%s/" TB_RECORD_MANIFEST, names[0]);
    json_t *m = json_load_file(path, 0, NULL);
    TB_REQUIRE(m, "manifest %s", path);
    json_t *envj = json_object_get(m, "environment"), *filter = json_object_get(m, "environment_filter");
    TB_CHECK(!strcmp(json_string_value(json_object_get(envj, "OMP_NUM_THREADS")) ?: "", "3"),
             "an allowed variable is recorded");
    TB_CHECK(!strcmp(json_string_value(json_object_get(envj, "MY_TOOL_HOME")) ?: "", "/opt/mytool"),
             "an --env-allow name is recorded");
    TB_CHECK(json_object_get(envj, "PATH") != NULL, "PATH is recorded");
    TB_CHECK(!strcmp(json_string_value(json_object_get(envj, "HTTPS_PROXY")) ?: "", "<redacted: credentials in URL>") &&
                 !strcmp(json_string_value(json_object_get(envj, "REPO_URL")) ?: "", "<redacted: credentials in URL>") &&
                 !strcmp(json_string_value(json_object_get(envj, "TB_MIRROR")) ?: "", "<redacted: credentials in URL>"),
             "allowed names with credentials in a URL are redacted");
    for (size_t i = 0; i < 7; i++)
        TB_CHECK(!json_object_get(envj, secrets[i][0]), "%s is not on the allow-list", secrets[i][0]);
    int left_out_listed = 0;
    size_t k;
    json_t *n;
    json_array_foreach(json_object_get(filter, "left_out_names"), k, n) left_out_listed +=
        !strcmp(json_string_value(n), "GH_PAT") || !strcmp(json_string_value(n), "DATABASE_URL");
    TB_CHECK(left_out_listed == 2 && json_integer_value(json_object_get(filter, "left_out")) >= 7,
             "the manifest says which names were left out");
    json_decref(m);
    // every file of the artifacts root: the record, the experiment's files, the catalogue
    for (size_t i = 0; i < sizeof needles / sizeof *needles; i++) {
        int rc = tb_run(&sh, TB_SOURCE_DIR, "grep -r -l -a -F -e '%s' %s_sec", needles[i], ART);
        TB_CHECK(rc != 0 && !sh.out[0], "secret #%zu found in: %s", i + 1, sh.out);
    }
}

// The two comparison claims of runbooks/ (tp 2's loss is the single rank's; full recompute
// leaves the loss unchanged) read the baseline from its record at prove time: claims.json
// holds a bound and both sides' records, no baseline number; editing the baseline's metrics
// file unproves the claim.
TB_TEST(runbook_comparison_claims_read_the_baseline_from_its_record) {
    TB_REQUIRE(tb_run(&sh, TB_SOURCE_DIR,
                      "rm -rf %s_cmp && %s run runbooks/quickstart.lua --set iters=3 --set repetitions=3"
                      " --set rerun_contended=0 --artifacts %s_cmp && "
                      "%s run runbooks/recompute_memory.lua --set seq=64 --artifacts %s_cmp",
                      ART, TRACEBOOK, ART, TRACEBOOK, ART) == 0,
               "%s\n%s", sh.out, sh.err);
    static const struct {
        const char *claims, *id;
        double bound;
    } want[] = {{ART "_cmp/quickstart/v1/" TB_EXPERIMENT_CLAIMS, "tp2_final_loss", 1e-6},
                {ART "_cmp/recompute_memory/v1/" TB_EXPERIMENT_CLAIMS, "loss_unchanged_by_recompute", 0}};
    char baseline[256] = "";
    for (size_t w = 0; w < sizeof want / sizeof *want; w++) {
        json_t *doc = tb_load_json(want[w].claims), *c = NULL, *each;
        size_t i;
        json_array_foreach(json_object_get(doc, "claims"), i, each) {
            if (!strcmp(json_string_value(json_object_get(each, "id")) ?: "", want[w].id)) c = each;
        }
        json_t *args = json_object_get(c, "args");
        json_t *a = json_object_get(args, "a"), *b = json_object_get(args, "b");
        TB_CHECK(c && !strcmp(json_string_value(json_object_get(c, "parser")) ?: "", "relative_difference") &&
                     json_number_value(json_object_get(c, "at_most")) == want[w].bound && !json_object_get(c, "value"),
                 "%s: relative_difference, at_most %g, no value", want[w].id, want[w].bound);
        TB_CHECK(!strcmp(json_string_value(json_object_get(a, "parser")) ?: "", "loss_at_step") &&
                     !strcmp(json_string_value(json_object_get(b, "parser")) ?: "", "loss_at_step") &&
                     json_array_size(json_object_get(a, "records")) >= 1 &&
                     json_array_size(json_object_get(b, "records")) >= 1,
                 "%s: loss_at_step over the treatment's and the baseline's records", want[w].id);
        if (w == 0)
            snprintf(baseline, sizeof baseline, "%s",
                     json_string_value(json_array_get(json_object_get(b, "records"), 0)) ?: "");
        json_decref(doc);
    }
    // the two comparison claims, each by its id (the runbooks' timing claims over these tiny
    // runs are for the stability gate to judge, not this test)
    TB_CHECK(tb_run(&sh, TB_SOURCE_DIR, "%s prove tp2_final_loss --artifacts %s_cmp", TRACEBOOK, ART) == 0 &&
                 strstr(sh.out, "PROVEN  quickstart/v1/tp2_final_loss"),
             "prove tp2_final_loss:\n%s\n%s", sh.out, sh.err);
    TB_CHECK(tb_run(&sh, TB_SOURCE_DIR, "%s prove loss_unchanged_by_recompute --artifacts %s_cmp", TRACEBOOK, ART) == 0 &&
                 strstr(sh.out, "PROVEN  recompute_memory/v1/loss_unchanged_by_recompute"),
             "prove loss_unchanged_by_recompute:\n%s\n%s", sh.out, sh.err);
    // the single rank's (the baseline's) metrics, edited; nothing else rewritten
    TB_REQUIRE(baseline[0], "the baseline's run id");
    TB_REQUIRE(tb_run(&sh, TB_SOURCE_DIR, "sed -i '$ s/\"loss\":[0-9]/\"loss\":9/' %s_cmp/quickstart/v1/%s/run/%s",
                      ART, baseline, "metrics.rank-00000.jsonl") == 0,
               "%s", sh.err);
    TB_CHECK(tb_run(&sh, TB_SOURCE_DIR, "%s prove tp2_final_loss --artifacts %s_cmp", TRACEBOOK, ART) == 1 &&
                 strstr(sh.out, "NOT PROVEN  quickstart/v1/tp2_final_loss") && strstr(sh.out, "file altered: ") &&
                 strstr(sh.out, baseline),
             "the edited baseline:\n%s\n%s", sh.out, sh.err);
}

TB_TEST(params_from_set_reach_the_runbook) {
    tb_write_text(TB_TEST_TMPDIR "/param.lua",
               "tb.assert(tb.param('iters', 1) == 7, 'number from --set')\n"
               "tb.assert(tb.param('name', 'x') == 'abc', 'string from --set')\n"
               "tb.assert(tb.param('missing', 5) == 5, 'default')\n");
    TB_CHECK(tb_run(&sh, TB_SOURCE_DIR, "%s run %s/param.lua --set iters=7 --set name=abc --artifacts %s_p", TRACEBOOK,
                    TB_TEST_TMPDIR, ART) == 0,
             "%s", sh.err);
}

// A --set the runbook never reads (a misspelled parameter) is an error naming it, not
// ignored; a --set given twice is refused before anything runs; tb.params counts as reading.
TB_TEST(a_set_never_read_or_given_twice_is_an_error) {
    tb_write_text(TB_TEST_TMPDIR "/param2.lua",
                  "local exp = tb.experiment{ name = 'p2', version = 1, question = 'q' }\n"
                  "tb.assert(tb.param('iters', 1) == 7, 'number from --set')\n");
    int rc = tb_run(&sh, TB_SOURCE_DIR, "%s run %s/param2.lua --set iters=7 --set iter=3 --artifacts %s_p2", TRACEBOOK,
                    TB_TEST_TMPDIR, ART);
    TB_CHECK(rc != 0 && strstr(sh.err, "--set iter=3: the runbook ") && strstr(sh.err, "never reads this parameter"),
             "an unread --set (exit %d):\n%s", rc, sh.err);
    json_t *e = json_load_file(ART "_p2/p2/v1/" TB_EXPERIMENT_STATUS, 0, NULL);
    TB_CHECK(e && !strcmp(json_string_value(json_object_get(e, "status")) ?: "", "failed") &&
                 strstr(json_string_value(json_object_get(e, "error")) ?: "", "--set iter=3"),
             "the experiment is marked failed with the reason");
    json_decref(e);
    rc = tb_run(&sh, TB_SOURCE_DIR, "%s run %s/param2.lua --set iters=3 --set iters=4 --artifacts %s_p2", TRACEBOOK,
                TB_TEST_TMPDIR, ART);
    TB_CHECK(rc != 0 && strstr(sh.err, "flag --set: 'iters' is set twice (iters=3, then iters=4)"),
             "a repeated --set (exit %d):\n%s", rc, sh.err);
    tb_write_text(TB_TEST_TMPDIR "/param3.lua",
                  "local n = 0\n"
                  "for k, v in pairs(tb.params) do n = n + 1 end\n"
                  "tb.assert(n == 2 and tb.params.a == '1', 'pairs and index')\n");
    rc = tb_run(&sh, TB_SOURCE_DIR, "%s run %s/param3.lua --set a=1 --set b=2 --artifacts %s_p3", TRACEBOOK,
                TB_TEST_TMPDIR, ART);
    TB_CHECK(rc == 0, "pairs(tb.params) reads every --set (exit %d):\n%s", rc, sh.err);
}

int main(void) {
    TB_RUN(runbook_runs_records_and_claims_and_prove_rederives);
    TB_RUN(dry_run_prints_argv_and_config_and_runs_nothing);
    TB_RUN(every_shipped_runbook_runs_dry);
    TB_RUN(repetitions_are_numbered_from_one_everywhere);
    TB_RUN(repetition_runs_one_repetition_and_interleaved_alternates_configs);
    TB_RUN(a_contended_repetition_is_measured_again_naming_what_it_replaces);
    TB_RUN(runbook_errors_name_file_and_line_and_mark_the_experiment_failed);
    TB_RUN(over_long_artifacts_root_is_refused_naming_the_path_and_the_limit);
    TB_RUN(interrupted_run_leaves_an_incomplete_record_never_a_half_manifest);
    TB_RUN(sigterm_and_a_runbook_busy_in_lua_are_interrupted);
    TB_RUN(killed_engine_leaves_an_incomplete_record_and_fails_the_runbook);
    TB_RUN(env_deny_keeps_secrets_out_of_the_manifest);
    TB_RUN(no_secret_value_reaches_any_file_of_the_record);
    TB_RUN(params_from_set_reach_the_runbook);
    TB_RUN(a_set_never_read_or_given_twice_is_an_error);
    TB_RUN(runbook_comparison_claims_read_the_baseline_from_its_record);
    return tb_test_summary();
}
