// source.c — see source.h. A small C lexer: just enough to skip comments, string and
// character literals, and pair braces.
#include "source.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/xalloc.h"

int tb_pos_cmp(tb_pos a, tb_pos b) {
    if (a.line != b.line) return a.line < b.line ? -1 : 1;
    if (a.col != b.col) return a.col < b.col ? -1 : 1;
    return 0;
}

static char *read_all(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    tb_buf b = {0};
    tb_buf_add(&b, "", 0);  // an empty file is "", not NULL
    char chunk[1 << 16];
    size_t got;
    while ((got = fread(chunk, 1, sizeof chunk, f)) > 0) tb_buf_add(&b, chunk, got);
    fclose(f);
    *len = b.len;
    return b.s;
}

// Marks comments and literals, records line starts.
static void lex(tb_source *s) {
    size_t n = s->len;
    const char *t = s->text;
    s->code = tb_xmalloc(n + 1, "source code map");
    tb_vec lines;
    tb_vec_init(&lines, sizeof(size_t), "source lines");
    *(size_t *)tb_vec_push(&lines) = 0;
    enum { CODE, LINE_COMMENT, BLOCK_COMMENT, STRING, CHAR } state = CODE;
    for (size_t i = 0; i < n; i++) {
        char c = t[i];
        int is_code = 0;
        switch (state) {
        case CODE:
            if (c == '/' && i + 1 < n && t[i + 1] == '/') state = LINE_COMMENT;
            else if (c == '/' && i + 1 < n && t[i + 1] == '*') {
                state = BLOCK_COMMENT;
                s->code[i] = 0;
                i++;
                if (i < n) s->code[i] = 0;
                continue;
            } else if (c == '"') state = STRING;
            else if (c == '\'') state = CHAR;
            else is_code = 1;
            break;
        case LINE_COMMENT:
            if (c == '\n') state = CODE;
            break;
        case BLOCK_COMMENT:
            if (c == '*' && i + 1 < n && t[i + 1] == '/') {
                s->code[i] = 0;
                i++;
                s->code[i] = 0;
                state = CODE;
                continue;
            }
            break;
        case STRING:
        case CHAR:
            if (c == '\\' && i + 1 < n && t[i + 1] != '\n') {
                s->code[i] = 0;
                i++;
                s->code[i] = 0;
                continue;
            }
            if ((state == STRING && c == '"') || (state == CHAR && c == '\'') || c == '\n') state = CODE;
            break;
        }
        s->code[i] = (char)is_code;
        if (c == '\n') *(size_t *)tb_vec_push(&lines) = i + 1;
    }
    s->nlines = (int)lines.len;
    s->lines = tb_vec_take(&lines);
    if (s->nlines > 1 && s->lines[s->nlines - 1] == n) s->nlines--;  // trailing newline
}

static tb_pos pos_of(const tb_source *s, size_t off) {
    int lo = 0, hi = s->nlines - 1;
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (s->lines[mid] <= off) lo = mid;
        else hi = mid - 1;
    }
    return (tb_pos){lo + 1, (int)(off - s->lines[lo]) + 1};
}

static size_t off_of(const tb_source *s, tb_pos p) {
    if (p.line < 1) return 0;
    if (p.line > s->nlines) return s->len;
    size_t off = s->lines[p.line - 1] + (size_t)(p.col > 0 ? p.col - 1 : 0);
    return off > s->len ? s->len : off;
}

size_t tb_source_offset(const tb_source *s, tb_pos p) { return off_of(s, p); }

static void pair_braces(tb_source *s) {
    int depth = 0;
    int stack[512];
    tb_vec blocks;
    tb_vec_init(&blocks, sizeof(tb_block), "source blocks");
    for (size_t i = 0; i < s->len; i++) {
        if (!s->code[i]) continue;
        if (s->text[i] == '{') {
            tb_block *b = tb_vec_push(&blocks);
            b->open = pos_of(s, i);
            b->close = TB_POS_END;
            b->parent = depth > 0 ? stack[depth - 1] : -1;
            if (depth < (int)(sizeof stack / sizeof *stack)) stack[depth++] = (int)blocks.len - 1;
        } else if (s->text[i] == '}' && depth > 0) {
            TB_VEC_AT(&blocks, tb_block, stack[--depth]).close = pos_of(s, i);
        }
    }
    s->nblocks = (int)blocks.len;
    s->blocks = tb_vec_take(&blocks);
}

static tb_source *source_load(const char *path) {
    size_t len = 0;
    char *text = read_all(path, &len);
    if (!text) return NULL;
    tb_source *s = tb_xcalloc(1, sizeof *s, "source file");
    s->path = tb_xstrdup(path, "path");
    s->text = text;
    s->len = len;
    lex(s);
    pair_braces(s);
    return s;
}

