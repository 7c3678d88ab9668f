// map_match.c — see map_match.h.
#include "map_match.h"

#include <stdlib.h>
#include <string.h>

#include "core/xalloc.h"
#include "vec.h"

static int run_of(const char *s, const char *set) {
    int n = 0;
    while (s[n] && strchr(set, s[n])) n++;
    return n;
}

int tb_range_pattern_match(const char *p, const char *s) {
    while (*p) {
        if (*p != '%') {
            if (*p != *s) return 0;
            p++, s++;
            continue;
        }
        p++;
        if (*p == '%') {
            if (*s != '%') return 0;
            p++, s++;
            continue;
        }
        p += run_of(p, "-+ #0'");
        p += run_of(p, "0123456789*");
        if (*p == '.') p += 1 + run_of(p + 1, "0123456789*");
        p += run_of(p, "hlLqjzt");
        char conv = *p;
        if (!conv) return 0;
        p++;
        const char *set = NULL;
        int sign = 0;
        switch (conv) {
        case 'd':
        case 'i': set = "0123456789", sign = 1; break;
        case 'u': set = "0123456789"; break;
        case 'x': set = "0123456789abcdef"; break;
        case 'X': set = "0123456789ABCDEF"; break;
        case 'o': set = "01234567"; break;
        case 'f': case 'F': case 'e': case 'E': case 'g': case 'G': case 'a': case 'A':
            set = "0123456789.eE+-xXabcdefABCDEFinftyINFTYnN";
            break;
        case 'p': set = "0123456789abcdefx(nil)"; break;
        case 'c':
            if (!*s) return 0;
            s++;
            continue;
        case 's':
            for (const char *e = s + strlen(s); e >= s; e--)
                if (tb_range_pattern_match(p, e)) return 1;
            return 0;
        default: return 0;
        }
        const char *q = s;
        if (sign && *q == '-') q++;
        int n = run_of(q, set);
        for (int k = n; k >= 1; k--)
            if (tb_range_pattern_match(p, q + k)) return 1;
        return 0;
    }
    return *s == '\0';
}

int tb_range_pattern_literals(const char *p) {
    int n = 0;
    while (*p) {
        if (*p != '%' || p[1] == '%') {
            n++;
            p += *p == '%' ? 2 : 1;
            continue;
        }
        p++;
        p += run_of(p, "-+ #0'");
        p += run_of(p, "0123456789*");
        if (*p == '.') p += 1 + run_of(p + 1, "0123456789*");
        p += run_of(p, "hlLqjzt");
        if (*p) p++;
    }
    return n;
}

void tb_match_sites(const tb_graph *g, int scope, const tb_rt *rt, int ***sites, int **nsites) {
    *sites = tb_xcalloc((size_t)rt->nnames + 1, sizeof **sites, "name sites");
    *nsites = tb_xcalloc((size_t)rt->nnames + 1, sizeof **nsites, "name sites");
    int *literals = tb_xcalloc((size_t)g->nranges + 1, sizeof *literals, "site literals");
    for (int r = 0; r < g->nranges; r++) literals[r] = g->ranges[r].name ? tb_range_pattern_literals(g->ranges[r].name) : 0;
    for (int n = 0; n < rt->nnames; n++) {
        tb_vec found;
        tb_vec_init(&found, sizeof(int), "name sites");
        for (int r = 0; r < g->nranges; r++) {
            const tb_grange *rs = &g->ranges[r];
            if (rs->is_pop || !rs->name || !tb_graph_in_scope(g, scope, rs->fn)) continue;
            if (!tb_range_pattern_match(rs->name, rt->names[n])) continue;
            // most specific first: insertion by literal characters, index order among equals
            size_t at = found.len;
            tb_vec_push(&found);
            int *f = found.items;
            for (; at > 0 && literals[f[at - 1]] < literals[r]; at--) f[at] = f[at - 1];
            f[at] = r;
        }
        (*nsites)[n] = (int)found.len;
        (*sites)[n] = tb_vec_take(&found);
    }
    free(literals);
}
