// The headline runbooks and a drill, run for real at small sizes: their exact claims (bytes,
// parameters, FLOPs per rank) prove whatever the machine's load or core count, and each timing
// claim re-derives and is then PROVEN or NOT PROVEN by the stability gate alone. (From
// test_runbook.c, which tests the Lua host and the run recorder.)
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "tb_shell.h"
#include "tb_test.h"

#define TRACEBOOK TB_BIN_DIR "/tracebook"
#define ART TB_TEST_TMPDIR "/rb_exact"

static tb_output sh;  // what the last command printed

// Whether out has a line beginning with `line` (a verdict: "PROVEN  x" is also the tail of
// "NOT PROVEN  x").
static int has_line(const char *out, const char *line) {
    for (const char *at = strstr(out, line); at; at = strstr(at + 1, line))
        if (at == out || at[-1] == '\n') return 1;
    return 0;
}

// Each exact claim of `exact` (NULL-terminated, under "<experiment>/v<N>") PROVEN.
static void check_exact_proven(const char *out, const char *version, const char *const *exact) {
    for (size_t i = 0; exact[i]; i++) {
        char want[160];
        snprintf(want, sizeof want, "PROVEN  %s/%s\n", version, exact[i]);
        TB_CHECK(has_line(out, want), "%s:\n%s", want, out);
    }
}

// Each timing claim of `timed` (NULL-terminated, under "<experiment>/v<N>") re-derived and
// then PROVEN, or NOT PROVEN by the stability gate alone (a verdict of its kinds), never for
// a file or a number.
static void check_timed_by_gate(const char *out, const char *version, const char *const *timed) {
    static const char *const gate[] = {"(unstable: ", "(undersampled: ", "(contended: ", "(oversubscribed: ",
                                       "(not verifiable: "};
    for (size_t i = 0; timed[i]; i++) {
        char proven[160], not_proven[160];
        snprintf(proven, sizeof proven, "PROVEN  %s/%s", version, timed[i]);
        snprintf(not_proven, sizeof not_proven, "NOT PROVEN  %s/%s ", version, timed[i]);
        const char *at = strstr(out, not_proven);
        int by_gate = 0;
        for (size_t g = 0; at && g < sizeof gate / sizeof *gate; g++)
            by_gate |= !strncmp(at + strlen(not_proven), gate[g], strlen(gate[g]));
        TB_CHECK(at ? by_gate : has_line(out, proven), "%s: proven, or not by the gate alone:\n%s", timed[i], out);
    }
}

// The headline runbook's exact claims (bytes all-reduced per rank per step, parameters and
// FLOPs per rank) prove from a real run whatever the machine's load or core count; each of
// its timing claims re-derives too, and is then PROVEN or NOT PROVEN by the stability gate
// alone (a verdict of its kinds), never for a file or a number.
TB_TEST(tp_scaling_exact_claims_prove_on_any_machine) {
    TB_REQUIRE(tb_run(&sh, TB_SOURCE_DIR,
                      "rm -rf %s_tp && %s run runbooks/tp_scaling.lua --set window=0.05 --set repeats=1 --set rerun_contended=0 --artifacts %s_tp",
                      ART, TRACEBOOK, ART) == 0,
               "%s\n%s", sh.out, sh.err);
    tb_run(&sh, TB_SOURCE_DIR, "%s prove --all --quiet --artifacts %s_tp", TRACEBOOK, ART);
    static const char *const exact[] = {"tp8_all_reduce_bytes_per_rank", "tp_all_reduce_bytes_tp8_vs_tp2",
                                        "tp1_parameters",                "tp8_parameters_per_rank",
                                        "tp8_parameter_share",           "tp8_flops_per_rank",
                                        "tp8_flops_share", NULL};
    check_exact_proven(sh.out, "tp_scaling/v3", exact);
    static const char *const timed[] = {"tp1_tokens_per_s", "tp2_over_tp1", "tp8_tokens_per_s", "tp8_over_tp1", NULL};
    check_timed_by_gate(sh.out, "tp_scaling/v3", timed);
    // the accepted oversubscription is stated where it applied (TP8 on fewer than 8 cores)
    if (sysconf(_SC_NPROCESSORS_ONLN) < 8 && has_line(sh.out, "PROVEN  tp_scaling/v3/tp8_tokens_per_s"))
        TB_CHECK(has_line(sh.out, "PROVEN  tp_scaling/v3/tp8_tokens_per_s (accepted: oversubscribed, 8 threads on"),
                 "the accepted condition is printed:\n%s", sh.out);
}

