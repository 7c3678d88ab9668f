// test_soak_runbook.c — runbooks/soak.lua end to end through the binary, at a small size: the
// interrupted run's processes chain through their checkpoints (each loads the directory the one
// before saved into, inside that one's record), and both exact claims prove — every loss of
// every process bit for bit the uninterrupted run's, no high-water rising after the warm-up.
// Then the checkpoint a segment resumed from, changed, makes prove refuse. (The parsers on known numbers:
// test_resume_parsers.c.)
#include <jansson.h>
#include <string.h>

#include "tb_run_dir.h"
#include "tb_shell.h"
#include "tb_test.h"

#define TRACEBOOK TB_BIN_DIR "/tracebook"
#define ART TB_TEST_TMPDIR "/soak_runbook"

static tb_output sh;

static int has_line(const char *out, const char *line) {
    size_t n = strlen(line);
    for (const char *p = out; p && (p = strstr(p, line)); p++)
        if ((p == out || p[-1] == '\n') && (p[n] == '\n' || p[n] == ' ' || p[n] == 0)) return 1;
    return 0;
}

TB_TEST(the_soak_resumes_bitwise_and_its_memory_stays_flat) {
    TB_REQUIRE(tb_run(&sh, TB_SOURCE_DIR,
                      "rm -rf %s && %s run runbooks/soak.lua --set iters=15 --set resumes=2 --set save_interval=2 "
                      "--artifacts %s",
                      ART, TRACEBOOK, ART) == 0,
               "%s\n%s", sh.out, sh.err);
    // the uninterrupted run and 3 segments (steps 1-5, 6-10, 11-15), each saving into its own
    // record; the 2nd and 3rd load the previous one's checkpoints
    char *found = NULL;
    tb_shell(&found, "grep -l '\"load\": \"[^\"]*/run/checkpoints\"' %s/soak/v1/*/run/config.json | wc -l", ART);
    TB_CHECK(found && atoi(found) == 2, "two segments load a checkpoint (%s)", found ? found : "?");
    free(found);
    // the first stop (step 5) is a save of the first segment's alone; the second (step 10) one
    // of the second segment's and a regular save (every 2 steps) of the uninterrupted run's
    tb_shell(&found, "ls -d %s/soak/v1/*/run/checkpoints/iter_0000005 | wc -l", ART);
    TB_CHECK(found && atoi(found) == 1, "one record holds step 5's checkpoint (%s)", found ? found : "?");
    free(found);
    tb_shell(&found, "ls -d %s/soak/v1/*/run/checkpoints/iter_0000010 | wc -l", ART);
    TB_CHECK(found && atoi(found) == 2, "two records hold step 10's (%s)", found ? found : "?");
    free(found);
    tb_run(&sh, TB_SOURCE_DIR, "%s prove --all --artifacts %s", TRACEBOOK, ART);
    TB_CHECK(has_line(sh.out, "PROVEN  soak/v1/resumed_losses_bitwise") &&
                 has_line(sh.out, "PROVEN  soak/v1/memory_growth_after_warmup_bytes"),
             "both claims:\n%s\n%s", sh.out, sh.err);
    // the checkpoint the second segment resumed from, changed after the run: it is a file of
    // the first segment's record, so its hash no longer matches and the claim is refused
    TB_REQUIRE(tb_run(&sh, NULL,
                      "f=$(ls %s/soak/v1/*/run/checkpoints/iter_0000005/rank-00000.safetensors) && "
                      "printf X | dd of=$f bs=1 seek=2000 conv=notrunc status=none",
                      ART) == 0,
               "%s", sh.err);
    tb_run(&sh, TB_SOURCE_DIR, "%s prove --all --artifacts %s", TRACEBOOK, ART);
    TB_CHECK(has_line(sh.out, "NOT PROVEN  soak/v1/resumed_losses_bitwise") && strstr(sh.out, "file altered: ") &&
                 strstr(sh.out, "/iter_0000005/rank-00000.safetensors: sha256 expected"),
             "a changed checkpoint is refused:\n%s\n%s", sh.out, sh.err);
}

int main(void) {
    TB_RUN(the_soak_resumes_bitwise_and_its_memory_stays_flat);
    return tb_test_summary();
}
