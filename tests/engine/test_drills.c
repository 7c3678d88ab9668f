// The drills' plan (engine/drills/drills.h), parsed once from the config: a normal run holds
// no fault hooks, so every fault site answers no; each --debug-inject-fault choice fires at
// its own site and no other; the stall and the slow-downs apply to their rank (or group)
// only; a malformed value is refused naming its flag and the value.
#include <string.h>
#include <time.h>

#include "config/config.h"
#include "config/drill_flags.h"
#include "drills/drills.h"
#include "tb_test.h"

static double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec * 1e-6;
}

TB_TEST(a_normal_run_holds_no_fault_hooks_and_no_site_fires) {
    tb_config cfg;
    config_defaults(&cfg);
    tb_drills d;
    tb_error err;
    TB_REQUIRE(tb_drills_init(&d, &cfg, &err) == 0, "defaults: %s", err.msg);
    TB_CHECK(tb_drills_fault_hooks(&d) == NULL, "a run without --debug-inject-fault installs no hooks");
    TB_CHECK(tb_drills_fault_hooks(NULL) == NULL, "no plan, no hooks");
    for (int s = 0; s < TB_FAULT_SITES; s++)
        TB_CHECK(!tb_fault_fires(NULL, (tb_fault_site)s), "site %s fired without hooks",
                 tb_fault_site_name((tb_fault_site)s));
    TB_CHECK(!tb_drills_stalls(&d, 0, 1) && tb_drills_slow_data(&d, 0) == 0 && tb_drills_slow_write(&d, 0) == 0 &&
                 tb_drills_slow_link(&d, "dp") == 0,
             "no stall, no slow-down without their flags");
}

TB_TEST(each_injected_fault_fires_at_its_own_site_only) {
    static const struct {
        const char *choice;
        tb_fault_site site;
    } cases[] = {
        {"row_parallel_bias_per_rank", TB_SITE_ROW_PARALLEL_BIAS},
        {"skip_sp_grad_all_reduce", TB_SITE_SP_GRAD_REDUCE},
        {"vocab_ce_local_sum", TB_SITE_VOCAB_CE_EXP_SUM},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        tb_config cfg;
        config_defaults(&cfg);
        char flag[80];
        snprintf(flag, sizeof flag, "--debug-inject-fault %s", cases[i].choice);
        char *argv[] = {"pretrain_gpt", "--debug-inject-fault", (char *)cases[i].choice, NULL};
        int help = 0;
        tb_error err;
        TB_REQUIRE(config_parse_args(&cfg, 3, argv, &help, &err) == 0, "%s: %s", flag, err.msg);
        tb_drills d;
        TB_REQUIRE(tb_drills_init(&d, &cfg, &err) == 0, "%s: %s", flag, err.msg);
        const tb_fault_hooks *h = tb_drills_fault_hooks(&d);
        TB_REQUIRE(h != NULL, "%s installs hooks", flag);
        for (int s = 0; s < TB_FAULT_SITES; s++)
            TB_CHECK(tb_fault_fires(h, (tb_fault_site)s) == (s == (int)cases[i].site), "%s: site %s %s", flag,
                     tb_fault_site_name((tb_fault_site)s), s == (int)cases[i].site ? "did not fire" : "fired");
    }
}

TB_TEST(stall_and_slow_downs_apply_to_their_rank_or_group_only) {
    tb_config cfg;
    config_defaults(&cfg);
    snprintf(cfg.inject_stall, sizeof cfg.inject_stall, "1:3");
    snprintf(cfg.debug_slow_data, sizeof cfg.debug_slow_data, "1:30");
    snprintf(cfg.debug_slow_write, sizeof cfg.debug_slow_write, "0:20");
    snprintf(cfg.debug_slow_link, sizeof cfg.debug_slow_link, "dp_cp:25");
    tb_drills d;
    tb_error err;
    TB_REQUIRE(tb_drills_init(&d, &cfg, &err) == 0, "%s", err.msg);
    TB_CHECK(tb_drills_stalls(&d, 1, 3) && !tb_drills_stalls(&d, 0, 3) && !tb_drills_stalls(&d, 1, 2),
             "--inject-stall 1:3 stops rank 1 at step 3 only");
    double t0 = now_ms();
    int ms = tb_drills_slow_data(&d, 1);
    double slept = now_ms() - t0;
    TB_CHECK(ms == 30 && slept >= 29.0, "--debug-slow-data 1:30 on rank 1: %d ms, slept %.1f ms", ms, slept);
    TB_CHECK(tb_drills_slow_data(&d, 0) == 0, "rank 0's data is not slowed");
    TB_CHECK(tb_drills_slow_write(&d, 0) == 20 && tb_drills_slow_write(&d, 1) == 0,
             "--debug-slow-write 0:20 slows rank 0's writes only");
    TB_CHECK(tb_drills_slow_link(&d, "dp_cp") == 25 && tb_drills_slow_link(&d, "dp") == 0 &&
                 tb_drills_slow_link(&d, "tp") == 0,
             "--debug-slow-link dp_cp:25 slows the dp_cp group's calls only (not dp's)");
}

