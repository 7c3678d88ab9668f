// replay.h — `tracebook replay RUN` (see replay.c for the steps and the verdicts).
#ifndef TB_EXPERIMENTS_REPLAY_H
#define TB_EXPERIMENTS_REPLAY_H

int tracebook_replay_main(int argc, char **argv);

#endif