const tb_source *tb_sources_get(tb_sources *c, const char *path) {
    if (!path) return NULL;
    const int *known = tb_strmap_get(&c->by_path, path);
    if (known) {
        const tb_source *s = TB_VEC_AT(&c->files, tb_source *, *known);
        return s->text ? s : NULL;
    }
    tb_source *s = source_load(path);
    if (!s) {  // remember the miss
        s = tb_xcalloc(1, sizeof *s, "source file");
        s->path = tb_xstrdup(path, "path");
    }
    tb_strmap_put(&c->by_path, path, (int)c->files.len);
    *(tb_source **)tb_vec_push(&c->files) = s;
    return s->text ? s : NULL;
}

void tb_sources_free(tb_sources *c) {
    for (size_t i = 0; i < c->files.len; i++) {
        tb_source *s = TB_VEC_AT(&c->files, tb_source *, i);
        free(s->path);
        free(s->text);
        free(s->code);
        free(s->lines);
        free(s->blocks);
        free(s);
    }
    tb_vec_free(&c->files);
    tb_strmap_free(&c->by_path);
}

void tb_sources_init(tb_sources *c) {
    tb_vec_init(&c->files, sizeof(tb_source *), "source files");
    tb_strmap_init(&c->by_path);
}

const char *tb_source_line(const tb_source *s, int line, size_t *len) {
    if (!s || line < 1 || line > s->nlines) return NULL;
    size_t a = s->lines[line - 1];
    size_t b = line < s->nlines ? s->lines[line] : s->len;
    while (b > a && (s->text[b - 1] == '\n' || s->text[b - 1] == '\r')) b--;
    *len = b - a;
    return s->text + a;
}

int tb_source_block_at(const tb_source *s, tb_pos p) {
    int best = -1;
    for (int i = 0; i < s->nblocks; i++) {
        if (tb_pos_cmp(s->blocks[i].open, p) >= 0) break;  // blocks are in opening order
        if (tb_pos_cmp(p, s->blocks[i].close) < 0) best = i;
    }
    return best;
}

int tb_source_body_after(const tb_source *s, tb_pos p) {
    for (int i = 0; i < s->nblocks; i++)
        if (s->blocks[i].parent < 0 && tb_pos_cmp(s->blocks[i].open, p) > 0) return i;
    return -1;
}

int tb_source_block_within(const tb_source *s, int inner, int outer) {
    for (int b = inner; b >= 0; b = s->blocks[b].parent)
        if (b == outer) return 1;
    return 0;
}

static size_t skip_blank(const tb_source *s, size_t i) {
    while (i < s->len && (!s->code[i] || s->text[i] == ' ' || s->text[i] == '\t' || s->text[i] == '\n' ||
                          s->text[i] == '\r'))
        i++;
    return i;
}

static int word_at(const tb_source *s, size_t i, const char *w) {
    size_t n = strlen(w);
    if (i + n > s->len || memcmp(s->text + i, w, n)) return 0;
    char c = i + n < s->len ? s->text[i + n] : ' ';
    return !((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_');
}

tb_pos tb_source_else_end(const tb_source *s, int b) {
    tb_pos end = s->blocks[b].close;
    if (tb_pos_cmp(end, TB_POS_END) == 0) return end;
    size_t i = off_of(s, end) + 1;
    for (;;) {
        i = skip_blank(s, i);
        if (!word_at(s, i, "else")) return end;
        i = skip_blank(s, i + 4);
        if (word_at(s, i, "if")) {  // else if (...): skip the condition
            i = skip_blank(s, i + 2);
            int depth = 0;
            for (; i < s->len; i++) {
                if (!s->code[i]) continue;
                if (s->text[i] == '(') depth++;
                else if (s->text[i] == ')' && --depth == 0) break;
            }
            i = skip_blank(s, i + 1);
        }
        if (i < s->len && s->text[i] == '{') {
            tb_pos open = pos_of(s, i);
            int k;
            for (k = 0; k < s->nblocks && tb_pos_cmp(s->blocks[k].open, open); k++) {}
            if (k == s->nblocks || tb_pos_cmp(s->blocks[k].close, TB_POS_END) == 0) return end;
            end = s->blocks[k].close;
            i = off_of(s, end) + 1;
        } else {  // an alternative without braces: to its statement's end
            return tb_source_statement_end(s, pos_of(s, i));
        }
    }
}

tb_pos tb_source_statement_end(const tb_source *s, tb_pos p) {
    int parens = 0;
    for (size_t i = off_of(s, p); i < s->len; i++) {
        if (!s->code[i]) continue;
        char c = s->text[i];
        if (c == '(' || c == '[') parens++;
        else if ((c == ')' || c == ']') && parens > 0) parens--;
        else if ((c == ';' && parens == 0) || c == '{' || c == '}') return pos_of(s, i);
    }
    return p;
}
