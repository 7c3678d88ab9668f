// plan_cli.h — `tracebook plan`: the parallel-configuration planner's command (plan.h is its
// model). docs/ARCHITECTURE.md, "Planner".
#ifndef TB_EXPERIMENTS_PLAN_CLI_H
#define TB_EXPERIMENTS_PLAN_CLI_H

int tracebook_plan_main(int argc, char **argv);

// `tracebook plan --verify`: runs small shapes of each layout family with the engine and
// compares the plan with what the engine measured (plan_verify.c). pretrain_gpt: the engine
// binary (NULL: beside argv0); work_dir: where the runs go (NULL: a new temporary directory).
int plan_verify_main(const char *pretrain_gpt, const char *work_dir, int json, const char *argv0);

#endif
