// index_visit_walk.c — a parsed unit's AST walked into its facts (index_visit.h): functions,
// call sites, functions assigned to function-pointer fields, callbacks and range sites, in
// every non-system file, outside (first pass) or inside (second pass) the statements OpenMP
// directives apply to. index_visit.c parses the unit and calls ixv_top_visit.
#include <clang-c/Index.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/xalloc.h"
#include "index_visit_internal.h"
#include "strmap.h"

static void seen_add(ctx *c, CXCursor ref) {
    *(CXSourceLocation *)tb_vec_push(&c->seen_refs) = clang_getCursorLocation(ref);
}

static int seen_has(const ctx *c, CXCursor ref) {
    CXSourceLocation l = clang_getCursorLocation(ref);
    for (size_t i = c->seen_refs.len; i-- > 0;)
        if (clang_equalLocations(TB_VEC_AT(&c->seen_refs, CXSourceLocation, i), l)) return 1;
    return 0;
}

const char *ixv_cxstr(ctx *c, CXString s) {
    const char *t = clang_getCString(s);
    const char *d = t && *t ? tb_pool_dup(&c->r->pool, t) : NULL;
    clang_disposeString(s);
    return d;
}

static size_t fhash(CXFile f, size_t cap) { return (size_t)(((uintptr_t)f >> 4) * 11400714819323198485ull) & (cap - 1); }

file_ent *ixv_file_of(ctx *c, CXFile f) {
    if (!f) return NULL;
    if (2 * (c->flen + 1) > c->fcap) {
        size_t ocap = c->fcap;
        file_ent *old = c->files;
        c->fcap = ocap ? 2 * ocap : 256;
        c->files = tb_xcalloc(c->fcap, sizeof *c->files, "file table");
        for (size_t i = 0; i < ocap; i++)
            if (old[i].file) {
                size_t j = fhash(old[i].file, c->fcap);
                while (c->files[j].file) j = (j + 1) & (c->fcap - 1);
                c->files[j] = old[i];
            }
        free(old);
    }
    size_t i = fhash(f, c->fcap);
    while (c->files[i].file && c->files[i].file != f) i = (i + 1) & (c->fcap - 1);
    file_ent *e = &c->files[i];
    if (!e->file) {
        e->file = f;
        CXString rp = clang_File_tryGetRealPathName(f);
        const char *real = clang_getCString(rp);
        if (real && *real) {
            e->path = ix_abspath(&c->r->pool, NULL, real);
        } else {
            CXString n = clang_getFileName(f);
            e->path = ix_abspath(&c->r->pool, NULL, clang_getCString(n) ? clang_getCString(n) : "?");
            clang_disposeString(n);
        }
        clang_disposeString(rp);
        c->flen++;
    }
    return e;
}

// The file location (macro body → the macro's use; macro argument → where it is written).
const char *ixv_file_loc(ctx *c, CXSourceLocation l, unsigned *line, unsigned *col) {
    CXFile f = NULL;
    clang_getFileLocation(l, &f, line, col, NULL);
    file_ent *e = ixv_file_of(c, f);
    return e ? e->path : NULL;
}

// The outermost macro a location was expanded from, or NULL when it is not in one.
static const char *macro_at(ctx *c, CXSourceLocation l) {
    CXFile ef = NULL, sf = NULL;
    unsigned eoff = 0, soff = 0;
    clang_getExpansionLocation(l, &ef, NULL, NULL, &eoff);
    clang_getSpellingLocation(l, &sf, NULL, NULL, &soff);
    if (ef && sf && eoff == soff && clang_File_isEqual(ef, sf)) return NULL;
    file_ent *e = ixv_file_of(c, ef);
    if (!e) return NULL;
    if (!e->contents) e->contents = clang_getFileContents(c->tu, ef, &e->size);
    if (!e->contents || eoff >= e->size) return NULL;
    const char *s = e->contents + eoff;
    size_t n = 0;
    while (eoff + n < e->size && (s[n] == '_' || (s[n] >= 'a' && s[n] <= 'z') || (s[n] >= 'A' && s[n] <= 'Z') ||
                                  (n && s[n] >= '0' && s[n] <= '9')))
        n++;
    return n ? tb_pool_dupn(&c->r->pool, s, n) : NULL;
}

// A directive that applies to a statement (first pass): where it ends.
static void add_captured(ctx *c, CXCursor directive) {
    ix_extent e = {0};
    e.file = ixv_file_loc(c, clang_getRangeEnd(clang_getCursorExtent(directive)), &e.after_line, &e.after_col);
    if (e.file) *(ix_extent *)tb_vec_push(&c->captured) = e;
}

