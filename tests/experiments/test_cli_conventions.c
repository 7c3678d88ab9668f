// test_cli_conventions.c — docs/CLI.md's table against every subcommand's parser: each
// command `tracebook --help` lists has a row, and each row's cells say exactly which of the
// shared spellings (RUN, --experiment, --output, --top, -j/--jobs, --from, --json) its
// --help shows; no help shows an old spelling; every help has an example of itself and its
// exit statuses; the old spellings are refused naming the new one.
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tb_shell.h"
#include "tb_test.h"

#define TRACEBOOK TB_BIN_DIR "/tracebook"
#define MAX_COMMANDS 64
#define NCOLS 7

static tb_output sh;

// The columns after "command", in the table's order.
static const char *const columns[NCOLS] = {"RUN", "--experiment", "--output", "--top", "-j/--jobs", "--from", "--json"};

typedef struct row {
    char name[32];
    int yes[NCOLS];
} row;

// The rows of the table whose header starts "| command | RUN |". Returns the count, -1 when
// the header is not there or a row is malformed.
static int table_rows(const char *doc, row *rows, int max) {
    const char *at = strstr(doc, "| command | RUN |");
    if (!at) return -1;
    at = strchr(at, '\n');
    if (!at) return -1;
    at = strchr(at + 1, '\n');  // the |---| line
    int n = 0;
    while (at && at[1] == '|' && n < max) {
        const char *line = at + 1, *end = strchr(line, '\n');
        size_t len = end ? (size_t)(end - line) : strlen(line);
        char buf[512];
        if (len >= sizeof buf) return -1;
        memcpy(buf, line, len);
        buf[len] = '\0';
        char *cell[NCOLS + 2];
        int k = 0;
        for (char *p = strtok(buf, "|"); p && k < NCOLS + 2; p = strtok(NULL, "|")) {
            while (isspace((unsigned char)*p)) p++;
            char *e = p + strlen(p);
            while (e > p && isspace((unsigned char)e[-1])) *--e = '\0';
            cell[k++] = p;
        }
        if (k != NCOLS + 1 || cell[0][0] != '`') return -1;
        snprintf(rows[n].name, sizeof rows[n].name, "%.*s", (int)strcspn(cell[0] + 1, "`"), cell[0] + 1);
        for (int c = 0; c < NCOLS; c++) {
            if (strcmp(cell[c + 1], "yes") && strcmp(cell[c + 1], "-")) return -1;
            rows[n].yes[c] = !strcmp(cell[c + 1], "yes");
        }
        n++;
        at = end;
    }
    return n;
}

// The command names of `tracebook --help` ("  NAME  summary" lines).
static int listed(const char *help, char names[MAX_COMMANDS][32]) {
    int n = 0;
    for (const char *line = help; line && *line && n < MAX_COMMANDS;) {
        const char *end = strchr(line, '\n');
        if (line[0] == ' ' && line[1] == ' ' && line[2] != ' ') {
            size_t w = strcspn(line + 2, " \n");
            if (w < 32) snprintf(names[n++], 32, "%.*s", (int)w, line + 2);
        }
        line = end ? end + 1 : NULL;
    }
    return n;
}

// Whether the flags section of a --help lists flag: a line "  FLAG " or "  FLAG\n".
static int has_flag(const char *help, const char *flag) {
    char a[64], b[64];
    snprintf(a, sizeof a, "\n  %s ", flag);
    snprintf(b, sizeof b, "\n  %s\n", flag);
    return strstr(help, a) || strstr(help, b);
}

// Whether the usage line names a RUN argument.
static int takes_run(const char *help) {
    const char *end = strchr(help, '\n');
    size_t len = end ? (size_t)(end - help) : strlen(help);
    char usage[256];
    snprintf(usage, sizeof usage, "%.*s ", (int)len, help);
    return strstr(usage, " RUN ") != NULL;
}

static int column_in_help(int c, const char *help) {
    switch (c) {
    case 0: return takes_run(help);
    case 4: return has_flag(help, "-j") && has_flag(help, "--jobs");
    default: return has_flag(help, columns[c]);
    }
}

