// prove.h — the claims' outcomes as data: what `tracebook prove` decides, for callers that
// show it another way (`tracebook prove --json`, `tracebook report`).
//
// The document (docs/RUNBOOKS.md, "JSON output", documents every key):
//   {"claims": [{"name": "quickstart/v1/tp2_final_loss", "experiment", "version", "id",
//                "verdict": "PROVEN" | "NOT PROVEN", "proven": bool,
//                "headline": the verdict's reason in parentheses | null,
//                "reasons": [every line why it did not prove], "text": the claim's text with
//                {value} filled in | null, "raw_text", "parser", "args", "runs",
//                "claimed" | null, "at_most" | null, "derived" | null,
//                "relative_difference" | null, "relative_tolerance" | null,
//                "accepted": [accepted conditions], "warnings": [...],
//                "evidence": the parser's evidence (parsers.h), each record in it with
//                            "record": {command, repetition, sweep_point, git, config,
//                            files_verified} | null}],
//    "summary": {"claims", "proven", "not_proven", "records_verified"}}
#ifndef TB_EXPERIMENTS_PROVE_H
#define TB_EXPERIMENTS_PROVE_H

#include <jansson.h>

#include "core/error.h"

// Proves every claim of experiment (NULL: every experiment) at version (-1: every version)
// under artifacts, as `tracebook prove --experiment` does, without printing and without
// recording the outcomes in the catalogue. NULL with err set when artifacts is not a directory.
json_t *tb_prove_collect(const char *artifacts, const char *experiment, long long version, tb_error *err);

// `tracebook prove` (argv[0] = "prove"): prints each claim's verdict and evidence on stdout,
// errors on stderr; 0 when every claim asked for proved, TB_EXIT_FAILURE when one did not,
// TB_EXIT_USAGE for a bad command line.
//   tracebook prove [CLAIM | --all] [--experiment NAME] [--quiet] [--json] [--artifacts DIR]
int tracebook_prove_main(int argc, char **argv);

#endif
