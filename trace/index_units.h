// index_units.h — link units: where they come from (--targets FILE, CMake's file API reply),
// inferred from the units' symbols when the build does not say which sources link into which
// binary (index_units.c), and checked when the user gave them.
#ifndef TB_TRACE_INDEX_UNITS_H
#define TB_TRACE_INDEX_UNITS_H

#include <stdio.h>

#include "core/error.h"
#include "index_compdb.h"
#include "index_options.h"
#include "index_targets.h"
#include "index_visit.h"

typedef struct ix_units_report {
    size_t units;      // link units inferred
    size_t capped;     // seeds whose choices between conflicting units were cut at the limit
    size_t unclaimed;  // units of the database in no link unit (in every binary's scope)
} ix_units_report;

// Infers link units from results (one per database unit) into t's rows (t as
// ix_targets_load leaves it with no reply: empty). A link unit never holds two units that
// both define main or the same external symbol. Returns the number of link units; 0 when
// there is nothing to tell apart (no main and no symbol defined twice).
size_t ix_units_infer(ix_targets *t, const ix_compdb *db, const ix_result *results, ix_units_report *rep);

// Warns on f (one line each) about binaries of t that hold two units defining main or the
// same external symbol, which no linker accepts. Returns how many such binaries.
size_t ix_units_check(const ix_targets *t, const ix_compdb *db, const ix_result *results, FILE *f);

// The link units' source: --targets FILE (*source "targets-file"), CMake's file API reply in
// build_dir, or none: *trc 1, to be inferred from the units' symbols (a reply that cannot be
// read is warned about on stderr). -1: --targets FILE is wrong (printed).
int ix_link_units_load(ix_targets *targets, const char *targets_file, const ix_compdb *db, const char *build_dir,
                       int *trc, const char **source, tb_error *err);
// Link units: what the build said, else inferred from the units' symbols (*source "inferred"
// or "none", notes on stderr); a --targets FILE checked against the units.
void ix_link_units_resolve(ix_targets *targets, const ix_compdb *db, const ix_result *results, int trc,
                           int targets_file, const ix_options *opt, const char **source);

#endif
