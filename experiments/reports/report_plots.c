// report_plots.c — see report_plots.h. One run of gnuplot per plot: a temporary directory
// (mkdtemp) holds data.dat, plot.gp, plot.svg and gnuplot's stderr, and is removed after.
#include "reports/report_plots.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/xalloc.h"
#include "reports/report_html.h"  // tb_html: here a plain growable text buffer

#define PLOT_PATH_MAX 4096
#define PLOT_WIDTH 760
#define PLOT_HEIGHT 360

// A label as a gnuplot string literal in single quotes (its only escape: '' for ').
static void quoted(tb_html *b, const char *s) {
    tb_html_raw(b, "'");
    for (const char *p = s ? s : ""; *p; p++) {
        if (*p == '\'') tb_html_raw(b, "''");
        else if (*p == '\n' || *p == '\r' || *p == '\t') tb_html_raw(b, " ");
        else tb_html_rawn(b, p, 1);
    }
    tb_html_raw(b, "'");
}

// A label as a double-quoted field of a data file (a " inside becomes ').
static void data_label(tb_html *b, const char *s) {
    tb_html_raw(b, "\"");
    for (const char *p = s ? s : ""; *p; p++) tb_html_rawn(b, strchr("\"\n\r\t", *p) ? "'" : p, 1);
    tb_html_raw(b, "\"");
}

static int write_file(const char *path, const char *text, tb_error *err) {
    FILE *f = fopen(path, "w");
    if (!f) return tb_fail(err, "%s: cannot write: %s", path, strerror(errno));
    size_t n = strlen(text);
    int ok = fwrite(text, 1, n, f) == n;
    ok &= fclose(f) == 0;
    return ok ? 0 : tb_fail(err, "%s: cannot write: %s", path, strerror(errno));
}

static char *read_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    tb_html b = {0};
    char chunk[8192];
    size_t n;
    while ((n = fread(chunk, 1, sizeof chunk, f)) > 0) tb_html_rawn(&b, chunk, n);
    fclose(f);
    if (!b.s) tb_html_raw(&b, "");
    return b.s;
}

// The SVG gnuplot wrote, for inlining: from "<svg" on, every id="X" / id='X' and every
// reference to one (href="#X", xlink:href='#X', url(#X)) prefixed with "p<serial>-", so that
// two plots on one page share no id. Colours ('#ffffff') are not references and stay.
static char *svg_for_inline(const char *svg, int serial) {
    const char *start = strstr(svg, "<svg");
    if (!start) return NULL;
    char prefix[32];
    snprintf(prefix, sizeof prefix, "p%d-", serial);
    static const char *const marks[] = {"id=\"", "id='", "href=\"#", "href='#", "url(#"};
    tb_html b = {0};
    for (const char *p = start; *p;) {
        size_t k = 0;
        for (size_t m = 0; m < sizeof marks / sizeof *marks && !k; m++)
            if (!strncmp(p, marks[m], strlen(marks[m])) && (p == start || p[-1] == ' ' || p[-1] == ':' || m == 4))
                k = strlen(marks[m]);
        if (k) {
            tb_html_rawn(&b, p, k);
            tb_html_raw(&b, prefix);
            p += k;
        } else {
            tb_html_rawn(&b, p++, 1);
        }
    }
    return b.s;
}