TB_TEST(every_subcommand_has_a_row_and_its_help_matches_it) {
    char *doc = tb_slurp(TB_SOURCE_DIR "/docs/CLI.md");
    TB_REQUIRE(doc, "docs/CLI.md is not readable");
    row rows[MAX_COMMANDS];
    int nrows = table_rows(doc, rows, MAX_COMMANDS);
    TB_REQUIRE(nrows > 0, "docs/CLI.md: no well-formed table under '| command | RUN |' (%d)", nrows);
    TB_REQUIRE(tb_run(&sh, NULL, "'%s' --help", TRACEBOOK) == 0, "%s", sh.err);
    char names[MAX_COMMANDS][32];
    int n = listed(sh.out, names);
    TB_CHECK(n == nrows, "tracebook --help lists %d commands, docs/CLI.md's table %d", n, nrows);
    for (int i = 0; i < n; i++) {
        const row *r = NULL;
        for (int k = 0; k < nrows && !r; k++)
            if (!strcmp(rows[k].name, names[i])) r = &rows[k];
        TB_CHECK(r, "'%s' has no row in docs/CLI.md's table", names[i]);
        if (!r) continue;
        int rc = tb_run(&sh, NULL, "'%s' %s --help", TRACEBOOK, names[i]);
        TB_CHECK(rc == 0, "%s --help: exit %d", names[i], rc);
        for (int c = 0; c < NCOLS; c++)
            TB_CHECK(column_in_help(c, sh.out) == r->yes[c], "%s: docs/CLI.md says %s for %s, its --help %s it",
                     names[i], r->yes[c] ? "yes" : "-", columns[c], r->yes[c] ? "lacks" : "has");
        const char *old[] = {"--out", "--max", "--entry"};
        for (size_t k = 0; k < sizeof old / sizeof *old; k++)
            TB_CHECK(!has_flag(sh.out, old[k]), "%s --help lists the old spelling %s", names[i], old[k]);
        char example[64];
        snprintf(example, sizeof example, "\nexample:\n  tracebook %.31s", names[i]);
        TB_CHECK(strstr(sh.out, example), "%s --help has no example of itself:\n%s", names[i], sh.out);
        TB_CHECK(strstr(sh.out, "\nexit status:\n  0  success\n  1  ") && strstr(sh.out, "\n  2  "),
                 "%s --help lists no exit statuses:\n%s", names[i], sh.out);
    }
    for (int k = 0; k < nrows; k++) {
        int found = 0;
        for (int i = 0; i < n; i++) found |= !strcmp(rows[k].name, names[i]);
        TB_CHECK(found, "docs/CLI.md has a row for '%s', which tracebook --help does not list", rows[k].name);
    }
    free(doc);
}

// An old spelling is a usage error (exit 2) whose message names the new one.
static void refused(const char *args, const char *new_spelling) {
    int rc = tb_run(&sh, NULL, "'%s' %s", TRACEBOOK, args);
    TB_CHECK(rc == 2 && strstr(sh.err, new_spelling), "tracebook %s: exit %d, stderr:\n%s", args, rc, sh.err);
}

TB_TEST(old_spellings_are_refused_naming_the_new_one) {
    refused("index --out /tmp/never.sqlite", "'--output'");
    refused("report --experiment x --out /tmp/never.html", "'--output'");
    refused("chain --from main --to f --max 2", "'--top'");
    refused("map --entry main trace.json", "'--from'");
    refused("walk layer.0 --entry main", "'--from'");
    // a usage error is said before anything is read: with no artifacts directory too
    refused("ls tp_scaling --artifacts /nonexistent/artifacts", "--experiment tp_scaling");
    refused("report tp_scaling --artifacts /nonexistent/artifacts", "--experiment tp_scaling");
    refused("map --json /nonexistent/out.json t.json", "--output /nonexistent/out.json");
    // a flag no command has is still an unknown flag, not a rename
    refused("index --frobnicate", "unknown flag '--frobnicate'");
}

// A flag given twice is refused naming both values (it silently took the last), -j and --jobs
// being one flag; a list flag (--collective) takes every use.
TB_TEST(a_flag_given_twice_is_refused_naming_both_values) {
    refused("steps x --step 1 --step 2", "flag --step given twice ('1' as --step, then '2' as --step): give it once");
    refused("plan --gpus 8 --gpus=16", "flag --gpus given twice ('8' as --gpus, then '16' as --gpus): give it once");
    refused("replay x -j 2 --jobs 3", "flag --jobs given twice ('2' as -j, then '3' as --jobs)");
    // a job count out of range is a usage error too (replay took -j 0 as 1)
    refused("replay x -j 0", "flag -j: '0' is not a number of parallel build jobs from 1 to 1024");
    refused("index -j 0", "flag -j: '0' is not a number of parallel parses from 1 to 256");
    int rc = tb_run(&sh, NULL, "'%s' index --collective a --collective b --compdb /nonexistent", TRACEBOOK);
    TB_CHECK(rc == 1 && strstr(sh.err, "/nonexistent: no compilation database there"),
             "a list flag twice is two values: exit %d:\n%s", rc, sh.err);
}

