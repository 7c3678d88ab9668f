// runbook.h — `tracebook run`: the Lua 5.4 host that drives the engine through versioned
// experiments (DESIGN.md, Experiments; runbooks/README.md documents the Lua API).
//
//   tracebook run RUNBOOK.lua [--set key=value ...] [--dry-run] [--require-clean] [--force]
//                             [--artifacts DIR]
//
// A runbook declares an experiment (name, version, question, root seed), runs the engine
// with configs given as Lua tables — each run one `pretrain_gpt` process with an exact argv,
// recorded under artifacts/<experiment>/v<version>/<run-id>/ (experiments/record.h) — reads
// the results back, and makes claims: named numbers with the parser that re-derives them
// from the raw files (`tracebook prove`).
#ifndef TB_EXPERIMENTS_RUNBOOK_H
#define TB_EXPERIMENTS_RUNBOOK_H

int tracebook_run_main(int argc, char **argv);

#endif
