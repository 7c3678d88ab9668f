// Configuration from the command line and files: flags (with "=" or a space, bools, choices,
// byte counts) set the fields of the option table and refuse what is malformed naming flag
// and value; --config FILE.json applies under the flags; config.json written by
// config_to_json loads back identically; the pretrain_gpt binary prints every flag in --help
// and exits 2 on bad arguments or an invalid configuration.
#include <float.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config/config.h"
#include "config_cases.h"
#include "tb_shell.h"
#include "tb_test.h"

#define PRETRAIN TB_BIN_DIR "/pretrain_gpt"

// ---------------------------------------------------------------------------------------
// config_parse_args

TB_TEST(flag_space_value_and_flag_equals_value_both_set_the_field) {
    tb_config c;
    tb_error e;
    int help;
    char *argv[] = {"pretrain_gpt", "--num-layers", "7", "--hidden-size=96", "--lr", "2.5e-4", "--min-lr=1e-5",
                    "--seed", "9007199254740993", "--normalization", "RMSNorm",
                    "--position-embedding-type=none", "--data-path", "/x/y.bin", "--run-dir=/tmp/a=b",
                    "--lr-warmup-iters", "-3"};
    TB_REQUIRE(parse(&c, ARGC(argv), argv, &help, &e) == 0, "%s", e.msg);
    TB_CHECK(help == 0, "no --help");
    TB_CHECK(c.num_layers == 7, "num_layers %d", c.num_layers);
    TB_CHECK(c.hidden_size == 96, "hidden_size %d", c.hidden_size);
    TB_CHECK(c.lr == 2.5e-4, "lr %g", c.lr);
    TB_CHECK(c.min_lr == 1e-5, "min_lr %g", c.min_lr);
    TB_CHECK(c.seed == INT64_C(9007199254740993), "seed %lld", (long long)c.seed);
    TB_CHECK(c.normalization == TB_NORM_RMSNORM, "normalization %d", c.normalization);
    TB_CHECK(c.position_embedding_type == TB_POS_NONE, "position embedding %d", c.position_embedding_type);
    TB_CHECK(!strcmp(c.data_path, "/x/y.bin"), "data_path '%s'", c.data_path);
    TB_CHECK(!strcmp(c.run_dir, "/tmp/a=b"), "a value may hold '=': run_dir '%s'", c.run_dir);
    TB_CHECK(c.lr_warmup_iters == -3, "a negative value after the flag is a value: %d", c.lr_warmup_iters);
    // Untouched fields keep their defaults.
    TB_CHECK(c.num_attention_heads == 4 && c.micro_batch_size == 4, "defaults kept");
}

TB_TEST(bool_flags_take_no_value_and_accept_an_explicit_one_after_equals) {
    tb_config c;
    tb_error e;
    int help;
    char *argv[] = {"pretrain_gpt", "--swiglu", "--num-layers", "2", "--disable-bias-linear", "--mock-data"};
    TB_REQUIRE(parse(&c, ARGC(argv), argv, &help, &e) == 0, "%s", e.msg);
    TB_CHECK(c.swiglu == 1 && c.disable_bias_linear == 1 && c.mock_data == 1, "bools set: %d %d %d", c.swiglu,
             c.disable_bias_linear, c.mock_data);
    TB_CHECK(c.num_layers == 2, "the word after a bool flag is the next flag: num_layers %d", c.num_layers);

    char *argv2[] = {"pretrain_gpt", "--swiglu=false", "--sequence-parallel=true", "--mock-data=0",
                     "--disable-bias-linear=1"};
    TB_REQUIRE(parse(&c, ARGC(argv2), argv2, &help, &e) == 0, "%s", e.msg);
    TB_CHECK(c.swiglu == 0 && c.sequence_parallel == 1 && c.mock_data == 0 && c.disable_bias_linear == 1,
             "explicit bools: %d %d %d %d", c.swiglu, c.sequence_parallel, c.mock_data, c.disable_bias_linear);

    CHECK_PARSE_REFUSALS({{"--swiglu", "false"}, "'false' is not a flag"},  // a word, not the bool's value
                         {{"--swiglu=maybe"}, "flag --swiglu: 'maybe' is not true or false"});
}

TB_TEST(help_flag_is_reported_not_an_error) {
    tb_config c;
    tb_error e;
    int help = 0;
    char *argv[] = {"pretrain_gpt", "--num-layers", "3", "--help"};
    TB_CHECK(parse(&c, ARGC(argv), argv, &help, &e) == 0 && help == 1, "--help: rc/help %d \"%s\"", help, e.msg);
    char *argv2[] = {"pretrain_gpt", "-h"};
    TB_CHECK(parse(&c, ARGC(argv2), argv2, &help, &e) == 0 && help == 1, "-h: help %d", help);
    char *argv3[] = {"pretrain_gpt"};
    TB_CHECK(parse(&c, ARGC(argv3), argv3, &help, &e) == 0 && help == 0, "no flags: help %d", help);
}

TB_TEST(unknown_flag_is_refused_naming_it) {
    CHECK_PARSE_REFUSALS({{"--num-layers", "2", "--num-layer", "3"}, "unknown flag '--num-layer'"},
                         {{"--bogus=7"}, "unknown flag '--bogus'"},  // the name is cut at '='
                         {{"--num_layers", "2"}, "unknown flag '--num_layers'"});  // the JSON key is not a flag
}

TB_TEST(word_that_is_not_a_flag_is_refused_with_its_position) {
    CHECK_PARSE_REFUSALS({{"--num-layers", "2", "train"}, "argument 3: 'train' is not a flag"},
                         {{"-n", "2"}, "argument 1: '-n' is not a flag"});
}

TB_TEST(flag_without_its_value_is_refused) {
    CHECK_PARSE_REFUSALS({{"--swiglu", "--num-layers"}, "flag --num-layers: missing value"},
                         {{"--config"}, "flag --config: missing value"});
}