static int pos_before(unsigned l1, unsigned c1, unsigned l2, unsigned c2) { return l1 < l2 || (l1 == l2 && c1 < c2); }

// The second pass at cursor cur: the statements that start here, the first thing after
// their directive.
static void find_captured(ctx *c, CXCursor cur) {
    CXSourceRange r = clang_getCursorExtent(cur);
    unsigned line, col, end_line, end_col;
    const char *file = NULL;
    for (size_t i = 0; i < c->captured.len; i++) {
        ix_extent *e = &TB_VEC_AT(&c->captured, ix_extent, i);
        if (e->found) continue;
        if (!file && !(file = ixv_file_loc(c, clang_getRangeStart(r), &line, &col))) return;
        if (strcmp(file, e->file) || !pos_before(e->after_line, e->after_col, line, col)) continue;
        const char *end = ixv_file_loc(c, clang_getRangeEnd(r), &end_line, &end_col);
        if (!end || strcmp(end, file)) continue;
        *e = (ix_extent){e->file, e->after_line, e->after_col, 1, line, col, end_line, end_col};
    }
}

static int extent_has(const ix_extent *e, const char *file, unsigned line, unsigned col) {
    if (!e->found || !file || strcmp(file, e->file)) return 0;
    return !pos_before(line, col, e->line, e->col) && !pos_before(e->end_line, e->end_col, line, col);
}

// Whether what is at cur is recorded in this pass: the first pass never enters the
// captured statements, the second records only what is inside them.
static int in_pass(ctx *c, CXCursor cur) {
    if (!c->captured_pass) return 1;
    find_captured(c, cur);
    unsigned line, col;
    const char *file = ixv_file_loc(c, clang_getCursorLocation(cur), &line, &col);
    for (size_t i = 0; i < c->captured.len; i++)
        if (extent_has(&TB_VEC_AT(&c->captured, ix_extent, i), file, line, col)) return 1;
    return 0;
}

// Whether a function's body holds a directive that applies to a statement (the second
// pass walks only those).
static int holds_captured(ctx *c, CXCursor fn) {
    CXSourceRange r = clang_getCursorExtent(fn);
    unsigned l1, c1, l2, c2;
    const char *file = ixv_file_loc(c, clang_getRangeStart(r), &l1, &c1);
    if (!file || !ixv_file_loc(c, clang_getRangeEnd(r), &l2, &c2)) return 0;
    for (size_t i = 0; i < c->captured.len; i++) {
        const ix_extent *e = &TB_VEC_AT(&c->captured, ix_extent, i);
        if (!strcmp(file, e->file) && pos_before(l1, c1, e->after_line, e->after_col) &&
            pos_before(e->after_line, e->after_col, l2, c2))
            return 1;
    }
    return 0;
}

// ---------------------------------------------------------------------------------------
// Cursors

int ixv_is_function_kind(enum CXCursorKind k) {
    return k == CXCursor_FunctionDecl || k == CXCursor_CXXMethod || k == CXCursor_Constructor ||
           k == CXCursor_Destructor || k == CXCursor_ConversionFunction || k == CXCursor_FunctionTemplate;
}

static int in_system_header(CXCursor cur) { return clang_Location_isInSystemHeader(clang_getCursorLocation(cur)); }

// An OpenMP executable directive (parallel, for, simd, task, sections, single, target ...):
// libclang numbers them CXCursor_OMPParallelDirective .. CXCursor_OMPInterchangeDirective,
// with three other kinds in between.
static int is_omp_directive(enum CXCursorKind k) {
    return k >= CXCursor_OMPParallelDirective && k <= CXCursor_OMPInterchangeDirective && k != CXCursor_SEHLeaveStmt &&
           k != CXCursor_BuiltinBitCastExpr && k != CXCursor_OMPCanonicalLoop;
}


static enum CXChildVisitResult collect_kid(CXCursor cur, CXCursor parent, CXClientData d) {
    (void)parent;
    kids *k = d;
    if (k->n < 8) k->items[k->n] = cur;
    k->n++;
    return CXChildVisit_Continue;
}

kids ixv_children(CXCursor cur) {
    kids k = {.n = 0};
    clang_visitChildren(cur, collect_kid, &k);
    return k;
}

// Through implicit casts, parentheses, casts and '&' to what an expression names.
int ixv_wraps(CXCursor cur, enum CXCursorKind k) {
    if (k == CXCursor_UnaryOperator) {
        enum CXUnaryOperatorKind op = clang_getCursorUnaryOperatorKind(cur);
        return op == CXUnaryOperator_AddrOf || op == CXUnaryOperator_Deref;
    }
    return k == CXCursor_UnexposedExpr || k == CXCursor_ParenExpr || k == CXCursor_CStyleCastExpr ||
           k == CXCursor_CXXStaticCastExpr || k == CXCursor_CXXReinterpretCastExpr || k == CXCursor_CXXFunctionalCastExpr;
}

