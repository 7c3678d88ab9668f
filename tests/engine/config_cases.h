// config_cases.h — what the config tests share: resolve-and-validate with the outcome expected
// (valid, refused with exactly a message, refused with a message holding a text), a config
// from "key=value ..." settings, tables of such cases, and tables of refused command lines.
#ifndef TB_TESTS_ENGINE_CONFIG_CASES_H
#define TB_TESTS_ENGINE_CONFIG_CASES_H

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "config/config.h"
#include "tb_test.h"

// Resolves then validates a copy of *cfg (the caller's config stays as it set it).
static inline int resolve_and_validate(const tb_config *cfg, tb_error *err) {
    tb_config c = *cfg;
    config_resolve(&c);
    return config_validate(&c, err);
}

// Writes "key=value key=value ..." (JSON keys of the option table) straight into the fields
// of *cfg, as an assignment would: no rule of the flags applies, so a negative byte count or
// NaN can be set too. Returns 0, or -1 naming the word it cannot apply.
static inline int set_fields(tb_config *cfg, const char *settings) {
    char words[1024];
    snprintf(words, sizeof words, "%s", settings);
    for (char *save = NULL, *kv = strtok_r(words, " ", &save); kv; kv = strtok_r(NULL, " ", &save)) {
        char *value = strchr(kv, '='), *end = NULL;
        const tb_option *o = value ? (*value++ = '\0', tb_options_find_key(tb_config_options, kv)) : NULL;
        void *field = o ? (char *)cfg + o->offset : NULL;
        if (!o)
            end = kv;
        else if (o->type == TB_OPT_INT || o->type == TB_OPT_BOOL)
            *(int *)field = (int)strtol(value, &end, 10);
        else if (o->type == TB_OPT_INT64 || o->type == TB_OPT_BYTES)
            *(int64_t *)field = strtoll(value, &end, 10);
        else if (o->type == TB_OPT_FLOAT)
            *(double *)field = strtod(value, &end);
        else if (o->type == TB_OPT_CHOICE)
            end = (*(int *)field = tb_choice_index(o->choices, value)) < 0 ? value : "";
        else if (o->type == TB_OPT_STRING && o->size)
            end = "", snprintf(field, o->size, "%s", value);
        if (!end || *end) {
            printf("    cannot set '%s' of \"%s\"\n", kv, settings);
            return -1;
        }
    }
    return 0;
}

// The default config with `settings` applied.
static inline tb_config config_with(const char *settings) {
    tb_config c;
    config_defaults(&c);
    TB_CHECK(set_fields(&c, settings) == 0, "settings \"%s\"", settings);
    return c;
}

enum { EXPECT_OK, EXPECT_EXACTLY, EXPECT_HOLDING };

// The resolved config is valid (EXPECT_OK), refused with exactly `text` as the message: this
// one rule fired (EXPECT_EXACTLY), or refused with a message holding `text` (EXPECT_HOLDING). A failure names the
// caller's line, or the case's settings when line is 0.
static inline void expect_at(int line, const tb_config *cfg, int expect, const char *text, const char *settings) {
    char where[1100];
    if (line)
        snprintf(where, sizeof where, "line %d", line);
    else
        snprintf(where, sizeof where, "\"%s\"", settings ? settings : "");
    tb_error e;
    memset(&e, 0, sizeof e);
    int rc = resolve_and_validate(cfg, &e);
    if (expect == EXPECT_OK)
        TB_CHECK(rc == 0, "%s: expected a valid config; got \"%s\"", where, e.msg);
    else if (expect == EXPECT_EXACTLY)
        TB_CHECK(rc != 0 && strcmp(e.msg, text) == 0, "%s: expected exactly \"%s\"; got rc %d and \"%s\"", where, text,
                 rc, e.msg);
    else
        TB_CHECK(rc != 0 && strstr(e.msg, text) != NULL, "%s: expected a refusal naming \"%s\"; got rc %d and \"%s\"",
                 where, text, rc, e.msg);
}

#define EXPECT_VALID(cfgp) expect_at(__LINE__, (cfgp), EXPECT_OK, NULL, NULL)
#define EXPECT_ONLY(cfgp, text) expect_at(__LINE__, (cfgp), EXPECT_EXACTLY, (text), NULL)
#define EXPECT_REFUSED(cfgp, text) expect_at(__LINE__, (cfgp), EXPECT_HOLDING, (text), NULL)

// One case of config_validate: the default config with `settings`, and what is expected of it.
typedef struct validate_case {
    const char *settings;
    int expect;  // EXPECT_OK, EXPECT_EXACTLY, EXPECT_HOLDING
    const char *text;
} validate_case;

#define IS_VALID(settings) {settings, EXPECT_OK, NULL}
#define ONLY(settings, text) {settings, EXPECT_EXACTLY, text}
#define REFUSED(settings, text) {settings, EXPECT_HOLDING, text}

static inline void check_cases(const validate_case *cases, size_t n) {
    for (size_t i = 0; i < n; i++) {
        tb_config c = config_with(cases[i].settings);
        expect_at(0, &c, cases[i].expect, cases[i].text, cases[i].settings);
    }
}

// Checks every case of a test's own table.
#define CHECK_CASES(...)                                       \
    do {                                                       \
        static const validate_case cases_[] = {__VA_ARGS__};   \
        check_cases(cases_, sizeof cases_ / sizeof cases_[0]); \
    } while (0)

// Parses argv (argv[0] is the program) into a fresh default config.
static inline int parse(tb_config *cfg, int argc, char **argv, int *help, tb_error *err) {
    config_defaults(cfg);
    memset(err, 0, sizeof *err);
    return config_parse_args(cfg, argc, argv, help, err);
}

#define ARGC(a) ((int)(sizeof(a) / sizeof(a)[0]))

// A command line config_parse_args refuses (the words after the program, NULL-ended), and a
// text the message holds.
typedef struct parse_refusal {
    const char *words[8];
    const char *text;
} parse_refusal;

static inline void check_parse_refusals(const parse_refusal *cases, size_t n) {
    for (size_t i = 0; i < n; i++) {
        char *argv[9] = {"pretrain_gpt"}, line[512] = "";
        int argc = 1;
        for (; argc < 9 && cases[i].words[argc - 1]; argc++) {
            argv[argc] = (char *)cases[i].words[argc - 1];
            snprintf(line + strlen(line), sizeof line - strlen(line), " %s", argv[argc]);
        }
        tb_config c;
        tb_error e;
        int help;
        TB_CHECK(parse(&c, argc, argv, &help, &e) != 0 && strstr(e.msg, cases[i].text),
                 "pretrain_gpt%s: want \"%s\", got \"%s\"", line, cases[i].text, e.msg);
    }
}

#define CHECK_PARSE_REFUSALS(...)                                       \
    do {                                                                \
        static const parse_refusal cases_[] = {__VA_ARGS__};            \
        check_parse_refusals(cases_, sizeof cases_ / sizeof cases_[0]); \
    } while (0)
#endif