TB_TEST(malformed_numbers_are_refused_naming_flag_and_value) {
    tb_config c;
    tb_error e;
    int help;
    static const struct {
        const char *flag, *value, *expect;
    } cases[] = {
        {"--num-layers", "four", "flag --num-layers: 'four' is not an integer"},
        {"--num-layers", "12abc", "flag --num-layers: '12abc' is not an integer"},
        {"--num-layers", "1.5", "flag --num-layers: '1.5' is not an integer"},
        {"--num-layers", "", "flag --num-layers: '' is not an integer"},
        {"--hidden-size", "99999999999",
         "flag --hidden-size: '99999999999' is out of range (-2147483648 to 2147483647)"},
        {"--seed", "99999999999999999999", "flag --seed: '99999999999999999999' is out of range ("},
        {"--lr", "fast", "flag --lr: 'fast' is not a number"},
        {"--lr", "1e-3x", "flag --lr: '1e-3x' is not a number"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char flag[64], value[64];
        snprintf(flag, sizeof flag, "%s", cases[i].flag);
        snprintf(value, sizeof value, "%s", cases[i].value);
        char *argv[] = {"pretrain_gpt", flag, value};
        TB_CHECK(parse(&c, ARGC(argv), argv, &help, &e) != 0 && strstr(e.msg, cases[i].expect),
                 "%s %s: want \"%s\", got \"%s\"", cases[i].flag, cases[i].value, cases[i].expect, e.msg);
        char joined[160];
        snprintf(joined, sizeof joined, "%s=%s", cases[i].flag, cases[i].value);
        char *argv2[] = {"pretrain_gpt", joined};
        TB_CHECK(parse(&c, ARGC(argv2), argv2, &help, &e) != 0 && strstr(e.msg, cases[i].expect),
                 "%s: want \"%s\", got \"%s\"", joined, cases[i].expect, e.msg);
    }
}

TB_TEST(float_that_underflows_is_the_denormal_it_rounds_to_and_zero_overflow_or_nonfinite_are_refused) {
    tb_config c;
    tb_error e;
    int help;
    static const struct {
        const char *value;
        double want;
    } taken[] = {
        {"1e-310", 1e-310}, {"4.9e-324", 4.9e-324}, {"-1e-310", -1e-310},  // denormals
        {"2.2250738585072014e-308", DBL_MIN},
    };
    for (size_t i = 0; i < sizeof taken / sizeof taken[0]; i++) {
        char value[64];
        snprintf(value, sizeof value, "%s", taken[i].value);
        char *argv[] = {"pretrain_gpt", "--norm-epsilon", value};
        int rc = parse(&c, ARGC(argv), argv, &help, &e);
        TB_CHECK(rc == 0 && c.norm_epsilon == taken[i].want && signbit(c.norm_epsilon) == signbit(taken[i].want),
                 "--norm-epsilon %s: rc %d, %a (want %a): \"%s\"", value, rc, c.norm_epsilon, taken[i].want, e.msg);
    }
    // ... but not to 0, which is often "off" (--clip-grad 0) or a frozen run (--lr 0): a value
    // written as positive that a double cannot hold is refused, not taken as one
    CHECK_PARSE_REFUSALS({{"--lr", "1e-400"}, "flag --lr: '1e-400' underflows to 0 in double precision"},
                         {{"--norm-epsilon", "-1e-400"}, "flag --norm-epsilon: '-1e-400' underflows to 0 in double "
                                                         "precision"},
                         {{"--clip-grad", "1e-400"}, "flag --clip-grad: '1e-400' underflows to 0 in double precision"},
                         {{"--lr", "1e400"}, "flag --lr: '1e400' is not a finite number in double range"},
                         {{"--lr", "-1e400"}, "flag --lr: '-1e400' is not a finite number in double range"},
                         {{"--lr", "inf"}, "flag --lr: 'inf' is not a finite number in double range"},
                         {{"--lr", "-infinity"}, "flag --lr: '-infinity' is not a finite number in double range"},
                         {{"--lr", "nan"}, "flag --lr: 'nan' is not a finite number in double range"});
}

TB_TEST(bad_choice_is_refused_listing_the_allowed_ones) {
    CHECK_PARSE_REFUSALS(
        {{"--normalization", "layernorm"}, "flag --normalization: 'layernorm' is not one of LayerNorm|RMSNorm"},
        {{"--recompute-granularity=partial"},
         "flag --recompute-granularity: 'partial' is not one of none|selective|full"},
        {{"--lr-decay-style", "cos"}, "'cos' is not one of cosine|linear|constant"});  // a prefix is not a choice
    tb_config c;
    tb_error e;
    int help;
    // Every choice of every choice option is accepted and names itself back.
    for (const tb_option *o = tb_config_options; o->flag; o++) {
        if (o->type != TB_OPT_CHOICE) continue;
        char choices[128];
        snprintf(choices, sizeof choices, "%s", o->choices);
        int index = 0;
        for (char *save = NULL, *name = strtok_r(choices, "|", &save); name;
             name = strtok_r(NULL, "|", &save), index++) {
            char flag[64];
            snprintf(flag, sizeof flag, "%s", o->flag);
            char *argv4[] = {"pretrain_gpt", flag, name};
            TB_CHECK(parse(&c, ARGC(argv4), argv4, &help, &e) == 0, "%s %s: \"%s\"", o->flag, name, e.msg);
            int value = *(const int *)((const char *)&c + o->offset);
            TB_CHECK(value == index, "%s %s: index %d, want %d", o->flag, name, value, index);
            TB_CHECK(!strcmp(config_choice_name(o->key, value), name), "%s: name of %d is %s", o->key, value,
                     config_choice_name(o->key, value));
        }
    }
}

TB_TEST(memory_cap_accepts_byte_suffixes_in_powers_of_1024) {
    static const struct {
        const char *text;
        int64_t bytes;
    } cases[] = {
        {"0", 0},
        {"1048576", 1048576},
        {"512M", INT64_C(512) << 20},
        {"512m", INT64_C(512) << 20},
        {"2G", INT64_C(2) << 30},
        {"2GB", INT64_C(2) << 30},
        {"2GiB", INT64_C(2) << 30},
        {"1KiB", 1024},
        {"1K", 1024},
        {"3k", 3072},
        {"1T", INT64_C(1) << 40},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        tb_config c;
        tb_error e;
        int help;
        char value[32];
        snprintf(value, sizeof value, "%s", cases[i].text);
        char *argv[] = {"pretrain_gpt", "--memory-cap", value};
        TB_CHECK(parse(&c, ARGC(argv), argv, &help, &e) == 0, "%s: \"%s\"", cases[i].text, e.msg);
        TB_CHECK(c.memory_cap == cases[i].bytes, "%s: %lld bytes, want %lld", cases[i].text,
                 (long long)c.memory_cap, (long long)cases[i].bytes);
    }
}

TB_TEST(memory_cap_refuses_unknown_suffixes_and_negative_or_overflowing_counts) {
    static const char *const bad[] = {"12Q", "-1", "-1G", "G", "", "1.5G", "1 G", "1GiBx", "1B", "8388608T",
                                      "99999999999999999999"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        tb_config c;
        tb_error e;
        int help;
        char value[32];
        snprintf(value, sizeof value, "%s", bad[i]);
        char *argv[] = {"pretrain_gpt", "--memory-cap", value};
        char expect[96];
        snprintf(expect, sizeof expect, "flag --memory-cap: '%s' is not a byte count", bad[i]);
        TB_CHECK(parse(&c, ARGC(argv), argv, &help, &e) != 0 && strstr(e.msg, expect),
                 "'%s': want \"%s\", got \"%s\"", bad[i], expect, e.msg);
    }
}

TB_TEST(string_values_longer_than_the_path_limit_are_refused) {
    static char long_path[TB_PATH_MAX + 8];
    memset(long_path, 'a', TB_PATH_MAX);
    long_path[TB_PATH_MAX] = '\0';
    tb_config c;
    tb_error e;
    int help;
    char *argv[] = {"pretrain_gpt", "--save", long_path};
    TB_CHECK(parse(&c, ARGC(argv), argv, &help, &e) != 0 &&
                 strstr(e.msg, "flag --save: value is 1024 characters, at most 1023 allowed"),
             "\"%s\"", e.msg);
    long_path[TB_PATH_MAX - 1] = '\0';
    TB_CHECK(parse(&c, ARGC(argv), argv, &help, &e) == 0 && strlen(c.save) == TB_PATH_MAX - 1,
             "1023 characters fit: \"%s\"", e.msg);
}

TB_TEST(every_json_key_is_its_flag_with_underscores_and_every_default_parses) {
    int n = 0;
    for (const tb_option *o = tb_config_options; o->flag; o++, n++) {
        char want[128];
        TB_CHECK(strncmp(o->flag, "--", 2) == 0, "%s starts with --", o->flag);
        snprintf(want, sizeof want, "%s", o->flag + 2);
        for (char *p = want; *p; p++)
            if (*p == '-') *p = '_';
        TB_CHECK(!strcmp(o->key, want), "flag %s has key %s, want %s", o->flag, o->key, want);
        TB_CHECK(o->help && o->help[0] && o->group && o->group[0] && o->default_value, "%s documented", o->flag);
        for (const tb_option *q = tb_config_options; q < o; q++)
            TB_CHECK(strcmp(q->flag, o->flag) != 0, "%s listed twice", o->flag);
        // Giving the default explicitly changes nothing.
        tb_config a, b;
        tb_error e;
        int help;
        config_defaults(&a);
        char flag_eq[1200];
        snprintf(flag_eq, sizeof flag_eq, "%s=%s", o->flag, o->default_value);
        char *argv[] = {"pretrain_gpt", flag_eq};
        TB_CHECK(parse(&b, ARGC(argv), argv, &help, &e) == 0, "%s: \"%s\"", flag_eq, e.msg);
        json_t *ja = config_to_json(&a), *jb = config_to_json(&b);
        TB_CHECK(json_equal(ja, jb), "%s changes the config", flag_eq);
        json_decref(ja);
        json_decref(jb);
    }
    TB_CHECK(n >= 50, "the table has %d options", n);
}

// ---------------------------------------------------------------------------------------
// --config FILE.json

TB_TEST(config_file_keys_with_underscores_are_applied) {
    char path[512];
    tb_tmp_path(path, sizeof path, "apply.json");
    TB_REQUIRE(tb_write_text(path, "{\"num_layers\": 6, \"hidden_size\": 384, \"normalization\": \"RMSNorm\",\n"
                                   " \"swiglu\": true, \"lr\": 6e-4, \"min_lr\": 6, \"seed\": 42,\n"
                                   " \"memory_cap\": \"2G\", \"data_path\": \"/d/t.bin\"}\n") == 0,
               "write %s", path);
    tb_config c;
    tb_error e;
    int help;
    char arg[600];
    snprintf(arg, sizeof arg, "--config=%s", path);
    char *argv[] = {"pretrain_gpt", arg};
    TB_CHECK(parse(&c, ARGC(argv), argv, &help, &e) == 0, "\"%s\"", e.msg);
    TB_CHECK(c.num_layers == 6 && c.hidden_size == 384, "layers %d hidden %d", c.num_layers, c.hidden_size);
    TB_CHECK(c.normalization == TB_NORM_RMSNORM && c.swiglu == 1, "norm %d swiglu %d", c.normalization, c.swiglu);
    TB_CHECK(c.lr == 6e-4 && c.min_lr == 6.0, "an integer is a number for a float key: lr %g min_lr %g", c.lr,
             c.min_lr);
    TB_CHECK(c.seed == 42, "seed %lld", (long long)c.seed);
    TB_CHECK(c.memory_cap == INT64_C(2) << 30, "memory_cap \"2G\": %lld", (long long)c.memory_cap);
    TB_CHECK(!strcmp(c.data_path, "/d/t.bin"), "data_path '%s'", c.data_path);
    TB_CHECK(c.num_attention_heads == 4, "keys not in the file keep their defaults");

    // config_load_json directly, over a config that already has values.
    config_defaults(&c);
    c.num_attention_heads = 8;
    TB_CHECK(config_load_json(&c, path, &e) == 0, "\"%s\"", e.msg);
    TB_CHECK(c.num_layers == 6 && c.num_attention_heads == 8, "layers %d heads %d", c.num_layers,
             c.num_attention_heads);
    remove(path);
}

TB_TEST(command_line_flags_override_the_config_file_wherever_they_stand) {
    char path[512];
    tb_tmp_path(path, sizeof path, "override.json");
    TB_REQUIRE(tb_write_text(path, "{\"num_layers\": 6, \"hidden_size\": 384, \"swiglu\": true}") == 0, "write");
    tb_config c;
    tb_error e;
    int help;
    char *before[] = {"pretrain_gpt", "--num-layers", "2", "--swiglu=false", "--config", path};
    TB_REQUIRE(parse(&c, ARGC(before), before, &help, &e) == 0, "\"%s\"", e.msg);
    TB_CHECK(c.num_layers == 2 && c.swiglu == 0, "flags before --config win: layers %d swiglu %d", c.num_layers,
             c.swiglu);
    TB_CHECK(c.hidden_size == 384, "the file still applies: hidden %d", c.hidden_size);
    char *after[] = {"pretrain_gpt", "--config", path, "--num-layers=3"};
    TB_REQUIRE(parse(&c, ARGC(after), after, &help, &e) == 0, "\"%s\"", e.msg);
    TB_CHECK(c.num_layers == 3 && c.hidden_size == 384 && c.swiglu == 1, "flags after --config win: %d %d %d",
             c.num_layers, c.hidden_size, c.swiglu);
    remove(path);
}

TB_TEST(unknown_config_key_is_refused_naming_file_and_key) {
    char path[512];
    tb_tmp_path(path, sizeof path, "unknown.json");
    TB_REQUIRE(tb_write_text(path, "{\"num_layers\": 2, \"num-heads\": 4}") == 0, "write");
    tb_config c;
    tb_error e;
    int help;
    char *argv[] = {"pretrain_gpt", "--config", path};
    TB_CHECK(parse(&c, ARGC(argv), argv, &help, &e) != 0, "refused");
    char want[700];
    snprintf(want, sizeof want, "%s: key 'num-heads': unknown config key", path);
    TB_CHECK(strstr(e.msg, want) != NULL, "want \"%s\", got \"%s\"", want, e.msg);
    TB_CHECK(strstr(e.msg, "flag --config: ") == e.msg, "the message starts with the flag: \"%s\"", e.msg);
    remove(path);
}

TB_TEST(config_value_of_the_wrong_json_type_is_refused_naming_the_key) {
    static const struct {
        const char *json, *expect;
    } cases[] = {
        {"{\"num_layers\": \"four\"}", "key 'num_layers': expected an integer"},
        {"{\"num_layers\": 4.5}", "key 'num_layers': expected an integer"},
        {"{\"seed\": true}", "key 'seed': expected an integer"},
        {"{\"swiglu\": 1}", "key 'swiglu': expected true or false"},
        {"{\"lr\": \"3e-4\"}", "key 'lr': expected a number"},
        {"{\"normalization\": 1}", "key 'normalization': expected a string"},
        {"{\"normalization\": \"BatchNorm\"}", "key 'normalization': 'BatchNorm' is not one of LayerNorm|RMSNorm"},
        {"{\"data_path\": null}", "key 'data_path': expected a string"},
        {"{\"memory_cap\": 1.5}", "key 'memory_cap': expected a byte count"},
        {"{\"memory_cap\": \"12Q\"}", "key 'memory_cap': '12Q' is not a byte count"},
        {"{\"hidden_size\": 4294967296}",
         "key 'hidden_size': '4294967296' is out of range (-2147483648 to 2147483647)"},
    };
    char path[512];
    tb_tmp_path(path, sizeof path, "types.json");
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        TB_REQUIRE(tb_write_text(path, cases[i].json) == 0, "write");
        tb_config c;
        tb_error e;
        config_defaults(&c);
        TB_CHECK(config_load_json(&c, path, &e) != 0 && strstr(e.msg, cases[i].expect) && strstr(e.msg, path),
                 "%s: want \"%s\", got \"%s\"", cases[i].json, cases[i].expect, e.msg);
    }
    TB_REQUIRE(tb_write_text(path, "[1, 2]") == 0, "write");
    tb_config c;
    tb_error e;
    config_defaults(&c);
    TB_CHECK(config_load_json(&c, path, &e) != 0 && strstr(e.msg, "expected a JSON object of config keys"),
             "a top-level array: \"%s\"", e.msg);
    remove(path);
}

