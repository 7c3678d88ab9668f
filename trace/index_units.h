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

// The external symbols the inference reads of a unit: each it defines (kind 'd', with its
// name), then each it refers to ('r'; name NULL; a symbol may come more than once).
typedef void ix_link_symbol_fn(void *ctx, char kind, const char *usr, const char *name);
void ix_unit_link_symbols(const ix_result *r, ix_link_symbol_fn *fn, void *ctx);

// Whether the inference could give other link units once `now` replaces `old` as one unit's
// facts, every other unit's unchanged (an update in place keeps the link units inferred before
// only when it could not): NULL when the unit defines main or not as before, defines or stops
// defining no symbol another unit defines or refers to, and refers to the same symbols of other
// units in the same order; else what changed, a static sentence ("the link units are inferred,
// and a parsed unit ..."). The lookups answer for every unit but this one, in the old facts
// and the new (several units parsed: either may be what another unit's inference reads).
typedef struct ix_link_lookup {
    int (*defined_elsewhere)(void *ctx, const char *usr);
    int (*referenced_elsewhere)(void *ctx, const char *usr);
    void *ctx;
} ix_link_lookup;
const char *ix_units_link_facts_changed(const ix_result *old, const ix_result *now, const ix_link_lookup *look);

// Warns on f (one line each) about binaries of t that hold two units defining main or the
// same external symbol, which no linker accepts. Returns how many such binaries.
size_t ix_units_check(const ix_targets *t, const ix_compdb *db, const ix_result *results, FILE *f);

// The link units' source: --targets FILE (*source "targets-file"), CMake's file API reply in
// build_dir, or none: *trc 1, to be inferred from the units' symbols (a reply that cannot be
// read is warned about on stderr). -1: --targets FILE is wrong (printed).
int ix_link_units_load(ix_targets *targets, const char *targets_file, const ix_compdb *db, const char *build_dir,
                       int *trc, const char **source, tb_error *err);
// Link units: what the build said, else inferred from the units' symbols (*source "inferred"
// or "none", notes on stderr; targets->capped: the seeds cut at the limit, warned about); a
// --targets FILE checked against the units.
void ix_link_units_resolve(ix_targets *targets, const ix_compdb *db, const ix_result *results, int trc,
                           int targets_file, const ix_options *opt, const char **source);
// The warning that capped seeds (ix_units_report.capped) leave binaries out; nothing for 0.
// A re-index that keeps the inferred link units says it again (meta link_units_capped).
void ix_units_warn_capped(size_t capped);

#endif