CXCursor ixv_strip(CXCursor cur) {
    for (int depth = 0; depth < 16; depth++) {
        if (!ixv_wraps(cur, clang_getCursorKind(cur))) break;
        kids ch = ixv_children(cur);
        if (!ch.n || ch.n > 8) break;
        cur = ch.items[ch.n - 1];  // a cast's type comes first, its operand last
    }
    return cur;
}

// The function an expression names (f, &f, (fn_t)f), or a null cursor.
static CXCursor function_named(CXCursor v) {
    v = ixv_strip(v);
    if (clang_getCursorKind(v) == CXCursor_DeclRefExpr) {
        CXCursor ref = clang_getCursorReferenced(v);
        if (ixv_is_function_kind(clang_getCursorKind(ref))) return ref;
    }
    return clang_getNullCursor();
}

static int is_function_pointer(CXType t) {
    t = clang_getCanonicalType(t);
    if (t.kind != CXType_Pointer) return 0;
    CXType p = clang_getCanonicalType(clang_getPointeeType(t));
    return p.kind == CXType_FunctionProto || p.kind == CXType_FunctionNoProto;
}

// A record's name: its tag, else (anonymous struct in a typedef) the typedef's name.
static const char *record_name(ctx *c, CXCursor rec) {
    const char *s = ixv_cxstr(c, clang_getCursorSpelling(rec));
    if (s && !strstr(s, "(unnamed") && !strstr(s, "(anonymous")) return s;
    const char *t = ixv_cxstr(c, clang_getTypeSpelling(clang_getCursorType(rec)));
    if (t && !strstr(t, "(unnamed") && !strstr(t, "(anonymous")) {
        const char *sp = strrchr(t, ' ');  // "struct foo" -> "foo"
        return sp && (!strncmp(t, "struct ", 7) || !strncmp(t, "union ", 6)) ? sp + 1 : t;
    }
    return "(anonymous)";
}

// The USR that identifies a function in the index. libclang's, except that functions with
// internal linkage (static, anonymous namespace) and `main` get the absolute path of their
// (canonical) declaration's file instead of its base name, so two files' statics with the
// same name and base name stay apart, and so does each binary's main.
const char *ixv_usr_of(ctx *c, CXCursor cur, int *main_like) {
    if (main_like) *main_like = 0;
    CXCursor tmpl = clang_getSpecializedCursorTemplate(cur);
    if (!clang_Cursor_isNull(tmpl)) cur = tmpl;
    const char *usr = ixv_cxstr(c, clang_getCursorUSR(cur));
    if (!usr || strncmp(usr, "c:", 2)) return usr;
    enum CXLinkageKind link = clang_getCursorLinkage(cur);
    int qualify = link == CXLinkage_Internal || link == CXLinkage_UniqueExternal;
    if (!qualify && clang_getCursorKind(cur) == CXCursor_FunctionDecl && !strncmp(usr, "c:@F@main", 9) &&
        (usr[9] == 0 || usr[9] == '#')) {
        qualify = 1;
        if (main_like) *main_like = 1;
    }
    if (!qualify) return usr;
    unsigned line, col;
    const char *path = ixv_file_loc(c, clang_getCursorLocation(clang_getCanonicalCursor(cur)), &line, &col);
    if (!path) return usr;
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    const char *rest = usr + 2;
    size_t bl = strlen(base);
    if (!strncmp(rest, base, bl) && rest[bl] == '@') rest += bl + 1;
    if (*rest == '@') rest++;  // "c:@F@main"
    return tb_pool_printf(&c->r->pool, "c:%s@%s", path, rest);
}

// ---------------------------------------------------------------------------------------
// Facts

