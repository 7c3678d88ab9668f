// test_subcommands.c — tracebook's main dispatches to each part's command table
// (core/subcommand.h; experiments/cli/tracebook.c): every command `tracebook --help` lists
// is listed once across the parts' tables, and each one reached by its name answers --help
// with its own usage line; a name no table has is refused with exit status 2.
#include <string.h>

#include "tb_shell.h"
#include "tb_test.h"

#define TRACEBOOK TB_BIN_DIR "/tracebook"
#define MAX_COMMANDS 64

static tb_output sh;

// The command names of `tracebook --help`: its "  NAME  summary" lines under each heading.
static int listed(char names[MAX_COMMANDS][32]) {
    int n = 0;
    for (const char *line = sh.out; line && *line && n < MAX_COMMANDS;) {
        const char *end = strchr(line, '\n');
        size_t len = end ? (size_t)(end - line) : strlen(line);
        if (len > 2 && line[0] == ' ' && line[1] == ' ' && line[2] != ' ') {
            size_t w = strcspn(line + 2, " ");
            if (w < 32) {
                memcpy(names[n], line + 2, w);
                names[n++][w] = '\0';
            }
        }
        line = end ? end + 1 : NULL;
    }
    return n;
}

TB_TEST(every_listed_command_is_listed_once_and_answers_help_with_its_own_usage) {
    TB_REQUIRE(tb_run(&sh, NULL, "'%s' --help", TRACEBOOK) == 0, "%s", sh.err);
    char names[MAX_COMMANDS][32];
    int n = listed(names);
    TB_CHECK(n >= 20, "only %d commands listed:\n%s", n, sh.out);
    for (int i = 0; i < n; i++)
        for (int j = i + 1; j < n; j++) TB_CHECK(strcmp(names[i], names[j]), "'%s' is listed twice", names[i]);
    for (int i = 0; i < n; i++) {
        int rc = tb_run(&sh, NULL, "'%s' %s --help", TRACEBOOK, names[i]);
        char usage[64];  // "usage: tracebook " and a name of under 32 characters
        snprintf(usage, sizeof usage, "usage: tracebook %.31s", names[i]);
        TB_CHECK(rc == 0 && strstr(sh.out, usage), "'tracebook %s --help': exit %d, stdout:\n%s", names[i], rc,
                 sh.out);
    }
}

TB_TEST(an_unknown_command_is_refused_by_name_with_exit_status_2) {
    int rc = tb_run(&sh, NULL, "'%s' frobnicate", TRACEBOOK);
    TB_CHECK(rc == 2, "exit %d", rc);
    TB_CHECK(strstr(sh.err, "unknown command 'frobnicate'"), "stderr:\n%s", sh.err);
}

// `tracebook --version` and `pretrain_gpt --version` (core/version.h): one line naming the
// version and the commit they were built from — the checkout's HEAD, which the build wrote
// (scripts/revision.cmake runs at every build); "unknown" only outside a git checkout.
TB_TEST(both_binaries_name_their_version_and_commit) {
    char head[64] = "unknown";
    if (tb_run(&sh, NULL, "git -C '%s' rev-parse --verify HEAD", TB_SOURCE_DIR) == 0 && strlen(sh.out) >= 12)
        snprintf(head, sizeof head, "%.12s", sh.out);
    const char *programs[] = {"tracebook", "pretrain_gpt"};
    for (int i = 0; i < 2; i++) {
        int rc = tb_run(&sh, NULL, "'%s/%s' --version", TB_BIN_DIR, programs[i]);
        char want[128];
        snprintf(want, sizeof want, "%s %s (commit %s, ", programs[i], TB_PROJECT_VERSION, head);
        TB_CHECK(rc == 0 && strncmp(sh.out, want, strlen(want)) == 0 && strstr(sh.out, " build, ") &&
                     strchr(sh.out, '\n') == sh.out + strlen(sh.out) - 1,
                 "'%s --version': exit %d, want one line starting '%s': %s", programs[i], rc, want, sh.out);
    }
}

int main(void) {
    TB_RUN(every_listed_command_is_listed_once_and_answers_help_with_its_own_usage);
    TB_RUN(an_unknown_command_is_refused_by_name_with_exit_status_2);
    TB_RUN(both_binaries_name_their_version_and_commit);
    tb_output_free(&sh);
    return tb_test_summary();
}
