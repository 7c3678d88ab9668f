// report_html.c — see report_html.h.
#include "reports/report_html.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/xalloc.h"

static void reserve(tb_html *h, size_t more) {
    if (h->len + more + 1 <= h->cap) return;
    size_t cap = h->cap ? h->cap : 4096;
    while (cap < h->len + more + 1) cap *= 2;
    h->s = tb_xrealloc(h->s, cap, "report HTML");
    h->cap = cap;
}

void tb_html_rawn(tb_html *h, const char *markup, size_t n) {
    reserve(h, n);
    memcpy(h->s + h->len, markup, n);
    h->len += n;
    h->s[h->len] = '\0';
}

void tb_html_raw(tb_html *h, const char *markup) { tb_html_rawn(h, markup, strlen(markup)); }

static char *vformat(const char *fmt, va_list ap) {
    va_list copy;
    va_copy(copy, ap);
    int n = vsnprintf(NULL, 0, fmt, copy);
    va_end(copy);
    char *s = tb_xmalloc((size_t)(n > 0 ? n : 0) + 1, "report text");
    vsnprintf(s, (size_t)(n > 0 ? n : 0) + 1, fmt, ap);
    return s;
}

void tb_html_rawf(tb_html *h, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    char *s = vformat(fmt, ap);
    va_end(ap);
    tb_html_raw(h, s);
    free(s);
}

void tb_html_text(tb_html *h, const char *text) {
    for (const char *p = text ? text : ""; *p; p++) {
        switch (*p) {
        case '&': tb_html_raw(h, "&amp;"); break;
        case '<': tb_html_raw(h, "&lt;"); break;
        case '>': tb_html_raw(h, "&gt;"); break;
        case '"': tb_html_raw(h, "&quot;"); break;
        case '\'': tb_html_raw(h, "&#39;"); break;
        default: tb_html_rawn(h, p, 1);
        }
    }
}

void tb_html_textf(tb_html *h, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    char *s = vformat(fmt, ap);
    va_end(ap);
    tb_html_text(h, s);
    free(s);
}

void tb_html_elem(tb_html *h, const char *tag, const char *text) {
    tb_html_rawf(h, "<%s>", tag);
    tb_html_text(h, text);
    tb_html_rawf(h, "</%s>", tag);
}

void tb_html_link(tb_html *h, const char *href, const char *text) {
    tb_html *enc = &(tb_html){0};
    for (const unsigned char *p = (const unsigned char *)href; *p; p++) {
        if ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') || strchr("-._~/", *p))
            tb_html_rawn(enc, (const char *)p, 1);
        else
            tb_html_rawf(enc, "%%%02X", *p);
    }
    tb_html_raw(h, "<a href=\"");
    tb_html_text(h, enc->s ? enc->s : "");
    tb_html_raw(h, "\">");
    tb_html_text(h, text);
    tb_html_raw(h, "</a>");
    tb_html_free(enc);
}

void tb_html_free(tb_html *h) {
    free(h->s);
    h->s = NULL;
    h->len = h->cap = 0;
}