TB_TEST(malformed_config_json_is_refused_with_file_line_and_column) {
    char path[512];
    tb_tmp_path(path, sizeof path, "malformed.json");
    TB_REQUIRE(tb_write_text(path, "{\n  \"num_layers\": 2,\n  \"hidden_size\" 64\n}\n") == 0, "write");
    tb_config c;
    tb_error e;
    int help;
    char *argv[] = {"pretrain_gpt", "--config", path};
    TB_CHECK(parse(&c, ARGC(argv), argv, &help, &e) != 0, "refused");
    char want[600];
    snprintf(want, sizeof want, "%s:3:", path);
    const char *at = strstr(e.msg, want);
    TB_CHECK(at != NULL, "want \"%s<col>: ...\", got \"%s\"", want, e.msg);
    if (at) {
        const char *col = at + strlen(want);
        char *end;
        long column = strtol(col, &end, 10);
        TB_CHECK(end != col && *end == ':' && column > 0, "a column follows the line: \"%s\"", e.msg);
    }
    remove(path);

    // A missing file is named too.
    tb_tmp_path(path, sizeof path, "does-not-exist.json");
    TB_CHECK(parse(&c, ARGC(argv), argv, &help, &e) != 0 && strstr(e.msg, path), "\"%s\"", e.msg);
}

