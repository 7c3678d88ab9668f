// test_report_browser.c — the quickstart's report opened in a real browser: headless Chromium
// (Debian's chromium, which scripts/install-deps.sh installs) loads the page that `tracebook
// run runbooks/quickstart.lua` wrote and printed, and a script added to a copy of it reports,
// after the page loaded, each plot's rendered size and drawn elements and every script error;
// Chromium's own log shows every console message. The quickstart runs 4 steps instead of 8
// (its iters parameter) and 3 timing repetitions instead of 15, to keep the test short under
// AddressSanitizer too. Then a screenshot is saved under the test's
// output (build/test-tmp/report_browser/report.png), and the page's relative links are
// followed after the artifacts folder is moved.
//
// Without chromium the test fails, naming what to install — unless TB_SKIP_BROWSER_TEST=1
// says explicitly that this machine has no browser: then it exits 77 (ctest: skipped).
// TB_CHROMIUM names another binary. The checker is itself checked on a page with a script
// error, a console message and an empty plot, which it must refuse.
#include <stddef.h>
#include <jansson.h>
#include <string.h>

#include "tb_shell.h"
#include "tb_test.h"

#define TRACEBOOK TB_BIN_DIR "/tracebook"
#define OUT TB_TEST_TMPDIR "/report_browser"
#define ART OUT "/artifacts"
#define REPORT ART "/quickstart/v1/report.html"
#define SKIP 77

static tb_output sh;
static char chromium[1024];

// Collects script errors from the first moment (in <head>).
static const char check_head[] =
    "<script>window.__tb_errors=[];addEventListener('error',function(e){__tb_errors.push(String(e.message||e.type))},"
    "true);</script>";
// After load: each figure.plot's svg, its rendered size, its bounding box, its drawn elements.
static const char check_tail[] =
    "<script>addEventListener('load',function(){var out=[];document.querySelectorAll('figure.plot').forEach("
    "function(f){var s=f.querySelector('svg'),r={plot:f.getAttribute('data-plot'),svg:!!s,w:0,h:0,bw:0,bh:0,"
    "shapes:0,texts:0};if(s){var b=s.getBoundingClientRect();r.w=b.width;r.h=b.height;try{var g=s.getBBox();"
    "r.bw=g.width;r.bh=g.height}catch(x){}r.shapes=s.querySelectorAll('path,rect,polygon,polyline,line,circle,use')"
    ".length;r.texts=s.querySelectorAll('text').length}out.push(r)});var p=document.createElement('pre');"
    "p.id='tb-check';p.textContent=JSON.stringify({plots:out,errors:__tb_errors});document.body.appendChild(p)});"
    "</script>";

// A copy of page with the checker in it, beside it (so its relative links resolve alike).
static int instrumented_copy(const char *page, const char *copy) {
    char *html = tb_slurp(page);
    if (!html) return -1;
    char *head = strstr(html, "<head>"), *end = strstr(html, "</body>");
    if (!head || !end) return free(html), -1;
    size_t n = strlen(html);
    char *out = malloc(n + sizeof check_head + sizeof check_tail + 1);
    size_t a = (size_t)(head - html) + 6, b = (size_t)(end - html);
    memcpy(out, html, a);
    strcpy(out + a, check_head);
    size_t at = a + strlen(check_head);
    memcpy(out + at, html + a, b - a);
    at += b - a;
    strcpy(out + at, check_tail);
    strcpy(out + at + strlen(check_tail), html + b);
    int rc = tb_write_text(copy, out);
    free(out);
    free(html);
    return rc;
}

static void unescape(char *s) {
    static const char *const from[] = {"&lt;", "&gt;", "&quot;", "&#39;", "&amp;"}, to[] = {'<', '>', '"', '\'', '&'};
    char *w = s;
    for (char *p = s; *p;) {
        size_t k = 0;
        for (size_t i = 0; i < 5 && !k; i++)
            if (!strncmp(p, from[i], strlen(from[i]))) *w++ = to[i], k = strlen(from[i]);
        if (k) p += k;
        else *w++ = *p++;
    }
    *w = '\0';
}