// The RUN argument (core/run_arg.h), the same for every command that reads one run: here
// `tracebook ckpt --json`, whose output is the run's checkpoint.json, marked per run so each
// answer says which run was read.
static void fake_run(const char *dir, const char *marker, int record) {
    char path[512], text[256];
    tb_run(&sh, NULL, "mkdir -p '%s%s'", dir, record ? "/run" : "");
    snprintf(path, sizeof path, "%s%s/checkpoint.json", dir, record ? "/run" : "");
    snprintf(text, sizeof text, "{\"saves\": [], \"marker\": \"%s\"}\n", marker);
    tb_write_text(path, text);
    if (record) {
        snprintf(path, sizeof path, "%s/manifest.json", dir);
        tb_write_text(path, "{\"run_id\": \"from-the-manifest\"}\n");
    }
}

static int ckpt_reads(const char *run, const char *artifacts, const char *marker) {
    int rc = tb_run(&sh, NULL, "'%s' ckpt '%s' --json --artifacts '%s'", TRACEBOOK, run, artifacts);
    return rc == 0 && strstr(sh.out, marker) != NULL;
}

TB_TEST(a_run_is_named_by_id_prefix_record_or_run_directory) {
    char art[256], bare[256];
    tb_tmp_path(art, sizeof art, "cli_conventions_artifacts");
    tb_tmp_path(bare, sizeof bare, "cli_conventions_bare_run");
    tb_run(&sh, NULL, "rm -rf '%s' '%s'", art, bare);
    char a[512], b[512];
    snprintf(a, sizeof a, "%s/exp/v1/20261201T000000-aaaa1111", art);
    snprintf(b, sizeof b, "%s/exp/v2/20261201T000500-bbbb2222", art);
    fake_run(a, "run-a", 1);
    fake_run(b, "run-b", 1);
    fake_run(bare, "run-bare", 0);
    TB_CHECK(ckpt_reads("20261201T000000-aaaa1111", art, "run-a"), "by id:\n%s%s", sh.out, sh.err);
    TB_CHECK(ckpt_reads("20261201T0005", art, "run-b"), "by a unique prefix:\n%s%s", sh.out, sh.err);
    TB_CHECK(ckpt_reads(a, art, "run-a"), "by the record's directory:\n%s%s", sh.out, sh.err);
    TB_CHECK(ckpt_reads(bare, art, "run-bare"), "by a run directory:\n%s%s", sh.out, sh.err);
    int rc = tb_run(&sh, NULL, "'%s' ckpt 20261201T000 --artifacts '%s'", TRACEBOOK, art);
    TB_CHECK(rc == 1 && strstr(sh.err, "names 2 runs") && strstr(sh.err, "give more of the id"),
             "an ambiguous prefix: exit %d\n%s", rc, sh.err);
    rc = tb_run(&sh, NULL, "'%s' steps 20991231 --artifacts '%s'", TRACEBOOK, art);
    TB_CHECK(rc == 1 && strstr(sh.err, "no run id under") && strstr(sh.err, "20991231"), "an unknown id: exit %d\n%s",
             rc, sh.err);
    rc = tb_run(&sh, NULL, "'%s' replay '%s' --artifacts '%s'", TRACEBOOK, bare, art);
    TB_CHECK(rc == 1 && strstr(sh.err, "not a record"), "replay of a bare run directory: exit %d\n%s", rc, sh.err);
    tb_run(&sh, NULL, "rm -rf '%s' '%s'", art, bare);
}

int main(void) {
    TB_RUN(every_subcommand_has_a_row_and_its_help_matches_it);
    TB_RUN(old_spellings_are_refused_naming_the_new_one);
    TB_RUN(a_flag_given_twice_is_refused_naming_both_values);
    TB_RUN(a_run_is_named_by_id_prefix_record_or_run_directory);
    tb_output_free(&sh);
    return tb_test_summary();
}
