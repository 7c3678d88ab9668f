// test_report.c — `tracebook report` (experiments/reports/report.h) on recorded runs that hold every
// plot's data: a single rank, context parallel 2 at two sequence lengths, pipeline parallel 2.
// It checks the plots chosen from what the runs hold, the claims' verdicts against `tracebook
// prove --json` (one computation), every text escaped (a question and a claim text full of
// markup), links relative to the page wherever it is written, and failures refused: an
// unknown version, and gnuplot missing — where `tracebook run` keeps its records and says the
// report was not written, with a non-zero exit.
#include <jansson.h>
#include <string.h>

#include "tb_shell.h"
#include "tb_test.h"

#define TRACEBOOK TB_BIN_DIR "/tracebook"
#define DIR_ TB_TEST_TMPDIR "/report"
#define ART DIR_ "/artifacts"
#define REPORT ART "/rp/v1/report.html"
#define TINY "num_layers = 2, hidden_size = 32, num_attention_heads = 2, vocab_size = 64, train_iters = 3"
#define QUESTION "<script>alert(\"x\")</script> & 'q'"

static tb_output sh;
static char *html;
static char pp[256];  // the pipeline-parallel run's id: the timeline's

static int run_runbook(const char *env) {
    return tb_run(&sh, TB_SOURCE_DIR, "%s %s run %s/rp.lua --artifacts %s", env, TRACEBOOK, DIR_, ART);
}

TB_TEST(runs_with_every_plots_data_are_recorded_and_reported) {
    tb_run(&sh, NULL, "rm -rf %s && mkdir -p %s", DIR_, DIR_);
    tb_write_text(DIR_ "/rp.lua",
                  "local exp = tb.experiment{ name = 'rp', version = 1, question = [[" QUESTION "]] }\n"
                  "local one = exp:run{ " TINY ", seq_length = 16, attention_backend = 'flash' }\n"
                  "exp:run{ " TINY ", seq_length = 16, attention_backend = 'flash', context_parallel_size = 2,"
                  " world_size = 2 }\n"
                  "exp:run{ " TINY ", seq_length = 32, attention_backend = 'flash', context_parallel_size = 2,"
                  " world_size = 2 }\n"
                  "local pp = exp:run{ " TINY ", seq_length = 16, pipeline_model_parallel_size = 2, world_size = 2,"
                  " global_batch_size = 4, micro_batch_size = 1 }\n"
                  "exp:run{ " TINY ", seq_length = 16, num_experts = 4, moe_router_topk = 2, moe_ffn_hidden_size = 32 }\n"
                  "exp:claim{ id = 'mem', parser = 'peak_memory_bytes', runs = one, text = '<b>bytes</b> & \"more\"' }\n"
                  "exp:claim{ id = 'theory', parser = 'pipeline_bubble', args = { kind = 'theoretical' }, runs = pp,"
                  " text = 'bubble' }\n"
                  "print('PP ' .. pp.runs[1].run_id)\n");
    TB_REQUIRE(run_runbook("") == 0, "%s\n%s", sh.out, sh.err);
    TB_CHECK(strstr(sh.out, "  report " REPORT "\n"), "tracebook run prints the report's path:\n%s", sh.out);
    const char *p = strstr(sh.out, "PP ");
    TB_REQUIRE(p && sscanf(p, "PP %255s", pp) == 1, "%s", sh.out);
    html = tb_slurp(REPORT);
    TB_REQUIRE(html, "%s written", REPORT);
    static const char *const plots[] = {"throughput", "bubble", "memory", "loss", "timeline", "steps", "cp_memory",
                                        "moe_load"};
    for (size_t i = 0; i < sizeof plots / sizeof *plots; i++) {
        char mark[64];
        snprintf(mark, sizeof mark, "<figure class=\"plot\" data-plot=\"%s\"><svg", plots[i]);
        TB_CHECK(strstr(html, mark), "the %s plot, an inline SVG", plots[i]);
    }
    TB_CHECK(!strstr(html, "<?xml") && !strstr(html, "class=\"absent\">Pipeline bubble") &&
                 !strstr(html, "class=\"absent\">MoE expert load") && strstr(html, "Tokens per expert, step 3"),
             "SVG inlined without its prolog; no bubble or MoE refusal; the MoE run's last step plotted");
    // the timeline and the step decomposition show the deepest pipeline
    char caption[400];
    snprintf(caption, sizeof caption, "Step 3 of run %s, per rank", pp);
    TB_CHECK(strstr(html, caption), "the timeline is of the pp 2 run %s", pp);
}