// Drill values are parsed strictly: sscanf's %d took 4294967796 as 500 ms, and a sign or a
// blank before a number.
TB_TEST(drill_values_out_of_int_range_or_signed_are_refused) {
    CHECK_CASES(ONLY("world_size=2 debug_slow_data=0:4294967796",
                     "debug_slow_data '0:4294967796' must be RANK:MS (decimal integers within int range)"),
                ONLY("world_size=2 debug_slow_data=0:+5",
                     "debug_slow_data '0:+5' must be RANK:MS (decimal integers within int range)"),
                ONLY("world_size=2 debug_slow_link=dp:4294967796",
                     "debug_slow_link 'dp:4294967796' must be GROUP:MS (MS a decimal integer within int range)"),
                IS_VALID("world_size=2 debug_slow_data=1:400"));
}

// Values that were accepted and had no effect: a slow link in a group of one rank (the drill never
// fired), recompute_num_layers without full recompute, min_lr with a constant lr, an
// exit_interval past the last step, --no-save-optim with no checkpoint to leave it out of.
TB_TEST(values_that_would_have_no_effect_are_refused_naming_why) {
    CHECK_CASES(ONLY("world_size=2 debug_slow_link=tp:100",
                     "debug_slow_link 'tp:100': group tp has 1 rank at this layout, so it has no link to slow"),
                IS_VALID("world_size=2 tensor_model_parallel_size=2 debug_slow_link=tp:0"),
                REFUSED("world_size=2 debug_slow_link=embedding:5", "group embedding has 1 rank"),
                IS_VALID("world_size=2 pipeline_model_parallel_size=2 global_batch_size=2 micro_batch_size=1 "
                         "debug_slow_link=embedding:5"),
                IS_VALID("world_size=2 debug_slow_link=world:5"),
                ONLY("recompute_num_layers=2", "recompute_num_layers 2 needs recompute_granularity full (is none)"),
                ONLY("recompute_granularity=selective recompute_num_layers=1",
                     "recompute_num_layers 1 needs recompute_granularity full (is selective)"),
                IS_VALID("recompute_granularity=full recompute_method=uniform recompute_num_layers=1"),
                REFUSED("lr_decay_style=constant min_lr=0.0001",
                        "min_lr 0.0001 has no effect with lr_decay_style constant"),
                IS_VALID("lr_decay_style=constant"), IS_VALID("lr_decay_style=linear min_lr=0.0001"),
                ONLY("train_iters=10 exit_interval=11",
                     "exit_interval 11 is beyond train_iters (10), so the exit would never happen"),
                IS_VALID("train_iters=10 exit_interval=10"),
                ONLY("save_optim=0", "save_optim false (--no-save-optim) needs save (a checkpoint directory)"),
                IS_VALID("save_optim=0 save=/tmp/ckpt"));
}