TB_TEST(a_malformed_drill_is_refused_naming_its_flag_and_value) {
    static const struct {
        const char *field, *value, *want;
    } cases[] = {
        {"inject_stall", "1:2x", "flag --inject-stall: '1:2x' is not RANK:STEP"},
        {"debug_slow_link", "dp", "flag --debug-slow-link: 'dp' is not GROUP:MS"},
        {"debug_slow_data", "1:", "flag --debug-slow-data: '1:' is not RANK:MS"},
        {"debug_slow_write", "0:-5", "flag --debug-slow-write: '0:-5' is not RANK:MS"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        tb_config cfg;
        config_defaults(&cfg);
        char *f = !strcmp(cases[i].field, "inject_stall")      ? cfg.inject_stall
                  : !strcmp(cases[i].field, "debug_slow_link") ? cfg.debug_slow_link
                  : !strcmp(cases[i].field, "debug_slow_data") ? cfg.debug_slow_data
                                                               : cfg.debug_slow_write;
        snprintf(f, 64, "%s", cases[i].value);
        tb_drills d;
        tb_error err = {{0}};
        TB_CHECK(tb_drills_init(&d, &cfg, &err) != 0 && strstr(err.msg, cases[i].want), "%s=%s: got \"%s\"",
                 cases[i].field, cases[i].value, err.msg);
    }
}

// The forms the config's rules and the drills both read (config/drill_flags.h): what each
// accepts, with its parts, and what it refuses.
TB_TEST(the_drill_flag_forms_take_their_parts_and_refuse_anything_else) {
    int rank = -7, ms = -7;
    int64_t step = -7;
    char group[8] = "?";
    TB_CHECK(tb_drill_rank_step("3:12", &rank, &step) == 0 && rank == 3 && step == 12, "3:12 -> %d %lld", rank,
             (long long)step);
    TB_CHECK(tb_drill_rank_ms("1:250", &rank, &ms) == 0 && rank == 1 && ms == 250, "1:250 -> %d %d", rank, ms);
    TB_CHECK(tb_drill_group_ms("dp_cp:40", group, sizeof group, &ms) == 0 && !strcmp(group, "dp_cp") && ms == 40,
             "dp_cp:40 -> %s %d", group, ms);
    static const char *const bad_rank[] = {"", "1", "1:", ":5", "1:5x", "a:5", "1:2:3", "1 5"};
    for (size_t i = 0; i < sizeof bad_rank / sizeof *bad_rank; i++) {
        rank = -7, ms = -7, step = -7;
        TB_CHECK(tb_drill_rank_ms(bad_rank[i], &rank, &ms) != 0 && rank == -7 && ms == -7, "RANK:MS took '%s'",
                 bad_rank[i]);
        TB_CHECK(tb_drill_rank_step(bad_rank[i], &rank, &step) != 0 && rank == -7 && step == -7,
                 "RANK:STEP took '%s'", bad_rank[i]);
    }
    static const char *const bad_group[] = {"", "dp", "dp:", ":5", "DP:5", "dp:5x", "d-p:5", "pipeline:5"};
    for (size_t i = 0; i < sizeof bad_group / sizeof *bad_group; i++) {
        ms = -7;
        snprintf(group, sizeof group, "?");
        TB_CHECK(tb_drill_group_ms(bad_group[i], group, sizeof group, &ms) != 0 && ms == -7 && !strcmp(group, "?"),
                 "GROUP:MS took '%s' (group %zu bytes)", bad_group[i], sizeof group);
    }
}

int main(void) {
    TB_RUN(a_normal_run_holds_no_fault_hooks_and_no_site_fires);
    TB_RUN(each_injected_fault_fires_at_its_own_site_only);
    TB_RUN(stall_and_slow_downs_apply_to_their_rank_or_group_only);
    TB_RUN(a_malformed_drill_is_refused_naming_its_flag_and_value);
    TB_RUN(the_drill_flag_forms_take_their_parts_and_refuse_anything_else);
    return tb_test_summary();
}