static int record_function(ctx *c, CXCursor cur, int is_def) {
    int main_like;
    const char *usr = ixv_usr_of(c, cur, &main_like);
    if (!usr) return -1;
    int *slot = tb_strmap_get(&c->funcs, usr);
    if (slot && (!is_def || TB_VEC_AT(&c->r->funcs, ix_func, *slot).is_def)) return *slot;
    unsigned line, col;
    const char *file = ixv_file_loc(c, clang_getCursorLocation(cur), &line, &col);
    if (!file) return -1;
    unsigned end_line = 0, end_col = 0;
    if (is_def) {
        // the extent ends just after the body's closing brace
        CXSourceLocation end = clang_getRangeEnd(clang_getCursorExtent(cur));
        if (ixv_file_loc(c, end, &end_line, &end_col) && end_col > 1) end_col--;
    }
    if (slot) {  // the definition of a function declared (and referred to) before it
        ix_func *f = &TB_VEC_AT(&c->r->funcs, ix_func, *slot);
        f->is_def = 1;
        f->file = file;
        f->line = line;
        f->col = col;
        f->end_line = end_line;
        f->end_col = end_col;
        return *slot;
    }
    ix_func *f = tb_vec_push(&c->r->funcs);
    f->usr = usr;
    f->name = ixv_cxstr(c, clang_getCursorSpelling(cur));
    if (!f->name) f->name = "(unnamed)";
    f->file = file;
    f->line = line;
    f->col = col;
    f->end_line = end_line;
    f->end_col = end_col;
    f->is_def = is_def;
    f->main_like = main_like;
    enum CXLinkageKind link = clang_getCursorLinkage(cur);
    f->is_static = link == CXLinkage_Internal || link == CXLinkage_UniqueExternal ||
                   (clang_getCursorKind(cur) == CXCursor_FunctionDecl &&
                    clang_Cursor_getStorageClass(cur) == CX_SC_Static);
    int idx = (int)c->r->funcs.len - 1;
    tb_strmap_put(&c->funcs, usr, idx);
    return idx;
}

// Whether a definition at this file belongs to the unit's own code as a linker sees it:
// the source itself or another file that is not a header (#include "x.c"). A header's
// definitions are in every unit that includes it (inline functions, templates), so they
// say nothing about which units link together.
static int in_unit_code(const ctx *c, const char *file) {
    if (!file) return 0;
    if (!strcmp(file, c->source)) return 1;
    const char *dot = strrchr(file, '.');
    static const char *const code[] = {".c", ".cc", ".cpp", ".cxx", ".cu", ".C", NULL};
    for (const char *const *e = code; dot && *e; e++)
        if (!strcmp(dot, *e)) return 1;
    return 0;
}

static void add_sym(ctx *c, const char *usr, const char *name, int kind, int defines) {
    if (!usr || c->captured_pass) return;  // the second OpenMP parse sees the same declarations
    const char *key = tb_pool_printf(&c->r->pool, "%c%s", defines ? 'd' : 'r', usr);
    if (tb_strmap_get(&c->syms, key)) return;
    tb_strmap_put(&c->syms, key, 1);
    *(ix_sym *)tb_vec_push(&c->r->syms) = (ix_sym){usr, name ? name : "(unnamed)", kind, defines};
}

// A function definition the linker sees as this unit's strong symbol: external linkage, not
// main (every binary has one: main_like), not inline, not a template or a member of one.
static void note_strong_function(ctx *c, CXCursor cur, const ix_func *f) {
    if (f->is_static || f->main_like || !in_unit_code(c, f->file)) return;
    enum CXCursorKind k = clang_getCursorKind(cur);
    if (k == CXCursor_FunctionTemplate || clang_Cursor_isFunctionInlined(cur) ||
        !clang_Cursor_isNull(clang_getSpecializedCursorTemplate(cur)))
        return;
    enum CXCursorKind parent = clang_getCursorKind(clang_getCursorSemanticParent(cur));
    if (parent == CXCursor_ClassTemplate || parent == CXCursor_ClassTemplatePartialSpecialization) return;
    if (clang_getCursorLinkage(cur) != CXLinkage_External) return;
    add_sym(c, f->usr, f->name, 'f', 1);
}

// A variable of external linkage: defined at top level here (int x = 1; struct e engine =
// {...}; a tentative definition too, which -fno-common links as one), or referred to.
static void note_variable(ctx *c, CXCursor var, int defines) {
    if (clang_getCursorKind(var) != CXCursor_VarDecl || clang_getCursorLinkage(var) != CXLinkage_External) return;
    if (defines) {
        unsigned line, col;
        if (!clang_isCursorDefinition(var) || !in_unit_code(c, ixv_file_loc(c, clang_getCursorLocation(var), &line, &col)))
            return;
    }
    add_sym(c, ixv_cxstr(c, clang_getCursorUSR(var)), ixv_cxstr(c, clang_getCursorSpelling(var)), 'v', defines);
}

// A function the unit calls or names gets a row from its first declaration (is_definition
// 0) unless the unit defines it, so it is a node of the call graph even when no unit of the
// project defines it (a library's API: nccl.h, mpi.h, cublas_v2.h, libc's): `def` finds its
// header:line, `callers` and `chain --to` end at it. A declaration nothing refers to is not
// recorded: the prototypes of every header a unit includes would be most of its rows.
const char *ixv_note_function(ctx *c, CXCursor fn) {
    CXCursor first = clang_getCanonicalCursor(fn);
    uint64_t decl = (uint64_t)(uintptr_t)first.data[0];  // libclang's Decl: the same function, the same row
    int *known = tb_u64map_get(&c->noted, decl);
    int idx = known ? *known : record_function(c, first, 0);
    if (!known && idx >= 0) tb_u64map_put(&c->noted, decl, idx);
    // a declaration without a file location (a builtin the compiler declared) has no row, but
    // the call still names it by its USR
    return idx >= 0 ? TB_VEC_AT(&c->r->funcs, ix_func, idx).usr : ixv_usr_of(c, fn, NULL);
}

