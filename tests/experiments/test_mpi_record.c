// tracebook run with the MPI launcher: a runbook's exp:run{..., launcher = 'mpirun', processes
// = 2} is recorded with the whole mpirun command as its argv and the engine's place in it;
// its claims (a loss, and its bitwise equality with the same config on threads) are proven
// from the record; ls and show list it like any other; replay re-launches it under mpirun
// with the engine built at the recorded revision in the engine's place, and the losses match
// bit for bit.
//
// Exit status 77 (ctest: skipped) when MPI was not built or no mpirun is on PATH.
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "core/fileio.h"
#include "tb_mpirun.h"
#include "tb_run_dir.h"
#include "tb_shell.h"
#include "tb_test.h"

#define SKIP 77

#ifdef TB_MPIEXEC

#define TRACEBOOK TB_BIN_DIR "/tracebook"
#define ART TB_TEST_TMPDIR "/mpi_record_artifacts"
#define RUNBOOK TB_TEST_TMPDIR "/mpi_record.lua"

// Under LeakSanitizer, the environment of Open MPI's processes (tb_mpirun.h), set in the one
// tracebook run passes to mpirun and the engine.
#ifdef TB_MPIRUN_PRELOAD
#define MPI_ENV TB_MPIRUN_SANITIZER_ENV "LD_PRELOAD='" TB_MPIRUN_PRELOAD "' "
#else
#define MPI_ENV ""
#endif

static tb_output sh;  // what the last command printed
static char record_id[256], record_dir[1024];

TB_TEST(a_runbook_run_under_mpirun_is_recorded_with_its_launch_and_proven) {
    tb_write_text(RUNBOOK,
                  "local exp = tb.experiment{ name = 'mpi_record', version = 1, question = 'q' }\n"
                  "local cfg = { num_layers = 2, hidden_size = 32, num_attention_heads = 2, seq_length = 16,"
                  " vocab_size = 64, train_iters = 4, tensor_model_parallel_size = 2, collective_timeout = 60 }\n"
                  "local threads = exp:run(cfg)\n"
                  "cfg.launcher = 'mpirun'; cfg.processes = 2\n"
                  "local procs = exp:run(cfg)\n"
                  "exp:claim{ id = 'final_loss', parser = 'loss_at_step', runs = procs, text = 'loss {value}' }\n"
                  "exp:claim{ id = 'as_threads', parser = 'relative_difference', runs = { threads, procs }, at_most = 0,"
                  " args = { a = { parser = 'loss_at_step', records = { procs.runs[1].run_id } },"
                  " b = { parser = 'loss_at_step', records = { threads.runs[1].run_id } } },"
                  " text = 'mpirun -np 2 trains the bits of threads' }\n"
                  "print('RECORD ' .. procs.runs[1].run_id)\n"
                  // a call's CPU time under MPI holds its wait: the replay refuses the run
                  "local ok, why = pcall(function() exp:claim{ id = 'replayed', parser = 'replayed', runs = procs,"
                  " args = { figure = 'step_ms' }, text = 'replayed step' } end)\n"
                  "print('REPLAYED ' .. tostring(ok) .. ' ' .. tostring(why))\n");
    int rc = tb_run(&sh, TB_SOURCE_DIR, "rm -rf %s && " MPI_ENV "%s run %s --artifacts %s", ART, TRACEBOOK, RUNBOOK, ART);
    TB_REQUIRE(rc == 0, "tracebook run: exit %d\n%s\n%s", rc, sh.out, sh.err);
    const char *at = strstr(sh.out, "RECORD ");
    TB_REQUIRE(at, "the record's id:\n%s", sh.out);
    TB_CHECK(strstr(sh.out, "REPLAYED false ") && strstr(sh.out, "2 processes under mpirun") &&
                 strstr(sh.out, "replaying it is not supported yet"),
             "the replay refuses a run under mpirun, naming why:\n%s", sh.out);
    snprintf(record_id, sizeof record_id, "%s", at + 7);
    record_id[strcspn(record_id, "\n")] = '\0';
    snprintf(record_dir, sizeof record_dir, ART "/mpi_record/v1/%s", record_id);

    char path[1200];
    snprintf(path, sizeof path, "%s/" TB_RECORD_MANIFEST, record_dir);
    json_t *m = tb_load_json(path);
    TB_REQUIRE(m, "%s", path);
    json_t *argv = json_object_get(m, "argv"), *launcher = json_object_get(m, "launcher");
    const json_int_t k = json_integer_value(json_object_get(launcher, "engine_argv_index"));
    const char *first = json_string_value(json_array_get(argv, 0)) ?: "";
    const char *engine = json_string_value(json_array_get(argv, (size_t)k)) ?: "";
    TB_CHECK(!strcmp(json_string_value(json_object_get(launcher, "name")) ?: "", "mpirun") &&
                 json_integer_value(json_object_get(launcher, "processes")) == 2,
             "the manifest's launcher says mpirun with 2 processes");
    TB_CHECK(strstr(first, "mpirun") && k > 0 && strstr(engine, "/pretrain_gpt"),
             "argv is the mpirun command (%s) with the engine at %lld (%s)", first, (long long)k, engine);
    int np = 0;
    for (json_int_t i = 1; i + 1 < k; i++)
        np |= !strcmp(json_string_value(json_array_get(argv, (size_t)i)), "-np") &&
              !strcmp(json_string_value(json_array_get(argv, (size_t)i + 1)), "2");
    TB_CHECK(np, "mpirun's -np 2 before the engine");
    TB_CHECK(json_is_object(json_object_get(m, "engine_build")) &&
                 json_is_string(json_object_get(json_object_get(m, "engine_build"), "sha256")),
             "the engine's build info was asked of the engine, not of mpirun");
    TB_CHECK(!strcmp(json_string_value(json_object_get(m, "status")) ?: "", "finished"), "the record is finished");
    json_decref(m);
    snprintf(path, sizeof path, "%s/run/" TB_RUN_LAUNCH, record_dir);
    json_t *launch = tb_load_json(path);
    TB_CHECK(launch && !strcmp(json_string_value(json_object_get(launch, "launcher")) ?: "", "mpirun") &&
                 json_integer_value(json_object_get(launch, "processes")) == 2,
             "the engine's own launch.json says mpirun, 2 processes");
    json_decref(launch);

    rc = tb_run(&sh, TB_SOURCE_DIR, "%s prove --all --artifacts %s", TRACEBOOK, ART);
    TB_CHECK(rc == 0 && strstr(sh.out, "2 claims, 2 proven"), "prove: exit %d\n%s\n%s", rc, sh.out, sh.err);
    rc = tb_run(&sh, TB_SOURCE_DIR, "%s show %s --artifacts %s", TRACEBOOK, record_id, ART);
    TB_CHECK(rc == 0 && strstr(sh.out, "mpirun") && strstr(sh.out, "-np 2"), "show: the command\n%s", sh.out);
    rc = tb_run(&sh, TB_SOURCE_DIR, "%s ls --experiment mpi_record --artifacts %s", TRACEBOOK, ART);
    TB_CHECK(rc == 0 && strstr(sh.out, record_id) && strstr(sh.out, "\"launcher\":\"mpirun\""), "ls:\n%s", sh.out);
}

