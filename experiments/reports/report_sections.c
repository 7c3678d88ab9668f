// report_sections.c — the claims and the runs of `tracebook report` (report_internal.h).
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/run_dir.h"
#include "reports/report_internal.h"

static const char *str(json_t *o, const char *key) {
    const char *s = json_string_value(json_object_get(o, key));
    return s ? s : NULL;
}

// A number as the text commands print it: "-" when absent.
static void number(tb_html *h, json_t *v, const char *fmt) {
    if (json_is_number(v)) tb_html_textf(h, fmt, json_number_value(v));
    else tb_html_raw(h, "-");
}

static void compact_json(tb_html *h, json_t *v) {
    char *text = json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT | JSON_SORT_KEYS);
    tb_html_text(h, text ? text : "");
    free(text);
}

// A file the evidence read (a path under a record directory) as a link relative to the page.
static void file_link(tb_html *h, const report *rp, json_t *rec, const char *path) {
    const char *dir = str(rec, "record_dir"), *id = str(rec, "run_id");
    size_t n = dir ? strlen(dir) : 0;
    if (dir && id && !strncmp(path, dir, n) && path[n] == '/') {
        char rel[REPORT_PATH_MAX], href[REPORT_PATH_MAX];
        snprintf(rel, sizeof rel, "%s%s", id, path + n);
        report_href(rp, rel, href, sizeof href);
        tb_html_link(h, href, path + n + 1);
    } else {
        tb_html_raw(h, "<code>");
        tb_html_text(h, path);
        tb_html_raw(h, "</code>");
    }
}

static void shell_words(tb_html *h, json_t *argv) {
    size_t i;
    json_t *a;
    json_array_foreach(argv, i, a) {
        const char *s = json_string_value(a);
        if (!s) continue;
        int plain = *s && !strpbrk(s, " \t\n'\"$`\\*?;&|<>()[]{}!#~");
        tb_html_raw(h, i ? " " : "");
        if (plain) tb_html_text(h, s);
        else tb_html_textf(h, "'%s'", s);
    }
}

static void evidence_record(tb_html *h, const report *rp, json_t *rec) {
    json_t *r = json_object_get(rec, "record");
    tb_html_raw(h, "<li>run <a href=\"#run-");
    tb_html_text(h, str(rec, "run_id"));
    tb_html_raw(h, "\"><code>");
    tb_html_text(h, str(rec, "run_id"));
    tb_html_raw(h, "</code></a>");
    if (json_is_integer(json_object_get(r, "repetition")))
        tb_html_textf(h, ", repetition %lld", (long long)json_integer_value(json_object_get(r, "repetition")));
    json_t *sweep = json_object_get(r, "sweep_point");
    if (json_is_object(sweep) && json_object_size(sweep)) tb_html_raw(h, ", sweep "), compact_json(h, sweep);
    tb_html_raw(h, ": value ");
    number(h, json_object_get(rec, "value"), "%.10g");
    json_t *per = json_object_get(rec, "per_step"), *steps = json_object_get(rec, "steps_used");
    if (per && steps)
        tb_html_textf(h, "; per step (steps %lld..%lld): min %.6g, median %.6g, max %.6g",
                      (long long)json_integer_value(json_object_get(steps, "first")),
                      (long long)json_integer_value(json_object_get(steps, "last")),
                      json_number_value(json_object_get(per, "min")), json_number_value(json_object_get(per, "median")),
                      json_number_value(json_object_get(per, "max")));
    tb_html_raw(h, "<ul>");
    static const char *const lines[][2] = {{"conditions", "conditions"}, {"tokens_formula", "tokens per step"},
                                           {"detail", "read"}};
    for (size_t i = 0; i < sizeof lines / sizeof *lines; i++)
        if (str(rec, lines[i][0])) {
            tb_html_rawf(h, "<li>%s: ", lines[i][1]);
            tb_html_text(h, str(rec, lines[i][0]));
            tb_html_raw(h, "</li>");
        }
    if (json_is_array(json_object_get(r, "command"))) {
        tb_html_raw(h, "<li>command: <code>");
        shell_words(h, json_object_get(r, "command"));
        tb_html_raw(h, "</code></li>");
    }
    json_t *config = json_object_get(r, "config");
    if (json_is_object(config)) {
        tb_html_raw(h, "<li>config: ");
        tb_html_textf(h,
                      "layers %lld, hidden %lld, heads %lld, seq %lld | tp %lld, cp %lld, pp %lld, dp %lld (world "
                      "%lld) | recompute %s | global batch %lld = micro batch %lld x microbatches %lld x dp %lld%s",
                      (long long)json_integer_value(json_object_get(config, "num_layers")),
                      (long long)json_integer_value(json_object_get(config, "hidden_size")),
                      (long long)json_integer_value(json_object_get(config, "num_attention_heads")),
                      (long long)json_integer_value(json_object_get(config, "seq_length")),
                      (long long)json_integer_value(json_object_get(config, "tensor_model_parallel_size")),
                      (long long)json_integer_value(json_object_get(config, "context_parallel_size")),
                      (long long)json_integer_value(json_object_get(config, "pipeline_model_parallel_size")),
                      (long long)json_integer_value(json_object_get(config, "data_parallel_size")),
                      (long long)json_integer_value(json_object_get(config, "world_size")),
                      str(config, "recompute_granularity") ? str(config, "recompute_granularity") : "?",
                      (long long)json_integer_value(json_object_get(config, "global_batch_size")),
                      (long long)json_integer_value(json_object_get(config, "micro_batch_size")),
                      (long long)json_integer_value(json_object_get(config, "num_microbatches")),
                      (long long)json_integer_value(json_object_get(config, "data_parallel_size")),
                      json_is_true(json_object_get(config, "global_batch_identity_holds")) ? "" : " [DOES NOT HOLD]");
        tb_html_raw(h, "</li>");
    }
    json_t *git = json_object_get(r, "git");
    if (json_is_object(git)) {
        tb_html_raw(h, "<li>commit <code>");
        tb_html_text(h, str(git, "commit") ? str(git, "commit") : "(unknown)");
        tb_html_raw(h, "</code> (branch ");
        tb_html_text(h, str(git, "branch") ? str(git, "branch") : "?");
        tb_html_raw(h, json_is_true(json_object_get(git, "dirty")) ? ", DIRTY" : ", clean");
        tb_html_raw(h, ")</li>");
    }
    tb_html_raw(h, "<li>files read: ");
    size_t i;
    json_t *f;
    json_array_foreach(json_object_get(rec, "files"), i, f) {
        tb_html_raw(h, i ? ", " : "");
        if (json_string_value(f)) file_link(h, rp, rec, json_string_value(f));
    }
    tb_html_textf(h, "; files verified: %lld of the manifest's, sha256 matches</li></ul></li>",
                  (long long)json_integer_value(json_object_get(r, "files_verified")));
}

