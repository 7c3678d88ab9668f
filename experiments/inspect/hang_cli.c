// hang_cli.c — `tracebook hang RUN` (hang_cli.h).
#include "inspect/hang_cli.h"

#include <dirent.h>
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/failure_report.h"
#include "core/fileio.h"
#include "core/options.h"
#include "core/run_arg.h"
#include "core/run_dir.h"

typedef struct hang_args {
    int json, write;
    const char *artifacts;
} hang_args;

static const tb_option hang_options[] = {
    TB_OPTION("--json", hang_args, json, TB_OPT_BOOL, NULL, NULL, "print the merged report as JSON"),
    TB_OPTION("--write", hang_args, write, TB_OPT_BOOL, NULL, NULL,
              "rewrite the run directory's hang.json with this merge (not in a record)"),
    TB_ARTIFACTS_OPTION(hang_args, artifacts),
    TB_OPTIONS_END};

static const tb_command hang_command = {
    "tracebook hang", "RUN",
    "Merges the hang report parts (hang.rank-NNNNN.json) of a run: every reporting rank's pending call\n"
    "and flight-recorder tail, the ranks that wrote none (absent) with their last call as their peers\n"
    "saw it, the stuck ranks by group. RUN is a run id (or a unique prefix), a record directory or a run\n"
    "directory (docs/CLI.md).",
    hang_options, 1, 1, "tracebook hang 20261129T104512\ntracebook hang /tmp/hung-run --write",
    "no hang report part to merge, or a part or the run cannot be read"};

// Each part of dir that does not read as a rank's hang part, on stderr with why.
static void print_unreadable(const char *dir) {
    DIR *d = opendir(dir);
    struct dirent *e;
    while (d && (e = readdir(d))) {
        int rank;
        if (!tb_rank_file_match(e->d_name, TB_RANK_HANG_PART, &rank)) continue;
        char path[PATH_MAX + 300];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        json_error_t jerr;
        json_t *p = json_load_file(path, 0, &jerr);
        json_t *r = json_object_get(p, "rank");
        if (!p)
            fprintf(stderr, "tracebook hang: %s: line %d, column %d: %s\n", path, jerr.line, jerr.column, jerr.text);
        else if (!json_is_object(p))
            fprintf(stderr, "tracebook hang: %s: not a JSON object\n", path);
        else if (!json_is_integer(r) || json_integer_value(r) != rank)
            fprintf(stderr, "tracebook hang: %s: not rank %d's part (its \"rank\" is not %d)\n", path, rank, rank);
        json_decref(p);
    }
    if (d) closedir(d);
}

int tracebook_hang_main(int argc, char **argv) {
    hang_args args = {0, 0, NULL};
    tb_positional pos;
    tb_error err;
    int parsed = tb_command_parse(&hang_command, &args, argc, argv, &pos, &err);
    if (parsed != 0) return parsed > 0 ? 0 : tb_command_usage_error(&hang_command, &err);
    char dir[PATH_MAX], report_path[PATH_MAX];
    tb_run_arg run;
    int resolved = tb_run_arg_resolve(pos.items[0], args.artifacts, &run, &err);
    tb_positional_free(&pos);
    if (resolved != 0) {
        fprintf(stderr, "tracebook hang: %s\n", err.msg);
        return TB_EXIT_FAILURE;
    }
    snprintf(dir, sizeof dir, "%s", run.run_dir);
    int in_record = run.record_dir[0] != 0;
    int unreadable = 0;
    json_t *parts = tb_report_parts_read(dir, TB_RANK_HANG_PART, &unreadable, &err);
    if (!parts) {
        fprintf(stderr, "tracebook hang: %s\n", err.msg);
        return TB_EXIT_FAILURE;
    }
    if (unreadable) print_unreadable(dir);
    if (json_array_size(parts) == 0) {
        fprintf(stderr, "tracebook hang: %s: no %s to merge (no hang was reported there%s)\n", dir,
                tb_rank_file_pattern(TB_RANK_HANG_PART), unreadable ? "; some parts are unreadable" : "");
        json_decref(parts);
        return TB_EXIT_FAILURE;
    }
    if (tb_path_format(report_path, sizeof report_path, &err, "%s/" TB_RUN_HANG_REPORT, dir) != 0) {
        fprintf(stderr, "tracebook hang: %s\n", err.msg);
        json_decref(parts);
        return TB_EXIT_FAILURE;
    }
    json_t *merged = tb_hang_report_merge(parts);
    json_decref(parts);
    int rc = 0;
    if (args.write && unreadable) {
        // the merge would call those ranks absent ("the process died first"): a worse report
        fprintf(stderr, "tracebook hang: --write: %d part(s) cannot be read (above): the merge would report their "
                        "ranks as absent; %s not rewritten\n", unreadable, report_path);
        rc = TB_EXIT_FAILURE;
    } else if (args.write && in_record) {
        fprintf(stderr, "tracebook hang: --write: %s is a record's run directory; its manifest hashes hang.json, "
                "and rewriting it would alter the record\n", dir);
        rc = TB_EXIT_FAILURE;
    } else if (args.write && tb_report_merge_write(dir, TB_RANK_HANG_PART, NULL, &err) != 0) {
        fprintf(stderr, "tracebook hang: %s\n", err.msg);
        rc = TB_EXIT_FAILURE;
    }
    if (args.json) {
        json_dumpf(merged, stdout, JSON_INDENT(1));
        printf("\n");
    } else {
        tb_hang_report_print(stdout, merged, NULL);
        json_t *disk = json_load_file(report_path, 0, NULL);
        const json_int_t here = json_integer_value(json_object_get(merged, "reported_ranks"));
        const json_int_t there = json_integer_value(json_object_get(disk, "reported_ranks"));
        if (!disk) printf("  %s: none on disk%s\n", report_path, args.write ? "" : " (--write writes it)");
        else if (there != here && !args.write)
            printf("  %s on disk was merged from %lld part(s), this merge from %lld (--write rewrites it)\n",
                   report_path, (long long)there, (long long)here);
        else printf("  report: %s\n", report_path);
        json_decref(disk);
        if (unreadable) printf("  %d part(s) could not be read and are left out\n", unreadable);
    }
    json_decref(merged);
    return rc;
}