// The engine test_replay.c's first replay built and kept has this record's key (the same tree,
// options and toolchain), and ctest runs this test after that one (DEPENDS, CMakeLists.txt):
// sharing its .replay-builds saves building the same engine twice (with CUDA, a minute of nvcc
// in each of the suite's two runs). Run alone, this test's replay builds it.
#define SHARED_BUILDS TB_TEST_TMPDIR "/replay_artifacts/.replay-builds"

TB_TEST(the_mpirun_record_replays_under_mpirun_with_the_engine_built_at_its_revision) {
    TB_REQUIRE(record_id[0], "needs the record");
    tb_error err = {0};
    TB_REQUIRE(tb_mkdir_p(SHARED_BUILDS, &err) == 0 && symlink(SHARED_BUILDS, ART "/.replay-builds") == 0,
               "linking %s: %s", SHARED_BUILDS, err.msg[0] ? err.msg : strerror(errno));
    // timing on a shared 2-core machine is not this test's point (test_replay.c tests it)
    int rc = tb_run(&sh, TB_SOURCE_DIR, MPI_ENV "%s replay %s --artifacts %s --ignore-timing", TRACEBOOK, record_id, ART);
    TB_CHECK(rc == 0, "replay: exit %d\n%s\n%s", rc, sh.out, sh.err);
    TB_CHECK(strstr(sh.out, "launched as recorded:") && strstr(sh.out, "with 2 processes"), "relaunched:\n%s", sh.out);
    TB_CHECK(strstr(sh.out, "bitwise identical: 4 steps x 2 ranks") && strstr(sh.out, "MATCH"), "loss verdict:\n%s",
             sh.out);
    TB_CHECK(strstr(sh.out, "WITHIN") || strstr(sh.out, "OUTSIDE (ignored"), "a timing verdict:\n%s", sh.out);
    const int reused = strstr(sh.out, "the build an earlier replay kept") != NULL;
    TB_CHECK(reused || strstr(sh.out, "building pretrain_gpt"), "the engine kept or built:\n%s", sh.out);
    printf("    the replay's engine: %s\n",
           reused ? "the one test_replay's replay kept" : "built here (test_replay kept none)");
    const char *at = strstr(sh.out, "replay recorded as ");
    TB_REQUIRE(at, "the replay's record");
    char dir[1024], path[1100];
    snprintf(dir, sizeof dir, "%s", at + 19);
    dir[strcspn(dir, " ")] = '\0';
    snprintf(path, sizeof path, "%s/" TB_RECORD_MANIFEST, dir);
    json_t *m = tb_load_json(path);
    TB_REQUIRE(m, "%s", path);
    json_t *argv = json_object_get(m, "argv");
    const json_int_t k = json_integer_value(json_object_get(json_object_get(m, "launcher"), "engine_argv_index"));
    const char *first = json_string_value(json_array_get(argv, 0)) ?: "";
    const char *engine = json_string_value(json_array_get(argv, (size_t)k)) ?: "";
    // the fresh build's binary or the kept one's link, in the replay's own directory
    const size_t n = strlen(engine);
    TB_CHECK(strstr(first, "mpirun") && !strncmp(engine, "/tmp/tracebook-replay-", 22) && n > 13 &&
                 !strcmp(engine + n - 13, "/pretrain_gpt"),
             "the replay ran %s with the engine built at the revision (%s) at %lld", first, engine, (long long)k);
    json_decref(m);
}

int main(void) {
    int rc = tb_run(&sh, NULL, "command -v mpirun");
    if (rc != 0) {
        printf("SKIP: no mpirun on PATH (tracebook run's MPI launcher runs the one on PATH)\n");
        return SKIP;
    }
    TB_RUN(a_runbook_run_under_mpirun_is_recorded_with_its_launch_and_proven);
    TB_RUN(the_mpirun_record_replays_under_mpirun_with_the_engine_built_at_its_revision);
    tb_output_free(&sh);
    return tb_test_summary();
}

#else

int main(void) {
    printf("SKIP: MPI not built, or no mpirun found at configure time\n");
    return SKIP;
}

#endif