// The checkpoint drill (runbooks/drills/ckpt_pause.lua, which saves into "{run_dir}/checkpoints":
// each run's checkpoints belong to its record): its byte counts prove on any machine, the
// model-only save writing exactly a third of a model + optimizer save; its timing claims are
// PROVEN or NOT PROVEN by the stability gate alone.
TB_TEST(ckpt_pause_drill_byte_claims_prove_on_any_machine) {
    TB_REQUIRE(tb_run(&sh, TB_SOURCE_DIR,
                      "rm -rf %s_ck && %s run runbooks/drills/ckpt_pause.lua --set repeats=1 --set window=0.05 --set rerun_contended=0 "
                      "--set iters=4 --set save_interval=2 --artifacts %s_ck",
                      ART, TRACEBOOK, ART) == 0,
               "%s\n%s", sh.out, sh.err);
    TB_CHECK(strstr(sh.out, "model_only_fraction: ") && strstr(sh.out, "= 0.333333 "),
             "a model-only save is a third of a model + optimizer save:\n%s", sh.out);
    char *found = NULL;
    tb_shell(&found, "ls -d %s_ck/ckpt_pause/v3/*/run/checkpoints/iter_0000002 | wc -l", ART);
    // 4 configs, each a calibration run and one measured run (--set repeats=1), each saving at step 2
    TB_CHECK(found && atoi(found) == 8, "every run's checkpoints are in its run directory (%s)", found ? found : "?");
    free(found);
    tb_run(&sh, TB_SOURCE_DIR, "%s prove --all --quiet --artifacts %s_ck", TRACEBOOK, ART);
    static const char *const exact[] = {"state_bytes_per_save", "file_bytes_per_save", "model_only_fraction", NULL};
    check_exact_proven(sh.out, "ckpt_pause/v3", exact);
    static const char *const timed[] = {"slow_writer_is_last", "slow_writer_wait_ms", "sync_stall_fraction",
                                        "async_stall_fraction", NULL};
    check_timed_by_gate(sh.out, "ckpt_pause/v3", timed);
}

// The long-context runbook's exact claims prove on any machine: a cp 2 rank's activation
// memory is exactly half the single rank's and doubles with the sequence, a cp 4 ring rank's a
// quarter; its K/V all-gather bytes; a ring rank's send bytes at cp 2 and their growth to cp 4
// (1.25); every cp run's loss is the single rank's.
TB_TEST(long_context_exact_claims_prove_on_any_machine) {
    TB_REQUIRE(tb_run(&sh, TB_SOURCE_DIR,
                      "rm -rf %s_lc && %s run runbooks/long_context.lua --set seq=256 --set iters=2 --set window=0.05 "
                      "--set repeats=1 --set rerun_contended=0 --artifacts %s_lc",
                      ART, TRACEBOOK, ART) == 0,
               "%s\n%s", sh.out, sh.err);
    TB_CHECK(strstr(sh.out, "cp2_activation_share: ") && strstr(strstr(sh.out, "cp2_activation_share: "), "= 0.5 "),
             "a cp 2 rank holds half the activations:\n%s", sh.out);
    TB_CHECK(strstr(sh.out, "ring4_over_ring2_send_bytes: ") &&
                 strstr(strstr(sh.out, "ring4_over_ring2_send_bytes: "), "= 1.25 "),
             "a cp 4 ring rank sends 10/4 chunk pairs' bytes for a cp 2 ring rank's 4/2:\n%s", sh.out);
    // seq 256, hidden 128, 2 layers, 2 microbatches of 1: 4 sends of 128 x 2 x 128 x 4 B per layer and microbatch
    TB_CHECK(strstr(sh.out, "ring2_send_bytes: ") && strstr(strstr(sh.out, "ring2_send_bytes: "), "= 2.09715e+06 "),
             "a cp 2 ring rank sends 2 x 2 x 4 x 131072 B per step:\n%s", sh.out);
    tb_run(&sh, TB_SOURCE_DIR, "%s prove --all --quiet --artifacts %s_lc", TRACEBOOK, ART);
    static const char *const exact[] = {"cp2_activation_share",           "cp2_activation_growth",
                                        "cp2_kv_all_gather_bytes",        "cp2_loss_is_the_single_ranks",
                                        "ring2_send_bytes",               "ring4_over_ring2_send_bytes",
                                        "ring4_activation_share",         "ring2_loss_is_the_single_ranks",
                                        "ring4_loss_is_the_single_ranks", NULL};
    check_exact_proven(sh.out, "long_context/v3", exact);
    static const char *const timed[] = {"cp2_step_ms_long", NULL};
    check_timed_by_gate(sh.out, "long_context/v3", timed);
}

