// runbook.h — `tracebook run`: the Lua 5.4 host that drives the engine through versioned
// experiments (docs/ARCHITECTURE.md, "Experiments"; runbooks/README.md documents the Lua API).
//
//   tracebook run RUNBOOK.lua [--set key=value ...] [--dry-run] [--require-clean] [--force]
//                             [--env-allow NAME_OR_GLOB ...] [--env-deny GLOB ...] [--artifacts DIR]
//
// (`tracebook run --help` prints the flags from the command's option table.)
//
// A runbook declares an experiment (name, version, question, root seed), runs the engine
// with configs given as Lua tables — each run one `pretrain_gpt` process with an exact argv,
// recorded under artifacts/<experiment>/v<version>/<run-id>/ (experiments/records/record.h) — reads
// the results back, and makes claims: named numbers with the parser that re-derives them
// from the raw files (`tracebook prove`). The implementation: runbook.c (the command),
// runbook_api.c and runbook_run.c (the Lua API), sharing runbook_host.h.
#ifndef TB_EXPERIMENTS_RUNBOOK_H
#define TB_EXPERIMENTS_RUNBOOK_H

int tracebook_run_main(int argc, char **argv);

#endif
