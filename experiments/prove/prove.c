// prove.c — `tracebook prove`: re-derive every claim from the raw files of its runs.
//
//   tracebook prove [CLAIM | --all] [--experiment NAME] [--quiet] [--json] [--artifacts DIR]
//
// For each claim of each <artifacts>/<experiment>/v<version>/claims.json (or the claim named
// CLAIM): every record the claim names must be complete (manifest.json), every file its
// manifest lists must exist with the listed sha256, and the claim's parser
// (experiments/prove/parsers.h) must re-derive the claimed value within the claim's
// relative_tolerance, or, for a claim that bounds its number ("at_most": X instead of
// "value"), re-derive a number <= X; a claim derived from time must then pass the stability
// gate (stability.h: its runs measured uncontended and steady). A claim that passes prints its
// evidence; one that does not prints why and the command exits 1, naming each failed claim
// and its reason on stderr. Files in a
// record that its manifest does not list are reported (a warning: they are not evidence).
// The outcome of each claim is recorded in the catalogue (claims.proven_at, proven_value).
// --json prints every outcome as one document instead (prove.h), the reasons still on stderr.
//
// Each record is verified once however many claims use it, so proving a thousand runs is a
// matter of hashing their files (about a second).
#include <dirent.h>
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "records/anchor.h"
#include "records/catalog.h"
#include "core/run_dir.h"
#include "core/xalloc.h"
#include "prove/parsers.h"
#include "prove/prove.h"
#include "prove/prove_evidence.h"
#include "prove/prove_records.h"
#include "records/provenance.h"
#include "records/record.h"
#include "records/record_verify.h"
#include "records/signing.h"
#include "prove/stability.h"

#define DEFAULT_RELATIVE_TOLERANCE 1e-9

// ---------------------------------------------------------------------------------------
// Proving

typedef struct prove_opts {
    const char *artifacts, *claim, *experiment, *require_signature;
    int all, quiet, json, version;
} prove_opts;

typedef struct prove_state {
    prove_opts opt;
    sqlite3 *db;  // NULL when the catalogue could not be opened
    sqlite3_stmt *record_outcome;
    check_table checks;
    int claims, proven, failed;
    strbuf failures;  // "claim: reason" lines for stderr
    int print;        // the text verdicts and evidence on stdout (not for --json, not for a report)
    long long version;  // only this experiment version (-1: every version)
    int versions;       // experiment versions proven (their claims files read)
    json_t *results;  // every claim's outcome as JSON (prove.h), in the order proven
    strbuf version_failures;  // the claims file being proven: its own and experiment.json's anchors
} prove_state;

// ---------------------------------------------------------------------------------------
// Outcomes as JSON (prove.h): `tracebook prove --json` and `tracebook report` read them

// Text of one or more lines as an array of strings (NULL or "" → []).
static json_t *lines_json(const char *text) {
    json_t *a = json_array();
    for (const char *p = text; p && *p;) {
        size_t len = strcspn(p, "\n");
        if (len) json_array_append_new(a, json_stringn(p, len));
        p += len + (p[len] == '\n');
    }
    return a;
}

// Adds to every record of the evidence (and of its parts) what evidence_print_run prints beside the
// parser's figures: "record": {command, repetition, sweep_point, git, config, files_verified}.
static void evidence_add_records(json_t *ev, check_table *checks) {
    static const char *const sides[] = {"numerator", "denominator", "treatment", "baseline", "a", "b"};
    for (size_t s = 0; s < sizeof sides / sizeof *sides; s++)
        if (json_object_get(ev, sides[s])) evidence_add_records(json_object_get(ev, sides[s]), checks);
    size_t i;
    json_t *rec;
    json_array_foreach(json_object_get(ev, "records"), i, rec) {
        const char *dir = json_string_value(json_object_get(rec, "record_dir"));
        record_check *c = dir ? verify_record(checks, dir) : NULL;
        json_t *m = c ? c->manifest : NULL, *r = json_object();
        json_int_t rep;
        json_object_set(r, "command", m && json_object_get(m, "argv") ? json_object_get(m, "argv") : json_null());
        json_object_set_new(r, "repetition", tb_manifest_repetition(m, &rep) ? json_integer(rep) : json_null());
        json_object_set(r, "sweep_point", m && json_object_get(m, "sweep_point") ? json_object_get(m, "sweep_point") : json_null());
        json_object_set(r, "git", m && json_object_get(m, "git") ? json_object_get(m, "git") : json_null());
        char path[PROVE_PATH_MAX];
        json_t *config = NULL;
        if (dir && snprintf(path, sizeof path, "%s/" TB_RECORD_RUN_DIR "/" TB_RUN_CONFIG, dir) < (int)sizeof path)
            config = json_load_file(path, 0, NULL);
        if (!config && m) config = json_incref(json_object_get(m, "config"));
        json_object_set_new(r, "config", config ? evidence_config_json(config) : json_null());
        json_decref(config);
        json_object_set_new(r, "files_verified", json_integer(c ? c->files_verified : 0));
        json_object_set_new(rec, "record", r);
    }
}

static json_t *number_or_null(int have, double v) { return have && isfinite(v) ? json_real(v) : json_null(); }