// A key given twice in a config file, and a second --config, each silently took the last value:
// both are refused, naming the file and the key, or both files.
TB_TEST(a_duplicate_config_key_and_a_second_config_file_are_refused) {
    char path[512];
    tb_tmp_path(path, sizeof path, "duplicate.json");
    TB_REQUIRE(tb_write_text(path, "{\"num_layers\": 2, \"num_layers\": 4}\n") == 0, "write");
    tb_config c;
    tb_error e;
    int help;
    char *argv[] = {"pretrain_gpt", "--config", path};
    TB_CHECK(parse(&c, ARGC(argv), argv, &help, &e) != 0 && strstr(e.msg, path) &&
                 strstr(e.msg, "duplicate object key near '\"num_layers\"'"),
             "a key twice: \"%s\"", e.msg);
    TB_REQUIRE(tb_write_text(path, "{\"num_layers\": 2}\n") == 0, "write");
    char *twice[] = {"pretrain_gpt", "--config", path, "--config", path};
    TB_CHECK(parse(&c, ARGC(twice), twice, &help, &e) != 0 && strstr(e.msg, "flag --config given twice"),
             "two files: \"%s\"", e.msg);
    remove(path);
}

// --config on a FIFO would block in open until a writer came: refused by what it is, at once.
TB_TEST(config_file_that_is_a_fifo_is_refused_by_kind_without_blocking) {
    char path[512];
    tb_tmp_path(path, sizeof path, "config.fifo");
    remove(path);
    TB_REQUIRE(mkfifo(path, 0600) == 0, "mkfifo %s", path);
    tb_config c;
    tb_error e;
    int help;
    char *argv[] = {"pretrain_gpt", "--config", path};
    TB_CHECK(parse(&c, ARGC(argv), argv, &help, &e) != 0 && strstr(e.msg, "is a FIFO") && strstr(e.msg, path),
             "\"%s\"", e.msg);
    remove(path);
}

// Megatron-LM's boolean flags have a --no- form: --no-FLAG clears a boolean FLAG.
TB_TEST(no_prefix_clears_a_boolean_flag_and_is_refused_for_other_kinds) {
    tb_config c;
    tb_error e;
    int help;
    char *argv[] = {"pretrain_gpt", "--no-swiglu", "--no-check-for-nan-in-loss-and-grad"};
    TB_REQUIRE(parse(&c, ARGC(argv), argv, &help, &e) == 0, "%s", e.msg);
    TB_CHECK(c.swiglu == 0 && c.check_for_nan_in_loss_and_grad == 0, "cleared: swiglu %d, check %d", c.swiglu,
             c.check_for_nan_in_loss_and_grad);
    CHECK_PARSE_REFUSALS({{"--no-num-layers"}, "unknown flag '--no-num-layers'"});
}

// A flag given twice — with a space or '=', or a boolean and its --no- form — is refused naming
// both values and where they stand: which one was meant cannot be told (argparse keeps the last
// silently). A flag over the --config file's key is not "twice": flags override the file.
TB_TEST(a_flag_given_twice_is_refused_naming_both_values) {
    CHECK_PARSE_REFUSALS(
        {{"--num-layers", "2", "--hidden-size", "64", "--num-layers=3"},
         "flag --num-layers given twice: '2' (argument 1) and '3' (argument 5); give it once"},
        {{"--swiglu", "--no-swiglu"}, "flag --swiglu given twice: 'true' (argument 1) and 'false' (argument 2)"},
        {{"--seed", "7", "--seed", "7"}, "flag --seed given twice: '7' (argument 1) and '7' (argument 3)"});
}

