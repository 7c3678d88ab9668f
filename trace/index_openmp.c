// index_openmp.c — whether a C unit's parse without -fopenmp shows every call it makes
// (index_openmp.h).
#define _GNU_SOURCE  // memmem
#include "index_openmp.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/xalloc.h"

// What _OPENMP is for -fopenmp-version=V (clang 19 defines it so; its default is 5.1).
static const char *openmp_date(const char *version) {
    static const struct { const char *v, *date; } dates[] = {{"31", "201107"}, {"40", "201307"}, {"45", "201511"},
                                                            {"50", "201811"}, {"52", "202111"}, {"60", "202411"}};
    for (size_t i = 0; version && i < sizeof dates / sizeof *dates; i++)
        if (!strcmp(version, dates[i].v)) return dates[i].date;
    return "202011";
}

int ix_openmp_on(const char *const *args, int nargs) {
    int on = 0, gomp = 0, front_end = 0;
    for (int i = 0; i < nargs; i++) {
        const char *a = args[i], *before = i ? args[i - 1] : "";
        if (!strcmp(a, "-fno-openmp")) on = 0;
        if (!strcmp(a, "-fopenmp") && (!strcmp(before, "-Xclang") || !strcmp(before, "-Xpreprocessor")))
            front_end = 1;
        else if (!strcmp(a, "-fopenmp"))
            on = 1;
        else if (!strncmp(a, "-fopenmp=", 9))
            on = 1, gomp = !strcmp(a + 9, "libgomp");
    }
    return front_end || (on && !gomp);
}

int ix_openmp_plain_args(tb_pool *p, const char *const *args, int nargs, tb_vec *out) {
    const char *version = NULL;
    for (int i = 0; i < nargs; i++) {
        if (strncmp(args[i], "-fopenmp", 8)) {
            *(const char **)tb_vec_push(out) = args[i];
            continue;
        }
        const char *before = out->len ? TB_VEC_AT(out, const char *, out->len - 1) : "";
        if (!strcmp(before, "-Xclang") || !strcmp(before, "-Xpreprocessor")) out->len--;  // it goes with it
        if (!strncmp(args[i], "-fopenmp-version=", 17)) version = args[i] + 17;
    }
    int openmp = ix_openmp_on(args, nargs);
    if (openmp) *(const char **)tb_vec_push(out) = tb_pool_printf(p, "-D_OPENMP=%s", openmp_date(version));
    return openmp;
}