// The claim's text with {value} replaced by the value (malloc'd), as evidence_print_text prints it.
static char *text_with_value(const char *text, double value) {
    strbuf b = {0};
    const char *p = text;
    for (const char *hit; (hit = strstr(p, "{value}")); p = hit + 7) sb_printf(&b, "%.*s%.6g", (int)(hit - p), p, value);
    sb_printf(&b, "%s", p);
    return b.s;
}

typedef struct claim_outcome {
    const char *exp, *id, *name;
    long long version;
    json_t *claim;  // claims.json's object, or NULL when claims.json itself did not read
    int proven, have_derived;
    double derived, relative_difference, tolerance;
    const char *headline, *reasons, *accepted, *warnings;
    json_t *evidence;
} claim_outcome;

static void add_result(prove_state *s, const claim_outcome *o) {
    if (!s->results) return;
    json_t *claim = o->claim, *bound = json_object_get(claim, "at_most"), *value = json_object_get(claim, "value");
    const char *text = json_string_value(json_object_get(claim, "text"));
    char *shown = text ? text_with_value(text, bound ? o->derived : json_number_value(value)) : NULL;
    json_t *r = json_object();
    json_object_set_new(r, "name", json_string(o->name));
    json_object_set_new(r, "experiment", json_string(o->exp));
    json_object_set_new(r, "version", json_integer(o->version));
    json_object_set_new(r, "id", o->id ? json_string(o->id) : json_null());
    json_object_set_new(r, "verdict", json_string(o->proven ? "PROVEN" : "NOT PROVEN"));
    json_object_set_new(r, "proven", json_boolean(o->proven));
    json_object_set_new(r, "headline", o->headline ? json_string(o->headline) : json_null());
    json_object_set_new(r, "reasons", lines_json(o->reasons));
    json_object_set_new(r, "text", shown ? json_string(shown) : json_null());
    json_object_set_new(r, "raw_text", text ? json_string(text) : json_null());
    json_object_set(r, "parser", json_is_string(json_object_get(claim, "parser")) ? json_object_get(claim, "parser") : json_null());
    json_object_set(r, "args", json_object_get(claim, "args") ? json_object_get(claim, "args") : json_object());
    json_object_set(r, "runs", json_is_array(json_object_get(claim, "runs")) ? json_object_get(claim, "runs") : json_array());
    json_object_set_new(r, "claimed", json_is_number(value) ? json_real(json_number_value(value)) : json_null());
    json_object_set_new(r, "at_most", json_is_number(bound) ? json_real(json_number_value(bound)) : json_null());
    json_object_set_new(r, "derived", number_or_null(o->have_derived, o->derived));
    json_object_set_new(r, "relative_difference",
                        number_or_null(o->have_derived && !bound, o->relative_difference));
    json_object_set_new(r, "relative_tolerance", number_or_null(!bound && claim, o->tolerance));
    json_object_set_new(r, "accepted", lines_json(o->accepted));
    json_object_set_new(r, "warnings", lines_json(o->warnings));
    if (o->evidence) {
        json_t *ev = json_deep_copy(o->evidence);
        evidence_add_records(ev, &s->checks);
        json_object_set_new(r, "evidence", ev);
    } else {
        json_object_set_new(r, "evidence", json_null());
    }
    json_array_append_new(s->results, r);
    free(shown);
}