// Runs gnuplot on script (the terminal and output lines are put first) with data as the file
// the script names `data`. Returns the SVG to inline, or NULL with err set.
static char *run_gnuplot(const char *data, const char *script, tb_error *err) {
    static int serial;
    const char *tmp = getenv("TMPDIR");
    char dir[PLOT_PATH_MAX];
    if (snprintf(dir, sizeof dir, "%s/tracebook-plot-XXXXXX", tmp && *tmp ? tmp : "/tmp") >= (int)sizeof dir) {
        tb_fail(err, "TMPDIR too long for a plot's temporary directory");
        return NULL;
    }
    if (!mkdtemp(dir)) {
        tb_fail(err, "%s: cannot create a temporary directory for a plot: %s", dir, strerror(errno));
        return NULL;
    }
    char data_path[PLOT_PATH_MAX + 16], script_path[PLOT_PATH_MAX + 16], svg_path[PLOT_PATH_MAX + 16],
        log_path[PLOT_PATH_MAX + 16];
    snprintf(data_path, sizeof data_path, "%s/data.dat", dir);
    snprintf(script_path, sizeof script_path, "%s/plot.gp", dir);
    snprintf(svg_path, sizeof svg_path, "%s/plot.svg", dir);
    snprintf(log_path, sizeof log_path, "%s/gnuplot.log", dir);
    tb_html full = {0};
    tb_html_rawf(&full,
                 "set terminal svg size %d,%d dynamic noenhanced font 'sans,11' background rgb 'white'\n"
                 "set output ",
                 PLOT_WIDTH, PLOT_HEIGHT);
    quoted(&full, svg_path);
    tb_html_raw(&full, "\ndata = ");
    quoted(&full, data_path);
    tb_html_raw(&full, "\nset encoding utf8\nset grid ytics lc rgb '#dddddd'\nset border lc rgb '#555555'\n"
                       "set key below\n");
    tb_html_raw(&full, script);
    tb_html_raw(&full, "\nunset output\n");
    char *svg = NULL;
    if (write_file(data_path, data, err) == 0 && write_file(script_path, full.s, err) == 0) {
        const char *gnuplot = getenv("TB_GNUPLOT");
        if (!gnuplot || !*gnuplot) gnuplot = "gnuplot";
        pid_t pid = fork();
        if (pid == 0) {
            int fd = open(log_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
            if (fd >= 0) dup2(fd, 2), dup2(fd, 1);
            execlp(gnuplot, gnuplot, script_path, (char *)NULL);
            fprintf(stderr, "exec %s: %s\n", gnuplot, strerror(errno));
            _exit(127);
        }
        int status = 0;
        if (pid < 0) tb_fail(err, "cannot start gnuplot: fork: %s", strerror(errno));
        else if (waitpid(pid, &status, 0) < 0) tb_fail(err, "gnuplot: waitpid: %s", strerror(errno));
        else {
            char *log = read_file(log_path), *text = read_file(svg_path);
            if (log) log[strcspn(log, "\n")] = '\0';
            if (WIFEXITED(status) && WEXITSTATUS(status) == 127)
                tb_fail(err, "%s not found (%s; scripts/install-deps.sh installs Debian's gnuplot-nox)", gnuplot,
                        log && *log ? log : "exit 127");
            else if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
                tb_fail(err, "gnuplot failed (%s %d) on %s: %s", WIFEXITED(status) ? "exit" : "signal",
                        WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status), script_path,
                        log && *log ? log : "(no message)");
            else if (!text || !(svg = svg_for_inline(text, ++serial)))
                tb_fail(err, "gnuplot wrote no SVG to %s", svg_path);
            free(log);
            free(text);
        }
    }
    tb_html_free(&full);
    unlink(data_path), unlink(script_path), unlink(svg_path), unlink(log_path);
    rmdir(dir);
    return svg;
}

static void title_lines(tb_html *s, const char *title, const char *xlabel, const char *ylabel) {
    tb_html_raw(s, "set title ");
    quoted(s, title);
    if (xlabel) tb_html_raw(s, "\nset xlabel "), quoted(s, xlabel);
    if (ylabel) tb_html_raw(s, "\nset ylabel "), quoted(s, ylabel);
    tb_html_raw(s, "\n");
}

char *tb_plot_lines(const char *title, const char *xlabel, const char *ylabel, int logy, int nseries,
                    const char *const *names, const int *n, const double *const *x, const double *const *y,
                    tb_error *err) {
    tb_html d = {0}, s = {0};
    title_lines(&s, title, xlabel, ylabel);
    if (logy) tb_html_raw(&s, "set logscale y\n");
    tb_html_raw(&s, "plot");
    int blocks = 0;
    for (int k = 0; k < nseries; k++) {
        if (n[k] == 0) continue;
        for (int i = 0; i < n[k]; i++) tb_html_rawf(&d, "%.17g %.17g\n", x[k][i], y[k][i]);
        tb_html_raw(&d, "\n\n");
        tb_html_rawf(&s, "%s data index %d using 1:2 with linespoints pt 7 ps 0.6 lw 1.5 title ", blocks ? "," : "",
                     blocks);
        quoted(&s, names[k]);
        blocks++;
    }
    char *svg = NULL;
    if (!blocks) tb_fail(err, "plot '%s': no points", title);
    else svg = run_gnuplot(d.s, s.s, err);
    tb_html_free(&d), tb_html_free(&s);
    return svg;
}

