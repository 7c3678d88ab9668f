// ckpt_cli.h — `tracebook ckpt RUN`: a run's checkpoint saves as their phases per rank
// (the run directory's checkpoint.json, engine/checkpoint/dist_checkpoint.h).
#ifndef TB_EXPERIMENTS_CKPT_CLI_H
#define TB_EXPERIMENTS_CKPT_CLI_H

int tracebook_ckpt_main(int argc, char **argv);

#endif