static void evidence(tb_html *h, const report *rp, json_t *ev, const char *label) {
    tb_html_raw(h, "<div class=\"evidence\"><p>");
    if (label) tb_html_textf(h, "%s: ", label);
    tb_html_raw(h, "parser <code>");
    tb_html_text(h, str(ev, "parser"));
    json_t *args = json_object_get(ev, "args");
    if (json_is_object(args) && json_object_size(args)) tb_html_raw(h, " "), compact_json(h, args);
    tb_html_raw(h, "</code> = ");
    number(h, json_object_get(ev, "value"), "%.10g");
    tb_html_raw(h, "<br><span class=\"meta\">definition: ");
    tb_html_text(h, str(ev, "definition"));
    tb_html_raw(h, "</span>");
    json_t *over = json_object_get(ev, "over_records");
    if (over)
        tb_html_textf(h, "<br>%lld record%s (repetitions): min %.10g, median %.10g, max %.10g",
                      (long long)json_integer_value(json_object_get(over, "count")),
                      json_integer_value(json_object_get(over, "count")) == 1 ? "" : "s",
                      json_number_value(json_object_get(over, "min")), json_number_value(json_object_get(over, "median")),
                      json_number_value(json_object_get(over, "max")));
    tb_html_raw(h, "</p>");
    static const char *const sides[] = {"numerator", "denominator", "treatment", "baseline", "a", "b"};
    for (size_t s = 0; s < sizeof sides / sizeof *sides; s++)
        if (json_object_get(ev, sides[s])) evidence(h, rp, json_object_get(ev, sides[s]), sides[s]);
    if (json_array_size(json_object_get(ev, "records"))) {
        tb_html_raw(h, "<ul>");
        size_t i;
        json_t *rec;
        json_array_foreach(json_object_get(ev, "records"), i, rec) evidence_record(h, rp, rec);
        tb_html_raw(h, "</ul>");
    }
    tb_html_raw(h, "</div>");
}