// Loads page in headless Chromium; counts the problems it shows (each named on stdout, with
// why appended): a plot without a rendered, non-empty SVG, a script error, a console message,
// a plot count other than expected_plots (-1: any). -1 when the browser itself failed.
static int check_page(const char *page, int expected_plots, char *why, size_t why_size) {
    char copy[1024];
    snprintf(copy, sizeof copy, "%s.check.html", page);
    why[0] = '\0';
    if (instrumented_copy(page, copy) != 0) return snprintf(why, why_size, "cannot copy %s", page), -1;
    int rc = tb_run(&sh, NULL,
                    "timeout 60 '%s' --headless --no-sandbox --disable-gpu --disable-dev-shm-usage --no-first-run --user-data-dir='%s/profile'"
                    " --enable-logging=stderr --v=0 --dump-dom 'file://%s'",
                    chromium, OUT, copy);
    remove(copy);
    if (rc != 0) return snprintf(why, why_size, "chromium exit %d: %.500s", rc, sh.err), -1;
    char *pre = strstr(sh.out, "<pre id=\"tb-check\">");
    char *close = pre ? strstr(pre, "</pre>") : NULL;
    if (!pre || !close) return snprintf(why, why_size, "the checker wrote nothing (the page did not load)"), -1;
    *close = '\0';
    pre += strlen("<pre id=\"tb-check\">");
    unescape(pre);
    json_t *check = json_loads(pre, 0, NULL);
    if (!check) return snprintf(why, why_size, "the checker's output is not JSON: %.300s", pre), -1;
    int problems = 0;
    size_t used = 0;
#define PROBLEM(...) (problems++, used += (size_t)snprintf(why + used, used < why_size ? why_size - used : 0, __VA_ARGS__))
    json_t *plots = json_object_get(check, "plots");
    if (expected_plots >= 0 && (int)json_array_size(plots) != expected_plots)
        PROBLEM("%zu plots rendered, the page has %d; ", json_array_size(plots), expected_plots);
    size_t i;
    json_t *p;
    json_array_foreach(plots, i, p) {
        const char *name = json_string_value(json_object_get(p, "plot"));
        double w = json_number_value(json_object_get(p, "w")), h = json_number_value(json_object_get(p, "h")),
               bw = json_number_value(json_object_get(p, "bw")), bh = json_number_value(json_object_get(p, "bh"));
        long long shapes = json_integer_value(json_object_get(p, "shapes")),
                  texts = json_integer_value(json_object_get(p, "texts"));
        printf("  plot %-10s rendered %.0fx%.0f px, drawing %.0fx%.0f, %lld shapes, %lld texts\n", name ? name : "?",
               w, h, bw, bh, shapes, texts);
        if (!json_is_true(json_object_get(p, "svg"))) PROBLEM("plot %s has no svg; ", name);
        else if (w < 200 || h < 100 || bw <= 0 || bh <= 0 || shapes < 10 || texts < 3)
            PROBLEM("plot %s is empty or not rendered (%.0fx%.0f px, %lld shapes, %lld texts); ", name, w, h, shapes,
                    texts);
    }
    json_array_foreach(json_object_get(check, "errors"), i, p) PROBLEM("script error: %s; ", json_string_value(p));
    for (const char *l = sh.err; (l = strstr(l, ":CONSOLE")); l++) {
        const char *eol = strchr(l, '\n');
        PROBLEM("console: %.*s; ", (int)(eol ? eol - l : (ptrdiff_t)strlen(l)), l);
    }
#undef PROBLEM
    json_decref(check);
    return problems;
}

static int count(const char *text, const char *needle) {
    int n = 0;
    for (const char *p = text; (p = strstr(p, needle)); p += strlen(needle)) n++;
    return n;
}

TB_TEST(tracebook_run_writes_the_report_and_prints_its_path) {
    TB_REQUIRE(tb_run(&sh, TB_SOURCE_DIR, "rm -rf '%s' && mkdir -p '%s' && '%s' run runbooks/quickstart.lua --set iters=4 --set repetitions=3 --set rerun_contended=0 --artifacts '%s'",
                      OUT, OUT, TRACEBOOK, ART) == 0,
               "quickstart failed:\n%s\n%s", sh.out, sh.err);
    TB_CHECK(strstr(sh.out, "  report " REPORT "\n"), "the path printed:\n%s", sh.out);
    TB_REQUIRE(tb_exists(REPORT), "%s written", REPORT);
}

TB_TEST(the_checker_refuses_a_script_error_a_console_message_and_an_empty_plot) {
    const char *bad = OUT "/bad.html";
    tb_write_text(bad, "<!DOCTYPE html><html><head><title>bad</title></head><body>"
                       "<figure class=\"plot\" data-plot=\"empty\"><svg viewBox=\"0 0 10 10\"></svg></figure>"
                       "<script>console.error('logged');no_such_function();</script></body></html>");
    char why[4096];
    int problems = check_page(bad, 1, why, sizeof why);
    TB_CHECK(problems == 4, "empty plot, script error, and two console lines (the error and the exception): got %d: %s",
             problems, why);
    TB_CHECK(strstr(why, "plot empty is empty") && strstr(why, "no_such_function") && strstr(why, "logged"), "%s", why);
}

