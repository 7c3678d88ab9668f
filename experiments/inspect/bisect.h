// bisect.h — `tracebook bisect RUN RUN`: the first tensor where two runs diverge beyond
// float reordering (bisect.c). Exit status as diff's: 0 no divergence, 1 a divergence, 2
// trouble (a bad flag, a run without dumped tensors).
#ifndef TB_EXPERIMENTS_BISECT_H
#define TB_EXPERIMENTS_BISECT_H

#include <jansson.h>

#include "core/error.h"

// The comparison itself, for the CLI and the first_divergence claim parser (parsers.h): the
// dumped tensors of step `step` (0: the lowest dumped) of two run directories. *result (the
// caller decrefs it) is {"step", "tensors_compared", "tensors_in_one_run_only", "tolerance",
// "first_divergence": null | {"kind": "divergence" | "shape", "tensor", "phase", "position"
// (1-based in the step order), and for a divergence "max_abs_difference", "relative_to_scale",
// "bound", "at_element", "a", "b", "scale"}}. 0, or -1 with err set (a run without tensors).
int tb_bisect_runs(const char *run_a, const char *run_b, long long step, double tolerance, json_t **result,
                   tb_error *err);

int tracebook_bisect_main(int argc, char **argv);

#endif