// clang's identifiers: $ and UTF-8 too.
static int ident_start(char ch) {
    return ch == '_' || ch == '$' || (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (unsigned char)ch >= 0x80;
}
static int ident_char(char ch) { return ident_start(ch) || (ch >= '0' && ch <= '9'); }
static int exponent(char ch) { return ch == 'e' || ch == 'E' || ch == 'p' || ch == 'P'; }
static int blank(char ch) { return ch == ' ' || ch == '\t' || ch == '\v' || ch == '\f' || ch == '\r'; }

static size_t ident_len(const char *p, const char *end) {
    size_t n = 0;
    while (p + n < end && ident_char(p[n])) n++;
    return n;
}

// The first reason only, with the file and line of the text at `at`.
static void set_why(ix_omp_scan *s, const char *path, const char *text, const char *at, const char *reason,
                    const char *word, size_t n) {
    if (s->why) return;
    int line = 1;
    for (const char *p = text; (p = memchr(p, '\n', (size_t)(at - p))); p++) line++;
    s->why = tb_pool_printf(&s->pool, "%s:%d: %s%s%.*s%s", path, line, reason, word ? " (" : "", (int)n,
                            word ? word : "", word ? ")" : "");
}

// The end of the logical line at p: its newline not continued by a backslash (or ??/).
static const char *line_end(const char *p, const char *end) {
    for (const char *from = p;;) {
        const char *nl = memchr(from, '\n', (size_t)(end - from));
        if (!nl) return end;
        const char *q = nl > p && nl[-1] == '\r' ? nl - 1 : nl;
        if ((q > p && q[-1] == '\\') || (q - p >= 3 && !memcmp(q - 3, "?\?/", 3))) {
            from = nl + 1;
            continue;
        }
        return nl;
    }
}

static void note_name(ix_omp_scan *s, const char *w, size_t n, const char *path, const char *text) {
    char name[256];
    if (n >= sizeof name) {
        set_why(s, path, text, w, "an identifier too long to look up as a macro", NULL, 0);
        return;
    }
    memcpy(name, w, n);
    name[n] = 0;
    if (!tb_strmap_get(&s->names, name)) tb_strmap_put(&s->names, name, 1);
}

// How a directive's text is written: #pragma omp ... (to the end of the logical line),
// __pragma(omp ...) (to its closing parenthesis), "omp ..." (a string: _Pragma("omp ..."),
// or a macro's argument or body that one makes a pragma of; to its closing quote).
enum { PRAGMA_LINE, PRAGMA_OPERATOR, PRAGMA_STRING };

// One directive's text after "omp" (b .. e: its logical line, up to a // comment).
static void scan_directive(ix_omp_scan *s, const char *path, const char *text, const char *b, const char *e,
                           int form) {
    if (form == PRAGMA_STRING) {
        const char *q = memchr(b, '"', (size_t)(e - b));
        if (q) e = q;
        if (memchr(b, '\\', (size_t)(e - b)))  // an escape: the string's text is not its spelling
            return set_why(s, path, text, b, "an escape in an OpenMP directive's string", NULL, 0);
    }
    const char *cut = memmem(b, (size_t)(e - b), "//", 2);
    if (cut && !memchr(b, '"', (size_t)(cut - b))) e = cut;  // not when it may be inside a string
    if (memmem(b, (size_t)(e - b), "/*", 2)) return set_why(s, path, text, b, "a comment inside an OpenMP directive",
                                                            NULL, 0);
    int depth = 0;
    char prev = 0;  // the last token: 'i' an identifier, '0' a number, else its character
    const char *word = NULL;  // the last identifier
    size_t wlen = 0;
    for (const char *p = b; p < e && !s->why;) {
        char ch = *p;
        if (ident_start(ch)) {
            size_t n = ident_len(p, e);
            if (word && wlen == 7 && !memcmp(word, "declare", 7) && !(n == 4 && !memcmp(p, "simd", 4)) &&
                !(n == 6 && !memcmp(p, "target", 6)))
                set_why(s, path, text, p, "an OpenMP declare directive other than simd or target", p, n);
            if ((n == 5 && !memcmp(p, "begin", 5)) || (n == 13 && !memcmp(p, "metadirective", 13)))
                set_why(s, path, text, p, "an OpenMP directive the parse without -fopenmp may not match", p, n);
            note_name(s, p, n, path, text);
            word = p;
            wlen = n;
            prev = 'i';
            p += n;
            continue;
        }
        if (ch >= '0' && ch <= '9') {  // a pp-number: digits, letters, '.', exponent signs
            while (p < e && (ident_char(*p) || *p == '.' || ((*p == '+' || *p == '-') && exponent(p[-1])))) p++;
            prev = '0';
            continue;
        }
        if (ch == '\'') return set_why(s, path, text, p, "a character literal in an OpenMP directive", NULL, 0);
        if (ch == '"') return set_why(s, path, text, p, "a string in an OpenMP directive", NULL, 0);
        if (ch == '(') {
            if ((depth > 0 && prev == 'i') || prev == ')' || prev == ']' || prev == '>')  // f(, (*f)(, t[0](, <: :>(
                return set_why(s, path, text, p, "a call in an OpenMP clause", prev == 'i' ? word : NULL, wlen);
            depth++;
        } else if (ch == ')' && --depth < 0) {
            if (form == PRAGMA_OPERATOR) return;  // the end of __pragma( ... )
            return set_why(s, path, text, p, "unbalanced parentheses in an OpenMP directive", NULL, 0);
        }
        if (!blank(ch) && ch != '\n' && ch != '\\') prev = ch;
        p++;
    }
}

// The identifier that ends just before q (blanks skipped), its length in *n; NULL if none.
static const char *word_before(const char *text, const char *q, size_t *n) {
    while (q > text && blank(q[-1])) q--;
    const char *w = q;
    while (w > text && ident_char(w[-1])) w--;
    *n = (size_t)(q - w);
    return w == q ? NULL : w;
}

void ix_omp_scan_directives(ix_omp_scan *s, const char *path, const char *text, size_t n) {
    const char *end = text + n;
    // A word a line splice cuts (o\<newline>mp, #pra\<newline>gma, a macro's name): not read here.
    for (const char *p = text; !s->why && p < end && (p = memmem(p, (size_t)(end - p), "\\\n", 2)); p += 2)
        if (p > text && ident_char(p[-1]) && p + 2 < end && ident_char(p[2]))
            set_why(s, path, text, p, "a line splice inside a word", NULL, 0);
    // Every word omp, by what comes before it (blanks and line breaks skipped).
    for (const char *p = text; !s->why && p < end && (p = memmem(p, (size_t)(end - p), "omp", 3)); p += 3) {
        if ((p > text && ident_char(p[-1])) || (p + 3 < end && ident_char(p[3]))) continue;
        const char *q = p;
        while (q > text && (blank(q[-1]) || q[-1] == '\n' || q[-1] == '\\' || q[-1] == '\r')) q--;
        if (q == text) continue;
        size_t wn = 0;
        const char *w = word_before(text, q, &wn);
        int form = -1;
        if (q[-1] == '"') {  // _Pragma("omp ..."), _Pragma(L"omp ..."), PRAGMA("omp ..."), #define S "omp ..."
            form = PRAGMA_STRING;
        } else if (w && wn >= 6 && !memcmp(q - 6, "pragma", 6)) {  // #pragma omp (any word ending so: conservative)
            form = PRAGMA_LINE;
        } else if (q[-1] == '(') {
            w = word_before(text, q - 1, &wn);
            if (w && wn == 8 && !memcmp(w, "__pragma", 8)) form = PRAGMA_OPERATOR;
            else set_why(s, path, text, p, "omp as a macro's argument: the directive its _Pragma may make", w, wn);
        } else if (q[-1] == ',') {
            set_why(s, path, text, p, "omp as a macro's argument: the directive its _Pragma may make", NULL, 0);
        } else if (q[-1] == '/') {  // #pragma /* ... */ omp
            set_why(s, path, text, p, "a comment before omp", NULL, 0);
        }
        if (form < 0 || s->why) continue;
        s->directives++;
        scan_directive(s, path, text, p + 3, line_end(p + 3, end), form);
    }
}

// Whether w (n characters) is one of the directives' identifiers.
static int named(const ix_omp_scan *s, const char *w, size_t n) {
    char name[256];
    if (!n || n >= sizeof name) return 0;  // the directives' identifiers are shorter (note_name)
    memcpy(name, w, n);
    name[n] = 0;
    return tb_strmap_get(&s->names, name) != NULL;
}

// The names a text defines as macros (every "define NAME" read as a definition), each with
// the line of its first definition.
static void collect_defines(tb_strmap *defines, const char *text, size_t n) {
    const char *end = text + n, *counted = text;
    int line = 1;
    for (const char *p = text; p < end && (p = memmem(p, (size_t)(end - p), "define", 6)); p += 6) {
        if (p > text && ident_char(p[-1])) continue;
        const char *q = p + 6;
        if (q < end && ident_char(*q)) continue;
        while (q < end && (blank(*q) || *q == '\n' || *q == '\\')) q++;
        size_t len = ident_len(q, end);
        char name[256];
        if (!len || len >= sizeof name) continue;  // the directives' identifiers are shorter (note_name)
        memcpy(name, q, len);
        name[len] = 0;
        if (tb_strmap_get(defines, name)) continue;
        for (; (counted = memchr(counted, '\n', (size_t)(q - counted))); counted++) line++;
        counted = q;
        tb_strmap_put(defines, name, line);
    }
}

// Whether one of the directives' identifiers is among a file's macros.
static void check_defines(ix_omp_scan *s, const tb_strmap *defines, const char *path) {
    if (s->why || !s->names.len || !defines->len) return;
    for (size_t i = 0; i < s->names.cap && !s->why; i++) {
        const int *line = s->names.keys[i] ? tb_strmap_get(defines, s->names.keys[i]) : NULL;
        if (line)
            s->why = tb_pool_printf(&s->pool, "%s:%d: a macro named in an OpenMP directive (%s)", path, *line,
                                    s->names.keys[i]);
    }
}

void ix_omp_scan_macros(ix_omp_scan *s, const char *path, const char *text, size_t n) {
    if (s->why || !s->names.len) return;
    tb_strmap defines = {0};
    collect_defines(&defines, text, n);
    check_defines(s, &defines, path);
    tb_strmap_free(&defines);
}

void ix_omp_scan_command_line(ix_omp_scan *s, const char *const *args, int nargs) {
    for (int i = 0; i < nargs && !s->why; i++) {
        const char *a = args[i], *name = NULL;
        if (!strncmp(a, "-imacros", 8) || !strncmp(a, "-Wp,", 4) || a[0] == '@') {
            s->why = tb_pool_printf(&s->pool, "the command line's %s (its macros are not read)", a);
        } else if (!strncmp(a, "-D", 2)) {
            name = a[2] ? a + 2 : i + 1 < nargs ? args[++i] : "";
        } else if (!strncmp(a, "--define-macro", 14)) {
            name = a[14] == '=' ? a + 15 : !a[14] && i + 1 < nargs ? args[++i] : "";
        }
        size_t len = name ? ident_len(name, name + strlen(name)) : 0;
        if (named(s, name, len))
            s->why = tb_pool_printf(&s->pool, "the command line defines %.*s, named in an OpenMP directive", (int)len,
                                    name);
    }
}

void ix_omp_scan_free(ix_omp_scan *s) {
    tb_strmap_free(&s->names);
    tb_pool_free(&s->pool);
    memset(s, 0, sizeof *s);
}

// ---------------------------------------------------------------------------------------
// The run's files

// One input file's facts: its directives as a scan of its own, its macros.
typedef struct omp_file {
    ix_omp_scan directives;
    int defines_read;
    tb_strmap defines;
} omp_file;

struct ix_omp_files {
    pthread_mutex_t mu;
    tb_strmap at;  // path -> index in files
    tb_vec files;  // of omp_file *
};

ix_omp_files *ix_omp_files_new(void) {
    ix_omp_files *f = tb_xcalloc(1, sizeof *f, "OpenMP scans of the input files");
    pthread_mutex_init(&f->mu, NULL);
    tb_vec_init(&f->files, sizeof(omp_file *), "OpenMP scans of the input files");
    return f;
}

void ix_omp_files_free(ix_omp_files *f) {
    if (!f) return;
    for (size_t i = 0; i < f->files.len; i++) {
        omp_file *e = TB_VEC_AT(&f->files, omp_file *, i);
        ix_omp_scan_free(&e->directives);
        tb_strmap_free(&e->defines);
        free(e);
    }
    tb_vec_free(&f->files);
    tb_strmap_free(&f->at);
    pthread_mutex_destroy(&f->mu);
    free(f);
}

// The file's entry, its directives scanned on first sight (f->mu held); NULL when it has not
// been seen and there is no text.
static omp_file *file_of(ix_omp_files *f, const char *path, const char *text, size_t n) {
    int *i = tb_strmap_get(&f->at, path);
    if (i) return TB_VEC_AT(&f->files, omp_file *, *i);
    if (!text) return NULL;
    omp_file *e = tb_xcalloc(1, sizeof *e, "an input file's OpenMP scan");
    ix_omp_scan_directives(&e->directives, path, text, n);
    *(omp_file **)tb_vec_push(&f->files) = e;
    tb_strmap_put(&f->at, path, (int)f->files.len - 1);
    return e;
}

int ix_omp_files_directives(ix_omp_files *f, ix_omp_scan *s, const char *path, const char *text, size_t n) {
    if (s->why) return 1;
    if (!f) {
        if (text) ix_omp_scan_directives(s, path, text, n);
        return text != NULL;
    }
    pthread_mutex_lock(&f->mu);
    const omp_file *e = file_of(f, path, text, n);
    if (e) {
        s->directives += e->directives.directives;
        if (e->directives.why) s->why = tb_pool_dup(&s->pool, e->directives.why);
        const tb_strmap *names = &e->directives.names;
        for (size_t i = 0; i < names->cap; i++)
            if (names->keys[i] && !tb_strmap_get(&s->names, names->keys[i]))
                tb_strmap_put(&s->names, names->keys[i], 1);
    }
    pthread_mutex_unlock(&f->mu);
    return e != NULL;
}

int ix_omp_files_macros(ix_omp_files *f, ix_omp_scan *s, const char *path, const char *text, size_t n) {
    if (s->why || !s->names.len) return 1;
    if (!f) {
        if (text) ix_omp_scan_macros(s, path, text, n);
        return text != NULL;
    }
    pthread_mutex_lock(&f->mu);
    omp_file *e = file_of(f, path, text, n);
    int known = e && (e->defines_read || text);
    if (known && !e->defines_read) collect_defines(&e->defines, text, n);
    if (known) {
        e->defines_read = 1;
        check_defines(s, &e->defines, path);
    }
    pthread_mutex_unlock(&f->mu);
    return known;
}
