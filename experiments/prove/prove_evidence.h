// prove_evidence.h — a claim's evidence as `tracebook prove` prints it: each sub-claim's
// parser, definition and value, each record's command (one shell-pasteable line), config
// highlights with the global-batch identity, commit, files read and verified, and the
// conditions and sampling of a timing claim. prove.c proves; this prints.
#ifndef TB_EXPERIMENTS_PROVE_EVIDENCE_H
#define TB_EXPERIMENTS_PROVE_EVIDENCE_H

#include <jansson.h>

#include "prove/prove_records.h"

// A config.json value by key, or from its "derived" object: an integer (a boolean as 1), -1
// when absent; a string, "?" when absent.
long long evidence_cfg_int(json_t *config, const char *key);
const char *evidence_cfg_str(json_t *config, const char *key);
// The config's highlights and the global-batch identity (config.json "derived"), one line.
void evidence_print_config(const char *indent, json_t *config);
// One record of the evidence: its run, command, config, commit, files read and verified.
void evidence_print_run(const char *indent, json_t *rec, check_table *checks);
// The evidence of a claim or sub-claim under label, its parts and records, indented.
void evidence_print(const char *indent, const char *label, json_t *ev, check_table *checks);
// The claim's text with {value} replaced by the value.
void evidence_print_text(const char *text, double value);

#endif