// The MoE mesh runbook's exact claims prove on any machine: ETP2 x EP2 runs twice ETP1 x
// EP4's expert GEMMs per rank, each half as wide (fc1's N 16 against 32, K the hidden 128),
// and moves bytes over etp that ETP1 does not; the step times are left to the gate.
TB_TEST(moe_mesh_exact_claims_prove_on_any_machine) {
    TB_REQUIRE(tb_run(&sh, TB_SOURCE_DIR, "rm -rf %s_mm && %s run runbooks/moe_mesh.lua --set iters=2 --set window=0.05 --set repeats=1 --set rerun_contended=0 "
                      "--artifacts %s_mm",
                      ART, TRACEBOOK, ART) == 0,
               "%s\n%s", sh.out, sh.err);
    static const struct {
        const char *claim, *value;
    } values[] = {{"fc1_n_etp1", "= 32 "},          {"fc1_n_etp2", "= 16 "},           {"fc1_k_etp2", "= 128 "},
                  {"local_experts_etp2", "= 8 "},   {"fc1_n_etp2_over_etp1", "= 0.5 "}, {"gemms_etp2_over_etp1", "= 2 "}};
    for (size_t i = 0; i < sizeof values / sizeof *values; i++) {
        char key[96];
        snprintf(key, sizeof key, "claim %s: ", values[i].claim);
        const char *at = strstr(sh.out, key);
        TB_CHECK(at && strstr(at, values[i].value) && strstr(at, values[i].value) < strchr(at, '\n') + 1,
                 "%s %s:\n%s", values[i].claim, values[i].value, sh.out);
    }
    tb_run(&sh, TB_SOURCE_DIR, "%s prove --all --quiet --artifacts %s_mm", TRACEBOOK, ART);
    static const char *const exact[] = {"local_experts_etp1",   "gemm_m_etp1",      "fc1_n_etp1",
                                        "fc2_k_etp2",           "ep_a2a_bytes_etp1", "ep_a2a_bytes_etp2",
                                        "etp_bytes_etp2",       "load_max_over_mean_etp2", "gemm_m_etp2_over_etp1",
                                        "fc1_n_etp2_over_etp1", "gemms_etp2_over_etp1", NULL};
    check_exact_proven(sh.out, "moe_mesh/v2", exact);
    static const char *const timed[] = {"step_ms_etp1", "step_ms_etp2", "speedup_etp1_over_etp2", NULL};
    check_timed_by_gate(sh.out, "moe_mesh/v2", timed);
}

int main(void) {
    TB_RUN(tp_scaling_exact_claims_prove_on_any_machine);
    TB_RUN(ckpt_pause_drill_byte_claims_prove_on_any_machine);
    TB_RUN(long_context_exact_claims_prove_on_any_machine);
    TB_RUN(moe_mesh_exact_claims_prove_on_any_machine);
    tb_output_free(&sh);
    return tb_test_summary();
}