TB_TEST(config_json_written_by_config_to_json_loads_back_identically) {
    tb_config a;
    config_defaults(&a);
    a.num_layers = 6, a.hidden_size = 192, a.num_attention_heads = 6, a.num_query_groups = 3;
    a.seq_length = 96, a.max_position_embeddings = 1024, a.vocab_size = 257, a.normalization = TB_NORM_RMSNORM;
    a.norm_epsilon = 1e-6, a.swiglu = 1, a.untie_embeddings_and_output_weights = 1;
    a.init_method_std = 0.1 + 0.2;  // not exactly representable in few digits
    a.micro_batch_size = 3, a.global_batch_size = 12, a.train_iters = 77, a.lr = 1.0 / 3.0, a.min_lr = 1e-7;
    a.lr_warmup_iters = 5, a.lr_decay_style = TB_LR_LINEAR, a.adam_beta2 = 0.95, a.clip_grad = 0;
    a.seed = INT64_C(9007199254740993), a.recompute_granularity = TB_RECOMPUTE_FULL;
    a.recompute_method = TB_RECOMPUTE_BLOCK, a.recompute_num_layers = 2;
    snprintf(a.data_path, sizeof a.data_path, "/data/t \"quoted\" \\ path.bin");
    snprintf(a.run_dir, sizeof a.run_dir, "runs/ü");
    a.memory_cap = (INT64_C(3) << 30) + 7, a.peak_tflops = 989.5, a.log_interval = 10, a.num_threads = 3;
    config_resolve(&a);
    tb_error e;
    TB_CHECK(config_validate(&a, &e) == 0, "the config to round-trip is valid: \"%s\"", e.msg);

    json_t *ja = config_to_json(&a);
    TB_REQUIRE(ja != NULL, "config_to_json");
    json_t *derived = json_object_get(ja, "derived");
    TB_CHECK(json_is_object(derived), "config.json has a \"derived\" object");
    TB_CHECK(json_integer_value(json_object_get(derived, "padded_vocab_size")) == 384 &&
                 json_integer_value(json_object_get(derived, "num_microbatches")) == 4 &&
                 json_integer_value(json_object_get(derived, "data_parallel_size")) == 1,
             "derived values");
    int keys = 0;
    for (const tb_option *o = tb_config_options; o->flag; o++, keys++)
        TB_CHECK(json_object_get(ja, o->key) != NULL, "config.json lacks %s", o->key);
    TB_CHECK((int)json_object_size(ja) == keys + 1, "%d keys, want every option + derived (%d)",
             (int)json_object_size(ja), keys + 1);

    char path[512];
    tb_tmp_path(path, sizeof path, "roundtrip.json");
    TB_REQUIRE(json_dump_file(ja, path, JSON_INDENT(2) | JSON_SORT_KEYS) == 0, "write %s", path);

    tb_config b;
    config_defaults(&b);
    TB_REQUIRE(config_load_json(&b, path, &e) == 0, "load back: \"%s\"", e.msg);
    config_resolve(&b);
    json_t *jb = config_to_json(&b);
    TB_CHECK(json_equal(ja, jb), "the loaded config differs from the one written");
    if (!json_equal(ja, jb)) {
        char *sa = json_dumps(ja, JSON_SORT_KEYS | JSON_COMPACT), *sb = json_dumps(jb, JSON_SORT_KEYS | JSON_COMPACT);
        printf("    written: %s\n    loaded:  %s\n", sa, sb);
        free(sa);
        free(sb);
    }
    TB_CHECK(b.init_method_std == a.init_method_std && b.lr == a.lr && b.seed == a.seed &&
                 b.memory_cap == a.memory_cap && !strcmp(b.data_path, a.data_path),
             "fields bit-identical after the round trip");

    // Through the command line as well, with a flag over it.
    tb_config d;
    int help;
    char *argv[] = {"pretrain_gpt", "--config", path};
    TB_CHECK(parse(&d, ARGC(argv), argv, &help, &e) == 0, "\"%s\"", e.msg);
    config_resolve(&d);
    json_t *jd = config_to_json(&d);
    TB_CHECK(json_equal(ja, jd), "--config of config.json gives the same config");
    json_decref(ja);
    json_decref(jb);
    json_decref(jd);
    remove(path);
}

// ---------------------------------------------------------------------------------------
// The pretrain_gpt binary

TB_TEST(help_exits_0_and_lists_every_flag_with_its_default) {
    tb_output sh = {0};
    int status = tb_run(&sh, NULL, "'" PRETRAIN "' --help");
    TB_REQUIRE(sh.out && sh.err, "captured output");
    TB_CHECK(status == 0, "exit status %d; stderr: %s", status, sh.err);
    for (const tb_option *o = tb_config_options; o->flag; o++) {
        // The flag's own line: "  --flag ..." up to the end of the line.
        char start[96];
        snprintf(start, sizeof start, "\n  %s ", o->flag);
        const char *line = strstr(sh.out, start);
        TB_CHECK(line != NULL, "--help does not list %s", o->flag);
        if (!line) continue;
        line++;
        const char *eol = strchr(line, '\n');
        size_t len = eol ? (size_t)(eol - line) : strlen(line);
        char text[512], dflt[96];
        snprintf(text, sizeof text, "%.*s", (int)len, line);
        snprintf(dflt, sizeof dflt, "(default: %s)", o->default_value[0] ? o->default_value : "\"\"");
        TB_CHECK(strstr(text, dflt) != NULL, "%s's line lacks \"%s\": %s", o->flag, dflt, text);
        TB_CHECK(strstr(text, o->help) != NULL, "%s's line lacks its help: %s", o->flag, text);
        for (int k = 0; o->type == TB_OPT_CHOICE; k++) {  // each choice, marked when refused in every layout
            char buf[64], want[128];
            const char *choice = tb_choice_at(o->choices, k, buf, sizeof buf);
            if (!strcmp(choice, "?")) break;  // (past the last choice)
            snprintf(want, sizeof want, "%s%s", choice,
                     config_choice_not_supported(o->key, choice) ? " (not supported yet)" : "");
            TB_CHECK(strstr(text, want) != NULL, "%s's line lacks '%s': %s", o->flag, want, text);
        }
    }
    TB_CHECK(strstr(sh.out, "--config FILE.json") != NULL, "--help mentions --config");
    // each section once, Megatron's order first (network size, training, checkpointing, distributed)
    const char *sections[] = {"\nmodel:\n", "\ntraining:\n", "\nio:\n", "\nparallel:\n", "\ndata:\n", "\nmoe:\n",
                              "\nother:\n"};
    const char *prev = sh.out;
    for (size_t i = 0; i < sizeof sections / sizeof *sections; i++) {
        const char *at = strstr(sh.out, sections[i]);
        TB_CHECK(at && !strstr(at + 1, sections[i]) && at >= prev, "section '%.*s' once and in order", 
                 (int)strlen(sections[i]) - 2, sections[i] + 1);
        if (at) prev = at;
    }
    tb_output_free(&sh);
}

