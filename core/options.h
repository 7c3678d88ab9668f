// options.h — option tables: one description of a command's flags drives its parsing,
// its --help and (for the engine's config) its JSON form, so they cannot disagree.
//
// pretrain_gpt's config (config.c) and every tracebook subcommand declare their flags as
// a table of tb_option, each naming a field of a target struct by offset. Every value is
// parsed strictly: a number with trailing characters, out of range or not finite, an
// unknown choice, a missing value — each is refused naming the flag and the value.
//
//   typedef struct { const char *artifacts; double tolerance; int jobs; } replay_args;
//   static const tb_option replay_options[] = {
//       TB_OPTION("--artifacts", replay_args, artifacts, TB_OPT_STRING, "artifacts", "DIR", "artifacts root"),
//       TB_OPTION("--timing-tolerance", replay_args, tolerance, TB_OPT_FLOAT, "0.25", "FRACTION", "..."),
//       TB_OPTION("--jobs", replay_args, jobs, TB_OPT_INT, "2", "N", "parallel build jobs"),
//       TB_OPTIONS_END};
//   static const tb_command replay_command = {"tracebook replay", "RUN", "re-run a record ...",
//                                             replay_options, 1, 1};
//   ... tb_command_parse(&replay_command, &args, argc, argv, &positional, &err) ...
#ifndef TB_CORE_OPTIONS_H
#define TB_CORE_OPTIONS_H

#include <jansson.h>
#include <stddef.h>
#include <stdio.h>

#include "core/error.h"

typedef enum tb_option_type {
    TB_OPT_INT,     // int
    TB_OPT_INT64,   // int64_t
    TB_OPT_FLOAT,   // double, finite
    TB_OPT_BOOL,    // int 0/1; a bare flag sets it, --flag=false clears it
    TB_OPT_STRING,  // size > 0: char[size] copied into; size 0: const char * into argv
    TB_OPT_CHOICE,  // int: the index in the '|'-separated choices
    TB_OPT_BYTES,   // int64_t with an optional K/M/G/T suffix (powers of 1024)
    TB_OPT_LIST,    // tb_strlist: each use of the flag appends its value
} tb_option_type;

typedef struct tb_option {
    const char *flag;           // "--num-layers"
    const char *key;            // "num_layers" (JSON key; the field's name)
    tb_option_type type;
    size_t offset;              // of the field in the target struct
    size_t size;                // TB_OPT_STRING: capacity of a char array (0: a pointer)
    const char *default_value;  // as the user would type it; NULL: none (field left as it is)
    const char *choices;        // TB_OPT_CHOICE: "LayerNorm|RMSNorm"
    const char *group;          // heading in --help; NULL: none
    const char *metavar;        // "N", "DIR" in --help; NULL: "VALUE"
    const char *help;
} tb_option;

// An entry for field `field` of struct `type` (a TB_OPT_STRING field is a const char *).
#define TB_OPTION(flag, type, field, kind, dflt, metavar, help) \
    {flag, #field, kind, offsetof(type, field), 0, dflt, NULL, NULL, metavar, help}
// A TB_OPT_STRING copied into a char array field.
#define TB_OPTION_TEXT(flag, type, field, dflt, metavar, help) \
    {flag, #field, TB_OPT_STRING, offsetof(type, field), sizeof(((type *)0)->field), dflt, NULL, NULL, metavar, help}
#define TB_OPTION_CHOICE(flag, type, field, dflt, choices, help) \
    {flag, #field, TB_OPT_CHOICE, offsetof(type, field), 0, dflt, choices, NULL, NULL, help}
#define TB_OPTIONS_END {NULL, NULL, 0, 0, 0, NULL, NULL, NULL, NULL, NULL}

// The values of a repeatable flag, in order (pointers into argv).
typedef struct tb_strlist {
    const char **items;
    int n;
} tb_strlist;
void tb_strlist_free(tb_strlist *l);

// --- values ---
// Sets o's field of target from text. `where` names the source in the message ("flag
// --lr", "run.json: key 'lr'"). Returns 0, or -1 with err set naming where and the value.
int tb_option_set(void *target, const tb_option *o, const char *value, const char *where, tb_error *err);
// The same from a JSON value (config files): integers must be JSON integers, etc.
int tb_option_set_json(void *target, const tb_option *o, json_t *v, const char *where, tb_error *err);
// The field's value as JSON (TB_OPT_CHOICE as its name).
json_t *tb_option_to_json(const void *target, const tb_option *o);
// Every default of the table into target. Returns 0, or -1 naming the bad default.
int tb_options_defaults(void *target, const tb_option *table, tb_error *err);

// --- lookup ---
const tb_option *tb_options_find_flag(const tb_option *table, const char *flag, size_t len);
const tb_option *tb_options_find_key(const tb_option *table, const char *key);
// Index of value in "a|b|c", or -1; and the name at an index ("?" when out of range).
int tb_choice_index(const char *choices, const char *value);
const char *tb_choice_at(const char *choices, int index, char *buf, size_t len);
// Parses a byte count: digits with an optional K/M/G/T (KiB, MB...) suffix. 0 or -1.
int tb_parse_bytes(const char *s, int64_t *out);

// --- commands ---
typedef struct tb_command {
    const char *name;            // "tracebook replay"
    const char *positional;      // "RUN" / "TRACE..." in the usage line; NULL: none
    const char *summary;         // one line
    const tb_option *options;    // TB_OPTIONS_END-terminated
    int min_positional;
    int max_positional;          // -1: no limit
    const char *example;         // one or more command lines, each "tracebook ...", '\n'-separated
    const char *exit_failure;    // what exit status 1 means here; NULL: "an error, reported on stderr".
                                 // Lines after the first, "N  meaning", add statuses or say what 2 is
                                 // when it is more than a usage error (bisect: "2  ... or unreadable")
} tb_command;

// Positional words, in order (pointers into argv).
typedef struct tb_positional {
    const char **items;
    int n;
} tb_positional;
void tb_positional_free(tb_positional *p);

// Parses argv[1..argc) (argv[0] is the command's name): defaults first, then every flag
// (--flag VALUE, --flag=VALUE, a bare boolean flag), words as positionals; after "--"
// every word is positional. --help / -h prints the help to stdout: usage, summary, flags,
// the example and the exit statuses. A flag the command does not take but that is an old
// spelling of one concept (tb_renamed_flags: --out for --output ...) is refused naming the
// spelling every command uses now (docs/CLI.md).
// Returns 0, 1 when help was printed (the caller exits 0), or -1 with err set; then
// tb_command_usage_error prints the message and the usage line and gives exit status 2.
int tb_command_parse(const tb_command *cmd, void *target, int argc, char **argv, tb_positional *pos,
                     tb_error *err);
void tb_command_print_help(const tb_command *cmd, FILE *out);
// The old spellings of a concept and the one every tracebook command takes (docs/CLI.md):
// {"--out", "--output"}, ..., ending in {NULL, NULL}.
typedef struct tb_renamed_flag {
    const char *old_flag, *flag;
} tb_renamed_flag;
extern const tb_renamed_flag tb_renamed_flags[];
int tb_command_usage_error(const tb_command *cmd, const tb_error *err);

#endif
