// drill_flags.c — see drill_flags.h.
#include "config/drill_flags.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

// A decimal integer in [lo, hi] at *s, digits only after an optional '-' (no blanks, no
// '+'): its end in *s. sscanf's %d took "4294967796" as 500 and " 8" as 8. 0, or -1.
static int decimal(const char **s, long long lo, long long hi, long long *out) {
    const char *p = *s;
    if (!isdigit((unsigned char)p[p[0] == '-'])) return -1;
    char *end;
    errno = 0;
    long long v = strtoll(p, &end, 10);
    if (errno || v < lo || v > hi) return -1;
    *s = end, *out = v;
    return 0;
}

int tb_drill_rank_step(const char *text, int *rank, int64_t *step) {
    long long r, s;
    if (decimal(&text, INT_MIN, INT_MAX, &r) || *text++ != ':' || decimal(&text, LLONG_MIN, LLONG_MAX, &s) || *text)
        return -1;
    *rank = (int)r, *step = s;
    return 0;
}

int tb_drill_rank_ms(const char *text, int *rank, int *ms) {
    long long r, m;
    if (decimal(&text, INT_MIN, INT_MAX, &r) || *text++ != ':' || decimal(&text, INT_MIN, INT_MAX, &m) || *text)
        return -1;
    *rank = (int)r, *ms = (int)m;
    return 0;
}

int tb_drill_group_ms(const char *text, char *group, size_t group_size, int *ms) {
    const size_t len = strspn(text, "abcdefghijklmnopqrstuvwxyz_");
    const char *p = text + len + 1;
    long long m;
    if (len == 0 || len >= group_size || text[len] != ':' || decimal(&p, INT_MIN, INT_MAX, &m) || *p) return -1;
    memcpy(group, text, len);
    group[len] = '\0';
    *ms = (int)m;
    return 0;
}