static void add_ftarget(ctx *c, CXCursor field, CXCursor fn, CXCursor at) {
    const char *usr = ixv_note_function(c, fn);
    if (!usr) return;
    seen_add(c, ixv_strip(at));  // a field target, not a callback
    unsigned line, col;
    const char *file = ixv_file_loc(c, clang_getCursorLocation(at), &line, &col);
    ix_ftarget *t = tb_vec_push(&c->r->ftargets);
    t->record = record_name(c, clang_getCursorSemanticParent(field));
    t->field = ixv_cxstr(c, clang_getCursorSpelling(field));
    t->fn_usr = usr;
    t->file = file;
    t->line = line;
    if (!t->field) c->r->ftargets.len--;
}

static const char *unescape_literal(ctx *c, const char *lit) {
    // clang prints the literal as source: optional prefix (L, u, U, u8), quotes, escapes.
    const char *q = strchr(lit, '"');
    if (!q) return NULL;
    tb_buf b = {0};
    tb_buf_add(&b, "", 0);
    for (const char *s = q + 1; *s && *s != '"'; s++) {
        char ch = *s;
        if (ch == '\\' && s[1]) {
            s++;
            switch (*s) {
            case 'n': ch = '\n'; break;
            case 't': ch = '\t'; break;
            case 'r': ch = '\r'; break;
            case 'a': ch = '\a'; break;
            case 'b': ch = '\b'; break;
            case 'f': ch = '\f'; break;
            case 'v': ch = '\v'; break;
            case 'x': {
                unsigned v = 0;
                while (s[1] && strchr("0123456789abcdefABCDEF", s[1])) {
                    s++;
                    v = v * 16 + (unsigned)(*s <= '9' ? *s - '0' : (*s | 32) - 'a' + 10);
                }
                ch = (char)v;
                break;
            }
            default:
                if (*s >= '0' && *s <= '7') {
                    unsigned v = (unsigned)(*s - '0');
                    for (int k = 0; k < 2 && s[1] >= '0' && s[1] <= '7'; k++) v = v * 8 + (unsigned)(*++s - '0');
                    ch = (char)v;
                } else {
                    ch = *s;  // \\ \" \' \?
                }
            }
        }
        tb_buf_add(&b, &ch, 1);
    }
    const char *out = tb_pool_dupn(&c->r->pool, b.s, b.len);
    tb_buf_free(&b);
    return out;
}

static int name_in(const char *name, const char *const *list, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (ix_name_matches(list[i], name)) return 1;
    return 0;
}

// A constructor the compiler declared (no location of its own: it sits on its class's name).
static int implicit_member(CXCursor m) {
    CXCursor cls = clang_getCursorSemanticParent(m);
    return clang_equalLocations(clang_getCursorLocation(m), clang_getCursorLocation(cls));
}

// A function named in a body other than as a callee: a callbacks row.
static void add_callback(ctx *c, int caller, CXCursor ref, CXCursor fn, const char *passed_to) {
    const char *usr = ixv_note_function(c, fn);
    if (!usr) return;
    ix_callback *b = tb_vec_push(&c->r->callbacks);
    b->caller = caller;
    b->target_usr = usr;
    b->passed_to = passed_to;
    b->file = ixv_file_loc(c, clang_getCursorLocation(ref), &b->line, &b->col);
}

// The function references in a call that are not its arguments (its callee: f in f(x), and
// for an operator call the operator) are not callbacks; an argument naming a function is
// one, passed to callee_name.
static void call_refs(ctx *c, CXCursor call, int caller, const char *callee_name) {
    int nargs = clang_Cursor_getNumArguments(call);
    CXCursor args[64];
    int nkept = 0;
    for (int i = 0; i < nargs && nkept < 64; i++) args[nkept++] = ixv_strip(clang_Cursor_getArgument(call, (unsigned)i));
    kids ch = ixv_children(call);
    for (unsigned i = 0; i < ch.n && i < 8; i++) {
        CXCursor e = ixv_strip(ch.items[i]);
        if (clang_getCursorKind(e) != CXCursor_DeclRefExpr) continue;
        int is_arg = 0;
        for (int a = 0; a < nkept && !is_arg; a++)
            is_arg = clang_equalLocations(clang_getCursorLocation(args[a]), clang_getCursorLocation(e));
        if (!is_arg) seen_add(c, e);
    }
    if (caller < 0) return;
    for (int a = 0; a < nkept; a++) {
        if (clang_getCursorKind(args[a]) != CXCursor_DeclRefExpr || seen_has(c, args[a])) continue;
        CXCursor fn = clang_getCursorReferenced(args[a]);
        if (!ixv_is_function_kind(clang_getCursorKind(fn))) continue;
        add_callback(c, caller, args[a], fn, callee_name);
        seen_add(c, args[a]);
    }
}