// The choices --help marks "not supported yet" (config_choice_not_supported) are exactly those
// the rules refuse so for a MoE model at one rank: every choice of every choice flag tried alone.
TB_TEST(help_marks_exactly_the_choices_the_rules_refuse_as_not_supported_yet) {
    int marked = 0;
    for (const tb_option *o = tb_config_options; o->flag; o++) {
        if (o->type != TB_OPT_CHOICE) continue;
        for (int k = 0;; k++) {
            char buf[64], named[160];
            const char *choice = tb_choice_at(o->choices, k, buf, sizeof buf);
            if (!strcmp(choice, "?")) break;  // (past the last choice)
            tb_config c;
            config_defaults(&c);
            tb_error e;
            TB_REQUIRE(set_fields(&c, "num_experts=4") == 0 && tb_option_set(&c, o, choice, o->flag, &e) == 0,
                       "%s %s", o->flag, choice);
            snprintf(named, sizeof named, "%s %s: not supported yet", o->key, choice);
            const int refused = resolve_and_validate(&c, &e) != 0 && strstr(e.msg, named) != NULL;
            const int mark = config_choice_not_supported(o->key, choice);
            marked += mark;
            TB_CHECK(refused == mark, "%s %s: %s by the rules, %s by --help%s%s", o->key, choice,
                     refused ? "refused as not supported yet" : "not refused so", mark ? "marked" : "not marked",
                     refused ? ": " : "", refused ? e.msg : "");
        }
    }
    TB_CHECK(marked == 3, "%d choices marked (global_aux_loss, sinkhorn, flex)", marked);
}

// More threads per rank than this build's OpenBLAS runs were clamped, said only in the
// banner: refused, naming the flag, the value and the limit.
TB_TEST(num_threads_beyond_the_blas_limit_exits_2_naming_the_limit) {
    tb_output sh = {0};
    int status = tb_run(&sh, NULL, "'" PRETRAIN "' --num-threads 100000 --train-iters 1");
    TB_CHECK(status == 2 && sh.err && strstr(sh.err, "flag --num-threads: 100000 exceeds ") &&
                 strstr(sh.err, "the most threads this build's OpenBLAS runs per rank"),
             "exit %d, stderr: %s", status, sh.err ? sh.err : "");
    tb_output_free(&sh);
}

TB_TEST(invalid_config_exits_2_and_prints_the_rule_on_stderr) {
    tb_output sh = {0};
    int status = tb_run(&sh, NULL,
                        "'" PRETRAIN "' --hidden-size 768 --num-attention-heads 12 "
                        "--tensor-model-parallel-size 8");
    TB_REQUIRE(sh.out && sh.err, "captured output");
    TB_CHECK(status == 2, "exit status %d", status);
    TB_CHECK(strstr(sh.err, "invalid configuration") != NULL, "stderr: %s", sh.err);
    TB_CHECK(strstr(sh.err, "num_attention_heads (12) must be divisible by tensor_model_parallel_size (8)") != NULL,
             "stderr: %s", sh.err);

    // An unsupported feature exits 2 too, before a run directory is made.
    char run_dir[512];
    tb_tmp_path(run_dir, sizeof run_dir, "unsupported-run");
    status = tb_run(&sh, NULL,
                    "'" PRETRAIN "' --num-experts 2 --moe-token-dispatcher-type flex --train-iters 1 --run-dir '%s'",
                    run_dir);
    TB_REQUIRE(sh.out && sh.err, "captured output");
    TB_CHECK(status == 2, "an unsupported feature exits 2, got %d", status);
    TB_CHECK(strstr(sh.err, "moe_token_dispatcher_type flex: not supported yet") != NULL, "stderr: %s", sh.err);
    TB_CHECK(access(run_dir, F_OK) != 0, "no run directory for a refused config: %s exists", run_dir);

    status =
        tb_run(&sh, NULL, "'" PRETRAIN "' --world-size 4 --inject-stall 5:1 --train-iters 1 --run-dir '%s'", run_dir);
    TB_REQUIRE(sh.out && sh.err, "captured output");
    TB_CHECK(status == 2, "exit status %d", status);
    TB_CHECK(strstr(sh.err, "inject_stall '5:1': rank must be in [0, 4) and step at least 1") != NULL, "stderr: %s",
             sh.err);
    TB_CHECK(access(run_dir, F_OK) != 0, "no run directory for a refused config: %s exists", run_dir);
    tb_output_free(&sh);
}

