// walk_origin.c — the group and stream of a collective hop, for `tracebook walk`.
//
// The index has call sites, not expressions, so the group is traced back from the source
// text the index points at: the group argument of the first call on the chain whose callee
// takes a group (its first parameter's type names one), the parameter or local it reads
// (its type from the caller's signature, or the local's initialisation), the compound
// literals that fill that record, and the lines that name the parallel_state group kind.
// What the text cannot show (a group passed through several parameters) the trace args
// answer: group, group_id, group_index, group_size and the rank's coordinates.
#include "walk_origin.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/xalloc.h"

// Line `line` of file `file` into buf (NUL-terminated, cut to cap); 0 when unreadable.
static int line_text(tb_graph *g, int file, int line, char *buf, size_t cap) {
    const tb_source *s = tb_graph_source(g, file);
    size_t len = 0;
    const char *t = s && line > 0 ? tb_source_line(s, line, &len) : NULL;
    if (!t) return 0;
    if (len >= cap) len = cap - 1;
    memcpy(buf, t, len);
    buf[len] = '\0';
    return 1;
}

// Lines from `line` on, joined by spaces, up to the first '{' or ';' (a signature or a
// statement split over lines); at most 6 lines.
static int joined_text(tb_graph *g, int file, int line, char *buf, size_t cap) {
    size_t at = 0;
    buf[0] = '\0';
    for (int l = line; l < line + 6; l++) {
        char one[1024];
        if (!line_text(g, file, l, one, sizeof one)) break;
        int n = snprintf(buf + at, cap - at, "%s%s", at ? " " : "", one);
        if (n < 0 || (size_t)n >= cap - at) break;
        at += (size_t)n;
        if (strpbrk(one, "{;")) break;
    }
    return at > 0;
}

static int is_ident(char c) { return isalnum((unsigned char)c) || c == '_'; }

// The `which`-th argument (-1: the last) of the first call to `callee` in text, trimmed;
// 0 when the text has no such call or the argument is not complete in it.
static int call_arg(const char *text, const char *callee, int which, char *out, size_t cap) {
    size_t n = strlen(callee);
    const char *p = text;
    while ((p = strstr(p, callee)) != NULL) {
        const char *q = p + n;
        int whole = (p == text || !is_ident(p[-1])) && !is_ident(*q);
        while (*q == ' ') q++;
        if (whole && *q == '(') break;
        p += n;
    }
    if (!p) return 0;
    const char *a = strchr(p + n, '(') + 1, *start = a;
    int depth = 0, k = 0;
    for (; *a; a++) {
        if (*a == '(' || *a == '[' || *a == '{') depth++;
        else if ((*a == ')' || *a == ']' || *a == '}') && depth > 0) depth--;
        else if (depth == 0 && (*a == ',' || *a == ')')) {
            if (k == which || (which < 0 && *a == ')')) {
                while (start < a && isspace((unsigned char)*start)) start++;
                const char *end = a;
                while (end > start && isspace((unsigned char)end[-1])) end--;
                snprintf(out, cap, "%.*s", (int)(end - start), start);
                return end > start;
            }
            if (*a == ')') return 0;
            k++, start = a + 1;
        }
    }
    return 0;
}

// The type written before parameter or variable `var` in text ("const tb_tp_region *r" →
// "tb_tp_region"), or 0.
static int type_of(const char *text, const char *var, char *out, size_t cap) {
    size_t n = strlen(var);
    for (const char *p = strstr(text, var); p; p = strstr(p + 1, var)) {
        if ((p > text && is_ident(p[-1])) || is_ident(p[n])) continue;
        const char *q = p;
        while (q > text && (q[-1] == ' ' || q[-1] == '*')) q--;
        if (q == p || q == text || !is_ident(q[-1])) continue;  // not "TYPE var" / "TYPE *var"
        const char *e = q;
        while (q > text && is_ident(q[-1])) q--;
        if (!strncmp(q, "return", (size_t)(e - q)) && e - q == 6) continue;
        snprintf(out, cap, "%.*s", (int)(e - q), q);
        return 1;
    }
    return 0;
}

// Whether the first parameter of function fn's definition has a type that names a group or
// a communicator: the call that hands the collective its group.
static int takes_group(tb_graph *g, int fn) {
    const tb_gfn *f = &g->fns[fn];
    char sig[4096], first[256];
    if (!f->is_definition || f->file < 0 || !joined_text(g, f->file, f->pos.line, sig, sizeof sig)) return 0;
    if (!call_arg(sig, f->name, 0, first, sizeof first)) return 0;
    for (char *c = first; *c; c++) *c = (char)tolower((unsigned char)*c);
    return strstr(first, "group") || strstr(first, "comm");
}