TB_TEST(every_plot_renders_in_chromium_without_console_errors) {
    char *html = tb_slurp(REPORT);
    TB_REQUIRE(html, "%s", REPORT);
    int plots = count(html, "<figure class=\"plot\"");
    // the quickstart's runs hold: throughput, memory, loss, the timeline and the step decomposition
    static const char *const names[] = {"throughput", "memory", "loss", "timeline", "steps"};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        char mark[64];
        snprintf(mark, sizeof mark, "data-plot=\"%s\"", names[i]);
        TB_CHECK(strstr(html, mark), "the quickstart's report has the %s plot", names[i]);
    }
    TB_CHECK(plots == 5, "5 plots in the page (%d)", plots);
    // self-contained: no script, and nothing that loads (src=, <link>, @import, url() but the
    // SVGs' own #ids); the SVG namespace URIs are names, never fetched
    TB_CHECK(!strstr(html, "<script") && !strstr(html, " src=") && !strstr(html, "<link") && !strstr(html, "@import") &&
                 !strstr(html, "url(http") && !strstr(html, "href=\"http") && !strstr(html, "href='http"),
             "self-contained: no script, nothing fetched");
    free(html);
    char why[8192];
    int problems = check_page(REPORT, plots, why, sizeof why);
    TB_CHECK(problems == 0, "%d problems: %s", problems, why);
}

TB_TEST(a_screenshot_is_saved_under_the_test_output) {
    const char *png = OUT "/report.png";
    remove(png);
    int rc = tb_run(&sh, NULL,
                    "timeout 60 '%s' --headless --no-sandbox --disable-gpu --disable-dev-shm-usage --no-first-run --user-data-dir='%s/profile'"
                    " --hide-scrollbars --window-size=1100,3600 --force-device-scale-factor=0.5 --screenshot='%s'"
                    " 'file://%s'",
                    chromium, OUT, png, REPORT);
    TB_CHECK(rc == 0, "chromium --screenshot: exit %d\n%s", rc, sh.err);
    size_t len = 0;
    char *bytes = tb_slurp_len(png, &len);
    TB_CHECK(bytes && len > 20000 && !memcmp(bytes, "\x89PNG\r\n\x1a\n", 8), "%s: a PNG (%zu bytes)", png, len);
    printf("  screenshot %s (%zu bytes)\n", png, len);
    free(bytes);
}

TB_TEST(links_are_relative_and_resolve_after_the_artifacts_move) {
    const char *moved = OUT "/moved";
    TB_REQUIRE(tb_run(&sh, NULL, "rm -rf '%s' && mv '%s' '%s'", moved, ART, moved) == 0, "%s", sh.err);
    char page_dir[1024];
    snprintf(page_dir, sizeof page_dir, "%s/quickstart/v1", moved);
    char page[1100];
    snprintf(page, sizeof page, "%s/report.html", page_dir);
    char *html = tb_slurp(page);
    TB_REQUIRE(html, "%s", page);
    int links = 0, traces = 0;
    for (const char *p = html; (p = strstr(p, "href=\"")); p++) {
        p += 6;
        const char *q = strchr(p, '"');
        char href[2048];
        snprintf(href, sizeof href, "%.*s", (int)(q - p), p);
        if (href[0] == '#') continue;
        TB_CHECK(href[0] != '/' && !strchr(href, ':'), "relative: %s", href);
        char target[4096];
        snprintf(target, sizeof target, "%s/%s", page_dir, href);
        TB_CHECK(tb_exists(target), "the link %s resolves from the moved page", href);
        links++;
        traces += strstr(href, "trace.rank-") != NULL;
    }
    TB_CHECK(links > 20 && traces >= 5, "links to every record's files and per-rank traces (%d links, %d traces)",
             links, traces);
    free(html);
}

int main(void) {
    const char *chosen = getenv("TB_CHROMIUM");
    char *found = NULL;
    if (chosen && *chosen) snprintf(chromium, sizeof chromium, "%s", chosen);
    else if (tb_shell(&found, "command -v chromium") == 0 && found) snprintf(chromium, sizeof chromium, "%s", found);
    free(found);
    chromium[strcspn(chromium, "\n")] = '\0';
    if (!*chromium || tb_run(&sh, NULL, "'%s' --version", chromium) != 0) {
        const char *skip = getenv("TB_SKIP_BROWSER_TEST");
        if (skip && !strcmp(skip, "1")) {
            printf("SKIP: no chromium, and TB_SKIP_BROWSER_TEST=1 says this machine has none\n");
            return SKIP;
        }
        printf("FAIL: chromium not found (%s): scripts/install-deps.sh installs Debian's chromium; on a machine "
               "without a browser set TB_SKIP_BROWSER_TEST=1 to skip this test\n",
               *chromium ? chromium : "not on PATH");
        return 1;
    }
    printf("  %s", sh.out);
    TB_RUN(tracebook_run_writes_the_report_and_prints_its_path);
    TB_RUN(the_checker_refuses_a_script_error_a_console_message_and_an_empty_plot);
    TB_RUN(every_plot_renders_in_chromium_without_console_errors);
    TB_RUN(a_screenshot_is_saved_under_the_test_output);
    TB_RUN(links_are_relative_and_resolve_after_the_artifacts_move);
    tb_output_free(&sh);
    return tb_test_summary();
}
