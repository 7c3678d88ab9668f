#include "core/options.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/xalloc.h"

// ---------------------------------------------------------------------------------------
// Choices and byte counts

int tb_choice_index(const char *choices, const char *value) {
    int i = 0;
    size_t n = strlen(value);
    for (const char *p = choices; *p; i++) {
        const char *bar = strchr(p, '|');
        size_t len = bar ? (size_t)(bar - p) : strlen(p);
        if (len == n && strncmp(p, value, n) == 0) return i;
        if (!bar) break;
        p = bar + 1;
    }
    return -1;
}

const char *tb_choice_at(const char *choices, int index, char *buf, size_t len) {
    const char *p = choices;
    for (int i = 0; i < index && p; i++) {
        p = strchr(p, '|');
        if (p) p++;
    }
    if (!p || index < 0) return "?";
    const char *bar = strchr(p, '|');
    size_t n = bar ? (size_t)(bar - p) : strlen(p);
    if (n >= len) n = len - 1;
    memcpy(buf, p, n);
    buf[n] = '\0';
    return buf;
}

int tb_parse_bytes(const char *s, int64_t *out) {
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || v < 0) return -1;
    int shift = 0;
    switch (*end) {
    case 'K': case 'k': shift = 10; end++; break;
    case 'M': case 'm': shift = 20; end++; break;
    case 'G': case 'g': shift = 30; end++; break;
    case 'T': case 't': shift = 40; end++; break;
    default: break;
    }
    if (shift && (*end == 'i' || *end == 'I')) end++;
    if (shift && (*end == 'B' || *end == 'b')) end++;
    if (*end) return -1;
    if (v > (INT64_MAX >> shift)) return -1;
    *out = (int64_t)v << shift;
    return 0;
}

// ---------------------------------------------------------------------------------------
// Values

void tb_strlist_free(tb_strlist *l) {
    free(l->items);
    l->items = NULL;
    l->n = 0;
}

void tb_positional_free(tb_positional *p) {
    free(p->items);
    p->items = NULL;
    p->n = 0;
}

int tb_option_set(void *target, const tb_option *o, const char *value, const char *where, tb_error *err) {
    char *field = (char *)target + o->offset;
    char *end;
    errno = 0;
    switch (o->type) {
    case TB_OPT_INT: {
        long v = strtol(value, &end, 10);
        if (end == value || *end) return tb_fail(err, "%s: '%s' is not an integer", where, value);
        if (errno == ERANGE || v < INT_MIN || v > INT_MAX)
            return tb_fail(err, "%s: '%s' is out of range (%d to %d)", where, value, INT_MIN, INT_MAX);
        *(int *)field = (int)v;
        return 0;
    }
    case TB_OPT_INT64: {
        long long v = strtoll(value, &end, 10);
        if (end == value || *end) return tb_fail(err, "%s: '%s' is not an integer", where, value);
        if (errno == ERANGE)
            return tb_fail(err, "%s: '%s' is out of range (%lld to %lld)", where, value, LLONG_MIN, LLONG_MAX);
        *(int64_t *)field = v;
        return 0;
    }
    case TB_OPT_FLOAT: {
        double v = strtod(value, &end);
        if (end == value || *end) return tb_fail(err, "%s: '%s' is not a number", where, value);
        // ERANGE is overflow (±HUGE_VAL) or underflow (a denormal or 0): a value too small
        // for a double is the number it rounds to, as a literal in C is; one too large, or
        // nan/inf, is no number to train with.
        if ((errno == ERANGE && fabs(v) == HUGE_VAL) || !isfinite(v))
            return tb_fail(err, "%s: '%s' is not a finite number in double range", where, value);
        // ... but not when it rounds to 0, which often means "off" (--clip-grad 1e-400)
        if (errno == ERANGE && v == 0)
            return tb_fail(err, "%s: '%s' underflows to 0 in double precision", where, value);
        *(double *)field = v;
        return 0;
    }
    case TB_OPT_BOOL:
        if (!strcmp(value, "true") || !strcmp(value, "1")) *(int *)field = 1;
        else if (!strcmp(value, "false") || !strcmp(value, "0")) *(int *)field = 0;
        else return tb_fail(err, "%s: '%s' is not true or false", where, value);
        return 0;
    case TB_OPT_STRING:
        if (o->size == 0) {
            *(const char **)field = value;
            return 0;
        }
        if (strlen(value) >= o->size)
            return tb_fail(err, "%s: value is %zu characters, at most %zu allowed", where, strlen(value),
                           o->size - 1);
        memcpy(field, value, strlen(value) + 1);
        return 0;
    case TB_OPT_CHOICE: {
        int i = tb_choice_index(o->choices, value);
        if (i < 0) return tb_fail(err, "%s: '%s' is not one of %s", where, value, o->choices);
        *(int *)field = i;
        return 0;
    }
    case TB_OPT_BYTES:
        if (tb_parse_bytes(value, (int64_t *)field) != 0)
            return tb_fail(err, "%s: '%s' is not a byte count (e.g. 1048576, 512M, 2G)", where, value);
        return 0;
    case TB_OPT_LIST: {
        tb_strlist *l = (tb_strlist *)field;
        l->items = tb_xreallocarray(l->items, (size_t)l->n + 1, sizeof *l->items, "option values");
        l->items[l->n++] = value;
        return 0;
    }
    }
    return tb_fail(err, "%s: unknown option type", where);
}

