// selection.h — a timing claim rests on every repetition of its sweep point (the stability
// gate's rule against picking samples: docs/RUNBOOKS.md, "What PROVEN means").
#ifndef TB_EXPERIMENTS_PROVE_SELECTION_H
#define TB_EXPERIMENTS_PROVE_SELECTION_H

#include <jansson.h>

// records: a timed node's evidence records ({run_id, record_dir}). They must measure one sweep
// point (their manifests' sweep_point less its seed: "mixed" otherwise) and be, for every
// repetition of that point the version holds — its number and seed; done (finished, or failed
// as the point expects), not a replay, not superseded by a listed record's re-measurement —
// the repetition's latest record (its start, then its run id; exp:run resumes the same one).
// A repetition left out, or an earlier measurement of one listed, is a selection. Each
// violation is one line given to reason(ctx, line), naming the runs.
void tb_selection_check(json_t *records, const char *parser, void (*reason)(void *ctx, const char *line), void *ctx);

#endif