static void lines_list(tb_html *h, json_t *lines, const char *title) {
    if (!json_array_size(lines)) return;
    tb_html_rawf(h, "<p>%s</p><ul>", title);
    size_t i;
    json_t *l;
    json_array_foreach(lines, i, l) tb_html_elem(h, "li", json_string_value(l));
    tb_html_raw(h, "</ul>");
}

// Who signed the version's ledger heads (signing.h), as ledger.sig.json records them: listed,
// not verified here — against a key the reader trusts, `tracebook prove --require-signature`
// verifies them.
static void write_signatures(tb_html *h, const report *rp) {
    char path[REPORT_PATH_MAX + 32];
    if (snprintf(path, sizeof path, "%s/" TB_EXPERIMENT_SIGNATURES, rp->version_dir) >= (int)sizeof path) return;
    json_t *doc = json_load_file(path, 0, NULL);
    json_t *sigs = json_object_get(doc, "signatures");
    if (!json_array_size(sigs)) {
        tb_html_raw(h, "<p class=\"absent\">Not signed (tracebook sign).</p>\n");
        json_decref(doc);
        return;
    }
    tb_html_raw(h, "<p>Signed (as " TB_EXPERIMENT_SIGNATURES " records it; `tracebook prove --require-signature "
                   "PUBKEY.pem` verifies against a key you trust):</p>\n<ul>");
    size_t i;
    json_t *sg;
    json_array_foreach(sigs, i, sg) {
        tb_html_raw(h, "<li>");
        tb_html_textf(h, "%s signed the ledger head at seq %lld on %s", str(sg, "key_id") ? str(sg, "key_id") : "?",
                      (long long)json_integer_value(json_object_get(sg, "seq")),
                      str(sg, "signed_at") ? str(sg, "signed_at") : "?");
        tb_html_raw(h, "</li>");
    }
    tb_html_raw(h, "</ul>\n");
    json_decref(doc);
}

void report_write_claims(tb_html *h, const report *rp) {
    json_t *summary = json_object_get(rp->proof, "summary"), *claims = json_object_get(rp->proof, "claims");
    tb_html_raw(h, "<h2 id=\"claims\">Claims</h2>\n<p>");
    tb_html_textf(h,
                  "%lld claim%s: %lld proven, %lld not proven — re-derived from the raw files when this page was "
                  "written, as `tracebook prove --experiment %s` derives them (every file's sha256 checked, the "
                  "timings gated on how they were measured).",
                  (long long)json_integer_value(json_object_get(summary, "claims")),
                  json_integer_value(json_object_get(summary, "claims")) == 1 ? "" : "s",
                  (long long)json_integer_value(json_object_get(summary, "proven")),
                  (long long)json_integer_value(json_object_get(summary, "not_proven")), rp->experiment);
    tb_html_raw(h, "</p>\n");
    write_signatures(h, rp);
    if (!json_array_size(claims)) tb_html_raw(h, "<p class=\"absent\">This experiment version makes no claims.</p>\n");
    size_t i;
    json_t *c;
    json_array_foreach(claims, i, c) {
        int proven = json_is_true(json_object_get(c, "proven"));
        tb_html_raw(h, "<div class=\"claim\" id=\"claim-");
        tb_html_text(h, str(c, "id") ? str(c, "id") : "?");
        tb_html_rawf(h, "\"><p><span class=\"verdict %s\">%s</span> <code>", proven ? "proven" : "not-proven",
                     proven ? "PROVEN" : "NOT PROVEN");
        tb_html_text(h, str(c, "name"));
        tb_html_raw(h, "</code>");
        const char *paren = str(c, "headline") ? str(c, "headline") : json_string_value(json_array_get(json_object_get(c, "accepted"), 0));
        if (paren) tb_html_textf(h, " (%s)", paren);
        tb_html_raw(h, "</p>");
        if (str(c, "text")) tb_html_raw(h, "<p>“"), tb_html_text(h, str(c, "text")), tb_html_raw(h, "”</p>");
        tb_html_raw(h, "<p>");
        if (json_is_number(json_object_get(c, "at_most"))) {
            tb_html_raw(h, "derived ");
            number(h, json_object_get(c, "derived"), "%.10g");
            tb_html_raw(h, " &lt;= bound ");
            number(h, json_object_get(c, "at_most"), "%.10g");
            tb_html_raw(h, " (at_most)");
        } else {
            tb_html_raw(h, "claimed ");
            number(h, json_object_get(c, "claimed"), "%.10g");
            tb_html_raw(h, ", derived ");
            number(h, json_object_get(c, "derived"), "%.10g");
            tb_html_raw(h, " (relative difference ");
            number(h, json_object_get(c, "relative_difference"), "%.3g");
            tb_html_raw(h, ", tolerance ");
            number(h, json_object_get(c, "relative_tolerance"), "%.3g");
            tb_html_raw(h, ")");
        }
        tb_html_raw(h, "</p>");
        lines_list(h, json_object_get(c, "reasons"), "Why not proven:");
        lines_list(h, json_object_get(c, "accepted"), "Accepted conditions:");
        lines_list(h, json_object_get(c, "warnings"), "Warnings:");
        if (json_is_object(json_object_get(c, "evidence"))) {
            tb_html_raw(h, "<details><summary>Evidence</summary>");
            evidence(h, rp, json_object_get(c, "evidence"), NULL);
            tb_html_raw(h, "</details>");
        }
        tb_html_raw(h, "</div>\n");
    }
}