char *tb_plot_ranges(const char *title, const char *ylabel, int ngroups, const char *const *labels,
                     const double *min, const double *median, const double *max, const char *series_name,
                     const double *theory, const char *theory_name, tb_error *err) {
    tb_html d = {0}, s = {0};
    title_lines(&s, title, NULL, ylabel);
    int have_theory = 0;
    for (int g = 0; g < ngroups; g++) {
        tb_html_rawf(&d, "%d %.17g %.17g %.17g ", g, min[g], median[g], max[g]);
        if (theory && isfinite(theory[g])) tb_html_rawf(&d, "%.17g ", theory[g]), have_theory = 1;
        else tb_html_raw(&d, "NaN ");
        data_label(&d, labels[g]);
        tb_html_raw(&d, "\n");
    }
    tb_html_rawf(&s, "set xrange [-0.5:%d.5]\nset yrange [0:*]\nset xtics rotate by -20\n", ngroups - 1);
    tb_html_raw(&s, "plot data using 1:3:2:4:xticlabels(6) with yerrorbars pt 7 ps 1 lw 2 title ");
    quoted(&s, series_name);
    if (have_theory) {
        tb_html_raw(&s, ", data using 1:5 with points pt 5 ps 1.2 title ");
        quoted(&s, theory_name);
    }
    char *svg = ngroups > 0 ? run_gnuplot(d.s, s.s, err) : NULL;
    if (ngroups <= 0) tb_fail(err, "plot '%s': no groups", title);
    tb_html_free(&d), tb_html_free(&s);
    return svg;
}

char *tb_plot_stacked(const char *title, const char *ylabel, int nbars, const char *const *bar_labels, int nparts,
                      const char *const *part_names, const double *values, tb_error *err) {
    tb_html d = {0}, s = {0};
    title_lines(&s, title, NULL, ylabel);
    for (int b = 0; b < nbars; b++) {
        data_label(&d, bar_labels[b]);
        for (int p = 0; p < nparts; p++) tb_html_rawf(&d, " %.17g", values[b * nparts + p]);
        tb_html_raw(&d, "\n");
    }
    tb_html_raw(&s, "set style data histograms\nset style histogram rowstacked\nset style fill solid 0.85 border -1\n"
                    "set boxwidth 0.6\nset yrange [0:*]\nset xtics rotate by -20\nplot");
    for (int p = 0; p < nparts; p++) {
        tb_html_rawf(&s, "%s data using %d%s title ", p ? "," : "", p + 2, p ? "" : ":xticlabels(1)");
        quoted(&s, part_names[p]);
    }
    char *svg = nbars > 0 && nparts > 0 ? run_gnuplot(d.s, s.s, err) : NULL;
    if (nbars <= 0 || nparts <= 0) tb_fail(err, "plot '%s': no bars", title);
    tb_html_free(&d), tb_html_free(&s);
    return svg;
}

char *tb_plot_timeline(const char *title, const char *xlabel, int nrows, const char *const *row_labels, int nboxes,
                       const int *row, const double *start, const double *end, const int *kind, int nkinds,
                       const char *const *kind_names, tb_error *err) {
    tb_html d = {0}, s = {0};
    title_lines(&s, title, xlabel, NULL);
    tb_html_raw(&s, "set ytics (");
    for (int r = 0; r < nrows; r++) {
        tb_html_raw(&s, r ? ", " : "");
        quoted(&s, row_labels[r]);
        tb_html_rawf(&s, " %d", r);
    }
    tb_html_rawf(&s, ")\nset yrange [%d.6:-0.6]\nset style fill solid 0.9 noborder\nplot", nrows - 1);
    int blocks = 0;
    for (int k = 0; k < nkinds; k++) {
        int any = 0;
        for (int i = 0; i < nboxes; i++)
            if (kind[i] == k) {
                tb_html_rawf(&d, "%.17g %d %.17g\n", (start[i] + end[i]) / 2, row[i], (end[i] - start[i]) / 2);
                any = 1;
            }
        if (!any) continue;
        tb_html_raw(&d, "\n\n");
        tb_html_rawf(&s, "%s data index %d using 1:2:3:(0.38) with boxxyerror title ", blocks ? "," : "", blocks);
        quoted(&s, kind_names[k]);
        blocks++;
    }
    char *svg = blocks ? run_gnuplot(d.s, s.s, err) : NULL;
    if (!blocks) tb_fail(err, "plot '%s': no ranges", title);
    tb_html_free(&d), tb_html_free(&s);
    return svg;
}
