// index_speculate.h — a re-index's first parses, begun from the command lines the previous
// index recorded before the compilation database is read (index.c).
//
// After an edit, which units a re-index parses again is known from the previous index alone:
// those an input file of which changed (ix_prev_check_deps). Reading the compilation database
// (its JSON, every command split and translated: 5-7 ms over this project's 285 units) is not
// needed to start them: each is parsed at once with the command line it was parsed with last
// time (tu_inputs.command). Once the database is read, such a parse stands for its unit only
// when the database gives that unit the same command line word for word (directory, CUDA mode,
// arguments, fallback arguments): the same parse of the same files, so the same facts, as the
// parse the run would have made. Any other is dropped and its unit parsed with the database's
// command line, as without speculation. A one-file re-index's parse so begins before the
// database is read instead of after (docs/PERFORMANCE.md).
//
// Only when 1 to `jobs` units are known to be parsed again (more, and their parses outweigh the
// database's read anyway): at most `jobs` parses run beside the run's own workers, which parse
// the units no speculative parse stands for. A dropped parse still runs to its end (libclang's
// parse cannot be stopped): an edit that also changes its unit's command line costs one parse
// more, beside the one that counts.
#ifndef TB_TRACE_INDEX_SPECULATE_H
#define TB_TRACE_INDEX_SPECULATE_H

#include <stddef.h>

#include "index_compdb.h"
#include "index_options.h"
#include "index_reuse.h"
#include "index_visit.h"
#include "index_workers.h"

typedef struct ix_spec {
    ix_compdb db;        // the recorded command lines (tus[k].file: the unit's path), in db.pool
    ix_result *results;  // per speculative unit k
    size_t *list;        // 0 .. db.ntus - 1: the workers' list
    size_t *unit;        // per k: the unit of the database it stands for (ix_spec_take), or SIZE_MAX
    ix_work w;
    int started;         // workers parsing (joined by ix_spec_finish or ix_spec_free)
    size_t taken;        // how many stand for their unit
} ix_spec;

// Starts parsing the units of prev that will be parsed again, when 1 to opt->jobs of them are
// and each has a command record that unpacks (a unit without one is left to the run); else
// starts nothing. s is ready for the calls below either way.
void ix_spec_start(ix_spec *s, ix_prev *prev, const ix_options *opt);
// The database's units todo[0..ntodo) the run parses: each one a speculative parse stands for
// (same file, same command line) is taken; the others are written to rest (ntodo entries of
// room), whose count is returned.
size_t ix_spec_take(ix_spec *s, const ix_compdb *db, const size_t *todo, size_t ntodo, size_t *rest);
// Waits for the speculative parses; moves each taken one's facts to results[unit] (and, with w,
// marks the unit done in w, whose waits then return for it); frees the others'.
void ix_spec_finish(ix_spec *s, ix_result *results, ix_work *w);
void ix_spec_free(ix_spec *s);

#endif
