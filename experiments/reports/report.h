// report.h — `tracebook report`: one self-contained HTML page per experiment version.
//
//   tracebook report --experiment NAME [--version N] [--output FILE] [--artifacts DIR] [--json]
//
// The page (default <artifacts>/<experiment>/v<N>/report.html, N the highest version) holds
// the experiment's question and outcome (experiment.json); every claim with the verdict and
// evidence `tracebook prove` derives (prove.h: the same code, run at report time); the runs,
// with the config keys that differ between them (diff's comparison, catalog.h) and each
// run's figures by the claim parsers' own definitions (parsers.h); and the plots the runs
// hold data for (docs/RUNBOOKS.md, "Reports"), drawn by gnuplot (report_plots.h) and inlined as
// SVG. Links to every record's raw files and per-rank traces are relative to the page, so
// the artifacts folder can be moved. Opening the page needs no network: no script, style
// sheet, font or image is fetched.
//
// Refused rather than faked: a plot whose data a run lacks is left out with a line saying
// why; a plot that gnuplot cannot draw fails the report (non-zero exit, the page not written).
#ifndef TB_EXPERIMENTS_REPORT_H
#define TB_EXPERIMENTS_REPORT_H

#include <stddef.h>

#include "core/error.h"

// Writes the report of the experiment version directory version_dir
// (<artifacts>/<experiment>/v<N>) to out (NULL: version_dir/report.html), atomically.
// written receives the path written. 0, or -1 with err set (nothing written).
int tb_report_write(const char *version_dir, const char *out, char *written, size_t written_size, tb_error *err);

int tracebook_report_main(int argc, char **argv);

#endif
