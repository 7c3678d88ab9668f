// bisect.h — `tracebook bisect RUN_A RUN_B`: the first tensor where two runs diverge beyond
// float reordering (bisect.c). Exit status as diff's: 0 no divergence, 1 a divergence, 2
// trouble (a bad flag, a run without dumped tensors).
#ifndef TB_EXPERIMENTS_BISECT_H
#define TB_EXPERIMENTS_BISECT_H

int tracebook_bisect_main(int argc, char **argv);

#endif