int tb_option_set_json(void *target, const tb_option *o, json_t *v, const char *where, tb_error *err) {
    char text[64];
    switch (o->type) {
    case TB_OPT_STRING:
        if (o->size == 0) return tb_fail(err, "%s: not settable from JSON", where);
        /* fall through */
    case TB_OPT_CHOICE:
        if (!json_is_string(v)) return tb_fail(err, "%s: expected a string", where);
        return tb_option_set(target, o, json_string_value(v), where, err);
    case TB_OPT_BOOL:
        if (!json_is_boolean(v)) return tb_fail(err, "%s: expected true or false", where);
        *(int *)((char *)target + o->offset) = json_is_true(v);
        return 0;
    case TB_OPT_INT:
    case TB_OPT_INT64:
        if (!json_is_integer(v)) return tb_fail(err, "%s: expected an integer", where);
        snprintf(text, sizeof text, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
        return tb_option_set(target, o, text, where, err);
    case TB_OPT_BYTES:
        if (json_is_string(v)) return tb_option_set(target, o, json_string_value(v), where, err);
        if (!json_is_integer(v)) return tb_fail(err, "%s: expected a byte count", where);
        snprintf(text, sizeof text, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
        return tb_option_set(target, o, text, where, err);
    case TB_OPT_FLOAT:
        if (!json_is_number(v)) return tb_fail(err, "%s: expected a number", where);
        *(double *)((char *)target + o->offset) = json_number_value(v);
        return 0;
    case TB_OPT_LIST:
        return tb_fail(err, "%s: not settable from JSON", where);
    }
    return tb_fail(err, "%s: unknown option type", where);
}

json_t *tb_option_to_json(const void *target, const tb_option *o) {
    const char *field = (const char *)target + o->offset;
    char buf[64];
    switch (o->type) {
    case TB_OPT_INT: return json_integer(*(const int *)field);
    case TB_OPT_INT64:
    case TB_OPT_BYTES: return json_integer(*(const int64_t *)field);
    case TB_OPT_FLOAT: return json_real(*(const double *)field);
    case TB_OPT_BOOL: return json_boolean(*(const int *)field);
    case TB_OPT_STRING: {
        const char *s = o->size ? field : *(const char *const *)field;
        return s ? json_string(s) : json_null();
    }
    case TB_OPT_CHOICE: return json_string(tb_choice_at(o->choices, *(const int *)field, buf, sizeof buf));
    case TB_OPT_LIST: {
        const tb_strlist *l = (const tb_strlist *)field;
        json_t *a = json_array();
        for (int i = 0; i < l->n; i++) json_array_append_new(a, json_string(l->items[i]));
        return a;
    }
    }
    return json_null();
}

int tb_options_defaults(void *target, const tb_option *table, tb_error *err) {
    for (const tb_option *o = table; o->flag; o++) {
        if (!o->default_value || o->type == TB_OPT_LIST) continue;
        if (tb_option_set(target, o, o->default_value, o->flag, err) != 0)
            return tb_fail_prefix(err, "internal error: the default of %s", o->flag);
    }
    return 0;
}

// ---------------------------------------------------------------------------------------
// Lookup

const tb_option *tb_options_find_flag(const tb_option *table, const char *flag, size_t len) {
    for (const tb_option *o = table; o->flag; o++)
        if (strlen(o->flag) == len && strncmp(o->flag, flag, len) == 0) return o;
    return NULL;
}

const tb_option *tb_options_find_key(const tb_option *table, const char *key) {
    for (const tb_option *o = table; o->flag; o++)
        if (strcmp(o->key, key) == 0) return o;
    return NULL;
}

// ---------------------------------------------------------------------------------------
// Commands

static void positional_push(tb_positional *p, const char *word) {
    p->items = tb_xreallocarray(p->items, (size_t)p->n + 1, sizeof *p->items, "positional arguments");
    p->items[p->n++] = word;
}

int tb_command_parse(const tb_command *cmd, void *target, int argc, char **argv, tb_positional *pos,
                     tb_error *err) {
    memset(pos, 0, sizeof *pos);
    if (tb_options_defaults(target, cmd->options, err) != 0) return -1;
    int only_positional = 0;
    // each flag's first use (its field: -j and --jobs are one), so that a second is refused
    // rather than silently winning, as pretrain_gpt refuses one (a list flag takes every use)
    enum { GIVEN_MAX = 64 };
    struct given_flag {
        size_t offset;
        const char *as, *value;
        int as_len;
    } given[GIVEN_MAX];
    int ngiven = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (only_positional || a[0] != '-' || !strcmp(a, "-")) {
            positional_push(pos, a);
            continue;
        }
        if (!strcmp(a, "--")) {
            only_positional = 1;
            continue;
        }
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            tb_command_print_help(cmd, stdout);
            tb_positional_free(pos);
            return 1;
        }
        const char *eq = strchr(a, '=');
        size_t len = eq ? (size_t)(eq - a) : strlen(a);
        const tb_option *o = tb_options_find_flag(cmd->options, a, len);
        if (!o) {
            tb_positional_free(pos);
            for (const tb_renamed_flag *r = tb_renamed_flags; r->old_flag; r++)
                if (strlen(r->old_flag) == len && !strncmp(r->old_flag, a, len) &&
                    tb_options_find_flag(cmd->options, r->flag, strlen(r->flag)))
                    return tb_fail(err, "%s: flag '%s' is spelled '%s' now, in every tracebook command (docs/CLI.md)",
                                   cmd->name, r->old_flag, r->flag);
            return tb_fail(err, "%s: unknown flag '%.*s' (see %s --help)", cmd->name, (int)len, a, cmd->name);
        }
        char where[160];
        snprintf(where, sizeof where, "%s: flag %s", cmd->name, o->flag);
        const char *value;
        if (eq) value = eq + 1;
        else if (o->type == TB_OPT_BOOL) value = "true";
        else if (i + 1 < argc) value = argv[++i];
        else {
            tb_positional_free(pos);
            return tb_fail(err, "%s: missing value", where);
        }
        for (int g = 0; g < ngiven && o->type != TB_OPT_LIST; g++)
            if (given[g].offset == o->offset) {
                tb_positional_free(pos);
                return tb_fail(err, "%s: flag %s given twice ('%s' as %.*s, then '%s' as %.*s): give it once",
                               cmd->name, o->flag, given[g].value, given[g].as_len, given[g].as, value, (int)len, a);
            }
        if (o->type != TB_OPT_LIST && ngiven < GIVEN_MAX)
            given[ngiven++] = (struct given_flag){o->offset, a, value, (int)len};
        if (tb_option_set(target, o, value, where, err) != 0) {
            tb_positional_free(pos);
            return -1;
        }
    }
    if (pos->n < cmd->min_positional || (cmd->max_positional >= 0 && pos->n > cmd->max_positional)) {
        int n = pos->n;
        tb_positional_free(pos);
        if (cmd->max_positional == 0)
            return tb_fail(err, "%s: takes no arguments, got %d ('%s')", cmd->name, n, argv[argc - 1]);
        return tb_fail(err, "%s: expects %s, got %d argument%s", cmd->name, cmd->positional ? cmd->positional : "",
                       n, n == 1 ? "" : "s");
    }
    return 0;
}

