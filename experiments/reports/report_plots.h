// report_plots.h — the plots of `tracebook report` (report.h), drawn by gnuplot's SVG terminal
// (docs/ARCHITECTURE.md, "Reports"): each plot writes its data to a temporary file and a
// gnuplot script beside it, runs `gnuplot SCRIPT` as a child process, and returns the SVG it
// wrote, ready to inline in the page (the XML prolog dropped, element ids made unique per
// plot). gnuplot is found on PATH, or as $TB_GNUPLOT; one that is missing or fails is an
// error naming it and what it printed.
//
// Every function returns the SVG text (malloc'd), or NULL with err set. Labels and titles
// are data: they reach gnuplot quoted, in its noenhanced text mode, and gnuplot escapes
// them into the SVG.
#ifndef TB_EXPERIMENTS_REPORT_PLOTS_H
#define TB_EXPERIMENTS_REPORT_PLOTS_H

#include "core/error.h"

// Lines: series s has n[s] points (x[s][i], y[s][i]).
char *tb_plot_lines(const char *title, const char *xlabel, const char *ylabel, int logy, int nseries,
                    const char *const *names, const int *n, const double *const *x, const double *const *y,
                    tb_error *err);

// One point per group with a bar from min to max (the repetitions' spread) at the median;
// theory (may be NULL) adds a second series of one value per group (NAN: none), named
// theory_name.
char *tb_plot_ranges(const char *title, const char *ylabel, int ngroups, const char *const *labels,
                     const double *min, const double *median, const double *max, const char *series_name,
                     const double *theory, const char *theory_name, tb_error *err);

// Stacked bars: bar b is the sum of values[b * nparts + p] over the parts p.
char *tb_plot_stacked(const char *title, const char *ylabel, int nbars, const char *const *bar_labels, int nparts,
                      const char *const *part_names, const double *values, tb_error *err);

// A timeline (Gantt): nrows rows; box i spans [start[i], end[i]] on row row[i], of kind
// kind[i] (0..nkinds-1, one colour and legend entry each).
char *tb_plot_timeline(const char *title, const char *xlabel, int nrows, const char *const *row_labels, int nboxes,
                       const int *row, const double *start, const double *end, const int *kind, int nkinds,
                       const char *const *kind_names, tb_error *err);

#endif
