// chain_output.h — what the trace tests share to read `tracebook chain` output: the text of
// one numbered chain, the section of one binary.
#ifndef TB_TESTS_TRACE_CHAIN_OUTPUT_H
#define TB_TESTS_TRACE_CHAIN_OUTPUT_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// The text of chain #n (1-based) in chain output (malloc'd): from "#n (" at the start of a
// line through the newline before the next "#" or "[" line, or to the end; "" when the first
// "#n (" is not at the start of a line.
static inline char *tb_chain_n(const char *out, int n) {
    char mark[32];
    snprintf(mark, sizeof mark, "#%d (", n);
    const char *p = strstr(out, mark);
    if (!p || (p != out && p[-1] != '\n')) return strdup("");
    const char *e = strstr(p + 1, "\n#");
    const char *e2 = strstr(p + 1, "\n[");
    if (!e || (e2 && e2 < e)) e = e2;
    return strndup(p, e ? (size_t)(e - p) + 1 : strlen(p));
}

// The part of chain output for binary LABEL (malloc'd): from "[LABEL] " to the next line
// that starts with "[", or to the end; "" when there is none.
static inline char *tb_chain_section(const char *out, const char *label) {
    char mark[256];
    snprintf(mark, sizeof mark, "[%s] ", label);
    const char *p = strstr(out, mark);
    if (!p) return strdup("");
    const char *e = strstr(p + 1, "\n[");
    return strndup(p, e ? (size_t)(e - p) + 1 : strlen(p));
}

#endif