// The function whose body holds file:line (the innermost by start), -1.
static int fn_at(const tb_graph *g, int file, int line) {
    int best = -1;
    for (int f = 0; f < g->nfns; f++) {
        const tb_gfn *x = &g->fns[f];
        if (x->file != file || !x->is_definition || x->pos.line > line || (x->end.line && x->end.line < line)) continue;
        if (!x->end.line) continue;
        if (best < 0 || x->pos.line > g->fns[best].pos.line) best = f;
    }
    return best;
}

// Files of the project worth searching: shown relative to the root (not system headers)
// and not tests (their fixtures would name every kind).
static int project_file(const tb_graph *g, int file) {
    const char *p = tb_graph_file(g, file);
    return p && p[0] != '/' && strncmp(p, "tests/", 6) != 0;
}

static void trimmed(const char *s, char *out, size_t cap) {
    while (isspace((unsigned char)*s)) s++;
    size_t n = strlen(s);
    while (n > 0 && isspace((unsigned char)s[n - 1])) n--;
    if (n > 160) snprintf(out, cap, "%.157s...", s);
    else snprintf(out, cap, "%.*s", (int)n, s);
}

// Prints each project line containing `needle` (as a whole word when `word`), each after
// `sep`: at most max. Returns the count.
static int print_lines_with(tb_graph *g, const char *needle, int word, int max, const char *sep) {
    int shown = 0;
    size_t n = strlen(needle);
    for (int f = 0; f < g->nfiles && shown < max; f++) {
        if (!project_file(g, f)) continue;
        const tb_source *s = tb_graph_source(g, f);
        if (!s) continue;
        size_t len;
        const char *t;
        for (int l = 1; shown < max && (t = tb_source_line(s, l, &len)) != NULL; l++) {
            char one[1024], show[200];
            if (len >= sizeof one) len = sizeof one - 1;
            memcpy(one, t, len);
            one[len] = '\0';
            const char *p = strstr(one, needle);
            while (p && word && ((p > one && is_ident(p[-1])) || is_ident(p[n]))) p = strstr(p + 1, needle);
            if (!p) continue;
            trimmed(one, show, sizeof show);
            int in = fn_at(g, f, l);
            printf("%s%s:%d%s%s%s: `%s`", sep, tb_graph_file(g, f), l, in >= 0 ? " (in `" : "",
                   in >= 0 ? g->fns[in].name : "", in >= 0 ? "`)" : "", show);
            shown++;
        }
    }
    return shown;
}

const char *tb_walk_rt_group(const tb_map *m, int name, const tb_coll_chain *cc) {
    const tb_rt *rt = &m->rt;
    if (name < 0) return NULL;
    for (int e = 0; e < rt->nev; e++) {
        const char *op = tb_map_event_op(m, e);
        const json_t *args = rt->ev[e].args;
        if (!op || !args || !tb_map_chain_does(m, cc, op)) continue;
        int inside = 0;
        for (int a = rt->ev[e].parent; a >= 0 && !inside; a = rt->ev[a].parent) inside = rt->ev[a].name == name;
        const char *grp = json_string_value(json_object_get(args, "group"));
        if (inside && grp) return grp;
    }
    return NULL;
}

// "rank 1 (tp1 cp0 dp0 pp0)": the coordinate names and values in the parentheses.
static int coords_of(const char *label, char names[8][16], int values[8]) {
    const char *p = label ? strchr(label, '(') : NULL;
    int n = 0;
    while (p && *p && *p != ')' && n < 8) {
        p++;
        while (*p == ' ') p++;
        int k = 0;
        while (isalpha((unsigned char)*p) || *p == '_') {
            if (k < 15) names[n][k++] = *p;
            p++;
        }
        names[n][k] = '\0';
        if (!k || !isdigit((unsigned char)*p)) break;
        values[n++] = (int)strtol(p, (char **)&p, 10);
    }
    return n;
}

typedef struct member {
    long long id, index, size;
    const char *label;
} member;