// A call's callee and arguments told apart: in a C body by the walk that follows (ixv_roles),
// else by call_refs now.
static void told_apart(ctx *c, CXCursor call, int caller, const char *callee_name) {
    if (c->c_body)
        ixv_roles_call(&c->roles, call, callee_name);
    else
        call_refs(c, call, caller, callee_name);
}

static void handle_call(ctx *c, CXCursor call, int caller) {
    const char *callee_usr = NULL, *callee_name = NULL, *field = NULL;
    CXCursor ref = clang_getCursorReferenced(call);
    CXCursor callee = clang_getNullCursor();
    if (clang_Cursor_isNull(ref)) {
        // (*p->f)(x), or a dependent call in a template: look through the callee expression
        kids ch = ixv_children(call);
        callee = ch.n ? ixv_strip(ch.items[0]) : clang_getNullCursor();
        enum CXCursorKind ck = clang_getCursorKind(callee);
        if (ck == CXCursor_MemberRefExpr || ck == CXCursor_DeclRefExpr) ref = clang_getCursorReferenced(callee);
    }
    enum CXCursorKind rk = clang_getCursorKind(ref);
    const char *resolution = NULL, *candidates = NULL;
    if (rk == CXCursor_OverloadedDeclRef) {
        // an unresolved lookup (a call whose arguments depend on a template parameter, or an
        // overload set): its candidates, by name
        ixv_resolve_by_name(c, ref, &callee_name, &callee_usr, &resolution, &candidates);
        call_refs(c, call, caller, callee_name ? callee_name : "(indirect)");
    } else if (clang_Cursor_isNull(ref)) {
        if (clang_getCursorKind(callee) == CXCursor_MemberRefExpr) {
            // a member of a dependent type (this->flush() in a class template): libclang spells
            // no name for it, the source does
            callee_name = ixv_cxstr(c, clang_getCursorSpelling(callee));
            if (!callee_name) callee_name = ixv_member_name(c, callee);
            if (callee_name) ixv_resolve_dependent_member(c, callee, callee_name, &callee_usr, &resolution, &candidates);
        }
        if (!callee_name) callee_name = ixv_cxstr(c, clang_getCursorSpelling(call));
    } else if (ixv_is_function_kind(rk)) {
        callee_name = ixv_cxstr(c, clang_getCursorSpelling(ref));
        told_apart(c, call, caller, callee_name ? callee_name : "(indirect)");
        if ((rk == CXCursor_Constructor || rk == CXCursor_Destructor) &&
            (in_system_header(ref) || implicit_member(ref)))
            return;  // dim3(n), a class's implicit default constructor and the like
        if (!callee_name || !strncmp(callee_name, "__builtin_", 10) ||
            !strcmp(callee_name, "__cudaPushCallConfiguration"))  // the <<<...>>> of a kernel launch
            return;
        callee_usr = ixv_note_function(c, ref);
    } else if (rk == CXCursor_FieldDecl) {
        callee_name = ixv_cxstr(c, clang_getCursorSpelling(ref));
        if (callee_name && is_function_pointer(clang_getCursorType(ref)))
            field = tb_pool_printf(&c->r->pool, "%s.%s", record_name(c, clang_getCursorSemanticParent(ref)),
                                   callee_name);
    } else {
        callee_name = ixv_cxstr(c, clang_getCursorSpelling(ref));  // a function-pointer variable or parameter
    }
    if (!callee_name) callee_name = "(indirect)";
    if (!ixv_is_function_kind(rk) && rk != CXCursor_OverloadedDeclRef) told_apart(c, call, caller, field ? field : callee_name);

    CXSourceLocation loc = clang_getCursorLocation(call);
    unsigned line, col;
    const char *file = ixv_file_loc(c, loc, &line, &col);
    ix_call *k = tb_vec_push(&c->r->calls);
    k->caller = caller;
    k->callee_usr = callee_usr;
    k->callee_name = callee_name;
    k->field = field;
    k->file = file;
    k->line = line;
    k->col = col;
    k->in_macro = macro_at(c, loc);
    k->resolution = resolution;
    k->candidates = candidates;

    if (field) return;
    const ix_options *o = c->opt;
    int push = name_in(callee_name, o->range_push, o->nrange_push);
    int pop = !push && name_in(callee_name, o->range_pop, o->nrange_pop);
    if (!push && !pop) return;
    ix_range *r = tb_vec_push(&c->r->ranges);
    r->caller = caller;
    r->kind = push ? "push" : "pop";
    r->file = file;
    r->line = line;
    r->col = col;
    if (push && clang_Cursor_getNumArguments(call) >= 1) {
        CXCursor a = ixv_strip(clang_Cursor_getArgument(call, 0));
        if (clang_getCursorKind(a) == CXCursor_StringLiteral) {
            const char *lit = ixv_cxstr(c, clang_getCursorSpelling(a));
            if (lit) r->name = unescape_literal(c, lit);
        }
    }
}