static void print_usage(const tb_command *cmd, FILE *out) {
    fprintf(out, "usage: %s%s%s [FLAGS]\n", cmd->name, cmd->positional ? " " : "", cmd->positional ? cmd->positional : "");
}

// Each line of text indented by two spaces, the first after `first`.
static void print_indented(FILE *out, const char *first, const char *text) {
    for (const char *line = text; *line; first = "") {
        size_t n = strcspn(line, "\n");
        fprintf(out, "  %s%.*s\n", first, (int)n, line);
        line += n + (line[n] == '\n');
    }
}

void tb_command_print_help(const tb_command *cmd, FILE *out) {
    print_usage(cmd, out);
    if (cmd->summary) fprintf(out, "\n%s\n", cmd->summary);
    fprintf(out, "\nflags:\n");
    for (const tb_option *o = cmd->options; o->flag; o++) {
        char lhs[256];  // a flag with its choices, whole
        if (o->type == TB_OPT_BOOL) snprintf(lhs, sizeof lhs, "%s", o->flag);
        else if (o->type == TB_OPT_CHOICE) snprintf(lhs, sizeof lhs, "%s {%s}", o->flag, o->choices);
        else snprintf(lhs, sizeof lhs, "%s %s", o->flag, o->metavar ? o->metavar : "VALUE");
        fprintf(out, "  %-30s %s", lhs, o->help);
        if (o->type == TB_OPT_LIST) fprintf(out, " (repeatable)");
        else if (o->default_value && o->default_value[0] && o->type != TB_OPT_BOOL)
            fprintf(out, " (default: %s)", o->default_value);
        fputc('\n', out);
    }
    fprintf(out, "  %-30s %s\n", "--help", "this text");
    if (cmd->example) {
        fprintf(out, "\nexample:\n");
        print_indented(out, "", cmd->example);
    }
    const char *statuses = cmd->exit_failure ? cmd->exit_failure : "an error, reported on stderr";
    fprintf(out, "\nexit status:\n  0  success\n");
    print_indented(out, "1  ", statuses);
    if (!strstr(statuses, "\n2  ")) fprintf(out, "  2  a usage error: a bad flag or argument, named on stderr\n");
}

const tb_renamed_flag tb_renamed_flags[] = {
    {"--out", "--output"},
    {"--max", "--top"},
    {"--entry", "--from"},
    {NULL, NULL},
};

int tb_command_usage_error(const tb_command *cmd, const tb_error *err) {
    fprintf(stderr, "%s\n", err->msg);
    print_usage(cmd, stderr);
    return TB_EXIT_USAGE;
}