// The groups named `grp` that communicator events inside range `name` ran on, with their
// members (the rank label and index of each rank seen), and the coordinates they span.
static void runtime_members(const tb_map *m, int name, const tb_coll_chain *cc, const char *grp) {
    const tb_rt *rt = &m->rt;
    member seen[256];
    int n = 0;
    for (int e = 0; e < rt->nev && n < 256; e++) {
        const char *op = tb_map_event_op(m, e);
        const json_t *args = rt->ev[e].args;
        if (!op || !args || !tb_map_chain_does(m, cc, op)) continue;
        const char *g = json_string_value(json_object_get(args, "group"));
        if (!g || strcmp(g, grp)) continue;
        int inside = 0;
        for (int a = rt->ev[e].parent; a >= 0 && !inside; a = rt->ev[a].parent) inside = rt->ev[a].name == name;
        if (!inside) continue;
        member x = {json_integer_value(json_object_get(args, "group_id")),
                    json_integer_value(json_object_get(args, "group_index")),
                    json_integer_value(json_object_get(args, "group_size")),
                    json_string_value(json_object_get(args, "rank"))};
        int k;
        for (k = 0; k < n; k++)
            if (seen[k].id == x.id && seen[k].index == x.index && !strcmp(seen[k].label ? seen[k].label : "",
                                                                          x.label ? x.label : ""))
                break;
        if (k == n) seen[n++] = x;
    }
    if (!n) return;
    printf("At runtime (trace args group, group_id, group_index, group_size, rank):");
    for (int i = 0; i < n; i++) {
        int first = 1;
        for (int j = 0; j < i; j++) first &= seen[j].id != seen[i].id;
        if (!first) continue;
        printf(" group `%s` id %lld (%lld members):", grp, seen[i].id, seen[i].size);
        char cn[8][16], varies[128] = "", shared[128] = "";
        int v0[8], nc = coords_of(seen[i].label, cn, v0), differs[8] = {0};
        for (int j = 0; j < n; j++) {
            if (seen[j].id != seen[i].id) continue;
            printf("%s %s as member %lld", j == i ? "" : ",", seen[j].label ? seen[j].label : "?", seen[j].index);
            char cn2[8][16];
            int v[8], nc2 = coords_of(seen[j].label, cn2, v);
            for (int c = 0; c < nc && c < nc2; c++) differs[c] |= v[c] != v0[c];
        }
        for (int c = 0; c < nc; c++) {
            char *to = differs[c] ? varies : shared;
            size_t at = strlen(to);
            snprintf(to + at, sizeof varies - at, "%s%s", at ? ", " : "", cn[c]);
        }
        if (nc) printf(" — its members differ in %s%s%s", varies[0] ? varies : "nothing seen", shared[0] ? " and share " : "",
                       shared);
        printf(".");
    }
    printf("\n\n");
}

