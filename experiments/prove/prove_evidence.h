// prove_evidence.h — a claim's evidence as `tracebook prove` prints it: each sub-claim's
// parser, definition and value, each record's command (one shell-pasteable line), config
// highlights with the global-batch identity, commit, files read and verified, and the
// conditions and sampling of a timing claim. prove.c proves; this prints.
#ifndef TB_EXPERIMENTS_PROVE_EVIDENCE_H
#define TB_EXPERIMENTS_PROVE_EVIDENCE_H

#include <jansson.h>

#include "prove/prove_records.h"

// The config's highlights and the global-batch identity (config.json "derived"), one line;
// and the same as an object (prove --json), a new reference.
void evidence_print_config(const char *indent, json_t *config);
json_t *evidence_config_json(json_t *config);
// One record of the evidence: its run, command, config, commit, files read and verified.
void evidence_print_run(const char *indent, json_t *rec, check_table *checks);
// The evidence of a claim or sub-claim under label, its parts and records, indented.
void evidence_print(const char *indent, const char *label, json_t *ev, check_table *checks);
// The claim's text with {value} replaced by the value.
void evidence_print_text(const char *text, double value);

#endif