TB_TEST(every_text_is_escaped) {
    TB_REQUIRE(html, "the report");
    TB_CHECK(!strstr(html, "<script") && !strstr(html, "<b>bytes"), "no markup from the data reaches the page");
    TB_CHECK(strstr(html, "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt; &amp; &#39;q&#39;"), "the question, escaped");
    TB_CHECK(strstr(html, "&lt;b&gt;bytes&lt;/b&gt; &amp; &quot;more&quot;"), "the claim's text, escaped");
}

TB_TEST(claims_carry_prove_verdicts) {
    TB_REQUIRE(html, "the report");
    TB_REQUIRE(tb_run(&sh, TB_SOURCE_DIR, "%s prove --experiment rp --json --artifacts %s", TRACEBOOK, ART) == 0 ||
                   sh.out[0] == '{',
               "%s", sh.err);
    json_t *doc = json_loads(sh.out, 0, NULL);
    TB_REQUIRE(doc && json_array_size(json_object_get(doc, "claims")) == 2, "two claims proved:\n%s", sh.out);
    size_t i;
    json_t *c;
    json_array_foreach(json_object_get(doc, "claims"), i, c) {
        char mark[256];
        snprintf(mark, sizeof mark, "<div class=\"claim\" id=\"claim-%s\"><p><span class=\"verdict %s\">%s</span>",
                 json_string_value(json_object_get(c, "id")), json_is_true(json_object_get(c, "proven")) ? "proven" : "not-proven",
                 json_string_value(json_object_get(c, "verdict")));
        TB_CHECK(strstr(html, mark), "claim %s: %s as prove says", json_string_value(json_object_get(c, "id")),
                 json_string_value(json_object_get(c, "verdict")));
        char derived[128];
        snprintf(derived, sizeof derived, "derived %.10g", json_real_value(json_object_get(c, "derived")));
        TB_CHECK(strstr(html, derived), "its derived value: %s", derived);
    }
    json_decref(doc);
}

TB_TEST(links_are_relative_to_the_page_wherever_it_is_written) {
    const char *page = DIR_ "/else/where/r.html";
    tb_run(&sh, NULL, "mkdir -p %s/else/where", DIR_);
    TB_REQUIRE(tb_run(&sh, TB_SOURCE_DIR, "%s report --experiment rp --output %s --artifacts %s", TRACEBOOK, page, ART) == 0, "%s",
               sh.err);
    TB_CHECK(strstr(sh.out, page), "prints the path: %s", sh.out);
    char *other = tb_slurp(page);
    TB_REQUIRE(other, "%s", page);
    int links = 0;
    for (const char *p = other; (p = strstr(p, "href=\"")); p++) {
        p += 6;
        const char *q = strchr(p, '"');
        char href[2048], target[4096];
        snprintf(href, sizeof href, "%.*s", (int)(q - p), p);
        if (href[0] == '#') continue;
        snprintf(target, sizeof target, "%s/else/where/%s", DIR_, href);
        TB_CHECK(href[0] != '/' && !strncmp(href, "../../artifacts/rp/v1/", 22) && tb_exists(target),
                 "%s resolves from %s", href, page);
        links++;
    }
    TB_CHECK(links > 20, "links to the records' files (%d)", links);
    free(other);
}

TB_TEST(an_unknown_version_and_a_missing_gnuplot_are_refused) {
    int rc = tb_run(&sh, TB_SOURCE_DIR, "%s report --experiment rp --version 9 --artifacts %s", TRACEBOOK, ART);
    TB_CHECK(rc == 1 && strstr(sh.err, "no version 9 of experiment 'rp'"), "exit %d: %s", rc, sh.err);
    rc = tb_run(&sh, TB_SOURCE_DIR, "%s report --experiment nosuch --artifacts %s", TRACEBOOK, ART);
    TB_CHECK(rc == 1 && strstr(sh.err, "no experiment 'nosuch'"), "exit %d: %s", rc, sh.err);
    const char *page = DIR_ "/not-written.html";
    rc = tb_run(&sh, TB_SOURCE_DIR, "TB_GNUPLOT=/nonexistent/gnuplot %s report --experiment rp --output %s --artifacts %s", TRACEBOOK,
                page, ART);
    TB_CHECK(rc == 1 && strstr(sh.err, "/nonexistent/gnuplot not found") && strstr(sh.err, "gnuplot-nox") &&
                 !tb_exists(page),
             "exit %d, no page: %s", rc, sh.err);
    // tracebook run: the runs (reused here) and claims are recorded; the report failure is said and fails the command
    rc = run_runbook("TB_GNUPLOT=/nonexistent/gnuplot");
    TB_CHECK(rc == 1 && strstr(sh.err, "the runs and claims are recorded, but the report was not written") &&
                 tb_exists(ART "/rp/v1/claims.json") && tb_exists(REPORT),
             "exit %d (the earlier report stays): %s", rc, sh.err);
}