TB_TEST(warmup_stall_and_expert_rules_exit_2_before_a_run_directory_is_made) {
    tb_output sh = {0};
    char run_dir[512];
    tb_tmp_path(run_dir, sizeof run_dir, "input-rules-run");
    static const struct {
        const char *flags, *rule;
    } cases[] = {
        {"--lr-warmup-iters 5 --train-iters 3",
         "lr_warmup_iters (5) must be less than lr_decay_iters (3 = train_iters)"},
        {"--world-size 2 --inject-stall 1:99 --train-iters 3",
         "inject_stall '1:99': step 99 is beyond train_iters (3), so the stall would never happen"},
        {"--num-experts -3 --train-iters 1", "num_experts (-3) must be non-negative (0: dense)"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int status = tb_run(&sh, NULL, "'" PRETRAIN "' %s --run-dir '%s'", cases[i].flags, run_dir);
        TB_CHECK(status == 2, "%s: exit status %d", cases[i].flags, status);
        TB_CHECK(strstr(sh.err, cases[i].rule) != NULL, "%s: stderr: %s", cases[i].flags, sh.err);
        TB_CHECK(access(run_dir, F_OK) != 0, "%s: a run directory for a refused config: %s exists", cases[i].flags,
                 run_dir);
        tb_run(NULL, NULL, "rm -rf '%s'", run_dir);
    }
    tb_output_free(&sh);
}

TB_TEST(unknown_flag_and_bad_value_exit_2_naming_them) {
    tb_output sh = {0};
    int status = tb_run(&sh, NULL, "'" PRETRAIN "' --num-layers 2 --frobnicate");
    TB_REQUIRE(sh.out && sh.err, "captured output");
    TB_CHECK(status == 2, "exit status %d", status);
    TB_CHECK(strstr(sh.err, "unknown flag '--frobnicate'") != NULL, "stderr: %s", sh.err);

    status = tb_run(&sh, NULL, "'" PRETRAIN "' --memory-cap 12Q");
    TB_REQUIRE(sh.out && sh.err, "captured output");
    TB_CHECK(status == 2, "exit status %d", status);
    TB_CHECK(strstr(sh.err, "flag --memory-cap: '12Q' is not a byte count") != NULL, "stderr: %s", sh.err);
    tb_output_free(&sh);
}

// --attention-backend auto, the default (Megatron's auto picks a fused core): the blocked core
// wherever it supports the configuration, the local one on --device cuda with a head over
// 1024 (the CUDA flash kernel's limit); an explicit choice is kept; config.json says which ran.
TB_TEST(attention_backend_auto_runs_the_blocked_core_where_it_supports_the_configuration) {
    tb_config c;
    config_defaults(&c);
    TB_CHECK(c.attention_backend == TB_ATTENTION_AUTO, "the default is %s",
             config_choice_name("attention_backend", c.attention_backend));
    config_resolve(&c);
    TB_CHECK(config_attention_core(&c) == TB_ATTENTION_FLASH, "auto on the CPU: %d", config_attention_core(&c));
    json_t *j = config_to_json(&c);
    TB_CHECK(!strcmp(json_string_value(json_object_get(j, "attention_backend")) ?: "", "auto") &&
                 !strcmp(json_string_value(json_object_get(json_object_get(j, "derived"), "attention_core")) ?: "",
                         "flash"),
             "config.json keeps auto and names the core in derived");
    json_decref(j);
    c.device = TB_DEVICE_CUDA, c.hidden_size = 2048, c.num_attention_heads = 1;
    TB_CHECK(config_attention_core(&c) == TB_ATTENTION_LOCAL, "auto on cuda with head 2048 runs local");
    c.num_attention_heads = 2;
    TB_CHECK(config_attention_core(&c) == TB_ATTENTION_FLASH, "auto on cuda with head 1024 runs flash");
    c.attention_backend = TB_ATTENTION_LOCAL;
    TB_CHECK(config_attention_core(&c) == TB_ATTENTION_LOCAL, "an explicit local is kept");
    tb_config cp2 = config_with("context_parallel_size=2");
    tb_error err;
    TB_CHECK(resolve_and_validate(&cp2, &err) == 0, "cp 2 under auto: %s", err.msg);
    cp2 = config_with("context_parallel_size=2 device=cuda hidden_size=2048 num_attention_heads=1");
    TB_CHECK(resolve_and_validate(&cp2, &err) != 0 && strstr(err.msg, "is local, auto's choice here"),
             "cp 2 on cuda with head 2048 under auto names auto's choice: %s", err.msg);
}

int main(void) {
    TB_RUN(flag_space_value_and_flag_equals_value_both_set_the_field);
    TB_RUN(bool_flags_take_no_value_and_accept_an_explicit_one_after_equals);
    TB_RUN(help_flag_is_reported_not_an_error);
    TB_RUN(unknown_flag_is_refused_naming_it);
    TB_RUN(word_that_is_not_a_flag_is_refused_with_its_position);
    TB_RUN(flag_without_its_value_is_refused);
    TB_RUN(malformed_numbers_are_refused_naming_flag_and_value);
    TB_RUN(float_that_underflows_is_the_denormal_it_rounds_to_and_zero_overflow_or_nonfinite_are_refused);
    TB_RUN(bad_choice_is_refused_listing_the_allowed_ones);
    TB_RUN(memory_cap_accepts_byte_suffixes_in_powers_of_1024);
    TB_RUN(memory_cap_refuses_unknown_suffixes_and_negative_or_overflowing_counts);
    TB_RUN(string_values_longer_than_the_path_limit_are_refused);
    TB_RUN(every_json_key_is_its_flag_with_underscores_and_every_default_parses);

    TB_RUN(config_file_keys_with_underscores_are_applied);
    TB_RUN(command_line_flags_override_the_config_file_wherever_they_stand);
    TB_RUN(unknown_config_key_is_refused_naming_file_and_key);
    TB_RUN(config_value_of_the_wrong_json_type_is_refused_naming_the_key);
    TB_RUN(malformed_config_json_is_refused_with_file_line_and_column);
    TB_RUN(a_duplicate_config_key_and_a_second_config_file_are_refused);
    TB_RUN(drill_values_out_of_int_range_or_signed_are_refused);
    TB_RUN(values_that_would_have_no_effect_are_refused_naming_why);
    TB_RUN(config_file_that_is_a_fifo_is_refused_by_kind_without_blocking);
    TB_RUN(no_prefix_clears_a_boolean_flag_and_is_refused_for_other_kinds);
    TB_RUN(a_flag_given_twice_is_refused_naming_both_values);
    TB_RUN(config_json_written_by_config_to_json_loads_back_identically);

    TB_RUN(help_exits_0_and_lists_every_flag_with_its_default);
    TB_RUN(attention_backend_auto_runs_the_blocked_core_where_it_supports_the_configuration);
    TB_RUN(help_marks_exactly_the_choices_the_rules_refuse_as_not_supported_yet);
    TB_RUN(invalid_config_exits_2_and_prints_the_rule_on_stderr);
    TB_RUN(num_threads_beyond_the_blas_limit_exits_2_naming_the_limit);
    TB_RUN(warmup_stall_and_expert_rules_exit_2_before_a_run_directory_is_made);
    TB_RUN(unknown_flag_and_bad_value_exit_2_naming_them);
    return tb_test_summary();
}
