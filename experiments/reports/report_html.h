// report_html.h — the HTML text of `tracebook report` (report.h): a growable buffer and the
// escaping every piece of text goes through. Nothing reaches the page unescaped but the
// page's own markup and the SVG that gnuplot wrote (gnuplot escapes the text it puts in it).
#ifndef TB_EXPERIMENTS_REPORT_HTML_H
#define TB_EXPERIMENTS_REPORT_HTML_H

#include <stddef.h>

typedef struct tb_html {
    char *s;
    size_t len, cap;
} tb_html;

// Appends markup as it is (the caller's own tags; never data).
void tb_html_raw(tb_html *h, const char *markup);
void tb_html_rawn(tb_html *h, const char *markup, size_t n);
// Appends printf-formatted markup: the format is markup, every %s argument must be escaped
// already (tb_html_text for data); numbers are safe as they are.
__attribute__((format(printf, 2, 3))) void tb_html_rawf(tb_html *h, const char *fmt, ...);
// Appends text escaped for an element's content or a quoted attribute value (& < > " ').
void tb_html_text(tb_html *h, const char *text);
// printf-formatted text, escaped as a whole.
__attribute__((format(printf, 2, 3))) void tb_html_textf(tb_html *h, const char *fmt, ...);
// <tag>escaped text</tag>
void tb_html_elem(tb_html *h, const char *tag, const char *text);
// A relative link: <a href="escaped href">escaped text</a>; the href's characters that are
// not safe in a URL path are percent-encoded first.
void tb_html_link(tb_html *h, const char *href, const char *text);
void tb_html_free(tb_html *h);

#endif
