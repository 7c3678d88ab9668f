// drill_flags.c — see drill_flags.h.
#include "config/drill_flags.h"

#include <stdio.h>
#include <string.h>

int tb_drill_rank_step(const char *text, int *rank, int64_t *step) {
    int r, n = 0;
    long long s;
    if (sscanf(text, "%d:%lld%n", &r, &s, &n) != 2 || text[n] != '\0') return -1;
    *rank = r, *step = s;
    return 0;
}

int tb_drill_rank_ms(const char *text, int *rank, int *ms) {
    int r, m, n = 0;
    if (sscanf(text, "%d:%d%n", &r, &m, &n) != 2 || text[n] != '\0') return -1;
    *rank = r, *ms = m;
    return 0;
}

int tb_drill_group_ms(const char *text, char *group, size_t group_size, int *ms) {
    const size_t len = strspn(text, "abcdefghijklmnopqrstuvwxyz_");
    int m, n = 0;
    if (len == 0 || len >= group_size || text[len] != ':' || sscanf(text + len + 1, "%d%n", &m, &n) != 1 ||
        text[len + 1 + n] != '\0')
        return -1;
    memcpy(group, text, len);
    group[len] = '\0';
    *ms = m;
    return 0;
}