static enum CXVisitorResult collect_field(CXCursor f, CXClientData d) {
    *(CXCursor *)tb_vec_push(d) = f;
    return CXVisit_Continue;
}

typedef struct init_state {
    ctx *c;
    tb_vec fields;  // of CXCursor: the record's fields, in order
    size_t next;
} init_state;

static enum CXChildVisitResult init_child(CXCursor ch, CXCursor parent, CXClientData d) {
    (void)parent;
    init_state *s = d;
    CXCursor field = clang_getNullCursor(), value = ch;
    if (clang_getCursorKind(ch) == CXCursor_UnexposedExpr) {
        kids k = ixv_children(ch);
        if (k.n >= 2 && k.n <= 8 && clang_getCursorKind(k.items[0]) == CXCursor_MemberRef) {
            // a designated initializer: .a = v (or .a.b = v: the last designator names the field)
            for (unsigned i = 0; i + 1 < k.n; i++)
                if (clang_getCursorKind(k.items[i]) == CXCursor_MemberRef) field = clang_getCursorReferenced(k.items[i]);
            value = k.items[k.n - 1];
            s->next = s->fields.len;  // a later positional initializer follows this field
            for (size_t i = 0; i < s->fields.len; i++)
                if (clang_equalCursors(TB_VEC_AT(&s->fields, CXCursor, i), field)) s->next = i + 1;
        }
    }
    if (clang_Cursor_isNull(field)) {
        if (s->next >= s->fields.len) return CXChildVisit_Continue;
        field = TB_VEC_AT(&s->fields, CXCursor, s->next++);
    }
    if (clang_getCursorKind(field) != CXCursor_FieldDecl || !is_function_pointer(clang_getCursorType(field)))
        return CXChildVisit_Continue;
    CXCursor fn = function_named(value);
    if (!clang_Cursor_isNull(fn)) add_ftarget(s->c, field, fn, value);
    return CXChildVisit_Continue;
}

// {.f = fn} and {"name", fn, ...}: the k-th positional initializer goes to the k-th field.
static void handle_init_list(ctx *c, CXCursor list) {
    CXType t = clang_getCanonicalType(clang_getCursorType(list));
    if (t.kind != CXType_Record) return;
    init_state s = {.c = c};
    tb_vec_init(&s.fields, sizeof(CXCursor), "record fields");
    clang_Type_visitFields(t, collect_field, &s.fields);
    if (s.fields.len) clang_visitChildren(list, init_child, &s);
    tb_vec_free(&s.fields);
}

// x.f = fn, p->f = fn, p->f = &fn.
static void handle_assign(ctx *c, CXCursor op) {
    kids k = ixv_children(op);
    if (k.n != 2) return;
    CXCursor lhs = ixv_strip(k.items[0]);
    if (clang_getCursorKind(lhs) != CXCursor_MemberRefExpr) return;
    CXCursor field = clang_getCursorReferenced(lhs);
    if (clang_getCursorKind(field) != CXCursor_FieldDecl || !is_function_pointer(clang_getCursorType(field))) return;
    CXCursor fn = function_named(k.items[1]);
    if (!clang_Cursor_isNull(fn)) add_ftarget(c, field, fn, k.items[1]);
}

// ---------------------------------------------------------------------------------------
// Walks

typedef struct body_state {
    ctx *c;
    int caller;
} body_state;

static void visit_function(ctx *c, CXCursor cur);
static enum CXChildVisitResult body_visit(CXCursor cur, CXCursor parent, CXClientData d);

// The children of an OpenMP directive (first pass): its clauses' expressions are walked as
// any other code (num_threads(f()) calls f); the statement it applies to is set aside for
// the second pass.
static enum CXChildVisitResult directive_child(CXCursor cur, CXCursor parent, CXClientData d) {
    body_state *s = d;
    if (clang_isStatement(clang_getCursorKind(cur))) {
        add_captured(s->c, parent);
        return CXChildVisit_Continue;
    }
    if (body_visit(cur, parent, d) == CXChildVisit_Recurse) clang_visitChildren(cur, body_visit, d);
    return CXChildVisit_Continue;
}