// --output over a file that is not a page this command wrote (the version's ledger, which the
// report reads) is refused and the file kept; over an earlier report it is replaced; a
// directory that does not exist is named once.
TB_TEST(an_output_that_is_not_a_report_is_refused_and_kept) {
    const char *ledger = ART "/rp/v1/ledger.jsonl";
    char *before = tb_slurp(ledger);
    TB_REQUIRE(before, "%s", ledger);
    int rc = tb_run(&sh, TB_SOURCE_DIR, "%s report --experiment rp --output %s --artifacts %s", TRACEBOOK, ledger, ART);
    char *after = tb_slurp(ledger);
    TB_CHECK(rc == 1 && strstr(sh.err, "--output " ART "/rp/v1/ledger.jsonl exists and is not a page tracebook report "
                                       "wrote: not replaced") &&
                 after && !strcmp(before, after),
             "exit %d, the ledger kept: %s", rc, sh.err);
    free(before);
    free(after);
    rc = tb_run(&sh, TB_SOURCE_DIR, "%s report --experiment rp --artifacts %s", TRACEBOOK, ART);
    TB_CHECK(rc == 0 && tb_exists(REPORT), "an earlier report is replaced: exit %d: %s", rc, sh.err);
    rc = tb_run(&sh, TB_SOURCE_DIR, "%s report --experiment rp --output %s/nodir/r.html --artifacts %s", TRACEBOOK,
                DIR_, ART);
    const char *first = strstr(sh.err, "r.html");
    TB_CHECK(rc == 1 && first && !strstr(first + 1, "r.html") && strstr(sh.err, "No such file or directory"),
             "the missing directory said once: exit %d: %s", rc, sh.err);
}

// A rank's trace cut short (a rank that died while writing it): the timeline's place says which
// file and where it stopped reading; the rest of the page is written. Run last: it cuts a
// recorded file.
TB_TEST(a_cut_trace_is_named_in_the_timelines_place) {
    TB_REQUIRE(pp[0], "the pp run");
    char trace[1024];
    snprintf(trace, sizeof trace, ART "/rp/v1/%s/run/trace.rank-00001.json", pp);
    TB_REQUIRE(tb_run(&sh, NULL, "truncate -s 1000 %s", trace) == 0, "%s", sh.err);
    const char *page = DIR_ "/cut.html";
    int rc = tb_run(&sh, TB_SOURCE_DIR, "%s report --experiment rp --output %s --artifacts %s", TRACEBOOK, page, ART);
    char *cut = tb_slurp(page);
    char mark[1200];
    snprintf(mark, sizeof mark, "class=\"absent\">Pipeline timeline: %s: byte ", trace);
    TB_CHECK(rc == 0 && cut && strstr(cut, mark) && strstr(cut, "data-plot=\"throughput\"><svg"),
             "exit %d; the page names the cut trace in the timeline's place and keeps the other plots: %s", rc, sh.err);
    free(cut);
}

int main(void) {
    TB_RUN(runs_with_every_plots_data_are_recorded_and_reported);
    TB_RUN(every_text_is_escaped);
    TB_RUN(claims_carry_prove_verdicts);
    TB_RUN(links_are_relative_to_the_page_wherever_it_is_written);
    TB_RUN(an_unknown_version_and_a_missing_gnuplot_are_refused);
    TB_RUN(an_output_that_is_not_a_report_is_refused_and_kept);
    TB_RUN(a_cut_trace_is_named_in_the_timelines_place);
    free(html);
    tb_output_free(&sh);
    return tb_test_summary();
}
