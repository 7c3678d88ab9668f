// index_summary.c — the summary of `tracebook index` (index_summary.h).
#include "index_summary.h"

#include <jansson.h>
#include <stdio.h>

static double per_second(long n, double secs) { return secs > 0 ? (double)n / secs : 0.0; }

static void print_json(const ix_summary *s, const ix_run_figures *r) {
    json_t *doc = json_pack(
        "{s:s, s:{s:I, s:I, s:I, s:I, s:I}, s:{s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I},"
        " s:{s:I, s:I, s:I, s:I, s:f, s:f, s:f}, s:I, s:I}",
        "index", r->out,
        "units", "total", (json_int_t)s->tus, "with_errors", (json_int_t)s->tus_with_errors, "failed",
        (json_int_t)s->tus_failed, "parsed", (json_int_t)r->parsed, "reused", (json_int_t)r->reused,
        "counts", "functions", (json_int_t)s->functions, "defined", (json_int_t)s->definitions, "calls",
        (json_int_t)s->calls, "callbacks", (json_int_t)s->callbacks, "field_targets", (json_int_t)s->field_targets,
        "range_sites", (json_int_t)s->range_sites, "collective_sites", (json_int_t)s->collective_sites, "targets",
        (json_int_t)s->targets, "target_rows", (json_int_t)s->target_rows, "files", (json_int_t)s->files,
        "library_functions", (json_int_t)s->library_functions, "library_found", (json_int_t)s->library_found,
        "parsed", "files", (json_int_t)r->files, "lines", (json_int_t)r->lines, "error_diagnostics",
        (json_int_t)s->errors, "reduced_command_lines", (json_int_t)r->reduced, "wall_s", r->seconds, "files_per_s",
        per_second(r->files, r->seconds), "lines_per_s", per_second(r->lines, r->seconds),
        "duplicate_entries_skipped", (json_int_t)r->duplicates, "exit_status", (json_int_t)(s->tus_failed ? 1 : 0));
    json_dumpf(doc, stdout, JSON_INDENT(1));
    fputc('\n', stdout);
    json_decref(doc);
}

void ix_print_summary(const ix_summary *sum, const ix_run_figures *run, int json) {
    if (json) {
        print_json(sum, run);
        return;
    }
    printf("tracebook index: %ld TUs (%ld with errors, %ld failed) in %.1f s -> %s\n", sum->tus, sum->tus_with_errors,
           sum->tus_failed, run->seconds, run->out);
    printf("  functions %ld (%ld defined), calls %ld, callbacks %ld, field targets %ld, range sites %ld, "
           "collective sites %ld, targets %ld (%ld unit rows), files %ld, parse failures %ld, error diagnostics %ld\n",
           sum->functions, sum->definitions, sum->calls, sum->callbacks, sum->field_targets, sum->range_sites,
           sum->collective_sites, sum->targets, sum->target_rows, sum->files, sum->tus_failed, sum->errors);
    printf("  functions without a definition here %ld (%ld found in a library of their binary's link)\n",
           sum->library_functions, sum->library_found);
    if (run->reduced)
        printf("  (%ld units were parsed with a reduced command line: libclang rejected their flags; "
               "files.diagnostics says which)\n",
               run->reduced);
    if (run->duplicates) printf("  (%zu database entries for files already listed were skipped)\n", run->duplicates);
    printf("  TUs parsed %zu, reused %zu; files %ld, lines %ld (parsed: sources and the files they include, each "
           "once); wall %.3f s; %.0f files/s, %.0f lines/s\n",
           run->parsed, run->reused, run->files, run->lines, run->seconds, per_second(run->files, run->seconds),
           per_second(run->lines, run->seconds));
}