static enum CXChildVisitResult body_visit(CXCursor cur, CXCursor parent, CXClientData d) {
    body_state *s = d;
    enum CXCursorKind k = clang_getCursorKind(cur);
    if (ixv_is_function_kind(k)) {  // a local class's method
        visit_function(s->c, cur);
        return CXChildVisit_Continue;
    }
    if (is_omp_directive(k)) {
        clang_visitChildren(cur, directive_child, s);
        return CXChildVisit_Continue;
    }
    const char *passed_to = NULL;
    int role = s->c->c_body ? ixv_roles_of(&s->c->roles, cur, k, parent, &passed_to) : IXV_NONE;
    if (!in_pass(s->c, cur)) return CXChildVisit_Recurse;
    if (k == CXCursor_CallExpr && s->caller >= 0)
        handle_call(s->c, cur, s->caller);
    else if (k == CXCursor_DeclRefExpr && s->caller >= 0) {
        // a function named other than as a callee: passed, stored, returned, compared ...
        CXCursor fn = clang_getCursorReferenced(cur);
        if (ixv_is_function_kind(clang_getCursorKind(fn))) {
            if (role != IXV_CALLEE && !seen_has(s->c, cur))
                add_callback(s->c, s->caller, cur, fn, role == IXV_ARG ? passed_to : NULL);
        } else {
            note_variable(s->c, fn, 0);
        }
    }
    else if (k == CXCursor_InitListExpr)
        handle_init_list(s->c, cur);
    else if (k == CXCursor_BinaryOperator && clang_getCursorBinaryOperatorKind(cur) == CXBinaryOperator_Assign)
        handle_assign(s->c, cur);
    return CXChildVisit_Recurse;
}

static void visit_function(ctx *c, CXCursor cur) {
    if (!clang_isCursorDefinition(cur)) return;  // recorded when referred to (ixv_note_function)
    int idx = record_function(c, cur, 1);
    if (idx < 0) return;
    note_strong_function(c, cur, &TB_VEC_AT(&c->r->funcs, ix_func, idx));
    body_state s = {c, idx};
    CXCursor outer = c->function;  // a local class's method is walked inside its function
    int outer_c = c->c_body;
    c->function = cur;
    c->c_body = c->c_unit;
    clang_visitChildren(cur, body_visit, &s);
    c->function = outer;
    c->c_body = outer_c;
}

// A C type's declaration holds no code (no methods, no default member initialisers; what its
// sizes and constants call is never run): its fields and constants are not walked.
// (clang_getCursorLanguage cannot tell: it calls a C++ struct and function C.)
static int holds_no_code(const ctx *c, enum CXCursorKind k) {
    return c->c_unit &&
           (k == CXCursor_StructDecl || k == CXCursor_UnionDecl || k == CXCursor_EnumDecl || k == CXCursor_TypedefDecl);
}

enum CXChildVisitResult ixv_top_visit(CXCursor cur, CXCursor parent, CXClientData d) {
    (void)parent;
    ctx *c = d;
    // What is passed over wherever it is declared is passed over before its location is looked
    // up: a C type's declaration, and a function's declaration that is not its definition
    // (recorded when referred to). Most top-level cursors are these, the headers' prototypes
    // above all (over this project: 260,000 function declarations and 100,000 C types of
    // 417,000), and the system-header test costs more than the kind's.
    enum CXCursorKind k = clang_getCursorKind(cur);
    if (holds_no_code(c, k)) return CXChildVisit_Continue;
    int function = ixv_is_function_kind(k);
    if (function && !clang_isCursorDefinition(cur)) return CXChildVisit_Continue;
    if (in_system_header(cur)) return CXChildVisit_Continue;
    if (function) {
        c->seen_refs.len = 0;
        ixv_roles_clear(&c->roles);
        if (!c->captured_pass || holds_captured(c, cur)) visit_function(c, cur);
        return CXChildVisit_Continue;
    }
    if (!in_pass(c, cur)) return CXChildVisit_Recurse;
    if (k == CXCursor_VarDecl) note_variable(c, cur, 1);
    else if (k == CXCursor_DeclRefExpr) note_variable(c, clang_getCursorReferenced(cur), 0);  // in a global's initializer
    if (k == CXCursor_InitListExpr) handle_init_list(c, cur);  // initializers of globals
    else if (k == CXCursor_BinaryOperator && clang_getCursorBinaryOperatorKind(cur) == CXBinaryOperator_Assign)
        handle_assign(c, cur);
    return CXChildVisit_Recurse;
}