static void iso_now(char *out, size_t size) {
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    strftime(out, size, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

static void record_outcome(prove_state *s, const char *exp, long long version, const char *id, int proven,
                           double derived, int have_derived) {
    if (!s->record_outcome) return;
    sqlite3_stmt *st = s->record_outcome;
    char now[32];
    iso_now(now, sizeof now);
    if (proven) sqlite3_bind_text(st, 1, now, -1, SQLITE_TRANSIENT);
    else sqlite3_bind_null(st, 1);
    if (have_derived) sqlite3_bind_double(st, 2, derived);
    else sqlite3_bind_null(st, 2);
    sqlite3_bind_text(st, 3, exp, -1, SQLITE_TRANSIENT);
    sqlite3_bind_int64(st, 4, version);
    sqlite3_bind_text(st, 5, id, -1, SQLITE_TRANSIENT);
    sqlite3_step(st);
    sqlite3_reset(st);
}

// What one claim's verdict rests on, printed under its verdict line (proven or not).
typedef struct claim_figures {
    json_t *claim, *evidence;  // evidence: the parser's, NULL when it did not run
    double claimed, derived, rel, tolerance;
    int have_derived, bounded;
    const char *const *dirs;   // the records of its runs
    size_t ndirs;
} claim_figures;

static void print_lines(const char *indent, const char *text) {
    for (const char *p = text; p && *p; p += strcspn(p, "\n") + (p[strcspn(p, "\n")] != '\0'))
        if (strcspn(p, "\n")) printf("%s%.*s\n", indent, (int)strcspn(p, "\n"), p);
}

// The claim's text with its value, the claimed and derived figures, the gate's acceptance,
// the evidence (runs: command, config, files; the parser's figures) and the warnings; without
// evidence (the parser never ran: a record did not verify, say) the runs' records.
static void print_claim_detail(prove_state *s, const claim_figures *f, const char *accepted, const char *warnings) {
    const char *text = json_string_value(json_object_get(f->claim, "text"));
    if (text) {
        printf("  \"");
        evidence_print_text(text, f->bounded && f->have_derived ? f->derived : f->claimed);
        printf("\"\n");
    }
    if (!f->have_derived) printf("  claimed %.10g, not derived\n", f->claimed);
    else if (f->bounded) printf("  derived %.10g %s bound %.10g (at_most)\n", f->derived,
                                f->derived <= f->claimed ? "<=" : ">", f->claimed);
    else
        printf("  claimed %.10g, derived %.10g (relative difference %.3g, tolerance %.3g)\n", f->claimed, f->derived,
               f->rel, f->tolerance);
    print_lines("  ", accepted);
    if (f->evidence) {
        evidence_print("  ", "", f->evidence, &s->checks);
    } else {
        printf("  runs (records):\n");
        for (size_t i = 0; i < f->ndirs; i++)
            if (f->dirs[i]) printf("    %s\n", f->dirs[i]);
    }
    if (warnings && *warnings) {
        printf("  warnings:\n");
        print_lines("    ", warnings);
    }
}

// headline: what the verdict line adds in parentheses (NULL: nothing).
static void claim_failed_because(prove_state *s, const char *name, const char *headline, const char *reason) {
    s->failed++;
    if (s->print && headline) printf("NOT PROVEN  %s (%s)\n", name, headline);
    else if (s->print) printf("NOT PROVEN  %s\n", name);
    // reason: one or more lines
    for (const char *p = reason; *p;) {
        const char *nl = strchr(p, '\n');
        int len = nl ? (int)(nl - p) : (int)strlen(p);
        if (s->print) printf("  %.*s\n", len, p);
        sb_printf(&s->failures, "tracebook prove: claim %s: %.*s\n", name, len, p);
        p += len + (nl ? 1 : 0);
    }
}

static void claim_failed(prove_state *s, const char *name, const char *reason) {
    claim_failed_because(s, name, NULL, reason);
}

// ---------------------------------------------------------------------------------------
// The stability gate (stability.h): a re-derived timing claim whose runs were not measured
// validly is NOT PROVEN; the first reason heads the verdict. Returns the headline (malloc'd)
// or NULL; *accepted: the accepted conditions' lines (malloc'd) or NULL.

static char *gate_claim(json_t *claim, json_t *evidence, strbuf *failures, char **accepted) {
    *accepted = NULL;
    tb_sampling sampling;
    char bad[512];
    if (tb_sampling_from_claim(claim, &sampling, bad, sizeof bad) != 0) {
        sb_printf(failures, "the claim's sampling rule: %s\n", bad);
        return tb_xstrdup(bad, "verdict");
    }
    tb_stability st;
    tb_stability_check(evidence, &sampling, &st);
    char *headline = NULL;
    if (st.reasons) {
        headline = tb_xstrndup(st.reasons, strcspn(st.reasons, "\n"), "verdict");
        sb_printf(failures, "%s", st.reasons);
    }
    *accepted = st.accepted;
    st.accepted = NULL;
    tb_stability_free(&st);
    return headline;
}

static void prove_claim(prove_state *s, const char *version_dir, const char *exp, long long version, json_t *claim,
                        size_t index) {
    const char *id = json_string_value(json_object_get(claim, "id"));
    char name[512];
    snprintf(name, sizeof name, "%s/v%lld/%s", exp, version, id ? id : "?");
    s->claims++;
    json_t *value = json_object_get(claim, "value"), *runs = json_object_get(claim, "runs"),
           *parser = json_object_get(claim, "parser"), *tol = json_object_get(claim, "relative_tolerance"),
           *bound = json_object_get(claim, "at_most");
    // A claim states its number ("value", matched within relative_tolerance) or bounds it
    // ("at_most": derived <= bound); either way the number compared is the one re-derived
    // here from the records, never one the claim carries.
    const char *bad = !id ? "needs id"
                      : value && bound ? "has both value and at_most (a claim states its number or bounds it)"
                      : !value && !bound ? "needs value (number) or at_most (number >= 0)"
                      : value && !json_is_number(value) ? "value must be a number"
                      : bound && !(json_is_number(bound) && json_number_value(bound) >= 0)
                          ? "at_most must be a number >= 0"
                      : bound && tol ? "relative_tolerance applies to value, not to at_most"
                      : tol && !json_is_number(tol) ? "relative_tolerance must be a number"
                      : !json_is_string(parser) ? "needs parser (a parser's name)"
                      : !json_is_array(runs) || json_array_size(runs) == 0 ? "needs runs (non-empty array)"
                                                                           : NULL;
    if (bad) {
        // a refused at_most is named with its value, as the claim has it
        char reason[512], *got = !strncmp(bad, "at_most", 7) ? json_dumps(bound, JSON_ENCODE_ANY) : NULL;
        snprintf(reason, sizeof reason, "claims[%zu] is malformed: %s%s%s%s", index, bad, got ? " (got " : "",
                 got ? got : "", got ? ")" : "");
        free(got);
        claim_failed(s, name, reason);
        claim_outcome o = {.exp = exp, .id = id, .name = name, .version = version, .claim = claim, .reasons = reason};
        add_result(s, &o);
        return;
    }
    const int bounded = bound != NULL;
    const double claimed = bounded ? json_number_value(bound) : json_number_value(value);
    const double tolerance = tol ? json_number_value(tol) : DEFAULT_RELATIVE_TOLERANCE;

    // the records, verified against their manifests
    size_t n = json_array_size(runs);
    char **dirs = tb_xcalloc(n, sizeof *dirs, "claim records");
    strbuf failures = {0}, warnings = {0};
    for (size_t i = 0; i < n; i++) {
        const char *run_id = json_string_value(json_array_get(runs, i));
        if (!run_id || !*run_id || strchr(run_id, '/') || !strcmp(run_id, "..") || !strcmp(run_id, ".")) {
            sb_printf(&failures, "runs[%zu] is not a run id\n", i);
            continue;
        }
        size_t len = strlen(version_dir) + strlen(run_id) + 2;
        dirs[i] = tb_xmalloc(len, "record path");
        snprintf(dirs[i], len, "%s/%s", version_dir, run_id);
        record_check *c = verify_record(&s->checks, dirs[i]);
        if (c->failures.len) sb_add_lines_once(&failures, c->failures.s);
        if (c->warnings.len) sb_add_lines_once(&warnings, c->warnings.s);
    }
    // claims.json, which states the claim, and experiment.json, as anchored when written
    if (s->version_failures.len) sb_add_lines_once(&failures, s->version_failures.s);
    double derived = NAN;
    json_t *evidence = NULL;
    int have_derived = 0;
    if (!failures.len) {
        tb_error err;
        if (tb_parse_claim(json_string_value(parser), json_object_get(claim, "args"), (const char *const *)dirs,
                           (int)n, &derived, &evidence, &err) != 0)
            sb_printf(&failures, "does not re-derive: %s\n", err.msg);
        else have_derived = 1;
    }
    // prove reads only what the manifests vouch for: every file the parser opened
    if (have_derived) check_read_files(&s->checks, evidence, &failures, 0);
    double diff = have_derived ? fabs(derived - claimed) : NAN;
    double rel = claimed != 0 ? diff / fabs(claimed) : diff;
    if (have_derived && bounded && !(derived <= claimed))  // a NaN derived number is above every bound
        sb_printf(&failures, "derived %.17g > bound %.17g (at_most) with parser %s\n", derived, claimed,
                  json_string_value(parser));
    else if (have_derived && !bounded && !(rel <= tolerance))
        sb_printf(&failures, "value does not re-derive: claimed %.17g, derived %.17g (relative difference %.3g > "
                             "tolerance %.3g) with parser %s\n",
                  claimed, derived, rel, tolerance, json_string_value(parser));

    char *headline = NULL, *accepted = NULL;
    if (!failures.len && have_derived) {
        headline = gate_claim(claim, evidence, &failures, &accepted);
        // the records the gate read beyond the parser's (a re-measured repetition's replaced one)
        check_read_files(&s->checks, evidence, &failures, 0);
    }
    // what the parser and the gate read after the hashes were taken is what was hashed
    check_unchanged(&s->checks, dirs, n, evidence, &failures);

    const claim_figures fig = {claim, evidence, claimed, derived, rel, tolerance, have_derived, bounded,
                               (const char *const *)dirs, n};
    if (failures.len) {
        claim_failed_because(s, name, headline, failures.s);
        // what the claim rests on, as for a proven one: the reader sees which runs and figures
        if (s->print && !s->opt.quiet) print_claim_detail(s, &fig, NULL, warnings.s);
    } else {
        s->proven++;
        if (!s->print) {
        } else if (accepted) printf("PROVEN  %s (%.*s)\n", name, (int)strcspn(accepted, "\n"), accepted);
        else printf("PROVEN  %s\n", name);
        if (s->print && !s->opt.quiet) print_claim_detail(s, &fig, accepted, warnings.s);
    }
    record_outcome(s, exp, version, id, !failures.len, derived, have_derived);
    claim_outcome o = {.exp = exp, .id = id, .name = name, .version = version, .claim = claim,
                       .proven = !failures.len, .have_derived = have_derived, .derived = derived,
                       .relative_difference = rel, .tolerance = tolerance, .headline = headline,
                       .reasons = failures.s, .accepted = accepted, .warnings = warnings.s, .evidence = evidence};
    add_result(s, &o);
    free(headline);
    free(accepted);
    json_decref(evidence);
    free(failures.s);
    free(warnings.s);
    for (size_t i = 0; i < n; i++) free(dirs[i]);
    free(dirs);
}

static void add_line(void *b, const char *line) { sb_printf(b, "%s\n", line); }

// The version's file `name` against its anchors (anchor.h): each problem a line of out.
// Returns 1 when the file was hashed (a regular file, *stamp as it was then), else 0.
static int check_version_file(prove_state *s, const char *version_dir, const char *name, strbuf *out,
                              tb_file_stamp *stamp) {
    char path[PROVE_PATH_MAX], hex[65];
    tb_error err;
    if (snprintf(path, sizeof path, "%s/%s", version_dir, name) >= (int)sizeof path) return 0;
    const int present = access(path, F_OK) == 0;
    if (present && tb_sha256_regular(path, hex, stamp, &err) != 0) {
        sb_printf(out, "%s\n", err.msg);
        return 0;
    }
    tb_anchor_verify(s->checks.anchors, version_dir, TB_ANCHOR_FILE, name, present ? hex : NULL, add_line, out);
    return present;
}

// A failure of the version as a whole, named "<experiment>/v<N> (<file>)": a claims.json that
// does not read, or one anchored and gone.
static void version_failed(prove_state *s, const char *exp_dirname, long long version, const char *file,
                           const char *reason) {
    char name[PROVE_PATH_MAX];
    snprintf(name, sizeof name, "%s/v%lld (%s)", exp_dirname, version, file);
    s->claims++;
    claim_failed(s, name, reason);
    claim_outcome o = {.exp = exp_dirname, .name = name, .version = version, .reasons = reason};
    add_result(s, &o);
}

// One claims.json: every claim in it (or the one named).
static int prove_claims_file(prove_state *s, const char *version_dir, const char *exp_dirname, long long version,
                             int *matched) {
    char path[PROVE_PATH_MAX];
    if (snprintf(path, sizeof path, "%s/" TB_EXPERIMENT_CLAIMS, version_dir) >= (int)sizeof path) return 0;
    // the file that states the claims, and the one that says how the runbook ended, must be
    // the ones anchored when they were written (anchor.h)
    strbuf *vf = &s->version_failures;
    vf->len = 0;
    if (vf->s) vf->s[0] = '\0';
    tb_file_stamp claims_stamp, status_stamp;
    const int hashed = check_version_file(s, version_dir, TB_EXPERIMENT_CLAIMS, vf, &claims_stamp);
    check_version_file(s, version_dir, TB_EXPERIMENT_STATUS, vf, &status_stamp);
    // read only when hashed (a regular file: a FIFO would block here, or serve other bytes),
    // and the claims read must be the claims hashed
    json_error_t jerr;
    json_t *root = hashed ? json_load_file(path, 0, &jerr) : NULL;
    tb_error changed;
    if (root && tb_file_unchanged(path, &claims_stamp, &changed) != 0) sb_printf(vf, "%s\n", changed.msg);
    if (!root) {
        const int missing = access(path, F_OK) != 0;
        if (s->opt.claim) return 0;  // reported only when proving everything
        if (missing && !vf->len) return 0;  // a version without claims, never anchored with any
        char reason[2 * PROVE_PATH_MAX + 256];
        if (missing || !hashed) snprintf(reason, sizeof reason, "%s", vf->s);
        else if (snprintf(reason, sizeof reason, "%s: line %d: %s", path, jerr.line, jerr.text) < 0) reason[0] = '\0';
        size_t n = strlen(reason);
        while (n > 0 && reason[n - 1] == '\n') reason[--n] = '\0';
        version_failed(s, exp_dirname, version, TB_EXPERIMENT_CLAIMS, reason);
        return 0;
    }
    json_t *claims = json_object_get(root, "claims");
    tb_anchor_records_check(s->checks.anchors, version_dir, add_line, vf);  // (unlisted records too)
    // a claim is named by where it lives: claims.json's own experiment and version must say
    // the same (else its claims would be printed, and catalogued, as another experiment's)
    const char *exp = exp_dirname;
    char reason[2 * PROVE_PATH_MAX + 256];
    if (claims_file_misnamed(root, path, exp_dirname, version, reason, sizeof reason)) {
        size_t k, asked = 0;  // the claim asked for, when in it, fails by this file's name
        json_t *c;
        json_array_foreach(claims, k, c) {
            const char *cid = json_string_value(json_object_get(c, "id"));
            asked += s->opt.claim && cid && !strcmp(cid, s->opt.claim);
        }
        *matched += (int)asked;
        if (!s->opt.claim || asked) version_failed(s, exp_dirname, version, TB_EXPERIMENT_CLAIMS, reason);
        json_decref(root);
        return 0;
    }
    if (s->db) {
        tb_error err;
        if (tb_catalog_add_claims(s->db, path, &err) != 0 && !s->opt.quiet)
            fprintf(stderr, "tracebook prove: warning: catalogue: %s\n", err.msg);
    }
    size_t i;
    json_t *claim;
    json_array_foreach(claims, i, claim) {
        const char *id = json_string_value(json_object_get(claim, "id"));
        if (s->opt.claim && (!id || strcmp(id, s->opt.claim))) continue;
        (*matched)++;
        prove_claim(s, version_dir, exp, version, claim, i);
        if (s->print && !s->opt.quiet) printf("\n");
    }
    json_decref(root);
    return 0;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

// Sorted names of the subdirectories of dir (for a stable order).
static char **list_dirs(const char *dir, int *n) {
    *n = 0;
    DIR *d = opendir(dir);
    if (!d) return NULL;
    char **names = NULL;
    int cap = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        char path[PROVE_PATH_MAX];
        struct stat st;
        if (snprintf(path, sizeof path, "%s/%s", dir, e->d_name) >= (int)sizeof path || stat(path, &st) != 0 ||
            !S_ISDIR(st.st_mode))
            continue;
        if (*n == cap)
            names = tb_xreallocarray(names, (size_t)(cap = cap ? 2 * cap : 16), sizeof *names, "directory names");
        names[(*n)++] = tb_xstrdup(e->d_name, "directory name");
    }
    closedir(d);
    if (*n) qsort(names, (size_t)*n, sizeof *names, cmp_str);
    return names;
}

static void free_names(char **names, int n) {
    for (int i = 0; i < n; i++) free(names[i]);
    free(names);
}

static const tb_option prove_options[] = {
    TB_OPTION("--all", prove_opts, all, TB_OPT_BOOL, NULL, NULL, "every claim (the default with --experiment)"),
    TB_OPTION("--experiment", prove_opts, experiment, TB_OPT_STRING, NULL, "NAME", "only this experiment's claims"),
    TB_OPTION("--version", prove_opts, version, TB_OPT_INT, "0", "N",
              "only version N of the experiments (their vN directory; 0: every version)"),
    TB_OPTION("--quiet", prove_opts, quiet, TB_OPT_BOOL, NULL, NULL, "one line per claim, no evidence"),
    TB_OPTION("-q", prove_opts, quiet, TB_OPT_BOOL, NULL, NULL, "the same as --quiet"),
    TB_OPTION("--json", prove_opts, json, TB_OPT_BOOL, NULL, NULL,
              "every claim's verdict, reasons and evidence as one JSON document (docs/RUNBOOKS.md, \"JSON output\")"),
    TB_OPTION("--require-signature", prove_opts, require_signature, TB_OPT_STRING, NULL, "PUBKEY.pem",
              "prove only what this Ed25519 key signed (tracebook sign): every record and claims file a claim reads "
              "anchored at or before a ledger head it signed"),
    TB_ARTIFACTS_OPTION(prove_opts, artifacts),
    TB_OPTIONS_END};

static const tb_command prove_command = {
    "tracebook prove", "[CLAIM]",
    "Re-derives claims from the raw files of their runs: checks the sha256 of every file each\n"
    "record's manifest lists, re-runs the claim's parser and compares with the claimed value\n"
    "within its relative_tolerance, or with its at_most bound (derived <= bound). Exits 1\n"
    "naming each claim that does not prove and why.\n"
    "CLAIM is a claim id (every " TB_EXPERIMENT_CLAIMS " holding it), EXPERIMENT/ID, or\n"
    "EXPERIMENT/vN/ID as the verdicts name it (tp_scaling/v3/tp1_tokens_per_s); or give --all.\n"
    "Every claim prints its evidence (runs: command, config, files; the figures), proven or not;\n"
    "--quiet prints the verdicts alone.",
    prove_options, 0, 1,
    "tracebook prove tp_scaling/v3/tp1_tokens_per_s\n"
    "tracebook prove --experiment tp_scaling --version 3\n"
    "tracebook prove --all --quiet",
    "a claim did not prove (each named with why), or none matched"};

// Versions the catalogue anchored whose directory is gone (an experiment or version deleted
// with its claims): each a failure, as the deletion of one claims.json is.
static void prove_gone_versions(prove_state *s) {
    sqlite3_stmt *st;
    if (!s->db || sqlite3_prepare_v2(s->db, "SELECT version_dir, seq FROM anchor_heads ORDER BY version_dir", -1, &st,
                                     NULL) != SQLITE_OK)
        return;
    while (sqlite3_step(st) == SQLITE_ROW) {
        const char *key = (const char *)sqlite3_column_text(st, 0);
        const char *slash = key ? strrchr(key, '/') : NULL;
        char *end;
        long long version = slash && slash[1] == 'v' ? strtoll(slash + 2, &end, 10) : -1;
        if (version < 0 || *end) continue;
        char exp[512], dir[PROVE_PATH_MAX];
        snprintf(exp, sizeof exp, "%.*s", (int)(slash - key), key);
        if ((s->opt.experiment && strcmp(exp, s->opt.experiment)) || (s->version >= 0 && version != s->version))
            continue;
        if (snprintf(dir, sizeof dir, "%s/%s", s->opt.artifacts, key) >= (int)sizeof dir || access(dir, F_OK) == 0)
            continue;
        char reason[PROVE_PATH_MAX + 256];
        snprintf(reason, sizeof reason,
                 "%s is gone, but the catalogue anchored %lld entries of it (its records, claims.json, "
                 "experiment.json): deleted after they were written",
                 dir, (long long)sqlite3_column_int64(st, 1));
        version_failed(s, exp, version, TB_EXPERIMENT_LEDGER, reason);
    }
    sqlite3_finalize(st);
}

// Every experiment (or the one of opt.experiment), every version (or s->version), every claim
// (or opt.claim). *experiments, *matched: how many experiments and claims were found.
static void prove_scan(prove_state *s, int *experiments, int *matched) {
    int nexp = 0;
    char **exps = list_dirs(s->opt.artifacts, &nexp);
    for (int e = 0; e < nexp; e++) {
        if (s->opt.experiment && strcmp(exps[e], s->opt.experiment)) continue;
        (*experiments)++;
        char exp_dir[PROVE_PATH_MAX];
        if (snprintf(exp_dir, sizeof exp_dir, "%s/%s", s->opt.artifacts, exps[e]) >= (int)sizeof exp_dir) continue;
        int nver = 0;
        char **vers = list_dirs(exp_dir, &nver);
        for (int v = 0; v < nver; v++) {
            char *end;
            long long version = vers[v][0] == 'v' ? strtoll(vers[v] + 1, &end, 10) : -1;
            if (version < 0 || *end || (s->version >= 0 && version != s->version)) continue;
            char version_dir[PROVE_PATH_MAX];
            if (snprintf(version_dir, sizeof version_dir, "%s/%s", exp_dir, vers[v]) >= (int)sizeof version_dir)
                continue;
            s->versions++;
            prove_claims_file(s, version_dir, exps[e], version, matched);
        }
        free_names(vers, nver);
    }
    free_names(exps, nexp);
    if (!s->opt.claim) prove_gone_versions(s);
}

json_t *tb_prove_collect(const char *artifacts, const char *experiment, long long version, tb_error *err) {
    struct stat st;
    if (stat(artifacts, &st) != 0 || !S_ISDIR(st.st_mode)) {
        tb_fail(err, "%s: no such artifacts directory", artifacts);
        return NULL;
    }
    prove_state s;
    memset(&s, 0, sizeof s);
    s.opt.artifacts = artifacts;
    s.opt.experiment = experiment;
    s.opt.quiet = 1;
    s.version = version;
    s.results = json_array();
    tb_error cat_err;
    if (tb_catalog_open(&s.db, artifacts, &cat_err) != 0) s.db = NULL;  // the anchors then say so
    s.checks.anchors = tb_anchor_verifier_new(s.db);
    int experiments = 0, matched = 0;
    prove_scan(&s, &experiments, &matched);
    json_t *doc = json_pack("{s:o, s:{s:i, s:i, s:i, s:I}}", "claims", s.results, "summary", "claims", s.claims,
                            "proven", s.proven, "not_proven", s.failed, "records_verified", (json_int_t)s.checks.n);
    free(s.failures.s);
    free(s.version_failures.s);
    check_table_free(&s.checks);
    tb_anchor_verifier_free(s.checks.anchors);
    if (s.db) sqlite3_close(s.db);
    return doc;
}

// CLAIM as the verdicts name it: ID, EXPERIMENT/ID or EXPERIMENT/vN/ID (name rewritten in place to
// the ID; the experiment into exp, which s->opt.experiment then points to). The experiment and
// version must agree with --experiment and --version when both are given. 0, or -1 with err set.
static int parse_claim_name(prove_state *s, char *name, char *exp, tb_error *err) {
    char *first = strchr(name, '/');
    if (!first) return 0;
    char *second = strchr(first + 1, '/');
    if (second && strchr(second + 1, '/'))
        return tb_fail(err, "tracebook prove: CLAIM '%s': more than EXPERIMENT/vN/ID", name);
    char *end = NULL;
    long long version = -1;
    if (second) {
        version = first[1] == 'v' && first[2] >= '0' && first[2] <= '9' ? strtoll(first + 2, &end, 10) : -1;
        if (version < 1 || end != second)
            return tb_fail(err, "tracebook prove: CLAIM '%s': '%.*s' is not a version (vN, N from 1)", name,
                           (int)(second - first - 1), first + 1);
    }
    const char *id = second ? second + 1 : first + 1;
    if (first == name || !*id) return tb_fail(err, "tracebook prove: CLAIM '%s': EXPERIMENT/ID with both named", name);
    snprintf(exp, 512, "%.*s", (int)(first - name), name);
    if (s->opt.experiment && strcmp(s->opt.experiment, exp))
        return tb_fail(err, "tracebook prove: CLAIM '%s' names experiment %s, --experiment %s", name, exp,
                       s->opt.experiment);
    if (version > 0 && s->version > 0 && s->version != version)
        return tb_fail(err, "tracebook prove: CLAIM '%s' names version %lld, --version %lld", name, version,
                       s->version);
    if (version > 0) s->version = version;
    s->opt.experiment = exp;
    memmove(name, id, strlen(id) + 1);
    return 0;
}

int tracebook_prove_main(int argc, char **argv) {
    prove_state s;
    memset(&s, 0, sizeof s);
    tb_positional pos;
    tb_error err;
    int parsed = tb_command_parse(&prove_command, &s.opt, argc, argv, &pos, &err);
    if (parsed != 0) return parsed > 0 ? 0 : tb_command_usage_error(&prove_command, &err);
    char claim_arg[512] = "", exp_arg[512] = "";
    if (pos.n && snprintf(claim_arg, sizeof claim_arg, "%s", pos.items[0]) >= (int)sizeof claim_arg) {
        tb_fail(&err, "tracebook prove: CLAIM '%.64s...' is longer than %zu bytes", pos.items[0], sizeof claim_arg - 1);
        tb_positional_free(&pos);
        return tb_command_usage_error(&prove_command, &err);
    }
    s.opt.claim = pos.n ? claim_arg : NULL;
    tb_positional_free(&pos);
    s.print = !s.opt.json;
    s.version = s.opt.version > 0 ? s.opt.version : -1;
    if (s.opt.version < 0 || (s.opt.claim && parse_claim_name(&s, claim_arg, exp_arg, &err) != 0)) {
        if (s.opt.version < 0) tb_fail(&err, "tracebook prove: flag --version: %d is negative", s.opt.version);
        return tb_command_usage_error(&prove_command, &err);
    }
    if (s.opt.json) s.results = json_array();
    if (!s.opt.claim && !s.opt.all && !s.opt.experiment) {
        tb_fail(&err, "tracebook prove: name a CLAIM, or --all");
        json_decref(s.results);
        return tb_command_usage_error(&prove_command, &err);
    }
    if (s.opt.claim && s.opt.all) {
        tb_fail(&err, "tracebook prove: CLAIM and --all exclude each other");
        json_decref(s.results);
        return tb_command_usage_error(&prove_command, &err);
    }
    struct stat st;
    if (stat(s.opt.artifacts, &st) != 0 || !S_ISDIR(st.st_mode)) {
        fprintf(stderr, "tracebook prove: %s: no such artifacts directory\n", s.opt.artifacts);
        json_decref(s.results);
        return TB_EXIT_FAILURE;
    }
    // a required signer's public key, loaded before anything is proven
    tb_public_key *signer = NULL;
    if (s.opt.require_signature && !(signer = tb_public_key_load(s.opt.require_signature, &err))) {
        fprintf(stderr, "tracebook prove: flag --require-signature: %s\n", err.msg);
        json_decref(s.results);
        return TB_EXIT_USAGE;
    }
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);

    // the catalogue records each outcome (one transaction); proving goes on without it
    if (tb_catalog_open(&s.db, s.opt.artifacts, &err) != 0) {
        fprintf(stderr, "tracebook prove: warning: outcomes not recorded: %s\n", err.msg);
    } else if (sqlite3_exec(s.db, "BEGIN IMMEDIATE", NULL, NULL, NULL) != SQLITE_OK ||
               sqlite3_prepare_v2(s.db,
                                  "UPDATE claims SET proven_at = ?1, proven_value = ?2 "
                                  "WHERE experiment = ?3 AND version = ?4 AND id = ?5",
                                  -1, &s.record_outcome, NULL) != SQLITE_OK) {
        fprintf(stderr, "tracebook prove: warning: outcomes not recorded: %s\n", sqlite3_errmsg(s.db));
        sqlite3_close(s.db);
        s.db = NULL;
    }

    s.checks.anchors = tb_anchor_verifier_new(s.db);
    if (signer) {
        const tb_anchor_signer required = tb_public_key_signer(signer);
        tb_anchor_verifier_require_signature(s.checks.anchors, &required);
    }
    int matched = 0, experiments = 0;
    prove_scan(&s, &experiments, &matched);
    tb_anchor_verifier_free(s.checks.anchors);
    s.checks.anchors = NULL;

    if (s.db) {
        sqlite3_finalize(s.record_outcome);
        if (sqlite3_exec(s.db, "COMMIT", NULL, NULL, NULL) != SQLITE_OK)
            fprintf(stderr, "tracebook prove: warning: outcomes not recorded: %s\n", sqlite3_errmsg(s.db));
        sqlite3_close(s.db);
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double seconds = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
    int rc = 0;
    if (s.opt.experiment && experiments == 0) {
        fprintf(stderr, "tracebook prove: no experiment '%s' in %s\n", s.opt.experiment, s.opt.artifacts);
        rc = TB_EXIT_FAILURE;
    } else if (s.version > 0 && s.versions == 0) {
        fprintf(stderr, "tracebook prove: no version v%lld of %s in %s\n", s.version,
                s.opt.experiment ? s.opt.experiment : "any experiment", s.opt.artifacts);
        rc = TB_EXIT_FAILURE;
    } else if (s.opt.claim && matched == 0) {
        fprintf(stderr, "tracebook prove: claim '%s' not found in %s/%s/v*/" TB_EXPERIMENT_CLAIMS "\n", s.opt.claim,
                s.opt.artifacts, s.opt.experiment ? s.opt.experiment : "*");
        rc = TB_EXIT_FAILURE;
    }
    if (s.opt.json) {
        json_t *doc = json_pack("{s:o, s:{s:i, s:i, s:i, s:I, s:f}}", "claims", s.results, "summary", "claims",
                                s.claims, "proven", s.proven, "not_proven", s.failed, "records_verified",
                                (json_int_t)s.checks.n, "seconds", seconds);
        json_dumpf(doc, stdout, JSON_INDENT(1) | JSON_REAL_PRECISION(17));
        printf("\n");
        json_decref(doc);
    } else {
        printf("prove: %d claim%s, %d proven, %d not proven; %zu record%s verified (%.3f s)%s%s\n", s.claims,
               s.claims == 1 ? "" : "s", s.proven, s.failed, s.checks.n, s.checks.n == 1 ? "" : "s", seconds,
               signer ? "; signatures required: " : "", signer ? tb_public_key_id(signer) : "");
    }
    if (s.failures.len) {
        fflush(stdout);
        fputs(s.failures.s, stderr);
        rc = TB_EXIT_FAILURE;
    }
    free(s.failures.s);
    free(s.version_failures.s);
    check_table_free(&s.checks);
    tb_public_key_free(signer);
    return rc;
}