static void cell_number(tb_html *h, double v, const char *fmt, double scale) {
    tb_html_raw(h, "<td class=\"num\">");
    if (isfinite(v)) tb_html_textf(h, fmt, v * scale);
    else tb_html_raw(h, "-");
    tb_html_raw(h, "</td>");
}

void report_write_runs(tb_html *h, const report *rp) {
    tb_html_raw(h, "<h2 id=\"runs\">Runs</h2>\n<p>");
    tb_html_textf(h,
                  "%d run%s in %d configuration%s (\"config\": its number, which a plot names a configuration by when its differences are too long for an axis). The columns after \"rep\" are the config keys that differ between "
                  "the runs (as `tracebook diff` compares configs); tok/s and step ms are the tokens_per_s and "
                  "step_ms parsers' figures (median over the steps after the first, the slowest rank's step), loss "
                  "rank 0's at the last step, memory the largest peak over ranks and steps.",
                  rp->nruns, rp->nruns == 1 ? "" : "s", rp->ngroups, rp->ngroups == 1 ? "" : "s");
    tb_html_raw(h, "</p>\n<div style=\"overflow-x:auto\"><table class=\"runs\"><tr><th>run</th><th>status</th><th>config</th><th>rep</th>");
    size_t k;
    json_t *key;
    json_array_foreach(rp->differing, k, key) tb_html_elem(h, "th", json_string_value(key));
    tb_html_raw(h, "<th>tok/s</th><th>step ms</th><th>final loss</th><th>peak MiB</th><th>activations MiB</th>"
                   "<th>commit</th></tr>\n");
    for (int i = 0; i < rp->nruns; i++) {
        const report_run *r = &rp->runs[i];
        tb_html_raw(h, "<tr id=\"run-");
        tb_html_text(h, r->id);
        tb_html_raw(h, "\"><td>");
        char rel[REPORT_PATH_MAX], href[REPORT_PATH_MAX];
        snprintf(rel, sizeof rel, "%s/manifest.json", r->id);
        report_href(rp, rel, href, sizeof href);
        tb_html_link(h, href, r->id);
        tb_html_raw(h, "</td>");
        tb_html_elem(h, "td", r->status);
        tb_html_rawf(h, "<td>%d</td><td class=\"num\">%d</td>", r->group + 1, r->repetition);
        json_array_foreach(rp->differing, k, key) {
            json_t *v = json_object_get(r->flat, json_string_value(key));
            tb_html_raw(h, "<td>");
            if (v) compact_json(h, v);
            else tb_html_raw(h, "(absent)");
            tb_html_raw(h, "</td>");
        }
        cell_number(h, r->tokens_per_s, "%.1f", 1);
        cell_number(h, r->step_ms, "%.2f", 1);
        cell_number(h, r->final_loss, "%.6f", 1);
        cell_number(h, r->peak_bytes, "%.2f", 1 / 1048576.0);
        cell_number(h, r->activation_bytes, "%.2f", 1 / 1048576.0);
        json_t *git = json_object_get(r->manifest, "git");
        tb_html_raw(h, "<td><code>");
        tb_html_textf(h, "%.12s%s", str(git, "commit") ? str(git, "commit") : "-",
                      json_is_true(json_object_get(git, "dirty")) ? "+dirty" : "");
        tb_html_raw(h, "</code></td></tr>\n");
    }
    tb_html_raw(h, "</table></div>\n");
    if (!json_array_size(rp->differing) && rp->nruns > 1)
        tb_html_raw(h, "<p class=\"meta\">Every run has the same config (repetitions).</p>\n");
}