void tb_walk_group(tb_map *m, int name, const tb_coll_chain *cc, const char *rt_group) {
    tb_graph *g = m->g;
    int i;
    for (i = 0; i + 1 < cc->path.n && !takes_group(g, cc->path.fns[i + 1]); i++) {}
    if (i + 1 >= cc->path.n) return;  // no hop hands over a group (a library's own collective)
    const tb_gcall *c = &g->calls[cc->path.calls[i]];
    int caller = cc->path.fns[i];
    char text[4096] = "", arg[256];
    printf("**Group:** ");
    if (!joined_text(g, c->file, c->pos.line, text, sizeof text) || !call_arg(text, c->callee_name, 0, arg, sizeof arg)) {
        printf("the group argument of `%s` at %s:%d is not readable from the source.\n\n", c->callee_name,
               tb_graph_file(g, c->file), c->pos.line);
    } else {
        printf("`%s` gets the group `%s` at %s:%d", c->callee_name, arg, tb_graph_file(g, c->file), c->pos.line);
        // base identifier and the field read from it: "r->tp" → r, tp; "&rk->groups[K]" → rk, groups
        const char *b = arg;
        while (*b && !is_ident(*b)) b++;
        char base[64] = "", field[64] = "", record[128] = "";
        int bl = 0;
        while (is_ident(b[bl]) && bl < 63) base[bl] = b[bl], bl++;
        base[bl] = '\0';
        const char *last = NULL;
        for (const char *p = b; *p && *p != '['; p++)
            if (*p == '.' || (p[0] == '-' && p[1] == '>')) last = p + (*p == '.' ? 1 : 2);
        if (last) {
            int fl = 0;
            while (is_ident(last[fl]) && fl < 63) field[fl] = last[fl], fl++;
            field[fl] = '\0';
        }
        const tb_gfn *cf = &g->fns[caller];
        char sig[4096];
        if (base[0] && cf->file >= 0 && joined_text(g, cf->file, cf->pos.line, sig, sizeof sig) &&
            type_of(sig, base, record, sizeof record)) {
            if (field[0]) printf(": the field `%s.%s` of the parameter `%s`", record, field, base);
            else printf(": the parameter `%s` (`%s`)", base, record);
        } else if (base[0] && cf->end.line) {
            // a local: its initialisation in the caller's body
            for (int l = cf->pos.line; l <= cf->end.line; l++) {
                char one[1024], pat[80], show[200];
                if (!line_text(g, cf->file, l, one, sizeof one)) break;
                snprintf(pat, sizeof pat, "%s = ", base);
                const char *p = strstr(one, pat);
                if (!p || (p > one && is_ident(p[-1]))) continue;
                trimmed(one, show, sizeof show);
                printf(", the local `%s` set at %s:%d: `%s`", base, tb_graph_file(g, cf->file), l, show);
                break;
            }
        }
        printf(".\n");
        if (record[0] && field[0]) {
            // where the record is filled: its compound literals (positional or designated)
            char lit[160];
            snprintf(lit, sizeof lit, "(%s){", record);
            printf("\n`%s` is filled at:", record);
            if (!print_lines_with(g, lit, 0, 4, "\n- ")) printf(" no compound literal in the project's sources");
            printf("\n");
        }
    }
    // the parallel_state group kind: the runtime group's name, else the field's ("tp" → TB_GROUP_TP)
    const char *kind = rt_group;
    char guess[64] = "";
    if (!kind && call_arg(text, c->callee_name, 0, arg, sizeof arg)) {
        const char *p = arg + strlen(arg);
        while (p > arg && is_ident(p[-1])) p--;
        snprintf(guess, sizeof guess, "%.63s", p);
        kind = guess[0] ? guess : NULL;
    }
    if (kind) {
        char constant[80];
        int k = snprintf(constant, sizeof constant, "TB_GROUP_");
        for (const char *p = kind; *p && k < (int)sizeof constant - 1; p++) constant[k++] = (char)toupper((unsigned char)*p);
        constant[k] = '\0';
        printf("\nThe group kind (%s): `%s`, parallel_state's `rk->groups[%s]`, named at:",
               rt_group ? "the traces' group arg" : "guessed from the argument's name; static only", constant, constant);
        if (!print_lines_with(g, constant, 1, 8, "\n- ")) printf(" no line of the project's sources");
        printf("\n\n");
    } else {
        printf("\n");
    }
    if (rt_group) runtime_members(m, name, cc, rt_group);
}

void tb_walk_stream(tb_map *m, const tb_coll_chain *cc) {
    tb_graph *g = m->g;
    int last = cc->path.fns[cc->path.n - 1];
    if (cc->end_call < 0) {
        printf("**Stream/device:** host — `%s` runs on the CPU (no device stream).\n\n", g->fns[last].name);
        return;
    }
    const tb_gcall *e = &g->calls[cc->end_call];
    char text[4096], arg[256];
    printf("**Stream/device:** ");
    if (joined_text(g, e->file, e->pos.line, text, sizeof text) && call_arg(text, e->callee_name, -1, arg, sizeof arg) &&
        strstr(arg, "stream"))
        printf("`%s` is enqueued on `%s` (%s:%d)", e->callee_name, arg, tb_graph_file(g, e->file), e->pos.line);
    else
        printf("`%s` (%s:%d) takes no stream argument the source shows", e->callee_name, tb_graph_file(g, e->file),
               e->pos.line);
    // where the stream is made, and the function that names the group's device, in that file
    const tb_source *s = tb_graph_source(g, e->file);
    size_t len;
    const char *t;
    for (int l = 1; s && (t = tb_source_line(s, l, &len)) != NULL; l++) {
        char one[1024];
        if (len >= sizeof one) len = sizeof one - 1;
        memcpy(one, t, len);
        one[len] = '\0';
        if (strstr(one, "cudaStreamCreate")) {
            printf(", created by `cudaStreamCreate` at %s:%d", tb_graph_file(g, e->file), l);
            break;
        }
    }
    for (int f = 0; f < g->nfns; f++)
        if (g->fns[f].file == e->file && g->fns[f].is_definition && strstr(g->fns[f].name, "device") &&
            !strstr(g->fns[f].name, "devices")) {
            printf("; the device is the group's (`%s`, %s:%d)", g->fns[f].name, tb_graph_file(g, e->file),
                   g->fns[f].pos.line);
            break;
        }
    printf(".\n\n");
}
